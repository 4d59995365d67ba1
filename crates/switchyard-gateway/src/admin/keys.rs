//! `/api/keys`: client API keys. The secret is returned once, by `POST`, and never again.

use super::{apply_change, now};
use crate::error::{ApiError, ApiJson, ApiPath};
use crate::keys::{new_key, validate_key_fields, NewKey};
use crate::state::{blocking, AppState};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::sync::Arc;
use switchyard_store::{ConfigRows, KeyRecord, SaveMode};
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

fn check_connections(rows: &ConfigRows, list: Option<&Vec<String>>) -> Result<(), ApiError> {
    for c in list.into_iter().flatten() {
        if !rows.connections.iter().any(|(r, _)| &r.id == c) {
            return Err(ApiError::bad_request(
                "invalid_key",
                format!("allowed_connections: unknown connection `{c}`"),
            ));
        }
    }
    Ok(())
}

#[utoipa::path(get, path = "/api/keys", tag = "keys",
    responses((status = 200, body = Vec<KeyRecord>)), security(("bearer" = [])))]
pub async fn list(State(state): State<Arc<AppState>>) -> Result<Json<Vec<KeyRecord>>, ApiError> {
    Ok(Json(blocking(&state.store, |s| s.list_keys()).await?))
}

#[utoipa::path(post, path = "/api/keys", tag = "keys", request_body = CreateKey,
    responses((status = 201, body = CreatedKey), (status = 400), (status = 409)),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<Arc<AppState>>,
    ApiJson(body): ApiJson<CreateKey>,
) -> Result<(StatusCode, Json<CreatedKey>), ApiError> {
    let (record, secret) = new_key(
        NewKey {
            id: body.id,
            name: body.name,
            scopes: body.scopes,
            allowed_connections: body.allowed_connections,
            allowed_models: body.allowed_models,
            secret: None,
        },
        now(&state),
    )
    .map_err(|m| ApiError::bad_request("invalid_key", m))?;
    let rec = record.clone();
    apply_change(
        &state,
        |rows| {
            check_connections(rows, record.allowed_connections.as_ref())?;
            rows.keys.push(record.clone());
            Ok(())
        },
        move |s| s.save_key(&rec, SaveMode::Create),
    )
    .await?;
    tracing::info!(key_id = %record.id, name = %record.name, "Created API key.");
    Ok((
        StatusCode::CREATED,
        Json(CreatedKey {
            key: record,
            secret,
        }),
    ))
}

#[utoipa::path(get, path = "/api/keys/{id}", tag = "keys",
    params(("id" = String, Path)), responses((status = 200, body = KeyRecord), (status = 404)),
    security(("bearer" = [])))]
pub async fn get(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<KeyRecord>, ApiError> {
    Ok(Json(blocking(&state.store, move |s| s.get_key(&id)).await?))
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
    let lookup = id.clone();
    let mut record = blocking(&state.store, move |s| s.get_key(&lookup)).await?;
    if let Some(n) = body.name {
        record.name = n;
    }
    if let Some(s) = body.scopes {
        record.scopes = s;
    }
    if let Some(c) = body.allowed_connections {
        record.allowed_connections = c;
    }
    if let Some(m) = body.allowed_models {
        record.allowed_models = m;
    }
    validate_key_fields(&record.name, &record.scopes)
        .map_err(|m| ApiError::bad_request("invalid_key", m))?;
    let rec = record.clone();
    apply_change(
        &state,
        |rows| {
            check_connections(rows, record.allowed_connections.as_ref())?;
            super::upsert_by(&mut rows.keys, record.clone(), |k| &k.id, &id);
            Ok(())
        },
        move |s| s.save_key(&rec, SaveMode::Update),
    )
    .await?;
    Ok(Json(record))
}

#[utoipa::path(post, path = "/api/keys/{id}/revoke", tag = "keys",
    params(("id" = String, Path)), responses((status = 200, body = KeyRecord), (status = 404)),
    security(("bearer" = [])))]
pub async fn revoke(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<KeyRecord>, ApiError> {
    let t = now(&state);
    let record = apply_change(&state, |_| Ok(()), move |s| s.revoke_key(&id, t)).await?;
    tracing::info!(key_id = %record.id, "Revoked API key.");
    Ok(Json(record))
}

#[utoipa::path(delete, path = "/api/keys/{id}", tag = "keys",
    params(("id" = String, Path)), responses((status = 204), (status = 404)),
    security(("bearer" = [])))]
pub async fn delete(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    apply_change(&state, |_| Ok(()), move |s| s.delete_key(&id)).await?;
    Ok(StatusCode::NO_CONTENT)
}
