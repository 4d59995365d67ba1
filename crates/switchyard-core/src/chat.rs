//! Parsing and normalising an OpenAI chat-completions request.
//!
//! The gateway does not need to understand most of the body: it reads `model` and
//! `stream`, checks the shape a provider would reject anyway (so the client gets a clear
//! 400 before any upstream is charged), and rewrites `model` to the upstream's name.
//! Every other field is passed through unchanged and in its original order.

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::fmt;

/// A validated chat request.
///
/// The body is kept as its top-level members with their raw JSON text, in the client's
/// order: validation reads only the few members it checks, and the upstream body is the
/// same text with `model` replaced — no value tree is ever built for `messages`.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    members: Vec<(String, Box<RawValue>)>,
    /// The model the client asked for (`provider/model` or a combo name).
    pub model: String,
    pub stream: bool,
    /// `max_tokens` / `max_completion_tokens` when the client set one.
    pub max_tokens: Option<u64>,
}

impl PartialEq for ChatRequest {
    fn eq(&self, other: &Self) -> bool {
        self.model == other.model
            && self.stream == other.stream
            && self.max_tokens == other.max_tokens
            && self.members.len() == other.members.len()
            && self
                .members
                .iter()
                .zip(&other.members)
                .all(|((ka, va), (kb, vb))| ka == kb && va.get() == vb.get())
    }
}

/// Why a request body is not a usable chat request. The message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChatParseError {
    #[error("request body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("request body must be a JSON object")]
    NotAnObject,
    #[error("`model` is required and must be a non-empty string")]
    MissingModel,
    #[error("`messages` is required and must be a non-empty array")]
    MissingMessages,
    #[error("`stream` must be a boolean")]
    InvalidStream,
    #[error("`{0}` must be a positive integer")]
    InvalidMaxTokens(&'static str),
    #[error("`{0}` must be at most {MAX_COMPLETION_TOKENS}: no model produces more tokens in one answer")]
    MaxTokensTooLarge(&'static str),
}

impl ChatParseError {
    /// The request member at fault, for the error's `param`.
    pub fn param(&self) -> Option<&'static str> {
        match self {
            Self::InvalidJson(_) | Self::NotAnObject => None,
            Self::MissingModel => Some("model"),
            Self::MissingMessages => Some("messages"),
            Self::InvalidStream => Some("stream"),
            Self::InvalidMaxTokens(f) | Self::MaxTokensTooLarge(f) => Some(f),
        }
    }
}

/// The largest `max_tokens` accepted: 2^20, several times the longest answer any model
/// offers today (128 Ki tokens). Anything larger is a mistake or an attempt to make the
/// quota estimate overflow, and is refused before any upstream is charged.
pub const MAX_COMPLETION_TOKENS: u64 = 1 << 20;

/// Top-level object members in order, values as raw JSON text.
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(entry) = map.next_entry::<String, Box<RawValue>>()? {
                    out.push(entry);
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl ChatRequest {
    pub fn parse(bytes: &[u8]) -> Result<Self, ChatParseError> {
        let members = match serde_json::from_slice::<Members>(bytes) {
            Ok(m) => m.0,
            Err(e) if e.is_data() => return Err(ChatParseError::NotAnObject),
            Err(e) => return Err(ChatParseError::InvalidJson(e.to_string())),
        };
        // The last occurrence of a member wins, as in every JSON object reader.
        let member = |name: &str| {
            members
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.get())
        };
        let model = member("model")
            .and_then(|raw| serde_json::from_str::<String>(raw).ok())
            .filter(|m| !m.is_empty())
            .ok_or(ChatParseError::MissingModel)?;
        // The raw text is already known to be valid JSON, so an array is non-empty
        // exactly when something other than whitespace sits between its brackets.
        let has_messages = member("messages")
            .and_then(|raw| raw.strip_prefix('['))
            .and_then(|rest| rest.strip_suffix(']'))
            .is_some_and(|inner| !inner.trim().is_empty());
        if !has_messages {
            return Err(ChatParseError::MissingMessages);
        }
        let stream = match member("stream") {
            None => false,
            Some(raw) => serde_json::from_str::<Option<bool>>(raw)
                .map_err(|_| ChatParseError::InvalidStream)?
                .unwrap_or(false),
        };
        let mut max_tokens = None;
        for field in ["max_tokens", "max_completion_tokens"] {
            if let Some(raw) = member(field) {
                match serde_json::from_str::<Option<u64>>(raw) {
                    Ok(None) => {}
                    Ok(Some(n)) if n > MAX_COMPLETION_TOKENS => {
                        return Err(ChatParseError::MaxTokensTooLarge(field))
                    }
                    Ok(Some(n)) if n > 0 => max_tokens = Some(n),
                    _ => return Err(ChatParseError::InvalidMaxTokens(field)),
                }
            }
        }
        Ok(Self {
            members,
            model,
            stream,
            max_tokens,
        })
    }

    /// Length of the raw `messages` text: the input to the prompt-size estimate.
    pub fn messages_len(&self) -> usize {
        self.members
            .iter()
            .rev()
            .find(|(k, _)| k == "messages")
            .map_or(0, |(_, v)| v.get().len())
    }

    /// The body to send upstream: the client's members in their order and text, with
    /// `model` replaced by the upstream's model name.
    pub fn upstream_body(&self, upstream_model: &str) -> Vec<u8> {
        let len: usize = self
            .members
            .iter()
            .map(|(k, v)| k.len() + v.get().len() + 4)
            .sum();
        let mut out = Vec::with_capacity(len + upstream_model.len() + 2);
        out.push(b'{');
        for (i, (key, value)) in self.members.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_json_string(&mut out, key);
            out.push(b':');
            if key == "model" {
                write_json_string(&mut out, upstream_model);
            } else {
                out.extend_from_slice(value.get().as_bytes());
            }
        }
        out.push(b'}');
        out
    }
}

fn write_json_string(out: &mut Vec<u8>, s: &str) {
    // Serialising a &str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_model_stream_and_max_tokens() {
        let r = ChatRequest::parse(
            br#"{"model":"a/b","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":7}"#,
        )
        .unwrap();
        assert_eq!(r.model, "a/b");
        assert!(r.stream);
        assert_eq!(r.max_tokens, Some(7));
    }

    #[test]
    fn upstream_body_rewrites_only_model_and_keeps_field_order() {
        let r = ChatRequest::parse(
            br#"{"temperature":0.5,"model":"a/b","messages":[{"role":"user","content":"hi"}],"x":{"y":1}}"#,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(r.upstream_body("b")).unwrap(),
            r#"{"temperature":0.5,"model":"b","messages":[{"role":"user","content":"hi"}],"x":{"y":1}}"#
        );
        assert_eq!(r.model, "a/b");
        assert_eq!(
            String::from_utf8(r.upstream_body("c")).unwrap(),
            r#"{"temperature":0.5,"model":"c","messages":[{"role":"user","content":"hi"}],"x":{"y":1}}"#
        );
    }

    #[test]
    fn raw_member_text_is_kept_exactly_and_duplicate_members_resolve_to_the_last() {
        let r = ChatRequest::parse(
            br#"{ "model" : "x/old", "messages" : [ {"role": "user",  "content": "a\u00e9"} ], "model": "a/b" }"#,
        )
        .unwrap();
        assert_eq!(r.model, "a/b");
        assert_eq!(
            String::from_utf8(r.upstream_body("up")).unwrap(),
            r#"{"model":"up","messages":[ {"role": "user",  "content": "a\u00e9"} ],"model":"up"}"#
        );
    }

    #[test]
    fn rejects_bad_shapes_naming_the_field() {
        let cases: [(&[u8], ChatParseError); 14] = [
            (
                br#"{"model":"a/b","messages":[ ]}"#,
                ChatParseError::MissingMessages,
            ),
            (b"[1]", ChatParseError::NotAnObject),
            (br#""text""#, ChatParseError::NotAnObject),
            (
                br#"{"model":"a/b","messages":{"role":"user"}}"#,
                ChatParseError::MissingMessages,
            ),
            (br#"{"messages":[{}]}"#, ChatParseError::MissingModel),
            (
                br#"{"model":"","messages":[{}]}"#,
                ChatParseError::MissingModel,
            ),
            (br#"{"model":"a/b"}"#, ChatParseError::MissingMessages),
            (
                br#"{"model":"a/b","messages":[]}"#,
                ChatParseError::MissingMessages,
            ),
            (
                br#"{"model":"a/b","messages":[{}],"stream":"yes"}"#,
                ChatParseError::InvalidStream,
            ),
            (
                br#"{"model":"a/b","messages":[{}],"max_tokens":-1}"#,
                ChatParseError::InvalidMaxTokens("max_tokens"),
            ),
            (
                br#"{"model":"a/b","messages":[{}],"max_tokens":18446744073709551615}"#,
                ChatParseError::MaxTokensTooLarge("max_tokens"),
            ),
            (
                br#"{"model":"a/b","messages":[{}],"max_completion_tokens":1048577}"#,
                ChatParseError::MaxTokensTooLarge("max_completion_tokens"),
            ),
            (
                br#"{"model":"a/b","messages":[{}],"max_tokens":18446744073709551616}"#,
                ChatParseError::InvalidMaxTokens("max_tokens"),
            ),
            (
                br#"{"model":"a/b","messages":[{}],"max_tokens":0}"#,
                ChatParseError::InvalidMaxTokens("max_tokens"),
            ),
        ];
        for (body, want) in cases {
            assert_eq!(ChatRequest::parse(body), Err(want));
        }
        let largest =
            format!(r#"{{"model":"a/b","messages":[{{}}],"max_tokens":{MAX_COMPLETION_TOKENS}}}"#);
        assert_eq!(
            ChatRequest::parse(largest.as_bytes()).map(|r| r.max_tokens),
            Ok(Some(MAX_COMPLETION_TOKENS))
        );
        assert_eq!(
            ChatParseError::MaxTokensTooLarge("max_tokens").param(),
            Some("max_tokens")
        );
        assert!(matches!(
            ChatRequest::parse(b"{not json"),
            Err(ChatParseError::InvalidJson(_))
        ));
    }
}
