//! The LLM judge hook: asked only about cases the cheap signals cannot decide (a similarity in
//! the grey band, repeated failures with no objective progress signal). An orchestrator
//! "evaluates goal proximity"; here that is a trait, so the engine works — deterministically —
//! with no judge at all.

pub mod guard;
pub mod http;
pub mod prompt;

use crate::config::{JudgeConfig, JudgeKind};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The judge's classification of the current event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JudgeVerdict {
    /// The agent is moving toward the goal: not a loop.
    Progress,
    /// Spinning: counts as a loop.
    NoProgress,
    /// Moving away from the goal: counts as a loop.
    Regressive,
    /// The failure is outside the agent's control: reported, not counted.
    External,
}

impl JudgeVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            JudgeVerdict::Progress => "progress",
            JudgeVerdict::NoProgress => "no_progress",
            JudgeVerdict::Regressive => "regressive",
            JudgeVerdict::External => "external",
        }
    }
}

/// How a judge call went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JudgeStatus {
    Ok,
    /// No judge is configured: the fallback decided.
    #[serde(rename = "none")]
    NotConfigured,
    Timeout,
    Unavailable,
    /// The judge answered outside the verdict schema.
    Invalid,
    /// The task's budget of judge calls is spent.
    BudgetExhausted,
}

impl JudgeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JudgeStatus::Ok => "ok",
            JudgeStatus::NotConfigured => "none",
            JudgeStatus::Timeout => "timeout",
            JudgeStatus::Unavailable => "unavailable",
            JudgeStatus::Invalid => "invalid",
            JudgeStatus::BudgetExhausted => "budget_exhausted",
        }
    }
}

/// Compares with the wire name (`status == "timeout"`), as clients read it.
impl PartialEq<&str> for JudgeStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<&str> for JudgeVerdict {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A judge's answer; anything but `status: Ok` with a verdict is "undecided".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeAnswer {
    pub status: JudgeStatus,
    pub verdict: Option<JudgeVerdict>,
    pub confidence: Option<f32>,
    pub reason: Option<String>,
}

impl JudgeAnswer {
    pub fn undecided(status: JudgeStatus, reason: impl Into<String>) -> Self {
        JudgeAnswer {
            status,
            verdict: None,
            confidence: None,
            reason: Some(reason.into()),
        }
    }
}

/// One event as the judge sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceEvent {
    pub seq: u64,
    #[serde(rename = "type")]
    pub kind: String,
    /// Normalised and trimmed.
    pub text: String,
}

/// The earlier event the current one nearly matched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub seq: u64,
    pub text: String,
    pub similarity: Option<f32>,
}

/// Everything the judge is told. Bounded: a few recent events with trimmed texts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub task_id: String,
    pub goal: Option<String>,
    /// Why the engine is asking.
    pub question: String,
    pub recent: Vec<EvidenceEvent>,
    pub current: EvidenceEvent,
    pub metrics: Option<crate::signature::TestMetrics>,
    pub candidate: Option<Candidate>,
}

/// A boxed future, so judges can be trait objects.
pub type JudgeFuture<'a> = Pin<Box<dyn Future<Output = JudgeAnswer> + Send + 'a>>;

/// An LLM (or anything else) that classifies ambiguous cases.
pub trait Judge: Send + Sync {
    fn evaluate<'a>(&'a self, evidence: &'a Evidence) -> JudgeFuture<'a>;

    /// Counters for metrics, when the judge keeps any.
    fn stats(&self) -> Option<JudgeSnapshot> {
        None
    }
}

/// A judge's counters at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeSnapshot {
    pub backend: &'static str,
    pub consultations: u64,
    pub attempts: u64,
    pub ok: u64,
    pub timeouts: u64,
    pub unavailable: u64,
    pub invalid: u64,
    pub cache_hits: u64,
    pub short_circuited: u64,
    pub breaker_opened: u64,
    pub breaker: guard::BreakerState,
}

/// The judge the configuration asks for: `None` for `kind = "none"`.
pub fn from_config(cfg: &JudgeConfig) -> Result<Option<Arc<dyn Judge>>, String> {
    Ok(match cfg.kind {
        JudgeKind::None => None,
        JudgeKind::Openai => Some(Arc::new(guard::GuardedJudge::new(
            http::OpenAiBackend::new(cfg)?,
            cfg,
        ))),
        JudgeKind::Webhook => Some(Arc::new(guard::GuardedJudge::new(
            http::WebhookBackend::new(cfg)?,
            cfg,
        ))),
    })
}

/// A judge that always gives the same answer: for tests, and for measuring the most (or the
/// least) a judge can change.
#[derive(Debug, Clone)]
pub struct FixedJudge(pub JudgeAnswer);

impl FixedJudge {
    pub fn says(verdict: JudgeVerdict, reason: &str) -> Self {
        FixedJudge(JudgeAnswer {
            status: JudgeStatus::Ok,
            verdict: Some(verdict),
            confidence: Some(1.0),
            reason: Some(reason.to_string()),
        })
    }
}

impl Judge for FixedJudge {
    fn evaluate<'a>(&'a self, _evidence: &'a Evidence) -> JudgeFuture<'a> {
        let answer = self.0.clone();
        Box::pin(async move { answer })
    }
}
