//! `/api/sessions` (SPEC R15) and `/api/routing/last-good` (R19): thin handlers over
//! [`services::sessions`](crate::services::sessions): the live session pins, releasing
//! one, and the combos' last good connections.

use crate::error::{ApiError, ApiPath};
use crate::services::sessions::{self as svc, LastGoodView, SessionView};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use std::sync::Arc;

#[utoipa::path(get, path = "/api/sessions", tag = "sessions",
    responses((status = 200, body = Vec<SessionView>)), security(("bearer" = [])))]
pub async fn list(State(state): State<Arc<AppState>>) -> Json<Vec<SessionView>> {
    Json(svc::sessions(&state))
}

#[utoipa::path(delete, path = "/api/sessions/{session}", tag = "sessions",
    params(("session" = String, Path, description = "the pin's hex key")),
    responses((status = 204), (status = 404)), security(("bearer" = [])))]
pub async fn release(
    State(state): State<Arc<AppState>>,
    ApiPath(session): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    svc::release(&state, &session)?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/routing/last-good", tag = "sessions",
    responses((status = 200, body = Vec<LastGoodView>)), security(("bearer" = [])))]
pub async fn last_good(State(state): State<Arc<AppState>>) -> Json<Vec<LastGoodView>> {
    Json(svc::last_good(&state))
}
