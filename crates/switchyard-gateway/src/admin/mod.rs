//! The management API (SPEC G8) under `/api`, behind admin auth.
//!
//! Handlers are thin: extract, call the operation in [`crate::services`], wrap the
//! result in JSON and a status code. They hold no logic of their own beyond matching a
//! path id against the body's; validation, writes and reloads are the services', so an
//! invalid configuration change answers 400 naming the problem and writes nothing.

mod config;
mod keys;
mod leases;
mod oauth;
pub mod openapi;
mod quota;
mod resilience;
mod sessions;
mod settings;
pub mod system;

use crate::state::AppState;
use std::sync::Arc;
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
        .routes(routes!(config::list_aliases, config::put_aliases))
        .routes(routes!(oauth::list))
        .routes(routes!(oauth::import))
        .routes(routes!(oauth::refresh))
        .routes(routes!(settings::list))
        .routes(routes!(settings::put, settings::delete))
        .routes(routes!(system::logs))
        .routes(routes!(system::log_stats))
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
        .routes(routes!(resilience::list_error_rules))
        .routes(routes!(resilience::list_egress))
        .routes(routes!(sessions::list))
        .routes(routes!(sessions::release))
        .routes(routes!(sessions::last_good))
        .routes(routes!(leases::list))
        .routes(routes!(leases::release))
}
