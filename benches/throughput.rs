//! The durable exact path against the HTTP stack's own limit, in one run: `wrk` drives a plain
//! axum JSON echo (parse the body, answer it) and then `loopguard serve` (the real binary, the
//! embedded store: every answer waits for its group-committed sync) with the same requests, a
//! repeated failure spread over 64 tasks, at 16 and 64 connections. Prints a Markdown table with
//! the ratio, and what the task log wrote per event.
//!
//! Run: `cargo bench --bench throughput` (needs `wrk`: `apt-get install wrk`; and the model,
//! `python3 models/fetch.py`, which the service loads at start). `THROUGHPUT_SECONDS` sets how
//! long each cell runs (default 10). `LOOPGUARD_BIN` measures another build of the binary (an
//! older commit's, as a baseline) against the same echo.

mod common;

use common::{get, metric, wrk, Server};
use serde_json::json;
use std::io::Write;

/// Tasks the requests are spread over: events of one task are evaluated one at a time.
const TASKS: usize = 64;
const FAILURE: &str = "ValueError: invalid configuration value for key";

/// The plain axum JSON echo: what the HTTP stack and JSON parsing cost on their own.
fn start_echo(rt: &tokio::runtime::Runtime) -> String {
    use axum::{routing::post, Json, Router};
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route(
        "/v1/evaluate",
        post(|Json(v): Json<serde_json::Value>| async move { Json(v) }),
    );
    rt.spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn main() {
    let seconds: u64 = std::env::var("THROUGHPUT_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    common::require_wrk();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let echo = start_echo(&rt);
    let server = Server::start(&[]);
    loopguard::judge::http::install_tls_provider();
    let client = reqwest::Client::new();
    common::wait_ready(&rt, &client, &server.base);
    // Each task starts with two failures: the load then repeats one of them, decided on keys.
    rt.block_on(async {
        for t in 0..TASKS {
            for m in [FAILURE, "the scheduler lost its lease"] {
                let r = client
                    .post(format!("{}/v1/evaluate", server.base))
                    .json(&json!({"task_id": format!("bench-{t}"), "event": {"type": "failure", "message": m}}))
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success(), "seeding: {}", r.status());
            }
        }
    });
    let mut script = tempfile::NamedTempFile::new().unwrap();
    write!(
        script,
        r#"wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local n = 0
request = function()
  n = n + 1
  local body = '{{"task_id":"bench-' .. (n % {TASKS}) .. '","event":{{"type":"failure","message":"{FAILURE}"}}}}'
  return wrk.format(nil, "/v1/evaluate", nil, body)
end
"#
    )
    .unwrap();
    let metrics_before = get(&rt, &client, format!("{}/metrics", server.base));

    println!(
        "| connections | server | requests/s | p50 ms | p99 ms | requests | non-2xx | of echo |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    let mut events = 0u64;
    for connections in [16, 64] {
        let e = wrk(&echo, script.path(), connections, seconds);
        let l = wrk(&server.base, script.path(), connections, seconds);
        events += l.requests;
        for (name, c) in [("axum JSON echo", &e), ("loopguard exact path", &l)] {
            println!(
                "| {connections} | {name} | {:.0} | {:.2} | {:.2} | {} | {} | {:.1} % |",
                c.rps,
                c.p50_ms,
                c.p99_ms,
                c.requests,
                c.non_2xx,
                100.0 * c.rps / e.rps
            );
        }
    }
    let metrics = get(&rt, &client, format!("{}/metrics", server.base));
    let appended = metric(&metrics, "loopguard_task_log_bytes_appended_total")
        - metric(&metrics_before, "loopguard_task_log_bytes_appended_total");
    let syncs = metric(&metrics, "loopguard_task_log_syncs_total")
        - metric(&metrics_before, "loopguard_task_log_syncs_total");
    let on_disk = metric(&metrics, "loopguard_task_log_disk_bytes");
    println!();
    println!(
        "task log: {events} events, {appended:.0} bytes appended ({:.0} bytes per event), {syncs:.0} syncs ({:.1} events per sync), {on_disk:.0} bytes on disk at the end",
        appended / events as f64,
        events as f64 / syncs
    );
}
