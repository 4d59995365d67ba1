//! `POST /v1/responses`: the OpenAI Responses front door (Codex CLI, the OpenAI SDKs'
//! `responses.create`). Like every front door, the handler only names its format.

use crate::pipeline;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::response::Response;
use std::sync::Arc;
use switchyard_core::format::Format;

/// `POST /v1/responses`.
#[utoipa::path(
    post,
    path = "/v1/responses",
    tag = "client",
    request_body(content = serde_json::Value, description = "OpenAI Responses request; `model` is `provider/model` or a combo name. `previous_response_id` is refused: nothing is stored, send the whole conversation"),
    responses(
        (status = 200, description = "Response (JSON) or event stream (text/event-stream)"),
        (status = 400, description = "Malformed request"),
        (status = 401, description = "Missing, unknown or revoked API key"),
        (status = 404, description = "Unknown model or nothing executable"),
        (status = 413, description = "Body too large"),
        (status = 429, description = "Rate limited or over quota"),
        (status = 502, description = "Upstream failed"),
        (status = 504, description = "Upstream timed out"),
    ),
    security(("bearer" = []))
)]
pub async fn responses(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let fields = pipeline::headers::fields_of(request.headers());
    pipeline::serve(&state, Format::Responses, request.into_body(), fields).await
}
