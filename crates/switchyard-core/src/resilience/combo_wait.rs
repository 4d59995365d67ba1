//! Cooldown-aware combo retry (SPEC R9): when every target of a combo is held back by
//! something that ends on its own shortly — a rate-limit cooldown, a transient model
//! lock, an open breaker — the request waits for the earliest of them and is dispatched
//! again, within bounds, instead of failing. Holds that do not end on their own soon
//! (quota exhausted, auth failures, unknown models, terminal accounts) are never waited
//! for.
//!
//! The decision is pure: the caller passes the holds, the waits so far and the time
//! elapsed, and does the waiting itself.

/// `comboCooldownWait.*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub enabled: bool,
    /// Longest single wait.
    pub max_wait_ms: u64,
    /// Most waits per request.
    pub max_attempts: u32,
    /// Longest a request may spend in all, waits included.
    pub budget_ms: u64,
}

/// SPEC R9 defaults.
pub const DEFAULTS: Settings = Settings {
    enabled: true,
    max_wait_ms: 90_000,
    max_attempts: 5,
    budget_ms: 300_000,
};

/// What keeps one target out, as far as waiting is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Ends on its own in `retry_after_ms`.
    Transient { retry_after_ms: u64 },
    /// Quota exhausted, auth, not found, terminal: nothing to wait for.
    Lasting,
}

/// Whether a model-lock status is transient: rate limits, timeouts and server errors
/// pass; 402/403 (quota family, credits, rejection), 401 and 404 do not.
pub fn lock_is_transient(status: u16) -> bool {
    status == 408 || status == 429 || status >= 500
}

/// What to do when a round over the combo's targets ended without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Wait this long, then dispatch again.
    Wait { ms: u64 },
    /// Waiting is not allowed: answer 429 with the earliest transient expiry.
    RateLimited { retry_after_ms: u64 },
    /// Nothing transient holds the targets: `503 ALL_TARGETS_SKIPPED` (or whatever the
    /// round's own error was).
    NoTransientHold,
}

/// Decides after a round. `waited` counts the waits this request already made;
/// `elapsed_ms` is the time since it arrived.
pub fn decide(settings: &Settings, holds: &[Hold], waited: u32, elapsed_ms: u64) -> Decision {
    let Some(earliest) = holds
        .iter()
        .filter_map(|h| match h {
            Hold::Transient { retry_after_ms } => Some(*retry_after_ms),
            Hold::Lasting => None,
        })
        .min()
    else {
        return Decision::NoTransientHold;
    };
    // A hold that has just ended is dispatched again at once (a millisecond later).
    let wait = earliest.max(1);
    let budget_left = settings.budget_ms.saturating_sub(elapsed_ms);
    if settings.enabled
        && wait <= settings.max_wait_ms
        && waited < settings.max_attempts
        && budget_left >= wait
    {
        Decision::Wait { ms: wait }
    } else {
        Decision::RateLimited {
            retry_after_ms: earliest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Hold {
        Hold::Transient { retry_after_ms: ms }
    }

    #[test]
    fn waits_for_the_earliest_transient_hold() {
        assert_eq!(
            decide(&DEFAULTS, &[t(5_000), Hold::Lasting, t(2_000)], 0, 0),
            Decision::Wait { ms: 2_000 }
        );
        assert_eq!(decide(&DEFAULTS, &[t(0)], 0, 0), Decision::Wait { ms: 1 });
    }

    #[test]
    fn lasting_holds_are_never_waited_for() {
        assert_eq!(
            decide(&DEFAULTS, &[Hold::Lasting, Hold::Lasting], 0, 0),
            Decision::NoTransientHold
        );
        assert_eq!(decide(&DEFAULTS, &[], 0, 0), Decision::NoTransientHold);
    }

    #[test]
    fn each_bound_turns_the_wait_into_a_rate_limit_answer() {
        let limited = Decision::RateLimited {
            retry_after_ms: 60_000,
        };
        let off = Settings {
            enabled: false,
            ..DEFAULTS
        };
        assert_eq!(decide(&off, &[t(60_000)], 0, 0), limited);
        let short = Settings {
            max_wait_ms: 59_999,
            ..DEFAULTS
        };
        assert_eq!(decide(&short, &[t(60_000)], 0, 0), limited);
        assert_eq!(decide(&DEFAULTS, &[t(60_000)], 5, 0), limited);
        assert_eq!(
            decide(&DEFAULTS, &[t(60_000)], 4, 0),
            Decision::Wait { ms: 60_000 }
        );
        assert_eq!(decide(&DEFAULTS, &[t(60_000)], 0, 240_001), limited);
        assert_eq!(
            decide(&DEFAULTS, &[t(60_000)], 0, 240_000),
            Decision::Wait { ms: 60_000 }
        );
    }

    #[test]
    fn transient_lock_statuses() {
        for s in [408, 429, 500, 502, 503, 504] {
            assert!(lock_is_transient(s), "{s}");
        }
        for s in [401, 402, 403, 404] {
            assert!(!lock_is_transient(s), "{s}");
        }
    }
}
