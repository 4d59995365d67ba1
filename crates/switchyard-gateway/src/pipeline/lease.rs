//! The lease stage (SPEC R16): the lease an inference request presents in its headers,
//! fenced before anything is planned; and at each dispatch, the fence again and the
//! binding of the lease to the connection about to be used (moving it there when its own
//! connection could not serve). The lease headers are read here only: upstream
//! requests are built afresh and never carry them, and no log line shows their values.

use super::attempt::Ctx;
use super::headers::Presented;
use crate::error::ApiError;
use crate::heads::visible_text;
use crate::runtime::Runtime;
use switchyard_core::catalog::ApiKey;
use switchyard_core::routing::lease::{self, Bind, Lease, OwnerHash, Refusal};
use switchyard_core::routing::Reason;

/// The request's lease, fenced: `None` when it presents none. Only the key that holds
/// the lease, at its exact generation, passes.
pub fn presented(
    runtime: &Runtime,
    headers: &Presented<'_>,
    key: &ApiKey,
    now: u64,
) -> Result<Option<Lease>, ApiError> {
    let (owner, generation) = (headers.lease_owner, headers.lease_generation);
    if owner.is_none() && generation.is_none() {
        return Ok(None);
    }
    lease::permitted(key)?;
    let owner = owner
        .and_then(visible_text)
        .ok_or(Refusal::MalformedOwner)
        .and_then(OwnerHash::of_token)?;
    let generation = generation
        .and_then(visible_text)
        .ok_or(Refusal::MalformedGeneration)
        .and_then(lease::parse_generation)?;
    let table = runtime.leases.table();
    let held = lease::fence(&table, &owner, generation, &key.id, now).inspect_err(|r| {
        tracing::info!(owner = ?owner, generation, refusal = %r, "Leased request refused before dispatch.");
    })?;
    Ok(Some(held.clone()))
}

/// The dispatch fence for an attempt on `connection`: the request's lease must still
/// pass, and is bound to the connection — kept, moved there when it is free, or the
/// attempt is left out when another owner holds it.
pub async fn bind(ctx: &Ctx<'_>, connection: &str) -> Result<(), Reason> {
    let Some(held) = ctx.lease else {
        return Ok(());
    };
    let now = ctx.clock.now_ms();
    let leases = &ctx.runtime.leases;
    let current = {
        let table = leases.table();
        match lease::fence(&table, &held.owner, held.generation, &ctx.key.id, now) {
            Ok(l) => match lease::bind(&table, l, connection, now) {
                Bind::Same => return Ok(()),
                Bind::Busy { expires_ms } => {
                    return Err(Reason::LeasedByOther {
                        retry_after_ms: expires_ms.saturating_sub(now),
                    })
                }
                Bind::Move(_) => l.clone(),
            },
            Err(refusal) => {
                let _ = ctx.lease_refusal.set(refusal);
                return Err(Reason::LeaseFenced);
            }
        }
    };
    let (from, to) = (current.connection.clone(), connection.to_owned());
    let key_id = ctx.key.id.clone();
    let moved = leases
        .change(now, None, move |t, _| {
            let l = lease::fence(t, &current.owner, current.generation, &key_id, now)?;
            match lease::bind(t, l, &to, now) {
                Bind::Same => Ok((Ok(()), vec![])),
                Bind::Move(w) => Ok((Ok(()), vec![w])),
                Bind::Busy { expires_ms } => Ok((Err(expires_ms), vec![])),
            }
        })
        .await;
    match moved {
        Ok(Ok(())) => {
            tracing::info!(owner = ?held.owner, %from, to = %connection, "The lease moved to the connection that takes the request.");
            Ok(())
        }
        Ok(Err(expires_ms)) => Err(Reason::LeasedByOther {
            retry_after_ms: expires_ms.saturating_sub(now),
        }),
        Err(crate::runtime::leases::LeaseError::Refused(refusal)) => {
            let _ = ctx.lease_refusal.set(refusal);
            Err(Reason::LeaseFenced)
        }
        Err(e) => {
            tracing::warn!(error = %e, "Could not move the lease; the connection is left out.");
            Err(Reason::LeaseFenced)
        }
    }
}
