//! Batch scoring by model workers × intra-op threads, beside the model alone, on the machine it
//! runs on. For every combination that fits the cores (workers × threads ≤ cores; threads 1, 2,
//! 4, …), recorded runs are scored as `loopguard score` scores them (`score_stream`, the default
//! `--jobs` for that many workers, an empty embedding cache, no cache on disk), and the same
//! workers' sessions then embed the texts that scoring asked for, alone: no engine, no queue,
//! each worker on its own share — the most that many workers could do. Prints events/s, the
//! model alone's texts/s, how close scoring came to the model's ceiling, the memory each worker
//! took, and whether every combination gave the same verdicts.
//!
//! Run: `cargo bench --bench workers` (needs the model: `python3 models/fetch.py`).
//! - `WORKERS_RUNS=FILE.jsonl`: score these recorded runs (`loopguard score` input) instead of
//!   the generated ones (64 runs of 40 events, every text new: tool calls, outputs, failures);
//!   docs/PERFORMANCE.md uses the SWE-agent dev runs.
//! - `WORKERS_GRID=1x2,2x1`: only these workers×threads (default: every one that fits).
//! - `WORKERS_ROUNDS=N`: rounds over the grid, alternating (default 2; the table gives the
//!   median): a shared machine's speed drifts between minutes.
//! - `LOOPGUARD_MODEL__DIR` and other `LOOPGUARD_MODEL__*` settings apply, e.g. the published
//!   fp32 export: `LOOPGUARD_MODEL__DIR=models/all-MiniLM-L6-v2`.

use loopguard::embed::{
    default_jobs, quantizes_activations_per_call, EmbedBackend, EmbedError, EmbedderOptions,
    FastEmbedBackend,
};
use loopguard::score::{score_stream, ScoreOptions};
use loopguard::{Config, Embedder};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A backend that writes down every text it is asked to embed.
struct Recording(FastEmbedBackend, Arc<Mutex<Vec<String>>>);

impl EmbedBackend for Recording {
    fn embed_batch(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.1
            .lock()
            .unwrap()
            .extend(texts.iter().map(|t| t.to_string()));
        self.0.embed_batch(texts)
    }
    fn describe(&self) -> String {
        self.0.describe()
    }
}

const WORDS: [&str; 48] = [
    "config", "parser", "session", "worker", "queue", "index", "schema", "token", "buffer",
    "client", "server", "cache", "layout", "render", "widget", "record", "stream", "filter",
    "matrix", "vector", "module", "import", "export", "handler", "router", "model", "field",
    "column", "table", "query", "driver", "socket", "thread", "signal", "timer", "report",
    "format", "locale", "encoder", "decoder", "reader", "writer", "plugin", "loader", "runner",
    "target", "source", "result",
];

fn w(k: u64) -> &'static str {
    WORDS[(k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % WORDS.len()]
}

/// One generated run: an agent exploring, testing and editing, each text new (the k's differ),
/// so the model sees agent-shaped texts of a few to a hundred tokens.
fn generated_run(r: u64) -> String {
    let mut events = Vec::new();
    for i in 0..40u64 {
        let k = r * 1000 + i;
        let (a, b, c) = (w(k), w(k * 7 + 1), w(k * 13 + 2));
        let event = match i % 5 {
            0 => serde_json::json!({"type": "tool_call", "tool": "bash",
                "args": {"command": format!("grep -rn '{a}_{b}' src/{c}/")},
                "result": {"output": format!("src/{c}/{a}.py:{}: def {a}_{b}(self, {c}):\n src/{c}/{b}.py:{}: return {a}_{b}({c})", k % 300, k % 97)}}),
            1 => serde_json::json!({"type": "tool_call", "tool": "bash",
                "args": {"command": format!("python -m pytest tests/test_{a}.py -x -q -k {b}")},
                "result": {"output": format!("FAILED tests/test_{a}.py::test_{b}_{c} - AssertionError: assert {} == {}\n1 failed, {} passed in 0.{}s", k % 50, k % 51 + 1, k % 40, k % 90), "is_error": true}}),
            2 => serde_json::json!({"type": "tool_call", "tool": "str_replace_editor",
                "args": {"command": "view", "path": format!("/testbed/src/{a}/{b}.py"), "view_range": [k % 200, k % 200 + 40]}}),
            3 => serde_json::json!({"type": "tool_call", "tool": "str_replace_editor",
                "args": {"command": "str_replace", "path": format!("/testbed/src/{a}/{c}.py"),
                         "old_str": format!("return self.{b}"), "new_str": format!("return self.{b} or {c}({a})")},
                "result": {"output": format!("The file /testbed/src/{a}/{c}.py has been edited. Review the changes around line {}.", k % 400)}}),
            _ => serde_json::json!({"type": "failure",
                "message": format!("{}Error: cannot resolve {a} '{b}' in {c} handler (attempt {})", c.to_uppercase(), i)}),
        };
        events.push(event);
    }
    serde_json::json!({"id": format!("run-{r}"), "events": events}).to_string()
}

/// Every (workers, threads) that fits `cores`: threads 1, 2, 4, … and workers 1, 2, 4, … up to
/// cores ÷ threads, and that largest count itself when it is no power of two.
fn grid(cores: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut threads = 1;
    while threads <= cores {
        let most = cores / threads;
        let mut workers = 1;
        while workers <= most {
            out.push((workers, threads));
            workers *= 2;
        }
        if !most.is_power_of_two() {
            out.push((most, threads));
        }
        threads *= 2;
    }
    out
}

struct Row {
    events_per_s: Vec<f64>,
    model_texts_per_s: Vec<f64>,
    texts: usize,
    events: usize,
    memory: Option<u64>,
    load_s: Vec<f64>,
    output: Option<Vec<u8>>,
}

/// Score `input` with `workers` × `threads`; the events/s, the texts the model was asked for
/// and the output.
fn score(
    cfg: &Config,
    input: &Arc<String>,
    recorded: &Arc<Mutex<Vec<String>>>,
) -> (f64, usize, Vec<u8>, Option<u64>, f64) {
    let m = cfg.model.clone();
    let mut opts = EmbedderOptions::from(&m);
    if quantizes_activations_per_call(&m.resolved_dir().join("model.onnx")) {
        opts.max_batch = 1; // as the CLI runs it
    }
    let rec = Arc::clone(recorded);
    let started = Instant::now();
    let embedder = Embedder::start_workers(
        m.resolved_workers(),
        move |_| {
            Ok(
                Box::new(Recording(FastEmbedBackend::load(&m)?, Arc::clone(&rec)))
                    as Box<dyn EmbedBackend>,
            )
        },
        opts,
    );
    embedder
        .wait_ready()
        .expect("the model (python3 models/fetch.py)");
    let load_s = started.elapsed().as_secs_f64();
    recorded.lock().unwrap().clear(); // the warm-up texts
    let mut out = Vec::new();
    let started = Instant::now();
    let summary = score_stream(
        std::io::Cursor::new(input.as_bytes().to_vec()),
        &mut out,
        Arc::new(cfg.clone()),
        embedder.clone(),
        &ScoreOptions {
            jobs: default_jobs(embedder.workers()),
            summary_only: true,
            keep_events: false,
        },
        |_, _, _| {},
    )
    .expect("scoring");
    let secs = started.elapsed().as_secs_f64();
    (
        summary.events as f64 / secs,
        summary.events,
        out,
        embedder.memory_per_worker(),
        load_s,
    )
}

/// Texts/s of `workers` sessions of `threads` threads each embedding `texts` alone, each on its
/// own thread taking the next text (one per call for a model run so, else calls of up to 32 of
/// similar length).
fn model_alone(cfg: &Config, texts: &[String]) -> f64 {
    let m = &cfg.model;
    let per_call = if quantizes_activations_per_call(&m.resolved_dir().join("model.onnx")) {
        1
    } else {
        32
    };
    let mut sorted: Vec<&str> = texts.iter().map(String::as_str).collect();
    sorted.sort_by_key(|t| t.len());
    let calls: Vec<&[&str]> = sorted.chunks(per_call).collect();
    let backends: Vec<FastEmbedBackend> = (0..m.resolved_workers())
        .map(|_| {
            let mut b = FastEmbedBackend::load(m).unwrap();
            b.embed_batch(&["warm up"]).unwrap();
            b
        })
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        for mut b in backends {
            let (next, calls) = (&next, &calls);
            s.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(call) = calls.get(i) else { break };
                b.embed_batch(call).unwrap();
            });
        }
    });
    texts.len() as f64 / started.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let base = Config::load_with_env(None, &[]).expect("LOOPGUARD_* settings");
    let input = match std::env::var_os("WORKERS_RUNS") {
        Some(p) => std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("WORKERS_RUNS={}: {e}", p.to_string_lossy())),
        None => (0..64).map(generated_run).collect::<Vec<_>>().join("\n"),
    };
    let input = Arc::new(input);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let configs: Vec<(usize, usize)> = match std::env::var("WORKERS_GRID") {
        Ok(g) => g
            .split(',')
            .map(|c| {
                let (w, t) = c.trim().split_once('x').expect("WORKERS_GRID=1x2,2x1");
                (w.parse().unwrap(), t.parse().unwrap())
            })
            .collect(),
        Err(_) => grid(cores),
    };
    let rounds: usize = std::env::var("WORKERS_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let default = (base.model.resolved_workers(), base.model.threads);
    println!(
        "model: {}; {cores} cores; runs: {}; {rounds} rounds, medians; default {}x{}",
        base.model.resolved_dir().display(),
        std::env::var("WORKERS_RUNS").unwrap_or_else(|_| "64 generated".into()),
        default.0,
        default.1
    );
    let mut rows: Vec<Row> = configs
        .iter()
        .map(|_| Row {
            events_per_s: Vec::new(),
            model_texts_per_s: Vec::new(),
            texts: 0,
            events: 0,
            memory: None,
            load_s: Vec::new(),
            output: None,
        })
        .collect();
    for round in 0..rounds {
        for (row, &(workers, threads)) in rows.iter_mut().zip(&configs) {
            let mut cfg = base.clone();
            cfg.model.workers = workers;
            cfg.model.threads = threads;
            cfg.model.disk_cache = None;
            let recorded = Arc::new(Mutex::new(Vec::new()));
            let (eps, events, out, memory, load_s) = score(&cfg, &input, &recorded);
            let texts = std::mem::take(&mut *recorded.lock().unwrap());
            let alone = model_alone(&cfg, &texts);
            eprintln!(
                "round {round}: {workers}x{threads}: {eps:.0} events/s, model alone {alone:.0} texts/s"
            );
            row.events_per_s.push(eps);
            row.model_texts_per_s.push(alone);
            row.texts = texts.len();
            row.events = events;
            row.memory = memory;
            row.load_s.push(load_s);
            row.output.get_or_insert(out);
        }
    }
    println!();
    println!("| workers × threads | scoring, events/s | model alone, texts/s | texts per event | scoring / the model's ceiling | load s | memory per worker MiB |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (row, &(workers, threads)) in rows.iter().zip(&configs) {
        let eps = median(row.events_per_s.clone());
        let alone = median(row.model_texts_per_s.clone());
        let per_event = row.texts as f64 / row.events.max(1) as f64;
        // The most events/s the model alone allows, at the texts each event needs.
        let ceiling = alone / per_event.max(f64::MIN_POSITIVE);
        println!(
            "| {workers} × {threads}{} | {eps:.0} (rounds {}) | {alone:.0} | {per_event:.2} | {:.0} % | {:.2} | {} |",
            if (workers, threads) == default { " (default)" } else { "" },
            row.events_per_s
                .iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(", "),
            100.0 * eps / ceiling,
            median(row.load_s.clone()),
            row.memory
                .map_or_else(|| "?".into(), |b| format!("{:.0}", b as f64 / (1 << 20) as f64)),
        );
    }
    let first = rows[0].output.as_ref();
    let differing: Vec<String> = rows
        .iter()
        .zip(&configs)
        .filter(|(r, _)| r.output.as_ref() != first)
        .map(|(_, (w, t))| format!("{w}x{t}"))
        .collect();
    println!();
    if differing.is_empty() {
        println!(
            "verdicts: identical in every row ({} events, {} runs)",
            rows[0].events,
            input.lines().count()
        );
    } else {
        println!(
            "verdicts: DIFFER from {}x{} in {}",
            configs[0].0,
            configs[0].1,
            differing.join(", ")
        );
    }
}
