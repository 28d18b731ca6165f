//! What a tool result or a progress report says: test metrics read from runner summaries, and
//! whether a result is negative (an error, "nothing found") or trivial (too little text to
//! identify anything).

use regex::Regex;
use serde::{Deserialize, Serialize};
use std::sync::LazyLock;

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

    /// Progress: coverage improved or fewer tests failing (or more passing).
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

/// The shape of an output's lines, to see one call's effect pile up: the same call run again
/// printing only more copies of lines it already printed (an edit applied twice duplicates the
/// lines it inserts; an append re-run shows its line twice).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineShape {
    /// Key of the distinct lines, digits masked (a line number or a "(12 lines total)" moves as
    /// lines are added). 0: not known (a result stored before it was kept).
    pub distinct: u64,
    /// Lines (not blank).
    pub lines: u32,
    /// Lines with no digit once a leading line number is set aside: the copies that say
    /// something. A log gaining "epoch 3 loss 0.2" under "epoch 2 loss 0.3" is new output, not a
    /// copy, however alike the two look with digits masked.
    pub plain: u32,
}

static LINE_NUMBER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*\d+\s*[:|\t-]?\s*").expect("line number pattern compiles"));

impl LineShape {
    pub fn is_unknown(&self) -> bool {
        self.distinct == 0
    }

    pub fn of(output: &str) -> LineShape {
        let mut distinct: Vec<String> = Vec::new();
        let (mut lines, mut plain) = (0u32, 0u32);
        for l in output.lines().map(str::trim).filter(|l| !l.is_empty()) {
            lines += 1;
            let body = LINE_NUMBER.replace(l, "");
            if !body.chars().any(|c| c.is_ascii_digit()) {
                plain += 1;
            }
            distinct.push(super::digits_masked(l));
        }
        if lines == 0 {
            return LineShape::default();
        }
        distinct.sort_unstable();
        distinct.dedup();
        LineShape {
            distinct: crate::signature::key64(&distinct.join("\n")).max(1),
            lines,
            plain,
        }
    }

    /// Did `self`, the output of a call run again, only add copies of lines `earlier` printed
    /// (the same distinct lines, more of them, more plain ones among them)?
    pub fn piled_on(&self, earlier: &LineShape) -> bool {
        self.distinct != 0
            && self.distinct == earlier.distinct
            && self.lines > earlier.lines
            && self.plain > earlier.plain
    }
}

/// Lines of an output with numbers in them kept one by one, at most this many (an output with
/// more — a file view, a listing — keeps none: its numbers are its content).
pub const NUMBERED_LINES_KEPT: usize = 16;

/// The lines of an output that carry numbers, each as (key of its template — digits masked —,
/// key of the line as printed), in order, with the key of the whole output digits masked. Two
/// outputs whose only differences are in the numbers of lines the task knows for counters
/// (a token count, a cost, elapsed seconds: [`crate::signature::AmbientLines::is_counter`])
/// say the same thing ([`NumberedLines::alike_but_counters`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumberedLines {
    /// Key of the output, digits masked. 0: not kept (too many numbered lines, or none).
    pub skel: u64,
    /// (template, line) keys of the numbered lines, in order.
    pub lines: Vec<(u32, u32)>,
}

/// A text with each amount masked as one `#`: digits with the separators between them (`1,024`,
/// `0.50`) and a magnitude letter right after them (`4.2k`, `11k`, `3M`). A counter grows from
/// `793` to `11k`: its line must keep one template while it does.
fn amounts_masked(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if !c.is_ascii_digit() {
            out.push(c);
            continue;
        }
        out.push('#');
        let mut rest = chars.clone();
        loop {
            match rest.next() {
                Some(d) if d.is_ascii_digit() => chars = rest.clone(),
                Some('.' | ',') if rest.peek().is_some_and(char::is_ascii_digit) => {
                    chars = rest.clone()
                }
                Some('k' | 'K' | 'M' | 'B')
                    if !rest.peek().is_some_and(|n| n.is_alphanumeric()) =>
                {
                    chars = rest;
                    break;
                }
                _ => break,
            }
        }
    }
    out
}

impl NumberedLines {
    pub fn is_empty(&self) -> bool {
        self.skel == 0
    }

    pub fn of(output: &str) -> NumberedLines {
        let mut lines = Vec::new();
        for l in output.lines().map(str::trim) {
            if !l.chars().any(|c| c.is_ascii_digit()) {
                continue;
            }
            if lines.len() == NUMBERED_LINES_KEPT {
                return NumberedLines::default();
            }
            lines.push((
                crate::signature::key64(&amounts_masked(l)) as u32,
                crate::signature::key64(l) as u32,
            ));
        }
        if lines.is_empty() {
            return NumberedLines::default();
        }
        NumberedLines {
            skel: crate::signature::key64(&amounts_masked(output.trim())).max(1),
            lines,
        }
    }

    /// The lines to note as possible counters of the task's environment: every numbered line
    /// of an output kept, and of one with too many to keep, its first and last (where a tool
    /// prints its running totals), each with the output's key (amounts masked).
    pub fn counter_candidates(&self, output: &str) -> Vec<(u32, u32, u64)> {
        if !self.is_empty() {
            return self
                .lines
                .iter()
                .map(|(t, l)| (*t, *l, self.skel))
                .collect();
        }
        let numbered = || {
            output
                .lines()
                .map(str::trim)
                .filter(|l| l.chars().any(|c| c.is_ascii_digit()))
        };
        let skel = crate::signature::key64(&amounts_masked(output.trim())).max(1);
        let mut out: Vec<(u32, u32, u64)> = Vec::new();
        for l in numbered().take(1).chain(numbered().next_back()) {
            let candidate = (
                crate::signature::key64(&amounts_masked(l)) as u32,
                crate::signature::key64(l) as u32,
                skel,
            );
            if !out.contains(&candidate) {
                out.push(candidate);
            }
        }
        out
    }

    /// Do the two outputs differ only in the numbers of counter lines (and in some of them)?
    pub fn alike_but_counters(&self, other: &NumberedLines, counter: impl Fn(u32) -> bool) -> bool {
        !self.is_empty()
            && self.skel == other.skel
            && self.lines.len() == other.lines.len()
            && self
                .lines
                .iter()
                .zip(&other.lines)
                .all(|((t1, l1), (t2, l2))| t1 == t2 && (l1 == l2 || counter(*t1)))
            && self.lines != other.lines
    }
}

#[cfg(test)]
mod tests {
    use super::LineShape;

    #[test]
    fn an_amount_keeps_one_template_as_it_grows() {
        let m = super::amounts_masked;
        assert_eq!(
            m("Tokens: 793 sent, 11k received. Cost: $0.16 message, $1,024.50 session."),
            m("Tokens: 34k sent, 49 received. Cost: $0.10 message, $0.7 session.")
        );
        assert_eq!(m("Tokens: 4.2k sent"), "Tokens: # sent");
        // A letter that starts a word is not a magnitude.
        assert_eq!(m("3 Kb, 5 known, v1.2-rc"), "# Kb, # known, v#-rc");
        assert_eq!(m("12kg at 3ms"), "#kg at #ms");
    }

    fn view(lines: &[&str]) -> String {
        let body: Vec<String> = lines
            .iter()
            .enumerate()
            .map(|(i, l)| format!("{}:{l}", i + 1))
            .collect();
        format!(
            "[File: /r/mock.py ({} lines total)]\n{}\nFile updated.",
            lines.len(),
            body.join("\n")
        )
    }

    #[test]
    fn outputs_that_differ_in_counters_only_are_alike_when_those_lines_are_counters() {
        use super::NumberedLines;
        let out = |sent: &str, cost: &str, left: u32| {
            NumberedLines::of(&format!(
                "The edit did not apply: no exact match.\nTokens: {sent} sent, 120 received. Cost: {cost} session.\nLines left: {left}"
            ))
        };
        let (a, b) = (out("4.2k", "$0.05", 3), out("4.5k", "$0.07", 3));
        let tokens = a.lines[0].0;
        assert!(a.alike_but_counters(&b, |t| t == tokens));
        assert!(
            !a.alike_but_counters(&b, |_| false),
            "unknown counters are numbers like any"
        );
        // Another number on a line that is no counter is another output.
        assert!(!a.alike_but_counters(&out("4.5k", "$0.07", 2), |t| t == tokens));
        assert!(
            !a.alike_but_counters(&a, |_| true),
            "the same output is the repeat rules' case"
        );
        let view: String = (1..40).map(|i| format!("{i}: line\n")).collect();
        assert!(
            NumberedLines::of(&view).is_empty(),
            "a file view's numbers are its content"
        );
    }

    #[test]
    fn an_edit_applied_twice_piles_its_lines_up() {
        let once = LineShape::of(&view(&["import datetime", "import pydantic", "class A:"]));
        let twice = LineShape::of(&view(&[
            "import datetime",
            "import pydantic",
            "import pydantic",
            "class A:",
        ]));
        assert!(twice.piled_on(&once));
        assert!(!once.piled_on(&twice));
        assert!(
            !once.piled_on(&once),
            "the same output is the repeat rule's case"
        );
    }

    #[test]
    fn a_log_moving_forward_is_not_a_pile_however_alike_its_lines() {
        let log = |n: usize| {
            (1..=n)
                .map(|i| format!("epoch {i} loss 0.{}", 9 - i))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert!(!LineShape::of(&log(3)).piled_on(&LineShape::of(&log(2))));
        // New lines of text are new output.
        let tail = |extra: &str| format!("server starting\nlistening on :8080\n{extra}");
        assert!(!LineShape::of(&tail("GET /health 200")).piled_on(&LineShape::of(&tail(""))));
        // Nothing known, nothing said.
        assert!(!LineShape::of("a\na").piled_on(&LineShape::default()));
        assert!(LineShape::of("").is_unknown());
    }
}
