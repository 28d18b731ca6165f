//! Detection that holds on families of agents no rule was written for (the families issue), on
//! the real model: group chats, people writing to agents, coding-agent sessions. Each behaviour
//! that keeps legitimate repetition quiet is tested beside the loop it must not hide.

mod common;

use common::*;
use loopguard::{Config, Envelope, Verdict};
use serde_json::json;

fn first_rule(vs: &[Verdict]) -> Option<(usize, String)> {
    let i = first_loop(vs)?;
    Some((i, vs[i].rule.clone().unwrap_or_default()))
}

fn to_group(task: &str, from: &str, group: &str, request: &str) -> Envelope {
    ev(
        task,
        json!({"type": "collaboration", "from_agent": from, "to_agent": group,
               "request": request, "to_group": true}),
    )
}

/// A coding agent's own output after a turn, as a tool call: what it did, then its status line
/// of counters (tokens sent, cost so far).
fn status(task: &str, did: &str, sent: f32, cost: f32) -> Envelope {
    call_with(
        task,
        "agent",
        json!({"after": "edit"}),
        &format!(
            "{did}\nTokens: {sent:.1}k sent, 312 received. Cost: $0.01 message, ${cost:.2} session."
        ),
        false,
    )
}

// 1. What answers a request. ---------------------------------------------------------------

#[tokio::test]
async fn in_a_group_chat_another_members_message_answers_a_request() {
    let e = engine(Config::default());
    let ask = "Please write the script that downloads the daily exchange rates.";
    // Every message goes to the hub; the coder's message answers the planner's, which comes
    // back as the next step of the plan, answered again.
    let vs = feed(
        &e,
        vec![
            to_group("g", "planner", "chat_manager", ask),
            to_group(
                "g",
                "coder",
                "chat_manager",
                "Here is a first version using the requests library.",
            ),
            to_group("g", "planner", "chat_manager", ask),
            to_group(
                "g",
                "critic",
                "chat_manager",
                "The first version does not handle network timeouts.",
            ),
            to_group("g", "planner", "chat_manager", ask),
            to_group(
                "g",
                "coder",
                "chat_manager",
                "Timeouts are handled now, with three retries.",
            ),
        ],
    )
    .await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");

    // The loop it must not hide: the same request re-sent with no member answering between.
    let vs = feed(
        &e,
        vec![
            to_group(
                "g2",
                "planner",
                "chat_manager",
                "Let us plan the data pipeline.",
            ),
            to_group(
                "g2",
                "coder",
                "chat_manager",
                "I can write the download step.",
            ),
            to_group("g2", "planner", "chat_manager", ask),
            to_group("g2", "planner", "chat_manager", ask),
        ],
    )
    .await;
    assert_eq!(
        first_rule(&vs),
        Some((3, "collaboration.same_request".to_string())),
        "{vs:#?}"
    );
}

#[tokio::test]
async fn a_group_is_also_recognised_from_who_writes_to_whom() {
    // No `to_group`: two agents write to one addressee that never writes itself.
    let e = engine(Config::default());
    let ask = "Please review the pull request for the login page.";
    let vs = feed(
        &e,
        vec![
            collab("g", "dev", "manager", ask),
            collab(
                "g",
                "qa",
                "manager",
                "Reviewed: two comments on input validation.",
            ),
            collab("g", "dev", "manager", ask),
        ],
    )
    .await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");
}

#[tokio::test]
async fn an_agents_response_and_tool_calls_answer_a_users_request() {
    let e = engine(Config::default());
    let ask = "Add a dark mode toggle to the settings page.";
    let vs = feed(
        &e,
        vec![
            collab("u", "user", "coder", ask),
            response(
                "u",
                "I'll add a toggle to settings.tsx that switches the theme class.",
            ),
            status("u", "Applied edit to settings.tsx", 4.2, 0.02),
            collab("u", "user", "coder", ask),
        ],
    )
    .await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");
}

// 2. Numbers that move on every call. -----------------------------------------------------

#[tokio::test]
async fn an_edit_that_fails_to_apply_again_and_again_is_a_loop_whatever_its_counters() {
    let e = engine(Config::default());
    let failed = "The LLM did not conform to the edit format.\nSearchReplaceNoExactMatch: This SEARCH block failed to exactly match lines in app.py";
    let mut events = vec![
        // The status line comes after every turn, whatever the turn did: a counter.
        status("c", "Applied edit to models.py", 2.1, 0.01),
        status(
            "c",
            "Applied edit to views.py\nCommit 1a2b3c4 add the list view",
            3.4,
            0.03,
        ),
        status("c", "Added tests/test_views.py to the chat", 3.9, 0.04),
    ];
    for (i, sent) in [4.2, 4.5, 4.8].into_iter().enumerate() {
        events.push(response(
            "c",
            "I'll fix the filter in app.py with a SEARCH/REPLACE block.",
        ));
        events.push(status("c", failed, sent, 0.05 + i as f32 * 0.01));
    }
    let vs = feed(&e, events).await;
    assert_eq!(
        first_rule(&vs),
        Some((8, "repeat.tool_call".to_string())),
        "{vs:#?}"
    );
}

#[tokio::test]
async fn a_poll_whose_own_numbers_move_is_not_a_loop() {
    // The numbers that move are the output's own (the job's progress), not a counter the
    // environment prints after every call.
    let e = engine(Config::default());
    let mut events = Vec::new();
    for pct in [20, 40, 60, 80] {
        events.push(bash(
            "kubectl get job migrate -o jsonpath='{.status}'",
            &format!(
                "job migrate: {pct}% complete, {} of 500 rows copied",
                pct * 5
            ),
            false,
        ));
    }
    let vs = feed(&e, events).await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");
}

// 3. Protocol turns from people. ----------------------------------------------------------

#[tokio::test]
async fn a_persons_answers_to_confirmation_prompts_are_not_requests() {
    let e = engine(Config::default());
    let mut events = Vec::new();
    for file in ["src/app.py", "src/models.py", "src/views.py", "src/urls.py"] {
        events.push(collab(
            "p",
            "user",
            "coder",
            "Add file to the chat? (Y)es/(N)o/(A)ll/(S)kip all/(D)on't ask again [Yes]: all",
        ));
        events.push(status("p", &format!("Added {file} to the chat"), 1.0, 0.0));
    }
    let vs = feed(&e, events).await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");
    // The answers match nothing: they are no request, repeated or not.
    assert!(vs.iter().step_by(2).all(|v| v.matched.is_none()), "{vs:#?}");
}

// 4. Conversational loops. ----------------------------------------------------------------

#[tokio::test]
async fn agents_trading_thanks_and_goodbyes_after_the_work_is_done_are_a_loop() {
    let e = engine(Config::default());
    let pm = "Product_Manager";
    let eng = "Engineer";
    let vs = feed(
        &e,
        vec![
            to_group(
                "c",
                eng,
                "chat_manager",
                "Here is the Spark training example with FLAML, tested on the sample data.",
            ),
            to_group(
                "c",
                pm,
                "chat_manager",
                "Great, let me know if you need any further assistance.",
            ),
            to_group(
                "c",
                eng,
                "chat_manager",
                "Sure, will do. Thank you for your help!",
            ),
            to_group(
                "c",
                pm,
                "chat_manager",
                "You're welcome! Have a great day ahead!",
            ),
            to_group("c", eng, "chat_manager", "You too, have a great day ahead!"),
        ],
    )
    .await;
    assert_eq!(
        first_rule(&vs),
        Some((3, "collaboration.courtesies".to_string())),
        "{vs:#?}"
    );
}

#[tokio::test]
async fn one_exchange_of_thanks_or_one_agents_farewells_are_not_a_loop() {
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            collab(
                "f",
                "assistant",
                "user",
                "The report is ready in report.pdf.",
            ),
            collab(
                "f",
                "user",
                "assistant",
                "Thanks a lot, that's exactly what I needed!",
            ),
            collab("f", "assistant", "user", "You're welcome! TERMINATE"),
            collab("f", "user", "assistant", "TERMINATE"),
        ],
    )
    .await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");
    // A support agent's farewells, one after another: one party, no conversation.
    let mut events = Vec::new();
    for farewell in [
        "You're welcome! If you have any other questions, feel free to reach out.",
        "Thank you for contacting us. Have a great day!",
        "Glad I could help with your booking. Safe travels!",
        "You're all set. Goodbye and have a nice trip!",
    ] {
        events.push(response("s", farewell));
    }
    let vs = feed(&e, events).await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");
}

// 5. Legitimate templated repetition. -----------------------------------------------------

/// An evaluation prompt: a long fixed template (the task and two graded examples), then the item.
fn grading_prompt(item: &str) -> String {
    let mut s = String::from(
        "Task: Math problem solving. Task description: given any question, the system needs to solve the problem as concisely and accurately as possible. ",
    );
    for n in 0..6 {
        s.push_str(&format!(
            "Example {n}: the problem, the reference solution, and the assistant's messages, graded for interpretation, methodology, calculation and clarity. "
        ));
    }
    s.push_str("Now grade this case. ");
    s.push_str(item);
    s
}

const GRADE: &str = "{\"Problem Interpretation\": \"completely accurate\", \"Calculation Correctness\": \"completely correct\", \"Explanation Clarity\": \"very clear\"}";

#[tokio::test]
async fn a_batch_of_items_through_one_long_template_is_not_a_loop() {
    let e = engine(Config::default());
    let items = [
        "Problem: what is the sum of the two-digit factors of 144? The assistant wrote a loop over 10..99 and printed the sum of the divisors, 226.",
        "Problem: how many positive integers n satisfy 4n + 3 < 25 and -7n + 5 < 24? The assistant solved both inequalities with sympy and intersected the ranges.",
        "Problem: a right triangle has legs 6 and 8; what is the altitude to the hypotenuse? The assistant computed the area twice and divided.",
        "Problem: convert 0.3 repeating divided by 0.03 repeating to a fraction. The assistant simplified 1/3 over 1/33 to 11.",
    ];
    let mut events = Vec::new();
    for item in items {
        events.push(collab("b", "grader_proxy", "grader", &grading_prompt(item)));
        events.push(collab("b", "grader", "grader_proxy", GRADE));
    }
    let vs = feed(&e, events).await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");

    // The loop it must not hide: the very same item sent back again and again, graded alike.
    let mut events = Vec::new();
    for _ in 0..3 {
        events.push(collab(
            "b2",
            "grader_proxy",
            "grader",
            &grading_prompt(items[0]),
        ));
        events.push(collab("b2", "grader", "grader_proxy", GRADE));
    }
    let vs = feed(&e, events).await;
    assert!(first_loop(&vs).is_some(), "{vs:#?}");
}

#[tokio::test]
async fn a_game_played_move_after_move_is_not_a_loop() {
    let e = engine(Config::default());
    let mut events = Vec::new();
    for (guess, answer) in [
        ("50", "Too low."),
        ("75", "Too high."),
        ("62", "Too high."),
        ("56", "Too high."),
        ("53", "Too low."),
        ("54", "Correct! You've guessed my number."),
    ] {
        events.push(collab("n", "guesser", "host", guess));
        events.push(collab("n", "host", "guesser", answer));
    }
    let vs = feed(&e, events).await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");
}

// 6. The user who asks again. -------------------------------------------------------------

#[tokio::test]
async fn a_user_asking_again_after_the_same_failure_each_time_is_a_loop() {
    let e = engine(Config::default());
    let ask = "The app still crashes on start, please fix it.";
    let crash = "Traceback (most recent call last):\n  File \"app.py\", line 3, in <module>\n    import flask\nModuleNotFoundError: No module named 'flask'";
    let mut events = Vec::new();
    for _ in 0..3 {
        events.push(collab("a", "user", "coder", ask));
        events.push(call_with(
            "a",
            "bash",
            json!({"command": "python app.py"}),
            crash,
            true,
        ));
    }
    let vs = feed(&e, events.clone()).await;
    // The second ask got the very answer of the first: the same wall.
    assert_eq!(
        first_rule(&vs),
        Some((3, "collaboration.same_answer".to_string())),
        "{vs:#?}"
    );
    // Without that rule, the third ask after answers that brought nothing new.
    let vs = feed(&engine(without("collaboration.same_answer")), events).await;
    assert_eq!(
        first_rule(&vs),
        Some((4, "collaboration.asked_again".to_string())),
        "{vs:#?}"
    );
}

/// The default configuration with one rule switched off.
fn without(rule: &str) -> Config {
    let mut cfg = Config::default();
    cfg.detect.rules_off.push(rule.to_string());
    cfg
}

#[tokio::test]
async fn a_user_re_running_a_command_that_shows_new_output_each_time_is_not_a_loop() {
    let e = engine(Config::default());
    let mut events = Vec::new();
    for (failing, passing) in [(5, 20), (3, 22), (1, 24), (0, 25)] {
        events.push(collab("r", "user", "coder", "/run pytest -q"));
        events.push(call_with(
            "r",
            "bash",
            json!({"command": "pytest -q"}),
            &format!("{failing} failed, {passing} passed in 2.1s"),
            failing > 0,
        ));
        events.push(response(
            "r",
            "Fixed the next failing assertion in the parser.",
        ));
    }
    let vs = feed(&e, events).await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");
}

/// A person pasting the same command again after each reply of the agent's.
async fn asked_again_after(task: &str, replies: [&str; 3]) -> Vec<Verdict> {
    asked_again_with(Config::default(), task, replies).await
}

async fn asked_again_with(cfg: Config, task: &str, replies: [&str; 3]) -> Vec<Verdict> {
    let e = engine(cfg);
    let mut events = Vec::new();
    for reply in replies {
        events.push(collab(task, "user", "coder", "python3 -m http.server 8000"));
        events.push(response(task, reply));
    }
    feed(&e, events).await
}

#[tokio::test]
async fn a_user_asking_again_after_the_same_reply_reworded_each_time_is_a_loop() {
    let replies = [
        "It looks like you're running a local HTTP server to preview the site. Is there anything you'd like me to change on the page?",
        "It looks like you're starting a local server to preview the site. Is there anything specific you'd like me to change or fix?",
        "Looks like you're previewing the site with a local server. Anything you'd like me to change or improve on the page?",
    ];
    // The second ask is answered as the first was: the reply reworded.
    let vs = asked_again_after("p", replies).await;
    assert_eq!(
        first_rule(&vs),
        Some((3, "collaboration.same_answer".to_string())),
        "{vs:#?}"
    );
    // And the third ask, after replies that brought nothing new, is a loop on its own.
    let vs = asked_again_with(without("collaboration.same_answer"), "p2", replies).await;
    assert_eq!(
        first_rule(&vs),
        Some((4, "collaboration.asked_again".to_string())),
        "{vs:#?}"
    );
}

#[tokio::test]
async fn a_user_asking_again_after_replies_that_say_new_things_is_not_a_loop() {
    let vs = asked_again_after(
        "n",
        [
            "The crash comes from the missing config file; I added a default config.yaml next to main.py.",
            "Now the port is taken by another process, so I made the server read PORT from the environment.",
            "The last error was a typo in the route decorator; fixed it in routes.py and added a test for /health.",
        ],
    )
    .await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");
}

/// A session's start: two requests answered with an edit and the agent's status line, whose
/// counters (tokens sent, cost) move from turn to turn.
fn session_start(task: &str) -> Vec<Envelope> {
    vec![
        collab(
            task,
            "user",
            "coder",
            "Build a dark landing page for the channel.",
        ),
        response(
            task,
            "Here is index.html with a hero section, a video grid and a footer.",
        ),
        status(task, "Applied edit to index.html", 0.8, 0.16),
        collab(task, "user", "coder", "Fix the lint errors."),
        response(
            task,
            "The errors are unescaped ampersands; they are now &amp; entities.",
        ),
        status(
            task,
            "Applied edit to index.html\nApplied edit to styles.css",
            23.0,
            0.39,
        ),
    ]
}

/// After [`session_start`], a person asks, the agent answers with a reply and its status line;
/// then `between` happens, and the person asks the same again and the agent answers `reply`.
fn ask_twice(
    task: &str,
    ask: &str,
    first: &str,
    between: Vec<Envelope>,
    reply: &str,
) -> Vec<Envelope> {
    let mut events = session_start(task);
    events.extend([
        collab(task, "user", "coder", ask),
        response(task, first),
        status(task, "", 34.0, 0.50),
    ]);
    events.extend(between);
    events.push(collab(task, "user", "coder", ask));
    events.push(response(task, reply));
    events.push(status(task, "", 34.4, 0.60));
    events
}

#[tokio::test]
async fn the_same_request_answered_the_same_way_again_is_a_loop() {
    let e = engine(Config::default());
    let ask = "cd ~/site\npython3 -m http.server 8000";
    let first = "It looks like you're starting a local server to preview the site at `http://localhost:8000`.\n\nIs there anything you'd like me to change or improve on the landing page? I'm ready to help!";
    let again = "It looks like you're running a local server to preview the site at `http://localhost:8000`.\n\nIs there anything specific you'd like me to change or improve on the landing page? I'm ready to help with any updates!";
    // The whole answer repeats, its counters aside: caught on its last event.
    let vs = feed(&e, ask_twice("s1", ask, first, vec![], again)).await;
    assert_eq!(
        first_rule(&vs),
        Some((11, "collaboration.same_answer".to_string())),
        "{vs:#?}"
    );

    // Not when the answer moved: a reply that says something new.
    let moved = "The server is up; I also noticed the hero image is missing its alt text, so I added one to index.html.";
    let vs = feed(&e, ask_twice("s2", ask, first, vec![], moved)).await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");

    // Nor when work happened between the answer and the request coming back: the person
    // re-runs the command to see the change, and a healthy page looks the same.
    let edit = vec![
        collab("s3", "user", "coder", "Make the header dark blue."),
        response(
            "s3",
            "I changed the header's background to dark blue in styles.css.",
        ),
        status("s3", "Applied edit to styles.css", 36.0, 0.55),
    ];
    let vs = feed(&e, ask_twice("s3", ask, first, edit, again)).await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");
}

#[tokio::test]
async fn a_request_that_hits_the_same_wall_again_after_a_change_is_a_loop() {
    let e = engine(Config::default());
    // The output of a turn that hit the model's limit, after whatever the session printed
    // first: the counters in it move on every hit.
    let limit_after = |task: &str, before: &str, input: &str, cost: &str| {
        call_with(
            task,
            "agent",
            json!({"after": "other"}),
            &format!("{before}Tokens: 497k sent, 0 received. Cost: $1.49 message, ${cost} session.\n\nModel claude has hit a token limit!\nToken counts below are approximate.\n\nInput tokens: ~{input} of 1,000,000\nOutput tokens: ~0 of 64,000"),
            false,
        )
    };
    let limit = |task: &str, input: &str, cost: &str| limit_after(task, "", input, cost);
    let ask = "Do you see any issues with the NLog.config file?";
    let events = |task: &str, last: Envelope| {
        vec![
            collab(
                task,
                "user",
                "coder",
                "Insert this NLog configuration and tell me what you changed.",
            ),
            limit_after(
                task,
                "Scraping http://www.nlog-project.org/schemas/NLog.xsd...\n",
                "499,113",
                "1.50",
            ),
            collab(task, "user", "coder", ask),
            limit(task, "496,589", "4.49"),
            collab(task, "user", "coder", "When was George Washington born?"),
            limit_after(
                task,
                "https://en.wikipedia.org\nAdd URL to the chat? (Y)es/(N)o [Yes]: n\n",
                "496,420",
                "5.98",
            ),
            // The person tries something: a smaller context.
            collab(task, "user", "coder", "/drop Models/Product.cs"),
            call_with(
                task,
                "agent",
                json!({"after": "other"}),
                "Removed Models/Product.cs from the chat",
                false,
            ),
            collab(task, "user", "coder", ask),
            last,
        ]
    };
    let vs = feed(&e, events("w", limit("w", "496,262", "7.47"))).await;
    assert_eq!(
        first_rule(&vs),
        Some((9, "collaboration.same_answer".to_string())),
        "{vs:#?}"
    );

    // Beside it: the change worked, and the request got an answer.
    let answer = response(
        "w2",
        "NLog.config looks fine, but the file target has no archive settings; I would add archiveAboveSize.",
    );
    let vs = feed(&e, events("w2", answer)).await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");
}

/// A person asking three different things of the agent, and the agent's `replies`.
async fn three_asks(task: &str, replies: [&str; 3]) -> Vec<Verdict> {
    let e = engine(Config::default());
    let asks = [
        "draw_text centres its text when its sixth argument is 1; give me the change as a SEARCH/REPLACE block so aider can apply it.",
        "Use this format: the file name on the first line, then <<<<<<< ORIGINAL, the old lines, =======, the new lines, >>>>>>> UPDATED.",
        "Wrap the code block in ```git and put the file name inside it.",
    ];
    let mut events = Vec::new();
    for (ask, reply) in asks.iter().zip(replies) {
        events.push(collab(task, "user", "coder", ask));
        events.push(response(task, reply));
    }
    feed(&e, events).await
}

#[tokio::test]
async fn whatever_it_is_asked_the_agent_re_sending_the_same_proposal_is_a_loop() {
    let vs = three_asks(
        "f",
        [
            "Here is the change in the git revision style, ready for aider:\n\nwindow_craftcommand.rb\n```ruby\n<<<<<<< HEAD\n    self.contents.draw_text(x, 0, 200, 32, @commands[index])\n=======\n    self.contents.draw_text(x, 0, 200, 32, @commands[index], 1)\n>>>>>>> REPLACE\n```",
            "Here is the change in the format you asked for:\n\nwindow_craftcommand.rb\n```ruby\n<<<<<<< ORIGINAL\n    self.contents.draw_text(x, 0, 200, 32, @commands[index])\n=======\n    self.contents.draw_text(x, 0, 200, 32, @commands[index], 1)\n>>>>>>> UPDATED\n```",
            "```git\nwindow_craftcommand.rb\n<<<<<<< ORIGINAL\n    self.contents.draw_text(x, 0, 200, 32, @commands[index])\n=======\n    self.contents.draw_text(x, 0, 200, 32, @commands[index], 1)\n>>>>>>> UPDATED\n```",
        ],
    )
    .await;
    assert_eq!(
        first_rule(&vs),
        Some((5, "collaboration.same_reply".to_string())),
        "{vs:#?}"
    );

    // Beside it: each request answered with what it asked for.
    let vs = three_asks(
        "f2",
        [
            "window_craftcommand.rb\n```ruby\n<<<<<<< SEARCH\n    self.contents.draw_text(x, 0, 200, 32, @commands[index])\n=======\n    self.contents.draw_text(x, 0, 200, 32, @commands[index], 1)\n>>>>>>> REPLACE\n```",
            "Applied: the three options are now centred. I also widened the window to 640 pixels so the labels fit.",
            "The commit is in: `Centre the craft command options`. Run the test scene to see the new layout.",
        ],
    )
    .await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");
}

/// An agent's own view of a session (no prompts): a tool prints the repository map and the agent
/// answers with `answer`; other work; then the same map and `again`.
async fn map_twice(task: &str, answer: &str, again: &str) -> Vec<Verdict> {
    let e = engine(Config::default());
    let map = || {
        call_with(
            task,
            "agent",
            json!({"after": "other"}),
            "Here are summaries of some files present in my git repository.",
            false,
        )
    };
    feed(
        &e,
        vec![
            map(),
            response(task, answer),
            response(task, "Since you're using Windows PowerShell, this lists every file: Get-ChildItem -Path src -Recurse -File"),
            call_with(task, "agent", json!({"after": "run"}), "Running Get-ChildItem -Path src -Recurse -File", false),
            map(),
            response(task, again),
        ],
    )
    .await
}

const READ_ONLY: &str = "Do not propose changes to these files, treat them as *read-only*.\nIf you need to edit any of these files, ask me to *add them to the chat* first.\n\n.gitignore\n\nREADME.md\n\npackage-lock.json\n\npackage.json\n\npublic/favicon.ico\n\npublic/index.html\n\npublic/manifest.json\n\nsrc/App.css";

#[tokio::test]
async fn an_exchange_replayed_word_for_word_later_on_is_a_loop() {
    let vs = map_twice("m", READ_ONLY, READ_ONLY).await;
    assert_eq!(
        first_rule(&vs),
        Some((5, "response.replayed".to_string())),
        "{vs:#?}"
    );
    // Beside it: a short acknowledgement said again is no replay, and a long answer that moved
    // (the map now lists the files the agent asked for) is none either.
    let vs = map_twice(
        "m2",
        "Understood, waiting for your instructions.",
        "Understood, waiting for your instructions.",
    )
    .await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");
    let moved = format!("{READ_ONLY}\n\nsrc/pages/HomePage.tsx\n\nsrc/services/api.ts");
    let vs = map_twice("m3", READ_ONLY, &moved).await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");
}
