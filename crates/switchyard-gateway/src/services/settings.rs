//! Runtime settings with their effective value and its source.
//!
//! The list is read from the snapshot; a change goes through `apply_change` only and
//! takes effect with the snapshot it rebuilds. Nothing here touches the runtime state.

use super::{apply_change, check_consistency, upsert_setting};
use crate::error::ApiError;
use crate::state::AppState;
use serde::Serialize;
use serde_json::Value;
use switchyard_core::settings::{self, Source};
use utoipa::openapi::schema::{Object, SchemaType, Type};
use utoipa::ToSchema;

/// One setting as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SettingView {
    pub key: String,
    /// A boolean, a number or a string; URLs are shown without their password.
    #[schema(schema_with = setting_value)]
    pub value: settings::SettingValue,
    /// `default`, `file`, `env` or `database`.
    pub source: String,
    pub env: String,
    #[schema(schema_with = setting_value)]
    pub default: settings::SettingValue,
    /// The accepted values, in words.
    pub constraint: String,
    /// When a change takes effect: `live` (the next request or use), `new_connections`
    /// (client connections accepted after it) or `restart` (the value is stored now and
    /// read at the next start).
    #[schema(value_type = String)]
    pub applies: settings::Applies,
    pub doc: String,
}

/// The schema of a setting's value: a boolean, a number or a string.
fn setting_value() -> Object {
    Object::with_type(SchemaType::Array(vec![
        Type::Boolean,
        Type::Number,
        Type::String,
    ]))
}

/// Every setting, in force now.
pub fn list(state: &AppState) -> Vec<SettingView> {
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
            applies: r.def.applies,
            doc: r.def.doc.to_owned(),
        })
        .collect()
}

/// Validates `value` for `key` and stores it in the database layer; answers the list
/// in force afterwards.
pub async fn put(
    state: &AppState,
    key: String,
    value: &Value,
) -> Result<Vec<SettingView>, ApiError> {
    let value = settings::validate(&key, value, Source::Database)
        .map_err(|e| ApiError::bad_request("invalid_setting", e.to_string()))?;
    let t = state.clock.now_ms();
    let (preview_key, preview_value, base) =
        (key.clone(), value.to_json(), state.config.layers.clone());
    apply_change(
        state,
        move |rows| {
            upsert_setting(rows, &preview_key, preview_value);
            check_consistency(rows, &base)
        },
        move |s| s.put_setting(&key, &value.to_json(), t),
    )
    .await?;
    Ok(list(state))
}

/// Removes `key` from the database layer.
pub async fn delete(state: &AppState, key: String) -> Result<(), ApiError> {
    let (gone, base) = (key.clone(), state.config.layers.clone());
    apply_change(
        state,
        move |rows| {
            rows.settings.retain(|s| s.key != gone);
            check_consistency(rows, &base)
        },
        move |s| s.delete_setting(&key),
    )
    .await
}
