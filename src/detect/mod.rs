//! Detectors: each a small unit that looks at the new event against the task's window and says
//! whether it is a loop of its kind. docs/DETECTION.md describes every one with its settings.
//!
//! The engine first links the new event to the window ([`matching`]: exact, normalised and
//! semantic identity), then runs the rule table ([`rules::RULES`]): the first loop rule that
//! fires wins, and when none does, the first question for the judge ([`questions`]). Progress
//! ([`progress`]) can veto a finding afterwards.

pub mod budget;
pub mod collaboration;
pub mod content;
pub mod cycle;
pub mod dead_end;
pub mod finding;
pub mod matching;
pub mod negative;
pub mod progress;
pub mod questions;
pub mod regression;
pub mod repeat;
pub mod response;
pub mod rules;
pub mod steps;
pub mod transitions;

#[cfg(test)]
pub(crate) mod testkit;

use crate::config::{DetectConfig, JudgeConfig};
use crate::state::MetricsObs;
use crate::state::{Entry, TaskState};
use crate::verdict::LoopKind;

/// How strongly two texts are the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Different.
    None,
    /// Similar, but below the threshold by no more than the grey band: ambiguous.
    Grey,
    /// Cosine at or above the threshold, with the same numbers.
    Semantic,
    /// Equal after normalisation.
    Normalized,
    /// Equal as given.
    Exact,
}

impl Level {
    pub fn is_match(self) -> bool {
        self >= Level::Semantic
    }
    pub fn is_exact(self) -> bool {
        self >= Level::Normalized
    }
}

/// How the new event compares with one earlier event of the same channel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    pub seq: u64,
    /// Main text (failure message, response, request) or, for a tool call, the call.
    pub text: Level,
    pub cos: Option<f32>,
    /// Tool calls only: how the results compare; `None` when either has no result.
    pub result: Option<Level>,
    pub cos_result: Option<f32>,
    /// The identity verdict: the same event (text, and result when both have one).
    pub same: bool,
    /// Too old to count (beyond `detect.max_gap_secs`).
    pub stale: bool,
}

impl Link {
    /// The similarity to report: the weakest part that made the match.
    pub fn similarity(&self) -> Option<f32> {
        match (self.cos, self.cos_result) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn exact(&self) -> bool {
        self.text.is_exact() && self.result.is_none_or(Level::is_exact)
    }
}

/// A detector's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub kind: LoopKind,
    pub matched: Option<u64>,
    pub similarity: Option<f32>,
    pub reason: String,
    /// False for events that continue a periodic loop already counted this period.
    pub counts: bool,
    /// True for loops a progress mark after `matched` cancels (repeats, cycles, same errors).
    pub vetoable: bool,
    /// Periodic loops (cycles, transition cycles): the period.
    pub period: Option<usize>,
    /// The rule that found it ([`rules::RULES`]; set by the table).
    pub rule: &'static str,
}

impl Finding {
    pub fn new(kind: LoopKind, reason: String) -> Self {
        Finding {
            kind,
            matched: None,
            similarity: None,
            reason,
            counts: true,
            vetoable: true,
            period: None,
            rule: "",
        }
    }
}

/// What detectors see: the configuration, the task state before the new event is added, the
/// new event, and its links to the window.
pub struct Ctx<'a> {
    pub cfg: &'a DetectConfig,
    /// The judge's settings: the questions read when they are asked.
    pub judge: &'a JudgeConfig,
    /// The new event is an external failure (network, auth, outage): never a question.
    pub external: bool,
    pub state: &'a TaskState,
    pub entry: &'a Entry,
    pub links: &'a [Link],
    /// Test results the new event carries (progress event, or a summary in its text).
    pub metrics: Option<MetricsObs>,
    /// The step the new event enters and how often it has been entered, this time included.
    pub step_entered: Option<(String, u32)>,
    /// Events of the task so far, this one included (the budget).
    pub events_total: u64,
    /// How alike the *changes* of pairs of earlier calls are: the cosine of what differs between
    /// their texts, computed by the link stage for the dead-end rules
    /// ([`dead_end::changes_to_compare`]).
    pub change_cosines: &'a [(u64, u64, f32)],
    /// A repetition inside the event's own text (a response, or the stream it continues).
    pub content: Option<&'a content::ContentRepeat>,
    /// The task's past work as every rule reads it ([`past_work`]), built once per event.
    pub past: Vec<&'a Entry>,
}

impl<'a> Ctx<'a> {
    /// The same event read with another configuration: a rule's own section's.
    pub fn with_cfg(&self, cfg: &'a DetectConfig) -> Ctx<'a> {
        Ctx {
            cfg,
            judge: self.judge,
            external: self.external,
            state: self.state,
            entry: self.entry,
            links: self.links,
            metrics: self.metrics,
            step_entered: self.step_entered.clone(),
            events_total: self.events_total,
            change_cosines: self.change_cosines,
            content: self.content,
            past: self.past.clone(),
        }
    }
}

/// The task's past work, newest first: the window's work events (tool calls, failures,
/// requests; thinking tools aside) before the new one. Each rule takes as much of it as its
/// window says.
pub fn past_work(state: &TaskState) -> Vec<&Entry> {
    state
        .window
        .iter()
        .rev()
        .filter(|e| e.is_work() && !e.is_passive())
        .collect()
}

/// The newest `n` of the past work.
pub fn recent<'p, 'e>(past: &'p [&'e Entry], n: usize) -> &'p [&'e Entry] {
    &past[..n.min(past.len())]
}

impl<'a> Ctx<'a> {
    pub fn link(&self, seq: u64) -> Option<&Link> {
        self.links.iter().find(|l| l.seq == seq)
    }

    /// Live links that are the same event, newest first.
    pub fn same_links(&self) -> impl Iterator<Item = &Link> {
        self.links.iter().rev().filter(|l| l.same && !l.stale)
    }

    /// Is there new work strictly between `seq` and now, other than the entries in `chain`?
    /// This is what separates a test re-run after a distinct fix (progress) from a loop.
    pub fn novelty_between(&self, seq: u64, chain: &[u64]) -> bool {
        self.state
            .window
            .iter()
            .filter(|e| e.seq > seq && !chain.contains(&e.seq))
            .any(|e| e.novel)
    }

    /// Work events (not thoughts) strictly between two seqs, other than those in `chain`.
    fn work_between(&self, older: u64, newer: u64, chain: &[u64]) -> usize {
        self.state
            .window
            .iter()
            .filter(|e| e.seq > older && e.seq < newer && !chain.contains(&e.seq))
            .filter(|e| e.is_work() && !e.is_passive())
            .count()
    }

    /// The chain of matching earlier events, newest first: consecutive members may have at most
    /// `max_between` other work events between them (a repeat is near-consecutive; longer
    /// patterns are cycles), and there is no new work anywhere between the oldest member and now.
    pub fn repeat_chain<'l>(
        &self,
        matches: impl Iterator<Item = &'l Link>,
        max_between: Option<usize>,
    ) -> Vec<u64> {
        let mut chain: Vec<u64> = Vec::new();
        let mut newer = self.entry.seq;
        for l in matches {
            let mut with = chain.clone();
            with.push(l.seq);
            if self.cfg.repeats.new_work_breaks && self.novelty_between(l.seq, &with) {
                break;
            }
            if max_between.is_some_and(|m| self.work_between(l.seq, newer, &with) > m) {
                break;
            }
            chain.push(l.seq);
            newer = l.seq;
        }
        chain
    }
}

/// A tool call whose output says nothing of its own: an acknowledgement ("", "OK"), or only
/// the counters the task's environment prints whatever the call does (a token count and a
/// cost). Such a call repeated is no evidence the agent did the same thing again: what it said
/// between (a new response) is the work.
pub fn says_nothing(state: &TaskState, e: &Entry) -> bool {
    match &e.body {
        crate::state::EntryBody::ToolCall {
            result: Some(r), ..
        } => {
            r.trivial
                || (r.shape.plain == 0
                    && r.numbered
                        .as_ref()
                        .is_some_and(|n| n.lines.iter().all(|(t, _)| state.ambient.is_counter(*t))))
        }
        _ => false,
    }
}

/// Did the agent say something new strictly between two seqs: a response that repeats none
/// before it?
pub fn new_response_between(state: &TaskState, older: u64, newer: u64) -> bool {
    state.window.iter().any(|e| {
        e.seq > older
            && e.seq < newer
            && matches!(e.body, crate::state::EntryBody::Response { .. })
            && e.same_as.is_empty()
    })
}

/// Is a kind switched on?
pub fn enabled(cfg: &DetectConfig, kind: LoopKind) -> bool {
    let e = &cfg.enabled;
    match kind {
        LoopKind::None => true,
        LoopKind::ExactRepeat => e.exact_repeat,
        LoopKind::SemanticRepeat => e.semantic_repeat,
        LoopKind::Cycle => e.cycle,
        LoopKind::SameError => e.same_error,
        LoopKind::ResultRepeat => e.result_repeat,
        LoopKind::SimilarResponse => e.similar_response,
        LoopKind::ContentLoop => e.content_loop,
        LoopKind::CollaborationLoop => e.collaboration_loop,
        LoopKind::StepLimit => e.step_limit,
        LoopKind::TransitionCycle => e.transition_cycle,
        LoopKind::Regression => e.regression,
        LoopKind::Budget => e.budget,
    }
}

/// A near miss worth asking the judge about: the best grey-band link of the new event.
pub fn grey_candidate<'l>(ctx: &'l Ctx<'_>) -> Option<&'l Link> {
    ctx.links
        .iter()
        .filter(|l| !l.stale && !l.same)
        .filter(|l| l.text == Level::Grey || l.result == Some(Level::Grey) && l.text.is_match())
        .max_by(|a, b| {
            a.similarity()
                .unwrap_or(0.0)
                .total_cmp(&b.similarity().unwrap_or(0.0))
        })
}

/// For a verdict that is not a loop, the earlier event the new one came closest to repeating:
/// a live link that is the same event (no detector counted it), else the one whose call, message
/// or result reached the grey band or more, the strongest first. Two acknowledgements ("", "OK")
/// alike say nothing, so a result alone counts only when it is not trivial on both sides. This is
/// the near miss a reader of a missed loop looks for first.
pub fn nearest<'l>(state: &TaskState, entry: &Entry, links: &'l [Link]) -> Option<&'l Link> {
    let trivial = |e: &Entry| match &e.body {
        crate::state::EntryBody::ToolCall {
            result: Some(r), ..
        } => r.trivial,
        _ => false,
    };
    let result_counts = |l: &Link| {
        l.result.is_some_and(|r| r >= Level::Grey)
            && !(trivial(entry) && state.entry(l.seq).is_some_and(trivial))
    };
    let strength = |l: &Link| {
        let result = if result_counts(l) {
            l.result.unwrap_or(Level::None)
        } else {
            Level::None
        };
        (l.same, l.text.max(result))
    };
    links
        .iter()
        .filter(|l| !l.stale && (l.same || l.text >= Level::Grey || result_counts(l)))
        .max_by(|a, b| {
            strength(a).cmp(&strength(b)).then(
                a.similarity()
                    .unwrap_or(1.0)
                    .total_cmp(&b.similarity().unwrap_or(1.0)),
            )
        })
}

/// Format a cosine for reasons: two decimals.
pub fn fmt_cos(c: Option<f32>) -> String {
    c.map(|c| format!("{c:.2}")).unwrap_or_else(|| "-".into())
}
