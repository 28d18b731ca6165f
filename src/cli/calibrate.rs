//! `loopguard calibrate`: threshold calibration on labelled pairs and labelled runs. The work is
//! in `loopguard::calibrate`; this module parses arguments, loads the model, draws progress bars.

use super::Cli;
use loopguard::calibrate::pairs::{self, PairsInput, PairsOptions, Rule};
use loopguard::calibrate::runs::{self, RunsInput, RunsOptions, SweepAxis};
use loopguard::calibrate::PairKind;
use loopguard::embed::Embedder;
use loopguard::Config;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct CalibrateArgs {
    #[command(subcommand)]
    pub command: CalibrateCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum CalibrateCommand {
    /// Labelled text pairs: ROC-AUC, PR-AUC and thresholds per event kind for the embedding,
    /// loopguard's matcher and the lexical baselines (exact, word Jaccard, Levenshtein).
    Pairs(PairsArgs),
    /// Labelled recorded runs: replay them over a sweep of settings and measure run-level
    /// precision, recall, false alarms and detection delay.
    Runs(RunsArgs),
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecommendRule {
    /// The highest F1: a false alarm costs as much as a missed loop.
    BestF1,
    /// The most recall at precision ≥ --target-precision.
    TargetPrecision,
    /// The most recall at false-positive rate ≤ --target-fpr.
    TargetFpr,
}

#[derive(clap::Args, Debug)]
pub struct PairsArgs {
    /// Labelled pairs, one JSON object per line: {"a": "...", "b": "...", "label": 0|1} with an
    /// optional "kind" (failure, collaboration, tool_call, result, response). Write KIND=FILE to
    /// give every line of FILE that names no kind that kind, e.g. failure=bugs.jsonl.
    #[arg(value_name = "[KIND=]FILE", required = true, value_parser = parse_pairs_input)]
    pub inputs: Vec<(Option<PairKind>, PathBuf)>,

    /// Directory for report.json, REPORT.md, recommended.toml and the SVG charts (created if
    /// missing; files of the same name are replaced).
    #[arg(long, value_name = "DIR")]
    pub out_dir: PathBuf,

    /// Report, per scorer, the threshold with the most recall at this precision or better.
    #[arg(long, default_value_t = 0.95, value_parser = unit_interval)]
    pub target_precision: f64,

    /// Report, per scorer, the threshold with the most recall at this false-positive rate or less.
    #[arg(long, default_value_t = 0.01, value_parser = unit_interval)]
    pub target_fpr: f64,

    /// Which threshold of loopguard's matcher becomes the recommendation in recommended.toml.
    #[arg(long, value_enum, default_value = "best-f1")]
    pub recommend: RecommendRule,

    /// Texts per embedding call (the progress bar moves after each).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch: u32,

    /// Embeddings kept in memory: at least this many, or [model] cache_entries if larger.
    #[arg(long, default_value_t = 100_000)]
    pub cache_entries: usize,
}

#[derive(clap::Args, Debug)]
pub struct RunsArgs {
    /// Labelled runs, one per line: `loopguard score` input plus "label": "loop" | "no_loop",
    /// optionally "group" (results are broken down by it; default: the file's name without
    /// extension) and "loop_onset" (0-based index of the first repeating event; detection delay
    /// is counted from it).
    #[arg(value_name = "FILE", required = true)]
    pub inputs: Vec<PathBuf>,

    /// Directory for report.json, REPORT.md, recommended.toml and the SVG charts (created if
    /// missing; files of the same name are replaced).
    #[arg(long, value_name = "DIR")]
    pub out_dir: PathBuf,

    /// A setting to sweep, KEY=V1,V2,... or KEY=START:STOP:STEP (both ends included), e.g.
    /// detect.similarity.tool_call=0.80:0.96:0.02 or detect.repeats.tool_call=1,2,3. Repeat for
    /// more axes: every combination is a sweep point, applied over --config. Without any, the
    /// configuration as given is measured.
    #[arg(long = "sweep", value_name = "KEY=VALUES")]
    pub sweep: Vec<SweepAxis>,

    /// Recommend only points whose false-alarm rate (loop verdicts in no_loop runs and before
    /// the onset of loop runs) is at most the sweep's lowest plus this. 0: a recommended point
    /// adds no false alarm that another point avoids; false alarms no point avoids (exact
    /// repeats, label noise) are not held against it.
    #[arg(long, default_value_t = 0.0, value_parser = unit_interval)]
    pub false_alarm_slack: f64,

    /// Recommend only points whose false-alarm rate is at most this, whatever the lowest is.
    #[arg(long, default_value_t = 1.0, value_parser = unit_interval)]
    pub max_false_alarm_rate: f64,

    /// Runs scored concurrently, their texts shared among the model workers. Default: 4 per
    /// model worker (model.workers), at least 8, so that every worker has work waiting.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub jobs: Option<u32>,

    /// Embeddings kept in memory: at least this many, or [model] cache_entries if larger. Later
    /// sweep points are fast only when every text of the runs fits.
    #[arg(long, default_value_t = 200_000)]
    pub cache_entries: usize,
}

fn unit_interval(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("must be between 0 and 1, got {v}"))
    }
}

/// `FILE` or `KIND=FILE`. A path that exists is a path even if it contains `=`.
fn parse_pairs_input(s: &str) -> Result<(Option<PairKind>, PathBuf), String> {
    if Path::new(s).exists() {
        return Ok((None, PathBuf::from(s)));
    }
    match s.split_once('=') {
        Some((kind, file)) => {
            let kind = PairKind::parse(kind).ok_or_else(|| {
                format!(
                    "unknown kind `{kind}` in `{s}`; expected one of {}",
                    PairKind::names()
                )
            })?;
            Ok((Some(kind), PathBuf::from(file)))
        }
        None => Ok((None, PathBuf::from(s))),
    }
}

fn config(cli: &Cli, cache_entries: usize) -> Result<Config, String> {
    let mut cfg = super::load_config(cli.config.as_deref(), &[]).map_err(|e| e.to_string())?;
    // Every text of a calibration is looked at again (pairs share texts, sweep points replay
    // runs): the cache must hold them all or later passes pay the model again.
    cfg.model.cache_entries = cfg.model.cache_entries.max(cache_entries);
    Ok(cfg)
}

fn model(cfg: &Config) -> Result<Embedder, String> {
    Embedder::load_batch_model(&cfg.model).map_err(|e| e.to_string())
}

fn bar(total: u64, template: &str) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total).with_style(
        indicatif::ProgressStyle::with_template(template)
            .expect("progress template")
            .progress_chars("=> "),
    );
    Some(bar)
}

pub fn run(cli: &Cli, args: &CalibrateArgs) -> Result<(), String> {
    match &args.command {
        CalibrateCommand::Pairs(a) => run_pairs(cli, a),
        CalibrateCommand::Runs(a) => run_runs(cli, a),
    }
}

fn run_pairs(cli: &Cli, args: &PairsArgs) -> Result<(), String> {
    // Read and check every file before the model loads: a bad line should fail in a second.
    let mut all = Vec::new();
    let mut inputs = Vec::new();
    for (i, (kind, path)) in args.inputs.iter().enumerate() {
        let pairs = pairs::read_pairs(path, *kind, i).map_err(|e| e.to_string())?;
        inputs.push(PairsInput {
            file: path.display().to_string(),
            kind: *kind,
            pairs: pairs.len(),
            positives: pairs.iter().filter(|p| p.label).count(),
        });
        all.extend(pairs);
    }
    let cfg = config(cli, args.cache_entries)?;
    let embedder = model(&cfg)?;
    let opts = PairsOptions {
        target_precision: args.target_precision,
        target_fpr: args.target_fpr,
        rule: match args.recommend {
            RecommendRule::BestF1 => Rule::BestF1,
            RecommendRule::TargetPrecision => Rule::TargetPrecision,
            RecommendRule::TargetFpr => Rule::TargetFpr,
        },
        batch: args.batch as usize,
    };
    let started = Instant::now();
    let progress = bar(
        0,
        "{spinner} embedding [{bar:30}] {pos}/{len} texts ({elapsed}, {eta} left)",
    );
    let report = pairs::calibrate_pairs(&cfg, &embedder, inputs, &all, &opts, |done, total| {
        if let Some(b) = &progress {
            b.set_length(total as u64);
            b.set_position(done as u64);
        }
    })
    .map_err(|e| e.to_string())?;
    if let Some(b) = progress {
        b.finish_and_clear();
    }
    let written = pairs::write_outputs(&report, &args.out_dir).map_err(|e| e.to_string())?;
    eprintln!(
        "loopguard: {} pairs, {} distinct texts ({} embedded) in {:.1}s; wrote {} files to {}",
        all.len(),
        report.embedding.texts,
        report.embedding.embedded,
        started.elapsed().as_secs_f64(),
        written.files.len(),
        args.out_dir.display()
    );
    embedder.persist();
    if let Some(line) = embedder.disk_summary() {
        eprintln!("loopguard: {line}");
    }
    for g in &report.groups {
        if let (Some(k), Some(r)) = (g.kind, &g.recommended) {
            eprintln!(
                "loopguard: {} = {} (F1 {:.3}; was {})",
                k.config_key(),
                loopguard::calibrate::report::threshold(r.value),
                r.rates.f1.unwrap_or(0.0),
                r.current
                    .map(loopguard::calibrate::report::threshold)
                    .unwrap_or_default()
            );
        }
    }
    Ok(())
}

fn run_runs(cli: &Cli, args: &RunsArgs) -> Result<(), String> {
    let mut all = Vec::new();
    let mut inputs = Vec::new();
    for path in &args.inputs {
        let runs = runs::read_runs(path).map_err(|e| e.to_string())?;
        let loops = runs.iter().filter(|r| r.label).count();
        inputs.push(RunsInput {
            file: path.display().to_string(),
            runs: runs.len(),
            loops,
            no_loops: runs.len() - loops,
        });
        all.extend(runs);
    }
    // Check the whole sweep before the model loads: a misspelt key fails at once.
    let cfg = config(cli, args.cache_entries)?;
    let points = runs::plan_sweep(&cfg, &args.sweep).map_err(|e| e.to_string())?;
    let embedder = model(&cfg)?;
    let opts = RunsOptions {
        jobs: args.jobs.map_or_else(
            || loopguard::embed::default_jobs(embedder.workers()),
            |j| j as usize,
        ),
        false_alarm_slack: args.false_alarm_slack,
        max_false_alarm_rate: args.max_false_alarm_rate,
    };
    let started = Instant::now();
    let total = (points.len() * all.len()) as u64;
    let progress = bar(
        total,
        "{spinner} replaying [{bar:30}] {pos}/{len} runs {msg} ({elapsed}, {eta} left)",
    );
    let descriptions: Vec<String> = points.iter().map(|p| runs::describe(&p.settings)).collect();
    let report = runs::calibrate_runs(
        &embedder,
        inputs,
        &all,
        args.sweep.clone(),
        points,
        &opts,
        |p| {
            if let Some(b) = &progress {
                b.set_position((p.point * p.runs + p.runs_done) as u64);
                b.set_message(format!(
                    "— point {}/{}: {}",
                    p.point + 1,
                    p.points,
                    descriptions[p.point]
                ));
            }
        },
    )
    .map_err(|e| e.to_string())?;
    if let Some(b) = progress {
        b.finish_and_clear();
    }
    let written = runs::write_outputs(&report, &args.out_dir).map_err(|e| e.to_string())?;
    eprintln!(
        "loopguard: {} runs × {} sweep points in {:.1}s; wrote {} files to {}",
        all.len(),
        report.points.len(),
        started.elapsed().as_secs_f64(),
        written.files.len(),
        args.out_dir.display()
    );
    embedder.persist();
    if let Some(line) = embedder.disk_summary() {
        eprintln!("loopguard: {line}");
    }
    match &report.recommended {
        Some(r) => {
            let p = &report.points[r.point];
            eprintln!(
                "loopguard: recommended {} (F1 {:.3}, {} of {} no_loop runs flagged, {} early alarms)",
                runs::describe(&r.settings),
                p.rates.f1.unwrap_or(0.0),
                p.false_alarms,
                report.no_loops,
                p.early_alarms
            );
        }
        None => eprintln!("loopguard: no sweep point is recommended; see REPORT.md"),
    }
    Ok(())
}
