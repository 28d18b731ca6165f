//! The engine: one event in, one verdict out.
//!
//! [`Engine::evaluate`] takes the task's lock, runs the event through the pipeline's stages on a
//! copy of the task state, and commits the copy with its audit records in one durable write
//! before answering. Each stage is one file, in the order [`Engine::step`] calls them (and
//! docs/DETECTION.md describes them):
//!
//! | stage | file | what it does |
//! |---|---|---|
//! | observe | [`observe`] | the event turned into keys, prepared texts and test metrics; the task's bookkeeping |
//! | link | `link.rs` | the event compared with the window: keys first, the model only when keys cannot decide |
//! | detect | `detect.rs` | progress marks, then the detectors of [`crate::detect`] |
//! | veto | `veto.rs` | progress since the matched event cancels a finding |
//! | judge | `judge.rs` | ambiguous cases go to the LLM judge (or the fallback) |
//! | policy | [`policy`] | loop counter, ladders, pivot directive, gate: the action |
//! | commit | `commit.rs` | the verdict, its summary and audit records; the durable write |
//!
//! Around the pipeline: `tasks.rs` (the per-task locks and the task lifecycle: reset, delete,
//! expiry, the in-memory cache), `recall.rs` (the cross-task loop memory) and `feedback.rs`.
//!
//! The pipeline changes the task's state in place; the store holds the state as last committed.
//! An error (model overloaded, store failure) drops the changed state uncommitted, and the
//! task's next event opens the stored one: the task is as it was.

mod commit;
mod detect;
mod feedback;
mod judge;
pub(crate) mod link;
pub(crate) mod observe;
pub(crate) mod policy;
mod recall;
mod tasks;
mod veto;

pub use feedback::bare_event;
pub use tasks::ResetReason;

use crate::audit::{AuditEvent, AuditMetrics, AuditRecord};
use crate::config::Config;
use crate::detect::{Ctx, Finding, Link};
use crate::embed::{EmbedError, Embedder};
use crate::event::Envelope;
use crate::judge::Judge;
use crate::loop_memory::LoopMemory;
use crate::state::{Entry, MetricsObs, TaskState};
use crate::store::{InMemoryStore, Store, StoreError};
use crate::verdict::{JudgeReport, SignatureView, Verdict};
use std::sync::Arc;
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
    /// A new subtask of a root that has `server.max_subtasks` already.
    #[error("task {root} has {limit} subtasks, the most one task may have (server.max_subtasks)")]
    TooManySubtasks { root: String, limit: usize },
    /// An event that would move an existing task under another parent: `current` is the root
    /// it belongs to (`None`: it is a root itself). A task keeps the place it was created with.
    #[error("{}", parent_conflict(task, current.as_deref(), requested))]
    ParentConflict {
        task: String,
        current: Option<String>,
        requested: String,
    },
    #[error(transparent)]
    Memory(#[from] crate::loop_memory::MemoryError),
    #[error(transparent)]
    Feedback(#[from] crate::feedback::FeedbackError),
}

fn parent_conflict(task: &str, current: Option<&str>, requested: &str) -> String {
    match current {
        None => format!(
            "task `{task}` exists with no parent; it cannot become a subtask of `{requested}` \
             (a task keeps the place it was created with: send its events without \
             parent_task_id, or use a new task id)"
        ),
        Some(root) => format!(
            "task `{task}` is a subtask of `{root}`; it cannot move under `{requested}` (a task \
             keeps the place it was created with: send `{root}` or no parent_task_id)"
        ),
    }
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

/// One event on its way through the stages: what each stage found, for the next ones.
pub(crate) struct Pass {
    pub seq: u64,
    pub ts: i64,
    pub entry: Entry,
    /// Test results the event carries (a progress event, or a summary in its text).
    pub metrics: Option<MetricsObs>,
    /// What the verdict shows as the event's signature.
    pub signature: Option<SignatureView>,
    /// A failure outside the agent's control: reported, never counted.
    pub external: bool,
    /// The workflow step this event enters, and how often it has been entered.
    pub step_entered: Option<(String, u32)>,
    pub links: Vec<Link>,
    /// Cosines of the changes of pairs of earlier calls (see [`Ctx::change_cosines`]).
    pub change_cosines: Vec<(u64, u64, f32)>,
    /// A repetition inside the event's own text (see [`Ctx::content`]).
    pub content: Option<crate::detect::content::ContentRepeat>,
    pub finding: Option<Finding>,
    /// A question for the judge, when no loop rule fired ([`crate::detect::questions`]).
    pub question: Option<crate::detect::questions::Question>,
    /// Why the event is not a loop when a veto, the judge or the fallback cleared it.
    pub cleared: Option<String>,
    /// The rule whose finding was cleared (vetoed by progress, or judged not a loop).
    pub cleared_rule: Option<&'static str>,
    pub judge: Option<JudgeReport>,
    pub asked_judge: bool,
    pub audit: Vec<AuditEvent>,
    pub timings: Timings,
}

impl Pass {
    /// What the detectors see: the task before this event, the event and its links.
    pub fn ctx<'a>(&'a self, cfg: &'a Config, state: &'a TaskState) -> Ctx<'a> {
        Ctx {
            cfg: &cfg.detect,
            judge: &cfg.judge,
            external: self.external,
            state,
            entry: &self.entry,
            links: &self.links,
            metrics: self.metrics,
            step_entered: self.step_entered.clone(),
            events_total: state.events_total,
            change_cosines: &self.change_cosines,
            content: self.content.as_ref(),
            past: crate::detect::past_work(state),
        }
    }

    /// Run `f` and add its time to the detect phase.
    pub fn timed_detect<T>(&mut self, f: impl FnOnce(&mut Pass) -> T) -> T {
        let started = Instant::now();
        let out = f(self);
        self.timings.detect_secs += started.elapsed().as_secs_f64();
        out
    }
}

/// Whose clock dates an event: the time that idle-task expiry, the gap rule
/// (`detect.max_gap_secs`) and a task's created/updated times are measured by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Clock {
    /// The event's own `ts` when it has one, else the engine's clock: replaying recorded runs
    /// (`loopguard score`), where the events happened long before they are scored.
    #[default]
    Event,
    /// Always the engine's clock; an event's `ts` is only recorded (`client_ts` in the audit
    /// trail). The service runs so: a client must not erase its own loop history with a `ts`
    /// two days old, nor keep a task forever with one in the year 2999.
    Server,
}

/// The detection engine. Cheap to share (`Arc<Engine>`); one per service or per scored run.
pub struct Engine {
    cfg: Arc<Config>,
    embedder: Embedder,
    judge: Option<Arc<dyn Judge>>,
    store: Arc<dyn Store>,
    loop_memory: Option<Arc<LoopMemory>>,
    feedback: Arc<crate::feedback::FeedbackStore>,
    audit_metrics: Option<Arc<dyn AuditMetrics>>,
    background: Arc<recall::Background>,
    tasks: tasks::Tasks,
    clock: Clock,
}

pub(crate) fn now_unix() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

impl Engine {
    /// An engine with in-memory state.
    pub fn new(cfg: Arc<Config>, embedder: Embedder) -> Self {
        Engine::with_store(cfg, embedder, Arc::new(InMemoryStore::new()))
    }

    pub fn with_store(cfg: Arc<Config>, embedder: Embedder, store: Arc<dyn Store>) -> Self {
        Engine {
            tasks: tasks::Tasks::new(cfg.server.max_cached_tasks),
            cfg,
            embedder,
            judge: None,
            store,
            loop_memory: None,
            feedback: Arc::new(crate::feedback::FeedbackStore::in_memory()),
            audit_metrics: None,
            background: Arc::new(recall::Background::default()),
            clock: Clock::default(),
        }
    }

    /// Date events by `clock` (see [`Clock`]; the default trusts the event's `ts`).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Ask this judge about ambiguous cases (without one, `judge.fallback` decides).
    pub fn with_judge(mut self, judge: Arc<dyn Judge>) -> Self {
        self.judge = Some(judge);
        self
    }

    /// Remember loops across tasks in `memory` (see [`crate::loop_memory`]).
    pub fn with_loop_memory(mut self, memory: Arc<LoopMemory>) -> Self {
        self.loop_memory = Some(memory);
        self
    }

    /// Keep feedback in `store` (in memory by default).
    pub fn with_feedback(mut self, store: Arc<crate::feedback::FeedbackStore>) -> Self {
        self.feedback = store;
        self
    }

    /// Count audit events (loops, pivots, gates, resets) with `metrics` as they are committed.
    pub fn with_audit_metrics(mut self, metrics: Arc<dyn AuditMetrics>) -> Self {
        self.audit_metrics = Some(metrics);
        self
    }

    pub fn loop_memory(&self) -> Option<&Arc<LoopMemory>> {
        self.loop_memory.as_ref()
    }

    pub fn feedback_store(&self) -> &Arc<crate::feedback::FeedbackStore> {
        &self.feedback
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

    /// Evaluate one event.
    pub async fn evaluate(&self, env: Envelope) -> Result<Verdict, EngineError> {
        Ok(self.evaluate_timed(env).await?.verdict)
    }

    /// Evaluate one event and report what it cost.
    pub async fn evaluate_timed(&self, env: Envelope) -> Result<Evaluation, EngineError> {
        let (root, link) = self.tasks.resolve(&*self.store, &env).await?;
        let lock = self.tasks.lock(&root);
        let mut guard = lock.lock_owned().await;
        let ts = match (self.clock, env.ts) {
            (Clock::Event, Some(t)) => t.unix_timestamp(),
            _ => now_unix(),
        };
        let opened = self.store.begin(&root, guard.take()).await?;
        if link.is_some() {
            // A new subtask: checked under the root's lock, so concurrent first events of
            // different subtasks cannot pass the bound together.
            let limit = self.cfg.server.max_subtasks;
            if self.store.subtask_count(&root).await? >= limit {
                let state = opened.state;
                *guard = state;
                return Err(EngineError::TooManySubtasks {
                    root: root.clone(),
                    limit,
                });
            }
        }
        // The pipeline changes the state in place (no copy per event). If it fails — the model
        // overloaded, say — the changed copy is dropped and nothing is committed: the task's
        // next event opens the stored state, as it was.
        let mut state = opened.state.unwrap_or_else(|| TaskState::new(&root, ts));
        let opened_version = state.version;
        match self.step(&mut state, &env, ts).await {
            Ok(mut eval) => {
                eval.timings.store_secs = self
                    .commit(guard, opened.txn, opened_version, state, &eval.audit, link)
                    .await?;
                Ok(eval)
            }
            Err(e) => {
                *guard = None;
                Err(e)
            }
        }
    }

    /// The pipeline: each call is one stage (see the module documentation).
    async fn step(
        &self,
        state: &mut TaskState,
        env: &Envelope,
        ts: i64,
    ) -> Result<Evaluation, EngineError> {
        let cfg = &*self.cfg;
        let mut pass = observe::begin(cfg, state, env, ts);
        if let Some(decision) = self.short_circuit(state, env, &mut pass).await {
            return Ok(commit::finish(cfg, state, env, pass, decision));
        }
        self.link(state, &mut pass).await?;
        detect::detect(cfg, state, env, &mut pass);
        veto::veto(state, &mut pass);
        self.judge(state, &mut pass).await;
        let mut decision = policy::decide(cfg, state, &mut pass);
        decision.similar_loops = self.recall(state, &pass, &decision, env).await;
        Ok(commit::finish(cfg, state, env, pass, decision))
    }
}
