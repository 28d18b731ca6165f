//! Artifacts: the large structured payloads a collaboration message carries — a program, a file,
//! a document, in a fenced block — apart from the prose around them.
//!
//! A programmer re-sends the whole program after each fix; two versions differ in a few lines deep
//! inside. Compared as one text (embedded from its head and tail), they read as "the same
//! request", and the change that is the progress is exactly what the comparison cannot see. So an
//! artifact is compared by what it is: its identity is a hash of its whole content (blank lines
//! and trailing spaces aside, never of a cut-down text), and what changed between two versions is
//! counted line by line. The prose around it is compared as any message is.
//!
//! - [`split`] finds the artifacts of a message: fenced blocks (```` ``` ```` or `~~~`) of at
//!   least [`MIN_ARTIFACT_LINES`] non-blank lines (a one-line block, `import tkinter`, is part of
//!   what the prose says), named by a file name in the fence's info string or on a short line just
//!   above the fence (`main.py`, `**main.py**`, `FILENAME: main.py`).
//! - [`ArtifactVersions`] keeps, per task, the latest version of each artifact (its line keys, not
//!   its text), so each new version is compared with the one before: unchanged, back to an
//!   earlier version, or changed — how many lines added and removed, and in which parts.

use super::normalize::key64;
use serde::{Deserialize, Serialize};

/// Fewest non-blank lines a fenced block needs to be an artifact rather than a quote in the prose.
pub const MIN_ARTIFACT_LINES: usize = 3;
/// Lines of one artifact whose keys are kept (a 60,000-character message has ~2,000).
pub const MAX_LINES_KEPT: usize = 4000;
/// Artifacts tracked per task; past it, the one changed longest ago is forgotten.
pub const MAX_TRACKED: usize = 16;
/// Earlier versions remembered per artifact (to tell "back to an earlier version").
pub const EARLIER_KEPT: usize = 8;
/// An unnamed artifact is a version of a tracked one when this share of their lines agree (Dice
/// of their line multisets): a program re-sent without its file name, a class rewritten in place.
pub const LINEAGE_OVERLAP: f64 = 0.5;
/// Parts named per change, and characters per part.
const MAX_PARTS: usize = 3;
const PART_CHARS: usize = 60;

/// An artifact found in a message.
#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    /// The file name the message gives it.
    pub name: Option<String>,
    /// Hash of its whole content: non-blank lines, trailing spaces removed.
    pub hash: u64,
    /// One key per non-blank line (at most [`MAX_LINES_KEPT`]).
    pub line_keys: Vec<u16>,
    /// For each kept line, the part it is in: the nearest line above it that is less indented (a
    /// `def`, a `class`, a block opener), or the nearest heading above a top-level line.
    part_of: Vec<Option<u32>>,
    parts: Vec<String>,
}

/// A message taken apart.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// The text without its artifacts.
    pub prose: String,
    pub artifacts: Vec<Artifact>,
}

/// A file name: a word with an extension (`main.py`, `src/app.tsx`, `requirements.txt`).
fn file_name(s: &str) -> Option<String> {
    static FILE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"[A-Za-z0-9_][A-Za-z0-9_./-]*\.[A-Za-z][A-Za-z0-9]{0,7}\b")
            .expect("compiles")
    });
    FILE.find_iter(s).last().map(|m| m.as_str().to_string())
}

/// The name a line gives the block below it: a short line (at most three words: `main.py`,
/// `**main.py**`, `1. main.py`, `FILENAME: main.py`) holding a file name. A sentence that mentions
/// a file ("In `main.py`, change update:") introduces a fragment, not the file.
fn name_line(line: &str) -> Option<String> {
    let t = line.trim();
    if t.is_empty() || t.split_whitespace().count() > 3 {
        return None;
    }
    file_name(t)
}

/// The fence a line opens, if it opens one: its character, its length and its info string.
fn opening_fence(line: &str) -> Option<(char, usize, &str)> {
    let t = line.trim_start();
    let c = t.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = t.chars().take_while(|x| *x == c).count();
    (n >= 3).then(|| (c, n, t[n..].trim()))
}

fn closes(line: &str, c: char, n: usize) -> bool {
    let t = line.trim();
    t.chars().count() >= n && t.chars().all(|x| x == c)
}

/// Key of one line: FNV-1a folded to 16 bits. Stable across builds (the keys are kept in the task
/// state); a collision only makes two different lines count as one in a diff's estimate.
fn line_key(line: &str) -> u16 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in line.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48)) as u16
}

fn indent(line: &str) -> usize {
    line.chars()
        .take_while(|c| c.is_whitespace())
        .map(|c| if c == '\t' { 4 } else { 1 })
        .sum()
}

fn artifact(name: Option<String>, body: &[&str]) -> Artifact {
    let lines: Vec<&str> = body
        .iter()
        .map(|l| l.trim_end())
        .filter(|l| !l.is_empty())
        .collect();
    let hash = key64(&lines.join("\n"));
    let kept = &lines[..lines.len().min(MAX_LINES_KEPT)];
    let mut parts: Vec<String> = Vec::new();
    let mut part_of = Vec::with_capacity(kept.len());
    // The lines enclosing the current one, outermost first: (indentation, index into `parts`).
    let mut open: Vec<(usize, u32)> = Vec::new();
    let mut heading: Option<u32> = None;
    for line in kept {
        let ind = indent(line);
        while open.last().is_some_and(|(i, _)| *i >= ind) {
            open.pop();
        }
        let part = open.last().map(|(_, p)| *p).or(heading);
        part_of.push(part);
        let text: String = line.trim().chars().take(PART_CHARS).collect();
        let text = text.trim_end_matches([':', '{', ' ']).to_string();
        // A Markdown heading (`# Usage`, `## Install`) heads the top-level lines below it.
        let is_heading = ind == 0 && (line.starts_with("# ") || line.starts_with("##"));
        parts.push(text);
        let me = (parts.len() - 1) as u32;
        if is_heading {
            heading = Some(me);
            open.clear();
        } else {
            open.push((ind, me));
        }
    }
    Artifact {
        name,
        hash,
        line_keys: kept.iter().map(|l| line_key(l)).collect(),
        part_of,
        parts,
    }
}

/// Take a message apart: its artifacts, and the prose without them.
pub fn split(text: &str) -> Split {
    let lines: Vec<&str> = text.lines().collect();
    let mut prose: Vec<&str> = Vec::with_capacity(lines.len());
    let mut artifacts = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some((c, n, info)) = opening_fence(lines[i]) else {
            prose.push(lines[i]);
            i += 1;
            continue;
        };
        let end = (i + 1..lines.len())
            .find(|&j| closes(lines[j], c, n))
            .unwrap_or(lines.len());
        let body = &lines[i + 1..end];
        let last = end.min(lines.len() - 1);
        if body.iter().filter(|l| !l.trim().is_empty()).count() < MIN_ARTIFACT_LINES {
            prose.extend(&lines[i..=last]);
        } else {
            let above = lines[..i]
                .iter()
                .rev()
                .take(2)
                .find(|l| !l.trim().is_empty());
            let name = file_name(info).or_else(|| above.and_then(|l| name_line(l)));
            artifacts.push(artifact(name, body));
        }
        i = end + 1;
    }
    Split {
        prose: prose.join("\n"),
        artifacts,
    }
}

/// What a message did to one artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// Not seen before in the task.
    New,
    /// The same content as its latest version.
    Unchanged,
    /// The same content as an earlier version: a change undone.
    Earlier,
    /// Another content: `added` and `removed` say how much.
    Changed,
}

/// An artifact of a message as the task saw it: its identity and how it changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ArtifactChange {
    /// Its file name, or for an unnamed block the name of the artifact it is a version of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The message named it (named artifacts make two messages the same delivery).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub named: bool,
    /// Hash of its whole content (16 hex digits).
    pub hash: String,
    /// Its non-blank lines.
    pub lines: u32,
    pub change: ChangeKind,
    /// Lines added since its latest version (line multisets: a moved line is neither added nor
    /// removed).
    #[serde(default)]
    pub added: u32,
    /// Lines removed since its latest version.
    #[serde(default)]
    pub removed: u32,
    /// Where lines were added: the enclosing definitions or headings (at most three).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<String>,
}

impl ArtifactChange {
    /// "main.py: +3 −1 (def update)", "main.py: unchanged".
    pub fn describe(&self) -> String {
        let name = self.name.as_deref().unwrap_or("a code block");
        match self.change {
            ChangeKind::New => format!("{name}: new ({} lines)", self.lines),
            ChangeKind::Unchanged => format!("{name}: unchanged"),
            ChangeKind::Earlier => format!("{name}: back to an earlier version"),
            ChangeKind::Changed => {
                let parts = if self.parts.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", self.parts.join("; "))
                };
                format!("{name}: +{} −{}{parts}", self.added, self.removed)
            }
        }
    }
}

/// The latest version of one artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tracked {
    /// Its file name, or `#` and its first hash for an unnamed block.
    pub key: String,
    pub hash: u64,
    /// Its line keys, four hex digits each.
    pub lines: String,
    /// Hashes of its earlier versions, newest last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<u64>,
    /// When it last changed.
    pub seq: u64,
}

impl Tracked {
    fn keys(&self) -> Vec<u16> {
        self.lines
            .as_bytes()
            .chunks(4)
            .filter_map(|c| std::str::from_utf8(c).ok())
            .filter_map(|h| u16::from_str_radix(h, 16).ok())
            .collect()
    }
}

fn hex_keys(keys: &[u16]) -> String {
    let mut s = String::with_capacity(keys.len() * 4);
    for k in keys {
        s.push_str(&format!("{k:04x}"));
    }
    s
}

/// Lines of `new` not in `old` and lines of `old` not in `new`, as multisets; and the indexes
/// (into `new`) of the added ones.
fn line_diff(old: &[u16], new: &[u16]) -> (Vec<usize>, u32) {
    let mut left: std::collections::HashMap<u16, u32> = std::collections::HashMap::new();
    for k in old {
        *left.entry(*k).or_default() += 1;
    }
    let mut added = Vec::new();
    for (i, k) in new.iter().enumerate() {
        match left.get_mut(k) {
            Some(n) if *n > 0 => *n -= 1,
            _ => added.push(i),
        }
    }
    (added, left.values().sum())
}

/// How much two line lists share (Dice of their multisets).
fn overlap(a: &[u16], b: &[u16]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let (added, _) = line_diff(b, a);
    let common = a.len() - added.len();
    2.0 * common as f64 / (a.len() + b.len()) as f64
}

/// The latest version of every artifact of a task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ArtifactVersions {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tracked: Vec<Tracked>,
}

impl ArtifactVersions {
    pub fn is_empty(&self) -> bool {
        self.tracked.is_empty()
    }

    /// Record the artifacts of the message at `seq`: each is compared with the latest version of
    /// its artifact (by name; an unnamed one with the tracked artifact it shares most lines with),
    /// then becomes that version.
    pub fn record(&mut self, artifacts: &[Artifact], seq: u64) -> Vec<ArtifactChange> {
        artifacts.iter().map(|a| self.record_one(a, seq)).collect()
    }

    fn record_one(&mut self, a: &Artifact, seq: u64) -> ArtifactChange {
        let slot = match &a.name {
            Some(name) => self.tracked.iter().position(|t| &t.key == name),
            None => self
                .tracked
                .iter()
                .enumerate()
                .map(|(i, t)| (i, overlap(&a.line_keys, &t.keys())))
                .filter(|(_, o)| *o >= LINEAGE_OVERLAP)
                .max_by(|x, y| x.1.total_cmp(&y.1))
                .map(|(i, _)| i),
        };
        let mut out = ArtifactChange {
            name: a.name.clone(),
            named: a.name.is_some(),
            hash: format!("{:016x}", a.hash),
            lines: a.line_keys.len() as u32,
            change: ChangeKind::New,
            added: a.line_keys.len() as u32,
            removed: 0,
            parts: Vec::new(),
        };
        let Some(i) = slot else {
            self.track(Tracked {
                key: a
                    .name
                    .clone()
                    .unwrap_or_else(|| format!("#{:016x}", a.hash)),
                hash: a.hash,
                lines: hex_keys(&a.line_keys),
                earlier: Vec::new(),
                seq,
            });
            return out;
        };
        let t = &mut self.tracked[i];
        out.name = Some(t.key.clone()).filter(|k| !k.starts_with('#'));
        if t.hash == a.hash {
            out.change = ChangeKind::Unchanged;
            out.added = 0;
            return out;
        }
        let (added, removed) = line_diff(&t.keys(), &a.line_keys);
        out.change = if t.earlier.contains(&a.hash) {
            ChangeKind::Earlier
        } else {
            ChangeKind::Changed
        };
        out.added = added.len() as u32;
        out.removed = removed;
        out.parts = a.parts_of(&added);
        t.earlier.retain(|h| *h != a.hash);
        t.earlier.push(t.hash);
        if t.earlier.len() > EARLIER_KEPT {
            t.earlier.remove(0);
        }
        t.hash = a.hash;
        t.lines = hex_keys(&a.line_keys);
        t.seq = seq;
        out
    }

    fn track(&mut self, t: Tracked) {
        if self.tracked.len() >= MAX_TRACKED {
            if let Some(oldest) = (0..self.tracked.len()).min_by_key(|&i| self.tracked[i].seq) {
                self.tracked.remove(oldest);
            }
        }
        self.tracked.push(t);
    }
}

impl Artifact {
    /// The distinct parts the lines at `indexes` are in, first seen first.
    fn parts_of(&self, indexes: &[usize]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for &i in indexes {
            let Some(Some(p)) = self.part_of.get(i) else {
                continue;
            };
            let p = &self.parts[*p as usize];
            if !out.contains(p) {
                out.push(p.clone());
                if out.len() == MAX_PARTS {
                    break;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROGRAM: &str = "main.py\n```python\nimport tkinter as tk\n\nclass Game:\n    def update(self):\n        self.move()\n        self.draw()\n\n    def draw(self):\n        pass\n```\n\nPlease review.";

    #[test]
    fn a_fenced_program_is_an_artifact_named_by_the_line_above() {
        let s = split(PROGRAM);
        assert_eq!(s.artifacts.len(), 1);
        assert_eq!(s.artifacts[0].name.as_deref(), Some("main.py"));
        assert_eq!(s.artifacts[0].line_keys.len(), 7);
        assert_eq!(s.prose, "main.py\n\nPlease review.");
        // A one-line quote stays in the prose: it is what the request says.
        let q = split("Add this at the top:\n```python\nimport tkinter as tk\n```");
        assert!(q.artifacts.is_empty());
        assert!(q.prose.contains("import tkinter"));
        // A sentence naming a file introduces a fragment, not the file.
        let f = split("In `main.py`, change the update method as follows:\n```python\ndef update(self):\n    self.move()\n    self.draw()\n```");
        assert_eq!(f.artifacts[0].name, None);
        for (line, name) in [
            ("**game.py**", "game.py"),
            ("FILENAME: app.js", "app.js"),
            ("1. src/lib.rs", "src/lib.rs"),
        ] {
            let s = split(&format!("{line}\n```\na\nb\nc\n```"));
            assert_eq!(s.artifacts[0].name.as_deref(), Some(name), "{line}");
        }
    }

    #[test]
    fn identity_ignores_blank_lines_and_trailing_spaces_only() {
        let a = split(PROGRAM).artifacts.remove(0);
        let b = split(
            &PROGRAM
                .replace("self.move()", "self.move()   ")
                .replace("\n\n    def draw", "\n\n\n    def draw"),
        )
        .artifacts
        .remove(0);
        assert_eq!(a.hash, b.hash);
        let c = split(&PROGRAM.replace("self.move()", "self.move(1)"))
            .artifacts
            .remove(0);
        assert_ne!(a.hash, c.hash);
    }

    #[test]
    fn a_one_line_change_is_counted_and_placed() {
        let mut v = ArtifactVersions::default();
        let first = v.record(&split(PROGRAM).artifacts, 1);
        assert_eq!(first[0].change, ChangeKind::New);
        let same = v.record(&split(PROGRAM).artifacts, 2);
        assert_eq!(same[0].change, ChangeKind::Unchanged);
        let edited = PROGRAM.replace(
            "        self.draw()\n",
            "        self.create_pipe()\n        self.draw()\n",
        );
        let c = v.record(&split(&edited).artifacts, 3);
        assert_eq!(c[0].change, ChangeKind::Changed);
        assert_eq!((c[0].added, c[0].removed), (1, 0));
        assert_eq!(c[0].parts, ["def update(self)"]);
        // Undone: back to the earlier version.
        let back = v.record(&split(PROGRAM).artifacts, 4);
        assert_eq!(back[0].change, ChangeKind::Earlier);
        assert_eq!((back[0].added, back[0].removed), (0, 1));
    }

    #[test]
    fn an_unnamed_copy_is_a_version_of_the_file_it_shares_most_lines_with() {
        let mut v = ArtifactVersions::default();
        v.record(&split(PROGRAM).artifacts, 1);
        let unnamed = PROGRAM.replace("main.py\n", "Here is the revised code:\n");
        let c = v.record(&split(&unnamed).artifacts, 2);
        assert_eq!(c[0].name.as_deref(), Some("main.py"));
        assert!(!c[0].named);
        assert_eq!(c[0].change, ChangeKind::Unchanged);
        let other = v.record(&split("```\nx = 1\ny = 2\nz = 3\n```").artifacts, 3);
        assert_eq!(other[0].change, ChangeKind::New);
        assert_eq!(other[0].name, None);
        assert_eq!(v.tracked.len(), 2);
    }

    #[test]
    fn an_unclosed_fence_runs_to_the_end_and_markup_never_panics() {
        let s = split("main.py\n```python\na = 1\nb = 2\nc = 3");
        assert_eq!(s.artifacts.len(), 1);
        for t in [
            "```",
            "```\n",
            "~~~~\n~~~",
            "```\n```",
            "\n\n```py",
            "é```\n```",
        ] {
            split(t);
        }
    }
}
