//! Live figures for the dashboard and `GET /v1/stats`: what the Prometheus counters say since
//! start, and the last minute in one-second slots. A page (or curl) then reads rates and latency
//! quantiles as numbers, instead of redoing Prometheus's `rate()` and `histogram_quantile()` on
//! scraped text.
//!
//! Slots are keyed by whole seconds since start (a monotonic clock, so a wall-clock jump does not
//! empty or double the window). Latency goes into fixed exponential buckets, four per octave from
//! 50 µs to ~52 s, so a quantile is off by at most a bucket's width (±9 %).

use std::sync::Mutex;
use std::time::Instant;

/// Seconds in the live window.
pub const WINDOW_SECS: u64 = 60;
const FIRST_BOUND_SECS: f64 = 0.000_05;
const PER_OCTAVE: i32 = 4;
/// Finite buckets; one more catches everything slower.
const BUCKETS: usize = 20 * PER_OCTAVE as usize;

fn upper_bound(i: usize) -> f64 {
    FIRST_BOUND_SECS * 2f64.powf(i as f64 / f64::from(PER_OCTAVE))
}

fn bucket_of(secs: f64) -> usize {
    // NaN and anything at or below the first bound go in the first bucket.
    if secs.is_nan() || secs <= FIRST_BOUND_SECS {
        return 0;
    }
    let i = ((secs / FIRST_BOUND_SECS).log2() * f64::from(PER_OCTAVE)).ceil() as usize;
    // Float rounding may put a value exactly on a bound one bucket too high.
    let i = if i > 0 && secs <= upper_bound(i - 1) {
        i - 1
    } else {
        i
    };
    i.min(BUCKETS)
}

/// Counts of latencies per bucket.
#[derive(Clone)]
pub struct Histogram {
    counts: [u64; BUCKETS + 1],
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: [0; BUCKETS + 1],
        }
    }
}

impl Histogram {
    pub fn observe(&mut self, secs: f64) {
        self.counts[bucket_of(secs)] += 1;
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    fn add(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
    }

    /// The `q` quantile in seconds, interpolated inside its bucket; `None` with no observations.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut seen = 0u64;
        for (i, &n) in self.counts.iter().enumerate() {
            if n == 0 {
                continue;
            }
            if (seen + n) as f64 >= rank {
                if i == BUCKETS {
                    // Slower than the last bound: all that can be said is "at least".
                    return Some(upper_bound(BUCKETS - 1));
                }
                let lo = if i == 0 { 0.0 } else { upper_bound(i - 1) };
                let hi = upper_bound(i);
                let within = ((rank - seen as f64) / n as f64).clamp(0.0, 1.0);
                return Some(lo + (hi - lo) * within);
            }
            seen += n;
        }
        Some(upper_bound(BUCKETS - 1))
    }
}

#[derive(Clone, Default)]
struct Slot {
    /// Second since start this slot holds; slots of older seconds are stale.
    second: u64,
    events: u64,
    needing_model: u64,
    needing_judge: u64,
    loops: u64,
    latency: Histogram,
}

/// What happened in a span of time.
#[derive(Clone, Default)]
pub struct Figures {
    pub events: u64,
    pub needing_model: u64,
    pub needing_judge: u64,
    pub loops: u64,
    /// `/v1/evaluate` requests answered 2xx, by latency.
    pub latency: Histogram,
}

impl Figures {
    fn add(&mut self, s: &Slot) {
        self.events += s.events;
        self.needing_model += s.needing_model;
        self.needing_judge += s.needing_judge;
        self.loops += s.loops;
        self.latency.add(&s.latency);
    }
}

struct Ring {
    slots: Vec<Slot>,
    totals: Figures,
}

/// The live window and the totals since start.
pub struct Live {
    started: Instant,
    ring: Mutex<Ring>,
}

impl Default for Live {
    fn default() -> Self {
        Live::new()
    }
}

impl Live {
    pub fn new() -> Self {
        Live {
            started: Instant::now(),
            ring: Mutex::new(Ring {
                slots: vec![Slot::default(); WINDOW_SECS as usize],
                totals: Figures::default(),
            }),
        }
    }

    pub fn uptime_secs(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn record(&self, at: Instant, f: impl Fn(&mut Slot)) {
        let second = at.saturating_duration_since(self.started).as_secs();
        let mut ring = self.ring.lock().expect("live figures lock");
        let slot = &mut ring.slots[(second % WINDOW_SECS) as usize];
        if slot.second != second {
            *slot = Slot {
                second,
                ..Slot::default()
            };
        }
        f(slot);
        let mut one = Slot::default();
        f(&mut one);
        ring.totals.add(&one);
    }

    /// One evaluated event.
    pub fn event(&self, needed_model: bool, needed_judge: bool, is_loop: bool) {
        self.record(Instant::now(), |s| {
            s.events += 1;
            s.needing_model += u64::from(needed_model);
            s.needing_judge += u64::from(needed_judge);
            s.loops += u64::from(is_loop);
        });
    }

    /// One successful `/v1/evaluate` request and how long it took.
    pub fn evaluate_request(&self, secs: f64) {
        self.record(Instant::now(), |s| s.latency.observe(secs));
    }

    /// The last [`WINDOW_SECS`] seconds (fewer right after start, as many as have passed) and
    /// the totals since start.
    pub fn read(&self) -> (f64, Figures, Figures) {
        self.read_at(Instant::now())
    }

    fn read_at(&self, now: Instant) -> (f64, Figures, Figures) {
        let elapsed = now.saturating_duration_since(self.started);
        let current = elapsed.as_secs();
        let oldest = current.saturating_sub(WINDOW_SECS - 1);
        let ring = self.ring.lock().expect("live figures lock");
        let mut window = Figures::default();
        for s in &ring.slots {
            if s.second >= oldest && s.second <= current {
                window.add(s);
            }
        }
        // The window ends now, inside the current second.
        let span = (elapsed.as_secs_f64() - oldest as f64).max(1e-3);
        (span, window, ring.totals.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn buckets_hold_their_values() {
        for secs in [
            0.0, 0.000_01, 0.000_05, 0.000_06, 0.001, 0.0123, 0.5, 3.0, 40.0,
        ] {
            let i = bucket_of(secs);
            assert!(secs <= upper_bound(i), "{secs} above bucket {i}");
            if i > 0 {
                assert!(secs > upper_bound(i - 1), "{secs} belongs below bucket {i}");
            }
        }
        assert_eq!(bucket_of(1e6), BUCKETS, "overflow bucket");
    }

    #[test]
    fn quantiles_are_within_a_bucket() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile(0.5), None);
        // 1..=100 ms, evenly.
        for ms in 1..=100 {
            h.observe(f64::from(ms) / 1000.0);
        }
        for (q, want) in [(0.5, 0.050), (0.95, 0.095), (0.99, 0.099)] {
            let got = h.quantile(q).unwrap();
            assert!(
                (got - want).abs() / want < 0.2,
                "p{q}: {got} vs {want} (buckets are ±19% wide)"
            );
        }
    }

    #[test]
    fn the_window_forgets_what_is_older_than_a_minute() {
        let live = Live::new();
        let t0 = live.started;
        live.record(t0, |s| s.events += 5);
        live.record(t0 + Duration::from_secs(30), |s| s.events += 2);
        let (span, w, totals) = live.read_at(t0 + Duration::from_millis(30_500));
        assert_eq!((w.events, totals.events), (7, 7));
        assert!((span - 30.5).abs() < 1e-9, "{span}");
        // 70 s after start: the first second is out of the window, the totals keep it.
        let (span, w, totals) = live.read_at(t0 + Duration::from_secs(70));
        assert_eq!((w.events, totals.events), (2, 7));
        // Seconds 11..=70, the last of them just begun.
        assert!((span - 59.0).abs() < 1e-9, "{span}");
        // A slot reused a minute later starts from zero.
        live.record(t0 + Duration::from_secs(90), |s| s.events += 1);
        let (_, w, totals) = live.read_at(t0 + Duration::from_secs(90));
        assert_eq!((w.events, totals.events), (1, 8));
    }

    #[test]
    fn events_count_model_judge_and_loops() {
        let live = Live::new();
        live.event(true, false, false);
        live.event(false, true, true);
        live.event(false, false, true);
        live.evaluate_request(0.002);
        let (_, w, t) = live.read();
        assert_eq!(
            (w.events, w.needing_model, w.needing_judge, w.loops),
            (3, 1, 1, 2)
        );
        assert_eq!(t.latency.count(), 1);
    }
}
