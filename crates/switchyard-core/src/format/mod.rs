//! The API formats Switchyard speaks, to clients and to upstreams: decoding a client body
//! into the normalized [`crate::llm::Request`], and reading an upstream's stream for
//! usage and completeness. One module per format; a new format is a module here, a
//! variant of [`Format`], and its arms in the matches below and in
//! [`translate`]. Pure functions only.

pub mod anthropic_messages;
pub mod compose;
pub mod openai_chat;
pub mod responses;
pub mod translate;

use crate::domain::UpstreamFormat;
use crate::llm::{RawObjectError, Request};
use crate::stream::Progress;
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

/// Reads a stream, chunk by chunk as relayed, for what the gateway must know of it: the
/// [`Progress`] of each chunk (output, reasoning, heartbeats, text; the watchdogs and
/// the quota read it), usage, whether the answer completed or carried an error.
#[derive(Debug)]
pub enum StreamReader {
    OpenAiChat(openai_chat::StreamReader),
    AnthropicMessages(anthropic_messages::StreamReader),
    Responses(responses::StreamReader),
}

impl StreamReader {
    /// Reads a relayed chunk: what it carried.
    pub fn feed(&mut self, chunk: &[u8]) -> Progress {
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

    /// The data of the stream's first error event, for the verdict (SPEC R13).
    pub fn error_event(&self) -> Option<&str> {
        match self {
            Self::OpenAiChat(r) => r.error_event(),
            Self::AnthropicMessages(r) => r.error_event(),
            Self::Responses(r) => r.error_event(),
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

/// A stream event's member read as text when it is a string, and as nothing when it is
/// anything else (`null`, a number, an object): a reader must not lose a whole event to
/// one member an upstream shapes its own way. Borrowed when the text has no escapes.
#[derive(Debug, Default)]
pub(crate) struct Text<'a>(pub Option<std::borrow::Cow<'a, str>>);

impl Text<'_> {
    /// The text, empty when there is none.
    pub(crate) fn as_str(&self) -> &str {
        self.0.as_deref().unwrap_or_default()
    }
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
        use std::borrow::Cow;
        use std::marker::PhantomData;
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Some(Cow::Owned(v))))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Text(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Text(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Text(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Text(None))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Text(None))
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(Text(None))
            }
            fn visit_some<D: serde::Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<Self::Value, D::Error> {
                <Text<'a> as serde::Deserialize<'de>>::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// Most bytes of a stream's error event kept for the verdict: error events are short.
pub const MAX_ERROR_EVENT_BYTES: usize = 4096;

/// An error event's data as kept: at most [`MAX_ERROR_EVENT_BYTES`], cut at a character
/// boundary.
fn error_event_text(data: &str) -> String {
    let mut end = data.len().min(MAX_ERROR_EVENT_BYTES);
    while !data.is_char_boundary(end) {
        end -= 1;
    }
    data[..end].to_owned()
}
