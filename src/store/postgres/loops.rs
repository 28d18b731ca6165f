//! The loop memory in PostgreSQL, shared by every replica (`migrations/0002_loop_memory.sql`).
//!
//! Each write takes the one row of `loopguard_loop_log` (its lock orders writers) and the next
//! `rev`, and stamps the rows it touches with it; a replica asks for the rows with a `rev` above
//! the last one it applied. Because revs are taken under that lock, they commit in order: a
//! replica that has seen rev N has seen every change up to N. A removed loop stays as a
//! tombstone for an hour so replicas learn it is gone; one that fell further behind than that
//! (it could not reach the database) reloads everything.

use super::{Database, StoreError};
use crate::loop_memory::{
    vector_bytes, vector_from_bytes, Changes, LoopRecord, LoopStore, MemoryError, MemoryFuture,
};
use crate::verdict::Resolution;

/// How long a removed loop's tombstone is kept for replicas to see.
const TOMBSTONE_SECS: f64 = 3600.0;

/// The loop memory's records in PostgreSQL.
pub struct PgLoops {
    db: Database,
}

impl PgLoops {
    pub fn new(db: Database) -> PgLoops {
        PgLoops { db }
    }
}

fn mem(e: StoreError) -> MemoryError {
    MemoryError::Io(e.to_string())
}

/// A row as it comes back: id, deleted, record, resolution, vector.
type Row = (
    Option<i64>,
    Option<bool>,
    Option<String>,
    Option<String>,
    Option<Vec<u8>>,
);

/// The head rev and a row (all live rows, or none).
type LoadRow = (
    i64,
    Option<i64>,
    Option<bool>,
    Option<String>,
    Option<String>,
    Option<Vec<u8>>,
);

/// The head rev, the newest purged tombstone's rev, and a changed row (or none).
type ChangeRow = (
    i64,
    i64,
    Option<i64>,
    Option<bool>,
    Option<String>,
    Option<String>,
    Option<Vec<u8>>,
);

/// A live row as a record and its vector; `None` (with a warning) when it is unreadable.
fn decode(
    id: i64,
    record: &str,
    resolution: Option<&str>,
    vector: &[u8],
) -> Option<(LoopRecord, crate::embed::Vector)> {
    let parsed = (|| {
        let mut r: LoopRecord = serde_json::from_str(record).ok()?;
        r.id = id as u64;
        r.resolution = match resolution {
            Some(j) => Some(serde_json::from_str::<Resolution>(j).ok()?),
            None => None,
        };
        Some((r, vector_from_bytes(vector)?))
    })();
    if parsed.is_none() {
        tracing::warn!(id, "unreadable loop memory row skipped");
    }
    parsed
}

/// Rows into changes: live rows are upserts, tombstones removals.
fn changes(cursor: u64, reload: bool, rows: Vec<Row>) -> Changes {
    let mut out = Changes {
        cursor,
        reload,
        ..Changes::default()
    };
    for (id, deleted, record, resolution, vector) in rows {
        let Some(id) = id else { continue };
        match (deleted, record, vector) {
            (Some(false), Some(record), Some(vector)) => {
                if let Some(r) = decode(id, &record, resolution.as_deref(), &vector) {
                    out.upserts.push(r);
                }
            }
            _ => out.removed.push(id as u64),
        }
    }
    out
}

impl PgLoops {
    /// Every live record, in id order, and the rev they are current at.
    async fn load_all(&self) -> Result<Changes, StoreError> {
        let rows: Vec<LoadRow> = self
            .db
            .run(|| {
                sqlx::query_as(
                    "SELECT g.rev, l.id, l.deleted, l.record, l.resolution, l.vector
                     FROM loopguard_loop_log g LEFT JOIN LATERAL (
                         SELECT id, deleted, record, resolution, vector FROM loopguard_loops
                         WHERE NOT deleted AND rev <= g.rev ORDER BY id
                     ) l ON true",
                )
                .fetch_all(self.db.aux())
            })
            .await?;
        let head = rows.first().map_or(0, |r| r.0) as u64;
        Ok(changes(
            head,
            true,
            rows.into_iter()
                .map(|r| (r.1, r.2, r.3, r.4, r.5))
                .collect(),
        ))
    }

    async fn changes_since(&self, cursor: u64) -> Result<Changes, StoreError> {
        if cursor == 0 {
            return self.load_all().await;
        }
        // One statement, one snapshot: the head and every row up to it.
        let rows: Vec<ChangeRow> = self
            .db
            .run(|| {
                sqlx::query_as(
                    "SELECT g.rev, g.purged_rev, l.id, l.deleted, l.record, l.resolution, l.vector
                     FROM loopguard_loop_log g LEFT JOIN LATERAL (
                         SELECT id, deleted, record, resolution, vector FROM loopguard_loops
                         WHERE rev > $1 AND rev <= g.rev ORDER BY rev, id
                     ) l ON true",
                )
                .bind(cursor as i64)
                .fetch_all(self.db.aux())
            })
            .await?;
        let Some(&(head, purged, ..)) = rows.first() else {
            return Ok(Changes {
                cursor,
                ..Changes::default()
            });
        };
        if purged as u64 > cursor {
            // Tombstones this replica never saw are gone: start over.
            return self.load_all().await;
        }
        Ok(changes(
            head as u64,
            false,
            rows.into_iter()
                .map(|r| (r.2, r.3, r.4, r.5, r.6))
                .collect(),
        ))
    }

    /// Take the log's lock and the next rev, in `tx`.
    async fn next_rev(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        live_delta: i64,
    ) -> Result<(i64, i64), StoreError> {
        sqlx::query_as(
            "UPDATE loopguard_loop_log SET rev = rev + 1, live = live + $1 RETURNING rev, live",
        )
        .bind(live_delta)
        .fetch_one(&mut **tx)
        .await
        .map_err(|e| self.db.failed(e))
    }

    async fn insert_one(
        &self,
        record: &LoopRecord,
        vector: &[f32],
        max_records: usize,
    ) -> Result<u64, StoreError> {
        let db = &self.db;
        let json = serde_json::to_string(&LoopRecord {
            id: 0,
            resolution: None,
            ..record.clone()
        })
        .map_err(|e| StoreError::Io(e.to_string()))?;
        let resolution = record
            .resolution
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| StoreError::Io(e.to_string()))?;
        let mut tx = db.begin_aux_tx().await?;
        let (rev, live) = self.next_rev(&mut tx, 1).await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO loopguard_loops (rev, task_id, record, resolution, vector)
             VALUES ($1, $2, $3, $4, $5) RETURNING id",
        )
        .bind(rev)
        .bind(&record.task_id)
        .bind(json)
        .bind(resolution)
        .bind(vector_bytes(vector))
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| db.failed(e))?;
        let excess = live - max_records as i64;
        if excess > 0 {
            sqlx::query(
                "WITH gone AS (
                     UPDATE loopguard_loops
                     SET deleted = true, record = NULL, resolution = NULL, vector = NULL,
                         rev = $1, changed_at = now()
                     WHERE id IN (SELECT id FROM loopguard_loops WHERE NOT deleted ORDER BY id LIMIT $2)
                     RETURNING 1
                 )
                 UPDATE loopguard_loop_log SET live = live - (SELECT count(*) FROM gone)",
            )
            .bind(rev)
            .bind(excess)
            .execute(&mut *tx)
            .await
            .map_err(|e| db.failed(e))?;
        }
        sqlx::query(
            "WITH purged AS (
                 DELETE FROM loopguard_loops
                 WHERE deleted AND changed_at < now() - make_interval(secs => $1)
                 RETURNING rev
             )
             UPDATE loopguard_loop_log
             SET purged_rev = greatest(purged_rev, coalesce((SELECT max(rev) FROM purged), 0))",
        )
        .bind(TOMBSTONE_SECS)
        .execute(&mut *tx)
        .await
        .map_err(|e| db.failed(e))?;
        tx.commit().await.map_err(|e| db.failed(e))?;
        Ok(id as u64)
    }

    async fn resolve_task(&self, task: &str, resolution: &Resolution) -> Result<usize, StoreError> {
        let db = &self.db;
        let json = serde_json::to_string(resolution).map_err(|e| StoreError::Io(e.to_string()))?;
        let mut tx = db.begin_aux_tx().await?;
        let (rev, _) = self.next_rev(&mut tx, 0).await?;
        let n = sqlx::query(
            "UPDATE loopguard_loops SET resolution = $2, rev = $3, changed_at = now()
             WHERE task_id = $1 AND NOT deleted AND resolution IS NULL",
        )
        .bind(task)
        .bind(json)
        .bind(rev)
        .execute(&mut *tx)
        .await
        .map_err(|e| db.failed(e))?
        .rows_affected();
        if n == 0 {
            // Nothing changed: no rev spent. Dropping the transaction rolls it back.
            return Ok(0);
        }
        tx.commit().await.map_err(|e| db.failed(e))?;
        Ok(n as usize)
    }

    async fn remove_rows(&self, task: Option<&str>, ids: &[u64]) -> Result<(), StoreError> {
        let db = &self.db;
        let ids: Vec<i64> = ids.iter().map(|i| *i as i64).collect();
        let mut tx = db.begin_aux_tx().await?;
        let (rev, _) = self.next_rev(&mut tx, 0).await?;
        let n: i64 = sqlx::query_scalar(
            "WITH gone AS (
                 UPDATE loopguard_loops
                 SET deleted = true, record = NULL, resolution = NULL, vector = NULL,
                     rev = $3, changed_at = now()
                 WHERE NOT deleted AND (task_id = $1 OR id = ANY($2))
                 RETURNING 1
             ), counted AS (
                 UPDATE loopguard_loop_log SET live = live - (SELECT count(*) FROM gone)
             )
             SELECT count(*) FROM gone",
        )
        .bind(task)
        .bind(ids)
        .bind(rev)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| db.failed(e))?;
        if n > 0 {
            tx.commit().await.map_err(|e| db.failed(e))?;
        }
        Ok(())
    }
}

impl LoopStore for PgLoops {
    fn shared(&self) -> bool {
        true
    }

    fn load(&self) -> MemoryFuture<'_, Changes> {
        Box::pin(async move { self.load_all().await.map_err(mem) })
    }

    fn insert<'a>(
        &'a self,
        record: &'a LoopRecord,
        vector: &'a [f32],
        max_records: usize,
    ) -> MemoryFuture<'a, u64> {
        Box::pin(async move {
            self.insert_one(record, vector, max_records)
                .await
                .map_err(mem)
        })
    }

    fn resolve<'a>(
        &'a self,
        task: &'a str,
        resolution: &'a Resolution,
        _updated: &'a [(LoopRecord, crate::embed::Vector)],
    ) -> MemoryFuture<'a, usize> {
        Box::pin(async move { self.resolve_task(task, resolution).await.map_err(mem) })
    }

    fn remove<'a>(&'a self, task: Option<&'a str>, ids: &'a [u64]) -> MemoryFuture<'a, ()> {
        Box::pin(async move { self.remove_rows(task, ids).await.map_err(mem) })
    }

    fn changes(&self, cursor: u64) -> MemoryFuture<'_, Changes> {
        Box::pin(async move { self.changes_since(cursor).await.map_err(mem) })
    }

    fn flush(&self) -> MemoryFuture<'_, ()> {
        // Every write was committed when it returned.
        Box::pin(std::future::ready(Ok(())))
    }
}
