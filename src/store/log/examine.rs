//! A task log read without changing it, past any damage: what `loopguard store verify` reports
//! and what `loopguard store salvage` keeps.
//!
//! The service refuses to start on damage (see the module above). These tools read everything
//! that can still be read: the newest snapshot, then every segment after it, skipping a damaged
//! batch to the next whole one. Each task's records are applied in order; when one no longer
//! applies — a change to a version the task never reached, because the events between were in
//! damaged bytes — the task is kept as it was before it, and later changes of it are skipped
//! until a record carrying its whole state comes. The report names every damaged place, every
//! task kept short of its last record and every task lost.

use super::files::{self, Layout, Unreadable};
use super::index::Task;
use super::{commit_step, CommitStep, Record, Refusal, Src, View, ViewItem};
use crate::store::StoreError;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

/// One file of the log as it was read.
#[derive(Debug, Serialize)]
pub struct FileReport {
    pub file: String,
    pub bytes: u64,
    pub records: u64,
    /// Records inside readable batches that could not be read (a checksum, or bytes they were
    /// compressed against that are lost).
    pub records_dropped: u64,
    pub unreadable: Vec<Stretch>,
}

/// A stretch of a file that could not be read.
#[derive(Debug, Serialize)]
pub struct Stretch {
    pub offset: u64,
    pub end: u64,
    pub why: String,
    /// The end of the last segment after a crash: a write never acknowledged, which the
    /// service cuts off at its next start. Anything else is damage.
    pub torn_tail: bool,
}

/// A task whose records stop applying somewhere.
#[derive(Debug, Serialize)]
pub struct ShortTask {
    pub task_id: String,
    /// The version it is kept at (`None`: none of its states could be read; it is lost).
    pub kept_version: Option<u64>,
    /// The last version its records reached.
    pub last_version: u64,
    pub why: String,
}

/// What reading a task log found.
#[derive(Debug, Serialize)]
pub struct Report {
    pub dir: String,
    /// The newest snapshot, and the segments after it, in order.
    pub files: Vec<FileReport>,
    /// Whole files that should be there and are not, or a clean close the files contradict.
    pub problems: Vec<String>,
    /// Tasks rebuilt (those kept short included).
    pub tasks: usize,
    pub short: Vec<ShortTask>,
    /// Tasks of the snapshot in blocks that could not be read, whose ids are lost with them
    /// (those named by later records are in `short`).
    pub lost_unnamed: u64,
    /// The snapshot's end is unreadable too: how many of its tasks were lost is unknown.
    pub lost_uncounted: bool,
    /// Events (records) of segments that could not be read and whose task cannot be named:
    /// in the stretches `files` lists, so any task with events there may be kept short of them.
    pub events_unnamed: u64,
    /// Acknowledged events that do not read back: each task's versions short of the last its
    /// segments' notes (or records) say it reached, and the events of a missing segment
    /// whose note is gone too (from the manifest). Exact where the notes are whole (after a
    /// process crash, always; after a power loss the last batches' may be missing).
    pub events_lost: u64,
}

impl Report {
    /// Nothing acknowledged is missing: no damage, only (at most) a torn tail after a crash.
    pub fn is_sound(&self) -> bool {
        self.problems.is_empty()
            && self.short.is_empty()
            && self.events_lost == 0
            && self.lost_unnamed == 0
            && self
                .files
                .iter()
                .all(|f| f.records_dropped == 0 && f.unreadable.iter().all(|u| u.torn_tail))
    }

    /// The report as text, for a terminal.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(out, "task log {}", self.dir);
        for f in &self.files {
            let _ = writeln!(
                out,
                "  {}: {} bytes, {} records{}",
                f.file,
                f.bytes,
                f.records,
                if f.records_dropped > 0 {
                    format!(", {} unreadable records", f.records_dropped)
                } else {
                    String::new()
                }
            );
            for u in &f.unreadable {
                let _ = writeln!(
                    out,
                    "    bytes {}..{}: {}{}",
                    u.offset,
                    u.end,
                    u.why,
                    if u.torn_tail {
                        " — the end of a write a crash cut short (never acknowledged); the next start cuts it off"
                    } else if u.end < f.bytes {
                        " — DAMAGE: whole batches follow it"
                    } else {
                        " — DAMAGE"
                    }
                );
            }
        }
        for p in &self.problems {
            let _ = writeln!(out, "  problem: {p}");
        }
        let _ = writeln!(out, "  {} tasks", self.tasks);
        if self.events_lost > 0 {
            let _ = writeln!(
                out,
                "  {} acknowledged events do not read back (each task below: the version kept, of the last it reached)",
                self.events_lost
            );
        }
        if self.events_unnamed > 0 {
            let _ = writeln!(
                out,
                "  events were lost in the unreadable stretches above whose tasks cannot be named: any task with events there may be kept short of them"
            );
        }
        if self.lost_unnamed > 0 {
            let _ = writeln!(
                out,
                "  {} tasks lost with the snapshot's unreadable blocks (their ids are lost too)",
                self.lost_unnamed
            );
        }
        for s in &self.short {
            let _ = match s.kept_version {
                Some(v) => writeln!(
                    out,
                    "  task {}: kept at version {v} of {} ({})",
                    s.task_id, s.last_version, s.why
                ),
                None => writeln!(out, "  task {}: lost ({})", s.task_id, s.why),
            };
        }
        let _ = writeln!(
            out,
            "{}",
            if self.is_sound() {
                "sound: every acknowledged record reads back"
            } else {
                "DAMAGED: `loopguard store salvage --to DIR` writes a log of every intact record"
            }
        );
        out
    }
}

/// Tasks as rebuilt, for salvage.
#[derive(Default)]
struct Model {
    /// Whole states (salvage), or only versions (verify).
    states: Option<HashMap<String, Task>>,
    versions: HashMap<String, u64>,
    links: BTreeMap<String, String>,
    /// Tasks whose records stopped applying: why, the version kept, the last one seen.
    short: HashMap<String, (String, Option<u64>, u64)>,
    /// Unreadable records of segments whose task was named.
    named: u64,
    audit_kept: usize,
}

impl Model {
    fn break_off(&mut self, root: &str, kept: Option<u64>, seen: u64, why: String) {
        let e = self
            .short
            .entry(root.to_string())
            .or_insert((why, kept, seen));
        e.2 = e.2.max(seen);
    }

    fn put(&mut self, task: Task) {
        let root = task.state.root.clone();
        self.versions.insert(root.clone(), task.state.version);
        if let Some(states) = &mut self.states {
            states.insert(root, task);
        }
    }

    fn apply(&mut self, record: Record, at: &str) {
        match record {
            Record::Commit {
                root,
                base,
                full,
                delta,
                audit,
                link,
            } => {
                let current = self.versions.get(&root).copied();
                let seen = base
                    .map_or(0, |b| b + 1)
                    .max(full.as_ref().map_or(0, |f| f.version));
                match commit_step(current, base, full, delta) {
                    Ok(CommitStep::Whole(full)) => {
                        let mut task = Task {
                            audit: self
                                .states
                                .as_ref()
                                .and_then(|s| s.get(&root))
                                .map(|t| Arc::clone(&t.audit))
                                .unwrap_or_default(),
                            state: Arc::from(full),
                        };
                        task.keep_audit(&audit, self.audit_kept);
                        // A whole state: whatever was lost before it is in it.
                        self.short.remove(&root);
                        self.put(task);
                    }
                    // A task kept short stays so until a whole state comes.
                    Ok(CommitStep::Change(delta)) if !self.short.contains_key(&root) => {
                        match &mut self.states {
                            Some(states) => {
                                let Some(task) = states.get_mut(&root) else {
                                    return;
                                };
                                let mut next = (*task.state).clone();
                                if let Err(e) = delta.apply(&mut next) {
                                    self.break_off(
                                        &root,
                                        current,
                                        seen,
                                        format!("a change at {at} does not apply: {e}"),
                                    );
                                    return;
                                }
                                task.state = Arc::new(next);
                                task.keep_audit(&audit, self.audit_kept);
                                let v = task.state.version;
                                self.versions.insert(root.clone(), v);
                            }
                            None => {
                                self.versions.insert(root.clone(), seen);
                            }
                        }
                    }
                    Ok(CommitStep::Change(_))
                    | Err(Refusal::NoState | Refusal::OtherVersion { .. }) => {
                        let why = match current {
                            None => format!("its first records are unreadable; a change at {at} has nothing to apply to"),
                            Some(v) => format!("a change at {at} is to version {}, but the records after version {v} are unreadable", base.unwrap_or(0)),
                        };
                        self.break_off(&root, current, seen, why);
                        return;
                    }
                    Err(Refusal::Empty) => self.break_off(
                        &root,
                        current,
                        seen,
                        format!("a commit at {at} with no state"),
                    ),
                }
                if let Some((task, root)) = link {
                    self.links.insert(task, root);
                }
            }
            Record::Delete { root } => {
                self.versions.remove(&root);
                if let Some(s) = &mut self.states {
                    s.remove(&root);
                }
                self.short.remove(&root);
                self.links.retain(|_, r| *r != root);
            }
            Record::Head { .. } | Record::Task { .. } | Record::End { .. } => {}
        }
    }
}

/// The task a damaged record was about, if its `root` still reads.
fn root_named_in(payload: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(payload);
    let at = text.find("\"root\":\"")? + 8;
    let rest = &text[at..];
    let end = rest.find('"')?;
    let root = &rest[..end];
    (!root.is_empty() && !root.contains('\u{fffd}') && !root.contains('\\'))
        .then(|| root.to_string())
}

fn report_of(path: &Path, scanned: &files::Scanned, last_segment: bool, clean: bool) -> FileReport {
    FileReport {
        file: path.display().to_string(),
        bytes: scanned.size,
        records: scanned.records,
        records_dropped: scanned.records_dropped,
        unreadable: scanned
            .unreadable
            .iter()
            .map(|u: &Unreadable| Stretch {
                offset: u.offset,
                end: u.end,
                why: u.why.clone(),
                torn_tail: last_segment && !clean && !u.followed,
            })
            .collect(),
    }
}

/// Read the task log in `dir` (a `tasks` directory) past any damage. With `keep_states`, every
/// task's state is rebuilt (for salvage; it needs memory for every task), else only versions.
fn examine(
    dir: &Path,
    keep_states: bool,
    audit_kept: usize,
) -> Result<(Report, Model), StoreError> {
    let _lock = super::lock_dir(dir).map_err(|e| {
        StoreError::Io(format!(
            "{e}; stop the service before examining its task log"
        ))
    })?;
    let listing = files::list(dir)?;
    let mut model = Model {
        states: keep_states.then(HashMap::new),
        audit_kept,
        ..Model::default()
    };
    let mut report = Report {
        dir: dir.display().to_string(),
        files: Vec::new(),
        problems: Vec::new(),
        tasks: 0,
        short: Vec::new(),
        lost_unnamed: 0,
        lost_uncounted: false,
        events_unnamed: 0,
        events_lost: 0,
    };
    let manifest = match files::read_manifest(dir) {
        Ok(m) => m,
        Err(e) => {
            report.problems.push(e.to_string());
            None
        }
    };
    let closed = match files::read_closed(dir) {
        Ok(c) => c,
        Err(e) => {
            report.problems.push(e.to_string());
            None
        }
    };
    let chain = files::Chain::of(&listing);
    if let Some(n) = chain.snapshot {
        let path = files::snapshot_path(dir, n);
        let layout = super::snapshot_layout(&path)?;
        let mut head: Option<(String, u64, Vec<String>)> = None;
        let mut count = 0u64;
        let mut end = None;
        let mut keep = |model: &mut Model, root: String, version, subs: Vec<String>, task| {
            count += 1;
            for sub in subs {
                model.links.insert(sub, root.clone());
            }
            match task {
                Some(task) if keep_states => model.put(task),
                _ => {
                    model.versions.insert(root, version);
                }
            }
        };
        let task_of = |r: Record| match r {
            Record::Task { state, audit, .. } => Some(Task {
                state: Arc::from(state),
                audit: Arc::new(audit),
            }),
            _ => None,
        };
        let scanned = files::scan(&path, layout, |payload, _, intact| {
            if !intact {
                // A task whose head or record is damaged is lost with its block.
                head = None;
                return;
            }
            if let Some((root, version, subs)) = head.take() {
                // The record after a head is its task's: parsed only to be kept.
                let task = keep_states
                    .then(|| {
                        serde_json::from_slice::<Record>(payload)
                            .ok()
                            .and_then(task_of)
                    })
                    .flatten();
                keep(&mut model, root, version, subs, task);
                return;
            }
            match serde_json::from_slice::<Record>(payload) {
                Ok(Record::Head {
                    root,
                    version,
                    subtasks,
                    ..
                }) => head = Some((root, version, subtasks)),
                Ok(r @ Record::Task { .. }) => {
                    let Record::Task {
                        ref state,
                        ref subtasks,
                        ..
                    } = r
                    else {
                        unreachable!()
                    };
                    let (root, version, subs) =
                        (state.root.clone(), state.version, subtasks.clone());
                    keep(&mut model, root, version, subs, task_of(r));
                }
                Ok(Record::End { tasks }) => end = Some(tasks),
                _ => {}
            }
        })?;
        if end != Some(count) && scanned.unreadable.is_empty() {
            report.problems.push(format!(
                "{}: {count} tasks where its end says {end:?}",
                path.display()
            ));
        }
        if !scanned.unreadable.is_empty() {
            report.lost_unnamed = end.map_or(0, |n| n.saturating_sub(count));
            report.lost_uncounted = end.is_none();
            report.problems.push(format!(
                "{}: the tasks in its unreadable blocks ({}) are lost, unless later records hold their whole state",
                path.display(),
                end.map_or("how many is unknown: its end is lost too".into(), |n| format!(
                    "{} of {n}",
                    n.saturating_sub(count)
                ))
            ));
        }
        report.files.push(report_of(&path, &scanned, false, true));
    }
    let (base, segments) = (chain.base, &chain.segments);
    for (expected, n) in chain.gaps() {
        report.problems.push(format!(
            "{} to {} are missing: what they held is lost",
            files::segment_path(dir, expected).display(),
            files::segment_path(dir, n - 1).display()
        ));
    }
    for (i, &n) in segments.iter().enumerate() {
        let path = files::segment_path(dir, n);
        let last = i + 1 == segments.len();
        let name = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let scanned = files::scan(&path, Layout::Chained, |payload, at, intact| {
            let at = format!("{name} byte {}", at.batch);
            if intact {
                if let Ok(record) = serde_json::from_slice::<Record>(payload) {
                    model.apply(record, &at);
                }
            } else if let Some(root) = root_named_in(payload)
                .filter(|r| model.versions.contains_key(r) || model.short.contains_key(r))
            {
                // A record that fails its checksum: its task is named when its id reads as
                // one the log knows (a damaged id may read as no task, or another's).
                model.named += 1;
                let current = model.versions.get(&root).copied();
                model.break_off(
                    &root,
                    current,
                    current.map_or(0, |v| v + 1),
                    format!("a record of it at {at} is unreadable"),
                );
            }
        })?;
        report
            .files
            .push(report_of(&path, &scanned, last, closed.is_some()));
    }
    if let Some(c) = closed {
        let path = files::segment_path(dir, c.segment);
        let size = std::fs::metadata(&path).map(|m| m.len()).ok();
        if segments.last().copied().unwrap_or(base) != c.segment || size != Some(c.bytes) {
            report.problems.push(format!(
                "the log was closed cleanly with segment {} at {} bytes; it is {}",
                c.segment,
                c.bytes,
                size.map_or("missing".into(), |s| format!("{s} bytes"))
            ));
            // What was cut off after the close is lost, its events unnamed.
            let name = path.display().to_string();
            if let Some(f) = report.files.iter_mut().find(|f| f.file == name) {
                if f.bytes < c.bytes {
                    f.unreadable.push(Stretch {
                        offset: f.bytes,
                        end: c.bytes,
                        why: "cut off after the log was closed cleanly".into(),
                        torn_tail: false,
                    });
                }
            }
        }
    }
    // What the manifest and the notes say was acknowledged: segments that must exist, how
    // long they are, and the version each task reached.
    let mut noted: HashMap<String, Option<u64>> = HashMap::new();
    let mut unnoted_lost = 0u64;
    let mut required: Vec<(u64, Option<files::ClosedSegment>)> = Vec::new();
    if let Some(m) = &manifest {
        for c in m.closed.iter().filter(|c| c.segment >= base) {
            required.push((c.segment, Some(*c)));
        }
        if m.current >= base {
            required.push((m.current, None));
        }
    }
    let mut numbers: Vec<u64> = segments
        .iter()
        .copied()
        .chain(required.iter().map(|(n, _)| *n))
        .collect();
    numbers.sort_unstable();
    numbers.dedup();
    for n in numbers {
        let path = files::segment_path(dir, n);
        let size = std::fs::metadata(&path).map(|m| m.len()).ok();
        let note = files::read_note(dir, n).unwrap_or_else(|e| {
            report.problems.push(e.to_string());
            None
        });
        let closed_as = required.iter().find(|(r, _)| *r == n).and_then(|(_, c)| *c);
        match (size, &note) {
            (None, Some(lines)) => report.problems.push(format!(
                "{} is missing: it held {} acknowledged events, by its note",
                path.display(),
                lines.last().map_or(0, |l| l.records)
            )),
            (None, None) => {
                let held = closed_as.map(|c| c.records);
                unnoted_lost += held.unwrap_or(0);
                report.problems.push(format!(
                    "{} is missing, and its note too: it held {} acknowledged events{}",
                    path.display(),
                    held.map_or("an unknown number of".to_string(), |r| r.to_string()),
                    if held.is_some() {
                        ", by the manifest"
                    } else {
                        ""
                    }
                ));
            }
            (Some(size), _) => {
                if let Some(c) = closed_as.filter(|c| c.bytes != size) {
                    report.problems.push(format!(
                        "{} is {size} bytes, where it was closed at {} holding {} acknowledged events",
                        path.display(),
                        c.bytes,
                        c.records
                    ));
                    if note.is_none() && size < c.bytes {
                        // Which records were past the cut is unknown without the note: at
                        // least those the scan did not read.
                        let read = report
                            .files
                            .iter()
                            .find(|f| f.file == path.display().to_string())
                            .map_or(0, |f| f.records);
                        unnoted_lost += c.records.saturating_sub(read);
                    }
                }
                if let Some(last) = note
                    .as_ref()
                    .and_then(|l| l.last())
                    .filter(|l| l.end > size)
                {
                    let kept = note
                        .iter()
                        .flatten()
                        .take_while(|l| l.end <= size)
                        .last()
                        .map_or(0, |l| l.records);
                    report.problems.push(format!(
                        "{} is {size} bytes, where its note says acknowledged batches reach byte {}: {} acknowledged events after byte {size} are gone",
                        path.display(),
                        last.end,
                        last.records.saturating_sub(kept)
                    ));
                }
            }
        }
        for line in note.into_iter().flatten() {
            for (root, version) in line.tasks {
                noted.insert(root, version);
            }
        }
    }
    // Each task the notes saw: kept short of the version they say it reached?
    for (root, last) in noted {
        let Some(last) = last else { continue };
        let kept = model.versions.get(&root).copied();
        if let Some(e) = model.short.get_mut(&root) {
            e.2 = e.2.max(last);
        } else if kept.is_none_or(|k| k < last) {
            model.short.insert(
                root,
                (
                    match kept {
                        None => "none of its records read back".to_string(),
                        Some(_) => "its later records do not read back".to_string(),
                    },
                    kept,
                    last,
                ),
            );
        }
    }
    report.tasks = model.versions.len();
    // Records lost without their task's name: unreadable ones whose id did not read, those of
    // batches that did not decompress, and whatever the stretches skipped whole held (at least
    // one each).
    let segments = report.files.iter().filter(|f| f.file.contains("seg-"));
    let dropped: u64 = segments.clone().map(|f| f.records_dropped).sum();
    let skipped = segments
        .flat_map(|f| &f.unreadable)
        .filter(|u| !u.torn_tail && !u.why.contains("records that pass"))
        .count() as u64;
    report.events_unnamed = dropped.saturating_sub(model.named) + skipped;
    let mut short: Vec<ShortTask> = model
        .short
        .iter()
        .map(|(root, (why, kept, last))| ShortTask {
            task_id: root.clone(),
            kept_version: *kept,
            last_version: *last,
            why: why.clone(),
        })
        .collect();
    short.sort_by(|a, b| a.task_id.cmp(&b.task_id));
    report.events_lost = short
        .iter()
        .map(|s| s.last_version.saturating_sub(s.kept_version.unwrap_or(0)))
        .sum::<u64>()
        + unnoted_lost;
    report.short = short;
    Ok((report, model))
}

/// `loopguard store verify`: read the task log in `dir` without changing it.
pub fn verify(dir: &Path) -> Result<Report, StoreError> {
    Ok(examine(dir, false, usize::MAX)?.0)
}

/// `loopguard store salvage`: rebuild every task from the intact records of the log in `dir`
/// and write them as a new task log in `to` (which must not hold one), as one snapshot. The
/// report says what could not be kept.
pub fn salvage(dir: &Path, to: &Path, audit_kept: usize) -> Result<Report, StoreError> {
    if files::list(to).is_ok_and(|l| !l.segments.is_empty() || !l.snapshots.is_empty()) {
        return Err(StoreError::Io(format!(
            "{} holds a task log already; salvage writes a new one",
            to.display()
        )));
    }
    let (report, model) = examine(dir, true, audit_kept)?;
    std::fs::create_dir_all(to).map_err(|e| files::io_at(to, e))?;
    let _lock = super::lock_dir(to)?;
    let states = model.states.unwrap_or_default();
    let mut subtasks: HashMap<&str, Vec<Arc<str>>> = HashMap::new();
    for (task, root) in &model.links {
        if states.contains_key(root) {
            subtasks
                .entry(root)
                .or_default()
                .push(Arc::from(task.as_str()));
        }
    }
    let mut view = View {
        items: states
            .iter()
            .map(|(root, task)| ViewItem {
                root: Arc::from(root.as_str()),
                version: task.state.version,
                updated_ts: task.state.updated_ts,
                subtasks: subtasks.remove(root.as_str()).unwrap_or_default(),
                src: Src::Memory(task.clone()),
            })
            .collect(),
        files: HashMap::new(),
        logged: 0,
        dead: 0,
    };
    super::write_snapshot(to, 0, &mut view)?;
    Ok(report)
}
