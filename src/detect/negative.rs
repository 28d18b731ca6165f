//! `same_error` and `result_repeat` (the same error with varying
//! actions"): calls, varied, that end in the same error or in the same "nothing found".
//! Results that carry information (a file's content, a list of matches) never count here: only
//! errors and empty findings, which bring no progress however the call was varied.

use super::recent;
use super::repeat::strongest;
use super::{fmt_cos, Ctx, Finding, Link};
use crate::signature::residue_overlap;
use crate::state::{Entry, EntryBody, TextSig};
use crate::verdict::LoopKind;

fn negative_result(ctx: &Ctx<'_>, seq: u64) -> bool {
    matches!(
        ctx.state.entry(seq).map(|e| &e.body),
        Some(EntryBody::ToolCall { result: Some(r), .. }) if r.negative && !r.trivial
    )
}

/// The new event's result when it is negative (an error or a "nothing found") and not trivial:
/// the only results these rules look at.
fn negative_of<'a>(ctx: &'a Ctx<'_>) -> Option<&'a crate::state::ResultSig> {
    match &ctx.entry.body {
        EntryBody::ToolCall {
            result: Some(r), ..
        } if r.negative && !r.trivial => Some(r),
        _ => None,
    }
}

/// Rule `negative.nothing_found_alike`: calls in a row each find nothing, and say so alike
/// apart from what they asked.
pub fn nothing_found_alike_rule(ctx: &Ctx<'_>) -> Option<Finding> {
    negative_of(ctx)?;
    if let Some(earlier) = nothing_found_alike(ctx) {
        let mut f = Finding::new(
            LoopKind::ResultRepeat,
            format!(
                "{} calls in a row, each asking another way, found nothing the same way as seq {}",
                earlier.len() + 1,
                earlier[0]
            ),
        );
        f.matched = Some(earlier[0]);
        return Some(f);
    }
    None
}

/// Rule `negative.in_a_row`: calls, however varied, ending in the same error or the same
/// "nothing found" (seed 001 level 4).
pub fn in_a_row(ctx: &Ctx<'_>) -> Option<Finding> {
    let result = negative_of(ctx)?;
    // Calls may be anything from identical to unrelated: identical ones alone are the repeat
    // detector's (it runs first); here the varied attempts count together.
    let matches = ctx.links.iter().rev().filter(|l| {
        !l.stale && l.result.is_some_and(|r| r.is_match()) && negative_result(ctx, l.seq)
    });
    let chain = ctx.repeat_chain(matches, Some(ctx.cfg.repeats.max_between));
    if chain.len() < ctx.cfg.repeats.negative_result {
        return None;
    }
    if !result.failed && widening_chain(ctx, &chain) {
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

/// The work events right before the new one, newest first, when each of them and the new call
/// found nothing and said so alike, apart from what it was asked ("No matches found for
/// \"math\"", then for \"equation\", then for \"latex\"; "Could not find [VIVA Media AG]. Similar:
/// [...]" with the same suggestions): one guessed name or rewording after another, each a dead
/// end — an answer whose own lines say it found nothing (its outcome: a "No matches", a "Could
/// not find" sentence), not a page of code that happens to say "not found". The result match
/// keeps different names apart (another file is other work), so these
/// never link; what they share is their residue ([`crate::signature::residue`]), compared with
/// the one after it at `repeats.nothing_found_alike` ([`crate::signature::residue_overlap`]), or
/// linked by the calls themselves being one attempt reworded, with at least one pair said alike.
/// Empty answers that suggest other things each time have taught the agent something. Errors are left
/// out: a different name in an error after a different call is usually the next problem.
fn nothing_found_alike(ctx: &Ctx<'_>) -> Option<Vec<u64>> {
    fn empty_finding(e: &Entry) -> Option<(&TextSig, &str)> {
        match &e.body {
            EntryBody::ToolCall {
                call,
                result: Some(r),
                passive: false,
                ..
            } if r.negative && !r.failed && !r.trivial && r.outcome.is_some() => {
                Some((call, r.residue.as_deref()?))
            }
            _ => None,
        }
    }
    let (mut later_call, mut later) = empty_finding(ctx.entry)?;
    let need = ctx.cfg.repeats.negative_result;
    let alike = ctx.cfg.repeats.nothing_found_alike;
    let mut earlier = Vec::new();
    let mut said_alike = false;
    let mut widening = true;
    for e in recent(&ctx.past, need) {
        let Some((call, r)) = empty_finding(e) else {
            break;
        };
        // Said alike, or asked alike: one lookup reworded ("Los Angeles Dogers in 2007", then
        // "Dodgers"), each a dead end whatever the tool suggested for the misspelling. Asked
        // alike alone is not enough: searches that each come back with other suggestions
        // ("Marathi songs", "Marathi lyrics", then the one page that answers) are learning.
        let said = residue_overlap(r, later) >= alike;
        if !(said || super::dead_end::same_attempt(&ctx.cfg.dead_ends, call, later_call)) {
            break;
        }
        said_alike |= said;
        widening &= widens(call, later_call);
        earlier.push(e.seq);
        (later_call, later) = (call, r);
    }
    (need > 0 && said_alike && !widening && earlier.len() >= need).then_some(earlier)
}

/// Whether every call of a chain of empty findings (newest first, the new event's before it)
/// widens the search of the call before it ([`widens`]).
fn widening_chain(ctx: &Ctx<'_>, chain: &[u64]) -> bool {
    fn call(e: &Entry) -> Option<&TextSig> {
        match &e.body {
            EntryBody::ToolCall { call, .. } => Some(call),
            _ => None,
        }
    }
    let Some(mut later) = call(ctx.entry) else {
        return false;
    };
    for seq in chain {
        let Some(earlier) = ctx.state.entry(*seq).and_then(call) else {
            return false;
        };
        if !widens(earlier, later) {
            return false;
        }
        later = earlier;
    }
    true
}

/// Whether `later` asks what `earlier` asked with less: a word dropped from the query, or the
/// scope widened — a file left out so the tool searches its directory or the whole tree
/// (`search_file "def f" a.py`, `search_file "f" a.py`, `search_dir "f"`; `grep -n f src/a.py`,
/// `grep -n f src`). The tool's own name does not count: widening from a file to a directory is
/// often another tool. An empty answer to a wider question is new knowledge — the name is nowhere
/// in the wider scope either — so a chain in which every search widens the one before is someone
/// finding out where a thing is not, not one dead end retried. It cannot go on for long: each
/// step asks strictly less.
fn widens(earlier: &TextSig, later: &TextSig) -> bool {
    fn args(t: &str) -> std::collections::BTreeSet<&str> {
        let mut words = t
            .split(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '.' | '/' | '-')))
            .filter(|w| !w.is_empty());
        let Some(tool) = words.next() else {
            return Default::default();
        };
        // Flags are how to search, not where or what: `grep -n f a.py` then `grep -rn f src`
        // widens by its scope.
        words
            .filter(|w| *w != tool && !w.starts_with('-'))
            .collect()
    }
    // `src` or `src/` of `src/a.py`: a directory holding the earlier path.
    fn holds(dir: &str, path: &str) -> bool {
        let dir = dir.trim_end_matches('/');
        !dir.is_empty()
            && path.len() > dir.len() + 1
            && path.starts_with(dir)
            && path[dir.len()..].starts_with('/')
    }
    let (e, l) = (args(&earlier.text), args(&later.text));
    if l.is_empty() {
        return false;
    }
    let mut wider = l.len() < e.len();
    for w in &l {
        if e.contains(w) {
            continue;
        }
        if !e.iter().any(|p| holds(w, p)) {
            return false;
        }
        wider = true;
    }
    wider
}

#[cfg(test)]
mod tests {
    use crate::detect::{Ctx, Finding};

    fn detect(ctx: &Ctx<'_>) -> Option<Finding> {
        super::nothing_found_alike_rule(ctx).or_else(|| super::in_a_row(ctx))
    }
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
    fn one_guessed_name_after_another_found_nothing_is_a_result_repeat() {
        let mut s = Scene::new();
        let none = |name: &str| format!("No matches found for \"{name}\" in /latexify_py");
        for name in ["math", "equation"] {
            let call = bash(&format!("find_file \"{name}\""), &none(name));
            assert!(s.detect(detect, call).is_none());
        }
        let f = s
            .detect(detect, bash("find_file \"latex\"", &none("latex")))
            .expect("the third name that finds nothing");
        assert_eq!(f.kind, LoopKind::ResultRepeat);
        assert!(f.reason.contains("another way"), "{}", f.reason);
        assert_eq!(f.matched, Some(2));
    }

    #[test]
    fn names_found_nothing_with_a_find_between_or_errors_are_not_in_a_row() {
        // A search that found something between: the agent is narrowing, not stuck.
        let mut s = Scene::new();
        let none = |name: &str| format!("No matches found for \"{name}\" in /repo");
        assert!(s
            .detect(detect, bash("find_file \"a.py\"", &none("a.py")))
            .is_none());
        assert!(s
            .detect(detect, bash("find_file \"b.py\"", &none("b.py")))
            .is_none());
        s.push(bash(
            "find_file \"c.py\"",
            "Found 1 matches for \"c.py\" in /repo:\n/repo/src/c.py",
        ));
        assert!(s
            .detect(detect, bash("find_file \"d.py\"", &none("d.py")))
            .is_none());
        assert!(s
            .detect(detect, bash("find_file \"e.py\"", &none("e.py")))
            .is_none());
        // Errors naming one missing module after another are the next problem each time.
        let mut s = Scene::new();
        for m in ["yaml", "toml", "attrs"] {
            let err = format!("ModuleNotFoundError: No module named '{m}'");
            assert!(s
                .detect(detect, bash_err(&format!("python -c 'import {m}'"), &err))
                .is_none());
        }
    }

    #[test]
    fn a_search_widens_by_asking_less_or_searching_a_wider_scope() {
        let sig = |t: &str| crate::engine::observe::text_sig(t, 500);
        let widens = |a: &str, b: &str| super::widens(&sig(a), &sig(b));
        // A qualifier dropped; a file left out (another tool); a file's directory instead.
        assert!(widens(
            "search_file command: search_file \"def f\" a.py",
            "search_file command: search_file \"f\" a.py"
        ));
        assert!(widens(
            "search_file command: search_file \"f\" a.py",
            "search_dir command: search_dir \"f\""
        ));
        assert!(widens(
            "bash command: grep -n f src/a.py",
            "bash command: grep -rn f src"
        ));
        // The same question, another flag, another name, a narrower one: not wider.
        for (a, b) in [
            (
                "bash command: grep -rn f src",
                "bash command: grep -rni f src",
            ),
            (
                "bash command: grep -rn f src",
                "bash command: grep -rn g src",
            ),
            (
                "bash command: grep -rn f src",
                "bash command: grep -rn f src/a.py",
            ),
            ("search query: scatman", "search query: scatman john"),
        ] {
            assert!(!widens(a, b), "{a} -> {b}");
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
