//! The embedded store's task log as the service uses it: tasks an earlier version kept in sled
//! are moved into the log at the first start and served from it, and the log's counters are
//! on `/metrics`; damage anywhere is refused by name, verified and salvaged, never cut; task
//! states leave memory and come back; a full disk is survived without a restart; the server
//! answers `/livez` while it replays.

mod common;

use common::Server;
use loopguard::audit::{AuditEvent, AuditRecord};
use loopguard::state::TaskState;
use loopguard::store::log::{examine, LogOptions, LogStore};
use loopguard::store::sled::SledStore;
use loopguard::store::Store;
use loopguard::{Config, Embedder, Engine};
use std::path::Path;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_kept_in_sled_move_to_the_task_log_at_the_first_start() {
    let dir = tempfile::tempdir().unwrap();
    {
        // What a version before the task log left in its data directory.
        let sled = SledStore::open(dir.path()).unwrap();
        let mut st = TaskState::new("old-task", 1_700_000_000);
        st.version = 7;
        st.loop_count = 4;
        st.events_total = 9;
        let audit = [AuditRecord {
            ts: 1_700_000_000,
            client_ts: None,
            seq: 9,
            task_id: "old-task".into(),
            agent_id: None,
            event: AuditEvent::BudgetExhausted { events: 9 },
        }];
        loopguard::store::conformance::commit(&sled, &st, &audit, Some(("old-sub", "old-task")))
            .await
            .unwrap();
        sled.flush().await.unwrap();
    }

    let client = common::http_client();
    for start in 0..2 {
        let s = Server::start(dir.path(), &[]);
        let task = s.get_json(&client, "/v1/tasks/old-sub").await;
        assert_eq!(
            (task["loop_count"].as_u64(), task["events_total"].as_u64()),
            (Some(4), Some(9)),
            "start {start}: the subtask resolves to its root, moved with its state: {task}"
        );
        let history = s.get_json(&client, "/v1/tasks/old-task/history").await;
        assert_eq!(
            history["records"].as_array().map(Vec::len),
            Some(1),
            "start {start}: the audit trail moved too: {history}"
        );
        let metrics = s.get_text(&client, "/metrics").await;
        assert!(
            metrics.contains("loopguard_task_log_disk_bytes "),
            "the task log's size is on /metrics"
        );
    }
    // Moved, not copied: sled keeps no task any more.
    let sled = SledStore::open(dir.path()).unwrap();
    assert!(sled.stored_tasks().unwrap().is_empty());
    assert!(dir.path().join("tasks").is_dir());
}

// ---- Damage: found and named, never "repaired" by dropping acknowledged events --------------

/// What every task of a log holds: its state and audit trail, read through the store.
type Held = Vec<(TaskState, Vec<AuditRecord>)>;

async fn held(store: &LogStore) -> Held {
    let (_, roots) = store.recent_roots(usize::MAX).await.unwrap();
    let mut out = Vec::new();
    for (root, _) in roots {
        let state = store.load(&root).await.unwrap().unwrap();
        let audit = store.history(&root, usize::MAX).await.unwrap();
        out.push((state, audit));
    }
    out.sort_by(|a, b| a.0.root.cmp(&b.0.root));
    out
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Write a task log the way the service does (a stub model: detection is not what is tested),
/// close it cleanly and return every task as it reads back.
fn write_log(dir: &Path, opts: LogOptions, tasks: usize, events: usize) -> Held {
    let mut cfg = Config::default();
    cfg.server.max_cached_tasks = opts.cached_tasks;
    block_on(async {
        let store = Arc::new(LogStore::open(dir, opts).unwrap());
        let engine = Engine::with_store(
            Arc::new(cfg),
            Embedder::start_stub(),
            Arc::clone(&store) as Arc<dyn Store>,
        );
        for i in 0..events {
            for t in 0..tasks {
                let (task, parent) = if i % 4 == 3 {
                    (format!("job-{t}/step-{}", i % 3), Some(format!("job-{t}")))
                } else {
                    (format!("job-{t}"), None)
                };
                let event = match i % 3 {
                    0 => {
                        serde_json::json!({"type": "failure", "message": format!("OSError: disk quota exceeded on volume {}", i % 2)})
                    }
                    1 => {
                        serde_json::json!({"type": "tool_call", "tool": "bash", "args": {"cmd": format!("df -h /data{}", i % 4)},
                          "result": {"output": format!("/dev/sda{} 100% used", i % 4), "is_error": true}})
                    }
                    _ => {
                        serde_json::json!({"type": "response", "text": format!("The volume is full; retrying the write ({i}).")})
                    }
                };
                let env = loopguard::event::parse_envelope_value(serde_json::json!({
                    "task_id": task, "parent_task_id": parent, "event": event
                }))
                .unwrap();
                engine.evaluate(env).await.unwrap();
            }
        }
        drop(engine);
        store.flush().await.unwrap();
        let h = held(&store).await;
        drop(store);
        h
    })
}

/// The byte positions a case damages: spread over the file, its header and its last bytes.
fn positions(len: u64, n: u64) -> Vec<u64> {
    let mut at: Vec<u64> = (0..n).map(|i| i * len / n).collect();
    at.extend([0, 7, 8, 11, 12, 20, len / 2 + 1, len - 1]);
    at.retain(|&p| p < len);
    at.sort_unstable();
    at.dedup();
    at
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

enum Damage {
    Flip(u64),
    Truncate(u64),
}

/// Damage one file of a copy of `log`, then open it: it must refuse, naming the file, or hold
/// every acknowledged event. `verify` must find the damage; `salvage` must write a log that
/// holds every task as it was, except those its report names.
fn one_case(log: &Path, file: &str, damage: &Damage, want: &Held, opts: LogOptions) -> bool {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("tasks");
    copy_dir(log, &dir);
    let path = dir.join(file);
    let mut bytes = std::fs::read(&path).unwrap();
    match damage {
        Damage::Flip(at) => bytes[*at as usize] ^= 0x20,
        Damage::Truncate(len) => bytes.truncate(*len as usize),
    }
    std::fs::write(&path, &bytes).unwrap();
    let what = match damage {
        Damage::Flip(at) => format!("{file}: byte {at} flipped"),
        Damage::Truncate(len) => format!("{file}: cut to {len} bytes"),
    };
    let refused = match LogStore::open(&dir, opts) {
        Ok(store) => {
            let got = block_on(held(&store));
            assert!(
                got == *want,
                "{what}: it started, with acknowledged events lost or changed"
            );
            false
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains(file),
                "{what}: refused without naming the file: {msg}"
            );
            true
        }
    };
    if refused {
        let report = examine::verify(&dir).unwrap();
        assert!(
            !report.is_sound(),
            "{what}: verify found nothing:\n{}",
            report.render()
        );
        let to = work.path().join("salvaged");
        let report = examine::salvage(&dir, &to, 1000).unwrap();
        let store = LogStore::open(&to, opts)
            .unwrap_or_else(|e| panic!("{what}: the salvaged log does not open: {e}"));
        let got = block_on(held(&store));
        let mut missing = 0u64;
        for (state, audit) in want {
            // Named, or among the events the report says it could not name.
            let named =
                report.short.iter().any(|s| s.task_id == state.root) || report.events_unnamed > 0;
            match got.iter().find(|(s, _)| s.root == state.root) {
                Some(kept) if kept.0 == *state && kept.1 == *audit => {}
                Some(_) => assert!(
                    named,
                    "{what}: salvage changed {} without saying so:\n{}",
                    state.root,
                    report.render()
                ),
                None if named => {}
                None => missing += 1,
            }
        }
        assert!(
            missing <= report.lost_unnamed || report.lost_uncounted,
            "{what}: salvage lost {missing} tasks and reported {} lost:\n{}",
            report.lost_unnamed,
            report.render()
        );
        assert!(got.len() <= want.len());
    }
    refused
}

/// Flips and truncations at ~80 positions of a snapshot and segments (a log with tiny
/// segments, states spilled from a small cache, closed cleanly), and of a long segment without
/// a snapshot: every case either refuses to start, naming the file, or starts with every
/// acknowledged event intact; `store verify` finds each one and `store salvage` keeps every
/// task it does not name.
#[test]
fn damage_anywhere_is_refused_by_name_and_salvaged() {
    let logs = tempfile::tempdir().unwrap();
    let rotating = LogOptions {
        segment_bytes: 24 << 10,
        audit_kept: 1000,
        cached_tasks: 4,
    };
    let single = LogOptions {
        segment_bytes: 64 << 20,
        ..rotating
    };
    let mut cases = 0;
    let mut refused = 0;
    for (name, opts, tasks, events) in [("rotating", rotating, 10, 60), ("single", single, 6, 40)] {
        let log = logs.path().join(name);
        let want = write_log(&log, opts, tasks, events);
        assert_eq!(want.len(), tasks);
        let mut files: Vec<String> = std::fs::read_dir(&log)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("seg-") || n.starts_with("snap-"))
            .collect();
        files.sort();
        if name == "rotating" {
            assert!(
                files.iter().any(|f| f.starts_with("snap-")),
                "the rotating log has a snapshot: {files:?}"
            );
        }
        for file in &files {
            let len = std::fs::metadata(log.join(file)).unwrap().len();
            let mut damages: Vec<Damage> =
                positions(len, 14).into_iter().map(Damage::Flip).collect();
            damages.extend(
                [0, 5, 8, 13, len / 3, len / 2, len - 1]
                    .into_iter()
                    .filter(|&l| l < len)
                    .map(Damage::Truncate),
            );
            for d in &damages {
                cases += 1;
                refused += usize::from(one_case(&log, file, d, &want, opts));
            }
        }
    }
    println!(
        "damage cases: {cases}, refused by name: {refused}, started intact: {}",
        cases - refused
    );
    assert!(cases >= 50, "{cases} cases");
}

/// The service refuses to start on a damaged log, naming the file; `loopguard store verify`
/// says so (exit 1) and `loopguard store salvage --to DIR` writes a log the service starts on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_refuses_damage_and_the_cli_verifies_and_salvages() {
    let data = tempfile::tempdir().unwrap();
    let client = common::http_client();
    {
        let s = Server::start(data.path(), &[]);
        for i in 0..40 {
            let body = serde_json::json!({"task_id": format!("t-{}", i % 8), "event": {"type": "failure", "message": format!("KeyError: 'k{}'", i % 3)}});
            let r = client
                .post(s.url("/v1/evaluate"))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        }
        let mut s = s;
        assert!(s.terminate().success());
    }
    let bin = env!("CARGO_BIN_EXE_loopguard");
    let run = |args: &[&str]| {
        std::process::Command::new(bin)
            .args(args)
            .output()
            .expect("run loopguard")
    };
    let data_arg = data.path().to_str().unwrap();
    let ok = run(&["store", "verify", "--data-dir", data_arg]);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    // A byte in the middle of the newest segment, as the probe did.
    let tasks = data.path().join("tasks");
    let seg = std::fs::read_dir(&tasks)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("seg-") && name.ends_with(".log")
        })
        .max()
        .unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();

    let out = std::process::Command::new(bin)
        .args(["serve", "--addr", "127.0.0.1:0", "--data-dir", data_arg])
        .env("LOOPGUARD_LOG", "error")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let name = seg.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(out.status.code(), Some(2), "refuses to start: {stderr}");
    assert!(
        stderr.contains(&name) && stderr.contains("at byte"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&seg).unwrap(), bytes, "nothing was cut");

    let verify = run(&["store", "verify", "--data-dir", data_arg]);
    let report = String::from_utf8_lossy(&verify.stdout);
    assert_eq!(verify.status.code(), Some(1), "{report}");
    assert!(
        report.contains(&name) && report.contains("DAMAGE"),
        "{report}"
    );

    let to = data.path().join("tasks.salvaged");
    let salvage = run(&[
        "store",
        "salvage",
        "--data-dir",
        data_arg,
        "--to",
        to.to_str().unwrap(),
    ]);
    assert_eq!(
        salvage.status.code(),
        Some(1),
        "something was lost: {}",
        String::from_utf8_lossy(&salvage.stdout)
    );
    std::fs::rename(&tasks, data.path().join("tasks.damaged")).unwrap();
    std::fs::rename(&to, &tasks).unwrap();
    let s = Server::start(data.path(), &[]);
    let listed = s.get_json(&client, "/v1/tasks?limit=500").await;
    assert!(listed["total"].as_u64().unwrap() >= 1, "{listed}");
}

// ---- Bounded memory ---------------------------------------------------------------------------

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{name} is not on /metrics"))
}

/// With room for 3 task states in memory, 30 tasks loop in turn: every task's state has left
/// memory (the engine's and the store's) before its next event, is read back from the store,
/// and its loop counter goes on where it was — also across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_task_continues_its_loop_counter() {
    let data = tempfile::tempdir().unwrap();
    let args = [
        "--set",
        "server.max_cached_tasks=3",
        "--set",
        "policy.gate_at=0",
        "--set",
        "policy.pivot_at=0",
        "--set",
        "detect.budget.max_events=0",
    ];
    let client = common::http_client();
    let tasks = 30;
    let mut s = Server::start(data.path(), &args);
    for round in 0..6u64 {
        if round == 4 {
            assert!(s.terminate().success());
            s = Server::start(data.path(), &args);
        }
        for t in 0..tasks {
            let body = serde_json::json!({"task_id": format!("evicted-{t}"),
                "event": {"type": "failure", "message": "PermissionError: [Errno 13] Permission denied: '/srv/out.csv'"}});
            let v: serde_json::Value = client
                .post(s.url("/v1/evaluate"))
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(
                v["loop_count"].as_u64(),
                Some(round),
                "round {round}, task {t}: the counter goes on: {v}"
            );
            if round > 0 {
                assert_eq!(v["kind"], "exact_repeat", "{v}");
            }
        }
        let m = s.get_text(&client, "/metrics").await;
        assert!(
            metric(&m, "loopguard_tasks_in_memory") <= 3.0,
            "the bound holds at all times, not at a sweep"
        );
    }
    let v = s.get_json(&client, "/v1/tasks/evicted-0").await;
    assert_eq!(v["events_total"].as_u64(), Some(6), "{v}");
    let h = s.get_json(&client, "/v1/tasks/evicted-0/history").await;
    assert!(
        h["records"].as_array().is_some_and(|r| r.len() >= 5),
        "its audit trail came back too: {h}"
    );
}

// ---- A full disk --------------------------------------------------------------------------------

/// A small tmpfs of the test's own at `dir` (root only). `None` when it cannot be mounted: the
/// test then says so and returns, and fails instead when LOOPGUARD_REQUIRE_ROOT is set (CI).
fn small_tmpfs(dir: &Path, mib: u64) -> Option<Mount> {
    std::fs::create_dir_all(dir).unwrap();
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
        .arg(dir)
        .status();
    match status {
        Ok(s) if s.success() => Some(Mount(dir.to_path_buf())),
        other => {
            let why = format!(
                "cannot mount a {mib} MiB tmpfs ({other:?}); the full-disk test needs root"
            );
            assert!(
                std::env::var_os("LOOPGUARD_REQUIRE_ROOT").is_none(),
                "{why}"
            );
            eprintln!("SKIPPED: {why} (LOOPGUARD_REQUIRE_ROOT makes this a failure, as in CI)");
            None
        }
    }
}

struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// On a 16 MiB tmpfs: fill it, and writes are answered 503 storage_error with Retry-After while
/// reads still work; free space, and writes succeed again within seconds, without a restart;
/// every acknowledged event is there, before and after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_survived_without_a_restart() {
    use std::time::{Duration, Instant};
    let work = tempfile::tempdir().unwrap();
    let mnt = work.path().join("disk");
    let Some(_mount) = small_tmpfs(&mnt, 16) else {
        return;
    };
    let data = mnt.join("data");
    let args = [
        "--set",
        "policy.gate_at=0",
        "--set",
        "policy.pivot_at=0",
        "--set",
        "detect.budget.max_events=0",
        "--set",
        "server.task_log_segment_bytes=1048576",
    ];
    let client = common::http_client();
    let mut s = Server::start(&data, &args);
    let mut acked = std::collections::BTreeMap::<String, u64>::new();
    let url = s.url("/v1/evaluate");
    let post = |t: String, n: u64| {
        let client = client.clone();
        let url = url.clone();
        async move {
            // A new text per event: the log grows by more than a few bytes an event.
            let body = serde_json::json!({"task_id": t, "event": {"type": "tool_call", "tool": "bash",
                "args": {"cmd": format!("cat part-{n}.csv")},
                "result": {"output": format!("{n}: {}", "row,".repeat(300)), "is_error": false}}});
            client.post(url).json(&body).send().await.unwrap()
        }
    };
    // Some state first.
    for i in 0..50u64 {
        let t = format!("disk-{}", i % 5);
        let r = post(t.clone(), i).await;
        assert_eq!(r.status(), 200);
        *acked.entry(t).or_default() += 1;
    }
    // Fill the disk, leaving the log no room.
    let filler = mnt.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let chunk = vec![7u8; 1 << 20];
    use std::io::Write;
    while f.write_all(&chunk).is_ok() {}
    while f.write_all(&chunk[..4096]).is_ok() {}
    let _ = f.sync_all();
    drop(f);

    // Writes are refused, each with Retry-After; reads still work.
    let mut refused = 0;
    let mut n = 1000u64;
    let started = Instant::now();
    while refused < 10 && started.elapsed() < Duration::from_secs(60) {
        let t = format!("disk-{}", n % 5);
        let r = post(t.clone(), n).await;
        n += 1;
        match r.status().as_u16() {
            200 => *acked.entry(t).or_default() += 1,
            503 => {
                assert!(
                    r.headers().contains_key("retry-after"),
                    "503 with Retry-After"
                );
                let e: serde_json::Value = r.json().await.unwrap();
                assert!(
                    e["code"] == "storage_error" || e["code"] == "timeout",
                    "{e}"
                );
                refused += 1;
            }
            other => panic!("a write on a full disk: {other}"),
        }
    }
    assert!(refused >= 10, "writes were refused while the disk was full");
    let ready = client.get(s.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let why: serde_json::Value = ready.json().await.unwrap();
    assert!(
        why["error"].as_str().is_some_and(|e| e.contains("full")),
        "/readyz says why: {why}"
    );
    let live = client.get(s.url("/livez")).send().await.unwrap();
    assert_eq!(live.status(), 200, "a full disk is not a reason to restart");
    let task = s.get_json(&client, "/v1/tasks/disk-0").await;
    assert!(
        task["events_total"].as_u64().unwrap() >= acked["disk-0"],
        "reads work: {task}"
    );

    // Space comes back: writes succeed again within seconds, without a restart.
    std::fs::remove_file(&filler).unwrap();
    let freed = Instant::now();
    loop {
        let t = format!("disk-{}", n % 5);
        let r = post(t.clone(), n).await;
        n += 1;
        if r.status() == 200 {
            *acked.entry(t).or_default() += 1;
            break;
        }
        assert!(
            freed.elapsed() < Duration::from_secs(10),
            "writes did not resume"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("writes resumed {:?} after space was freed", freed.elapsed());
    for _ in 0..20 {
        let t = format!("disk-{}", n % 5);
        let r = post(t.clone(), n).await;
        n += 1;
        assert_eq!(r.status(), 200);
        *acked.entry(t).or_default() += 1;
    }
    let ready = client.get(s.url("/readyz")).send().await.unwrap();
    assert_ne!(ready.status(), 503, "ready again");

    // Nothing acknowledged was lost, before and after a restart. (A write that was waiting
    // for the disk when it filled may have been applied after its client was told 503 timeout:
    // at most a few more than acknowledged.)
    for restart in [false, true] {
        if restart {
            assert!(s.terminate().success());
            s = Server::start(&data, &args);
        }
        for (t, want) in &acked {
            let v = s.get_json(&client, &format!("/v1/tasks/{t}")).await;
            let got = v["events_total"].as_u64().unwrap();
            assert!(
                got >= *want && got <= want + 3,
                "{t}: {got} events, {want} acknowledged (restart: {restart})"
            );
        }
    }
}

// ---- Start-up --------------------------------------------------------------------------------

/// The server listens at once: while the store replays a long log, `/livez` answers 200 and
/// `/readyz` and the API say it is starting (503, Retry-After); then it serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn livez_answers_while_the_log_replays() {
    use std::io::BufRead;
    let data = tempfile::tempdir().unwrap();
    {
        // A long log without a snapshot: every record is replayed at the start.
        let store = LogStore::open(
            &data.path().join("tasks"),
            LogOptions {
                segment_bytes: 1 << 30,
                ..LogOptions::default()
            },
        )
        .unwrap();
        let mut durable = Vec::new();
        for i in 0..150_000u64 {
            let mut st = TaskState::new(&format!("replayed-{i}"), 1_700_000_000);
            st.version = 1;
            st.goal = Some(format!(
                "goal {i}: {}",
                "keep the disk from filling up ".repeat(8)
            ));
            let opened = store.begin(&st.root, None).await.unwrap();
            durable.push(opened.txn.commit(&st, &[], None).await.unwrap());
            if durable.len() == 5000 {
                for d in durable.drain(..) {
                    d.await.unwrap();
                }
            }
        }
        for d in durable {
            d.await.unwrap();
        }
    }
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .env("LOOPGUARD_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .trim_start_matches("loopguard listening on ")
        .to_string();
    let client = common::http_client();
    let mut starting = 0;
    let started = std::time::Instant::now();
    loop {
        let live = client.get(format!("{base}/livez")).send().await.unwrap();
        assert_eq!(live.status(), 200, "/livez during the replay");
        let r = client
            .get(format!("{base}/v1/tasks/replayed-1"))
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            break;
        }
        assert_eq!(r.status(), 503);
        assert!(r.headers().contains_key("retry-after"));
        let e: serde_json::Value = r.json().await.unwrap();
        assert_eq!(e["code"], "starting", "{e}");
        let ready: serde_json::Value = client
            .get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        // The replay may end between the two requests: then the store says so.
        assert!(
            ready["status"] == "starting" || ready["store"] == "open",
            "{ready}"
        );
        starting += 1;
        assert!(started.elapsed() < std::time::Duration::from_secs(120));
    }
    println!(
        "answered {starting} times while replaying ({:?})",
        started.elapsed()
    );
    assert!(
        starting > 0,
        "the replay was seen: the server answered before it was over"
    );
    let _ = child.kill();
    let _ = child.wait();
}
