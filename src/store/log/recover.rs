//! Opening the task log: the spill file, replaying records into the index, loading snapshots,
//! and telling a crash's torn tail from damage.

use super::*;

/// The file evicted task states are written to: unlinked at once, so it needs no cleaning up
/// after a crash and gives its space back when closed. Not synced: recovery rebuilds from the
/// snapshot and the segments, never from it.
pub(super) struct Spill {
    pub(super) id: u32,
    pub(super) file: Arc<File>,
    pub(super) path: PathBuf,
    pub(super) len: u64,
}

impl Spill {
    pub(super) fn create(dir: &Path, index: &mut Index) -> Result<Spill, StoreError> {
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
    pub(super) fn write(
        &mut self,
        victims: &[(Arc<str>, Task)],
    ) -> Result<Vec<Loc>, std::io::Error> {
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
pub(super) fn evict_now(
    index: &mut Index,
    spill: &mut Spill,
    cached: usize,
) -> Result<(), StoreError> {
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
pub(super) fn replay(index: &mut Index, record: Record, bytes: u64) -> Result<(), StoreError> {
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
            let version = current.as_ref().map(|t| t.state.version);
            let mut task = match (commit_step(version, base, full, delta), current) {
                (Ok(CommitStep::Whole(full)), current) => Task {
                    state: Arc::from(full),
                    audit: current.map(|t| t.audit).unwrap_or_default(),
                },
                (Ok(CommitStep::Change(delta)), Some(mut task)) => {
                    delta.apply(Arc::make_mut(&mut task.state)).map_err(fail)?;
                    task
                }
                (Err(Refusal::OtherVersion { base, at }), _) => {
                    return Err(fail(format!(
                        "a change to version {base:?} of task {root}, which is at version {at}"
                    )))
                }
                (Err(Refusal::Empty), _) => {
                    return Err(fail(format!("a commit of task {root} with no state")))
                }
                (Ok(CommitStep::Change(_)) | Err(Refusal::NoState), _) => {
                    return Err(fail(format!("a change to task {root}, which has no state")))
                }
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
pub(super) fn load_snapshot(
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
                        logged: 0,
                    },
                );
                index.set_page(&root, Some(Loc::new(id, at.batch, at.slot)));
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
pub(super) fn first_bytes(path: &Path) -> Result<Option<[u8; 8]>, StoreError> {
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
pub(super) fn snapshot_layout(path: &Path) -> Result<Layout, StoreError> {
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
pub(super) fn damage_followed(
    path: &Path,
    offset: u64,
    why: &str,
    after: files::ValidAfter,
) -> StoreError {
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

/// How many acknowledged records segment `n`'s note says lie past byte `size` (all of them
/// for a missing segment, `size` 0), and how many it held in all; `None` without a note.
pub(super) fn noted_after(dir: &Path, n: u64, size: u64) -> Result<Option<(u64, u64)>, StoreError> {
    let Some(lines) = files::read_note(dir, n)? else {
        return Ok(None);
    };
    let total = lines.last().map_or(0, |l| l.records);
    let kept = lines
        .iter()
        .take_while(|l| l.end <= size)
        .last()
        .map_or(0, |l| l.records);
    Ok(Some((total.saturating_sub(kept), total)))
}

/// Refuse a log whose files contradict its manifest: a segment it lists as closed that is
/// missing or not the length it was closed at, or the segment being appended to missing. (The
/// newest snapshot holds what the segments before it held: those may be gone.)
pub(super) fn check_manifest(
    dir: &Path,
    m: &files::Manifest,
    base: u64,
    segments: &[u64],
) -> Result<(), StoreError> {
    let damaged = |n: u64, offset: u64, message: String| StoreError::Damaged {
        file: files::segment_path(dir, n).display().to_string(),
        offset,
        message: format!(
            "{message}. `loopguard store verify` says which tasks lost which events; \
             `loopguard store salvage --to DIR` keeps every intact record (docs/DEPLOY.md)"
        ),
    };
    for c in m.closed.iter().filter(|c| c.segment >= base) {
        let path = files::segment_path(dir, c.segment);
        let size = std::fs::metadata(&path).map(|m| m.len()).ok();
        match size {
            _ if !segments.contains(&c.segment) => {
                return Err(damaged(
                    c.segment,
                    0,
                    format!(
                        "missing: the manifest lists it, closed at {} bytes holding {} acknowledged events",
                        c.bytes, c.records
                    ),
                ))
            }
            Some(size) if size != c.bytes => {
                let lost = noted_after(dir, c.segment, size)?
                    .map_or_else(|| "some".to_string(), |(after, _)| after.to_string());
                return Err(damaged(
                    c.segment,
                    size.min(c.bytes),
                    format!(
                        "{size} bytes long, where it was closed at {} holding {} acknowledged \
                         events: something cut or changed it since ({lost} acknowledged events \
                         after byte {})",
                        c.bytes,
                        c.records,
                        size.min(c.bytes)
                    ),
                ));
            }
            _ => {}
        }
    }
    if m.current >= base && !segments.contains(&m.current) {
        let held = match noted_after(dir, m.current, 0)? {
            Some((_, total)) => format!("{total} acknowledged events, by its note"),
            None => "acknowledged events (how many is unknown: its note is gone too)".into(),
        };
        return Err(damaged(
            m.current,
            0,
            format!(
                "missing: the manifest names it as the segment being written, and it held {held}"
            ),
        ));
    }
    Ok(())
}

/// Refuse a segment shorter than its note says its acknowledged batches reach: cut at a batch
/// boundary it would read as whole (a crash cuts only a write not yet acknowledged).
pub(super) fn check_note(dir: &Path, n: u64) -> Result<(), StoreError> {
    let path = files::segment_path(dir, n);
    let size = std::fs::metadata(&path)
        .map_err(|e| files::io_at(&path, e))?
        .len();
    let Some(lines) = files::read_note(dir, n)? else {
        return Ok(());
    };
    let Some(last) = lines.last() else {
        return Ok(());
    };
    if size >= last.end {
        return Ok(());
    }
    let (after, _) = noted_after(dir, n, size)?.unwrap_or((0, 0));
    Err(StoreError::Damaged {
        file: path.display().to_string(),
        offset: size,
        message: format!(
            "cut: {size} bytes long, where its note says acknowledged batches reach byte {}: \
             {after} acknowledged events after byte {size} are gone (a crash cuts only a write \
             never acknowledged). `loopguard store verify` says which tasks lost which events; \
             `loopguard store salvage --to DIR` keeps every intact record (docs/DEPLOY.md)",
            last.end
        ),
    })
}
