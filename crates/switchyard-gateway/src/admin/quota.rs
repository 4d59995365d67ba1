//! `/api/quota/...` (SPEC Q11, Q13): thin handlers over
//! [`services::quota`](crate::services::quota) for pools, their usage and recent
//! decisions, plan overrides, and a one-time JSON import.
//!
//! A pool error answers 400 with the offending field in `param`.

use crate::error::{ApiError, ApiJson, ApiJsonArray, ApiPath, ApiQuery};
use crate::runtime::quota::views::{DecisionRecord, PoolUsage};
use crate::services::quota::{self as svc, ImportResult, PlanView, PoolView};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;
use switchyard_core::quota::pool::{DimensionInput, PoolInput};
use switchyard_model::SaveMode;
use utoipa::{IntoParams, ToSchema};

#[utoipa::path(get, path = "/api/quota/pools", tag = "quota",
    responses((status = 200, body = Vec<PoolView>)), security(("bearer" = [])))]
pub async fn list_pools(
    State(state): State<Arc<AppState>>,
) -> Result<Json<Vec<PoolView>>, ApiError> {
    Ok(Json(svc::pools(&state).await?))
}

#[utoipa::path(get, path = "/api/quota/pools/{id}", tag = "quota", params(("id" = String, Path)),
    responses((status = 200, body = PoolView), (status = 404)), security(("bearer" = [])))]
pub async fn get_pool(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<PoolView>, ApiError> {
    Ok(Json(svc::pool(&state, id).await?))
}

#[utoipa::path(post, path = "/api/quota/pools", tag = "quota", request_body(content = Object, description = "A pool: id, name, connectionIds, dimensions, allocations"),
    responses((status = 201, body = PoolView), (status = 400), (status = 409)), security(("bearer" = [])))]
pub async fn create_pool(
    State(state): State<Arc<AppState>>,
    ApiJson(p): ApiJson<PoolInput>,
) -> Result<(StatusCode, Json<PoolView>), ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(svc::save_pool(&state, p, SaveMode::Create).await?),
    ))
}

#[utoipa::path(put, path = "/api/quota/pools/{id}", tag = "quota", params(("id" = String, Path)),
    request_body(content = Object, description = "The whole pool; `id` must match the path"),
    responses((status = 200, body = PoolView), (status = 400), (status = 404)), security(("bearer" = [])))]
pub async fn update_pool(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
    ApiJson(p): ApiJson<PoolInput>,
) -> Result<Json<PoolView>, ApiError> {
    if p.id != id {
        return Err(ApiError::InvalidField {
            field: "id".to_owned(),
            message: format!("id: `{}` does not match the path `{id}`", p.id),
        });
    }
    Ok(Json(svc::save_pool(&state, p, SaveMode::Update).await?))
}

#[utoipa::path(delete, path = "/api/quota/pools/{id}", tag = "quota", params(("id" = String, Path)),
    responses((status = 204), (status = 404)), security(("bearer" = [])))]
pub async fn delete_pool(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    svc::delete_pool(&state, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/quota/pools/{id}/usage", tag = "quota", params(("id" = String, Path)),
    responses((status = 200, body = PoolUsage), (status = 404),
        (status = 503, description = "the quota store cannot be read (`quota_store_unavailable`)")),
    security(("bearer" = [])))]
pub async fn pool_usage(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<PoolUsage>, ApiError> {
    Ok(Json(svc::usage(&state, id).await?))
}

/// Query of the decisions endpoint.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
pub struct DecisionQuery {
    /// Only this key's decisions.
    pub api_key_id: Option<String>,
}

#[utoipa::path(get, path = "/api/quota/pools/{id}/decisions", tag = "quota",
    params(("id" = String, Path), DecisionQuery),
    responses((status = 200, body = Vec<DecisionRecord>), (status = 404)), security(("bearer" = [])))]
pub async fn pool_decisions(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<DecisionQuery>,
) -> Result<Json<Vec<DecisionRecord>>, ApiError> {
    Ok(Json(svc::decisions(&state, id, q.api_key_id.as_deref())?))
}

#[utoipa::path(get, path = "/api/quota/plans/{connectionId}", tag = "quota",
    params(("connectionId" = String, Path)),
    responses((status = 200, body = PlanView), (status = 404)), security(("bearer" = [])))]
pub async fn get_plan(
    State(state): State<Arc<AppState>>,
    ApiPath(connection_id): ApiPath<String>,
) -> Result<Json<PlanView>, ApiError> {
    Ok(Json(svc::plan(&state, connection_id)?))
}

/// Body of `PUT /api/quota/plans/{connectionId}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanBody {
    #[schema(value_type = Vec<Object>)]
    pub dimensions: Vec<DimensionInput>,
}

#[utoipa::path(put, path = "/api/quota/plans/{connectionId}", tag = "quota",
    params(("connectionId" = String, Path)), request_body = PlanBody,
    responses((status = 200, body = PlanView), (status = 400), (status = 404)), security(("bearer" = [])))]
pub async fn put_plan(
    State(state): State<Arc<AppState>>,
    ApiPath(connection_id): ApiPath<String>,
    ApiJson(body): ApiJson<PlanBody>,
) -> Result<Json<PlanView>, ApiError> {
    Ok(Json(
        svc::save_plan(&state, connection_id, body.dimensions).await?,
    ))
}

#[utoipa::path(delete, path = "/api/quota/plans/{connectionId}", tag = "quota",
    params(("connectionId" = String, Path)),
    responses((status = 204), (status = 404)), security(("bearer" = [])))]
pub async fn delete_plan(
    State(state): State<Arc<AppState>>,
    ApiPath(connection_id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    svc::delete_plan(&state, connection_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/api/quota/import", tag = "quota",
    request_body(content = Vec<Object>, description = "Pools as exported by GET /api/quota/export"),
    responses((status = 200, body = ImportResult), (status = 400)), security(("bearer" = [])))]
pub async fn import_pools(
    State(state): State<Arc<AppState>>,
    ApiJsonArray(pools): ApiJsonArray<PoolInput>,
) -> Result<Json<ImportResult>, ApiError> {
    Ok(Json(svc::import(&state, pools).await?))
}

#[utoipa::path(get, path = "/api/quota/export", tag = "quota",
    responses((status = 200, body = Vec<Object>)), security(("bearer" = [])))]
pub async fn export_pools(
    State(state): State<Arc<AppState>>,
) -> Result<Json<Vec<PoolInput>>, ApiError> {
    Ok(Json(svc::export(&state).await?))
}
