//! Loading: the reference file, a user file, the environment and overrides merged in that order
//! and deserialised once, strictly.

use crate::config::*;
use std::path::Path;

/// Most model workers: each holds an ONNX Runtime session (~70 MiB for the int8 model), so a
/// typo must not start thousands.
const MAX_MODEL_WORKERS: usize = 256;

impl Default for Config {
    fn default() -> Self {
        Config::from_table(reference_table()).expect("the reference config loopguard.toml is valid")
    }
}

fn reference_table() -> toml::Table {
    REFERENCE_TOML
        .parse::<toml::Table>()
        .expect("the reference config loopguard.toml is valid TOML")
}

/// Keys that were renamed keep working: a user's old name overrides the default under the new
/// one.
fn rename_old_keys(table: &mut toml::Table) {
    if let Some(toml::Value::Table(server)) = table.get_mut("server") {
        if let Some(v) = server.remove("max_text_bytes") {
            server.insert("max_text_chars".into(), v);
        }
    }
}

/// Merge `over` into `base`: tables merge key by key, everything else replaces.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Parse an override value the way TOML would; anything that is not a TOML value is a string.
fn parse_value(raw: &str) -> toml::Value {
    format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

/// Every leaf of `table` as a dotted key under `prefix`.
fn dotted_keys(prefix: &str, table: &toml::Table, out: &mut Vec<String>) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) if !t.is_empty() => dotted_keys(&key, t, out),
            _ => out.push(key),
        }
    }
}

fn set_path(table: &mut toml::Table, path: &[&str], value: toml::Value) {
    let (last, parents) = path.split_last().expect("non-empty key path");
    let mut t = table;
    for p in parents {
        let entry = t
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        t = entry.as_table_mut().expect("just made a table");
    }
    t.insert(last.to_string(), value);
}

impl Config {
    fn from_table(table: toml::Table) -> Result<Config, ConfigError> {
        let value = toml::Value::Table(table);
        let mut config: Config = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            ConfigError::Invalid {
                path,
                message: e.into_inner().to_string(),
            }
        })?;
        config.validate()?;
        config.settle_rule_sections()?;
        Ok(config)
    }

    /// Check each rule's own section (`[detect.rule.<family>.<name>]`) and settle the
    /// configuration the rule runs with: the rest of `[detect]` with the section merged over,
    /// checked like the whole file, its errors named by their place in the section.
    fn settle_rule_sections(&mut self) -> Result<(), ConfigError> {
        let mut own = std::collections::BTreeMap::new();
        if !self.detect.rule.is_empty() {
            let mut rest = toml::Table::try_from(&self.detect).expect("a config serialises");
            rest.remove("rule");
            for (family, names) in &self.detect.rule {
                for (name, section) in names {
                    let id = format!("{family}.{name}");
                    let at = format!("detect.rule.{id}");
                    let invalid =
                        |path: String, message: String| ConfigError::Invalid { path, message };
                    let rule = crate::detect::rules::by_id(&id).ok_or_else(|| {
                        invalid(
                            at.clone(),
                            format!("no rule is called {id:?} (`loopguard rules` lists them)"),
                        )
                    })?;
                    let mut keys = Vec::new();
                    dotted_keys("", section, &mut keys);
                    if keys.is_empty() {
                        return Err(invalid(
                            at,
                            "an empty section: name a setting the rule reads".into(),
                        ));
                    }
                    for key in &keys {
                        if let Some(why) = rule.cannot_own(&format!("detect.{key}")) {
                            return Err(invalid(format!("{at}.{key}"), why));
                        }
                    }
                    let mut table = rest.clone();
                    merge(&mut table, section.clone());
                    let detect: DetectConfig =
                        serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(
                            |e| invalid(format!("{at}.{}", e.path()), e.into_inner().to_string()),
                        )?;
                    let mut whole = self.clone();
                    whole.detect = detect.clone();
                    whole.validate().map_err(|e| match e {
                        ConfigError::Invalid { path, message } => invalid(
                            match path.strip_prefix("detect.") {
                                Some(rest) => format!("{at}.{rest}"),
                                None => path,
                            },
                            message,
                        ),
                        other => other,
                    })?;
                    own.insert(id, detect);
                }
            }
        }
        self.detect.own = std::sync::Arc::new(own);
        Ok(())
    }

    /// Parse a TOML document merged over the defaults.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        Config::load(Some(("<string>", text)), std::iter::empty(), &[])
    }

    /// Read a config file merged over the defaults (no environment).
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::load(
            Some((&path.display().to_string(), &text)),
            std::iter::empty(),
            &[],
        )
    }

    /// The full precedence chain: defaults < file < environment (`LOOPGUARD_A__B=value`) <
    /// overrides (`("a.b", "value")`, from flags).
    pub fn load(
        file: Option<(&str, &str)>,
        env: impl Iterator<Item = (String, String)>,
        overrides: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        let mut table = reference_table();
        if let Some((origin, text)) = file {
            let user = text
                .parse::<toml::Table>()
                .map_err(|e| ConfigError::Syntax {
                    origin: origin.to_string(),
                    message: e.to_string(),
                })?;
            merge(&mut table, user);
        }
        for (key, raw) in env {
            let Some(rest) = key.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let path: Vec<String> = rest.split("__").map(|p| p.to_ascii_lowercase()).collect();
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            // LOOPGUARD_ variables that name no config section (LOOPGUARD_LOG, ...) belong to
            // the binary, not to the config.
            if path.len() < 2 || !table.contains_key(path[0]) {
                continue;
            }
            set_path(&mut table, &path, parse_value(&raw));
        }
        for (key, raw) in overrides {
            let path: Vec<&str> = key.split('.').collect();
            set_path(&mut table, &path, parse_value(raw));
        }
        rename_old_keys(&mut table);
        Config::from_table(table)
    }

    /// Load with the process environment.
    pub fn load_with_env(
        file: Option<&Path>,
        overrides: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        let text;
        let origin;
        let file = match file {
            Some(path) => {
                text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                origin = path.display().to_string();
                Some((origin.as_str(), text.as_str()))
            }
            None => None,
        };
        Config::load(file, std::env::vars(), overrides)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |path: &str, message: String| {
            Err(ConfigError::Invalid {
                path: path.to_string(),
                message,
            })
        };
        let s = &self.detect.similarity;
        for (name, v) in [
            ("failure", s.failure),
            ("tool_call", s.tool_call),
            ("result", s.result),
            ("response", s.response),
            ("collaboration", s.collaboration),
        ] {
            // Above 1.0 is allowed: it switches semantic matching off for that kind.
            if !(-1.0..=2.0).contains(&v) {
                return bad(
                    &format!("detect.similarity.{name}"),
                    format!("a cosine threshold must be in -1..1 (above 1 disables it), got {v}"),
                );
            }
        }
        if !(0.0..=1.0).contains(&s.grey_band) {
            return bad(
                "detect.similarity.grey_band",
                format!("must be in 0..1, got {}", s.grey_band),
            );
        }
        let alike = self.detect.repeats.nothing_found_alike;
        if !(0.0..=1.0).contains(&alike) {
            return bad(
                "detect.repeats.nothing_found_alike",
                format!("must be in 0..1, got {alike}"),
            );
        }
        let courtesy = self.detect.collaboration.courtesy_similarity;
        if !(-1.0..=2.0).contains(&courtesy) {
            return bad(
                "detect.collaboration.courtesy_similarity",
                format!(
                    "a cosine threshold must be in -1..1 (above 1 disables it), got {courtesy}"
                ),
            );
        }
        let overlap = self.judge.redone_result_overlap;
        if !(0.0..=1.0).contains(&overlap) {
            return bad(
                "judge.redone_result_overlap",
                format!("must be in 0..1 (0 = never ask), got {overlap}"),
            );
        }
        let c = &self.detect.cycles;
        if c.min_period < 2 || c.max_period < c.min_period {
            return bad(
                "detect.cycles",
                format!(
                    "need 2 <= min_period <= max_period, got {}..{}",
                    c.min_period, c.max_period
                ),
            );
        }
        if c.repetitions < 2 {
            return bad("detect.cycles.repetitions", "must be at least 2".into());
        }
        if self.server.task_log_segment_bytes < 4096 {
            return bad(
                "server.task_log_segment_bytes",
                format!(
                    "must be at least 4096 (a snapshot follows every segment), got {}",
                    self.server.task_log_segment_bytes
                ),
            );
        }
        if self.model.disk_cache_max_mb == 0 {
            return bad(
                "model.disk_cache_max_mb",
                "must be at least 1 (each run would delete what the last one wrote); set \
                 model.disk_cache = \"\" to switch the cache off"
                    .into(),
            );
        }
        if self.server.task_log_audit_kept == 0 {
            return bad("server.task_log_audit_kept", "must be at least 1".into());
        }
        if self.detect.window < 2 {
            return bad("detect.window", "must be at least 2".into());
        }
        let cycle_span = c.max_period * c.repetitions;
        if self.detect.window < cycle_span {
            return bad(
                "detect.window",
                format!(
                    "must hold max_period × repetitions = {} events to see a cycle, got {}",
                    cycle_span, self.detect.window
                ),
            );
        }
        if self.detect.transitions.repetitions < 2 || self.detect.transitions.max_period < 1 {
            return bad(
                "detect.transitions",
                "need repetitions >= 2 and max_period >= 1".into(),
            );
        }
        for (i, id) in self.detect.rules_off.iter().enumerate() {
            if crate::detect::rules::by_id(id).is_none() {
                return bad(
                    &format!("detect.rules_off[{i}]"),
                    format!("no rule is called {id:?} (`loopguard rules` lists them)"),
                );
            }
        }
        let ct = &self.detect.content;
        for (name, v, least) in [
            ("min_sentence_words", ct.min_sentence_words, 1),
            ("sentence_repeats", ct.sentence_repeats, 2),
            ("max_block_sentences", ct.max_block_sentences, 1),
            ("run_repeats", ct.run_repeats, 2),
            ("min_run_words", ct.min_run_words, 1),
            ("max_run_words", ct.max_run_words, 1),
        ] {
            if v < least {
                return bad(
                    &format!("detect.content.{name}"),
                    format!("must be at least {least}, got {v}"),
                );
            }
        }
        if self.detect.regression.attempts < 2 {
            return bad("detect.regression.attempts", "must be at least 2".into());
        }
        for (name, r) in [
            ("failure", self.detect.repeats.failure),
            ("collaboration", self.detect.repeats.collaboration),
            ("tool_call", self.detect.repeats.tool_call),
            ("response", self.detect.repeats.response),
            ("negative_result", self.detect.repeats.negative_result),
        ] {
            if r == 0 {
                return bad(
                    &format!("detect.repeats.{name}"),
                    "must be at least 1 (an event cannot repeat nothing)".into(),
                );
            }
        }
        if self.detect.repeats.response > self.detect.responses.window {
            return bad(
                "detect.repeats.response",
                format!(
                    "is {} but only detect.responses.window = {} earlier responses are compared: \
                     the rule could never fire (set it to at most the window, or switch the rule \
                     off with detect.rules_off = [\"response.repeat\"])",
                    self.detect.repeats.response, self.detect.responses.window
                ),
            );
        }
        if self.policy.ladder.is_empty() {
            return bad("policy.ladder", "needs at least one action".into());
        }
        if self.policy.external.is_empty() {
            return bad("policy.external", "needs at least one action".into());
        }
        if self.model.workers > MAX_MODEL_WORKERS {
            return bad(
                "model.workers",
                format!(
                    "must be 0 (one per `threads` cores) or at most {MAX_MODEL_WORKERS}, got {} \
                     (each worker holds its own model session)",
                    self.model.workers
                ),
            );
        }
        if self.model.threads == 0 || self.model.max_batch == 0 || self.model.cache_entries == 0 {
            return bad(
                "model",
                "threads, max_batch and cache_entries must be at least 1".into(),
            );
        }
        let j = &self.judge;
        if j.kind != JudgeKind::None && j.url.trim().is_empty() {
            return bad("judge.url", "a judge needs a URL".into());
        }
        if j.kind == JudgeKind::Openai && j.model.trim().is_empty() {
            return bad("judge.model", "the openai judge needs a model name".into());
        }
        if j.kind != JudgeKind::None
            && !(j.url.starts_with("http://") || j.url.starts_with("https://"))
        {
            return bad(
                "judge.url",
                format!("must start with http:// or https://, got `{}`", j.url),
            );
        }
        if j.timeout_ms == 0 || j.timeout_ms >= self.server.request_timeout_ms {
            return bad(
                "judge.timeout_ms",
                format!(
                    "must be above 0 and below server.request_timeout_ms ({}) so a slow judge never times out the request",
                    self.server.request_timeout_ms
                ),
            );
        }
        let s = &self.server;
        if s.addr.parse::<std::net::SocketAddr>().is_err() {
            return bad(
                "server.addr",
                format!("must be IP:PORT (e.g. 127.0.0.1:8080), got `{}`", s.addr),
            );
        }
        if s.max_body_bytes < 1024 || s.max_batch_events == 0 || s.max_json_depth < 2 {
            return bad(
                "server",
                "max_body_bytes >= 1024, max_batch_events >= 1 and max_json_depth >= 2".into(),
            );
        }
        // A task id is 1..256 characters by contract, so names and texts hold at least that.
        if s.max_name_chars < 256 || s.max_text_chars < s.max_name_chars {
            return bad(
                "server",
                format!(
                    "need 256 <= max_name_chars <= max_text_chars, got {} and {}",
                    s.max_name_chars, s.max_text_chars
                ),
            );
        }
        // hyper's smallest read buffer: a request head must fit in it.
        if s.max_header_bytes < 8192 {
            return bad(
                "server.max_header_bytes",
                format!("must be at least 8192, got {}", s.max_header_bytes),
            );
        }
        if s.max_connections == 0
            || s.header_read_timeout_ms == 0
            || s.body_read_timeout_ms == 0
            || s.idle_timeout_secs == 0
        {
            return bad(
                "server",
                "max_connections, header_read_timeout_ms, body_read_timeout_ms and idle_timeout_secs must be at least 1"
                    .into(),
            );
        }
        if s.max_cached_tasks == 0 || s.max_subtasks == 0 {
            return bad(
                "server",
                "max_cached_tasks and max_subtasks must be at least 1".into(),
            );
        }
        if s.store == StoreKind::Postgres {
            match s.database_url.as_deref() {
                None => {
                    return bad(
                        "server.database_url",
                        "server.store = \"postgres\" needs the database's URL, e.g. postgres://loopguard:PASSWORD@db:5432/loopguard (or LOOPGUARD_SERVER__DATABASE_URL)".into(),
                    )
                }
                Some(url) if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) => {
                    return bad(
                        "server.database_url",
                        format!(
                            "must be a postgres:// or postgresql:// URL, got `{}`",
                            redact_database_url(url)
                        ),
                    )
                }
                Some(_) => {}
            }
        }
        if s.database_max_connections == 0 || s.database_timeout_ms == 0 {
            return bad(
                "server",
                "database_max_connections and database_timeout_ms must be at least 1".into(),
            );
        }
        if self.memory.sync_interval_ms == 0 {
            return bad("memory.sync_interval_ms", "must be at least 1".into());
        }
        if self.otlp.max_body_bytes < 1024 {
            return bad("otlp.max_body_bytes", "must be at least 1024".into());
        }
        let o = &self.otlp;
        if o.max_spans == 0 || o.max_attributes == 0 || o.max_events == 0 || o.max_blocks == 0 {
            return bad(
                "otlp",
                "max_spans, max_attributes, max_events and max_blocks must be at least 1".into(),
            );
        }
        if self.feedback.max_records == 0 || self.feedback.max_per_task == 0 {
            return bad(
                "feedback",
                "max_records and max_per_task must be at least 1".into(),
            );
        }
        if self.model.queue_capacity == 0 || self.model.queue_wait_target_ms == 0 {
            return bad(
                "model",
                "queue_capacity and queue_wait_target_ms must be at least 1".into(),
            );
        }
        if self.model.max_text_chars < 16 {
            return bad("model.max_text_chars", "must be at least 16".into());
        }
        Ok(())
    }

    /// The configuration as TOML, secrets included: print [`Config::redacted`] instead.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a config serialises")
    }

    /// The configuration with secrets replaced, for logs and `loopguard config`: the auth token,
    /// and credentials written into the judge's URL (`https://user:key@host/...`).
    pub fn redacted(&self) -> Config {
        let mut c = self.clone();
        if c.server.auth_token.is_some() {
            c.server.auth_token = Some(REDACTED.into());
        }
        c.judge.url = redact_query(&redact_userinfo(&c.judge.url));
        c.server.database_url = c.server.database_url.as_deref().map(redact_database_url);
        c
    }
}
