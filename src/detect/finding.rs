//! `result_repeat`: the same finding asked for again in other words.
//!
//! A search reworded ("### BEGIN SOLUTION", then "BEGIN SOLUTION", then "END SOLUTION") that
//! finds the same files each time is the issue's "one search reworded across scopes": the agent
//! learns nothing it did not know after the first. The calls differ, so no call match links
//! them; the results differ too, but only where they repeat their own query. With each call's
//! terms masked ([`crate::signature::echo_key`]) the results are one, and that is the loop.
//! Only results that found something count (errors and "nothing found" are `negative.rs`'s), and
//! the outputs must differ as given: identical outputs after different calls (an "OK", the same
//! file printed by two commands) are common in healthy work and say nothing about a rewording.

use super::recent;
use super::{Ctx, Finding};
use crate::state::{Entry, EntryBody, ResultSig};
use crate::verdict::LoopKind;

/// The call's key and its result, when the result found something and repeats the call's terms.
fn finding(e: &Entry) -> Option<(u64, &ResultSig)> {
    match &e.body {
        EntryBody::ToolCall {
            call,
            result: Some(r),
            passive: false,
            ..
        } if !r.negative && !r.trivial && r.outcome.is_none() && r.echo != 0 => {
            Some((call.exact, r))
        }
        _ => None,
    }
}

pub fn detect(ctx: &Ctx<'_>) -> Option<Finding> {
    // The window of one step's attempts: a search reworded across the same ground is one.
    let window = ctx.cfg.dead_ends.span_window;
    let need = ctx.cfg.repeats.tool_call;
    if window < 2 || need == 0 {
        return None;
    }
    let (call, result) = finding(ctx.entry)?;
    let mut calls = vec![call];
    let mut earlier = Vec::new();
    for e in recent(&ctx.past, window - 1) {
        if let Some((c, r)) = finding(e) {
            if r.echo == result.echo && !calls.contains(&c) {
                calls.push(c);
                earlier.push((e.seq, r.sig.exact));
            }
        }
    }
    // The newest match must read differently: only the query it repeats changed.
    let (newest, newest_output) = *earlier.first()?;
    if earlier.len() < need || newest_output == result.sig.exact {
        return None;
    }
    let mut f = Finding::new(
        LoopKind::ResultRepeat,
        format!(
            "{} calls asked in other words found the same as seq {newest} (the results differ \
             only where they repeat their own query)",
            earlier.len() + 1
        ),
    );
    f.matched = Some(newest);
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::detect;
    use crate::detect::testkit::{bash, Scene};
    use serde_json::{json, Value};

    fn search(q: &str, files: &[&str]) -> Value {
        let mut out = format!("Found {} matches for \"{q}\" in /r/tests:\n", files.len());
        for f in files {
            out.push_str(&format!("/r/tests/{f} (1 matches)\n"));
        }
        out.push_str(&format!("End of matches for \"{q}\" in /r/tests"));
        json!({"type": "tool_call", "tool": "search_dir",
               "args": {"command": format!("search_dir \"{q}\" tests")},
               "result": {"output": out, "is_error": false}})
    }

    #[test]
    fn a_search_reworded_that_finds_the_same_files_is_a_result_repeat() {
        let mut s = Scene::new();
        s.push(search("### BEGIN SOLUTION", &["nbs/test.ipynb"]));
        s.push(search("BEGIN SOLUTION", &["nbs/test.ipynb"]));
        let f = s
            .detect(detect, search("END SOLUTION", &["nbs/test.ipynb"]))
            .expect("the third rewording finding the same file is a loop");
        assert_eq!(f.kind, crate::verdict::LoopKind::ResultRepeat);
        assert!(f.reason.contains("3 calls"), "{}", f.reason);
    }

    #[test]
    fn rewordings_that_find_other_files_or_too_far_apart_are_not() {
        let mut s = Scene::new();
        s.push(search("parse", &["a.py"]));
        s.push(search("parser", &["b.py"]));
        assert!(s.detect(detect, search("parsing", &["c.py"])).is_none());

        // The window is one step's attempts (`dead_ends.span_window`, 17 work events, the new one
        // included): fifteen other reads between put the first search outside it.
        let mut s = Scene::new();
        s.push(search("BEGIN SOLUTION", &["nbs/test.ipynb"]));
        for i in 0..15 {
            s.push(bash(&format!("cat m{i}.py"), &format!("import m{i}")));
        }
        s.push(search("END SOLUTION", &["nbs/test.ipynb"]));
        assert!(
            s.detect(detect, search("SOLUTION", &["nbs/test.ipynb"]))
                .is_none(),
            "the first search is out of the window"
        );
    }

    #[test]
    fn the_same_output_after_different_calls_is_not_a_rewording() {
        // The same query in other scopes that all answer alike: nothing of the call changed in
        // the answer, so this rule has nothing to say (the repeat detectors judge the calls).
        let mut s = Scene::new();
        let out = "Found 1 matches for \"needle\" in /r:\n/r/src/a.py (1 matches)";
        let call = |scope: &str| {
            json!({"type": "tool_call", "tool": "search_dir",
                   "args": {"command": format!("search_dir \"needle\" {scope}")},
                   "result": {"output": out, "is_error": false}})
        };
        s.push(call("."));
        s.push(call("/r"));
        assert!(s.detect(detect, call("./")).is_none());
    }
}
