//! Dead ends and replays — the rules that catch real agents' reworded loops — on the real model
//! and the default configuration: the same attempt, however reworded, ending where it ended
//! before; one change re-sent between runs of a failing step; a long block of work replayed. And
//! the legitimate repetition next to each that must stay quiet.

mod common;

use common::*;
use loopguard::verdict::LoopKind;
use loopguard::Config;
use serde_json::json;

fn edit(file: &str, lines: &str, code: &str) -> loopguard::Envelope {
    call_with(
        "t",
        "edit",
        json!({ "file": file, "lines": lines, "replacement": code }),
        "File updated.",
        false,
    )
}

const TRACEBACK: &str = "Traceback (most recent call last):\n  File \"/repo/reproduce.py\", line 7, in <module>\n    print(fmt.render(table))\n  File \"/repo/src/fmt.py\", line 88, in render\n    return sep.join(cells)\nTypeError: sequence item 1: expected str instance, int found";

#[tokio::test]
async fn one_attempt_reworded_ending_in_the_same_error_is_a_dead_end() {
    // Recorded agents often report a traceback as plain output (no error flag): the same
    // attempt, reworded, ending in the same error three times is still a dead end.
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            bash("cd /repo && python reproduce.py", TRACEBACK, false),
            bash("cd /repo && python3 reproduce.py", TRACEBACK, false),
            bash("cd /repo && python reproduce.py 2>&1", TRACEBACK, false),
        ],
    )
    .await;
    assert_eq!(first_loop(&vs), Some(2), "{vs:#?}");
    assert_eq!(vs[2].kind, LoopKind::SameError, "{vs:#?}");
    assert!(
        vs[2].reason.contains("attempts at the same step"),
        "{}",
        vs[2].reason
    );
    assert_eq!(vs[2].rule.as_deref(), Some("dead_end.same_attempt"));
}

#[tokio::test]
async fn different_attempts_ending_in_the_same_output_error_are_not_a_dead_end() {
    // Different steps (run the script, run the tests, import the module) that all show one
    // error: the agent is probing, and without a judge that is not an alarm.
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            bash("cd /repo && python reproduce.py", TRACEBACK, false),
            bash("python -m pytest tests/test_fmt.py -q", TRACEBACK, false),
            bash("python -c 'import fmt; fmt.render([1])'", TRACEBACK, false),
        ],
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
}

#[tokio::test]
async fn one_change_resent_between_runs_of_a_failing_step_is_a_dead_end() {
    // The agent rewrites one function three times, each time a rewording of the same fix, and
    // the test fails exactly as before after each.
    let rewrites = [
        "def render(table):\n    cells = [str(c) for c in table]\n    return sep.join(cells)",
        "def render(table):\n    cells = list(map(str, table))\n    return sep.join(cells)",
        "def render(table):\n    cells = [f'{c}' for c in table]\n    return sep.join(cells)",
    ];
    let mut events = Vec::new();
    for (i, code) in rewrites.iter().enumerate() {
        events.push(edit("src/fmt.py", &format!("{}:{}", 86 + i, 88 + i), code));
        events.push(bash(
            "python -m pytest tests/test_fmt.py -x -q",
            "FAILED tests/test_fmt.py::test_render - AssertionError: assert 'a|1' == 'a | 1'",
            true,
        ));
    }
    let e = engine(Config::default());
    let vs = feed(&e, events).await;
    assert_eq!(first_loop(&vs), Some(5), "{vs:#?}");
    assert_eq!(vs[5].kind, LoopKind::SameError, "{vs:#?}");
    assert!(
        vs[5].reason.contains("rewordings of one change"),
        "{}",
        vs[5].reason
    );
    assert_eq!(vs[5].rule.as_deref(), Some("dead_end.reworded_change"));
}

#[tokio::test]
async fn different_fixes_between_runs_of_a_failing_step_are_not_a_loop() {
    // Three different fixes, each followed by the same failing test: work, not a loop (the
    // judge is asked whether the changes are going anywhere; without one, no alarm).
    let fixes = [
        "def render(table):\n    cells = [str(c) for c in table]\n    return sep.join(cells)",
        "SEPARATOR = ' | '\nsep = SEPARATOR",
        "class Table:\n    def __iter__(self):\n        return iter(self.rows)",
    ];
    let files = ["src/fmt.py", "src/config.py", "src/table.py"];
    let mut events = Vec::new();
    for (code, file) in fixes.iter().zip(files) {
        events.push(edit(file, "10:12", code));
        events.push(bash(
            "python -m pytest tests/test_fmt.py -x -q",
            "FAILED tests/test_fmt.py::test_render - AssertionError: assert 'a|1' == 'a | 1'",
            true,
        ));
    }
    let e = engine(Config::default());
    let vs = feed(&e, events).await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
    let last = &vs[vs.len() - 1].reason;
    assert!(last.contains("are the changes going anywhere"), "{last}");
}

fn rejected_edit(lines: &str, code: &str, error: &str) -> loopguard::Envelope {
    call_with(
        "t",
        "edit",
        json!({ "command": format!("edit {lines}\n{code}\nend_of_edit") }),
        &format!(
            "Your proposed edit has introduced new syntax error(s). Please read this error \
             message carefully and then retry editing the file.\n\nERRORS:\n- {error}\n\n\
             This is how your edit would have looked if applied\n---\n23:{code}\n"
        ),
        false,
    )
}

#[tokio::test]
async fn going_back_to_an_edit_already_rejected_is_a_loop_but_not_after_something_learned() {
    // A variant rejected the same way, then the first edit again with its very error: nothing
    // was learned between, so the return is a loop at its second occurrence.
    let first = || {
        rejected_edit(
            "23:23",
            "                 speed_limit=num_rows + 1):",
            "F821 undefined name 'num_rows'",
        )
    };
    let variant = rejected_edit(
        "23:23",
        "                 speed_limit=self._num_rows + 1):",
        "F821 undefined name 'self'",
    );
    let e = engine(Config::default());
    let vs = feed(&e, vec![first(), variant, first()]).await;
    assert_eq!(first_loop(&vs), Some(2), "{vs:#?}");
    assert_eq!(vs[2].kind, LoopKind::SameError, "{vs:#?}");
    assert!(
        vs[2].reason.contains("already rejected"),
        "{}",
        vs[2].reason
    );
    assert_eq!(vs[2].rule.as_deref(), Some("dead_end.back_to_rejected"));

    // The variant rejected for another reason (the agent learned the line needs other syntax):
    // trying the first edit again is not yet a loop.
    let other = rejected_edit(
        "23:24",
        "                 speed_limit=(num_rows + 1",
        "E999 SyntaxError: '(' was never closed",
    );
    let e = engine(Config::default());
    let vs = feed(&e, vec![first(), other, first()]).await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
}

#[tokio::test]
async fn an_error_every_attempt_in_a_row_left_standing_is_one_dead_end_when_one_was_re_sent() {
    // Edits at one function, all refused on one undefined name; one of them also hit another
    // name, which does not make the row new: every attempt left the first error standing, and
    // one was sent again after it was refused.
    let err = "F821 undefined name 'regions_old'";
    let both = "F821 undefined name 'regions_old'\n- F821 undefined name 'target'";
    let head = "def filter_min_distance(features, dxy=None, dz=None, min_distance=None):";
    let body = "    regions_new = regions_old.copy()\n    return target";
    let whole =
        "def filter_min_distance(features, dxy=None, dz=None):\n    regions_new = regions_old";
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            rejected_edit("973:981", head, err),
            rejected_edit("973:981", head, err),
            rejected_edit("982:1116", body, both),
            rejected_edit("973:1116", whole, err),
        ],
    )
    .await;
    assert_eq!(first_loop(&vs), Some(3), "{vs:#?}");
    assert_eq!(vs[3].rule.as_deref(), Some("dead_end.resent_in_a_row"));

    // The same attempts with none re-sent are different attempts: not an alarm.
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            rejected_edit("973:981", head, err),
            rejected_edit("982:1116", body, both),
            rejected_edit("973:1116", whole, err),
        ],
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
}

#[tokio::test]
async fn an_edit_re_sent_then_varied_all_refused_the_same_way_is_a_loop() {
    // The same edit sent twice, then a variant over other lines: all three refused with the
    // same IndentationError. The re-send shows the agent is not ruling options out.
    let err = "E999 IndentationError: unexpected indent";
    let body = "        # Generate a unique temporary file name\n        tmp_env_name = None";
    let variant = "        with tempfile.NamedTemporaryFile(dir=env_path.parent) as tmp:";
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            rejected_edit("171:179", body, err),
            rejected_edit("171:179", body, err),
            rejected_edit("172:184", variant, err),
        ],
    )
    .await;
    assert_eq!(first_loop(&vs), Some(2), "{vs:#?}");
    assert!(
        vs[2].reason.contains("sent again after it was rejected"),
        "{}",
        vs[2].reason
    );
    assert_eq!(vs[2].rule.as_deref(), Some("dead_end.resent_in_a_row"));

    // Three different edits refused the same way: the judge's question, not an alarm.
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            rejected_edit("171:179", body, err),
            rejected_edit("172:184", variant, err),
            rejected_edit("160:162", "    def _cleanup(self):\n        pass", err),
        ],
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
    assert!(vs[2].judge.is_some(), "{vs:#?}");
}

#[tokio::test]
async fn the_same_failure_after_each_fix_that_moved_on_is_progress() {
    // The error's template stays ("No module named …"), the name changes after each install:
    // the attempt moved on, so this is not the same error.
    let mut events = Vec::new();
    for m in ["requests", "yaml", "toml"] {
        events.push(bash(
            "python app.py",
            &format!("ModuleNotFoundError: No module named '{m}'"),
            true,
        ));
        events.push(bash(
            &format!("pip install {m}"),
            &format!("Successfully installed {m}-1.0"),
            false,
        ));
    }
    let e = engine(Config::default());
    let vs = feed(&e, events).await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
}

#[tokio::test]
async fn each_guessed_name_refused_by_the_same_step_is_a_loop() {
    // The agent rewrites its script guessing a method name, and each run refuses the very name
    // just written: the same step, the same kind of error, guess after guess.
    let script = |method: &str| {
        edit(
            "reproduce.py",
            "1:6",
            &format!("from metar import Metar\nfor code in examples:\n    try:\n        m = Metar.{method}(code)\n    except Exception as e:\n        print(f\"{{code}}: {{e}}\")"),
        )
    };
    let run = |method: &str| {
        bash(
            "python reproduce.py",
            &format!("METAR WSSS 312000Z VRB04KT 2000: module 'metar.Metar' has no attribute '{method}'\nScript completed."),
            false,
        )
    };
    let mut events = Vec::new();
    for m in ["parse_report", "report", "parse"] {
        events.push(script(m));
        events.push(run(m));
    }
    let e = engine(Config::default());
    let vs = feed(&e, events).await;
    assert_eq!(first_loop(&vs), Some(5), "{vs:#?}");
    assert_eq!(vs[5].kind, LoopKind::SameError, "{vs:#?}");
    assert!(
        vs[5].reason.contains("refused by the name"),
        "{}",
        vs[5].reason
    );
    assert_eq!(vs[5].rule.as_deref(), Some("dead_end.guess_by_name"));

    // The same script rewritten with each fix, the run now naming something the fix did not
    // write: each run found the next missing piece.
    let mut events = Vec::new();
    for (wrote, missing) in [
        ("parse_report", "Report"),
        ("report", "Station"),
        ("parse", "Wind"),
    ] {
        events.push(script(wrote));
        events.push(bash(
            "python reproduce.py",
            &format!("METAR WSSS: module 'metar.Metar' has no attribute '{missing}'"),
            false,
        ));
    }
    let e = engine(Config::default());
    let vs = feed(&e, events).await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
}

#[tokio::test]
async fn calls_refused_as_written_again_and_again_are_a_loop() {
    // Each edit is reworded (its content simpler every time), and the shell refuses every one
    // on the same unquoted parenthesis: none of them ran, the form was never fixed.
    let refused = |body: &str| {
        bash(
            &format!("edit 78:86: Types.hostname: {body}"),
            &format!("/bin/bash: line 1: syntax error near unexpected token `('\n/bin/bash: line 1: `edit 78:86: Types.hostname: {body}'"),
            false,
        )
    };
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            refused(
                "data_type.from_import(IMPORT_CONSTR, strict=True, kwargs={'regex': r'^[a-z]+$'})",
            ),
            refused("data_type(type='str', strict=True, kwargs={'regex': r'^[a-z]+$'})"),
            refused("data_type(type='str'),"),
        ],
    )
    .await;
    assert_eq!(first_loop(&vs), Some(2), "{vs:#?}");
    assert!(
        vs[2].reason.contains("refused as written"),
        "{}",
        vs[2].reason
    );
    assert_eq!(vs[2].rule.as_deref(), Some("dead_end.refused_as_written"));

    // The form fixed after two refusals: the third call runs into something else.
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            refused("data_type.from_import(IMPORT_CONSTR, strict=True)"),
            refused("data_type(type='str', strict=True)"),
            bash(
                "edit 78:86 << 'end_of_edit'",
                "/bin/bash: line 3: unexpected EOF while looking for matching `''",
                false,
            ),
        ],
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");

    // A command-line tool asked for its help after each change prints its usage: that is its
    // output, not a refusal.
    let mut events = Vec::new();
    for flag in ["--verbose", "--force-color", "--skip-checks"] {
        events.push(edit(
            "tzkt/management/commands/tzkt_import.py",
            "12:12",
            &format!("parser.add_argument(\"{flag}\")"),
        ));
        events.push(bash(
            "python manage.py tzkt_import --help",
            "usage: manage.py tzkt_import [-h] [--version] [-v {0,1,2,3}]\n\nImport blocks.",
            false,
        ));
    }
    let e = engine(Config::default());
    let vs = feed(&e, events).await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
}

#[tokio::test]
async fn a_long_block_of_work_replayed_is_a_cycle_before_its_second_period_ends() {
    let block = [
        bash("python reproduce.py", "count: 3 (expected 4)", false),
        bash(
            "grep -n 'def count' src/stats.py",
            "41:def count(rows):",
            false,
        ),
        bash(
            "sed -n 35,60p src/stats.py",
            "def count(rows):\n    return len(rows) - 1",
            false,
        ),
        bash(
            "cat tests/test_stats.py",
            "def test_count(): assert count([1,2,3,4]) == 4",
            false,
        ),
        bash("python -m pytest tests/test_stats.py -q", "1 failed", true),
        bash("git diff", "", false),
        bash("ls src", "stats.py utils.py", false),
    ];
    let mut events: Vec<_> = block.to_vec();
    events.extend(block.iter().take(5).cloned());
    let e = engine(Config::default());
    let vs = feed(&e, events).await;
    // The fourth replayed step in a row (index 7 + 3, `replay_streak`) is the alarm, not the end
    // of the period.
    assert_eq!(first_loop(&vs), Some(10), "{vs:#?}");
    assert_eq!(vs[10].kind, LoopKind::Cycle, "{vs:#?}");
    assert!(vs[10].reason.contains("block of 7"), "{}", vs[10].reason);
    assert_eq!(vs[10].rule.as_deref(), Some("cycle.replay"));
}

#[tokio::test]
async fn a_replay_back_into_the_same_error_is_caught_a_step_sooner() {
    // The block starts at a failing run: replaying it re-hits the same ImportError, so three
    // replayed steps are enough (`replay_streak_at_a_dead_end`); the routine of checks that
    // passed, above, takes four.
    let block = [
        bash(
            "python reproduce_bug.py",
            "Traceback (most recent call last):\n  File \"reproduce_bug.py\", line 1, in <module>\n    from typing import Literal, Union\nImportError: cannot import name 'Literal' from 'typing'",
            true,
        ),
        bash("python --version", "Python 3.7.16", false),
        bash(
            "pip install Literal",
            "Collecting Literal\n  error: subprocess-exited-with-error\nERROR: metadata generation failed",
            true,
        ),
        bash("ls -F", "README.md pydantic/ reproduce_bug.py setup.py tests/", false),
        bash("ls -F pydantic", "__init__.py fields.py main.py typing.py", false),
        bash(
            "grep -n discriminator pydantic/fields.py",
            "55:    get_discriminator_alias_and_values,",
            false,
        ),
        bash("sed -n 120,140p pydantic/fields.py", "        'discriminator',", false),
    ];
    let mut events: Vec<_> = block.to_vec();
    events.extend(block.iter().take(4).cloned());
    let e = engine(Config::default());
    let vs = feed(&e, events).await;
    assert_eq!(first_loop(&vs), Some(9), "{vs:#?}");
    assert_eq!(vs[9].kind, LoopKind::Cycle, "{vs:#?}");
    assert!(
        vs[9].reason.contains("the last 3 actions replay"),
        "{}",
        vs[9].reason
    );

    // Set to 0, the dead end earns no shortcut: the fourth replayed step is the alarm.
    let mut cfg = Config::default();
    cfg.detect.cycles.replay_streak_at_a_dead_end = 0;
    let e = engine(cfg);
    let events: Vec<_> = block.iter().chain(block.iter().take(4)).cloned().collect();
    let vs = feed(&e, events).await;
    assert_eq!(first_loop(&vs), Some(10), "{vs:#?}");
}

#[tokio::test]
async fn a_long_routine_with_new_results_each_time_is_not_a_replay() {
    // The same routine (run, inspect, edit, run) on different inputs: new results every time.
    let mut events = Vec::new();
    for (i, case) in ["empty", "unicode", "nested", "large"].iter().enumerate() {
        events.push(bash(
            &format!("python check.py --case {case}"),
            &format!("case {case}: {} ok", i * 7 + 3),
            false,
        ));
        events.push(bash(
            &format!("cat out/{case}.json | head"),
            &format!("{{\"case\": \"{case}\", \"rows\": {}}}", i * 11),
            false,
        ));
    }
    let e = engine(Config::default());
    let vs = feed(&e, events).await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
}

const FIXES: [(&str, &str); 3] = [
    (
        "src/fmt.py",
        "def render(table):\n    cells = [str(c) for c in table]\n    return sep.join(cells)",
    ),
    ("src/config.py", "SEPARATOR = ' | '\nsep = SEPARATOR"),
    (
        "src/table.py",
        "class Table:\n    def __iter__(self):\n        return iter(self.rows)",
    ),
];

/// A failing run, then each fix followed by the same run with the given output.
fn fix_and_rerun(command: &str, outputs: [&str; 4]) -> Vec<loopguard::Envelope> {
    let mut v = vec![bash(command, outputs[0], false)];
    for ((file, fix), output) in FIXES.iter().zip(&outputs[1..]) {
        v.push(edit(file, "10:12", fix));
        v.push(bash(command, output, false));
    }
    v
}

#[tokio::test]
async fn one_step_failing_the_very_same_way_after_fix_after_fix_is_a_loop() {
    // The same run, unchanged, ending in the very same traceback after three different fixes:
    // none of the changes reached the failure (`unmoved_reruns = 4`). Without that rule it is a
    // question for the judge (an investigation may be ruling causes out).
    let events = || fix_and_rerun("python reproduce.py", [TRACEBACK; 4]);
    let vs = feed(&engine(Config::default()), events()).await;
    assert_eq!(first_loop(&vs), Some(6), "{vs:#?}");
    assert!(
        vs[6].reason.contains("none of it reaching the failure"),
        "{}",
        vs[6].reason
    );
    assert_eq!(vs[6].rule.as_deref(), Some("dead_end.unmoved_reruns"));

    let mut cfg = Config::default();
    cfg.detect.dead_ends.unmoved_reruns = 0;
    let vs = feed(&engine(cfg), events()).await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
}

#[tokio::test]
async fn a_failure_whose_numbers_move_after_each_fix_is_progress() {
    // The same test after each fix, failing on the same assertion line with other values, or
    // with fewer failures each time: the fixes reach the failure, however alike the lines look.
    let assertion = |got: u32| {
        format!(
            "E       AssertionError: assert {got} == 40\nFAILED tests/test_fmt.py::test_width - AssertionError: assert {got} == 40"
        )
    };
    let (a, b, c, d) = (assertion(31), assertion(35), assertion(38), assertion(39));
    let vs = feed(
        &engine(Config::default()),
        fix_and_rerun(
            "python -m pytest tests/test_fmt.py -q",
            [a.as_str(), b.as_str(), c.as_str(), d.as_str()],
        ),
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");

    let failed =
        |n: u32| format!("FAILED tests/test_fmt.py::test_render\nERROR: {n} failed, 12 passed");
    let (a, b, c, d) = (failed(4), failed(3), failed(2), failed(1));
    let vs = feed(
        &engine(Config::default()),
        fix_and_rerun(
            "python -m pytest tests -q",
            [a.as_str(), b.as_str(), c.as_str(), d.as_str()],
        ),
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
    // Nor is it a question for a judge: the failure moved.
    assert!(
        vs.iter().all(|v| !v.reason.contains("ambiguous")),
        "{vs:#?}"
    );
}

#[tokio::test]
async fn runs_back_to_back_are_not_unmoved_reruns() {
    // Nothing between the runs: an exact repeat, the repeat detectors' case, not a claim that
    // changes failed to reach the failure.
    let events = (0..4)
        .map(|_| bash("python reproduce.py", TRACEBACK, false))
        .collect::<Vec<_>>();
    let vs = feed(&engine(Config::default()), events).await;
    assert!(
        vs.iter()
            .all(|v| !v.reason.contains("none of it reaching the failure")),
        "{vs:#?}"
    );
}

/// Like [`fix_and_rerun`], with a reading of the code and a search before each fix: the runs
/// come five events apart, as they do when an agent investigates between them.
fn investigate_fix_and_rerun(command: &str, outputs: [&str; 4]) -> Vec<loopguard::Envelope> {
    let mut v = vec![bash(command, outputs[0], false)];
    for (k, ((file, fix), output)) in FIXES.iter().zip(&outputs[1..]).enumerate() {
        v.push(bash(
            &format!("sed -n {},{}p {file}", 10 * k + 1, 10 * k + 40),
            &format!("{fix}\n# (lines {} to {})", 10 * k + 1, 10 * k + 40),
            false,
        ));
        v.push(bash(
            &format!("grep -rn \"def \" {file}"),
            &format!("{file}:{}: def helper_{k}(x):", 12 + k),
            false,
        ));
        v.push(edit(file, "10:12", fix));
        v.push(bash(command, output, false));
    }
    v
}

#[tokio::test]
async fn the_very_same_failure_across_an_investigation_is_a_loop_but_not_when_it_moves() {
    // Four runs of one script, 13 events from first to last, within `span_window` (17).
    let vs = feed(
        &engine(Config::default()),
        investigate_fix_and_rerun("python reproduce.py", [TRACEBACK; 4]),
    )
    .await;
    assert_eq!(first_loop(&vs), Some(12), "{vs:#?}");
    assert!(
        vs[12].reason.contains("none of it reaching the failure"),
        "{}",
        vs[12].reason
    );
    assert_eq!(vs[12].rule.as_deref(), Some("dead_end.unmoved_reruns"));

    // The window is what sees them: at a window of 9 the runs are too far apart.
    let mut cfg = Config::default();
    cfg.detect.dead_ends.span_window = 9;
    let vs = feed(
        &engine(cfg),
        investigate_fix_and_rerun("python reproduce.py", [TRACEBACK; 4]),
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");

    // The same investigation with the failure moving after each fix is progress.
    let assertion = |got: u32| format!("E       AssertionError: assert {got} == 40");
    let (a, b, c, d) = (assertion(31), assertion(35), assertion(38), assertion(39));
    let vs = feed(
        &engine(Config::default()),
        investigate_fix_and_rerun(
            "python -m pytest tests/test_fmt.py -q",
            [a.as_str(), b.as_str(), c.as_str(), d.as_str()],
        ),
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
}

/// A rule's own section may ask for fewer occurrences than the shared setting: the rule fires as
/// it would with the setting changed for all, and the other rules keep the shared value.
#[tokio::test]
async fn a_rule_asking_for_fewer_occurrences_in_its_own_section_gets_the_calls_it_compares() {
    let attempts = || {
        vec![
            bash("cd /repo && python reproduce.py", TRACEBACK, false),
            bash("cd /repo && python3 reproduce.py", TRACEBACK, false),
        ]
    };
    let own =
        Config::from_toml_str("[detect.rule.dead_end.same_attempt]\ndead_ends.occurrences = 2\n")
            .unwrap();
    let vs = feed(&engine(own), attempts()).await;
    assert_eq!(first_loop(&vs), Some(1), "{vs:#?}");
    assert_eq!(vs[1].rule.as_deref(), Some("dead_end.same_attempt"));
    // The same as the setting changed for every rule; and the shared 3 waits for a third.
    let mut all = Config::default();
    all.detect.dead_ends.occurrences = 2;
    assert_eq!(first_loop(&feed(&engine(all), attempts()).await), Some(1));
    assert_eq!(
        first_loop(&feed(&engine(Config::default()), attempts()).await),
        None
    );
}
