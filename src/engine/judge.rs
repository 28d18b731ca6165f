//! The judge stage. An event is *ambiguous* when a question of the rule table fired for it
//! ([`crate::detect::questions`]: a grey-band match, a dead end reached by different attempts,
//! calls redone, ...) and no loop rule did. Only then is the judge ([`crate::judge`]) asked,
//! under its budget; without one, or without an answer, `judge.fallback` decides. External
//! failures are never ambiguous.

use super::{Engine, Pass};
use crate::config::{Fallback, JudgeConfig};
use crate::detect::questions::Question;
use crate::detect::Finding;
use crate::judge::{Candidate, Evidence, EvidenceEvent, JudgeStatus, JudgeVerdict};
use crate::signature::head_tail;
use crate::state::{Entry, TaskState};
use crate::verdict::{JudgeReport, LoopKind};
use std::time::Instant;

impl Engine {
    pub(super) async fn judge(&self, state: &mut TaskState, pass: &mut Pass) {
        if pass.finding.is_some() || pass.cleared.is_some() {
            return;
        }
        let Some(question) = pass.question.take() else {
            return;
        };
        let started = Instant::now();
        let (outcome, report) = self.consult(state, pass, &question).await;
        pass.asked_judge = !report.fallback
            || !matches!(
                report.status,
                JudgeStatus::NotConfigured | JudgeStatus::BudgetExhausted
            );
        pass.timings.judge_secs = started.elapsed().as_secs_f64();
        pass.judge = Some(report);
        match outcome {
            Ok(f) => pass.finding = Some(f),
            Err(reason) => {
                pass.cleared = Some(reason);
                pass.cleared_rule = Some(question.rule);
            }
        }
        if pass.asked_judge {
            state.judge_calls += 1;
        }
    }

    /// Ask the judge (or apply the fallback). `Ok(finding)` when the case counts as a loop,
    /// `Err(reason)` when it does not.
    async fn consult(
        &self,
        state: &TaskState,
        pass: &Pass,
        question: &Question,
    ) -> (Result<Finding, String>, JudgeReport) {
        let fallback = |status: JudgeStatus, why: String| {
            let report = JudgeReport {
                status,
                verdict: None,
                confidence: None,
                reason: Some(why),
                fallback: true,
            };
            let outcome = match self.cfg.judge.fallback {
                Fallback::NoLoop => Err(format!(
                    "ambiguous ({}); fallback: not a loop",
                    question.text
                )),
                Fallback::Loop => Ok(judged_finding(
                    question,
                    JudgeVerdict::NoProgress,
                    "fallback",
                )),
            };
            (outcome, report)
        };
        let Some(judge) = &self.judge else {
            return fallback(JudgeStatus::NotConfigured, "no judge configured".into());
        };
        if state.judge_calls >= self.cfg.judge.max_calls_per_task {
            return fallback(
                JudgeStatus::BudgetExhausted,
                format!(
                    "{} judge calls already made for this task (judge.max_calls_per_task)",
                    state.judge_calls
                ),
            );
        }
        let evidence = evidence(state, pass, question, &self.cfg.judge);
        let answer = judge.evaluate(&evidence).await;
        let Some(verdict) = answer.verdict.filter(|_| answer.status == JudgeStatus::Ok) else {
            return fallback(
                answer.status,
                answer.reason.unwrap_or_else(|| "undecided".into()),
            );
        };
        let report = JudgeReport {
            status: JudgeStatus::Ok,
            verdict: Some(verdict),
            confidence: answer.confidence,
            reason: answer.reason.clone(),
            fallback: false,
        };
        let why = answer.reason.unwrap_or_default();
        let outcome = match verdict {
            JudgeVerdict::Progress => Err(format!("not a loop: judge says progress ({why})")),
            JudgeVerdict::External => Err(format!(
                "not a loop: judge says the cause is external ({why}); not counted"
            )),
            v => Ok(judged_finding(question, v, &why)),
        };
        (outcome, report)
    }
}

fn judged_finding(question: &Question, verdict: JudgeVerdict, why: &str) -> Finding {
    let kind = match verdict {
        JudgeVerdict::Regressive => LoopKind::Regression,
        _ => question.kind,
    };
    let mut f = Finding::new(
        kind,
        format!(
            "judge: {} ({why}); asked: {}",
            verdict.as_str(),
            question.text
        ),
    );
    f.matched = question.matched;
    f.similarity = question.candidate.and_then(|l| l.similarity());
    f.vetoable = false;
    f.rule = question.rule;
    f
}

/// What the judge is shown: the goal, the recent events, the event, the near miss and metrics,
/// each text trimmed to `judge.max_evidence_chars`.
fn evidence(state: &TaskState, pass: &Pass, question: &Question, cfg: &JudgeConfig) -> Evidence {
    let trim = |s: String| head_tail(&s, cfg.max_evidence_chars.max(16));
    let as_evidence = |e: &Entry| EvidenceEvent {
        seq: e.seq,
        kind: e.body.type_name().to_string(),
        text: trim(e.body.display_text()),
    };
    Evidence {
        task_id: state.root.clone(),
        goal: state.goal.as_ref().map(|g| trim(g.clone())),
        question: question.text.clone(),
        recent: state
            .window
            .iter()
            .rev()
            .take(cfg.max_evidence_events)
            .rev()
            .map(as_evidence)
            .collect(),
        current: as_evidence(&pass.entry),
        metrics: pass
            .metrics
            .or_else(|| state.metrics.back().copied())
            .map(|o| o.metrics),
        candidate: question.candidate.map(|l| Candidate {
            seq: l.seq,
            text: state
                .entry(l.seq)
                .map(|e| trim(e.body.display_text()))
                .unwrap_or_default(),
            similarity: l.similarity(),
        }),
    }
}
