//! `loopguard calibrate` end to end: the binary on small hand-made fixtures
//! (tests/fixtures/calibration/), the real model, the files it writes.
//!
//! The lexical scorers' numbers are checked against values computed by hand (the embedding's
//! cosines are not hand-computable; the metrics themselves are unit-tested in
//! src/calibrate/metrics.rs with hand-computed values and ties).

use loopguard::Config;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

const FIXTURES: &str = "tests/fixtures/calibration";

fn loopguard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(args)
        .output()
        .expect("the loopguard binary runs")
}

fn fixture(name: &str) -> String {
    format!("{FIXTURES}/{name}")
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn failed_with(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains(needle), "expected `{needle}` in: {stderr}");
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("report.json is JSON")
}

fn close(v: &Value, want: f64) -> bool {
    v.as_f64().is_some_and(|x| (x - want).abs() < 1e-9)
}

fn group<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group"] == name)
        .unwrap_or_else(|| panic!("no group {name}"))
}

fn scorer<'a>(group: &'a Value, name: &str) -> &'a Value {
    group["scorers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scorer"] == name)
        .unwrap_or_else(|| panic!("no scorer {name}"))
}

fn assert_svg(path: &Path) {
    let svg = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
        "{}",
        path.display()
    );
    // Axes, a title and at least one drawn series: not an empty canvas.
    assert!(
        svg.len() > 2000,
        "{} is only {} bytes",
        path.display(),
        svg.len()
    );
    assert!(
        svg.contains("<polyline") || svg.contains("fill-opacity=\"0.35\""),
        "{} draws nothing",
        path.display()
    );
}

#[test]
fn pairs_report_matches_hand_computed_values() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let input = format!("collaboration={}", fixture("pairs.jsonl"));
    let out = loopguard(&[
        "calibrate",
        "pairs",
        &input,
        "--out-dir",
        out_dir.to_str().unwrap(),
    ]);
    ok(&out);
    let report = read_json(&out_dir.join("report.json"));

    // Lines with a kind keep it; the others take the file's.
    let names: Vec<&str> = report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["group"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["failure", "collaboration", "all"]);

    let failure = group(&report, "failure");
    assert_eq!(
        (
            &failure["pairs"],
            &failure["positives"],
            &failure["negatives"]
        ),
        (&Value::from(7), &Value::from(4), &Value::from(3))
    );
    // Word Jaccard by hand. Positives: 1 ("build failed" twice), 5/6, 5/7, 1/3 ("module requests
    // not found" / "no module named requests"); negatives: 1/3 (a tie with that positive), 2/7,
    // 1/7.
    let jaccard = scorer(failure, "jaccard");
    // Every positive beats every negative except the 1/3 tie, which counts ½: 11.5 / 12.
    assert!(
        close(&jaccard["roc_auc"], 11.5 / 12.0),
        "{}",
        jaccard["roc_auc"]
    );
    // AP: the three top positives at precision 1, then the 1/3 group (1 positive, 1 negative)
    // at precision 4/5: (1 + 1 + 1 + 0.8) / 4.
    assert!(close(&jaccard["pr_auc"], 0.95), "{}", jaccard["pr_auc"]);
    // Best F1 at threshold 1/3: tp 4, fp 1, fn 0 → 8/9. The config value is the short decimal
    // nearest the middle of (2/7, 1/3].
    let best = &jaccard["best_f1"];
    assert!(close(&best["threshold"], 1.0 / 3.0), "{best}");
    assert!(close(&best["config_value"], 0.31), "{best}");
    assert!(close(&best["f1"], 8.0 / 9.0), "{best}");
    assert_eq!(
        (&best["tp"], &best["fp"], &best["fn"], &best["tn"]),
        (
            &Value::from(4),
            &Value::from(1),
            &Value::from(0),
            &Value::from(2)
        )
    );
    // Seed 004's fixed 0.8: the two pairs at 1 and 5/6 → tp 2, fp 0, fn 2 → F1 2/3.
    let seed = &jaccard["fixed"][0];
    assert_eq!(seed["name"], "seed 004 (0.8)");
    assert!(close(&seed["f1"], 2.0 / 3.0), "{seed}");
    assert!(
        close(&seed["precision"], 1.0) && close(&seed["recall"], 0.5),
        "{seed}"
    );
    // Exact after normalisation: one positive at 1, every other pair tied at 0 → (3 + 3·3·½) / 12.
    assert!(close(&scorer(failure, "exact")["roc_auc"], 0.625));

    // The embedding separates these rewordings from unrelated errors better than exact matching.
    let cosine = scorer(failure, "cosine")["roc_auc"].as_f64().unwrap();
    assert!(cosine > 0.8, "cosine ROC-AUC {cosine}");

    // The recommendation is the loopguard scorer's best-F1 point, and the snippet carries it.
    let rec = &failure["recommended"];
    let lg_best = &scorer(failure, "loopguard")["best_f1"];
    assert_eq!(rec["value"], lg_best["config_value"]);
    assert_eq!(rec["key"], "detect.similarity.failure");
    // Shown as the config's f32 reads (0.86, not 0.8600000143).
    let current = f64::from(Config::default().detect.similarity.failure);
    assert!((rec["current"].as_f64().unwrap() - current).abs() < 1e-6);
    let snippet = std::fs::read_to_string(out_dir.join("recommended.toml")).unwrap();
    let cfg = Config::from_toml_str(&snippet).unwrap_or_else(|e| panic!("{e}\n{snippet}"));
    let shipped = f64::from(cfg.detect.similarity.failure); // an f32 in the config
    assert!(
        (rec["value"].as_f64().unwrap() - shipped).abs() < 1e-6,
        "{snippet}"
    );
    let collab = group(&report, "collaboration")["recommended"]["value"]
        .as_f64()
        .unwrap();
    assert!((f64::from(cfg.detect.similarity.collaboration) - collab).abs() < 1e-6);
    // Kinds without pairs keep their defaults.
    assert_eq!(
        cfg.detect.similarity.response,
        Config::default().detect.similarity.response
    );
    assert_eq!(report["recommended"]["failure"], rec["value"]);

    for g in ["failure", "collaboration", "all"] {
        for chart in ["roc", "pr", "hist", "f1"] {
            assert_svg(&out_dir.join(format!("pairs-{g}-{chart}.svg")));
        }
    }
    let md = std::fs::read_to_string(out_dir.join("REPORT.md")).unwrap();
    assert!(
        md.contains("## failure") && md.contains("pairs-failure-roc.svg"),
        "{md}"
    );
    assert!(md.contains("| `jaccard` | 0.958 | 0.950 | 0.31 |"), "{md}");
}

#[test]
fn pairs_with_one_class_report_undefined_metrics_not_nan() {
    let dir = tempfile::tempdir().unwrap();
    let out = loopguard(&[
        "calibrate",
        "pairs",
        &fixture("one_class.jsonl"),
        "--out-dir",
        dir.path().to_str().unwrap(),
    ]);
    ok(&out);
    let text = std::fs::read_to_string(dir.path().join("report.json")).unwrap();
    assert!(
        !text.contains("NaN") && !text.contains("Infinity"),
        "{text}"
    );
    let report: Value = serde_json::from_str(&text).unwrap();
    let g = group(&report, "failure");
    assert!(
        g["notes"][0]
            .as_str()
            .unwrap()
            .contains("only positive pairs"),
        "{}",
        g["notes"]
    );
    let lg = scorer(g, "loopguard");
    assert!(lg["roc_auc"].is_null());
    assert!(lg["at_target_fpr"].is_null());
    assert!(close(&lg["pr_auc"], 1.0));
    // No negatives to draw a ROC curve with; the other charts are there.
    assert!(!dir.path().join("pairs-failure-roc.svg").exists());
    assert_svg(&dir.path().join("pairs-failure-hist.svg"));
    let snippet = std::fs::read_to_string(dir.path().join("recommended.toml")).unwrap();
    Config::from_toml_str(&snippet).unwrap_or_else(|e| panic!("{e}\n{snippet}"));
}

#[test]
fn bad_pair_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    // The blank line 2 still counts: the error names line 3 and the field.
    let out = loopguard(&[
        "calibrate",
        "pairs",
        &fixture("malformed_pairs.jsonl"),
        "--out-dir",
        d,
    ]);
    failed_with(
        &out,
        "malformed_pairs.jsonl: line 3: label: must be 0 or 1, got 2",
    );
    let out = loopguard(&[
        "calibrate",
        "pairs",
        &fixture("empty.jsonl"),
        "--out-dir",
        d,
    ]);
    failed_with(&out, "empty.jsonl: no labelled pairs (the file is empty)");
    let out = loopguard(&[
        "calibrate",
        "pairs",
        &fixture("missing.jsonl"),
        "--out-dir",
        d,
    ]);
    failed_with(&out, "cannot read tests/fixtures/calibration/missing.jsonl");
    let input = format!("failures={}", fixture("pairs.jsonl"));
    let out = loopguard(&["calibrate", "pairs", &input, "--out-dir", d]);
    failed_with(&out, "unknown kind `failures`");
    let out = loopguard(&[
        "calibrate",
        "pairs",
        &fixture("pairs.jsonl"),
        "--out-dir",
        d,
        "--target-precision",
        "1.5",
    ]);
    failed_with(&out, "must be between 0 and 1");
    // Nothing was written for failed runs.
    assert!(!dir.path().join("report.json").exists());
}

#[test]
fn runs_sweep_picks_the_point_without_false_alarms() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("runs");
    // The repeat detector alone: the dead-end rules also count a call failing the same way
    // three times, which would hide what `repeats.tool_call` does.
    let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args([
            "calibrate",
            "runs",
            &fixture("runs.jsonl"),
            "--sweep",
            "detect.repeats.tool_call=1,2,3",
            "--out-dir",
            out_dir.to_str().unwrap(),
        ])
        .env("LOOPGUARD_DETECT__DEAD_ENDS__OCCURRENCES", "1000")
        .output()
        .expect("the loopguard binary runs");
    ok(&out);
    let report = read_json(&out_dir.join("report.json"));
    assert_eq!(
        (&report["runs"], &report["loops"]),
        (&Value::from(7), &Value::from(4))
    );
    let points = report["points"].as_array().unwrap();
    assert_eq!(points.len(), 3);

    // repeats 1: the second `git status` is already a loop — a false alarm in the no_loop run,
    // and an early alarm in the loop run that checks the status twice before its real loop.
    let p1 = &points[0];
    assert_eq!(p1["settings"][0]["value"], "1");
    // Negatives: 3 no_loop runs and the loop-free start of the 4 loop runs; 2 false positives.
    assert_eq!(
        (&p1["tp"], &p1["fp"], &p1["tn"]),
        (&Value::from(4), &Value::from(2), &Value::from(5))
    );
    assert_eq!(
        (
            &p1["false_alarms"],
            &p1["early_alarms"],
            &p1["loop_free_prefixes"]
        ),
        (&Value::from(1), &Value::from(1), &Value::from(4))
    );
    // repeats 2: every loop caught, no false or early alarm; a repeated call is caught at its
    // third occurrence (one event after the onset), the reworded failure and request at the onset.
    let p2 = &points[1];
    assert_eq!(
        (&p2["tp"], &p2["fp"], &p2["fn"]),
        (&Value::from(4), &Value::from(0), &Value::from(0))
    );
    assert_eq!(p2["early_alarms"], 0);
    assert!(close(&p2["f1"], 1.0));
    assert_eq!(p2["delay"]["measured"], 4);
    assert_eq!(p2["delay"]["at_onset"], 2);
    assert!(close(&p2["delay"]["mean"], 0.5), "{}", p2["delay"]);
    // repeats 3: three identical calls are not enough any more.
    let p3 = &points[2];
    assert_eq!((&p3["tp"], &p3["fn"]), (&Value::from(2), &Value::from(2)));
    assert!(close(&p3["recall"], 0.5));

    assert_eq!(report["recommended"]["point"], 1);
    let calls = p2["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group"] == "calls")
        .unwrap();
    assert_eq!(
        (&calls["runs"], &calls["caught"], &calls["false_alarms"]),
        (&Value::from(4), &Value::from(2), &Value::from(0))
    );

    // Later points reuse the first point's embeddings.
    assert!(
        points[1..].iter().all(|p| p["texts_embedded"] == 0),
        "{}",
        report["points"]
    );

    let snippet = std::fs::read_to_string(out_dir.join("recommended.toml")).unwrap();
    let cfg = Config::from_toml_str(&snippet).unwrap_or_else(|e| panic!("{e}\n{snippet}"));
    assert_eq!(cfg.detect.repeats.tool_call, 2);
    assert_eq!(cfg.detect.similarity, Config::default().detect.similarity);
    for chart in [
        "runs-f1.svg",
        "runs-recall.svg",
        "runs-false-alarms.svg",
        "runs-delay.svg",
    ] {
        assert_svg(&out_dir.join(chart));
    }
    let md = std::fs::read_to_string(out_dir.join("REPORT.md")).unwrap();
    assert!(
        md.contains("## Recommended operating point")
            && md.contains("`detect.repeats.tool_call=2`"),
        "{md}"
    );
}

#[test]
fn bad_run_input_and_sweeps_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = loopguard(&[
        "calibrate",
        "runs",
        &fixture("malformed_runs.jsonl"),
        "--out-dir",
        d,
    ]);
    failed_with(
        &out,
        "malformed_runs.jsonl: line 2: label: a labelled run needs",
    );
    let out = loopguard(&["calibrate", "runs", &fixture("empty.jsonl"), "--out-dir", d]);
    failed_with(&out, "empty.jsonl: no labelled runs (the file is empty)");
    let out = loopguard(&[
        "calibrate",
        "runs",
        &fixture("runs.jsonl"),
        "--out-dir",
        d,
        "--sweep",
        "detect.similarity.tool_cal=0.9",
    ]);
    failed_with(&out, "tool_cal");
    let out = loopguard(&[
        "calibrate",
        "runs",
        &fixture("runs.jsonl"),
        "--out-dir",
        d,
        "--sweep",
        "detect.similarity.tool_call",
    ]);
    failed_with(&out, "expected KEY=VALUES");
    assert!(!dir.path().join("report.json").exists());
}

#[test]
fn help_documents_every_option() {
    for sub in [
        &["calibrate", "--help"][..],
        &["calibrate", "pairs", "--help"],
        &["calibrate", "runs", "--help"],
    ] {
        let out = loopguard(sub);
        ok(&out);
        let help = String::from_utf8_lossy(&out.stdout);
        // clap prints an option's doc comment on the line after it: an undocumented option is
        // followed directly by the next option.
        let lines: Vec<&str> = help.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            if t.starts_with("--") || t.starts_with("-h, ") {
                let documented = t.contains("  ")
                    || lines.get(i + 1).is_some_and(|n| {
                        let n = n.trim_start();
                        !n.is_empty() && !n.starts_with("--") && !n.starts_with("-h, ")
                    });
                assert!(
                    documented,
                    "undocumented option in `{}`: {line}\n{help}",
                    sub.join(" ")
                );
            }
        }
    }
    let out = loopguard(&["calibrate", "runs", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for opt in [
        "--sweep",
        "--out-dir",
        "--false-alarm-slack",
        "--max-false-alarm-rate",
        "--jobs",
        "--cache-entries",
    ] {
        assert!(help.contains(opt), "{opt} missing:\n{help}");
    }
    let out = loopguard(&["calibrate", "pairs", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for opt in [
        "--target-precision",
        "--target-fpr",
        "--recommend",
        "--batch",
        "KIND=FILE",
    ] {
        assert!(help.contains(opt), "{opt} missing:\n{help}");
    }
}

#[test]
fn shipped_defaults_are_the_calibrated_ones() {
    // docs/calibration/run.sh writes recommended.toml; loopguard.toml must ship the same values.
    let path = "docs/calibration/recommended.toml";
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let calibrated = Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let shipped = Config::default();
    assert_eq!(
        calibrated.detect.similarity, shipped.detect.similarity,
        "loopguard.toml [detect.similarity] differs from {path}"
    );
    assert_eq!(
        calibrated.detect.repeats, shipped.detect.repeats,
        "loopguard.toml [detect.repeats] differs from {path}"
    );
}
