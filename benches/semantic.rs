//! The semantic path against the model's own speed, in one run. First the model alone: the
//! same backend the service loads (all-MiniLM-L6-v2 through ONNX Runtime, `model.threads`
//! intra-op threads), called directly, one text at a time and in batches of 32. Then the
//! service: `wrk` posts failures never seen before (one model call each, compared with the
//! task's window) at 1 and at 64 connections. Prints texts/s side by side and the ratio.
//!
//! Run: `cargo bench --bench semantic` (needs `wrk` and the model: `apt-get install wrk`,
//! `python3 models/fetch.py`). `SEMANTIC_SECONDS` sets how long each measurement runs (default
//! 10), `SEMANTIC_ROUNDS` how many alternating rounds of model alone / service (default 3).
//! `SEMANTIC_EXPLORE=1` measures only the model, with 1 and 2 threads, back to back and with a
//! 0.8 ms busy pause between one-text calls (the gap the service leaves between a lone caller's
//! events: store commit, HTTP; busy, as the service's other threads are): what the model
//! itself loses when it is not called continuously.
//!
//! `LOOPGUARD_MODEL__DIR` chooses the model for both sides (the service inherits it): run the
//! bench once as shipped and once with `models/all-MiniLM-L6-v2-int8` (`models/fetch.py --int8`)
//! to compare the two. The model alone is always measured in calls of 32 too, which an int8
//! model is not run with in the service (one text per call: `quantizes_activations_per_call`).

mod common;

use common::{word, wrk, Server};
use loopguard::embed::{EmbedBackend, FastEmbedBackend};
use std::io::Write;
use std::time::{Duration, Instant};

const TASKS: usize = 64;

/// The text the service embeds for the k-th failure of the load (normalised: lower case).
fn text(k: u64, salt: u64) -> String {
    format!(
        "runtimeerror: worker {} could not reach the {} queue",
        word(k + salt),
        word(k * 7 + 3)
    )
}

/// Texts/s of the model alone, `batch` texts per call, for `seconds`.
fn raw(backend: &mut FastEmbedBackend, batch: usize, seconds: u64, salt: u64) -> f64 {
    let started = Instant::now();
    let mut texts = 0u64;
    while started.elapsed() < Duration::from_secs(seconds) {
        let owned: Vec<String> = (0..batch as u64).map(|i| text(texts + i, salt)).collect();
        let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
        backend.embed_batch(&refs).unwrap();
        texts += batch as u64;
    }
    texts as f64 / started.elapsed().as_secs_f64()
}

/// A wrk script posting the k-th failure of the load, k never repeated across threads.
fn script(salt: u64) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    write!(
        f,
        r#"wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end
function init(args)
  n = 0
end
local function word(k)
  local w = ""
  repeat
    w = w .. string.char(97 + k % 26)
    k = math.floor(k / 26)
  until k == 0
  return w
end
request = function()
  local k = n * 2 + id
  n = n + 1
  local body = '{{"task_id":"sem-' .. (k % {TASKS}) .. '","event":{{"type":"failure","message":"RuntimeError: worker ' .. word(k + {salt}) .. ' could not reach the ' .. word(k * 7 + 3) .. ' queue"}}}}'
  return wrk.format(nil, "/v1/evaluate", nil, body)
end
"#
    )
    .unwrap();
    f
}

fn main() {
    let seconds: u64 = std::env::var("SEMANTIC_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    common::require_wrk();
    let cfg = loopguard::Config::load_with_env(None, &[]).expect("LOOPGUARD_* settings");
    println!("model: {}", cfg.model.resolved_dir().display());
    if std::env::var("SEMANTIC_EXPLORE").is_ok() {
        for threads in [1usize, 2] {
            let mut m = cfg.model.clone();
            m.threads = threads;
            let mut backend = FastEmbedBackend::load(&m).unwrap();
            raw(&mut backend, 1, 1, 7);
            let b1 = raw(&mut backend, 1, 4, 1 << 41);
            let b32 = raw(&mut backend, 32, 4, 1 << 42);
            // One text per call with a busy pause between calls, as the service has between events
            // (a sleep would overshoot by a timer tick and blur the figure).
            let started = Instant::now();
            let mut n = 0u64;
            while started.elapsed() < Duration::from_secs(4) {
                let t = text(n, 1 << 45);
                backend.embed_batch(&[t.as_str()]).unwrap();
                n += 1;
                let pause = Instant::now();
                while pause.elapsed() < Duration::from_micros(800) {
                    std::hint::spin_loop();
                }
            }
            let per = started.elapsed().as_secs_f64() / n as f64 - 0.0008;
            let b16 = raw(&mut backend, 16, 4, 1 << 46);
            let b64 = raw(&mut backend, 64, 4, 1 << 47);
            println!("threads {threads}: batch 1 {b1:.0}/s, batch 16 {b16:.0}/s, batch 32 {b32:.0}/s, batch 64 {b64:.0}/s, paused calls {:.0}/s of model time", 1.0 / per);
        }
        return;
    }

    // The machine's speed drifts by more than the gap being measured (the model alone at batch 1
    // has measured anywhere from 220 to 265 texts/s on the same machine minutes apart), so the
    // model alone and the service are measured in alternating rounds and compared by medians.
    let rounds: usize = std::env::var("SEMANTIC_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let mut backend =
        FastEmbedBackend::load(&cfg.model).expect("the model (python3 models/fetch.py)");
    raw(&mut backend, 1, 2, 1 << 40); // warm up

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    loopguard::judge::http::install_tls_provider();
    let client = reqwest::Client::new();
    let server = Server::start(&[]);
    common::wait_ready(&rt, &client, &server.base);

    println!(
        "{rounds} alternating rounds of {seconds} s each (model alone, then the service); medians"
    );
    println!();
    println!(
        "| connections | model alone, texts/s | service, answers/s (one new text each) | p50 ms | p99 ms | non-2xx | service / model |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let mut inside = Vec::new();
    let mut salt = 1u64 << 43;
    for (connections, batch) in [(1usize, 1usize), (64, 32)] {
        let mut models = Vec::new();
        let mut cells = Vec::new();
        let mut inside_cell = Inside::default();
        for _ in 0..rounds {
            salt += 1 << 36;
            models.push(raw(&mut backend, batch, seconds, salt));
            salt += 1 << 36;
            let s = script(salt);
            let before = Inside::scrape(&rt, &client, &server.base);
            cells.push(wrk(&server.base, s.path(), connections, seconds));
            let after = Inside::scrape(&rt, &client, &server.base);
            inside_cell.add(&after.since(&before));
        }
        inside.push((connections, inside_cell));
        let model = median(models.clone());
        let ok = median(cells.iter().map(|c| c.ok_rps).collect());
        println!(
            "| {connections} | {model:.0} ({}; rounds {}) | {ok:.0} (rounds {}) | {:.2} | {:.2} | {} | {:.1} % |",
            if batch == 1 {
                "one text per call".to_string()
            } else {
                format!("batches of {batch}")
            },
            join(&models),
            join(&cells.iter().map(|c| c.ok_rps).collect::<Vec<_>>()),
            median(cells.iter().map(|c| c.p50_ms).collect()),
            median(cells.iter().map(|c| c.p99_ms).collect()),
            cells.iter().map(|c| c.non_2xx).sum::<u64>(),
            100.0 * ok / model
        );
    }
    // Where an answer's time went, from the service's own metrics over each cell.
    println!();
    println!("| connections | texts per model call | model ms per text | embed phase ms (queue + model) | store phase ms (commit + fsync) | detect phase ms |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for (connections, d) in inside {
        println!(
            "| {connections} | {:.1} | {:.2} | {:.2} | {:.2} | {:.3} |",
            d.texts / d.calls,
            1e3 * d.model_secs / d.texts,
            1e3 * d.embed_secs / d.events,
            1e3 * d.store_secs / d.events,
            1e3 * d.detect_secs / d.events,
        );
    }
}

/// Counters of the service's metrics that say where time went.
#[derive(Default)]
struct Inside {
    calls: f64,
    texts: f64,
    model_secs: f64,
    events: f64,
    embed_secs: f64,
    store_secs: f64,
    detect_secs: f64,
}

impl Inside {
    fn scrape(rt: &tokio::runtime::Runtime, client: &reqwest::Client, base: &str) -> Inside {
        let m = common::get(rt, client, format!("{base}/metrics"));
        let phase = |p: &str, what: &str| {
            common::metric(
                &m,
                &format!("loopguard_evaluate_phase_duration_seconds_{what}{{phase=\"{p}\"}}"),
            )
        };
        Inside {
            calls: common::metric(&m, "loopguard_embedding_batch_size_count"),
            texts: common::metric(&m, "loopguard_embedding_batch_size_sum"),
            model_secs: common::metric(&m, "loopguard_embedding_batch_duration_seconds_sum"),
            events: phase("embed", "count"),
            embed_secs: phase("embed", "sum"),
            store_secs: phase("store", "sum"),
            detect_secs: phase("detect", "sum"),
        }
    }

    /// What happened between `before` and this scrape (a metric not yet created reads as 0).
    fn since(&self, before: &Inside) -> Inside {
        let d = |a: f64, b: f64| if b.is_nan() { a } else { a - b };
        Inside {
            calls: d(self.calls, before.calls),
            texts: d(self.texts, before.texts),
            model_secs: d(self.model_secs, before.model_secs),
            events: d(self.events, before.events),
            embed_secs: d(self.embed_secs, before.embed_secs),
            store_secs: d(self.store_secs, before.store_secs),
            detect_secs: d(self.detect_secs, before.detect_secs),
        }
    }

    fn add(&mut self, o: &Inside) {
        self.calls += o.calls;
        self.texts += o.texts;
        self.model_secs += o.model_secs;
        self.events += o.events;
        self.embed_secs += o.embed_secs;
        self.store_secs += o.store_secs;
        self.detect_secs += o.detect_secs;
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn join(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}
