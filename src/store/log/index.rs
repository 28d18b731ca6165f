//! What the task log keeps in memory: a small entry per task (its version, last update, where
//! its state can be read back), the subtask links, and the states of at most `cached` tasks.
//! Every other task's state is on disk in a page file — the newest snapshot, or the spill file
//! its state was written to when it left the cache — and is read back when its task returns.
//! Memory is bounded by the cache, plus the entries (100–200 bytes per task with its id and
//! the map's spare room; docs/PERFORMANCE.md#bounded-memory-and-subtasks).
//!
//! Invariant: a task's current state is in the cache, on its way to the spill file
//! (`spilling`), or at `Entry::page` (or several of these).

use super::files;
use super::{Record, RecordRef};
use crate::audit::AuditRecord;
use crate::state::TaskState;
use crate::store::StoreError;
use lru::LruCache;
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Raw bytes of records per page block: reading one task back decompresses one block.
pub const BLOCK_BYTES: usize = 32 << 10;

/// One task's state in memory (without embeddings) and the audit records kept.
#[derive(Clone, Debug, PartialEq)]
pub struct Task {
    pub state: Arc<TaskState>,
    pub audit: Arc<VecDeque<AuditRecord>>,
}

impl Task {
    /// Add a commit's audit records; the oldest beyond `kept` go.
    pub fn keep_audit(&mut self, audit: &[AuditRecord], kept: usize) {
        if !audit.is_empty() {
            let trail = Arc::make_mut(&mut self.audit);
            trail.extend(audit.iter().cloned());
            let over = trail.len().saturating_sub(kept);
            trail.drain(..over);
        }
    }
}

/// Where a task's state can be read back: record `slot` of the block at `block` of page file
/// `file`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc {
    pub file: u32,
    pub slot: u32,
    /// Never 0 (a block follows the file's header), so `Option<Loc>` takes no more room.
    pub block: NonZeroU64,
}

impl Loc {
    pub fn new(file: u32, block: u64, slot: u32) -> Loc {
        Loc {
            file,
            slot,
            block: NonZeroU64::new(block).expect("a block follows the file's header"),
        }
    }
}

/// A task's entry, kept for every stored task whether its state is in memory or not: what the
/// store's memory grows by per task once the cache is full, so it is kept small (40 bytes; a
/// root's subtasks are in `Index::subtasks`, which only roots that have some take room in).
pub struct Entry {
    pub version: u64,
    pub updated_ts: i64,
    /// Where the state at `version` can be read back; `None` while it is only in memory (and
    /// in the segments' records).
    pub page: Option<Loc>,
    /// Record bytes appended for the task since the newest snapshot: what deleting it leaves
    /// dead in the segments (saturating: past 4 GiB it only decides a snapshot sooner).
    pub logged: u32,
}

/// An open page file: a snapshot, or a spill file (unlinked: it exists only while open).
pub struct PageFile {
    pub file: Arc<File>,
    pub path: PathBuf,
    refs: u64,
}

/// Where to read a task that is not in memory.
pub struct OnDisk {
    pub loc: Loc,
    pub file: Arc<File>,
    pub path: PathBuf,
}

pub enum Lookup {
    Missing,
    Memory(Task),
    Disk(OnDisk),
}

pub struct Index {
    pub entries: HashMap<Arc<str>, Entry>,
    /// Subtask → its root task.
    pub links: HashMap<Arc<str>, Arc<str>>,
    /// Root task → its subtasks (only roots that have some).
    pub subtasks: HashMap<Arc<str>, Vec<Arc<str>>>,
    pub cache: LruCache<Arc<str>, Task>,
    /// Tasks taken out of the cache whose state is being written to the spill file.
    pub spilling: HashMap<Arc<str>, Task>,
    files: HashMap<u32, PageFile>,
    next_file: u32,
    /// Record bytes appended since the newest snapshot, and how many of them belong to tasks
    /// deleted since: when most of the log is dead, a snapshot is taken early.
    pub logged: u64,
    pub dead: u64,
    pub audit_kept: usize,
}

impl Index {
    pub fn new(audit_kept: usize) -> Index {
        Index {
            entries: HashMap::new(),
            links: HashMap::new(),
            subtasks: HashMap::new(),
            cache: LruCache::unbounded(),
            spilling: HashMap::new(),
            files: HashMap::new(),
            next_file: 0,
            logged: 0,
            dead: 0,
            audit_kept,
        }
    }

    /// Register an open page file; entries refer to it by the returned number.
    pub fn add_file(&mut self, file: Arc<File>, path: PathBuf) -> u32 {
        let id = self.next_file;
        self.next_file += 1;
        self.files.insert(
            id,
            PageFile {
                file,
                path,
                refs: 0,
            },
        );
        id
    }

    /// Register `file` again under `id` if every task that referred to it moved on.
    pub fn revive_file(&mut self, id: u32, file: &Arc<File>, path: &Path) {
        self.files.entry(id).or_insert_with(|| PageFile {
            file: Arc::clone(file),
            path: path.to_path_buf(),
            refs: 0,
        });
    }

    pub fn file(&self, id: u32) -> Option<(&Arc<File>, &Path)> {
        self.files.get(&id).map(|f| (&f.file, f.path.as_path()))
    }

    /// Page files open.
    pub fn open_files(&self) -> usize {
        self.files.len()
    }

    /// Close page file `id` if no task refers to it (a snapshot nothing was pointed at).
    pub fn drop_if_unused(&mut self, id: u32) {
        if self.files.get(&id).is_some_and(|f| f.refs == 0) {
            self.files.remove(&id);
        }
    }

    fn retain(&mut self, loc: Loc) {
        if let Some(f) = self.files.get_mut(&loc.file) {
            f.refs += 1;
        }
    }

    fn release(&mut self, loc: Loc) {
        if let Some(f) = self.files.get_mut(&loc.file) {
            f.refs = f.refs.saturating_sub(1);
            if f.refs == 0 {
                // A spill file's space comes back now; a snapshot's when it is deleted.
                self.files.remove(&loc.file);
            }
        }
    }

    /// Point `root`'s entry at `page` (or at nothing: its state is only in memory now).
    pub fn set_page(&mut self, root: &str, page: Option<Loc>) {
        let Some(entry) = self.entries.get_mut(root) else {
            return;
        };
        let old = std::mem::replace(&mut entry.page, page);
        if let Some(new) = page {
            self.retain(new);
        }
        if let Some(old) = old {
            self.release(old);
        }
    }

    fn key(&self, root: &str) -> Arc<str> {
        self.entries
            .get_key_value(root)
            .map(|(k, _)| Arc::clone(k))
            .unwrap_or_else(|| Arc::from(root))
    }

    /// Where `root`'s current state is. A task found in the cache becomes its most recent.
    pub fn lookup(&mut self, root: &str) -> Result<Lookup, StoreError> {
        if let Some(t) = self.cache.get(root) {
            return Ok(Lookup::Memory(t.clone()));
        }
        if let Some(t) = self.spilling.get(root) {
            return Ok(Lookup::Memory(t.clone()));
        }
        let Some(entry) = self.entries.get(root) else {
            return Ok(Lookup::Missing);
        };
        let Some(loc) = entry.page else {
            return Err(StoreError::Corrupt {
                task: root.to_string(),
                message: "its state is neither in memory nor on disk (a bug)".into(),
            });
        };
        let Some((file, path)) = self.file(loc.file) else {
            return Err(StoreError::Corrupt {
                task: root.to_string(),
                message: format!("its page file {} is closed (a bug)", loc.file),
            });
        };
        Ok(Lookup::Disk(OnDisk {
            loc,
            file: Arc::clone(file),
            path: path.to_path_buf(),
        }))
    }

    /// Put a task read back from disk into the cache, if it is still the task's current state.
    pub fn cache_read(&mut self, root: &str, task: &Task) {
        let current = self
            .entries
            .get(root)
            .is_some_and(|e| e.version == task.state.version);
        if current && !self.cache.contains(root) && !self.spilling.contains_key(root) {
            let key = self.key(root);
            self.cache.put(key, task.clone());
        }
    }

    /// Take `root`'s state out of memory (to change it in place and put it back).
    pub fn take_memory(&mut self, root: &str) -> Option<Task> {
        self.cache.pop(root).or_else(|| self.spilling.remove(root))
    }

    /// Drop the least recently used states that are on disk already until the cache holds
    /// `cached`; stops at one that is not (the writer thread spills those).
    pub fn trim_clean(&mut self, cached: usize) {
        while self.cache.len() > cached {
            let Some((root, task)) = self.cache.peek_lru() else {
                return;
            };
            let clean = self
                .entries
                .get(&**root)
                .is_none_or(|e| e.page.is_some() && e.version == task.state.version);
            if !clean {
                return;
            }
            self.cache.pop_lru();
        }
    }

    /// Make `task` the current state of its root: its entry, the cache, what it logged.
    pub fn commit(&mut self, task: Task, logged: u64) {
        let root = task.state.root.as_str();
        let key = self.key(root);
        let (version, updated_ts) = (task.state.version, task.state.updated_ts);
        let entry = self.entries.entry(Arc::clone(&key)).or_insert(Entry {
            version,
            updated_ts,
            page: None,
            logged: 0,
        });
        entry.version = version;
        entry.updated_ts = updated_ts;
        entry.logged = entry
            .logged
            .saturating_add(u32::try_from(logged).unwrap_or(u32::MAX));
        self.logged += logged;
        self.set_page(&key, None);
        self.spilling.remove(&key);
        self.cache.put(key, task);
    }

    /// Link subtask `task` to `root`.
    pub fn link(&mut self, task: &str, root: &str) {
        if self.links.get(task).is_some_and(|r| &**r == root) {
            return;
        }
        let root_key = self.key(root);
        let task_key: Arc<str> = self
            .links
            .get_key_value(task)
            .map(|(k, _)| Arc::clone(k))
            .unwrap_or_else(|| Arc::from(task));
        self.links
            .insert(Arc::clone(&task_key), Arc::clone(&root_key));
        if self.entries.contains_key(root) {
            self.subtasks.entry(root_key).or_default().push(task_key);
        }
    }

    /// How many subtasks are linked to `root`.
    pub fn subtask_count(&self, root: &str) -> usize {
        self.subtasks.get(root).map_or(0, Vec::len)
    }

    /// Forget `root`: its entry, state, and its subtasks' links. True if there was anything.
    pub fn delete(&mut self, root: &str) -> bool {
        self.set_page(root, None);
        let Some(entry) = self.entries.remove(root) else {
            return false;
        };
        self.cache.pop(root);
        self.spilling.remove(root);
        for sub in self.subtasks.remove(root).unwrap_or_default() {
            if self.links.get(&*sub).is_some_and(|r| &**r == root) {
                self.links.remove(&*sub);
            }
        }
        self.dead += u64::from(entry.logged);
        true
    }

    /// Take the least recently used tasks out of the cache until it holds `cached`. Those
    /// whose state is on disk already are simply dropped; the others are returned, to be
    /// written to the spill file (and stay in `spilling` until [`Index::spilled`]).
    pub fn take_victims(&mut self, cached: usize) -> Vec<(Arc<str>, Task)> {
        let mut out = Vec::new();
        while self.cache.len() > cached {
            let Some((root, task)) = self.cache.pop_lru() else {
                break;
            };
            let on_disk = self
                .entries
                .get(&root)
                .is_none_or(|e| e.page.is_some() && e.version == task.state.version);
            if !on_disk {
                self.spilling.insert(Arc::clone(&root), task.clone());
                out.push((root, task));
            }
        }
        out
    }

    /// The victims' states were written at `locs` (or, with `None`, could not be: they go
    /// back into the cache, which then holds more than it should until space comes back).
    pub fn spilled(&mut self, victims: Vec<(Arc<str>, Task)>, locs: Option<Vec<Loc>>) {
        match locs {
            Some(locs) => {
                for ((root, task), loc) in victims.into_iter().zip(locs) {
                    // A commit since then made the written state old.
                    if self.spilling.remove(&root).is_some()
                        && self
                            .entries
                            .get(&root)
                            .is_some_and(|e| e.version == task.state.version)
                    {
                        self.set_page(&root, Some(loc));
                    }
                }
            }
            None => {
                for (root, task) in victims {
                    if self.spilling.remove(&root).is_some() {
                        self.cache.put(root, task);
                    }
                }
            }
        }
    }
}

/// Read a task's record back from a page file.
pub fn read_page(at: &OnDisk) -> Result<Task, StoreError> {
    let mut raw = Vec::new();
    files::read_block(&at.file, &at.path, at.loc.block.get(), &mut raw)?;
    let damaged = |message: String| StoreError::Damaged {
        file: at.path.display().to_string(),
        offset: at.loc.block.get(),
        message,
    };
    let payload = files::record_at(&raw, at.loc.slot).map_err(damaged)?;
    task_of(payload).map_err(damaged)
}

/// A page record's task.
pub fn task_of(payload: &[u8]) -> Result<Task, String> {
    match serde_json::from_slice(payload).map_err(|e| e.to_string())? {
        Record::Task { state, audit, .. } => Ok(Task {
            state: Arc::from(state),
            audit: Arc::new(audit),
        }),
        _ => Err("not a task record".into()),
    }
}

/// Writes task records into page blocks: a snapshot, or a batch of spilled tasks.
pub struct PageWriter {
    raw: Vec<u8>,
    slots: u32,
    /// Compressed blocks not yet handed out.
    pub out: Vec<u8>,
    /// Where the next block starts in the file.
    pub offset: u64,
}

impl PageWriter {
    pub fn new(offset: u64) -> PageWriter {
        PageWriter {
            raw: Vec::with_capacity(2 * BLOCK_BYTES),
            slots: 0,
            out: Vec::with_capacity(BLOCK_BYTES),
            offset,
        }
    }

    fn loc(&self, file: u32) -> Loc {
        Loc::new(file, self.offset + self.out.len() as u64, self.slots)
    }

    /// Add a record (framed) to the block being filled.
    pub fn push(&mut self, record: &impl serde::Serialize) -> Result<(), StoreError> {
        files::frame(&mut self.raw, record)?;
        self.slots += 1;
        Ok(())
    }

    /// Add a task's record; returns where it will be read back.
    pub fn push_task(&mut self, file: u32, task: &Task) -> Result<Loc, StoreError> {
        let loc = self.loc(file);
        self.push(&RecordRef::Task {
            state: &task.state,
            audit: &task.audit,
            subtasks: &[],
        })?;
        Ok(loc)
    }

    /// Add an already framed-and-checked task record, copied from another page file.
    pub fn push_payload(&mut self, file: u32, payload: &[u8]) -> Loc {
        let loc = self.loc(file);
        let len = payload.len() as u32;
        self.raw.extend_from_slice(&len.to_le_bytes());
        self.raw
            .extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        self.raw.extend_from_slice(payload);
        self.slots += 1;
        loc
    }

    /// Close the block once it is big enough (or always, with `force`).
    pub fn end_block(&mut self, force: bool) -> Result<(), StoreError> {
        if self.raw.is_empty() || (!force && self.raw.len() < BLOCK_BYTES) {
            return Ok(());
        }
        files::encode_block(&self.raw, &mut self.out)?;
        self.raw.clear();
        self.slots = 0;
        Ok(())
    }

    /// Hand out the compressed blocks so far (to be written at `offset`), moving `offset` on.
    pub fn take(&mut self) -> Vec<u8> {
        let out = std::mem::take(&mut self.out);
        self.offset += out.len() as u64;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry stays for every stored task, its state in memory or not: once the cache is
    /// full, it is what the store's memory grows by per task.
    #[test]
    fn a_task_entry_stays_small() {
        use std::mem::size_of;
        assert_eq!(size_of::<Option<Loc>>(), size_of::<Loc>());
        assert!(size_of::<Entry>() <= 40, "{} bytes", size_of::<Entry>());
    }

    /// Subtasks are kept by root, apart from the entries: counted once each, and forgotten
    /// with their root.
    #[test]
    fn subtasks_are_counted_and_forgotten_with_their_root() {
        let task = |root: &str| Task {
            state: Arc::new(TaskState::new(root, 0)),
            audit: Arc::default(),
        };
        let mut index = Index::new(10);
        index.commit(task("root"), 10);
        index.commit(task("other"), 10);
        for sub in ["sub-0", "sub-1", "sub-2", "sub-0"] {
            index.link(sub, "root");
        }
        assert_eq!(index.subtask_count("root"), 3);
        assert_eq!(index.subtask_count("other"), 0);
        assert!(index.delete("root"));
        assert_eq!(index.subtask_count("root"), 0);
        assert!(index.links.is_empty() && index.subtasks.is_empty());
        assert_eq!(index.dead, 10, "what the root logged is dead now");
    }
}
