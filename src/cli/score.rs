//! `loopguard score`: the brief's CLI contract.

use super::Cli;
use loopguard::embed::Embedder;
use loopguard::score::html::HtmlReport;
use loopguard::score::{score_stream, ScoreOptions};
use std::io::{BufRead, BufReader, IsTerminal};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct ScoreArgs {
    /// Recorded runs, one per line: {"id": "...", "events": [ <envelope or bare event>, ... ]}.
    /// `-` reads standard input.
    #[arg(value_name = "INPUT.jsonl")]
    pub input: PathBuf,

    /// Write the result here instead of standard output.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Runs scored concurrently, their texts shared among the model workers. Default: 4 per
    /// model worker (model.workers), at least 8, so that every worker has work waiting.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub jobs: Option<u32>,

    /// One short line per run, without the per-event verdicts.
    #[arg(long)]
    pub summary: bool,

    /// Also write a self-contained HTML page: each run's events with the verdicts they got,
    /// loops highlighted (the JSON lines are written as usual).
    #[arg(long, value_name = "REPORT.html")]
    pub html: Option<PathBuf>,
}

pub fn run(cli: &Cli, args: &ScoreArgs) -> Result<(), String> {
    let cfg = Arc::new(super::load_config(cli.config.as_deref(), &[]).map_err(|e| e.to_string())?);
    let (input, total): (Box<dyn BufRead + Send>, Option<u64>) = if args.input.as_os_str() == "-" {
        (Box::new(BufReader::new(std::io::stdin())), None)
    } else {
        let f = std::fs::File::open(&args.input)
            .map_err(|e| format!("cannot open {}: {e}", args.input.display()))?;
        let len = f.metadata().ok().map(|m| m.len());
        (Box::new(BufReader::new(f)), len)
    };
    let output: Box<dyn std::io::Write> = match &args.output {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).map_err(|e| format!("cannot create {}: {e}", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let mut report = match &args.html {
        Some(p) => {
            let source = if args.input.as_os_str() == "-" {
                "stdin".to_string()
            } else {
                args.input.display().to_string()
            };
            Some(
                HtmlReport::create(p, &source)
                    .map_err(|e| format!("cannot create {}: {e}", p.display()))?,
            )
        }
        None => None,
    };
    let embedder = Embedder::load_batch_model(&cfg.model).map_err(|e| e.to_string())?;

    let bar = if std::io::stderr().is_terminal() {
        let bar = match total {
            Some(n) => indicatif::ProgressBar::new(n).with_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} scoring [{bar:30}] {bytes}/{total_bytes} {msg} ({elapsed})",
                )
                .expect("progress template")
                .progress_chars("=> "),
            ),
            None => indicatif::ProgressBar::new_spinner(),
        };
        Some(bar)
    } else {
        None
    };
    let started = Instant::now();
    let opts = ScoreOptions {
        jobs: args.jobs.map_or_else(
            || loopguard::embed::default_jobs(embedder.workers()),
            |j| j as usize,
        ),
        summary_only: args.summary,
        keep_events: report.is_some(),
    };
    let mut report_error = None;
    let mut runs = 0usize;
    let mut flagged = 0usize;
    let stats_handle = embedder.clone();
    let summary = score_stream(
        input,
        output,
        cfg,
        embedder,
        &opts,
        |consumed, run, score| {
            runs += 1;
            flagged += usize::from(score.is_loop);
            if let Some(r) = report.as_mut().filter(|_| report_error.is_none()) {
                report_error = r.add(run, score).err();
            }
            if let Some(bar) = &bar {
                bar.set_position(consumed);
                bar.set_message(format!("{runs} runs, {flagged} flagged"));
            }
        },
    )
    .map_err(|e| e.to_string())?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    stats_handle.persist();
    if let (Some(r), Some(p)) = (report, &args.html) {
        let written = match report_error {
            Some(e) => Err(e),
            None => r.finish(),
        };
        written.map_err(|e| format!("writing {}: {e}", p.display()))?;
        eprintln!("loopguard: wrote {}", p.display());
    }
    eprintln!(
        "loopguard: scored {} runs ({} events) in {:.1}s; {} flagged as loops",
        summary.runs,
        summary.events,
        started.elapsed().as_secs_f64(),
        summary.flagged
    );
    let s = stats_handle.stats();
    use std::sync::atomic::Ordering::Relaxed;
    tracing::info!(
        texts_embedded = s.texts_embedded.load(Relaxed),
        batches = s.batches.load(Relaxed),
        model_secs = s.model_nanos.load(Relaxed) as f64 / 1e9,
        cache_hits = s.cache_hits.load(Relaxed),
        cache_misses = s.cache_misses.load(Relaxed),
        "embedding work"
    );
    if let Some(line) = stats_handle.disk_summary() {
        eprintln!("loopguard: {line}");
    }
    Ok(())
}
