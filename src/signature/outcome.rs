//! The outcome of a tool call: the error lines of its output, as a signature.
//!
//! A real agent that is stuck rarely repeats its call word for word; it re-sends an edit with a
//! shifted line range, guesses one file path after another, re-scopes a search. What stays the
//! same is where each attempt ends: the same linter error, the same "No such file", the same
//! exception. The output around that line moves (a preview of the rejected edit with its line
//! numbers, the name that was guessed), so comparing whole outputs misses it; the error lines
//! alone do not move.
//!
//! An output's outcome is its last few *error lines*: an exception line (`KeyError: 'x'`), a
//! tool's message (`ls: cannot access 'x': No such file or directory`), a linter line (`- E999
//! IndentationError: unexpected indent`), a test summary (`FAILED ...`, pytest's `E   ...`), an
//! `error:`/`fatal:` line, or a "nothing found" sentence. Lines of code or of a file view
//! (indented, or numbered like `42:` and `42-`) quote error words without being an outcome and
//! are skipped. Two keys are kept:
//!
//! - `exact`: the lines with paths, numbers and identifiers masked — the same error at another
//!   line number or path;
//! - `template`: also with quoted values masked — the same kind of error about another name
//!   (`undefined name 'a'` / `'b'`). A template alone means "the same dead end" only for the same
//!   attempt repeated; another name after a successful change is progress (the next missing
//!   module, the next failing assertion).

use super::key64;
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::sync::LazyLock;

/// Error lines kept per output (the last ones: a traceback ends with its exception).
const LINES_KEPT: usize = 3;
/// Longer lines are content, not a message.
const MAX_LINE_CHARS: usize = 300;
/// Characters of the outcome text kept for reasons and evidence.
const TEXT_KEPT_CHARS: usize = 240;
/// Quoted names kept per outcome, and their longest.
const NAMES_KEPT: usize = 8;
const MAX_NAME_CHARS: usize = 80;

/// Where a tool call ended, when it ended in an error or a "nothing found".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// Key of the error lines with paths, numbers and identifiers masked.
    pub exact: u64,
    /// Key of the same with quoted values masked too.
    pub template: u64,
    /// The error lines as given (the last one first), for reasons.
    pub text: String,
    /// The quoted values in those lines (`'parse_report'`), lowercased: the names a template
    /// masks, kept to tell which change an error is about.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// The call was refused as written — a shell syntax error, an unknown option, argument or
    /// command — so it never ran: nothing it meant to do happened.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refused: bool,
    /// Key of what the output printed besides its error lines and listings, digits masked
    /// ([`error_lines_and_rest`]); 0: not known (an outcome stored before it was kept).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rest: u64,
    /// Keys of the error lines one by one (masked as for `exact`, sorted, no repeats): which
    /// errors an attempt left standing whatever else it also hit. Empty in an outcome stored
    /// before they were kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<u64>,
}

impl Outcome {
    /// Did this outcome hit every error line of `other` (and maybe more)?
    pub fn holds(&self, other: &Outcome) -> bool {
        self.exact == other.exact
            || (!other.lines.is_empty() && other.lines.iter().all(|l| self.lines.contains(l)))
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

static ERROR_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?x)
          ^(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b\s*(?::|$)   # KeyError: 'x'
        | ^[\w./\[\]()-]+(?:\ [\w./-]+)?:\ (?i:.*(?:error|not\ found|no\ such|cannot|can't|invalid|denied|unrecognized|not\ recognized|failed|unable|refused|timed\ out|no\ module|missing\ operand|unexpected\ eof))
        | ^-\ [EFW]\d{3}\b                                  # - E999 IndentationError: ...
        | ^E\s{2,}\S                                        # pytest: E   AssertionError
        | ^(?:FAILED|ERROR)\b                               # test summaries
        | ^(?i:error|fatal)\b
        | ^(?i:no\ (?:matches|results?|files?|such))\b
        | ^(?i:could\ ?n[o']t\ find|cannot\ find|unable\ to\ find|nothing\ found)\b
        | (?i:\bnot\ found\.?$|did\ not\ produce\ any\ output|timed\ out)
        | (?i:\b(?:hit|exceeded|reached)\ (?:the\ |a\ |its\ |your\ )?(?:[\w-]+\ ){0,2}limit\b)   # has hit a token limit!
        "#,
    )
    .expect("the error-line pattern compiles")
});

/// Python's messages, also when a script prints them without their exception's name (`data:
/// module 'm' has no attribute 'parse'`): the clause that holds one is an error line.
static PYTHON_MESSAGE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)has no attribute |is not defined$|no module named |cannot import name |object is not (?:callable|subscriptable|iterable)|unexpected keyword argument|missing \d+ required positional")
        .expect("compiles")
});

/// A call refused as written, before it ran: the shell could not parse it, or the program does
/// not know the option, argument or command. (A usage message alone is not one: printing its
/// help is what a command-line tool under test is often asked to do.)
static REFUSED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)syntax error near unexpected token|unexpected eof while looking for matching|unrecognized arguments?|invalid option|unknown option|invalid choice|missing operand|the following arguments are required|command not found")
        .expect("compiles")
});

/// A "nothing found" sentence at the start of a line (`Could not find [X]. Similar: [...]`): its
/// first sentence is the outcome; what follows (suggestions, a hint) is what it found instead.
static NOTHING_FOUND: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?i:could ?n[o']t find|cannot find|unable to find|nothing found)\b")
        .expect("compiles")
});

/// A message that is not a problem: `WARNING: ...`, `note: ...`.
static NOT_A_PROBLEM: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(?i:warning|info|note|debug|hint)\b").expect("compiles"));

/// Lines that are part of a listing (code, a file view, grep -n) rather than a message.
static LISTING: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(?:\s|\d+[-:|]|\[File:)").expect("compiles"));

static ANSI: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\x1b\[[0-9;?]*[A-Za-z]").expect("compiles"));

static QUOTED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"'[^'\n]{0,200}'|"[^"\n]{0,200}"|`[^`\n]{0,200}['`]"#).expect("compiles")
});
static PATH: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?:[\w.-]*/)+[\w.-]+").expect("compiles"));
static ID_WITH_DIGITS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b[A-Za-z_]+\d+[\w-]*\b").expect("compiles"));
static NUMBER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b\d+(?:\.\d+)?\b").expect("compiles"));
static SPACES: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\s+").expect("compiles"));

fn mask(line: &str, quotes: bool) -> String {
    let mut s = line.trim().to_string();
    if quotes {
        s = QUOTED.replace_all(&s, "<q>").into_owned();
    }
    s = PATH.replace_all(&s, "<p>").into_owned();
    s = ID_WITH_DIGITS.replace_all(&s, "<id>").into_owned();
    s = NUMBER.replace_all(&s, "<n>").into_owned();
    SPACES.replace_all(&s, " ").to_lowercase()
}

/// The error lines of an output, in order.
pub fn error_lines(output: &str) -> Vec<String> {
    error_lines_and_rest(output).0
}

/// The error lines of an output, in order, and the key of the rest of it: the lines that are
/// neither error lines nor a listing (code, a file view), digits masked — what the call printed
/// besides its errors.
pub fn error_lines_and_rest(output: &str) -> (Vec<String>, u64) {
    error_lines_and_rest_of(output, &[])
}

/// [`error_lines_and_rest`], with lines that print the call back (`echoed`: its argument values)
/// left out of the rest: a shell that prints the command it refused (`` /bin/bash: line 1: `edit
/// 78:86 …' ``) printed nothing else.
fn error_lines_and_rest_of(output: &str, echoed: &[&str]) -> (Vec<String>, u64) {
    let clean = ANSI.replace_all(output, "");
    let mut out = Vec::new();
    let mut rest = String::new();
    // The first line at the margin after a Python traceback's frames is its exception, whatever
    // the exception class is called (`pkg.errors.InvalidStructure: leftover bytes`).
    let mut in_traceback = false;
    for l in clean.lines() {
        if l.trim().is_empty() {
            continue;
        }
        // A "nothing found" sentence is its first sentence, however long the suggestions after
        // it; other lines that long are content, not a message.
        let nothing_found = NOTHING_FOUND
            .is_match(l.trim())
            .then(|| {
                let l = l.trim();
                l.find(". ").map_or(l, |i| &l[..=i])
            })
            .filter(|first| first.chars().count() <= MAX_LINE_CHARS);
        if nothing_found.is_none() && l.chars().count() > MAX_LINE_CHARS {
            continue;
        }
        if l.starts_with("Traceback (most recent call last)") {
            in_traceback = true;
            continue;
        }
        if LISTING.is_match(l) {
            continue;
        }
        let exception = std::mem::take(&mut in_traceback) && l.contains(": ");
        if let Some(first) = nothing_found {
            out.push(first.to_string());
        } else if exception || (!NOT_A_PROBLEM.is_match(l) && ERROR_LINE.is_match(l.trim_end())) {
            out.push(l.trim().to_string());
        } else if let Some(m) = PYTHON_MESSAGE.find(l) {
            // The clause, not what the script printed before it (often the input it was given).
            let start = l[..m.start()].rfind(": ").map_or(0, |i| i + 2);
            out.push(l[start..].trim().to_string());
        } else if !echoes(l, echoed) {
            rest.push_str(&super::digits_masked(l.trim()).to_lowercase());
            rest.push('\n');
        }
    }
    (out, key64(&rest))
}

/// Characters of an argument's first line that, found in an output line, make it an echo of the
/// call (a shell printing back the command it refused, cut or reformatted).
const ECHO_CHARS: usize = 40;

/// Does the line print back one of the call's argument values?
fn echoes(line: &str, echoed: &[&str]) -> bool {
    echoed.iter().any(|v| {
        let first = v.lines().next().unwrap_or("").trim();
        let head = match first.char_indices().nth(ECHO_CHARS) {
            Some((i, _)) => &first[..i],
            None => first,
        };
        !head.is_empty() && line.contains(head)
    })
}

/// The key of one error line as outcomes compare it (paths, numbers, identifiers masked).
fn line_key(line: &str) -> u64 {
    key64(&mask(line, false))
}

/// Calls after which an error line must have been printed, each with another rest of output
/// and one of them not failed, before it is the environment's and not the call's.
const AMBIENT_AFTER: usize = 3;
/// The bit of a sighting's rest key that says the call did not fail: a line is the
/// environment's only once a call that succeeded printed it too.
const SUCCEEDED: u64 = 1 << 63;
/// The same when none of the calls that printed the line succeeded (by their `is_error` or
/// exit code, which a recorder may have guessed from the words of the output): the line may
/// be the failure those calls share, so it takes more of them to be sure.
const AMBIENT_AFTER_FAILING: usize = 6;
/// Error lines followed per task.
const LINES_FOLLOWED: usize = 24;

/// Error lines the agent's environment prints whatever the call does — an interpreter's
/// warning, a locale complaint, a banner — learned per task: a line printed after
/// [`AMBIENT_AFTER`] different calls, each of which printed something else besides and one of
/// which succeeded, is context, not the call's failure signature. A failure the calls share
/// has the same rest each time (the same traceback, the same rejection message around a
/// different preview, nothing at all), and a failure one call keeps hitting is one call: neither
/// is ambient. Calls that all failed need [`AMBIENT_AFTER_FAILING`]: edits at one function
/// rejected on one undefined name differ in everything around it (the preview's frame, where a
/// long output was cut), yet the line is their dead end, not the environment's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AmbientLines {
    /// Per error line followed (its key): the calls it was printed after, with the key of the
    /// rest of their output; oldest line first.
    seen: std::collections::VecDeque<AmbientLine>,
}

/// One error line followed: its key and the calls it was printed after, each with the key of
/// the rest of that call's output.
pub type AmbientLine = (u64, Vec<(u64, u64)>);

impl AmbientLines {
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// What changed from `prev` to `self`: the lines added or with new sightings (in order) and
    /// the lines forgotten. Lines are only added at the back and changed in place, so applying
    /// the change to `prev` gives `self`.
    pub fn changes_since(&self, prev: &AmbientLines) -> (Vec<AmbientLine>, Vec<u64>) {
        let set = self
            .seen
            .iter()
            .filter(|l| !prev.seen.contains(l))
            .cloned()
            .collect();
        let gone = prev
            .seen
            .iter()
            .filter(|(k, _)| !self.seen.iter().any(|(l, _)| l == k))
            .map(|(k, _)| *k)
            .collect();
        (set, gone)
    }

    /// Apply [`AmbientLines::changes_since`].
    pub fn apply(&mut self, set: Vec<AmbientLine>, gone: &[u64]) {
        self.seen.retain(|(k, _)| !gone.contains(k));
        for (k, sightings) in set {
            match self.seen.iter_mut().find(|(l, _)| *l == k) {
                Some(slot) => slot.1 = sightings,
                None => self.seen.push_back((k, sightings)),
            }
        }
    }

    /// The sightings of a line followed (an error line, or a counter's template), a new entry
    /// when it is not followed yet: the line followed longest that is not learned is forgotten
    /// to make room.
    fn sightings(&mut self, key: u64) -> &mut Vec<(u64, u64)> {
        let i = match self.seen.iter().position(|(l, _)| *l == key) {
            Some(i) => i,
            None => {
                if self.seen.len() >= LINES_FOLLOWED {
                    let evict = self
                        .seen
                        .iter()
                        .position(|(k, s)| !learned(*k, s))
                        .unwrap_or(0);
                    self.seen.remove(evict);
                }
                self.seen.push_back((key, Vec::new()));
                self.seen.len() - 1
            }
        };
        &mut self.seen[i].1
    }

    /// Note that `line` was printed after call `call`, the rest of whose output has key `rest`;
    /// true when the line is now the environment's.
    fn note(&mut self, line: u64, call: u64, rest: u64) -> bool {
        let sightings = self.sightings(line);
        if !is_ambient(sightings) && !sightings.iter().any(|(c, r)| *c == call || *r == rest) {
            sightings.push((call, rest));
        }
        is_ambient(sightings)
    }
}

/// Counter lines are followed in the same list as error lines: their keys are the line's
/// template key (digits masked, 32 bits) under this mark in the high half, which an error line's
/// key has with a chance of one in 2^32.
const COUNTER_KEY: u64 = 0xC0FF_EE00_0000_0000;
const COUNTER_MASK: u64 = 0xFFFF_FFFF_0000_0000;
/// Different outputs, each with other numbers on the line, that make a line a counter.
pub const COUNTER_AFTER: usize = 3;

impl AmbientLines {
    /// Note that a line of template `template` (digits masked) was printed as `line` in an output
    /// whose key, digits masked, is `rest`. A line printed after different calls with different
    /// other output, with other numbers each time ([`COUNTER_AFTER`] of them), is a counter the
    /// environment keeps (a token count, a cost, elapsed time): its numbers moving is no news.
    pub fn note_counter(&mut self, template: u32, line: u32, rest: u64) {
        let sightings = self.sightings(COUNTER_KEY | u64::from(template));
        let line = u64::from(line);
        if sightings.len() < COUNTER_AFTER
            && !sightings.iter().any(|(l, r)| *l == line || *r == rest)
        {
            sightings.push((line, rest));
        }
    }

    /// Is the line of this template (digits masked) a counter?
    pub fn is_counter(&self, template: u32) -> bool {
        let key = COUNTER_KEY | u64::from(template);
        self.seen
            .iter()
            .any(|(k, s)| *k == key && s.len() >= COUNTER_AFTER)
    }
}

/// Is a line followed now known: the environment's error line, or a counter?
fn learned(key: u64, sightings: &[(u64, u64)]) -> bool {
    if key & COUNTER_MASK == COUNTER_KEY {
        sightings.len() >= COUNTER_AFTER
    } else {
        is_ambient(sightings)
    }
}

/// Have enough different calls printed an error line for it to be the environment's?
fn is_ambient(sightings: &[(u64, u64)]) -> bool {
    sightings.len() >= AMBIENT_AFTER_FAILING
        || (sightings.len() >= AMBIENT_AFTER && sightings.iter().any(|(_, r)| r & SUCCEEDED != 0))
}

/// The outcome of a call's output in its task: its error lines, less those the environment
/// prints whatever the call does ([`AmbientLines`], updated with this output).
/// `echoed`: the call's argument values, which an output may print back (left out of its rest).
pub fn outcome_in_task(
    output: &str,
    call: u64,
    failed: bool,
    echoed: &[&str],
    ambient: &mut AmbientLines,
) -> Option<Outcome> {
    let (lines, rest) = error_lines_and_rest_of(output, echoed);
    let sighting = if failed {
        rest & !SUCCEEDED
    } else {
        rest | SUCCEEDED
    };
    // A refusal is about the call by definition (it never ran): never the environment's.
    let kept: Vec<String> = lines
        .into_iter()
        .filter(|l| REFUSED.is_match(l) || !ambient.note(line_key(l), call, sighting))
        .collect();
    outcome_of_lines(&kept, rest)
}

fn key_of(lines: &[String], quotes: bool) -> u64 {
    let mut masked: Vec<String> = lines.iter().map(|l| mask(l, quotes)).collect();
    masked.sort();
    masked.dedup();
    key64(&masked.join("\n"))
}

/// The key of a failure message's template: the message with paths, numbers, hosts and ids
/// masked (quoted values kept: `KeyError: 'name'` and `'id'` are two failures), as log-template
/// mining does for log lines. One template with other variables is the same failure.
pub fn template_key(message: &str) -> u64 {
    let clean = ANSI.replace_all(message, "");
    let lines: Vec<String> = clean
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| mask(l, false))
        .collect();
    key64(&lines.join("\n"))
}

/// The outcome of an output, if it ends in an error or a "nothing found".
pub fn outcome_of(output: &str) -> Option<Outcome> {
    let (lines, rest) = error_lines_and_rest(output);
    outcome_of_lines(&lines, rest)
}

fn outcome_of_lines(lines: &[String], rest: u64) -> Option<Outcome> {
    if lines.is_empty() {
        return None;
    }
    let last = &lines[lines.len().saturating_sub(LINES_KEPT)..];
    let text: String = last.iter().rev().cloned().collect::<Vec<_>>().join(" | ");
    let mut names: Vec<String> = Vec::new();
    for q in last.iter().flat_map(|l| QUOTED.find_iter(l)) {
        let inner = q.as_str();
        let inner = &inner[1..inner.len() - 1];
        let name = inner.to_lowercase();
        if !name.is_empty() && inner.chars().count() <= MAX_NAME_CHARS && !names.contains(&name) {
            names.push(name);
        }
    }
    names.truncate(NAMES_KEPT);
    let mut line_keys: Vec<u64> = last.iter().map(|l| key64(&mask(l, false))).collect();
    line_keys.sort_unstable();
    line_keys.dedup();
    Some(Outcome {
        exact: key_of(last, false),
        template: key_of(last, true),
        text: super::head_tail(&text, TEXT_KEPT_CHARS),
        names,
        refused: last.iter().any(|l| REFUSED.is_match(l)),
        rest,
        lines: line_keys,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(s: &str) -> Outcome {
        outcome_of(s).unwrap_or_else(|| panic!("no outcome in {s:?}"))
    }

    #[test]
    fn a_call_refused_as_written_is_marked_and_a_usage_message_is_no_error() {
        assert!(out("/bin/bash: line 1: syntax error near unexpected token `('").refused);
        assert!(out("ls: invalid option -- '.'\nTry 'ls --help' for more information.").refused);
        assert!(out("bash: pyhton: command not found").refused);
        assert!(!out("ModuleNotFoundError: No module named 'yaml'").refused);
        assert_eq!(
            outcome_of("usage: manage.py tzkt_import [-h] [--version]"),
            None
        );
        let names =
            out("AttributeError: module 'metar.Metar' has no attribute 'parse_report'").names;
        assert_eq!(names, ["metar.metar", "parse_report"]);
    }

    #[test]
    fn a_rejected_edit_is_its_linter_line_whatever_the_preview() {
        let a = out("Your proposed edit has introduced new syntax error(s).\nERRORS:\n- E999 IndentationError: unexpected indent\n\nThis is how your edit would have looked if applied\n[File: /x/a.py (1117 lines total)]\n(40 more lines above)\n41:    return x\n42:        y = 1\n");
        let b = out("Your proposed edit has introduced new syntax error(s).\nERRORS:\n- E999 IndentationError: unexpected indent\n\nThis is how your edit would have looked if applied\n[File: /x/a.py (1049 lines total)]\n(30 more lines above)\n31:    pass\n32:        z = 2\n");
        assert_eq!(a, b);
        assert!(a.text.contains("E999 IndentationError"), "{}", a.text);
    }

    #[test]
    fn other_names_share_the_template_not_the_exact_key() {
        let a = out("- F821 undefined name 'argparse'");
        let b = out("- F821 undefined name 'time'");
        assert_eq!(a.template, b.template);
        assert_ne!(a.exact, b.exact);
        // Paths and numbers never tell two outcomes apart.
        let c = out("ls: cannot access '/a/b.py': No such file or directory");
        let d = out("ls: cannot access '/a/c.py': No such file or directory");
        assert_eq!(c.template, d.template);
        let e = out("Traceback (most recent call last):\n  File \"/t/x.py\", line 3, in <module>\n    f()\nKeyError: 'name'\n");
        let f = out("Traceback (most recent call last):\n  File \"/t/x.py\", line 9, in <module>\n    g()\nKeyError: 'name'\n");
        assert_eq!(e, f);
        assert_eq!(e.text, "KeyError: 'name'");
    }

    #[test]
    fn a_limit_hit_is_an_error_line_whatever_the_limit() {
        for output in [
            "Tokens: 497k sent, 0 received.\n\nModel anthropic/claude has hit a token limit!\nInput tokens: ~496,589 of 1,000,000",
            "Request failed: exceeded the rate limit",
            "You have reached your monthly usage limit.",
        ] {
            assert!(outcome_of(output).is_some(), "{output:?}");
        }
        // Counters around it do not tell two hits apart.
        let a = out("Model m has hit a token limit!\nInput tokens: ~496,589 of 1,000,000");
        let b = out("Model m has hit a token limit!\nInput tokens: ~496,262 of 1,000,000");
        assert_eq!(a.exact, b.exact);
        for content in [
            "The limit is 10 requests per minute.",
            "Set the rate limit with --limit 5.",
        ] {
            assert!(outcome_of(content).is_none(), "{content:?}");
        }
    }

    #[test]
    fn content_that_quotes_error_words_is_no_outcome() {
        for content in [
            "    except ImportError:\n        pass\n",
            "12:    raise ValueError('bad')\n13-    return 1\n",
            "WARNING: Parsing errors found and dialect is set to 'ansi'.\n",
            "def handle_error(e):\n    return None\n",
            "All tests passed.\n",
        ] {
            assert!(outcome_of(content).is_none(), "{content:?}");
        }
    }

    #[test]
    fn a_traceback_ends_in_its_exception_whatever_it_is_called() {
        let a = out("warn(x)\nTraceback (most recent call last):\n  File \"r.py\", line 14, in <module>\n    f(b)\nwebauthn.helpers.exceptions.InvalidStructure: Leftover bytes detected\n");
        assert_eq!(
            a.text,
            "webauthn.helpers.exceptions.InvalidStructure: Leftover bytes detected"
        );
        let b = out("METAR WSSS 280900Z 24/23 Q1010 NSW: module 'metar.Metar' has no attribute 'parse'\nScript completed successfully, no errors.\n");
        let c = out("METAR WSSS 312000Z 24/24 Q1011 NSW: module 'metar.Metar' has no attribute 'report'\nScript completed successfully, no errors.\n");
        assert_eq!(b.template, c.template);
        assert!(outcome_of("UserWarning: deprecated, import from cbor2\n").is_none());
    }

    #[test]
    fn a_line_every_call_prints_is_the_environments_not_the_calls() {
        let banner = "bash: warning: setlocale: LC_ALL: cannot change locale (en_US.UTF-8)";
        let mut ambient = AmbientLines::default();
        let outcomes: Vec<Option<Outcome>> = ["ls src", "python -c 'print(42)'", "cat setup.cfg"]
            .iter()
            .zip(["a.py\nb.py", "42", "[metadata]\nname = x"])
            .enumerate()
            .map(|(i, (call, out))| {
                outcome_in_task(
                    &format!("{banner}\n{out}"),
                    super::key64(call) + i as u64,
                    false,
                    &[call],
                    &mut ambient,
                )
            })
            .collect();
        assert!(outcomes[0].is_some() && outcomes[1].is_some());
        assert_eq!(
            outcomes[2], None,
            "printed after three different calls: the environment's"
        );
        // A real failure after it is still the call's.
        let o = outcome_in_task(
            &format!("{banner}\nTraceback (most recent call last):\n  File \"t.py\", line 1\nKeyError: 'x'"),
            7,
            true,
            &[],
            &mut ambient,
        )
        .expect("the KeyError");
        assert_eq!(o.text, "KeyError: 'x'");
    }

    #[test]
    fn a_failure_the_calls_share_or_one_call_keeps_hitting_is_never_ambient() {
        let mut ambient = AmbientLines::default();
        let rejected = |preview: &str| {
            format!("Your proposed edit has introduced new syntax error(s).\nERRORS:\n- E999 IndentationError: unexpected indent\n[File: /r/a.py (9 lines total)]\n1:{preview}\nYour changes have NOT been applied.")
        };
        for (i, preview) in ["x = 1", "  y = 2", "   z = 3", "w = 4"].iter().enumerate() {
            let o = outcome_in_task(&rejected(preview), 100 + i as u64, true, &[], &mut ambient);
            assert!(
                o.is_some(),
                "edit {i}: the same rejection around another preview"
            );
        }
        for i in 0..5 {
            let o = outcome_in_task(
                &format!("debug line {i}\nAssertionError: expected 3"),
                9,
                true,
                &[],
                &mut ambient,
            );
            assert!(o.is_some(), "run {i} of one script");
        }
    }

    #[test]
    fn an_error_line_only_failed_calls_printed_is_theirs_however_their_rests_differ() {
        // Edits at one function rejected by one linter error, each rejection's text cut off at
        // another length (a recorder truncating long outputs): the rests differ, yet no call
        // that worked ever printed the line, so it is the attempts' dead end.
        let mut ambient = AmbientLines::default();
        let error = "- F821 undefined name 'regions_old'";
        let rests = [
            "(967 more lines above)\n(130 more lines below)",
            "(971 more lines above)",
            "",
        ];
        for (i, rest) in rests.iter().enumerate() {
            let out = format!("Your proposed edit has introduced new syntax error(s).\nERRORS:\n{error}\nThis is how your edit would have looked if applied\n{rest}");
            let o = outcome_in_task(&out, 200 + i as u64, true, &[], &mut ambient);
            assert!(o.is_some(), "rejection {i}");
        }
        // A line every call prints, each call flagged as failed (a recorder guessing from the
        // words of the output): the environment's after six different calls.
        let mut ambient = AmbientLines::default();
        let banner = "ERROR: ld.so: object 'libmock.so' from LD_PRELOAD cannot be preloaded";
        let outputs = ["a.py", "42", "[metadata]", "ok", "main", "done", "x = 1"];
        for (i, out) in outputs.iter().enumerate() {
            let o = outcome_in_task(
                &format!("{banner}\n{out}"),
                i as u64,
                true,
                &[],
                &mut ambient,
            );
            assert_eq!(o.is_none(), i >= 5, "call {i}");
        }
        // The same line after a call that succeeded too: the environment's from then on.
        let mut ambient = AmbientLines::default();
        let warning = "bash: warning: setlocale: LC_ALL: cannot change locale (en_US.UTF-8)";
        for (i, (out, failed)) in [("a.py", false), ("42", false), ("done", true)]
            .iter()
            .enumerate()
        {
            let o = outcome_in_task(
                &format!("{warning}\n{out}"),
                i as u64,
                *failed,
                &[],
                &mut ambient,
            );
            assert_eq!(o.is_none(), i == 2, "call {i}");
        }
    }

    #[test]
    fn a_refusal_that_prints_each_refused_command_back_is_never_ambient() {
        let mut ambient = AmbientLines::default();
        for (i, body) in ["f(a, b)", "f(a)", "g(x=1)", "h()"].iter().enumerate() {
            let call = format!("edit 78:86: {body}");
            let out = format!("/bin/bash: line 1: syntax error near unexpected token `('\n/bin/bash: line 1: `{call}'");
            let o = outcome_in_task(&out, i as u64, true, &[&call], &mut ambient);
            assert!(o.is_some_and(|o| o.refused), "refusal {i}");
        }
    }

    #[test]
    fn a_nothing_found_sentence_is_its_first_sentence() {
        let a = out("Could not find [VIVA Media AG]. Similar: ['VIVA Plus', 'Vauxhall Viva']");
        assert_eq!(a.text, "Could not find [VIVA Media AG].");
        let b = out("Could not find [\"Wallace and Gromit\"]. Similar: ['Wallace and Gromit']");
        let c =
            out("Could not find [\"A Grand Day Out\"]. Similar: ['A Close Shave', 'Nick Park']");
        assert_eq!(b.template, c.template);
        assert_ne!(b.exact, c.exact);
        assert!(outcome_of("        if not found:\n            return None").is_none());
    }

    #[test]
    fn ambient_lines_changes_apply_to_the_state_before() {
        let mut a = AmbientLines::default();
        a.note(1, 10, 100);
        let before = a.clone();
        a.note(1, 11, 101);
        a.note(2, 10, 100);
        let (set, gone) = a.changes_since(&before);
        let mut b = before;
        b.apply(set, &gone);
        assert_eq!(a, b);
    }

    #[test]
    fn nothing_found_is_an_outcome() {
        let a = out("No matches found for \"math\" in /repo");
        let b = out("No matches found for \"latex\" in /repo");
        assert_eq!(a.template, b.template);
        assert!(
            outcome_of("Your command ran successfully and did not produce any output.").is_some()
        );
        assert!(outcome_of("\x1b[91mImportError\x1b[0m: cannot import name 'x'").is_some());
    }
}
