//! Where task state lives between events. The engine keeps hot states in memory and writes each
//! event's new state, together with its audit records, through a [`Store`] in one commit; a
//! verdict is answered only after [`Store::flush`] made that commit durable.
//!
//! - [`MemoryStore`]: everything in memory (`score`, tests, library users without durability).
//! - [`sled::SledStore`]: durable, on disk, for the service.

pub mod sled;

use crate::policy::AuditRecord;
use crate::state::TaskState;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

/// A boxed future, so stores can be trait objects.
pub type StoreFuture<'a> = Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + 'a>>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state store I/O error: {0}")]
    Io(String),
    #[error("stored state for task {task} is unreadable: {message}")]
    Corrupt { task: String, message: String },
    #[error("stored state has format version {found}, this build reads up to {supported}")]
    Version { found: u32, supported: u32 },
}

/// Durable (or not) storage of task states and their audit trails.
pub trait Store: Send + Sync {
    fn load(&self, root: &str) -> Result<Option<TaskState>, StoreError>;
    /// Write the new state, its audit records and (for a subtask's first event) the link from
    /// the subtask to its root, atomically.
    fn commit(
        &self,
        state: &TaskState,
        audit: &[AuditRecord],
        link: Option<(&str, &str)>,
    ) -> Result<(), StoreError>;
    /// The root task a task belongs to, if it was linked to one.
    fn root_of(&self, task: &str) -> Result<Option<String>, StoreError>;
    /// Audit records of a root task, oldest first, at most `limit` (the newest ones).
    fn history(&self, root: &str, limit: usize) -> Result<Vec<AuditRecord>, StoreError>;
    /// Forget a root task: state, audit trail, links. True if there was anything.
    fn delete(&self, root: &str) -> Result<bool, StoreError>;
    /// Root tasks last updated before `before_ts` (unix seconds): candidates for expiry.
    fn idle_roots(&self, before_ts: i64) -> Result<Vec<String>, StoreError>;
    /// How many root tasks are stored.
    fn task_count(&self) -> Result<usize, StoreError>;
    /// The `limit` most recently updated root tasks with their last update (unix seconds),
    /// newest first; ties in id order. For listings (the service's `GET /v1/tasks`, the
    /// dashboard): it reads only what expiry reads, not the states.
    fn recent_roots(&self, limit: usize) -> Result<Vec<(String, i64)>, StoreError>;
    /// Wait until every commit made so far survives a crash.
    fn flush(&self) -> StoreFuture<'_>;
}

/// Keeps everything in memory: for `score`, tests and library users who do not need durability.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<MemoryInner>,
}

#[derive(Default)]
struct MemoryInner {
    states: HashMap<String, TaskState>,
    audit: HashMap<String, Vec<AuditRecord>>,
    links: HashMap<String, String>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Store for MemoryStore {
    fn load(&self, root: &str) -> Result<Option<TaskState>, StoreError> {
        Ok(self
            .inner
            .lock()
            .expect("store lock")
            .states
            .get(root)
            .cloned())
    }

    fn commit(
        &self,
        state: &TaskState,
        audit: &[AuditRecord],
        link: Option<(&str, &str)>,
    ) -> Result<(), StoreError> {
        let mut inner = self.inner.lock().expect("store lock");
        inner.states.insert(state.root.clone(), state.clone());
        if !audit.is_empty() {
            inner
                .audit
                .entry(state.root.clone())
                .or_default()
                .extend_from_slice(audit);
        }
        if let Some((task, root)) = link {
            inner.links.insert(task.to_string(), root.to_string());
        }
        Ok(())
    }

    fn root_of(&self, task: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .inner
            .lock()
            .expect("store lock")
            .links
            .get(task)
            .cloned())
    }

    fn history(&self, root: &str, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        let inner = self.inner.lock().expect("store lock");
        let all = inner.audit.get(root).map(Vec::as_slice).unwrap_or(&[]);
        Ok(all[all.len().saturating_sub(limit)..].to_vec())
    }

    fn delete(&self, root: &str) -> Result<bool, StoreError> {
        let mut inner = self.inner.lock().expect("store lock");
        let had = inner.states.remove(root).is_some() | inner.audit.remove(root).is_some();
        inner.links.retain(|_, r| r != root);
        Ok(had)
    }

    fn idle_roots(&self, before_ts: i64) -> Result<Vec<String>, StoreError> {
        let inner = self.inner.lock().expect("store lock");
        Ok(inner
            .states
            .values()
            .filter(|s| s.updated_ts < before_ts)
            .map(|s| s.root.clone())
            .collect())
    }

    fn task_count(&self) -> Result<usize, StoreError> {
        Ok(self.inner.lock().expect("store lock").states.len())
    }

    fn recent_roots(&self, limit: usize) -> Result<Vec<(String, i64)>, StoreError> {
        let inner = self.inner.lock().expect("store lock");
        Ok(newest(
            inner
                .states
                .values()
                .map(|s| (s.root.clone(), s.updated_ts)),
            limit,
        ))
    }

    fn flush(&self) -> StoreFuture<'_> {
        Box::pin(async { Ok(()) })
    }
}

/// The `limit` newest of `(root, updated_ts)` pairs, newest first (ties by id), without sorting
/// them all: a bounded heap keeps the best `limit` seen so far.
pub fn newest(items: impl Iterator<Item = (String, i64)>, limit: usize) -> Vec<(String, i64)> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    if limit == 0 {
        return Vec::new();
    }
    // A min-heap on (ts, Reverse(id)): its top is the entry to drop first.
    let mut heap: BinaryHeap<Reverse<(i64, Reverse<String>)>> =
        BinaryHeap::with_capacity(limit + 1);
    for (root, ts) in items {
        heap.push(Reverse((ts, Reverse(root))));
        if heap.len() > limit {
            heap.pop();
        }
    }
    let mut out: Vec<(String, i64)> = heap
        .into_iter()
        .map(|Reverse((ts, Reverse(root)))| (root, ts))
        .collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_keeps_the_most_recent_in_order() {
        let items =
            [("a", 5), ("b", 9), ("c", 1), ("d", 9), ("e", 7)].map(|(r, t)| (r.to_string(), t));
        let got = newest(items.clone().into_iter(), 3);
        assert_eq!(
            got,
            [
                ("b".to_string(), 9),
                ("d".to_string(), 9),
                ("e".to_string(), 7)
            ]
        );
        assert_eq!(newest(items.clone().into_iter(), 10).len(), 5);
        assert!(newest(items.into_iter(), 0).is_empty());
    }

    #[test]
    fn memory_store_lists_recent_roots() {
        let s = MemoryStore::new();
        for (root, ts) in [("old", 10), ("new", 30), ("mid", 20)] {
            s.commit(&TaskState::new(root, ts), &[], None).unwrap();
        }
        assert_eq!(
            s.recent_roots(2).unwrap(),
            [("new".to_string(), 30), ("mid".to_string(), 20)]
        );
    }
}
