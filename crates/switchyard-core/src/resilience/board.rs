//! The resilience board (SPEC R1–R5, R13, R14): every provider breaker, connection
//! health, provider cooldown, model lock, slow-start share and egress bucket as one
//! state machine. [`Board::admit`] says whether an attempt may go; [`Board::record`]
//! applies an attempt's outcome — a success, or a failure's [`Verdict`] — and returns
//! the [`Event`]s it caused, which the shell turns into logs and metrics. Every
//! transition takes `now`; nothing here does I/O or reads a clock.
//!
//! Rules that combine the machines live here: the reason that lasts longest is the one
//! an exclusion names; an account-level answer to a half-open probe closes the breaker
//! (the provider answered); recovery starts a slow start; a 429 of an egress-bucketed
//! family cools its peers behind the same address (never terminal, never shorter).

use super::breaker::{self, Admit, Breaker};
use super::cooldown::{Change, ErrorType, Failure, Health, Terminal};
use super::lockout::{Lock, LockKey, Lockouts, Target};
use super::rules::EGRESS_WINDOW_MS;
use super::verdict::{Cause, Verdict};
use super::{provider_cooldown, slow_start};
use crate::domain::AuthClass;
use crate::routing::Reason;
use crate::settings::ResilienceSettings;
use crate::UnixMillis;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::hash::Hash;

/// An attempt's place on the board: its connection, provider family and model.
#[derive(Debug, Clone, Copy)]
pub struct At<'a> {
    pub provider: &'a str,
    pub connection: &'a str,
    pub model: &'a str,
    pub auth_class: AuthClass,
    /// Failures never cool this connection (SPEC R3's opt-out).
    pub disable_cooling: bool,
    /// The provider's rule family ([`super::rules::family_of`]).
    pub family: &'a str,
}

/// An admitted attempt: an ordinary one, or the half-open breaker's probe (whose slot
/// must be settled by [`Board::record`] or given back by [`Board::release_probe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleared {
    Go,
    Probe,
}

/// What an attempt did.
#[derive(Debug, Clone, Copy)]
pub enum Outcome<'a> {
    Success,
    /// A stream committed to the client: the provider is up (a half-open probe closes
    /// its breaker), but the breaker's count of failures waits for the stream's end,
    /// so streams that keep failing after they start still open it (SPEC R11).
    Answered,
    Failed(&'a Verdict),
}

/// What a transition did, for logs, metrics and the dashboard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    BreakerMoved {
        provider: String,
        state: breaker::State,
        failures: u32,
        cause: Cause,
    },
    BreakerClosed {
        provider: String,
    },
    ProviderCooled {
        provider: String,
        until: UnixMillis,
        /// The rule that cooled it; `None` for the time-window gate (SPEC R2).
        rule: Option<String>,
    },
    ConnectionCooled {
        connection: String,
        until: UnixMillis,
        level: u32,
        /// The metric's reason: the health's error type, or `stream_stall`.
        reason: &'static str,
        cause: Cause,
    },
    ConnectionTerminal {
        connection: String,
        state: Terminal,
    },
    ModelLocked {
        key: LockKey,
        lock: Lock,
        rule: Option<String>,
    },
    /// A peer behind the failed connection's egress address cooled with it (SPEC R14).
    EgressCooled {
        connection: String,
        from: String,
        address: String,
        until: UnixMillis,
    },
    /// A recovered target ramps back up (slow start): `provider:<id>` or
    /// `connection:<id>`.
    Warming {
        key: String,
    },
}

/// A connection's last known egress address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Egress {
    pub family: String,
    pub address: String,
    pub seen: UnixMillis,
    pub disable_cooling: bool,
}

/// Connections behind one egress address of one family, for the operator views.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    pub family: String,
    pub address: String,
    /// `(connection, last seen)`, by connection.
    pub connections: Vec<(String, UnixMillis)>,
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
    /// How long the provider's cooldown (the time-window gate's or a rule's, SPEC R2,
    /// R13) still holds; `None` when it is not cooling.
    pub cooling_ms: Option<u64>,
}

/// Entries changed since the last write: `(id, JSON or None when gone)`.
pub type Changes = Vec<(String, Option<String>)>;

/// What a change shared with the other replicas is about (SPEC O6, B6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Topic {
    /// A provider's breaker; the id is the provider.
    Breaker,
    /// A connection's (an account's) health, terminal states included; the id is the
    /// connection.
    Health,
    /// A model lock (SPEC R5, R13); the id is the [`LockKey`] as JSON.
    Lock,
    /// A provider cooldown, the time-window gate's or a rule's (SPEC R2, R13); the id is
    /// the provider and the state the time it ends.
    ProviderCooldown,
}

impl Topic {
    pub const ALL: [Self; 4] = [
        Self::Breaker,
        Self::Health,
        Self::Lock,
        Self::ProviderCooldown,
    ];
}

/// One change this replica made, for the other replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shared {
    pub topic: Topic,
    pub id: String,
    /// The state as JSON, or `None` when it is gone (reset, cleared, run down).
    pub state: Option<String>,
}

/// Most changes kept for the other replicas per topic while they cannot be published
/// (Redis lost): beyond it further changes reach the others only through their own
/// traffic.
pub const MAX_UNSHARED: usize = 100_000;

/// Ids changed since they were last taken for the other replicas; nothing is kept
/// unless the board is shared ([`Board::share`]).
#[derive(Debug)]
struct Outbox<K> {
    on: bool,
    ids: HashSet<K>,
}

impl<K> Default for Outbox<K> {
    fn default() -> Self {
        Self {
            on: false,
            ids: HashSet::new(),
        }
    }
}

impl<K: Eq + Hash> Outbox<K> {
    fn note(&mut self, id: K) {
        if self.on && self.ids.len() < MAX_UNSHARED {
            self.ids.insert(id);
        }
    }

    fn contains<Q: Hash + Eq + ?Sized>(&self, id: &Q) -> bool
    where
        K: std::borrow::Borrow<Q>,
    {
        self.ids.contains(id)
    }

    fn take(&mut self) -> HashSet<K> {
        std::mem::take(&mut self.ids)
    }
}

/// Every resilience state; see the module docs. Its maps are bounded by the
/// configuration (providers, connections) and the lockout's own bound.
#[derive(Debug, Default)]
pub struct Board {
    breakers: HashMap<String, Breaker>,
    health: HashMap<String, Health>,
    /// Provider time-window gates (SPEC R2).
    gates: HashMap<String, provider_cooldown::Gate>,
    /// Provider-wide cooldowns set by a rule (SPEC R13): provider → until.
    provider_holds: HashMap<String, UnixMillis>,
    lockouts: Lockouts,
    /// Targets in slow start (`provider:<id>`, `connection:<id>`) → recovered at.
    /// Entries leave once the share is full.
    warming: HashMap<String, UnixMillis>,
    /// Slow-start tickets drawn per connection.
    tickets: HashMap<String, u64>,
    /// Each connection's last known egress (SPEC R14).
    egress: HashMap<String, Egress>,
    dirty_breakers: HashSet<String>,
    dirty_health: HashSet<String>,
    /// What this replica's own traffic or operators changed since the last
    /// [`Board::take_shared`], for the other replicas (SPEC O6, B6).
    shared_breakers: Outbox<String>,
    shared_health: Outbox<String>,
    shared_locks: Outbox<LockKey>,
    shared_cooldowns: Outbox<String>,
}

fn gate_profile(s: &ResilienceSettings, class: AuthClass) -> provider_cooldown::Profile {
    match class {
        AuthClass::Oauth => s.provider_cooldown_oauth,
        AuthClass::Apikey | AuthClass::Local => s.provider_cooldown_apikey,
    }
}

impl Board {
    /// Whether an attempt at `at` may go at `now`; a half-open breaker lets one probe
    /// through. `may_defer`: other candidates remain, so a recovering target may be
    /// passed over. `budget_ms`: how long the attempt may take (a probe holds its slot
    /// that long).
    pub fn admit(
        &mut self,
        at: &At<'_>,
        settings: &ResilienceSettings,
        may_defer: bool,
        budget_ms: u64,
        now: UnixMillis,
    ) -> Result<Cleared, Reason> {
        // Every reason that applies is gathered and the one lasting longest is reported,
        // so a refusal names what actually keeps the target out.
        let mut worst: Option<Reason> = None;
        let mut consider = |e: Reason| {
            let rank = |x: &Reason| x.retry_after_ms().unwrap_or(u64::MAX);
            if worst.is_none_or(|w| rank(&e) > rank(&w)) {
                worst = Some(e);
            }
        };
        if let Some((_, l)) =
            self.lockouts
                .locked(&settings.lockout, at.provider, at.connection, at.model, now)
        {
            consider(Reason::ModelLocked {
                retry_after_ms: l.until.saturating_sub(now),
                status: l.status,
            });
        }
        let gate = self
            .gates
            .get(at.provider)
            .filter(|_| settings.provider_cooldown_enabled)
            .and_then(|g| g.cooled_until(now));
        let held = self.provider_holds.get(at.provider).filter(|t| **t > now);
        if let Some(until) = gate.max(held.copied()) {
            consider(Reason::ProviderCooling {
                retry_after_ms: until.saturating_sub(now),
            });
        }
        if let Some(h) = self.health.get(at.connection) {
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
        let profile = settings.breaker.get(at.auth_class);
        let admit = self
            .breakers
            .get_mut(at.provider)
            .map_or(Admit::Yes, |b| b.admit(&profile, now, budget_ms));
        if let Admit::No { retry_after_ms } = admit {
            consider(Reason::CircuitOpen { retry_after_ms });
        }
        if let Some(e) = worst {
            if admit == Admit::Probe {
                // The probe slot was claimed but will not be used.
                self.release_probe(at.provider);
            }
            return Err(e);
        }
        if admit == Admit::Probe {
            return Ok(Cleared::Probe);
        }
        if may_defer && !self.in_share(at.provider, at.connection, now) {
            return Err(Reason::Warming);
        }
        Ok(Cleared::Go)
    }

    /// Gives back a probe slot whose attempt never got an answer (skipped, or cut).
    pub fn release_probe(&mut self, provider: &str) {
        if let Some(b) = self.breakers.get_mut(provider) {
            b.release_probe();
        }
    }

    /// Whether a request may go to a recovering provider or connection now (always,
    /// when neither is recovering). One ticket per request, judged against the smaller
    /// of the two shares.
    fn in_share(&mut self, provider: &str, connection: &str, now: UnixMillis) -> bool {
        if self.warming.is_empty() {
            return true;
        }
        let keys = [
            format!("provider:{provider}"),
            format!("connection:{connection}"),
        ];
        let mut divisor = 1;
        for key in &keys {
            if let Some(since) = self.warming.get(key) {
                let d = slow_start::divisor(*since, now);
                if d <= 1 {
                    self.warming.remove(key);
                } else {
                    divisor = divisor.max(d);
                }
            }
        }
        if divisor <= 1 {
            return true;
        }
        let tickets = self.tickets.entry(connection.to_owned()).or_insert(0);
        let ticket = *tickets;
        *tickets += 1;
        slow_start::admits(divisor, ticket)
    }

    fn start_warming(&mut self, key: String, now: UnixMillis, events: &mut Vec<Event>) {
        self.warming.insert(key.clone(), now);
        events.push(Event::Warming { key });
    }

    /// Notes the egress address an attempt on `at` went out from (SPEC R14).
    pub fn note_egress(&mut self, at: &At<'_>, address: &str, now: UnixMillis) {
        match self.egress.get_mut(at.connection) {
            Some(e) if e.address == address && e.family == at.family => {
                e.seen = now;
                e.disable_cooling = at.disable_cooling;
            }
            _ => {
                self.egress.insert(
                    at.connection.to_owned(),
                    Egress {
                        family: at.family.to_owned(),
                        address: address.to_owned(),
                        seen: now,
                        disable_cooling: at.disable_cooling,
                    },
                );
            }
        }
    }

    /// Records the outcome of an attempt at `at`; `probe` says it held the half-open
    /// probe slot (settled here). Returns what changed.
    pub fn record(
        &mut self,
        at: &At<'_>,
        outcome: Outcome<'_>,
        probe: bool,
        settings: &ResilienceSettings,
        now: UnixMillis,
    ) -> Vec<Event> {
        let mut events = Vec::new();
        match outcome {
            Outcome::Success | Outcome::Answered => {
                let counted = matches!(outcome, Outcome::Success) || probe;
                self.on_success(at, counted, probe, settings, now, &mut events);
            }
            Outcome::Failed(v) => self.on_failure(at, v, probe, settings, now, &mut events),
        }
        events
    }

    fn on_success(
        &mut self,
        at: &At<'_>,
        counted: bool,
        probe: bool,
        settings: &ResilienceSettings,
        now: UnixMillis,
        events: &mut Vec<Event>,
    ) {
        for key in self
            .lockouts
            .on_success(at.provider, at.connection, at.model)
        {
            self.shared_locks.note(key);
        }
        if let Some(g) = self.gates.get_mut(at.provider) {
            g.on_success();
        }
        let profile = settings.breaker.get(at.auth_class);
        if let Some(b) = self.breakers.get_mut(at.provider).filter(|_| counted) {
            let before = b.state(&profile, now);
            let moved = b.failures() > 0 && b.on_success(probe);
            if moved || (before != breaker::State::Closed && probe) {
                mark(
                    &mut self.dirty_breakers,
                    &mut self.shared_breakers,
                    at.provider,
                );
                if before != breaker::State::Closed {
                    events.push(Event::BreakerClosed {
                        provider: at.provider.to_owned(),
                    });
                }
                if before == breaker::State::HalfOpen {
                    self.start_warming(format!("provider:{}", at.provider), now, events);
                }
            }
        }
        if let Some(h) = self.health.get_mut(at.connection) {
            if *h != Health::default() && h.terminal.is_none() {
                let was_cooled = h.rate_limited_until.is_some();
                h.on_success();
                mark(
                    &mut self.dirty_health,
                    &mut self.shared_health,
                    at.connection,
                );
                if was_cooled {
                    self.start_warming(format!("connection:{}", at.connection), now, events);
                }
            }
        }
    }

    fn on_failure(
        &mut self,
        at: &At<'_>,
        v: &Verdict,
        probe: bool,
        settings: &ResilienceSettings,
        now: UnixMillis,
        events: &mut Vec<Event>,
    ) {
        let target = Target {
            provider: at.provider,
            connection: at.connection,
            model: at.model,
        };
        if let Some(hit) = &v.lock {
            let locked = if hit.forced {
                Some(self.lockouts.on_rule(
                    &settings.lockout,
                    target,
                    hit.scope.clone(),
                    hit.status,
                    v.cooldown_ms,
                    now,
                ))
            } else {
                self.lockouts.on_failure(
                    &settings.lockout,
                    target,
                    hit.status,
                    hit.scope.clone(),
                    now,
                )
            };
            if let Some((key, lock)) = locked {
                self.shared_locks.note(key.clone());
                events.push(Event::ModelLocked {
                    key,
                    lock,
                    rule: v.rule.clone().filter(|_| hit.forced),
                });
            }
        }
        if let Some(ms) = v.provider_cooldown_ms {
            let until = now.saturating_add(ms);
            let held = self
                .provider_holds
                .entry(at.provider.to_owned())
                .or_default();
            // Never shortened by a later, shorter one.
            if until > *held {
                *held = until;
                self.shared_cooldowns.note(at.provider.to_owned());
                events.push(Event::ProviderCooled {
                    provider: at.provider.to_owned(),
                    until,
                    rule: v.rule.clone(),
                });
            }
        }
        let profile = settings.breaker.get(at.auth_class);
        if v.breaker {
            if settings.provider_cooldown_enabled {
                let p = gate_profile(settings, at.auth_class);
                let gate = self.gates.entry(at.provider.to_owned()).or_default();
                if let Some(until) = gate.on_failure(&p, now) {
                    self.shared_cooldowns.note(at.provider.to_owned());
                    events.push(Event::ProviderCooled {
                        provider: at.provider.to_owned(),
                        until,
                        rule: None,
                    });
                }
            }
            let b = self.breakers.entry(at.provider.to_owned()).or_default();
            if let Some(state) = b.on_failure(&profile, now, probe) {
                events.push(Event::BreakerMoved {
                    provider: at.provider.to_owned(),
                    state,
                    failures: b.failures(),
                    cause: v.cause,
                });
            }
            mark(
                &mut self.dirty_breakers,
                &mut self.shared_breakers,
                at.provider,
            );
        } else if probe {
            // The provider answered the probe (with an account-level error): it is up.
            if let Some(b) = self.breakers.get_mut(at.provider) {
                if b.on_success(true) {
                    mark(
                        &mut self.dirty_breakers,
                        &mut self.shared_breakers,
                        at.provider,
                    );
                    events.push(Event::BreakerClosed {
                        provider: at.provider.to_owned(),
                    });
                }
            }
        }
        let Some(error_type) = v.health else {
            return;
        };
        if at.disable_cooling {
            return;
        }
        // The upstream's own word on when to come back wins over a rule's duration.
        let reset_at = v
            .retry_at
            .or_else(|| v.cooldown_ms.map(|ms| now.saturating_add(ms)));
        let failure = Failure {
            error_type,
            status: v.failure.status(),
            reset_at,
            message: v.failure.label().to_owned(),
        };
        let cprofile = settings.cooldown.get(at.auth_class);
        let health = self.health.entry(at.connection.to_owned()).or_default();
        let change = health.on_failure(&cprofile, &failure, now);
        let cooling = health.rate_limited_until.filter(|t| *t > now);
        mark(
            &mut self.dirty_health,
            &mut self.shared_health,
            at.connection,
        );
        match change {
            Change::None => {}
            Change::Cooled { until, level } => events.push(Event::ConnectionCooled {
                connection: at.connection.to_owned(),
                until,
                level,
                reason: if v.cause == Cause::StreamStall {
                    "stream_stall"
                } else {
                    error_type.as_str()
                },
                cause: v.cause,
            }),
            Change::Terminal(state) => events.push(Event::ConnectionTerminal {
                connection: at.connection.to_owned(),
                state,
            }),
        }
        if let (true, Some(until)) = (v.egress, cooling) {
            self.egress_fan_out(at, until, now, events);
        }
    }

    /// Cools every connection of `at`'s family last seen (within the window) behind
    /// `at`'s egress address until `until` (SPEC R14).
    fn egress_fan_out(
        &mut self,
        at: &At<'_>,
        until: UnixMillis,
        now: UnixMillis,
        events: &mut Vec<Event>,
    ) {
        let fresh = |e: &Egress| now.saturating_sub(e.seen) <= EGRESS_WINDOW_MS;
        let Some(address) = self
            .egress
            .get(at.connection)
            .filter(|e| fresh(e) && e.family == at.family)
            .map(|e| e.address.clone())
        else {
            return;
        };
        let mut peers: Vec<&String> = self
            .egress
            .iter()
            .filter(|(c, e)| {
                c.as_str() != at.connection
                    && e.family == at.family
                    && e.address == address
                    && !e.disable_cooling
                    && fresh(e)
            })
            .map(|(c, _)| c)
            .collect();
        peers.sort();
        for peer in peers {
            let health = self.health.entry(peer.clone()).or_default();
            let message = format!("egress {address} shared with {}", at.connection);
            if let Change::Cooled { until, .. } = health.cool_with_peer(until, &message, now) {
                mark(&mut self.dirty_health, &mut self.shared_health, peer);
                events.push(Event::EgressCooled {
                    connection: peer.clone(),
                    from: at.connection.to_owned(),
                    address: address.clone(),
                    until,
                });
            }
        }
    }

    /// A connection's health (for the operator views).
    pub fn health_of(&self, connection_id: &str) -> Health {
        self.health.get(connection_id).cloned().unwrap_or_default()
    }

    /// Resets breakers (all, or one provider's) and provider cooldowns; returns how many
    /// breakers were reset.
    pub fn reset_breakers(&mut self, provider: Option<&str>) -> usize {
        let ids: Vec<String> = self
            .breakers
            .keys()
            .filter(|p| provider.is_none_or(|x| x == p.as_str()))
            .cloned()
            .collect();
        for id in &ids {
            self.breakers.remove(id);
            mark(&mut self.dirty_breakers, &mut self.shared_breakers, id);
        }
        let cooled: HashSet<String> = self
            .gates
            .keys()
            .chain(self.provider_holds.keys())
            .filter(|p| provider.is_none_or(|x| x == p.as_str()))
            .cloned()
            .collect();
        for p in cooled {
            self.gates.remove(&p);
            self.provider_holds.remove(&p);
            self.shared_cooldowns.note(p);
        }
        self.warming.retain(|k, _| {
            provider.is_some_and(|x| k.strip_prefix("provider:") != Some(x))
                && (provider.is_some() || !k.starts_with("provider:"))
        });
        ids.len()
    }

    /// Every provider with a breaker or a running cooldown at `now`, read with each
    /// provider's profile (of its auth class, `class_of`, in `profiles`), sorted by
    /// provider.
    pub fn breakers(
        &mut self,
        profiles: &breaker::Profiles,
        class_of: impl Fn(&str) -> AuthClass,
        now: UnixMillis,
    ) -> Vec<BreakerStatus> {
        // Each cooling provider's time left.
        let cooling: HashMap<String, u64> = self
            .gates
            .keys()
            .chain(self.provider_holds.keys())
            .filter_map(|p| {
                let end = self.cooldown_end(p).filter(|t| *t > now)?;
                Some((p.clone(), end - now))
            })
            .collect();
        let mut out: Vec<BreakerStatus> = self
            .breakers
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
                    cooling_ms: cooling.get(p).copied(),
                }
            })
            .collect();
        for (p, left) in &cooling {
            if !self.breakers.contains_key(p) {
                out.push(BreakerStatus {
                    provider: p.clone(),
                    state: breaker::State::Closed,
                    failures: 0,
                    probe_in_ms: None,
                    cooling_ms: Some(*left),
                });
            }
        }
        out.sort_by(|a, b| a.provider.cmp(&b.provider));
        out
    }

    /// Clears the cooldowns of the connections `ids`: `(cleared, unchanged,
    /// skipped_terminal)`. Terminal accounts are counted but never cleared here.
    pub fn clear_cooldowns(&mut self, ids: &[String]) -> (usize, usize, usize) {
        let (mut cleared, mut unchanged, mut terminal) = (0, 0, 0);
        for id in ids {
            match self.health.get_mut(id) {
                Some(h) if h.terminal.is_some() => terminal += 1,
                Some(h) if *h != Health::default() => {
                    h.clear_cooldown();
                    mark(&mut self.dirty_health, &mut self.shared_health, id);
                    cleared += 1;
                }
                _ => unchanged += 1,
            }
        }
        (cleared, unchanged, terminal)
    }

    /// Active model locks at `now`, by provider and connection.
    pub fn model_locks(&self, now: UnixMillis) -> Vec<(LockKey, Lock)> {
        let mut out: Vec<(LockKey, Lock)> = self
            .lockouts
            .active(now)
            .map(|(k, l)| (k.clone(), *l))
            .collect();
        out.sort_by(|a, b| (&a.0.provider, &a.0.connection).cmp(&(&b.0.provider, &b.0.connection)));
        out
    }

    /// Removes model locks matching `matches`; returns how many.
    pub fn clear_locks(&mut self, matches: impl FnMut(&LockKey) -> bool) -> usize {
        let removed = self.lockouts.clear(matches);
        let n = removed.len();
        for key in removed {
            self.shared_locks.note(key);
        }
        n
    }

    /// The egress buckets with more than nothing in them at `now`, by family and
    /// address.
    pub fn egress_buckets(&self, now: UnixMillis) -> Vec<Bucket> {
        let mut out: Vec<Bucket> = Vec::new();
        let mut entries: Vec<(&String, &Egress)> = self
            .egress
            .iter()
            .filter(|(_, e)| now.saturating_sub(e.seen) <= EGRESS_WINDOW_MS)
            .collect();
        entries.sort_by(|a, b| {
            (&a.1.family, &a.1.address, a.0).cmp(&(&b.1.family, &b.1.address, b.0))
        });
        for (connection, e) in entries {
            match out.last_mut() {
                Some(b) if b.family == e.family && b.address == e.address => {
                    b.connections.push((connection.clone(), e.seen));
                }
                _ => out.push(Bucket {
                    family: e.family.clone(),
                    address: e.address.clone(),
                    connections: vec![(connection.clone(), e.seen)],
                }),
            }
        }
        out
    }

    /// A refresh of connection `connection_id`'s OAuth token failed at `now` (SPEC R4):
    /// it cools until the retry, or is `expired`.
    pub fn refresh_failed(
        &mut self,
        connection_id: &str,
        failed: crate::oauth::Failed,
        message: &str,
        now: UnixMillis,
    ) -> Change {
        let change = self
            .health
            .entry(connection_id.to_owned())
            .or_default()
            .on_refresh_failure(failed, message, now);
        if change != Change::None {
            mark(
                &mut self.dirty_health,
                &mut self.shared_health,
                connection_id,
            );
        }
        change
    }

    /// A new credential for a connection: its health starts over (terminal included).
    pub fn reset_connection(&mut self, connection_id: &str) {
        if self.health.remove(connection_id).is_some() {
            mark(
                &mut self.dirty_health,
                &mut self.shared_health,
                connection_id,
            );
        }
    }

    /// Drops state of providers and connections that no longer exist (their rows go
    /// too, so a connection re-created under the same id starts clean), and brings the
    /// egress entries of the others up to date: `connection` gives a connection's
    /// family and `disable_cooling`, `None` when it is gone.
    pub fn prune(
        &mut self,
        provider_exists: impl Fn(&str) -> bool,
        connection: impl Fn(&str) -> Option<(String, bool)>,
    ) {
        let connection_exists = |c: &str| connection(c).is_some();
        let dirty = &mut self.dirty_breakers;
        self.breakers.retain(|p, _| {
            let keep = provider_exists(p);
            if !keep {
                dirty.insert(p.clone());
            }
            keep
        });
        let dirty = &mut self.dirty_health;
        self.health.retain(|c, _| {
            let keep = connection_exists(c);
            if !keep {
                dirty.insert(c.clone());
            }
            keep
        });
        self.gates.retain(|p, _| provider_exists(p));
        self.provider_holds.retain(|p, _| provider_exists(p));
        self.tickets.retain(|c, _| connection_exists(c));
        self.egress.retain(|c, e| match connection(c) {
            Some((family, disable_cooling)) => {
                e.disable_cooling = disable_cooling;
                // A provider that changed family starts its bucket over.
                e.family == family
            }
            None => false,
        });
    }

    /// Marks entries whose write failed for writing again.
    pub fn requeue(&mut self, breakers: &Changes, health: &Changes) {
        self.dirty_breakers
            .extend(breakers.iter().map(|(id, _)| id.clone()));
        self.dirty_health
            .extend(health.iter().map(|(id, _)| id.clone()));
    }

    /// Restores persisted state: `(id, JSON)` rows; unreadable rows are returned as
    /// `(id, error)` and skipped.
    pub fn load(
        &mut self,
        breakers: Vec<(String, String)>,
        health: Vec<(String, String)>,
    ) -> Vec<(String, String)> {
        let mut bad = Vec::new();
        for (id, json) in breakers {
            match serde_json::from_str(&json) {
                Ok(state) => {
                    self.breakers.insert(id, state);
                }
                Err(e) => bad.push((id, e.to_string())),
            }
        }
        for (id, json) in health {
            match serde_json::from_str(&json) {
                Ok(state) => {
                    self.health.insert(id, state);
                }
                Err(e) => bad.push((id, e.to_string())),
            }
        }
        bad
    }

    /// Restores connections' last known egress (from the request log).
    pub fn load_egress(&mut self, rows: impl IntoIterator<Item = (String, Egress)>) {
        self.egress.extend(rows);
    }

    /// Shares this board with other replicas: from now on what this replica changes is
    /// kept for [`Board::take_shared`].
    pub fn share(&mut self) {
        self.shared_breakers.on = true;
        self.shared_health.on = true;
        self.shared_locks.on = true;
        self.shared_cooldowns.on = true;
    }

    /// What this replica changed since the last call (by its traffic, or an operator's
    /// reset or clear), for the other replicas.
    pub fn take_shared(&mut self) -> Vec<Shared> {
        let mut out = Vec::new();
        let mut push = |topic, id, state| out.push(Shared { topic, id, state });
        for (id, state) in rows(self.shared_breakers.take(), &self.breakers) {
            push(Topic::Breaker, id, state);
        }
        for (id, state) in rows(self.shared_health.take(), &self.health) {
            push(Topic::Health, id, state);
        }
        for key in self.shared_locks.take() {
            let state = self
                .lockouts
                .get(&key)
                .and_then(|l| serde_json::to_string(l).ok());
            if let Ok(id) = serde_json::to_string(&key) {
                push(Topic::Lock, id, state);
            }
        }
        for provider in self.shared_cooldowns.take() {
            let until = self.cooldown_end(&provider).map(|t| t.to_string());
            push(Topic::ProviderCooldown, provider, until);
        }
        out
    }

    /// When `provider`'s cooldown, the gate's or a rule's, ends (or ended).
    fn cooldown_end(&self, provider: &str) -> Option<UnixMillis> {
        let gate = self.gates.get(provider).and_then(|g| g.last_cooldown_end());
        gate.max(self.provider_holds.get(provider).copied())
    }

    /// Marks changes whose publishing failed for publishing again.
    pub fn requeue_shared(&mut self, changes: &[Shared]) {
        for c in changes {
            match c.topic {
                Topic::Breaker => self.shared_breakers.note(c.id.clone()),
                Topic::Health => self.shared_health.note(c.id.clone()),
                Topic::Lock => {
                    if let Ok(key) = serde_json::from_str(&c.id) {
                        self.shared_locks.note(key);
                    }
                }
                Topic::ProviderCooldown => self.shared_cooldowns.note(c.id.clone()),
            }
        }
    }

    /// Takes in another replica's news of a model lock (see [`Lockouts::merge_peer`]):
    /// `id` is the lock's key as JSON. This replica's own change, not published yet,
    /// wins. Whether it changed this board; a change is not shared again.
    pub fn merge_peer_lock(
        &mut self,
        id: &str,
        state: Option<&str>,
    ) -> Result<bool, serde_json::Error> {
        let key: LockKey = serde_json::from_str(id)?;
        let lock: Option<Lock> = state.map(serde_json::from_str).transpose()?;
        if self.shared_locks.contains(&key) {
            return Ok(false);
        }
        Ok(self.lockouts.merge_peer(key, lock))
    }

    /// Takes in another replica's news of `provider`'s cooldown: the time it ends holds
    /// here too (never shortened), and `None` (an operator reset it there) resets it
    /// here, unless this replica's own change waits to be published. Whether it changed
    /// this board.
    pub fn merge_peer_cooldown(
        &mut self,
        provider: &str,
        state: Option<&str>,
    ) -> Result<bool, serde_json::Error> {
        let until: Option<UnixMillis> = state.map(serde_json::from_str).transpose()?;
        if self.shared_cooldowns.contains(provider) {
            return Ok(false);
        }
        Ok(match until {
            None => {
                let gate = self.gates.remove(provider).is_some();
                self.provider_holds.remove(provider).is_some() || gate
            }
            Some(until) => {
                let held = self.provider_holds.entry(provider.to_owned()).or_default();
                let later = until > *held;
                *held = (*held).max(until);
                later
            }
        })
    }

    /// Takes in another replica's news of a connection's health (an account's state is
    /// the same whichever replica met it): it replaces this replica's, and `None` (a new
    /// credential there) resets it. News arrive in the order the shared channel carried
    /// them. Whether it changed this board; a change is persisted but not shared again.
    pub fn merge_peer_health(
        &mut self,
        connection: &str,
        state: Option<&str>,
    ) -> Result<bool, serde_json::Error> {
        if self.shared_health.contains(connection) {
            // This replica's own change, not published yet, is newer news.
            return Ok(false);
        }
        let taken = match state {
            None => self.health.remove(connection).is_some(),
            Some(json) => {
                let peer: Health = serde_json::from_str(json)?;
                let mine = self.health.entry(connection.to_owned()).or_default();
                let changed = *mine != peer;
                *mine = peer;
                changed
            }
        };
        if taken {
            self.dirty_health.insert(connection.to_owned());
        }
        Ok(taken)
    }

    /// Takes in another replica's change of `provider`'s breaker (see
    /// [`Breaker::merge_peer`]; `None`: an operator reset it there, so it is reset here
    /// too). Whether it changed this board; a change is persisted but not shared again.
    pub fn merge_peer_breaker(
        &mut self,
        provider: &str,
        state: Option<&str>,
        profile: &breaker::Profile,
        peer_wins_ties: bool,
    ) -> Result<bool, serde_json::Error> {
        let taken = match state {
            None => self.breakers.remove(provider).is_some(),
            Some(json) => {
                let peer: Breaker = serde_json::from_str(json)?;
                self.breakers
                    .entry(provider.to_owned())
                    .or_default()
                    .merge_peer(peer, profile, peer_wins_ties)
            }
        };
        if taken {
            self.dirty_breakers.insert(provider.to_owned());
        }
        Ok(taken)
    }

    /// Changed entries since the last call: `(breakers, health)`.
    pub fn take_dirty(&mut self) -> (Changes, Changes) {
        (
            rows(std::mem::take(&mut self.dirty_breakers), &self.breakers),
            rows(std::mem::take(&mut self.dirty_health), &self.health),
        )
    }
}

/// Marks an entry changed, to persist and to share.
fn mark(dirty: &mut HashSet<String>, shared: &mut Outbox<String>, id: &str) {
    dirty.insert(id.to_owned());
    shared.note(id.to_owned());
}

/// The entries of `ids` as stored: `(id, JSON, or None when gone from `state`)`.
fn rows<T: serde::Serialize>(ids: HashSet<String>, state: &HashMap<String, T>) -> Changes {
    ids.into_iter()
        .map(|id| {
            let json = state.get(&id).and_then(|s| serde_json::to_string(s).ok());
            (id, json)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resilience::rules::Rules;
    use crate::resilience::verdict::{self, Answer, Subject};
    use crate::settings::{resolve, Layers};

    const T0: u64 = 1_800_000_000_000;

    fn place<'a>(connection: &'a str, family: &'a str) -> At<'a> {
        At {
            provider: family,
            connection,
            model: "m",
            auth_class: AuthClass::Apikey,
            disable_cooling: false,
            family,
        }
    }

    fn settings() -> ResilienceSettings {
        resolve(&Layers::default()).unwrap().settings.resilience
    }

    /// The verdict of `status` answered by `family` with `headers`.
    fn judged(family: &str, status: u16, headers: &[(&str, &str)]) -> Verdict {
        let subject = Subject { family, model: "m" };
        let answer = Answer::Status {
            status,
            headers,
            body: "",
        };
        verdict::judge(&Rules::default(), subject, answer, T0)
    }

    #[test]
    fn a_rule_s_provider_cooldown_holds_whatever_the_time_window_gate_setting() {
        let s = settings();
        assert!(!s.provider_cooldown_enabled);
        let mut b = Board::default();
        let mm = place("mm-1", "minimax");
        // minimax's built-in 529 rule names a provider scope, which only an operator
        // rule (or the allow-list) makes it act on: here it is informational.
        let v = judged("minimax", 529, &[]);
        assert_eq!(v.provider_cooldown_ms, None);
        let v = Verdict {
            provider_cooldown_ms: Some(30_000),
            ..v
        };
        b.record(&mm, Outcome::Failed(&v), false, &s, T0);
        let other = place("mm-2", "minimax");
        assert_eq!(
            b.admit(&other, &s, false, 0, T0 + 1),
            Err(Reason::ProviderCooling {
                retry_after_ms: 29_999
            })
        );
        // A shorter one later does not shorten it.
        let shorter = Verdict {
            provider_cooldown_ms: Some(1_000),
            ..v.clone()
        };
        assert_eq!(
            b.record(&mm, Outcome::Failed(&shorter), false, &s, T0 + 2)
                .iter()
                .filter(|e| matches!(e, Event::ProviderCooled { .. }))
                .count(),
            0
        );
        assert_eq!(b.admit(&other, &s, false, 0, T0 + 30_000), Ok(Cleared::Go));
    }

    #[test]
    fn an_operator_s_opt_out_reaches_the_egress_bucket_without_a_new_attempt() {
        let s = settings();
        let mut b = Board::default();
        for c in ["oc-1", "oc-2"] {
            b.note_egress(&place(c, "opencode"), "10.0.0.1", T0);
        }
        // oc-2 is opted out of cooling by a configuration change, before it is used.
        b.prune(|_| true, |c| Some(("opencode".into(), c == "oc-2")));
        let v = judged("opencode", 429, &[("retry-after", "60")]);
        assert!(v.egress);
        let events = b.record(
            &place("oc-1", "opencode"),
            Outcome::Failed(&v),
            false,
            &s,
            T0,
        );
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, Event::EgressCooled { .. })),
            "{events:?}"
        );
        assert_eq!(
            b.admit(&place("oc-2", "opencode"), &s, false, 0, T0),
            Ok(Cleared::Go)
        );
        // A connection gone from the configuration leaves its bucket.
        b.prune(
            |_| true,
            |c| (c == "oc-1").then(|| ("opencode".into(), false)),
        );
        assert_eq!(
            b.egress_buckets(T0),
            vec![Bucket {
                family: "opencode".into(),
                address: "10.0.0.1".into(),
                connections: vec![("oc-1".into(), T0)],
            }]
        );
    }

    #[test]
    fn a_monthly_quota_cools_the_whole_bucket_for_an_hour_unless_the_upstream_says() {
        let s = settings();
        let mut b = Board::default();
        for c in ["oc-1", "oc-2"] {
            b.note_egress(&place(c, "opencode"), "10.0.0.1", T0);
        }
        let subject = Subject {
            family: "opencode",
            model: "m",
        };
        let answer = Answer::Status {
            status: 429,
            headers: &[],
            body: r#"{"error":{"message":"Monthly usage limit reached"}}"#,
        };
        let v = verdict::judge(&Rules::default(), subject, answer, T0);
        assert_eq!(
            (v.cause, v.rule.as_deref(), v.cooldown_ms, v.egress, &v.lock),
            (Cause::QuotaExhausted, None, Some(3_600_000), true, &None)
        );
        b.record(
            &place("oc-1", "opencode"),
            Outcome::Failed(&v),
            false,
            &s,
            T0,
        );
        let until = T0 + 3_600_000;
        for c in ["oc-1", "oc-2"] {
            assert_eq!(b.health_of(c).rate_limited_until, Some(until), "{c}");
        }
        // An announced reset wins over the hour.
        let mut b = Board::default();
        let announced = Verdict {
            retry_at: Some(T0 + 60_000),
            ..v
        };
        b.record(
            &place("oc-1", "opencode"),
            Outcome::Failed(&announced),
            false,
            &s,
            T0,
        );
        assert_eq!(b.health_of("oc-1").rate_limited_until, Some(T0 + 60_000));
    }

    #[test]
    fn peers_news_of_accounts_replaces_and_resets_and_is_not_shared_again() {
        let mut b = Board::default();
        b.share();
        let mut cooling = Health::default();
        cooling.rate_limited_until = Some(T0 + 60_000);
        cooling.backoff_level = 2;
        let json = serde_json::to_string(&cooling).unwrap();
        assert!(b.merge_peer_health("c1", Some(&json)).unwrap());
        assert!(!b.merge_peer_health("c1", Some(&json)).unwrap());
        assert_eq!(b.health_of("c1"), cooling);
        // Persisted, not shared again.
        assert_eq!(b.take_shared(), vec![]);
        assert_eq!(b.take_dirty().1, vec![("c1".to_owned(), Some(json))]);
        // A new credential there resets it here.
        assert!(b.merge_peer_health("c1", None).unwrap());
        assert_eq!(b.health_of("c1"), Health::default());
        assert!(!b.merge_peer_health("c1", None).unwrap());
        assert!(b.merge_peer_health("c1", Some("not json")).is_err());
        // This replica's own change is shared, once.
        b.clear_cooldowns(&["c2".to_owned()]);
        let json = serde_json::to_string(&Health::default()).unwrap();
        let mut short = Health::default();
        short.rate_limited_until = Some(T0);
        b.merge_peer_health("c2", Some(&serde_json::to_string(&short).unwrap()))
            .unwrap();
        assert_eq!(b.clear_cooldowns(&["c2".to_owned()]), (1, 0, 0));
        let shared = b.take_shared();
        assert_eq!(
            shared,
            vec![Shared {
                topic: Topic::Health,
                id: "c2".to_owned(),
                state: Some(json)
            }]
        );
        assert_eq!(b.take_shared(), vec![]);
        // Not published (Redis was down): kept for the next time, and while it waits,
        // older news of the same account does not overwrite it.
        b.requeue_shared(&shared);
        let stale = serde_json::to_string(&short).unwrap();
        assert!(!b.merge_peer_health("c2", Some(&stale)).unwrap());
        assert_eq!(b.take_shared(), shared);
    }

    /// Takes `news` into `b` as the gateway's board sharing does.
    fn take_in(b: &mut Board, news: &Shared, s: &ResilienceSettings) -> bool {
        let state = news.state.as_deref();
        match news.topic {
            Topic::Breaker => {
                let profile = s.breaker.get(AuthClass::Apikey);
                b.merge_peer_breaker(&news.id, state, &profile, true)
            }
            Topic::Health => b.merge_peer_health(&news.id, state),
            Topic::Lock => b.merge_peer_lock(&news.id, state),
            Topic::ProviderCooldown => b.merge_peer_cooldown(&news.id, state),
        }
        .unwrap()
    }

    #[test]
    fn model_locks_and_provider_cooldowns_reach_the_other_replicas_and_so_do_their_ends() {
        let mut s = settings();
        s.lockout.enabled = true;
        let (mut a, mut b) = (Board::default(), Board::default());
        let c1 = place("c1", "openai");
        let lock = judged("openai", 404, &[]);
        let held = Verdict {
            provider_cooldown_ms: Some(30_000),
            ..judged("openai", 500, &[])
        };
        // Not shared: nothing is kept for others.
        a.record(&c1, Outcome::Failed(&lock), false, &s, T0);
        assert_eq!(a.take_shared(), vec![]);
        a.share();
        b.share();
        a.record(&c1, Outcome::Success, false, &s, T0);
        a.record(&c1, Outcome::Failed(&lock), false, &s, T0);
        a.record(
            &place("c2", "openai"),
            Outcome::Failed(&held),
            false,
            &s,
            T0,
        );
        let news = a.take_shared();
        let topics: HashSet<Topic> = news.iter().map(|n| n.topic).collect();
        assert_eq!(topics, HashSet::from(Topic::ALL));
        for n in &news {
            take_in(&mut b, n, &s);
        }
        let locks = a.model_locks(T0);
        assert_eq!(locks.len(), 1);
        assert_eq!(b.model_locks(T0), locks);
        let c3 = place("c3", "openai");
        let cooling = |b: &mut Board, now| {
            b.breakers(&s.breaker, |_| AuthClass::Apikey, now)
                .iter()
                .map(|x| (x.provider.clone(), x.cooling_ms))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            cooling(&mut b, T0 + 1),
            [("openai".to_owned(), Some(29_999))]
        );
        assert_eq!(
            b.admit(&c3, &s, false, 0, T0 + 1),
            Err(Reason::ProviderCooling {
                retry_after_ms: 29_999
            })
        );
        assert_eq!(
            b.admit(&c1, &s, false, 0, T0 + 1),
            Err(Reason::ModelLocked {
                retry_after_ms: locks[0].1.until - T0 - 1,
                status: 404
            })
        );
        // Taken in, persisted where it is persisted, not shared again; the same news
        // twice changes nothing.
        assert_eq!(b.take_shared(), vec![]);
        assert!(news.iter().all(|n| !take_in(&mut b, n, &s)));
        // A peer's earlier, shorter cooldown does not shorten it.
        assert!(!b
            .merge_peer_cooldown("openai", Some(&(T0 + 1_000).to_string()))
            .unwrap());
        // A success runs the lock down there and an operator resets the provider there:
        // both ends arrive here.
        a.record(&c1, Outcome::Success, false, &s, T0 + 2);
        a.reset_breakers(Some("openai"));
        let ends = a.take_shared();
        assert!(ends.iter().all(|n| n.state.is_none()), "{ends:?}");
        for n in &ends {
            assert!(take_in(&mut b, n, &s), "{n:?}");
        }
        assert_eq!(b.model_locks(T0), vec![]);
        assert_eq!(b.admit(&c1, &s, false, 0, T0 + 3), Ok(Cleared::Go));
        assert_eq!(b.admit(&c3, &s, false, 0, T0 + 3), Ok(Cleared::Go));
        assert_eq!(cooling(&mut b, T0 + 3), []);
        // This replica's own change waits to be published: older news does not undo it.
        b.record(
            &place("c2", "openai"),
            Outcome::Failed(&held),
            false,
            &s,
            T0 + 4,
        );
        assert!(!b.merge_peer_cooldown("openai", None).unwrap());
        assert!(b.admit(&c3, &s, false, 0, T0 + 5).is_err());
        assert!(b.merge_peer_lock("not a key", None).is_err());
    }
}
