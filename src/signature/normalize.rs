//! Keys and normalisation: the exact and normalised forms of a text, the numbers and resources
//! it names, canonical JSON for tool arguments, and the head-and-tail trim of long texts.

use regex::Regex;
use sha2::{Digest, Sha256};
use std::sync::LazyLock;

/// Words of a (normalised) message, markup tags (`<info>`) aside; each character of a script
/// written without spaces (Chinese, Japanese) counts as one.
pub fn message_words(text: &str) -> usize {
    static TAG: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"<[A-Za-z/][^<>]{0,30}>").expect("compiles"));
    let text = TAG.replace_all(text, " ");
    let mut words = 0;
    let mut in_word = false;
    for c in text.chars() {
        let unspaced = matches!(c as u32, 0x3040..=0x30ff | 0x3400..=0x4dbf | 0x4e00..=0x9fff | 0xac00..=0xd7af);
        if unspaced {
            words += 1;
            in_word = false;
        } else if c.is_alphanumeric() {
            words += usize::from(!in_word);
            in_word = true;
        } else {
            in_word = false;
        }
    }
    words
}

/// SHA-256 of a text, hex encoded.
/// The text with every run of digits masked as one `#`: the same text at another line range,
/// line number or count.
pub fn digits_masked(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_digits = false;
    for c in text.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// How much of two outputs is the same material: the Dice overlap of their words as multisets,
/// digits masked (a file view shown one line longer has every line renumbered). Two pages of
/// one file share a language, not their words; an edit applied twice to one file shows the
/// same lines again, shifted.
pub fn word_overlap(a: &str, b: &str) -> f32 {
    fn words(text: &str) -> impl Iterator<Item = String> + '_ {
        text.split_whitespace().map(digits_masked)
    }
    let mut counts = std::collections::HashMap::<String, i32>::new();
    let mut total = 0usize;
    for w in words(a) {
        *counts.entry(w).or_default() += 1;
        total += 1;
    }
    let mut common = 0usize;
    for w in words(b) {
        total += 1;
        if let Some(n) = counts.get_mut(&w).filter(|n| **n > 0) {
            *n -= 1;
            common += 1;
        }
    }
    if total == 0 {
        return 1.0;
    }
    (2 * common) as f32 / total as f32
}

pub fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// A short, stable 64-bit key of a text (first 8 bytes of its SHA-256), for in-memory identity.
pub fn key64(text: &str) -> u64 {
    let d = Sha256::digest(text.as_bytes());
    u64::from_be_bytes(d[..8].try_into().expect("sha256 has 32 bytes"))
}

struct Rule {
    re: Regex,
    with: With,
}

enum With {
    /// Replace every match.
    Text(&'static str),
    /// A long-hex candidate, replaced only when it is 12+ characters long.
    LongHex,
    /// Line numbers, replaced only on lines about an error ([`mask_error_lines`]).
    ErrorLines,
}

fn rule(pattern: &str, with: &'static str) -> Rule {
    Rule {
        re: Regex::new(pattern).expect("normalisation pattern compiles"),
        with: With::Text(with),
    }
}

// Order matters: timestamps before bare times, UUIDs before long hex runs, `file:line` before
// temp paths (a temp path swallows what follows it up to the colon).
static VOLATILE: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    vec![
        // 2026-11-21T10:00:00.123Z, 2026-11-21 10:00:00+02:00
        rule(
            r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?\b",
            "<ts>",
        ),
        // Nov 22 02:33:57 (syslog)
        rule(
            r"(?i)\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]* +\d{1,2} +\d{2}:\d{2}:\d{2}\b",
            "<ts>",
        ),
        rule(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b", "<time>"),
        rule(
            r"(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
            "<uuid>",
        ),
        rule(r"(?i)\b0x[0-9a-f]{4,}\b", "<hex>"),
        // Hashes, commit ids, object ids: long hex runs that mix digits and letters.
        Rule {
            re: Regex::new(r"(?i)\b(?:[0-9a-f]*[0-9][0-9a-f]*[a-f][0-9a-f]*|[0-9a-f]*[a-f][0-9a-f]*[0-9][0-9a-f]*)\b")
                .expect("normalisation pattern compiles"),
            with: With::LongHex,
        },
        // Where an error happened, "line 42" — only on lines that say they are about an error
        // or point into a file (`File "x.py", line 42`, `x.py, line 42`): on other lines a
        // moving line or row number is progress ("reading line 0" → "line 1" is a poll moving
        // on, not the same output).
        Rule {
            re: Regex::new(r"(?i)\b(line|ln|col|column|row)\s*\d+").expect("compiles"),
            with: With::ErrorLines,
        },
        rule(r"(\.[A-Za-z]{1,5}):\d+(?::\d+)?", "$1:<n>"),
        // Temp paths: /tmp/..., /var/folders/..., /private/var/..., Windows Temp.
        rule(r#"(?:/private)?/(?:tmp|var/folders|var/tmp)/[^\s'":,;)\]]+"#, "<tmp>"),
        rule(r#"(?i)[a-z]:\\[^\s'":]*\\temp\\[^\s'":,;)\]]+"#, "<tmp>"),
        rule(r"(?i)\btmp[a-z0-9_]{6,}\b", "<tmp>"),
        // Durations: 3.2s, 120 ms, 5 minutes.
        rule(
            r"(?i)\b\d+(?:\.\d+)?\s?(?:ns|µs|us|ms|msec|s|sec|secs|seconds?|m|min|mins|minutes?|h|hrs?|hours?)\b",
            "<dur>",
        ),
        // Counters: attempt 3, retry #2, iteration 7, pid 4242, port 51234.
        rule(
            r"(?i)\b(attempt|retry|retries|iteration|iter|pid|port|thread|worker|request|req)\s*(?:#|no\.?|number)?\s*\d+",
            "$1 <n>",
        ),
        rule(r"#\d+\b", "#<n>"),
    ]
});

static ERROR_CONTEXT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)\b(?:error|exception|traceback|failed|failure|fatal|warning|panic|panicked|assert\w*)\b|file\s+"[^"]*",\s*line\s*\d|\.[a-z]{1,5}["']?,?\s+(?:at\s+)?(?:line|ln)\s*\d"#,
    )
    .expect("compiles")
});

/// Is this line about where an error happened?
fn error_context(line: &str) -> bool {
    ERROR_CONTEXT.is_match(line)
}

/// Mask the line and column numbers `re` finds on the lines of `text` that are about an error.
fn mask_error_lines(re: &Regex, text: &str) -> String {
    if !re.is_match(text) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if error_context(line) {
            out.push_str(&re.replace_all(line, "$1 <n>"));
        } else {
            out.push_str(line);
        }
    }
    out
}

static SPACES: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\s+").expect("compiles"));

/// Strip volatile parts (timestamps, UUIDs, hex, temp paths, durations, line numbers, counters),
/// collapse whitespace and lowercase, so the same message at a new time compares equal.
pub fn normalize(text: &str) -> String {
    let mut out = text.to_string();
    for r in VOLATILE.iter() {
        out = match r.with {
            With::Text(with) => r.re.replace_all(&out, with).into_owned(),
            With::LongHex => replace_long_hex(&r.re, &out),
            With::ErrorLines => mask_error_lines(&r.re, &out),
        };
    }
    let out = SPACES.replace_all(out.trim(), " ").to_lowercase();
    // "No matches found." and "No matches found" say the same; short texts' cosines move a lot
    // on punctuation alone.
    out.trim_end_matches(['.', '!', ';', ',', ':', ' '])
        .to_string()
}

// Only runs of 12+ characters are ids; short words like "cafe1" or "a1" stay as they are.
fn replace_long_hex(re: &Regex, text: &str) -> String {
    re.replace_all(text, |caps: &regex::Captures| {
        let m = &caps[0];
        if m.len() >= 12 {
            "<hex>".to_string()
        } else {
            m.to_string()
        }
    })
    .into_owned()
}

// A number starts where no letter, digit or underscore precedes it: `150` in `100,150p` and
// `30` in `30s` are numbers; the `3` of `python3` or `sha256` is part of a name.
static NUMBER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?:^|[^A-Za-z0-9_])(\d+(?:\.\d+)?)").expect("compiles"));

/// The numbers left in a normalised text, in order. Two texts whose numbers differ are not the
/// same observation: a later page, a job further along, a different test count.
pub fn numbers(normalized: &str) -> Vec<String> {
    NUMBER
        .captures_iter(normalized)
        .map(|c| c[1].to_string())
        .collect()
}

// Numbers that name something rather than measure it: IPv4 addresses (with a port), a host's
// port, a name with numbered parts (`node-224`, `blk_-7470…`, `d211-116-254-214.rev.example.net`),
// a long run of digits (a pid, a block id, a session id, an epoch in milliseconds), a pid in
// brackets (`sshd[4242]`), the number after a word that names a process or a connection, a date.
static IDENTIFIER_NUMBERS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    [
        (r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?\b", "<ip>"),
        (
            r"\b((?:[a-z0-9-]+\.)+[a-z]{2,}|localhost):\d{1,5}\b",
            "$1:<port>",
        ),
        (r"\b\d{4}[/-]\d{1,2}[/-]\d{1,2}\b", "<date>"),
        (
            r"\b[a-z][a-z0-9]*(?:[_-]+[a-z0-9]+)*[_-]+-?\d[a-z0-9_.-]*",
            "<name>",
        ),
        (r"-?\b\d{6,}\b", "<id>"),
        (r"\[\d{3,}\b", "[<id>"),
        (
            r"\b(child|command|process|session|job|container|node|connection|client)\s+\d+\b",
            "$1 <id>",
        ),
    ]
    .into_iter()
    .map(|(re, with)| (Regex::new(re).expect("compiles"), with))
    .collect()
});

/// The numbers of a (normalised) failure message that measure something: [`numbers`] without
/// the ones that only identify (addresses, ports, pids, long ids, numbered names, dates). One
/// failure on another host, process or block is the same failure; another count, size or
/// version is not.
pub fn measured_numbers(normalized: &str) -> Vec<String> {
    let mut out = std::borrow::Cow::Borrowed(normalized);
    for (re, with) in IDENTIFIER_NUMBERS.iter() {
        if let std::borrow::Cow::Owned(o) = re.replace_all(&out, *with) {
            out = std::borrow::Cow::Owned(o);
        }
    }
    numbers(&out)
}

static RESOURCE_ID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b|\b0x[0-9a-f]{6,}\b|\b[0-9a-f]*[0-9][0-9a-f]*[a-f][0-9a-f]{10,}\b|[A-Za-z0-9_][A-Za-z0-9_-]*\.[A-Za-z][A-Za-z0-9]{0,4}\b",
    )
    .expect("compiles")
});

/// The resources a tool call names: file names (`test_fix2.sql`), long hex ids (`0xCE32…`,
/// commit ids) and UUIDs, sorted and deduplicated. Two calls naming different resources are
/// different calls however alike they read — the same procedure on another input file is not a
/// repeat. Volatile-text normalisation would erase exactly these, so they are taken from the
/// text as given.
pub fn resource_ids(text: &str) -> Vec<String> {
    let mut ids: Vec<String> = RESOURCE_ID
        .find_iter(text)
        .map(|m| m.as_str().to_ascii_lowercase())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Render JSON with sorted object keys and no insignificant whitespace, whatever the map order
/// of the input (as `json.dumps(sort_keys=True)` does).
pub fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &serde_json::Value, out: &mut String) {
    match value {
        serde_json::Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        serde_json::Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Render tool arguments as readable text for the embedding model: `key: value` lines, strings
/// unquoted, nested values in canonical JSON. Key order is sorted so it is stable.
pub fn args_text(tool: &str, args: &serde_json::Value) -> String {
    let mut out = tool.to_string();
    match args {
        serde_json::Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for k in keys {
                out.push('\n');
                out.push_str(k);
                out.push_str(": ");
                match &map[k] {
                    serde_json::Value::String(s) => out.push_str(s),
                    other => out.push_str(&canonical_json(other)),
                }
            }
        }
        serde_json::Value::Null => {}
        serde_json::Value::String(s) => {
            out.push('\n');
            out.push_str(s);
        }
        other => {
            out.push('\n');
            out.push_str(&canonical_json(other));
        }
    }
    out
}

/// A tool output as text: strings as they are, other JSON canonical.
pub fn output_text(output: &serde_json::Value) -> String {
    match output {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => canonical_json(other),
    }
}

/// Keep the head and the tail of a long text: the model reads at most 256 tokens, and errors
/// tend to sit at the end of an output while its subject sits at the start.
/// What [`head_tail`] puts between the head and the tail it keeps.
pub const HEAD_TAIL_GAP: &str = " … ";

pub fn head_tail(text: &str, max_chars: usize) -> String {
    let count = text.chars().count();
    if count <= max_chars {
        return text.to_string();
    }
    let head = max_chars * 3 / 5;
    let tail = max_chars - head;
    let h: String = text.chars().take(head).collect();
    let t: String = text.chars().skip(count - tail).collect();
    format!("{h}{HEAD_TAIL_GAP}{t}")
}
