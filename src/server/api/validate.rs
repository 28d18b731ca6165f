//! Limits on what a request body may carry, checked on the parsed JSON before it becomes typed
//! events, so the error names the JSON path at fault: nesting depth, and the length of every
//! field. [`FIELDS`] is the one list of bounded fields: the checks here and the `maxLength`s in
//! the OpenAPI document both come from it, so they cannot disagree.

use crate::server::http::error::ApiError;
use crate::server::http::limits::{Class, Limits};
use axum::http::StatusCode;
use serde_json::Value;

/// Every bounded field of every request body: (schema, field, class). Nested objects are
/// reached through [`children`]; an event is checked as the schema of its `type`.
pub const FIELDS: &[(&str, &str, Class)] = &[
    ("Envelope", "task_id", Class::Id),
    ("Envelope", "parent_task_id", Class::Id),
    ("Envelope", "agent_id", Class::Name),
    ("Envelope", "step", Class::Name),
    ("Envelope", "goal", Class::Text),
    ("Failure", "message", Class::Text),
    ("Failure", "error_type", Class::Name),
    ("Failure", "location", Class::Name),
    ("Failure", "stack_trace", Class::Text),
    ("ToolCall", "tool", Class::Name),
    ("ToolCall", "args", Class::Json),
    ("ToolResult", "output", Class::Json),
    ("Response", "text", Class::Text),
    ("Collaboration", "from_agent", Class::Name),
    ("Collaboration", "to_agent", Class::Name),
    ("Collaboration", "request", Class::Text),
    ("Transition", "from", Class::Name),
    ("Transition", "to", Class::Name),
    ("Transition", "reason", Class::Text),
    ("Progress", "note", Class::Text),
    ("Outcome", "note", Class::Text),
    ("ResetRequest", "by", Class::Name),
    ("ResetRequest", "note", Class::Text),
    ("FeedbackRequest", "task_id", Class::Id),
    ("FeedbackRequest", "note", Class::Text),
];

/// The schema of an event of this `type`.
fn event_schema(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "failure" => "Failure",
        "tool_call" => "ToolCall",
        "response" => "Response",
        "collaboration" => "Collaboration",
        "transition" => "Transition",
        "progress" => "Progress",
        "outcome" => "Outcome",
        _ => return None,
    })
}

/// Objects nested in an object of `schema`: (field, schema of the field's value).
fn children(
    schema: &str,
    object: &serde_json::Map<String, Value>,
) -> Vec<(&'static str, &'static str)> {
    match schema {
        "Envelope" => object
            .get("event")
            .and_then(|e| e.get("type"))
            .and_then(Value::as_str)
            .and_then(event_schema)
            .map(|s| vec![("event", s)])
            .unwrap_or_default(),
        "ToolCall" => vec![("result", "ToolResult")],
        _ => Vec::new(),
    }
}

/// The path at which `v` nests deeper than `max`, if it does.
fn too_deep(v: &Value, max: usize, depth: usize, path: &mut Vec<String>) -> Option<String> {
    if depth > max {
        return Some(join(path));
    }
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                path.push(format!(".{k}"));
                if let Some(p) = too_deep(child, max, depth + 1, path) {
                    return Some(p);
                }
                path.pop();
            }
            None
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                path.push(format!("[{i}]"));
                if let Some(p) = too_deep(child, max, depth + 1, path) {
                    return Some(p);
                }
                path.pop();
            }
            None
        }
        _ => None,
    }
}

fn join(path: &[String]) -> String {
    let s: String = path.concat();
    let s = s.strip_prefix('.').unwrap_or(&s).to_string();
    if s.is_empty() {
        ".".into()
    } else {
        s
    }
}

fn under(prefix: &str, field: &str) -> String {
    if prefix.is_empty() {
        field.to_string()
    } else if field.is_empty() {
        prefix.to_string()
    } else {
        format!("{prefix}.{field}")
    }
}

/// The length of a field's value as its limit counts it; `None` for a value of the wrong type
/// (the parser reports that, with its own message).
fn length(v: &Value, class: Class) -> Option<usize> {
    match (v, class) {
        (Value::Null, _) => Some(0),
        (Value::String(s), _) => Some(s.chars().count()),
        (other, Class::Json) => Some(other.to_string().chars().count()),
        _ => None,
    }
}

/// Check a body that is an object of `schema` (`Envelope`, `ResetRequest`, `FeedbackRequest`)
/// against the limits. `prefix` is its place in a batch (`[3]`), empty for a single body.
pub fn check(v: &Value, schema: &str, prefix: &str, limits: &Limits) -> Result<(), ApiError> {
    let mut path = Vec::new();
    if let Some(p) = too_deep(v, limits.depth, 0, &mut path) {
        let p = if p == "." { String::new() } else { p };
        return Err(ApiError::bad_request(
            "too_deep",
            format!(
                "JSON nested deeper than {} levels (server.max_json_depth)",
                limits.depth
            ),
        )
        .at(match under(prefix, &p) {
            s if s.is_empty() => ".".into(),
            s => s,
        }));
    }
    check_fields(v, schema, prefix, limits)
}

/// serde reads a struct from an array too (`["success"]` as a reset, `"result": []` as an empty
/// tool result): positional forms the documented contract does not have. Objects must be
/// objects.
fn require_object(v: &Value, at: &str) -> Result<(), ApiError> {
    let got = match v {
        Value::Object(_) => return Ok(()),
        Value::Array(_) => "an array",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        Value::Null => "null",
    };
    Err(ApiError::bad_request(
        "invalid_event",
        format!("expected a JSON object, got {got}"),
    )
    .at(if at.is_empty() { "." } else { at }))
}

fn check_fields(v: &Value, schema: &str, at: &str, limits: &Limits) -> Result<(), ApiError> {
    require_object(v, at)?;
    let Some(object) = v.as_object() else {
        return Ok(());
    };
    for (_, field, class) in FIELDS.iter().filter(|(s, _, _)| *s == schema) {
        let Some(value) = object.get(*field) else {
            continue;
        };
        let max = limits.max(*class);
        if let Some(n) = length(value, *class).filter(|n| *n > max) {
            let what = if *class == Class::Json {
                "characters as JSON text"
            } else {
                "characters"
            };
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "field_too_large",
                format!(
                    "is {n} {what}; the limit is {max} ({})",
                    Limits::key(*class)
                ),
            )
            .at(under(at, field)));
        }
    }
    if schema == "Envelope" {
        if let Some(event) = object.get("event") {
            require_object(event, &under(at, "event"))?;
        }
    }
    for (field, child) in children(schema, object) {
        match object.get(field) {
            None | Some(Value::Null) => {}
            Some(value) => check_fields(value, child, &under(at, field), limits)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LIMITS: Limits = Limits {
        name: 300,
        text: 1000,
        depth: 32,
    };

    #[test]
    fn names_the_path_of_excess_depth() {
        let v = json!({"task_id": "t", "event": {"type": "tool_call", "tool": "x", "args": {"a": {"b": [{"c": 1}]}}}});
        assert!(check(&v, "Envelope", "", &LIMITS).is_ok());
        let shallow = Limits { depth: 3, ..LIMITS };
        let err = check(&v, "Envelope", "", &shallow).unwrap_err();
        assert_eq!(err.body.code, "too_deep");
        assert_eq!(err.body.path.as_deref(), Some("event.args.a.b"));
        let err = check(&v, "Envelope", "[2]", &shallow).unwrap_err();
        assert_eq!(err.body.path.as_deref(), Some("[2].event.args.a.b"));
    }

    #[test]
    fn names_the_oversized_field_of_every_class() {
        let big = |n: usize| "é".repeat(n);
        let cases = [
            (
                json!({"task_id": big(257), "event": {"type": "response", "text": "x"}}),
                "task_id",
                "task ids",
            ),
            (
                json!({"task_id": "t", "step": big(301), "event": {"type": "response", "text": "x"}}),
                "step",
                "max_name_chars",
            ),
            (
                json!({"task_id": "t", "event": {"type": "failure", "message": big(1001)}}),
                "event.message",
                "max_text_chars",
            ),
            (
                json!({"task_id": "t", "event": {"type": "transition", "from": "a", "to": big(301)}}),
                "event.to",
                "max_name_chars",
            ),
            (
                json!({"task_id": "t", "event": {"type": "tool_call", "tool": "x", "args": {"k": big(1000)}}}),
                "event.args",
                "as JSON text",
            ),
            (
                json!({"task_id": "t", "event": {"type": "tool_call", "tool": "x", "result": {"output": big(1001)}}}),
                "event.result.output",
                "max_text_chars",
            ),
        ];
        for (v, path, fragment) in cases {
            let err = check(&v, "Envelope", "", &LIMITS).unwrap_err();
            assert_eq!(err.status, StatusCode::PAYLOAD_TOO_LARGE, "{path}");
            assert_eq!(err.body.code, "field_too_large");
            assert_eq!(err.body.path.as_deref(), Some(path));
            assert!(
                err.body.message.contains(fragment),
                "{path}: {}",
                err.body.message
            );
        }
        // Exactly at the limit, in characters (each `é` is two bytes), passes.
        let v = json!({"task_id": big(256), "step": big(300), "event": {"type": "failure", "message": big(1000)}});
        assert!(check(&v, "Envelope", "", &LIMITS).is_ok());
        let v = json!({"reason": "success", "by": big(301)});
        let err = check(&v, "ResetRequest", "", &LIMITS).unwrap_err();
        assert_eq!(err.body.path.as_deref(), Some("by"));
        let v = json!({"task_id": "t", "event": {"type": "response", "text": big(1001)}});
        let err = check(&v, "Envelope", "[4]", &LIMITS).unwrap_err();
        assert_eq!(err.body.path.as_deref(), Some("[4].event.text"));
    }

    #[test]
    fn objects_must_be_objects() {
        let cases = [
            (
                json!(["t", null, null, null, null, null, {"type": "progress"}]),
                "Envelope",
                "[0]",
                "[0]",
            ),
            (
                json!({"task_id": "t", "event": ["progress"]}),
                "Envelope",
                "",
                "event",
            ),
            (
                json!({"task_id": "t", "event": {"type": "tool_call", "tool": "x", "result": []}}),
                "Envelope",
                "",
                "event.result",
            ),
            (json!(["success"]), "ResetRequest", "", "."),
        ];
        for (v, schema, prefix, path) in cases {
            let err = check(&v, schema, prefix, &LIMITS).unwrap_err();
            assert_eq!(err.body.code, "invalid_event");
            assert_eq!(err.body.path.as_deref(), Some(path), "{v}");
            assert!(
                err.body.message.contains("got an array"),
                "{}",
                err.body.message
            );
        }
        let v =
            json!({"task_id": "t", "event": {"type": "tool_call", "tool": "x", "result": null}});
        assert!(check(&v, "Envelope", "", &LIMITS).is_ok());
    }

    #[test]
    fn service_md_lists_every_bounded_field() {
        let doc = std::fs::read_to_string("docs/SERVICE.md").unwrap();
        for (schema, field, _) in FIELDS {
            let name = format!("`{schema}.{field}`");
            assert!(
                doc.contains(&name),
                "docs/SERVICE.md#limits does not list {name}"
            );
        }
    }

    #[test]
    fn every_event_type_has_a_schema() {
        for kind in [
            "failure",
            "tool_call",
            "response",
            "collaboration",
            "transition",
            "progress",
            "outcome",
        ] {
            let schema = event_schema(kind).unwrap();
            assert!(FIELDS.iter().any(|(s, _, _)| *s == schema), "{kind}");
        }
    }
}
