//! loopguard: tells an LLM-agent orchestrator, event by event, whether its agent is stuck in a
//! loop — also when the agent rewords what it repeats — and what to do next.
//!
//! # Layout
//!
//! Events flow top to bottom; docs/ARCHITECTURE.md has the whole picture.
//!
//! - [`event`]: events in (the envelope and the seven event types), parsed with JSON paths in errors.
//! - [`json`]: JSON text parsed strictly (a key named twice is an error, with its path).
//! - [`signature`]: failure signatures, normalisation of volatile text, canonical JSON, test metrics.
//! - [`embed`]: local embeddings; one thread owns the model, callers are batched, texts cached.
//! - `detect`: identity matching (exact, normalised, semantic) and the detectors, one file each.
//! - [`engine`]: one event in, one verdict out — the pipeline, one file per stage (observe, link,
//!   detect, veto, judge, policy, commit), the per-task locks and the task lifecycle.
//! - [`state`]: per-task state (window, counters), shared by a task and its subtasks.
//! - [`store`]: where task state lives between events.
//! - [`audit`]: the audit trail, and the one place its records become log lines and metrics.
//! - [`judge`]: the LLM-judge hook for ambiguous cases.
//! - [`loop_memory`]: cross-task loop memory (HNSW over loops seen, with their resolutions).
//! - [`feedback`]: false positives and missed loops reported by users, exported for calibration.
//! - [`verdict`]: verdicts out.
//! - [`config`]: one configuration type for file, environment and flags.
//! - [`retry`]: how long to wait before trying a refused call again (backoff with a floor and a
//!   cap, whatever the server asks).
//! - [`score`]: batch scoring of recorded runs (`loopguard score`), and its HTML report.
//! - [`calibrate`]: threshold calibration on labelled pairs and runs (`loopguard calibrate`).
//! - [`eval`]: detection measured on labelled runs and healthy controls (`loopguard eval`).

pub mod audit;
pub mod calibrate;
pub mod config;
// Loading and checking a configuration: above the config types every module reads, and above
// the rule table whose ids `detect.rules_off` must name.
mod config_load;
pub(crate) mod detect;
pub mod embed;
pub mod engine;
pub mod eval;
pub mod event;
pub mod feedback;
pub mod json;
pub mod judge;
pub mod loop_memory;
pub mod retry;
pub mod score;
pub mod signature;
pub mod state;
pub mod store;
pub mod verdict;

/// The detection rules and judge questions, in priority order (`loopguard rules`).
pub use detect::rules;

pub use config::Config;
pub use embed::Embedder;
pub use engine::Engine;
pub use event::{Envelope, Event};
pub use verdict::Verdict;
