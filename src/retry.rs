//! How long to wait before trying a refused call again: exponential backoff between a floor
//! and a cap, raised to what the server asked (`Retry-After`) but never past the cap.
//!
//! A server that answers `429` with `Retry-After: 0` (or a proxy that sends it) must not be
//! answered with a request per millisecond, and one that says `Retry-After: 3600` must not
//! hold a caller that has a deadline of its own: the floor and the cap hold whatever the
//! answer says. The schedule is [`backon`]'s exponential one; one policy for every client of
//! loopguard that retries: the command hook, the judge, the task log on a full disk, and the
//! sled store reopening a directory another handle is letting go of.

use backon::{BackoffBuilder, ExponentialBuilder};
use std::time::Duration;

/// A retry policy: the first wait (`floor`), growing by `factor` each time up to `cap`, with
/// optional jitter (a random extra of up to the wait itself, kept under the cap).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    pub floor: Duration,
    pub cap: Duration,
    pub factor: f32,
    pub jitter: bool,
}

impl Default for RetryPolicy {
    /// 100 ms, doubling, at most 2 s apart, no jitter.
    fn default() -> Self {
        RetryPolicy {
            floor: Duration::from_millis(100),
            cap: Duration::from_secs(2),
            factor: 2.0,
            jitter: false,
        }
    }
}

impl RetryPolicy {
    /// The waits of one call's retries.
    pub fn backoff(&self) -> Backoff {
        let mut builder = ExponentialBuilder::default()
            .with_min_delay(self.floor)
            .with_max_delay(self.cap.max(self.floor))
            .with_factor(self.factor.max(1.0))
            .without_max_times();
        if self.jitter {
            builder = builder.with_jitter();
        }
        Backoff {
            policy: *self,
            steps: builder.build(),
        }
    }
}

/// The waits of one call's retries, one [`Backoff::next`] per retry.
#[derive(Debug)]
pub struct Backoff {
    policy: RetryPolicy,
    steps: backon::ExponentialBackoff,
}

impl Backoff {
    /// The wait before the next attempt: the schedule's next step, or what the server asked
    /// when that is longer — never under the floor, never over the cap.
    pub fn next(&mut self, asked: Option<Duration>) -> Duration {
        let RetryPolicy { floor, cap, .. } = self.policy;
        let cap = cap.max(floor);
        // The schedule multiplies in f32: 200.000003 ms is 200 ms.
        let step = self
            .steps
            .next()
            .map_or(cap, |d| Duration::from_micros(d.as_micros() as u64));
        asked.map_or(step, |a| a.max(step)).clamp(floor, cap)
    }
}

/// A `Retry-After` header's value as a wait: delay-seconds (RFC 9110 §10.2.3). An HTTP date is
/// not read (loopguard sends seconds); `None` then, and the schedule decides.
pub fn retry_after(value: &str) -> Option<Duration> {
    let v = value.trim();
    (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .then(|| v.parse::<u64>().ok().map(Duration::from_secs))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Issue 43: `Retry-After: 0` (or none) still waits the floor, growing; a long
    /// `Retry-After` is cut to the cap.
    #[test]
    fn waits_grow_from_the_floor_to_the_cap_whatever_the_server_asks() {
        let policy = RetryPolicy {
            floor: ms(100),
            cap: ms(1000),
            factor: 2.0,
            jitter: false,
        };
        let mut b = policy.backoff();
        let waits: Vec<Duration> = (0..6).map(|_| b.next(Some(ms(0)))).collect();
        assert_eq!(
            waits,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
        let mut b = policy.backoff();
        assert_eq!(b.next(None), ms(100));
        assert_eq!(b.next(Some(Duration::from_secs(3600))), ms(1000));
        assert_eq!(
            b.next(Some(ms(500))),
            ms(500),
            "longer than the step: as asked"
        );
        let mut jittered = RetryPolicy {
            jitter: true,
            ..policy
        }
        .backoff();
        for _ in 0..50 {
            let w = jittered.next(Some(ms(0)));
            assert!(w >= ms(100) && w <= ms(1000), "{w:?}");
        }
    }

    #[test]
    fn retry_after_is_delay_seconds() {
        assert_eq!(retry_after("0"), Some(Duration::ZERO));
        assert_eq!(retry_after(" 3 "), Some(Duration::from_secs(3)));
        assert_eq!(retry_after("-1"), None);
        assert_eq!(retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(retry_after(""), None);
    }
}
