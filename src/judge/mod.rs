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

// The judge's verdict types belong with the verdict they are part of (`crate::verdict`); they
// are re-exported here for the judges that produce them.
pub use crate::verdict::{JudgeStatus, JudgeVerdict};

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
