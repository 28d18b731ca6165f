//! `loopguard serve`: the HTTP service.

use super::Cli;
use crate::server;
use std::path::PathBuf;
use std::sync::Arc;

/// Every option here is also a config key (`[server]` in loopguard.toml) and an environment
/// variable (LOOPGUARD_SERVER__<KEY>); flags win over both.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on, IP:PORT (server.addr; port 0 picks a free one).
    #[arg(long, value_name = "IP:PORT")]
    pub addr: Option<String>,

    /// Directory of the embedded store: task states, audit trails, loop memory, feedback
    /// (server.data_dir; not used with server.store = "postgres").
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// Delete tasks idle for longer than this many seconds (server.task_ttl_secs).
    #[arg(long, value_name = "SECS")]
    pub task_ttl_secs: Option<u64>,

    /// Largest request body in bytes (server.max_body_bytes).
    #[arg(long, value_name = "BYTES")]
    pub max_body_bytes: Option<usize>,

    /// Answer 503 to requests that take longer than this (server.request_timeout_ms).
    #[arg(long, value_name = "MS")]
    pub request_timeout_ms: Option<u64>,

    /// On SIGTERM/Ctrl-C, let in-flight requests finish for this long (server.shutdown_grace_secs).
    #[arg(long, value_name = "SECS")]
    pub shutdown_grace_secs: Option<u64>,

    /// Set any configuration key, e.g. `--set detect.similarity.failure=0.9` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

impl ServeArgs {
    fn overrides(&self) -> Result<Vec<(String, String)>, String> {
        let mut o = Vec::new();
        if let Some(v) = &self.addr {
            o.push(("server.addr".into(), format!("{v:?}")));
        }
        if let Some(v) = &self.data_dir {
            o.push((
                "server.data_dir".into(),
                format!("{:?}", v.display().to_string()),
            ));
        }
        for (key, v) in [
            (
                "server.task_ttl_secs",
                self.task_ttl_secs.map(|v| v.to_string()),
            ),
            (
                "server.max_body_bytes",
                self.max_body_bytes.map(|v| v.to_string()),
            ),
            (
                "server.request_timeout_ms",
                self.request_timeout_ms.map(|v| v.to_string()),
            ),
            (
                "server.shutdown_grace_secs",
                self.shutdown_grace_secs.map(|v| v.to_string()),
            ),
        ] {
            if let Some(v) = v {
                o.push((key.into(), v));
            }
        }
        for kv in &self.set {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("--set {kv}: expected KEY=VALUE"))?;
            o.push((k.trim().to_string(), v.trim().to_string()));
        }
        Ok(o)
    }
}

pub fn run(cli: &Cli, args: &ServeArgs) -> Result<(), String> {
    let cfg =
        super::load_config(cli.config.as_deref(), &args.overrides()?).map_err(|e| e.to_string())?;
    tracing::info!(config = %cfg.redacted().to_toml(), "effective configuration");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let addr = cfg.server.addr.clone();
        // Listening comes first: `/livez` answers while the store opens and replays its log
        // (`/readyz` says when it can serve).
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        // On stdout, so scripts starting it on port 0 learn the port.
        println!("loopguard listening on http://{local}");
        tracing::info!(event = "listening", addr = %local);
        server::run(listener, Arc::new(cfg), server::shutdown_signal())
            .await
            .map_err(|e| e.to_string())
    })
}
