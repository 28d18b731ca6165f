//! Shared pieces of the written reports: number formatting for Markdown, tables, the config
//! snippet and the files of an output directory.

use super::{create_dir, write_file, CalibrateError};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// A number for a Markdown table; `–` for undefined.
pub fn num(x: Option<f64>, decimals: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.decimals$}"),
        Some(v) if v > 0.0 => "always".into(),
        Some(_) => "never".into(),
        None => "–".into(),
    }
}

/// A threshold as a config value is written: no trailing zeros, at most six decimals.
pub fn threshold(x: f64) -> String {
    let s = format!("{x:.6}");
    let s = s.trim_end_matches('0');
    let s = s
        .strip_suffix('.')
        .map(|p| format!("{p}.0"))
        .unwrap_or(s.to_string());
    s
}

/// A Markdown table.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) -> &mut Self {
        self.rows.push(cells);
        self
    }

    pub fn render(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut s = line(&self.header);
        s.push_str(&line(
            &self
                .header
                .iter()
                .map(|_| "---".to_string())
                .collect::<Vec<_>>(),
        ));
        for r in &self.rows {
            s.push_str(&line(r));
        }
        s
    }
}

/// One `key = value` line of the config snippet, with the comment line above it.
pub struct SnippetEntry {
    /// Dotted table path, e.g. `detect.similarity`.
    pub table: String,
    pub key: String,
    /// The value as TOML.
    pub value: String,
    pub comment: Option<String>,
}

/// A TOML snippet a user pastes into their config file: `header` as comment lines, then one
/// table per distinct `table`, in first-seen order.
pub fn snippet(header: &[String], entries: &[SnippetEntry]) -> String {
    let mut s = String::new();
    for h in header {
        for line in h.lines() {
            s.push_str("# ");
            s.push_str(line);
            s.push('\n');
        }
    }
    let mut tables: Vec<&str> = Vec::new();
    for e in entries {
        if !tables.contains(&e.table.as_str()) {
            tables.push(&e.table);
        }
    }
    for t in tables {
        s.push_str(&format!("\n[{t}]\n"));
        for e in entries.iter().filter(|e| e.table == t) {
            if let Some(c) = &e.comment {
                s.push_str(&format!("# {c}\n"));
            }
            s.push_str(&format!("{} = {}\n", e.key, e.value));
        }
    }
    s
}

/// The files one calibration writes, for the caller to list.
#[derive(Debug, Default, Clone)]
pub struct Written {
    pub files: Vec<PathBuf>,
}

impl Written {
    pub fn create(dir: &Path) -> Result<Written, CalibrateError> {
        create_dir(dir)?;
        Ok(Written::default())
    }

    pub fn text(&mut self, dir: &Path, name: &str, contents: &str) -> Result<(), CalibrateError> {
        self.files.push(write_file(dir, name, contents)?);
        Ok(())
    }

    pub fn json<T: Serialize>(
        &mut self,
        dir: &Path,
        name: &str,
        value: &T,
    ) -> Result<(), CalibrateError> {
        let mut text = serde_json::to_string_pretty(value)
            .map_err(|e| CalibrateError::Invalid(format!("serialising the report: {e}")))?;
        text.push('\n');
        self.text(dir, name, &text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_thresholds() {
        assert_eq!(num(Some(0.81234), 3), "0.812");
        assert_eq!(num(None, 3), "–");
        assert_eq!(num(Some(f64::NEG_INFINITY), 3), "never");
        assert_eq!(threshold(0.86), "0.86");
        assert_eq!(threshold(1.0), "1.0");
        assert_eq!(threshold(0.8634000182151794), "0.8634");
    }

    #[test]
    fn snippet_groups_tables() {
        let s = snippet(
            &["made by a test".into()],
            &[
                SnippetEntry {
                    table: "detect.similarity".into(),
                    key: "failure".into(),
                    value: "0.86".into(),
                    comment: Some("F1 0.8".into()),
                },
                SnippetEntry {
                    table: "detect.repeats".into(),
                    key: "tool_call".into(),
                    value: "2".into(),
                    comment: None,
                },
                SnippetEntry {
                    table: "detect.similarity".into(),
                    key: "response".into(),
                    value: "0.9".into(),
                    comment: None,
                },
            ],
        );
        assert_eq!(
            s,
            "# made by a test\n\n[detect.similarity]\n# F1 0.8\nfailure = 0.86\nresponse = 0.9\n\n[detect.repeats]\ntool_call = 2\n"
        );
        let parsed: toml::Table = s.parse().unwrap();
        assert_eq!(
            parsed["detect"]["similarity"]["failure"].as_float(),
            Some(0.86)
        );
    }
}
