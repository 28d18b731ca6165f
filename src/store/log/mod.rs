//! The embedded store: an append-only task log with snapshots.
//!
//! Each commit appends one small record, the event's effect (the [`StateDelta`] from the task's
//! previous state, its audit records, the subtask link), instead of rewriting the task's whole
//! state. One writer thread group-commits: it writes everything appended since its last write
//! and syncs once, and every commit in that batch is then durable. Verdicts wait for that.
//!
//! Disk stays bounded: when the current segment reaches `segment_bytes`, the writer starts a new
//! one and a snapshot of every task (as of the end of the old segments) is written beside it;
//! once the snapshot is in place the old segments and snapshots are deleted. Recovery loads the
//! newest snapshot and replays the segments after it; a record cut short by a crash at the end
//! of the last segment was never acknowledged and is cut off.
//!
//! The store holds every task's state in memory (the log is how it survives a restart), so
//! reads never touch the disk; its memory is about one state (≤ ~10 KB) per live task, plus
//! the audit records kept per task (`audit_kept`).

mod delta;
mod files;

pub use delta::StateDelta;

use super::{ready, Durable, Opened, Store, StoreError, StoreFuture, TaskTxn};
use crate::audit::AuditRecord;
use crate::state::TaskState;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// How the task log sizes its files and what it keeps.
#[derive(Debug, Clone, Copy)]
pub struct LogOptions {
    /// A segment this large is closed, a snapshot written and the older segments deleted: the
    /// disk holds at most about one snapshot and two segments.
    pub segment_bytes: u64,
    /// Audit records kept per task (the newest): what `history` can return.
    pub audit_kept: usize,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: 32 << 20,
            audit_kept: 1000,
        }
    }
}

/// One record of a segment or a snapshot.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Record {
    /// One commit of a task: its whole state when the task is new to the log, else the change
    /// from the state at version `base`.
    Commit {
        root: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        base: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        full: Option<Box<TaskState>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delta: Option<Box<StateDelta>>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        audit: Vec<AuditRecord>,
        /// A subtask linked to its root task: (subtask, root).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        link: Option<(String, String)>,
    },
    /// A task forgotten: state, audit trail, its subtasks' links.
    Delete { root: String },
    /// In a snapshot: one task as it stood.
    Task {
        state: Box<TaskState>,
        audit: VecDeque<AuditRecord>,
        subtasks: Vec<String>,
    },
    /// The last record of a complete snapshot.
    End { tasks: u64 },
}

/// The records as written, borrowing what they carry (the commit path clones nothing for them).
#[derive(Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum RecordRef<'a> {
    Commit {
        root: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        base: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        full: Option<&'a TaskState>,
        #[serde(skip_serializing_if = "Option::is_none")]
        delta: Option<&'a StateDelta>,
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        audit: &'a [AuditRecord],
        #[serde(skip_serializing_if = "Option::is_none")]
        link: Option<(&'a str, &'a str)>,
    },
    Task {
        state: &'a TaskState,
        audit: &'a VecDeque<AuditRecord>,
        subtasks: &'a [String],
    },
}

/// One task held in memory. Shared pieces (`Arc`) let a snapshot take the tasks as they are
/// without copying them; a commit after that replaces or copies what it changes.
#[derive(Clone)]
struct Task {
    state: Arc<TaskState>,
    audit: Arc<VecDeque<AuditRecord>>,
    subtasks: Vec<String>,
}

impl Task {
    /// Add a commit's audit records; the oldest beyond `kept` go.
    fn keep_audit(&mut self, audit: &[AuditRecord], kept: usize) {
        if !audit.is_empty() {
            let trail = Arc::make_mut(&mut self.audit);
            trail.extend(audit.iter().cloned());
            let over = trail.len().saturating_sub(kept);
            trail.drain(..over);
        }
    }
}

#[derive(Default)]
struct Tasks {
    tasks: HashMap<String, Task>,
    /// Subtask → its root task.
    links: HashMap<String, String>,
}

impl Tasks {
    fn commit_state(&mut self, state: Arc<TaskState>, audit: &[AuditRecord], kept: usize) {
        let task = self
            .tasks
            .entry(state.root.clone())
            .or_insert_with(|| Task {
                state: Arc::clone(&state),
                audit: Arc::default(),
                subtasks: Vec::new(),
            });
        task.state = state;
        task.keep_audit(audit, kept);
    }

    fn link(&mut self, task: &str, root: &str) {
        self.links.insert(task.to_string(), root.to_string());
        if let Some(t) = self.tasks.get_mut(root) {
            if !t.subtasks.iter().any(|s| s == task) {
                t.subtasks.push(task.to_string());
            }
        }
    }

    fn delete(&mut self, root: &str) -> bool {
        let Some(task) = self.tasks.remove(root) else {
            return false;
        };
        for sub in &task.subtasks {
            if self.links.get(sub).is_some_and(|r| r == root) {
                self.links.remove(sub);
            }
        }
        true
    }

    /// Apply a record read back from the log.
    fn replay(&mut self, record: Record, kept: usize) -> Result<(), String> {
        match record {
            Record::Commit {
                root,
                base,
                full,
                delta,
                audit,
                link,
            } => {
                let state = match (full, delta) {
                    (Some(full), _) => *full,
                    (None, Some(delta)) => {
                        let current = self.tasks.get(&root).ok_or_else(|| {
                            format!("a change to task {root}, which has no state")
                        })?;
                        if Some(current.state.version) != base {
                            return Err(format!(
                                "a change to version {base:?} of task {root}, which is at version {}",
                                current.state.version
                            ));
                        }
                        let mut state = (*current.state).clone();
                        delta.apply(&mut state)?;
                        state
                    }
                    (None, None) => return Err(format!("a commit of task {root} with no state")),
                };
                self.commit_state(Arc::new(state), &audit, kept);
                if let Some((task, root)) = link {
                    self.link(&task, &root);
                }
            }
            Record::Delete { root } => {
                self.delete(&root);
            }
            Record::Task {
                state,
                audit,
                subtasks,
            } => {
                let root = state.root.clone();
                for sub in &subtasks {
                    self.links.insert(sub.clone(), root.clone());
                }
                self.tasks.insert(
                    root,
                    Task {
                        state: Arc::from(state),
                        audit: Arc::new(audit),
                        subtasks,
                    },
                );
            }
            Record::End { .. } => return Err("a snapshot's end inside a segment".into()),
        }
        Ok(())
    }
}

/// What the committers and the writer thread share.
struct Inner {
    tasks: Tasks,
    /// Framed records appended since the writer last took them.
    pending: Vec<u8>,
    /// Commits appended so far; commit `n` is durable once the writer reports `n`.
    appended: u64,
    /// Why the log cannot take commits any more (a write or sync failed: what is on disk after
    /// the last good record is unknown until a restart cuts it off).
    failed: Option<String>,
    /// A snapshot is being written: no new one starts meanwhile.
    snapshotting: bool,
    /// The writer is asleep, waiting for commits: only then does a commit wake it (a wake-up
    /// is a system call; while the writer syncs, the commits made meanwhile are its next batch).
    writer_idle: bool,
    stop: bool,
}

#[derive(Clone, Copy, Debug)]
struct Done {
    generation: u64,
    failed: bool,
}

struct Shared {
    inner: Mutex<Inner>,
    wake: Condvar,
    dir: PathBuf,
    opts: LogOptions,
    snapshot_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    stats: Stats,
}

/// Counters since the store was opened, for the metrics endpoint and benchmarks.
#[derive(Default)]
pub struct Stats {
    pub bytes_appended: std::sync::atomic::AtomicU64,
    pub records_appended: std::sync::atomic::AtomicU64,
    pub syncs: std::sync::atomic::AtomicU64,
    pub snapshots: std::sync::atomic::AtomicU64,
}

pub struct LogStore {
    shared: Arc<Shared>,
    done: tokio::sync::watch::Receiver<Done>,
    writer: Option<std::thread::JoinHandle<()>>,
    /// The directory's lock (`flock`), held while the store is open: one process per log.
    _lock: File,
}

impl LogStore {
    /// Open (or create) the task log in `dir`, replaying what it holds.
    pub fn open(dir: &Path, opts: LogOptions) -> Result<LogStore, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| files::io_at(dir, e))?;
        let lock = lock_dir(dir)?;
        let listing = files::list(dir)?;
        for tmp in &listing.temporary {
            let _ = std::fs::remove_file(tmp);
        }
        let mut tasks = Tasks::default();
        // The newest snapshot; the segments before it are already in it.
        let base = match listing.snapshots.last() {
            Some(&n) => {
                load_snapshot(&files::snapshot_path(dir, n), &mut tasks, opts.audit_kept)?;
                n
            }
            None => listing.segments.first().copied().unwrap_or(0),
        };
        let segments: Vec<u64> = listing
            .segments
            .iter()
            .copied()
            .filter(|&n| n >= base)
            .collect();
        // Segments follow each other from the snapshot on (or from 0 with none): a missing one
        // would silently lose what it held.
        let first = if listing.snapshots.is_empty() {
            0
        } else {
            base
        };
        for (expected, &n) in (first..).zip(&segments) {
            if n != expected {
                return Err(StoreError::Corrupt {
                    task: files::segment_path(dir, expected).display().to_string(),
                    message: format!(
                        "missing: segment {n} follows {}",
                        if expected == first && listing.snapshots.is_empty() {
                            "no snapshot".to_string()
                        } else {
                            format!("segment {}", expected.saturating_sub(1))
                        }
                    ),
                });
            }
        }
        // The last segment's records: its next batch is compressed against them.
        let mut history = files::History::default();
        for (i, &n) in segments.iter().enumerate() {
            let path = files::segment_path(dir, n);
            let read = files::read_records(&path, |record, offset| {
                tasks
                    .replay(record, opts.audit_kept)
                    .map_err(|message| StoreError::Corrupt {
                        task: format!("{} at byte {offset}", path.display()),
                        message,
                    })
            })?;
            history = read.history;
            if let files::Tail::Torn { offset, why } = read.tail {
                if i + 1 < segments.len() {
                    return Err(StoreError::Corrupt {
                        task: format!("{} at byte {offset}", path.display()),
                        message: format!("{why}, and later segments follow it"),
                    });
                }
                tracing::warn!(
                    segment = %path.display(),
                    offset,
                    why,
                    "cutting off the end of the task log a crash left unfinished (never acknowledged)"
                );
                files::truncate(&path, offset)?;
            }
        }
        // Files the newest snapshot covers, left by a crash before they were deleted.
        remove_covered(dir, base, &listing);
        let current = segments.last().copied().unwrap_or(base);
        let seg_path = files::segment_path(dir, current);
        let file = files::open_segment(&seg_path)?;
        let seg_bytes = file
            .metadata()
            .map_err(|e| files::io_at(&seg_path, e))?
            .len();
        files::sync_dir(dir)?;

        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                tasks,
                pending: Vec::with_capacity(64 << 10),
                appended: 0,
                failed: None,
                snapshotting: false,
                writer_idle: false,
                stop: false,
            }),
            wake: Condvar::new(),
            dir: dir.to_path_buf(),
            opts,
            snapshot_thread: Mutex::new(None),
            stats: Stats::default(),
        });
        let (tx, rx) = tokio::sync::watch::channel(Done {
            generation: 0,
            failed: false,
        });
        let writer = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("loopguard-task-log".into())
                .spawn(move || {
                    Writer {
                        shared,
                        file,
                        segment: current,
                        seg_bytes,
                        history,
                        done: tx,
                    }
                    .run()
                })
                .map_err(|e| StoreError::Io(format!("starting the task log writer: {e}")))?
        };
        Ok(LogStore {
            shared,
            done: rx,
            writer: Some(writer),
            _lock: lock,
        })
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.shared.inner.lock().expect("task log lock")
    }

    /// Counters since the store was opened.
    pub fn stats(&self) -> &Stats {
        &self.shared.stats
    }

    /// Bytes the log's files take on disk now.
    pub fn size_on_disk(&self) -> u64 {
        std::fs::read_dir(&self.shared.dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok()?.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    }

    /// A future that resolves once commit `generation` (and every one before it) is durable.
    fn durable(&self, generation: u64) -> Durable {
        let mut done = self.done.clone();
        Box::pin(async move {
            let state = *done
                .wait_for(|d| d.generation >= generation || d.failed)
                .await
                .map_err(|_| StoreError::Io("the task log writer stopped".into()))?;
            if state.failed {
                return Err(StoreError::Io("writing the task log failed".into()));
            }
            Ok(())
        })
    }

    fn commit_now(
        &self,
        next: &TaskState,
        audit: &[AuditRecord],
        link: Option<(&str, &str)>,
    ) -> Result<Durable, StoreError> {
        let base = {
            let inner = self.inner();
            if let Some(why) = &inner.failed {
                return Err(StoreError::Io(why.clone()));
            }
            inner
                .tasks
                .tasks
                .get(&next.root)
                .map(|t| Arc::clone(&t.state))
        };
        // The change is computed and encoded outside the lock; the engine commits one task's
        // events one at a time, so the base is still current when the record is appended (it is
        // checked, and a whole state written if not).
        let mut buf = Vec::with_capacity(2048);
        let mut delta = encode_commit(&mut buf, base.as_deref(), next, audit, link)?;
        let (generation, wake) = {
            let mut inner = self.inner();
            if let Some(why) = &inner.failed {
                return Err(StoreError::Io(why.clone()));
            }
            let current = inner.tasks.tasks.get(&next.root).map(|t| &t.state);
            let still = match (current, &base) {
                (Some(c), Some(b)) => Arc::ptr_eq(c, b),
                (None, None) => true,
                _ => false,
            };
            if !still {
                buf.clear();
                delta = encode_commit(&mut buf, None, next, audit, link)?;
            }
            // Only now is the base ours alone (unless a snapshot holds it): the change is applied
            // to it in place, no copy of the whole state per event.
            drop(base);
            inner.pending.extend_from_slice(&buf);
            inner.appended += 1;
            let kept = self.shared.opts.audit_kept;
            match (delta, inner.tasks.tasks.get_mut(&next.root)) {
                (Some(delta), Some(task)) => {
                    let copy = Arc::make_mut(&mut task.state);
                    if let Err(e) = delta.apply(copy) {
                        // The record says what `next` is; a change that does not apply to
                        // the copy it was taken from is a bug, and the copy is replaced.
                        tracing::error!(error = %e, task = %next.root, "task log: a change did not apply to its own base");
                        *copy = next.clone();
                    }
                    copy.forget_vectors();
                    debug_assert!(
                        *copy == *next,
                        "the change applied to its base gives `next`"
                    );
                    task.keep_audit(audit, kept);
                }
                _ => {
                    let mut copy = next.clone();
                    copy.forget_vectors();
                    inner.tasks.commit_state(Arc::new(copy), audit, kept);
                }
            }
            if let Some((task, root)) = link {
                inner.tasks.link(task, root);
            }
            (inner.appended, std::mem::take(&mut inner.writer_idle))
        };
        if wake {
            self.shared.wake.notify_one();
        }
        Ok(self.durable(generation))
    }

    /// Take a task kept by the old embedded store (sled) as it stood: its state, audit trail
    /// and subtasks. A task the log already has is left as the log has it (a start that
    /// crashed halfway through moving them is finished, not repeated). Durable when it returns.
    pub async fn import(
        &self,
        state: &TaskState,
        audit: &[AuditRecord],
        subtasks: &[String],
    ) -> Result<bool, StoreError> {
        if self.inner().tasks.tasks.contains_key(&state.root) {
            return Ok(false);
        }
        let kept = &audit[audit.len().saturating_sub(self.shared.opts.audit_kept)..];
        let mut durable = self.commit_now(state, kept, None)?;
        for sub in subtasks {
            durable = self.commit_now(state, &[], Some((sub, &state.root)))?;
        }
        durable.await?;
        Ok(true)
    }

    fn delete_now(&self, root: &str) -> Result<(bool, Durable), StoreError> {
        let mut buf = Vec::new();
        files::frame(
            &mut buf,
            &Record::Delete {
                root: root.to_string(),
            },
        )?;
        let (had, generation) = {
            let mut inner = self.inner();
            if let Some(why) = &inner.failed {
                return Err(StoreError::Io(why.clone()));
            }
            let had = inner.tasks.delete(root);
            if had {
                inner.pending.extend_from_slice(&buf);
                inner.appended += 1;
                inner.writer_idle = false;
            }
            (had, inner.appended)
        };
        self.shared.wake.notify_one();
        Ok((had, self.durable(generation)))
    }
}

/// Append the record of one commit to `buf`: the change from `base`, or the whole state.
/// Returns the change, to be applied to the store's own copy.
fn encode_commit(
    buf: &mut Vec<u8>,
    base: Option<&TaskState>,
    next: &TaskState,
    audit: &[AuditRecord],
    link: Option<(&str, &str)>,
) -> Result<Option<StateDelta>, StoreError> {
    let delta = base.map(|b| StateDelta::between(b, next));
    files::frame(
        buf,
        &RecordRef::Commit {
            root: &next.root,
            base: base.map(|b| b.version),
            full: if delta.is_some() { None } else { Some(next) },
            delta: delta.as_ref(),
            audit,
            link,
        },
    )?;
    Ok(delta)
}

impl Drop for LogStore {
    /// Write what is pending, stop the writer and wait for a snapshot in progress, so the
    /// directory is released complete (a store reopened in this process finds it as left).
    fn drop(&mut self) {
        self.inner().stop = true;
        self.shared.wake.notify_all();
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
        let snapshot = self
            .shared
            .snapshot_thread
            .lock()
            .expect("task log lock")
            .take();
        if let Some(t) = snapshot {
            let _ = t.join();
        }
    }
}

/// The writer thread: group commit, segment rotation, snapshots.
struct Writer {
    shared: Arc<Shared>,
    file: File,
    segment: u64,
    seg_bytes: u64,
    /// The current segment's records so far: what its next batch is compressed against.
    history: files::History,
    done: tokio::sync::watch::Sender<Done>,
}

/// Tasks taken for a snapshot, as they stood at the end of a segment.
type View = Vec<Task>;

impl Writer {
    fn run(mut self) {
        use std::sync::atomic::Ordering::Relaxed;
        let mut spare = Vec::with_capacity(64 << 10);
        let mut out = Vec::with_capacity(64 << 10);
        loop {
            let (batch, generation, view) = {
                let mut inner = self.shared.inner.lock().expect("task log lock");
                while inner.pending.is_empty() && !inner.stop {
                    inner.writer_idle = true;
                    inner = self.shared.wake.wait(inner).expect("task log lock");
                }
                inner.writer_idle = false;
                if inner.pending.is_empty() {
                    return;
                }
                let batch = std::mem::replace(&mut inner.pending, std::mem::take(&mut spare));
                let rotate = self.seg_bytes >= self.shared.opts.segment_bytes
                    && !inner.snapshotting
                    && !inner.stop;
                let view: Option<View> = rotate.then(|| {
                    inner.snapshotting = true;
                    inner.tasks.tasks.values().cloned().collect()
                });
                (batch, inner.appended, view)
            };
            out.clear();
            if let Err(e) = files::encode_batch(&mut self.history, &batch, &mut out) {
                self.fail(e.to_string(), generation);
                return;
            }
            let written = self
                .file
                .write_all(&out)
                .and_then(|()| self.file.sync_data());
            let stats = &self.shared.stats;
            stats.syncs.fetch_add(1, Relaxed);
            if let Err(e) = written {
                self.fail(format!("writing the task log: {e}"), generation);
                return;
            }
            stats.bytes_appended.fetch_add(out.len() as u64, Relaxed);
            stats.records_appended.store(generation, Relaxed);
            self.seg_bytes += out.len() as u64;
            let _ = self.done.send(Done {
                generation,
                failed: false,
            });
            spare = batch;
            spare.clear();
            if let Some(view) = view {
                if let Err(e) = self.rotate(view) {
                    self.fail(format!("starting a task log segment: {e}"), generation);
                    return;
                }
            }
        }
    }

    fn fail(&self, why: String, generation: u64) {
        tracing::error!(error = %why, "the task log cannot take commits until a restart");
        let mut inner = self.shared.inner.lock().expect("task log lock");
        inner.failed = Some(why);
        let _ = self.done.send(Done {
            generation,
            failed: true,
        });
    }

    /// Start segment N+1; write the snapshot of everything before it on its own thread.
    fn rotate(&mut self, view: View) -> Result<(), StoreError> {
        let next = self.segment + 1;
        let dir = self.shared.dir.clone();
        self.file = files::open_segment(&files::segment_path(&dir, next))?;
        files::sync_dir(&dir)?;
        self.segment = next;
        self.seg_bytes = 0;
        self.history = files::History::default();
        let shared = Arc::clone(&self.shared);
        let thread = std::thread::Builder::new()
            .name("loopguard-snapshot".into())
            .spawn(move || {
                let written = write_snapshot(&shared.dir, next, &view);
                match written {
                    Ok(()) => {
                        shared
                            .stats
                            .snapshots
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if let Ok(listing) = files::list(&shared.dir) {
                            remove_covered(&shared.dir, next, &listing);
                        }
                    }
                    Err(e) => tracing::error!(
                        error = %e,
                        "writing a task log snapshot failed; the segments it would replace are kept"
                    ),
                }
                shared.inner.lock().expect("task log lock").snapshotting = false;
            })
            .map_err(|e| StoreError::Io(format!("starting a snapshot: {e}")))?;
        let previous = self
            .shared
            .snapshot_thread
            .lock()
            .expect("task log lock")
            .replace(thread);
        if let Some(t) = previous {
            let _ = t.join();
        }
        Ok(())
    }
}

fn write_snapshot(dir: &Path, n: u64, view: &View) -> Result<(), StoreError> {
    files::write_atomically(dir, &files::snapshot_path(dir, n), |w| {
        let mut history = files::History::default();
        let mut records = Vec::with_capacity(512 << 10);
        let mut out = Vec::with_capacity(256 << 10);
        let mut flush = |records: &mut Vec<u8>| -> Result<(), StoreError> {
            out.clear();
            files::encode_batch(&mut history, records, &mut out)?;
            records.clear();
            w.write_all(&out)
                .map_err(|e| StoreError::Io(format!("writing a snapshot: {e}")))
        };
        for task in view {
            files::frame(
                &mut records,
                &RecordRef::Task {
                    state: &task.state,
                    audit: &task.audit,
                    subtasks: &task.subtasks,
                },
            )?;
            if records.len() >= 256 << 10 {
                flush(&mut records)?;
            }
        }
        files::frame(
            &mut records,
            &Record::End {
                tasks: view.len() as u64,
            },
        )?;
        flush(&mut records)
    })
}

fn load_snapshot(path: &Path, tasks: &mut Tasks, kept: usize) -> Result<(), StoreError> {
    let corrupt = |message: String| StoreError::Corrupt {
        task: path.display().to_string(),
        message,
    };
    let mut count = 0u64;
    let mut ended = None;
    let read = files::read_records(path, |record, offset| {
        if ended.is_some() {
            return Err(corrupt(format!("a record after the end, at byte {offset}")));
        }
        match record {
            Record::End { tasks } => ended = Some(tasks),
            Record::Task { .. } => {
                count += 1;
                tasks.replay(record, kept).map_err(corrupt)?;
            }
            _ => {
                return Err(corrupt(format!(
                    "a log record in a snapshot, at byte {offset}"
                )))
            }
        }
        Ok(())
    })?;
    if let files::Tail::Torn { offset, why } = read.tail {
        // Snapshots are renamed into place only once complete: this is damage, not a crash.
        return Err(corrupt(format!("{why} at byte {offset}")));
    }
    match ended {
        Some(n) if n == count => Ok(()),
        Some(n) => Err(corrupt(format!("{count} tasks where its end says {n}"))),
        None => Err(corrupt("no end record".into())),
    }
}

/// Delete the segments and snapshots older than snapshot `n` (which holds all they did).
fn remove_covered(dir: &Path, n: u64, listing: &files::Listing) {
    let old_segments = listing
        .segments
        .iter()
        .filter(|&&s| s < n)
        .map(|&s| files::segment_path(dir, s));
    let old_snapshots = listing
        .snapshots
        .iter()
        .filter(|&&s| s < n)
        .map(|&s| files::snapshot_path(dir, s));
    let mut removed = false;
    for path in old_segments.chain(old_snapshots) {
        match std::fs::remove_file(&path) {
            Ok(()) => removed = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "cannot delete an old task log file")
            }
        }
    }
    if removed {
        let _ = files::sync_dir(dir);
    }
}

/// Take the directory's lock, or say who holds it.
fn lock_dir(dir: &Path) -> Result<File, StoreError> {
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
struct LogTxn<'s> {
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
        // The change is taken against the log's own copy of the state, not `prev`: the record
        // must apply to what recovery will have rebuilt.
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
        let state = cached.or_else(|| {
            self.inner()
                .tasks
                .tasks
                .get(root)
                .map(|t| (*t.state).clone())
        });
        ready(Ok(Opened {
            state,
            txn: Box::new(LogTxn { store: self, root }),
        }))
    }

    fn load<'a>(&'a self, root: &'a str) -> StoreFuture<'a, Option<TaskState>> {
        ready(Ok(self
            .inner()
            .tasks
            .tasks
            .get(root)
            .map(|t| (*t.state).clone())))
    }

    fn root_of<'a>(&'a self, task: &'a str) -> StoreFuture<'a, Option<String>> {
        ready(Ok(self.inner().tasks.links.get(task).cloned()))
    }

    fn history<'a>(&'a self, root: &'a str, limit: usize) -> StoreFuture<'a, Vec<AuditRecord>> {
        let inner = self.inner();
        let out = inner.tasks.tasks.get(root).map_or_else(Vec::new, |t| {
            t.audit
                .iter()
                .skip(t.audit.len().saturating_sub(limit))
                .cloned()
                .collect()
        });
        ready(Ok(out))
    }

    fn idle_roots(&self, before_ts: i64) -> StoreFuture<'_, Vec<String>> {
        let inner = self.inner();
        let states = inner.tasks.tasks.values().map(|t| &*t.state);
        ready(Ok(super::idle_of(states, before_ts)))
    }

    fn task_count(&self) -> StoreFuture<'_, usize> {
        ready(Ok(self.inner().tasks.tasks.len()))
    }

    fn recent_roots(&self, limit: usize) -> StoreFuture<'_, (usize, Vec<(String, i64)>)> {
        let inner = self.inner();
        let states = inner.tasks.tasks.values().map(|t| &*t.state);
        ready(Ok(super::recent_of(states, limit)))
    }

    fn flush(&self) -> StoreFuture<'_> {
        let generation = self.inner().appended;
        self.durable(generation)
    }

    fn unready(&self) -> Option<String> {
        self.inner().failed.clone()
    }

    fn log_stats(&self) -> Option<super::LogStats> {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.shared.stats;
        Some(super::LogStats {
            bytes_appended: s.bytes_appended.load(Relaxed),
            records_appended: s.records_appended.load(Relaxed),
            syncs: s.syncs.load(Relaxed),
            snapshots: s.snapshots.load(Relaxed),
            bytes_on_disk: self.size_on_disk(),
        })
    }
}

#[cfg(test)]
mod tests;
