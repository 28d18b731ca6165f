//! What the wrk-driven benchmarks share: the real binary started on a temporary data directory,
//! and wrk runs read back as numbers. Each benchmark uses what it needs of it.
#![allow(dead_code)]

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Server {
    child: Child,
    pub base: String,
    pub dir: tempfile::TempDir,
}

impl Server {
    /// `loopguard serve` with gate, pivots and budget off, and `extra` settings.
    pub fn start(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let (child, base, _) = spawn(dir.path(), extra);
        Server { child, base, dir }
    }
}

/// Start the binary on `dir` (gate, pivots and budget off, then `extra`) and wait until its
/// store is open: the process, its base URL, and the start's timings.
fn spawn(dir: &std::path::Path, extra: &[&str]) -> (Child, String, Started) {
    let bin =
        std::env::var_os("LOOPGUARD_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_loopguard").into());
    let started = std::time::Instant::now();
    let mut child = Command::new(bin)
        .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        // Gate, pivots and budget off: every task stays active however many loops it makes.
        .args(["--set", "policy.gate_at=0", "--set", "policy.pivot_at=0"])
        .args(["--set", "detect.budget.max_events=0"])
        .args(extra)
        .env("LOOPGUARD_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start loopguard serve");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let listening = started.elapsed();
    let base = line
        .trim()
        .trim_start_matches("loopguard listening on ")
        .to_string();
    let starting_answers = wait_open(&base);
    let timings = Started {
        listening,
        open: started.elapsed(),
        starting_answers,
    };
    (child, base, timings)
}

/// How a start went: from spawning the process to listening, and to its store being open; and
/// how many `/readyz` probes it answered (503 `starting`) while it replayed its log.
pub struct Started {
    pub listening: Duration,
    pub open: Duration,
    pub starting_answers: u64,
}

/// Wait until the server's store is open: it listens at once and answers 503 `starting` while
/// it replays its log. Returns how many `starting` answers it gave meanwhile.
pub fn wait_open(base: &str) -> u64 {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut starting = 0;
    for _ in 0..30_000 {
        let answer = std::net::TcpStream::connect(addr).ok().and_then(|mut s| {
            write!(
                s,
                "GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
            )
            .ok()?;
            let mut out = String::new();
            s.read_to_string(&mut out).ok()?;
            Some(out)
        });
        match answer {
            Some(a) if !a.contains("\"starting\"") => return starting,
            Some(_) => starting += 1,
            None => {}
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the store did not open within 300 s");
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, and wait for the process to exit.
    pub fn terminate(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }

    /// Start the binary again on the same data directory.
    pub fn restart(&mut self, extra: &[&str]) -> Started {
        self.terminate();
        let (child, base, started) = spawn(self.dir.path(), extra);
        (self.child, self.base) = (child, base);
        started
    }
}

/// Resident memory of a process now, and its peak, in bytes (Linux `/proc`).
pub fn rss(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Bytes of the files a process holds open that are already deleted: the task log's spill
/// files, which no directory listing shows.
pub fn deleted_open_bytes(pid: u32) -> u64 {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    fds.flatten()
        .filter(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| target.to_string_lossy().ends_with(" (deleted)"))
        })
        .filter_map(|fd| std::fs::metadata(fd.path()).ok())
        .map(|m| m.len())
        .sum()
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one wrk run measured.
pub struct Cell {
    pub rps: f64,
    /// Answers that were 2xx, per second.
    pub ok_rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub requests: u64,
    pub non_2xx: u64,
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

/// Run wrk with `script` against `base` (two threads, or one for a single connection).
pub fn wrk(base: &str, script: &std::path::Path, connections: usize, seconds: u64) -> Cell {
    let out = Command::new("wrk")
        .args([
            &format!("-t{}", connections.min(2)),
            &format!("-c{connections}"),
            &format!("-d{seconds}s"),
        ])
        .arg("--latency")
        .arg("-s")
        .arg(script)
        .arg(base)
        .output()
        .expect("run wrk (apt-get install wrk)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut cell = Cell {
        rps: f64::NAN,
        ok_rps: f64::NAN,
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
    cell.ok_rps = cell.rps * (cell.requests - cell.non_2xx.min(cell.requests)) as f64
        / cell.requests.max(1) as f64;
    assert!(
        cell.rps.is_finite(),
        "wrk printed no rate:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cell
}

/// Wait until `/readyz` answers 200 (the model is warm).
pub fn wait_ready(rt: &tokio::runtime::Runtime, client: &reqwest::Client, base: &str) {
    for _ in 0..600 {
        let ready = rt.block_on(async {
            client
                .get(format!("{base}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        });
        if ready {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the server did not become ready");
}

/// GET a path's body.
pub fn get(rt: &tokio::runtime::Runtime, client: &reqwest::Client, url: String) -> String {
    rt.block_on(async { client.get(url).send().await?.text().await })
        .unwrap()
}

pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(f64::NAN)
}

/// Refuse to run without wrk, saying how to get it.
pub fn require_wrk() {
    if Command::new("wrk").arg("--version").output().is_err() {
        panic!("this benchmark drives the service with wrk: apt-get install wrk");
    }
}

/// A distinct lowercase word for every n (texts without digits: a differing number would be
/// decided on keys, without the model).
pub fn word(mut n: u64) -> String {
    let mut w = String::new();
    loop {
        w.push(char::from(b'a' + (n % 26) as u8));
        n /= 26;
        if n == 0 {
            return w;
        }
    }
}
