//! loopguard: tells an LLM-agent orchestrator, event by event, whether its agent is stuck in a
//! loop — also when the agent rewords what it repeats — and what to do next.
//!
//! # Layout
//!
//! - [`event`]: events in (the envelope and the seven event types), parsed with JSON paths in errors.
//! - [`signature`]: failure signatures, normalisation of volatile text, canonical JSON, test metrics.
//! - [`observe`]: an event turned into what the engine keeps and compares.
//! - [`embed`]: local embeddings; one thread owns the model, callers are batched, texts cached.
//! - [`detect`]: the detectors, each a small unit, and identity matching (exact, normalised, semantic).
//! - [`policy`]: loop counter, pivot directive, gate, per-kind ladders; the audit trail.
//! - [`state`]: per-task state (window, counters), shared by a task and its subtasks.
//! - [`store`]: where task state lives between events.
//! - [`judge`]: the LLM-judge hook for ambiguous cases.
//! - [`memory`]: cross-task loop memory (HNSW over loops seen, with their resolutions).
//! - [`feedback`]: false positives and missed loops reported by users, exported for calibration.
//! - [`engine`]: one event in, one verdict out.
//! - [`verdict`]: verdicts out.
//! - [`config`]: one configuration type for file, environment and flags.
//! - [`score`]: batch scoring of recorded runs (`loopguard score`).
//! - [`calibrate`]: threshold calibration on labelled pairs and runs (`loopguard calibrate`).
//! - [`eval`]: detection measured on labelled runs and healthy controls (`loopguard eval`).

pub mod calibrate;
pub mod config;
pub mod detect;
pub mod embed;
pub mod engine;
pub mod eval;
pub mod event;
pub mod feedback;
pub mod judge;
pub mod memory;
pub mod observe;
pub mod policy;
pub mod score;
pub mod signature;
pub mod state;
pub mod store;
pub mod verdict;

pub use config::Config;
pub use embed::Embedder;
pub use engine::Engine;
pub use event::{Envelope, Event};
pub use verdict::Verdict;
