//! Request bodies: the media type, the size limit, UTF-8 and strict JSON, each refused with its
//! own status and code before a handler sees the body.

use super::conn::BodyTimeout;
use super::error::ApiError;
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, StatusCode};
use loopguard::json::{from_str_strict, JsonErrorKind};
use serde_json::Value;

/// Is this `Content-Type` JSON? `application/json` or a `+json` type, any parameters.
fn is_json(content_type: &str) -> bool {
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

/// Read a JSON body of at most `limit` bytes.
///
/// The media type is checked first: a body that is not declared `application/json` is 415,
/// however it parses. A browser sends `text/plain` and form types cross-site without a CORS
/// preflight; only JSON makes it ask the server first, so a web page cannot post events or
/// resets to a loopback server behind its user's back.
pub async fn read_json(headers: &HeaderMap, body: Body, limit: usize) -> Result<Value, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    match content_type.as_deref() {
        Some(ct) if is_json(ct) => {}
        other => {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                match other {
                    Some(ct) => {
                        format!("the body is `{ct}`; send it as `Content-Type: application/json`")
                    }
                    None => "the body needs `Content-Type: application/json`".into(),
                },
            ))
        }
    }
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the request body exceeds {limit} bytes (server.max_body_bytes)"),
        )
    };
    // Refused on its declared length, before a byte is read: a client that sent
    // `Expect: 100-continue` is answered 413 instead of being invited to send it.
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let bytes: Bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|e| body_error(e, too_large))?;
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        ApiError::bad_request(
            "invalid_utf8",
            format!("the body is not valid UTF-8 (at byte {})", e.valid_up_to()),
        )
    })?;
    from_str_strict(text).map_err(|e| {
        let (code, path) = match e.kind {
            JsonErrorKind::DuplicateKey => ("invalid_json", Some(e.path.clone())),
            JsonErrorKind::TooDeep => ("too_deep", None),
            JsonErrorKind::Syntax | JsonErrorKind::OverLimit(_) | JsonErrorKind::Rejected => {
                ("invalid_json", None)
            }
        };
        let mut err = ApiError::bad_request(
            code,
            format!(
                "not valid JSON: {} (line {}, column {})",
                e.message, e.line, e.column
            ),
        );
        err.body.path = path;
        err
    })
}

/// What a body that could not be read whole is answered: `408 body_timeout` (and the
/// connection closed) when it did not arrive in time, else `too_large` (the only other way
/// reading a body within a limit fails).
pub fn body_error(e: axum::Error, too_large: impl FnOnce() -> ApiError) -> ApiError {
    match timed_out(&*e.into_inner()) {
        Some(t) => {
            let mut e = ApiError::new(StatusCode::REQUEST_TIMEOUT, "body_timeout", t.to_string());
            e.close = true;
            e
        }
        None => too_large(),
    }
}

/// The body timeout behind a body error, if that is what it was.
fn timed_out<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyTimeout> {
    let mut at: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(e) = at {
        if let Some(t) = e.downcast_ref::<BodyTimeout>() {
            return Some(t);
        }
        at = e.source();
    }
    None
}

/// A body deserialised into its request type, naming the path of the first problem.
pub fn typed<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        ApiError::bad_request("invalid_event", e.into_inner().to_string()).at(path)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_media_types() {
        for ct in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/merge-patch+json",
        ] {
            assert!(is_json(ct), "{ct}");
        }
        for ct in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "",
            "application/jsonx",
            "text/json",
        ] {
            assert!(!is_json(ct), "{ct}");
        }
    }
}
