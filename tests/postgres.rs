//! The PostgreSQL store: the store checks, the shared loop memory and feedback, the schema's
//! migrations, and replicas end to end — two `loopguard serve` processes on one database under
//! concurrent writers, one of them SIGKILLed, the database stopped for 10 s. A real server
//! (tests/common/pg.rs: a temporary cluster, or `LOOPGUARD_TEST_DATABASE_URL`) and the real
//! model. The server end-to-end tests run on PostgreSQL too (tests/server.rs, `postgres::*`).

mod common;

use common::pg::{self, Postgres};
use common::{http_client, Backend, Server};
use loopguard::embed::{StubBackend, Vector};
use loopguard::feedback::{FeedbackLabel, FeedbackLimits, FeedbackRecord, FeedbackStore};
use loopguard::loop_memory::{LoopMemory, LoopRecord};
use loopguard::store::postgres::{Database, PgFeedback, PgLoops, PgOptions, PostgresStore};
use loopguard::store::{conformance, Store, StoreError};
use loopguard::verdict::{LoopKind, Resolution};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

fn options(url: &str) -> PgOptions {
    PgOptions {
        url: url.to_string(),
        max_connections: 8,
        timeout: Duration::from_secs(3),
        idle_in_transaction: Duration::from_secs(30),
    }
}

async fn database(url: &str) -> Database {
    Database::open(&options(url)).await.unwrap()
}

/// The heavy end-to-end tests run one at a time: each starts several servers with the model,
/// and two at once on two cores would measure the machine, not the store.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_store_passes_the_store_checks() {
    let Some(url) = pg::database() else { return };
    let open = || {
        let db = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(Database::open(&options(&url)))
        })
        .unwrap();
        Arc::new(PostgresStore::new(db)) as Arc<dyn Store>
    };
    conformance::check(open, true, "t").await;
    conformance::check_shared(open(), open(), "shared").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_is_migrated_once_and_a_newer_one_is_refused() {
    let Some(url) = pg::database() else { return };
    let first = database(&url).await;
    assert!(first.unready().is_none(), "{:?}", first.unready());
    // A second replica (or a restart) finds it current.
    let again = database(&url).await;
    assert!(again.unready().is_none());
    drop((first, again));
    {
        use sqlx::{Connection, Executor};
        let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
        let versions: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
                .fetch_all(&mut c)
                .await
                .unwrap();
        assert_eq!(versions, [1, 2, 3]);
        c.execute(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
             VALUES (99, 'from the future', true, '\\x00', 0)",
        )
        .await
        .unwrap();
    }
    let err = Database::open(&options(&url)).await.err().expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("migration 99") && msg.contains("upgrade loopguard"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_unready_and_refuses_fast() {
    // Nothing listens on a port just freed; no PostgreSQL needed for this one.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://loopguard@127.0.0.1:{port}/loopguard");
    let mut opts = options(&url);
    opts.timeout = Duration::from_millis(500);
    let db = Database::open(&opts)
        .await
        .expect("a database that is down does not stop the start");
    let why = db.unready().expect("not ready");
    assert!(why.contains("database"), "{why}");
    let store = PostgresStore::new(db);
    let started = Instant::now();
    let err = store.load("t").await.expect_err("no database");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(Store::unready(&store).is_some());

    let bad = Database::open(&options("postgres://h:notaport/db"))
        .await
        .err()
        .expect("a malformed URL is an error");
    assert!(bad.to_string().contains("server.database_url"), "{bad}");
}

fn loop_record(task: &str, text: &str, ts: i64) -> (LoopRecord, Vector) {
    (
        LoopRecord {
            id: 0,
            task_id: task.into(),
            agent_id: Some("agent-1".into()),
            kind: LoopKind::SemanticRepeat,
            tool: None,
            text: text.into(),
            ts,
            gated: false,
            resolution: None,
        },
        Vector::from(StubBackend::vector(text)),
    )
}

fn memory_config(max_records: usize) -> loopguard::config::MemoryConfig {
    let mut c = loopguard::Config::default().memory;
    c.max_records = max_records;
    c
}

async fn replica_memory(url: &str, max_records: usize) -> LoopMemory {
    LoopMemory::open(
        memory_config(max_records),
        Arc::new(PgLoops::new(database(url).await)),
    )
    .await
    .unwrap()
}

fn tasks_found(m: &LoopMemory, text: &str) -> Vec<String> {
    m.similar(&StubBackend::vector(text), 10, 0.9, None)
        .into_iter()
        .map(|s| s.task_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_memory_is_shared_between_replicas() {
    let Some(url) = pg::database() else { return };
    let a = replica_memory(&url, 3).await;
    let b = replica_memory(&url, 3).await;
    let pool = "database connection pool exhausted";

    let (r, v) = loop_record("task-a", pool, 10);
    let id = a.remember(r, v).await.unwrap().expect("stored");
    assert_eq!(
        tasks_found(&a, pool),
        ["task-a"],
        "at once where remembered"
    );
    assert!(tasks_found(&b, pool).is_empty(), "not before b syncs");
    b.sync().await.unwrap();
    assert_eq!(tasks_found(&b, pool), ["task-a"]);
    assert_eq!(b.records()[0].id, id);
    assert_eq!(b.records()[0].agent_id.as_deref(), Some("agent-1"));

    // A resolution through b reaches a.
    let n = b
        .resolve(
            "task-a",
            Resolution {
                result: "human_intervention".into(),
                note: Some("raised the pool size".into()),
                ts: 11,
            },
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    a.sync().await.unwrap();
    let found = a.similar(&StubBackend::vector(pool), 1, 0.9, None);
    assert_eq!(
        found[0].resolution.as_ref().and_then(|r| r.note.as_deref()),
        Some("raised the pool size")
    );

    // The bound holds across replicas: the store evicts the oldest, both follow.
    for (i, text) in [
        "disk full on /var",
        "permission denied writing the config",
        "timeout connecting to the registry",
    ]
    .iter()
    .enumerate()
    {
        let (r, v) = loop_record(&format!("task-{i}"), text, 20 + i as i64);
        let m = if i % 2 == 0 { &b } else { &a };
        m.remember(r, v).await.unwrap();
    }
    a.sync().await.unwrap();
    b.sync().await.unwrap();
    for m in [&a, &b] {
        let tasks: Vec<String> = m.records().into_iter().map(|r| r.task_id).collect();
        assert_eq!(tasks, ["task-0", "task-1", "task-2"], "task-a was evicted");
    }

    // A deleted task's loops go everywhere.
    a.forget_task("task-1").await.unwrap();
    b.sync().await.unwrap();
    assert_eq!(b.len(), 2);
    assert!(tasks_found(&b, "permission denied writing the config").is_empty());

    // A replica that fell behind tombstones purged since reloads everything.
    a.forget_task("task-0").await.unwrap();
    {
        use sqlx::{Connection, Executor};
        let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
        c.execute(
            "DELETE FROM loopguard_loops WHERE deleted;
             UPDATE loopguard_loop_log SET purged_rev = rev;",
        )
        .await
        .unwrap();
    }
    b.sync().await.unwrap();
    b.wait_for_index();
    let tasks: Vec<String> = b.records().into_iter().map(|r| r.task_id).collect();
    assert_eq!(tasks, ["task-2"]);

    // A new replica loads what is there.
    let c = replica_memory(&url, 3).await;
    c.wait_for_index();
    assert_eq!(
        tasks_found(&c, "timeout connecting to the registry"),
        ["task-2"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feedback_is_shared_between_replicas() {
    let Some(url) = pg::database() else { return };
    let a = FeedbackStore::with_log(Box::new(PgFeedback::new(database(&url).await)));
    let b = FeedbackStore::with_log(Box::new(PgFeedback::new(database(&url).await)));
    let record = |task: &str| FeedbackRecord {
        id: 0,
        ts: 1,
        task_id: task.into(),
        root_task_id: task.into(),
        seq: 2,
        label: FeedbackLabel::FalsePositive,
        note: Some("not a loop".into()),
        kind: LoopKind::SemanticRepeat,
        event_type: "failure".into(),
        text: "b".into(),
        matched_seq: Some(1),
        matched_text: Some("a".into()),
        events: vec![json!({"type": "failure", "message": "a"})],
    };
    let first = a.add(record("t1")).await.unwrap();
    let second = b.add(record("t2")).await.unwrap();
    assert!(second.id > first.id);
    for s in [&a, &b] {
        let all = s.list().await.unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!((all[0].id, all[1].task_id.as_str()), (first.id, "t2"));
        assert_eq!(all[1], second);
    }
}

/// Issue 43: feedback is bounded per root task and in all, the oldest dropped first, whichever
/// replica adds it; pages read it in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feedback_is_bounded_per_task_and_in_all() {
    let Some(url) = pg::database() else { return };
    let limits = FeedbackLimits {
        max_records: 5,
        max_per_task: 3,
    };
    let a = FeedbackStore::with_log(Box::new(PgFeedback::new(database(&url).await)))
        .with_limits(limits);
    let b = FeedbackStore::with_log(Box::new(PgFeedback::new(database(&url).await)))
        .with_limits(limits);
    let record = |task: &str| FeedbackRecord {
        id: 0,
        ts: 1,
        task_id: task.into(),
        root_task_id: task.into(),
        seq: 2,
        label: FeedbackLabel::FalsePositive,
        note: Some("n".repeat(4000)),
        kind: LoopKind::SemanticRepeat,
        event_type: "failure".into(),
        text: "b".into(),
        matched_seq: Some(1),
        matched_text: Some("a".into()),
        events: vec![json!({"type": "failure", "message": "a"})],
    };
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(a.add(record("t1")).await.unwrap().id);
    }
    for _ in 0..3 {
        ids.push(b.add(record("t2")).await.unwrap().id);
    }
    let kept: Vec<(u64, String)> = a
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.id, r.root_task_id))
        .collect();
    let want: Vec<(u64, String)> = [2, 3, 4, 5, 6]
        .iter()
        .map(|&i| (ids[i], if i < 4 { "t1" } else { "t2" }.to_string()))
        .collect();
    assert_eq!(kept, want);
    let page = b.page(ids[3], 2).await.unwrap();
    assert_eq!(
        page.iter().map(|r| r.id).collect::<Vec<_>>(),
        [ids[4], ids[5]]
    );
}

// --- Replicas end to end ------------------------------------------------------------------

/// Both replicas' base URLs; a restarted replica's replaces its old one.
type Bases = Arc<RwLock<Vec<String>>>;

const FAILURES: [&str; 6] = [
    "TypeError: Cannot read properties of undefined (reading 'name') at UserCard (src/components/UserCard.tsx:14:22)",
    "Uncaught TypeError: cannot read property 'name' of undefined in UserCard.tsx line 14",
    "ENOSPC: no space left on device, write",
    "psycopg2.OperationalError: connection to server at \"db\", port 5432 failed: too many connections for role \"app\"",
    "AssertionError: expected the invoice total to be 30 but it was 40 in test_totals",
    "ModuleNotFoundError: No module named 'requests'",
];

/// Event `i` of writer `w`: failures (some reworded repeats, decided by the model) and tool
/// calls (decided on keys), so verdicts go through every path.
fn workload_event(task: &str, w: usize, i: usize) -> Value {
    if (w + i) % 3 == 2 {
        json!({"task_id": task, "agent_id": format!("agent-{w}"), "event": {
            "type": "tool_call", "tool": "run_tests", "args": {"path": format!("tests/test_{}.py", i % 2)},
            "result": {"output": "1 failed, 4 passed", "is_error": true}}})
    } else {
        json!({"task_id": task, "agent_id": format!("agent-{w}"), "event": {
            "type": "failure", "message": FAILURES[(w * 5 + i * 7) % FAILURES.len()]}})
    }
}

/// Settings of every replica here: tasks stay active however many loops they make, and the
/// model's admission control (429 on a loaded 2-core machine) stays out of what these tests
/// count: what the store refuses.
const REPLICA_ARGS: [&str; 6] = [
    "--set",
    "policy.gate_at=0",
    "--set",
    "detect.budget.max_events=0",
    "--set",
    "model.queue_wait_target_ms=60000",
];

/// What happened to one request.
#[derive(Debug, Clone)]
enum Outcome {
    Acked(Value),
    /// An error status (503 while the database is down): not applied, or not known.
    Refused(u16, Value),
    /// No answer (the replica was killed): applied or not, nobody knows.
    Lost,
}

#[derive(Debug, Clone)]
struct Sent {
    task: String,
    body: Value,
    outcome: Outcome,
    /// When the answer (or its absence) came.
    at: Instant,
}

/// `writers` writers, each sending at least `per_writer` events of task `w % tasks`, alternately
/// to each replica, and going on until `until` is set when it is given (so a fault injected
/// while it runs always meets load, however fast the machine). Requests refused with
/// Retry-After wait that long.
/// How far a running load has got: the test waits on what the writers have seen (events
/// acknowledged, refused, lost) instead of sleeping, and tells them when to stop.
#[derive(Default)]
struct Progress {
    stop: AtomicBool,
    acked: AtomicUsize,
    refused: AtomicUsize,
    lost: AtomicUsize,
    changed: tokio::sync::Notify,
}

impl Progress {
    fn record(&self, outcome: &Outcome) {
        let counter = match outcome {
            Outcome::Acked(_) => &self.acked,
            Outcome::Refused(..) => &self.refused,
            Outcome::Lost => &self.lost,
        };
        counter.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    fn acked(&self) -> usize {
        self.acked.load(Ordering::Acquire)
    }

    /// Wait until `done` holds of the counts (at most 30 s: then the test fails, saying what it
    /// waited for).
    async fn until(&self, what: &str, done: impl Fn(&Progress) -> bool) {
        let waited = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if done(self) {
                    return;
                }
                changed.await;
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "waited 30 s for {what}: {} acknowledged, {} refused, {} lost",
            self.acked(),
            self.refused.load(Ordering::Acquire),
            self.lost.load(Ordering::Acquire)
        );
    }
}

async fn load(
    bases: Bases,
    writers: usize,
    tasks: usize,
    per_writer: usize,
    salt: &str,
    until: Option<Arc<Progress>>,
) -> Vec<Sent> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut handles = Vec::new();
    for w in 0..writers {
        let (client, bases, salt) = (client.clone(), Arc::clone(&bases), salt.to_string());
        let until = until.clone();
        handles.push(tokio::spawn(async move {
            let task = format!("{salt}-task-{}", w % tasks);
            let mut sent = Vec::new();
            for i in 0.. {
                let done = match &until {
                    Some(progress) => i >= per_writer && progress.stop.load(Ordering::Acquire),
                    None => i >= per_writer,
                };
                if done {
                    break;
                }
                let base = {
                    let b = bases.read().unwrap();
                    b[(w + i) % b.len()].clone()
                };
                let body = workload_event(&task, w, i);
                let outcome = match client
                    .post(format!("{base}/v1/evaluate"))
                    .json(&body)
                    .send()
                    .await
                {
                    Ok(r) if r.status().is_success() => Outcome::Acked(r.json().await.unwrap()),
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let retry: u64 = r
                            .headers()
                            .get("retry-after")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        let v: Value = r.json().await.unwrap_or(Value::Null);
                        tokio::time::sleep(Duration::from_secs(retry)).await;
                        Outcome::Refused(status, v)
                    }
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        Outcome::Lost
                    }
                };
                if let Some(progress) = &until {
                    progress.record(&outcome);
                }
                sent.push(Sent {
                    task: task.clone(),
                    body,
                    outcome,
                    at: Instant::now(),
                });
            }
            sent
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

/// Per task, the acknowledged verdicts with their events, in the order they were applied.
fn acked_by_task(sent: &[Sent]) -> BTreeMap<String, Vec<(Value, Value)>> {
    let mut out: BTreeMap<String, Vec<(Value, Value)>> = BTreeMap::new();
    for s in sent {
        if let Outcome::Acked(v) = &s.outcome {
            out.entry(s.task.clone())
                .or_default()
                .push((s.body.clone(), v.clone()));
        }
    }
    for events in out.values_mut() {
        events.sort_by_key(|(_, v)| v["seq"].as_u64().unwrap());
    }
    out
}

/// Nothing acknowledged was lost or applied twice: each task's acknowledged events have distinct
/// seqs, the task counted every one of them, and at most the unacknowledged ones besides.
async fn assert_nothing_acknowledged_lost_or_doubled(
    client: &reqwest::Client,
    server: &Server,
    sent: &[Sent],
) {
    let acked = acked_by_task(sent);
    for (task, events) in &acked {
        let seqs: Vec<u64> = events
            .iter()
            .map(|(_, v)| v["seq"].as_u64().unwrap())
            .collect();
        let mut distinct = seqs.clone();
        distinct.dedup();
        assert_eq!(
            distinct, seqs,
            "{task}: two acknowledged events got one seq: one was lost"
        );
        let unknown = sent
            .iter()
            .filter(|s| &s.task == task && !matches!(s.outcome, Outcome::Acked(_)))
            .count() as u64;
        let t: Value = server.get_json(client, &format!("/v1/tasks/{task}")).await;
        let total = t["events_total"].as_u64().unwrap();
        assert!(
            total >= seqs.len() as u64 && total <= seqs.len() as u64 + unknown,
            "{task}: {total} events applied, {} acknowledged, {unknown} unacknowledged",
            seqs.len()
        );
        assert!(*seqs.last().unwrap() <= total);
    }
}

/// The fields of a verdict that depend on the task's events (not the loop memory, which other
/// tasks fill in meanwhile, nor the reason's wording).
fn decision(v: &Value) -> Value {
    json!({
        "seq": v["seq"], "loop": v["loop"], "kind": v["kind"], "loop_count": v["loop_count"],
        "counted": v["counted"], "action": v["action"]["type"], "status": v["status"],
        "pivot_count": v["pivot_count"], "matched": v["matched"]["seq"],
    })
}

async fn start_replicas(backend: &Backend) -> (Server, Server, Bases) {
    let client = http_client();
    let a = backend.start(&REPLICA_ARGS);
    let b = backend.start(&REPLICA_ARGS);
    a.ready(&client).await;
    b.ready(&client).await;
    let bases = Arc::new(RwLock::new(vec![a.base.clone(), b.base.clone()]));
    (a, b, bases)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_apply_a_tasks_events_one_at_a_time_as_one_replica_would() {
    let Some(backend) = Backend::postgres() else {
        return;
    };
    let _serial = serial().await;
    let client = http_client();
    let (a, _b, bases) = start_replicas(&backend).await;
    let sent = load(bases, 8, 4, 20, "pair", None).await;
    assert!(
        sent.iter().all(|s| matches!(s.outcome, Outcome::Acked(_))),
        "every event is acknowledged: {:?}",
        sent.iter()
            .find(|s| !matches!(s.outcome, Outcome::Acked(_)))
    );
    assert_nothing_acknowledged_lost_or_doubled(&client, &a, &sent).await;
    let acked = acked_by_task(&sent);
    for (task, events) in &acked {
        let seqs: Vec<u64> = events
            .iter()
            .map(|(_, v)| v["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, (1..=40).collect::<Vec<_>>(), "{task}");
    }

    // One replica, given each task's events in the order the pair applied them, decides the same.
    let single = Backend::embedded();
    let one = single.start(&REPLICA_ARGS);
    one.ready(&client).await;
    let mut loops = 0;
    for (task, events) in &acked {
        for (body, pair_verdict) in events {
            let r = client
                .post(one.url("/v1/evaluate"))
                .json(body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let v: Value = r.json().await.unwrap();
            assert_eq!(
                decision(&v),
                decision(pair_verdict),
                "{task}: one replica decided otherwise on {body}"
            );
            let (s1, s2) = (
                v["similarity"].as_f64(),
                pair_verdict["similarity"].as_f64(),
            );
            if let (Some(s1), Some(s2)) = (s1, s2) {
                assert!((s1 - s2).abs() < 1e-3, "{task}: similarity {s1} vs {s2}");
            }
            loops += usize::from(v["loop"] == true);
        }
    }
    assert!(loops >= 10, "the workload makes loops ({loops})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_under_load_loses_nothing_and_its_restart_continues() {
    let Some(backend) = Backend::postgres() else {
        return;
    };
    let _serial = serial().await;
    let client = http_client();
    let (a, mut b, bases) = start_replicas(&backend).await;
    let progress = Arc::new(Progress::default());
    let running = tokio::spawn(load(
        Arc::clone(&bases),
        8,
        4,
        40,
        "kill",
        Some(Arc::clone(&progress)),
    ));
    progress
        .until("the load under way", |p| p.acked() >= 16)
        .await;
    b.kill9();
    // The other replica keeps answering while b is gone.
    let t = Instant::now();
    let probe = client
        .post(a.url("/v1/evaluate"))
        .json(&json!({"task_id": "kill-probe", "event": {"type": "failure", "message": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(probe.status(), 200);
    assert!(t.elapsed() < Duration::from_secs(5));
    progress
        .until("requests lost to the killed replica", |p| {
            p.lost.load(Ordering::Acquire) > 0
        })
        .await;
    let restarted = backend.start(&REPLICA_ARGS);
    restarted.ready(&client).await;
    bases.write().unwrap()[1] = restarted.base.clone();
    // Every writer alternates between the replicas: two more answers each reach the restarted one.
    let before = progress.acked();
    progress
        .until("events acknowledged after the restart", |p| {
            p.acked() >= before + 16
        })
        .await;
    progress.stop.store(true, Ordering::Release);
    let sent = running.await.unwrap();

    let lost = sent
        .iter()
        .filter(|s| matches!(s.outcome, Outcome::Lost))
        .count();
    assert!(lost > 0, "some requests went to the killed replica");
    assert!(
        sent.iter()
            .all(|s| !matches!(s.outcome, Outcome::Refused(..))),
        "nothing refused: {:?}",
        sent.iter()
            .find(|s| matches!(s.outcome, Outcome::Refused(..)))
    );
    assert_nothing_acknowledged_lost_or_doubled(&client, &restarted, &sent).await;
    // The restarted replica continues every task where the pair left it.
    for task in acked_by_task(&sent).keys() {
        let before: Value = a.get_json(&client, &format!("/v1/tasks/{task}")).await;
        let r = client
            .post(restarted.url("/v1/evaluate"))
            .json(&workload_event(task, 0, 0))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            v["seq"].as_u64().unwrap(),
            before["events_total"].as_u64().unwrap() + 1,
            "{task}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_for_ten_seconds_means_503s_then_recovery_without_a_restart() {
    let Some(pg) = Postgres::own() else { return };
    let _serial = serial().await;
    let cluster = pg.cluster().expect("a server of its own");
    let backend = Backend {
        dir: tempfile::tempdir().unwrap(),
        database_url: Some(pg.database()),
    };
    let client = http_client();
    let (a, b, bases) = start_replicas(&backend).await;
    let progress = Arc::new(Progress::default());
    let running = tokio::spawn(load(
        Arc::clone(&bases),
        8,
        4,
        40,
        "outage",
        Some(Arc::clone(&progress)),
    ));
    progress
        .until("the load under way", |p| p.acked() >= 16)
        .await;
    cluster.stop();
    let stopped = Instant::now();
    // While it is down: readiness says why (within a few seconds, even on a replica no event
    // reached), and events are refused with 503 storage_error.
    for s in [&a, &b] {
        let deadline = Instant::now() + Duration::from_secs(6);
        let r = loop {
            let r = client.get(s.url("/readyz")).send().await.unwrap();
            if r.status() == 503 || Instant::now() > deadline {
                break r;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(r.status(), 503);
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            (v["status"].as_str(), v["store"].as_str()),
            (Some("unavailable"), Some("unavailable")),
            "{v}"
        );
        assert!(v["error"].as_str().unwrap().contains("database"), "{v}");
    }
    let r = client
        .post(a.url("/v1/evaluate"))
        .json(&json!({"task_id": "outage-probe", "event": {"type": "failure", "message": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["code"], "storage_error", "{v}");
    // The outage's length is the scenario: ten seconds, longer than a writer's Retry-After.
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(stopped.elapsed())).await;
    cluster.resume();
    let resumed = Instant::now();
    // Both replicas become ready again by themselves.
    for s in [&a, &b] {
        tokio::time::timeout(Duration::from_secs(20), s.ready(&client))
            .await
            .expect("ready again after the database is back");
    }
    // Every writer back at work (each waits out its Retry-After first): two answers each since.
    let before = progress.acked();
    progress
        .until("events acknowledged after the outage", |p| {
            p.acked() >= before + 16
        })
        .await;
    progress.stop.store(true, Ordering::Release);
    let sent = running.await.unwrap();

    let refused: Vec<&Sent> = sent
        .iter()
        .filter(|s| matches!(s.outcome, Outcome::Refused(..)))
        .collect();
    assert!(!refused.is_empty(), "the outage was seen");
    for s in &refused {
        let Outcome::Refused(status, v) = &s.outcome else {
            unreachable!()
        };
        assert_eq!(
            (*status, v["code"].as_str()),
            (503, Some("storage_error")),
            "{v}"
        );
    }
    assert!(
        sent.iter().all(|s| !matches!(s.outcome, Outcome::Lost)),
        "the replicas stayed up"
    );
    // Events after the outage were acknowledged again, by both replicas.
    assert!(
        sent.iter()
            .any(|s| s.at > resumed && matches!(s.outcome, Outcome::Acked(_))),
        "nothing acknowledged after the database came back"
    );
    assert_nothing_acknowledged_lost_or_doubled(&client, &a, &sent).await;
    for s in [&a, &b] {
        let after = client
            .post(s.url("/v1/evaluate"))
            .json(&json!({"task_id": "outage-probe", "event": {"type": "failure", "message": "x"}}))
            .send()
            .await
            .unwrap();
        assert_eq!(after.status(), 200, "{:?}", after.text().await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_remembered_by_one_replica_is_offered_by_the_other() {
    let Some(backend) = Backend::postgres() else {
        return;
    };
    let _serial = serial().await;
    let client = http_client();
    let (a, b, _) = start_replicas(&backend).await;
    let post = |s: &Server, body: Value| {
        let (client, url) = (client.clone(), s.url("/v1/evaluate"));
        async move {
            let r = client.post(url).json(&body).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        }
    };
    let pool = "psycopg2.OperationalError: connection to server at \"db\", port 5432 failed: FATAL: too many connections for role \"app\"";
    for _ in 0..3 {
        post(
            &a,
            json!({"task_id": "memory-a", "event": {"type": "failure", "message": pool}}),
        )
        .await;
    }
    post(
        &a,
        json!({"task_id": "memory-a", "event": {"type": "outcome", "result": "human_intervention",
               "note": "closed leaked connections"}}),
    )
    .await;
    // Replica b lists it by itself within seconds.
    let query = format!(
        "/v1/loops/similar?text={}",
        "psycopg2 OperationalError FATAL too many connections for role app".replace(' ', "%20")
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let found = loop {
        let v: Value = b.get_json(&client, &query).await;
        let loops = v["loops"].as_array().cloned().unwrap_or_default();
        if let Some(l) = loops.iter().find(|l| l["task_id"] == "memory-a") {
            break l.clone();
        }
        assert!(Instant::now() < deadline, "replica b never offered it: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(found["resolution"]["note"], "closed leaked connections");
    // And so does a verdict of b's on another task looping the same way.
    let mut offered = Vec::new();
    for _ in 0..3 {
        let v = post(
            &b,
            json!({"task_id": "memory-b", "event": {"type": "failure",
                   "message": "OperationalError: FATAL: too many connections for role \"app\" when connecting to the db server on port 5432"}}),
        )
        .await;
        offered.extend(v["similar_loops"].as_array().cloned().unwrap_or_default());
    }
    assert!(
        offered.iter().any(|l| l["task_id"] == "memory-a"),
        "{offered:#?}"
    );
    let recent: Value = b.get_json(&client, "/v1/loops").await;
    let tasks: HashMap<String, ()> = recent["loops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["task_id"].as_str().unwrap().to_string(), ()))
        .collect();
    assert!(tasks.contains_key("memory-a"), "{recent}");
}
