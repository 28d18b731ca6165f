//! Test judges for measurement: answer one verdict to everything and count the calls.
//!
//! They bound what a judge can do to the figures without an LLM: one that always says
//! `no_progress` turns every ambiguous event into a loop (the most a judge can add to recall, and
//! the worst case for false alarms), one that always says `progress` must leave the figures as
//! they are without a judge (ambiguous cases already default to "not a loop").

use crate::judge::guard::BreakerState;
use crate::judge::{
    Evidence, Judge, JudgeAnswer, JudgeFuture, JudgeSnapshot, JudgeStatus, JudgeVerdict,
};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A judge that gives `verdict` to every question, counting them.
#[derive(Debug)]
pub struct AlwaysJudge {
    verdict: JudgeVerdict,
    calls: AtomicU64,
}

impl AlwaysJudge {
    pub fn new(verdict: JudgeVerdict) -> Self {
        AlwaysJudge {
            verdict,
            calls: AtomicU64::new(0),
        }
    }

    pub fn verdict(&self) -> JudgeVerdict {
        self.verdict
    }

    /// Questions answered so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Relaxed)
    }
}

impl Judge for AlwaysJudge {
    fn evaluate<'a>(&'a self, _evidence: &'a Evidence) -> JudgeFuture<'a> {
        self.calls.fetch_add(1, Relaxed);
        let answer = JudgeAnswer {
            status: JudgeStatus::Ok,
            verdict: Some(self.verdict),
            confidence: Some(1.0),
            reason: Some(format!(
                "test judge: always {} (loopguard eval --judge-always)",
                self.verdict.as_str()
            )),
        };
        Box::pin(async move { answer })
    }

    fn stats(&self) -> Option<JudgeSnapshot> {
        let n = self.calls();
        Some(JudgeSnapshot {
            backend: "always",
            consultations: n,
            attempts: n,
            ok: n,
            timeouts: 0,
            unavailable: 0,
            invalid: 0,
            cache_hits: 0,
            short_circuited: 0,
            breaker_opened: 0,
            breaker: BreakerState::Closed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_the_same_and_counts() {
        let j = AlwaysJudge::new(JudgeVerdict::NoProgress);
        let evidence = Evidence {
            task_id: "t".into(),
            goal: None,
            question: "q".into(),
            recent: Vec::new(),
            current: crate::judge::EvidenceEvent {
                seq: 1,
                kind: "failure".into(),
                text: "x".into(),
            },
            metrics: None,
            candidate: None,
        };
        for _ in 0..3 {
            let a = j.evaluate(&evidence).await;
            assert_eq!(
                (a.status, a.verdict),
                (JudgeStatus::Ok, Some(JudgeVerdict::NoProgress))
            );
        }
        assert_eq!(j.calls(), 3);
        assert_eq!(j.stats().map(|s| s.consultations), Some(3));
    }
}
