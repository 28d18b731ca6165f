//! The detect stage: the event's own progress is marked first (better test results, completion
//! indicators), so that it counts for the veto; then the detectors of [`crate::detect`] run in
//! their priority order and the first finding wins.

use super::Pass;
use crate::config::Config;
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
        pass.finding = crate::detect::run(&pass.ctx(cfg, state));
    });
}
