//! The rules of `loopguard eval` on hand-made verdicts: outcomes, early alarms, delays, near
//! misses, judge load, folds and the choice of a sweep point. The real engine on real runs is
//! exercised end to end in tests/eval.rs.

use super::measure::*;
use super::*;
use crate::score::RunScore;
use crate::verdict::{Action, JudgeReport, LoopKind, Matched, TaskStatus, Verdict};

fn verdict(seq: u64, kind: LoopKind, reason: &str) -> Verdict {
    Verdict {
        task_id: "t".into(),
        seq,
        is_loop: kind != LoopKind::None,
        kind,
        loop_count: 0,
        counted: kind != LoopKind::None,
        similarity: None,
        matched: None,
        signature: None,
        action: Action::proceed(),
        reason: reason.into(),
        rule: None,
        judge: None,
        pivot_count: 0,
        status: TaskStatus::Active,
        similar_loops: Vec::new(),
        artifacts: Vec::new(),
    }
}

fn matched(mut v: Verdict, seq: u64, similarity: Option<f32>) -> Verdict {
    v.matched = Some(Matched {
        seq,
        text: format!("event {seq}"),
        similarity,
    });
    v.similarity = similarity;
    v
}

/// A status or verdict from its contract name (the field types are the report's concern).
fn named<T: serde::de::DeserializeOwned>(name: &str) -> T {
    serde_json::from_value(serde_json::Value::String(name.into())).expect("a contract name")
}

fn judged(mut v: Verdict, status: &str, verdict: Option<&str>, fallback: bool) -> Verdict {
    v.judge = Some(JudgeReport {
        status: named(status),
        verdict: verdict.map(named),
        confidence: None,
        reason: None,
        fallback,
    });
    v
}

fn new_work(seq: u64) -> Verdict {
    verdict(seq, LoopKind::None, "new work")
}

fn score(verdicts: Vec<Verdict>) -> RunScore {
    crate::score::summarize("r".into(), verdicts)
}

fn labelled(line: &str) -> LabelledRun {
    parse_labelled(line).unwrap()
}

fn run_json(id: &str, events: usize, extra: &str) -> String {
    let evs: Vec<String> = (0..events)
        .map(|i| format!(r#"{{"type":"failure","message":"m{i}"}}"#))
        .collect();
    format!(r#"{{"id":"{id}","events":[{}]{extra}}}"#, evs.join(","))
}

fn loop_run(id: &str, events: usize, flc: usize, kind: &str, reworded: bool) -> LabelledRun {
    labelled(&run_json(
        id,
        events,
        &format!(
            r#","label":"loop","first_loop_converted":{flc},"kind":"{kind}","reworded":{reworded}"#
        ),
    ))
}

fn no_loop(id: &str, events: usize) -> LabelledRun {
    labelled(&run_json(id, events, r#","label":"no_loop","kind":null"#))
}

/// A replay whose first loop verdict is at `first` (none: no loop) out of `events`.
fn replayed(events: usize, first: Option<usize>) -> Replayed {
    let vs: Vec<Verdict> = (0..events)
        .map(|i| {
            if first.is_some_and(|f| f <= i) {
                verdict(i as u64 + 1, LoopKind::ExactRepeat, "same")
            } else {
                new_work(i as u64 + 1)
            }
        })
        .collect();
    Replayed::of(&score(vs), None)
}

#[test]
fn labelled_lines_are_checked_with_paths() {
    let r = loop_run("a", 5, 3, "same_error", true);
    assert_eq!(
        (
            r.label,
            r.first_loop_converted,
            r.kind.as_deref(),
            r.reworded
        ),
        (true, Some(3), Some("same_error"), Some(true))
    );
    let err = |extra: &str| parse_labelled(&run_json("a", 3, extra)).unwrap_err();
    let e = err("");
    assert_eq!(e.path, "label");
    assert!(e.message.contains("--control"), "{e}");
    let e = err(r#","label":"loop""#);
    assert_eq!(e.path, "first_loop_converted");
    assert!(e.message.contains("missing"), "{e}");
    let e = err(r#","label":"loop","first_loop_converted":3"#);
    assert!(e.message.contains("one of the run's 3 events"), "{e}");
    let e = err(r#","label":"loop","first_loop_converted":-1"#);
    assert_eq!(e.path, "first_loop_converted");
    let e = err(r#","label":"no_loop","first_loop_converted":1"#);
    assert_eq!(e.path, "first_loop_converted");
    let e = err(r#","label":"no_loop","kind":"same_error""#);
    assert_eq!(e.path, "kind");
    let e = err(r#","label":"loop","first_loop_converted":1,"reworded":"yes""#);
    assert_eq!(e.path, "reworded");
    let e = err(r#","label":"loop","first_loop_converted":1,"kind":7"#);
    assert_eq!(e.path, "kind");
    let e = err(r#","label":"sometimes""#);
    assert_eq!(e.path, "label");
    // Event errors keep score's paths.
    let e = parse_labelled(r#"{"id":"a","label":"no_loop","events":[{"type":"failure"}]}"#)
        .unwrap_err();
    assert_eq!(e.path, "events[0]");
    // Controls: anything but a loop label.
    assert!(parse_control(&run_json("c", 1, r#","label":"no_loop""#)).is_ok());
    assert_eq!(
        parse_control(&run_json("c", 1, r#","label":"loop""#))
            .unwrap_err()
            .path,
        "label"
    );
}

#[test]
fn outcomes_follow_the_on_time_rule() {
    let r = loop_run("a", 20, 5, "exact_repeat", false);
    let at = |first: Option<usize>| Outcome::of(&r, &replayed(20, first));
    assert_eq!(at(Some(5)), Outcome::OnTime);
    assert_eq!(at(Some(5 + ON_TIME_SLACK)), Outcome::OnTime);
    assert_eq!(at(Some(6 + ON_TIME_SLACK)), Outcome::Late);
    assert_eq!(at(Some(0)), Outcome::OnTime, "early alarms are on time");
    assert_eq!(at(None), Outcome::Missed);
    let n = no_loop("b", 4);
    assert_eq!(Outcome::of(&n, &replayed(4, Some(3))), Outcome::FalseAlarm);
    assert_eq!(Outcome::of(&n, &replayed(4, None)), Outcome::Quiet);
}

#[test]
fn metrics_count_runs_delays_and_breakdowns() {
    let runs = [
        loop_run("on-time", 10, 4, "exact_repeat", false),
        loop_run("early", 10, 6, "same_error", true),
        loop_run("early-far", 10, 8, "same_error", true),
        loop_run("late", 10, 2, "reworded_repeat", true),
        loop_run("missed", 10, 2, "reworded_repeat", true),
        no_loop("false-alarm", 10),
        no_loop("quiet", 10),
    ];
    let reps = [
        replayed(10, Some(4)),
        replayed(10, Some(5)),
        replayed(10, Some(1)),
        replayed(10, Some(7)),
        replayed(10, None),
        replayed(10, Some(9)),
        replayed(10, None),
    ];
    let records: Vec<RunRecord> = runs
        .iter()
        .zip(&reps)
        .map(|(r, p)| RunRecord::of(r, p, None, None))
        .collect();
    let m = Metrics::of(
        &records.iter().collect::<Vec<_>>(),
        &reps.iter().collect::<Vec<_>>(),
    );
    assert_eq!(
        (m.runs, m.loops, m.no_loops, m.reworded_loops),
        (7, 5, 2, 4)
    );
    let c = m.rates.confusion;
    assert_eq!((c.tp, c.fp, c.tn, c.fn_), (4, 1, 1, 1));
    assert_eq!(m.rates.precision, Some(0.8));
    assert_eq!(m.rates.recall, Some(0.8));
    assert_eq!(
        (m.caught, m.on_time, m.late, m.missed, m.false_alarms),
        (4, 3, 1, 1, 1)
    );
    assert_eq!(m.reworded_on_time, 2, "early and early-far");
    assert_eq!((m.early, m.early_by_more_than_slack), (2, 1));
    // Delays 0, -1, -7, +5: median -0.5.
    assert_eq!(m.delay.measured, 4);
    assert_eq!(m.delay.median, Some(-0.5));
    assert_eq!(m.delay.max, Some(5));
    let kind = |k: &str| m.by_kind.iter().find(|b| b.value == k).unwrap();
    let se = kind("same_error");
    assert_eq!((se.loops, se.caught, se.on_time, se.early), (2, 2, 2, 2));
    let rr = kind("reworded_repeat");
    assert_eq!(
        (rr.loops, rr.late, rr.missed, rr.recall),
        (2, 1, 1, Some(0.5))
    );
    let rew = m
        .by_reworded
        .iter()
        .find(|b| b.value == "reworded")
        .unwrap();
    assert_eq!((rew.loops, rew.on_time), (4, 2));
    assert_eq!(m.fired_kinds.len(), 1);
    let f = &m.fired_kinds[0];
    assert_eq!((f.flagged, f.loops, f.false_alarms), (5, 4, 1));
    assert_eq!(m.judge.events, 70);
}

#[test]
fn the_near_miss_is_the_strongest_evidence_before_the_deadline() {
    let vs = vec![
        new_work(1),
        matched(new_work(2), 1, Some(0.80)), // near, grey band
        matched(verdict(3, LoopKind::None, "no loop"), 1, None), // the same, not counted
        judged(
            verdict(4, LoopKind::None, "ambiguous (...); fallback: not a loop"),
            "none",
            None,
            true,
        ),
        new_work(5),
        // After the deadline (first_loop_converted 2 + 2 = 4): ignored.
        verdict(6, LoopKind::None, "not a loop: progress since seq 1"),
    ];
    let r = Replayed::of(&score(vs.clone()), Some(2));
    let n = r.near_miss.unwrap();
    assert_eq!((n.strength, n.verdict.index), (NearMissKind::Ambiguous, 3));
    assert_eq!(n.verdict.judge.as_deref(), Some("none (fallback)"));
    // With an earlier deadline the ambiguous event is out of reach: the same event wins over
    // the grey-band one, and names the earlier event by index.
    let r = Replayed::of(&score(vs[..3].to_vec()), Some(0));
    let n = r.near_miss.unwrap();
    assert_eq!((n.strength, n.verdict.index), (NearMissKind::Matched, 2));
    assert_eq!(n.verdict.matched_index, Some(0));
    assert_eq!(n.verdict.matched_text.as_deref(), Some("event 1"));
    // A vetoed finding is the strongest.
    let r = Replayed::of(&score(vs), Some(4));
    assert_eq!(
        r.near_miss.map(|n| (n.strength, n.verdict.index)),
        Some((NearMissKind::Vetoed, 5))
    );
    // Nothing near: none.
    let r = Replayed::of(&score(vec![new_work(1), new_work(2)]), Some(0));
    assert!(r.near_miss.is_none());
    // Controls and no_loop runs have no deadline and no near miss.
    assert!(
        Replayed::of(&score(vec![matched(new_work(1), 1, Some(0.8))]), None)
            .near_miss
            .is_none()
    );
}

#[test]
fn judge_load_tells_asked_from_would_have_asked() {
    let vs = vec![
        judged(new_work(1), "none", None, true),
        judged(new_work(2), "ok", Some("progress"), false),
        judged(new_work(3), "budget_exhausted", None, true),
        judged(new_work(4), "timeout", None, true),
        new_work(5),
    ];
    let r = Replayed::of(&score(vs), None);
    assert_eq!((r.events, r.ambiguous, r.sent_to_judge), (5, 4, 2));
    let l = JudgeLoad::of([&r, &r].into_iter());
    assert_eq!((l.events, l.ambiguous, l.sent_to_judge), (10, 8, 4));
    assert_eq!(l.sent_share, Some(0.4));
}

#[test]
fn folds_are_stratified_balanced_and_seeded() {
    let mut runs = Vec::new();
    for i in 0..9 {
        runs.push(loop_run(&format!("s{i}"), 3, 1, "same_error", true));
    }
    for i in 0..4 {
        runs.push(loop_run(&format!("e{i}"), 3, 1, "exact_repeat", false));
    }
    for i in 0..8 {
        runs.push(no_loop(&format!("n{i}"), 3));
    }
    let f = assign_folds(&runs, 2, 7);
    let count = |prefix: &str, fold: usize| {
        runs.iter()
            .zip(&f)
            .filter(|(r, k)| r.run.id.starts_with(prefix) && **k == fold)
            .count()
    };
    for p in ["s", "e", "n"] {
        assert!(count(p, 0).abs_diff(count(p, 1)) <= 1, "stratum {p}: {f:?}");
    }
    let sizes = (
        f.iter().filter(|k| **k == 0).count(),
        f.iter().filter(|k| **k == 1).count(),
    );
    assert!(sizes.0.abs_diff(sizes.1) <= 1, "{sizes:?}");
    assert_eq!(f, assign_folds(&runs, 2, 7), "same seed, same split");
    assert_ne!(f, assign_folds(&runs, 2, 8), "another seed, another split");
    let f3 = assign_folds(&runs, 3, 1);
    assert!((0..3).all(|k| f3.iter().filter(|x| **x == k).count() == 7));
}

#[test]
fn the_choice_prefers_quiet_controls_then_f1() {
    let runs = [
        loop_run("a", 10, 2, "exact_repeat", false),
        loop_run("b", 10, 2, "exact_repeat", false),
        no_loop("c", 10),
    ];
    let metrics = |firsts: [Option<usize>; 3]| {
        let reps: Vec<Replayed> = firsts.iter().map(|f| replayed(10, *f)).collect();
        let recs: Vec<RunRecord> = runs
            .iter()
            .zip(&reps)
            .map(|(r, p)| RunRecord::of(r, p, None, None))
            .collect();
        Metrics::of(
            &recs.iter().collect::<Vec<_>>(),
            &reps.iter().collect::<Vec<_>>(),
        )
    };
    let all = metrics([Some(2), Some(2), None]); // F1 1
    let half = metrics([Some(2), None, None]); // F1 0.67
    let late = metrics([Some(2), Some(9), None]); // F1 1, one late
    assert_eq!(choose(&[(half.clone(), 0), (all.clone(), 0)]), 1);
    assert_eq!(
        choose(&[(half.clone(), 0), (all.clone(), 1)]),
        0,
        "controls first"
    );
    assert_eq!(
        choose(&[(late.clone(), 0), (all.clone(), 0)]),
        1,
        "on time breaks ties"
    );
    assert_eq!(
        choose(&[(all.clone(), 0), (all, 0)]),
        0,
        "then the earlier point"
    );
}
