//! Feedback on verdicts: users mark a false positive (a loop verdict that was not one) or a
//! missed loop, with the events that led to it, for calibration ([`crate::feedback`]).

use super::{now_unix, Engine, EngineError};
use crate::feedback::{FeedbackLabel, FeedbackRecord};
use crate::signature::head_tail;
use crate::state::{Entry, EntryBody};

impl Engine {
    /// Record feedback on the verdict of event `seq` of `task_id`: a false positive (it said
    /// loop) or a missed loop (it did not). Only the task's recent verdicts can be marked.
    pub async fn feedback(
        &self,
        task_id: &str,
        seq: u64,
        label: FeedbackLabel,
        note: Option<String>,
        matched_seq: Option<u64>,
    ) -> Result<FeedbackRecord, EngineError> {
        let root = self.root_of(task_id).await?;
        let Some(state) = self.snapshot(task_id).await? else {
            return Err(EngineError::NotFound(task_id.to_string()));
        };
        let Some(v) = state.recent_verdicts.iter().find(|v| v.seq == seq) else {
            return Err(EngineError::NotFound(format!(
                "{task_id} seq {seq} (only the last {} verdicts of a task can be marked)",
                crate::state::RECENT_VERDICTS
            )));
        };
        match (label, v.is_loop) {
            (FeedbackLabel::FalsePositive, false) => {
                return Err(EngineError::Rejected(format!(
                    "seq {seq} was not reported as a loop; a false positive needs a loop verdict"
                )))
            }
            (FeedbackLabel::MissedLoop, true) => {
                return Err(EngineError::Rejected(format!(
                    "seq {seq} was already reported as a loop ({})",
                    v.kind
                )))
            }
            _ => {}
        }
        // For a missed loop, the earlier event it repeats: as given, else the latest earlier
        // event of the same type still in the window.
        let same_type = |e: &&Entry| bare_event(e)["type"] == v.event_type.as_str();
        let matched = match (v.matched_seq, matched_seq) {
            (Some(s), _) => Some((s, v.matched_text.clone().unwrap_or_default())),
            (None, Some(s)) => state
                .entry(s)
                .map(|e| (s, head_tail(&e.body.display_text(), 500))),
            (None, None) => state
                .window
                .iter()
                .rev()
                .filter(|e| e.seq < seq)
                .find(same_type)
                .map(|e| (e.seq, head_tail(&e.body.display_text(), 500))),
        };
        let record = FeedbackRecord {
            id: 0,
            ts: now_unix(),
            task_id: task_id.to_string(),
            root_task_id: root,
            seq,
            label,
            note,
            kind: v.kind,
            event_type: v.event_type.clone(),
            text: v.text.clone(),
            matched_seq: matched.as_ref().map(|m| m.0),
            matched_text: matched.map(|m| m.1),
            events: state
                .window
                .iter()
                .filter(|e| e.seq <= seq)
                .map(bare_event)
                .collect(),
        };
        let record = self.feedback.add(record).await?;
        self.feedback.flush().await?;
        tracing::info!(
            event = "feedback",
            task_id = %task_id,
            seq,
            label = label.as_str(),
            kind = record.kind.as_str()
        );
        Ok(record)
    }
}

/// A window entry as a bare event of the input contract, for labelled runs. Lossy: the engine
/// keeps normalised texts, and a tool call's arguments come back as one `call` string.
pub fn bare_event(e: &Entry) -> serde_json::Value {
    use serde_json::json;
    match &e.body {
        EntryBody::Failure { sig, .. } => json!({"type": "failure", "message": sig.text}),
        EntryBody::ToolCall {
            tool, call, result, ..
        } => {
            let args = call
                .text
                .split_once('\n')
                .map(|(_, rest)| rest)
                .unwrap_or("");
            let mut v = json!({"type": "tool_call", "tool": tool, "args": {"call": args}});
            if let Some(r) = result {
                v["result"] = json!({"output": r.sig.text, "is_error": r.failed});
            }
            v
        }
        EntryBody::Response { sig, .. } => json!({"type": "response", "text": sig.text}),
        EntryBody::Collaboration {
            from_agent,
            to_agent,
            to_group,
            sig,
            ..
        } => {
            let mut e = json!({"type": "collaboration", "from_agent": from_agent, "to_agent": to_agent, "request": sig.text});
            if *to_group {
                e["to_group"] = json!(true);
            }
            e
        }
        EntryBody::Transition { from, to } => json!({"type": "transition", "from": from, "to": to}),
        EntryBody::Progress { metrics, .. } => json!({
            "type": "progress",
            "tests_passed": metrics.passed,
            "tests_failed": metrics.failed,
            "coverage": metrics.coverage,
        }),
        EntryBody::Outcome { result } => json!({"type": "outcome", "result": result}),
        EntryBody::ResponseChunk { chars } => {
            json!({"type": "response", "chunk": true, "chars": chars})
        }
    }
}
