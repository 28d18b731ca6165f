//! `budget` (max iterations): the hard cap on events per root task. Nothing resets it;
//! every event beyond it is a `budget` verdict.

use super::{Ctx, Finding};
use crate::verdict::LoopKind;

pub fn detect(ctx: &Ctx<'_>) -> Option<Finding> {
    let max = ctx.cfg.budget.max_events;
    if max == 0 || ctx.events_total <= max {
        return None;
    }
    let mut f = Finding::new(
        LoopKind::Budget,
        format!(
            "event {} of a task whose budget is {max} events",
            ctx.events_total
        ),
    );
    f.vetoable = false;
    Some(f)
}
