//! Identity: is the new event the same as an earlier one — exactly, after normalisation, or
//! reworded (cosine at or above the kind's threshold, with the same numbers)?
//!
//! Matching runs in two phases so the model is only touched when it must be:
//! [`needed`] lists the texts that lack a vector and cannot be decided by their keys, the engine
//! embeds them in one call, then [`links`] compares with whatever vectors exist. When the new
//! event is an exact repeat of something in the window, [`exact_identity`] short-cuts phase one
//! entirely (the exact fast path).

use super::{Level, Link};
use crate::config::DetectConfig;
use crate::embed::cosine;
use crate::state::{Channel, Entry, EntryBody, TaskState, TextSig};

/// Which text of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Failure message, response text, collaboration request, or a tool call's call.
    Main,
    /// A tool call's result.
    Result,
}

/// Where a text that needs a vector lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextAt {
    New(Part),
    Window(usize, Part),
}

fn main_sig(body: &EntryBody) -> Option<&TextSig> {
    match body {
        EntryBody::Failure { sig, .. }
        | EntryBody::Response { sig, .. }
        | EntryBody::Collaboration { sig, .. } => Some(sig),
        EntryBody::ToolCall { call, .. } => Some(call),
        _ => None,
    }
}

fn main_sig_mut(body: &mut EntryBody) -> Option<&mut TextSig> {
    match body {
        EntryBody::Failure { sig, .. }
        | EntryBody::Response { sig, .. }
        | EntryBody::Collaboration { sig, .. } => Some(sig),
        EntryBody::ToolCall { call, .. } => Some(call),
        _ => None,
    }
}

fn result_of(body: &EntryBody) -> Option<&crate::state::ResultSig> {
    match body {
        EntryBody::ToolCall { result, .. } => result.as_ref(),
        _ => None,
    }
}

/// The text at `at`, mutably (to store its vector).
pub fn sig_mut<'a>(
    state: &'a mut TaskState,
    entry: &'a mut Entry,
    at: TextAt,
) -> Option<&'a mut TextSig> {
    let (body, part) = match at {
        TextAt::New(p) => (&mut entry.body, p),
        TextAt::Window(i, p) => (&mut state.window.get_mut(i)?.body, p),
    };
    match part {
        Part::Main => main_sig_mut(body),
        Part::Result => match body {
            EntryBody::ToolCall { result, .. } => result.as_mut().map(|r| &mut r.sig),
            _ => None,
        },
    }
}

/// The text at `at`.
pub fn sig_at<'a>(state: &'a TaskState, entry: &'a Entry, at: TextAt) -> Option<&'a TextSig> {
    let (body, part) = match at {
        TextAt::New(p) => (&entry.body, p),
        TextAt::Window(i, p) => (&state.window.get(i)?.body, p),
    };
    match part {
        Part::Main => main_sig(body),
        Part::Result => result_of(body).map(|r| &r.sig),
    }
}

fn threshold(cfg: &DetectConfig, channel: Channel, part: Part) -> f32 {
    let s = &cfg.similarity;
    match (channel, part) {
        (Channel::ToolCall, Part::Result) => s.result,
        (Channel::Failure, _) => s.failure,
        (Channel::ToolCall, _) => s.tool_call,
        (Channel::Response, _) => s.response,
        (Channel::Collaboration, _) => s.collaboration,
        (Channel::Other, _) => f32::INFINITY,
    }
}

/// Whether semantic comparison is on for a channel.
fn semantic_on(cfg: &DetectConfig, channel: Channel) -> bool {
    match channel {
        Channel::Response => cfg.enabled.similar_response || cfg.enabled.semantic_repeat,
        Channel::Collaboration => cfg.enabled.collaboration_loop,
        Channel::Other => false,
        _ => cfg.enabled.semantic_repeat,
    }
}

/// Keys first, then the numbers guard, then the cosine.
fn key_level(channel: Channel, part: Part, a: &TextSig, b: &TextSig) -> Option<Level> {
    let failure = channel == Channel::Failure && part == Part::Main;
    if a.exact == b.exact {
        Some(Level::Exact)
    } else if a.ids != b.ids {
        // Another file, another object id: the same command on a different resource.
        Some(Level::None)
    } else if a.norm == b.norm {
        Some(Level::Normalized)
    } else if a.numbers != b.numbers {
        // A later page, a job further along, a different count, another version: not the same
        // observation.
        Some(Level::None)
    } else if failure && a.template != 0 && a.template == b.template {
        // One log template, other names (a host, a module, a request id): the same failure.
        Some(Level::Normalized)
    } else {
        None
    }
}

/// The matcher's rule for two texts of one channel, as one score: `+∞` when their keys make them
/// the same (equal as given or after normalisation; for failure messages, one inside the other),
/// `−∞` when their keys make them different (another resource, other numbers), else their
/// cosine (`None`, not embedded: different). The texts match at a threshold `t` exactly when the
/// score is `≥ t`: the engine compares it with `detect.similarity.*`, calibration sweeps `t`
/// over labelled pairs — both through this one function.
pub fn rule_score(channel: Channel, part: Part, a: &TextSig, b: &TextSig, cos: Option<f32>) -> f32 {
    match key_level(channel, part, a, b) {
        Some(l) if l.is_exact() => f32::INFINITY,
        _ if channel == Channel::Failure && part == Part::Main && contains_message(a, b) => {
            f32::INFINITY
        }
        Some(_) => f32::NEG_INFINITY,
        None => cos.unwrap_or(f32::NEG_INFINITY),
    }
}

/// How two texts compare at threshold `thr`, with the cosine when the model was needed.
fn level(
    channel: Channel,
    part: Part,
    a: &TextSig,
    b: &TextSig,
    thr: f32,
    grey: f32,
) -> (Level, Option<f32>) {
    let key = key_level(channel, part, a, b);
    if let Some(l) = key.filter(|l| l.is_exact()) {
        return (l, None);
    }
    let cos = match (key, &a.vector, &b.vector) {
        (None, Some(va), Some(vb)) => Some(cosine(va, vb)),
        _ => None,
    };
    let score = rule_score(channel, part, a, b, cos);
    let l = if score == f32::INFINITY {
        // A message inside a longer one: reworded when the cosine says so, else the same
        // message cut short or with context added.
        if cos.is_some_and(|c| c >= thr) {
            Level::Semantic
        } else {
            Level::Normalized
        }
    } else if score >= thr {
        Level::Semantic
    } else if score >= thr - grey {
        Level::Grey
    } else {
        Level::None
    };
    (l, cos)
}

fn comparable(e: &Entry, w: &Entry) -> bool {
    let ch = e.body.channel();
    if ch == Channel::Other || ch != w.body.channel() {
        return false;
    }
    match (&e.body, &w.body) {
        // A protocol turn ("Finished.", "OK") is not a request: it never matches anything.
        (
            EntryBody::Collaboration {
                from_agent: f1,
                to_agent: t1,
                protocol: p1,
                ..
            },
            EntryBody::Collaboration {
                from_agent: f2,
                to_agent: t2,
                protocol: p2,
                ..
            },
        ) => f1 == f2 && t1 == t2 && !p1 && !p2,
        _ => true,
    }
}

fn same_tool(e: &Entry, w: &Entry) -> bool {
    match (&e.body, &w.body) {
        (EntryBody::ToolCall { tool: a, .. }, EntryBody::ToolCall { tool: b, .. }) => a == b,
        _ => true,
    }
}

fn is_stale(cfg: &DetectConfig, e: &Entry, w: &Entry) -> bool {
    cfg.max_gap_secs > 0 && e.ts.saturating_sub(w.ts) > cfg.max_gap_secs as i64
}

/// Shortest message that counts when found inside a longer one.
const MIN_CONTAINED_CHARS: usize = 24;

/// A failure message that is the other one cut short or with context added ("TypeError: x"
/// and "Uncaught TypeError: x at UserCard (src/a.tsx:14)"). The model scores such pairs low — a
/// component name alone moved one to 0.57 — so containment decides them.
fn contains_message(a: &TextSig, b: &TextSig) -> bool {
    let (short, long) = if a.text.len() <= b.text.len() {
        (&a.text, &b.text)
    } else {
        (&b.text, &a.text)
    };
    short.len() >= MIN_CONTAINED_CHARS && long.contains(short.as_str())
}

/// The exact fast path: the new event equals a live window entry by keys alone.
pub fn exact_identity(cfg: &DetectConfig, state: &TaskState, e: &Entry) -> bool {
    state.window.iter().any(|w| {
        if !comparable(e, w) || !same_tool(e, w) || is_stale(cfg, e, w) {
            return false;
        }
        let (Some(a), Some(b)) = (main_sig(&e.body), main_sig(&w.body)) else {
            return false;
        };
        let ch = e.body.channel();
        let main = key_level(ch, Part::Main, a, b).is_some_and(Level::is_exact)
            || (e.body.channel() == Channel::Failure && contains_message(a, b));
        let result = match (result_of(&e.body), result_of(&w.body)) {
            (Some(r1), Some(r2)) => {
                key_level(ch, Part::Result, &r1.sig, &r2.sig).is_some_and(Level::is_exact)
            }
            _ => true,
        };
        main && result
    })
}

/// Texts that need a vector before [`links`] can compare them semantically, in two rounds:
/// `Part::Main` first (calls, messages, requests), then `Part::Result` — a result is only worth
/// embedding when its call matched (or nearly) or when both results are negative, which after the
/// first round is known. Results are long; skipping them is most of the model time saved.
pub fn needed(cfg: &DetectConfig, state: &TaskState, e: &Entry, part: Part) -> Vec<TextAt> {
    let mut pending = Vec::new();
    let channel = e.body.channel();
    if !semantic_on(cfg, channel) {
        return pending;
    }
    let mut push = |s: TextAt| {
        if !pending.contains(&s) {
            pending.push(s);
        }
    };
    let grey = cfg.similarity.grey_band;
    for (i, w) in state.window.iter().enumerate() {
        if !comparable(e, w) || is_stale(cfg, e, w) {
            continue;
        }
        let (Some(a), Some(b)) = (main_sig(&e.body), main_sig(&w.body)) else {
            continue;
        };
        match part {
            Part::Main => {
                if same_tool(e, w) && key_level(channel, Part::Main, a, b).is_none() {
                    if a.vector.is_none() {
                        push(TextAt::New(Part::Main));
                    }
                    if b.vector.is_none() {
                        push(TextAt::Window(i, Part::Main));
                    }
                }
            }
            Part::Result => {
                let (Some(r1), Some(r2)) = (result_of(&e.body), result_of(&w.body)) else {
                    continue;
                };
                let call_may_match = same_tool(e, w)
                    && level(
                        channel,
                        Part::Main,
                        a,
                        b,
                        threshold(cfg, channel, Part::Main),
                        grey,
                    )
                    .0 >= Level::Grey;
                let both_negative = r1.negative && r2.negative;
                let open = key_level(channel, Part::Result, &r1.sig, &r2.sig).is_none()
                    && !r1.trivial
                    && !r2.trivial;
                if open && (call_may_match || both_negative) {
                    if r1.sig.vector.is_none() {
                        push(TextAt::New(Part::Result));
                    }
                    if r2.sig.vector.is_none() {
                        push(TextAt::Window(i, Part::Result));
                    }
                }
            }
        }
    }
    pending
}

/// Calls the dead-end rules will compare with the new one ([`super::dead_end::wanted`]) that
/// have no vector yet, whatever their keys said.
pub fn attempts_needed(cfg: &DetectConfig, state: &TaskState, e: &Entry) -> Vec<TextAt> {
    if !(cfg.enabled.same_error || cfg.enabled.result_repeat) {
        return Vec::new();
    }
    let seqs = super::dead_end::wanted(&cfg.dead_ends, state, e);
    if seqs.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    if main_sig(&e.body).is_some_and(|s| s.vector.is_none()) {
        out.push(TextAt::New(Part::Main));
    }
    for (i, w) in state.window.iter().enumerate() {
        if seqs.contains(&w.seq) && main_sig(&w.body).is_some_and(|s| s.vector.is_none()) {
            out.push(TextAt::Window(i, Part::Main));
        }
    }
    out
}

/// A call checked before it runs (no result yet) says nothing about its outcome, so it is only
/// the same as an earlier call when nothing went right in between: a success (a call that
/// returned something, not an error or a "nothing found") or a sign of progress after `w` means
/// the world moved, and running the call again is the next step, not a repeat.
fn checked_after_success(state: &TaskState, e: &Entry, w: &Entry) -> bool {
    if !matches!(e.body, EntryBody::ToolCall { result: None, .. }) {
        return false;
    }
    state.progress_since(w.seq).is_some()
        || state.window.iter().filter(|x| x.seq > w.seq).any(|x| {
            matches!(&x.body, EntryBody::ToolCall { result: Some(r), passive: false, .. }
                if !r.failed && !r.negative && r.outcome.is_none())
        })
}

/// Least characters each side's slot must have to be compared on its own.
const MIN_SLOT_CHARS: usize = 12;

/// Long messages and responses built from one template (an evaluation prompt, one item after
/// another) are embedded from their head and tail ([`crate::signature::head_tail`]): when the
/// heads are the same template, the model saw mostly the template, and the texts read alike
/// whatever item each carries. What differs between them — the rest of what the model saw —
/// says whether they are the same: `(seq, the new text's part, the earlier text's part)` for
/// each window entry that matched or nearly did, both cut to head and tail with the very same
/// head. The link stage embeds the parts and [`compare_slots`] lets their cosine decide.
pub fn slots_to_compare(
    cfg: &DetectConfig,
    state: &TaskState,
    e: &Entry,
) -> Vec<(u64, String, String)> {
    let channel = e.body.channel();
    if !matches!(channel, Channel::Collaboration | Channel::Response) {
        return Vec::new();
    }
    let Some(a) = main_sig(&e.body) else {
        return Vec::new();
    };
    let Some(head) = cut_head(&a.text) else {
        return Vec::new();
    };
    let thr = threshold(cfg, channel, Part::Main);
    let grey = cfg.similarity.grey_band;
    let mut out = Vec::new();
    for w in state.window.iter() {
        if !comparable(e, w) || is_stale(cfg, e, w) {
            continue;
        }
        let Some(b) = main_sig(&w.body) else {
            continue;
        };
        if key_level(channel, Part::Main, a, b).is_some() || cut_head(&b.text) != Some(head) {
            continue;
        }
        let near = match (&a.vector, &b.vector) {
            (Some(va), Some(vb)) => cosine(va, vb) >= thr - grey,
            _ => false,
        };
        if !near {
            continue;
        }
        let (da, db) = super::dead_end::changed_parts(&a.text, &b.text);
        if da.trim().chars().count() < MIN_SLOT_CHARS || db.trim().chars().count() < MIN_SLOT_CHARS
        {
            continue;
        }
        out.push((w.seq, da, db));
    }
    out
}

/// The head of a text the model saw cut to head and tail, if it was.
fn cut_head(prepared: &str) -> Option<&str> {
    prepared
        .split_once(crate::signature::HEAD_TAIL_GAP)
        .map(|(head, _)| head)
}

/// Let the cosine of two templated texts' slots ([`slots_to_compare`]) decide: slots below the
/// threshold are other items of one template, not the same message reworded.
pub fn compare_slots(
    cfg: &DetectConfig,
    channel: Channel,
    links: &mut [Link],
    slots: &[(u64, f32)],
) {
    let thr = threshold(cfg, channel, Part::Main);
    let grey = cfg.similarity.grey_band;
    for l in links.iter_mut() {
        let Some((_, c)) = slots.iter().find(|(seq, _)| *seq == l.seq) else {
            continue;
        };
        if *c >= thr || l.text.is_exact() {
            continue;
        }
        // The slot is what tells the texts apart: it is their similarity.
        l.cos = Some(l.cos.map_or(*c, |whole| whole.min(*c)));
        l.text = if *c >= thr - grey {
            l.text.min(Level::Grey)
        } else {
            Level::None
        };
        l.same = false;
    }
}

/// What the links say of the new entry, written on it for the rules and for later events: the
/// earlier entries it is the same as, whether it is new work, and, for a response, how close it
/// came to the closest earlier one (a later request that comes back asks whether its answers
/// said anything new).
pub fn settle_identity(entry: &mut Entry, links: &[Link]) {
    entry.same_as = links
        .iter()
        .filter(|l| l.same && !l.stale)
        .map(|l| l.seq)
        .collect();
    entry.novel = entry.is_work() && !entry.is_passive() && entry.same_as.is_empty();
    if matches!(entry.body, EntryBody::Response { .. }) {
        entry.closest_earlier = links
            .iter()
            .filter(|l| !l.stale)
            .filter_map(|l| if l.text.is_exact() { Some(1.0) } else { l.cos })
            .reduce(f32::max);
    }
}

/// Compare the new event with every comparable window entry, oldest first.
pub fn links(cfg: &DetectConfig, state: &TaskState, e: &Entry) -> Vec<Link> {
    let grey = cfg.similarity.grey_band;
    let channel = e.body.channel();
    let mut out = Vec::new();
    for w in state.window.iter() {
        if !comparable(e, w) {
            continue;
        }
        let (Some(a), Some(b)) = (main_sig(&e.body), main_sig(&w.body)) else {
            continue;
        };
        let (mut text, cos) = if same_tool(e, w) {
            level(
                channel,
                Part::Main,
                a,
                b,
                threshold(cfg, channel, Part::Main),
                grey,
            )
        } else {
            (Level::None, None)
        };
        if !semantic_on(cfg, channel) && !text.is_exact() {
            text = Level::None;
        }
        // Secondary indicators: the same exception at the same place with the same
        // stack is the same failure even when the message wording moved a lot.
        if let (
            EntryBody::Failure {
                exception: Some(x1),
                location: Some(l1),
                context_hash: Some(h1),
                ..
            },
            EntryBody::Failure {
                exception: Some(x2),
                location: Some(l2),
                context_hash: Some(h2),
                ..
            },
        ) = (&e.body, &w.body)
        {
            let floor = cfg.similarity.failure - grey;
            if cfg.structural_match
                && !text.is_match()
                && x1 == x2
                && l1 == l2
                && h1 == h2
                && cos.is_some_and(|c| c >= floor)
            {
                text = Level::Semantic;
            }
        }
        let (result, cos_result) = match (result_of(&e.body), result_of(&w.body)) {
            (Some(r1), Some(r2)) => {
                let (mut l, c) = level(
                    channel,
                    Part::Result,
                    &r1.sig,
                    &r2.sig,
                    threshold(cfg, channel, Part::Result),
                    grey,
                );
                if !semantic_on(cfg, channel) && !l.is_exact() {
                    l = Level::None;
                }
                // Outputs that differ only in the task's counters (tokens sent, a cost, seconds
                // elapsed) say the same thing.
                let counters_only = match (&r1.numbered, &r2.numbered) {
                    (Some(n1), Some(n2)) => {
                        n1.alike_but_counters(n2, |t| state.ambient.is_counter(t))
                    }
                    _ => false,
                };
                if !l.is_exact() && counters_only {
                    l = Level::Normalized;
                }
                if l.is_match()
                    && !l.is_exact()
                    && !text.is_exact()
                    && !r1.negative
                    && !r2.negative
                    && selects_differently(a, b, &r1.sig, &r2.sig)
                {
                    l = Level::None;
                }
                (Some(l), c)
            }
            _ => (None, None),
        };
        // An acknowledgement ("", "OK") says nothing about what a call did: a reworded call with
        // an empty result (an edit, a write) is a different action unless it is the same call.
        let both_trivial = matches!(
            (result_of(&e.body), result_of(&w.body)),
            (Some(r1), Some(r2)) if r1.trivial && r2.trivial
        );
        let same = text.is_match()
            && result.is_none_or(Level::is_match)
            && (text.is_exact() || !both_trivial)
            && !checked_after_success(state, e, w);
        out.push(Link {
            seq: w.seq,
            text,
            cos,
            result,
            cos_result,
            same,
            stale: is_stale(cfg, e, w),
        });
    }
    inherit_identity(state, &mut out);
    out
}

/// Words of a call or a result, as a selection would appear in both: lowercase, three characters
/// or more, not a bare number.
fn selection_words(text: &str) -> std::collections::HashSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3 && !w.chars().all(|c| c.is_ascii_digit()))
        .map(str::to_lowercase)
        .collect()
}

/// Two calls that differ in what they select (`pytest -k read`, then `-k write`; a build of
/// `util.c`, then of `pad.c`) whose results each name what their own call selected and not what
/// the other did: the results differ exactly where the calls do, so however alike the rest of
/// the output (one runner's banner and summary), each run reported on other work. A search that
/// found nothing and quotes its query is not this: it found nothing either way (negative
/// results are left out by the caller).
fn selects_differently(
    call_a: &TextSig,
    call_b: &TextSig,
    res_a: &TextSig,
    res_b: &TextSig,
) -> bool {
    let (ca, cb) = (selection_words(&call_a.text), selection_words(&call_b.text));
    let (ra, rb) = (selection_words(&res_a.text), selection_words(&res_b.text));
    let own = |call: &std::collections::HashSet<String>,
               other_call: &std::collections::HashSet<String>,
               res: &std::collections::HashSet<String>,
               other_res: &std::collections::HashSet<String>| {
        call.iter()
            .any(|w| !other_call.contains(w) && res.contains(w) && !other_res.contains(w))
    };
    own(&ca, &cb, &ra, &rb) && own(&cb, &ca, &rb, &ra)
}

/// On the exact fast path the model is not asked, so the new event is not compared with the
/// rewordings of what it equals. It inherits their identity instead: if it equals `a`, and `b`
/// was found to be `a` reworded (or `a` to be `b`), it is `b` too — "a, b reworded, a" stays
/// three occurrences of one thing.
///
/// A reworded match passes identity on too, but only between tool calls whose call and result
/// the new event nearly matches itself (the grey band): `a`, `a'` (same as `a`), `a''` (same as
/// `a`, grey against `a'`, the same output) are three occurrences. Not for responses and other
/// result-less events: "reservation X is basic economy", "… Y is also …", "… Z is also …" each
/// resemble their neighbour, and chaining them would count a walk over items as a loop
/// (tau-bench task33/trial0).
fn inherit_identity(state: &TaskState, links: &mut [Link]) {
    let seeds = |exact: bool| -> Vec<u64> {
        links
            .iter()
            .filter(|l| l.same && !l.stale && l.exact() == exact)
            .map(|l| l.seq)
            .collect()
    };
    let (exact, reworded) = (seeds(true), seeds(false));
    if exact.is_empty() && reworded.is_empty() {
        return;
    }
    // Everything the matched entries are the same as, in either direction.
    let alike = |matched: &[u64]| -> Vec<u64> {
        let mut out = Vec::new();
        for w in &state.window {
            if matched.contains(&w.seq) {
                out.extend(&w.same_as);
            } else if w.same_as.iter().any(|s| matched.contains(s)) {
                out.push(w.seq);
            }
        }
        out
    };
    let (alike_exact, alike_reworded) = (alike(&exact), alike(&reworded));
    for l in links.iter_mut() {
        if l.same || l.stale {
            continue;
        }
        let near = l.text >= Level::Grey && l.result.is_some_and(|r| r >= Level::Grey);
        if alike_exact.contains(&l.seq) || (near && alike_reworded.contains(&l.seq)) {
            l.same = true;
            if l.text < Level::Semantic {
                l.text = Level::Semantic;
            }
            if l.result.is_some_and(|r| r < Level::Semantic) {
                l.result = Some(Level::Semantic);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::testkit::{bash, Scene};
    use crate::engine::observe::compared_text;
    use proptest::prelude::*;

    const WORDS: [&str; 10] = [
        "error", "cannot", "open", "file", "parser", "module", "run", "test", "config", "found",
    ];

    fn text() -> impl Strategy<Value = String> {
        (
            proptest::collection::vec(0..WORDS.len(), 1..6),
            proptest::option::of(0u32..500),
            proptest::option::of(0..3usize),
        )
            .prop_map(|(words, number, file)| {
                let mut t: Vec<String> = words.into_iter().map(|i| WORDS[i].to_string()).collect();
                if let Some(n) = number {
                    t.push(format!("{n} items"));
                }
                if let Some(f) = file {
                    t.push(["a.py", "b.sql", "c.rs"][f].to_string());
                }
                t.join(" ")
            })
    }

    fn channel() -> impl Strategy<Value = (Channel, Part)> {
        prop_oneof![
            Just((Channel::Failure, Part::Main)),
            Just((Channel::ToolCall, Part::Main)),
            Just((Channel::ToolCall, Part::Result)),
            Just((Channel::Response, Part::Main)),
            Just((Channel::Collaboration, Part::Main)),
        ]
    }

    proptest! {
        /// Whether two texts are the same does not depend on which came first.
        #[test]
        fn the_rule_is_symmetric(a in text(), b in text(), (ch, part) in channel(), cos in -1f32..1.0) {
            let (sa, sb) = (compared_text(ch, part, &a, 500), compared_text(ch, part, &b, 500));
            prop_assert_eq!(
                rule_score(ch, part, &sa, &sb, Some(cos)),
                rule_score(ch, part, &sb, &sa, Some(cos))
            );
        }

        /// Texts whose numbers differ are never the same by their cosine: a later page or a job
        /// further along is new information, and so is a failure about another version or count
        /// (turning this off for failures flagged 12 more distractor runs in calibration).
        #[test]
        fn other_numbers_never_match_by_cosine(a in text(), n in 0u32..1000, m in 0u32..1000, (ch, part) in channel()) {
            prop_assume!(n != m);
            let (x, y) = (format!("{a} {n} left"), format!("{a} {m} left"));
            let (sx, sy) = (compared_text(ch, part, &x, 500), compared_text(ch, part, &y, 500));
            prop_assert_eq!(rule_score(ch, part, &sx, &sy, Some(-1.0)), f32::NEG_INFINITY);
        }

        /// A tool call on another resource is other work, whatever the cosine.
        #[test]
        fn other_resources_never_match(a in text(), f in 0..3usize, g in 0..3usize) {
            prop_assume!(f != g);
            let files = ["x.py", "y.sql", "z.rs"];
            let (x, y) = (format!("run {} {a}", files[f]), format!("run {} {a}", files[g]));
            let (sx, sy) = (
                compared_text(Channel::ToolCall, Part::Main, &x, 500),
                compared_text(Channel::ToolCall, Part::Main, &y, 500),
            );
            prop_assert_eq!(rule_score(Channel::ToolCall, Part::Main, &sx, &sy, Some(1.0)), f32::NEG_INFINITY);
        }

        /// An exact repeat of `a` is also the same as every rewording the window linked to `a`,
        /// without the model being asked.
        #[test]
        fn exact_repeats_inherit_the_identity_of_rewordings(out in text()) {
            let mut s = Scene::new();
            s.push(bash("python reproduce.py", &out));
            s.push(bash("python  reproduce.py ", &out));
            let b = s.state.window.back().unwrap();
            prop_assume!(b.is_same_as(1));
            let p = s.probe(bash("python reproduce.py", &out));
            prop_assert!(p.entry.is_same_as(1) && p.entry.is_same_as(2), "{:?}", p.entry.same_as);
        }
    }

    #[test]
    fn identity_passes_between_rewordings_only_when_they_nearly_match() {
        let mut s = Scene::new();
        let out = "Traceback: KeyError 'name'";
        s.push(bash("python reproduce.py", out));
        s.push(bash("cd /testbed && python reproduce.py", out));
        s.push(bash("ls", "reproduce.py"));
        let p = s.probe(bash("python reproduce.py", out));
        assert!(
            p.entry.is_same_as(1) && p.entry.is_same_as(2),
            "{:?}",
            p.entry.same_as
        );
        assert!(!p.entry.is_same_as(3));
    }
}
