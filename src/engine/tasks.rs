//! Tasks: which root task an event belongs to, one lock per root task, and the task lifecycle
//! outside the pipeline — reset, delete, expiry of idle tasks, and the bound on task states
//! held in memory.
//!
//! Events of one task are serialised by its [`TaskLock`]; different tasks run concurrently. The
//! lock also holds the task's state between events (the hot copy; the store has the durable one).
//! At most `server.max_cached_tasks` locks (and hot copies) are kept, at all times: taking a new
//! one drops the least recently used that nobody holds, and its task's next event reads its
//! state back from the store.

use super::{now_unix, Engine, EngineError};
use crate::audit::{AuditEvent, AuditRecord};
use crate::event::Envelope;
use crate::state::TaskState;
use crate::store::{Store, StoreError};
use lru::LruCache;
use std::sync::{Arc, Mutex};

/// A root task's lock, holding its state while it is cached.
pub(crate) type TaskLock = Arc<tokio::sync::Mutex<Option<TaskState>>>;

/// Why a counter is being reset from outside an event (the reset endpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetReason {
    Success,
    HumanIntervention,
}

impl ResetReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ResetReason::Success => "success",
            ResetReason::HumanIntervention => "human_intervention",
        }
    }
}

/// The per-task locks and a cache of subtask → root links, each bounded by `max`.
pub(crate) struct Tasks {
    locks: Mutex<LruCache<String, TaskLock>>,
    roots: Mutex<LruCache<String, String>>,
    max: usize,
}

impl Tasks {
    pub fn new(max: usize) -> Tasks {
        Tasks {
            locks: Mutex::new(LruCache::unbounded()),
            roots: Mutex::new(LruCache::unbounded()),
            max: max.max(1),
        }
    }

    /// The root task of `task` (itself when it has no known parent).
    pub async fn root_of(&self, store: &dyn Store, task: &str) -> Result<String, StoreError> {
        if let Some(r) = self.roots.lock().expect("roots lock").get(task) {
            return Ok(r.clone());
        }
        let root = store.root_of(task).await?;
        Ok(match root {
            Some(root) => {
                self.linked(task.to_string(), root.clone());
                root
            }
            None => task.to_string(),
        })
    }

    /// Resolve the root for an envelope; `Some(link)` when a new subtask link must be stored.
    ///
    /// A task keeps the place it was created with: a subtask its root, a root its rootlessness.
    /// An event naming another parent is refused ([`EngineError::ParentConflict`]) rather than
    /// moving the task, or silently ignored: re-rooting a paused task under a fresh parent
    /// would start it over at loop count 0, an escape from its gate. The same parent (or any
    /// task of the same root), or none, goes on.
    pub async fn resolve(
        &self,
        store: &dyn Store,
        env: &Envelope,
    ) -> Result<(String, Option<(String, String)>), EngineError> {
        let known = self.root_of(store, &env.task_id).await?;
        let Some(parent) = &env.parent_task_id else {
            return Ok((known, None));
        };
        let root = self.root_of(store, parent).await?;
        let conflict = |current: Option<String>| EngineError::ParentConflict {
            task: env.task_id.clone(),
            current,
            requested: parent.clone(),
        };
        if known != env.task_id {
            // A subtask already: it stays with its root.
            return if root == known {
                Ok((known, None))
            } else {
                Err(conflict(Some(known)))
            };
        }
        if root == env.task_id {
            // A parent that points back at this task: keep the task its own root.
            return Ok((known, None));
        }
        // A root task that exists (it has events, or subtasks whose events are its) does not
        // become a subtask; only a task never seen does.
        if store.load(&env.task_id).await?.is_some() {
            return Err(conflict(None));
        }
        Ok((root.clone(), Some((env.task_id.clone(), root))))
    }

    /// Remember a subtask's root once its link is committed.
    pub fn linked(&self, task: String, root: String) {
        let mut roots = self.roots.lock().expect("roots lock");
        roots.put(task, root);
        while roots.len() > self.max {
            roots.pop_lru();
        }
    }

    /// The task's lock (its hot copy inside), made the most recently used; a new one makes room
    /// by dropping the least recently used locks nobody holds.
    pub fn lock(&self, root: &str) -> TaskLock {
        let mut locks = self.locks.lock().expect("task locks");
        if let Some(l) = locks.get(root) {
            return Arc::clone(l);
        }
        let lock = TaskLock::default();
        locks.put(root.to_string(), Arc::clone(&lock));
        Self::trim_locked(&mut locks, self.max);
        lock
    }

    /// Drop least recently used locks until `max` remain, passing over those in use (held or
    /// waited on: their clones live outside the map); those stay, as the most recent.
    fn trim_locked(locks: &mut LruCache<String, TaskLock>, max: usize) {
        let mut passed = 0;
        while locks.len() > max && passed < locks.len() {
            let Some((root, lock)) = locks.pop_lru() else {
                break;
            };
            if Arc::strong_count(&lock) > 1 || lock.try_lock().is_err() {
                locks.put(root, lock);
                passed += 1;
            }
        }
    }

    /// Drop the in-memory copy of a deleted task. The lock stays when other requests wait on it:
    /// it holds no state and they reload from the store, so a task never has two locks.
    pub fn forget(&self, root: &str, lock: &TaskLock) {
        let mut locks = self.locks.lock().expect("task locks");
        // Ours and the map's: nobody else can be waiting.
        if Arc::strong_count(lock) <= 2 {
            locks.pop(root);
        }
        drop(locks);
        let mut roots = self.roots.lock().expect("roots lock");
        let stale: Vec<String> = roots
            .iter()
            .filter(|(_, r)| *r == root)
            .map(|(t, _)| t.clone())
            .collect();
        for t in stale {
            roots.pop(&t);
        }
    }

    /// Keep at most `max` task states in memory; tasks in use are never dropped. (Taking a
    /// lock keeps the bound already; this catches up after tasks that were in use.)
    pub fn trim(&self, max: usize) {
        let mut locks = self.locks.lock().expect("task locks");
        Self::trim_locked(&mut locks, max.max(1));
    }

    pub fn cached(&self) -> usize {
        self.locks.lock().expect("task locks").len()
    }
}

impl Engine {
    /// The root task of `task` (itself when it has no known parent).
    pub async fn root_of(&self, task: &str) -> Result<String, StoreError> {
        self.tasks.root_of(&*self.store, task).await
    }

    /// Reset a task's loop counter from outside (the reset endpoint), with an audit record.
    pub async fn reset(
        &self,
        task_id: &str,
        reason: ResetReason,
        by: &str,
        note: Option<String>,
    ) -> Result<TaskState, EngineError> {
        let root = self.root_of(task_id).await?;
        let lock = self.tasks.lock(&root);
        let mut guard = lock.lock_owned().await;
        let opened = self.store.begin(&root, guard.take()).await?;
        let Some(current) = opened.state else {
            return Err(EngineError::NotFound(task_id.to_string()));
        };
        let mut next = current.clone();
        let now = now_unix();
        let record = AuditRecord {
            ts: now,
            client_ts: None,
            seq: next.next_seq.saturating_sub(1),
            task_id: task_id.to_string(),
            agent_id: None,
            event: AuditEvent::CounterReset {
                previous_count: next.loop_count,
                reason: reason.as_str().to_string(),
                by: by.to_string(),
                note: note.clone(),
            },
        };
        self.resolve_loops(&root, reason.as_str(), note, now).await;
        next.reset();
        next.updated_ts = now;
        let audit = [record];
        self.commit(guard, opened.txn, current.version, next, &audit, None)
            .await?;
        self.snapshot(task_id)
            .await?
            .ok_or_else(|| EngineError::NotFound(task_id.to_string()))
    }

    /// The current state of a task (its root's state), if it exists.
    pub async fn snapshot(&self, task_id: &str) -> Result<Option<TaskState>, EngineError> {
        let root = self.root_of(task_id).await?;
        if self.store.shared() {
            // Another replica may have applied events since this one's copy.
            return Ok(self.store.load(&root).await?);
        }
        let lock = self.tasks.lock(&root);
        let guard = lock.lock().await;
        if let Some(s) = guard.as_ref() {
            return Ok(Some(s.clone()));
        }
        drop(guard);
        Ok(self.store.load(&root).await?)
    }

    /// The audit trail of a task's root.
    pub async fn history(
        &self,
        task_id: &str,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, EngineError> {
        let root = self.root_of(task_id).await?;
        Ok(self.store.history(&root, limit).await?)
    }

    /// Delete a task (its root) entirely.
    pub async fn delete(&self, task_id: &str) -> Result<bool, EngineError> {
        let root = self.root_of(task_id).await?;
        let lock = self.tasks.lock(&root);
        let mut guard = lock.lock().await;
        let cached = guard.take();
        let had_cached = cached.is_some();
        let opened = self.store.begin(&root, cached).await?;
        let had = opened.txn.delete().await? | had_cached;
        self.tasks.forget(&root, &lock);
        drop(guard);
        if let Some(mem) = &self.loop_memory {
            mem.forget_task(&root).await?;
        }
        Ok(had)
    }

    /// Delete root tasks idle for longer than `ttl_secs` (task states inactive for a day are
    /// garbage, by default). Returns the roots deleted.
    pub async fn expire_idle(&self, ttl_secs: u64, now: i64) -> Result<Vec<String>, EngineError> {
        let before = now.saturating_sub(ttl_secs as i64);
        let mut expired = Vec::new();
        for root in self.store.idle_roots(before).await? {
            let lock = self.tasks.lock(&root);
            let mut guard = lock.lock().await;
            // An event may have arrived since the scan: check again under the task's lock.
            let opened = self.store.begin(&root, guard.take()).await?;
            if opened.state.as_ref().is_none_or(|s| s.updated_ts >= before) {
                *guard = opened.state;
                continue;
            }
            opened.txn.delete().await?;
            drop(guard);
            tracing::info!(event = "task_expired", task_id = %root, ttl_secs);
            expired.push(root.clone());
        }
        Ok(expired)
    }

    /// Keep at most `max` task states in memory; the rest are reloaded from the store when their
    /// next event comes. Tasks in use are never dropped.
    pub fn trim_cache(&self, max: usize) {
        self.tasks.trim(max);
    }

    /// Task states held in memory.
    pub fn cached_tasks(&self) -> usize {
        self.tasks.cached()
    }
}
