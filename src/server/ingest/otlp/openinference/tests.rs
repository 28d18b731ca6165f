//! OpenInference spans: a trace exported by OpenInference's instrumentation of the OpenAI Agents
//! SDK (captured, `tests/fixtures/openinference/capture.py`), read span by span and through the
//! router on the real model; the mapping of each kind on its own; GenAI and OpenInference spans
//! in one request; malformed attributes refused with their path.

use super::super::{envelopes, proto, SpanEvent};
use super::*;
use crate::server::router;
use crate::server::tests::{answer, model, send, state_with};
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use loopguard::Config;
use serde_json::json;

/// One run of examples/openai_agents' stuck agent, as the OTLP/HTTP exporter posted it: the
/// scripted model re-runs the failing test in four wordings (each `bash` call fails), in the
/// OpenInference session `wordcount-session-1`, until the SDK stops it at `max_turns = 4`.
const FIXTURE: &[u8] =
    include_bytes!("../../../../../tests/fixtures/openinference/openai_agents.pb");
const SESSION: &str = "wordcount-session-1";
const COMMANDS: [&str; 4] = [
    "python3 test_textstats.py",
    "rm -rf __pycache__ && python3 test_textstats.py",
    "find . -name '*.pyc' -delete && python3 test_textstats.py",
    "python3 -B test_textstats.py",
];
const THOUGHTS: [&str; 4] = [
    "Let me run the test to see how it fails.",
    "The assertion still fails although the code looks right",
    "Still failing. There may be stale .pyc files elsewhere",
    "To rule out bytecode caching completely",
];

#[test]
fn the_captured_agents_sdk_trace_becomes_its_tool_calls_responses_and_the_agents_failure() {
    let batch = proto::decode(FIXTURE).unwrap();
    assert_eq!(batch.spans.len(), 15);
    let (tasks, ignored) = envelopes(&batch, "", usize::MAX);
    // The run's spans are all in its session; the four turns, the workflow and the trace's own
    // spans (CHAIN and AGENT spans that ended well) are no events.
    assert_eq!(tasks.keys().collect::<Vec<_>>(), [SESSION]);
    assert_eq!(ignored, 6);
    let events = &tasks[SESSION];
    let labels: Vec<&str> = events.iter().map(|(_, l)| *l).collect();
    // In the order the spans started: the agent's span first (it failed when the SDK stopped
    // it), then each turn's model call and tool call.
    assert_eq!(
        labels,
        [
            "failure",
            "response",
            "tool_call",
            "response",
            "tool_call",
            "response",
            "tool_call",
            "response",
            "tool_call"
        ]
    );
    let Event::Failure(f) = &events[0].0.event else {
        panic!()
    };
    assert!(f.message.starts_with("Max turns exceeded"), "{f:?}");
    assert_eq!(events[0].0.agent_id.as_deref(), Some("wordcount-fixer"));
    for (i, turn) in events[1..].chunks(2).enumerate() {
        let Event::Response(r) = &turn[0].0.event else {
            panic!("{:?}", turn[0])
        };
        assert!(r.text.starts_with(THOUGHTS[i]), "{}", r.text);
        let Event::ToolCall(c) = &turn[1].0.event else {
            panic!("{:?}", turn[1])
        };
        assert_eq!(c.tool, "bash");
        assert_eq!(c.args, json!({"command": COMMANDS[i]}));
        let result = c.result.as_ref().unwrap();
        assert_eq!(result.is_error, Some(true));
        let output = result.output.as_str().unwrap();
        assert!(
            output.starts_with("exit code 1\nTraceback") && output.ends_with("AssertionError: 3\n"),
            "{output}"
        );
        // Spans without an agent name are the service's.
        for (env, _) in turn {
            assert_eq!(env.agent_id.as_deref(), Some("wordcount-agent"));
            assert_eq!(env.task_id, SESSION);
            assert!(env.ts.is_some());
        }
    }
    // A configured attribute the spans lack leaves the session the task.
    let (tasks, _) = envelopes(&batch, "gen_ai.conversation.id", usize::MAX);
    assert_eq!(tasks.keys().collect::<Vec<_>>(), [SESSION]);
}

async fn post(app: &axum::Router, content_type: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
    let req = Request::builder()
        .method("POST")
        .uri("/v1/traces")
        .header("content-type", content_type)
        .body(Body::from(body))
        .unwrap();
    let (status, body, _): (StatusCode, Vec<u8>, HeaderMap) = answer(app, req).await;
    (status, body)
}

#[tokio::test]
async fn the_captured_trace_posted_to_v1_traces_is_evaluated_in_its_session() {
    let app = router(state_with(Config::default(), model()));
    let (status, body) = post(&app, "application/x-protobuf", FIXTURE.to_vec()).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert!(body.is_empty(), "every event was evaluated");
    let (s, t, _) = send(&app, "GET", &format!("/v1/tasks/{SESSION}"), "").await;
    assert_eq!(s, StatusCode::OK, "{t}");
    assert_eq!(t["events_total"], 9, "{t:#}");
    let verdicts = t["last_verdicts"].as_array().unwrap();
    let seen: Vec<(&str, &str)> = verdicts
        .iter()
        .map(|v| {
            (
                v["event_type"].as_str().unwrap(),
                v["agent_id"].as_str().unwrap(),
            )
        })
        .collect();
    let turn = [
        ("response", "wordcount-agent"),
        ("tool_call", "wordcount-agent"),
    ];
    let mut expected = vec![("failure", "wordcount-fixer")];
    for _ in 0..4 {
        expected.extend(turn);
    }
    assert_eq!(seen, expected);
    assert!(
        verdicts[2]["text"].as_str().unwrap().contains(COMMANDS[0]),
        "{t:#}"
    );
    let (_, metrics, _) = send(&app, "GET", "/metrics", "").await;
    let metrics = metrics.as_str().unwrap();
    for line in [
        "loopguard_otlp_spans_total{outcome=\"ignored\"} 6",
        "loopguard_otlp_spans_total{outcome=\"tool_call\"} 4",
        "loopguard_otlp_spans_total{outcome=\"response\"} 4",
        "loopguard_otlp_spans_total{outcome=\"failure\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}

fn kv(key: &str, value: &str) -> Value {
    json!({"key": key, "value": {"stringValue": value}})
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn json_span(i: u64, name: &str, attributes: Vec<Value>) -> Value {
    json!({
        "traceId": TRACE,
        "spanId": format!("{:016x}", i + 1),
        "name": name,
        "startTimeUnixNano": (1_790_000_000_000_000_000u64 + i * 1_000_000_000).to_string(),
        "endTimeUnixNano": (1_790_000_000_500_000_000u64 + i * 1_000_000_000).to_string(),
        "attributes": attributes,
    })
}

fn request(spans: Vec<Value>) -> Vec<u8> {
    json!({"resourceSpans": [{
        "resource": {"attributes": [kv("service.name", "mixed-agent")]},
        "scopeSpans": [{"spans": spans}]
    }]})
    .to_string()
    .into_bytes()
}

#[tokio::test]
async fn genai_and_openinference_spans_in_one_request_are_both_evaluated() {
    let app = router(state_with(Config::default(), model()));
    let genai = json_span(
        0,
        "execute_tool grep",
        vec![
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", "grep"),
            kv("gen_ai.tool.call.arguments", r#"{"pattern": "TODO"}"#),
            kv("gen_ai.tool.call.result", "src/a.rs:3: TODO"),
        ],
    );
    let tool = json_span(
        1,
        "search",
        vec![
            kv(SPAN_KIND, "TOOL"),
            kv("tool.name", "search"),
            kv("input.value", r#"{"query": "loop detection"}"#),
            kv("output.value", "3 results"),
            kv(SESSION_ID, "chat-9"),
        ],
    );
    let llm = json_span(
        2,
        "ChatCompletion",
        vec![
            kv(SPAN_KIND, "LLM"),
            kv("llm.output_messages.0.message.role", "assistant"),
            kv(
                "llm.output_messages.0.message.content",
                "Three papers match.",
            ),
        ],
    );
    let (status, body) = post(&app, "application/json", request(vec![genai, tool, llm])).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(body, b"{}");
    // The GenAI span and the LLM span without a session are the trace's; the tool span is its
    // session's.
    let (_, t, _) = send(&app, "GET", &format!("/v1/tasks/{TRACE}"), "").await;
    let types: Vec<&str> = t["last_verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["tool_call", "response"], "{t:#}");
    let (_, c, _) = send(&app, "GET", "/v1/tasks/chat-9", "").await;
    assert_eq!(c["events_total"], 1, "{c:#}");
    assert_eq!(c["last_verdicts"][0]["event_type"], "tool_call");
}

#[tokio::test]
async fn a_malformed_openinference_attribute_is_a_400_naming_it_and_changes_nothing() {
    let app = router(state_with(Config::default(), model()));
    let good = json_span(
        0,
        "bash",
        vec![
            kv(SPAN_KIND, "TOOL"),
            kv("input.value", r#"{"command": "ls"}"#),
        ],
    );
    let mut bad = json_span(1, "bash", vec![kv(SPAN_KIND, "TOOL")]);
    bad["attributes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"key": "output.value", "value": {"intValue": "twelve"}}));
    let (status, body) = post(&app, "application/json", request(vec![good.clone(), bad])).await;
    let err: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert_eq!(err["code"], "invalid_otlp");
    assert_eq!(
        err["path"],
        "resourceSpans[0].scopeSpans[0].spans[1].attributes[1].value.intValue"
    );
    let mut nested = json_span(1, "generation", vec![kv(SPAN_KIND, "LLM")]);
    nested["attributes"].as_array_mut().unwrap().push(json!({
        "key": "llm.output_messages",
        "value": {"arrayValue": {"values": [{"kvlistValue": {"values": [{"key": "content", "value": {"boolValue": "yes"}}]}}]}}
    }));
    let (status, body) = post(&app, "application/json", request(vec![good, nested])).await;
    let err: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert_eq!(
        err["path"],
        "resourceSpans[0].scopeSpans[0].spans[1].attributes[1].value.arrayValue.values[0].kvlistValue.values[0].value.boolValue"
    );
    // The captured request cut short is no protobuf request either.
    let (status, body) = post(
        &app,
        "application/x-protobuf",
        FIXTURE[..FIXTURE.len() / 2].to_vec(),
    )
    .await;
    let err: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (status, err["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_otlp")),
        "{err}"
    );
    let (_, list, _) = send(&app, "GET", "/v1/tasks", "").await;
    assert_eq!(list["total"], 0, "nothing was applied: {list}");
}

fn span(kind: &str, attrs: Vec<(&str, &str)>) -> Span {
    let mut all = vec![(SPAN_KIND.to_string(), Attr::Str(kind.into()))];
    all.extend(
        attrs
            .into_iter()
            .map(|(k, v)| (k.to_string(), Attr::Str(v.into()))),
    );
    Span {
        trace_id: TRACE.into(),
        name: "span".into(),
        start_ns: 1,
        end_ns: 2,
        attrs: all,
        events: Vec::new(),
        error: false,
        status_message: String::new(),
        resource: 0,
    }
}

fn event(s: &Span) -> Option<(Event, &'static str)> {
    let mut budget = usize::MAX;
    event_of(s, &mut |a: &Attr| a.to_json(&mut budget))
}

fn exception(kind: &str, message: &str) -> SpanEvent {
    SpanEvent {
        name: "exception".into(),
        attrs: vec![
            ("exception.type".into(), Attr::Str(kind.into())),
            ("exception.message".into(), Attr::Str(message.into())),
        ],
    }
}

#[test]
fn each_kind_of_span_becomes_its_event() {
    // A tool that failed by its exception event alone (status unset), with no output: the
    // exception is the output.
    let mut tool = span(
        "TOOL",
        vec![("tool.name", "read_file"), ("input.value", "notes.md")],
    );
    tool.events.push(exception("FileNotFoundError", "notes.md"));
    let Some((Event::ToolCall(c), "tool_call")) = event(&tool) else {
        panic!()
    };
    assert_eq!(
        (c.tool.as_str(), &c.args),
        ("read_file", &json!("notes.md"))
    );
    let r = c.result.unwrap();
    assert_eq!(
        (r.output, r.is_error),
        (json!("FileNotFoundError: notes.md"), Some(true))
    );
    // Without input.value the arguments are tool.parameters; without a name, the span's; a
    // tool that succeeded without an output has no result.
    let tool = span("TOOL", vec![("tool.parameters", r#"{"city": "Paris"}"#)]);
    let Some((Event::ToolCall(c), _)) = event(&tool) else {
        panic!()
    };
    assert_eq!(
        (c.tool.as_str(), c.args, c.result),
        ("span", json!({"city": "Paris"}), None)
    );
    // The Responses API's text parts, in order; an image part and the message's role are no
    // text.
    let llm = span(
        "LLM",
        vec![
            (
                "llm.output_messages.1.message.contents.0.message_content.text",
                "Second.",
            ),
            ("llm.output_messages.0.message.role", "assistant"),
            (
                "llm.output_messages.0.message.contents.1.message_content.type",
                "text",
            ),
            (
                "llm.output_messages.0.message.contents.1.message_content.text",
                "and then",
            ),
            (
                "llm.output_messages.0.message.contents.0.message_content.text",
                "First,",
            ),
            (
                "llm.output_messages.0.message.contents.2.message_content.type",
                "image",
            ),
            (
                "llm.output_messages.0.message.contents.2.message_content.text",
                "(a chart)",
            ),
        ],
    );
    let Some((Event::Response(r), "response")) = event(&llm) else {
        panic!()
    };
    assert_eq!(r.text, "First,\nand then\nSecond.");
    // A turn that only called tools has no text: nothing.
    let only_tools = span(
        "LLM",
        vec![(
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
            "bash",
        )],
    );
    assert!(event(&only_tools).is_none());
    // A failed agent, chain or model call is a failure with the exception's type.
    for kind in ["AGENT", "CHAIN", "LLM"] {
        let mut failed = span(kind, vec![]);
        failed.error = true;
        failed
            .events
            .push(exception("MaxTurnsExceeded", "Max turns (4) exceeded"));
        let Some((Event::Failure(f), "failure")) = event(&failed) else {
            panic!("{kind}")
        };
        assert_eq!(f.message, "MaxTurnsExceeded: Max turns (4) exceeded");
        assert_eq!(f.error_type.as_deref(), Some("MaxTurnsExceeded"));
    }
    // Agents and chains that ended well, and other kinds, are no events.
    for kind in ["AGENT", "CHAIN", "RETRIEVER", "EMBEDDING"] {
        assert!(event(&span(kind, vec![])).is_none(), "{kind}");
    }
    assert!(event(&span("TOOL", vec![])).is_some());
}

#[test]
fn the_task_and_the_agent() {
    let resource = vec![("service.name".to_string(), Attr::Str("svc".into()))];
    let mut s = span("LLM", vec![("llm.output_messages.0.message.content", "hi")]);
    let task = |s: &Span, key: &str| envelope(s, &resource, key, &mut unbounded).unwrap().0;
    // The trace, the service.
    let env = task(&s, "");
    assert_eq!(
        (env.task_id.as_str(), env.agent_id.as_deref()),
        (TRACE, Some("svc"))
    );
    // The session; the agent's name.
    s.attrs
        .push(("session.id".into(), Attr::Str("conv-1".into())));
    s.attrs
        .push(("agent.name".into(), Attr::Str("planner".into())));
    let env = task(&s, "");
    assert_eq!(
        (env.task_id.as_str(), env.agent_id.as_deref()),
        ("conv-1", Some("planner"))
    );
    // The configured attribute first, when the span has it; else the session.
    assert_eq!(task(&s, "user.id").task_id, "conv-1");
    s.attrs.push(("user.id".into(), Attr::Str("u-7".into())));
    assert_eq!(task(&s, "user.id").task_id, "u-7");
    // A session that is no valid task id (whitespace alone) is not the task.
    let mut blank = span("LLM", vec![("llm.output_messages.0.message.content", "hi")]);
    blank
        .attrs
        .push(("session.id".into(), Attr::Str("   ".into())));
    assert_eq!(task(&blank, "").task_id, TRACE);
    // A span that is also a GenAI span is GenAI's alone.
    let mut both = span("TOOL", vec![("tool.name", "grep")]);
    both.attrs.push((
        "gen_ai.operation.name".into(),
        Attr::Str("execute_tool".into()),
    ));
    assert!(envelope(&both, &resource, "", &mut unbounded).is_none());
}

/// An attribute as JSON, with no budget to spend.
fn unbounded(a: &Attr) -> serde_json::Value {
    a.to_json(&mut usize::MAX.clone())
}
