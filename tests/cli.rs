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

/// Score `input` (a file of runs) with `--html`; the JSON lines and the page.
fn score_html(input: &str) -> (std::process::Output, String, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let runs = dir.join("runs.jsonl");
    std::fs::write(&runs, input).unwrap();
    let report = dir.join("report.html");
    let out = loopguard()
        .args(["score", runs.to_str().unwrap(), "--html"])
        .arg(&report)
        .output()
        .unwrap();
    let html = std::fs::read_to_string(&report).unwrap_or_default();
    (out, html, tmp)
}

#[test]
fn score_html_shows_each_run_its_events_and_why_it_was_flagged() {
    let mut input = std::fs::read_to_string("tests/fixtures/runs.jsonl").unwrap();
    // A run whose texts try to be markup, labelled as a loop it is not.
    input.push_str(
        &serde_json::json!({"id": "<b>markup</b>", "label": "loop", "events": [
            {"type": "response", "text": "<script>alert('x')</script> & done"},
            {"type": "tool_call", "tool": "bash", "args": {"cmd": "ls \"<dir>\""},
             "result": {"output": "</td></tr></table>", "exit_code": 2}}
        ]})
        .to_string(),
    );
    input.push('\n');
    let (out, html, dir) = score_html(&input);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("wrote"), "{stderr}");
    // The JSON lines are written as without --html.
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 4);
    assert!(html.starts_with("<!doctype html>") && html.trim_end().ends_with("</html>"));

    // The summary: every run, flagged or not, with its first loop linked.
    assert!(
        html.contains("4 runs") && html.contains("2 flagged as loops"),
        "{html}"
    );
    assert!(html.contains("<a href=\"#r1-e2\">event 2</a> · semantic repeat"));
    assert!(html.contains("<a href=\"#r3-e1\">event 1</a> · collaboration loop"));

    // Each run is a section; flagged ones open, loops highlighted, the first outlined.
    assert!(html.contains("<section class=\"run flagged\" id=\"r1\"><details open>"));
    assert!(html.contains("<section class=\"run clean\" id=\"r2\"><details>"));
    assert!(html.contains("<tr class=\"ev loop first\" id=\"r1-e2\">"));
    assert!(html.contains("<tr class=\"ev loop\" id=\"r1-e3\">"));
    assert!(html.contains("<tr class=\"ev\" id=\"r1-e1\">"));
    // Why: what it repeats (a link to the earlier event), how similar, what was done.
    let row = html
        .split("id=\"r1-e2\">")
        .nth(1)
        .unwrap()
        .split("</tr>")
        .next()
        .unwrap();
    assert!(row.contains("semantic repeat"), "{row}");
    assert!(
        row.contains("repeats <a href=\"#r1-e0\">event 0</a>"),
        "{row}"
    );
    assert!(row.contains("cosine 0."), "{row}");
    assert!(row.contains("act-warn"), "{row}");
    assert!(row.contains("reworded"), "{row}");
    // The raw event as the agent sent it, not the normalised form.
    assert!(row.contains("Uncaught TypeError: cannot read property &#39;name&#39; of undefined in UserCard.tsx line 14"), "{row}");
    assert!(html.contains("act-pause"), "the gate shows");
    // Subtask events name their task; the subtask's loop links into the root's events.
    assert!(html.contains("review-7/retry"));
    assert!(html.contains("repeats <a href=\"#r3-e0\">event 0</a>"));

    // Agent texts are text, never markup; labels are checked against the verdict.
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; done"));
    assert!(html.contains("&lt;/td&gt;&lt;/tr&gt;&lt;/table&gt;"));
    assert!(html.contains("&lt;b&gt;markup&lt;/b&gt;"));
    assert!(!html.contains("<script") && !html.contains("<b>markup"));
    assert!(html.contains("failed, exit 2"));
    assert!(html.contains("loop <span class=\"bad\">✗ missed</span>"));
    assert!(html.contains("1 labelled run: 0 agree with their label"));

    // Self-contained: nothing fetched from anywhere.
    for external in [
        "<link", "<script", "src=", "http://", "https://", "@import", "url(",
    ] {
        assert!(!html.contains(external), "{external} in the report");
    }
    assert!(
        !dir.path().join("report.html.part").exists(),
        "the part file is gone"
    );
}

#[test]
fn score_html_leaves_nothing_behind_on_bad_input_and_names_an_unwritable_path() {
    let input = "{\"id\": \"ok\", \"events\": []}\n{\"id\": \"bad\", \"events\": [{\"type\": \"failure\"}]}\n";
    let (out, html, dir) = score_html(input);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 2"));
    assert!(html.is_empty(), "no report for a failed pass");
    let gone = |f: &str| !dir.path().join(f).exists();
    assert!(gone("report.html") && gone("report.html.part"));

    let out = loopguard()
        .args([
            "score",
            "tests/fixtures/runs.jsonl",
            "--html",
            "no/such/dir/report.html",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot create no/such/dir/report.html"),
        "{err}"
    );
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
