//! Resilience state in the shell (SPEC R1, R3, R4): provider breakers and connection
//! health, kept in memory behind short-held mutexes (never across an `.await`), checked
//! before each attempt and updated after it. Changed entries are written behind to
//! SQLite and reloaded at start, so an open breaker or a banned account survives a
//! restart. The decisions are `switchyard_core::resilience`.

use crate::sync::lock;
use crate::telemetry::metrics::{BreakerLabels, CooldownLabels, Metrics};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use switchyard_core::catalog::Connection;
use switchyard_core::domain::AuthClass;
use switchyard_core::outcome::AttemptFailure;
use switchyard_core::resilience::breaker::{self, Admit, Breaker};
use switchyard_core::resilience::cooldown::{self, Change, ErrorType, Failure, Health};
use switchyard_core::resilience::lockout::{Lock, LockKey, Lockouts, Target};
use switchyard_core::resilience::{provider_cooldown, slow_start};
use switchyard_core::routing::Reason;
use switchyard_core::settings::ResilienceSettings;
use switchyard_core::UnixMillis;
use switchyard_store::resilience::{StateChange, StateRows};

/// What an attempt did, for the state machines.
#[derive(Debug, Clone)]
pub enum Outcome<'a> {
    Success,
    /// A stream committed to the client: the provider is up (a half-open probe closes
    /// its breaker), but the breaker's count of failures waits for the stream's end,
    /// so streams that keep failing after they start still open it (SPEC R11).
    Answered,
    Failure {
        failure: AttemptFailure,
        /// The start of the upstream's error body (for reset text and credit errors).
        body: &'a str,
        /// When the upstream said to come back.
        reset_at: Option<UnixMillis>,
    },
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct Resilience {
    metrics: Option<Signals>,
    breakers: Mutex<HashMap<String, Breaker>>,
    health: Mutex<HashMap<String, Health>>,
    /// Provider time-window gates (SPEC R2), in memory.
    gates: Mutex<HashMap<String, provider_cooldown::Gate>>,
    /// Model locks (SPEC R5), in memory.
    lockouts: Mutex<Lockouts>,
    /// Targets in slow start: `provider:<id>` or `connection:<id>` → (recovered at,
    /// unused). Entries leave once the share is full.
    warming: Mutex<HashMap<String, (UnixMillis, u64)>>,
    /// Slow-start tickets drawn per connection. Bounded by the connections.
    tickets: Mutex<HashMap<String, u64>>,
    dirty: Mutex<Dirty>,
}

/// One provider's breaker as the operator views show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerStatus {
    pub provider: String,
    pub state: breaker::State,
    /// Consecutive counted failures.
    pub failures: u32,
    /// How long until the breaker lets a probe through: the time left while it is open,
    /// `0` when half-open (a probe may go now), `None` while it serves.
    pub probe_in_ms: Option<u64>,
}

/// The model an attempt is for, on its connection.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    pub conn: &'a Connection,
    pub model: &'a str,
    /// Other candidates remain, so a recovering target may be passed over.
    pub may_defer: bool,
    /// How long the attempt may take (a half-open probe holds its slot that long).
    pub budget_ms: u64,
}

/// An admitted attempt. When it is the half-open breaker's probe it holds the probe
/// slot, which is given back when it drops, unless its outcome was recorded
/// ([`Resilience::record`] takes it).
#[derive(Debug)]
pub struct Admitted<'a> {
    probe: Option<(&'a Resilience, &'a str)>,
}

impl Admitted<'_> {
    /// This attempt is the half-open breaker's probe: its outcome decides.
    #[cfg(test)]
    fn is_probe(&self) -> bool {
        self.probe.is_some()
    }

    /// The outcome is being recorded: the probe slot is settled, not given back.
    fn settle(mut self) -> bool {
        self.probe.take().is_some()
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if let Some((resilience, provider)) = self.probe.take() {
            resilience.release_probe(provider);
        }
    }
}

fn gate_profile(s: &ResilienceSettings, class: AuthClass) -> provider_cooldown::Profile {
    match class {
        AuthClass::Oauth => s.provider_cooldown_oauth,
        AuthClass::Apikey | AuthClass::Local => s.provider_cooldown_apikey,
    }
}

/// The metric families state changes are counted in.
#[derive(Debug, Clone)]
struct Signals {
    transitions: Family<BreakerLabels, Counter>,
    cooldowns: Family<CooldownLabels, Counter>,
}

/// Entries changed since the last write.
#[derive(Debug, Default)]
struct Dirty {
    breakers: HashSet<String>,
    health: HashSet<String>,
}

/// Changed entries since the last write.
pub type Changes = Vec<StateChange>;

impl Resilience {
    /// State that counts its changes in `metrics`.
    pub fn new(metrics: &Metrics) -> Self {
        Self {
            metrics: Some(Signals {
                transitions: metrics.breaker_transitions.clone(),
                cooldowns: metrics.cooldowns.clone(),
            }),
            ..Self::default()
        }
    }

    fn count_transition(&self, provider: &str, state: breaker::State) {
        if let Some(m) = &self.metrics {
            m.transitions
                .get_or_create(&BreakerLabels {
                    provider: provider.to_owned(),
                    state: state.as_str(),
                })
                .inc();
        }
    }

    fn count_cooldown(&self, connection: &str, reason: &'static str) {
        if let Some(m) = &self.metrics {
            m.cooldowns
                .get_or_create(&CooldownLabels {
                    connection: connection.to_owned(),
                    reason,
                })
                .inc();
        }
    }

    /// Whether an attempt on `conn` may go ahead at `now`; a half-open breaker lets one
    /// probe through.
    pub fn check<'a>(
        &'a self,
        a: Attempt<'a>,
        settings: &ResilienceSettings,
        now: UnixMillis,
    ) -> Result<Admitted<'a>, Reason> {
        let conn = a.conn;
        // Every reason that applies is gathered and the one lasting longest is reported,
        // so a refusal names what actually keeps the target out.
        let mut worst: Option<Reason> = None;
        let mut consider = |e: Reason| {
            let rank = |x: &Reason| x.retry_after_ms().unwrap_or(u64::MAX);
            if worst.is_none_or(|w| rank(&e) > rank(&w)) {
                worst = Some(e);
            }
        };
        if settings.lockout.enabled {
            let locks = lock(&self.lockouts);
            if let Some((_, l)) = locks.locked(&conn.provider, &conn.id, a.model, now) {
                consider(Reason::ModelLocked {
                    retry_after_ms: l.until.saturating_sub(now),
                    status: l.status,
                });
            }
        }
        if settings.provider_cooldown_enabled {
            if let Some(until) = lock(&self.gates)
                .get(&conn.provider)
                .and_then(|g| g.cooled_until(now))
            {
                consider(Reason::ProviderCooling {
                    retry_after_ms: until.saturating_sub(now),
                });
            }
        }
        if let Some(h) = lock(&self.health).get(&conn.id) {
            if let Some(t) = h.terminal {
                consider(Reason::Terminal(t));
            } else if !h.usable(now) {
                consider(Reason::CoolingDown {
                    retry_after_ms: h.remaining_ms(now),
                    transient: !matches!(
                        h.last_error_type,
                        Some(ErrorType::AuthFailed | ErrorType::RequestRejected)
                    ),
                });
            }
        }
        let profile = settings.breaker.get(conn.auth_class);
        let mut breakers = lock(&self.breakers);
        let admit = breakers
            .get_mut(&conn.provider)
            .map_or(Admit::Yes, |b| b.admit(&profile, now, a.budget_ms));
        if let Admit::No { retry_after_ms } = admit {
            consider(Reason::CircuitOpen { retry_after_ms });
        }
        if let Some(e) = worst {
            if admit == Admit::Probe {
                // The probe slot was claimed but will not be used.
                if let Some(b) = breakers.get_mut(&conn.provider) {
                    b.release_probe();
                }
            }
            return Err(e);
        }
        drop(breakers);
        if admit == Admit::Probe {
            tracing::info!(provider = %conn.provider, connection_id = %conn.id, "Circuit half-open: sending a probe request.");
            return Ok(Admitted {
                probe: Some((self, &conn.provider)),
            });
        }
        if a.may_defer && !self.in_share(&conn.provider, &conn.id, now) {
            return Err(Reason::Warming);
        }
        Ok(Admitted { probe: None })
    }

    /// Gives back a probe slot whose attempt never got an answer (skipped, or cut).
    fn release_probe(&self, provider: &str) {
        if let Some(b) = lock(&self.breakers).get_mut(provider) {
            b.release_probe();
        }
    }

    /// Whether a request may go to a recovering provider or connection now (always,
    /// when neither is recovering). One ticket per request, judged against the smaller
    /// of the two shares.
    fn in_share(&self, provider: &str, connection: &str, now: UnixMillis) -> bool {
        let mut warming = lock(&self.warming);
        if warming.is_empty() {
            return true;
        }
        let keys = [
            format!("provider:{provider}"),
            format!("connection:{connection}"),
        ];
        let mut divisor = 1;
        for key in &keys {
            if let Some((since, _)) = warming.get(key) {
                let d = slow_start::divisor(*since, now);
                if d <= 1 {
                    warming.remove(key);
                } else {
                    divisor = divisor.max(d);
                }
            }
        }
        if divisor <= 1 {
            return true;
        }
        let mut all = lock(&self.tickets);
        let tickets = all.entry(connection.to_owned()).or_insert(0);
        let ticket = *tickets;
        *tickets += 1;
        slow_start::admits(divisor, ticket)
    }

    fn start_warming(&self, key: String, now: UnixMillis) {
        tracing::info!(target_key = %key, "Recovered; ramping traffic back up (slow start).");
        lock(&self.warming).insert(key, (now, 0));
    }

    /// Records the outcome of an attempt on `conn`.
    pub fn record(
        &self,
        a: Attempt<'_>,
        outcome: &Outcome<'_>,
        settings: &ResilienceSettings,
        admitted: Admitted<'_>,
        now: UnixMillis,
    ) {
        let probe = admitted.settle();
        let conn = a.conn;
        let profile = settings.breaker.get(conn.auth_class);
        match outcome {
            Outcome::Success | Outcome::Answered => {
                if settings.lockout.enabled {
                    lock(&self.lockouts).on_success(&conn.provider, &conn.id, a.model);
                }
                if let Some(g) = lock(&self.gates).get_mut(&conn.provider) {
                    g.on_success();
                }
                let mut breakers = lock(&self.breakers);
                let counted = matches!(outcome, Outcome::Success) || probe;
                if let Some(b) = breakers.get_mut(&conn.provider).filter(|_| counted) {
                    let before = b.state(&profile, now);
                    let moved = b.failures() > 0 && b.on_success(probe);
                    if moved || (before != breaker::State::Closed && probe) {
                        lock(&self.dirty).breakers.insert(conn.provider.clone());
                        if before != breaker::State::Closed {
                            tracing::info!(provider = %conn.provider, "Circuit closed.");
                            self.count_transition(&conn.provider, breaker::State::Closed);
                        }
                        if before == breaker::State::HalfOpen {
                            self.start_warming(format!("provider:{}", conn.provider), now);
                        }
                    }
                }
                drop(breakers);
                let mut health = lock(&self.health);
                if let Some(h) = health.get_mut(&conn.id) {
                    if *h != Health::default() && h.terminal.is_none() {
                        let was_cooled = h.rate_limited_until.is_some();
                        h.on_success();
                        lock(&self.dirty).health.insert(conn.id.clone());
                        if was_cooled {
                            drop(health);
                            self.start_warming(format!("connection:{}", conn.id), now);
                        }
                    }
                }
            }
            Outcome::Failure {
                failure,
                body,
                reset_at,
            } => {
                if let Some(status) = failure.status() {
                    let target = Target {
                        provider: &conn.provider,
                        connection: &conn.id,
                        model: a.model,
                    };
                    let locked = lock(&self.lockouts).on_failure(
                        &settings.lockout,
                        target,
                        status,
                        None,
                        now,
                    );
                    if let Some((key, l)) = locked {
                        tracing::info!(provider = %conn.provider, connection_id = %conn.id, scope = ?key.scope, status, lock_ms = l.until.saturating_sub(now), "Model locked on the connection.");
                        self.count_cooldown(&conn.id, "model_locked");
                    }
                }
                let provider_level = breaker::counts(*failure);
                if provider_level && settings.provider_cooldown_enabled {
                    let p = gate_profile(settings, conn.auth_class);
                    let tripped = lock(&self.gates)
                        .entry(conn.provider.clone())
                        .or_default()
                        .on_failure(&p, now);
                    if let Some(until) = tripped {
                        tracing::warn!(provider = %conn.provider, scope = "provider", cooldown_ms = until.saturating_sub(now), "Provider cooldown tripped.");
                    }
                }
                if provider_level {
                    let mut breakers = lock(&self.breakers);
                    let b = breakers.entry(conn.provider.clone()).or_default();
                    if let Some(state) = b.on_failure(&profile, *failure, now, probe) {
                        tracing::warn!(provider = %conn.provider, scope = "provider", state = state.as_str(), failures = b.failures(), reason = failure.label(), "Circuit breaker changed state.");
                        self.count_transition(&conn.provider, state);
                    }
                    lock(&self.dirty).breakers.insert(conn.provider.clone());
                } else if probe {
                    // The provider answered the probe (with an account-level error):
                    // it is up.
                    if let Some(b) = lock(&self.breakers).get_mut(&conn.provider) {
                        if b.on_success(true) {
                            lock(&self.dirty).breakers.insert(conn.provider.clone());
                            tracing::info!(provider = %conn.provider, "Circuit closed.");
                            self.count_transition(&conn.provider, breaker::State::Closed);
                        }
                    }
                }
                // A stalled stream cools its connection only when the operator asks
                // (`streamStallCooldown`, SPEC R3); any other cut records the error only.
                let stalled = matches!(failure, AttemptFailure::Stream(cut) if cut.is_stall())
                    && settings.stream_stall_cooldown;
                let classified =
                    cooldown::classify(*failure, body).or(stalled.then_some(ErrorType::Transient));
                let Some(error_type) = classified else {
                    return;
                };
                if conn.disable_cooling {
                    return;
                }
                let report = Failure {
                    error_type,
                    status: failure.status(),
                    reset_at: *reset_at,
                    message: failure.label().to_owned(),
                };
                let cprofile = settings.cooldown.get(conn.auth_class);
                let change = lock(&self.health)
                    .entry(conn.id.clone())
                    .or_default()
                    .on_failure(&cprofile, &report, now);
                match change {
                    Change::None => {}
                    Change::Cooled { until, level } => {
                        let reason = if stalled {
                            "stream_stall"
                        } else {
                            error_type.as_str()
                        };
                        self.count_cooldown(&conn.id, reason);
                        tracing::info!(
                        connection_id = %conn.id,
                        scope = "connection",
                        reason = ?error_type,
                        cooldown_ms = until.saturating_sub(now),
                        backoff_level = level,
                        "Connection cooling down."
                        );
                    }
                    Change::Terminal(t) => {
                        self.count_cooldown(&conn.id, t.as_str());
                        tracing::warn!(
                            connection_id = %conn.id,
                            scope = "connection",
                            state = t.as_str(),
                            "Connection is out of service until its credential changes or an operator resets it."
                        );
                    }
                }
                lock(&self.dirty).health.insert(conn.id.clone());
            }
        }
    }

    /// Records how a stream on `conn` (for `model`) ended after it committed to the
    /// client, when no probe is held any more: whole (`None`), or with `failure` (SPEC
    /// R11: the connection records the error; it cools only when `streamStallCooldown`
    /// says a stall should).
    pub fn record_committed(
        &self,
        conn: &Connection,
        model: &str,
        failure: Option<AttemptFailure>,
        settings: &ResilienceSettings,
        now: UnixMillis,
    ) {
        let attempt = Attempt {
            conn,
            model,
            may_defer: false,
            budget_ms: 0,
        };
        let outcome = match failure {
            None => Outcome::Success,
            Some(failure) => Outcome::Failure {
                failure,
                body: "",
                reset_at: None,
            },
        };
        self.record(attempt, &outcome, settings, Admitted { probe: None }, now);
    }

    /// A connection's health (for the operator views).
    pub fn health_of(&self, connection_id: &str) -> Health {
        lock(&self.health)
            .get(connection_id)
            .cloned()
            .unwrap_or_default()
    }

    /// Resets breakers (all, or one provider's); returns how many were reset.
    pub fn reset_breakers(&self, provider: Option<&str>) -> usize {
        let mut breakers = lock(&self.breakers);
        let ids: Vec<String> = breakers
            .keys()
            .filter(|p| provider.is_none_or(|x| x == p.as_str()))
            .cloned()
            .collect();
        for id in &ids {
            breakers.remove(id);
            lock(&self.dirty).breakers.insert(id.clone());
        }
        drop(breakers);
        lock(&self.gates).retain(|p, _| provider.is_some_and(|x| x != p));
        lock(&self.warming).retain(|k, _| {
            provider.is_some_and(|x| k.strip_prefix("provider:") != Some(x))
                && (provider.is_some() || !k.starts_with("provider:"))
        });
        ids.len()
    }

    /// Every provider with a breaker at `now`, read with each provider's profile (of its
    /// auth class, `class_of`, in `profiles`), sorted by provider.
    pub fn breakers(
        &self,
        profiles: &breaker::Profiles,
        class_of: impl Fn(&str) -> switchyard_core::domain::AuthClass,
        now: UnixMillis,
    ) -> Vec<BreakerStatus> {
        let mut out: Vec<BreakerStatus> = lock(&self.breakers)
            .iter_mut()
            .map(|(p, b)| {
                let profile = profiles.get(class_of(p));
                let state = b.state(&profile, now);
                BreakerStatus {
                    provider: p.clone(),
                    state,
                    failures: b.failures(),
                    probe_in_ms: match state {
                        breaker::State::Open => Some(b.reopens_at(&profile).saturating_sub(now)),
                        breaker::State::HalfOpen => Some(0),
                        breaker::State::Closed | breaker::State::Degraded => None,
                    },
                }
            })
            .collect();
        out.sort_by(|a, b| a.provider.cmp(&b.provider));
        out
    }

    /// Clears the cooldowns of the connections `select` picks: `(cleared, unchanged,
    /// skipped_terminal)`. Terminal accounts are listed but never cleared here.
    pub fn clear_cooldowns(&self, ids: &[String]) -> (usize, usize, usize) {
        let mut health = lock(&self.health);
        let (mut cleared, mut unchanged, mut terminal) = (0, 0, 0);
        for id in ids {
            match health.get_mut(id) {
                Some(h) if h.terminal.is_some() => terminal += 1,
                Some(h) if *h != Health::default() => {
                    h.clear_cooldown();
                    lock(&self.dirty).health.insert(id.clone());
                    cleared += 1;
                }
                _ => unchanged += 1,
            }
        }
        (cleared, unchanged, terminal)
    }

    /// Active model locks at `now`: `(key, lock)`.
    pub fn model_locks(&self, now: UnixMillis) -> Vec<(LockKey, Lock)> {
        let mut out: Vec<(LockKey, Lock)> = lock(&self.lockouts)
            .active(now)
            .map(|(k, l)| (k.clone(), *l))
            .collect();
        out.sort_by(|a, b| (&a.0.provider, &a.0.connection).cmp(&(&b.0.provider, &b.0.connection)));
        out
    }

    /// Removes model locks matching `matches`; returns how many.
    pub fn clear_locks(&self, matches: impl FnMut(&LockKey) -> bool) -> usize {
        lock(&self.lockouts).clear(matches)
    }

    /// A new credential for a connection: its health starts over (terminal included).
    pub fn reset_connection(&self, connection_id: &str) {
        if lock(&self.health).remove(connection_id).is_some() {
            lock(&self.dirty).health.insert(connection_id.to_owned());
        }
    }

    /// Drops state of providers and connections that no longer exist.
    pub fn prune(
        &self,
        provider_exists: impl Fn(&str) -> bool,
        connection_exists: impl Fn(&str) -> bool,
    ) {
        let mut gone_p = Vec::new();
        lock(&self.breakers).retain(|p, _| {
            let keep = provider_exists(p);
            if !keep {
                gone_p.push(p.clone());
            }
            keep
        });
        let mut gone_c = Vec::new();
        lock(&self.health).retain(|c, _| {
            let keep = connection_exists(c);
            if !keep {
                gone_c.push(c.clone());
            }
            keep
        });
        lock(&self.gates).retain(|p, _| provider_exists(p));
        lock(&self.tickets).retain(|c, _| connection_exists(c));
        // Their rows go too, so a connection re-created under the same id starts clean.
        let mut dirty = lock(&self.dirty);
        dirty.breakers.extend(gone_p);
        dirty.health.extend(gone_c);
    }

    /// Marks entries whose write failed for writing again.
    pub fn requeue(&self, breakers: &Changes, health: &Changes) {
        let mut dirty = lock(&self.dirty);
        dirty
            .breakers
            .extend(breakers.iter().map(|(id, _)| id.clone()));
        dirty.health.extend(health.iter().map(|(id, _)| id.clone()));
    }

    /// Restores persisted state.
    pub fn load(&self, breakers: StateRows, health: StateRows) {
        let mut b = lock(&self.breakers);
        for (id, json) in breakers {
            match serde_json::from_str(&json) {
                Ok(state) => {
                    b.insert(id, state);
                }
                Err(e) => {
                    tracing::warn!(provider = %id, error = %e, "Ignoring an unreadable stored breaker state.")
                }
            }
        }
        let mut h = lock(&self.health);
        for (id, json) in health {
            match serde_json::from_str(&json) {
                Ok(state) => {
                    h.insert(id, state);
                }
                Err(e) => {
                    tracing::warn!(connection_id = %id, error = %e, "Ignoring an unreadable stored connection health.")
                }
            }
        }
    }

    /// Changed entries since the last call: `(breakers, health)`, each `(id, JSON or
    /// None when the entry is gone)`.
    pub fn take_dirty(&self) -> (Changes, Changes) {
        let dirty = std::mem::take(&mut *lock(&self.dirty));
        let breakers = lock(&self.breakers);
        let b = dirty
            .breakers
            .into_iter()
            .map(|id| {
                let json = breakers
                    .get(&id)
                    .and_then(|s| serde_json::to_string(s).ok());
                (id, json)
            })
            .collect();
        drop(breakers);
        let health = lock(&self.health);
        let h = dirty
            .health
            .into_iter()
            .map(|id| {
                let json = health.get(&id).and_then(|s| serde_json::to_string(s).ok());
                (id, json)
            })
            .collect();
        (b, h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_core::domain::UpstreamFormat;
    use switchyard_core::outcome::StreamCut;
    use switchyard_core::settings::{resolve, Layers};

    fn local() -> Connection {
        Connection {
            id: "c1".into(),
            provider: "p".into(),
            auth_class: AuthClass::Local,
            format: UpstreamFormat::Openai,
            base_url: "http://127.0.0.1:9".into(),
            enabled: true,
            max_concurrent: None,
            model_concurrency: Default::default(),
            queue: Default::default(),
            disable_cooling: true,
            index: 0,
        }
    }

    fn defaults() -> switchyard_core::settings::ResilienceSettings {
        resolve(&Layers::default()).unwrap().settings.resilience
    }

    /// An attempt at model `m` on `conn`.
    fn attempt_on(conn: &Connection) -> Attempt<'_> {
        Attempt {
            conn,
            model: "m",
            may_defer: false,
            budget_ms: 1_000,
        }
    }

    /// A connection that could not be made.
    const CONNECT_FAILED: Outcome<'static> = Outcome::Failure {
        failure: AttemptFailure::Connect,
        body: "",
        reset_at: None,
    };

    #[test]
    fn a_probe_slot_is_given_back_when_its_admission_drops_and_settled_when_recorded() {
        let (settings, r, conn) = (defaults(), Resilience::default(), local());
        let attempt = attempt_on(&conn);
        let failure = CONNECT_FAILED;
        // A local server's breaker opens at its second failure and resets after 15 s.
        for now in [0, 1] {
            let admitted = r.check(attempt, &settings, now).unwrap();
            r.record(attempt, &failure, &settings, admitted, now);
        }
        assert!(matches!(
            r.check(attempt, &settings, 2),
            Err(Reason::CircuitOpen { .. })
        ));
        let half_open = 15_001;
        let probe = r.check(attempt, &settings, half_open).unwrap();
        assert!(probe.is_probe());
        // While the probe is out, nobody else gets through.
        assert!(matches!(
            r.check(attempt, &settings, half_open),
            Err(Reason::CircuitOpen { .. })
        ));
        drop(probe);
        // Given back unused: the next attempt is the probe.
        let probe = r.check(attempt, &settings, half_open).unwrap();
        assert!(probe.is_probe());
        r.record(attempt, &Outcome::Success, &settings, probe, half_open);
        let after = r.check(attempt, &settings, half_open).unwrap();
        assert!(!after.is_probe());
    }

    #[test]
    fn breaker_and_cooldown_profiles_are_read_from_the_settings() {
        let mut settings = defaults();
        settings.cooldown.apikey = cooldown::Profile {
            base_ms: 1_000,
            steps: 0,
        };
        settings.breaker.local = breaker::Profile {
            degrade_at: 3,
            open_at: 3,
            reset_ms: 5_000,
            double_after: 1,
            max_multiplier: 1,
        };
        let r = Resilience::default();
        let cooling = Connection {
            disable_cooling: false,
            ..local()
        };
        let attempt = attempt_on(&cooling);
        let cooling_for = |now| match r.check(attempt, &settings, now) {
            Err(Reason::CoolingDown { retry_after_ms, .. }) => Some(retry_after_ms),
            _ => None,
        };
        // A local connection cools like an API key: 1 s, never doubled (0 steps).
        for now in [0, 1_000] {
            let admitted = r.check(attempt, &settings, now).unwrap();
            r.record(attempt, &CONNECT_FAILED, &settings, admitted, now);
            assert_eq!(cooling_for(now + 999), Some(1), "at {now}");
        }
        // A crawl cools it only with `streamStallCooldown`, and is not the provider's.
        let crawl = AttemptFailure::Stream(StreamCut::Throughput);
        r.record_committed(&cooling, "m", Some(crawl), &settings, 2_000);
        assert_eq!(cooling_for(2_000), None);
        let stalling = switchyard_core::settings::ResilienceSettings {
            stream_stall_cooldown: true,
            ..settings.clone()
        };
        r.record_committed(&cooling, "m", Some(crawl), &stalling, 2_000);
        assert_eq!(cooling_for(2_999), Some(1));
        // The provider's third counted failure opens its breaker for 5 s.
        let admitted = r.check(attempt, &settings, 3_000).unwrap();
        r.record(attempt, &CONNECT_FAILED, &settings, admitted, 3_000);
        let other = Connection {
            id: "c2".into(),
            ..local()
        };
        assert!(matches!(
            r.check(attempt_on(&other), &settings, 3_001),
            Err(Reason::CircuitOpen { .. })
        ));
        let state = |profiles: &breaker::Profiles, now| {
            r.breakers(profiles, |_| AuthClass::Local, now)[0].state
        };
        assert_eq!(state(&settings.breaker, 7_999), breaker::State::Open);
        assert_eq!(state(&defaults().breaker, 8_000), breaker::State::Open);
        assert_eq!(state(&settings.breaker, 8_000), breaker::State::HalfOpen);
    }

    #[test]
    fn the_breakers_view_says_when_an_open_breaker_lets_a_probe_through() {
        let (settings, r, conn) = (defaults(), Resilience::default(), local());
        let attempt = attempt_on(&conn);
        let failure = CONNECT_FAILED;
        let view = |now| r.breakers(&settings.breaker, |_| AuthClass::Local, now);
        let status = |state, failures, probe_in_ms| {
            vec![BreakerStatus {
                provider: "p".into(),
                state,
                failures,
                probe_in_ms,
            }]
        };
        let admitted = r.check(attempt, &settings, 0).unwrap();
        r.record(attempt, &failure, &settings, admitted, 0);
        assert_eq!(view(1), status(breaker::State::Degraded, 1, None));
        // The second failure opens it at 1 ms for 15 s.
        let admitted = r.check(attempt, &settings, 1).unwrap();
        r.record(attempt, &failure, &settings, admitted, 1);
        assert_eq!(view(1), status(breaker::State::Open, 2, Some(15_000)));
        assert_eq!(view(10_001), status(breaker::State::Open, 2, Some(5_000)));
        assert_eq!(view(15_001), status(breaker::State::HalfOpen, 2, Some(0)));
    }
}
