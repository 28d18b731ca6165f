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
