//! `/api/logs` (admin) and `/api/monitoring/health` (its status public, its detail for
//! the admin credential): thin handlers over
//! [`services::logs`] and [`services::system`].
//!
//! Both only read; nothing here writes the store or the configuration.

use crate::error::{ApiError, ApiQuery};
use crate::pipeline::auth;
use crate::services;
use crate::services::logs::{LogSearch, LogStats};
use crate::services::system::{HealthAnswer, Status};
use crate::state::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{AppendHeaders, IntoResponse};
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;
use switchyard_model::LogRow;
use utoipa::IntoParams;

/// The response header naming the cursor of the next (older) page of `/api/logs`.
const NEXT_BEFORE: &str = "x-next-before";

/// Rows `/api/logs` returns when the query names no `limit`.
const DEFAULT_LIMIT: u32 = 100;

/// Query of `/api/logs`: every present parameter narrows the rows. The unsigned
/// parameters say so in their format: utoipa would document them as signed.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// Rows to return, newest first (default 100, at most 1000).
    #[param(format = "uint32")]
    pub limit: Option<u32>,
    /// Only rows of this key.
    pub key_id: Option<String>,
    /// Only rows served (or last tried) by this provider.
    pub provider: Option<String>,
    /// Only rows whose requested or resolved model is this.
    pub model: Option<String>,
    /// Only rows with this status: `429` (exactly), `4xx` (a class, `1xx`–`5xx`) or
    /// `errors` (400 and above).
    pub status: Option<String>,
    /// Only rows at or after this time (Unix milliseconds).
    #[param(format = "uint64")]
    pub since: Option<u64>,
    /// Only rows at or before this time (Unix milliseconds).
    #[param(format = "uint64")]
    pub until: Option<u64>,
    /// Only rows older than this cursor: the previous page's `x-next-before` header.
    pub before: Option<i64>,
}

#[utoipa::path(get, path = "/api/logs", tag = "logs", params(LogQuery),
    responses(
        (status = 200, body = Vec<LogRow>, description = "The matching rows, newest first.",
            headers(("x-next-before" = i64,
                description = "The cursor of the next (older) page, to pass as `before`; \
                    absent on the last page."))),
        (status = 400, description = "A parameter is invalid (`status` `6xx`, `since` \
            after `until`, a non-number).")),
    security(("bearer" = [])))]
pub async fn logs(
    State(state): State<Arc<AppState>>,
    ApiQuery(q): ApiQuery<LogQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let search = LogSearch {
        key_id: q.key_id,
        provider: q.provider,
        model: q.model,
        status: q.status,
        since_ms: q.since,
        until_ms: q.until,
        before: q.before,
        limit: Some(q.limit.unwrap_or(DEFAULT_LIMIT)),
    };
    let page = services::logs::search(&state, search).await?;
    let next = page
        .next
        .map(|id| (NEXT_BEFORE, id.to_string()))
        .into_iter()
        .collect::<Vec<_>>();
    let rows: Vec<LogRow> = page.rows.into_iter().map(|(_, row)| row).collect();
    Ok((AppendHeaders(next), Json(rows)))
}

#[utoipa::path(get, path = "/api/logs/stats", tag = "logs",
    responses((status = 200, body = LogStats,
        description = "The request log's rows, oldest row and database size, and its retention.")),
    security(("bearer" = [])))]
pub async fn log_stats(State(state): State<Arc<AppState>>) -> Result<Json<LogStats>, ApiError> {
    Ok(Json(services::logs::stats(&state).await?))
}

/// The health status for anyone (a load balancer's probe), the detail for the admin
/// credential only: it names providers and connections. `503` while `down`.
#[utoipa::path(get, path = "/api/monitoring/health", tag = "monitoring",
    responses(
        (status = 200, body = HealthAnswer, description = "`ok` or `degraded`: the detail \
            with the admin credential, else only `{\"status\"}`."),
        (status = 503, body = HealthAnswer, description = "`down`: no configured provider can \
            serve; the detail with the admin credential, else only `{\"status\"}`.")))]
pub async fn health(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> (StatusCode, Json<HealthAnswer>) {
    let health = services::system::health(&state).await;
    let code = if health.status == "down" {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let answer = if auth::check_admin(&state.config, &headers).is_ok() {
        HealthAnswer::Detail(Box::new(health))
    } else {
        HealthAnswer::Status(Status {
            status: health.status,
        })
    };
    (code, Json(answer))
}
