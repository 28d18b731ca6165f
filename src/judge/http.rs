//! The two wire formats a judge can speak: OpenAI-compatible chat completions, and a plain
//! webhook that receives the evidence as JSON. Each makes exactly one HTTP attempt; retries,
//! timeouts, caching and the circuit breaker are [`super::guard`]'s.

use super::prompt::{parse_answer, user_message, SYSTEM_PROMPT};
use super::{Evidence, JudgeAnswer};
use crate::config::JudgeConfig;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// Why one attempt failed.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptError {
    /// Worth retrying: connection refused or reset, 429, 5xx.
    Transient(String),
    /// Not worth retrying: 4xx other than 429, a body that is not what the protocol promises.
    Permanent(String),
    Timeout,
}

pub type AttemptFuture<'a> =
    Pin<Box<dyn Future<Output = Result<JudgeAnswer, AttemptError>> + Send + 'a>>;

/// One HTTP attempt at a judgement.
pub trait Backend: Send + Sync {
    fn attempt<'a>(&'a self, evidence: &'a Evidence, timeout: Duration) -> AttemptFuture<'a>;
    /// `openai` or `webhook`, for logs and metrics.
    fn name(&self) -> &'static str;
}

/// Make rustls use the ring provider (no system OpenSSL, no cmake). Every HTTP client in the
/// process needs this before it is built; calling it again is harmless.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// An HTTP client for the judge; certificates are the platform's.
pub fn client() -> Result<reqwest::Client, String> {
    install_tls_provider();
    reqwest::Client::builder()
        .user_agent(concat!("loopguard/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("cannot build the judge's HTTP client: {e}"))
}

fn api_key(cfg: &JudgeConfig) -> Option<String> {
    std::env::var(&cfg.api_key_env)
        .ok()
        .filter(|k| !k.trim().is_empty())
}

/// The largest answer read from a judge: a verdict is a few hundred bytes, and a judge that
/// streams megabytes is cut off rather than read whole into memory.
pub const MAX_ANSWER_BYTES: usize = 256 << 10;

async fn send(request: reqwest::RequestBuilder, timeout: Duration) -> Result<String, AttemptError> {
    // Errors are shown without the URL: its query string may carry a key.
    let mut response = match request.timeout(timeout).send().await {
        Ok(r) => r,
        Err(e) if e.is_timeout() => return Err(AttemptError::Timeout),
        Err(e) => {
            return Err(AttemptError::Transient(format!(
                "request failed: {}",
                e.without_url()
            )))
        }
    };
    let status = response.status();
    let too_large = || {
        AttemptError::Permanent(format!(
            "the answer is larger than {MAX_ANSWER_BYTES} bytes; not read"
        ))
    };
    if response
        .content_length()
        .is_some_and(|n| n > MAX_ANSWER_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
                    return Err(too_large());
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) if e.is_timeout() => return Err(AttemptError::Timeout),
            Err(e) => {
                return Err(AttemptError::Transient(format!(
                    "reading the answer failed: {}",
                    e.without_url()
                )))
            }
        }
    }
    let body = String::from_utf8_lossy(&bytes).into_owned();
    if status.as_u16() == 429 || status.is_server_error() {
        return Err(AttemptError::Transient(format!("HTTP {status}")));
    }
    if !status.is_success() {
        let head: String = body.chars().take(200).collect();
        return Err(AttemptError::Permanent(format!("HTTP {status}: {head}")));
    }
    Ok(body)
}

/// A judge behind an OpenAI-compatible `POST …/chat/completions`.
pub struct OpenAiBackend {
    client: reqwest::Client,
    url: String,
    model: String,
    temperature: f32,
    key: Option<String>,
}

impl OpenAiBackend {
    pub fn new(cfg: &JudgeConfig) -> Result<Self, String> {
        let base = cfg.url.trim_end_matches('/');
        let url = if base.ends_with("/chat/completions") {
            base.to_string()
        } else {
            format!("{base}/chat/completions")
        };
        Ok(OpenAiBackend {
            client: client()?,
            url,
            model: cfg.model.clone(),
            temperature: cfg.temperature,
            key: api_key(cfg),
        })
    }
}

impl Backend for OpenAiBackend {
    fn attempt<'a>(&'a self, evidence: &'a Evidence, timeout: Duration) -> AttemptFuture<'a> {
        Box::pin(async move {
            let body = serde_json::json!({
                "model": self.model,
                "temperature": self.temperature,
                "response_format": {"type": "json_object"},
                "messages": [
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": user_message(evidence)},
                ],
            });
            let mut request = self.client.post(&self.url).json(&body);
            if let Some(key) = &self.key {
                request = request.bearer_auth(key);
            }
            let text = send(request, timeout).await?;
            let reply: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                AttemptError::Permanent(format!("not a chat-completions answer ({e})"))
            })?;
            let content = reply
                .pointer("/choices/0/message/content")
                .and_then(|c| c.as_str())
                .ok_or_else(|| {
                    AttemptError::Permanent("the answer has no choices[0].message.content".into())
                })?;
            Ok(parse_answer(content))
        })
    }

    fn name(&self) -> &'static str {
        "openai"
    }
}

/// A judge behind the user's own URL: the evidence is POSTed as JSON, the verdict read back.
pub struct WebhookBackend {
    client: reqwest::Client,
    url: String,
    key: Option<String>,
}

impl WebhookBackend {
    pub fn new(cfg: &JudgeConfig) -> Result<Self, String> {
        Ok(WebhookBackend {
            client: client()?,
            url: cfg.url.clone(),
            key: api_key(cfg),
        })
    }
}

impl Backend for WebhookBackend {
    fn attempt<'a>(&'a self, evidence: &'a Evidence, timeout: Duration) -> AttemptFuture<'a> {
        Box::pin(async move {
            let mut request = self.client.post(&self.url).json(evidence);
            if let Some(key) = &self.key {
                request = request.bearer_auth(key);
            }
            let text = send(request, timeout).await?;
            Ok(parse_answer(&text))
        })
    }

    fn name(&self) -> &'static str {
        "webhook"
    }
}
