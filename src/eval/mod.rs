//! `loopguard eval`: detection measured on labelled recorded runs — how every detection figure of
//! the project is produced.
//!
//! Input: runs in `score`'s format plus their labels — `"label": "loop" | "no_loop"` and, for a
//! loop, `first_loop_converted` (the index into `events` of the event at which a careful reader
//! first says "this is now a loop"), with optional `kind`, `reworded`, `confidence` and `why`
//! (see the labelling guide in docs/DETECTION.md, "Measured"). Control files are unlabelled
//! healthy runs: every flag there is a false alarm.
//!
//! The rules, as the labelled sets define them:
//!
//! - A loop run is **caught** when any verdict of the run is a loop (its first one is the
//!   run's `first_loop_index`); a `no_loop` run with a loop verdict is a **false alarm**.
//!   Precision, recall and F1 count runs.
//! - Caught **on time**: `first_loop_index ≤ first_loop_converted + ON_TIME_SLACK`; caught later
//!   is **late**.
//! - An **early alarm** is a loop run whose first loop verdict comes *before*
//!   `first_loop_converted`. It is caught on time by the rule above and counted so; it is
//!   reported apart because an alarm well before the labelled point may have fired on a different
//!   repetition than the one the reader saw (the listing shows the verdict that fired).
//! - **Delay**: `first_loop_index − first_loop_converted` over caught loop runs (negative for
//!   early alarms).
//! - An event is **ambiguous** when its verdict carries a judge report (the engine asked the
//!   judge, or would have, had one been configured); it was **sent to the judge** when a judge
//!   was configured and consulted (not the fallback, not past the task's budget).
//!
//! For every run that is missed or late, the report names the **near miss**: the strongest
//! non-loop evidence the engine gave up to the on-time deadline (a vetoed finding, an ambiguous
//! event, an event matched with an earlier one that no detector counted, a grey-band match).
//!
//! With `folds`, the labelled runs are split into stratified folds (by label and kind, seeded);
//! with a sweep, the setting is chosen on the other folds and measured on each held-out fold.
//! Sweep points and their parsing are `calibrate runs`' ([`crate::calibrate::runs`]); rates are
//! [`crate::calibrate::metrics`]'; runs are scored by [`crate::score`].

pub mod folds;
pub mod input;
pub mod judge;
pub mod measure;
pub mod report;
pub mod rules;

pub use folds::assign_folds;
pub use input::{
    family_name, parse_control, parse_labelled, read_control, read_families, read_labelled,
    ControlSet, Family, LabelledRun, LabelledSet,
};
pub use measure::{
    Breakdown, ControlReport, FiredKind, Flagged, JudgeLoad, Metrics, NearMiss, NearMissKind,
    Outcome, Replayed, RunRecord, VerdictAt,
};

use crate::calibrate::runs::{describe, plan_sweep, Setting, SweepAxis};
use crate::config::Config;
use crate::embed::Embedder;
use crate::engine::EngineError;
use crate::event::InputError;
use crate::judge::{Judge, JudgeVerdict};
use crate::score::{score_run_judged, Run};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// A loop caught at most this many events after `first_loop_converted` is caught on time.
pub const ON_TIME_SLACK: usize = 2;

/// Why an evaluation could not run. Input problems name the file, the line and the JSON path.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{file}: line {line}: {error}")]
    Input {
        file: String,
        line: usize,
        error: InputError,
    },
    #[error("{file}: no runs (the file is empty)")]
    Empty { file: String },
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{file}: run {run}: {error}")]
    Run {
        file: String,
        run: String,
        error: EngineError,
    },
    #[error("{0}")]
    Invalid(String),
}

impl From<crate::calibrate::CalibrateError> for EvalError {
    fn from(e: crate::calibrate::CalibrateError) -> Self {
        EvalError::Invalid(e.to_string())
    }
}

/// Which judge the replays consult.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JudgeMode {
    /// The configuration's (`[judge] kind`; none by default).
    Configured,
    /// A test judge that answers this to everything.
    Always(JudgeVerdict),
}

/// How an evaluation runs.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// Runs scored concurrently (their texts shared among the model workers, which batch them).
    pub jobs: usize,
    pub judge: JudgeMode,
    /// Stratified folds (at least 2), or none.
    pub folds: Option<usize>,
    pub seed: u64,
    /// Measure every rule of the detection table: which runs it fired first on, and (leaving
    /// it out) the loops only it catches and the false alarms only it raises.
    pub by_rule: bool,
    /// With `by_rule`: the whole leave-one-rule-out figures too.
    pub ablate: bool,
}

impl Default for EvalOptions {
    fn default() -> Self {
        EvalOptions {
            jobs: 8,
            judge: JudgeMode::Configured,
            folds: None,
            seed: 1,
            by_rule: false,
            ablate: false,
        }
    }
}

/// Where an evaluation is, for progress bars.
#[derive(Debug, Clone)]
pub struct Progress {
    /// Which sweep point, of how many.
    pub point: usize,
    pub points: usize,
    /// The file being replayed.
    pub file: String,
    pub runs_done: usize,
    pub runs: usize,
}

/// Runs to replay, each with its `first_loop_converted` when it is a labelled loop.
type ToReplay = Arc<Vec<(Run, Option<usize>)>>;

/// Replay `runs` through fresh engines, `jobs` at a time; results in input order.
fn replay(
    rt: &tokio::runtime::Runtime,
    cfg: &Arc<Config>,
    embedder: &Embedder,
    judge: Option<Arc<dyn Judge>>,
    runs: &ToReplay,
    jobs: usize,
    mut progress: impl FnMut(usize),
) -> Result<Vec<Replayed>, (String, EngineError)> {
    rt.block_on(async {
        let mut out: Vec<Option<Replayed>> = vec![None; runs.len()];
        let mut in_flight = tokio::task::JoinSet::new();
        let (mut next, mut done) = (0, 0);
        progress(0);
        loop {
            while next < runs.len() && in_flight.len() < jobs.max(1) {
                let (cfg, embedder, judge, runs) = (
                    Arc::clone(cfg),
                    embedder.clone(),
                    judge.clone(),
                    Arc::clone(runs),
                );
                let i = next;
                in_flight.spawn(async move {
                    let (run, deadline) = &runs[i];
                    let r = score_run_judged(cfg, embedder, judge, run.clone()).await;
                    (i, r.map(|s| Replayed::of(&s, *deadline)))
                });
                next += 1;
            }
            let Some(joined) = in_flight.join_next().await else {
                break;
            };
            let (i, r) = joined.map_err(|e| {
                (
                    "?".to_string(),
                    EngineError::Rejected(format!("a scoring task failed: {e}")),
                )
            })?;
            out[i] = Some(r.map_err(|e| (runs[i].0.id.clone(), e))?);
            done += 1;
            progress(done);
        }
        Ok(out
            .into_iter()
            .map(|r| r.expect("every run replayed"))
            .collect())
    })
}

/// Every run replayed at one sweep point.
struct PointRuns {
    settings: Vec<Setting>,
    labelled: Vec<Replayed>,
    controls: Vec<Vec<Replayed>>,
    seconds: f64,
    judge_calls: Option<u64>,
    /// Texts the model embedded at this point (cache misses), and the events replayed.
    model_texts: u64,
    events: usize,
}

/// One sweep point, measured on every labelled run.
#[derive(Debug, Clone, Serialize)]
pub struct PointReport {
    pub settings: Vec<Setting>,
    pub metrics: Metrics,
    /// Per control file: runs flagged.
    pub controls_flagged: Vec<usize>,
    pub seconds: f64,
    /// Texts the model embedded at this point, labelled and control runs (the embedding cache
    /// spares later sweep points what an earlier one embedded), and the events replayed.
    pub model_texts: u64,
    pub events: usize,
    /// Questions the test judge answered at this point (labelled and control runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judge_calls: Option<u64>,
    /// With a sweep: every labelled run at this point, to compare points run by run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<PointRun>,
    /// With a sweep: the control runs flagged at this point, per control file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub flagged: Vec<Vec<String>>,
}

/// One labelled run at one sweep point.
#[derive(Debug, Clone, Serialize)]
pub struct PointRun {
    pub id: String,
    pub outcome: measure::Outcome,
    pub first_loop_index: Option<usize>,
    pub rule: Option<String>,
}

/// A set of labelled runs measured at one point (or, cross-validated, each at its fold's point).
#[derive(Debug, Clone, Serialize)]
pub struct SetReport {
    pub metrics: Metrics,
    /// Every labelled run, in input order.
    pub runs: Vec<RunRecord>,
    pub controls: Vec<ControlReport>,
}

/// One fold: the point chosen on the other folds, measured on this one.
#[derive(Debug, Clone, Serialize)]
pub struct FoldReport {
    pub fold: usize,
    pub runs: usize,
    pub loops: usize,
    /// With a sweep: the point chosen on the other folds (index into `points`), and its figures
    /// there.
    pub chosen: Option<usize>,
    pub chosen_settings: Option<Vec<Setting>>,
    pub train: Option<Metrics>,
    /// This fold's runs at the chosen point (the only point without a sweep).
    pub test: Metrics,
    /// Control runs flagged at the chosen point, per control file.
    pub controls_flagged: Vec<usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FoldsReport {
    pub folds: usize,
    pub seed: u64,
    pub stratified_by: &'static str,
    /// The families the folds are, when the labelled files are several and no `--folds` was
    /// given: each family measured at the point chosen on the others (leave one family out).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    pub per_fold: Vec<FoldReport>,
    /// With a sweep: every run measured at the point chosen without it (its fold's point).
    pub cross_validated: Option<SetReport>,
}

/// One family of agents (one labelled file of several), measured at the evaluated point.
#[derive(Debug, Clone, Serialize)]
pub struct FamilyReport {
    pub name: String,
    pub file: String,
    pub metrics: Metrics,
}

#[derive(Debug, Clone, Serialize)]
pub struct InputReport {
    pub file: String,
    pub runs: usize,
    pub loops: usize,
    pub no_loops: usize,
    pub reworded_loops: usize,
    pub events: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct JudgeReportInfo {
    /// `none`, `openai`, `webhook`, or `always_progress` / `always_no_progress` (test judges).
    pub mode: String,
    /// With a test judge: questions it answered, over every replay of every point.
    pub calls: Option<u64>,
}

/// The whole evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    pub command: &'static str,
    pub loopguard_version: &'static str,
    pub model: String,
    pub definitions: Vec<&'static str>,
    pub input: InputReport,
    pub controls: Vec<String>,
    pub judge: JudgeReportInfo,
    pub axes: Vec<SweepAxis>,
    pub points: Vec<PointReport>,
    /// The point `result` describes: the only one, or with a sweep the one the choice rule picks
    /// on all labelled runs (in-sample: see `folds` for figures measured on unseen runs).
    pub focus: usize,
    pub choice_rule: &'static str,
    pub result: SetReport,
    /// With several labelled files: each family's figures at the evaluated point.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub families: Vec<FamilyReport>,
    pub folds: Option<FoldsReport>,
    /// `--by-rule` / `--ablate`: every rule measured at the evaluated point.
    pub rules: Option<rules::RulesReport>,
    /// `--ablate`: the report shows the whole figures without each rule.
    pub ablated: bool,
    pub seconds: f64,
}

pub const DEFINITIONS: [&str; 7] = [
    "indices are 0-based positions in a run's events; verdict reasons speak of seq, 1-based (seq = index + 1 when the run is one task)",
    "caught: a loop run with any loop verdict (the first is first_loop_index); false alarm: a no_loop run with one; P, R and F1 count runs",
    "on time: first_loop_index <= first_loop_converted + 2; late: caught after that",
    "early alarm: first_loop_index < first_loop_converted (counted as on time; listed apart)",
    "delay: first_loop_index - first_loop_converted over caught loop runs (negative: early)",
    "ambiguous: a verdict with a judge report (asked, or would have been with a judge); sent: a configured judge was consulted",
    "near miss (missed and late loops): the strongest non-loop verdict up to first_loop_converted + 2: vetoed > ambiguous > matched (same event, not counted) > near (grey band or better)",
];

pub const CHOICE_RULE: &str = "the fewest control runs flagged, then the highest F1, then the most loops caught on time, then the fewest false alarms, then the earliest point of the sweep";

/// The point [`CHOICE_RULE`] picks among `candidates` (metrics on the choosing runs, control
/// runs flagged).
fn choose(candidates: &[(Metrics, usize)]) -> usize {
    let mut best = 0;
    for (i, (m, flagged)) in candidates.iter().enumerate().skip(1) {
        let (b, bflagged) = &candidates[best];
        let better = flagged
            .cmp(bflagged)
            .reverse()
            .then(
                m.rates
                    .f1
                    .unwrap_or(0.0)
                    .total_cmp(&b.rates.f1.unwrap_or(0.0)),
            )
            .then(m.on_time.cmp(&b.on_time))
            .then(m.false_alarms.cmp(&b.false_alarms).reverse());
        if better == std::cmp::Ordering::Greater {
            best = i;
        }
    }
    best
}

/// The judge a sweep point runs with, and the test judge behind it when there is one (to count
/// the questions it was asked).
type PointJudge = (Option<Arc<dyn Judge>>, Option<Arc<judge::AlwaysJudge>>);

/// Replay the labelled runs and the controls at every sweep point and measure. Call from outside
/// an async runtime.
pub fn evaluate(
    base: &Config,
    embedder: &Embedder,
    labelled: &LabelledSet,
    controls: &[ControlSet],
    axes: Vec<SweepAxis>,
    opts: &EvalOptions,
    mut progress: impl FnMut(&Progress),
) -> Result<EvalReport, EvalError> {
    let started = Instant::now();
    let by_family = labelled.families.len() > 1;
    if let Some(k) = opts.folds {
        if k < 2 || k > labelled.runs.len() {
            return Err(EvalError::Invalid(format!(
                "--folds {k}: needs at least 2 folds and at most one per labelled run ({})",
                labelled.runs.len()
            )));
        }
    }
    let points = plan_sweep(base, &axes)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| EvalError::Invalid(format!("starting the scoring runtime: {e}")))?;
    let labelled_runs: ToReplay = Arc::new(
        labelled
            .runs
            .iter()
            .map(|r| (r.run.clone(), r.first_loop_converted))
            .collect(),
    );
    let control_runs: Vec<ToReplay> = controls
        .iter()
        .map(|c| Arc::new(c.runs.iter().map(|r| (r.clone(), None)).collect()))
        .collect();

    let judge_mode = match opts.judge {
        JudgeMode::Configured => match base.judge.kind {
            crate::config::JudgeKind::None => "none".to_string(),
            crate::config::JudgeKind::Openai => "openai".to_string(),
            crate::config::JudgeKind::Webhook => "webhook".to_string(),
        },
        JudgeMode::Always(v) => format!("always_{}", v.as_str()),
    };
    let mut total_calls: Option<u64> = None;
    let mut replayed: Vec<PointRuns> = Vec::with_capacity(points.len());
    // A judge for a point: the test judge (with its counter) or the configured one.
    let judge_for = |config: &Config| -> Result<PointJudge, EvalError> {
        Ok(match opts.judge {
            JudgeMode::Always(v) => {
                let j = Arc::new(judge::AlwaysJudge::new(v));
                (Some(j.clone() as Arc<dyn Judge>), Some(j))
            }
            JudgeMode::Configured => {
                let j = crate::judge::from_config(&config.judge)
                    .map_err(|e| EvalError::Invalid(format!("the configured judge: {e}")))?;
                (j, None)
            }
        })
    };
    let replayed_events: usize = labelled_runs
        .iter()
        .chain(control_runs.iter().flat_map(|c| c.iter()))
        .map(|(r, _)| r.events.len())
        .sum();
    for (pi, point) in points.iter().enumerate() {
        let point_started = Instant::now();
        let embedded_before = embedder.stats().model_texts();
        let (judge, counter) = judge_for(&point.config)?;
        let mut pass = |file: &str, runs: &ToReplay| -> Result<Vec<Replayed>, EvalError> {
            let total = runs.len();
            replay(
                &rt,
                &point.config,
                embedder,
                judge.clone(),
                runs,
                opts.jobs,
                |done| {
                    progress(&Progress {
                        point: pi,
                        points: points.len(),
                        file: file.to_string(),
                        runs_done: done,
                        runs: total,
                    })
                },
            )
            .map_err(|(run, error)| EvalError::Run {
                file: file.to_string(),
                run,
                error,
            })
        };
        let labelled_out = pass(&labelled.file, &labelled_runs)?;
        let mut controls_out = Vec::with_capacity(controls.len());
        for (c, runs) in controls.iter().zip(&control_runs) {
            controls_out.push(pass(&c.file, runs)?);
        }
        let judge_calls = counter.map(|c| c.calls());
        if let Some(n) = judge_calls {
            *total_calls.get_or_insert(0) += n;
        }
        replayed.push(PointRuns {
            settings: point.settings.clone(),
            labelled: labelled_out,
            controls: controls_out,
            seconds: point_started.elapsed().as_secs_f64(),
            judge_calls,
            model_texts: embedder.stats().model_texts() - embedded_before,
            events: replayed_events,
        });
    }

    let n = labelled.runs.len();
    let sweep = points.len() > 1;
    // Several families and a sweep: each family is a fold, measured at the point chosen on the
    // others (leave one family out), unless --folds asks for stratified folds.
    let family_folds = opts.folds.is_none() && by_family && sweep;
    let fold_count = if family_folds {
        Some(labelled.families.len())
    } else {
        opts.folds
    };
    let fold_of: Option<Vec<usize>> = if family_folds {
        Some(labelled.family_of())
    } else {
        opts.folds
            .map(|k| assign_folds(&labelled.runs, k, opts.seed))
    };
    let fold_at = |i: usize| fold_of.as_ref().map(|f| f[i]);
    let records_at = |p: usize| -> Vec<RunRecord> {
        (0..n)
            .map(|i| {
                RunRecord::of(
                    &labelled.runs[i],
                    &replayed[p].labelled[i],
                    fold_at(i),
                    sweep.then_some(p),
                )
            })
            .collect()
    };
    let all_records: Vec<Vec<RunRecord>> = (0..points.len()).map(records_at).collect();
    // Metrics of the runs `keep` selects, at point `p`.
    let metrics_at = |p: usize, keep: &dyn Fn(usize) -> bool| -> Metrics {
        let recs: Vec<&RunRecord> = (0..n)
            .filter(|i| keep(*i))
            .map(|i| &all_records[p][i])
            .collect();
        let reps: Vec<&Replayed> = (0..n)
            .filter(|i| keep(*i))
            .map(|i| &replayed[p].labelled[i])
            .collect();
        Metrics::of(&recs, &reps)
    };
    let controls_flagged = |p: usize| -> Vec<usize> {
        replayed[p]
            .controls
            .iter()
            .map(|c| c.iter().filter(|r| r.first_loop.is_some()).count())
            .collect()
    };
    let point_reports: Vec<PointReport> = (0..points.len())
        .map(|p| PointReport {
            settings: replayed[p].settings.clone(),
            metrics: metrics_at(p, &|_| true),
            controls_flagged: controls_flagged(p),
            seconds: replayed[p].seconds,
            model_texts: replayed[p].model_texts,
            events: replayed[p].events,
            judge_calls: replayed[p].judge_calls,
            runs: if sweep {
                all_records[p]
                    .iter()
                    .map(|r| PointRun {
                        id: r.id.clone(),
                        outcome: r.outcome,
                        first_loop_index: r.first_loop_index,
                        rule: r.fired.as_ref().and_then(|f| f.rule.clone()),
                    })
                    .collect()
            } else {
                Vec::new()
            },
            flagged: if sweep {
                controls
                    .iter()
                    .zip(&replayed[p].controls)
                    .map(|(c, reps)| {
                        c.runs
                            .iter()
                            .zip(reps)
                            .filter(|(_, r)| r.first_loop.is_some())
                            .map(|(run, _)| run.id.clone())
                            .collect()
                    })
                    .collect()
            } else {
                Vec::new()
            },
        })
        .collect();
    let choose_on = |keep: &dyn Fn(usize) -> bool| -> usize {
        let candidates: Vec<(Metrics, usize)> = (0..points.len())
            .map(|p| (metrics_at(p, keep), controls_flagged(p).iter().sum()))
            .collect();
        choose(&candidates)
    };
    let focus = if sweep { choose_on(&|_| true) } else { 0 };
    let set_report = |p: usize| SetReport {
        metrics: point_reports[p].metrics.clone(),
        runs: all_records[p].clone(),
        controls: controls
            .iter()
            .zip(&replayed[p].controls)
            .map(|(c, r)| ControlReport::of(c, r))
            .collect(),
    };
    let result = set_report(focus);

    let families: Vec<FamilyReport> = labelled
        .families
        .iter()
        .filter(|_| by_family)
        .map(|fam| FamilyReport {
            name: fam.name.clone(),
            file: fam.file.clone(),
            metrics: metrics_at(focus, &|i| fam.runs.contains(&i)),
        })
        .collect();
    let folds = fold_of.as_ref().map(|fold_of| {
        let k = fold_count.unwrap_or(2);
        let mut per_fold = Vec::with_capacity(k);
        let mut chosen_for = vec![0usize; k];
        for (f, chosen_slot) in chosen_for.iter_mut().enumerate() {
            let in_fold = |i: usize| fold_of[i] == f;
            let (chosen, train) = if sweep {
                let c = choose_on(&|i| !in_fold(i));
                (Some(c), Some(metrics_at(c, &|i| !in_fold(i))))
            } else {
                (None, None)
            };
            let p = chosen.unwrap_or(0);
            *chosen_slot = p;
            let test = metrics_at(p, &in_fold);
            per_fold.push(FoldReport {
                fold: f,
                runs: test.runs,
                loops: test.loops,
                chosen,
                chosen_settings: chosen.map(|c| replayed[c].settings.clone()),
                train,
                test,
                controls_flagged: controls_flagged(p),
            });
        }
        let cross_validated = sweep.then(|| {
            let recs: Vec<RunRecord> = (0..n)
                .map(|i| all_records[chosen_for[fold_of[i]]][i].clone())
                .collect();
            let reps: Vec<&Replayed> = (0..n)
                .map(|i| &replayed[chosen_for[fold_of[i]]].labelled[i])
                .collect();
            let rec_refs: Vec<&RunRecord> = recs.iter().collect();
            // Controls have no folds: each fold's point flags its own; report them all.
            let mut ctl = Vec::new();
            for f in 0..k {
                for (c, r) in controls.iter().zip(&replayed[chosen_for[f]].controls) {
                    let mut cr = ControlReport::of(c, r);
                    cr.file = format!("{} (fold {f}'s point)", cr.file);
                    ctl.push(cr);
                }
            }
            SetReport {
                metrics: Metrics::of(&rec_refs, &reps),
                runs: recs,
                controls: ctl,
            }
        });
        FoldsReport {
            folds: k,
            seed: opts.seed,
            stratified_by: if family_folds {
                "family (leave one family out)"
            } else {
                "label and kind"
            },
            names: if family_folds {
                labelled.families.iter().map(|f| f.name.clone()).collect()
            } else {
                Vec::new()
            },
            per_fold,
            cross_validated,
        }
    });

    let rules = if opts.by_rule || opts.ablate {
        let focus_ctx = rules::Focus {
            point: focus,
            config: &points[focus].config,
            labelled,
            controls,
            labelled_runs: &labelled_runs,
            control_runs: &control_runs,
            records: &all_records[focus],
            replays_labelled: &replayed[focus].labelled,
            replays_controls: &replayed[focus].controls,
            fold_of: fold_of.as_deref(),
            folds: fold_count.unwrap_or(0),
            family_of: by_family.then(|| labelled.family_of()),
        };
        Some(rules::measure(&focus_ctx, |config, file, runs| {
            let (judge, _) = judge_for(config)?;
            let total = runs.len();
            replay(&rt, config, embedder, judge, runs, opts.jobs, |done| {
                progress(&Progress {
                    point: focus,
                    points: points.len(),
                    file: file.to_string(),
                    runs_done: done,
                    runs: total,
                })
            })
            .map_err(|(run, error)| EvalError::Run {
                file: file.to_string(),
                run,
                error,
            })
        })?)
    } else {
        None
    };

    let m = &point_reports[focus].metrics;
    Ok(EvalReport {
        command: "eval",
        loopguard_version: env!("CARGO_PKG_VERSION"),
        model: embedder.describe(),
        definitions: DEFINITIONS.to_vec(),
        input: InputReport {
            file: labelled.file.clone(),
            runs: n,
            loops: m.loops,
            no_loops: m.no_loops,
            reworded_loops: m.reworded_loops,
            events: labelled.runs.iter().map(|r| r.run.events.len()).sum(),
        },
        controls: controls.iter().map(|c| c.file.clone()).collect(),
        judge: JudgeReportInfo {
            mode: judge_mode,
            calls: total_calls,
        },
        axes,
        points: point_reports,
        focus,
        choice_rule: CHOICE_RULE,
        result,
        families,
        folds,
        rules,
        ablated: opts.ablate,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// `key=value, ...` for a point's settings.
pub fn settings_text(settings: &[Setting]) -> String {
    describe(settings)
}

#[cfg(test)]
mod tests;
