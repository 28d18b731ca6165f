//! Per-event cost of the engine: the exact fast path, the semantic path with cached embeddings,
//! and the semantic path that runs the model; with the raw model call as the baseline (what a
//! service that embeds every event would pay).
//!
//! Run: `cargo bench --bench engine` (needs `python3 models/fetch.py` first).

mod common;

use common::word;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use loopguard::event::parse_envelope_value;
use loopguard::{Config, Embedder, Engine, Envelope};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const MESSAGES: [&str; 8] = [
    "TypeError: Cannot read properties of undefined (reading 'name') at UserCard (src/components/UserCard.tsx:14:22)",
    "ModuleNotFoundError: No module named 'yaml'",
    "AssertionError: expected port 5432, got 5433 in tests/test_config.py::test_port",
    "error[E0308]: mismatched types: expected `u32`, found `i64` at src/main.rs:10:5",
    "psycopg2.OperationalError: could not connect to server: Connection refused",
    "KeyError: 'database' in config/loader.py line 88",
    "SyntaxError: Unexpected token '}' in JSON at position 42",
    "FileNotFoundError: [Errno 2] No such file or directory: 'data/input.csv'",
];

fn failure(task: &str, message: &str) -> Envelope {
    parse_envelope_value(json!({"task_id": task, "event": {"type": "failure", "message": message}}))
        .unwrap()
}

fn config() -> Arc<Config> {
    // No gate, no pivots: the task stays active however many loops the benchmark makes.
    Arc::new(
        Config::load(
            None,
            std::iter::empty(),
            &[
                ("policy.gate_at".into(), "0".into()),
                ("policy.pivot_at".into(), "0".into()),
            ],
        )
        .unwrap(),
    )
}

static TASK: AtomicU64 = AtomicU64::new(0);

/// A task whose window holds the eight messages (embedded), ready for one more event.
fn prepared(rt: &tokio::runtime::Runtime, engine: &Engine) -> String {
    let task = format!("bench-{}", TASK.fetch_add(1, Ordering::Relaxed));
    rt.block_on(async {
        for m in MESSAGES {
            engine.evaluate(failure(&task, m)).await.unwrap();
        }
    });
    task
}

fn bench(c: &mut Criterion) {
    let cfg = config();
    let embedder = Embedder::load_model(&cfg.model).expect("run `python3 models/fetch.py` first");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let engine = Engine::new(Arc::clone(&cfg), embedder.clone());

    let mut g = c.benchmark_group("per_event");
    g.sample_size(30);

    // The baseline: one model call for one short text, nothing cached.
    let fresh = AtomicU64::new(0);
    g.bench_function("baseline_model_call_one_text", |b| {
        b.iter(|| {
            let n = fresh.fetch_add(1, Ordering::Relaxed);
            embedder
                .embed_blocking(&[format!(
                    "ValueError: invalid literal for int(): '{}'",
                    word(n)
                )])
                .unwrap()
        })
    });

    g.bench_function("exact_path_repeat", |b| {
        b.iter_batched(
            || prepared(&rt, &engine),
            |task| {
                rt.block_on(engine.evaluate(failure(&task, MESSAGES[3])))
                    .unwrap()
            },
            BatchSize::PerIteration,
        )
    });

    let reworded =
        "Uncaught TypeError: cannot read property 'name' of undefined in UserCard.tsx line 14";
    embedder
        .embed_blocking(&[loopguard::signature::normalize(reworded)])
        .unwrap();
    g.bench_function("semantic_path_cache_hit", |b| {
        b.iter_batched(
            || prepared(&rt, &engine),
            |task| {
                rt.block_on(engine.evaluate(failure(&task, reworded)))
                    .unwrap()
            },
            BatchSize::PerIteration,
        )
    });

    // Unseen texts without digits: a number that differs from every window text would decide
    // the comparison on keys alone (the numbers guard) and skip the model.
    let unseen = AtomicU64::new(0);
    g.bench_function("semantic_path_model", |b| {
        b.iter_batched(
            || {
                let n = unseen.fetch_add(1, Ordering::Relaxed);
                (
                    prepared(&rt, &engine),
                    format!(
                        "RuntimeError: worker pool shut down before job {} finished",
                        word(n)
                    ),
                )
            },
            |(task, text)| rt.block_on(engine.evaluate(failure(&task, &text))).unwrap(),
            BatchSize::PerIteration,
        )
    });

    g.bench_function("no_comparison_progress_event", |b| {
        b.iter_batched(
            || prepared(&rt, &engine),
            |task| {
                let e = parse_envelope_value(
                    json!({"task_id": task, "event": {"type": "progress", "tests_passed": 3}}),
                )
                .unwrap();
                rt.block_on(engine.evaluate(e)).unwrap()
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();

    let mut g = c.benchmark_group("model");
    g.sample_size(10);
    let batch = AtomicU64::new(0);
    g.bench_function("batch_of_32_short_texts", |b| {
        b.iter(|| {
            let n = batch.fetch_add(1, Ordering::Relaxed);
            let texts: Vec<String> = (0..32)
                .map(|i| format!("{} ({})", MESSAGES[i % 8], word(n * 32 + i as u64)))
                .collect();
            embedder.embed_blocking(&texts).unwrap()
        })
    });
    g.finish();

    // What an event's commit pays for the task state beyond detection, on a full window (20
    // events, 20 verdict summaries), the steady state of a long task: before the task log, a
    // copy of the whole state written as JSON (kept as the reference); now the change from the
    // state before the event, written as JSON (then compressed with its batch).
    let mut g = c.benchmark_group("state");
    let task = "full-window";
    rt.block_on(async {
        for i in 0..20u64 {
            let e = if i % 2 == 0 {
                failure(task, MESSAGES[(i / 2) as usize % 8])
            } else {
                parse_envelope_value(json!({"task_id": task, "agent_id": "coder", "event": {
                    "type": "tool_call", "tool": "bash",
                    "args": {"cmd": format!("pytest tests/test_{}.py -x", word(i))},
                    "result": {"output": format!("FAILED tests/test_{}.py::test_case - {}", word(i), MESSAGES[(i / 2) as usize % 8]), "exit_code": 1}}}))
                .unwrap()
            };
            engine.evaluate(e).await.unwrap();
        }
    });
    let state = rt.block_on(engine.snapshot(task)).unwrap().unwrap();
    eprintln!(
        "state of a full window: {} bytes of JSON, {} verdict summaries",
        serde_json::to_vec(&state).unwrap().len(),
        state.recent_verdicts.len()
    );
    g.bench_function("clone_and_serialize_full_window", |b| {
        b.iter(|| serde_json::to_vec(&state.clone()).unwrap())
    });
    rt.block_on(engine.evaluate(failure(task, MESSAGES[0])))
        .unwrap();
    let next = rt.block_on(engine.snapshot(task)).unwrap().unwrap();
    eprintln!(
        "one event's change: {} bytes of JSON",
        serde_json::to_vec(&loopguard::store::log::StateDelta::between(&state, &next))
            .unwrap()
            .len()
    );
    g.bench_function("delta_of_one_event_full_window", |b| {
        b.iter(|| {
            serde_json::to_vec(&loopguard::store::log::StateDelta::between(&state, &next)).unwrap()
        })
    });
    g.finish();

    let mut g = c.benchmark_group("signature");
    let long_output = "Traceback (most recent call last):\n  File \"/tmp/tmpa8f9z2k1/run.py\", line 42, in <module>\n".repeat(40);
    g.bench_function("normalize_long_output", |b| {
        b.iter(|| loopguard::signature::normalize(&long_output))
    });
    // The result's key with the call's own quoted terms masked, paid on every tool result: a
    // search quoting its query, and an edit whose whole content is its argument.
    let search_args = json!({"command": "search_dir \"BEGIN SOLUTION\" tests"});
    let search_out = format!(
        "Found 2 matches for \"BEGIN SOLUTION\" in /r/tests:\n{}End of matches for \"BEGIN SOLUTION\" in /r/tests",
        "/r/tests/nbs/test.ipynb (2 matches)\n".repeat(20)
    );
    g.bench_function("echo_key_search", |b| {
        b.iter(|| loopguard::signature::echo_key(&search_args, &search_out))
    });
    let edit_body = "        value = compute('x', \"y\", z)  # keep the old behaviour\n".repeat(60);
    let edit_args = json!({"command": format!("edit 10:70\n{edit_body}end_of_edit")});
    let edit_out = format!("[File: /r/a.py (400 lines total)]\n{edit_body}");
    g.bench_function("echo_key_edit", |b| {
        b.iter(|| loopguard::signature::echo_key(&edit_args, &edit_out))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
