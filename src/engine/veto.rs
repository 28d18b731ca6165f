//! The veto stage: a repeat, cycle or same-error finding whose matched event is older than the
//! latest sign of progress is not a loop (a test re-run after a fix that made tests pass is
//! progress); the verdict says why.

use super::Pass;
use crate::state::TaskState;

pub(super) fn veto(state: &TaskState, pass: &mut Pass) {
    let Some(finding) = &pass.finding else {
        return;
    };
    if let Some(why) = crate::detect::progress::veto(state, finding) {
        pass.cleared = Some(format!("not a loop: {why}"));
        pass.cleared_rule = Some(finding.rule).filter(|r| !r.is_empty());
        pass.finding = None;
    }
}
