//! `/api/quota/...` (SPEC Q11, Q13): pools, their usage and recent decisions, plan
//! overrides, and a one-time JSON import.
//!
//! Every write is validated by building the snapshot it would produce (see
//! [`apply_change`]); a pool error answers 400 with the offending field in `param`.
//!
//! Writes go through `apply_change` only; usage and decisions are read from the quota
//! engine, and the only counters changed here are a deleted pool's, which are dropped.

use super::{apply_change, now, upsert_by};
use crate::error::{ApiError, ApiJson, ApiPath, ApiQuery};
use crate::runtime::quota::index::validate_plan;
use crate::runtime::quota::views::{DecisionRecord, PoolUsage};
use crate::state::{blocking, AppState};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use switchyard_core::quota::plan::{Dimension, PlanSource};
use switchyard_core::quota::pool::{DimensionInput, PoolInput};
use switchyard_store::{PlanRecord, SaveMode};
use utoipa::{IntoParams, ToSchema};

/// A pool as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolView {
    pub id: String,
    pub name: String,
    pub connection_ids: Vec<String>,
    /// As declared; empty = inherited from the connections' plan.
    #[schema(value_type = Vec<Object>)]
    pub dimensions: Vec<DimensionInput>,
    /// What is enforced (declared, or the plan times the number of connections).
    #[schema(value_type = Vec<Object>)]
    pub effective_dimensions: Vec<Dimension>,
    #[schema(value_type = Vec<Object>)]
    pub allocations: Vec<switchyard_core::quota::pool::AllocationInput>,
}

fn view(state: &AppState, input: PoolInput) -> PoolView {
    let snap = state.snapshot();
    let effective_dimensions = snap
        .quota
        .pool(&input.id)
        .map(|p| p.dims.clone())
        .unwrap_or_default();
    PoolView {
        id: input.id,
        name: input.name,
        connection_ids: input.connection_ids,
        dimensions: input.dimensions,
        effective_dimensions,
        allocations: input.allocations,
    }
}

#[utoipa::path(get, path = "/api/quota/pools", tag = "quota",
    responses((status = 200, body = Vec<PoolView>)), security(("bearer" = [])))]
pub async fn list_pools(
    State(state): State<Arc<AppState>>,
) -> Result<Json<Vec<PoolView>>, ApiError> {
    let pools = blocking(&state.store, |s| s.list_pools()).await?;
    Ok(Json(pools.into_iter().map(|p| view(&state, p)).collect()))
}

#[utoipa::path(get, path = "/api/quota/pools/{id}", tag = "quota", params(("id" = String, Path)),
    responses((status = 200, body = PoolView), (status = 404)), security(("bearer" = [])))]
pub async fn get_pool(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<PoolView>, ApiError> {
    let pool = blocking(&state.store, move |s| s.get_pool(&id)).await?;
    Ok(Json(view(&state, pool)))
}

async fn save_pool(
    state: &Arc<AppState>,
    p: PoolInput,
    mode: SaveMode,
) -> Result<PoolView, ApiError> {
    let (rec, t) = (p.clone(), now(state));
    apply_change(
        state,
        |rows| {
            upsert_by(&mut rows.pools, p.clone(), |x| &x.id, &p.id);
            Ok(())
        },
        move |s| s.save_pool(&rec, mode, t),
    )
    .await?;
    Ok(view(state, p))
}

#[utoipa::path(post, path = "/api/quota/pools", tag = "quota", request_body(content = Object, description = "A pool: id, name, connectionIds, dimensions, allocations"),
    responses((status = 201, body = PoolView), (status = 400), (status = 409)), security(("bearer" = [])))]
pub async fn create_pool(
    State(state): State<Arc<AppState>>,
    ApiJson(p): ApiJson<PoolInput>,
) -> Result<(StatusCode, Json<PoolView>), ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(save_pool(&state, p, SaveMode::Create).await?),
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
    Ok(Json(save_pool(&state, p, SaveMode::Update).await?))
}

#[utoipa::path(delete, path = "/api/quota/pools/{id}", tag = "quota", params(("id" = String, Path)),
    responses((status = 204), (status = 404)), security(("bearer" = [])))]
pub async fn delete_pool(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let (target, deleted) = (id.clone(), id.clone());
    apply_change(
        &state,
        |rows| {
            rows.pools.retain(|p| p.id != target);
            Ok(())
        },
        move |s| s.delete_pool(&id),
    )
    .await?;
    state.runtime.quota.forget_pool(&deleted).await;
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
    let snap = state.snapshot();
    let pool = snap
        .quota
        .pool(&id)
        .ok_or(ApiError::NotFound { kind: "pool", id })?;
    let keys: Vec<String> = pool
        .pool
        .allocations
        .iter()
        .map(|a| a.api_key_id.clone())
        .collect();
    let usage = state
        .runtime
        .quota
        .usage(pool, &keys, &snap.settings.quota)
        .await
        .map_err(|e| ApiError::QuotaStoreUnavailable {
            reason: e.reason.as_str(),
        })?;
    Ok(Json(usage))
}

/// Query of the decisions endpoint.
#[derive(Debug, Deserialize, IntoParams)]
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
    if state.snapshot().quota.pool(&id).is_none() {
        return Err(ApiError::NotFound { kind: "pool", id });
    }
    Ok(Json(
        state.runtime.quota.decisions(&id, q.api_key_id.as_deref()),
    ))
}

/// A connection's resolved plan.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanView {
    pub connection_id: String,
    /// `manual`, `catalog` or `empty`.
    #[schema(value_type = String)]
    pub source: PlanSource,
    #[schema(value_type = Vec<Object>)]
    pub dimensions: Vec<Dimension>,
}

fn plan_view(state: &AppState, connection_id: String) -> Result<PlanView, ApiError> {
    let snap = state.snapshot();
    let (dims, source) = snap
        .quota
        .plans
        .get(&connection_id)
        .cloned()
        .ok_or_else(|| ApiError::NotFound {
            kind: "connection",
            id: connection_id.clone(),
        })?;
    Ok(PlanView {
        connection_id,
        source,
        dimensions: dims,
    })
}

#[utoipa::path(get, path = "/api/quota/plans/{connectionId}", tag = "quota",
    params(("connectionId" = String, Path)),
    responses((status = 200, body = PlanView), (status = 404)), security(("bearer" = [])))]
pub async fn get_plan(
    State(state): State<Arc<AppState>>,
    ApiPath(connection_id): ApiPath<String>,
) -> Result<Json<PlanView>, ApiError> {
    Ok(Json(plan_view(&state, connection_id)?))
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
    if state
        .snapshot()
        .catalog
        .connection(&connection_id)
        .is_none()
    {
        return Err(ApiError::NotFound {
            kind: "connection",
            id: connection_id,
        });
    }
    let plan = PlanRecord {
        connection_id: connection_id.clone(),
        dimensions: body.dimensions,
    };
    if let Err(crate::runtime::quota::index::QuotaConfigError::Plan { error, .. }) =
        validate_plan(&plan)
    {
        return Err(ApiError::InvalidField {
            field: error.field.clone(),
            message: error.to_string(),
        });
    }
    let (rec, t) = (plan.clone(), now(&state));
    apply_change(
        &state,
        |rows| {
            upsert_by(
                &mut rows.plans,
                plan.clone(),
                |x| &x.connection_id,
                &plan.connection_id,
            );
            Ok(())
        },
        move |s| s.save_plan(&rec, t),
    )
    .await?;
    Ok(Json(plan_view(&state, connection_id)?))
}

#[utoipa::path(delete, path = "/api/quota/plans/{connectionId}", tag = "quota",
    params(("connectionId" = String, Path)),
    responses((status = 204), (status = 404)), security(("bearer" = [])))]
pub async fn delete_plan(
    State(state): State<Arc<AppState>>,
    ApiPath(connection_id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let target = connection_id.clone();
    apply_change(
        &state,
        |rows| {
            rows.plans.retain(|p| p.connection_id != target);
            Ok(())
        },
        move |s| s.delete_plan(&connection_id),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Result of an import.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImportResult {
    pub imported: usize,
    /// Why nothing was imported, when nothing was.
    pub skipped: Option<String>,
}

#[utoipa::path(post, path = "/api/quota/import", tag = "quota",
    request_body(content = Vec<Object>, description = "Pools as exported by GET /api/quota/export"),
    responses((status = 200, body = ImportResult), (status = 400)), security(("bearer" = [])))]
pub async fn import_pools(
    State(state): State<Arc<AppState>>,
    ApiJson(pools): ApiJson<Vec<PoolInput>>,
) -> Result<Json<ImportResult>, ApiError> {
    let t = now(&state);
    let submitted = pools.len();
    let incoming = pools.clone();
    // The emptiness check and the writes run in one transaction, so two concurrent
    // imports cannot both land.
    let imported = apply_change(
        &state,
        |rows| {
            if rows.pools.is_empty() {
                rows.pools.extend(incoming);
            }
            Ok(())
        },
        move |s| {
            s.batch(|b| {
                if !b.pools_empty()? {
                    return Ok(0);
                }
                for p in &pools {
                    b.save_pool(p, SaveMode::Create, t)?;
                }
                Ok(pools.len())
            })
        },
    )
    .await?;
    Ok(Json(ImportResult {
        imported,
        skipped: (imported == 0 && submitted > 0)
            .then(|| "pools already exist; import runs only into an empty database".to_owned()),
    }))
}

#[utoipa::path(get, path = "/api/quota/export", tag = "quota",
    responses((status = 200, body = Vec<Object>)), security(("bearer" = [])))]
pub async fn export_pools(
    State(state): State<Arc<AppState>>,
) -> Result<Json<Vec<PoolInput>>, ApiError> {
    Ok(Json(blocking(&state.store, |s| s.list_pools()).await?))
}
