//! Client front doors: one thin handler per client API, each naming its format and
//! handing the request to [`crate::pipeline::serve`], which decodes it into the
//! normalized request, runs it, and renders errors in that format. A new client API is a
//! module here and its line in [`routes()`]; front doors never see upstream adapters.
//!
//! The inference routes are also answered without the router ([`Inference`], issue 29):
//! the edge asks it first, and the router's matching and boxing are a measurable share
//! of a request's work. Both call the same handlers.

mod anthropic_messages;
pub mod leases;
pub mod models;
mod openai_chat;
mod responses;

use crate::edge::{Answer, Direct};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use http::Method;
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

/// The inference routes (`POST` chat, messages, count_tokens, responses), for the edge
/// to answer without the router.
pub struct Inference(pub Arc<AppState>);

impl std::fmt::Debug for Inference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inference").finish_non_exhaustive()
    }
}

impl Direct for Inference {
    fn call(&self, request: Request<Body>) -> Result<Answer, Request<Body>> {
        if request.method() != Method::POST {
            return Err(request);
        }
        let state = State(Arc::clone(&self.0));
        Ok(match request.uri().path() {
            "/v1/chat/completions" => Box::pin(openai_chat::chat_completions(state, request)),
            "/v1/messages" => Box::pin(anthropic_messages::messages(state, request)),
            "/v1/messages/count_tokens" => {
                Box::pin(anthropic_messages::count_tokens(state, request))
            }
            "/v1/responses" => Box::pin(responses::responses(state, request)),
            _ => return Err(request),
        })
    }
}
