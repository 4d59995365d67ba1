//! `/api/keys`: client API keys, thin handlers over [`services::keys`]. The secret is
//! returned once, by `POST`, and never again.

use crate::error::{ApiError, ApiJson, ApiPath};
use crate::keys::NewKey;
use crate::services;
use crate::services::keys::KeyChange;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::sync::Arc;
use switchyard_model::KeyRecord;
use utoipa::ToSchema;

/// Body of `POST /api/keys`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    /// Optional id; generated when absent.
    pub id: Option<String>,
    pub name: String,
    #[serde(default)]
    pub scopes: Vec<String>,
    pub allowed_connections: Option<Vec<String>>,
    pub allowed_models: Option<Vec<String>>,
}

/// Answer of `POST /api/keys`: the record and the secret, shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedKey {
    pub key: KeyRecord,
    #[serde(serialize_with = "expose")]
    #[schema(value_type = String)]
    pub secret: SecretString,
}

/// Serialises the secret itself: this answer is the one place it is shown.
fn expose<S: Serializer>(secret: &SecretString, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(secret.expose_secret())
}

/// Body of `PATCH /api/keys/{id}`: present fields replace; `null` clears a restriction.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateKey {
    pub name: Option<String>,
    pub scopes: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<String>>)]
    pub allowed_connections: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<String>>)]
    pub allowed_models: Option<Option<Vec<String>>>,
}

/// Distinguishes an absent field (`None`) from an explicit `null` (`Some(None)`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Ok(Some(Option::deserialize(d)?))
}

#[utoipa::path(get, path = "/api/keys", tag = "keys",
    responses((status = 200, body = Vec<KeyRecord>)), security(("bearer" = [])))]
pub async fn list(State(state): State<Arc<AppState>>) -> Result<Json<Vec<KeyRecord>>, ApiError> {
    Ok(Json(services::keys::list(&state).await?))
}

#[utoipa::path(post, path = "/api/keys", tag = "keys", request_body = CreateKey,
    responses((status = 201, body = CreatedKey), (status = 400), (status = 409)),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<Arc<AppState>>,
    ApiJson(body): ApiJson<CreateKey>,
) -> Result<(StatusCode, Json<CreatedKey>), ApiError> {
    let input = NewKey {
        id: body.id,
        name: body.name,
        scopes: body.scopes,
        allowed_connections: body.allowed_connections,
        allowed_models: body.allowed_models,
        secret: None,
    };
    let (key, secret) = services::keys::create(&state, input).await?;
    Ok((StatusCode::CREATED, Json(CreatedKey { key, secret })))
}

#[utoipa::path(get, path = "/api/keys/{id}", tag = "keys",
    params(("id" = String, Path)), responses((status = 200, body = KeyRecord), (status = 404)),
    security(("bearer" = [])))]
pub async fn get(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<KeyRecord>, ApiError> {
    Ok(Json(services::keys::get(&state, id).await?))
}

#[utoipa::path(patch, path = "/api/keys/{id}", tag = "keys", request_body = UpdateKey,
    params(("id" = String, Path)),
    responses((status = 200, body = KeyRecord), (status = 400), (status = 404)),
    security(("bearer" = [])))]
pub async fn update(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<UpdateKey>,
) -> Result<Json<KeyRecord>, ApiError> {
    let change = KeyChange {
        name: body.name,
        scopes: body.scopes,
        allowed_connections: body.allowed_connections,
        allowed_models: body.allowed_models,
    };
    Ok(Json(services::keys::update(&state, id, change).await?))
}

#[utoipa::path(post, path = "/api/keys/{id}/revoke", tag = "keys",
    params(("id" = String, Path)), responses((status = 200, body = KeyRecord), (status = 404)),
    security(("bearer" = [])))]
pub async fn revoke(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<KeyRecord>, ApiError> {
    Ok(Json(services::keys::revoke(&state, id).await?))
}

#[utoipa::path(delete, path = "/api/keys/{id}", tag = "keys",
    params(("id" = String, Path)), responses((status = 204), (status = 404)),
    security(("bearer" = [])))]
pub async fn delete(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    services::keys::delete(&state, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
