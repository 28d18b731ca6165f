use super::redact::{redact_query, redact_userinfo};
use super::*;

#[test]
fn redacted_hides_the_token_and_url_credentials() {
    let mut c = Config::default();
    c.server.auth_token = Some("s3cret".into());
    c.judge.url = "https://bob:k3y@judge.example/v1?x=@".into();
    let shown = c.redacted().to_toml();
    assert!(
        !shown.contains("s3cret") && !shown.contains("k3y"),
        "{shown}"
    );
    assert!(
        shown.contains("https://<redacted>@judge.example/v1?x=<redacted>"),
        "{shown}"
    );
    assert_eq!(redact_userinfo("http://host:80/a@b"), "http://host:80/a@b");
    // A key in the query string is a credential too.
    c.judge.url = "https://judge.example/v1/chat?api_key=sk-123&flag&deployment=x#frag".into();
    let shown = c.redacted().to_toml();
    assert!(!shown.contains("sk-123"), "{shown}");
    assert_eq!(
        redact_query(&c.judge.url),
        "https://judge.example/v1/chat?api_key=<redacted>&flag&deployment=<redacted>#frag"
    );
    assert_eq!(Config::default().redacted(), Config::default());
}

#[test]
fn redacted_hides_database_credentials() {
    let mut c = Config::default();
    c.server.database_url =
        Some("postgres://lg:pw1@db:5432/lg?sslmode=require&password=pw2".into());
    let shown = c.redacted().to_toml();
    assert!(!shown.contains("pw1") && !shown.contains("pw2"), "{shown}");
    assert!(
        shown.contains("postgres://<redacted>@db:5432/lg?sslmode=require&password=<redacted>"),
        "{shown}"
    );
}

#[test]
fn the_store_is_embedded_or_postgres_with_a_url() {
    assert_eq!(Config::default().server.store, StoreKind::Embedded);
    let sled = Config::from_toml_str("[server]\nstore = \"sled\"\n").unwrap();
    assert_eq!(
        sled.server.store,
        StoreKind::Embedded,
        "sled is the old name"
    );
    let err = Config::from_toml_str("[server]\nstore = \"postgres\"\n").unwrap_err();
    assert!(err.to_string().contains("server.database_url"), "{err}");
    let err = Config::from_toml_str(
        "[server]\nstore = \"postgres\"\ndatabase_url = \"mysql://u:secret@h/db\"\n",
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("postgres://") && !err.to_string().contains("secret"),
        "{err}"
    );
    let pg = Config::from_toml_str(
        "[server]\nstore = \"postgres\"\ndatabase_url = \"postgres://h/db\"\n",
    )
    .unwrap();
    assert_eq!(pg.server.store, StoreKind::Postgres);
    let err = Config::from_toml_str("[server]\nstore = \"mongo\"\n").unwrap_err();
    assert!(err.to_string().contains("server.store"), "{err}");
}

#[test]
fn the_old_text_limit_key_still_loads() {
    let c = Config::from_toml_str("[server]\nmax_text_bytes = 5000\n").unwrap();
    assert_eq!(c.server.max_text_chars, 5000);
}

#[test]
fn reference_config_parses_and_is_the_default() {
    let c = Config::default();
    assert_eq!(c.policy.gate_at, 3);
    assert_eq!(c.policy.max_pivots, 2);
    assert_eq!(c.detect.steps.limit("worker"), 3);
    assert_eq!(c.detect.steps.limit("anything"), 5);
    assert_eq!(
        c.policy.kind_ladder(LoopKind::TransitionCycle).unwrap()[0].to_string(),
        "escalate:planner"
    );
    // Round trip: the effective config printed at start-up parses back to the same value.
    assert_eq!(Config::from_toml_str(&c.to_toml()).unwrap(), c);
}

#[test]
fn file_env_and_overrides_in_order() {
    let env = vec![
        (
            "LOOPGUARD_DETECT__SIMILARITY__FAILURE".to_string(),
            "0.7".to_string(),
        ),
        (
            "LOOPGUARD_POLICY__LADDER".to_string(),
            r#"["warn", "terminate"]"#.to_string(),
        ),
        ("LOOPGUARD_LOG".to_string(), "debug".to_string()),
        ("UNRELATED".to_string(), "x".to_string()),
    ];
    let file = "[detect.similarity]\nfailure = 0.6\ntool_call = 0.5\n";
    let c = Config::load(
        Some(("f.toml", file)),
        env.into_iter(),
        &[("policy.gate_at".into(), "5".into())],
    )
    .unwrap();
    assert_eq!(c.detect.similarity.failure, 0.7); // env beats file
    assert_eq!(c.detect.similarity.tool_call, 0.5); // file beats default
    assert_eq!(c.policy.gate_at, 5); // flag
    assert_eq!(c.policy.ladder[1].kind, ActionType::Terminate);
}

#[test]
fn unknown_keys_are_rejected_with_their_path() {
    let err = Config::from_toml_str("[detect.similarity]\nfailur = 0.9\n").unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("detect.similarity") && msg.contains("failur"),
        "{msg}"
    );
    let err = Config::from_toml_str("[policy]\nladder = [\"dance\"]\n").unwrap_err();
    assert!(err.to_string().contains("unknown action `dance`"), "{err}");
    let err = Config::from_toml_str("[policy.kinds]\nloopy = [\"warn\"]\n").unwrap_err();
    assert!(
        err.to_string().contains("unknown loop kind `loopy`"),
        "{err}"
    );
    let err = Config::from_toml_str("[detect]\nwindow = 3\n").unwrap_err();
    assert!(err.to_string().contains("detect.window"), "{err}");
    let err = Config::from_toml_str("not toml [").unwrap_err();
    assert!(matches!(err, ConfigError::Syntax { .. }));
}

#[test]
fn action_specs_parse() {
    let a: ActionSpec = "escalate:planner".parse().unwrap();
    assert_eq!(a.target, Some(EscalationTarget::Planner));
    assert!("warn:user".parse::<ActionSpec>().is_err());
    assert!("escalate:nobody".parse::<ActionSpec>().is_err());
}

#[test]
fn a_relative_model_path_missing_here_is_found_in_the_checkout() {
    let cwd = tempfile::tempdir().unwrap();
    let checkout = tempfile::tempdir().unwrap();
    let rel = Path::new("models/m");
    // Nowhere: the working directory's path, so the error names where a user would put it.
    assert_eq!(
        absolute_from(cwd.path(), checkout.path(), rel),
        cwd.path().join(rel)
    );
    // Only in the checkout (the binary started from another directory).
    std::fs::create_dir_all(checkout.path().join(rel)).unwrap();
    assert_eq!(
        absolute_from(cwd.path(), checkout.path(), rel),
        checkout.path().join(rel)
    );
    // In both: the working directory wins, as it always did.
    std::fs::create_dir_all(cwd.path().join(rel)).unwrap();
    assert_eq!(
        absolute_from(cwd.path(), checkout.path(), rel),
        cwd.path().join(rel)
    );
    assert_eq!(
        absolute_from(cwd.path(), checkout.path(), Path::new("/abs/m")),
        PathBuf::from("/abs/m")
    );
}

#[test]
fn dead_ends_turned_off_by_a_high_threshold_still_load() {
    // A high `occurrences` is how a sweep silences the dead-end rules; the rerun count inside
    // them must not turn that into a configuration error (it counts from `occurrences` up).
    let c = Config::from_toml_str("[detect.dead_ends]\noccurrences = 1000\n").unwrap();
    assert_eq!(c.detect.dead_ends.unmoved_reruns, 4);
    assert_eq!(c.detect.dead_ends.span_window, 17);
    let off = Config::from_toml_str("[detect.dead_ends]\nunmoved_reruns = 0\n").unwrap();
    assert_eq!(off.detect.dead_ends.unmoved_reruns, 0);
}

#[test]
fn the_judge_questions_about_redone_calls_and_timeouts_have_measured_defaults() {
    let c = Config::default();
    assert_eq!(c.judge.redone_result_overlap, 0.9);
    assert_eq!(c.judge.ask_after_timeouts, 3);
    let err = Config::from_toml_str("[judge]\nredone_result_overlap = 1.5\n").unwrap_err();
    assert!(
        err.to_string().contains("judge.redone_result_overlap"),
        "{err}"
    );
    let off = Config::from_toml_str("[judge]\nredone_result_overlap = 0\nask_after_timeouts = 0\n")
        .unwrap();
    assert_eq!(
        (
            off.judge.redone_result_overlap,
            off.judge.ask_after_timeouts
        ),
        (0.0, 0)
    );
}

#[test]
fn a_response_repeat_count_beyond_the_window_is_refused_with_both_keys() {
    // Only `responses.window` earlier responses are compared: more repeats than that could never
    // be seen, and the rule would be off without a word.
    let err = Config::from_toml_str("[detect.repeats]\nresponse = 4\n").unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("detect.repeats.response") && msg.contains("detect.responses.window = 3"),
        "{msg}"
    );
    let ok =
        Config::from_toml_str("[detect.repeats]\nresponse = 4\n[detect.responses]\nwindow = 4\n")
            .unwrap();
    assert_eq!(ok.detect.repeats.response, 4);
}

#[test]
fn the_embedding_cache_on_disk_sits_beside_the_model_and_switches_off_when_empty() {
    let c = Config::default();
    // The tests run in the checkout, where `models/` exists: the cache goes there.
    assert_eq!(
        c.model.resolved_disk_cache(),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("models/embedding-cache"))
    );
    let off = Config::from_toml_str("[model]\ndisk_cache = \"\"\n").unwrap();
    assert_eq!(off.model.resolved_disk_cache(), None);
    let abs = Config::from_toml_str("[model]\ndisk_cache = \"/var/cache/lg\"\n").unwrap();
    assert_eq!(
        abs.model.resolved_disk_cache(),
        Some(PathBuf::from("/var/cache/lg"))
    );
    let err = Config::from_toml_str("[model]\ndisk_cache_max_mb = 0\n").unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("model.disk_cache_max_mb") && msg.contains("model.disk_cache = \"\""),
        "{msg}"
    );
}

#[test]
fn model_workers_fill_the_cores_by_default_and_a_bad_count_names_the_setting() {
    let c = Config::default();
    assert_eq!((c.model.workers, c.model.threads), (0, 1));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(c.model.resolved_workers(), cores);
    let two = Config::from_toml_str("[model]\nthreads = 2\n").unwrap();
    assert_eq!(two.model.resolved_workers(), (cores / 2).max(1));
    let set = Config::from_toml_str("[model]\nworkers = 3\nthreads = 2\n").unwrap();
    assert_eq!(set.model.resolved_workers(), 3);
    let err = Config::from_toml_str("[model]\nworkers = 100000\n").unwrap_err();
    assert!(err.to_string().contains("model.workers"), "{err}");
    let err = Config::from_toml_str("[model]\nworkers = -1\n").unwrap_err();
    assert!(err.to_string().contains("workers"), "{err}");
}

#[test]
fn a_rule_has_its_own_value_for_a_shared_setting_and_the_others_keep_theirs() {
    let c = Config::from_toml_str(
        "[detect.rule.dead_end.same_attempt]\ndead_ends.occurrences = 4\n\
         dead_ends.attempt_similarity = 0.9\n",
    )
    .unwrap();
    let own = c.detect.for_rule("dead_end.same_attempt");
    assert_eq!(own.dead_ends.occurrences, 4);
    assert_eq!(own.dead_ends.attempt_similarity, 0.9);
    // Everything else the rule reads is the shared value.
    assert_eq!(
        own.dead_ends.same_attempt_window,
        c.detect.dead_ends.same_attempt_window
    );
    // The other rules sharing the setting keep the shared value.
    assert_eq!(c.detect.dead_ends.occurrences, 3);
    assert_eq!(
        c.detect
            .for_rule("dead_end.back_to_rejected")
            .dead_ends
            .occurrences,
        3
    );
    // A section survives the round trip through `loopguard config` (a sweep's base).
    let again = Config::from_toml_str(&c.to_toml()).unwrap();
    assert_eq!(again, c);
    assert_eq!(
        again
            .detect
            .for_rule("dead_end.same_attempt")
            .dead_ends
            .occurrences,
        4
    );
    // The same through a flag or the environment, by its dotted key.
    let flagged = Config::load(
        None,
        std::iter::empty(),
        &[(
            "detect.rule.dead_end.same_attempt.dead_ends.occurrences".into(),
            "2".into(),
        )],
    )
    .unwrap();
    assert_eq!(
        flagged
            .detect
            .for_rule("dead_end.same_attempt")
            .dead_ends
            .occurrences,
        2
    );
}

#[test]
fn a_rule_section_is_refused_with_its_path_and_why() {
    let refused = |toml: &str| match Config::from_toml_str(toml) {
        Err(ConfigError::Invalid { path, message }) => (path, message),
        other => panic!("{toml}: {other:?}"),
    };
    // No such rule.
    let (path, message) =
        refused("[detect.rule.dead_end.same_attempts]\ndead_ends.occurrences = 4\n");
    assert_eq!(path, "detect.rule.dead_end.same_attempts");
    assert!(message.contains("no rule is called"), "{message}");
    // A setting the rule does not read: the message lists those it may set.
    let (path, message) = refused("[detect.rule.dead_end.same_attempt]\ncycles.max_period = 4\n");
    assert_eq!(path, "detect.rule.dead_end.same_attempt.cycles.max_period");
    assert!(
        message.contains("detect.dead_ends.occurrences"),
        "{message}"
    );
    // A setting the rule reads, but the engine reads before the table runs.
    let (path, message) = refused("[detect.rule.repeat.failure]\nsimilarity.failure = 0.8\n");
    assert_eq!(path, "detect.rule.repeat.failure.similarity.failure");
    assert!(message.contains("before the rules run"), "{message}");
    // The engine's own settings, even when a rule lists them.
    let (path, message) = refused("[detect.rule.dead_end.resent_in_a_row]\nwindow = 10\n");
    assert_eq!(path, "detect.rule.dead_end.resent_in_a_row.window");
    assert!(message.contains("engine"), "{message}");
    // A value of the wrong type, and one the checks refuse, named in the section.
    let (path, _) = refused("[detect.rule.dead_end.same_attempt]\ndead_ends.occurrences = \"x\"\n");
    assert_eq!(
        path,
        "detect.rule.dead_end.same_attempt.dead_ends.occurrences"
    );
    let (path, message) = refused("[detect.rule.response.repeat]\nrepeats.response = 9\n");
    assert_eq!(path, "detect.rule.response.repeat.repeats.response");
    assert!(message.contains("window"), "{message}");
    // An empty section says nothing: a typo, most likely.
    let (path, _) = refused("[detect.rule.dead_end.same_attempt]\n");
    assert_eq!(path, "detect.rule.dead_end.same_attempt");
}
