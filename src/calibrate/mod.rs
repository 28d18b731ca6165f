//! Threshold calibration (`loopguard calibrate`): measure, on labelled data, which similarity
//! thresholds and repeat counts separate loops from legitimate repetition, and write the report,
//! the plots and a config snippet.
//!
//! - [`pairs`]: labelled text pairs `{"a", "b", "label": 0|1, "kind"?}`. Every text is embedded
//!   once (batched, cached); the embedding cosine, loopguard's own matching rule and the lexical
//!   baselines other detectors use (cosine 0.85, word Jaccard 0.8, exact match) are scored side by side with the [`metrics`] of each.
//! - [`runs`]: labelled recorded runs (`score` input plus `"label": "loop" | "no_loop"`), replayed
//!   through the real engine over a sweep of settings; run-level precision, recall, false alarms
//!   and how early each loop is caught.
//! - [`report`] writes JSON, Markdown and the config snippet; [`plot`] draws the SVG charts.
//!
//! The library knows nothing of the command line: progress is reported through a callback.

pub mod metrics;
pub mod pairs;
pub mod plot;
pub mod report;
pub mod runs;

use crate::detect::matching::Part;
use crate::event::InputError;
use crate::state::Channel;
use std::path::{Path, PathBuf};

/// Why a calibration could not run. Input problems name the file, the line and the JSON path.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error("{file}: line {line}: {error}")]
    Input {
        file: String,
        line: usize,
        error: InputError,
    },
    #[error("{file}: no labelled {what} (the file is empty)")]
    Empty { file: String, what: &'static str },
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Embed(#[from] crate::embed::EmbedError),
    #[error("run {run}: {error}")]
    Run {
        run: String,
        error: crate::engine::EngineError,
    },
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("{0}")]
    Invalid(String),
}

/// The event kinds that have a similarity threshold (`detect.similarity.<kind>`): what a labelled
/// pair stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PairKind {
    Failure,
    Collaboration,
    ToolCall,
    Result,
    Response,
}

impl PairKind {
    pub const ALL: [PairKind; 5] = [
        PairKind::Failure,
        PairKind::Collaboration,
        PairKind::ToolCall,
        PairKind::Result,
        PairKind::Response,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PairKind::Failure => "failure",
            PairKind::Collaboration => "collaboration",
            PairKind::ToolCall => "tool_call",
            PairKind::Result => "result",
            PairKind::Response => "response",
        }
    }

    pub fn parse(name: &str) -> Option<PairKind> {
        PairKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The config key this kind's threshold lives under.
    pub fn config_key(self) -> String {
        format!("detect.similarity.{}", self.as_str())
    }

    /// The threshold a configuration uses for this kind.
    pub fn threshold(self, cfg: &crate::config::Config) -> f32 {
        let s = &cfg.detect.similarity;
        match self {
            PairKind::Failure => s.failure,
            PairKind::Collaboration => s.collaboration,
            PairKind::ToolCall => s.tool_call,
            PairKind::Result => s.result,
            PairKind::Response => s.response,
        }
    }

    /// Which texts of which events this kind of pair stands for, to compare them as the engine
    /// does.
    pub fn compared_as(kind: Option<PairKind>) -> (Channel, Part) {
        match kind {
            Some(PairKind::Failure) => (Channel::Failure, Part::Main),
            Some(PairKind::Collaboration) => (Channel::Collaboration, Part::Main),
            Some(PairKind::ToolCall) => (Channel::ToolCall, Part::Main),
            Some(PairKind::Result) => (Channel::ToolCall, Part::Result),
            // Plain texts: no rule beyond keys, the numbers guard and the cosine.
            Some(PairKind::Response) | None => (Channel::Response, Part::Main),
        }
    }

    /// "failure, collaboration, ..." for error messages and help.
    pub fn names() -> String {
        PairKind::ALL.map(PairKind::as_str).join(", ")
    }
}

/// The non-empty lines of a JSONL file with their 1-based line numbers.
fn read_lines(path: &Path) -> Result<Vec<(usize, String)>, CalibrateError> {
    let text = std::fs::read_to_string(path).map_err(|source| CalibrateError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l.to_string()))
        .collect())
}

/// A file name for reports: the path as given.
fn display_name(path: &Path) -> String {
    path.display().to_string()
}

/// Write a file under the output directory.
fn write_file(dir: &Path, name: &str, contents: &str) -> Result<PathBuf, CalibrateError> {
    let path = dir.join(name);
    std::fs::write(&path, contents).map_err(|source| CalibrateError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

fn create_dir(dir: &Path) -> Result<(), CalibrateError> {
    std::fs::create_dir_all(dir).map_err(|source| CalibrateError::Write {
        path: dir.to_path_buf(),
        source,
    })
}
