//! The commit stage: the decision becomes the verdict (with the task's final counters), the task
//! remembers the event and a summary of its verdict, the audit events become records; then the
//! new state and its records are written in one commit and made durable before the verdict is
//! answered — a verdict is an acknowledgement.

use super::{Engine, EngineError, Evaluation, Pass};
use crate::audit::AuditRecord;
use crate::config::Config;
use crate::event::Envelope;
use crate::signature::head_tail;
use crate::state::{EntryBody, TaskState, VerdictSummary};
use crate::store::TaskTxn;
use crate::verdict::{LoopKind, Verdict};
use std::time::Instant;

use super::policy::Decision;

/// Finish an event: the verdict, the window entry, the verdict summary and the audit records.
pub(super) fn finish(
    cfg: &Config,
    state: &mut TaskState,
    env: &Envelope,
    pass: Pass,
    decision: Decision,
) -> Evaluation {
    let Pass {
        seq,
        entry,
        signature,
        judge,
        asked_judge,
        audit,
        timings,
        ..
    } = pass;
    let artifacts = match &entry.body {
        EntryBody::Collaboration { artifacts, .. } => artifacts.clone(),
        _ => Vec::new(),
    };
    // An outcome ends a stretch of work rather than being part of it: it is not kept in the
    // window (a reset clears the window anyway). A response chunk is part of a turn not yet
    // finished: a long stream would push the task's work out of the window.
    if !matches!(
        entry.body,
        EntryBody::Outcome { .. } | EntryBody::ResponseChunk { .. }
    ) {
        state.push_entry(entry, cfg.detect.window);
    }
    let verdict = Verdict {
        task_id: env.task_id.clone(),
        seq,
        is_loop: decision.kind != LoopKind::None,
        kind: decision.kind,
        loop_count: state.loop_count,
        counted: decision.counted,
        similarity: decision.similarity,
        matched: decision.matched,
        signature,
        action: decision.action,
        reason: decision.reason,
        rule: decision.rule.map(str::to_string),
        judge,
        pivot_count: state.pivot_count,
        status: state.status,
        similar_loops: decision.similar_loops,
        artifacts,
    };
    let trim = |t: &str| head_tail(t, 500);
    state.remember_verdict(VerdictSummary {
        seq,
        task_id: env.task_id.clone(),
        is_loop: verdict.is_loop,
        kind: verdict.kind,
        action: verdict.action.kind.as_str().to_string(),
        loop_count: verdict.loop_count,
        event_type: env.event.type_name().to_string(),
        text: verdict
            .signature
            .as_ref()
            .map(|s| trim(&s.normalized))
            .unwrap_or_default(),
        matched_seq: verdict.matched.as_ref().map(|m| m.seq),
        matched_text: verdict.matched.as_ref().map(|m| trim(&m.text)),
        ts: state.updated_ts,
        agent_id: env.agent_id.clone(),
        counted: verdict.counted,
        similarity: verdict.similarity,
        reason: trim(&verdict.reason),
        rule: verdict.rule.clone(),
        artifacts: verdict.artifacts.clone(),
    });
    let audit = audit
        .into_iter()
        .map(|event| AuditRecord {
            ts: state.updated_ts,
            client_ts: env.ts.map(|t| t.unix_timestamp()),
            seq,
            task_id: env.task_id.clone(),
            agent_id: env.agent_id.clone(),
            event,
        })
        .collect();
    Evaluation {
        verdict,
        timings,
        audit,
        asked_judge,
    }
}

impl Engine {
    /// Write the new state with its audit records (and a new subtask link) in one commit, make
    /// it the task's state, wait until it is durable and emit the audit records. The task's lock
    /// is released before the wait: concurrent events share one fsync, and the task's next
    /// event need not wait for it. Returns the seconds it took.
    pub(super) async fn commit(
        &self,
        mut guard: tokio::sync::OwnedMutexGuard<Option<TaskState>>,
        txn: Box<dyn TaskTxn + '_>,
        opened_version: u64,
        mut next: TaskState,
        audit: &[AuditRecord],
        link: Option<(String, String)>,
    ) -> Result<f64, EngineError> {
        let started = Instant::now();
        next.version = opened_version + 1;
        let link_ref = link.as_ref().map(|(t, r)| (t.as_str(), r.as_str()));
        let durable = txn.commit(&next, audit, link_ref).await?;
        if let Some((task, root)) = link {
            self.tasks.linked(task, root);
        }
        *guard = Some(next);
        drop(guard);
        durable.await?;
        crate::audit::emit(audit, self.audit_metrics.as_deref());
        Ok(started.elapsed().as_secs_f64())
    }
}
