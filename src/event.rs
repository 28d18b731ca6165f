//! Events in: the envelope an orchestrator posts and the seven event types of the brief.
//!
//! Parsing goes through [`parse_envelope`] / [`parse_envelope_value`], which report the JSON path
//! of the first problem (`event.message`, `task_id`) instead of a bare serde message.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// Longest accepted task id, in characters (the brief's contract: 1..256).
pub const MAX_TASK_ID_CHARS: usize = 256;

/// One agent event with the routing information around it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Envelope {
    /// The unit of state; 1..256 characters.
    pub task_id: String,
    /// A subtask shares the loop counter and window of its root task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_task_id: Option<String>,
    /// Changing agents does not reset the loop counter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Workflow step name, for per-step iteration limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The task's goal, when the orchestrator knows it: shown to the LLM judge. Kept from the
    /// first event that carries one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// When the event happened, by the client's clock. The service records it (`client_ts` in
    /// the audit trail, clamped to within `server.max_clock_skew_secs` of its own time) and
    /// decides every age by its own clock; `loopguard score` dates replayed events by it.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, format = DateTime, example = "2026-11-21T10:00:00Z")]
    pub ts: Option<OffsetDateTime>,
    pub event: Event,
}

impl Envelope {
    /// An envelope around a bare event, as `score` builds for runs that carry only events.
    pub fn bare(task_id: impl Into<String>, event: Event) -> Self {
        Envelope {
            task_id: task_id.into(),
            parent_task_id: None,
            agent_id: None,
            step: None,
            goal: None,
            ts: None,
            event,
        }
    }
}

/// The event types of the brief's input contract.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    Failure(Failure),
    ToolCall(ToolCall),
    Response(Response),
    Collaboration(Collaboration),
    Transition(Transition),
    Progress(Progress),
    Outcome(Outcome),
}

impl Event {
    /// The wire name of the event type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::Failure(_) => "failure",
            Event::ToolCall(_) => "tool_call",
            Event::Response(_) => "response",
            Event::Collaboration(_) => "collaboration",
            Event::Transition(_) => "transition",
            Event::Progress(_) => "progress",
            Event::Outcome(_) => "outcome",
        }
    }
}

/// An error the agent hit (its failure signature is extracted from it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Failure {
    pub message: String,
    /// Caller's classification; wins over the engine's own classification when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    /// `file:line` or a component name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_trace: Option<String>,
}

/// A tool invocation, optionally with what it returned.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ToolCall {
    pub tool: String,
    /// Any JSON; compared in canonical form (sorted keys).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub args: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ToolResult>,
}

/// What a tool returned.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ToolResult {
    /// A string, or any JSON (compared in canonical form).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub output: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
}

impl ToolResult {
    /// True when the call failed: `is_error`, or a non-zero exit code.
    pub fn failed(&self) -> bool {
        self.is_error.unwrap_or(false) || self.exit_code.is_some_and(|c| c != 0)
    }
}

/// The text of one LLM turn.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Response {
    pub text: String,
    /// A piece of a response still being generated: checked for repetition inside the stream
    /// (with the task's earlier chunks since its last whole response), not compared with
    /// earlier turns. Send the whole response as a plain `response` when it ends.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub chunk: bool,
}

/// One agent (or a person) writing to another, or to a group (collaboration loops).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Collaboration {
    pub from_agent: String,
    /// The addressee: an agent, a person, or a group (see `to_group`).
    pub to_agent: String,
    pub request: String,
    /// `to_agent` is a group (a chat manager, a channel): every member sees the message, and
    /// any other member's message answers it. When absent, an addressee that two or more
    /// agents write to and that never writes itself is taken for a group.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub to_group: bool,
}

/// A workflow state transition.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Transition {
    pub from: String,
    pub to: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Objective progress metrics: what counts as progress.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Progress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests_passed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests_failed: Option<u64>,
    /// Percent, 0..100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 100)]
    pub coverage: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_created: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependencies_added: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines_changed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Progress {
    /// Completion indicators when there are no tests: files created, dependencies added, code written.
    pub fn has_completion_indicators(&self) -> bool {
        self.files_created.unwrap_or(0) > 0
            || self.dependencies_added.unwrap_or(0) > 0
            || self.lines_changed.unwrap_or(0) > 0
    }
}

/// How a task (or an attempt at it) ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Outcome {
    pub result: OutcomeKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The counter resets on `success` and `human_intervention`, never on `agent_changed`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    Success,
    HumanIntervention,
    AgentChanged,
    Abandoned,
}

impl OutcomeKind {
    pub fn resets_counter(self) -> bool {
        matches!(self, OutcomeKind::Success | OutcomeKind::HumanIntervention)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Success => "success",
            OutcomeKind::HumanIntervention => "human_intervention",
            OutcomeKind::AgentChanged => "agent_changed",
            OutcomeKind::Abandoned => "abandoned",
        }
    }
}

/// Input that does not fit the contract, with the JSON path at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct InputError {
    /// Dotted JSON path, `.` for the document itself.
    pub path: String,
    pub message: String,
}

impl InputError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        InputError {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The same error one level deeper, e.g. under `events[3]`.
    pub fn under(self, prefix: &str) -> Self {
        let path = if self.path == "." || self.path.is_empty() {
            prefix.to_string()
        } else if self.path.starts_with('[') {
            format!("{prefix}{}", self.path)
        } else {
            format!("{prefix}.{}", self.path)
        };
        InputError {
            path,
            message: self.message,
        }
    }
}

fn path_error<E: std::fmt::Display>(err: serde_path_to_error::Error<E>) -> InputError {
    let path = err.path().to_string();
    InputError::new(path, err.into_inner().to_string())
}

/// Parse one envelope from JSON text, naming the path of the first problem.
pub fn parse_envelope(text: &str) -> Result<Envelope, InputError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let envelope: Envelope = serde_path_to_error::deserialize(&mut de).map_err(path_error)?;
    de.end()
        .map_err(|e| InputError::new(".", format!("trailing characters after the event: {e}")))?;
    validate(envelope)
}

/// Parse one envelope from an already parsed JSON value.
pub fn parse_envelope_value(value: serde_json::Value) -> Result<Envelope, InputError> {
    let envelope: Envelope = serde_path_to_error::deserialize(value).map_err(path_error)?;
    validate(envelope)
}

/// Parse a bare event (the `event` object alone) from a JSON value.
pub fn parse_event_value(value: serde_json::Value) -> Result<Event, InputError> {
    serde_path_to_error::deserialize(value).map_err(path_error)
}

/// Characters a task id may not hold besides control characters: those that print as nothing
/// or reorder text. An id is shown in the dashboard and in logs; with these, `invoice-7` and a
/// look-alike that is another task, an id that prints backwards, or one that prints blank
/// could not be told apart. They are Unicode's Default_Ignorable_Code_Point set (soft hyphen,
/// combining grapheme joiner, Hangul fillers, zero-width spaces and joiners, bidirectional
/// marks, overrides and isolates, variation selectors, the byte order mark, tag characters, and
/// the code points reserved as default ignorable), the line and paragraph separators (U+2028,
/// U+2029: an id would print on two lines), and the interlinear annotation characters.
pub const INVISIBLE_CHARS: &[(char, char)] = &[
    ('\u{00ad}', '\u{00ad}'),
    ('\u{034f}', '\u{034f}'),
    ('\u{061c}', '\u{061c}'),
    ('\u{115f}', '\u{1160}'),
    ('\u{17b4}', '\u{17b5}'),
    ('\u{180b}', '\u{180f}'),
    ('\u{200b}', '\u{200f}'),
    ('\u{2028}', '\u{202e}'),
    ('\u{2060}', '\u{206f}'),
    ('\u{3164}', '\u{3164}'),
    ('\u{fe00}', '\u{fe0f}'),
    ('\u{feff}', '\u{feff}'),
    ('\u{ffa0}', '\u{ffa0}'),
    ('\u{fff0}', '\u{fffb}'),
    ('\u{1bca0}', '\u{1bca3}'),
    ('\u{1d173}', '\u{1d17a}'),
    ('\u{e0000}', '\u{e0fff}'),
];

/// A task id as it is kept: in Unicode Normalization Form C, so that two spellings of one
/// text (`café` with a precomposed `é`, or `e` and a combining accent) are one task and print
/// one way. Ids are taken in any form and kept in this one; verdicts and listings show it.
pub fn task_id_nfc(id: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    if unicode_normalization::is_nfc(id) {
        id.to_string()
    } else {
        id.nfc().collect()
    }
}

/// What is wrong with a task id, if anything: 1..256 characters (as sent, and in NFC), no
/// control or invisible characters ([`INVISIBLE_CHARS`]), and not whitespace alone.
pub fn task_id_problem(id: &str) -> Option<String> {
    let chars = id.chars().count();
    if chars == 0 || chars > MAX_TASK_ID_CHARS {
        return Some(format!(
            "must be 1..{MAX_TASK_ID_CHARS} characters, got {chars}"
        ));
    }
    if let Some((i, c)) = id.chars().enumerate().find(|(_, c)| {
        c.is_control()
            || INVISIBLE_CHARS
                .iter()
                .any(|(lo, hi)| (*lo..=*hi).contains(c))
    }) {
        return Some(format!(
            "must not contain control or invisible characters (U+{:04X} at character {i})",
            c as u32
        ));
    }
    if id.chars().all(char::is_whitespace) {
        return Some("must not be whitespace alone".into());
    }
    if !unicode_normalization::is_nfc(id) {
        let nfc = task_id_nfc(id).chars().count();
        if nfc > MAX_TASK_ID_CHARS {
            return Some(format!(
                "must be 1..{MAX_TASK_ID_CHARS} characters in Unicode NFC, the form it is kept in; got {nfc}"
            ));
        }
    }
    None
}

/// A task id as the contract allows it ([`task_id_problem`]), or the error naming `path`.
pub fn validate_task_id(path: &str, id: &str) -> Result<(), InputError> {
    match task_id_problem(id) {
        Some(why) => Err(InputError::new(path, why)),
        None => Ok(()),
    }
}

fn validate(mut envelope: Envelope) -> Result<Envelope, InputError> {
    validate_task_id("task_id", &envelope.task_id)?;
    envelope.task_id = task_id_nfc(&envelope.task_id);
    if let Some(parent) = &mut envelope.parent_task_id {
        validate_task_id("parent_task_id", parent)?;
        *parent = task_id_nfc(parent);
        // A task naming itself as its parent has none: it is a root. (Accepted rather than
        // refused: the OpenAPI schema cannot say that two fields differ, and nothing is lost.)
        if parent == &envelope.task_id {
            envelope.parent_task_id = None;
        }
    }
    if let Event::Progress(p) = &envelope.event {
        // The schema declares these counts int64 (OpenAPI has no unsigned format): a value past
        // its range is refused here, not accepted as a u64 the schema says cannot exist.
        let counts = [
            ("event.tests_passed", p.tests_passed),
            ("event.tests_failed", p.tests_failed),
            ("event.files_created", p.files_created),
            ("event.dependencies_added", p.dependencies_added),
            ("event.lines_changed", p.lines_changed),
        ];
        for (path, n) in counts {
            if let Some(n) = n.filter(|n| i64::try_from(*n).is_err()) {
                return Err(InputError::new(
                    path,
                    format!("must be a count of at most {}, got {n}", i64::MAX),
                ));
            }
        }
        if let Some(c) = p.coverage {
            if !(0.0..=100.0).contains(&c) {
                return Err(InputError::new(
                    "event.coverage",
                    format!("must be a percentage in 0..100, got {c}"),
                ));
            }
        }
    }
    Ok(envelope)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_past_int64_or_a_coverage_just_past_100_is_refused_with_its_path() {
        let e = parse_envelope(
            r#"{"task_id":"t","event":{"type":"progress","files_created":9223372036854775808}}"#,
        )
        .expect_err("2^63 is past the schema's int64");
        assert_eq!(e.path, "event.files_created", "{e:?}");
        // The nearest double above 100: parsed exactly, so refused (not rounded down to 100).
        let e = parse_envelope(
            r#"{"task_id":"t","event":{"type":"progress","coverage":100.00000000000001}}"#,
        )
        .expect_err("just past 100 is not a percentage");
        assert_eq!(e.path, "event.coverage", "{e:?}");
        assert!(parse_envelope(
            r#"{"task_id":"t","event":{"type":"progress","files_created":9223372036854775807,"coverage":100}}"#
        )
        .is_ok());
    }

    #[test]
    fn parses_every_event_type() {
        let lines = [
            r#"{"task_id":"t","event":{"type":"failure","message":"boom","error_type":"runtime","location":"a.rs:1","stack_trace":"x"}}"#,
            r#"{"task_id":"t","event":{"type":"tool_call","tool":"ls","args":{"path":"."},"result":{"output":"a b","is_error":false,"exit_code":0}}}"#,
            r#"{"task_id":"t","event":{"type":"response","text":"hello"}}"#,
            r#"{"task_id":"t","event":{"type":"collaboration","from_agent":"a","to_agent":"b","request":"help"}}"#,
            r#"{"task_id":"t","event":{"type":"transition","from":"plan","to":"implement"}}"#,
            r#"{"task_id":"t","event":{"type":"progress","tests_passed":3,"coverage":50.5}}"#,
            r#"{"task_id":"t","parent_task_id":"p","agent_id":"a","step":"worker","ts":"2026-11-21T10:00:00Z","event":{"type":"outcome","result":"human_intervention","note":"n"}}"#,
        ];
        let names: Vec<_> = lines
            .iter()
            .map(|l| parse_envelope(l).unwrap().event.type_name())
            .collect();
        assert_eq!(
            names,
            [
                "failure",
                "tool_call",
                "response",
                "collaboration",
                "transition",
                "progress",
                "outcome"
            ]
        );
    }

    #[test]
    fn errors_name_the_path() {
        let err = parse_envelope(r#"{"task_id":"t","event":{"type":"failure"}}"#).unwrap_err();
        assert_eq!(err.path, "event");
        assert!(err.message.contains("missing field `message`"), "{err}");

        let err = parse_envelope(r#"{"task_id":"t","event":{"type":"teleport"}}"#).unwrap_err();
        assert!(err.message.contains("unknown variant `teleport`"), "{err}");

        let err = parse_envelope(r#"{"event":{"type":"response","text":"x"}}"#).unwrap_err();
        assert!(err.message.contains("missing field `task_id`"), "{err}");

        let err =
            parse_envelope(r#"{"task_id":"","event":{"type":"response","text":"x"}}"#).unwrap_err();
        assert_eq!(err.path, "task_id");

        let err = parse_envelope(
            r#"{"task_id":"t","ts":"yesterday","event":{"type":"response","text":"x"}}"#,
        )
        .unwrap_err();
        assert_eq!(err.path, "ts");

        let err =
            parse_envelope(r#"{"task_id":7,"event":{"type":"response","text":"x"}}"#).unwrap_err();
        assert_eq!(err.path, "task_id");
    }

    /// Issue 43: ids that print like another id, or as nothing, are refused; two spellings of
    /// one text (NFC and NFD "café") are one task.
    #[test]
    fn invisible_ids_are_refused_and_ids_are_kept_in_nfc() {
        for id in [
            "a\u{034f}b",       // combining grapheme joiner
            "\u{3164}",         // Hangul filler: an id of it alone prints blank
            "x\u{3164}",        //
            "t\u{e0041}",       // a tag character
            "t\u{fe0f}",        // a variation selector
            "a\u{2028}b",       // line separator
            "a\u{2029}b",       // paragraph separator
            "a\u{115f}",        // Hangul choseong filler
            "a\u{ffa0}",        // halfwidth Hangul filler
            "a\u{17b4}",        // Khmer inherent vowel
            "a\u{180b}",        // Mongolian variation selector
            "a\u{1d173}",       // musical symbol begin beam
            "a\u{1bca0}",       // shorthand format letter overlap
            "a\u{e0100}",       // variation selector 17
            "a\u{fff0}",        // unassigned, default ignorable
            "invoice\u{202e}7", // already refused: reordering
        ] {
            let line =
                serde_json::json!({"task_id": id, "event": {"type": "response", "text": "x"}});
            let err = parse_envelope(&line.to_string()).expect_err(id);
            assert_eq!(err.path, "task_id", "{id:?}: {err}");
            assert!(err.message.contains("U+"), "names the character: {err}");
            let line = serde_json::json!({"task_id": "ok", "parent_task_id": id, "event": {"type": "response", "text": "x"}});
            let err = parse_envelope(&line.to_string()).expect_err(id);
            assert_eq!(err.path, "parent_task_id", "{id:?}: {err}");
        }
        // NFD "café" is kept as NFC "café": one task, printed one way.
        let nfd = "cafe\u{301}";
        let nfc = "caf\u{e9}";
        let line = serde_json::json!({"task_id": nfd, "parent_task_id": format!("{nfd}-root"), "event": {"type": "response", "text": "x"}});
        let env = parse_envelope(&line.to_string()).unwrap();
        assert_eq!(env.task_id, nfc);
        assert_eq!(env.parent_task_id.as_deref(), Some("caf\u{e9}-root"));
        assert_eq!(task_id_nfc(nfd), nfc);
        assert_eq!(task_id_nfc(nfc), nfc);
        // Visible text of any script, emoji (with no variation selector) and inner spaces are fine.
        for id in [
            "t-42",
            "ünïcödé",
            "任务-7",
            "😀",
            "a b",
            "\u{1f468}\u{200d}x",
        ] {
            let ok = task_id_problem(id).is_none();
            assert_eq!(ok, !id.contains('\u{200d}'), "{id:?}");
        }
    }

    #[test]
    fn under_prefixes_paths() {
        let e = InputError::new("event.message", "x").under("events[3]");
        assert_eq!(e.path, "events[3].event.message");
        let e = InputError::new(".", "x").under("events[0]");
        assert_eq!(e.path, "events[0]");
    }
}
