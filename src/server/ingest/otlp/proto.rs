//! OTLP/HTTP protobuf: an `ExportTraceServiceRequest` decoded with the OpenTelemetry project's
//! generated messages, checked, and turned into [`Batch`].

use super::{Attr, Batch, Item, Span, SpanEvent};
use loopguard::event::InputError;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use prost::Message;

/// `status.code` of a span that failed.
const STATUS_ERROR: i32 = 2;

/// What counting a request found: an item past its limit (which, and where), or bytes that are
/// not protobuf.
#[derive(Debug, PartialEq)]
pub enum Refusal {
    Over(Item, String),
    Malformed(String),
}

/// The messages of an `ExportTraceServiceRequest` that hold others.
#[derive(Clone, Copy, Debug)]
enum Msg {
    Request,
    ResourceSpans,
    Resource,
    EntityRef,
    ScopeSpans,
    Scope,
    Span,
    Event,
    Link,
    KeyValue,
    AnyValue,
    ArrayValue,
    KeyValueList,
}

/// What a field of a message holds, as far as counting goes.
enum Holds {
    /// A message (repeated or not), and what each one counts as.
    Message(Msg, Option<Item>, &'static str, bool),
    /// A repeated string: each one allocated, counted as an attribute.
    Strings(&'static str),
}

impl Msg {
    fn field(self, tag: u32) -> Option<Holds> {
        use Holds::{Message as M, Strings};
        use Item::{Attribute, Block, Event};
        Some(match (self, tag) {
            (Msg::Request, 1) => M(Msg::ResourceSpans, Some(Block), "resourceSpans", true),
            (Msg::ResourceSpans, 1) => M(Msg::Resource, None, "resource", false),
            (Msg::ResourceSpans, 2) => M(Msg::ScopeSpans, Some(Block), "scopeSpans", true),
            (Msg::Resource, 1) => M(Msg::KeyValue, Some(Attribute), "attributes", true),
            (Msg::Resource, 3) => M(Msg::EntityRef, Some(Block), "entityRefs", true),
            (Msg::EntityRef, 3) => Strings("idKeys"),
            (Msg::EntityRef, 4) => Strings("descriptionKeys"),
            (Msg::ScopeSpans, 1) => M(Msg::Scope, None, "scope", false),
            (Msg::ScopeSpans, 2) => M(Msg::Span, Some(Item::Span), "spans", true),
            (Msg::Scope, 3) => M(Msg::KeyValue, Some(Attribute), "attributes", true),
            (Msg::Span, 9) => M(Msg::KeyValue, Some(Attribute), "attributes", true),
            (Msg::Span, 11) => M(Msg::Event, Some(Event), "events", true),
            (Msg::Span, 13) => M(Msg::Link, Some(Event), "links", true),
            (Msg::Event, 3) | (Msg::Link, 4) => {
                M(Msg::KeyValue, Some(Attribute), "attributes", true)
            }
            (Msg::KeyValue, 2) => M(Msg::AnyValue, None, "value", false),
            (Msg::AnyValue, 5) => M(Msg::ArrayValue, None, "arrayValue", false),
            (Msg::AnyValue, 6) => M(Msg::KeyValueList, None, "kvlistValue", false),
            (Msg::ArrayValue, 1) => M(Msg::AnyValue, Some(Attribute), "values", true),
            (Msg::KeyValueList, 1) => M(Msg::KeyValue, Some(Attribute), "values", true),
            _ => return None,
        })
    }
}

/// Nesting past this is refused (prost's own recursion limit is 100).
const MAX_DEPTH: usize = 100;

/// Count what decoding `bytes` would build — every span, attribute (nested values and
/// repeated strings included), event or link, resource, scope and entity block — without
/// building any of it, and stop at the first past its limit (`limits`, by [`Item`]). Fields
/// loopguard does not know are skipped as prost skips them. Bytes that are not protobuf are
/// refused here too: nothing of an unchecked body reaches the decoder.
/// `left` is what is left of each limit, decreased by what was counted.
pub fn count(bytes: &[u8], left: &mut [usize; 4]) -> Result<(), Refusal> {
    let mut path = Vec::new();
    walk(bytes, Msg::Request, left, &mut path)
}

fn render(path: &[(&'static str, Option<usize>)]) -> String {
    let mut out = String::new();
    for (name, index) in path {
        if !out.is_empty() {
            out.push('.');
        }
        out.push_str(name);
        if let Some(i) = index {
            out.push_str(&format!("[{i}]"));
        }
    }
    if out.is_empty() {
        ".".into()
    } else {
        out
    }
}

fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

fn walk(
    bytes: &[u8],
    msg: Msg,
    left: &mut [usize; 4],
    path: &mut Vec<(&'static str, Option<usize>)>,
) -> Result<(), Refusal> {
    let malformed = |path: &[(&'static str, Option<usize>)], why: &str| {
        Refusal::Malformed(format!("{why} at {}", render(path)))
    };
    if path.len() > MAX_DEPTH {
        return Err(malformed(path, "nested too deep"));
    }
    // Occurrences of each repeated field so far, for the paths.
    let mut seen: Vec<(u32, usize)> = Vec::new();
    let mut at = 0;
    let mut groups: Vec<u32> = Vec::new();
    while at < bytes.len() {
        let key = varint(bytes, &mut at).ok_or_else(|| malformed(path, "a truncated key"))?;
        let (tag, wire) = ((key >> 3) as u32, key & 7);
        if tag == 0 {
            return Err(malformed(path, "a field numbered 0"));
        }
        let len = match wire {
            0 => {
                varint(bytes, &mut at).ok_or_else(|| malformed(path, "a truncated varint"))?;
                continue;
            }
            1 => 8,
            5 => 4,
            2 => varint(bytes, &mut at).ok_or_else(|| malformed(path, "a truncated length"))?
                as usize,
            3 => {
                // A group (deprecated; only an unknown field can be one): skipped to its end.
                groups.push(tag);
                continue;
            }
            4 => {
                if groups.pop() != Some(tag) {
                    return Err(malformed(path, "a group end without its start"));
                }
                continue;
            }
            _ => return Err(malformed(path, "an invalid wire type")),
        };
        let end = at
            .checked_add(len)
            .filter(|e| *e <= bytes.len())
            .ok_or_else(|| malformed(path, "a field past the end of its message"))?;
        let inner = &bytes[at..end];
        at = end;
        if !groups.is_empty() {
            continue;
        }
        let Some(holds) = msg.field(tag) else {
            continue;
        };
        if wire != 2 {
            return Err(malformed(path, "a message field of another wire type"));
        }
        let n = match seen.iter_mut().find(|(t, _)| *t == tag) {
            Some((_, n)) => {
                *n += 1;
                *n - 1
            }
            None => {
                seen.push((tag, 1));
                0
            }
        };
        let (item, name, index, next) = match holds {
            Holds::Message(next, item, name, repeated) => {
                (item, name, repeated.then_some(n), Some(next))
            }
            Holds::Strings(name) => (Some(Item::Attribute), name, Some(n), None),
        };
        path.push((name, index));
        if let Some(item) = item {
            let left = &mut left[item as usize];
            *left = left
                .checked_sub(1)
                .ok_or_else(|| Refusal::Over(item, render(path)))?;
        }
        if let Some(next) = next {
            walk(inner, next, left, path)?;
        }
        path.pop();
    }
    if !groups.is_empty() {
        return Err(malformed(path, "a group without its end"));
    }
    Ok(())
}

pub fn decode(bytes: &[u8]) -> Result<Batch, InputError> {
    let req = ExportTraceServiceRequest::decode(bytes).map_err(|e| {
        InputError::new(
            ".",
            format!("not an OTLP ExportTraceServiceRequest in protobuf: {e}"),
        )
    })?;
    let mut batch = Batch::default();
    for (i, rs) in req.resource_spans.into_iter().enumerate() {
        let resource = batch.resources.len();
        batch
            .resources
            .push(attrs(rs.resource.map(|r| r.attributes).unwrap_or_default()));
        for (j, ss) in rs.scope_spans.into_iter().enumerate() {
            for (k, s) in ss.spans.into_iter().enumerate() {
                let at =
                    |field: &str| format!("resourceSpans[{i}].scopeSpans[{j}].spans[{k}].{field}");
                if s.trace_id.len() != 16 {
                    return Err(InputError::new(
                        at("traceId"),
                        format!("a trace id is 16 bytes, got {}", s.trace_id.len()),
                    ));
                }
                for (field, id) in [("spanId", &s.span_id), ("parentSpanId", &s.parent_span_id)] {
                    if !(id.is_empty() || id.len() == 8) {
                        return Err(InputError::new(
                            at(field),
                            format!("a span id is 8 bytes (or none), got {}", id.len()),
                        ));
                    }
                }
                let status = s.status.unwrap_or_default();
                batch.spans.push(Span {
                    trace_id: hex::encode(&s.trace_id),
                    name: s.name,
                    start_ns: s.start_time_unix_nano,
                    end_ns: s.end_time_unix_nano,
                    attrs: attrs(s.attributes),
                    events: s
                        .events
                        .into_iter()
                        .map(|e| SpanEvent {
                            name: e.name,
                            attrs: attrs(e.attributes),
                        })
                        .collect(),
                    error: status.code == STATUS_ERROR,
                    status_message: status.message,
                    resource,
                });
            }
        }
    }
    Ok(batch)
}

fn attrs(kvs: Vec<KeyValue>) -> Vec<(String, Attr)> {
    kvs.into_iter().map(|kv| (kv.key, any(kv.value))).collect()
}

fn any(v: Option<AnyValue>) -> Attr {
    use any_value::Value as V;
    match v.and_then(|v| v.value) {
        None => Attr::Empty,
        Some(V::StringValue(s)) => Attr::Str(s),
        Some(V::BoolValue(b)) => Attr::Bool(b),
        Some(V::IntValue(i)) => Attr::Int(i),
        Some(V::DoubleValue(d)) => Attr::Double(d),
        Some(V::BytesValue(b)) => Attr::Bytes(b.len()),
        Some(V::ArrayValue(a)) => Attr::Array(a.values.into_iter().map(|v| any(Some(v))).collect()),
        Some(V::KvlistValue(l)) => Attr::Map(attrs(l.values)),
        // A profiling-only reference into a string table trace requests do not have.
        Some(V::StringValueStrindex(_)) => Attr::Empty,
    }
}

/// The answer in protobuf: empty, or the spans whose events failed.
pub fn response(rejected: u64, message: String) -> Vec<u8> {
    ExportTraceServiceResponse {
        partial_success: (rejected > 0).then_some(ExportTracePartialSuccess {
            rejected_spans: rejected as i64,
            error_message: message,
        }),
    }
    .encode_to_vec()
}

#[cfg(test)]
pub(super) fn encode(req: &ExportTraceServiceRequest) -> Vec<u8> {
    req.encode_to_vec()
}
