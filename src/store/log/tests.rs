use super::*;
use crate::config::Config;
use crate::embed::Embedder;
use crate::engine::Engine;
use crate::event::parse_envelope_value;
use serde_json::json;

fn small(segment_bytes: u64) -> LogOptions {
    LogOptions {
        segment_bytes,
        audit_kept: 50,
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn passes_the_store_checks_across_reopen() {
    for segment_bytes in [LogOptions::default().segment_bytes, 256] {
        let dir = tempfile::tempdir().unwrap();
        let open = || {
            Arc::new(LogStore::open(dir.path(), small(segment_bytes)).unwrap()) as Arc<dyn Store>
        };
        block_on(crate::store::conformance::check(open, true, "t"));
    }
}

/// The events of a busy agent: failures repeated and new, tool calls with results, responses,
/// progress, a goal, workflow steps, subtasks.
fn events(task: usize, n: usize) -> Vec<serde_json::Value> {
    (0..n)
        .map(|i| {
            let root = format!("task-{task}");
            let (task_id, parent) = if i % 5 == 4 {
                (format!("{root}/sub-{}", i % 3), Some(root.clone()))
            } else {
                (root.clone(), None)
            };
            let event = match i % 7 {
                0 | 1 => json!({"type": "failure", "message": "OSError: [Errno 28] No space left on device"}),
                2 => json!({"type": "tool_call", "tool": "bash", "args": {"cmd": format!("ls dir{}", i % 4)},
                            "result": {"output": format!("file{} file{}", i % 4, i % 2), "is_error": false}}),
                3 => json!({"type": "response", "text": format!("Let me look at module {} again.", i % 3)}),
                4 => json!({"type": "failure", "message": format!("KeyError: 'k{}' in handler {}", i % 5, i % 2)}),
                5 => json!({"type": "progress", "metrics": {"tests_passed": i % 9, "tests_failed": 9 - i % 9}}),
                _ => json!({"type": "transition", "from": format!("s{}", i % 2), "to": format!("s{}", (i + 1) % 2)}),
            };
            let mut env = json!({"task_id": task_id, "goal": "fix the failing test", "agent_id": format!("a{}", i % 2), "event": event});
            if let Some(p) = parent {
                env["parent_task_id"] = json!(p);
            }
            env
        })
        .collect()
}

async fn drive(engine: &Engine, tasks: usize, per_task: usize) {
    let all: Vec<Vec<serde_json::Value>> = (0..tasks).map(|t| events(t, per_task)).collect();
    for i in 0..per_task {
        for t in &all {
            let env = parse_envelope_value(t[i].clone()).unwrap();
            engine.evaluate(env).await.unwrap();
        }
        if i == per_task / 2 {
            engine
                .reset(
                    "task-0",
                    crate::engine::ResetReason::HumanIntervention,
                    "test",
                    None,
                )
                .await
                .unwrap();
        }
    }
}

fn snapshot_of(store: &LogStore) -> Vec<(TaskState, Vec<AuditRecord>, Vec<String>)> {
    let inner = store.inner();
    let mut out: Vec<_> = inner
        .tasks
        .tasks
        .values()
        .map(|t| {
            let mut subs = t.subtasks.clone();
            subs.sort();
            ((*t.state).clone(), t.audit.iter().cloned().collect(), subs)
        })
        .collect();
    out.sort_by(|a, b| a.0.root.cmp(&b.0.root));
    out
}

/// Run an engine on the log with tiny segments (many snapshots), and check that what recovery
/// rebuilds is exactly what the store held, and what the same events give in memory.
#[test]
fn recovery_rebuilds_every_state_the_engine_committed() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Arc::new(Config::default());
    let (held, stats) = block_on(async {
        let store = Arc::new(LogStore::open(dir.path(), small(2 << 10)).unwrap());
        let engine = Engine::with_store(
            Arc::clone(&cfg),
            Embedder::start_stub(),
            Arc::clone(&store) as Arc<dyn Store>,
        );
        drive(&engine, 4, 120).await;
        engine.delete("task-3").await.unwrap();
        store.flush().await.unwrap();
        let held = snapshot_of(&store);
        let stats = (
            store
                .stats()
                .snapshots
                .load(std::sync::atomic::Ordering::Relaxed),
            store
                .stats()
                .bytes_appended
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        drop(engine);
        (held, stats)
    });
    assert!(stats.0 >= 3, "tiny segments: several snapshots ({stats:?})");
    assert_eq!(held.len(), 3, "task-3 deleted");
    let reopened = LogStore::open(dir.path(), small(2 << 10)).unwrap();
    let rebuilt = snapshot_of(&reopened);
    assert_eq!(rebuilt, held);
    assert_eq!(
        block_on(reopened.root_of("task-1/sub-2"))
            .unwrap()
            .as_deref(),
        Some("task-1")
    );
    assert_eq!(block_on(reopened.root_of("task-3/sub-1")).unwrap(), None);
    drop(reopened);

    // The same events in memory end in the same states.
    let memory = block_on(async {
        let store = Arc::new(crate::store::InMemoryStore::new());
        let engine = Engine::with_store(
            Arc::clone(&cfg),
            Embedder::start_stub(),
            Arc::clone(&store) as Arc<dyn Store>,
        );
        drive(&engine, 4, 120).await;
        let mut states = Vec::new();
        for t in 0..3 {
            states.push(store.load(&format!("task-{t}")).await.unwrap().unwrap());
        }
        states
    });
    for (got, want) in rebuilt.iter().zip(&memory) {
        // Wall-clock fields aside (the runs were seconds apart).
        let strip = |s: &TaskState| {
            let mut s = s.clone();
            s.created_ts = 0;
            s.updated_ts = 0;
            for e in s.window.iter_mut() {
                e.ts = 0;
            }
            for v in s.recent_verdicts.iter_mut() {
                v.ts = 0;
            }
            s
        };
        assert_eq!(strip(&got.0), strip(want));
    }
}

#[test]
fn a_torn_tail_is_cut_off_and_the_rest_kept() {
    let dir = tempfile::tempdir().unwrap();
    let held = block_on(async {
        let store = Arc::new(LogStore::open(dir.path(), LogOptions::default()).unwrap());
        let engine = Engine::with_store(
            Arc::new(Config::default()),
            Embedder::start_stub(),
            Arc::clone(&store) as Arc<dyn Store>,
        );
        drive(&engine, 2, 30).await;
        store.flush().await.unwrap();
        let held = snapshot_of(&store);
        drop(engine);
        held
    });
    // A crash in the middle of a write: half a record at the end.
    let listing = files::list(dir.path()).unwrap();
    let last = files::segment_path(dir.path(), *listing.segments.last().unwrap());
    let mut record = Vec::new();
    files::frame(
        &mut record,
        &Record::Delete {
            root: "task-0".into(),
        },
    )
    .unwrap();
    let mut half = Vec::new();
    files::encode_batch(&mut files::History::default(), &record, &mut half).unwrap();
    half.truncate(half.len() / 2);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&last)
        .unwrap();
    f.write_all(&half).unwrap();
    drop(f);
    let size = std::fs::metadata(&last).unwrap().len();
    let reopened = LogStore::open(dir.path(), LogOptions::default()).unwrap();
    let rebuilt = snapshot_of(&reopened);
    assert!(rebuilt == held, "the unfinished delete never happened");
    assert_eq!(
        std::fs::metadata(&last).unwrap().len(),
        size - half.len() as u64,
        "the torn record is cut off, so appends continue after the last whole one"
    );
    // And it takes commits again.
    let mut st = TaskState::new("after", 1);
    st.version = 1;
    block_on(crate::store::conformance::commit(&reopened, &st, &[], None)).unwrap();
    // Its batch was compressed against the records recovery read back: it reads back too.
    drop(reopened);
    let again = LogStore::open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(
        block_on(again.load("after")).unwrap().map(|s| s.version),
        Some(1)
    );
    assert_eq!(snapshot_of(&again).len(), held.len() + 1);
}

/// A crash can only cut the end of the last segment (a segment is complete and synced before
/// the next one starts), so damage anywhere before it is refused, with the file and offset.
#[test]
fn damage_before_the_last_segment_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    // Damage in a segment that later segments follow is refused, with the file and offset.
    let mut record = Vec::new();
    files::frame(&mut record, &Record::Delete { root: "x".into() }).unwrap();
    let mut good = files::MAGIC.to_vec();
    files::encode_batch(&mut files::History::default(), &record, &mut good).unwrap();
    std::fs::write(
        files::segment_path(dir.path(), 0),
        [&good[..], &good[..5]].concat(),
    )
    .unwrap();
    std::fs::write(files::segment_path(dir.path(), 1), &good).unwrap();
    let err = LogStore::open(dir.path(), small(1 << 20)).err().unwrap();
    let msg = err.to_string();
    assert!(
        msg.contains("seg-0000000000.log at byte") && msg.contains("later segments"),
        "{msg}"
    );
}

#[test]
fn one_process_per_directory() {
    let dir = tempfile::tempdir().unwrap();
    let _first = LogStore::open(dir.path(), LogOptions::default()).unwrap();
    let err = LogStore::open(dir.path(), LogOptions::default())
        .err()
        .unwrap();
    assert!(err.to_string().contains("another loopguard"), "{err}");
}

/// A long run on a steady set of tasks reaches a steady disk size: old segments and snapshots
/// are deleted once a newer snapshot holds what they did. A looping task's events cost well
/// under 1 KB each.
#[test]
fn disk_use_stays_bounded_under_a_steady_load() {
    let dir = tempfile::tempdir().unwrap();
    let segment_bytes = 8 << 10;
    block_on(async {
        let store = Arc::new(LogStore::open(dir.path(), small(segment_bytes)).unwrap());
        let engine = Engine::with_store(
            Arc::new(Config::default()),
            Embedder::start_stub(),
            Arc::clone(&store) as Arc<dyn Store>,
        );
        let failure = |t: usize| {
            parse_envelope_value(json!({"task_id": format!("loop-{t}"),
                "event": {"type": "failure", "message": "OSError: [Errno 28] No space left on device"}}))
            .unwrap()
        };
        let mut sizes = Vec::new();
        for _ in 0..8 {
            for _ in 0..150 {
                for t in 0..8 {
                    engine.evaluate(failure(t)).await.unwrap();
                }
            }
            store.flush().await.unwrap();
            // Let a snapshot in progress finish before measuring.
            for _ in 0..200 {
                if !store.inner().snapshotting {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            sizes.push(store.size_on_disk());
        }
        let events = 8 * 150 * 8u64;
        let appended = store
            .stats()
            .bytes_appended
            .load(std::sync::atomic::Ordering::Relaxed);
        let per_event = appended / events;
        assert!(per_event < 1024, "{per_event} bytes appended per event");
        // About one snapshot and two segments at any time (a snapshot being written is a
        // second one for a moment), whatever the run's length.
        let snapshot = sizes_of_snapshots(dir.path())
            .into_iter()
            .max()
            .unwrap_or(0);
        assert!(snapshot > 0, "snapshots were written");
        let bound = 2 * segment_bytes + 2 * snapshot;
        assert!(
            sizes.iter().all(|&s| s <= bound),
            "disk stays under two segments and two snapshots: {sizes:?} (bound {bound})"
        );
        assert!(
            appended > 10 * bound,
            "the run wrote far more than it keeps"
        );
        drop(engine);
    });
}

fn sizes_of_snapshots(dir: &Path) -> Vec<u64> {
    let listing = files::list(dir).unwrap();
    listing
        .snapshots
        .iter()
        .map(|&n| {
            std::fs::metadata(files::snapshot_path(dir, n))
                .unwrap()
                .len()
        })
        .collect()
}

/// A segment that went missing (deleted by hand, a bad restore) is refused by name, not skipped.
#[test]
fn a_missing_segment_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut record = Vec::new();
    files::frame(&mut record, &Record::Delete { root: "x".into() }).unwrap();
    let mut good = files::MAGIC.to_vec();
    files::encode_batch(&mut files::History::default(), &record, &mut good).unwrap();
    std::fs::write(files::segment_path(dir.path(), 0), &good).unwrap();
    std::fs::write(files::segment_path(dir.path(), 2), &good).unwrap();
    let err = LogStore::open(dir.path(), small(1 << 20)).err().unwrap();
    assert!(err.to_string().contains("seg-0000000001.log"), "{err}");

    // Without a snapshot, the log starts at segment 0.
    std::fs::remove_file(files::segment_path(dir.path(), 0)).unwrap();
    let err = LogStore::open(dir.path(), small(1 << 20)).err().unwrap();
    assert!(err.to_string().contains("no snapshot"), "{err}");
}

/// A model that fails on texts saying "boom" (the stub otherwise).
struct FailsOnBoom;

impl crate::embed::EmbedBackend for FailsOnBoom {
    fn embed_batch(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, crate::embed::EmbedError> {
        if texts.iter().any(|t| t.contains("boom")) {
            return Err(crate::embed::EmbedError::Model("boom".into()));
        }
        Ok(texts
            .iter()
            .map(|t| crate::embed::StubBackend::vector(t))
            .collect())
    }

    fn describe(&self) -> String {
        "fails on boom (tests only)".into()
    }
}

/// The engine changes a task's state in place; an evaluation that fails commits nothing, and
/// the task's next event starts from the state as committed, on the store and in the engine.
#[test]
fn a_failed_evaluation_leaves_the_task_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let store = Arc::new(LogStore::open(dir.path(), LogOptions::default()).unwrap());
        let embedder = Embedder::start(
            || Ok(Box::new(FailsOnBoom) as Box<dyn crate::embed::EmbedBackend>),
            crate::embed::EmbedderOptions::default(),
        );
        let engine = Engine::with_store(
            Arc::new(Config::default()),
            embedder,
            Arc::clone(&store) as Arc<dyn Store>,
        );
        let failure = |m: &str| {
            parse_envelope_value(
                json!({"task_id": "t", "event": {"type": "failure", "message": m}}),
            )
            .unwrap()
        };
        for _ in 0..2 {
            engine
                .evaluate(failure("ValueError: invalid configuration value for key"))
                .await
                .unwrap();
        }
        let before = engine.snapshot("t").await.unwrap().unwrap();
        let appended = store.inner().appended;
        let err = engine
            .evaluate(failure("RuntimeError: boom in the scheduler"))
            .await;
        assert!(err.is_err(), "the model failed");
        assert_eq!(store.inner().appended, appended, "nothing was committed");
        let after = engine.snapshot("t").await.unwrap().unwrap();
        assert_eq!(after, before, "the task is as it was");
        // The next event continues from the committed state: seq and counter move by one.
        let v = engine
            .evaluate(failure("ValueError: invalid configuration value for key"))
            .await
            .unwrap();
        let next = engine.snapshot("t").await.unwrap().unwrap();
        assert_eq!(
            v.seq, before.next_seq,
            "the failed event took no sequence number"
        );
        assert_eq!(next.events_total, before.events_total + 1);
        assert_eq!(next.loop_count, before.loop_count + 1, "{v:?}");
    });
}
