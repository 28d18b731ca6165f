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

#[cfg(test)]
mod tests {
    use super::detect;
    use crate::detect::testkit::Scene;
    use crate::verdict::LoopKind;
    use serde_json::json;

    #[test]
    fn a_step_entered_past_its_limit_fires() {
        let mut s = Scene::new();
        let limit = s.cfg.detect.steps.limit("replan");
        let enter = |s: &mut Scene, step: &str| {
            s.detect(
                detect,
                json!({"step": step, "event": {"type": "response", "text": step}}),
            )
        };
        let mut found = None;
        for _ in 0..=limit {
            assert!(found.is_none());
            found = enter(&mut s, "replan");
            // Leaving the step and coming back is a new entry.
            assert!(enter(&mut s, "worker").is_none());
        }
        assert_eq!(found.expect("past the limit").kind, LoopKind::StepLimit);
    }
}
