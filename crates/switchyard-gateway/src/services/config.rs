//! Providers, connections and combos: list, get, save (create or update), delete.
//!
//! Writes go through `apply_change` only, so each is validated by the snapshot it would
//! build and reloads it. Connection credentials are write-only: accepted by
//! [`save_connection`], never returned (`has_credential` says whether one is stored).

use super::{apply_change, upsert_by};
use crate::config::ConnectionSpec;
use crate::error::ApiError;
use crate::state::{blocking, AppState};
use switchyard_store::{ComboRecord, ConnectionRecord, ProviderRecord, SaveMode};

// ---- providers ----

/// Every provider.
pub async fn providers(state: &AppState) -> Result<Vec<ProviderRecord>, ApiError> {
    Ok(blocking(&state.store, |s| s.list_providers()).await?)
}

/// One provider.
pub async fn provider(state: &AppState, id: String) -> Result<ProviderRecord, ApiError> {
    Ok(blocking(&state.store, move |s| s.get_provider(&id)).await?)
}

/// Creates or replaces a provider, as `mode` says.
pub async fn save_provider(
    state: &AppState,
    p: ProviderRecord,
    mode: SaveMode,
) -> Result<ProviderRecord, ApiError> {
    let (rec, t) = (p.clone(), state.clock.now_ms());
    apply_change(
        state,
        |rows| {
            upsert_by(&mut rows.providers, p.clone(), |x| &x.id, &p.id);
            Ok(())
        },
        move |s| s.save_provider(&rec, mode, t),
    )
    .await?;
    Ok(p)
}

/// Deletes a provider.
pub async fn delete_provider(state: &AppState, id: String) -> Result<(), ApiError> {
    apply_change(state, |_| Ok(()), move |s| s.delete_provider(&id)).await
}

// ---- connections ----

/// Every connection, without credentials.
pub async fn connections(state: &AppState) -> Result<Vec<ConnectionRecord>, ApiError> {
    Ok(blocking(&state.store, |s| s.list_connections()).await?)
}

/// One connection, without its credential.
pub async fn connection(state: &AppState, id: String) -> Result<ConnectionRecord, ApiError> {
    Ok(blocking(&state.store, move |s| s.get_connection(&id)).await?)
}

/// Creates or replaces a connection, as `mode` says; a stored credential is kept when
/// none is sent, and a new one ends the connection's terminal state and cooldown.
pub async fn save_connection(
    state: &AppState,
    input: ConnectionSpec,
    mode: SaveMode,
) -> Result<ConnectionRecord, ApiError> {
    if input.credential_env.is_some() {
        return Err(ApiError::bad_request(
            "invalid_config",
            "credential_env: accepted only in the config file; send `credential`",
        ));
    }
    let record = input
        .record()
        .map_err(|m| ApiError::bad_request("invalid_config", m))?;
    let credential = input.credential;
    let new_credential = credential.is_some();
    let (rec, t) = (record.clone(), state.clock.now_ms());
    let cred = credential.clone();
    apply_change(
        state,
        |rows| {
            if !rows.providers.iter().any(|p| p.id == record.provider) {
                return Err(ApiError::bad_request(
                    "invalid_config",
                    format!("provider: unknown provider `{}`", record.provider),
                ));
            }
            let kept = rows
                .connections
                .iter()
                .find(|(c, _)| c.id == record.id)
                .map(|(_, cred)| cred.clone());
            let cred = credential.or(kept).unwrap_or_default();
            upsert_by(
                &mut rows.connections,
                (record.clone(), cred),
                |x| &x.0.id,
                &record.id,
            );
            Ok(())
        },
        move |s| s.save_connection(&rec, cred.as_ref(), mode, t),
    )
    .await?;
    if new_credential {
        // A new credential ends a terminal state and any cooldown (SPEC R4).
        state.runtime.resilience.reset_connection(&record.id);
    }
    let id = record.id.clone();
    let saved = blocking(&state.store, move |s| s.get_connection(&id)).await?;
    if mode == SaveMode::Create {
        tracing::info!(connection_id = %saved.id, provider = %saved.provider, "Created connection.");
    }
    Ok(saved)
}

/// Deletes a connection.
pub async fn delete_connection(state: &AppState, id: String) -> Result<(), ApiError> {
    apply_change(state, |_| Ok(()), move |s| s.delete_connection(&id)).await
}

// ---- combos ----

/// Every combo.
pub async fn combos(state: &AppState) -> Result<Vec<ComboRecord>, ApiError> {
    Ok(blocking(&state.store, |s| s.list_combos()).await?)
}

/// One combo.
pub async fn combo(state: &AppState, name: String) -> Result<ComboRecord, ApiError> {
    Ok(blocking(&state.store, move |s| s.get_combo(&name)).await?)
}

/// Creates or replaces a combo, as `mode` says.
pub async fn save_combo(
    state: &AppState,
    c: ComboRecord,
    mode: SaveMode,
) -> Result<ComboRecord, ApiError> {
    let (rec, t) = (c.clone(), state.clock.now_ms());
    apply_change(
        state,
        |rows| {
            upsert_by(&mut rows.combos, c.clone(), |x| &x.name, &c.name);
            Ok(())
        },
        move |s| s.save_combo(&rec, mode, t),
    )
    .await?;
    Ok(c)
}

/// Deletes a combo.
pub async fn delete_combo(state: &AppState, name: String) -> Result<(), ApiError> {
    apply_change(state, |_| Ok(()), move |s| s.delete_combo(&name)).await
}
