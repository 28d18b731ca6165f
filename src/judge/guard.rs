//! Everything around a judge call that keeps `/v1/evaluate` answering in time whatever the judge
//! does: one deadline for the whole consultation, retries with backoff for transient errors, a
//! cache keyed by the evidence, and a circuit breaker that stops calling a judge that keeps
//! failing and tries again after a cool-down.

use super::http::{AttemptError, Backend};
use super::{Evidence, Judge, JudgeAnswer, JudgeFuture, JudgeStatus};
use crate::config::JudgeConfig;
use lru::LruCache;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;
// Tokio's clock, so tests can pause and advance time instead of sleeping.
use tokio::time::Instant;

/// Counters for metrics.
#[derive(Debug, Default)]
pub struct JudgeStats {
    /// Consultations (one per ambiguous event that reached the judge).
    pub consultations: AtomicU64,
    /// HTTP attempts, retries included.
    pub attempts: AtomicU64,
    pub ok: AtomicU64,
    pub timeouts: AtomicU64,
    pub unavailable: AtomicU64,
    pub invalid: AtomicU64,
    pub cache_hits: AtomicU64,
    /// Answers refused because the breaker was open.
    pub short_circuited: AtomicU64,
    pub breaker_opened: AtomicU64,
}

/// The circuit breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    /// Failing: no calls until the cool-down is over.
    Open,
    /// The cool-down is over: one trial call decides.
    HalfOpen,
}

impl BreakerState {
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

#[derive(Debug)]
struct Breaker {
    failures: u32,
    open_until: Option<Instant>,
    trial_in_flight: bool,
}

/// A [`Backend`] made safe to call from the request path.
pub struct GuardedJudge<B: Backend> {
    backend: B,
    timeout: Duration,
    retries: u32,
    backoff: Duration,
    breaker_failures: u32,
    cooldown: Duration,
    cache: Option<Mutex<LruCache<String, JudgeAnswer>>>,
    breaker: Mutex<Breaker>,
    pub stats: JudgeStats,
}

impl<B: Backend> GuardedJudge<B> {
    pub fn new(backend: B, cfg: &JudgeConfig) -> Self {
        GuardedJudge {
            backend,
            timeout: Duration::from_millis(cfg.timeout_ms),
            retries: cfg.retries,
            backoff: Duration::from_millis(cfg.backoff_ms),
            breaker_failures: cfg.breaker_failures.max(1),
            cooldown: Duration::from_secs(cfg.breaker_cooldown_secs),
            cache: NonZeroUsize::new(cfg.cache_entries).map(|n| Mutex::new(LruCache::new(n))),
            breaker: Mutex::new(Breaker {
                failures: 0,
                open_until: None,
                trial_in_flight: false,
            }),
            stats: JudgeStats::default(),
        }
    }

    pub fn breaker_state(&self) -> BreakerState {
        let b = self.breaker.lock().expect("breaker lock");
        match b.open_until {
            None => BreakerState::Closed,
            Some(t) if Instant::now() < t => BreakerState::Open,
            Some(_) => BreakerState::HalfOpen,
        }
    }

    /// May a call go out now? In the half-open state only one trial at a time.
    fn admit(&self) -> bool {
        let mut b = self.breaker.lock().expect("breaker lock");
        match b.open_until {
            None => true,
            Some(t) if Instant::now() < t => false,
            Some(_) if b.trial_in_flight => false,
            Some(_) => {
                b.trial_in_flight = true;
                true
            }
        }
    }

    fn record(&self, success: bool) {
        let mut b = self.breaker.lock().expect("breaker lock");
        b.trial_in_flight = false;
        if success {
            if b.open_until.is_some() {
                tracing::info!(
                    event = "judge_breaker_closed",
                    backend = self.backend.name()
                );
            }
            b.failures = 0;
            b.open_until = None;
            return;
        }
        b.failures += 1;
        let was_open = b.open_until.is_some();
        if was_open || b.failures >= self.breaker_failures {
            b.open_until = Some(Instant::now() + self.cooldown);
            if !was_open {
                self.stats.breaker_opened.fetch_add(1, Relaxed);
            }
            tracing::warn!(
                event = "judge_breaker_open",
                backend = self.backend.name(),
                failures = b.failures,
                cooldown_secs = self.cooldown.as_secs()
            );
        }
    }

    /// The evidence without ids and positions: the same situation asked twice is one question.
    fn cache_key(evidence: &Evidence) -> String {
        let mut e = evidence.clone();
        e.task_id.clear();
        e.current.seq = 0;
        for r in &mut e.recent {
            r.seq = 0;
        }
        if let Some(c) = &mut e.candidate {
            c.seq = 0;
        }
        // Strip the seqs quoted in the question as well.
        e.question = e
            .question
            .split(|c: char| c.is_ascii_digit())
            .collect::<Vec<_>>()
            .join("#");
        crate::signature::sha256_hex(&serde_json::to_string(&e).expect("evidence serialises"))
    }

    async fn consult(&self, evidence: &Evidence) -> JudgeAnswer {
        self.stats.consultations.fetch_add(1, Relaxed);
        let key = self.cache.as_ref().map(|_| Self::cache_key(evidence));
        if let (Some(cache), Some(key)) = (&self.cache, &key) {
            if let Some(hit) = cache.lock().expect("judge cache lock").get(key).cloned() {
                self.stats.cache_hits.fetch_add(1, Relaxed);
                return hit;
            }
        }
        if !self.admit() {
            self.stats.short_circuited.fetch_add(1, Relaxed);
            return JudgeAnswer::undecided(
                JudgeStatus::Unavailable,
                "the judge's circuit breaker is open after repeated failures",
            );
        }
        let deadline = Instant::now() + self.timeout;
        let mut attempt = 0;
        // Doubling from `backoff_ms`; the deadline, not a cap, ends the retries.
        let mut backoff = crate::retry::RetryPolicy {
            floor: self.backoff,
            cap: self.backoff.saturating_mul(1 << self.retries.min(16)),
            ..Default::default()
        }
        .backoff();
        let answer = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break JudgeAnswer::undecided(
                    JudgeStatus::Timeout,
                    "the judge did not answer in time",
                );
            }
            self.stats.attempts.fetch_add(1, Relaxed);
            let result = tokio::time::timeout(left, self.backend.attempt(evidence, left)).await;
            match result {
                Ok(Ok(answer)) => break answer,
                Err(_) | Ok(Err(AttemptError::Timeout)) => {
                    break JudgeAnswer::undecided(
                        JudgeStatus::Timeout,
                        "the judge did not answer in time",
                    )
                }
                Ok(Err(AttemptError::Permanent(why))) => {
                    break JudgeAnswer::undecided(JudgeStatus::Unavailable, why)
                }
                Ok(Err(AttemptError::Transient(why))) => {
                    if attempt >= self.retries {
                        break JudgeAnswer::undecided(JudgeStatus::Unavailable, why);
                    }
                    let pause = backoff.next(None);
                    if Instant::now() + pause >= deadline {
                        break JudgeAnswer::undecided(
                            JudgeStatus::Timeout,
                            format!("{why}; no time left to retry"),
                        );
                    }
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
            }
        };
        match answer.status {
            JudgeStatus::Ok => self.stats.ok.fetch_add(1, Relaxed),
            JudgeStatus::Timeout => self.stats.timeouts.fetch_add(1, Relaxed),
            JudgeStatus::Invalid => self.stats.invalid.fetch_add(1, Relaxed),
            JudgeStatus::Unavailable
            | JudgeStatus::BudgetExhausted
            | JudgeStatus::NotConfigured => self.stats.unavailable.fetch_add(1, Relaxed),
        };
        let success = answer.status == JudgeStatus::Ok;
        self.record(success);
        if success {
            if let (Some(cache), Some(key)) = (&self.cache, key) {
                cache
                    .lock()
                    .expect("judge cache lock")
                    .put(key, answer.clone());
            }
        }
        tracing::info!(
            event = "judge_consulted",
            backend = self.backend.name(),
            task_id = %evidence.task_id,
            status = answer.status.as_str(),
            verdict = answer.verdict.map(|v| v.as_str()).unwrap_or(""),
            attempts = attempt + 1,
        );
        answer
    }
}

impl<B: Backend> Judge for GuardedJudge<B> {
    fn evaluate<'a>(&'a self, evidence: &'a Evidence) -> JudgeFuture<'a> {
        Box::pin(self.consult(evidence))
    }

    fn stats(&self) -> Option<super::JudgeSnapshot> {
        let s = &self.stats;
        Some(super::JudgeSnapshot {
            backend: self.backend.name(),
            consultations: s.consultations.load(Relaxed),
            attempts: s.attempts.load(Relaxed),
            ok: s.ok.load(Relaxed),
            timeouts: s.timeouts.load(Relaxed),
            unavailable: s.unavailable.load(Relaxed),
            invalid: s.invalid.load(Relaxed),
            cache_hits: s.cache_hits.load(Relaxed),
            short_circuited: s.short_circuited.load(Relaxed),
            breaker_opened: s.breaker_opened.load(Relaxed),
            breaker: self.breaker_state(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::http::AttemptFuture;
    use crate::judge::{EvidenceEvent, JudgeVerdict};
    use std::collections::VecDeque;

    /// What the scripted backend does on each attempt.
    #[derive(Clone)]
    enum Step {
        Answer,
        Sleep(Duration),
        Transient,
    }

    struct Scripted {
        steps: Mutex<VecDeque<Step>>,
        attempts: AtomicU64,
    }

    impl Scripted {
        fn new(steps: &[Step]) -> Scripted {
            Scripted {
                steps: Mutex::new(steps.iter().cloned().collect()),
                attempts: AtomicU64::new(0),
            }
        }
    }

    impl Backend for Scripted {
        fn attempt<'a>(&'a self, _: &'a Evidence, _: Duration) -> AttemptFuture<'a> {
            self.attempts.fetch_add(1, Relaxed);
            let step = self
                .steps
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(Step::Answer);
            Box::pin(async move {
                match step {
                    Step::Answer => Ok(JudgeAnswer {
                        status: JudgeStatus::Ok,
                        verdict: Some(JudgeVerdict::NoProgress),
                        confidence: None,
                        reason: None,
                    }),
                    Step::Sleep(d) => {
                        tokio::time::sleep(d).await;
                        Ok(JudgeAnswer::undecided(JudgeStatus::Ok, "late"))
                    }
                    Step::Transient => Err(AttemptError::Transient("HTTP 503".into())),
                }
            })
        }

        fn name(&self) -> &'static str {
            "scripted"
        }
    }

    fn cfg(change: impl FnOnce(&mut JudgeConfig)) -> JudgeConfig {
        let mut c = crate::config::Config::default().judge;
        c.timeout_ms = 800;
        c.retries = 2;
        c.backoff_ms = 100;
        c.breaker_failures = 3;
        c.breaker_cooldown_secs = 30;
        c.cache_entries = 0;
        change(&mut c);
        c
    }

    fn evidence(task: &str) -> Evidence {
        Evidence {
            task_id: task.into(),
            goal: None,
            question: "same?".into(),
            recent: Vec::new(),
            current: EvidenceEvent {
                seq: 1,
                kind: "failure".into(),
                text: "x".into(),
            },
            metrics: None,
            candidate: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_judge_that_sleeps_is_cut_off_exactly_at_the_deadline() {
        let j = GuardedJudge::new(
            Scripted::new(&[Step::Sleep(Duration::from_secs(5))]),
            &cfg(|_| {}),
        );
        let started = Instant::now();
        let a = j.evaluate(&evidence("t")).await;
        assert_eq!(a.status, JudgeStatus::Timeout);
        assert_eq!(started.elapsed(), Duration::from_millis(800));
    }

    #[tokio::test(start_paused = true)]
    async fn transient_errors_are_retried_with_backoff_within_the_deadline() {
        let j = GuardedJudge::new(
            Scripted::new(&[Step::Transient, Step::Transient, Step::Answer]),
            &cfg(|_| {}),
        );
        let started = Instant::now();
        let a = j.evaluate(&evidence("t")).await;
        assert_eq!(a.status, JudgeStatus::Ok);
        // 100 ms, then 200 ms of backoff.
        assert_eq!(started.elapsed(), Duration::from_millis(300));
        assert_eq!(j.backend.attempts.load(Relaxed), 3);
        // No time left for the next backoff: a timeout, not a late retry.
        let j = GuardedJudge::new(
            Scripted::new(&[Step::Transient, Step::Transient, Step::Answer]),
            &cfg(|c| c.timeout_ms = 250),
        );
        let a = j.evaluate(&evidence("t")).await;
        assert_eq!(a.status, JudgeStatus::Timeout);
        assert!(a.reason.unwrap().contains("no time left to retry"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_breaker_opens_after_failures_and_one_trial_after_the_cool_down_closes_it() {
        let j = GuardedJudge::new(
            Scripted::new(&[Step::Transient, Step::Transient, Step::Transient]),
            &cfg(|c| c.retries = 0),
        );
        for i in 0..3 {
            let a = j.evaluate(&evidence(&format!("b{i}"))).await;
            assert_eq!(a.status, JudgeStatus::Unavailable);
        }
        assert_eq!(j.breaker_state(), BreakerState::Open);
        let a = j.evaluate(&evidence("b3")).await;
        assert!(a.reason.unwrap().contains("circuit breaker"));
        assert_eq!(
            j.backend.attempts.load(Relaxed),
            3,
            "the open breaker sent nothing"
        );
        tokio::time::advance(Duration::from_secs(29)).await;
        assert_eq!(j.breaker_state(), BreakerState::Open);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(j.breaker_state(), BreakerState::HalfOpen);
        let a = j.evaluate(&evidence("b4")).await;
        assert_eq!(a.status, JudgeStatus::Ok);
        assert_eq!(j.breaker_state(), BreakerState::Closed);
        assert_eq!(j.stats.breaker_opened.load(Relaxed), 1);
    }
}
