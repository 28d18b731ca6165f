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
        cached_tasks: 10_000,
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

/// Every task the store holds: its state, audit trail and subtasks, read through the store
/// (from memory or back from disk).
fn snapshot_of(store: &LogStore) -> Vec<(TaskState, Vec<AuditRecord>, Vec<String>)> {
    let roots: Vec<(String, Vec<String>)> = {
        let inner = store.inner();
        inner
            .index
            .entries
            .keys()
            .map(|r| {
                let mut subs: Vec<String> = inner
                    .index
                    .subtasks
                    .get(r)
                    .into_iter()
                    .flatten()
                    .map(|s| s.to_string())
                    .collect();
                subs.sort();
                (r.to_string(), subs)
            })
            .collect()
    };
    let mut out: Vec<_> = roots
        .into_iter()
        .map(|(root, subs)| {
            let t = store.task(&root, false).unwrap().expect("a task it lists");
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
    // A crash in the middle of a write: half a record at the end (and no clean close).
    files::remove_closed(dir.path()).unwrap();
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

/// The events of `tasks` tasks (busy ones: subtasks, resets, a deletion) run with at most
/// `cached` task states in memory, in the engine and in the store, with tiny segments: states
/// leave memory, go to the spill file and into snapshots, and come back when their task does.
/// Every state ends as it does with everything in memory, and reads back so after a reopen.
#[test]
fn states_leave_memory_and_come_back_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let cached = 3;
    let mut cfg = Config::default();
    cfg.server.max_cached_tasks = cached;
    let cfg = Arc::new(cfg);
    let opts = LogOptions {
        segment_bytes: 16 << 10,
        audit_kept: 50,
        cached_tasks: cached,
    };
    let (held, spilled, snapshots) = block_on(async {
        let store = Arc::new(LogStore::open(dir.path(), opts).unwrap());
        let engine = Engine::with_store(
            Arc::clone(&cfg),
            Embedder::start_stub(),
            Arc::clone(&store) as Arc<dyn Store>,
        );
        drive(&engine, 12, 40).await;
        engine.delete("task-7").await.unwrap();
        store.flush().await.unwrap();
        assert!(
            engine.cached_tasks() <= cached,
            "the engine holds {} states",
            engine.cached_tasks()
        );
        // The writer trims the store's copies after each group commit.
        assert!(
            store.cached_tasks() <= cached + 1,
            "the store holds {} states",
            store.cached_tasks()
        );
        let held = snapshot_of(&store);
        let stats = store.stats();
        (
            held,
            stats.spilled.load(std::sync::atomic::Ordering::Relaxed),
            stats.snapshots.load(std::sync::atomic::Ordering::Relaxed),
        )
    });
    assert!(spilled > 0, "states went to the spill file");
    assert!(snapshots > 0, "snapshots were written");
    assert_eq!(held.len(), 11);
    let memory = block_on(async {
        let store = Arc::new(crate::store::InMemoryStore::new());
        let engine = Engine::with_store(
            Arc::new(Config::default()),
            Embedder::start_stub(),
            Arc::clone(&store) as Arc<dyn Store>,
        );
        drive(&engine, 12, 40).await;
        engine.delete("task-7").await.unwrap();
        let mut states = Vec::new();
        for (s, _, _) in &held {
            states.push(store.load(&s.root).await.unwrap().unwrap());
        }
        states
    });
    let strip = |s: &TaskState| {
        let mut s = s.clone();
        s.forget_vectors();
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
    for ((got, _, _), want) in held.iter().zip(&memory) {
        assert_eq!(strip(got), strip(want), "{}", got.root);
    }
    let reopened = LogStore::open(dir.path(), opts).unwrap();
    assert_eq!(snapshot_of(&reopened), held, "and so after a reopen");
}

/// A segment of one batch per record.
fn one_batch_segment(records: &[Record]) -> Vec<u8> {
    let mut file = files::MAGIC.to_vec();
    let mut history = files::History::default();
    for r in records {
        let mut buf = Vec::new();
        files::frame(&mut buf, r).unwrap();
        files::encode_batch(&mut history, &buf, &mut file).unwrap();
    }
    file
}

fn commit_record(root: &str, version: u64) -> Record {
    let mut st = TaskState::new(root, 1);
    st.version = version;
    Record::Commit {
        root: root.into(),
        base: None,
        full: Some(Box::new(st)),
        delta: None,
        audit: Vec::new(),
        link: None,
    }
}

/// A crash cuts only what was being written; a bad batch with whole ones after it is damage,
/// and is refused with the file, the byte and the tasks after it: nothing is cut. (The batches
/// right after it were compressed against its bytes and cannot be read either; from the next
/// restart point of the chain on, they can.)
#[test]
fn a_bad_batch_followed_by_whole_ones_is_refused_not_cut() {
    let dir = tempfile::tempdir().unwrap();
    let records: Vec<Record> = (0..400)
        .map(|i| {
            let Record::Commit { root, full, .. } = commit_record(&format!("t{i}"), 1) else {
                unreachable!()
            };
            let mut full = full.unwrap();
            full.goal = Some(format!(
                "{i} {}",
                "fill the disk with partial reports ".repeat(40)
            ));
            Record::Commit {
                root,
                base: None,
                full: Some(full),
                delta: None,
                audit: Vec::new(),
                link: None,
            }
        })
        .collect();
    let twentieth = one_batch_segment(&records[..20]).len();
    let mut file = one_batch_segment(&records);
    let path = files::segment_path(dir.path(), 0);
    // A byte inside the 21st batch, well before the first restart point.
    file[twentieth + 30] ^= 0x5a;
    std::fs::write(&path, &file).unwrap();
    let err = LogStore::open(dir.path(), small(1 << 30)).err().unwrap();
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("seg-0000000000.log at byte {twentieth}"))
            && msg.contains("whole batches follow"),
        "{msg}"
    );
    let named: u64 = msg
        .split(" tasks: ")
        .next()
        .and_then(|h| h.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(named > 100, "names the tasks after the damage: {msg}");
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        file.len() as u64,
        "nothing was cut"
    );
}

/// After a clean close nothing can be torn: a shorter last segment is damage.
#[test]
fn a_log_closed_cleanly_refuses_a_cut_tail() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = LogStore::open(dir.path(), small(1 << 20)).unwrap();
        for i in 0..5 {
            let mut st = TaskState::new(&format!("t{i}"), 1);
            st.version = 1;
            block_on(crate::store::conformance::commit(&store, &st, &[], None)).unwrap();
        }
    }
    assert!(files::closed_path(dir.path()).exists(), "closed cleanly");
    let path = files::segment_path(dir.path(), 0);
    let len = std::fs::metadata(&path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - 10).unwrap();
    drop(f);
    let err = LogStore::open(dir.path(), small(1 << 20)).err().unwrap();
    assert!(
        err.to_string().contains("closed cleanly")
            && err.to_string().contains("seg-0000000000.log"),
        "{err}"
    );
    // As after a crash (no clean close) in the middle of writing the last batch — which was
    // then never acknowledged, so its note line never written — the cut batch is a torn write
    // and is cut off.
    files::remove_closed(dir.path()).unwrap();
    let note = std::fs::read_to_string(files::note_path(dir.path(), 0)).unwrap();
    let lines: Vec<&str> = note.lines().collect();
    std::fs::write(
        files::note_path(dir.path(), 0),
        lines[..lines.len() - 1].join("\n") + "\n",
    )
    .unwrap();
    // (A damaged note line is read as its end, too: a note never says more than it should.)
    let store = LogStore::open(dir.path(), small(1 << 20)).unwrap();
    assert_eq!(block_on(store.task_count()).unwrap(), 4);
}

/// Snapshots of the first format (one compressed chain, whole tasks with their subtasks) are
/// read, and replaced by one of the current format at the next rotation.
#[test]
fn a_snapshot_of_the_first_format_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = TaskState::new("old", 1);
    st.version = 3;
    st.loop_count = 2;
    let mut file = files::MAGIC_V1.to_vec();
    let mut history = files::History::default();
    let mut buf = Vec::new();
    files::frame(
        &mut buf,
        &Record::Task {
            state: Box::new(st.clone()),
            audit: VecDeque::new(),
            subtasks: vec!["old/sub".into()],
        },
    )
    .unwrap();
    files::frame(&mut buf, &Record::End { tasks: 1 }).unwrap();
    files::encode_batch(&mut history, &buf, &mut file).unwrap();
    std::fs::write(files::snapshot_path(dir.path(), 4), &file).unwrap();
    let store = LogStore::open(dir.path(), small(256)).unwrap();
    assert_eq!(block_on(store.load("old")).unwrap(), Some(st.clone()));
    assert_eq!(
        block_on(store.root_of("old/sub")).unwrap().as_deref(),
        Some("old")
    );
    // Commits rotate the tiny segment: a snapshot of the current format replaces it.
    for v in 4..40 {
        st.version = v;
        block_on(crate::store::conformance::commit(&store, &st, &[], None)).unwrap();
    }
    drop(store);
    let newest = *files::list(dir.path()).unwrap().snapshots.last().unwrap();
    assert!(newest > 4);
    assert_eq!(
        snapshot_layout(&files::snapshot_path(dir.path(), newest)).unwrap(),
        Layout::Blocks
    );
    let store = LogStore::open(dir.path(), small(256)).unwrap();
    assert_eq!(
        block_on(store.load("old")).unwrap().map(|s| s.version),
        Some(39)
    );
    assert_eq!(
        block_on(store.root_of("old/sub")).unwrap().as_deref(),
        Some("old")
    );
}

/// A task deleted after it wrote most of the log is not replayed at the next start: once most
/// of what the segments hold is dead, a snapshot without it replaces them.
#[test]
fn a_deleted_task_leaves_nothing_to_replay() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async {
        let store = LogStore::open(dir.path(), LogOptions::default()).unwrap();
        let mut st = TaskState::new("big", 1);
        for v in 1..=1200u64 {
            st.version = v;
            // A new goal each time: ~1.5 KB per record, 1.8 MB in all.
            st.goal = Some(format!("{v} {}", "g".repeat(1500)));
            // Each commit links a new subtask: a root with many subtasks.
            let sub = format!("big/sub-{v}");
            crate::store::conformance::commit(&store, &st, &[], Some((&sub, "big")))
                .await
                .unwrap();
        }
        assert_eq!(store.subtask_count("big").await.unwrap(), 1200);
        let opened = store.begin("big", None).await.unwrap();
        assert!(opened.txn.delete().await.unwrap());
        // One more commit lets the writer see the dead records and rotate.
        let other = TaskState::new("other", 1);
        crate::store::conformance::commit(&store, &other, &[], None)
            .await
            .unwrap();
        for _ in 0..200 {
            if store
                .stats()
                .snapshots
                .load(std::sync::atomic::Ordering::Relaxed)
                > 0
                && !store.inner().snapshotting
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(
            store
                .stats()
                .snapshots
                .load(std::sync::atomic::Ordering::Relaxed),
            1,
            "the dead records were compacted away"
        );
    });
    let listing = files::list(dir.path()).unwrap();
    assert_eq!(listing.segments, [1], "the old segment is gone");
    let size = std::fs::metadata(files::segment_path(dir.path(), 1))
        .unwrap()
        .len();
    assert!(
        size < 4096,
        "nothing of the deleted task left to replay ({size} bytes)"
    );
    let store = LogStore::open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(block_on(store.task_count()).unwrap(), 1);
    assert_eq!(block_on(store.root_of("big/sub-7")).unwrap(), None);
}

/// A known write history: `tasks` tasks, `per_task` commits each, interleaved (task 0's first,
/// task 1's first, …, task 0's second, …), each awaited, so each is its own batch. Commit `i`
/// is task `i % tasks` at version `i / tasks + 1`.
fn write_history(dir: &Path, opts: LogOptions, tasks: usize, per_task: usize) {
    let store = LogStore::open(dir, opts).unwrap();
    for i in 0..tasks * per_task {
        let mut st = TaskState::new(&format!("h{}", i % tasks), 1);
        st.version = (i / tasks + 1) as u64;
        st.goal = Some(format!(
            "commit {i}: {}",
            "of a known write history ".repeat(3)
        ));
        block_on(crate::store::conformance::commit(&store, &st, &[], None)).unwrap();
    }
}

/// As after a SIGKILL: no clean close.
fn crash(dir: &Path) {
    files::remove_closed(dir).unwrap();
}

/// Where each batch of a segment ends.
fn batch_ends(path: &Path) -> Vec<u64> {
    let bytes = std::fs::read(path).unwrap();
    let mut at = files::MAGIC.len();
    let mut ends = Vec::new();
    while at + 12 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += 12 + len;
        ends.push(at as u64);
    }
    ends
}

fn copy_of(from: &Path, to: &Path) -> PathBuf {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() && e.file_name() != "LOCK" {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
    to.to_path_buf()
}

/// Each task of the history short of its last commit: (task, kept version, last version).
fn short_of(report: &examine::Report) -> Vec<(String, Option<u64>, u64)> {
    report
        .short
        .iter()
        .map(|s| (s.task_id.clone(), s.kept_version, s.last_version))
        .collect()
}

/// What the first `n` commits of the history leave each task at, for the tasks short of
/// `per_task`: (task, kept, per_task).
fn expected_short(tasks: usize, per_task: usize, n: usize) -> Vec<(String, Option<u64>, u64)> {
    let mut out: Vec<_> = (0..tasks)
        .filter_map(|t| {
            let kept = (0..n).filter(|i| i % tasks == t).count() as u64;
            (kept < per_task as u64)
                .then(|| (format!("h{t}"), (kept > 0).then_some(kept), per_task as u64))
        })
        .collect();
    out.sort();
    out
}

/// Issue 43: acknowledged events gone from the segment being written (cut at a batch boundary
/// after a crash, or the whole file deleted) are refused at start, and `store verify` says how
/// many were lost, task by task, exactly as the known write history has them.
#[test]
fn a_cut_or_missing_last_segment_is_refused_and_verify_counts_what_it_held() {
    let (tasks, per_task) = (12, 20);
    let root = tempfile::tempdir().unwrap();
    let written = root.path().join("written");
    write_history(&written, small(1 << 30), tasks, per_task);
    crash(&written);
    let seg = |dir: &Path| files::segment_path(dir, 0);
    let ends = batch_ends(&seg(&written));
    assert_eq!(ends.len(), tasks * per_task, "one batch per commit");
    let intact = examine::verify(&written).unwrap();
    assert!(intact.is_sound(), "{}", intact.render());

    // Cut at a batch boundary: it reads as a whole log, but the note written after each
    // batch says 100 more commits were acknowledged.
    let cut = copy_of(&written, &root.path().join("cut"));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(seg(&cut))
        .unwrap();
    f.set_len(ends[139]).unwrap();
    drop(f);
    let err = LogStore::open(&cut, small(1 << 30))
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("seg-0000000000.log") && err.contains("100 acknowledged"),
        "{err}"
    );
    let report = examine::verify(&cut).unwrap();
    assert!(!report.is_sound(), "{}", report.render());
    assert_eq!(
        short_of(&report),
        expected_short(tasks, per_task, 140),
        "{}",
        report.render()
    );
    assert_eq!(report.events_lost, 100, "{}", report.render());
    assert!(
        report.render().contains("100 acknowledged events"),
        "{}",
        report.render()
    );

    // The segment deleted: nothing reads back, and the start is refused, not an empty log.
    let gone = copy_of(&written, &root.path().join("gone"));
    std::fs::remove_file(seg(&gone)).unwrap();
    let err = LogStore::open(&gone, small(1 << 30))
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("seg-0000000000.log")
            && err.contains("missing")
            && err.contains("240 acknowledged"),
        "{err}"
    );
    let report = examine::verify(&gone).unwrap();
    assert!(!report.is_sound(), "{}", report.render());
    assert_eq!(
        short_of(&report),
        expected_short(tasks, per_task, 0),
        "{}",
        report.render()
    );
    assert_eq!(report.events_lost, 240);
    // Salvage writes what is left (nothing) and reports the same.
    let salvaged = examine::salvage(&gone, &root.path().join("salvaged"), 50).unwrap();
    assert_eq!(short_of(&salvaged), short_of(&report));

    // A flipped byte in batch 100: the tasks are kept where their records stop applying, and
    // each one's last version is the one its commits reached.
    let flipped = copy_of(&written, &root.path().join("flipped"));
    let mut bytes = std::fs::read(seg(&flipped)).unwrap();
    bytes[ends[99] as usize + 20] ^= 0x5a;
    std::fs::write(seg(&flipped), &bytes).unwrap();
    assert!(LogStore::open(&flipped, small(1 << 30)).is_err());
    let report = examine::verify(&flipped).unwrap();
    let short = short_of(&report);
    assert!(
        short
            .iter()
            .any(|(t, kept, _)| t == "h4" && kept.is_some_and(|k| k <= 8)),
        "commit 100 is h4's 9th: {}",
        report.render()
    );
    for (task, kept, last) in &short {
        assert_eq!(*last, per_task as u64, "{task}: {}", report.render());
        assert!(kept.unwrap_or(0) < *last);
    }
    let lost: u64 = short.iter().map(|(_, k, l)| l - k.unwrap_or(0)).sum();
    assert_eq!(report.events_lost, lost, "{}", report.render());
}

/// Issue 43: with segments rotated and snapshots written, the newest segment deleted after a
/// crash is refused by name with the events it held; the log as left (and a directory of the
/// previous version, with no manifest or notes) opens.
#[test]
fn a_missing_newest_segment_after_rotations_is_refused_and_an_old_directory_opens() {
    let (tasks, per_task) = (12, 20);
    let root = tempfile::tempdir().unwrap();
    let written = root.path().join("written");
    write_history(&written, small(4 << 10), tasks, per_task);
    crash(&written);
    let listing = files::list(&written).unwrap();
    assert!(!listing.snapshots.is_empty(), "rotated and snapshotted");
    let newest = *listing.segments.last().unwrap();
    let held = files::scan(
        &files::segment_path(&written, newest),
        Layout::Chained,
        |_, _, _| {},
    )
    .unwrap()
    .records;
    assert!(held > 0);

    let gone = copy_of(&written, &root.path().join("gone"));
    std::fs::remove_file(files::segment_path(&gone, newest)).unwrap();
    let err = LogStore::open(&gone, small(4 << 10))
        .err()
        .expect("refused")
        .to_string();
    let name = format!("seg-{newest:010}.log");
    assert!(
        err.contains(&name) && err.contains(&format!("{held} acknowledged")),
        "{err}"
    );
    let report = examine::verify(&gone).unwrap();
    assert!(!report.is_sound());
    assert_eq!(report.events_lost, held, "{}", report.render());
    for (task, kept, last) in short_of(&report) {
        assert_eq!(last, per_task as u64, "{task}: {}", report.render());
        assert!(
            kept.is_some_and(|k| k < last),
            "{task}: {}",
            report.render()
        );
    }

    // The log as written opens, whole.
    let store = LogStore::open(
        &copy_of(&written, &root.path().join("as-left")),
        small(4 << 10),
    )
    .unwrap();
    assert_eq!(
        block_on(store.load("h3")).unwrap().unwrap().version,
        per_task as u64
    );
    drop(store);

    // A directory of the previous version: no manifest, no notes. Not damage: it opens, and
    // from then on it has them.
    let old = copy_of(&written, &root.path().join("old"));
    for e in std::fs::read_dir(&old).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name == "MANIFEST" || name.ends_with(".note") {
            std::fs::remove_file(&p).unwrap();
        }
    }
    let store = LogStore::open(&old, small(4 << 10)).unwrap();
    assert_eq!(
        block_on(store.load("h11")).unwrap().unwrap().version,
        per_task as u64
    );
    drop(store);
    assert!(files::manifest_path(&old).exists());
    assert!(examine::verify(&old).unwrap().is_sound());
}

/// The manifest and notes are checked by their own checksums: a damaged note line reads as the
/// note's end (it never claims more than the segment holds, so it refuses nothing), a damaged
/// manifest is refused by its own name.
#[test]
fn a_damaged_note_or_manifest_is_told_from_a_damaged_segment() {
    let root = tempfile::tempdir().unwrap();
    let written = root.path().join("written");
    write_history(&written, small(1 << 30), 3, 5);
    crash(&written);
    // A digit of a note line changed ("end":4…  → "end":5…): its checksum no longer matches.
    let note = copy_of(&written, &root.path().join("note"));
    let path = files::note_path(&note, 0);
    let mut text = std::fs::read(&path).unwrap();
    let at = text.windows(6).position(|w| w == b"\"end\":").unwrap() + 6;
    text[at] = if text[at] == b'9' { b'1' } else { text[at] + 1 };
    std::fs::write(&path, &text).unwrap();
    let store = LogStore::open(&note, small(1 << 30)).expect("a damaged note is not damage");
    assert_eq!(block_on(store.load("h2")).unwrap().unwrap().version, 5);
    drop(store);

    let manifest = copy_of(&written, &root.path().join("manifest"));
    let path = files::manifest_path(&manifest);
    let mut text = std::fs::read(&path).unwrap();
    let at = text.iter().position(u8::is_ascii_digit).unwrap();
    text[at] = if text[at] == b'9' { b'1' } else { text[at] + 1 };
    std::fs::write(&path, &text).unwrap();
    let err = LogStore::open(&manifest, small(1 << 30))
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("MANIFEST"), "{err}");
}
