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
use std::sync::atomic::Ordering::Relaxed;
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

/// One setting swept over values: `detect.similarity.tool_call=0.8:0.96:0.02` or
/// `detect.repeats.tool_call=1,2,3`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepAxis {
    pub key: String,
    /// Values as TOML (numbers, booleans).
    pub values: Vec<String>,
}

/// Most values one axis may take, and most points a sweep may have: a sweep replays every run
/// at every point.
pub const MAX_AXIS_VALUES: usize = 200;
pub const MAX_POINTS: usize = 500;

impl std::str::FromStr for SweepAxis {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (key, spec) = s.split_once('=').ok_or_else(|| {
            format!("`{s}`: expected KEY=VALUES, e.g. detect.similarity.tool_call=0.8:0.96:0.02")
        })?;
        let key = key.trim();
        if key.is_empty() || key.split('.').any(str::is_empty) {
            return Err(format!("`{s}`: the key must be a dotted config path"));
        }
        let spec = spec.trim();
        let values = if spec.split(':').count() == 3 {
            range_values(spec).map_err(|e| format!("`{s}`: {e}"))?
        } else {
            spec.split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect()
        };
        if values.is_empty() {
            return Err(format!("`{s}`: no values"));
        }
        if values.len() > MAX_AXIS_VALUES {
            return Err(format!(
                "`{s}`: {} values; at most {MAX_AXIS_VALUES}",
                values.len()
            ));
        }
        Ok(SweepAxis {
            key: key.to_string(),
            values,
        })
    }
}

/// `START:STOP:STEP`, both ends included, written with as many decimals as the inputs use (so
/// 0.8:0.9:0.05 gives 0.80, 0.85, 0.90 and 1:3:1 gives integers).
fn range_values(spec: &str) -> Result<Vec<String>, String> {
    let parts: Vec<&str> = spec.split(':').map(str::trim).collect();
    let parse = |p: &str| {
        p.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("`{p}` is not a number"))
    };
    let (start, stop, step) = (parse(parts[0])?, parse(parts[1])?, parse(parts[2])?);
    if step <= 0.0 || stop < start {
        return Err("a range START:STOP:STEP needs STEP > 0 and STOP ≥ START".into());
    }
    let decimals = parts
        .iter()
        .map(|p| p.split_once('.').map(|(_, d)| d.len()).unwrap_or(0))
        .max()
        .unwrap_or(0);
    let count = ((stop - start) / step + 1e-9).floor() as usize + 1;
    if count > MAX_AXIS_VALUES {
        return Err(format!("{count} values; at most {MAX_AXIS_VALUES}"));
    }
    Ok((0..count)
        .map(|i| format!("{:.decimals$}", start + i as f64 * step))
        .collect())
}

/// One setting of a sweep point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setting {
    pub key: String,
    /// As TOML.
    pub value: String,
}

/// One point of the sweep: its settings and the configuration they make.
#[derive(Debug, Clone)]
pub struct SweepPoint {
    pub settings: Vec<Setting>,
    pub config: Arc<Config>,
}

/// Every combination of the axes' values applied over `base` (the last axis varies fastest),
/// each checked like a config file is. No axes: the one point `base`.
pub fn plan_sweep(base: &Config, axes: &[SweepAxis]) -> Result<Vec<SweepPoint>, CalibrateError> {
    let total: usize = axes.iter().map(|a| a.values.len()).product();
    if total > MAX_POINTS {
        return Err(CalibrateError::Invalid(format!(
            "the sweep has {total} points; at most {MAX_POINTS} (every run is replayed at every point)"
        )));
    }
    for (i, a) in axes.iter().enumerate() {
        if axes[..i].iter().any(|b| b.key == a.key) {
            return Err(CalibrateError::Invalid(format!(
                "`{}` is swept twice",
                a.key
            )));
        }
    }
    let base_toml = base.to_toml();
    let mut points = Vec::with_capacity(total);
    for n in 0..total {
        let mut rest = n;
        let mut settings = vec![
            Setting {
                key: String::new(),
                value: String::new()
            };
            axes.len()
        ];
        for (i, a) in axes.iter().enumerate().rev() {
            let v = &a.values[rest % a.values.len()];
            rest /= a.values.len();
            settings[i] = Setting {
                key: a.key.clone(),
                value: v.clone(),
            };
        }
        let overrides: Vec<(String, String)> = settings
            .iter()
            .map(|s| (s.key.clone(), s.value.clone()))
            .collect();
        let config = Config::load(
            Some(("the effective configuration", &base_toml)),
            std::iter::empty(),
            &overrides,
        )
        .map_err(|e| {
            CalibrateError::Invalid(format!("sweep point {}: {e}", describe(&settings)))
        })?;
        points.push(SweepPoint {
            settings,
            config: Arc::new(config),
        });
    }
    Ok(points)
}

/// `key=value, key=value` (or "the configuration as given" for the point without settings).
pub fn describe(settings: &[Setting]) -> String {
    if settings.is_empty() {
        return "the configuration as given".into();
    }
    settings
        .iter()
        .map(|s| format!("{}={}", s.key, s.value))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How `calibrate runs` runs.
#[derive(Debug, Clone)]
pub struct RunsOptions {
    /// Runs scored concurrently (they share the model thread, which batches their texts).
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
        let embedded_before = embedder.stats().texts_embedded.load(Relaxed);
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
        report.texts_embedded = embedder.stats().texts_embedded.load(Relaxed) - embedded_before;
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

/// Write `report.json`, `REPORT.md`, `recommended.toml` and the charts into `dir`.
pub fn write_outputs(report: &RunsReport, dir: &Path) -> Result<Written, CalibrateError> {
    let mut w = Written::create(dir)?;
    w.json(dir, "report.json", report)?;
    let mut files = Vec::new();
    for (name, chart) in charts(report) {
        w.text(dir, &name, &chart.to_svg())?;
        files.push(name);
    }
    w.text(dir, "REPORT.md", &markdown(report, &files))?;
    w.text(dir, "recommended.toml", &config_snippet(report))?;
    Ok(w)
}

/// The point the report's tables and delay chart describe: the recommended one, else the first.
fn focus(r: &RunsReport) -> usize {
    r.recommended.as_ref().map(|x| x.point).unwrap_or(0)
}

/// One run-level rate of a sweep point, for a chart.
type Metric = fn(&PointReport) -> Option<f64>;

fn charts(r: &RunsReport) -> Vec<(String, Chart)> {
    let mut out = Vec::new();
    // Metrics against the first axis, one line per combination of the other axes' values.
    if let Some(first) = r.axes.first() {
        let xs: Vec<f64> = first.values.iter().filter_map(|v| v.parse().ok()).collect();
        if xs.len() == first.values.len() {
            let (lo, hi) = xs
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
                    (a.min(*x), b.max(*x))
                });
            let mut lines: Vec<(String, Vec<usize>)> = Vec::new();
            for (i, p) in r.points.iter().enumerate() {
                let rest = describe(&p.settings[1..]);
                match lines.iter_mut().find(|(k, _)| *k == rest) {
                    Some((_, v)) => v.push(i),
                    None => lines.push((rest, vec![i])),
                }
            }
            let metrics: [(&str, &str, Metric); 3] = [
                ("f1", "run-level F1", |p| p.rates.f1),
                ("recall", "loops caught (recall)", |p| p.rates.recall),
                ("false-alarms", "false-alarm rate (FPR)", |p| p.rates.fpr),
            ];
            for (file, label, get) in metrics {
                let ymax = r.points.iter().filter_map(get).fold(0.0f64, f64::max);
                let ymax = if file == "false-alarms" {
                    (ymax * 1.2).max(0.05)
                } else {
                    1.0
                };
                let mut c = Chart::new(
                    format!("{label} by {}", first.key),
                    first.key.clone(),
                    label,
                    (lo, hi),
                    (0.0, ymax),
                );
                // The last colour (black) is the recommended point's.
                for (li, (name, members)) in lines.iter().take(PALETTE.len() - 1).enumerate() {
                    let pts: Vec<(f64, f64)> = members
                        .iter()
                        .filter_map(|&i| {
                            Some((
                                r.points[i].settings[0].value.parse().ok()?,
                                get(&r.points[i])?,
                            ))
                        })
                        .collect();
                    let name = if r.axes.len() > 1 {
                        Some(name.as_str())
                    } else {
                        None
                    };
                    let color = PALETTE[li];
                    c.line(name, color, Dash::Solid, &pts);
                    c.points(None, color, &pts);
                }
                if let Some(rec) = &r.recommended {
                    if let Ok(x) = rec.settings[0].value.parse::<f64>() {
                        c.vline(Some("recommended"), PALETTE[7], Dash::Dashed, x);
                    }
                }
                out.push((format!("runs-{file}.svg"), c.legend(Corner::Auto)));
            }
        }
    }
    let p = &r.points[focus(r)];
    if !p.delays.is_empty() {
        let lo = (*p.delays.first().expect("non-empty")).min(0) as f64;
        let hi = (*p.delays.last().expect("non-empty")).max(lo as i64 + 1) as f64;
        let bins = (hi - lo + 1.0) as usize;
        let (edges, counts) =
            plot::histogram(p.delays.iter().map(|d| *d as f64), lo - 0.5, hi + 0.5, bins);
        let ymax = counts.iter().copied().fold(1.0, f64::max) * 1.1;
        let mut c = Chart::new(
            format!("Detection delay at {}", describe(&p.settings)),
            "events after the loop onset (0 = caught at the first repeat)",
            "caught loop runs",
            (lo - 0.5, hi + 0.5),
            (0.0, ymax),
        );
        c.histogram(
            Some(&format!("{} caught loops with an onset", p.delay.measured)),
            PALETTE[0],
            &edges,
            &counts,
        );
        out.push(("runs-delay.svg".to_string(), c.legend(Corner::TopRight)));
    }
    out
}

fn markdown(r: &RunsReport, charts: &[String]) -> String {
    let mut s = String::new();
    s.push_str("# loopguard calibrate runs\n\n");
    s.push_str(&format!(
        "Generated by `loopguard calibrate runs` (loopguard {}), model: {}.\n\n",
        r.loopguard_version, r.model
    ));
    s.push_str(&format!(
        "{} labelled runs ({} loop, {} no_loop) replayed through the engine at {} sweep point(s). \
         Positives are the loop runs: caught by a loop verdict at or after their `loop_onset` (the first event that repeats what came before; \
         any loop verdict when a run has none). Negatives are the `no_loop` runs and the loop-free part before the onset of each loop run: \
         a loop verdict in a `no_loop` run is a *false alarm*, one before the onset an *early alarm*; precision, F1 and the false-alarm rate (FPR) count both. \
         Delay is the catching verdict's index minus the onset, in events.\n\n",
        r.runs,
        r.loops,
        r.no_loops,
        r.points.len()
    ));
    let mut t = Table::new(&["file", "runs", "loop", "no_loop"]);
    for i in &r.inputs {
        t.row(vec![
            format!("`{}`", i.file),
            i.runs.to_string(),
            i.loops.to_string(),
            i.no_loops.to_string(),
        ]);
    }
    s.push_str(&t.render());
    s.push('\n');
    for n in &r.notes {
        s.push_str(&format!("**{n}**\n\n"));
    }

    let fp_cell = |p: &PointReport| format!("{} / {}", p.false_alarms, r.no_loops);
    let early_cell = |p: &PointReport| format!("{} / {}", p.early_alarms, p.loop_free_prefixes);
    if let Some(rec) = &r.recommended {
        let p = &r.points[rec.point];
        s.push_str("## Recommended operating point\n\n");
        s.push_str(&format!("`{}` — {}.\n\n", describe(&p.settings), rec.rule));
        let mut t = Table::new(&[
            "precision",
            "recall",
            "F1",
            "false alarms",
            "early alarms",
            "mean delay",
            "median delay",
            "caught at onset",
        ]);
        t.row(vec![
            num(p.rates.precision, 3),
            num(p.rates.recall, 3),
            num(p.rates.f1, 3),
            fp_cell(p),
            early_cell(p),
            num(p.delay.mean, 2),
            num(p.delay.median, 1),
            format!("{} / {}", p.delay.at_onset, p.delay.measured),
        ]);
        s.push_str(&t.render());
        s.push_str("\nThe snippet is in [`recommended.toml`](recommended.toml).\n\n");
    }

    let fp = focus(r);
    let p = &r.points[fp];
    s.push_str(&format!("## By group at `{}`\n\n", describe(&p.settings)));
    let mut t = Table::new(&[
        "group",
        "runs",
        "loop",
        "flagged",
        "loops caught",
        "false alarms",
        "early alarms",
        "mean delay",
    ]);
    for g in &p.groups {
        t.row(vec![
            g.group.clone(),
            g.runs.to_string(),
            g.loops.to_string(),
            g.flagged.to_string(),
            if g.loops > 0 {
                format!("{} / {}", g.caught, g.loops)
            } else {
                "–".into()
            },
            if g.runs > g.loops {
                format!("{} / {}", g.false_alarms, g.runs - g.loops)
            } else {
                "–".into()
            },
            if g.loops > 0 {
                g.early_alarms.to_string()
            } else {
                "–".into()
            },
            num(g.mean_delay, 2),
        ]);
    }
    s.push_str(&t.render());
    if !p.kinds.is_empty() {
        s.push_str("\nKind of the deciding verdict (the catch, else the first loop verdict) of the flagged runs: ");
        s.push_str(
            &p.kinds
                .iter()
                .map(|(k, n)| format!("`{k}` {n}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        s.push_str(".\n");
    }
    for (what, ids) in [
        ("False alarms", &p.examples.false_alarms),
        ("Early alarms", &p.examples.early_alarms),
        ("Missed loops", &p.examples.missed),
    ] {
        if !ids.is_empty() {
            s.push_str(&format!(
                "\n{what} (the first {}): {}.\n",
                ids.len(),
                ids.iter()
                    .map(|i| format!("`{i}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    s.push('\n');

    s.push_str("## Sweep\n\n");
    let mut head: Vec<String> = r.axes.iter().map(|a| format!("`{}`", a.key)).collect();
    head.extend(
        [
            "P",
            "R",
            "F1",
            "false alarms",
            "early alarms",
            "mean delay",
            "seconds",
            "texts embedded",
        ]
        .map(String::from),
    );
    let head_refs: Vec<&str> = head.iter().map(String::as_str).collect();
    let mut t = Table::new(&head_refs);
    for (i, p) in r.points.iter().enumerate() {
        let mut row: Vec<String> = p
            .settings
            .iter()
            .map(|x| {
                if Some(i) == r.recommended.as_ref().map(|x| x.point) {
                    format!("**{}**", x.value)
                } else {
                    x.value.clone()
                }
            })
            .collect();
        row.extend([
            num(p.rates.precision, 3),
            num(p.rates.recall, 3),
            num(p.rates.f1, 3),
            fp_cell(p),
            early_cell(p),
            num(p.delay.mean, 2),
            format!("{:.1}", p.seconds),
            p.texts_embedded.to_string(),
        ]);
        t.row(row);
    }
    s.push_str(&t.render());
    if r.points.len() > 1 {
        let first = &r.points[0];
        let mut later: Vec<f64> = r.points[1..].iter().map(|p| p.seconds).collect();
        later.sort_by(f64::total_cmp);
        let embedded_later: u64 = r.points[1..].iter().map(|p| p.texts_embedded).sum();
        s.push_str(&format!(
            "\nOne embedder serves the whole sweep: the first point took {:.1} s and embedded {} texts; \
             the {} later points took {:.1} s each (median) and embedded {} texts between them.\n",
            first.seconds,
            first.texts_embedded,
            r.points.len() - 1,
            later[later.len() / 2],
            embedded_later
        ));
    }
    s.push('\n');
    for c in charts {
        s.push_str(&format!("![{c}]({c})\n"));
    }
    s
}

/// The recommended point's `[detect.similarity]` thresholds and swept keys, as a config snippet.
pub fn config_snippet(r: &RunsReport) -> String {
    let cfg = &r.snippet_config;
    let mut header = vec![format!(
        "Settings recommended by `loopguard calibrate runs` (loopguard {}).",
        r.loopguard_version
    )];
    match &r.recommended {
        Some(rec) => {
            let p = &r.points[rec.point];
            header.push(format!("Point: {}.", describe(&p.settings)));
            header.push(format!(
                "On {} labelled runs: precision {}, recall {}, F1 {}, false alarms {} of {} no_loop runs, early alarms {} of {} loop runs, mean delay {} events.",
                r.runs,
                num(p.rates.precision, 3),
                num(p.rates.recall, 3),
                num(p.rates.f1, 3),
                p.false_alarms,
                r.no_loops,
                p.early_alarms,
                p.loop_free_prefixes,
                num(p.delay.mean, 2)
            ));
        }
        None => header.push("No point met the rule: these are the settings as given.".into()),
    }
    header.push("Paste into your loopguard config file, or pass this file with --config.".into());
    let swept = |s: &Setting| {
        let values = r
            .axes
            .iter()
            .find(|a| a.key == s.key)
            .map(|a| a.values.join(", "))
            .unwrap_or_default();
        format!("swept over {values}")
    };
    let mut entries: Vec<SnippetEntry> = PairKind::ALL
        .iter()
        .map(|k| SnippetEntry {
            table: "detect.similarity".into(),
            key: k.as_str().into(),
            value: k.threshold(cfg).to_string(),
            comment: None,
        })
        .collect();
    if let Some(rec) = &r.recommended {
        for s in &rec.settings {
            let (table, key) = s.key.rsplit_once('.').unwrap_or(("", s.key.as_str()));
            if let Some(e) = entries
                .iter_mut()
                .find(|e| e.table == table && e.key == key)
            {
                e.value = s.value.clone();
                e.comment = Some(swept(s));
            } else {
                entries.push(SnippetEntry {
                    table: table.to_string(),
                    key: key.to_string(),
                    value: s.value.clone(),
                    comment: Some(swept(s)),
                });
            }
        }
    }
    report::snippet(&header, &entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_axes_parse() {
        let a: SweepAxis = "detect.similarity.tool_call=0.8:0.9:0.05".parse().unwrap();
        assert_eq!(a.values, ["0.80", "0.85", "0.90"]);
        let a: SweepAxis = "detect.repeats.tool_call=1:3:1".parse().unwrap();
        assert_eq!(a.values, ["1", "2", "3"]);
        let a: SweepAxis = "detect.repeats.tool_call = 1, 3".parse().unwrap();
        assert_eq!(
            (a.key.as_str(), a.values.len()),
            ("detect.repeats.tool_call", 2)
        );
        assert!("detect.similarity.tool_call".parse::<SweepAxis>().is_err());
        assert!("x=0.9:0.8:0.1".parse::<SweepAxis>().is_err());
        assert!("x=0:1:0.001".parse::<SweepAxis>().is_err());
        assert!("x=".parse::<SweepAxis>().is_err());
    }

    #[test]
    fn sweep_points_are_checked_configs() {
        let base = Config::default();
        let axes = vec![
            "detect.similarity.tool_call=0.8,0.9".parse().unwrap(),
            "detect.repeats.tool_call=1,2".parse().unwrap(),
        ];
        let points = plan_sweep(&base, &axes).unwrap();
        assert_eq!(points.len(), 4);
        assert_eq!(
            describe(&points[1].settings),
            "detect.similarity.tool_call=0.8, detect.repeats.tool_call=2"
        );
        assert_eq!(points[1].config.detect.similarity.tool_call, 0.8);
        assert_eq!(points[1].config.detect.repeats.tool_call, 2);
        let bad = vec!["detect.similarity.tool_cal=0.8".parse().unwrap()];
        let e = plan_sweep(&base, &bad).unwrap_err().to_string();
        assert!(e.contains("tool_cal"), "{e}");
        let bad = vec!["detect.repeats.tool_call=0".parse().unwrap()];
        assert!(plan_sweep(&base, &bad).is_err());
        assert_eq!(plan_sweep(&base, &[]).unwrap().len(), 1);
    }

    #[test]
    fn labelled_runs_need_a_label_and_a_sane_onset() {
        let ok = parse_labelled_run(
            r#"{"id":"r","events":[{"type":"failure","message":"x"},{"type":"failure","message":"x"}],"label":"loop","loop_onset":1,"group":"g"}"#,
            "file",
        )
        .unwrap();
        assert_eq!(
            (ok.label, ok.loop_onset, ok.group.as_str()),
            (true, Some(1), "g")
        );
        let e = parse_labelled_run(r#"{"id":"r","events":[]}"#, "f").unwrap_err();
        assert_eq!(e.path, "label");
        let e = parse_labelled_run(
            r#"{"id":"r","events":[],"label":"loop","loop_onset":0}"#,
            "f",
        )
        .unwrap_err();
        assert_eq!(e.path, "loop_onset");
        let e = parse_labelled_run(r#"{"id":"r","events":[{"type":"failure","message":"x"}],"label":"no_loop","loop_onset":0}"#, "f").unwrap_err();
        assert_eq!(e.path, "loop_onset");
        let d = parse_labelled_run(r#"{"id":"r","events":[],"label":"no_loop"}"#, "f").unwrap();
        assert_eq!(d.group, "f");
    }

    fn point(
        settings: &[(&str, &str)],
        tp: usize,
        fp: usize,
        fn_: usize,
        tn: usize,
        delays: Vec<i64>,
    ) -> PointReport {
        let c = Confusion { tp, fp, tn, fn_ };
        PointReport {
            settings: settings
                .iter()
                .map(|(k, v)| Setting {
                    key: k.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            rates: Rates::from(c),
            false_alarms: fp,
            delay: DelayStats::of(delays.clone()),
            groups: Vec::new(),
            early_alarms: 0,
            loop_free_prefixes: 0,
            kinds: BTreeMap::new(),
            examples: Examples::default(),
            seconds: 0.0,
            texts_embedded: 0,
            delays,
        }
    }

    #[test]
    fn the_recommended_point_keeps_false_alarms_in_bounds() {
        let pts = vec![
            point(&[("t", "0.8")], 9, 2, 1, 8, vec![1]), // best F1, but false alarms
            point(&[("t", "0.85")], 7, 0, 3, 10, vec![2]),
            point(&[("t", "0.9")], 7, 0, 3, 10, vec![1]), // same F1, earlier
            point(&[("t", "0.95")], 7, 0, 3, 10, vec![1]), // same again: higher value wins
        ];
        let opts = |slack: f64, max: f64| RunsOptions {
            jobs: 1,
            false_alarm_slack: slack,
            max_false_alarm_rate: max,
        };
        // No slack: only the quietest points (no false alarm) qualify.
        assert_eq!(choose(&pts, &opts(0.0, 1.0), true), Some(3));
        // Slack for two false alarms in ten negatives: the best F1 wins.
        assert_eq!(choose(&pts, &opts(0.2, 1.0), true), Some(0));
        // An absolute limit holds whatever the slack.
        assert_eq!(choose(&pts, &opts(1.0, 0.1), true), Some(3));
        assert_eq!(choose(&pts, &opts(0.0, 1.0), false), None);
        // False alarms no point avoids are not held against the quietest point...
        let noisy = vec![point(&[("t", "0.8")], 9, 2, 1, 8, vec![])];
        assert_eq!(choose(&noisy, &opts(0.0, 1.0), true), Some(0));
        // ... unless they pass the absolute limit.
        assert_eq!(choose(&noisy, &opts(0.0, 0.1), true), None);
    }

    #[test]
    fn delay_statistics() {
        let d = DelayStats::of(vec![2, 0, 0, 1, 3]);
        assert_eq!((d.measured, d.at_onset, d.max), (5, 2, Some(3)));
        assert_eq!(d.mean, Some(1.2));
        assert_eq!(d.median, Some(1.0));
        assert_eq!(DelayStats::of(vec![0, 3]).median, Some(1.5));
        assert_eq!(DelayStats::of(vec![]).mean, None);
    }
}
