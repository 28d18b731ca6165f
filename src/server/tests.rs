//! Handler tests through `router().oneshot(request)`, on the real model with in-memory state.
//! The end-to-end tests against a running process are in tests/server.rs and tests/crash.rs.

use super::*;
use axum::body::Body;
use axum::http::Request;
use loopguard::embed::{EmbedBackend, EmbedError, EmbedderOptions, StubBackend};
use serde_json::{json, Value};
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
fn as_value(bytes: &[u8]) -> Value {
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

/// A request with a given content type (or none).
async fn send_typed(
    app: &Router,
    method: &str,
    uri: &str,
    content_type: Option<&str>,
    body: impl Into<Body>,
) -> (StatusCode, Value, axum::http::HeaderMap) {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let (status, bytes, headers) = answer(app, req.body(body.into()).unwrap()).await;
    (status, as_value(&bytes), headers)
}

/// Every error body is exactly `{code, message, path}`, as JSON.
fn assert_error_shape(what: &str, v: &Value, headers: &axum::http::HeaderMap) {
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json"),
        "{what}: {headers:?}"
    );
    let keys: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("{what}: not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["code", "message", "path"], "{what}: {v}");
    assert!(v["code"].is_string() && v["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert!(v["path"].is_string() || v["path"].is_null(), "{what}: {v}");
}

/// A body that is valid for `schema`, the request it goes with, and where the object of that
/// schema sits in it.
fn minimal(schema: &str) -> (&'static str, Value, &'static str) {
    let envelope = |event: Value| json!({"task_id": "t", "event": event});
    match schema {
        "Envelope" => (
            "/v1/evaluate",
            envelope(json!({"type": "response", "text": "x"})),
            "",
        ),
        "Failure" => (
            "/v1/evaluate",
            envelope(json!({"type": "failure", "message": "m"})),
            "event",
        ),
        "ToolCall" => (
            "/v1/evaluate",
            envelope(json!({"type": "tool_call", "tool": "x", "args": {}})),
            "event",
        ),
        "ToolResult" => (
            "/v1/evaluate",
            envelope(
                json!({"type": "tool_call", "tool": "x", "args": {}, "result": {"output": "o"}}),
            ),
            "event.result",
        ),
        "Response" => (
            "/v1/evaluate",
            envelope(json!({"type": "response", "text": "x"})),
            "event",
        ),
        "Collaboration" => (
            "/v1/evaluate",
            envelope(
                json!({"type": "collaboration", "from_agent": "a", "to_agent": "b", "request": "r"}),
            ),
            "event",
        ),
        "Transition" => (
            "/v1/evaluate",
            envelope(json!({"type": "transition", "from": "a", "to": "b"})),
            "event",
        ),
        "Progress" => (
            "/v1/evaluate",
            envelope(json!({"type": "progress"})),
            "event",
        ),
        "Outcome" => (
            "/v1/evaluate",
            envelope(json!({"type": "outcome", "result": "abandoned"})),
            "event",
        ),
        "ResetRequest" => ("/v1/tasks/t/reset", json!({"reason": "success"}), ""),
        "FeedbackRequest" => (
            "/v1/feedback",
            json!({"task_id": "t", "seq": 1, "label": "false_positive"}),
            "",
        ),
        other => panic!("no minimal body for {other}; add one"),
    }
}

fn set_at(body: &mut Value, at: &str, field: &str, value: Value) {
    let mut target = body;
    for part in at.split('.').filter(|p| !p.is_empty()) {
        target = &mut target[part];
    }
    target[field] = value;
}

#[tokio::test]
async fn every_bounded_field_is_413_naming_its_path_and_its_limit_fits() {
    use super::validate::{Class, Limits, FIELDS};
    let app = app();
    let limits = Limits::of(&Config::default().server);
    // Two bytes per character: the limits count characters.
    let chars = |n: usize| "é".repeat(n);
    for (schema, field, class) in FIELDS {
        let max = limits.max(*class);
        let (uri, body, at) = minimal(schema);
        let path = if at.is_empty() {
            field.to_string()
        } else {
            format!("{at}.{field}")
        };

        let mut over = body.clone();
        let value = match class {
            Class::Json => json!({"k": chars(max)}),
            _ => json!(chars(max + 1)),
        };
        set_at(&mut over, at, field, value);
        let (status, v, headers) = send(&app, "POST", uri, over.to_string()).await;
        assert_eq!(
            status,
            StatusCode::PAYLOAD_TOO_LARGE,
            "{schema}.{field}: {v}"
        );
        assert_error_shape(&path, &v, &headers);
        assert_eq!(v["code"], "field_too_large", "{path}");
        assert_eq!(v["path"], path.as_str());
        assert!(
            v["message"].as_str().unwrap().contains(&max.to_string()),
            "{v}"
        );

        // Exactly at the limit is accepted (whatever the request then answers).
        let mut at_limit = body.clone();
        set_at(&mut at_limit, at, field, json!(chars(max)));
        let (status, v, _) = send(&app, "POST", uri, at_limit.to_string()).await;
        assert_ne!(
            status,
            StatusCode::PAYLOAD_TOO_LARGE,
            "{path} at its limit: {v}"
        );
        assert!(!status.is_server_error(), "{path}: {v}");
    }
    // Inside a batch, the item's index prefixes the path.
    let batch = json!([
        {"task_id": "t", "event": {"type": "response", "text": "fine"}},
        {"task_id": "t", "agent_id": chars(2000), "event": {"type": "response", "text": "x"}},
    ]);
    let (status, v) = post(&app, batch).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v[1]["error"]["code"], "field_too_large");
    assert_eq!(v[1]["error"]["path"], "[1].agent_id");
}

#[tokio::test]
async fn parameters_are_bounded_and_checked_never_clamped() {
    // A text limit that fits in a URI.
    let mut cfg = Config::default();
    cfg.server.max_text_chars = 4000;
    let app = router(state_with(cfg, model()));
    post(&app, failure("p", "boom")).await;
    let long_id = "x".repeat(257);
    let long_text = "y".repeat(4001);
    // (uri, status, code, path)
    let cases: Vec<(String, StatusCode, &str, &str)> = vec![
        (
            format!("/v1/tasks/{long_id}"),
            StatusCode::PAYLOAD_TOO_LARGE,
            "field_too_large",
            "task_id",
        ),
        (
            format!("/v1/tasks/{long_id}/history"),
            StatusCode::PAYLOAD_TOO_LARGE,
            "field_too_large",
            "task_id",
        ),
        (
            "/v1/tasks/a%01b".into(),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "task_id",
        ),
        (
            "/v1/tasks/%FF".into(),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "task_id",
        ),
        (
            "/v1/tasks/p/history?limit=0".into(),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "limit",
        ),
        (
            "/v1/tasks/p/history?limit=10001".into(),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "limit",
        ),
        (
            "/v1/tasks/p/history?limit=99999999999999999999999".into(),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "limit",
        ),
        (
            "/v1/tasks/p/history?limit=1&limit=2".into(),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "limit",
        ),
        (
            "/v1/loops/similar".into(),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "text",
        ),
        (
            "/v1/loops/similar?text=".into(),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "text",
        ),
        (
            format!("/v1/loops/similar?text={long_text}"),
            StatusCode::PAYLOAD_TOO_LARGE,
            "field_too_large",
            "text",
        ),
        (
            "/v1/loops/similar?text=x&k=51".into(),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "k",
        ),
        (
            "/v1/loops/similar?text=x&min_similarity=1.5".into(),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "min_similarity",
        ),
        (
            "/v1/loops/similar?text=x&min_similarity=-1.0000000000000002".into(),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "min_similarity",
        ),
        (
            "/v1/feedback/export".into(),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "format",
        ),
        (
            "/v1/feedback/export?format=xml".into(),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "format",
        ),
    ];
    for (uri, want, code, path) in cases {
        let (status, v, headers) = send(&app, "GET", &uri, Body::empty()).await;
        let shown: String = uri.chars().take(60).collect();
        assert_eq!(status, want, "{shown}: {v}");
        assert_error_shape(&shown, &v, &headers);
        assert_eq!(
            (v["code"].as_str(), v["path"].as_str()),
            (Some(code), Some(path)),
            "{shown}: {v}"
        );
    }
    let (status, v, _) = send(
        &app,
        "GET",
        "/v1/tasks/p/history?limit=10000",
        Body::empty(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
}

#[tokio::test]
async fn routing_and_protocol_errors_have_the_same_shape() {
    let app = app();
    let (status, v, headers) = send(&app, "GET", "/v2/nothing", Body::empty()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_error_shape("404", &v, &headers);
    let (status, v, headers) = send(&app, "PUT", "/v1/evaluate", Body::empty()).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_error_shape("405", &v, &headers);
    assert_eq!(v["code"], "method_not_allowed");
    assert_eq!(headers["allow"], "POST");
    assert!(v["message"].as_str().unwrap().contains("PUT"), "{v}");
    let (status, v, headers) = send(&app, "DELETE", "/livez", Body::empty()).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_error_shape("405 on /livez", &v, &headers);
}

#[tokio::test]
async fn bodies_not_declared_json_are_415_and_change_nothing() {
    let app = app();
    for _ in 0..3 {
        post(&app, failure("csrf", "TypeError: x is undefined")).await;
    }
    let reset = json!({"reason": "success"}).to_string();
    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        for (uri, body) in [
            ("/v1/tasks/csrf/reset", reset.clone()),
            (
                "/v1/evaluate",
                failure("csrf", "TypeError: x is undefined").to_string(),
            ),
            (
                "/v1/feedback",
                json!({"task_id": "csrf", "seq": 2, "label": "false_positive"}).to_string(),
            ),
        ] {
            let (status, v, headers) = send_typed(&app, "POST", uri, ct, body).await;
            assert_eq!(
                status,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{uri} {ct:?}: {v}"
            );
            assert_error_shape(uri, &v, &headers);
            assert_eq!(v["code"], "unsupported_media_type");
        }
    }
    let (_, task, _) = send(&app, "GET", "/v1/tasks/csrf", Body::empty()).await;
    assert_eq!(task["loop_count"], 2, "nothing was reset: {task}");
    assert_eq!(task["events_total"], 3, "nothing was evaluated");
    let (status, _, _) = send_typed(
        &app,
        "POST",
        "/v1/tasks/csrf/reset",
        Some("application/json; charset=utf-8"),
        reset,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn duplicate_keys_are_invalid_json_naming_the_key() {
    let app = app();
    let cases = [
        (
            r#"{"task_id": "a", "task_id": "b", "event": {"type": "response", "text": "x"}}"#,
            "task_id",
        ),
        (
            r#"{"task_id": "a", "event": {"type": "response", "type": "failure", "text": "x"}}"#,
            "event.type",
        ),
        (
            r#"[{"task_id": "a", "event": {"type": "tool_call", "tool": "t", "args": {"p": 1, "p": 2}}}]"#,
            "[0].event.args.p",
        ),
    ];
    for (body, path) in cases {
        let (status, v, headers) = send(&app, "POST", "/v1/evaluate", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_error_shape(path, &v, &headers);
        assert_eq!(
            (v["code"].as_str(), v["path"].as_str()),
            (Some("invalid_json"), Some(path))
        );
        assert!(
            v["message"].as_str().unwrap().contains("duplicate key"),
            "{v}"
        );
    }
    let (status, v, _) = send(
        &app,
        "POST",
        "/v1/tasks/a/reset",
        r#"{"reason": "success", "reason": "human_intervention"}"#,
    )
    .await;
    assert_eq!(
        (status, v["path"].as_str()),
        (StatusCode::BAD_REQUEST, Some("reason"))
    );
    // Nothing was applied to either task.
    let (status, _, _) = send(&app, "GET", "/v1/tasks/a", Body::empty()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_task_view_is_bounded_whatever_the_input() {
    let state = state_with(Config::default(), model());
    let app = router(Arc::clone(&state));
    let limits = &state.cfg.server;
    // Four bytes a character, every field at its limit, every name new.
    let wide = |n: usize, tag: usize| {
        let mut s = format!("{tag}-");
        s.push_str(&"𝄞".repeat(n - s.chars().count()));
        s
    };
    let (name, text) = (limits.max_name_chars, limits.max_text_chars);
    let mut sent = 0usize;
    for i in 0..100 {
        let body = json!({
            "task_id": "hostile", "agent_id": wide(name, i), "step": wide(name, i), "goal": wide(text, i),
            "event": {"type": "progress", "note": wide(text, i)}
        });
        sent += body.to_string().len();
        let (status, v) = post(&app, body).await;
        assert_eq!(status, StatusCode::OK, "{v}");
    }
    for i in 0..20 {
        let body = json!({"task_id": "hostile", "event": {"type": "transition", "from": wide(name, i), "to": wide(name, i + 1), "reason": wide(text, i)}});
        sent += body.to_string().len();
        post(&app, body).await;
        let body = json!({"task_id": "hostile", "event": {"type": "failure", "message": wide(text, i),
            "stack_trace": wide(text, i), "location": wide(name, i), "error_type": wide(name, i)}});
        sent += body.to_string().len();
        post(&app, body).await;
        let body = json!({"task_id": "hostile", "event": {"type": "tool_call", "tool": wide(name, i),
            "args": {"a": wide(text - 10, i)}, "result": {"output": wide(text, i)}}});
        sent += body.to_string().len();
        let (status, v) = post(&app, body).await;
        assert_eq!(status, StatusCode::OK, "{v}");
    }
    let (status, view, _) = send(&app, "GET", "/v1/tasks/hostile", Body::empty()).await;
    assert_eq!(status, StatusCode::OK);
    let size = view.to_string().len();
    assert_eq!(view["events_total"], 160);
    assert!(
        view["step_entries"].as_object().unwrap().len() <= loopguard::state::MAX_STEPS_KEPT,
        "step entries are bounded"
    );
    // 160 events carried ~50 MB; the view keeps the window, bounded steps and trimmed texts.
    assert!(sent > 40_000_000, "{sent}");
    assert!(
        size < 1_000_000,
        "a {size}-byte view of {sent} bytes of input"
    );
    let stored = serde_json::to_vec(&state.engine.snapshot("hostile").await.unwrap().unwrap())
        .unwrap()
        .len();
    assert!(stored < 2_000_000, "the stored state is {stored} bytes");
    let (_, history, _) = send(&app, "GET", "/v1/tasks/hostile/history", Body::empty()).await;
    assert!(history.to_string().len() < 2_000_000);
}

#[tokio::test]
async fn the_server_clock_decides_ages_and_the_client_ts_is_only_recorded() {
    let state = state_with(Config::default(), model());
    let app = router(Arc::clone(&state));
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let skew = state.cfg.server.max_clock_skew_secs as i64;
    let at = |task: &str, ts: &str| json!({"task_id": task, "ts": ts, "event": {"type": "failure", "message": "ENOSPC: no space left on device"}});
    // Two days old: the old rule swept this task at once and its loop history with it.
    for _ in 0..3 {
        post(&app, at("past", "2000-01-01T00:00:00Z")).await;
    }
    // Year 2999: the old rule never expired it.
    post(&app, at("future", "2999-01-01T00:00:00Z")).await;
    let expired = state.engine.expire_idle(86_400, now + 10).await.unwrap();
    assert!(
        expired.is_empty(),
        "nothing is a day idle by the server's clock: {expired:?}"
    );
    let (_, task, _) = send(&app, "GET", "/v1/tasks/past", Body::empty()).await;
    assert_eq!(task["loop_count"], 2);
    let mut expired = state
        .engine
        .expire_idle(86_400, now + 86_400 + 60)
        .await
        .unwrap();
    expired.sort();
    assert_eq!(
        expired,
        ["future", "past"],
        "a day later by the server's clock, both go"
    );

    // The client's ts is recorded, clamped to within the skew of the server's time.
    post(&app, at("audit", "2000-01-01T00:00:00Z")).await;
    post(&app, at("audit", "2000-01-01T00:00:00Z")).await;
    let (_, h, _) = send(&app, "GET", "/v1/tasks/audit/history", Body::empty()).await;
    let record = &h["records"][0];
    let parse = |v: &Value| {
        time::OffsetDateTime::parse(
            v.as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
        .unix_timestamp()
    };
    let (ts, client_ts) = (parse(&record["ts"]), parse(&record["client_ts"]));
    assert!((ts - now).abs() < 60, "{record}");
    assert!(
        (client_ts - (ts - skew)).abs() < 60,
        "clamped to now - {skew} s: {record}"
    );
}

#[tokio::test]
async fn every_route_and_method_is_in_the_openapi_document() {
    let doc = openapi::document(&Config::default());
    let app = app();
    // Not an API operation: the document itself.
    const UNDOCUMENTED: [&str; 1] = ["/openapi.json"];
    for (path, _, _) in super::route_table() {
        if UNDOCUMENTED.contains(&path) {
            continue;
        }
        let item = &doc["paths"][path];
        assert!(
            item.is_object(),
            "{path} is missing from the OpenAPI document"
        );
        let uri = path.replace("{task_id}", "some-task");
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
            let (status, v, _) = send(&app, method, &uri, Body::empty()).await;
            let routed = status != StatusCode::METHOD_NOT_ALLOWED;
            let documented = item.get(method.to_ascii_lowercase()).is_some();
            assert_eq!(routed, documented, "{method} {path}: answered {status} {v}");
        }
    }
}

#[test]
fn every_route_has_its_own_metrics_label() {
    for (path, _, _) in super::route_table() {
        assert_eq!(super::route_label(Some(path)), path);
    }
    assert_eq!(super::route_label(Some("/dashboard/app.js")), "dashboard");
    assert_eq!(super::route_label(Some("/v2/nothing")), "other");
}

/// The OpenAPI document's task id pattern says what the server checks: the same ids match it
/// as pass `task_id_problem` (schemathesis generates from the pattern and expects them taken).
#[test]
fn the_task_id_pattern_is_the_check() {
    let pattern = regex::Regex::new(super::openapi::TASK_ID_PATTERN).unwrap();
    let mut ids: Vec<String> = [
        "t-42",
        "a b",
        " x",
        "x ",
        "epic-9/sub-2",
        "ünïcödé",
        "😀",
        "%ZZ",
        "",
        " ",
        "\t",
        "\u{3000}",
        "\u{a0}",
        "a\u{200b}b",
        "x\u{202e}y",
        "\u{feff}",
        "\u{2028}",
        "a\u{2066}",
        "\u{ad}",
        "\u{7f}",
        "\u{85}",
        "a\u{0}",
        "\u{205f}x",
        "\u{2060}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Every character of the first few planes' boundaries, alone and next to a letter.
    for c in (0u32..0x3100)
        .chain(0xfe00..0x10000)
        .filter_map(char::from_u32)
    {
        ids.push(c.to_string());
        ids.push(format!("a{c}"));
    }
    for id in ids {
        let valid = loopguard::event::task_id_problem(&id).is_none();
        assert_eq!(
            pattern.is_match(&id),
            valid,
            "{id:?} ({:?}): pattern and check disagree",
            id.chars().map(|c| c as u32).collect::<Vec<_>>()
        );
    }
}
