//! `POST /v1/traces`: OTLP/HTTP traces in, in protobuf (`application/x-protobuf`) or JSON
//! (`application/json`), gzip, deflate or neither, as an OpenTelemetry exporter sends them to a
//! Collector.
//! Spans that follow the GenAI semantic conventions become events, in the order they started:
//!
//! | span | event |
//! |---|---|
//! | `gen_ai.operation.name = execute_tool` (or the Vercel AI SDK's `ai.toolCall`) | `tool_call`: `gen_ai.tool.name`, `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`; failed when the span's status is an error (the status message, the exception or `error.type` as output when there is no result) |
//! | `chat`, `text_completion`, `generate_content` (or the AI SDK's `doGenerate` / `doStream`) | `response` with the output text (`gen_ai.output.messages`, older `gen_ai.completion` attributes and events, `ai.response.text`); a `failure` when the span failed |
//! | any other GenAI span that failed | `failure` |
//! | anything else | ignored, counted in `loopguard_otlp_spans_total{outcome="ignored"}` |
//!
//! OpenInference spans (`openinference.span.kind`: `TOOL`, `LLM`, failed `AGENT` and `CHAIN`)
//! are read by [`openinference`], in the same requests.
//!
//! The task is the span's trace id, or the value of `otlp.task_attribute` on the span or its
//! resource. There is no answer path into the agent: verdicts show on the dashboard, in
//! `/v1/tasks` and in `/metrics`.
//!
//! The whole request is decoded and checked before anything is evaluated, so a malformed one is
//! a 400 that changes nothing. Events whose evaluation fails are reported as OTLP's partial
//! success (`rejected_spans`), which tells the exporter not to retry, and the others stay
//! applied; only a request none of whose events was applied is answered 429/503, retryable.

mod json;
mod openinference;
mod proto;

pub use json::{SPAN_KIND_NAMES, STATUS_CODE_NAMES};

use super::integrations;
use crate::server::http::body::{read_encoded, Limit};
use crate::server::http::error::{ApiError, ErrorBody};
use crate::server::metrics::SpanLabels;
use crate::server::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use loopguard::event::{Envelope, Event, Failure, InputError, ToolCall, ToolResult};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// An attribute value (`AnyValue`).
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    Empty,
    Str(String),
    Bool(bool),
    Int(i64),
    Double(f64),
    /// Only the length of a bytes value is kept: no GenAI attribute carries bytes, and the two
    /// encodings (raw in protobuf, base64 in JSON) then read alike.
    Bytes(usize),
    Array(Vec<Attr>),
    Map(Vec<(String, Attr)>),
}

impl Attr {
    fn as_str(&self) -> Option<&str> {
        match self {
            Attr::Str(s) => Some(s),
            _ => None,
        }
    }

    /// As JSON: a string attribute that holds JSON (tool arguments usually do) is parsed, as
    /// long as its values fit in what is left of `budget` (each is taken from it); past it,
    /// or when it is not JSON, the string is kept as text. (Parsed JSON takes up to ~80 times
    /// its text: what a request can make of its attributes is bounded by the count.)
    fn to_json(&self, budget: &mut usize) -> Value {
        match self {
            Attr::Empty => Value::Null,
            Attr::Str(s) => {
                let mut left = [*budget];
                match loopguard::json::from_str_shaped(s, loopguard::json::Counted, &mut left) {
                    Ok(v @ (Value::Object(_) | Value::Array(_))) => {
                        *budget = left[0];
                        v
                    }
                    _ => Value::String(s.clone()),
                }
            }
            Attr::Bool(b) => json!(b),
            Attr::Int(i) => json!(i),
            Attr::Double(d) => serde_json::Number::from_f64(*d)
                .map(Value::Number)
                .unwrap_or_else(|| Value::String(d.to_string())),
            Attr::Bytes(n) => Value::String(format!("<{n} bytes>")),
            Attr::Array(items) => Value::Array(items.iter().map(|a| a.to_json(budget)).collect()),
            Attr::Map(kvs) => Value::Object(
                kvs.iter()
                    .map(|(k, v)| (k.clone(), v.to_json(budget)))
                    .collect::<Map<_, _>>(),
            ),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SpanEvent {
    pub name: String,
    pub attrs: Vec<(String, Attr)>,
}

/// A span, as both encodings decode to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// Lowercase hex.
    pub trace_id: String,
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attrs: Vec<(String, Attr)>,
    pub events: Vec<SpanEvent>,
    /// `status.code` is ERROR.
    pub error: bool,
    pub status_message: String,
    /// Index into [`Batch::resources`].
    pub resource: usize,
}

impl Span {
    fn attr(&self, key: &str) -> Option<&Attr> {
        self.attrs
            .iter()
            .find(|(k, v)| k == key && *v != Attr::Empty)
            .map(|(_, v)| v)
    }

    fn text(&self, key: &str) -> Option<&str> {
        self.attr(key)
            .and_then(Attr::as_str)
            .filter(|s| !s.is_empty())
    }

    /// Why the span failed: its status message, an `exception` event's message, `error.type`.
    fn error_text(&self) -> Option<String> {
        if !self.status_message.trim().is_empty() {
            return Some(self.status_message.clone());
        }
        let exception = self
            .events
            .iter()
            .find(|e| e.name == "exception")
            .and_then(|e| {
                let get = |k: &str| {
                    e.attrs
                        .iter()
                        .find(|(key, _)| key == k)
                        .and_then(|(_, v)| v.as_str())
                };
                match (get("exception.type"), get("exception.message")) {
                    (Some(t), Some(m)) => Some(format!("{t}: {m}")),
                    (None, Some(m)) => Some(m.to_string()),
                    (Some(t), None) => Some(t.to_string()),
                    (None, None) => None,
                }
            });
        exception.or_else(|| self.text("error.type").map(str::to_string))
    }

    fn failed(&self) -> bool {
        self.error || self.attr("error.type").is_some()
    }
}

/// A decoded request: the resources' attributes and every span.
#[derive(Debug, Default)]
pub struct Batch {
    pub resources: Vec<Vec<(String, Attr)>>,
    pub spans: Vec<Span>,
}

/// What a span becomes.
enum Kind {
    Tool,
    Chat,
    /// Another GenAI operation (an agent invocation, embeddings, retrieval).
    Other,
}

fn kind_of(s: &Span) -> Option<Kind> {
    if let Some(op) = s.text("gen_ai.operation.name") {
        return Some(match op {
            "execute_tool" => Kind::Tool,
            "chat" | "text_completion" | "generate_content" => Kind::Chat,
            _ => Kind::Other,
        });
    }
    // The Vercel AI SDK names its operations itself.
    match s.text("ai.operationId") {
        Some("ai.toolCall") => Some(Kind::Tool),
        Some(op) if op.ends_with(".doGenerate") || op.ends_with(".doStream") => Some(Kind::Chat),
        _ => None,
    }
}

/// The text of the model's output: `gen_ai.output.messages` (messages of parts), the older
/// `gen_ai.completion` attribute, OpenLLMetry's `gen_ai.completion.N.content`, the
/// `gen_ai.choice` / `gen_ai.content.completion` events, the AI SDK's `ai.response.text`.
fn output_text(s: &Span, json_values: &mut usize) -> Option<String> {
    fn message_text(v: &Value) -> Vec<String> {
        match v {
            Value::Array(items) => items.iter().flat_map(message_text).collect(),
            Value::String(s) => vec![s.clone()],
            Value::Object(m) => {
                if let Some(parts) = m.get("parts").and_then(Value::as_array) {
                    return parts
                        .iter()
                        .filter(|p| {
                            p.get("type").and_then(Value::as_str).unwrap_or("text") == "text"
                        })
                        .filter_map(|p| p.get("content").and_then(Value::as_str))
                        .map(str::to_string)
                        .collect();
                }
                if let Some(msg) = m.get("message") {
                    return message_text(msg);
                }
                match m.get("content") {
                    Some(c @ (Value::String(_) | Value::Array(_))) => message_text(c),
                    _ => m
                        .get("text")
                        .and_then(Value::as_str)
                        .map(|t| vec![t.to_string()])
                        .unwrap_or_default(),
                }
            }
            _ => Vec::new(),
        }
    }
    let joined = |parts: Vec<String>| {
        let text = parts
            .into_iter()
            .filter(|p| !p.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        (!text.trim().is_empty()).then_some(text)
    };
    for key in [
        "gen_ai.output.messages",
        "gen_ai.completion",
        "ai.response.text",
    ] {
        if let Some(a) = s.attr(key) {
            if let Some(t) = joined(message_text(&a.to_json(json_values))) {
                return Some(t);
            }
        }
    }
    let mut indexed: Vec<(usize, &str)> = s
        .attrs
        .iter()
        .filter_map(|(k, v)| {
            let n = k
                .strip_prefix("gen_ai.completion.")?
                .strip_suffix(".content")?
                .parse()
                .ok()?;
            Some((n, v.as_str()?))
        })
        .collect();
    indexed.sort();
    if let Some(t) = joined(indexed.into_iter().map(|(_, t)| t.to_string()).collect()) {
        return Some(t);
    }
    let mut from_events = Vec::new();
    for e in &s.events {
        if e.name != "gen_ai.choice" && e.name != "gen_ai.content.completion" {
            continue;
        }
        for (_, v) in e
            .attrs
            .iter()
            .filter(|(k, _)| k == "message" || k == "gen_ai.completion")
        {
            from_events.extend(message_text(&v.to_json(json_values)));
        }
    }
    joined(from_events)
}

/// The event a span becomes, and its metrics label. JSON text in its attributes is read
/// within `json_values` values (what is left of `otlp.max_attributes`), else kept as text.
fn event_of(s: &Span, json_values: &mut usize) -> Option<(Event, &'static str)> {
    match kind_of(s)? {
        Kind::Tool => {
            let tool = s
                .text("gen_ai.tool.name")
                .or_else(|| s.text("ai.toolCall.name"))
                .or_else(|| s.name.strip_prefix("execute_tool "))
                .unwrap_or(&s.name)
                .to_string();
            let args = s
                .attr("gen_ai.tool.call.arguments")
                .or_else(|| s.attr("ai.toolCall.args"))
                .map(|a| a.to_json(json_values))
                .unwrap_or(Value::Null);
            let failed = s.failed();
            let output = s
                .attr("gen_ai.tool.call.result")
                .or_else(|| s.attr("ai.toolCall.result"))
                .map(|a| a.to_json(json_values))
                .or_else(|| failed.then(|| s.error_text().map(Value::String)).flatten());
            let result = (output.is_some() || failed).then(|| ToolResult {
                output: output.unwrap_or(Value::Null),
                is_error: Some(failed),
                exit_code: None,
            });
            Some((
                Event::ToolCall(ToolCall { tool, args, result }),
                "tool_call",
            ))
        }
        Kind::Chat if !s.failed() => {
            let text = output_text(s, json_values)?;
            Some((
                Event::Response(loopguard::event::Response { text, chunk: false }),
                "response",
            ))
        }
        Kind::Chat | Kind::Other if s.failed() => Some((
            Event::Failure(Failure {
                message: s
                    .error_text()
                    .unwrap_or_else(|| format!("{} failed", s.name)),
                error_type: s.text("error.type").map(str::to_string),
                location: None,
                stack_trace: None,
            }),
            "failure",
        )),
        Kind::Chat | Kind::Other => None,
    }
}

/// The task of a span: `otlp.task_attribute` on the span or its resource when set and a valid
/// task id, else the trace id.
fn task_of(s: &Span, resource: &[(String, Attr)], key: &str) -> String {
    if !key.is_empty() {
        let value = s.text(key).or_else(|| {
            resource
                .iter()
                .find(|(k, _)| k == key)
                .and_then(|(_, v)| v.as_str())
        });
        if let Some(v) = value {
            if loopguard::event::validate_task_id(key, v).is_ok() {
                return loopguard::event::task_id_nfc(v);
            }
        }
    }
    s.trace_id.clone()
}

/// The agent: `gen_ai.agent.name` on the span, else the resource's `service.name`.
fn agent_of(s: &Span, resource: &[(String, Attr)]) -> Option<String> {
    s.text("gen_ai.agent.name")
        .or_else(|| {
            resource
                .iter()
                .find(|(k, _)| k == "service.name")
                .and_then(|(_, v)| v.as_str())
        })
        .map(str::to_string)
}

fn span_ts(ns: u64) -> Option<time::OffsetDateTime> {
    (ns > 0)
        .then(|| time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns)).ok())
        .flatten()
}

/// The events of a batch with their metrics labels, grouped by task, each task's in the order
/// its spans started; and how many spans were ignored.
type Tasks = BTreeMap<String, Vec<(Envelope, &'static str)>>;

fn envelopes(batch: &Batch, task_attribute: &str, mut json_values: usize) -> (Tasks, u64) {
    let mut items = Vec::new();
    let mut ignored = 0;
    for s in &batch.spans {
        let resource = &batch.resources[s.resource];
        match event_of(s, &mut json_values) {
            Some((event, label)) => {
                let env = Envelope {
                    agent_id: agent_of(s, resource),
                    ts: span_ts(s.end_ns),
                    ..Envelope::bare(task_of(s, resource, task_attribute), event)
                };
                items.push(((s.start_ns, s.end_ns), env, label));
            }
            None => {
                match openinference::envelope(s, resource, task_attribute, &mut |a: &Attr| {
                    a.to_json(&mut json_values)
                }) {
                    Some((env, label)) => items.push(((s.start_ns, s.end_ns), env, label)),
                    None => ignored += 1,
                }
            }
        }
    }
    items.sort_by_key(|(at, _, _)| *at);
    let mut tasks = Tasks::new();
    for (_, env, label) in items {
        tasks
            .entry(env.task_id.clone())
            .or_default()
            .push((env, label));
    }
    (tasks, ignored)
}

/// What a request may hold, each bounded by a setting (`otlp.max_*`) and counted while the
/// request is decoded, before anything is built: a body's memory is bounded by these, not by
/// its size (8 MiB of protobuf is four million empty spans, ~1.5 GiB once decoded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    Span = 0,
    /// Attributes of resources, scopes, spans, events and links, the values nested in array and
    /// map attributes, and the values of JSON text in a GenAI attribute when it is read.
    Attribute = 1,
    /// Span events and links.
    Event = 2,
    /// Resource and scope blocks (and a resource's entity references).
    Block = 3,
}

impl Item {
    const ALL: [Item; 4] = [Item::Span, Item::Attribute, Item::Event, Item::Block];

    fn setting(self) -> &'static str {
        match self {
            Item::Span => "otlp.max_spans",
            Item::Attribute => "otlp.max_attributes",
            Item::Event => "otlp.max_events",
            Item::Block => "otlp.max_blocks",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Item::Span => "spans",
            Item::Attribute => "attributes (nested values included)",
            Item::Event => "span events and links",
            Item::Block => "resource and scope blocks",
        }
    }
}

/// The limits of `cfg`, by [`Item`].
fn limits(cfg: &loopguard::config::OtlpConfig) -> [usize; 4] {
    [
        cfg.max_spans,
        cfg.max_attributes,
        cfg.max_events,
        cfg.max_blocks,
    ]
}

/// `413 too_many_items`: the request holds more of `item` than its setting allows.
fn too_many(item: Item, limits: &[usize; 4], path: String) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_many_items",
        format!(
            "the request holds more than {} {} ({}); send smaller batches",
            limits[item as usize],
            item.what(),
            item.setting()
        ),
    )
    .at(path)
}

/// Which encoding the request is in (its answer is in the same).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Encoding {
    Protobuf,
    Json,
}

fn media(headers: &HeaderMap) -> Result<Encoding, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let mime = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match mime.as_str() {
        "application/x-protobuf" | "application/protobuf" => Ok(Encoding::Protobuf),
        "application/json" => Ok(Encoding::Json),
        _ => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "OTLP/HTTP traces are `application/x-protobuf` or `application/json`, got `{ct}`"
            ),
        )),
    }
}

/// The request decoded, and what is left of each limit.
fn decode(
    encoding: Encoding,
    bytes: &[u8],
    limits: &[usize; 4],
) -> Result<(Batch, [usize; 4]), ApiError> {
    let invalid = |e: InputError| ApiError::bad_request("invalid_otlp", e.message).at(e.path);
    let mut left = *limits;
    let batch = match encoding {
        Encoding::Protobuf => {
            // Counted first, so that prost builds nothing past the limits.
            proto::count(bytes, &mut left).map_err(|r| match r {
                proto::Refusal::Over(item, path) => too_many(item, limits, path),
                proto::Refusal::Malformed(why) => ApiError::bad_request(
                    "invalid_otlp",
                    format!("not an OTLP ExportTraceServiceRequest in protobuf: {why}"),
                ),
            })?;
            proto::decode(bytes).map_err(invalid)?
        }
        Encoding::Json => {
            let text = std::str::from_utf8(bytes).map_err(|e| {
                ApiError::bad_request(
                    "invalid_utf8",
                    format!("the body is not valid UTF-8 (at byte {})", e.valid_up_to()),
                )
            })?;
            // Parsed by the request's shape (what is not read is not built, what is counted
            // stops at its limit) and its attributes made as they are parsed.
            let mut made = json::Made::default();
            let mut refused = None;
            let parsed = {
                let mut convert = |shape: json::Otlp, path: &str, v: Value| {
                    json::convert(&mut made, shape, path, v).map_err(|e| {
                        let message = e.message.clone();
                        refused = Some(e);
                        message
                    })
                };
                loopguard::json::from_str_converting(
                    text,
                    json::Otlp::Request,
                    &mut left,
                    &mut convert,
                )
            };
            let doc = parsed.map_err(|e| {
                use loopguard::json::JsonErrorKind;
                if let JsonErrorKind::OverLimit(i) = e.kind {
                    return too_many(Item::ALL[i], limits, e.path);
                }
                if let Some(r) = refused.take() {
                    return invalid(r);
                }
                let mut err = ApiError::bad_request(
                    "invalid_json",
                    format!(
                        "not valid JSON: {} (line {}, column {})",
                        e.message, e.line, e.column
                    ),
                );
                if e.kind == JsonErrorKind::DuplicateKey {
                    err.body.path = Some(e.path);
                }
                err
            })?;
            json::decode(&doc, &mut made).map_err(invalid)?
        }
    };
    Ok((batch, left))
}

fn answer(encoding: Encoding, rejected: u64, message: String) -> Response {
    let (ct, body) = match encoding {
        Encoding::Protobuf => ("application/x-protobuf", proto::response(rejected, message)),
        Encoding::Json => {
            let v = if rejected > 0 {
                // 64-bit integers are decimal strings in OTLP's JSON.
                json!({"partialSuccess": {"rejectedSpans": rejected.to_string(), "errorMessage": message}})
            } else {
                json!({})
            };
            ("application/json", v.to_string().into_bytes())
        }
    };
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    resp
}

async fn ingest(state: &AppState, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let encoding = media(headers)?;
    let limit = Limit {
        bytes: state.cfg.otlp.max_body_bytes,
        setting: "otlp.max_body_bytes",
    };
    let bytes = read_encoded(headers, body, limit, "invalid_otlp").await?;
    let limits = limits(&state.cfg.otlp);
    let (batch, left) = decode(encoding, &bytes, &limits)?;
    drop(bytes);
    // JSON text in GenAI attributes is read within what is left of the attribute limit.
    let (tasks, ignored) = envelopes(
        &batch,
        &state.cfg.otlp.task_attribute,
        left[Item::Attribute as usize],
    );
    drop(batch);
    // Tasks at once, each task's events one after the other, in order.
    let per_task = tasks.into_values().map(|envs| async move {
        let mut results = Vec::with_capacity(envs.len());
        for (env, label) in envs {
            results.push((label, integrations::evaluate(state, env).await.map(|_| ())));
        }
        results
    });
    let results = futures_util::future::join_all(per_task).await;
    let m = &state.metrics.integrations.otlp_spans;
    m.get_or_create(&SpanLabels { outcome: "ignored" })
        .inc_by(ignored);
    let mut applied = 0u64;
    let mut errors = Vec::new();
    for (label, r) in results.into_iter().flatten() {
        match r {
            Ok(()) => {
                applied += 1;
                m.get_or_create(&SpanLabels { outcome: label }).inc();
            }
            Err(e) => {
                m.get_or_create(&SpanLabels {
                    outcome: "rejected",
                })
                .inc();
                errors.push(e);
            }
        }
    }
    let Some(first) = errors.first() else {
        return Ok(answer(encoding, 0, String::new()));
    };
    let retryable = matches!(first.status.as_u16(), 429 | 503) && first.body.code != "timeout";
    if applied == 0 && retryable {
        return Err(first.clone());
    }
    let message = format!(
        "{} of {} GenAI spans were not evaluated: {} ({})",
        errors.len(),
        errors.len() as u64 + applied,
        first.body.message,
        first.body.code
    );
    Ok(answer(encoding, errors.len() as u64, message))
}

/// The OTLP JSON request as JSON Schema, exactly as [`json::decode`] reads it (the OpenAPI
/// document's `/v1/traces` body): lowerCamelCase keys (the field names in snake_case are read
/// too, but not listed), hex ids, 64-bit integers as numbers or strings of digits (saturated), enums as
/// numbers or names; `null` where a field may be absent. Other keys are allowed and ignored.
pub fn json_schemas() -> Value {
    let nullable = |schema: Value| json!({"oneOf": [schema, {"type": "null"}]});
    let array_of = |r: &str| {
        nullable(json!({"type": "array", "items": {"$ref": format!("#/components/schemas/{r}")}}))
    };
    let text = || json!({"type": ["string", "null"]});
    let time = || {
        nullable(json!({"oneOf": [
            // Past 64 bits is saturated, not refused.
            {"type": "integer", "minimum": 0},
            {"type": "string", "pattern": "^[0-9]{1,20}$"}
        ]}))
    };
    let enumeration = |names: &[&str]| {
        nullable(json!({"oneOf": [
            {"type": "integer", "minimum": 0, "maximum": names.len() - 1},
            {"type": "string", "enum": names}
        ]}))
    };
    let span_id = || json!({"type": ["string", "null"], "pattern": "^([0-9a-fA-F]{16})?$"});
    json!({
        "OtlpTraces": {
            "type": "object",
            "description": "OTLP `ExportTraceServiceRequest` in OTLP JSON (opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding).",
            "properties": {"resourceSpans": array_of("OtlpResourceSpans")}
        },
        "OtlpResourceSpans": {
            "type": "object",
            "properties": {
                "resource": nullable(json!({"type": "object", "properties": {"attributes": array_of("OtlpKeyValue")}})),
                "scopeSpans": array_of("OtlpScopeSpans")
            }
        },
        "OtlpScopeSpans": {
            "type": "object",
            "properties": {"spans": array_of("OtlpSpan")}
        },
        "OtlpSpan": {
            "type": "object",
            "required": ["traceId"],
            "properties": {
                "traceId": {"type": "string", "pattern": "^[0-9a-fA-F]{32}$", "description": "The task, unless otlp.task_attribute names another"},
                "spanId": span_id(),
                "parentSpanId": span_id(),
                "name": text(),
                "kind": enumeration(&SPAN_KIND_NAMES),
                "startTimeUnixNano": time(),
                "endTimeUnixNano": time(),
                "attributes": array_of("OtlpKeyValue"),
                "events": nullable(json!({"type": "array", "items": {
                    "type": "object",
                    "properties": {"timeUnixNano": time(), "name": text(), "attributes": array_of("OtlpKeyValue")}
                }})),
                "status": nullable(json!({"type": "object", "properties": {
                    "code": enumeration(&STATUS_CODE_NAMES),
                    "message": text()
                }}))
            }
        },
        "OtlpKeyValue": {
            "type": "object",
            "properties": {"key": text(), "value": nullable(json!({"$ref": "#/components/schemas/OtlpAnyValue"}))}
        },
        "OtlpAnyValue": {
            "type": "object",
            "description": "One of its values (the first present, in this order); `{}` is empty.",
            "properties": {
                "stringValue": text(),
                "boolValue": {"type": ["boolean", "null"]},
                "intValue": nullable(json!({"oneOf": [
                    {"type": "integer"},
                    {"type": "string", "pattern": "^-?[0-9]{1,19}$"}
                ]})),
                "doubleValue": nullable(json!({"oneOf": [
                    {"type": "number"},
                    {"type": "string", "enum": ["NaN", "Infinity", "-Infinity"]}
                ]})),
                "arrayValue": nullable(json!({"type": "object", "properties": {"values": array_of("OtlpAnyValue")}})),
                "kvlistValue": nullable(json!({"type": "object", "properties": {"values": array_of("OtlpKeyValue")}})),
                "bytesValue": text()
            }
        }
    })
}

/// `POST /v1/traces`: OTLP/HTTP traces (protobuf or JSON); GenAI spans become events.
#[utoipa::path(
    post,
    path = "/v1/traces",
    tag = "integrations",
    // Both media types are set in the document (openapi.rs), from `json_schemas`.
    request_body(
        content = Vec<u8>,
        content_type = "application/x-protobuf",
        description = "An OTLP `ExportTraceServiceRequest`: protobuf (`application/x-protobuf`) or OTLP JSON (`application/json`), optionally `Content-Encoding: gzip` or `deflate`"
    ),
    responses(
        (status = 200, description = "An `ExportTraceServiceResponse` in the request's encoding: empty, or `partialSuccess` with the spans whose events could not be evaluated (not to be retried)"),
        (status = 400, description = "Not OTLP: undecodable protobuf, invalid JSON, a bad trace id; `path` names the field. Nothing was evaluated", body = ErrorBody),
        (status = 413, description = "Over otlp.max_body_bytes, compressed or not (`body_too_large`), or more spans, attributes, span events and links, or resource and scope blocks than otlp.max_spans, max_attributes, max_events, max_blocks allow, counted while decoding (`too_many_items`; `path` names the first past the limit)", body = ErrorBody),
        (status = 415, description = "Neither protobuf nor JSON, or an encoding other than gzip and deflate", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
pub async fn traces(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match ingest(&state, &headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests;
