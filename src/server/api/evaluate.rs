//! `POST /v1/evaluate`: one event or a batch, each checked against the field limits, dated by
//! the server's clock and evaluated.

use super::validate::check;
use crate::server::http::body::{read_json, Limit};
use crate::server::http::error::{ApiError, ErrorBody};
use crate::server::http::limits::Limits;
use crate::server::http::time::clamp_to_now;
use crate::server::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use loopguard::engine::{Evaluation, Timings};
use loopguard::event::parse_envelope_value;
use loopguard::verdict::Verdict;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;

/// One batch item: a verdict, or the error for that event.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum BatchItem {
    Verdict(Box<Verdict>),
    Error { error: ErrorBody },
}

fn server_timing(t: &Timings) -> HeaderValue {
    let v = format!(
        "embed;dur={:.3}, detect;dur={:.3}, judge;dur={:.3}, store;dur={:.3}",
        t.embed_secs * 1e3,
        t.detect_secs * 1e3,
        t.judge_secs * 1e3,
        t.store_secs * 1e3
    );
    HeaderValue::from_str(&v).expect("ASCII header value")
}

async fn evaluate_one(
    state: &AppState,
    value: Value,
    prefix: &str,
) -> Result<Evaluation, ApiError> {
    let s = &state.cfg.server;
    check(&value, "Envelope", prefix, &Limits::of(s))?;
    let mut env = parse_envelope_value(value).map_err(|e| {
        let e = if prefix.is_empty() {
            e
        } else {
            e.under(prefix)
        };
        ApiError::from_input(e)
    })?;
    // The engine dates events by the server's clock (Clock::Server); the client's `ts` is only
    // recorded, and kept near the truth so the audit trail stays readable.
    env.ts = env.ts.map(|t| clamp_to_now(t, s.max_clock_skew_secs));
    let eval = state.engine.evaluate_timed(env).await?;
    state.metrics.evaluation(&eval);
    Ok(eval)
}

/// `POST /v1/evaluate`: one event → one verdict; an array of events → an array of verdicts (or
/// per-event errors), in order.
#[utoipa::path(
    post,
    path = "/v1/evaluate",
    tag = "evaluate",
    request_body(content = loopguard::event::Envelope, description = "One event envelope, or an array of them (batch)"),
    responses(
        (status = 200, description = "The verdict (or, for a batch, one item per event: a verdict or `{\"error\": ...}`)", body = Verdict),
        (status = 400, description = "Malformed JSON, invalid UTF-8, an invalid event; `path` names the field", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 409, description = "A new subtask of a root that has server.max_subtasks already (`too_many_subtasks`), or a `parent_task_id` that would move a task that exists under another parent (`parent_conflict`; a task keeps the place it was created with)", body = ErrorBody),
        (status = 413, description = "Body or a text field too large", body = ErrorBody),
        (status = 429, description = "The embedding queue is full; see Retry-After", body = ErrorBody),
        (status = 503, description = "Model unavailable, store failure or timeout", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
pub async fn evaluate(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let value = match read_json(&headers, body, Limit::server(&state.cfg.server)).await {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    match value {
        Value::Array(items) => {
            let max = state.cfg.server.max_batch_events;
            if items.len() > max {
                return ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "too_many_events",
                    format!(
                        "{} events in one batch; the limit is {max} (server.max_batch_events)",
                        items.len()
                    ),
                )
                .at(".")
                .into_response();
            }
            state.metrics.batch_events.observe(items.len() as f64);
            // All events start at once so their texts share model calls; events of one task
            // still apply in order (the engine's per-task lock is first come, first served and
            // join_all polls the futures in order).
            let st = &state;
            let futures = items.into_iter().enumerate().map(|(i, v)| async move {
                match evaluate_one(st, v, &format!("[{i}]")).await {
                    Ok(e) => BatchItem::Verdict(Box::new(e.verdict)),
                    Err(e) => BatchItem::Error { error: e.body },
                }
            });
            let out = futures_util::future::join_all(futures).await;
            Json(out).into_response()
        }
        Value::Object(_) => {
            state.metrics.batch_events.observe(1.0);
            match evaluate_one(&state, value, "").await {
                Ok(e) => {
                    let mut resp = Json(&e.verdict).into_response();
                    resp.headers_mut()
                        .insert("server-timing", server_timing(&e.timings));
                    resp
                }
                Err(e) => e.into_response(),
            }
        }
        other => ApiError::bad_request(
            "invalid_event",
            format!(
                "expected an event envelope (object) or an array of them, got {}",
                match other {
                    Value::Null => "null",
                    Value::Bool(_) => "a boolean",
                    Value::Number(_) => "a number",
                    Value::String(_) => "a string",
                    _ => "something else",
                }
            ),
        )
        .at(".")
        .into_response(),
    }
}
