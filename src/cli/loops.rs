//! `loopguard loops similar` and `loopguard feedback export`: the loop memory and the feedback of
//! a data directory, offline (the service holds the directory's lock while it runs; use
//! `GET /v1/loops/similar` and `GET /v1/feedback/export` then).

use super::Cli;
use loopguard::embed::Embedder;
use loopguard::feedback::FeedbackStore;
use loopguard::loop_memory::LoopMemory;
use loopguard::store::sled::SledStore;
use std::path::PathBuf;

#[derive(clap::Subcommand, Debug)]
pub enum LoopsCommand {
    /// The stored loops closest to a text, with how their tasks were resolved.
    Similar {
        /// A failure message, request, or tool call and result.
        text: String,
        /// Most loops listed (default `memory.k`).
        #[arg(long)]
        k: Option<usize>,
        /// Least cosine similarity (default `memory.min_similarity`).
        #[arg(long)]
        min_similarity: Option<f32>,
        /// The service's data directory (default `server.data_dir`).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum FeedbackCommand {
    /// Write the feedback as calibration input: labelled pairs and labelled runs (JSON lines).
    Export {
        /// Labelled pairs for `loopguard calibrate pairs`.
        #[arg(long, value_name = "FILE")]
        pairs: PathBuf,
        /// Labelled runs for `loopguard calibrate runs`.
        #[arg(long, value_name = "FILE")]
        runs: PathBuf,
        /// The service's data directory (default `server.data_dir`).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
}

fn open(cli: &Cli, data_dir: &Option<PathBuf>) -> Result<(loopguard::Config, SledStore), String> {
    let cfg = super::load_config(cli.config.as_deref(), &[]).map_err(|e| e.to_string())?;
    let dir = data_dir
        .clone()
        .unwrap_or_else(|| cfg.server.data_dir.clone());
    if !dir.is_dir() {
        return Err(format!("no data directory at {}", dir.display()));
    }
    let store = SledStore::open(&dir).map_err(|e| e.to_string())?;
    Ok((cfg, store))
}

pub fn run_loops(cli: &Cli, cmd: &LoopsCommand) -> Result<(), String> {
    let LoopsCommand::Similar {
        text,
        k,
        min_similarity,
        data_dir,
    } = cmd;
    let (cfg, store) = open(cli, data_dir)?;
    let tree = store.tree("loop_memory").map_err(|e| e.to_string())?;
    let memory = LoopMemory::open(cfg.memory.clone(), tree).map_err(|e| e.to_string())?;
    let embedder = Embedder::load_model(&cfg.model).map_err(|e| e.to_string())?;
    let prepared = loopguard::signature::head_tail(
        &loopguard::signature::normalize(text),
        cfg.model.max_text_chars,
    );
    let v = embedder
        .embed_blocking(std::slice::from_ref(&prepared))
        .map_err(|e| e.to_string())?;
    let found = memory.similar(
        &v[0],
        k.unwrap_or(cfg.memory.k).max(1),
        min_similarity.unwrap_or(cfg.memory.min_similarity),
        None,
    );
    println!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({"loops": found})).expect("serialises")
    );
    Ok(())
}

pub fn run_feedback(cli: &Cli, cmd: &FeedbackCommand) -> Result<(), String> {
    let FeedbackCommand::Export {
        pairs,
        runs,
        data_dir,
    } = cmd;
    let (_, store) = open(cli, data_dir)?;
    let feedback = FeedbackStore::open(store.tree("feedback").map_err(|e| e.to_string())?);
    let records = feedback.list().map_err(|e| e.to_string())?;
    let create = |p: &PathBuf| {
        std::fs::File::create(p)
            .map(std::io::BufWriter::new)
            .map_err(|e| format!("cannot create {}: {e}", p.display()))
    };
    let (mut pw, mut rw) = (create(pairs)?, create(runs)?);
    let (np, nr) = loopguard::feedback::export(&records, &mut pw, &mut rw)
        .map_err(|e| format!("writing the export: {e}"))?;
    eprintln!(
        "loopguard: {} feedback records: {np} labelled pairs to {}, {nr} labelled runs to {}",
        records.len(),
        pairs.display(),
        runs.display()
    );
    Ok(())
}
