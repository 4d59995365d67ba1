//! `/api/logs` (admin) and `/api/monitoring/health` (public).
//!
//! Both only read: logs from the store, health from the snapshot and the runtime state;
//! nothing here writes the store or the configuration.

use crate::error::{ApiError, ApiQuery};
use crate::runtime::quota::StoreStatus;
use crate::state::{blocking, AppState};
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use switchyard_core::domain::AuthClass;
use switchyard_store::LogRow;
use utoipa::{IntoParams, ToSchema};

/// Most rows one log query returns.
const MAX_LOG_ROWS: u32 = 1000;

#[derive(Debug, Deserialize, IntoParams)]
pub struct LogQuery {
    /// Rows to return, newest first (default 100, at most 1000).
    pub limit: Option<u32>,
    /// Only rows of this key.
    pub key_id: Option<String>,
}

#[utoipa::path(get, path = "/api/logs", tag = "logs", params(LogQuery),
    responses((status = 200, body = Vec<LogRow>)), security(("bearer" = [])))]
pub async fn logs(
    State(state): State<Arc<AppState>>,
    ApiQuery(q): ApiQuery<LogQuery>,
) -> Result<Json<Vec<LogRow>>, ApiError> {
    let limit = q.limit.unwrap_or(100).clamp(1, MAX_LOG_ROWS);
    Ok(Json(
        blocking(&state.store, move |s| {
            s.recent_logs(limit, q.key_id.as_deref())
        })
        .await?,
    ))
}

/// Health summary.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`, or `degraded` when the quota store is not the one asked for or is failing.
    pub status: &'static str,
    pub version: &'static str,
    pub uptime_ms: u64,
    pub config_version: i64,
    pub providers: usize,
    pub connections: usize,
    pub connections_enabled: usize,
    pub combos: usize,
    pub quota_pools: usize,
    /// Where quota counters live now: `sqlite` or `redis`.
    pub quota_store: &'static str,
    /// The quota store in detail: what was asked for, whether it works, and why.
    pub quota_store_status: StoreStatus,
    /// Provider circuit breakers that have seen failures.
    pub breakers: Vec<BreakerView>,
}

/// One provider's circuit breaker.
#[derive(Debug, Serialize, ToSchema)]
pub struct BreakerView {
    pub provider: String,
    /// `CLOSED`, `DEGRADED`, `OPEN` or `HALF_OPEN`.
    pub state: &'static str,
    pub failures: u32,
}

#[utoipa::path(get, path = "/api/monitoring/health", tag = "monitoring",
    responses((status = 200, body = Health)))]
pub async fn health(State(state): State<Arc<AppState>>) -> Json<Health> {
    let snap = state.snapshot();
    let conns = snap.catalog.connections();
    let quota_store = state.runtime.quota.store_status();
    Json(Health {
        // Redis asked for but not in use, or failing: several replicas no longer share
        // their counters, or requests go unmetered.
        status: if quota_store.state == "ok" {
            "ok"
        } else {
            "degraded"
        },
        version: env!("CARGO_PKG_VERSION"),
        uptime_ms: state.clock.now_ms().saturating_sub(state.started_at_ms),
        config_version: snap.version,
        providers: snap.catalog.providers().count(),
        connections: conns.len(),
        connections_enabled: conns.iter().filter(|c| c.enabled).count(),
        combos: snap.catalog.combos().count(),
        quota_pools: snap.quota.pools.len(),
        quota_store: quota_store.driver,
        quota_store_status: quota_store,
        breakers: state
            .runtime
            .resilience
            .breakers(
                |p| {
                    snap.catalog
                        .provider_connections(p)
                        .next()
                        .map_or(AuthClass::Apikey, |c| c.auth_class)
                },
                state.clock.now_ms(),
            )
            .into_iter()
            .map(|(provider, s, failures)| BreakerView {
                provider,
                state: s.as_str(),
                failures,
            })
            .collect(),
    })
}
