//! `same_error` / `result_repeat` by outcome: the same attempt, however reworded, ending where it
//! ended before.
//!
//! Real agents rarely repeat a call word for word when they are stuck. They re-send an edit with
//! a shifted line range that the linter rejects with the same error, guess one path after
//! another and get "No such file" each time, re-run a test between rewordings of one change and
//! get the same failure. The calls differ and so do the outputs (a preview of the rejected edit,
//! the guessed name), so identity of calls and results misses them; what stays the same is the
//! call's *outcome* — its error lines ([`crate::signature::Outcome`]).
//!
//! Two shapes are a loop, each at `detect.dead_ends.occurrences` occurrences:
//!
//! 1. **The same attempt, the same dead end**: within the last `same_attempt_window` work events,
//!    calls that are the same attempt (equal but for numbers, or a cosine of at least
//!    `attempt_similarity`) ending in the same outcome (its error lines equal; or equal but for
//!    a quoted name when the call itself did not change: the same edit failing on `'a'` then on
//!    `'b'` has learned nothing, while a changed call failing on the next name has moved on).
//! 2. **One step failing the same way between rewordings of one change**: within the last
//!    `span_window` work events, the same attempt ending in exactly the same error lines, with
//!    everything between being rewordings of one another (edit, run, the edit reworded, run...):
//!    the same call but for numbers, or what differs between two edits (their texts without the
//!    prefix and suffix they share, [`changed_parts`]) at a cosine of `change_similarity`.
//!    A different change between runs — a debugging script, a file read, another fix — is new
//!    work, and the same failure after it is the next step of an investigation, not a loop.
//!
//! Different attempts ending in the same dead end (three different ways to run the tests, all
//! "No module named pytest") are what a careful reader hesitates on: [`different_attempts`]
//! names them for the judge rather than calling them a loop.

use super::{Ctx, Finding};
use crate::config::DeadEnds;
use crate::embed::cosine;
use crate::signature::{classify, digits_masked, key64, ErrorType, Outcome};
use crate::state::{Entry, EntryBody, TaskState, TextSig};
use crate::verdict::LoopKind;

/// A tool call with its outcome, as the rules compare them.
struct Attempt<'a> {
    seq: u64,
    call: &'a TextSig,
    outcome: Option<&'a Outcome>,
    failed: bool,
}

fn attempt(e: &Entry) -> Option<Attempt<'_>> {
    match &e.body {
        EntryBody::ToolCall {
            call,
            result,
            passive: false,
            ..
        } => Some(Attempt {
            seq: e.seq,
            call,
            outcome: result.as_ref().and_then(|r| r.outcome.as_ref()),
            failed: result.as_ref().is_some_and(|r| r.failed),
        }),
        _ => None,
    }
}

/// The call's prepared text with every digit run masked: an edit re-sent at another line range
/// has the same key.
fn digitless_key(text: &str) -> u64 {
    key64(&digits_masked(text))
}

fn same_by_keys(a: &TextSig, b: &TextSig) -> bool {
    a.exact == b.exact || a.norm == b.norm || digitless_key(&a.text) == digitless_key(&b.text)
}

/// Are two calls the same attempt? Equal but for numbers, or close by cosine. No resource or
/// numbers guard here: the outcome, not the call, says whether anything changed.
fn same_attempt(cfg: &DeadEnds, a: &TextSig, b: &TextSig) -> bool {
    if same_by_keys(a, b) {
        return true;
    }
    match (&a.vector, &b.vector) {
        (Some(va), Some(vb)) => cosine(va, vb) >= cfg.attempt_similarity,
        _ => false,
    }
}

/// The last `n` work events before the new one, newest first (tool calls and failures alike:
/// a failure between two calls is something that happened).
pub(super) fn recent_work(state: &TaskState, n: usize) -> Vec<&Entry> {
    state
        .window
        .iter()
        .rev()
        .filter(|e| e.is_work() && !e.is_passive())
        .take(n)
        .collect()
}

/// Window entries whose calls the rules may compare with the new one: the link stage embeds
/// them (most are cached) when the new call ended in an outcome seen recently.
pub fn wanted(cfg: &DeadEnds, state: &TaskState, entry: &Entry) -> Vec<u64> {
    let Some(new) = attempt(entry) else {
        return Vec::new();
    };
    let Some(o) = new.outcome else {
        return Vec::new();
    };
    let reach = cfg.span_window.max(cfg.same_attempt_window);
    let recent = recent_work(state, reach.saturating_sub(1));
    // Calls whose keys already say "the same attempt" need no vector: an exact repeat stays on
    // the fast path.
    let candidates: Vec<u64> = recent
        .iter()
        .filter_map(|e| attempt(e))
        .filter(|a| a.outcome.is_some_and(|p| p.template == o.template))
        .filter(|a| !same_by_keys(a.call, new.call))
        .map(|a| a.seq)
        .collect();
    let alike = recent
        .iter()
        .filter_map(|e| attempt(e))
        .filter(|a| a.outcome.is_some_and(|p| p.template == o.template))
        .count();
    if alike + 1 < cfg.occurrences.max(2) {
        return Vec::new();
    }
    if candidates.is_empty() {
        // Every candidate is the same attempt by keys; the span rule may still compare what is
        // between them.
        return recent
            .iter()
            .filter(|e| attempt(e).is_some_and(|a| a.outcome.is_none_or(|p| p.exact != o.exact)))
            .map(|e| e.seq)
            .collect();
    }
    recent
        .iter()
        .filter(|e| attempt(e).is_some())
        .map(|e| e.seq)
        .collect()
}

fn finding(ctx: &Ctx<'_>, new: &Attempt<'_>, matched: u64, n: usize, how: &str) -> Finding {
    let outcome = new.outcome.map(|o| o.text.as_str()).unwrap_or("");
    let negative_only = !new.failed
        && matches!(&ctx.entry.body, EntryBody::ToolCall { result: Some(r), .. } if r.negative)
        && !outcome.to_lowercase().contains("error");
    let kind = if negative_only {
        LoopKind::ResultRepeat
    } else {
        LoopKind::SameError
    };
    let mut f = Finding::new(
        kind,
        format!("{n} attempts {how} ended the same way as seq {matched}: {outcome}"),
    );
    f.matched = Some(matched);
    f
}

pub fn detect(ctx: &Ctx<'_>) -> Option<Finding> {
    let cfg = &ctx.cfg.dead_ends;
    let new = attempt(ctx.entry)?;
    let o = new.outcome?;
    let need = cfg.occurrences.max(2);

    // 1. The same attempt ending the same way, nearly consecutively.
    let close: Vec<Attempt<'_>> = recent_work(ctx.state, cfg.same_attempt_window.saturating_sub(1))
        .into_iter()
        .filter_map(attempt)
        .filter(|a| match a.outcome {
            // The same error after the same attempt, reworded or not.
            Some(p) if p.exact == o.exact => same_attempt(cfg, a.call, new.call),
            // The same kind of error about another name: only when the attempt itself did not
            // change (one line inserted at another place, the linter pointing at another name);
            // an attempt that changed and now fails on something else has moved on.
            Some(p) if p.template == o.template => same_by_keys(a.call, new.call),
            _ => false,
        })
        .collect();
    if close.len() + 1 >= need {
        return Some(finding(
            ctx,
            &new,
            close[0].seq,
            close.len() + 1,
            "at the same step, reworded or not,",
        ));
    }

    // 1b. Back to an attempt already rejected: the very call re-sent with the very error it got
    //     before, and every attempt between rejected the same way (`'a'` undefined, then `'b'`,
    //     then the first edit again). The variants between learned nothing; returning to one
    //     already refused is the loop, even at two occurrences of it.
    if let Some((earlier, between)) = back_to_a_rejected_attempt(ctx.state, cfg, &new, o) {
        if between + 2 >= need {
            return Some(finding(
                ctx,
                &new,
                earlier,
                between + 2,
                "at the same step, back to one already rejected,",
            ));
        }
    }

    // 1c. Attempts in a row ending in exactly the same error, one of them re-sent unchanged
    //     (one edit sent twice, then a variant, all the same IndentationError). Different
    //     attempts at one dead end are a judge question while each is new; once one of them
    //     is re-sent and refused again, the agent is not ruling options out.
    if let Some((earlier, row)) = rejected_again_in_a_row(ctx.state, ctx.cfg.window, &new, o) {
        if row >= need {
            return Some(finding(
                ctx,
                &new,
                earlier,
                row,
                "in a row, one of them sent again after it was rejected,",
            ));
        }
    }

    // 1d. Calls refused as written, in a row, the same refusal each time (a shell syntax error
    //     on the same unquoted parenthesis, `ls: invalid option -- '.'`): none of them ran, so
    //     there was nothing to learn but the refusal, and the form was never fixed.
    if o.refused {
        let row = attempts_in_a_row(ctx.state, o, ctx.cfg.window);
        if row.len() + 1 >= need {
            return Some(finding(
                ctx,
                &new,
                row[0],
                row.len() + 1,
                "in a row, each refused as written before it ran,",
            ));
        }
    }

    // 2. One step failing exactly the same way, with only rewordings of one change between.
    let span = span(ctx);
    if let Some(span) = span.as_ref().filter(|s| s.rewordings) {
        return Some(finding(
            ctx,
            &new,
            span.members[0],
            span.members.len() + 1,
            "at one step, with only rewordings of one change between,",
        ));
    }

    // 2b. One step failing with the same kind of error, each time about the name the change
    //     before it tried (`no attribute 'parse_report'` after an edit calling `parse_report`,
    //     then `'report'` after one calling `report`): guess after guess, each refused by name.
    //     A name the change did not write is the next problem found, not a guess refused.
    let guesses = guesses_refused_by_name(cfg, ctx.state, &new, o);
    if guesses.len() + 1 >= need {
        return Some(finding(
            ctx,
            &new,
            guesses[0],
            guesses.len() + 1,
            "at one step, each refused by the name the change before it tried,",
        ));
    }

    // 2c. The very same run (a test, a script, unchanged) failing exactly the same way again and
    //     again with other work between: whatever was changed never reached the failure. A
    //     debugging script rewritten between runs is another call each time and stays a
    //     question; so do different calls rejected alike (edits refused by one linter error).
    //     Counted from `occurrences` up: fewer runs are not yet a dead end at all.
    if cfg.unmoved_reruns > 0 {
        let reruns = unmoved_reruns(cfg, ctx.state, &new, o);
        if reruns.len() + 1 >= cfg.unmoved_reruns.max(need) {
            return Some(finding(
                ctx,
                &new,
                reruns[0],
                reruns.len() + 1,
                "as the same call, other work between each, none of it reaching the failure,",
            ));
        }
    }

    // 3. What is a question for the judge at `occurrences` is an answer when it goes on: the
    //    same dead end reached again and again, whatever was tried or changed.
    let persistent = cfg.persistent_occurrences;
    if persistent >= need {
        let in_a_row = attempts_in_a_row(ctx.state, o, ctx.cfg.window);
        if in_a_row.len() + 1 >= persistent {
            return Some(finding(
                ctx,
                &new,
                in_a_row[0],
                in_a_row.len() + 1,
                "in a row, each a different one,",
            ));
        }
        if let Some(span) = span.filter(|s| s.members.len() + 1 >= persistent) {
            return Some(finding(
                ctx,
                &new,
                span.members[0],
                span.members.len() + 1,
                "at one step, whatever was changed between,",
            ));
        }
    }
    None
}

/// The same call (by keys) ending in exactly the new outcome earlier within the same-attempt
/// window, with at least one work event between and every one of them an attempt rejected with
/// the same kind of error (the outcome's template). Returns that earlier call's seq and how many
/// attempts are between.
fn back_to_a_rejected_attempt(
    state: &TaskState,
    cfg: &DeadEnds,
    new: &Attempt<'_>,
    o: &Outcome,
) -> Option<(u64, usize)> {
    let recent = recent_work(state, cfg.same_attempt_window.saturating_sub(1));
    for (between, e) in recent.into_iter().enumerate() {
        let a = attempt(e)?;
        let p = a.outcome?;
        if p.exact == o.exact && same_by_keys(a.call, new.call) {
            return (between > 0).then_some((a.seq, between));
        }
        if p.template != o.template {
            return None;
        }
    }
    None
}

/// The attempts right before the new one ending in exactly its error, stopping at the first
/// work event that did not, when two of them (the new one included) are the same call. Returns
/// the older of that pair and the row's length, the new attempt included.
fn rejected_again_in_a_row(
    state: &TaskState,
    reach: usize,
    new: &Attempt<'_>,
    o: &Outcome,
) -> Option<(u64, usize)> {
    let row: Vec<Attempt<'_>> = recent_work(state, reach)
        .into_iter()
        .map_while(|e| attempt(e).filter(|a| a.outcome.is_some_and(|p| p.exact == o.exact)))
        .collect();
    let all: Vec<&Attempt<'_>> = std::iter::once(new).chain(row.iter()).collect();
    let same = |a: &Attempt<'_>, b: &Attempt<'_>| same_by_keys(a.call, b.call);
    // Newest first: the first pair found has the newest re-send; report its original.
    all.iter().enumerate().find_map(|(i, a)| {
        all[i + 1..]
            .iter()
            .find(|b| same(a, b))
            .map(|b| (b.seq, all.len()))
    })
}

/// Does `text` hold `name` as a word of its own (`parse` in `m.parse(x)`, not in `parse_report`
/// nor a one-letter name inside any word)?
fn names_word(text: &str, name: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(name).any(|(i, _)| {
        !text[..i].chars().next_back().is_some_and(ident)
            && !text[i + name.len()..].chars().next().is_some_and(ident)
    })
}

/// Earlier runs of the new call (by keys), newest first, each ending in the outcome's template
/// about other names, with calls between every two runs, and the names new in the later run of
/// each pair written by one of those calls (the change made before it). Stops at the first run
/// that does not fit.
fn guesses_refused_by_name(
    cfg: &DeadEnds,
    state: &TaskState,
    new: &Attempt<'_>,
    o: &Outcome,
) -> Vec<u64> {
    let mut runs = Vec::new();
    let (mut later_names, mut later_exact) = (&o.names, o.exact);
    let mut between: Vec<&TextSig> = Vec::new();
    for e in recent_work(state, cfg.span_window.saturating_sub(1)) {
        match attempt(e) {
            Some(a) if same_by_keys(a.call, new.call) => {
                let Some(p) = a
                    .outcome
                    .filter(|p| p.template == o.template && p.exact != later_exact)
                else {
                    break;
                };
                let mut tried = later_names
                    .iter()
                    .filter(|n| !p.names.contains(n))
                    .peekable();
                let written = tried.peek().is_some()
                    && tried.all(|n| between.iter().any(|c| names_word(&c.text, n)));
                if !written {
                    break;
                }
                runs.push(e.seq);
                (later_names, later_exact) = (&p.names, p.exact);
                between.clear();
            }
            Some(a) => between.push(a.call),
            None => {}
        }
    }
    runs
}

/// The same error lines as written, numbers included: not only the same failure (`exact`, numbers
/// masked) but one that did not move — a count of failures going down or an assertion with other
/// values has.
fn unmoved(p: &Outcome, o: &Outcome) -> bool {
    p.exact == o.exact && p.text == o.text
}

/// Earlier runs of the new call (by keys) within the rerun window ending in the very error lines
/// of the new one, newest first, counted only while other work separates every two of them (runs
/// back to back are the exact-repeat detectors' case). The error lines are compared as written,
/// numbers included: a test failing on the same assertion with other values, or a count of
/// failures going down, has moved; what else the run prints (a debugging line added) may change.
fn unmoved_reruns(cfg: &DeadEnds, state: &TaskState, new: &Attempt<'_>, o: &Outcome) -> Vec<u64> {
    let mut runs = Vec::new();
    let mut work_since = 0usize;
    // Looking further back than the span rule: a test re-run between fixes comes every few
    // events, and error lines unchanged as written are evidence enough at that distance.
    let reach = if cfg.rerun_window > 0 {
        cfg.rerun_window
    } else {
        cfg.span_window
    };
    for e in recent_work(state, reach.saturating_sub(1)) {
        match attempt(e) {
            Some(a) if same_by_keys(a.call, new.call) => {
                let same = a.outcome.is_some_and(|p| unmoved(p, o));
                if work_since == 0 || !same {
                    break;
                }
                runs.push(a.seq);
                work_since = 0;
            }
            _ => work_since += 1,
        }
    }
    runs
}

/// The attempts right before the new one that ended in exactly its outcome, newest first,
/// stopping at the first work event that did not.
fn attempts_in_a_row(state: &TaskState, o: &Outcome, reach: usize) -> Vec<u64> {
    recent_work(state, reach)
        .into_iter()
        .map_while(|e| attempt(e).filter(|a| a.outcome.is_some_and(|p| p.exact == o.exact)))
        .map(|a| a.seq)
        .collect()
}

/// The same step (a test run) ending in exactly the same error `occurrences` times within the
/// span window, with other work between its runs.
struct Span {
    /// The earlier runs, newest first.
    members: Vec<u64>,
    /// Whether everything between the runs rewords something else between (one change tried
    /// again and again) rather than being different work.
    rewordings: bool,
}

/// The runs of the same step ending exactly as the new event did, within the span window, and
/// the work events between them (tool calls, oldest member onwards), or `None` when there are
/// not enough runs or nothing between them.
fn span_parts<'s>(
    cfg: &DeadEnds,
    state: &'s TaskState,
    entry: &Entry,
) -> Option<(Vec<u64>, Vec<&'s Entry>)> {
    let new = attempt(entry)?;
    let o = new.outcome?;
    let recent = recent_work(state, cfg.span_window.saturating_sub(1));
    let is_member = |e: &Entry| {
        attempt(e).is_some_and(|a| {
            a.outcome.is_some_and(|p| p.exact == o.exact) && same_attempt(cfg, a.call, new.call)
        })
    };
    let members: Vec<u64> = recent
        .iter()
        .filter(|e| is_member(e))
        .map(|e| e.seq)
        .collect();
    if members.len() + 1 < cfg.occurrences.max(2) {
        return None;
    }
    let oldest = *members.iter().min()?;
    let between: Vec<&Entry> = recent
        .into_iter()
        .filter(|e| e.seq > oldest && !members.contains(&e.seq))
        .collect();
    (!between.is_empty()).then_some((members, between))
}

/// What differs between two texts: each without the prefix and suffix they share. Two edits of
/// one file by one tool share most of their words (the tool, the path, the argument names); what
/// the change is about is what is left.
pub fn changed_parts(a: &str, b: &str) -> (String, String) {
    let prefix = a
        .char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or(a.len().min(b.len()), |((i, _), _)| i);
    let (ra, rb) = (&a[prefix..], &b[prefix.min(b.len())..]);
    let suffix = ra
        .chars()
        .rev()
        .zip(rb.chars().rev())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x.len_utf8())
        .sum::<usize>();
    (
        ra[..ra.len() - suffix.min(ra.len())].to_string(),
        rb[..rb.len() - suffix.min(rb.len())].to_string(),
    )
}

/// Pairs of calls between the runs of a failing step whose *changes* the span rule compares:
/// `(seq, seq, what differs in the first, what differs in the second)`. The link stage embeds
/// the texts and hands the cosines to the detectors ([`Ctx::change_cosines`]). Identical calls
/// need no cosine.
pub fn changes_to_compare(
    cfg: &DeadEnds,
    state: &TaskState,
    entry: &Entry,
) -> Vec<(u64, u64, String, String)> {
    let Some((_, between)) = span_parts(cfg, state, entry) else {
        return Vec::new();
    };
    let calls: Vec<(u64, &TextSig)> = between
        .iter()
        .filter_map(|e| attempt(e).map(|a| (a.seq, a.call)))
        .collect();
    if calls.len() != between.len() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (i, (sa, a)) in calls.iter().enumerate() {
        for (sb, b) in &calls[i + 1..] {
            if same_by_keys(a, b) {
                continue;
            }
            let (da, db) = changed_parts(&a.text, &b.text);
            if !da.trim().is_empty() && !db.trim().is_empty() {
                out.push((*sa, *sb, da, db));
            }
        }
    }
    out
}

fn span(ctx: &Ctx<'_>) -> Option<Span> {
    let cfg = &ctx.cfg.dead_ends;
    let (members, between) = span_parts(cfg, ctx.state, ctx.entry)?;
    let calls: Vec<(u64, &TextSig)> = between
        .iter()
        .filter_map(|e| attempt(e).map(|a| (a.seq, a.call)))
        .collect();
    let alike = |(sa, a): &(u64, &TextSig), (sb, b): &(u64, &TextSig)| {
        same_by_keys(a, b)
            || ctx.change_cosines.iter().any(|(x, y, c)| {
                ((x == sa && y == sb) || (x == sb && y == sa)) && *c >= cfg.change_similarity
            })
    };
    // Everything between the runs must be a call that rewords another call between: one
    // change, tried again and again.
    let rewordings = calls.len() == between.len()
        && calls
            .iter()
            .enumerate()
            .all(|(i, c)| calls.iter().enumerate().any(|(j, d)| i != j && alike(c, d)));
    Some(Span {
        members,
        rewordings,
    })
}

/// The same step failing exactly the same way after *different* changes (three fixes, the same
/// failure each time): ambiguous — superficial fixes going nowhere, or an investigation ruling
/// options out? Returns the earlier runs, newest first. "The same way" is the error lines as
/// written, numbers included: a failure whose counts or values moved after a change was reached
/// by it, which is not a question worth a judge's call. The very same call failing that way
/// with any other work between is found further back, within `rerun_window` (rule 2c's runs
/// before they are enough for a loop).
pub fn different_changes(ctx: &Ctx<'_>) -> Option<Vec<u64>> {
    let cfg = &ctx.cfg.dead_ends;
    let need = cfg.occurrences.max(2);
    let new = attempt(ctx.entry)?;
    let o = new.outcome?;
    let span = span(ctx);
    if span.as_ref().is_some_and(|s| s.rewordings) {
        return None;
    }
    let verbatim: Vec<u64> = span
        .map(|s| s.members)
        .unwrap_or_default()
        .into_iter()
        .filter(|&seq| {
            (ctx.state.entry(seq).and_then(attempt))
                .and_then(|a| a.outcome)
                .is_some_and(|p| unmoved(p, o))
        })
        .collect();
    if verbatim.len() + 1 >= need {
        return Some(verbatim);
    }
    // The very same run, further back (rule 2c's window): below `unmoved_reruns` it is this
    // question, at it a loop.
    if cfg.unmoved_reruns == 0 {
        return None;
    }
    let reruns = unmoved_reruns(cfg, ctx.state, &new, o);
    (reruns.len() + 1 >= need).then_some(reruns)
}

/// Calls that timed out, `n` of them within the span window with anything between: ambiguous —
/// the agent relaunching something that blocks (a server, a prompt waiting for input) in one
/// wrapper after another, or narrowing the cause down? A call that timed out brought nothing
/// back to learn from, so unlike other dead ends the work between does not make the next one
/// new; a reader of the attempts can tell. Returns the earlier calls that timed out, newest
/// first.
pub fn timeouts(ctx: &Ctx<'_>, n: usize) -> Option<Vec<u64>> {
    let timed_out = |a: &Attempt<'_>| {
        a.outcome
            .is_some_and(|o| classify(&o.text, None) == ErrorType::Timeout)
    };
    let new = attempt(ctx.entry)?;
    if n == 0 || !timed_out(&new) {
        return None;
    }
    let seqs: Vec<u64> = recent_work(ctx.state, ctx.cfg.dead_ends.span_window.saturating_sub(1))
        .into_iter()
        .filter_map(attempt)
        .filter(timed_out)
        .map(|a| a.seq)
        .collect();
    (seqs.len() + 1 >= n).then_some(seqs)
}

/// Different attempts ending in exactly the same dead end, one after another: ambiguous (three
/// ways to run the tests, all "No module named pytest" — stuck, or ruling options out?). Returns
/// the earlier attempts' seqs, newest first, for the judge's question.
pub fn different_attempts(ctx: &Ctx<'_>) -> Option<Vec<u64>> {
    let cfg = &ctx.cfg.dead_ends;
    let new = attempt(ctx.entry)?;
    let o = new.outcome?;
    let need = cfg.occurrences.max(2);
    let recent = recent_work(ctx.state, need - 1);
    let seqs: Vec<u64> = recent
        .iter()
        .filter_map(|e| attempt(e))
        .filter(|a| a.outcome.is_some_and(|p| p.exact == o.exact))
        .map(|a| a.seq)
        .collect();
    (seqs.len() + 1 >= need && recent.len() == seqs.len()).then_some(seqs)
}

#[cfg(test)]
mod tests {
    use super::{detect, different_attempts, different_changes, timeouts};
    use crate::detect::testkit::{bash, Scene};
    use crate::verdict::LoopKind;
    use serde_json::json;

    fn edit(range: &str, body: &str, error: &str) -> serde_json::Value {
        json!({"type": "tool_call", "tool": "edit", "args": {"command": format!("edit {range}\n{body}\nend_of_edit")},
               "result": {"output": format!("Your proposed edit has introduced new syntax error(s).\nERRORS:\n- {error}\n\nThis is how your edit would have looked if applied\n[File: /r/a.py ({range} lines total)]\n1:{body}\n"), "is_error": false}})
    }

    #[test]
    fn an_edit_re_sent_at_other_ranges_with_the_same_linter_error_is_a_loop() {
        let mut s = Scene::new();
        let err = "E999 IndentationError: unexpected indent";
        assert!(s
            .detect(detect, edit("24:24", "import shutil", err))
            .is_none());
        assert!(s
            .detect(detect, edit("33:33", "import shutil", err))
            .is_none());
        let f = s
            .detect(detect, edit("38:38", "import shutil", err))
            .expect("the third attempt");
        assert_eq!(f.kind, LoopKind::SameError);
        assert_eq!(f.matched, Some(2));
        assert!(f.reason.contains("IndentationError"), "{}", f.reason);
    }

    #[test]
    fn the_same_test_failing_between_rewordings_of_one_fix_is_a_loop() {
        let mut s = Scene::new();
        let fail = "Traceback (most recent call last):\n  File \"t.py\", line 3\nAssertionError: 'x' should map to 'y'";
        for k in 0..2 {
            s.push(edit(
                &format!("5:{}", 7 + k),
                "def code(w): return MAP[w]",
                "none",
            ));
            assert!(s.detect(detect, bash("python test_map.py", fail)).is_none());
        }
        s.push(edit("5:11", "def code(w): return MAP[w]", "none"));
        let f = s
            .detect(detect, bash("python test_map.py", fail))
            .expect("third run");
        assert_eq!(f.kind, LoopKind::SameError);
    }

    #[test]
    fn a_failure_after_different_work_is_the_next_step_not_a_loop() {
        let mut s = Scene::new();
        let fail = "KeyError: 'name'";
        for probe in ["cat config.py", "grep -rn name src", "python debug_keys.py"] {
            s.push(bash(probe, "some new information"));
            assert!(s.detect(detect, bash("python run.py", fail)).is_none());
        }
    }

    #[test]
    fn another_name_after_a_change_that_worked_is_progress() {
        let mut s = Scene::new();
        for m in ["a", "b", "c"] {
            let f = s.detect(
                detect,
                bash(
                    "python run.py",
                    &format!("ModuleNotFoundError: No module named '{m}'"),
                ),
            );
            assert!(f.is_none());
            s.push(bash(&format!("pip install {m}"), "Successfully installed"));
        }
    }

    #[test]
    fn one_step_refusing_each_name_the_change_before_it_tried_is_a_loop() {
        let edit = |name: &str| {
            bash(
                &format!("cat > reproduce.py <<EOF\nfrom metar import Metar\nm = Metar.{name}(report)\nEOF"),
                "",
            )
        };
        let run = |name: &str| {
            bash(
                "python reproduce.py",
                &format!("METAR WSSS: module 'metar.Metar' has no attribute '{name}'"),
            )
        };
        let mut s = Scene::new();
        for name in ["parse_report", "report"] {
            s.push(edit(name));
            s.push(run(name));
        }
        s.push(edit("parse"));
        let f = s
            .detect(detect, run("parse"))
            .expect("the third guess refused by name is a loop");
        assert!(f.reason.contains("refused by the name"), "{}", f.reason);

        // The names the errors give were not written by the changes between: each run finds
        // the next thing missing, which is progress.
        let mut s = Scene::new();
        for (wrote, missing) in [("a", "x"), ("b", "y")] {
            s.push(edit(wrote));
            s.push(run(missing));
        }
        s.push(edit("c"));
        assert!(s.detect(detect, run("z")).is_none());
    }

    #[test]
    fn calls_refused_as_written_in_a_row_are_a_loop() {
        let refused = |cmd: &str| {
            bash(
                cmd,
                &format!("/bin/bash: line 1: syntax error near unexpected token `('\n/bin/bash: line 1: `{cmd}'"),
            )
        };
        let mut s = Scene::new();
        s.push(refused("edit 1:2: f(a, b)"));
        s.push(refused("edit 1:2: g(a)"));
        let f = s
            .detect(detect, refused("edit 1:2: h()"))
            .expect("the third refusal in a row is a loop");
        assert!(f.reason.contains("refused as written"), "{}", f.reason);

        // Something that ran between breaks the row.
        let mut s = Scene::new();
        s.push(refused("edit 1:2: f(a, b)"));
        s.push(bash(
            "open a.py",
            "[File: /r/a.py (3 lines total)]\n1:x = 1",
        ));
        s.push(refused("edit 1:2: g(a)"));
        assert!(s.detect(detect, refused("edit 1:2: h()")).is_none());
    }

    #[test]
    fn a_dead_end_reached_by_attempt_after_attempt_is_a_loop_once_persistent() {
        let none = "ModuleNotFoundError: No module named 'pytest'";
        let tries = [
            "python -m pytest tests",
            "python -c 'import pytest'",
            "python -m unittest discover",
            "python setup.py test",
        ];
        for (persistent, fires_at) in [(0, None), (4, Some(3)), (5, None)] {
            let mut s = Scene::with(|c| c.detect.dead_ends.persistent_occurrences = persistent);
            let mut fired = None;
            for (i, t) in tries.iter().enumerate() {
                if let Some(f) = s.detect(detect, bash(t, none)) {
                    assert_eq!(f.kind, LoopKind::SameError);
                    assert!(f.reason.contains("each a different one"), "{}", f.reason);
                    fired = fired.or(Some(i));
                }
            }
            assert_eq!(fired, fires_at, "persistent_occurrences = {persistent}");
        }
        // Something else between breaks the row.
        let mut s = Scene::with(|c| c.detect.dead_ends.persistent_occurrences = 4);
        for (i, t) in tries.iter().enumerate() {
            if i == 2 {
                s.push(bash("pip install pytest", "Successfully installed pytest"));
            }
            assert!(s.detect(detect, bash(t, none)).is_none());
        }
    }

    #[test]
    fn unmoved_reruns_are_looked_for_within_the_rerun_window() {
        // Four runs three work events apart span ten events: seen at a window of 10, not 9; a
        // window of 0 is the span rule's.
        let run = |s: &mut Scene| s.detect(detect, bash("python run.py", "KeyError: 'name'"));
        for (rerun_window, span_window, fires) in [(10, 9, true), (9, 9, false), (0, 10, true)] {
            let mut s = Scene::with(|c| {
                c.detect.dead_ends.rerun_window = rerun_window;
                c.detect.dead_ends.span_window = span_window;
            });
            assert!(run(&mut s).is_none());
            // Different work each time: rewordings of one change between would be rule 2's.
            let work = [
                ("cat config.py", "name = None"),
                ("grep -rn name src", "src/a.py: name = cfg.name"),
                ("git diff", "+ name = cfg.get('name')"),
                ("ls tests", "test_run.py"),
                ("pip show pyyaml", "Version: 6.0"),
                ("sed -n 1,20p run.py", "import cfg"),
            ];
            for k in 0..3 {
                for (probe, output) in &work[2 * k..2 * k + 2] {
                    s.push(bash(probe, output));
                }
                let f = run(&mut s);
                if k == 2 {
                    assert_eq!(f.is_some(), fires, "rerun_window {rerun_window}");
                } else {
                    assert!(f.is_none());
                }
            }
        }
    }

    #[test]
    fn the_same_run_failing_the_very_same_way_after_work_after_work_is_a_loop() {
        let probes = ["cat config.py", "grep -rn name src", "sed -n 1,20p run.py"];
        let run = |s: &mut Scene, fail: &str| s.detect(detect, bash("python run.py", fail));
        // 2 counts as `occurrences` (3): fewer runs are not a dead end at all.
        for (reruns, fires_at) in [(4, Some(2)), (2, Some(1)), (0, None), (5, None)] {
            let mut s = Scene::with(|c| c.detect.dead_ends.unmoved_reruns = reruns);
            assert!(run(&mut s, "KeyError: 'name' at row 7").is_none());
            for (i, probe) in probes.iter().enumerate() {
                s.push(bash(probe, "some new information"));
                let f = run(&mut s, "KeyError: 'name' at row 7");
                if fires_at.is_some_and(|at| i >= at) {
                    let f = f.expect("an unmoved run past the count");
                    assert_eq!(f.kind, LoopKind::SameError);
                    assert!(f.reason.contains("none of it reaching"), "{}", f.reason);
                } else {
                    assert!(f.is_none(), "unmoved_reruns = {reruns}, run {}", i + 2);
                }
            }
        }
        // The error's numbers move (another row each time): the work reached the failure.
        let mut s = Scene::new();
        assert!(run(&mut s, "KeyError: 'name' at row 7").is_none());
        for (probe, row) in probes.iter().zip([9, 12, 15]) {
            s.push(bash(probe, "some new information"));
            assert!(run(&mut s, &format!("KeyError: 'name' at row {row}")).is_none());
        }
        // One run back to back with the one before it is not counted: nothing happened between.
        let mut s = Scene::new();
        assert!(run(&mut s, "KeyError: 'name' at row 7").is_none());
        s.push(bash(probes[0], "some new information"));
        assert!(run(&mut s, "KeyError: 'name' at row 7").is_none());
        assert!(run(&mut s, "KeyError: 'name' at row 7")
            .is_none_or(|f| !f.reason.contains("none of it reaching")));
        s.push(bash(probes[1], "some new information"));
        assert!(run(&mut s, "KeyError: 'name' at row 7")
            .is_none_or(|f| !f.reason.contains("none of it reaching")));
    }

    #[test]
    fn going_back_to_an_edit_already_rejected_is_a_loop() {
        let first = edit(
            "23:23",
            "speed_limit=num_rows + 1)",
            "F821 undefined name 'num_rows'",
        );
        let mut s = Scene::new();
        assert!(s.detect(detect, first.clone()).is_none());
        let variant = edit(
            "23:23",
            "speed_limit=self._num_rows + 1)",
            "F821 undefined name 'self'",
        );
        assert!(s.detect(detect, variant).is_none());
        let f = s
            .detect(detect, first.clone())
            .expect("back to the first edit");
        assert_eq!(f.kind, LoopKind::SameError);
        assert_eq!(f.matched, Some(1));
        assert!(f.reason.contains("already rejected"), "{}", f.reason);

        // A variant rejected for another reason, or one that went through, is something learned:
        // trying the first edit again after it is not yet a loop.
        for between in [
            edit(
                "23:24",
                "speed_limit=rows +",
                "E999 SyntaxError: invalid syntax",
            ),
            edit("27:27", "self._speed_limit = num_rows + 1", "none"),
        ] {
            let mut s = Scene::new();
            assert!(s.detect(detect, first.clone()).is_none());
            assert!(s.detect(detect, between).is_none());
            assert!(s.detect(detect, first.clone()).is_none());
        }
    }

    #[test]
    fn one_edit_sent_twice_then_a_variant_all_refused_the_same_way_is_a_loop() {
        let err = "E999 IndentationError: unexpected indent";
        let mut s = Scene::new();
        assert!(s
            .detect(detect, edit("171:179", "tmp = None", err))
            .is_none());
        assert!(s
            .detect(detect, edit("171:179", "tmp = None", err))
            .is_none());
        let f = s
            .detect(
                detect,
                edit("172:184", "with tempfile.NamedTemporaryFile() as f:", err),
            )
            .expect("a variant after the re-send, refused the same way");
        assert_eq!(f.kind, LoopKind::SameError);
        assert!(
            f.reason.contains("sent again after it was rejected"),
            "{}",
            f.reason
        );
        assert_eq!(f.matched, Some(1));

        // Three different attempts, one error: a question for the judge, not an alarm.
        let mut s = Scene::new();
        for body in ["tmp = None", "with open(p) as f:", "for x in xs:"] {
            assert!(s.detect(detect, edit("171:179", body, err)).is_none());
        }
        // A variant refused with another error first, then one edit sent twice: the same error
        // only twice.
        let mut s = Scene::new();
        let other = "E999 SyntaxError: unmatched ']'";
        assert!(s
            .detect(detect, edit("287:295", "xs = [1, 2", other))
            .is_none());
        let twice = "E999 SyntaxError: unmatched ')'";
        assert!(s.detect(detect, edit("287:295", "f(xs", twice)).is_none());
        assert!(s.detect(detect, edit("287:295", "f(xs", twice)).is_none());
    }

    #[test]
    fn the_same_failure_after_different_changes_is_for_the_judge_unless_it_moved() {
        let fixes = [
            "sed -i s/a/b/ x.py",
            "sed -i s/c/d/ y.py",
            "sed -i s/e/f/ z.py",
        ];
        let asked = |fails: [&str; 3]| {
            let mut s = Scene::new();
            s.push(bash("python run.py", fails[0]));
            s.push(bash(fixes[0], "done"));
            s.push(bash("python run.py", fails[1]));
            s.push(bash(fixes[1], "done"));
            let p = s.probe(bash("python run.py", fails[2]));
            let ctx = s.ctx(&p);
            assert!(detect(&ctx).is_none());
            different_changes(&ctx)
        };
        let same = "AssertionError: width 31 != 40";
        assert_eq!(asked([same; 3]), Some(vec![3, 1]));
        assert_eq!(
            asked([
                same,
                "AssertionError: width 35 != 40",
                "AssertionError: width 38 != 40"
            ]),
            None
        );
    }

    #[test]
    fn different_attempts_at_one_dead_end_are_for_the_judge() {
        let mut s = Scene::new();
        let none = "ModuleNotFoundError: No module named 'pytest'";
        s.push(bash("python -m pytest tests", none));
        s.push(bash("python -c 'import pytest'", none));
        let p = s.probe(bash("python -m unittest discover", none));
        let ctx = s.ctx(&p);
        assert!(detect(&ctx).is_none());
        assert_eq!(different_attempts(&ctx), Some(vec![2, 1]));
    }

    #[test]
    fn calls_timing_out_again_and_again_are_for_the_judge_whatever_is_between() {
        let out = "\nEXECUTION TIMED OUT\n(Current directory: /repo)";
        let mut s = Scene::new();
        s.push(bash("python server.py", out));
        s.push(bash("python server.py &", out));
        s.push(bash("cat > mini.py << EOF\nimport app; app.run()\nEOF", ""));
        let p = s.probe(bash("python mini.py", out));
        let ctx = s.ctx(&p);
        assert!(detect(&ctx).is_none());
        assert_eq!(different_attempts(&ctx), None);
        assert_eq!(timeouts(&ctx, 3), Some(vec![2, 1]));
        assert_eq!(timeouts(&ctx, 0), None);
        assert_eq!(timeouts(&ctx, 4), None);
        // Asking about every timeout: nothing earlier needed.
        let mut s = Scene::new();
        let p = s.probe(bash("python server.py", out));
        assert_eq!(timeouts(&s.ctx(&p), 1), Some(vec![]));

        // Other dead ends scattered with work between are not this question, nor is a timeout
        // further back than the span window.
        let mut s = Scene::new();
        let none = "ModuleNotFoundError: No module named 'yaml'";
        s.push(bash("python a.py", none));
        s.push(bash("ls", "a.py b.py"));
        s.push(bash("python b.py", none));
        let p = s.probe(bash("python c.py", none));
        assert_eq!(timeouts(&s.ctx(&p), 3), None);
        let mut s = Scene::new();
        s.push(bash("python server.py", out));
        s.push(bash("python server.py &", out));
        for i in 0..s.cfg.detect.dead_ends.span_window {
            s.push(bash(&format!("sed -n {i}p app.py"), "x = 1"));
        }
        let p = s.probe(bash("python mini.py", out));
        assert_eq!(timeouts(&s.ctx(&p), 3), None);
    }
}
