//! Bounds of `loopguard serve` under growth, end to end: the real binary, its embedded task log,
//! HTTP on loopback (`POST /v1/evaluate`).
//!
//! - **memory**: distinct tasks, one failure each, with `server.max_cached_tasks = 10000`;
//!   resident memory sampled every 5 % of the run. Baselines in the same run: the idle service,
//!   and the same stream on a quarter of the tasks with the bound out of the way (every state
//!   kept), which gives the RSS per live task. Then tasks evicted long before come back and must
//!   continue their loop counter.
//! - **subtasks**: 100,000 subtasks of one root (the default `server.max_subtasks`), one
//!   request at a time: per-event latency per block of 10,000 for a new subtask's first event
//!   and for an event of an existing subtask, against the same events of one task without
//!   subtasks (the baseline, interleaved event by event). Then the limit refuses the next
//!   subtask; the restart time with them in the log, against a log of as many events of 250
//!   tasks without subtasks (the baseline), and once the root is deleted.
//!
//! Run: `python3 models/fetch.py && cargo bench --bench bounds`: 100,000 tasks and 100,000
//! subtasks, a few minutes. `LOOPGUARD_BENCH_1M=1` runs the 1,000,000 tasks of
//! docs/PERFORMANCE.md#bounded-memory-and-subtasks; `BOUNDS_ONLY=memory` or `subtasks` runs one
//! part. Prints Markdown tables.

mod common;

use common::{rss, Server};
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const FAILURE: &str = "PermissionError: [Errno 13] Permission denied: '/srv/reports/out.csv'";
/// Events per batch request in the memory part (`server.max_batch_events` is 256).
const BATCH: usize = 250;
const CACHED: usize = 10_000;

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

fn mib(bytes: f64) -> f64 {
    bytes / f64::from(1 << 20)
}

fn failure(task: &str) -> Value {
    json!({"task_id": task, "event": {"type": "failure", "message": FAILURE}})
}

/// Post `count` new tasks (`prefix-N` from `from` on), `BATCH` per request, four requests in
/// flight; every answer is a verdict on a task's first event.
async fn post_tasks(c: &reqwest::Client, base: &str, prefix: &str, from: usize, count: usize) {
    let url = format!("{base}/v1/evaluate");
    let (mut next, end) = (from, from + count);
    let mut inflight = futures_util::stream::FuturesUnordered::new();
    loop {
        while inflight.len() < 4 && next < end {
            let n = BATCH.min(end - next);
            let body: Vec<Value> = (next..next + n)
                .map(|i| failure(&format!("{prefix}-{i}")))
                .collect();
            next += n;
            let sent = c.post(&url).json(&body).send();
            inflight.push(async move {
                let r = sent.await.unwrap();
                assert_eq!(r.status(), 200);
                let items: Vec<Value> = r.json().await.unwrap();
                for v in &items {
                    assert_eq!(v["loop_count"], 0, "a new task's first event: {v}");
                }
            });
        }
        if inflight.next().await.is_none() {
            return;
        }
    }
}

struct Sample {
    tasks: usize,
    rss: f64,
    peak: f64,
    in_memory: f64,
    /// The task log's segments and snapshots, and the unlinked spill files besides.
    disk: f64,
    spill: f64,
}

fn sample(rt: &tokio::runtime::Runtime, c: &reqwest::Client, s: &Server, tasks: usize) -> Sample {
    let (now, peak) = rss(s.pid());
    let m = common::get(rt, c, format!("{}/metrics", s.base));
    Sample {
        tasks,
        rss: now as f64,
        peak: peak as f64,
        in_memory: common::metric(&m, "loopguard_tasks_in_memory"),
        disk: common::metric(&m, "loopguard_task_log_disk_bytes"),
        spill: common::deleted_open_bytes(s.pid()) as f64,
    }
}

fn print_row(run: &str, x: &Sample) {
    println!(
        "| {run} | {} | {:.0} | {:.0} | {} | {:.0} | {:.0} |",
        x.tasks,
        mib(x.rss),
        mib(x.peak),
        x.in_memory,
        mib(x.disk),
        mib(x.spill)
    );
}

/// Bytes of RSS per task between two samples.
fn slope(a: &Sample, b: &Sample) -> f64 {
    (b.rss - a.rss) / (b.tasks - a.tasks).max(1) as f64
}

/// Stream `total` tasks through a server with `cached` states in memory; RSS every `step`.
fn stream(
    rt: &tokio::runtime::Runtime,
    c: &reqwest::Client,
    run: &str,
    cached: usize,
    total: usize,
    step: usize,
) -> (Server, Vec<Sample>) {
    let s = Server::start(&["--set", &format!("server.max_cached_tasks={cached}")]);
    common::wait_ready(rt, c, &s.base);
    let mut samples = vec![sample(rt, c, &s, 0)];
    print_row(run, &samples[0]);
    let mut done = 0;
    // The cache's own size is a sample point: what the bound costs when it is full.
    let mut marks: Vec<usize> = (1..).map(|k| k * step).take_while(|&m| m < total).collect();
    if cached < total {
        marks.push(cached);
    }
    marks.push(total);
    marks.sort_unstable();
    marks.dedup();
    for mark in marks {
        rt.block_on(post_tasks(c, &s.base, "task", done, mark - done));
        done = mark;
        let x = sample(rt, c, &s, done);
        print_row(run, &x);
        samples.push(x);
    }
    (s, samples)
}

fn memory(rt: &tokio::runtime::Runtime, total: usize) {
    let c = client();
    let step = total / 20;
    println!("\n### Memory: {total} distinct tasks, one failure each\n");
    println!(
        "| run | tasks stored | RSS MiB | peak RSS MiB | tasks in memory | task log on disk MiB | spill files MiB |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let unbounded_tasks = total / 4;
    let (unbounded, base) = stream(
        rt,
        &c,
        "every state kept (`max_cached_tasks` ≥ tasks)",
        unbounded_tasks,
        unbounded_tasks,
        step,
    );
    drop(unbounded);
    let started = Instant::now();
    let (s, bounded) = stream(rt, &c, "`max_cached_tasks = 10000`", CACHED, total, step);
    let secs = started.elapsed().as_secs_f64();

    // Tasks evicted long before come back: each continues its loop counter (1: a repeat of its
    // first event, read back from the store).
    let evicted = total - 2 * CACHED;
    let revisit: Vec<Value> = (0..BATCH)
        .map(|i| failure(&format!("task-{}", i * evicted / BATCH)))
        .collect();
    // One at a time: a batch of 250 loop verdicts would queue 250 loop-memory look-ups for the
    // model at once, and admission control would skip most of them (with a warning each).
    let items: Vec<Value> = rt.block_on(async {
        let mut items = Vec::new();
        for event in &revisit {
            let r = c
                .post(format!("{}/v1/evaluate", s.base))
                .json(event)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            items.push(r.json().await.unwrap());
        }
        items
    });
    let continued = items
        .iter()
        .filter(|v| v["loop_count"] == 1 && v["kind"] == "exact_repeat")
        .count();
    let after = sample(rt, &c, &s, total);

    let idle = &bounded[0];
    let full = bounded
        .iter()
        .find(|x| x.tasks == CACHED)
        .expect("a sample at the cache's size");
    let last = bounded.last().unwrap();
    let peak = after.peak;
    println!(
        "\n- {total} tasks in {secs:.0} s ({:.0} tasks/s), as {} requests of {BATCH} events.",
        total as f64 / secs,
        total.div_ceil(BATCH)
    );
    println!(
        "- RSS per live task (every state kept, idle to {unbounded_tasks} tasks): {:.0} bytes.",
        slope(&base[0], base.last().unwrap())
    );
    println!(
        "- Bounded: idle {:.0} MiB; {CACHED} tasks {:.0} MiB ({:.0} bytes per task over idle); \
         {total} tasks {:.0} MiB; peak {:.0} MiB. Past the cache's size, {:.0} bytes per further \
         stored task (what the store keeps of a task whose state is on disk).",
        mib(idle.rss),
        mib(full.rss),
        slope(idle, full),
        mib(last.rss),
        mib(peak),
        slope(full, last)
    );
    println!(
        "- Revisited after eviction: {continued}/{} continued their loop counter.",
        items.len()
    );
    assert_eq!(
        continued,
        items.len(),
        "evicted tasks continue their counters: {items:?}"
    );
    for x in &bounded {
        assert!(
            x.in_memory <= CACHED as f64,
            "the bound holds at every sample: {} states in memory",
            x.in_memory
        );
    }
}

/// Latency percentiles of a block, in milliseconds.
fn percentiles(mut lat: Vec<Duration>) -> (f64, f64) {
    lat.sort_unstable();
    let at = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)].as_secs_f64() * 1e3;
    (at(0.50), at(0.99))
}

/// Post single events one at a time; each request's latency.
async fn timed(
    c: &reqwest::Client,
    url: &str,
    events: impl Iterator<Item = Value>,
) -> Vec<Duration> {
    let mut lat = Vec::new();
    for body in events {
        let t = Instant::now();
        let r = c.post(url).json(&body).send().await.unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        lat.push(t.elapsed());
        assert_eq!(status, 200, "{text}");
    }
    lat
}

fn subtasks(rt: &tokio::runtime::Runtime) {
    let c = client();
    let (total, block) = (100_000usize, 10_000usize);
    // One event of an existing subtask and one of the task without subtasks per `every` new
    // subtasks.
    let every = 5;
    let mut s = Server::start(&[]);
    common::wait_ready(rt, &c, &s.base);
    let url = format!("{}/v1/evaluate", s.base);
    println!("\n### {total} subtasks of one root, one request at a time\n");
    println!(
        "| subtasks | new subtask p50 ms | p99 ms | existing subtask p50 ms | p99 ms | one task, no subtasks (baseline) p50 ms | p99 ms | RSS MiB |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    let sub = |j: usize| {
        json!({"task_id": format!("root/sub-{j}"), "parent_task_id": "root",
               "event": {"type": "failure", "message": FAILURE}})
    };
    rt.block_on(timed(&c, &url, std::iter::once(failure("root"))));
    // The three kinds of event are interleaved (a new subtask, and every fifth time an event of
    // an existing subtask and one of the task without subtasks), so the baseline sees the same
    // machine as what it is compared with: on a shared machine that changes by the minute.
    let mut done = 0;
    while done < total {
        let (mut new, mut existing, mut solo) = (Vec::new(), Vec::new(), Vec::new());
        rt.block_on(async {
            for j in done..done + block {
                new.extend(timed(&c, &url, std::iter::once(sub(j))).await);
                if j % every == 0 {
                    // Spread over every subtask so far, old and new.
                    let old = sub((j / every) * 7919 % (j + 1));
                    existing.extend(timed(&c, &url, std::iter::once(old)).await);
                    solo.extend(timed(&c, &url, std::iter::once(failure("solo"))).await);
                }
            }
        });
        done += block;
        let ((n50, n99), (e50, e99), (s50, s99)) =
            (percentiles(new), percentiles(existing), percentiles(solo));
        println!(
            "| {done} | {n50:.2} | {n99:.2} | {e50:.2} | {e99:.2} | {s50:.2} | {s99:.2} | {:.0} |",
            mib(rss(s.pid()).0 as f64)
        );
    }
    let over = |c: &reqwest::Client, base: &str| {
        rt.block_on(async {
            let r = c
                .post(format!("{base}/v1/evaluate"))
                .json(&sub(total))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        })
    };
    let (status, body) = over(&c, &s.base);
    println!(
        "\n- Subtask {}: {status} `{}`: {}",
        total + 1,
        body["code"],
        body["message"]
    );
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("too_many_subtasks"))
    );
    let m = common::get(rt, &c, format!("{}/metrics", s.base));
    let disk = common::metric(&m, "loopguard_task_log_disk_bytes");
    let root = common::get(rt, &c, format!("{}/v1/tasks/root", s.base));
    let events: Value = serde_json::from_str(&root).unwrap();

    let events_logged = common::metric(&m, "loopguard_task_log_records_appended_total");
    let started = s.restart(&[]);
    println!(
        "- Restart with {total} subtasks in the log ({:.1} MiB on disk): listening after {:.0} ms, \
         store open after {:.0} ms ({} `starting` answers to /readyz meanwhile).",
        mib(disk),
        started.listening.as_secs_f64() * 1e3,
        started.open.as_secs_f64() * 1e3,
        started.starting_answers
    );
    let again: Value =
        serde_json::from_str(&common::get(rt, &c, format!("{}/v1/tasks/root", s.base))).unwrap();
    assert_eq!(
        again["events_total"], events["events_total"],
        "the root came back whole"
    );
    let (status, _) = over(&c, &s.base);
    assert_eq!(status, 409, "the limit holds after a restart");

    let deleted = rt.block_on(async {
        c.delete(format!("{}/v1/tasks/root", s.base))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    assert_eq!(deleted, 204);
    // Most of the log is now dead: the writer's next batch starts a snapshot that leaves it out.
    rt.block_on(post_tasks(&c, &s.base, "after", 0, 1));
    std::thread::sleep(Duration::from_secs(2));
    let disk = common::metric(
        &common::get(rt, &c, format!("{}/metrics", s.base)),
        "loopguard_task_log_disk_bytes",
    );
    let started = s.restart(&[]);
    println!(
        "- Restart after deleting the root ({:.2} MiB on disk): listening after {:.0} ms, store \
         open after {:.0} ms.",
        mib(disk),
        started.listening.as_secs_f64() * 1e3,
        started.open.as_secs_f64() * 1e3,
    );
    let status = rt.block_on(async {
        c.post(format!("{}/v1/evaluate", s.base))
            .json(&sub(0))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    assert_eq!(status, 200, "a deleted root takes subtasks again");
    drop(s);
    restart_baseline(rt, &c, events_logged as usize);
}

/// The restart time of a log of `events` events of 250 tasks without subtasks.
fn restart_baseline(rt: &tokio::runtime::Runtime, c: &reqwest::Client, events: usize) {
    let mut s = Server::start(&[]);
    common::wait_ready(rt, c, &s.base);
    let mut posted = 0;
    while posted < events {
        // `post_tasks` checks first events only: the baseline's tasks repeat, so post here.
        let n = (events - posted).min(4 * BATCH);
        rt.block_on(async {
            let sent = (0..n.div_ceil(BATCH)).map(|k| {
                let body: Vec<Value> = (0..BATCH.min(n - k * BATCH))
                    .map(|i| failure(&format!("plain-{i}")))
                    .collect();
                c.post(format!("{}/v1/evaluate", s.base)).json(&body).send()
            });
            for r in futures_util::future::join_all(sent).await {
                assert_eq!(r.unwrap().status(), 200);
            }
        });
        posted += n;
    }
    let disk = common::metric(
        &common::get(rt, c, format!("{}/metrics", s.base)),
        "loopguard_task_log_disk_bytes",
    );
    let started = s.restart(&[]);
    println!(
        "- Baseline: restart with {events} events of 250 tasks without subtasks in the log \
         ({:.1} MiB on disk): listening after {:.0} ms, store open after {:.0} ms.",
        mib(disk),
        started.listening.as_secs_f64() * 1e3,
        started.open.as_secs_f64() * 1e3,
    );
}

fn main() {
    loopguard::judge::http::install_tls_provider();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let only = std::env::var("BOUNDS_ONLY").unwrap_or_default();
    let total = if std::env::var_os("LOOPGUARD_BENCH_1M").is_some() {
        1_000_000
    } else {
        100_000
    };
    if only.is_empty() || only == "memory" {
        memory(&rt, total);
    }
    if only.is_empty() || only == "subtasks" {
        subtasks(&rt);
    }
}
