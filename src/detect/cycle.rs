//! `cycle` (the second level of escalating loop checks): the last `p` work events repeat the `p` before them,
//! `detect.cycles.repetitions` times, for a period `p` in `min_period..=max_period` — over exact
//! *or* semantic identities, so A→B→A→B reworded is still a cycle. Work events are tool calls,
//! failures and collaboration requests; thoughts in between do not break the pattern.
//!
//! A cycle is counted once per period, not at every event that continues it.

use super::{Ctx, Finding};
use crate::state::{Entry, EntryBody};
use crate::verdict::LoopKind;

fn same(newer: &Entry, older: &Entry) -> bool {
    newer.is_same_as(older.seq)
}

pub fn detect(ctx: &Ctx<'_>) -> Option<Finding> {
    if !ctx.entry.is_work() {
        return None;
    }
    let cfg = &ctx.cfg.cycles;
    let mut work: Vec<&Entry> = ctx.state.window.iter().filter(|e| e.is_work()).collect();
    work.push(ctx.entry);
    let n = work.len();
    for p in cfg.min_period..=cfg.max_period {
        let span = p * cfg.repetitions;
        if n < span {
            break;
        }
        let periodic =
            (0..p * (cfg.repetitions - 1)).all(|i| same(work[n - 1 - i], work[n - 1 - i - p]));
        if !periodic {
            continue;
        }
        // All of one thing is a repeat, not a cycle.
        let newest = work[n - 1];
        if (1..p).all(|j| same(newest, work[n - 1 - j])) {
            continue;
        }
        let first = work[n - span].seq;
        return Some(finding(
            ctx,
            &work,
            p,
            format!(
                "the last {p} actions repeat the {p} before them (period {p}, since seq {first})"
            ),
        ));
    }
    replay(ctx, &work)
}

/// A cycle of period `p` ending at the newest work event: it counts once per period (the loop
/// counter moves once per turn of the cycle, not on every event of it).
fn finding(ctx: &Ctx<'_>, work: &[&Entry], p: usize, reason: String) -> Finding {
    let continuing = ctx.state.cycle.filter(|run| run.period == p);
    let matched = work[work.len() - 1 - p].seq;
    let mut f = Finding::new(LoopKind::Cycle, reason);
    f.matched = Some(matched);
    f.similarity = ctx.link(matched).and_then(|l| l.similarity());
    f.counts = match continuing {
        Some(run) => run.since_counted + 1 >= p,
        None => true,
    };
    f.period = Some(p);
    f
}

/// A long block of work replayed: the last `replay_streak` work events each repeat their
/// counterpart one period back, for a period above `max_period`. A whole second period would
/// come a dozen events too late; three steps of the same long sequence in the same order, each
/// with the same outcome, is already a replay.
fn replay(ctx: &Ctx<'_>, work: &[&Entry]) -> Option<Finding> {
    let cfg = &ctx.cfg.cycles;
    let n = work.len();
    let full = cfg.replay_streak.max(2);
    let at_a_dead_end = match cfg.replay_streak_at_a_dead_end {
        0 => full,
        k => k.clamp(2, full),
    };
    for p in (cfg.max_period + 1)..=cfg.replay_max_period {
        if n < p + at_a_dead_end {
            break;
        }
        let repeats = |streak: usize| {
            n >= p + streak && (0..streak).all(|i| same(work[n - 1 - i], work[n - 1 - i - p]))
        };
        let streak = if repeats(full) {
            full
        } else if repeats(at_a_dead_end) && work[n - at_a_dead_end..].iter().any(|e| dead_end(e)) {
            at_a_dead_end
        } else {
            continue;
        };
        // A block of one or two things repeated is a repeat or a short cycle, not a replay.
        let block = &work[n - p..];
        let distinct = block
            .iter()
            .enumerate()
            .filter(|(i, e)| !block[..*i].iter().any(|o| e.is_same_as(o.seq)))
            .count();
        if distinct < 3 {
            continue;
        }
        return Some(finding(
            ctx,
            work,
            p,
            format!(
                "the last {streak} actions replay, in order, a block of {p} actions (since seq {})",
                work[n - p - streak].seq
            ),
        ));
    }
    None
}

/// A step that ended in an error or found nothing: replaying it to the same end walks back into
/// a dead end.
fn dead_end(e: &Entry) -> bool {
    match &e.body {
        EntryBody::Failure { external, .. } => !external,
        EntryBody::ToolCall {
            result: Some(r), ..
        } => r.outcome.is_some() && !r.external,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::detect;
    use crate::detect::testkit::{bash, Scene};
    use crate::verdict::LoopKind;

    #[test]
    fn an_alternation_repeated_is_a_cycle_counted_once_per_period() {
        let mut s = Scene::new();
        let (a, b) = (
            bash("git stash", "Saved"),
            bash("git stash pop", "Restored"),
        );
        let mut found = Vec::new();
        for _ in 0..4 {
            found.push(s.detect(detect, a.clone()));
            found.push(s.detect(detect, b.clone()));
        }
        let first = found.iter().position(Option::is_some).expect("a cycle");
        let f = found[first].as_ref().unwrap();
        assert_eq!(
            (f.kind, f.period, f.counts),
            (LoopKind::Cycle, Some(2), true)
        );
        let counted: Vec<bool> = found[first..]
            .iter()
            .map(|f| f.as_ref().unwrap().counts)
            .collect();
        assert_eq!(
            counted.iter().filter(|c| **c).count(),
            counted.len().div_ceil(2)
        );
    }

    #[test]
    fn one_thing_repeated_is_not_a_cycle() {
        let mut s = Scene::new();
        for _ in 0..6 {
            assert!(s.detect(detect, bash("ls", "a b c")).is_none());
        }
    }
}
