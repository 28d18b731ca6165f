//! Progress: better test results or completion indicators are progress, not a loop.
//! A repeat, cycle or same-error finding whose matched event is older than the latest progress
//! mark is cancelled.

use super::Finding;
use crate::event::Progress;
use crate::signature::TestMetrics;
use crate::state::{MetricsObs, TaskState};

/// Why an event is progress, if it is: improved metrics over the previous observation, or
/// completion indicators on a progress event.
pub fn mark_reason(
    state: &TaskState,
    metrics: Option<&MetricsObs>,
    progress: Option<&Progress>,
) -> Option<String> {
    if let Some(now) = metrics {
        let before = state.metrics.iter().rev().find(|o| o.source == now.source);
        if let Some(before) = before {
            if now.metrics.improved_over(&before.metrics) {
                return Some(describe_improvement(&before.metrics, &now.metrics));
            }
        }
    }
    if let Some(p) = progress {
        if p.has_completion_indicators() {
            let mut parts = Vec::new();
            if let Some(n) = p.files_created.filter(|n| *n > 0) {
                parts.push(format!("{n} file(s) created"));
            }
            if let Some(n) = p.dependencies_added.filter(|n| *n > 0) {
                parts.push(format!("{n} dependenc(ies) added"));
            }
            if let Some(n) = p.lines_changed.filter(|n| *n > 0) {
                parts.push(format!("{n} line(s) changed"));
            }
            return Some(format!(
                "task completion indicators present: {}",
                parts.join(", ")
            ));
        }
    }
    None
}

fn describe_improvement(before: &TestMetrics, now: &TestMetrics) -> String {
    let mut parts = Vec::new();
    if let (Some(a), Some(b)) = (before.failed, now.failed) {
        if b < a {
            parts.push(format!("failing {a} → {b}"));
        }
    }
    if let (Some(a), Some(b)) = (before.passed, now.passed) {
        if b > a {
            parts.push(format!("passing {a} → {b}"));
        }
    }
    if let (Some(a), Some(b)) = (before.coverage, now.coverage) {
        if b > a {
            parts.push(format!("coverage {a}% → {b}%"));
        }
    }
    format!("test metrics show improvement: {}", parts.join(", "))
}

/// The progress that cancels a finding, if there is any after its matched event.
pub fn veto(state: &TaskState, finding: &Finding) -> Option<String> {
    if !finding.vetoable {
        return None;
    }
    let matched = finding.matched?;
    state.progress_since(matched).map(|m| {
        format!(
            "{} (seq {}) since the match at seq {matched}",
            m.reason, m.seq
        )
    })
}

#[cfg(test)]
mod tests {
    use super::{mark_reason, veto};
    use crate::detect::testkit::{bash, Scene};
    use crate::detect::Finding;
    use crate::verdict::LoopKind;

    #[test]
    fn fewer_failing_tests_are_progress_that_vetoes_older_matches() {
        let mut s = Scene::new();
        s.push(bash("pytest", "3 failed, 7 passed"));
        s.push(bash("pytest", "1 failed, 9 passed"));
        let reason = s
            .state
            .progress_marks
            .back()
            .expect("a progress mark")
            .reason
            .clone();
        assert!(reason.contains("failing 3 → 1"), "{reason}");
        let mut f = Finding::new(LoopKind::ExactRepeat, "r".into());
        f.matched = Some(1);
        assert!(
            veto(&s.state, &f).is_some(),
            "progress after the match cancels it"
        );
        f.matched = Some(2);
        assert!(veto(&s.state, &f).is_none(), "no progress after the match");
        f.matched = Some(1);
        f.vetoable = false;
        assert!(veto(&s.state, &f).is_none());
        assert!(mark_reason(&s.state, None, None).is_none());
    }
}
