//! `loopguard eval`: detection measured on labelled runs. The work is in `loopguard::eval`; this
//! module parses arguments, loads the model, draws the progress bar and writes the files.

use super::Cli;
use loopguard::calibrate::runs::SweepAxis;
use loopguard::embed::Embedder;
use loopguard::eval::{self, EvalOptions, JudgeMode};
use loopguard::judge::JudgeVerdict;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlwaysVerdict {
    /// Every ambiguous event is progress: must equal the figures without a judge.
    Progress,
    /// Every ambiguous event is a loop: the most a judge can add to recall (and the worst case
    /// for false alarms).
    NoProgress,
}

#[derive(clap::Args, Debug)]
pub struct EvalArgs {
    /// Labelled runs, one per line: `loopguard score` input plus "label": "loop" | "no_loop",
    /// and for a loop "first_loop_converted" (index into "events" of the event at which it is
    /// plainly a loop); optional "kind", "reworded", "confidence", "why". Several files are
    /// several families of agents: the report gives each family's figures (and, with --by-rule,
    /// each rule's per family), and a --sweep measures each family at the point chosen on the
    /// others. A family is named NAME=FILE, or after its file (aider_labelled_dev.jsonl: aider).
    #[arg(value_name = "LABELLED.jsonl", required = true, num_args = 1..)]
    pub inputs: Vec<LabelledInput>,

    /// Unlabelled healthy runs (`score` input): every run flagged is a false alarm. Repeat for
    /// more files.
    #[arg(long = "control", value_name = "FILE")]
    pub controls: Vec<PathBuf>,

    /// Write the full report here as JSON: every labelled run with the verdict behind its outcome,
    /// the figures of every sweep point and fold, the controls.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Write an SVG chart of recall per labelled kind and precision per verdict kind here.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,

    /// Runs scored concurrently, their texts shared among the model workers. Default: 4 per
    /// model worker (model.workers), at least 8, so that every worker has work waiting.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub jobs: Option<u32>,

    /// Replace the configured judge with a test judge that gives this answer to every question,
    /// counting them.
    #[arg(long, value_enum, value_name = "VERDICT")]
    pub judge_always: Option<AlwaysVerdict>,

    /// Split the labelled runs into this many folds, stratified by label and kind, and report
    /// each; with --sweep, each fold is measured at the point chosen on the other folds.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(2..=100))]
    pub folds: Option<u32>,

    /// Seed of the fold split.
    #[arg(long, default_value_t = 1, requires = "folds")]
    pub seed: u64,

    /// A setting to sweep, KEY=V1,V2,... or KEY=START:STOP:STEP (both ends included), as in
    /// `loopguard calibrate runs`. Repeat for more axes; every combination is replayed.
    #[arg(long = "sweep", value_name = "KEY=VALUES")]
    pub sweep: Vec<SweepAxis>,

    /// Measure every rule of the detection table (`loopguard rules`) at the evaluated point:
    /// the runs it fired first on (loops on time, late, false alarms, control runs), and, by
    /// replaying the runs it decided with it switched off, the loops only it catches on time and
    /// the false alarms only it raises; with --folds, whether each fold's other folds keep it.
    #[arg(long)]
    pub by_rule: bool,

    /// With --by-rule's measurement, print the whole figures without each rule (P, R, F1, on
    /// time, reworded on time, false alarms, controls): leave-one-rule-out.
    #[arg(long)]
    pub ablate: bool,

    /// Embeddings kept in memory: at least this many, or [model] cache_entries if larger. Later
    /// sweep points are fast only when every text of the runs fits.
    #[arg(long, default_value_t = 200_000)]
    pub cache_entries: usize,
}

/// A labelled file, with the name of its family when one is given (`NAME=FILE`).
#[derive(Debug, Clone)]
pub struct LabelledInput {
    pub family: Option<String>,
    pub path: PathBuf,
}

impl std::str::FromStr for LabelledInput {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        // NAME=FILE only when NAME looks like a name: a path may hold '=' itself.
        match s.split_once('=') {
            Some((name, path))
                if !name.is_empty()
                    && !path.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.')) =>
            {
                Ok(LabelledInput {
                    family: Some(name.to_string()),
                    path: PathBuf::from(path),
                })
            }
            _ => Ok(LabelledInput {
                family: None,
                path: PathBuf::from(s),
            }),
        }
    }
}

pub fn run(cli: &Cli, args: &EvalArgs) -> Result<(), String> {
    // Read and check every file, and the sweep, before the model loads: a bad line fails at once.
    let inputs: Vec<(Option<String>, &std::path::Path)> = args
        .inputs
        .iter()
        .map(|i| (i.family.clone(), i.path.as_path()))
        .collect();
    let labelled = eval::read_families(&inputs).map_err(|e| e.to_string())?;
    let controls = args
        .controls
        .iter()
        .map(|p| eval::read_control(p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let mut cfg = super::load_config(cli.config.as_deref(), &[]).map_err(|e| e.to_string())?;
    // Sweep points replay every run: the cache must hold their texts or each point pays the
    // model again.
    cfg.model.cache_entries = cfg.model.cache_entries.max(args.cache_entries);
    loopguard::calibrate::runs::plan_sweep(&cfg, &args.sweep).map_err(|e| e.to_string())?;
    for p in args.json.iter().chain(&args.svg) {
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => std::path::Path::new("."),
        };
        if !dir.is_dir() {
            return Err(format!(
                "cannot write {}: {} is not a directory",
                p.display(),
                dir.display()
            ));
        }
    }
    let embedder = Embedder::load_batch_model(&cfg.model).map_err(|e| e.to_string())?;

    let opts = EvalOptions {
        jobs: args.jobs.map_or_else(
            || loopguard::embed::default_jobs(embedder.workers()),
            |j| j as usize,
        ),
        judge: match args.judge_always {
            None => JudgeMode::Configured,
            Some(AlwaysVerdict::Progress) => JudgeMode::Always(JudgeVerdict::Progress),
            Some(AlwaysVerdict::NoProgress) => JudgeMode::Always(JudgeVerdict::NoProgress),
        },
        folds: args.folds.map(|k| k as usize),
        seed: args.seed,
        by_rule: args.by_rule || args.ablate,
        ablate: args.ablate,
    };
    let bar = std::io::stderr().is_terminal().then(|| {
        indicatif::ProgressBar::new(0).with_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} replaying [{bar:30}] {pos}/{len} runs {msg} ({elapsed})",
            )
            .expect("progress template")
            .progress_chars("=> "),
        )
    });
    let started = Instant::now();
    let report = eval::evaluate(
        &cfg,
        &embedder,
        &labelled,
        &controls,
        args.sweep.clone(),
        &opts,
        |p| {
            if let Some(b) = &bar {
                b.set_length(p.runs as u64);
                b.set_position(p.runs_done as u64);
                let point = if p.points > 1 {
                    format!("point {}/{}, ", p.point + 1, p.points)
                } else {
                    String::new()
                };
                b.set_message(format!("— {point}{}", p.file));
            }
        },
    )
    .map_err(|e| e.to_string())?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    embedder.persist();

    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(eval::report::text(&report).as_bytes())
        .and_then(|_| stdout.flush())
        .map_err(|e| format!("writing the report: {e}"))?;
    if let Some(p) = &args.json {
        let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(p, json + "\n").map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    if let Some(p) = &args.svg {
        std::fs::write(p, eval::report::chart(&report).to_svg())
            .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    let m = &report.result.metrics;
    eprintln!(
        "loopguard: evaluated {} labelled runs{} × {} point(s) in {:.1}s: P {} R {} F1 {}, {} of {} loops on time",
        report.input.runs,
        if controls.is_empty() {
            String::new()
        } else {
            format!(
                " and {} control runs",
                controls.iter().map(|c| c.runs.len()).sum::<usize>()
            )
        },
        report.points.len(),
        started.elapsed().as_secs_f64(),
        loopguard::calibrate::report::num(m.rates.precision, 3),
        loopguard::calibrate::report::num(m.rates.recall, 3),
        loopguard::calibrate::report::num(m.rates.f1, 3),
        m.on_time,
        m.loops
    );
    if let Some(line) = embedder.disk_summary() {
        eprintln!("loopguard: {line}");
    }
    Ok(())
}
