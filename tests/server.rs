//! The service end to end: the real binary on a free port, the real model, durable state.

mod common;

use common::{http_client, Server};
use serde_json::{json, Value};

async fn post(client: &reqwest::Client, s: &Server, body: Value) -> (u16, Value) {
    let r = client
        .post(s.url("/v1/evaluate"))
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

fn failure(task: &str, msg: &str) -> Value {
    json!({"task_id": task, "event": {"type": "failure", "message": msg}})
}

const REWORDED: [&str; 3] = [
    "TypeError: Cannot read properties of undefined (reading 'name') at UserCard (src/components/UserCard.tsx:14:22)",
    "Uncaught TypeError: cannot read property 'name' of undefined in UserCard.tsx line 14",
    "TypeError: undefined has no properties (reading 'name') — UserCard component",
];

#[tokio::test]
async fn reworded_failures_loop_and_pause_at_the_gate_then_reset_clears_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["--set", "policy.gate_at=2"]);
    let client = http_client();
    s.ready(&client).await;
    let mut verdicts = Vec::new();
    for m in REWORDED {
        verdicts.push(post(&client, &s, failure("web-1", m)).await.1);
    }
    assert_eq!(verdicts[0]["loop"], false);
    assert_eq!(verdicts[1]["loop"], true);
    assert_eq!(verdicts[1]["kind"], "semantic_repeat");
    assert_eq!(verdicts[2]["action"]["type"], "pause", "{:#}", verdicts[2]);
    assert_eq!(verdicts[2]["status"], "paused");

    let r = client
        .post(s.url("/v1/tasks/web-1/reset"))
        .json(&json!({"reason": "human_intervention", "by": "oncall", "note": "guarded the undefined user"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let task: Value = r.json().await.unwrap();
    assert_eq!(
        (task["loop_count"].as_u64(), task["status"].as_str()),
        (Some(0), Some("active"))
    );
    let (_, v) = post(&client, &s, failure("web-1", REWORDED[0])).await;
    assert_eq!(v["loop"], false, "the reset cleared the window");

    let h: Value = s.get_json(&client, "/v1/tasks/web-1/history").await;
    let kinds: Vec<&str> = h["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "loop_detected",
            "loop_detected",
            "gate_triggered",
            "loop_counter_reset"
        ]
    );
}

#[tokio::test]
async fn a_subtask_counts_toward_its_parent() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let client = http_client();
    s.ready(&client).await;
    for (i, m) in REWORDED.iter().enumerate() {
        let body = json!({"task_id": format!("epic-9/sub-{i}"), "parent_task_id": "epic-9", "agent_id": format!("agent-{i}"), "event": {"type": "failure", "message": m}});
        post(&client, &s, body).await;
    }
    let parent: Value = s.get_json(&client, "/v1/tasks/epic-9").await;
    assert_eq!(parent["loop_count"], 2, "{parent:#}");
    // Task ids go into the path percent-encoded.
    let sub: Value = s.get_json(&client, "/v1/tasks/epic-9%2Fsub-2").await;
    assert_eq!(sub["root_task_id"], "epic-9");
    assert_eq!(sub["loop_count"], 2);
}

#[tokio::test]
async fn state_survives_a_graceful_restart() {
    let dir = tempfile::tempdir().unwrap();
    let client = http_client();
    {
        let mut s = Server::start(dir.path(), &[]);
        s.ready(&client).await;
        for _ in 0..3 {
            post(
                &client,
                &s,
                failure("durable", "ENOSPC: no space left on device, write"),
            )
            .await;
        }
        let status = s.terminate();
        assert!(status.success(), "clean exit on SIGTERM: {status:?}");
    }
    let s = Server::start(dir.path(), &[]);
    s.ready(&client).await;
    let t: Value = s.get_json(&client, "/v1/tasks/durable").await;
    assert_eq!(t["events_total"], 3);
    assert_eq!(t["loop_count"], 2);
    assert_eq!(t["pivot_count"], 1);
    // The window came back too: the next repeat is still a loop, decided on keys.
    let (_, v) = post(
        &client,
        &s,
        failure("durable", "ENOSPC: no space left on device, write"),
    )
    .await;
    assert_eq!(v["kind"], "exact_repeat");
    assert_eq!(v["action"]["type"], "pause");
}

/// Many concurrent acknowledgements share fsyncs and never hang (sled 0.34's concurrent
/// flush_async deadlocked under exactly this load; see store::sled::Flusher).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_load_never_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &["--set", "policy.gate_at=0", "--set", "policy.pivot_at=0"],
    );
    let client = http_client();
    let mut handles = Vec::new();
    for w in 0..64 {
        let (client, url) = (client.clone(), s.url("/v1/evaluate"));
        handles.push(tokio::spawn(async move {
            for _ in 0..30 {
                let r = client
                    .post(&url)
                    .json(&failure(
                        &format!("load-{w}"),
                        "OSError: [Errno 28] No space left on device",
                    ))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
            }
        }));
    }
    let all = futures_util::future::join_all(handles);
    let done = tokio::time::timeout(std::time::Duration::from_secs(60), all).await;
    assert!(
        done.is_ok(),
        "1,920 concurrent events did not finish within 60 s"
    );
    for h in done.unwrap() {
        h.unwrap();
    }
    let t: Value = s.get_json(&client, "/v1/tasks/load-7").await;
    assert_eq!(t["events_total"], 30);
    assert_eq!(t["loop_count"], 29);
}

#[tokio::test]
async fn openapi_and_operational_endpoints_answer() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let client = http_client();
    assert_eq!(
        client.get(s.url("/livez")).send().await.unwrap().status(),
        200
    );
    s.ready(&client).await;
    let doc: Value = s.get_json(&client, "/openapi.json").await;
    assert!(doc["paths"]["/v1/evaluate"]["post"].is_object());
    let metrics = client
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("loopguard_model_ready 1"), "{metrics}");
}
