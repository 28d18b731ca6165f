//! Limits on what one event may carry, checked before parsing into typed events so the error
//! names the JSON path at fault: nesting depth and the size of each text field.

use super::error::ApiError;
use serde_json::Value;

/// The deepest nesting in `v`, and the path to the first place it exceeds `max`, if any.
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

fn text_len(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len(),
        Value::Null => 0,
        other => other.to_string().len(),
    }
}

/// Check one event (an envelope as JSON) against the limits. `prefix` is its place in a batch
/// (`[3]`), empty for a single event.
pub fn check_event(
    v: &Value,
    prefix: &str,
    max_depth: usize,
    max_text: usize,
) -> Result<(), ApiError> {
    let at = |p: &str| {
        if prefix.is_empty() {
            p.to_string()
        } else {
            format!("{prefix}.{p}")
        }
    };
    let mut path = Vec::new();
    if let Some(p) = too_deep(v, max_depth, 0, &mut path) {
        return Err(ApiError::bad_request(
            "too_deep",
            format!("JSON nested deeper than {max_depth} levels"),
        )
        .at(if prefix.is_empty() {
            p
        } else {
            format!("{prefix}.{p}")
        }));
    }
    let Some(event) = v.get("event") else {
        return Ok(());
    };
    for field in [
        "message",
        "stack_trace",
        "text",
        "request",
        "note",
        "reason",
        "args",
    ] {
        if let Some(f) = event.get(field) {
            let n = text_len(f);
            if n > max_text {
                return Err(field_too_large(at(&format!("event.{field}")), n, max_text));
            }
        }
    }
    if let Some(out) = event.get("result").and_then(|r| r.get("output")) {
        let n = text_len(out);
        if n > max_text {
            return Err(field_too_large(at("event.result.output"), n, max_text));
        }
    }
    Ok(())
}

fn field_too_large(path: String, n: usize, max: usize) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::PAYLOAD_TOO_LARGE,
        "field_too_large",
        format!("is {n} bytes; the limit is {max} (server.max_text_bytes)"),
    )
    .at(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_the_path_of_excess_depth() {
        let v = json!({"task_id": "t", "event": {"type": "tool_call", "tool": "x", "args": {"a": {"b": [{"c": 1}]}}}});
        assert!(check_event(&v, "", 10, 1000).is_ok());
        let err = check_event(&v, "", 3, 1000).unwrap_err();
        assert_eq!(err.body.code, "too_deep");
        assert_eq!(err.body.path.as_deref(), Some("event.args.a.b"));
        let err = check_event(&v, "[2]", 3, 1000).unwrap_err();
        assert_eq!(err.body.path.as_deref(), Some("[2].event.args.a.b"));
    }

    #[test]
    fn names_the_oversized_field() {
        let big = "x".repeat(2000);
        let v = json!({"task_id": "t", "event": {"type": "failure", "message": big}});
        let err = check_event(&v, "", 32, 1000).unwrap_err();
        assert_eq!(err.body.code, "field_too_large");
        assert_eq!(err.body.path.as_deref(), Some("event.message"));
        let v = json!({"task_id": "t", "event": {"type": "tool_call", "tool": "x", "args": {}, "result": {"output": {"k": big}}}});
        let err = check_event(&v, "", 32, 1000).unwrap_err();
        assert_eq!(err.body.path.as_deref(), Some("event.result.output"));
    }
}
