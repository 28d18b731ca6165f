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

use super::{past_work, recent, Ctx, Finding};
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
            outcome: result.as_ref().and_then(|r| r.outcome.as_deref()),
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
pub(crate) fn same_attempt(cfg: &DeadEnds, a: &TextSig, b: &TextSig) -> bool {
    if same_by_keys(a, b) {
        return true;
    }
    match (&a.vector, &b.vector) {
        (Some(va), Some(vb)) => cosine(va, vb) >= cfg.attempt_similarity,
        _ => false,
    }
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
    let past = past_work(state);
    let recent = recent(&past, reach.saturating_sub(1));
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

/// The new event as an attempt that ended in an outcome: the only events these rules look at.
fn new_attempt<'a>(ctx: &'a Ctx<'_>) -> Option<(Attempt<'a>, &'a Outcome)> {
    let new = attempt(ctx.entry)?;
    let o = new.outcome?;
    Some((new, o))
}

/// Occurrences that make a loop, the first included (at least two).
fn need(cfg: &DeadEnds) -> usize {
    cfg.occurrences.max(2)
}

/// Rule `dead_end.same_attempt` (1): the same attempt, reworded or not, ending the same way,
/// nearly consecutively.
pub fn same_attempt_rule(ctx: &Ctx<'_>) -> Option<Finding> {
    let cfg = &ctx.cfg.dead_ends;
    let (new, o) = new_attempt(ctx)?;
    let close: Vec<Attempt<'_>> = recent(&ctx.past, cfg.same_attempt_window.saturating_sub(1))
        .iter()
        .filter_map(|e| attempt(e))
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
    (close.len() + 1 >= need(cfg)).then(|| {
        finding(
            ctx,
            &new,
            close[0].seq,
            close.len() + 1,
            "at the same step, reworded or not,",
        )
    })
}

/// Rule `dead_end.back_to_rejected` (1b): back to an attempt already rejected — the very call
/// re-sent with the very error it got before, and every attempt between rejected the same way
/// (`'a'` undefined, then `'b'`, then the first edit again). The variants between learned
/// nothing; returning to one already refused is the loop, even at two occurrences of it.
pub fn back_to_rejected(ctx: &Ctx<'_>) -> Option<Finding> {
    let cfg = &ctx.cfg.dead_ends;
    let (new, o) = new_attempt(ctx)?;
    let (earlier, between) = back_to_a_rejected_attempt(&ctx.past, cfg, &new, o)?;
    (between + 2 >= need(cfg)).then(|| {
        finding(
            ctx,
            &new,
            earlier,
            between + 2,
            "at the same step, back to one already rejected,",
        )
    })
}

/// Rule `dead_end.resent_in_a_row` (1c): attempts in a row ending in the same error, one of
/// them re-sent unchanged (one edit sent twice, then a variant, all the same IndentationError).
/// An attempt in the row may have hit another error besides ([`Outcome::holds`]): it left the
/// one the row is stuck on standing too. Different attempts at one dead end are a judge question while each is
/// new; once one of them is re-sent and refused again, the agent is not ruling options out.
pub fn resent_in_a_row(ctx: &Ctx<'_>) -> Option<Finding> {
    let cfg = &ctx.cfg.dead_ends;
    let (new, o) = new_attempt(ctx)?;
    let (earlier, row) = rejected_again_in_a_row(&ctx.past, ctx.cfg.window, &new, o)?;
    (row >= need(cfg)).then(|| {
        finding(
            ctx,
            &new,
            earlier,
            row,
            "in a row, one of them sent again after it was rejected,",
        )
    })
}

/// Rule `dead_end.refused_as_written` (1d): calls refused as written, in a row, the same
/// refusal each time (a shell syntax error on the same unquoted parenthesis, `ls: invalid
/// option -- '.'`): none of them ran, so there was nothing to learn but the refusal, and the
/// form was never fixed.
pub fn refused_as_written(ctx: &Ctx<'_>) -> Option<Finding> {
    let cfg = &ctx.cfg.dead_ends;
    let (new, o) = new_attempt(ctx)?;
    if !o.refused {
        return None;
    }
    let row = attempts_in_a_row(&ctx.past, o, ctx.cfg.window);
    (row.len() + 1 >= need(cfg)).then(|| {
        finding(
            ctx,
            &new,
            row[0],
            row.len() + 1,
            "in a row, each refused as written before it ran,",
        )
    })
}

/// Rule `dead_end.reworded_change` (2): one step failing exactly the same way, with only
/// rewordings of one change between its runs.
pub fn reworded_change(ctx: &Ctx<'_>) -> Option<Finding> {
    let (new, _) = new_attempt(ctx)?;
    let span = span(ctx).filter(|s| s.rewordings)?;
    Some(finding(
        ctx,
        &new,
        span.members[0],
        span.members.len() + 1,
        "at one step, with only rewordings of one change between,",
    ))
}

/// Rule `dead_end.guess_by_name` (2b): one step failing with the same kind of error, each time
/// about the name the change before it tried (`no attribute 'parse_report'` after an edit
/// calling `parse_report`, then `'report'` after one calling `report`): guess after guess,
/// each refused by name. A name the change did not write is the next problem found, not a
/// guess refused.
pub fn guesses_by_name(ctx: &Ctx<'_>) -> Option<Finding> {
    let cfg = &ctx.cfg.dead_ends;
    let (new, o) = new_attempt(ctx)?;
    let guesses = guesses_refused_by_name(cfg, &ctx.past, &new, o);
    (guesses.len() + 1 >= need(cfg)).then(|| {
        finding(
            ctx,
            &new,
            guesses[0],
            guesses.len() + 1,
            "at one step, each refused by the name the change before it tried,",
        )
    })
}

/// Rule `dead_end.unmoved_reruns` (2c): the very same run (a test, a script, unchanged) failing
/// exactly the same way again and again with other work between: whatever was changed never
/// reached the failure. A debugging script rewritten between runs is another call each time
/// and stays a question; so do different calls rejected alike (edits refused by one linter
/// error). Counted from `occurrences` up: fewer runs are not yet a dead end at all.
pub fn unmoved_reruns_rule(ctx: &Ctx<'_>) -> Option<Finding> {
    let cfg = &ctx.cfg.dead_ends;
    if cfg.unmoved_reruns == 0 {
        return None;
    }
    let (new, o) = new_attempt(ctx)?;
    let reruns = unmoved_reruns(cfg, &ctx.past, &new, o);
    (reruns.len() + 1 >= cfg.unmoved_reruns.max(need(cfg))).then(|| {
        finding(
            ctx,
            &new,
            reruns[0],
            reruns.len() + 1,
            "as the same call, other work between each, none of it reaching the failure,",
        )
    })
}

/// The same call (by keys) ending in exactly the new outcome earlier within the same-attempt
/// window, with at least one work event between and every one of them an attempt rejected with
/// the same kind of error (the outcome's template). Returns that earlier call's seq and how many
/// attempts are between.
fn back_to_a_rejected_attempt(
    past: &[&Entry],
    cfg: &DeadEnds,
    new: &Attempt<'_>,
    o: &Outcome,
) -> Option<(u64, usize)> {
    for (between, e) in recent(past, cfg.same_attempt_window.saturating_sub(1))
        .iter()
        .enumerate()
    {
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

/// The attempts right before the new one ending in its error lines (and maybe more), stopping
/// at the first work event that did not, when two of them (the new one included) are the same call. Returns
/// the older of that pair and the row's length, the new attempt included.
fn rejected_again_in_a_row<'e>(
    past: &[&'e Entry],
    reach: usize,
    new: &Attempt<'_>,
    o: &Outcome,
) -> Option<(u64, usize)> {
    let row: Vec<Attempt<'e>> = recent(past, reach)
        .iter()
        .map_while(|e| attempt(e).filter(|a| a.outcome.is_some_and(|p| p.holds(o))))
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
    past: &[&Entry],
    new: &Attempt<'_>,
    o: &Outcome,
) -> Vec<u64> {
    let mut runs = Vec::new();
    let (mut later_names, mut later_exact) = (&o.names, o.exact);
    let mut between: Vec<&TextSig> = Vec::new();
    for e in recent(past, cfg.span_window.saturating_sub(1)) {
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

/// Did two runs print the same around their error lines (digits masked)? Unknown (an outcome
/// stored before the rest was kept) counts as the same.
fn same_rest(p: &Outcome, o: &Outcome) -> bool {
    p.rest == 0 || o.rest == 0 || p.rest == o.rest
}

/// Earlier runs of the new call (by keys) within the rerun window ending in the very error lines
/// of the new one, newest first, counted only while other work separates every two of them (runs
/// back to back are the exact-repeat detectors' case). The error lines are compared as written,
/// numbers included: a test failing on the same assertion with other values, or a count of
/// failures going down, has moved; what else the run prints (a debugging line added) may change.
fn unmoved_reruns(cfg: &DeadEnds, past: &[&Entry], new: &Attempt<'_>, o: &Outcome) -> Vec<u64> {
    let mut runs = Vec::new();
    let mut work_since = 0usize;
    for e in recent(past, cfg.span_window.saturating_sub(1)) {
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
fn attempts_in_a_row(past: &[&Entry], o: &Outcome, reach: usize) -> Vec<u64> {
    recent(past, reach)
        .iter()
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
    past: &[&'s Entry],
    entry: &Entry,
) -> Option<(Vec<u64>, Vec<&'s Entry>)> {
    let new = attempt(entry)?;
    let o = new.outcome?;
    let recent = recent(past, cfg.span_window.saturating_sub(1));
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
        .iter()
        .filter(|e| e.seq > oldest && !members.contains(&e.seq))
        .copied()
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
    let past = past_work(state);
    let Some((_, between)) = span_parts(cfg, &past, entry) else {
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
    let (members, between) = span_parts(cfg, &ctx.past, ctx.entry)?;
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
/// written, numbers included, and the rest of the output too (digits masked): a failure whose
/// counts or values moved after a change was reached by it, and so was one whose run printed
/// something new around the same error (a debugging line that now fires, another script or test
/// selection reporting on other work) — neither is a question worth a judge's call. The very
/// same call failing that way with any other work between is found further back, within
/// `span_window` (rule 2c's runs before they are enough for a loop).
pub fn different_changes(ctx: &Ctx<'_>) -> Option<Vec<u64>> {
    let cfg = &ctx.cfg.dead_ends;
    let need = cfg.occurrences.max(2);
    let new = attempt(ctx.entry)?;
    let o = new.outcome?;
    let span = span(ctx);
    if span.as_ref().is_some_and(|s| s.rewordings) {
        return None;
    }
    let outcome_at = |seq| ctx.state.entry(seq).and_then(attempt)?.outcome;
    let verbatim: Vec<u64> = span
        .map(|s| s.members)
        .unwrap_or_default()
        .into_iter()
        .filter(|&seq| outcome_at(seq).is_some_and(|p| unmoved(p, o) && same_rest(p, o)))
        .collect();
    if verbatim.len() + 1 >= need {
        return Some(verbatim);
    }
    // The very same run, further back (rule 2c's window): below `unmoved_reruns` it is this
    // question, at it a loop.
    if cfg.unmoved_reruns == 0 {
        return None;
    }
    let reruns: Vec<u64> = unmoved_reruns(cfg, &ctx.past, &new, o)
        .into_iter()
        .filter(|&seq| outcome_at(seq).is_some_and(|p| same_rest(p, o)))
        .collect();
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
    let seqs: Vec<u64> = recent(&ctx.past, ctx.cfg.dead_ends.span_window.saturating_sub(1))
        .iter()
        .filter_map(|e| attempt(e))
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
    let recent = recent(&ctx.past, need - 1);
    let seqs: Vec<u64> = recent
        .iter()
        .filter_map(|e| attempt(e))
        .filter(|a| a.outcome.is_some_and(|p| p.exact == o.exact))
        .map(|a| a.seq)
        .collect();
    (seqs.len() + 1 >= need && recent.len() == seqs.len()).then_some(seqs)
}

#[cfg(test)]
mod tests;
