//! `qtSd/<pool>[/<model>]` requests (SPEC G3, Q12, R8): the pool's internal quota-share
//! combo. Candidates are the pool's connections, ordered by the quota-share strategy
//! (saturation gating, then power of two choices on load); on a connection with
//! `max_concurrent`, the request waits for a slot in a queue served fairly across keys,
//! and goes ahead without one if the queue is full or the wait too long (fail-open).

use super::finish::Finisher;
use crate::error::ApiError;
use crate::gate::Acquire;
use crate::snapshot::Snapshot;
use crate::state::AppState;
use std::sync::Arc;
use std::time::Duration;
use switchyard_core::catalog::{ApiKey, Connection};
use switchyard_core::quota::share::{order, ConnLoad};
use switchyard_core::routing::{Candidate, Excluded, ExclusionReason, Plan, RouteError};

/// Prefix of the internal quota-share combos.
pub const PREFIX: &str = "qtSd/";

/// The plan for a `qtSd/` model, or `None` when `model` is not one.
pub fn plan(
    state: &AppState,
    snap: &Snapshot,
    key: &ApiKey,
    model: &str,
) -> Option<Result<Plan, ApiError>> {
    let rest = model.strip_prefix(PREFIX)?;
    Some(build(state, snap, key, model, rest))
}

fn build(
    state: &AppState,
    snap: &Snapshot,
    key: &ApiKey,
    model: &str,
    rest: &str,
) -> Result<Plan, ApiError> {
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
    };
    let mut loads = Vec::new();
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
        let reason = if !conn.enabled {
            Some(ExclusionReason::Disabled)
        } else if !key.may_use_connection(&conn.id) {
            Some(ExclusionReason::NotAllowedForKey)
        } else {
            None
        };
        if let Some(reason) = reason {
            out.excluded.push(Excluded {
                target: format!("{}/{model_name}", conn.provider),
                connection: conn.id.clone(),
                reason,
            });
            continue;
        }
        loads.push(ConnLoad {
            load: state.gate_for(conn).map_or(0, |g| g.load()),
            saturated: state.quota.connection_saturated(
                pool,
                &conn.id,
                snap.settings.quota.saturation_threshold,
            ),
        });
        out.candidates.push(Candidate {
            connection: Arc::clone(conn),
            upstream_model: model_name,
            target: 0,
        });
    }
    if out.candidates.is_empty() && out.excluded.is_empty() {
        return Err(unknown());
    }
    let ranked = order(&loads, state.next_rotation());
    out.candidates = ranked
        .into_iter()
        .map(|i| out.candidates[i].clone())
        .collect();
    Ok(out)
}

/// Waits for a slot on `conn` when the request is a quota-share dispatch and the
/// connection has `max_concurrent`; the permit travels with the finisher.
pub async fn take_slot(
    state: &Arc<AppState>,
    snap: &Snapshot,
    key: &ApiKey,
    conn: &Connection,
    finisher: &mut Finisher,
) {
    let q = &snap.settings.quota;
    if !q.share_gate_enabled {
        return;
    }
    let Some(gate) = state.gate_for(conn) else {
        return;
    };
    // The key's share as a fraction: one waiter per turn at 100 %, so keys interleave
    // request by request in proportion to their shares.
    let weight = snap
        .quota
        .pool_of(conn.index)
        .map_or(1.0, |p| p.share_of(&key.id).share.weight / 100.0);
    let max_queue = usize::try_from(q.share_gate_max_queue).unwrap_or(usize::MAX);
    match gate
        .acquire(
            &key.id,
            weight,
            Duration::from_millis(q.share_gate_max_wait_ms),
            max_queue,
        )
        .await
    {
        Acquire::Granted(permit) => finisher.set_permit(permit),
        Acquire::QueueFull => tracing::warn!(
            request_id = finisher.request_id(),
            connection_id = %conn.id,
            gate = %format!("qsconn:{}", conn.id),
            "Quota-share queue is full; going ahead without a slot."
        ),
        Acquire::TimedOut => tracing::warn!(
            request_id = finisher.request_id(),
            connection_id = %conn.id,
            gate = %format!("qsconn:{}", conn.id),
            "Quota-share wait timed out; going ahead without a slot."
        ),
    }
}
