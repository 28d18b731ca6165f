use super::*;

#[test]
fn parses_pairs_and_names_bad_fields() {
    let (a, b, l, k) =
        parse_pair(r#"{"a":"x","b":"y","label":1,"kind":"failure","id":7}"#).unwrap();
    assert_eq!(
        (a.as_str(), b.as_str(), l, k),
        ("x", "y", true, Some(PairKind::Failure))
    );
    let (.., l, k) = parse_pair(r#"{"a":"x","b":"y","label":false}"#).unwrap();
    assert_eq!((l, k), (false, None));
    let e = parse_pair(r#"{"a":"x","b":"y","label":2}"#).unwrap_err();
    assert_eq!(e.path, "label");
    let e = parse_pair(r#"{"a":"x","b":3,"label":0}"#).unwrap_err();
    assert_eq!(e.path, "b");
    let e = parse_pair(r#"{"a":"x","label":0}"#).unwrap_err();
    assert!(e.message.contains("missing field `b`"), "{e}");
    let e = parse_pair(r#"{"a":"x","b":"y","label":0,"kind":"failures"}"#).unwrap_err();
    assert_eq!(e.path, "kind");
    assert!(e.message.contains("tool_call"), "{e}");
    let e = parse_pair(r#"{"a":"x","b":"y","label":0} x"#).unwrap_err();
    assert!(e.message.contains("trailing"), "{e}");
    assert!(parse_pair("not json").is_err());
}

#[test]
fn lexical_baselines() {
    assert_eq!(word_jaccard("a b c", "a b d"), 0.5);
    assert_eq!(word_jaccard("a, b", "b a"), 1.0);
    assert_eq!(word_jaccard("", ""), 1.0);
    assert_eq!(word_jaccard("a", ""), 0.0);
}

#[test]
fn loopguard_scorer_mirrors_the_matcher() {
    let side = |t: &str| Side::of(None, t, 500);
    // Equal after normalisation: a match at any threshold.
    let s = score_pair(
        None,
        &side("Error at 10:00:00"),
        &side("error at 11:30:05"),
        0.2,
    );
    assert_eq!(s[0], f64::INFINITY);
    assert_eq!(s[2], 1.0);
    // Numbers differ: never a match, whatever the cosine.
    let s = score_pair(
        None,
        &side("3 tests failing"),
        &side("5 tests failing"),
        0.99,
    );
    assert_eq!(s[0], f64::NEG_INFINITY);
    assert_eq!(s[1], 0.99);
    // A failure message inside a longer one (24+ characters) is the same failure, even when
    // the longer one adds numbers.
    let short = "typeerror: cannot read property x";
    let long = "uncaught typeerror: cannot read property x in 3 places";
    let failure = |t: &str| Side::of(Some(PairKind::Failure), t, 500);
    assert_eq!(
        score_pair(
            Some(PairKind::Failure),
            &failure(short),
            &failure(long),
            0.5
        )[0],
        f64::INFINITY
    );
    assert_eq!(
        score_pair(Some(PairKind::Response), &side(short), &side(long), 0.5)[0],
        f64::NEG_INFINITY
    );
    // Otherwise the cosine.
    assert_eq!(score_pair(None, &side("a b"), &side("c d"), 0.42)[0], 0.42);
}

/// The calibration's loopguard score and the engine's matcher agree on every pair of the
/// calibration fixtures (and on pairs that exercise each guard), at every threshold: the
/// matcher links two events as a match exactly when the score is at or above the threshold.
/// Real model: the cosines are the ones calibration would see.
#[test]
fn calibration_measures_the_engines_own_rule() {
    use crate::config::DetectConfig;
    use crate::detect::matching::Part;
    use crate::signature::ErrorType;
    use crate::state::{Channel, Entry, EntryBody, ResultSig, TaskState};

    let text = std::fs::read_to_string("tests/fixtures/calibration/pairs.jsonl").unwrap();
    let mut pairs: Vec<(String, String, Option<PairKind>)> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (a, b, _, kind) = parse_pair(l).unwrap();
            (a, b, kind)
        })
        .collect();
    let extra = [
        // Another resource: never the same call, however close the cosine.
        (
            "sqlfluff lint a.sql",
            "sqlfluff lint b.sql",
            PairKind::ToolCall,
        ),
        ("cat src/app.py", "cat  src/app.py", PairKind::ToolCall),
        (
            "python reproduce.py",
            "python3 reproduce.py",
            PairKind::ToolCall,
        ),
        // Other numbers: a later page, not a repeat.
        (
            "sed -n 100,150p x.py",
            "sed -n 150,200p x.py",
            PairKind::ToolCall,
        ),
        ("3 tests failing", "5 tests failing", PairKind::Result),
        (
            "No matches found for \"foo\"",
            "No matches found for \"foo\" in /testbed",
            PairKind::Result,
        ),
        // A failure message inside a longer one.
        (
            "TypeError: cannot read property x",
            "Uncaught TypeError: cannot read property x at UserCard (src/a.tsx:14)",
            PairKind::Failure,
        ),
        (
            "Ask the backend team for the schema",
            "Ask backend for the schema again",
            PairKind::Collaboration,
        ),
        (
            "I will now run the tests.",
            "Let me run the tests now.",
            PairKind::Response,
        ),
    ];
    pairs.extend(extra.map(|(a, b, k)| (a.to_string(), b.to_string(), Some(k))));

    let cfg = Config::default();
    let embedder = crate::embed::Embedder::load_model(&cfg.model)
        .unwrap_or_else(|e| panic!("this test runs the real model: {e}"));
    let entry = |seq: u64, channel: Channel, part: Part, sig: TextSig| {
        let body = match (channel, part) {
            (Channel::Failure, _) => EntryBody::Failure {
                sig,
                error_type: ErrorType::Unknown,
                external: false,
                exception: None,
                location: None,
                context_hash: None,
                signature_hash: String::new(),
            },
            (Channel::ToolCall, Part::Main) => EntryBody::ToolCall {
                tool: "bash".into(),
                call: sig,
                result: None,
                passive: false,
            },
            (Channel::ToolCall, Part::Result) => EntryBody::ToolCall {
                tool: "bash".into(),
                call: compared_text(Channel::ToolCall, Part::Main, "same call", 500),
                result: Some(ResultSig {
                    sig,
                    failed: false,
                    negative: false,
                    trivial: false,
                    external: false,
                    outcome: None,
                    echo: 0,
                    residue: None,
                    shape: Default::default(),
                    numbered: None,
                }),
                passive: false,
            },
            (Channel::Collaboration, _) => EntryBody::Collaboration {
                from_agent: "a".into(),
                to_agent: "b".into(),
                to_group: false,
                sig,
                artifacts: Vec::new(),
                protocol: false,
            },
            _ => EntryBody::Response {
                sha256: String::new(),
                sig,
            },
        };
        Entry {
            seq,
            ts: 0,
            agent_id: None,
            body,
            same_as: Vec::new(),
            novel: false,
            courtesy: false,
            closest_earlier: None,
        }
    };
    let mut checked = 0;
    for (a, b, kind) in &pairs {
        let (channel, part) = PairKind::compared_as(*kind);
        let (sa, sb) = (Side::of(*kind, a, 500), Side::of(*kind, b, 500));
        let v = embedder
            .embed_blocking(&[sa.sig.text.clone(), sb.sig.text.clone()])
            .unwrap();
        let cos = f64::from(cosine(&v[0], &v[1]));
        let score = score_pair(*kind, &sa, &sb, cos)[0];
        let (mut ea, mut eb) = (sa.sig.clone(), sb.sig.clone());
        ea.vector = Some(v[0].clone());
        eb.vector = Some(v[1].clone());
        let mut state = TaskState::new("t", 0);
        state.push_entry(entry(1, channel, part, ea), 10);
        let new = entry(2, channel, part, eb);
        let mut thresholds: Vec<f64> = (0..=20).map(|i| f64::from(i) * 0.05).collect();
        thresholds.push(cos);
        for t in thresholds {
            let mut d: DetectConfig = cfg.detect.clone();
            let t32 = t as f32;
            match (kind, part) {
                (Some(PairKind::Failure), _) => d.similarity.failure = t32,
                (Some(PairKind::Collaboration), _) => d.similarity.collaboration = t32,
                (Some(PairKind::ToolCall), _) => d.similarity.tool_call = t32,
                (Some(PairKind::Result), _) => d.similarity.result = t32,
                _ => d.similarity.response = t32,
            }
            let links = matching::links(&d, &state, &new);
            let level = match part {
                Part::Main => links[0].text,
                Part::Result => links[0].result.unwrap(),
            };
            assert_eq!(
                level.is_match(),
                score >= f64::from(t32),
                "{kind:?} {a:?} vs {b:?} at {t}: matcher {level:?}, calibration score {score}"
            );
            checked += 1;
        }
    }
    assert!(checked > 20 * pairs.len());
}
