//! The `loopguard` binary end to end: `score` on a fixture, stdin, errors with line numbers.

use std::io::Write;
use std::process::{Command, Stdio};

fn loopguard() -> Command {
    Command::new(env!("CARGO_BIN_EXE_loopguard"))
}

fn score(input: &str, args: &[&str]) -> (bool, String, String) {
    let mut child = loopguard()
        .arg("score")
        .args(args)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn scores_the_fixture_runs() {
    let out = loopguard()
        .args(["score", "tests/fixtures/runs.jsonl"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    let by_id = |id: &str| lines.iter().find(|l| l["id"] == id).unwrap();
    let r = by_id("reworded-failure-loop");
    assert_eq!(r["loop"], true);
    assert_eq!(r["first_loop_index"], 2);
    assert_eq!(r["kinds"][0], "semantic_repeat");
    assert_eq!(r["verdicts"].as_array().unwrap().len(), 5);
    assert_eq!(r["verdicts"][2]["loop"], true);
    assert_eq!(r["verdicts"][4]["action"]["type"], "pause");
    let p = by_id("paging-is-progress");
    assert_eq!(p["loop"], false);
    assert_eq!(p["first_loop_index"], serde_json::Value::Null);
    let c = by_id("collaboration-chain");
    assert_eq!(c["kinds"][0], "collaboration_loop");
    // The subtask's verdict carries its own id; its loop counts toward the root.
    assert_eq!(c["verdicts"][1]["task_id"], "review-7/retry");
    assert_eq!(c["max_loop_count"], 2);
}

#[test]
fn output_keeps_input_order_and_summary_drops_verdicts() {
    let mut input = String::new();
    for i in 0..20 {
        input.push_str(&format!(
            "{{\"id\": \"run-{i}\", \"events\": [{{\"type\": \"response\", \"text\": \"step {i}\"}}]}}\n"
        ));
    }
    let (ok, out, err) = score(&input, &["--summary", "--jobs", "4"]);
    assert!(ok, "{err}");
    let ids: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ids, (0..20).map(|i| format!("run-{i}")).collect::<Vec<_>>());
    assert!(out.lines().all(|l| l.contains("\"verdicts\":[]")));
}

#[test]
fn bad_input_names_the_line_and_path() {
    let input = "{\"id\": \"ok\", \"events\": []}\n\n{\"id\": \"bad\", \"events\": [{\"type\": \"failure\"}]}\n";
    let (ok, _, err) = score(input, &[]);
    assert!(!ok);
    assert!(
        err.contains("line 3")
            && err.contains("events[0]")
            && err.contains("missing field `message`"),
        "{err}"
    );

    let (ok, _, err) = score("{\"id\": \"x\", \"events\": [\n", &[]);
    assert!(!ok);
    assert!(err.contains("line 1"), "{err}");

    let (ok, _, err) = score(
        "{\"id\": \"x\", \"events\": [{\"type\": \"teleport\"}]}\n",
        &[],
    );
    assert!(!ok);
    assert!(err.contains("unknown variant `teleport`"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_missing_file_and_a_bad_config_are_clear_errors() {
    let out = loopguard()
        .args(["score", "no/such/file.jsonl"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open no/such/file.jsonl"));

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "[detect]\nwindw = 3\n").unwrap();
    let out = loopguard()
        .args(["--config", cfg.to_str().unwrap(), "config"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("windw"), "{err}");
}

#[test]
fn config_prints_the_effective_configuration() {
    let out = loopguard()
        .arg("config")
        .env("LOOPGUARD_POLICY__GATE_AT", "7")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let parsed: loopguard::Config = loopguard::Config::from_toml_str(&text).unwrap();
    assert_eq!(parsed.policy.gate_at, 7);
}

#[test]
fn config_redacts_the_auth_token() {
    let out = loopguard()
        .arg("config")
        .env("LOOPGUARD_SERVER__AUTH_TOKEN", "s3cret-token")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("s3cret-token"), "{text}");
    assert!(text.contains("auth_token = \"<redacted>\""), "{text}");
}
