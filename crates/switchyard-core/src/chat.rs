//! Parsing and normalising an OpenAI chat-completions request.
//!
//! The gateway does not need to understand most of the body: it reads `model` and
//! `stream`, checks the shape a provider would reject anyway (so the client gets a clear
//! 400 before any upstream is charged), and rewrites `model` to the upstream's name.
//! Every other field is passed through unchanged and in its original order.

use serde_json::{Map, Value};

/// A validated chat request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    body: Map<String, Value>,
    /// The model the client asked for (`provider/model` or a combo name).
    pub model: String,
    pub stream: bool,
    /// `max_tokens` / `max_completion_tokens` when the client set one.
    pub max_tokens: Option<u64>,
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
}

impl ChatRequest {
    pub fn parse(bytes: &[u8]) -> Result<Self, ChatParseError> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| ChatParseError::InvalidJson(e.to_string()))?;
        let Value::Object(body) = value else {
            return Err(ChatParseError::NotAnObject);
        };
        let model = match body.get("model") {
            Some(Value::String(m)) if !m.is_empty() => m.clone(),
            _ => return Err(ChatParseError::MissingModel),
        };
        match body.get("messages") {
            Some(Value::Array(a)) if !a.is_empty() => {}
            _ => return Err(ChatParseError::MissingMessages),
        }
        let stream = match body.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(ChatParseError::InvalidStream),
        };
        let mut max_tokens = None;
        for field in ["max_tokens", "max_completion_tokens"] {
            match body.get(field) {
                None | Some(Value::Null) => {}
                Some(v) => match v.as_u64() {
                    Some(n) if n > 0 => max_tokens = Some(n),
                    _ => return Err(ChatParseError::InvalidMaxTokens(field)),
                },
            }
        }
        Ok(Self {
            body,
            model,
            stream,
            max_tokens,
        })
    }

    /// The body to send upstream, with `model` replaced by the upstream's model name.
    pub fn upstream_body(&mut self, upstream_model: &str) -> Vec<u8> {
        if let Some(m) = self.body.get_mut("model") {
            *m = Value::String(upstream_model.to_owned());
        }
        let out = serde_json::to_vec(&self.body).unwrap_or_default();
        if let Some(m) = self.body.get_mut("model") {
            *m = Value::String(self.model.clone());
        }
        out
    }
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
        let mut r = ChatRequest::parse(
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
    fn rejects_bad_shapes_naming_the_field() {
        let cases: [(&[u8], ChatParseError); 7] = [
            (b"[1]", ChatParseError::NotAnObject),
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
        ];
        for (body, want) in cases {
            assert_eq!(ChatRequest::parse(body), Err(want));
        }
        assert!(matches!(
            ChatRequest::parse(b"{not json"),
            Err(ChatParseError::InvalidJson(_))
        ));
    }
}
