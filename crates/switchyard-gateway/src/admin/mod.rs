//! The management API (SPEC G8) under `/api`, behind admin auth.
//!
//! Handlers are thin: extract, call, map. Every configuration change goes through
//! `apply_change`: the change is applied to the current rows in memory, the resulting
//! configuration is validated by building a snapshot from it, and only then written and
//! swapped into the live snapshot. An invalid change therefore answers 400 naming the
//! problem and writes nothing.

mod config;
mod keys;
mod quota;
mod resilience;
mod settings;
pub mod system;

use crate::error::ApiError;
use crate::runtime::quota::index::QuotaConfigError;
use crate::snapshot::{Snapshot, SnapshotError};
use crate::state::{blocking, load_rows, AppState};
use std::sync::Arc;
use switchyard_store::{ConfigRows, Store};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The admin-only routes.
pub fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(keys::list, keys::create))
        .routes(routes!(keys::get, keys::update, keys::delete))
        .routes(routes!(keys::revoke))
        .routes(routes!(config::list_providers, config::create_provider))
        .routes(routes!(
            config::get_provider,
            config::update_provider,
            config::delete_provider
        ))
        .routes(routes!(config::list_connections, config::create_connection))
        .routes(routes!(
            config::get_connection,
            config::update_connection,
            config::delete_connection
        ))
        .routes(routes!(config::list_combos, config::create_combo))
        .routes(routes!(
            config::get_combo,
            config::update_combo,
            config::delete_combo
        ))
        .routes(routes!(settings::list))
        .routes(routes!(settings::put, settings::delete))
        .routes(routes!(system::logs))
        .routes(routes!(quota::list_pools, quota::create_pool))
        .routes(routes!(
            quota::get_pool,
            quota::update_pool,
            quota::delete_pool
        ))
        .routes(routes!(quota::pool_usage))
        .routes(routes!(quota::pool_decisions))
        .routes(routes!(
            quota::get_plan,
            quota::put_plan,
            quota::delete_plan
        ))
        .routes(routes!(quota::import_pools))
        .routes(routes!(quota::export_pools))
        .routes(routes!(
            resilience::list_cooldowns,
            resilience::clear_cooldowns
        ))
        .routes(routes!(resilience::reset))
        .routes(routes!(
            resilience::list_model_locks,
            resilience::re_enable_model
        ))
        .routes(routes!(
            resilience::get_settings,
            resilience::patch_settings
        ))
}

/// Validates and applies a configuration change; see the module docs.
pub(crate) async fn apply_change<T: Send + 'static>(
    state: &AppState,
    preview: impl FnOnce(&mut ConfigRows) -> Result<(), ApiError>,
    write: impl FnOnce(&Store) -> switchyard_store::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    let _guard = state.admin_lock.lock().await;
    let mut rows = load_rows(&state.store).await?;
    preview(&mut rows)?;
    Snapshot::build(&rows, &state.config.layers, &state.telemetry.metrics).map_err(
        |e| match &e {
            SnapshotError::Quota(QuotaConfigError::Pool { error, .. }) => ApiError::InvalidField {
                field: error.field.clone(),
                message: e.to_string(),
            },
            _ => ApiError::bad_request("invalid_config", e.to_string()),
        },
    )?;
    let out = blocking(&state.store, write).await?;
    state.reload().await?;
    Ok(out)
}

/// Rejects settings that would leave the model-lockout settings inconsistent (maximum
/// below base): resolution would otherwise quietly fall back to the defaults.
pub(crate) fn check_lockout(
    rows: &ConfigRows,
    base: &switchyard_core::settings::Layers,
) -> Result<(), ApiError> {
    use switchyard_core::settings::{resolve, Layers, SettingError};
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
        SettingError::Invalid { key, got, .. } if key == "resilience.modelLockout" => Some(got),
        _ => None,
    }) {
        Some(problem) => Err(ApiError::InvalidField {
            field: "modelLockout".to_owned(),
            message: format!("modelLockout: {problem}"),
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

/// The current time from the state's clock.
pub(crate) fn now(state: &Arc<AppState>) -> u64 {
    state.clock.now_ms()
}
