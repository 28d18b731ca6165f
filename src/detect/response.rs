//! `similar_response` and identical responses (the SHA-256 of the trimmed
//! text, reported as `exact_repeat`): an LLM turn that says what one of the last
//! `detect.responses.window` turns said, `detect.repeats.response` times with no new work between.

use super::repeat::{how, strongest};
use super::{Ctx, Finding, Link};
use crate::state::{Channel, EntryBody};
use crate::verdict::LoopKind;

pub fn detect(ctx: &Ctx<'_>) -> Option<Finding> {
    if ctx.entry.body.channel() != Channel::Response {
        return None;
    }
    let cfg = ctx.cfg;
    // Only the most recent responses are compared (a window of 3 by default).
    let recent: Vec<u64> = ctx
        .state
        .window
        .iter()
        .rev()
        .filter(|e| matches!(e.body, EntryBody::Response { .. }))
        .take(cfg.responses.window)
        .map(|e| e.seq)
        .collect();
    let matches = ctx.same_links().filter(|l| recent.contains(&l.seq));
    let chain = ctx.repeat_chain(matches, None);
    if chain.len() < cfg.repeats.response {
        return None;
    }
    let best: &Link = strongest(chain.iter().filter_map(|s| ctx.link(*s)))?;
    let (kind, what) = if best.exact() {
        (LoopKind::ExactRepeat, "identical response")
    } else {
        (LoopKind::SimilarResponse, "similar response")
    };
    let mut f = Finding::new(
        kind,
        format!(
            "{what} to seq {}, {}; {} of the last {} responses say the same",
            best.seq,
            how(best, cfg.similarity.response),
            chain.len(),
            cfg.responses.window
        ),
    );
    f.matched = Some(best.seq);
    f.similarity = best.similarity();
    Some(f)
}

/// Characters a response needs before saying it again word for word is a replay: short ones
/// ("Done.", "Understood, waiting for your instructions.") are said again for good reasons.
const REPLAY_MIN_CHARS: usize = 200;

/// Rule `response.replayed`: an earlier exchange replayed word for word, later in the task — a
/// long response identical to an earlier one, right after an event identical to the one right
/// before it (the same output), with other events between the two. An agent that answers by
/// redoing what it did before, to the letter, has not moved. What came before must be the
/// agent's or its tools': a request asked again and answered the same way is
/// `collaboration.same_answer`'s, which asks whether anything moved in between.
pub fn replayed(ctx: &Ctx<'_>) -> Option<Finding> {
    let EntryBody::Response { sig, .. } = &ctx.entry.body else {
        return None;
    };
    if sig.text.chars().count() < REPLAY_MIN_CHARS {
        return None;
    }
    let window = &ctx.state.window;
    let before = window.back()?;
    if matches!(before.body, EntryBody::Collaboration { .. }) {
        return None;
    }
    for l in ctx.links.iter().rev() {
        if l.stale || !l.same || !l.exact() {
            continue;
        }
        let Some(i) = window.iter().position(|w| w.seq == l.seq) else {
            continue;
        };
        let Some(then) = i.checked_sub(1).map(|j| &window[j]) else {
            continue;
        };
        // Other events between: a response said again at once is `response.repeat`'s.
        if before.seq <= l.seq + 1 || !before.is_same_as(then.seq) {
            continue;
        }
        let mut f = Finding::new(
            LoopKind::ExactRepeat,
            format!(
                "seq {} and {} replay seq {} and {} word for word, after {} other event(s)",
                before.seq,
                ctx.entry.seq,
                then.seq,
                l.seq,
                before.seq - l.seq - 1
            ),
        );
        f.matched = Some(l.seq);
        f.similarity = l.similarity();
        return Some(f);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::detect;
    use crate::detect::testkit::{bash, response, Scene};
    use crate::verdict::LoopKind;

    #[test]
    fn the_same_response_again_is_a_loop_and_identical_text_is_exact() {
        let mut s = Scene::with(|c| c.detect.repeats.response = 1);
        s.push(response("I will now fix the parser."));
        let f = s
            .detect(detect, response("I will now fix the parser."))
            .expect("identical");
        assert_eq!(f.kind, LoopKind::ExactRepeat);
    }

    #[test]
    fn new_work_between_responses_breaks_them_apart() {
        let mut s = Scene::with(|c| c.detect.repeats.response = 1);
        s.push(response("Let me look at the parser."));
        s.push(bash("cat parser.py", "def parse(): ..."));
        assert!(s
            .detect(detect, response("Let me look at the parser."))
            .is_none());
    }
}
