//! What the dashboard costs the service: the latency of its read endpoints (`GET /v1/tasks`,
//! `/v1/stats`, `/v1/loops`, a task and its history) with 1k and 10k stored tasks (100k with
//! `LOOPGUARD_BENCH_100K=1`), and the exact path's throughput with and without a dashboard
//! refreshing every second (three times the page's own rate) — the baseline, measured in the same
//! run against the same server.
//!
//! Run: `cargo bench --bench dashboard` (after `python3 models/fetch.py`). Prints Markdown tables.
//! `LOAD_SECONDS` sets how long each throughput cell runs (default 5).

mod common;

use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn client() -> reqwest::Client {
    loopguard::judge::http::install_tls_provider();
    reqwest::Client::new()
}

/// A task as an agent leaves it: a failure, a tool call with its output, a response and a
/// progress note (one of each channel, so filling the store needs no model call).
fn task_events(id: &str, n: usize) -> Vec<Value> {
    [
        json!({"type": "failure", "message": format!("AssertionError: expected {n} rows, got {}", n + 1)}),
        json!({"type": "tool_call", "tool": "bash", "args": {"cmd": format!("pytest tests/test_{n}.py")},
               "result": {"output": format!("FAILED tests/test_{n}.py::test_rows - AssertionError: expected {n} rows"), "exit_code": 1}}),
        json!({"type": "response", "text": format!("The row count is off by one in query {n}; checking the join.")}),
        json!({"type": "progress", "tests_passed": n % 50, "tests_failed": 1}),
    ]
    .into_iter()
    .map(|e| json!({"task_id": id, "agent_id": "coder", "event": e}))
    .collect()
}

async fn fill(client: &reqwest::Client, base: &str, from: usize, to: usize) {
    let events: Vec<Value> = (from..to)
        .flat_map(|n| task_events(&format!("task-{n:06}"), n))
        .collect();
    for chunk in events.chunks(256) {
        let r = client
            .post(format!("{base}/v1/evaluate"))
            .json(&chunk)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }
}

/// What the page asks for on each refresh.
const REFRESH: [&str; 5] = [
    "/v1/stats",
    "/v1/tasks?limit=100",
    "/v1/loops?limit=30",
    "/v1/tasks/task-000000",
    "/v1/tasks/task-000000/history?limit=500",
];

async fn get(client: &reqwest::Client, url: &str) {
    let r = client.get(url).send().await.unwrap();
    assert!(r.status().is_success(), "{url}: {}", r.status());
    r.bytes().await.unwrap();
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

async fn latency(client: &reqwest::Client, base: &str, paths: &[&str], n: usize) -> (f64, f64) {
    let mut ms = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        for p in paths {
            get(client, &format!("{base}{p}")).await;
        }
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(|a, b| a.total_cmp(b));
    (pct(&ms, 0.5), pct(&ms, 0.99))
}

/// Exact-path requests per second from `concurrency` callers for `seconds`.
async fn exact_rps(base: &str, concurrency: usize, seconds: f64) -> (f64, f64) {
    let client = client();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut handles = Vec::new();
    for w in 0..concurrency {
        let (client, base) = (client.clone(), base.to_string());
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                let r = client
                    .post(format!("{base}/v1/evaluate"))
                    .json(
                        &json!({"task_id": format!("exact-{w}"), "event": {"type": "failure",
                           "message": "ValueError: invalid configuration value for key"}}),
                    )
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success());
                lat.push(t.elapsed().as_secs_f64() * 1e3);
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for h in handles {
        lat.extend(h.await.unwrap());
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    (
        lat.len() as f64 / started.elapsed().as_secs_f64(),
        pct(&lat, 0.99),
    )
}

fn main() {
    let seconds: f64 = std::env::var("LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let mut sizes = vec![1_000, 10_000];
    if std::env::var_os("LOOPGUARD_BENCH_100K").is_some() {
        sizes.push(100_000);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = common::Server::start(&[]);
    let base = server.base.clone();
    let client = client();
    rt.block_on(async {
        for _ in 0..600 {
            if let Ok(r) = client.get(format!("{base}/readyz")).send().await {
                if r.status().is_success() {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // A few loops so /v1/loops has something to list.
        for w in 0..30 {
            for _ in 0..2 {
                client
                    .post(format!("{base}/v1/evaluate"))
                    .json(
                        &json!({"task_id": format!("looping-{w}"), "event": {"type": "failure",
                           "message": format!("KeyError: 'user_{w}' in handlers/profile.py:88")}}),
                    )
                    .send()
                    .await
                    .unwrap();
            }
        }
    });

    println!("| stored tasks | request | p50 ms | p99 ms |");
    println!("|---:|---|---:|---:|");
    let mut filled = 0;
    let mut throughput = Vec::new();
    for &n in &sizes {
        let t = Instant::now();
        rt.block_on(fill(&client, &base, filled, n));
        eprintln!(
            "filled {} tasks in {:.1}s",
            n - filled,
            t.elapsed().as_secs_f64()
        );
        filled = n;
        for (name, paths) in [
            ("GET /v1/tasks?limit=50", vec!["/v1/tasks?limit=50"]),
            ("GET /v1/tasks?limit=500", vec!["/v1/tasks?limit=500"]),
            ("GET /v1/stats", vec!["/v1/stats"]),
            ("GET /v1/loops?limit=30", vec!["/v1/loops?limit=30"]),
            ("the page's refresh (5 requests)", REFRESH.to_vec()),
        ] {
            let (p50, p99) = rt.block_on(latency(&client, &base, &paths, 100));
            println!("| {n} | {name} | {p50:.2} | {p99:.2} |");
        }
        // The exact path alone, then with a dashboard refreshing every second.
        let (alone, alone_p99) = rt.block_on(exact_rps(&base, 4, seconds));
        let stop = Arc::new(AtomicBool::new(false));
        let poller = {
            let (stop, base, client) = (Arc::clone(&stop), base.clone(), client.clone());
            rt.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    for p in REFRESH {
                        get(&client, &format!("{base}{p}")).await;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            })
        };
        let (watched, watched_p99) = rt.block_on(exact_rps(&base, 4, seconds));
        stop.store(true, Ordering::Relaxed);
        rt.block_on(poller).unwrap();
        throughput.push((n, alone, alone_p99, watched, watched_p99));
    }
    println!();
    println!("| stored tasks | exact path, 4 callers | requests/s | p99 ms |");
    println!("|---:|---|---:|---:|");
    for (n, alone, alone_p99, watched, watched_p99) in throughput {
        println!("| {n} | alone (baseline) | {alone:.0} | {alone_p99:.2} |");
        println!(
            "| {n} | with a dashboard refreshing every 1 s | {watched:.0} | {watched_p99:.2} |"
        );
    }
}
