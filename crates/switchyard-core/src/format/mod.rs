//! The API formats Switchyard speaks, to clients and to upstreams: decoding a client body
//! into the normalized [`crate::llm::Request`], and reading an upstream's stream for
//! usage and completeness. One module per format; a new format is a module here, a
//! variant of [`Format`], and its arms in the matches below and in
//! [`translate`]. Pure functions only.

pub mod anthropic_messages;
pub mod openai_chat;
pub mod responses;
pub mod translate;

use crate::domain::UpstreamFormat;
use crate::llm::{RawObjectError, Request};
use crate::usage::Usage;

/// An API format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// OpenAI chat completions (`POST /v1/chat/completions`).
    OpenAiChat,
    /// Anthropic Messages (`POST /v1/messages`).
    AnthropicMessages,
    /// OpenAI Responses (`POST /v1/responses`).
    Responses,
}

impl Format {
    /// The format an upstream of `kind` speaks.
    pub fn of_upstream(kind: UpstreamFormat) -> Self {
        match kind {
            UpstreamFormat::Openai => Self::OpenAiChat,
            UpstreamFormat::Anthropic => Self::AnthropicMessages,
            UpstreamFormat::Responses => Self::Responses,
        }
    }

    /// The format's name in the request log and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAiChat => "openai",
            Self::AnthropicMessages => "anthropic",
            Self::Responses => "responses",
        }
    }

    /// Decodes a client body of this format.
    pub fn decode(self, bytes: &[u8]) -> Result<Request, DecodeError> {
        match self {
            Self::OpenAiChat => openai_chat::decode(bytes),
            Self::AnthropicMessages => anthropic_messages::decode(bytes),
            Self::Responses => responses::decode(bytes),
        }
    }

    /// A reader of an upstream stream in this format.
    pub fn stream_reader(self) -> StreamReader {
        match self {
            Self::OpenAiChat => StreamReader::OpenAiChat(openai_chat::StreamReader::default()),
            Self::AnthropicMessages => {
                StreamReader::AnthropicMessages(anthropic_messages::StreamReader::default())
            }
            Self::Responses => StreamReader::Responses(responses::StreamReader::default()),
        }
    }
}

/// Why a client body is not a usable request. The message names the member.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("request body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("request body must be a JSON object")]
    NotAnObject,
    #[error("`model` is required and must be a non-empty string")]
    MissingModel,
    #[error("`messages` is required and must be a non-empty array")]
    MissingMessages,
    #[error("`input` is required and must be a non-empty string or array")]
    MissingInput,
    #[error("`previous_response_id` is not supported: Switchyard does not store responses; send the whole conversation in `input` (as Codex does)")]
    PreviousResponse,
    #[error("`stream` must be a boolean")]
    InvalidStream,
    #[error("`{0}` must be a positive integer")]
    InvalidMaxTokens(&'static str),
    #[error("`{0}` must be at most {MAX_COMPLETION_TOKENS}: no model produces more tokens in one answer")]
    MaxTokensTooLarge(&'static str),
}

impl From<RawObjectError> for DecodeError {
    fn from(e: RawObjectError) -> Self {
        match e {
            RawObjectError::InvalidJson(m) => Self::InvalidJson(m),
            RawObjectError::NotAnObject => Self::NotAnObject,
        }
    }
}

impl DecodeError {
    /// The request member at fault, for the error's `param`.
    pub fn param(&self) -> Option<&'static str> {
        match self {
            Self::InvalidJson(_) | Self::NotAnObject => None,
            Self::MissingModel => Some("model"),
            Self::MissingMessages => Some("messages"),
            Self::MissingInput => Some("input"),
            Self::PreviousResponse => Some("previous_response_id"),
            Self::InvalidStream => Some("stream"),
            Self::InvalidMaxTokens(f) | Self::MaxTokensTooLarge(f) => Some(f),
        }
    }
}

/// The largest `max_tokens` accepted: 2^20, several times the longest answer any model
/// offers today (128 Ki tokens). Anything larger is a mistake or an attempt to make the
/// quota estimate overflow, and is refused before any upstream is charged.
pub const MAX_COMPLETION_TOKENS: u64 = 1 << 20;

/// Reads an upstream stream, chunk by chunk as relayed, for what the gateway must know
/// of it: usage, generated text, whether the answer completed.
#[derive(Debug)]
pub enum StreamReader {
    OpenAiChat(openai_chat::StreamReader),
    AnthropicMessages(anthropic_messages::StreamReader),
    Responses(responses::StreamReader),
}

impl StreamReader {
    /// Reads a relayed chunk; returns the characters of generated text in it.
    pub fn feed(&mut self, chunk: &[u8]) -> usize {
        match self {
            Self::OpenAiChat(r) => r.feed(chunk),
            Self::AnthropicMessages(r) => r.feed(chunk),
            Self::Responses(r) => r.feed(chunk),
        }
    }

    /// The usage reported so far.
    pub fn usage(&self) -> Option<Usage> {
        match self {
            Self::OpenAiChat(r) => r.usage(),
            Self::AnthropicMessages(r) => r.usage(),
            Self::Responses(r) => r.usage(),
        }
    }

    /// Whether the answer is whole: the stream's own end marker was seen.
    pub fn complete(&self) -> bool {
        match self {
            Self::OpenAiChat(r) => r.complete(),
            Self::AnthropicMessages(r) => r.complete(),
            Self::Responses(r) => r.complete(),
        }
    }

    /// Whether the stream carried an error event (the upstream's, or a translator's):
    /// the client was told, and a stream ending after it is not truncated.
    pub fn errored(&self) -> bool {
        match self {
            Self::OpenAiChat(r) => r.errored(),
            Self::AnthropicMessages(r) => r.errored(),
            Self::Responses(r) => r.errored(),
        }
    }

    /// What ends the client stream when the gateway cuts it after `error` (a JSON error
    /// body in the client's format): the format's final event marking the answer as cut
    /// for length, the error, and the end marker.
    pub fn cut_frames(&mut self, error: &serde_json::Value) -> String {
        match self {
            Self::OpenAiChat(r) => r.cut_frames(error),
            Self::AnthropicMessages(r) => r.cut_frames(error),
            Self::Responses(r) => r.cut_frames(error),
        }
    }
}
