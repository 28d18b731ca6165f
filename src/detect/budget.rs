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

#[cfg(test)]
mod tests {
    use super::detect;
    use crate::detect::testkit::{bash, Scene};

    #[test]
    fn fires_past_the_budget_and_cannot_be_vetoed() {
        let mut s = Scene::with(|c| c.detect.budget.max_events = 2);
        assert!(s.detect(detect, bash("a", "1")).is_none());
        assert!(s.detect(detect, bash("b", "2")).is_none());
        let f = s.detect(detect, bash("c", "3")).expect("event 3 of 2");
        assert!(!f.vetoable);
        let mut s = Scene::with(|c| c.detect.budget.max_events = 0);
        for i in 0..5 {
            assert!(
                s.detect(detect, bash(&format!("cmd{i}"), "x")).is_none(),
                "0 means no budget"
            );
        }
    }
}
