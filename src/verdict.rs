//! Verdicts out: the brief's output contract.

use crate::signature::ErrorType;
use serde::{Deserialize, Serialize};

/// What kind of loop a verdict reports. The codes are stable and documented in docs/DETECTION.md.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum LoopKind {
    None,
    ExactRepeat,
    SemanticRepeat,
    Cycle,
    SameError,
    ResultRepeat,
    SimilarResponse,
    ContentLoop,
    CollaborationLoop,
    StepLimit,
    TransitionCycle,
    Regression,
    Budget,
}

impl LoopKind {
    pub const ALL: [LoopKind; 13] = [
        LoopKind::None,
        LoopKind::ExactRepeat,
        LoopKind::SemanticRepeat,
        LoopKind::Cycle,
        LoopKind::SameError,
        LoopKind::ResultRepeat,
        LoopKind::SimilarResponse,
        LoopKind::ContentLoop,
        LoopKind::CollaborationLoop,
        LoopKind::StepLimit,
        LoopKind::TransitionCycle,
        LoopKind::Regression,
        LoopKind::Budget,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LoopKind::None => "none",
            LoopKind::ExactRepeat => "exact_repeat",
            LoopKind::SemanticRepeat => "semantic_repeat",
            LoopKind::Cycle => "cycle",
            LoopKind::SameError => "same_error",
            LoopKind::ResultRepeat => "result_repeat",
            LoopKind::SimilarResponse => "similar_response",
            LoopKind::ContentLoop => "content_loop",
            LoopKind::CollaborationLoop => "collaboration_loop",
            LoopKind::StepLimit => "step_limit",
            LoopKind::TransitionCycle => "transition_cycle",
            LoopKind::Regression => "regression",
            LoopKind::Budget => "budget",
        }
    }

    pub fn parse(s: &str) -> Option<LoopKind> {
        LoopKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for LoopKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the orchestrator should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActionType {
    Continue,
    Warn,
    RetryWithHint,
    Pivot,
    Escalate,
    /// The gate: paused for human intervention.
    Pause,
    Terminate,
}

impl ActionType {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionType::Continue => "continue",
            ActionType::Warn => "warn",
            ActionType::RetryWithHint => "retry_with_hint",
            ActionType::Pivot => "pivot",
            ActionType::Escalate => "escalate",
            ActionType::Pause => "pause",
            ActionType::Terminate => "terminate",
        }
    }
}

/// Who an escalation goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EscalationTarget {
    User,
    Planner,
    Leader,
}

impl EscalationTarget {
    pub fn as_str(self) -> &'static str {
        match self {
            EscalationTarget::User => "user",
            EscalationTarget::Planner => "planner",
            EscalationTarget::Leader => "leader",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Action {
    #[serde(rename = "type")]
    pub kind: ActionType,
    pub target: Option<EscalationTarget>,
    /// Text to hand the agent or the human: a warning, a hint, the pivot directive.
    pub message: Option<String>,
}

impl Action {
    pub fn proceed() -> Self {
        Action {
            kind: ActionType::Continue,
            target: None,
            message: None,
        }
    }
}

/// The earlier event an event was matched with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Matched {
    pub seq: u64,
    /// The earlier event's text as loopguard compared it (normalised, trimmed).
    pub text: String,
    pub similarity: Option<f32>,
}

/// The signature of the event as loopguard saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SignatureView {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_type: Option<ErrorType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    pub normalized: String,
    pub hash: String,
}

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

/// What the LLM judge said, when it was asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JudgeReport {
    pub status: JudgeStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<JudgeVerdict>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// True when the deterministic fallback decided instead of the judge.
    pub fallback: bool,
}

/// Whether the task can go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    #[default]
    Active,
    /// The gate fired (or MAX_PIVOTS was exceeded): waiting for a human.
    Paused,
    /// The global budget is spent.
    Terminated,
}

/// One event's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Verdict {
    pub task_id: String,
    /// Position of the event in its root task, from 1.
    pub seq: u64,
    #[serde(rename = "loop")]
    pub is_loop: bool,
    pub kind: LoopKind,
    pub loop_count: u32,
    /// Whether this event moved the loop counter (external failures never do).
    pub counted: bool,
    /// A loop: how alike the event and the one it repeats are (`None` when decided on keys).
    /// Not a loop: the same for the closest earlier event in `matched`.
    pub similarity: Option<f32>,
    /// A loop: the earlier event it repeats. Not a loop: the earlier event it came closest to
    /// repeating (the same event that no detector counted, or a similarity in the grey band or
    /// above), when there is one — the near miss.
    pub matched: Option<Matched>,
    pub signature: Option<SignatureView>,
    pub action: Action,
    pub reason: String,
    /// The detection rule behind the verdict (`dead_end.same_attempt`, `judge.redone_calls`;
    /// `loopguard rules` lists them): for a loop, the rule that found it; otherwise the rule
    /// whose finding progress vetoed or whose judge question was answered "not a loop", or
    /// none.
    #[serde(default)]
    pub rule: Option<String>,
    pub judge: Option<JudgeReport>,
    pub pivot_count: u32,
    pub status: TaskStatus,
    /// For a loop: the closest loops seen in *other* tasks, with how they were resolved
    /// (cross-task loop memory, docs/MEMORY.md). Absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub similar_loops: Vec<SimilarLoop>,
    /// A collaboration message: the artifacts it carries (programs, files, documents in fenced
    /// blocks) and how each changed since its latest version — lines added and removed, and
    /// where. Absent when it carries none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<crate::signature::artifact::ArtifactChange>,
}

/// How a task's loop was resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Resolution {
    /// `success` or `human_intervention`.
    pub result: String,
    pub note: Option<String>,
    /// Unix seconds.
    pub ts: i64,
}

/// A stored loop close to a query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SimilarLoop {
    pub task_id: String,
    pub kind: LoopKind,
    pub tool: Option<String>,
    pub text: String,
    pub similarity: f32,
    /// RFC 3339.
    pub seen_at: String,
    pub resolution: Option<Resolution>,
}
