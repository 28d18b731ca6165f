//! The task routes: a task's state, its audit trail, a reset, a deletion.

use super::validate::check;
use crate::server::http::body::{read_json, typed, Limit};
use crate::server::http::error::{ApiError, ErrorBody};
use crate::server::http::limits::Limits;
use crate::server::http::params::{QueryParams, TaskId};
use crate::server::http::time::rfc3339;
use crate::server::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use loopguard::engine::ResetReason;
use loopguard::state::{EntryBody, TaskState};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

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
    let value = read_json(&headers, body, Limit::server(&state.cfg.server)).await?;
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
