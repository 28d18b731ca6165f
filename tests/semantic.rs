//! Reworded loops are caught and legitimate repetition is not, on the real model and the
//! default configuration.

mod common;

use common::*;
use loopguard::verdict::{ActionType, LoopKind};
use loopguard::Config;
use serde_json::json;

/// The first loop verdict is the one for event `index`, and of this kind.
#[track_caller]
fn assert_first_loop(vs: &[loopguard::Verdict], index: usize, kind: LoopKind) {
    assert_eq!(first_loop(vs), Some(index), "{vs:#?}");
    assert_eq!(vs[index].kind, kind, "{vs:#?}");
}

#[tokio::test]
async fn three_rewordings_of_one_failure_are_a_loop() {
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            failure("t", "TypeError: Cannot read properties of undefined (reading 'name') at UserCard (src/components/UserCard.tsx:14:22)"),
            failure("t", "Uncaught TypeError: cannot read property 'name' of undefined in UserCard.tsx line 14"),
            failure("t", "TypeError: undefined has no properties (reading 'name') — UserCard component"),
        ],
    )
    .await;
    let first = first_loop(&vs).expect("a loop by the third event");
    assert!(first <= 2);
    assert_eq!(vs[2].kind, LoopKind::SemanticRepeat);
    assert!(vs[2].similarity.unwrap() >= e.config().detect.similarity.failure);
    assert_eq!(vs[2].loop_count, 2);
    // The verdict names what it matched and how.
    assert!(vs[2].reason.contains("reworded"), "{}", vs[2].reason);
    assert!(vs[2].matched.as_ref().unwrap().text.contains("usercard"));
}

#[tokio::test]
async fn three_rewordings_of_one_collaboration_request_are_a_loop() {
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            collab(
                "t",
                "backend-dev",
                "qa",
                "Could you check why the payments integration test keeps timing out?",
            ),
            collab(
                "t",
                "backend-dev",
                "qa",
                "Can you look into the payments integration test timing out again?",
            ),
            collab(
                "t",
                "backend-dev",
                "qa",
                "Please investigate the timeout in the payments integration tests.",
            ),
        ],
    )
    .await;
    assert!(first_loop(&vs).expect("a loop by the third event") <= 2);
    assert_eq!(vs[2].kind, LoopKind::CollaborationLoop);
    // The same request to a different agent is not the same collaboration.
    let v = e
        .evaluate(collab(
            "t",
            "backend-dev",
            "security",
            "Could you check why the payments integration test keeps timing out?",
        ))
        .await
        .unwrap();
    assert!(!v.is_loop);
}

#[tokio::test]
async fn three_paraphrased_tool_calls_with_the_same_result_are_a_loop() {
    let e = engine(Config::default());
    let result = "No documentation pages matched your query.";
    let vs = feed(
        &e,
        vec![
            call_with(
                "t",
                "search_docs",
                json!({"query": "how to configure retry backoff in the http client"}),
                result,
                false,
            ),
            call_with(
                "t",
                "search_docs",
                json!({"query": "http client retry backoff configuration"}),
                result,
                false,
            ),
            call_with(
                "t",
                "search_docs",
                json!({"query": "configuring backoff for retries in the HTTP client"}),
                result,
                false,
            ),
        ],
    )
    .await;
    assert_first_loop(&vs, 2, LoopKind::SemanticRepeat);
}

#[tokio::test]
async fn three_different_failures_that_show_progress_are_not_a_loop() {
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            failure("t", "ModuleNotFoundError: No module named 'yaml'"),
            failure(
                "t",
                "FAILED tests/test_config.py::test_load - KeyError: 'database'",
            ),
            failure(
                "t",
                "AssertionError: expected port 5432, got 5433 in tests/test_config.py::test_port",
            ),
        ],
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
    // And failures whose test counts improve are progress even when the wording is alike.
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            failure("t", "=== 5 failed, 20 passed in 1.20s ==="),
            failure("t", "=== 3 failed, 22 passed in 1.31s ==="),
            failure("t", "=== 1 failed, 24 passed in 1.28s ==="),
        ],
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
}

#[tokio::test]
async fn the_same_error_at_a_new_time_is_an_exact_repeat() {
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            failure("t", "2026-11-21T10:00:00Z ERROR worker 3: connection pool exhausted after 30s (request 4f1c2a3e-9b7d-4e6f-8a1b-2c3d4e5f6a7b) at /tmp/tmpa8f9z2k1/job.py:42"),
            failure("t", "2026-11-21T10:05:13Z ERROR worker 7: connection pool exhausted after 31.5s (request 0b1c2d3e-4f5a-4b7c-8d9e-0f1a2b3c4d5e) at /tmp/tmpq0wz77xx/job.py:57"),
        ],
    )
    .await;
    assert_eq!(vs[1].kind, LoopKind::ExactRepeat, "{:?}", vs[1]);
    assert_eq!(vs[1].similarity, None, "decided on keys, without the model");
}

#[tokio::test]
async fn polling_with_a_moving_number_is_progress() {
    let e = engine(Config::default());
    let vs = feed(
        &e,
        (0..6)
            .map(|i| {
                call_with(
                    "t",
                    "job_status",
                    json!({"job_id": "build-17"}),
                    &format!(
                        "Job build-17 is running: {}% complete, {} of 40 steps done",
                        (i + 1) * 15,
                        (i + 1) * 6
                    ),
                    false,
                )
            })
            .collect(),
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
    // The same poll with the same answer is a loop.
    let e = engine(Config::default());
    let vs = feed(
        &e,
        (0..3)
            .map(|_| {
                call_with(
                    "t",
                    "job_status",
                    json!({"job_id": "build-17"}),
                    "Job build-17 is queued",
                    false,
                )
            })
            .collect(),
    )
    .await;
    assert_first_loop(&vs, 2, LoopKind::ExactRepeat);
}

#[tokio::test]
async fn paging_through_a_file_is_progress() {
    let e = engine(Config::default());
    let vs = feed(
        &e,
        (0..6)
            .map(|i| {
                let (a, b) = (100 + i * 50, 150 + i * 50);
                call_with(
                    "t",
                    "bash",
                    json!({"command": format!("sed -n '{a},{b}p' src/parser.py")}),
                    &format!(
                        "{a}: def parse_{i}(tokens):\n{}:     return Node(tokens[{i}])",
                        a + 1
                    ),
                    false,
                )
            })
            .collect(),
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
}

#[tokio::test]
async fn a_test_run_after_each_distinct_fix_is_progress() {
    // Each fix moves the failure (the BRIEF's progress: numbers that move, tests that change).
    // The very same failure after three fixes is rule 2c's loop (`tests/dead_ends.rs`).
    let e = engine(Config::default());
    let failing = |got: u32| {
        call_with(
            "t",
            "bash",
            json!({"command": "python -m pytest tests/test_parser.py -x"}),
            &format!(
                "FAILED tests/test_parser.py::test_nested - AssertionError: assert {got} == 4"
            ),
            true,
        )
    };
    let test = || failing(3);
    let fix = |old: &str, new: &str| {
        call_with(
            "t",
            "str_replace_editor",
            json!({"command": "str_replace", "path": "src/parser.py", "old_str": old, "new_str": new}),
            "The file src/parser.py has been edited.",
            false,
        )
    };
    let vs = feed(
        &e,
        vec![
            failing(3),
            fix("depth = 0", "depth = 1"),
            failing(5),
            fix("if token == '(':", "if token in '([':"),
            failing(2),
            fix("return depth", "return depth + nested"),
            failing(3),
        ],
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
    // Re-running it with nothing changed in between is a loop.
    let e = engine(Config::default());
    let vs = feed(&e, vec![test(), test(), test()]).await;
    assert_eq!(first_loop(&vs), Some(2), "{vs:#?}");
}

#[tokio::test]
async fn a_reworded_a_b_a_b_oscillation_is_a_cycle() {
    let e = engine(Config::default());
    let a1 = call_with(
        "t",
        "read_file",
        json!({"path": "config/settings.yaml"}),
        "database:\n  host: localhost\n  port: 5432",
        false,
    );
    let b1 = call_with(
        "t",
        "run_command",
        json!({"command": "python manage.py migrate"}),
        "django.db.utils.OperationalError: could not connect to server: Connection refused",
        true,
    );
    let a2 = call_with(
        "t",
        "read_file",
        json!({"path": "./config/settings.yaml"}),
        "database:\n  host: localhost\n  port: 5432",
        false,
    );
    let b2 = call_with(
        "t",
        "run_command",
        json!({"command": "python3 manage.py migrate"}),
        "django.db.utils.OperationalError: could not connect to server: Connection refused",
        true,
    );
    let vs = feed(&e, vec![a1, b1, a2, b2]).await;
    assert_first_loop(&vs, 3, LoopKind::Cycle);
}

#[tokio::test]
async fn different_searches_that_all_find_nothing_are_a_loop() {
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            call_with(
                "t",
                "grep",
                json!({"pattern": "parse_header", "path": "src/"}),
                "No matches found",
                false,
            ),
            call_with(
                "t",
                "find_symbol",
                json!({"name": "HeaderParser"}),
                "No matches found",
                false,
            ),
            call_with(
                "t",
                "search_code",
                json!({"q": "def header"}),
                "no matches found.",
                false,
            ),
        ],
    )
    .await;
    let snap = e.snapshot("t").await.unwrap().unwrap();
    assert_eq!(first_loop(&vs), Some(2), "{vs:#?} {:#?}", snap.window);
    assert_eq!(vs[2].kind, LoopKind::ResultRepeat);
    // ...and different commands failing the same way are `same_error`.
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            call_with(
                "t",
                "bash",
                json!({"command": "pip install torch==2.9.1"}),
                "ERROR: No matching distribution found for torch==2.9.1",
                true,
            ),
            call_with(
                "t",
                "bash",
                json!({"command": "conda install -y -c pytorch pytorch=2.9.1"}),
                "ERROR: No matching distribution found for torch==2.9.1",
                true,
            ),
            call_with(
                "t",
                "bash",
                json!({"command": "uv add torch==2.9.1 --frozen"}),
                "ERROR: No matching distribution found for torch==2.9.1",
                true,
            ),
        ],
    )
    .await;
    assert_first_loop(&vs, 2, LoopKind::SameError);
}

#[tokio::test]
async fn one_guessed_file_name_after_another_finding_nothing_is_a_loop() {
    // Each search names another file, so the result match keeps them apart; the outcome is the
    // same dead end every time.
    let find = |name: &str, found: &str| {
        call_with(
            "t",
            "find_file",
            json!({ "command": format!("find_file \"{name}\"") }),
            found,
            false,
        )
    };
    let none = |name: &str| format!("No matches found for \"{name}\" in /latexify_py\n");
    let e = engine(Config::default());
    let vs = feed(
        &e,
        ["math", "equation", "latex"]
            .iter()
            .map(|n| find(n, &none(n)))
            .collect(),
    )
    .await;
    assert_first_loop(&vs, 2, LoopKind::ResultRepeat);

    // With a search that found its file between, two misses on each side are not a loop.
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            find("math", &none("math")),
            find("equation", &none("equation")),
            find(
                "latexify.py",
                "Found 1 matches for \"latexify.py\" in /latexify_py:\n/latexify_py/src/latexify.py\n",
            ),
            find("codegen", &none("codegen")),
            find("frontend", &none("frontend")),
        ],
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
}

#[tokio::test]
async fn one_search_reworded_finding_the_same_file_is_a_loop() {
    // Each search quotes its own query back, so no two results read the same; what they found,
    // one notebook, is the same every time.
    let search = |q: &str, files: &[&str]| {
        let mut out = format!(
            "Found {} matches for \"{q}\" in /nbchkr/tests:\n",
            files.len() * 2
        );
        for f in files {
            out.push_str(&format!("/nbchkr/tests/{f} (2 matches)\n"));
        }
        out.push_str(&format!("End of matches for \"{q}\" in /nbchkr/tests\n"));
        call_with(
            "t",
            "search_dir",
            json!({ "command": format!("search_dir \"{q}\" tests") }),
            &out,
            false,
        )
    };
    let e = engine(Config::default());
    let vs = feed(
        &e,
        ["### BEGIN SOLUTION", "BEGIN SOLUTION", "END SOLUTION"]
            .iter()
            .map(|q| search(q, &["nbs/test.ipynb"]))
            .collect(),
    )
    .await;
    assert_first_loop(&vs, 2, LoopKind::ResultRepeat);

    // Searches that each find other files learn something each time.
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            search("BEGIN SOLUTION", &["nbs/test.ipynb"]),
            search("cell_type", &["nbs/test.ipynb", "nbs/submission.ipynb"]),
            search("markdown", &["nbs/submission.ipynb"]),
        ],
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");

    // A finder walked over different names finds each: the name it was given is its finding.
    let find = |name: &str| {
        call_with(
            "t",
            "find_file",
            json!({ "command": format!("find_file \"{name}\" docstring_parser") }),
            &format!("Found 1 matches for \"{name}\" in /d/docstring_parser:\n/d/docstring_parser/{name}\n"),
            false,
        )
    };
    let e = engine(Config::default());
    let vs = feed(
        &e,
        ["parser.py", "styles.py", "rest.py"]
            .iter()
            .map(|n| find(n))
            .collect(),
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
}

#[tokio::test]
async fn reworded_edits_with_empty_results_are_different_actions() {
    // Three different sed edits that read alike and all answer "": not the same action.
    let e = engine(Config::default());
    let vs = feed(
        &e,
        ["abstract", "base", "inherited"]
            .iter()
            .map(|f| {
                call_with(
                    "t",
                    "bash",
                    json!({"command": format!("sed -i \"s/friends_{f} = models.ManyToManyField('self')/friends_{f} = models.ManyToManyField('self', symmetrical=False)/\" models.py")}),
                    "",
                    false,
                )
            })
            .collect(),
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
}

#[tokio::test]
async fn external_failures_are_reported_but_never_counted() {
    let e = engine(Config::default());
    let vs = feed(
        &e,
        (0..4)
            .map(|_| {
                failure(
                    "t",
                    "connect ECONNREFUSED 10.0.3.7:5432 - could not reach the payments API",
                )
            })
            .collect(),
    )
    .await;
    assert!(vs[1..].iter().all(|v| v.is_loop && !v.counted), "{vs:#?}");
    assert!(vs.iter().all(|v| v.loop_count == 0));
    assert_eq!(vs[1].action.kind, ActionType::RetryWithHint);
    assert_eq!(vs[3].action.kind, ActionType::Escalate);
}

#[tokio::test]
async fn unrelated_events_do_not_match() {
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            failure(
                "t",
                "TypeError: Cannot read properties of undefined (reading 'name')",
            ),
            failure("t", "ReferenceError: process is not defined"),
            failure(
                "t",
                "SyntaxError: Unexpected token '}' in JSON at position 42",
            ),
            failure(
                "t",
                "Error: ENOENT: no such file or directory, open 'config.json'",
            ),
        ],
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
}

#[tokio::test]
async fn an_exact_repeat_keeps_the_rewordings_between_its_occurrences() {
    // a, b (a reworded), a: the third is decided on keys without the model, and still counts
    // b as an occurrence.
    let e = engine(Config::default());
    let a = || {
        call_with(
            "t",
            "search_docs",
            json!({"query": "how to configure retry backoff in the http client"}),
            "No documentation pages matched your query.",
            false,
        )
    };
    let b = call_with(
        "t",
        "search_docs",
        json!({"query": "http client retry backoff configuration"}),
        "No documentation pages matched your query.",
        false,
    );
    let vs = feed(&e, vec![a(), b, a()]).await;
    assert_first_loop(&vs, 2, LoopKind::ExactRepeat);
    assert!(vs[2].reason.contains("the 3rd time"), "{}", vs[2].reason);
}

#[tokio::test]
async fn a_rewording_of_a_rewording_with_the_same_output_counts_all_three() {
    // From pydicom-1694 in the reworded runs: three wordings of one command with the same output
    // are one action run three times, even when two of them are not rewordings of each other.
    // The default int8 model puts the first two at 0.785, the first and third at 0.969, the
    // second and third at 0.801 (`loopguard compare`); the test's threshold, 0.795, sits between:
    // the second is new work beside the first, the third is the same as both, and all three
    // count. (With the shipped model the first pair sat at 0.8225 against the default 0.82.)
    let mut cfg = Config::default();
    cfg.detect.similarity.tool_call = 0.795;
    let e = engine(cfg);
    let output =
        "<returncode>0</returncode>\n<output>\nDataset created with IS field containing '2.0'\n\
                  Element value: 2.0\nElement VR: IS\nSuccess! JSON dict created: \
                  {'00100020': {'vr': 'IS', 'Value': [2]}}\n</output>";
    let run = |command: &str| call_with("t", "bash", json!({ "command": command }), output, false);
    let vs = feed(
        &e,
        vec![
            run("cd /testbed && python reproduce_issue.py"),
            run("python reproduce_issue.py"),
            run("cd /testbed && python3 reproduce_issue.py"),
        ],
    )
    .await;
    assert_eq!(
        vs[1].reason, "new work",
        "the second wording is not the first's: {:?}",
        vs[1]
    );
    assert_first_loop(&vs, 2, LoopKind::SemanticRepeat);
}

#[tokio::test]
async fn one_reply_template_walked_over_different_items_is_not_a_loop() {
    // tau-bench task33/trial0: each reply resembles its neighbour, none is the same reply.
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            response(
                "t",
                "The reservation **NM1VX1** is in basic economy class, which cannot be modified to \
                 change flights or cabin class. Therefore, I cannot upgrade this reservation to \
                 business class.\n\nLet's proceed with checking the next reservation, **KC18K6**.",
            ),
            response(
                "t",
                "The reservation **KC18K6** is also in basic economy class, which cannot be modified \
                 to change flights or cabin class. Therefore, I cannot upgrade this reservation to \
                 business class either.\n\nLet's proceed with checking the next reservation, **H8Q05L**.",
            ),
            response(
                "t",
                "The reservation **H8Q05L** is also in basic economy class, which cannot be modified \
                 to change flights or cabin class. Therefore, I cannot upgrade this reservation to \
                 business class either.\n\nLet's proceed with checking the final reservation, **WUNA5K**.",
            ),
        ],
    )
    .await;
    assert_eq!(first_loop(&vs), None, "{vs:#?}");
}

#[tokio::test]
async fn a_poll_whose_line_number_moves_on_is_not_a_repeat_but_a_traceback_at_a_shifted_line_is() {
    // Normalisation masks line numbers only where they locate an error: a log tail reading
    // line 0, then 1, then 2 is moving on; the same traceback after an edit shifted the line
    // is the same failure.
    let e = engine(Config::default());
    let vs = feed(
        &e,
        (0..5)
            .map(|i| {
                call_with(
                    "t",
                    "tail_log",
                    json!({"file": "ingest.log"}),
                    &format!("ingest.log: reading line {i}, waiting for more input"),
                    false,
                )
            })
            .collect(),
    )
    .await;
    assert!(vs.iter().all(|v| !v.is_loop), "{vs:#?}");
    let e = engine(Config::default());
    let vs = feed(
        &e,
        (0..3)
            .map(|i| {
                call_with(
                    "t",
                    "bash",
                    json!({"command": "python reproduce.py"}),
                    &format!(
                        "Traceback (most recent call last):\n  File \"/repo/reproduce.py\", line {}, in <module>\n    main()\nKeyError: 'name'",
                        7 + i
                    ),
                    true,
                )
            })
            .collect(),
    )
    .await;
    assert!(vs[2].is_loop, "{vs:#?}");
}

#[tokio::test]
async fn one_failure_on_other_hosts_and_processes_is_a_loop_but_another_version_is_not() {
    // A failure's numbers that only identify (an address, a port, a pid, a numbered node) never
    // keep it apart from the same failure elsewhere; numbers that measure (the version found)
    // still do: an upgrade a step at a time is moving on.
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            failure("t", "error: could not connect to 10.251.214.18:50010 for block blk_-7470463748569167 (node-11, sshd[4242])"),
            failure("t", "error: could not connect to 10.250.17.177:50010 for block blk_4385764838827095986 (node-224, sshd[5158])"),
            failure("t", "error: could not connect to 10.251.31.5:50010 for block blk_5813361416484537967 (node-3, sshd[6021])"),
        ],
    )
    .await;
    assert!(vs[2].is_loop, "{vs:#?}");
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            failure(
                "t",
                "ImportError: pandas 2.2 requires numpy>=1.24, found numpy 1.21",
            ),
            failure(
                "t",
                "ImportError: pandas 2.2 requires numpy>=1.24, found numpy 1.22",
            ),
            failure(
                "t",
                "ImportError: pandas 2.2 requires numpy>=1.24, found numpy 1.23",
            ),
        ],
    )
    .await;
    assert!(vs.iter().all(|v| !v.is_loop), "{vs:#?}");
}
