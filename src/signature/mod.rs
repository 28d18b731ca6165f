//! Signatures: what makes two events "the same" before any embedding is computed.
//!
//! - [`normalize`] strips the volatile parts of a text (timestamps, UUIDs, hex addresses, temp
//!   paths, durations, counters, line numbers) so "the same error at a new time" is an exact match.
//! - [`FailureSignature`] is the failure signature: exact message, error type, location,
//!   context hash of the stack trace, plus the normalised form and its hash.
//! - [`canonical_json`] renders tool arguments with sorted keys.
//! - [`numbers`] lists the numbers left after normalisation: when they differ, two otherwise
//!   similar texts are *not* the same (a page further on, a job further along, fewer tests failing).
//! - [`TestMetrics::extract`] reads test summaries (pytest, cargo, jest, plain "N tests failing").

pub mod artifact;
mod echo;
mod normalize;
mod outcome;
mod results;

pub use echo::{echo_key, residue, residue_overlap};
pub use normalize::*;
pub use outcome::{
    error_lines, outcome_in_task, outcome_of, template_key, AmbientLine, AmbientLines, Outcome,
};
pub use results::*;

use regex::Regex;
use serde::{Deserialize, Serialize};
use std::sync::LazyLock;

/// Error categories, plus the external ones that do not count against the agent.
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

/// A failure signature, with the normalised form that makes volatile variants equal.
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
    fn a_failure_keeps_the_numbers_that_measure_and_drops_the_ones_that_identify() {
        let m = |t: &str| measured_numbers(&normalize(t));
        // Addresses, ports, pids, long ids, numbered names and dates identify.
        assert!(m("connection from 82.252.162.81 refused").is_empty());
        assert!(m("timeout talking to db.example.com:5432").is_empty());
        assert!(m("sshd[24242]: invalid user from host-10-2-3-4.example.net").is_empty());
        assert!(m("served block blk_-1125621902344947014 to node-224").is_empty());
        assert!(m("jk2_init() can't find child 5621 in scoreboard").is_empty());
        assert!(m("2016/9/28 wcpinitialize called").is_empty());
        // Counts, sizes and versions measure: another one is another observation.
        assert_eq!(m("3 tests failed, 12 passed"), ["3", "12"]);
        assert_eq!(m("requires numpy>=1.24, found 1.21"), ["1.24", "1.21"]);
        assert_eq!(m("disk quota exceeded: 912.0 kb free"), ["912.0"]);
        // Only failures use the relaxed guard: a tool's output keeps every number.
        assert_eq!(numbers(&normalize("served block to node-224")), ["224"]);
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
        assert_eq!(
            normalize("Traceback:\n  File \"a.py\", line 7, in <module>\nKeyError: 'x'"),
            normalize("Traceback:\n  File \"a.py\", line 9, in <module>\nKeyError: 'x'")
        );
        assert_eq!(
            normalize("src/parse.rs, line 12: unexpected token"),
            normalize("src/parse.rs, line 15: unexpected token")
        );
        // A poll moving on is not the same output.
        assert_ne!(
            normalize("tailing app.log: at line 0, waiting"),
            normalize("tailing app.log: at line 1, waiting")
        );
        assert_ne!(
            normalize("imported row 100 of the table"),
            normalize("imported row 200 of the table")
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
