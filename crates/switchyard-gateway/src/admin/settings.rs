//! `/api/settings`: runtime settings with their effective value and its source.
//!
//! The list is read from the snapshot; a change goes through `apply_change` only and
//! takes effect with the snapshot it rebuilds.

use super::{apply_change, now};
use crate::error::{ApiError, ApiJson, ApiPath};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use switchyard_core::settings::{self, Source};
use utoipa::ToSchema;

/// One setting as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SettingView {
    pub key: String,
    /// A number or a string; URLs are shown without their password.
    #[schema(value_type = Object)]
    pub value: settings::SettingValue,
    /// `default`, `file`, `env` or `database`.
    pub source: String,
    pub env: String,
    #[schema(value_type = Object)]
    pub default: settings::SettingValue,
    /// The accepted values, in words.
    pub constraint: String,
    pub doc: String,
}

/// Body of `PUT /api/settings/{key}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingValue {
    pub value: Value,
}

fn views(state: &AppState) -> Vec<SettingView> {
    state
        .snapshot()
        .resolved
        .iter()
        .map(|r| SettingView {
            key: r.def.key.to_owned(),
            value: r.def.display(&r.value),
            source: match r.source {
                Source::Default => "default",
                Source::File => "file",
                Source::Env => "env",
                Source::Database => "database",
            }
            .to_owned(),
            env: r.def.env.to_owned(),
            default: r.def.default_value(),
            constraint: r.def.constraint(),
            doc: r.def.doc.to_owned(),
        })
        .collect()
}

#[utoipa::path(get, path = "/api/settings", tag = "settings",
    responses((status = 200, body = Vec<SettingView>)), security(("bearer" = [])))]
pub async fn list(State(state): State<Arc<AppState>>) -> Json<Vec<SettingView>> {
    Json(views(&state))
}

#[utoipa::path(put, path = "/api/settings/{key}", tag = "settings", params(("key" = String, Path)),
    request_body = SettingValue,
    responses((status = 200, body = Vec<SettingView>), (status = 400)), security(("bearer" = [])))]
pub async fn put(
    State(state): State<Arc<AppState>>,
    ApiPath(key): ApiPath<String>,
    ApiJson(body): ApiJson<SettingValue>,
) -> Result<Json<Vec<SettingView>>, ApiError> {
    let value = settings::validate(&key, &body.value, Source::Database)
        .map_err(|e| ApiError::bad_request("invalid_setting", e.to_string()))?;
    let t = now(&state);
    let (preview_key, preview_value, base) =
        (key.clone(), value.to_json(), state.config.layers.clone());
    apply_change(
        &state,
        move |rows| {
            super::upsert_by(
                &mut rows.settings,
                switchyard_store::SettingRecord {
                    key: preview_key.clone(),
                    value: preview_value,
                },
                |x| &x.key,
                &preview_key,
            );
            super::check_lockout(rows, &base)
        },
        move |s| s.put_setting(&key, &value.to_json(), t),
    )
    .await?;
    Ok(Json(views(&state)))
}

#[utoipa::path(delete, path = "/api/settings/{key}", tag = "settings", params(("key" = String, Path)),
    responses((status = 204), (status = 404)), security(("bearer" = [])))]
pub async fn delete(
    State(state): State<Arc<AppState>>,
    ApiPath(key): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let (gone, base) = (key.clone(), state.config.layers.clone());
    apply_change(
        &state,
        move |rows| {
            rows.settings.retain(|s| s.key != gone);
            super::check_lockout(rows, &base)
        },
        move |s| s.delete_setting(&key),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
