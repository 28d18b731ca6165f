//! A result with the call's own words masked: what the tool found, apart from what it was asked.
//!
//! A search tool repeats its query in its answer (`Found 2 matches for "BEGIN SOLUTION" in
//! tests: tests/nbs/test.ipynb`), a file finder the name it was given. When an agent rewords a
//! search and gets the same files back, the two answers differ only where they quote the two
//! queries; masking those quotes leaves what the tool found, which did not change.
//!
//! Only *quoted* repetitions are masked: a file finder answering `find_file "parser.py"` with
//! `/src/parser.py` found the very thing it was asked for, and that path is its finding; masking
//! it would make a walk over different files look like one answer.

use super::key64;
use aho_corasick::{AhoCorasick, MatchKind};
use regex::Regex;
use std::sync::LazyLock;

/// Shorter words are too common to stand for the call (`-m`, `of`, `py`).
const MIN_TERM_CHARS: usize = 3;
/// The longest terms are kept: an edit's whole content is not a query worth masking word by word.
const MAX_TERMS: usize = 24;

static QUOTED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#""([^"\n]+)"|'([^'\n]+)'"#).expect("compiles"));

fn strings<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a str>) {
    match v {
        serde_json::Value::String(s) => out.push(s),
        serde_json::Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        serde_json::Value::Object(m) => m.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// What a call asks for, as it may come back in its result: each string argument, the quoted
/// parts of a command line, and its words after the first (the program, not the query).
fn terms(args: &serde_json::Value) -> Vec<String> {
    let mut values = Vec::new();
    strings(args, &mut values);
    let mut terms: Vec<String> = Vec::new();
    for v in values {
        terms.push(v.trim().to_string());
        for c in QUOTED.captures_iter(v) {
            if let Some(m) = c.get(1).or_else(|| c.get(2)) {
                terms.push(m.as_str().to_string());
            }
        }
        terms.extend(
            v.split_whitespace()
                .skip(1)
                .map(|w| w.trim_matches(|c| c == '"' || c == '\'').to_string()),
        );
    }
    terms.retain(|t| t.chars().count() >= MIN_TERM_CHARS);
    terms.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    terms.dedup();
    terms.truncate(MAX_TERMS);
    terms
}

/// Key of the output with every place it quotes the call's own terms masked; 0 when it quotes
/// none of them (then the plain output key already says everything).
pub fn echo_key(args: &serde_json::Value, output: &str) -> u64 {
    let terms = terms(args);
    if terms.is_empty() {
        return 0;
    }
    let quoted: Vec<String> = terms
        .iter()
        .flat_map(|t| [format!("\"{t}\""), format!("'{t}'")])
        .collect();
    let Ok(ac) = AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(&quoted)
    else {
        return 0;
    };
    if !ac.is_match(output) {
        return 0;
    }
    key64(&ac.replace_all(output, &vec!["\"\u{1}\""; quoted.len()]))
}

#[cfg(test)]
mod tests {
    use super::echo_key;
    use serde_json::json;

    fn search(q: &str) -> serde_json::Value {
        json!({ "command": format!("search_dir \"{q}\" tests") })
    }

    #[test]
    fn a_reworded_search_that_found_the_same_files_has_one_key() {
        let found = |q: &str, n: u32| {
            format!("Found {n} matches for \"{q}\" in /r/tests:\n/r/tests/nbs/test.ipynb ({n} matches)\nEnd of matches for \"{q}\" in /r/tests")
        };
        let a = echo_key(&search("BEGIN SOLUTION"), &found("BEGIN SOLUTION", 2));
        let b = echo_key(&search("END SOLUTION"), &found("END SOLUTION", 2));
        assert_ne!(a, 0);
        assert_eq!(a, b);
        // Another count is another finding.
        assert_ne!(a, echo_key(&search("SOLUTION"), &found("SOLUTION", 4)));
    }

    #[test]
    fn other_files_found_are_another_key() {
        let a = echo_key(
            &search("parse"),
            "Found 1 matches for \"parse\" in /r/tests:\n/r/tests/a.py (1 matches)",
        );
        let b = echo_key(
            &search("parser"),
            "Found 1 matches for \"parser\" in /r/tests:\n/r/tests/b.py (1 matches)",
        );
        assert_ne!(a, b);
    }

    #[test]
    fn a_name_found_is_a_finding_not_an_echo() {
        let find = |name: &str| {
            echo_key(
                &json!({ "command": format!("find_file \"{name}\" src") }),
                &format!("Found 1 matches for \"{name}\" in /r/src:\n/r/src/{name}"),
            )
        };
        assert_ne!(find("parser.py"), find("styles.py"));
    }

    #[test]
    fn an_output_that_does_not_repeat_the_call_has_no_key() {
        assert_eq!(echo_key(&search("needle"), "hello world"), 0);
        assert_eq!(echo_key(&json!({}), "hello world"), 0);
    }
}
