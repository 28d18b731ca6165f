//! Handlers. Bodies and parameters are read and parsed by this module's helpers (not by axum's
//! extractors) so every rejection is our JSON error with a code and a path.

use super::body::read_json;
use super::error::{ApiError, ErrorBody};
use super::params::{QueryParams, TaskId};
use super::validate::{check, check_param, Class, Limits};
use super::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use loopguard::engine::{Evaluation, ResetReason, Timings};
use loopguard::event::parse_envelope_value;
use loopguard::state::{EntryBody, TaskState};
use loopguard::verdict::Verdict;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
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

/// `t`, moved to within `skew_secs` of the server's time.
pub(super) fn clamp_to_now(t: time::OffsetDateTime, skew_secs: u64) -> time::OffsetDateTime {
    let now = time::OffsetDateTime::now_utc();
    let skew = time::Duration::seconds(skew_secs.min(i64::MAX as u64) as i64);
    let (earliest, latest) = (now.saturating_sub(skew), now.saturating_add(skew));
    if t < earliest {
        earliest
    } else if t > latest {
        latest
    } else {
        t
    }
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
    let value = match read_json(&headers, body, state.cfg.server.max_body_bytes).await {
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

/// One window event as `GET /v1/tasks/{id}` shows it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct WindowItem {
    pub seq: u64,
    #[serde(rename = "type")]
    pub kind: String,
    pub agent_id: Option<String>,
    pub ts: String,
    /// Normalised and trimmed, as loopguard compares it.
    pub text: String,
    pub new_work: bool,
}

/// A past verdict as `GET /v1/tasks/{id}` shows it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct VerdictItem {
    pub seq: u64,
    /// The task or subtask the event was sent for.
    pub task_id: String,
    /// RFC 3339 (empty for verdicts stored before loopguard kept it).
    pub ts: String,
    pub agent_id: Option<String>,
    /// `failure`, `tool_call`, `response`, `collaboration`, `transition`, `progress`, `outcome`.
    pub event_type: String,
    /// The event's text as compared (failures, tool calls without their result, responses,
    /// requests; empty for the other types), trimmed to 500 characters.
    pub text: String,
    #[serde(rename = "loop")]
    pub is_loop: bool,
    pub kind: loopguard::verdict::LoopKind,
    /// Whether the event moved the loop counter.
    pub counted: bool,
    pub similarity: Option<f32>,
    /// The earlier event it matched, and that event's text.
    pub matched_seq: Option<u64>,
    pub matched_text: Option<String>,
    /// `continue`, `warn`, `retry_with_hint`, `pivot`, `escalate`, `pause`, `terminate`.
    pub action: String,
    pub loop_count: u32,
    pub reason: String,
    /// The detection rule behind the verdict (`loopguard rules` lists them), when one was.
    pub rule: Option<String>,
    /// A collaboration message: the artifacts it carried and how each changed (lines added and
    /// removed, and where). Absent when it carried none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<loopguard::signature::artifact::ArtifactChange>,
}

impl From<&loopguard::state::VerdictSummary> for VerdictItem {
    fn from(v: &loopguard::state::VerdictSummary) -> Self {
        VerdictItem {
            seq: v.seq,
            task_id: v.task_id.clone(),
            ts: if v.ts == 0 {
                String::new()
            } else {
                rfc3339(v.ts)
            },
            agent_id: v.agent_id.clone(),
            event_type: v.event_type.clone(),
            text: v.text.clone(),
            is_loop: v.is_loop,
            kind: v.kind,
            counted: v.counted,
            similarity: v.similarity,
            matched_seq: v.matched_seq,
            matched_text: v.matched_text.clone(),
            action: v.action.clone(),
            loop_count: v.loop_count,
            reason: v.reason.clone(),
            rule: v.rule.clone(),
            artifacts: v.artifacts.clone(),
        }
    }
}

/// A task's state.
#[derive(Serialize, utoipa::ToSchema)]
pub struct TaskView {
    pub task_id: String,
    pub root_task_id: String,
    /// `active`, `paused` (the gate fired or MAX_PIVOTS was exceeded) or `terminated` (budget).
    pub status: loopguard::verdict::TaskStatus,
    pub loop_count: u32,
    /// Loops counted since the last pivot (the entropy count).
    pub entropy_count: u32,
    pub pivot_count: u32,
    /// Every event of the task; the global budget counts these.
    pub events_total: u64,
    pub kind_counts: BTreeMap<String, u32>,
    pub current_step: Option<String>,
    pub step_entries: BTreeMap<String, u32>,
    pub window: Vec<WindowItem>,
    /// The last 20 verdicts, oldest first: the task's timeline.
    pub last_verdicts: Vec<VerdictItem>,
    pub created_at: String,
    pub updated_at: String,
}

pub fn rfc3339(ts: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(ts)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

fn view(task_id: &str, s: &TaskState) -> TaskView {
    TaskView {
        task_id: task_id.to_string(),
        root_task_id: s.root.clone(),
        status: s.status,
        loop_count: s.loop_count,
        entropy_count: s.entropy,
        pivot_count: s.pivot_count,
        events_total: s.events_total,
        kind_counts: s.kind_hits.clone(),
        current_step: s.current_step.clone(),
        step_entries: s.step_entries.clone(),
        window: s
            .window
            .iter()
            .map(|e| WindowItem {
                seq: e.seq,
                kind: match &e.body {
                    EntryBody::Failure { .. } => "failure",
                    EntryBody::ToolCall { .. } => "tool_call",
                    EntryBody::Response { .. } | EntryBody::ResponseChunk { .. } => "response",
                    EntryBody::Collaboration { .. } => "collaboration",
                    EntryBody::Transition { .. } => "transition",
                    EntryBody::Progress { .. } => "progress",
                    EntryBody::Outcome { .. } => "outcome",
                }
                .to_string(),
                agent_id: e.agent_id.clone(),
                ts: rfc3339(e.ts),
                text: e.body.display_text(),
                new_work: e.novel,
            })
            .collect(),
        last_verdicts: s.recent_verdicts.iter().map(VerdictItem::from).collect(),
        created_at: rfc3339(s.created_ts),
        updated_at: rfc3339(s.updated_ts),
    }
}

/// `GET /v1/tasks/{task_id}`: counters, window, pivots, status, last verdicts.
#[utoipa::path(
    get,
    path = "/v1/tasks/{task_id}",
    tag = "tasks",
    params(("task_id" = String, Path, description = "A task or subtask id (a subtask shows its root's state)")),
    responses(
        (status = 200, body = TaskView),
        (status = 404, body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
pub async fn get_task(
    State(state): State<Arc<AppState>>,
    TaskId(task_id): TaskId,
) -> Result<Json<TaskView>, ApiError> {
    match state.engine.snapshot(&task_id).await? {
        Some(s) => Ok(Json(view(&task_id, &s))),
        None => Err(ApiError::not_found(format!("task {task_id} not found"))),
    }
}

// The document's description of the parameters; `QueryParams` parses them.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(
    dead_code,
    reason = "describes the parameters for the OpenAPI document only"
)]
pub struct HistoryQuery {
    /// Most records returned, newest kept (default 100).
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<u32>,
}

/// A task's audit trail.
#[derive(Serialize, utoipa::ToSchema)]
pub struct HistoryView {
    pub task_id: String,
    pub root_task_id: String,
    /// Oldest first. Each has `ts` (RFC 3339), `seq`, `task_id`, `agent_id`, `event`
    /// (`loop_detected`, `pivot_issued`, `gate_triggered`, `loop_counter_reset`, `agent_changed`,
    /// `budget_exhausted`) and that event's fields.
    #[schema(value_type = Vec<Object>)]
    pub records: Vec<Value>,
}

/// `GET /v1/tasks/{task_id}/history`: loop detected, pivot issued, gate triggered, counter reset
/// (who, why), with timestamps.
#[utoipa::path(
    get,
    path = "/v1/tasks/{task_id}/history",
    tag = "tasks",
    params(("task_id" = String, Path, description = "A task or subtask id"), HistoryQuery),
    responses((status = 200, body = HistoryView), (status = 404, body = ErrorBody)),
    security((), ("bearer" = []))
)]
pub async fn get_history(
    State(state): State<Arc<AppState>>,
    TaskId(task_id): TaskId,
    q: QueryParams,
) -> Result<Json<HistoryView>, ApiError> {
    let limit = q.number::<usize>("limit", 1, 10_000)?.unwrap_or(100);
    let root = state
        .engine
        .root_of(&task_id)
        .await
        .map_err(loopguard::engine::EngineError::from)?;
    let records = state.engine.history(&task_id, limit).await?;
    if records.is_empty() && state.engine.snapshot(&task_id).await?.is_none() {
        return Err(ApiError::not_found(format!("task {task_id} not found")));
    }
    let records = records
        .into_iter()
        .map(|r| {
            let mut v = serde_json::to_value(&r).expect("an audit record serialises");
            v["ts"] = Value::String(rfc3339(r.ts));
            if let Some(t) = r.client_ts {
                v["client_ts"] = Value::String(rfc3339(t));
            }
            v
        })
        .collect();
    Ok(Json(HistoryView {
        task_id,
        root_task_id: root,
        records,
    }))
}

/// Seed 000: the only resets.
#[derive(Debug, Clone, Copy, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResetReasonBody {
    Success,
    HumanIntervention,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetRequest {
    pub reason: ResetReasonBody,
    /// Who resets (shown in the audit trail).
    #[serde(default)]
    pub by: Option<String>,
    /// How the loop was resolved.
    #[serde(default)]
    pub note: Option<String>,
}

/// `POST /v1/tasks/{task_id}/reset`: reset the loop counter (and pivots, window) of a task.
#[utoipa::path(
    post,
    path = "/v1/tasks/{task_id}/reset",
    tag = "tasks",
    params(("task_id" = String, Path, description = "A task or subtask id (resets its root)")),
    request_body = ResetRequest,
    responses((status = 200, body = TaskView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
    security((), ("bearer" = []))
)]
pub async fn reset_task(
    State(state): State<Arc<AppState>>,
    TaskId(task_id): TaskId,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<TaskView>, ApiError> {
    let value = read_json(&headers, body, state.cfg.server.max_body_bytes).await?;
    check(&value, "ResetRequest", "", &Limits::of(&state.cfg.server))?;
    let req: ResetRequest = typed(value)?;
    let reason = match req.reason {
        ResetReasonBody::Success => ResetReason::Success,
        ResetReasonBody::HumanIntervention => ResetReason::HumanIntervention,
    };
    let by = req.by.unwrap_or_else(|| "api".to_string());
    let s = state.engine.reset(&task_id, reason, &by, req.note).await?;
    Ok(Json(view(&task_id, &s)))
}

/// `DELETE /v1/tasks/{task_id}`: forget a task (its root) entirely.
#[utoipa::path(
    delete,
    path = "/v1/tasks/{task_id}",
    tag = "tasks",
    params(("task_id" = String, Path, description = "A task or subtask id (deletes its root)")),
    responses((status = 204, description = "Deleted"), (status = 404, body = ErrorBody)),
    security((), ("bearer" = []))
)]
pub async fn delete_task(
    State(state): State<Arc<AppState>>,
    TaskId(task_id): TaskId,
) -> Result<StatusCode, ApiError> {
    if state.engine.delete(&task_id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("task {task_id} not found")))
    }
}

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

/// `GET /openapi.json`: this API's OpenAPI document, generated from the code.
pub async fn openapi(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    Json(super::openapi::document(&state.cfg))
}

// The document's description of the parameters; `QueryParams` parses them.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(
    dead_code,
    reason = "describes the parameters for the OpenAPI document only"
)]
pub struct SimilarQuery {
    /// The text of a loop: a failure message, a request, a tool call and its result.
    #[param(min_length = 1)]
    pub text: String,
    /// Most loops returned (default `memory.k`).
    #[param(minimum = 1, maximum = 50)]
    pub k: Option<u32>,
    /// Least cosine similarity (default `memory.min_similarity`).
    #[param(minimum = -1.0, maximum = 1.0)]
    pub min_similarity: Option<f32>,
}

/// Loops seen before that look like a text.
#[derive(Serialize, utoipa::ToSchema)]
pub struct SimilarLoops {
    pub loops: Vec<loopguard::verdict::SimilarLoop>,
}

/// `GET /v1/loops/similar?text=…`: the closest loops in the cross-task memory, with how their
/// tasks were resolved.
#[utoipa::path(
    get,
    path = "/v1/loops/similar",
    tag = "loops",
    params(SimilarQuery),
    responses((status = 200, body = SimilarLoops), (status = 400, body = ErrorBody), (status = 404, description = "The loop memory is disabled", body = ErrorBody)),
    security((), ("bearer" = []))
)]
pub async fn similar_loops(
    State(state): State<Arc<AppState>>,
    q: QueryParams,
) -> Result<Json<SimilarLoops>, ApiError> {
    let text = q.required("text")?;
    if text.is_empty() {
        return Err(ApiError::bad_request("invalid_parameter", "must not be empty").at("text"));
    }
    check_param("text", text, Class::Text, &Limits::of(&state.cfg.server))?;
    let k = q.number::<usize>("k", 1, 50)?;
    // Checked as f64: -1.0000000000000002 is out of range, though as an f32 it rounds to -1.
    let min = q
        .number::<f64>("min_similarity", -1.0, 1.0)?
        .map(|m| m as f32);
    let Some(mem) = state.engine.loop_memory() else {
        return Err(ApiError::not_found(
            "the loop memory is disabled ([memory] enabled = false)",
        ));
    };
    let min = min.unwrap_or(mem.config().min_similarity);
    let prepared = loopguard::signature::head_tail(
        &loopguard::signature::normalize(text),
        state.cfg.model.max_text_chars,
    );
    let v = state
        .engine
        .embedder()
        .embed(std::slice::from_ref(&prepared))
        .await?;
    let k = k.unwrap_or(mem.config().k);
    Ok(Json(SimilarLoops {
        loops: mem.similar(&v[0], k, min, None),
    }))
}

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
    let value = read_json(&headers, body, state.cfg.server.max_body_bytes).await?;
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

/// A body deserialised into its request type, naming the path of the first problem.
pub(super) fn typed<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        ApiError::bad_request("invalid_event", e.into_inner().to_string()).at(path)
    })
}

/// Any unknown route.
pub async fn not_found() -> ApiError {
    ApiError::not_found("no such route; see /openapi.json")
}
