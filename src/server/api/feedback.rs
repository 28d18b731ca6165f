//! Feedback: a verdict marked as a false positive or a missed loop, and all of it exported as
//! calibration input.

use super::validate::check;
use crate::server::http::body::{read_json, typed, Limit};
use crate::server::http::error::{ApiError, ErrorBody};
use crate::server::http::limits::Limits;
use crate::server::http::params::QueryParams;
use crate::server::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedbackRequest {
    pub task_id: String,
    /// The `seq` of the verdict (one of the task's last 20).
    pub seq: u64,
    /// `false_positive` (it said loop, it was not) or `missed_loop` (it said no loop, it was).
    pub label: loopguard::feedback::FeedbackLabel,
    #[serde(default)]
    pub note: Option<String>,
    /// For a missed loop: the earlier event it repeats (default: the latest earlier event of
    /// the same type).
    #[serde(default)]
    pub matched_seq: Option<u64>,
}

/// `POST /v1/feedback`: mark a verdict as a false positive or a missed loop.
#[utoipa::path(
    post,
    path = "/v1/feedback",
    tag = "feedback",
    request_body = FeedbackRequest,
    responses(
        (status = 201, body = loopguard::feedback::FeedbackRecord),
        (status = 400, body = ErrorBody),
        (status = 404, description = "No such task or verdict", body = ErrorBody),
        (status = 409, description = "The label contradicts the verdict", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
pub async fn feedback(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<loopguard::feedback::FeedbackRecord>), ApiError> {
    let value = read_json(&headers, body, Limit::server(&state.cfg.server)).await?;
    check(
        &value,
        "FeedbackRequest",
        "",
        &Limits::of(&state.cfg.server),
    )?;
    let mut req: FeedbackRequest = typed(value)?;
    if let Some(why) = loopguard::event::task_id_problem(&req.task_id) {
        return Err(ApiError::bad_request("invalid_event", why).at("task_id"));
    }
    req.task_id = loopguard::event::task_id_nfc(&req.task_id);
    let record = state
        .engine
        .feedback(&req.task_id, req.seq, req.label, req.note, req.matched_seq)
        .await?;
    state.metrics.feedback(&record);
    Ok((StatusCode::CREATED, Json(record)))
}

/// What `GET /v1/feedback/export` writes.
#[derive(utoipa::ToSchema)]
#[expect(
    dead_code,
    reason = "describes the parameter for the OpenAPI document only"
)]
#[serde(rename_all = "snake_case")]
pub enum ExportFormat {
    Pairs,
    Runs,
}

// The document's description of the parameters; `QueryParams` parses them.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(
    dead_code,
    reason = "describes the parameters for the OpenAPI document only"
)]
pub struct ExportQuery {
    /// `pairs` (for `loopguard calibrate pairs`) or `runs` (for `loopguard calibrate runs`).
    pub format: ExportFormat,
}

/// `GET /v1/feedback/export?format=pairs|runs`: all feedback as calibration input (JSON lines).
#[utoipa::path(
    get,
    path = "/v1/feedback/export",
    tag = "feedback",
    params(ExportQuery),
    responses((status = 200, description = "JSON lines", content_type = "application/x-ndjson", body = String), (status = 400, body = ErrorBody)),
    security((), ("bearer" = []))
)]
pub async fn export_feedback(
    State(state): State<Arc<AppState>>,
    q: QueryParams,
) -> Result<Response, ApiError> {
    let runs = q.choice("format", &["pairs", "runs"])? == "runs";
    // The first page is read before answering, so that a store that cannot be read is an
    // error status, not a 200 cut short.
    let store = Arc::clone(state.engine.feedback_store());
    let first = store
        .page(0, loopguard::feedback::PAGE)
        .await
        .map_err(loopguard::engine::EngineError::from)?;
    // Streamed a page of records at a time: what is held is one page, whatever the export's
    // size (it was built whole in memory: 1 GB for 270k records).
    let lines = move |page: &[loopguard::feedback::FeedbackRecord]| {
        let mut out = String::new();
        for r in page {
            let line = if runs {
                (!r.events.is_empty()).then(|| r.as_run())
            } else {
                r.as_pair()
            };
            if let Some(line) = line {
                out.push_str(&line.to_string());
                out.push('\n');
            }
        }
        axum::body::Bytes::from(out)
    };
    enum Step {
        Page(
            Vec<loopguard::feedback::FeedbackRecord>,
            Arc<loopguard::feedback::FeedbackStore>,
        ),
        Failed(String),
        Done,
    }
    let body = futures_util::stream::unfold(Step::Page(first, store), move |step| async move {
        match step {
            Step::Done => None,
            // Mid-answer: the status is sent, so the body ends short (a client sees a chunked
            // body cut off) and the error is logged.
            Step::Failed(e) => Some((Err(std::io::Error::other(e)), Step::Done)),
            Step::Page(page, store) => {
                let chunk = lines(&page);
                let next = match page.last() {
                    Some(last) if page.len() == loopguard::feedback::PAGE => {
                        match store.page(last.id, loopguard::feedback::PAGE).await {
                            Ok(page) => Step::Page(page, store),
                            Err(e) => {
                                tracing::error!(error = %e, "feedback export: reading a page failed");
                                Step::Failed(e.to_string())
                            }
                        }
                    }
                    _ => Step::Done,
                };
                Some((Ok(chunk), next))
            }
        }
    });
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    Ok((headers, Body::from_stream(body)).into_response())
}
