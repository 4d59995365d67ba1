//! The management operations the JSON management API (`admin`) and the dashboard both
//! call: one module per area, plain functions over the parts of the state they use,
//! returning typed results or [`ApiError`]. Nothing here knows HTTP: no extractors, no
//! `Json`, no status codes; the callers render.
//!
//! Every configuration change goes through `apply_change`: inside one database
//! transaction, the change is applied to the current rows in memory, the resulting configuration is validated by building a
//! snapshot from it, and only then written and swapped into the live snapshot. An
//! invalid change therefore fails naming the problem and writes nothing. This module
//! must not touch the request pipeline or the upstream client; an operator's OAuth
//! token refresh goes through `crate::oauth`, which owns the token endpoint's call.
//!
//! The records and views the operations take and return are [`model`]'s (the
//! `switchyard-model` crate, re-exported here), so a caller such as the dashboard sees
//! them without depending on the store that persists them.

pub mod config;
pub mod dashboard;
pub mod keys;
pub mod leases;
pub mod logs;
pub mod oauth;
pub mod quota;
pub mod resilience;
pub mod sessions;
pub mod settings;
pub mod system;

pub use switchyard_model as model;

use crate::error::ApiError;
use crate::runtime::quota::index::QuotaConfigError;
use crate::snapshot::{Snapshot, SnapshotError};
use crate::state::AppState;
use std::sync::Arc;
use switchyard_model::ConfigRows;
use switchyard_store::{Batch, StoreError};

/// Validates and applies a configuration change; see the module docs.
///
/// One database transaction holds the whole change: it reads the configuration as it
/// stands, hands it here to `preview` and the validation (which run on this task, off
/// the blocking pool, and may borrow), and only when both pass runs `write` and commits
/// with the version bumped. The database serialises changes, across processes and
/// replicas alike, so nothing can slip in between the check and the write; no lock of
/// this process is involved.
pub(crate) async fn apply_change<T: Send + 'static>(
    state: &AppState,
    preview: impl FnOnce(&mut ConfigRows) -> Result<(), ApiError>,
    write: impl FnOnce(&Batch<'_>) -> switchyard_store::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    let (rows_tx, rows_rx) = tokio::sync::oneshot::channel::<ConfigRows>();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<bool>();
    let store = Arc::clone(&state.store);
    let task = tokio::task::spawn_blocking(move || {
        store.transact(|batch, rows| {
            rows_tx.send(rows).map_err(|_| StoreError::Abandoned)?;
            // The check runs on the caller's task; a caller gone is a rollback.
            if go_rx.blocking_recv() != Ok(true) {
                return Err(StoreError::Abandoned);
            }
            write(batch)
        })
    });
    let checked = match rows_rx.await {
        Ok(mut rows) => preview(&mut rows).and_then(|()| validate(state, &rows)),
        // The transaction failed before it read anything: its error says why.
        Err(_) => Ok(()),
    };
    // Only fails when the transaction is already over, with its own error.
    let _ = go_tx.send(checked.is_ok());
    let written = task
        .await
        .map_err(|e| ApiError::Internal(format!("a store task failed: {e}")))?;
    checked?;
    let out = written?;
    state.reload().await?;
    Ok(out)
}

/// The change's configuration must build a snapshot; the error names the problem.
fn validate(state: &AppState, rows: &ConfigRows) -> Result<(), ApiError> {
    Snapshot::build(rows, &state.config.layers, &state.telemetry.metrics).map_err(
        |e| match &e {
            SnapshotError::Quota(QuotaConfigError::Pool { error, .. }) => ApiError::InvalidField {
                field: error.field.clone(),
                message: e.to_string(),
            },
            _ => ApiError::bad_request("invalid_config", e.to_string()),
        },
    )?;
    Ok(())
}

/// Refuses to delete the `kind` `id` while an alias `uses` it (409, naming the aliases):
/// the aliases are edited first.
pub(crate) fn unused_by_aliases(
    rows: &ConfigRows,
    kind: &'static str,
    id: &str,
    uses: impl Fn(&switchyard_model::AliasRecord) -> bool,
) -> Result<(), ApiError> {
    let users: Vec<&str> = rows
        .aliases
        .iter()
        .filter(|a| uses(a))
        .map(|a| a.pattern.as_str())
        .collect();
    if users.is_empty() {
        return Ok(());
    }
    Err(switchyard_store::StoreError::InUse {
        kind,
        id: id.to_owned(),
        used_by: format!("aliases {}", users.join(", ")),
    }
    .into())
}

/// Rejects settings that would not hold together (the model-lockout maximum below its
/// base, a breaker degrading after it opens): resolution would otherwise quietly fall
/// back to the defaults. The error names the field.
pub(crate) fn check_consistency(
    rows: &ConfigRows,
    base: &switchyard_core::settings::Layers,
) -> Result<(), ApiError> {
    use switchyard_core::settings::{resolve, Layers, SettingError, COMBINED};
    let layers = Layers {
        database: rows
            .settings
            .iter()
            .map(|s| (s.key.clone(), s.value.clone()))
            .collect(),
        ..base.clone()
    };
    let Ok(r) = resolve(&layers) else {
        return Ok(());
    };
    match r.ignored.iter().find_map(|e| match e {
        SettingError::Invalid {
            key, origin, got, ..
        } if *origin == COMBINED => Some((key, got)),
        _ => None,
    }) {
        Some((key, problem)) if key == "resilience.modelLockout" => Err(ApiError::InvalidField {
            field: "modelLockout".to_owned(),
            message: format!("modelLockout: {problem}"),
        }),
        Some((key, problem)) => Err(ApiError::InvalidField {
            field: key.clone(),
            message: problem.clone(),
        }),
        None => Ok(()),
    }
}

/// Replaces the element of `list` whose key is `id`, or appends it.
pub(crate) fn upsert_by<T>(list: &mut Vec<T>, item: T, key: impl Fn(&T) -> &str, id: &str) {
    match list.iter().position(|x| key(x) == id) {
        Some(i) => list[i] = item,
        None => list.push(item),
    }
}

/// Stores `value` under `key` in the settings rows, as a write would.
pub(crate) fn upsert_setting(rows: &mut ConfigRows, key: &str, value: serde_json::Value) {
    upsert_by(
        &mut rows.settings,
        switchyard_model::SettingRecord {
            key: key.to_owned(),
            value,
        },
        |x| &x.key,
        key,
    );
}
