//! The evaluation as text (Markdown: readable in a terminal, pasteable into notes) and as an SVG
//! chart of recall and precision per kind.

use super::{
    settings_text, Breakdown, ControlReport, EvalReport, Metrics, NearMiss, Outcome, RunRecord,
    VerdictAt, ON_TIME_SLACK,
};
use crate::calibrate::plot::{Chart, Corner, Dash, PALETTE};
use crate::calibrate::report::{num, Table};
use crate::signature::head_tail;

/// One line of text for a table cell or a list item: no newlines, no pipes, bounded.
fn clip(text: &str, chars: usize) -> String {
    head_tail(
        &text
            .replace(['\n', '\r'], " ⏎ ")
            .replace('|', "¦")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        chars,
    )
}

fn pct(x: Option<f64>) -> String {
    x.map(|v| format!("{:.1}%", v * 100.0))
        .unwrap_or_else(|| "–".into())
}

fn events(n: i64) -> String {
    if n == 1 {
        "1 event".into()
    } else {
        format!("{n} events")
    }
}

fn of(a: usize, b: usize) -> String {
    format!("{a}/{b}")
}

fn verdict_text(v: &VerdictAt) -> String {
    let mut s = format!("at {}: `{}` — {}", v.index, v.kind, clip(&v.reason, 220));
    if let Some(sim) = v.similarity {
        s.push_str(&format!("; similarity {sim:.3}"));
    }
    if let Some(j) = &v.judge {
        s.push_str(&format!("; judge: {j}"));
    }
    match (&v.matched_index, &v.matched_text) {
        (Some(i), Some(t)) => s.push_str(&format!("; matched {i}: \"{}\"", clip(t, 200))),
        (None, Some(t)) => s.push_str(&format!("; matched \"{}\"", clip(t, 200))),
        _ => {}
    }
    s
}

fn near_text(n: &Option<NearMiss>) -> String {
    match n {
        Some(n) => format!(
            "near miss ({}) {}",
            serde_json::to_value(n.strength)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            verdict_text(&n.verdict)
        ),
        None => format!(
            "no near miss up to first_loop_converted + {ON_TIME_SLACK}: every verdict was new work or unrelated"
        ),
    }
}

fn run_tags(r: &RunRecord) -> String {
    let mut tags = Vec::new();
    if let Some(k) = &r.kind {
        tags.push(k.clone());
    }
    match r.reworded {
        Some(true) => tags.push("reworded".into()),
        Some(false) => tags.push("not reworded".into()),
        None => {}
    }
    if let Some(c) = &r.confidence {
        tags.push(format!("{c} confidence"));
    }
    if let Some(f) = r.fold {
        tags.push(format!("fold {f}"));
    }
    tags.join(", ")
}

/// The headline figures as one table row.
fn headline(m: &Metrics) -> Table {
    let mut t = Table::new(&[
        "P",
        "R",
        "F1",
        "caught",
        "on time",
        "reworded on time",
        "early",
        "late",
        "missed",
        "false alarms",
        "median delay",
    ]);
    t.row(vec![
        num(m.rates.precision, 3),
        num(m.rates.recall, 3),
        num(m.rates.f1, 3),
        of(m.caught, m.loops),
        of(m.on_time, m.loops),
        of(m.reworded_on_time, m.reworded_loops),
        m.early.to_string(),
        m.late.to_string(),
        m.missed.to_string(),
        of(m.false_alarms, m.no_loops),
        num(m.delay.median, 1),
    ]);
    t
}

/// Loops by `title`'s values; the last column is recall, or for the breakdown by phase the false
/// alarms that fired there (a phase has alarms as well as loops).
fn breakdown(title: &str, rows: &[Breakdown], false_alarms: bool) -> String {
    let last = if false_alarms {
        "false alarms"
    } else {
        "recall"
    };
    let mut t = Table::new(&[
        title, "loops", "caught", "on time", "early", "late", "missed", last,
    ]);
    for b in rows {
        t.row(vec![
            b.value.clone(),
            b.loops.to_string(),
            b.caught.to_string(),
            b.on_time.to_string(),
            b.early.to_string(),
            b.late.to_string(),
            b.missed.to_string(),
            if false_alarms {
                b.false_alarms.to_string()
            } else {
                num(b.recall, 3)
            },
        ]);
    }
    t.render()
}

fn metrics_section(m: &Metrics) -> String {
    let mut s = headline(m).render();
    s.push('\n');
    s.push_str(&format!(
        "Delay (first_loop_index − first_loop_converted) over {} caught loops: median {}, mean {}, max {}; {} caught exactly at first_loop_converted. Early alarms: {} ({} by more than {} events).\n\n",
        m.delay.measured,
        num(m.delay.median, 1),
        num(m.delay.mean, 2),
        m.delay.max.map(|d| d.to_string()).unwrap_or_else(|| "–".into()),
        m.delay.at_onset,
        m.early,
        m.early_by_more_than_slack,
        ON_TIME_SLACK,
    ));
    s.push_str(&format!(
        "Judge: {} of {} events ambiguous ({}); {} sent to the judge ({}).\n\n",
        m.judge.ambiguous,
        m.judge.events,
        pct(m.judge.ambiguous_share),
        m.judge.sent_to_judge,
        pct(m.judge.sent_share)
    ));
    s.push_str(&breakdown("kind", &m.by_kind, false));
    s.push('\n');
    s.push_str(&breakdown("rewording", &m.by_reworded, false));
    if !m.by_step.is_empty() {
        s.push_str("\nBy phase (the envelope's `step`): loops where the labeller saw them, false alarms where they fired.\n\n");
        let steps: Vec<Breakdown> = m
            .by_step
            .iter()
            .map(|b| Breakdown {
                value: format!("`{}`", b.value),
                ..b.clone()
            })
            .collect();
        s.push_str(&breakdown("phase", &steps, true));
    }
    if !m.fired_kinds.is_empty() {
        s.push_str("\nThe verdict kind that fired first, per flagged run:\n\n");
        let mut t = Table::new(&[
            "verdict kind",
            "flagged",
            "loops",
            "false alarms",
            "precision",
        ]);
        for f in &m.fired_kinds {
            t.row(vec![
                format!("`{}`", f.kind),
                f.flagged.to_string(),
                f.loops.to_string(),
                f.false_alarms.to_string(),
                num(f.precision, 3),
            ]);
        }
        s.push_str(&t.render());
    }
    s
}

fn controls_section(controls: &[ControlReport]) -> String {
    if controls.is_empty() {
        return String::new();
    }
    let mut s = String::from("## Controls (healthy runs: every flag is a false alarm)\n\n");
    let mut t = Table::new(&[
        "file",
        "runs",
        "flagged",
        "share",
        "events",
        "ambiguous",
        "sent to the judge",
    ]);
    for c in controls {
        t.row(vec![
            format!("`{}`", c.file),
            c.runs.to_string(),
            c.flagged.to_string(),
            pct(c.share_flagged),
            c.judge.events.to_string(),
            format!("{} ({})", c.judge.ambiguous, pct(c.judge.ambiguous_share)),
            format!("{} ({})", c.judge.sent_to_judge, pct(c.judge.sent_share)),
        ]);
    }
    s.push_str(&t.render());
    for c in controls.iter().filter(|c| c.flagged > 0) {
        s.push_str(&format!("\nFlagged in `{}`:\n\n", c.file));
        for f in &c.flagged_runs {
            s.push_str(&format!("- `{}` {}\n", f.id, verdict_text(&f.fired)));
        }
    }
    s.push('\n');
    s
}

fn none_if_empty(s: &mut String, n: usize) {
    if n == 0 {
        s.push_str("None.\n");
    }
}

fn runs_section(runs: &[RunRecord]) -> String {
    let mut s = String::new();
    let pick = |o: Outcome| runs.iter().filter(move |r| r.outcome == o);
    let fa: Vec<&RunRecord> = pick(Outcome::FalseAlarm).collect();
    s.push_str(&format!("## False alarms ({})\n\n", fa.len()));
    none_if_empty(&mut s, fa.len());
    for r in &fa {
        if let Some(f) = &r.fired {
            s.push_str(&format!("- `{}` {}\n", r.id, verdict_text(f)));
        }
    }
    let missed: Vec<&RunRecord> = pick(Outcome::Missed).collect();
    s.push_str(&format!("\n## Missed loops ({})\n\n", missed.len()));
    none_if_empty(&mut s, missed.len());
    for r in &missed {
        s.push_str(&format!(
            "- `{}` ({}), first_loop_converted {}: {}\n",
            r.id,
            run_tags(r),
            r.first_loop_converted.unwrap_or_default(),
            near_text(&r.near_miss)
        ));
    }
    let late: Vec<&RunRecord> = pick(Outcome::Late).collect();
    s.push_str(&format!("\n## Late ({})\n\n", late.len()));
    none_if_empty(&mut s, late.len());
    for r in &late {
        if let Some(f) = &r.fired {
            s.push_str(&format!(
                "- `{}` ({}), first_loop_converted {}, caught {} later {}; before that, {}\n",
                r.id,
                run_tags(r),
                r.first_loop_converted.unwrap_or_default(),
                events(r.delay.unwrap_or_default()),
                verdict_text(f),
                near_text(&r.near_miss)
            ));
        }
    }
    let early: Vec<&RunRecord> = runs.iter().filter(|r| r.early).collect();
    s.push_str(&format!("\n## Early alarms ({})\n\n", early.len()));
    none_if_empty(&mut s, early.len());
    for r in &early {
        if let Some(f) = &r.fired {
            s.push_str(&format!(
                "- `{}` ({}), first_loop_converted {}, flagged {} before {}\n",
                r.id,
                run_tags(r),
                r.first_loop_converted.unwrap_or_default(),
                events(-r.delay.unwrap_or_default()),
                verdict_text(f)
            ));
        }
    }
    s.push('\n');
    s
}

/// How much of the replay needed the model (the first point: later sweep points find most texts
/// in the embedding cache). Counted whether the model embedded a text now or the cache on disk
/// kept its vector from an earlier command, so the figure describes detection, not the cache.
fn model_texts(p: &super::PointReport, with_controls: bool) -> String {
    let per_event = if p.events == 0 {
        0.0
    } else {
        p.model_texts as f64 / p.events as f64
    };
    format!(
        "; detection needed the model's vectors of {} texts for the {} events replayed{} ({:.2} per event)",
        p.model_texts,
        p.events,
        if with_controls {
            ", labelled and control runs"
        } else {
            ""
        },
        per_event
    )
}

/// Each family's figures, and each control file's runs flagged: does detection hold on every
/// family of agents, not on average?
fn families_section(r: &EvalReport) -> String {
    let mut s = String::from("## Per family\n\n");
    let mut t = Table::new(&[
        "family",
        "runs",
        "P",
        "R",
        "F1",
        "caught",
        "on time",
        "reworded on time",
        "false alarms",
    ]);
    for f in &r.families {
        let m = &f.metrics;
        t.row(vec![
            format!("`{}`", f.name),
            m.runs.to_string(),
            num(m.rates.precision, 3),
            num(m.rates.recall, 3),
            num(m.rates.f1, 3),
            of(m.caught, m.loops),
            of(m.on_time, m.loops),
            of(m.reworded_on_time, m.reworded_loops),
            of(m.false_alarms, m.no_loops),
        ]);
    }
    for c in &r.result.controls {
        t.row(vec![
            format!("control `{}`", c.file.rsplit('/').next().unwrap_or(&c.file)),
            c.runs.to_string(),
            "–".into(),
            "–".into(),
            "–".into(),
            "–".into(),
            "–".into(),
            "–".into(),
            of(c.flagged, c.runs),
        ]);
    }
    s.push_str(&t.render());
    s.push_str("\nThe figures below pool every family.\n\n");
    s
}

/// The report as Markdown text.
pub fn text(r: &EvalReport) -> String {
    let mut s = String::from("# loopguard eval\n\n");
    s.push_str(&format!(
        "`{}`: {} runs ({} loop, {} no_loop; {} reworded loops), {} events. Judge: {}{}. Model: {}{}. {:.1} s.\n\n",
        r.input.file,
        r.input.runs,
        r.input.loops,
        r.input.no_loops,
        r.input.reworded_loops,
        r.input.events,
        r.judge.mode,
        r.judge
            .calls
            .map(|n| format!(" ({n} question{} answered)", if n == 1 { "" } else { "s" }))
            .unwrap_or_default(),
        r.model,
        model_texts(&r.points[0], !r.controls.is_empty()),
        r.seconds
    ));
    if r.points.len() > 1 {
        s.push_str(&format!(
            "Sweep point shown: `{}` — chosen on all labelled runs by the rule ({}): in-sample figures; the folds below measure unseen runs.\n\n",
            settings_text(&r.points[r.focus].settings),
            r.choice_rule
        ));
    }
    if !r.families.is_empty() {
        s.push_str(&families_section(r));
    }
    s.push_str(&metrics_section(&r.result.metrics));
    s.push('\n');
    s.push_str(&controls_section(&r.result.controls));
    s.push_str(&runs_section(&r.result.runs));

    if r.points.len() > 1 {
        s.push_str("## Sweep (all labelled runs)\n\n");
        let mut head: Vec<String> = r.axes.iter().map(|a| format!("`{}`", a.key)).collect();
        head.extend(
            [
                "P",
                "R",
                "F1",
                "on time",
                "reworded on time",
                "false alarms",
                "controls flagged",
                "seconds",
                "model texts",
            ]
            .map(String::from),
        );
        let refs: Vec<&str> = head.iter().map(String::as_str).collect();
        let mut t = Table::new(&refs);
        for (i, p) in r.points.iter().enumerate() {
            let mut row: Vec<String> = p
                .settings
                .iter()
                .map(|x| {
                    if i == r.focus {
                        format!("**{}**", x.value)
                    } else {
                        x.value.clone()
                    }
                })
                .collect();
            let m = &p.metrics;
            row.extend([
                num(m.rates.precision, 3),
                num(m.rates.recall, 3),
                num(m.rates.f1, 3),
                of(m.on_time, m.loops),
                of(m.reworded_on_time, m.reworded_loops),
                of(m.false_alarms, m.no_loops),
                p.controls_flagged
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(" / "),
                format!("{:.1}", p.seconds),
                p.model_texts.to_string(),
            ]);
            t.row(row);
        }
        s.push_str(&t.render());
        s.push('\n');
    }

    if let Some(f) = &r.folds {
        if f.names.is_empty() {
            s.push_str(&format!(
                "## {} folds (stratified by {}, seed {})\n\n",
                f.folds, f.stratified_by, f.seed
            ));
        } else {
            s.push_str(&format!(
                "## Each family at the point chosen on the others ({} families)\n\n",
                f.folds
            ));
        }
        let (unit, units) = if f.names.is_empty() {
            ("fold", "folds")
        } else {
            ("family", "families")
        };
        if r.points.len() > 1 {
            s.push_str(&format!(
                "Each {unit}'s point is chosen on the other {units} ({}), then measured on the {unit}.\n\n",
                r.choice_rule
            ));
        }
        let chosen_on = format!("chosen on the other {units}");
        let mut t = Table::new(&[
            unit,
            "runs",
            &chosen_on,
            "F1 there",
            "P",
            "R",
            "F1",
            "on time",
            "reworded on time",
            "false alarms",
            "controls flagged",
        ]);
        for p in &f.per_fold {
            let m = &p.test;
            t.row(vec![
                f.names
                    .get(p.fold)
                    .cloned()
                    .unwrap_or_else(|| p.fold.to_string()),
                p.runs.to_string(),
                p.chosen_settings
                    .as_ref()
                    .map(|s| format!("`{}`", settings_text(s)))
                    .unwrap_or_else(|| "–".into()),
                p.train
                    .as_ref()
                    .map(|m| num(m.rates.f1, 3))
                    .unwrap_or_else(|| "–".into()),
                num(m.rates.precision, 3),
                num(m.rates.recall, 3),
                num(m.rates.f1, 3),
                of(m.on_time, m.loops),
                of(m.reworded_on_time, m.reworded_loops),
                of(m.false_alarms, m.no_loops),
                p.controls_flagged
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(" / "),
            ]);
        }
        s.push_str(&t.render());
        if let Some(cv) = &f.cross_validated {
            s.push_str("\nCross-validated: every run measured at the point chosen without it.\n\n");
            s.push_str(&headline(&cv.metrics).render());
        }
        s.push('\n');
    }

    if let Some(rules) = &r.rules {
        s.push_str(&format!(
            "## Rules (at the point shown{})\n\n",
            if r.folds.is_some() {
                "; kept per fold: decided on the other folds"
            } else {
                ""
            }
        ));
        s.push_str(&super::rules::markdown(rules, &r.controls, r.ablated));
        s.push('\n');
        if !r.families.is_empty() {
            s.push_str("### Rules per family\n\n");
            let names: Vec<String> = r.families.iter().map(|f| f.name.clone()).collect();
            s.push_str(&super::rules::family_markdown(rules, &names));
            s.push('\n');
        }
    }

    s.push_str("## Definitions\n\n");
    for d in &r.definitions {
        s.push_str(&format!("- {d}\n"));
    }
    s
}

/// One group of bars: a name and its rates (`None`: not drawn).
struct Category {
    name: String,
    recall: Option<f64>,
    on_time: Option<f64>,
    precision: Option<f64>,
}

/// Recall and on-time rate per labelled kind (and over all loops, with precision), and
/// precision per verdict kind that fired first: which kinds of loop are missed, which rules
/// raise the false alarms.
pub fn chart(r: &EvalReport) -> Chart {
    let m = &r.result.metrics;
    let mut cats: Vec<Category> = m
        .by_kind
        .iter()
        .map(|b| Category {
            name: format!("{} ({})", b.value, b.loops),
            recall: b.recall,
            on_time: b.on_time_rate,
            precision: None,
        })
        .collect();
    cats.push(Category {
        name: format!("all loops ({})", m.loops),
        recall: m.rates.recall,
        on_time: super::measure::ratio(m.on_time, m.loops),
        precision: m.rates.precision,
    });
    let labelled = cats.len();
    for f in &m.fired_kinds {
        cats.push(Category {
            name: format!("{} ({})", f.kind, f.flagged),
            recall: None,
            on_time: None,
            precision: f.precision,
        });
    }
    let n = cats.len();
    let mut c = Chart::new(
        "Loops caught per labelled kind | precision per verdict kind",
        "left: labelled kind (loops); right of the dashed line: verdict kind that fired first (runs flagged)",
        "rate",
        (-0.6, n as f64 - 0.4),
        // Headroom above 1 keeps the legend off the bars.
        (0.0, 1.3),
    )
    .categories(cats.iter().map(|c| c.name.clone()).collect())
    .legend(Corner::TopRight);
    if labelled < n {
        c.vline(None, PALETTE[7], Dash::Dashed, labelled as f64 - 0.5);
    }
    let width = 0.26;
    type Pick = fn(&Category) -> Option<f64>;
    let series: [(&str, Pick, f64); 3] = [
        ("caught (recall)", |c| c.recall, -width),
        ("on time", |c| c.on_time, 0.0),
        ("precision", |c| c.precision, width),
    ];
    for (si, (name, pick, offset)) in series.iter().enumerate() {
        let mut edges = Vec::new();
        let mut heights = Vec::new();
        for (i, cat) in cats.iter().enumerate() {
            let x = i as f64 + offset;
            edges.push(x - width / 2.0);
            edges.push(x + width / 2.0);
            heights.push(pick(cat).unwrap_or(0.0));
            heights.push(0.0);
        }
        edges.push(n as f64);
        c.histogram(Some(name), PALETTE[si], &edges, &heights);
    }
    c
}
