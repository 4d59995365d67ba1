//! Slow start after recovery (issue 4, beyond the source design): a provider whose
//! breaker just closed, or a connection whose cooldown just ended, gets a growing share
//! of its usual traffic — an eighth at first, doubling every [`WINDOW_MS`] — instead of
//! full load at once, so an upstream that has only just come back is not knocked over
//! again by the backlog that built up while it was out.
//!
//! The share is applied deterministically: with a share of `1/n`, every `n`-th request
//! that could go to the recovering target does; the others try the next candidate
//! first. A recovering target that is a request's last option is always used.
//!
//! Both functions are pure: the caller passes when the target recovered, `now`, and its
//! per-target request count; nothing is kept here.

use crate::UnixMillis;

/// The first share after recovery.
pub const INITIAL_DIVISOR: u64 = 8;

/// How long each step lasts before the share doubles: three steps (30 s) to full load,
/// long enough for an upstream to warm its caches and connection pools.
pub const WINDOW_MS: u64 = 10_000;

/// The divisor `n` of the share `1/n` at `now` for a target recovered at `since`;
/// 1 = full load (slow start is over).
pub fn divisor(since: UnixMillis, now: UnixMillis) -> u64 {
    let steps = now.saturating_sub(since) / WINDOW_MS;
    (INITIAL_DIVISOR >> steps.min(63)).max(1)
}

/// Whether request number `ticket` (counted per target) goes to the recovering target.
pub fn admits(divisor: u64, ticket: u64) -> bool {
    divisor <= 1 || ticket.is_multiple_of(divisor)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000_000;

    #[test]
    fn the_share_doubles_every_window_until_full() {
        let d: Vec<u64> = [0, 9_999, 10_000, 20_000, 30_000, 1_000_000]
            .iter()
            .map(|dt| divisor(T0, T0 + dt))
            .collect();
        assert_eq!(d, [8, 8, 4, 2, 1, 1]);
    }

    #[test]
    fn every_nth_ticket_is_admitted() {
        let admitted = (0..64).filter(|t| admits(8, *t)).count();
        assert_eq!(admitted, 8);
        assert!((0..10).all(|t| admits(1, t)));
    }
}
