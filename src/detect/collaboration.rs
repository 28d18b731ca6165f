//! `collaboration_loop`: agent A asks agent B for the same thing again, reworded or
//! not (cosine above the collaboration threshold; the design default was 0.85).

use super::repeat::{how, strongest};
use super::{Ctx, Finding, Link};
use crate::state::{Channel, EntryBody};
use crate::verdict::LoopKind;

pub fn detect(ctx: &Ctx<'_>) -> Option<Finding> {
    if ctx.entry.body.channel() != Channel::Collaboration {
        return None;
    }
    let EntryBody::Collaboration {
        from_agent,
        to_agent,
        ..
    } = &ctx.entry.body
    else {
        return None;
    };
    let matches: Vec<&Link> = ctx.same_links().collect();
    if matches.len() < ctx.cfg.repeats.collaboration {
        return None;
    }
    let best = strongest(matches.iter().copied())?;
    let mut f = Finding::new(
        LoopKind::CollaborationLoop,
        format!(
            "{from_agent} asked {to_agent} the same thing as at seq {}, {}; {} earlier request(s) alike",
            best.seq,
            how(best, ctx.cfg.similarity.collaboration),
            matches.len()
        ),
    );
    f.matched = Some(best.seq);
    f.similarity = best.similarity();
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::detect;
    use crate::detect::testkit::Scene;
    use crate::verdict::LoopKind;
    use serde_json::json;

    fn ask(from: &str, to: &str, request: &str) -> serde_json::Value {
        json!({"type": "collaboration", "from_agent": from, "to_agent": to, "request": request})
    }

    #[test]
    fn the_same_request_to_the_same_agent_is_a_loop_but_not_to_another() {
        let mut s = Scene::new();
        assert!(s
            .detect(detect, ask("dev", "qa", "Please review the login page"))
            .is_none());
        assert!(s
            .detect(detect, ask("dev", "ops", "Please review the login page"))
            .is_none());
        let f = s
            .detect(detect, ask("dev", "qa", "Please review the login page"))
            .expect("asked qa again");
        assert_eq!(f.kind, LoopKind::CollaborationLoop);
        assert_eq!(f.matched, Some(1));
    }
}
