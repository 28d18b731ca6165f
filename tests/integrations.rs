//! Where agents already run, end to end on the real binary and the real model: recorded Claude
//! Code and Gemini CLI hook payloads (tests/fixtures/hooks/, in the shapes of the agents' hook
//! references) through the HTTP hook and through `loopguard hook` as a command hook, and the
//! command hook failing open when the service is down. The OpenTelemetry SDK exporting to
//! `/v1/traces` is tests/otel/ (Python, run by .ci/integrations.sh); `/v1/traces` itself is also
//! tested through the router in src/server/ingest/otlp/tests.rs.

mod common;

use common::{http_client, Backend, Server};
use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};

fn fixture(name: &str) -> Vec<Value> {
    let path = format!("tests/fixtures/hooks/{name}");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn hook(client: &reqwest::Client, s: &Server, agent: &str, payload: &Value) -> Value {
    let r = client
        .post(s.url(&format!("/v1/hooks/{agent}")))
        .json(payload)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{payload}\n→ {body}");
    body
}

/// `loopguard hook <agent>` with `payload` on stdin: exit code, stdout, stderr.
fn command_hook(agent: &str, args: &[&str], payload: &[u8]) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(["hook", agent])
        .args(args)
        .env_remove("LOOPGUARD_URL")
        .env_remove("LOOPGUARD_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start loopguard hook");
    // A hook that refuses its arguments exits without reading its input: the pipe may be
    // closed before the payload is written, which is its answer, not the test's failure.
    if let Err(e) = child.stdin.take().unwrap().write_all(payload) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().expect("an exit code"),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn is_block(a: &Value) -> bool {
    a.get("decision").is_some() || a["continue"] == false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_asking_again_after_the_same_failure_is_told_to_the_agent_with_the_prompt() {
    // The person's prompts are the person's turns: the agent's tool calls answer them. Asked a
    // third time after the same failure came back each time, the agent reads so next to the
    // prompt; the prompt itself goes through.
    let backend = Backend::embedded();
    let s = backend.start(&[]);
    let client = http_client();
    s.ready(&client).await;
    let session = "7d2e9a40-asks-again";
    let base = json!({"session_id": session, "transcript_path": "/tmp/t.jsonl", "cwd": "/home/dev/app",
                      "permission_mode": "default"});
    let with = |extra: Value| {
        let mut v = base.clone();
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    let prompt = with(json!({"hook_event_name": "UserPromptSubmit",
                             "prompt": "The app still crashes on start, please fix it."}));
    let crash = with(
        json!({"hook_event_name": "PostToolUseFailure", "tool_name": "Bash",
        "tool_input": {"command": "python app.py"}, "tool_use_id": "toolu_01",
        "error": "Exit code 1\nTraceback (most recent call last):\n  File \"app.py\", line 3, in <module>\n    import flask\nModuleNotFoundError: No module named 'flask'"}),
    );
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(hook(&client, &s, "claude-code", &prompt).await);
        hook(&client, &s, "claude-code", &crash).await;
    }
    assert_eq!(answers[0], json!({}), "{answers:#?}");
    let told = &answers[2]["hookSpecificOutput"];
    assert_eq!(told["hookEventName"], "UserPromptSubmit", "{answers:#?}");
    assert!(told["additionalContext"].is_string(), "{answers:#?}");
    assert!(
        !is_block(&answers[2]),
        "a prompt is never refused: {answers:#?}"
    );
    let task: Value = s.get_json(&client, &format!("/v1/tasks/{session}")).await;
    let rules: Vec<&str> = task["last_verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["rule"].as_str())
        .collect();
    assert!(rules.contains(&"collaboration.asked_again"), "{task:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_a_reworded_loop_is_blocked_with_the_directive_then_paused_and_resumed_by_a_prompt(
) {
    let backend = Backend::embedded();
    let s = backend.start(&[]);
    let client = http_client();
    s.ready(&client).await;
    let lines = fixture("claude-code-stuck.jsonl");
    let mut answers = Vec::new();
    for l in &lines {
        answers.push(hook(&client, &s, "claude-code", l).await);
    }
    let name = |i: usize| lines[i]["hook_event_name"].as_str().unwrap();
    // The failing test run five times in five wordings (PostToolUseFailure).
    let failures: Vec<usize> = (0..lines.len())
        .filter(|i| name(*i) == "PostToolUseFailure")
        .collect();
    assert_eq!(failures.len(), 5);
    let after: Vec<&Value> = failures.iter().map(|i| &answers[*i]).collect();
    assert_eq!(after[0], &json!({}), "the first run is not a loop");
    let warned = after
        .iter()
        .position(|a| a["hookSpecificOutput"]["additionalContext"].is_string());
    let pivot = after
        .iter()
        .position(|a| a["decision"] == "block")
        .unwrap_or_else(|| panic!("no block: {after:#?}"));
    assert!(
        warned.is_some_and(|w| w < pivot),
        "a warning comes before the block: {after:#?}"
    );
    let reason = after[pivot]["reason"].as_str().unwrap();
    assert!(reason.contains("STRATEGY PIVOT REQUIRED"), "{reason}");
    assert!(after[..pivot].iter().all(|a| !is_block(a)));
    let gate = after[4];
    assert_eq!(gate["continue"], false, "{gate:#}");
    assert!(
        gate["stopReason"]
            .as_str()
            .unwrap()
            .contains("paused this session"),
        "{gate:#}"
    );

    // Every PreToolUse before the gate lets the call through; after it, the next is denied.
    let pre: Vec<usize> = (0..lines.len())
        .filter(|i| name(*i) == "PreToolUse")
        .collect();
    let (last_pre, before) = pre.split_last().unwrap();
    let denied = before.last().unwrap();
    for i in &before[..before.len() - 1] {
        assert_eq!(answers[*i], json!({}), "line {i}");
    }
    assert_eq!(
        answers[*denied]["hookSpecificOutput"]["permissionDecision"], "deny",
        "{:#}",
        answers[*denied]
    );
    assert_eq!(answers[*denied]["continue"], false);
    // The person's next prompt resumes the session; the call after it goes through.
    let prompt = lines.len() - 2;
    assert_eq!(name(prompt), "UserPromptSubmit");
    assert!(answers[prompt]["systemMessage"]
        .as_str()
        .unwrap()
        .contains("resumed"));
    assert_eq!(answers[*last_pre], json!({}));

    let session = lines[0]["session_id"].as_str().unwrap();
    let task: Value = s.get_json(&client, &format!("/v1/tasks/{session}")).await;
    assert_eq!(
        (task["status"].as_str(), task["loop_count"].as_u64()),
        (Some("active"), Some(0)),
        "{task:#}"
    );
    let history: Value = s
        .get_json(&client, &format!("/v1/tasks/{session}/history"))
        .await;
    let events: Vec<&str> = history["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["event"].as_str().unwrap())
        .collect();
    assert!(
        events.contains(&"pivot_issued") && events.contains(&"gate_triggered"),
        "{events:?}"
    );
    let reset = history["records"].as_array().unwrap().last().unwrap();
    assert_eq!(
        (reset["event"].as_str(), reset["by"].as_str()),
        (Some("loop_counter_reset"), Some("claude-code user"))
    );
    let metrics = s.get_text(&client, "/metrics").await;
    assert!(
        metrics.contains(r#"loopguard_hook_events_total{agent="claude_code",point="tool_failed",answer="block"} 1"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_a_healthy_session_paging_fixing_and_rerunning_is_never_blocked() {
    let backend = Backend::embedded();
    let s = backend.start(&[]);
    let client = http_client();
    s.ready(&client).await;
    for l in fixture("claude-code-healthy.jsonl") {
        let a = hook(&client, &s, "claude-code", &l).await;
        assert_eq!(a, json!({}), "{l}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_api_errors_are_failures_and_a_repeated_reply_is_answered_at_stop() {
    let backend = Backend::embedded();
    let s = backend.start(&[]);
    let client = http_client();
    s.ready(&client).await;
    let lines = fixture("claude-code-replies.jsonl");
    let mut answers = Vec::new();
    for l in &lines {
        answers.push(hook(&client, &s, "claude-code", l).await);
    }
    // Rate limits are external: never a stop; the second is answered as one.
    assert!(
        !is_block(&answers[0]) && !is_block(&answers[1]),
        "{answers:#?}"
    );
    assert!(
        answers[1]["systemMessage"]
            .as_str()
            .unwrap()
            .contains("external"),
        "{answers:#?}"
    );
    // The same reply, reworded: the fourth one repeats the three before it
    // (detect.repeats.response).
    assert_eq!(
        &answers[2..5],
        &[json!({}), json!({}), json!({})],
        "{answers:#?}"
    );
    assert!(
        answers[5]["systemMessage"].is_string(),
        "a hint to the person: {answers:#?}"
    );
    assert!(!is_block(&answers[5]));
    let session = lines[0]["session_id"].as_str().unwrap();
    let task: Value = s.get_json(&client, &format!("/v1/tasks/{session}")).await;
    let kinds: Vec<(&str, &str)> = task["last_verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["event_type"].as_str().unwrap(),
                v["kind"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds[..2],
        [("failure", "none"), ("failure", "exact_repeat")],
        "{kinds:?}"
    );
    assert_eq!(kinds[5], ("response", "similar_response"), "{kinds:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_command_hook_puts_the_directive_next_to_the_result_and_holds_the_gate() {
    let backend = Backend::embedded();
    let s = backend.start(&[]);
    let client = http_client();
    s.ready(&client).await;
    let lines = fixture("gemini-cli-stuck.jsonl");
    let mut answers = Vec::new();
    for l in &lines {
        let (code, out, err) =
            command_hook("gemini-cli", &["--url", &s.base], l.to_string().as_bytes());
        assert_eq!(code, 0, "{l}\n{err}");
        answers
            .push(serde_json::from_str::<Value>(&out).unwrap_or_else(|e| panic!("{out:?}: {e}")));
    }
    let name = |i: usize| lines[i]["hook_event_name"].as_str().unwrap();
    let after: Vec<&Value> = (0..lines.len())
        .filter(|i| name(*i) == "AfterTool")
        .map(|i| &answers[i])
        .collect();
    assert_eq!(after.len(), 6);
    let context = |a: &Value| {
        a["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let pivot = after
        .iter()
        .position(|a| context(a).contains("STRATEGY PIVOT REQUIRED"))
        .unwrap_or_else(|| panic!("no directive: {after:#?}"));
    assert!(after[..pivot].iter().all(|a| !is_block(a)), "{after:#?}");
    assert_eq!(after[5]["continue"], false, "the gate: {after:#?}");
    let denied = &answers[lines.len() - 3];
    assert_eq!(name(lines.len() - 3), "BeforeTool");
    assert_eq!(
        (denied["decision"].as_str(), &denied["continue"]),
        (Some("deny"), &json!(false)),
        "{denied:#}"
    );
    assert!(answers[lines.len() - 2]["systemMessage"]
        .as_str()
        .unwrap()
        .contains("resumed"));
    assert_eq!(answers[lines.len() - 1], json!({}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_hook_fails_open_with_exit_1_when_the_service_is_down_or_refuses() {
    let payload = fixture("claude-code-stuck.jsonl")[4].to_string();
    // Nothing listens there: the server that did was stopped.
    let backend = Backend::embedded();
    let mut s = backend.start(&[]);
    let url = s.base.clone();
    s.terminate();
    let (code, out, err) = command_hook(
        "claude-code",
        &["--url", &url, "--timeout-ms", "2000"],
        payload.as_bytes(),
    );
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        err.contains("not checked for loops") && err.contains("cannot connect"),
        "{err}"
    );

    // With a token: the right one is answered, a wrong one fails open.
    let s = Backend::embedded().start(&["--set", "server.auth_token=\"hook-token-1\""]);
    s.ready(&http_client()).await;
    let (code, out, err) = command_hook(
        "claude-code",
        &["--url", &s.base, "--token", "hook-token-1"],
        payload.as_bytes(),
    );
    assert_eq!((code, out.as_str()), (0, "{}"), "{err}");
    let (code, out, err) = command_hook(
        "claude-code",
        &["--url", &s.base, "--token", "wrong"],
        payload.as_bytes(),
    );
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(err.contains("401"), "{err}");
    // Not JSON on stdin: the service's 400 is reported, the agent goes on.
    let (code, _, err) = command_hook(
        "claude-code",
        &["--url", &s.base, "--token", "hook-token-1"],
        b"{not json",
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("400 invalid_json"), "{err}");
    // A misconfigured hook never exits 2, which would block the tool call.
    let (code, _, err) = command_hook("claude-cod", &[], payload.as_bytes());
    assert_eq!(code, 1, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_hook_payloads_are_400_naming_the_field_and_change_nothing() {
    let backend = Backend::embedded();
    let s = backend.start(&[]);
    let client = http_client();
    s.ready(&client).await;
    let good = fixture("claude-code-stuck.jsonl")[4].clone();
    let mut cases: Vec<(Value, &str)> = Vec::new();
    let mut no_session = good.clone();
    no_session.as_object_mut().unwrap().remove("session_id");
    cases.push((no_session, "."));
    let mut empty = good.clone();
    empty["session_id"] = json!("");
    cases.push((empty, "session_id"));
    let mut array_input = good.clone();
    array_input["tool_input"] = json!(["python3", "test_textstats.py"]);
    cases.push((array_input, "tool_input"));
    let mut numeric_error = good.clone();
    numeric_error["error"] = json!(1);
    cases.push((numeric_error, "error"));
    let mut gemini = cases[..3].to_vec();
    let mut numeric_reply = good.clone();
    numeric_reply["prompt_response"] = json!(42);
    gemini.push((numeric_reply, "prompt_response"));
    let all = cases
        .into_iter()
        .map(|c| ("claude-code", c))
        .chain(gemini.into_iter().map(|c| ("gemini-cli", c)));
    for (agent, (body, path)) in all {
        let r = client
            .post(s.url(&format!("/v1/hooks/{agent}")))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let err: Value = r.json().await.unwrap();
        assert_eq!(
            (status.as_u16(), err["path"].as_str()),
            (400, Some(path)),
            "{agent} {body}: {err}"
        );
    }
    let r = client
        .post(s.url("/v1/hooks/claude-code"))
        .header("content-type", "application/json")
        .body("{\"session_id\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let list: Value = s.get_json(&client, "/v1/tasks").await;
    assert_eq!(list["total"], 0, "{list}");
}

/// `VmHWM` (peak resident set) and `VmRSS` of a process, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{name} in {status}"))
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// A protobuf `ExportTraceServiceRequest` of `n` empty spans in one scope of one resource:
/// two bytes a span, the most spans a body can hold.
fn empty_spans_protobuf(n: usize) -> Vec<u8> {
    fn varint(mut v: usize, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    let mut scope = vec![0x12]; // ResourceSpans.scope_spans
    let spans_len = 2 * n;
    varint(spans_len, &mut scope);
    scope.extend(std::iter::repeat_n([0x12u8, 0x00], n).flatten()); // ScopeSpans.spans, empty
    let mut body = vec![0x0a]; // ExportTraceServiceRequest.resource_spans
    varint(scope.len(), &mut body);
    body.extend(scope);
    body
}

/// Issue 43: a body of millions of empty spans (8 MiB of protobuf raised the service's RSS by
/// 1.5 GiB) is refused while it is decoded, `413 too_many_items` naming `otlp.max_spans`, and
/// the service's peak memory stays within a few body sizes of where it was; the same for OTLP
/// JSON. Memory afterwards is back near its level before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_otlp_body_of_millions_of_spans_is_refused_without_the_memory_it_would_take() {
    let s = Backend::embedded().start(&[]);
    let client = http_client();
    s.ready(&client).await;
    let pid = s.child.id();
    let limit = 8 << 20;
    let n = (limit - 16) / 2;
    let protobuf = empty_spans_protobuf(n);
    assert!(protobuf.len() <= limit, "{}", protobuf.len());
    let mut json = br#"{"resourceSpans":[{"scopeSpans":[{"spans":["#.to_vec();
    while json.len() < limit - 40 {
        json.extend_from_slice(br#"{"name":"x"},"#);
    }
    json.extend_from_slice(br#"{"name":"x"}]}]}]}"#);
    let (before, rss_before) = memory_kib(pid);
    let send = |body: Vec<u8>, media: &'static str| {
        let client = client.clone();
        let url = s.url("/v1/traces");
        async move {
            let r = client
                .post(url)
                .header("content-type", media)
                .body(body)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    // Two at once, as in the probe, then the JSON one.
    let (a, b) = tokio::join!(
        send(protobuf.clone(), "application/x-protobuf"),
        send(protobuf, "application/x-protobuf")
    );
    let (c, d) = tokio::join!(
        send(json.clone(), "application/json"),
        send(json, "application/json")
    );
    for (status, v) in [a, b, c, d] {
        assert_eq!(status, 413, "{v}");
        assert_eq!(v["code"], "too_many_items", "{v}");
        assert!(
            v["message"].as_str().unwrap().contains("otlp.max_spans"),
            "names the limit: {v}"
        );
    }
    let (peak, rss_after) = memory_kib(pid);
    let grew_mib = peak.saturating_sub(before) / 1024;
    // Four 8 MiB bodies held at once, and a copy of each while it is read: not the ×196 of
    // a span object per two bytes.
    assert!(
        grew_mib < 128,
        "peak RSS grew by {grew_mib} MiB (from {before} KiB to {peak} KiB)"
    );
    assert!(
        rss_after.saturating_sub(rss_before) / 1024 < 128,
        "RSS stays up: {rss_before} KiB before, {rss_after} KiB after"
    );
}

/// A stand-in for the service that answers every request with `answer` (a whole HTTP response)
/// and counts the requests; for what the command hook does with answers loopguard never gives.
async fn canned_service(
    answer: Vec<u8>,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&hits);
    let answer = std::sync::Arc::new(answer);
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let counted = std::sync::Arc::clone(&counted);
            let answer = std::sync::Arc::clone(&answer);
            tokio::spawn(async move {
                // Read a head and its body (the hook sends Content-Length), then answer.
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n) = sock.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let len = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if buf.len() < end + 4 + len {
                        continue;
                    }
                    buf.drain(..end + 4 + len);
                    counted.fetch_add(1, Ordering::SeqCst);
                    if sock.write_all(&answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}"), hits)
}

fn http_answer(status: &str, headers: &[&str], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", body.len());
    for h in headers {
        out.push_str(h);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// Issue 43: whatever the service answers, the command hook relays only the hook's JSON and
/// otherwise fails open: `429` with `Retry-After: 0` is retried with backoff (a handful of
/// requests, not thousands), a `200` of HTML or of 64 MiB is not relayed, a redirect is not
/// followed, and a password in `--url` is never printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_hook_relays_only_the_hooks_json_and_backs_off() {
    use std::sync::atomic::Ordering;
    let payload = fixture("claude-code-stuck.jsonl")[4].to_string();
    let run = |url: String, timeout_ms: &'static str| {
        let payload = payload.clone();
        tokio::task::spawn_blocking(move || {
            command_hook(
                "claude-code",
                &["--url", &url, "--timeout-ms", timeout_ms],
                payload.as_bytes(),
            )
        })
    };

    let (url, hits) = canned_service(http_answer(
        "429 Too Many Requests",
        &["retry-after: 0", "content-type: application/json"],
        br#"{"code":"overloaded","message":"busy","path":null}"#,
    ))
    .await;
    let (code, out, err) = run(url, "2000").await.unwrap();
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(err.contains("429"), "{err}");
    let n = hits.load(Ordering::SeqCst);
    // A floor of 100 ms doubling: 0, 100, 300, 700, 1500 ms into the 2 s.
    assert!((2..=6).contains(&n), "{n} requests in 2 s");

    let (url, _) = canned_service(http_answer(
        "200 OK",
        &["content-type: text/html"],
        b"<html><body>proxy login</body></html>",
    ))
    .await;
    let (code, out, err) = run(url, "5000").await.unwrap();
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(err.contains("not the hook's JSON"), "{err}");

    let mut big = b"{\"systemMessage\":\"".to_vec();
    big.resize(64 << 20, b'a');
    big.extend_from_slice(b"\"}");
    let (url, _) = canned_service(http_answer(
        "200 OK",
        &["content-type: application/json"],
        &big,
    ))
    .await;
    let (code, out, err) = run(url, "20000").await.unwrap();
    assert_eq!((code, out.len()), (1, 0), "{err}");
    assert!(err.contains("bytes"), "{err}");

    let (target, followed) = canned_service(http_answer("200 OK", &[], b"{}")).await;
    let (url, _) = canned_service(http_answer(
        "307 Temporary Redirect",
        &[&format!("location: {target}/v1/hooks/claude-code")],
        b"",
    ))
    .await;
    let (code, out, err) = run(url, "5000").await.unwrap();
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(err.contains("307"), "{err}");
    assert_eq!(
        followed.load(Ordering::SeqCst),
        0,
        "the redirect was followed"
    );

    let (url, _) = canned_service(http_answer("503 Service Unavailable", &[], b"{}")).await;
    let with_password = url.replace("http://", "http://hook-user:s3cret-pw@");
    let (code, _, err) = run(with_password, "300").await.unwrap();
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("s3cret-pw"), "the password is printed: {err}");
    // Nothing listening, with credentials: the transport error does not print them either.
    let (code, _, err) = run("http://hook-user:s3cret-pw@127.0.0.1:9".into(), "2000")
        .await
        .unwrap();
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("s3cret-pw"), "the password is printed: {err}");
}

/// Issue 43: the command hook never exits 2 (block) for its own problems — a mistyped command,
/// a bad option before or after `hook`, a bad environment setting — and `--timeout-ms` bounds
/// reading its input too: a stdin that is never closed does not hold the agent.
#[test]
fn the_command_hook_never_exits_2_and_its_timeout_covers_reading_stdin() {
    let bin = env!("CARGO_BIN_EXE_loopguard");
    let exit = |args: &[&str], env: &[(&str, &str)]| {
        let out = Command::new(bin)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code().expect("an exit code"),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (args, env) in [
        (&["hok", "claude-code"][..], &[][..]),
        (&["hooks", "gemini-cli"], &[]),
        (&["--log-format", "xml", "hook", "claude-code"], &[]),
        (&["hook", "claude-code", "--log-format", "xml"], &[]),
        (&["hook", "claude-code", "--timeout-ms", "soon"], &[]),
        (&["hook", "claude-cod"], &[]),
        (&["hook"], &[]),
        (&["hook", "claude-code"], &[("LOOPGUARD_LOG_FORMAT", "xml")]),
    ] {
        let (code, err) = exit(args, env);
        assert_eq!(code, 1, "{args:?} {env:?}: {err}");
        assert!(err.contains("the agent goes on"), "{args:?}: {err}");
    }
    // Other commands keep clap's usage code.
    assert_eq!(exit(&["scor", "x.jsonl"], &[]).0, 2);

    let mut child = Command::new(bin)
        .args([
            "hook",
            "claude-code",
            "--url",
            "http://127.0.0.1:9",
            "--timeout-ms",
            "300",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take(); // held open, never written
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the hook is still waiting for its input"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    drop(stdin);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("input"), "{err}");
}
