//! The concurrency stage (SPEC R7, R8, R10): before an attempt reserves quota or calls
//! the upstream, it takes the slots of every gate its candidate needs — the global cap,
//! the provider's, the account's (`max_concurrent`) and the model's on that account
//! (`rateLimitOverrides.modelConcurrency`) — together, waiting in a fair queue if they
//! are full. The permit travels with the finisher and is released when the request
//! ends, however it ends.
//!
//! Quota-share dispatch (`qtSd/`) waits the same way but fails open (SPEC R8): when its
//! queue is full or its wait runs out, it goes ahead without the account slot (the
//! global, provider and model caps still hold). With
//! `quotaShareConcurrencyLimit.enabled` off it does not wait for the account at all.

use super::finish::Finisher;
use crate::gate::{Ask, Mode};
use crate::snapshot::Snapshot;
use crate::state::AppState;
use std::sync::Arc;
use std::time::Duration;
use switchyard_core::catalog::{ApiKey, Connection};
use switchyard_core::resilience::admission::{Limits, Refusal};
use switchyard_core::resilience::gates::{GateId, Need};

fn cap(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// The gates an attempt on `conn` for `model` needs, in the order global → provider →
/// account → model. Empty when nothing is capped (the common case: no lock is taken).
pub fn needs(snap: &Snapshot, conn: &Connection, model: &str, quota_share: bool) -> Vec<Need> {
    let mut out = Vec::new();
    let global = snap.settings.concurrency.global_max;
    if global > 0 {
        out.push(Need {
            gate: GateId::Global,
            capacity: cap(global),
        });
    }
    if let Some(n) = snap
        .catalog
        .provider(&conn.provider)
        .and_then(|p| p.max_concurrent)
    {
        out.push(Need {
            gate: GateId::Provider(Arc::from(conn.provider.as_str())),
            capacity: cap(u64::from(n)),
        });
    }
    let account_gated = !quota_share || snap.settings.quota.share_gate_enabled;
    if let Some(n) = conn.max_concurrent.filter(|_| account_gated) {
        out.push(Need {
            gate: GateId::Account(Arc::from(conn.id.as_str())),
            capacity: cap(u64::from(n)),
        });
    }
    if let Some(n) = conn.model_concurrency.get(model) {
        out.push(Need {
            gate: GateId::Model {
                connection: Arc::from(conn.id.as_str()),
                model: Arc::from(model),
            },
            capacity: cap(u64::from(*n)),
        });
    }
    out
}

/// The key's share as a fraction: one waiter per turn at 100 %, so keys interleave
/// request by request in proportion to their shares.
fn weight(snap: &Snapshot, key: &ApiKey, conn: &Connection) -> f64 {
    snap.quota
        .pool_of(conn.index)
        .map_or(1.0, |p| p.share_of(&key.id).share.weight / 100.0)
}

fn limits(snap: &Snapshot, conn: &Connection) -> (Limits, usize) {
    let c = &snap.settings.concurrency;
    (c.queue.with(&conn.queue), cap(c.max_waiters))
}

/// Takes the slots of an attempt on `conn` for `model` if none is busy; the permit goes
/// to the finisher. False when it would have to wait.
pub fn try_take(
    state: &Arc<AppState>,
    snap: &Snapshot,
    key: &ApiKey,
    conn: &Connection,
    model: &str,
    quota_share: bool,
    finisher: &mut Finisher,
) -> bool {
    let needs = needs(snap, conn, model, quota_share);
    if needs.is_empty() {
        return true;
    }
    let (limits, max_waiters) = limits(snap, conn);
    let ask = Ask {
        key: &key.id,
        weight: weight(snap, key, conn),
        connection: &conn.id,
        needs,
        limits,
        max_waiters,
        mode: Mode::Strict,
    };
    match state.gates.try_acquire(&ask) {
        Some(Some(permit)) => {
            finisher.set_permit(permit);
            true
        }
        Some(None) => true,
        None => false,
    }
}

/// Takes the slots of an attempt on `conn` for `model`, waiting for them — at most
/// what is left of `maxWaitMs` after `waited_before` spent on other candidates; the
/// permit goes to the finisher. A refusal is for the client, except on quota-share
/// dispatch, which goes ahead without the account slot instead (the other gates still
/// hold).
#[expect(
    clippy::too_many_arguments,
    reason = "one attempt's context; bundling it would only rename the same values"
)]
pub async fn admit(
    state: &Arc<AppState>,
    snap: &Snapshot,
    key: &ApiKey,
    conn: &Connection,
    model: &str,
    quota_share: bool,
    waited_before: Duration,
    finisher: &mut Finisher,
) -> Result<(), Refusal> {
    let needs = needs(snap, conn, model, quota_share);
    if needs.is_empty() {
        return Ok(());
    }
    let settings = &snap.settings;
    let (mut limits, mut max_waiters) = limits(snap, conn);
    let mode = if quota_share {
        limits.max_wait_ms = settings.quota.share_gate_max_wait_ms;
        max_waiters = max_waiters.min(cap(settings.quota.share_gate_max_queue));
        Mode::FailOpen
    } else {
        Mode::Strict
    };
    let waited_ms = u64::try_from(waited_before.as_millis()).unwrap_or(u64::MAX);
    limits.max_wait_ms = limits.max_wait_ms.saturating_sub(waited_ms).max(1);
    let weight = weight(snap, key, conn);
    let others: Vec<Need> = needs
        .iter()
        .filter(|n| !matches!(n.gate, GateId::Account(_)))
        .cloned()
        .collect();
    let ask = Ask {
        key: &key.id,
        weight,
        connection: &conn.id,
        needs,
        limits,
        max_waiters,
        mode,
    };
    let refusal = match state.gates.acquire(ask).await {
        Ok(Some(permit)) => {
            finisher.set_permit(permit);
            return Ok(());
        }
        Ok(None) => return Ok(()),
        Err(refusal) => refusal,
    };
    if mode == Mode::Strict {
        tracing::info!(
            request_id = finisher.request_id(),
            connection_id = %conn.id,
            code = refusal.code(),
            "Concurrency gate refused the attempt."
        );
        return Err(refusal);
    }
    tracing::warn!(
        request_id = finisher.request_id(),
        connection_id = %conn.id,
        gate = %format!("qsconn:{}", conn.id),
        code = refusal.code(),
        "Quota-share wait ended without a slot; going ahead without one."
    );
    if others.is_empty() {
        return Ok(());
    }
    // Fail-open is for the account slot only (SPEC R8): the global, provider and model
    // caps still hold, with the request queue's own bounds.
    let (limits, max_waiters) = self::limits(snap, conn);
    let ask = Ask {
        key: &key.id,
        weight,
        connection: &conn.id,
        needs: others,
        limits,
        max_waiters,
        mode: Mode::Strict,
    };
    if let Some(permit) = state.gates.acquire(ask).await? {
        finisher.set_permit(permit);
    }
    Ok(())
}
