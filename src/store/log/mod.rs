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
//! [`examine`]) tell what is affected and keep every intact record.
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

pub use delta::StateDelta;

use super::{ready, Durable, Opened, Store, StoreError, StoreFuture, TaskTxn};
use crate::audit::AuditRecord;
use crate::state::TaskState;
use files::Layout;
use index::{Index, Loc, Lookup, PageWriter, Task};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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

/// The file evicted task states are written to: unlinked at once, so it needs no cleaning up
/// after a crash and gives its space back when closed. Not synced: recovery rebuilds from the
/// snapshot and the segments, never from it.
struct Spill {
    id: u32,
    file: Arc<File>,
    path: PathBuf,
    len: u64,
}

impl Spill {
    fn create(dir: &Path, index: &mut Index) -> Result<Spill, StoreError> {
        use std::os::unix::fs::FileExt;
        let path = dir.join(format!(
            "spill-{}-{}.tmp",
            std::process::id(),
            index.open_files()
        ));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| files::io_at(&path, e))?;
        let _ = std::fs::remove_file(&path);
        file.write_all_at(&files::PAGE_MAGIC, 0)
            .map_err(|e| files::io_at(&path, e))?;
        let file = Arc::new(file);
        let shown = dir.join("spill (unlinked)");
        let id = index.add_file(Arc::clone(&file), shown.clone());
        Ok(Spill {
            id,
            file,
            path: shown,
            len: files::PAGE_MAGIC.len() as u64,
        })
    }

    /// Write `victims`' states as blocks at the end of the file; where each one went.
    fn write(&mut self, victims: &[(Arc<str>, Task)]) -> Result<Vec<Loc>, std::io::Error> {
        use std::os::unix::fs::FileExt;
        let mut w = PageWriter::new(self.len);
        let mut locs = Vec::with_capacity(victims.len());
        for (_, task) in victims {
            let loc = w
                .push_task(self.id, task)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            locs.push(loc);
            w.end_block(false)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
        }
        w.end_block(true)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let bytes = w.take();
        self.file.write_all_at(&bytes, self.len)?;
        self.len += bytes.len() as u64;
        Ok(locs)
    }
}

/// Write evicted states to the spill file until the cache holds `cached` (recovery, one
/// thread: no lock to let go of).
fn evict_now(index: &mut Index, spill: &mut Spill, cached: usize) -> Result<(), StoreError> {
    if index.cache.len() <= cached {
        return Ok(());
    }
    let victims = index.take_victims(cached);
    if victims.is_empty() {
        return Ok(());
    }
    let locs = spill
        .write(&victims)
        .map_err(|e| files::io_at(&spill.path, e))?;
    index.revive_file(spill.id, &spill.file, &spill.path);
    index.spilled(victims, Some(locs));
    Ok(())
}

/// Apply a segment's record to the index, reading back states that left the cache. A record
/// that does not apply is `StoreError::Corrupt`, naming its task.
fn replay(index: &mut Index, record: Record, bytes: u64) -> Result<(), StoreError> {
    let root_of = |r: &Record| match r {
        Record::Commit { root, .. } | Record::Delete { root } => root.clone(),
        _ => String::new(),
    };
    let task_id = root_of(&record);
    let fail = |message: String| StoreError::Corrupt {
        task: task_id.clone(),
        message,
    };
    match record {
        Record::Commit {
            root,
            base,
            full,
            delta,
            audit,
            link,
        } => {
            let current = match index.cache.pop(root.as_str()) {
                Some(t) => Some(t),
                None => match index.lookup(&root)? {
                    Lookup::Missing => None,
                    Lookup::Memory(t) => Some(t),
                    Lookup::Disk(at) => Some(index::read_page(&at)?),
                },
            };
            let mut task = match (full, delta) {
                (Some(full), _) => Task {
                    state: Arc::from(full),
                    audit: current.map(|t| t.audit).unwrap_or_default(),
                },
                (None, Some(delta)) => {
                    let mut task = current.ok_or_else(|| {
                        fail(format!("a change to task {root}, which has no state"))
                    })?;
                    if Some(task.state.version) != base {
                        return Err(fail(format!(
                            "a change to version {base:?} of task {root}, which is at version {}",
                            task.state.version
                        )));
                    }
                    delta.apply(Arc::make_mut(&mut task.state)).map_err(fail)?;
                    task
                }
                (None, None) => return Err(fail(format!("a commit of task {root} with no state"))),
            };
            task.keep_audit(&audit, index.audit_kept);
            index.commit(task, bytes);
            if let Some((task, root)) = link {
                index.link(&task, &root);
            }
        }
        Record::Delete { root } => {
            index.delete(&root);
        }
        Record::Head { .. } | Record::Task { .. } | Record::End { .. } => {
            return Err(fail("a snapshot's record inside a segment".into()))
        }
    }
    Ok(())
}

/// Load snapshot `n` into the index: each task's head, and where its record is.
fn load_snapshot(
    dir: &Path,
    n: u64,
    index: &mut Index,
    spill: &mut Spill,
    cached: usize,
) -> Result<(), StoreError> {
    let path = files::snapshot_path(dir, n);
    let damaged = |offset: u64, message: String| StoreError::Damaged {
        file: path.display().to_string(),
        offset,
        message,
    };
    let layout = snapshot_layout(&path)?;
    let file = Arc::new(File::open(&path).map_err(|e| files::io_at(&path, e))?);
    let id = index.add_file(file, path.clone());
    let mut count = 0u64;
    let mut ended = None;
    let mut head: Option<(String, u64, i64, Vec<String>)> = None;
    let read = files::read_records(&path, layout, |payload, at| {
        if ended.is_some() {
            return Err(damaged(at.batch, "a record after the end".into()));
        }
        let bad = |e: String| damaged(at.batch, e);
        if layout == Layout::Blocks {
            // A task's record is not parsed here, only its head: it is read when needed.
            if head.is_some() {
                let (root, version, updated_ts, subtasks) = head.take().expect("a head");
                count += 1;
                index.entries.insert(
                    Arc::from(root.as_str()),
                    index::Entry {
                        version,
                        updated_ts,
                        page: None,
                        subtasks: Vec::new(),
                        logged: 0,
                    },
                );
                index.set_page(
                    &root,
                    Some(Loc {
                        file: id,
                        slot: at.slot,
                        block: at.batch,
                    }),
                );
                for sub in subtasks {
                    index.link(&sub, &root);
                }
                return Ok(());
            }
        }
        match serde_json::from_slice::<Record>(payload).map_err(|e| bad(e.to_string()))? {
            Record::Head {
                root,
                version,
                updated_ts,
                subtasks,
            } if layout == Layout::Blocks => head = Some((root, version, updated_ts, subtasks)),
            Record::Task {
                state,
                audit,
                subtasks,
            } if layout == Layout::Chained => {
                // The first format: whole states, kept like a segment's (and spilled as needed).
                count += 1;
                let root = state.root.clone();
                index.commit(
                    Task {
                        state: Arc::from(state),
                        audit: Arc::new(audit),
                    },
                    0,
                );
                for sub in subtasks {
                    index.link(&sub, &root);
                }
                evict_now(index, spill, cached)?;
            }
            Record::End { tasks } => ended = Some(tasks),
            _ => return Err(bad("a record that has no place in a snapshot".into())),
        }
        Ok(())
    })?;
    if let files::Tail::Torn { offset, why } = read.tail {
        // Snapshots are renamed into place only once complete: this is damage, not a crash.
        return Err(damaged(offset, why));
    }
    match ended {
        Some(n) if n == count => Ok(()),
        Some(n) => Err(damaged(0, format!("{count} tasks where its end says {n}"))),
        None => Err(damaged(0, "no end record".into())),
    }
}

/// The first 8 bytes of a file (its format), if it has them.
fn first_bytes(path: &Path) -> Result<Option<[u8; 8]>, StoreError> {
    use std::io::Read;
    let mut magic = [0u8; 8];
    match File::open(path).and_then(|mut f| f.read_exact(&mut magic)) {
        Ok(()) => Ok(Some(magic)),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::NotFound
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(files::io_at(path, e)),
    }
}

/// Snapshots of the first format are one compressed chain, like a segment.
fn snapshot_layout(path: &Path) -> Result<Layout, StoreError> {
    use std::io::Read;
    let mut magic = [0u8; 8];
    let read = File::open(path).and_then(|mut f| f.read_exact(&mut magic));
    Ok(match read {
        Ok(()) if magic == files::MAGIC_V1 => Layout::Chained,
        Ok(()) => Layout::Blocks,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Layout::Blocks,
        Err(e) => return Err(files::io_at(path, e)),
    })
}

/// Why a segment's damaged batch is refused rather than cut: valid batches follow it. Names
/// the tasks their readable records belong to.
fn damage_followed(path: &Path, offset: u64, why: &str, after: files::ValidAfter) -> StoreError {
    let mut roots = std::collections::BTreeSet::new();
    let mut records = 0u64;
    let _ = files::scan(path, Layout::Chained, |p, at, intact| {
        if at.batch < after.offset || !intact {
            return;
        }
        records += 1;
        if let Ok(Record::Commit { root, .. } | Record::Delete { root }) =
            serde_json::from_slice::<Record>(p)
        {
            roots.insert(root);
        }
    });
    let named: Vec<&str> = roots.iter().take(10).map(String::as_str).collect();
    StoreError::Damaged {
        file: path.display().to_string(),
        offset,
        message: format!(
            "{why}, and {} whole batches follow it (bytes {}..{}, {records} readable records of \
             {} tasks: {}{}): this is damage, not a write a crash cut short, and nothing was \
             cut. The events of the damaged batch are unreadable, and later events of the tasks \
             they belong to no longer apply. `loopguard store verify` lists every damaged place; \
             `loopguard store salvage --to DIR` keeps every intact record (docs/DEPLOY.md)",
            after.batches,
            after.offset,
            after.end,
            roots.len(),
            named.join(", "),
            if roots.len() > named.len() {
                ", …"
            } else {
                ""
            },
        ),
    }
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
        let cached = opts.cached_tasks.max(1);
        let mut index = Index::new(opts.audit_kept);
        let mut spill = Spill::create(dir, &mut index)?;
        // The newest snapshot; the segments before it are already in it.
        let base = match listing.snapshots.last() {
            Some(&n) => {
                load_snapshot(dir, n, &mut index, &mut spill, cached)?;
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
                return Err(StoreError::Damaged {
                    file: files::segment_path(dir, expected).display().to_string(),
                    offset: 0,
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
        // The last segment's records: its next batch is compressed against them.
        let mut history = files::History::default();
        for (i, &n) in segments.iter().enumerate() {
            let path = files::segment_path(dir, n);
            let read = files::read_records(&path, Layout::Chained, |payload, at| {
                let damaged = |message: String| StoreError::Damaged {
                    file: path.display().to_string(),
                    offset: at.batch,
                    message,
                };
                let record: Record =
                    serde_json::from_slice(payload).map_err(|e| damaged(e.to_string()))?;
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
        files::sync_dir(dir)?;
        // From here on the log may be appended to: a crash is possible again.
        files::remove_closed(dir)?;

        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                index,
                pending: Vec::with_capacity(64 << 10),
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

/// The writer thread: group commit, full-disk retries, segment rotation, snapshots, and
/// writing evicted states to the spill file.
struct Writer {
    shared: Arc<Shared>,
    file: File,
    segment: u64,
    seg_bytes: u64,
    /// The current segment's records so far: what its next batch is compressed against.
    history: files::History,
    done: tokio::sync::watch::Sender<Done>,
    spill: Spill,
    /// No rotation before this (after one failed for want of space).
    rotate_after: Instant,
}

/// Every task as it stood at the end of a segment, for the snapshot that replaces it: where
/// its state can be read (a page, or memory), taken under the lock without copying states.
struct View {
    items: Vec<ViewItem>,
    files: HashMap<u32, (Arc<File>, PathBuf)>,
    /// `Index::logged` and `Index::dead` when it was taken.
    logged: u64,
    dead: u64,
}

struct ViewItem {
    root: Arc<str>,
    version: u64,
    updated_ts: i64,
    subtasks: Vec<Arc<str>>,
    src: Src,
}

enum Src {
    Page(Loc),
    Memory(Task),
}

/// The file number a task's place in the snapshot being written carries until the snapshot
/// has one.
const NEW_SNAPSHOT: u32 = u32::MAX;

impl View {
    fn take(index: &Index) -> View {
        let mut items = Vec::with_capacity(index.entries.len());
        let mut files = HashMap::new();
        for (root, e) in &index.entries {
            let src = match e.page {
                Some(loc) => {
                    if let Some((f, p)) = index.file(loc.file) {
                        files
                            .entry(loc.file)
                            .or_insert_with(|| (Arc::clone(f), p.to_path_buf()));
                    }
                    Src::Page(loc)
                }
                None => match index
                    .cache
                    .peek(&**root)
                    .or_else(|| index.spilling.get(&**root))
                {
                    Some(t) => Src::Memory(t.clone()),
                    None => {
                        tracing::error!(task = %root, "task log: a task with no state anywhere (a bug); left out of the snapshot");
                        continue;
                    }
                },
            };
            items.push(ViewItem {
                root: Arc::clone(root),
                version: e.version,
                updated_ts: e.updated_ts,
                subtasks: e.subtasks.clone(),
                src,
            });
        }
        View {
            items,
            files,
            logged: index.logged,
            dead: index.dead,
        }
    }
}

/// Rotate when the segment is full, or early when most of what the segments hold is dead (the
/// records of tasks deleted since the snapshot): a deleted task leaves nothing to replay.
fn wants_snapshot(index: &Index, seg_bytes: u64, segment_bytes: u64) -> bool {
    seg_bytes >= segment_bytes || (index.dead >= (1 << 20) && index.dead * 2 >= index.logged)
}

impl Writer {
    /// Returns the segment it appended to last, once stopped cleanly.
    fn run(mut self) -> Option<u64> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut spare = Vec::with_capacity(64 << 10);
        let mut out = Vec::with_capacity(64 << 10);
        let cached = self.shared.opts.cached_tasks.max(1);
        loop {
            let (batch, generation, view) = {
                let mut inner = self.shared.inner.lock().expect("task log lock");
                while inner.pending.is_empty() && !inner.stop {
                    inner.writer_idle = true;
                    inner = self.shared.wake.wait(inner).expect("task log lock");
                }
                inner.writer_idle = false;
                if inner.pending.is_empty() {
                    return Some(self.segment);
                }
                let batch = std::mem::replace(&mut inner.pending, std::mem::take(&mut spare));
                let rotate =
                    wants_snapshot(&inner.index, self.seg_bytes, self.shared.opts.segment_bytes)
                        && !inner.snapshotting
                        && !inner.stop
                        && Instant::now() >= self.rotate_after;
                let view = rotate.then(|| {
                    inner.snapshotting = true;
                    View::take(&inner.index)
                });
                (batch, inner.appended, view)
            };
            out.clear();
            if let Err(e) = files::encode_batch(&mut self.history, &batch, &mut out) {
                self.fail(e.to_string(), generation);
                return None;
            }
            if !self.write_held(&out, generation) {
                return None;
            }
            let stats = &self.shared.stats;
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
                    // Most likely no space for the new segment: keep appending to this one.
                    tracing::warn!(error = %e, "cannot start a task log segment; trying again later");
                    self.shared
                        .inner
                        .lock()
                        .expect("task log lock")
                        .snapshotting = false;
                    self.rotate_after = Instant::now() + Duration::from_secs(5);
                }
            }
            self.evict(cached);
        }
    }

    /// Write and sync a batch. On a full disk the write is cut back off and tried again, with
    /// backoff, until it succeeds (commits are refused meanwhile) or the store stops. False
    /// when the store cannot take commits any more.
    fn write_held(&mut self, out: &[u8], generation: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let mut backoff = Duration::from_millis(50);
        loop {
            let written = self
                .file
                .write_all(out)
                .and_then(|()| self.file.sync_data());
            self.shared.stats.syncs.fetch_add(1, Relaxed);
            let e = match written {
                Ok(()) => {
                    let mut inner = self.shared.inner.lock().expect("task log lock");
                    if inner.stalled.take().is_some() {
                        tracing::info!(
                            event = "task_log_resumed",
                            "space is back: the held task log batch is written, commits resume"
                        );
                    }
                    return true;
                }
                Err(e) => e,
            };
            if !no_space(&e) {
                self.fail(format!("writing the task log: {e}"), generation);
                return false;
            }
            // Part of the batch may be in the file: cut it back to the last whole batch, and
            // write it all again once there is room. Shrinking a file needs no space.
            if let Err(cut) = self.file.set_len(self.seg_bytes) {
                self.fail(
                    format!("writing the task log: {e}; cutting the failed write off: {cut}"),
                    generation,
                );
                return false;
            }
            self.shared.stats.full_disk_retries.fetch_add(1, Relaxed);
            let mut inner = self.shared.inner.lock().expect("task log lock");
            if inner.stalled.is_none() {
                tracing::error!(
                    event = "task_log_full",
                    error = %e,
                    "the disk is full: commits are refused (503, Retry-After) until the held batch can be written; retrying"
                );
            }
            inner.stalled = Some(format!(
                "the disk holding the task log is full ({e}); commits are refused until space is freed, retrying"
            ));
            if inner.stop {
                // Shutting down: the held batch was never acknowledged.
                drop(inner);
                self.fail(format!("stopped while the disk was full: {e}"), generation);
                return false;
            }
            let (guard, _) = self
                .shared
                .wake
                .wait_timeout(inner, backoff)
                .expect("task log lock");
            drop(guard);
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    fn fail(&self, why: String, generation: u64) {
        tracing::error!(error = %why, "the task log cannot take commits until a restart");
        let mut inner = self.shared.inner.lock().expect("task log lock");
        inner.failed = Some(why);
        inner.stalled = None;
        let _ = self.done.send(Done {
            generation,
            failed: true,
        });
    }

    /// Write the states leaving the cache to the spill file (outside the lock; they stay
    /// readable from `spilling` meanwhile). With no space for them, they stay in memory.
    fn evict(&mut self, cached: usize) {
        let victims = {
            let mut inner = self.shared.inner.lock().expect("task log lock");
            inner.index.take_victims(cached)
        };
        if victims.is_empty() {
            return;
        }
        let written = self.spill.write(&victims);
        let mut inner = self.shared.inner.lock().expect("task log lock");
        match written {
            Ok(locs) => {
                self.shared
                    .stats
                    .spilled
                    .fetch_add(victims.len() as u64, std::sync::atomic::Ordering::Relaxed);
                inner
                    .index
                    .revive_file(self.spill.id, &self.spill.file, &self.spill.path);
                inner.index.spilled(victims, Some(locs));
            }
            Err(e) => {
                if inner.stalled.is_none() {
                    tracing::warn!(error = %e, "cannot write task states leaving memory to the spill file; they stay in memory");
                }
                inner.index.spilled(victims, None);
            }
        }
    }

    /// Start segment N+1 and a spill file for it; write the snapshot of everything before it
    /// on its own thread.
    fn rotate(&mut self, view: View) -> Result<(), StoreError> {
        let next = self.segment + 1;
        let dir = self.shared.dir.clone();
        let path = files::segment_path(&dir, next);
        let file = files::open_segment(&path).inspect_err(|_| {
            let _ = std::fs::remove_file(&path);
        })?;
        files::sync_dir(&dir)?;
        self.file = file;
        self.segment = next;
        self.seg_bytes = files::MAGIC.len() as u64;
        self.history = files::History::default();
        {
            // States evicted from now on go to a new spill file; the old one closes once the
            // snapshot holds what it held.
            let mut inner = self.shared.inner.lock().expect("task log lock");
            match Spill::create(&dir, &mut inner.index) {
                Ok(spill) => self.spill = spill,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start a new spill file; keeping the old one")
                }
            }
        }
        let shared = Arc::clone(&self.shared);
        let thread = std::thread::Builder::new()
            .name("loopguard-snapshot".into())
            .spawn(move || {
                let mut view = view;
                let written = write_snapshot(&shared.dir, next, &mut view);
                match written {
                    Ok(()) => {
                        shared
                            .stats
                            .snapshots
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if let Err(e) = repoint(&shared, next, view) {
                            tracing::error!(error = %e, "opening the new task log snapshot failed; the segments it would replace are kept");
                        } else if let Ok(listing) = files::list(&shared.dir) {
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

/// Write snapshot `n`: each task's head and record, in page blocks. Records already in a page
/// file are copied as they are, in the order they lie there; each item's place in the new file
/// is left in its `src`.
fn write_snapshot(dir: &Path, n: u64, view: &mut View) -> Result<(), StoreError> {
    // Memory first, then pages in file order: each block read once.
    view.items.sort_by_key(|i| match i.src {
        Src::Memory(_) => (0, 0, 0, 0),
        Src::Page(l) => (1, l.file, l.block, l.slot),
    });
    let path = files::snapshot_path(dir, n);
    let files_of = std::mem::take(&mut view.files);
    files::write_atomically(dir, &path, files::PAGE_MAGIC, |w| {
        let mut pages = PageWriter::new(files::PAGE_MAGIC.len() as u64);
        let mut block: Option<(u32, u64, Vec<u8>)> = None;
        let mut raw = Vec::new();
        for item in &mut view.items {
            pages.push(&RecordRef::Head {
                root: &item.root,
                version: item.version,
                updated_ts: item.updated_ts,
                subtasks: &item.subtasks,
            })?;
            let loc = match &item.src {
                Src::Memory(task) => pages.push_task(NEW_SNAPSHOT, task)?,
                Src::Page(at) => {
                    let (file, fpath) = files_of.get(&at.file).ok_or_else(|| {
                        StoreError::Io(format!("page file {} is not open (a bug)", at.file))
                    })?;
                    if block
                        .as_ref()
                        .is_none_or(|(f, b, _)| (*f, *b) != (at.file, at.block))
                    {
                        files::read_block(file, fpath, at.block, &mut raw)?;
                        block = Some((at.file, at.block, std::mem::take(&mut raw)));
                    }
                    let (_, _, bytes) = block.as_ref().expect("just read");
                    let payload =
                        files::record_at(bytes, at.slot).map_err(|m| StoreError::Damaged {
                            file: fpath.display().to_string(),
                            offset: at.block,
                            message: m,
                        })?;
                    pages.push_payload(NEW_SNAPSHOT, payload)
                }
            };
            item.src = Src::Page(loc);
            pages.end_block(false)?;
            if pages.out.len() >= 1 << 20 {
                w.write_all(&pages.take())
                    .map_err(|e| StoreError::Io(format!("writing a snapshot: {e}")))?;
            }
        }
        pages.push(&Record::End {
            tasks: view.items.len() as u64,
        })?;
        pages.end_block(true)?;
        w.write_all(&pages.take())
            .map_err(|e| StoreError::Io(format!("writing a snapshot: {e}")))
    })
}

/// Point every task the new snapshot holds as it still is at its record there; the files
/// that held them close once nothing refers to them.
fn repoint(shared: &Shared, n: u64, view: View) -> Result<(), StoreError> {
    let path = files::snapshot_path(&shared.dir, n);
    let file = Arc::new(File::open(&path).map_err(|e| files::io_at(&path, e))?);
    let id = shared
        .inner
        .lock()
        .expect("task log lock")
        .index
        .add_file(file, path);
    // In chunks, so commits are not held up for the whole pass.
    for chunk in view.items.chunks(4096) {
        let mut inner = shared.inner.lock().expect("task log lock");
        for item in chunk {
            let Src::Page(mut loc) = item.src else {
                continue;
            };
            loc.file = id;
            let same = inner
                .index
                .entries
                .get_mut(&*item.root)
                .filter(|e| e.version == item.version)
                .map(|e| e.logged = 0)
                .is_some();
            if same {
                inner.index.set_page(&item.root, Some(loc));
            }
        }
    }
    let mut inner = shared.inner.lock().expect("task log lock");
    inner.index.drop_if_unused(id);
    inner.index.logged = inner.index.logged.saturating_sub(view.logged);
    inner.index.dead = inner.index.dead.saturating_sub(view.dead);
    Ok(())
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
        let mut top = super::Newest::new(limit);
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
