//! Resilience in the shell (SPEC R1–R5, R13, R14): the decisions are the core's board
//! ([`switchyard_core::resilience::board`]); here its state is kept behind a
//! [`BoardStore`] (in memory; a shared store is one more implementation), the events it
//! returns become logs and metrics, and changed entries are written behind to SQLite
//! and reloaded at start, so an open breaker or a banned account survives a restart.

use crate::sync::lock;
use crate::telemetry::metrics::{BreakerLabels, CooldownLabels, Metrics};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::sync::Mutex;
use switchyard_core::catalog::{Catalog, Connection};
use switchyard_core::resilience::board::{
    self, At, Board, Bucket, Cleared, Egress, Event, Outcome,
};
use switchyard_core::resilience::breaker;
use switchyard_core::resilience::cooldown::Health;
use switchyard_core::resilience::lockout::{Lock, LockKey};
use switchyard_core::resilience::verdict::Verdict;
use switchyard_core::routing::Reason;
use switchyard_core::settings::ResilienceSettings;
use switchyard_core::UnixMillis;
use switchyard_store::resilience::StateRows;

pub use board::{BreakerStatus, Changes, Shared, Topic};

/// Where the board's state lives. Each call runs `f` on the whole state as one step
/// (never across an `.await`).
pub trait BoardStore: Send + Sync {
    fn with<R>(&self, f: impl FnOnce(&mut Board) -> R) -> R;
}

/// The board in this process's memory.
#[derive(Debug, Default)]
pub struct MemoryBoard(Mutex<Board>);

impl BoardStore for MemoryBoard {
    fn with<R>(&self, f: impl FnOnce(&mut Board) -> R) -> R {
        f(&mut lock(&self.0))
    }
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct Resilience<S: BoardStore = MemoryBoard> {
    metrics: Option<Signals>,
    store: S,
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

/// Where an attempt on `conn` for `model` stands on the board.
fn at<'a>(conn: &'a Connection, model: &'a str) -> At<'a> {
    At {
        provider: &conn.provider,
        connection: &conn.id,
        model,
        auth_class: conn.auth_class,
        disable_cooling: conn.disable_cooling,
        family: &conn.family,
    }
}

/// An admitted attempt. When it is the half-open breaker's probe it holds the probe
/// slot, which is given back when it drops, unless its outcome was recorded
/// ([`Resilience::record`] takes it).
pub struct Admitted<'a> {
    probe: Option<(&'a dyn ProbeSlot, &'a str)>,
}

impl std::fmt::Debug for Admitted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted")
            .field("probe", &self.probe.map(|(_, p)| p))
            .finish()
    }
}

/// Gives a probe slot back (what an unrecorded [`Admitted`] does as it drops).
trait ProbeSlot: Sync {
    fn release_probe(&self, provider: &str);
}

impl<S: BoardStore> ProbeSlot for Resilience<S> {
    fn release_probe(&self, provider: &str) {
        self.store.with(|b| b.release_probe(provider));
    }
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
        if let Some((slot, provider)) = self.probe.take() {
            slot.release_probe(provider);
        }
    }
}

/// The metric families state changes are counted in.
#[derive(Debug, Clone)]
struct Signals {
    transitions: Family<BreakerLabels, Counter>,
    cooldowns: Family<CooldownLabels, Counter>,
}

impl Resilience {
    /// State that counts its changes in `metrics`.
    pub fn new(metrics: &Metrics) -> Self {
        Self {
            metrics: Some(Signals {
                transitions: metrics.breaker_transitions.clone(),
                cooldowns: metrics.cooldowns.clone(),
            }),
            store: MemoryBoard::default(),
        }
    }
}

impl<S: BoardStore> Resilience<S> {
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

    /// Logs and counts what the board did.
    fn emit(&self, events: Vec<Event>, now: UnixMillis) {
        for event in events {
            match event {
                Event::BreakerMoved {
                    provider,
                    state,
                    failures,
                    cause,
                } => {
                    tracing::warn!(%provider, scope = "provider", state = state.as_str(), failures, reason = cause.as_str(), "Circuit breaker changed state.");
                    self.count_transition(&provider, state);
                }
                Event::BreakerClosed { provider } => {
                    tracing::info!(%provider, "Circuit closed.");
                    self.count_transition(&provider, breaker::State::Closed);
                }
                Event::ProviderCooled {
                    provider,
                    until,
                    rule,
                } => {
                    tracing::warn!(%provider, scope = "provider", cooldown_ms = until.saturating_sub(now), rule = rule.as_deref().unwrap_or(""), "Provider cooldown tripped.");
                }
                Event::ConnectionCooled {
                    connection,
                    until,
                    level,
                    reason,
                    cause,
                } => {
                    self.count_cooldown(&connection, reason);
                    tracing::info!(connection_id = %connection, scope = "connection", reason = cause.as_str(), cooldown_ms = until.saturating_sub(now), backoff_level = level, "Connection cooling down.");
                }
                Event::ConnectionTerminal { connection, state } => {
                    self.count_cooldown(&connection, state.as_str());
                    tracing::warn!(connection_id = %connection, scope = "connection", state = state.as_str(), "Connection is out of service until its credential changes or an operator resets it.");
                }
                Event::ModelLocked { key, lock, rule } => {
                    self.count_cooldown(&key.connection, "model_locked");
                    tracing::info!(provider = %key.provider, connection_id = %key.connection, scope = ?key.scope, status = lock.status, lock_ms = lock.until.saturating_sub(now), rule = rule.as_deref().unwrap_or(""), "Model locked on the connection.");
                }
                Event::EgressCooled {
                    connection,
                    from,
                    address,
                    until,
                } => {
                    self.count_cooldown(&connection, "egress_bucket");
                    tracing::info!(connection_id = %connection, from = %from, egress = %address, cooldown_ms = until.saturating_sub(now), "Connection cooling down with its egress bucket.");
                }
                Event::Warming { key } => {
                    tracing::info!(target_key = %key, "Recovered; ramping traffic back up (slow start).");
                }
            }
        }
    }

    /// Whether an attempt may go ahead at `now`; a half-open breaker lets one probe
    /// through.
    pub fn check<'a>(
        &'a self,
        a: Attempt<'a>,
        settings: &ResilienceSettings,
        now: UnixMillis,
    ) -> Result<Admitted<'a>, Reason> {
        let place = at(a.conn, a.model);
        let cleared = self
            .store
            .with(|b| b.admit(&place, settings, a.may_defer, a.budget_ms, now))?;
        if cleared == Cleared::Probe {
            tracing::info!(provider = %a.conn.provider, connection_id = %a.conn.id, "Circuit half-open: sending a probe request.");
            return Ok(Admitted {
                probe: Some((self, &a.conn.provider)),
            });
        }
        Ok(Admitted { probe: None })
    }

    /// Records the outcome of an attempt.
    pub fn record(
        &self,
        a: Attempt<'_>,
        outcome: Outcome<'_>,
        settings: &ResilienceSettings,
        admitted: Admitted<'_>,
        now: UnixMillis,
    ) {
        let probe = admitted.settle();
        let place = at(a.conn, a.model);
        let events = self
            .store
            .with(|b| b.record(&place, outcome, probe, settings, now));
        self.emit(events, now);
    }

    /// Records how a stream on `conn` (for `model`) ended after it committed to the
    /// client, when no probe is held any more: whole (`None`), or with its verdict.
    pub fn record_committed(
        &self,
        conn: &Connection,
        model: &str,
        verdict: Option<&Verdict>,
        settings: &ResilienceSettings,
        now: UnixMillis,
    ) {
        let attempt = Attempt {
            conn,
            model,
            may_defer: false,
            budget_ms: 0,
        };
        let outcome = verdict.map_or(Outcome::Success, Outcome::Failed);
        self.record(attempt, outcome, settings, Admitted { probe: None }, now);
    }

    /// Notes the egress address an attempt on `conn` went out from (SPEC R14).
    pub fn note_egress(&self, conn: &Connection, address: &str, now: UnixMillis) {
        let place = at(conn, "");
        self.store.with(|b| b.note_egress(&place, address, now));
    }

    /// A connection's health (for the operator views).
    pub fn health_of(&self, connection_id: &str) -> Health {
        self.store.with(|b| b.health_of(connection_id))
    }

    /// Resets breakers (all, or one provider's); returns how many were reset.
    pub fn reset_breakers(&self, provider: Option<&str>) -> usize {
        self.store.with(|b| b.reset_breakers(provider))
    }

    /// Every provider with a breaker at `now`, read with each provider's profile (of its
    /// auth class, `class_of`, in `profiles`), sorted by provider.
    pub fn breakers(
        &self,
        profiles: &breaker::Profiles,
        class_of: impl Fn(&str) -> switchyard_core::domain::AuthClass,
        now: UnixMillis,
    ) -> Vec<BreakerStatus> {
        self.store.with(|b| b.breakers(profiles, class_of, now))
    }

    /// Clears the cooldowns of the connections `ids`: `(cleared, unchanged,
    /// skipped_terminal)`. Terminal accounts are listed but never cleared here.
    pub fn clear_cooldowns(&self, ids: &[String]) -> (usize, usize, usize) {
        self.store.with(|b| b.clear_cooldowns(ids))
    }

    /// Active model locks at `now`: `(key, lock)`.
    pub fn model_locks(&self, now: UnixMillis) -> Vec<(LockKey, Lock)> {
        self.store.with(|b| b.model_locks(now))
    }

    /// Removes model locks matching `matches`; returns how many.
    pub fn clear_locks(&self, matches: impl FnMut(&LockKey) -> bool) -> usize {
        self.store.with(|b| b.clear_locks(matches))
    }

    /// The egress buckets seen in the last 24 h (SPEC R14).
    pub fn egress_buckets(&self, now: UnixMillis) -> Vec<Bucket> {
        self.store.with(|b| b.egress_buckets(now))
    }

    /// A refresh of the connection's OAuth token failed (SPEC R4): it cools until the
    /// retry, or is `expired`.
    pub fn refresh_failed(
        &self,
        connection_id: &str,
        failed: switchyard_core::oauth::Failed,
        message: &str,
        now: UnixMillis,
    ) {
        self.store
            .with(|b| b.refresh_failed(connection_id, failed, message, now));
    }

    /// The connection's OAuth tokens were renewed (refreshed or imported, by any
    /// process): what a refused token caused ends — `expired`, an auth cooldown — while
    /// a rate limit or another terminal state stays.
    pub fn tokens_renewed(&self, connection_id: &str) {
        use switchyard_core::resilience::cooldown::{ErrorType, Terminal};
        let health = self.health_of(connection_id);
        if health.terminal == Some(Terminal::Expired)
            || (health.terminal.is_none() && health.last_error_type == Some(ErrorType::AuthFailed))
        {
            self.reset_connection(connection_id);
        }
    }

    /// A new credential for a connection: its health starts over (terminal included).
    pub fn reset_connection(&self, connection_id: &str) {
        self.store.with(|b| b.reset_connection(connection_id));
    }

    /// Drops state of providers and connections `catalog` no longer has, and brings the
    /// egress entries of the others up to date.
    pub fn prune(&self, catalog: &Catalog) {
        self.store.with(|b| {
            b.prune(
                |p| catalog.provider(p).is_some(),
                |c| {
                    catalog
                        .connection(c)
                        .map(|c| (c.family.clone(), c.disable_cooling))
                },
            );
        });
    }

    /// Marks entries whose write failed for writing again.
    pub fn requeue(&self, breakers: &Changes, health: &Changes) {
        self.store.with(|b| b.requeue(breakers, health));
    }

    /// Restores persisted state.
    pub fn load(&self, breakers: StateRows, health: StateRows) {
        for (id, error) in self.store.with(|b| b.load(breakers, health)) {
            tracing::warn!(id = %id, error = %error, "Ignoring an unreadable stored breaker or connection health.");
        }
    }

    /// Restores the connections' last known egress (`(connection, address, seen)`
    /// rows of the request log) for those `catalog` still has.
    pub fn load_egress(&self, catalog: &Catalog, rows: Vec<(String, String, u64)>) {
        let known = rows.into_iter().filter_map(|(id, address, seen)| {
            let c = catalog.connection(&id)?;
            let egress = Egress {
                family: c.family.clone(),
                address,
                seen,
                disable_cooling: c.disable_cooling,
            };
            Some((id, egress))
        });
        let known: Vec<_> = known.collect();
        self.store.with(|b| b.load_egress(known));
    }

    /// Shares this replica's board with the others: from now on its changes are kept
    /// for [`Resilience::take_shared`].
    pub fn share(&self) {
        self.store.with(Board::share);
    }

    /// What this replica changed since the last call, for the other replicas.
    pub fn take_shared(&self) -> Vec<Shared> {
        self.store.with(Board::take_shared)
    }

    /// Marks changes whose publishing failed for publishing again.
    pub fn requeue_shared(&self, changes: &[Shared]) {
        self.store.with(|b| b.requeue_shared(changes));
    }

    /// Takes in another replica's news of a model lock; whether it changed this
    /// replica's board.
    pub fn merge_peer_lock(
        &self,
        id: &str,
        state: Option<&str>,
    ) -> Result<bool, serde_json::Error> {
        self.store.with(|b| b.merge_peer_lock(id, state))
    }

    /// Takes in another replica's news of a provider's cooldown; whether it changed
    /// this replica's board.
    pub fn merge_peer_cooldown(
        &self,
        provider: &str,
        state: Option<&str>,
    ) -> Result<bool, serde_json::Error> {
        self.store.with(|b| b.merge_peer_cooldown(provider, state))
    }

    /// Takes in another replica's news of a connection's health; whether it changed
    /// this replica's board.
    pub fn merge_peer_health(
        &self,
        connection: &str,
        state: Option<&str>,
    ) -> Result<bool, serde_json::Error> {
        self.store.with(|b| b.merge_peer_health(connection, state))
    }

    /// Takes in another replica's news of `provider`'s breaker (SPEC O6, B6); whether it
    /// changed this replica's board.
    pub fn merge_peer_breaker(
        &self,
        provider: &str,
        state: Option<&str>,
        profile: &breaker::Profile,
        peer_wins_ties: bool,
    ) -> Result<bool, serde_json::Error> {
        self.store
            .with(|b| b.merge_peer_breaker(provider, state, profile, peer_wins_ties))
    }

    /// Changed entries since the last call: `(breakers, health)`, each `(id, JSON or
    /// None when the entry is gone)`.
    pub fn take_dirty(&self) -> (Changes, Changes) {
        self.store.with(Board::take_dirty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_core::domain::{AuthClass, UpstreamFormat};
    use switchyard_core::outcome::{AttemptFailure, StreamCut};
    use switchyard_core::resilience::rules::Rules;
    use switchyard_core::resilience::verdict::{self, Answer, Subject};
    use switchyard_core::resilience::{breaker, cooldown};
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
            family: "p".into(),
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

    /// The verdict of `failure` on model `m` under `rules`.
    fn judged(rules: &Rules, failure: AttemptFailure) -> Verdict {
        let subject = Subject {
            family: "p",
            model: "m",
        };
        verdict::judge(rules, subject, Answer::Failed(failure), 0)
    }

    /// A connection that could not be made.
    fn connect_failed() -> Verdict {
        judged(&Rules::default(), AttemptFailure::Connect)
    }

    #[test]
    fn a_probe_slot_is_given_back_when_its_admission_drops_and_settled_when_recorded() {
        let (settings, r, conn) = (defaults(), Resilience::<MemoryBoard>::default(), local());
        let attempt = attempt_on(&conn);
        let failure = connect_failed();
        // A local server's breaker opens at its second failure and resets after 15 s.
        for now in [0, 1] {
            let admitted = r.check(attempt, &settings, now).unwrap();
            r.record(attempt, Outcome::Failed(&failure), &settings, admitted, now);
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
        r.record(attempt, Outcome::Success, &settings, probe, half_open);
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
        let r = Resilience::<MemoryBoard>::default();
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
            r.record(
                attempt,
                Outcome::Failed(&connect_failed()),
                &settings,
                admitted,
                now,
            );
            assert_eq!(cooling_for(now + 999), Some(1), "at {now}");
        }
        // A crawl cools it only with `streamStallCooldown`, and is not the provider's.
        let crawl = AttemptFailure::Stream(StreamCut::Throughput);
        let quiet = judged(&Rules::default(), crawl);
        r.record_committed(&cooling, "m", Some(&quiet), &settings, 2_000);
        assert_eq!(cooling_for(2_000), None);
        let stalling = switchyard_core::settings::ResilienceSettings {
            stream_stall_cooldown: true,
            ..settings.clone()
        };
        let stalled = judged(&Rules::new(Vec::new(), Vec::new(), true), crawl);
        r.record_committed(&cooling, "m", Some(&stalled), &stalling, 2_000);
        assert_eq!(cooling_for(2_999), Some(1));
        // The provider's third counted failure opens its breaker for 5 s.
        let admitted = r.check(attempt, &settings, 3_000).unwrap();
        r.record(
            attempt,
            Outcome::Failed(&connect_failed()),
            &settings,
            admitted,
            3_000,
        );
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
        let (settings, r, conn) = (defaults(), Resilience::<MemoryBoard>::default(), local());
        let attempt = attempt_on(&conn);
        let failure = connect_failed();
        let view = |now| r.breakers(&settings.breaker, |_| AuthClass::Local, now);
        let status = |state, failures, probe_in_ms| {
            vec![BreakerStatus {
                provider: "p".into(),
                state,
                failures,
                probe_in_ms,
                cooling_ms: None,
            }]
        };
        let admitted = r.check(attempt, &settings, 0).unwrap();
        r.record(attempt, Outcome::Failed(&failure), &settings, admitted, 0);
        assert_eq!(view(1), status(breaker::State::Degraded, 1, None));
        // The second failure opens it at 1 ms for 15 s.
        let admitted = r.check(attempt, &settings, 1).unwrap();
        r.record(attempt, Outcome::Failed(&failure), &settings, admitted, 1);
        assert_eq!(view(1), status(breaker::State::Open, 2, Some(15_000)));
        assert_eq!(view(10_001), status(breaker::State::Open, 2, Some(5_000)));
        assert_eq!(view(15_001), status(breaker::State::HalfOpen, 2, Some(0)));
    }
}
