//! `/api/settings`: thin handlers over [`services::settings`](crate::services::settings),
//! which reads and changes the settings.

use crate::error::{ApiError, ApiJson, ApiPath};
use crate::services::settings::{self, SettingView};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;
use utoipa::ToSchema;

/// Body of `PUT /api/settings/{key}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingValue {
    pub value: Value,
}

#[utoipa::path(get, path = "/api/settings", tag = "settings",
    responses((status = 200, body = Vec<SettingView>)), security(("bearer" = [])))]
pub async fn list(State(state): State<Arc<AppState>>) -> Json<Vec<SettingView>> {
    Json(settings::list(&state))
}

#[utoipa::path(put, path = "/api/settings/{key}", tag = "settings", params(("key" = String, Path)),
    request_body = SettingValue,
    responses((status = 200, body = Vec<SettingView>), (status = 400)), security(("bearer" = [])))]
pub async fn put(
    State(state): State<Arc<AppState>>,
    ApiPath(key): ApiPath<String>,
    ApiJson(body): ApiJson<SettingValue>,
) -> Result<Json<Vec<SettingView>>, ApiError> {
    Ok(Json(settings::put(&state, key, &body.value).await?))
}

#[utoipa::path(delete, path = "/api/settings/{key}", tag = "settings", params(("key" = String, Path)),
    responses((status = 204), (status = 404)), security(("bearer" = [])))]
pub async fn delete(
    State(state): State<Arc<AppState>>,
    ApiPath(key): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    settings::delete(&state, key).await?;
    Ok(StatusCode::NO_CONTENT)
}
