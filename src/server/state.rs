//! What every handler sees ([`AppState`]) and what it is built from: the store `server.store`
//! names (opened, its log replayed), the model, the judge, the loop memory and the feedback.

use crate::server::metrics::{batch_observer, Metrics};
use loopguard::config::StoreKind;
use loopguard::feedback::{FeedbackLimits, FeedbackStore};
use loopguard::loop_memory::LoopMemory;
use loopguard::store::log::{LogOptions, LogStore};
use loopguard::store::sled::SledStore;
use loopguard::store::Store;
use loopguard::{Config, Embedder, Engine};
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
        let embedder =
            Embedder::start_service_model(&cfg.model, Some(batch_observer(Arc::clone(&slot))));
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
