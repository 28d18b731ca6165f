//! The [`Store`] interface over the task log: one process per directory, and a task's
//! transaction as the engine sees it.

use super::*;

/// Take the directory's lock, or say who holds it.
pub(crate) fn lock_dir(dir: &Path) -> Result<File, StoreError> {
    use std::os::fd::AsRawFd;
    let path = dir.join("LOCK");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| files::io_at(&path, e))?;
    // SAFETY: flock on a file descriptor this function owns; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(StoreError::Io(format!(
            "{} is locked: is another loopguard using this data dir? (one process per directory)",
            dir.display()
        )));
    }
    Ok(file)
}

/// An open task of the log store.
pub(super) struct LogTxn<'s> {
    store: &'s LogStore,
    root: &'s str,
}

impl TaskTxn for LogTxn<'_> {
    fn commit<'a>(
        self: Box<Self>,
        next: &'a TaskState,
        audit: &'a [AuditRecord],
        link: Option<(&'a str, &'a str)>,
    ) -> StoreFuture<'a, Durable> {
        ready(self.store.commit_now(next, audit, link))
    }

    fn delete<'a>(self: Box<Self>) -> StoreFuture<'a, bool> {
        let deleted = self.store.delete_now(self.root);
        Box::pin(async move {
            let (had, durable) = deleted?;
            durable.await?;
            Ok(had)
        })
    }
}

impl Store for LogStore {
    fn begin<'a>(
        &'a self,
        root: &'a str,
        cached: Option<TaskState>,
    ) -> StoreFuture<'a, Opened<'a>> {
        let known = self.inner().index.entries.get(root).map(|e| e.version);
        // The engine's copy is used while it is the stored version; the store's own copy (the
        // base of the commit's change) is read back now if it left memory.
        let state = match (cached, known) {
            (_, None) => Ok(None),
            (Some(c), Some(v)) if c.version == v => self.task(root, true).map(|_| Some(c)),
            _ => self.task(root, true).map(|t| t.map(|t| (*t.state).clone())),
        };
        ready(state.map(|state| Opened {
            state,
            txn: Box::new(LogTxn { store: self, root }),
        }))
    }

    fn load<'a>(&'a self, root: &'a str) -> StoreFuture<'a, Option<TaskState>> {
        ready(
            self.task(root, false)
                .map(|t| t.map(|t| (*t.state).clone())),
        )
    }

    fn root_of<'a>(&'a self, task: &'a str) -> StoreFuture<'a, Option<String>> {
        ready(Ok(self
            .inner()
            .index
            .links
            .get(task)
            .map(|r| r.to_string())))
    }

    fn history<'a>(&'a self, root: &'a str, limit: usize) -> StoreFuture<'a, Vec<AuditRecord>> {
        ready(self.task(root, false).map(|t| {
            t.map_or_else(Vec::new, |t| {
                t.audit
                    .iter()
                    .skip(t.audit.len().saturating_sub(limit))
                    .cloned()
                    .collect()
            })
        }))
    }

    fn idle_roots(&self, before_ts: i64) -> StoreFuture<'_, Vec<String>> {
        let inner = self.inner();
        ready(Ok(inner
            .index
            .entries
            .iter()
            .filter(|(_, e)| e.updated_ts < before_ts)
            .map(|(r, _)| r.to_string())
            .collect()))
    }

    fn task_count(&self) -> StoreFuture<'_, usize> {
        ready(Ok(self.inner().index.entries.len()))
    }

    fn recent_roots(&self, limit: usize) -> StoreFuture<'_, (usize, Vec<(String, i64)>)> {
        let inner = self.inner();
        let mut top = crate::store::Newest::new(limit);
        for (root, e) in &inner.index.entries {
            top.offer(e.updated_ts, || root.to_string());
        }
        ready(Ok((inner.index.entries.len(), top.into_sorted())))
    }

    fn subtask_count<'a>(&'a self, root: &'a str) -> StoreFuture<'a, usize> {
        ready(Ok(self.inner().index.subtask_count(root)))
    }

    fn flush(&self) -> StoreFuture<'_> {
        let generation = self.inner().appended;
        self.durable(generation)
    }

    fn close(&self) {
        LogStore::close(self);
    }

    fn unready(&self) -> Option<String> {
        let inner = self.inner();
        inner.failed.clone().or_else(|| inner.stalled.clone())
    }

    fn fatal(&self) -> Option<String> {
        self.inner().failed.clone()
    }

    fn log_stats(&self) -> Option<crate::store::LogStats> {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.shared.stats;
        Some(crate::store::LogStats {
            bytes_appended: s.bytes_appended.load(Relaxed),
            records_appended: s.records_appended.load(Relaxed),
            syncs: s.syncs.load(Relaxed),
            snapshots: s.snapshots.load(Relaxed),
            bytes_on_disk: self.size_on_disk(),
        })
    }
}
