//! Questions for the judge: cases the cheap signals cannot decide, each a rule of its own in the
//! table ([`super::rules::RULES`]), asked only when no loop rule fired and no progress vetoed one.
//! A question names what a "loop" answer would count as (its kind and the event it repeats); the
//! judge stage ([`crate::engine`]) asks it, or applies `judge.fallback` without a judge.
//! External failures are never a question: they are not the agent's doing.

use super::{dead_end, fmt_cos, grey_candidate, Ctx, Link};
use crate::state::{Channel, EntryBody};
use crate::verdict::LoopKind;

/// A question for the judge and the near miss it is about, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub text: String,
    pub candidate: Option<Link>,
    /// What the case counts as when the judge (or the fallback) says it is a loop, and the
    /// earlier event it repeats.
    pub kind: LoopKind,
    pub matched: Option<u64>,
    /// The rule that asks it (set by the table).
    pub rule: &'static str,
}

impl Question {
    fn new(text: String, kind: LoopKind, matched: Option<u64>) -> Question {
        Question {
            text,
            candidate: None,
            kind,
            matched,
            rule: "",
        }
    }
}

/// The candidate ended in the same error lines as this result (numbers and paths masked), or
/// either has no error lines to compare (a "nothing found").
fn same_dead_end(ctx: &Ctx<'_>, r: &crate::state::ResultSig, candidate: u64) -> bool {
    let earlier = match ctx.state.entry(candidate).map(|e| &e.body) {
        Some(EntryBody::ToolCall {
            result: Some(c), ..
        }) => c.outcome.as_ref(),
        _ => None,
    };
    match (&r.outcome, earlier) {
        (Some(a), Some(b)) => a.exact == b.exact,
        _ => true,
    }
}

/// A question about a dead end reached again, `earlier` its earlier events newest first: asked
/// only when no progress signal came since the first of them (with none, as when a setting asks
/// about the first timeout, it is asked).
fn dead_end_question(ctx: &Ctx<'_>, earlier: &[u64], text: String) -> Option<Question> {
    let oldest = earlier.last().copied().unwrap_or(u64::MAX);
    ctx.state
        .progress_since(oldest)
        .is_none()
        .then(|| Question::new(text, LoopKind::SameError, earlier.first().copied()))
}

/// Seqs for a question's text: "3, 5, 8".
fn seq_list<'a>(seqs: impl Iterator<Item = &'a u64>) -> String {
    seqs.map(u64::to_string).collect::<Vec<_>>().join(", ")
}

/// Rule `judge.grey_band`: the best match is just below the threshold, and a match would have
/// made a loop.
pub fn grey_band(ctx: &Ctx<'_>) -> Option<Question> {
    if ctx.external {
        return None;
    }
    let l = grey_candidate(ctx)?;
    // Only worth asking when a match would have made a loop: enough earlier events alike.
    let repeats = &ctx.cfg.repeats;
    let need = match ctx.entry.body.channel() {
        Channel::Failure => repeats.failure,
        Channel::Collaboration => repeats.collaboration,
        Channel::Response => repeats.response,
        Channel::ToolCall => repeats.tool_call,
        Channel::Other => usize::MAX,
    };
    let alike = 1 + ctx.same_links().count();
    // A tool call that brought something back (a file, matches, a passing run) is not worth a
    // question however close its wording: only dead ends are (measured: asking about every
    // grey-band call flagged 11 of the 178 healthy runs with a judge that always says "no
    // progress"). Nor is a dead end other than the candidate's: an error whose lines changed
    // (the next missing module after an install) has moved on, whatever the cosine of the
    // whole text (measured: the question flagged a healthy run installing module after module).
    let dead_end = match &ctx.entry.body {
        EntryBody::ToolCall {
            result: Some(r), ..
        } => (r.negative || r.outcome.is_some()) && same_dead_end(ctx, r, l.seq),
        EntryBody::ToolCall { result: None, .. } => false,
        EntryBody::Collaboration { .. } => super::collaboration::grey_would_loop(ctx, l.seq),
        _ => true,
    };
    if !(dead_end && alike >= need && ctx.state.progress_since(l.seq).is_none()) {
        return None;
    }
    Some(Question {
        candidate: Some(*l),
        ..Question::new(
            format!(
                "is this the same as seq {} (similarity {} is in the grey band below the threshold)?",
                l.seq,
                fmt_cos(l.similarity())
            ),
            LoopKind::SemanticRepeat,
            Some(l.seq),
        )
    })
}

/// Rule `judge.different_attempts`: different attempts, the same dead end — ruling options out,
/// or stuck? A judge reading the attempts can tell; the rules cannot.
pub fn different_attempts(ctx: &Ctx<'_>) -> Option<Question> {
    if ctx.external {
        return None;
    }
    let earlier = dead_end::different_attempts(ctx)?;
    let outcome = match &ctx.entry.body {
        EntryBody::ToolCall {
            result: Some(r), ..
        } => r
            .outcome
            .as_ref()
            .map(|o| o.text.clone())
            .unwrap_or_default(),
        _ => String::new(),
    };
    let text = format!(
        "{} different attempts in a row (this one and seqs {}) ended in the same error ({outcome}): is the agent ruling options out, or stuck?",
        earlier.len() + 1,
        seq_list(earlier.iter())
    );
    dead_end_question(ctx, &earlier, text)
}

/// Rule `judge.different_changes`: the same step ended in the same error again, with different
/// changes between its runs.
pub fn different_changes(ctx: &Ctx<'_>) -> Option<Question> {
    if ctx.external {
        return None;
    }
    let earlier = dead_end::different_changes(ctx)?;
    let text = format!(
        "the same step ended in the same error again (seqs {}, now), with different changes between: are the changes going anywhere?",
        seq_list(earlier.iter().rev())
    );
    dead_end_question(ctx, &earlier, text)
}

/// Rule `judge.redone_calls`: the very same calls as just before redone, their outputs barely
/// moved — a poll moving forward, or the same step redone for nothing?
pub fn redone_calls(ctx: &Ctx<'_>) -> Option<Question> {
    if ctx.external {
        return None;
    }
    let (p, earlier) = super::cycle::redone(
        ctx,
        ctx.cfg.cycles.max_period,
        ctx.judge.redone_result_overlap,
    )?;
    if ctx.state.progress_since(earlier[0]).is_some() {
        return None;
    }
    let seqs = seq_list(earlier.iter());
    let (what, kind) = if p == 1 {
        (
            format!("the same call as seq {seqs}"),
            LoopKind::SemanticRepeat,
        )
    } else {
        (
            format!("the same {p} calls as seqs {seqs}"),
            LoopKind::Cycle,
        )
    };
    Some(Question::new(
        format!(
            "{what} again, and the output changed only a little: a poll moving forward, or the same step redone for nothing?"
        ),
        kind,
        earlier.first().copied(),
    ))
}

/// Rule `judge.timeouts`: calls timing out again within the dead-end window, whatever was
/// between.
pub fn timeouts(ctx: &Ctx<'_>) -> Option<Question> {
    if ctx.external {
        return None;
    }
    let earlier = dead_end::timeouts(ctx, ctx.judge.ask_after_timeouts)?;
    let text = format!(
        "{} calls timed out within the last {} actions (seqs {}, now): is the agent relaunching something that blocks, or narrowing the cause down?",
        earlier.len() + 1,
        ctx.cfg.dead_ends.span_window,
        seq_list(earlier.iter().rev())
    );
    dead_end_question(ctx, &earlier, text)
}

/// Rule `judge.failures_in_a_row`: one failure too many in a row with no objective progress
/// signal (seed 000's "the orchestrator evaluates goal proximity").
pub fn failures_in_a_row(ctx: &Ctx<'_>) -> Option<Question> {
    if ctx.external {
        return None;
    }
    let n = ctx.judge.ask_after_failures;
    let failures = ctx.state.failures_since_progress + 1;
    let asked = n > 0
        && matches!(ctx.entry.body, EntryBody::Failure { .. })
        && failures >= n
        && ctx.metrics.is_none()
        && ctx.state.metrics.is_empty();
    asked.then(|| {
        Question::new(
            format!(
                "{failures} failures in a row with no objective progress signal: is the agent moving toward the goal?"
            ),
            LoopKind::Regression,
            None,
        )
    })
}
