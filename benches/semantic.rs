//! The semantic path against the model's own speed, in one run. First the model alone: the
//! same backend the service loads (all-MiniLM-L6-v2 through ONNX Runtime, `model.threads`
//! intra-op threads), called directly, one text at a time and in batches of 32. Then the
//! service: `wrk` posts failures never seen before (one model call each, compared with the
//! task's window) at 1 and at 64 connections. Prints texts/s side by side and the ratio.
//!
//! Run: `cargo bench --bench semantic` (needs `wrk` and the model: `apt-get install wrk`,
//! `python3 models/fetch.py`). `SEMANTIC_SECONDS` sets how long each cell runs (default 10).
//! `SEMANTIC_EXPLORE=1` measures only the model, with 1 and 2 threads, back to back and with a
//! 0.5 ms pause between one-text calls (the gap a caller leaves between events): what the model
//! itself loses when it is not called continuously.

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
    let cfg = loopguard::Config::default();
    if std::env::var("SEMANTIC_EXPLORE").is_ok() {
        for threads in [1usize, 2] {
            let mut m = cfg.model.clone();
            m.threads = threads;
            let mut backend = FastEmbedBackend::load(&m).unwrap();
            raw(&mut backend, 1, 1, 7);
            let b1 = raw(&mut backend, 1, 4, 1 << 41);
            let b32 = raw(&mut backend, 32, 4, 1 << 42);
            // One text per call with a pause between calls, as the service has between events.
            let started = Instant::now();
            let mut n = 0u64;
            while started.elapsed() < Duration::from_secs(4) {
                let t = text(n, 1 << 45);
                backend.embed_batch(&[t.as_str()]).unwrap();
                n += 1;
                std::thread::sleep(Duration::from_micros(500));
            }
            let per = started.elapsed().as_secs_f64() / n as f64 - 0.0005;
            let b16 = raw(&mut backend, 16, 4, 1 << 46);
            let b64 = raw(&mut backend, 64, 4, 1 << 47);
            println!("threads {threads}: batch 1 {b1:.0}/s, batch 16 {b16:.0}/s, batch 32 {b32:.0}/s, batch 64 {b64:.0}/s, paused calls {:.0}/s of model time", 1.0 / per);
        }
        return;
    }

    let (raw_1, raw_32) = {
        let mut backend =
            FastEmbedBackend::load(&cfg.model).expect("the model (python3 models/fetch.py)");
        raw(&mut backend, 1, 2, 1 << 40); // warm up
        (
            raw(&mut backend, 1, seconds, 1 << 41),
            raw(&mut backend, 32, seconds, 1 << 42),
        )
    };

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
        "| connections | model alone, texts/s | service, answers/s (one new text each) | p50 ms | p99 ms | non-2xx | service / model |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for (connections, model, salt) in [(1usize, raw_1, 1u64 << 43), (64, raw_32, 1u64 << 44)] {
        let s = script(salt);
        let c = wrk(&server.base, s.path(), connections, seconds);
        println!(
            "| {connections} | {model:.0} ({}) | {:.0} | {:.2} | {:.2} | {} | {:.1} % |",
            if connections == 1 {
                "one text per call"
            } else {
                "batches of 32"
            },
            c.ok_rps,
            c.p50_ms,
            c.p99_ms,
            c.non_2xx,
            100.0 * c.ok_rps / model
        );
    }
}
