//! The service end to end: the real binary on a free port, the real model, durable state; every
//! test on the embedded store and again on PostgreSQL (`postgres::*`, see tests/common/pg.rs).

mod common;

use common::{http_client, Backend, Server};

/// Each test, once per store: `embedded::<name>` and `postgres::<name>`.
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(&super::Backend::embedded()).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(backend) = super::Backend::postgres() else { return };
                    super::$name(&backend).await
                }
            )*
        }
    };
}

on_both_stores!(
    reworded_failures_loop_and_pause_at_the_gate_then_reset_clears_it,
    a_subtask_counts_toward_its_parent,
    state_survives_a_graceful_restart,
    concurrent_load_never_hangs,
    openapi_and_operational_endpoints_answer,
    protocol_errors_hyper_answers_itself_have_the_json_error_body,
    slow_and_idle_connections_are_closed_and_readyz_stays_answered,
);
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

async fn reworded_failures_loop_and_pause_at_the_gate_then_reset_clears_it(backend: &Backend) {
    let s = backend.start(&["--set", "policy.gate_at=2"]);
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

async fn a_subtask_counts_toward_its_parent(backend: &Backend) {
    let s = backend.start(&[]);
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

async fn state_survives_a_graceful_restart(backend: &Backend) {
    let client = http_client();
    {
        let mut s = backend.start(&[]);
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
    let s = backend.start(&[]);
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
async fn concurrent_load_never_hangs(backend: &Backend) {
    // 64 writers on PostgreSQL's 16 pooled connections: on a loaded 2-core machine a request
    // may wait longer for one than the 3 s default allows (503 storage_error by design); here
    // every request must be answered, so the wait is bounded by the test's own 60 s instead.
    let s = backend.start(&[
        "--set",
        "policy.gate_at=0",
        "--set",
        "policy.pivot_at=0",
        "--set",
        "server.database_timeout_ms=30000",
    ]);
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

async fn openapi_and_operational_endpoints_answer(backend: &Backend) {
    let s = backend.start(&[]);
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

/// `host:port` of a server, for raw sockets.
fn addr(s: &Server) -> String {
    s.base.trim_start_matches("http://").to_string()
}

/// Read until the peer closes (or `limit` passes); what was read and whether it closed.
async fn read_until_closed(
    sock: &mut tokio::net::TcpStream,
    limit: std::time::Duration,
) -> (Vec<u8>, bool) {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, sock.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (out, true),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (out, false),
        }
    }
}

/// A raw request's answer: status and JSON body (connection: close).
async fn raw(s: &Server, request: &[u8]) -> (u16, Value) {
    use tokio::io::AsyncWriteExt;
    let mut sock = tokio::net::TcpStream::connect(addr(s)).await.unwrap();
    // The server may answer (and close) before it has read everything: ignore write errors.
    let _ = sock.write_all(request).await;
    let (bytes, closed) = read_until_closed(&mut sock, std::time::Duration::from_secs(10)).await;
    assert!(closed, "the server closes after a protocol error");
    let text = String::from_utf8_lossy(&bytes);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("{text}"));
    let status = head[9..12].parse().unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    (
        status,
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}")),
    )
}

async fn protocol_errors_hyper_answers_itself_have_the_json_error_body(backend: &Backend) {
    let s = backend.start(&["--set", "server.max_header_bytes=100000"]);
    let client = http_client();
    s.ready(&client).await;
    let big_header = format!(
        "GET /livez HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "a".repeat(120_000)
    );
    let long_uri = format!(
        "GET /v1/loops/similar?text={} HTTP/1.1\r\nhost: x\r\n\r\n",
        "a".repeat(70_000)
    );
    for (request, status, code) in [
        (big_header.into_bytes(), 431, "headers_too_large"),
        (long_uri.into_bytes(), 414, "uri_too_long"),
        (b"GARBAGE / HTTP/9\r\n\r\n".to_vec(), 400, "invalid_http"),
    ] {
        let (got, v) = raw(&s, &request).await;
        assert_eq!((got, v["code"].as_str()), (status, Some(code)), "{v}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
        assert!(v["path"].is_null(), "{v}");
    }
    // The server still serves.
    let r = client.get(s.url("/livez")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

/// Slow headers, silent sockets and idle keep-alives are closed by the server, and while they
/// are held (more of them than the connection cap) `/readyz` is still answered.
async fn slow_and_idle_connections_are_closed_and_readyz_stays_answered(backend: &Backend) {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = backend.start(&[
        "--set",
        "server.header_read_timeout_ms=700",
        "--set",
        "server.idle_timeout_secs=1",
        "--set",
        "server.max_connections=8",
    ]);
    let client = http_client();
    s.ready(&client).await;
    let connect = || tokio::net::TcpStream::connect(addr(&s));

    let mut held = Vec::new();
    // Silent: connected, nothing sent.
    for _ in 0..6 {
        held.push(("silent", connect().await.unwrap()));
    }
    // Idle keep-alives: one request answered, then nothing.
    for _ in 0..4 {
        let mut sock = connect().await.unwrap();
        sock.write_all(b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.ends_with(b"ok") {
            let n = sock.read(&mut buf).await.unwrap();
            assert!(n > 0, "answered before closing");
            got.extend_from_slice(&buf[..n]);
        }
        held.push(("keep-alive", sock));
    }
    // Half-sent headers.
    for _ in 0..4 {
        let mut sock = connect().await.unwrap();
        sock.write_all(b"GET /livez HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        held.push(("half-sent", sock));
    }
    // Slow headers: a byte every 100 ms, for ever, until the server closes the socket.
    let mut slow = Vec::new();
    for _ in 0..4 {
        let mut sock = connect().await.unwrap();
        slow.push(tokio::spawn(async move {
            let started = Instant::now();
            sock.write_all(b"GET /livez HTTP/1.1\r\nhost: x\r\nx-slow: ")
                .await
                .unwrap();
            let mut buf = [0u8; 64];
            loop {
                if sock.write_all(b"a").await.is_err() {
                    return started.elapsed();
                }
                match tokio::time::timeout(Duration::from_millis(100), sock.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
                    _ => {}
                }
                if started.elapsed() > Duration::from_secs(30) {
                    return started.elapsed();
                }
            }
        }));
    }

    // 18 connections held against a cap of 8: readiness probes still get through, each on a
    // new connection.
    let fresh = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    for _ in 0..5 {
        let r = fresh.get(s.url("/readyz")).send().await;
        assert!(
            r.as_ref().is_ok_and(|r| r.status() == 200),
            "/readyz while connections are held: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    for h in slow {
        let took = h.await.unwrap();
        assert!(
            took < Duration::from_secs(10),
            "a slow header was held for {took:?}"
        );
    }
    for (kind, mut sock) in held {
        let (_, closed) = read_until_closed(&mut sock, Duration::from_secs(10)).await;
        assert!(closed, "a {kind} connection was not closed");
    }
    let metrics = s
        .get_text(&client, "/metrics")
        .await
        .lines()
        .filter(|l| l.starts_with("loopguard_http_connections_closed_total"))
        .map(str::to_string)
        .collect::<Vec<_>>();
    let count = |reason: &str| -> f64 {
        metrics
            .iter()
            .find(|l| l.contains(&format!("reason=\"{reason}\"")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0.0)
    };
    assert!(count("header_timeout") >= 4.0, "{metrics:?}");
    assert!(
        count("header_timeout") + count("idle_timeout") + count("evicted") >= 18.0,
        "{metrics:?}"
    );
}
