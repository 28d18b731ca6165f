//! `content_loop`: an LLM that repeats itself *inside one response* — the same sentence again and
//! again, or a run of words that keeps coming back ("chanting") — in a whole `response` or in the
//! chunks of one still streaming (`"chunk": true`). Fenced code, indented code, table rows and
//! divider lines are not prose and are never counted: a test file with ten similar asserts or a
//! table with the same cell is legitimate repetition.
//!
//! Exact, after light normalisation (case, spacing, list markers): a model that chants repeats
//! itself word for word; a reworded sentence inside one answer is a style choice, not a loop,
//! and embedding every sentence of every chunk would put the model on the fast path.

use super::{Ctx, Finding};
use crate::config::ContentLoops;
use crate::state::StreamTail;
use crate::verdict::LoopKind;

/// Characters of a streaming response kept per stream: the repetition is looked for here.
pub const STREAM_TAIL_CHARS: usize = 4000;
/// Streams (task ids with an unfinished chunked response) kept per root task; past it, the one
/// written to longest ago is forgotten.
pub const MAX_STREAMS: usize = 8;
/// Characters of the repeated text shown in the verdict's reason.
const SHOWN_CHARS: usize = 120;

/// A repetition found in one response's prose.
#[derive(Debug, Clone, PartialEq)]
pub struct ContentRepeat {
    /// The sentence or run of words that repeats, as written.
    pub what: String,
    /// How many times it occurs.
    pub times: usize,
    /// Words in the repeated run, when the repetition is a run at the end (not a sentence).
    pub run_words: Option<usize>,
}

/// The detector: the repetition the observe stage found in the event's text, if any.
pub fn detect(ctx: &Ctx<'_>) -> Option<Finding> {
    let found = ctx.content?;
    let shown: String = found.what.chars().take(SHOWN_CHARS).collect();
    let ellipsis = if shown.len() < found.what.len() {
        "…"
    } else {
        ""
    };
    let reason = match found.run_words {
        Some(words) => format!(
            "the response repeats a run of {words} words {} times in a row: \"{shown}{ellipsis}\"",
            found.times
        ),
        None => format!(
            "the response says the same sentence {} times: \"{shown}{ellipsis}\"",
            found.times
        ),
    };
    let mut f = Finding::new(LoopKind::ContentLoop, reason);
    // Progress elsewhere in the task does not make a chanting answer useful.
    f.vetoable = false;
    Some(f)
}

/// Look for a content loop in `text` (a whole response, or a stream's tail). `fence_open` says
/// whether `text` starts inside a fenced code block (a stream's tail cut in the middle of one).
pub fn find(text: &str, fence_open: bool, cfg: &ContentLoops) -> Option<ContentRepeat> {
    let prose = prose_lines(text, fence_open);
    repeated_sentence(&prose, cfg).or_else(|| repeated_run(&prose, cfg))
}

/// The lines of `text` that are prose: outside fenced code (``` or ~~~), not indented code, not
/// table rows, not divider lines.
fn prose_lines(text: &str, mut fence_open: bool) -> Vec<&str> {
    let mut out = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("```") || t.starts_with("~~~") {
            fence_open = !fence_open;
            continue;
        }
        if fence_open
            || t.is_empty()
            || line.starts_with("    ")
            || line.starts_with('\t')
            || t.starts_with('|')
            || t.matches('|').count() >= 2
            || is_divider(t)
        {
            continue;
        }
        out.push(t);
    }
    out
}

/// `---`, `===`, `***`, `___`, `#####`, `- - -`: decoration, repeated on purpose.
fn is_divider(t: &str) -> bool {
    t.chars().all(|c| {
        matches!(
            c,
            '-' | '=' | '*' | '_' | '#' | '~' | '+' | '.' | ' ' | '─' | '━'
        )
    })
}

/// What makes two sentences the same: lower case, one space, no list marker, no end punctuation.
fn sentence_key(s: &str) -> String {
    let s = s.trim_start_matches(|c: char| {
        c.is_ascii_digit() || matches!(c, '-' | '*' | '+' | '•' | '>' | ')' | ' ')
    });
    let s = s.strip_prefix(". ").unwrap_or(s);
    let mut key = String::with_capacity(s.len());
    for w in s.split_whitespace() {
        if !key.is_empty() {
            key.push(' ');
        }
        key.extend(w.chars().flat_map(char::to_lowercase));
    }
    key.trim_end_matches(['.', '!', '?', ',', ';', ':', '…'])
        .to_string()
}

/// Sentences of the prose: split at line ends and after `.`, `!`, `?` followed by a space.
fn sentences<'a>(prose: &[&'a str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    for line in prose {
        let mut start = 0;
        let bytes = line.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            // "1. " numbers a list item: it does not end a sentence.
            if matches!(b, b'.' | b'!' | b'?')
                && bytes.get(i + 1) == Some(&b' ')
                && line[start..i].chars().any(char::is_alphabetic)
            {
                out.push(line[start..=i].trim());
                start = i + 1;
            }
        }
        let rest = line[start..].trim();
        if !rest.is_empty() {
            out.push(rest);
        }
    }
    out
}

/// The same sentence, or the same few sentences, said back to back `sentence_repeats` times or
/// more, the repeated block holding at least `min_sentence_words` words. Back to back, because a
/// summary of several bookings repeats "Trip type: one way" once per booking with other lines
/// between — structure, not a loop — while a model that chants repeats the whole block.
fn repeated_sentence(prose: &[&str], cfg: &ContentLoops) -> Option<ContentRepeat> {
    let said = sentences(prose);
    let keys: Vec<String> = said.iter().map(|s| sentence_key(s)).collect();
    let words: Vec<usize> = said.iter().map(|s| s.split_whitespace().count()).collect();
    let reps = cfg.sentence_repeats.max(2);
    let mut best: Option<ContentRepeat> = None;
    for period in 1..=cfg.max_block_sentences.min(keys.len() / reps) {
        let mut start = 0;
        while start + reps * period <= keys.len() {
            let block = &keys[start..start + period];
            let mut times = 1;
            while start + (times + 1) * period <= keys.len()
                && keys[start + times * period..start + (times + 1) * period] == *block
            {
                times += 1;
            }
            let block_words: usize = words[start..start + period].iter().sum();
            if times >= reps
                && block_words >= cfg.min_sentence_words
                && best.as_ref().is_none_or(|b| times > b.times)
            {
                best = Some(ContentRepeat {
                    what: said[start..start + period].join(" "),
                    times,
                    run_words: None,
                });
            }
            start += if times > 1 { times * period } else { 1 };
        }
    }
    best
}

/// The prose ends in a run of words repeated back to back `run_repeats` times or more, covering
/// at least `min_run_words` words: a model generating the same phrase until it is stopped.
fn repeated_run(prose: &[&str], cfg: &ContentLoops) -> Option<ContentRepeat> {
    let words: Vec<String> = prose
        .iter()
        .flat_map(|l| l.split_whitespace())
        .map(|w| w.to_lowercase())
        .collect();
    let n = words.len();
    let reps = cfg.run_repeats.max(2);
    for period in 1..=cfg.max_run_words.min(n / reps) {
        let last = &words[n - period..];
        let mut times = 1;
        while (times + 1) * period <= n
            && &words[n - (times + 1) * period..n - times * period] == last
        {
            times += 1;
        }
        if times >= reps && times * period >= cfg.min_run_words {
            let shown: Vec<&str> = prose
                .iter()
                .flat_map(|l| l.split_whitespace())
                .skip(n - period)
                .collect();
            return Some(ContentRepeat {
                what: shown.join(" "),
                times,
                run_words: Some(period),
            });
        }
    }
    None
}

impl StreamTail {
    /// Add a chunk of the streaming response; keep the last [`STREAM_TAIL_CHARS`] characters,
    /// remembering whether the kept part starts inside a fenced code block.
    pub fn push(&mut self, chunk: &str, seq: u64) {
        self.text.push_str(chunk);
        self.chunks += 1;
        self.last_seq = seq;
        if self.text.len() > STREAM_TAIL_CHARS {
            // Cut at a line end when there is one, so the fence count stays exact.
            let mut cut = self.text.len() - STREAM_TAIL_CHARS;
            while !self.text.is_char_boundary(cut) {
                cut += 1;
            }
            if let Some(nl) = self.text[cut..].find('\n') {
                cut += nl + 1;
            }
            for line in self.text[..cut].lines() {
                let t = line.trim();
                if t.starts_with("```") || t.starts_with("~~~") {
                    self.fence_open = !self.fence_open;
                }
            }
            self.text.drain(..cut);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ContentLoops {
        crate::Config::default().detect.content
    }

    #[test]
    fn a_sentence_said_again_and_again_is_a_content_loop() {
        let text = "Let me check the tests first. I will fix the parser now. \
                    I will fix the parser now. I will fix the parser now.";
        let found = find(text, false, &cfg()).expect("a chant");
        assert_eq!(found.times, 3);
        assert_eq!(found.what, "I will fix the parser now.");
        let block = "Running the tests. They fail on the parser. ".repeat(4);
        let found = find(&block, false, &cfg()).expect("a chant of two sentences");
        assert_eq!(found.times, 4);
        assert_eq!(found.what, "Running the tests. They fail on the parser.");
    }

    #[test]
    fn a_line_repeated_once_per_item_of_a_summary_is_structure() {
        // From a tau-bench airline agent: one block per booking, one line the same in each.
        let text = "Here are your reservations:\n\
                    - **Reservation:** ABC123\n- **Trip Type:** One Way\n- **Flight 1:** DEN to LAS\n\
                    - **Reservation:** XYZ789\n- **Trip Type:** One Way\n- **Flight 1:** DEN to LAS\n\
                    - **Reservation:** QRS456\n- **Trip Type:** One Way\n- **Flight 1:** DEN to LAS\n\
                    Which one would you like to change?";
        assert_eq!(find(text, false, &cfg()), None);
    }

    #[test]
    fn list_markers_case_and_end_punctuation_do_not_hide_a_repeat() {
        let text =
            "1. Check the configuration file again\n2. check the configuration file again!\n\
                    - Check the   configuration file again.";
        assert_eq!(find(text, false, &cfg()).expect("a chant").times, 3);
    }

    #[test]
    fn a_run_of_words_repeated_to_the_end_is_a_content_loop() {
        let text = format!(
            "Here is the answer: {}",
            "and then we wait for it ".repeat(6)
        );
        let found = find(&text, false, &cfg()).expect("a chant");
        assert_eq!(found.run_words, Some(6));
        assert_eq!(found.times, 6);
    }

    #[test]
    fn code_tables_and_dividers_are_not_prose() {
        let code = "Here is the test:\n```python\n".to_string()
            + &"assert parse(x) == expected_value_for_x\n".repeat(10)
            + "```\n"
            + &"    return self.value + other.value\n".repeat(5)
            + &"| the same cell text here | the same cell text here |\n".repeat(5)
            + &"---\n".repeat(5)
            + "Done, the tests pass now.";
        assert_eq!(find(&code, false, &cfg()), None);
    }

    #[test]
    fn short_or_distinct_sentences_are_not_a_loop() {
        let text = "Yes. Yes. Yes. Yes. Fixed the bug in a.py. Fixed the bug in b.py. \
                    Fixed the bug in c.py. Fixed the bug in d.py.";
        assert_eq!(find(text, false, &cfg()), None);
    }

    #[test]
    fn a_stream_tail_remembers_an_open_fence_it_cut_off() {
        let mut s = StreamTail::default();
        s.push("```\n", 1);
        s.push(&"x = 1\n".repeat(STREAM_TAIL_CHARS / 3), 2);
        assert!(s.fence_open);
        assert!(s.text.len() <= STREAM_TAIL_CHARS);
        assert_eq!(find(&s.text, s.fence_open, &cfg()), None);
        s.push("```\n", 3);
        s.push(&"We are stuck on the same step again. ".repeat(3), 4);
        assert!(find(&s.text, s.fence_open, &cfg()).is_some());
    }
}
