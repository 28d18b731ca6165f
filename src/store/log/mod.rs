//! The embedded store: an append-only task log with snapshots.
//!
//! Each commit appends one small record, the event's effect (the [`StateDelta`] from the task's
//! previous state, its audit records, the subtask link), instead of rewriting the task's whole
//! state. One writer thread group-commits: it writes everything appended since its last write
//! and syncs once, and every commit in that batch is then durable. Verdicts wait for that.
//!
//! Disk stays bounded: when the current segment reaches `segment_bytes` (or when most of what
//! the segments hold belongs to tasks deleted since), the writer starts a new one and a snapshot
//! of every task (as of the end of the old segments) is written beside it; once the snapshot is
//! in place the old segments and snapshots are deleted. Recovery loads the newest snapshot and
//! replays the segments after it.
//!
//! Memory stays bounded too (`index.rs`): the store keeps a small entry per task and the states
//! of at most `cached_tasks` of them; the others are read back from the snapshot, or from the
//! spill file a state is written to when it leaves the cache, when their task returns.
//!
//! Damage is refused, never "repaired" by dropping acknowledged records. Only a crash can leave a
//! batch cut short, and only at the end of the last segment: such a tail, with nothing valid
//! after it, is cut off (it was never acknowledged). A bad batch followed by valid ones, anything
//! missing from a log that was closed cleanly (`CLOSED`), or a damaged snapshot stops the start,
//! naming the file and the byte; `loopguard store verify` and `loopguard store salvage` (see
//! [`examine`]) tell what is affected and keep every intact record. What would read as a
//! shorter, sound log is refused too: the manifest (`MANIFEST`, at each start and rotation)
//! says which segments must exist and how long the closed ones are, and each segment's note
//! (`seg-N.note`, a line per synced batch) how far its acknowledged batches reach and which
//! version each task reached — so a segment deleted, or cut where a batch ends, after a crash
//! is refused with the acknowledged events it held, and `store verify` counts them task by
//! task. A directory without them (an older version's) opens as before and gets them.
//!
//! A full disk does not need a restart: the writer cuts the failed write back off and retries it
//! with backoff; meanwhile new commits are refused at once (`StoreError::Full`), reads work, and
//! once space is back the held batch is written and commits resume. Any other write or sync
//! failure leaves what is on disk unknown: the store stops taking commits and says so
//! ([`Store::fatal`]) so that the process is restarted.

mod delta;
pub mod examine;
mod files;
mod index;
mod recover;
mod store;
mod writer;

pub use delta::StateDelta;

use super::{ready, Durable, Opened, Store, StoreError, StoreFuture, TaskTxn};
use crate::audit::AuditRecord;
use crate::state::TaskState;
use files::Layout;
use index::{Index, Loc, Lookup, PageWriter, Task};
use recover::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
pub(crate) use store::lock_dir;
use writer::*;

/// How the task log sizes its files and what it keeps.
#[derive(Debug, Clone, Copy)]
pub struct LogOptions {
    /// A segment this large is closed, a snapshot written and the older segments deleted: the
    /// disk holds at most about one snapshot and two segments.
    pub segment_bytes: u64,
    /// Audit records kept per task (the newest): what `history` can return.
    pub audit_kept: usize,
    /// Task states held in memory; the others are read back from disk when needed.
    pub cached_tasks: usize,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: 32 << 20,
            audit_kept: 1000,
            cached_tasks: 10_000,
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
    /// In a snapshot: what recovery keeps in memory of the task whose record follows.
    Head {
        root: String,
        version: u64,
        updated_ts: i64,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        subtasks: Vec<String>,
    },
    /// In a snapshot or the spill file: one task as it stood (in a snapshot of the first
    /// format, with its subtasks; since, they are in its head).
    Task {
        state: Box<TaskState>,
        #[serde(default)]
        audit: VecDeque<AuditRecord>,
        #[serde(default)]
        subtasks: Vec<String>,
    },
    /// The last record of a complete snapshot.
    End { tasks: u64 },
}

/// What a commit record does to its task, by the rule recovery and the examining tools
/// (`store verify`, `store salvage`) share: a whole state replaces whatever came before it; a
/// change applies to the version it was made from, which the task must be at.
pub(crate) enum CommitStep {
    Whole(Box<TaskState>),
    Change(Box<StateDelta>),
}

/// Why a commit record does not apply to its task as the log has it.
pub(crate) enum Refusal {
    /// A change to a task with no state.
    NoState,
    /// A change made from version `base` of a task at version `at`.
    OtherVersion { base: Option<u64>, at: u64 },
    /// Neither a state nor a change.
    Empty,
}

/// The step a commit makes from the task's `current` version (`None`: no state).
pub(crate) fn commit_step(
    current: Option<u64>,
    base: Option<u64>,
    full: Option<Box<TaskState>>,
    delta: Option<Box<StateDelta>>,
) -> Result<CommitStep, Refusal> {
    match (full, delta, current) {
        (Some(full), _, _) => Ok(CommitStep::Whole(full)),
        (None, Some(_), None) => Err(Refusal::NoState),
        (None, Some(delta), Some(at)) => {
            if Some(at) == base {
                Ok(CommitStep::Change(delta))
            } else {
                Err(Refusal::OtherVersion { base, at })
            }
        }
        (None, None, _) => Err(Refusal::Empty),
    }
}

impl Record {
    /// The task a segment's record is about and the version it brings it to (`None`: it is
    /// deleted), as the segment's note records it; `None` for a snapshot's records.
    fn noted(&self) -> Option<(String, Option<u64>)> {
        match self {
            Record::Commit {
                root, base, full, ..
            } => Some((
                root.clone(),
                Some(
                    full.as_ref()
                        .map_or(base.map_or(0, |b| b + 1), |f| f.version),
                ),
            )),
            Record::Delete { root } => Some((root.clone(), None)),
            Record::Head { .. } | Record::Task { .. } | Record::End { .. } => None,
        }
    }
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
    Head {
        root: &'a str,
        version: u64,
        updated_ts: i64,
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        subtasks: &'a [Arc<str>],
    },
    Task {
        state: &'a TaskState,
        audit: &'a VecDeque<AuditRecord>,
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        subtasks: &'a [String],
    },
}

/// What the committers and the writer thread share.
struct Inner {
    index: Index,
    /// Framed records appended since the writer last took them.
    pending: Vec<u8>,
    /// Each of those records' task and the version it brings it to (`None`: deleted), for
    /// the segment's note.
    pending_notes: Vec<(String, Option<u64>)>,
    /// Commits appended so far; commit `n` is durable once the writer reports `n`.
    appended: u64,
    /// Why the log cannot take commits any more: a write or sync failed other than for want of
    /// space, so what is on disk after the last good batch is unknown until a restart.
    failed: Option<String>,
    /// Why commits are refused for now: the disk is full. The writer retries the batch it holds
    /// and clears this once it is written.
    stalled: Option<String>,
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
    /// Task states written to the spill file when they left the cache.
    pub spilled: std::sync::atomic::AtomicU64,
    /// Writes retried because the disk was full.
    pub full_disk_retries: std::sync::atomic::AtomicU64,
}

pub struct LogStore {
    shared: Arc<Shared>,
    done: tokio::sync::watch::Receiver<Done>,
    writer: Mutex<Option<std::thread::JoinHandle<Option<u64>>>>,
    /// The directory's lock (`flock`), held while the store is open: one process per log.
    _lock: File,
}

/// Is this the error of a full disk (or quota)? Those pass once space is freed.
fn no_space(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
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
        let closed = files::read_closed(dir)?;
        // Which segments must exist, and how long the closed ones are (none in a directory
        // written before it was kept: then only the files themselves are checked).
        let manifest = files::read_manifest(dir)?;
        let cached = opts.cached_tasks.max(1);
        let mut index = Index::new(opts.audit_kept);
        let mut spill = Spill::create(dir, &mut index)?;
        // The newest snapshot; the segments before it are already in it.
        let chain = files::Chain::of(&listing);
        if let Some(n) = chain.snapshot {
            load_snapshot(dir, n, &mut index, &mut spill, cached)?;
        }
        let (base, segments) = (chain.base, chain.segments.clone());
        // Segments follow each other from the snapshot on (or from 0 with none): a missing one
        // would silently lose what it held.
        if let Some(&(expected, n)) = chain.gaps().first() {
            return Err(StoreError::Damaged {
                file: files::segment_path(dir, expected).display().to_string(),
                offset: 0,
                message: format!(
                    "missing: segment {n} follows {}",
                    if expected == chain.first && chain.snapshot.is_none() {
                        "no snapshot".to_string()
                    } else {
                        format!("segment {}", expected.saturating_sub(1))
                    }
                ),
            });
        }
        if let Some(m) = &manifest {
            check_manifest(dir, m, base, &segments)?;
        }
        if let Some(c) = closed {
            // Closed cleanly: the last segment is exactly as it was left.
            let last = segments.last().copied().unwrap_or(base);
            let path = files::segment_path(dir, c.segment);
            let size = std::fs::metadata(&path).map(|m| m.len()).ok();
            if last != c.segment || size != Some(c.bytes) {
                return Err(StoreError::Damaged {
                    file: path.display().to_string(),
                    offset: size.unwrap_or(0).min(c.bytes),
                    message: format!(
                        "the log was closed cleanly with this segment the last, {} bytes long; \
                         it is {}{}: something cut or changed it after the close",
                        c.bytes,
                        size.map_or("missing".to_string(), |s| format!("{s} bytes long")),
                        if last != c.segment {
                            format!(", and segment {last} is the last now")
                        } else {
                            String::new()
                        }
                    ),
                });
            }
        }
        for &n in &segments {
            check_note(dir, n)?;
        }
        // The last segment's records: its next batch is compressed against them.
        let mut history = files::History::default();
        // What each segment holds: its records, and the version each task reached in it.
        let mut held: Vec<(u64, u64, BTreeMap<String, Option<u64>>)> = Vec::new();
        for (i, &n) in segments.iter().enumerate() {
            let path = files::segment_path(dir, n);
            let mut records = 0u64;
            let mut tasks = BTreeMap::new();
            let read = files::read_records(&path, Layout::Chained, |payload, at| {
                let damaged = |message: String| StoreError::Damaged {
                    file: path.display().to_string(),
                    offset: at.batch,
                    message,
                };
                let record: Record =
                    serde_json::from_slice(payload).map_err(|e| damaged(e.to_string()))?;
                if let Some((root, version)) = record.noted() {
                    tasks.insert(root, version);
                }
                records += 1;
                replay(&mut index, record, payload.len() as u64 + 8).map_err(|e| match e {
                    StoreError::Corrupt { task, message } => {
                        damaged(format!("a record of task {task}: {message}"))
                    }
                    other => other,
                })?;
                evict_now(&mut index, &mut spill, cached)
            })?;
            history = read.history;
            if let files::Tail::Torn { offset, why } = read.tail {
                let damaged = |message: String| StoreError::Damaged {
                    file: path.display().to_string(),
                    offset,
                    message,
                };
                if i + 1 < segments.len() {
                    return Err(damaged(format!("{why}, and later segments follow it")));
                }
                if closed.is_some() {
                    return Err(damaged(format!(
                        "{why}, in a log that was closed cleanly (no crash cut it): damage"
                    )));
                }
                if let Some(after) = files::find_valid_after(&path, offset)? {
                    return Err(damage_followed(&path, offset, &why, after));
                }
                tracing::warn!(
                    segment = %path.display(),
                    offset,
                    why,
                    "cutting off the end of the task log a crash left unfinished (never acknowledged)"
                );
                files::truncate(&path, offset)?;
            }
            held.push((n, records, tasks));
        }
        // Files the newest snapshot covers, left by a crash before they were deleted.
        remove_covered(dir, base, &listing);
        let mut current = segments.last().copied().unwrap_or(base);
        if first_bytes(&files::segment_path(dir, current))? == Some(files::MAGIC_V1) {
            // A segment of the first format is left as it is: appends go to a new one.
            current += 1;
            history = files::History::default();
        }
        let seg_path = files::segment_path(dir, current);
        let file = files::open_segment(&seg_path)?;
        let seg_bytes = file
            .metadata()
            .map_err(|e| files::io_at(&seg_path, e))?
            .len();
        // Each segment's note says what it holds as read now (written afresh where it is
        // missing, from a directory of the version before notes, or short of the segment's
        // end, after a crash between a batch's sync and its note), and the manifest which
        // segments must exist: both before anything is appended.
        let mut closed_segments = Vec::new();
        let mut seg_records = 0;
        for (n, records, tasks) in held {
            let bytes = std::fs::metadata(files::segment_path(dir, n))
                .map_err(|e| files::io_at(dir, e))?
                .len();
            let noted_end = files::read_note(dir, n)?
                .and_then(|lines| lines.last().map(|l| l.end))
                .unwrap_or(0);
            if noted_end != bytes {
                let line = files::NoteLine {
                    end: bytes,
                    records,
                    tasks: tasks.into_iter().collect(),
                };
                files::rewrite_note(dir, n, &line)?;
            }
            if n == current {
                seg_records = records;
            } else {
                closed_segments.push(files::ClosedSegment {
                    segment: n,
                    bytes,
                    records,
                });
            }
        }
        let note = files::open_note(dir, current)?;
        files::sync_dir(dir)?;
        files::write_manifest(
            dir,
            &files::Manifest {
                closed: closed_segments.clone(),
                current,
            },
        )?;
        // From here on the log may be appended to: a crash is possible again.
        files::remove_closed(dir)?;

        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                index,
                pending: Vec::with_capacity(64 << 10),
                pending_notes: Vec::new(),
                appended: 0,
                failed: None,
                stalled: None,
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
                        seg_records,
                        note: Some(note),
                        closed: closed_segments,
                        history,
                        done: tx,
                        spill,
                        rotate_after: Instant::now(),
                    }
                    .run()
                })
                .map_err(|e| StoreError::Io(format!("starting the task log writer: {e}")))?
        };
        Ok(LogStore {
            shared,
            done: rx,
            writer: Mutex::new(Some(writer)),
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

    /// Task states held in memory by the store (at most about `cached_tasks`).
    pub fn cached_tasks(&self) -> usize {
        let inner = self.inner();
        inner.index.cache.len() + inner.index.spilling.len()
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

    /// Why commits are refused now, if they are.
    fn refused(inner: &Inner) -> Option<StoreError> {
        if let Some(why) = &inner.failed {
            return Some(StoreError::Io(why.clone()));
        }
        if let Some(why) = &inner.stalled {
            return Some(StoreError::Full(why.clone()));
        }
        inner
            .stop
            .then(|| StoreError::Io("the task log is closed".into()))
    }

    /// A task's current state and audit trail: from memory, or read back from its page
    /// (`keep`: and kept in memory, for the commit that follows).
    fn task(&self, root: &str, keep: bool) -> Result<Option<Task>, StoreError> {
        let found = self.inner().index.lookup(root)?;
        match found {
            Lookup::Missing => Ok(None),
            Lookup::Memory(t) => Ok(Some(t)),
            Lookup::Disk(at) => {
                let task = index::read_page(&at)?;
                if keep {
                    let mut inner = self.inner();
                    inner.index.cache_read(root, &task);
                    let cached = self.shared.opts.cached_tasks.max(1);
                    inner.index.trim_clean(cached);
                }
                Ok(Some(task))
            }
        }
    }

    fn commit_now(
        &self,
        next: &TaskState,
        audit: &[AuditRecord],
        link: Option<(&str, &str)>,
    ) -> Result<Durable, StoreError> {
        if let Some(e) = Self::refused(&self.inner()) {
            return Err(e);
        }
        let root = next.root.as_str();
        // The change is taken against the log's own copy of the state, not the engine's: the
        // record must apply to what recovery will have rebuilt. It is computed and encoded
        // outside the lock; the engine commits one task's events one at a time, so the base is
        // still current when the record is appended (it is checked, and a whole state written
        // if not).
        let base = self.task(root, true)?;
        let mut buf = Vec::with_capacity(2048);
        let mut delta = encode_commit(
            &mut buf,
            base.as_ref().map(|b| &*b.state),
            next,
            audit,
            link,
        )?;
        let (generation, wake) = {
            let mut inner = self.inner();
            if let Some(e) = Self::refused(&inner) {
                return Err(e);
            }
            let index = &mut inner.index;
            let current = index.entries.get(root).map(|e| e.version);
            if current != base.as_ref().map(|b| b.state.version) {
                buf.clear();
                delta = encode_commit(&mut buf, None, next, audit, link)?;
            }
            // Only now is the base ours alone (unless a snapshot holds it): the change is applied
            // to it in place, no copy of the whole state per event.
            let mut task = match index.take_memory(root) {
                Some(t) if Some(t.state.version) == current => {
                    drop(base);
                    t
                }
                _ => base.unwrap_or_else(|| Task {
                    state: Arc::new(TaskState::new(root, next.created_ts)),
                    audit: Arc::default(),
                }),
            };
            match delta {
                Some(delta) => {
                    let copy = Arc::make_mut(&mut task.state);
                    if let Err(e) = delta.apply(copy) {
                        // The record says what `next` is; a change that does not apply to
                        // the copy it was taken from is a bug, and the copy is replaced.
                        tracing::error!(error = %e, task = %root, "task log: a change did not apply to its own base");
                        *copy = next.clone();
                    }
                    copy.forget_vectors();
                    debug_assert!(
                        *copy == *next,
                        "the change applied to its base gives `next`"
                    );
                }
                None => {
                    let mut copy = next.clone();
                    copy.forget_vectors();
                    task.state = Arc::new(copy);
                }
            }
            task.keep_audit(audit, self.shared.opts.audit_kept);
            index.commit(task, buf.len() as u64);
            if let Some((task, root)) = link {
                index.link(task, root);
            }
            inner.pending.extend_from_slice(&buf);
            inner
                .pending_notes
                .push((root.to_string(), Some(next.version)));
            inner.appended += 1;
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
        if self.inner().index.entries.contains_key(state.root.as_str()) {
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
            if let Some(e) = Self::refused(&inner) {
                return Err(e);
            }
            let had = inner.index.delete(root);
            if had {
                inner.pending.extend_from_slice(&buf);
                inner.pending_notes.push((root.to_string(), None));
                inner.appended += 1;
                inner.writer_idle = false;
            }
            (had, inner.appended)
        };
        self.shared.wake.notify_one();
        Ok((had, self.durable(generation)))
    }

    /// Write what is pending, stop the writer, wait for a snapshot in progress, and mark the
    /// log closed cleanly (`CLOSED`), so that the next start knows nothing was cut by a crash.
    /// Commits are refused from here on. Called at shutdown, and on drop.
    pub fn close(&self) {
        self.inner().stop = true;
        self.shared.wake.notify_all();
        let writer = self.writer.lock().expect("task log lock").take();
        let Some(writer) = writer else {
            return;
        };
        let segment = writer.join().ok().flatten();
        let snapshot = self
            .shared
            .snapshot_thread
            .lock()
            .expect("task log lock")
            .take();
        if let Some(t) = snapshot {
            let _ = t.join();
        }
        let inner = self.inner();
        if inner.failed.is_some() || inner.stalled.is_some() || !inner.pending.is_empty() {
            return;
        }
        drop(inner);
        let Some(segment) = segment else {
            return;
        };
        let dir = &self.shared.dir;
        let closed = std::fs::metadata(files::segment_path(dir, segment))
            .map_err(|e| files::io_at(dir, e))
            .and_then(|m| {
                files::write_closed(
                    dir,
                    files::Closed {
                        segment,
                        bytes: m.len(),
                    },
                )
            });
        if let Err(e) = closed {
            tracing::warn!(error = %e, "cannot mark the task log closed; the next start reads it as after a crash");
        }
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
        self.close();
    }
}

#[cfg(test)]
mod tests;
