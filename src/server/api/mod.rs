//! loopguard's own API: evaluation, tasks, loops, feedback and the operations probes. Bodies
//! and parameters are read by `http`'s helpers (not by axum's extractors) so every rejection is
//! our JSON error with a code and a path; `validate` holds the limit of every body field, and
//! `openapi` the document, which lists every route of every layer.

pub mod evaluate;
pub mod feedback;
pub mod loops;
pub mod openapi;
pub mod operations;
pub mod tasks;
pub mod validate;
