//! Policy: what to do about a loop. The graduated response of the seeds, reconciled:
//!
//! 1. a `budget` loop terminates (nothing resets the budget);
//! 2. external failures never move the counter; they get the `policy.external` ladder;
//! 3. a counted loop moves the loop counter (seed 000) and the entropy count (seed 003);
//! 4. at `gate_at` counted loops the task is paused for a human (seed 000's gate);
//! 5. a kind with its own ladder (seed 004's table) takes the action for its n-th detection;
//! 6. after `pivot_at` loops since the last pivot (`repivot_at` once one was issued) the pivot
//!    directive is issued; past `max_pivots` the task is paused (seed 003's MAX_PIVOTS);
//! 7. otherwise `policy.ladder` by loop count (seed 001's Warn → Warn → Terminate is a ladder).
//!
//! Every change of state is also an [`AuditRecord`], committed together with the task state.

use crate::config::{ActionSpec, PolicyConfig};
use crate::state::TaskState;
use crate::verdict::{Action, ActionType, LoopKind, TaskStatus};
use serde::{Deserialize, Serialize};

/// The pivot directive (seed 003). It carries the pivot count and deliberately quotes nothing
/// from earlier attempts: repeating the failed approach back to the agent would reinforce it.
pub fn pivot_directive(pivot_count: u32) -> String {
    format!(
        "SYSTEM OVERRIDE — STRATEGY PIVOT REQUIRED:\n\
         You have failed to complete this task {pivot_count} time(s).\n\
         Ignore all previous implementation attempts.\n\
         Reason from first principles: re-read the task requirements, identify the core \
         constraint, and derive a completely new approach without reference to what you have \
         tried before.\n\
         Your new plan must differ structurally from all prior attempts."
    )
}

/// One entry of a task's audit trail (seed 003's `strategy_pivots` table, and more).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Unix seconds, by the clock that decides ages (the server's, in the service).
    pub ts: i64,
    /// The event's own `ts`, when it carried one: recorded, never used to decide anything.
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

/// The policy's answer for one loop finding.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub action: Action,
    pub counted: bool,
    pub audit: Vec<AuditEvent>,
}

fn pick(ladder: &[ActionSpec], n: u32) -> ActionSpec {
    let i = (n.max(1) as usize - 1).min(ladder.len() - 1);
    ladder[i]
}

fn hint(kind: LoopKind) -> &'static str {
    match kind {
        LoopKind::SimilarResponse => {
            "Your recent responses say the same thing. Do not restate the plan; take a concrete, \
             different next step or explain what is blocking you."
        }
        LoopKind::SameError | LoopKind::ResultRepeat => {
            "Varying the call has not changed the outcome. Find out why it fails before trying \
             another variation."
        }
        LoopKind::Cycle | LoopKind::TransitionCycle => {
            "You are alternating between the same steps. Stop and decide what new information \
             would break the cycle."
        }
        LoopKind::Regression => {
            "Results are getting worse with each attempt. Roll back to the last better state \
             before trying again."
        }
        _ => "You are repeating an earlier attempt. Try a different approach.",
    }
}

struct Ctx<'a> {
    cfg: &'a PolicyConfig,
    kind: LoopKind,
    reason: &'a str,
    audit: Vec<AuditEvent>,
}

impl Ctx<'_> {
    fn action(&mut self, state: &mut TaskState, spec: ActionSpec) -> Action {
        match spec.kind {
            ActionType::Pivot => self.pivot_or_pause(state),
            ActionType::Pause => self.pause(state, self.reason.to_string()),
            ActionType::Terminate => {
                state.status = TaskStatus::Terminated;
                Action {
                    kind: ActionType::Terminate,
                    target: None,
                    message: Some(format!("Terminate the task: {}.", self.reason)),
                }
            }
            ActionType::Warn => Action {
                kind: ActionType::Warn,
                target: None,
                message: Some(format!(
                    "Loop warning ({}{}): {}. {}",
                    state.loop_count,
                    if self.cfg.gate_at > 0 {
                        format!("/{}", self.cfg.gate_at)
                    } else {
                        String::new()
                    },
                    self.reason,
                    hint(self.kind)
                )),
            },
            ActionType::RetryWithHint => Action {
                kind: ActionType::RetryWithHint,
                target: None,
                message: Some(hint(self.kind).to_string()),
            },
            ActionType::Escalate => {
                let target = spec
                    .target
                    .unwrap_or(crate::verdict::EscalationTarget::User);
                Action {
                    kind: ActionType::Escalate,
                    target: Some(target),
                    message: Some(format!(
                        "Escalate to the {}: {}.",
                        target.as_str(),
                        self.reason
                    )),
                }
            }
            ActionType::Continue => Action::proceed(),
        }
    }

    fn pause(&mut self, state: &mut TaskState, why: String) -> Action {
        state.status = TaskStatus::Paused;
        self.audit.push(AuditEvent::GateTriggered {
            loop_count: state.loop_count,
            reason: why.clone(),
        });
        Action {
            kind: ActionType::Pause,
            target: None,
            message: Some(format!(
                "Loop detected after {} attempts: paused for human intervention ({why}).",
                state.loop_count
            )),
        }
    }

    fn pivot_or_pause(&mut self, state: &mut TaskState) -> Action {
        if state.pivot_count >= self.cfg.max_pivots {
            return self.pause(
                state,
                format!(
                    "MAX_PIVOTS_EXCEEDED: {} pivot(s) issued and the loop goes on",
                    state.pivot_count
                ),
            );
        }
        // Seed 003: the pivot record, the pivot count and the entropy reset happen together;
        // the caller commits state and audit in one write.
        let entropy = state.entropy;
        state.pivot_count += 1;
        state.entropy = 0;
        self.audit.push(AuditEvent::PivotIssued {
            pivot_count: state.pivot_count,
            entropy_count_at_trigger: entropy,
        });
        Action {
            kind: ActionType::Pivot,
            target: None,
            message: Some(pivot_directive(state.pivot_count)),
        }
    }
}

/// Decide the action for a loop finding and update the counters.
///
/// `counts` is false for events that continue a periodic loop already counted this period;
/// `external` for failures outside the agent's control.
pub fn decide(
    cfg: &PolicyConfig,
    state: &mut TaskState,
    kind: LoopKind,
    counts: bool,
    external: bool,
    reason: &str,
) -> Decision {
    let mut ctx = Ctx {
        cfg,
        kind,
        reason,
        audit: Vec::new(),
    };
    if kind == LoopKind::Budget {
        let spec = cfg
            .kind_ladder(kind)
            .map(|l| pick(l, 1))
            .unwrap_or(ActionSpec::new(ActionType::Terminate));
        // Recorded (and logged) once, when the budget runs out, not for every event after it.
        if state.status != TaskStatus::Terminated {
            ctx.audit.push(AuditEvent::BudgetExhausted {
                events: state.events_total,
            });
        }
        let action = ctx.action(state, spec);
        return Decision {
            action,
            counted: false,
            audit: ctx.audit,
        };
    }
    if external {
        state.external_hits += 1;
        let spec = pick(&cfg.external, state.external_hits);
        let mut action = ctx.action(state, spec);
        if action.kind == ActionType::RetryWithHint {
            action.message = Some(format!(
                "The failure looks external ({reason}); it does not count against the agent. \
                 Retry with backoff instead of changing the approach."
            ));
        }
        ctx.audit.push(AuditEvent::LoopDetected {
            kind,
            loop_count: state.loop_count,
            counted: false,
            reason: reason.to_string(),
        });
        return Decision {
            action,
            counted: false,
            audit: ctx.audit,
        };
    }
    if !counts {
        let action = Action {
            kind: ActionType::Warn,
            target: None,
            message: Some(format!(
                "The loop goes on ({reason}); it is counted once per repetition of the pattern."
            )),
        };
        return Decision {
            action,
            counted: false,
            audit: ctx.audit,
        };
    }

    state.loop_count += 1;
    state.entropy += 1;
    let hits = state.kind_hit(kind);
    ctx.audit.push(AuditEvent::LoopDetected {
        kind,
        loop_count: state.loop_count,
        counted: true,
        reason: reason.to_string(),
    });

    let action = if cfg.gate_at > 0 && state.loop_count >= cfg.gate_at {
        ctx.pause(state, reason.to_string())
    } else if let Some(ladder) = cfg.kind_ladder(kind) {
        ctx.action(state, pick(ladder, hits))
    } else if cfg.pivot_at > 0
        && state.entropy
            >= if state.pivot_count == 0 {
                cfg.pivot_at
            } else {
                cfg.repivot_at.max(1)
            }
    {
        ctx.pivot_or_pause(state)
    } else {
        ctx.action(state, pick(&cfg.ladder, state.loop_count))
    };
    Decision {
        action,
        counted: true,
        audit: ctx.audit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn state() -> TaskState {
        TaskState::new("t", 0)
    }

    #[test]
    fn default_ladder_is_warn_pivot_pause() {
        let cfg = Config::default().policy;
        let mut s = state();
        let a: Vec<_> = (0..3)
            .map(|_| {
                decide(&cfg, &mut s, LoopKind::ExactRepeat, true, false, "r")
                    .action
                    .kind
            })
            .collect();
        assert_eq!(a, [ActionType::Warn, ActionType::Pivot, ActionType::Pause]);
        assert_eq!(s.status, TaskStatus::Paused);
        assert_eq!(s.pivot_count, 1);
    }

    #[test]
    fn pivot_is_atomic_with_count_and_entropy_reset() {
        let cfg = Config::default().policy;
        let mut s = state();
        decide(&cfg, &mut s, LoopKind::ExactRepeat, true, false, "r");
        let d = decide(&cfg, &mut s, LoopKind::ExactRepeat, true, false, "r");
        assert_eq!(d.action.kind, ActionType::Pivot);
        assert_eq!(s.entropy, 0);
        assert!(d.audit.contains(&AuditEvent::PivotIssued {
            pivot_count: 1,
            entropy_count_at_trigger: 2
        }));
    }

    #[test]
    fn pivot_directive_has_the_required_phrases_and_count() {
        let d = pivot_directive(2);
        assert!(d
            .to_lowercase()
            .contains("ignore all previous implementation attempts"));
        assert!(d.to_lowercase().contains("reason from first principles"));
        assert!(d.contains("2 time(s)"));
    }

    #[test]
    fn external_failures_never_count() {
        let cfg = Config::default().policy;
        let mut s = state();
        let kinds: Vec<_> = (0..4)
            .map(|_| {
                let d = decide(&cfg, &mut s, LoopKind::ExactRepeat, true, true, "network");
                assert!(!d.counted);
                d.action.kind
            })
            .collect();
        assert_eq!(s.loop_count, 0);
        assert_eq!(
            kinds,
            [
                ActionType::RetryWithHint,
                ActionType::RetryWithHint,
                ActionType::Escalate,
                ActionType::Escalate
            ]
        );
    }

    #[test]
    fn per_kind_ladder_then_gate() {
        let cfg = Config::default().policy;
        let mut s = state();
        let a: Vec<_> = (0..3)
            .map(|_| {
                let d = decide(&cfg, &mut s, LoopKind::TransitionCycle, true, false, "r");
                (d.action.kind, d.action.target)
            })
            .collect();
        use crate::verdict::EscalationTarget::*;
        assert_eq!(
            a,
            [
                (ActionType::Escalate, Some(Planner)),
                (ActionType::Escalate, Some(User)),
                (ActionType::Pause, None)
            ]
        );
    }

    #[test]
    fn budget_terminates() {
        let cfg = Config::default().policy;
        let mut s = state();
        let d = decide(&cfg, &mut s, LoopKind::Budget, true, false, "r");
        assert_eq!(d.action.kind, ActionType::Terminate);
        assert_eq!(s.status, TaskStatus::Terminated);
        assert!(!d.counted);
    }
}
