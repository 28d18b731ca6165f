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

/// Parse `text` as one JSON value, rejecting duplicate object keys.
pub fn from_str_strict(text: &str) -> Result<Value, JsonError> {
    let dup = RefCell::new(None);
    let mut path = Vec::new();
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = Strict {
        path: &mut path,
        dup: &dup,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    parsed.map_err(|e| {
        let duplicate = dup.into_inner();
        let kind = if duplicate.is_some() {
            JsonErrorKind::DuplicateKey
        } else if e.to_string().contains("recursion limit") {
            JsonErrorKind::TooDeep
        } else {
            JsonErrorKind::Syntax
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

struct Strict<'a> {
    path: &'a mut Vec<Segment>,
    dup: &'a RefCell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
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
        let mut items = Vec::new();
        loop {
            self.path.push(Segment::Index(items.len()));
            let next = seq.next_element_seed(Strict {
                path: &mut *self.path,
                dup: self.dup,
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
        while let Some(key) = map.next_key::<String>()? {
            self.path.push(Segment::Key(key));
            if let Some(Segment::Key(k)) = self.path.last() {
                if object.contains_key(k) {
                    let message = format!("duplicate key `{k}`");
                    *self.dup.borrow_mut() = Some(render(self.path));
                    return Err(A::Error::custom(message));
                }
            }
            let value = map.next_value_seed(Strict {
                path: &mut *self.path,
                dup: self.dup,
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
