//! `exact_repeat` / `semantic_repeat`: the same failure or the same tool call (with the same
//! result) again.
//!
//! - Failures: any earlier match in the window is a loop, exact or reworded; progress
//!   since the match cancels it.
//! - Tool calls: `detect.repeats.tool_call` earlier matches are needed, and they
//!   must form a chain with no new work between them. A test re-run after each *distinct* fix
//!   (new work in between) or a poll whose output moves (a different result) is not a loop; the
//!   same call with the same result and nothing new in between is.

use super::{fmt_cos, Ctx, Finding, Link};
use crate::state::{Channel, Entry, EntryBody};
use crate::verdict::LoopKind;

/// The link to report: exact before reworded, then the highest cosine, then the newest.
pub fn strongest<'l>(links: impl Iterator<Item = &'l Link>) -> Option<&'l Link> {
    links.max_by(|a, b| {
        (a.exact(), a.similarity().unwrap_or(1.0), a.seq)
            .partial_cmp(&(b.exact(), b.similarity().unwrap_or(1.0), b.seq))
            .unwrap_or(std::cmp::Ordering::Equal)
    })
}

fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// Describe a match for a reason string, without quoting either text.
pub fn how(link: &Link, threshold: f32) -> String {
    if link.exact() && link.text == super::Level::Exact {
        "exact match".to_string()
    } else if link.exact() {
        "the same after normalisation".to_string()
    } else {
        format!(
            "reworded (cosine {} ≥ {:.2})",
            fmt_cos(link.similarity()),
            threshold
        )
    }
}

fn kind_of(link: &Link) -> LoopKind {
    if link.exact() {
        LoopKind::ExactRepeat
    } else {
        LoopKind::SemanticRepeat
    }
}

/// Rule `repeat.piled_up`: the very same call run again right after the last, its output only
/// more copies of lines it printed then — the call's effect piled up (an edit applied twice
/// shows the lines it inserts twice; an append re-run shows its line twice). A poll moving
/// forward prints lines it had not printed; a re-read of something unchanged prints the same
/// (the repeat rule's case); neither is this.
pub fn piled_up(ctx: &Ctx<'_>) -> Option<Finding> {
    let ran = |e: &Entry| match &e.body {
        EntryBody::ToolCall {
            call,
            result: Some(r),
            passive: false,
            ..
        } if !r.failed => Some((call.exact, r.shape)),
        _ => None,
    };
    let (call, now) = ran(ctx.entry)?;
    let before = ctx.past.first()?;
    let (earlier_call, then) = ran(before)?;
    if earlier_call != call || !now.piled_on(&then) {
        return None;
    }
    let mut f = Finding::new(
        LoopKind::ExactRepeat,
        format!(
            "the same call as seq {} again, right after it, and its output only gained copies of lines it printed then ({} lines, {} before): its effect piled up",
            before.seq, now.lines, then.lines
        ),
    );
    f.matched = Some(before.seq);
    Some(f)
}

/// Rule `repeat.failure`: a failure matches `repeats.failure` earlier ones (seed 000).
pub fn failure(ctx: &Ctx<'_>) -> Option<Finding> {
    let cfg = ctx.cfg;
    if ctx.entry.body.channel() != Channel::Failure {
        return None;
    }
    let matches: Vec<&Link> = ctx.same_links().collect();
    if matches.len() < cfg.repeats.failure {
        return None;
    }
    let best = strongest(matches.iter().copied())?;
    let mut f = Finding::new(
        kind_of(best),
        format!(
            "same failure as seq {}, {}; seen {} time(s) before",
            best.seq,
            how(best, cfg.similarity.failure),
            matches.len()
        ),
    );
    f.matched = Some(best.seq);
    f.similarity = best.similarity();
    Some(f)
}

/// Rule `repeat.tool_call`: a tool call and its result match `repeats.tool_call` earlier ones,
/// near-consecutive, with no new work between (seeds 001, 002).
pub fn tool_call(ctx: &Ctx<'_>) -> Option<Finding> {
    let cfg = ctx.cfg;
    if ctx.entry.body.channel() != Channel::ToolCall {
        return None;
    }
    let chain = ctx.repeat_chain(ctx.same_links(), Some(cfg.repeats.max_between));
    if chain.len() < cfg.repeats.tool_call {
        return None;
    }
    // A call whose output says nothing of its own, repeated while the agent says new things:
    // the responses are the work.
    if super::says_nothing(ctx.state, ctx.entry)
        && chain
            .iter()
            .min()
            .is_some_and(|oldest| super::new_response_between(ctx.state, *oldest, ctx.entry.seq))
    {
        return None;
    }
    let best = strongest(chain.iter().filter_map(|s| ctx.link(*s)))?;
    let with_result = best.result.is_some();
    let mut f = Finding::new(
        kind_of(best),
        format!(
            "same tool call{} as seq {}, {}; the {} time with no new work in between",
            if with_result { " and result" } else { "" },
            best.seq,
            how(best, cfg.similarity.tool_call),
            ordinal(chain.len() + 1)
        ),
    );
    f.matched = Some(best.seq);
    f.similarity = best.similarity();
    Some(f)
}

#[cfg(test)]
mod tests {
    use crate::detect::{Ctx, Finding};

    fn detect(ctx: &Ctx<'_>) -> Option<Finding> {
        super::failure(ctx).or_else(|| super::tool_call(ctx))
    }
    use crate::detect::testkit::{bash, failure, Scene};
    use crate::verdict::LoopKind;

    #[test]
    fn a_failure_seen_before_is_a_loop_and_says_how_it_matched() {
        let mut s = Scene::new();
        assert!(s
            .detect(detect, failure("TypeError: x is undefined at 10:00:00"))
            .is_none());
        let f = s
            .detect(detect, failure("TypeError: x is undefined at 11:30:05"))
            .expect("the same failure at a new time");
        assert_eq!(f.kind, LoopKind::ExactRepeat);
        assert_eq!(f.matched, Some(1));
        assert!(
            f.reason.contains("the same after normalisation"),
            "{}",
            f.reason
        );
    }

    #[test]
    fn a_tool_call_needs_its_result_to_repeat_too_and_counts_on_the_third() {
        let mut s = Scene::new();
        assert!(s.detect(detect, bash("pytest -x", "1 failed")).is_none());
        assert!(s.detect(detect, bash("pytest -x", "1 failed")).is_none());
        let f = s
            .detect(detect, bash("pytest -x", "1 failed"))
            .expect("third time");
        assert_eq!(f.kind, LoopKind::ExactRepeat);
        assert!(f.reason.contains("the 3rd time"), "{}", f.reason);
        // The same call with another result is a poll that moved, not a repeat.
        let mut s = Scene::new();
        for out in ["building 10%", "building 20%", "building 30%"] {
            assert!(s.detect(detect, bash("tail build.log", out)).is_none());
        }
    }

    #[test]
    fn new_work_in_between_breaks_the_chain() {
        let mut s = Scene::new();
        s.push(bash("pytest -x", "1 failed"));
        s.push(bash("sed -i s/a/b/ app.py", ""));
        s.push(bash("pytest -x", "1 failed"));
        s.push(bash("sed -i s/c/d/ app.py", ""));
        assert!(
            s.detect(detect, bash("pytest -x", "1 failed")).is_none(),
            "a test re-run after each distinct fix is not a loop"
        );
    }
}
