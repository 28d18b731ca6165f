//! The audit trail: every change of a task's loop state (loop detected, pivot issued, gate
//! triggered, counter reset, agent changed, budget exhausted) is one [`AuditRecord`], committed
//! together with the task state it explains.
//!
//! [`emit`] is the one place where a record becomes what operators see: one structured log line
//! and, through [`AuditMetrics`], one metric. The library keeps no metrics registry of its own;
//! the service implements [`AuditMetrics`] with Prometheus counters, and anything else (a Rust
//! agent loop embedding the engine) can count the same events its own way.

use crate::verdict::LoopKind;
use serde::{Deserialize, Serialize};

/// One entry of a task's audit trail (the strategy-pivot table of the pivot design, and more).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Unix seconds, by the engine's clock.
    pub ts: i64,
    /// The event's own `ts` as the client sent it (clamped by the service), for the record only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ts: Option<i64>,
    pub seq: u64,
    pub task_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(flatten)]
    pub event: AuditEvent,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AuditEvent {
    LoopDetected {
        kind: LoopKind,
        loop_count: u32,
        counted: bool,
        reason: String,
        /// The rule of the detection table that found it (`dead_end.same_attempt`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
    },
    PivotIssued {
        pivot_count: u32,
        entropy_count_at_trigger: u32,
    },
    GateTriggered {
        loop_count: u32,
        reason: String,
    },
    #[serde(rename = "loop_counter_reset")]
    CounterReset {
        previous_count: u32,
        reason: String,
        by: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    AgentChanged {
        from: Option<String>,
        to: String,
    },
    BudgetExhausted {
        events: u64,
    },
}

impl AuditEvent {
    pub fn name(&self) -> &'static str {
        match self {
            AuditEvent::LoopDetected { .. } => "loop_detected",
            AuditEvent::PivotIssued { .. } => "pivot_issued",
            AuditEvent::GateTriggered { .. } => "gate_triggered",
            AuditEvent::CounterReset { .. } => "loop_counter_reset",
            AuditEvent::AgentChanged { .. } => "agent_changed",
            AuditEvent::BudgetExhausted { .. } => "budget_exhausted",
        }
    }
}

/// Counters for audit events, implemented by whoever exports metrics (the service: Prometheus).
/// Each method is called once per record by [`emit`], after the record is durable.
pub trait AuditMetrics: Send + Sync {
    /// `rule`: the id of the rule that found it, empty when none did (records written before
    /// rules had ids).
    fn loop_detected(&self, kind: LoopKind, counted: bool, rule: &str);
    fn pivot_issued(&self);
    fn gate_triggered(&self);
    fn counter_reset(&self, reason: &str);
    fn agent_changed(&self) {}
    fn budget_exhausted(&self) {}
}

/// Log each record as one structured line and count it. Called once the records are committed:
/// what is logged and counted is what the task's audit history holds.
pub fn emit(records: &[AuditRecord], metrics: Option<&dyn AuditMetrics>) {
    for r in records {
        let agent_id = r.agent_id.as_deref().unwrap_or("");
        match &r.event {
            AuditEvent::LoopDetected {
                kind,
                loop_count,
                counted,
                reason,
                rule,
            } => {
                let rule = rule.as_deref().unwrap_or("");
                tracing::info!(
                    event = "loop_detected",
                    task_id = %r.task_id,
                    agent_id,
                    seq = r.seq,
                    kind = kind.as_str(),
                    rule,
                    loop_count,
                    counted,
                    reason = %reason,
                );
                if let Some(m) = metrics {
                    m.loop_detected(*kind, *counted, rule);
                }
            }
            AuditEvent::PivotIssued {
                pivot_count,
                entropy_count_at_trigger,
            } => {
                tracing::info!(
                    event = "pivot_issued",
                    task_id = %r.task_id,
                    agent_id,
                    seq = r.seq,
                    pivot_count,
                    entropy_count_at_trigger,
                );
                if let Some(m) = metrics {
                    m.pivot_issued();
                }
            }
            // Info, not warn: a gate is the service doing its job, and `score` over many runs
            // would otherwise flood stderr.
            AuditEvent::GateTriggered { loop_count, reason } => {
                tracing::info!(
                    event = "gate_triggered",
                    task_id = %r.task_id,
                    agent_id,
                    seq = r.seq,
                    loop_count,
                    reason = %reason,
                );
                if let Some(m) = metrics {
                    m.gate_triggered();
                }
            }
            AuditEvent::CounterReset {
                previous_count,
                reason,
                by,
                ..
            } => {
                tracing::info!(
                    event = "loop_counter_reset",
                    task_id = %r.task_id,
                    seq = r.seq,
                    previous_count,
                    reason = %reason,
                    by = %by,
                );
                if let Some(m) = metrics {
                    m.counter_reset(reason);
                }
            }
            AuditEvent::AgentChanged { from, to } => {
                tracing::info!(
                    event = "agent_changed",
                    task_id = %r.task_id,
                    seq = r.seq,
                    from = from.as_deref().unwrap_or(""),
                    to = %to,
                );
                if let Some(m) = metrics {
                    m.agent_changed();
                }
            }
            AuditEvent::BudgetExhausted { events } => {
                tracing::warn!(
                    event = "budget_exhausted",
                    task_id = %r.task_id,
                    seq = r.seq,
                    events,
                );
                if let Some(m) = metrics {
                    m.budget_exhausted();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Seen(Mutex<Vec<String>>);

    impl AuditMetrics for Seen {
        fn loop_detected(&self, kind: LoopKind, counted: bool, rule: &str) {
            self.0
                .lock()
                .unwrap()
                .push(format!("loop {kind} {counted} {rule}"));
        }
        fn pivot_issued(&self) {
            self.0.lock().unwrap().push("pivot".into());
        }
        fn gate_triggered(&self) {
            self.0.lock().unwrap().push("gate".into());
        }
        fn counter_reset(&self, reason: &str) {
            self.0.lock().unwrap().push(format!("reset {reason}"));
        }
    }

    fn record(event: AuditEvent) -> AuditRecord {
        AuditRecord {
            ts: 0,
            client_ts: None,
            seq: 1,
            task_id: "t".into(),
            agent_id: None,
            event,
        }
    }

    #[test]
    fn each_record_is_counted_once_in_order() {
        let seen = Seen::default();
        let records = [
            record(AuditEvent::LoopDetected {
                kind: LoopKind::Cycle,
                loop_count: 1,
                counted: true,
                reason: "r".into(),
                rule: Some("cycle.period".into()),
            }),
            record(AuditEvent::PivotIssued {
                pivot_count: 1,
                entropy_count_at_trigger: 2,
            }),
            record(AuditEvent::GateTriggered {
                loop_count: 3,
                reason: "r".into(),
            }),
            record(AuditEvent::CounterReset {
                previous_count: 3,
                reason: "success".into(),
                by: "outcome event".into(),
                note: None,
            }),
            record(AuditEvent::BudgetExhausted { events: 9 }),
        ];
        emit(&records, Some(&seen));
        emit(&records, None);
        assert_eq!(
            *seen.0.lock().unwrap(),
            [
                "loop cycle true cycle.period",
                "pivot",
                "gate",
                "reset success"
            ]
        );
    }

    #[test]
    fn records_keep_their_wire_names() {
        let r = record(AuditEvent::CounterReset {
            previous_count: 2,
            reason: "success".into(),
            by: "api".into(),
            note: None,
        });
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["event"], "loop_counter_reset");
        assert_eq!(r.event.name(), "loop_counter_reset");
        assert!(v.get("agent_id").is_none() && v.get("note").is_none());
    }
}
