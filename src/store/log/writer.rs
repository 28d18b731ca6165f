//! The task log's writer thread: group commit, full-disk retries, segment rotation, snapshots,
//! and evicted states written to the spill file.

use super::*;

/// The writer thread: group commit, full-disk retries, segment rotation, snapshots, and
/// writing evicted states to the spill file.
pub(super) struct Writer {
    pub(super) shared: Arc<Shared>,
    pub(super) file: File,
    pub(super) segment: u64,
    pub(super) seg_bytes: u64,
    /// Records in the current segment.
    pub(super) seg_records: u64,
    /// The current segment's note (`None` after it could not be written: notes are a check,
    /// not the log, so the log goes on without one and the next start writes it afresh).
    pub(super) note: Option<File>,
    /// The segments closed since the newest snapshot, for the manifest.
    pub(super) closed: Vec<files::ClosedSegment>,
    /// The current segment's records so far: what its next batch is compressed against.
    pub(super) history: files::History,
    pub(super) done: tokio::sync::watch::Sender<Done>,
    pub(super) spill: Spill,
    /// No rotation before this (after one failed for want of space).
    pub(super) rotate_after: Instant,
}

/// Every task as it stood at the end of a segment, for the snapshot that replaces it: where
/// its state can be read (a page, or memory), taken under the lock without copying states.
pub(super) struct View {
    pub(super) items: Vec<ViewItem>,
    pub(super) files: HashMap<u32, (Arc<File>, PathBuf)>,
    /// `Index::logged` and `Index::dead` when it was taken.
    pub(super) logged: u64,
    pub(super) dead: u64,
}

pub(super) struct ViewItem {
    pub(super) root: Arc<str>,
    pub(super) version: u64,
    pub(super) updated_ts: i64,
    pub(super) subtasks: Vec<Arc<str>>,
    pub(super) src: Src,
}

pub(super) enum Src {
    Page(Loc),
    Memory(Task),
}

/// The file number a task's place in the snapshot being written carries until the snapshot
/// has one.
pub(super) const NEW_SNAPSHOT: u32 = u32::MAX;

impl View {
    pub(super) fn take(index: &Index) -> View {
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
                subtasks: index.subtasks.get(&**root).cloned().unwrap_or_default(),
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
pub(super) fn wants_snapshot(index: &Index, seg_bytes: u64, segment_bytes: u64) -> bool {
    seg_bytes >= segment_bytes || (index.dead >= (1 << 20) && index.dead * 2 >= index.logged)
}

impl Writer {
    /// Returns the segment it appended to last, once stopped cleanly.
    pub(super) fn run(mut self) -> Option<u64> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut spare = Vec::with_capacity(64 << 10);
        let mut out = Vec::with_capacity(64 << 10);
        let cached = self.shared.opts.cached_tasks.max(1);
        loop {
            let (batch, notes, generation, view) = {
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
                let notes = std::mem::take(&mut inner.pending_notes);
                let rotate =
                    wants_snapshot(&inner.index, self.seg_bytes, self.shared.opts.segment_bytes)
                        && !inner.snapshotting
                        && !inner.stop
                        && Instant::now() >= self.rotate_after;
                let view = rotate.then(|| {
                    inner.snapshotting = true;
                    View::take(&inner.index)
                });
                (batch, notes, inner.appended, view)
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
            self.note_batch(notes);
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
    pub(super) fn write_held(&mut self, out: &[u8], generation: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        // From 50 ms, doubling, at most a second apart: a freed disk is noticed soon.
        let mut backoff = crate::retry::RetryPolicy {
            floor: Duration::from_millis(50),
            cap: Duration::from_secs(1),
            ..Default::default()
        }
        .backoff();
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
                .wait_timeout(inner, backoff.next(None))
                .expect("task log lock");
            drop(guard);
        }
    }

    /// Append the line of a batch just synced to the segment's note.
    fn note_batch(&mut self, tasks: Vec<(String, Option<u64>)>) {
        self.seg_records += tasks.len() as u64;
        let Some(note) = &mut self.note else {
            return;
        };
        let line = files::NoteLine {
            end: self.seg_bytes,
            records: self.seg_records,
            tasks,
        };
        if let Err(e) = files::append_note(note, &line) {
            // A note is a check on the log, not the log: without it the segment is still
            // whole, and the next start writes it afresh from what the segment holds.
            tracing::warn!(error = %e, segment = self.segment, "cannot write the task log segment's note; going on without it until the next start");
            self.note = None;
        }
    }

    pub(super) fn fail(&self, why: String, generation: u64) {
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
    pub(super) fn evict(&mut self, cached: usize) {
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
    pub(super) fn rotate(&mut self, view: View) -> Result<(), StoreError> {
        let next = self.segment + 1;
        let dir = self.shared.dir.clone();
        let path = files::segment_path(&dir, next);
        let file = files::open_segment(&path).inspect_err(|_| {
            let _ = std::fs::remove_file(&path);
        })?;
        files::sync_dir(&dir)?;
        // The closed segment's note is synced, and the manifest says it is closed (its length
        // and records) and which segment is written now, before anything is appended to it.
        if let Some(note) = &self.note {
            let _ = note.sync_data();
        }
        let mut closed = self.closed.clone();
        closed.push(files::ClosedSegment {
            segment: self.segment,
            bytes: self.seg_bytes,
            records: self.seg_records,
        });
        // Segments the newest snapshot holds need not be listed (they are deleted with it).
        if let Some(&snap) = files::list(&dir)?.snapshots.last() {
            closed.retain(|c| c.segment >= snap);
        }
        let manifest = files::Manifest {
            closed: closed.clone(),
            current: next,
        };
        let note = files::open_note(&dir, next).and_then(|note| {
            files::write_manifest(&dir, &manifest)?;
            Ok(note)
        });
        let note = match note {
            Ok(note) => note,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                let _ = std::fs::remove_file(files::note_path(&dir, next));
                return Err(e);
            }
        };
        self.closed = closed;
        self.note = Some(note);
        self.seg_records = 0;
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
pub(super) fn write_snapshot(dir: &Path, n: u64, view: &mut View) -> Result<(), StoreError> {
    // Memory first, then pages in file order: each block read once.
    view.items.sort_by_key(|i| match i.src {
        Src::Memory(_) => (0, 0, 0, 0),
        Src::Page(l) => (1, l.file, l.block.get(), l.slot),
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
                        .is_none_or(|(f, b, _)| (*f, *b) != (at.file, at.block.get()))
                    {
                        files::read_block(file, fpath, at.block.get(), &mut raw)?;
                        block = Some((at.file, at.block.get(), std::mem::take(&mut raw)));
                    }
                    let (_, _, bytes) = block.as_ref().expect("just read");
                    let payload =
                        files::record_at(bytes, at.slot).map_err(|m| StoreError::Damaged {
                            file: fpath.display().to_string(),
                            offset: at.block.get(),
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
pub(super) fn repoint(shared: &Shared, n: u64, view: View) -> Result<(), StoreError> {
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
pub(super) fn remove_covered(dir: &Path, n: u64, listing: &files::Listing) {
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
    let old_notes = listing
        .notes
        .iter()
        .filter(|&&s| s < n)
        .map(|&s| files::note_path(dir, s));
    let mut removed = false;
    for path in old_segments.chain(old_snapshots).chain(old_notes) {
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
