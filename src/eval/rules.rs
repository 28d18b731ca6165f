//! `--by-rule` and `--ablate`: every rule of the detection table measured by itself.
//!
//! Which rule fired first comes from the verdicts (`rule`). What a rule adds is measured by
//! leaving it out: the labelled and control runs are replayed with the rule switched off
//! (`detect.rules_off`) at the evaluated point. A run none of whose verdicts names the rule is
//! not replayed — a rule that never decided an event cannot change its run when it is switched
//! off (the table stops at the first rule that fires; see `detect::rules::run`) — so a rule
//! costs the replay of the runs it decided, with the embeddings already cached.
//!
//! With `--folds`, each rule is also judged the cross-validated way: on each fold's other
//! folds (and the controls), is it kept — more loops only it catches on time than false alarms
//! only it raises — and what does it bring on the held-out fold?

use super::measure::{Metrics, Outcome, Replayed, RunRecord};
use super::{ControlSet, EvalError, LabelledSet, ToReplay};
use crate::config::Config;
use crate::rules::RULES;
use serde::Serialize;
use std::sync::Arc;

/// Runs one rule fired first on.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FirstFired {
    /// Labelled runs whose first loop verdict is the rule's.
    pub runs: usize,
    pub loops_on_time: usize,
    pub loops_late: usize,
    pub false_alarms: usize,
    /// Control runs whose first loop verdict is the rule's, per control file.
    pub controls: Vec<usize>,
}

/// One fold's view of leaving a rule out.
#[derive(Debug, Clone, Serialize)]
pub struct FoldAblation {
    pub fold: usize,
    /// Kept on the other folds (and the controls): more loops only it catches on time than
    /// false alarms only it raises.
    pub kept_by_training: bool,
    /// On this fold: loops only it catches on time, and false alarms (labelled) only it raises.
    pub only_it_on_time: usize,
    pub false_alarms_it_adds: usize,
}

/// The figures without one rule.
#[derive(Debug, Clone, Serialize)]
pub struct Without {
    pub metrics: Metrics,
    pub controls_flagged: Vec<usize>,
    /// Loop runs caught with the rule and missed without it.
    pub only_it_catches: Vec<String>,
    /// Loop runs on time with the rule and late or missed without it.
    pub only_it_on_time: Vec<String>,
    /// Loop runs on time without the rule and late or missed with it (a rule that fires first
    /// can also pre-empt a better one).
    pub on_time_without: Vec<String>,
    /// `no_loop` runs flagged with the rule and quiet without it.
    pub false_alarms_it_adds: Vec<String>,
    /// Control runs (`file: id`) flagged with the rule and quiet without it.
    pub controls_it_flags: Vec<String>,
    pub folds: Vec<FoldAblation>,
    /// `only_it_on_time` > false alarms it adds (labelled and control).
    pub earns_its_place: bool,
}

/// One rule in one family: the labelled runs it fired first on, and (left out) what only it did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct InFamily {
    pub loops: usize,
    pub false_alarms: usize,
    /// Loops on time only with it, false alarms only it raises (0 when it decided nothing).
    pub only_it_on_time: usize,
    pub false_alarms_it_adds: usize,
}

/// One rule of the table, measured.
#[derive(Debug, Clone, Serialize)]
pub struct RuleRow {
    pub rule: &'static str,
    /// `loop` or `question`.
    pub outcome: &'static str,
    pub first: FirstFired,
    /// With several families: the rule in each (the order of the labelled files).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub families: Vec<InFamily>,
    /// Labelled and control runs where some verdict names the rule (it decided an event).
    pub decided_runs: usize,
    /// Leaving it out; `None` when no run names it (switched off, nothing would change).
    pub without: Option<Without>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RulesReport {
    /// The point the rules were measured at (the evaluated point: the sweep's focus).
    pub point: usize,
    pub rows: Vec<RuleRow>,
}

/// What the rule measurement needs of an evaluation at its focus point.
pub(super) struct Focus<'a> {
    pub point: usize,
    pub config: &'a Arc<Config>,
    pub labelled: &'a LabelledSet,
    pub controls: &'a [ControlSet],
    pub labelled_runs: &'a ToReplay,
    pub control_runs: &'a [ToReplay],
    pub records: &'a [RunRecord],
    pub replays_labelled: &'a [Replayed],
    pub replays_controls: &'a [Vec<Replayed>],
    pub fold_of: Option<&'a [usize]>,
    pub folds: usize,
    /// With several families: the family of each labelled run.
    pub family_of: Option<Vec<usize>>,
}

/// Measure every rule. `replay(config, runs)` replays runs at a configuration.
pub(super) fn measure(
    f: &Focus<'_>,
    mut replay: impl FnMut(&Arc<Config>, &str, &ToReplay) -> Result<Vec<Replayed>, EvalError>,
) -> Result<RulesReport, EvalError> {
    let mut rows = Vec::with_capacity(RULES.len());
    for rule in RULES {
        let id = rule.id;
        let names = |r: &Replayed| r.rules.iter().any(|x| x == id);
        let mut first = FirstFired {
            controls: vec![0; f.controls.len()],
            ..FirstFired::default()
        };
        for r in f.records {
            if r.fired.as_ref().and_then(|v| v.rule.as_deref()) == Some(id) {
                first.runs += 1;
                match r.outcome {
                    Outcome::OnTime => first.loops_on_time += 1,
                    Outcome::Late => first.loops_late += 1,
                    Outcome::FalseAlarm => first.false_alarms += 1,
                    _ => {}
                }
            }
        }
        for (c, reps) in f.replays_controls.iter().enumerate() {
            first.controls[c] = reps
                .iter()
                .filter(|r| r.first_loop.as_ref().and_then(|v| v.rule.as_deref()) == Some(id))
                .count();
        }
        let labelled_hit: Vec<usize> = (0..f.replays_labelled.len())
            .filter(|&i| names(&f.replays_labelled[i]))
            .collect();
        let controls_hit: Vec<Vec<usize>> = f
            .replays_controls
            .iter()
            .map(|reps| (0..reps.len()).filter(|&i| names(&reps[i])).collect())
            .collect();
        let decided_runs = labelled_hit.len() + controls_hit.iter().map(Vec::len).sum::<usize>();
        let without = if decided_runs > 0 {
            let mut cfg = (**f.config).clone();
            cfg.detect.rules_off.push(id.to_string());
            let cfg = Arc::new(cfg);
            let subset = |all: &ToReplay, idx: &[usize]| -> ToReplay {
                Arc::new(idx.iter().map(|&i| all[i].clone()).collect())
            };
            let mut labelled: Vec<Replayed> = f.replays_labelled.to_vec();
            let fresh = replay(
                &cfg,
                &format!("{} (without {id})", f.labelled.file),
                &subset(f.labelled_runs, &labelled_hit),
            )?;
            for (i, r) in labelled_hit.iter().zip(fresh) {
                labelled[*i] = r;
            }
            let mut controls: Vec<Vec<Replayed>> = f.replays_controls.to_vec();
            for (c, idx) in controls_hit.iter().enumerate() {
                if idx.is_empty() {
                    continue;
                }
                let fresh = replay(
                    &cfg,
                    &format!("{} (without {id})", f.controls[c].file),
                    &subset(&f.control_runs[c], idx),
                )?;
                for (i, r) in idx.iter().zip(fresh) {
                    controls[c][*i] = r;
                }
            }
            Some(compare(f, &labelled, &controls))
        } else {
            None
        };
        let families = match &f.family_of {
            Some(family_of) => {
                let k = family_of.iter().max().map_or(0, |m| m + 1);
                let mut fams = vec![InFamily::default(); k];
                for (i, r) in f.records.iter().enumerate() {
                    if r.fired.as_ref().and_then(|v| v.rule.as_deref()) == Some(id) {
                        match r.outcome {
                            Outcome::OnTime | Outcome::Late => fams[family_of[i]].loops += 1,
                            Outcome::FalseAlarm => fams[family_of[i]].false_alarms += 1,
                            _ => {}
                        }
                    }
                }
                if let Some(w) = &without {
                    let family = |id: &String| {
                        f.records
                            .iter()
                            .position(|r| &r.id == id)
                            .map(|i| family_of[i])
                    };
                    for id in &w.only_it_on_time {
                        if let Some(x) = family(id) {
                            fams[x].only_it_on_time += 1;
                        }
                    }
                    for id in &w.false_alarms_it_adds {
                        if let Some(x) = family(id) {
                            fams[x].false_alarms_it_adds += 1;
                        }
                    }
                }
                fams
            }
            None => Vec::new(),
        };
        rows.push(RuleRow {
            rule: id,
            outcome: if rule.is_question() {
                "question"
            } else {
                "loop"
            },
            first,
            families,
            decided_runs,
            without,
        });
    }
    Ok(RulesReport {
        point: f.point,
        rows,
    })
}

/// The figures without a rule, against the figures with it.
fn compare(f: &Focus<'_>, labelled: &[Replayed], controls: &[Vec<Replayed>]) -> Without {
    let records: Vec<RunRecord> = f
        .labelled
        .runs
        .iter()
        .zip(labelled)
        .enumerate()
        .map(|(i, (run, r))| RunRecord::of(run, r, f.fold_of.map(|fo| fo[i]), None))
        .collect();
    let refs: Vec<&RunRecord> = records.iter().collect();
    let reps: Vec<&Replayed> = labelled.iter().collect();
    let metrics = Metrics::of(&refs, &reps);
    let controls_flagged: Vec<usize> = controls
        .iter()
        .map(|c| c.iter().filter(|r| r.first_loop.is_some()).count())
        .collect();
    let (mut only_catch, mut only_on_time, mut on_time_without, mut fa_adds) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Per run: +1 loop only it catches on time, +1 false alarm only it raises (by index).
    let mut unique_on_time = vec![false; records.len()];
    let mut unique_fa = vec![false; records.len()];
    for (i, (with, without)) in f.records.iter().zip(&records).enumerate() {
        let caught = |o: Outcome| matches!(o, Outcome::OnTime | Outcome::Late);
        if caught(with.outcome) && without.outcome == Outcome::Missed {
            only_catch.push(with.id.clone());
        }
        if with.outcome == Outcome::OnTime && without.outcome != Outcome::OnTime {
            only_on_time.push(with.id.clone());
            unique_on_time[i] = true;
        }
        if without.outcome == Outcome::OnTime && with.outcome != Outcome::OnTime {
            on_time_without.push(with.id.clone());
        }
        if with.outcome == Outcome::FalseAlarm && without.outcome == Outcome::Quiet {
            fa_adds.push(with.id.clone());
            unique_fa[i] = true;
        }
    }
    let mut controls_it_flags = Vec::new();
    for (c, (with, without)) in f.replays_controls.iter().zip(controls).enumerate() {
        for (i, (a, b)) in with.iter().zip(without).enumerate() {
            if a.first_loop.is_some() && b.first_loop.is_none() {
                controls_it_flags.push(format!(
                    "{}: {}",
                    short(&f.controls[c].file),
                    f.controls[c].runs[i].id
                ));
            }
        }
    }
    let folds = match f.fold_of {
        Some(fold_of) => (0..f.folds)
            .map(|fold| {
                let count = |flags: &[bool], inside: bool| {
                    (0..flags.len())
                        .filter(|&i| flags[i] && (fold_of[i] == fold) == inside)
                        .count()
                };
                // The controls have no folds: the training side counts them whole.
                let train_gain = count(&unique_on_time, false) as i64
                    - count(&unique_fa, false) as i64
                    - controls_it_flags.len() as i64;
                FoldAblation {
                    fold,
                    kept_by_training: train_gain > 0,
                    only_it_on_time: count(&unique_on_time, true),
                    false_alarms_it_adds: count(&unique_fa, true),
                }
            })
            .collect(),
        None => Vec::new(),
    };
    let earns_its_place = only_on_time.len() > fa_adds.len() + controls_it_flags.len();
    Without {
        metrics,
        controls_flagged,
        only_it_catches: only_catch,
        only_it_on_time: only_on_time,
        on_time_without,
        false_alarms_it_adds: fa_adds,
        controls_it_flags,
        folds,
        earns_its_place,
    }
}

/// A control file's name without its directories.
fn short(file: &str) -> &str {
    file.rsplit('/').next().unwrap_or(file)
}

/// Each rule in each family: loops it fired first on / false alarms, and, left out, what only it
/// did (+ loops on time only with it, − false alarms only it raises).
pub fn family_markdown(report: &RulesReport, families: &[String]) -> String {
    let mut s = String::new();
    s.push_str("| rule |");
    for f in families {
        s.push_str(&format!(" {f} |"));
    }
    s.push_str("\n| --- |");
    s.push_str(&" --- |".repeat(families.len()));
    s.push('\n');
    for r in &report.rows {
        if r.families.iter().all(|x| x.loops + x.false_alarms == 0) {
            continue;
        }
        s.push_str(&format!("| `{}` |", r.rule));
        for x in &r.families {
            let only = if x.only_it_on_time + x.false_alarms_it_adds > 0 {
                format!(" (+{} −{})", x.only_it_on_time, x.false_alarms_it_adds)
            } else {
                String::new()
            };
            s.push_str(&format!(" {} / {}{only} |", x.loops, x.false_alarms));
        }
        s.push('\n');
    }
    s.push_str(
        "\nEach cell: loops the rule fired first on / false alarms it fired first on; in \
         brackets, with the rule left out: loops on time only with it (+) and false alarms only it \
         raises (−). Rules that fired first on no labelled run are left out.\n",
    );
    s
}

/// The rules section of the Markdown report.
pub fn markdown(report: &RulesReport, controls: &[String], with_metrics: bool) -> String {
    let mut s = String::new();
    let control_names: Vec<&str> = controls.iter().map(|c| short(c)).collect();
    s.push_str(
        "| rule | outcome | fired first (loops on time / late / false alarms) | controls flagged first | runs it decided | only it catches on time | false alarms only it raises (labelled + controls) | kept |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in &report.rows {
        let ctl: Vec<String> = r.first.controls.iter().map(usize::to_string).collect();
        let ctl = if ctl.is_empty() {
            "–".to_string()
        } else {
            ctl.join(" / ")
        };
        let (only, fa, kept) = match &r.without {
            Some(w) => (
                list(&w.only_it_on_time),
                format!(
                    "{} + {}{}",
                    w.false_alarms_it_adds.len(),
                    w.controls_it_flags.len(),
                    brief(&w.false_alarms_it_adds, &w.controls_it_flags)
                ),
                if w.folds.is_empty() {
                    (if w.earns_its_place { "yes" } else { "no" }).to_string()
                } else {
                    let kept = w.folds.iter().filter(|f| f.kept_by_training).count();
                    format!(
                        "{} (kept by {kept} of {} folds)",
                        if w.earns_its_place { "yes" } else { "no" },
                        w.folds.len()
                    )
                },
            ),
            None => ("–".into(), "–".into(), "never fired".into()),
        };
        s.push_str(&format!(
            "| `{}` | {} | {} ({} / {} / {}) | {} | {} | {} | {} | {} |\n",
            r.rule,
            r.outcome,
            r.first.runs,
            r.first.loops_on_time,
            r.first.loops_late,
            r.first.false_alarms,
            ctl,
            r.decided_runs,
            only,
            fa,
            kept
        ));
    }
    s.push_str(&format!(
        "\nControls flagged first are given per control file ({}). \"Only it\" compares a replay \
         with the rule switched off (`detect.rules_off`): loops on time with it and late or missed \
         without it; runs flagged with it and quiet without it. Kept: more loops only it catches \
         on time than false alarms only it raises.\n",
        if control_names.is_empty() {
            "none given".to_string()
        } else {
            control_names.join(", ")
        }
    ));
    if with_metrics {
        s.push_str("\nLeave-one-rule-out figures (rules that decided no run change nothing and are left out):\n\n| without | P | R | F1 | on time | reworded on time | false alarms | controls flagged | on time only without it |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
        for r in &report.rows {
            let Some(w) = &r.without else { continue };
            let m = &w.metrics;
            let f = |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or("–".into());
            let ctl: Vec<String> = w.controls_flagged.iter().map(usize::to_string).collect();
            s.push_str(&format!(
                "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.rule,
                f(m.rates.precision),
                f(m.rates.recall),
                f(m.rates.f1),
                m.on_time,
                m.reworded_on_time,
                m.false_alarms,
                ctl.join(" / "),
                list(&w.on_time_without)
            ));
        }
    }
    s
}

fn list(ids: &[String]) -> String {
    if ids.is_empty() {
        return "0".into();
    }
    let names: Vec<&str> = ids
        .iter()
        .map(|i| i.rsplit('/').next().unwrap_or(i))
        .collect();
    format!("{} ({})", ids.len(), names.join(", "))
}

fn brief(fa: &[String], ctl: &[String]) -> String {
    let names: Vec<&str> = fa
        .iter()
        .chain(ctl)
        .map(|i| i.rsplit('/').next().unwrap_or(i))
        .collect();
    if names.is_empty() {
        String::new()
    } else {
        format!(" ({})", names.join(", "))
    }
}
