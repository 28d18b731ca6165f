//! The model thread: it owns the model, takes every job waiting in the queue (up to
//! `max_batch` texts and a token budget) and runs them as one model call — continuous batching
//! with no fill timer, so a lone request is never delayed. It checks the cache again before
//! embedding, so two callers asking for the same text in quick succession cost one embedding.

use super::*;

pub(super) fn run<F>(
    load: F,
    inner: Arc<Inner>,
    mut rx: mpsc::Receiver<Job>,
    (max_batch, max_batch_tokens): (usize, usize),
    observer: Option<BatchObserver>,
    disk: Option<(PathBuf, u64)>,
) where
    F: FnOnce() -> Result<Box<dyn EmbedBackend>, EmbedError>,
{
    // ort panics instead of returning errors in a few places (a library of the wrong version);
    // a panic while loading becomes a load error, never a crashed process.
    let loaded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut backend = load()?;
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
    });
    let mut backend = match loaded {
        Ok(b) => {
            // Opened before the model is declared ready, so the first jobs already use it.
            if let Some((root, max_bytes)) = disk {
                if let Some(d) = DiskCache::open(&root, max_bytes) {
                    let _ = inner.disk.set(Mutex::new(d));
                }
            }
            let _ = inner.description.set(b.describe());
            inner.state.store(READY, Ordering::Release);
            tracing::info!(model = %b.describe(), "embedding model ready");
            b
        }
        Err(e) => {
            tracing::error!(error = %e, "embedding model failed to load");
            let _ = inner.failure.set(e.clone());
            inner.state.store(FAILED, Ordering::Release);
            // Answer whatever is queued, then stop: callers get the load error.
            rx.close();
            while let Some(job) = rx.blocking_recv() {
                let _ = job.reply.send(Err(e.clone()));
            }
            return;
        }
    };

    while let Some(first) = rx.blocking_recv() {
        inner.busy.store(true, Ordering::Release);
        let mut jobs = vec![first];
        let mut queued = jobs[0].texts.len();
        // Take whatever else is waiting right now; never wait for more.
        while queued < max_batch {
            match rx.try_recv() {
                Ok(job) => {
                    queued += job.texts.len();
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        // Moved from queued to running in one step each, so an estimate never misses them.
        inner.running_texts.store(queued as u64, Ordering::Release);
        inner.queued.fetch_sub(jobs.len() as u64, Ordering::AcqRel);
        inner
            .queued_texts
            .fetch_sub(queued as u64, Ordering::AcqRel);
        // A caller that went away (timeout, closed connection) costs nothing.
        jobs.retain(|j| !j.reply.is_closed());
        if jobs.is_empty() {
            inner.running_texts.store(0, Ordering::Release);
            inner.busy.store(false, Ordering::Release);
            continue;
        }
        let result = run_jobs(
            &mut *backend,
            &inner,
            &jobs,
            (max_batch, max_batch_tokens),
            observer.as_ref(),
        );
        for job in jobs {
            let answer = match &result {
                Ok(fresh) => {
                    let mut cache = inner.cache.lock().expect("embedding cache lock");
                    job.texts
                        .iter()
                        .map(|t| {
                            fresh
                                .get(t)
                                .or_else(|| cache.get(t))
                                .cloned()
                                .ok_or_else(|| EmbedError::Model("embedding went missing".into()))
                        })
                        .collect()
                }
                Err(e) => Err(e.clone()),
            };
            let _ = job.reply.send(answer);
        }
        inner.running_texts.store(0, Ordering::Release);
        inner.busy.store(false, Ordering::Release);
    }
}

fn run_jobs(
    backend: &mut dyn EmbedBackend,
    inner: &Inner,
    jobs: &[Job],
    (max_batch, max_batch_tokens): (usize, usize),
    observer: Option<&BatchObserver>,
) -> Result<std::collections::HashMap<String, Vector>, EmbedError> {
    // Texts still missing from the cache, each once; sorted by length so each model call pads
    // to similar lengths.
    let mut todo: Vec<&str> = {
        let mut cache = inner.cache.lock().expect("embedding cache lock");
        let mut todo: Vec<&str> = Vec::new();
        for t in jobs.iter().flat_map(|j| j.texts.iter()) {
            if !cache.contains(t) && !todo.contains(&t.as_str()) {
                todo.push(t.as_str());
            }
        }
        // Keep hits fresh in the LRU so they survive this batch's inserts.
        for t in jobs.iter().flat_map(|j| j.texts.iter()) {
            cache.promote(t);
        }
        todo
    };
    let mut fresh = std::collections::HashMap::with_capacity(todo.len());
    // The disk cache answers what an earlier command embedded; the model only what is new.
    if let Some(disk) = inner.disk.get() {
        let disk = disk.lock().expect("disk cache lock");
        let mut cache = inner.cache.lock().expect("embedding cache lock");
        todo.retain(|t| match disk.get(t) {
            Some(v) => {
                cache.put((*t).to_string(), Arc::clone(&v));
                fresh.insert((*t).to_string(), v);
                false
            }
            None => true,
        });
        inner
            .stats
            .disk_hits
            .fetch_add(fresh.len() as u64, Ordering::Relaxed);
    }
    todo.sort_by_key(|t| t.len());
    for chunk in chunks(&todo, max_batch, max_batch_tokens) {
        let started = Instant::now();
        let vectors = backend.embed_batch(chunk)?;
        let took = started.elapsed();
        inner.stats.record_batch(chunk.len(), took);
        // A moving average over calls (weight 1/4 for the newest): recent enough to follow a
        // change of load, smooth enough that one long text does not close the door.
        let per_text = took.as_nanos() as u64 / chunk.len().max(1) as u64;
        let old = inner.nanos_per_text.load(Ordering::Acquire);
        let new = if old == 0 {
            per_text
        } else {
            (old * 3 + per_text) / 4
        };
        inner.nanos_per_text.store(new, Ordering::Release);
        if let Some(observe) = observer {
            observe(chunk.len(), took);
        }
        if vectors.len() != chunk.len() {
            return Err(EmbedError::Model(format!(
                "model returned {} vectors for {} texts",
                vectors.len(),
                chunk.len()
            )));
        }
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
    Ok(fresh)
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
