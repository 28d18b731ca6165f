//! Reading labelled and control files: every problem named by file, line and JSON path.

use super::EvalError;
use crate::event::InputError;
use crate::score::{parse_run, Run};
use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

/// A labelled recorded run.
#[derive(Debug, Clone)]
pub struct LabelledRun {
    pub run: Run,
    /// 1-based line of its file.
    pub line: usize,
    /// True: the run is a loop.
    pub label: bool,
    /// Loop runs: the event at which the loop is plain to a careful reader.
    pub first_loop_converted: Option<usize>,
    /// Loop runs: true when exact matching misses at least one repeat.
    pub reworded: Option<bool>,
    /// Loop runs: `exact_repeat`, `reworded_repeat`, `same_error`, `alternating`, ...
    pub kind: Option<String>,
    pub confidence: Option<String>,
    pub why: Option<String>,
}

fn opt_string(value: &serde_json::Value, key: &str) -> Result<Option<String>, InputError> {
    match value.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
        Some(other) => Err(InputError::new(
            key,
            format!("must be a non-empty string or null, got {other}"),
        )),
    }
}

/// Parse one line of a labelled file.
pub fn parse_labelled(line: &str) -> Result<LabelledRun, InputError> {
    let run = parse_run(line)?;
    // parse_run accepted the line, so it is a JSON object.
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| InputError::new(".", e.to_string()))?;
    let Some(label) = run.label else {
        return Err(InputError::new(
            "label",
            "missing: a labelled run needs \"label\": \"loop\" or \"no_loop\" (unlabelled runs go in --control)",
        ));
    };
    let n = run.events.len();
    let first_loop_converted = match value.get("first_loop_converted") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(i) if (i as usize) < n => Some(i as usize),
            _ => {
                return Err(InputError::new(
                    "first_loop_converted",
                    format!("must be the index of one of the run's {n} events, got {v}"),
                ))
            }
        },
    };
    let reworded = match value.get("reworded") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Bool(b)) => Some(*b),
        Some(other) => {
            return Err(InputError::new(
                "reworded",
                format!("must be true, false or null, got {other}"),
            ))
        }
    };
    let kind = opt_string(&value, "kind")?;
    let confidence = opt_string(&value, "confidence")?;
    let why = opt_string(&value, "why")?;
    if label {
        if first_loop_converted.is_none() {
            return Err(InputError::new(
                "first_loop_converted",
                "missing: a run labelled \"loop\" needs the index of the event at which it becomes a loop",
            ));
        }
    } else {
        if first_loop_converted.is_some() {
            return Err(InputError::new(
                "first_loop_converted",
                "only a run labelled \"loop\" has one; use null for \"no_loop\"",
            ));
        }
        if kind.is_some() {
            return Err(InputError::new(
                "kind",
                "only a run labelled \"loop\" has a kind; use null for \"no_loop\"",
            ));
        }
    }
    Ok(LabelledRun {
        run,
        line: 0,
        label,
        first_loop_converted,
        reworded: if label { reworded } else { None },
        kind,
        confidence,
        why,
    })
}

/// Parse one line of a control file (unlabelled healthy runs; `"label": "no_loop"` is allowed).
pub fn parse_control(line: &str) -> Result<Run, InputError> {
    let run = parse_run(line)?;
    if run.label == Some(true) {
        return Err(InputError::new(
            "label",
            "a control run is healthy by definition; a run labelled \"loop\" belongs in the labelled file",
        ));
    }
    Ok(run)
}

/// The non-empty lines of a file, parsed, with their 1-based numbers.
fn read_jsonl<T>(
    path: &Path,
    mut parse: impl FnMut(&str) -> Result<T, InputError>,
) -> Result<Vec<(usize, T)>, EvalError> {
    let file = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|source| EvalError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|source| EvalError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let item = parse(&line).map_err(|error| EvalError::Input {
            file: file.clone(),
            line: i + 1,
            error,
        })?;
        out.push((i + 1, item));
    }
    if out.is_empty() {
        return Err(EvalError::Empty { file });
    }
    Ok(out)
}

/// Two runs with one id cannot be told apart in a report.
fn check_unique<'a>(
    file: &str,
    ids: impl Iterator<Item = (usize, &'a str)>,
) -> Result<(), EvalError> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (line, id) in ids {
        if let Some(first) = seen.insert(id, line) {
            return Err(EvalError::Input {
                file: file.to_string(),
                line,
                error: InputError::new("id", format!("`{id}` is also the id of line {first}")),
            });
        }
    }
    Ok(())
}

/// Labelled runs, read and checked: one file, or several, each an agent family.
#[derive(Debug, Clone)]
pub struct LabelledSet {
    /// The file, or the files joined with ", ".
    pub file: String,
    pub runs: Vec<LabelledRun>,
    /// With several files: each file's family and the runs it holds (in `runs`, in order).
    /// Empty for one file.
    pub families: Vec<Family>,
}

/// One family of agents: the labelled runs of one file.
#[derive(Debug, Clone)]
pub struct Family {
    pub name: String,
    pub file: String,
    pub runs: std::ops::Range<usize>,
}

impl LabelledSet {
    /// The family of each run, by index (empty for one file).
    pub fn family_of(&self) -> Vec<usize> {
        let mut out = vec![0; self.runs.len()];
        for (f, fam) in self.families.iter().enumerate() {
            for slot in &mut out[fam.runs.clone()] {
                *slot = f;
            }
        }
        out
    }
}

pub fn read_labelled(path: &Path) -> Result<LabelledSet, EvalError> {
    let file = path.display().to_string();
    let runs: Vec<LabelledRun> = read_jsonl(path, parse_labelled)?
        .into_iter()
        .map(|(line, mut r)| {
            r.line = line;
            r
        })
        .collect();
    check_unique(&file, runs.iter().map(|r| (r.line, r.run.id.as_str())))?;
    Ok(LabelledSet {
        file,
        runs,
        families: Vec::new(),
    })
}

/// A family's name from its file when none is given: the file name without its extension and a
/// trailing `_labelled_dev`, `_labelled` or `_dev` (`aider_labelled_dev.jsonl` → `aider`).
pub fn family_name(path: &Path) -> String {
    let stem = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let stem = stem.strip_suffix(".jsonl").unwrap_or(&stem);
    let stem = ["_labelled_dev", "_labelled", "_dev"]
        .iter()
        .find_map(|suffix| stem.strip_suffix(suffix))
        .unwrap_or(stem);
    stem.to_string()
}

/// Several labelled files, each a family (`name` given, or from the file name). Run ids must be
/// unique across them: a run in two families would be counted twice.
pub fn read_families(inputs: &[(Option<String>, &Path)]) -> Result<LabelledSet, EvalError> {
    if inputs.len() == 1 && inputs[0].0.is_none() {
        return read_labelled(inputs[0].1);
    }
    let mut runs: Vec<LabelledRun> = Vec::new();
    let mut families: Vec<Family> = Vec::new();
    let mut seen: HashMap<String, String> = HashMap::new();
    for (name, path) in inputs {
        let set = read_labelled(path)?;
        let name = name.clone().unwrap_or_else(|| family_name(path));
        if let Some(other) = families.iter().find(|f| f.name == name) {
            return Err(EvalError::Invalid(format!(
                "two labelled files are family {name:?}: {} and {} (name them: NAME=FILE)",
                other.file, set.file
            )));
        }
        for r in &set.runs {
            if let Some(other) = seen.insert(r.run.id.clone(), set.file.clone()) {
                return Err(EvalError::Input {
                    file: set.file.clone(),
                    line: r.line,
                    error: InputError::new(
                        "id",
                        format!(
                            "run {:?} is also in {other}: each run belongs to one family",
                            r.run.id
                        ),
                    ),
                });
            }
        }
        let start = runs.len();
        runs.extend(set.runs);
        families.push(Family {
            name,
            file: set.file,
            runs: start..runs.len(),
        });
    }
    Ok(LabelledSet {
        file: families
            .iter()
            .map(|f| f.file.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        runs,
        families,
    })
}

/// A control file, read and checked.
#[derive(Debug, Clone)]
pub struct ControlSet {
    pub file: String,
    pub runs: Vec<Run>,
}

pub fn read_control(path: &Path) -> Result<ControlSet, EvalError> {
    let file = path.display().to_string();
    let lines = read_jsonl(path, parse_control)?;
    check_unique(&file, lines.iter().map(|(l, r)| (*l, r.id.as_str())))?;
    Ok(ControlSet {
        file,
        runs: lines.into_iter().map(|(_, r)| r).collect(),
    })
}
