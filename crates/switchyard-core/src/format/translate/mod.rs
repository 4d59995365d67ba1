//! Translation between API formats, for a client whose format the chosen upstream does
//! not speak: the request body into the upstream's format, and the answer — a JSON
//! body, an error body or an event stream — back into the client's. One module per
//! (client, upstream) pair; [`map`] holds the mappings both directions share.
//!
//! Pure functions and state machines over bytes: no I/O, no clock. A member with no
//! counterpart in the other format is dropped (the README's translation table lists
//! them); when client and upstream speak the same format nothing here runs and the
//! body passes through ([`crate::llm::Request::upstream_body`]).

pub mod chat_over_messages;
pub mod chat_over_responses;
pub mod map;
pub mod messages_over_chat;
pub mod responses_over_chat;
pub mod unsigned;

use super::Format;
use crate::llm::Request;

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
    match (req.format, upstream) {
        (Format::AnthropicMessages, Format::OpenAiChat) => {
            messages_over_chat::request(&req.body, model, max_tokens, req.stream)
        }
        (Format::OpenAiChat, Format::AnthropicMessages) => chat_over_messages::request(
            &req.body,
            model,
            max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            req.stream,
        ),
        (client, upstream) if client == upstream => Ok(req.body.with_model(model)),
        _ => Err(TranslateError::Request(format!(
            "no translation from {} to {}",
            req.format.as_str(),
            upstream.as_str()
        ))),
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
    match (client, upstream) {
        (Format::AnthropicMessages, Format::OpenAiChat) => messages_over_chat::response(body),
        (Format::OpenAiChat, Format::AnthropicMessages) => {
            chat_over_messages::response_at(body, now_s)
        }
        _ => Ok(body.to_vec()),
    }
}

/// An upstream error body (relayed for a client error) in the client's format.
pub fn error(client: Format, upstream: Format, status: u16, body: &[u8]) -> Vec<u8> {
    match (client, upstream) {
        (Format::AnthropicMessages, Format::OpenAiChat) => messages_over_chat::error(status, body),
        (Format::OpenAiChat, Format::AnthropicMessages) => chat_over_messages::error(status, body),
        _ => body.to_vec(),
    }
}

/// An upstream event stream rewritten into the client's format, chunk by chunk.
#[derive(Debug)]
pub enum Stream {
    MessagesOverChat(messages_over_chat::Stream),
    ChatOverMessages(chat_over_messages::Stream),
}

impl Stream {
    /// The translator for a client speaking `client` over an upstream speaking
    /// `upstream`; `None` when they are the same (the stream is relayed as it is).
    /// `now_s` (unix seconds) dates chunks of formats that carry a creation time.
    pub fn new(client: Format, upstream: Format, now_s: u64) -> Option<Self> {
        match (client, upstream) {
            (Format::AnthropicMessages, Format::OpenAiChat) => {
                Some(Self::MessagesOverChat(messages_over_chat::Stream::default()))
            }
            (Format::OpenAiChat, Format::AnthropicMessages) => Some(Self::ChatOverMessages(
                chat_over_messages::Stream::at(now_s),
            )),
            _ => None,
        }
    }

    /// Reads an upstream chunk (any boundaries) and appends the client's frames it
    /// completes to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        match self {
            Self::MessagesOverChat(s) => s.feed(chunk, out),
            Self::ChatOverMessages(s) => s.feed(chunk, out),
        }
    }

    /// Whether the translation ended with an error frame (the upstream's error, or an
    /// event too large to read): nothing more will be translated.
    pub fn ended_by_error(&self) -> bool {
        match self {
            Self::MessagesOverChat(s) => s.ended_by_error(),
            Self::ChatOverMessages(s) => s.ended_by_error(),
        }
    }

    /// The upstream stream ended: appends what closes a complete answer (nothing when
    /// the answer was not complete, so the client sees the stream as truncated).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        match self {
            Self::MessagesOverChat(s) => s.finish(out),
            Self::ChatOverMessages(s) => s.finish(out),
        }
    }
}
