//! The router: every route of the API, the ingestion endpoints and the views, behind
//! authentication, the request timeout, request metrics and one error body shape.

use crate::server::api::{evaluate, feedback, loops, openapi, operations, tasks};
use crate::server::http::error::{self, ApiError};
use crate::server::ingest::{hooks, otlp};
use crate::server::metrics;
use crate::server::views::{dashboard, overview};
use crate::server::AppState;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The dashboard page and its assets: not API routes (not in the OpenAPI document), one
/// metrics label for all of them.
const DASHBOARD_PATHS: [&str; 4] = [
    "/",
    "/dashboard/app.js",
    "/dashboard/style.css",
    "/dashboard/icon.svg",
];

/// Every route: its path, whether it needs the bearer token, and its handlers. The router is
/// built from this list, and a test checks every path and method in it against the OpenAPI
/// document, so a route cannot be added without being documented (and fuzzed in CI).
pub fn route_table() -> Vec<(&'static str, bool, MethodRouter<Arc<AppState>>)> {
    vec![
        ("/v1/evaluate", true, post(evaluate::evaluate)),
        ("/v1/tasks", true, get(overview::list_tasks)),
        (
            "/v1/tasks/{task_id}",
            true,
            get(tasks::get_task).delete(tasks::delete_task),
        ),
        ("/v1/tasks/{task_id}/history", true, get(tasks::get_history)),
        ("/v1/tasks/{task_id}/reset", true, post(tasks::reset_task)),
        ("/v1/loops", true, get(overview::recent_loops)),
        ("/v1/loops/similar", true, get(loops::similar_loops)),
        ("/v1/stats", true, get(overview::stats)),
        ("/v1/feedback", true, post(feedback::feedback)),
        ("/v1/feedback/export", true, get(feedback::export_feedback)),
        ("/v1/hooks/claude-code", true, post(hooks::claude_code)),
        ("/v1/hooks/gemini-cli", true, post(hooks::gemini_cli)),
        ("/v1/traces", true, post(otlp::traces)),
        ("/metrics", true, get(operations::metrics)),
        ("/livez", false, get(operations::livez)),
        ("/readyz", false, get(operations::readyz)),
        ("/openapi.json", false, get(openapi::serve)),
    ]
}

/// The routes, with authentication, timeouts, request metrics and one error body shape.
pub fn router(state: Arc<AppState>) -> Router {
    let mut api = Router::new();
    let mut open = Router::new();
    for (path, guarded, handlers) in route_table() {
        if guarded {
            api = api.route(path, handlers);
        } else {
            open = open.route(path, handlers);
        }
    }
    let api = api.route_layer(middleware::from_fn_with_state(
        Arc::clone(&state),
        authenticate,
    ));
    // The page shell holds no data, so it is public even with a token (see dashboard.rs).
    let page = if state.cfg.server.dashboard {
        let [index, script, style, icon] = DASHBOARD_PATHS;
        Router::new()
            .route(index, get(dashboard::index))
            .route(script, get(dashboard::script))
            .route(style, get(dashboard::style))
            .route(icon, get(dashboard::icon))
    } else {
        Router::new()
    };
    Router::new()
        .merge(api)
        .merge(open)
        .merge(page)
        .fallback(operations::not_found)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            request_metrics,
        ))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            error::panicked,
        ))
        .layer(middleware::from_fn(error::json_errors))
        .with_state(state)
}

/// Bearer-token check for the API and metrics (never for /livez and /readyz).
async fn authenticate(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let Some(token) = state.cfg.server.auth_token.as_deref() else {
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    if given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes())) {
        next.run(req).await
    } else {
        let mut resp = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid `Authorization: Bearer <token>` header is required",
        )
        .into_response();
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer"),
        );
        resp
    }
}

/// The token of an `Authorization: Bearer <token>` header. The scheme is case-insensitive
/// (RFC 9110 §11.1): `bearer`, `BEARER` and `Bearer` are the same.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_matches(' '))
}

// Comparing a secret must not leak how many leading bytes matched.
pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Request timeout and per-route metrics.
async fn request_metrics(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = route_label(req.extensions().get::<MatchedPath>().map(|p| p.as_str()));
    let started = Instant::now();
    let timeout = Duration::from_millis(state.cfg.server.request_timeout_ms);
    let resp = match tokio::time::timeout(timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => {
            let mut e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                format!(
                    "the request took longer than {} ms (server.request_timeout_ms); it may or may not have been applied",
                    timeout.as_millis()
                ),
            );
            e.retry_after_secs = Some(1);
            e.into_response()
        }
    };
    state
        .metrics
        .requests
        .get_or_create(&metrics::RequestLabels {
            route,
            status: resp.status().as_u16(),
        })
        .inc();
    let secs = started.elapsed().as_secs_f64();
    state
        .metrics
        .request_seconds
        .get_or_create(&metrics::RouteLabels { route })
        .observe(secs);
    if route == "/v1/evaluate" && resp.status().is_success() {
        state.metrics.live.evaluate_request(secs);
    }
    resp
}

/// The metrics label of a request: its route template, or `other` for unknown paths. Labels
/// stay bounded: only templates of [`route_table`] are ever interned.
pub(super) fn route_label(matched: Option<&str>) -> &'static str {
    static LABELS: OnceLock<Vec<&'static str>> = OnceLock::new();
    let labels = LABELS.get_or_init(|| route_table().into_iter().map(|(p, _, _)| p).collect());
    match matched {
        Some(m) if DASHBOARD_PATHS.contains(&m) => "dashboard",
        Some(m) => labels.iter().find(|l| **l == m).copied().unwrap_or("other"),
        None => "other",
    }
}
