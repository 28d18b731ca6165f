//! What a replayed run comes to: the verdict that fired, the near miss, the outcome against the
//! labels, and the figures of a set of runs.

use super::input::{ControlSet, LabelledRun};
use super::ON_TIME_SLACK;
use crate::calibrate::metrics::{Confusion, Rates};
use crate::calibrate::runs::DelayStats;
use crate::score::RunScore;
use crate::signature::head_tail;
use crate::verdict::{LoopKind, Verdict};
use serde::Serialize;
use std::collections::BTreeMap;

/// Characters of an event's text kept in the report.
const TEXT_CHARS: usize = 240;

/// A verdict as the report names it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerdictAt {
    /// 0-based index into the run's `events`.
    pub index: usize,
    pub kind: LoopKind,
    /// The detection rule behind the verdict.
    pub rule: Option<String>,
    pub reason: String,
    pub similarity: Option<f32>,
    /// The earlier event it was matched with: its index and text (shortened).
    pub matched_index: Option<usize>,
    pub matched_text: Option<String>,
    /// The judge's verdict, or the fallback's status, when the judge was involved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judge: Option<String>,
}

/// How strong a piece of non-loop evidence is, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NearMissKind {
    /// A grey-band (or better) similarity with an earlier event; not the same event.
    Near,
    /// The same event as an earlier one (no detector counted it).
    Matched,
    /// Ambiguous: the judge was (or would have been) asked, and the answer was "not a loop".
    Ambiguous,
    /// A detector fired, then a progress mark or the judge vetoed it.
    Vetoed,
}

/// The strongest non-loop evidence of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NearMiss {
    pub strength: NearMissKind,
    #[serde(flatten)]
    pub verdict: VerdictAt,
}

/// What replaying one run gave, kept small: a sweep replays every run at every point.
#[derive(Debug, Clone, Serialize)]
pub struct Replayed {
    pub events: usize,
    pub first_loop: Option<VerdictAt>,
    /// The strongest non-loop evidence up to the on-time deadline (labelled loop runs only).
    pub near_miss: Option<NearMiss>,
    pub ambiguous: usize,
    pub sent_to_judge: usize,
    /// Every rule some verdict of the run names (a loop found, a finding vetoed, a question
    /// answered): switching any other rule off cannot change the run.
    #[serde(skip)]
    pub rules: Vec<String>,
}

fn index_of(verdicts: &[Verdict], before: usize, seq: u64) -> Option<usize> {
    verdicts[..before.min(verdicts.len())]
        .iter()
        .rposition(|v| v.seq == seq)
}

fn verdict_at(verdicts: &[Verdict], i: usize) -> VerdictAt {
    let v = &verdicts[i];
    VerdictAt {
        index: i,
        kind: v.kind,
        rule: v.rule.clone(),
        reason: v.reason.clone(),
        similarity: v.similarity,
        matched_index: v
            .matched
            .as_ref()
            .and_then(|m| index_of(verdicts, i, m.seq)),
        matched_text: v.matched.as_ref().map(|m| head_tail(&m.text, TEXT_CHARS)),
        judge: v.judge.as_ref().map(|j| match &j.verdict {
            Some(verdict) => contract_name(verdict),
            None => format!("{} (fallback)", contract_name(&j.status)),
        }),
    }
}

fn sent_to_judge(v: &Verdict) -> bool {
    v.judge.as_ref().is_some_and(|j| {
        !j.fallback
            || !matches!(
                contract_name(&j.status).as_str(),
                "none" | "budget_exhausted"
            )
    })
}

/// A judge status or verdict as the verdict contract names it (`"none"`, `"no_progress"`): the
/// report speaks the names users see in verdicts.
fn contract_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(e) => format!("({e})"),
    }
}

/// The strongest non-loop evidence among the first `upto + 1` verdicts: by [`NearMissKind`],
/// then similarity (a match decided on keys counts as 1), then closeness to `around`.
fn near_miss(verdicts: &[Verdict], upto: usize, around: usize) -> Option<NearMiss> {
    let strength = |v: &Verdict| -> Option<NearMissKind> {
        if v.is_loop {
            return None;
        }
        if v.reason.starts_with("not a loop") {
            Some(NearMissKind::Vetoed)
        } else if v.judge.is_some() {
            Some(NearMissKind::Ambiguous)
        } else if v.matched.is_some() && v.reason == "no loop" {
            Some(NearMissKind::Matched)
        } else if v.matched.is_some() {
            Some(NearMissKind::Near)
        } else {
            None
        }
    };
    let end = (upto + 1).min(verdicts.len());
    let best = verdicts[..end]
        .iter()
        .enumerate()
        .filter_map(|(i, v)| strength(v).map(|s| (i, s)))
        .max_by(|(i, s), (j, t)| {
            let sim = |k: usize| {
                let v = &verdicts[k];
                v.similarity
                    .unwrap_or(if v.matched.is_some() { 1.0 } else { 0.0 })
            };
            s.cmp(t)
                .then(sim(*i).total_cmp(&sim(*j)))
                .then(i.abs_diff(around).cmp(&j.abs_diff(around)).reverse())
        })?;
    Some(NearMiss {
        strength: best.1,
        verdict: verdict_at(verdicts, best.0),
    })
}

impl Replayed {
    /// `deadline`: for a labelled loop run, its `first_loop_converted` (the near miss is looked
    /// for up to the on-time limit).
    pub fn of(score: &RunScore, deadline: Option<usize>) -> Replayed {
        let vs = &score.verdicts;
        Replayed {
            events: vs.len(),
            first_loop: score.first_loop_index.map(|i| verdict_at(vs, i)),
            near_miss: deadline.and_then(|flc| near_miss(vs, flc + ON_TIME_SLACK, flc)),
            ambiguous: vs.iter().filter(|v| v.judge.is_some()).count(),
            sent_to_judge: vs.iter().filter(|v| sent_to_judge(v)).count(),
            rules: {
                let mut rules: Vec<String> = vs.iter().filter_map(|v| v.rule.clone()).collect();
                rules.sort();
                rules.dedup();
                rules
            },
        }
    }
}

/// What happened to one labelled run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A loop caught by `first_loop_converted + ON_TIME_SLACK` (early alarms included).
    OnTime,
    /// A loop caught after that.
    Late,
    /// A loop with no loop verdict.
    Missed,
    /// A `no_loop` run with a loop verdict.
    FalseAlarm,
    /// A `no_loop` run without one.
    Quiet,
}

impl Outcome {
    pub fn of(run: &LabelledRun, r: &Replayed) -> Outcome {
        match (run.label, &r.first_loop, run.first_loop_converted) {
            (true, None, _) => Outcome::Missed,
            (true, Some(f), Some(flc)) if f.index > flc + ON_TIME_SLACK => Outcome::Late,
            (true, Some(_), _) => Outcome::OnTime,
            (false, Some(_), _) => Outcome::FalseAlarm,
            (false, None, _) => Outcome::Quiet,
        }
    }
}

/// One labelled run in a report.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    pub id: String,
    pub line: usize,
    pub label: &'static str,
    pub kind: Option<String>,
    pub reworded: Option<bool>,
    pub confidence: Option<String>,
    /// The workflow phase (the envelope's `step`) of the event at `first_loop_converted` for a
    /// loop run, of the event flagged for a `no_loop` run: where the loop or the alarm is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fold: Option<usize>,
    /// The sweep point the run was measured at (cross-validation), when there is a sweep.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub point: Option<usize>,
    pub outcome: Outcome,
    /// Loop runs caught before `first_loop_converted`.
    pub early: bool,
    pub first_loop_converted: Option<usize>,
    pub first_loop_index: Option<usize>,
    /// `first_loop_index − first_loop_converted`, for caught loop runs.
    pub delay: Option<i64>,
    pub events: usize,
    /// The first loop verdict.
    pub fired: Option<VerdictAt>,
    /// Missed and late loops: the strongest non-loop evidence up to the on-time deadline.
    pub near_miss: Option<NearMiss>,
    pub ambiguous: usize,
    pub sent_to_judge: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl RunRecord {
    pub fn of(run: &LabelledRun, r: &Replayed, fold: Option<usize>, point: Option<usize>) -> Self {
        let outcome = Outcome::of(run, r);
        let first = r.first_loop.as_ref().map(|f| f.index);
        let delay = match (run.label, first, run.first_loop_converted) {
            (true, Some(f), Some(flc)) => Some(f as i64 - flc as i64),
            _ => None,
        };
        let at = if run.label {
            run.first_loop_converted
        } else {
            first
        };
        RunRecord {
            id: run.run.id.clone(),
            line: run.line,
            label: if run.label { "loop" } else { "no_loop" },
            kind: run.kind.clone(),
            reworded: run.reworded,
            confidence: run.confidence.clone(),
            step: at
                .and_then(|i| run.run.events.get(i))
                .and_then(|e| e.step.clone()),
            fold,
            point,
            outcome,
            early: delay.is_some_and(|d| d < 0),
            first_loop_converted: run.first_loop_converted,
            first_loop_index: first,
            delay,
            events: r.events,
            fired: r.first_loop.clone(),
            near_miss: if matches!(outcome, Outcome::Missed | Outcome::Late) {
                r.near_miss.clone()
            } else {
                None
            },
            ambiguous: r.ambiguous,
            sent_to_judge: r.sent_to_judge,
            why: run.why.clone(),
        }
    }
}

/// Events and what reached the judge, for one set of runs.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct JudgeLoad {
    pub events: usize,
    /// Events whose verdict carries a judge report: asked, or would have been with a judge.
    pub ambiguous: usize,
    pub sent_to_judge: usize,
    pub ambiguous_share: Option<f64>,
    pub sent_share: Option<f64>,
}

impl JudgeLoad {
    pub fn of<'a>(rs: impl Iterator<Item = &'a Replayed>) -> JudgeLoad {
        let mut l = JudgeLoad::default();
        for r in rs {
            l.events += r.events;
            l.ambiguous += r.ambiguous;
            l.sent_to_judge += r.sent_to_judge;
        }
        let share = |n: usize| (l.events > 0).then(|| n as f64 / l.events as f64);
        l.ambiguous_share = share(l.ambiguous);
        l.sent_share = share(l.sent_to_judge);
        l
    }
}

/// Loop runs of one kind (or one value of `reworded`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Breakdown {
    pub value: String,
    pub loops: usize,
    pub caught: usize,
    pub on_time: usize,
    pub early: usize,
    pub late: usize,
    pub missed: usize,
    /// `caught / loops`.
    pub recall: Option<f64>,
    pub on_time_rate: Option<f64>,
    /// `no_loop` runs flagged there (the breakdown by phase: where each alarm fired).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub false_alarms: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Runs flagged first by one verdict kind: how many were loops.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FiredKind {
    pub kind: String,
    pub flagged: usize,
    pub loops: usize,
    pub false_alarms: usize,
    /// `loops / flagged`.
    pub precision: Option<f64>,
}

/// The figures of a set of labelled runs.
#[derive(Debug, Clone, Serialize)]
pub struct Metrics {
    pub runs: usize,
    pub loops: usize,
    pub no_loops: usize,
    pub reworded_loops: usize,
    /// Run level: a caught loop is a true positive, a false alarm a false positive.
    #[serde(flatten)]
    pub rates: Rates,
    pub caught: usize,
    pub on_time: usize,
    pub reworded_on_time: usize,
    pub early: usize,
    /// Early alarms more than `ON_TIME_SLACK` events before `first_loop_converted`.
    pub early_by_more_than_slack: usize,
    pub late: usize,
    pub missed: usize,
    pub false_alarms: usize,
    pub delay: DelayStats,
    pub judge: JudgeLoad,
    pub by_kind: Vec<Breakdown>,
    pub by_reworded: Vec<Breakdown>,
    /// By workflow phase (the envelope's `step`), when the runs give one: loops by the phase of
    /// their labelled point, false alarms by the phase of the event flagged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_step: Vec<Breakdown>,
    pub fired_kinds: Vec<FiredKind>,
}

pub(crate) fn ratio(a: usize, b: usize) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

impl Metrics {
    /// The figures of `records` (with the replays they came from, for the judge load).
    pub fn of(records: &[&RunRecord], replays: &[&Replayed]) -> Metrics {
        let mut c = Confusion::default();
        let mut by_kind: BTreeMap<String, Breakdown> = BTreeMap::new();
        let mut by_reworded: BTreeMap<String, Breakdown> = BTreeMap::new();
        let mut by_step: BTreeMap<String, Breakdown> = BTreeMap::new();
        let mut fired: BTreeMap<String, FiredKind> = BTreeMap::new();
        let mut delays = Vec::new();
        let (mut early_far, mut reworded_loops, mut reworded_on_time) = (0, 0, 0);
        for r in records {
            let loop_run = r.label == "loop";
            match r.outcome {
                Outcome::OnTime | Outcome::Late => c.tp += 1,
                Outcome::Missed => c.fn_ += 1,
                Outcome::FalseAlarm => c.fp += 1,
                Outcome::Quiet => c.tn += 1,
            }
            if let Some(f) = &r.fired {
                let k = fired.entry(f.kind.as_str().to_string()).or_default();
                k.flagged += 1;
                k.loops += usize::from(loop_run);
                k.false_alarms += usize::from(!loop_run);
            }
            if let (Some(step), Outcome::FalseAlarm) = (&r.step, r.outcome) {
                by_step.entry(step.clone()).or_default().false_alarms += 1;
            }
            if !loop_run {
                continue;
            }
            if let Some(d) = r.delay {
                delays.push(d);
                early_far += usize::from(d < -(ON_TIME_SLACK as i64));
            }
            reworded_loops += usize::from(r.reworded == Some(true));
            reworded_on_time +=
                usize::from(r.reworded == Some(true) && r.outcome == Outcome::OnTime);
            let rew = match r.reworded {
                Some(true) => "reworded",
                Some(false) => "not reworded",
                None => "(not given)",
            };
            let mut breakdowns = vec![
                (
                    &mut by_kind,
                    r.kind.clone().unwrap_or_else(|| "(not given)".into()),
                ),
                (&mut by_reworded, rew.to_string()),
            ];
            if let Some(step) = &r.step {
                breakdowns.push((&mut by_step, step.clone()));
            }
            for (map, key) in breakdowns {
                let b = map.entry(key).or_default();
                b.loops += 1;
                b.caught += usize::from(r.fired.is_some());
                b.on_time += usize::from(r.outcome == Outcome::OnTime);
                b.early += usize::from(r.early);
                b.late += usize::from(r.outcome == Outcome::Late);
                b.missed += usize::from(r.outcome == Outcome::Missed);
            }
        }
        let finish = |m: BTreeMap<String, Breakdown>| -> Vec<Breakdown> {
            m.into_iter()
                .map(|(value, mut b)| {
                    b.value = value;
                    b.recall = ratio(b.caught, b.loops);
                    b.on_time_rate = ratio(b.on_time, b.loops);
                    b
                })
                .collect()
        };
        let count = |o: Outcome| records.iter().filter(|r| r.outcome == o).count();
        Metrics {
            runs: records.len(),
            loops: c.positives(),
            no_loops: c.negatives(),
            reworded_loops,
            rates: Rates::from(c),
            caught: c.tp,
            on_time: count(Outcome::OnTime),
            reworded_on_time,
            early: records.iter().filter(|r| r.early).count(),
            early_by_more_than_slack: early_far,
            late: count(Outcome::Late),
            missed: count(Outcome::Missed),
            false_alarms: c.fp,
            delay: DelayStats::of(delays),
            judge: JudgeLoad::of(replays.iter().copied()),
            by_kind: finish(by_kind),
            by_reworded: finish(by_reworded),
            by_step: finish(by_step),
            fired_kinds: fired
                .into_iter()
                .map(|(kind, mut f)| {
                    f.kind = kind;
                    f.precision = ratio(f.loops, f.flagged);
                    f
                })
                .collect(),
        }
    }
}

/// A flagged control run.
#[derive(Debug, Clone, Serialize)]
pub struct Flagged {
    pub id: String,
    pub fired: VerdictAt,
}

/// One control file at one point.
#[derive(Debug, Clone, Serialize)]
pub struct ControlReport {
    pub file: String,
    pub runs: usize,
    pub flagged: usize,
    pub share_flagged: Option<f64>,
    pub flagged_runs: Vec<Flagged>,
    pub judge: JudgeLoad,
}

impl ControlReport {
    pub fn of(set: &ControlSet, replays: &[Replayed]) -> ControlReport {
        let flagged_runs: Vec<Flagged> = set
            .runs
            .iter()
            .zip(replays)
            .filter_map(|(run, r)| {
                r.first_loop.as_ref().map(|f| Flagged {
                    id: run.id.clone(),
                    fired: f.clone(),
                })
            })
            .collect();
        ControlReport {
            file: set.file.clone(),
            runs: set.runs.len(),
            flagged: flagged_runs.len(),
            share_flagged: ratio(flagged_runs.len(), set.runs.len()),
            flagged_runs,
            judge: JudgeLoad::of(replays.iter()),
        }
    }
}
