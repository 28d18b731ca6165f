//! Shared helpers for integration tests: the real model (loaded once per test binary), configs,
//! and event builders.
#![allow(dead_code)]

use loopguard::event::parse_envelope_value;
use loopguard::verdict::Verdict;
use loopguard::{Config, Embedder, Engine, Envelope};
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};

/// The real all-MiniLM-L6-v2 model. Tests that depend on similarity use it; a missing model is
/// a test failure that says how to fetch it, never a skip.
pub fn model() -> Embedder {
    static MODEL: OnceLock<Embedder> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            Embedder::load_model(&Config::default().model)
                .unwrap_or_else(|e| panic!("these tests run the real model: {e}"))
        })
        .clone()
}

pub fn seed_config(n: u32) -> Config {
    let path = format!("docs/seeds/seed{n:03}.toml");
    Config::from_file(std::path::Path::new(&path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn engine(cfg: Config) -> Engine {
    Engine::new(Arc::new(cfg), model())
}

/// An envelope for `task` around a bare event.
pub fn ev(task: &str, event: Value) -> Envelope {
    parse_envelope_value(json!({"task_id": task, "event": event})).expect("valid test event")
}

/// A full envelope.
pub fn env(value: Value) -> Envelope {
    parse_envelope_value(value).expect("valid test envelope")
}

pub fn failure(task: &str, message: &str) -> Envelope {
    ev(task, json!({"type": "failure", "message": message}))
}

pub fn call(task: &str, tool: &str, args: Value) -> Envelope {
    ev(
        task,
        json!({"type": "tool_call", "tool": tool, "args": args}),
    )
}

pub fn call_with(task: &str, tool: &str, args: Value, output: &str, is_error: bool) -> Envelope {
    ev(
        task,
        json!({"type": "tool_call", "tool": tool, "args": args,
               "result": {"output": output, "is_error": is_error}}),
    )
}

pub fn response(task: &str, text: &str) -> Envelope {
    ev(task, json!({"type": "response", "text": text}))
}

pub fn collab(task: &str, from: &str, to: &str, request: &str) -> Envelope {
    ev(
        task,
        json!({"type": "collaboration", "from_agent": from, "to_agent": to, "request": request}),
    )
}

pub async fn feed(engine: &Engine, events: Vec<Envelope>) -> Vec<Verdict> {
    let mut out = Vec::new();
    for e in events {
        out.push(engine.evaluate(e).await.expect("evaluate"));
    }
    out
}

pub fn loops(verdicts: &[Verdict]) -> Vec<bool> {
    verdicts.iter().map(|v| v.is_loop).collect()
}
