//! `step_limit`: a workflow step entered more often than its limit (worker 3,
//! judge 3, replan 2, default 5). A step is entered when an event names a step different from the
//! previous event's, or when a transition leads into it.

use super::{Ctx, Finding};
use crate::verdict::LoopKind;

pub fn detect(ctx: &Ctx<'_>) -> Option<Finding> {
    let (step, count) = ctx.step_entered.as_ref()?;
    let limit = ctx.cfg.steps.limit(step);
    if *count <= limit {
        return None;
    }
    let mut f = Finding::new(
        LoopKind::StepLimit,
        format!("step `{step}` entered {count} times, more than its limit of {limit}"),
    );
    f.vetoable = false;
    Some(f)
}
