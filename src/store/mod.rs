//! Where task state lives between events. The engine keeps hot states in memory and writes each
//! event's new state, together with its audit records, through a [`Store`] in one commit; a
//! verdict is answered only after [`Store::flush`] made that commit durable.
//!
//! - [`InMemoryStore`]: everything in memory (`score`, tests, library users without durability).
//! - [`sled::SledStore`]: durable, on disk, for the service.

pub mod sled;

use crate::audit::AuditRecord;
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
    /// Wait until every commit made so far survives a crash.
    fn flush(&self) -> StoreFuture<'_>;
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

impl Store for InMemoryStore {
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

    fn flush(&self) -> StoreFuture<'_> {
        Box::pin(async { Ok(()) })
    }
}
