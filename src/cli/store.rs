//! `loopguard store verify` and `loopguard store salvage`: the embedded store's task log, read
//! offline past any damage (the service refuses to start on damage and names the file and the
//! byte; these say what is affected and keep what can be kept). See docs/DEPLOY.md.

use super::Cli;
use loopguard::store::log::examine;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Subcommand, Debug)]
pub enum StoreCommand {
    /// Read the task log without changing it: every file, every damaged place (file and
    /// byte), every segment its manifest or notes say must exist that is missing or cut (with
    /// the acknowledged events it held), every task kept short of its last event (the version
    /// kept, of the one it reached) or lost, and how many acknowledged events do not read
    /// back. Exit status 0 when every acknowledged record reads back, 1 when something is
    /// damaged, 2 when it cannot be read (a running service holds it: stop it first).
    Verify {
        /// The embedded store's data directory (default `server.data_dir`); its task log is
        /// `DIR/tasks`.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rebuild every task from the intact records of the task log and write them as a new task
    /// log in `--to` (one snapshot); report what could not be kept. The damaged log is only
    /// read. Then, with the service stopped, move `DIR/tasks` aside and the new one into its
    /// place.
    Salvage {
        /// The embedded store's data directory (default `server.data_dir`).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// Where to write the new task log (a new or empty directory).
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn tasks_dir(cli: &Cli, data_dir: &Option<PathBuf>) -> Result<(PathBuf, usize), String> {
    let cfg = super::load_config(cli.config.as_deref(), &[]).map_err(|e| e.to_string())?;
    let data = data_dir.clone().unwrap_or(cfg.server.data_dir);
    let dir = data.join("tasks");
    if !dir.is_dir() {
        return Err(format!("{} is not a task log directory", dir.display()));
    }
    Ok((dir, cfg.server.task_log_audit_kept))
}

fn print(report: &examine::Report, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(report).expect("a report serialises")
        );
    } else {
        print!("{}", report.render());
    }
}

pub fn run(cli: &Cli, cmd: &StoreCommand) -> ExitCode {
    let result = match cmd {
        StoreCommand::Verify { data_dir, json } => tasks_dir(cli, data_dir).and_then(|(dir, _)| {
            let report = examine::verify(&dir).map_err(|e| e.to_string())?;
            print(&report, *json);
            Ok(report.is_sound())
        }),
        StoreCommand::Salvage { data_dir, to, json } => {
            tasks_dir(cli, data_dir).and_then(|(dir, kept)| {
                if same_dir(&dir, to) {
                    return Err("--to must be another directory than the damaged log".into());
                }
                let report = examine::salvage(&dir, to, kept).map_err(|e| e.to_string())?;
                print(&report, *json);
                eprintln!(
                    "salvage: {} tasks written to {}{}",
                    report.tasks,
                    to.display(),
                    if report.is_sound() {
                        " (nothing was lost)"
                    } else {
                        "; what could not be kept is listed above"
                    }
                );
                Ok(report.is_sound())
            })
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(message) => {
            eprintln!("loopguard: {message}");
            ExitCode::from(2)
        }
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
