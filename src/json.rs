//! JSON text parsed strictly: an object that names a key twice is an error that names the key's
//! path, not a silent "the last one wins". Two parsers that disagree on which duplicate counts
//! (a proxy that keeps the first `task_id`, loopguard the last) would apply an event to different
//! tasks, and a second `type` would silently change what an event is.

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::fmt;

/// Why a text is not acceptable JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonErrorKind {
    /// Not JSON at all (or trailing characters after it).
    Syntax,
    /// An object names the same key twice.
    DuplicateKey,
    /// Nested deeper than serde_json's recursion limit (128).
    TooDeep,
    /// More items than a limit allows ([`from_str_shaped`]): the limit's index; `path` names
    /// the first item past it.
    OverLimit(usize),
    /// A value its conversion refused ([`from_str_converting`]); `path` names it, the message
    /// says why.
    Rejected,
}

/// A JSON error with its position, and for a duplicate key the key's JSON path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (line {line}, column {column})")]
pub struct JsonError {
    pub kind: JsonErrorKind,
    /// `event.type`, `[2].task_id`; `.` for the document itself.
    pub path: String,
    pub message: String,
    pub line: usize,
    pub column: usize,
}

/// How a reader that knows a document's shape reads the value under a key of an object.
pub enum Field<S> {
    /// Kept, as this shape.
    Keep(S),
    /// Kept, as this shape, and named so: two keys of one object with the same name are a
    /// duplicate (`traceId` and `trace_id` are one field).
    Named(S, &'static str),
    /// Skipped unread: checked as JSON, never built.
    Skip,
}

/// How a reader that knows a document's shape reads the items of an array.
pub enum Items<S> {
    /// Kept, as this shape.
    Keep(S),
    /// Kept, as this shape, each counted against limit `n` of [`from_str_shaped`].
    Counted(S, usize),
    /// Skipped unread (the array is kept empty): where the reader wants no array.
    Skip,
}

/// The shape of a document as its reader knows it: what it reads, what it skips, what it
/// counts. Parsing by it builds only what the reader will hold, so a body's memory is bounded
/// by the reader's limits rather than by its size.
pub trait Shape: Copy {
    fn field(self, key: &str) -> Field<Self>;
    fn items(self) -> Items<Self>;
    /// The limit each member of an object of this shape counts against, if any.
    fn members(self) -> Option<usize> {
        None
    }
    /// A value of this shape, once parsed, is handed to [`from_str_converting`]'s `convert`
    /// and replaced by what it returns (something smaller: what the reader makes of it).
    fn converted(self) -> bool {
        false
    }
}

/// What [`from_str_converting`] calls for each value of a converted shape: the shape, the
/// value's path, the value; the value to keep in its place, or why it is refused.
pub type Convert<'c, S> = dyn FnMut(S, &str, Value) -> Result<Value, String> + 'c;

/// Any JSON, all of it kept, every value (array item or object member) counted against limit
/// 0: JSON of a bounded number of values.
#[derive(Clone, Copy)]
pub struct Counted;

impl Shape for Counted {
    fn field(self, _: &str) -> Field<Counted> {
        Field::Keep(Counted)
    }

    fn items(self) -> Items<Counted> {
        Items::Counted(Counted, 0)
    }

    fn members(self) -> Option<usize> {
        Some(0)
    }
}

/// Any JSON, all of it kept.
#[derive(Clone, Copy)]
struct Any;

impl Shape for Any {
    fn field(self, _: &str) -> Field<Any> {
        Field::Keep(Any)
    }

    fn items(self) -> Items<Any> {
        Items::Keep(Any)
    }
}

/// Parse `text` as one JSON value, rejecting duplicate object keys.
pub fn from_str_strict(text: &str) -> Result<Value, JsonError> {
    from_str_shaped(text, Any, &mut [])
}

/// Parse `text` as one JSON value of `shape`, rejecting duplicate object keys (and keys that
/// name one field twice), keeping only what the shape reads, and stopping at the first item
/// past what is left of its limit in `left` ([`JsonErrorKind::OverLimit`], with its path):
/// checked while parsing, before the item is built. `left` is decreased by what was counted.
pub fn from_str_shaped<S: Shape>(
    text: &str,
    shape: S,
    left: &mut [usize],
) -> Result<Value, JsonError> {
    from_str_converting(text, shape, left, &mut |_, _, v| Ok(v))
}

/// [`from_str_shaped`], each value of a shape that is [`Shape::converted`] handed to `convert`
/// as soon as it is parsed and replaced by what it returns: what the reader holds while the
/// rest is parsed is what it made of the values, not their JSON trees (an object costs half a
/// kilobyte as a tree). A value it refuses stops the parse ([`JsonErrorKind::Rejected`]).
pub fn from_str_converting<'c, S: Shape>(
    text: &str,
    shape: S,
    left: &mut [usize],
    convert: &'c mut Convert<'c, S>,
) -> Result<Value, JsonError> {
    let dup = RefCell::new(None);
    let counts = RefCell::new(Counts {
        left: left.to_vec(),
        over: None,
        rejected: None,
    });
    let convert = RefCell::new(convert);
    let mut path = Vec::new();
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = Strict {
        path: &mut path,
        dup: &dup,
        counts: &counts,
        convert: &convert,
        shape,
        count: None,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    let counts = counts.into_inner();
    left.copy_from_slice(&counts.left);
    parsed.map_err(|e| {
        let duplicate = dup.into_inner();
        let over = counts.over;
        let (kind, duplicate) = match (duplicate, over, counts.rejected) {
            (Some(path), _, _) => (JsonErrorKind::DuplicateKey, Some(path)),
            (None, Some((limit, path)), _) => (JsonErrorKind::OverLimit(limit), Some(path)),
            (None, None, Some(path)) => (JsonErrorKind::Rejected, Some(path)),
            (None, None, None) if e.to_string().contains("recursion limit") => {
                (JsonErrorKind::TooDeep, None)
            }
            (None, None, None) => (JsonErrorKind::Syntax, None),
        };
        // serde_json appends " at line L column C" to every message; we report them apart.
        let message = e.to_string();
        let message = match message.rfind(" at line ") {
            Some(i) => message[..i].to_string(),
            None => message,
        };
        JsonError {
            kind,
            path: duplicate.unwrap_or_else(|| ".".into()),
            message,
            line: e.line(),
            column: e.column(),
        }
    })
}

enum Segment {
    Key(String),
    Index(usize),
}

fn render(path: &[Segment]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Segment::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Segment::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    if s.is_empty() {
        ".".into()
    } else {
        s
    }
}

/// Items counted against their limits so far, and the first past one.
struct Counts {
    left: Vec<usize>,
    over: Option<(usize, String)>,
    /// The path of a value its conversion refused.
    rejected: Option<String>,
}

impl Counts {
    /// Count one against limit `n`; false (and `over` set) when none is left.
    fn take(&mut self, n: usize, path: &[Segment]) -> bool {
        match self.left[n].checked_sub(1) {
            Some(l) => {
                self.left[n] = l;
                true
            }
            None => {
                self.over = Some((n, render(path)));
                false
            }
        }
    }
}

struct Strict<'a, 'c, S> {
    path: &'a mut Vec<Segment>,
    dup: &'a RefCell<Option<String>>,
    counts: &'a RefCell<Counts>,
    convert: &'a RefCell<&'c mut Convert<'c, S>>,
    shape: S,
    /// The limit this value counts against (an item of a counted array).
    count: Option<usize>,
}

impl<'de, S: Shape> DeserializeSeed<'de> for Strict<'_, '_, S> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        let Strict {
            path,
            dup,
            counts,
            convert,
            shape,
            count,
        } = self;
        // Counted here, where an item is known to follow: past the limit, it is refused
        // before it is read, let alone built.
        if let Some(n) = count {
            if !counts.borrow_mut().take(n, path) {
                return Err(D::Error::custom("more items than the limit allows"));
            }
        }
        let value = d.deserialize_any(Strict {
            path: &mut *path,
            dup,
            counts,
            convert,
            shape,
            count: None,
        })?;
        if !shape.converted() {
            return Ok(value);
        }
        let at = render(path);
        let converted = (convert.borrow_mut())(shape, &at, value);
        converted.map_err(|why| {
            counts.borrow_mut().rejected = Some(at);
            D::Error::custom(why)
        })
    }
}

impl<'de, S: Shape> Visitor<'de> for Strict<'_, '_, S> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // `3.0` is an integer as JSON Schema counts them (and as JavaScript writes some), so a
        // count sent as `3.0` is 3, not a type error.
        if v.fract() == 0.0 {
            if (0.0..18_446_744_073_709_551_616.0).contains(&v) {
                return Ok(Value::Number((v as u64).into()));
            }
            if (-9_223_372_036_854_775_808.0..0.0).contains(&v) {
                return Ok(Value::Number((v as i64).into()));
            }
        }
        // JSON text has no NaN or infinity, so this never falls back.
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let (shape, counted) = match self.shape.items() {
            Items::Keep(s) => (s, None),
            Items::Counted(s, n) => (s, Some(n)),
            Items::Skip => {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                return Ok(Value::Array(Vec::new()));
            }
        };
        let mut items = Vec::new();
        loop {
            self.path.push(Segment::Index(items.len()));
            let next = seq.next_element_seed(Strict {
                path: &mut *self.path,
                dup: self.dup,
                counts: self.counts,
                convert: self.convert,
                shape,
                count: counted,
            })?;
            self.path.pop();
            match next {
                Some(v) => items.push(v),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        // Keys that name a field (`Field::Named`), by that name: one field, one key.
        let mut named: Vec<(&'static str, String)> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let field = self.shape.field(&key);
            self.path.push(Segment::Key(key));
            let Some(Segment::Key(k)) = self.path.last() else {
                unreachable!("pushed a key above")
            };
            let twice = match &field {
                Field::Named(_, name) => named
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, first)| format!("`{k}` and `{first}` name the same field")),
                _ => None,
            }
            .or_else(|| {
                (object.contains_key(k) || named.iter().any(|(_, first)| first == k))
                    .then(|| format!("duplicate key `{k}`"))
            });
            if let Some(message) = twice {
                *self.dup.borrow_mut() = Some(render(self.path));
                return Err(A::Error::custom(message));
            }
            if let Some(n) = self.shape.members() {
                if !self.counts.borrow_mut().take(n, self.path) {
                    return Err(A::Error::custom("more members than the limit allows"));
                }
            }
            let shape = match field {
                Field::Keep(s) => s,
                Field::Named(s, name) => {
                    named.push((name, k.clone()));
                    s
                }
                Field::Skip => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    self.path.pop();
                    continue;
                }
            };
            let value = map.next_value_seed(Strict {
                path: &mut *self.path,
                dup: self.dup,
                counts: self.counts,
                convert: self.convert,
                shape,
                count: None,
            })?;
            let Some(Segment::Key(key)) = self.path.pop() else {
                unreachable!("pushed a key above")
            };
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_like_serde_json() {
        let text = r#"{"a": [1, -2, 3.5, "x", null, true, {"b": {}}], "c": 18446744073709551615}"#;
        assert_eq!(
            from_str_strict(text).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
    }

    #[test]
    fn integral_numbers_are_integers() {
        assert_eq!(
            from_str_strict("[3.0, -2.0, 2.5, 1e3, 0.0]").unwrap(),
            json!([3, -2, 2.5, 1000, 0])
        );
        assert!(from_str_strict("1e30").unwrap().is_f64());
    }

    #[test]
    fn duplicate_keys_name_their_path() {
        let err = from_str_strict(r#"{"task_id": "a", "task_id": "b"}"#).unwrap_err();
        assert_eq!(err.kind, JsonErrorKind::DuplicateKey);
        assert_eq!(err.path, "task_id");
        assert_eq!(err.message, "duplicate key `task_id`");
        assert_eq!((err.line, err.column), (1, 26));

        let text =
            r#"[{"task_id": "t", "event": {"type": "failure", "args": [{"x": 1, "x": 2}]}}]"#;
        let err = from_str_strict(text).unwrap_err();
        assert_eq!(err.path, "[0].event.args[0].x");

        let err = from_str_strict(r#"{"event": {"type": "a", "type": "b"}}"#).unwrap_err();
        assert_eq!(err.path, "event.type");
        // The same key in sibling objects is fine.
        assert_eq!(
            from_str_strict(r#"[{"a": 1}, {"a": 2}]"#).unwrap(),
            json!([{"a": 1}, {"a": 2}])
        );
    }

    #[test]
    fn syntax_errors_and_depth() {
        let err = from_str_strict("{\"a\": ").unwrap_err();
        assert_eq!(err.kind, JsonErrorKind::Syntax);
        assert_eq!(err.path, ".");
        assert!(!err.message.contains(" at line "), "{}", err.message);
        let err = from_str_strict("{} x").unwrap_err();
        assert_eq!(err.kind, JsonErrorKind::Syntax);
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(
            from_str_strict(&deep).unwrap_err().kind,
            JsonErrorKind::TooDeep
        );
    }
}

#[cfg(test)]
mod shaped_tests {
    use super::*;
    use serde_json::json;

    /// `{"items": [..counted..], "id"|"ID": ..}`, anything else skipped.
    #[derive(Clone, Copy)]
    enum Doc {
        Top,
        List,
        Item,
    }

    impl Shape for Doc {
        fn field(self, key: &str) -> Field<Doc> {
            match (self, key) {
                (Doc::Top, "items") => Field::Keep(Doc::List),
                (Doc::Top, "id" | "ID") => Field::Named(Doc::Item, "id"),
                (Doc::Item, _) => Field::Keep(Doc::Item),
                _ => Field::Skip,
            }
        }

        fn items(self) -> Items<Doc> {
            match self {
                Doc::List => Items::Counted(Doc::Item, 0),
                Doc::Item => Items::Keep(Doc::Item),
                Doc::Top => Items::Skip,
            }
        }
    }

    #[test]
    fn only_what_the_shape_reads_is_built_and_counted_items_stop_at_their_limit() {
        let v = from_str_shaped(
            r#"{"items": [1, {"a": 2}], "junk": [[1, 2], {"x": {"y": 3}}], "id": 7}"#,
            Doc::Top,
            &mut [2],
        )
        .unwrap();
        assert_eq!(v, json!({"items": [1, {"a": 2}], "id": 7}));
        let e = from_str_shaped(r#"{"items": [1, 2, 3]}"#, Doc::Top, &mut [2]).unwrap_err();
        assert_eq!(
            (e.kind, e.path.as_str()),
            (JsonErrorKind::OverLimit(0), "items[2]")
        );
        // Exactly at the limit is fine, and an empty array counts nothing.
        let mut left = [2];
        assert!(from_str_shaped(r#"{"items": [1, 2]}"#, Doc::Top, &mut left).is_ok());
        assert_eq!(left, [0], "what was counted is taken from what is left");
        assert!(from_str_shaped(r#"{"items": []}"#, Doc::Top, &mut [0]).is_ok());
        // Every value counted: two members and two items, three allowed.
        let e = from_str_shaped(r#"{"a": 1, "b": [2, 3]}"#, Counted, &mut [3]).unwrap_err();
        assert_eq!(
            (e.kind, e.path.as_str()),
            (JsonErrorKind::OverLimit(0), "b[1]")
        );
        // Two spellings of one field are a duplicate key; so is one key twice, kept or not.
        let e = from_str_shaped(r#"{"id": 1, "ID": 2}"#, Doc::Top, &mut [9]).unwrap_err();
        assert_eq!(
            (e.kind, e.path.as_str()),
            (JsonErrorKind::DuplicateKey, "ID")
        );
        assert!(e.message.contains("`ID` and `id`"), "{}", e.message);
        let e = from_str_shaped(r#"{"items": [], "items": []}"#, Doc::Top, &mut [9]).unwrap_err();
        assert_eq!(e.kind, JsonErrorKind::DuplicateKey);
        // Skipped values are still JSON.
        let e = from_str_shaped(r#"{"junk": [1, }"#, Doc::Top, &mut [9]).unwrap_err();
        assert_eq!(e.kind, JsonErrorKind::Syntax);
    }
}
