//! `cycle` (the second level of escalating loop checks): the last `p` work events repeat the `p` before them,
//! `detect.cycles.repetitions` times, for a period `p` in `min_period..=max_period` — over exact
//! *or* semantic identities, so A→B→A→B reworded is still a cycle. Work events are tool calls,
//! failures and collaboration requests; thoughts in between do not break the pattern.
//!
//! A cycle is counted once per period, not at every event that continues it.

use super::{Ctx, Finding};
use crate::signature::word_overlap;
use crate::state::{Entry, EntryBody};
use crate::verdict::LoopKind;

fn same(newer: &Entry, older: &Entry) -> bool {
    newer.is_same_as(older.seq)
}

/// The window's work events and the new one, oldest first: the sequence cycles are searched in.
fn work<'a>(ctx: &'a Ctx<'_>) -> Option<Vec<&'a Entry>> {
    if !ctx.entry.is_work() {
        return None;
    }
    let mut work: Vec<&Entry> = ctx.state.window.iter().filter(|e| e.is_work()).collect();
    work.push(ctx.entry);
    Some(work)
}

/// Rule `cycle.period`: the last `p` work events repeat the `p` before them.
pub fn period(ctx: &Ctx<'_>) -> Option<Finding> {
    let cfg = &ctx.cfg.cycles;
    let work = work(ctx)?;
    let n = work.len();
    // The newest action's occurrences in the window, itself included.
    let done = 1 + ctx.entry.same_as.len();
    if done < cfg.occurrences {
        return None;
    }
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
        if requests_answered_with_news(ctx, &work[n - p..], p, &work)
            || talk_between_empty_calls(ctx, &work[n - p..], work[n - span].seq)
        {
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
    None
}

/// Does a request in the newest period (`block`, ending the work sequence) come back after its
/// counterpart one period back was answered with news? A user re-running a test after each
/// change, seeing new output each time, repeats the same turns without circling.
fn requests_answered_with_news(ctx: &Ctx<'_>, block: &[&Entry], p: usize, work: &[&Entry]) -> bool {
    let n = work.len();
    block.iter().enumerate().any(|(i, e)| {
        let back = work[n - block.len() + i - p];
        super::collaboration::answered_with_news(ctx.cfg, ctx.state, e, back.seq)
    })
}

/// Is the newest period all calls whose outputs say nothing of their own
/// ([`super::says_nothing`]), with the agent saying new things since the pattern began? Then what
/// it said is the work, not the calls.
fn talk_between_empty_calls(ctx: &Ctx<'_>, block: &[&Entry], since: u64) -> bool {
    block.iter().all(|e| super::says_nothing(ctx.state, e))
        && super::new_response_between(ctx.state, since, ctx.entry.seq)
}

/// Rule `cycle.replay`: a longer block of work replayed in order.
pub fn replay_rule(ctx: &Ctx<'_>) -> Option<Finding> {
    replay(ctx, &work(ctx)?)
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
        if distinct < 3 || requests_answered_with_news(ctx, &work[n - streak..], p, work) {
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

/// The very same calls as just before, redone — the last `p` tool calls equal (tool and
/// arguments) to the `p` before them, for `p` up to `max_period` — with outputs that changed but
/// barely (each pair at least `min_overlap` alike, [`word_overlap`]). A step redone for nothing
/// looks like this; so does a poll whose output moves a little (an output that gained only
/// copies of its own lines, an edit applied twice, is `repeat.piled_up`'s, found first). The rules cannot tell them apart (identical outputs are the repeat
/// detectors' case; outputs that changed a lot are new information), a reader can: a question
/// for the judge. Returns the period and the earlier calls of the block redone, oldest first.
pub fn redone(ctx: &Ctx<'_>, max_period: usize, min_overlap: f32) -> Option<(usize, Vec<u64>)> {
    if min_overlap <= 0.0 {
        return None;
    }
    fn call(e: &Entry) -> Option<(u64, &crate::state::TextSig)> {
        match &e.body {
            EntryBody::ToolCall {
                call,
                result: Some(r),
                passive: false,
                ..
            } => Some((call.exact, &r.sig)),
            _ => None,
        }
    }
    call(ctx.entry)?;
    // Asked about every event without a finding: only the newest blocks are looked at.
    let mut work: Vec<&Entry> = ctx
        .past
        .iter()
        .take((2 * max_period).saturating_sub(1))
        .copied()
        .collect();
    work.reverse();
    work.push(ctx.entry);
    let n = work.len();
    'period: for p in 1..=max_period {
        if n < 2 * p {
            break;
        }
        let mut moved = false;
        for j in 0..p {
            let (Some((ca, ra)), Some((cb, rb))) =
                (call(work[n - 1 - j]), call(work[n - 1 - j - p]))
            else {
                continue 'period;
            };
            if ca != cb {
                continue 'period;
            }
            if ra.exact != rb.exact {
                if word_overlap(&ra.text, &rb.text) < min_overlap {
                    continue 'period;
                }
                moved = true;
            }
        }
        // A block of one call repeated is period 1's case, counted there.
        let block = &work[n - p..];
        let distinct = block.iter().enumerate().all(|(i, e)| {
            !block[..i]
                .iter()
                .any(|o| call(o).map(|c| c.0) == call(e).map(|c| c.0))
        });
        if moved && distinct {
            return Some((p, work[n - 2 * p..n - p].iter().map(|e| e.seq).collect()));
        }
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
    use super::{period, redone, replay_rule};
    use crate::detect::testkit::{bash, Scene};
    use crate::detect::{Ctx, Finding};
    use crate::signature::word_overlap as overlap;

    /// Both cycle rules, in the table's order.
    fn detect(ctx: &Ctx<'_>) -> Option<Finding> {
        period(ctx).or_else(|| replay_rule(ctx))
    }
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

    /// An edit applied again after it went through: the file view one line longer each time.
    fn applied(lines: usize) -> serde_json::Value {
        let view: String = (1..=lines)
            .map(|i| format!("{i}:import pydantic\n"))
            .collect();
        bash(
            "edit 1:2 import datetime",
            &format!("[File: /r/mock.py ({lines} lines total)]\n{view}class DateTime(datetime.datetime):\n    def __repr__(self): return 'DateTime'\nFile updated. Please review the changes."),
        )
    }

    #[test]
    fn the_same_call_redone_with_an_output_that_barely_moved_is_for_the_judge() {
        let mut s = Scene::new();
        s.push(bash("open mock.py", "[File: /r/mock.py (8 lines total)]"));
        s.push(applied(11));
        let p = s.probe(applied(12));
        let ctx = s.ctx(&p);
        assert!(detect(&ctx).is_none());
        assert_eq!(redone(&ctx, 5, 0.9), Some((1, vec![2])));
        assert_eq!(redone(&ctx, 5, 0.0), None);

        // Identical outputs are the repeat detectors' case; an output that changed a lot is new.
        let mut s = Scene::new();
        s.push(applied(11));
        let p = s.probe(applied(11));
        assert_eq!(redone(&s.ctx(&p), 5, 0.9), None);
        let mut s = Scene::new();
        s.push(bash("git log -1", "commit 1a2b fix parser"));
        let p = s.probe(bash(
            "git log -1",
            "commit 9f8e Merge branch 'release' into main, renaming the CLI flags",
        ));
        assert_eq!(redone(&s.ctx(&p), 5, 0.9), None);
        // Paging through a file: the same call, another page of the same code each time.
        let mut s = Scene::new();
        s.push(bash(
            "scroll_down",
            "[File: /r/plot_options.py (452 lines total)] (98 more lines above) 99: self.lneFigureTitle.setText(value) 100: 101: @property 102: def x_label(self): 103: return self.lneXAxisLabel.text()",
        ));
        let p = s.probe(bash(
            "scroll_down",
            "[File: /r/plot_options.py (452 lines total)] (196 more lines above) 197: 198: self.chkXLog.stateChanged.connect(self.xLogEdited) 199: self.chkYLog.stateChanged.connect(self.yLogEdited) 200: def set_line_options(self, line_options):",
        ));
        assert_eq!(redone(&s.ctx(&p), 5, 0.9), None);
        // Another call between: not redone.
        let mut s = Scene::new();
        s.push(applied(11));
        s.push(bash("python reproduce.py", "ok"));
        let p = s.probe(applied(12));
        assert_eq!(redone(&s.ctx(&p), 5, 0.9), None);
    }

    #[test]
    fn a_block_of_calls_redone_is_found_with_its_period() {
        let mut s = Scene::new();
        s.push(applied(11));
        s.push(bash(
            "python reproduce.py",
            "NameError: name 'pendulum' is not defined",
        ));
        s.push(applied(12));
        let p = s.probe(bash(
            "python reproduce.py",
            "NameError: name 'pendulum' is not defined",
        ));
        assert_eq!(redone(&s.ctx(&p), 5, 0.9), Some((2, vec![1, 2])));
        // Up to the longest period asked about only.
        assert_eq!(redone(&s.ctx(&p), 1, 0.9), None);
    }

    #[test]
    fn overlap_is_the_share_of_words_in_common_whatever_their_numbers() {
        assert_eq!(overlap("", ""), 1.0);
        assert_eq!(overlap("4:import pydantic", "5:import pydantic"), 1.0);
        assert_eq!(overlap("a b", "c d"), 0.0);
        assert!((overlap("a b c d", "a b c e") - 0.75).abs() < 1e-6);
        // Two pages of one file: the same language, other words.
        let page = |from: usize, lines: [&str; 3]| {
            lines
                .iter()
                .enumerate()
                .map(|(i, l)| format!("{}:{l}", from + i))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let one = page(
            99,
            [
                "self.title.setText(value)",
                "def x_label(self):",
                "return self.x.text()",
            ],
        );
        let two = page(
            197,
            [
                "self.chk.stateChanged.connect(self.edited)",
                "def set_options(self, options):",
                "for option in options:",
            ],
        );
        assert!(overlap(&one, &two) < 0.5, "{}", overlap(&one, &two));
    }
}
