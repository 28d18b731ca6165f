//! `regression` (progressive degradation): test results worse on each of the last
//! `detect.regression.attempts` observations — more failing, fewer passing or lower coverage —
//! count as a loop even when the errors differ. Observations come from progress events and from
//! test summaries in failure messages and tool outputs.

use super::{Ctx, Finding};
use crate::verdict::LoopKind;

pub fn detect(ctx: &Ctx<'_>) -> Option<Finding> {
    let obs = ctx.metrics.as_ref()?;
    let now = &obs.metrics;
    let need = ctx.cfg.regression.attempts;
    let history: Vec<_> = ctx
        .state
        .metrics
        .iter()
        .rev()
        .filter(|o| o.source == obs.source)
        .take(need - 1)
        .collect();
    if history.len() < need - 1 {
        return None;
    }
    // Newest first: now, h[0], h[1], ...; each must be worse than the one before it in time.
    let mut later = now;
    for earlier in &history {
        if !later.worse_than(&earlier.metrics) {
            return None;
        }
        later = &earlier.metrics;
    }
    let first = history.last().map(|o| o.seq).unwrap_or(ctx.entry.seq);
    let describe = |m: &crate::signature::TestMetrics| {
        let mut parts = Vec::new();
        if let Some(f) = m.failed {
            parts.push(format!("{f} failing"));
        }
        if let Some(p) = m.passed {
            parts.push(format!("{p} passing"));
        }
        if let Some(c) = m.coverage {
            parts.push(format!("coverage {c}%"));
        }
        parts.join(", ")
    };
    let trail: Vec<String> = history
        .iter()
        .rev()
        .map(|o| describe(&o.metrics))
        .chain(std::iter::once(describe(now)))
        .collect();
    let mut f = Finding::new(
        LoopKind::Regression,
        format!(
            "test results got worse {} times in a row since seq {first}: {}; moving away from the goal",
            need - 1,
            trail.join(" → ")
        ),
    );
    f.matched = history.first().map(|o| o.seq);
    f.vetoable = false;
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::detect;
    use crate::detect::testkit::{bash, Scene};
    use crate::verdict::LoopKind;

    #[test]
    fn results_worse_each_time_from_one_source_are_a_regression() {
        let mut s = Scene::new();
        let n = s.cfg.detect.regression.attempts;
        let mut last = None;
        for failing in 1..=n {
            last = s.detect(
                detect,
                bash("pytest", &format!("{failing} failed, 10 passed")),
            );
        }
        assert_eq!(last.expect("worse each time").kind, LoopKind::Regression);
    }

    #[test]
    fn another_source_is_not_compared() {
        let mut s = Scene::new();
        let n = s.cfg.detect.regression.attempts;
        for failing in 1..=n {
            let cmd = format!("pytest tests/test_{failing}.py");
            assert!(s
                .detect(detect, bash(&cmd, &format!("{failing} failed")))
                .is_none());
        }
    }
}
