//! Cross-task loop memory (learning from resolved loops): loops seen in one task are kept with their
//! embedding, and when the task is resolved, with how it was resolved; a loop in another task
//! that looks like one of them is told "this looked like X, which was resolved by Y".
//!
//! - An HNSW index (hnsw_rs, dot-product distance over the L2-normalised embeddings) answers
//!   "which stored loops are closest to this text" once there are more than
//!   `memory.exact_search_max_records`; below that, comparing against every record is exact and
//!   faster (measured: ~1.5 ms brute force vs ~2.1 ms HNSW at 10k, 14 ms vs 4.2 ms at 100k).
//! - Records and their vectors are persisted in a sled tree (one key per record); the index is
//!   rebuilt from them at start-up, on a background thread: building takes minutes at the default
//!   bound (docs/PERFORMANCE.md), and until it is done searches compare against every record
//!   (exact, ~1 ms per 10k records), so start-up is not held up.
//! - The memory is bounded: past `memory.max_records` the oldest records are evicted. hnsw_rs
//!   cannot delete points, so evicted points are filtered out of searches and the index is
//!   rebuilt from the live records once a quarter of its points are dead — also in the
//!   background, the old index answering meanwhile: a rebuild under the lock would stall every
//!   verdict that consults the memory for as long as the build takes.

use crate::config::MemoryConfig;
use crate::embed::{cosine, Vector};
use crate::verdict::{Resolution, SimilarLoop};
use hnsw_rs::prelude::{Distance, Hnsw};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

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
    /// Live records, oldest first: the eviction order.
    order: VecDeque<u64>,
    next_id: u64,
    /// False while the index does not hold the live records yet (the start-up build): searches
    /// then compare against every record instead.
    index_ready: bool,
    /// A background rebuild is under way.
    rebuilding: bool,
}

impl Inner {
    /// The live records' vectors, oldest first: what a rebuilt index is made of.
    fn snapshot(&self) -> Vec<(Vector, u64)> {
        self.order
            .iter()
            .map(|id| (self.records[id].1.clone(), *id))
            .collect()
    }

    /// Swap in an index built from `snapshot`, adding the loops remembered while it was built.
    fn install(&mut self, index: Hnsw<'static, f32, DotDistance>, snapshot: &[(Vector, u64)]) {
        let last = snapshot.last().map_or(0, |(_, id)| *id);
        // Ids only grow, so the loops remembered meanwhile are at the back of `order`.
        let newer: Vec<u64> = self
            .order
            .iter()
            .rev()
            .take_while(|id| **id > last)
            .copied()
            .collect();
        for id in newer.iter().rev() {
            index.insert_slice((&self.records[id].1, *id as usize));
        }
        self.index = index;
        self.indexed = snapshot.len() + newer.len();
        self.index_ready = true;
        self.rebuilding = false;
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

/// The cross-task loop memory. Cheap to share behind an `Arc`.
pub struct LoopMemory {
    cfg: MemoryConfig,
    tree: Option<sled::Tree>,
    inner: Arc<RwLock<Inner>>,
    /// The background index build, if one was started.
    rebuild: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The latest resolution of each task, so a loop remembered after its task was resolved
    /// (its embedding was computed in the background) still gets it.
    resolutions: Mutex<HashMap<String, Resolution>>,
}

/// Resolutions kept for loops still being remembered.
const PENDING_RESOLUTIONS: usize = 10_000;

fn io(e: impl std::fmt::Display) -> MemoryError {
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
fn encode(record: &LoopRecord, vector: &[f32]) -> Vec<u8> {
    let json = serde_json::to_vec(record).expect("a loop record serialises");
    let mut out = Vec::with_capacity(4 + json.len() + vector.len() * 4);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    for x in vector {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

fn decode(bytes: &[u8]) -> Option<(LoopRecord, Vector)> {
    let n = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let record: LoopRecord = serde_json::from_slice(bytes.get(4..4 + n)?).ok()?;
    let floats = bytes.get(4 + n..)?;
    if floats.len() % 4 != 0 {
        return None;
    }
    let v: Vec<f32> = floats
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    Some((record, Vector::from(v)))
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
            inner: Arc::new(RwLock::new(Inner {
                index: new_index(&cfg, cfg.max_records),
                indexed: 0,
                records: HashMap::new(),
                by_task: HashMap::new(),
                order: VecDeque::new(),
                next_id: 1,
                index_ready: true,
                rebuilding: false,
            })),
            cfg,
            tree: None,
            rebuild: Mutex::new(None),
            resolutions: Mutex::new(HashMap::new()),
        }
    }

    /// A loop memory persisted in `tree`. Its records are usable at once; the index is built
    /// from them in the background.
    pub fn open(cfg: MemoryConfig, tree: sled::Tree) -> Result<Self, MemoryError> {
        let mut loaded: Vec<(LoopRecord, Vector)> = Vec::new();
        for item in tree.iter() {
            let (k, v) = item.map_err(io)?;
            match decode(&v) {
                Some(r) => loaded.push(r),
                None => {
                    tracing::warn!(key = ?k, "unreadable loop memory record skipped");
                }
            }
        }
        // Keys are big-endian ids, so this is already oldest first.
        loaded.sort_by_key(|(r, _)| r.id);
        let mem = LoopMemory {
            tree: Some(tree),
            ..LoopMemory::in_memory(cfg)
        };
        if !loaded.is_empty() {
            let mut inner = mem.inner.write().expect("memory lock");
            Self::add_loaded(&mut inner, loaded);
            inner.index_ready = false;
            mem.start_rebuild(&mut inner);
        }
        Ok(mem)
    }

    /// Add records that already have ids (a bulk import, a benchmark), building the index now
    /// with both cores. Not persisted.
    pub fn load(&self, items: Vec<(LoopRecord, Vector)>) {
        let mut inner = self.inner.write().expect("memory lock");
        {
            let batch: Vec<(&[f32], usize)> =
                items.iter().map(|(r, v)| (&v[..], r.id as usize)).collect();
            inner.index.parallel_insert_slice(&batch);
        }
        inner.indexed += items.len();
        Self::add_loaded(&mut inner, items);
    }

    fn add_loaded(inner: &mut Inner, items: Vec<(LoopRecord, Vector)>) {
        for (record, vector) in items {
            inner.next_id = inner.next_id.max(record.id + 1);
            inner
                .by_task
                .entry(record.task_id.clone())
                .or_default()
                .push(record.id);
            inner.order.push_back(record.id);
            inner.records.insert(record.id, (record, vector));
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

    /// Remember a loop. A task's loop that is (nearly) one it already stored is not stored again:
    /// the memory holds distinct loops, not every repetition.
    pub fn remember(
        &self,
        mut record: LoopRecord,
        vector: Vector,
    ) -> Result<Option<u64>, MemoryError> {
        let mut inner = self.inner.write().expect("memory lock");
        if let Some(ids) = inner.by_task.get(&record.task_id) {
            for id in ids {
                if let Some((r, v)) = inner.records.get(id) {
                    if r.kind == record.kind && cosine(v, &vector) >= self.cfg.dedupe_similarity {
                        return Ok(None);
                    }
                }
            }
        }
        if record.resolution.is_none() {
            let resolutions = self.resolutions.lock().expect("resolutions lock");
            if let Some(r) = resolutions.get(&record.task_id) {
                if r.ts >= record.ts {
                    record.resolution = Some(r.clone());
                }
            }
        }
        record.id = inner.next_id;
        inner.next_id += 1;
        if let Some(tree) = &self.tree {
            tree.insert(record.id.to_be_bytes(), encode(&record, &vector))
                .map_err(io)?;
        }
        inner.index.insert_slice((&vector, record.id as usize));
        inner.indexed += 1;
        inner
            .by_task
            .entry(record.task_id.clone())
            .or_default()
            .push(record.id);
        inner.order.push_back(record.id);
        let id = record.id;
        inner.records.insert(id, (record, vector));
        self.evict(&mut inner)?;
        Ok(Some(id))
    }

    fn evict(&self, inner: &mut Inner) -> Result<(), MemoryError> {
        while inner.records.len() > self.cfg.max_records {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some((r, _)) = inner.records.remove(&oldest) {
                if let Some(ids) = inner.by_task.get_mut(&r.task_id) {
                    ids.retain(|i| *i != oldest);
                    if ids.is_empty() {
                        inner.by_task.remove(&r.task_id);
                    }
                }
                if let Some(tree) = &self.tree {
                    tree.remove(oldest.to_be_bytes()).map_err(io)?;
                }
            }
        }
        // Dead points still cost memory and search time: rebuild once a quarter are dead.
        let dead = inner.indexed.saturating_sub(inner.records.len());
        if dead > 0 && dead * 4 > inner.indexed && !inner.rebuilding {
            self.start_rebuild(inner);
        }
        Ok(())
    }

    /// Build a new index from the live records on a background thread, then swap it in.
    fn start_rebuild(&self, inner: &mut Inner) {
        inner.rebuilding = true;
        let snapshot = inner.snapshot();
        let shared = Arc::clone(&self.inner);
        let cfg = self.cfg.clone();
        let spawned = std::thread::Builder::new()
            .name("loop-memory-index".into())
            .spawn(move || {
                let started = std::time::Instant::now();
                let index = build_index(&cfg, &snapshot);
                let mut inner = shared.write().expect("memory lock");
                inner.install(index, &snapshot);
                tracing::info!(
                    event = "loop_memory_indexed",
                    records = inner.indexed,
                    seconds = started.elapsed().as_secs_f64()
                );
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
        let handle = self.rebuild.lock().expect("rebuild lock").take();
        if let Some(h) = handle {
            if h.join().is_err() {
                tracing::error!("the loop memory index build panicked");
            }
        }
    }

    /// Attach a resolution to every unresolved loop of a task.
    pub fn resolve(&self, task_id: &str, resolution: Resolution) -> Result<usize, MemoryError> {
        {
            let mut pending = self.resolutions.lock().expect("resolutions lock");
            if pending.len() >= PENDING_RESOLUTIONS {
                pending.clear();
            }
            pending.insert(task_id.to_string(), resolution.clone());
        }
        let mut inner = self.inner.write().expect("memory lock");
        let ids = inner.by_task.get(task_id).cloned().unwrap_or_default();
        let mut n = 0;
        for id in ids {
            if let Some((r, v)) = inner.records.get_mut(&id) {
                if r.resolution.is_none() {
                    r.resolution = Some(resolution.clone());
                    if let Some(tree) = &self.tree {
                        tree.insert(id.to_be_bytes(), encode(r, v)).map_err(io)?;
                    }
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    /// Forget a task's loops (the task was deleted).
    pub fn forget_task(&self, task_id: &str) -> Result<(), MemoryError> {
        let mut inner = self.inner.write().expect("memory lock");
        for id in inner.by_task.remove(task_id).unwrap_or_default() {
            inner.records.remove(&id);
            inner.order.retain(|i| *i != id);
            if let Some(tree) = &self.tree {
                tree.remove(id.to_be_bytes()).map_err(io)?;
            }
        }
        Ok(())
    }

    /// The `k` stored loops closest to `vector` with at least `min_similarity`, leaving out the
    /// loops of `exclude_task`; resolved ones first among equals.
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
        if let Some(tree) = &self.tree {
            // Not flush_async: concurrent calls deadlock in sled 0.34 (see store::sled).
            let tree = tree.clone();
            tokio::task::spawn_blocking(move || tree.flush())
                .await
                .map_err(io)?
                .map_err(io)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
