//! OTLP/HTTP protobuf: an `ExportTraceServiceRequest` decoded with the OpenTelemetry project's
//! generated messages, checked, and turned into [`Batch`].

use super::{Attr, Batch, Span, SpanEvent};
use loopguard::event::InputError;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use prost::Message;

/// `status.code` of a span that failed.
const STATUS_ERROR: i32 = 2;

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
