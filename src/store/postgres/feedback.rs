//! Feedback in PostgreSQL (`loopguard_feedback`): every replica adds to one list.

use super::Database;
use crate::feedback::{FeedbackError, FeedbackFuture, FeedbackLog, FeedbackRecord};

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
    fn add(&self, mut record: FeedbackRecord) -> FeedbackFuture<'_, FeedbackRecord> {
        Box::pin(async move {
            // The id is the row's: stored as 0 in the JSON, set from the row when read.
            record.id = 0;
            let json = serde_json::to_string(&record).map_err(err)?;
            let id: i64 = self
                .db
                .run_once(
                    sqlx::query_scalar(
                        "INSERT INTO loopguard_feedback (record) VALUES ($1) RETURNING id",
                    )
                    .bind(json)
                    .fetch_one(self.db.aux()),
                )
                .await
                .map_err(err)?;
            record.id = id as u64;
            Ok(record)
        })
    }

    fn list(&self) -> FeedbackFuture<'_, Vec<FeedbackRecord>> {
        Box::pin(async move {
            let rows: Vec<(i64, String)> = self
                .db
                .run(|| {
                    sqlx::query_as("SELECT id, record FROM loopguard_feedback ORDER BY id")
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
