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

use crate::edge::{Answer, Direct, Reads};
use crate::pipeline;
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

/// An inference route.
#[derive(Debug, Clone, Copy)]
enum Route {
    Chat,
    Messages,
    CountTokens,
    Responses,
}

impl Route {
    fn of(method: &Method, path: &str) -> Option<Self> {
        if method != Method::POST {
            return None;
        }
        match path {
            "/v1/chat/completions" => Some(Self::Chat),
            "/v1/messages" => Some(Self::Messages),
            "/v1/messages/count_tokens" => Some(Self::CountTokens),
            "/v1/responses" => Some(Self::Responses),
            _ => None,
        }
    }
}

impl Direct for Inference {
    fn reads(&self, method: &Method, path: &str) -> Option<Reads> {
        Route::of(method, path).map(|_| pipeline::headers::read_name as Reads)
    }

    fn call(&self, request: Request<Body>) -> Result<Answer, Request<Body>> {
        let Some(route) = Route::of(request.method(), request.uri().path()) else {
            return Err(request);
        };
        let state = State(Arc::clone(&self.0));
        Ok(match route {
            Route::Chat => Box::pin(openai_chat::chat_completions(state, request)),
            Route::Messages => Box::pin(anthropic_messages::messages(state, request)),
            Route::CountTokens => Box::pin(anthropic_messages::count_tokens(state, request)),
            Route::Responses => Box::pin(responses::responses(state, request)),
        })
    }
}
