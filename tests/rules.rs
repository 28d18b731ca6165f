//! Every rule of the detection table fires on the real model, and says so: the verdict names it
//! in `rule`. The dead-end rules and the replay have their own tests in `tests/dead_ends.rs`
//! (which check `rule` too); the rest are here. One test checks that no rule of the table goes
//! without a test that names it.

mod common;

use common::*;
use loopguard::eval::judge::AlwaysJudge;
use loopguard::judge::JudgeVerdict;
use loopguard::{Config, Engine, Verdict};
use serde_json::json;
use std::sync::Arc;

/// The first loop verdict, which must name `rule`.
fn fired(vs: &[Verdict], rule: &str) -> usize {
    let i = vs
        .iter()
        .position(|v| v.is_loop)
        .unwrap_or_else(|| panic!("no loop; {rule} should fire: {vs:#?}"));
    assert_eq!(vs[i].rule.as_deref(), Some(rule), "{:#?}", vs[i]);
    i
}

/// An engine whose judge answers "no progress" to every question: a question's rule makes the
/// loop.
fn judged(cfg: Config) -> Engine {
    engine(cfg).with_judge(Arc::new(AlwaysJudge::new(JudgeVerdict::NoProgress)))
}

#[test]
fn every_rule_of_the_table_has_a_test_that_names_it() {
    let mut sources = String::new();
    for entry in std::fs::read_dir("tests").expect("the tests folder") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            sources.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    for rule in loopguard::rules::RULES {
        let named = format!("\"{}\"", rule.id);
        // This file lists none by hand, so a match here is a test's assertion.
        assert!(
            sources.matches(&named).count() >= 1,
            "no test names rule {}",
            rule.id
        );
    }
}

#[tokio::test]
async fn budget_max_events() {
    let mut cfg = Config::default();
    cfg.detect.budget.max_events = 3;
    let vs = feed(
        &engine(cfg),
        (0..4)
            .map(|i| bash(&format!("ls dir{i}"), &format!("file{i}.txt"), false))
            .collect(),
    )
    .await;
    assert_eq!(fired(&vs, "budget.max_events"), 3);
}

#[tokio::test]
async fn content_self_repeat() {
    let chant = "I will check the configuration file now. ".repeat(4);
    let vs = feed(&engine(Config::default()), vec![response("t", &chant)]).await;
    assert_eq!(fired(&vs, "content.self_repeat"), 0);
}

#[tokio::test]
async fn regression_worse_each_time() {
    let progress = |failed: u32| {
        ev(
            "t",
            json!({"type": "progress", "tests_failed": failed, "tests_passed": 10}),
        )
    };
    let vs = feed(&engine(Config::default()), (1..=5).map(progress).collect()).await;
    fired(&vs, "regression.worse_each_time");
}

#[tokio::test]
async fn collaboration_same_request() {
    let vs = feed(
        &engine(Config::default()),
        vec![
            collab(
                "t",
                "dev",
                "qa",
                "Please review the login page for accessibility issues.",
            ),
            collab(
                "t",
                "dev",
                "qa",
                "Could you review the login page for accessibility problems?",
            ),
        ],
    )
    .await;
    assert_eq!(fired(&vs, "collaboration.same_request"), 1);
}

#[tokio::test]
async fn cycle_period() {
    let (a, b) = (
        || {
            bash(
                "git stash",
                "Saved working directory and index state WIP on main",
                false,
            )
        },
        || {
            bash(
                "git stash pop",
                "On branch main\nChanges not staged for commit",
                false,
            )
        },
    );
    let vs = feed(
        &engine(Config::default()),
        vec![a(), b(), a(), b(), a(), b()],
    )
    .await;
    fired(&vs, "cycle.period");
}

#[tokio::test]
async fn repeat_failure() {
    let vs = feed(
        &engine(Config::default()),
        vec![
            failure("t", "TypeError: x is undefined at app.js:10 (10:00:00)"),
            failure("t", "TypeError: x is undefined at app.js:10 (11:30:05)"),
        ],
    )
    .await;
    assert_eq!(fired(&vs, "repeat.failure"), 1);
}

#[tokio::test]
async fn repeat_tool_call() {
    let vs = feed(
        &engine(Config::default()),
        (0..3)
            .map(|_| bash("cat config.yaml", "port: 8080\nhost: localhost", false))
            .collect(),
    )
    .await;
    assert_eq!(fired(&vs, "repeat.tool_call"), 2);
}

#[tokio::test]
async fn response_repeat() {
    let vs = feed(
        &engine(Config::default()),
        vec![
            response(
                "t",
                "I cannot change the booking: the fare is non-refundable.",
            ),
            response(
                "t",
                "I'm unable to change the booking because the fare is non-refundable.",
            ),
            response(
                "t",
                "I cannot change this booking, as the fare is non-refundable.",
            ),
            response(
                "t",
                "This booking cannot be changed: its fare is non-refundable.",
            ),
        ],
    )
    .await;
    // Three alike are an agent restating a refusal to a user who asked again; the fourth is a
    // loop (detect.repeats.response).
    assert_eq!(fired(&vs, "response.repeat"), 3, "{vs:#?}");
}

#[tokio::test]
async fn negative_nothing_found_alike() {
    // A ReAct agent searching one entity reworded, each "Could not find" with the same
    // suggestions; and three guessed names each finding nothing, SWE-agent style.
    let search = |q: &str, similar: &str| {
        call_with(
            "t",
            "Search",
            json!({ "query": q }),
            &format!("Could not find [{q}]. Similar: [{similar}]"),
            false,
        )
    };
    let similar = "'Paramount International Networks', 'VIVA Plus', 'Vauxhall Viva', 'GfK Entertainment charts', 'MTV Music (Polish TV channel)'";
    let vs = feed(
        &engine(Config::default()),
        vec![
            response(
                "t",
                "I need to search VIVA Media AG and find what their new acronym stands for.",
            ),
            search("VIVA Media AG", similar),
            response(
                "t",
                "VIVA Media AG changed its name in 2004, so I need to search VIVA Media AG 2004.",
            ),
            search("VIVA Media AG 2004", similar),
            response("t", "I need to search VIVA Media AG 2004 name change."),
            search(
                "VIVA Media AG 2004 name change",
                &similar.replace("'GfK Entertainment charts', ", ""),
            ),
        ],
    )
    .await;
    assert_eq!(fired(&vs, "negative.nothing_found_alike"), 5);
    // One lookup asked three ways: the first two answered with the same suggestions, the third,
    // the same question reworded, with others. Said alike once and asked alike, the three are one
    // dead end.
    let rainier = "'Mount Rainier', 'Mount Rainier National Park', 'Little Tahoma Peak', 'Emmons Glacier', 'Liberty Cap'";
    let vs = feed(
        &engine(Config::default()),
        vec![
            search("elevation of Mount Rainier", rainier),
            search("Mount Rainier elevation", rainier),
            search(
                "Mount Rainier elevation in feet",
                "'List of mountain peaks of the United States', 'Foot (unit)', 'Cascade Range', 'Washington (state)', 'Summit'",
            ),
        ],
    )
    .await;
    assert_eq!(fired(&vs, "negative.nothing_found_alike"), 2);
    // Empty answers that suggest other things each time are new information.
    let vs = feed(
        &engine(Config::default()),
        vec![
            search("Marathi songs", "'List of songs recorded by Kavita Krishnamurthy', 'Palak Muchhal', 'Benny Dayal', 'Ajay-Atul'"),
            search("Marathi lyrics", "'Raundal', 'Deewani Mastani', 'Jai Jai Maharashtra Maza', 'Ved (film)'"),
            search("Marathi bhavageete lyrics", "'Geet Ramayan'"),
        ],
    )
    .await;
    assert!(vs.iter().all(|v| !v.is_loop), "{vs:#?}");
}

#[tokio::test]
async fn negative_in_a_row() {
    let err = "ModuleNotFoundError: No module named 'foo'";
    let vs = feed(
        &engine(Config::default()),
        vec![
            bash("python run.py", err, true),
            bash("python3 run.py --fast", err, true),
            bash("python -m run", err, true),
        ],
    )
    .await;
    assert_eq!(fired(&vs, "negative.in_a_row"), 2);
}

#[tokio::test]
async fn finding_same_finding() {
    let search = |q: &str| {
        call_with(
            "t",
            "search_dir",
            json!({ "command": format!("search_dir \"{q}\" tests") }),
            &format!("Found 2 matches for \"{q}\" in /r/tests:\n/r/tests/nbs/test.ipynb (2 matches)\nEnd of matches for \"{q}\" in /r/tests"),
            false,
        )
    };
    let vs = feed(
        &engine(Config::default()),
        vec![
            search("### BEGIN SOLUTION"),
            search("BEGIN SOLUTION"),
            search("END SOLUTION"),
        ],
    )
    .await;
    assert_eq!(fired(&vs, "finding.same_finding"), 2);
}

#[tokio::test]
async fn steps_limit() {
    // A step is entered when an event names another step than the one before: the worker's 4th
    // entry, back from review each time, is one more than its limit of 3.
    let step = |i: u32| {
        let name = if i % 2 == 0 { "worker" } else { "review" };
        env(json!({"task_id": "t", "step": name,
                   "event": {"type": "tool_call", "tool": "bash",
                             "args": {"command": format!("make target{i}")},
                             "result": {"output": format!("built target{i}")}}}))
    };
    let vs = feed(&engine(Config::default()), (0..7).map(step).collect()).await;
    assert_eq!(fired(&vs, "steps.limit"), 6);
}

#[tokio::test]
async fn transitions_cycle() {
    let t = |from: &str, to: &str| ev("t", json!({"type": "transition", "from": from, "to": to}));
    let vs = feed(
        &engine(Config::default()),
        vec![
            t("plan", "implement"),
            t("implement", "review"),
            t("review", "plan"),
            t("plan", "implement"),
            t("implement", "review"),
            t("review", "plan"),
        ],
    )
    .await;
    fired(&vs, "transitions.cycle");
}

#[tokio::test]
async fn judge_grey_band() {
    let vs = feed(
        &judged(Config::default()),
        vec![
            failure(
                "t",
                "TypeError: Cannot read properties of undefined (reading 'name') in ProfileCard",
            ),
            failure(
                "t",
                "ProfileCard crashed: cannot read property 'name' of undefined",
            ),
        ],
    )
    .await;
    assert_eq!(fired(&vs, "judge.grey_band"), 1);
}

#[tokio::test]
async fn judge_different_attempts() {
    let traceback = "Traceback (most recent call last):\n  File \"/repo/reproduce.py\", line 7, in <module>\n    print(fmt.render(table))\n  File \"/repo/src/fmt.py\", line 88, in render\n    return sep.join(cells)\nTypeError: sequence item 1: expected str instance, int found";
    let events = || {
        vec![
            bash("cd /repo && python reproduce.py", traceback, false),
            bash("python -m pytest tests/test_fmt.py -q", traceback, false),
            bash("python -c 'import fmt; fmt.render([1])'", traceback, false),
        ]
    };
    let vs = feed(&judged(Config::default()), events()).await;
    assert_eq!(fired(&vs, "judge.different_attempts"), 2);
    // Without a judge the fallback says "not a loop", and the verdict still names the question.
    let vs = feed(&engine(Config::default()), events()).await;
    assert!(!vs[2].is_loop);
    assert_eq!(vs[2].rule.as_deref(), Some("judge.different_attempts"));
}

#[tokio::test]
async fn judge_different_changes() {
    let fail = "FAILED tests/test_fmt.py::test_render - AssertionError: assert 'a|1' == 'a | 1'";
    let vs = feed(&judged(Config::default()), fixes_then_runs(fail, [""; 3])).await;
    assert_eq!(fired(&vs, "judge.different_changes"), 5);
    // A line every run prints the same way changes nothing.
    let same = ["collected 4 items"; 3];
    let vs = feed(&judged(Config::default()), fixes_then_runs(fail, same)).await;
    assert_eq!(fired(&vs, "judge.different_changes"), 5);
    // The same failure, but each run prints something it did not before around it (a debugging
    // line each change made fire): the changes reached the step, so there is nothing to ask.
    let printed = [
        "render: cells = ['a', 1]",
        "render: separator ' | ' from config",
        "render: rows from Table.__iter__",
    ];
    let vs = feed(&judged(Config::default()), fixes_then_runs(fail, printed)).await;
    assert!(
        !vs[5].is_loop && vs[5].rule.as_deref() != Some("judge.different_changes"),
        "{:#?}",
        vs[5]
    );
}

/// Three different edits, each followed by the same test run failing with `fail`, the run
/// printing `printed[i]` before it.
fn fixes_then_runs(fail: &str, printed: [&str; 3]) -> Vec<loopguard::Envelope> {
    let mut events = Vec::new();
    for ((file, code), printed) in [
        (
            "src/fmt.py",
            "def render(table):\n    cells = [str(c) for c in table]",
        ),
        ("src/config.py", "SEPARATOR = ' | '\nsep = SEPARATOR"),
        (
            "src/table.py",
            "class Table:\n    def __iter__(self):\n        return iter(self.rows)",
        ),
    ]
    .into_iter()
    .zip(printed)
    {
        events.push(call_with(
            "t",
            "edit",
            json!({ "file": file, "lines": "10:12", "replacement": code }),
            "File updated.",
            false,
        ));
        let out = format!("{printed}\n{fail}");
        events.push(bash(
            "python -m pytest tests/test_fmt.py -x -q",
            out.trim(),
            true,
        ));
    }
    events
}

#[tokio::test]
async fn judge_redone_calls() {
    // A poll moving forward, or the same step redone for nothing? The output changed, barely.
    let poll = |step: usize| {
        bash(
            "cat build.log",
            &format!("building wheel for loopguard\nstep {step} of 10 done"),
            false,
        )
    };
    let vs = feed(&judged(Config::default()), vec![poll(1), poll(2)]).await;
    assert_eq!(fired(&vs, "judge.redone_calls"), 1);
}

#[tokio::test]
async fn repeat_piled_up() {
    // The same edit applied again right after it went through: the line it inserts is there
    // twice. No judge needed: nothing but copies of what it printed came back.
    let applied = |lines: usize| {
        let view: String = (1..=lines)
            .map(|i| format!("{i}:import pydantic\n"))
            .collect();
        call_with(
            "t",
            "edit",
            json!({ "command": "edit 1:2\nimport datetime\nend_of_edit" }),
            &format!("[File: /r/mock.py ({lines} lines total)]\n{view}class DateTime(datetime.datetime):\n    pass\nFile updated. Please review the changes."),
            false,
        )
    };
    let vs = feed(
        &engine(Config::default()),
        vec![
            call_with(
                "t",
                "open",
                json!({"path": "mock.py"}),
                "[File: /r/mock.py (8 lines total)]",
                false,
            ),
            applied(11),
            applied(12),
        ],
    )
    .await;
    assert_eq!(fired(&vs, "repeat.piled_up"), 2);
}

#[tokio::test]
async fn judge_failures_in_a_row() {
    let mut cfg = Config::default();
    cfg.judge.ask_after_failures = 3;
    let vs = feed(
        &judged(cfg),
        vec![
            failure("t", "build failed: missing header stdio.h"),
            failure("t", "linker error: undefined reference to `main'"),
            failure("t", "test suite aborted: segmentation fault in parser"),
        ],
    )
    .await;
    assert_eq!(fired(&vs, "judge.failures_in_a_row"), 2);
}

/// What a rule may have its own value for, it alone reads: every such setting changed in the own
/// section of every rule declaring it gives, event by event, the verdicts of the setting changed
/// for all. A rule reading a setting it does not declare, or the engine reading one before the
/// table runs, makes the two differ. The runs (tests/fixtures/rule_sections.jsonl) are real runs
/// of five families on which these settings decide a verdict.
#[tokio::test]
async fn a_setting_changed_in_the_section_of_every_rule_declaring_it_is_the_setting_changed() {
    use loopguard::score::{parse_run, score_run};
    let runs: Vec<loopguard::score::Run> =
        std::fs::read_to_string("tests/fixtures/rule_sections.jsonl")
            .unwrap()
            .lines()
            .map(|l| parse_run(l).unwrap())
            .collect();
    let reference: toml::Table = Config::default().to_toml().parse().unwrap();
    let lookup = |key: &str| -> toml::Value {
        let mut t = &reference;
        let (parents, leaf) = key.rsplit_once('.').unwrap();
        for p in parents.split('.') {
            t = t[p].as_table().unwrap();
        }
        t[leaf].clone()
    };
    let mut owners: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for rule in loopguard::rules::RULES {
        for key in rule.own_settings() {
            if !key.ends_with(".*") {
                owners.entry(key).or_default().push(rule.id);
            }
        }
    }
    let verdicts = |cfg: Config| {
        let cfg = Arc::new(cfg);
        let runs = runs.clone();
        async move {
            let mut out = Vec::new();
            for run in runs {
                let score = score_run(cfg.clone(), model(), run).await.unwrap();
                out.push(
                    score
                        .verdicts
                        .iter()
                        .map(|v| (v.is_loop, v.rule.clone(), v.kind))
                        .collect::<Vec<_>>(),
                );
            }
            out
        }
    };
    let defaults = verdicts(Config::default()).await;
    let mut deciding = Vec::new();
    for (key, ids) in &owners {
        let changed: Vec<String> = match lookup(key) {
            toml::Value::Integer(n) => vec![(n - 1).max(1).to_string(), (n + 1).to_string()],
            toml::Value::Float(x) => vec![
                format!("{:.2}", x - 0.04),
                format!("{:.2}", (x + 0.04).min(0.99)),
            ],
            toml::Value::Boolean(b) => vec![(!b).to_string()],
            other => panic!("{key}: no test value for {other}"),
        };
        let relative = key.strip_prefix("detect.").unwrap();
        for value in changed {
            let global = Config::load(
                None,
                std::iter::empty(),
                &[(key.to_string(), value.clone())],
            );
            let sections: Vec<(String, String)> = ids
                .iter()
                .map(|id| (format!("detect.rule.{id}.{relative}"), value.clone()))
                .collect();
            let own = Config::load(None, std::iter::empty(), &sections);
            let (global, own) = match (global, own) {
                (Ok(g), Ok(o)) => (g, o),
                (Err(_), Err(_)) => continue,
                (g, o) => panic!("{key} = {value}: loads differ: {g:?} / {o:?}"),
            };
            let (g, o) = (verdicts(global).await, verdicts(own).await);
            for (run, (g, o)) in runs.iter().zip(g.iter().zip(&o)) {
                assert_eq!(
                    g, o,
                    "{key} = {value} set for all and in the sections of {ids:?} differ on {}",
                    run.id
                );
            }
            if g != defaults {
                deciding.push(format!("{key} = {value}"));
            }
        }
    }
    // The runs are worth testing on only if the settings decide something there.
    assert!(deciding.len() >= 20, "only {deciding:?} change a verdict");
}

/// An input a rule declares (`Rule::inputs`: an embedding round of its own) is computed only
/// while a rule needing it is on: with every such rule in `detect.rules_off`, the engine asks the
/// model for fewer texts. (The stub model: what is counted is the texts asked for, not what they
/// mean.)
#[tokio::test]
async fn an_input_is_computed_only_while_a_rule_needing_it_is_on() {
    use loopguard::rules::{Input, RULES};
    async fn texts_asked(off: &[&str], events: Vec<loopguard::Envelope>) -> u64 {
        let mut cfg = Config::default();
        cfg.detect.rules_off = off.iter().map(|id| id.to_string()).collect();
        let model = loopguard::Embedder::start_stub();
        feed(&Engine::new(Arc::new(cfg), model.clone()), events).await;
        model.stats().model_texts()
    }
    let fail = "FAILED tests/test_fmt.py::test_render - AssertionError: assert 'a|1' == 'a | 1'";
    for input in Input::ALL {
        let events = match input {
            Input::ChangeCosines => fixes_then_runs(fail, [""; 3]),
            Input::CourtesyTurns => vec![
                collab(
                    "c",
                    "engineer",
                    "manager",
                    "Here is the training script, tested on the sample data.",
                ),
                collab(
                    "c",
                    "manager",
                    "engineer",
                    "Great, let me know if you need anything else.",
                ),
                collab(
                    "c",
                    "engineer",
                    "manager",
                    "Sure, will do. Thank you for your help!",
                ),
                collab(
                    "c",
                    "manager",
                    "engineer",
                    "You're welcome! Have a great day!",
                ),
            ],
        };
        let needing: Vec<&str> = RULES
            .iter()
            .filter(|r| r.inputs.contains(&input))
            .map(|r| r.id)
            .collect();
        let on = texts_asked(&[], events.clone()).await;
        let off = texts_asked(&needing, events).await;
        assert!(
            off < on,
            "{input:?}: {on} texts with {needing:?} on, {off} with them off"
        );
    }
}
