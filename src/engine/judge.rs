//! The judge stage. An event is *ambiguous* when its best match is in the grey band (just below
//! the threshold) and a match would have made a loop, or when it is one failure too many in a
//! row with no objective progress signal (the orchestrator's "is this getting closer to the
//! goal?"). Only then is the judge ([`crate::judge`]) asked, under its budget; without one, or
//! without an answer, `judge.fallback` decides. External failures are never ambiguous.

use super::{Engine, Pass};
use crate::config::{Config, Fallback, JudgeConfig};
use crate::detect::{self, Ctx, Finding, Link};
use crate::judge::{Candidate, Evidence, EvidenceEvent, JudgeStatus, JudgeVerdict};
use crate::signature::head_tail;
use crate::state::{Channel, Entry, EntryBody, TaskState};
use crate::verdict::{JudgeReport, LoopKind};
use std::time::Instant;

/// A question for the judge and the near miss it is about, if any.
pub(crate) struct Question {
    pub text: String,
    pub candidate: Option<Link>,
    /// What the case counts as when the judge (or the fallback) says it is a loop, and the
    /// earlier event it repeats.
    pub kind: LoopKind,
    pub matched: Option<u64>,
}

impl Engine {
    pub(super) async fn judge(&self, state: &mut TaskState, pass: &mut Pass) {
        if pass.finding.is_some() || pass.cleared.is_some() {
            return;
        }
        let cfg = &*self.cfg;
        let Some(question) =
            pass.timed_detect(|pass| ambiguous(cfg, &pass.ctx(cfg, state), pass.external))
        else {
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
            Err(reason) => pass.cleared = Some(reason),
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

/// The candidate ended in the same error lines as this result (numbers and paths masked), or
/// either has no error lines to compare (a "nothing found").
fn same_dead_end(ctx: &Ctx<'_>, r: &crate::state::ResultSig, candidate: u64) -> bool {
    let earlier = match ctx.state.entry(candidate).map(|e| &e.body) {
        Some(EntryBody::ToolCall {
            result: Some(c), ..
        }) => c.outcome.as_ref(),
        _ => None,
    };
    match (&r.outcome, earlier) {
        (Some(a), Some(b)) => a.exact == b.exact,
        _ => true,
    }
}

/// A question about a dead end reached again, `earlier` its earlier events newest first: asked
/// only when no progress signal came since the first of them (with none, as when a setting asks
/// about the first timeout, it is asked).
fn dead_end_question(ctx: &Ctx<'_>, earlier: &[u64], text: String) -> Option<Question> {
    let oldest = earlier.last().copied().unwrap_or(u64::MAX);
    ctx.state
        .progress_since(oldest)
        .is_none()
        .then(|| Question {
            text,
            candidate: None,
            kind: LoopKind::SameError,
            matched: earlier.first().copied(),
        })
}

/// Seqs for a question's text: "3, 5, 8".
fn seq_list<'a>(seqs: impl Iterator<Item = &'a u64>) -> String {
    seqs.map(u64::to_string).collect::<Vec<_>>().join(", ")
}

/// Is this a case the cheap signals cannot decide? Returns the question and the near miss.
pub(crate) fn ambiguous(cfg: &Config, ctx: &Ctx<'_>, external: bool) -> Option<Question> {
    // External failures are not the agent's doing: nothing to judge.
    if external {
        return None;
    }
    if let Some(l) = detect::grey_candidate(ctx) {
        // Only worth asking when a match would have made a loop: enough earlier events alike.
        let need = match ctx.entry.body.channel() {
            Channel::Failure => cfg.detect.repeats.failure,
            Channel::Collaboration => cfg.detect.repeats.collaboration,
            Channel::Response => cfg.detect.repeats.response,
            Channel::ToolCall => cfg.detect.repeats.tool_call,
            Channel::Other => usize::MAX,
        };
        let alike = 1 + ctx.same_links().count();
        // A tool call that brought something back (a file, matches, a passing run) is not
        // worth a question however close its wording: only dead ends are (measured: asking
        // about every grey-band call flagged 11 of the 178 healthy runs with a judge that
        // always says "no progress").
        // Nor is a dead end other than the candidate's: an error whose lines changed (the next
        // missing module after an install) has moved on, whatever the cosine of the whole text
        // (measured: the question flagged a healthy run installing module after module).
        let dead_end = match &ctx.entry.body {
            EntryBody::ToolCall {
                result: Some(r), ..
            } => (r.negative || r.outcome.is_some()) && same_dead_end(ctx, r, l.seq),
            EntryBody::ToolCall { result: None, .. } => false,
            _ => true,
        };
        if dead_end && alike >= need && ctx.state.progress_since(l.seq).is_none() {
            return Some(Question {
                text: format!(
                    "is this the same as seq {} (similarity {} is in the grey band below the threshold)?",
                    l.seq,
                    detect::fmt_cos(l.similarity())
                ),
                candidate: Some(*l),
                kind: LoopKind::SemanticRepeat,
                matched: Some(l.seq),
            });
        }
    }
    // Different attempts, the same dead end: ruling options out, or stuck? A judge reading
    // the attempts can tell; the rules cannot.
    if let Some(earlier) = detect::dead_end::different_attempts(ctx) {
        let outcome = match &ctx.entry.body {
            EntryBody::ToolCall {
                result: Some(r), ..
            } => r
                .outcome
                .as_ref()
                .map(|o| o.text.clone())
                .unwrap_or_default(),
            _ => String::new(),
        };
        let text = format!(
            "{} different attempts in a row (this one and seqs {}) ended in the same error ({outcome}): is the agent ruling options out, or stuck?",
            earlier.len() + 1,
            seq_list(earlier.iter())
        );
        if let Some(q) = dead_end_question(ctx, &earlier, text) {
            return Some(q);
        }
    }
    if let Some(earlier) = detect::dead_end::different_changes(ctx) {
        let text = format!(
            "the same step ended in the same error again (seqs {}, now), with different changes between: are the changes going anywhere?",
            seq_list(earlier.iter().rev())
        );
        if let Some(q) = dead_end_question(ctx, &earlier, text) {
            return Some(q);
        }
    }
    if let Some((p, earlier)) = detect::cycle::redone(
        ctx,
        cfg.detect.cycles.max_period,
        cfg.judge.redone_result_overlap,
    ) {
        if ctx.state.progress_since(earlier[0]).is_none() {
            let seqs = seq_list(earlier.iter());
            let (what, kind) = if p == 1 {
                (
                    format!("the same call as seq {seqs}"),
                    LoopKind::SemanticRepeat,
                )
            } else {
                (
                    format!("the same {p} calls as seqs {seqs}"),
                    LoopKind::Cycle,
                )
            };
            return Some(Question {
                text: format!(
                    "{what} again, and the output changed only a little: a poll moving forward, or the same step redone for nothing?"
                ),
                candidate: None,
                kind,
                matched: earlier.first().copied(),
            });
        }
    }
    if let Some(earlier) = detect::dead_end::timeouts(ctx, cfg.judge.ask_after_timeouts) {
        let text = format!(
            "{} calls timed out within the last {} actions (seqs {}, now): is the agent relaunching something that blocks, or narrowing the cause down?",
            earlier.len() + 1,
            cfg.detect.dead_ends.span_window,
            seq_list(earlier.iter().rev())
        );
        if let Some(q) = dead_end_question(ctx, &earlier, text) {
            return Some(q);
        }
    }
    let n = cfg.judge.ask_after_failures;
    if n > 0
        && matches!(ctx.entry.body, EntryBody::Failure { .. })
        && ctx.state.failures_since_progress + 1 >= n
        && ctx.metrics.is_none()
        && ctx.state.metrics.is_empty()
    {
        return Some(Question {
            text: format!(
                "{} failures in a row with no objective progress signal: is the agent moving toward the goal?",
                ctx.state.failures_since_progress + 1
            ),
            candidate: None,
            kind: LoopKind::Regression,
            matched: None,
        });
    }
    None
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
