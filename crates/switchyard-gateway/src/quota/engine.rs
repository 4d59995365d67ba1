//! The quota engine's shell: counters, provider signals, recent decisions, and the
//! reserve/settle calls the pipeline makes (SPEC Q4, Q6).
//!
//! Counters live in one of two places:
//!
//! - **sqlite** (default): in memory, one [`PoolLedger`] per pool behind its own mutex,
//!   held only for the microseconds of a decision and never across an `.await`. A
//!   background writer persists changed slots to SQLite every second and on shutdown,
//!   and the engine reloads them at start, so a restart keeps the counts.
//! - **redis**: in Redis, for several gateways sharing pools; each reservation is one
//!   atomic script. Settlements go through a bounded queue to a worker, off the request
//!   path. The local ledgers then only keep burn rates.
//!
//! When Redis fails during a request, the request is admitted without a reservation and
//! a warning is logged (fail-open, SPEC Q6).

use super::guard::QuotaGuard;
use super::index::{KeyShare, PoolRuntime, QuotaIndex};
use super::signals::{PoolSignals, SignalBoard};
use super::views::{
    decision_record, remaining_headers, DecisionRecord, DimensionUsage, KeyUsage, PoolUsage,
    QuotaBlock,
};
use crate::clock::Clock;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use switchyard_core::quota::burn::BurnRate;
use switchyard_core::quota::cost::{Estimate, Price};
use switchyard_core::quota::decide::{
    decide, fair_share, BlockReason, Decision, DimensionInput, Mode, Policy,
};
use switchyard_core::quota::ledger::{Ask, PoolLedger, Reservation};
use switchyard_core::quota::window::SlidingCounter;
use switchyard_core::settings::QuotaSettings;
use switchyard_core::UnixMillis;
use switchyard_store::redis_counters::{DimArgs, RedisCounters, SettleArgs};
use switchyard_store::ConsumptionRow;
use tokio::sync::mpsc;

/// Recent decisions kept per pool for the decisions endpoint.
const DECISIONS_PER_POOL: usize = 256;

/// Settlements queued for the Redis worker. At 10 000 requests/s this is a second of
/// settlements; when it is full a settlement is dropped (its reservation stays booked at
/// the estimate, which errs on the safe side) and logged.
const SETTLE_QUEUE: usize = 10_000;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The outcome of a reservation attempt.
#[derive(Debug)]
pub enum Admission {
    Admitted {
        guard: QuotaGuard,
        /// `x-ratelimit-*` style headers with the key's remaining share.
        headers: Vec<(String, String)>,
    },
    Blocked(QuotaBlock),
    /// The counter store failed; the request goes ahead unmetered (fail-open).
    Unenforced,
}

/// Where counters live.
enum Counters {
    Local,
    Redis(Box<RedisSide>),
}

/// The Redis store and the queue of its settlement worker.
struct RedisSide {
    counters: RedisCounters,
    settle: mpsc::Sender<SettleJob>,
}

/// One settlement for the Redis worker.
#[derive(Debug)]
struct SettleJob {
    pool: String,
    key: String,
    items: Vec<SettleArgs>,
}

/// Applies queued Redis settlements until every sender is gone.
async fn settle_worker(counters: RedisCounters, mut rx: mpsc::Receiver<SettleJob>) {
    let mut failures: u64 = 0;
    while let Some(job) = rx.recv().await {
        if let Err(e) = counters.settle(&job.pool, &job.key, &job.items).await {
            failures += 1;
            if failures.is_power_of_two() {
                tracing::warn!(error = %e, failures, pool = %job.pool, "Could not settle a quota reservation in Redis.");
            }
        }
    }
}

#[derive(Debug)]
struct PoolSlot {
    layout: String,
    /// The newest configuration version that used this layout.
    generation: i64,
    ledger: Arc<Mutex<PoolLedger>>,
}

/// See the module docs.
pub struct QuotaEngine {
    clock: Arc<dyn Clock>,
    counters: Counters,
    pools: Mutex<HashMap<String, PoolSlot>>,
    pub(super) signals: SignalBoard,
    decisions: Mutex<HashMap<String, VecDeque<DecisionRecord>>>,
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
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self::with_counters(clock, Counters::Local)
    }

    /// An engine keeping counters in Redis; spawns the settlement worker.
    pub fn with_redis(clock: Arc<dyn Clock>, counters: RedisCounters) -> Self {
        let (tx, rx) = mpsc::channel(SETTLE_QUEUE);
        tokio::spawn(settle_worker(counters.clone(), rx));
        Self::with_counters(
            clock,
            Counters::Redis(Box::new(RedisSide {
                counters,
                settle: tx,
            })),
        )
    }

    fn with_counters(clock: Arc<dyn Clock>, counters: Counters) -> Self {
        Self {
            clock,
            counters,
            pools: Mutex::new(HashMap::new()),
            signals: SignalBoard::default(),
            decisions: Mutex::new(HashMap::new()),
        }
    }

    pub fn now(&self) -> UnixMillis {
        self.clock.now_ms()
    }

    /// `sqlite` or `redis`: where counters live.
    pub fn driver(&self) -> &'static str {
        match self.counters {
            Counters::Local => "sqlite",
            Counters::Redis(_) => "redis",
        }
    }

    /// Records the saturation headers of a response from `connection_id`.
    pub fn record_signals(
        &self,
        connection_id: &str,
        headers: &axum::http::HeaderMap,
        now: UnixMillis,
    ) {
        self.signals.record(connection_id, headers, now);
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

    /// The ledger of `pool`, created (or re-laid-out after a dimension change, keeping
    /// the counters of dimensions that stayed) as needed. `None` for a request that
    /// still holds the configuration from before a dimension change: the ledger only
    /// ever moves forward.
    fn ledger(&self, pool: &PoolRuntime, now: UnixMillis) -> Option<Arc<Mutex<PoolLedger>>> {
        let mut pools = lock(&self.pools);
        if let Some(slot) = pools.get_mut(&pool.pool.id) {
            if slot.layout == pool.layout {
                slot.generation = slot.generation.max(pool.generation);
                return Some(Arc::clone(&slot.ledger));
            }
            if slot.generation > pool.generation {
                return None;
            }
        }
        let mut fresh = PoolLedger::new(pool.dims.clone());
        if let Some(old) = pools.get(&pool.pool.id) {
            let old = lock(&old.ledger);
            for (key, dim, slot, amount) in old.slots(now) {
                let old_key = old.dimensions()[dim].key();
                if let Some(j) = pool.dims.iter().position(|d| d.key() == old_key) {
                    fresh.carry_slot(now, &key, j, slot, amount);
                }
            }
        }
        let ledger = Arc::new(Mutex::new(fresh));
        pools.insert(
            pool.pool.id.clone(),
            PoolSlot {
                layout: pool.layout.clone(),
                generation: pool.generation,
                ledger: Arc::clone(&ledger),
            },
        );
        Some(ledger)
    }

    /// The ledger `pool` was reserved in, if it is still the live one (a settlement
    /// never creates or re-lays-out a ledger: after a dimension change or the pool's
    /// deletion, an in-flight reservation simply stays booked at its estimate).
    fn live_ledger(&self, pool: &PoolRuntime) -> Option<Arc<Mutex<PoolLedger>>> {
        lock(&self.pools)
            .get(&pool.pool.id)
            .filter(|s| s.layout == pool.layout)
            .map(|s| Arc::clone(&s.ledger))
    }

    /// Marks rows whose write failed for writing again.
    pub fn requeue(&self, rows: &[ConsumptionRow]) {
        let pools = lock(&self.pools);
        for r in rows {
            if let Some(slot) = pools.get(&r.pool_id) {
                let mut l = lock(&slot.ledger);
                if let Some(dim) = l.dimensions().iter().position(|d| d.key() == r.dimension) {
                    l.mark_dirty(&r.api_key_id, dim, r.slot);
                }
            }
        }
    }

    /// Forgets a deleted pool's counters (Redis keys included), so a pool created later
    /// under the same id starts from zero.
    pub async fn forget_pool(&self, pool_id: &str) {
        lock(&self.pools).remove(pool_id);
        if let Counters::Redis(r) = &self.counters {
            if let Err(e) = r.counters.clear_pool(pool_id).await {
                tracing::warn!(error = %e, pool = pool_id, "Could not delete a deleted pool's counters from Redis.");
            }
        }
    }

    /// Drops the counters of pools that no longer exist and of keys no longer known,
    /// after a configuration change.
    pub fn prune(&self, index: &QuotaIndex, key_exists: impl Fn(&str) -> bool) {
        let mut pools = lock(&self.pools);
        pools.retain(|id, _| index.pool(id).is_some());
        for slot in pools.values() {
            lock(&slot.ledger).retain_keys(&key_exists);
        }
        lock(&self.decisions).retain(|id, _| index.pool(id).is_some());
    }

    /// Restores persisted slots (SQLite driver).
    pub fn load(&self, rows: Vec<ConsumptionRow>, index: &QuotaIndex, now: UnixMillis) {
        for r in rows {
            let Some(pool) = index.pool(&r.pool_id) else {
                continue;
            };
            let Some(dim) = pool.dims.iter().position(|d| d.key() == r.dimension) else {
                continue;
            };
            if let Some(ledger) = self.ledger(pool, now) {
                lock(&ledger).load_slot(now, &r.api_key_id, dim, r.slot, r.amount);
            }
        }
    }

    /// Changed slots since the last call, as rows to write (SQLite driver; with Redis
    /// the ledgers hold no counts and this is empty).
    pub fn take_dirty(&self, index: &QuotaIndex) -> Vec<ConsumptionRow> {
        let pools: Vec<(String, Arc<Mutex<PoolLedger>>)> = lock(&self.pools)
            .iter()
            .map(|(id, s)| (id.clone(), Arc::clone(&s.ledger)))
            .collect();
        let mut rows = Vec::new();
        for (id, ledger) in pools {
            if index.pool(&id).is_none() {
                continue;
            }
            let mut ledger = lock(&ledger);
            let dims = ledger.dimensions().to_vec();
            for (key, dim, slot, amount) in ledger.take_dirty() {
                let d = dims[dim];
                let slot_ms = d.window.slot_ms();
                rows.push(ConsumptionRow {
                    pool_id: id.clone(),
                    dimension: d.key(),
                    api_key_id: key,
                    slot,
                    slot_end_ms: (slot + 1) * slot_ms,
                    window_ms: d.window.length_ms(),
                    amount,
                });
            }
        }
        rows
    }

    fn record_decision(&self, pool_id: &str, rec: DecisionRecord) {
        let mut all = lock(&self.decisions);
        let q = all.entry(pool_id.to_owned()).or_default();
        if q.len() == DECISIONS_PER_POOL {
            q.pop_front();
        }
        q.push_back(rec);
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

    /// Per dimension: the key's and the pool's window values, and the time they hold at
    /// (the Redis server's clock when counters live there). `None` when Redis failed.
    async fn peek(
        &self,
        pool: &PoolRuntime,
        key_id: &str,
    ) -> Option<(UnixMillis, Vec<(f64, f64)>)> {
        match &self.counters {
            Counters::Local => {
                let now = self.now();
                let ledger = self.ledger(pool, now)?;
                let values = lock(&ledger).peek(now, key_id);
                Some((now, values))
            }
            Counters::Redis(r) => {
                let counters = &r.counters;
                let dims: Vec<(String, u64)> = pool
                    .dims
                    .iter()
                    .map(|d| (d.key(), d.window.slot_ms()))
                    .collect();
                match counters.peek(&pool.pool.id, key_id, &dims).await {
                    Ok(v) => Some(v),
                    Err(e) => {
                        tracing::warn!(error = %e, pool = %pool.pool.id, "Could not read quota counters from Redis.");
                        None
                    }
                }
            }
        }
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
        let Some((now, peeked)) = self.peek(pool, key_id).await else {
            return false;
        };
        let share = pool.share_of(key_id);
        let sig = self.signals.for_pool(pool, now);
        let costs = costs(pool, estimate, price);
        let decision = decide(
            &inputs(pool, share, &peeked, &costs, &sig),
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
        let share = pool.share_of(key_id);
        let costs = costs(pool, &estimate, price);
        let threshold = settings.saturation_threshold;
        let outcome = match &self.counters {
            Counters::Local => match self.reserve_local(pool, key_id, share, &costs, threshold) {
                Some(o) => o,
                None => return Admission::Unenforced,
            },
            Counters::Redis(r) => {
                match self
                    .reserve_redis(&r.counters, pool, key_id, share, &costs, threshold)
                    .await
                {
                    Some(o) => o,
                    None => return Admission::Unenforced,
                }
            }
        };
        let Outcome {
            now,
            decision,
            reservation,
            peeked,
            by_counter,
            signals: sig,
        } = outcome;
        let retry = decision.blocked_by.and_then(|i| {
            // A provider that says its allowance is used up knows when it resets.
            let limit = pool.dims[i].limit;
            match sig[i] {
                (Some(used), Some(reset))
                    if used * limit >= limit || used * limit + costs[i] > limit =>
                {
                    Some(reset.saturating_sub(now).max(by_counter.unwrap_or(0)))
                }
                _ => by_counter,
            }
        });
        self.record_decision(
            &pool.pool.id,
            decision_record(now, key_id, share.share.policy, &decision, pool, retry),
        );
        if let Some(reservation) = reservation {
            let headers = remaining_headers(pool, &decision, &peeked, &costs);
            let base = self.signals.percent_readings(pool, connection_id, now);
            return Admission::Admitted {
                guard: QuotaGuard::new(
                    Arc::clone(self),
                    Arc::clone(pool),
                    connection_id.to_owned(),
                    reservation,
                    (estimate, price),
                    base,
                ),
                headers,
            };
        }
        let i = decision.blocked_by.unwrap_or(0);
        let v = decision.dimensions[i];
        let (consumed, total) = peeked.get(i).copied().unwrap_or((0.0, 0.0));
        let (consumed, line) = match v.blocked {
            Some(BlockReason::Cap) => (consumed, share.caps[i].unwrap_or(0.0)),
            Some(BlockReason::FairShare) => (consumed, v.fair_share),
            _ => (
                total.max(v.used_fraction * pool.dims[i].limit),
                pool.dims[i].limit,
            ),
        };
        Admission::Blocked(QuotaBlock {
            pool_id: pool.pool.id.clone(),
            pool_name: pool.pool.name.clone(),
            key_id: key_id.to_owned(),
            dimension: pool.dims[i],
            verdict: v,
            policy: share.share.policy,
            consumed,
            line,
            retry_after_ms: retry,
        })
    }

    fn reserve_local(
        &self,
        pool: &PoolRuntime,
        key_id: &str,
        share: &KeyShare,
        costs: &[f64],
        threshold: f64,
    ) -> Option<Outcome> {
        let now = self.now();
        let sig = self.signals.for_pool(pool, now);
        let signal_values: Vec<Option<f64>> = sig.iter().map(|s| s.0).collect();
        let ledger = self.ledger(pool, now)?;
        let mut l = lock(&ledger);
        let peeked = l.peek(now, key_id);
        let (decision, reservation) = l.reserve(
            now,
            Ask {
                key_id,
                share: share.share,
                caps: &share.caps,
                costs,
                signals: &signal_values,
                saturation_threshold: threshold,
            },
        );
        let by_counter = decision.blocked_by.and_then(|i| {
            let v = decision.dimensions[i];
            let counter = match v.blocked {
                Some(BlockReason::GlobalLimit) => None,
                _ => Some(key_id),
            };
            v.fits_at
                .and_then(|bound| l.time_until(now, counter, i, bound))
        });
        Some(Outcome {
            now,
            decision,
            reservation,
            peeked,
            by_counter,
            signals: sig,
        })
    }

    async fn reserve_redis(
        &self,
        counters: &RedisCounters,
        pool: &PoolRuntime,
        key_id: &str,
        share: &KeyShare,
        costs: &[f64],
        threshold: f64,
    ) -> Option<Outcome> {
        let sig = self.signals.for_pool(pool, self.now());
        let args: Vec<DimArgs> = pool
            .dims
            .iter()
            .enumerate()
            .map(|(i, d)| DimArgs {
                dim: d.key(),
                slot_ms: d.window.slot_ms(),
                limit: d.limit,
                cost: costs[i],
                cap: share.caps[i],
                fair_share: if d.limit > 0.0 {
                    fair_share(d.limit, share.share.weight)
                } else {
                    0.0
                },
                policy: match share.share.policy {
                    Policy::Hard => 0,
                    Policy::Soft => 1,
                    Policy::Burst => 2,
                },
                signal: sig[i].0,
            })
            .collect();
        let reply = match counters
            .reserve(&pool.pool.id, key_id, threshold, &args)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, pool = %pool.pool.id, key_id, "Quota store failed; admitting the request unmetered.");
                return None;
            }
        };
        let peeked: Vec<(f64, f64)> = reply.dims.iter().map(|d| (d.0, d.1)).collect();
        let decision = decide(
            &inputs(pool, share, &peeked, costs, &sig),
            share.share,
            threshold,
        );
        if decision.admitted() != reply.admitted {
            tracing::error!(pool = %pool.pool.id, key_id, script = reply.admitted, core = decision.admitted(), "Redis quota script and core decision disagree; following the script.");
        }
        let reservation = reply.admitted.then(|| Reservation {
            key_id: key_id.to_owned(),
            slots: reply.dims.iter().map(|d| d.2).collect(),
            booked: costs.to_vec(),
        });
        let by_counter = match decision.blocked_by {
            Some(i) if !reply.admitted => {
                redis_time_until(counters, pool, key_id, &decision, i).await
            }
            _ => None,
        };
        Some(Outcome {
            now: reply.now,
            decision,
            reservation,
            peeked,
            by_counter,
            signals: sig,
        })
    }

    /// Moves a reservation to `actual`; `last` marks the final settlement (which feeds
    /// the burn rate).
    pub(super) fn settle(
        &self,
        pool: &PoolRuntime,
        reservation: &mut Reservation,
        actual: &[f64],
        last: bool,
    ) {
        let now = self.now();
        let ledger = self.live_ledger(pool);
        match &self.counters {
            Counters::Local => {
                if let Some(l) = &ledger {
                    lock(l).settle(now, reservation, actual);
                }
            }
            Counters::Redis(r) => {
                let mut items = Vec::new();
                let mut targets = Vec::new();
                for (i, booked) in reservation.booked.iter().enumerate() {
                    let target = actual.get(i).copied().unwrap_or(0.0).max(0.0);
                    targets.push(target);
                    let delta = target - *booked;
                    if let (true, Some(d), Some(slot)) =
                        (delta != 0.0, pool.dims.get(i), reservation.slots.get(i))
                    {
                        items.push(SettleArgs {
                            dim: d.key(),
                            slot: *slot,
                            slot_ms: d.window.slot_ms(),
                            delta,
                        });
                    }
                }
                if !items.is_empty() {
                    let job = SettleJob {
                        pool: pool.pool.id.clone(),
                        key: reservation.key_id.clone(),
                        items,
                    };
                    // The booking moves only when the settlement is on its way, so later
                    // deltas are computed from what Redis will actually hold.
                    if r.settle.try_send(job).is_ok() {
                        reservation.booked = targets;
                    } else {
                        tracing::warn!(pool = %pool.pool.id, "Quota settlement queue is full; keeping the reservation at its estimate.");
                    }
                }
            }
        }
        if let (true, Some(l)) = (last, &ledger) {
            lock(l).observe_burn(now, &reservation.key_id, actual);
        }
    }

    /// Per dimension of `pool`, for the usage endpoint: the pool's consumption, each
    /// key's (allocated keys, and any other key that consumed), and burn rates.
    pub async fn usage(
        &self,
        pool: &PoolRuntime,
        keys: &[String],
        settings: &QuotaSettings,
    ) -> PoolUsage {
        let mut key_ids: Vec<String> = keys.to_vec();
        let ledger = self.ledger(pool, self.now());
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
            if let Some((at, values)) = self.peek(pool, k).await {
                now = at;
                per_key.push((k.clone(), values));
            }
        }
        // Peeking a key that cannot exist reads the pool totals alone.
        let totals = self
            .peek(pool, "")
            .await
            .map_or_else(|| vec![(0.0, 0.0); pool.dims.len()], |(_, v)| v);
        let sig = self.signals.for_pool(pool, now);
        let burn = |k: &str, i: usize, remaining: f64| {
            ledger
                .as_ref()
                .map_or(BurnRate::default().report(now, remaining), |l| {
                    lock(l).burn(now, k, i, remaining)
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
        PoolUsage {
            pool_id: pool.pool.id.clone(),
            at: now,
            dimensions,
        }
    }
}

/// What a reservation attempt found, from either counter store.
struct Outcome {
    now: UnixMillis,
    decision: Decision,
    reservation: Option<Reservation>,
    /// Per dimension: the key's and the pool's values before booking.
    peeked: Vec<(f64, f64)>,
    /// When the blocking counter falls far enough for the request to fit.
    by_counter: Option<u64>,
    signals: PoolSignals,
}

/// The estimated cost in every dimension of `pool`.
fn costs(pool: &PoolRuntime, estimate: &Estimate, price: Option<Price>) -> Vec<f64> {
    pool.dims
        .iter()
        .map(|d| estimate.cost(d.unit, price))
        .collect()
}

/// The decision inputs of every dimension from peeked counters.
fn inputs(
    pool: &PoolRuntime,
    share: &KeyShare,
    peeked: &[(f64, f64)],
    costs: &[f64],
    sig: &PoolSignals,
) -> Vec<DimensionInput> {
    pool.dims
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let (consumed, total) = peeked.get(i).copied().unwrap_or((0.0, 0.0));
            DimensionInput {
                limit: d.limit,
                consumed,
                total,
                signal: sig.get(i).and_then(|s| s.0),
                cost: costs.get(i).copied().unwrap_or(0.0),
                cap: share.caps.get(i).copied().flatten(),
            }
        })
        .collect()
}

/// When the blocking counter of dimension `i`, read from Redis, falls to the value the
/// request needs.
async fn redis_time_until(
    counters: &RedisCounters,
    pool: &PoolRuntime,
    key_id: &str,
    decision: &Decision,
    i: usize,
) -> Option<u64> {
    let v = decision.dimensions[i];
    let bound = v.fits_at?;
    let field = match v.blocked {
        Some(BlockReason::GlobalLimit) => "*",
        _ => key_id,
    };
    let d = pool.dims[i];
    match counters
        .slots(&pool.pool.id, field, &d.key(), d.window.slot_ms())
        .await
    {
        Ok((now, slots)) => {
            let mut c = SlidingCounter::new(d.window);
            for (slot, amount) in slots {
                c.add_to_slot(now, slot, amount);
            }
            c.time_until_at_most(now, bound)
        }
        Err(e) => {
            tracing::warn!(error = %e, "Could not read quota slots from Redis for Retry-After.");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use switchyard_core::apikey::KeyHash;
    use switchyard_core::catalog::{ApiKey, Catalog, ConnectionDef, Provider};
    use switchyard_core::domain::{AuthClass, UpstreamFormat};
    use switchyard_core::quota::pool::PoolInput;
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
            }],
            vec![ConnectionDef {
                id: "c".into(),
                provider: "p".into(),
                auth_class: AuthClass::Apikey,
                format: None,
                base_url: None,
                enabled: true,
                max_concurrent: None,
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
        let engine = Arc::new(QuotaEngine::new(Arc::clone(&clock)));
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
        assert_eq!(engine.peek(pool, "k0").await.unwrap().1, expect);
        // Written behind and read back by a fresh engine, the counts are the same.
        let store = Store::open_in_memory().unwrap();
        store.save_consumption(&engine.take_dirty(&index)).unwrap();
        assert!(engine.take_dirty(&index).is_empty());
        let reloaded = QuotaEngine::new(Arc::clone(&clock));
        reloaded.load(store.load_consumption(T0).unwrap(), &index, T0);
        assert_eq!(reloaded.peek(pool, "k0").await.unwrap().1, expect);
    }

    #[tokio::test]
    async fn a_dimension_change_moves_counters_forward_only() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
        let engine = Arc::new(QuotaEngine::new(clock));
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
            engine.peek(new_pool, "k1").await.unwrap().1,
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
            engine.peek(new_pool, "k1").await.unwrap().1,
            vec![(2.0, 2.0), (7.0, 7.0)]
        );
        // A request still holding the old configuration is let through unmetered.
        assert!(matches!(
            engine
                .reserve(old_pool, "c", "k1", estimate, &settings)
                .await,
            Admission::Unenforced
        ));
        assert_eq!(engine.peek(new_pool, "k1").await.unwrap().1[0], (2.0, 2.0));
    }

    #[test]
    fn a_rise_in_reported_use_is_charged_once_across_overlapping_requests() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
        let engine = QuotaEngine::new(clock);
        let index = index_with(
            serde_json::json!([{"unit": "percent", "window": "5h", "limit": 100}]),
            1,
        );
        let pool = index.pool("pool").unwrap();
        let mut headers = axum::http::HeaderMap::new();
        headers.insert("x-codex-primary-used-percent", "10".parse().unwrap());
        engine.record_signals("c", &headers, T0);
        let base = engine.signals.percent_readings(pool, "c", T0);
        assert_eq!(base, vec![Some(10.0)]);
        // Two requests started at 10 %; the provider now says 16 %.
        headers.insert("x-codex-primary-used-percent", "16".parse().unwrap());
        engine.record_signals("c", &headers, T0 + 1);
        let first = engine.signals.claim_rise(pool, "c", &base, T0 + 2);
        let second = engine.signals.claim_rise(pool, "c", &base, T0 + 2);
        assert_eq!((first, second), (vec![Some(6.0)], vec![Some(0.0)]));
    }

    #[tokio::test]
    async fn a_dropped_guard_releases_its_reservation() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
        let engine = Arc::new(QuotaEngine::new(clock));
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
            engine.peek(pool, "k1").await.unwrap().1,
            vec![(1.0, 1.0), (20.0, 20.0)]
        );
        drop(admission);
        assert_eq!(
            engine.peek(pool, "k1").await.unwrap().1,
            vec![(0.0, 0.0), (0.0, 0.0)]
        );
    }
}
