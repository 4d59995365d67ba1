//! Quota counter stores (SPEC Q4): one trait, [`CounterStore`], with `peek`, `reserve`
//! (check and hold atomically, every dimension or none) and `settle`, and its two
//! implementations:
//!
//! - [`Ledgers`] (driver `sqlite`, the default): counters in memory, one
//!   [`PoolLedger`] per pool behind its own mutex, held only for the microseconds of a
//!   decision and never across an `.await`; the writer persists changed slots to SQLite
//!   every second and on shutdown, and they are reloaded at start.
//! - [`RedisStore`] (driver `redis`): counters in Redis for several gateways, each
//!   reservation one atomic script; settlements go through a bounded queue to a worker,
//!   off the request path.

use super::index::{KeyShare, PoolRuntime, QuotaIndex};
use super::signals::PoolSignals;
use crate::sync::lock;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use switchyard_core::quota::decide::{
    decide, fair_share, BlockReason, Decision, DimensionInput, Policy,
};
use switchyard_core::quota::ledger::{Ask, PoolLedger, Reservation};
use switchyard_core::quota::window::SlidingCounter;
use switchyard_core::UnixMillis;
use switchyard_store::redis_counters::{DimArgs, RedisCounters, SettleArgs};
use switchyard_store::ConsumptionRow;
use tokio::sync::mpsc;

/// Settlements queued for the Redis worker. At 10 000 requests/s this is a second of
/// settlements; when it is full a settlement is dropped (its reservation stays booked at
/// the estimate, which errs on the safe side) and logged.
const SETTLE_QUEUE: usize = 10_000;

/// One reservation attempt, as a store sees it.
#[derive(Debug, Clone, Copy)]
pub struct ReserveRequest<'a> {
    pub pool: &'a PoolRuntime,
    pub key_id: &'a str,
    pub share: &'a KeyShare,
    /// Per dimension: the estimated cost.
    pub costs: &'a [f64],
    /// Per dimension: the providers' readings.
    pub signals: &'a PoolSignals,
    pub threshold: f64,
    /// The gateway's clock (a store with its own clock uses that instead).
    pub now: UnixMillis,
    /// A running stream's next increment: dimensions it does not charge are not judged
    /// (see `DimensionInput::for_growth`).
    pub growth: bool,
}

/// What a reservation attempt found.
#[derive(Debug)]
pub struct Outcome {
    /// The time the decision was made at, on the store's clock.
    pub now: UnixMillis,
    pub decision: Decision,
    /// The booking, when admitted.
    pub reservation: Option<Reservation>,
    /// Per dimension: the key's and the pool's values before booking.
    pub peeked: Vec<(f64, f64)>,
    /// When the blocking counter falls far enough for the request to fit.
    pub by_counter: Option<u64>,
}

/// A quota counter store. `None` from `peek` or `reserve` means the store failed; the
/// engine then lets the request through unmetered (fail-open, SPEC Q6).
pub trait CounterStore {
    /// Per dimension: the key's and the pool's window values, and the time they hold at.
    fn peek(
        &self,
        pool: &PoolRuntime,
        key_id: &str,
        now: UnixMillis,
    ) -> impl Future<Output = Option<(UnixMillis, Vec<(f64, f64)>)>> + Send;

    /// Decides every dimension and, when all admit, books the estimated cost on each —
    /// in one atomic step.
    fn reserve(&self, req: ReserveRequest<'_>) -> impl Future<Output = Option<Outcome>> + Send;

    /// Moves a reservation to `actual` (the running or final actual cost).
    fn settle(
        &self,
        pool: &PoolRuntime,
        reservation: &mut Reservation,
        actual: &[f64],
        now: UnixMillis,
    );
}

/// The decision inputs of every dimension from peeked counters.
pub fn inputs(
    pool: &PoolRuntime,
    share: &KeyShare,
    peeked: &[(f64, f64)],
    costs: &[f64],
    sig: &PoolSignals,
    growth: bool,
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
        .map(|d| if growth { d.for_growth() } else { d })
        .collect()
}

#[derive(Debug)]
struct PoolSlot {
    layout: String,
    /// The newest configuration version that used this layout.
    generation: i64,
    ledger: Arc<Mutex<PoolLedger>>,
}

/// The in-memory ledgers of every pool (the `sqlite` store; with Redis they keep only
/// burn rates). Bounded by the configured pools.
#[derive(Debug, Default)]
pub struct Ledgers {
    pools: Mutex<HashMap<String, PoolSlot>>,
}

impl Ledgers {
    /// The ledger of `pool`, created (or re-laid-out after a dimension change, keeping
    /// the counters of dimensions that stayed) as needed. `None` for a request that
    /// still holds the configuration from before a dimension change: the ledger only
    /// ever moves forward.
    pub fn ledger(&self, pool: &PoolRuntime, now: UnixMillis) -> Option<Arc<Mutex<PoolLedger>>> {
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
    pub fn live_ledger(&self, pool: &PoolRuntime) -> Option<Arc<Mutex<PoolLedger>>> {
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

    pub fn remove(&self, pool_id: &str) {
        lock(&self.pools).remove(pool_id);
    }

    /// Drops the ledgers of pools that no longer exist and the counters of keys no
    /// longer known.
    pub fn prune(&self, index: &QuotaIndex, key_exists: impl Fn(&str) -> bool) {
        let mut pools = lock(&self.pools);
        pools.retain(|id, _| index.pool(id).is_some());
        for slot in pools.values() {
            lock(&slot.ledger).retain_keys(&key_exists);
        }
    }

    /// Restores persisted slots.
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

    /// Changed slots since the last call, as rows to write.
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
}

impl CounterStore for Ledgers {
    async fn peek(
        &self,
        pool: &PoolRuntime,
        key_id: &str,
        now: UnixMillis,
    ) -> Option<(UnixMillis, Vec<(f64, f64)>)> {
        let ledger = self.ledger(pool, now)?;
        let values = lock(&ledger).peek(now, key_id);
        Some((now, values))
    }

    async fn reserve(&self, req: ReserveRequest<'_>) -> Option<Outcome> {
        let now = req.now;
        let signal_values: Vec<Option<f64>> = req.signals.iter().map(|s| s.0).collect();
        let ledger = self.ledger(req.pool, now)?;
        let mut l = lock(&ledger);
        let peeked = l.peek(now, req.key_id);
        let (decision, reservation) = l.reserve(
            now,
            Ask {
                key_id: req.key_id,
                share: req.share.share,
                caps: &req.share.caps,
                costs: req.costs,
                signals: &signal_values,
                saturation_threshold: req.threshold,
                growth: req.growth,
            },
        );
        let by_counter = decision.blocked_by.and_then(|i| {
            let v = decision.dimensions[i];
            let counter = match v.blocked {
                Some(BlockReason::GlobalLimit) => None,
                _ => Some(req.key_id),
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
        })
    }

    fn settle(
        &self,
        pool: &PoolRuntime,
        reservation: &mut Reservation,
        actual: &[f64],
        now: UnixMillis,
    ) {
        if let Some(l) = self.live_ledger(pool) {
            lock(&l).settle(now, reservation, actual);
        }
    }
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

/// The Redis store and the queue of its settlement worker.
#[derive(Debug)]
pub struct RedisStore {
    counters: RedisCounters,
    settle: mpsc::Sender<SettleJob>,
}

impl RedisStore {
    /// Wraps connected counters; spawns the settlement worker.
    pub fn new(counters: RedisCounters) -> Self {
        let (tx, rx) = mpsc::channel(SETTLE_QUEUE);
        tokio::spawn(settle_worker(counters.clone(), rx));
        Self {
            counters,
            settle: tx,
        }
    }

    /// Deletes a deleted pool's counters.
    pub async fn forget_pool(&self, pool_id: &str) {
        if let Err(e) = self.counters.clear_pool(pool_id).await {
            tracing::warn!(error = %e, pool = pool_id, "Could not delete a deleted pool's counters from Redis.");
        }
    }

    /// When the blocking counter of dimension `i` falls to the value the request needs.
    async fn time_until(
        &self,
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
        match self
            .counters
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
}

impl CounterStore for RedisStore {
    async fn peek(
        &self,
        pool: &PoolRuntime,
        key_id: &str,
        _now: UnixMillis,
    ) -> Option<(UnixMillis, Vec<(f64, f64)>)> {
        let dims: Vec<(String, u64)> = pool
            .dims
            .iter()
            .map(|d| (d.key(), d.window.slot_ms()))
            .collect();
        match self.counters.peek(&pool.pool.id, key_id, &dims).await {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(error = %e, pool = %pool.pool.id, "Could not read quota counters from Redis.");
                None
            }
        }
    }

    async fn reserve(&self, req: ReserveRequest<'_>) -> Option<Outcome> {
        let (pool, share) = (req.pool, req.share);
        let args: Vec<DimArgs> = pool
            .dims
            .iter()
            .enumerate()
            .map(|(i, d)| {
                // The script judges a dimension with no limit and no cap as unknown, the
                // same rule `DimensionInput::for_growth` applies in the core.
                let judged = !(req.growth && req.costs[i] == 0.0);
                let limit = if judged { d.limit } else { 0.0 };
                (i, d, limit, share.caps[i].filter(|_| judged))
            })
            .map(|(i, d, limit, cap)| DimArgs {
                dim: d.key(),
                slot_ms: d.window.slot_ms(),
                limit,
                cost: req.costs[i],
                cap,
                fair_share: if limit > 0.0 {
                    fair_share(limit, share.share.weight)
                } else {
                    0.0
                },
                policy: match share.share.policy {
                    Policy::Hard => 0,
                    Policy::Soft => 1,
                    Policy::Burst => 2,
                },
                signal: req.signals[i].0,
            })
            .collect();
        let reply = match self
            .counters
            .reserve(&pool.pool.id, req.key_id, req.threshold, &args)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, pool = %pool.pool.id, key_id = req.key_id, "Quota store failed; admitting the request unmetered.");
                return None;
            }
        };
        let peeked: Vec<(f64, f64)> = reply.dims.iter().map(|d| (d.0, d.1)).collect();
        // The script decided; the core decision over the same numbers explains it.
        let decision = decide(
            &inputs(pool, share, &peeked, req.costs, req.signals, req.growth),
            share.share,
            req.threshold,
        );
        if decision.admitted() != reply.admitted {
            tracing::error!(pool = %pool.pool.id, key_id = req.key_id, script = reply.admitted, core = decision.admitted(), "Redis quota script and core decision disagree; following the script.");
        }
        let reservation = reply.admitted.then(|| Reservation {
            key_id: req.key_id.to_owned(),
            slots: reply.dims.iter().map(|d| d.2).collect(),
            booked: req.costs.to_vec(),
        });
        let by_counter = match decision.blocked_by {
            Some(i) if !reply.admitted => self.time_until(pool, req.key_id, &decision, i).await,
            _ => None,
        };
        Some(Outcome {
            now: reply.now,
            decision,
            reservation,
            peeked,
            by_counter,
        })
    }

    fn settle(
        &self,
        pool: &PoolRuntime,
        reservation: &mut Reservation,
        actual: &[f64],
        _now: UnixMillis,
    ) {
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
        if items.is_empty() {
            return;
        }
        let job = SettleJob {
            pool: pool.pool.id.clone(),
            key: reservation.key_id.clone(),
            items,
        };
        // The booking moves only when the settlement is on its way, so later deltas are
        // computed from what Redis will actually hold.
        if self.settle.try_send(job).is_ok() {
            reservation.booked = targets;
        } else {
            tracing::warn!(pool = %pool.pool.id, "Quota settlement queue is full; keeping the reservation at its estimate.");
        }
    }
}
