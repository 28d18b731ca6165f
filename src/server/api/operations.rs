//! What operators and orchestrators probe: liveness, readiness (and what answers while the
//! store opens), the metrics, and the answer to an unknown route.

use crate::server::http::error::{ApiError, ErrorBody};
use crate::server::AppState;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use std::sync::Arc;

/// `GET /livez`: the process is up, and nothing stops it from recovering by itself. 503 when
/// only a restart can help (the task log's disk failed a write or sync other than for want of
/// space: what is on disk after it is unknown until a restart replays the log).
#[utoipa::path(get, path = "/livez", tag = "operations", responses(
    (status = 200, description = "Alive (also while the store opens and replays its log)", body = String),
    (status = 503, description = "Alive but unable to recover without a restart; `error` says why", body = ErrorBody),
))]
pub async fn livez(State(state): State<Arc<AppState>>) -> Response {
    match state.store.fatal() {
        None => "ok".into_response(),
        Some(why) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage_error",
            format!("the state store cannot recover without a restart: {why}"),
        )
        .into_response(),
    }
}

/// What answers while the store opens and replays its log: `/livez` is up, `/readyz` says the
/// store is opening, everything else is 503 `starting` with `Retry-After`.
pub fn starting_router() -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route("/livez", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|| async {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    Json(Readiness {
                        status: "starting",
                        model: "not loaded yet".into(),
                        store: "opening",
                        error: Some("opening the state store (replaying the task log)".into()),
                    }),
                )
            }),
        )
        .fallback(|| async {
            let mut e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "starting",
                "the service is starting: its state store is being opened; retry shortly (see /readyz)",
            );
            e.retry_after_secs = Some(1);
            e
        })
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Readiness {
    /// `ready`; `starting` (the store is being opened: its log replayed); `loading` (the
    /// model); `failed` (the model could not be loaded); `unavailable` (the state store cannot
    /// be used: a shared database that cannot be reached, a full disk). `error` says why.
    pub status: &'static str,
    pub model: String,
    /// `open`, `opening`, or `unavailable`.
    pub store: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /readyz`: ready only when the model is loaded and warm and the store can be used.
#[utoipa::path(get, path = "/readyz", tag = "operations", responses((status = 200, body = Readiness), (status = 503, body = Readiness)))]
pub async fn readyz(State(state): State<Arc<AppState>>) -> (StatusCode, Json<Readiness>) {
    let e = state.engine.embedder();
    let store_problem = state.store.unready();
    let store = if store_problem.is_some() {
        "unavailable"
    } else {
        "open"
    };
    if e.is_ready() && store_problem.is_none() {
        return (
            StatusCode::OK,
            Json(Readiness {
                status: "ready",
                model: e.describe(),
                store,
                error: None,
            }),
        );
    }
    let (status, error) = match (e.load_error(), store_problem) {
        (Some(err), _) => ("failed", Some(err.to_string())),
        (None, Some(why)) => ("unavailable", Some(why)),
        (None, None) => ("loading", None),
    };
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(Readiness {
            status,
            model: e.describe(),
            store,
            error,
        }),
    )
}

/// `GET /metrics`: Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, description = "Prometheus text exposition", body = String)), security((), ("bearer" = [])))]
pub async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    (headers, state.metrics.render())
}

/// Any unknown route.
pub async fn not_found() -> ApiError {
    ApiError::not_found("no such route; see /openapi.json")
}
