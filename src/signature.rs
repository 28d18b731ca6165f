//! Signatures: what makes two events "the same" before any embedding is computed.
//!
//! - [`normalize`] strips the volatile parts of a text (timestamps, UUIDs, hex addresses, temp
//!   paths, durations, counters, line numbers) so "the same error at a new time" is an exact match.
//! - [`FailureSignature`] is seed 000's failure signature: exact message, error type, location,
//!   context hash of the stack trace, plus the normalised form and its hash.
//! - [`canonical_json`] renders tool arguments with sorted keys (seed 002).
//! - [`numbers`] lists the numbers left after normalisation: when they differ, two otherwise
//!   similar texts are *not* the same (a page further on, a job further along, fewer tests failing).
//! - [`TestMetrics::extract`] reads test summaries (pytest, cargo, jest, plain "N tests failing").

use regex::Regex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::LazyLock;

/// SHA-256 of a text, hex encoded.
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
    /// `None`: a long-hex candidate, replaced only when it is 12+ characters long.
    with: Option<&'static str>,
}

fn rule(pattern: &str, with: &'static str) -> Rule {
    Rule {
        re: Regex::new(pattern).expect("normalisation pattern compiles"),
        with: Some(with),
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
            with: None,
        },
        // Line and column numbers: "line 42", "file.py:42:7".
        rule(r"(?i)\b(line|ln|col|column|row)\s*\d+", "$1 <n>"),
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

static SPACES: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\s+").expect("compiles"));

/// Strip volatile parts (timestamps, UUIDs, hex, temp paths, durations, line numbers, counters),
/// collapse whitespace and lowercase, so the same message at a new time compares equal.
pub fn normalize(text: &str) -> String {
    let mut out = text.to_string();
    for r in VOLATILE.iter() {
        out = match r.with {
            Some(with) => r.re.replace_all(&out, with).into_owned(),
            None => replace_long_hex(&r.re, &out),
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
/// of the input (seed 002's `json.dumps(sort_keys=True)`).
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
pub fn head_tail(text: &str, max_chars: usize) -> String {
    let count = text.chars().count();
    if count <= max_chars {
        return text.to_string();
    }
    let head = max_chars * 3 / 5;
    let tail = max_chars - head;
    let h: String = text.chars().take(head).collect();
    let t: String = text.chars().skip(count - tail).collect();
    format!("{h} … {t}")
}

/// Error categories of seed 000, plus the external ones that do not count against the agent.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    PartialOrd,
    Ord,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    Syntax,
    Runtime,
    Logic,
    Test,
    Dependency,
    Network,
    Auth,
    Timeout,
    RateLimit,
    Outage,
    Resource,
    Unknown,
}

impl ErrorType {
    pub const ALL: [ErrorType; 12] = [
        ErrorType::Syntax,
        ErrorType::Runtime,
        ErrorType::Logic,
        ErrorType::Test,
        ErrorType::Dependency,
        ErrorType::Network,
        ErrorType::Auth,
        ErrorType::Timeout,
        ErrorType::RateLimit,
        ErrorType::Outage,
        ErrorType::Resource,
        ErrorType::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::Syntax => "syntax",
            ErrorType::Runtime => "runtime",
            ErrorType::Logic => "logic",
            ErrorType::Test => "test",
            ErrorType::Dependency => "dependency",
            ErrorType::Network => "network",
            ErrorType::Auth => "auth",
            ErrorType::Timeout => "timeout",
            ErrorType::RateLimit => "rate_limit",
            ErrorType::Outage => "outage",
            ErrorType::Resource => "resource",
            ErrorType::Unknown => "unknown",
        }
    }

    /// A caller-given type name; unknown names map to `Unknown` rather than failing the event.
    pub fn parse(name: &str) -> ErrorType {
        let n = name.trim().to_ascii_lowercase().replace(['-', ' '], "_");
        match n.as_str() {
            "syntax" => ErrorType::Syntax,
            "runtime" | "type" => ErrorType::Runtime,
            "logic" | "assertion" => ErrorType::Logic,
            "test" | "tests" => ErrorType::Test,
            "dependency" | "import" => ErrorType::Dependency,
            "network" | "connection" => ErrorType::Network,
            "auth" | "authentication" | "authorization" | "permission" => ErrorType::Auth,
            "timeout" => ErrorType::Timeout,
            "rate_limit" | "ratelimit" => ErrorType::RateLimit,
            "outage" | "unavailable" | "dependency_outage" | "external" => ErrorType::Outage,
            "resource" | "memory" | "disk" => ErrorType::Resource,
            _ => ErrorType::Unknown,
        }
    }
}

static CLASSIFIERS: LazyLock<Vec<(ErrorType, Regex)>> = LazyLock::new(|| {
    let c = |t, p: &str| (t, Regex::new(p).expect("classifier compiles"));
    vec![
        c(
            ErrorType::Outage,
            r"(?i)service unavailable|temporarily unavailable|\b50[234]\b|bad gateway|gateway time-?out|external service|upstream (?:error|unavailable)|is (?:currently )?down\b|under maintenance|outage",
        ),
        c(
            ErrorType::RateLimit,
            r"(?i)rate.?limit|too many requests|\b429\b|quota exceeded|throttl",
        ),
        c(
            ErrorType::Auth,
            r"(?i)\b401\b|\b403\b|unauthori[sz]ed|forbidden|authentication failed|invalid (?:api[_ ]?key|token|credentials)|access denied|permission denied \(publickey\)|expired token|not authenticated",
        ),
        c(
            ErrorType::Network,
            r"(?i)\b(?:econnrefused|econnreset|enotfound|ehostunreach|enetunreach|etimedout)\b|connection (?:refused|reset|aborted|closed)|could not resolve host|name or service not known|network is unreachable|getaddrinfo|socket hang up|no route to host|\bdns\b",
        ),
        c(
            ErrorType::Timeout,
            r"(?i)timed? ?out|timeout|deadline exceeded",
        ),
        c(
            ErrorType::Dependency,
            r"(?i)modulenotfounderror|importerror|no module named|cannot find module|could not resolve dependenc|unresolved import|package .* not found|no matching distribution|cannot find package|unable to locate package|command not found|not installed",
        ),
        c(
            ErrorType::Syntax,
            r"(?i)syntaxerror|indentationerror|syntax error|unexpected token|parse error|parseerror|unexpected eof|expected one of|unterminated",
        ),
        c(
            ErrorType::Resource,
            r"(?i)out of memory|memoryerror|no space left|disk full|too many open files|\boom\b|resource exhausted|killed",
        ),
        c(
            ErrorType::Test,
            r"(?i)\d+ tests? (?:are )?(?:fail|failed|failing)|tests? failed|\d+ failed|failures?:\s*\d+|test result: failed",
        ),
        c(
            ErrorType::Logic,
            r"(?i)assertionerror|assertion failed|assert(?:ion)?\b|expected .* (?:got|but was|received)|wrong answer|incorrect",
        ),
        c(
            ErrorType::Runtime,
            r"(?i)typeerror|valueerror|keyerror|indexerror|attributeerror|nameerror|zerodivisionerror|runtimeerror|nullpointerexception|panicked at|segmentation fault|undefined is not|cannot read propert|is not a function|is not defined|exception|traceback|error",
        ),
    ]
});

/// Classify a failure message (and stack trace) into an error type.
pub fn classify(message: &str, stack_trace: Option<&str>) -> ErrorType {
    for (t, re) in CLASSIFIERS.iter() {
        if re.is_match(message) {
            return *t;
        }
    }
    if let Some(st) = stack_trace {
        for (t, re) in CLASSIFIERS.iter() {
            if re.is_match(st) {
                return *t;
            }
        }
    }
    ErrorType::Unknown
}

static LOCATION: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    vec![
        // Python: File "x.py", line 42
        Regex::new(r#"File "([^"]+)", line (\d+)"#).expect("compiles"),
        // path/to/file.ext:42 (Rust, JS, Go, C, ...)
        Regex::new(r"([A-Za-z0-9_./\\-]+\.[A-Za-z]{1,5}):(\d+)").expect("compiles"),
    ]
});

/// A `file:line` location found in a message or stack trace. For a Python traceback the
/// innermost frame (the last one) is the location.
pub fn extract_location(message: &str, stack_trace: Option<&str>) -> Option<String> {
    for text in [stack_trace.unwrap_or(""), message] {
        for re in LOCATION.iter() {
            if let Some(c) = re.captures_iter(text).last() {
                return Some(format!("{}:{}", &c[1], &c[2]));
            }
        }
    }
    None
}

static EXCEPTION_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b([A-Z][A-Za-z0-9]*(?:Error|Exception)|E[A-Z]{4,})\b").expect("compiles")
});

/// The exception or errno name of a message (`TypeError`, `ENOENT`), when it names one.
pub fn exception_name(message: &str) -> Option<String> {
    EXCEPTION_NAME.captures(message).map(|c| c[1].to_string())
}

/// Seed 000's failure signature, with the normalised form that makes volatile variants equal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureSignature {
    pub error_type: ErrorType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// SHA-256 of the normalised stack trace, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exception: Option<String>,
    pub normalized: String,
    /// SHA-256 of `normalized`.
    pub hash: String,
}

impl FailureSignature {
    pub fn of(failure: &crate::event::Failure) -> Self {
        let error_type = failure
            .error_type
            .as_deref()
            .map(ErrorType::parse)
            .filter(|t| *t != ErrorType::Unknown)
            .unwrap_or_else(|| classify(&failure.message, failure.stack_trace.as_deref()));
        let location = failure
            .location
            .clone()
            .or_else(|| extract_location(&failure.message, failure.stack_trace.as_deref()));
        let context_hash = failure
            .stack_trace
            .as_deref()
            .filter(|s| !s.trim().is_empty())
            .map(|s| sha256_hex(&normalize(s)));
        let normalized = normalize(&failure.message);
        FailureSignature {
            error_type,
            location,
            context_hash,
            exception: exception_name(&failure.message),
            hash: sha256_hex(&normalized),
            normalized,
        }
    }
}

/// Test results read from a progress event or from a test runner's summary text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TestMetrics {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<f64>,
}

static TEST_PATTERNS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    let r = |p: &str, what| (Regex::new(p).expect("test pattern compiles"), what);
    vec![
        // cargo: test result: FAILED. 3 passed; 2 failed;
        r(
            r"test result: \w+\. (\d+) passed; (\d+) failed",
            "passed,failed",
        ),
        // jest: Tests:       2 failed, 5 passed, 7 total
        r(r"Tests:\s+(\d+) failed, (\d+) passed", "failed,passed"),
        r(r"Tests:\s+(\d+) passed", "passed"),
        // pytest: === 2 failed, 10 passed in 0.12s ===  (either order)
        r(r"(?i)\b(\d+) failed\b", "failed"),
        r(r"(?i)\b(\d+) passed\b", "passed"),
        // plain English: 3 tests failing, 1 test failed, 4 failures
        r(
            r"(?i)\b(\d+) tests? (?:are )?(?:failing|failed|fail)\b",
            "failed",
        ),
        r(r"(?i)\b(\d+) (?:failures|failing)\b", "failed"),
        r(
            r"(?i)\b(\d+) tests? (?:are )?(?:passing|passed|pass)\b",
            "passed",
        ),
        r(
            r"(?i)coverage[^0-9%\n]{0,20}(\d+(?:\.\d+)?)\s?%",
            "coverage",
        ),
        r(r"(?m)^TOTAL\s+.*?(\d+(?:\.\d+)?)%\s*$", "coverage"),
    ]
});

impl TestMetrics {
    pub fn is_empty(&self) -> bool {
        self.passed.is_none() && self.failed.is_none() && self.coverage.is_none()
    }

    pub fn from_progress(p: &crate::event::Progress) -> Self {
        TestMetrics {
            passed: p.tests_passed,
            failed: p.tests_failed,
            coverage: p.coverage,
        }
    }

    /// Read a test summary out of free text; the first pattern that sets a field wins.
    pub fn extract(text: &str) -> Self {
        let mut m = TestMetrics::default();
        for (re, what) in TEST_PATTERNS.iter() {
            if let Some(c) = re.captures(text) {
                for (i, field) in what.split(',').enumerate() {
                    let v = &c[i + 1];
                    match field {
                        "passed" if m.passed.is_none() => m.passed = v.parse().ok(),
                        "failed" if m.failed.is_none() => m.failed = v.parse().ok(),
                        "coverage" if m.coverage.is_none() => m.coverage = v.parse().ok(),
                        _ => {}
                    }
                }
            }
        }
        m
    }

    /// Seed 000's progress: coverage improved or fewer tests failing (or more passing).
    pub fn improved_over(&self, before: &TestMetrics) -> bool {
        let gt = |a: Option<f64>, b: Option<f64>| matches!((a, b), (Some(a), Some(b)) if a > b);
        let lt = |a: Option<u64>, b: Option<u64>| matches!((a, b), (Some(a), Some(b)) if a < b);
        gt(self.coverage, before.coverage)
            || lt(self.failed, before.failed)
            || lt(before.passed, self.passed)
    }

    /// Worse than before: more tests failing or lower coverage. Fewer passing alone is not
    /// worse: it is what running a smaller selection of tests looks like.
    pub fn worse_than(&self, before: &TestMetrics) -> bool {
        let lt_f = |a: Option<f64>, b: Option<f64>| matches!((a, b), (Some(a), Some(b)) if a < b);
        let gt = |a: Option<u64>, b: Option<u64>| matches!((a, b), (Some(a), Some(b)) if a > b);
        let fewer_failing = matches!((self.failed, before.failed), (Some(a), Some(b)) if a < b);
        (gt(self.failed, before.failed) || lt_f(self.coverage, before.coverage)) && !fewer_failing
    }
}

static NEGATIVE_RESULT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\bno (?:results?|matches?|match|files?|such|entries|records?|items?|data)\b|\bnot found\b|\bnothing found\b|\bdoes not exist\b|\bdoesn't exist\b|\bcould ?n[o']t find\b|\bcannot find\b|\bunable to find\b|\b0 (?:results?|matches?|hits|items|files)\b|\bfound 0\b|^\s*\[\]\s*$|^\s*\{\}\s*$")
        .expect("compiles")
});

/// A result that reports nothing useful: nothing found, does not exist, an empty list.
pub fn is_negative_result(text: &str) -> bool {
    NEGATIVE_RESULT.is_match(text)
}

static TAGS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"<[^>\s]{1,40}>").expect("compiles"));

/// A result with too little content to identify anything (empty, only markup, "OK").
pub fn is_trivial_result(normalized: &str) -> bool {
    let stripped = TAGS.replace_all(normalized, "");
    stripped.chars().filter(|c| c.is_alphanumeric()).count() < 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Failure;

    #[test]
    fn normalize_strips_volatile_parts() {
        let a = normalize("2026-11-21T10:00:00Z ERROR request 1234 failed after 3.2s at /tmp/tmpa8f9z2k1/x.py:42 (0x7ffd5e8a1b20) id 550e8400-e29b-41d4-a716-446655440000");
        let b = normalize("2026-11-22T11:30:05.123+02:00 error Request 99 failed after 120 ms at /tmp/tmpq0wz77xx/x.py:57 (0x7ffd00001111) id 123e4567-e89b-12d3-a456-426614174000");
        assert_eq!(a, b);
        assert!(
            a.contains("<ts>") && a.contains("<uuid>") && a.contains("<hex>"),
            "{a}"
        );
    }

    #[test]
    fn normalize_keeps_meaningful_numbers() {
        assert_ne!(normalize("3 tests failing"), normalize("5 tests failing"));
        assert_eq!(numbers(&normalize("sed -n 100,150p f.py")), ["100", "150"]);
        assert!(numbers("python3 -m pip install sha256sum v2").is_empty());
        assert_eq!(
            normalize("No matches found."),
            normalize("no matches found")
        );
        assert_eq!(
            normalize("Syntax error at line 42"),
            normalize("Syntax error at line 43")
        );
    }

    #[test]
    fn long_hex_ids_are_volatile_but_short_words_are_not() {
        assert_eq!(
            normalize("commit 3f9a2c1b7d4e5f60 failed"),
            normalize("commit a1b2c3d4e5f60718 failed")
        );
        assert_eq!(normalize("cafe1 a1"), "cafe1 a1");
    }

    #[test]
    fn resource_ids_are_files_and_long_ids() {
        assert_eq!(
            resource_ids("cp test_nvl.sql test_fix2.sql && cat Test_Fix2.sql"),
            ["test_fix2.sql", "test_nvl.sql"]
        );
        assert_eq!(
            resource_ids("RsaCtfTool.py -n 0xCE3205AEFBF19FB8 -e 3").len(),
            2
        );
        assert!(resource_ids("cd /testbed && python3 -m pytest -x | cat").is_empty());
        assert_eq!(resource_ids("git show 3f9a2c1b7d4e5f60").len(), 1);
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"b":1,"a":{"d":[1,{"z":1,"y":2}],"c":"x"}}"#).unwrap();
        let b: serde_json::Value =
            serde_json::from_str(r#"{"a":{"c":"x","d":[1,{"y":2,"z":1}]},"b":1}"#).unwrap();
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(
            canonical_json(&b),
            r#"{"a":{"c":"x","d":[1,{"y":2,"z":1}]},"b":1}"#
        );
    }

    #[test]
    fn classifies_the_seed_examples() {
        assert_eq!(
            classify("TypeError: cannot read property 'x' of undefined", None),
            ErrorType::Runtime
        );
        assert_eq!(classify("Syntax error at line 42", None), ErrorType::Syntax);
        assert_eq!(
            classify("API timeout: external service unavailable", None),
            ErrorType::Outage
        );
        assert_eq!(
            classify("connect ECONNREFUSED 127.0.0.1:5432", None),
            ErrorType::Network
        );
        assert_eq!(classify("HTTP 401 Unauthorized", None), ErrorType::Auth);
        assert_eq!(
            classify("ModuleNotFoundError: No module named 'requests'", None),
            ErrorType::Dependency
        );
        assert_eq!(classify("5 tests failing", None), ErrorType::Test);
        assert_eq!(classify("all good", None), ErrorType::Unknown);
    }

    #[test]
    fn failure_signature_fields() {
        let f = Failure {
            message: "TypeError: x is not a function".into(),
            error_type: None,
            location: None,
            stack_trace: Some("Traceback:\n  File \"app/main.py\", line 10, in run\n  File \"app/util.py\", line 42, in go".into()),
        };
        let s = FailureSignature::of(&f);
        assert_eq!(s.error_type, ErrorType::Runtime);
        assert_eq!(s.location.as_deref(), Some("app/util.py:42"));
        assert_eq!(s.exception.as_deref(), Some("TypeError"));
        assert!(s.context_hash.is_some());
        assert_eq!(s.hash, sha256_hex(&s.normalized));
        // An explicit type wins over the classifier.
        let g = Failure {
            error_type: Some("dependency".into()),
            ..f
        };
        assert_eq!(FailureSignature::of(&g).error_type, ErrorType::Dependency);
    }

    #[test]
    fn extracts_test_summaries() {
        let m = TestMetrics::extract("===== 2 failed, 10 passed in 0.31s =====");
        assert_eq!((m.passed, m.failed), (Some(10), Some(2)));
        let m = TestMetrics::extract("test result: FAILED. 3 passed; 1 failed; 0 ignored");
        assert_eq!((m.passed, m.failed), (Some(3), Some(1)));
        let m = TestMetrics::extract("Tests:       2 failed, 5 passed, 7 total");
        assert_eq!((m.passed, m.failed), (Some(5), Some(2)));
        let m = TestMetrics::extract("8 tests failing");
        assert_eq!(m.failed, Some(8));
        let m = TestMetrics::extract("coverage: 75.5%");
        assert_eq!(m.coverage, Some(75.5));
        assert!(TestMetrics::extract("hello").is_empty());
    }

    #[test]
    fn progress_and_regression_comparisons() {
        let a = TestMetrics {
            failed: Some(3),
            ..Default::default()
        };
        let b = TestMetrics {
            failed: Some(5),
            ..Default::default()
        };
        assert!(b.worse_than(&a) && !b.improved_over(&a));
        assert!(a.improved_over(&b) && !a.worse_than(&b));
        let c = TestMetrics {
            coverage: Some(60.0),
            ..Default::default()
        };
        let d = TestMetrics {
            coverage: Some(75.0),
            ..Default::default()
        };
        assert!(d.improved_over(&c));
    }

    #[test]
    fn negative_and_trivial_results() {
        assert!(is_negative_result("No results found for 'fo0'"));
        assert!(is_negative_result(
            "grep: foo.py: No such file or directory"
        ));
        assert!(is_negative_result("[]"));
        assert!(!is_negative_result("Found 3 matches"));
        assert!(is_trivial_result(&normalize(
            "<returncode>0</returncode>\n<output>\n</output>"
        )));
        assert!(!is_trivial_result(&normalize(
            "Updated 1 path from the index"
        )));
    }

    #[test]
    fn head_tail_keeps_both_ends() {
        let t: String = (0..1000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let s = head_tail(&t, 100);
        assert!(s.starts_with("abc") && s.ends_with(&t[t.len() - 10..]));
        assert_eq!(head_tail("short", 100), "short");
    }
}
