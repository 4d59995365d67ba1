//! Model lockout (SPEC R5): a failing model is locked on one connection while the rest
//! of the account keeps serving. Off by default.
//!
//! The scope a failure locks is the verdict's ([`super::verdict`]), by status
//! ([`Scope::for_status`]) unless a rule names it: 429, 403 and 402 lock the model's
//! quota family on that connection (a quota is usually shared by a model family:
//! `gpt-5`, `gpt-5-codex` and `gpt-5-mini` run out together); 404 and other statuses
//! lock the exact model on the connection. Each failure after a lock ran out locks it again for longer (exponential
//! backoff, bounded); failures while it runs (requests that were in flight together)
//! change nothing. Each success halves the failure count, and at zero the lock is gone.
//!
//! A state machine with `now` passed in and no timers: a lock that has run out is simply
//! no longer reported. Its settings come from the caller.

use crate::UnixMillis;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Most locks kept; beyond it the lock expiring soonest is dropped, so a storm of
/// distinct model names cannot grow the table without bound.
pub const MAX_LOCKS: usize = 10_000;

/// Most locks kept per connection: a provider that passes any model name through can be
/// asked for names without end, and one connection's locks must not push out the
/// others'.
pub const MAX_LOCKS_PER_CONNECTION: usize = 100;

/// Lockout settings (SPEC R5 defaults).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Settings {
    pub enabled: bool,
    pub error_codes: Vec<u16>,
    pub base_cooldown_ms: u64,
    pub max_cooldown_ms: u64,
    pub max_backoff_steps: u32,
    pub use_exponential_backoff: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            enabled: false,
            error_codes: vec![403, 404, 429, 502, 503, 504],
            base_cooldown_ms: 120_000,
            max_cooldown_ms: 1_800_000,
            max_backoff_steps: 10,
            use_exponential_backoff: true,
        }
    }
}

/// Longest lock a setting may ask for: a day.
const MAX_COOLDOWN_LIMIT_MS: u64 = 86_400_000;

/// Most backoff steps a setting may ask for: 2^20 × base is already beyond any cap.
const MAX_STEPS_LIMIT: u32 = 20;

impl Settings {
    /// Validates the settings; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.base_cooldown_ms == 0 {
            return Err("baseCooldownMs must be > 0".to_owned());
        }
        if self.max_cooldown_ms < self.base_cooldown_ms {
            return Err("maxCooldownMs must be >= baseCooldownMs".to_owned());
        }
        if self.max_cooldown_ms > MAX_COOLDOWN_LIMIT_MS {
            return Err(format!("maxCooldownMs must be <= {MAX_COOLDOWN_LIMIT_MS}"));
        }
        if self.max_backoff_steps > MAX_STEPS_LIMIT {
            return Err(format!("maxBackoffSteps must be <= {MAX_STEPS_LIMIT}"));
        }
        if let Some(c) = self.error_codes.iter().find(|c| !(400..600).contains(*c)) {
            return Err(format!("errorCodes: {c} is not an HTTP error status"));
        }
        Ok(())
    }

    fn duration_ms(&self, failures: u32) -> u64 {
        if !self.use_exponential_backoff {
            return self.base_cooldown_ms;
        }
        let exp = failures
            .saturating_sub(1)
            .min(self.max_backoff_steps)
            .min(MAX_STEPS_LIMIT);
        self.base_cooldown_ms
            .saturating_mul(1u64 << exp)
            .min(self.max_cooldown_ms)
    }
}

/// What a lock covers on one connection.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "name", rename_all = "snake_case")]
pub enum Scope {
    /// A model family (`gpt-5` covers `gpt-5-codex`).
    Family(String),
    /// One model.
    Model(String),
}

impl Scope {
    pub fn covers(&self, model: &str) -> bool {
        match self {
            Self::Family(f) => family(model) == *f,
            Self::Model(m) => m == model,
        }
    }

    /// The scope a status locks (SPEC R5).
    pub fn for_status(status: u16, model: &str) -> Self {
        match status {
            429 | 403 | 402 => Self::Family(family(model)),
            _ => Self::Model(model.to_owned()),
        }
    }
}

/// A model's quota family: its name up to and including the first version number
/// (`gpt-5-codex` → `gpt-5`, `glm-4.5-air` → `glm-4.5`, `claude-sonnet-4-5` →
/// `claude-sonnet-4`); a name without digits is its own family.
pub fn family(model: &str) -> String {
    let Some(start) = model.find(|c: char| c.is_ascii_digit()) else {
        return model.to_owned();
    };
    let end = model[start..]
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or(model.len(), |i| start + i);
    model[..end].trim_end_matches('.').to_owned()
}

/// Identifies a lock.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LockKey {
    pub provider: String,
    pub connection: String,
    pub scope: Scope,
}

/// One lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lock {
    pub failures: u32,
    pub until: UnixMillis,
    pub status: u16,
    /// Set by a provider error rule (SPEC R13): it holds whether lockout is on or not.
    #[serde(default)]
    pub by_rule: bool,
}

/// A model on one connection of a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    pub provider: &'a str,
    pub connection: &'a str,
    pub model: &'a str,
}

/// Every lock.
#[derive(Debug, Clone, Default)]
pub struct Lockouts {
    locks: HashMap<LockKey, Lock>,
}

impl Lockouts {
    /// Records a failure of `model` on `connection` that locks `scope` (the verdict's,
    /// [`super::verdict`]); returns the lock it set or lengthened, or `None` when
    /// lockout is off or the status does not lock.
    pub fn on_failure(
        &mut self,
        settings: &Settings,
        target: Target<'_>,
        status: u16,
        scope: Scope,
        now: UnixMillis,
    ) -> Option<(LockKey, Lock)> {
        if !settings.enabled || !settings.error_codes.contains(&status) {
            return None;
        }
        Some(self.lock(settings, target, scope, status, None, now))
    }

    /// A rule's lock (SPEC R13): taken whether lockout is on or not, for `ms` when the
    /// rule says how long (at most `maxCooldownMs`), else for the lockout's backoff.
    pub fn on_rule(
        &mut self,
        settings: &Settings,
        target: Target<'_>,
        scope: Scope,
        status: u16,
        ms: Option<u64>,
        now: UnixMillis,
    ) -> (LockKey, Lock) {
        let (key, lock) = self.lock(settings, target, scope, status, ms, now);
        let lock = Lock {
            by_rule: true,
            ..lock
        };
        self.locks.insert(key.clone(), lock);
        (key, lock)
    }

    fn lock(
        &mut self,
        settings: &Settings,
        target: Target<'_>,
        scope: Scope,
        status: u16,
        ms: Option<u64>,
        now: UnixMillis,
    ) -> (LockKey, Lock) {
        let key = LockKey {
            provider: target.provider.to_owned(),
            connection: target.connection.to_owned(),
            scope,
        };
        if let Some(active) = self.locks.get(&key).filter(|l| l.until > now) {
            // Requests that were in flight together fail together: while the lock runs
            // their failures count as the one that set it (no jump to the cap).
            return (key, *active);
        }
        let failures = self.locks.get(&key).map_or(0, |l| l.failures) + 1;
        let duration = ms.map_or_else(
            || settings.duration_ms(failures),
            |ms| ms.min(settings.max_cooldown_ms),
        );
        let lock = Lock {
            failures,
            until: now.saturating_add(duration),
            status,
            by_rule: false,
        };
        self.make_room(&key);
        self.locks.insert(key.clone(), lock);
        (key, lock)
    }

    /// Makes room for `key` within the bounds, when it is new: the lock ending soonest
    /// goes, this connection's when it has its fill.
    fn make_room(&mut self, key: &LockKey) {
        if self.locks.contains_key(key) {
            return;
        }
        let same = |k: &LockKey| k.provider == key.provider && k.connection == key.connection;
        let full_here = self.locks.keys().filter(|k| same(k)).count() >= MAX_LOCKS_PER_CONNECTION;
        if full_here || self.locks.len() >= MAX_LOCKS {
            if let Some(evict) = self
                .locks
                .iter()
                .filter(|(k, _)| !full_here || same(k))
                .min_by_key(|(_, l)| l.until)
                .map(|(k, _)| k.clone())
            {
                self.locks.remove(&evict);
            }
        }
    }

    /// Takes in another replica's news of one lock (SPEC O6, B6): its state there
    /// replaces this one's (a model's state on an account is the same whichever replica
    /// met it), and `None` (run down by successes, or cleared by an operator there)
    /// removes it. Whether it changed anything.
    pub fn merge_peer(&mut self, key: LockKey, lock: Option<Lock>) -> bool {
        match lock {
            None => self.locks.remove(&key).is_some(),
            Some(lock) if self.locks.get(&key) == Some(&lock) => false,
            Some(lock) => {
                self.make_room(&key);
                self.locks.insert(key, lock);
                true
            }
        }
    }

    /// One lock's state.
    pub fn get(&self, key: &LockKey) -> Option<&Lock> {
        self.locks.get(key)
    }

    /// A success of `model` on `connection` halves the failure count of every lock
    /// covering it; a lock whose count reaches zero is removed. Returns the locks it
    /// changed.
    pub fn on_success(&mut self, provider: &str, connection: &str, model: &str) -> Vec<LockKey> {
        let mut changed = Vec::new();
        self.locks.retain(|k, l| {
            if k.provider == provider && k.connection == connection && k.scope.covers(model) {
                l.failures /= 2;
                changed.push(k.clone());
                l.failures > 0
            } else {
                true
            }
        });
        changed
    }

    /// The active lock on `model` at `connection`, the one lasting longest; with
    /// lockout off (`settings.enabled`), only a rule's locks hold.
    pub fn locked(
        &self,
        settings: &Settings,
        provider: &str,
        connection: &str,
        model: &str,
        now: UnixMillis,
    ) -> Option<(&LockKey, &Lock)> {
        self.locks
            .iter()
            .filter(|(k, l)| {
                l.until > now
                    && (settings.enabled || l.by_rule)
                    && k.provider == provider
                    && k.connection == connection
                    && k.scope.covers(model)
            })
            .max_by_key(|(_, l)| l.until)
    }

    /// Every lock still active at `now`.
    pub fn active(&self, now: UnixMillis) -> impl Iterator<Item = (&LockKey, &Lock)> {
        self.locks.iter().filter(move |(_, l)| l.until > now)
    }

    /// Removes locks matching the filter (operator re-enable); returns them.
    pub fn clear(&mut self, mut matches: impl FnMut(&LockKey) -> bool) -> Vec<LockKey> {
        let mut removed = Vec::new();
        self.locks.retain(|k, _| {
            let gone = matches(k);
            if gone {
                removed.push(k.clone());
            }
            !gone
        });
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000_000;

    fn t<'a>(provider: &'a str, connection: &'a str, model: &'a str) -> Target<'a> {
        Target {
            provider,
            connection,
            model,
        }
    }

    fn on() -> Settings {
        Settings {
            enabled: true,
            ..Settings::default()
        }
    }

    #[test]
    fn defaults_match_the_spec_and_validation_bounds_them() {
        let d = Settings::default();
        assert!(!d.enabled);
        assert_eq!(d.error_codes, [403, 404, 429, 502, 503, 504]);
        assert_eq!(
            (d.base_cooldown_ms, d.max_cooldown_ms),
            (120_000, 1_800_000)
        );
        assert_eq!((d.max_backoff_steps, d.use_exponential_backoff), (10, true));
        assert_eq!(d.validate(), Ok(()));
        let bad = |f: fn(&mut Settings)| {
            let mut s = Settings::default();
            f(&mut s);
            s.validate().unwrap_err()
        };
        assert_eq!(
            bad(|s| s.max_cooldown_ms = 1),
            "maxCooldownMs must be >= baseCooldownMs"
        );
        assert_eq!(
            bad(|s| s.base_cooldown_ms = 0),
            "baseCooldownMs must be > 0"
        );
        assert_eq!(
            bad(|s| s.max_backoff_steps = 21),
            "maxBackoffSteps must be <= 20"
        );
        assert_eq!(
            bad(|s| s.error_codes = vec![200]),
            "errorCodes: 200 is not an HTTP error status"
        );
    }

    #[test]
    fn families_are_cut_at_the_first_version_number() {
        assert_eq!(family("gpt-5-codex"), "gpt-5");
        assert_eq!(family("gpt-5.1-mini"), "gpt-5.1");
        assert_eq!(family("glm-4.5-air"), "glm-4.5");
        assert_eq!(family("claude-sonnet-4-5"), "claude-sonnet-4");
        assert_eq!(family("mock-small"), "mock-small");
    }

    #[test]
    fn off_by_default_and_only_listed_statuses_lock() {
        let mut l = Lockouts::default();
        assert_eq!(
            l.on_failure(
                &Settings::default(),
                t("p", "c", "m"),
                429,
                Scope::for_status(429, "m"),
                T0
            ),
            None
        );
        assert_eq!(
            l.on_failure(
                &on(),
                t("p", "c", "m"),
                500,
                Scope::for_status(500, "m"),
                T0
            ),
            None
        );
        assert!(l
            .on_failure(
                &on(),
                t("p", "c", "m"),
                502,
                Scope::for_status(502, "m"),
                T0
            )
            .is_some());
    }

    #[test]
    fn scope_rules_by_status_and_explicit_scope_wins() {
        let s = on();
        let mut l = Lockouts::default();
        l.on_failure(
            &s,
            t("codex", "c1", "gpt-5-codex"),
            429,
            Scope::for_status(429, "gpt-5-codex"),
            T0,
        );
        assert!(l.locked(&on(), "codex", "c1", "gpt-5-mini", T0).is_some());
        assert!(l.locked(&on(), "codex", "c2", "gpt-5-mini", T0).is_none());
        assert!(l.locked(&on(), "codex", "c1", "gpt-4o", T0).is_none());
        let mut l = Lockouts::default();
        l.on_failure(
            &s,
            t("p", "c", "a-1"),
            404,
            Scope::for_status(404, "a-1"),
            T0,
        );
        assert!(l.locked(&on(), "p", "c", "a-1", T0).is_some());
        assert!(l.locked(&on(), "p", "c", "a-1-b", T0).is_none());
        let mut l = Lockouts::default();
        l.on_failure(
            &s,
            t("p", "c", "a-1"),
            503,
            Scope::for_status(503, "a-1"),
            T0,
        );
        assert!(l.locked(&on(), "p", "c", "a-1", T0).is_some());
        assert!(l.locked(&on(), "p", "c", "a-1x", T0).is_none());
        let mut l = Lockouts::default();
        l.on_failure(&s, t("p", "c", "a-1"), 503, Scope::Family("a-1".into()), T0);
        assert!(l.locked(&on(), "p", "c", "a-1-b", T0).is_some());
    }

    #[test]
    fn repeated_failures_back_off_up_to_the_cap_and_expire() {
        let s = on();
        let mut l = Lockouts::default();
        let mut got = Vec::new();
        let mut now = T0;
        for _ in 0..6 {
            let (_, lock) = l
                .on_failure(&s, t("p", "c", "m"), 503, Scope::for_status(503, "m"), now)
                .unwrap();
            got.push(lock.until - now);
            now = lock.until;
        }
        assert_eq!(
            got,
            [120_000, 240_000, 480_000, 960_000, 1_800_000, 1_800_000]
        );
        assert!(l.locked(&on(), "p", "c", "m", now - 1).is_some());
        assert!(l.locked(&on(), "p", "c", "m", now).is_none());
        // Concurrent failures while locked do not escalate.
        let mut l = Lockouts::default();
        for _ in 0..6 {
            l.on_failure(&s, t("p", "c", "m"), 503, Scope::for_status(503, "m"), T0);
        }
        assert_eq!(l.active(T0).next().map(|(_, x)| x.failures), Some(1));
        let flat = Settings {
            use_exponential_backoff: false,
            ..on()
        };
        let mut l = Lockouts::default();
        l.on_failure(
            &flat,
            t("p", "c", "m"),
            503,
            Scope::for_status(503, "m"),
            T0,
        );
        let later = T0 + 120_000;
        let (_, lock) = l
            .on_failure(
                &flat,
                t("p", "c", "m"),
                503,
                Scope::for_status(503, "m"),
                later,
            )
            .unwrap();
        assert_eq!((lock.until - later, lock.failures), (120_000, 2));
    }

    #[test]
    fn successes_halve_the_count_until_the_lock_is_gone() {
        let s = on();
        let mut l = Lockouts::default();
        let mut now = T0;
        for _ in 0..5 {
            now = l
                .on_failure(&s, t("p", "c", "m"), 503, Scope::for_status(503, "m"), now)
                .unwrap()
                .1
                .until;
        }
        now -= 1;
        let count = |l: &Lockouts| l.active(now).next().map(|(_, x)| x.failures);
        l.on_success("p", "c", "m");
        assert_eq!(count(&l), Some(2));
        l.on_success("p", "c", "m");
        assert_eq!(count(&l), Some(1));
        l.on_success("p", "c", "m");
        assert_eq!(count(&l), None);
    }

    #[test]
    fn a_peer_s_lock_replaces_this_one_within_the_bounds_and_its_end_removes_it() {
        let s = on();
        let mut l = Lockouts::default();
        let (key, lock) = l
            .on_failure(&s, t("p", "c", "m"), 503, Scope::for_status(503, "m"), T0)
            .unwrap();
        assert!(!l.merge_peer(key.clone(), Some(lock)));
        let longer = Lock {
            failures: 3,
            until: T0 + 480_000,
            ..lock
        };
        assert!(l.merge_peer(key.clone(), Some(longer)));
        assert_eq!(l.get(&key), Some(&longer));
        assert_eq!(
            l.locked(&s, "p", "c", "m", T0 + 479_999).map(|(_, x)| *x),
            Some(longer)
        );
        assert!(l.merge_peer(key.clone(), None));
        assert_eq!(l.get(&key), None);
        assert!(!l.merge_peer(key, None));
        // A peer's locks keep the per-connection bound: the one ending soonest goes.
        for i in 0..=MAX_LOCKS_PER_CONNECTION as u64 {
            let key = LockKey {
                provider: "p".into(),
                connection: "c".into(),
                scope: Scope::Model(format!("m{i}")),
            };
            assert!(l.merge_peer(
                key,
                Some(Lock {
                    until: T0 + 1_000 + i,
                    ..lock
                })
            ));
        }
        assert_eq!(l.active(T0).count(), MAX_LOCKS_PER_CONNECTION);
        assert!(l
            .active(T0)
            .all(|(k, _)| k.scope != Scope::Model("m0".into())));
    }

    #[test]
    fn operators_can_clear_locks() {
        let s = on();
        let mut l = Lockouts::default();
        l.on_failure(&s, t("p", "c", "m"), 503, Scope::for_status(503, "m"), T0);
        l.on_failure(&s, t("p", "d", "m"), 503, Scope::for_status(503, "m"), T0);
        assert_eq!(
            l.clear(|k| k.connection == "c"),
            vec![LockKey {
                provider: "p".into(),
                connection: "c".into(),
                scope: Scope::Model("m".into()),
            }]
        );
        assert_eq!(l.active(T0).count(), 1);
    }

    #[test]
    fn only_a_rule_s_lock_holds_while_lockout_is_off() {
        let mut l = Lockouts::default();
        let off = Settings::default();
        l.on_failure(
            &on(),
            t("p", "c", "m"),
            503,
            Scope::for_status(503, "m"),
            T0,
        );
        let (_, lock) = l.on_rule(
            &off,
            t("p", "c", "r"),
            Scope::Model("r".into()),
            403,
            Some(60_000),
            T0,
        );
        assert_eq!(
            lock,
            Lock {
                failures: 1,
                until: T0 + 60_000,
                status: 403,
                by_rule: true
            }
        );
        assert!(l.locked(&on(), "p", "c", "m", T0).is_some());
        assert!(l.locked(&off, "p", "c", "m", T0).is_none());
        assert!(l.locked(&off, "p", "c", "r", T0).is_some());
        // A rule's lock is held to the lockout's longest lock.
        let (_, long) = l.on_rule(
            &off,
            t("p", "c", "x"),
            Scope::Model("x".into()),
            403,
            Some(u64::MAX),
            T0,
        );
        assert_eq!(long.until, T0 + off.max_cooldown_ms);
    }

    #[test]
    fn one_connection_keeps_at_most_its_share_of_locks() {
        let mut l = Lockouts::default();
        let s = on();
        // Another connection's lock, set first (ending soonest).
        l.on_rule(
            &s,
            t("p", "other", "x"),
            Scope::Model("x".into()),
            403,
            Some(1_000),
            T0,
        );
        for i in 0..=MAX_LOCKS_PER_CONNECTION {
            let model = format!("m{i}");
            let ms = 60_000 + u64::try_from(i).unwrap();
            l.on_rule(
                &s,
                t("p", "c", &model),
                Scope::Model(model.clone()),
                403,
                Some(ms),
                T0,
            );
        }
        let here = l.active(T0).filter(|(k, _)| k.connection == "c").count();
        assert_eq!(here, MAX_LOCKS_PER_CONNECTION);
        // The one that went is this connection's soonest; the other connection's stays.
        assert!(l.locked(&s, "p", "c", "m0", T0).is_none());
        assert!(l.locked(&s, "p", "c", "m1", T0).is_some());
        assert!(l.locked(&s, "p", "other", "x", T0).is_some());
    }
}
