//! `calibrate runs`: labelled recorded runs replayed through the real engine over a sweep of
//! settings, measured at the level an orchestrator cares about — was the run flagged, was it a
//! loop, how many events after the loop became visible was it caught.
//!
//! Input, one run per line: `score`'s input plus `"label": "loop" | "no_loop"`, and optionally
//! `"group"` (a name to break results down by; default: the file's stem) and `"loop_onset"` (the
//! 0-based index of the first event that repeats what came before — the earliest a detector could
//! say "loop").
//!
//! A loop run with an onset is two things: its events before the onset are loop-free (a loop
//! verdict there is an *early alarm*, a false alarm in disguise), and from the onset on it is a
//! loop, *caught* by the first loop verdict at or after the onset; the delay is that verdict's
//! index minus the onset. Without an onset, any loop verdict catches the run.
//!
//! One embedder serves the whole sweep: texts embedded for the first point come from the cache at
//! every later one, so a sweep costs one pass of model time plus the engine's own (small) work per
//! point. The report records the time and the texts embedded per point to show it.

mod render;
mod sweep;
pub use render::{config_snippet, write_outputs};
pub use sweep::{
    describe, plan_sweep, Setting, SweepAxis, SweepPoint, MAX_AXIS_VALUES, MAX_POINTS,
};

use super::metrics::{Confusion, Rates};
use super::plot::{self, Chart, Corner, Dash, PALETTE};
use super::report::{self, num, SnippetEntry, Table, Written};
use super::{display_name, read_lines, CalibrateError, PairKind};
use crate::config::Config;
use crate::embed::Embedder;
use crate::event::InputError;
use crate::score::{parse_run, score_run, Run};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// A recorded run with its label.
#[derive(Debug, Clone)]
pub struct LabelledRun {
    pub run: Run,
    /// True: the run is a loop.
    pub label: bool,
    pub group: String,
    /// The first event at which the loop is visible (the first repeat), when known.
    pub loop_onset: Option<usize>,
}

/// Parse one line of `calibrate runs` input. `default_group` applies when the line names none.
pub fn parse_labelled_run(line: &str, default_group: &str) -> Result<LabelledRun, InputError> {
    let run = parse_run(line)?;
    let Some(label) = run.label else {
        return Err(InputError::new(
            "label",
            "a labelled run needs \"label\": \"loop\" or \"no_loop\"",
        ));
    };
    // parse_run accepted the line, so it is a JSON object.
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| InputError::new(".", e.to_string()))?;
    let group = match value.get("group") {
        None | Some(serde_json::Value::Null) => default_group.to_string(),
        Some(serde_json::Value::String(s)) if !s.is_empty() => s.clone(),
        Some(other) => {
            return Err(InputError::new(
                "group",
                format!("must be a non-empty string, got {other}"),
            ))
        }
    };
    let loop_onset = match value.get("loop_onset") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(i) if (i as usize) < run.events.len() => Some(i as usize),
            _ => {
                return Err(InputError::new(
                    "loop_onset",
                    format!(
                        "must be the index of one of the run's {} events, got {v}",
                        run.events.len()
                    ),
                ))
            }
        },
    };
    if loop_onset.is_some() && !label {
        return Err(InputError::new(
            "loop_onset",
            "only a run labelled \"loop\" has a loop onset",
        ));
    }
    Ok(LabelledRun {
        run,
        label,
        group,
        loop_onset,
    })
}

/// Read a labelled runs file; runs without a `group` take the file's stem.
pub fn read_runs(path: &Path) -> Result<Vec<LabelledRun>, CalibrateError> {
    let file = display_name(path);
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| file.clone());
    let lines = read_lines(path)?;
    if lines.is_empty() {
        return Err(CalibrateError::Empty { file, what: "runs" });
    }
    lines
        .into_iter()
        .map(|(line, text)| {
            parse_labelled_run(&text, &stem).map_err(|error| CalibrateError::Input {
                file: file.clone(),
                line,
                error,
            })
        })
        .collect()
}

/// How `calibrate runs` runs.
#[derive(Debug, Clone)]
pub struct RunsOptions {
    /// Runs scored concurrently (their texts shared among the model workers, which batch them).
    pub jobs: usize,
    /// A recommended point's false-alarm rate is at most the sweep's lowest plus this: false
    /// alarms no swept setting removes (exact repeats, label noise) are not held against any
    /// point, and any point that adds more is out.
    pub false_alarm_slack: f64,
    /// ... and at most this, whatever the lowest is.
    pub max_false_alarm_rate: f64,
}

impl Default for RunsOptions {
    fn default() -> Self {
        RunsOptions {
            jobs: 8,
            false_alarm_slack: 0.0,
            max_false_alarm_rate: 1.0,
        }
    }
}

/// Where a sweep is, for progress bars.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub point: usize,
    pub points: usize,
    pub runs_done: usize,
    pub runs: usize,
}

/// What scoring did to one run at one point.
#[derive(Debug, Clone)]
struct Outcome {
    flagged: bool,
    /// Loop runs: the first loop verdict at or after the onset (any, without an onset).
    caught_at: Option<usize>,
    /// Loop runs: a loop verdict before the onset.
    early_alarm: bool,
    /// The kind of the verdict that decided the run: the catch, else the first loop verdict.
    kind: Option<String>,
}

impl Outcome {
    fn of(run: &LabelledRun, score: &crate::score::RunScore) -> Outcome {
        let onset = if run.label {
            run.loop_onset.unwrap_or(0)
        } else {
            usize::MAX
        };
        let loops = || score.verdicts.iter().enumerate().filter(|(_, v)| v.is_loop);
        let caught = loops().find(|(i, _)| *i >= onset);
        let first = loops().next();
        Outcome {
            flagged: score.is_loop,
            caught_at: caught.map(|(i, _)| i),
            early_alarm: run.label && first.is_some_and(|(i, _)| i < onset),
            kind: caught.or(first).map(|(_, v)| v.kind.as_str().to_string()),
        }
    }
}

/// Runs of one group at one point.
#[derive(Debug, Clone, Serialize)]
pub struct GroupOutcome {
    pub group: String,
    pub runs: usize,
    pub loops: usize,
    pub flagged: usize,
    /// Loop runs caught at or after their onset.
    pub caught: usize,
    /// `no_loop` runs flagged.
    pub false_alarms: usize,
    /// Loop runs with a loop verdict before their onset.
    pub early_alarms: usize,
    pub mean_delay: Option<f64>,
}

/// How late loops are caught: the catching verdict's index minus `loop_onset`, in events, over
/// caught loop runs that have an onset.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct DelayStats {
    pub measured: usize,
    /// Caught at the onset itself.
    pub at_onset: usize,
    pub mean: Option<f64>,
    pub median: Option<f64>,
    pub max: Option<i64>,
}

impl DelayStats {
    pub fn of(mut delays: Vec<i64>) -> DelayStats {
        delays.sort_unstable();
        let n = delays.len();
        if n == 0 {
            return DelayStats::default();
        }
        let median = if n % 2 == 1 {
            delays[n / 2] as f64
        } else {
            (delays[n / 2 - 1] + delays[n / 2]) as f64 / 2.0
        };
        DelayStats {
            measured: n,
            at_onset: delays.iter().filter(|d| **d == 0).count(),
            mean: Some(delays.iter().sum::<i64>() as f64 / n as f64),
            median: Some(median),
            max: delays.last().copied(),
        }
    }
}

/// Most run ids kept per kind of mistake in [`Examples`].
pub const EXAMPLES_KEPT: usize = 10;

/// Run ids worth reading, [`EXAMPLES_KEPT`] of each at most, in input order.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Examples {
    pub false_alarms: Vec<String>,
    pub early_alarms: Vec<String>,
    pub missed: Vec<String>,
}

impl Examples {
    fn keep(list: &mut Vec<String>, id: &str) {
        if list.len() < EXAMPLES_KEPT {
            list.push(id.to_string());
        }
    }
}

/// One sweep point, measured.
#[derive(Debug, Clone, Serialize)]
pub struct PointReport {
    pub settings: Vec<Setting>,
    /// Run level. Positives: loop runs, a true positive when caught at or after the onset.
    /// Negatives: `no_loop` runs and the loop-free part (before the onset) of loop runs that have
    /// one; a loop verdict in either is a false positive. `fpr` is the false-alarm rate.
    #[serde(flatten)]
    pub rates: Rates,
    /// Flagged `no_loop` runs.
    pub false_alarms: usize,
    /// Loop runs with a loop verdict before their onset, of `loop_free_prefixes` loop runs whose
    /// onset is after their first event.
    pub early_alarms: usize,
    pub loop_free_prefixes: usize,
    pub delay: DelayStats,
    pub groups: Vec<GroupOutcome>,
    /// The kind of the deciding verdict (the catch, else the first loop verdict) of each
    /// flagged run, counted.
    pub kinds: BTreeMap<String, usize>,
    /// Ids of runs to read first: the first few false alarms, early alarms and missed loops.
    pub examples: Examples,
    pub seconds: f64,
    /// Texts the model embedded at this point (the rest came from the cache).
    pub texts_embedded: u64,
    #[serde(skip)]
    delays: Vec<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunsInput {
    pub file: String,
    pub runs: usize,
    pub loops: usize,
    pub no_loops: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunsRecommendation {
    /// Index into `points`.
    pub point: usize,
    pub settings: Vec<Setting>,
    pub rule: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunsReport {
    pub command: &'static str,
    pub loopguard_version: &'static str,
    pub model: String,
    pub inputs: Vec<RunsInput>,
    pub runs: usize,
    pub loops: usize,
    pub no_loops: usize,
    pub axes: Vec<SweepAxis>,
    pub false_alarm_slack: f64,
    pub max_false_alarm_rate: f64,
    pub points: Vec<PointReport>,
    pub recommended: Option<RunsRecommendation>,
    pub notes: Vec<String>,
    /// The `[detect.similarity]` thresholds (and swept keys) of the recommended point, or of the
    /// configuration as given when nothing is recommended.
    #[serde(skip)]
    snippet_config: Arc<Config>,
}

/// Replay every run at every point and measure. Call from outside an async runtime.
pub fn calibrate_runs(
    embedder: &Embedder,
    inputs: Vec<RunsInput>,
    runs: &[LabelledRun],
    axes: Vec<SweepAxis>,
    points: Vec<SweepPoint>,
    opts: &RunsOptions,
    mut progress: impl FnMut(Progress),
) -> Result<RunsReport, CalibrateError> {
    if runs.is_empty() {
        return Err(CalibrateError::Invalid(
            "no labelled runs to calibrate on".into(),
        ));
    }
    if points.is_empty() {
        return Err(CalibrateError::Invalid("the sweep has no points".into()));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CalibrateError::Invalid(format!("starting the scoring runtime: {e}")))?;
    let runs_arc: Arc<Vec<LabelledRun>> = Arc::new(runs.to_vec());
    let mut reports = Vec::with_capacity(points.len());
    for (pi, point) in points.iter().enumerate() {
        let started = Instant::now();
        let embedded_before = embedder.stats().model_texts();
        let outcomes = rt.block_on(score_all(
            Arc::clone(&point.config),
            embedder.clone(),
            Arc::clone(&runs_arc),
            opts.jobs.max(1),
            |done| {
                progress(Progress {
                    point: pi,
                    points: points.len(),
                    runs_done: done,
                    runs: runs.len(),
                })
            },
        ))?;
        let mut report = measure(&point.settings, runs, &outcomes);
        report.seconds = started.elapsed().as_secs_f64();
        report.texts_embedded = embedder.stats().model_texts() - embedded_before;
        reports.push(report);
    }

    let loops = runs.iter().filter(|r| r.label).count();
    let mut notes = Vec::new();
    if loops == 0 {
        notes.push("no run is labelled \"loop\": recall and F1 are undefined; only false alarms are measured".to_string());
    }
    if loops == runs.len() {
        notes.push("no run is labelled \"no_loop\": false alarms cannot be measured, so no point is recommended".to_string());
    }
    let recommended = choose(&reports, opts, loops > 0 && loops < runs.len());
    let snippet_config = match &recommended {
        Some(i) => Arc::clone(&points[*i].config),
        None => {
            if loops > 0 && loops < runs.len() {
                let fewest = reports
                    .iter()
                    .filter_map(|r| r.rates.fpr)
                    .fold(f64::INFINITY, f64::min);
                notes.push(format!(
                    "NO POINT IS RECOMMENDED: every point raises false alarms on more than {} of the negatives (the fewest: {}). The snippet repeats the configuration as given.",
                    opts.max_false_alarm_rate,
                    num(Some(fewest), 3)
                ));
            }
            Arc::clone(&points[0].config)
        }
    };
    let recommended = recommended.map(|i| RunsRecommendation {
        point: i,
        settings: reports[i].settings.clone(),
        rule: rule_text(opts),
    });
    Ok(RunsReport {
        command: "runs",
        loopguard_version: env!("CARGO_PKG_VERSION"),
        model: embedder.describe(),
        inputs,
        runs: runs.len(),
        loops,
        no_loops: runs.len() - loops,
        axes,
        false_alarm_slack: opts.false_alarm_slack,
        max_false_alarm_rate: opts.max_false_alarm_rate,
        points: reports,
        recommended,
        notes,
        snippet_config,
    })
}

fn rule_text(opts: &RunsOptions) -> String {
    let mut limits = vec![if opts.false_alarm_slack == 0.0 {
        "no more false alarms than the quietest point".to_string()
    } else {
        format!(
            "a false-alarm rate at most {} above the quietest point's",
            opts.false_alarm_slack
        )
    }];
    if opts.max_false_alarm_rate < 1.0 {
        limits.push(format!("at most {}", opts.max_false_alarm_rate));
    }
    format!(
        "the highest run-level F1 among points with {}; ties: the earliest detection, then the higher setting values (more conservative)",
        limits.join(" and ")
    )
}

async fn score_all(
    cfg: Arc<Config>,
    embedder: Embedder,
    runs: Arc<Vec<LabelledRun>>,
    jobs: usize,
    mut progress: impl FnMut(usize),
) -> Result<Vec<Outcome>, CalibrateError> {
    let mut outcomes: Vec<Option<Outcome>> = vec![None; runs.len()];
    let mut in_flight = tokio::task::JoinSet::new();
    let mut next = 0;
    let mut done = 0;
    progress(0);
    loop {
        while next < runs.len() && in_flight.len() < jobs {
            let (cfg, embedder, runs) = (Arc::clone(&cfg), embedder.clone(), Arc::clone(&runs));
            let i = next;
            in_flight.spawn(async move {
                let run = runs[i].run.clone();
                (i, score_run(cfg, embedder, run).await)
            });
            next += 1;
        }
        let Some(joined) = in_flight.join_next().await else {
            break;
        };
        let (i, result) =
            joined.map_err(|e| CalibrateError::Invalid(format!("a scoring task failed: {e}")))?;
        let score = result.map_err(|error| CalibrateError::Run {
            run: runs[i].run.id.clone(),
            error,
        })?;
        outcomes[i] = Some(Outcome::of(&runs[i], &score));
        done += 1;
        progress(done);
    }
    Ok(outcomes
        .into_iter()
        .map(|o| o.expect("every run scored"))
        .collect())
}

fn measure(settings: &[Setting], runs: &[LabelledRun], outcomes: &[Outcome]) -> PointReport {
    let mut c = Confusion::default();
    let mut groups: Vec<GroupOutcome> = Vec::new();
    let mut group_delays: Vec<Vec<i64>> = Vec::new();
    let mut delays = Vec::new();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let (mut false_alarms, mut early, mut prefixes) = (0, 0, 0);
    let mut examples = Examples::default();
    for (r, o) in runs.iter().zip(outcomes) {
        let caught = r.label && o.caught_at.is_some();
        let id = r.run.id.as_str();
        if !r.label && o.flagged {
            Examples::keep(&mut examples.false_alarms, id);
        }
        if o.early_alarm {
            Examples::keep(&mut examples.early_alarms, id);
        }
        if r.label && !caught {
            Examples::keep(&mut examples.missed, id);
        }
        if r.label {
            if caught {
                c.tp += 1;
            } else {
                c.fn_ += 1;
            }
            // The events before the onset are a loop-free run of their own.
            if r.loop_onset.is_some_and(|o| o > 0) {
                prefixes += 1;
                early += usize::from(o.early_alarm);
                if o.early_alarm {
                    c.fp += 1;
                } else {
                    c.tn += 1;
                }
            }
        } else if o.flagged {
            false_alarms += 1;
            c.fp += 1;
        } else {
            c.tn += 1;
        }
        let gi = match groups.iter().position(|g| g.group == r.group) {
            Some(i) => i,
            None => {
                groups.push(GroupOutcome {
                    group: r.group.clone(),
                    runs: 0,
                    loops: 0,
                    flagged: 0,
                    caught: 0,
                    false_alarms: 0,
                    early_alarms: 0,
                    mean_delay: None,
                });
                group_delays.push(Vec::new());
                groups.len() - 1
            }
        };
        let g = &mut groups[gi];
        g.runs += 1;
        g.loops += usize::from(r.label);
        g.flagged += usize::from(o.flagged);
        g.caught += usize::from(caught);
        g.false_alarms += usize::from(!r.label && o.flagged);
        g.early_alarms += usize::from(o.early_alarm);
        if o.flagged {
            if let Some(k) = &o.kind {
                *kinds.entry(k.clone()).or_default() += 1;
            }
        }
        if let (Some(onset), Some(at)) = (r.loop_onset, o.caught_at) {
            let d = at as i64 - onset as i64;
            delays.push(d);
            group_delays[gi].push(d);
        }
    }
    for (g, d) in groups.iter_mut().zip(group_delays) {
        g.mean_delay = DelayStats::of(d).mean;
    }
    PointReport {
        settings: settings.to_vec(),
        rates: Rates::from(c),
        false_alarms,
        early_alarms: early,
        loop_free_prefixes: prefixes,
        delay: DelayStats::of(delays.clone()),
        groups,
        kinds,
        examples,
        seconds: 0.0,
        texts_embedded: 0,
        delays,
    }
}

/// The recommended point: the highest F1 among points whose false-alarm rate is within
/// `false_alarm_slack` of the lowest in the sweep and at most `max_false_alarm_rate`; ties go to
/// the earliest detection (lower mean delay), then to higher setting values (higher thresholds
/// and repeat counts flag less on data not seen here).
fn choose(points: &[PointReport], opts: &RunsOptions, both_classes: bool) -> Option<usize> {
    if !both_classes {
        return None;
    }
    let quietest = points
        .iter()
        .filter_map(|p| p.rates.fpr)
        .fold(f64::INFINITY, f64::min);
    let limit = (quietest + opts.false_alarm_slack).min(opts.max_false_alarm_rate) + 1e-12;
    let numeric = |p: &PointReport| -> Vec<f64> {
        p.settings
            .iter()
            .map(|s| s.value.parse::<f64>().unwrap_or(0.0))
            .collect()
    };
    let mut best: Option<usize> = None;
    for (i, p) in points.iter().enumerate() {
        if p.rates.fpr.is_none_or(|f| f > limit) {
            continue;
        }
        let better = match best {
            None => true,
            Some(b) => {
                let q = &points[b];
                let (f, fq) = (p.rates.f1.unwrap_or(0.0), q.rates.f1.unwrap_or(0.0));
                if (f - fq).abs() > 1e-12 {
                    f > fq
                } else {
                    let (d, dq) = (
                        p.delay.mean.unwrap_or(f64::INFINITY),
                        q.delay.mean.unwrap_or(f64::INFINITY),
                    );
                    if (d - dq).abs() > 1e-12 {
                        d < dq
                    } else {
                        numeric(p)
                            .partial_cmp(&numeric(q))
                            .is_some_and(|o| o == std::cmp::Ordering::Greater)
                    }
                }
            }
        };
        if better {
            best = Some(i);
        }
    }
    best
}

#[cfg(test)]
mod tests;
