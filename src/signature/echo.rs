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
use regex::Regex;
use std::sync::LazyLock;

/// Shorter words are too common to stand for the call (`-m`, `of`, `py`).
const MIN_TERM_CHARS: usize = 3;
/// A longer argument is content (an edit's new code, a script), not a query a tool would quote
/// back; skipping it keeps this cheap on every tool result.
const MAX_QUERY_CHARS: usize = 300;
/// Terms tried per call, the longest first.
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

/// What a call asks for, as it may come back in its result: each short string argument, the
/// quoted parts of a command line, and its words after the first (the program, not the query).
fn terms(args: &serde_json::Value) -> Vec<&str> {
    let mut values = Vec::new();
    strings(args, &mut values);
    let mut terms: Vec<&str> = Vec::new();
    for v in values.into_iter().filter(|v| v.len() <= MAX_QUERY_CHARS) {
        terms.push(v.trim());
        for c in QUOTED.captures_iter(v) {
            if let Some(m) = c.get(1).or_else(|| c.get(2)) {
                terms.push(m.as_str());
            }
        }
        terms.extend(
            v.split_whitespace()
                .skip(1)
                .map(|w| w.trim_matches(|c| c == '"' || c == '\'')),
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
    if !output.contains(['"', '\'']) {
        return 0;
    }
    let mut masked: Option<String> = None;
    // Longest first, so a query is masked whole before any word inside it.
    for t in terms(args) {
        for q in ['"', '\''] {
            let quoted = format!("{q}{t}{q}");
            let text = masked.as_deref().unwrap_or(output);
            if text.contains(&quoted) {
                masked = Some(text.replace(&quoted, "\"\u{1}\""));
            }
        }
    }
    masked.map_or(0, |m| key64(&m))
}

/// Characters of a residue kept: a "nothing found" answer says what it has to say early.
const RESIDUE_CHARS: usize = 600;

/// What an answer says apart from what it was asked: the output with the call's own terms
/// masked wherever it quotes them (in quotes, brackets or backticks: `Could not find [VIVA Media
/// AG]`, `No matches found for "math"`), lowercased, digits masked, whitespace collapsed, its
/// first [`RESIDUE_CHARS`] characters. Two searches that find nothing and suggest the same
/// things leave (nearly) the same residue whatever they asked; one whose suggestions differ
/// learned something.
pub fn residue(args: &serde_json::Value, output: &str) -> String {
    let mut text = output.to_string();
    for t in terms(args) {
        for (open, close) in [('"', '"'), ('\'', '\''), ('[', ']'), ('`', '`')] {
            let quoted = format!("{open}{t}{close}");
            if text.contains(&quoted) {
                text = text.replace(&quoted, &format!("{open}\u{1}{close}"));
            }
        }
    }
    let words: Vec<String> = text
        .split_whitespace()
        .map(|w| super::digits_masked(&w.to_lowercase()))
        .collect();
    let joined = words.join(" ");
    match joined.char_indices().nth(RESIDUE_CHARS) {
        Some((i, _)) => joined[..i].to_string(),
        None => joined,
    }
}

/// How alike two residues are (the Dice overlap of their words), on what follows their first
/// sentence when either goes on after it: the "Could not find [\u{1}]." every such answer opens
/// with is the tool's template, and with a short list of suggestions after it, it alone would
/// make two answers look alike. Answers that are one sentence compare whole.
pub fn residue_overlap(a: &str, b: &str) -> f32 {
    fn after_first_sentence(r: &str) -> &str {
        r.split_once(". ").map_or("", |(_, rest)| rest.trim())
    }
    let (ra, rb) = (after_first_sentence(a), after_first_sentence(b));
    if ra.is_empty() && rb.is_empty() {
        super::word_overlap(a, b)
    } else {
        super::word_overlap(ra, rb)
    }
}

#[cfg(test)]
mod tests {
    use super::{echo_key, residue, residue_overlap as word_overlap};

    #[test]
    fn a_residue_masks_what_the_call_asked_and_keeps_what_it_suggests() {
        let cnf = |q: &str, similar: &str| {
            residue(
                &json!({ "query": q }),
                &format!("Could not find [{q}]. Similar: [{similar}]"),
            )
        };
        // Five suggestions, as a search tool gives them: the sentence around them is shared by
        // every answer, the suggestions are what tells two answers apart.
        let a = cnf(
            "VIVA Media AG",
            "'VIVA Plus', 'Vauxhall Viva', 'GfK Entertainment charts', 'Lyca Dhyan', 'VIVA (TV station)'",
        );
        let b = cnf(
            "VIVA Media AG 2004",
            "'VIVA Plus', 'Vauxhall Viva', 'GfK Entertainment charts', 'Opel Astra', 'VIVA (TV station)'",
        );
        let c = cnf(
            "Marathi lyrics",
            "'Raundal', 'Deewani Mastani', 'Ved (film)', 'Sairat soundtrack', 'Ajay-Atul discography'",
        );
        assert!(a.starts_with("could not find [\u{1}]."), "{a}");
        assert!(word_overlap(&a, &b) > 0.3, "{}", word_overlap(&a, &b));
        assert!(word_overlap(&a, &c) < 0.3, "{}", word_overlap(&a, &c));
        // One suggestion against another list: the sentence they share does not make them alike.
        let d = cnf("Marathi bhavageete lyrics", "'Geet Ramayan'");
        assert!(word_overlap(&c, &d) < 0.3, "{}", word_overlap(&c, &d));
        let none = |q: &str| {
            residue(
                &json!({ "command": format!("search_dir \"{q}\"") }),
                &format!("No matches found for \"{q}\" in /repo"),
            )
        };
        assert_eq!(none("math"), none("equation"));
    }
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
