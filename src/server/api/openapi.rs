//! The OpenAPI document, generated from the handlers and types and completed with the limits of
//! the running configuration. The copy for the default configuration is committed at
//! docs/openapi.json; a test fails when it drifts, and CI fuzzes the served document against the
//! service with schemathesis (.ci/schemathesis.sh).

use super::validate::FIELDS;
use crate::server::http::limits::{Class, Limits};
use crate::server::AppState;
use axum::extract::State;
use axum::Json;
use loopguard::event::MAX_TASK_ID_CHARS;
use loopguard::Config;
use serde_json::{json, Value};
use std::sync::Arc;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// `GET /openapi.json`: this API's OpenAPI document, for the running configuration. Its handler
/// lives here rather than beside the others: the document names their handlers, so serving it
/// from their module would make the two import each other.
pub async fn serve(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(document(&state.cfg))
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "loopguard",
        description = "Tells an LLM-agent orchestrator, event by event, whether its agent is stuck in a loop — also when the agent rewords what it repeats — and what to do next.",
        license(name = "Apache-2.0")
    ),
    paths(
        super::evaluate::evaluate,
        crate::server::views::overview::list_tasks,
        super::tasks::get_task,
        super::tasks::get_history,
        super::tasks::reset_task,
        super::tasks::delete_task,
        crate::server::views::overview::recent_loops,
        super::loops::similar_loops,
        super::feedback::feedback,
        super::feedback::export_feedback,
        super::operations::livez,
        super::operations::readyz,
        super::operations::metrics,
        crate::server::views::overview::stats,
        crate::server::ingest::hooks::claude_code,
        crate::server::ingest::hooks::gemini_cli,
        crate::server::ingest::otlp::traces,
    ),
    components(schemas(
        super::evaluate::BatchItem,
        super::feedback::ExportFormat,
        loopguard::event::Event,
    )),
    modifiers(&BearerAuth),
    tags(
        (name = "evaluate", description = "Events in, verdicts out"),
        (name = "tasks", description = "Task listing, state, audit trail, reset, delete"),
        (name = "loops", description = "Cross-task loop memory: recent loops, similar loops"),
        (name = "feedback", description = "False positives and missed loops, exported for calibration"),
        (name = "operations", description = "Health, metrics and live figures"),
        (name = "integrations", description = "Where agents already run: Claude Code and Gemini CLI hooks, OpenTelemetry traces (docs/INTEGRATIONS.md)"),
    )
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

fn base() -> Value {
    let mut doc = ApiDoc::openapi();
    // Stable across builds: the committed copy must not change with the crate version.
    doc.info.version = "1".into();
    serde_json::to_value(&doc).expect("the OpenAPI document serialises")
}

/// A task id as JSON Schema states it: 1..256 characters, none of them a control character
/// (Unicode category Cc, as Rust's `char::is_control`) or an invisible one
/// (`loopguard::event::INVISIBLE_CHARS`), and at least one that is not whitespace. (That ids are
/// kept in NFC is not a constraint: any form is taken.)
fn task_id_schema() -> Value {
    json!({
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_TASK_ID_CHARS,
        "pattern": task_id_pattern(),
    })
}

/// What `char::is_whitespace` calls whitespace (the Unicode White_Space set).
const WHITESPACE: &[(char, char)] = &[
    ('\u{0009}', '\u{000d}'),
    ('\u{0020}', '\u{0020}'),
    ('\u{0085}', '\u{0085}'),
    ('\u{00a0}', '\u{00a0}'),
    ('\u{1680}', '\u{1680}'),
    ('\u{2000}', '\u{200a}'),
    ('\u{2028}', '\u{2029}'),
    ('\u{202f}', '\u{202f}'),
    ('\u{205f}', '\u{205f}'),
    ('\u{3000}', '\u{3000}'),
];

/// The task id pattern, from the same table the check reads: any number of allowed
/// characters around one that is also not whitespace. Characters of the basic plane are
/// written as `\uXXXX` escapes; those past it (the tag characters) as themselves, which
/// ECMA-262 with the `u` flag (JSON Schema's dialect), Python's `re` and Rust's regex all read
/// alike, where their escapes differ.
pub fn task_id_pattern() -> String {
    let controls = [('\u{0000}', '\u{001f}'), ('\u{007f}', '\u{009f}')];
    let class = |extra: &[(char, char)]| {
        let mut ranges: Vec<(char, char)> = controls
            .iter()
            .chain(loopguard::event::INVISIBLE_CHARS)
            .chain(extra)
            .copied()
            .collect();
        ranges.sort();
        // Merge ranges that touch or overlap, so the class reads as the set it is.
        let mut merged: Vec<(char, char)> = Vec::new();
        for (lo, hi) in ranges {
            match merged.last_mut() {
                Some((_, last)) if (lo as u32) <= *last as u32 + 1 => {
                    if hi > *last {
                        *last = hi;
                    }
                }
                _ => merged.push((lo, hi)),
            }
        }
        let one = |c: char| {
            if (c as u32) < 0x10000 {
                format!("\\u{:04x}", c as u32)
            } else {
                c.to_string()
            }
        };
        let mut out = String::from("[^");
        for (lo, hi) in merged {
            out.push_str(&one(lo));
            if hi != lo {
                out.push('-');
                out.push_str(&one(hi));
            }
        }
        out.push(']');
        out
    };
    let allowed = class(&[]);
    format!("^{allowed}*{}{allowed}*$", class(WHITESPACE))
}

/// The document for a server running `cfg`: limits and security as that server applies them.
/// The derive describes the types; what depends on configuration, and what the derive cannot
/// say (the batch form, the shared error answers), is set here, from the same tables the
/// checks use ([`FIELDS`]).
pub fn document(cfg: &Config) -> Value {
    let mut doc = base();
    let limits = Limits::of(&cfg.server);
    let schemas = doc["components"]["schemas"]
        .as_object_mut()
        .expect("the document has schemas");

    for (schema, field, class) in FIELDS {
        let prop = &mut schemas[*schema]["properties"][*field];
        assert!(prop.is_object(), "{schema}.{field} is in the document");
        let max = limits.max(*class);
        match class {
            Class::Id => {
                let nullable = prop["type"].is_array();
                let description = prop["description"].clone();
                *prop = task_id_schema();
                if nullable {
                    prop["type"] = json!(["string", "null"]);
                }
                if !description.is_null() {
                    prop["description"] = description;
                }
            }
            Class::Name | Class::Text => prop["maxLength"] = json!(max),
            Class::Json => {
                // Any JSON value; its size is bounded as text, which JSON Schema cannot state.
                let description = prop["description"]
                    .as_str()
                    .unwrap_or("Any JSON.")
                    .to_string();
                *prop = json!({
                    "description": format!("{description} At most {max} characters as JSON text (server.max_text_chars).")
                });
            }
        }
    }
    // `path` is always present, `null` when the error is about the request as a whole.
    schemas["ErrorBody"]["required"] = json!(["code", "message", "path"]);
    // A hook's session is the task: the same contract as a task id.
    for hook in ["ClaudeCodeHook", "GeminiCliHook"] {
        let prop = &mut schemas[hook]["properties"]["session_id"];
        let description = prop["description"].clone();
        *prop = task_id_schema();
        prop["description"] = description;
    }
    // A tool response is whatever the tool returns: any JSON.
    for hook in ["ClaudeCodeHook", "GeminiCliHook"] {
        let response = &mut schemas[hook]["properties"]["tool_response"];
        *response = json!({"description": response["description"].clone()});
    }
    if let Value::Object(otlp) = crate::server::ingest::otlp::json_schemas() {
        schemas.extend(otlp);
    }
    for schema in schemas.values_mut() {
        bound_integers(schema);
    }

    let batch_max = cfg.server.max_batch_events;
    let token = cfg.server.auth_token.is_some();
    let paths = doc["paths"]
        .as_object_mut()
        .expect("the document has paths");
    let evaluate = &mut paths["/v1/evaluate"]["post"];
    evaluate["requestBody"]["content"]["application/json"]["schema"] = json!({
        "oneOf": [
            {"$ref": "#/components/schemas/Envelope"},
            {
                "type": "array",
                "maxItems": batch_max,
                "description": "A batch: each item is evaluated on its own, in order, and answered in place by its verdict or its error, so an item that is not a valid envelope does not fail the others.",
                "items": {}
            }
        ]
    });
    evaluate["responses"]["200"]["content"]["application/json"]["schema"] = json!({
        "oneOf": [
            {"$ref": "#/components/schemas/Verdict"},
            {"type": "array", "items": {"$ref": "#/components/schemas/BatchItem"}}
        ]
    });
    let traces = &mut paths["/v1/traces"]["post"];
    traces["requestBody"]["content"] = json!({
        "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
        "application/json": {"schema": {"$ref": "#/components/schemas/OtlpTraces"}}
    });
    traces["responses"]["200"]["content"] = json!({
        "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
        "application/json": {"schema": {
            "type": "object",
            "properties": {"partialSuccess": {"type": "object", "properties": {
                "rejectedSpans": {"type": "string", "pattern": "^[0-9]+$"},
                "errorMessage": {"type": "string"}
            }}}
        }}
    });

    for (path, item) in paths.iter_mut() {
        for (_, op) in item.as_object_mut().expect("a path item").iter_mut() {
            let guarded = op.get("security").is_some();
            if guarded && token {
                op["security"] = json!([{"bearer": []}]);
            }
            let mut params = false;
            if let Some(list) = op.get_mut("parameters").and_then(Value::as_array_mut) {
                for p in list {
                    params = true;
                    match (p["in"].as_str(), p["name"].as_str()) {
                        (Some("path"), Some("task_id")) => p["schema"] = task_id_schema(),
                        (Some("query"), Some("text")) => {
                            p["schema"]["maxLength"] = json!(limits.max(Class::Text))
                        }
                        _ => {}
                    }
                }
            }
            let body = op.get("requestBody").is_some();
            let mut add = |status: &str, description: &str| {
                let responses = op["responses"].as_object_mut().expect("responses");
                responses.entry(status.to_string()).or_insert_with(|| {
                    json!({
                        "description": description,
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
                    })
                });
            };
            if params || body {
                add(
                    "400",
                    "Invalid input; `path` names the parameter or JSON path at fault",
                );
                add(
                    "413",
                    "A field, parameter or the body over its limit (docs/SERVICE.md#limits)",
                );
            }
            if body {
                add("415", "The body is not `Content-Type: application/json`");
                add(
                    "408",
                    "The body did not arrive within server.body_read_timeout_ms (`body_timeout`)",
                );
            }
            if guarded {
                add(
                    "401",
                    "Missing or wrong bearer token (when the server has one)",
                );
            }
            // Every route that evaluates events or embeds a text may meet a full model queue.
            let embeds = [
                "/v1/evaluate",
                "/v1/loops/similar",
                "/v1/hooks/claude-code",
                "/v1/hooks/gemini-cli",
                "/v1/traces",
            ];
            if embeds.contains(&path.as_str()) {
                add(
                    "429",
                    "The model is overloaded; answered at once, see Retry-After",
                );
            }
            // Any request can meet the connection layer's limits (docs/SERVICE.md#limits).
            add("414", "The request target (URI) is too long");
            add(
                "431",
                "The request line and headers exceed server.max_header_bytes",
            );
            add("500", "A bug (a handler panicked); never for bad input");
            add(
                "503",
                "Over server.request_timeout_ms, model unavailable, a store failure or a full disk (`storage_error`, with Retry-After), or the store still opening (`starting`)",
            );
        }
    }
    doc
}

/// Integers get the bounds of their Rust type, so a generated example never overflows it.
fn bound_integers(v: &mut Value) {
    match v {
        Value::Object(map) => {
            let is_integer = match map.get("type") {
                Some(Value::String(t)) => t == "integer",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
                _ => false,
            };
            if is_integer {
                let unsigned = map.get("minimum").and_then(Value::as_f64) == Some(0.0);
                let (min, max) = match (map.get("format").and_then(Value::as_str), unsigned) {
                    (Some("int64"), true) => (json!(0), json!(u64::MAX)),
                    (Some("int64"), false) => (json!(i64::MIN), json!(i64::MAX)),
                    (Some("int32"), true) => (json!(0), json!(u32::MAX)),
                    (Some("int32"), false) => (json!(i32::MIN), json!(i32::MAX)),
                    _ => (Value::Null, Value::Null),
                };
                if !min.is_null() {
                    map.entry("minimum").or_insert(min);
                    map.entry("maximum").or_insert(max);
                }
            }
            for child in map.values_mut() {
                bound_integers(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(bound_integers),
        _ => {}
    }
}

/// The document for `cfg` as committed (docs/openapi.json holds the defaults'): pretty JSON
/// with a trailing newline.
pub fn document_json(cfg: &Config) -> String {
    let mut s = serde_json::to_string_pretty(&document(cfg)).expect("the document serialises");
    s.push('\n');
    s
}
