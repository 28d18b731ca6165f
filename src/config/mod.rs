//! One configuration type for the reference file, your file, the environment and flags.
//!
//! The commented reference file `loopguard.toml` is compiled in and is the default. A user file
//! is merged over it, then `LOOPGUARD_SECTION__KEY` environment variables, then flag overrides;
//! the merged document is deserialised once, strictly: unknown keys are rejected with their path.

mod redact;
pub use redact::{redact_database_url, REDACTED};
pub(crate) use redact::{redact_query, redact_userinfo};

use crate::signature::ErrorType;
use crate::verdict::{ActionType, EscalationTarget, LoopKind};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The reference configuration, compiled in.
pub const REFERENCE_TOML: &str = include_str!("../../loopguard.toml");

/// Prefix of environment variables that set configuration keys.
pub const ENV_PREFIX: &str = "LOOPGUARD_";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub model: ModelConfig,
    pub detect: DetectConfig,
    pub policy: PolicyConfig,
    pub judge: JudgeConfig,
    pub memory: MemoryConfig,
    pub server: ServerConfig,
    pub otlp: OtlpConfig,
    pub feedback: FeedbackConfig,
}

/// How much feedback on verdicts is kept (`POST /v1/feedback`, docs/MEMORY.md): past either
/// bound the oldest records are dropped (of the task, or of all).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedbackConfig {
    pub max_records: usize,
    pub max_per_task: usize,
}

/// OTLP/HTTP traces in (`POST /v1/traces`, docs/INTEGRATIONS.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpConfig {
    /// The span (or resource) attribute whose value is the task id, e.g.
    /// `gen_ai.conversation.id`; empty, or absent on a span: the span's trace id.
    pub task_attribute: String,
    /// Largest request body, compressed or not (exporters batch hundreds of spans).
    pub max_body_bytes: usize,
    /// What one request may hold, counted while it is decoded (a body's memory is bounded by
    /// these, not by its size): spans; attributes of any kind (resource, scope, span, event,
    /// link) and the values nested in them; span events and links; resource and scope blocks.
    pub max_spans: usize,
    pub max_attributes: usize,
    pub max_events: usize,
    pub max_blocks: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    pub enabled: bool,
    pub max_records: usize,
    pub k: usize,
    pub min_similarity: f32,
    pub dedupe_similarity: f32,
    pub exact_search_max_records: usize,
    pub max_connections: usize,
    pub ef_construction: usize,
    pub ef_search: usize,
    /// With a shared store: how often each replica reads the loops the others remembered.
    pub sync_interval_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub addr: String,
    /// Where task states, audit trails, loop memory and feedback live.
    pub store: StoreKind,
    pub data_dir: PathBuf,
    /// The embedded store's task log: segment size before a snapshot replaces older segments.
    pub task_log_segment_bytes: u64,
    /// The embedded store's task log: audit records kept per task (the newest).
    pub task_log_audit_kept: usize,
    /// The PostgreSQL database of `store = "postgres"` (a `postgres://` URL).
    #[serde(deserialize_with = "empty_string_as_none")]
    pub database_url: Option<String>,
    /// Connections to it each replica keeps at most.
    pub database_max_connections: u32,
    /// How long an operation waits for a connection (or a lock held by another replica)
    /// before it gives up with `storage_error`.
    pub database_timeout_ms: u64,
    pub task_ttl_secs: u64,
    pub expiry_sweep_secs: u64,
    pub max_cached_tasks: usize,
    /// Subtasks linked to one root task at most; a new subtask past it is refused (409).
    pub max_subtasks: usize,
    pub max_body_bytes: usize,
    pub max_batch_events: usize,
    /// Counted in characters, as the OpenAPI document's `maxLength` is (formerly
    /// `max_text_bytes`, which still loads).
    pub max_text_chars: usize,
    pub max_name_chars: usize,
    pub max_json_depth: usize,
    pub max_header_bytes: usize,
    pub request_timeout_ms: u64,
    pub header_read_timeout_ms: u64,
    /// A request body must arrive whole within this many milliseconds of its head.
    pub body_read_timeout_ms: u64,
    pub idle_timeout_secs: u64,
    pub max_connections: usize,
    pub max_clock_skew_secs: u64,
    pub shutdown_grace_secs: u64,
    #[serde(deserialize_with = "empty_string_as_none")]
    pub auth_token: Option<String>,
    /// Serve the dashboard page at `/`.
    pub dashboard: bool,
}

/// The kind of state store `loopguard serve` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// On local disk in `server.data_dir`: one replica per directory. `sled` is its old name.
    #[serde(alias = "sled")]
    Embedded,
    /// A PostgreSQL database shared by any number of replicas (`server.database_url`).
    Postgres,
}

fn empty_string_as_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    Ok(s.filter(|s| !s.is_empty()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelSource {
    Local,
    Hub,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub source: ModelSource,
    pub dir: PathBuf,
    #[serde(deserialize_with = "empty_as_none")]
    pub ort_dylib: Option<PathBuf>,
    /// Model workers, each an ONNX Runtime session on its own thread; 0: one per `threads`
    /// cores ([`ModelConfig::resolved_workers`]).
    pub workers: usize,
    pub threads: usize,
    pub max_tokens: usize,
    pub max_text_chars: usize,
    pub max_batch: usize,
    pub max_batch_tokens: usize,
    pub queue_capacity: usize,
    pub queue_wait_target_ms: u64,
    pub cache_entries: usize,
    #[serde(deserialize_with = "empty_as_none")]
    pub disk_cache: Option<PathBuf>,
    pub disk_cache_max_mb: u64,
}

fn empty_as_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    Ok(s.filter(|s| !s.trim().is_empty()).map(PathBuf::from))
}

impl Default for ModelConfig {
    fn default() -> Self {
        Config::default().model
    }
}

/// A relative model path is looked up in the working directory first, then in the checkout the
/// binary was built from: `models/fetch.py` writes there, and a binary started from another
/// directory (an installed `loopguard serve`, a service unit) would otherwise find no model while
/// the files sit where the README put them. Neither existing, the working directory's path is
/// kept, so the error names the place a user is most likely to put the files.
fn absolute(p: &Path) -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_default();
    absolute_from(&cwd, Path::new(env!("CARGO_MANIFEST_DIR")), p)
}

fn absolute_from(cwd: &Path, checkout: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        return p.to_path_buf();
    }
    let in_cwd = cwd.join(p);
    if in_cwd.exists() {
        return in_cwd;
    }
    let in_checkout = checkout.join(p);
    if in_checkout.exists() {
        in_checkout
    } else {
        in_cwd
    }
}

impl ModelConfig {
    /// The model directory as an absolute path.
    pub fn resolved_dir(&self) -> PathBuf {
        absolute(&self.dir)
    }

    /// The embedding cache on disk as an absolute path, `None` when switched off. A relative
    /// path is placed like the model directory, judged by its parent (`models/`): the cache
    /// itself does not exist before its first run.
    pub fn resolved_disk_cache(&self) -> Option<PathBuf> {
        let p = self.disk_cache.as_ref()?;
        if p.is_absolute() {
            return Some(p.clone());
        }
        Some(match (p.parent(), p.file_name()) {
            (Some(parent), Some(name)) if !parent.as_os_str().is_empty() => {
                absolute(parent).join(name)
            }
            _ => absolute(p),
        })
    }

    /// The model workers to start: `workers`, or when it is 0, as many as fill the cores this
    /// process may use with `threads` intra-op threads each (at least one).
    pub fn resolved_workers(&self) -> usize {
        if self.workers > 0 {
            return self.workers;
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cores / self.threads.max(1)).max(1)
    }

    /// The ONNX Runtime library: the configured path, else `$ORT_DYLIB_PATH`, else the file
    /// models/fetch.py writes. Always absolute (a relative dlopen path is resolved next to the
    /// executable, not the working directory).
    pub fn resolved_ort_dylib(&self) -> PathBuf {
        let p = self
            .ort_dylib
            .clone()
            .or_else(|| {
                std::env::var_os("ORT_DYLIB_PATH")
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            })
            .unwrap_or_else(|| PathBuf::from("models/onnxruntime/libonnxruntime.so"));
        absolute(&p)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetectConfig {
    pub window: usize,
    pub max_gap_secs: u64,
    pub passive_tools: Vec<String>,
    pub structural_match: bool,
    /// Rules of the table (`crate::detect::rules::RULES`) switched off, by id.
    #[serde(default)]
    pub rules_off: Vec<String>,
    pub enabled: EnabledDetectors,
    pub similarity: Similarity,
    pub repeats: Repeats,
    pub dead_ends: DeadEnds,
    pub cycles: Cycles,
    pub responses: Responses,
    pub collaboration: CollaborationChains,
    pub content: ContentLoops,
    pub steps: Steps,
    pub transitions: Transitions,
    pub regression: Regression,
    pub budget: Budget,
    pub external: External,
    /// Rules' own sections, `[detect.rule.<family>.<name>]` (a rule's id split at its dot): a
    /// rule's own value for a setting it shares with other rules, e.g.
    /// `[detect.rule.dead_end.same_attempt]` `dead_ends.occurrences = 4`. Only the settings the
    /// rule declares (`loopguard rules`) and the engine does not read before the table runs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rule: BTreeMap<String, BTreeMap<String, toml::Table>>,
    /// The configuration each rule with a section of its own runs with, by rule id: the rest of
    /// `[detect]` with its section merged over, settled and checked when the configuration is
    /// loaded.
    #[serde(skip)]
    pub own: std::sync::Arc<BTreeMap<String, DetectConfig>>,
}

impl DetectConfig {
    /// The configuration rule `id` runs with: its own section's, else this one.
    pub fn for_rule(&self, id: &str) -> &DetectConfig {
        self.own.get(id).unwrap_or(self)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnabledDetectors {
    pub exact_repeat: bool,
    pub semantic_repeat: bool,
    pub cycle: bool,
    pub same_error: bool,
    pub result_repeat: bool,
    pub similar_response: bool,
    #[serde(default = "yes")]
    pub content_loop: bool,
    pub collaboration_loop: bool,
    pub step_limit: bool,
    pub transition_cycle: bool,
    pub regression: bool,
    pub budget: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Similarity {
    pub failure: f32,
    pub tool_call: f32,
    pub result: f32,
    pub response: f32,
    pub collaboration: f32,
    pub grey_band: f32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Repeats {
    pub failure: usize,
    pub collaboration: usize,
    pub tool_call: usize,
    pub response: usize,
    pub negative_result: usize,
    /// Two answers that found nothing are the same dead end when what they say apart from the
    /// call's own terms overlaps this much (Dice of words, digits masked).
    #[serde(default = "nothing_found_alike")]
    pub nothing_found_alike: f32,
    pub max_between: usize,
    pub new_work_breaks: bool,
}

/// Attempts that end where earlier ones did (`detect/dead_end.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadEnds {
    /// Occurrences of the same dead end that make a loop, the first included.
    pub occurrences: usize,
    /// Cosine at which two calls are the same attempt reworded, numbers and names aside.
    pub attempt_similarity: f32,
    /// Work events searched for the same attempt ending the same way (the new one included).
    pub same_attempt_window: usize,
    /// Work events searched for a repeated step with rewordings of one change between, and for
    /// the same step re-run unchanged (`unmoved_reruns`).
    pub span_window: usize,
    /// Cosine at which two changes are the same change reworded, compared on what differs
    /// between them.
    pub change_similarity: f32,
    /// The very same call (a test or a script, unchanged) run this many times within
    /// `span_window`, other work between every two runs, each run ending in exactly the same
    /// error: the changes between never reached the failure. 0 = off; below `occurrences` it
    /// counts as `occurrences`.
    #[serde(default)]
    pub unmoved_reruns: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cycles {
    pub min_period: usize,
    pub max_period: usize,
    pub repetitions: usize,
    /// A cycle counts once its newest action has been done this many times in the window,
    /// itself included (A,B,A,B then A at 3; at 2, A,B,A,B). 0 or 1 = as soon as the pattern
    /// repeats.
    #[serde(default)]
    pub occurrences: usize,
    /// Longer blocks of work replayed: periods above `max_period` up to this one.
    pub replay_max_period: usize,
    /// Consecutive events that must repeat their counterpart one long period back.
    pub replay_streak: usize,
    /// The same, when one of those events re-hits an error (or a "nothing found") its
    /// counterpart hit: a replay back into a dead end. 0 uses `replay_streak` alone.
    #[serde(default)]
    pub replay_streak_at_a_dead_end: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Responses {
    pub window: usize,
}

/// Collaboration chains (`detect/collaboration.rs`): requests between agents and the artifacts
/// they carry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollaborationChains {
    /// A message of at most this many words (markup tags aside) and no artifact is a protocol
    /// turn ("Finished.", "OK"): not a request, never the same as anything.
    pub protocol_words: usize,
    /// Occurrences of one request that make a loop once it was answered (a review round), and
    /// of one delivery re-sent unanswered with every artifact unchanged.
    pub occurrences: usize,
    /// Cosine at which a request that keeps coming back is the same request reworded.
    pub returning_similarity: f32,
    /// A short turn (a message or a response) at least this close to a courtesy — thanks, you're
    /// welcome, goodbye, anything else I can do — is a courtesy turn: `occurrences` of them in a
    /// row from two or more parties, with nothing else said or done, are talk going on after the
    /// work is over. Above 1 switches the rule off.
    pub courtesy_similarity: f32,
}

/// Repetition inside one response or one stream (`detect/content.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentLoops {
    /// Sentences shorter than this (words) are never counted ("Yes.", "Done.").
    pub min_sentence_words: usize,
    /// The same sentence (or block of sentences) this many times back to back is a loop...
    pub sentence_repeats: usize,
    /// ...a block being at most this many sentences.
    pub max_block_sentences: usize,
    /// A run of words repeated back to back this many times at the end of the text is a loop...
    pub run_repeats: usize,
    /// ...when the repeated runs cover at least this many words...
    pub min_run_words: usize,
    /// ...and one run is at most this many words.
    pub max_run_words: usize,
}

fn nothing_found_alike() -> f32 {
    0.3
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Steps {
    pub default: u32,
    pub limits: BTreeMap<String, u32>,
}

impl Steps {
    pub fn limit(&self, step: &str) -> u32 {
        self.limits.get(step).copied().unwrap_or(self.default)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transitions {
    pub repetitions: usize,
    pub max_period: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Regression {
    pub attempts: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    pub max_events: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct External {
    pub types: Vec<ErrorType>,
}

/// An action in a ladder: `warn`, `pivot`, `escalate:planner`, ...
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActionSpec {
    pub kind: ActionType,
    pub target: Option<EscalationTarget>,
}

impl ActionSpec {
    pub const fn new(kind: ActionType) -> Self {
        ActionSpec { kind, target: None }
    }
}

impl std::str::FromStr for ActionSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (head, target) = match s.split_once(':') {
            Some((h, t)) => (h, Some(t)),
            None => (s, None),
        };
        let kind = match head {
            "continue" => ActionType::Continue,
            "warn" => ActionType::Warn,
            "retry_with_hint" => ActionType::RetryWithHint,
            "pivot" => ActionType::Pivot,
            "escalate" => ActionType::Escalate,
            "pause" => ActionType::Pause,
            "terminate" => ActionType::Terminate,
            other => {
                return Err(format!(
                    "unknown action `{other}`; expected continue, warn, retry_with_hint, pivot, \
                     escalate:user|planner|leader, pause or terminate"
                ))
            }
        };
        let target = match (kind, target) {
            (ActionType::Escalate, None) => Some(EscalationTarget::User),
            (ActionType::Escalate, Some("user")) => Some(EscalationTarget::User),
            (ActionType::Escalate, Some("planner")) => Some(EscalationTarget::Planner),
            (ActionType::Escalate, Some("leader")) => Some(EscalationTarget::Leader),
            (ActionType::Escalate, Some(t)) => {
                return Err(format!(
                    "unknown escalation target `{t}`; expected user, planner or leader"
                ))
            }
            (_, None) => None,
            (k, Some(_)) => {
                return Err(format!(
                    "only escalate takes a target, not `{}`",
                    k.as_str()
                ))
            }
        };
        Ok(ActionSpec { kind, target })
    }
}

impl std::fmt::Display for ActionSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.target {
            Some(t) => write!(f, "{}:{}", self.kind.as_str(), t.as_str()),
            None => f.write_str(self.kind.as_str()),
        }
    }
}

impl<'de> Deserialize<'de> for ActionSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for ActionSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    pub gate_at: u32,
    pub pivot_at: u32,
    pub repivot_at: u32,
    pub max_pivots: u32,
    pub ladder: Vec<ActionSpec>,
    pub external: Vec<ActionSpec>,
    pub kinds: BTreeMap<LoopKindKey, Vec<ActionSpec>>,
}

/// A loop kind used as a table key (`step_limit = [...]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LoopKindKey(pub LoopKind);

impl<'de> Deserialize<'de> for LoopKindKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match LoopKind::parse(&s) {
            Some(LoopKind::None) | None => Err(serde::de::Error::custom(format!(
                "unknown loop kind `{s}` (see docs/DETECTION.md for the codes)"
            ))),
            Some(k) => Ok(LoopKindKey(k)),
        }
    }
}

impl Serialize for LoopKindKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.as_str())
    }
}

impl PolicyConfig {
    /// The kind's own ladder; an empty list in the config removes a default one.
    pub fn kind_ladder(&self, kind: LoopKind) -> Option<&[ActionSpec]> {
        self.kinds
            .get(&LoopKindKey(kind))
            .map(Vec::as_slice)
            .filter(|l| !l.is_empty())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JudgeKind {
    /// No judge: ambiguous cases get the fallback.
    None,
    /// An OpenAI-compatible chat-completions server (OpenAI, vLLM, llama.cpp, Ollama).
    Openai,
    /// A URL of the user's that receives the evidence as JSON and answers a verdict.
    Webhook,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    NoLoop,
    Loop,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeConfig {
    pub kind: JudgeKind,
    pub fallback: Fallback,
    pub ask_after_failures: u32,
    /// Ask about the very same calls as just before (up to `detect.cycles.max_period` of them)
    /// whose outputs changed but barely: each pair of outputs at least this alike (words in
    /// common, digits masked: [`crate::detect::cycle::overlap`]). 0 = never.
    #[serde(default)]
    pub redone_result_overlap: f32,
    /// Ask about a call that timed out when this many calls timed out within
    /// `detect.dead_ends.span_window` work events, whatever was between. 0 = never.
    #[serde(default)]
    pub ask_after_timeouts: usize,
    pub url: String,
    pub model: String,
    pub api_key_env: String,
    pub timeout_ms: u64,
    pub retries: u32,
    pub backoff_ms: u64,
    pub max_calls_per_task: u32,
    pub cache_entries: usize,
    pub breaker_failures: u32,
    pub breaker_cooldown_secs: u64,
    pub max_evidence_events: usize,
    pub max_evidence_chars: usize,
    pub temperature: f32,
}

/// A configuration problem, with where it came from and the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}: not valid TOML: {message}")]
    Syntax { origin: String, message: String },
    #[error("config key `{path}`: {message}")]
    Invalid { path: String, message: String },
}

#[cfg(test)]
mod tests;
