//! How long a field may be: its class (id, name, free text, JSON) and the configured limit of
//! each, and the 413 for a path or query parameter over it. Bodies are checked field by field
//! against the same limits by the API's validation (`api/validate.rs`).

use super::error::ApiError;
use axum::http::StatusCode;
use loopguard::config::ServerConfig;
use loopguard::event::MAX_TASK_ID_CHARS;

/// How a field is bounded. Lengths count characters (Unicode scalar values), as JSON Schema's
/// `maxLength` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// A task id: 1..256 characters, no control characters (the brief's contract).
    Id,
    /// A name: tool, agent, step, transition state, error type, location, who (`server.max_name_chars`).
    Name,
    /// Free text: messages, responses, requests, notes, the goal (`server.max_text_chars`).
    Text,
    /// Any JSON (tool args and output), measured as its JSON text (`server.max_text_chars`).
    Json,
}

/// The configured limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub name: usize,
    pub text: usize,
    pub depth: usize,
}

impl Limits {
    pub fn of(s: &ServerConfig) -> Limits {
        Limits {
            name: s.max_name_chars,
            text: s.max_text_chars,
            depth: s.max_json_depth,
        }
    }

    pub fn max(&self, class: Class) -> usize {
        match class {
            Class::Id => MAX_TASK_ID_CHARS,
            Class::Name => self.name,
            Class::Text | Class::Json => self.text,
        }
    }

    pub fn key(class: Class) -> &'static str {
        match class {
            Class::Id => "task ids are 1..256 characters",
            Class::Name => "server.max_name_chars",
            Class::Text | Class::Json => "server.max_text_chars",
        }
    }
}

/// A string parameter (path or query) within its class's limit.
pub fn check_param(name: &str, value: &str, class: Class, limits: &Limits) -> Result<(), ApiError> {
    over(name, value, limits.max(class), Limits::key(class))
}

/// A task id parameter within its length, which no setting changes.
pub fn check_id(name: &str, value: &str) -> Result<(), ApiError> {
    over(name, value, MAX_TASK_ID_CHARS, Limits::key(Class::Id))
}

fn over(name: &str, value: &str, max: usize, key: &str) -> Result<(), ApiError> {
    let n = value.chars().count();
    if n > max {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "field_too_large",
            format!("is {n} characters; the limit is {max} ({key})"),
        )
        .at(name));
    }
    Ok(())
}
