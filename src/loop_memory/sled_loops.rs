//! The loop memory in a sled tree (the embedded store's database): one key per record, its id
//! big-endian, so the tree iterates oldest first.

use super::store::{Changes, LoopStore, MemoryFuture};
use super::{decode, encode, io, LoopRecord, MemoryError};
use crate::embed::Vector;
use crate::verdict::Resolution;

pub struct SledLoops {
    tree: sled::Tree,
}

impl SledLoops {
    pub fn new(tree: sled::Tree) -> SledLoops {
        SledLoops { tree }
    }
}

fn ready<'a, T: Send + 'a>(v: Result<T, MemoryError>) -> MemoryFuture<'a, T> {
    Box::pin(std::future::ready(v))
}

impl LoopStore for SledLoops {
    fn shared(&self) -> bool {
        false
    }

    fn load(&self) -> MemoryFuture<'_, Changes> {
        let read = || {
            let mut upserts: Vec<(LoopRecord, Vector)> = Vec::new();
            for item in self.tree.iter() {
                let (k, v) = item.map_err(io)?;
                match decode(&v) {
                    Some(r) => upserts.push(r),
                    None => tracing::warn!(key = ?k, "unreadable loop memory record skipped"),
                }
            }
            // Keys are big-endian ids: already oldest first, but a record's own id decides.
            upserts.sort_by_key(|(r, _)| r.id);
            Ok(Changes {
                cursor: 0,
                reload: true,
                upserts,
                removed: Vec::new(),
            })
        };
        ready(read())
    }

    fn insert<'a>(
        &'a self,
        record: &'a LoopRecord,
        vector: &'a [f32],
        _max_records: usize,
    ) -> MemoryFuture<'a, u64> {
        ready(
            self.tree
                .insert(record.id.to_be_bytes(), encode(record, vector))
                .map(|_| record.id)
                .map_err(io),
        )
    }

    fn resolve<'a>(
        &'a self,
        _task: &'a str,
        _resolution: &'a Resolution,
        updated: &'a [(LoopRecord, Vector)],
    ) -> MemoryFuture<'a, usize> {
        let write = || {
            for (r, v) in updated {
                self.tree
                    .insert(r.id.to_be_bytes(), encode(r, v))
                    .map_err(io)?;
            }
            Ok(updated.len())
        };
        ready(write())
    }

    fn remove<'a>(&'a self, _task: Option<&'a str>, ids: &'a [u64]) -> MemoryFuture<'a, ()> {
        let write = || {
            for id in ids {
                self.tree.remove(id.to_be_bytes()).map_err(io)?;
            }
            Ok(())
        };
        ready(write())
    }

    fn changes(&self, cursor: u64) -> MemoryFuture<'_, Changes> {
        ready(Ok(Changes {
            cursor,
            ..Changes::default()
        }))
    }

    fn flush(&self) -> MemoryFuture<'_, ()> {
        // Not flush_async: concurrent calls deadlock in sled 0.34 (see store::sled).
        let tree = self.tree.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || tree.flush())
                .await
                .map_err(io)?
                .map_err(io)?;
            Ok(())
        })
    }
}
