//! Translation between API formats, for a client whose format the chosen upstream does
//! not speak: the request body into the upstream's format, and the answer — a JSON
//! body, an error body or an event stream — back into the client's. One module per
//! (client, upstream) pair with chat completions on one side; [`map`] holds the
//! mappings the pairs share, `chat` what they read and write alike on the chat side, and
//! `json` the reading of JSON with refusals that name the member's path. Chat is the
//! hub: a Responses client over an Anthropic upstream, or an Anthropic client over a
//! Responses upstream, goes through chat — the request through both pairs one way, the
//! answer and the stream (two translators in a row) the other. What chat cannot carry between them (Anthropic's cache writes and
//! signed thinking, Responses' encrypted reasoning) is dropped, as it is for a chat
//! client.
//!
//! Pure functions and state machines over bytes: no I/O, no clock. A member with no
//! counterpart in the other format is dropped (docs/formats.md's translation tables list
//! them); when client and upstream speak the same format nothing here runs and the
//! body passes through ([`crate::llm::Request::upstream_body`]).

mod chat;
pub mod chat_over_messages;
pub mod chat_over_responses;
mod json;
pub mod map;
pub mod messages_over_chat;
pub mod responses_over_chat;
pub mod unsigned;

use super::Format;
use crate::llm::{RawObject, Request};

/// Why a translation cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranslateError {
    /// The client's request holds something the upstream's format cannot express, or
    /// is malformed where the translation must read it; the message names the member.
    #[error("{0}")]
    Request(String),
    /// The upstream's answer is not a well-formed answer of its format.
    #[error("the upstream answer could not be translated: {0}")]
    Response(String),
}

/// The default output bound sent to an Anthropic upstream, which requires one, when
/// neither the client nor the model's configured limit gives one.
pub const DEFAULT_MAX_TOKENS: u64 = 8192;

/// The request body in `upstream`'s format, for `model`, with the output bound
/// `max_tokens` (already clamped to the model's limit).
pub fn request(
    req: &Request,
    upstream: Format,
    model: &str,
    max_tokens: Option<u64>,
) -> Result<Vec<u8>, TranslateError> {
    if req.format == upstream {
        return Ok(req.body.with_model(model));
    }
    let (body, stream) = (&req.body, req.stream);
    let chat = match req.format {
        Format::OpenAiChat => None,
        Format::AnthropicMessages => Some(messages_over_chat::request(
            body, model, max_tokens, stream,
        )?),
        Format::Responses => Some(responses_over_chat::request(
            body, model, max_tokens, stream,
        )?),
    };
    if upstream == Format::OpenAiChat {
        return Ok(chat.unwrap_or_else(|| req.body.with_model(model)));
    }
    let parsed;
    let body = match &chat {
        None => body,
        Some(bytes) => {
            parsed = RawObject::parse(bytes).map_err(|_| {
                TranslateError::Request("the translated request is not an object".into())
            })?;
            &parsed
        }
    };
    match upstream {
        Format::OpenAiChat => Ok(body.with_model(model)),
        Format::AnthropicMessages => chat_over_messages::request(
            body,
            model,
            max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            req.stream,
        ),
        Format::Responses => chat_over_responses::request(body, model, max_tokens, req.stream),
    }
}

/// A non-streamed upstream answer in the client's format; `now_s` (unix seconds) dates
/// answers whose format carries a creation time the upstream's does not.
pub fn response(
    client: Format,
    upstream: Format,
    body: &[u8],
    now_s: u64,
) -> Result<Vec<u8>, TranslateError> {
    if client == upstream {
        return Ok(body.to_vec());
    }
    let chat = match upstream {
        Format::OpenAiChat => body.to_vec(),
        Format::AnthropicMessages => chat_over_messages::response_at(body, now_s)?,
        Format::Responses => chat_over_responses::response_at(body, now_s)?,
    };
    match client {
        Format::OpenAiChat => Ok(chat),
        Format::AnthropicMessages => messages_over_chat::response(&chat),
        Format::Responses => responses_over_chat::response_at(&chat, now_s),
    }
}

/// An upstream error body (relayed for a client error) in the client's format.
pub fn error(client: Format, upstream: Format, status: u16, body: &[u8]) -> Vec<u8> {
    if client == upstream {
        return body.to_vec();
    }
    let chat = match upstream {
        Format::OpenAiChat => body.to_vec(),
        Format::AnthropicMessages => chat_over_messages::error(status, body),
        Format::Responses => chat_over_responses::error(status, body),
    };
    match client {
        Format::OpenAiChat => chat,
        Format::AnthropicMessages => messages_over_chat::error(status, &chat),
        Format::Responses => responses_over_chat::error(status, &chat),
    }
}

/// An upstream event stream rewritten into the client's format, chunk by chunk.
#[derive(Debug)]
pub enum Stream {
    MessagesOverChat(messages_over_chat::Stream),
    ChatOverMessages(chat_over_messages::Stream),
    ResponsesOverChat(responses_over_chat::Stream),
    ChatOverResponses(chat_over_responses::Stream),
    /// Upstream to chat, then chat to the client's format.
    ThroughChat(Box<(Stream, Stream)>),
}

impl Stream {
    /// The translator for a client speaking `client` over an upstream speaking
    /// `upstream`; `None` when they are the same (the stream is relayed as it is).
    /// `now_s` (unix seconds) dates chunks of formats that carry a creation time.
    pub fn new(client: Format, upstream: Format, now_s: u64) -> Option<Self> {
        if client == upstream {
            return None;
        }
        let from_upstream = match upstream {
            Format::OpenAiChat => None,
            Format::AnthropicMessages => Some(Self::ChatOverMessages(
                chat_over_messages::Stream::at(now_s),
            )),
            Format::Responses => Some(Self::ChatOverResponses(chat_over_responses::Stream::at(
                now_s,
            ))),
        };
        let to_client = match client {
            Format::OpenAiChat => None,
            Format::AnthropicMessages => {
                Some(Self::MessagesOverChat(messages_over_chat::Stream::default()))
            }
            Format::Responses => Some(Self::ResponsesOverChat(responses_over_chat::Stream::at(
                now_s,
            ))),
        };
        match (from_upstream, to_client) {
            (Some(first), Some(second)) => Some(Self::ThroughChat(Box::new((first, second)))),
            (one, other) => one.or(other),
        }
    }

    /// Reads an upstream chunk (any boundaries) and appends the client's frames it
    /// completes to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        match self {
            Self::MessagesOverChat(s) => s.feed(chunk, out),
            Self::ChatOverMessages(s) => s.feed(chunk, out),
            Self::ResponsesOverChat(s) => s.feed(chunk, out),
            Self::ChatOverResponses(s) => s.feed(chunk, out),
            Self::ThroughChat(pair) => {
                let (first, second) = &mut **pair;
                let mut chat = Vec::new();
                first.feed(chunk, &mut chat);
                second.feed(&chat, out);
            }
        }
    }

    /// Whether the translation ended with an error frame (the upstream's error, or an
    /// event too large to read): nothing more will be translated.
    pub fn ended_by_error(&self) -> bool {
        match self {
            Self::MessagesOverChat(s) => s.ended_by_error(),
            Self::ChatOverMessages(s) => s.ended_by_error(),
            Self::ResponsesOverChat(s) => s.ended_by_error(),
            Self::ChatOverResponses(s) => s.ended_by_error(),
            Self::ThroughChat(pair) => pair.0.ended_by_error() || pair.1.ended_by_error(),
        }
    }

    /// The upstream stream ended: appends what closes a complete answer (nothing when
    /// the answer was not complete, so the client sees the stream as truncated).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        match self {
            Self::MessagesOverChat(s) => s.finish(out),
            Self::ChatOverMessages(s) => s.finish(out),
            Self::ResponsesOverChat(s) => s.finish(out),
            Self::ChatOverResponses(s) => s.finish(out),
            Self::ThroughChat(pair) => {
                let (first, second) = &mut **pair;
                let mut chat = Vec::new();
                first.finish(&mut chat);
                second.feed(&chat, out);
                second.finish(out);
            }
        }
    }
}
