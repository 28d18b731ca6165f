//! The shared store: task states, audit trails and subtask links in PostgreSQL, for any number of
//! replicas behind one address (`server.store = "postgres"`). The loop memory and the feedback
//! live in the same database ([`PgLoops`], [`PgFeedback`]).
//!
//! - **Schema**: created and migrated by loopguard at start-up with sqlx's migrator, from the
//!   versioned files in `migrations/` (recorded in `_sqlx_migrations`; replicas starting together
//!   wait for each other on its lock). A database migrated by a newer loopguard is refused.
//! - **One task, one writer at a time, across replicas**: [`Store::begin`] opens a transaction and
//!   takes the task's transaction-scoped advisory lock (`pg_advisory_xact_lock`), so events of a
//!   root task are applied one at a time even when they reach different replicas; a replica that
//!   dies mid-event loses its connection and PostgreSQL rolls back and releases the lock. The
//!   replica's in-memory copy is reused only when its `version` is the stored one.
//! - **One event, one transaction**: the new state, its audit records and a new subtask link are
//!   written in one statement and committed before the verdict is answered (durable at COMMIT).
//! - **Errors**: an unreachable database is [`StoreError::Unavailable`] (503 with Retry-After), the
//!   transaction rolled back, nothing half-applied. While the database is down, operations fail at
//!   once and a probe retries every second; [`Store::unready`] says why for `/readyz`, and the
//!   replica recovers by itself when the database is back. A lock held by another replica for
//!   longer than the timeout is answered the same way.

mod feedback;
mod loops;
mod migrate;

pub use feedback::PgFeedback;
pub use loops::PgLoops;
pub use migrate::schema_version;
use migrate::*;

use super::{durable_now, Durable, Opened, Store, StoreError, StoreFuture, TaskTxn};
use crate::audit::AuditRecord;
use crate::state::TaskState;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Postgres};
use std::borrow::Cow;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// Connections of the loop memory's and feedback's pool, beside `server.database_max_connections`.
pub const AUX_CONNECTIONS: u32 = 4;

/// Advisory-lock class of task locks (the first key of `pg_advisory_xact_lock(int, int)`), so
/// they cannot collide with another application's single-key locks in the same database.
const TASK_LOCK_CLASS: i32 = 0x4c47_0001;

/// How to reach the database.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// `postgres://user:password@host:5432/db`, with any libpq-style parameters sqlx reads
    /// (`sslmode`, `options`, ...).
    pub url: String,
    pub max_connections: u32,
    /// How long an operation waits for a connection or a task's lock before giving up.
    pub timeout: Duration,
    /// A transaction idle for longer than this is ended by PostgreSQL: a replica that stops
    /// (SIGSTOP, a hung host) mid-event must not hold a task's lock for ever.
    pub idle_in_transaction: Duration,
}

impl PgOptions {
    /// From `[server]`: the URL, the pool size and the timeout; a held task outlives no request.
    pub fn from_config(s: &crate::config::ServerConfig) -> Result<PgOptions, StoreError> {
        let url = s.database_url.clone().ok_or_else(|| {
            StoreError::Io("server.store = \"postgres\" needs server.database_url".into())
        })?;
        Ok(PgOptions {
            url,
            max_connections: s.database_max_connections,
            timeout: Duration::from_millis(s.database_timeout_ms),
            idle_in_transaction: Duration::from_millis(s.request_timeout_ms.saturating_mul(2))
                .max(Duration::from_secs(30)),
        })
    }
}

/// One process's connection to the database: the pool, and whether the database is usable.
/// Cheap to clone; the task store, the loop memory and the feedback share one.
#[derive(Clone)]
pub struct Database {
    inner: Arc<DbInner>,
}

struct DbInner {
    /// Task transactions: each holds a connection for its event's evaluation.
    pool: PgPool,
    /// The loop memory and the feedback, written while a task's transaction is open (a loop
    /// remembered during an event, a reset resolving loops): a pool of their own, so an event
    /// never waits for a second connection from the pool its first came from.
    aux: PgPool,
    connect: PgConnectOptions,
    timeout: Duration,
    max_connections: u32,
    /// The schema is migrated: operations may run.
    migrated: tokio::sync::watch::Sender<bool>,
    /// The last operation or probe could not reach the database: fail fast until a probe can.
    down: AtomicBool,
    /// Why the database is not usable, for `/readyz` and error messages.
    problem: Mutex<Option<String>>,
    /// Wakes the probe at once when an operation finds the database gone.
    wake: tokio::sync::Notify,
}

/// What an error says about the database.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Health {
    /// It cannot be reached.
    Down,
    /// Maybe it cannot be reached, maybe every connection is busy: the probe finds out.
    Suspect,
    /// It answered.
    Up,
}

/// How `e` should be reported, and what it says about the database.
fn classify(e: &sqlx::Error) -> (Health, StoreError) {
    use sqlx::Error as E;
    let unreachable = |m: String| (Health::Down, StoreError::Unavailable(m));
    match e {
        E::Io(_) | E::Tls(_) | E::Protocol(_) | E::WorkerCrashed | E::PoolClosed => {
            unreachable(format!("the database connection failed: {e}"))
        }
        // Connecting failed until the timeout, or every connection of the pool stayed busy.
        E::PoolTimedOut => (
            Health::Suspect,
            StoreError::Unavailable(
                "no database connection within server.database_timeout_ms (the database is unreachable, or every connection is busy: see server.database_max_connections)".into(),
            ),
        ),
        E::Database(db) => {
            let code = db.code().unwrap_or_default();
            match &*code {
                // Another replica held the task longer than the timeout: the database is fine.
                "55P03" => (
                    Health::Up,
                    StoreError::Unavailable(
                        "the task is held by another replica for longer than server.database_timeout_ms".into(),
                    ),
                ),
                // Serialisation failure, deadlock: retryable, the database is fine.
                "40001" | "40P01" => (
                    Health::Up,
                    StoreError::Unavailable(db.message().to_string()),
                ),
                // Connection exceptions, shutdown, crash recovery, too many connections, a
                // read-only standby after a failover.
                c if c.starts_with("08")
                    || c.starts_with("57P")
                    || c.starts_with("53")
                    || c == "25006" =>
                {
                    unreachable(format!("the database refused: {} ({c})", db.message()))
                }
                c => (
                    Health::Up,
                    StoreError::Io(format!("database error {c}: {}", db.message())),
                ),
            }
        }
        other => (Health::Up, StoreError::Io(other.to_string())),
    }
}

/// An error on a connection taken from the pool before anything was sent on it in this
/// transaction: a connection the database closed (it restarted). Trying another one is safe.
fn stale_connection(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("08") || c == "57P01" || c == "57P02"),
        _ => false,
    }
}

fn bad_url(e: impl std::fmt::Display) -> StoreError {
    StoreError::Io(format!(
        "server.database_url is not a usable PostgreSQL URL: {e}"
    ))
}

impl Database {
    /// Connect and migrate. An unreachable database is not an error here: the replica starts,
    /// `/readyz` says the database cannot be reached, and a background task keeps trying. A
    /// malformed URL, or a schema from a newer loopguard, is.
    pub async fn open(opts: &PgOptions) -> Result<Database, StoreError> {
        let connect = PgConnectOptions::from_str(&opts.url)
            .map_err(bad_url)?
            .application_name("loopguard")
            .options([
                ("lock_timeout", format!("{}ms", opts.timeout.as_millis())),
                (
                    "idle_in_transaction_session_timeout",
                    format!("{}ms", opts.idle_in_transaction.as_millis()),
                ),
            ])
            // Failures are logged by the store with what they mean, not by sqlx at info.
            .log_statements(tracing::log::LevelFilter::Trace)
            .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(1));
        let pool_of = |max: u32| {
            PgPoolOptions::new()
                .max_connections(max)
                .acquire_timeout(opts.timeout)
                // No ping before every use: a connection the database closed fails its first
                // statement, and `begin` then takes another (see `stale_connection`).
                .test_before_acquire(false)
                .connect_lazy_with(connect.clone())
        };
        let pool = pool_of(opts.max_connections);
        let aux = pool_of(AUX_CONNECTIONS);
        let (migrated, _) = tokio::sync::watch::channel(false);
        let db = Database {
            inner: Arc::new(DbInner {
                pool,
                aux,
                connect,
                timeout: opts.timeout,
                max_connections: opts.max_connections,
                migrated,
                down: AtomicBool::new(false),
                problem: Mutex::new(Some("connecting to the database".into())),
                wake: tokio::sync::Notify::new(),
            }),
        };
        match db.migrate().await {
            Ok(()) => {}
            Err(Migrate::Retry(e)) => {
                tracing::warn!(error = %e, "the database cannot be reached yet; retrying in the background");
                db.inner.set_problem(e.to_string());
            }
            Err(Migrate::Fatal(e)) => return Err(e),
        }
        tokio::spawn(probe(Arc::downgrade(&db.inner)));
        Ok(db)
    }

    async fn migrate(&self) -> Result<(), Migrate> {
        let migrator = Migrator::new(Embedded)
            .await
            .map_err(|e| Migrate::Fatal(StoreError::Io(format!("loading the migrations: {e}"))))?;
        let run = tokio::time::timeout(
            self.inner.timeout.max(Duration::from_secs(10)),
            migrator.run(&self.inner.pool),
        )
        .await
        .map_err(|_| {
            Migrate::Retry(StoreError::Unavailable(
                "migrating the schema timed out".into(),
            ))
        })?;
        match run {
            Ok(()) => {
                self.inner.migrated.send_replace(true);
                self.inner.healthy();
                tracing::info!(
                    event = "database_ready",
                    schema_version = schema_version(),
                    "database schema is current"
                );
                Ok(())
            }
            Err(sqlx::migrate::MigrateError::Execute(e)) => {
                let (health, err) = classify(&e);
                Err(if health != Health::Up {
                    Migrate::Retry(err)
                } else {
                    Migrate::Fatal(StoreError::Io(format!(
                        "migrating the database schema failed: {err}"
                    )))
                })
            }
            Err(sqlx::migrate::MigrateError::VersionMissing(v)) => {
                Err(Migrate::Fatal(StoreError::Io(format!(
                    "the database schema is at migration {v}, newer than this build knows ({}): upgrade loopguard, or point it at another database",
                    schema_version()
                ))))
            }
            Err(e) => Err(Migrate::Fatal(StoreError::Io(format!(
                "migrating the database schema failed: {e}"
            )))),
        }
    }

    /// Why the database is not usable, if it is not.
    pub fn unready(&self) -> Option<String> {
        let problem = || {
            self.inner
                .problem
                .lock()
                .expect("problem lock")
                .clone()
                .unwrap_or_default()
        };
        if !*self.inner.migrated.borrow() {
            return Some(format!("database not ready: {}", problem()));
        }
        if self.inner.down.load(Ordering::Acquire) {
            return Some(format!("database unreachable: {}", problem()));
        }
        None
    }

    /// Wait (up to the timeout) until the schema is migrated; fail at once while the database
    /// is known to be down.
    async fn usable(&self) -> Result<(), StoreError> {
        if self.inner.down.load(Ordering::Acquire) {
            return Err(StoreError::Unavailable(
                self.unready()
                    .unwrap_or_else(|| "the database is unreachable".into()),
            ));
        }
        let mut migrated = self.inner.migrated.subscribe();
        if *migrated.borrow() {
            return Ok(());
        }
        let waited = tokio::time::timeout(self.inner.timeout, migrated.wait_for(|m| *m))
            .await
            .is_ok_and(|r| r.is_ok());
        if waited {
            return Ok(());
        }
        Err(StoreError::Unavailable(
            self.unready()
                .unwrap_or_else(|| "the database is not ready".into()),
        ))
    }

    /// Report an error from an operation, and turn it into a store error.
    fn failed(&self, e: sqlx::Error) -> StoreError {
        let (health, err) = classify(&e);
        match health {
            Health::Down => {
                self.inner.set_problem(err.to_string());
                self.inner.mark_down(&err);
                self.inner.wake.notify_one();
            }
            Health::Suspect => self.inner.wake.notify_one(),
            Health::Up => {}
        }
        err
    }

    /// The pool of task transactions and reads.
    fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The pool of the loop memory and the feedback.
    fn aux(&self) -> &PgPool {
        &self.inner.aux
    }

    /// Run a statement that writes, once: a connection lost while it ran may have applied it.
    pub(super) async fn run_once<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        F: std::future::Future<Output = Result<T, sqlx::Error>>,
    {
        self.usable().await?;
        op.await.map_err(|e| self.failed(e))
    }

    /// Run the statement `op` makes against the pool once the database is usable, reporting its
    /// errors. A pooled connection the database closed (it restarted) fails its first statement
    /// before anything was applied; the statement is sent again on another, at most once per
    /// pooled connection, as [`Database::begin_tx`] does.
    async fn run<T, F, Fut>(&self, op: F) -> Result<T, StoreError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
    {
        self.usable().await?;
        let mut tries = self.inner.max_connections.max(AUX_CONNECTIONS) + 1;
        loop {
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) if tries > 1 && stale_connection(&e) => tries -= 1,
                Err(e) => return Err(self.failed(e)),
            }
        }
    }

    /// A transaction on a live connection. Connections the database closed (a restart) fail
    /// their first statement; they are skipped, at most once per pooled connection.
    async fn begin_tx(&self) -> Result<sqlx::Transaction<'static, Postgres>, StoreError> {
        self.begin_on(&self.inner.pool, self.inner.max_connections)
            .await
    }

    /// [`Database::begin_tx`] on the loop memory's and feedback's pool.
    async fn begin_aux_tx(&self) -> Result<sqlx::Transaction<'static, Postgres>, StoreError> {
        self.begin_on(&self.inner.aux, AUX_CONNECTIONS).await
    }

    async fn begin_on(
        &self,
        pool: &PgPool,
        max: u32,
    ) -> Result<sqlx::Transaction<'static, Postgres>, StoreError> {
        self.usable().await?;
        let mut tries = max + 1;
        loop {
            match pool.begin().await {
                Ok(tx) => return Ok(tx),
                Err(e) if tries > 1 && stale_connection(&e) => tries -= 1,
                Err(e) => return Err(self.failed(e)),
            }
        }
    }
}

impl DbInner {
    fn mark_down(&self, why: &dyn std::fmt::Display) {
        if !self.down.swap(true, Ordering::AcqRel) {
            tracing::error!(error = %why, "the database became unreachable");
        }
    }

    fn set_problem(&self, why: String) {
        *self.problem.lock().expect("problem lock") = Some(why);
    }

    fn healthy(&self) {
        if self.down.swap(false, Ordering::AcqRel) {
            tracing::info!(
                event = "database_reachable",
                "the database is reachable again"
            );
        }
        *self.problem.lock().expect("problem lock") = None;
    }
}

/// Until the schema is migrated, try to migrate; while the database is down (or an operation
/// could not get a connection), see whether a fresh connection gets through; every second, or
/// soon after an operation ran into trouble. Ends with the database handle.
/// Seconds between checks of a database that is up.
const HEALTHY_CHECK_TICKS: u32 = 3;

async fn probe(db: Weak<DbInner>) {
    let mut ticks: u32 = 0;
    loop {
        ticks = ticks.wrapping_add(1);
        let Some(inner) = db.upgrade() else { return };
        let woken = tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => false,
            _ = inner.wake.notified() => {
                // Let the failure that woke us settle (the database may be mid-restart).
                tokio::time::sleep(Duration::from_millis(200)).await;
                true
            }
        };
        let d = Database {
            inner: Arc::clone(&inner),
        };
        if !*inner.migrated.borrow() {
            if let Err(e) = d.migrate().await {
                let e = e.error();
                tracing::warn!(error = %e, "the database schema is not ready");
                inner.set_problem(e.to_string());
            }
            continue;
        }
        // While up, a check every few seconds as well: a replica nobody sends events to would
        // otherwise stay ready on a database that went away.
        if !woken && !inner.down.load(Ordering::Acquire) && ticks % HEALTHY_CHECK_TICKS != 0 {
            continue;
        }
        // A fresh connection, not the pool's: pooled ones may be left from before a restart,
        // or all busy.
        let check = async {
            let mut c = inner.connect.connect().await?;
            sqlx::query("SELECT 1").execute(&mut c).await?;
            c.close().await
        };
        match tokio::time::timeout(inner.timeout, check).await {
            Ok(Ok(())) => inner.healthy(),
            Ok(Err(e)) => {
                let err = classify(&e).1;
                inner.set_problem(err.to_string());
                inner.mark_down(&err);
            }
            Err(_) => {
                let why = "connecting to the database timed out".to_string();
                inner.mark_down(&why);
                inner.set_problem(why);
            }
        }
    }
}

/// The task store on PostgreSQL.
pub struct PostgresStore {
    db: Database,
}

impl PostgresStore {
    pub fn new(db: Database) -> PostgresStore {
        PostgresStore { db }
    }

    pub fn database(&self) -> &Database {
        &self.db
    }
}

/// The advisory-lock key of a root task: FNV-1a of its id. Two tasks sharing a key only wait
/// for each other now and then; they never share state.
fn lock_key(root: &str) -> i32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in root.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h as i32
}

fn parse_state(root: &str, json: &str) -> Result<TaskState, StoreError> {
    super::decode_state(root, json.as_bytes())
}

fn to_json(v: &impl serde::Serialize) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Io(e.to_string()))
}

/// A root task opened by [`PostgresStore::begin`]: the transaction holding its lock.
struct PgTxn {
    db: Database,
    root: String,
    tx: sqlx::Transaction<'static, Postgres>,
}

/// The event's state, audit records and link in one statement. The update applies only over
/// the version the transaction read: anything else is a bug, and rolls back.
const COMMIT_SQL: &str = "
WITH s AS (
    INSERT INTO loopguard_tasks (root, version, updated_ts, state) VALUES ($1, $2, $3, $4)
    ON CONFLICT (root) DO UPDATE
        SET version = EXCLUDED.version, updated_ts = EXCLUDED.updated_ts, state = EXCLUDED.state
        WHERE loopguard_tasks.version = $2 - 1
    RETURNING 1
), a AS (
    INSERT INTO loopguard_audit (root, record)
    SELECT $1, r FROM unnest($5::text[]) WITH ORDINALITY AS u(r, n) ORDER BY n
), l AS (
    INSERT INTO loopguard_links (task, root) SELECT $6, $7 WHERE $6 IS NOT NULL
    ON CONFLICT (task) DO UPDATE SET root = EXCLUDED.root
)
SELECT count(*) FROM s";

const DELETE_SQL: &str = "
WITH t AS (DELETE FROM loopguard_tasks WHERE root = $1 RETURNING 1),
     a AS (DELETE FROM loopguard_audit WHERE root = $1 RETURNING 1),
     l AS (DELETE FROM loopguard_links WHERE root = $1)
SELECT (SELECT count(*) FROM t) + (SELECT count(*) FROM a)";

impl TaskTxn for PgTxn {
    fn commit<'a>(
        self: Box<Self>,
        next: &'a TaskState,
        audit: &'a [AuditRecord],
        link: Option<(&'a str, &'a str)>,
    ) -> StoreFuture<'a, Durable> {
        Box::pin(async move {
            let PgTxn { db, mut tx, .. } = *self;
            let state = to_json(next)?;
            let records = audit.iter().map(to_json).collect::<Result<Vec<_>, _>>()?;
            let written: i64 = sqlx::query_scalar(COMMIT_SQL)
                .bind(&next.root)
                .bind(next.version as i64)
                .bind(next.updated_ts)
                .bind(state)
                .bind(records)
                .bind(link.map(|l| l.0))
                .bind(link.map(|l| l.1))
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| db.failed(e))?;
            if written != 1 {
                return Err(StoreError::Corrupt {
                    task: next.root.clone(),
                    message: format!(
                        "version {} is not the successor of the stored one: the task was written without its lock",
                        next.version
                    ),
                });
            }
            tx.commit().await.map_err(|e| db.failed(e))?;
            Ok(durable_now())
        })
    }

    fn delete<'a>(self: Box<Self>) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let PgTxn { db, mut tx, root } = *self;
            let removed: i64 = sqlx::query_scalar(DELETE_SQL)
                .bind(&root)
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| db.failed(e))?;
            tx.commit().await.map_err(|e| db.failed(e))?;
            Ok(removed > 0)
        })
    }
}

impl Store for PostgresStore {
    fn begin<'a>(
        &'a self,
        root: &'a str,
        cached: Option<TaskState>,
    ) -> StoreFuture<'a, Opened<'a>> {
        Box::pin(async move {
            let db = &self.db;
            let mut tx = db.begin_tx().await?;
            sqlx::query("SELECT pg_advisory_xact_lock($1, $2)")
                .bind(TASK_LOCK_CLASS)
                .bind(lock_key(root))
                .execute(&mut *tx)
                .await
                .map_err(|e| db.failed(e))?;
            // A separate statement: its snapshot is taken after the lock, so it sees the
            // previous holder's commit. The state is sent only when the cached copy is stale.
            let cached_version = cached.as_ref().map_or(-1, |s| s.version as i64);
            let row: Option<(i64, Option<String>)> = sqlx::query_as(
                "SELECT version, CASE WHEN version = $2 THEN NULL ELSE state END
                 FROM loopguard_tasks WHERE root = $1",
            )
            .bind(root)
            .bind(cached_version)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| db.failed(e))?;
            let state = match row {
                None => None,
                Some((_, Some(json))) => Some(parse_state(root, &json)?),
                Some((_, None)) => cached,
            };
            Ok(Opened {
                state,
                txn: Box::new(PgTxn {
                    db: db.clone(),
                    root: root.to_string(),
                    tx,
                }),
            })
        })
    }

    fn load<'a>(&'a self, root: &'a str) -> StoreFuture<'a, Option<TaskState>> {
        Box::pin(async move {
            let json: Option<String> = self
                .db
                .run(|| {
                    sqlx::query_scalar("SELECT state FROM loopguard_tasks WHERE root = $1")
                        .bind(root)
                        .fetch_optional(self.db.pool())
                })
                .await?;
            json.map(|j| parse_state(root, &j)).transpose()
        })
    }

    fn root_of<'a>(&'a self, task: &'a str) -> StoreFuture<'a, Option<String>> {
        Box::pin(self.db.run(move || {
            sqlx::query_scalar("SELECT root FROM loopguard_links WHERE task = $1")
                .bind(task)
                .fetch_optional(self.db.pool())
        }))
    }

    fn history<'a>(&'a self, root: &'a str, limit: usize) -> StoreFuture<'a, Vec<AuditRecord>> {
        Box::pin(async move {
            let rows: Vec<String> = self
                .db
                .run(|| {
                    sqlx::query_scalar(
                        "SELECT record FROM (
                             SELECT id, record FROM loopguard_audit WHERE root = $1
                             ORDER BY id DESC LIMIT $2
                         ) newest ORDER BY id",
                    )
                    .bind(root)
                    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                    .fetch_all(self.db.pool())
                })
                .await?;
            rows.iter()
                .map(|r| {
                    serde_json::from_str(r).map_err(|e| StoreError::Corrupt {
                        task: root.to_string(),
                        message: e.to_string(),
                    })
                })
                .collect()
        })
    }

    fn idle_roots(&self, before_ts: i64) -> StoreFuture<'_, Vec<String>> {
        Box::pin(self.db.run(move || {
            sqlx::query_scalar("SELECT root FROM loopguard_tasks WHERE updated_ts < $1")
                .bind(before_ts)
                .fetch_all(self.db.pool())
        }))
    }

    fn task_count(&self) -> StoreFuture<'_, usize> {
        Box::pin(async move {
            let n: i64 = self
                .db
                .run(|| {
                    sqlx::query_scalar("SELECT count(*) FROM loopguard_tasks")
                        .fetch_one(self.db.pool())
                })
                .await?;
            Ok(n as usize)
        })
    }

    fn recent_roots(&self, limit: usize) -> StoreFuture<'_, (usize, Vec<(String, i64)>)> {
        Box::pin(async move {
            let total = self.task_count().await?;
            let rows: Vec<(String, i64)> = self
                .db
                .run(|| {
                    sqlx::query_as(
                        "SELECT root, updated_ts FROM loopguard_tasks
                         ORDER BY updated_ts DESC, root LIMIT $1",
                    )
                    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                    .fetch_all(self.db.pool())
                })
                .await?;
            Ok((total, rows))
        })
    }

    fn subtask_count<'a>(&'a self, root: &'a str) -> StoreFuture<'a, usize> {
        Box::pin(async move {
            let n: i64 = self
                .db
                .run(|| {
                    sqlx::query_scalar("SELECT count(*) FROM loopguard_links WHERE root = $1")
                        .bind(root)
                        .fetch_one(self.db.pool())
                })
                .await?;
            Ok(n as usize)
        })
    }

    fn flush(&self) -> StoreFuture<'_> {
        // Every commit was durable when it returned.
        Box::pin(std::future::ready(Ok(())))
    }

    fn unready(&self) -> Option<String> {
        self.db.unready()
    }

    fn shared(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;
