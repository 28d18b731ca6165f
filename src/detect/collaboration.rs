//! `collaboration_loop`: agents handing work to each other (a planner and a worker, a reviewer and
//! a programmer) and going round in circles.
//!
//! A collaboration message is a *request* (prose, perhaps quoting a snippet) or a *delivery* (it
//! names the files it carries, whose identity is a hash of their whole content:
//! [`crate::signature::artifact`]). Two messages are the same when their prose matches (exactly,
//! normalised or by cosine) and they name the same artifacts at the same versions; a short
//! closing or confirming turn ("Finished.", "OK") is a protocol turn and matches nothing. Three
//! rules:
//!
//! - `collaboration.same_request`: A asks B what it asked before, reworded or not, and nothing
//!   reached A in between — the request re-sent unanswered (seed 000: the second time is a loop,
//!   `repeats.collaboration`).
//! - `collaboration.unchanged_artifact`: a request that was answered comes back for the
//!   `collaboration.occurrences`-th time, and at least once it came back with no artifact changed
//!   since it was last made — a reviewer repeating one comment while the programmer re-sends the
//!   program unchanged. A request raised twice, or raised again after each real change, is a
//!   review going on.
//! - `collaboration.resent_artifact`: A delivers B the same artifacts, every one unchanged, for
//!   the `collaboration.occurrences`-th time with nothing reaching A in between.

use super::repeat::{how, strongest};
use super::{fmt_cos, Ctx, Finding, Link};
use crate::signature::artifact::ChangeKind;
use crate::state::{EntryBody, TaskState, TextSig};
use crate::verdict::LoopKind;

/// The parts of a collaboration message the rules read.
struct Message<'a> {
    from: &'a str,
    to: &'a str,
    sig: &'a TextSig,
    protocol: bool,
}

fn message(body: &EntryBody) -> Option<Message<'_>> {
    match body {
        EntryBody::Collaboration {
            from_agent,
            to_agent,
            sig,
            protocol,
            ..
        } => Some(Message {
            from: from_agent,
            to: to_agent,
            sig,
            protocol: *protocol,
        }),
        _ => None,
    }
}

/// A delivery names the artifacts it carries (their identities are the text's `ids`).
fn is_delivery(sig: &TextSig) -> bool {
    !sig.ids.is_empty()
}

/// Did a collaboration message reach `agent` strictly between two seqs (an answer, or news from
/// anyone)?
fn heard(state: &TaskState, agent: &str, older: u64, newer: u64) -> bool {
    state
        .window
        .iter()
        .filter(|e| e.seq > older && e.seq < newer)
        .filter_map(|e| message(&e.body))
        .any(|m| m.to == agent)
}

/// Did `agent` deliver anything new strictly between two seqs: an artifact not seen before, or a
/// new version of one (going back to an earlier version is not new)?
fn delivered(state: &TaskState, agent: &str, older: u64, newer: u64) -> bool {
    state
        .window
        .iter()
        .filter(|e| e.seq > older && e.seq < newer)
        .any(|e| match &e.body {
            EntryBody::Collaboration {
                from_agent,
                artifacts,
                ..
            } => {
                from_agent == agent
                    && artifacts
                        .iter()
                        .any(|a| matches!(a.change, ChangeKind::New | ChangeKind::Changed))
            }
            _ => false,
        })
}

/// Would a match with `candidate`, a near match in the grey band, make a loop? Only as a request
/// re-sent unanswered (`collaboration.same_request`): a delivery is the same as another by its
/// artifacts, whatever its prose, and a request answered in between comes back as itself at
/// `returning_similarity`, below the grey band. (The judge's grey-band question.)
pub fn grey_would_loop(ctx: &Ctx<'_>, candidate: u64) -> bool {
    message(&ctx.entry.body).is_some_and(|m| {
        !m.protocol && !is_delivery(m.sig) && !heard(ctx.state, m.from, candidate, ctx.entry.seq)
    })
}

/// Rule `collaboration.same_request`.
pub fn detect(ctx: &Ctx<'_>) -> Option<Finding> {
    let m = message(&ctx.entry.body)?;
    if m.protocol || is_delivery(m.sig) {
        return None;
    }
    // The unanswered run: earlier occurrences, newest first, with nothing reaching A between.
    let mut chain: Vec<&Link> = Vec::new();
    let mut newer = ctx.entry.seq;
    for l in ctx.same_links() {
        if heard(ctx.state, m.from, l.seq, newer) {
            break;
        }
        chain.push(l);
        newer = l.seq;
    }
    if chain.len() < ctx.cfg.repeats.collaboration {
        return None;
    }
    let best = strongest(chain.iter().copied())?;
    let mut f = Finding::new(
        LoopKind::CollaborationLoop,
        format!(
            "{} asked {} the same thing as at seq {}, {}, with no answer between; {} earlier request(s) alike",
            m.from,
            m.to,
            best.seq,
            how(best, ctx.cfg.similarity.collaboration),
            chain.len()
        ),
    );
    f.matched = Some(best.seq);
    f.similarity = best.similarity();
    Some(f)
}

/// Rule `collaboration.unchanged_artifact`.
pub fn unchanged_artifact(ctx: &Ctx<'_>) -> Option<Finding> {
    let m = message(&ctx.entry.body)?;
    if m.protocol || is_delivery(m.sig) {
        return None;
    }
    let cfg = &ctx.cfg.collaboration;
    // Earlier occurrences, newest first: the same request, or one close enough to be it
    // reworded now that it keeps coming back.
    let back: Vec<&Link> = ctx
        .links
        .iter()
        .rev()
        .filter(|l| !l.stale)
        .filter(|l| l.same || l.cos.is_some_and(|c| c >= cfg.returning_similarity))
        .collect();
    if back.len() + 1 < cfg.occurrences.max(2) {
        return None;
    }
    let mut seqs: Vec<u64> = back.iter().rev().map(|l| l.seq).collect();
    seqs.push(ctx.entry.seq);
    // A review round: every return was answered. A request that came back with nothing
    // reaching its sender between is re-sent unanswered, `same_request`'s case at its own
    // (higher) threshold; the lower cosine here rests on the rounds.
    if !seqs
        .windows(2)
        .all(|w| heard(ctx.state, m.from, w[0], w[1]))
    {
        return None;
    }
    // A return with nothing new delivered by the agent asked since the occurrence before it:
    // that answer changed nothing the request asked for.
    let idle = seqs
        .windows(2)
        .find(|w| !delivered(ctx.state, m.to, w[0], w[1]))?;
    let newest = back[0];
    let listed: Vec<String> = seqs[..seqs.len() - 1].iter().map(u64::to_string).collect();
    let mut f = Finding::new(
        LoopKind::CollaborationLoop,
        format!(
            "{} asked {} the same thing a {} time (before: seq {}; closest {}, cosine {}), answered each time; it came back at seq {} with nothing new from {} since seq {}",
            m.from,
            m.to,
            ordinal(seqs.len()),
            listed.join(", "),
            newest.seq,
            fmt_cos(newest.similarity()),
            idle[1],
            m.to,
            idle[0]
        ),
    );
    f.matched = Some(newest.seq);
    f.similarity = newest.similarity();
    Some(f)
}

/// Rule `collaboration.resent_artifact`.
pub fn resent_artifact(ctx: &Ctx<'_>) -> Option<Finding> {
    let m = message(&ctx.entry.body)?;
    if m.protocol || !is_delivery(m.sig) {
        return None;
    }
    // The same delivery, A to B, newest first, with nothing between but more of it.
    let mut chain: Vec<u64> = Vec::new();
    let mut newer = ctx.entry.seq;
    for e in ctx.state.window.iter().rev() {
        let Some(o) = message(&e.body) else {
            continue;
        };
        if o.from != m.from || o.to != m.to || o.protocol {
            continue;
        }
        let live = ctx.link(e.seq).is_some_and(|l| !l.stale);
        if o.sig.ids != m.sig.ids || !live || heard(ctx.state, m.from, e.seq, newer) {
            break;
        }
        chain.push(e.seq);
        newer = e.seq;
    }
    if chain.len() + 1 < ctx.cfg.collaboration.occurrences.max(2) {
        return None;
    }
    let files: Vec<&str> = m
        .sig
        .ids
        .iter()
        .map(|id| id.rsplit_once('#').map_or(id.as_str(), |(name, _)| name))
        .collect();
    let mut f = Finding::new(
        LoopKind::CollaborationLoop,
        format!(
            "{} sent {} {} unchanged a {} time (before: seq {}) with no answer between",
            m.from,
            m.to,
            files.join(", "),
            ordinal(chain.len() + 1),
            chain
                .iter()
                .rev()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    f.matched = chain.first().copied();
    Some(f)
}

fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::{detect, resent_artifact, unchanged_artifact};
    use crate::detect::testkit::Scene;
    use crate::verdict::LoopKind;
    use serde_json::json;

    fn ask(from: &str, to: &str, request: &str) -> serde_json::Value {
        json!({"type": "collaboration", "from_agent": from, "to_agent": to, "request": request})
    }

    fn program(extra: &str) -> String {
        format!("main.py\n```python\nimport tkinter as tk\n\nclass Game:\n    def update(self):\n        self.move()\n{extra}        self.draw()\n```\n")
    }

    const COMMENT: &str =
        "The update method never calls create_pipe, so no pipes appear on the screen.";

    #[test]
    fn the_same_request_to_the_same_agent_is_a_loop_but_not_to_another() {
        let mut s = Scene::new();
        assert!(s
            .detect(detect, ask("dev", "qa", "Please review the login page"))
            .is_none());
        assert!(s
            .detect(
                detect,
                ask("dev", "qa_lead", "Please review the login page")
            )
            .is_none());
        let f = s
            .detect(detect, ask("dev", "qa", "Please review the login page"))
            .expect("asked qa again");
        assert_eq!(f.kind, LoopKind::CollaborationLoop);
        assert_eq!(f.matched, Some(1));
    }

    #[test]
    fn a_request_answered_in_between_is_not_re_sent_unanswered() {
        let mut s = Scene::new();
        s.push(ask("reviewer", "programmer", COMMENT));
        s.push(ask("programmer", "reviewer", &program("")));
        assert!(s
            .detect(detect, ask("reviewer", "programmer", COMMENT))
            .is_none());
    }

    #[test]
    fn a_comment_answered_with_an_unchanged_program_is_a_loop_the_third_time() {
        let mut s = Scene::new();
        s.push(ask("programmer", "reviewer", &program("")));
        s.push(ask("reviewer", "programmer", COMMENT));
        s.push(ask("programmer", "reviewer", &program("")));
        assert!(s
            .detect(unchanged_artifact, ask("reviewer", "programmer", COMMENT))
            .is_none());
        s.push(ask("programmer", "reviewer", &program("")));
        let f = s
            .detect(unchanged_artifact, ask("reviewer", "programmer", COMMENT))
            .expect("the third time, the program unchanged");
        assert_eq!(f.matched, Some(4));
        assert!(
            f.reason.contains("nothing new from programmer"),
            "{}",
            f.reason
        );
    }

    #[test]
    fn a_comment_coming_back_after_each_real_change_is_a_review_going_on() {
        let mut s = Scene::new();
        s.push(ask("programmer", "reviewer", &program("")));
        for i in 0..3 {
            assert!(s
                .detect(unchanged_artifact, ask("reviewer", "programmer", COMMENT))
                .is_none());
            s.push(ask(
                "programmer",
                "reviewer",
                &program(&format!("        self.step_{i}()\n")),
            ));
        }
    }

    #[test]
    fn a_delivery_re_sent_unanswered_is_a_loop_the_third_time() {
        let mut s = Scene::new();
        let note = |n: &str| format!("{}\nPlease note: {n}", program(""));
        assert!(s
            .detect(
                resent_artifact,
                ask("programmer", "cto", &note("placeholders remain"))
            )
            .is_none());
        assert!(s
            .detect(
                resent_artifact,
                ask("programmer", "cto", &note("a basic version"))
            )
            .is_none());
        let f = s
            .detect(
                resent_artifact,
                ask("programmer", "cto", &note("Action is missing")),
            )
            .expect("the same files a third time");
        assert!(
            f.reason.contains("main.py unchanged a 3rd time"),
            "{}",
            f.reason
        );
        // A changed file, or an answer between, starts over.
        assert!(s
            .detect(
                resent_artifact,
                ask("programmer", "cto", &program("        self.x()\n"))
            )
            .is_none());
    }

    #[test]
    fn protocol_turns_never_match() {
        let mut s = Scene::new();
        for _ in 0..4 {
            let p = s.probe(ask("programmer", "reviewer", "<INFO> Finished."));
            assert!(p.links.is_empty(), "{:?}", p.links);
            assert!(!p.entry.novel);
            s.push(ask("programmer", "reviewer", "<INFO> Finished."));
        }
    }
}
