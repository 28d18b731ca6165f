//! The detect stage: the event's own progress is marked first (better test results, completion
//! indicators), so that it counts for the veto; then the rule table ([`crate::detect::rules`])
//! runs: the first loop rule that fires is the finding, and when none does, the first question
//! is kept for the judge stage.

use super::Pass;
use crate::config::Config;
use crate::detect::rules::Hit;
use crate::event::{Envelope, Event};
use crate::state::{EntryBody, TaskState};

pub(super) fn detect(cfg: &Config, state: &mut TaskState, env: &Envelope, pass: &mut Pass) {
    pass.timed_detect(|pass| {
        let transition_to = match &pass.entry.body {
            EntryBody::Transition { to, .. } => Some(to.as_str()),
            _ => None,
        };
        pass.step_entered = state.enter_step(env.step.as_deref(), transition_to);
        let progress = match &env.event {
            Event::Progress(p) => Some(p),
            _ => None,
        };
        if let Some(reason) =
            crate::detect::progress::mark_reason(state, pass.metrics.as_ref(), progress)
        {
            state.add_progress(pass.seq, reason);
        }
        match crate::detect::rules::run(&pass.ctx(cfg, state)) {
            Some(Hit::Loop(f)) => pass.finding = Some(f),
            Some(Hit::Ask(q)) => pass.question = Some(q),
            None => {}
        }
    });
}
