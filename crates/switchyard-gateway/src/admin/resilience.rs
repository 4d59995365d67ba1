//! `/api/resilience/...` (SPEC R6): connection cooldowns and terminal states, and the
//! breaker reset. Nothing here returns a credential.

use crate::error::{ApiError, ApiJson};
use crate::state::AppState;
use axum::extract::{Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use switchyard_core::resilience::cooldown::ErrorType;
use utoipa::{IntoParams, ToSchema};

/// One connection's resilience state.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionState {
    pub connection_id: String,
    pub provider: String,
    pub auth_class: &'static str,
    /// `active`, `cooling`, or a terminal state (`banned`, `expired`,
    /// `credits_exhausted`).
    pub state: &'static str,
    pub remaining_ms: u64,
    pub backoff_level: u32,
    #[schema(value_type = Option<String>)]
    pub last_error_type: Option<ErrorType>,
    pub last_error: Option<String>,
    pub error_code: Option<u16>,
}

/// Filter of the cooldown list.
#[derive(Debug, Deserialize, IntoParams)]
pub struct CooldownQuery {
    /// Only this provider's connections.
    pub provider: Option<String>,
}

#[utoipa::path(get, path = "/api/resilience/cooldowns", tag = "resilience", params(CooldownQuery),
    responses((status = 200, body = Vec<ConnectionState>)), security(("bearer" = [])))]
pub async fn list_cooldowns(
    State(state): State<Arc<AppState>>,
    Query(q): Query<CooldownQuery>,
) -> Json<Vec<ConnectionState>> {
    let snap = state.snapshot();
    let now = state.clock.now_ms();
    let list = snap
        .catalog
        .connections()
        .iter()
        .filter(|c| q.provider.as_deref().is_none_or(|p| p == c.provider))
        .map(|c| {
            let h = state.resilience.health_of(&c.id);
            let status = match h.terminal {
                Some(t) => t.as_str(),
                None if !h.usable(now) => "cooling",
                None => "active",
            };
            ConnectionState {
                connection_id: c.id.clone(),
                provider: c.provider.clone(),
                auth_class: c.auth_class.as_str(),
                state: status,
                remaining_ms: h.remaining_ms(now),
                backoff_level: h.backoff_level,
                last_error_type: h.last_error_type,
                last_error: h.last_error,
                error_code: h.error_code,
            }
        })
        .collect();
    Json(list)
}

/// Body of `POST /api/resilience/cooldowns`: the connections to clear, or all of them
/// (of one provider).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClearBody {
    #[serde(default)]
    pub connection_ids: Vec<String>,
    #[serde(default)]
    pub all: bool,
    pub provider: Option<String>,
}

/// What a clear did.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClearResult {
    pub cleared: usize,
    pub unchanged: usize,
    pub skipped_terminal: usize,
    pub lockouts_cleared: usize,
}

#[utoipa::path(post, path = "/api/resilience/cooldowns", tag = "resilience", request_body = ClearBody,
    responses((status = 200, body = ClearResult), (status = 400)), security(("bearer" = [])))]
pub async fn clear_cooldowns(
    State(state): State<Arc<AppState>>,
    ApiJson(body): ApiJson<ClearBody>,
) -> Result<Json<ClearResult>, ApiError> {
    let snap = state.snapshot();
    let ids: Vec<String> = if body.all {
        snap.catalog
            .connections()
            .iter()
            .filter(|c| body.provider.as_deref().is_none_or(|p| p == c.provider))
            .map(|c| c.id.clone())
            .collect()
    } else {
        if body.connection_ids.is_empty() {
            return Err(ApiError::InvalidField {
                field: "connectionIds".to_owned(),
                message: "connectionIds: list the connections, or set all: true".to_owned(),
            });
        }
        if let Some(bad) = body
            .connection_ids
            .iter()
            .find(|c| snap.catalog.connection(c).is_none())
        {
            return Err(ApiError::InvalidField {
                field: "connectionIds".to_owned(),
                message: format!("connectionIds: unknown connection `{bad}`"),
            });
        }
        body.connection_ids
    };
    let (cleared, unchanged, skipped_terminal) = state.resilience.clear_cooldowns(&ids);
    tracing::info!(
        cleared,
        unchanged,
        skipped_terminal,
        "Operator cleared connection cooldowns."
    );
    Ok(Json(ClearResult {
        cleared,
        unchanged,
        skipped_terminal,
        lockouts_cleared: 0,
    }))
}

/// Body of `POST /api/resilience/reset`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResetBody {
    /// Reset only this provider's breaker; absent = every breaker.
    pub provider: Option<String>,
    /// Also reset these connections completely, terminal states included.
    #[serde(default)]
    pub connection_ids: Vec<String>,
}

/// What a reset did.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResetResult {
    pub breakers_reset: usize,
    pub connections_reset: usize,
}

#[utoipa::path(post, path = "/api/resilience/reset", tag = "resilience", request_body = ResetBody,
    responses((status = 200, body = ResetResult), (status = 400)), security(("bearer" = [])))]
pub async fn reset(
    State(state): State<Arc<AppState>>,
    ApiJson(body): ApiJson<ResetBody>,
) -> Result<Json<ResetResult>, ApiError> {
    let snap = state.snapshot();
    if let Some(p) = &body.provider {
        if snap.catalog.provider(p).is_none() {
            return Err(ApiError::InvalidField {
                field: "provider".to_owned(),
                message: format!("provider: unknown provider `{p}`"),
            });
        }
    }
    if let Some(bad) = body
        .connection_ids
        .iter()
        .find(|c| snap.catalog.connection(c).is_none())
    {
        return Err(ApiError::InvalidField {
            field: "connectionIds".to_owned(),
            message: format!("connectionIds: unknown connection `{bad}`"),
        });
    }
    let breakers_reset = state.resilience.reset_breakers(body.provider.as_deref());
    for c in &body.connection_ids {
        state.resilience.reset_connection(c);
    }
    tracing::info!(
        breakers_reset,
        connections_reset = body.connection_ids.len(),
        "Operator reset resilience state."
    );
    Ok(Json(ResetResult {
        breakers_reset,
        connections_reset: body.connection_ids.len(),
    }))
}
