//! What routing remembers of each connection × model's recent service (SPEC R19's
//! facts for `p2c` and `least-used`): exponentially weighted means of the time to the
//! upstream's response headers (one for streams, where it is the time to first byte, one
//! for whole answers) and of success, and a decayed count of the requests sent. Pure:
//! each change takes `now`; the shell keeps one [`Stat`] per connection × model, feeds it
//! every attempt's outcome and seeds it from the request log at start.

use crate::UnixMillis;

/// Weight of a new sample in the means (0.3, as OmniRoute's tracker): the last few
/// attempts dominate, one outlier moves the mean by under a third.
pub const ALPHA: f64 = 0.3;
/// Half-life of the request count: a request sent ten minutes ago counts half.
pub const USE_HALF_LIFE_MS: u64 = 600_000;

/// One attempt's outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// The upstream answered usefully (a 2xx, or a client error that is the client's).
    pub ok: bool,
    /// Milliseconds to the response headers, when they came.
    pub header_ms: Option<u64>,
    pub stream: bool,
}

/// One connection × model's remembered service.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stat {
    /// Mean milliseconds to headers of whole answers; `None` before the first.
    pub latency_ms: Option<f64>,
    /// Mean milliseconds to headers of streams (time to first byte); `None` before the
    /// first.
    pub ttfb_ms: Option<f64>,
    /// Mean success, 0 to 1; 1 before any outcome.
    pub success: f64,
    /// Requests sent, decayed by [`USE_HALF_LIFE_MS`], as of `used_at`.
    used: f64,
    used_at: UnixMillis,
}

impl Default for Stat {
    fn default() -> Self {
        Self {
            latency_ms: None,
            ttfb_ms: None,
            success: 1.0,
            used: 0.0,
            used_at: 0,
        }
    }
}

fn ewma(old: Option<f64>, sample: f64) -> f64 {
    old.map_or(sample, |o| o + ALPHA * (sample - o))
}

impl Stat {
    /// Takes in an attempt's outcome.
    pub fn observe(&mut self, o: Observation) {
        self.success += ALPHA * (if o.ok { 1.0 } else { 0.0 } - self.success);
        if let (true, Some(ms)) = (o.ok, o.header_ms) {
            #[expect(clippy::cast_precision_loss, reason = "milliseconds, far below 2^52")]
            let ms = ms as f64;
            if o.stream {
                self.ttfb_ms = Some(ewma(self.ttfb_ms, ms));
            } else {
                self.latency_ms = Some(ewma(self.latency_ms, ms));
            }
        }
    }

    /// Counts one request sent at `now`.
    pub fn sent(&mut self, now: UnixMillis) {
        self.used = self.used_at(now) + 1.0;
        self.used_at = self.used_at.max(now);
    }

    /// The decayed request count at `now` (never below 0).
    pub fn used_at(&self, now: UnixMillis) -> f64 {
        #[expect(clippy::cast_precision_loss, reason = "a ratio of milliseconds")]
        let halves = now.saturating_sub(self.used_at) as f64 / USE_HALF_LIFE_MS as f64;
        (self.used * 0.5f64.powf(halves)).max(0.0)
    }

    /// The mean time to headers a request of this kind (`stream` or not) may expect: its
    /// own kind's, else the other's.
    pub fn header_ms(&self, stream: bool) -> Option<f64> {
        if stream {
            self.ttfb_ms.or(self.latency_ms)
        } else {
            self.latency_ms.or(self.ttfb_ms)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(ms: u64, stream: bool) -> Observation {
        Observation {
            ok: true,
            header_ms: Some(ms),
            stream,
        }
    }

    const FAILED: Observation = Observation {
        ok: false,
        header_ms: None,
        stream: false,
    };

    #[test]
    fn means_start_at_the_first_sample_and_move_by_alpha() {
        let mut s = Stat::default();
        assert_eq!((s.latency_ms, s.success), (None, 1.0));
        s.observe(ok(100, false));
        assert_eq!(s.latency_ms, Some(100.0));
        s.observe(ok(200, false));
        assert_eq!(s.latency_ms, Some(130.0));
        assert_eq!(s.ttfb_ms, None);
        assert_eq!(s.header_ms(true), Some(130.0));
        s.observe(ok(40, true));
        assert_eq!(s.header_ms(true), Some(40.0));
        assert_eq!(s.header_ms(false), Some(130.0));
        s.observe(FAILED);
        assert!((s.success - 0.7).abs() < 1e-12, "{}", s.success);
        assert_eq!(s.latency_ms, Some(130.0), "a failure has no latency");
        s.observe(FAILED);
        assert!((s.success - 0.49).abs() < 1e-12);
    }

    #[test]
    fn the_use_count_halves_every_ten_minutes() {
        let mut s = Stat::default();
        s.sent(1_000);
        s.sent(1_000);
        assert_eq!(s.used_at(1_000), 2.0);
        assert!((s.used_at(1_000 + USE_HALF_LIFE_MS) - 1.0).abs() < 1e-12);
        s.sent(1_000 + USE_HALF_LIFE_MS);
        assert!((s.used_at(1_000 + USE_HALF_LIFE_MS) - 2.0).abs() < 1e-12);
        // A clock read behind the last count does not inflate it.
        assert!((s.used_at(0) - 2.0).abs() < 1e-12);
    }

    proptest! {
        #[test]
        fn success_stays_within_0_and_1_and_use_never_goes_negative(
            events in prop::collection::vec((any::<bool>(), 0u64..100_000, any::<bool>(), 0u64..10_000_000), 0..200)
        ) {
            let mut s = Stat::default();
            for (good, ms, sent, at) in events {
                s.observe(Observation { ok: good, header_ms: Some(ms), stream: false });
                if sent {
                    s.sent(at);
                }
                prop_assert!((0.0..=1.0).contains(&s.success));
                prop_assert!(s.used_at(at) >= 0.0);
                if let Some(l) = s.latency_ms {
                    prop_assert!((0.0..100_000.0).contains(&l));
                }
            }
        }
    }
}
