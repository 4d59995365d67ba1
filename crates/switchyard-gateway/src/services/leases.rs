//! Exclusive session leases (SPEC R16): a lease-capable client key's `acquire`,
//! `renew`, `release` and `status`, and the operator's list and release (the fence of
//! inference requests is the pipeline's). The decisions are the core's
//! ([`switchyard_core::routing::lease`]); the writes go through
//! [`Leases`](crate::runtime::leases::Leases). No owner token is logged or kept: only its
//! hash, of which logs show the first characters.

use crate::error::ApiError;
use crate::runtime::leases::LeaseError;
use crate::snapshot::Snapshot;
use crate::state::AppState;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use switchyard_core::catalog::ApiKey;
use switchyard_core::routing::lease::{self, Acquire, Ended, Lease, OwnerHash, Write};
use utoipa::ToSchema;

/// What a lease-capable client asks of `POST /api/v1/session-leases`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    pub action: LeaseAction,
    /// The owner token (`vlo_` and 43 base64url characters). Optional for `acquire`,
    /// which mints one when it is absent; required by the other actions.
    #[serde(default)]
    pub owner: Option<String>,
    /// The lease's generation; required by `renew` and `release`.
    #[serde(default)]
    pub generation: Option<u64>,
    /// The lease's life from now, 1 000 to 1 800 000 ms (default 120 000), for
    /// `acquire` and `renew`.
    #[serde(default, alias = "ttlMs")]
    pub ttl_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum LeaseAction {
    Acquire,
    Renew,
    Release,
    Status,
}

/// A lease as its holder sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct LeaseAnswer {
    pub action: LeaseAction,
    /// `active`, or `released` after a release.
    pub state: &'static str,
    /// The owner token, only when `acquire` minted it: keep it, it is not shown again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    pub generation: u64,
    /// The connection the lease holds.
    pub connection_id: String,
    pub provider: String,
    /// `acquire` found the owner already holding the lease and extended it.
    pub reused: bool,
    /// Unix milliseconds.
    pub acquired_at: u64,
    pub renewed_at: u64,
    pub expires_at: u64,
}

/// One active lease as the operator sees it: by its owner's hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct LeaseView {
    /// Hex SHA-256 of the owner token.
    pub owner_hash: String,
    pub key_id: String,
    pub connection_id: String,
    pub generation: u64,
    /// Unix milliseconds.
    pub acquired_at: u64,
    pub renewed_at: u64,
    pub expires_at: u64,
}

impl From<LeaseError> for ApiError {
    fn from(e: LeaseError) -> Self {
        match e {
            LeaseError::Refused(r) => Self::Lease(r),
            LeaseError::Store(e) => Self::Internal(format!("the lease store failed: {e}")),
            LeaseError::Task(m) => Self::Internal(m),
        }
    }
}

/// Serves one lease action for `key`.
pub async fn act(
    state: &AppState,
    key: &ApiKey,
    req: LeaseRequest,
) -> Result<LeaseAnswer, ApiError> {
    lease::permitted(key)?;
    let now = state.clock.now_ms();
    let snap = state.snapshot();
    let answer = |action, lease: &Lease, state_name, reused| LeaseAnswer {
        action,
        state: state_name,
        owner: None,
        generation: lease.generation,
        connection_id: lease.connection.clone(),
        provider: snap
            .catalog
            .connection(&lease.connection)
            .map(|c| c.provider.clone())
            .unwrap_or_default(),
        reused,
        acquired_at: lease.acquired_ms,
        renewed_at: lease.renewed_ms,
        expires_at: lease.expires_ms,
    };
    let owner_of = |token: Option<&String>| -> Result<OwnerHash, ApiError> {
        let token = token.ok_or_else(|| missing("owner"))?;
        Ok(OwnerHash::of_token(token)?)
    };
    let generation = || req.generation.ok_or_else(|| missing("generation"));
    let leases = &state.runtime.leases;
    let key_id = key.id.clone();
    match req.action {
        LeaseAction::Acquire => {
            let ttl = lease::ttl_ms(req.ttl_ms)?;
            let (token, minted) = match req.owner.clone() {
                Some(t) => (t, false),
                None => (mint(), true),
            };
            let owner = OwnerHash::of_token(&token)?;
            let eligible = eligible(state, &snap, key);
            let got = leases
                .change(now, Some(owner), move |t, next_generation| {
                    let names: Vec<&str> = eligible.iter().map(String::as_str).collect();
                    let req = Acquire {
                        owner,
                        key_id: &key_id,
                        eligible: &names,
                        ttl_ms: ttl,
                        next_generation,
                    };
                    let got = lease::acquire(t, req, now)?;
                    Ok(((got.lease, got.reused), vec![got.write]))
                })
                .await?;
            let (lease, reused) = got;
            tracing::info!(owner = ?lease.owner, key_id = %lease.key_id, connection = %lease.connection, generation = lease.generation, reused, "Lease acquired.");
            let mut a = answer(LeaseAction::Acquire, &lease, "active", reused);
            a.owner = minted.then_some(token);
            Ok(a)
        }
        LeaseAction::Renew => {
            let ttl = lease::ttl_ms(req.ttl_ms)?;
            let owner = owner_of(req.owner.as_ref())?;
            let g = generation()?;
            let lease = leases
                .change(now, None, move |t, _| {
                    let (lease, write) = lease::renew(t, (&owner, g, &key_id), ttl, now)?;
                    Ok((lease, vec![write]))
                })
                .await?;
            tracing::debug!(owner = ?lease.owner, expires_at = lease.expires_ms, "Lease renewed.");
            Ok(answer(LeaseAction::Renew, &lease, "active", false))
        }
        LeaseAction::Release => {
            let owner = owner_of(req.owner.as_ref())?;
            let g = generation()?;
            let lease = leases
                .change(now, None, move |t, _| {
                    let (lease, write) = lease::release(t, (&owner, g, &key_id), now)?;
                    Ok((lease, vec![write]))
                })
                .await?;
            tracing::info!(owner = ?lease.owner, connection = %lease.connection, "Lease released by its owner.");
            Ok(answer(LeaseAction::Release, &lease, "released", false))
        }
        LeaseAction::Status => {
            let owner = owner_of(req.owner.as_ref())?;
            let table = leases.table();
            let lease = lease::status(&table, &owner, &key.id, now)?;
            Ok(answer(LeaseAction::Status, lease, "active", false))
        }
    }
}

fn missing(field: &'static str) -> ApiError {
    ApiError::InvalidRequest {
        param: Some(field),
        message: format!("`{field}` is required for this action"),
    }
}

/// A new owner token: `vlo_` and 32 random bytes in unpadded base64url.
fn mint() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("{}{}", lease::OWNER_PREFIX, URL_SAFE_NO_PAD.encode(bytes))
}

/// The key's connections a lease may take: listed, enabled, and not in a terminal
/// state, in the key's order.
fn eligible(state: &AppState, snap: &Snapshot, key: &ApiKey) -> Vec<String> {
    key.allowed_connections
        .iter()
        .flatten()
        .filter(|id| {
            snap.catalog.connection(id).is_some_and(|c| {
                c.enabled && state.runtime.resilience.health_of(&c.id).terminal.is_none()
            })
        })
        .cloned()
        .collect()
}

/// The active leases, most recently acquired first.
pub fn list(state: &AppState) -> Vec<LeaseView> {
    state
        .runtime
        .leases
        .live(state.clock.now_ms())
        .into_iter()
        .map(|l| LeaseView {
            owner_hash: l.owner.to_hex(),
            key_id: l.key_id,
            connection_id: l.connection,
            generation: l.generation,
            acquired_at: l.acquired_ms,
            renewed_at: l.renewed_ms,
            expires_at: l.expires_ms,
        })
        .collect()
}

/// Ends the active lease of the owner whose hash is `owner_hash` (the operator's
/// release): its connection is free for others at once.
pub async fn release(state: &AppState, owner_hash: &str) -> Result<(), ApiError> {
    let not_found = || ApiError::NotFound {
        kind: "lease",
        id: owner_hash.chars().take(64).collect(),
    };
    let owner = OwnerHash::from_hex(owner_hash).ok_or_else(not_found)?;
    let now = state.clock.now_ms();
    let ended = state
        .runtime
        .leases
        .change(now, None, move |t, _| match t.of_owner(&owner, now) {
            Some(_) => Ok((
                true,
                vec![Write::End {
                    owner,
                    how: Ended::Invalidated,
                }],
            )),
            None => Ok((false, vec![])),
        })
        .await?;
    if ended {
        tracing::info!(owner = ?owner, "Lease released by the operator.");
        Ok(())
    } else {
        Err(not_found())
    }
}
