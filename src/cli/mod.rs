//! Command-line interface. Each command lives in its own module; the engine is in the library.

mod calibrate;
mod compare;
mod eval;
mod hook;
mod loops;
mod score;
mod serve;
mod store;

use clap::{Parser, Subcommand};
use loopguard::config::{Config, ConfigError};
use std::path::PathBuf;
use std::process::ExitCode;

/// Tells an LLM-agent orchestrator, event by event, whether its agent is stuck in a loop —
/// also when the agent rewords what it repeats — and what to do next.
#[derive(Parser, Debug)]
#[command(name = "loopguard", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// Configuration file (TOML), merged over the compiled-in defaults (loopguard.toml).
    #[arg(long, global = true, env = "LOOPGUARD_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Log format on stderr.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "LOOPGUARD_LOG_FORMAT"
    )]
    pub log_format: LogFormat,

    /// Log filter (tracing-subscriber syntax), e.g. `info` or `loopguard=debug`. Default:
    /// `info` for `serve`, `warn` for the other commands.
    #[arg(long, global = true, env = "LOOPGUARD_LOG")]
    pub log: Option<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the HTTP service (POST /v1/evaluate, task and loop endpoints, /livez, /readyz,
    /// /metrics, /v1/stats, /openapi.json, a dashboard at /) with durable state.
    Serve(serve::ServeArgs),
    /// Score recorded runs: JSONL in (a file or `-` for stdin), one JSON line per run out. The
    /// model's vectors are kept on disk (`[model] disk_cache`) for the next batch command.
    Score(score::ScoreArgs),
    /// Show how loopguard normalises and compares texts (pairwise cosine on the real model).
    Compare(compare::CompareArgs),
    /// The cross-task loop memory of a data directory (offline; the service answers
    /// GET /v1/loops/similar while it runs).
    #[command(subcommand)]
    Loops(loops::LoopsCommand),
    /// Feedback on verdicts (false positives, missed loops) of a data directory (offline; the
    /// service answers GET /v1/feedback/export while it runs).
    #[command(subcommand)]
    Feedback(loops::FeedbackCommand),
    /// The embedded store's task log, offline: `verify` reports any damage (file, byte, tasks
    /// affected); `salvage --to DIR` writes a new log of every intact record.
    #[command(subcommand)]
    Store(store::StoreCommand),
    /// Print the service's OpenAPI document for the effective configuration (its limits and
    /// security); the copy for the defaults is committed as docs/openapi.json.
    Openapi,
    /// Print the effective configuration (defaults < --config file < LOOPGUARD_* environment),
    /// with the auth token and any credentials in the judge's URL redacted.
    Config,
    /// Calibrate thresholds on labelled data: text pairs (per-kind ROC/PR, thresholds, lexical
    /// baselines) or recorded runs (a sweep of settings); writes a report, charts and a config
    /// snippet.
    Calibrate(calibrate::CalibrateArgs),
    /// Measure detection on labelled runs: precision, recall, F1, loops caught on time, early
    /// alarms, delay, by kind and rewording, every miss and false alarm with the verdict behind
    /// it; healthy control runs flagged; events sent to the judge; optional folds and sweep. The
    /// model's vectors are kept on disk (`[model] disk_cache`): a re-run embeds only new texts.
    Eval(eval::EvalArgs),
    /// List the detection rules and judge questions in priority order: id, outcome (loop or
    /// question), kinds, what each says, the settings it reads and what it needs computed first (an
    /// embedding round of its own, run only while a rule needing it is on) (Markdown; `--json` for
    /// JSON, with each rule's `own_settings`: what a section `[detect.rule.<family>.<name>]` may
    /// give it a value of its own for). Verdicts name their rule in `rule`; `detect.rules_off`
    /// switches rules off by id.
    Rules {
        /// JSON lines instead of a Markdown table.
        #[arg(long)]
        json: bool,
    },
    /// A command hook for a coding agent: reads the hook's input on stdin, asks the service
    /// (POST /v1/hooks/<agent>) and prints its answer for the agent. Exit 0: act on stdout;
    /// exit 1: loopguard could not answer (service down, too slow, an error, an answer that is
    /// not the hook's JSON) or the hook is misconfigured (its arguments, its input), and the
    /// agent goes on. Never 2 (block), not even for a mistyped command line. Settings to
    /// paste: docs/INTEGRATIONS.md.
    Hook(hook::HookArgs),
}

pub fn init_logging(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

/// Load the configuration, naming the file or key at fault.
pub fn load_config(
    file: Option<&std::path::Path>,
    overrides: &[(String, String)],
) -> Result<Config, ConfigError> {
    Config::load_with_env(file, overrides)
}

/// `loopguard rules`: the rule table as Markdown, or one JSON object per line.
fn rules_listing(json: bool) -> String {
    use loopguard::rules::{markdown, RULES};
    if !json {
        return markdown();
    }
    RULES
        .iter()
        .map(|r| {
            serde_json::json!({
                "id": r.id,
                "outcome": if r.is_question() { "question" } else { "loop" },
                "kinds": r.kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
                "statement": r.statement,
                "settings": r.settings,
                "computed_first": r.inputs.iter().map(|i| i.as_str()).collect::<Vec<_>>(),
                "own_settings": r.own_settings(),
            })
            .to_string()
                + "\n"
        })
        .collect()
}

/// Is this command line a hook's, or a mistyped one? A word one typo from `hook`, or two from
/// an agent's name (`claude-code`, `gemini-cli`), anywhere in it: options may come first
/// (`--log-format xml hook claude-code`), and the command itself may be the typo
/// (`loopguard hok claude-code`). Such a command line that does not parse exits 1 (go on), not
/// clap's 2, which both agents read as "block". Other commands keep 2 for a usage error (and
/// `store verify` its 1 for "damaged"), which is why the code is not changed for every command.
fn hook_invocation(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    args.skip(1).any(|a| {
        let a = a.to_string_lossy().to_ascii_lowercase();
        strsim::levenshtein(&a, "hook") <= 1
            || ["claude-code", "gemini-cli"]
                .iter()
                .any(|agent| strsim::levenshtein(&a, agent) <= 2)
    })
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // A hook's exit code is read by the agent: 2 (clap's usage error) would block the tool
        // call. A misconfigured hook fails open like an unreachable service.
        Err(e) if e.use_stderr() && hook_invocation(std::env::args_os()) => {
            let _ = e.print();
            return hook::fail_open("its command line is wrong: see above");
        }
        Err(e) => e.exit(),
    };
    let default_log = match cli.command {
        Command::Serve(_) => "info",
        _ => "warn",
    };
    init_logging(cli.log_format, cli.log.as_deref().unwrap_or(default_log));
    if let Command::Hook(args) = &cli.command {
        return hook::run(args);
    }
    let result = match &cli.command {
        Command::Store(cmd) => return store::run(&cli, cmd),
        Command::Serve(args) => serve::run(&cli, args),
        Command::Score(args) => score::run(&cli, args),
        Command::Compare(args) => compare::run(&cli, args),
        Command::Loops(cmd) => loops::run_loops(&cli, cmd),
        Command::Feedback(cmd) => loops::run_feedback(&cli, cmd),
        Command::Calibrate(args) => calibrate::run(&cli, args),
        Command::Eval(args) => eval::run(&cli, args),
        Command::Hook(_) => unreachable!("answered above"),
        Command::Openapi => load_config(cli.config.as_deref(), &[])
            .map(|c| print!("{}", crate::server::openapi::document_json(&c)))
            .map_err(|e| e.to_string()),
        Command::Rules { json } => {
            print!("{}", rules_listing(*json));
            Ok(())
        }
        Command::Config => load_config(cli.config.as_deref(), &[])
            .map(|c| print!("{}", c.redacted().to_toml()))
            .map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("loopguard: {message}");
            ExitCode::from(2)
        }
    }
}
