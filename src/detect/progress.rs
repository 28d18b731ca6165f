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
