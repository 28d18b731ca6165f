//! The contract at the edges, through `router().oneshot(request)`: every bounded field and
//! parameter refused by name, routing and protocol errors in one shape, bodies by content type,
//! the clock, and every route in the OpenAPI document with its own metrics label.

use super::router::route_label;
use super::tests::{answer, app, as_value, failure, model, post, send, state_with};
use super::*;
use axum::body::Body;
use axum::http::Request;
use axum::http::StatusCode;
use axum::Router;
use loopguard::Config;
use serde_json::{json, Value};
use std::sync::Arc;

/// A request with a given content type (or none).
pub(super) async fn send_typed(
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
    use super::api::validate::FIELDS;
    use super::http::limits::{Class, Limits};
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
    for (path, _, _) in super::router::route_table() {
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
    for (path, _, _) in super::router::route_table() {
        assert_eq!(route_label(Some(path)), path);
    }
    assert_eq!(route_label(Some("/dashboard/app.js")), "dashboard");
    assert_eq!(route_label(Some("/v2/nothing")), "other");
}

/// The OpenAPI document's task id pattern says what the server checks: the same ids match it
/// as pass `task_id_problem` (schemathesis generates from the pattern and expects them taken).
#[test]
fn the_task_id_pattern_is_the_check() {
    let pattern = regex::Regex::new(&super::openapi::task_id_pattern()).unwrap();
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
    for c in (0u32..0x3200)
        .chain(0xfe00..0x10000)
        .chain(0x1bc90..0x1bcb0)
        .chain(0x1d160..0x1d180)
        .chain(0x1f600..0x1f610)
        .chain(0xdfff0..0xe1010)
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
