//! Feedback in PostgreSQL (`loopguard_feedback`): every replica adds to one list.

use super::Database;
use crate::feedback::{FeedbackError, FeedbackFuture, FeedbackLimits, FeedbackLog, FeedbackRecord};

pub struct PgFeedback {
    db: Database,
}

impl PgFeedback {
    pub fn new(db: Database) -> PgFeedback {
        PgFeedback { db }
    }
}

fn err(e: impl std::fmt::Display) -> FeedbackError {
    FeedbackError(e.to_string())
}

impl FeedbackLog for PgFeedback {
    fn add(
        &self,
        mut record: FeedbackRecord,
        limits: FeedbackLimits,
    ) -> FeedbackFuture<'_, FeedbackRecord> {
        Box::pin(async move {
            // The id is the row's: stored as 0 in the JSON, set from the row when read.
            record.id = 0;
            let json = serde_json::to_string(&record).map_err(err)?;
            let id: i64 = self
                .db
                .run_once(
                    sqlx::query_scalar(
                        "INSERT INTO loopguard_feedback (record, root_task_id) VALUES ($1, $2) RETURNING id",
                    )
                    .bind(json)
                    .bind(&record.root_task_id)
                    .fetch_one(self.db.aux()),
                )
                .await
                .map_err(err)?;
            record.id = id as u64;
            // The oldest past the bounds: of this task, then of all (every replica trims; a
            // concurrent add may leave one over for a moment, the next add takes it).
            self.db
                .run_once(
                    sqlx::query(
                        "DELETE FROM loopguard_feedback WHERE root_task_id = $1 AND id <= \
                         (SELECT id FROM loopguard_feedback WHERE root_task_id = $1 \
                          ORDER BY id DESC OFFSET $2 LIMIT 1)",
                    )
                    .bind(&record.root_task_id)
                    .bind(limits.max_per_task as i64)
                    .execute(self.db.aux()),
                )
                .await
                .map_err(err)?;
            self.db
                .run_once(
                    sqlx::query(
                        "DELETE FROM loopguard_feedback WHERE id <= \
                         (SELECT id FROM loopguard_feedback ORDER BY id DESC OFFSET $1 LIMIT 1)",
                    )
                    .bind(limits.max_records as i64)
                    .execute(self.db.aux()),
                )
                .await
                .map_err(err)?;
            Ok(record)
        })
    }

    fn page(&self, after: u64, limit: usize) -> FeedbackFuture<'_, Vec<FeedbackRecord>> {
        Box::pin(async move {
            let after = i64::try_from(after).unwrap_or(i64::MAX);
            let rows: Vec<(i64, String)> = self
                .db
                .run(|| {
                    sqlx::query_as(
                        "SELECT id, record FROM loopguard_feedback WHERE id > $1 ORDER BY id LIMIT $2",
                    )
                    .bind(after)
                    .bind(limit as i64)
                    .fetch_all(self.db.aux())
                })
                .await
                .map_err(err)?;
            rows.into_iter()
                .map(|(id, json)| {
                    let mut r: FeedbackRecord = serde_json::from_str(&json).map_err(err)?;
                    r.id = id as u64;
                    Ok(r)
                })
                .collect()
        })
    }

    fn flush(&self) -> FeedbackFuture<'_, ()> {
        // Every record was committed when it was added.
        Box::pin(std::future::ready(Ok(())))
    }
}
