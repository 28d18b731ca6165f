//! Read endpoints across tasks, for the dashboard and for operators' scripts: the most recently
//! updated tasks (`GET /v1/tasks`), the loops remembered last with how they were resolved
//! (`GET /v1/loops`) and live figures (`GET /v1/stats`). Every listing is bounded by `limit`.

use crate::server::http::error::{ApiError, ErrorBody};
use crate::server::http::params::QueryParams;
use crate::server::http::time::rfc3339;
use crate::server::AppState;
use axum::extract::{RawQuery, State};
use axum::Json;
use loopguard::state::TaskState;
use loopguard::verdict::{LoopKind, TaskStatus};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Tasks listed when `limit` is absent, and the most a request may ask for.
const TASKS_DEFAULT: usize = 50;
const TASKS_MAX: usize = 500;
const LOOPS_DEFAULT: usize = 50;
const LOOPS_MAX: usize = 500;

/// `limit` from a query string: absent → `default`, else an integer in 1..=`max`; given twice,
/// refused (which one counts would be a guess). Other parameters are ignored (a cache-busting
/// `_=…` is harmless).
pub fn limit_param(query: Option<&str>, default: usize, max: usize) -> Result<usize, ApiError> {
    let q = QueryParams::parse(query.unwrap_or(""))?;
    Ok(q.number::<usize>("limit", 1, max)?.unwrap_or(default))
}

/// A verdict in a listing: the event's seq, what was found and what was done.
#[derive(Serialize, utoipa::ToSchema)]
pub struct VerdictBrief {
    pub seq: u64,
    #[serde(rename = "loop")]
    pub is_loop: bool,
    pub kind: LoopKind,
    /// `continue`, `warn`, `retry_with_hint`, `pivot`, `escalate`, `pause`, `terminate`.
    pub action: String,
    /// RFC 3339.
    pub ts: String,
}

/// One task as `GET /v1/tasks` lists it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct TaskSummary {
    /// The root task (subtasks share it).
    pub task_id: String,
    pub status: TaskStatus,
    pub loop_count: u32,
    pub pivot_count: u32,
    pub events_total: u64,
    /// Loops detected per kind since the last reset.
    pub kind_counts: BTreeMap<String, u32>,
    pub current_step: Option<String>,
    /// The latest verdict, and the latest that reported a loop (among the last 20).
    pub last_verdict: Option<VerdictBrief>,
    pub last_loop: Option<VerdictBrief>,
    /// RFC 3339.
    pub created_at: String,
    pub updated_at: String,
}

/// The most recently updated tasks.
#[derive(Serialize, utoipa::ToSchema)]
pub struct TaskList {
    /// Root tasks stored in all.
    pub total: usize,
    /// At most `limit`, the most recently updated first.
    pub tasks: Vec<TaskSummary>,
}

fn brief(v: &loopguard::state::VerdictSummary) -> VerdictBrief {
    VerdictBrief {
        seq: v.seq,
        is_loop: v.is_loop,
        kind: v.kind,
        action: v.action.clone(),
        ts: rfc3339(v.ts),
    }
}

fn summary(s: &TaskState) -> TaskSummary {
    TaskSummary {
        task_id: s.root.clone(),
        status: s.status,
        loop_count: s.loop_count,
        pivot_count: s.pivot_count,
        events_total: s.events_total,
        kind_counts: s.kind_hits.clone(),
        current_step: s.current_step.clone(),
        last_verdict: s.recent_verdicts.back().map(brief),
        last_loop: s
            .recent_verdicts
            .iter()
            .rev()
            .find(|v| v.is_loop)
            .map(brief),
        created_at: rfc3339(s.created_ts),
        updated_at: rfc3339(s.updated_ts),
    }
}

/// `GET /v1/tasks?limit=N`: the root tasks updated last, newest first, with status, loop
/// counter and pivots.
#[utoipa::path(
    get,
    path = "/v1/tasks",
    tag = "tasks",
    params(("limit" = Option<u32>, Query, description = "Most tasks listed (default 50)", minimum = 1, maximum = 500)),
    responses(
        (status = 200, body = TaskList),
        (status = 400, description = "`limit` is not an integer in 1..500", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 503, description = "The state store failed", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
pub async fn list_tasks(
    State(state): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
) -> Result<Json<TaskList>, ApiError> {
    let limit = limit_param(query.as_deref(), TASKS_DEFAULT, TASKS_MAX)?;
    let store = &state.store;
    let (total, roots) = store.recent_roots(limit).await?;
    let mut tasks = Vec::with_capacity(roots.len());
    for (root, _) in roots {
        match store.load(&root).await {
            Ok(Some(s)) => tasks.push(summary(&s)),
            // Deleted since the scan.
            Ok(None) => {}
            // One unreadable task must not hide the others; reading it directly says why.
            Err(e @ loopguard::store::StoreError::Corrupt { .. })
            | Err(e @ loopguard::store::StoreError::Version { .. }) => {
                tracing::warn!(task_id = %root, error = %e, "task left out of the listing");
            }
            Err(e) => return Err(e.into()),
        }
    }
    let listed = TaskList { total, tasks };
    Ok(Json(listed))
}

/// How a loop's task was resolved.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ResolutionView {
    /// `success` or `human_intervention`.
    pub result: String,
    pub note: Option<String>,
    /// RFC 3339.
    pub resolved_at: String,
}

/// One loop of the cross-task memory.
#[derive(Serialize, utoipa::ToSchema)]
pub struct LoopItem {
    pub id: u64,
    /// The root task it happened in.
    pub task_id: String,
    pub agent_id: Option<String>,
    pub kind: LoopKind,
    /// For tool-call loops.
    pub tool: Option<String>,
    /// The looping event's text as compared (normalised, trimmed).
    pub text: String,
    /// RFC 3339.
    pub seen_at: String,
    /// The gate fired on this loop: the task was paused for a human.
    pub gated: bool,
    /// `null` while the task is unresolved.
    pub resolution: Option<ResolutionView>,
}

/// Loops remembered last.
#[derive(Serialize, utoipa::ToSchema)]
pub struct LoopList {
    /// Loops in the memory in all.
    pub total: usize,
    /// At most `limit`, newest first.
    pub loops: Vec<LoopItem>,
}

/// `GET /v1/loops?limit=N`: the loops remembered last across tasks (distinct loops: a task's
/// repetitions of one loop are one record), with how their tasks were resolved.
#[utoipa::path(
    get,
    path = "/v1/loops",
    tag = "loops",
    params(("limit" = Option<u32>, Query, description = "Most loops listed (default 50)", minimum = 1, maximum = 500)),
    responses(
        (status = 200, body = LoopList),
        (status = 400, description = "`limit` is not an integer in 1..500", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "The loop memory is disabled", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
pub async fn recent_loops(
    State(state): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
) -> Result<Json<LoopList>, ApiError> {
    let limit = limit_param(query.as_deref(), LOOPS_DEFAULT, LOOPS_MAX)?;
    let Some(mem) = state.engine.loop_memory() else {
        return Err(ApiError::not_found(
            "the loop memory is disabled ([memory] enabled = false)",
        ));
    };
    let loops = mem
        .recent(limit)
        .into_iter()
        .map(|r| LoopItem {
            id: r.id,
            task_id: r.task_id,
            agent_id: r.agent_id,
            kind: r.kind,
            tool: r.tool,
            text: r.text,
            seen_at: rfc3339(r.ts),
            gated: r.gated,
            resolution: r.resolution.map(|x| ResolutionView {
                result: x.result,
                note: x.note,
                resolved_at: rfc3339(x.ts),
            }),
        })
        .collect();
    Ok(Json(LoopList {
        total: mem.len(),
        loops,
    }))
}

/// Latency quantiles of `/v1/evaluate` requests answered 2xx, in milliseconds; `null` without
/// requests.
#[derive(Serialize, utoipa::ToSchema)]
pub struct LatencyMs {
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
}

/// What happened in a span of time.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Figures {
    /// Length of the span.
    pub secs: f64,
    pub events: u64,
    pub events_per_sec: f64,
    /// Events whose evaluation ran the embedding model (a cache miss), and their share of all
    /// events (`null` without events).
    pub events_needing_model: u64,
    pub model_share: Option<f64>,
    /// Events put to the LLM judge, and their share.
    pub events_needing_judge: u64,
    pub judge_share: Option<f64>,
    /// Verdicts that reported a loop.
    pub loops: u64,
    pub evaluate_requests: u64,
    pub latency_ms: LatencyMs,
}

/// Live figures.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Stats {
    pub uptime_secs: f64,
    pub model_ready: bool,
    /// An LLM judge is configured (`[judge] kind` is not `none`).
    pub judge_configured: bool,
    /// The last minute (less right after start).
    pub last_minute: Figures,
    pub since_start: Figures,
    /// Since start.
    pub pivots_issued: u64,
    pub gates_triggered: u64,
    pub tasks_in_memory: usize,
    /// `null` when the loop memory is disabled.
    pub loop_memory_records: Option<usize>,
}

fn figures(secs: f64, f: &crate::server::metrics::live::Figures) -> Figures {
    let share = |n: u64| (f.events > 0).then(|| n as f64 / f.events as f64);
    let ms = |q: f64| f.latency.quantile(q).map(|s| s * 1e3);
    Figures {
        secs,
        events: f.events,
        events_per_sec: if secs > 0.0 {
            f.events as f64 / secs
        } else {
            0.0
        },
        events_needing_model: f.needing_model,
        model_share: share(f.needing_model),
        events_needing_judge: f.needing_judge,
        judge_share: share(f.needing_judge),
        loops: f.loops,
        evaluate_requests: f.latency.count(),
        latency_ms: LatencyMs {
            p50: ms(0.5),
            p95: ms(0.95),
            p99: ms(0.99),
        },
    }
}

/// `GET /v1/stats`: events per second, the share of events that needed the model or the judge,
/// loops and `/v1/evaluate` latency, over the last minute and since start (the same counts as
/// `/metrics`, as JSON).
#[utoipa::path(
    get,
    path = "/v1/stats",
    tag = "operations",
    responses(
        (status = 200, body = Stats),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
pub async fn stats(State(state): State<Arc<AppState>>) -> Json<Stats> {
    let live = &state.metrics.live;
    let (span, window, totals) = live.read();
    let uptime = live.uptime_secs();
    Json(Stats {
        uptime_secs: uptime,
        model_ready: state.engine.embedder().is_ready(),
        judge_configured: state.cfg.judge.kind != loopguard::config::JudgeKind::None,
        last_minute: figures(span, &window),
        since_start: figures(uptime, &totals),
        pivots_issued: state.metrics.pivots.get(),
        gates_triggered: state.metrics.gates.get(),
        tasks_in_memory: state.engine.cached_tasks(),
        loop_memory_records: state.engine.loop_memory().map(|m| m.len()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_is_bounded_and_named_in_errors() {
        assert_eq!(limit_param(None, 50, 500).unwrap(), 50);
        assert_eq!(limit_param(Some("limit=7"), 50, 500).unwrap(), 7);
        assert_eq!(limit_param(Some("_=123&limit=500"), 50, 500).unwrap(), 500);
        for bad in [
            "limit=0",
            "limit=501",
            "limit=abc",
            "limit=",
            "limit=-1",
            "limit",
            "limit=1&limit=2",
        ] {
            let e = limit_param(Some(bad), 50, 500).unwrap_err();
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST, "{bad}");
            assert_eq!(e.body.code, "invalid_parameter");
            assert_eq!(e.body.path.as_deref(), Some("limit"));
        }
    }
}
