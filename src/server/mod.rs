//! `loopguard serve`: the HTTP service orchestrators call. It lives in the binary; the engine it
//! serves is the library's.
//!
//! [`run`] takes its listener and its shutdown future as arguments (so tests start a real server
//! on port 0). It answers at once — `/livez`, and `/readyz` saying the store is opening — while
//! the store opens and replays its log, then serves the API until shutdown, lets in-flight
//! requests finish within the grace period, stops the background sweeps, flushes the store and
//! closes it.
//!
//! - [`route_table`]: every route; `routes`: the handlers.
//! - `body`, `params`, `validate`: bodies (media type, size, strict JSON), path and query
//!   parameters, and the limit of every field, each rejection named by its path.
//! - `error`: one error body, `{code, message, path}`, for every 4xx and 5xx.
//! - `conn`: accepting and serving connections: header, body and idle timeouts, the connection
//!   cap.
//! - `openapi`: the document, completed from the running configuration.
//! - `metrics`: Prometheus metrics.

mod body;
mod conn;
mod dashboard;
mod error;
mod hooks;
mod integrations;
mod live;
mod metrics;
pub mod openapi;
mod otlp;
mod overview;
mod params;
mod routes;
mod validate;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use error::{ApiError, ErrorBody};
use loopguard::config::StoreKind;
use loopguard::feedback::{FeedbackLimits, FeedbackStore};
use loopguard::loop_memory::LoopMemory;
use loopguard::store::log::{LogOptions, LogStore};
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
            feedback: Arc::new(
                FeedbackStore::in_memory().with_limits(FeedbackLimits::of(&cfg.feedback)),
            ),
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
    /// Open the store `cfg.server.store` names, start loading the model (in the background:
    /// `/readyz` says when it is warm) and build the engine, counting into `metrics`.
    pub async fn open(cfg: Arc<Config>, metrics: Metrics) -> anyhow::Result<Arc<AppState>> {
        let (store, memory, feedback) = match cfg.server.store {
            StoreKind::Embedded => open_embedded(&cfg).await?,
            StoreKind::Postgres => open_postgres(&cfg).await?,
        };
        let slot = Arc::new(OnceLock::new());
        let embedder = Embedder::start_service_model(
            &cfg.model,
            Some(metrics::batch_observer(Arc::clone(&slot))),
        );
        let judge = loopguard::judge::from_config(&cfg.judge).map_err(anyhow::Error::msg)?;
        let parts = Parts {
            embedder,
            store,
            judge,
            memory,
            feedback,
        };
        Ok(AppState::with_metrics(cfg, parts, slot, metrics))
    }

    /// Assemble from parts (tests use in-memory ones).
    #[cfg(test)]
    pub fn with(
        cfg: Arc<Config>,
        parts: Parts,
        slot: Arc<OnceLock<Arc<Metrics>>>,
    ) -> Arc<AppState> {
        AppState::with_metrics(cfg, parts, slot, Metrics::new())
    }

    fn with_metrics(
        cfg: Arc<Config>,
        parts: Parts,
        slot: Arc<OnceLock<Arc<Metrics>>>,
        mut m: Metrics,
    ) -> Arc<AppState> {
        let Parts {
            embedder,
            store,
            judge,
            memory,
            feedback,
        } = parts;
        // The service dates events by its own clock: expiry and the gap rule must not be
        // decided by what a client writes in `ts`.
        let mut engine = Engine::with_store(Arc::clone(&cfg), embedder.clone(), Arc::clone(&store))
            .with_feedback(feedback)
            .with_audit_metrics(Arc::new(m.audit_counters()))
            .with_clock(loopguard::engine::Clock::Server);
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

/// A store, its loop memory (when enabled) and its feedback.
type Stores = (Arc<dyn Store>, Option<Arc<LoopMemory>>, Arc<FeedbackStore>);

/// The embedded store in `server.data_dir`; the loop memory and the feedback live in the same
/// database: one directory, one lock.
async fn open_embedded(cfg: &Config) -> anyhow::Result<Stores> {
    let dir = &cfg.server.data_dir;
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot create data dir {}: {e}", dir.display()))?;
    let sled = SledStore::open(dir)?;
    let tasks = open_task_log(cfg, &sled).await?;
    let memory = if cfg.memory.enabled {
        let started = Instant::now();
        let m = LoopMemory::open_sled(cfg.memory.clone(), sled.tree("loop_memory")?).await?;
        tracing::info!(
            event = "loop_memory_loaded",
            records = m.len(),
            secs = started.elapsed().as_secs_f64()
        );
        Some(Arc::new(m))
    } else {
        None
    };
    let feedback = Arc::new(
        FeedbackStore::open(sled.tree("feedback")?, sled.tree("feedback_by_task")?)?
            .with_limits(FeedbackLimits::of(&cfg.feedback)),
    );
    Ok((Arc::new(tasks), memory, feedback))
}

/// The task log in `data_dir/tasks`. Task states an earlier version kept in the sled database
/// are moved into it first, once: an upgrade keeps every task.
async fn open_task_log(cfg: &Config, sled: &SledStore) -> anyhow::Result<LogStore> {
    let dir = cfg.server.data_dir.join("tasks");
    let started = Instant::now();
    let log = LogStore::open(
        &dir,
        LogOptions {
            segment_bytes: cfg.server.task_log_segment_bytes,
            audit_kept: cfg.server.task_log_audit_kept,
            cached_tasks: cfg.server.max_cached_tasks,
        },
    )?;
    let legacy = sled.stored_tasks()?;
    if !legacy.is_empty() {
        let mut moved = 0;
        for (state, audit, subtasks) in &legacy {
            moved += usize::from(log.import(state, audit, subtasks).await?);
        }
        sled.forget_tasks()?;
        tracing::info!(
            event = "tasks_moved_to_task_log",
            tasks = legacy.len(),
            moved,
            dir = %dir.display()
        );
    }
    tracing::info!(
        event = "task_log_opened",
        tasks = loopguard::store::Store::task_count(&log).await?,
        bytes = log.size_on_disk(),
        secs = started.elapsed().as_secs_f64()
    );
    Ok(log)
}

/// The PostgreSQL database at `server.database_url`, shared with the other replicas: tasks,
/// loop memory (followed every `memory.sync_interval_ms`) and feedback. A database that cannot
/// be reached yet does not stop the start: `/readyz` says so until it can.
async fn open_postgres(cfg: &Config) -> anyhow::Result<Stores> {
    use loopguard::store::postgres::{Database, PgFeedback, PgLoops, PgOptions, PostgresStore};
    let db = Database::open(&PgOptions::from_config(&cfg.server)?).await?;
    let memory = if cfg.memory.enabled {
        let started = Instant::now();
        let m = Arc::new(
            LoopMemory::open(cfg.memory.clone(), Arc::new(PgLoops::new(db.clone()))).await?,
        );
        m.start_sync(Duration::from_millis(cfg.memory.sync_interval_ms));
        tracing::info!(
            event = "loop_memory_loaded",
            records = m.len(),
            secs = started.elapsed().as_secs_f64()
        );
        Some(m)
    } else {
        None
    };
    let feedback = Arc::new(
        FeedbackStore::with_log(Box::new(PgFeedback::new(db.clone())))
            .with_limits(FeedbackLimits::of(&cfg.feedback)),
    );
    Ok((Arc::new(PostgresStore::new(db)), memory, feedback))
}

/// The dashboard page and its assets: not API routes (not in the OpenAPI document), one
/// metrics label for all of them.
const DASHBOARD_PATHS: [&str; 4] = [
    "/",
    "/dashboard/app.js",
    "/dashboard/style.css",
    "/dashboard/icon.svg",
];

/// Every route: its path, whether it needs the bearer token, and its handlers. The router is
/// built from this list, and a test checks every path and method in it against the OpenAPI
/// document, so a route cannot be added without being documented (and fuzzed in CI).
pub fn route_table() -> Vec<(&'static str, bool, MethodRouter<Arc<AppState>>)> {
    vec![
        ("/v1/evaluate", true, post(routes::evaluate)),
        ("/v1/tasks", true, get(overview::list_tasks)),
        (
            "/v1/tasks/{task_id}",
            true,
            get(routes::get_task).delete(routes::delete_task),
        ),
        (
            "/v1/tasks/{task_id}/history",
            true,
            get(routes::get_history),
        ),
        ("/v1/tasks/{task_id}/reset", true, post(routes::reset_task)),
        ("/v1/loops", true, get(overview::recent_loops)),
        ("/v1/loops/similar", true, get(routes::similar_loops)),
        ("/v1/stats", true, get(overview::stats)),
        ("/v1/feedback", true, post(routes::feedback)),
        ("/v1/feedback/export", true, get(routes::export_feedback)),
        ("/v1/hooks/claude-code", true, post(hooks::claude_code)),
        ("/v1/hooks/gemini-cli", true, post(hooks::gemini_cli)),
        ("/v1/traces", true, post(otlp::traces)),
        ("/metrics", true, get(routes::metrics)),
        ("/livez", false, get(routes::livez)),
        ("/readyz", false, get(routes::readyz)),
        ("/openapi.json", false, get(routes::openapi)),
    ]
}

/// The routes, with authentication, timeouts, request metrics and one error body shape.
pub fn router(state: Arc<AppState>) -> Router {
    let mut api = Router::new();
    let mut open = Router::new();
    for (path, guarded, handlers) in route_table() {
        if guarded {
            api = api.route(path, handlers);
        } else {
            open = open.route(path, handlers);
        }
    }
    let api = api.route_layer(middleware::from_fn_with_state(
        Arc::clone(&state),
        authenticate,
    ));
    // The page shell holds no data, so it is public even with a token (see dashboard.rs).
    let page = if state.cfg.server.dashboard {
        let [index, script, style, icon] = DASHBOARD_PATHS;
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
        .merge(open)
        .merge(page)
        .fallback(routes::not_found)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            request_metrics,
        ))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(panicked))
        .layer(middleware::from_fn(json_errors))
        .with_state(state)
}

/// Whatever answers a 4xx or 5xx without our JSON body (axum's 405 with its `Allow` header, a
/// rejection nobody foresaw) gets one: `{code, message, path}`, the original text as message.
async fn json_errors(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let resp = next.run(req).await;
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = match status {
        StatusCode::METHOD_NOT_ALLOWED => format!(
            "this route does not answer {method}; it answers {}",
            parts
                .headers
                .get(header::ALLOW)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("other methods")
        ),
        _ if !text.is_empty() => text.chars().take(1000).collect(),
        _ => status
            .canonical_reason()
            .unwrap_or("request failed")
            .to_string(),
    };
    let body = serde_json::to_vec(&ErrorBody {
        code: error::code_for_status(status),
        message,
        path: None,
    })
    .expect("an error body serialises");
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, axum::body::Body::from(body))
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
        .and_then(bearer_token);
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

/// The token of an `Authorization: Bearer <token>` header. The scheme is case-insensitive
/// (RFC 9110 §11.1): `bearer`, `BEARER` and `Bearer` are the same.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_matches(' '))
}

// Comparing a secret must not leak how many leading bytes matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Request timeout and per-route metrics.
async fn request_metrics(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = route_label(req.extensions().get::<MatchedPath>().map(|p| p.as_str()));
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

/// The metrics label of a request: its route template, or `other` for unknown paths. Labels
/// stay bounded: only templates of [`route_table`] are ever interned.
fn route_label(matched: Option<&str>) -> &'static str {
    static LABELS: OnceLock<Vec<&'static str>> = OnceLock::new();
    let labels = LABELS.get_or_init(|| route_table().into_iter().map(|(p, _, _)| p).collect());
    match matched {
        Some(m) if DASHBOARD_PATHS.contains(&m) => "dashboard",
        Some(m) => labels.iter().find(|l| **l == m).copied().unwrap_or("other"),
        None => "other",
    }
}

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
        starting: routes::starting_router(),
    };
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(conn::serve(
        listener,
        routes.clone(),
        limits,
        conn::ConnMetrics::of(&metrics),
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
