//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: the Anthropic Messages front
//! door (Claude Code, the Anthropic SDKs). Claude Code adds `?beta=true` to every call;
//! the query string is ignored.
//!
//! Like every front door, the handlers only name their format: decoding, routing,
//! translation and error rendering are the pipeline's.

use crate::pipeline;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::response::Response;
use std::sync::Arc;
use switchyard_core::format::Format;

/// `POST /v1/messages`.
#[utoipa::path(
    post,
    path = "/v1/messages",
    tag = "client",
    request_body(content = serde_json::Value, description = "Anthropic Messages request; `model` is `provider/model` or a combo name"),
    responses(
        (status = 200, description = "Message (JSON) or event stream (text/event-stream)"),
        (status = 400, description = "Malformed request"),
        (status = 401, description = "Missing, unknown or revoked API key"),
        (status = 404, description = "Unknown model or nothing executable"),
        (status = 413, description = "Body too large"),
        (status = 429, description = "Rate limited or over quota"),
        (status = 502, description = "Upstream failed"),
        (status = 504, description = "Upstream timed out"),
    ),
    security(("x-api-key" = []), ("bearer" = []))
)]
pub async fn messages(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let fields = pipeline::headers::fields_of(request.headers());
    pipeline::serve(
        &state,
        Format::AnthropicMessages,
        request.into_body(),
        fields,
    )
    .await
}

/// `POST /v1/messages/count_tokens`: the prompt's input tokens, counted by the first
/// Anthropic-format upstream the model routes to, or estimated by the gateway when it
/// routes to none.
#[utoipa::path(
    post,
    path = "/v1/messages/count_tokens",
    tag = "client",
    request_body(content = serde_json::Value, description = "Anthropic Messages request without `max_tokens`"),
    responses(
        (status = 200, description = "`{\"input_tokens\": N}`"),
        (status = 400, description = "Malformed request"),
        (status = 401, description = "Missing, unknown or revoked API key"),
        (status = 404, description = "Unknown model"),
    ),
    security(("x-api-key" = []), ("bearer" = []))
)]
pub async fn count_tokens(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let fields = pipeline::headers::fields_of(request.headers());
    pipeline::count_tokens(
        &state,
        Format::AnthropicMessages,
        request.into_body(),
        fields,
    )
    .await
}
