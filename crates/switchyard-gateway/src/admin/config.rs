//! `/api/providers`, `/api/connections`, `/api/combos`.
//!
//! Connection credentials are write-only: they are accepted on create and update and
//! never returned (`has_credential` says whether one is stored).

use super::{apply_change, now, upsert_by};
use crate::config::ConnectionSpec;
use crate::error::{ApiError, ApiJson, ApiPath};
use crate::state::{blocking, AppState};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use std::sync::Arc;
use switchyard_store::{ComboRecord, ConnectionRecord, ProviderRecord, SaveMode};

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
    Ok(Json(blocking(&state.store, |s| s.list_providers()).await?))
}

#[utoipa::path(get, path = "/api/providers/{id}", tag = "providers", params(("id" = String, Path)),
    responses((status = 200, body = ProviderRecord), (status = 404)), security(("bearer" = [])))]
pub async fn get_provider(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ProviderRecord>, ApiError> {
    Ok(Json(
        blocking(&state.store, move |s| s.get_provider(&id)).await?,
    ))
}

async fn save_provider(
    state: &Arc<AppState>,
    p: ProviderRecord,
    mode: SaveMode,
) -> Result<ProviderRecord, ApiError> {
    let (rec, t) = (p.clone(), now(state));
    apply_change(
        state,
        |rows| {
            upsert_by(&mut rows.providers, p.clone(), |x| &x.id, &p.id);
            Ok(())
        },
        move |s| s.save_provider(&rec, mode, t),
    )
    .await?;
    Ok(p)
}

#[utoipa::path(post, path = "/api/providers", tag = "providers", request_body = ProviderRecord,
    responses((status = 201, body = ProviderRecord), (status = 400), (status = 409)),
    security(("bearer" = [])))]
pub async fn create_provider(
    State(state): State<Arc<AppState>>,
    ApiJson(p): ApiJson<ProviderRecord>,
) -> Result<(StatusCode, Json<ProviderRecord>), ApiError> {
    let p = save_provider(&state, p, SaveMode::Create).await?;
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
    Ok(Json(save_provider(&state, p, SaveMode::Update).await?))
}

#[utoipa::path(delete, path = "/api/providers/{id}", tag = "providers", params(("id" = String, Path)),
    responses((status = 204), (status = 404), (status = 409)), security(("bearer" = [])))]
pub async fn delete_provider(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    apply_change(&state, |_| Ok(()), move |s| s.delete_provider(&id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- connections ----

#[utoipa::path(get, path = "/api/connections", tag = "connections",
    responses((status = 200, body = Vec<ConnectionRecord>)), security(("bearer" = [])))]
pub async fn list_connections(
    State(state): State<Arc<AppState>>,
) -> Result<Json<Vec<ConnectionRecord>>, ApiError> {
    Ok(Json(
        blocking(&state.store, |s| s.list_connections()).await?,
    ))
}

#[utoipa::path(get, path = "/api/connections/{id}", tag = "connections", params(("id" = String, Path)),
    responses((status = 200, body = ConnectionRecord), (status = 404)), security(("bearer" = [])))]
pub async fn get_connection(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ConnectionRecord>, ApiError> {
    Ok(Json(
        blocking(&state.store, move |s| s.get_connection(&id)).await?,
    ))
}

async fn save_connection(
    state: &Arc<AppState>,
    input: ConnectionSpec,
    mode: SaveMode,
) -> Result<ConnectionRecord, ApiError> {
    if input.credential_env.is_some() {
        return Err(ApiError::bad_request(
            "invalid_config",
            "credential_env: accepted only in the config file; send `credential`",
        ));
    }
    let record = input
        .record()
        .map_err(|m| ApiError::bad_request("invalid_config", m))?;
    let credential = input.credential;
    let new_credential = credential.is_some();
    let (rec, t) = (record.clone(), now(state));
    let cred = credential.clone();
    apply_change(
        state,
        |rows| {
            if !rows.providers.iter().any(|p| p.id == record.provider) {
                return Err(ApiError::bad_request(
                    "invalid_config",
                    format!("provider: unknown provider `{}`", record.provider),
                ));
            }
            let kept = rows
                .connections
                .iter()
                .find(|(c, _)| c.id == record.id)
                .map(|(_, cred)| cred.clone());
            let cred = credential.or(kept).unwrap_or_default();
            upsert_by(
                &mut rows.connections,
                (record.clone(), cred),
                |x| &x.0.id,
                &record.id,
            );
            Ok(())
        },
        move |s| s.save_connection(&rec, cred.as_ref(), mode, t),
    )
    .await?;
    if new_credential {
        // A new credential ends a terminal state and any cooldown (SPEC R4).
        state.runtime.resilience.reset_connection(&record.id);
    }
    let id = record.id.clone();
    Ok(blocking(&state.store, move |s| s.get_connection(&id)).await?)
}

#[utoipa::path(post, path = "/api/connections", tag = "connections", request_body = ConnectionSpec,
    responses((status = 201, body = ConnectionRecord), (status = 400), (status = 409)),
    security(("bearer" = [])))]
pub async fn create_connection(
    State(state): State<Arc<AppState>>,
    ApiJson(input): ApiJson<ConnectionSpec>,
) -> Result<(StatusCode, Json<ConnectionRecord>), ApiError> {
    let c = save_connection(&state, input, SaveMode::Create).await?;
    tracing::info!(connection_id = %c.id, provider = %c.provider, "Created connection.");
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
        save_connection(&state, input, SaveMode::Update).await?,
    ))
}

#[utoipa::path(delete, path = "/api/connections/{id}", tag = "connections", params(("id" = String, Path)),
    responses((status = 204), (status = 404), (status = 409)), security(("bearer" = [])))]
pub async fn delete_connection(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    apply_change(&state, |_| Ok(()), move |s| s.delete_connection(&id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- combos ----

#[utoipa::path(get, path = "/api/combos", tag = "combos",
    responses((status = 200, body = Vec<ComboRecord>)), security(("bearer" = [])))]
pub async fn list_combos(
    State(state): State<Arc<AppState>>,
) -> Result<Json<Vec<ComboRecord>>, ApiError> {
    Ok(Json(blocking(&state.store, |s| s.list_combos()).await?))
}

#[utoipa::path(get, path = "/api/combos/{name}", tag = "combos", params(("name" = String, Path)),
    responses((status = 200, body = ComboRecord), (status = 404)), security(("bearer" = [])))]
pub async fn get_combo(
    State(state): State<Arc<AppState>>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<ComboRecord>, ApiError> {
    Ok(Json(
        blocking(&state.store, move |s| s.get_combo(&name)).await?,
    ))
}

async fn save_combo(
    state: &Arc<AppState>,
    c: ComboRecord,
    mode: SaveMode,
) -> Result<ComboRecord, ApiError> {
    let (rec, t) = (c.clone(), now(state));
    apply_change(
        state,
        |rows| {
            upsert_by(&mut rows.combos, c.clone(), |x| &x.name, &c.name);
            Ok(())
        },
        move |s| s.save_combo(&rec, mode, t),
    )
    .await?;
    Ok(c)
}

#[utoipa::path(post, path = "/api/combos", tag = "combos", request_body = ComboRecord,
    responses((status = 201, body = ComboRecord), (status = 400), (status = 409)),
    security(("bearer" = [])))]
pub async fn create_combo(
    State(state): State<Arc<AppState>>,
    ApiJson(c): ApiJson<ComboRecord>,
) -> Result<(StatusCode, Json<ComboRecord>), ApiError> {
    let c = save_combo(&state, c, SaveMode::Create).await?;
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
    Ok(Json(save_combo(&state, c, SaveMode::Update).await?))
}

#[utoipa::path(delete, path = "/api/combos/{name}", tag = "combos", params(("name" = String, Path)),
    responses((status = 204), (status = 404)), security(("bearer" = [])))]
pub async fn delete_combo(
    State(state): State<Arc<AppState>>,
    ApiPath(name): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    apply_change(&state, |_| Ok(()), move |s| s.delete_combo(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}
