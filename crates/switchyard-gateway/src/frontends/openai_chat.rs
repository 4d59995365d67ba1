//! `POST /v1/chat/completions`: the OpenAI chat-completions front door.
//!
//! The handler names the format and nothing else: decoding, routing and error rendering
//! are the pipeline's, and it never imports an upstream adapter.

use crate::pipeline;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::response::Response;
use std::sync::Arc;
use switchyard_core::format::Format;

/// `POST /v1/chat/completions`.
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    tag = "client",
    request_body(content = serde_json::Value, description = "OpenAI chat-completions request; `model` is `provider/model` or a combo name"),
    responses(
        (status = 200, description = "Completion (JSON) or stream (text/event-stream)"),
        (status = 400, description = "Malformed request"),
        (status = 401, description = "Missing, unknown or revoked API key"),
        (status = 404, description = "Unknown model or nothing executable"),
        (status = 413, description = "Body too large"),
        (status = 429, description = "Upstream rate limited"),
        (status = 502, description = "Upstream failed"),
        (status = 504, description = "Upstream timed out"),
    ),
    security(("bearer" = []))
)]
pub async fn chat_completions(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let fields = pipeline::headers::fields_of(request.headers());
    pipeline::serve(&state, Format::OpenAiChat, request.into_body(), fields).await
}
