//! `/api/leases` (SPEC R16): thin handlers over
//! [`services::leases`](crate::services::leases): the active exclusive leases, and the
//! operator's release of one.

use crate::error::{ApiError, ApiPath};
use crate::services::leases::{self as svc, LeaseView};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use std::sync::Arc;

#[utoipa::path(get, path = "/api/leases", tag = "sessions",
    responses((status = 200, body = Vec<LeaseView>)), security(("bearer" = [])))]
pub async fn list(State(state): State<Arc<AppState>>) -> Json<Vec<LeaseView>> {
    Json(svc::list(&state))
}

#[utoipa::path(delete, path = "/api/leases/{owner}", tag = "sessions",
    params(("owner" = String, Path, description = "the owner's hex SHA-256")),
    responses((status = 204), (status = 404)), security(("bearer" = [])))]
pub async fn release(
    State(state): State<Arc<AppState>>,
    ApiPath(owner): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    svc::release(&state, &owner).await?;
    Ok(StatusCode::NO_CONTENT)
}
