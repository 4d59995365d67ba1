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

use crate::edge::{Answer, Direct, Fields, Taken};
use crate::pipeline;
use crate::state::AppState;
use axum::body::Body;
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

/// An inference route, numbered as [`Direct::take`] gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Chat,
    Messages,
    CountTokens,
    Responses,
}

impl Route {
    const ALL: [Self; 4] = [
        Self::Chat,
        Self::Messages,
        Self::CountTokens,
        Self::Responses,
    ];

    fn of(method: &Method, path: &[u8]) -> Option<Self> {
        if method != Method::POST {
            return None;
        }
        match path {
            b"/v1/chat/completions" => Some(Self::Chat),
            b"/v1/messages" => Some(Self::Messages),
            b"/v1/messages/count_tokens" => Some(Self::CountTokens),
            b"/v1/responses" => Some(Self::Responses),
            _ => None,
        }
    }
}

impl Direct for Inference {
    fn take(&self, method: &Method, path: &[u8]) -> Option<Taken> {
        Route::of(method, path).map(|route| Taken {
            route: route as usize,
            reads: pipeline::headers::read_name,
        })
    }

    fn call(&self, route: usize, body: Body, fields: Fields) -> Answer {
        let state = Arc::clone(&self.0);
        let Some(&route) = Route::ALL.get(route) else {
            // Not a number `take` gave: the edge never passes one.
            return Box::pin(async { (StatusCode::NOT_FOUND.into_response(), None) });
        };
        match route {
            Route::Chat => Box::pin(async move {
                pipeline::serve_direct(&state, Format::OpenAiChat, body, fields).await
            }),
            Route::Messages => Box::pin(async move {
                pipeline::serve_direct(&state, Format::AnthropicMessages, body, fields).await
            }),
            Route::CountTokens => Box::pin(async move {
                let answer =
                    pipeline::count_tokens(&state, Format::AnthropicMessages, body, fields).await;
                (answer, None)
            }),
            Route::Responses => Box::pin(async move {
                pipeline::serve_direct(&state, Format::Responses, body, fields).await
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inference_route_is_taken_by_method_and_path_as_sent() {
        let taken = |method: &Method, path: &str| {
            Route::of(method, path.as_bytes()).map(|route| Route::ALL[route as usize])
        };
        assert_eq!(
            taken(&Method::POST, "/v1/chat/completions"),
            Some(Route::Chat)
        );
        assert_eq!(taken(&Method::POST, "/v1/messages"), Some(Route::Messages));
        assert_eq!(
            taken(&Method::POST, "/v1/messages/count_tokens"),
            Some(Route::CountTokens)
        );
        assert_eq!(
            taken(&Method::POST, "/v1/responses"),
            Some(Route::Responses)
        );
        for (method, path) in [
            (Method::GET, "/v1/chat/completions"),
            (Method::POST, "/v1/chat/completions/"),
            (Method::POST, "/V1/messages"),
            (Method::POST, "/v1/models"),
            (Method::POST, "/api/keys"),
        ] {
            assert_eq!(taken(&method, path), None, "{method} {path}");
        }
    }
}
