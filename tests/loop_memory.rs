//! Cross-task loop memory and feedback, on the real model.

mod common;

use common::*;
use loopguard::loop_memory::LoopMemory;
use loopguard::verdict::LoopKind;
use loopguard::{Config, Engine};
use serde_json::{json, Value};
use std::sync::Arc;

fn engine_with_memory() -> Engine {
    let cfg = Config::default();
    let mem = Arc::new(LoopMemory::in_memory(cfg.memory.clone()));
    Engine::new(Arc::new(cfg), model()).with_loop_memory(mem)
}

const A: [&str; 3] = [
    "psycopg2.OperationalError: connection to server at \"db\" (10.0.0.5), port 5432 failed: FATAL: too many connections for role \"app\"",
    "psycopg2.OperationalError: connection to server at \"db\" (10.0.0.5), port 5432 failed: FATAL: too many connections for role \"app\"",
    "psycopg2.OperationalError: connection to server at \"db\" (10.0.0.5), port 5432 failed: FATAL: too many connections for role \"app\"",
];
// What is tested is the offer across tasks, not how far a rewording may go: the same failure as
// an older psycopg2 words it (cosine 0.99 with the default int8 model). The rewording used
// before ("OperationalError: FATAL: too many connections for role \"app\" when connecting to
// the db server on port 5432") sat at the edge of `memory.min_similarity` 0.75: 0.756 with the
// shipped model, 0.749 with int8 (docs/PERFORMANCE.md, "Model workers").
const B_REWORDED: [&str; 2] = [
    "psycopg2.OperationalError: could not connect to server \"db\" (10.0.0.5) on port 5432: FATAL: too many connections for role \"app\"",
    "psycopg2.OperationalError: could not connect to server \"db\" (10.0.0.5) on port 5432: FATAL: too many connections for role \"app\"",
];

#[tokio::test]
async fn a_resolved_loop_in_one_task_is_offered_to_another_with_its_note() {
    let e = engine_with_memory();
    for m in A {
        e.evaluate(failure("task-a", m)).await.unwrap();
    }
    e.evaluate(ev(
        "task-a",
        json!({"type": "outcome", "result": "human_intervention", "note": "closed leaked connections: use a pool with max_size=10"}),
    ))
    .await
    .unwrap();

    // With the model busy (other tests share it), a loop decided on keys is remembered in the
    // background and listed from its next repetition on; settle() waits for that work.
    e.settle().await;
    let vs = feed(
        &e,
        B_REWORDED.iter().map(|m| failure("task-b", m)).collect(),
    )
    .await;
    e.settle().await;
    let mut v = vs[1].clone();
    if v.similar_loops.is_empty() {
        v = e.evaluate(failure("task-b", B_REWORDED[1])).await.unwrap();
    }
    assert!(v.is_loop);
    let similar = &v.similar_loops;
    assert_eq!(similar.len(), 1, "{similar:#?}");
    assert_eq!(similar[0].task_id, "task-a");
    assert!(similar[0].similarity >= 0.75);
    let res = similar[0].resolution.as_ref().expect("task-a was resolved");
    assert_eq!(res.result, "human_intervention");
    assert_eq!(
        res.note.as_deref(),
        Some("closed leaked connections: use a pool with max_size=10")
    );
}

#[tokio::test]
async fn unrelated_loops_are_not_offered() {
    let e = engine_with_memory();
    for m in A {
        e.evaluate(failure("task-a", m)).await.unwrap();
    }
    e.settle().await;
    let vs = feed(
        &e,
        (0..3)
            .map(|_| {
                failure(
                    "task-c",
                    "SyntaxError: Unexpected token '<' in JSON at position 0",
                )
            })
            .collect(),
    )
    .await;
    assert!(vs[1].is_loop && vs[2].is_loop);
    assert!(vs[2].similar_loops.is_empty(), "{:#?}", vs[2].similar_loops);
    assert!(vs[1].similar_loops.is_empty(), "{:#?}", vs[1].similar_loops);
    // And a task never sees its own loops as "seen before".
    let v = e.evaluate(failure("task-a", A[0])).await.unwrap();
    assert!(v.similar_loops.iter().all(|s| s.task_id != "task-a"));
}

#[tokio::test]
async fn the_service_keeps_the_memory_across_restarts_and_feedback_exports_for_calibration() {
    let dir = tempfile::tempdir().unwrap();
    let client = http_client();
    let post = |s: &Server, body: Value| {
        let c = client.clone();
        let url = s.url("/v1/evaluate");
        async move {
            c.post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    {
        let mut s = Server::start(dir.path(), &[]);
        s.ready(&client).await;
        for m in A {
            post(&s, json!({"task_id": "task-a", "agent_id": "db-agent", "event": {"type": "failure", "message": m}})).await;
        }
        let r = client
            .post(s.url("/v1/tasks/task-a/reset"))
            .json(&json!({"reason": "human_intervention", "by": "oncall", "note": "closed leaked connections"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(s.terminate().success());
    }
    let mut s = Server::start(dir.path(), &[]);
    s.ready(&client).await;
    // The loop memory came back from disk.
    let found: Value = client
        .get(s.url("/v1/loops/similar"))
        .query(&[("text", B_REWORDED[0])])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(found["loops"][0]["task_id"], "task-a", "{found:#}");
    assert_eq!(
        found["loops"][0]["resolution"]["note"],
        "closed leaked connections"
    );
    let mut last = Value::Null;
    for m in B_REWORDED {
        last = post(
            &s,
            json!({"task_id": "task-b", "event": {"type": "failure", "message": m}}),
        )
        .await;
    }
    assert_eq!(last["similar_loops"][0]["task_id"], "task-a", "{last:#}");

    // Feedback: task-b's loop was (say) a false positive; a later event was a missed loop.
    let fb = client
        .post(s.url("/v1/feedback"))
        .json(&json!({"task_id": "task-b", "seq": last["seq"], "label": "false_positive", "note": "different database"}))
        .send()
        .await
        .unwrap();
    assert_eq!(fb.status(), 201);
    let fb: Value = fb.json().await.unwrap();
    assert_eq!(fb["kind"], "exact_repeat");
    let first = post(&s, json!({"task_id": "task-d", "event": {"type": "response", "text": "Let me check the pool settings."}})).await;
    let second = post(&s, json!({"task_id": "task-d", "event": {"type": "response", "text": "I will look at the connection pool settings now."}})).await;
    assert_eq!(second["loop"], false);
    let r = client
        .post(s.url("/v1/feedback"))
        .json(&json!({"task_id": "task-d", "seq": second["seq"], "label": "missed_loop"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // A label that contradicts the verdict is refused.
    let r = client
        .post(s.url("/v1/feedback"))
        .json(&json!({"task_id": "task-d", "seq": first["seq"], "label": "false_positive"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);

    let pairs = client
        .get(s.url("/v1/feedback/export"))
        .query(&[("format", "pairs")])
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let pairs: Vec<Value> = pairs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(pairs.len(), 2);
    assert_eq!(pairs[0]["label"], 0);
    assert_eq!(pairs[0]["kind"], "failure");
    assert_eq!(pairs[1]["label"], 1);
    assert_eq!(pairs[1]["kind"], "response");
    assert!(pairs[1]["a"].as_str().unwrap().contains("pool settings"));
    let metrics = client
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .contains("loopguard_feedback_total{label=\"false_positive\",kind=\"exact_repeat\"} 1"),
        "{metrics}"
    );
    // After the restart the index is built in the background (a handful of records: done at once
    // or nearly); the gauge is there either way.
    assert!(
        metrics.contains("loopguard_loop_memory_index_building 0")
            || metrics.contains("loopguard_loop_memory_index_building 1"),
        "{metrics}"
    );
    assert!(s.terminate().success());

    // Offline, the same export from the data directory, and it is valid calibration input:
    // the labelled runs replay through `loopguard score`.
    let out = tempfile::tempdir().unwrap();
    let (pf, rf) = (
        out.path().join("pairs.jsonl"),
        out.path().join("runs.jsonl"),
    );
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(["feedback", "export", "--data-dir"])
        .arg(dir.path())
        .arg("--pairs")
        .arg(&pf)
        .arg("--runs")
        .arg(&rf)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(std::fs::read_to_string(&pf).unwrap().lines().count(), 2);
    let runs = std::fs::read_to_string(&rf).unwrap();
    let labels: Vec<String> = runs
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["label"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(labels, ["no_loop", "loop"]);
    // Both files are calibration input as they are: `loopguard calibrate` reads them and
    // reports on exactly the exported examples.
    for (what, file) in [("pairs", &pf), ("runs", &rf)] {
        let report_dir = out.path().join(what);
        let calibrated = std::process::Command::new(env!("CARGO_BIN_EXE_loopguard"))
            .args(["calibrate", what])
            .arg(file)
            .arg("--out-dir")
            .arg(&report_dir)
            .output()
            .unwrap();
        assert!(
            calibrated.status.success(),
            "calibrate {what}: {}",
            String::from_utf8_lossy(&calibrated.stderr)
        );
        let report: Value =
            serde_json::from_str(&std::fs::read_to_string(report_dir.join("report.json")).unwrap())
                .unwrap();
        // One example of each label: the false positive and the missed loop.
        let counts = if what == "pairs" {
            let kinds = report["groups"].as_array().unwrap().iter();
            kinds
                .filter(|g| g["group"] != "all")
                .fold((0, 0), |(p, n), g| {
                    (
                        p + g["positives"].as_u64().unwrap(),
                        n + g["negatives"].as_u64().unwrap(),
                    )
                })
        } else {
            (
                report["loops"].as_u64().unwrap(),
                report["no_loops"].as_u64().unwrap(),
            )
        };
        assert_eq!(counts, (1, 1), "calibrate {what}: {report:#}");
    }
    // The offline similar-loop query reads the same memory.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(["loops", "similar", B_REWORDED[0], "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tasks: Vec<&str> = v["loops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["task_id"].as_str().unwrap())
        .collect();
    assert!(
        tasks.contains(&"task-a") && tasks.contains(&"task-b"),
        "{v:#}"
    );
}

#[tokio::test]
async fn a_gate_and_a_tool_call_loop_are_remembered_with_their_tool() {
    let e = engine_with_memory();
    let call = || {
        call_with(
            "t",
            "http_get",
            json!({"url": "https://api.example.com/v2/orders?page=1"}),
            "HTTP 404: no such endpoint /v2/orders",
            true,
        )
    };
    let vs = feed(&e, (0..5).map(|_| call()).collect()).await;
    e.settle().await;
    assert_eq!(vs[4].action.kind, loopguard::verdict::ActionType::Pause);
    let records = e.loop_memory().unwrap().records();
    assert_eq!(
        records.len(),
        1,
        "repetitions of one loop are stored once: {records:#?}"
    );
    assert_eq!(records[0].tool.as_deref(), Some("http_get"));
    assert_eq!(records[0].kind, LoopKind::ExactRepeat);
}

#[tokio::test]
async fn a_content_loop_is_remembered_by_what_was_repeated() {
    // Tasks whose streams chant the same sentence, in chunks of different sizes: a later one is
    // offered an earlier one, which it could not be if the memory kept the completing chunk.
    let e = engine_with_memory();
    let chant = "I should look at the configuration loader once more before editing. ";
    let mut offered = Vec::new();
    for (task, pieces) in [("task-a", 1usize), ("task-b", 2), ("task-c", 3)] {
        let mut flagged = None;
        for _ in 0..3 {
            let step = chant.len().div_ceil(pieces);
            let parts: Vec<&str> = (0..chant.len())
                .step_by(step)
                .map(|i| &chant[i..(i + step).min(chant.len())])
                .collect();
            for piece in parts {
                let v = e
                    .evaluate(ev(
                        task,
                        json!({"type": "response", "text": piece, "chunk": true}),
                    ))
                    .await
                    .unwrap();
                if v.is_loop {
                    flagged = Some(v);
                }
            }
        }
        let v = flagged.expect("the chant is a content loop");
        assert_eq!(v.kind, LoopKind::ContentLoop);
        offered.extend(v.similar_loops);
        // With the model busy (other tests share it) the loop is remembered in the background
        // and listed from the next task on.
        e.settle().await;
    }
    assert!(!offered.is_empty(), "no earlier content loop was offered");
    assert!(
        offered
            .iter()
            .all(|s| s.kind == LoopKind::ContentLoop && s.text.contains("configuration loader")),
        "{offered:#?}"
    );
}
