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
    /// How many root tasks are stored, and the `limit` most recently updated with their last
    /// update (unix seconds), newest first, ties in id order. For listings (the service's
    /// `GET /v1/tasks`, the dashboard): it reads only what expiry reads, not the states.
    fn recent_roots(&self, limit: usize) -> Result<(usize, Vec<(String, i64)>), StoreError>;
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

    fn recent_roots(&self, limit: usize) -> Result<(usize, Vec<(String, i64)>), StoreError> {
        let inner = self.inner.lock().expect("store lock");
        let mut top = Newest::new(limit);
        for s in inner.states.values() {
            top.offer(s.updated_ts, || s.root.clone());
        }
        Ok((inner.states.len(), top.into_sorted()))
    }

    fn flush(&self) -> StoreFuture<'_> {
        Box::pin(async { Ok(()) })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn memory_store_lists_recent_roots() {
        let s = MemoryStore::new();
        for (root, ts) in [("old", 10), ("new", 30), ("mid", 20)] {
            s.commit(&TaskState::new(root, ts), &[], None).unwrap();
        }
        let (total, roots) = s.recent_roots(2).unwrap();
        assert_eq!(total, 3);
        assert_eq!(roots, [("new".to_string(), 30), ("mid".to_string(), 20)]);
    }
}
