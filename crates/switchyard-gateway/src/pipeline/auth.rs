//! Authentication: client API keys for `/v1`, the admin credential for `/api`.
//!
//! Keys are looked up in the in-memory catalog by their SHA-256 (no database read; see
//! `switchyard_core::apikey` on timing); the admin token's digest is compared in
//! constant time. Both `Authorization: Bearer` and the Anthropic
//! `x-api-key` header are accepted.

use super::headers::Field;
use crate::error::ApiError;
use crate::heads::Fields;
use crate::snapshot::LiveConfig;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use switchyard_core::apikey::{bearer_token, KeyHash};
use switchyard_core::catalog::{ApiKey, Catalog, SCOPE_ADMIN};

/// The Anthropic clients' key header.
pub const API_KEY_HEADER: &str = "x-api-key";

/// The presented credential, if any: the `Authorization` header's bearer token, else
/// the `x-api-key` header's value (each read as text).
fn token<'a>(authorization: Option<&'a str>, api_key: Option<&'a str>) -> Option<&'a str> {
    authorization
        .and_then(bearer_token)
        .or_else(|| api_key.map(str::trim).filter(|t| !t.is_empty()))
}

/// The credential presented in `headers`, if any.
pub fn presented_token(headers: &HeaderMap) -> Option<&str> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    token(text(header::AUTHORIZATION.as_str()), text(API_KEY_HEADER))
}

/// Resolves the client key of a request with the given `headers`.
pub fn client_key<'a>(catalog: &'a Catalog, headers: &HeaderMap) -> Result<&'a ApiKey, ApiError> {
    key_of(catalog, presented_token(headers))
}

/// Resolves the client key of an inference request with the given fields.
pub fn request_key<'a>(catalog: &'a Catalog, fields: &Fields) -> Result<&'a ApiKey, ApiError> {
    let presented = token(
        fields.text(Field::Authorization.at()),
        fields.text(Field::ApiKey.at()),
    );
    key_of(catalog, presented)
}

/// The live client key whose token was `presented`.
fn key_of<'a>(catalog: &'a Catalog, presented: Option<&str>) -> Result<&'a ApiKey, ApiError> {
    let token = presented.ok_or(ApiError::MissingKey)?;
    let key = catalog
        .key_by_hash(&KeyHash::of(token))
        .ok_or(ApiError::InvalidKey)?;
    if key.revoked {
        return Err(ApiError::RevokedKey);
    }
    Ok(key)
}

/// Checks the management credential: the admin token, or a live client key with the
/// `admin` scope. No credential or an unknown one is `401`; a live client key without
/// the scope is `403` (the caller is known, the permission is missing).
pub fn check_admin(config: &LiveConfig, headers: &HeaderMap) -> Result<(), ApiError> {
    let token = presented_token(headers).ok_or(ApiError::AdminRequired)?;
    check_admin_hash(config, &KeyHash::of(token))
}

/// The hash of the admin token in force: the configured one, or the generated one.
pub fn admin_hash(config: &LiveConfig) -> Option<KeyHash> {
    config.configured_admin.or(config.snapshot().admin_hash)
}

/// [`check_admin`] for a credential known by its hash: the dashboard keeps only the
/// hash of the credential a session was opened with, and checks it again on every
/// request, so revoking the key or changing the admin token ends the session.
pub fn check_admin_hash(config: &LiveConfig, hash: &KeyHash) -> Result<(), ApiError> {
    let hash = *hash;
    let snap = config.snapshot();
    let admin = config.configured_admin.or(snap.admin_hash);
    if admin.is_some_and(|a| hash.ct_eq(&a)) {
        return Ok(());
    }
    match snap.catalog.key_by_hash(&hash) {
        Some(k) if !k.revoked && k.has_scope(SCOPE_ADMIN) => Ok(()),
        Some(k) if !k.revoked => Err(ApiError::AdminScopeMissing),
        _ => Err(ApiError::AdminRequired),
    }
}

/// Middleware guarding the management API (see [`check_admin`]).
pub async fn require_admin(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    match check_admin(&state.config, request.headers()) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}
