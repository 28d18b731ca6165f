//! The durable store: one sled database, one tree, keys by prefix.
//!
//! | key | value |
//! |---|---|
//! | `meta:format` | on-disk format version (u32, big-endian) |
//! | `s:<root>` | the task state (JSON, carries its own `format`) |
//! | `u:<root>` | last update, unix seconds (i64, big-endian): what expiry scans |
//! | `a:<root>\0<id>` | one audit record (JSON); `id` is sled's monotonic id, so records sort in commit order |
//! | `l:<task>` | the root task a subtask belongs to |
//! | `r:<root>\0<task>` | reverse of `l:`, so deleting a root finds its subtasks |
//!
//! One event's state, audit records and link go in one atomic batch; [`Store::flush`] makes it
//! durable before the verdict is answered. Task ids cannot contain control characters, so `\0`
//! is a safe separator.

use super::{ready, Durable, Opened, Store, StoreError, StoreFuture, TaskTxn};
use crate::audit::AuditRecord;
use crate::state::TaskState;
use std::path::Path;

/// Version of the key layout; bump when it changes incompatibly.
pub const DISK_FORMAT_VERSION: u32 = 1;

const META_FORMAT: &[u8] = b"meta:format";

/// A task as the sled store kept it: its state, audit trail and subtasks.
pub type StoredTask = (TaskState, Vec<AuditRecord>, Vec<String>);

pub struct SledStore {
    db: sled::Db,
    flusher: Flusher,
}

/// Group commit on its own thread. sled 0.34's `flush_async` deadlocks when called concurrently
/// (spacejam/sled#1308, fixed on sled's main branch but never released), and under load it was
/// exactly that here: every request flushing at once hung the service. So one thread runs the
/// synchronous `flush`, and a caller waits for a flush that *started after* its commit; one
/// fsync covers every commit made before it began.
struct Flusher {
    shared: std::sync::Arc<FlushShared>,
    done: tokio::sync::watch::Receiver<FlushDone>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct FlushDone {
    /// Every request up to this generation is durable.
    generation: u64,
    /// The last flush failed.
    failed: bool,
}

struct FlushShared {
    requested: std::sync::Mutex<u64>,
    wake: std::sync::Condvar,
    stop: std::sync::atomic::AtomicBool,
}

impl Flusher {
    fn start(db: sled::Db) -> Flusher {
        let shared = std::sync::Arc::new(FlushShared {
            requested: std::sync::Mutex::new(0),
            wake: std::sync::Condvar::new(),
            stop: std::sync::atomic::AtomicBool::new(false),
        });
        let (tx, rx) = tokio::sync::watch::channel(FlushDone {
            generation: 0,
            failed: false,
        });
        let s = std::sync::Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("loopguard-flush".into())
            .spawn(move || {
                let mut flushed = 0u64;
                loop {
                    let target = {
                        let mut req = s.requested.lock().expect("flush lock");
                        while *req == flushed {
                            if s.stop.load(std::sync::atomic::Ordering::Acquire) {
                                return;
                            }
                            req = s.wake.wait(req).expect("flush lock");
                        }
                        *req
                    };
                    let result = db.flush();
                    if let Err(e) = &result {
                        tracing::error!(error = %e, "flushing the state store failed");
                    }
                    flushed = target;
                    let _ = tx.send(FlushDone {
                        generation: target,
                        failed: result.is_err(),
                    });
                }
            })
            .expect("spawning the flush thread");
        Flusher {
            shared,
            done: rx,
            thread: Some(thread),
        }
    }

    /// A future that resolves once a flush that started after this call has finished: every
    /// write made before the call is then durable.
    fn durable(&self) -> Durable {
        let mine = {
            let mut req = self.shared.requested.lock().expect("flush lock");
            *req += 1;
            *req
        };
        self.shared.wake.notify_one();
        let mut done = self.done.clone();
        Box::pin(async move {
            let state = *done
                .wait_for(|d| d.generation >= mine)
                .await
                .map_err(|_| StoreError::Io("the flush thread stopped".into()))?;
            if state.failed {
                return Err(StoreError::Io("flushing the state store failed".into()));
            }
            Ok(())
        })
    }
}

fn io(e: sled::Error) -> StoreError {
    StoreError::Io(e.to_string())
}

fn key(prefix: &str, root: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + root.len());
    k.extend_from_slice(prefix.as_bytes());
    k.extend_from_slice(root.as_bytes());
    k
}

fn under(prefix: &str, root: &str) -> Vec<u8> {
    let mut k = key(prefix, root);
    k.push(0);
    k
}

impl Drop for Flusher {
    /// Stop the thread (it holds a handle on the database, whose lock must go with the store).
    fn drop(&mut self) {
        {
            let _req = self.shared.requested.lock().expect("flush lock");
            self.shared
                .stop
                .store(true, std::sync::atomic::Ordering::Release);
        }
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl SledStore {
    /// Open (or create) the store in `dir`. Refuses a directory written by a newer format.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let config = sled::Config::new()
            .path(dir)
            // Durability comes from explicit flushes after each commit, not from a timer.
            .flush_every_ms(None);
        // The directory's lock goes with the last handle on the database, and sled's own I/O
        // threads may hold one for a moment after a store in this process is dropped: a
        // reopen right after a close (a restart in place, the tests) retries briefly. Another
        // process holding the directory still fails, after the retries, with the hint below.
        let mut tries = 0;
        let mut backoff = crate::retry::RetryPolicy {
            floor: std::time::Duration::from_millis(20),
            cap: std::time::Duration::from_millis(200),
            ..Default::default()
        }
        .backoff();
        let opened = loop {
            match config.open() {
                Err(e) if e.to_string().contains("lock") && tries < 20 => {
                    tries += 1;
                    std::thread::sleep(backoff.next(None));
                }
                other => break other,
            }
        };
        let db = opened.map_err(|e| {
            let hint = if e.to_string().contains("lock") {
                " (is another loopguard using this data dir? sled allows one process per directory)"
            } else {
                ""
            };
            StoreError::Io(format!("opening {}: {e}{hint}", dir.display()))
        })?;
        match db.get(META_FORMAT).map_err(io)? {
            Some(v) => {
                let found =
                    u32::from_be_bytes(v.as_ref().try_into().map_err(|_| StoreError::Corrupt {
                        task: "meta:format".into(),
                        message: "not a 4-byte version".into(),
                    })?);
                if found > DISK_FORMAT_VERSION {
                    return Err(StoreError::Version {
                        found,
                        supported: DISK_FORMAT_VERSION,
                    });
                }
            }
            None => {
                db.insert(META_FORMAT, &DISK_FORMAT_VERSION.to_be_bytes())
                    .map_err(io)?;
                db.flush().map_err(io)?;
            }
        }
        let flusher = Flusher::start(db.clone());
        Ok(SledStore { db, flusher })
    }

    /// Another tree of the same database (the loop memory, feedback): one directory, one lock.
    pub fn tree(&self, name: &str) -> Result<sled::Tree, StoreError> {
        self.db.open_tree(name).map_err(io)
    }

    /// Task states a version before the task log kept here, each with its audit trail and its
    /// subtasks: the service moves them to the task log once, at start
    /// ([`SledStore::forget_tasks`] then drops them here).
    pub fn stored_tasks(&self) -> Result<Vec<StoredTask>, StoreError> {
        let mut out = Vec::new();
        for item in self.db.scan_prefix(b"s:") {
            let (k, v) = item.map_err(io)?;
            let root = String::from_utf8_lossy(&k[2..]).into_owned();
            let state = super::decode_state(&root, &v)?;
            let audit = block_on_ready(Store::history(self, &root, usize::MAX))?;
            let reverse = under("r:", &root);
            let mut subtasks = Vec::new();
            for item in self.db.scan_prefix(&reverse) {
                let (k, _) = item.map_err(io)?;
                subtasks.push(String::from_utf8_lossy(&k[reverse.len()..]).into_owned());
            }
            out.push((state, audit, subtasks));
        }
        Ok(out)
    }

    /// Drop every task state, audit record and link kept here (after they were moved).
    pub fn forget_tasks(&self) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for prefix in [&b"s:"[..], b"u:", b"a:", b"l:", b"r:"] {
            for item in self.db.scan_prefix(prefix) {
                batch.remove(item.map_err(io)?.0);
            }
        }
        self.db.apply_batch(batch).map_err(io)?;
        self.db.flush().map_err(io)?;
        Ok(())
    }

    /// Bytes on disk, for the metrics endpoint.
    pub fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }
}

/// A task of the sled store, opened for one event.
struct SledTxn<'s> {
    store: &'s SledStore,
    root: &'s str,
}

impl SledStore {
    fn read(&self, root: &str) -> Result<Option<TaskState>, StoreError> {
        let Some(bytes) = self.db.get(key("s:", root)).map_err(io)? else {
            return Ok(None);
        };
        super::decode_state(root, &bytes).map(Some)
    }

    fn write(
        &self,
        state: &TaskState,
        audit: &[AuditRecord],
        link: Option<(&str, &str)>,
    ) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        let json = serde_json::to_vec(state).map_err(|e| StoreError::Io(e.to_string()))?;
        batch.insert(key("s:", &state.root), json);
        batch.insert(key("u:", &state.root), &state.updated_ts.to_be_bytes());
        for record in audit {
            let id = self.db.generate_id().map_err(io)?;
            let mut k = under("a:", &state.root);
            k.extend_from_slice(&id.to_be_bytes());
            let v = serde_json::to_vec(record).map_err(|e| StoreError::Io(e.to_string()))?;
            batch.insert(k, v);
        }
        if let Some((task, root)) = link {
            batch.insert(key("l:", task), root.as_bytes());
            let mut r = under("r:", root);
            r.extend_from_slice(task.as_bytes());
            batch.insert(r, &[]);
        }
        self.db.apply_batch(batch).map_err(io)
    }

    fn remove(&self, root: &str) -> Result<bool, StoreError> {
        let mut batch = sled::Batch::default();
        let had = self.db.contains_key(key("s:", root)).map_err(io)?;
        batch.remove(key("s:", root));
        batch.remove(key("u:", root));
        for item in self.db.scan_prefix(under("a:", root)) {
            batch.remove(item.map_err(io)?.0);
        }
        let reverse = under("r:", root);
        for item in self.db.scan_prefix(&reverse) {
            let (k, _) = item.map_err(io)?;
            let task = &k[reverse.len()..];
            let mut l = b"l:".to_vec();
            l.extend_from_slice(task);
            batch.remove(l);
            batch.remove(k);
        }
        self.db.apply_batch(batch).map_err(io)?;
        Ok(had)
    }
}

impl TaskTxn for SledTxn<'_> {
    fn commit<'a>(
        self: Box<Self>,
        next: &'a TaskState,
        audit: &'a [AuditRecord],
        link: Option<(&'a str, &'a str)>,
    ) -> StoreFuture<'a, Durable> {
        let written = self.store.write(next, audit, link);
        let durable = written.map(|()| self.store.flusher.durable());
        Box::pin(std::future::ready(durable))
    }

    fn delete<'a>(self: Box<Self>) -> StoreFuture<'a, bool> {
        let had = self.store.remove(self.root);
        let durable = self.store.flusher.durable();
        Box::pin(async move {
            let had = had?;
            durable.await?;
            Ok(had)
        })
    }
}

/// The result of a future this store made ready at once (its reads are synchronous).
fn block_on_ready<T>(f: StoreFuture<'_, T>) -> Result<T, StoreError> {
    use std::task::{Context, Poll, Waker};
    let mut f = f;
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => unreachable!("sled reads are ready at once"),
    }
}

impl Store for SledStore {
    fn begin<'a>(
        &'a self,
        root: &'a str,
        cached: Option<TaskState>,
    ) -> StoreFuture<'a, Opened<'a>> {
        let state = match cached {
            Some(s) => Ok(Some(s)),
            None => self.read(root),
        };
        ready(state.map(|state| Opened {
            state,
            txn: Box::new(SledTxn { store: self, root }),
        }))
    }

    fn load<'a>(&'a self, root: &'a str) -> StoreFuture<'a, Option<TaskState>> {
        ready(self.read(root))
    }

    fn root_of<'a>(&'a self, task: &'a str) -> StoreFuture<'a, Option<String>> {
        ready(
            self.db
                .get(key("l:", task))
                .map_err(io)
                .map(|v| v.map(|v| String::from_utf8_lossy(&v).into_owned())),
        )
    }

    fn history<'a>(&'a self, root: &'a str, limit: usize) -> StoreFuture<'a, Vec<AuditRecord>> {
        let read = || {
            let mut out = Vec::new();
            for item in self.db.scan_prefix(under("a:", root)).rev().take(limit) {
                let (_, v) = item.map_err(io)?;
                out.push(serde_json::from_slice(&v).map_err(|e| StoreError::Corrupt {
                    task: root.to_string(),
                    message: e.to_string(),
                })?);
            }
            out.reverse();
            Ok(out)
        };
        ready(read())
    }

    fn idle_roots(&self, before_ts: i64) -> StoreFuture<'_, Vec<String>> {
        let scan = || {
            let mut out = Vec::new();
            for item in self.db.scan_prefix(b"u:") {
                let (k, v) = item.map_err(io)?;
                let ts = v
                    .as_ref()
                    .try_into()
                    .map(i64::from_be_bytes)
                    .unwrap_or(i64::MIN);
                if ts < before_ts {
                    out.push(String::from_utf8_lossy(&k[2..]).into_owned());
                }
            }
            Ok(out)
        };
        ready(scan())
    }

    fn task_count(&self) -> StoreFuture<'_, usize> {
        ready(Ok(self.db.scan_prefix(b"u:").count()))
    }

    fn recent_roots(&self, limit: usize) -> StoreFuture<'_, (usize, Vec<(String, i64)>)> {
        // The `u:` index is small (one timestamp per task): one scan counts the tasks and keeps
        // the newest, without reading a state or allocating an id that will not be kept.
        let scan = || {
            let mut total = 0;
            let mut top = super::Newest::new(limit);
            for item in self.db.scan_prefix(b"u:") {
                let (k, v) = item.map_err(io)?;
                total += 1;
                let ts = v
                    .as_ref()
                    .try_into()
                    .map(i64::from_be_bytes)
                    .unwrap_or(i64::MIN);
                top.offer(ts, || String::from_utf8_lossy(&k[2..]).into_owned());
            }
            Ok((total, top.into_sorted()))
        };
        ready(scan())
    }

    fn subtask_count<'a>(&'a self, root: &'a str) -> StoreFuture<'a, usize> {
        let reverse = under("r:", root);
        let mut n = 0;
        for item in self.db.scan_prefix(&reverse) {
            if let Err(e) = item {
                return ready(Err(io(e)));
            }
            n += 1;
        }
        ready(Ok(n))
    }

    fn flush(&self) -> StoreFuture<'_> {
        Box::pin(self.flusher.durable())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_the_store_checks_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let open = || {
            std::sync::Arc::new(SledStore::open(dir.path()).unwrap()) as std::sync::Arc<dyn Store>
        };
        block_on(crate::store::conformance::check(open, true, "t"));
    }

    #[test]
    fn refuses_a_newer_format() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = sled::open(dir.path()).unwrap();
            db.insert(META_FORMAT, &(DISK_FORMAT_VERSION + 1).to_be_bytes())
                .unwrap();
            db.flush().unwrap();
        }
        let err = SledStore::open(dir.path()).err().unwrap();
        assert!(matches!(err, StoreError::Version { .. }), "{err}");
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }
}
