//! The quota engine's shell: counters, provider signals, recent decisions, and the
//! reserve/settle calls the pipeline makes (SPEC Q4, Q6).
//!
//! Counters live in memory, one [`PoolLedger`] per pool behind its own mutex, held only
//! for the few microseconds of a decision and never across an `.await`. A background
//! writer persists changed slots to SQLite every second and on shutdown, and the engine
//! reloads them at start, so a restart keeps the counts.

use super::index::{PoolRuntime, QuotaIndex};
use crate::clock::Clock;
use axum::http::HeaderMap;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use switchyard_core::quota::cost::{self, Estimate};
use switchyard_core::quota::decide::{BlockReason, Decision, DimensionVerdict, Mode, Policy, Unit};
use switchyard_core::quota::ledger::{Ask, PoolLedger, Reservation};
use switchyard_core::quota::plan::Dimension;
use switchyard_core::quota::signals::{self, Signal};
use switchyard_core::settings::QuotaSettings;
use switchyard_core::usage::Usage;
use switchyard_core::UnixMillis;
use switchyard_store::ConsumptionRow;

/// How long a provider's saturation reading counts (SPEC Q6): long enough to bridge the
/// gaps between responses, short enough that a stale reading cannot block for long.
pub const SIGNAL_TTL_MS: u64 = 30_000;

/// Recent decisions kept per pool for the decisions endpoint.
const DECISIONS_PER_POOL: usize = 256;

/// Completion tokens a stream's reservation grows by once usage passes it, so a long
/// stream re-books every few hundred tokens rather than on every chunk.
const STREAM_GROWTH_TOKENS: u64 = 256;

/// Characters of streamed text per estimated token.
const CHARS_PER_TOKEN: u64 = 4;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One recorded decision, as `GET /api/quota/pools/{id}/decisions` shows it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionRecord {
    pub at: UnixMillis,
    pub api_key_id: String,
    pub admitted: bool,
    pub deprioritized: bool,
    /// The blocking dimension (`unit:window`), rule, mode and policy, when blocked.
    pub dimension: Option<String>,
    pub reason: Option<String>,
    pub mode: Option<String>,
    pub policy: String,
    pub retry_after_ms: Option<u64>,
}

/// Why a pool refused a request, with everything the 429 explains.
#[derive(Debug, Clone)]
pub struct QuotaBlock {
    pub pool_id: String,
    pub pool_name: String,
    pub key_id: String,
    pub dimension: Dimension,
    pub verdict: DimensionVerdict,
    pub policy: Policy,
    /// The key's (cap, fair share) or the pool's (global limit) rolling value.
    pub consumed: f64,
    /// The line it was judged against: cap, fair share or limit.
    pub line: f64,
    /// When the request would fit again; `None` when it never fits this window.
    pub retry_after_ms: Option<u64>,
}

impl QuotaBlock {
    pub fn reason(&self) -> BlockReason {
        self.verdict.blocked.unwrap_or(BlockReason::GlobalLimit)
    }

    /// The operator- and client-facing explanation.
    pub fn message(&self) -> String {
        let dim = format!(
            "{}/{}",
            self.dimension.unit.as_str(),
            self.dimension.window.as_str()
        );
        let whose = match self.reason() {
            BlockReason::GlobalLimit => "the pool".to_owned(),
            _ => format!("key `{}`", self.key_id),
        };
        let line = match self.reason() {
            BlockReason::Cap => "its cap",
            BlockReason::FairShare => "its fair share",
            BlockReason::GlobalLimit => "the pool limit",
        };
        let when = match self.retry_after_ms {
            Some(ms) => format!("retry in {} s", ms.div_ceil(1000)),
            None => "this request does not fit the window even when it is empty".to_owned(),
        };
        format!(
            "quota pool `{}` ({}) blocked the request on {dim} ({} policy, {} mode): {whose} has used {} of {line} {}; {when}",
            self.pool_id,
            self.pool_name,
            self.policy.as_str(),
            self.verdict.mode.as_str(),
            fmt_num(self.consumed),
            fmt_num(self.line),
        )
    }
}

/// Numbers without float noise: integers as integers, others to 4 decimals.
pub fn fmt_num(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round())
    } else {
        format!("{v:.4}")
    }
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
}

#[derive(Debug)]
struct PoolSlot {
    layout: String,
    ledger: Arc<Mutex<PoolLedger>>,
}

/// See the module docs.
pub struct QuotaEngine {
    clock: Arc<dyn Clock>,
    pools: Mutex<HashMap<String, PoolSlot>>,
    /// Per connection id: fresh provider readings and when each expires.
    signals: Mutex<HashMap<String, Vec<(Signal, UnixMillis)>>>,
    decisions: Mutex<HashMap<String, VecDeque<DecisionRecord>>>,
}

impl std::fmt::Debug for QuotaEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuotaEngine").finish_non_exhaustive()
    }
}

impl QuotaEngine {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            pools: Mutex::new(HashMap::new()),
            signals: Mutex::new(HashMap::new()),
            decisions: Mutex::new(HashMap::new()),
        }
    }

    pub fn now(&self) -> UnixMillis {
        self.clock.now_ms()
    }

    /// The ledger of `pool`, created (or re-laid-out after a dimension change, keeping
    /// the counters of dimensions that stayed) as needed.
    fn ledger(&self, pool: &PoolRuntime, now: UnixMillis) -> Arc<Mutex<PoolLedger>> {
        let mut pools = lock(&self.pools);
        if let Some(slot) = pools.get(&pool.pool.id) {
            if slot.layout == pool.layout {
                return Arc::clone(&slot.ledger);
            }
        }
        let mut fresh = PoolLedger::new(pool.dims.clone());
        if let Some(old) = pools.get(&pool.pool.id) {
            let old = lock(&old.ledger);
            for (key, dim, slot, amount) in old.slots(now) {
                let old_key = old.dimensions()[dim].key();
                if let Some(j) = pool.dims.iter().position(|d| d.key() == old_key) {
                    fresh.load_slot(now, &key, j, slot, amount);
                }
            }
        }
        let ledger = Arc::new(Mutex::new(fresh));
        pools.insert(
            pool.pool.id.clone(),
            PoolSlot {
                layout: pool.layout.clone(),
                ledger: Arc::clone(&ledger),
            },
        );
        ledger
    }

    /// Drops the counters of pools that no longer exist and of keys no longer allocated
    /// or known, after a configuration change.
    pub fn prune(&self, index: &QuotaIndex, key_exists: impl Fn(&str) -> bool) {
        let mut pools = lock(&self.pools);
        pools.retain(|id, _| index.pool(id).is_some());
        for slot in pools.values() {
            lock(&slot.ledger).retain_keys(&key_exists);
        }
        lock(&self.decisions).retain(|id, _| index.pool(id).is_some());
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
            let ledger = self.ledger(pool, now);
            lock(&ledger).load_slot(now, &r.api_key_id, dim, r.slot, r.amount);
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
            let mut ledger = lock(&ledger);
            let dims = ledger.dimensions().to_vec();
            if index.pool(&id).is_none() {
                continue;
            }
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

    /// Records the saturation headers of a response from `connection_id`.
    pub fn record_signals(&self, connection_id: &str, headers: &HeaderMap, now: UnixMillis) {
        let pairs: Vec<(&str, &str)> = headers
            .iter()
            .filter(|(n, _)| {
                let n = n.as_str();
                n.starts_with("x-codex-")
                    || n.starts_with("anthropic-ratelimit-unified-")
                    || n.starts_with("x-ratelimit-")
            })
            .filter_map(|(n, v)| v.to_str().ok().map(|v| (n.as_str(), v)))
            .collect();
        if pairs.is_empty() {
            return;
        }
        let readings = signals::parse(&pairs, now);
        if readings.is_empty() {
            return;
        }
        let mut board = lock(&self.signals);
        board.retain(|_, v| v.iter().any(|(_, exp)| *exp > now));
        let entry = board.entry(connection_id.to_owned()).or_default();
        entry.retain(|(s, exp)| {
            *exp > now
                && !readings
                    .iter()
                    .any(|r| r.unit == s.unit && r.window == s.window)
        });
        entry.extend(readings.into_iter().map(|s| (s, now + SIGNAL_TTL_MS)));
    }

    /// The reading of one connection for dimension `dim` of `pool`.
    fn connection_signal(
        board: &HashMap<String, Vec<(Signal, UnixMillis)>>,
        connection_id: &str,
        pool: &PoolRuntime,
        dim: usize,
        now: UnixMillis,
    ) -> Option<Signal> {
        let d = pool.dims[dim];
        let shortest = pool
            .dims
            .iter()
            .filter(|x| x.unit == d.unit)
            .map(|x| x.window.length_ms())
            .min();
        board.get(connection_id)?.iter().find_map(|(s, exp)| {
            let applies = match s.window {
                Some(w) => w == d.window,
                None => Some(d.window.length_ms()) == shortest,
            };
            (applies && s.unit == d.unit && *exp > now).then_some(*s)
        })
    }

    /// Per dimension: the pool's used fraction from provider readings (the mean over
    /// its connections that reported one), and the latest reset they announced.
    fn pool_signals(&self, pool: &PoolRuntime, now: UnixMillis) -> Vec<(Option<f64>, Option<u64>)> {
        let board = lock(&self.signals);
        (0..pool.dims.len())
            .map(|dim| {
                let readings: Vec<Signal> = pool
                    .pool
                    .connection_ids
                    .iter()
                    .filter_map(|c| Self::connection_signal(&board, c, pool, dim, now))
                    .collect();
                if readings.is_empty() {
                    return (None, None);
                }
                let mean = readings.iter().map(|s| s.used).sum::<f64>() / readings.len() as f64;
                let reset = readings.iter().filter_map(|s| s.reset_at).max();
                (Some(mean), reset)
            })
            .collect()
    }

    fn percent_readings(
        &self,
        pool: &PoolRuntime,
        connection_id: &str,
        now: UnixMillis,
    ) -> Vec<Option<f64>> {
        let board = lock(&self.signals);
        (0..pool.dims.len())
            .map(|dim| {
                (pool.dims[dim].unit == Unit::Percent)
                    .then(|| Self::connection_signal(&board, connection_id, pool, dim, now))
                    .flatten()
                    .map(|s| s.used * 100.0)
            })
            .collect()
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

    /// Whether `key_id` is over its soft share in `pool` right now (for ordering
    /// candidates before any reservation).
    pub fn is_deprioritized(
        &self,
        pool: &PoolRuntime,
        key_id: &str,
        estimate: &Estimate,
        settings: &QuotaSettings,
    ) -> bool {
        let now = self.now();
        let share = pool.share_of(key_id);
        let sig = self.pool_signals(pool, now);
        let costs: Vec<f64> = pool
            .dims
            .iter()
            .map(|d| estimate.cost(d.unit, None))
            .collect();
        let ledger = self.ledger(pool, now);
        let ledger = lock(&ledger);
        let inputs: Vec<_> = ledger
            .peek(now, key_id)
            .into_iter()
            .enumerate()
            .map(
                |(i, (consumed, total))| switchyard_core::quota::decide::DimensionInput {
                    limit: pool.dims[i].limit,
                    consumed,
                    total,
                    signal: sig[i].0,
                    cost: costs[i],
                    cap: share.caps[i],
                },
            )
            .collect();
        switchyard_core::quota::decide::decide(&inputs, share.share, settings.saturation_threshold)
            .deprioritized
    }

    /// Decides for `key_id` on `pool` and, when admitted, reserves the estimate.
    pub fn reserve(
        self: &Arc<Self>,
        pool: &Arc<PoolRuntime>,
        connection_id: &str,
        key_id: &str,
        estimate: Estimate,
        settings: &QuotaSettings,
    ) -> Admission {
        let now = self.now();
        let share = pool.share_of(key_id);
        let sig = self.pool_signals(pool, now);
        let signal_values: Vec<Option<f64>> = sig.iter().map(|s| s.0).collect();
        let costs: Vec<f64> = pool
            .dims
            .iter()
            .map(|d| estimate.cost(d.unit, None))
            .collect();
        let ledger = self.ledger(pool, now);
        let (decision, reservation, peeked, retry) = {
            let mut l = lock(&ledger);
            let peeked = l.peek(now, key_id);
            let (decision, reservation) = l.reserve(
                now,
                Ask {
                    key_id,
                    share: share.share,
                    caps: &share.caps,
                    costs: &costs,
                    signals: &signal_values,
                    saturation_threshold: settings.saturation_threshold,
                },
            );
            let retry = decision.blocked_by.map(|i| {
                let v = decision.dimensions[i];
                let counter_key = match v.blocked {
                    Some(BlockReason::GlobalLimit) => None,
                    _ => Some(key_id),
                };
                let by_counter = v
                    .fits_at
                    .and_then(|bound| l.time_until(now, counter_key, i, bound));
                // A provider that says its allowance is used up knows when it resets.
                let limit = pool.dims[i].limit;
                match (sig[i].0, sig[i].1) {
                    (Some(used), Some(reset))
                        if used * limit >= limit || used * limit + costs[i] > limit =>
                    {
                        Some(reset.saturating_sub(now).max(by_counter.unwrap_or(0)))
                    }
                    _ => by_counter,
                }
            });
            (decision, reservation, peeked, retry.flatten())
        };
        self.record_decision(
            &pool.pool.id,
            decision_record(now, key_id, share.share.policy, &decision, pool, retry),
        );
        match reservation {
            Some(reservation) => {
                let headers = remaining_headers(pool, &decision, &peeked, &costs);
                Admission::Admitted {
                    guard: QuotaGuard {
                        engine: Arc::clone(self),
                        pool: Arc::clone(pool),
                        connection_id: connection_id.to_owned(),
                        reservation,
                        estimate,
                        percent_base: self.percent_readings(pool, connection_id, now),
                        streamed_chars: 0,
                        done: false,
                    },
                    headers,
                }
            }
            None => {
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
        }
    }

    fn settle(
        &self,
        pool: &PoolRuntime,
        reservation: &mut Reservation,
        actual: &[f64],
        last: bool,
    ) {
        let now = self.now();
        let ledger = self.ledger(pool, now);
        let mut l = lock(&ledger);
        l.settle(now, reservation, actual);
        if last {
            l.observe_burn(now, &reservation.key_id, actual);
        }
    }

    /// Per dimension of `pool`, for the usage endpoint: the pool's consumption, each
    /// key's, and burn rates.
    pub fn usage(
        &self,
        pool: &PoolRuntime,
        keys: &[String],
        settings: &QuotaSettings,
    ) -> PoolUsage {
        let now = self.now();
        let sig = self.pool_signals(pool, now);
        let ledger = self.ledger(pool, now);
        let l = lock(&ledger);
        let mut key_ids: Vec<String> = keys.to_vec();
        for k in l.key_ids() {
            if !key_ids.iter().any(|x| x == k) {
                key_ids.push(k.to_owned());
            }
        }
        let per_key: Vec<(String, Vec<(f64, f64)>)> = key_ids
            .iter()
            .map(|k| (k.clone(), l.peek(now, k)))
            .collect();
        // Peeking a key that cannot exist reads the pool totals alone.
        let totals = l.peek(now, "");
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
                        let fair_share = if d.limit > 0.0 {
                            switchyard_core::quota::decide::fair_share(d.limit, share.share.weight)
                        } else {
                            0.0
                        };
                        let consumed = p[i].0;
                        let remaining = if d.limit > 0.0 {
                            fair_share - consumed
                        } else {
                            0.0
                        };
                        KeyUsage {
                            api_key_id: k.clone(),
                            allocated: pool.shares.contains_key(k),
                            policy: share.share.policy,
                            allocation_weight: share.share.weight,
                            consumed,
                            fair_share,
                            surplus: remaining,
                            borrowing: d.limit > 0.0 && consumed > fair_share,
                            cap: share.caps[i],
                            burn_rate: l.burn(now, k, i, remaining.max(0.0)),
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

fn decision_record(
    now: UnixMillis,
    key_id: &str,
    policy: Policy,
    d: &Decision,
    pool: &PoolRuntime,
    retry_after_ms: Option<u64>,
) -> DecisionRecord {
    let blocked = d.blocked_by.map(|i| (i, d.dimensions[i]));
    DecisionRecord {
        at: now,
        api_key_id: key_id.to_owned(),
        admitted: d.admitted(),
        deprioritized: d.deprioritized,
        dimension: blocked.map(|(i, _)| pool.dims[i].key()),
        reason: blocked
            .and_then(|(_, v)| v.blocked)
            .map(|r| r.as_str().to_owned()),
        mode: blocked.map(|(_, v)| v.mode.as_str().to_owned()),
        policy: policy.as_str().to_owned(),
        retry_after_ms,
    }
}

/// `x-ratelimit-limit-<unit>-<window>` (the key's fair share) and
/// `x-ratelimit-remaining-<unit>-<window>` (what is left of it after this request).
fn remaining_headers(
    pool: &PoolRuntime,
    d: &Decision,
    peeked: &[(f64, f64)],
    costs: &[f64],
) -> Vec<(String, String)> {
    let mut out = vec![("x-quota-pool".to_owned(), pool.pool.id.clone())];
    for (i, dim) in pool.dims.iter().enumerate() {
        if dim.limit <= 0.0 {
            continue;
        }
        let suffix = format!("{}-{}", dim.unit.as_str(), dim.window.as_str());
        let share = d.dimensions[i].fair_share;
        let used = peeked.get(i).map_or(0.0, |p| p.0) + costs.get(i).copied().unwrap_or(0.0);
        out.push((format!("x-ratelimit-limit-{suffix}"), fmt_num(share)));
        out.push((
            format!("x-ratelimit-remaining-{suffix}"),
            fmt_num((share - used).max(0.0)),
        ));
    }
    out
}

/// A pool's usage, for `GET /api/quota/pools/{id}/usage`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolUsage {
    pub pool_id: String,
    pub at: UnixMillis,
    pub dimensions: Vec<DimensionUsage>,
}

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DimensionUsage {
    /// `unit:window`.
    pub key: String,
    #[schema(value_type = String)]
    pub unit: Unit,
    pub window: &'static str,
    pub limit: f64,
    pub global_used: f64,
    /// The larger of counted use and the provider's reading, as a fraction of the limit.
    pub used_fraction: f64,
    pub provider_signal: Option<f64>,
    #[schema(value_type = String)]
    pub mode: Mode,
    pub keys: Vec<KeyUsage>,
}

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyUsage {
    pub api_key_id: String,
    /// Whether the key has an allocation in the pool (otherwise: weight 0, hard).
    pub allocated: bool,
    #[schema(value_type = String)]
    pub policy: Policy,
    pub allocation_weight: f64,
    pub consumed: f64,
    pub fair_share: f64,
    /// Fair share minus consumption: positive = unused share, negative = shortfall.
    pub surplus: f64,
    pub borrowing: bool,
    pub cap: Option<f64>,
    #[schema(value_type = Object)]
    pub burn_rate: switchyard_core::quota::burn::BurnReport,
}

/// A reservation held by a request until its response ends. Settled to the actual cost
/// when the response completes, grown as a stream runs past its estimate, released if
/// the request fails before any answer — and released when dropped unsettled, so no
/// path (panic included) can leak a reservation.
#[derive(Debug)]
pub struct QuotaGuard {
    engine: Arc<QuotaEngine>,
    pool: Arc<PoolRuntime>,
    connection_id: String,
    reservation: Reservation,
    estimate: Estimate,
    /// Per dimension: the connection's used percentage when the request started.
    percent_base: Vec<Option<f64>>,
    streamed_chars: u64,
    done: bool,
}

impl QuotaGuard {
    /// Notes streamed completion text; grows the token reservation once the text passes
    /// it, so parallel long streams cannot overshoot a window by more than a step.
    pub fn observe_output(&mut self, chars: usize) {
        self.streamed_chars += chars as u64;
        let seen = self.streamed_chars.div_ceil(CHARS_PER_TOKEN);
        if seen <= self.estimate.completion_tokens {
            return;
        }
        self.estimate.completion_tokens = seen + STREAM_GROWTH_TOKENS;
        let costs: Vec<f64> = self
            .pool
            .dims
            .iter()
            .zip(&self.reservation.booked)
            .map(|(d, booked)| match d.unit {
                Unit::Tokens => self.estimate.cost(Unit::Tokens, None),
                _ => *booked,
            })
            .collect();
        self.engine
            .settle(&self.pool, &mut self.reservation, &costs, false);
    }

    /// Settles to the actual cost: the upstream's usage, or what was seen streaming.
    pub fn settle(mut self, usage: Option<Usage>) {
        let now = self.engine.now();
        let rises = self
            .engine
            .percent_readings(&self.pool, &self.connection_id, now);
        let fallback = Estimate {
            prompt_tokens: self.estimate.prompt_tokens,
            completion_tokens: self.streamed_chars.div_ceil(CHARS_PER_TOKEN),
        };
        let actual: Vec<f64> = self
            .pool
            .dims
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let rise = match (
                    self.percent_base.get(i).copied().flatten(),
                    rises.get(i).copied().flatten(),
                ) {
                    (Some(before), Some(after)) => Some(after - before),
                    _ => None,
                };
                cost::actual(d.unit, usage, fallback, None, rise)
            })
            .collect();
        self.engine
            .settle(&self.pool, &mut self.reservation, &actual, true);
        self.done = true;
    }

    /// Gives the reservation back (the request failed before any answer).
    pub fn release(mut self) {
        self.release_inner();
    }

    fn release_inner(&mut self) {
        if !self.done {
            self.done = true;
            let zeros = vec![0.0; self.reservation.booked.len()];
            self.engine
                .settle(&self.pool, &mut self.reservation, &zeros, false);
        }
    }
}

impl Drop for QuotaGuard {
    fn drop(&mut self) {
        self.release_inner();
    }
}
