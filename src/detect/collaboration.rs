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
use crate::config::DetectConfig;
use crate::signature::artifact::ChangeKind;
use crate::state::{Entry, EntryBody, TaskState, TextSig};
use crate::verdict::LoopKind;

/// The parts of a collaboration message the rules read.
struct Message<'a> {
    from: &'a str,
    to: &'a str,
    to_group: bool,
    sig: &'a TextSig,
    protocol: bool,
}

fn message(body: &EntryBody) -> Option<Message<'_>> {
    match body {
        EntryBody::Collaboration {
            from_agent,
            to_agent,
            to_group,
            sig,
            protocol,
            ..
        } => Some(Message {
            from: from_agent,
            to: to_agent,
            to_group: *to_group,
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

/// Who a request is from and to, and how the task's events answer it.
///
/// A message to a group (a chat manager relaying to every member) reaches every member, so
/// another member's message answers it. A group is named so by the message (`to_group`), or
/// inferred: an addressee that two or more agents write to and that never writes itself. And
/// whatever happens after a request that its sender did not do — a message to the sender, one
/// from the addressee, a call, a failure or a response by anyone else (an event with no agent is
/// the addressee's: when a user writes to an agent, its responses and tool calls are its answer)
/// — answers it.
struct Request<'a> {
    from: &'a str,
    to: &'a str,
    group: bool,
}

impl<'a> Request<'a> {
    fn of(state: &TaskState, m: &Message<'a>) -> Request<'a> {
        Request {
            from: m.from,
            to: m.to,
            group: m.to_group || is_group(state, m.to),
        }
    }

    /// Does `e` (done after the request) answer it?
    fn answers(&self, e: &Entry) -> bool {
        match message(&e.body) {
            Some(m) => {
                m.from != self.from
                    && (m.to == self.from || m.from == self.to || self.group && m.to == self.to)
            }
            None => {
                matches!(
                    e.body,
                    EntryBody::ToolCall { .. }
                        | EntryBody::Failure { .. }
                        | EntryBody::Response { .. }
                ) && e.agent_id.as_deref() != Some(self.from)
            }
        }
    }

    /// Is a message from `sender` one the addressee sends: from B, or, for a group, from any
    /// member but the asker?
    fn sent_by_addressee(&self, sender: &str) -> bool {
        sender == self.to || (self.group && sender != self.from)
    }

    /// Did the addressee deliver anything new strictly between two seqs: an artifact not seen
    /// before, or a new version of one (going back to an earlier version is not new)?
    fn delivered(&self, state: &TaskState, older: u64, newer: u64) -> bool {
        between(state, older, newer).any(|e| match &e.body {
            EntryBody::Collaboration {
                from_agent,
                artifacts,
                ..
            } => {
                self.sent_by_addressee(from_agent)
                    && artifacts
                        .iter()
                        .any(|a| matches!(a.change, ChangeKind::New | ChangeKind::Changed))
            }
            _ => false,
        })
    }

    /// Was it answered strictly between two seqs?
    fn answered(&self, state: &TaskState, older: u64, newer: u64) -> bool {
        between(state, older, newer).any(|e| self.answers(e))
    }

    /// Did the answers strictly between two seqs bring anything new: an artifact not seen
    /// before or a new version of one, or work, a message or a response that repeats nothing
    /// earlier (a failure outside the agent's control, and anything the sender did, aside)? A
    /// request that comes back after answers that brought nothing new is asked again because
    /// nothing moved.
    fn moved(&self, state: &TaskState, older: u64, newer: u64, returning: f32) -> bool {
        between(state, older, newer)
            .filter(|e| author(e) != Some(self.from))
            .any(|e| brought_news(state, e, returning))
    }
}

fn between(state: &TaskState, older: u64, newer: u64) -> impl Iterator<Item = &Entry> {
    state
        .window
        .iter()
        .filter(move |e| e.seq > older && e.seq < newer)
}

/// For a work pattern that repeats (a cycle): did the answer to the request at `newer` (a
/// message), since its counterpart at `older`, bring anything new? A person or an agent repeating
/// a request answered with news each time is following the work, not circling.
pub fn answered_with_news(
    cfg: &DetectConfig,
    state: &TaskState,
    newer: &Entry,
    older: u64,
) -> bool {
    message(&newer.body).is_some_and(|m| {
        let r = Request::of(state, &m);
        r.moved(
            state,
            older,
            newer.seq,
            cfg.collaboration.returning_similarity,
        )
    })
}

/// Who did an event: a message's sender, else the envelope's agent (none for a bare event).
fn author(e: &Entry) -> Option<&str> {
    match &e.body {
        EntryBody::Collaboration { from_agent, .. } => Some(from_agent),
        _ => e.agent_id.as_deref(),
    }
}

/// Is `name` a group in this task: a message to it said so, or two or more agents write to it
/// and it never writes itself.
fn is_group(state: &TaskState, name: &str) -> bool {
    let mut senders: Vec<&str> = Vec::new();
    for m in state.window.iter().filter_map(|e| message(&e.body)) {
        if m.to == name && m.to_group {
            return true;
        }
        if m.from == name {
            return false;
        }
        if m.to == name && !senders.contains(&m.from) {
            senders.push(m.from);
        }
    }
    senders.len() >= 2
}

/// Did an event bring anything new (see [`Request::moved`])? An event the identity links found
/// the same as an earlier one did not; nor did a short protocol turn said before in the same
/// words ("OK", "Too high."; said for the first time, "62" is a move), nor a call that failed
/// with the error lines an earlier call ended in (it learned nothing the task did not know),
/// nor a response as close to an earlier one as a returning request is to itself (`returning`):
/// the same reply reworded, to a request that came back, is no answer to it.
fn brought_news(state: &TaskState, e: &Entry, returning: f32) -> bool {
    let fresh = e.same_as.is_empty();
    match &e.body {
        EntryBody::Collaboration {
            from_agent,
            sig,
            artifacts,
            protocol,
            ..
        } => {
            if artifacts
                .iter()
                .any(|a| matches!(a.change, ChangeKind::New | ChangeKind::Changed))
            {
                return true;
            }
            if *protocol {
                return !state.window.iter().take_while(|w| w.seq < e.seq).any(|w| {
                    matches!(&w.body, EntryBody::Collaboration { from_agent: f, sig: s, .. }
                        if f == from_agent && s.norm == sig.norm)
                });
            }
            fresh && artifacts.is_empty()
        }
        EntryBody::ToolCall {
            passive, result, ..
        } => {
            if *passive || !fresh {
                return false;
            }
            match result {
                Some(r) if r.external => false,
                Some(r) => r.outcome.as_ref().is_none_or(|o| {
                    !state.window.iter().take_while(|w| w.seq < e.seq).any(|w| {
                        matches!(&w.body, EntryBody::ToolCall { result: Some(wr), .. }
                            if wr.outcome.as_ref().is_some_and(|wo| wo.exact == o.exact))
                    })
                }),
                None => true,
            }
        }
        EntryBody::Failure { external, .. } => fresh && !external,
        EntryBody::Response { .. } => fresh && e.closest_earlier.is_none_or(|c| c < returning),
        EntryBody::Progress { .. } => true,
        _ => false,
    }
}

/// Would a match with `candidate`, a near match in the grey band, make a loop? Only as a request
/// re-sent unanswered (`collaboration.same_request`): a delivery is the same as another by its
/// artifacts, whatever its prose, and a request answered in between comes back as itself at
/// `returning_similarity`, below the grey band. (The judge's grey-band question.)
pub fn grey_would_loop(ctx: &Ctx<'_>, candidate: u64) -> bool {
    message(&ctx.entry.body).is_some_and(|m| {
        let r = Request::of(ctx.state, &m);
        !m.protocol && !is_delivery(m.sig) && !r.answered(ctx.state, candidate, ctx.entry.seq)
    })
}

/// Rule `collaboration.same_request`.
pub fn detect(ctx: &Ctx<'_>) -> Option<Finding> {
    let m = message(&ctx.entry.body)?;
    if m.protocol || is_delivery(m.sig) {
        return None;
    }
    let r = Request::of(ctx.state, &m);
    // The unanswered run: earlier occurrences, newest first, with nothing answering between.
    let mut chain: Vec<&Link> = Vec::new();
    let mut newer = ctx.entry.seq;
    for l in ctx.same_links() {
        if r.answered(ctx.state, l.seq, newer) {
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
    let Rounds { m, back, seqs, r } = answered_rounds(ctx)?;
    // A review of artifacts: the agent asked (in a group, another member) answers with them.
    // Where no answer carries any, what moved is `asked_again`'s to judge.
    let reviewed = between(ctx.state, seqs[0], ctx.entry.seq).any(|e| {
        matches!(&e.body, EntryBody::Collaboration { from_agent, artifacts, .. }
            if r.sent_by_addressee(from_agent) && !artifacts.is_empty())
    });
    if !reviewed {
        return None;
    }
    // A return with nothing new delivered by the agent asked since the occurrence before it:
    // that answer changed nothing the request asked for.
    let idle = seqs
        .windows(2)
        .find(|w| !r.delivered(ctx.state, w[0], w[1]))?;
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

/// Rule `collaboration.asked_again`.
pub fn asked_again(ctx: &Ctx<'_>) -> Option<Finding> {
    let Rounds { m, back, seqs, r } = answered_rounds(ctx)?;
    // Asked again after answers that brought nothing new: nothing moved.
    let returning = ctx.cfg.collaboration.returning_similarity;
    let idle = seqs
        .windows(2)
        .find(|w| !r.moved(ctx.state, w[0], w[1], returning))?;
    let newest = back[0];
    let listed: Vec<String> = seqs[..seqs.len() - 1].iter().map(u64::to_string).collect();
    let mut f = Finding::new(
        LoopKind::CollaborationLoop,
        format!(
            "{} asked {} the same thing a {} time (before: seq {}; closest {}, cosine {}), answered each time; nothing new came back between seq {} and seq {}",
            m.from,
            m.to,
            ordinal(seqs.len()),
            listed.join(", "),
            newest.seq,
            fmt_cos(newest.similarity()),
            idle[0],
            idle[1]
        ),
    );
    f.matched = Some(newest.seq);
    f.similarity = newest.similarity();
    Some(f)
}

/// Rule `collaboration.same_answer`: a request asked again is answered as it was the time before.
/// A person pasting the same command a second time and getting the same reply, an agent asked
/// the same question again that hits the same wall: the whole answer — every event the
/// addressee made after the request — repeats, event by event, the answer its last occurrence
/// got, and nothing happened between that answer and the request coming back. It fires when the
/// new answer is as long as the old one, so once per return. A request re-sent after work that
/// changed something (an edit, then the tests run again) is following the work, and an answer
/// that differs anywhere (a run's output that moved) brought something.
pub fn same_answer(ctx: &Ctx<'_>) -> Option<Finding> {
    let e = ctx.entry;
    if ctx.external || e.is_passive() || !answer_like(e) {
        return None;
    }
    // The request this event answers: the newest message that is not a protocol turn.
    let asked = ctx
        .state
        .window
        .iter()
        .rev()
        .find(|w| message(&w.body).is_some_and(|m| !m.protocol))?;
    let m = message(&asked.body)?;
    if is_delivery(m.sig) {
        return None;
    }
    let r = Request::of(ctx.state, &m);
    if !r.answers(e) {
        return None;
    }
    // Its last occurrence: the same request (by the identity links), from the same sender.
    let previous = ctx
        .state
        .window
        .iter()
        .rev()
        .filter(|w| asked.is_same_as(w.seq))
        .find(|w| message(&w.body).is_some_and(|o| o.from == m.from && o.to == m.to))?;
    // The answer it got: what the addressee did until the next request.
    let next = ctx
        .state
        .window
        .iter()
        .find(|w| w.seq > previous.seq && message(&w.body).is_some_and(|o| !o.protocol))?
        .seq;
    let then: Vec<&Entry> = between(ctx.state, previous.seq, next)
        .filter(|w| r.answers(w))
        .collect();
    let now: Vec<&Entry> = between(ctx.state, asked.seq, e.seq)
        .filter(|w| r.answers(w))
        .collect();
    if then.len() != now.len() + 1 {
        return None;
    }
    // Between that answer and the return, nothing moved: no news from anyone. Unless the
    // answer is a failure: then whatever was tried between (a change, a smaller context) did
    // not reach it, and the request hit the same wall again.
    let returning = ctx.cfg.collaboration.returning_similarity;
    if !failed(e)
        && between(ctx.state, next - 1, asked.seq)
            .filter(|w| w.seq >= next)
            .any(|w| brought_news(ctx.state, w, returning))
    {
        return None;
    }
    // Event by event, the answer repeats the old one: the same event, a reply reworded as
    // closely as a returning request, or the environment failing again (a rate limit).
    let alike = |new: &Entry, old: &Entry| {
        new.body.channel() == old.body.channel()
            && (new.is_same_as(old.seq)
                || external(new) && external(old)
                || matches!(new.body, EntryBody::Response { .. })
                    && new.closest_earlier.is_some_and(|c| c >= returning))
    };
    if !now.iter().zip(&then).all(|(n, o)| alike(n, o)) {
        return None;
    }
    let last = then[then.len() - 1];
    let link = ctx.link(last.seq).filter(|l| {
        !l.stale
            && (l.same
                || matches!(e.body, EntryBody::Response { .. })
                    && l.cos.is_some_and(|c| c >= returning))
    })?;
    let mut f = Finding::new(
        LoopKind::CollaborationLoop,
        format!(
            "{} asked {} again what it asked at seq {} (seq {}), and got the same answer again: {} event(s), each repeating the answer of seq {}–{}, nothing new since",
            m.from,
            m.to,
            previous.seq,
            asked.seq,
            then.len(),
            then[0].seq,
            last.seq,
        ),
    );
    f.matched = Some(last.seq);
    f.similarity = link.similarity();
    Some(f)
}

/// Requests sharing this much of their words (Dice overlap) are one template filled in with
/// different items. Measured on the labelled sets: a batch's prompts share 0.76–0.82 of their
/// words; a person re-wording what they want shares next to none.
const ONE_TEMPLATE_OVERLAP: f32 = 0.5;

/// Rule `collaboration.same_reply`: whatever it is asked, the agent says the same. The replies
/// to the last `occurrences` requests of one sender — each a different request — say the same
/// thing, reworded (each at least `returning_similarity` to the newest and to the reply before
/// it): a person trying one way after another to get an agent moving, and the agent re-sending
/// the same proposal, the same refusal, the same question. A reply is the first response (or
/// message) of the addressee after a request; a request it did not reply to is skipped.
pub fn same_reply(ctx: &Ctx<'_>) -> Option<Finding> {
    let e = ctx.entry;
    let said = |w: &Entry| match &w.body {
        EntryBody::Response { .. } => true,
        EntryBody::Collaboration { protocol, sig, .. } => !protocol && !is_delivery(sig),
        _ => false,
    };
    if !said(e) {
        return None;
    }
    let need = ctx.cfg.collaboration.occurrences.max(2);
    let returning = ctx.cfg.collaboration.returning_similarity;
    // Every request with the first thing the addressee said after it, oldest first; a request
    // followed by another before any reply is skipped.
    let mut all: Vec<(&Entry, &Entry, (&str, &str))> = Vec::new();
    let mut open: Option<(&Entry, Request<'_>)> = None;
    for w in ctx.state.window.iter().chain(std::iter::once(e)) {
        if said(w) {
            if let Some((q, r)) = open.take_if(|(_, r)| r.answers(w)) {
                all.push((q, w, (r.from, r.to)));
            }
        }
        if let Some(m) = message(&w.body).filter(|m| !m.protocol && !is_delivery(m.sig)) {
            open = Some((w, Request::of(ctx.state, &m)));
        }
    }
    let &(_, last, who) = all.last()?;
    if !std::ptr::eq(last, e) {
        return None;
    }
    let rounds: Vec<(&Entry, &Entry)> = all
        .iter()
        .rev()
        .filter(|(_, _, w)| *w == who)
        .take(need)
        .map(|(q, a, _)| (*q, *a))
        .collect();
    if rounds.len() < need {
        return None;
    }
    // Different requests, and not one template filled in with item after item (a batch: the
    // same verdict on two items is no loop). The same request asked again is `same_answer`'s.
    let requests: Vec<&TextSig> = rounds
        .iter()
        .filter_map(|(q, _)| message(&q.body).map(|m| m.sig))
        .collect();
    if requests.iter().enumerate().any(|(i, q)| {
        requests[i + 1..].iter().any(|o| {
            q.norm == o.norm
                || crate::signature::word_overlap(&q.text, &o.text) >= ONE_TEMPLATE_OVERLAP
        })
    }) {
        return None;
    }
    // The replies say the same: each earlier one close to the new one, and to the one before.
    let close_to_new = |w: &Entry| {
        ctx.link(w.seq)
            .is_some_and(|l| !l.stale && (l.same || l.cos.is_some_and(|c| c >= returning)))
    };
    let replies: Vec<&Entry> = rounds.iter().map(|(_, a)| *a).collect();
    if !replies[1..].iter().all(|w| close_to_new(w))
        || !replies[1..replies.len() - 1]
            .iter()
            .all(|w| w.closest_earlier.is_some_and(|c| c >= returning) || !w.same_as.is_empty())
    {
        return None;
    }
    let (_, newest) = rounds[1];
    let listed: Vec<String> = rounds
        .iter()
        .rev()
        .map(|(q, a)| format!("{}→{}", q.seq, a.seq))
        .collect();
    let (from, to) = who;
    let mut f = Finding::new(
        LoopKind::CollaborationLoop,
        format!(
            "{} replied to {} different requests of {} the same way (request→reply: {}), the last two at cosine {}",
            to,
            rounds.len(),
            from,
            listed.join(", "),
            fmt_cos(ctx.link(newest.seq).and_then(|l| l.similarity()))
        ),
    );
    f.matched = Some(newest.seq);
    f.similarity = ctx.link(newest.seq).and_then(|l| l.similarity());
    Some(f)
}

/// A failure outside the agent's control (a rate limit, an outage).
fn external(e: &Entry) -> bool {
    match &e.body {
        EntryBody::Failure { external, .. } => *external,
        EntryBody::ToolCall { result, .. } => result.as_ref().is_some_and(|r| r.external),
        _ => false,
    }
}

/// A failure, or a call that ended in an error or a "nothing found" ([`crate::signature::Outcome`]).
fn failed(e: &Entry) -> bool {
    match &e.body {
        EntryBody::Failure { .. } => true,
        EntryBody::ToolCall { result, .. } => result
            .as_ref()
            .is_some_and(|r| r.failed || r.outcome.is_some()),
        _ => false,
    }
}

/// Can the event be (part of) an answer: a response, a message, a call, a failure?
fn answer_like(e: &Entry) -> bool {
    matches!(
        e.body,
        EntryBody::Response { .. }
            | EntryBody::Collaboration { .. }
            | EntryBody::ToolCall { .. }
            | EntryBody::Failure { .. }
    )
}

/// A request that keeps coming back, answered each time: the rounds `unchanged_artifact` and
/// `asked_again` read.
struct Rounds<'c> {
    m: Message<'c>,
    /// Its earlier occurrences, newest first.
    back: Vec<&'c Link>,
    /// Their seqs and the new one's, oldest first.
    seqs: Vec<u64>,
    r: Request<'c>,
}

/// The new request's rounds, when it came back `occurrences` times and every return was
/// answered. A request that came back with nothing reaching its sender between is re-sent
/// unanswered, `same_request`'s case at its own (higher) threshold; the lower cosine of a return
/// rests on the rounds.
fn answered_rounds<'c>(ctx: &'c Ctx<'_>) -> Option<Rounds<'c>> {
    let m = message(&ctx.entry.body)?;
    if m.protocol || is_delivery(m.sig) {
        return None;
    }
    let cfg = &ctx.cfg.collaboration;
    let back = returns(ctx, cfg.returning_similarity);
    if back.len() + 1 < cfg.occurrences.max(2) {
        return None;
    }
    let mut seqs: Vec<u64> = back.iter().rev().map(|l| l.seq).collect();
    seqs.push(ctx.entry.seq);
    let r = Request::of(ctx.state, &m);
    if !seqs.windows(2).all(|w| r.answered(ctx.state, w[0], w[1])) {
        return None;
    }
    Some(Rounds { m, back, seqs, r })
}

/// Earlier occurrences of the new request, newest first: the same request, or one close enough
/// to be it reworded now that it keeps coming back.
fn returns<'c>(ctx: &'c Ctx<'_>, similarity: f32) -> Vec<&'c Link> {
    ctx.links
        .iter()
        .rev()
        .filter(|l| !l.stale)
        .filter(|l| l.same || l.cos.is_some_and(|c| c >= similarity))
        .collect()
}

/// Rule `collaboration.resent_artifact`.
pub fn resent_artifact(ctx: &Ctx<'_>) -> Option<Finding> {
    let m = message(&ctx.entry.body)?;
    if m.protocol || !is_delivery(m.sig) {
        return None;
    }
    let r = Request::of(ctx.state, &m);
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
        if o.sig.ids != m.sig.ids || !live || r.answered(ctx.state, e.seq, newer) {
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

/// What a courtesy turn is compared with: thanks, you're welcome, goodbye, an offer of more help.
/// A turn close to one of them says nothing of the work.
pub const COURTESIES: &[&str] = &[
    "Thank you!",
    "You're welcome!",
    "Goodbye!",
    "Have a great day!",
    "Let me know if you need anything else.",
    "Glad I could help.",
    "See you next time!",
    "Thanks, I enjoyed this, it was fun.",
    "I'm glad you enjoyed it.",
];

/// Most words a courtesy turn has.
pub const COURTESY_MAX_WORDS: usize = 60;

/// The text of a turn to compare with the [`COURTESIES`], when it could be one: a message
/// carrying no artifact, or a response, of at most [`COURTESY_MAX_WORDS`] words, in a task that
/// already heard from another party. Courtesies count only between parties, so a lone agent's
/// turns and a task's first event never wait for the model on their account.
pub fn courtesy_candidate<'e>(
    cfg: &DetectConfig,
    state: &TaskState,
    e: &'e Entry,
) -> Option<&'e str> {
    if cfg.collaboration.courtesy_similarity > 1.0 {
        return None;
    }
    let me = party(e);
    if !state.window.iter().any(|w| party(w) != me) {
        return None;
    }
    let text = match &e.body {
        // A protocol turn ("Goodbye!", "TERMINATE") is not a request, nor a courtesy to count:
        // markers of the end read like farewells.
        EntryBody::Collaboration {
            sig,
            artifacts,
            protocol: false,
            ..
        } if artifacts.is_empty() && sig.ids.is_empty() => &sig.text,
        EntryBody::Response { sig, .. } => &sig.text,
        _ => return None,
    };
    (crate::signature::message_words(text) <= COURTESY_MAX_WORDS).then_some(text.as_str())
}

/// Rule `collaboration.courtesies`: agents trading courtesies turn after turn — "Great, let me
/// know if you need anything", "Will do, thanks!", "You're welcome, have a great day!" — each
/// reworded, with nothing else said or done: the work is over and the talk goes on.
pub fn courtesies(ctx: &Ctx<'_>) -> Option<Finding> {
    if !ctx.entry.courtesy {
        return None;
    }
    let need = ctx.cfg.collaboration.occurrences.max(2);
    let mut run: Vec<&Entry> = vec![ctx.entry];
    for e in ctx.state.window.iter().rev() {
        if run.len() >= need {
            break;
        }
        match &e.body {
            EntryBody::Collaboration { protocol: true, .. } => {}
            EntryBody::Collaboration { .. } | EntryBody::Response { .. } if e.courtesy => {
                run.push(e)
            }
            EntryBody::Collaboration { .. }
            | EntryBody::Response { .. }
            | EntryBody::ToolCall { .. }
            | EntryBody::Failure { .. } => break,
            _ => {}
        }
    }
    if run.len() < need {
        return None;
    }
    // A conversation: two parties or more (an agent thanking itself is not one).
    let mut parties: Vec<Option<&str>> = Vec::new();
    for e in &run {
        if !parties.contains(&party(e)) {
            parties.push(party(e));
        }
    }
    if parties.len() < 2 {
        return None;
    }
    let seqs: Vec<String> = run.iter().rev().map(|e| e.seq.to_string()).collect();
    let mut f = Finding::new(
        LoopKind::CollaborationLoop,
        format!(
            "{} courtesy turns in a row (seq {}) with nothing else said or done: the work is over and the talk goes on",
            run.len(),
            seqs.join(", ")
        ),
    );
    f.matched = Some(run[1].seq);
    Some(f)
}

/// Who took a turn: a message's sender, any other event's agent.
fn party(e: &Entry) -> Option<&str> {
    match &e.body {
        EntryBody::Collaboration { from_agent, .. } => Some(from_agent.as_str()),
        _ => e.agent_id.as_deref(),
    }
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
    use super::{asked_again, courtesies, detect, resent_artifact, unchanged_artifact};
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
    fn another_members_message_answers_a_message_to_a_group() {
        let mut s = Scene::new();
        s.push(ask("planner", "chat_manager", "Let us plan the migration."));
        s.push(ask("coder", "chat_manager", "I will write the script."));
        // The manager relays to everyone: the coder's message answered the planner's.
        s.push(ask(
            "planner",
            "chat_manager",
            "Please write the migration script.",
        ));
        s.push(ask("coder", "chat_manager", "Here is the first draft."));
        assert!(s
            .detect(
                detect,
                ask(
                    "planner",
                    "chat_manager",
                    "Please write the migration script."
                )
            )
            .is_none());
        // Re-sent with no member answering between: the group heard it and said nothing.
        assert!(s
            .detect(
                detect,
                ask(
                    "planner",
                    "chat_manager",
                    "Please write the migration script."
                )
            )
            .is_some());
        // Said to be a group from its first message on, before a second member writes.
        let mut s = Scene::new();
        s.push(json!({"type": "collaboration", "from_agent": "a", "to_agent": "team", "request": "Status?", "to_group": true}));
        s.push(ask("b", "team", "All green."));
        assert!(s
            .detect(detect, json!({"type": "collaboration", "from_agent": "a", "to_agent": "team", "request": "Status?", "to_group": true}))
            .is_none());
    }

    #[test]
    fn the_addressees_work_answers_a_request() {
        // A user writes to an agent; the agent's response and tool call answer it.
        let mut s = Scene::new();
        s.push(ask("user", "agent", "Run the tests please."));
        s.push(json!({"type": "response", "text": "Running them now."}));
        s.push(crate::detect::testkit::bash("pytest", "3 passed"));
        assert!(s
            .detect(detect, ask("user", "agent", "Run the tests please."))
            .is_none());
    }

    #[test]
    fn a_request_asked_again_after_answers_that_changed_nothing_is_a_loop() {
        let mut s = Scene::new();
        let fail = || {
            crate::detect::testkit::bash_err(
                "python app.py",
                "ModuleNotFoundError: No module named 'flask'",
            )
        };
        s.push(ask(
            "user",
            "agent",
            "The app still does not start, please fix it.",
        ));
        s.push(fail());
        assert!(s
            .detect(
                asked_again,
                ask(
                    "user",
                    "agent",
                    "The app still does not start, please fix it."
                )
            )
            .is_none());
        s.push(fail());
        let f = s
            .detect(
                asked_again,
                ask(
                    "user",
                    "agent",
                    "The app still does not start, please fix it.",
                ),
            )
            .expect("asked a third time after the same failure");
        assert!(f.reason.contains("nothing new came back"), "{}", f.reason);
        // Answered with news each time (new output), the same request is the work going on.
        let mut s = Scene::new();
        for i in 0..4 {
            assert!(s
                .detect(asked_again, ask("user", "agent", "/run python test.py"))
                .is_none());
            s.push(crate::detect::testkit::bash(
                "python test.py",
                &format!("step {i} of 9 done, {i} files written"),
            ));
        }
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
    fn in_a_group_chat_a_comment_answered_with_an_unchanged_program_is_a_loop_too() {
        // Everyone writes to the hub: the program comes from another member, not from the hub.
        let mut s = Scene::new();
        let to_hub = |from: &str, text: &str| ask(from, "chat_manager", text);
        s.push(to_hub("programmer", &program("")));
        s.push(to_hub("reviewer", COMMENT));
        s.push(to_hub("programmer", &program("")));
        assert!(s
            .detect(unchanged_artifact, to_hub("reviewer", COMMENT))
            .is_none());
        s.push(to_hub("programmer", &program("")));
        assert!(s
            .detect(unchanged_artifact, to_hub("reviewer", COMMENT))
            .is_some());
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
    fn courtesies_traded_turn_after_turn_are_a_loop() {
        // The stub embedder puts a turn near a courtesy only when they share words: enough to
        // test the run (the real model is tested in tests/collaboration.rs).
        let mut s = Scene::with(|c| c.detect.collaboration.courtesy_similarity = 0.5);
        s.push(ask(
            "pm",
            "chat_manager",
            "The report is done and sent to the client.",
        ));
        for (i, (who, text)) in [
            (
                "dev",
                "Great, thank you! Let me know if you need anything else.",
            ),
            ("pm", "You're welcome! Have a great day!"),
            ("dev", "Thank you, you too, have a great day!"),
        ]
        .into_iter()
        .enumerate()
        {
            let p = s.probe(ask(who, "chat_manager", text));
            assert!(p.entry.courtesy, "{text}");
            let f = s.detect(courtesies, ask(who, "chat_manager", text));
            assert_eq!(f.is_some(), i == 2, "{text}: {f:?}");
        }
        // One party thanking on its own is not a conversation.
        let mut s = Scene::with(|c| c.detect.collaboration.courtesy_similarity = 0.5);
        for _ in 0..4 {
            assert!(s
                .detect(
                    courtesies,
                    json!({"type": "response", "text": "You're welcome! Have a great day!"})
                )
                .is_none());
        }
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
