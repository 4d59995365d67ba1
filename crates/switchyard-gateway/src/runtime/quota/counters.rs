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
//!   off the request path. A breaker ([`StoreBreaker`]) in front of every call fails
//!   fast while Redis is down or hanging, and request-path calls have a tight deadline.
//!   Each booking has a reservation id: a reservation the gateway stopped waiting for
//!   (it may still run when a hung Redis resumes) is released by that id, and
//!   settlements are absolute, so the worker retries them until Redis takes them.
//!
//! A store that cannot meter a request says why ([`Unmetered`]); the engine lets the
//! request through (fail-open, SPEC Q6) and counts it.

use super::index::{KeyShare, PoolRuntime, QuotaIndex};
use super::signals::PoolSignals;
use super::views::Probe;
use crate::clock::Clock;
use crate::sync::lock;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_core::quota::decide::{
    decide, fair_share, BlockReason, Decision, DimensionInput, Policy,
};
use switchyard_core::quota::ledger::{Ask, PoolLedger, Reservation};
use switchyard_core::quota::pool::PerDimension;
use switchyard_core::quota::window::SlidingCounter;
use switchyard_core::resilience::store_breaker::{self, Change, StoreBreaker, Verdict};
use switchyard_core::{FastMap, UnixMillis};
use switchyard_store::redis_counters::{
    DimArgs, RedisCounters, RedisStoreError, SettleTarget, SlotDelta,
};
use switchyard_store::ConsumptionRow;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;

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
    pub peeked: PerDimension<(f64, f64)>,
    /// When the blocking counter falls far enough for the request to fit.
    pub by_counter: Option<u64>,
    /// The id the booking is recorded under, for stores that settle by id (Redis).
    pub booking_id: Option<String>,
}

/// Logs at most once per interval, counting what it did not log.
#[derive(Debug, Default)]
pub struct WarnThrottle {
    next_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl WarnThrottle {
    /// `Some(number not logged since the last time)` when a line is due at `now`.
    pub fn due(&self, now: UnixMillis, interval_ms: u64) -> Option<u64> {
        let next = self.next_ms.load(Ordering::Relaxed);
        if now >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now.saturating_add(interval_ms),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// Why a store could not meter a request. A fixed set: it labels a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnmeteredReason {
    /// The breaker is open: Redis was not called at all.
    StoreUnavailable,
    /// The call did not answer within its deadline.
    StoreTimeout,
    /// Redis was unreachable or answered with an error.
    StoreError,
    /// The request holds a configuration from before a dimension change.
    ConfigChanged,
}

impl UnmeteredReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StoreUnavailable => "store_unavailable",
            Self::StoreTimeout => "store_timeout",
            Self::StoreError => "store_error",
            Self::ConfigChanged => "config_changed",
        }
    }
}

/// A store that could not meter a request: why, and the error when there was one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmetered {
    pub reason: UnmeteredReason,
    pub error: Option<String>,
    /// Whether the store was unavailable (not called, unreachable, no answer) rather
    /// than answering with an error: trying again later may work.
    pub outage: bool,
}

impl Unmetered {
    fn because(reason: UnmeteredReason) -> Self {
        Self {
            reason,
            error: None,
            outage: reason != UnmeteredReason::ConfigChanged,
        }
    }
}

/// A quota counter store. An error from `peek` or `reserve` means the store could not
/// answer; the engine then lets the request through unmetered (fail-open, SPEC Q6).
pub trait CounterStore {
    /// Per dimension: the key's and the pool's window values, and the time they hold at.
    fn peek(
        &self,
        pool: &PoolRuntime,
        key_id: &str,
        now: UnixMillis,
    ) -> impl Future<Output = Result<(UnixMillis, PerDimension<(f64, f64)>), Unmetered>> + Send;

    /// Decides every dimension and, when all admit, books the estimated cost on each —
    /// in one atomic step.
    fn reserve(
        &self,
        req: ReserveRequest<'_>,
    ) -> impl Future<Output = Result<Outcome, Unmetered>> + Send;
}

/// The decision inputs of every dimension from peeked counters.
pub fn inputs(
    pool: &PoolRuntime,
    share: &KeyShare,
    peeked: &[(f64, f64)],
    costs: &[f64],
    sig: &PoolSignals,
    growth: bool,
) -> PerDimension<DimensionInput> {
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
    /// Whether this is still the pool's slot: cleared when the slot goes (the pool was
    /// removed, or its ledger re-laid-out), which ends the pool runtimes' hold on it.
    live: Arc<AtomicBool>,
}

impl Drop for PoolSlot {
    fn drop(&mut self) {
        self.live.store(false, Ordering::Release);
    }
}

/// A pool's ledger as the pool runtimes of one layout hold it
/// ([`PoolRuntime::ledger_hold`]), so a request finds it without a lock or a hash of the
/// pool id: the ledger, while it is still the pool's in the [`Ledgers`] it is from.
#[derive(Debug)]
pub struct HeldLedger {
    /// The [`Ledgers`] it is from (a runtime could be shown to two: a test's engines).
    owner: u64,
    ledger: Arc<Mutex<PoolLedger>>,
    live: Arc<AtomicBool>,
}

impl HeldLedger {
    fn of(owner: u64, slot: &PoolSlot) -> Self {
        Self {
            owner,
            ledger: Arc::clone(&slot.ledger),
            live: Arc::clone(&slot.live),
        }
    }

    /// The ledger `pool` holds from `owner`, while it is still the pool's.
    fn live(pool: &PoolRuntime, owner: u64) -> Option<Arc<Mutex<PoolLedger>>> {
        pool.ledger_hold
            .get()
            .filter(|held| held.owner == owner && held.live.load(Ordering::Acquire))
            .map(|held| Arc::clone(&held.ledger))
    }
}

/// Numbers each [`Ledgers`].
static LEDGERS_MADE: AtomicU64 = AtomicU64::new(0);

/// The in-memory ledgers of every pool (the `sqlite` store; with Redis they keep only
/// burn rates). Bounded by the configured pools.
#[derive(Debug)]
pub struct Ledgers {
    pools: Mutex<FastMap<String, PoolSlot>>,
    /// Tells the ledgers its pool runtimes hold from another's.
    id: u64,
}

impl Default for Ledgers {
    fn default() -> Self {
        Self {
            pools: Mutex::default(),
            id: LEDGERS_MADE.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl Ledgers {
    /// The ledger of `pool`, created (or re-laid-out after a dimension change, keeping
    /// the counters of dimensions that stayed) as needed. `None` for a request that
    /// still holds the configuration from before a dimension change: the ledger only
    /// ever moves forward.
    /// The first call of a pool runtime leaves it holding the ledger (the generation is
    /// noted then), so its later calls neither lock nor hash while the ledger stays
    /// the pool's.
    pub fn ledger(&self, pool: &PoolRuntime, now: UnixMillis) -> Option<Arc<Mutex<PoolLedger>>> {
        if let Some(held) = HeldLedger::live(pool, self.id) {
            return Some(held);
        }
        let mut pools = lock(&self.pools);
        if let Some(slot) = pools.get_mut(&pool.pool.id) {
            if slot.layout == pool.layout {
                slot.generation = slot.generation.max(pool.generation);
                // A runtime already holding a ledger (one no longer the pool's) keeps
                // coming here.
                let _ = pool.ledger_hold.set(HeldLedger::of(self.id, slot));
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
        let slot = PoolSlot {
            layout: pool.layout.clone(),
            generation: pool.generation,
            ledger: Arc::new(Mutex::new(fresh)),
            live: Arc::new(AtomicBool::new(true)),
        };
        let ledger = Arc::clone(&slot.ledger);
        let _ = pool.ledger_hold.set(HeldLedger::of(self.id, &slot));
        pools.insert(pool.pool.id.clone(), slot);
        Some(ledger)
    }

    /// The ledger `pool` was reserved in, if it is still the live one (a settlement
    /// never creates or re-lays-out a ledger: after a dimension change or the pool's
    /// deletion, an in-flight reservation simply stays booked at its estimate).
    pub fn live_ledger(&self, pool: &PoolRuntime) -> Option<Arc<Mutex<PoolLedger>>> {
        if let Some(held) = HeldLedger::live(pool, self.id) {
            return Some(held);
        }
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

    /// Every pool's ledger.
    pub fn all(&self) -> Vec<(String, Arc<Mutex<PoolLedger>>)> {
        lock(&self.pools)
            .iter()
            .map(|(id, s)| (id.clone(), Arc::clone(&s.ledger)))
            .collect()
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
        let pools = self.all();
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
    ) -> Result<(UnixMillis, PerDimension<(f64, f64)>), Unmetered> {
        let ledger = self
            .ledger(pool, now)
            .ok_or(Unmetered::because(UnmeteredReason::ConfigChanged))?;
        let values = lock(&ledger).peek(now, key_id);
        Ok((now, values))
    }

    async fn reserve(&self, req: ReserveRequest<'_>) -> Result<Outcome, Unmetered> {
        let now = req.now;
        let signal_values: PerDimension<Option<f64>> = req.signals.iter().map(|s| s.0).collect();
        let ledger = self
            .ledger(req.pool, now)
            .ok_or(Unmetered::because(UnmeteredReason::ConfigChanged))?;
        let mut l = lock(&ledger);
        let (decision, reservation, peeked) = l.reserve(
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
        Ok(Outcome {
            now,
            decision,
            reservation,
            peeked,
            by_counter,
            booking_id: None,
        })
    }
}

/// The breaker in front of Redis. Three failures in a row: one may be a blip (a
/// reconnect), three mean Redis is down or hanging. The back-off starts at one second
/// and doubles up to 30 s: the request path lets one probe through per back-off, while
/// [`probe_while_open`] pings each [`PROBE_INTERVAL`] off the request path, so metering
/// resumes within about a second of Redis answering however long the back-off has grown.
/// A request-path probe may take 5 s (more than a reconnect plus a response timeout)
/// before another is let through.
const BREAKER: store_breaker::Config = store_breaker::Config {
    open_after: 3,
    backoff_ms: 1_000,
    max_backoff_ms: 30_000,
    probe_timeout_ms: 5_000,
};

/// How often Redis is probed off the request path while its breaker is not closed, so
/// metering resumes within about this long of Redis answering again, however long the
/// outage and the breaker's back-off were.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Deadline of a call on the request path (reserve, peek). A healthy Redis answers a
/// reservation in well under a millisecond; a quarter of a second is the most latency a
/// request should pay before going ahead unmetered — four times less than the
/// connection's own one-second response timeout, which settlements keep.
const REQUEST_CALL_TIMEOUT: Duration = Duration::from_millis(250);

/// Deadline of a settlement (off the request path): the connection's response timeout
/// with a margin, so the connection's own error is the one normally seen.
const SETTLE_CALL_TIMEOUT: Duration = Duration::from_millis(1_500);

/// Pause between attempts at a settlement Redis did not take (down or hanging): the
/// breaker decides whether an attempt reaches Redis at all, so retrying this often costs
/// nothing while it is open.
const SETTLE_RETRY_DELAY: Duration = Duration::from_millis(250);

/// Settlements that could not be queued are warned about at most once per this
/// interval, like unmetered requests: a full queue at thousands of requests per second
/// must not become a log line per request.
const DROPPED_WARN_INTERVAL_MS: u64 = 10_000;

/// Settlements queued for the Redis worker. At 10 000 requests/s this is a second of
/// settlements; when it is full a settlement is dropped (its reservation stays booked at
/// the estimate, which errs on the safe side) and logged.
const SETTLE_QUEUE: usize = 10_000;

/// Redis behind the breaker: every call is admitted by the breaker, bounded by a
/// deadline, and its outcome recorded.
#[derive(Debug)]
struct Guarded {
    counters: RedisCounters,
    clock: Arc<dyn Clock>,
    breaker: Mutex<StoreBreaker>,
    pending: Pending,
    /// The newest probe off the request path.
    last_probe: Mutex<Option<Probe>>,
}

/// This gateway's settlements queued for the worker but not applied yet, counted per
/// pool and key (how many were queued, how many are done: the worker takes them in
/// order), and a signal each time one is done. A reservation for a key waits (at most
/// [`SETTLED_WAIT`]) until the settlements of the key queued before it are in Redis, so
/// it is decided — and its remaining-share headers computed — on finished requests at
/// their settled cost, on this driver as on SQLite; settlements queued after it started
/// do not hold it up, however busy the key. One entry per pool and key that settled
/// here, so bounded by the configuration.
#[derive(Debug, Default)]
struct Pending {
    counts: Mutex<FastMap<(String, String), (u64, u64)>>,
    done: Notify,
}

/// The longest a reservation waits for its key's queued settlements: a few round trips
/// of a healthy Redis. Past it (Redis slow), it goes ahead counting them at their
/// estimates, as a request on another replica would.
const SETTLED_WAIT: Duration = Duration::from_millis(50);

impl Pending {
    fn add(&self, pool: &str, key: &str) {
        let mut counts = lock(&self.counts);
        let c = counts.entry((pool.to_owned(), key.to_owned())).or_default();
        c.0 = c.0.saturating_add(1);
    }

    fn done(&self, pool: &str, key: &str) {
        let mut counts = lock(&self.counts);
        let id = (pool.to_owned(), key.to_owned());
        if let Some(c) = counts.get_mut(&id) {
            c.1 = c.1.saturating_add(1);
        }
        drop(counts);
        self.done.notify_waiters();
    }

    /// How many settlements of the key were queued so far, and how many are done.
    fn count(&self, pool: &str, key: &str) -> (u64, u64) {
        lock(&self.counts)
            .get(&(pool.to_owned(), key.to_owned()))
            .copied()
            .unwrap_or((0, 0))
    }

    /// Waits until the settlements of `key` in `pool` queued so far are done, at most
    /// [`SETTLED_WAIT`].
    async fn settled(&self, pool: &str, key: &str) {
        let (queued, finished) = self.count(pool, key);
        if finished >= queued {
            return;
        }
        let deadline = tokio::time::Instant::now() + SETTLED_WAIT;
        loop {
            let done = self.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if self.count(pool, key).1 >= queued {
                return;
            }
            if tokio::time::timeout_at(deadline, done).await.is_err() {
                return;
            }
        }
    }
}

impl Guarded {
    async fn call<T>(
        &self,
        deadline: Duration,
        call: impl Future<Output = Result<T, RedisStoreError>>,
    ) -> Result<T, Unmetered> {
        let verdict = lock(&self.breaker).admit(self.clock.now_ms());
        match verdict {
            Verdict::Reject => return Err(Unmetered::because(UnmeteredReason::StoreUnavailable)),
            Verdict::Probe => tracing::info!("Probing the Redis quota store."),
            Verdict::Call => {}
        }
        match tokio::time::timeout(deadline, call).await {
            Ok(Ok(v)) => {
                self.record(true);
                Ok(v)
            }
            Ok(Err(e)) => {
                // An error Redis answered (a script error) shows Redis is up.
                let outage = e.is_outage();
                self.record(!outage);
                Err(Unmetered {
                    reason: UnmeteredReason::StoreError,
                    error: Some(e.to_string()),
                    outage,
                })
            }
            Err(_) => {
                self.record(false);
                Err(Unmetered {
                    reason: UnmeteredReason::StoreTimeout,
                    error: Some(format!("no answer within {} ms", deadline.as_millis())),
                    outage: true,
                })
            }
        }
    }

    fn record(&self, answered: bool) {
        let change = {
            let mut b = lock(&self.breaker);
            if answered {
                b.success()
            } else {
                b.failure(self.clock.now_ms())
            }
        };
        match change {
            Change::Opened { backoff_ms } => tracing::warn!(
                backoff_ms,
                "The Redis quota store is failing; requests go ahead unmetered without calling it until the back-off ends."
            ),
            Change::Closed => tracing::info!("The Redis quota store answers again; metering resumes."),
            Change::None => {}
        }
    }
}

/// Probes Redis every [`PROBE_INTERVAL`] while its breaker is not closed, until the store
/// closes: a `PING` that gets an answer closes the breaker (metering resumes); one that
/// does not changes nothing (the request path's own probes keep the back-off).
async fn probe_while_open(redis: Arc<Guarded>, mut close: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(PROBE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = close.wait_for(|c| *c) => return,
        }
        if !lock(&redis.breaker).wants_probe() {
            continue;
        }
        let answered = matches!(
            // The request path's deadline: a Redis too slow for requests stays open.
            tokio::time::timeout(REQUEST_CALL_TIMEOUT, redis.counters.ping()).await,
            Ok(Ok(()))
        );
        *lock(&redis.last_probe) = Some(Probe {
            at_ms: redis.clock.now_ms(),
            ok: answered,
        });
        if answered {
            redis.record(true);
        }
    }
}

/// One settlement for the Redis worker.
#[derive(Debug)]
struct SettleJob {
    pool: String,
    key: String,
    booking_id: String,
    last: bool,
    targets: Vec<SettleTarget>,
    /// Counted in [`Pending`] until applied (not the release of a reservation that may
    /// never have been booked).
    counted: bool,
}

impl SettleJob {
    /// Releases a booking: every dimension to zero, ending it.
    fn release(pool: &PoolRuntime, key_id: &str, booking_id: String) -> Self {
        Self {
            pool: pool.pool.id.clone(),
            key: key_id.to_owned(),
            booking_id,
            last: true,
            targets: pool
                .dims
                .iter()
                .map(|d| SettleTarget {
                    dim: d.key(),
                    slot_ms: d.window.slot_ms(),
                    target: 0.0,
                })
                .collect(),
            counted: false,
        }
    }
}

/// Applies queued Redis settlements until the store closes the queue (shutdown, then it
/// applies what is left) or every sender is gone.
async fn settle_worker(
    redis: Arc<Guarded>,
    mut rx: mpsc::Receiver<SettleJob>,
    mut close: watch::Receiver<bool>,
) {
    let mut closing = false;
    let mut failures: u64 = 0;
    loop {
        let job = if closing {
            rx.recv().await
        } else {
            tokio::select! {
                job = rx.recv() => job,
                _ = close.wait_for(|c| *c) => {
                    closing = true;
                    rx.close();
                    continue;
                }
            }
        };
        let Some(job) = job else {
            return;
        };
        // Settlements are absolute and keyed by reservation id: one that may or may not
        // have reached Redis is simply sent again, until Redis takes it (or the
        // shutdown's drain period ends).
        loop {
            let booking = (job.booking_id.as_str(), job.last);
            let call = redis
                .counters
                .settle(&job.pool, &job.key, booking, &job.targets);
            match redis.call(SETTLE_CALL_TIMEOUT, call).await {
                Ok(()) => break,
                Err(e) => {
                    failures = failures.saturating_add(1);
                    if failures.is_power_of_two() {
                        tracing::warn!(reason = e.reason.as_str(), error = e.error.as_deref().unwrap_or(""), failures, pool = %job.pool, retrying = e.outage, "Could not settle a quota reservation in Redis.");
                    }
                    if !e.outage {
                        break;
                    }
                    tokio::time::sleep(SETTLE_RETRY_DELAY).await;
                }
            }
        }
        // Applied, or given up on: either way no longer on its way.
        if job.counted {
            redis.pending.done(&job.pool, &job.key);
        }
    }
}

/// The Redis store: counters behind the breaker, and the queue of its settlement worker.
#[derive(Debug)]
pub struct RedisStore {
    redis: Arc<Guarded>,
    settle: mpsc::Sender<SettleJob>,
    close: watch::Sender<bool>,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// The probe task ([`probe_while_open`]); aborted when the store is dropped.
    prober: JoinHandle<()>,
    /// Settlements that could not be queued are warned about at most once per interval.
    dropped_warn: WarnThrottle,
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        self.prober.abort();
    }
}

impl RedisStore {
    /// Wraps connected counters; spawns the settlement worker (drained by
    /// [`RedisStore::drain`]).
    pub fn new(counters: RedisCounters, clock: Arc<dyn Clock>) -> Self {
        let redis = Arc::new(Guarded {
            counters,
            clock,
            breaker: Mutex::new(StoreBreaker::new(BREAKER)),
            pending: Pending::default(),
            last_probe: Mutex::new(None),
        });
        let (tx, rx) = mpsc::channel(SETTLE_QUEUE);
        let (close, closed) = watch::channel(false);
        let prober = tokio::spawn(probe_while_open(Arc::clone(&redis), closed.clone()));
        let worker = tokio::spawn(settle_worker(Arc::clone(&redis), rx, closed));
        Self {
            redis,
            settle: tx,
            close,
            worker: Mutex::new(Some(worker)),
            prober,
            dropped_warn: WarnThrottle::default(),
        }
    }

    /// `closed`, `open` or `half_open`.
    pub fn breaker_state(&self) -> &'static str {
        lock(&self.redis.breaker).state_name()
    }

    /// The newest probe made off the request path, if any.
    pub fn last_probe(&self) -> Option<Probe> {
        *lock(&self.redis.last_probe)
    }

    /// Settlements waiting for the worker.
    fn queued(&self) -> usize {
        SETTLE_QUEUE.saturating_sub(self.settle.capacity())
    }

    /// Stops taking settlements and waits up to `within` for the worker to apply the
    /// queued ones; what is left then is dropped (and logged).
    pub async fn drain(&self, within: Duration) {
        self.close.send_replace(true);
        let Some(mut worker) = lock(&self.worker).take() else {
            return;
        };
        let queued = self.queued();
        match tokio::time::timeout(within, &mut worker).await {
            Ok(_) => tracing::info!(applied = queued, "Quota settlements drained to Redis."),
            Err(_) => {
                worker.abort();
                tracing::warn!(
                    dropped = self.queued(),
                    "Quota settlements still queued when the shutdown grace period ended were dropped."
                );
            }
        }
    }

    /// Adds counts kept elsewhere (the in-memory fallback) to one key's Redis counters.
    pub async fn carry(
        &self,
        pool_id: &str,
        key_id: &str,
        items: &[SlotDelta],
    ) -> Result<(), Unmetered> {
        let call = self.redis.counters.add(pool_id, key_id, items);
        self.redis.call(SETTLE_CALL_TIMEOUT, call).await
    }

    /// Queues a settlement for the worker; `false` when the queue is full or closed (the
    /// reservation then stays booked at what Redis holds, its estimate at most).
    fn enqueue(&self, job: SettleJob) -> bool {
        let (pool, why) = match self.settle.try_send(job) {
            Ok(()) => return true,
            Err(mpsc::error::TrySendError::Full(job)) => (job.pool, "queue_full"),
            Err(mpsc::error::TrySendError::Closed(job)) => (job.pool, "worker_stopped"),
        };
        let now = self.redis.clock.now_ms();
        if let Some(suppressed) = self.dropped_warn.due(now, DROPPED_WARN_INTERVAL_MS) {
            tracing::warn!(pool = %pool, reason = why, suppressed, "A quota settlement could not be queued for Redis; the reservation stays booked as it is.");
        }
        false
    }

    /// Deletes a deleted pool's counters.
    pub async fn forget_pool(&self, pool_id: &str) {
        if let Err(e) = self.redis.counters.clear_pool(pool_id).await {
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
        let dim = d.key();
        let call = self
            .redis
            .counters
            .slots(&pool.pool.id, field, &dim, d.window.slot_ms());
        match self.redis.call(REQUEST_CALL_TIMEOUT, call).await {
            Ok((now, slots)) => {
                let mut c = SlidingCounter::new(d.window);
                for (slot, amount) in slots {
                    c.add_to_slot(now, slot, amount);
                }
                c.time_until_at_most(now, bound)
            }
            Err(e) => {
                tracing::debug!(
                    reason = e.reason.as_str(),
                    error = e.error.as_deref().unwrap_or(""),
                    "Could not read quota slots from Redis for Retry-After."
                );
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
    ) -> Result<(UnixMillis, PerDimension<(f64, f64)>), Unmetered> {
        let dims: Vec<(String, u64)> = pool
            .dims
            .iter()
            .map(|d| (d.key(), d.window.slot_ms()))
            .collect();
        let call = self.redis.counters.peek(&pool.pool.id, key_id, &dims);
        self.redis.pending.settled(&pool.pool.id, key_id).await;
        let (now, values) = self.redis.call(REQUEST_CALL_TIMEOUT, call).await?;
        Ok((now, values.into()))
    }

    async fn reserve(&self, req: ReserveRequest<'_>) -> Result<Outcome, Unmetered> {
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
        let booking_id = new_booking_id();
        self.redis.pending.settled(&pool.pool.id, req.key_id).await;
        let call = self.redis.counters.reserve(
            &pool.pool.id,
            req.key_id,
            &booking_id,
            req.threshold,
            &args,
        );
        let reply = match self.redis.call(REQUEST_CALL_TIMEOUT, call).await {
            Ok(r) => r,
            Err(e) => {
                // The script may still run (a hung Redis resumes with it in its input):
                // release the booking by its id, so it counts nothing either way.
                if e.reason != UnmeteredReason::StoreUnavailable {
                    self.enqueue(SettleJob::release(pool, req.key_id, booking_id));
                }
                return Err(e);
            }
        };
        let peeked: PerDimension<(f64, f64)> = reply.dims.iter().map(|d| (d.0, d.1)).collect();
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
            booked: req.costs.iter().copied().collect(),
        });
        let by_counter = match decision.blocked_by {
            Some(i) if !reply.admitted => self.time_until(pool, req.key_id, &decision, i).await,
            _ => None,
        };
        Ok(Outcome {
            now: reply.now,
            decision,
            reservation,
            peeked,
            by_counter,
            booking_id: Some(booking_id),
        })
    }
}

impl RedisStore {
    /// Moves the booking recorded under `booking_id` to its final `actual` cost, ending
    /// it: queued for the worker, so it never waits.
    pub fn settle(
        &self,
        pool: &PoolRuntime,
        (booking_id, reservation): (&str, &mut Reservation),
        actual: &[f64],
    ) {
        let targets: PerDimension<f64> = (0..reservation.booked.len())
            .map(|i| actual.get(i).copied().unwrap_or(0.0).max(0.0))
            .collect();
        // Counted before the worker can apply it (and count it done).
        self.redis.pending.add(&pool.pool.id, &reservation.key_id);
        let job = SettleJob {
            pool: pool.pool.id.clone(),
            key: reservation.key_id.clone(),
            booking_id: booking_id.to_owned(),
            last: true,
            targets: pool
                .dims
                .iter()
                .zip(&targets)
                .map(|(d, t)| SettleTarget {
                    dim: d.key(),
                    slot_ms: d.window.slot_ms(),
                    target: *t,
                })
                .collect(),
            counted: true,
        };
        if self.enqueue(job) {
            reservation.booked = targets;
        } else {
            self.redis.pending.done(&pool.pool.id, &reservation.key_id);
        }
    }
}

/// A reservation id no other booking has: 128 random bits.
fn new_booking_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_read_waits_for_the_keys_queued_settlements_at_most_a_while() {
        let p = Arc::new(Pending::default());
        p.add("team", "k1");
        p.add("team", "k1");
        // Nothing queued for another key: no wait.
        let start = tokio::time::Instant::now();
        p.settled("team", "k2").await;
        assert_eq!(start.elapsed(), Duration::ZERO);
        let done = Arc::clone(&p);
        let worker = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(3)).await;
            done.done("team", "k1");
            tokio::time::sleep(Duration::from_millis(4)).await;
            done.done("team", "k1");
        });
        p.settled("team", "k1").await;
        assert_eq!(start.elapsed(), Duration::from_millis(7));
        worker.await.unwrap();
        assert_eq!(p.count("team", "k1"), (2, 2));
        // Settlements queued after a read started do not hold it up.
        p.add("team", "k1");
        let done = Arc::clone(&p);
        let busy = tokio::spawn(async move {
            for _ in 0..20 {
                done.add("team", "k1");
                tokio::time::sleep(Duration::from_millis(1)).await;
                done.done("team", "k1");
            }
        });
        let start = tokio::time::Instant::now();
        p.settled("team", "k1").await;
        assert_eq!(start.elapsed(), Duration::from_millis(1));
        busy.await.unwrap();
        // A settlement that never completes holds a read up no longer than the bound.
        let start = tokio::time::Instant::now();
        p.settled("team", "k1").await;
        assert_eq!(start.elapsed(), SETTLED_WAIT);
    }
}
