//! `qtSd/<pool>[/<model>]` requests (SPEC G3, Q12, R8): the pool's internal quota-share
//! combo. Candidates are the pool's connections, ordered by the quota-share strategy
//! (`switchyard_core::routing::strategy`: saturation gating, then power of two choices
//! on load) in the plan stage; on a connection with
//! `max_concurrent`, the concurrency stage makes the request wait for a slot in a queue
//! served fairly across keys, and go ahead without one if the queue is full or the wait
//! too long (fail-open; see the `concurrency` stage).
//!
//! This module only builds the plan, from the snapshot alone: it reads no runtime state,
//! orders nothing and takes no slot.

use crate::error::ApiError;
use crate::snapshot::Snapshot;
use std::sync::Arc;
use switchyard_core::catalog::ApiKey;
use switchyard_core::routing::{left_out, strategy, Candidate, Exclusion, Plan, RouteError};

/// Prefix of the internal quota-share combos.
pub const PREFIX: &str = "qtSd/";

/// The plan for a `qtSd/` model, or `None` when `model` is not one.
pub fn plan(snap: &Snapshot, key: &ApiKey, model: &str) -> Option<Result<Plan, ApiError>> {
    let rest = model.strip_prefix(PREFIX)?;
    Some(build(snap, key, model, rest))
}

fn build(snap: &Snapshot, key: &ApiKey, model: &str, rest: &str) -> Result<Plan, ApiError> {
    if !key.may_use_model(model) {
        return Err(RouteError::ModelNotAllowed(model.to_owned()).into());
    }
    let (pool_id, upstream) = match rest.split_once('/') {
        Some((p, m)) => (p, Some(m)),
        None => (rest, None),
    };
    let unknown = || ApiError::from(RouteError::UnknownModel(model.to_owned()));
    let pool = snap.quota.pool(pool_id).ok_or_else(unknown)?;
    let mut out = Plan {
        candidates: Vec::new(),
        excluded: Vec::new(),
        combo: Some(format!("{PREFIX}{pool_id}")),
        strategy: strategy::Kind::QuotaShare,
    };
    for cid in &pool.pool.connection_ids {
        let Some(conn) = snap.catalog.connection(cid) else {
            continue;
        };
        let offered = snap.catalog.provider(&conn.provider).map(|p| &p.models);
        // Without a model in the name, the provider's first model.
        let Some(model_name) = upstream
            .map(str::to_owned)
            .or_else(|| offered.and_then(|m| m.first().cloned()))
        else {
            continue;
        };
        if offered.is_some_and(|m| !m.is_empty() && !m.contains(&model_name)) {
            continue;
        }
        if let Some(reason) = left_out(key, conn) {
            out.excluded.push(Exclusion {
                target: format!("{}/{model_name}", conn.provider),
                connection: conn.id.clone(),
                reason,
            });
            continue;
        }
        out.candidates.push(Candidate {
            connection: Arc::clone(conn),
            upstream_model: model_name,
            target: 0,
        });
    }
    if out.candidates.is_empty() && out.excluded.is_empty() {
        return Err(unknown());
    }
    Ok(out)
}
