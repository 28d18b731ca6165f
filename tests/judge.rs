//! The LLM-judge hook against a real HTTP server on loopback speaking the OpenAI
//! chat-completions wire format (written here; it records what it receives), and a webhook.

mod common;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use common::*;
use loopguard::judge;
use loopguard::verdict::LoopKind;
use loopguard::{Config, Engine};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the mock judge behaves.
#[derive(Clone)]
enum Mode {
    /// Answer this verdict JSON as the assistant message content.
    Says(Value),
    /// Sleep, then answer.
    Sleeps(Duration, Value),
    /// Answer something that is not the schema.
    Garbage,
    /// HTTP 500.
    Fails,
    /// A 2 MB answer, streamed without a length, that would say "loop" if read whole.
    Huge,
}

#[derive(Clone)]
struct Mock {
    mode: Arc<Mutex<Mode>>,
    requests: Arc<Mutex<Vec<Value>>>,
}

async fn chat(State(m): State<Mock>, Json(body): Json<Value>) -> Response {
    m.requests.lock().unwrap().push(body);
    let mode = m.mode.lock().unwrap().clone();
    let content = match mode {
        Mode::Says(v) => v.to_string(),
        Mode::Sleeps(d, v) => {
            tokio::time::sleep(d).await;
            v.to_string()
        }
        Mode::Garbage => "I think it is probably fine, hard to say.".to_string(),
        Mode::Fails => {
            return (StatusCode::INTERNAL_SERVER_ERROR, "upstream exploded").into_response()
        }
        Mode::Huge => {
            let reason = "x".repeat(2 << 20);
            let content = json!({"verdict": "loop", "reason": reason}).to_string();
            let body = json!({"id": "chatcmpl-test", "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]})
            .to_string()
            .into_bytes();
            let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
                body.chunks(32 << 10).map(|c| Ok(c.to_vec())).collect();
            return axum::body::Body::from_stream(futures_util::stream::iter(chunks))
                .into_response();
        }
    };
    Json(json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]
    }))
    .into_response()
}

async fn webhook(State(m): State<Mock>, Json(body): Json<Value>) -> Response {
    m.requests.lock().unwrap().push(body);
    match m.mode.lock().unwrap().clone() {
        Mode::Says(v) => Json(v).into_response(),
        _ => (StatusCode::BAD_GATEWAY, "no").into_response(),
    }
}

/// Start the mock on a free port; returns its base URL and handle.
async fn mock(mode: Mode) -> (String, Mock) {
    let m = Mock {
        mode: Arc::new(Mutex::new(mode)),
        requests: Arc::new(Mutex::new(Vec::new())),
    };
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/chat/completions", post(chat))
        .route("/hook", post(webhook))
        .with_state(m.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), m)
}

fn judge_config(kind: &str, url: &str, extra: &[(&str, &str)]) -> Config {
    let mut overrides: Vec<(String, String)> = vec![
        ("judge.kind".into(), format!("{kind:?}")),
        ("judge.url".into(), format!("{url:?}")),
        ("judge.model".into(), "\"test-model\"".into()),
        ("judge.timeout_ms".into(), "800".into()),
        ("judge.retries".into(), "1".into()),
        ("judge.backoff_ms".into(), "20".into()),
        // Pin the similarity settings the grey-band pair below was chosen for.
        ("detect.similarity.failure".into(), "0.86".into()),
        ("detect.similarity.grey_band".into(), "0.08".into()),
        // Only the grey band makes a case ambiguous here, unless a test says otherwise.
        ("judge.ask_after_failures".into(), "0".into()),
    ];
    overrides.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Config::load(None, std::iter::empty(), &overrides).unwrap()
}

fn engine_with_judge(cfg: Config) -> Engine {
    let j = judge::from_config(&cfg.judge).unwrap().expect("a judge");
    Engine::new(Arc::new(cfg), model()).with_judge(j)
}

// Cosine 0.82 on all-MiniLM-L6-v2: below the failure threshold (0.86), inside its grey band.
const A: &str = "TypeError: Cannot read properties of undefined (reading 'name')";
const B: &str = "Uncaught TypeError: cannot read property 'name' of undefined in line";

fn says(verdict: &str) -> Mode {
    Mode::Says(
        json!({"verdict": verdict, "confidence": 0.9, "reason": format!("the agent is {verdict}")}),
    )
}

#[tokio::test]
async fn asked_for_a_grey_zone_case_not_for_an_exact_repeat_and_regressive_counts() {
    let (url, m) = mock(says("regressive")).await;
    let e = engine_with_judge(judge_config("openai", &format!("{url}/v1"), &[]));
    let goal = env(
        json!({"task_id": "t", "goal": "show the user's name on the profile card", "event": {"type": "failure", "message": A}}),
    );
    let v1 = e.evaluate(goal).await.unwrap();
    assert!(v1.judge.is_none(), "nothing ambiguous yet");
    let v2 = e.evaluate(failure("t", B)).await.unwrap();
    let sim = v2.judge.as_ref().expect("the judge was consulted");
    assert_eq!(sim.status, "ok");
    assert!(!sim.fallback);
    assert!(v2.is_loop && v2.counted, "{v2:?}");
    assert_eq!(v2.kind, LoopKind::Regression);
    assert_eq!(v2.loop_count, 1);
    {
        let reqs = m.requests.lock().unwrap();
        if std::env::var_os("PRINT_JUDGE_EXCHANGE").is_some() {
            println!("{}", serde_json::to_string_pretty(&reqs[0]).unwrap());
        }
        assert_eq!(reqs.len(), 1);
        let r = &reqs[0];
        assert_eq!(r["model"], "test-model");
        assert_eq!(r["messages"][0]["role"], "system");
        let user = r["messages"][1]["content"].as_str().unwrap();
        assert!(user.contains("grey band"), "{user}");
        assert!(
            user.contains("show the user's name"),
            "the goal is in the evidence: {user}"
        );
        assert!(user.contains("cannot read property 'name'"), "{user}");
    }
    // An exact repeat is decided on keys: the judge is not asked.
    let v3 = e.evaluate(failure("t", B)).await.unwrap();
    assert_eq!(v3.kind, LoopKind::ExactRepeat);
    assert!(v3.judge.is_none());
    assert_eq!(m.requests.lock().unwrap().len(), 1);
    // Nor for a clear non-match.
    let v4 = e
        .evaluate(failure(
            "t",
            "disk quota exceeded while writing the build cache",
        ))
        .await
        .unwrap();
    assert!(v4.judge.is_none());
    assert_eq!(m.requests.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn progress_from_the_judge_is_not_a_loop() {
    let (url, _m) = mock(says("progress")).await;
    let e = engine_with_judge(judge_config("openai", &url, &[]));
    e.evaluate(failure("t", A)).await.unwrap();
    let v = e.evaluate(failure("t", B)).await.unwrap();
    assert!(!v.is_loop);
    assert!(v.reason.contains("judge says progress"), "{}", v.reason);
}

#[tokio::test]
async fn a_judge_that_sleeps_past_the_timeout_gives_the_fallback_in_time() {
    let (url, _m) = mock(Mode::Sleeps(
        Duration::from_secs(5),
        json!({"verdict": "no_progress"}),
    ))
    .await;
    let e = engine_with_judge(judge_config("openai", &url, &[]));
    e.evaluate(failure("t", A)).await.unwrap();
    // The judge sleeps 5 s; the deadline cuts it off (timed exactly, on a paused clock, in
    // src/judge/guard.rs).
    let v = e.evaluate(failure("t", B)).await.unwrap();
    let j = v.judge.unwrap();
    assert_eq!(j.status, "timeout");
    assert!(j.fallback);
    assert!(!v.is_loop, "fallback no_loop");
}

#[tokio::test]
async fn garbage_and_500s_are_undecided_never_a_crash() {
    let (url, m) = mock(Mode::Garbage).await;
    let e = engine_with_judge(judge_config("openai", &url, &[]));
    e.evaluate(failure("g", A)).await.unwrap();
    let v = e.evaluate(failure("g", B)).await.unwrap();
    assert_eq!(v.judge.as_ref().unwrap().status, "invalid");
    assert!(!v.is_loop);

    *m.mode.lock().unwrap() = Mode::Fails;
    e.evaluate(failure("h", A)).await.unwrap();
    let before = m.requests.lock().unwrap().len();
    let v = e.evaluate(failure("h", B)).await.unwrap();
    assert_eq!(v.judge.as_ref().unwrap().status, "unavailable");
    assert_eq!(
        m.requests.lock().unwrap().len() - before,
        2,
        "one retry of a transient 500"
    );
    // The fallback can be set to count ambiguous cases instead.
    let (url, _m) = mock(Mode::Fails).await;
    let e = engine_with_judge(judge_config(
        "openai",
        &url,
        &[("judge.fallback", "\"loop\"")],
    ));
    e.evaluate(failure("t", A)).await.unwrap();
    let v = e.evaluate(failure("t", B)).await.unwrap();
    assert!(v.is_loop && v.judge.as_ref().unwrap().fallback);
}

/// A judge answering megabytes is cut off at `judge::http::MAX_ANSWER_BYTES`, not read whole:
/// the answer counts as unusable and the fallback decides.
#[tokio::test]
async fn a_huge_answer_is_not_read_whole() {
    let (url, _m) = mock(Mode::Huge).await;
    let e = engine_with_judge(judge_config("openai", &url, &[]));
    e.evaluate(failure("huge", A)).await.unwrap();
    let v = e.evaluate(failure("huge", B)).await.unwrap();
    let j = v.judge.as_ref().expect("the judge was asked");
    assert!(j.fallback, "{j:?}");
    assert!(
        !v.is_loop,
        "the 2 MB answer saying loop was not taken: {v:?}"
    );
}

#[tokio::test]
async fn the_breaker_opens_after_repeated_failures() {
    let (url, m) = mock(Mode::Fails).await;
    let cfg = judge_config(
        "openai",
        &url,
        &[
            ("judge.retries", "0"),
            ("judge.breaker_failures", "3"),
            ("judge.breaker_cooldown_secs", "1"),
            ("judge.cache_entries", "0"),
        ],
    );
    let e = engine_with_judge(cfg);
    for i in 0..3 {
        let t = format!("b{i}");
        e.evaluate(failure(&t, A)).await.unwrap();
        let v = e.evaluate(failure(&t, B)).await.unwrap();
        assert_eq!(v.judge.unwrap().status, "unavailable");
    }
    assert_eq!(m.requests.lock().unwrap().len(), 3);
    // Open: no call goes out, the answer is immediate.
    e.evaluate(failure("b3", A)).await.unwrap();
    let v = e.evaluate(failure("b3", B)).await.unwrap();
    let j = v.judge.unwrap();
    assert_eq!(j.status, "unavailable");
    assert!(j.reason.unwrap().contains("circuit breaker"));
    assert_eq!(
        m.requests.lock().unwrap().len(),
        3,
        "the open breaker sent nothing"
    );
    let stats = e.judge_stats().unwrap();
    assert_eq!(stats.breaker, judge::guard::BreakerState::Open);
    assert_eq!(stats.breaker_opened, 1);
    // After the cool-down one trial goes out and a recovered judge closes the breaker: tested on
    // a paused clock in src/judge/guard.rs rather than by sleeping here.
}

#[tokio::test]
async fn answers_are_cached_by_evidence_and_calls_are_budgeted_per_task() {
    let (url, m) = mock(says("no_progress")).await;
    let e = engine_with_judge(judge_config(
        "openai",
        &url,
        &[
            ("judge.max_calls_per_task", "1"),
            ("judge.ask_after_failures", "3"),
        ],
    ));
    // The same situation in two tasks is one question.
    for t in ["c1", "c2"] {
        e.evaluate(failure(t, A)).await.unwrap();
        let v = e.evaluate(failure(t, B)).await.unwrap();
        assert_eq!(v.judge.unwrap().status, "ok");
    }
    assert_eq!(
        m.requests.lock().unwrap().len(),
        1,
        "the second was a cache hit"
    );
    // c1 spent its one call: its next ambiguous case (a third failure with no progress signal)
    // gets the fallback without a call.
    let v = e
        .evaluate(failure(
            "c1",
            "IndexError: list index out of range in parse_rows",
        ))
        .await
        .unwrap();
    let j = v.judge.expect("ambiguous: three failures in a row");
    assert_eq!(j.status, "budget_exhausted");
    assert!(j.fallback);
    assert_eq!(m.requests.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn the_webhook_gets_the_evidence_and_its_verdict_counts() {
    let (url, m) = mock(says("no_progress")).await;
    let e = engine_with_judge(judge_config("webhook", &format!("{url}/hook"), &[]));
    e.evaluate(failure("w", A)).await.unwrap();
    let v = e.evaluate(failure("w", B)).await.unwrap();
    assert!(v.is_loop, "{v:?}");
    assert_eq!(v.kind, LoopKind::SemanticRepeat);
    let reqs = m.requests.lock().unwrap();
    let evidence = &reqs[0];
    assert_eq!(evidence["task_id"], "w");
    assert_eq!(evidence["current"]["type"], "failure");
    assert!(evidence["candidate"]["similarity"].as_f64().unwrap() > 0.78);
    assert_eq!(evidence["recent"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn the_service_answers_in_time_with_a_sleeping_judge() {
    let (url, _m) = mock(Mode::Sleeps(
        Duration::from_secs(10),
        json!({"verdict": "no_progress"}),
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "--set",
            "judge.kind=\"openai\"",
            "--set",
            &format!("judge.url={url:?}"),
            "--set",
            "judge.model=\"m\"",
            "--set",
            "judge.timeout_ms=500",
            "--set",
            "detect.similarity.failure=0.86",
            "--set",
            "detect.similarity.grey_band=0.08",
        ],
    );
    let client = http_client();
    s.ready(&client).await;
    let post = |msg: &str| {
        client
            .post(s.url("/v1/evaluate"))
            .json(&json!({"task_id": "svc", "event": {"type": "failure", "message": msg}}))
            .send()
    };
    post(A).await.unwrap();
    // The judge sleeps 10 s; a `timeout` status with the fallback is the deadline at work.
    let r = post(B).await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["judge"]["status"], "timeout");
    assert_eq!(v["judge"]["fallback"], true);
    let metrics = client
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("loopguard_judge_outcomes_total{status=\"timeout\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("loopguard_events_needing_judge_total 1"),
        "{metrics}"
    );
}

/// Feeds the events to an engine whose judge always says "no progress"; the verdicts and how
/// many questions the judge got.
async fn judged(events: Vec<Value>) -> (Vec<loopguard::Verdict>, usize) {
    let (url, m) = mock(says("no_progress")).await;
    let e = engine_with_judge(judge_config("openai", &format!("{url}/v1"), &[]));
    let mut vs = Vec::new();
    for event in events {
        vs.push(
            e.evaluate(env(json!({"task_id": "t", "event": event})))
                .await
                .unwrap(),
        );
    }
    let asked = m.requests.lock().unwrap().len();
    (vs, asked)
}

#[tokio::test]
async fn a_dead_end_that_moved_is_not_a_question_whatever_its_cosine() {
    // A recorded healthy run (mini-SWE-agent, pvlib-1707): a script fails on one missing module
    // after another, an install between each. The third traceback is in the grey band of the
    // first, but its error line names another module: the install worked and the failure moved.
    // Asking a judge about it flagged the run when the judge said "no progress".
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/judge/module_after_module.json"
    ))
    .unwrap();
    let events: Vec<Value> = serde_json::from_str(&text).unwrap();
    let (vs, asked) = judged(events.clone()).await;
    assert!(
        vs.iter().all(|v| !v.is_loop && v.judge.is_none()),
        "{vs:#?}"
    );
    assert_eq!(asked, 0);

    // The same traceback ending in the first error again (the install changed nothing): the
    // grey band is a question, and this judge's answer makes it a loop.
    let mut again = events;
    let out = again[5]["result"]["output"].as_str().unwrap();
    again[5]["result"]["output"] = Value::from(out.replace("'scipy'", "'numpy'"));
    let (vs, asked) = judged(again).await;
    assert_eq!(asked, 1);
    assert!(vs[5].is_loop, "{:#?}", vs[5]);
    assert!(vs[5].reason.contains("grey band"), "{}", vs[5].reason);
}

/// A script run, then four different probes and a fix before each rerun: the runs come six
/// events apart, further than the span rule's window.
fn long_investigation(outputs: [&str; 3]) -> Vec<Value> {
    let call = |tool: &str, command: &str, output: &str| {
        json!({"type": "tool_call", "tool": tool, "args": {"command": command},
               "result": {"output": output, "is_error": false}})
    };
    let probes = [
        [
            (
                "cat src/fmt.py",
                "def render(table): return sep.join(cells)",
            ),
            ("grep -rn render src", "src/fmt.py:88: def render(table):"),
            ("git log -3 --oneline", "a1b2c3 format cells"),
            ("ls tests", "test_fmt.py"),
        ],
        [
            ("sed -n 1,40p src/table.py", "class Table: rows = []"),
            ("pip show tabulate", "Name: tabulate"),
            ("find . -name conftest.py", "./tests/conftest.py"),
            ("git diff --stat", " src/fmt.py | 2 +-"),
        ],
    ];
    let fixes = [
        "edit src/fmt.py 88: return sep.join(str(c) for c in cells)",
        "edit src/table.py 12: self.rows = [list(map(str, r)) for r in rows]",
    ];
    let mut v = vec![call("bash", "python reproduce.py", outputs[0])];
    for ((probes, fix), output) in probes.iter().zip(fixes).zip(&outputs[1..]) {
        for (command, out) in probes {
            v.push(call("bash", command, out));
        }
        v.push(call("edit", fix, "File updated."));
        v.push(call("bash", "python reproduce.py", output));
    }
    v
}

#[tokio::test]
async fn the_very_same_failure_after_a_long_investigation_is_a_question_unless_it_moved() {
    // The third run of an unchanged script ends in the very same traceback as the two before,
    // twelve events back: whether the changes are going anywhere is the judge's to say.
    let traceback = "Traceback (most recent call last):\n  File \"/repo/reproduce.py\", line 7, in <module>\nTypeError: sequence item 1: expected str instance, int found";
    let (vs, asked) = judged(long_investigation([traceback; 3])).await;
    assert_eq!(asked, 1, "{vs:#?}");
    assert!(vs[12].is_loop, "{:#?}", vs[12]);
    assert!(
        vs[12]
            .reason
            .contains("the same step ended in the same error again"),
        "{}",
        vs[12].reason
    );
    // The failure moved with each fix (another item, then another type): no question.
    let moved = [
        traceback,
        &traceback.replace("item 1", "item 2"),
        &traceback.replace("int found", "float found"),
    ];
    let (vs, asked) = judged(long_investigation(moved)).await;
    assert_eq!(asked, 0, "{vs:#?}");
    assert!(vs.iter().all(|v| !v.is_loop), "{vs:#?}");
}

fn call(tool: &str, command: &str, output: &str) -> Value {
    json!({"type": "tool_call", "tool": tool, "args": {"command": command},
           "result": {"output": output, "is_error": false}})
}

/// An edit applied to the open file, which shows it with `duplicates` extra import lines.
fn import_edit(duplicates: usize) -> Value {
    let mut view = vec!["import datetime".to_string()];
    view.extend((0..=duplicates).map(|_| "import pydantic".to_string()));
    view.push("class DateTime(datetime.datetime):".into());
    view.push("    def __repr__(self): return f'DateTime({self.year})'".into());
    let numbered: String = view
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{}:{l}\n", i + 1))
        .collect();
    call(
        "edit",
        "edit 1:2\nimport datetime\nimport pydantic\nend_of_edit",
        &format!(
            "[File: /repo/mock_pendulum.py ({} lines total)]\n{numbered}File updated. Please review the changes and make sure they are correct.",
            view.len()
        ),
    )
}

#[tokio::test]
async fn a_call_redone_with_its_output_barely_changed_is_a_question() {
    // A poll moving forward, or the same step redone for nothing? The same command again, its
    // output moved by a new line of the same kind: no repeat detector sees it (the outputs
    // differ), a reader can tell, and this judge's answer makes it a loop.
    let poll = |step: usize| {
        call(
            "bash",
            "cat build.log",
            &format!("building wheel for app\nstep {step} of 10 done"),
        )
    };
    let (vs, asked) = judged(vec![poll(1), poll(2)]).await;
    assert_eq!(asked, 1, "{vs:#?}");
    assert!(!vs[0].is_loop && vs[1].is_loop, "{vs:#?}");
    assert!(
        vs[1].reason.contains("the same call as seq 1 again"),
        "{}",
        vs[1].reason
    );

    // The agent meant an edit for another file and applies it again to the open one: the file
    // shows the line it inserts twice. That needs no judge: the output gained nothing but copies
    // (`repeat.piled_up`), so nothing is asked.
    let events = vec![
        call(
            "open",
            "open mock_pendulum.py",
            "[File: /repo/mock_pendulum.py (4 lines total)]",
        ),
        import_edit(1),
        import_edit(2),
    ];
    let (vs, asked) = judged(events).await;
    assert_eq!(asked, 0, "{vs:#?}");
    assert!(!vs[1].is_loop && vs[2].is_loop, "{vs:#?}");
    assert_eq!(vs[2].rule.as_deref(), Some("repeat.piled_up"), "{vs:#?}");

    // The same command run again with an output that changed (a build log that moved on): new
    // information, no question.
    let events = vec![
        call("bash", "tail -n 2 build.log", "Compiling serde v1.0.200\nCompiling tokio v1.38.0"),
        call("bash", "tail -n 2 build.log", "Finished release [optimized] target(s) in 41.2s\nRunning `target/release/app --port 8080`"),
    ];
    let (vs, asked) = judged(events).await;
    assert_eq!(asked, 0, "{vs:#?}");
    assert!(vs.iter().all(|v| !v.is_loop), "{vs:#?}");
}

#[tokio::test]
async fn a_third_launch_timing_out_is_a_question_not_two() {
    // A blocking server relaunched in one wrapper after another, each timing out.
    let out = "\nEXECUTION TIMED OUT\n(Open file: /repo/reproduce.py)\n(Current directory: /repo)";
    let mut events = vec![
        call("bash", "python reproduce.py", out),
        call("bash", "python reproduce.py &", out),
        call(
            "create",
            "create mini_server.py",
            "[File: /repo/mini_server.py (1 lines total)]",
        ),
        call(
            "edit",
            "edit 1:1\nimport cherrypy\ncherrypy.quickstart(App())\nend_of_edit",
            "[File: /repo/mini_server.py (2 lines total)]\nFile updated.",
        ),
    ];
    let (vs, asked) = judged(events.clone()).await;
    assert_eq!(asked, 0, "{vs:#?}");
    events.push(call("bash", "python mini_server.py", out));
    let (vs, asked) = judged(events).await;
    assert_eq!(asked, 1, "{vs:#?}");
    assert!(vs[4].is_loop, "{:#?}", vs[4]);
    assert!(
        vs[4].reason.contains("3 calls timed out"),
        "{}",
        vs[4].reason
    );
    assert_eq!(vs[4].rule.as_deref(), Some("judge.timeouts"));
}
