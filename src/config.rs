//! One configuration type for the reference file, your file, the environment and flags.
//!
//! The commented reference file `loopguard.toml` is compiled in and is the default. A user file
//! is merged over it, then `LOOPGUARD_SECTION__KEY` environment variables, then flag overrides;
//! the merged document is deserialised once, strictly: unknown keys are rejected with their path.

use crate::signature::ErrorType;
use crate::verdict::{ActionType, EscalationTarget, LoopKind};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The reference configuration, compiled in.
pub const REFERENCE_TOML: &str = include_str!("../loopguard.toml");

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
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub addr: String,
    pub data_dir: PathBuf,
    pub task_ttl_secs: u64,
    pub expiry_sweep_secs: u64,
    pub max_cached_tasks: usize,
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
    pub idle_timeout_secs: u64,
    pub max_connections: usize,
    pub max_clock_skew_secs: u64,
    pub shutdown_grace_secs: u64,
    #[serde(deserialize_with = "empty_string_as_none")]
    pub auth_token: Option<String>,
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
    pub threads: usize,
    pub max_tokens: usize,
    pub max_text_chars: usize,
    pub max_batch: usize,
    pub max_batch_tokens: usize,
    pub queue_capacity: usize,
    pub queue_wait_target_ms: u64,
    pub cache_entries: usize,
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

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

impl ModelConfig {
    /// The model directory as an absolute path.
    pub fn resolved_dir(&self) -> PathBuf {
        absolute(&self.dir)
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
    pub enabled: EnabledDetectors,
    pub similarity: Similarity,
    pub repeats: Repeats,
    pub cycles: Cycles,
    pub responses: Responses,
    pub steps: Steps,
    pub transitions: Transitions,
    pub regression: Regression,
    pub budget: Budget,
    pub external: External,
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
    pub max_between: usize,
    pub new_work_breaks: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cycles {
    pub min_period: usize,
    pub max_period: usize,
    pub repetitions: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Responses {
    pub window: usize,
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

impl Default for Config {
    fn default() -> Self {
        Config::from_table(reference_table()).expect("the reference config loopguard.toml is valid")
    }
}

fn reference_table() -> toml::Table {
    REFERENCE_TOML
        .parse::<toml::Table>()
        .expect("the reference config loopguard.toml is valid TOML")
}

/// Keys that were renamed keep working: a user's old name overrides the default under the new
/// one.
fn rename_old_keys(table: &mut toml::Table) {
    if let Some(toml::Value::Table(server)) = table.get_mut("server") {
        if let Some(v) = server.remove("max_text_bytes") {
            server.insert("max_text_chars".into(), v);
        }
    }
}

/// Merge `over` into `base`: tables merge key by key, everything else replaces.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Parse an override value the way TOML would; anything that is not a TOML value is a string.
fn parse_value(raw: &str) -> toml::Value {
    format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

fn set_path(table: &mut toml::Table, path: &[&str], value: toml::Value) {
    let (last, parents) = path.split_last().expect("non-empty key path");
    let mut t = table;
    for p in parents {
        let entry = t
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        t = entry.as_table_mut().expect("just made a table");
    }
    t.insert(last.to_string(), value);
}

impl Config {
    fn from_table(table: toml::Table) -> Result<Config, ConfigError> {
        let value = toml::Value::Table(table);
        let config: Config = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            ConfigError::Invalid {
                path,
                message: e.into_inner().to_string(),
            }
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Parse a TOML document merged over the defaults.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        Config::load(Some(("<string>", text)), std::iter::empty(), &[])
    }

    /// Read a config file merged over the defaults (no environment).
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::load(
            Some((&path.display().to_string(), &text)),
            std::iter::empty(),
            &[],
        )
    }

    /// The full precedence chain: defaults < file < environment (`LOOPGUARD_A__B=value`) <
    /// overrides (`("a.b", "value")`, from flags).
    pub fn load(
        file: Option<(&str, &str)>,
        env: impl Iterator<Item = (String, String)>,
        overrides: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        let mut table = reference_table();
        if let Some((origin, text)) = file {
            let user = text
                .parse::<toml::Table>()
                .map_err(|e| ConfigError::Syntax {
                    origin: origin.to_string(),
                    message: e.to_string(),
                })?;
            merge(&mut table, user);
        }
        for (key, raw) in env {
            let Some(rest) = key.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let path: Vec<String> = rest.split("__").map(|p| p.to_ascii_lowercase()).collect();
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            // LOOPGUARD_ variables that name no config section (LOOPGUARD_LOG, ...) belong to
            // the binary, not to the config.
            if path.len() < 2 || !table.contains_key(path[0]) {
                continue;
            }
            set_path(&mut table, &path, parse_value(&raw));
        }
        for (key, raw) in overrides {
            let path: Vec<&str> = key.split('.').collect();
            set_path(&mut table, &path, parse_value(raw));
        }
        rename_old_keys(&mut table);
        Config::from_table(table)
    }

    /// Load with the process environment.
    pub fn load_with_env(
        file: Option<&Path>,
        overrides: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        let text;
        let origin;
        let file = match file {
            Some(path) => {
                text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                origin = path.display().to_string();
                Some((origin.as_str(), text.as_str()))
            }
            None => None,
        };
        Config::load(file, std::env::vars(), overrides)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |path: &str, message: String| {
            Err(ConfigError::Invalid {
                path: path.to_string(),
                message,
            })
        };
        let s = &self.detect.similarity;
        for (name, v) in [
            ("failure", s.failure),
            ("tool_call", s.tool_call),
            ("result", s.result),
            ("response", s.response),
            ("collaboration", s.collaboration),
        ] {
            // Above 1.0 is allowed: it switches semantic matching off for that kind.
            if !(-1.0..=2.0).contains(&v) {
                return bad(
                    &format!("detect.similarity.{name}"),
                    format!("a cosine threshold must be in -1..1 (above 1 disables it), got {v}"),
                );
            }
        }
        if !(0.0..=1.0).contains(&s.grey_band) {
            return bad(
                "detect.similarity.grey_band",
                format!("must be in 0..1, got {}", s.grey_band),
            );
        }
        let c = &self.detect.cycles;
        if c.min_period < 2 || c.max_period < c.min_period {
            return bad(
                "detect.cycles",
                format!(
                    "need 2 <= min_period <= max_period, got {}..{}",
                    c.min_period, c.max_period
                ),
            );
        }
        if c.repetitions < 2 {
            return bad("detect.cycles.repetitions", "must be at least 2".into());
        }
        if self.detect.window < 2 {
            return bad("detect.window", "must be at least 2".into());
        }
        if self.detect.window < c.max_period * c.repetitions {
            return bad(
                "detect.window",
                format!(
                    "must hold max_period × repetitions = {} events to see a cycle, got {}",
                    c.max_period * c.repetitions,
                    self.detect.window
                ),
            );
        }
        if self.detect.transitions.repetitions < 2 || self.detect.transitions.max_period < 1 {
            return bad(
                "detect.transitions",
                "need repetitions >= 2 and max_period >= 1".into(),
            );
        }
        if self.detect.regression.attempts < 2 {
            return bad("detect.regression.attempts", "must be at least 2".into());
        }
        for (name, r) in [
            ("failure", self.detect.repeats.failure),
            ("collaboration", self.detect.repeats.collaboration),
            ("tool_call", self.detect.repeats.tool_call),
            ("response", self.detect.repeats.response),
            ("negative_result", self.detect.repeats.negative_result),
        ] {
            if r == 0 {
                return bad(
                    &format!("detect.repeats.{name}"),
                    "must be at least 1 (an event cannot repeat nothing)".into(),
                );
            }
        }
        if self.policy.ladder.is_empty() {
            return bad("policy.ladder", "needs at least one action".into());
        }
        if self.policy.external.is_empty() {
            return bad("policy.external", "needs at least one action".into());
        }
        if self.model.threads == 0 || self.model.max_batch == 0 || self.model.cache_entries == 0 {
            return bad(
                "model",
                "threads, max_batch and cache_entries must be at least 1".into(),
            );
        }
        let j = &self.judge;
        if j.kind != JudgeKind::None && j.url.trim().is_empty() {
            return bad("judge.url", "a judge needs a URL".into());
        }
        if j.kind == JudgeKind::Openai && j.model.trim().is_empty() {
            return bad("judge.model", "the openai judge needs a model name".into());
        }
        if j.kind != JudgeKind::None
            && !(j.url.starts_with("http://") || j.url.starts_with("https://"))
        {
            return bad(
                "judge.url",
                format!("must start with http:// or https://, got `{}`", j.url),
            );
        }
        if j.timeout_ms == 0 || j.timeout_ms >= self.server.request_timeout_ms {
            return bad(
                "judge.timeout_ms",
                format!(
                    "must be above 0 and below server.request_timeout_ms ({}) so a slow judge never times out the request",
                    self.server.request_timeout_ms
                ),
            );
        }
        let s = &self.server;
        if s.addr.parse::<std::net::SocketAddr>().is_err() {
            return bad(
                "server.addr",
                format!("must be IP:PORT (e.g. 127.0.0.1:8080), got `{}`", s.addr),
            );
        }
        if s.max_body_bytes < 1024 || s.max_batch_events == 0 || s.max_json_depth < 2 {
            return bad(
                "server",
                "max_body_bytes >= 1024, max_batch_events >= 1 and max_json_depth >= 2".into(),
            );
        }
        // A task id is 1..256 characters by contract, so names and texts hold at least that.
        if s.max_name_chars < 256 || s.max_text_chars < s.max_name_chars {
            return bad(
                "server",
                format!(
                    "need 256 <= max_name_chars <= max_text_chars, got {} and {}",
                    s.max_name_chars, s.max_text_chars
                ),
            );
        }
        // hyper's smallest read buffer: a request head must fit in it.
        if s.max_header_bytes < 8192 {
            return bad(
                "server.max_header_bytes",
                format!("must be at least 8192, got {}", s.max_header_bytes),
            );
        }
        if s.max_connections == 0 || s.header_read_timeout_ms == 0 || s.idle_timeout_secs == 0 {
            return bad(
                "server",
                "max_connections, header_read_timeout_ms and idle_timeout_secs must be at least 1"
                    .into(),
            );
        }
        if self.model.queue_capacity == 0 || self.model.queue_wait_target_ms == 0 {
            return bad(
                "model",
                "queue_capacity and queue_wait_target_ms must be at least 1".into(),
            );
        }
        if self.model.max_text_chars < 16 {
            return bad("model.max_text_chars", "must be at least 16".into());
        }
        Ok(())
    }

    /// The configuration as TOML, secrets included: print [`Config::redacted`] instead.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a config serialises")
    }

    /// The configuration with secrets replaced, for logs and `loopguard config`: the auth token,
    /// and credentials written into the judge's URL (`https://user:key@host/...`).
    pub fn redacted(&self) -> Config {
        let mut c = self.clone();
        if c.server.auth_token.is_some() {
            c.server.auth_token = Some(REDACTED.into());
        }
        c.judge.url = redact_userinfo(&c.judge.url);
        c
    }
}

/// What a secret is replaced with when the configuration is shown.
pub const REDACTED: &str = "<redacted>";

fn redact_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{REDACTED}@{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_hides_the_token_and_url_credentials() {
        let mut c = Config::default();
        c.server.auth_token = Some("s3cret".into());
        c.judge.url = "https://bob:k3y@judge.example/v1?x=@".into();
        let shown = c.redacted().to_toml();
        assert!(
            !shown.contains("s3cret") && !shown.contains("k3y"),
            "{shown}"
        );
        assert!(
            shown.contains("https://<redacted>@judge.example/v1?x=@"),
            "{shown}"
        );
        assert_eq!(redact_userinfo("http://host:80/a@b"), "http://host:80/a@b");
        assert_eq!(Config::default().redacted(), Config::default());
    }

    #[test]
    fn the_old_text_limit_key_still_loads() {
        let c = Config::from_toml_str("[server]\nmax_text_bytes = 5000\n").unwrap();
        assert_eq!(c.server.max_text_chars, 5000);
    }

    #[test]
    fn reference_config_parses_and_is_the_default() {
        let c = Config::default();
        assert_eq!(c.policy.gate_at, 3);
        assert_eq!(c.policy.max_pivots, 2);
        assert_eq!(c.detect.steps.limit("worker"), 3);
        assert_eq!(c.detect.steps.limit("anything"), 5);
        assert_eq!(
            c.policy.kind_ladder(LoopKind::TransitionCycle).unwrap()[0].to_string(),
            "escalate:planner"
        );
        // Round trip: the effective config printed at start-up parses back to the same value.
        assert_eq!(Config::from_toml_str(&c.to_toml()).unwrap(), c);
    }

    #[test]
    fn file_env_and_overrides_in_order() {
        let env = vec![
            (
                "LOOPGUARD_DETECT__SIMILARITY__FAILURE".to_string(),
                "0.7".to_string(),
            ),
            (
                "LOOPGUARD_POLICY__LADDER".to_string(),
                r#"["warn", "terminate"]"#.to_string(),
            ),
            ("LOOPGUARD_LOG".to_string(), "debug".to_string()),
            ("UNRELATED".to_string(), "x".to_string()),
        ];
        let file = "[detect.similarity]\nfailure = 0.6\ntool_call = 0.5\n";
        let c = Config::load(
            Some(("f.toml", file)),
            env.into_iter(),
            &[("policy.gate_at".into(), "5".into())],
        )
        .unwrap();
        assert_eq!(c.detect.similarity.failure, 0.7); // env beats file
        assert_eq!(c.detect.similarity.tool_call, 0.5); // file beats default
        assert_eq!(c.policy.gate_at, 5); // flag
        assert_eq!(c.policy.ladder[1].kind, ActionType::Terminate);
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_path() {
        let err = Config::from_toml_str("[detect.similarity]\nfailur = 0.9\n").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("detect.similarity") && msg.contains("failur"),
            "{msg}"
        );
        let err = Config::from_toml_str("[policy]\nladder = [\"dance\"]\n").unwrap_err();
        assert!(err.to_string().contains("unknown action `dance`"), "{err}");
        let err = Config::from_toml_str("[policy.kinds]\nloopy = [\"warn\"]\n").unwrap_err();
        assert!(
            err.to_string().contains("unknown loop kind `loopy`"),
            "{err}"
        );
        let err = Config::from_toml_str("[detect]\nwindow = 3\n").unwrap_err();
        assert!(err.to_string().contains("detect.window"), "{err}");
        let err = Config::from_toml_str("not toml [").unwrap_err();
        assert!(matches!(err, ConfigError::Syntax { .. }));
    }

    #[test]
    fn action_specs_parse() {
        let a: ActionSpec = "escalate:planner".parse().unwrap();
        assert_eq!(a.target, Some(EscalationTarget::Planner));
        assert!("warn:user".parse::<ActionSpec>().is_err());
        assert!("escalate:nobody".parse::<ActionSpec>().is_err());
    }
}
