//! Local sentence embeddings: model workers own the model, concurrent callers are batched, and
//! no text is embedded twice.
//!
//! - [`Embedder`] is the cheap, cloneable handle callers use. It answers from a bounded LRU cache
//!   when it can and otherwise queues a job for the model workers.
//! - Each model worker (`model.workers` of them, one ONNX Runtime session and `model.threads`
//!   intra-op threads each) takes every job waiting in the queue (up to `max_batch` texts) and
//!   runs them as its model calls: continuous batching with no fill timer, so a lone request is
//!   not delayed. It checks the cache again before embedding and claims what it embeds, so two
//!   callers asking for the same text in quick succession still cost one embedding.
//! - [`FastEmbedBackend`] runs all-MiniLM-L6-v2 (mean pooling, L2-normalised, 384-d) through
//!   fastembed with ONNX Runtime loaded at run time: by default the int8 derivation
//!   `models/fetch.py` writes, whose matrix products run as 8-bit integer kernels.
//!   [`StubBackend`] is a lexical stand-in for fast unit tests of detector logic; it is never
//!   the default.

mod backend;
mod disk;
mod workers;

pub use backend::{FastEmbedBackend, StubBackend};
pub use disk::DiskCache;

use crate::config::ModelConfig;
use lru::LruCache;
use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// An L2-normalised embedding, shared between the cache and task windows.
pub type Vector = Arc<[f32]>;

/// Embedding dimension of all-MiniLM-L6-v2.
pub const DIM: usize = 384;

/// The command that fetches the model and the runtime, quoted in every "missing" error.
pub const FETCH_COMMAND: &str = "python3 models/fetch.py";

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum EmbedError {
    #[error("embedding model file {} is missing; run `{FETCH_COMMAND}` to fetch it (or set [model] dir / LOOPGUARD_MODEL__DIR)", .0.display())]
    ModelMissing(PathBuf),
    #[error("ONNX Runtime library {} not found; run `{FETCH_COMMAND}` to fetch it (or set ORT_DYLIB_PATH / [model] ort_dylib)", .0.display())]
    RuntimeMissing(PathBuf),
    #[error("ONNX Runtime at {path} could not be loaded: {message}")]
    RuntimeLoad { path: String, message: String },
    #[error("embedding model error: {0}")]
    Model(String),
    /// The model is too busy to take more work now: the queue is full, or the texts queued
    /// ahead would take longer than the wait target to embed. Retry shortly.
    #[error("the embedding model is overloaded: {0}")]
    Overloaded(String),
    #[error("the embedding model is not available: {0}")]
    Unavailable(String),
}

/// What runs inside a model worker.
pub trait EmbedBackend: Send {
    /// Embed a batch; one L2-normalised vector per text, in order.
    fn embed_batch(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// A short description for logs and `/readyz`.
    fn describe(&self) -> String;
}

/// Counters the metrics endpoint and benchmarks read.
#[derive(Debug, Default)]
pub struct EmbedStats {
    pub cache_hits: AtomicU64,
    pub cache_misses: AtomicU64,
    pub texts_embedded: AtomicU64,
    pub batches: AtomicU64,
    pub model_nanos: AtomicU64,
    /// Texts the embedding cache on disk answered instead of the model.
    pub disk_hits: AtomicU64,
}

/// Called after every model call with its batch size and duration (for histograms).
pub type BatchObserver = Arc<dyn Fn(usize, Duration) + Send + Sync>;

impl EmbedStats {
    /// Texts that needed a model vector: embedded by the model, or answered by the cache on
    /// disk with the vector the model gave them in an earlier command. What detection asks of
    /// the model, whatever the state of the disk cache.
    pub fn model_texts(&self) -> u64 {
        self.texts_embedded.load(Ordering::Relaxed) + self.disk_hits.load(Ordering::Relaxed)
    }

    fn record_batch(&self, size: usize, took: Duration) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.texts_embedded
            .fetch_add(size as u64, Ordering::Relaxed);
        self.model_nanos
            .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
    }
}

const LOADING: u8 = 0;
const READY: u8 = 1;
const FAILED: u8 = 2;

struct Job {
    texts: Vec<String>,
    reply: oneshot::Sender<Reply>,
}

/// A job's answer: one vector per text, in order.
type Reply = Result<Vec<Vector>, EmbedError>;

struct Inner {
    queue: workers::Queue,
    cache: Mutex<LruCache<String, Vector>>,
    /// Texts a worker is embedding now; another worker that needs one waits for it on
    /// `claimed` instead of embedding it again.
    claims: Mutex<HashSet<String>>,
    claimed: Condvar,
    stats: EmbedStats,
    state: AtomicU8,
    /// Workers that loaded (set when the pool is ready), and those running a model call.
    workers: AtomicUsize,
    busy_workers: AtomicUsize,
    /// Jobs waiting for a worker.
    queued: AtomicU64,
    /// Texts in the jobs waiting, and in the model calls running: the work ahead of a new job.
    queued_texts: AtomicU64,
    running_texts: AtomicU64,
    /// Recent model time per text of one worker, in nanoseconds (a moving average over calls).
    nanos_per_text: AtomicU64,
    /// Most texts in one job: a request's texts are split into jobs of at most this many, so
    /// that a model run one text per call spreads one request over idle workers.
    texts_per_job: usize,
    /// Refuse a job whose estimated wait is longer than this.
    wait_target: Option<Duration>,
    /// Resident memory each worker added while loading (its session, weights and warm-up), in
    /// bytes; 0 where it cannot be measured.
    memory_per_worker: AtomicU64,
    failure: OnceLock<EmbedError>,
    /// Notified once `state` leaves LOADING (ready or failed): [`Embedder::wait_ready`] sleeps on
    /// it instead of polling.
    settled: (Mutex<bool>, Condvar),
    description: OnceLock<String>,
    /// The embedding cache on disk (batch commands only), opened once the workers have loaded.
    disk: OnceLock<Mutex<DiskCache>>,
}

impl Inner {
    /// Wakes every [`Embedder::wait_ready`]: call after `state` is READY or FAILED.
    fn announce_settled(&self) {
        let (lock, cvar) = &self.settled;
        *lock.lock().expect("model readiness lock") = true;
        cvar.notify_all();
    }
}

/// Closes the queue when the last handle goes: the workers then stop, and their sessions'
/// memory is freed (tests and commands that load a model more than once do not keep them all).
struct Owner(Arc<Inner>);

impl Drop for Owner {
    fn drop(&mut self) {
        self.0.queue.close();
    }
}

/// Handle to the model workers. Clone it freely; the workers stop when the last clone goes.
#[derive(Clone)]
pub struct Embedder {
    inner: Arc<Inner>,
    _owner: Arc<Owner>,
}

/// How the model workers batch and cache.
#[derive(Clone)]
pub struct EmbedderOptions {
    /// Most texts in one model call.
    pub max_batch: usize,
    /// Most padded tokens in one model call (texts × the longest text's tokens): bounds the
    /// model's working memory when texts are long.
    pub max_batch_tokens: usize,
    /// Jobs waiting for a model worker before callers get [`EmbedError::Overloaded`].
    pub queue_capacity: usize,
    /// A job whose texts would wait longer than this behind the work already queued (estimated
    /// from the model's recent time per text) is refused with [`EmbedError::Overloaded`] at
    /// once, rather than answered late. `None`: only `queue_capacity` bounds the queue.
    pub queue_wait_target: Option<Duration>,
    /// Embeddings kept in the LRU cache.
    pub cache_entries: usize,
    /// Told about every model call.
    pub on_batch: Option<BatchObserver>,
    /// Keep the model's vectors on disk under this directory, bounded to this many bytes, and
    /// answer from them first ([`DiskCache`]).
    pub disk_cache: Option<(PathBuf, u64)>,
}

impl Default for EmbedderOptions {
    fn default() -> Self {
        EmbedderOptions {
            max_batch: 64,
            max_batch_tokens: 8192,
            queue_capacity: 1024,
            queue_wait_target: None,
            cache_entries: 20_000,
            on_batch: None,
            disk_cache: None,
        }
    }
}

impl From<&ModelConfig> for EmbedderOptions {
    fn from(c: &ModelConfig) -> Self {
        EmbedderOptions {
            max_batch: c.max_batch.max(1),
            max_batch_tokens: c.max_batch_tokens.max(1),
            queue_capacity: c.queue_capacity.max(1),
            // Admission control is the service's: a batch job (`score`, `calibrate`) would rather
            // wait for the model than be refused. See [`Embedder::start_service_model`].
            queue_wait_target: None,
            cache_entries: c.cache_entries.max(1),
            on_batch: None,
            // The service's texts are new ones; only batch commands replay the same texts.
            // See [`Embedder::load_batch_model`].
            disk_cache: None,
        }
    }
}

impl Embedder {
    /// Start one model worker; `load` runs on its thread (the model never leaves it).
    /// Returns at once: [`Embedder::wait_ready`] blocks until the model is loaded and warm.
    pub fn start<F>(load: F, opts: EmbedderOptions) -> Embedder
    where
        F: FnOnce() -> Result<Box<dyn EmbedBackend>, EmbedError> + Send + 'static,
    {
        let once = Mutex::new(Some(load));
        Embedder::start_workers(
            1,
            move |_| {
                let load = once.lock().expect("load lock").take();
                load.expect("one worker loads once")()
            },
            opts,
        )
    }

    /// Start `workers` model workers, each on its own thread, where each calls `load` with its
    /// index (0..workers) to get its own backend. Returns at once: [`Embedder::wait_ready`]
    /// blocks until every worker is loaded and warm (or none could load).
    pub fn start_workers<F>(workers: usize, load: F, opts: EmbedderOptions) -> Embedder
    where
        F: Fn(usize) -> Result<Box<dyn EmbedBackend>, EmbedError> + Send + Sync + 'static,
    {
        let inner = Arc::new(Inner {
            queue: workers::Queue::new(opts.queue_capacity),
            cache: Mutex::new(LruCache::new(
                NonZeroUsize::new(opts.cache_entries).expect("cache_entries >= 1"),
            )),
            claims: Mutex::new(HashSet::new()),
            claimed: Condvar::new(),
            stats: EmbedStats::default(),
            state: AtomicU8::new(LOADING),
            workers: AtomicUsize::new(0),
            busy_workers: AtomicUsize::new(0),
            queued: AtomicU64::new(0),
            queued_texts: AtomicU64::new(0),
            running_texts: AtomicU64::new(0),
            nanos_per_text: AtomicU64::new(0),
            texts_per_job: opts.max_batch.max(1),
            wait_target: opts.queue_wait_target,
            memory_per_worker: AtomicU64::new(0),
            failure: OnceLock::new(),
            settled: (Mutex::new(false), Condvar::new()),
            description: OnceLock::new(),
            disk: OnceLock::new(),
        });
        workers::spawn(
            workers,
            Arc::new(load),
            Arc::clone(&inner),
            workers::Settings {
                max_batch: opts.max_batch.max(1),
                max_batch_tokens: opts.max_batch_tokens.max(1),
                observer: opts.on_batch,
                disk: opts.disk_cache,
            },
        );
        Embedder {
            _owner: Arc::new(Owner(Arc::clone(&inner))),
            inner,
        }
    }

    /// Start the real model described by `cfg` (see [`FastEmbedBackend::load`]).
    pub fn start_model(cfg: &ModelConfig) -> Embedder {
        Embedder::start_model_with(cfg, None)
    }

    /// Start the real model, telling `on_batch` about every model call.
    pub fn start_model_with(cfg: &ModelConfig, on_batch: Option<BatchObserver>) -> Embedder {
        let mut opts = EmbedderOptions::from(cfg);
        opts.on_batch = on_batch;
        Embedder::start_model_opts(cfg, opts)
    }

    /// Start the real model for the service: as [`Embedder::start_model_with`], and work that
    /// would wait longer than `model.queue_wait_target_ms` behind the queue is refused at once
    /// (the caller answers 429) instead of adding to everyone's latency.
    pub fn start_service_model(cfg: &ModelConfig, on_batch: Option<BatchObserver>) -> Embedder {
        let mut opts = EmbedderOptions::from(cfg);
        opts.on_batch = on_batch;
        opts.queue_wait_target = Some(Duration::from_millis(cfg.queue_wait_target_ms.max(1)));
        Embedder::start_model_opts(cfg, opts)
    }

    fn start_model_opts(cfg: &ModelConfig, mut opts: EmbedderOptions) -> Embedder {
        let model = cfg.resolved_dir().join("model.onnx");
        if opts.max_batch > 1 && quantizes_activations_per_call(&model) {
            tracing::info!(
                model = %model.display(),
                max_batch = opts.max_batch,
                "the model quantizes its activations with one scale per call: one text per model \
                 call, so each text's vector depends on that text alone"
            );
            opts.max_batch = 1;
        }
        let cfg2 = cfg.clone();
        Embedder::start_workers(
            cfg.resolved_workers(),
            move |_| FastEmbedBackend::load(&cfg2).map(|b| Box::new(b) as Box<dyn EmbedBackend>),
            opts,
        )
    }

    /// Start the lexical stub (tests of detector logic only).
    pub fn start_stub() -> Embedder {
        Embedder::start(
            || Ok(Box::new(StubBackend) as Box<dyn EmbedBackend>),
            EmbedderOptions::default(),
        )
    }

    /// Load the real model and wait until it is warm; the error says how to fetch what is missing.
    pub fn load_model(cfg: &ModelConfig) -> Result<Embedder, EmbedError> {
        let e = Embedder::start_model(cfg);
        e.wait_ready()?;
        Ok(e)
    }

    /// Load the real model for a batch command (`eval`, `score`, `calibrate`): as
    /// [`Embedder::load_model`], with the embedding cache on disk of `model.disk_cache` when set,
    /// so a command re-run over the same texts pays the model only for new ones. Call
    /// [`Embedder::persist`] before exiting.
    pub fn load_batch_model(cfg: &ModelConfig) -> Result<Embedder, EmbedError> {
        let mut opts = EmbedderOptions::from(cfg);
        opts.disk_cache = cfg.resolved_disk_cache().map(|root| {
            let dir = DiskCache::dir_for(&root, cfg);
            (dir, cfg.disk_cache_max_mb.saturating_mul(1 << 20))
        });
        let e = Embedder::start_model_opts(cfg, opts);
        e.wait_ready()?;
        Ok(e)
    }

    /// Write the vectors computed since the last write to the embedding cache on disk (a no-op
    /// without one). Vectors are also written every few thousand texts as they come.
    pub fn persist(&self) {
        if let Some(d) = self.inner.disk.get() {
            d.lock().expect("disk cache lock").persist();
        }
    }

    /// One line on the embedding cache on disk for a command's summary: where it is, what it
    /// answered and what it wrote. `None` without one.
    pub fn disk_summary(&self) -> Option<String> {
        let d = self.inner.disk.get()?.lock().expect("disk cache lock");
        Some(format!(
            "embeddings: {} by the model, {} from the cache on disk ({}: {} held at start, {} written)",
            self.inner.stats.texts_embedded.load(Ordering::Relaxed),
            self.inner.stats.disk_hits.load(Ordering::Relaxed),
            d.dir().display(),
            d.stats.loaded,
            d.stats.written,
        ))
    }

    /// Block until the model is loaded (or failed to load).
    pub fn wait_ready(&self) -> Result<(), EmbedError> {
        let (lock, cvar) = &self.inner.settled;
        let settled = lock.lock().expect("model readiness lock");
        drop(
            cvar.wait_while(settled, |settled| !*settled)
                .expect("model readiness lock"),
        );
        match self.inner.state.load(Ordering::Acquire) {
            READY => Ok(()),
            _ => Err(self.failure()),
        }
    }

    /// True once the model is loaded and has embedded its warm-up text.
    pub fn is_ready(&self) -> bool {
        self.inner.state.load(Ordering::Acquire) == READY
    }

    /// The load error, if loading failed.
    pub fn load_error(&self) -> Option<EmbedError> {
        self.inner.failure.get().cloned()
    }

    /// Which backend and model is loaded.
    pub fn describe(&self) -> String {
        self.inner
            .description
            .get()
            .cloned()
            .unwrap_or_else(|| "loading".into())
    }

    pub fn stats(&self) -> &EmbedStats {
        &self.inner.stats
    }

    fn failure(&self) -> EmbedError {
        self.inner
            .failure
            .get()
            .cloned()
            .unwrap_or_else(|| EmbedError::Unavailable("the model workers stopped".into()))
    }

    /// Look every text up in the cache; `None` where it is missing.
    fn cached(&self, texts: &[String]) -> Vec<Option<Vector>> {
        let mut cache = self.inner.cache.lock().expect("embedding cache lock");
        texts.iter().map(|t| cache.get(t).cloned()).collect()
    }

    fn split_misses(&self, texts: &[String]) -> (Vec<Option<Vector>>, Vec<String>) {
        let found = self.cached(texts);
        let hits = found.iter().filter(|v| v.is_some()).count() as u64;
        self.inner
            .stats
            .cache_hits
            .fetch_add(hits, Ordering::Relaxed);
        let mut misses: Vec<String> = Vec::new();
        for (t, v) in texts.iter().zip(&found) {
            if v.is_none() && !misses.contains(t) {
                misses.push(t.clone());
            }
        }
        self.inner
            .stats
            .cache_misses
            .fetch_add(misses.len() as u64, Ordering::Relaxed);
        (found, misses)
    }

    fn merge(
        found: Vec<Option<Vector>>,
        texts: &[String],
        misses: &[String],
        got: Vec<Vector>,
    ) -> Vec<Vector> {
        found
            .into_iter()
            .zip(texts)
            .map(|(v, t)| {
                v.unwrap_or_else(|| {
                    let i = misses
                        .iter()
                        .position(|m| m == t)
                        .expect("miss was embedded");
                    Arc::clone(&got[i])
                })
            })
            .collect()
    }

    /// True when the model is loaded, a worker is not running a call and nothing is queued: a
    /// text embedded now would not wait behind anyone.
    pub fn is_idle(&self) -> bool {
        self.is_ready()
            && self.inner.busy_workers.load(Ordering::Acquire)
                < self.inner.workers.load(Ordering::Acquire)
            && self.inner.queued.load(Ordering::Acquire) == 0
    }

    /// The model workers serving (0 until the model is ready).
    pub fn workers(&self) -> usize {
        self.inner.workers.load(Ordering::Acquire)
    }

    /// Resident memory each model worker added while it loaded (its ONNX Runtime session, the
    /// weights, the tokenizer, the warm-up call), in bytes; `None` before the model is ready or
    /// where it cannot be measured (not Linux). A worker's memory grows past this with the
    /// largest model call it runs (activations; docs/PERFORMANCE.md).
    pub fn memory_per_worker(&self) -> Option<u64> {
        Some(self.inner.memory_per_worker.load(Ordering::Acquire)).filter(|&b| b > 0)
    }

    /// The cached embedding of a text, without ever waiting for the model.
    pub fn cached_one(&self, text: &str) -> Option<Vector> {
        self.inner
            .cache
            .lock()
            .expect("embedding cache lock")
            .get(text)
            .cloned()
    }

    fn check_failed(&self) -> Result<(), EmbedError> {
        if self.inner.state.load(Ordering::Acquire) == FAILED {
            return Err(self.failure());
        }
        Ok(())
    }

    /// How long a job queued now would wait before a worker starts on it: the texts queued
    /// and running, at the pool's recent rate (one worker's time per text, shared by the
    /// workers). Zero before the model was timed.
    pub fn estimated_wait(&self) -> Duration {
        let ahead = self.inner.queued_texts.load(Ordering::Acquire)
            + self.inner.running_texts.load(Ordering::Acquire);
        let per_text = self.inner.nanos_per_text.load(Ordering::Acquire);
        let workers = self.inner.workers.load(Ordering::Acquire).max(1) as u64;
        Duration::from_nanos(ahead.saturating_mul(per_text) / workers)
    }

    /// Admission control: refuse at once what would wait longer than the target. A caller
    /// that would be answered late is better told now, while it can still back off or retry
    /// elsewhere, than after its own deadline.
    fn admit(&self) -> Result<(), EmbedError> {
        let Some(target) = self.inner.wait_target else {
            return Ok(());
        };
        let wait = self.estimated_wait();
        if wait > target {
            return Err(EmbedError::Overloaded(format!(
                "the texts queued ahead would take about {} ms to embed, over the {} ms target (model.queue_wait_target_ms)",
                wait.as_millis(),
                target.as_millis()
            )));
        }
        Ok(())
    }

    /// Queue `misses` as jobs of at most `texts_per_job` texts each, all or none; the receivers
    /// of their vectors, in order. With `wait`, wait for room in a full queue.
    fn submit(
        &self,
        misses: &[String],
        wait: bool,
    ) -> Result<Vec<oneshot::Receiver<Reply>>, EmbedError> {
        let mut jobs = Vec::new();
        let mut receivers = Vec::new();
        for texts in misses.chunks(self.inner.texts_per_job) {
            let (reply, rx) = oneshot::channel();
            jobs.push(Job {
                texts: texts.to_vec(),
                reply,
            });
            receivers.push(rx);
        }
        let (n_jobs, n_texts) = (jobs.len() as u64, misses.len() as u64);
        self.inner.queued.fetch_add(n_jobs, Ordering::AcqRel);
        self.inner.queued_texts.fetch_add(n_texts, Ordering::AcqRel);
        self.inner.queue.push(jobs, wait).map_err(|e| {
            self.inner.queued.fetch_sub(n_jobs, Ordering::AcqRel);
            self.inner.queued_texts.fetch_sub(n_texts, Ordering::AcqRel);
            match e {
                workers::PushError::Full => EmbedError::Overloaded(format!(
                    "{} jobs are queued (model.queue_capacity)",
                    self.inner.queued.load(Ordering::Acquire)
                )),
                workers::PushError::Closed => self.failure(),
            }
        })?;
        Ok(receivers)
    }

    /// Embed texts (already prepared: normalised, trimmed to length). Cache hits cost no model time.
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vector>, EmbedError> {
        let (found, misses) = self.split_misses(texts);
        if misses.is_empty() {
            return Ok(found.into_iter().map(|v| v.expect("all hits")).collect());
        }
        self.check_failed()?;
        self.admit()?;
        let mut got = Vec::with_capacity(misses.len());
        for rx in self.submit(&misses, false)? {
            got.extend(rx.await.map_err(|_| self.failure())??);
        }
        Ok(Self::merge(found, texts, &misses, got))
    }

    /// The blocking form of [`Embedder::embed`], for callers outside an async runtime.
    /// Must not be called from inside one.
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vector>, EmbedError> {
        let (found, misses) = self.split_misses(texts);
        if misses.is_empty() {
            return Ok(found.into_iter().map(|v| v.expect("all hits")).collect());
        }
        self.check_failed()?;
        let mut got = Vec::with_capacity(misses.len());
        for rx in self.submit(&misses, true)? {
            got.extend(rx.blocking_recv().map_err(|_| self.failure())??);
        }
        Ok(Self::merge(found, texts, &misses, got))
    }
}

/// How many runs a batch command (`score`, `eval`, `calibrate runs`) replays at once by default
/// with `workers` model workers: four per worker, at least 8. A run has at most one event in
/// flight, and two events in three need no model call; four runs per worker keep one waiting
/// for every worker that finishes a call.
pub fn default_jobs(workers: usize) -> usize {
    (4 * workers).max(8)
}

/// Whether the ONNX model at `path` quantizes activations at run time (`DynamicQuantizeLinear`,
/// what `quantize_dynamic` writes, as in `models/fetch.py --int8`). That operator takes one scale
/// for its whole input — every text of a call — so a text embedded beside others gets a vector
/// that depends on them (pair cosines moved by up to 0.045 on agent texts), and verdicts would
/// depend on the load. Such a model is run one text per call. The operator's name is stored as
/// plain bytes in the file; a file that cannot be read is left to the loader to report.
pub fn quantizes_activations_per_call(path: &Path) -> bool {
    std::fs::read(path)
        .map(|bytes| has_dynamic_quantization(&bytes))
        .unwrap_or(false)
}

/// [`quantizes_activations_per_call`] of a model file's bytes.
fn has_dynamic_quantization(onnx: &[u8]) -> bool {
    const OP: &[u8] = b"DynamicQuantizeLinear";
    onnx.windows(OP.len()).any(|w| w == OP)
}

/// Cosine similarity of two L2-normalised vectors (their dot product).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    ndarray::ArrayView1::from(a).dot(&ndarray::ArrayView1::from(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn a_model_that_quantizes_its_activations_per_call_is_recognised_by_its_operator() {
        let dir = tempfile::tempdir().unwrap();
        let dynamic = dir.path().join("dynamic.onnx");
        let float = dir.path().join("float.onnx");
        std::fs::write(&dynamic, b"\x08\x07...\x12\x15DynamicQuantizeLinear\x1a...").unwrap();
        std::fs::write(&float, b"\x08\x07...MatMul...Cast...QuantizeLinear").unwrap();
        assert!(quantizes_activations_per_call(&dynamic));
        assert!(!quantizes_activations_per_call(&float));
        assert!(!quantizes_activations_per_call(
            &dir.path().join("absent.onnx")
        ));
    }

    struct Counting(Arc<AtomicUsize>, Arc<Mutex<Vec<usize>>>);
    impl EmbedBackend for Counting {
        fn embed_batch(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.0.fetch_add(texts.len(), Ordering::SeqCst);
            self.1.lock().unwrap().push(texts.len());
            Ok(texts.iter().map(|t| StubBackend::vector(t)).collect())
        }
        fn describe(&self) -> String {
            "counting".into()
        }
    }

    fn counting() -> (Embedder, Arc<AtomicUsize>, Arc<Mutex<Vec<usize>>>) {
        let n = Arc::new(AtomicUsize::new(0));
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let (n2, s2) = (Arc::clone(&n), Arc::clone(&sizes));
        let e = Embedder::start(
            move || Ok(Box::new(Counting(n2, s2)) as Box<dyn EmbedBackend>),
            EmbedderOptions::default(),
        );
        e.wait_ready().unwrap();
        (e, n, sizes)
    }

    #[test]
    fn never_embeds_the_same_text_twice() {
        let (e, n, _) = counting();
        let base = n.load(Ordering::SeqCst); // the warm-up text
        let texts: Vec<String> = vec!["a b c".into(), "d e f".into(), "a b c".into()];
        let v1 = e.embed_blocking(&texts).unwrap();
        assert_eq!(n.load(Ordering::SeqCst) - base, 2);
        let v2 = e.embed_blocking(&texts[..1]).unwrap();
        assert_eq!(n.load(Ordering::SeqCst) - base, 2);
        assert_eq!(&*v1[0], &*v2[0]);
        assert_eq!(&*v1[0], &*v1[2]);
        assert!(e.stats().cache_hits.load(Ordering::Relaxed) >= 1);
    }

    #[test]
    fn concurrent_callers_share_batches() {
        let (e, _, sizes) = counting();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        rt.block_on(async {
            let mut handles = Vec::new();
            for i in 0..64 {
                let e = e.clone();
                handles.push(tokio::spawn(async move {
                    e.embed(&[format!("text number {i}")]).await.unwrap()
                }));
            }
            for h in handles {
                assert_eq!(h.await.unwrap().len(), 1);
            }
        });
        let sizes = sizes.lock().unwrap();
        let total: usize = sizes.iter().sum();
        assert_eq!(total, 65, "64 texts + warm-up, each once: {sizes:?}");
        assert!(
            sizes.len() < 65,
            "some calls were batched together: {sizes:?}"
        );
    }

    #[test]
    fn missing_model_is_a_clear_error_not_a_panic() {
        let cfg = ModelConfig {
            dir: "/nonexistent/model".into(),
            ..ModelConfig::default()
        };
        let err = Embedder::load_model(&cfg).err().expect("must fail");
        let msg = err.to_string();
        assert!(
            msg.contains("model.onnx") && msg.contains(FETCH_COMMAND),
            "{msg}"
        );
    }

    #[test]
    fn missing_runtime_is_a_clear_error_not_a_panic() {
        let cfg = ModelConfig {
            ort_dylib: Some("/nonexistent/libonnxruntime.so".into()),
            ..ModelConfig::default()
        };
        // Only meaningful where the model files exist; otherwise the model error comes first.
        if cfg.resolved_dir().join("model.onnx").is_file() {
            let err = Embedder::load_model(&cfg).err().expect("must fail");
            assert!(matches!(err, EmbedError::RuntimeMissing(_)), "{err}");
            assert!(err.to_string().contains(FETCH_COMMAND));
        }
    }

    /// 20 ms per text, one text per call: a queue's wait is easy to predict.
    struct PerText;
    impl EmbedBackend for PerText {
        fn embed_batch(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            std::thread::sleep(Duration::from_millis(20) * texts.len() as u32);
            Ok(texts.iter().map(|t| StubBackend::vector(t)).collect())
        }
        fn describe(&self) -> String {
            "20 ms per text".into()
        }
    }

    #[test]
    fn work_that_would_wait_past_the_target_is_refused_at_once() {
        let e = Embedder::start(
            || Ok(Box::new(PerText) as Box<dyn EmbedBackend>),
            EmbedderOptions {
                max_batch: 1,
                queue_wait_target: Some(Duration::from_millis(100)),
                ..EmbedderOptions::default()
            },
        );
        e.wait_ready().unwrap();
        assert_eq!(e.estimated_wait(), Duration::ZERO, "nothing queued");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let (ok, refused) = rt.block_on(async {
            let mut handles = Vec::new();
            for i in 0..30 {
                let e = e.clone();
                handles.push(tokio::spawn(async move {
                    let started = Instant::now();
                    let r = e.embed(&[format!("text {i}")]).await;
                    (r, started.elapsed())
                }));
            }
            let (mut ok, mut refused) = (0, 0);
            for h in handles {
                match h.await.unwrap() {
                    (Ok(_), _) => ok += 1,
                    (Err(EmbedError::Overloaded(why)), took) => {
                        assert!(why.contains("model.queue_wait_target_ms"), "{why}");
                        assert!(
                            took < Duration::from_millis(20),
                            "refused at once: {took:?}"
                        );
                        refused += 1;
                    }
                    (Err(other), _) => panic!("{other}"),
                }
            }
            (ok, refused)
        });
        // 100 ms at 20 ms a text: about five texts ahead are admitted, the rest refused.
        assert!(
            (3..=10).contains(&ok) && ok + refused == 30,
            "{ok} admitted, {refused} refused"
        );
    }

    /// Counts the workers inside a model call at once: each call waits (up to a guard that only
    /// bounds a failure) until `want` calls are inside together, and records the most seen.
    struct Together {
        inside: Arc<(Mutex<(usize, usize)>, std::sync::Condvar)>,
        want: usize,
        warm: bool,
    }
    impl EmbedBackend for Together {
        fn embed_batch(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            if std::mem::replace(&mut self.warm, true) {
                let (lock, cv) = &*self.inside;
                let mut g = lock.lock().unwrap();
                g.0 += 1;
                g.1 = g.1.max(g.0);
                cv.notify_all();
                let guard = Instant::now() + Duration::from_secs(20);
                while g.1 < self.want && Instant::now() < guard {
                    g = cv.wait_timeout(g, Duration::from_millis(100)).unwrap().0;
                }
                g.0 -= 1;
            }
            Ok(texts.iter().map(|t| StubBackend::vector(t)).collect())
        }
        fn describe(&self) -> String {
            "together".into()
        }
    }

    #[test]
    fn one_requests_texts_run_on_idle_workers_at_once_when_the_model_takes_one_text_per_call() {
        let inside = Arc::new((Mutex::new((0, 0)), std::sync::Condvar::new()));
        let shared = Arc::clone(&inside);
        let e = Embedder::start_workers(
            2,
            move |_| {
                Ok(Box::new(Together {
                    inside: Arc::clone(&shared),
                    want: 2,
                    warm: false,
                }) as Box<dyn EmbedBackend>)
            },
            EmbedderOptions {
                max_batch: 1,
                ..EmbedderOptions::default()
            },
        );
        e.wait_ready().unwrap();
        assert_eq!(e.workers(), 2);
        let v = e
            .embed_blocking(&["first text".into(), "second text".into()])
            .unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(
            inside.0.lock().unwrap().1,
            2,
            "both workers ran a call at the same time"
        );
    }

    #[test]
    fn workers_never_embed_the_same_text_twice() {
        // Four workers, 64 concurrent callers asking for 8 texts: each text is embedded once,
        // whoever asks first; the others wait for its vector or find it in the cache.
        let counts: Arc<Mutex<std::collections::HashMap<String, usize>>> = Arc::default();
        struct Tally(Arc<Mutex<std::collections::HashMap<String, usize>>>);
        impl EmbedBackend for Tally {
            fn embed_batch(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
                let mut c = self.0.lock().unwrap();
                for t in texts {
                    *c.entry(t.to_string()).or_default() += 1;
                }
                drop(c);
                std::thread::yield_now();
                Ok(texts.iter().map(|t| StubBackend::vector(t)).collect())
            }
            fn describe(&self) -> String {
                "tally".into()
            }
        }
        let shared = Arc::clone(&counts);
        let e = Embedder::start_workers(
            4,
            move |_| Ok(Box::new(Tally(Arc::clone(&shared))) as Box<dyn EmbedBackend>),
            EmbedderOptions {
                max_batch: 1,
                ..EmbedderOptions::default()
            },
        );
        e.wait_ready().unwrap();
        std::thread::scope(|s| {
            for caller in 0..64 {
                let e = e.clone();
                s.spawn(move || {
                    let texts: Vec<String> = (0..8)
                        .map(|i| format!("text {}", (i + caller) % 8))
                        .collect();
                    let v = e.embed_blocking(&texts).unwrap();
                    for (t, v) in texts.iter().zip(v) {
                        assert_eq!(&*v, StubBackend::vector(t).as_slice());
                    }
                });
            }
        });
        let counts = counts.lock().unwrap();
        for i in 0..8 {
            assert_eq!(counts.get(&format!("text {i}")), Some(&1), "{counts:?}");
        }
    }

    #[test]
    fn the_estimated_wait_is_the_pools() {
        // Two workers gated until the test opens them, holding one text each, with four texts
        // queued behind: six texts ahead at one worker's rate, shared by two workers.
        let (open, gate) = std::sync::mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        struct Gated(Arc<Mutex<std::sync::mpsc::Receiver<()>>>, bool);
        impl EmbedBackend for Gated {
            fn embed_batch(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
                if std::mem::replace(&mut self.1, true) {
                    let _ = self.0.lock().unwrap().recv();
                }
                Ok(texts.iter().map(|t| StubBackend::vector(t)).collect())
            }
            fn describe(&self) -> String {
                "gated".into()
            }
        }
        let e = Embedder::start_workers(
            2,
            move |_| Ok(Box::new(Gated(Arc::clone(&gate), false)) as Box<dyn EmbedBackend>),
            EmbedderOptions {
                max_batch: 1,
                ..EmbedderOptions::default()
            },
        );
        e.wait_ready().unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let calls: Vec<_> = (0..6)
            .map(|i| {
                let e = e.clone();
                rt.spawn(async move { e.embed(&[format!("text {i}")]).await })
            })
            .collect();
        while e.inner.running_texts.load(Ordering::Acquire) < 2
            || e.inner.queued_texts.load(Ordering::Acquire) < 4
        {
            std::thread::yield_now();
        }
        e.inner.nanos_per_text.store(10_000_000, Ordering::Release);
        assert_eq!(e.estimated_wait(), Duration::from_millis(30));
        assert!(!e.is_idle());
        drop(open);
        for c in calls {
            rt.block_on(c).unwrap().unwrap();
        }
    }

    #[test]
    fn each_worker_reports_the_memory_it_took_to_load() {
        // A backend holding 64 MiB it has written to (resident, not just reserved).
        struct Heavy(#[allow(dead_code)] Vec<u8>);
        let e = Embedder::start_workers(
            2,
            |_| Ok(Box::new(Heavy(vec![1u8; 64 << 20])) as Box<dyn EmbedBackend>),
            EmbedderOptions::default(),
        );
        impl EmbedBackend for Heavy {
            fn embed_batch(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
                Ok(texts.iter().map(|t| StubBackend::vector(t)).collect())
            }
            fn describe(&self) -> String {
                "heavy".into()
            }
        }
        e.wait_ready().unwrap();
        if cfg!(target_os = "linux") {
            let each = e.memory_per_worker().expect("measured on Linux");
            assert!(each >= 48 << 20, "{} MiB per worker", each >> 20);
        }
    }

    #[test]
    fn a_worker_that_fails_to_load_leaves_the_others_serving_and_none_is_an_error() {
        let e = Embedder::start_workers(
            3,
            |i| {
                if i == 1 {
                    Err(EmbedError::Model("out of memory".into()))
                } else {
                    Ok(Box::new(StubBackend) as Box<dyn EmbedBackend>)
                }
            },
            EmbedderOptions::default(),
        );
        e.wait_ready().unwrap();
        assert_eq!(e.workers(), 2);
        assert_eq!(e.embed_blocking(&["a text".into()]).unwrap().len(), 1);
        let none = Embedder::start_workers(
            2,
            |_| Err(EmbedError::Model("out of memory".into())),
            EmbedderOptions::default(),
        );
        assert_eq!(
            none.wait_ready(),
            Err(EmbedError::Model("out of memory".into()))
        );
        assert!(none.embed_blocking(&["a text".into()]).is_err());
    }

    #[test]
    fn the_workers_stop_and_free_their_model_when_the_last_handle_goes() {
        struct Dropped(std::sync::mpsc::Sender<()>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        impl EmbedBackend for Dropped {
            fn embed_batch(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
                Ok(texts.iter().map(|t| StubBackend::vector(t)).collect())
            }
            fn describe(&self) -> String {
                "dropped".into()
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = Mutex::new(tx);
        let e = Embedder::start_workers(
            2,
            move |_| Ok(Box::new(Dropped(tx.lock().unwrap().clone())) as Box<dyn EmbedBackend>),
            EmbedderOptions::default(),
        );
        e.wait_ready().unwrap();
        let clone = e.clone();
        drop(e);
        assert!(rx.try_recv().is_err(), "a clone still holds the workers");
        drop(clone);
        for _ in 0..2 {
            rx.recv_timeout(Duration::from_secs(30))
                .expect("each worker dropped its model");
        }
    }

    #[test]
    fn default_jobs_keep_every_worker_fed() {
        assert_eq!(default_jobs(1), 8);
        assert_eq!(default_jobs(2), 8);
        assert_eq!(default_jobs(16), 64);
    }

    #[test]
    fn chunks_respect_count_and_token_budget() {
        let long = "x".repeat(300); // ~102 tokens
        let texts: Vec<&str> = vec!["a", "b", "c", &long, &long, &long];
        let c = workers::chunks(&texts, 64, 250);
        let sizes: Vec<usize> = c.iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [3, 2, 1]);
        let c = workers::chunks(&texts, 2, 100_000);
        let sizes: Vec<usize> = c.iter().map(|c| c.len()).collect();
        // "c" alone: padded to a long text it would cost 50 times its tokens.
        assert_eq!(sizes, [2, 1, 2, 1]);
    }

    #[test]
    fn chunks_do_not_pad_short_texts_to_long_ones() {
        // A command (~5 tokens), two of ~30 and two outputs of ~160: three calls, whatever the
        // budget, so no text is padded to more than 5/4 of the call's tokens.
        let (mid, long) = ("m".repeat(84), "x".repeat(474));
        let texts: Vec<&str> = vec!["ls -la", &mid, &mid, &long, &long];
        let c = workers::chunks(&texts, 64, 100_000);
        let sizes: Vec<usize> = c.iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [1, 2, 2]);
        // Texts of about one length still share a call.
        let near: Vec<String> = (0..40).map(|i| "y".repeat(300 + i)).collect();
        let near: Vec<&str> = near.iter().map(String::as_str).collect();
        assert_eq!(workers::chunks(&near, 64, 100_000).len(), 1);
    }

    #[test]
    fn stub_scores_shared_words_higher() {
        let a = StubBackend::vector("cannot connect to the database");
        let b = StubBackend::vector("could not connect to database");
        let c = StubBackend::vector("the weather is nice today");
        assert!(cosine(&a, &b) > 0.5);
        assert!(cosine(&a, &c) < 0.3);
    }
}
