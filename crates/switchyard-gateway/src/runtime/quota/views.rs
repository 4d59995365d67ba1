//! What the quota engine shows: refusals (the 429's explanation), recorded decisions,
//! pool usage, and the `x-ratelimit-*` headers of admitted answers.
//!
//! Everything here is built from what the engine passes in (a decision, peeked counters,
//! costs), so nothing here locks, reads a store or decides; the 429 body itself is
//! rendered in `crate::error`.

use super::index::{KeyShare, PoolRuntime};
use crate::heads::{Late, LateValue};
use http::HeaderName;
use std::sync::Arc;
use switchyard_core::quota::decide::{BlockReason, Decision, DimensionVerdict, Mode, Policy, Unit};
use switchyard_core::quota::plan::Dimension;
use switchyard_core::quota::pool::PerDimension;
use switchyard_core::UnixMillis;

/// One recorded decision, as `GET /api/quota/pools/{id}/decisions` shows it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionRecord {
    pub at: UnixMillis,
    pub api_key_id: String,
    pub admitted: bool,
    pub deprioritized: bool,
    /// The dimension (`unit:window`) that blocked the request or deprioritized it, the
    /// rule (`cap`, `global_limit`, `fair_share`, or `soft_share` for a soft penalty),
    /// and the mode it was in.
    pub dimension: Option<String>,
    pub reason: Option<&'static str>,
    pub mode: Option<&'static str>,
    pub policy: &'static str,
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
    let mut out = Vec::new();
    crate::heads::push_number(&mut out, v);
    String::from_utf8(out).unwrap_or_default()
}

/// The record of one decision for the decisions endpoint.
pub fn decision_record(
    now: UnixMillis,
    key_id: &str,
    policy: Policy,
    d: &Decision,
    pool: &PoolRuntime,
    retry_after_ms: Option<u64>,
) -> DecisionRecord {
    // The dimension that decided: the one that blocked, or the one that deprioritized.
    let deciding = d.blocked_by.or_else(|| {
        d.dimensions
            .iter()
            .position(|v| v.deprioritized)
            .filter(|_| d.deprioritized)
    });
    let reason = match d.blocked_by {
        Some(i) => d.dimensions[i].blocked.map(|r| r.as_str()),
        None => deciding.map(|_| "soft_share"),
    };
    DecisionRecord {
        at: now,
        api_key_id: key_id.to_owned(),
        admitted: d.admitted(),
        deprioritized: d.deprioritized,
        dimension: deciding.map(|i| pool.dims[i].key()),
        reason,
        mode: deciding.map(|i| d.dimensions[i].mode.as_str()),
        policy: policy.as_str(),
        retry_after_ms,
    }
}

/// `x-quota-pool`: the pool that admitted the request. Made once: a name given as text
/// is parsed at every use.
static QUOTA_POOL_HEADER: HeaderName = HeaderName::from_static("x-quota-pool");

/// An admitted answer's quota fields: `x-quota-pool`, and per dimension with a limit
/// `x-ratelimit-limit-<unit>-<window>` (the key's fair share, made with the
/// configuration) and `x-ratelimit-remaining-<unit>-<window>` (what is left of it after
/// this request, kept as a number until the head is written).
#[derive(Debug)]
pub struct ShareFields {
    pool: Arc<PoolRuntime>,
    share: Arc<KeyShare>,
    /// Per dimension: what is left of the key's fair share.
    left: PerDimension<f64>,
}

impl ShareFields {
    pub fn new(
        pool: &Arc<PoolRuntime>,
        share: &Arc<KeyShare>,
        (d, peeked, costs): (&Decision, &[(f64, f64)], &[f64]),
    ) -> Self {
        let left = d
            .dimensions
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let used =
                    peeked.get(i).map_or(0.0, |p| p.0) + costs.get(i).copied().unwrap_or(0.0);
                (v.fair_share - used).max(0.0)
            })
            .collect();
        Self {
            pool: Arc::clone(pool),
            share: Arc::clone(share),
            left,
        }
    }
}

impl Late for ShareFields {
    fn each(&self, field: &mut dyn FnMut(&HeaderName, LateValue<'_>)) {
        field(&QUOTA_POOL_HEADER, LateValue::Made(&self.pool.id_header));
        let names = self.pool.header_names.iter();
        let dims = names.zip(&self.share.fair_fields).zip(&self.left);
        for (((limit_name, remaining_name), fair), &left) in dims {
            // A dimension without a limit has no fair share.
            if let Some(fair) = fair {
                field(limit_name, LateValue::Made(fair));
                field(remaining_name, LateValue::Number(left));
            }
        }
    }
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

/// The quota counter store, as health shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct StoreStatus {
    /// Where counters live now: `sqlite` or `redis`.
    pub driver: &'static str,
    /// What `quotaStore.driver` asks for.
    pub requested: &'static str,
    /// `ok`; `fallback` (Redis asked for, counters in memory); `unavailable` (on Redis,
    /// but its breaker is open: requests go ahead unmetered).
    pub state: &'static str,
    /// `selected`, `no_url`, `invalid_url`, `unreachable` or `breaker_open`.
    pub reason: &'static str,
    /// The Redis breaker: `closed`, `open` or `half_open` (Redis only).
    pub breaker: Option<&'static str>,
    /// The newest probe made off the request path while the breaker was not closed
    /// (Redis only; none since start when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_probe: Option<Probe>,
}

/// One probe of the Redis quota store off the request path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Probe {
    /// When it was made (Unix milliseconds).
    pub at_ms: u64,
    /// Whether Redis answered.
    pub ok: bool,
}
