//! Each seed's documented behaviour, reproduced by loopguard with the seed's config
//! (docs/seeds/seedNNN.toml), plus the default config's reconciliation of them.
//! All run on the real model.

mod common;

use common::*;
use loopguard::judge::{FixedJudge, JudgeVerdict};
use loopguard::verdict::{ActionType, EscalationTarget, LoopKind, TaskStatus};
use loopguard::{Config, Engine};
use serde_json::json;
use std::sync::Arc;

fn seed_engine(n: u32) -> Engine {
    engine(seed_config(n))
}

// ---------------------------------------------------------------- seed 000 (Decision 74)

#[tokio::test]
async fn seed_000_exact_error_match_increments_counter() {
    // The seed's mock LLM lets a first failure pass as progress.
    let e = seed_engine(0).with_judge(Arc::new(FixedJudge::says(
        JudgeVerdict::Progress,
        "first attempt",
    )));
    let msg = "TypeError: cannot read property 'x' of undefined";
    let v1 = e.evaluate(failure("task1", msg)).await.unwrap();
    assert_eq!(v1.loop_count, 0);
    assert!(!v1.is_loop);
    let v2 = e.evaluate(failure("task1", msg)).await.unwrap();
    assert!(v2.is_loop);
    assert_eq!(v2.loop_count, 1);
    assert_eq!(v2.kind, LoopKind::ExactRepeat);
    assert_eq!(v2.matched.as_ref().unwrap().seq, 1);
}

#[tokio::test]
async fn seed_000_improved_coverage_not_counted_as_loop() {
    let e = seed_engine(0);
    let msg = "Test failed: expected 5, got 3";
    e.evaluate(ev("task1", json!({"type": "progress", "coverage": 60})))
        .await
        .unwrap();
    e.evaluate(failure("task1", msg)).await.unwrap();
    e.evaluate(ev("task1", json!({"type": "progress", "coverage": 75})))
        .await
        .unwrap();
    let v = e.evaluate(failure("task1", msg)).await.unwrap();
    assert!(!v.is_loop, "{v:?}");
    assert!(
        v.reason.contains("test metrics show improvement"),
        "{}",
        v.reason
    );
}

#[tokio::test]
async fn seed_000_collaboration_loop_detection() {
    let e = seed_engine(0);
    let v1 = e
        .evaluate(collab(
            "task1",
            "backend_dev",
            "security_expert",
            "Can you review this authentication code?",
        ))
        .await
        .unwrap();
    assert!(!v1.is_loop);
    let v2 = e
        .evaluate(collab(
            "task1",
            "backend_dev",
            "security_expert",
            "Can you review this auth code again?",
        ))
        .await
        .unwrap();
    assert!(v2.is_loop, "{v2:?}");
    assert_eq!(v2.kind, LoopKind::CollaborationLoop);
    assert_eq!(v2.loop_count, 1);
    assert!(v2.similarity.unwrap() > 0.85);
}

#[tokio::test]
async fn seed_000_gate_triggered_after_three_loops() {
    // The seed's orchestrator LLM sees no progress in a bare repeated failure.
    let e = seed_engine(0).with_judge(Arc::new(FixedJudge::says(
        JudgeVerdict::NoProgress,
        "no progress",
    )));
    let vs = feed(
        &e,
        (0..3)
            .map(|_| failure("task1", "Syntax error at line 42"))
            .collect(),
    )
    .await;
    let last = vs.last().unwrap();
    assert_eq!(last.loop_count, 3);
    assert_eq!(last.action.kind, ActionType::Pause);
    assert_eq!(last.status, TaskStatus::Paused);
    assert!(last
        .action
        .message
        .as_ref()
        .unwrap()
        .contains("Loop detected after 3 attempts"));
    let history = e.history("task1", 100).await.unwrap();
    assert!(history
        .iter()
        .any(|r| matches!(r.event, loopguard::audit::AuditEvent::GateTriggered { .. })));
}

#[tokio::test]
async fn seed_000_counter_resets_on_task_completion() {
    let e = seed_engine(0).with_judge(Arc::new(FixedJudge::says(
        JudgeVerdict::NoProgress,
        "no progress",
    )));
    let vs = feed(
        &e,
        vec![failure("task1", "Error"), failure("task1", "Error")],
    )
    .await;
    assert_eq!(vs[1].loop_count, 2);
    let done = e
        .evaluate(ev("task1", json!({"type": "outcome", "result": "success"})))
        .await
        .unwrap();
    assert_eq!(done.loop_count, 0);
    // A new task starts from zero; so does the old one after its reset.
    let v = e.evaluate(failure("task2", "Error")).await.unwrap();
    assert_eq!(
        v.loop_count, 1,
        "the judge counts task2's first failure, from zero"
    );
    assert_eq!(e.snapshot("task1").await.unwrap().unwrap().loop_count, 0);
}

#[tokio::test]
async fn seed_000_agent_change_does_not_reset_but_human_intervention_does() {
    let e = seed_engine(0).with_judge(Arc::new(FixedJudge::says(
        JudgeVerdict::NoProgress,
        "no progress",
    )));
    let mk = |agent: &str| {
        env(
            json!({"task_id": "t", "agent_id": agent, "event": {"type": "failure", "message": "build failed: missing semicolon"}}),
        )
    };
    let vs = feed(&e, vec![mk("agent-a"), mk("agent-a")]).await;
    assert_eq!(vs[1].loop_count, 2);
    let v = e
        .evaluate(ev(
            "t",
            json!({"type": "outcome", "result": "agent_changed"}),
        ))
        .await
        .unwrap();
    assert_eq!(v.loop_count, 2);
    let v = e.evaluate(mk("agent-b")).await.unwrap();
    assert_eq!(v.loop_count, 3, "Agent B fails once → 3 → gate");
    assert_eq!(v.action.kind, ActionType::Pause);
    let v = e
        .evaluate(ev(
            "t",
            json!({"type": "outcome", "result": "human_intervention", "note": "approved agent B"}),
        ))
        .await
        .unwrap();
    assert_eq!((v.loop_count, v.status), (0, TaskStatus::Active));
}

#[tokio::test]
async fn seed_000_orchestrator_detects_regressive_progress() {
    let e = seed_engine(0);
    let vs = feed(
        &e,
        [
            "1 test failing",
            "3 tests failing",
            "5 tests failing",
            "8 tests failing",
        ]
        .into_iter()
        .map(|m| failure("task1", m))
        .collect(),
    )
    .await;
    assert!(!vs[1].is_loop);
    let last = vs.last().unwrap();
    assert!(last.is_loop);
    assert_eq!(last.kind, LoopKind::Regression);
    assert!(
        last.reason
            .to_lowercase()
            .contains("moving away from the goal"),
        "{}",
        last.reason
    );
}

#[tokio::test]
async fn seed_000_external_dependency_failure_not_counted() {
    let e = seed_engine(0).with_judge(Arc::new(FixedJudge::says(
        JudgeVerdict::External,
        "external API failure",
    )));
    let f = || {
        ev(
            "task1",
            json!({"type": "failure", "message": "API timeout: external service unavailable", "error_type": "dependency"}),
        )
    };
    let v = e.evaluate(f()).await.unwrap();
    assert!(!v.is_loop);
    // Even repeated, an external failure never moves the counter.
    let v = e.evaluate(f()).await.unwrap();
    assert!(v.is_loop && !v.counted, "{v:?}");
    assert_eq!(v.loop_count, 0);
    assert_eq!(v.action.kind, ActionType::RetryWithHint);
}

#[tokio::test]
async fn subtasks_share_the_root_counter() {
    let e = engine(Config::default());
    let sub = |id: &str| {
        env(
            json!({"task_id": id, "parent_task_id": "root", "event": {"type": "failure", "message": "ImportError: cannot import name 'Foo' from 'bar'"}}),
        )
    };
    let vs = feed(
        &e,
        vec![sub("root/a"), sub("root/b"), sub("root/c"), sub("root/d")],
    )
    .await;
    assert_eq!(
        vs.iter().map(|v| v.loop_count).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    assert_eq!(vs[3].action.kind, ActionType::Pause);
    assert_eq!(vs[3].task_id, "root/d");
    assert_eq!(e.snapshot("root").await.unwrap().unwrap().loop_count, 3);
    assert_eq!(e.snapshot("root/a").await.unwrap().unwrap().loop_count, 3);
}

// ---------------------------------------------------------------- seed 001 (Rust LoopDetector)

#[tokio::test]
async fn seed_001_exact_duplicate_detection() {
    let e = seed_engine(1);
    let vs = feed(
        &e,
        (0..3)
            .map(|_| call("t", "bash", json!({"cmd": "ls"})))
            .collect(),
    )
    .await;
    assert_eq!(loops(&vs), [false, false, true]);
    assert_eq!(vs[2].kind, LoopKind::ExactRepeat);
}

#[tokio::test]
async fn seed_001_pattern_detection() {
    let e = seed_engine(1);
    let a = || call("t", "read_file", json!({"path": "a.rs"}));
    let b = || call("t", "search", json!({"query": "fn main"}));
    let vs = feed(&e, vec![a(), b(), a(), b()]).await;
    assert_eq!(loops(&vs), [false, false, false, true]);
    assert_eq!(vs[3].kind, LoopKind::Cycle);
}

#[tokio::test]
async fn seed_001_no_false_positives() {
    let e = seed_engine(1);
    let vs = feed(
        &e,
        ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|f| call("t", "read_file", json!({"path": f})))
            .collect(),
    )
    .await;
    assert!(vs.iter().all(|v| !v.is_loop));
}

#[tokio::test]
async fn seed_001_graduated_response() {
    let e = seed_engine(1);
    let vs = feed(
        &e,
        (0..5)
            .map(|_| call("t", "bash", json!({"cmd": "ls"})))
            .collect(),
    )
    .await;
    let actions: Vec<_> = vs[2..].iter().map(|v| v.action.kind).collect();
    assert_eq!(
        actions,
        [ActionType::Warn, ActionType::Warn, ActionType::Terminate]
    );
}

#[tokio::test]
async fn seed_001_clear_resets_state() {
    let e = seed_engine(1);
    feed(
        &e,
        (0..4)
            .map(|_| call("t", "bash", json!({"cmd": "ls"})))
            .collect(),
    )
    .await;
    e.reset(
        "t",
        loopguard::engine::ResetReason::HumanIntervention,
        "test",
        None,
    )
    .await
    .unwrap();
    let vs = feed(
        &e,
        (0..3)
            .map(|_| call("t", "bash", json!({"cmd": "ls"})))
            .collect(),
    )
    .await;
    assert_eq!(loops(&vs), [false, false, true]);
    assert_eq!(vs[2].loop_count, 1);
    assert_eq!(vs[2].action.kind, ActionType::Warn);
}

#[tokio::test]
async fn seed_001_window_size_limit() {
    let e = seed_engine(1);
    let mut events = vec![call("t", "bash", json!({"cmd": "ls"}))];
    events.extend((0..10).map(|i| call("t", "read_file", json!({"path": format!("f{i}")}))));
    events.push(call("t", "bash", json!({"cmd": "ls"})));
    events.push(call("t", "bash", json!({"cmd": "ls"})));
    let vs = feed(&e, events).await;
    assert!(
        vs.iter().all(|v| !v.is_loop),
        "the first `ls` left the window of 10"
    );
}

// ---------------------------------------------------------------- seed 002 (ToolLoopDetector)

#[tokio::test]
async fn seed_002_defaults_repeat_threshold_3_history_20_sorted_keys() {
    let cfg = seed_config(2);
    assert_eq!(cfg.detect.window, 20);
    let e = engine(cfg);
    // Key order does not matter: {"a": 1, "b": 2} and {"b": 2, "a": 1} are the same call.
    let mut events = vec![
        call("t", "search", json!({"a": 1, "b": 2})),
        call("t", "other", json!({"x": 0})),
        call("t", "search", json!({"b": 2, "a": 1})),
    ];
    events.push(call("t", "other", json!({"x": 1})));
    events.push(call("t", "search", json!({"a": 1, "b": 2})));
    let vs = feed(&e, events).await;
    assert_eq!(loops(&vs), [false, false, false, false, true]);
    assert_eq!(vs[4].action.kind, ActionType::Terminate);
    // Semantic variants are the seed's known gap: not detected with its config.
    let e = engine(seed_config(2));
    let vs = feed(
        &e,
        [
            "find the config file",
            "locate the configuration file",
            "search for the config file",
        ]
        .iter()
        .map(|q| call("t", "search", json!({"query": q})))
        .collect(),
    )
    .await;
    assert!(vs.iter().all(|v| !v.is_loop));
}

// ---------------------------------------------------------------- seed 003 (strategy pivot)

const FAILED_TURN: &str = "I tried to fix the parser by adding a null check, but the test still fails with the same error.";

#[tokio::test]
async fn seed_003_entropy_threshold_pivot_and_reset() {
    let e = seed_engine(3);
    let vs = feed(&e, (0..3).map(|_| response("t", FAILED_TURN)).collect()).await;
    // Identical hashes: turns 2 and 3 are loops; the third failed turn issues the pivot.
    assert_eq!(loops(&vs), [false, true, true]);
    assert_eq!(vs[1].action.kind, ActionType::Warn);
    let pivot = &vs[2];
    assert_eq!(pivot.action.kind, ActionType::Pivot);
    assert_eq!(pivot.pivot_count, 1);
    let text = pivot.action.message.as_ref().unwrap().to_lowercase();
    assert!(text.contains("ignore all previous implementation attempts"));
    assert!(text.contains("reason from first principles"));
    assert!(text.contains("1 time(s)"));
    assert!(
        !text.contains("null check"),
        "the directive quotes nothing from earlier attempts"
    );
    // The pivot record, the pivot count and the entropy reset were committed together.
    let s = e.snapshot("t").await.unwrap().unwrap();
    assert_eq!((s.pivot_count, s.entropy), (1, 0));
    let h = e.history("t", 100).await.unwrap();
    assert!(h.iter().any(|r| matches!(
        r.event,
        loopguard::audit::AuditEvent::PivotIssued {
            pivot_count: 1,
            entropy_count_at_trigger: 2
        }
    )));
}

#[tokio::test]
async fn seed_003_five_turn_end_to_end() {
    let e = seed_engine(3);
    let vs = feed(&e, (0..5).map(|_| response("t", FAILED_TURN)).collect()).await;
    let actions: Vec<_> = vs.iter().map(|v| v.action.kind).collect();
    // The 4th turn receives the pivot directive issued after the 3rd; the 5th is paused.
    assert_eq!(
        actions,
        [
            ActionType::Continue,
            ActionType::Warn,
            ActionType::Pivot,
            ActionType::Pivot,
            ActionType::Pause
        ]
    );
    assert_eq!(vs[3].pivot_count, 2);
    assert_eq!(vs[4].status, TaskStatus::Paused);
    assert!(vs[4]
        .action
        .message
        .as_ref()
        .unwrap()
        .contains("MAX_PIVOTS_EXCEEDED"));
}

#[tokio::test]
async fn seed_003_max_pivots_zero_pauses_on_first_loop_and_success_resets() {
    let cfg = Config::load(
        Some((
            "seed003.toml",
            &std::fs::read_to_string("docs/seeds/seed003.toml").unwrap(),
        )),
        vec![("LOOPGUARD_POLICY__MAX_PIVOTS".to_string(), "0".to_string())].into_iter(),
        &[],
    )
    .unwrap();
    let e = engine(cfg);
    let vs = feed(&e, (0..3).map(|_| response("t", FAILED_TURN)).collect()).await;
    assert_eq!(vs[2].action.kind, ActionType::Pause);
    let v = e
        .evaluate(ev("t", json!({"type": "outcome", "result": "success"})))
        .await
        .unwrap();
    assert_eq!(
        (v.loop_count, v.pivot_count, v.status),
        (0, 0, TaskStatus::Active)
    );
}

// ---------------------------------------------------------------- seed 004 (ADR-033)

#[tokio::test]
async fn seed_004_step_iteration_exceeded_escalates_to_user() {
    let e = seed_engine(4);
    let step = |s: &str| {
        env(json!({"task_id": "t", "step": s, "event": {"type": "progress", "note": "ran"}}))
    };
    let vs = feed(
        &e,
        vec![
            step("worker"),
            step("judge"),
            step("worker"),
            step("judge"),
            step("worker"),
            step("judge"),
            step("worker"),
        ],
    )
    .await;
    assert!(vs[..6].iter().all(|v| !v.is_loop));
    let v = &vs[6];
    assert_eq!(v.kind, LoopKind::StepLimit);
    assert!(
        v.reason.contains("`worker` entered 4 times"),
        "{}",
        v.reason
    );
    assert_eq!(
        (v.action.kind, v.action.target),
        (ActionType::Escalate, Some(EscalationTarget::User))
    );
}

#[tokio::test]
async fn seed_004_similar_response_retry_with_hint_then_escalate() {
    let e = seed_engine(4);
    let vs = feed(
        &e,
        vec![
            response("t", "The implementation is incomplete: the login handler does not validate the password yet."),
            response("t", "The implementation is still incomplete because the login handler doesn't validate passwords yet."),
            response("t", "Still incomplete: the login handler does not yet validate the password."),
        ],
    )
    .await;
    assert_eq!(loops(&vs), [false, true, true]);
    assert_eq!(vs[1].kind, LoopKind::SimilarResponse);
    assert_eq!(vs[1].action.kind, ActionType::RetryWithHint);
    assert_eq!(
        (vs[2].action.kind, vs[2].action.target),
        (ActionType::Escalate, Some(EscalationTarget::User))
    );
}

#[tokio::test]
async fn seed_004_transition_pattern_replan_then_user() {
    let e = seed_engine(4);
    let t = |a: &str, b: &str| ev("t", json!({"type": "transition", "from": a, "to": b}));
    let mut events = Vec::new();
    for _ in 0..3 {
        events.push(t("plan", "implement"));
        events.push(t("implement", "review"));
        events.push(t("review", "plan"));
    }
    let vs = feed(&e, events).await;
    let first = vs
        .iter()
        .position(|v| v.is_loop)
        .expect("a transition cycle");
    assert_eq!(first, 5, "plan→implement→review→plan repeated twice");
    assert_eq!(vs[first].kind, LoopKind::TransitionCycle);
    assert_eq!(
        (vs[first].action.kind, vs[first].action.target),
        (ActionType::Escalate, Some(EscalationTarget::Planner))
    );
    let next_counted = vs[first + 1..].iter().find(|v| v.counted).unwrap();
    assert_eq!(next_counted.action.target, Some(EscalationTarget::User));
}

// ---------------------------------------------------------------- the default config

#[tokio::test]
async fn default_graduated_response_warn_pivot_pause() {
    let e = engine(Config::default());
    let vs = feed(
        &e,
        (0..4)
            .map(|_| failure("t", "error[E0308]: mismatched types at src/main.rs:10:5"))
            .collect(),
    )
    .await;
    let actions: Vec<_> = vs.iter().map(|v| v.action.kind).collect();
    assert_eq!(
        actions,
        [
            ActionType::Continue,
            ActionType::Warn,
            ActionType::Pivot,
            ActionType::Pause
        ]
    );
    assert_eq!(vs[3].status, TaskStatus::Paused);
    // A paused task answers pause until someone resets it.
    let v = e
        .evaluate(failure("t", "something else entirely"))
        .await
        .unwrap();
    assert_eq!(v.action.kind, ActionType::Pause);
    e.reset(
        "t",
        loopguard::engine::ResetReason::HumanIntervention,
        "test",
        Some("fixed the types".into()),
    )
    .await
    .unwrap();
    let v = e
        .evaluate(failure(
            "t",
            "error[E0308]: mismatched types at src/main.rs:10:5",
        ))
        .await
        .unwrap();
    assert!(!v.is_loop, "the window was cleared by the reset");
}

#[tokio::test]
async fn budget_is_never_reset() {
    let cfg = Config::load(
        None,
        std::iter::empty(),
        &[("detect.budget.max_events".into(), "4".into())],
    )
    .unwrap();
    let e = engine(cfg);
    let vs = feed(
        &e,
        vec![
            response("t", "one"),
            response("t", "two"),
            ev("t", json!({"type": "outcome", "result": "success"})),
            response("t", "three"),
            response("t", "four"),
        ],
    )
    .await;
    assert_eq!(vs[4].kind, LoopKind::Budget);
    assert_eq!(vs[4].action.kind, ActionType::Terminate);
    assert_eq!(vs[4].status, TaskStatus::Terminated);
}
