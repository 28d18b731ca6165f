//! `loopguard serve`: the HTTP service orchestrators call. It lives in the binary; the engine it
//! serves is the library's.
//!
//! [`run`] takes its listener and its shutdown future as arguments (so tests start a real server
//! on port 0), serves until shutdown, lets in-flight requests finish within the grace period,
//! stops the background sweeps and flushes the store.

mod dashboard;
mod error;
mod live;
mod metrics;
pub mod openapi;
mod overview;
mod routes;
mod validate;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use error::ApiError;
use loopguard::feedback::FeedbackStore;
use loopguard::loop_memory::LoopMemory;
use loopguard::store::sled::SledStore;
use loopguard::store::Store;
use loopguard::{Config, Embedder, Engine};
pub use metrics::Metrics;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// What the engine is built from.
pub struct Parts {
    pub embedder: Embedder,
    pub store: Arc<dyn Store>,
    pub judge: Option<Arc<dyn loopguard::judge::Judge>>,
    pub memory: Option<Arc<LoopMemory>>,
    pub feedback: Arc<FeedbackStore>,
}

impl Parts {
    /// Everything in memory (tests): no durability, loop memory as configured.
    #[cfg(test)]
    pub fn in_memory(cfg: &Config, embedder: Embedder) -> Parts {
        Parts {
            embedder,
            store: Arc::new(loopguard::store::InMemoryStore::new()),
            judge: None,
            memory: cfg
                .memory
                .enabled
                .then(|| Arc::new(LoopMemory::in_memory(cfg.memory.clone()))),
            feedback: Arc::new(FeedbackStore::in_memory()),
        }
    }
}

/// What every handler sees.
pub struct AppState {
    pub cfg: Arc<Config>,
    pub engine: Arc<Engine>,
    pub metrics: Arc<Metrics>,
    pub store: Arc<dyn Store>,
}

impl AppState {
    /// Open the store in `cfg.server.data_dir`, start loading the model (in the background:
    /// `/readyz` says when it is warm) and build the engine.
    pub fn open(cfg: Arc<Config>) -> anyhow::Result<Arc<AppState>> {
        let dir = &cfg.server.data_dir;
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("cannot create data dir {}: {e}", dir.display()))?;
        let sled = SledStore::open(dir)?;
        // The loop memory and the feedback live in the same database: one directory, one lock.
        let memory = if cfg.memory.enabled {
            let started = Instant::now();
            let m = LoopMemory::open(cfg.memory.clone(), sled.tree("loop_memory")?)?;
            tracing::info!(
                event = "loop_memory_loaded",
                records = m.len(),
                secs = started.elapsed().as_secs_f64()
            );
            Some(Arc::new(m))
        } else {
            None
        };
        let feedback = Arc::new(FeedbackStore::open(sled.tree("feedback")?));
        let slot = Arc::new(OnceLock::new());
        let embedder = Embedder::start_model_with(
            &cfg.model,
            Some(metrics::batch_observer(Arc::clone(&slot))),
        );
        let judge = loopguard::judge::from_config(&cfg.judge).map_err(anyhow::Error::msg)?;
        let parts = Parts {
            embedder,
            store: Arc::new(sled),
            judge,
            memory,
            feedback,
        };
        Ok(AppState::with(cfg, parts, slot))
    }

    /// Assemble from parts (tests use in-memory ones).
    pub fn with(
        cfg: Arc<Config>,
        parts: Parts,
        slot: Arc<OnceLock<Arc<Metrics>>>,
    ) -> Arc<AppState> {
        let Parts {
            embedder,
            store,
            judge,
            memory,
            feedback,
        } = parts;
        let mut m = Metrics::new();
        let mut engine = Engine::with_store(Arc::clone(&cfg), embedder.clone(), Arc::clone(&store))
            .with_feedback(feedback)
            .with_audit_metrics(Arc::new(m.audit_counters()));
        if let Some(j) = judge {
            engine = engine.with_judge(j);
        }
        if let Some(m) = memory {
            engine = engine.with_loop_memory(m);
        }
        let engine = Arc::new(engine);
        m.watch(embedder, Arc::clone(&engine));
        let metrics = Arc::new(m);
        let _ = slot.set(Arc::clone(&metrics));
        Arc::new(AppState {
            cfg,
            engine,
            metrics,
            store,
        })
    }
}

/// Route templates: the router is built from these, and request metrics are labelled with them
/// (a bounded label set: anything else is `other`).
pub mod paths {
    pub const EVALUATE: &str = "/v1/evaluate";
    pub const TASKS: &str = "/v1/tasks";
    pub const LOOPS: &str = "/v1/loops";
    pub const STATS: &str = "/v1/stats";
    pub const TASK: &str = "/v1/tasks/{task_id}";
    pub const TASK_HISTORY: &str = "/v1/tasks/{task_id}/history";
    pub const TASK_RESET: &str = "/v1/tasks/{task_id}/reset";
    pub const SIMILAR_LOOPS: &str = "/v1/loops/similar";
    pub const FEEDBACK: &str = "/v1/feedback";
    pub const FEEDBACK_EXPORT: &str = "/v1/feedback/export";
    pub const METRICS: &str = "/metrics";
    pub const LIVEZ: &str = "/livez";
    pub const READYZ: &str = "/readyz";
    pub const OPENAPI: &str = "/openapi.json";

    /// The dashboard page and its assets, one label for all.
    pub const DASHBOARD: [&str; 4] = [
        "/",
        "/dashboard/app.js",
        "/dashboard/style.css",
        "/dashboard/icon.svg",
    ];

    pub const ALL: [&str; 14] = [
        EVALUATE,
        TASKS,
        LOOPS,
        STATS,
        TASK,
        TASK_HISTORY,
        TASK_RESET,
        SIMILAR_LOOPS,
        FEEDBACK,
        FEEDBACK_EXPORT,
        METRICS,
        LIVEZ,
        READYZ,
        OPENAPI,
    ];

    /// The metrics label of a matched route template.
    pub fn label(matched: Option<&str>) -> &'static str {
        match matched {
            Some(m) if DASHBOARD.contains(&m) => "dashboard",
            Some(m) => ALL.into_iter().find(|p| *p == m).unwrap_or("other"),
            None => "other",
        }
    }
}

/// The routes, with authentication, timeouts and request metrics.
pub fn router(state: Arc<AppState>) -> Router {
    let api = Router::new()
        .route(paths::EVALUATE, post(routes::evaluate))
        .route(paths::TASKS, get(overview::list_tasks))
        .route(
            paths::TASK,
            get(routes::get_task).delete(routes::delete_task),
        )
        .route(paths::TASK_HISTORY, get(routes::get_history))
        .route(paths::TASK_RESET, post(routes::reset_task))
        .route(paths::LOOPS, get(overview::recent_loops))
        .route(paths::SIMILAR_LOOPS, get(routes::similar_loops))
        .route(paths::STATS, get(overview::stats))
        .route(paths::FEEDBACK, post(routes::feedback))
        .route(paths::FEEDBACK_EXPORT, get(routes::export_feedback))
        .route(paths::METRICS, get(routes::metrics))
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            authenticate,
        ));
    // The page shell holds no data, so it is public even with a token (see dashboard.rs).
    let page = if state.cfg.server.dashboard {
        let [index, script, style, icon] = paths::DASHBOARD;
        Router::new()
            .route(index, get(dashboard::index))
            .route(script, get(dashboard::script))
            .route(style, get(dashboard::style))
            .route(icon, get(dashboard::icon))
    } else {
        Router::new()
    };
    Router::new()
        .merge(api)
        .merge(page)
        .route(paths::LIVEZ, get(routes::livez))
        .route(paths::READYZ, get(routes::readyz))
        .route(paths::OPENAPI, get(routes::openapi))
        .fallback(routes::not_found)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            request_metrics,
        ))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(panicked))
        .with_state(state)
}

fn panicked(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "internal error; the event may not have been applied",
    )
    .into_response()
}

/// Bearer-token check for the API and metrics (never for /livez and /readyz).
async fn authenticate(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let Some(token) = state.cfg.server.auth_token.as_deref() else {
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes())) {
        next.run(req).await
    } else {
        let mut resp = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid `Authorization: Bearer <token>` header is required",
        )
        .into_response();
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer"),
        );
        resp
    }
}

// Comparing a secret must not leak how many leading bytes matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Request timeout and per-route metrics.
async fn request_metrics(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = paths::label(req.extensions().get::<MatchedPath>().map(|p| p.as_str()));
    let started = Instant::now();
    let timeout = Duration::from_millis(state.cfg.server.request_timeout_ms);
    let resp = match tokio::time::timeout(timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => {
            let mut e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                format!(
                    "the request took longer than {} ms (server.request_timeout_ms); it may or may not have been applied",
                    timeout.as_millis()
                ),
            );
            e.retry_after_secs = Some(1);
            e.into_response()
        }
    };
    state
        .metrics
        .requests
        .get_or_create(&metrics::RequestLabels {
            route,
            status: resp.status().as_u16(),
        })
        .inc();
    let secs = started.elapsed().as_secs_f64();
    state
        .metrics
        .request_seconds
        .get_or_create(&metrics::RouteLabels { route })
        .observe(secs);
    if route == "/v1/evaluate" && resp.status().is_success() {
        state.metrics.live.evaluate_request(secs);
    }
    resp
}

/// Serve on `listener` until `shutdown` resolves; then drain, stop the sweeps and flush.
pub async fn run(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let sweeper = tokio::spawn(sweep(Arc::clone(&state), stop_rx));
    let grace = Duration::from_secs(state.cfg.server.shutdown_grace_secs);
    let (drain_tx, drain_rx) = tokio::sync::oneshot::channel::<()>();
    let server =
        axum::serve(listener, router(Arc::clone(&state))).with_graceful_shutdown(async move {
            shutdown.await;
            tracing::info!(event = "shutdown", "draining in-flight requests");
            let _ = drain_tx.send(());
        });
    let serving = tokio::spawn(async move { server.await });
    // Graceful shutdown waits for in-flight requests; past the grace period, stop waiting.
    let result = tokio::select! {
        r = serving => r.map_err(anyhow::Error::from).and_then(|r| r.map_err(anyhow::Error::from)),
        _ = async {
            let _ = drain_rx.await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(event = "shutdown", "grace period over with requests still in flight");
            Ok(())
        }
    };
    let _ = stop_tx.send(true);
    let _ = sweeper.await;
    state.engine.settle().await;
    if let Some(m) = state.engine.loop_memory() {
        m.flush().await?;
    }
    state.engine.feedback_store().flush().await?;
    state.store.flush().await?;
    tracing::info!(event = "shutdown", "state flushed; bye");
    result
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
mod tests_dashboard;
