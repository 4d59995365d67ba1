//! The quota engine's shell: the counter store (see [`super::counters`]), provider
//! signals, recent decisions, and the reserve/settle calls the pipeline makes
//! (SPEC Q4, Q6). When the store cannot meter a request, the request is admitted
//! without a reservation (fail-open), counted in `switchyard_quota_unmetered_total`, and
//! warned about at most once per interval.
//!
//! The store can change once while running: a gateway that fell back to memory because
//! Redis was unreachable switches to Redis when it answers
//! ([`QuotaEngine::switch_to_redis`]).
//! Each reservation settles in the store it was booked in.
//!
//! Its locks (the ledgers', the decision log's) are held for one step and never across an
//! `.await`; it reads `now` from its own clock, and imports nothing from `state`,
//! `pipeline` or `error`.

use super::counters::{
    CounterStore, Ledgers, Outcome, RedisStore, ReserveRequest, Unmetered, UnmeteredReason,
    WarnThrottle,
};
use super::guard::QuotaGuard;
use super::index::{KeyShare, PoolRuntime, QuotaIndex};
use super::signals::SignalBoard;
use super::views::{
    decision_record, DecisionRecord, DimensionUsage, KeyUsage, PoolUsage, QuotaBlock, ShareFields,
    StoreStatus,
};
use crate::clock::Clock;
use crate::sync::lock;
use crate::telemetry::metrics::QuotaMetrics;
use arc_swap::ArcSwapOption;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_core::quota::burn::BurnRate;
use switchyard_core::quota::cost::{self, Estimate, Price};
use switchyard_core::quota::decide::{decide, fair_share, BlockReason, Mode};
use switchyard_core::quota::ledger::Reservation;
use switchyard_core::quota::pool::PerDimension;
use switchyard_core::quota::signals::Signal;
use switchyard_core::settings::QuotaSettings;
use switchyard_core::{FastMap, UnixMillis};
use switchyard_store::redis_counters::{RedisCounters, SlotDelta};
use switchyard_store::ConsumptionRow;

/// Recent decisions kept per pool for the decisions endpoint.
const DECISIONS_PER_POOL: usize = 256;

/// Unmetered requests are warned about at most once per this interval, with the number
/// not logged in between: an outage at thousands of requests per second must not become
/// thousands of log lines per second. The metric counts every one.
const UNMETERED_WARN_INTERVAL_MS: u64 = 10_000;

/// Why the counters live where they do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreReason {
    /// The configured driver is in use.
    Selected,
    /// Redis was selected without a URL.
    NoUrl,
    /// Redis was selected with a URL that does not parse.
    InvalidUrl,
    /// Redis was selected but did not answer (yet): retried in the background.
    Unreachable,
}

impl StoreReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Selected => "selected",
            Self::NoUrl => "no_url",
            Self::InvalidUrl => "invalid_url",
            Self::Unreachable => "unreachable",
        }
    }
}

/// Where a reservation was booked, so it settles there even if the engine switched
/// stores meanwhile: in memory, or in Redis under a reservation id.
#[derive(Debug, Clone)]
pub enum BookedIn {
    Memory,
    Redis(Arc<RedisStore>, String),
}

/// The outcome of a reservation attempt.
#[derive(Debug)]
pub enum Admission {
    Admitted {
        guard: QuotaGuard,
        /// The answer's `x-ratelimit-*` style fields with the key's remaining share.
        fields: ShareFields,
    },
    Blocked(QuotaBlock),
    /// The pool meters `usd` and the model has no price: the request is refused on
    /// this pool rather than metered at $0.
    Unpriced,
    /// The counter store could not meter the request; it goes ahead unmetered
    /// (fail-open).
    Unenforced(UnmeteredReason),
}

/// See the module docs.
pub struct QuotaEngine {
    clock: Arc<dyn Clock>,
    /// In-memory ledgers: the counters themselves with the `sqlite` driver, burn rates
    /// only with `redis`.
    ledgers: Ledgers,
    /// The Redis store, when counters live there.
    redis: ArcSwapOption<RedisStore>,
    /// Whether Redis was asked for (`quotaStore.driver`).
    redis_requested: bool,
    /// Why the counters are in memory although Redis was asked for.
    fallback: StoreReason,
    pub(super) signals: SignalBoard,
    decisions: Mutex<FastMap<String, VecDeque<DecisionRecord>>>,
    metrics: QuotaMetrics,
    unmetered_warn: WarnThrottle,
}

impl std::fmt::Debug for QuotaEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuotaEngine")
            .field("driver", &self.driver())
            .finish_non_exhaustive()
    }
}

impl QuotaEngine {
    /// An engine keeping counters in memory (persisted to SQLite by the writer).
    pub fn new(clock: Arc<dyn Clock>, metrics: QuotaMetrics) -> Self {
        metrics.store("sqlite", StoreReason::Selected.as_str());
        Self {
            clock,
            ledgers: Ledgers::default(),
            redis: ArcSwapOption::empty(),
            redis_requested: false,
            fallback: StoreReason::Selected,
            signals: SignalBoard::default(),
            decisions: Mutex::new(FastMap::default()),
            metrics,
            unmetered_warn: WarnThrottle::default(),
        }
    }

    /// An engine keeping counters in memory although Redis was asked for, because of
    /// `reason`.
    pub fn fallback(clock: Arc<dyn Clock>, metrics: QuotaMetrics, reason: StoreReason) -> Self {
        let engine = Self {
            redis_requested: true,
            fallback: reason,
            ..Self::new(clock, metrics)
        };
        engine.metrics.store("sqlite", reason.as_str());
        engine
    }

    /// An engine keeping counters in Redis; spawns the settlement worker.
    pub fn with_redis(
        clock: Arc<dyn Clock>,
        metrics: QuotaMetrics,
        counters: RedisCounters,
    ) -> Self {
        let engine = Self::fallback(clock, metrics, StoreReason::Selected);
        engine.redis.store(Some(Arc::new(RedisStore::new(
            counters,
            Arc::clone(&engine.clock),
        ))));
        engine
            .metrics
            .store("redis", StoreReason::Selected.as_str());
        engine
    }

    /// Reservations held by requests in flight now (see [`super::guard::QuotaGuard`]).
    pub fn reservations_open(&self) -> i64 {
        self.metrics.reservations_open()
    }

    pub(super) fn metrics(&self) -> &QuotaMetrics {
        &self.metrics
    }

    pub fn now(&self) -> UnixMillis {
        self.clock.now_ms()
    }

    /// `sqlite` or `redis`: where counters live.
    pub fn driver(&self) -> &'static str {
        if self.redis.load().is_some() {
            "redis"
        } else {
            "sqlite"
        }
    }

    /// Where counters live, what was asked for, and whether the store works.
    pub fn store_status(&self) -> StoreStatus {
        let requested = if self.redis_requested {
            "redis"
        } else {
            "sqlite"
        };
        match self.redis.load_full() {
            Some(r) => {
                let breaker = r.breaker_state();
                let ok = breaker == "closed";
                StoreStatus {
                    driver: "redis",
                    requested,
                    state: if ok { "ok" } else { "unavailable" },
                    reason: if ok { "selected" } else { "breaker_open" },
                    breaker: Some(breaker),
                    last_probe: r.last_probe(),
                }
            }
            None if self.redis_requested => StoreStatus {
                driver: "sqlite",
                requested,
                state: "fallback",
                reason: self.fallback.as_str(),
                breaker: None,
                last_probe: None,
            },
            None => StoreStatus {
                driver: "sqlite",
                requested,
                state: "ok",
                reason: "selected",
                breaker: None,
                last_probe: None,
            },
        }
    }

    /// Moves the counters to Redis, which answered after the engine fell back to memory.
    /// Reservations already booked in memory settle there. The window counts kept in
    /// memory meanwhile are handed over: added to Redis's, so what this gateway admitted
    /// while on its own still counts against the shared windows, and zeroed in memory
    /// (and in SQLite by the writer), so a later fallback does not load them again.
    pub async fn switch_to_redis(&self, counters: RedisCounters) {
        let store = Arc::new(RedisStore::new(counters, Arc::clone(&self.clock)));
        self.redis.store(Some(Arc::clone(&store)));
        self.metrics.store("redis", StoreReason::Selected.as_str());
        let now = self.now();
        let mut carried = 0usize;
        for (pool_id, ledger) in self.ledgers.all() {
            let per_key = {
                let mut l = lock(&ledger);
                let dims = l.dimensions().to_vec();
                let mut per_key: HashMap<String, Vec<SlotDelta>> = HashMap::new();
                for (key, dim, slot, amount) in l.hand_over(now) {
                    if let Some(d) = dims.get(dim) {
                        per_key.entry(key).or_default().push(SlotDelta {
                            dim: d.key(),
                            slot,
                            slot_ms: d.window.slot_ms(),
                            delta: amount,
                        });
                    }
                }
                per_key
            };
            for (key, items) in per_key {
                match store.carry(&pool_id, &key, &items).await {
                    Ok(()) => carried = carried.saturating_add(items.len()),
                    Err(e) => {
                        tracing::warn!(pool = %pool_id, key_id = %key, reason = e.reason.as_str(), error = e.error.as_deref().unwrap_or(""), "Could not carry a key's in-memory quota counts into Redis.")
                    }
                }
            }
        }
        tracing::info!(
            slots = carried,
            "Redis answers: quota counters now live in Redis; counts kept in memory meanwhile were added to it."
        );
    }

    /// Applies the settlements queued for Redis, waiting at most `within`.
    pub async fn finish(&self, within: Duration) {
        if let Some(r) = self.redis.load_full() {
            r.drain(within).await;
        }
    }

    /// Counts a request the store could not meter and warns, at most once per interval.
    fn unmetered(&self, pool_id: &str, e: Unmetered) -> UnmeteredReason {
        self.metrics.unmetered(pool_id, e.reason.as_str());
        if e.reason == UnmeteredReason::ConfigChanged {
            tracing::debug!(pool = pool_id, "A request holding the configuration from before a dimension change goes ahead unmetered.");
        } else if let Some(suppressed) = self
            .unmetered_warn
            .due(self.now(), UNMETERED_WARN_INTERVAL_MS)
        {
            tracing::warn!(
                pool = pool_id,
                reason = e.reason.as_str(),
                error = e.error.as_deref().unwrap_or(""),
                suppressed,
                "Quota store could not meter a request; admitting it unmetered (further ones within 10 s are only counted, in switchyard_quota_unmetered_total)."
            );
        }
        e.reason
    }

    /// Records the saturation readings of a response from `connection_id`.
    pub fn record_signals(&self, connection_id: &str, readings: &[Signal], now: UnixMillis) {
        self.signals.record(connection_id, readings, now);
    }

    /// The provider's readings of `connection_id` by window (SPEC Q6), for routing.
    pub fn connection_windows(
        &self,
        connection_id: &str,
    ) -> switchyard_core::routing::view::QuotaWindows {
        self.signals.windows(connection_id, self.now())
    }

    /// Whether a provider says `connection_id` is at or over `threshold` used in any
    /// dimension of `pool` (saturation gating of the quota-share strategy).
    pub fn connection_saturated(
        &self,
        pool: &PoolRuntime,
        connection_id: &str,
        threshold: f64,
    ) -> bool {
        self.signals
            .connection_used(pool, connection_id, self.now())
            .is_some_and(|u| u >= threshold)
    }

    /// Forgets a deleted pool's counters (Redis keys included), so a pool created later
    /// under the same id starts from zero.
    pub async fn forget_pool(&self, pool_id: &str) {
        self.ledgers.remove(pool_id);
        if let Some(r) = self.redis.load_full() {
            r.forget_pool(pool_id).await;
        }
    }

    /// Drops the counters of pools that no longer exist and of keys no longer known,
    /// after a configuration change.
    pub fn prune(&self, index: &QuotaIndex, key_exists: impl Fn(&str) -> bool) {
        self.ledgers.prune(index, key_exists);
        lock(&self.decisions).retain(|id, _| index.pool(id).is_some());
    }

    /// Restores persisted slots (SQLite driver).
    pub fn load(&self, rows: Vec<ConsumptionRow>, index: &QuotaIndex, now: UnixMillis) {
        self.ledgers.load(rows, index, now);
    }

    /// Changed slots since the last call, as rows to write (SQLite driver; with Redis
    /// the ledgers hold no counts and this is empty).
    pub fn take_dirty(&self, index: &QuotaIndex) -> Vec<ConsumptionRow> {
        self.ledgers.take_dirty(index)
    }

    /// Marks rows whose write failed for writing again.
    pub fn requeue(&self, rows: &[ConsumptionRow]) {
        self.ledgers.requeue(rows);
    }

    /// Per dimension: the key's and the pool's window values from the counter store, and
    /// the time they hold at, or why the store could not answer.
    async fn peek(
        &self,
        pool: &PoolRuntime,
        key_id: &str,
    ) -> Result<(UnixMillis, PerDimension<(f64, f64)>), Unmetered> {
        let now = self.now();
        match self.redis.load_full() {
            Some(r) => r.peek(pool, key_id, now).await,
            None => self.ledgers.peek(pool, key_id, now).await,
        }
    }

    fn record_decision(&self, pool_id: &str, rec: DecisionRecord) {
        let mut all = lock(&self.decisions);
        // The pool's id is copied only for its first decision.
        let q = match all.get_mut(pool_id) {
            Some(q) => q,
            None => all.entry(pool_id.to_owned()).or_default(),
        };
        if q.len() == DECISIONS_PER_POOL {
            q.pop_front();
        }
        q.push_back(rec);
    }

    /// The newest `n` decisions of a pool and how many it keeps: only those `n` are
    /// copied under the lock admissions take, so a page showing a few holds it briefly.
    pub fn newest_decisions(&self, pool_id: &str, n: usize) -> (usize, Vec<DecisionRecord>) {
        lock(&self.decisions)
            .get(pool_id)
            .map_or((0, Vec::new()), |q| {
                (q.len(), q.iter().rev().take(n).cloned().collect())
            })
    }

    /// Recent decisions of a pool, newest first, optionally for one key.
    pub fn decisions(&self, pool_id: &str, key_id: Option<&str>) -> Vec<DecisionRecord> {
        lock(&self.decisions)
            .get(pool_id)
            .map(|q| {
                q.iter()
                    .rev()
                    .filter(|r| key_id.is_none_or(|k| r.api_key_id == k))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether `key_id` is over its soft share in `pool` right now (for ordering
    /// candidates before any reservation); a penalty is recorded among the pool's
    /// decisions. Unreadable counters read as no.
    pub async fn is_deprioritized(
        &self,
        pool: &PoolRuntime,
        key_id: &str,
        estimate: &Estimate,
        price: Option<Price>,
        settings: &QuotaSettings,
    ) -> bool {
        let Ok((now, peeked)) = self.peek(pool, key_id).await else {
            return false;
        };
        let share = pool.share_of(key_id);
        let sig = self.signals.for_pool(pool, now);
        let costs = costs(pool, estimate, price);
        let decision = decide(
            &super::counters::inputs(pool, share, &peeked, &costs, &sig, false),
            share.share,
            settings.saturation_threshold,
        );
        if decision.deprioritized {
            let record = decision_record(now, key_id, share.share.policy, &decision, pool, None);
            tracing::debug!(pool = %pool.pool.id, key_id, dimension = record.dimension.as_deref().unwrap_or(""), "Key is over its soft share; its candidate on this pool moves back.");
            self.record_decision(&pool.pool.id, record);
        }
        decision.deprioritized
    }

    /// Decides for `key_id` on `pool` and, when admitted, reserves the estimate.
    /// `price` is the model's USD price, for `usd` dimensions.
    pub async fn reserve(
        self: &Arc<Self>,
        pool: &Arc<PoolRuntime>,
        connection_id: &str,
        key_id: &str,
        (estimate, price): (Estimate, Option<Price>),
        settings: &QuotaSettings,
    ) -> Admission {
        if !cost::priced_enough(pool.dims.iter().map(|d| d.unit), price) {
            self.metrics.unpriced(&pool.pool.id);
            return Admission::Unpriced;
        }
        let costs = costs(pool, &estimate, price);
        let threshold = settings.saturation_threshold;
        let share = pool.share_of(key_id);
        let (outcome, retry, booked_in) = match self
            .book(pool, (key_id, share), &costs, threshold, false)
            .await
        {
            Ok(b) => b,
            Err(e) => return Admission::Unenforced(self.unmetered(&pool.pool.id, e)),
        };
        self.record_outcome(pool, (key_id, share), &outcome, retry);
        if let Some(reservation) = outcome.reservation {
            if let BookedIn::Redis(..) = booked_in {
                // The in-memory ledger lists the keys that consumed (and keeps their
                // burn rates) on both drivers, from the first admitted request on.
                if let Some(l) = self.ledgers.ledger(pool, self.now()) {
                    lock(&l).note_key(key_id);
                }
            }
            let fields =
                ShareFields::new(pool, share, (&outcome.decision, &outcome.peeked, &costs));
            let base = self
                .signals
                .percent_readings(pool, connection_id, outcome.now);
            return Admission::Admitted {
                guard: QuotaGuard::new(
                    Arc::clone(self),
                    Arc::clone(pool),
                    connection_id.to_owned(),
                    (booked_in, reservation),
                    (estimate, price, threshold),
                    base,
                ),
                fields,
            };
        }
        Admission::Blocked(blocked(pool, (key_id, share), &outcome, retry))
    }

    /// Books a running stream's next increment (`costs` per dimension) with the same
    /// decision as admission — cap, global ceiling, fair share when strict — judged on
    /// the dimensions the increment charges (SPEC Q6). A refusal is recorded among the
    /// pool's decisions.
    pub async fn grow(
        &self,
        pool: &PoolRuntime,
        key_id: &str,
        costs: &[f64],
        threshold: f64,
    ) -> Growth {
        let share = pool.share_of(key_id);
        let (outcome, retry, booked_in) = match self
            .book(pool, (key_id, share), costs, threshold, true)
            .await
        {
            Ok(b) => b,
            Err(e) => {
                self.unmetered(&pool.pool.id, e);
                return Growth::Unenforced;
            }
        };
        if let Some(reservation) = outcome.reservation {
            return Growth::Booked(booked_in, reservation);
        }
        self.record_outcome(pool, (key_id, share), &outcome, retry);
        Growth::Blocked(Box::new(blocked(pool, (key_id, share), &outcome, retry)))
    }

    fn record_outcome(
        &self,
        pool: &PoolRuntime,
        (key_id, share): (&str, &KeyShare),
        outcome: &Outcome,
        retry: Option<u64>,
    ) {
        let policy = share.share.policy;
        let record = decision_record(outcome.now, key_id, policy, &outcome.decision, pool, retry);
        self.record_decision(&pool.pool.id, record);
    }

    /// Decides and, when admitted, books `costs` in the counter store; with the time a
    /// refused request may retry, and where it was booked; or why the store could not
    /// meter it.
    async fn book(
        &self,
        pool: &PoolRuntime,
        (key_id, share): (&str, &KeyShare),
        costs: &[f64],
        threshold: f64,
        growth: bool,
    ) -> Result<(Outcome, Option<u64>, BookedIn), Unmetered> {
        let now = self.now();
        let sig = self.signals.for_pool(pool, now);
        let req = ReserveRequest {
            pool,
            key_id,
            share,
            costs,
            signals: &sig,
            threshold,
            now,
            growth,
        };
        let redis = self.redis.load_full();
        let mut outcome = match &redis {
            Some(r) => r.reserve(req).await,
            None => self.ledgers.reserve(req).await,
        }?;
        let booked_in = match (redis, outcome.booking_id.take()) {
            (Some(r), Some(id)) => BookedIn::Redis(r, id),
            _ => BookedIn::Memory,
        };
        let retry = outcome.decision.blocked_by.and_then(|i| {
            // A provider that says its allowance is used up knows when it resets.
            let limit = pool.dims[i].limit;
            match sig[i] {
                (Some(used), Some(reset))
                    if used * limit >= limit || used * limit + costs[i] > limit =>
                {
                    Some(
                        reset
                            .saturating_sub(outcome.now)
                            .max(outcome.by_counter.unwrap_or(0)),
                    )
                }
                _ => outcome.by_counter,
            }
        });
        Ok((outcome, retry, booked_in))
    }

    /// Moves each of a request's bookings, in the store it was booked in, to its target
    /// cost (a booking in memory only when its amount changes: a Redis booking always
    /// settles, which also ends its record), and feeds a finished request's actual cost
    /// into its key's burn rates (`burn`). The in-memory ledger is found once for both. A booking in memory
    /// settles only into the ledger it was booked in: after a dimension change or the
    /// pool's deletion it stays booked at its estimate. With Redis the in-memory ledger
    /// holds only the burn rates and the list of keys, so it is created for the burn if
    /// the usage view has not yet.
    pub(super) fn settle(
        &self,
        pool: &PoolRuntime,
        (bookings, targets): (&mut [(BookedIn, Reservation)], &[PerDimension<f64>]),
        burn: Option<&[f64]>,
        now: UnixMillis,
    ) {
        let live = self.ledgers.live_ledger(pool);
        let mut ledger = live.as_deref().map(lock);
        for ((booked_in, booking), target) in bookings.iter_mut().zip(targets) {
            match booked_in {
                BookedIn::Redis(r, id) => r.settle(pool, (id, booking), target),
                BookedIn::Memory if booking.booked != *target => {
                    if let Some(l) = ledger.as_mut() {
                        l.settle(now, booking, target);
                    }
                }
                BookedIn::Memory => {}
            }
        }
        let (Some(actual), Some((_, first))) = (burn, bookings.first()) else {
            return;
        };
        let key_id = first.key_id.as_str();
        match ledger.as_mut() {
            Some(l) => l.observe_burn(now, key_id, actual),
            None => {
                if let Some(l) = self.ledgers.ledger(pool, now) {
                    lock(&l).observe_burn(now, key_id, actual);
                }
            }
        }
    }

    /// Per dimension of `pool`, for the usage endpoint: the pool's consumption, each
    /// key's (allocated keys, and any other key that consumed), and burn rates — or why
    /// the store cannot say (an outage must not look like an idle pool).
    pub async fn usage(
        &self,
        pool: &PoolRuntime,
        keys: &[String],
        settings: &QuotaSettings,
    ) -> Result<PoolUsage, Unmetered> {
        let mut key_ids: Vec<String> = keys.to_vec();
        let ledger = self.ledgers.ledger(pool, self.now());
        if let Some(ledger) = &ledger {
            let l = lock(ledger);
            for k in l.key_ids() {
                if !key_ids.iter().any(|x| x == k) {
                    key_ids.push(k.to_owned());
                }
            }
        }
        let mut now = self.now();
        let mut per_key = Vec::with_capacity(key_ids.len());
        for k in &key_ids {
            let (at, values) = self.peek(pool, k).await?;
            now = at;
            per_key.push((k.clone(), values));
        }
        // Peeking a key that cannot exist reads the pool totals alone.
        let (_, totals) = self.peek(pool, "").await?;
        let sig = self.signals.for_pool(pool, now);
        // Burn rates were observed on the gateway's clock; the counters' time is the
        // store's (Redis's own), which may differ.
        let burn_now = self.now();
        let burn = |k: &str, i: usize, remaining: f64| {
            ledger
                .as_ref()
                .map_or(BurnRate::default().report(burn_now, remaining), |l| {
                    lock(l).burn(burn_now, k, i, remaining)
                })
        };
        let dimensions = pool
            .dims
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let total = totals[i].1;
                let used_fraction = if d.limit > 0.0 {
                    (total / d.limit).max(sig[i].0.unwrap_or(0.0))
                } else {
                    sig[i].0.unwrap_or(0.0)
                };
                let keys = per_key
                    .iter()
                    .map(|(k, p)| {
                        let share = pool.share_of(k);
                        let fair = if d.limit > 0.0 {
                            fair_share(d.limit, share.share.weight)
                        } else {
                            0.0
                        };
                        let consumed = p[i].0;
                        let surplus = if d.limit > 0.0 { fair - consumed } else { 0.0 };
                        KeyUsage {
                            api_key_id: k.clone(),
                            allocated: pool.shares.contains_key(k),
                            policy: share.share.policy,
                            allocation_weight: share.share.weight,
                            consumed,
                            fair_share: fair,
                            surplus,
                            borrowing: d.limit > 0.0 && consumed > fair,
                            cap: share.caps[i],
                            burn_rate: burn(k, i, surplus.max(0.0)),
                        }
                    })
                    .collect();
                DimensionUsage {
                    key: d.key(),
                    unit: d.unit,
                    window: d.window.as_str(),
                    limit: d.limit,
                    global_used: total,
                    used_fraction,
                    provider_signal: sig[i].0,
                    mode: if d.limit > 0.0 && used_fraction >= settings.saturation_threshold {
                        Mode::Strict
                    } else {
                        Mode::Lenient
                    },
                    keys,
                }
            })
            .collect();
        Ok(PoolUsage {
            pool_id: pool.pool.id.clone(),
            at: now,
            dimensions,
        })
    }
}

/// The refusal of a request (or of a stream's increment) that `outcome` did not admit.
fn blocked(
    pool: &PoolRuntime,
    (key_id, share): (&str, &KeyShare),
    outcome: &Outcome,
    retry: Option<u64>,
) -> QuotaBlock {
    let i = outcome.decision.blocked_by.unwrap_or(0);
    let v = outcome.decision.dimensions[i];
    let (consumed, total) = outcome.peeked.get(i).copied().unwrap_or((0.0, 0.0));
    let line = match v.blocked {
        Some(BlockReason::Cap) => share.caps[i].unwrap_or(0.0),
        Some(BlockReason::FairShare) => v.fair_share,
        _ => pool.dims[i].limit,
    };
    let consumed = match v.blocked {
        Some(BlockReason::Cap | BlockReason::FairShare) => consumed,
        _ => total.max(v.used_fraction * pool.dims[i].limit),
    };
    QuotaBlock {
        pool_id: pool.pool.id.clone(),
        pool_name: pool.pool.name.clone(),
        key_id: key_id.to_owned(),
        dimension: pool.dims[i],
        verdict: v,
        policy: share.share.policy,
        consumed,
        line,
        retry_after_ms: retry,
    }
}

/// The outcome of a stream's request for its next increment.
#[derive(Debug)]
pub enum Growth {
    /// Booked (where, and what); the guard adds it to the request's reservation.
    Booked(BookedIn, Reservation),
    /// The pool refused: the stream ends here.
    Blocked(Box<QuotaBlock>),
    /// The counter store could not meter the increment; the stream goes on unmetered
    /// (fail-open).
    Unenforced,
}

/// The estimated cost in every dimension of `pool`.
fn costs(pool: &PoolRuntime, estimate: &Estimate, price: Option<Price>) -> PerDimension<f64> {
    pool.dims
        .iter()
        .map(|d| estimate.cost(d.unit, price))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use switchyard_core::apikey::KeyHash;
    use switchyard_core::catalog::{ApiKey, Catalog, ConnectionDef, Provider};
    use switchyard_core::domain::{AuthClass, UpstreamFormat};
    use switchyard_core::quota::pool::PoolInput;
    use switchyard_core::quota::signals;
    use switchyard_core::settings::{resolve, Layers};
    use switchyard_core::usage::Usage;
    use switchyard_store::Store;

    const T0: u64 = 1_800_000_000_000;

    fn index() -> QuotaIndex {
        index_with(
            serde_json::json!([
                {"unit": "requests", "window": "daily", "limit": 1e9},
                {"unit": "tokens", "window": "hourly", "limit": 1e12}
            ]),
            1,
        )
    }

    fn index_with(dimensions: serde_json::Value, generation: i64) -> QuotaIndex {
        let keys = (0..5)
            .map(|i| {
                (
                    KeyHash::of(&format!("secret-{i}")),
                    ApiKey {
                        id: format!("k{i}"),
                        name: format!("k{i}"),
                        scopes: vec![],
                        allowed_connections: None,
                        allowed_models: None,
                        revoked: false,
                    },
                )
            })
            .collect();
        let catalog = Catalog::build(
            vec![Provider {
                id: "p".into(),
                format: UpstreamFormat::Openai,
                base_url: "http://127.0.0.1:1".into(),
                models: vec![],
                max_concurrent: None,
            }],
            vec![ConnectionDef {
                id: "c".into(),
                provider: "p".into(),
                auth_class: AuthClass::Apikey,
                format: None,
                base_url: None,
                enabled: true,
                max_concurrent: None,
                rate_limit_overrides: None,
                disable_cooling: false,
            }],
            vec![],
            keys,
        )
        .unwrap();
        let pool: PoolInput = serde_json::from_value(serde_json::json!({
            "id": "pool", "name": "Pool", "connectionIds": ["c"],
            "dimensions": dimensions,
            "allocations": [
                {"apiKeyId": "k0"}, {"apiKeyId": "k1"}, {"apiKeyId": "k2"},
                {"apiKeyId": "k3"}, {"apiKeyId": "k4"}
            ]
        }))
        .unwrap();
        QuotaIndex::build(&catalog, &[pool], &[], generation).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_reservations_and_settlements_lose_nothing_and_persist() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
        let engine = Arc::new(QuotaEngine::new(
            Arc::clone(&clock),
            QuotaMetrics::default(),
        ));
        let index = Arc::new(index());
        let settings = resolve(&Layers::default()).unwrap().settings.quota;
        let tasks: Vec<_> = (0..40)
            .map(|i| {
                let (engine, index, settings) =
                    (Arc::clone(&engine), Arc::clone(&index), settings.clone());
                tokio::spawn(async move {
                    let pool = index.pool("pool").unwrap();
                    let key = format!("k{}", i % 5);
                    for _ in 0..25 {
                        let estimate = Estimate {
                            prompt_tokens: 50,
                            completion_tokens: 100,
                        };
                        match engine
                            .reserve(pool, "c", &key, (estimate, None), &settings)
                            .await
                        {
                            Admission::Admitted { guard, .. } => guard.settle(Some(Usage {
                                prompt_tokens: 30,
                                completion_tokens: 7,
                            })),
                            other => panic!("not admitted: {other:?}"),
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let pool = index.pool("pool").unwrap();
        let expect = vec![(200.0, 1000.0), (200.0 * 37.0, 1000.0 * 37.0)];
        assert_eq!(engine.peek(pool, "k0").await.unwrap().1.to_vec(), expect);
        // Written behind and read back by a fresh engine, the counts are the same.
        let store = Store::open_in_memory().unwrap();
        store.save_consumption(&engine.take_dirty(&index)).unwrap();
        assert!(engine.take_dirty(&index).is_empty());
        let reloaded = QuotaEngine::new(Arc::clone(&clock), QuotaMetrics::default());
        reloaded.load(store.load_consumption(T0).unwrap(), &index, T0);
        assert_eq!(reloaded.peek(pool, "k0").await.unwrap().1.to_vec(), expect);
    }

    #[tokio::test]
    async fn a_dimension_change_moves_counters_forward_only() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
        let engine = Arc::new(QuotaEngine::new(clock, QuotaMetrics::default()));
        let settings = resolve(&Layers::default()).unwrap().settings.quota;
        let requests = serde_json::json!({"unit": "requests", "window": "daily", "limit": 100});
        let tokens = serde_json::json!({"unit": "tokens", "window": "daily", "limit": 1e6});
        let old = index_with(serde_json::json!([requests]), 1);
        let new = index_with(serde_json::json!([requests, tokens]), 2);
        let estimate = (
            Estimate {
                prompt_tokens: 10,
                completion_tokens: 10,
            },
            None,
        );
        let old_pool = old.pool("pool").unwrap();
        let new_pool = new.pool("pool").unwrap();
        let Admission::Admitted {
            guard: in_flight, ..
        } = engine
            .reserve(old_pool, "c", "k1", estimate, &settings)
            .await
        else {
            panic!("not admitted")
        };
        // The new layout keeps the requests counted under the old one.
        let Admission::Admitted { guard: fresh, .. } = engine
            .reserve(new_pool, "c", "k1", estimate, &settings)
            .await
        else {
            panic!("not admitted")
        };
        assert_eq!(
            engine.peek(new_pool, "k1").await.unwrap().1.to_vec(),
            vec![(2.0, 2.0), (20.0, 20.0)]
        );
        // The old reservation settles without dragging the ledger back; it stays
        // booked at its estimate.
        in_flight.settle(None);
        fresh.settle(Some(Usage {
            prompt_tokens: 3,
            completion_tokens: 4,
        }));
        assert_eq!(
            engine.peek(new_pool, "k1").await.unwrap().1.to_vec(),
            vec![(2.0, 2.0), (7.0, 7.0)]
        );
        // A request still holding the old configuration is let through unmetered.
        assert!(matches!(
            engine
                .reserve(old_pool, "c", "k1", estimate, &settings)
                .await,
            Admission::Unenforced(UnmeteredReason::ConfigChanged)
        ));
        assert_eq!(engine.peek(new_pool, "k1").await.unwrap().1[0], (2.0, 2.0));
    }

    #[tokio::test]
    async fn a_forgotten_pool_counts_from_zero_for_a_runtime_that_held_its_ledger() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
        let engine = Arc::new(QuotaEngine::new(clock, QuotaMetrics::default()));
        let settings = resolve(&Layers::default()).unwrap().settings.quota;
        let index = index_with(
            serde_json::json!([{"unit": "requests", "window": "daily", "limit": 100}]),
            1,
        );
        let pool = index.pool("pool").unwrap();
        let estimate = (
            Estimate {
                prompt_tokens: 1,
                completion_tokens: 1,
            },
            None,
        );
        let admit = || async {
            match engine.reserve(pool, "c", "k1", estimate, &settings).await {
                Admission::Admitted { guard, .. } => guard.settle(None),
                _ => panic!("not admitted"),
            }
        };
        admit().await;
        admit().await;
        assert!(pool.ledger_hold.get().is_some());
        assert_eq!(engine.peek(pool, "k1").await.unwrap().1[..], [(2.0, 2.0)]);
        engine.forget_pool("pool").await;
        assert_eq!(engine.peek(pool, "k1").await.unwrap().1[..], [(0.0, 0.0)]);
        admit().await;
        assert_eq!(engine.peek(pool, "k1").await.unwrap().1[..], [(1.0, 1.0)]);
    }

    #[test]
    fn a_pools_provider_readings_per_dimension_carry_their_reset_and_expire() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
        let engine = QuotaEngine::new(clock, QuotaMetrics::default());
        let index = index_with(
            serde_json::json!([
                {"unit": "requests", "window": "hourly", "limit": 100},
                {"unit": "tokens", "window": "daily", "limit": 1000}
            ]),
            1,
        );
        let pool = index.pool("pool").unwrap();
        let none = vec![(None, None), (None, None)];
        assert_eq!(engine.signals.for_pool(pool, T0).to_vec(), none);
        let fields = [
            ("x-ratelimit-limit-requests", "100"),
            ("x-ratelimit-remaining-requests", "25"),
            ("x-ratelimit-reset-requests", "20ms"),
        ];
        engine.record_signals("c", &signals::parse(&fields, T0), T0);
        assert_eq!(
            engine.signals.for_pool(pool, T0 + 1).to_vec(),
            vec![(Some(0.75), Some(T0 + 20)), (None, None)]
        );
        let ttl = super::super::signals::SIGNAL_TTL_MS;
        assert_eq!(engine.signals.for_pool(pool, T0 + ttl).to_vec(), none);
    }

    #[test]
    fn a_rise_in_reported_use_is_charged_once_across_overlapping_requests() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
        let engine = QuotaEngine::new(clock, QuotaMetrics::default());
        let index = index_with(
            serde_json::json!([{"unit": "percent", "window": "5h", "limit": 100}]),
            1,
        );
        let pool = index.pool("pool").unwrap();
        let codex = |percent| signals::parse(&[("x-codex-primary-used-percent", percent)], T0);
        engine.record_signals("c", &codex("10"), T0);
        let base = engine.signals.percent_readings(pool, "c", T0);
        assert_eq!(base, vec![Some(10.0)]);
        // Two requests started at 10 %; the provider now says 16 %.
        engine.record_signals("c", &codex("16"), T0 + 1);
        let first = engine.signals.claim_rise(pool, "c", &base, T0 + 2);
        let second = engine.signals.claim_rise(pool, "c", &base, T0 + 2);
        assert_eq!((first, second), (vec![Some(6.0)], vec![Some(0.0)]));
        // A pool that meters no percent dimension reads nothing of the board.
        let plain = index_with(
            serde_json::json!([{"unit": "requests", "window": "hourly", "limit": 100}]),
            1,
        );
        let plain = plain.pool("pool").unwrap();
        let none: Vec<Option<f64>> = Vec::new();
        assert_eq!(engine.signals.percent_readings(plain, "c", T0 + 3), none);
        assert_eq!(
            engine.signals.claim_rise(plain, "c", &[Some(1.0)], T0 + 3),
            none
        );
    }

    #[test]
    fn unmetered_warnings_come_once_per_interval_with_the_count_left_out() {
        let t = WarnThrottle::default();
        let at = |now| t.due(now, UNMETERED_WARN_INTERVAL_MS);
        assert_eq!(at(T0), Some(0));
        let quiet: Vec<_> = (0..280).map(|i| at(T0 + i * 30)).collect();
        assert!(quiet.iter().all(Option::is_none));
        assert_eq!(at(T0 + 9_999), None);
        assert_eq!(at(T0 + 10_000), Some(281));
        assert_eq!(at(T0 + 10_001), None);
        assert_eq!(at(T0 + 25_000), Some(1));
    }

    /// On one thread, the next reservation's script reaches Redis before the worker's
    /// settlement of the request before it: the remaining-share headers must count that
    /// request settled anyway, as on SQLite.
    #[tokio::test]
    async fn on_redis_headers_count_a_settlement_the_worker_has_not_applied_yet() {
        let url = std::env::var("SWITCHYARD_TEST_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
        let prefix = format!("sytest-{:016x}", rand::random::<u64>());
        let counters = RedisCounters::connect(&url, &prefix).await.unwrap();
        let clock: Arc<dyn Clock> = Arc::new(crate::clock::SystemClock);
        let engine = Arc::new(QuotaEngine::with_redis(
            clock,
            QuotaMetrics::default(),
            counters.clone(),
        ));
        let index = index();
        let pool = index.pool("pool").unwrap();
        let settings = resolve(&Layers::default()).unwrap().settings.quota;
        let estimate = Estimate {
            prompt_tokens: 10,
            completion_tokens: 1_000,
        };
        let remaining = |a: &Admission| match a {
            Admission::Admitted { fields, .. } => {
                let mut map = http::HeaderMap::new();
                crate::heads::insert_late(fields, &mut map);
                map.get("x-ratelimit-remaining-tokens-hourly")
                    .map(|v| v.to_str().unwrap().to_owned())
            }
            other => panic!("not admitted: {other:?}"),
        };
        let first = engine
            .reserve(pool, "c", "k1", (estimate, None), &settings)
            .await;
        // The share is a fifth of 1e12; the request counts at its estimate.
        assert_eq!(remaining(&first).as_deref(), Some("199999998990"));
        let Admission::Admitted { guard, .. } = first else {
            unreachable!()
        };
        guard.settle(Some(Usage {
            prompt_tokens: 5,
            completion_tokens: 5,
        }));
        let second = engine
            .reserve(pool, "c", "k1", (estimate, None), &settings)
            .await;
        assert_eq!(remaining(&second).as_deref(), Some("199999998980"));
        drop(second);
        counters.clear().await.unwrap();
    }

    #[tokio::test]
    async fn a_dropped_guard_releases_its_reservation() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
        let engine = Arc::new(QuotaEngine::new(clock, QuotaMetrics::default()));
        let index = index();
        let pool = index.pool("pool").unwrap();
        let settings = resolve(&Layers::default()).unwrap().settings.quota;
        let estimate = Estimate {
            prompt_tokens: 10,
            completion_tokens: 10,
        };
        let admission = engine
            .reserve(pool, "c", "k1", (estimate, None), &settings)
            .await;
        assert_eq!(
            engine.peek(pool, "k1").await.unwrap().1.to_vec(),
            vec![(1.0, 1.0), (20.0, 20.0)]
        );
        drop(admission);
        assert_eq!(
            engine.peek(pool, "k1").await.unwrap().1.to_vec(),
            vec![(0.0, 0.0), (0.0, 0.0)]
        );
    }
}
