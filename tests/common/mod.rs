//! Shared helpers for integration tests: the real model (loaded once per test binary), configs,
//! and event builders.
#![allow(dead_code)]

pub mod pg;

use loopguard::event::parse_envelope_value;
use loopguard::verdict::Verdict;
use loopguard::{Config, Embedder, Engine, Envelope};
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};

/// The real all-MiniLM-L6-v2 model. Tests that depend on similarity use it; a missing model is
/// a test failure that says how to fetch it, never a skip.
pub fn model() -> Embedder {
    static MODEL: OnceLock<Embedder> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            Embedder::load_model(&Config::default().model)
                .unwrap_or_else(|e| panic!("these tests run the real model: {e}"))
        })
        .clone()
}

pub fn seed_config(n: u32) -> Config {
    let path = format!("docs/seeds/seed{n:03}.toml");
    Config::from_file(std::path::Path::new(&path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn engine(cfg: Config) -> Engine {
    Engine::new(Arc::new(cfg), model())
}

/// An envelope for `task` around a bare event.
pub fn ev(task: &str, event: Value) -> Envelope {
    parse_envelope_value(json!({"task_id": task, "event": event})).expect("valid test event")
}

/// A full envelope.
pub fn env(value: Value) -> Envelope {
    parse_envelope_value(value).expect("valid test envelope")
}

pub fn failure(task: &str, message: &str) -> Envelope {
    ev(task, json!({"type": "failure", "message": message}))
}

pub fn call(task: &str, tool: &str, args: Value) -> Envelope {
    ev(
        task,
        json!({"type": "tool_call", "tool": tool, "args": args}),
    )
}

pub fn call_with(task: &str, tool: &str, args: Value, output: &str, is_error: bool) -> Envelope {
    ev(
        task,
        json!({"type": "tool_call", "tool": tool, "args": args,
               "result": {"output": output, "is_error": is_error}}),
    )
}

/// A bash call of task "t" with its output.
pub fn bash(command: &str, output: &str, is_error: bool) -> Envelope {
    call_with("t", "bash", json!({ "command": command }), output, is_error)
}

/// The index of the first loop verdict.
pub fn first_loop(vs: &[Verdict]) -> Option<usize> {
    vs.iter().position(|v| v.is_loop)
}

pub fn response(task: &str, text: &str) -> Envelope {
    ev(task, json!({"type": "response", "text": text}))
}

pub fn collab(task: &str, from: &str, to: &str, request: &str) -> Envelope {
    ev(
        task,
        json!({"type": "collaboration", "from_agent": from, "to_agent": to, "request": request}),
    )
}

pub async fn feed(engine: &Engine, events: Vec<Envelope>) -> Vec<Verdict> {
    let mut out = Vec::new();
    for e in events {
        out.push(engine.evaluate(e).await.expect("evaluate"));
    }
    out
}

pub fn loops(verdicts: &[Verdict]) -> Vec<bool> {
    verdicts.iter().map(|v| v.is_loop).collect()
}

/// An HTTP client for tests (rustls needs its crypto provider chosen first).
pub fn http_client() -> reqwest::Client {
    loopguard::judge::http::install_tls_provider();
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .expect("an HTTP client")
}

/// Where a test's servers keep their state: an embedded store in a temporary directory, or a
/// PostgreSQL database of the test's own ([`pg`]). Servers started on one backend share it.
pub struct Backend {
    pub dir: tempfile::TempDir,
    pub database_url: Option<String>,
}

impl Backend {
    pub fn embedded() -> Backend {
        Backend {
            dir: tempfile::tempdir().unwrap(),
            database_url: None,
        }
    }

    /// A fresh database; `None` when PostgreSQL is not available (the test then returns; see
    /// [`pg`] for how that is reported, and made a failure in CI).
    pub fn postgres() -> Option<Backend> {
        Some(Backend {
            dir: tempfile::tempdir().unwrap(),
            database_url: Some(pg::database()?),
        })
    }

    pub fn name(&self) -> &'static str {
        if self.database_url.is_some() {
            "postgres"
        } else {
            "embedded"
        }
    }

    /// A server on this backend, with `args` after the store's own.
    pub fn start(&self, args: &[&str]) -> Server {
        let mut all: Vec<String> = Vec::new();
        if let Some(url) = &self.database_url {
            all.extend([
                "--set".into(),
                "server.store=postgres".into(),
                "--set".into(),
                format!("server.database_url={url}"),
            ]);
        }
        all.extend(args.iter().map(|a| a.to_string()));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        Server::start(self.dir.path(), &all)
    }
}

/// A `loopguard serve` process on a free port, killed when dropped.
pub struct Server {
    pub child: std::process::Child,
    pub base: String,
}

impl Server {
    /// Start the binary with `args` after `serve --addr 127.0.0.1:0`, wait until it listens.
    pub fn start(data_dir: &std::path::Path, args: &[&str]) -> Server {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_loopguard"))
            .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(args)
            .env("LOOPGUARD_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("start loopguard serve");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the listening line");
        let base = line
            .trim()
            .strip_prefix("loopguard listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_string();
        let mut s = Server { child, base };
        s.wait_open();
        s
    }

    /// Wait until the store is open (the server listens at once, and answers 503 `starting`
    /// while it replays its log). Panics if the process exits first.
    pub fn wait_open(&mut self) {
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_secs(300) {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("loopguard serve exited while opening its store: {status}");
            }
            match raw_get(&self.base, "/readyz") {
                Some(answer) if !answer.contains("\"starting\"") => return,
                _ => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
        panic!("the store did not open within 300 s");
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// GET a path and parse the JSON answer, whatever the status.
    pub async fn get_json(&self, client: &reqwest::Client, path: &str) -> serde_json::Value {
        client
            .get(self.url(path))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// GET a path and return the body as text, whatever the status.
    pub async fn get_text(&self, client: &reqwest::Client, path: &str) -> String {
        client
            .get(self.url(path))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Wait until /readyz says the model is warm.
    pub async fn ready(&self, client: &reqwest::Client) {
        for _ in 0..600 {
            if let Ok(r) = client.get(self.url("/readyz")).send().await {
                if r.status().is_success() {
                    return;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("the server did not become ready");
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill -TERM");
        self.child.wait().expect("wait for exit")
    }
}

/// A blocking `GET path` on `base` (`http://ip:port`): the whole answer, head and body.
pub fn raw_get(base: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
