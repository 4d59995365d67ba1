//! `POST /api/v1/session-leases` (SPEC R16): a lease-capable client key acquires,
//! renews, releases or asks the status of its exclusive lease. Authenticated with the
//! client key, not the admin credential; the operations are
//! [`services::leases`](crate::services::leases)'.

use crate::error::{ApiError, ApiJson};
use crate::pipeline::auth;
use crate::services::leases::{self as svc, LeaseAnswer, LeaseRequest};
use crate::state::AppState;
use axum::extract::{FromRequest, Request, State};
use axum::Json;
use std::sync::Arc;

/// The lease endpoint's path.
pub const PATH: &str = "/api/v1/session-leases";

/// `POST /api/v1/session-leases`.
#[utoipa::path(post, path = "/api/v1/session-leases", tag = "client",
    request_body = LeaseRequest,
    responses(
        (status = 200, body = LeaseAnswer),
        (status = 400, description = "Malformed owner, generation, ttl_ms or body"),
        (status = 401, description = "Missing, unknown or revoked API key"),
        (status = 403, description = "`lease-not-permitted` (no `lease:exclusive` scope or no allowedConnections) or `lease-owner-mismatch`"),
        (status = 404, description = "`lease-not-active`: the owner holds no active lease"),
        (status = 409, description = "`lease-stale-generation`"),
        (status = 429, description = "`lease-capacity-unavailable`: every connection the key may lease is held; `Retry-After`"),
        (status = 503, description = "`lease-no-eligible-connection` or `lease-limit-reached`"),
    ),
    security(("bearer" = []), ("x-api-key" = [])))]
pub async fn session_leases(
    State(state): State<Arc<AppState>>,
    request: Request,
) -> Result<Json<LeaseAnswer>, ApiError> {
    let snap = state.snapshot();
    // The key before the body: a caller without one learns nothing of the body's faults.
    let key = auth::client_key(&snap.catalog, request.headers())?;
    let ApiJson(body) = ApiJson::<LeaseRequest>::from_request(request, &()).await?;
    svc::act(&state, key, body).await.map(Json)
}
