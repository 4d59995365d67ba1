//! The dashboard's sign-ins (SPEC O6: any replica serves a signed-in browser): its
//! sessions and one-time sign-in links, kept in the store. Callers hand in hashes, never
//! the secrets: a session is kept under the SHA-256 of its id, a link under the SHA-256
//! of its token. Each call is one store transaction on the blocking pool.

use crate::error::ApiError;
use crate::state::{blocking, AppState};
use switchyard_model::SessionRow;

/// Keeps a new session (its id's hash, CSRF token and credential hash) until
/// `expires_at`, with at most `max` sessions held: expired sessions are dropped first,
/// then those closest to expiry.
pub async fn open_session(
    state: &AppState,
    id_hash: String,
    csrf: String,
    credential: String,
    expires_at: u64,
    now: u64,
    max: usize,
) -> Result<(), ApiError> {
    Ok(blocking(&state.store, move |s| {
        s.open_session(&id_hash, &csrf, &credential, expires_at, now, max)
    })
    .await?)
}

/// The session kept under `id_hash`, if it is live at `now`; with `take_notice` its
/// notice is handed out and cleared in the same transaction.
pub async fn session(
    state: &AppState,
    id_hash: String,
    now: u64,
    take_notice: bool,
) -> Result<Option<SessionRow>, ApiError> {
    Ok(blocking(&state.store, move |s| s.session(&id_hash, now, take_notice)).await?)
}

/// Leaves `notice` for the next page of the session kept under `id_hash`.
pub async fn set_session_notice(
    state: &AppState,
    id_hash: String,
    notice: String,
) -> Result<(), ApiError> {
    Ok(blocking(&state.store, move |s| {
        s.set_session_notice(&id_hash, &notice)
    })
    .await?)
}

/// Ends the session kept under `id_hash`.
pub async fn end_session(state: &AppState, id_hash: String) -> Result<(), ApiError> {
    Ok(blocking(&state.store, move |s| s.end_session(&id_hash)).await?)
}

/// Keeps a one-time link's token hash until `expires_at`, with at most `max` links
/// held.
pub async fn mint_link(
    state: &AppState,
    token_hash: String,
    expires_at: u64,
    now: u64,
    max: usize,
) -> Result<(), ApiError> {
    Ok(blocking(&state.store, move |s| {
        s.mint_link(&token_hash, expires_at, now, max)
    })
    .await?)
}

/// Whether the link kept under `token_hash` is live at `now`; it is used up either way.
pub async fn consume_link(
    state: &AppState,
    token_hash: String,
    now: u64,
) -> Result<bool, ApiError> {
    Ok(blocking(&state.store, move |s| s.consume_link(&token_hash, now)).await?)
}
