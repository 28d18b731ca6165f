//! Per-task state: the bounded window of recent events, the loop counter, the pivot count and the
//! rest of what detectors and policy remember between events.
//!
//! A subtask has no state of its own: it shares its root task's state ("subtasks
//! inherit the parent's counter"), so the state is keyed by the root task id.

use crate::audit::AuditEvent;
use crate::embed::Vector;
use crate::signature::artifact::{ArtifactChange, ArtifactVersions};
use crate::signature::{AmbientLines, ErrorType, TestMetrics};
use crate::verdict::{LoopKind, TaskStatus};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Version of the serialised [`TaskState`]; bump it when the layout changes incompatibly.
pub const STATE_FORMAT_VERSION: u32 = 1;

/// A text as the engine compares it: exact and normalised keys, the prepared text the model
/// embeds, and the numbers that must agree for a semantic match to count.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TextSig {
    /// Key of the exact text.
    pub exact: u64,
    /// Key of the normalised text.
    pub norm: u64,
    /// Normalised, trimmed to the model's budget: what is embedded and shown in `matched.text`.
    pub text: String,
    /// Numbers left after normalisation (at most [`MAX_NUMBERS`]).
    pub numbers: Vec<String>,
    /// Tool calls only: the resources the call names (file names, long hex ids, UUIDs), which
    /// must agree for two calls to be the same.
    #[serde(default)]
    pub ids: Vec<String>,
    /// Failures only: the key of the message's template — numbers, paths, hosts, ids masked —
    /// so one log line with other variables is the same failure. 0: none.
    #[serde(default)]
    pub template: u64,
    /// Set once computed; never persisted (recomputed through the embedding cache after a restart).
    #[serde(skip)]
    pub vector: Option<Vector>,
}

/// Equal when everything but the vector is: the vector is a cache of the text's embedding (never
/// persisted), so a state read back from a store equals the state that was written.
impl PartialEq for TextSig {
    fn eq(&self, other: &Self) -> bool {
        let TextSig {
            exact,
            norm,
            text,
            numbers,
            ids,
            template,
            vector: _,
        } = self;
        *exact == other.exact
            && *norm == other.norm
            && *template == other.template
            && *text == other.text
            && *numbers == other.numbers
            && *ids == other.ids
    }
}

impl TaskState {
    /// Drop the embeddings cached in the window (a copy kept for durability, not for matching).
    pub fn forget_vectors(&mut self) {
        for e in self.window.iter_mut() {
            match &mut e.body {
                EntryBody::Failure { sig, .. }
                | EntryBody::Response { sig, .. }
                | EntryBody::Collaboration { sig, .. } => sig.vector = None,
                EntryBody::ToolCall { call, result, .. } => {
                    call.vector = None;
                    if let Some(r) = result {
                        r.sig.vector = None;
                    }
                }
                EntryBody::Transition { .. }
                | EntryBody::ResponseChunk { .. }
                | EntryBody::Progress { .. }
                | EntryBody::Outcome { .. } => {}
            }
        }
    }
}

/// Numbers kept per text; long outputs keep their first ones.
pub const MAX_NUMBERS: usize = 64;

/// What the engine keeps of a tool result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResultSig {
    pub sig: TextSig,
    /// `is_error`, or a non-zero exit code.
    pub failed: bool,
    /// An error or a "nothing found": a result that brings no progress.
    pub negative: bool,
    /// Too little text to identify anything ("", "OK", markup only).
    pub trivial: bool,
    /// Failed for a reason outside the agent (network, auth, outage).
    pub external: bool,
    /// Where the call ended, when it ended in an error or a "nothing found".
    #[serde(default)]
    pub outcome: Option<Box<crate::signature::Outcome>>,
    /// Key of the output with the call's own terms masked ([`crate::signature::echo_key`]): what
    /// the tool found apart from what it was asked. 0 when the output repeats none of them.
    #[serde(default)]
    pub echo: u64,
    /// A "nothing found" (negative, not failed): what it says apart from what it was asked
    /// ([`crate::signature::residue`]), to tell the same empty answer from one that suggests
    /// something new.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub residue: Option<String>,
    /// Its lines with numbers in them, to see two outputs differ only in counters (a token
    /// count, a cost) the task prints whatever the call does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numbered: Option<Box<crate::signature::NumberedLines>>,
    /// Its lines' shape, to see a call run again only add copies of what it printed.
    #[serde(
        default,
        skip_serializing_if = "crate::signature::LineShape::is_unknown"
    )]
    pub shape: crate::signature::LineShape,
}

/// The event-specific part of a window entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EntryBody {
    Failure {
        sig: TextSig,
        error_type: ErrorType,
        external: bool,
        exception: Option<String>,
        location: Option<String>,
        context_hash: Option<String>,
        signature_hash: String,
    },
    ToolCall {
        tool: String,
        /// Tool name + canonical args.
        call: TextSig,
        result: Option<ResultSig>,
        /// A thinking tool: never counts as new work.
        passive: bool,
    },
    Response {
        /// SHA-256 of the trimmed text: identical responses are found without the model.
        sha256: String,
        sig: TextSig,
    },
    /// A piece of a response still streaming (`"chunk": true`): looked at for repetition inside
    /// the stream ([`TaskState::streams`]), never kept in the window nor compared with turns.
    ResponseChunk {
        chars: usize,
    },
    Collaboration {
        from_agent: String,
        to_agent: String,
        /// The sender said `to_agent` is a group (`to_group`): every member sees the message.
        /// Groups are also inferred from who writes to whom ([`crate::detect::collaboration`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        to_group: bool,
        /// The prose of the request (its artifacts taken out), with the identities of the
        /// artifacts it names as `ids`: two messages are the same only when those agree.
        sig: TextSig,
        /// The artifacts it carries and how each changed ([`crate::signature::artifact`]).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        artifacts: Vec<ArtifactChange>,
        /// A protocol turn (a short closing or confirming turn: "Finished", "OK"): not a
        /// request, never the same as anything.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        protocol: bool,
    },
    Transition {
        from: String,
        to: String,
    },
    Progress {
        metrics: TestMetrics,
        completion: bool,
    },
    Outcome {
        result: String,
    },
}

/// Which events can be the same as which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    Failure,
    ToolCall,
    Response,
    Collaboration,
    Other,
}

impl EntryBody {
    pub fn channel(&self) -> Channel {
        match self {
            EntryBody::Failure { .. } => Channel::Failure,
            EntryBody::ToolCall { .. } => Channel::ToolCall,
            EntryBody::Response { .. } => Channel::Response,
            EntryBody::Collaboration { .. } => Channel::Collaboration,
            _ => Channel::Other,
        }
    }

    /// The event type this entry came from, as the input contract names it.
    pub fn type_name(&self) -> &'static str {
        match self {
            EntryBody::Failure { .. } => "failure",
            EntryBody::ToolCall { .. } => "tool_call",
            EntryBody::Response { .. } | EntryBody::ResponseChunk { .. } => "response",
            EntryBody::Collaboration { .. } => "collaboration",
            EntryBody::Transition { .. } => "transition",
            EntryBody::Progress { .. } => "progress",
            EntryBody::Outcome { .. } => "outcome",
        }
    }

    /// The text shown as `matched.text` when this entry is matched.
    pub fn display_text(&self) -> String {
        match self {
            EntryBody::Failure { sig, .. }
            | EntryBody::Response { sig, .. }
            | EntryBody::Collaboration { sig, .. } => sig.text.clone(),
            EntryBody::ToolCall { call, result, .. } => match result {
                Some(r) if !r.trivial => format!("{}\n→ {}", call.text, r.sig.text),
                _ => call.text.clone(),
            },
            EntryBody::Transition { from, to } => format!("{from} → {to}"),
            EntryBody::ResponseChunk { chars } => format!("a response chunk of {chars} characters"),
            EntryBody::Progress { .. } => "progress".into(),
            EntryBody::Outcome { result } => result.clone(),
        }
    }
}

/// One event as remembered in the window.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    pub seq: u64,
    /// Unix seconds.
    pub ts: i64,
    pub agent_id: Option<String>,
    pub body: EntryBody,
    /// Earlier entries (by seq) this one is the same as, exactly or reworded.
    pub same_as: Vec<u64>,
    /// Did it bring new work: a call, failure or request not seen before in the window?
    pub novel: bool,
    /// A short message or response that is a courtesy (thanks, goodbye): says nothing of the work
    /// ([`crate::detect::collaboration::courtesies`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub courtesy: bool,
    /// Responses only: the cosine to the closest earlier response in the window (1 for the same
    /// words), kept so a request that comes back can be asked whether its answers said anything
    /// new ([`crate::detect::collaboration`]): a reply reworded each time brings nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closest_earlier: Option<f32>,
}

impl Entry {
    /// Work events form the sequence cycles are searched in; thoughts and metrics do not.
    pub fn is_work(&self) -> bool {
        matches!(
            self.body.channel(),
            Channel::ToolCall | Channel::Failure | Channel::Collaboration
        )
    }

    /// A call to a thinking tool, or a protocol turn of a collaboration ("Finished."): no work.
    pub fn is_passive(&self) -> bool {
        matches!(
            self.body,
            EntryBody::ToolCall { passive: true, .. }
                | EntryBody::Collaboration { protocol: true, .. }
        )
    }

    pub fn is_same_as(&self, older_seq: u64) -> bool {
        self.same_as.contains(&older_seq)
    }
}

/// Test results seen at one event, with where they came from: only results from the same
/// source are comparable (the same test command, failure messages, progress events); a run of a
/// smaller test file is not a regression of a bigger one.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct MetricsObs {
    pub seq: u64,
    pub source: u64,
    pub metrics: TestMetrics,
}

/// Metrics sources that are not a tool call.
pub const METRICS_FROM_FAILURES: u64 = 1;
pub const METRICS_FROM_PROGRESS: u64 = 2;

/// An observed sign of progress: better test results or completion indicators.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProgressMark {
    pub seq: u64,
    pub reason: String,
}

/// A loop pattern that repeats over several events (a cycle, a transition cycle): counted once
/// per period, not once per event.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct PeriodicRun {
    pub period: usize,
    /// Pattern events since the run was last counted.
    pub since_counted: usize,
}

impl PeriodicRun {
    /// The run after one more pattern event: counted ones start the count again.
    pub fn advance(run: Option<PeriodicRun>, period: usize, counts: bool) -> PeriodicRun {
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
}

/// What a past verdict said, kept for `GET /v1/tasks/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VerdictSummary {
    pub seq: u64,
    pub task_id: String,
    #[serde(rename = "loop")]
    pub is_loop: bool,
    pub kind: LoopKind,
    pub action: String,
    pub loop_count: u32,
    /// The event's type and text as compared, and what it was matched with: what feedback on
    /// this verdict is about.
    #[serde(default)]
    pub event_type: String,
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub matched_seq: Option<u64>,
    #[serde(default)]
    pub matched_text: Option<String>,
    /// When the event happened (unix seconds), who sent it, and the rest of what the verdict
    /// said: what a timeline of the task shows. Absent (defaults) in states written before.
    #[serde(default)]
    pub ts: i64,
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub counted: bool,
    #[serde(default)]
    pub similarity: Option<f32>,
    #[serde(default)]
    pub reason: String,
    /// The detection rule behind the verdict, when one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// A collaboration message's artifacts and how each changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<ArtifactChange>,
}

/// Everything the engine remembers about one root task.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskState {
    pub format: u32,
    pub root: String,
    /// Sequence number the next event gets.
    pub next_seq: u64,
    /// Commits so far (events and resets): a shared store compares it to know whether a copy
    /// held in memory is still current.
    #[serde(default)]
    pub version: u64,
    /// Every event ever seen: the global budget, which nothing resets.
    pub events_total: u64,
    /// The loop counter: reset by success or human intervention only.
    pub loop_count: u32,
    /// The entropy count: counted loops since the last pivot directive.
    pub entropy: u32,
    pub pivot_count: u32,
    pub status: TaskStatus,
    /// Detections per loop kind since the last reset (the per-kind ladders' index).
    pub kind_hits: BTreeMap<String, u32>,
    /// Loops of external failures seen since the last reset.
    pub external_hits: u32,
    pub window: VecDeque<Entry>,
    pub current_step: Option<String>,
    pub step_entries: BTreeMap<String, u32>,
    pub transitions: VecDeque<(String, String)>,
    /// Test results seen, newest last (from progress events, failures and tool outputs).
    pub metrics: VecDeque<MetricsObs>,
    pub progress_marks: VecDeque<ProgressMark>,
    /// Failures since the last progress mark.
    pub failures_since_progress: u32,
    pub cycle: Option<PeriodicRun>,
    pub transition_cycle: Option<PeriodicRun>,
    pub recent_verdicts: VecDeque<VerdictSummary>,
    /// Agents seen, for the audit of agent changes.
    pub last_agent: Option<String>,
    /// The task's goal, from the first event that gave one (for the judge).
    #[serde(default)]
    pub goal: Option<String>,
    /// Judge consultations so far (bounded by `judge.max_calls_per_task`).
    #[serde(default)]
    pub judge_calls: u32,
    /// Responses still streaming, by the task id that sends their chunks (a subtask streams
    /// apart from its root): the tail each one is checked on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub streams: BTreeMap<String, StreamTail>,
    /// Error lines the agent's environment prints whatever the call does: not a call's outcome.
    #[serde(default, skip_serializing_if = "AmbientLines::is_empty")]
    pub ambient: AmbientLines,
    /// The latest version of each artifact collaboration messages carried.
    #[serde(default, skip_serializing_if = "ArtifactVersions::is_empty")]
    pub artifacts: ArtifactVersions,
    pub created_ts: i64,
    pub updated_ts: i64,
}

/// The end of a response still streaming, as far as it has come
/// ([`crate::detect::content::STREAM_TAIL_CHARS`] characters at most).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StreamTail {
    pub text: String,
    /// `text` starts inside a fenced code block (its opening was cut off).
    #[serde(default)]
    pub fence_open: bool,
    pub chunks: u64,
    /// Seq of the last chunk: the stream written to longest ago is forgotten first.
    pub last_seq: u64,
    /// A content loop was reported for this stream: its later chunks are not reported again.
    #[serde(default)]
    pub flagged: bool,
}

/// Verdicts kept per task for inspection.
pub const RECENT_VERDICTS: usize = 20;
/// Distinct workflow steps whose entries are counted per task; past it, the step entered least
/// often is forgotten, so a client inventing step names cannot grow a task without bound.
/// Real workflows have a handful of steps (seed 004 has four).
pub const MAX_STEPS_KEPT: usize = 64;
/// Characters of a task's goal kept (the judge sees at most `judge.max_evidence_chars` of it).
pub const GOAL_KEPT_CHARS: usize = 2000;
/// Progress marks and metric observations kept per task.
pub const HISTORY_KEPT: usize = 32;

impl TaskState {
    pub fn new(root: &str, now: i64) -> Self {
        TaskState {
            format: STATE_FORMAT_VERSION,
            root: root.to_string(),
            next_seq: 1,
            version: 0,
            events_total: 0,
            loop_count: 0,
            entropy: 0,
            pivot_count: 0,
            status: TaskStatus::Active,
            kind_hits: BTreeMap::new(),
            external_hits: 0,
            window: VecDeque::new(),
            current_step: None,
            step_entries: BTreeMap::new(),
            transitions: VecDeque::new(),
            metrics: VecDeque::new(),
            progress_marks: VecDeque::new(),
            failures_since_progress: 0,
            cycle: None,
            transition_cycle: None,
            recent_verdicts: VecDeque::new(),
            last_agent: None,
            goal: None,
            judge_calls: 0,
            streams: BTreeMap::new(),
            ambient: AmbientLines::default(),
            artifacts: ArtifactVersions::default(),
            created_ts: now,
            updated_ts: now,
        }
    }

    /// The reset on success or human intervention: counter, pivots and history go; the
    /// global budget stays.
    pub fn reset(&mut self) {
        self.loop_count = 0;
        self.entropy = 0;
        self.pivot_count = 0;
        if self.status == TaskStatus::Paused {
            self.status = TaskStatus::Active;
        }
        self.kind_hits.clear();
        self.external_hits = 0;
        self.window.clear();
        self.current_step = None;
        self.step_entries.clear();
        self.transitions.clear();
        self.metrics.clear();
        self.progress_marks.clear();
        self.failures_since_progress = 0;
        self.cycle = None;
        self.transition_cycle = None;
        self.artifacts = ArtifactVersions::default();
    }

    /// A new event: its sequence number, counted against the budget. `ts` is its time.
    pub fn begin_event(&mut self, ts: i64) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.events_total += 1;
        self.updated_ts = ts;
        seq
    }

    /// The task's goal is the first one an event gives (the judge reads it).
    pub fn note_goal(&mut self, goal: Option<&str>) {
        if self.goal.is_none() {
            self.goal = goal.map(|g| crate::signature::head_tail(g, GOAL_KEPT_CHARS));
        }
    }

    /// The agent of a new event. Changing agents does not reset the loop counter (no gaming the
    /// counter by rotating agents); the change is only recorded.
    pub fn note_agent(&mut self, agent: Option<&str>) -> Option<AuditEvent> {
        let agent = agent?;
        let changed = self
            .last_agent
            .as_deref()
            .is_some_and(|a| a != agent)
            .then(|| AuditEvent::AgentChanged {
                from: self.last_agent.clone(),
                to: agent.to_string(),
            });
        self.last_agent = Some(agent.to_string());
        changed
    }

    /// Track workflow-step entries (per-step iteration limits): the step a transition enters, or
    /// the envelope's `step` when it differs from the current one. Returns the step entered and
    /// how often it has been entered, this time included.
    pub fn enter_step(
        &mut self,
        step: Option<&str>,
        transition_to: Option<&str>,
    ) -> Option<(String, u32)> {
        let entered = match transition_to {
            Some(to) => to,
            None => step.filter(|s| self.current_step.as_deref() != Some(*s))?,
        };
        self.current_step = Some(entered.to_string());
        let n = {
            let n = self.step_entries.entry(entered.to_string()).or_insert(0);
            *n += 1;
            *n
        };
        if self.step_entries.len() > MAX_STEPS_KEPT {
            // Forget the step entered least often (never the current one): it is the furthest
            // from its limit.
            let least = self
                .step_entries
                .iter()
                .filter(|(step, _)| step.as_str() != entered)
                .min_by_key(|(_, count)| **count)
                .map(|(step, _)| step.clone());
            if let Some(step) = least {
                self.step_entries.remove(&step);
            }
        }
        Some((entered.to_string(), n))
    }

    /// After detection, before policy: carry periodic runs on (a cycle is counted once per
    /// period; any other work event ends the run), keep the transitions and test results the
    /// detectors read next time, and count failures since progress.
    pub fn record_detection(
        &mut self,
        entry: &Entry,
        finding: Option<(LoopKind, Option<usize>, bool)>,
        metrics: Option<MetricsObs>,
        transitions_kept: usize,
    ) {
        if entry.is_work() {
            self.cycle = match finding {
                Some((LoopKind::Cycle, period, counts)) => Some(PeriodicRun::advance(
                    self.cycle,
                    period.unwrap_or(1),
                    counts,
                )),
                _ => None,
            };
        }
        if let EntryBody::Transition { from, to } = &entry.body {
            self.transition_cycle =
                match finding {
                    Some((LoopKind::TransitionCycle, period, counts)) => Some(
                        PeriodicRun::advance(self.transition_cycle, period.unwrap_or(1), counts),
                    ),
                    _ => None,
                };
            self.transitions.push_back((from.clone(), to.clone()));
            while self.transitions.len() > transitions_kept {
                self.transitions.pop_front();
            }
        }
        if let Some(m) = metrics {
            self.metrics.push_back(m);
            while self.metrics.len() > HISTORY_KEPT {
                self.metrics.pop_front();
            }
        }
        if matches!(entry.body, EntryBody::Failure { .. }) {
            self.failures_since_progress += 1;
        }
    }

    pub fn push_entry(&mut self, entry: Entry, window: usize) {
        self.window.push_back(entry);
        while self.window.len() > window {
            self.window.pop_front();
        }
    }

    pub fn entry(&self, seq: u64) -> Option<&Entry> {
        // Seqs are increasing along the window.
        self.window
            .binary_search_by_key(&seq, |e| e.seq)
            .ok()
            .map(|i| &self.window[i])
    }

    pub fn add_progress(&mut self, seq: u64, reason: String) {
        self.progress_marks.push_back(ProgressMark { seq, reason });
        while self.progress_marks.len() > HISTORY_KEPT {
            self.progress_marks.pop_front();
        }
        self.failures_since_progress = 0;
    }

    /// The latest progress observed after `seq`, if any.
    pub fn progress_since(&self, seq: u64) -> Option<&ProgressMark> {
        self.progress_marks.iter().rev().find(|m| m.seq > seq)
    }

    pub fn remember_verdict(&mut self, v: VerdictSummary) {
        self.recent_verdicts.push_back(v);
        while self.recent_verdicts.len() > RECENT_VERDICTS {
            self.recent_verdicts.pop_front();
        }
    }

    pub fn kind_hit(&mut self, kind: LoopKind) -> u32 {
        let n = self.kind_hits.entry(kind.as_str().to_string()).or_insert(0);
        *n += 1;
        *n
    }
}
