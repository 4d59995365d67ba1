//! Where requests go next: client sessions (SPEC R15), the live session pins and
//! releasing one, and the last good connection of each `lkgp` combo (R19). A session is
//! shown by its pin key (the SHA-256 of the client key id and session id), never by the
//! id the client sent.

use crate::error::ApiError;
use crate::state::AppState;
use serde::Serialize;
use switchyard_core::routing::affinity::SessionKey;
use utoipa::ToSchema;

/// One live session pin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct SessionView {
    /// The pin's key: hex SHA-256 of the client key id and the session id.
    pub session: String,
    pub key_id: String,
    /// The connection the session is pinned to.
    pub connection: String,
    /// Unix milliseconds.
    pub created_at: u64,
    /// Unix milliseconds of the last request that followed or wrote the pin.
    pub last_used_at: u64,
    /// Unix milliseconds at which the pin lapses unless followed again.
    pub expires_at: u64,
}

/// The live pins, most recently used first.
pub fn sessions(state: &AppState) -> Vec<SessionView> {
    let ttl = state.snapshot().settings.session_affinity_ttl_ms;
    let now = state.clock.now_ms();
    state
        .runtime
        .affinity
        .live(ttl, now)
        .into_iter()
        .map(|(key, pin)| SessionView {
            session: key.to_hex(),
            key_id: pin.key_id,
            connection: pin.connection,
            created_at: pin.created_ms,
            last_used_at: pin.last_ms,
            expires_at: pin.last_ms.saturating_add(ttl),
        })
        .collect()
}

/// A combo's last good connection (SPEC R19's `lkgp`): tried first while it serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct LastGoodView {
    pub combo: String,
    pub connection: String,
    /// Unix milliseconds of the request that set it.
    pub since: u64,
}

/// Every combo's last good connection, by combo.
pub fn last_good(state: &AppState) -> Vec<LastGoodView> {
    state
        .runtime
        .last_good
        .list()
        .into_iter()
        .map(|(combo, connection, since)| LastGoodView {
            combo,
            connection,
            since,
        })
        .collect()
}

/// Releases the pin of `session` (its hex key): the session's next request is routed
/// afresh.
pub fn release(state: &AppState, session: &str) -> Result<(), ApiError> {
    let not_found = || ApiError::NotFound {
        kind: "session",
        id: session.to_owned(),
    };
    let key = SessionKey::from_hex(session).ok_or_else(not_found)?;
    if state.runtime.affinity.release(&key) {
        tracing::info!(session = ?key, "Released a session pin.");
        Ok(())
    } else {
        Err(not_found())
    }
}
