//! Authentication: client API keys for `/v1`, the admin credential for `/api`.
//!
//! Keys are looked up in the in-memory catalog by their SHA-256 (no database read); the
//! digest comparison is constant-time. Both `Authorization: Bearer` and the Anthropic
//! `x-api-key` header are accepted.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use switchyard_core::apikey::{bearer_token, KeyHash};
use switchyard_core::catalog::{ApiKey, Catalog, SCOPE_ADMIN};

/// The presented credential, if any.
pub fn presented_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .or_else(|| {
            headers
                .get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|t| !t.is_empty())
        })
}

/// Resolves the client key of a request.
pub fn client_key<'a>(catalog: &'a Catalog, headers: &HeaderMap) -> Result<&'a ApiKey, ApiError> {
    let token = presented_token(headers).ok_or(ApiError::MissingKey)?;
    let key = catalog
        .key_by_hash(&KeyHash::of(token))
        .ok_or(ApiError::InvalidKey)?;
    if key.revoked {
        return Err(ApiError::RevokedKey);
    }
    Ok(key)
}

/// Middleware guarding the management API: the admin token, or a live client key with
/// the `admin` scope.
pub async fn require_admin(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let allowed = presented_token(request.headers()).is_some_and(|token| {
        let hash = KeyHash::of(token);
        let snap = state.snapshot();
        let admin = state.configured_admin.or(snap.admin_hash);
        admin.is_some_and(|a| hash.ct_eq(&a))
            || snap
                .catalog
                .key_by_hash(&hash)
                .is_some_and(|k| !k.revoked && k.has_scope(SCOPE_ADMIN))
    });
    if allowed {
        next.run(request).await
    } else {
        ApiError::AdminRequired.into_response()
    }
}
