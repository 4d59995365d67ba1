//! The concurrency stage (SPEC R7, R8, R10): before an attempt reserves quota or calls
//! the upstream, it takes the slots of every gate its candidate needs — the global cap,
//! the provider's, the account's (`max_concurrent`) and the model's on that account
//! (`rateLimitOverrides.modelConcurrency`) — together, waiting in a fair queue if they
//! are full. The permit belongs to the attempt, then to the request's finisher when the
//! answer goes to the client, and is released when dropped, however the request ends.
//!
//! Quota-share dispatch (`qtSd/`) waits the same way but fails open (SPEC R8): when its
//! queue is full or its wait runs out, it goes ahead without the account slot (the
//! global, provider and model caps still hold). With
//! `quotaShareConcurrencyLimit.enabled` off it does not wait for the account at all.
//!
//! The stage uses only the runtime's gates and reads the snapshot, both through the
//! attempt's context, never `AppState`; queueing and refusals are `runtime::gate`'s.

use super::attempt::Ctx;
use crate::runtime::gate::{Ask, Mode, Permit};
use crate::snapshot::Snapshot;
use std::sync::Arc;
use switchyard_core::catalog::{ApiKey, Connection};
use switchyard_core::resilience::admission::{Limits, Refusal};
use switchyard_core::resilience::gates::{GateId, Need};
use switchyard_core::routing::{AccountGate, Candidate};

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

/// Whether the plan's account slot fails open (quota-share dispatch).
fn shares_quota(ctx: &Ctx<'_>) -> bool {
    ctx.policy.account_gate == AccountGate::FailOpen
}

/// Takes the slots of an attempt on `candidate` if none is busy: `Some` with the permit
/// (`None` inside when nothing is capped), `None` when it would have to wait.
pub fn try_take(ctx: &Ctx<'_>, candidate: &Candidate) -> Option<Option<Permit>> {
    let (snap, conn) = (ctx.snap, &candidate.connection);
    let needs = needs(snap, conn, &candidate.upstream_model, shares_quota(ctx));
    if needs.is_empty() {
        return Some(None);
    }
    let (limits, max_waiters) = limits(snap, conn);
    let ask = Ask {
        key: &ctx.key.id,
        weight: weight(snap, ctx.key, conn),
        connection: &conn.id,
        needs,
        limits,
        max_waiters,
        mode: Mode::Strict,
    };
    ctx.runtime.gates.try_acquire(&ask)
}

/// Takes the slots of an attempt on `candidate`, waiting for them — at most what is left
/// of `maxWaitMs` after `waited_ms` spent on other candidates. A refusal is for the
/// client, except on quota-share dispatch, which goes ahead without the account slot
/// instead (the other gates still hold).
pub async fn admit(
    ctx: &Ctx<'_>,
    candidate: &Candidate,
    waited_ms: u64,
    request_id: &str,
) -> Result<Option<Permit>, Refusal> {
    let (snap, key, conn) = (ctx.snap, ctx.key, &candidate.connection);
    let quota_share = shares_quota(ctx);
    let needs = needs(snap, conn, &candidate.upstream_model, quota_share);
    if needs.is_empty() {
        return Ok(None);
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
    let gates = &ctx.runtime.gates;
    let refusal = match gates.acquire(ask).await {
        Ok(permit) => return Ok(permit),
        Err(refusal) => refusal,
    };
    if mode == Mode::Strict {
        tracing::info!(
            request_id,
            connection_id = %conn.id,
            code = refusal.code(),
            "Concurrency gate refused the attempt."
        );
        return Err(refusal);
    }
    tracing::warn!(
        request_id,
        connection_id = %conn.id,
        gate = %format!("qsconn:{}", conn.id),
        code = refusal.code(),
        "Quota-share wait ended without a slot; going ahead without one."
    );
    if others.is_empty() {
        return Ok(None);
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
    gates.acquire(ask).await
}
