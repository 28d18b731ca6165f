use super::*;

#[test]
fn sweep_axes_parse() {
    let a: SweepAxis = "detect.similarity.tool_call=0.8:0.9:0.05".parse().unwrap();
    assert_eq!(a.values, ["0.80", "0.85", "0.90"]);
    let a: SweepAxis = "detect.repeats.tool_call=1:3:1".parse().unwrap();
    assert_eq!(a.values, ["1", "2", "3"]);
    let a: SweepAxis = "detect.repeats.tool_call = 1, 3".parse().unwrap();
    assert_eq!(
        (a.key.as_str(), a.values.len()),
        ("detect.repeats.tool_call", 2)
    );
    assert!("detect.similarity.tool_call".parse::<SweepAxis>().is_err());
    assert!("x=0.9:0.8:0.1".parse::<SweepAxis>().is_err());
    assert!("x=0:1:0.001".parse::<SweepAxis>().is_err());
    assert!("x=".parse::<SweepAxis>().is_err());
}

#[test]
fn sweep_points_are_checked_configs() {
    let base = Config::default();
    let axes = vec![
        "detect.similarity.tool_call=0.8,0.9".parse().unwrap(),
        "detect.repeats.tool_call=1,2".parse().unwrap(),
    ];
    let points = plan_sweep(&base, &axes).unwrap();
    assert_eq!(points.len(), 4);
    assert_eq!(
        describe(&points[1].settings),
        "detect.similarity.tool_call=0.8, detect.repeats.tool_call=2"
    );
    assert_eq!(points[1].config.detect.similarity.tool_call, 0.8);
    assert_eq!(points[1].config.detect.repeats.tool_call, 2);
    let bad = vec!["detect.similarity.tool_cal=0.8".parse().unwrap()];
    let e = plan_sweep(&base, &bad).unwrap_err().to_string();
    assert!(e.contains("tool_cal"), "{e}");
    let bad = vec!["detect.repeats.tool_call=0".parse().unwrap()];
    assert!(plan_sweep(&base, &bad).is_err());
    assert_eq!(plan_sweep(&base, &[]).unwrap().len(), 1);
}

#[test]
fn labelled_runs_need_a_label_and_a_sane_onset() {
    let ok = parse_labelled_run(
        r#"{"id":"r","events":[{"type":"failure","message":"x"},{"type":"failure","message":"x"}],"label":"loop","loop_onset":1,"group":"g"}"#,
        "file",
    )
    .unwrap();
    assert_eq!(
        (ok.label, ok.loop_onset, ok.group.as_str()),
        (true, Some(1), "g")
    );
    let e = parse_labelled_run(r#"{"id":"r","events":[]}"#, "f").unwrap_err();
    assert_eq!(e.path, "label");
    let e = parse_labelled_run(
        r#"{"id":"r","events":[],"label":"loop","loop_onset":0}"#,
        "f",
    )
    .unwrap_err();
    assert_eq!(e.path, "loop_onset");
    let e = parse_labelled_run(r#"{"id":"r","events":[{"type":"failure","message":"x"}],"label":"no_loop","loop_onset":0}"#, "f").unwrap_err();
    assert_eq!(e.path, "loop_onset");
    let d = parse_labelled_run(r#"{"id":"r","events":[],"label":"no_loop"}"#, "f").unwrap();
    assert_eq!(d.group, "f");
}

fn point(
    settings: &[(&str, &str)],
    tp: usize,
    fp: usize,
    fn_: usize,
    tn: usize,
    delays: Vec<i64>,
) -> PointReport {
    let c = Confusion { tp, fp, tn, fn_ };
    PointReport {
        settings: settings
            .iter()
            .map(|(k, v)| Setting {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        rates: Rates::from(c),
        false_alarms: fp,
        delay: DelayStats::of(delays.clone()),
        groups: Vec::new(),
        early_alarms: 0,
        loop_free_prefixes: 0,
        kinds: BTreeMap::new(),
        examples: Examples::default(),
        seconds: 0.0,
        texts_embedded: 0,
        delays,
    }
}

#[test]
fn the_recommended_point_keeps_false_alarms_in_bounds() {
    let pts = vec![
        point(&[("t", "0.8")], 9, 2, 1, 8, vec![1]), // best F1, but false alarms
        point(&[("t", "0.85")], 7, 0, 3, 10, vec![2]),
        point(&[("t", "0.9")], 7, 0, 3, 10, vec![1]), // same F1, earlier
        point(&[("t", "0.95")], 7, 0, 3, 10, vec![1]), // same again: higher value wins
    ];
    let opts = |slack: f64, max: f64| RunsOptions {
        jobs: 1,
        false_alarm_slack: slack,
        max_false_alarm_rate: max,
    };
    // No slack: only the quietest points (no false alarm) qualify.
    assert_eq!(choose(&pts, &opts(0.0, 1.0), true), Some(3));
    // Slack for two false alarms in ten negatives: the best F1 wins.
    assert_eq!(choose(&pts, &opts(0.2, 1.0), true), Some(0));
    // An absolute limit holds whatever the slack.
    assert_eq!(choose(&pts, &opts(1.0, 0.1), true), Some(3));
    assert_eq!(choose(&pts, &opts(0.0, 1.0), false), None);
    // False alarms no point avoids are not held against the quietest point...
    let noisy = vec![point(&[("t", "0.8")], 9, 2, 1, 8, vec![])];
    assert_eq!(choose(&noisy, &opts(0.0, 1.0), true), Some(0));
    // ... unless they pass the absolute limit.
    assert_eq!(choose(&noisy, &opts(0.0, 0.1), true), None);
}

#[test]
fn delay_statistics() {
    let d = DelayStats::of(vec![2, 0, 0, 1, 3]);
    assert_eq!((d.measured, d.at_onset, d.max), (5, 2, Some(3)));
    assert_eq!(d.mean, Some(1.2));
    assert_eq!(d.median, Some(1.0));
    assert_eq!(DelayStats::of(vec![0, 3]).median, Some(1.5));
    assert_eq!(DelayStats::of(vec![]).mean, None);
}
