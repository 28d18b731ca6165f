//! OpenInference spans (Arize Phoenix; the instrumentations of the OpenAI Agents SDK,
//! LlamaIndex, DSPy, CrewAI, ...): spans with `openinference.span.kind` that follow
//! OpenInference's semantic conventions instead of GenAI's.
//!
//! | `openinference.span.kind` | event |
//! |---|---|
//! | `TOOL` | `tool_call`: `tool.name` (else the span's name); the arguments from `input.value` (JSON in a string is parsed), else `tool.parameters`; the result from `output.value`; failed when the span's status is an error or it has an `exception` event (without an output, the status message or the exception is the output) |
//! | `LLM` | `response`: the text of `llm.output_messages.N.message.content` or of the text parts `llm.output_messages.N.message.contents.M.message_content.text`, in order; a turn that only called tools has no text: nothing. A failed one is a `failure` |
//! | `AGENT`, `CHAIN` (or any other kind) that failed | `failure` (the exception's type as its error type) |
//! | anything else | ignored |
//!
//! The task is the value of `otlp.task_attribute` when set and present, else the span's (or its
//! resource's) `session.id` (OpenInference's conversation), else the trace id. The agent is
//! `agent.name` (an `AGENT` span's), else as for GenAI spans (`gen_ai.agent.name`, the
//! resource's `service.name`). A span that is also a GenAI span is read as GenAI's only.
//!
//! The attributes are the request's attributes: a malformed value is refused while the request
//! is decoded (`400 invalid_otlp` with its path), as for every span, before anything is read
//! here.

use super::{Attr, Span};
use loopguard::event::{Envelope, Event, Failure, Response, ToolCall, ToolResult};
use serde_json::Value;

/// The attribute that makes a span an OpenInference span.
pub const SPAN_KIND: &str = "openinference.span.kind";
/// OpenInference's conversation id: the task when there is one.
const SESSION_ID: &str = "session.id";
const OUTPUT_MESSAGES: &str = "llm.output_messages.";

/// The envelope an OpenInference span becomes, and its metrics label; `None` for a span of
/// another convention (or a GenAI one) and for a span OpenInference does not make an event of.
/// `to_json` reads an attribute's value as JSON (`Attr::to_json`).
pub fn envelope(
    s: &Span,
    resource: &[(String, Attr)],
    task_attribute: &str,
    to_json: &mut dyn FnMut(&Attr) -> Value,
) -> Option<(Envelope, &'static str)> {
    if super::kind_of(s).is_some() {
        return None;
    }
    let (event, label) = event_of(s, to_json)?;
    let env = Envelope {
        agent_id: s
            .text("agent.name")
            .map(str::to_string)
            .or_else(|| super::agent_of(s, resource)),
        ts: super::span_ts(s.end_ns),
        ..Envelope::bare(task_of(s, resource, task_attribute), event)
    };
    Some((env, label))
}

/// `otlp.task_attribute` when set and present, else `session.id`, else the trace id.
fn task_of(s: &Span, resource: &[(String, Attr)], task_attribute: &str) -> String {
    let configured = super::task_of(s, resource, task_attribute);
    if configured != s.trace_id {
        return configured;
    }
    super::task_of(s, resource, SESSION_ID)
}

/// Failed: an error status (or `error.type`), or an `exception` event.
fn failed(s: &Span) -> bool {
    s.failed() || s.events.iter().any(|e| e.name == "exception")
}

fn event_of(s: &Span, to_json: &mut dyn FnMut(&Attr) -> Value) -> Option<(Event, &'static str)> {
    let kind = s.text(SPAN_KIND)?;
    let failed = failed(s);
    if kind.eq_ignore_ascii_case("TOOL") {
        let tool = s.text("tool.name").unwrap_or(&s.name).to_string();
        let args = s
            .attr("input.value")
            .or_else(|| s.attr("tool.parameters"))
            .map(&mut *to_json)
            .unwrap_or(Value::Null);
        let output = s
            .attr("output.value")
            .map(&mut *to_json)
            .or_else(|| failed.then(|| s.error_text().map(Value::String)).flatten());
        let result = (output.is_some() || failed).then(|| ToolResult {
            output: output.unwrap_or(Value::Null),
            is_error: Some(failed),
            exit_code: None,
        });
        return Some((
            Event::ToolCall(ToolCall { tool, args, result }),
            "tool_call",
        ));
    }
    if failed {
        let exception_type = s
            .events
            .iter()
            .filter(|e| e.name == "exception")
            .flat_map(|e| &e.attrs)
            .find(|(k, v)| k == "exception.type" && matches!(v, Attr::Str(t) if !t.is_empty()))
            .and_then(|(_, v)| v.as_str());
        return Some((
            Event::Failure(Failure {
                message: s
                    .error_text()
                    .unwrap_or_else(|| format!("{} failed", s.name)),
                error_type: exception_type
                    .or_else(|| s.text("error.type"))
                    .map(str::to_string),
                location: None,
                stack_trace: None,
            }),
            "failure",
        ));
    }
    if kind.eq_ignore_ascii_case("LLM") {
        let text = output_text(s)?;
        return Some((Event::Response(Response { text, chunk: false }), "response"));
    }
    None
}

/// The text of an LLM span's output messages, in order: each message's
/// `llm.output_messages.N.message.content`, or the text parts of
/// `llm.output_messages.N.message.contents.M.message_content.*` (a part whose `type` is not
/// `text`, an image say, is left out).
fn output_text(s: &Span) -> Option<String> {
    // (message, part, text); a whole message's content is its part 0.
    let mut parts: Vec<(u64, u64, &str)> = Vec::new();
    for (key, value) in &s.attrs {
        let Some(rest) = key.strip_prefix(OUTPUT_MESSAGES) else {
            continue;
        };
        let Some((n, field)) = rest.split_once('.') else {
            continue;
        };
        let (Ok(n), Some(text)) = (n.parse::<u64>(), value.as_str()) else {
            continue;
        };
        if field == "message.content" {
            parts.push((n, 0, text));
        } else if let Some(part) = field
            .strip_prefix("message.contents.")
            .and_then(|p| p.strip_suffix(".message_content.text"))
        {
            let Ok(m) = part.parse::<u64>() else { continue };
            let kind = format!("{OUTPUT_MESSAGES}{n}.message.contents.{m}.message_content.type");
            if s.text(&kind).is_none_or(|t| t == "text") {
                parts.push((n, m, text));
            }
        }
    }
    parts.sort();
    let text = parts
        .into_iter()
        .map(|(_, _, t)| t)
        .filter(|t| !t.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    (!text.trim().is_empty()).then_some(text)
}

#[cfg(test)]
mod tests;
