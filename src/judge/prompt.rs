//! What the judge is told and what it must answer. docs/JUDGE.md shows both with an example.

use super::{Evidence, JudgeAnswer, JudgeStatus, JudgeVerdict};

/// The system prompt of the chat-completions judge.
pub const SYSTEM_PROMPT: &str = "You judge whether an AI agent working on a task is making progress or is stuck in a loop.
You get the agent's recent events (failures, tool calls with results, responses, requests to other agents), the current event, test metrics when known, and the earlier event the current one resembles with their similarity.
Decide one of:
- \"progress\": the agent is moving toward the goal (new information, a different approach, results improving).
- \"no_progress\": the agent repeats itself in substance, even if worded differently; nothing new is learned.
- \"regressive\": the agent is moving away from the goal (results getting worse, undoing earlier progress).
- \"external\": the failure is caused by something outside the agent (network, authentication, an unavailable service), not by its approach.
Answer with one JSON object and nothing else:
{\"verdict\": \"progress\" | \"no_progress\" | \"regressive\" | \"external\", \"confidence\": <number from 0 to 1>, \"reason\": \"<one sentence>\"}";

/// The user message: the question and the evidence as JSON.
pub fn user_message(evidence: &Evidence) -> String {
    format!(
        "Question: {}\n\nEvidence:\n{}",
        evidence.question,
        serde_json::to_string_pretty(evidence).expect("evidence serialises")
    )
}

/// Longest reason kept from a judge's answer.
const MAX_REASON_CHARS: usize = 500;

/// Validate an answer against the verdict schema. Anything else is `Invalid` (undecided), never
/// an error that fails the request.
pub fn parse_answer(text: &str) -> JudgeAnswer {
    let invalid = |why: String| JudgeAnswer::undecided(JudgeStatus::Invalid, why);
    // Models wrap JSON in prose or code fences; take the outermost object.
    let (Some(start), Some(end)) = (text.find('{'), text.rfind('}')) else {
        return invalid(format!("no JSON object in the answer: {}", preview(text)));
    };
    if end < start {
        return invalid(format!("no JSON object in the answer: {}", preview(text)));
    }
    let value: serde_json::Value = match serde_json::from_str(&text[start..=end]) {
        Ok(v) => v,
        Err(e) => {
            return invalid(format!(
                "the answer is not valid JSON ({e}): {}",
                preview(text)
            ))
        }
    };
    let verdict = match value.get("verdict").and_then(|v| v.as_str()) {
        Some("progress") => JudgeVerdict::Progress,
        Some("no_progress") => JudgeVerdict::NoProgress,
        Some("regressive") => JudgeVerdict::Regressive,
        Some("external") => JudgeVerdict::External,
        Some(other) => {
            return invalid(format!(
                "unknown verdict `{other}`; expected progress, no_progress, regressive or external"
            ))
        }
        None => return invalid("the answer has no string `verdict`".into()),
    };
    let confidence = match value.get("confidence") {
        None | Some(serde_json::Value::Null) => None,
        Some(c) => match c.as_f64() {
            Some(c) if (0.0..=1.0).contains(&c) => Some(c as f32),
            _ => {
                return invalid(format!(
                    "`confidence` must be a number from 0 to 1, got {c}"
                ))
            }
        },
    };
    let reason = value
        .get("reason")
        .and_then(|r| r.as_str())
        .map(|r| r.chars().take(MAX_REASON_CHARS).collect());
    JudgeAnswer {
        status: JudgeStatus::Ok,
        verdict: Some(verdict),
        confidence,
        reason,
    }
}

fn preview(text: &str) -> String {
    let t: String = text.chars().take(80).collect();
    if text.chars().count() > 80 {
        format!("{t}…")
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_schema_with_fences_and_prose() {
        let a = parse_answer("```json\n{\"verdict\": \"regressive\", \"confidence\": 0.8, \"reason\": \"worse\"}\n```");
        assert_eq!(a.status, JudgeStatus::Ok);
        assert_eq!(a.verdict, Some(JudgeVerdict::Regressive));
        assert_eq!(a.confidence, Some(0.8));
        let a = parse_answer("Sure! {\"verdict\": \"progress\"} Hope that helps.");
        assert_eq!(a.verdict, Some(JudgeVerdict::Progress));
        assert_eq!(a.confidence, None);
    }

    #[test]
    fn anything_else_is_invalid_not_an_error() {
        for bad in [
            "",
            "no idea",
            "{\"verdict\": \"maybe\"}",
            "{\"verdict\": 3}",
            "{\"confidence\": 0.5}",
            "{\"verdict\": \"progress\", \"confidence\": 7}",
            "{not json}",
            "} {",
        ] {
            let a = parse_answer(bad);
            assert_eq!(a.status, JudgeStatus::Invalid, "{bad}");
            assert!(a.verdict.is_none());
        }
    }
}
