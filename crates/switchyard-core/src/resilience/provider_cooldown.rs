//! The opt-in provider cooldown (SPEC R2): a time-window gate beside the breaker. A
//! provider is cooled only after `threshold` provider-level failures within `window`;
//! then it is skipped for `cooldown`. One success clears the window. Off by default
//! (`PROVIDER_COOLDOWN_ENABLED`).
//!
//! A state machine with `now` passed in, no timers and no I/O.

use crate::domain::AuthClass;
use crate::UnixMillis;
use std::collections::VecDeque;

/// One auth class's gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    pub threshold: u32,
    pub window_ms: u64,
    pub cooldown_ms: u64,
}

impl Profile {
    /// OAuth: 10 failures in 15 min → 5 min; API key (and local): 15 in 30 min → 10 min.
    pub fn for_class(class: AuthClass) -> Self {
        match class {
            AuthClass::Oauth => Self {
                threshold: 10,
                window_ms: 15 * 60_000,
                cooldown_ms: 5 * 60_000,
            },
            AuthClass::Apikey | AuthClass::Local => Self {
                threshold: 15,
                window_ms: 30 * 60_000,
                cooldown_ms: 10 * 60_000,
            },
        }
    }
}

/// One provider's gate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gate {
    /// Times of the failures inside the window, oldest first (at most `threshold`).
    failures: VecDeque<UnixMillis>,
    cooled_until: Option<UnixMillis>,
}

impl Gate {
    /// Whether the provider may be used at `now`.
    pub fn usable(&self, now: UnixMillis) -> bool {
        self.cooled_until.is_none_or(|t| t <= now)
    }

    pub fn cooled_until(&self, now: UnixMillis) -> Option<UnixMillis> {
        self.cooled_until.filter(|t| *t > now)
    }

    /// When the last cooldown ends (or ended).
    pub fn last_cooldown_end(&self) -> Option<UnixMillis> {
        self.cooled_until
    }

    /// Records a provider-level failure; returns the cooldown's end when this failure
    /// started one.
    pub fn on_failure(&mut self, p: &Profile, now: UnixMillis) -> Option<UnixMillis> {
        if !self.usable(now) {
            return None;
        }
        while self
            .failures
            .front()
            .is_some_and(|t| t.saturating_add(p.window_ms) <= now)
        {
            self.failures.pop_front();
        }
        self.failures.push_back(now);
        if self.failures.len() < p.threshold as usize {
            return None;
        }
        self.failures.clear();
        let until = now.saturating_add(p.cooldown_ms);
        self.cooled_until = Some(until);
        Some(until)
    }

    /// One success clears the window (a running cooldown runs out on its own).
    pub fn on_success(&mut self) {
        self.failures.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000_000;

    #[test]
    fn cools_after_the_threshold_within_the_window() {
        let p = Profile::for_class(AuthClass::Oauth);
        let mut g = Gate::default();
        for i in 0..9 {
            assert_eq!(g.on_failure(&p, T0 + i * 60_000), None);
        }
        assert_eq!(
            g.on_failure(&p, T0 + 9 * 60_000),
            Some(T0 + 9 * 60_000 + 300_000)
        );
        assert!(!g.usable(T0 + 9 * 60_000 + 299_999));
        assert!(g.usable(T0 + 9 * 60_000 + 300_000));
    }

    #[test]
    fn failures_older_than_the_window_do_not_count() {
        let p = Profile::for_class(AuthClass::Apikey);
        let mut g = Gate::default();
        for i in 0..14 {
            g.on_failure(&p, T0 + i * 1_000);
        }
        // The first failures fall out of the 30-minute window.
        assert_eq!(g.on_failure(&p, T0 + 30 * 60_000 + 500), None);
        assert_eq!(g.on_failure(&p, T0 + 30 * 60_000 + 13_000), None);
    }

    #[test]
    fn one_success_clears_the_window() {
        let p = Profile::for_class(AuthClass::Oauth);
        let mut g = Gate::default();
        for i in 0..9 {
            g.on_failure(&p, T0 + i);
        }
        g.on_success();
        for i in 0..9 {
            assert_eq!(g.on_failure(&p, T0 + 100 + i), None);
        }
        assert!(g.on_failure(&p, T0 + 200).is_some());
    }
}
