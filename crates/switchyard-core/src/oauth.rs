//! OAuth subscription credentials (SPEC G4, R4): the tokens a Codex or Claude
//! subscription authenticates with are refreshed before they expire and after a 401,
//! and failed refreshes end, after [`FAILURES_TO_EXPIRE`] in a row, in `expired`. This
//! module decides when a refresh is due and what a failure leads to; the shell calls
//! the token endpoint and stores the tokens. A state machine with `now` passed in and
//! no I/O.

use crate::UnixMillis;
use serde::{Deserialize, Serialize};

/// Failed refreshes in a row after which the connection is `expired` (SPEC R4's
/// `EXPIRED_RETRY_MAX`: the first failure and the retries that follow it with back-off).
pub const FAILURES_TO_EXPIRE: u32 = crate::resilience::cooldown::EXPIRED_RETRY_MAX;

/// The wait after a first failed refresh; each later one waits four times longer.
pub const RETRY_BASE_MS: u64 = 30_000;

/// A 401 answered with a token refreshed less than this long ago is the account's
/// answer, not the token's: it is not refreshed again for it.
pub const FRESH_FOR_MS: u64 = 60_000;

/// Longest error text kept for the operator views.
const MAX_ERROR_CHARS: usize = 300;

/// One connection's refreshes, stored with its tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Refreshes {
    /// When the tokens were last refreshed (or imported).
    pub last_refresh_at: Option<UnixMillis>,
    /// Failed refreshes since the last success.
    pub failures: u32,
    /// No refresh is tried before this, after a failure.
    pub retry_at: Option<UnixMillis>,
    /// The token endpoint's last error, redacted by the caller.
    pub last_error: Option<String>,
}

/// Why a refresh is wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The access token expires within the margin.
    Expiring,
    /// The upstream answered 401.
    Unauthorized,
}

/// What a failed refresh leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// Tried again from this time on; the connection cools until then.
    RetryAt(UnixMillis),
    /// The connection is `expired` (terminal until a new credential or a successful
    /// manual refresh).
    Expired,
}

impl Refreshes {
    /// Whether a refresh should be tried at `now` for `why`: the token is known to
    /// expire at `expires_at` (when the credential says), and is refreshed `margin_ms`
    /// before. Never while a failed refresh waits for its retry, and never for a 401
    /// met right after a refresh.
    pub fn wanted(
        &self,
        why: Why,
        expires_at: Option<UnixMillis>,
        margin_ms: u64,
        now: UnixMillis,
    ) -> bool {
        if self.retry_at.is_some_and(|t| now < t) || self.failures >= FAILURES_TO_EXPIRE {
            return false;
        }
        match why {
            Why::Expiring => expires_at.is_some_and(|t| now >= t.saturating_sub(margin_ms)),
            Why::Unauthorized => self
                .last_refresh_at
                .is_none_or(|t| now.saturating_sub(t) >= FRESH_FOR_MS),
        }
    }

    /// A refresh (or a new credential) succeeded at `now`: failures are forgotten.
    pub fn on_success(&mut self, now: UnixMillis) {
        *self = Self {
            last_refresh_at: Some(now),
            ..Self::default()
        };
    }

    /// A refresh failed at `now` with `error` (already redacted).
    pub fn on_failure(&mut self, error: &str, now: UnixMillis) -> Failed {
        self.failures = self.failures.saturating_add(1);
        self.last_error = Some(error.chars().take(MAX_ERROR_CHARS).collect());
        if self.failures >= FAILURES_TO_EXPIRE {
            self.retry_at = None;
            return Failed::Expired;
        }
        let steps = self.failures.saturating_sub(1).min(8);
        let wait = RETRY_BASE_MS.saturating_mul(4u64.saturating_pow(steps));
        let at = now.saturating_add(wait);
        self.retry_at = Some(at);
        Failed::RetryAt(at)
    }

    /// Whether the failures made the connection `expired`.
    pub fn expired(&self) -> bool {
        self.failures >= FAILURES_TO_EXPIRE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000_000;
    const MARGIN: u64 = 300_000;

    #[test]
    fn a_refresh_is_due_within_the_margin_of_the_expiry_and_never_without_one() {
        let r = Refreshes::default();
        let expires = Some(T0 + 3_600_000);
        let due = |now| r.wanted(Why::Expiring, expires, MARGIN, now);
        assert!(!due(T0));
        assert!(!due(T0 + 3_600_000 - MARGIN - 1));
        assert!(due(T0 + 3_600_000 - MARGIN));
        assert!(due(T0 + 3_600_000 + 1));
        assert!(!r.wanted(Why::Expiring, None, MARGIN, T0));
        // A margin longer than the token's life: due at once.
        assert!(r.wanted(Why::Expiring, Some(10), MARGIN, 0));
    }

    #[test]
    fn a_401_right_after_a_refresh_is_the_account_s_answer() {
        let mut r = Refreshes::default();
        assert!(r.wanted(Why::Unauthorized, None, MARGIN, T0));
        r.on_success(T0);
        assert!(!r.wanted(Why::Unauthorized, None, MARGIN, T0 + FRESH_FOR_MS - 1));
        assert!(r.wanted(Why::Unauthorized, None, MARGIN, T0 + FRESH_FOR_MS));
    }

    #[test]
    fn failures_back_off_and_the_third_in_a_row_expires_the_connection() {
        let mut r = Refreshes::default();
        let expires = Some(T0);
        assert_eq!(
            r.on_failure("invalid_grant", T0),
            Failed::RetryAt(T0 + 30_000)
        );
        assert!(!r.wanted(Why::Expiring, expires, MARGIN, T0 + 29_999));
        assert!(!r.wanted(Why::Unauthorized, expires, MARGIN, T0 + 29_999));
        assert!(r.wanted(Why::Expiring, expires, MARGIN, T0 + 30_000));
        assert_eq!(
            r.on_failure("timed out", T0 + 30_000),
            Failed::RetryAt(T0 + 30_000 + 120_000)
        );
        assert_eq!(r.failures, 2);
        assert!(!r.expired());
        assert_eq!(r.on_failure("invalid_grant", T0 + 150_000), Failed::Expired);
        assert!(r.expired());
        assert_eq!(r.last_error.as_deref(), Some("invalid_grant"));
        // Expired: no more tries until a success (a new credential, a manual refresh).
        assert!(!r.wanted(Why::Expiring, expires, MARGIN, T0 + 10_000_000));
        assert!(!r.wanted(Why::Unauthorized, expires, MARGIN, T0 + 10_000_000));
        r.on_success(T0 + 10_000_000);
        assert_eq!(
            r,
            Refreshes {
                last_refresh_at: Some(T0 + 10_000_000),
                ..Refreshes::default()
            }
        );
    }

    #[test]
    fn a_success_between_failures_starts_the_count_again_and_errors_are_bounded() {
        let mut r = Refreshes::default();
        r.on_failure("x", T0);
        r.on_failure("x", T0 + 30_000);
        r.on_success(T0 + 200_000);
        assert_eq!(
            r.on_failure(&"e".repeat(1_000), T0 + 300_000),
            Failed::RetryAt(T0 + 330_000)
        );
        assert_eq!(
            r.last_error.as_ref().map(String::len),
            Some(MAX_ERROR_CHARS)
        );
    }
}
