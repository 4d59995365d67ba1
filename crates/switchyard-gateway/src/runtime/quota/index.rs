//! The quota part of the configuration snapshot: validated pools, each connection's
//! pool, and every key's share, resolved once per configuration change so the request
//! path only looks things up.
//!
//! It is immutable once built but for where a pool's counters are (a pool runtime holds
//! its in-memory ledger once found, see `counters::HeldLedger`); the counters are the
//! engine's. Building reads only the catalog, the pool inputs and the manual plans it is
//! given.

use super::counters::HeldLedger;
use crate::heads::number_value;
use http::{HeaderName, HeaderValue};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use switchyard_core::catalog::Catalog;
use switchyard_core::quota::decide::{effective_weights, fair_share, Policy, Share};
use switchyard_core::quota::plan::{self, Dimension, PlanSource};
use switchyard_core::quota::pool::{Pool, PoolError, PoolInput};
use switchyard_core::FastMap;
use switchyard_model::PlanRecord;

/// A key's share of one pool, per dimension.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyShare {
    pub share: Share,
    /// Per dimension: the key's cap, when its cap unit is that dimension's unit.
    pub caps: Vec<Option<f64>>,
    /// Per dimension: the key's fair share as the value of its
    /// `x-ratelimit-limit-<unit>-<window>` field (constant until the configuration
    /// changes, so made once), `None` for a dimension without a limit.
    pub fair_fields: Vec<Option<HeaderValue>>,
}

impl KeyShare {
    fn new(share: Share, caps: Vec<Option<f64>>, dims: &[Dimension]) -> Self {
        let fair_fields = dims
            .iter()
            .map(|d| (d.limit > 0.0).then(|| number_value(fair_share(d.limit, share.weight))))
            .collect();
        Self {
            share,
            caps,
            fair_fields,
        }
    }
}

/// One pool, ready for the request path.
#[derive(Debug)]
pub struct PoolRuntime {
    pub pool: Pool,
    /// The enforced dimensions (declared, or the plan times the connection count).
    pub dims: Vec<Dimension>,
    pub shares: FastMap<String, Arc<KeyShare>>,
    /// The share of a key without an allocation: weight 0, hard. Such a key may borrow
    /// while the pool is lenient and is stopped once it is strict.
    pub unallocated: Arc<KeyShare>,
    /// Identifies the dimension list; counters are kept only while it is unchanged.
    pub layout: String,
    /// The configuration version this runtime was built from.
    pub generation: i64,
    /// Per dimension, the names of its `x-ratelimit-limit-*` and
    /// `x-ratelimit-remaining-*` headers, built once instead of per request.
    pub header_names: Vec<(HeaderName, HeaderName)>,
    /// The pool id as the `x-quota-pool` header value.
    pub id_header: HeaderValue,
    /// Per dimension: whether its window is the shortest of its unit's in this pool (a
    /// provider reading without a window, such as OpenAI's per-minute limits, applies
    /// there).
    pub shortest: Vec<bool>,
    /// The pool's in-memory ledger, held from the first request that found it (the
    /// engine's, see [`HeldLedger`]): the only state here, a cache of where the counters
    /// are.
    pub ledger_hold: OnceLock<HeldLedger>,
}

/// The remaining-share header names of a dimension.
fn header_names(dim: &Dimension) -> Result<(HeaderName, HeaderName), http::Error> {
    let suffix = format!("{}-{}", dim.unit.as_str(), dim.window.as_str());
    Ok((
        HeaderName::try_from(format!("x-ratelimit-limit-{suffix}"))?,
        HeaderName::try_from(format!("x-ratelimit-remaining-{suffix}"))?,
    ))
}

impl PoolRuntime {
    pub fn share_of(&self, key_id: &str) -> &Arc<KeyShare> {
        self.shares.get(key_id).unwrap_or(&self.unallocated)
    }
}

/// Why the quota configuration is invalid.
#[derive(Debug, thiserror::Error)]
pub enum QuotaConfigError {
    #[error("quota pool `{pool}`: {error}")]
    Pool { pool: String, error: PoolError },
    #[error("connection `{connection}` is in two quota pools, `{first}` and `{second}`")]
    SharedConnection {
        connection: String,
        first: String,
        second: String,
    },
    #[error("plan for connection `{connection}`: {error}")]
    Plan {
        connection: String,
        error: PoolError,
    },
    #[error("plan for unknown connection `{0}`")]
    PlanConnection(String),
    #[error("quota pool `{pool}`: cannot build its response headers: {message}")]
    Headers { pool: String, message: String },
}

/// Every pool and plan of one snapshot.
#[derive(Debug, Default)]
pub struct QuotaIndex {
    pub pools: Vec<Arc<PoolRuntime>>,
    /// Parallel to `catalog.connections()`: the index of the connection's pool.
    by_connection: Vec<Option<usize>>,
    /// Per connection id: its resolved plan and where it came from.
    pub plans: HashMap<String, (Vec<Dimension>, PlanSource)>,
}

impl QuotaIndex {
    /// Builds the index of configuration version `generation`.
    pub fn build(
        catalog: &Catalog,
        pools: &[PoolInput],
        manual_plans: &[PlanRecord],
        generation: i64,
    ) -> Result<Self, QuotaConfigError> {
        let mut manual: HashMap<&str, Vec<Dimension>> = HashMap::new();
        for p in manual_plans {
            if catalog.connection(&p.connection_id).is_none() {
                return Err(QuotaConfigError::PlanConnection(p.connection_id.clone()));
            }
            manual.insert(&p.connection_id, validate_plan(p)?);
        }
        let plans: HashMap<String, (Vec<Dimension>, PlanSource)> = catalog
            .connections()
            .iter()
            .map(|c| {
                let resolved =
                    plan::resolve(manual.get(c.id.as_str()).map(Vec::as_slice), &c.provider);
                (c.id.clone(), resolved)
            })
            .collect();
        let plan_of = |c: &str| plans.get(c).map(|(d, _)| d.clone()).unwrap_or_default();
        let key_ids: std::collections::HashSet<&str> =
            catalog.keys().map(|k| k.id.as_str()).collect();
        let key_known = |k: &str| key_ids.contains(k);
        let mut index = Self {
            pools: Vec::with_capacity(pools.len()),
            by_connection: vec![None; catalog.connections().len()],
            plans: HashMap::new(),
        };
        for input in pools {
            let pool = input
                .validate(|c| catalog.connection(c).is_some(), key_known, plan_of)
                .map_err(|error| QuotaConfigError::Pool {
                    pool: input.id.clone(),
                    error,
                })?;
            let dims = pool.effective_dimensions(plan_of);
            let weights = effective_weights(
                &pool
                    .allocations
                    .iter()
                    .map(|a| a.allocation_weight)
                    .collect::<Vec<_>>(),
            );
            let shares = pool
                .allocations
                .iter()
                .zip(weights)
                .map(|(a, weight)| {
                    let caps = dims
                        .iter()
                        .map(|d| a.cap().filter(|c| c.unit == d.unit).map(|c| c.value))
                        .collect();
                    let share = Share {
                        weight,
                        policy: a.policy,
                    };
                    let share = KeyShare::new(share, caps, &dims);
                    (a.api_key_id.clone(), Arc::new(share))
                })
                .collect();
            let pos = index.pools.len();
            for cid in &pool.connection_ids {
                if let Some(conn) = catalog.connection(cid) {
                    if let Some(other) = index.by_connection[conn.index] {
                        return Err(QuotaConfigError::SharedConnection {
                            connection: cid.clone(),
                            first: index.pools[other].pool.id.clone(),
                            second: pool.id.clone(),
                        });
                    }
                    index.by_connection[conn.index] = Some(pos);
                }
            }
            let layout = dims
                .iter()
                .map(Dimension::key)
                .collect::<Vec<_>>()
                .join(",");
            let header_names = dims
                .iter()
                .map(header_names)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| QuotaConfigError::Headers {
                    pool: pool.id.clone(),
                    message: e.to_string(),
                })?;
            let id_header =
                HeaderValue::try_from(pool.id.as_str()).map_err(|e| QuotaConfigError::Headers {
                    pool: pool.id.clone(),
                    message: e.to_string(),
                })?;
            let shortest = dims
                .iter()
                .map(|d| {
                    let of_unit = dims.iter().filter(|x| x.unit == d.unit);
                    of_unit.map(|x| x.window.length_ms()).min() == Some(d.window.length_ms())
                })
                .collect();
            index.pools.push(Arc::new(PoolRuntime {
                ledger_hold: OnceLock::new(),
                shortest,
                header_names,
                id_header,
                unallocated: Arc::new(KeyShare::new(
                    Share {
                        weight: 0.0,
                        policy: Policy::Hard,
                    },
                    vec![None; dims.len()],
                    &dims,
                )),
                pool,
                dims,
                shares,
                layout,
                generation,
            }));
        }
        index.plans = plans;
        Ok(index)
    }

    /// The pool a connection (by catalog index) belongs to.
    pub fn pool_of(&self, connection_index: usize) -> Option<&Arc<PoolRuntime>> {
        self.by_connection
            .get(connection_index)
            .copied()
            .flatten()
            .and_then(|i| self.pools.get(i))
    }

    pub fn pool(&self, id: &str) -> Option<&Arc<PoolRuntime>> {
        self.pools.iter().find(|p| p.pool.id == id)
    }

    pub fn is_empty(&self) -> bool {
        self.pools.is_empty()
    }
}

impl switchyard_core::routing::Pools for QuotaIndex {
    fn connections(&self, id: &str) -> Option<&[String]> {
        self.pool(id).map(|p| p.pool.connection_ids.as_slice())
    }

    fn ids(&self) -> Vec<&str> {
        self.pools.iter().map(|p| p.pool.id.as_str()).collect()
    }
}

/// Validates a manual plan's dimensions with the pool rules (units, windows, limits).
pub fn validate_plan(p: &PlanRecord) -> Result<Vec<Dimension>, QuotaConfigError> {
    let probe = PoolInput {
        id: "plan".to_owned(),
        name: "plan".to_owned(),
        connection_ids: vec![p.connection_id.clone()],
        dimensions: p.dimensions.clone(),
        allocations: Vec::new(),
    };
    probe
        .validate(|_| true, |_| true, |_| Vec::new())
        .map(|pool| pool.dimensions)
        .map_err(|error| QuotaConfigError::Plan {
            connection: p.connection_id.clone(),
            error,
        })
}
