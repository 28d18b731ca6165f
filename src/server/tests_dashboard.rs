//! The dashboard's endpoints through `router().oneshot(request)`, on the real model: the task
//! listing, recent loops, live figures, the timeline in the task view, and the page's auth
//! scheme. The page itself is exercised in a real browser by tests/browser/.

use super::tests::{app, failure, model, post, send, state_with};
use super::*;
use axum::body::Body;
use axum::http::Request;
use axum::http::StatusCode;
use axum::Router;
use loopguard::Config;
use serde_json::{json, Value};
use std::sync::Arc;
use tower::ServiceExt;

fn at(task: &str, ts: &str, event: Value) -> Value {
    json!({"task_id": task, "ts": ts, "agent_id": "coder", "event": event})
}

fn fail(msg: &str) -> Value {
    json!({"type": "failure", "message": msg})
}

/// A reworded failure loop: a warning, then the pivot directive.
const REWORDED: [&str; 3] = [
    "AssertionError: session expired after 300s, expected 900s in tests/test_login.py:42",
    "AssertionError: the session expired after 300 seconds, but 900 seconds were expected (tests/test_login.py:42)",
    "test_session_expiry failed: session expired after 300s instead of the expected 900s at tests/test_login.py:42",
];

async fn get(app: &Router, uri: &str) -> (StatusCode, Value) {
    let (s, v, _) = send(app, "GET", uri, Body::empty()).await;
    (s, v)
}

#[tokio::test]
async fn tasks_are_listed_newest_first_with_status_loops_and_pivots() {
    let app = app();
    for (i, msg) in REWORDED.iter().enumerate() {
        let ts = format!("2026-11-20T10:00:0{i}Z");
        post(&app, at("looping", &ts, fail(msg))).await;
    }
    post(
        &app,
        at("quiet", "2026-11-20T09:00:00Z", fail("disk full on /var")),
    )
    .await;
    post(
        &app,
        at(
            "newest",
            "2026-11-20T11:00:00Z",
            json!({"type": "response", "text": "Reading the code first."}),
        ),
    )
    .await;

    let (status, v) = get(&app, "/v1/tasks").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["total"], 3);
    let ids: Vec<&str> = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap())
        .collect();
    // Newest first, by the server's clock (the service ignores the events' `ts` for this), ties
    // in id order.
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(sorted, ["looping", "newest", "quiet"]);
    let key = |t: &Value| {
        (
            t["updated_at"].as_str().unwrap().to_string(),
            t["task_id"].clone(),
        )
    };
    let tasks = v["tasks"].as_array().unwrap();
    for w in tasks.windows(2) {
        let (a, b) = (key(&w[0]), key(&w[1]));
        assert!(
            a.0 > b.0 || (a.0 == b.0 && a.1.as_str() < b.1.as_str()),
            "{a:?} {b:?}"
        );
    }
    let by_id = |id: &str| tasks.iter().find(|t| t["task_id"] == id).unwrap();
    let looping = by_id("looping");
    assert_eq!(looping["status"], "active");
    assert_eq!(looping["loop_count"], 2);
    assert_eq!(looping["pivot_count"], 1);
    assert_eq!(looping["events_total"], 3);
    assert_eq!(looping["kind_counts"]["semantic_repeat"], 2);
    assert_eq!(looping["last_loop"]["kind"], "semantic_repeat");
    assert_eq!(looping["last_loop"]["seq"], 3);
    assert_eq!(looping["last_verdict"]["action"], "pivot");
    let updated = time::OffsetDateTime::parse(
        looping["updated_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert!(
        (time::OffsetDateTime::now_utc() - updated)
            .whole_seconds()
            .abs()
            < 60
    );
    assert_eq!(by_id("quiet")["last_loop"], Value::Null);

    let (status, v) = get(&app, "/v1/tasks?limit=1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["total"], 3);
    assert_eq!(v["tasks"].as_array().unwrap().len(), 1);
    for bad in ["limit=0", "limit=501", "limit=ten"] {
        let (status, v) = get(&app, &format!("/v1/tasks?{bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {v}");
        assert_eq!(v["code"], "invalid_parameter");
        assert_eq!(v["path"], "limit");
    }
}

#[tokio::test]
async fn the_task_view_is_a_timeline_of_what_each_verdict_found() {
    let app = app();
    for msg in REWORDED {
        post(&app, failure("timeline", msg)).await;
    }
    let (status, v) = get(&app, "/v1/tasks/timeline").await;
    assert_eq!(status, StatusCode::OK);
    let verdicts = v["last_verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 3);
    let first = &verdicts[0];
    assert_eq!(first["loop"], false);
    assert_eq!(first["similarity"], Value::Null);
    assert!(first["ts"].as_str().unwrap().contains('T'), "{first}");
    let second = &verdicts[1];
    assert_eq!(second["loop"], true);
    assert_eq!(second["kind"], "semantic_repeat");
    assert_eq!(second["counted"], true);
    assert_eq!(second["matched_seq"], 1);
    assert_eq!(second["event_type"], "failure");
    let sim = second["similarity"].as_f64().unwrap();
    assert!(sim > 0.86 && sim <= 1.0, "{sim}");
    assert!(second["matched_text"]
        .as_str()
        .unwrap()
        .contains("session expired"));
    assert!(
        second["reason"].as_str().unwrap().contains("reworded"),
        "{second}"
    );
    assert_eq!(verdicts[2]["action"], "pivot");
    assert_eq!(verdicts[2]["agent_id"], Value::Null);
}

#[tokio::test]
async fn recent_loops_come_newest_first_with_their_resolution() {
    let state = state_with(Config::default(), model());
    let app = router(Arc::clone(&state));
    for _ in 0..2 {
        post(
            &app,
            failure("resolved", "ConnectionRefusedError: redis at 10.0.0.5:6379"),
        )
        .await;
    }
    post(
        &app,
        json!({"task_id": "resolved", "event": {"type": "outcome", "result": "human_intervention",
               "note": "restarted redis"}}),
    )
    .await;
    for _ in 0..2 {
        post(
            &app,
            failure("open", "PermissionError: cannot write /etc/app.conf"),
        )
        .await;
    }
    state.engine.settle().await;

    let (status, v) = get(&app, "/v1/loops").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["total"], 2);
    let loops = v["loops"].as_array().unwrap();
    assert_eq!(loops[0]["task_id"], "open", "newest first");
    assert_eq!(loops[0]["resolution"], Value::Null);
    assert_eq!(loops[0]["kind"], "exact_repeat");
    assert!(loops[0]["text"]
        .as_str()
        .unwrap()
        .contains("permissionerror"));
    assert_eq!(loops[1]["task_id"], "resolved");
    assert_eq!(loops[1]["resolution"]["result"], "human_intervention");
    assert_eq!(loops[1]["resolution"]["note"], "restarted redis");
    assert!(loops[1]["seen_at"].as_str().unwrap().contains('T'));

    let (_, v) = get(&app, "/v1/loops?limit=1").await;
    assert_eq!(v["loops"].as_array().unwrap().len(), 1);
    let (status, v) = get(&app, "/v1/loops?limit=-3").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(v["path"], "limit");

    let mut cfg = Config::default();
    cfg.memory.enabled = false;
    let app = router(state_with(cfg, model()));
    let (status, v) = get(&app, "/v1/loops").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(v["message"].as_str().unwrap().contains("disabled"));
}

#[tokio::test]
async fn stats_count_events_loops_model_share_and_latency() {
    let app = app();
    let (status, v) = get(&app, "/v1/stats").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["last_minute"]["events"], 0);
    assert_eq!(v["last_minute"]["model_share"], Value::Null);
    assert_eq!(v["last_minute"]["latency_ms"]["p50"], Value::Null);

    for msg in REWORDED {
        post(&app, failure("s", msg)).await;
    }
    // One batch of two events: two events, one request.
    let (status, _, _) = send(
        &app,
        "POST",
        "/v1/evaluate",
        json!([failure("s2", "boom"), failure("s2", "boom")]).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    let (_, v) = get(&app, "/v1/stats").await;
    for span in ["last_minute", "since_start"] {
        let f = &v[span];
        assert_eq!(f["events"], 5, "{span}: {v}");
        assert_eq!(f["evaluate_requests"], 4, "{span}");
        assert_eq!(f["loops"], 3, "two reworded repeats and one exact: {v}");
        assert_eq!(f["events_needing_judge"], 0);
        assert_eq!(f["judge_share"], 0.0);
        let needing_model = f["events_needing_model"].as_u64().unwrap();
        assert!((1..=5).contains(&needing_model), "{v}");
        let share = f["model_share"].as_f64().unwrap();
        assert!((share - needing_model as f64 / 5.0).abs() < 1e-9);
        assert!(f["events_per_sec"].as_f64().unwrap() > 0.0);
        let (p50, p95) = (
            f["latency_ms"]["p50"].as_f64().unwrap(),
            f["latency_ms"]["p95"].as_f64().unwrap(),
        );
        assert!(p50 > 0.0 && p50 <= p95, "{v}");
    }
    assert_eq!(v["pivots_issued"], 1);
    assert_eq!(v["gates_triggered"], 0);
    assert_eq!(v["model_ready"], true);
    assert_eq!(v["judge_configured"], false);
    assert_eq!(v["tasks_in_memory"], 2);
}

async fn raw(app: &Router, uri: &str, token: Option<&str>) -> (StatusCode, HeaderMapText) {
    let mut req = Request::builder().method("GET").uri(uri);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = app
        .clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        HeaderMapText {
            headers,
            body: String::from_utf8(bytes.to_vec()).unwrap(),
        },
    )
}

struct HeaderMapText {
    headers: axum::http::HeaderMap,
    body: String,
}

impl HeaderMapText {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
    }
}

#[tokio::test]
async fn the_page_is_public_and_holds_no_data_while_its_data_needs_the_token() {
    let mut cfg = Config::default();
    cfg.server.auth_token = Some("s3cret".into());
    let app = router(state_with(cfg, model()));
    let req = Request::builder()
        .method("POST")
        .uri("/v1/evaluate")
        .header("authorization", "Bearer s3cret")
        .header("content-type", "application/json")
        .body(Body::from(failure("secret-task-name", "boom").to_string()))
        .unwrap();
    assert_eq!(
        app.clone().oneshot(req).await.unwrap().status(),
        StatusCode::OK
    );

    let (status, page) = raw(&app, "/", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.header("content-type").starts_with("text/html"));
    let csp = page.header("content-security-policy");
    assert!(
        csp.contains("script-src 'self'") && csp.contains("connect-src 'self'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(page.header("x-content-type-options"), "nosniff");
    assert!(page.body.contains("/dashboard/app.js"));
    assert!(
        !page.body.contains("secret-task-name"),
        "the shell holds no data"
    );
    assert!(
        !page.body.contains("http://") && !page.body.contains("https://"),
        "no CDN, nothing fetched from elsewhere"
    );
    for (path, kind) in [
        ("/dashboard/app.js", "text/javascript"),
        ("/dashboard/style.css", "text/css"),
        ("/dashboard/icon.svg", "image/svg+xml"),
    ] {
        let (status, asset) = raw(&app, path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(asset.header("content-type").starts_with(kind), "{path}");
        assert!(!asset.body.is_empty());
    }

    for path in [
        "/v1/tasks",
        "/v1/loops",
        "/v1/stats",
        "/v1/tasks/secret-task-name",
    ] {
        let (status, r) = raw(&app, path, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(!r.body.contains("secret-task-name"), "{path}");
        let (status, _) = raw(&app, path, Some("wrong")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        let (status, r) = raw(&app, path, Some("s3cret")).await;
        assert_eq!(status, StatusCode::OK, "{path}: {}", r.body);
    }
}

#[tokio::test]
async fn the_dashboard_can_be_switched_off() {
    let mut cfg = Config::default();
    cfg.server.dashboard = false;
    let app = router(state_with(cfg, model()));
    for path in ["/", "/dashboard/app.js"] {
        let (status, v) = get(&app, path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(v["code"], "not_found");
    }
    // The read endpoints stay: they are part of the API.
    let (status, _) = get(&app, "/v1/stats").await;
    assert_eq!(status, StatusCode::OK);
}
