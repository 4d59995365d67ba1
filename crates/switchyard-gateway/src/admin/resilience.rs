//! `/api/resilience/...` (SPEC R6): thin handlers over
//! [`services::resilience`](crate::services::resilience) for connection cooldowns and
//! terminal states, model locks, the breaker reset and the resilience settings. Nothing
//! here returns a credential.

use crate::error::{ApiError, ApiJson, ApiQuery};
use crate::services::resilience::{
    self as svc, ClearResult, ClearTarget, ConnectionState, EgressBucketView, ErrorRulesView,
    ModelLockView, ReEnableResult, ResetResult, ResilienceView,
};
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;
use utoipa::{IntoParams, ToSchema};

/// Filter of the cooldown list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CooldownQuery {
    /// Only this provider's connections.
    pub provider: Option<String>,
}

#[utoipa::path(get, path = "/api/resilience/cooldowns", tag = "resilience", params(CooldownQuery),
    responses((status = 200, body = Vec<ConnectionState>)), security(("bearer" = [])))]
pub async fn list_cooldowns(
    State(state): State<Arc<AppState>>,
    ApiQuery(q): ApiQuery<CooldownQuery>,
) -> Json<Vec<ConnectionState>> {
    Json(svc::cooldowns(&state, q.provider.as_deref()))
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

#[utoipa::path(post, path = "/api/resilience/cooldowns", tag = "resilience", request_body = ClearBody,
    responses((status = 200, body = ClearResult), (status = 400)), security(("bearer" = [])))]
pub async fn clear_cooldowns(
    State(state): State<Arc<AppState>>,
    ApiJson(body): ApiJson<ClearBody>,
) -> Result<Json<ClearResult>, ApiError> {
    let target = if body.all {
        ClearTarget::All {
            provider: body.provider,
        }
    } else {
        ClearTarget::Connections(body.connection_ids)
    };
    Ok(Json(svc::clear_cooldowns(&state, target)?))
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

#[utoipa::path(post, path = "/api/resilience/reset", tag = "resilience", request_body = ResetBody,
    responses((status = 200, body = ResetResult), (status = 400)), security(("bearer" = [])))]
pub async fn reset(
    State(state): State<Arc<AppState>>,
    ApiJson(body): ApiJson<ResetBody>,
) -> Result<Json<ResetResult>, ApiError> {
    Ok(Json(svc::reset(
        &state,
        body.provider.as_deref(),
        &body.connection_ids,
    )?))
}

#[utoipa::path(get, path = "/api/resilience/model-cooldowns", tag = "resilience",
    responses((status = 200, body = Vec<ModelLockView>)), security(("bearer" = [])))]
pub async fn list_model_locks(State(state): State<Arc<AppState>>) -> Json<Vec<ModelLockView>> {
    Json(svc::model_locks(&state))
}

/// Body of `DELETE /api/resilience/model-cooldowns`: re-enable a model on a connection.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReEnableBody {
    pub provider: String,
    pub connection: String,
    pub model: String,
}

#[utoipa::path(delete, path = "/api/resilience/model-cooldowns", tag = "resilience",
    request_body = ReEnableBody,
    responses((status = 200, body = ReEnableResult), (status = 400)), security(("bearer" = [])))]
pub async fn re_enable_model(
    State(state): State<Arc<AppState>>,
    ApiJson(body): ApiJson<ReEnableBody>,
) -> Json<ReEnableResult> {
    Json(svc::clear_model_locks(
        &state,
        &body.provider,
        &body.connection,
        &body.model,
    ))
}

#[utoipa::path(get, path = "/api/resilience/error-rules", tag = "resilience",
    responses((status = 200, body = ErrorRulesView)), security(("bearer" = [])))]
pub async fn list_error_rules(State(state): State<Arc<AppState>>) -> Json<ErrorRulesView> {
    Json(svc::error_rules(&state))
}

#[utoipa::path(get, path = "/api/resilience/egress", tag = "resilience",
    responses((status = 200, body = Vec<EgressBucketView>)), security(("bearer" = [])))]
pub async fn list_egress(State(state): State<Arc<AppState>>) -> Json<Vec<EgressBucketView>> {
    Json(svc::egress_buckets(&state))
}

#[utoipa::path(get, path = "/api/resilience", tag = "resilience",
    responses((status = 200, body = ResilienceView)), security(("bearer" = [])))]
pub async fn get_settings(State(state): State<Arc<AppState>>) -> Json<ResilienceView> {
    Json(svc::get_settings(&state))
}

/// `PATCH /api/resilience`: any of the fields; each maps to a setting
/// (`resilience.modelLockout.*`, `providerCooldown.*`, `resilience.statusRestatements`,
/// `resilience.providerErrorRules`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResiliencePatch {
    #[serde(default)]
    #[schema(value_type = Object)]
    pub model_lockout: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    #[schema(value_type = Object)]
    pub provider_cooldown: serde_json::Map<String, serde_json::Value>,
    /// `restatements` and `rules`: the operator's error rules (SPEC R13), each list
    /// replacing the one stored.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub error_rules: serde_json::Map<String, serde_json::Value>,
}

#[utoipa::path(patch, path = "/api/resilience", tag = "resilience", request_body = ResiliencePatch,
    responses((status = 200, body = ResilienceView), (status = 400)), security(("bearer" = [])))]
pub async fn patch_settings(
    State(state): State<Arc<AppState>>,
    ApiJson(patch): ApiJson<ResiliencePatch>,
) -> Result<Json<ResilienceView>, ApiError> {
    Ok(Json(
        svc::patch_settings(
            &state,
            &[
                ("modelLockout", &patch.model_lockout),
                ("providerCooldown", &patch.provider_cooldown),
                ("errorRules", &patch.error_rules),
            ],
        )
        .await?,
    ))
}
