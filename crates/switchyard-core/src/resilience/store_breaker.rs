//! The quota store's breaker (SPEC Q4, Q6): whether the gateway should call a shared
//! counter store (Redis) at all, given how its recent calls went. A state machine with
//! `now` passed in and no timers.
//!
//! - `Closed`: every call goes to the store. Consecutive failures count up; a success
//!   resets the count. At `open_after` consecutive failures the breaker opens.
//! - `Open`: no call goes to the store until the back-off has passed; requests fail open
//!   at once instead of each waiting for a reconnect or a timeout.
//! - `Probing`: the back-off has passed. One call at a time goes through as a probe:
//!   its success closes the breaker, its failure re-opens it for twice the back-off (up
//!   to `max_backoff_ms`). A probe that never reports (its request was cancelled) is
//!   replaced by a new one after `probe_timeout_ms`, so a lost probe cannot wedge it.
//!
//! Any success closes the breaker, whatever its state: the store answered. While the
//! breaker is not closed the shell also probes the store off the request path
//! ([`StoreBreaker::wants_probe`]), so that metering resumes as soon as the store answers
//! again, not only when the back-off ends.

use crate::UnixMillis;

/// Thresholds and back-offs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Consecutive failures that open the breaker (at least 1).
    pub open_after: u32,
    /// Back-off after the first opening.
    pub backoff_ms: u64,
    /// The longest back-off.
    pub max_backoff_ms: u64,
    /// How long a probe may take before another one is let through.
    pub probe_timeout_ms: u64,
}

/// Where the breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Closed { failures: u32 },
    Open { until: UnixMillis, backoff_ms: u64 },
    Probing { since: UnixMillis, backoff_ms: u64 },
}

/// Whether a call may go to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The breaker is closed: call.
    Call,
    /// The back-off has passed: call, as the one probe.
    Probe,
    /// Fail fast: the store is considered unavailable.
    Reject,
}

/// What a recorded outcome changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    None,
    /// The breaker opened (or re-opened) for this many milliseconds.
    Opened {
        backoff_ms: u64,
    },
    /// The breaker closed after being open or probing.
    Closed,
}

/// See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreBreaker {
    config: Config,
    state: State,
}

impl StoreBreaker {
    pub fn new(config: Config) -> Self {
        Self {
            config,
            state: State::Closed { failures: 0 },
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// `closed`, `open` or `half_open`, for health views.
    pub fn state_name(&self) -> &'static str {
        match self.state {
            State::Closed { .. } => "closed",
            State::Open { .. } => "open",
            State::Probing { .. } => "half_open",
        }
    }

    /// Whether the shell should probe the store off the request path: it is not known to
    /// answer (open or probing).
    pub fn wants_probe(&self) -> bool {
        !matches!(self.state, State::Closed { .. })
    }

    /// Whether a call made at `now` may go to the store.
    pub fn admit(&mut self, now: UnixMillis) -> Verdict {
        match self.state {
            State::Closed { .. } => Verdict::Call,
            State::Open { until, backoff_ms } if now >= until => {
                self.state = State::Probing {
                    since: now,
                    backoff_ms,
                };
                Verdict::Probe
            }
            State::Open { .. } => Verdict::Reject,
            State::Probing { since, backoff_ms }
                if now >= since.saturating_add(self.config.probe_timeout_ms) =>
            {
                self.state = State::Probing {
                    since: now,
                    backoff_ms,
                };
                Verdict::Probe
            }
            State::Probing { .. } => Verdict::Reject,
        }
    }

    /// The store answered.
    pub fn success(&mut self) -> Change {
        let was_closed = matches!(self.state, State::Closed { .. });
        self.state = State::Closed { failures: 0 };
        if was_closed {
            Change::None
        } else {
            Change::Closed
        }
    }

    /// A call failed at `now` (unreachable, timed out).
    pub fn failure(&mut self, now: UnixMillis) -> Change {
        match self.state {
            State::Closed { failures } => {
                let failures = failures.saturating_add(1);
                if failures >= self.config.open_after.max(1) {
                    self.open(now, self.config.backoff_ms)
                } else {
                    self.state = State::Closed { failures };
                    Change::None
                }
            }
            State::Probing { backoff_ms, .. } => {
                let next = backoff_ms
                    .saturating_mul(2)
                    .min(self.config.max_backoff_ms)
                    .max(self.config.backoff_ms);
                self.open(now, next)
            }
            // A call admitted before the breaker opened, failing late: already counted.
            State::Open { .. } => Change::None,
        }
    }

    fn open(&mut self, now: UnixMillis, backoff_ms: u64) -> Change {
        self.state = State::Open {
            until: now.saturating_add(backoff_ms),
            backoff_ms,
        };
        Change::Opened { backoff_ms }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: Config = Config {
        open_after: 3,
        backoff_ms: 1_000,
        max_backoff_ms: 8_000,
        probe_timeout_ms: 5_000,
    };

    #[test]
    fn consecutive_failures_open_it_and_a_success_in_between_resets_the_count() {
        let mut b = StoreBreaker::new(CONFIG);
        assert_eq!(b.failure(10), Change::None);
        assert_eq!(b.failure(11), Change::None);
        assert_eq!(b.success(), Change::None);
        assert_eq!(b.state(), State::Closed { failures: 0 });
        assert_eq!(b.failure(12), Change::None);
        assert_eq!(b.failure(13), Change::None);
        assert_eq!(b.state(), State::Closed { failures: 2 });
        assert_eq!(b.admit(13), Verdict::Call);
        assert_eq!(b.failure(14), Change::Opened { backoff_ms: 1_000 });
        assert_eq!(
            b.state(),
            State::Open {
                until: 1_014,
                backoff_ms: 1_000
            }
        );
        assert_eq!(b.state_name(), "open");
    }

    #[test]
    fn it_wants_probes_off_the_request_path_while_not_closed_and_one_success_closes_it() {
        let mut b = StoreBreaker::new(CONFIG);
        assert!(!b.wants_probe());
        b.failure(0);
        b.failure(1);
        assert!(!b.wants_probe(), "still closed after two failures");
        assert_eq!(b.failure(2), Change::Opened { backoff_ms: 1_000 });
        assert!(b.wants_probe());
        assert_eq!(b.admit(1_002), Verdict::Probe);
        assert!(b.wants_probe(), "probing");
        assert_eq!(b.failure(1_003), Change::Opened { backoff_ms: 2_000 });
        // Long before the back-off ends, a probe that got an answer closes it.
        assert_eq!(b.admit(1_004), Verdict::Reject);
        assert_eq!(b.success(), Change::Closed);
        assert!(!b.wants_probe());
        assert_eq!(b.admit(1_005), Verdict::Call);
    }

    #[test]
    fn open_rejects_until_the_back_off_ends_then_lets_one_probe_through() {
        let mut b = StoreBreaker::new(CONFIG);
        for t in 0..3 {
            b.failure(t);
        }
        // Opened at 2 for 1 s.
        assert_eq!(b.admit(2), Verdict::Reject);
        assert_eq!(b.admit(1_001), Verdict::Reject);
        assert_eq!(b.admit(1_002), Verdict::Probe);
        assert_eq!(b.state_name(), "half_open");
        // While the probe runs, everything else fails fast.
        assert_eq!(b.admit(1_003), Verdict::Reject);
        assert_eq!(b.admit(6_001), Verdict::Reject);
        assert_eq!(b.success(), Change::Closed);
        assert_eq!(b.admit(6_002), Verdict::Call);
        assert_eq!(b.state(), State::Closed { failures: 0 });
    }

    #[test]
    fn a_failed_probe_doubles_the_back_off_up_to_the_maximum() {
        let mut b = StoreBreaker::new(CONFIG);
        for t in 0..3 {
            b.failure(t);
        }
        let mut now = 2;
        let mut seen = Vec::new();
        for _ in 0..5 {
            let State::Open { until, .. } = b.state() else {
                panic!("not open: {:?}", b.state());
            };
            now = until;
            assert_eq!(b.admit(now - 1), Verdict::Reject);
            assert_eq!(b.admit(now), Verdict::Probe);
            match b.failure(now) {
                Change::Opened { backoff_ms } => seen.push(backoff_ms),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(seen, vec![2_000, 4_000, 8_000, 8_000, 8_000]);
        // A success closes it; the next opening starts from the base back-off again.
        assert_eq!(b.admit(now + 8_000), Verdict::Probe);
        assert_eq!(b.success(), Change::Closed);
        for t in 0..3 {
            b.failure(now + 8_000 + t);
        }
        assert_eq!(
            b.state(),
            State::Open {
                until: now + 8_002 + 1_000,
                backoff_ms: 1_000
            }
        );
    }

    #[test]
    fn a_probe_that_never_reports_is_replaced_after_the_probe_timeout() {
        let mut b = StoreBreaker::new(CONFIG);
        for t in 0..3 {
            b.failure(t);
        }
        assert_eq!(b.admit(1_002), Verdict::Probe);
        assert_eq!(b.admit(6_001), Verdict::Reject);
        assert_eq!(b.admit(6_002), Verdict::Probe);
        assert_eq!(
            b.state(),
            State::Probing {
                since: 6_002,
                backoff_ms: 1_000
            }
        );
        assert_eq!(b.admit(6_003), Verdict::Reject);
    }

    #[test]
    fn late_outcomes_of_calls_admitted_before_opening() {
        let mut b = StoreBreaker::new(CONFIG);
        for t in 0..3 {
            b.failure(t);
        }
        // A failure that was already in flight does not push the back-off further.
        assert_eq!(b.failure(500), Change::None);
        assert_eq!(
            b.state(),
            State::Open {
                until: 1_002,
                backoff_ms: 1_000
            }
        );
        // A success that was in flight shows the store answers: closed at once.
        assert_eq!(b.success(), Change::Closed);
        assert_eq!(b.admit(501), Verdict::Call);
    }

    #[test]
    fn a_threshold_of_zero_opens_at_the_first_failure() {
        let mut b = StoreBreaker::new(Config {
            open_after: 0,
            ..CONFIG
        });
        assert_eq!(b.failure(7), Change::Opened { backoff_ms: 1_000 });
        assert_eq!(b.admit(7), Verdict::Reject);
    }

    #[test]
    fn times_near_the_end_of_the_clock_saturate() {
        let mut b = StoreBreaker::new(CONFIG);
        for _ in 0..3 {
            b.failure(u64::MAX - 10);
        }
        assert_eq!(
            b.state(),
            State::Open {
                until: u64::MAX,
                backoff_ms: 1_000
            }
        );
        assert_eq!(b.admit(u64::MAX - 1), Verdict::Reject);
        assert_eq!(b.admit(u64::MAX), Verdict::Probe);
    }
}
