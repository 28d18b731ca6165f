//! Crash safety: the server under concurrent load is killed with SIGKILL at random moments, many
//! times. After each restart, every task's state must equal the effect of every acknowledged
//! event: none lost, none doubled. (An event in flight at the kill may or may not have been
//! applied; the client never heard either way.)

mod common;

use common::Server;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TASKS: usize = 12;
const KILLS: usize = 100;

/// A small deterministic generator (xorshift), seeded from the clock and printed for replays.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

#[derive(Clone, Copy, Default, Debug)]
struct Ledger {
    /// Events the server acknowledged (answered 200).
    acked: u64,
    /// An event was in flight when the server died.
    in_flight: bool,
}

/// Send events to one root task (alternating root and subtask ids, which share the root's
/// counter) until the server dies or `stop` is set.
async fn drive(
    client: reqwest::Client,
    base: String,
    root: String,
    stop: Arc<AtomicBool>,
) -> Ledger {
    let mut ledger = Ledger::default();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let task = if n % 2 == 0 {
            root.clone()
        } else {
            format!("{root}/sub")
        };
        let body = json!({
            "task_id": task,
            "parent_task_id": if n % 2 == 0 { Value::Null } else { Value::String(root.clone()) },
            "event": {"type": "failure", "message": "OSError: [Errno 28] No space left on device"}
        });
        ledger.in_flight = true;
        match client
            .post(format!("{base}/v1/evaluate"))
            .json(&body)
            .send()
            .await
        {
            Ok(r) if r.status() == 200 => {
                ledger.acked += 1;
                ledger.in_flight = false;
            }
            Ok(r) => panic!("unexpected status {} for {root}", r.status()),
            // The server is gone; whether this event was applied is unknown.
            Err(_) => return ledger,
        }
        n += 1;
    }
    ledger
}

async fn task_state(client: &reqwest::Client, s: &Server, root: &str) -> Option<Value> {
    let r = client
        .get(s.url(&format!("/v1/tasks/{root}")))
        .send()
        .await
        .unwrap();
    match r.status().as_u16() {
        200 => Some(r.json().await.unwrap()),
        404 => None,
        other => panic!("GET {root}: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_events_survive_sigkill() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("crash test seed {seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    // No gate, no pivots and no event budget: the loop counter keeps counting, so every event
    // is visible in it.
    let args = [
        "--set",
        "policy.gate_at=0",
        "--set",
        "policy.pivot_at=0",
        "--set",
        "detect.budget.max_events=0",
        // Small task log segments: kills land during rotations and snapshots too.
        "--set",
        "server.task_log_segment_bytes=65536",
    ];
    let client = common::http_client();
    let roots: Vec<String> = (0..TASKS).map(|i| format!("crash-{i}")).collect();
    // What the server holds, as established after the previous restart.
    let mut applied = [0u64; TASKS];
    // 1 when an event of the task was in flight at the kill.
    let mut maybe = [0u64; TASKS];
    let mut total_acked = 0u64;
    let started = Instant::now();

    // From the process start to listening: opening the store, replaying its log.
    let mut restarts = Vec::new();
    for round in 0..=KILLS {
        let spawned = Instant::now();
        let mut s = Server::start(dir.path(), &args);
        restarts.push(spawned.elapsed());
        // After a restart: every acknowledged event is there, at most the one in flight more.
        for (i, root) in roots.iter().enumerate() {
            let state = task_state(&client, &s, root).await;
            let events = state
                .as_ref()
                .map_or(0, |v| v["events_total"].as_u64().unwrap());
            assert!(
                events >= applied[i],
                "round {round}: {root} lost acknowledged events: has {events}, {} were acknowledged (seed {seed})",
                applied[i]
            );
            if let Some(v) = &state {
                // None doubled: the counter moved exactly once per applied repeat.
                assert_eq!(
                    v["loop_count"].as_u64().unwrap(),
                    events.saturating_sub(1),
                    "round {round}: {root} counter out of step with its events (seed {seed}): {v}"
                );
                let window = loopguard::Config::default().detect.window as u64;
                assert_eq!(
                    v["window"].as_array().unwrap().len() as u64,
                    events.min(window)
                );
            }
            assert!(
                events <= applied[i] + maybe[i],
                "round {round}: {root} has {events} events, more than the {} acknowledged plus {} in flight (seed {seed})",
                applied[i],
                maybe[i]
            );
            applied[i] = events;
            maybe[i] = 0;
        }
        if round == KILLS {
            break;
        }

        let stop = Arc::new(AtomicBool::new(false));
        let drivers: Vec<_> = roots
            .iter()
            .map(|r| {
                tokio::spawn(drive(
                    client.clone(),
                    s.base.clone(),
                    r.clone(),
                    Arc::clone(&stop),
                ))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(rng.between(50, 700))).await;
        s.kill9();
        stop.store(true, Ordering::Relaxed);
        for (i, d) in drivers.into_iter().enumerate() {
            let ledger = d.await.unwrap();
            total_acked += ledger.acked;
            // Lower bound for the next check; the in-flight one may add one more.
            applied[i] += ledger.acked;
            maybe[i] = u64::from(ledger.in_flight);
        }
    }
    restarts.sort();
    let data: u64 = std::fs::read_dir(dir.path().join("tasks"))
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    println!(
        "crash test: {KILLS} SIGKILLs, {total_acked} acknowledged events over {TASKS} tasks, none lost or doubled ({:.1}s); restart to listening p50 {} ms, max {} ms; task log {data} bytes",
        started.elapsed().as_secs_f64(),
        restarts[restarts.len() / 2].as_millis(),
        restarts.last().unwrap().as_millis(),
    );
    assert!(
        total_acked > (KILLS as u64) * 10,
        "the load was too light to mean anything: {total_acked}"
    );
}
