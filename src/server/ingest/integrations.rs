//! What the coding-agent hooks (`hooks`) and the OTLP receiver (`otlp`) share: events that
//! loopguard builds itself from another program's payload are fitted to the service's limits
//! instead of being refused, evaluated like any other event, and counted.
//!
//! A tool's output or a file an agent wrote can be far longer than `server.max_text_chars`; the
//! agent did nothing wrong by sending it, and the engine compares only the head and tail of a
//! long text anyway (`model.max_text_chars`), so the text is cut to the limit, head and tail kept.

use crate::server::http::error::ApiError;
use crate::server::http::limits::{Class, Limits};
use crate::server::http::time::clamp_to_now;
use crate::server::AppState;
use loopguard::event::{Envelope, Event};
use loopguard::signature::head_tail;
use loopguard::verdict::Verdict;
use serde_json::Value;

/// `text`, at most `max` characters: the head and the tail of a longer one.
pub fn fit_text(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    // head_tail joins the two ends with " … " (3 characters).
    head_tail(text, max.saturating_sub(3))
}

/// Any JSON, at most `max` characters as JSON text; a longer value becomes its JSON text, cut.
pub fn fit_json(value: Value, max: usize) -> Value {
    match value {
        Value::String(s) => Value::String(fit_text(&s, max)),
        other => {
            let text = other.to_string();
            if text.chars().count() <= max {
                other
            } else {
                Value::String(fit_text(&text, max))
            }
        }
    }
}

/// The envelope with every field within the limits `/v1/evaluate` enforces.
pub fn fit(mut env: Envelope, limits: &Limits) -> Envelope {
    let name = limits.max(Class::Name);
    let text = limits.max(Class::Text);
    let short = |s: &mut String| *s = fit_text(s, name);
    let long = |s: &mut String| *s = fit_text(s, text);
    if let Some(a) = env.agent_id.as_mut() {
        short(a);
    }
    match &mut env.event {
        Event::ToolCall(c) => {
            short(&mut c.tool);
            c.args = fit_json(std::mem::take(&mut c.args), text);
            if let Some(r) = c.result.as_mut() {
                r.output = fit_json(std::mem::take(&mut r.output), text);
            }
        }
        Event::Failure(f) => {
            long(&mut f.message);
            if let Some(t) = f.error_type.as_mut() {
                short(t);
            }
            if let Some(l) = f.location.as_mut() {
                short(l);
            }
        }
        Event::Response(r) => long(&mut r.text),
        Event::Collaboration(c) => {
            short(&mut c.from_agent);
            short(&mut c.to_agent);
            long(&mut c.request);
        }
        // Hooks and spans make only the kinds above.
        Event::Transition(_) | Event::Progress(_) | Event::Outcome(_) => {}
    }
    env
}

/// Evaluate an event loopguard built itself: fitted to the limits, counted in the metrics.
pub async fn evaluate(state: &AppState, env: Envelope) -> Result<Verdict, ApiError> {
    let s = &state.cfg.server;
    let mut env = fit(env, &Limits::of(s));
    // As for /v1/evaluate: the client's time is only recorded, kept near the server's.
    env.ts = env.ts.map(|t| clamp_to_now(t, s.max_clock_skew_secs));
    let eval = state.engine.evaluate_timed(env).await?;
    state.metrics.evaluation(&eval);
    Ok(eval.verdict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn long_texts_and_json_are_cut_to_the_limit_head_and_tail_kept() {
        let t = format!("{}{}", "a".repeat(100), "END");
        let cut = fit_text(&t, 20);
        assert_eq!(cut.chars().count(), 20);
        assert!(cut.starts_with("aaaa") && cut.ends_with("END"), "{cut}");
        assert_eq!(fit_text("short", 20), "short");

        let small = json!({"command": "ls"});
        assert_eq!(fit_json(small.clone(), 100), small);
        let big = json!({"content": "x".repeat(200)});
        let cut = fit_json(big, 50);
        assert!(cut.is_string() && cut.as_str().unwrap().chars().count() == 50);
    }
}
