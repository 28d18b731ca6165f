//! Recall: a counted loop is put in the cross-task loop memory ([`crate::loop_memory`]), and the
//! closest loops of *other* tasks, with how they were resolved, go into its verdict. When a task
//! is resolved (success, human intervention) its remembered loops get that resolution.
//!
//! Advisory: a failure here costs the listing, never the verdict.

use super::policy::Decision;
use super::{Engine, Pass};
use crate::event::Envelope;
use crate::loop_memory::{LoopMemory, LoopRecord};
use crate::signature::head_tail;
use crate::state::{EntryBody, TaskState};
use crate::verdict::{LoopKind, Resolution, SimilarLoop, TaskStatus};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Counts loop-memory writes running in the background, so they can be waited for.
#[derive(Default)]
pub(crate) struct Background {
    running: AtomicUsize,
    done: tokio::sync::Notify,
}

impl Background {
    fn started(&self) {
        self.running.fetch_add(1, Ordering::AcqRel);
    }

    fn finished(&self) {
        if self.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.done.notify_waiters();
        }
    }

    async fn idle(&self) {
        loop {
            let notified = self.done.notified();
            if self.running.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Engine {
    /// Wait until the loop-memory work running in the background is done (before a shutdown
    /// flushes, and in tests).
    pub async fn settle(&self) {
        self.background.idle().await;
    }

    /// Remember a counted loop (or one that paused the task) and list the closest loops of other
    /// tasks. Budget stops are not loops worth remembering.
    pub(super) async fn recall(
        &self,
        state: &TaskState,
        pass: &Pass,
        decision: &Decision,
        env: &Envelope,
    ) -> Vec<SimilarLoop> {
        let remembered = decision.kind != LoopKind::None
            && decision.kind != LoopKind::Budget
            && (decision.counted || state.status == TaskStatus::Paused);
        if !remembered {
            return Vec::new();
        }
        self.remember_loop(state, pass, decision.kind, env.agent_id.clone())
            .await
    }

    /// The loop's text is usually embedded already (the semantic path, or an earlier
    /// repetition); when it is not, the request does wait behind other work: when the model is
    /// busy, the loop is embedded and remembered in the background, and the listing comes with
    /// the loop's next repetition.
    async fn remember_loop(
        &self,
        state: &TaskState,
        pass: &Pass,
        kind: LoopKind,
        agent_id: Option<String>,
    ) -> Vec<SimilarLoop> {
        let Some(mem) = &self.loop_memory else {
            return Vec::new();
        };
        let entry = &pass.entry;
        // A content loop is what the response kept repeating, not the whole response (nor, for
        // a stream, the chunk that completed it).
        let text = match (&pass.content, kind) {
            (Some(c), LoopKind::ContentLoop) => c.what.clone(),
            _ => entry.body.display_text(),
        };
        let text = head_tail(&text, self.cfg.model.max_text_chars);
        // A loop repeated word for word: the memory already has it (a near-duplicate of the
        // task's own record would not be added again) and, unchanged since, lists the same
        // neighbours. The exact path stays exact.
        let text_key = crate::signature::key64(&text);
        if let Some(listing) = mem.listing(&state.root, kind, text_key) {
            return listing;
        }
        let changes = mem.changes();
        let record = LoopRecord {
            id: 0,
            task_id: state.root.clone(),
            agent_id,
            kind,
            tool: match &entry.body {
                EntryBody::ToolCall { tool, .. } => Some(tool.clone()),
                _ => None,
            },
            text: text.clone(),
            ts: entry.ts,
            gated: state.status == TaskStatus::Paused,
            resolution: None,
        };
        async fn remember(mem: &LoopMemory, record: LoopRecord, vector: crate::embed::Vector) {
            if let Err(e) = mem.remember(record, vector).await {
                tracing::warn!(error = %e, "loop memory write failed");
            }
        }
        let ready = match self.embedder.cached_one(&text) {
            Some(v) => Some(v),
            // An idle model answers a lone text in milliseconds: worth waiting for.
            None if self.embedder.is_idle() => self
                .embedder
                .embed(std::slice::from_ref(&text))
                .await
                .ok()
                .map(|mut v| v.remove(0)),
            None => None,
        };
        if let Some(vector) = ready {
            let c = mem.config();
            let similar = mem.similar(&vector, c.k, c.min_similarity, Some(&state.root));
            remember(mem, record, vector).await;
            mem.keep_listing(&state.root, kind, text_key, changes, &similar);
            return similar;
        }
        let (mem, embedder) = (Arc::clone(mem), self.embedder.clone());
        let background = Arc::clone(&self.background);
        background.started();
        let work = async move {
            match embedder.embed(std::slice::from_ref(&text)).await {
                Ok(mut v) => remember(&mem, record, v.remove(0)).await,
                Err(e) => tracing::warn!(error = %e, "loop memory skipped: no embedding"),
            }
            background.finished();
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(work);
            }
            Err(_) => work.await,
        }
        Vec::new()
    }

    /// A task was resolved: its remembered loops get the resolution.
    pub(super) async fn resolve_loops(
        &self,
        root: &str,
        result: &str,
        note: Option<String>,
        ts: i64,
    ) {
        let Some(mem) = &self.loop_memory else {
            return;
        };
        let resolution = Resolution {
            result: result.to_string(),
            note,
            ts,
        };
        match mem.resolve(root, resolution).await {
            Ok(n) if n > 0 => {
                tracing::info!(event = "loops_resolved", task_id = %root, loops = n, result)
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, task_id = %root, "loop memory write failed"),
        }
    }
}
