//! Rendering of a `calibrate pairs` report: the Markdown page, the SVG charts and the config
//! snippet. Measurement is in the parent module; this file only presents its numbers.

use super::*;

/// Write `report.json`, `REPORT.md`, `recommended.toml` and the charts into `dir`.
pub fn write_outputs(report: &PairsReport, dir: &Path) -> Result<Written, CalibrateError> {
    let mut w = Written::create(dir)?;
    w.json(dir, "report.json", report)?;
    let mut charts: Vec<(String, Vec<String>)> = Vec::new();
    for g in &report.groups {
        let names = charts_for(g, report.rule.label());
        let mut files = Vec::new();
        for (suffix, chart) in names {
            let name = format!("pairs-{}-{suffix}.svg", g.group);
            w.text(dir, &name, &chart.to_svg())?;
            files.push(name);
        }
        charts.push((g.group.clone(), files));
    }
    w.text(dir, "REPORT.md", &markdown(report, &charts))?;
    w.text(dir, "recommended.toml", &config_snippet(report))?;
    Ok(w)
}

/// `rule`: how the marked threshold was chosen, for the legends.
fn charts_for(g: &GroupReport, rule: &str) -> Vec<(&'static str, Chart)> {
    let title = |what: &str| format!("{what} — {} ({} pairs)", g.group, g.pairs);
    let mut out = Vec::new();
    let has_both = g.positives > 0 && g.negatives > 0;
    let chosen = g.recommended.as_ref().map(|r| r.value);

    if has_both {
        let mut roc = Chart::new(
            title("ROC"),
            "false-positive rate",
            "true-positive rate (recall)",
            (0.0, 1.0),
            (0.0, 1.0),
        );
        roc.line(None, "#999999", Dash::Dotted, &[(0.0, 0.0), (1.0, 1.0)]);
        for s in &g.scorers {
            let mut pts = vec![(0.0, 0.0)];
            pts.extend(
                s.ranked
                    .curve()
                    .iter()
                    .filter_map(|p| Some((p.confusion.fpr()?, p.confusion.recall()?))),
            );
            let name = format!("{} (AUC {})", s.scorer.as_str(), num(s.roc_auc, 3));
            roc.line(Some(&name), s.scorer.color(), s.scorer.dash(), &pts);
        }
        if let Some(r) = &g.recommended {
            if let (Some(x), Some(y)) = (r.rates.fpr, r.rates.recall) {
                roc.points(Some(&format!("{rule} threshold")), PALETTE[3], &[(x, y)]);
            }
        }
        out.push(("roc", roc.legend(Corner::BottomRight)));
    }

    if g.positives > 0 {
        let prevalence = g.positives as f64 / g.pairs as f64;
        let mut pr = Chart::new(
            title("Precision–recall"),
            "recall",
            "precision",
            (0.0, 1.0),
            (0.0, 1.0),
        );
        pr.line(
            Some("chance (share of positives)"),
            "#999999",
            Dash::Dotted,
            &[(0.0, prevalence), (1.0, prevalence)],
        );
        for s in &g.scorers {
            let mut pts: Vec<(f64, f64)> = Vec::new();
            for p in s.ranked.curve() {
                let (Some(r), Some(pr)) = (p.confusion.recall(), p.confusion.precision()) else {
                    continue;
                };
                // Step-wise, as average precision integrates it.
                if let Some(&(_, last_p)) = pts.last() {
                    pts.push((r, last_p));
                } else {
                    pts.push((0.0, pr));
                }
                pts.push((r, pr));
            }
            let name = format!("{} (AP {})", s.scorer.as_str(), num(s.pr_auc, 3));
            pr.line(Some(&name), s.scorer.color(), s.scorer.dash(), &pts);
        }
        if let Some(r) = &g.recommended {
            if let (Some(x), Some(y)) = (r.rates.recall, r.rates.precision) {
                pr.points(Some(&format!("{rule} threshold")), PALETTE[3], &[(x, y)]);
            }
        }
        out.push(("pr", pr.legend(Corner::BottomLeft)));
    }

    if let Some(cos) = g.scorer(Scorer::Cosine) {
        let lo = cos
            .ranked
            .scores(true)
            .chain(cos.ranked.scores(false))
            .filter(|v| v.is_finite())
            .fold(1.0f64, f64::min);
        let lo = ((lo * 10.0).floor() / 10.0).min(0.5);
        let bins = ((1.0 - lo) * 50.0).round().max(1.0) as usize;
        let mut hist_max: f64 = 0.0;
        let mut series = Vec::new();
        for (positive, name, color) in [
            (false, "negatives (different)", PALETTE[1]),
            (true, "positives (reworded)", PALETTE[0]),
        ] {
            let n = if positive { g.positives } else { g.negatives };
            if n == 0 {
                continue;
            }
            let (edges, counts) = plot::histogram(cos.ranked.scores(positive), lo, 1.0, bins);
            let share: Vec<f64> = counts.iter().map(|c| c / n as f64).collect();
            hist_max = share.iter().copied().fold(hist_max, f64::max);
            series.push((format!("{name}, {n}"), color, edges, share));
        }
        let mut hist = Chart::new(
            title("Cosine by label"),
            "cosine of the prepared texts",
            "share of the label's pairs",
            (lo, 1.0),
            (0.0, (hist_max * 1.1).max(0.01)),
        );
        for (name, color, edges, share) in &series {
            hist.histogram(Some(name), color, edges, share);
        }
        hist.vline(Some("seed 000 (0.85)"), "#777777", Dash::Dotted, 0.85);
        if let Some(r) = &g.recommended {
            if let Some(c) = r.current {
                hist.vline(
                    Some(&format!("current ({})", report::threshold(c))),
                    PALETTE[4],
                    Dash::Dashed,
                    c,
                );
            }
            hist.vline(
                Some(&format!("{rule} ({})", report::threshold(r.value))),
                PALETTE[3],
                Dash::Solid,
                r.value,
            );
        }
        out.push(("hist", hist.legend(Corner::TopLeft)));
    }

    if g.positives > 0 {
        let mut f1 = Chart::new(
            title("F1 by threshold"),
            "threshold (score ≥ threshold is a match)",
            "F1",
            (0.0, 1.0),
            (0.0, 1.0),
        );
        for s in g.scorers.iter().filter(|s| s.scorer != Scorer::Exact) {
            let pts: Vec<(f64, f64)> = s
                .ranked
                .curve()
                .iter()
                .rev()
                .filter(|p| p.threshold.is_finite() && p.threshold >= 0.0)
                .filter_map(|p| Some((p.threshold, p.confusion.f1()?)))
                .collect();
            let best = s.best_f1.and_then(|b| b.rates.f1);
            let name = format!("{} (best {})", s.scorer.as_str(), num(best, 3));
            f1.line(Some(&name), s.scorer.color(), s.scorer.dash(), &pts);
        }
        if let Some(v) = chosen {
            f1.vline(
                Some(&format!("{rule} ({})", report::threshold(v))),
                PALETTE[3],
                Dash::Solid,
                v,
            );
        }
        out.push(("f1", f1.legend(Corner::BottomLeft)));
    }
    out
}

fn op_cells(p: Option<&OperatingPoint>) -> [String; 2] {
    match p {
        Some(p) => [
            report::threshold(p.config_value),
            format!(
                "P {} R {}",
                num(p.rates.precision, 2),
                num(p.rates.recall, 2)
            ),
        ],
        None => ["–".into(), "–".into()],
    }
}

fn markdown(r: &PairsReport, charts: &[(String, Vec<String>)]) -> String {
    let mut s = String::new();
    s.push_str("# loopguard calibrate pairs\n\n");
    s.push_str(&format!(
        "Generated by `loopguard calibrate pairs` (loopguard {}), model: {}.\n\n",
        r.loopguard_version, r.model
    ));
    s.push_str("A pair is predicted *the same, reworded* when its score ≥ the threshold. ");
    s.push_str(
        "Thresholds are shown as the short decimal that makes the same predictions on this data; ",
    );
    s.push_str("precision (P), recall (R), F1 and false-positive rate (FPR) are measured at it. ");
    s.push_str(&format!(
        "The recommended threshold per kind is {} of the `loopguard` scorer — the rule the threshold is used in.\n\n",
        r.rule_description
    ));

    let mut inputs = Table::new(&["file", "kind", "pairs", "positives"]);
    for i in &r.inputs {
        inputs.row(vec![
            format!("`{}`", i.file),
            i.kind
                .map(|k| k.as_str().to_string())
                .unwrap_or_else(|| "per line".into()),
            i.pairs.to_string(),
            i.positives.to_string(),
        ]);
    }
    s.push_str(&inputs.render());
    s.push('\n');

    s.push_str("## Recommended thresholds\n\n");
    let mut rec = Table::new(&[
        "kind",
        "config key",
        "recommended",
        "current",
        "P",
        "R",
        "F1",
        "FPR",
    ]);
    for g in &r.groups {
        let Some(x) = &g.recommended else { continue };
        rec.row(vec![
            g.group.clone(),
            format!("`{}`", x.key),
            format!("**{}**", report::threshold(x.value)),
            x.current
                .map(report::threshold)
                .unwrap_or_else(|| "–".into()),
            num(x.rates.precision, 3),
            num(x.rates.recall, 3),
            num(x.rates.f1, 3),
            num(x.rates.fpr, 3),
        ]);
    }
    s.push_str(&rec.render());
    s.push_str("\nThe snippet is in [`recommended.toml`](recommended.toml).\n\n");

    for g in &r.groups {
        s.push_str(&format!("## {}\n\n", g.group));
        s.push_str(&format!(
            "{} pairs ({} positive, {} negative) from {}.\n\n",
            g.pairs,
            g.positives,
            g.negatives,
            g.files
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        for n in &g.notes {
            s.push_str(&format!("- {n}\n"));
        }
        if !g.notes.is_empty() {
            s.push('\n');
        }
        let p_head = format!("@ P ≥ {}", r.target_precision);
        let f_head = format!("@ FPR ≤ {}", r.target_fpr);
        let mut t = Table::new(&[
            "scorer",
            "ROC-AUC",
            "PR-AUC",
            "best-F1 threshold",
            "P",
            "R",
            "F1",
            &p_head,
            "",
            &f_head,
            "",
        ]);
        for sc in &g.scorers {
            let b = sc.best_f1.as_ref();
            let [pt, pr] = op_cells(sc.at_target_precision.as_ref());
            let [ft, fr] = op_cells(sc.at_target_fpr.as_ref());
            t.row(vec![
                format!("`{}`", sc.scorer.as_str()),
                num(sc.roc_auc, 3),
                num(sc.pr_auc, 3),
                b.map(|b| report::threshold(b.config_value))
                    .unwrap_or_else(|| "–".into()),
                num(b.and_then(|b| b.rates.precision), 3),
                num(b.and_then(|b| b.rates.recall), 3),
                num(b.and_then(|b| b.rates.f1), 3),
                pt,
                pr,
                ft,
                fr,
            ]);
        }
        s.push_str(&t.render());
        s.push('\n');
        let mut f = Table::new(&["scorer", "fixed threshold", "P", "R", "F1", "FPR"]);
        for sc in &g.scorers {
            for fp in &sc.fixed {
                f.row(vec![
                    format!("`{}`", sc.scorer.as_str()),
                    fp.name.clone(),
                    num(fp.rates.precision, 3),
                    num(fp.rates.recall, 3),
                    num(fp.rates.f1, 3),
                    num(fp.rates.fpr, 3),
                ]);
            }
        }
        s.push_str(&f.render());
        s.push('\n');
        if let Some((_, files)) = charts.iter().find(|(name, _)| *name == g.group) {
            for file in files {
                s.push_str(&format!("![{file}]({file})\n"));
            }
            s.push('\n');
        }
    }
    s.push_str("## Scorers\n\n");
    for sc in Scorer::ALL {
        s.push_str(&format!("- `{}`: {}\n", sc.as_str(), sc.description()));
    }
    s.push_str(&format!(
        "\nEmbedding: {} distinct texts, {} embedded by the model, {} from the embedding cache on disk, {:.1} s.\n",
        r.embedding.texts, r.embedding.embedded, r.embedding.from_disk, r.embedding.seconds
    ));
    s
}

/// The `[detect.similarity]` snippet with the recommended thresholds.
pub fn config_snippet(r: &PairsReport) -> String {
    let mut header = vec![
        format!(
            "Similarity thresholds recommended by `loopguard calibrate pairs` (loopguard {}).",
            r.loopguard_version
        ),
        format!("Rule: {}, loopguard's matcher.", r.rule_description),
        "Paste into your loopguard config file, or pass this file with --config.".to_string(),
    ];
    let mut entries = Vec::new();
    for g in &r.groups {
        let Some(x) = &g.recommended else { continue };
        let measured = format!(
            "{} pairs: P {}, R {}, F1 {}, FPR {}",
            g.pairs,
            num(x.rates.precision, 3),
            num(x.rates.recall, 3),
            num(x.rates.f1, 3),
            num(x.rates.fpr, 3)
        );
        match g.kind {
            Some(k) => entries.push(SnippetEntry {
                table: "detect.similarity".into(),
                key: k.as_str().into(),
                value: report::threshold(x.value),
                comment: Some(match x.current {
                    Some(c) => format!("{measured} (was {})", report::threshold(c)),
                    None => measured,
                }),
            }),
            None if g.group == "all" && r.groups.len() > 1 => header.push(format!(
                "All pairs together (one threshold for every kind): {} on {measured}.",
                report::threshold(x.value)
            )),
            None => header.push(format!(
                "Pairs without a kind: {} on {measured}; set it for the kinds they stand for.",
                report::threshold(x.value)
            )),
        }
    }
    if entries.is_empty() {
        header
            .push("No kind got a recommendation: give pairs a `kind` (or a file a KIND=).".into());
    }
    report::snippet(&header, &entries)
}
