//! `loopguard serve`: the HTTP service orchestrators call. It lives in the binary; the engine it
//! serves is the library's.
//!
//! [`run`] takes its listener and its shutdown future as arguments (so tests start a real server
//! on port 0). It answers at once — `/livez`, and `/readyz` saying the store is opening — while
//! the store opens and replays its log, then serves the API until shutdown, lets in-flight
//! requests finish within the grace period, stops the background sweeps, flushes the store and
//! closes it.
//!
//! # Layout
//!
//! Layers, each a folder or a file; a layer uses only the layers listed before it (and the
//! library), never one after it: tests/module_cycles.rs fails on an import cycle.
//!
//! - `http`: the plumbing, which uses none of the others. Connections and their timeouts
//!   (`conn`), bodies (`body`), the error body and its middleware (`error`), path and query
//!   parameters (`params`), field length limits (`limits`), time on the wire (`time`).
//! - `metrics`: what every layer counts into: the Prometheus metrics and the last minute's
//!   live figures.
//! - `state`: what every handler sees ([`AppState`]), and the stores it is opened from.
//! - `views`: what people read. The dashboard page and the overview (`/v1/tasks`, `/v1/loops`,
//!   `/v1/stats`).
//! - `ingest`: events from agents in their own formats. The coding-agent hooks, the OTLP
//!   receiver (GenAI and OpenInference spans) and what they share (`integrations`).
//! - `api`: loopguard's own API. Evaluation, tasks, loops, feedback, the operations probes, the
//!   field limits of every body (`validate`) and the OpenAPI document (`openapi`), which lists
//!   every layer's routes.
//! - `router`: every route ([`router::route_table`]) behind authentication, the request timeout
//!   and request metrics.

mod api;
mod http;
mod ingest;
mod metrics;
mod router;
mod state;
mod views;

pub use api::openapi;
pub use metrics::Metrics;
pub use router::router;
pub use state::AppState;

use http::conn;
use loopguard::Config;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Serve on `listener` at once; open the state (the store's log replayed meanwhile, `/livez`
/// answering); serve the API until `shutdown` resolves; then drain, stop the sweeps, flush and
/// close the store. An error opening the state ends it (the listener closes).
pub async fn run(
    listener: tokio::net::TcpListener,
    cfg: Arc<Config>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let metrics = Metrics::new();
    let limits = conn::ConnLimits::of(&cfg.server);
    conn::fit_open_file_limit(limits.max_connections);
    let routes = conn::Routes {
        ready: Arc::new(OnceLock::new()),
        starting: api::operations::starting_router(),
    };
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(conn::serve(
        listener,
        routes.clone(),
        limits,
        metrics.connections(),
        async move {
            tokio::select! {
                _ = shutdown => tracing::info!(event = "shutdown", "draining in-flight requests"),
                _ = failed_rx => {}
            }
        },
    ));
    let started = Instant::now();
    let state = match AppState::open(Arc::clone(&cfg), metrics).await {
        Ok(state) => state,
        Err(e) => {
            let _ = failed_tx.send(());
            let _ = server.await;
            return Err(e);
        }
    };
    let _ = routes.ready.set(router(Arc::clone(&state)));
    tracing::info!(
        event = "ready_to_serve",
        secs = started.elapsed().as_secs_f64(),
        "the store is open; serving the API"
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let sweeper = tokio::spawn(sweep(Arc::clone(&state), stop_rx));
    let _ = server.await;
    drop(failed_tx);
    let _ = stop_tx.send(true);
    let _ = sweeper.await;
    state.engine.settle().await;
    if let Some(m) = state.engine.loop_memory() {
        m.flush().await?;
    }
    state.engine.feedback_store().flush().await?;
    state.store.flush().await?;
    state.store.close();
    tracing::info!(event = "shutdown", "state flushed; bye");
    Ok(())
}

/// Background: delete idle tasks and keep the in-memory cache bounded.
async fn sweep(state: Arc<AppState>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let every = Duration::from_secs(state.cfg.server.expiry_sweep_secs.max(1));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        match state
            .engine
            .expire_idle(state.cfg.server.task_ttl_secs, now)
            .await
        {
            Ok(expired) => {
                for _ in &expired {
                    state.metrics.tasks_expired.inc();
                }
            }
            Err(e) => tracing::error!(error = %e, "expiring idle tasks failed"),
        }
        state.engine.trim_cache(state.cfg.server.max_cached_tasks);
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_contract;
#[cfg(test)]
mod tests_dashboard;
