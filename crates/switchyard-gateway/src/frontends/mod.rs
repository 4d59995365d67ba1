//! Client front doors: one thin handler per client API, each naming its format and
//! handing the request to [`crate::pipeline::serve`], which decodes it into the
//! normalized request, runs it, and renders errors in that format. A new client API is a
//! module here and its line in [`routes()`]; front doors never see upstream adapters.
//!
//! The inference routes are also answered without the router ([`Inference`], issue 29):
//! the edge asks it first, and the router's matching and boxing are a measurable share
//! of a request's work. Both call the same pipeline entry points: the router's handlers
//! with the fields the pipeline reads taken from the request's header map, the direct
//! routes with those the edge kept from the head.

mod anthropic_messages;
pub mod leases;
pub mod models;
mod openai_chat;
mod responses;

use crate::edge::{Answer, Direct, Fields, Numbers};
use crate::pipeline;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::Request;
use axum::response::IntoResponse;
use http::{Method, StatusCode};
use std::sync::Arc;
use switchyard_core::format::Format;
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
    fn reads(&self, method: &Method, path: &str) -> Option<Numbers> {
        Route::of(method, path).map(|_| pipeline::headers::read_name as Numbers)
    }

    fn call(&self, request: Request<Body>, fields: Fields) -> Answer {
        let state = Arc::clone(&self.0);
        let Some(route) = Route::of(request.method(), request.uri().path()) else {
            // Not a request `reads` took: the edge never asks for one.
            return Box::pin(async { StatusCode::NOT_FOUND.into_response() });
        };
        let body = request.into_body();
        match route {
            Route::Chat => {
                Box::pin(
                    async move { pipeline::serve(&state, Format::OpenAiChat, body, fields).await },
                )
            }
            Route::Messages => Box::pin(async move {
                pipeline::serve(&state, Format::AnthropicMessages, body, fields).await
            }),
            Route::CountTokens => Box::pin(async move {
                pipeline::count_tokens(&state, Format::AnthropicMessages, body, fields).await
            }),
            Route::Responses => {
                Box::pin(
                    async move { pipeline::serve(&state, Format::Responses, body, fields).await },
                )
            }
        }
    }
}
