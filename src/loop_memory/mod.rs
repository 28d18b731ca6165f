//! Cross-task loop memory (learning from resolved loops): loops seen in one task are kept with their
//! embedding, and when the task is resolved, with how it was resolved; a loop in another task
//! that looks like one of them is told "this looked like X, which was resolved by Y".
//!
//! - An HNSW index (hnsw_rs, dot-product distance over the L2-normalised embeddings) answers
//!   "which stored loops are closest to this text" once there are more than
//!   `memory.exact_search_max_records`; below that, comparing against every record is exact and
//!   faster (measured: ~1.5 ms brute force vs ~2.1 ms HNSW at 10k, 14 ms vs 4.2 ms at 100k).
//! - Records and their vectors are persisted through a [`LoopStore`]: a sled tree of the embedded
//!   store ([`SledLoops`], one key per record), or PostgreSQL shared by many replicas
//!   (`store::postgres::PgLoops`), whose changes each replica applies to its own records and
//!   index after its own writes and every `memory.sync_interval_ms` ([`LoopMemory::sync`]). The
//!   index is built from the records at start-up, on a background thread: building takes minutes
//!   at the default bound (docs/PERFORMANCE.md), and until it is done searches compare against
//!   every record (exact, ~1 ms per 10k records), so start-up is not held up.
//! - The memory is bounded: past `memory.max_records` the oldest records are evicted. hnsw_rs
//!   cannot delete points, so evicted points are filtered out of searches and the index is
//!   rebuilt from the live records once a quarter of its points are dead — also in the
//!   background, the old index answering meanwhile: a rebuild under the lock would stall every
//!   verdict that consults the memory for as long as the build takes.

use crate::config::MemoryConfig;
use crate::embed::{cosine, Vector};
use crate::verdict::{LoopKind, Resolution, SimilarLoop};
use hnsw_rs::prelude::{Distance, Hnsw};
use serde::{Deserialize, Serialize};
pub use sled_loops::SledLoops;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
pub use store::{Changes, LoopStore, MemoryFuture};

mod sled_loops;
mod store;

/// One loop as remembered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LoopRecord {
    pub id: u64,
    /// The root task the loop happened in.
    pub task_id: String,
    pub agent_id: Option<String>,
    pub kind: crate::verdict::LoopKind,
    /// For tool-call loops.
    pub tool: Option<String>,
    /// The event's text as compared (normalised, trimmed).
    pub text: String,
    /// Unix seconds.
    pub ts: i64,
    /// True when the gate fired on this loop.
    pub gated: bool,
    pub resolution: Option<Resolution>,
}

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("loop memory storage: {0}")]
    Io(String),
}

/// 1 - dot product of L2-normalised vectors, clamped at 0. (hnsw_rs's own `DistDot` asserts
/// the result is not negative, which float rounding on two equal vectors breaks.)
#[derive(Debug, Clone, Copy, Default)]
pub struct DotDistance;

impl Distance<f32> for DotDistance {
    fn eval(&self, va: &[f32], vb: &[f32]) -> f32 {
        (1.0 - cosine(va, vb)).max(0.0)
    }
}

struct Inner {
    index: Hnsw<'static, f32, DotDistance>,
    /// Points in the index, dead ones included.
    indexed: usize,
    records: HashMap<u64, (LoopRecord, Vector)>,
    by_task: HashMap<String, Vec<u64>>,
    /// Live records in id order, oldest first: the eviction order.
    order: VecDeque<u64>,
    next_id: u64,
    /// False while the index does not hold the live records yet (the start-up build): searches
    /// then compare against every record instead.
    index_ready: bool,
    /// A background rebuild is under way.
    rebuilding: bool,
    /// The build whose index may be installed: a build started before a reload, or before
    /// another build, is thrown away when it finishes.
    generation: u64,
    /// Records added since the running build took its snapshot: the new index gets them too.
    added_since_snapshot: Vec<u64>,
    /// Bumped by every change (a write lock taken): a listing computed at one count is still
    /// the answer while the count has not moved.
    changes: u64,
}

impl Inner {
    fn new(cfg: &MemoryConfig) -> Inner {
        Inner {
            index: new_index(cfg, cfg.max_records),
            indexed: 0,
            records: HashMap::new(),
            by_task: HashMap::new(),
            order: VecDeque::new(),
            next_id: 1,
            changes: 0,
            index_ready: true,
            rebuilding: false,
            generation: 0,
            added_since_snapshot: Vec::new(),
        }
    }

    /// The live records' vectors, oldest first: what a rebuilt index is made of.
    fn snapshot(&self) -> Vec<(Vector, u64)> {
        self.order
            .iter()
            .map(|id| (self.records[id].1.clone(), *id))
            .collect()
    }

    /// Start a build: its generation and the snapshot to build from.
    fn begin_build(&mut self) -> (u64, Vec<(Vector, u64)>) {
        self.rebuilding = true;
        self.generation += 1;
        self.added_since_snapshot.clear();
        (self.generation, self.snapshot())
    }

    /// Swap in an index built from a snapshot of `built` records by build `generation`, adding
    /// the loops remembered while it was built. False when that build was superseded.
    fn install(
        &mut self,
        index: Hnsw<'static, f32, DotDistance>,
        built: usize,
        generation: u64,
    ) -> bool {
        if generation != self.generation {
            return false;
        }
        let mut added = 0;
        for id in std::mem::take(&mut self.added_since_snapshot) {
            if let Some((_, v)) = self.records.get(&id) {
                index.insert_slice((v, id as usize));
                added += 1;
            }
        }
        self.index = index;
        self.indexed = built + added;
        self.index_ready = true;
        self.rebuilding = false;
        true
    }

    /// Add a record (its id set). `index_now`: into the index at once; otherwise a build that
    /// is about to start takes it.
    fn add(&mut self, record: LoopRecord, vector: Vector, index_now: bool) {
        let id = record.id;
        self.next_id = self.next_id.max(id + 1);
        self.by_task
            .entry(record.task_id.clone())
            .or_default()
            .push(id);
        // Ids mostly arrive in order; a shared store's may not quite.
        if self.order.back().is_none_or(|last| *last < id) {
            self.order.push_back(id);
        } else {
            let at = self.order.partition_point(|o| *o < id);
            self.order.insert(at, id);
        }
        if index_now {
            self.index.insert_slice((&vector, id as usize));
            self.indexed += 1;
            if self.rebuilding {
                self.added_since_snapshot.push(id);
            }
        }
        self.records.insert(id, (record, vector));
    }

    /// Forget records (their points stay in the index, filtered out of searches).
    fn remove(&mut self, ids: &[u64]) {
        if !ids.is_empty() {
            self.changes += 1;
        }
        let mut gone = std::collections::HashSet::new();
        for id in ids {
            if let Some((r, _)) = self.records.remove(id) {
                if let Some(task_ids) = self.by_task.get_mut(&r.task_id) {
                    task_ids.retain(|i| i != id);
                    if task_ids.is_empty() {
                        self.by_task.remove(&r.task_id);
                    }
                }
                gone.insert(*id);
            }
        }
        if !gone.is_empty() {
            self.order.retain(|id| !gone.contains(id));
        }
    }

    /// Forget everything (a shared store's reload).
    fn clear(&mut self, cfg: &MemoryConfig) {
        let (next_id, generation) = (self.next_id, self.generation);
        *self = Inner::new(cfg);
        self.next_id = next_id;
        // Builds under way are for records no longer held.
        self.generation = generation + 1;
    }

    /// A loop of the same task and kind this close is stored already.
    fn has_near_duplicate(&self, record: &LoopRecord, vector: &[f32], dedupe: f32) -> bool {
        self.by_task.get(&record.task_id).is_some_and(|ids| {
            ids.iter().any(|id| {
                self.records
                    .get(id)
                    .is_some_and(|(r, v)| r.kind == record.kind && cosine(v, vector) >= dedupe)
            })
        })
    }
}

fn build_index(cfg: &MemoryConfig, snapshot: &[(Vector, u64)]) -> Hnsw<'static, f32, DotDistance> {
    let index = new_index(cfg, cfg.max_records);
    let batch: Vec<(&[f32], usize)> = snapshot
        .iter()
        .map(|(v, id)| (&v[..], *id as usize))
        .collect();
    index.parallel_insert_slice(&batch);
    index
}

/// Changes applied at once (a reload, a replica catching up) are indexed by a background build
/// rather than one insert at a time under the lock.
const BULK_APPLY: usize = 512;

/// The cross-task loop memory. Cheap to share behind an `Arc`.
pub struct LoopMemory {
    cfg: MemoryConfig,
    store: Option<Arc<dyn LoopStore>>,
    inner: Arc<RwLock<Inner>>,
    /// The background index build, if one was started.
    rebuild: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The latest resolution of each task, so a loop remembered after its task was resolved
    /// (its embedding was computed in the background) still gets it.
    resolutions: Mutex<HashMap<String, Resolution>>,
    /// With a shared store: the last change applied. Its lock keeps syncs in order.
    cursor: tokio::sync::Mutex<u64>,
    /// The last listing per (task, loop kind, text): a loop repeated word for word asks for the
    /// same neighbours again, and while the memory has not changed they are the same (see
    /// [`LoopMemory::listing`]).
    listings: Mutex<lru::LruCache<ListingKey, (u64, Vec<SimilarLoop>)>>,
}

/// A kept listing's key: the task, the loop's kind and the key of its text.
type ListingKey = (String, LoopKind, u64);

/// Listings kept for repeated loops.
const LISTINGS_KEPT: usize = 4096;

/// Resolutions kept for loops still being remembered.
const PENDING_RESOLUTIONS: usize = 10_000;

pub(crate) fn io(e: impl std::fmt::Display) -> MemoryError {
    MemoryError::Io(e.to_string())
}

fn new_index(cfg: &MemoryConfig, capacity: usize) -> Hnsw<'static, f32, DotDistance> {
    // 16 layers is hnsw_rs's maximum and plenty for millions of points.
    Hnsw::new(
        cfg.max_connections.clamp(4, 255),
        capacity.max(1024),
        16,
        cfg.ef_construction.max(16),
        DotDistance,
    )
}

/// A record and its vector as one sled value: JSON length, JSON, then the f32s little-endian.
pub(crate) fn encode(record: &LoopRecord, vector: &[f32]) -> Vec<u8> {
    let json = serde_json::to_vec(record).expect("a loop record serialises");
    let mut out = Vec::with_capacity(4 + json.len() + vector.len() * 4);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&vector_bytes(vector));
    out
}

pub(crate) fn decode(bytes: &[u8]) -> Option<(LoopRecord, Vector)> {
    let n = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let record: LoopRecord = serde_json::from_slice(bytes.get(4..4 + n)?).ok()?;
    Some((record, vector_from_bytes(bytes.get(4 + n..)?)?))
}

/// A vector as f32s little-endian (how every store keeps it).
pub fn vector_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The inverse of [`vector_bytes`]; `None` when the length is not a whole number of f32s.
pub fn vector_from_bytes(bytes: &[u8]) -> Option<Vector> {
    if bytes.len() % 4 != 0 {
        return None;
    }
    let v: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    Some(Vector::from(v))
}

fn rfc3339(ts: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(ts)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

impl LoopMemory {
    /// An in-memory loop memory (lost at exit).
    pub fn in_memory(cfg: MemoryConfig) -> Self {
        LoopMemory {
            inner: Arc::new(RwLock::new(Inner::new(&cfg))),
            cfg,
            store: None,
            rebuild: Mutex::new(None),
            resolutions: Mutex::new(HashMap::new()),
            cursor: tokio::sync::Mutex::new(0),
            listings: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(LISTINGS_KEPT).expect("non-zero"),
            )),
        }
    }

    /// A loop memory persisted in `store`. Its records are usable at once; the index is built
    /// from them in the background. A shared store that cannot be reached yet is not an error:
    /// the memory starts empty and loads everything on its first sync ([`LoopMemory::sync`]).
    pub async fn open(cfg: MemoryConfig, store: Arc<dyn LoopStore>) -> Result<Self, MemoryError> {
        let mem = LoopMemory {
            store: Some(Arc::clone(&store)),
            ..LoopMemory::in_memory(cfg)
        };
        match store.load().await {
            Ok(all) => {
                *mem.cursor.lock().await = all.cursor;
                mem.apply(all);
            }
            Err(e) if store.shared() => {
                tracing::warn!(error = %e, "loop memory not loaded yet; it loads once the store answers");
            }
            Err(e) => return Err(e),
        }
        Ok(mem)
    }

    /// A loop memory persisted in a sled tree (the embedded store's).
    pub async fn open_sled(cfg: MemoryConfig, tree: sled::Tree) -> Result<Self, MemoryError> {
        LoopMemory::open(cfg, Arc::new(SledLoops::new(tree))).await
    }

    /// Apply a store's changes to what this process holds.
    fn apply(&self, changes: Changes) {
        let mut inner = self.inner.write().expect("memory lock");
        if changes.reload || !changes.upserts.is_empty() {
            inner.changes += 1;
        }
        if changes.reload {
            inner.clear(&self.cfg);
        }
        inner.remove(&changes.removed);
        let bulk = changes.reload || changes.upserts.len() > BULK_APPLY;
        let mut added = 0;
        for (record, vector) in changes.upserts {
            match inner.records.get_mut(&record.id) {
                // A change to a record held (its resolution); the vector does not change.
                Some(held) => held.0 = record,
                None => {
                    inner.add(record, vector, !bulk);
                    added += 1;
                }
            }
        }
        if bulk && added > 0 {
            inner.index_ready = false;
            self.start_rebuild(&mut inner);
        } else {
            self.maybe_rebuild(&mut inner);
        }
    }

    /// Apply what changed in a shared store since the last sync (a no-op for other stores).
    /// Runs after this process's own writes and every `memory.sync_interval_ms` (see
    /// [`LoopMemory::start_sync`]).
    pub async fn sync(&self) -> Result<(), MemoryError> {
        let Some(store) = self.store.as_ref().filter(|s| s.shared()) else {
            return Ok(());
        };
        let mut cursor = self.cursor.lock().await;
        let changes = store.changes(*cursor).await?;
        let next = changes.cursor;
        self.apply(changes);
        *cursor = next;
        Ok(())
    }

    /// With a shared store, sync every `every` in the background for as long as the memory
    /// lives, so loops remembered by other replicas are found here within about that long.
    pub fn start_sync(self: &Arc<Self>, every: std::time::Duration) {
        if !self.store.as_ref().is_some_and(|s| s.shared()) {
            return;
        }
        let memory = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut failing = false;
            loop {
                tokio::time::sleep(every).await;
                let Some(mem) = memory.upgrade() else { return };
                match mem.sync().await {
                    Ok(()) if failing => {
                        failing = false;
                        tracing::info!(event = "loop_memory_sync", "loop memory sync resumed");
                    }
                    Ok(()) => {}
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(error = %e, "loop memory sync failed; retrying");
                    }
                    Err(_) => {}
                }
            }
        });
    }

    /// Add records that already have ids (a bulk import, a benchmark), building the index now
    /// with both cores. Not persisted.
    pub fn load(&self, items: Vec<(LoopRecord, Vector)>) {
        let mut inner = self.inner.write().expect("memory lock");
        inner.changes += 1;
        {
            let batch: Vec<(&[f32], usize)> =
                items.iter().map(|(r, v)| (&v[..], r.id as usize)).collect();
            inner.index.parallel_insert_slice(&batch);
        }
        inner.indexed += items.len();
        for (record, vector) in items {
            inner.add(record, vector, false);
        }
    }

    pub fn config(&self) -> &MemoryConfig {
        &self.cfg
    }

    /// Live records.
    pub fn len(&self) -> usize {
        self.inner.read().expect("memory lock").records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A background index build is under way (start-up, or the rebuild after evictions).
    pub fn index_building(&self) -> bool {
        self.inner.read().expect("memory lock").rebuilding
    }

    /// Points in the index, evicted ones included (the rebuild bound).
    pub fn indexed_points(&self) -> usize {
        self.inner.read().expect("memory lock").indexed
    }

    fn shared_store(&self) -> Option<&Arc<dyn LoopStore>> {
        self.store.as_ref().filter(|s| s.shared())
    }

    /// Bring in a shared store's changes after a write of ours; a failure here is only late.
    async fn catch_up(&self) {
        if let Err(e) = self.sync().await {
            tracing::warn!(error = %e, "loop memory sync after a write failed; the next one catches up");
        }
    }

    /// Remember a loop. A task's loop that is (nearly) one it already stored is not stored again:
    /// the memory holds distinct loops, not every repetition.
    pub async fn remember(
        &self,
        mut record: LoopRecord,
        vector: Vector,
    ) -> Result<Option<u64>, MemoryError> {
        let dedupe = self.cfg.dedupe_similarity;
        if record.resolution.is_none() {
            let resolutions = self.resolutions.lock().expect("resolutions lock");
            if let Some(r) = resolutions.get(&record.task_id) {
                if r.ts >= record.ts {
                    record.resolution = Some(r.clone());
                }
            }
        }
        if let Some(store) = self.shared_store() {
            {
                let inner = self.inner.read().expect("memory lock");
                if inner.has_near_duplicate(&record, &vector, dedupe) {
                    return Ok(None);
                }
            }
            let id = store.insert(&record, &vector, self.cfg.max_records).await?;
            // Ours comes back with the other replicas' changes, in the store's order.
            self.catch_up().await;
            return Ok(Some(id));
        }
        // This process decides: the duplicate check, the id and the evictions under one lock.
        let evicted = {
            let mut inner = self.inner.write().expect("memory lock");
            if inner.has_near_duplicate(&record, &vector, dedupe) {
                return Ok(None);
            }
            inner.changes += 1;
            record.id = inner.next_id;
            inner.add(record.clone(), vector.clone(), true);
            let evicted = self.evict(&mut inner);
            self.maybe_rebuild(&mut inner);
            evicted
        };
        if let Some(store) = &self.store {
            if let Err(e) = store.insert(&record, &vector, self.cfg.max_records).await {
                self.inner
                    .write()
                    .expect("memory lock")
                    .remove(&[record.id]);
                return Err(e);
            }
            if !evicted.is_empty() {
                store.remove(None, &evicted).await?;
            }
        }
        Ok(Some(record.id))
    }

    /// Past `max_records`, the oldest records go; returns their ids.
    fn evict(&self, inner: &mut Inner) -> Vec<u64> {
        let excess = inner.records.len().saturating_sub(self.cfg.max_records);
        let oldest: Vec<u64> = inner.order.iter().take(excess).copied().collect();
        inner.remove(&oldest);
        oldest
    }

    /// Dead points still cost memory and search time: rebuild once a quarter are dead.
    fn maybe_rebuild(&self, inner: &mut Inner) {
        let dead = inner.indexed.saturating_sub(inner.records.len());
        if dead > 0 && dead * 4 > inner.indexed && !inner.rebuilding {
            self.start_rebuild(inner);
        }
    }

    /// Build a new index from the live records on a background thread, then swap it in.
    fn start_rebuild(&self, inner: &mut Inner) {
        let (generation, snapshot) = inner.begin_build();
        let shared = Arc::clone(&self.inner);
        let cfg = self.cfg.clone();
        let spawned = std::thread::Builder::new()
            .name("loop-memory-index".into())
            .spawn(move || {
                let started = std::time::Instant::now();
                let index = build_index(&cfg, &snapshot);
                let mut inner = shared.write().expect("memory lock");
                inner.changes += 1;
                if inner.install(index, snapshot.len(), generation) {
                    tracing::info!(
                        event = "loop_memory_indexed",
                        records = inner.indexed,
                        seconds = started.elapsed().as_secs_f64()
                    );
                }
            });
        match spawned {
            Ok(handle) => *self.rebuild.lock().expect("rebuild lock") = Some(handle),
            Err(e) => {
                // Searches stay correct on the old index (or by comparing every record).
                tracing::warn!(error = %e, "could not start the loop memory index build");
                inner.rebuilding = false;
            }
        }
    }

    /// Block until a background index build has finished (tests, benchmarks).
    pub fn wait_for_index(&self) {
        loop {
            let handle = self.rebuild.lock().expect("rebuild lock").take();
            match handle {
                Some(h) => {
                    if h.join().is_err() {
                        tracing::error!("the loop memory index build panicked");
                    }
                }
                None => return,
            }
        }
    }

    /// Attach a resolution to every unresolved loop of a task.
    pub async fn resolve(
        &self,
        task_id: &str,
        resolution: Resolution,
    ) -> Result<usize, MemoryError> {
        {
            let mut pending = self.resolutions.lock().expect("resolutions lock");
            if pending.len() >= PENDING_RESOLUTIONS {
                pending.clear();
            }
            pending.insert(task_id.to_string(), resolution.clone());
        }
        if let Some(store) = self.shared_store() {
            let n = store.resolve(task_id, &resolution, &[]).await?;
            self.catch_up().await;
            return Ok(n);
        }
        let updated: Vec<(LoopRecord, Vector)> = {
            let mut inner = self.inner.write().expect("memory lock");
            inner.changes += 1;
            let ids = inner.by_task.get(task_id).cloned().unwrap_or_default();
            let mut updated = Vec::new();
            for id in ids {
                if let Some((r, v)) = inner.records.get_mut(&id) {
                    if r.resolution.is_none() {
                        r.resolution = Some(resolution.clone());
                        updated.push((r.clone(), v.clone()));
                    }
                }
            }
            updated
        };
        if let Some(store) = &self.store {
            store.resolve(task_id, &resolution, &updated).await?;
        }
        Ok(updated.len())
    }

    /// Forget a task's loops (the task was deleted).
    pub async fn forget_task(&self, task_id: &str) -> Result<(), MemoryError> {
        let ids = {
            let mut inner = self.inner.write().expect("memory lock");
            inner.changes += 1;
            let ids = inner.by_task.get(task_id).cloned().unwrap_or_default();
            inner.remove(&ids);
            ids
        };
        if let Some(store) = &self.store {
            store.remove(Some(task_id), &ids).await?;
            if store.shared() {
                self.catch_up().await;
            }
        }
        Ok(())
    }

    /// The `k` stored loops closest to `vector` with at least `min_similarity`, leaving out the
    /// loops of `exclude_task`; resolved ones first among equals.
    /// How many changes the memory has seen: a listing taken at this count is still right
    /// while it holds.
    pub fn changes(&self) -> u64 {
        self.inner.read().expect("memory lock").changes
    }

    /// The listing kept for `task`'s loop of `kind` on the text with key `text`, if the memory
    /// has not changed since it was made.
    pub fn listing(&self, task: &str, kind: LoopKind, text: u64) -> Option<Vec<SimilarLoop>> {
        let changes = self.changes();
        let mut listings = self.listings.lock().expect("listings lock");
        let (at, listing) = listings.get(&(task.to_string(), kind, text))?;
        (*at == changes).then(|| listing.clone())
    }

    /// Keep a listing made when the memory had seen `changes` changes.
    pub fn keep_listing(
        &self,
        task: &str,
        kind: LoopKind,
        text: u64,
        changes: u64,
        listing: &[SimilarLoop],
    ) {
        self.listings
            .lock()
            .expect("listings lock")
            .put((task.to_string(), kind, text), (changes, listing.to_vec()));
    }

    pub fn similar(
        &self,
        vector: &[f32],
        k: usize,
        min_similarity: f32,
        exclude_task: Option<&str>,
    ) -> Vec<SimilarLoop> {
        if k == 0 {
            return Vec::new();
        }
        let inner = self.inner.read().expect("memory lock");
        let live = |id: &usize| {
            inner
                .records
                .get(&(*id as u64))
                .is_some_and(|(r, _)| Some(r.task_id.as_str()) != exclude_task)
        };
        // Ask for more than k: several neighbours may be loops of one task.
        let want = (k * 4).max(k + 8);
        let exact = !inner.index_ready || inner.records.len() <= self.cfg.exact_search_max_records;
        let found: Vec<u64> = if !exact {
            let ef = self.cfg.ef_search.max(want);
            inner
                .index
                .search_filter(vector, want, ef, Some(&live))
                .into_iter()
                .map(|n| n.d_id as u64)
                .collect()
        } else {
            let mut scored: Vec<(f32, u64)> = inner
                .records
                .iter()
                .filter(|(id, _)| live(&(**id as usize)))
                .map(|(id, (_, v))| (cosine(v, vector), *id))
                .collect();
            let want = want.min(scored.len());
            if want > 0 {
                scored.select_nth_unstable_by(want - 1, |a, b| b.0.total_cmp(&a.0));
            }
            scored.truncate(want);
            scored.into_iter().map(|(_, id)| id).collect()
        };
        let mut out: Vec<SimilarLoop> = Vec::new();
        let mut seen_tasks: Vec<&str> = Vec::new();
        for id in found {
            let Some((r, v)) = inner.records.get(&id) else {
                continue;
            };
            let sim = cosine(v, vector);
            if sim < min_similarity || seen_tasks.contains(&r.task_id.as_str()) {
                continue;
            }
            seen_tasks.push(&r.task_id);
            out.push(SimilarLoop {
                task_id: r.task_id.clone(),
                kind: r.kind,
                tool: r.tool.clone(),
                text: r.text.clone(),
                similarity: sim,
                seen_at: rfc3339(r.ts),
                resolution: r.resolution.clone(),
            });
        }
        out.sort_by(|a, b| b.similarity.total_cmp(&a.similarity));
        out.truncate(k);
        out
    }

    /// The `limit` loops remembered last, newest first, with their resolutions (the
    /// service's `GET /v1/loops`).
    pub fn recent(&self, limit: usize) -> Vec<LoopRecord> {
        let inner = self.inner.read().expect("memory lock");
        inner
            .order
            .iter()
            .rev()
            .filter_map(|id| inner.records.get(id).map(|(r, _)| r.clone()))
            .take(limit)
            .collect()
    }

    /// Every live record (for export and tests).
    pub fn records(&self) -> Vec<LoopRecord> {
        let inner = self.inner.read().expect("memory lock");
        inner
            .order
            .iter()
            .filter_map(|id| inner.records.get(id).map(|(r, _)| r.clone()))
            .collect()
    }

    /// Make the persisted records durable.
    pub async fn flush(&self) -> Result<(), MemoryError> {
        match &self.store {
            Some(store) => store.flush().await,
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
