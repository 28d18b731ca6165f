//! Request bodies: the media type, the size limit, the body timeout, gzip and deflate, UTF-8 and
//! strict JSON, each refused with its own status and code before a handler sees the body. Every
//! route reads its body here (the OTLP receiver too), so each answers a slow or large body alike.

use super::conn::BodyTimeout;
use super::error::ApiError;
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, StatusCode};
use loopguard::config::ServerConfig;
use loopguard::json::{from_str_strict, JsonErrorKind};
use serde_json::Value;
use std::io::Read;

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
pub async fn read_json(headers: &HeaderMap, body: Body, limit: Limit) -> Result<Value, ApiError> {
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
    let bytes = read_bytes(headers, body, limit).await?;
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

/// The most bytes a body may hold, and the setting that says so (the 413 names it).
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub bytes: usize,
    pub setting: &'static str,
}

impl Limit {
    /// `server.max_body_bytes`, the limit of every JSON body.
    pub fn server(s: &ServerConfig) -> Limit {
        Limit {
            bytes: s.max_body_bytes,
            setting: "server.max_body_bytes",
        }
    }

    fn too_large(self) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!(
                "the request body exceeds {} bytes ({})",
                self.bytes, self.setting
            ),
        )
    }
}

/// Read a body of at most `limit` bytes, as it came. Every route's body is read here, so each
/// answers alike: 413 on a declared length over the limit (before a byte is read: a client that
/// sent `Expect: 100-continue` is answered 413 instead of being invited to send it) or on more
/// bytes than that, 408 when the body did not arrive within the body timeout.
pub async fn read_bytes(headers: &HeaderMap, body: Body, limit: Limit) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit.bytes as u64) {
        return Err(limit.too_large());
    }
    axum::body::to_bytes(body, limit.bytes)
        .await
        .map_err(|e| body_error(e, || limit.too_large()))
}

/// Read a body that may be compressed (`Content-Encoding`: gzip, deflate or none), at most
/// `limit` bytes on the wire and again once inflated: a small body that inflates past the limit
/// (a gzip bomb) is refused as soon as it does. A body that cannot be inflated is a 400 with
/// the caller's `unreadable` code.
pub async fn read_encoded(
    headers: &HeaderMap,
    body: Body,
    limit: Limit,
    unreadable: &'static str,
) -> Result<Vec<u8>, ApiError> {
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    if !matches!(
        encoding.as_str(),
        "" | "identity" | "gzip" | "x-gzip" | "deflate"
    ) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!("Content-Encoding `{encoding}` is not supported; send gzip, deflate or none"),
        ));
    }
    let bytes = read_bytes(headers, body, limit).await?;
    let cannot_read = |e: std::io::Error| {
        ApiError::bad_request(
            unreadable,
            format!("the {encoding} body cannot be read: {e}"),
        )
    };
    let mut out = Vec::new();
    // One byte past the limit tells a body that is too large from one that fits exactly.
    let cap = limit.bytes as u64 + 1;
    match encoding.as_str() {
        // Every member, as the OpenTelemetry Collector (Go's gzip reader) reads them: a body of
        // several members is their concatenation, and bytes after the last that are not a
        // member are an error, not ignored.
        "gzip" | "x-gzip" => {
            flate2::bufread::MultiGzDecoder::new(&bytes[..])
                .take(cap)
                .read_to_end(&mut out)
                .map_err(cannot_read)?;
        }
        // HTTP's `deflate` is the zlib format (RFC 9110 §8.4.1.2), as exporters send it; one
        // stream, and nothing after it.
        "deflate" => {
            let mut z = flate2::bufread::ZlibDecoder::new(&bytes[..]);
            (&mut z)
                .take(cap)
                .read_to_end(&mut out)
                .map_err(cannot_read)?;
            let after = z.get_ref().len();
            if out.len() as u64 <= limit.bytes as u64 && after > 0 {
                return Err(ApiError::bad_request(
                    unreadable,
                    format!("{after} bytes after the end of the deflate stream"),
                ));
            }
        }
        _ => return Ok(bytes.to_vec()),
    }
    if out.len() > limit.bytes {
        return Err(limit.too_large());
    }
    Ok(out)
}

/// What a body that could not be read whole is answered: `408 body_timeout` (and the
/// connection closed) when it did not arrive in time, else `too_large` (the only other way
/// reading a body within a limit fails).
fn body_error(e: axum::Error, too_large: impl FnOnce() -> ApiError) -> ApiError {
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
