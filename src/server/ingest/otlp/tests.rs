//! `/v1/traces` through the router, on the real model with in-memory state; the mapping of
//! spans to events on its own. The OpenTelemetry Python SDK exporting to a real server is
//! tests/otel/ (run by .ci/integrations.sh).

use super::*;
use crate::server::router;
use crate::server::tests::{answer, model, send, state_with};
use axum::http::Request;
use loopguard::Config;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1 as pb;

/// A test agent stuck re-running a failing test in new wordings (examples/wordcount_task.py).
const STUCK: [&str; 4] = [
    "python3 test_textstats.py",
    "rm -rf __pycache__ && python3 test_textstats.py",
    "find . -name '*.pyc' -delete && python3 test_textstats.py",
    "python3 -B test_textstats.py",
];
const FAILED: &str = "Traceback (most recent call last):\n  File \"/work/test_textstats.py\", line 4, in <module>\n    assert word_count(\"one  two\") == 2, word_count(\"one  two\")\nAssertionError: 3";
const T0: u64 = 1_790_000_000_000_000_000;

fn kv(key: &str, value: &str) -> Value {
    json!({"key": key, "value": {"stringValue": value}})
}

fn json_tool_span(trace: &str, i: usize, command: &str) -> Value {
    json!({
        "traceId": trace,
        "spanId": format!("{:016x}", i + 1),
        "name": "execute_tool bash",
        "kind": 1,
        "startTimeUnixNano": (T0 + i as u64 * 1_000_000_000).to_string(),
        "endTimeUnixNano": T0 + i as u64 * 1_000_000_000 + 500_000_000,
        "attributes": [
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", "bash"),
            kv("gen_ai.tool.call.arguments", &json!({"command": command}).to_string()),
            kv("gen_ai.tool.call.result", FAILED),
        ],
        "status": {"code": "STATUS_CODE_ERROR", "message": "exit status 1"}
    })
}

/// A request with `spans`, in JSON.
fn json_request(spans: Vec<Value>) -> Vec<u8> {
    json!({"resourceSpans": [{
        "resource": {"attributes": [kv("service.name", "wordcount-agent")]},
        "scopeSpans": [{"scope": {"name": "agent"}, "spans": spans}]
    }]})
    .to_string()
    .into_bytes()
}

fn pb_kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

fn pb_request(trace: &str) -> ExportTraceServiceRequest {
    let spans = STUCK
        .iter()
        .enumerate()
        .map(|(i, command)| pb::Span {
            trace_id: hex::decode(trace).unwrap(),
            span_id: (i as u64 + 1).to_be_bytes().to_vec(),
            name: "execute_tool bash".into(),
            kind: 1,
            start_time_unix_nano: T0 + i as u64 * 1_000_000_000,
            end_time_unix_nano: T0 + i as u64 * 1_000_000_000 + 500_000_000,
            attributes: vec![
                pb_kv("gen_ai.operation.name", "execute_tool"),
                pb_kv("gen_ai.tool.name", "bash"),
                pb_kv(
                    "gen_ai.tool.call.arguments",
                    &json!({"command": command}).to_string(),
                ),
                pb_kv("gen_ai.tool.call.result", FAILED),
            ],
            status: Some(pb::Status {
                code: 2,
                message: "exit status 1".into(),
            }),
            ..Default::default()
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![pb::ResourceSpans {
            resource: Some(Resource {
                attributes: vec![pb_kv("service.name", "wordcount-agent")],
                ..Default::default()
            }),
            scope_spans: vec![pb::ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

async fn post_traces(
    app: &axum::Router,
    content_type: &str,
    encoding: Option<&str>,
    body: Vec<u8>,
) -> (StatusCode, Vec<u8>, HeaderMap) {
    let mut req = Request::builder()
        .method("POST")
        .uri("/v1/traces")
        .header("content-type", content_type);
    if let Some(e) = encoding {
        req = req.header("content-encoding", e);
    }
    answer(app, req.body(Body::from(body)).unwrap()).await
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

async fn task(app: &axum::Router, id: &str) -> (StatusCode, Value) {
    let (s, v, _) = send(app, "GET", &format!("/v1/tasks/{id}"), "").await;
    (s, v)
}

const TRACE_A: &str = "5b8efff798038103d269b633813fc60c";
const TRACE_B: &str = "0af7651916cd43dd8448eb211c80319c";

#[tokio::test]
async fn a_stuck_agents_tool_spans_in_json_protobuf_and_gzip_show_the_loop_in_its_task() {
    let app = router(state_with(Config::default(), model()));
    let spans = STUCK
        .iter()
        .enumerate()
        .map(|(i, c)| json_tool_span(TRACE_A, i, c))
        .collect();
    let (status, body, headers) =
        post_traces(&app, "application/json", None, json_request(spans)).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(body, b"{}");
    let (s, a) = task(&app, TRACE_A).await;
    assert_eq!(s, StatusCode::OK);
    assert!(a["loop_count"].as_u64().unwrap() >= 1, "{a:#}");
    let kinds: Vec<&str> = a["last_verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["tool_call"; 4]);
    assert_eq!(a["last_verdicts"][0]["agent_id"], "wordcount-agent");

    // The same agent in protobuf, gzipped, on another trace: the same verdicts.
    let bytes = gzip(&proto::encode(&pb_request(TRACE_B)));
    let (status, body, headers) =
        post_traces(&app, "application/x-protobuf", Some("gzip"), bytes).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(headers["content-type"], "application/x-protobuf");
    assert!(
        body.is_empty(),
        "a full success is an empty ExportTraceServiceResponse"
    );
    let (_, b) = task(&app, TRACE_B).await;
    let loops = |t: &Value| -> Vec<(bool, String)> {
        t["last_verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["loop"].as_bool().unwrap(),
                    v["kind"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    assert_eq!(loops(&a), loops(&b));
}

#[tokio::test]
async fn a_malformed_request_is_a_400_naming_the_field_and_changes_nothing() {
    let mut cfg = Config::default();
    cfg.otlp.max_body_bytes = 4096;
    let app = router(state_with(cfg, model()));
    let mut spans: Vec<Value> = vec![json_tool_span(TRACE_A, 0, STUCK[0])];
    let mut bad = json_tool_span(TRACE_A, 1, STUCK[1]);
    bad["traceId"] = json!("not-a-trace-id");
    spans.push(bad);
    let (status, body, _) = post_traces(&app, "application/json", None, json_request(spans)).await;
    let err: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert_eq!(err["code"], "invalid_otlp");
    assert_eq!(
        err["path"],
        "resourceSpans[0].scopeSpans[0].spans[1].traceId"
    );
    assert_eq!(
        task(&app, TRACE_A).await.0,
        StatusCode::NOT_FOUND,
        "the valid span before it was not applied"
    );

    let (status, body, _) = post_traces(
        &app,
        "application/x-protobuf",
        None,
        b"\xff\xff\xff not protobuf".to_vec(),
    )
    .await;
    let err: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (status, err["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_otlp")),
        "{err}"
    );

    let (status, body, _) = post_traces(
        &app,
        "application/json",
        None,
        b"{\"resourceSpans\": [".to_vec(),
    )
    .await;
    let err: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (status, err["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_json")),
        "{err}"
    );

    let (status, _, _) = post_traces(&app, "text/plain", None, b"{}".to_vec()).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let (status, _, _) = post_traces(&app, "application/json", Some("br"), b"{}".to_vec()).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let (status, _, _) =
        post_traces(&app, "application/json", Some("gzip"), b"not gzip".to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Small on the wire, past the limit once inflated.
    let bomb = gzip(&vec![b' '; 100_000]);
    let (status, body, _) = post_traces(&app, "application/json", Some("gzip"), bomb).await;
    assert_eq!(
        status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let (_, list, _) = send(&app, "GET", "/v1/tasks", "").await;
    assert_eq!(list["total"], 0, "nothing was applied: {list}");
}

#[tokio::test]
async fn the_task_attribute_names_the_task_and_other_spans_are_ignored_and_counted() {
    let mut cfg = Config::default();
    cfg.otlp.task_attribute = "gen_ai.conversation.id".into();
    let app = router(state_with(cfg, model()));
    let mut spans = Vec::new();
    for (i, c) in STUCK.iter().take(2).enumerate() {
        let mut s = json_tool_span(TRACE_A, i, c);
        s["attributes"]
            .as_array_mut()
            .unwrap()
            .push(kv("gen_ai.conversation.id", "conv-7"));
        spans.push(s);
    }
    spans.push(json!({"traceId": TRACE_A, "name": "GET /health", "attributes": [kv("http.request.method", "GET")]}));
    let (status, _, _) = post_traces(&app, "application/json", None, json_request(spans)).await;
    assert_eq!(status, StatusCode::OK);
    let (s, t) = task(&app, "conv-7").await;
    assert_eq!(
        (s, t["events_total"].as_u64()),
        (StatusCode::OK, Some(2)),
        "{t}"
    );
    assert_eq!(task(&app, TRACE_A).await.0, StatusCode::NOT_FOUND);
    let (_, metrics, _) = send(&app, "GET", "/metrics", "").await;
    let metrics = metrics.as_str().unwrap().to_string();
    assert!(
        metrics.contains("loopguard_otlp_spans_total{outcome=\"ignored\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("loopguard_otlp_spans_total{outcome=\"tool_call\"} 2"),
        "{metrics}"
    );
}

/// The error body of an answer.
fn error_of(status: StatusCode, body: &[u8]) -> (StatusCode, Value) {
    (status, serde_json::from_slice(body).unwrap_or(Value::Null))
}

/// Issue 43: what a request may hold is bounded while it is decoded, in both encodings:
/// spans, attributes (nested values included), span events (and links), resource and scope
/// blocks. Past a limit is `413 too_many_items` naming the setting and where it was passed;
/// nothing is applied. Keys the reader does not know are skipped unread, whatever they hold.
#[tokio::test]
async fn what_a_request_holds_is_bounded_while_it_is_decoded() {
    let mut cfg = Config::default();
    cfg.otlp.max_spans = 3;
    cfg.otlp.max_attributes = 6;
    cfg.otlp.max_events = 2;
    cfg.otlp.max_blocks = 4;
    let app = router(state_with(cfg, model()));
    let tool = |i: usize| json_tool_span(TRACE_A, i, STUCK[i % 4]);
    let request =
        |resources: Vec<Value>| json!({"resourceSpans": resources}).to_string().into_bytes();
    let resource = |spans: Vec<Value>| json!({"scopeSpans": [{"spans": spans}]});
    let over = |body: Vec<u8>, setting: &str, path: &str| {
        let app = app.clone();
        let (setting, path) = (setting.to_string(), path.to_string());
        async move {
            let (status, body, _) = post_traces(&app, "application/json", None, body).await;
            let (status, err) = error_of(status, &body);
            assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{setting}: {err}");
            assert_eq!(err["code"], "too_many_items", "{err}");
            assert!(err["message"].as_str().unwrap().contains(&setting), "{err}");
            assert_eq!(err["path"], path, "{err}");
        }
    };
    // Spans: four where three are allowed (one attribute each keeps attributes under theirs).
    let small = |i: usize| json!({"traceId": TRACE_A, "name": format!("s{i}"), "attributes": [kv("k", "v")]});
    over(
        request(vec![resource((0..4).map(small).collect())]),
        "otlp.max_spans",
        "resourceSpans[0].scopeSpans[0].spans[3]",
    )
    .await;
    // Across resources too.
    over(
        request(vec![
            resource(vec![small(0), small(1)]),
            resource(vec![small(2), small(3)]),
        ]),
        "otlp.max_spans",
        "resourceSpans[1].scopeSpans[0].spans[1]",
    )
    .await;
    // Attributes, the values inside an array attribute included.
    let mut s = small(0);
    s["attributes"] = json!([{"key": "list", "value": {"arrayValue": {"values": [
        {"intValue": 1}, {"intValue": 2}, {"intValue": 3}, {"intValue": 4}, {"intValue": 5}, {"intValue": 6}
    ]}}}]);
    over(
        request(vec![resource(vec![s])]),
        "otlp.max_attributes",
        "resourceSpans[0].scopeSpans[0].spans[0].attributes[0].value.arrayValue.values[5]",
    )
    .await;
    let mut s = small(0);
    s["events"] = json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]);
    over(
        request(vec![resource(vec![s])]),
        "otlp.max_events",
        "resourceSpans[0].scopeSpans[0].spans[0].events[2]",
    )
    .await;
    over(
        request(vec![json!({}), json!({"scopeSpans": [{}, {}, {}]})]),
        "otlp.max_blocks",
        "resourceSpans[1].scopeSpans[2]",
    )
    .await;

    // Protobuf: the same limits, checked before a span is built.
    let bare = || pb::Span {
        trace_id: hex::decode(TRACE_A).unwrap(),
        ..Default::default()
    };
    let pb_with = |spans: Vec<pb::Span>| ExportTraceServiceRequest {
        resource_spans: vec![pb::ResourceSpans {
            scope_spans: vec![pb::ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let req = pb_with((0..4).map(|_| bare()).collect());
    let (status, body, _) =
        post_traces(&app, "application/x-protobuf", None, proto::encode(&req)).await;
    let (status, err) = error_of(status, &body);
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{err}");
    assert_eq!(err["code"], "too_many_items", "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("otlp.max_spans"),
        "{err}"
    );
    assert_eq!(
        err["path"], "resourceSpans[0].scopeSpans[0].spans[3]",
        "{err}"
    );
    let mut req = pb_with(vec![bare()]);
    req.resource_spans[0].scope_spans[0].spans[0].links = vec![Default::default(); 3];
    let (status, body, _) =
        post_traces(&app, "application/x-protobuf", None, proto::encode(&req)).await;
    let (status, err) = error_of(status, &body);
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("otlp.max_events"),
        "{err}"
    );
    let mut req = pb_with(vec![bare()]);
    req.resource_spans[0].scope_spans[0].spans[0].attributes =
        (0..5).map(|i| pb_kv(&format!("s{i}"), "v")).collect();
    req.resource_spans[0].resource = Some(Resource {
        attributes: (0..2).map(|i| pb_kv(&format!("r{i}"), "v")).collect(),
        ..Default::default()
    });
    let (status, body, _) =
        post_traces(&app, "application/x-protobuf", None, proto::encode(&req)).await;
    let (status, err) = error_of(status, &body);
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("otlp.max_attributes"),
        "{err}"
    );
    // The resource's two are read first (its field comes first on the wire), then the span's.
    assert_eq!(
        err["path"], "resourceSpans[0].scopeSpans[0].spans[0].attributes[4]",
        "{err}"
    );
    let (_, list, _) = send(&app, "GET", "/v1/tasks", "").await;
    assert_eq!(list["total"], 0, "nothing was applied: {list}");

    // Within the limits, whatever unknown keys hold (skipped unread, not counted).
    let mut s = tool(0);
    s["links"] = json!(vec![
        json!({"traceId": TRACE_B, "attributes": [kv("a", "b")]});
        50
    ]);
    s["droppedAttributesCount"] = json!(7);
    let body = request(vec![
        json!({"schemaUrl": "x", "scopeSpans": [{"scope": {"name": "agent", "attributes": vec![kv("a", "b"); 50]}, "spans": [s]}]}),
    ]);
    let (status, body, _) = post_traces(&app, "application/json", None, body).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(task(&app, TRACE_A).await.1["events_total"], 1);
}

/// Issue 43: a span naming one field in both spellings (`traceId` and `trace_id`) is refused
/// like any key given twice; data after a compressed body is not ignored: gzip members after
/// the first are read (as the Collector reads them), anything else after the stream is 400.
#[tokio::test]
async fn both_spellings_of_a_field_and_data_after_the_compressed_body_are_refused() {
    let app = router(state_with(Config::default(), model()));
    let mut s = json_tool_span(TRACE_A, 0, STUCK[0]);
    s["trace_id"] = json!(TRACE_B);
    let (status, body, _) =
        post_traces(&app, "application/json", None, json_request(vec![s])).await;
    let (status, err) = error_of(status, &body);
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert_eq!(err["code"], "invalid_json", "{err}");
    assert_eq!(
        err["path"], "resourceSpans[0].scopeSpans[0].spans[0].trace_id",
        "{err}"
    );
    assert!(
        err["message"].as_str().unwrap().contains("traceId"),
        "{err}"
    );
    for (camel, snake) in [
        ("resourceSpans", "resource_spans"),
        ("startTimeUnixNano", "start_time_unix_nano"),
    ] {
        let mut s = json_tool_span(TRACE_A, 0, STUCK[0]);
        let mut doc: Value = serde_json::from_slice(&json_request(vec![])).unwrap();
        if camel == "resourceSpans" {
            doc[snake] = json!([]);
        } else {
            s[snake] = json!("1");
            doc["resourceSpans"][0]["scopeSpans"][0]["spans"] = json!([s]);
        }
        let (status, body, _) =
            post_traces(&app, "application/json", None, doc.to_string().into_bytes()).await;
        let (status, err) = error_of(status, &body);
        assert_eq!(
            (status, err["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_json")),
            "{camel}: {err}"
        );
    }

    // Two gzip members: both are read (protobuf messages concatenated are one, merged).
    let mut a = pb_request(TRACE_A);
    a.resource_spans[0].scope_spans[0].spans.truncate(2);
    let mut b = pb_request(TRACE_B);
    b.resource_spans[0].scope_spans[0].spans.truncate(1);
    let body = [gzip(&proto::encode(&a)), gzip(&proto::encode(&b))].concat();
    let (status, body, _) = post_traces(&app, "application/x-protobuf", Some("gzip"), body).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(task(&app, TRACE_A).await.1["events_total"], 2);
    assert_eq!(task(&app, TRACE_B).await.1["events_total"], 1);
    // Bytes after the last member that are no gzip member, or after a deflate stream: 400.
    let trailing = [gzip(&proto::encode(&a)), b"trailing junk".to_vec()].concat();
    let (status, body, _) =
        post_traces(&app, "application/x-protobuf", Some("gzip"), trailing).await;
    let (status, err) = error_of(status, &body);
    assert_eq!(
        (status, err["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_otlp")),
        "{err}"
    );
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut z, &proto::encode(&a)).unwrap();
    let deflated = [z.finish().unwrap(), b"more".to_vec()].concat();
    let (status, body, _) =
        post_traces(&app, "application/x-protobuf", Some("deflate"), deflated).await;
    let (status, err) = error_of(status, &body);
    assert_eq!(
        (status, err["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_otlp")),
        "{err}"
    );
    assert!(err["message"].as_str().unwrap().contains("after"), "{err}");
}

/// The event a span becomes, with no bound on the JSON read from its attributes.
/// A real client trickling an OTLP body, a byte every 20 ms (so the connection is never idle),
/// past a 300 ms body timeout: answered 408 `body_timeout` like every route, plain or gzip, and
/// the connection closed; long before the body would have arrived whole.
#[tokio::test]
async fn a_body_trickling_past_the_body_timeout_is_answered_408() {
    use crate::server::http::conn::{self, ConnLimits};
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let mut cfg = Config::default();
    cfg.server.body_read_timeout_ms = 300;
    let limits = ConnLimits::of(&cfg.server);
    let state = state_with(cfg, model());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let routes = conn::Routes {
        ready: Arc::new(OnceLock::from(router(Arc::clone(&state)))),
        starting: axum::Router::new(),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(conn::serve(
        listener,
        routes,
        limits,
        state.metrics.connections(),
        async {
            let _ = stopped.await;
        },
    ));
    let json = json_request(vec![json_tool_span(TRACE_A, 0, STUCK[0])]);
    let step = Duration::from_millis(20);
    for (encoding, body) in [(None, json.clone()), (Some("gzip"), gzip(&json))] {
        let whole = step * body.len() as u32;
        assert!(whole > Duration::from_secs(2), "the body takes {whole:?}");
        let sock = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut rx, mut tx) = sock.into_split();
        let mut head = format!(
            "POST /v1/traces HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        );
        if let Some(e) = encoding {
            head.push_str(&format!("content-encoding: {e}\r\n"));
        }
        head.push_str("\r\n");
        tx.write_all(head.as_bytes()).await.unwrap();
        let started = Instant::now();
        let trickle = tokio::spawn(async move {
            for b in body {
                // The server closes the connection with its answer: writing then fails.
                if tx.write_all(&[b]).await.is_err() {
                    return;
                }
                tokio::time::sleep(step).await;
            }
        });
        let mut reply = Vec::new();
        tokio::time::timeout(whole, rx.read_to_end(&mut reply))
            .await
            .expect("answered and closed before the body was whole")
            .unwrap();
        let took = started.elapsed();
        trickle.abort();
        let text = String::from_utf8_lossy(&reply);
        assert!(text.starts_with("HTTP/1.1 408"), "{encoding:?}: {text}");
        assert!(text.contains("\"body_timeout\""), "{encoding:?}: {text}");
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(2),
            "{encoding:?}: answered after {took:?}"
        );
    }
    let _ = stop.send(());
    server.await.unwrap();
    let (_, list, _) = send(&router(state), "GET", "/v1/tasks", "").await;
    assert_eq!(list["total"], 0, "nothing was applied: {list}");
}

fn event(s: &Span) -> Option<(Event, &'static str)> {
    let mut unbounded = usize::MAX;
    event_of(s, &mut unbounded)
}

fn span(attrs: Vec<(&str, Attr)>) -> Span {
    Span {
        trace_id: TRACE_A.into(),
        name: "span".into(),
        start_ns: 1,
        end_ns: 2,
        attrs: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        events: Vec::new(),
        error: false,
        status_message: String::new(),
        resource: 0,
    }
}

fn s(v: &str) -> Attr {
    Attr::Str(v.into())
}

#[test]
fn genai_spans_of_every_generation_become_the_right_events() {
    // Semantic conventions 1.37+: structured output messages; the tool-call part is no text.
    let chat = span(vec![
        ("gen_ai.operation.name", s("chat")),
        (
            "gen_ai.output.messages",
            s(
                r#"[{"role":"assistant","parts":[{"type":"text","content":"The file is empty."},{"type":"tool_call","name":"ls"}],"finish_reason":"stop"}]"#,
            ),
        ),
    ]);
    let Some((Event::Response(r), "response")) = event(&chat) else {
        panic!()
    };
    assert_eq!(r.text, "The file is empty.");
    // OpenLLMetry's indexed attributes.
    let old = span(vec![
        ("gen_ai.operation.name", s("chat")),
        ("gen_ai.completion.1.content", s("second")),
        ("gen_ai.completion.0.content", s("first")),
    ]);
    let Some((Event::Response(r), _)) = event(&old) else {
        panic!()
    };
    assert_eq!(r.text, "first\nsecond");
    // An event-based completion.
    let mut ev = span(vec![("gen_ai.operation.name", s("text_completion"))]);
    ev.events.push(SpanEvent {
        name: "gen_ai.choice".into(),
        attrs: vec![(
            "message".into(),
            s(r#"{"role":"assistant","content":"done"}"#),
        )],
    });
    let Some((Event::Response(r), _)) = event(&ev) else {
        panic!()
    };
    assert_eq!(r.text, "done");
    // A chat that only asked for a tool call has no text: ignored.
    let only_tools = span(vec![
        ("gen_ai.operation.name", s("chat")),
        (
            "gen_ai.output.messages",
            s(r#"[{"role":"assistant","parts":[{"type":"tool_call","name":"ls"}]}]"#),
        ),
    ]);
    assert!(event(&only_tools).is_none());
    // A failed chat is a failure, with the exception's text.
    let mut failed = span(vec![
        ("gen_ai.operation.name", s("chat")),
        ("error.type", s("RateLimitError")),
    ]);
    failed.error = true;
    failed.events.push(SpanEvent {
        name: "exception".into(),
        attrs: vec![
            ("exception.type".into(), s("RateLimitError")),
            ("exception.message".into(), s("429 Too Many Requests")),
        ],
    });
    let Some((Event::Failure(f), "failure")) = event(&failed) else {
        panic!()
    };
    assert_eq!(f.message, "RateLimitError: 429 Too Many Requests");
    assert_eq!(f.error_type.as_deref(), Some("RateLimitError"));
    // The Vercel AI SDK's own attributes.
    let ai_sdk = span(vec![
        ("ai.operationId", s("ai.toolCall")),
        ("ai.toolCall.name", s("getWeather")),
        ("ai.toolCall.args", s(r#"{"city":"Paris"}"#)),
        ("ai.toolCall.result", s(r#"{"temp":22}"#)),
    ]);
    let Some((Event::ToolCall(c), "tool_call")) = event(&ai_sdk) else {
        panic!()
    };
    assert_eq!(
        (c.tool.as_str(), &c.args),
        ("getWeather", &json!({"city": "Paris"}))
    );
    assert_eq!(c.result.unwrap().output, json!({"temp": 22}));
    // A failed tool without a result: its status message is the output.
    let mut tool = span(vec![
        ("gen_ai.operation.name", s("execute_tool")),
        ("gen_ai.tool.name", s("grep")),
    ]);
    tool.error = true;
    tool.status_message = "no such file".into();
    let Some((Event::ToolCall(c), _)) = event(&tool) else {
        panic!()
    };
    let r = c.result.unwrap();
    assert_eq!((r.output, r.is_error), (json!("no such file"), Some(true)));
    // Not GenAI, or a GenAI operation loopguard does not evaluate: ignored.
    assert!(event(&span(vec![("http.request.method", s("GET"))])).is_none());
    assert!(event(&span(vec![("gen_ai.operation.name", s("invoke_agent"))])).is_none());
}
