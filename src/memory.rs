//! Cross-task loop memory (seed 000's "RAG learning"): loops seen in one task are kept with their
//! embedding, and when the task is resolved, with how it was resolved; a loop in another task
//! that looks like one of them is told "this looked like X, which was resolved by Y".
//!
//! - An HNSW index (hnsw_rs, dot-product distance over the L2-normalised embeddings) answers
//!   "which stored loops are closest to this text".
//! - Records and their vectors are persisted in a sled tree (one key per record); the index is
//!   rebuilt from them at start-up (docs/PERFORMANCE.md has what that costs).
//! - The memory is bounded: past `memory.max_records` the oldest records are evicted. hnsw_rs
//!   cannot delete points, so evicted points are filtered out of searches and the index is
//!   rebuilt from the live records once a quarter of its points are dead.

use crate::config::MemoryConfig;
use crate::embed::{cosine, Vector};
use hnsw_rs::prelude::{Distance, Hnsw};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::RwLock;

/// How a task's loop was resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Resolution {
    /// `success` or `human_intervention`.
    pub result: String,
    pub note: Option<String>,
    /// Unix seconds.
    pub ts: i64,
}

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

/// A stored loop close to a query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SimilarLoop {
    pub task_id: String,
    pub kind: crate::verdict::LoopKind,
    pub tool: Option<String>,
    pub text: String,
    pub similarity: f32,
    /// RFC 3339.
    pub seen_at: String,
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
}

/// The cross-task loop memory. Cheap to share behind an `Arc`.
pub struct LoopMemory {
    cfg: MemoryConfig,
    tree: Option<sled::Tree>,
    inner: RwLock<Inner>,
    /// The latest resolution of each task, so a loop remembered after its task was resolved
    /// (its embedding was computed in the background) still gets it.
    resolutions: std::sync::Mutex<HashMap<String, Resolution>>,
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
            inner: RwLock::new(Inner {
                index: new_index(&cfg, cfg.max_records),
                indexed: 0,
                records: HashMap::new(),
                by_task: HashMap::new(),
                order: VecDeque::new(),
                next_id: 1,
            }),
            cfg,
            tree: None,
            resolutions: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// A loop memory persisted in `tree`, its index rebuilt from what the tree holds.
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
        let mem = LoopMemory::in_memory(cfg);
        mem.load(loaded);
        Ok(LoopMemory {
            tree: Some(tree),
            ..mem
        })
    }

    /// Add records that already have ids (a restart, a bulk import), building the index with
    /// both cores. Not persisted: the caller read them from the tree.
    pub fn load(&self, items: Vec<(LoopRecord, Vector)>) {
        let mut inner = self.inner.write().expect("memory lock");
        {
            let batch: Vec<(&[f32], usize)> =
                items.iter().map(|(r, v)| (&v[..], r.id as usize)).collect();
            inner.index.parallel_insert_slice(&batch);
        }
        inner.indexed += items.len();
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
        let dead = inner.indexed - inner.records.len();
        if dead > 0 && dead * 4 > inner.indexed {
            let index = new_index(&self.cfg, self.cfg.max_records);
            for id in &inner.order {
                let (_, v) = &inner.records[id];
                index.insert_slice((v, *id as usize));
            }
            inner.index = index;
            inner.indexed = inner.records.len();
            tracing::info!(event = "loop_memory_rebuilt", records = inner.indexed);
        }
        Ok(())
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
        let ef = self.cfg.ef_search.max(want);
        let found = inner.index.search_filter(vector, want, ef, Some(&live));
        let mut out: Vec<SimilarLoop> = Vec::new();
        let mut seen_tasks: Vec<&str> = Vec::new();
        for n in found {
            let Some((r, v)) = inner.records.get(&(n.d_id as u64)) else {
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
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::embed::StubBackend;
    use crate::verdict::LoopKind;

    fn rec(task: &str, text: &str) -> (LoopRecord, Vector) {
        (
            LoopRecord {
                id: 0,
                task_id: task.into(),
                agent_id: None,
                kind: LoopKind::SemanticRepeat,
                tool: None,
                text: text.into(),
                ts: 0,
                gated: false,
                resolution: None,
            },
            Vector::from(StubBackend::vector(text)),
        )
    }

    fn cfg(max: usize) -> MemoryConfig {
        let mut c = Config::default().memory;
        c.max_records = max;
        c
    }

    #[test]
    fn finds_other_tasks_loops_with_their_resolution() {
        let m = LoopMemory::in_memory(cfg(100));
        let (r, v) = rec("a", "database connection pool exhausted");
        m.remember(r, v).unwrap();
        let (r, v) = rec("b", "the weather today is sunny and warm");
        m.remember(r, v).unwrap();
        m.resolve(
            "a",
            Resolution {
                result: "human_intervention".into(),
                note: Some("raised the pool size".into()),
                ts: 1,
            },
        )
        .unwrap();
        let q = StubBackend::vector("database connection pool is exhausted");
        let found = m.similar(&q, 3, 0.5, Some("c"));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].task_id, "a");
        assert_eq!(
            found[0].resolution.as_ref().unwrap().note.as_deref(),
            Some("raised the pool size")
        );
        // Never the asking task's own loops.
        assert!(m.similar(&q, 3, 0.5, Some("a")).is_empty());
    }

    #[test]
    fn stays_within_its_bound_and_rebuilds_the_index() {
        let m = LoopMemory::in_memory(cfg(50));
        for i in 0..500 {
            let (r, v) = rec(
                &format!("t{i}"),
                &format!("distinct failure number {i} alpha{i}"),
            );
            m.remember(r, v).unwrap();
        }
        assert_eq!(m.len(), 50);
        assert!(
            m.indexed_points() <= 50 * 4 / 3 + 1,
            "{}",
            m.indexed_points()
        );
        // The newest are kept.
        let records = m.records();
        assert_eq!(records.first().unwrap().task_id, "t450");
    }

    #[test]
    fn a_tasks_repeated_loop_is_stored_once() {
        let m = LoopMemory::in_memory(cfg(10));
        let (r, v) = rec("a", "same thing again");
        assert!(m.remember(r.clone(), v.clone()).unwrap().is_some());
        assert!(m.remember(r, v).unwrap().is_none());
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        {
            let m = LoopMemory::open(cfg(10), db.open_tree("mem").unwrap()).unwrap();
            let (r, v) = rec("a", "database connection pool exhausted");
            m.remember(r, v).unwrap();
            m.resolve(
                "a",
                Resolution {
                    result: "success".into(),
                    note: None,
                    ts: 5,
                },
            )
            .unwrap();
        }
        let m = LoopMemory::open(cfg(10), db.open_tree("mem").unwrap()).unwrap();
        assert_eq!(m.len(), 1);
        let q = StubBackend::vector("database connection pool exhausted");
        let found = m.similar(&q, 1, 0.9, None);
        assert_eq!(found[0].resolution.as_ref().unwrap().ts, 5);
        // Ids continue after the stored ones.
        let (r, v) = rec("b", "something else entirely");
        assert_eq!(m.remember(r, v).unwrap(), Some(2));
    }
}
