//! Client API keys: list, create, update, revoke, delete. The secret comes back once,
//! from [`create`], and never again; nothing here reads or returns a stored secret.
//! Writes go through `apply_change` only.

use super::{apply_change, upsert_by};
use crate::error::ApiError;
use crate::keys::{new_key, validate_key_fields, NewKey};
use crate::state::{blocking, AppState};
use secrecy::SecretString;
use switchyard_model::{ConfigRows, KeyRecord, SaveMode};

/// A change to a key: present fields replace; `Some(None)` clears a restriction.
#[derive(Debug, Default)]
pub struct KeyChange {
    pub name: Option<String>,
    pub scopes: Option<Vec<String>>,
    pub allowed_connections: Option<Option<Vec<String>>>,
    pub allowed_models: Option<Option<Vec<String>>>,
}

fn check_connections(rows: &ConfigRows, list: Option<&Vec<String>>) -> Result<(), ApiError> {
    for c in list.into_iter().flatten() {
        if !rows.connections.iter().any(|(r, _)| &r.id == c) {
            return Err(ApiError::bad_request(
                "invalid_key",
                format!("allowed_connections: unknown connection `{c}`"),
            ));
        }
    }
    Ok(())
}

/// Every key.
pub async fn list(state: &AppState) -> Result<Vec<KeyRecord>, ApiError> {
    Ok(blocking(&state.store, |s| s.list_keys()).await?)
}

/// One key.
pub async fn get(state: &AppState, id: String) -> Result<KeyRecord, ApiError> {
    Ok(blocking(&state.store, move |s| s.get_key(&id)).await?)
}

/// Creates a key; answers its record and its secret, shown this once.
pub async fn create(
    state: &AppState,
    input: NewKey,
) -> Result<(KeyRecord, SecretString), ApiError> {
    let (record, secret) = new_key(input, state.clock.now_ms())
        .map_err(|m| ApiError::bad_request("invalid_key", m))?;
    let rec = record.clone();
    apply_change(
        state,
        |rows| {
            check_connections(rows, record.allowed_connections.as_ref())?;
            rows.keys.push(record.clone());
            Ok(())
        },
        move |s| s.save_key(&rec, SaveMode::Create),
    )
    .await?;
    tracing::info!(key_id = %record.id, name = %record.name, "Created API key.");
    Ok((record, secret))
}

/// Applies `change` to the key `id`.
pub async fn update(
    state: &AppState,
    id: String,
    change: KeyChange,
) -> Result<KeyRecord, ApiError> {
    let lookup = id.clone();
    let mut record = blocking(&state.store, move |s| s.get_key(&lookup)).await?;
    if let Some(n) = change.name {
        record.name = n;
    }
    if let Some(s) = change.scopes {
        record.scopes = s;
    }
    if let Some(c) = change.allowed_connections {
        record.allowed_connections = c;
    }
    if let Some(m) = change.allowed_models {
        record.allowed_models = m;
    }
    validate_key_fields(&record.name, &record.scopes)
        .map_err(|m| ApiError::bad_request("invalid_key", m))?;
    let rec = record.clone();
    apply_change(
        state,
        |rows| {
            check_connections(rows, record.allowed_connections.as_ref())?;
            upsert_by(&mut rows.keys, record.clone(), |k| &k.id, &id);
            Ok(())
        },
        move |s| s.save_key(&rec, SaveMode::Update),
    )
    .await?;
    Ok(record)
}

/// Revokes the key `id`; answers its record.
pub async fn revoke(state: &AppState, id: String) -> Result<KeyRecord, ApiError> {
    let t = state.clock.now_ms();
    let record = apply_change(state, |_| Ok(()), move |s| s.revoke_key(&id, t)).await?;
    tracing::info!(key_id = %record.id, "Revoked API key.");
    Ok(record)
}

/// Deletes the key `id`.
pub async fn delete(state: &AppState, id: String) -> Result<(), ApiError> {
    let gone = id.clone();
    apply_change(
        state,
        |rows| super::unused_by_aliases(rows, "key", &gone, |a| a.keys.contains(&gone)),
        move |s| s.delete_key(&id),
    )
    .await
}
