//! `loopguard eval` end to end: the binary on small hand-made fixtures (tests/fixtures/eval/),
//! the real model, the report it prints and writes. The rules themselves are unit-tested on
//! hand-made verdicts in src/eval/tests.rs.
//!
//! labelled.jsonl holds one run per outcome: `on-time` (caught at first_loop_converted), `early`
//! (caught two events before it), `late` (caught five after), `missed` (three different failures:
//! ambiguous, "not a loop" without a judge), `false-alarm` (a no_loop run repeating a failing
//! script) and `quiet`. control.jsonl holds three healthy runs, one of them stuck.

mod common;

use common::{call_with, engine, failure, feed};
use loopguard::Config;
use serde_json::{json, Value};
use std::process::{Command, Output};

const LABELLED: &str = "tests/fixtures/eval/labelled.jsonl";
const CONTROL: &str = "tests/fixtures/eval/control.jsonl";

fn loopguard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(args)
        .output()
        .expect("the loopguard binary runs")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf-8 report")
}

fn failed_with(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains(needle), "expected `{needle}` in: {stderr}");
}

/// Run eval with a JSON report and return (stdout, report).
fn eval(extra: &[&str]) -> (String, Value) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let mut args = vec!["eval", LABELLED, "--control", CONTROL, "--json"];
    let json_arg = json.to_str().unwrap().to_string();
    args.push(&json_arg);
    args.extend_from_slice(extra);
    let stdout = ok(&loopguard(&args));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).expect("JSON report");
    (stdout, report)
}

fn run<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["result"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no run {id}"))
}

#[test]
fn every_outcome_is_measured_and_listed() {
    let (text, r) = eval(&[]);
    // How much of the replay needed the model: every event of both files, and the reworded runs'
    // texts at least.
    let events: usize = [LABELLED, CONTROL]
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str::<Value>(&l).unwrap()["events"]
                .as_array()
                .unwrap()
                .len()
        })
        .sum();
    let point = &r["points"][0];
    assert_eq!(point["events"], json!(events), "{point}");
    let model_texts = point["model_texts"].as_u64().unwrap();
    assert!(model_texts > 0 && model_texts < events as u64, "{point}");
    assert!(
        text.contains(&format!(
            "the model's vectors of {model_texts} texts for the {events} events"
        )),
        "{text}"
    );
    let m = &r["result"]["metrics"];
    // 4 loops (3 caught), 2 no_loop (1 flagged).
    assert_eq!(
        (&m["tp"], &m["fp"], &m["tn"], &m["fn"]),
        (&json!(3), &json!(1), &json!(1), &json!(1))
    );
    assert_eq!(
        (&m["precision"], &m["recall"]),
        (&json!(0.75), &json!(0.75))
    );
    assert_eq!(
        (
            &m["on_time"],
            &m["early"],
            &m["late"],
            &m["missed"],
            &m["false_alarms"]
        ),
        (&json!(2), &json!(1), &json!(1), &json!(1), &json!(1))
    );
    // Reworded loops: `late` (not on time) and `missed`.
    assert_eq!(
        (&m["reworded_loops"], &m["reworded_on_time"]),
        (&json!(2), &json!(0))
    );
    // Delays: on-time 0, early -2, late +5.
    assert_eq!(
        (&m["delay"]["median"], &m["delay"]["max"]),
        (&json!(0.0), &json!(5))
    );

    let on_time = run(&r, "on-time");
    assert_eq!(
        (&on_time["outcome"], &on_time["delay"]),
        (&json!("on_time"), &json!(0))
    );
    assert_eq!(on_time["fired"]["kind"], "exact_repeat");
    assert_eq!(on_time["fired"]["matched_index"], 1);

    let early = run(&r, "early");
    assert_eq!(
        (&early["outcome"], &early["early"], &early["delay"]),
        (&json!("on_time"), &json!(true), &json!(-2))
    );

    let late = run(&r, "late");
    assert_eq!(
        (&late["outcome"], &late["first_loop_index"]),
        (&json!("late"), &json!(6))
    );
    // Before the deadline the second `ls src` was the same event, not yet a loop.
    let near = &late["near_miss"];
    assert_eq!(
        (&near["strength"], &near["index"], &near["matched_index"]),
        (&json!("matched"), &json!(1), &json!(0))
    );
    assert_eq!(near["reason"], "no loop");
    assert!(
        near["matched_text"].as_str().unwrap().contains("ls src"),
        "{near}"
    );

    let missed = run(&r, "missed");
    assert_eq!(missed["outcome"], "missed");
    let near = &missed["near_miss"];
    assert_eq!(
        (&near["strength"], &near["index"]),
        (&json!("ambiguous"), &json!(2))
    );
    assert!(
        near["reason"].as_str().unwrap().starts_with("ambiguous"),
        "{near}"
    );

    let fa = run(&r, "false-alarm");
    assert_eq!(
        (&fa["outcome"], &fa["fired"]["index"]),
        (&json!("false_alarm"), &json!(2))
    );
    assert_eq!(run(&r, "quiet")["outcome"], "quiet");

    // Breakdowns by kind and rewording.
    let by_kind = m["by_kind"].as_array().unwrap();
    let kind = |k: &str| by_kind.iter().find(|b| b["value"] == k).unwrap();
    assert_eq!(
        (
            &kind("exact_repeat")["loops"],
            &kind("exact_repeat")["on_time"]
        ),
        (&json!(2), &json!(2))
    );
    assert_eq!(kind("same_error")["missed"], 1);
    assert_eq!(kind("reworded_repeat")["late"], 1);
    let rew = m["by_reworded"].as_array().unwrap();
    assert!(rew
        .iter()
        .any(|b| b["value"] == "reworded" && b["loops"] == 2 && b["caught"] == 1));

    // Controls: one of three flagged, named with the verdict.
    let c = &r["result"]["controls"][0];
    assert_eq!((&c["runs"], &c["flagged"]), (&json!(3), &json!(1)));
    assert!((c["share_flagged"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-9);
    assert_eq!(c["flagged_runs"][0]["id"], "stuck");
    assert_eq!(c["flagged_runs"][0]["fired"]["index"], 3);

    // Without a judge, one event was ambiguous and none was sent.
    assert_eq!(
        (&m["judge"]["ambiguous"], &m["judge"]["sent_to_judge"]),
        (&json!(1), &json!(0))
    );
    assert_eq!(r["judge"]["mode"], "none");

    // The text says the same, and lists the runs by id.
    for needle in [
        "| 0.750 | 0.750 | 0.750 | 3/4 | 2/4 | 0/2 | 1 | 1 | 1 | 1/2 | 0.0 |",
        "## Missed loops (1)",
        "- `missed` (same_error, reworded, low confidence), first_loop_converted 2: near miss (ambiguous) at 2",
        "## False alarms (1)\n\n- `false-alarm` at 2: `exact_repeat`",
        "- `late` (reworded_repeat, reworded, high confidence), first_loop_converted 1, caught 5 events later at 6",
        "- `early` (exact_repeat, not reworded, medium confidence), first_loop_converted 4, flagged 2 events before at 2",
        "| `tests/fixtures/eval/control.jsonl` | 3 | 1 | 33.3% |",
        "- `stuck` at 3: `exact_repeat`",
    ] {
        assert!(text.contains(needle), "`{needle}` not in:\n{text}");
    }
}

#[test]
fn test_judges_bound_what_a_judge_can_do() {
    let (_, none) = eval(&[]);
    let (_, progress) = eval(&["--judge-always", "progress"]);
    let (text, no_progress) = eval(&["--judge-always", "no-progress"]);
    // Always "progress" changes nothing but the count of events sent.
    for key in ["tp", "fp", "fn", "on_time", "early", "late"] {
        assert_eq!(
            progress["result"]["metrics"][key], none["result"]["metrics"][key],
            "{key}"
        );
    }
    assert_eq!(progress["judge"]["mode"], "always_progress");
    assert_eq!(progress["judge"]["calls"], 1);
    assert_eq!(progress["result"]["metrics"]["judge"]["sent_to_judge"], 1);
    // Always "no_progress" turns the ambiguous run into a catch, on time.
    let m = &no_progress["result"]["metrics"];
    assert_eq!(
        (&m["tp"], &m["fn"], &m["on_time"]),
        (&json!(4), &json!(0), &json!(3))
    );
    let missed = run(&no_progress, "missed");
    assert_eq!(
        (&missed["outcome"], &missed["fired"]["index"]),
        (&json!("on_time"), &json!(2))
    );
    assert_eq!(missed["fired"]["judge"], "no_progress");
    assert_eq!(no_progress["judge"]["calls"], 1);
    assert!(
        text.contains("Judge: always_no_progress (1 question answered)"),
        "{text}"
    );
}

#[test]
fn folds_and_a_sweep_choose_on_one_fold_and_measure_on_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("kinds.svg");
    let (text, r) = eval(&[
        "--folds",
        "2",
        "--seed",
        "3",
        "--sweep",
        "detect.repeats.tool_call=1,2",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(r["points"].as_array().unwrap().len(), 2);
    // repeats 1 flags at the second occurrence: everything caught by repeats 2 is caught
    // earlier, and the `late` run is on time.
    let p1 = &r["points"][0]["metrics"];
    let p2 = &r["points"][1]["metrics"];
    assert_eq!((&p1["on_time"], &p2["on_time"]), (&json!(3), &json!(2)));
    assert_eq!(r["focus"], 0);
    let folds = &r["folds"];
    assert_eq!((&folds["folds"], &folds["seed"]), (&json!(2), &json!(3)));
    let per_fold = folds["per_fold"].as_array().unwrap();
    assert_eq!(per_fold.len(), 2);
    let sizes: Vec<u64> = per_fold
        .iter()
        .map(|f| f["runs"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes.iter().sum::<u64>(), 6);
    for f in per_fold {
        assert!(f["chosen"].is_u64() && f["train"]["runs"].is_u64(), "{f}");
        assert_eq!(
            f["train"]["runs"].as_u64().unwrap() + f["runs"].as_u64().unwrap(),
            6
        );
    }
    // Every run is measured once, on its own fold, at its fold's point.
    let cv = &folds["cross_validated"];
    assert_eq!(cv["metrics"]["runs"], 6);
    for rec in cv["runs"].as_array().unwrap() {
        let fold = rec["fold"].as_u64().unwrap() as usize;
        assert_eq!(rec["point"], per_fold[fold]["chosen"], "{rec}");
    }
    assert!(
        text.contains("## 2 folds (stratified by label and kind, seed 3)"),
        "{text}"
    );
    assert!(text.contains("Cross-validated"), "{text}");
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(
        svg.contains(">same_error (1)</text>") && svg.contains(">exact_repeat (4)</text>"),
        "{svg}"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let out = loopguard(&["eval", "tests/fixtures/eval/bad_event.jsonl"]);
    failed_with(&out, "bad_event.jsonl: line 3: events[1]");
    let out = loopguard(&["eval", "tests/fixtures/eval/missing_point.jsonl"]);
    failed_with(
        &out,
        "missing_point.jsonl: line 2: first_loop_converted: missing: a run labelled \"loop\" needs",
    );
    let out = loopguard(&["eval", "tests/fixtures/eval/unlabelled.jsonl"]);
    failed_with(&out, "unlabelled.jsonl: line 1: label: missing");
    // A labelled file given as a control: its loop runs are not healthy.
    let out = loopguard(&["eval", LABELLED, "--control", LABELLED]);
    failed_with(
        &out,
        "labelled.jsonl: line 1: label: a control run is healthy",
    );
    let out = loopguard(&["eval", "tests/fixtures/eval/nope.jsonl"]);
    failed_with(&out, "cannot read tests/fixtures/eval/nope.jsonl");
    let out = loopguard(&["eval", LABELLED, "--sweep", "detect.repeats.tool_cal=1,2"]);
    failed_with(&out, "tool_cal");
    let out = loopguard(&["eval", LABELLED, "--folds", "7"]);
    failed_with(&out, "--folds 7");
    let out = loopguard(&["eval", LABELLED, "--json", "/nonexistent/dir/r.json"]);
    failed_with(&out, "cannot write /nonexistent/dir/r.json");
}

/// The engine names the near miss on verdicts that are not loops: what `eval` lists for a miss.
#[tokio::test]
async fn a_verdict_that_is_not_a_loop_names_its_closest_earlier_event() {
    let e = engine(Config::default());
    let result = "No documentation pages matched your query.";
    let vs = feed(
        &e,
        vec![
            call_with(
                "t",
                "search_docs",
                json!({"query": "how to configure retry backoff in the http client"}),
                result,
                false,
            ),
            // Reworded once: the same call, not yet a loop (repeats.tool_call = 2).
            call_with(
                "t",
                "search_docs",
                json!({"query": "http client retry backoff configuration"}),
                result,
                false,
            ),
            failure("t", "disk quota exceeded on /var/lib/postgresql"),
            call_with(
                "t",
                "read_file",
                json!({"path": "README.md"}),
                "# demo",
                false,
            ),
        ],
    )
    .await;
    assert!(!vs[1].is_loop, "{:?}", vs[1]);
    let m = vs[1].matched.as_ref().expect("the earlier call is named");
    assert_eq!(m.seq, 1);
    let sim = vs[1].similarity.expect("a reworded call has a cosine");
    assert!(sim >= e.config().detect.similarity.tool_call, "{sim}");
    assert_eq!(m.similarity, Some(sim));
    // Nothing comes near: nothing named.
    assert!(
        vs[2].matched.is_none() && vs[2].similarity.is_none(),
        "{:?}",
        vs[2]
    );
    assert!(vs[3].matched.is_none(), "{:?}", vs[3]);
}

/// `eval` in a fresh process with the embedding cache on disk in `cache`: (stderr, report).
fn eval_cached(cache: &std::path::Path) -> (String, Value) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(["eval", LABELLED, "--control", CONTROL, "--json"])
        .arg(&json)
        .env("LOOPGUARD_MODEL__DISK_CACHE", cache)
        .output()
        .expect("the loopguard binary runs");
    ok(&out);
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).expect("JSON report");
    (String::from_utf8_lossy(&out.stderr).into_owned(), report)
}

/// "embeddings: M by the model, D from the cache on disk" of a command's summary.
fn cache_line(stderr: &str) -> (u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.contains("embeddings: "))
        .unwrap_or_else(|| panic!("no embeddings line in: {stderr}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = |w: &str| words.iter().position(|x| *x == w).unwrap();
    let model = words[at("embeddings:") + 1].parse().unwrap();
    let disk = words[at("from") - 1].parse().unwrap();
    (model, disk)
}

#[test]
fn a_second_eval_takes_the_vectors_from_disk_and_gives_the_same_verdicts() {
    let cache = tempfile::tempdir().unwrap();
    let (cold_err, cold) = eval_cached(cache.path());
    let (warm_err, warm) = eval_cached(cache.path());
    let (embedded, from_disk) = cache_line(&cold_err);
    assert!(embedded > 0 && from_disk == 0, "{cold_err}");
    // Every text the first run embedded is answered from disk: the model is not asked again.
    assert_eq!(cache_line(&warm_err), (0, embedded), "{warm_err}");
    assert_eq!(cold["result"], warm["result"]);
    assert_eq!(cold["controls"], warm["controls"]);
    // The figure of what detection needs from the model does not depend on the cache.
    assert_eq!(
        cold["points"][0]["model_texts"],
        warm["points"][0]["model_texts"]
    );

    // A damaged cache costs time, never an answer: the damaged segment is dropped and its texts
    // embedded again.
    let segments: Vec<_> = walk(cache.path())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "lgvec"))
        .collect();
    assert_eq!(segments.len(), 1, "{segments:?}");
    let mut bytes = std::fs::read(&segments[0]).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&segments[0], bytes).unwrap();
    let (damaged_err, damaged) = eval_cached(cache.path());
    assert_eq!(cache_line(&damaged_err), (embedded, 0), "{damaged_err}");
    assert!(damaged_err.contains("checksum mismatch"), "{damaged_err}");
    assert_eq!(cold["result"], damaged["result"]);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
