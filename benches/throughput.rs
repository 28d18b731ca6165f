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

use serde_json::json;
use std::io::{BufRead, Write};

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Tasks the requests are spread over: events of one task are evaluated one at a time.
const TASKS: usize = 64;
const FAILURE: &str = "ValueError: invalid configuration value for key";

struct Server {
    child: Child,
    base: String,
    dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let bin = std::env::var_os("LOOPGUARD_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_loopguard").into());
        let mut child = Command::new(bin)
            .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            // Gate, pivots and budget off: every task stays active however many loops it makes.
            .args(["--set", "policy.gate_at=0", "--set", "policy.pivot_at=0"])
            .args(["--set", "detect.budget.max_events=0"])
            .env("LOOPGUARD_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .expect("start loopguard serve");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line
            .trim()
            .trim_start_matches("loopguard listening on ")
            .to_string();
        Server { child, base, dir }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one wrk run measured.
struct Cell {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    requests: u64,
    non_2xx: u64,
}

/// wrk prints latencies as `9.62ms`, `850.00us`, `1.02s`.
fn millis(s: &str) -> f64 {
    let (num, scale) = if let Some(v) = s.strip_suffix("us") {
        (v, 1e-3)
    } else if let Some(v) = s.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1e3)
    } else {
        (s, f64::NAN)
    };
    num.parse::<f64>().map_or(f64::NAN, |n| n * scale)
}

fn wrk(base: &str, script: &std::path::Path, connections: usize, seconds: u64) -> Cell {
    let out = Command::new("wrk")
        .args(["-t2", &format!("-c{connections}"), &format!("-d{seconds}s")])
        .arg("--latency")
        .arg("-s")
        .arg(script)
        .arg(base)
        .output()
        .expect("run wrk (apt-get install wrk)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut cell = Cell {
        rps: f64::NAN,
        p50_ms: f64::NAN,
        p99_ms: f64::NAN,
        requests: 0,
        non_2xx: 0,
    };
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", v] => cell.rps = v.parse().unwrap_or(f64::NAN),
            ["50%", v] => cell.p50_ms = millis(v),
            ["99%", v] => cell.p99_ms = millis(v),
            [n, "requests", "in", ..] => cell.requests = n.parse().unwrap_or(0),
            ["Non-2xx", "or", "3xx", "responses:", n] => cell.non_2xx = n.parse().unwrap_or(0),
            _ => {}
        }
    }
    assert!(
        cell.rps.is_finite(),
        "wrk printed no rate:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cell
}

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

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(f64::NAN)
}

fn main() {
    let seconds: u64 = std::env::var("THROUGHPUT_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    if Command::new("wrk").arg("--version").output().is_err() {
        panic!("this benchmark drives the service with wrk: apt-get install wrk");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let echo = start_echo(&rt);
    let server = Server::start();
    loopguard::judge::http::install_tls_provider();
    let client = reqwest::Client::new();
    let get = |path: &str| {
        rt.block_on(async {
            let r = client.get(format!("{}{path}", server.base)).send().await?;
            let ok = r.status().is_success();
            r.text().await.map(|t| (ok, t))
        })
    };
    for _ in 0..600 {
        if get("/readyz").is_ok_and(|(ok, _)| ok) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
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
    let metrics_before = get("/metrics").unwrap().1;

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
    let metrics = get("/metrics").unwrap().1;
    let appended = metric(&metrics, "loopguard_task_log_bytes_appended_total")
        - metric(&metrics_before, "loopguard_task_log_bytes_appended_total");
    let syncs = metric(&metrics, "loopguard_task_log_syncs_total")
        - metric(&metrics_before, "loopguard_task_log_syncs_total");
    let on_disk = metric(&metrics, "loopguard_task_log_disk_bytes");
    let _ = &server.dir;
    println!();
    println!(
        "task log: {events} events, {appended:.0} bytes appended ({:.0} bytes per event), {syncs:.0} syncs ({:.1} events per sync), {on_disk:.0} bytes on disk at the end",
        appended / events as f64,
        events as f64 / syncs
    );
}
