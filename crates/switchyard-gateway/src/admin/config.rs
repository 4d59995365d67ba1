//! `/api/providers`, `/api/connections`, `/api/combos`, `/api/aliases`: thin handlers over
//! [`services::config`](crate::services::config).
//!
//! Connection credentials are write-only: they are accepted on create and update and
//! never returned (`has_credential` says whether one is stored).

use crate::config::ConnectionSpec;
use crate::error::{ApiError, ApiJson, ApiPath};
use crate::services::config as svc;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use std::sync::Arc;
use switchyard_model::{AliasList, ComboRecord, ConnectionRecord, ProviderRecord, SaveMode};

fn id_matches(path: &str, body: &str, field: &str) -> Result<(), ApiError> {
    if path == body {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "invalid_config",
            format!("{field}: `{body}` does not match the path `{path}`"),
        ))
    }
}

// ---- providers ----

#[utoipa::path(get, path = "/api/providers", tag = "providers",
    responses((status = 200, body = Vec<ProviderRecord>)), security(("bearer" = [])))]
pub async fn list_providers(
    State(state): State<Arc<AppState>>,
) -> Result<Json<Vec<ProviderRecord>>, ApiError> {
    Ok(Json(svc::providers(&state).await?))
}

#[utoipa::path(get, path = "/api/providers/{id}", tag = "providers", params(("id" = String, Path)),
    responses((status = 200, body = ProviderRecord), (status = 404)), security(("bearer" = [])))]
pub async fn get_provider(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ProviderRecord>, ApiError> {
    Ok(Json(svc::provider(&state, id).await?))
}

#[utoipa::path(post, path = "/api/providers", tag = "providers", request_body = ProviderRecord,
    responses((status = 201, body = ProviderRecord), (status = 400), (status = 409)),
    security(("bearer" = [])))]
pub async fn create_provider(
    State(state): State<Arc<AppState>>,
    ApiJson(p): ApiJson<ProviderRecord>,
) -> Result<(StatusCode, Json<ProviderRecord>), ApiError> {
    let p = svc::save_provider(&state, p, SaveMode::Create).await?;
    Ok((StatusCode::CREATED, Json(p)))
}

#[utoipa::path(put, path = "/api/providers/{id}", tag = "providers", params(("id" = String, Path)),
    request_body = ProviderRecord,
    responses((status = 200, body = ProviderRecord), (status = 400), (status = 404)),
    security(("bearer" = [])))]
pub async fn update_provider(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
    ApiJson(p): ApiJson<ProviderRecord>,
) -> Result<Json<ProviderRecord>, ApiError> {
    id_matches(&id, &p.id, "id")?;
    Ok(Json(svc::save_provider(&state, p, SaveMode::Update).await?))
}

#[utoipa::path(delete, path = "/api/providers/{id}", tag = "providers", params(("id" = String, Path)),
    responses((status = 204), (status = 404), (status = 409)), security(("bearer" = [])))]
pub async fn delete_provider(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    svc::delete_provider(&state, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- connections ----

#[utoipa::path(get, path = "/api/connections", tag = "connections",
    responses((status = 200, body = Vec<ConnectionRecord>)), security(("bearer" = [])))]
pub async fn list_connections(
    State(state): State<Arc<AppState>>,
) -> Result<Json<Vec<ConnectionRecord>>, ApiError> {
    Ok(Json(svc::connections(&state).await?))
}

#[utoipa::path(get, path = "/api/connections/{id}", tag = "connections", params(("id" = String, Path)),
    responses((status = 200, body = ConnectionRecord), (status = 404)), security(("bearer" = [])))]
pub async fn get_connection(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ConnectionRecord>, ApiError> {
    Ok(Json(svc::connection(&state, id).await?))
}

#[utoipa::path(post, path = "/api/connections", tag = "connections", request_body = ConnectionSpec,
    responses((status = 201, body = ConnectionRecord), (status = 400), (status = 409)),
    security(("bearer" = [])))]
pub async fn create_connection(
    State(state): State<Arc<AppState>>,
    ApiJson(input): ApiJson<ConnectionSpec>,
) -> Result<(StatusCode, Json<ConnectionRecord>), ApiError> {
    let c = svc::save_connection(&state, input, SaveMode::Create).await?;
    Ok((StatusCode::CREATED, Json(c)))
}

#[utoipa::path(put, path = "/api/connections/{id}", tag = "connections", params(("id" = String, Path)),
    request_body = ConnectionSpec,
    responses((status = 200, body = ConnectionRecord), (status = 400), (status = 404)),
    security(("bearer" = [])))]
pub async fn update_connection(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
    ApiJson(input): ApiJson<ConnectionSpec>,
) -> Result<Json<ConnectionRecord>, ApiError> {
    id_matches(&id, &input.id, "id")?;
    Ok(Json(
        svc::save_connection(&state, input, SaveMode::Update).await?,
    ))
}

#[utoipa::path(delete, path = "/api/connections/{id}", tag = "connections", params(("id" = String, Path)),
    responses((status = 204), (status = 404), (status = 409)), security(("bearer" = [])))]
pub async fn delete_connection(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    svc::delete_connection(&state, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- combos ----

#[utoipa::path(get, path = "/api/combos", tag = "combos",
    responses((status = 200, body = Vec<ComboRecord>)), security(("bearer" = [])))]
pub async fn list_combos(
    State(state): State<Arc<AppState>>,
) -> Result<Json<Vec<ComboRecord>>, ApiError> {
    Ok(Json(svc::combos(&state).await?))
}

#[utoipa::path(get, path = "/api/combos/{name}", tag = "combos", params(("name" = String, Path)),
    responses((status = 200, body = ComboRecord), (status = 404)), security(("bearer" = [])))]
pub async fn get_combo(
    State(state): State<Arc<AppState>>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<ComboRecord>, ApiError> {
    Ok(Json(svc::combo(&state, name).await?))
}

#[utoipa::path(post, path = "/api/combos", tag = "combos", request_body = ComboRecord,
    responses((status = 201, body = ComboRecord), (status = 400), (status = 409)),
    security(("bearer" = [])))]
pub async fn create_combo(
    State(state): State<Arc<AppState>>,
    ApiJson(c): ApiJson<ComboRecord>,
) -> Result<(StatusCode, Json<ComboRecord>), ApiError> {
    let c = svc::save_combo(&state, c, SaveMode::Create).await?;
    Ok((StatusCode::CREATED, Json(c)))
}

#[utoipa::path(put, path = "/api/combos/{name}", tag = "combos", params(("name" = String, Path)),
    request_body = ComboRecord,
    responses((status = 200, body = ComboRecord), (status = 400), (status = 404)),
    security(("bearer" = [])))]
pub async fn update_combo(
    State(state): State<Arc<AppState>>,
    ApiPath(name): ApiPath<String>,
    ApiJson(c): ApiJson<ComboRecord>,
) -> Result<Json<ComboRecord>, ApiError> {
    id_matches(&name, &c.name, "name")?;
    Ok(Json(svc::save_combo(&state, c, SaveMode::Update).await?))
}

#[utoipa::path(delete, path = "/api/combos/{name}", tag = "combos", params(("name" = String, Path)),
    responses((status = 204), (status = 404)), security(("bearer" = [])))]
pub async fn delete_combo(
    State(state): State<Arc<AppState>>,
    ApiPath(name): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    svc::delete_combo(&state, name).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- aliases ----

#[utoipa::path(get, path = "/api/aliases", tag = "aliases",
    responses((status = 200, body = AliasList)), security(("bearer" = [])))]
pub async fn list_aliases(State(state): State<Arc<AppState>>) -> Result<Json<AliasList>, ApiError> {
    let aliases = svc::aliases(&state).await?;
    Ok(Json(AliasList { aliases }))
}

/// Replaces every alias with the list, in the order the aliases are tried.
#[utoipa::path(put, path = "/api/aliases", tag = "aliases", request_body = AliasList,
    responses((status = 200, body = AliasList), (status = 400)), security(("bearer" = [])))]
pub async fn put_aliases(
    State(state): State<Arc<AppState>>,
    ApiJson(list): ApiJson<AliasList>,
) -> Result<Json<AliasList>, ApiError> {
    let aliases = svc::replace_aliases(&state, list.aliases).await?;
    Ok(Json(AliasList { aliases }))
}
