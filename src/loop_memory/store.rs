//! Where the loop memory's records persist. The memory itself (records, HNSW index) is in this
//! process; a [`LoopStore`] keeps the records across restarts and, when it is shared by many
//! processes, carries each one's changes to the others.
//!
//! - A local store (`sled`, [`super::SledLoops`]) is written by this process only: the memory
//!   assigns ids, decides evictions, and writes each change through.
//! - A shared store (PostgreSQL, `store::postgres::PgLoops`) assigns ids and evicts itself, and
//!   numbers its changes: each process applies what changed since the last change it saw
//!   ([`LoopStore::changes`]), after its own writes and every `memory.sync_interval_ms`.

use super::{LoopRecord, MemoryError};
use crate::embed::Vector;
use crate::verdict::Resolution;
use std::future::Future;
use std::pin::Pin;

pub type MemoryFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, MemoryError>> + Send + 'a>>;

/// Records that changed in a store.
#[derive(Debug, Default)]
pub struct Changes {
    /// Where these changes end: the `cursor` of the next [`LoopStore::changes`] call.
    pub cursor: u64,
    /// `upserts` are every live record: forget everything held before.
    pub reload: bool,
    /// Records new or changed (a resolution), with their vectors.
    pub upserts: Vec<(LoopRecord, Vector)>,
    /// Ids of records removed (evicted, or their task deleted).
    pub removed: Vec<u64>,
}

/// Persistence of the loop memory's records.
pub trait LoopStore: Send + Sync {
    /// Other processes write to it too (see the module documentation).
    fn shared(&self) -> bool;

    /// Every live record, oldest first (`reload` set), and the cursor after them.
    fn load(&self) -> MemoryFuture<'_, Changes>;

    /// Store a new loop; returns its id. A local store keeps `record.id`; a shared store gives
    /// it the next id and removes its oldest records past `max_records`.
    fn insert<'a>(
        &'a self,
        record: &'a LoopRecord,
        vector: &'a [f32],
        max_records: usize,
    ) -> MemoryFuture<'a, u64>;

    /// `task`'s unresolved loops get `resolution`; returns how many. `updated` are those loops
    /// as this process now holds them, resolution set (a local store writes them back; a shared
    /// store updates its own rows, loops this process has not seen yet included).
    fn resolve<'a>(
        &'a self,
        task: &'a str,
        resolution: &'a Resolution,
        updated: &'a [(LoopRecord, Vector)],
    ) -> MemoryFuture<'a, usize>;

    /// Remove loops: `ids` (evicted by a local memory, or the loops of a deleted task as this
    /// process holds them), and with `task`, every loop of that task (a shared store).
    fn remove<'a>(&'a self, task: Option<&'a str>, ids: &'a [u64]) -> MemoryFuture<'a, ()>;

    /// What changed since `cursor`. A local store has nothing to report.
    fn changes(&self, cursor: u64) -> MemoryFuture<'_, Changes>;

    /// Make every write so far durable.
    fn flush(&self) -> MemoryFuture<'_, ()>;
}
