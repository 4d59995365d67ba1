//! The provider circuit breaker (SPEC R1): a state machine over one provider, with `now`
//! passed in and no timers.
//!
//! - `Closed`: serving. Consecutive provider-level failures count up; a success resets
//!   the count.
//! - `Degraded`: still serving, but the count has reached the profile's degrade
//!   threshold (operators see it; routing may prefer healthier providers).
//! - `Open`: skipped by routing until the reset timeout has passed.
//! - `HalfOpen`: the timeout has passed — noticed lazily, when the state is read. One
//!   probe request at a time is let through: its success closes the breaker, its failure
//!   re-opens it for a longer time.
//!
//! Only provider-level failures count, as the verdict says ([`super::verdict`]): HTTP
//! 408, 500, 502, 503, 504, Anthropic's 529 (overloaded), and failures to get an answer
//! at all (connect error, connection reset before the response, no first byte in time)
//! — an unreachable provider is the clearest provider-level failure. 401/403/429 are
//! about an account, not the provider, and never count.
//!
//! Repeated open cycles lengthen the reset timeout: after `double_after` consecutive
//! cycles without a successful close, each further cycle doubles it, up to
//! `max_multiplier` times the base.

use crate::domain::AuthClass;
use crate::UnixMillis;
use serde::{Deserialize, Serialize};

/// The breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum State {
    Closed,
    Degraded,
    Open,
    HalfOpen,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "CLOSED",
            Self::Degraded => "DEGRADED",
            Self::Open => "OPEN",
            Self::HalfOpen => "HALF_OPEN",
        }
    }
}

/// Thresholds and timeouts of one auth class (SPEC R1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    pub degrade_at: u32,
    pub open_at: u32,
    pub reset_ms: u64,
    /// Open cycles after which the reset timeout starts doubling.
    pub double_after: u32,
    pub max_multiplier: u64,
}

impl Profile {
    /// SPEC R1's defaults (the `breaker.*` settings override them): OAuth 5 / 8 / 60 s,
    /// doubling after 2 cycles up to 8×; API key 7 / 12 / 30 s,
    /// after 3 cycles up to 4×; local servers degrade at their first failure (half of
    /// their open threshold, the "derived" value) and open at 2, reset 15 s, doubling
    /// like API keys.
    pub fn for_class(class: AuthClass) -> Self {
        match class {
            AuthClass::Oauth => Self {
                degrade_at: 5,
                open_at: 8,
                reset_ms: 60_000,
                double_after: 2,
                max_multiplier: 8,
            },
            AuthClass::Apikey => Self {
                degrade_at: 7,
                open_at: 12,
                reset_ms: 30_000,
                double_after: 3,
                max_multiplier: 4,
            },
            AuthClass::Local => Self {
                degrade_at: 1,
                open_at: 2,
                reset_ms: 15_000,
                double_after: 3,
                max_multiplier: 4,
            },
        }
    }

    /// Why the profile does not hold together, naming the fields by their setting keys
    /// (e.g. `breaker.apiKey.degradeAt` and `breaker.apiKey.openAt`): degrading after the
    /// breaker would open means it never degrades.
    pub fn check(&self, degrade_at_key: &str, open_at_key: &str) -> Result<(), String> {
        if self.degrade_at > self.open_at {
            return Err(format!(
                "{degrade_at_key} ({}) must be <= {open_at_key} ({})",
                self.degrade_at, self.open_at
            ));
        }
        Ok(())
    }

    /// The reset timeout after `cycles` consecutive open cycles (1 = first opening).
    pub fn reset_timeout_ms(&self, cycles: u32) -> u64 {
        let extra = cycles.saturating_sub(self.double_after).min(16);
        let multiplier = (1u64 << extra).min(self.max_multiplier);
        self.reset_ms * multiplier
    }
}

/// The profile of each auth class, as the `breaker.*` settings resolve them; the
/// default is SPEC R1's ([`Profile::for_class`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profiles {
    pub oauth: Profile,
    pub apikey: Profile,
    pub local: Profile,
}

impl Default for Profiles {
    fn default() -> Self {
        Self {
            oauth: Profile::for_class(AuthClass::Oauth),
            apikey: Profile::for_class(AuthClass::Apikey),
            local: Profile::for_class(AuthClass::Local),
        }
    }
}

impl Profiles {
    /// The profile of `class`.
    pub fn get(&self, class: AuthClass) -> Profile {
        match class {
            AuthClass::Oauth => self.oauth,
            AuthClass::Apikey => self.apikey,
            AuthClass::Local => self.local,
        }
    }
}

/// What the breaker lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Serve normally.
    Yes,
    /// Serve as the half-open probe: report its outcome.
    Probe,
    /// Refused: the breaker is open (or a probe is already out) for this long.
    No { retry_after_ms: u64 },
}

/// One provider's breaker. Serializable, so it survives restarts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Breaker {
    state: State,
    /// Consecutive counted failures.
    failures: u32,
    /// When the breaker last opened.
    opened_at: UnixMillis,
    /// Consecutive open cycles without a successful close.
    cycles: u32,
    /// When the current probe was let through, if one is out. Not persisted: after a
    /// restart no probe is out.
    #[serde(skip)]
    probe_since: Option<UnixMillis>,
    /// Until when another replica holds the half-open probe (SPEC O6: one probe for all
    /// replicas; see [`Breaker::merge_peer`]). Not persisted.
    #[serde(skip)]
    peer_probe_until: Option<UnixMillis>,
}

impl Default for Breaker {
    fn default() -> Self {
        Self {
            state: State::Closed,
            failures: 0,
            opened_at: 0,
            cycles: 0,
            probe_since: None,
            peer_probe_until: None,
        }
    }
}

impl Breaker {
    /// The state at `now`, moving `Open` to `HalfOpen` once the timeout has passed.
    pub fn state(&mut self, profile: &Profile, now: UnixMillis) -> State {
        if self.state == State::Open && now >= self.reopens_at(profile) {
            self.state = State::HalfOpen;
            self.probe_since = None;
        }
        self.state
    }

    /// The consecutive counted failures.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// When an open breaker lets a probe through.
    pub fn reopens_at(&self, profile: &Profile) -> UnixMillis {
        self.opened_at
            .saturating_add(profile.reset_timeout_ms(self.cycles))
    }

    /// Whether a request may go to the provider now. `attempt_budget_ms` is how long an
    /// attempt may take: a probe that has not reported within the longer of that and
    /// one reset period is given up on, so the breaker cannot wedge, yet a slow probe is
    /// never joined by a second one.
    pub fn admit(&mut self, profile: &Profile, now: UnixMillis, attempt_budget_ms: u64) -> Admit {
        let lease = profile.reset_ms.max(attempt_budget_ms);
        match self.state(profile, now) {
            State::Closed | State::Degraded => Admit::Yes,
            State::Open => Admit::No {
                retry_after_ms: self.reopens_at(profile).saturating_sub(now),
            },
            State::HalfOpen => match self.probe_since {
                Some(since) if now < since.saturating_add(lease) => Admit::No {
                    retry_after_ms: since.saturating_add(lease) - now,
                },
                _ if self.peer_probe_until.is_some_and(|until| now < until) => Admit::No {
                    retry_after_ms: self.peer_probe_until.map_or(0, |u| u - now),
                },
                _ => {
                    self.probe_since = Some(now);
                    Admit::Probe
                }
            },
        }
    }

    /// Gives back a probe that never reached the provider (the attempt was skipped or
    /// cut before an answer), so the next request may probe at once.
    pub fn release_probe(&mut self) {
        self.probe_since = None;
    }

    /// Records a success. While the breaker is open or half-open only the probe's own
    /// outcome counts (a request let in before it opened says nothing about now).
    /// Returns whether the state changed.
    pub fn on_success(&mut self, probe: bool) -> bool {
        if matches!(self.state, State::Open | State::HalfOpen) && !probe {
            return false;
        }
        let changed = self.state != State::Closed;
        self.state = State::Closed;
        self.failures = 0;
        self.cycles = 0;
        self.probe_since = None;
        self.peer_probe_until = None;
        changed
    }

    /// Takes in another replica's state of this breaker (SPEC O6, B6), when it is newer
    /// news: an open (or half-open) breaker that opened later than this one's last
    /// opening, or at the same moment when `peer_wins_ties`; or a close of the opening
    /// this breaker is in (or a later one). A closed breaker's failure count stays this
    /// replica's own. A breaker taken open leaves its half-open probe to the replica
    /// that opened it, until one reset period after it reopens (so a replica that died
    /// holding it does not wedge the breaker). Whether it was taken.
    pub fn merge_peer(&mut self, peer: Breaker, profile: &Profile, peer_wins_ties: bool) -> bool {
        let open = |s: State| matches!(s, State::Open | State::HalfOpen);
        let take = match (open(self.state), open(peer.state)) {
            (false, true) => true,
            (true, true) => {
                peer.opened_at > self.opened_at
                    || (peer.opened_at == self.opened_at && peer_wins_ties)
            }
            (true, false) => peer.opened_at >= self.opened_at,
            (false, false) => false,
        };
        if !take {
            return false;
        }
        let peer_probe_until = open(peer.state).then(|| {
            peer.reopens_at(profile)
                .saturating_add(profile.reset_timeout_ms(peer.cycles))
        });
        *self = Breaker {
            probe_since: None,
            peer_probe_until,
            ..peer
        };
        true
    }

    /// Records a provider-level failure (which failures are is the verdict's,
    /// [`super::verdict`]). Returns the new state when it changed.
    pub fn on_failure(&mut self, profile: &Profile, now: UnixMillis, probe: bool) -> Option<State> {
        let before = self.state(profile, now);
        if before == State::HalfOpen && !probe {
            return None;
        }
        self.failures = self.failures.saturating_add(1);
        match before {
            State::HalfOpen => self.open(now),
            State::Open => {}
            State::Closed | State::Degraded => {
                if self.failures >= profile.open_at {
                    self.open(now);
                } else if self.failures >= profile.degrade_at {
                    self.state = State::Degraded;
                }
            }
        }
        (self.state != before).then_some(self.state)
    }

    fn open(&mut self, now: UnixMillis) {
        self.state = State::Open;
        self.opened_at = now;
        self.cycles = self.cycles.saturating_add(1);
        self.probe_since = None;
        self.peer_probe_until = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_s_newer_opening_is_taken_and_its_probe_left_to_it() {
        let p = Profile::for_class(AuthClass::Apikey);
        let opened = |at: UnixMillis| {
            let mut b = Breaker::default();
            for _ in 0..p.open_at {
                b.on_failure(&p, at, false);
            }
            assert_eq!(b.state(&p, at), State::Open);
            b
        };
        // A closed breaker takes a peer's opening; the probe is the peer's until one
        // reset period after the breaker reopens.
        let mut mine = Breaker::default();
        assert!(mine.merge_peer(opened(1_000), &p, false));
        let reopens = mine.reopens_at(&p);
        let grace = p.reset_timeout_ms(1);
        assert_eq!(mine.state(&p, reopens), State::HalfOpen);
        assert_eq!(
            mine.admit(&p, reopens, 0),
            Admit::No {
                retry_after_ms: grace
            }
        );
        // The peer's probe closed it: taken, and this replica serves again.
        let mut peer = opened(1_000);
        peer.state(&p, reopens);
        assert_eq!(peer.admit(&p, reopens, 0), Admit::Probe);
        peer.on_success(true);
        assert!(mine.merge_peer(peer.clone(), &p, false));
        assert_eq!(mine.admit(&p, reopens + 1, 0), Admit::Yes);
        // An older opening, or a close of an older one, is not news.
        let mut mine = opened(5_000);
        assert!(!mine.merge_peer(opened(1_000), &p, true));
        assert!(!mine.merge_peer(peer, &p, true));
        assert!(!mine.merge_peer(Breaker::default(), &p, true));
        // The same moment: the tie goes one way only.
        assert!(!mine.merge_peer(opened(5_000), &p, false));
        assert!(mine.merge_peer(opened(5_000), &p, true));
        // A closed breaker's own failure count is kept.
        let mut counting = Breaker::default();
        counting.on_failure(&p, 1, false);
        assert!(!counting.merge_peer(Breaker::default(), &p, true));
        assert_eq!(counting.failures(), 1);
    }

    #[test]
    fn with_the_peer_gone_the_probe_comes_back_after_the_grace() {
        let p = Profile::for_class(AuthClass::Apikey);
        let mut peer = Breaker::default();
        for _ in 0..p.open_at {
            peer.on_failure(&p, 1_000, false);
        }
        let mut mine = Breaker::default();
        assert!(mine.merge_peer(peer, &p, false));
        let until = mine.reopens_at(&p) + p.reset_timeout_ms(1);
        assert_eq!(mine.admit(&p, until, 0), Admit::Probe);
    }

    #[test]
    fn profiles_default_to_each_class_and_a_late_degrade_threshold_is_named() {
        let p = Profiles::default();
        for class in [AuthClass::Oauth, AuthClass::Apikey, AuthClass::Local] {
            assert_eq!(p.get(class), Profile::for_class(class));
        }
        assert_eq!(
            p.local
                .check("breaker.local.degradeAt", "breaker.local.openAt"),
            Ok(())
        );
        let even = Profile {
            degrade_at: 12,
            ..p.apikey
        };
        assert_eq!(
            even.check("breaker.apiKey.degradeAt", "breaker.apiKey.openAt"),
            Ok(())
        );
        let late = Profile {
            degrade_at: 13,
            ..p.apikey
        };
        assert_eq!(
            late.check("breaker.apiKey.degradeAt", "breaker.apiKey.openAt"),
            Err("breaker.apiKey.degradeAt (13) must be <= breaker.apiKey.openAt (12)".to_owned())
        );
    }

    const T0: u64 = 1_800_000_000_000;

    fn fail_n(b: &mut Breaker, p: &Profile, n: u32, now: u64) {
        for _ in 0..n {
            b.on_failure(p, now, false);
        }
    }

    #[test]
    fn profiles_match_the_spec() {
        let o = Profile::for_class(AuthClass::Oauth);
        assert_eq!((o.degrade_at, o.open_at, o.reset_ms), (5, 8, 60_000));
        let a = Profile::for_class(AuthClass::Apikey);
        assert_eq!((a.degrade_at, a.open_at, a.reset_ms), (7, 12, 30_000));
        let l = Profile::for_class(AuthClass::Local);
        assert_eq!((l.degrade_at, l.open_at, l.reset_ms), (1, 2, 15_000));
    }

    #[test]
    fn every_transition_at_the_exact_thresholds_for_each_profile() {
        for class in [AuthClass::Oauth, AuthClass::Apikey, AuthClass::Local] {
            let p = Profile::for_class(class);
            let mut b = Breaker::default();
            fail_n(&mut b, &p, p.degrade_at - 1, T0);
            assert_eq!(b.state(&p, T0), State::Closed, "{class:?}");
            assert_eq!(b.on_failure(&p, T0, false), Some(State::Degraded));
            assert_eq!(b.admit(&p, T0, 0), Admit::Yes);
            fail_n(&mut b, &p, p.open_at - p.degrade_at - 1, T0);
            assert_eq!(b.state(&p, T0), State::Degraded, "{class:?}");
            assert_eq!(b.on_failure(&p, T0, false), Some(State::Open));
            // Open until exactly the reset timeout.
            let reopen = T0 + p.reset_ms;
            assert_eq!(b.admit(&p, reopen - 1, 0), Admit::No { retry_after_ms: 1 });
            assert_eq!(b.state(&p, reopen - 1), State::Open);
            assert_eq!(b.state(&p, reopen), State::HalfOpen);
            // One probe at a time.
            assert_eq!(b.admit(&p, reopen, 0), Admit::Probe);
            assert_eq!(
                b.admit(&p, reopen + 10, 0),
                Admit::No {
                    retry_after_ms: p.reset_ms - 10
                }
            );
            assert!(b.on_success(true));
            assert_eq!(b.state(&p, reopen + 20), State::Closed);
            assert_eq!(b.failures(), 0);
        }
    }

    #[test]
    fn a_success_resets_the_count_before_the_breaker_opens() {
        let p = Profile::for_class(AuthClass::Apikey);
        let mut b = Breaker::default();
        fail_n(&mut b, &p, 11, T0);
        assert_eq!(b.state(&p, T0), State::Degraded);
        assert!(b.on_success(false));
        fail_n(&mut b, &p, 11, T0);
        assert_eq!(b.state(&p, T0), State::Degraded);
    }

    #[test]
    fn a_failed_probe_reopens_and_repeated_cycles_lengthen_the_timeout() {
        let p = Profile::for_class(AuthClass::Oauth);
        let mut b = Breaker::default();
        fail_n(&mut b, &p, 8, T0);
        let mut now = T0;
        // Cycle n lasts reset * min(2^(n - 2), 8) for n > 2.
        for (cycle, expect) in [
            (1, 60_000),
            (2, 60_000),
            (3, 120_000),
            (4, 240_000),
            (5, 480_000),
            (6, 480_000),
        ] {
            assert_eq!(b.reopens_at(&p) - now, expect, "cycle {cycle}");
            now = b.reopens_at(&p);
            assert_eq!(b.admit(&p, now, 0), Admit::Probe);
            assert_eq!(b.on_failure(&p, now, true), Some(State::Open));
        }
        // A successful probe closes and forgets the cycles.
        now = b.reopens_at(&p);
        assert_eq!(b.admit(&p, now, 0), Admit::Probe);
        b.on_success(true);
        fail_n(&mut b, &p, 8, now);
        assert_eq!(b.reopens_at(&p) - now, 60_000);
    }

    #[test]
    fn api_key_profile_doubles_after_three_cycles_up_to_four_times() {
        let p = Profile::for_class(AuthClass::Apikey);
        let timeouts: Vec<u64> = (1..=6).map(|c| p.reset_timeout_ms(c)).collect();
        assert_eq!(timeouts, [30_000, 30_000, 30_000, 60_000, 120_000, 120_000]);
    }

    #[test]
    fn a_probe_that_never_reports_is_given_up_after_a_reset_period() {
        let p = Profile::for_class(AuthClass::Local);
        let mut b = Breaker::default();
        fail_n(&mut b, &p, 2, T0);
        let at = T0 + p.reset_ms;
        assert_eq!(b.admit(&p, at, 0), Admit::Probe);
        assert!(matches!(
            b.admit(&p, at + p.reset_ms - 1, 0),
            Admit::No { .. }
        ));
        assert_eq!(b.admit(&p, at + p.reset_ms, 0), Admit::Probe);
        // A longer attempt budget holds the probe slot for as long.
        assert!(matches!(
            b.admit(&p, at + 2 * p.reset_ms, 600_000),
            Admit::No { .. }
        ));
        // A probe that never reached the provider is given back at once.
        b.release_probe();
        assert_eq!(b.admit(&p, at + p.reset_ms + 1, 600_000), Admit::Probe);
    }

    #[test]
    fn only_the_probe_moves_an_open_or_half_open_breaker() {
        let p = Profile::for_class(AuthClass::Local);
        let mut b = Breaker::default();
        fail_n(&mut b, &p, 2, T0);
        // A request let in before the breaker opened succeeds late: nothing changes.
        assert!(!b.on_success(false));
        assert_eq!(b.state(&p, T0 + 1), State::Open);
        let at = T0 + p.reset_ms;
        assert_eq!(b.admit(&p, at, 0), Admit::Probe);
        // A late failure of another request does not re-open it either.
        assert_eq!(b.on_failure(&p, at, false), None);
        assert_eq!(b.state(&p, at), State::HalfOpen);
        assert!(b.on_success(true));
        assert_eq!(b.state(&p, at), State::Closed);
    }

    #[test]
    fn failures_while_open_change_nothing() {
        let p = Profile::for_class(AuthClass::Local);
        let mut b = Breaker::default();
        fail_n(&mut b, &p, 2, T0);
        assert_eq!(b.on_failure(&p, T0 + 5, false), None);
        assert_eq!(b.reopens_at(&p), T0 + p.reset_ms);
    }

    #[test]
    fn the_breaker_round_trips_through_json() {
        let p = Profile::for_class(AuthClass::Oauth);
        let mut b = Breaker::default();
        fail_n(&mut b, &p, 8, T0);
        let at = T0 + p.reset_ms;
        assert_eq!(b.admit(&p, at, 0), Admit::Probe);
        let json = serde_json::to_string(&b).unwrap();
        let mut back: Breaker = serde_json::from_str(&json).unwrap();
        // No probe is out after a restart.
        assert_eq!(back.admit(&p, at, 0), Admit::Probe);
    }
}
