//! `loopguard loops similar` and `loopguard feedback export`: the loop memory and the feedback of
//! the configured store. An embedded store's data directory is read offline (the service holds
//! its lock while it runs; use `GET /v1/loops/similar` and `GET /v1/feedback/export` then); a
//! PostgreSQL store (`server.store = "postgres"`) is read while the replicas run.

use super::Cli;
use loopguard::config::StoreKind;
use loopguard::embed::Embedder;
use loopguard::feedback::FeedbackStore;
use loopguard::loop_memory::LoopMemory;
use loopguard::loop_memory::{LoopStore, SledLoops};
use loopguard::store::postgres::{Database, PgFeedback, PgLoops, PgOptions};
use loopguard::store::sled::SledStore;
use std::path::PathBuf;
use std::sync::Arc;

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
        /// An embedded store's data directory (default: the configured store, `server.data_dir`
        /// or, with `server.store = "postgres"`, the database at `server.database_url`).
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
        /// An embedded store's data directory (default: the configured store, `server.data_dir`
        /// or, with `server.store = "postgres"`, the database at `server.database_url`).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
}

/// Where the loop memory and the feedback are read from.
enum Source {
    Embedded(SledStore),
    Postgres(Database),
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

/// The configured store: the database with `server.store = "postgres"` (unless a data
/// directory is given), else the embedded store's directory.
fn source(
    rt: &tokio::runtime::Runtime,
    cli: &Cli,
    data_dir: &Option<PathBuf>,
) -> Result<(loopguard::Config, Source), String> {
    let cfg = super::load_config(cli.config.as_deref(), &[]).map_err(|e| e.to_string())?;
    if cfg.server.store == StoreKind::Postgres && data_dir.is_none() {
        let opts = PgOptions::from_config(&cfg.server).map_err(|e| e.to_string())?;
        let db = rt
            .block_on(Database::open(&opts))
            .map_err(|e| e.to_string())?;
        if let Some(why) = db.unready() {
            return Err(format!("server.database_url: {why}"));
        }
        return Ok((cfg, Source::Postgres(db)));
    }
    let (cfg, store) = open(cli, data_dir)?;
    Ok((cfg, Source::Embedded(store)))
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
    let rt = runtime()?;
    let (cfg, source) = source(&rt, cli, data_dir)?;
    let store: Arc<dyn LoopStore> = match &source {
        Source::Embedded(s) => Arc::new(SledLoops::new(
            s.tree("loop_memory").map_err(|e| e.to_string())?,
        )),
        Source::Postgres(db) => Arc::new(PgLoops::new(db.clone())),
    };
    let memory = rt
        .block_on(LoopMemory::open(cfg.memory.clone(), store))
        .map_err(|e| e.to_string())?;
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
    let rt = runtime()?;
    let (_, source) = source(&rt, cli, data_dir)?;
    let feedback = match &source {
        Source::Embedded(s) => FeedbackStore::open(
            s.tree("feedback").map_err(|e| e.to_string())?,
            s.tree("feedback_by_task").map_err(|e| e.to_string())?,
        )
        .map_err(|e| e.to_string())?,
        Source::Postgres(db) => FeedbackStore::with_log(Box::new(PgFeedback::new(db.clone()))),
    };
    let records = rt.block_on(feedback.list()).map_err(|e| e.to_string())?;
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
