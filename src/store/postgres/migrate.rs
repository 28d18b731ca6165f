//! The schema's migrations, embedded in the binary and applied by sqlx's migrator.

use super::*;

/// The migrations, in order. Applied ones must never change (their checksums are recorded).
pub(super) const MIGRATIONS: [(i64, &str, &str); 3] = [
    (1, "tasks", include_str!("migrations/0001_tasks.sql")),
    (
        2,
        "loop memory",
        include_str!("migrations/0002_loop_memory.sql"),
    ),
    (
        3,
        "feedback by task",
        include_str!("migrations/0003_feedback_by_task.sql"),
    ),
];

/// The migrations as sqlx's migrator reads them.
#[derive(Debug)]
pub(super) struct Embedded;

impl<'s> MigrationSource<'s> for Embedded {
    fn resolve(
        self,
    ) -> futures_util::future::BoxFuture<'s, Result<Vec<Migration>, sqlx::error::BoxDynError>> {
        Box::pin(async {
            Ok(MIGRATIONS
                .iter()
                .map(|(version, name, sql)| {
                    Migration::new(
                        *version,
                        Cow::Borrowed(*name),
                        MigrationType::Simple,
                        Cow::Borrowed(*sql),
                        false,
                    )
                })
                .collect())
        })
    }
}

/// Why migrating failed: worth retrying (the database cannot be reached), or not.
pub(super) enum Migrate {
    Retry(StoreError),
    Fatal(StoreError),
}

impl Migrate {
    pub(super) fn error(self) -> StoreError {
        match self {
            Migrate::Retry(e) | Migrate::Fatal(e) => e,
        }
    }
}

/// The newest schema version this build knows.
pub fn schema_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.0)
}
