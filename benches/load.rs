//! End-to-end load benchmark of `loopguard serve`: requests/s and p50/p99 latency for the exact
//! path and the semantic path at several concurrency levels, with continuous batching and with
//! batching off (`model.max_batch = 1`), against the real binary, model and durable store.
//!
//! Run: `cargo bench --bench load` (after `python3 models/fetch.py`). Prints Markdown tables.
//! `LOAD_SECONDS` sets how long each cell runs (default 5). `LOOPGUARD_BIN` runs another build
//! of the binary (an older commit's, as a baseline) instead of this one. `LOAD_ONLY=overload`
//! runs only the overload table: 256 connections of texts never seen, with admission control
//! (`model.queue_wait_target_ms`) at several targets against none (the 1024-job queue alone),
//! clients waiting out `Retry-After` after a 429. `LOAD_ONLY=stores` runs only the exact path on
//! the embedded store and on PostgreSQL side by side, with the same load: PostgreSQL at
//! `LOAD_DATABASE_URL` (required there; e.g. a throwaway cluster, see docs/PERFORMANCE.md).

mod common;

use common::{word, Server};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn client() -> reqwest::Client {
    loopguard::judge::http::install_tls_provider();
    reqwest::Client::new()
}

#[derive(Clone, Copy, PartialEq)]
enum Path {
    Exact,
    Semantic,
}

struct Cell {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    requests: usize,
    errors: usize,
    /// 429s, and how long the slowest 1 % of them took to arrive.
    refused: usize,
    p99_refused_ms: f64,
}

async fn run_cell(base: &str, path: Path, concurrency: usize, seconds: f64, salt: u64) -> Cell {
    let client = client();
    // Every worker has its own task, seeded with two failures so there is a window to compare.
    for w in 0..concurrency {
        for m in [
            "ValueError: invalid configuration value for key",
            "the scheduler lost its lease",
        ] {
            client
                .post(format!("{base}/v1/evaluate"))
                .json(&json!({"task_id": format!("load-{salt}-{w}"), "event": {"type": "failure", "message": m}}))
                .send()
                .await
                .unwrap();
        }
    }
    let counter = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut handles = Vec::new();
    for w in 0..concurrency {
        let client = client.clone();
        let base = base.to_string();
        let counter = Arc::clone(&counter);
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut refused = Vec::new();
            let mut errors = 0;
            while Instant::now() < deadline {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let message = match path {
                    Path::Exact => "ValueError: invalid configuration value for key".to_string(),
                    Path::Semantic => format!(
                        "RuntimeError: worker {} could not reach the {} queue",
                        word(n + salt * 1_000_000),
                        word(n * 7 + 3)
                    ),
                };
                let t = Instant::now();
                let r = client
                    .post(format!("{base}/v1/evaluate"))
                    .json(&json!({"task_id": format!("load-{salt}-{w}"), "event": {"type": "failure", "message": message}}))
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status().is_success() => lat.push(t.elapsed().as_secs_f64() * 1e3),
                    Ok(r) if r.status() == 429 => {
                        refused.push(t.elapsed().as_secs_f64() * 1e3);
                        // As a well-behaved client does.
                        let wait: u64 = r
                            .headers()
                            .get("retry-after")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(1);
                        tokio::time::sleep(Duration::from_secs(wait)).await;
                    }
                    _ => errors += 1,
                }
            }
            (lat, refused, errors)
        }));
    }
    let mut lat = Vec::new();
    let mut refused = Vec::new();
    let mut errors = 0;
    for h in handles {
        let (l, r, e) = h.await.unwrap();
        lat.extend(l);
        refused.extend(r);
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    lat.sort_by(|a, b| a.total_cmp(b));
    refused.sort_by(|a, b| a.total_cmp(b));
    let pct = |v: &[f64], p: f64| {
        v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1)))
            .copied()
            .unwrap_or(f64::NAN)
    };
    Cell {
        rps: lat.len() as f64 / elapsed,
        p50_ms: pct(&lat, 0.50),
        p99_ms: pct(&lat, 0.99),
        max_ms: lat.last().copied().unwrap_or(f64::NAN),
        requests: lat.len(),
        errors,
        refused: refused.len(),
        p99_refused_ms: pct(&refused, 0.99),
    }
}

/// 256 connections of new texts against the admission-control settings.
fn overload(rt: &tokio::runtime::Runtime, seconds: f64, salt: &mut u64) {
    println!();
    println!("| queue_wait_target_ms | connections | answered/s | p50 ms | p99 ms | max ms | answered | 429s | 429 share | p99 of a 429, ms | errors |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    // "off": a target no queue reaches, so only the 1024-job capacity refuses (the old rule).
    for target in ["off", "250", "500", "1000"] {
        let ms = if target == "off" { "100000000" } else { target };
        let setting = format!("model.queue_wait_target_ms={ms}");
        let server = Server::start(&["--set", &setting]);
        rt.block_on(wait_ready(&server.base));
        *salt += 1;
        let c = rt.block_on(run_cell(&server.base, Path::Semantic, 256, seconds, *salt));
        let total = c.requests + c.refused;
        println!(
            "| {target} | 256 | {:.0} | {:.1} | {:.1} | {:.1} | {} | {} | {:.0} % | {:.2} | {} |",
            c.rps,
            c.p50_ms,
            c.p99_ms,
            c.max_ms,
            c.requests,
            c.refused,
            100.0 * c.refused as f64 / total.max(1) as f64,
            c.p99_refused_ms,
            c.errors
        );
    }
}

/// The exact path on each store, the same load: every answer waits for its commit (sled's
/// group-committed fsync, PostgreSQL's COMMIT with the task's advisory lock).
fn stores(rt: &tokio::runtime::Runtime, seconds: f64, salt: &mut u64) {
    let url = std::env::var("LOAD_DATABASE_URL")
        .expect("LOAD_ONLY=stores needs LOAD_DATABASE_URL=postgres://… (a database it may write)");
    let store_url = format!("server.database_url={url}");
    println!("| store | concurrency | requests/s | p50 ms | p99 ms | requests | errors |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (store, extra) in [
        ("embedded (task log)", vec![]),
        (
            "postgres",
            vec![
                "--set",
                "server.store=postgres",
                "--set",
                store_url.as_str(),
            ],
        ),
    ] {
        let server = Server::start(&extra);
        rt.block_on(wait_ready(&server.base));
        for concurrency in [1, 4, 16, 64] {
            *salt += 1;
            let c = rt.block_on(run_cell(
                &server.base,
                Path::Exact,
                concurrency,
                seconds,
                *salt,
            ));
            println!(
                "| {store} | {concurrency} | {:.0} | {:.2} | {:.2} | {} | {} |",
                c.rps, c.p50_ms, c.p99_ms, c.requests, c.errors
            );
        }
    }
}

async fn wait_ready(base: &str) {
    let client = client();
    for _ in 0..600 {
        if let Ok(r) = client.get(format!("{base}/readyz")).send().await {
            if r.status().is_success() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the server did not become ready");
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let seconds: f64 = std::env::var("LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut salt = 0;
    if std::env::var("LOAD_ONLY").as_deref() == Ok("overload") {
        overload(&rt, seconds, &mut salt);
        return;
    }
    if std::env::var("LOAD_ONLY").as_deref() == Ok("stores") {
        stores(&rt, seconds, &mut salt);
        return;
    }
    println!(
        "| path | batching | concurrency | requests/s | p50 ms | p99 ms | requests | errors |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for (batching, extra) in [
        ("on", vec![]),
        ("off (max_batch = 1)", vec!["--set", "model.max_batch=1"]),
    ] {
        let server = Server::start(&extra);
        rt.block_on(wait_ready(&server.base));
        for path in [Path::Exact, Path::Semantic] {
            if path == Path::Exact && batching != "on" {
                // The exact path never touches the model: batching cannot matter.
                continue;
            }
            for concurrency in [1, 4, 16, 64] {
                salt += 1;
                let c = rt.block_on(run_cell(&server.base, path, concurrency, seconds, salt));
                println!(
                    "| {} | {batching} | {concurrency} | {:.0} | {:.2} | {:.2} | {} | {} |",
                    if path == Path::Exact {
                        "exact"
                    } else {
                        "semantic (model)"
                    },
                    c.rps,
                    c.p50_ms,
                    c.p99_ms,
                    c.requests,
                    c.errors
                );
            }
        }
    }
    overload(&rt, seconds, &mut salt);
}
