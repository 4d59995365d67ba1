//! Client front doors: one thin handler per client API, each naming its format and
//! handing the request to [`crate::pipeline::serve`], which decodes it into the
//! normalized request, runs it, and renders errors in that format. A new client API is a
//! module here and its line in [`routes()`]; front doors never see upstream adapters.

mod anthropic_messages;
pub mod leases;
pub mod models;
mod openai_chat;
mod responses;

use crate::state::AppState;
use std::sync::Arc;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The client API routes (documented in the OpenAPI description).
pub fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(openai_chat::chat_completions))
        .routes(routes!(anthropic_messages::messages))
        .routes(routes!(anthropic_messages::count_tokens))
        .routes(routes!(responses::responses))
        .routes(routes!(models::models))
        .routes(routes!(leases::session_leases))
}
