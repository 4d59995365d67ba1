//! Burn rate (SPEC Q8): how fast a key is consuming a dimension, and when it will run out.
//!
//! An exponentially weighted moving average in continuous time: each recorded amount
//! `a` at time `t` updates the rate as `r = r * exp(-Δt/τ) + a/τ`, and reading at `now`
//! decays it the same way. For steady traffic of `a` every `Δ` (with `Δ` much smaller
//! than `τ`) the rate settles at `a/Δ`; irregular sampling needs no correction, which a
//! per-sample EMA with a fixed weight would. With fewer than two samples there is no
//! rate to report.
//!
//! The rate reads no clock: every observation and every read takes `now` from the caller.

use crate::UnixMillis;
use serde::Serialize;

/// The averaging time constant: five minutes smooths single large requests yet follows a
/// real change of pace within a few minutes.
pub const TAU_MS: f64 = 300_000.0;

#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BurnRate {
    /// Units per millisecond at `at`.
    rate: f64,
    at: UnixMillis,
    samples: u32,
}

/// What the usage API reports.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BurnReport {
    /// Units per second (named after the common case; the unit is the dimension's).
    pub tokens_per_second: f64,
    /// At the current rate, milliseconds until `remaining` is used up; `None` without
    /// a rate (fewer than two samples, or nothing consumed lately).
    pub time_to_exhaustion_ms: Option<u64>,
}

impl BurnRate {
    fn decayed(&self, now: UnixMillis) -> f64 {
        let dt = now.saturating_sub(self.at) as f64;
        self.rate * (-dt / TAU_MS).exp()
    }

    /// Records `amount` consumed at `now`.
    pub fn observe(&mut self, now: UnixMillis, amount: f64) {
        let now = now.max(self.at);
        self.rate = self.decayed(now) + amount.max(0.0) / TAU_MS;
        self.at = now;
        self.samples = self.samples.saturating_add(1);
    }

    /// The rate at `now` and the time until `remaining` units are gone.
    pub fn report(&self, now: UnixMillis, remaining: f64) -> BurnReport {
        if self.samples < 2 {
            return BurnReport {
                tokens_per_second: 0.0,
                time_to_exhaustion_ms: None,
            };
        }
        let per_ms = self.decayed(now.max(self.at));
        let time_to_exhaustion_ms = if remaining <= 0.0 {
            Some(0)
        } else if per_ms > 0.0 {
            Some((remaining / per_ms).ceil() as u64)
        } else {
            None
        };
        BurnReport {
            tokens_per_second: per_ms * 1000.0,
            time_to_exhaustion_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fewer_than_two_samples_report_no_rate() {
        let mut b = BurnRate::default();
        assert_eq!(b.report(0, 10.0).time_to_exhaustion_ms, None);
        b.observe(1_000, 50.0);
        let r = b.report(1_000, 10.0);
        assert_eq!(r.tokens_per_second, 0.0);
        assert_eq!(r.time_to_exhaustion_ms, None);
    }

    #[test]
    fn steady_traffic_settles_at_its_rate() {
        let mut b = BurnRate::default();
        // 100 units every second for an hour: 100/s.
        for s in 0..3_600u64 {
            b.observe(s * 1_000, 100.0);
        }
        let r = b.report(3_599_000, 1_000.0);
        assert!((r.tokens_per_second - 100.0).abs() < 0.2, "{r:?}");
        // 1000 remaining at ~100/s is ~10 s.
        let t = r.time_to_exhaustion_ms.unwrap();
        assert!((9_950..=10_050).contains(&t), "{t}");
    }

    #[test]
    fn the_rate_decays_when_traffic_stops() {
        let mut b = BurnRate::default();
        for s in 0..600u64 {
            b.observe(s * 1_000, 10.0);
        }
        let at_stop = b.report(599_000, 1.0).tokens_per_second;
        let later = b.report(599_000 + 300_000, 1.0).tokens_per_second;
        // One time constant later the rate is 1/e of what it was.
        assert!((later / at_stop - (-1.0f64).exp()).abs() < 1e-9);
    }

    #[test]
    fn nothing_remaining_means_exhausted_now() {
        let mut b = BurnRate::default();
        b.observe(0, 1.0);
        b.observe(1_000, 1.0);
        assert_eq!(b.report(1_000, 0.0).time_to_exhaustion_ms, Some(0));
        assert_eq!(b.report(1_000, -5.0).time_to_exhaustion_ms, Some(0));
    }
}
