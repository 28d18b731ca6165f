use super::{different_attempts, different_changes, timeouts};
use crate::detect::testkit::{bash, Scene};
use crate::detect::{Ctx, Finding};
use crate::verdict::LoopKind;
use serde_json::json;

/// Every dead-end rule, in the table's order.
fn detect(ctx: &Ctx<'_>) -> Option<Finding> {
    [
        super::same_attempt_rule,
        super::back_to_rejected,
        super::resent_in_a_row,
        super::refused_as_written,
        super::reworded_change,
        super::guesses_by_name,
        super::unmoved_reruns_rule,
    ]
    .iter()
    .find_map(|rule| rule(ctx))
}

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
            &format!(
                "cat > reproduce.py <<EOF\nfrom metar import Metar\nm = Metar.{name}(report)\nEOF"
            ),
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
fn unmoved_reruns_are_looked_for_within_the_span_window() {
    // Four runs three work events apart span ten events: seen at a window of 10, not 9.
    let run = |s: &mut Scene| s.detect(detect, bash("python run.py", "KeyError: 'name'"));
    for (span_window, fires) in [(10, true), (9, false)] {
        let mut s = Scene::with(|c| {
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
                assert_eq!(f.is_some(), fires, "span_window {span_window}");
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
    // The same error each time, but the run now prints something it did not before (a debugging
    // line the change made fire): the change reached the step, nothing to ask.
    assert_eq!(
        asked([
            same,
            "called with width=31\nAssertionError: width 31 != 40",
            "called with width=31 from layout()\nAssertionError: width 31 != 40"
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
