//! Errors as the API shows them: a stable `code`, a message that says what is wrong, and the JSON
//! path at fault. Every engine error maps to exactly one status here, without a wildcard arm.

use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use loopguard::embed::EmbedError;
use loopguard::engine::EngineError;
use loopguard::event::InputError;
use loopguard::store::StoreError;
use serde::Serialize;

/// The body of every 4xx/5xx answer, whoever produced it: a handler, routing (404, 405), the
/// connection layer (400, 414, 431), or a rejection this module did not foresee.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct ErrorBody {
    /// Stable machine-readable code: `invalid_json`, `invalid_utf8`, `invalid_event`,
    /// `invalid_otlp`, `invalid_parameter`, `invalid_http`, `body_too_large`, `too_many_events`,
    /// `field_too_large`, `too_deep`, `uri_too_long`, `headers_too_large`,
    /// `unsupported_media_type`, `not_found`, `method_not_allowed`, `unauthorized`, `conflict`,
    /// `too_many_subtasks`, `parent_conflict`, `too_many_items`, `body_timeout`, `starting`, `overloaded`, `timeout`, `model_unavailable`,
    /// `storage_error`, `internal`.
    pub code: &'static str,
    pub message: String,
    /// Where the problem is: the JSON path in the body (`event.message`, `[3].task_id`), or the
    /// name of a path or query parameter (`task_id`, `limit`); `null` when it is the request as
    /// a whole.
    pub path: Option<String>,
}

/// The code for a status when nothing more specific is known (a rejection produced outside our
/// handlers).
pub fn code_for_status(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "invalid_http",
        401 => "unauthorized",
        404 => "not_found",
        405 => "method_not_allowed",
        408 => "body_timeout",
        503 | 504 => "timeout",
        409 => "conflict",
        413 => "body_too_large",
        414 => "uri_too_long",
        415 => "unsupported_media_type",
        429 => "overloaded",
        431 => "headers_too_large",
        s if s < 500 => "invalid_http",
        _ => "internal",
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
    pub retry_after_secs: Option<u64>,
    /// Close the connection after the answer (a request whose body was not read whole).
    pub close: bool,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                code,
                message: message.into(),
                path: None,
            },
            retry_after_secs: None,
            close: false,
        }
    }

    pub fn at(mut self, path: impl Into<String>) -> Self {
        self.body.path = Some(path.into());
        self
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", what)
    }

    pub fn from_input(e: InputError) -> Self {
        let path = if e.path.is_empty() {
            ".".to_string()
        } else {
            e.path
        };
        ApiError::bad_request("invalid_event", e.message).at(path)
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Embed(e) => e.into(),
            EngineError::Store(e) => e.into(),
            EngineError::NotFound(task) => ApiError::not_found(format!("task {task} not found")),
            EngineError::Rejected(why) => ApiError::new(StatusCode::CONFLICT, "conflict", why),
            e @ EngineError::TooManySubtasks { .. } => {
                ApiError::new(StatusCode::CONFLICT, "too_many_subtasks", e.to_string())
                    .at("parent_task_id")
            }
            e @ EngineError::ParentConflict { .. } => {
                ApiError::new(StatusCode::CONFLICT, "parent_conflict", e.to_string())
                    .at("parent_task_id")
            }
            e @ (EngineError::Memory(_) | EngineError::Feedback(_)) => {
                tracing::error!(error = %e, "storage failure");
                let mut e = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "storage_error",
                    "the write could not be completed",
                );
                e.retry_after_secs = Some(1);
                e
            }
        }
    }
}

impl From<EmbedError> for ApiError {
    fn from(e: EmbedError) -> Self {
        match e {
            EmbedError::Overloaded(why) => {
                let mut err = ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "overloaded",
                    format!("the embedding model is overloaded: {why}; retry shortly"),
                );
                err.retry_after_secs = Some(1);
                err
            }
            e @ (EmbedError::ModelMissing(_)
            | EmbedError::RuntimeMissing(_)
            | EmbedError::RuntimeLoad { .. }
            | EmbedError::Model(_)
            | EmbedError::Unavailable(_)) => {
                tracing::error!(error = %e, "embedding model unavailable");
                let mut err = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "model_unavailable",
                    "the embedding model is not available; see /readyz",
                );
                err.retry_after_secs = Some(5);
                err
            }
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        // Internals are logged, not shown. A full disk is logged once, by the store, not once
        // per refused request.
        if matches!(e, StoreError::Full(_)) {
            tracing::debug!(error = %e, "state store full");
        } else {
            tracing::error!(error = %e, "state store failure");
        }
        match e {
            StoreError::Io(_) => {
                let mut e = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "storage_error",
                    "the state store could not complete the write; the event was not applied (see /readyz)",
                );
                e.retry_after_secs = Some(1);
                e
            }
            StoreError::Full(_) => {
                let mut e = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "storage_error",
                    "the disk holding the state store is full; nothing was applied, and writes resume by themselves once space is freed (see /readyz)",
                );
                e.retry_after_secs = Some(2);
                e
            }
            StoreError::Unavailable(_) => {
                let mut e = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "storage_error",
                    "the state store cannot be reached; nothing was applied, retry later",
                );
                e.retry_after_secs = Some(1);
                e
            }
            StoreError::Corrupt { .. }
            | StoreError::Version { .. }
            | StoreError::Damaged { .. } => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "storage_error",
                "the stored state of this task cannot be read",
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body)).into_response();
        if let Some(secs) = self.retry_after_secs {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.close {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

/// Whatever answers a 4xx or 5xx without our JSON body (axum's 405 with its `Allow` header, a
/// rejection nobody foresaw) gets one: `{code, message, path}`, the original text as message.
pub async fn json_errors(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let resp = next.run(req).await;
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = match status {
        StatusCode::METHOD_NOT_ALLOWED => format!(
            "this route does not answer {method}; it answers {}",
            parts
                .headers
                .get(header::ALLOW)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("other methods")
        ),
        _ if !text.is_empty() => text.chars().take(1000).collect(),
        _ => status
            .canonical_reason()
            .unwrap_or("request failed")
            .to_string(),
    };
    let body = serde_json::to_vec(&ErrorBody {
        code: code_for_status(status),
        message,
        path: None,
    })
    .expect("an error body serialises");
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, axum::body::Body::from(body))
}

pub fn panicked(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "internal error; the event may not have been applied",
    )
    .into_response()
}
