//! Rendering of a `calibrate runs` report: the Markdown page, the SVG charts and the config
//! snippet. Measurement is in the parent module; this file only presents its numbers.

use super::*;

/// Write `report.json`, `REPORT.md`, `recommended.toml` and the charts into `dir`.
pub fn write_outputs(report: &RunsReport, dir: &Path) -> Result<Written, CalibrateError> {
    let mut w = Written::create(dir)?;
    w.json(dir, "report.json", report)?;
    let mut files = Vec::new();
    for (name, chart) in charts(report) {
        w.text(dir, &name, &chart.to_svg())?;
        files.push(name);
    }
    w.text(dir, "REPORT.md", &markdown(report, &files))?;
    w.text(dir, "recommended.toml", &config_snippet(report))?;
    Ok(w)
}

/// The point the report's tables and delay chart describe: the recommended one, else the first.
fn focus(r: &RunsReport) -> usize {
    r.recommended.as_ref().map(|x| x.point).unwrap_or(0)
}

/// One run-level rate of a sweep point, for a chart.
type Metric = fn(&PointReport) -> Option<f64>;

fn charts(r: &RunsReport) -> Vec<(String, Chart)> {
    let mut out = Vec::new();
    // Metrics against the first axis, one line per combination of the other axes' values.
    if let Some(first) = r.axes.first() {
        let xs: Vec<f64> = first.values.iter().filter_map(|v| v.parse().ok()).collect();
        if xs.len() == first.values.len() {
            let (lo, hi) = xs
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
                    (a.min(*x), b.max(*x))
                });
            let mut lines: Vec<(String, Vec<usize>)> = Vec::new();
            for (i, p) in r.points.iter().enumerate() {
                let rest = describe(&p.settings[1..]);
                match lines.iter_mut().find(|(k, _)| *k == rest) {
                    Some((_, v)) => v.push(i),
                    None => lines.push((rest, vec![i])),
                }
            }
            let metrics: [(&str, &str, Metric); 3] = [
                ("f1", "run-level F1", |p| p.rates.f1),
                ("recall", "loops caught (recall)", |p| p.rates.recall),
                ("false-alarms", "false-alarm rate (FPR)", |p| p.rates.fpr),
            ];
            for (file, label, get) in metrics {
                let ymax = r.points.iter().filter_map(get).fold(0.0f64, f64::max);
                let ymax = if file == "false-alarms" {
                    (ymax * 1.2).max(0.05)
                } else {
                    1.0
                };
                let mut c = Chart::new(
                    format!("{label} by {}", first.key),
                    first.key.clone(),
                    label,
                    (lo, hi),
                    (0.0, ymax),
                );
                // The last colour (black) is the recommended point's.
                for (li, (name, members)) in lines.iter().take(PALETTE.len() - 1).enumerate() {
                    let pts: Vec<(f64, f64)> = members
                        .iter()
                        .filter_map(|&i| {
                            Some((
                                r.points[i].settings[0].value.parse().ok()?,
                                get(&r.points[i])?,
                            ))
                        })
                        .collect();
                    let name = if r.axes.len() > 1 {
                        Some(name.as_str())
                    } else {
                        None
                    };
                    let color = PALETTE[li];
                    c.line(name, color, Dash::Solid, &pts);
                    c.points(None, color, &pts);
                }
                if let Some(rec) = &r.recommended {
                    if let Ok(x) = rec.settings[0].value.parse::<f64>() {
                        c.vline(Some("recommended"), PALETTE[7], Dash::Dashed, x);
                    }
                }
                out.push((format!("runs-{file}.svg"), c.legend(Corner::Auto)));
            }
        }
    }
    let p = &r.points[focus(r)];
    if !p.delays.is_empty() {
        let lo = (*p.delays.first().expect("non-empty")).min(0) as f64;
        let hi = (*p.delays.last().expect("non-empty")).max(lo as i64 + 1) as f64;
        let bins = (hi - lo + 1.0) as usize;
        let (edges, counts) =
            plot::histogram(p.delays.iter().map(|d| *d as f64), lo - 0.5, hi + 0.5, bins);
        let ymax = counts.iter().copied().fold(1.0, f64::max) * 1.1;
        let mut c = Chart::new(
            format!("Detection delay at {}", describe(&p.settings)),
            "events after the loop onset (0 = caught at the first repeat)",
            "caught loop runs",
            (lo - 0.5, hi + 0.5),
            (0.0, ymax),
        );
        c.histogram(
            Some(&format!("{} caught loops with an onset", p.delay.measured)),
            PALETTE[0],
            &edges,
            &counts,
        );
        out.push(("runs-delay.svg".to_string(), c.legend(Corner::TopRight)));
    }
    out
}

fn markdown(r: &RunsReport, charts: &[String]) -> String {
    let mut s = String::new();
    s.push_str("# loopguard calibrate runs\n\n");
    s.push_str(&format!(
        "Generated by `loopguard calibrate runs` (loopguard {}), model: {}.\n\n",
        r.loopguard_version, r.model
    ));
    s.push_str(&format!(
        "{} labelled runs ({} loop, {} no_loop) replayed through the engine at {} sweep point(s). \
         Positives are the loop runs: caught by a loop verdict at or after their `loop_onset` (the first event that repeats what came before; \
         any loop verdict when a run has none). Negatives are the `no_loop` runs and the loop-free part before the onset of each loop run: \
         a loop verdict in a `no_loop` run is a *false alarm*, one before the onset an *early alarm*; precision, F1 and the false-alarm rate (FPR) count both. \
         Delay is the catching verdict's index minus the onset, in events.\n\n",
        r.runs,
        r.loops,
        r.no_loops,
        r.points.len()
    ));
    let mut t = Table::new(&["file", "runs", "loop", "no_loop"]);
    for i in &r.inputs {
        t.row(vec![
            format!("`{}`", i.file),
            i.runs.to_string(),
            i.loops.to_string(),
            i.no_loops.to_string(),
        ]);
    }
    s.push_str(&t.render());
    s.push('\n');
    for n in &r.notes {
        s.push_str(&format!("**{n}**\n\n"));
    }

    let fp_cell = |p: &PointReport| format!("{} / {}", p.false_alarms, r.no_loops);
    let early_cell = |p: &PointReport| format!("{} / {}", p.early_alarms, p.loop_free_prefixes);
    if let Some(rec) = &r.recommended {
        let p = &r.points[rec.point];
        s.push_str("## Recommended operating point\n\n");
        s.push_str(&format!("`{}` — {}.\n\n", describe(&p.settings), rec.rule));
        let mut t = Table::new(&[
            "precision",
            "recall",
            "F1",
            "false alarms",
            "early alarms",
            "mean delay",
            "median delay",
            "caught at onset",
        ]);
        t.row(vec![
            num(p.rates.precision, 3),
            num(p.rates.recall, 3),
            num(p.rates.f1, 3),
            fp_cell(p),
            early_cell(p),
            num(p.delay.mean, 2),
            num(p.delay.median, 1),
            format!("{} / {}", p.delay.at_onset, p.delay.measured),
        ]);
        s.push_str(&t.render());
        s.push_str("\nThe snippet is in [`recommended.toml`](recommended.toml).\n\n");
    }

    let fp = focus(r);
    let p = &r.points[fp];
    s.push_str(&format!("## By group at `{}`\n\n", describe(&p.settings)));
    let mut t = Table::new(&[
        "group",
        "runs",
        "loop",
        "flagged",
        "loops caught",
        "false alarms",
        "early alarms",
        "mean delay",
    ]);
    for g in &p.groups {
        t.row(vec![
            g.group.clone(),
            g.runs.to_string(),
            g.loops.to_string(),
            g.flagged.to_string(),
            if g.loops > 0 {
                format!("{} / {}", g.caught, g.loops)
            } else {
                "–".into()
            },
            if g.runs > g.loops {
                format!("{} / {}", g.false_alarms, g.runs - g.loops)
            } else {
                "–".into()
            },
            if g.loops > 0 {
                g.early_alarms.to_string()
            } else {
                "–".into()
            },
            num(g.mean_delay, 2),
        ]);
    }
    s.push_str(&t.render());
    if !p.kinds.is_empty() {
        s.push_str("\nKind of the deciding verdict (the catch, else the first loop verdict) of the flagged runs: ");
        s.push_str(
            &p.kinds
                .iter()
                .map(|(k, n)| format!("`{k}` {n}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        s.push_str(".\n");
    }
    for (what, ids) in [
        ("False alarms", &p.examples.false_alarms),
        ("Early alarms", &p.examples.early_alarms),
        ("Missed loops", &p.examples.missed),
    ] {
        if !ids.is_empty() {
            s.push_str(&format!(
                "\n{what} (the first {}): {}.\n",
                ids.len(),
                ids.iter()
                    .map(|i| format!("`{i}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    s.push('\n');

    s.push_str("## Sweep\n\n");
    let mut head: Vec<String> = r.axes.iter().map(|a| format!("`{}`", a.key)).collect();
    head.extend(
        [
            "P",
            "R",
            "F1",
            "false alarms",
            "early alarms",
            "mean delay",
            "seconds",
            "model texts",
        ]
        .map(String::from),
    );
    let head_refs: Vec<&str> = head.iter().map(String::as_str).collect();
    let mut t = Table::new(&head_refs);
    for (i, p) in r.points.iter().enumerate() {
        let mut row: Vec<String> = p
            .settings
            .iter()
            .map(|x| {
                if Some(i) == r.recommended.as_ref().map(|x| x.point) {
                    format!("**{}**", x.value)
                } else {
                    x.value.clone()
                }
            })
            .collect();
        row.extend([
            num(p.rates.precision, 3),
            num(p.rates.recall, 3),
            num(p.rates.f1, 3),
            fp_cell(p),
            early_cell(p),
            num(p.delay.mean, 2),
            format!("{:.1}", p.seconds),
            p.texts_embedded.to_string(),
        ]);
        t.row(row);
    }
    s.push_str(&t.render());
    if r.points.len() > 1 {
        let first = &r.points[0];
        let mut later: Vec<f64> = r.points[1..].iter().map(|p| p.seconds).collect();
        later.sort_by(f64::total_cmp);
        let embedded_later: u64 = r.points[1..].iter().map(|p| p.texts_embedded).sum();
        s.push_str(&format!(
            "\nOne embedder serves the whole sweep: the first point took {:.1} s and needed the model's \
             vectors of {} texts (embedded, or kept on disk by an earlier command); the {} later points \
             took {:.1} s each (median) and needed {} more between them.\n",
            first.seconds,
            first.texts_embedded,
            r.points.len() - 1,
            later[later.len() / 2],
            embedded_later
        ));
    }
    s.push('\n');
    for c in charts {
        s.push_str(&format!("![{c}]({c})\n"));
    }
    s
}

/// The recommended point's `[detect.similarity]` thresholds and swept keys, as a config snippet.
pub fn config_snippet(r: &RunsReport) -> String {
    let cfg = &r.snippet_config;
    let mut header = vec![format!(
        "Settings recommended by `loopguard calibrate runs` (loopguard {}).",
        r.loopguard_version
    )];
    match &r.recommended {
        Some(rec) => {
            let p = &r.points[rec.point];
            header.push(format!("Point: {}.", describe(&p.settings)));
            header.push(format!(
                "On {} labelled runs: precision {}, recall {}, F1 {}, false alarms {} of {} no_loop runs, early alarms {} of {} loop runs, mean delay {} events.",
                r.runs,
                num(p.rates.precision, 3),
                num(p.rates.recall, 3),
                num(p.rates.f1, 3),
                p.false_alarms,
                r.no_loops,
                p.early_alarms,
                p.loop_free_prefixes,
                num(p.delay.mean, 2)
            ));
        }
        None => header.push("No point met the rule: these are the settings as given.".into()),
    }
    header.push("Paste into your loopguard config file, or pass this file with --config.".into());
    let swept = |s: &Setting| {
        let values = r
            .axes
            .iter()
            .find(|a| a.key == s.key)
            .map(|a| a.values.join(", "))
            .unwrap_or_default();
        format!("swept over {values}")
    };
    let mut entries: Vec<SnippetEntry> = PairKind::ALL
        .iter()
        .map(|k| SnippetEntry {
            table: "detect.similarity".into(),
            key: k.as_str().into(),
            value: k.threshold(cfg).to_string(),
            comment: None,
        })
        .collect();
    if let Some(rec) = &r.recommended {
        for s in &rec.settings {
            let (table, key) = s.key.rsplit_once('.').unwrap_or(("", s.key.as_str()));
            if let Some(e) = entries
                .iter_mut()
                .find(|e| e.table == table && e.key == key)
            {
                e.value = s.value.clone();
                e.comment = Some(swept(s));
            } else {
                entries.push(SnippetEntry {
                    table: table.to_string(),
                    key: key.to_string(),
                    value: s.value.clone(),
                    comment: Some(swept(s)),
                });
            }
        }
    }
    report::snippet(&header, &entries)
}
