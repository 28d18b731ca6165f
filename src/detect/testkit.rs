//! A test scene for detector unit tests: events observed and linked the way the engine does it,
//! with the lexical stub embedder (fast, deterministic) instead of the model, so each detector
//! can be tested as a pure function of its context. Behaviour that depends on real similarity is
//! tested with the real model in `tests/`.

use super::{matching, Ctx, Finding, Link};

/// A detector under test: a pure function of the context.
pub(crate) type Detector = fn(&Ctx<'_>) -> Option<Finding>;
use crate::config::Config;
use crate::embed::{StubBackend, Vector};
use crate::engine::observe::observe;
use crate::event::{parse_envelope_value, Event};
use crate::state::{Entry, EntryBody, MetricsObs, TaskState};
use serde_json::{json, Value};
use std::sync::Arc;

pub(crate) struct Scene {
    pub cfg: Config,
    pub state: TaskState,
}

/// A new event, observed and linked, not yet added to the window.
pub(crate) struct Probe {
    pub entry: Entry,
    pub links: Vec<Link>,
    pub change_cosines: Vec<(u64, u64, f32)>,
    pub metrics: Option<MetricsObs>,
    pub step_entered: Option<(String, u32)>,
}

fn stub(text: &str) -> Vector {
    Arc::from(StubBackend::vector(text))
}

impl Scene {
    pub fn new() -> Scene {
        Scene::with(|_| {})
    }

    pub fn with(change: impl FnOnce(&mut Config)) -> Scene {
        let mut cfg = Config::default();
        change(&mut cfg);
        Scene {
            cfg,
            state: TaskState::new("t", 0),
        }
    }

    /// Observe `event` (a bare event, or an envelope when it has `event`) and link it to the
    /// window: every text gets its stub vector, as if the model had embedded it.
    pub fn probe(&mut self, event: Value) -> Probe {
        let env = if event.get("event").is_some() {
            let mut v = event;
            v["task_id"] = json!("t");
            v
        } else {
            json!({"task_id": "t", "event": event})
        };
        let env = parse_envelope_value(env).expect("a valid test event");
        let seq = self.state.begin_event(0);
        let obs = observe(&self.cfg, &env, seq, 0, &mut self.state.ambient);
        let mut entry = obs.entry;
        crate::engine::observe::record_artifacts(&mut self.state, &mut entry, &obs.artifacts);
        embed(&mut entry);
        let slots: Vec<(u64, f32)> =
            matching::slots_to_compare(&self.cfg.detect, &self.state, &entry)
                .into_iter()
                .map(|(seq, a, b)| (seq, crate::embed::cosine(&stub(&a), &stub(&b))))
                .collect();
        if let Some(text) =
            super::rules::wants(&self.cfg.detect, super::rules::Input::CourtesyTurns)
                .then(|| {
                    super::collaboration::courtesy_candidate(&self.cfg.detect, &self.state, &entry)
                })
                .flatten()
        {
            let v = stub(text);
            let best = crate::engine::link::courtesy_texts(self.cfg.model.max_text_chars)
                .iter()
                .map(|c| crate::embed::cosine(&v, &stub(c)))
                .fold(f32::NEG_INFINITY, f32::max);
            entry.courtesy = best >= self.cfg.detect.collaboration.courtesy_similarity;
        }
        let mut links = matching::links(&self.cfg.detect, &self.state, &entry);
        matching::compare_slots(&self.cfg.detect, entry.body.channel(), &mut links, &slots);
        matching::settle_identity(&mut entry, &links);
        let transition_to = match &entry.body {
            EntryBody::Transition { to, .. } => Some(to.clone()),
            _ => None,
        };
        let step_entered = self
            .state
            .enter_step(env.step.as_deref(), transition_to.as_deref());
        let progress = match &env.event {
            Event::Progress(p) => Some(p.clone()),
            _ => None,
        };
        if let Some(reason) =
            super::progress::mark_reason(&self.state, obs.metrics.as_ref(), progress.as_ref())
        {
            self.state.add_progress(seq, reason);
        }
        let change_cosines =
            if super::rules::wants(&self.cfg.detect, super::rules::Input::ChangeCosines) {
                super::dead_end::changes_to_compare(&self.cfg.detect.dead_ends, &self.state, &entry)
                    .into_iter()
                    .map(|(a, b, ta, tb)| (a, b, crate::embed::cosine(&stub(&ta), &stub(&tb))))
                    .collect()
            } else {
                Vec::new()
            };
        Probe {
            entry,
            links,
            change_cosines,
            metrics: obs.metrics,
            step_entered,
        }
    }

    pub fn ctx<'a>(&'a self, p: &'a Probe) -> Ctx<'a> {
        Ctx {
            cfg: &self.cfg.detect,
            judge: &self.cfg.judge,
            external: false,
            state: &self.state,
            entry: &p.entry,
            links: &p.links,
            metrics: p.metrics,
            step_entered: p.step_entered.clone(),
            events_total: self.state.events_total,
            change_cosines: &p.change_cosines,
            content: None,
            past: super::past_work(&self.state),
        }
    }

    /// Run one detector on a new event, then add the event to the window (with the engine's
    /// bookkeeping for what the whole pipeline found), and return the detector's finding.
    pub fn detect(&mut self, detector: Detector, event: Value) -> Option<Finding> {
        let p = self.probe(event);
        let mine = detector(&self.ctx(&p));
        let all = self.loop_found(&p);
        self.commit(p, all.as_ref());
        mine
    }

    /// Add an event as the engine would, whatever the detectors say.
    pub fn push(&mut self, event: Value) {
        let p = self.probe(event);
        let all = self.loop_found(&p);
        self.commit(p, all.as_ref());
    }

    /// The loop the whole rule table finds for a probe, if any.
    fn loop_found(&self, p: &Probe) -> Option<Finding> {
        match super::rules::run(&self.ctx(p)) {
            Some(super::rules::Hit::Loop(f)) => Some(f),
            _ => None,
        }
    }

    fn commit(&mut self, p: Probe, finding: Option<&Finding>) {
        let kept =
            self.cfg.detect.transitions.max_period * self.cfg.detect.transitions.repetitions + 1;
        self.state.record_detection(
            &p.entry,
            finding.map(|f| (f.kind, f.period, f.counts)),
            p.metrics,
            kept,
        );
        let window = self.cfg.detect.window;
        self.state.push_entry(p.entry, window);
    }
}

fn embed(entry: &mut Entry) {
    match &mut entry.body {
        EntryBody::Failure { sig, .. }
        | EntryBody::Response { sig, .. }
        | EntryBody::Collaboration { sig, .. } => sig.vector = Some(stub(&sig.text)),
        EntryBody::ToolCall { call, result, .. } => {
            call.vector = Some(stub(&call.text));
            if let Some(r) = result {
                r.sig.vector = Some(stub(&r.sig.text));
            }
        }
        _ => {}
    }
}

/// A bash tool call with its output.
pub(crate) fn bash(command: &str, output: &str) -> Value {
    json!({"type": "tool_call", "tool": "bash", "args": {"command": command},
           "result": {"output": output, "is_error": false}})
}

/// A bash tool call that failed with `output`.
pub(crate) fn bash_err(command: &str, output: &str) -> Value {
    json!({"type": "tool_call", "tool": "bash", "args": {"command": command},
           "result": {"output": output, "is_error": true}})
}

pub(crate) fn failure(message: &str) -> Value {
    json!({"type": "failure", "message": message})
}

pub(crate) fn response(text: &str) -> Value {
    json!({"type": "response", "text": text})
}
