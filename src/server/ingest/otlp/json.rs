//! OTLP/HTTP JSON, read the way the OpenTelemetry Collector's receiver reads it: keys in
//! lowerCamelCase or as the protobuf field names (`traceId` or `trace_id`), trace and span ids
//! in hex, 64-bit integers as numbers or decimal strings, enums as numbers or names, unknown
//! keys ignored. Every problem names its JSON path
//! (`resourceSpans[0].scopeSpans[1].spans[2].traceId`).

use super::{Attr, Batch, Item, Span, SpanEvent};
use loopguard::event::InputError;
use loopguard::json::{Field, Items, Shape};
use serde_json::{Map, Value};

type Obj = Map<String, Value>;

/// The request's shape as [`decode`] reads it, for [`loopguard::json::from_str_shaped`]: the
/// keys it reads (each field under either spelling, given once), the arrays whose items count
/// against `otlp.max_*`, and nothing else built: other keys are skipped unread, and a value of
/// the wrong kind is kept empty (the reader then says what it expected).
#[derive(Clone, Copy, Debug)]
pub enum Otlp {
    Request,
    ResourceSpans,
    Resource,
    ScopeSpans,
    Span,
    Event,
    Status,
    KeyValue,
    AnyValue,
    ArrayValue,
    KvListValue,
    /// A list of `item`, each counted as `count`.
    List(&'static Otlp, Item),
    Scalar,
}

/// The one field `camel` or `snake` names, read as `shape`.
fn named(key: &str, camel: &'static str, snake: &str, shape: Otlp) -> Option<Field<Otlp>> {
    (key == camel || key == snake).then_some(Field::Named(shape, camel))
}

impl Shape for Otlp {
    fn field(self, key: &str) -> Field<Otlp> {
        use Otlp::*;
        const RESOURCE_SPANS: Otlp = ResourceSpans;
        const SCOPE_SPANS: Otlp = ScopeSpans;
        const SPAN: Otlp = Span;
        const EVENT: Otlp = Event;
        const KEY_VALUE: Otlp = KeyValue;
        const ANY_VALUE: Otlp = AnyValue;
        const ATTRIBUTES: Otlp = List(&KEY_VALUE, Item::Attribute);
        let fields: &[(&'static str, &str, Otlp)] = match self {
            Request => &[(
                "resourceSpans",
                "resource_spans",
                List(&RESOURCE_SPANS, Item::Block),
            )],
            ResourceSpans => &[
                ("resource", "resource", Resource),
                ("scopeSpans", "scope_spans", List(&SCOPE_SPANS, Item::Block)),
            ],
            Resource => &[("attributes", "attributes", ATTRIBUTES)],
            ScopeSpans => &[("spans", "spans", List(&SPAN, Item::Span))],
            Span => &[
                ("traceId", "trace_id", Scalar),
                ("spanId", "span_id", Scalar),
                ("parentSpanId", "parent_span_id", Scalar),
                ("name", "name", Scalar),
                ("kind", "kind", Scalar),
                ("startTimeUnixNano", "start_time_unix_nano", Scalar),
                ("endTimeUnixNano", "end_time_unix_nano", Scalar),
                ("attributes", "attributes", ATTRIBUTES),
                ("events", "events", List(&EVENT, Item::Event)),
                ("status", "status", Status),
            ],
            Event => &[
                ("timeUnixNano", "time_unix_nano", Scalar),
                ("name", "name", Scalar),
                ("attributes", "attributes", ATTRIBUTES),
            ],
            Status => &[("code", "code", Scalar), ("message", "message", Scalar)],
            KeyValue => &[("key", "key", Scalar), ("value", "value", AnyValue)],
            AnyValue => &[
                ("stringValue", "string_value", Scalar),
                ("boolValue", "bool_value", Scalar),
                ("intValue", "int_value", Scalar),
                ("doubleValue", "double_value", Scalar),
                ("arrayValue", "array_value", ArrayValue),
                ("kvlistValue", "kvlist_value", KvListValue),
                ("bytesValue", "bytes_value", Scalar),
            ],
            ArrayValue => &[("values", "values", List(&ANY_VALUE, Item::Attribute))],
            KvListValue => &[("values", "values", ATTRIBUTES)],
            List(..) | Scalar => &[],
        };
        fields
            .iter()
            .find_map(|(camel, snake, shape)| named(key, camel, snake, *shape))
            .unwrap_or(Field::Skip)
    }

    fn items(self) -> Items<Otlp> {
        match self {
            Otlp::List(item, count) => Items::Counted(*item, count as usize),
            _ => Items::Skip,
        }
    }

    fn converted(self) -> bool {
        matches!(self, Otlp::KeyValue | Otlp::AnyValue)
    }
}

/// `path.key`, or `key` at the top.
fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// `obj[camel]`, else `obj[snake]`.
fn field<'a>(obj: &'a Obj, camel: &str, snake: &str) -> Option<&'a Value> {
    obj.get(camel)
        .or_else(|| obj.get(snake))
        .filter(|v| !v.is_null())
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn expected(path: &str, what: &str, got: &Value) -> InputError {
    InputError::new(path, format!("expected {what}, got {}", kind_of(got)))
}

fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Obj, InputError> {
    v.as_object().ok_or_else(|| expected(path, "an object", v))
}

/// The items of an optional array field (none when absent).
fn list<'a>(obj: &'a Obj, camel: &str, snake: &str, path: &str) -> Result<&'a [Value], InputError> {
    match field(obj, camel, snake) {
        None => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(expected(&join(path, camel), "an array", other)),
    }
}

fn string(obj: &Obj, camel: &str, snake: &str, path: &str) -> Result<String, InputError> {
    match field(obj, camel, snake) {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(expected(&join(path, camel), "a string", other)),
    }
}

/// A string of at most `max_digits` digits (after an optional `-` where `signed`), as the
/// number it spells, saturated to 64 bits: proto3's JSON mapping writes 64-bit integers so.
fn digits(s: &str, max_digits: usize, signed: bool) -> Option<i128> {
    let body = if signed {
        s.strip_prefix('-').unwrap_or(s)
    } else {
        s
    };
    if body.is_empty() || body.len() > max_digits || !body.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<i128>().ok()
}

/// A JSON number that is a whole number, saturated past 64 bits (such a number arrives as a
/// float); `None` for a fraction.
fn whole(n: &serde_json::Number) -> Option<i128> {
    if let Some(i) = n.as_i64() {
        return Some(i128::from(i));
    }
    if let Some(u) = n.as_u64() {
        return Some(i128::from(u));
    }
    let f = n.as_f64()?;
    (f.fract() == 0.0).then(|| f.clamp(-1e30, 1e30) as i128)
}

/// A 64-bit unsigned integer: a number, or a string of up to 20 digits.
fn unsigned(obj: &Obj, camel: &str, snake: &str, path: &str) -> Result<u64, InputError> {
    let at = || join(path, camel);
    match field(obj, camel, snake) {
        None => Ok(0),
        Some(Value::Number(n)) => whole(n)
            .filter(|n| *n >= 0)
            .map(|n| n.min(i128::from(u64::MAX)) as u64)
            .ok_or_else(|| {
                InputError::new(
                    at(),
                    format!("expected an unsigned 64-bit integer, got {n}"),
                )
            }),
        Some(Value::String(s)) => digits(s, 20, false)
            .map(|n| n.min(i128::from(u64::MAX)) as u64)
            .ok_or_else(|| {
                InputError::new(
                    at(),
                    format!("expected a string of up to 20 digits, got {s:?}"),
                )
            }),
        Some(other) => Err(expected(&at(), "an integer or a string of digits", other)),
    }
}

/// An id of `bytes` bytes in hex; `required` refuses an empty one.
fn id(
    obj: &Obj,
    camel: &str,
    snake: &str,
    path: &str,
    bytes: usize,
    required: bool,
) -> Result<String, InputError> {
    let at = join(path, camel);
    let s = match field(obj, camel, snake) {
        None => String::new(),
        Some(Value::String(s)) => s.to_ascii_lowercase(),
        Some(other) => return Err(expected(&at, "a hex string", other)),
    };
    if s.is_empty() && !required {
        return Ok(s);
    }
    if s.len() != bytes * 2 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(InputError::new(
            at,
            format!(
                "expected {} hex digits ({bytes} bytes), got {s:?}",
                bytes * 2
            ),
        ));
    }
    Ok(s)
}

/// An enum: its number, or one of its names (`STATUS_CODE_ERROR`).
fn enumeration(obj: &Obj, camel: &str, names: &[&str], path: &str) -> Result<i64, InputError> {
    let at = || join(path, camel);
    match obj.get(camel).filter(|v| !v.is_null()) {
        None => Ok(0),
        Some(Value::Number(n)) => n
            .as_i64()
            .filter(|n| (0..names.len() as i64).contains(n))
            .ok_or_else(|| {
                InputError::new(at(), format!("expected 0..{}, got {n}", names.len() - 1))
            }),
        Some(Value::String(s)) => names
            .iter()
            .position(|name| name == s)
            .map(|i| i as i64)
            .ok_or_else(|| {
                InputError::new(
                    at(),
                    format!("expected one of {}, got {s:?}", names.join(", ")),
                )
            }),
        Some(other) => Err(expected(&at(), "a number or a name", other)),
    }
}

pub const SPAN_KIND_NAMES: [&str; 6] = [
    "SPAN_KIND_UNSPECIFIED",
    "SPAN_KIND_INTERNAL",
    "SPAN_KIND_SERVER",
    "SPAN_KIND_CLIENT",
    "SPAN_KIND_PRODUCER",
    "SPAN_KIND_CONSUMER",
];
pub const STATUS_CODE_NAMES: [&str; 3] =
    ["STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"];

/// The attributes and values of a request, made as its JSON is parsed ([`convert`]): each
/// `KeyValue` and `AnyValue` object is replaced in the document by its index here, so what is
/// held while the rest is parsed is the attributes, not their JSON objects (a `KeyValue` of
/// two small objects is over a kilobyte as a tree, ~100 bytes as an attribute).
#[derive(Default)]
pub struct Made {
    key_values: Vec<Option<(String, Attr)>>,
    values: Vec<Option<Attr>>,
}

/// A placeholder's index, taken out of `made`.
fn take<T>(made: &mut [Option<T>], placeholder: &Value, path: &str) -> Result<T, InputError> {
    placeholder
        .as_u64()
        .and_then(|i| made.get_mut(i as usize))
        .and_then(Option::take)
        .ok_or_else(|| InputError::new(path, "expected an object"))
}

/// [`loopguard::json::from_str_converting`]'s conversion for OTLP: `KeyValue` and `AnyValue`
/// objects become attributes in `made`, their place in the document their index.
pub fn convert(made: &mut Made, shape: Otlp, path: &str, v: Value) -> Result<Value, InputError> {
    match shape {
        Otlp::KeyValue => {
            let kv = object(&v, path)?;
            let key = string(kv, "key", "key", path)?;
            let value = match kv.get("value").filter(|v| !v.is_null()) {
                None => Attr::Empty,
                Some(p) => take(&mut made.values, p, &format!("{path}.value"))?,
            };
            made.key_values.push(Some((key, value)));
            Ok(Value::from(made.key_values.len() - 1))
        }
        // A `null` value of a key is no value (the key's conversion reads it so).
        Otlp::AnyValue if v.is_null() => Ok(v),
        Otlp::AnyValue => {
            let a = any(&v, path, made)?;
            made.values.push(Some(a));
            Ok(Value::from(made.values.len() - 1))
        }
        _ => Ok(v),
    }
}

fn key_values(
    items: &[Value],
    path: &str,
    made: &mut Made,
) -> Result<Vec<(String, Attr)>, InputError> {
    items
        .iter()
        .enumerate()
        .map(|(i, kv)| take(&mut made.key_values, kv, &format!("{path}[{i}]")))
        .collect()
}

/// An `AnyValue`: `{"stringValue": ...}`, `{"intValue": ...}`, ...; `{}` is empty. Every value
/// given is checked; the first, in this order, is the value.
fn any(v: &Value, path: &str, made: &mut Made) -> Result<Attr, InputError> {
    let obj = object(v, path)?;
    let at = |key: &str| format!("{path}.{key}");
    let mut value = None;
    if let Some(s) = field(obj, "stringValue", "string_value") {
        let s = s
            .as_str()
            .ok_or_else(|| expected(&at("stringValue"), "a string", s))?;
        value.get_or_insert(Attr::Str(s.to_string()));
    }
    if let Some(b) = field(obj, "boolValue", "bool_value") {
        let b = b
            .as_bool()
            .ok_or_else(|| expected(&at("boolValue"), "a boolean", b))?;
        value.get_or_insert(Attr::Bool(b));
    }
    if let Some(i) = field(obj, "intValue", "int_value") {
        let parsed = match i {
            Value::Number(n) => whole(n),
            Value::String(s) => digits(s, 19, true),
            _ => None,
        }
        .map(|n| n.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64);
        let i = parsed.ok_or_else(|| {
            InputError::new(
                at("intValue"),
                format!("expected a 64-bit integer, got {i}"),
            )
        })?;
        value.get_or_insert(Attr::Int(i));
    }
    if let Some(d) = field(obj, "doubleValue", "double_value") {
        let parsed = match d {
            Value::Number(n) => n.as_f64(),
            // The three values JSON numbers cannot spell.
            Value::String(s) => match s.as_str() {
                "NaN" => Some(f64::NAN),
                "Infinity" => Some(f64::INFINITY),
                "-Infinity" => Some(f64::NEG_INFINITY),
                _ => None,
            },
            _ => None,
        };
        let d = parsed.ok_or_else(|| {
            InputError::new(at("doubleValue"), format!("expected a number, got {d}"))
        })?;
        value.get_or_insert(Attr::Double(d));
    }
    if let Some(a) = field(obj, "arrayValue", "array_value") {
        let a = object(a, &at("arrayValue"))?;
        let items = list(a, "values", "values", &at("arrayValue"))?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let at = format!("{path}.arrayValue.values[{i}]");
                if v.is_null() {
                    return Err(expected(&at, "an object", v));
                }
                take(&mut made.values, v, &at)
            })
            .collect::<Result<Vec<_>, _>>()?;
        value.get_or_insert(Attr::Array(items));
    }
    if let Some(l) = field(obj, "kvlistValue", "kvlist_value") {
        let l = object(l, &at("kvlistValue"))?;
        let values = list(l, "values", "values", &at("kvlistValue"))?;
        let kvs = key_values(values, &format!("{path}.kvlistValue.values"), made)?;
        value.get_or_insert(Attr::Map(kvs));
    }
    if let Some(b) = field(obj, "bytesValue", "bytes_value") {
        // Base64 in JSON: only its length matters (see `Attr::Bytes`).
        let s = b
            .as_str()
            .ok_or_else(|| expected(&at("bytesValue"), "a base64 string", b))?;
        let padding = s.bytes().rev().take_while(|b| *b == b'=').count();
        value.get_or_insert(Attr::Bytes((s.len() / 4 * 3).saturating_sub(padding)));
    }
    Ok(value.unwrap_or(Attr::Empty))
}

/// The request, from its document as [`convert`] left it (attributes in `made`).
pub fn decode(doc: &Value, made: &mut Made) -> Result<Batch, InputError> {
    let root = object(doc, ".")?;
    let mut batch = Batch::default();
    for (i, rs) in list(root, "resourceSpans", "resource_spans", "")?
        .iter()
        .enumerate()
    {
        let rs_at = format!("resourceSpans[{i}]");
        let rs = object(rs, &rs_at)?;
        let resource_attrs = match field(rs, "resource", "resource") {
            None => Vec::new(),
            Some(r) => {
                let r_at = format!("{rs_at}.resource");
                let r = object(r, &r_at)?;
                key_values(
                    list(r, "attributes", "attributes", &r_at)?,
                    &format!("{r_at}.attributes"),
                    made,
                )?
            }
        };
        let resource = batch.resources.len();
        batch.resources.push(resource_attrs);
        for (j, ss) in list(rs, "scopeSpans", "scope_spans", &rs_at)?
            .iter()
            .enumerate()
        {
            let ss_at = format!("{rs_at}.scopeSpans[{j}]");
            let ss = object(ss, &ss_at)?;
            for (k, s) in list(ss, "spans", "spans", &ss_at)?.iter().enumerate() {
                let at = format!("{ss_at}.spans[{k}]");
                batch
                    .spans
                    .push(span(object(s, &at)?, &at, resource, made)?);
            }
        }
    }
    Ok(batch)
}

fn span(s: &Obj, at: &str, resource: usize, made: &mut Made) -> Result<Span, InputError> {
    let trace_id = id(s, "traceId", "trace_id", at, 16, true)?;
    id(s, "spanId", "span_id", at, 8, false)?;
    id(s, "parentSpanId", "parent_span_id", at, 8, false)?;
    enumeration(s, "kind", &SPAN_KIND_NAMES, at)?;
    let (error, status_message) = match field(s, "status", "status") {
        None => (false, String::new()),
        Some(st) => {
            let st_at = format!("{at}.status");
            let st = object(st, &st_at)?;
            let code = enumeration(st, "code", &STATUS_CODE_NAMES, &st_at)?;
            (code == 2, string(st, "message", "message", &st_at)?)
        }
    };
    let mut events = Vec::new();
    for (i, e) in list(s, "events", "events", at)?.iter().enumerate() {
        let e_at = format!("{at}.events[{i}]");
        let e = object(e, &e_at)?;
        unsigned(e, "timeUnixNano", "time_unix_nano", &e_at)?;
        events.push(SpanEvent {
            name: string(e, "name", "name", &e_at)?,
            attrs: key_values(
                list(e, "attributes", "attributes", &e_at)?,
                &format!("{e_at}.attributes"),
                made,
            )?,
        });
    }
    Ok(Span {
        trace_id,
        name: string(s, "name", "name", at)?,
        start_ns: unsigned(s, "startTimeUnixNano", "start_time_unix_nano", at)?,
        end_ns: unsigned(s, "endTimeUnixNano", "end_time_unix_nano", at)?,
        attrs: key_values(
            list(s, "attributes", "attributes", at)?,
            &format!("{at}.attributes"),
            made,
        )?,
        events,
        error,
        status_message,
        resource,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `doc` read as a request body is: parsed by its shape, attributes made as it is.
    fn read(doc: &Value) -> Result<Batch, InputError> {
        let mut made = Made::default();
        let mut refused = None;
        let parsed = loopguard::json::from_str_converting(
            &doc.to_string(),
            Otlp::Request,
            &mut [usize::MAX; 4],
            &mut |shape: Otlp, path: &str, v: Value| {
                convert(&mut made, shape, path, v).map_err(|e| {
                    let m = e.message.clone();
                    refused = Some(e);
                    m
                })
            },
        );
        match parsed {
            Ok(v) => decode(&v, &mut made),
            Err(e) => Err(refused.unwrap_or_else(|| InputError::new(e.path, e.message))),
        }
    }

    #[test]
    fn reads_camel_and_snake_case_numbers_as_strings_and_enum_names() {
        let doc = json!({"resource_spans": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "agent"}}]},
            "scopeSpans": [{"spans": [{
                "trace_id": "5B8EFFF798038103D269B633813FC60C",
                "spanId": "EEE19B7EC3C1B174",
                "name": "execute_tool grep",
                "kind": "SPAN_KIND_INTERNAL",
                "startTimeUnixNano": "1544712660000000000",
                "end_time_unix_nano": 1544712661000000000u64,
                "attributes": [
                    {"key": "gen_ai.tool.call.id", "value": {"intValue": "42"}},
                    {"key": "list", "value": {"arrayValue": {"values": [{"boolValue": true}, {}]}}},
                    {"key": "map", "value": {"kvlistValue": {"values": [{"key": "a", "value": {"doubleValue": "NaN"}}]}}}
                ],
                "status": {"code": "STATUS_CODE_ERROR", "message": "boom"}
            }]}]
        }]});
        let b = read(&doc).unwrap();
        assert_eq!(b.resources[0][0].0, "service.name");
        let s = &b.spans[0];
        assert_eq!(s.trace_id, "5b8efff798038103d269b633813fc60c");
        assert_eq!(
            (s.start_ns, s.end_ns),
            (1544712660000000000, 1544712661000000000)
        );
        assert!(s.error && s.status_message == "boom");
        assert!(matches!(s.attrs[0].1, Attr::Int(42)));
        assert!(
            matches!(&s.attrs[1].1, Attr::Array(v) if matches!(v[..], [Attr::Bool(true), Attr::Empty]))
        );
    }

    #[test]
    fn problems_name_their_json_path() {
        let bad_id =
            json!({"resourceSpans": [{"scopeSpans": [{}, {"spans": [{"traceId": "xyz"}]}]}]});
        let e = read(&bad_id).unwrap_err();
        assert_eq!(e.path, "resourceSpans[0].scopeSpans[1].spans[0].traceId");
        let e = read(&json!({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "00000000000000000000000000000001", "attributes": [{"key": "k", "value": {"intValue": 1.5}}]}]}]}]})).unwrap_err();
        assert_eq!(
            e.path,
            "resourceSpans[0].scopeSpans[0].spans[0].attributes[0].value.intValue"
        );
        let e = read(&json!({"resourceSpans": {}})).unwrap_err();
        assert_eq!(e.path, "resourceSpans");
        // Every value given is checked, not only the one that is read.
        let e = read(&json!({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "00000000000000000000000000000001", "attributes": [{"key": "k", "value": {"stringValue": "s", "kvlistValue": [1]}}]}]}]}]})).unwrap_err();
        assert!(e.path.ends_with("attributes[0].value.kvlistValue"), "{e:?}");
        let e = read(&json!([])).unwrap_err();
        assert_eq!(e.path, ".");
        let e = read(&json!({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "00000000000000000000000000000001", "kind": 9}]}]}]})).unwrap_err();
        assert!(e.path.ends_with(".kind"), "{e:?}");
    }
}
