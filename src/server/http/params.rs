//! Path and query parameters, parsed here rather than by axum's `Path` and `Query` extractors so
//! that every rejection is our JSON error naming the parameter, and out-of-range values are
//! refused, not clamped: a client asking for `limit=0` has a bug worth hearing about.

use super::error::ApiError;
use super::limits::check_id;
use axum::extract::{FromRequestParts, Path, RawQuery};
use axum::http::request::Parts;
use loopguard::event::MAX_TASK_ID_CHARS;
use std::collections::HashMap;
use std::str::FromStr;

fn invalid(name: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid_parameter", message).at(name)
}

/// The `{task_id}` of a task route: 1..256 characters without control or invisible characters,
/// like the `task_id` of an event, and kept in NFC as it is.
pub struct TaskId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for TaskId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        // A `%` not followed by two hex digits is passed through as it is by the decoding
        // below: `/v1/tasks/%ZZ` would be looked up as the task `%ZZ`. It is malformed. The
        // check reads the path as sent — axum's parameters are already decoded, and a task id
        // may hold a `%` of its own (sent as `%25`). The task id is the only free segment of a
        // task route, so a bad escape anywhere in the path is in it.
        if let Some(bad) = parts
            .uri
            .path()
            .split('/')
            .find(|segment| !valid_percent_encoding(segment))
        {
            return Err(invalid(
                "task_id",
                format!(
                    "`{}` is not valid percent-encoding (a `%` must be followed by two hex digits)",
                    shorten(bad)
                ),
            ));
        }
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| invalid("task_id", e.body_text()))?;
        check_id("task_id", &id)?;
        if let Some(why) = loopguard::event::task_id_problem(&id) {
            return Err(invalid(
                "task_id",
                format!(
                    "a task id is 1..{MAX_TASK_ID_CHARS} characters without control or invisible characters, not whitespace alone: {why}"
                ),
            ));
        }
        Ok(TaskId(loopguard::event::task_id_nfc(&id)))
    }
}

/// A query string, decoded. A parameter given twice is refused: which one counts would be a
/// guess.
pub struct QueryParams(HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let RawQuery(raw) = RawQuery::from_request_parts(parts, state)
            .await
            .unwrap_or(RawQuery(None));
        QueryParams::parse(raw.as_deref().unwrap_or(""))
    }
}

impl QueryParams {
    pub fn parse(raw: &str) -> Result<QueryParams, ApiError> {
        let mut map = HashMap::new();
        for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
            if map.insert(k.to_string(), v.into_owned()).is_some() {
                return Err(invalid(&k, format!("`{k}` is given more than once")));
            }
        }
        Ok(QueryParams(map))
    }

    pub fn string(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    pub fn required(&self, name: &str) -> Result<&str, ApiError> {
        self.string(name)
            .ok_or_else(|| invalid(name, format!("the query parameter `{name}` is required")))
    }

    /// A number in `min..=max`, when given, written as JSON writes numbers: no `+`, no
    /// leading zeros, no spaces (`limit=+5` and `limit=05` are refused: the OpenAPI document's
    /// integer has one spelling, and a client that sends another has a bug worth hearing about).
    pub fn number<T>(&self, name: &str, min: T, max: T) -> Result<Option<T>, ApiError>
    where
        T: FromStr + PartialOrd + std::fmt::Display + Copy,
    {
        let Some(raw) = self.string(name) else {
            return Ok(None);
        };
        let parsed = json_number(raw).then(|| raw.parse::<T>().ok()).flatten();
        match parsed {
            Some(v) if v >= min && v <= max => Ok(Some(v)),
            _ => Err(invalid(
                name,
                format!("must be a number in {min}..={max}, got `{}`", shorten(raw)),
            )),
        }
    }

    /// One of `allowed`.
    pub fn choice<'a>(&'a self, name: &str, allowed: &[&str]) -> Result<&'a str, ApiError> {
        let v = self.required(name)?;
        if allowed.contains(&v) {
            Ok(v)
        } else {
            Err(invalid(
                name,
                format!(
                    "unknown {name} `{}`; expected {}",
                    shorten(v),
                    allowed
                        .iter()
                        .map(|a| format!("`{a}`"))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
            ))
        }
    }
}

/// `s` is a number as JSON spells it: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
/// (An unsigned type's parse then refuses the `-`, an integer's the fraction.)
fn json_number(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if b.first() == Some(&b'-') {
        i += 1;
    }
    let int_start = i;
    let n = digits(&mut i);
    if n == 0 || (n > 1 && b[int_start] == b'0') {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// Every `%` is followed by two hex digits.
fn valid_percent_encoding(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter().enumerate().all(|(i, &c)| {
        c != b'%'
            || (b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    })
}

/// A value quoted in a message, cut to a readable length.
fn shorten(s: &str) -> String {
    if s.chars().count() <= 40 {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(40).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_range_or_a_named_error() {
        let q = QueryParams::parse("limit=5&k=0&big=99999999999999999999999&x=%41").unwrap();
        assert_eq!(q.number::<usize>("limit", 1, 10).unwrap(), Some(5));
        assert_eq!(q.number::<usize>("absent", 1, 10).unwrap(), None);
        let err = q.number::<usize>("k", 1, 50).unwrap_err();
        assert_eq!(err.body.path.as_deref(), Some("k"));
        assert!(err.body.message.contains("1..=50"), "{}", err.body.message);
        assert!(q.number::<usize>("big", 1, 10).is_err());
        // Issue 43: a number is written one way — no sign, no leading zeros, no spaces — as
        // the OpenAPI document's integer says.
        for raw in [
            "+5", "05", " 5", "5 ", "0x5", "5.0", "1e1", "-0", "00", "", "٥",
        ] {
            let one = QueryParams::parse(&format!("limit={}", raw.replace(' ', "%20"))).unwrap();
            let err = one.number::<usize>("limit", 0, 10).unwrap_err();
            assert_eq!(err.body.path.as_deref(), Some("limit"), "{raw:?}");
        }
        let nums = QueryParams::parse("limit=0&m=-0.5&n=0.25&o=+0.5&p=.5&q=1e-1").unwrap();
        assert_eq!(nums.number::<usize>("limit", 0, 10).unwrap(), Some(0));
        assert_eq!(nums.number::<f64>("m", -1.0, 1.0).unwrap(), Some(-0.5));
        assert_eq!(nums.number::<f64>("n", -1.0, 1.0).unwrap(), Some(0.25));
        assert_eq!(nums.number::<f64>("q", -1.0, 1.0).unwrap(), Some(0.1));
        assert!(nums.number::<f64>("o", -1.0, 1.0).is_err());
        assert!(nums.number::<f64>("p", -1.0, 1.0).is_err());
        assert_eq!(q.string("x"), Some("A"));
        let err = QueryParams::parse("limit=1&limit=2").err().unwrap();
        assert_eq!(err.body.path.as_deref(), Some("limit"));
        assert!(valid_percent_encoding("epic-9%2Fsub-2"));
        assert!(!valid_percent_encoding("%ZZ"));
        assert!(!valid_percent_encoding("a%2"));
        let err = q.choice("format", &["pairs", "runs"]).unwrap_err();
        assert!(
            err.body.message.contains("required"),
            "{}",
            err.body.message
        );
    }
}
