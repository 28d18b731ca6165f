//! The model workers: `model.workers` threads, each owning one ONNX Runtime session (fastembed's
//! `embed` takes `&mut self`) with `model.threads` intra-op threads. Every idle worker waits on
//! one queue; the first to wake takes every job waiting (up to `max_batch` texts) and runs them
//! as its model calls — continuous batching with no fill timer, so a lone request is never
//! delayed, and a second request arriving meanwhile goes to the next idle worker instead of
//! waiting for the first call to end.
//!
//! Why workers and not more threads in one session: ONNX Runtime's intra-op parallelism runs out
//! of work on small batches of short texts (one session stopped scaling at 4–8 threads on a
//! 16-core machine, while separate processes of one thread each did 8× more), and the int8 model
//! is run one text per call, so a session has nothing to share among its threads but one text.
//!
//! No text is embedded twice: a worker checks the cache again before embedding, and claims the
//! texts it embeds; a worker that finds a text claimed by another waits for that one's vector
//! instead of computing it again.

use super::*;
use std::collections::{HashMap, VecDeque};
use std::sync::Condvar;

/// Loads one worker's backend; called once on each worker's own thread with its index.
pub(super) type Load =
    Arc<dyn Fn(usize) -> Result<Box<dyn EmbedBackend>, EmbedError> + Send + Sync>;

/// How the workers batch, what they report and where the cache on disk is.
pub(super) struct Settings {
    pub max_batch: usize,
    pub max_batch_tokens: usize,
    pub observer: Option<BatchObserver>,
    pub disk: Option<(PathBuf, u64)>,
}

/// The jobs waiting for a worker. A mutex and condition variables rather than a channel: every
/// idle worker waits on the same queue, and whichever wakes first takes what is there.
pub(super) struct Queue {
    state: Mutex<QueueState>,
    /// Signalled when jobs arrive or the queue closes.
    work: Condvar,
    /// Signalled when a worker takes jobs: blocking senders wait on it while the queue is full.
    space: Condvar,
    capacity: usize,
}

struct QueueState {
    jobs: VecDeque<Job>,
    closed: bool,
}

/// Why jobs could not be queued.
pub(super) enum PushError {
    Full,
    Closed,
}

impl Queue {
    pub(super) fn new(capacity: usize) -> Queue {
        Queue {
            state: Mutex::new(QueueState {
                jobs: VecDeque::new(),
                closed: false,
            }),
            work: Condvar::new(),
            space: Condvar::new(),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().expect("model queue lock")
    }

    /// Queue `jobs` (one request's, together). Full when `capacity` jobs are already waiting:
    /// `Full` at once, or with `wait`, once there is room.
    pub(super) fn push(&self, jobs: Vec<Job>, wait: bool) -> Result<(), PushError> {
        let mut q = self.lock();
        loop {
            if q.closed {
                return Err(PushError::Closed);
            }
            if q.jobs.len() < self.capacity {
                break;
            }
            if !wait {
                return Err(PushError::Full);
            }
            q = self.space.wait(q).expect("model queue lock");
        }
        let n = jobs.len();
        q.jobs.extend(jobs);
        drop(q);
        if n == 1 {
            self.work.notify_one();
        } else {
            self.work.notify_all();
        }
        Ok(())
    }

    /// Wait for work: the first job and every job behind it while they hold fewer than
    /// `max_batch` texts; `None` once the queue is closed and empty. The counters move from
    /// queued to running under the queue's lock, so an estimate never misses them.
    fn take(&self, inner: &Inner, max_batch: usize) -> Option<(Vec<Job>, usize)> {
        let mut q = self.lock();
        while q.jobs.is_empty() {
            if q.closed {
                return None;
            }
            q = self.work.wait(q).expect("model queue lock");
        }
        let mut jobs = Vec::new();
        let mut texts = 0;
        while let Some(job) = q.jobs.front() {
            if !jobs.is_empty() && texts + job.texts.len() > max_batch {
                break;
            }
            texts += job.texts.len();
            jobs.push(q.jobs.pop_front().expect("front exists"));
            if texts >= max_batch {
                break;
            }
        }
        inner.busy_workers.fetch_add(1, Ordering::AcqRel);
        inner
            .running_texts
            .fetch_add(texts as u64, Ordering::AcqRel);
        inner.queued.fetch_sub(jobs.len() as u64, Ordering::AcqRel);
        inner.queued_texts.fetch_sub(texts as u64, Ordering::AcqRel);
        drop(q);
        self.space.notify_all();
        Some((jobs, texts))
    }

    /// No more jobs: the ones waiting are returned (to be answered), later pushes fail and the
    /// workers stop once they are idle.
    pub(super) fn close(&self) -> Vec<Job> {
        let mut q = self.lock();
        q.closed = true;
        let jobs = q.jobs.drain(..).collect();
        drop(q);
        self.work.notify_all();
        self.space.notify_all();
        jobs
    }
}

/// The pool's loading, shared by its workers until the last has loaded (or failed to).
struct Loading {
    workers: usize,
    left: usize,
    loaded: usize,
    error: Option<EmbedError>,
    /// Resident memory before the first worker loaded (Linux; `None` elsewhere).
    rss_before: Option<u64>,
}

/// Start `workers` threads that each load a backend with `load` and then serve the queue.
/// The pool is ready once every worker has loaded and embedded its warm-up text; if none could
/// load, the first load error is every caller's answer; if some could, the others serve.
pub(super) fn spawn(workers: usize, load: Load, inner: Arc<Inner>, settings: Settings) {
    let workers = workers.max(1);
    let loading = Arc::new((
        Mutex::new(Loading {
            workers,
            left: workers,
            loaded: 0,
            error: None,
            rss_before: resident_bytes(),
        }),
        Condvar::new(),
    ));
    let settings = Arc::new(settings);
    for i in 0..workers {
        let (load, inner, loading, settings) = (
            Arc::clone(&load),
            Arc::clone(&inner),
            Arc::clone(&loading),
            Arc::clone(&settings),
        );
        std::thread::Builder::new()
            .name(format!("loopguard-model-{i}"))
            .spawn(move || {
                let loaded = load_one(&*load, i, &inner);
                if let Some(backend) = join_pool(i, loaded, &loading, &inner, &settings) {
                    serve(backend, &inner, &settings);
                }
            })
            .expect("spawning a model worker");
    }
}

/// Load and warm up one worker's backend. ort panics instead of returning errors in a few
/// places (a library of the wrong version); a panic while loading becomes a load error, never a
/// crashed process.
fn load_one(
    load: &(dyn Fn(usize) -> Result<Box<dyn EmbedBackend>, EmbedError> + Send + Sync),
    i: usize,
    inner: &Inner,
) -> Result<Box<dyn EmbedBackend>, EmbedError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut backend = load(i)?;
        let started = Instant::now();
        backend.embed_batch(&["warm up the model"])?;
        // The first estimate of the model's speed, until real calls are timed.
        inner
            .nanos_per_text
            .store(started.elapsed().as_nanos() as u64, Ordering::Release);
        Ok::<_, EmbedError>(backend)
    }))
    .unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic while loading the model".into());
        Err(EmbedError::Unavailable(msg))
    })
}

/// Report worker `i`'s load to the pool and wait for the others; the last one declares the pool
/// ready (or failed). Returns the backend to serve with, or `None` when this worker does not
/// serve. Workers serve only once all have loaded, so the memory measured is the sessions'.
fn join_pool(
    i: usize,
    loaded: Result<Box<dyn EmbedBackend>, EmbedError>,
    loading: &(Mutex<Loading>, Condvar),
    inner: &Inner,
    settings: &Settings,
) -> Option<Box<dyn EmbedBackend>> {
    let (lock, all_loaded) = loading;
    let mut l = lock.lock().expect("model loading lock");
    l.left -= 1;
    let description = match &loaded {
        Ok(b) => {
            l.loaded += 1;
            Some(b.describe())
        }
        Err(e) => {
            tracing::error!(worker = i, error = %e, "a model worker failed to load");
            l.error.get_or_insert_with(|| e.clone());
            None
        }
    };
    if l.left == 0 {
        finish_loading(&l, description, inner, settings);
        all_loaded.notify_all();
    } else {
        while l.left > 0 {
            l = all_loaded.wait(l).expect("model loading lock");
        }
    }
    drop(l);
    loaded
        .ok()
        .filter(|_| inner.state.load(Ordering::Acquire) == READY)
}

fn finish_loading(l: &Loading, description: Option<String>, inner: &Inner, settings: &Settings) {
    if l.loaded == 0 {
        let e = l
            .error
            .clone()
            .unwrap_or_else(|| EmbedError::Unavailable("no model worker loaded".into()));
        tracing::error!(error = %e, "embedding model failed to load");
        let _ = inner.failure.set(e.clone());
        inner.state.store(FAILED, Ordering::Release);
        inner.announce_settled();
        // Answer whatever is queued: callers get the load error.
        for job in inner.queue.close() {
            let _ = job.reply.send(Err(e.clone()));
        }
        return;
    }
    if let (Some(before), Some(after)) = (l.rss_before, resident_bytes()) {
        inner.memory_per_worker.store(
            after.saturating_sub(before) / l.loaded as u64,
            Ordering::Release,
        );
    }
    // Opened before the model is declared ready, so the first jobs already use it.
    if let Some((root, max_bytes)) = &settings.disk {
        if let Some(d) = DiskCache::open(root, *max_bytes) {
            let _ = inner.disk.set(Mutex::new(d));
        }
    }
    let description = description.unwrap_or_else(|| "the model".into());
    let _ = inner.description.set(format!(
        "{description}; {} worker{}",
        l.loaded,
        if l.loaded == 1 { "" } else { "s" }
    ));
    inner.workers.store(l.loaded, Ordering::Release);
    inner.state.store(READY, Ordering::Release);
    inner.announce_settled();
    if l.error.is_some() {
        tracing::warn!(
            workers = l.loaded,
            failed = l.workers - l.loaded,
            "some model workers failed to load; the others serve"
        );
    }
    tracing::info!(
        model = %description,
        workers = l.loaded,
        memory_per_worker_mib = inner.memory_per_worker.load(Ordering::Acquire) >> 20,
        "embedding model ready"
    );
}

/// The resident memory of this process, from `/proc/self/status` (Linux); `None` elsewhere.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

/// A worker's life after loading: take jobs, embed what the caches do not hold, answer.
fn serve(mut backend: Box<dyn EmbedBackend>, inner: &Inner, settings: &Settings) {
    while let Some((mut jobs, texts)) = inner.queue.take(inner, settings.max_batch) {
        // A caller that went away (timeout, closed connection) costs nothing.
        jobs.retain(|j| !j.reply.is_closed());
        if !jobs.is_empty() {
            let result = embed_jobs(&mut *backend, inner, &jobs, settings);
            for job in jobs {
                let answer =
                    match &result {
                        Ok(fresh) => {
                            let mut cache = inner.cache.lock().expect("embedding cache lock");
                            job.texts
                                .iter()
                                .map(|t| {
                                    fresh.get(t).or_else(|| cache.get(t)).cloned().ok_or_else(
                                        || EmbedError::Model("embedding went missing".into()),
                                    )
                                })
                                .collect()
                        }
                        Err(e) => Err(e.clone()),
                    };
                let _ = job.reply.send(answer);
            }
        }
        inner
            .running_texts
            .fetch_sub(texts as u64, Ordering::AcqRel);
        inner.busy_workers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The vectors of every text of `jobs` that the cache did not hold when they were taken:
/// embedded here, read from the cache on disk, or waited for while another worker embeds them.
fn embed_jobs(
    backend: &mut dyn EmbedBackend,
    inner: &Inner,
    jobs: &[Job],
    settings: &Settings,
) -> Result<HashMap<String, Vector>, EmbedError> {
    let mut fresh = HashMap::new();
    let mut missing: Vec<&str> = {
        let mut cache = inner.cache.lock().expect("embedding cache lock");
        let mut missing: Vec<&str> = Vec::new();
        for t in jobs.iter().flat_map(|j| j.texts.iter()) {
            if !cache.contains(t) && !missing.contains(&t.as_str()) {
                missing.push(t.as_str());
            }
        }
        // Keep hits fresh in the LRU so they survive this batch's inserts.
        for t in jobs.iter().flat_map(|j| j.texts.iter()) {
            cache.promote(t);
        }
        missing
    };
    loop {
        let (mine, theirs) = claim(inner, &missing, &mut fresh);
        if !mine.texts.is_empty() {
            embed_claimed(backend, inner, mine, &mut fresh, settings)?;
        }
        if theirs.is_empty() {
            return Ok(fresh);
        }
        // Another worker is embedding these; once it is done they are in the cache (or, had it
        // failed, unclaimed: the next round claims them here).
        {
            let mut claims = inner.claims.lock().expect("embedding claims lock");
            while theirs.iter().any(|t| claims.contains(*t)) {
                claims = inner.claimed.wait(claims).expect("embedding claims lock");
            }
        }
        missing = theirs;
    }
}

/// Texts a worker has claimed: no other worker embeds them until they are released, which
/// happens as their vectors reach the cache, and for whatever is left when this is dropped (an
/// error, a panic in the model), so a waiting worker is never left waiting.
struct Claimed<'a> {
    inner: &'a Inner,
    texts: Vec<&'a str>,
}

impl Claimed<'_> {
    fn release(&mut self, done: &[&str]) {
        let mut claims = self.inner.claims.lock().expect("embedding claims lock");
        for t in done {
            claims.remove(*t);
        }
        drop(claims);
        self.texts.retain(|t| !done.contains(t));
        self.inner.claimed.notify_all();
    }
}

impl Drop for Claimed<'_> {
    fn drop(&mut self) {
        if !self.texts.is_empty() {
            let rest = std::mem::take(&mut self.texts);
            self.release(&rest);
        }
    }
}

/// Split `missing` into the texts this worker claims and those another worker holds; texts that
/// reached the cache meanwhile go straight into `fresh`. The cache is checked under the claims'
/// lock: a worker puts a vector in the cache before it releases its claim, so a text neither
/// cached nor claimed here is one nobody is embedding.
fn claim<'a>(
    inner: &'a Inner,
    missing: &[&'a str],
    fresh: &mut HashMap<String, Vector>,
) -> (Claimed<'a>, Vec<&'a str>) {
    let cache = inner.cache.lock().expect("embedding cache lock");
    let mut claims = inner.claims.lock().expect("embedding claims lock");
    let (mut mine, mut theirs) = (Vec::new(), Vec::new());
    for &t in missing {
        if let Some(v) = cache.peek(t) {
            fresh.insert(t.to_string(), Arc::clone(v));
        } else if claims.contains(t) {
            theirs.push(t);
        } else {
            claims.insert(t.to_string());
            mine.push(t);
        }
    }
    (Claimed { inner, texts: mine }, theirs)
}

fn embed_claimed<'a>(
    backend: &mut dyn EmbedBackend,
    inner: &'a Inner,
    mut mine: Claimed<'a>,
    fresh: &mut HashMap<String, Vector>,
    settings: &Settings,
) -> Result<(), EmbedError> {
    // The disk cache answers what an earlier command embedded; the model only what is new.
    if let Some(disk) = inner.disk.get() {
        let mut found = Vec::new();
        {
            let disk = disk.lock().expect("disk cache lock");
            let mut cache = inner.cache.lock().expect("embedding cache lock");
            for &t in &mine.texts {
                if let Some(v) = disk.get(t) {
                    cache.put(t.to_string(), Arc::clone(&v));
                    fresh.insert(t.to_string(), v);
                    found.push(t);
                }
            }
        }
        inner
            .stats
            .disk_hits
            .fetch_add(found.len() as u64, Ordering::Relaxed);
        mine.release(&found);
    }
    // Sorted by length so each model call pads to similar lengths.
    let mut todo = mine.texts.clone();
    todo.sort_by_key(|t| t.len());
    for chunk in chunks(&todo, settings.max_batch, settings.max_batch_tokens) {
        let started = Instant::now();
        let vectors = backend.embed_batch(chunk)?;
        let took = started.elapsed();
        inner.stats.record_batch(chunk.len(), took);
        // A moving average over calls (weight 1/4 for the newest), of one worker's time per
        // text: recent enough to follow a change of load, smooth enough that one long text does
        // not close the door.
        let per_text = took.as_nanos() as u64 / chunk.len().max(1) as u64;
        let old = inner.nanos_per_text.load(Ordering::Acquire);
        let new = if old == 0 {
            per_text
        } else {
            (old * 3 + per_text) / 4
        };
        inner.nanos_per_text.store(new, Ordering::Release);
        if let Some(observe) = &settings.observer {
            observe(chunk.len(), took);
        }
        if vectors.len() != chunk.len() {
            return Err(EmbedError::Model(format!(
                "model returned {} vectors for {} texts",
                vectors.len(),
                chunk.len()
            )));
        }
        {
            let mut disk = inner.disk.get().map(|d| d.lock().expect("disk cache lock"));
            let mut cache = inner.cache.lock().expect("embedding cache lock");
            for (t, v) in chunk.iter().zip(vectors) {
                let v = Vector::from(v);
                if let Some(d) = disk.as_mut() {
                    d.put(t, &v);
                }
                cache.put((*t).to_string(), Arc::clone(&v));
                fresh.insert((*t).to_string(), v);
            }
        }
        mine.release(chunk);
    }
    Ok(())
}

/// A rough token count (WordPiece on English and code averages 3-4 characters per token).
fn approx_tokens(text: &str) -> usize {
    text.len() / 3 + 2
}

/// A model call pads every text to the longest in it, and the padding costs as much as real
/// tokens (more: attention grows with the square of the length). A call ends before its padded
/// tokens would pass 5/4 of the tokens its texts hold. Without this bound, `score --jobs 8`
/// padded 10-token commands to the 128 tokens of the tool outputs batched with them and took
/// more CPU and time than `--jobs 1`; with it, 2.7 times less model time on the SWE-agent dev
/// runs (docs/PERFORMANCE.md, "Why more `--jobs` was slower").
const MAX_PADDING: (usize, usize) = (5, 4);

/// Split texts sorted by length into model calls of at most `max_batch` texts and
/// `max_batch_tokens` padded tokens (every text is padded to the longest in its call), with
/// padded tokens at most [`MAX_PADDING`] times the real ones.
pub(super) fn chunks<'a>(
    sorted: &'a [&'a str],
    max_batch: usize,
    max_batch_tokens: usize,
) -> Vec<&'a [&'a str]> {
    let (num, den) = MAX_PADDING;
    let mut out = Vec::new();
    let mut start = 0;
    while start < sorted.len() {
        let mut end = start + 1;
        let mut real = approx_tokens(sorted[start]);
        while end < sorted.len() && end - start < max_batch {
            let next = approx_tokens(sorted[end]);
            let padded = (end - start + 1) * next;
            if padded > max_batch_tokens || den * padded > num * (real + next) {
                break;
            }
            real += next;
            end += 1;
        }
        out.push(&sorted[start..end]);
        start = end;
    }
    out
}
