//! The rule table: every detection rule and every question for the judge, in priority order.
//!
//! A rule is one unit of detection with a stable id (`dead_end.unmoved_reruns`), a one-line
//! statement, the settings it reads, and an outcome — a loop ([`Finding`]) or a question for the
//! judge ([`Question`]). For each event the engine runs the table top to bottom: the first loop
//! rule that fires (of a kind switched on in `[detect.enabled]`) is the verdict's finding; when
//! none does, the first question that fires goes to the judge. A rule switched off in
//! `detect.rules_off` is skipped. The id travels with the verdict (`rule`), its audit record, the
//! `rule` label of the loop metric, the dashboard, `score` and its HTML report, and
//! `loopguard eval --by-rule` measures every rule by it. `loopguard rules` prints the table.

use super::questions::{self, Question};
use super::{
    budget, collaboration, content, cycle, dead_end, enabled, finding, negative, regression,
    repeat, response, steps, transitions, Ctx, Finding,
};
use crate::verdict::LoopKind;

/// What a rule found.
#[derive(Debug, Clone, PartialEq)]
pub enum Hit {
    /// A loop.
    Loop(Finding),
    /// A case only the judge can decide.
    Ask(Question),
}

/// What a rule decides.
#[derive(Clone, Copy)]
pub enum Check {
    Loop(fn(&Ctx<'_>) -> Option<Finding>),
    Ask(fn(&Ctx<'_>) -> Option<Question>),
}

/// One rule of the table.
pub struct Rule {
    /// Stable id, `family.name`: what verdicts, metrics and reports call it.
    pub id: &'static str,
    /// The kinds its loops are reported as (a question: what a "loop" answer counts as).
    pub kinds: &'static [LoopKind],
    /// What it says, in one line.
    pub statement: &'static str,
    /// The configuration keys it reads.
    pub settings: &'static [&'static str],
    /// What it needs computed before the table runs, beyond the links every rule reads.
    pub inputs: &'static [Input],
    pub check: Check,
}

/// Something a rule needs computed for the new event before the table runs, beyond the identity
/// links every rule reads: each costs the link stage an embedding round of its own, which it
/// runs only when a rule that is on ([`wants`]) declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// The changes between runs of a failing step, compared by cosine ([`Ctx::change_cosines`]).
    ChangeCosines,
    /// Whether a short turn is a courtesy, compared with the courtesies
    /// ([`crate::state::Entry::courtesy`]).
    CourtesyTurns,
}

impl Input {
    pub const ALL: [Input; 2] = [Input::ChangeCosines, Input::CourtesyTurns];

    pub fn as_str(self) -> &'static str {
        match self {
            Input::ChangeCosines => "the changes between runs compared (an embedding round)",
            Input::CourtesyTurns => "short turns compared with courtesies (an embedding round)",
        }
    }
}

/// Does a rule that is on (not in `detect.rules_off`) need `input`?
pub fn wants(cfg: &crate::config::DetectConfig, input: Input) -> bool {
    RULES
        .iter()
        .any(|r| r.inputs.contains(&input) && !cfg.rules_off.iter().any(|id| id == r.id))
}

impl Rule {
    pub fn is_question(&self) -> bool {
        matches!(self.check, Check::Ask(_))
    }
}

use LoopKind as K;

/// Every rule, in priority order: loop rules first (the first finding wins; a cycle in progress
/// wins over the repeats inside it, so it is counted once per period), then the judge's
/// questions.
pub static RULES: &[Rule] = &[
    Rule {
        id: "budget.max_events",
        kinds: &[K::Budget],
        statement: "the task's event count passed its budget; nothing resets it",
        settings: &["detect.budget.max_events"],
        inputs: &[],
        check: Check::Loop(budget::detect),
    },
    Rule {
        id: "content.self_repeat",
        kinds: &[K::ContentLoop],
        statement: "one response, or the stream of its chunks, repeats a sentence, a block or a run of words back to back",
        settings: &["detect.content.*"],
        inputs: &[],
        check: Check::Loop(content::detect),
    },
    Rule {
        id: "regression.worse_each_time",
        kinds: &[K::Regression],
        statement: "test results from one source got worse on each of the last attempts, even when the errors differ",
        settings: &["detect.regression.attempts"],
        inputs: &[],
        check: Check::Loop(regression::detect),
    },
    Rule {
        id: "collaboration.same_request",
        kinds: &[K::CollaborationLoop],
        statement: "agent A asks agent B what it asked before, reworded or not, with no answer between",
        settings: &["detect.similarity.collaboration", "detect.repeats.collaboration", "detect.collaboration.protocol_words"],
        inputs: &[],
        check: Check::Loop(collaboration::detect),
    },
    Rule {
        id: "collaboration.resent_artifact",
        kinds: &[K::CollaborationLoop],
        statement: "agent A delivers agent B the same artifacts, every one unchanged, again and again with no answer between",
        settings: &["detect.collaboration.occurrences"],
        inputs: &[],
        check: Check::Loop(collaboration::resent_artifact),
    },
    Rule {
        id: "collaboration.unchanged_artifact",
        kinds: &[K::CollaborationLoop],
        statement: "a request answered each time keeps coming back, at least once with no artifact changed since it was last made",
        settings: &["detect.collaboration.occurrences", "detect.collaboration.returning_similarity"],
        inputs: &[],
        check: Check::Loop(collaboration::unchanged_artifact),
    },
    Rule {
        id: "collaboration.asked_again",
        kinds: &[K::CollaborationLoop],
        statement: "a request answered each time keeps coming back, at least once after answers that brought nothing new",
        settings: &["detect.collaboration.occurrences", "detect.collaboration.returning_similarity"],
        inputs: &[],
        check: Check::Loop(collaboration::asked_again),
    },
    Rule {
        id: "collaboration.same_answer",
        kinds: &[K::CollaborationLoop],
        statement: "a request asked again is answered as it was the time before, nothing new since it came back",
        settings: &["detect.collaboration.returning_similarity"],
        inputs: &[],
        check: Check::Loop(collaboration::same_answer),
    },
    Rule {
        id: "collaboration.same_reply",
        kinds: &[K::CollaborationLoop],
        statement: "whatever it is asked, the agent says the same: its replies to the last different requests of one sender say the same thing, reworded",
        settings: &["detect.collaboration.occurrences", "detect.collaboration.returning_similarity"],
        inputs: &[],
        check: Check::Loop(collaboration::same_reply),
    },
    Rule {
        id: "collaboration.courtesies",
        kinds: &[K::CollaborationLoop],
        statement: "short turns trading courtesies (thanks, goodbye, anything else?) one after another from two parties or more, nothing else said or done",
        settings: &["detect.collaboration.courtesy_similarity", "detect.collaboration.occurrences"],
        inputs: &[Input::CourtesyTurns],
        check: Check::Loop(collaboration::courtesies),
    },
    Rule {
        id: "cycle.period",
        kinds: &[K::Cycle],
        statement: "the last p work events repeat the p before them (periods min_period..=max_period), exactly or reworded",
        settings: &["detect.cycles.min_period", "detect.cycles.max_period", "detect.cycles.repetitions", "detect.cycles.occurrences", "detect.collaboration.returning_similarity"],
        inputs: &[],
        check: Check::Loop(cycle::period),
    },
    Rule {
        id: "cycle.replay",
        kinds: &[K::Cycle],
        statement: "a longer block of work replayed in order, caught a few steps in (sooner when the steps re-hit the block's dead ends)",
        settings: &["detect.cycles.max_period", "detect.cycles.replay_max_period", "detect.cycles.replay_streak", "detect.cycles.replay_streak_at_a_dead_end", "detect.collaboration.returning_similarity"],
        inputs: &[],
        check: Check::Loop(cycle::replay_rule),
    },
    Rule {
        id: "repeat.failure",
        kinds: &[K::ExactRepeat, K::SemanticRepeat],
        statement: "a failure matches an earlier one, exactly, normalised or reworded",
        settings: &["detect.similarity.failure", "detect.repeats.failure"],
        inputs: &[],
        check: Check::Loop(repeat::failure),
    },
    Rule {
        id: "repeat.tool_call",
        kinds: &[K::ExactRepeat, K::SemanticRepeat],
        statement: "a tool call and its result match earlier ones, near-consecutive, with no new work between",
        settings: &["detect.similarity.tool_call", "detect.similarity.result", "detect.repeats.tool_call", "detect.repeats.max_between", "detect.repeats.new_work_breaks"],
        inputs: &[],
        check: Check::Loop(repeat::tool_call),
    },
    Rule {
        id: "repeat.piled_up",
        kinds: &[K::ExactRepeat],
        statement: "the same call run again right after the last, its output only more copies of lines it printed then: its effect piled up",
        settings: &[],
        inputs: &[],
        check: Check::Loop(repeat::piled_up),
    },
    Rule {
        id: "response.repeat",
        kinds: &[K::ExactRepeat, K::SimilarResponse],
        statement: "a response says what the last responses said (by default each of the last three), with no new work between",
        settings: &["detect.similarity.response", "detect.repeats.response", "detect.responses.window", "detect.repeats.new_work_breaks"],
        inputs: &[],
        check: Check::Loop(response::detect),
    },
    Rule {
        id: "response.replayed",
        kinds: &[K::ExactRepeat],
        statement: "an earlier exchange replayed word for word later on: a long response identical to an earlier one, right after an output identical to the one before it",
        settings: &[],
        inputs: &[],
        check: Check::Loop(response::replayed),
    },
    Rule {
        id: "negative.nothing_found_alike",
        kinds: &[K::ResultRepeat],
        statement: "calls in a row each find nothing and say so alike, apart from what they asked (another name, a rewording); not when each search widens the one before",
        settings: &["detect.repeats.negative_result", "detect.repeats.nothing_found_alike", "detect.dead_ends.attempt_similarity"],
        inputs: &[],
        check: Check::Loop(negative::nothing_found_alike_rule),
    },
    Rule {
        id: "negative.in_a_row",
        kinds: &[K::SameError, K::ResultRepeat],
        statement: "calls, however varied, keep ending in the same error or the same \"nothing found\" (unless each search widens the one before)",
        settings: &["detect.similarity.result", "detect.repeats.negative_result", "detect.repeats.max_between", "detect.repeats.new_work_breaks"],
        inputs: &[],
        check: Check::Loop(negative::in_a_row),
    },
    Rule {
        id: "finding.same_finding",
        kinds: &[K::ResultRepeat],
        statement: "calls worded differently find the same thing, their results differing only where they quote their own query",
        settings: &["detect.dead_ends.span_window", "detect.repeats.tool_call"],
        inputs: &[],
        check: Check::Loop(finding::detect),
    },
    Rule {
        id: "dead_end.same_attempt",
        kinds: &[K::SameError, K::ResultRepeat],
        statement: "the same attempt, reworded or not, ends in the same error lines, nearly consecutively",
        settings: &["detect.dead_ends.occurrences", "detect.dead_ends.same_attempt_window", "detect.dead_ends.attempt_similarity"],
        inputs: &[],
        check: Check::Loop(dead_end::same_attempt_rule),
    },
    Rule {
        id: "dead_end.back_to_rejected",
        kinds: &[K::SameError, K::ResultRepeat],
        statement: "an attempt already rejected is sent again after variants rejected the same way",
        settings: &["detect.dead_ends.occurrences", "detect.dead_ends.same_attempt_window"],
        inputs: &[],
        check: Check::Loop(dead_end::back_to_rejected),
    },
    Rule {
        id: "dead_end.resent_in_a_row",
        kinds: &[K::SameError, K::ResultRepeat],
        statement: "attempts in a row all end in the same error (some in more besides), one of them re-sent after it was rejected",
        settings: &["detect.dead_ends.occurrences", "detect.window"],
        inputs: &[],
        check: Check::Loop(dead_end::resent_in_a_row),
    },
    Rule {
        id: "dead_end.refused_as_written",
        kinds: &[K::SameError],
        statement: "calls in a row are refused as written (a syntax error, an unknown option) with the same refusal: none of them ran",
        settings: &["detect.dead_ends.occurrences", "detect.window"],
        inputs: &[],
        check: Check::Loop(dead_end::refused_as_written),
    },
    Rule {
        id: "dead_end.reworded_change",
        kinds: &[K::SameError, K::ResultRepeat],
        statement: "one step fails exactly the same way with only rewordings of one change between its runs",
        settings: &["detect.dead_ends.occurrences", "detect.dead_ends.span_window", "detect.dead_ends.change_similarity"],
        inputs: &[Input::ChangeCosines],
        check: Check::Loop(dead_end::reworded_change),
    },
    Rule {
        id: "dead_end.guess_by_name",
        kinds: &[K::SameError],
        statement: "one step fails with the same kind of error, each time about the name the change before it tried",
        settings: &["detect.dead_ends.occurrences", "detect.dead_ends.span_window"],
        inputs: &[],
        check: Check::Loop(dead_end::guesses_by_name),
    },
    Rule {
        id: "dead_end.unmoved_reruns",
        kinds: &[K::SameError],
        statement: "the very same call fails with the very same error lines, as written, again and again with other work between",
        settings: &["detect.dead_ends.unmoved_reruns", "detect.dead_ends.span_window"],
        inputs: &[],
        check: Check::Loop(dead_end::unmoved_reruns_rule),
    },
    Rule {
        id: "steps.limit",
        kinds: &[K::StepLimit],
        statement: "a workflow step is entered more often than its limit",
        settings: &["detect.steps.*"],
        inputs: &[],
        check: Check::Loop(steps::detect),
    },
    Rule {
        id: "transitions.cycle",
        kinds: &[K::TransitionCycle],
        statement: "the same sequence of step transitions repeats",
        settings: &["detect.transitions.*"],
        inputs: &[],
        check: Check::Loop(transitions::detect),
    },
    Rule {
        id: "judge.grey_band",
        kinds: &[K::SemanticRepeat],
        statement: "the best match is just below its threshold and a match would have made a loop",
        settings: &["detect.similarity.grey_band", "detect.repeats.failure", "detect.repeats.collaboration", "detect.repeats.response", "detect.repeats.tool_call"],
        inputs: &[],
        check: Check::Ask(questions::grey_band),
    },
    Rule {
        id: "judge.different_attempts",
        kinds: &[K::SameError],
        statement: "different attempts in a row end in the same error: ruling options out, or stuck?",
        settings: &["detect.dead_ends.occurrences"],
        inputs: &[],
        check: Check::Ask(questions::different_attempts),
    },
    Rule {
        id: "judge.different_changes",
        kinds: &[K::SameError],
        statement: "the same step fails the same way, as written, its output otherwise unchanged, after different changes",
        settings: &["detect.dead_ends.occurrences", "detect.dead_ends.span_window"],
        inputs: &[Input::ChangeCosines],
        check: Check::Ask(questions::different_changes),
    },
    Rule {
        id: "judge.redone_calls",
        kinds: &[K::SemanticRepeat, K::Cycle],
        statement: "the very same calls redone with outputs that barely moved: a poll, or a step redone for nothing?",
        settings: &["judge.redone_result_overlap", "detect.cycles.max_period"],
        inputs: &[],
        check: Check::Ask(questions::redone_calls),
    },
    Rule {
        id: "judge.timeouts",
        kinds: &[K::SameError],
        statement: "calls time out again and again within the dead-end window, whatever was between",
        settings: &["judge.ask_after_timeouts", "detect.dead_ends.span_window"],
        inputs: &[],
        check: Check::Ask(questions::timeouts),
    },
    Rule {
        id: "judge.failures_in_a_row",
        kinds: &[K::Regression],
        statement: "failures in a row with no objective progress signal: moving toward the goal?",
        settings: &["judge.ask_after_failures"],
        inputs: &[],
        check: Check::Ask(questions::failures_in_a_row),
    },
];

/// The detection settings no one rule owns, each with what it does for all of them: the engine
/// reads them before the table runs. Every other `[detect]` setting belongs to the rules that
/// list it (a test holds loopguard.toml to that, so a new setting nobody declares fails it).
pub static ENGINE_SETTINGS: &[(&str, &str)] = &[
    ("detect.window", "how many entries a task keeps: the past every rule reads"),
    ("detect.max_gap_secs", "an earlier event older than this never matches, for every rule that compares"),
    ("detect.structural_match", "failures with the same exception, location and stack match nearer, before any rule reads the matches"),
    ("detect.passive_tools", "calls that are thoughts, not work, for every rule"),
    ("detect.external.types", "failures the environment causes, told apart when an event is read"),
    ("detect.enabled.*", "the kinds of loop reported, whichever rule found one"),
    ("detect.rules_off", "the rules skipped"),
];

/// The detection settings a rule declares that the engine reads before the table runs, each
/// with where: one value for every rule, so a rule's own section (`[detect.rule.<family>.<name>]`)
/// cannot set them. Every other `detect.` setting a rule declares, it may have a value of its own.
pub static READ_BEFORE_THE_TABLE: &[(&str, &str)] = &[
    (
        "detect.similarity.*",
        "the links every rule reads (same as, new work) are settled with them",
    ),
    (
        "detect.collaboration.protocol_words",
        "a message is told a protocol word when it is read",
    ),
    (
        "detect.collaboration.courtesy_similarity",
        "short turns are compared with courtesies in the link stage",
    ),
    (
        "detect.content.*",
        "a response is searched for repeats inside it when it is read",
    ),
    (
        "detect.transitions.*",
        "the policy keeps the step transitions with them",
    ),
    ("detect.budget.*", "the policy counts the budget with it"),
];

/// The rule with this id.
pub fn by_id(id: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.id == id)
}

/// Does `declared` (a key, or `prefix.*`) name `key`?
pub fn covers(declared: &str, key: &str) -> bool {
    match declared.strip_suffix(".*") {
        Some(prefix) => key.starts_with(prefix) && key[prefix.len()..].starts_with('.'),
        None => declared == key,
    }
}

impl Rule {
    /// The settings it declares that its own section may set.
    pub fn own_settings(&self) -> Vec<&'static str> {
        self.settings
            .iter()
            .copied()
            .filter(|d| d.starts_with("detect.") && !before_the_table(d))
            .collect()
    }

    /// Why the rule cannot have its own value for `key` (a dotted key from the top, e.g.
    /// `detect.dead_ends.occurrences`), or `None` when its section may set it.
    pub fn cannot_own(&self, key: &str) -> Option<String> {
        if !self.settings.iter().any(|d| covers(d, key)) {
            let own = self.own_settings();
            return Some(format!(
                "rule {} does not read `{key}`; the settings it may have its own value for: {}",
                self.id,
                if own.is_empty() {
                    "none".to_string()
                } else {
                    own.join(", ")
                }
            ));
        }
        if let Some((_, why)) = READ_BEFORE_THE_TABLE.iter().find(|(d, _)| covers(d, key)) {
            return Some(format!(
                "`{key}` is read before the rules run ({why}): one value for every rule, set \
                 where it is"
            ));
        }
        if !key.starts_with("detect.") || ENGINE_SETTINGS.iter().any(|(d, _)| covers(d, key)) {
            return Some(format!(
                "`{key}` is the engine's, not a rule's: one value for every rule, set where it is"
            ));
        }
        None
    }
}

fn before_the_table(declared: &str) -> bool {
    READ_BEFORE_THE_TABLE
        .iter()
        .any(|(d, _)| covers(d, declared) || d == &declared)
        || ENGINE_SETTINGS
            .iter()
            .any(|(d, _)| covers(d, declared) || d == &declared)
}

/// Run the table: the first loop rule that fires (of a kind switched on), else the first
/// question. Rules in `detect.rules_off` are skipped.
pub fn run(ctx: &Ctx<'_>) -> Option<Hit> {
    let on = |r: &&Rule| !ctx.cfg.rules_off.iter().any(|id| id == r.id);
    // Questions come after every loop rule (a test holds the table to it): the first one that
    // fires is asked only when no loop rule fired.
    for rule in RULES.iter().filter(on) {
        // A rule with a section of its own reads its own values.
        let own = ctx.cfg.own.get(rule.id).map(|cfg| ctx.with_cfg(cfg));
        let ctx = own.as_ref().unwrap_or(ctx);
        match rule.check {
            Check::Loop(check) => {
                if let Some(mut f) = check(ctx).filter(|f| enabled(ctx.cfg, f.kind)) {
                    f.rule = rule.id;
                    return Some(Hit::Loop(f));
                }
            }
            Check::Ask(ask) => {
                if let Some(mut q) = ask(ctx) {
                    q.rule = rule.id;
                    return Some(Hit::Ask(q));
                }
            }
        }
    }
    None
}

/// The table as Markdown: id, kinds, statement, settings, inputs (docs/DETECTION.md's rule
/// table).
pub fn markdown() -> String {
    let mut out = String::from(
        "| # | rule | outcome | kinds | what it says | settings | computed first |\n|---|---|---|---|---|---|---|\n",
    );
    for (i, r) in RULES.iter().enumerate() {
        let kinds: Vec<&str> = r.kinds.iter().map(|k| k.as_str()).collect();
        let settings: Vec<String> = r.settings.iter().map(|s| format!("`{s}`")).collect();
        let inputs: Vec<&str> = r.inputs.iter().map(|i| i.as_str()).collect();
        out.push_str(&format!(
            "| {} | `{}` | {} | {} | {} | {} | {} |\n",
            i + 1,
            r.id,
            if r.is_question() { "question" } else { "loop" },
            kinds.join(", "),
            r.statement,
            settings.join(", "),
            inputs.join(", ")
        ));
    }
    out.push_str("\n| setting every rule shares | what it does |\n|---|---|\n");
    for (key, what) in ENGINE_SETTINGS {
        out.push_str(&format!("| `{key}` | {what} |\n"));
    }
    out.push_str(
        "\n| read before the table runs: one value for every rule declaring it | where |\n|---|---|\n",
    );
    for (key, why) in READ_BEFORE_THE_TABLE {
        out.push_str(&format!("| `{key}` | {why} |\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{ENGINE_SETTINGS, RULES};

    /// Every setting under `[detect]` in loopguard.toml, and every `judge.` setting a rule names,
    /// as dotted keys.
    fn reference_keys() -> Vec<String> {
        fn walk(prefix: &str, v: &toml::Value, out: &mut Vec<String>) {
            match v {
                toml::Value::Table(t) => {
                    for (k, v) in t {
                        walk(&format!("{prefix}.{k}"), v, out);
                    }
                }
                _ => out.push(prefix.to_string()),
            }
        }
        let doc: toml::Value = toml::from_str(crate::config::REFERENCE_TOML).unwrap();
        let mut keys = Vec::new();
        for section in ["detect", "judge"] {
            walk(section, &doc[section], &mut keys);
        }
        keys
    }

    use super::covers;

    #[test]
    fn every_declared_setting_exists_and_every_detection_setting_is_declared() {
        let keys = reference_keys();
        let declared: Vec<&str> = RULES
            .iter()
            .flat_map(|r| r.settings.iter().copied())
            .chain(ENGINE_SETTINGS.iter().map(|(k, _)| *k))
            .collect();
        for d in &declared {
            assert!(
                keys.iter().any(|k| covers(d, k)),
                "`{d}` is declared by the rule table but loopguard.toml has no such setting"
            );
        }
        for k in keys.iter().filter(|k| k.starts_with("detect.")) {
            assert!(
                declared.iter().any(|d| covers(d, k)),
                "`{k}` is in loopguard.toml but no rule declares it (src/detect/rules.rs: the \
                 `settings` of the rules that read it, or ENGINE_SETTINGS when every rule does)"
            );
        }
    }

    /// What loopguard.toml must say above a setting: the rules reading it, from the table.
    fn read_by(key: &str) -> Option<String> {
        if ENGINE_SETTINGS.iter().any(|(d, _)| covers(d, key)) {
            return Some("every rule (the engine's setting)".to_string());
        }
        let readers: Vec<&str> = RULES
            .iter()
            .filter(|r| r.settings.iter().any(|d| covers(d, key)))
            .map(|r| r.id)
            .collect();
        if readers.is_empty() {
            return None;
        }
        let before = super::READ_BEFORE_THE_TABLE
            .iter()
            .any(|(d, _)| covers(d, key));
        Some(format!(
            "{}{}",
            readers.join(", "),
            if before {
                " (read before the rules run: one value for all)"
            } else {
                ""
            }
        ))
    }

    /// loopguard.toml says, above each setting a rule reads (once above a run of settings read
    /// by the same rules), which rules read it: `# Read by: id, id`, as the table declares.
    #[test]
    fn loopguard_toml_says_which_rules_read_each_setting() {
        let mut section = String::new();
        let mut said: Option<&str> = None;
        let mut stale = Vec::new();
        for line in crate::config::REFERENCE_TOML.lines() {
            if let Some(header) = line.strip_prefix('[') {
                section = header.trim_end_matches(']').to_string();
                said = None;
            } else if let Some(readers) = line.strip_prefix("# Read by: ") {
                said = Some(readers);
            } else if let Some((name, _)) = line.split_once(" = ") {
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    continue;
                }
                let key = format!("{section}.{name}");
                if let Some(want) = read_by(&key) {
                    if said != Some(want.as_str()) {
                        stale.push(format!("{key}: `# Read by: {want}` (it says {said:?})"));
                    }
                }
            }
        }
        assert!(
            stale.is_empty(),
            "loopguard.toml is out of date with the rule table (src/detect/rules.rs); above these \
             settings it should say:\n{}",
            stale.join("\n")
        );
    }

    #[test]
    fn every_input_is_declared_by_a_rule_and_skipped_when_they_are_all_off() {
        use super::{wants, Input};
        for input in Input::ALL {
            let declaring: Vec<String> = RULES
                .iter()
                .filter(|r| r.inputs.contains(&input))
                .map(|r| r.id.to_string())
                .collect();
            assert!(!declaring.is_empty(), "{input:?} is declared by no rule");
            let mut cfg = crate::config::Config::default().detect;
            assert!(wants(&cfg, input));
            // One declaring rule on is enough for the round to run.
            cfg.rules_off = declaring[1..].to_vec();
            assert!(wants(&cfg, input), "{input:?} with {} on", declaring[0]);
            cfg.rules_off = declaring;
            assert!(
                !wants(&cfg, input),
                "{input:?} with every rule needing it off"
            );
        }
    }

    #[test]
    fn detection_md_lists_the_table_as_loopguard_rules_prints_it() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/DETECTION.md"))
                .unwrap();
        let begin = "<!-- rules-list:begin (`loopguard rules` prints this table) -->\n\n";
        let start = doc.find(begin).expect("the rules-list markers") + begin.len();
        let end = start
            + doc[start..]
                .find("\n<!-- rules-list:end")
                .expect("its end marker");
        assert_eq!(
            doc[start..end].trim_end(),
            super::markdown().trim_end(),
            "docs/DETECTION.md's rule table is stale: paste `loopguard rules` between its markers"
        );
    }

    #[test]
    fn ids_are_unique_and_loops_come_before_questions() {
        let mut ids: Vec<&str> = RULES.iter().map(|r| r.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), RULES.len());
        let first_question = RULES.iter().position(|r| r.is_question()).unwrap();
        assert!(RULES[first_question..].iter().all(|r| r.is_question()));
        for r in RULES {
            let (family, name) = r.id.split_once('.').expect("family.name");
            assert!(!family.is_empty() && !name.is_empty() && !name.contains('.'));
        }
    }
}
