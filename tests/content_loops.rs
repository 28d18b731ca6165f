//! Content loops — an LLM repeating itself inside one response or one stream — through the real
//! engine (real model, default configuration) and through the service, and the repetition inside
//! a response that is legitimate: code, tables, dividers, a line repeated once per listed item.

mod common;

use common::*;
use loopguard::verdict::{ActionType, LoopKind};
use loopguard::Config;
use serde_json::json;

fn chunk(task: &str, text: &str) -> loopguard::Envelope {
    ev(
        task,
        json!({"type": "response", "text": text, "chunk": true}),
    )
}

const CHANT: &str = "I need to check the configuration file before I change anything. ";

#[tokio::test]
async fn a_response_that_chants_is_a_content_loop_with_a_hint_to_stop() {
    let e = engine(Config::default());
    let text = format!("Let me look at the failing test. {}", CHANT.repeat(4));
    let vs = feed(&e, vec![response("t", &text)]).await;
    assert_eq!(vs[0].kind, LoopKind::ContentLoop, "{vs:#?}");
    assert!(vs[0].counted);
    assert_eq!(vs[0].action.kind, ActionType::RetryWithHint, "{vs:#?}");
    assert!(vs[0].reason.contains("4 times"), "{}", vs[0].reason);
}

#[tokio::test]
async fn repetition_that_is_structure_is_not_a_content_loop() {
    let e = engine(Config::default());
    let code = format!(
        "Here is the fix and its test:\n```python\n{}```\n{}\n{}\n{}\nThe tests pass now.",
        "assert parse(row) == expected_row_for_the_same_input\n".repeat(6),
        "| check | the same cell value | the same cell value |\n".repeat(4),
        "-----\n".repeat(4),
        "    return self.left + self.right  # indented code\n".repeat(4),
    );
    let summary = "Here are your bookings:\n\
        - **Reservation:** ABC123\n- **Trip Type:** One Way\n- **Cabin:** Basic Economy\n\
        - **Reservation:** XYZ789\n- **Trip Type:** One Way\n- **Cabin:** Basic Economy\n\
        - **Reservation:** QRS456\n- **Trip Type:** One Way\n- **Cabin:** Basic Economy\n\
        Which one should I change?";
    let vs = feed(&e, vec![response("t", &code), response("u", summary)]).await;
    assert_eq!(loops(&vs), vec![false, false], "{vs:#?}");
}

#[tokio::test]
async fn a_stream_is_flagged_at_the_chunk_that_completes_the_chant_and_only_once() {
    let e = engine(Config::default());
    let mut events = vec![
        chunk("t", "The failing test expects a comma-separated list. "),
        chunk("t", CHANT),
        chunk("t", "I need to check the configuration "),
        chunk("t", "file before I change anything. I need to check"),
        chunk("t", " the configuration file before I change anything. "),
    ];
    events.push(chunk("t", CHANT));
    // The whole response at the end closes the stream; it is not reported a second time.
    events.push(response(
        "t",
        &format!(
            "The failing test expects a comma-separated list. {}",
            CHANT.repeat(4)
        ),
    ));
    let vs = feed(&e, events).await;
    assert_eq!(
        loops(&vs),
        vec![false, false, false, false, true, false, false],
        "{vs:#?}"
    );
    assert_eq!(vs[4].kind, LoopKind::ContentLoop);
    // A new stream after the end of the last one starts clean.
    let vs = feed(&e, vec![chunk("t", "Now I will edit the parser.")]).await;
    assert!(!vs[0].is_loop, "{vs:#?}");
}

#[tokio::test]
async fn a_code_block_streamed_in_chunks_is_not_prose_even_when_the_fence_is_cut_off() {
    let e = engine(Config::default());
    let mut events = vec![chunk("t", "Here is the new test file:\n```python\n")];
    // Far more than the tail the stream keeps: the fence's opening line is cut off.
    for _ in 0..150 {
        events.push(chunk(
            "t",
            "assert parse(row) == expected_row_for_the_same_input\n",
        ));
    }
    events.push(chunk("t", "```\nThat covers every case."));
    let vs = feed(&e, events).await;
    assert!(vs.iter().all(|v| !v.is_loop), "{:#?}", vs.last());
}

#[tokio::test]
async fn chunks_do_not_push_the_tasks_work_out_of_the_window() {
    // A long stream between two repeats of a failing call: the repeat is still seen.
    let e = engine(Config::default());
    let failing = || {
        call_with(
            "t",
            "bash",
            json!({"command": "pytest tests/test_parser.py"}),
            "FAILED tests/test_parser.py::test_commas - AssertionError",
            true,
        )
    };
    let mut events = vec![failing(), failing()];
    for i in 0..60 {
        events.push(chunk(
            "t",
            &format!("Thinking about step {i} of the plan. "),
        ));
    }
    events.push(failing());
    let vs = feed(&e, events).await;
    let last = vs.last().unwrap();
    assert_eq!(last.kind, LoopKind::ExactRepeat, "{last:#?}");
    assert!(last.reason.contains("the 3rd time"), "{}", last.reason);
}

#[tokio::test]
async fn a_stream_survives_a_crash_of_the_service() {
    // The stream's tail is task state: acknowledged chunks are on disk, so the chunk that
    // completes the chant after a SIGKILL and a restart is still caught.
    for backend in [Some(Backend::embedded()), Backend::postgres()]
        .into_iter()
        .flatten()
    {
        let client = http_client();
        let post = |s: &Server, text: &str| {
            let req = client
                .post(s.url("/v1/evaluate"))
                .json(&json!({"task_id": "s", "event": {"type": "response", "text": text, "chunk": true}}));
            async move {
                let r = req.send().await.unwrap();
                assert!(r.status().is_success(), "{}", r.status());
                r.json::<serde_json::Value>().await.unwrap()
            }
        };
        let mut s = backend.start(&[]);
        s.ready(&client).await;
        assert_eq!(post(&s, CHANT).await["loop"], false);
        assert_eq!(post(&s, CHANT).await["loop"], false);
        s.kill9();
        let s = backend.start(&[]);
        s.ready(&client).await;
        let v = post(&s, CHANT).await;
        assert_eq!(v["loop"], true, "{} store: {v}", backend.name());
        assert_eq!(v["kind"], "content_loop", "{v}");
    }
}
