//! `/api/logs` (admin) and `/api/monitoring/health` (public): thin handlers over
//! [`services::logs`] and [`services::system`].
//!
//! Both only read; nothing here writes the store or the configuration.

use crate::error::{ApiError, ApiQuery};
use crate::services;
use crate::services::logs::LogFilter;
use crate::services::system::Health;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;
use switchyard_store::LogRow;
use utoipa::IntoParams;

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
    let filter = LogFilter {
        limit: q.limit,
        key_id: q.key_id,
    };
    Ok(Json(services::logs::recent(&state, filter).await?))
}

#[utoipa::path(get, path = "/api/monitoring/health", tag = "monitoring",
    responses((status = 200, body = Health)))]
pub async fn health(State(state): State<Arc<AppState>>) -> Json<Health> {
    Json(services::system::health(&state))
}
