//! `same_error` and `result_repeat` (the same error with varying
//! actions"): calls, varied, that end in the same error or in the same "nothing found".
//! Results that carry information (a file's content, a list of matches) never count here: only
//! errors and empty findings, which bring no progress however the call was varied.

use super::repeat::strongest;
use super::{fmt_cos, Ctx, Finding, Link};
use crate::state::EntryBody;
use crate::verdict::LoopKind;

fn negative_result(ctx: &Ctx<'_>, seq: u64) -> bool {
    matches!(
        ctx.state.entry(seq).map(|e| &e.body),
        Some(EntryBody::ToolCall { result: Some(r), .. }) if r.negative && !r.trivial
    )
}

pub fn detect(ctx: &Ctx<'_>) -> Option<Finding> {
    let EntryBody::ToolCall {
        result: Some(result),
        ..
    } = &ctx.entry.body
    else {
        return None;
    };
    if !result.negative || result.trivial {
        return None;
    }
    // Calls may be anything from identical to unrelated: identical ones alone are the repeat
    // detector's (it runs first); here the varied attempts count together.
    let matches = ctx.links.iter().rev().filter(|l| {
        !l.stale && l.result.is_some_and(|r| r.is_match()) && negative_result(ctx, l.seq)
    });
    let chain = ctx.repeat_chain(matches, Some(ctx.cfg.repeats.max_between));
    if chain.len() < ctx.cfg.repeats.negative_result {
        return None;
    }
    let best: &Link = strongest(chain.iter().filter_map(|s| ctx.link(*s)))?;
    let (kind, what) = if result.failed {
        (LoopKind::SameError, "the same error")
    } else {
        (LoopKind::ResultRepeat, "the same empty result")
    };
    let sim = best
        .cos_result
        .map(|_| format!("cosine {}", fmt_cos(best.cos_result)))
        .unwrap_or_else(|| "exact match".into());
    let mut f = Finding::new(
        kind,
        format!(
            "{} calls in a row, varied, ended in {what} as seq {} ({sim})",
            chain.len() + 1,
            best.seq
        ),
    );
    f.matched = Some(best.seq);
    f.similarity = best.cos_result;
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::detect;
    use crate::detect::testkit::{bash, bash_err, Scene};
    use crate::verdict::LoopKind;

    #[test]
    fn varied_calls_ending_in_the_same_error_are_a_loop() {
        let mut s = Scene::new();
        let err = "ModuleNotFoundError: No module named 'foo'";
        assert!(s.detect(detect, bash_err("python run.py", err)).is_none());
        assert!(s
            .detect(detect, bash_err("python3 run.py --fast", err))
            .is_none());
        let f = s
            .detect(detect, bash_err("python -m run", err))
            .expect("third varied call, same error");
        assert_eq!(f.kind, LoopKind::SameError);
    }

    #[test]
    fn results_that_carry_information_never_count() {
        let mut s = Scene::new();
        for cmd in ["cat a.py", "cat b.py", "cat c.py"] {
            assert!(s
                .detect(detect, bash(cmd, "def f():\n    return 1"))
                .is_none());
        }
    }

    #[test]
    fn nothing_found_again_and_again_is_a_result_repeat() {
        let mut s = Scene::new();
        let none = "No matches found for \"parse_config\"";
        s.push(bash("grep -r parse_config src", none));
        s.push(bash("grep -rn parse_config src/", none));
        let f = s
            .detect(detect, bash("grep -rni parse_config src", none))
            .expect("the same empty result");
        assert_eq!(f.kind, LoopKind::ResultRepeat);
    }
}
