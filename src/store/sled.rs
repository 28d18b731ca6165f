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

use super::{Store, StoreError, StoreFuture};
use crate::policy::AuditRecord;
use crate::state::{TaskState, STATE_FORMAT_VERSION};
use std::path::Path;

/// Version of the key layout; bump when it changes incompatibly.
pub const DISK_FORMAT_VERSION: u32 = 1;

const META_FORMAT: &[u8] = b"meta:format";

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

    async fn flush(&self) -> Result<(), StoreError> {
        let mine = {
            let mut req = self.shared.requested.lock().expect("flush lock");
            *req += 1;
            *req
        };
        self.shared.wake.notify_one();
        let mut done = self.done.clone();
        let state = *done
            .wait_for(|d| d.generation >= mine)
            .await
            .map_err(|_| StoreError::Io("the flush thread stopped".into()))?;
        if state.failed {
            return Err(StoreError::Io("flushing the state store failed".into()));
        }
        Ok(())
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
        let db = sled::Config::new()
            .path(dir)
            // Durability comes from explicit flushes after each commit, not from a timer.
            .flush_every_ms(None)
            .open()
            .map_err(|e| {
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

    /// Bytes on disk, for the metrics endpoint.
    pub fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }
}

impl Store for SledStore {
    fn load(&self, root: &str) -> Result<Option<TaskState>, StoreError> {
        let Some(bytes) = self.db.get(key("s:", root)).map_err(io)? else {
            return Ok(None);
        };
        let state: TaskState = serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
            task: root.to_string(),
            message: e.to_string(),
        })?;
        if state.format > STATE_FORMAT_VERSION {
            return Err(StoreError::Version {
                found: state.format,
                supported: STATE_FORMAT_VERSION,
            });
        }
        Ok(Some(state))
    }

    fn commit(
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

    fn root_of(&self, task: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .db
            .get(key("l:", task))
            .map_err(io)?
            .map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    fn history(&self, root: &str, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
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
    }

    fn delete(&self, root: &str) -> Result<bool, StoreError> {
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

    fn idle_roots(&self, before_ts: i64) -> Result<Vec<String>, StoreError> {
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
    }

    fn task_count(&self) -> Result<usize, StoreError> {
        Ok(self.db.scan_prefix(b"u:").count())
    }

    fn flush(&self) -> StoreFuture<'_> {
        Box::pin(self.flusher.flush())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::AuditEvent;

    fn record(root: &str, seq: u64) -> AuditRecord {
        AuditRecord {
            client_ts: None,
            ts: 0,
            seq,
            task_id: root.to_string(),
            agent_id: None,
            event: AuditEvent::BudgetExhausted { events: seq },
        }
    }

    #[test]
    fn round_trips_state_audit_and_links_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = SledStore::open(dir.path()).unwrap();
            let mut st = TaskState::new("root", 100);
            st.loop_count = 2;
            s.commit(
                &st,
                &[record("root", 1), record("root", 2)],
                Some(("sub", "root")),
            )
            .unwrap();
            block_on(s.flush()).unwrap();
        }
        let s = SledStore::open(dir.path()).unwrap();
        assert_eq!(s.load("root").unwrap().unwrap().loop_count, 2);
        assert_eq!(s.root_of("sub").unwrap().as_deref(), Some("root"));
        let h = s.history("root", 10).unwrap();
        assert_eq!(h.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(s.history("root", 1).unwrap()[0].seq, 2, "the newest ones");
        assert_eq!(s.idle_roots(101).unwrap(), ["root"]);
        assert!(s.idle_roots(100).unwrap().is_empty());
        assert_eq!(s.task_count().unwrap(), 1);
        assert!(s.delete("root").unwrap());
        assert!(s.load("root").unwrap().is_none());
        assert!(s.root_of("sub").unwrap().is_none());
        assert!(s.history("root", 10).unwrap().is_empty());
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
