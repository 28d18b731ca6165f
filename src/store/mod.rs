//! Where task state lives between events. For each event the engine opens the task
//! ([`Store::begin`]: the state, and on a shared store the task's lock across replicas), computes
//! the new state, and commits it with its audit records in one [`TaskTxn::commit`]; the
//! verdict is answered only once that commit is durable. The engine keeps hot states in memory
//! and hands them back to `begin`, so an embedded store never reads its disk on the hot path.
//!
//! - [`InMemoryStore`]: everything in memory (`score`, tests, library users without durability).
//! - [`sled::SledStore`]: durable, on disk, for the service.
//! - [`postgres::PostgresStore`]: durable, in PostgreSQL, shared by many replicas of the service.

pub mod conformance;
pub mod log;
pub mod postgres;
pub mod sled;

use crate::audit::AuditRecord;
use crate::state::TaskState;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

/// A boxed future, so stores can be trait objects.
pub type StoreFuture<'a, T = ()> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Resolves once a commit survives a crash. Embedded stores group-commit: many tasks' writes
/// share one fsync, and a task's lock is released before the wait, so its next event need not
/// wait for the disk. Stores whose commit is already durable return a ready future.
pub type Durable = Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + 'static>>;

/// A durable commit, already done.
pub fn durable_now() -> Durable {
    Box::pin(std::future::ready(Ok(())))
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state store I/O error: {0}")]
    Io(String),
    #[error("stored state for task {task} is unreadable: {message}")]
    Corrupt { task: String, message: String },
    #[error("stored state has format version {found}, this build reads up to {supported}")]
    Version { found: u32, supported: u32 },
    /// The store cannot be reached (a database restarting): nothing was applied; retry later.
    #[error("state store unavailable: {0}")]
    Unavailable(String),
    /// The disk is full: nothing was applied; commits resume by themselves once space is freed.
    #[error("state store full: {0}")]
    Full(String),
    /// A file of the store is damaged: refused, naming the file and the byte, never cut.
    #[error("the task log is damaged: {file} at byte {offset}: {message}")]
    Damaged {
        file: String,
        offset: u64,
        message: String,
    },
}

/// A task opened by [`Store::begin`]: its current state and the transaction to commit.
pub struct Opened<'a> {
    pub state: Option<TaskState>,
    pub txn: Box<dyn TaskTxn + 'a>,
}

/// One root task opened for one event or one lifecycle operation (reset, delete, expiry).
///
/// A shared store (many replicas on one database) holds the task's lock across processes from
/// [`Store::begin`] until the transaction is committed, deleted or dropped; dropping it without
/// committing applies nothing. Within one process the engine's per-task mutex already
/// serialises the task, so embedded stores take no lock of their own.
pub trait TaskTxn: Send {
    /// Make `next` the task's state, with its audit records and (on a subtask's first event) the
    /// link from the subtask to its root, atomically: all of it or none. Commits of one task
    /// are applied in the order they are made, and `next.version` is one more than the version
    /// the transaction opened with (a store that appends each event's effect compares `next`
    /// with its own copy of that state to find it). The returned [`Durable`] resolves once the
    /// commit survives a crash; the verdict is answered only then.
    fn commit<'a>(
        self: Box<Self>,
        next: &'a TaskState,
        audit: &'a [AuditRecord],
        link: Option<(&'a str, &'a str)>,
    ) -> StoreFuture<'a, Durable>;

    /// Forget the task: state, audit trail, links to it. True if there was anything.
    fn delete<'a>(self: Box<Self>) -> StoreFuture<'a, bool>;
}

/// Durable (or not) storage of task states and their audit trails. See docs/ARCHITECTURE.md.
pub trait Store: Send + Sync {
    /// Open `root` for one event, with its current state (`None`: a task never seen). `cached`
    /// is the engine's in-memory copy from the task's last event in this process; a store
    /// returns it when it is still the current state (an embedded store always; a shared one
    /// when its `version` matches the stored one) and loads the state otherwise.
    fn begin<'a>(&'a self, root: &'a str, cached: Option<TaskState>)
        -> StoreFuture<'a, Opened<'a>>;

    /// The current state of a root task, for reading only (no lock).
    fn load<'a>(&'a self, root: &'a str) -> StoreFuture<'a, Option<TaskState>>;

    /// The root task a task belongs to, if it was linked to one.
    fn root_of<'a>(&'a self, task: &'a str) -> StoreFuture<'a, Option<String>>;

    /// Audit records of a root task, oldest first, at most `limit` (the newest ones).
    fn history<'a>(&'a self, root: &'a str, limit: usize) -> StoreFuture<'a, Vec<AuditRecord>>;

    /// Root tasks last updated before `before_ts` (unix seconds): candidates for expiry.
    fn idle_roots(&self, before_ts: i64) -> StoreFuture<'_, Vec<String>>;

    /// How many root tasks are stored.
    fn task_count(&self) -> StoreFuture<'_, usize>;

    /// How many root tasks are stored, and the `limit` most recently updated with their last
    /// update (unix seconds), newest first, ties in id order. For listings (the service's
    /// `GET /v1/tasks`, the dashboard): it reads only what expiry reads, not the states.
    fn recent_roots(&self, limit: usize) -> StoreFuture<'_, (usize, Vec<(String, i64)>)>;

    /// How many subtasks are linked to a root task (bounded by `server.max_subtasks`).
    fn subtask_count<'a>(&'a self, root: &'a str) -> StoreFuture<'a, usize>;

    /// Wait until every commit made so far survives a crash (at shutdown).
    fn flush(&self) -> StoreFuture<'_>;

    /// Stop taking commits and release the store in order (at shutdown, after [`Store::flush`]).
    fn close(&self) {}

    /// Why the store cannot serve right now, for `/readyz`; `None` when it can.
    fn unready(&self) -> Option<String> {
        None
    }

    /// Why the store cannot recover without a restart (a failed write or sync leaves what is
    /// on disk unknown), for `/livez`; `None` while it can serve or recover by itself.
    fn fatal(&self) -> Option<String> {
        None
    }

    /// The task log's counters, for a store that appends one (the embedded store).
    fn log_stats(&self) -> Option<LogStats> {
        None
    }

    /// Other processes write to this store too (replicas on one database): a state held in
    /// memory may be stale, so reads go to the store ([`Store::begin`] checks the version).
    fn shared(&self) -> bool {
        false
    }
}

/// What an append-only store wrote since it was opened, and what it holds on disk now.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LogStats {
    pub bytes_appended: u64,
    pub records_appended: u64,
    /// Group commits: writes followed by one sync.
    pub syncs: u64,
    pub snapshots: u64,
    pub bytes_on_disk: u64,
}

/// Keeps everything in memory: for `score`, tests and library users who do not need durability.
#[derive(Default)]
pub struct InMemoryStore {
    inner: Mutex<MemoryInner>,
}

#[derive(Default)]
struct MemoryInner {
    states: HashMap<String, TaskState>,
    audit: HashMap<String, Vec<AuditRecord>>,
    links: HashMap<String, String>,
}

impl InMemoryStore {
    pub fn new() -> Self {
        Self::default()
    }
}

/// An open task of the in-memory store: the state as loaded.
struct MemoryTxn<'s> {
    store: &'s InMemoryStore,
    root: &'s str,
}

impl TaskTxn for MemoryTxn<'_> {
    fn commit<'a>(
        self: Box<Self>,
        next: &'a TaskState,
        audit: &'a [AuditRecord],
        link: Option<(&'a str, &'a str)>,
    ) -> StoreFuture<'a, Durable> {
        let mut inner = self.store.inner.lock().expect("store lock");
        inner.states.insert(next.root.clone(), next.clone());
        if !audit.is_empty() {
            inner
                .audit
                .entry(next.root.clone())
                .or_default()
                .extend_from_slice(audit);
        }
        if let Some((task, root)) = link {
            inner.links.insert(task.to_string(), root.to_string());
        }
        Box::pin(std::future::ready(Ok(durable_now())))
    }

    fn delete<'a>(self: Box<Self>) -> StoreFuture<'a, bool> {
        let mut inner = self.store.inner.lock().expect("store lock");
        let root = self.root;
        let had = inner.states.remove(root).is_some() | inner.audit.remove(root).is_some();
        inner.links.retain(|_, r| r != root);
        Box::pin(std::future::ready(Ok(had)))
    }
}

/// A store answer that is already there (an embedded store's reads are synchronous).
pub(crate) fn ready<'a, T: Send + 'a>(v: Result<T, StoreError>) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(v))
}

impl Store for InMemoryStore {
    fn begin<'a>(
        &'a self,
        root: &'a str,
        cached: Option<TaskState>,
    ) -> StoreFuture<'a, Opened<'a>> {
        let state = cached.or_else(|| {
            self.inner
                .lock()
                .expect("store lock")
                .states
                .get(root)
                .cloned()
        });
        ready(Ok(Opened {
            state,
            txn: Box::new(MemoryTxn { store: self, root }),
        }))
    }

    fn load<'a>(&'a self, root: &'a str) -> StoreFuture<'a, Option<TaskState>> {
        ready(Ok(self
            .inner
            .lock()
            .expect("store lock")
            .states
            .get(root)
            .cloned()))
    }

    fn root_of<'a>(&'a self, task: &'a str) -> StoreFuture<'a, Option<String>> {
        ready(Ok(self
            .inner
            .lock()
            .expect("store lock")
            .links
            .get(task)
            .cloned()))
    }

    fn history<'a>(&'a self, root: &'a str, limit: usize) -> StoreFuture<'a, Vec<AuditRecord>> {
        let inner = self.inner.lock().expect("store lock");
        let all = inner.audit.get(root).map(Vec::as_slice).unwrap_or(&[]);
        ready(Ok(all[all.len().saturating_sub(limit)..].to_vec()))
    }

    fn idle_roots(&self, before_ts: i64) -> StoreFuture<'_, Vec<String>> {
        let inner = self.inner.lock().expect("store lock");
        ready(Ok(idle_of(inner.states.values(), before_ts)))
    }

    fn task_count(&self) -> StoreFuture<'_, usize> {
        ready(Ok(self.inner.lock().expect("store lock").states.len()))
    }

    fn recent_roots(&self, limit: usize) -> StoreFuture<'_, (usize, Vec<(String, i64)>)> {
        let inner = self.inner.lock().expect("store lock");
        ready(Ok(recent_of(inner.states.values(), limit)))
    }

    fn subtask_count<'a>(&'a self, root: &'a str) -> StoreFuture<'a, usize> {
        let inner = self.inner.lock().expect("store lock");
        ready(Ok(inner.links.values().filter(|r| *r == root).count()))
    }

    fn flush(&self) -> StoreFuture<'_> {
        ready(Ok(()))
    }
}

/// Roots of the states last updated before `before_ts` (stores that hold every state in memory).
pub(crate) fn idle_of<'a>(
    states: impl Iterator<Item = &'a TaskState>,
    before_ts: i64,
) -> Vec<String> {
    states
        .filter(|s| s.updated_ts < before_ts)
        .map(|s| s.root.clone())
        .collect()
}

/// How many states, and the `limit` most recently updated (stores that hold every state in
/// memory): what [`Store::recent_roots`] answers.
pub(crate) fn recent_of<'a>(
    states: impl Iterator<Item = &'a TaskState>,
    limit: usize,
) -> (usize, Vec<(String, i64)>) {
    let mut total = 0;
    let mut top = Newest::new(limit);
    for s in states {
        total += 1;
        top.offer(s.updated_ts, || s.root.clone());
    }
    (total, top.into_sorted())
}

/// Keeps the `limit` newest of `(root, updated_ts)` pairs offered, without sorting them all or
/// allocating an id for every pair that cannot make it (a listing scans every task).
pub(crate) struct Newest {
    limit: usize,
    // A min-heap on (ts, Reverse(id)): its top is the entry to drop first.
    heap: std::collections::BinaryHeap<std::cmp::Reverse<(i64, std::cmp::Reverse<String>)>>,
}

impl Newest {
    pub(crate) fn new(limit: usize) -> Newest {
        Newest {
            limit,
            heap: std::collections::BinaryHeap::with_capacity(limit.saturating_add(1).min(4096)),
        }
    }

    /// Offer a root updated at `ts`; `id` is called only when it may be kept.
    pub(crate) fn offer(&mut self, ts: i64, id: impl FnOnce() -> String) {
        use std::cmp::Reverse;
        if self.limit == 0 {
            return;
        }
        if self.heap.len() == self.limit {
            let Some(Reverse((oldest, _))) = self.heap.peek() else {
                return;
            };
            if ts < *oldest {
                return;
            }
        }
        self.heap.push(Reverse((ts, Reverse(id()))));
        if self.heap.len() > self.limit {
            self.heap.pop();
        }
    }

    /// Newest first; ties by id.
    pub(crate) fn into_sorted(self) -> Vec<(String, i64)> {
        let mut out: Vec<(String, i64)> = self
            .heap
            .into_iter()
            .map(|std::cmp::Reverse((ts, std::cmp::Reverse(root)))| (root, ts))
            .collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out
    }
}

/// A stored task state, read back: a state this build cannot read is refused by name (corrupt,
/// or written by a newer format), never misread. Every store decodes with this.
pub(crate) fn decode_state(root: &str, bytes: &[u8]) -> Result<TaskState, StoreError> {
    let state: TaskState = serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
        task: root.to_string(),
        message: e.to_string(),
    })?;
    if state.format > crate::state::STATE_FORMAT_VERSION {
        return Err(StoreError::Version {
            found: state.format,
            supported: crate::state::STATE_FORMAT_VERSION,
        });
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_in_memory_store_passes_the_store_checks() {
        let store: std::sync::Arc<dyn Store> = std::sync::Arc::new(InMemoryStore::new());
        conformance::check(|| std::sync::Arc::clone(&store), false, "t").await;
    }

    fn newest(items: &[(&str, i64)], limit: usize) -> Vec<(String, i64)> {
        let mut top = Newest::new(limit);
        for (id, ts) in items {
            top.offer(*ts, || id.to_string());
        }
        top.into_sorted()
    }

    #[test]
    fn newest_keeps_the_most_recent_in_order() {
        let items = [("a", 5), ("b", 9), ("c", 1), ("d", 9), ("e", 7), ("f", 9)];
        let want = [("b", 9), ("d", 9), ("f", 9)].map(|(r, t)| (r.to_string(), t));
        assert_eq!(newest(&items, 3), want, "ties by id");
        assert_eq!(newest(&items, 4)[3], ("e".to_string(), 7));
        assert_eq!(newest(&items, 10).len(), 6);
        assert!(newest(&items, 0).is_empty());
    }

    #[tokio::test]
    async fn memory_store_lists_recent_roots() {
        let s = InMemoryStore::new();
        for (root, ts) in [("old", 10), ("new", 30), ("mid", 20)] {
            conformance::commit(&s, &TaskState::new(root, ts), &[], None)
                .await
                .unwrap();
        }
        let (total, roots) = s.recent_roots(2).await.unwrap();
        assert_eq!(total, 3);
        assert_eq!(roots, [("new".to_string(), 30), ("mid".to_string(), 20)]);
    }
}
