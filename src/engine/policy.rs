//! The policy stage: what to do about a loop — the graduated response, as a [`Decision`]:
//!
//! 1. a `budget` loop terminates (nothing resets the budget);
//! 2. external failures (network, auth, outages) never move the counter; they get the
//!    `policy.external` ladder: retry with backoff, then escalate;
//! 3. a counted loop moves the loop counter and the entropy count (loops since the last pivot);
//! 4. at `gate_at` counted loops the task is paused for a human (the gate);
//! 5. a kind with its own ladder (`policy.kinds`) takes the action for its n-th detection;
//! 6. after `pivot_at` loops since the last pivot (`repivot_at` once one was issued) the pivot
//!    directive is issued; past `max_pivots` the task is paused;
//! 7. otherwise `policy.ladder` by loop count.
//!
//! Before the pipeline, [`Engine::short_circuit`] answers the events that need no detection: outcomes
//! (success and human intervention reset the counter; an agent change does not) and events of a
//! paused or terminated task.
//!
//! Every change of state is also an audit event, committed together with the task state.

use super::{Engine, Pass};
use crate::audit::AuditEvent;
use crate::config::{ActionSpec, Config, PolicyConfig};
use crate::event::{Envelope, Event, OutcomeKind};
use crate::state::TaskState;
use crate::verdict::{Action, ActionType, LoopKind, Matched, SimilarLoop, TaskStatus};

/// What the engine decided about one event. It becomes the verdict in the commit stage, once
/// the task's counters are final.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub kind: LoopKind,
    /// Whether the event moved the loop counter.
    pub counted: bool,
    pub action: Action,
    pub reason: String,
    pub matched: Option<Matched>,
    pub similarity: Option<f32>,
    /// The rule behind it: the one that found the loop or, when it is not one, the one whose
    /// finding progress vetoed or whose question the judge answered "not a loop".
    pub rule: Option<&'static str>,
    /// For a loop: the closest loops of other tasks (filled in by recall).
    pub similar_loops: Vec<SimilarLoop>,
}

impl Decision {
    /// Not a loop: carry on.
    pub fn proceed(reason: impl Into<String>) -> Decision {
        Decision::act(Action::proceed(), reason)
    }

    /// Not a loop, but an action all the same (a paused or terminated task).
    pub fn act(action: Action, reason: impl Into<String>) -> Decision {
        Decision {
            kind: LoopKind::None,
            counted: false,
            action,
            reason: reason.into(),
            matched: None,
            similarity: None,
            rule: None,
            similar_loops: Vec::new(),
        }
    }
}

/// Decide the event's action from its finding (or why it is not a loop), updating the task's
/// counters and recording audit events in the pass.
pub(super) fn decide(cfg: &Config, state: &mut TaskState, pass: &mut Pass) -> Decision {
    let finding = pass.finding.as_ref();
    state.record_detection(
        &pass.entry,
        finding.map(|f| (f.kind, f.period, f.counts)),
        pass.metrics,
        cfg.detect.transitions.max_period * cfg.detect.transitions.repetitions + 1,
    );
    let Some(f) = finding else {
        let reason = pass.cleared.take().unwrap_or_else(|| {
            if pass.entry.novel {
                "new work".to_string()
            } else {
                "no loop".to_string()
            }
        });
        let mut d = Decision::proceed(reason);
        d.rule = pass.cleared_rule;
        // Not a loop: name the closest earlier event, the near miss a reader looks for.
        if let Some(l) = crate::detect::nearest(state, &pass.entry, &pass.links) {
            d.matched = state.entry(l.seq).map(|e| Matched {
                seq: l.seq,
                text: e.body.display_text(),
                similarity: l.similarity(),
            });
            d.similarity = l.similarity();
        }
        return d;
    };
    let r = respond(
        &cfg.policy,
        state,
        f.kind,
        f.counts,
        pass.external,
        &f.reason,
    );
    let rule = Some(f.rule).filter(|r| !r.is_empty());
    pass.audit.extend(r.audit.into_iter().map(|mut a| {
        if let AuditEvent::LoopDetected { rule: slot, .. } = &mut a {
            *slot = rule.map(str::to_string);
        }
        a
    }));
    let matched = f.matched.and_then(|s| {
        state.entry(s).map(|e| Matched {
            seq: s,
            text: e.body.display_text(),
            similarity: f.similarity,
        })
    });
    let reason = if pass.external {
        format!("{} (external failure: not counted)", f.reason)
    } else {
        f.reason.clone()
    };
    Decision {
        kind: f.kind,
        counted: r.counted,
        action: r.action,
        reason,
        matched,
        similarity: f.similarity,
        rule,
        similar_loops: Vec::new(),
    }
}

impl Engine {
    /// Events answered before detection: an outcome, or an event of a task that is paused or
    /// terminated. The budget is checked first: nothing resets it, not even a pause.
    pub(super) async fn short_circuit(
        &self,
        state: &mut TaskState,
        env: &Envelope,
        pass: &mut Pass,
    ) -> Option<Decision> {
        let cfg = &*self.cfg;
        if let Event::Outcome(o) = &env.event {
            let mut reason = format!("outcome: {}", o.result.as_str());
            if o.result.resets_counter() {
                pass.audit.push(AuditEvent::CounterReset {
                    previous_count: state.loop_count,
                    reason: o.result.as_str().to_string(),
                    by: "outcome event".into(),
                    note: o.note.clone(),
                });
                self.resolve_loops(&state.root, o.result.as_str(), o.note.clone(), pass.ts)
                    .await;
                state.reset();
                reason.push_str("; loop counter reset");
            } else if o.result == OutcomeKind::AgentChanged {
                reason.push_str("; loop counter kept (agent changes never reset it)");
            }
            return Some(Decision::proceed(reason));
        }
        let budget_hit = cfg.detect.enabled.budget
            && cfg.detect.budget.max_events > 0
            && state.events_total > cfg.detect.budget.max_events;
        if budget_hit || state.status == TaskStatus::Active {
            return None;
        }
        let (kind, why) = match state.status {
            TaskStatus::Paused => (
                ActionType::Pause,
                "task is paused for human intervention; reset it to continue",
            ),
            _ => (ActionType::Terminate, "task was terminated"),
        };
        let action = Action {
            kind,
            target: None,
            message: Some(why.to_string()),
        };
        Some(Decision::act(action, why))
    }
}

/// The pivot directive. It carries the pivot count and deliberately quotes nothing
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

/// The ladder's answer for one loop finding.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
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
        LoopKind::ContentLoop => {
            "Your response repeats itself. Stop generating, discard the repeated part and \
             continue with one concrete next step."
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

/// One application of the ladders: what it needs to word actions and record audit events.
struct Ruling<'a> {
    cfg: &'a PolicyConfig,
    kind: LoopKind,
    reason: &'a str,
    audit: Vec<AuditEvent>,
}

impl Ruling<'_> {
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
        // The pivot record, the pivot count and the entropy reset happen together;
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

/// The action for a loop finding, with the counters updated.
///
/// `counts` is false for events that continue a periodic loop already counted this period;
/// `external` for failures outside the agent's control.
pub fn respond(
    cfg: &PolicyConfig,
    state: &mut TaskState,
    kind: LoopKind,
    counts: bool,
    external: bool,
    reason: &str,
) -> Response {
    let mut ctx = Ruling {
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
        return Response {
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
            rule: None,
            kind,
            loop_count: state.loop_count,
            counted: false,
            reason: reason.to_string(),
        });
        return Response {
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
        return Response {
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
        rule: None,
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
    Response {
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
                respond(&cfg, &mut s, LoopKind::ExactRepeat, true, false, "r")
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
        respond(&cfg, &mut s, LoopKind::ExactRepeat, true, false, "r");
        let d = respond(&cfg, &mut s, LoopKind::ExactRepeat, true, false, "r");
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
                let d = respond(&cfg, &mut s, LoopKind::ExactRepeat, true, true, "network");
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
                let d = respond(&cfg, &mut s, LoopKind::TransitionCycle, true, false, "r");
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
        let d = respond(&cfg, &mut s, LoopKind::Budget, true, false, "r");
        assert_eq!(d.action.kind, ActionType::Terminate);
        assert_eq!(s.status, TaskStatus::Terminated);
        assert!(!d.counted);
    }
}
