//! Handler tests through `router().oneshot(request)`, on the real model with in-memory state.
//! The end-to-end tests against a running process are in tests/server.rs and tests/crash.rs.

use super::router::constant_time_eq;
use super::state::Parts;
use super::tests_contract::send_typed;
use super::*;
use axum::body::Body;
use axum::http::Request;
use axum::http::StatusCode;
use axum::Router;
use loopguard::embed::{EmbedBackend, EmbedError, EmbedderOptions, StubBackend};
use loopguard::{Config, Embedder};
use serde_json::{json, Value};
use std::sync::Arc;
use tower::ServiceExt;

pub(super) fn model() -> Embedder {
    static MODEL: OnceLock<Embedder> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            Embedder::load_model(&Config::default().model)
                .unwrap_or_else(|e| panic!("these tests run the real model: {e}"))
        })
        .clone()
}

pub(super) fn state_with(cfg: Config, embedder: Embedder) -> Arc<AppState> {
    let parts = Parts::in_memory(&cfg, embedder);
    AppState::with(Arc::new(cfg), parts, Arc::new(OnceLock::new()))
}

pub(super) fn app() -> Router {
    router(state_with(Config::default(), model()))
}

/// The router's answer to `req`: status, body, headers.
pub(super) async fn answer(
    app: &Router,
    req: Request<Body>,
) -> (StatusCode, Vec<u8>, axum::http::HeaderMap) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, bytes.to_vec(), headers)
}

/// A body as JSON, or as its text when it is not JSON.
pub(super) fn as_value(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

pub(super) async fn send(
    app: &Router,
    method: &str,
    uri: &str,
    body: impl Into<Body>,
) -> (StatusCode, Value, axum::http::HeaderMap) {
    send_typed(app, method, uri, Some("application/json"), body).await
}

pub(super) async fn post(app: &Router, body: Value) -> (StatusCode, Value) {
    let (s, v, _) = send(app, "POST", "/v1/evaluate", body.to_string()).await;
    (s, v)
}

pub(super) fn failure(task: &str, msg: &str) -> Value {
    json!({"task_id": task, "event": {"type": "failure", "message": msg}})
}

#[tokio::test]
async fn evaluate_returns_a_verdict_with_phase_timings() {
    let app = app();
    let (status, v, headers) = send(
        &app,
        "POST",
        "/v1/evaluate",
        failure("t1", "boom").to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["task_id"], "t1");
    assert_eq!(v["seq"], 1);
    assert_eq!(v["loop"], false);
    assert_eq!(v["kind"], "none");
    assert_eq!(v["action"]["type"], "continue");
    let timing = headers["server-timing"].to_str().unwrap();
    assert!(
        timing.contains("embed;dur=") && timing.contains("store;dur="),
        "{timing}"
    );
}

#[tokio::test]
async fn batch_answers_in_order_each_item_on_its_own() {
    let app = app();
    let body = json!([
        failure("b1", "KeyError: 'database'"),
        {"task_id": "b1", "event": {"type": "failure"}},
        failure("b1", "KeyError: 'database'"),
        failure("b2", "other task"),
    ]);
    let (status, v) = post(&app, body).await;
    assert_eq!(status, StatusCode::OK);
    let items = v.as_array().unwrap();
    assert_eq!(items.len(), 4);
    assert_eq!(items[0]["seq"], 1);
    assert_eq!(items[1]["error"]["code"], "invalid_event");
    assert_eq!(items[1]["error"]["path"], "[1].event");
    assert_eq!(
        items[2]["loop"], true,
        "the repeat after the invalid item: {v}"
    );
    assert_eq!(items[2]["seq"], 2);
    assert_eq!(items[3]["task_id"], "b2");
}

#[tokio::test]
async fn bad_input_is_a_precise_4xx_never_a_5xx() {
    let app = app();
    let deep = {
        let mut args = json!(1);
        for _ in 0..40 {
            args = json!({"a": args});
        }
        json!({"task_id": "t", "event": {"type": "tool_call", "tool": "x", "args": args}})
            .to_string()
    };
    // Depth 0 is the envelope: event (1), args (2), then 31 levels of "a" reach depth 33.
    let deep_path = format!("event.args{}", ".a".repeat(31));
    let huge_field = failure("t", &"x".repeat(70_000)).to_string();
    let huge_body = format!(
        "[{}]",
        vec![failure("t", &"y".repeat(60_000)).to_string(); 20].join(",")
    );
    let many = Value::Array((0..300).map(|i| failure("t", &format!("e{i}"))).collect()).to_string();
    // (name, body, status, code, path, message fragment)
    type Case<'a> = (&'a str, Body, StatusCode, &'a str, Option<&'a str>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "malformed JSON",
            Body::from("{\"task_id\": \"t\", "),
            StatusCode::BAD_REQUEST,
            "invalid_json",
            None,
            "line 1",
        ),
        (
            "wrong type",
            Body::from(r#"{"task_id": 7, "event": {"type": "response", "text": "x"}}"#),
            StatusCode::BAD_REQUEST,
            "invalid_event",
            Some("task_id"),
            "expected a string",
        ),
        (
            "missing task_id",
            Body::from(r#"{"event": {"type": "response", "text": "x"}}"#),
            StatusCode::BAD_REQUEST,
            "invalid_event",
            Some("."),
            "missing field `task_id`",
        ),
        (
            "empty task_id",
            Body::from(r#"{"task_id": "", "event": {"type": "response", "text": "x"}}"#),
            StatusCode::BAD_REQUEST,
            "invalid_event",
            Some("task_id"),
            "1..256",
        ),
        (
            "unknown event type",
            Body::from(r#"{"task_id": "t", "event": {"type": "teleport"}}"#),
            StatusCode::BAD_REQUEST,
            "invalid_event",
            Some("event.type"),
            "unknown variant `teleport`",
        ),
        (
            "missing field",
            Body::from(r#"{"task_id": "t", "event": {"type": "tool_call"}}"#),
            StatusCode::BAD_REQUEST,
            "invalid_event",
            Some("event"),
            "missing field `tool`",
        ),
        (
            "invalid UTF-8",
            Body::from(vec![b'{', b'"', 0xff, 0xfe, b'"', b'}']),
            StatusCode::BAD_REQUEST,
            "invalid_utf8",
            None,
            "at byte 2",
        ),
        (
            "deeply nested args",
            Body::from(deep),
            StatusCode::BAD_REQUEST,
            "too_deep",
            Some(deep_path.as_str()),
            "deeper than 32",
        ),
        (
            "oversized field",
            Body::from(huge_field),
            StatusCode::PAYLOAD_TOO_LARGE,
            "field_too_large",
            Some("event.message"),
            "limit is 65536",
        ),
        (
            "oversized body",
            Body::from(huge_body),
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            None,
            "exceeds 1048576",
        ),
        (
            "too many events",
            Body::from(many),
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_many_events",
            None,
            "limit is 256",
        ),
        (
            "not an object",
            Body::from("42"),
            StatusCode::BAD_REQUEST,
            "invalid_event",
            Some("."),
            "got a number",
        ),
        (
            "bad timestamp",
            Body::from(
                r#"{"task_id": "t", "ts": "yesterday", "event": {"type": "response", "text": "x"}}"#,
            ),
            StatusCode::BAD_REQUEST,
            "invalid_event",
            Some("ts"),
            "",
        ),
        (
            "bad coverage",
            Body::from(r#"{"task_id": "t", "event": {"type": "progress", "coverage": 250}}"#),
            StatusCode::BAD_REQUEST,
            "invalid_event",
            Some("event.coverage"),
            "0..100",
        ),
    ];
    for (name, body, want_status, want_code, want_path, want_msg) in cases {
        let (status, v, _) = send(&app, "POST", "/v1/evaluate", body).await;
        assert!(!status.is_server_error(), "{name}: {status} {v}");
        assert_eq!(status, want_status, "{name}: {v}");
        assert_eq!(v["code"], want_code, "{name}: {v}");
        if let Some(p) = want_path {
            assert_eq!(v["path"], p, "{name}: {v}");
        }
        assert!(
            v["message"].as_str().unwrap().contains(want_msg),
            "{name}: {v}"
        );
    }
}

#[tokio::test]
async fn task_inspection_history_reset_and_delete() {
    let app = app();
    for _ in 0..3 {
        post(&app, failure("t", "error[E0308]: mismatched types")).await;
    }
    let (status, v, _) = send(&app, "GET", "/v1/tasks/t", Body::empty()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["loop_count"], 2);
    assert_eq!(v["pivot_count"], 1);
    assert_eq!(v["status"], "active");
    assert_eq!(v["window"].as_array().unwrap().len(), 3);
    assert_eq!(v["last_verdicts"].as_array().unwrap().len(), 3);

    let (status, h, _) = send(&app, "GET", "/v1/tasks/t/history", Body::empty()).await;
    assert_eq!(status, StatusCode::OK);
    let events: Vec<&str> = h["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["loop_detected", "loop_detected", "pivot_issued"]);
    assert!(h["records"][0]["ts"].as_str().unwrap().contains('T'));

    let (status, v, _) = send(
        &app,
        "POST",
        "/v1/tasks/t/reset",
        json!({"reason": "human_intervention", "by": "alice", "note": "fixed the types"})
            .to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["loop_count"], 0);
    let (_, h, _) = send(&app, "GET", "/v1/tasks/t/history", Body::empty()).await;
    let last = h["records"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["event"], "loop_counter_reset");
    assert_eq!(last["by"], "alice");
    assert_eq!(last["reason"], "human_intervention");
    assert_eq!(last["previous_count"], 2);

    let (status, v, _) = send(
        &app,
        "POST",
        "/v1/tasks/t/reset",
        json!({"reason": "boredom"}).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(v["path"], "reason");

    let (status, _, _) = send(&app, "DELETE", "/v1/tasks/t", Body::empty()).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, v, _) = send(&app, "GET", "/v1/tasks/t", Body::empty()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(v["code"], "not_found");
    let (status, _, _) = send(&app, "DELETE", "/v1/tasks/t", Body::empty()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = send(
        &app,
        "POST",
        "/v1/tasks/nobody/reset",
        json!({"reason": "success"}).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn bearer_token_guards_the_api_but_not_liveness() {
    let mut cfg = Config::default();
    cfg.server.auth_token = Some("s3cret".into());
    let app = router(state_with(cfg, model()));
    let (status, v) = post(&app, failure("t", "x")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(v["code"], "unauthorized");
    // The scheme is case-insensitive (RFC 9110); the token is not.
    for (header, want) in [
        ("Bearer s3cret", StatusCode::OK),
        ("bearer s3cret", StatusCode::OK),
        ("BEARER  s3cret", StatusCode::OK),
        ("Bearer S3CRET", StatusCode::UNAUTHORIZED),
        ("Basic s3cret", StatusCode::UNAUTHORIZED),
        ("s3cret", StatusCode::UNAUTHORIZED),
    ] {
        let req = Request::builder()
            .method("POST")
            .uri("/v1/evaluate")
            .header("authorization", header)
            .header("content-type", "application/json")
            .body(Body::from(failure("t", "x").to_string()))
            .unwrap();
        assert_eq!(
            app.clone().oneshot(req).await.unwrap().status(),
            want,
            "{header}"
        );
    }
    let (status, _, _) = send(&app, "GET", "/metrics", Body::empty()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = send(&app, "GET", "/livez", Body::empty()).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = send(&app, "GET", "/readyz", Body::empty()).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn metrics_count_requests_verdicts_and_pivots() {
    let app = app();
    for _ in 0..3 {
        post(&app, failure("m", "ValueError: bad input")).await;
    }
    let (status, text, headers) = send(&app, "GET", "/metrics", Body::empty()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let text = text.as_str().unwrap();
    for needle in [
        "loopguard_http_requests_total{route=\"/v1/evaluate\",status=\"200\"} 3",
        "loopguard_verdicts_total{kind=\"exact_repeat\",action=\"pivot\"} 1",
        "loopguard_pivots_issued_total 1",
        "loopguard_loops_detected_total{kind=\"exact_repeat\",rule=\"repeat.failure\",counted=\"true\"} 2",
        "loopguard_evaluate_phase_duration_seconds_bucket{le=",
        "loopguard_embedding_cache_hits_total",
        "loopguard_model_ready 1",
        "loopguard_events_evaluated_total 3",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
}

#[tokio::test]
async fn unknown_routes_are_json_404s() {
    let (status, v, _) = send(&app(), "GET", "/v2/nothing", Body::empty()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(v["code"], "not_found");
}

#[tokio::test]
async fn readyz_waits_for_the_model() {
    // A model that never finishes loading.
    let e = Embedder::start(
        || {
            std::thread::sleep(Duration::from_secs(3600));
            Ok(Box::new(StubBackend) as Box<dyn EmbedBackend>)
        },
        EmbedderOptions::default(),
    );
    let app = router(state_with(Config::default(), e));
    let (status, v, _) = send(&app, "GET", "/readyz", Body::empty()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(v["status"], "loading");
    let (status, _, _) = send(&app, "GET", "/livez", Body::empty()).await;
    assert_eq!(status, StatusCode::OK);
    // Events the exact path decides do not need the model at all.
    let (status, _) = post(
        &app,
        json!({"task_id": "t", "event": {"type": "progress", "tests_passed": 1}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

/// A model that answers only when the test opens its gate: "busy" for exactly as long as the
/// test needs, with no timing involved.
/// The warm-up call at load passes; the gate opens for good when its sender is dropped.
struct Gated(std::sync::mpsc::Receiver<()>, bool);
impl EmbedBackend for Gated {
    fn embed_batch(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if std::mem::replace(&mut self.1, true) {
            let _ = self.0.recv();
        }
        Ok(texts.iter().map(|t| StubBackend::vector(t)).collect())
    }
    fn describe(&self) -> String {
        "gated".into()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_429_at_once_and_the_exact_path_never_waits() {
    let (open, gate) = std::sync::mpsc::channel::<()>();
    let gate = std::sync::Mutex::new(Some(gate));
    let e = Embedder::start(
        move || {
            let rx = gate.lock().unwrap().take().expect("loaded once");
            Ok(Box::new(Gated(rx, false)) as Box<dyn EmbedBackend>)
        },
        EmbedderOptions {
            queue_capacity: 1,
            ..EmbedderOptions::default()
        },
    );
    e.wait_ready().unwrap();
    let state = state_with(Config::default(), e.clone());
    let app = router(Arc::clone(&state));
    // Seed each task with a failure; its first event needs no comparison, hence no model.
    for i in 0..8 {
        post(&app, failure(&format!("q{i}"), "first failure of the task")).await;
    }
    post(&app, failure("exact", "the same failure")).await;
    let mut handles = Vec::new();
    for i in 0..8 {
        let app = app.clone();
        handles.push(tokio::spawn(async move {
            post(
                &app,
                failure(
                    &format!("q{i}"),
                    &format!("a different failure number {}", "x".repeat(i + 1)),
                ),
            )
            .await
        }));
    }
    // Wait until the model is held at its gate with work queued behind it.
    while e.is_idle() {
        tokio::task::yield_now().await;
    }
    // While the model cannot answer at all, an exact repeat is answered without it. (Were it
    // to wait for the model, it would never return: the guard below only bounds a failure.)
    let (status, v) = tokio::time::timeout(
        Duration::from_secs(30),
        post(&app, failure("exact", "the same failure")),
    )
    .await
    .expect("the exact path does not wait for a busy model");
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["kind"], "exact_repeat");
    // While the model is still held, the requests that found the queue full come back at once
    // (on a loaded machine the spawned requests may only now be arriving: wait for one).
    tokio::time::timeout(Duration::from_secs(30), async {
        while !handles.iter().any(|h| h.is_finished()) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("a request finds the queue full and is refused at once, while the model is held");
    // Let the model answer everything queued.
    drop(open);
    let mut overloaded = 0;
    for h in handles {
        let (status, v) = h.await.unwrap();
        if status == StatusCode::TOO_MANY_REQUESTS {
            overloaded += 1;
            assert_eq!(v["code"], "overloaded");
        } else {
            assert_eq!(status, StatusCode::OK, "{v}");
        }
    }
    assert!(
        overloaded > 0,
        "with a queue of one, concurrent model work is refused"
    );
}

#[test]
fn the_committed_openapi_document_is_current() {
    let committed = std::fs::read_to_string("docs/openapi.json").unwrap_or_default();
    let generated = openapi::document_json(&Config::default());
    assert!(
        committed == generated,
        "docs/openapi.json is stale; regenerate it with `cargo run -- openapi > docs/openapi.json`"
    );
}

#[test]
fn constant_time_eq_compares() {
    assert!(constant_time_eq(b"abc", b"abc"));
    assert!(!constant_time_eq(b"abc", b"abd"));
    assert!(!constant_time_eq(b"abc", b"ab"));
}
