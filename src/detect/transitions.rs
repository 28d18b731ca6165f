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

#[cfg(test)]
mod tests {
    use super::detect;
    use crate::detect::testkit::Scene;
    use crate::verdict::LoopKind;
    use serde_json::json;

    fn go(from: &str, to: &str) -> serde_json::Value {
        json!({"type": "transition", "from": from, "to": to})
    }

    #[test]
    fn a_transition_pattern_repeated_fires_once_per_period() {
        let mut s = Scene::new();
        let pattern = [
            ("plan", "implement"),
            ("implement", "review"),
            ("review", "plan"),
        ];
        let mut found = Vec::new();
        for _ in 0..3 {
            for (a, b) in pattern {
                found.push(s.detect(detect, go(a, b)));
            }
        }
        let hits: Vec<_> = found.iter().flatten().collect();
        assert!(!hits.is_empty());
        assert!(hits
            .iter()
            .all(|f| f.kind == LoopKind::TransitionCycle && f.period == Some(3)));
        assert_eq!(
            hits.iter().filter(|f| f.counts).count(),
            hits.len().div_ceil(3)
        );
    }
}
