//! The engine: one event in, one verdict out.
//!
//! Per event: resolve the root task (a subtask shares its root's state), observe the event,
//! link it to the window (exact keys first; the model only when keys cannot decide), run the
//! detectors, let progress veto, ask the judge about ambiguous cases, let policy choose the
//! action, and commit the new state with its audit records in one write. Events of one task are
//! serialised by a per-task lock; different tasks run concurrently.
//!
//! Every change is computed on a copy of the task state and only replaces it after the store
//! accepted the commit, so an error (model overloaded, store failure) leaves the task as it was.

use crate::config::{Config, Fallback};
use crate::detect::{self, matching, Ctx, Finding, Link};
use crate::embed::{EmbedError, Embedder};
use crate::event::{Envelope, Event, OutcomeKind};
use crate::judge::{Candidate, Evidence, EvidenceEvent, Judge, JudgeVerdict};
use crate::observe::{observe, Observation};
use crate::policy::{self, AuditEvent, AuditRecord};
use crate::signature::head_tail;
use crate::state::{EntryBody, PeriodicRun, TaskState, VerdictSummary, HISTORY_KEPT};
use crate::store::{MemoryStore, Store, StoreError};
use crate::verdict::{Action, ActionType, JudgeReport, LoopKind, Matched, TaskStatus, Verdict};
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("task {0} not found")]
    NotFound(String),
    /// A request that contradicts the task's state (feedback on a verdict that said otherwise).
    #[error("{0}")]
    Rejected(String),
    #[error(transparent)]
    Memory(#[from] crate::memory::MemoryError),
    #[error(transparent)]
    Feedback(#[from] crate::feedback::FeedbackError),
}

/// Time spent per phase of one evaluation, for logs, headers and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    pub embed_secs: f64,
    pub detect_secs: f64,
    pub judge_secs: f64,
    pub store_secs: f64,
    /// True when the model was needed (a cache miss or a semantic comparison).
    pub used_model: bool,
    pub texts_embedded: usize,
}

/// A verdict with what it cost.
#[derive(Debug, Clone)]
pub struct Evaluation {
    pub verdict: Verdict,
    pub timings: Timings,
    pub audit: Vec<AuditRecord>,
    pub asked_judge: bool,
}

/// Why a counter is being reset from outside an event (the reset endpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetReason {
    Success,
    HumanIntervention,
}

impl ResetReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ResetReason::Success => "success",
            ResetReason::HumanIntervention => "human_intervention",
        }
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<TaskState>>>;

/// The detection engine. Cheap to share (`Arc<Engine>`); one per service or per scored run.
pub struct Engine {
    cfg: Arc<Config>,
    embedder: Embedder,
    judge: Option<Arc<dyn Judge>>,
    store: Arc<dyn Store>,
    memory: Option<Arc<crate::memory::LoopMemory>>,
    feedback: Arc<crate::feedback::FeedbackStore>,
    /// Loop-memory writes running in the background.
    background: Arc<Background>,
    slots: Mutex<HashMap<String, Slot>>,
    roots: Mutex<HashMap<String, String>>,
}

fn now_unix() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

impl Engine {
    /// An engine with in-memory state.
    pub fn new(cfg: Arc<Config>, embedder: Embedder) -> Self {
        Engine::with_store(cfg, embedder, Arc::new(MemoryStore::new()))
    }

    pub fn with_store(cfg: Arc<Config>, embedder: Embedder, store: Arc<dyn Store>) -> Self {
        Engine {
            cfg,
            embedder,
            judge: None,
            store,
            memory: None,
            feedback: Arc::new(crate::feedback::FeedbackStore::in_memory()),
            background: Arc::new(Background::default()),
            slots: Mutex::new(HashMap::new()),
            roots: Mutex::new(HashMap::new()),
        }
    }

    /// Ask this judge about ambiguous cases (without one, `judge.fallback` decides).
    pub fn with_judge(mut self, judge: Arc<dyn Judge>) -> Self {
        self.judge = Some(judge);
        self
    }

    /// Remember loops across tasks in `memory` (see [`crate::memory`]).
    pub fn with_memory(mut self, memory: Arc<crate::memory::LoopMemory>) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Keep feedback in `store` (in memory by default).
    pub fn with_feedback(mut self, store: Arc<crate::feedback::FeedbackStore>) -> Self {
        self.feedback = store;
        self
    }

    pub fn memory(&self) -> Option<&Arc<crate::memory::LoopMemory>> {
        self.memory.as_ref()
    }

    pub fn feedback_store(&self) -> &Arc<crate::feedback::FeedbackStore> {
        &self.feedback
    }

    /// Record feedback on the verdict of event `seq` of `task_id`: a false positive (it said
    /// loop) or a missed loop (it did not). Only the task's recent verdicts can be marked.
    pub async fn feedback(
        &self,
        task_id: &str,
        seq: u64,
        label: crate::feedback::FeedbackLabel,
        note: Option<String>,
        matched_seq: Option<u64>,
    ) -> Result<crate::feedback::FeedbackRecord, EngineError> {
        use crate::feedback::FeedbackLabel;
        let root = self.root_of(task_id)?;
        let Some(state) = self.snapshot(task_id).await? else {
            return Err(EngineError::NotFound(task_id.to_string()));
        };
        let Some(v) = state.recent_verdicts.iter().find(|v| v.seq == seq) else {
            return Err(EngineError::NotFound(format!(
                "{task_id} seq {seq} (only the last {} verdicts of a task can be marked)",
                crate::state::RECENT_VERDICTS
            )));
        };
        match (label, v.is_loop) {
            (FeedbackLabel::FalsePositive, false) => {
                return Err(EngineError::Rejected(format!(
                    "seq {seq} was not reported as a loop; a false positive needs a loop verdict"
                )))
            }
            (FeedbackLabel::MissedLoop, true) => {
                return Err(EngineError::Rejected(format!(
                    "seq {seq} was already reported as a loop ({})",
                    v.kind
                )))
            }
            _ => {}
        }
        // For a missed loop, the earlier event it repeats: as given, else the latest earlier
        // event of the same type still in the window.
        let same_type = |e: &&crate::state::Entry| bare_event(e)["type"] == v.event_type.as_str();
        let matched = match (v.matched_seq, matched_seq) {
            (Some(s), _) => Some((s, v.matched_text.clone().unwrap_or_default())),
            (None, Some(s)) => state
                .entry(s)
                .map(|e| (s, head_tail(&e.body.display_text(), 500))),
            (None, None) => state
                .window
                .iter()
                .rev()
                .filter(|e| e.seq < seq)
                .find(same_type)
                .map(|e| (e.seq, head_tail(&e.body.display_text(), 500))),
        };
        let record = crate::feedback::FeedbackRecord {
            id: 0,
            ts: now_unix(),
            task_id: task_id.to_string(),
            root_task_id: root,
            seq,
            label,
            note,
            kind: v.kind,
            event_type: v.event_type.clone(),
            text: v.text.clone(),
            matched_seq: matched.as_ref().map(|m| m.0),
            matched_text: matched.map(|m| m.1),
            events: state
                .window
                .iter()
                .filter(|e| e.seq <= seq)
                .map(bare_event)
                .collect(),
        };
        let record = self.feedback.add(record)?;
        self.feedback.flush().await?;
        tracing::info!(
            event = "feedback",
            task_id = %task_id,
            seq,
            label = label.as_str(),
            kind = record.kind.as_str()
        );
        Ok(record)
    }

    /// Wait until the loop-memory work running in the background is done (before a shutdown
    /// flushes, and in tests).
    pub async fn settle(&self) {
        self.background.idle().await;
    }

    /// The judge's counters, when a judge is configured.
    pub fn judge_stats(&self) -> Option<crate::judge::JudgeSnapshot> {
        self.judge.as_ref().and_then(|j| j.stats())
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn embedder(&self) -> &Embedder {
        &self.embedder
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The root task of `task` (itself when it has no known parent).
    pub fn root_of(&self, task: &str) -> Result<String, StoreError> {
        if let Some(r) = self.roots.lock().expect("roots lock").get(task) {
            return Ok(r.clone());
        }
        Ok(self
            .store
            .root_of(task)?
            .unwrap_or_else(|| task.to_string()))
    }

    /// Resolve the root for an envelope; `Some(link)` when a new subtask link must be stored.
    fn resolve(&self, env: &Envelope) -> Result<(String, Option<(String, String)>), StoreError> {
        let known = self.root_of(&env.task_id)?;
        if known != env.task_id {
            return Ok((known, None));
        }
        match &env.parent_task_id {
            Some(parent) => {
                let root = self.root_of(parent)?;
                if root == env.task_id {
                    // A parent that points back at this task: keep the task its own root.
                    return Ok((known, None));
                }
                Ok((root.clone(), Some((env.task_id.clone(), root))))
            }
            None => Ok((known, None)),
        }
    }

    fn slot(&self, root: &str) -> Slot {
        let mut slots = self.slots.lock().expect("slots lock");
        Arc::clone(slots.entry(root.to_string()).or_default())
    }

    /// Drop the in-memory copy of a deleted task. The slot stays when other requests wait on it:
    /// it holds no state and they reload from the store, so a task never has two slots.
    fn forget(&self, root: &str, slot: &Slot) {
        let mut slots = self.slots.lock().expect("slots lock");
        // Ours and the map's: nobody else can be waiting.
        if Arc::strong_count(slot) <= 2 {
            slots.remove(root);
        }
        drop(slots);
        self.roots
            .lock()
            .expect("roots lock")
            .retain(|_, r| r != root);
    }

    /// Evaluate one event.
    pub async fn evaluate(&self, env: Envelope) -> Result<Verdict, EngineError> {
        Ok(self.evaluate_timed(env).await?.verdict)
    }

    /// Evaluate one event and report what it cost.
    pub async fn evaluate_timed(&self, env: Envelope) -> Result<Evaluation, EngineError> {
        let (root, link) = self.resolve(&env)?;
        let slot = self.slot(&root);
        let mut guard = slot.lock().await;
        let ts = env.ts.map(|t| t.unix_timestamp()).unwrap_or_else(now_unix);
        let current = match guard.take() {
            Some(s) => s,
            None => self
                .store
                .load(&root)?
                .unwrap_or_else(|| TaskState::new(&root, ts)),
        };
        let mut next = current.clone();
        // Put the current state back so an error below leaves the task as it was.
        *guard = Some(current);
        let mut eval = self.step(&mut next, &env, ts).await?;

        let started = Instant::now();
        let link_ref = link.as_ref().map(|(t, r)| (t.as_str(), r.as_str()));
        self.store.commit(&next, &eval.audit, link_ref)?;
        if let Some((task, root)) = link {
            self.roots.lock().expect("roots lock").insert(task, root);
        }
        *guard = Some(next);
        drop(guard);
        // The verdict is an acknowledgement: answer only once the commit survives a crash.
        // Concurrent flushes share one fsync.
        self.store.flush().await?;
        eval.timings.store_secs = started.elapsed().as_secs_f64();
        log_audit(&eval.audit);
        Ok(eval)
    }

    async fn step(
        &self,
        state: &mut TaskState,
        env: &Envelope,
        ts: i64,
    ) -> Result<Evaluation, EngineError> {
        let cfg = &*self.cfg;
        let mut timings = Timings::default();
        let seq = state.next_seq;
        state.next_seq += 1;
        state.events_total += 1;
        state.updated_ts = ts;
        let mut audit: Vec<AuditEvent> = Vec::new();

        if state.goal.is_none() {
            state.goal = env.goal.clone();
        }
        if let Some(agent) = &env.agent_id {
            if state.last_agent.as_ref().is_some_and(|a| a != agent) {
                // Seed 000: changing agents does not reset the counter; it is only recorded.
                audit.push(AuditEvent::AgentChanged {
                    from: state.last_agent.clone(),
                    to: agent.clone(),
                });
            }
            state.last_agent = Some(agent.clone());
        }

        let Observation {
            mut entry,
            metrics,
            signature,
            external,
        } = observe(cfg, env, seq, ts);

        // Outcomes: resets (success, human intervention) and nothing to detect.
        if let Event::Outcome(o) = &env.event {
            let mut reason = format!("outcome: {}", o.result.as_str());
            if o.result.resets_counter() {
                audit.push(AuditEvent::CounterReset {
                    previous_count: state.loop_count,
                    reason: o.result.as_str().to_string(),
                    by: "outcome event".into(),
                    note: o.note.clone(),
                });
                self.resolve_loops(&state.root, o.result.as_str(), o.note.clone(), ts);
                state.reset();
                reason.push_str("; loop counter reset");
            } else if o.result == OutcomeKind::AgentChanged {
                reason.push_str("; loop counter kept (seed 000: agent changes do not reset it)");
            }
            let v = self.verdict(
                state,
                env,
                seq,
                None,
                None,
                signature,
                Action::proceed(),
                false,
                reason,
                None,
            );
            return Ok(self.finish(state, env, seq, v, audit, timings, false));
        }

        // Budget before everything: nothing resets it, not even a paused task.
        let budget_hit = cfg.detect.enabled.budget
            && cfg.detect.budget.max_events > 0
            && state.events_total > cfg.detect.budget.max_events;
        if !budget_hit && state.status != TaskStatus::Active {
            let (kind, why) = match state.status {
                TaskStatus::Paused => (
                    ActionType::Pause,
                    "task is paused for human intervention; reset it to continue",
                ),
                _ => (ActionType::Terminate, "task was terminated"),
            };
            state.push_entry(entry, cfg.detect.window);
            let action = Action {
                kind,
                target: None,
                message: Some(why.to_string()),
            };
            let v = self.verdict(
                state,
                env,
                seq,
                None,
                None,
                signature,
                action,
                false,
                why.into(),
                None,
            );
            return Ok(self.finish(state, env, seq, v, audit, timings, false));
        }

        let step_entered = enter_step(state, env);

        // Link the event to the window: keys first, the model only if keys cannot decide.
        if !matching::exact_identity(&cfg.detect, state, &entry) {
            for part in [matching::Part::Main, matching::Part::Result] {
                let slots = matching::needed(&cfg.detect, state, &entry, part);
                if slots.is_empty() {
                    continue;
                }
                let texts: Vec<String> = slots
                    .iter()
                    .filter_map(|s| matching::sig_at(state, &entry, *s).map(|t| t.text.clone()))
                    .collect();
                let started = Instant::now();
                let misses_before = self.embedder.stats().cache_misses.load(Relaxed);
                let vectors = self.embedder.embed(&texts).await?;
                timings.embed_secs += started.elapsed().as_secs_f64();
                timings.texts_embedded += texts.len();
                timings.used_model |=
                    self.embedder.stats().cache_misses.load(Relaxed) > misses_before;
                for (slot, v) in slots.iter().zip(vectors) {
                    if let Some(sig) = matching::sig_mut(state, &mut entry, *slot) {
                        sig.vector = Some(v);
                    }
                }
            }
        }
        let started = Instant::now();
        let links = matching::links(&cfg.detect, state, &entry);
        entry.same_as = links
            .iter()
            .filter(|l| l.same && !l.stale)
            .map(|l| l.seq)
            .collect();
        let passive = matches!(&entry.body, EntryBody::ToolCall { passive: true, .. });
        entry.novel = entry.is_work() && !passive && entry.same_as.is_empty();

        // This event's own progress counts before the veto below.
        let progress = match &env.event {
            Event::Progress(p) => Some(p),
            _ => None,
        };
        if let Some(reason) = detect::progress::mark_reason(state, metrics.as_ref(), progress) {
            state.add_progress(seq, reason);
        }

        let events_total = state.events_total;
        let ctx = Ctx {
            cfg: &cfg.detect,
            state: &*state,
            entry: &entry,
            links: &links,
            metrics,
            step_entered,
            events_total,
        };
        let mut finding = detect::run(&ctx);
        let mut not_loop_reason = None;
        if let Some(f) = &finding {
            if let Some(why) = detect::progress::veto(state, f) {
                not_loop_reason = Some(format!("not a loop: {why}"));
                finding = None;
            }
        }
        let ambiguity = if finding.is_none() && not_loop_reason.is_none() {
            ambiguous(cfg, &ctx, external)
        } else {
            None
        };
        timings.detect_secs = started.elapsed().as_secs_f64();

        let mut judge_report = None;
        let mut asked = false;
        if let Some((question, candidate)) = ambiguity {
            let started = Instant::now();
            let (f, report) = self.consult(state, &entry, &ctx, question, candidate).await;
            asked =
                !report.fallback || !matches!(report.status.as_str(), "none" | "budget_exhausted");
            timings.judge_secs = started.elapsed().as_secs_f64();
            judge_report = Some(report);
            match f {
                Ok(f) => finding = Some(f),
                Err(reason) => not_loop_reason = Some(reason),
            }
        }
        drop(ctx);
        if asked {
            state.judge_calls += 1;
        }

        // Periodic loops are counted once per period; any other event ends the run.
        if entry.is_work() {
            state.cycle = match &finding {
                Some(f) if f.kind == LoopKind::Cycle => {
                    Some(advance(state.cycle, f.period.unwrap_or(1), f.counts))
                }
                _ => None,
            };
        }
        if let EntryBody::Transition { from, to } = &entry.body {
            state.transition_cycle = match &finding {
                Some(f) if f.kind == LoopKind::TransitionCycle => Some(advance(
                    state.transition_cycle,
                    f.period.unwrap_or(1),
                    f.counts,
                )),
                _ => None,
            };
            state.transitions.push_back((from.clone(), to.clone()));
            let keep = cfg.detect.transitions.max_period * cfg.detect.transitions.repetitions + 1;
            while state.transitions.len() > keep {
                state.transitions.pop_front();
            }
        }
        if let Some(m) = metrics {
            state.metrics.push_back(m);
            while state.metrics.len() > HISTORY_KEPT {
                state.metrics.pop_front();
            }
        }
        if matches!(entry.body, EntryBody::Failure { .. }) {
            state.failures_since_progress += 1;
        }

        let (action, counted, kind, reason, matched, similarity) = match &finding {
            Some(f) => {
                let d = policy::decide(&cfg.policy, state, f.kind, f.counts, external, &f.reason);
                audit.extend(d.audit);
                let matched = f.matched.and_then(|s| {
                    state.entry(s).map(|e| Matched {
                        seq: s,
                        text: e.body.display_text(),
                        similarity: f.similarity,
                    })
                });
                let reason = if external {
                    format!("{} (external failure: not counted)", f.reason)
                } else {
                    f.reason.clone()
                };
                (d.action, d.counted, f.kind, reason, matched, f.similarity)
            }
            None => {
                // Not a loop: name the closest earlier event, the near miss a reader looks for.
                let near = detect::nearest(state, &entry, &links);
                (
                    Action::proceed(),
                    false,
                    LoopKind::None,
                    not_loop_reason.unwrap_or_else(|| {
                        if entry.novel {
                            "new work".to_string()
                        } else {
                            "no loop".to_string()
                        }
                    }),
                    near.and_then(|l| {
                        state.entry(l.seq).map(|e| Matched {
                            seq: l.seq,
                            text: e.body.display_text(),
                            similarity: l.similarity(),
                        })
                    }),
                    near.and_then(Link::similarity),
                )
            }
        };
        let similar_loops = if kind != LoopKind::None
            && kind != LoopKind::Budget
            && (counted || state.status == TaskStatus::Paused)
        {
            self.remember_loop(state, &entry, kind, env.agent_id.clone())
                .await
        } else {
            Vec::new()
        };
        state.push_entry(entry, cfg.detect.window);
        let mut v = self.verdict(
            state,
            env,
            seq,
            matched,
            similarity,
            signature,
            action,
            counted,
            reason,
            judge_report,
        );
        v.kind = kind;
        v.is_loop = kind != LoopKind::None;
        v.similar_loops = similar_loops;
        Ok(self.finish(state, env, seq, v, audit, timings, asked))
    }

    /// Put a loop in the cross-task memory and find the closest loops of other tasks. Advisory:
    /// a failure here costs the listing, never the verdict. The loop's text is usually embedded
    /// already (the semantic path, or an earlier repetition); when it is not, the request does
    /// wait behind other work: when the model is busy, the loop is embedded and remembered in the
    /// background, and the listing comes with the loop's next repetition.
    async fn remember_loop(
        &self,
        state: &TaskState,
        entry: &crate::state::Entry,
        kind: LoopKind,
        agent_id: Option<String>,
    ) -> Vec<crate::memory::SimilarLoop> {
        let Some(mem) = &self.memory else {
            return Vec::new();
        };
        let text = head_tail(&entry.body.display_text(), self.cfg.model.max_text_chars);
        let record = crate::memory::LoopRecord {
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
        let remember = |mem: &crate::memory::LoopMemory, record, vector| {
            if let Err(e) = mem.remember(record, vector) {
                tracing::warn!(error = %e, "loop memory write failed");
            }
        };
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
            remember(mem, record, vector);
            return similar;
        }
        let (mem, embedder) = (Arc::clone(mem), self.embedder.clone());
        let background = Arc::clone(&self.background);
        background.started();
        let work = async move {
            match embedder.embed(std::slice::from_ref(&text)).await {
                Ok(mut v) => remember(&mem, record, v.remove(0)),
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

    fn resolve_loops(&self, root: &str, result: &str, note: Option<String>, ts: i64) {
        if let Some(mem) = &self.memory {
            let resolution = crate::memory::Resolution {
                result: result.to_string(),
                note,
                ts,
            };
            match mem.resolve(root, resolution) {
                Ok(n) if n > 0 => {
                    tracing::info!(event = "loops_resolved", task_id = %root, loops = n, result)
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, task_id = %root, "loop memory write failed"),
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn verdict(
        &self,
        state: &TaskState,
        env: &Envelope,
        seq: u64,
        matched: Option<Matched>,
        similarity: Option<f32>,
        signature: Option<crate::verdict::SignatureView>,
        action: Action,
        counted: bool,
        reason: String,
        judge: Option<JudgeReport>,
    ) -> Verdict {
        Verdict {
            task_id: env.task_id.clone(),
            seq,
            is_loop: false,
            kind: LoopKind::None,
            loop_count: state.loop_count,
            counted,
            similarity,
            matched,
            signature,
            action,
            reason,
            judge,
            pivot_count: state.pivot_count,
            status: state.status,
            similar_loops: Vec::new(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        state: &mut TaskState,
        env: &Envelope,
        seq: u64,
        mut verdict: Verdict,
        audit: Vec<AuditEvent>,
        timings: Timings,
        asked_judge: bool,
    ) -> Evaluation {
        verdict.loop_count = state.loop_count;
        verdict.pivot_count = state.pivot_count;
        verdict.status = state.status;
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
        });
        let audit = audit
            .into_iter()
            .map(|event| AuditRecord {
                ts: state.updated_ts,
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

    /// Ask the judge (or apply the fallback). `Ok(finding)` when the case counts as a loop,
    /// `Err(reason)` when it does not.
    async fn consult(
        &self,
        state: &TaskState,
        entry: &crate::state::Entry,
        ctx: &Ctx<'_>,
        question: String,
        candidate: Option<Link>,
    ) -> (Result<Finding, String>, JudgeReport) {
        let fallback = |status: &str, why: String| {
            let report = JudgeReport {
                status: status.to_string(),
                verdict: None,
                confidence: None,
                reason: Some(why.clone()),
                fallback: true,
            };
            let outcome = match self.cfg.judge.fallback {
                Fallback::NoLoop => Err(format!("ambiguous ({question}); fallback: not a loop")),
                Fallback::Loop => Ok(judged_finding(
                    &question,
                    candidate.as_ref(),
                    JudgeVerdict::NoProgress,
                    "fallback",
                )),
            };
            (outcome, report)
        };
        let Some(judge) = &self.judge else {
            return fallback("none", "no judge configured".into());
        };
        if state.judge_calls >= self.cfg.judge.max_calls_per_task {
            return fallback(
                "budget_exhausted",
                format!(
                    "{} judge calls already made for this task (judge.max_calls_per_task)",
                    state.judge_calls
                ),
            );
        }
        let evidence = evidence(
            state,
            entry,
            ctx,
            &question,
            candidate.as_ref(),
            &self.cfg.judge,
        );
        let answer = judge.evaluate(&evidence).await;
        let Some(verdict) = answer
            .verdict
            .filter(|_| answer.status == crate::judge::JudgeStatus::Ok)
        else {
            return fallback(
                answer.status.as_str(),
                answer.reason.unwrap_or_else(|| "undecided".into()),
            );
        };
        let report = JudgeReport {
            status: "ok".into(),
            verdict: Some(verdict.as_str().to_string()),
            confidence: answer.confidence,
            reason: answer.reason.clone(),
            fallback: false,
        };
        let why = answer.reason.unwrap_or_default();
        let outcome = match verdict {
            JudgeVerdict::Progress => Err(format!("not a loop: judge says progress ({why})")),
            JudgeVerdict::External => Err(format!(
                "not a loop: judge says the cause is external ({why}); not counted"
            )),
            v => Ok(judged_finding(&question, candidate.as_ref(), v, &why)),
        };
        (outcome, report)
    }

    /// Reset a task's loop counter from outside (the reset endpoint), with an audit record.
    pub async fn reset(
        &self,
        task_id: &str,
        reason: ResetReason,
        by: &str,
        note: Option<String>,
    ) -> Result<TaskState, EngineError> {
        let root = self.root_of(task_id)?;
        let slot = self.slot(&root);
        let mut guard = slot.lock().await;
        let current = match guard.take() {
            Some(s) => s,
            None => match self.store.load(&root)? {
                Some(s) => s,
                None => return Err(EngineError::NotFound(task_id.to_string())),
            },
        };
        let mut next = current.clone();
        *guard = Some(current);
        let now = now_unix();
        let note_for_memory = note.clone();
        let record = AuditRecord {
            ts: now,
            seq: next.next_seq.saturating_sub(1),
            task_id: task_id.to_string(),
            agent_id: None,
            event: AuditEvent::CounterReset {
                previous_count: next.loop_count,
                reason: reason.as_str().to_string(),
                by: by.to_string(),
                note,
            },
        };
        self.resolve_loops(&root, reason.as_str(), note_for_memory, now);
        next.reset();
        next.updated_ts = now;
        self.store
            .commit(&next, std::slice::from_ref(&record), None)?;
        *guard = Some(next.clone());
        drop(guard);
        self.store.flush().await?;
        log_audit(std::slice::from_ref(&record));
        Ok(next)
    }

    /// The current state of a task (its root's state), if it exists.
    pub async fn snapshot(&self, task_id: &str) -> Result<Option<TaskState>, EngineError> {
        let root = self.root_of(task_id)?;
        let slot = self.slot(&root);
        let guard = slot.lock().await;
        if let Some(s) = guard.as_ref() {
            return Ok(Some(s.clone()));
        }
        drop(guard);
        Ok(self.store.load(&root)?)
    }

    /// The audit trail of a task's root.
    pub fn history(&self, task_id: &str, limit: usize) -> Result<Vec<AuditRecord>, EngineError> {
        let root = self.root_of(task_id)?;
        Ok(self.store.history(&root, limit)?)
    }

    /// Delete a task (its root) entirely.
    pub async fn delete(&self, task_id: &str) -> Result<bool, EngineError> {
        let root = self.root_of(task_id)?;
        let slot = self.slot(&root);
        let mut guard = slot.lock().await;
        let had = self.store.delete(&root)? | guard.is_some();
        *guard = None;
        self.forget(&root, &slot);
        drop(guard);
        if let Some(mem) = &self.memory {
            mem.forget_task(&root)?;
        }
        self.store.flush().await?;
        Ok(had)
    }

    /// Delete root tasks idle for longer than `ttl_secs` (seed 000: garbage-collect task states
    /// inactive for over 24 hours). Returns the roots deleted.
    pub async fn expire_idle(&self, ttl_secs: u64, now: i64) -> Result<Vec<String>, EngineError> {
        let before = now.saturating_sub(ttl_secs as i64);
        let mut expired = Vec::new();
        for root in self.store.idle_roots(before)? {
            let slot = self.slot(&root);
            let mut guard = slot.lock().await;
            // An event may have arrived since the scan: check again under the task's lock.
            let fresh = match guard.as_ref() {
                Some(s) => s.updated_ts >= before,
                None => self
                    .store
                    .load(&root)?
                    .is_some_and(|s| s.updated_ts >= before),
            };
            if fresh {
                continue;
            }
            self.store.delete(&root)?;
            *guard = None;
            self.forget(&root, &slot);
            drop(guard);
            tracing::info!(event = "task_expired", task_id = %root, ttl_secs);
            expired.push(root);
        }
        if !expired.is_empty() {
            self.store.flush().await?;
        }
        Ok(expired)
    }

    /// Keep at most `max` task states in memory; the rest are reloaded from the store when their
    /// next event comes. Tasks in use are never dropped.
    pub fn trim_cache(&self, max: usize) {
        let mut slots = self.slots.lock().expect("slots lock");
        if slots.len() <= max {
            return;
        }
        let excess = slots.len() - max;
        let idle: Vec<String> = slots
            .iter()
            .filter(|(_, s)| Arc::strong_count(s) == 1 && s.try_lock().is_ok())
            .map(|(k, _)| k.clone())
            .take(excess)
            .collect();
        for k in idle {
            slots.remove(&k);
        }
        drop(slots);
        let mut roots = self.roots.lock().expect("roots lock");
        if roots.len() > max {
            // Only a cache of the store's links.
            roots.clear();
        }
    }

    /// Task states held in memory.
    pub fn cached_tasks(&self) -> usize {
        self.slots.lock().expect("slots lock").len()
    }
}

/// Counts background work so it can be waited for.
#[derive(Default)]
struct Background {
    running: std::sync::atomic::AtomicUsize,
    done: tokio::sync::Notify,
}

impl Background {
    fn started(&self) {
        self.running
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    fn finished(&self) {
        if self
            .running
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
        {
            self.done.notify_waiters();
        }
    }

    async fn idle(&self) {
        loop {
            let notified = self.done.notified();
            if self.running.load(std::sync::atomic::Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

fn advance(run: Option<PeriodicRun>, period: usize, counts: bool) -> PeriodicRun {
    match run {
        Some(r) if r.period == period && !counts => PeriodicRun {
            period,
            since_counted: r.since_counted + 1,
        },
        _ => PeriodicRun {
            period,
            since_counted: 0,
        },
    }
}

/// Track step entries (seed 004): returns the step entered by this event and its count.
fn enter_step(state: &mut TaskState, env: &Envelope) -> Option<(String, u32)> {
    let entered = match &env.event {
        Event::Transition(t) => Some(t.to.clone()),
        _ => env
            .step
            .clone()
            .filter(|s| state.current_step.as_deref() != Some(s.as_str())),
    }?;
    if state.current_step.as_deref() == Some(entered.as_str())
        && !matches!(env.event, Event::Transition(_))
    {
        return None;
    }
    state.current_step = Some(entered.clone());
    let n = state.step_entries.entry(entered.clone()).or_insert(0);
    *n += 1;
    Some((entered, *n))
}

/// Is this a case the cheap signals cannot decide? Returns the question and the near miss.
fn ambiguous(cfg: &Config, ctx: &Ctx<'_>, external: bool) -> Option<(String, Option<Link>)> {
    // External failures are not the agent's doing: nothing to judge.
    if external {
        return None;
    }
    if let Some(l) = detect::grey_candidate(ctx) {
        // Only worth asking when a match would have made a loop: enough earlier events alike.
        let need = match ctx.entry.body.channel() {
            crate::state::Channel::Failure => cfg.detect.repeats.failure,
            crate::state::Channel::Collaboration => cfg.detect.repeats.collaboration,
            crate::state::Channel::Response => cfg.detect.repeats.response,
            crate::state::Channel::ToolCall => cfg.detect.repeats.tool_call,
            crate::state::Channel::Other => usize::MAX,
        };
        let alike = 1 + ctx.same_links().count();
        if alike >= need && ctx.state.progress_since(l.seq).is_none() {
            return Some((
                format!(
                    "is this the same as seq {} (similarity {} is in the grey band below the threshold)?",
                    l.seq,
                    detect::fmt_cos(l.similarity())
                ),
                Some(*l),
            ));
        }
    }
    let n = cfg.judge.ask_after_failures;
    if n > 0
        && matches!(ctx.entry.body, EntryBody::Failure { .. })
        && ctx.state.failures_since_progress + 1 >= n
        && ctx.metrics.is_none()
        && ctx.state.metrics.is_empty()
    {
        return Some((
            format!(
                "{} failures in a row with no objective progress signal: is the agent moving toward the goal?",
                ctx.state.failures_since_progress + 1
            ),
            None,
        ));
    }
    None
}

fn judged_finding(
    question: &str,
    candidate: Option<&Link>,
    verdict: JudgeVerdict,
    why: &str,
) -> Finding {
    let kind = match (verdict, candidate) {
        (JudgeVerdict::Regressive, _) => LoopKind::Regression,
        (_, Some(_)) => LoopKind::SemanticRepeat,
        (_, None) => LoopKind::Regression,
    };
    let mut f = Finding::new(
        kind,
        format!("judge: {} ({why}); asked: {question}", verdict.as_str()),
    );
    f.matched = candidate.map(|l| l.seq);
    f.similarity = candidate.and_then(|l| l.similarity());
    f.vetoable = false;
    f
}

fn evidence(
    state: &TaskState,
    entry: &crate::state::Entry,
    ctx: &Ctx<'_>,
    question: &str,
    candidate: Option<&Link>,
    cfg: &crate::config::JudgeConfig,
) -> Evidence {
    let trim = |s: String| head_tail(&s, cfg.max_evidence_chars.max(16));
    let as_evidence = |e: &crate::state::Entry| EvidenceEvent {
        seq: e.seq,
        kind: match &e.body {
            EntryBody::Failure { .. } => "failure",
            EntryBody::ToolCall { .. } => "tool_call",
            EntryBody::Response { .. } => "response",
            EntryBody::Collaboration { .. } => "collaboration",
            EntryBody::Transition { .. } => "transition",
            EntryBody::Progress { .. } => "progress",
            EntryBody::Outcome { .. } => "outcome",
        }
        .to_string(),
        text: trim(e.body.display_text()),
    };
    Evidence {
        task_id: state.root.clone(),
        goal: state.goal.as_ref().map(|g| trim(g.clone())),
        question: question.to_string(),
        recent: state
            .window
            .iter()
            .rev()
            .take(cfg.max_evidence_events)
            .rev()
            .map(as_evidence)
            .collect(),
        current: as_evidence(entry),
        metrics: ctx
            .metrics
            .or_else(|| state.metrics.back().copied())
            .map(|o| o.metrics),
        candidate: candidate.map(|l| Candidate {
            seq: l.seq,
            text: state
                .entry(l.seq)
                .map(|e| trim(e.body.display_text()))
                .unwrap_or_default(),
            similarity: l.similarity(),
        }),
    }
}

/// A window entry as a bare event of the input contract, for labelled runs. Lossy: the engine
/// keeps normalised texts, and a tool call's arguments come back as one `call` string.
pub fn bare_event(e: &crate::state::Entry) -> serde_json::Value {
    use serde_json::json;
    match &e.body {
        EntryBody::Failure { sig, .. } => json!({"type": "failure", "message": sig.text}),
        EntryBody::ToolCall {
            tool, call, result, ..
        } => {
            let args = call
                .text
                .split_once('\n')
                .map(|(_, rest)| rest)
                .unwrap_or("");
            let mut v = json!({"type": "tool_call", "tool": tool, "args": {"call": args}});
            if let Some(r) = result {
                v["result"] = json!({"output": r.sig.text, "is_error": r.failed});
            }
            v
        }
        EntryBody::Response { sig, .. } => json!({"type": "response", "text": sig.text}),
        EntryBody::Collaboration {
            from_agent,
            to_agent,
            sig,
        } => {
            json!({"type": "collaboration", "from_agent": from_agent, "to_agent": to_agent, "request": sig.text})
        }
        EntryBody::Transition { from, to } => json!({"type": "transition", "from": from, "to": to}),
        EntryBody::Progress { metrics, .. } => json!({
            "type": "progress",
            "tests_passed": metrics.passed,
            "tests_failed": metrics.failed,
            "coverage": metrics.coverage,
        }),
        EntryBody::Outcome { result } => json!({"type": "outcome", "result": result}),
    }
}

/// One structured log line per notable event (seed 000's logging section).
fn log_audit(records: &[AuditRecord]) {
    for r in records {
        match &r.event {
            AuditEvent::LoopDetected {
                kind,
                loop_count,
                counted,
                reason,
            } => tracing::info!(
                event = "loop_detected",
                task_id = %r.task_id,
                agent_id = r.agent_id.as_deref().unwrap_or(""),
                seq = r.seq,
                kind = kind.as_str(),
                loop_count,
                counted,
                reason = %reason,
            ),
            AuditEvent::PivotIssued {
                pivot_count,
                entropy_count_at_trigger,
            } => tracing::info!(
                event = "pivot_issued",
                task_id = %r.task_id,
                agent_id = r.agent_id.as_deref().unwrap_or(""),
                seq = r.seq,
                pivot_count,
                entropy_count_at_trigger,
            ),
            // Info, not warn: a gate is the service doing its job, and `score` over many runs
            // would otherwise flood stderr.
            AuditEvent::GateTriggered { loop_count, reason } => tracing::info!(
                event = "gate_triggered",
                task_id = %r.task_id,
                agent_id = r.agent_id.as_deref().unwrap_or(""),
                seq = r.seq,
                loop_count,
                reason = %reason,
            ),
            AuditEvent::CounterReset {
                previous_count,
                reason,
                by,
                ..
            } => tracing::info!(
                event = "loop_counter_reset",
                task_id = %r.task_id,
                seq = r.seq,
                previous_count,
                reason = %reason,
                by = %by,
            ),
            AuditEvent::AgentChanged { from, to } => tracing::info!(
                event = "agent_changed",
                task_id = %r.task_id,
                seq = r.seq,
                from = from.as_deref().unwrap_or(""),
                to = %to,
            ),
            AuditEvent::BudgetExhausted { events } => tracing::warn!(
                event = "budget_exhausted",
                task_id = %r.task_id,
                seq = r.seq,
                events,
            ),
        }
    }
}
