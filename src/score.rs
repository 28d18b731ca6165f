//! Batch scoring of recorded runs (`loopguard score`): JSONL in, one JSON line per run out.
//!
//! Each run is scored by a fresh engine (fresh task state) sharing one embedder, so runs scored
//! concurrently feed the model's batches. Runs are read one by one and only `jobs × 2` are in
//! flight, so memory does not grow with the number of runs; output keeps the input order.
//! [`html`] writes the same results as a page a person can read.

pub mod html;

use crate::config::Config;
use crate::embed::Embedder;
use crate::engine::{Engine, EngineError};
use crate::event::{parse_envelope_value, parse_event_value, Envelope, InputError};
use crate::verdict::{LoopKind, Verdict};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::sync::Arc;

/// A recorded run: `{"id": "...", "events": [...]}`; other top-level fields are ignored.
#[derive(Debug, Clone)]
pub struct Run {
    pub id: String,
    pub events: Vec<Envelope>,
    /// `"loop"` / `"no_loop"` when the run is labelled (calibration input).
    pub label: Option<bool>,
}

/// A run's score.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunScore {
    pub id: String,
    #[serde(rename = "loop")]
    pub is_loop: bool,
    /// 0-based index of the first event whose verdict is a loop.
    pub first_loop_index: Option<usize>,
    pub max_loop_count: u32,
    /// Loop kinds seen, in order of first appearance.
    pub kinds: Vec<LoopKind>,
    /// The rules that found them (`loopguard rules`), in order of first appearance.
    #[serde(default)]
    pub rules: Vec<String>,
    pub verdicts: Vec<Verdict>,
}

/// A problem with the input, located by line and JSON path.
#[derive(Debug, thiserror::Error)]
pub enum ScoreError {
    #[error("line {line}: {error}")]
    Input { line: usize, error: InputError },
    #[error("line {line}: {error}")]
    Engine { line: usize, error: EngineError },
    #[error("reading input: {0}")]
    Read(std::io::Error),
    #[error("writing output: {0}")]
    Write(std::io::Error),
}

#[derive(Deserialize)]
struct RawRun {
    id: serde_json::Value,
    events: Vec<serde_json::Value>,
    #[serde(default)]
    label: Option<serde_json::Value>,
}

/// Parse one line of `score` (or `calibrate runs`) input.
pub fn parse_run(line: &str) -> Result<Run, InputError> {
    // Strict: a run that names `id` or `events` twice means two different things.
    let value = crate::json::from_str_strict(line)
        .map_err(|e| InputError::new(e.path.clone(), e.to_string()))?;
    let raw: RawRun = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        InputError::new(path, e.into_inner().to_string())
    })?;
    let id = match raw.id {
        serde_json::Value::String(s) if !s.is_empty() => s,
        serde_json::Value::Number(n) => n.to_string(),
        other => {
            return Err(InputError::new(
                "id",
                format!("must be a non-empty string or a number, got {other}"),
            ))
        }
    };
    let label = match raw.label {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) if s == "loop" => Some(true),
        Some(serde_json::Value::String(s)) if s == "no_loop" => Some(false),
        Some(other) => {
            return Err(InputError::new(
                "label",
                format!("must be \"loop\" or \"no_loop\", got {other}"),
            ))
        }
    };
    let mut events = Vec::with_capacity(raw.events.len());
    for (i, v) in raw.events.into_iter().enumerate() {
        let prefix = format!("events[{i}]");
        let is_envelope = v.get("event").is_some() && v.get("type").is_none();
        let env = if is_envelope {
            parse_envelope_value(v).map_err(|e| e.under(&prefix))?
        } else {
            Envelope::bare(
                id.clone(),
                parse_event_value(v).map_err(|e| e.under(&prefix))?,
            )
        };
        events.push(env);
    }
    Ok(Run { id, events, label })
}

/// Score one run with a fresh engine.
pub async fn score_run(
    cfg: Arc<Config>,
    embedder: Embedder,
    run: Run,
) -> Result<RunScore, EngineError> {
    score_run_judged(cfg, embedder, None, run).await
}

/// Score one run with a fresh engine that asks `judge` about ambiguous cases (without one,
/// `judge.fallback` decides them).
pub async fn score_run_judged(
    cfg: Arc<Config>,
    embedder: Embedder,
    judge: Option<Arc<dyn crate::judge::Judge>>,
    run: Run,
) -> Result<RunScore, EngineError> {
    let mut engine = Engine::new(cfg, embedder);
    if let Some(judge) = judge {
        engine = engine.with_judge(judge);
    }
    let mut verdicts = Vec::with_capacity(run.events.len());
    for env in run.events {
        verdicts.push(engine.evaluate(env).await?);
    }
    Ok(summarize(run.id, verdicts))
}

/// Build a run's score from its verdicts.
pub fn summarize(id: String, verdicts: Vec<Verdict>) -> RunScore {
    let first_loop_index = verdicts.iter().position(|v| v.is_loop);
    let mut kinds = Vec::new();
    let mut rules: Vec<String> = Vec::new();
    for v in verdicts.iter().filter(|v| v.is_loop) {
        if !kinds.contains(&v.kind) {
            kinds.push(v.kind);
        }
        if let Some(r) = v.rule.as_ref().filter(|r| !rules.contains(r)) {
            rules.push(r.clone());
        }
    }
    RunScore {
        id,
        is_loop: first_loop_index.is_some(),
        first_loop_index,
        max_loop_count: verdicts.iter().map(|v| v.loop_count).max().unwrap_or(0),
        kinds,
        rules,
        verdicts,
    }
}

/// What a scoring pass did.
#[derive(Debug, Default, Clone, Copy)]
pub struct ScoreSummary {
    pub runs: usize,
    pub flagged: usize,
    pub events: usize,
}

/// Options of a scoring pass.
#[derive(Debug, Clone)]
pub struct ScoreOptions {
    /// Runs scored concurrently.
    pub jobs: usize,
    /// Leave per-event verdicts out of the output (one short line per run).
    pub summary_only: bool,
    /// Hand each run's events to `on_run` (for the HTML report); otherwise they are dropped
    /// once scored.
    pub keep_events: bool,
}

/// Score every run of a JSONL stream, writing one line per run in input order. `on_run` is
/// called after each run, in input order, with the number of input bytes consumed so far (for
/// progress bars), the run (its events only with [`ScoreOptions::keep_events`]) and its score.
pub fn score_stream(
    input: impl BufRead + Send + 'static,
    mut output: impl Write,
    cfg: Arc<Config>,
    embedder: Embedder,
    opts: &ScoreOptions,
    mut on_run: impl FnMut(u64, &Run, &RunScore),
) -> Result<ScoreSummary, ScoreError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(ScoreError::Read)?;
    let jobs = opts.jobs.max(1);
    // Lines are read on their own thread so parsing overlaps with scoring.
    let (line_tx, mut line_rx) =
        tokio::sync::mpsc::channel::<Result<(usize, u64, String), std::io::Error>>(jobs * 2);
    std::thread::spawn(move || {
        let mut consumed = 0u64;
        for (i, line) in input.lines().enumerate() {
            let msg = line.map(|l| {
                consumed += l.len() as u64 + 1;
                (i + 1, consumed, l)
            });
            let stop = msg.is_err();
            if line_tx.blocking_send(msg).is_err() || stop {
                break;
            }
        }
    });

    rt.block_on(async move {
        let mut summary = ScoreSummary::default();
        let mut in_flight = tokio::task::JoinSet::new();
        let mut done: BTreeMap<usize, (u64, Run, RunScore)> = BTreeMap::new();
        let mut next_out = 0usize;
        let mut order = 0usize;
        let mut input_done = false;
        loop {
            while !input_done && in_flight.len() < jobs * 2 {
                let Some(msg) = line_rx.recv().await else {
                    input_done = true;
                    break;
                };
                let (line_no, consumed, line) = msg.map_err(ScoreError::Read)?;
                if line.trim().is_empty() {
                    continue;
                }
                let run = parse_run(&line).map_err(|error| ScoreError::Input {
                    line: line_no,
                    error,
                })?;
                let (cfg, embedder) = (Arc::clone(&cfg), embedder.clone());
                let idx = order;
                order += 1;
                let kept = Run {
                    id: run.id.clone(),
                    events: if opts.keep_events {
                        run.events.clone()
                    } else {
                        Vec::new()
                    },
                    label: run.label,
                };
                in_flight.spawn(async move {
                    let r = score_run(cfg, embedder, run).await;
                    (idx, line_no, consumed, kept, r)
                });
            }
            let Some(joined) = in_flight.join_next().await else {
                break;
            };
            let (idx, line_no, consumed, kept, result) = joined.expect("scoring task panicked");
            let score = result.map_err(|error| ScoreError::Engine {
                line: line_no,
                error,
            })?;
            done.insert(idx, (consumed, kept, score));
            while let Some((consumed, run, mut score)) = done.remove(&next_out) {
                summary.runs += 1;
                summary.events += score.verdicts.len();
                summary.flagged += usize::from(score.is_loop);
                on_run(consumed, &run, &score);
                if opts.summary_only {
                    score.verdicts.clear();
                }
                serde_json::to_writer(&mut output, &score)
                    .map_err(|e| ScoreError::Write(e.into()))?;
                output.write_all(b"\n").map_err(ScoreError::Write)?;
                next_out += 1;
            }
        }
        output.flush().map_err(ScoreError::Write)?;
        Ok(summary)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bare_and_enveloped_events() {
        let run = parse_run(r#"{"id":"r1","source":"x","events":[{"type":"response","text":"a"},{"task_id":"sub","parent_task_id":"r1","event":{"type":"response","text":"b"}}],"label":"loop"}"#).unwrap();
        assert_eq!(run.id, "r1");
        assert_eq!(run.events[0].task_id, "r1");
        assert_eq!(run.events[1].task_id, "sub");
        assert_eq!(run.label, Some(true));
    }

    #[test]
    fn errors_name_the_event_path() {
        let err =
            parse_run(r#"{"id":"r","events":[{"type":"response","text":"a"},{"type":"failure"}]}"#)
                .unwrap_err();
        assert_eq!(err.path, "events[1]");
        assert!(err.message.contains("missing field `message`"), "{err}");
        let err = parse_run(
            r#"{"id":"r","events":[{"task_id":"","event":{"type":"response","text":"a"}}]}"#,
        )
        .unwrap_err();
        assert_eq!(err.path, "events[0].task_id");
        let err = parse_run(r#"{"id":"r"}"#).unwrap_err();
        assert!(err.message.contains("missing field `events`"), "{err}");
        let err = parse_run(r#"{"id":"r","events":[],"label":"maybe"}"#).unwrap_err();
        assert_eq!(err.path, "label");
    }
}
