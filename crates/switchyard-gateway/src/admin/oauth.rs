//! `/api/oauth`: OAuth subscription connections (SPEC R4) — import a CLI's credential
//! file, refresh a token now, read each connection's refresh state. Thin handlers over
//! [`services::oauth`](crate::services::oauth); no answer holds a token.

use crate::error::{ApiError, ApiJson, ApiPath};
use crate::services::oauth::{self as svc, GrantImport};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use std::sync::Arc;
use switchyard_model::{ConnectionRecord, OauthRecord};

#[utoipa::path(get, path = "/api/oauth", tag = "oauth",
    responses((status = 200, body = Vec<OauthRecord>)), security(("bearer" = [])))]
pub async fn list(State(state): State<Arc<AppState>>) -> Result<Json<Vec<OauthRecord>>, ApiError> {
    Ok(Json(svc::list(&state).await?))
}

#[utoipa::path(post, path = "/api/oauth/import", tag = "oauth", request_body = GrantImport,
    responses(
        (status = 201, body = ConnectionRecord, description = "A connection was created"),
        (status = 200, body = ConnectionRecord, description = "The connection got the new credentials"),
        (status = 400)),
    security(("bearer" = [])))]
pub async fn import(
    State(state): State<Arc<AppState>>,
    ApiJson(input): ApiJson<GrantImport>,
) -> Result<(StatusCode, Json<ConnectionRecord>), ApiError> {
    let (c, created) = svc::import(&state, input).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(c)))
}

#[utoipa::path(post, path = "/api/oauth/{id}/refresh", tag = "oauth", params(("id" = String, Path)),
    responses(
        (status = 200, body = OauthRecord, description = "Refreshed; an `expired` state ended"),
        (status = 404),
        (status = 502, description = "The token endpoint refused, or no refresh finished in time")),
    security(("bearer" = [])))]
pub async fn refresh(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<OauthRecord>, ApiError> {
    Ok(Json(svc::refresh(&state, id).await?))
}
