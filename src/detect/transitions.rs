//! `transition_cycle`: the same sequence of step transitions repeated
//! `detect.transitions.repetitions` times (plan→implement→review→plan→implement→review).
//! Counted once per period.

use super::{Ctx, Finding};
use crate::state::EntryBody;
use crate::verdict::LoopKind;

pub fn detect(ctx: &Ctx<'_>) -> Option<Finding> {
    let EntryBody::Transition { from, to } = &ctx.entry.body else {
        return None;
    };
    let cfg = &ctx.cfg.transitions;
    let mut seq: Vec<(&str, &str)> = ctx
        .state
        .transitions
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    seq.push((from.as_str(), to.as_str()));
    let n = seq.len();
    for p in 1..=cfg.max_period {
        let span = p * cfg.repetitions;
        if n < span {
            break;
        }
        if !(0..p * (cfg.repetitions - 1)).all(|i| seq[n - 1 - i] == seq[n - 1 - i - p]) {
            continue;
        }
        let pattern: Vec<String> = seq[n - p..]
            .iter()
            .map(|(a, b)| format!("{a}→{b}"))
            .collect();
        let counts = match ctx.state.transition_cycle.filter(|r| r.period == p) {
            Some(run) => run.since_counted + 1 >= p,
            None => true,
        };
        let mut f = Finding::new(
            LoopKind::TransitionCycle,
            format!(
                "transition pattern [{}] repeated {} times",
                pattern.join(", "),
                cfg.repetitions
            ),
        );
        f.counts = counts;
        f.period = Some(p);
        f.vetoable = false;
        return Some(f);
    }
    None
}
