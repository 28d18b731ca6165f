//! What the service counts, which every layer counts into: the Prometheus metrics (`/metrics`)
//! and the last minute's figures (`live`, for `/v1/stats`). Labels are bounded: routes are
//! templates, kinds and actions are enums, statuses are HTTP codes. Names follow `_total` /
//! `_seconds`.

pub mod live;

use crate::server::http::conn::{CloseLabels, ConnMetrics};
use loopguard::audit::AuditMetrics;
use loopguard::engine::Evaluation;
use loopguard::judge::JudgeStatus;
use loopguard::verdict::LoopKind;
use loopguard::{Embedder, Engine};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub route: &'static str,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    pub kind: &'static str,
    pub action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
    /// The detection rule that found the loop (its id in the rule table).
    pub rule: &'static str,
    pub counted: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub request_seconds: Family<RouteLabels, Histogram>,
    pub phase_seconds: Family<PhaseLabels, Histogram>,
    pub verdicts: Family<VerdictLabels, Counter>,
    pub loops: Family<KindLabels, Counter>,
    pub gates: Counter,
    pub pivots: Counter,
    pub resets: Family<ReasonLabels, Counter>,
    pub events: Counter,
    pub events_needing_model: Counter,
    pub batch_events: Histogram,
    pub embed_batch_size: Histogram,
    pub embed_batch_seconds: Histogram,
    pub tasks_expired: Counter,
    pub events_needing_judge: Counter,
    pub judge_outcomes: Family<StatusLabels, Counter>,
    pub judge_seconds: Histogram,
    pub feedback: Family<FeedbackLabels, Counter>,
    pub similar_loops: Counter,
    /// The last minute and the totals as `GET /v1/stats` shows them.
    pub live: live::Live,
    pub connections_open: Gauge,
    pub connections_closed: Family<CloseLabels, Counter>,
    /// Coding-agent hooks and OTLP spans (server/ingest/).
    pub integrations: IntegrationMetrics,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FeedbackLabels {
    pub label: &'static str,
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    pub status: &'static str,
}

fn seconds_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.000_05, 2.0, 18)
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("loopguard");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests by route and status",
            requests.clone(),
        );
        let request_seconds = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(seconds_buckets())
        });
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency by route",
            request_seconds.clone(),
        );
        let phase_seconds = Family::<PhaseLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(seconds_buckets())
        });
        registry.register(
            "evaluate_phase_duration_seconds",
            "Time per evaluation phase: embed (queue + model), detect, judge, store (commit + fsync)",
            phase_seconds.clone(),
        );
        let verdicts = Family::<VerdictLabels, Counter>::default();
        registry.register(
            "verdicts",
            "Verdicts by loop kind and action",
            verdicts.clone(),
        );
        let loops = Family::<KindLabels, Counter>::default();
        registry.register(
            "loops_detected",
            "Loops detected, by kind, the rule that found them and whether they moved the loop counter",
            loops.clone(),
        );
        let gates = Counter::default();
        registry.register(
            "gates_triggered",
            "Tasks paused for human intervention",
            gates.clone(),
        );
        let pivots = Counter::default();
        registry.register(
            "pivots_issued",
            "Strategy pivot directives issued",
            pivots.clone(),
        );
        let resets = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "loop_counter_resets",
            "Loop counter resets by reason",
            resets.clone(),
        );
        let events = Counter::default();
        registry.register("events_evaluated", "Events evaluated", events.clone());
        let events_needing_model = Counter::default();
        registry.register(
            "events_needing_model",
            "Events whose evaluation ran the embedding model (a cache miss)",
            events_needing_model.clone(),
        );
        let batch_events = Histogram::new(exponential_buckets(1.0, 2.0, 10));
        registry.register(
            "evaluate_batch_events",
            "Events per /v1/evaluate request",
            batch_events.clone(),
        );
        let embed_batch_size = Histogram::new(exponential_buckets(1.0, 2.0, 8));
        registry.register(
            "embedding_batch_size",
            "Texts per model call (continuous batching)",
            embed_batch_size.clone(),
        );
        let embed_batch_seconds = Histogram::new(seconds_buckets());
        registry.register(
            "embedding_batch_duration_seconds",
            "Time per model call",
            embed_batch_seconds.clone(),
        );
        let tasks_expired = Counter::default();
        registry.register("tasks_expired", "Idle tasks deleted", tasks_expired.clone());
        let events_needing_judge = Counter::default();
        registry.register(
            "events_needing_judge",
            "Events the engine found ambiguous and put to the LLM judge (the goal: a small share)",
            events_needing_judge.clone(),
        );
        let judge_outcomes = Family::<StatusLabels, Counter>::default();
        registry.register(
            "judge_outcomes",
            "Judge consultations by outcome: ok, timeout, unavailable, invalid, budget_exhausted",
            judge_outcomes.clone(),
        );
        let feedback = Family::<FeedbackLabels, Counter>::default();
        registry.register(
            "feedback",
            "Verdicts marked by users: false positives and missed loops, by loop kind",
            feedback.clone(),
        );
        let similar_loops = Counter::default();
        registry.register(
            "similar_loops_returned",
            "Earlier loops of other tasks listed in loop verdicts",
            similar_loops.clone(),
        );
        let judge_seconds = Histogram::new(seconds_buckets());
        registry.register(
            "judge_duration_seconds",
            "Time per judge consultation, retries included",
            judge_seconds.clone(),
        );
        let connections_open = Gauge::default();
        registry.register(
            "http_connections",
            "Open HTTP connections",
            connections_open.clone(),
        );
        let connections_closed = Family::<CloseLabels, Counter>::default();
        // Every reason has its series from the start: a dashboard's `rate()` over a series
        // that appears only at its first count misses that count.
        for reason in ["header_timeout", "body_timeout", "idle_timeout", "evicted"] {
            let _ = connections_closed.get_or_create(&CloseLabels { reason });
        }
        registry.register(
            "http_connections_closed",
            "Connections the server closed: idle, headers or body too slow, or evicted at the connection cap",
            connections_closed.clone(),
        );
        let integrations = IntegrationMetrics::register(&mut registry);
        Metrics {
            integrations,
            registry,
            connections_open,
            connections_closed,
            requests,
            request_seconds,
            phase_seconds,
            verdicts,
            loops,
            gates,
            pivots,
            resets,
            events,
            events_needing_model,
            batch_events,
            embed_batch_size,
            embed_batch_seconds,
            tasks_expired,
            events_needing_judge,
            judge_outcomes,
            judge_seconds,
            feedback,
            similar_loops,
            live: live::Live::new(),
        }
    }

    /// The connection counters, for the connection layer.
    pub fn connections(&self) -> ConnMetrics {
        ConnMetrics::new(
            self.connections_open.clone(),
            self.connections_closed.clone(),
        )
    }

    /// Metrics read from the embedder, the engine and its judge at scrape time.
    pub fn watch(&mut self, embedder: Embedder, engine: Arc<Engine>) {
        self.registry
            .register_collector(Box::new(LiveStats { embedder, engine }));
    }

    /// Record what one evaluation did: its verdict and phases. Its audit events are counted by
    /// the engine, through [`Metrics::audit_counters`].
    pub fn evaluation(&self, e: &Evaluation) {
        self.events.inc();
        self.live
            .event(e.timings.used_model, e.asked_judge, e.verdict.is_loop);
        if e.timings.used_model {
            self.events_needing_model.inc();
        }
        let v = &e.verdict;
        self.similar_loops.inc_by(v.similar_loops.len() as u64);
        if e.asked_judge {
            self.events_needing_judge.inc();
            self.judge_seconds.observe(e.timings.judge_secs);
        }
        if let Some(j) = &v.judge {
            if j.status != JudgeStatus::NotConfigured {
                self.judge_outcomes
                    .get_or_create(&StatusLabels {
                        status: j.status.as_str(),
                    })
                    .inc();
            }
        }
        self.verdicts
            .get_or_create(&VerdictLabels {
                kind: v.kind.as_str(),
                action: v.action.kind.as_str(),
            })
            .inc();
        for (phase, secs) in [
            ("embed", e.timings.embed_secs),
            ("detect", e.timings.detect_secs),
            ("judge", e.timings.judge_secs),
            ("store", e.timings.store_secs),
        ] {
            self.phase_seconds
                .get_or_create(&PhaseLabels { phase })
                .observe(secs);
        }
    }

    pub fn feedback(&self, r: &loopguard::feedback::FeedbackRecord) {
        self.feedback
            .get_or_create(&FeedbackLabels {
                label: r.label.as_str(),
                kind: r.kind.as_str(),
            })
            .inc();
    }

    /// The audit counters, for the engine to count audit events as it commits them.
    pub fn audit_counters(&self) -> AuditCounters {
        AuditCounters {
            loops: self.loops.clone(),
            gates: self.gates.clone(),
            pivots: self.pivots.clone(),
            resets: self.resets.clone(),
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// The counters of audit events; they share their values with the registered metrics.
pub struct AuditCounters {
    loops: Family<KindLabels, Counter>,
    gates: Counter,
    pivots: Counter,
    resets: Family<ReasonLabels, Counter>,
}

impl AuditMetrics for AuditCounters {
    fn loop_detected(&self, kind: LoopKind, counted: bool, rule: &str) {
        // The label set stays bounded: a rule id of the table, or "" for none.
        let rule = loopguard::rules::by_id(rule).map_or("", |r| r.id);
        self.loops
            .get_or_create(&KindLabels {
                kind: kind.as_str(),
                rule,
                counted: if counted { "true" } else { "false" },
            })
            .inc();
    }

    fn pivot_issued(&self) {
        self.pivots.inc();
    }

    fn gate_triggered(&self) {
        self.gates.inc();
    }

    fn counter_reset(&self, reason: &str) {
        self.resets
            .get_or_create(&ReasonLabels {
                reason: reason.to_string(),
            })
            .inc();
    }
}

/// The batch observer the embedder calls; set once the metrics exist.
pub fn batch_observer(slot: Arc<OnceLock<Arc<Metrics>>>) -> loopguard::embed::BatchObserver {
    Arc::new(move |size, took| {
        if let Some(m) = slot.get() {
            m.embed_batch_size.observe(size as f64);
            m.embed_batch_seconds.observe(took.as_secs_f64());
        }
    })
}

struct LiveStats {
    embedder: Embedder,
    engine: Arc<Engine>,
}

impl std::fmt::Debug for LiveStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LiveStats")
    }
}

impl Collector for LiveStats {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.embedder.stats();
        for (name, help, value) in [
            (
                "embedding_cache_hits",
                "Texts answered from the embedding cache",
                s.cache_hits.load(Relaxed),
            ),
            (
                "embedding_cache_misses",
                "Texts that had to be embedded",
                s.cache_misses.load(Relaxed),
            ),
            (
                "embedding_texts",
                "Texts run through the model",
                s.texts_embedded.load(Relaxed),
            ),
        ] {
            let c = ConstCounter::new(value);
            c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)?;
        }
        let ready = ConstGauge::new(i64::from(self.embedder.is_ready()));
        ready.encode(encoder.encode_descriptor(
            "model_ready",
            "1 when the embedding model is loaded and warm",
            None,
            ready.metric_type(),
        )?)?;
        let workers = ConstGauge::new(self.embedder.workers() as i64);
        workers.encode(encoder.encode_descriptor(
            "model_workers",
            "Model workers serving (ONNX Runtime sessions, model.workers)",
            None,
            workers.metric_type(),
        )?)?;
        if let Some(bytes) = self.embedder.memory_per_worker() {
            let memory = ConstGauge::new(bytes as i64);
            memory.encode(encoder.encode_descriptor(
                "model_worker_memory_bytes",
                "Resident memory each model worker added while loading (session, weights, warm-up)",
                None,
                memory.metric_type(),
            )?)?;
        }
        if let Some(j) = self.engine.judge_stats() {
            for (name, help, value) in [
                (
                    "judge_attempts",
                    "HTTP calls to the judge, retries included",
                    j.attempts,
                ),
                (
                    "judge_cache_hits",
                    "Judge answers served from the cache",
                    j.cache_hits,
                ),
                (
                    "judge_short_circuited",
                    "Consultations refused while the breaker was open",
                    j.short_circuited,
                ),
                (
                    "judge_breaker_opened",
                    "Times the judge's circuit breaker opened",
                    j.breaker_opened,
                ),
            ] {
                let c = ConstCounter::new(value);
                c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)?;
            }
            let state = ConstGauge::new(match j.breaker {
                loopguard::judge::guard::BreakerState::Closed => 0i64,
                loopguard::judge::guard::BreakerState::HalfOpen => 1,
                loopguard::judge::guard::BreakerState::Open => 2,
            });
            state.encode(encoder.encode_descriptor(
                "judge_breaker_state",
                "The judge's circuit breaker: 0 closed, 1 half-open, 2 open",
                None,
                state.metric_type(),
            )?)?;
        }
        if let Some(m) = self.engine.loop_memory() {
            let n = ConstGauge::new(m.len() as i64);
            n.encode(encoder.encode_descriptor(
                "loop_memory_records",
                "Loops in the cross-task memory",
                None,
                n.metric_type(),
            )?)?;
            let building = ConstGauge::new(i64::from(m.index_building()));
            building.encode(encoder.encode_descriptor(
                "loop_memory_index_building",
                "1 while the loop memory's index is built in the background (start-up, after evictions)",
                None,
                building.metric_type(),
            )?)?;
        }
        if let Some(log) = self.engine.store().log_stats() {
            for (name, help, value) in [
                (
                    "task_log_bytes_appended",
                    "Bytes appended to the task log since start",
                    log.bytes_appended,
                ),
                (
                    "task_log_records_appended",
                    "Commits appended to the task log since start",
                    log.records_appended,
                ),
                (
                    "task_log_syncs",
                    "Group commits of the task log (one sync each)",
                    log.syncs,
                ),
                (
                    "task_log_snapshots",
                    "Snapshots written (each lets older segments go)",
                    log.snapshots,
                ),
            ] {
                let c = ConstCounter::new(value);
                c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)?;
            }
            let size = ConstGauge::new(i64::try_from(log.bytes_on_disk).unwrap_or(i64::MAX));
            size.encode(encoder.encode_descriptor(
                "task_log_disk_bytes",
                "Bytes the task log's segments and snapshots take on disk",
                None,
                size.metric_type(),
            )?)?;
        }
        let cached = ConstGauge::new(self.engine.cached_tasks() as i64);
        cached.encode(encoder.encode_descriptor(
            "tasks_in_memory",
            "Task states held in memory",
            None,
            cached.metric_type(),
        )?)?;
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HookLabels {
    /// `claude_code` or `gemini_cli`.
    pub agent: &'static str,
    /// `before_tool`, `after_tool`, `tool_failed`, `reply`, `prompt`, `api_error`, `other`.
    pub point: &'static str,
    /// `continue`, `context`, `block`, `stop`, `resumed`, `ignored`.
    pub answer: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SpanLabels {
    /// `tool_call`, `response`, `failure` (became an event), `ignored` (not a GenAI span
    /// loopguard evaluates, or one without content) or `rejected` (its event failed).
    pub outcome: &'static str,
}

/// Counters of the hooks and the OTLP receiver.
pub struct IntegrationMetrics {
    pub hook_events: Family<HookLabels, Counter>,
    pub otlp_spans: Family<SpanLabels, Counter>,
}

impl IntegrationMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let hook_events = Family::<HookLabels, Counter>::default();
        registry.register(
            "hook_events",
            "Coding-agent hook events, by agent, hook point and the answer given",
            hook_events.clone(),
        );
        let otlp_spans = Family::<SpanLabels, Counter>::default();
        registry.register(
            "otlp_spans",
            "Spans received on /v1/traces, by what became of them",
            otlp_spans.clone(),
        );
        IntegrationMetrics {
            hook_events,
            otlp_spans,
        }
    }
}
