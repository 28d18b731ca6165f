//! One event's effect on a task state, as the task log records it: the small fields as they are
//! after the event, and for each bounded history (the window, the verdicts kept, metrics,
//! progress marks, transitions) only what left its front, what changed in place and what was
//! pushed. A busy task's state is ~9 KB of JSON; one event's delta is a few hundred bytes plus
//! the new window entry.

use crate::signature::artifact::ArtifactVersions;
use crate::signature::AmbientLine;
use crate::state::{
    Entry, EntryBody, MetricsObs, PeriodicRun, ProgressMark, StreamTail, TaskState, VerdictSummary,
};
use crate::verdict::TaskStatus;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// A field that rarely changes: written only when it does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Field<T> {
    #[default]
    Same,
    Set(T),
}

impl<T> Field<T> {
    fn is_same(&self) -> bool {
        matches!(self, Field::Same)
    }
}

impl<T: PartialEq + Clone> Field<T> {
    fn between(prev: &T, next: &T) -> Field<T> {
        if prev == next {
            Field::Same
        } else {
            Field::Set(next.clone())
        }
    }

    fn apply(self, to: &mut T) {
        if let Field::Set(v) = self {
            *to = v;
        }
    }
}

/// How a bounded history changed: `drop` entries left its front, entries at `set` (indexes after
/// the drop) were changed in place, `push` were added at its back; or, when that says no less,
/// the whole history as it is now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case", bound(deserialize = "T: Deserialize<'de>"))]
pub enum Seq<T> {
    #[default]
    Same,
    Edit {
        #[serde(default, skip_serializing_if = "is_zero")]
        drop: usize,
        /// Entries kept after the drop (fewer than were there: the rest were cut from the back).
        keep: usize,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        set: Vec<(usize, T)>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        push: Vec<T>,
    },
    Full(Vec<T>),
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl<T> Seq<T> {
    fn is_same(&self) -> bool {
        matches!(self, Seq::Same)
    }
}

impl<T: PartialEq + Clone> Seq<T> {
    pub fn between(prev: &VecDeque<T>, next: &VecDeque<T>) -> Seq<T> {
        // The drop that leaves the fewest entries to write: try each, stop a try as soon as it
        // cannot beat the best so far. A window slides by one per event, so the best drop is
        // found after a few comparisons per candidate (entries differ in their first field).
        let mut best: Option<(usize, usize)> = None; // (cost, drop)
        for drop in 0..=prev.len() {
            let keep = (prev.len() - drop).min(next.len());
            let pushed = next.len() - keep;
            let limit = best.map_or(usize::MAX, |(c, _)| c);
            if pushed >= limit {
                continue;
            }
            let mut cost = pushed;
            for i in 0..keep {
                if prev[drop + i] != next[i] {
                    cost += 1;
                    if cost >= limit {
                        break;
                    }
                }
            }
            if cost < limit {
                best = Some((cost, drop));
                if cost == 0 {
                    break;
                }
            }
        }
        match best {
            Some((0, 0)) if prev.len() == next.len() => Seq::Same,
            Some((cost, drop)) if cost < next.len().max(1) => {
                let keep = (prev.len() - drop).min(next.len());
                Seq::Edit {
                    drop,
                    keep,
                    set: (0..keep)
                        .filter(|&i| prev[drop + i] != next[i])
                        .map(|i| (i, next[i].clone()))
                        .collect(),
                    push: next.iter().skip(keep).cloned().collect(),
                }
            }
            _ => Seq::Full(next.iter().cloned().collect()),
        }
    }

    pub fn apply(self, to: &mut VecDeque<T>) -> Result<(), String> {
        match self {
            Seq::Same => {}
            Seq::Full(all) => *to = all.into(),
            Seq::Edit {
                drop,
                keep,
                set,
                push,
            } => {
                if drop + keep > to.len() {
                    return Err(format!(
                        "drops {drop} and keeps {keep} of a history of {}",
                        to.len()
                    ));
                }
                to.drain(..drop);
                to.truncate(keep);
                for (i, v) in set {
                    let slot = to
                        .get_mut(i)
                        .ok_or_else(|| format!("changes entry {i} of {keep}"))?;
                    *slot = v;
                }
                to.extend(push);
            }
        }
        Ok(())
    }
}

/// What one commit changed in a task's state. Built by [`StateDelta::between`], applied by
/// [`StateDelta::apply`]; every field of [`TaskState`] is in it (the destructuring in `between`
/// lists them all, so a field added to the state cannot be forgotten here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateDelta {
    pub format: u32,
    pub next_seq: u64,
    pub version: u64,
    pub events_total: u64,
    pub loop_count: u32,
    pub entropy: u32,
    pub pivot_count: u32,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Field::is_same")]
    pub kind_hits: Field<BTreeMap<String, u32>>,
    pub external_hits: u32,
    /// The window's change; entries it pushes are in `window_push`.
    #[serde(default, skip_serializing_if = "Seq::is_same")]
    pub window: Seq<Entry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub window_push: Vec<PushedEntry>,
    #[serde(default, skip_serializing_if = "Field::is_same")]
    pub current_step: Field<Option<String>>,
    #[serde(default, skip_serializing_if = "Field::is_same")]
    pub step_entries: Field<BTreeMap<String, u32>>,
    #[serde(default, skip_serializing_if = "Seq::is_same")]
    pub transitions: Seq<(String, String)>,
    #[serde(default, skip_serializing_if = "Seq::is_same")]
    pub metrics: Seq<MetricsObs>,
    #[serde(default, skip_serializing_if = "Seq::is_same")]
    pub progress_marks: Seq<ProgressMark>,
    pub failures_since_progress: u32,
    pub cycle: Option<PeriodicRun>,
    pub transition_cycle: Option<PeriodicRun>,
    #[serde(default, skip_serializing_if = "Seq::is_same")]
    pub recent_verdicts: Seq<VerdictSummary>,
    #[serde(default, skip_serializing_if = "Field::is_same")]
    pub last_agent: Field<Option<String>>,
    #[serde(default, skip_serializing_if = "Field::is_same")]
    pub goal: Field<Option<String>>,
    pub judge_calls: u32,
    /// Streams whose tail changed or that started (whole), and streams ended or forgotten.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub streams_set: BTreeMap<String, StreamTail>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams_gone: Vec<String>,
    /// Ambient error lines added or seen after another call, and lines forgotten.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ambient_set: Vec<AmbientLine>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ambient_gone: Vec<u64>,
    /// The artifact versions, whole, when one changed.
    #[serde(default, skip_serializing_if = "Field::is_same")]
    pub artifacts: Field<ArtifactVersions>,
    pub created_ts: i64,
    pub updated_ts: i64,
}

impl StateDelta {
    /// The change from `prev` to `next` (the same root task).
    pub fn between(prev: &TaskState, next: &TaskState) -> StateDelta {
        // No `..`: adding a field to TaskState fails to compile until it is handled here.
        let TaskState {
            format,
            root: _,
            next_seq,
            version,
            events_total,
            loop_count,
            entropy,
            pivot_count,
            status,
            kind_hits,
            external_hits,
            window,
            current_step,
            step_entries,
            transitions,
            metrics,
            progress_marks,
            failures_since_progress,
            cycle,
            transition_cycle,
            recent_verdicts,
            last_agent,
            goal,
            judge_calls,
            streams,
            ambient,
            artifacts,
            created_ts,
            updated_ts,
        } = next;
        let (ambient_set, ambient_gone) = ambient.changes_since(&prev.ambient);
        let mut window_seq = Seq::between(&prev.window, window);
        let window_push = match &mut window_seq {
            Seq::Edit { push, .. } => PushedEntry::encode(&prev.window, std::mem::take(push)),
            _ => Vec::new(),
        };
        StateDelta {
            format: *format,
            next_seq: *next_seq,
            version: *version,
            events_total: *events_total,
            loop_count: *loop_count,
            entropy: *entropy,
            pivot_count: *pivot_count,
            status: *status,
            kind_hits: Field::between(&prev.kind_hits, kind_hits),
            external_hits: *external_hits,
            window: window_seq,
            window_push,
            current_step: Field::between(&prev.current_step, current_step),
            step_entries: Field::between(&prev.step_entries, step_entries),
            transitions: Seq::between(&prev.transitions, transitions),
            metrics: Seq::between(&prev.metrics, metrics),
            progress_marks: Seq::between(&prev.progress_marks, progress_marks),
            failures_since_progress: *failures_since_progress,
            cycle: *cycle,
            transition_cycle: *transition_cycle,
            recent_verdicts: Seq::between(&prev.recent_verdicts, recent_verdicts),
            last_agent: Field::between(&prev.last_agent, last_agent),
            goal: Field::between(&prev.goal, goal),
            judge_calls: *judge_calls,
            streams_set: streams
                .iter()
                .filter(|(id, s)| prev.streams.get(*id) != Some(*s))
                .map(|(id, s)| (id.clone(), s.clone()))
                .collect(),
            streams_gone: prev
                .streams
                .keys()
                .filter(|id| !streams.contains_key(*id))
                .cloned()
                .collect(),
            ambient_set,
            ambient_gone,
            artifacts: Field::between(&prev.artifacts, artifacts),
            created_ts: *created_ts,
            updated_ts: *updated_ts,
        }
    }

    /// `to` as it was after the commit. `Err` says what did not fit (the log is then corrupt).
    pub fn apply(self, to: &mut TaskState) -> Result<(), String> {
        to.format = self.format;
        to.next_seq = self.next_seq;
        to.version = self.version;
        to.events_total = self.events_total;
        to.loop_count = self.loop_count;
        to.entropy = self.entropy;
        to.pivot_count = self.pivot_count;
        to.status = self.status;
        self.kind_hits.apply(&mut to.kind_hits);
        to.external_hits = self.external_hits;
        let mut window = self.window;
        if !self.window_push.is_empty() {
            let pushed = PushedEntry::decode(&to.window, self.window_push)?;
            match &mut window {
                Seq::Edit { push, .. } => *push = pushed,
                _ => return Err("entries pushed to a window that was not edited".into()),
            }
        }
        window
            .apply(&mut to.window)
            .map_err(|e| format!("window: {e}"))?;
        self.current_step.apply(&mut to.current_step);
        self.step_entries.apply(&mut to.step_entries);
        self.transitions
            .apply(&mut to.transitions)
            .map_err(|e| format!("transitions: {e}"))?;
        self.metrics
            .apply(&mut to.metrics)
            .map_err(|e| format!("metrics: {e}"))?;
        self.progress_marks
            .apply(&mut to.progress_marks)
            .map_err(|e| format!("progress marks: {e}"))?;
        to.failures_since_progress = self.failures_since_progress;
        to.cycle = self.cycle;
        to.transition_cycle = self.transition_cycle;
        self.recent_verdicts
            .apply(&mut to.recent_verdicts)
            .map_err(|e| format!("recent verdicts: {e}"))?;
        self.last_agent.apply(&mut to.last_agent);
        self.goal.apply(&mut to.goal);
        to.judge_calls = self.judge_calls;
        for id in &self.streams_gone {
            to.streams.remove(id);
        }
        to.streams.extend(self.streams_set);
        to.ambient.apply(self.ambient_set, &self.ambient_gone);
        self.artifacts.apply(&mut to.artifacts);
        to.created_ts = self.created_ts;
        to.updated_ts = self.updated_ts;
        Ok(())
    }
}

/// An entry pushed to the window. A repeat's body (its text, signature, hashes: most of an
/// entry) is the body of an entry already there, so it is written as that entry's seq.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushedEntry {
    pub seq: u64,
    pub ts: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<EntryBody>,
    /// The body is that of the entry with this seq (in the window before, or pushed before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_of: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub same_as: Vec<u64>,
    pub novel: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub courtesy: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closest_earlier: Option<f32>,
}

impl PushedEntry {
    fn encode(before: &VecDeque<Entry>, pushed: Vec<Entry>) -> Vec<PushedEntry> {
        let mut out: Vec<PushedEntry> = Vec::with_capacity(pushed.len());
        for (i, e) in pushed.iter().enumerate() {
            let Entry {
                seq,
                ts,
                agent_id,
                body,
                same_as,
                novel,
                courtesy,
                closest_earlier,
            } = e;
            let body_of = before
                .iter()
                .rev()
                .chain(pushed[..i].iter().rev())
                .find(|o| o.body == *body)
                .map(|o| o.seq);
            out.push(PushedEntry {
                seq: *seq,
                ts: *ts,
                agent_id: agent_id.clone(),
                body: body_of.is_none().then(|| body.clone()),
                body_of,
                same_as: same_as.clone(),
                novel: *novel,
                courtesy: *courtesy,
                closest_earlier: *closest_earlier,
            });
        }
        out
    }

    fn decode(before: &VecDeque<Entry>, pushed: Vec<PushedEntry>) -> Result<Vec<Entry>, String> {
        let mut out: Vec<Entry> = Vec::with_capacity(pushed.len());
        for p in pushed {
            let body = match (p.body, p.body_of) {
                (Some(b), _) => b,
                (None, Some(seq)) => before
                    .iter()
                    .chain(out.iter())
                    .find(|o| o.seq == seq)
                    .map(|o| o.body.clone())
                    .ok_or_else(|| {
                        format!("window entry {} copies entry {seq}, not there", p.seq)
                    })?,
                (None, None) => return Err(format!("window entry {} has no body", p.seq)),
            };
            out.push(Entry {
                seq: p.seq,
                ts: p.ts,
                agent_id: p.agent_id,
                body,
                same_as: p.same_as,
                novel: p.novel,
                courtesy: p.courtesy,
                closest_earlier: p.closest_earlier,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn deque(v: &[u32]) -> VecDeque<u32> {
        v.iter().copied().collect()
    }

    fn round_trip(prev: &[u32], next: &[u32]) -> Seq<u32> {
        let (p, n) = (deque(prev), deque(next));
        let seq = Seq::between(&p, &n);
        let mut got = p.clone();
        seq.clone().apply(&mut got).unwrap();
        assert_eq!(got, n, "{seq:?}");
        seq
    }

    #[test]
    fn a_sliding_window_is_one_drop_and_one_push() {
        let seq = round_trip(&[1, 2, 3, 4], &[2, 3, 4, 5]);
        assert_eq!(
            seq,
            Seq::Edit {
                drop: 1,
                keep: 3,
                set: vec![],
                push: vec![5]
            }
        );
    }

    #[test]
    fn an_entry_changed_in_place_is_written_alone() {
        let seq = round_trip(&[1, 2, 3, 4], &[1, 2, 9, 4, 5]);
        assert_eq!(
            seq,
            Seq::Edit {
                drop: 0,
                keep: 4,
                set: vec![(2, 9)],
                push: vec![5]
            }
        );
    }

    #[test]
    fn a_cleared_history_and_a_new_one() {
        round_trip(&[1, 2, 3], &[]);
        round_trip(&[], &[1, 2]);
        round_trip(&[], &[]);
        assert_eq!(round_trip(&[1, 2, 3], &[7, 8, 9]), Seq::Full(vec![7, 8, 9]));
    }

    #[test]
    fn streams_are_written_when_they_change_and_removed_when_they_end() {
        let tail = |text: &str, seq| StreamTail {
            text: text.into(),
            chunks: seq,
            last_seq: seq,
            ..StreamTail::default()
        };
        let mut prev = TaskState::new("t", 0);
        prev.streams.insert("a".into(), tail("one", 1));
        prev.streams.insert("b".into(), tail("two", 2));
        let mut next = prev.clone();
        next.streams.remove("a");
        next.streams.get_mut("b").unwrap().push(" more", 3);
        next.streams.insert("c".into(), tail("new", 3));
        let delta = StateDelta::between(&prev, &next);
        assert_eq!(delta.streams_gone, vec!["a".to_string()]);
        assert_eq!(
            delta.streams_set.keys().collect::<Vec<_>>(),
            vec!["b", "c"],
            "an unchanged stream is not written"
        );
        let mut got = prev.clone();
        delta.apply(&mut got).unwrap();
        assert_eq!(got.streams, next.streams);
    }

    proptest! {
        #[test]
        fn any_change_applies_back(prev in prop::collection::vec(0u32..6, 0..12),
                                   next in prop::collection::vec(0u32..6, 0..12)) {
            round_trip(&prev, &next);
        }
    }
}
