//! The observe stage: turn an event into what the engine keeps and compares (signatures, keys,
//! prepared texts, test metrics) — [`observe`] is pure and cheap: no model, no state — and do
//! the task's bookkeeping for a new event ([`begin`]: its sequence number, goal, agent).

use super::{Pass, Timings};
use crate::config::Config;
use crate::detect::content::{self, ContentRepeat};
use crate::detect::matching::Part;
use crate::event::{Envelope, Event};
use crate::signature::artifact::{self, Artifact};
use crate::signature::message_words;
use crate::signature::{
    args_text, canonical_json, classify, echo_key, head_tail, is_negative_result,
    is_trivial_result, key64, measured_numbers, normalize, numbers, outcome_in_task, output_text,
    resource_ids, sha256_hex, template_key, AmbientLines, FailureSignature, TestMetrics,
};
use crate::state::{
    Channel, Entry, EntryBody, MetricsObs, ResultSig, TextSig, MAX_NUMBERS, METRICS_FROM_FAILURES,
    METRICS_FROM_PROGRESS,
};
use crate::verdict::SignatureView;

/// Resource ids kept per tool call (the first ones, sorted): a call that names more is
/// compared on these.
pub const MAX_IDS: usize = 64;
/// Characters kept of an exception name or a location taken from a failure.
pub const MAX_KEPT_NAME_CHARS: usize = 256;

/// An event, observed.
pub struct Observation {
    pub entry: Entry,
    /// Test results the event carries, with their source.
    pub metrics: Option<MetricsObs>,
    /// What the verdict shows as the event's signature.
    pub signature: Option<SignatureView>,
    /// A failure (or failed tool result) outside the agent's control.
    pub external: bool,
    /// The artifacts a collaboration message carries, for the task's versions
    /// ([`record_artifacts`]).
    pub artifacts: Vec<Artifact>,
}

/// Start an event's pass: number it, note the task's goal and agent, observe it.
pub(crate) fn begin(
    cfg: &Config,
    state: &mut crate::state::TaskState,
    env: &Envelope,
    ts: i64,
) -> Pass {
    let seq = state.begin_event(ts);
    state.note_goal(env.goal.as_deref());
    let audit = state
        .note_agent(env.agent_id.as_deref())
        .into_iter()
        .collect();
    let Observation {
        mut entry,
        metrics,
        signature,
        external,
        artifacts,
    } = observe(cfg, env, seq, ts, &mut state.ambient);
    record_artifacts(state, &mut entry, &artifacts);
    let content = content_of(cfg, state, env, seq);
    Pass {
        seq,
        ts,
        entry,
        metrics,
        signature,
        external,
        step_entered: None,
        links: Vec::new(),
        change_cosines: Vec::new(),
        content,
        finding: None,
        question: None,
        cleared: None,
        cleared_rule: None,
        judge: None,
        asked_judge: false,
        audit,
        timings: Timings::default(),
    }
}

/// A repetition inside a response, or inside the stream a chunk continues. A whole response
/// ends the stream its task id had open; a stream already reported is not reported again, not
/// even by the whole response that ends it.
fn content_of(
    cfg: &Config,
    state: &mut crate::state::TaskState,
    env: &Envelope,
    seq: u64,
) -> Option<ContentRepeat> {
    let Event::Response(r) = &env.event else {
        return None;
    };
    let on = cfg.detect.enabled.content_loop;
    if !r.chunk {
        let stream = state.streams.remove(&env.task_id);
        if !on || stream.is_some_and(|s| s.flagged) {
            return None;
        }
        return content::find(&r.text, false, &cfg.detect.content);
    }
    if !state.streams.contains_key(&env.task_id) && state.streams.len() >= content::MAX_STREAMS {
        let oldest = state
            .streams
            .iter()
            .min_by_key(|(_, s)| s.last_seq)
            .map(|(id, _)| id.clone());
        if let Some(id) = oldest {
            state.streams.remove(&id);
        }
    }
    let stream = state.streams.entry(env.task_id.clone()).or_default();
    stream.push(&r.text, seq);
    if !on || stream.flagged {
        return None;
    }
    let found = content::find(&stream.text, stream.fence_open, &cfg.detect.content);
    stream.flagged = found.is_some();
    found
}

/// Compare a collaboration message's artifacts with their versions so far.
pub(crate) fn record_artifacts(
    state: &mut crate::state::TaskState,
    entry: &mut Entry,
    found: &[Artifact],
) {
    if let EntryBody::Collaboration { artifacts, .. } = &mut entry.body {
        if !found.is_empty() {
            *artifacts = state.artifacts.record(found, entry.seq);
        }
    }
}

/// A collaboration message as the engine compares it: its prose, the artifacts taken out (a
/// program re-sent with a one-line change reads as the same text from its head and tail), with
/// the identities of the artifacts it names as `ids` (two messages carrying other versions of a
/// file are other messages); and the artifacts themselves. The exact key is the whole message's.
pub fn collaboration_text(request: &str, max_chars: usize) -> (TextSig, Vec<Artifact>) {
    let split = artifact::split(request);
    let mut sig = text_sig(&split.prose, max_chars);
    sig.exact = key64(request);
    let mut ids: Vec<String> = split
        .artifacts
        .iter()
        .filter_map(|a| a.name.as_ref().map(|n| format!("{n}#{:016x}", a.hash)))
        .collect();
    ids.sort();
    ids.truncate(MAX_IDS);
    sig.ids = ids;
    (sig, split.artifacts)
}

/// The answer of a message that is a confirmation prompt answered ("Continue? [Y/n] y", "Add
/// file to the chat? (Y)es/(N)o/(A)ll [Yes]: all", "Proceed (y/n)? y"): one line that asks, offers
/// a choice of slash-separated options, and ends in the option chosen. A person answering a
/// tool's prompt is not asking anything: such a turn is a protocol turn whatever the prompt's
/// length.
pub fn dialog_answer(request: &str) -> Option<&str> {
    let line = request.trim();
    if line.contains('\n') || line.chars().count() > 300 {
        return None;
    }
    let cut = line.rfind([':', ']', ')', '?'])?;
    let (prompt, answer) = (&line[..=cut], line[cut + 1..].trim());
    if answer.is_empty() || !prompt.contains('?') || !prompt.contains('/') {
        return None;
    }
    let plain = |s: &str| -> String {
        s.chars()
            .filter(|c| !matches!(c, '(' | ')' | '[' | ']'))
            .collect::<String>()
            .trim()
            .to_lowercase()
    };
    // The options around the slashes: the last word before the first, whatever is between two,
    // and the first words after the last (up to a default in brackets or the colon).
    let parts: Vec<&str> = prompt.split('/').collect();
    let last = parts.len() - 1;
    let options: Vec<String> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let p = if i == 0 {
                p.rsplit([' ', '?']).next().unwrap_or(p)
            } else {
                *p
            };
            let p = if i == last {
                p.split(['[', ':', '?']).next().unwrap_or(p)
            } else {
                p
            };
            plain(p)
        })
        .collect();
    if options
        .iter()
        .any(|o| o.is_empty() || o.chars().count() > 24)
    {
        return None;
    }
    // The answer is one of the options offered (or its first letters: "y" for "(Y)es").
    let chosen = plain(answer);
    options
        .iter()
        .any(|o| o.starts_with(&chosen) || chosen.starts_with(o.as_str()))
        .then_some(answer)
}

/// Exact key, normalised key, prepared text and numbers of one text: how the engine compares it.
pub fn text_sig(exact_text: &str, max_chars: usize) -> TextSig {
    let normalized = normalize(exact_text);
    sig_of(exact_text, &normalized, numbers(&normalized), max_chars)
}

fn sig_of(exact_text: &str, normalized: &str, mut nums: Vec<String>, max_chars: usize) -> TextSig {
    nums.truncate(MAX_NUMBERS);
    TextSig {
        exact: key64(exact_text),
        norm: key64(normalized),
        text: head_tail(normalized, max_chars),
        numbers: nums,
        ids: Vec::new(),
        template: 0,
        vector: None,
    }
}

/// A text as the engine compares it on `channel`: a tool call also carries the resources it
/// names (file names, long hex ids, UUIDs), which must agree for two calls to be the same; a
/// failure, its template (one log line with other variables is the same failure).
/// Calibration prepares labelled pairs with this too, so it measures the engine's own rule.
pub fn compared_text(channel: Channel, part: Part, text: &str, max_chars: usize) -> TextSig {
    if channel == Channel::Failure && part == Part::Main {
        // Only the numbers that measure something guard a failure: the same failure on another
        // host, process or block is the same failure.
        let normalized = normalize(text);
        let mut sig = sig_of(text, &normalized, measured_numbers(&normalized), max_chars);
        sig.template = template_key(text);
        return sig;
    }
    if channel == Channel::Collaboration {
        return collaboration_text(text, max_chars).0;
    }
    let mut sig = text_sig(text, max_chars);
    if channel == Channel::ToolCall && part == Part::Main {
        sig.ids = resource_ids(text);
        sig.ids.truncate(MAX_IDS);
    }
    sig
}

/// An output's numbered lines ([`crate::signature::NumberedLines`]), each noted as a possible
/// counter of the task's environment.
fn counted_lines(
    out: &str,
    ambient: &mut AmbientLines,
) -> Option<Box<crate::signature::NumberedLines>> {
    let numbered = crate::signature::NumberedLines::of(out);
    for (template, line, skel) in numbered.counter_candidates(out) {
        ambient.note_counter(template, line, skel);
    }
    (!numbered.is_empty()).then(|| Box::new(numbered))
}

/// The string values of a call's arguments (at any depth), longest first: what an output may
/// print back of the call. Short values are left out: a word like `src` is not an echo.
fn arg_values(args: &serde_json::Value) -> Vec<&str> {
    fn walk<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a str>) {
        match v {
            serde_json::Value::String(s) if s.trim().chars().count() >= 8 => out.push(s.trim()),
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            serde_json::Value::Object(m) => m.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(args, &mut out);
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out
}

/// Observe one event at `seq`, `ts` (unix seconds).
/// `ambient`: the task's error lines printed whatever the call does, which a tool call's outcome
/// leaves out (and learns from its output).
pub fn observe(
    cfg: &Config,
    env: &Envelope,
    seq: u64,
    ts: i64,
    ambient: &mut AmbientLines,
) -> Observation {
    let max = cfg.model.max_text_chars;
    let external_types = &cfg.detect.external.types;
    let mut metrics = None;
    let mut signature = None;
    let mut external = false;
    let mut artifacts = Vec::new();
    let body = match &env.event {
        Event::Failure(f) => {
            let s = FailureSignature::of(f);
            external = external_types.contains(&s.error_type);
            let m = TestMetrics::extract(&f.message);
            metrics = (!m.is_empty()).then_some((METRICS_FROM_FAILURES, m));
            signature = Some(SignatureView {
                error_type: Some(s.error_type),
                location: s.location.clone(),
                normalized: s.normalized.clone(),
                hash: s.hash.clone(),
            });
            EntryBody::Failure {
                sig: compared_text(Channel::Failure, Part::Main, &f.message, max),
                error_type: s.error_type,
                external,
                // Both can be taken from a long message; the task state keeps them bounded.
                exception: s.exception.map(|e| head_tail(&e, MAX_KEPT_NAME_CHARS)),
                location: s.location.map(|l| head_tail(&l, MAX_KEPT_NAME_CHARS)),
                context_hash: s.context_hash,
                signature_hash: s.hash,
            }
        }
        Event::ToolCall(c) => {
            let canonical = format!("{}\u{1f}{}", c.tool, canonical_json(&c.args));
            let readable = args_text(&c.tool, &c.args);
            let mut call = compared_text(Channel::ToolCall, Part::Main, &readable, max);
            // Identity of a call is the tool plus canonical args (sorted keys), not its rendering.
            call.exact = key64(&canonical);
            signature = Some(SignatureView {
                error_type: None,
                location: None,
                normalized: call.text.clone(),
                hash: sha256_hex(&canonical),
            });
            let result = c.result.as_ref().map(|r| {
                let out = output_text(&r.output);
                let sig = text_sig(&out, max);
                let failed = r.failed();
                let ext = failed && external_types.contains(&classify(&out, None));
                external |= ext;
                let m = TestMetrics::extract(&out);
                if !m.is_empty() {
                    metrics = Some((key64(&canonical), m));
                }
                let trivial = is_trivial_result(&sig.text);
                let negative = failed || is_negative_result(&out);
                ResultSig {
                    residue: (negative && !failed && !trivial)
                        .then(|| crate::signature::residue(&c.args, &out)),
                    outcome: outcome_in_task(
                        &out,
                        call.exact,
                        failed,
                        &arg_values(&c.args),
                        ambient,
                    )
                    .map(Box::new),
                    echo: echo_key(&c.args, &out),
                    shape: crate::signature::LineShape::of(&out),
                    numbered: counted_lines(&out, ambient),
                    negative,
                    trivial,
                    failed,
                    external: ext,
                    sig,
                }
            });
            EntryBody::ToolCall {
                tool: c.tool.clone(),
                passive: cfg.detect.passive_tools.iter().any(|t| t == &c.tool),
                call,
                result,
            }
        }
        Event::Response(r) if r.chunk => EntryBody::ResponseChunk {
            chars: r.text.chars().count(),
        },
        Event::Response(r) => {
            let trimmed = r.text.trim();
            let sha = sha256_hex(trimmed);
            let sig = text_sig(trimmed, max);
            signature = Some(SignatureView {
                error_type: None,
                location: None,
                normalized: sig.text.clone(),
                hash: sha.clone(),
            });
            EntryBody::Response { sha256: sha, sig }
        }
        Event::Collaboration(c) => {
            let (sig, found) = collaboration_text(&c.request, max);
            signature = Some(SignatureView {
                error_type: None,
                location: None,
                normalized: sig.text.clone(),
                hash: sha256_hex(&normalize(&c.request)),
            });
            let short = cfg.detect.collaboration.protocol_words;
            let protocol = found.is_empty()
                && (message_words(&sig.text) <= short
                    || dialog_answer(&c.request).is_some_and(|a| message_words(a) <= short));
            artifacts = found;
            EntryBody::Collaboration {
                from_agent: c.from_agent.clone(),
                to_agent: c.to_agent.clone(),
                to_group: c.to_group,
                sig,
                artifacts: Vec::new(),
                protocol,
            }
        }
        Event::Transition(t) => EntryBody::Transition {
            from: t.from.clone(),
            to: t.to.clone(),
        },
        Event::Progress(p) => {
            let m = TestMetrics::from_progress(p);
            metrics = (!m.is_empty()).then_some((METRICS_FROM_PROGRESS, m));
            EntryBody::Progress {
                metrics: m,
                completion: p.has_completion_indicators(),
            }
        }
        Event::Outcome(o) => EntryBody::Outcome {
            result: o.result.as_str().to_string(),
        },
    };
    Observation {
        entry: Entry {
            seq,
            ts,
            agent_id: env.agent_id.clone(),
            body,
            same_as: Vec::new(),
            novel: false,
            courtesy: false,
            closest_earlier: None,
        },
        metrics: metrics.map(|(source, metrics)| MetricsObs {
            seq,
            source,
            metrics,
        }),
        signature,
        external,
        artifacts,
    }
}

#[cfg(test)]
mod dialog_tests {
    use super::dialog_answer;

    #[test]
    fn a_confirmation_prompt_answered_is_recognised() {
        for (text, answer) in [
            (
                "Add file to the chat? (Y)es/(N)o/(A)ll/(S)kip all/(D)on't ask again [Yes]: all",
                "all",
            ),
            (
                "Run shell command? (Y)es/(N)o/(S)kip all/(D)on't ask again [Yes]: skip",
                "skip",
            ),
            ("Continue? [Y/n] y", "y"),
            ("Proceed (y/n)? yes", "yes"),
            ("Overwrite existing file? yes/no [no]: no", "no"),
        ] {
            assert_eq!(dialog_answer(text), Some(answer), "{text}");
        }
    }

    #[test]
    fn a_question_with_a_slash_is_not_a_prompt_answered() {
        for text in [
            "Should I use tcp/udp? Please decide",
            "Can you fix the and/or logic in utils.py? It breaks",
            "Why does /usr/bin/python fail? see log",
            "Continue? [Y/n]\ny",
            "yes",
        ] {
            assert_eq!(dialog_answer(text), None, "{text}");
        }
    }
}
