//! The normalized request every client front door decodes into, whatever API it speaks:
//! the few facts the pipeline reads (model, streaming, output bound, prompt size) and the
//! client's body kept as raw top-level members, so that when client and upstream speak
//! the same format the upstream body is the client's text with only `model` replaced —
//! no value tree is built for the messages. Decoding is the formats' work
//! ([`crate::format`]); this module holds data and the passthrough encoding only.

use crate::format::translate::{self, TranslateError};
use crate::format::{anthropic_messages, responses, Format};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::fmt;

/// A decoded client request; see the module docs.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The API the client spoke.
    pub format: Format,
    /// The model the client asked for (`provider/model` or a combo name).
    pub model: String,
    pub stream: bool,
    /// The client's bound on generated tokens, when it set one.
    pub max_tokens: Option<u64>,
    /// Length of the prompt's raw JSON text: the input to the prompt-size estimate.
    pub prompt_len: usize,
    /// The client's body.
    pub body: RawObject,
}

impl Request {
    /// The body for an upstream speaking `upstream`, asking for `model`, its output
    /// bound clamped to `output_limit` (the model's configured limit). The same format
    /// passes through with only `model` (and a clamped bound) replaced; another is
    /// translated ([`crate::format::translate`]).
    pub fn upstream_body(
        &self,
        upstream: Format,
        model: &str,
        output_limit: Option<u64>,
    ) -> Result<Vec<u8>, TranslateError> {
        let max_tokens = match (self.max_tokens, output_limit) {
            (Some(asked), Some(limit)) => Some(asked.min(limit)),
            (asked, limit) => asked.or(limit),
        };
        if self.format != upstream {
            return translate::request(self, upstream, model, max_tokens);
        }
        let clamped = self.max_tokens.zip(max_tokens).filter(|(a, m)| a != m);
        // Anthropic requires an output bound: a client that gave none (or `null`) gets
        // the model's limit, else the default, as a translated request does.
        let required = (self.format == Format::AnthropicMessages && self.max_tokens.is_none())
            .then(|| output_limit.unwrap_or(translate::DEFAULT_MAX_TOKENS));
        let bound_tokens = clamped.map(|(_, bound)| bound).or(required);
        let bound = bound_tokens.map(|bound| bound.to_string());
        let mut overrides: Vec<(&str, Option<String>)> = Vec::new();
        let mut added: Vec<(&str, String)> = Vec::new();
        if let (Some(bound), Some(_)) = (&bound, required) {
            overrides.push(("max_tokens", Some(bound.clone())));
            added.push(("max_tokens", bound.clone()));
        } else if let Some(bound) = &bound {
            overrides.push(("max_tokens", Some(bound.clone())));
            overrides.push(("max_completion_tokens", Some(bound.clone())));
            overrides.push(("max_output_tokens", Some(bound.clone())));
        }
        if self.format == Format::Responses {
            let stripped = self
                .body
                .member("input")
                .and_then(responses::strip_translated_reasoning);
            if let Some(input) = stripped {
                overrides.push(("input", Some(input)));
            }
        }
        if self.format == Format::AnthropicMessages {
            let stripped = self
                .body
                .member("messages")
                .and_then(translate::unsigned::strip_unsigned_thinking);
            if let Some(messages) = stripped {
                // Thinking blocks a translated route made cannot go back to Anthropic;
                // a turn that lost one cannot continue with thinking on.
                overrides.push(("messages", Some(messages)));
                overrides.push(("thinking", None));
            } else if let (Some(bound), Some(thinking)) =
                (bound_tokens, self.body.member("thinking"))
            {
                if let Some(fitted) = anthropic_messages::fit_thinking(thinking, bound) {
                    overrides.push(("thinking", fitted));
                }
            }
        }
        Ok(if overrides.is_empty() {
            self.body.with_model(model)
        } else {
            self.body.rewritten_adding(model, &overrides, &added)
        })
    }
}

/// Why a body is not a JSON object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawObjectError {
    /// Not JSON at all; the parser's message.
    InvalidJson(String),
    /// JSON, but not an object.
    NotAnObject,
}

/// A JSON object's top-level members in the client's order, values as raw JSON text.
#[derive(Debug, Clone)]
pub struct RawObject(Vec<(String, Box<RawValue>)>);

impl PartialEq for RawObject {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|((ka, va), (kb, vb))| ka == kb && va.get() == vb.get())
    }
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawObject;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(entry) = map.next_entry::<String, Box<RawValue>>()? {
                    out.push(entry);
                }
                Ok(RawObject(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl RawObject {
    pub fn parse(bytes: &[u8]) -> Result<Self, RawObjectError> {
        match serde_json::from_slice::<Self>(bytes) {
            Ok(o) => Ok(o),
            Err(e) if e.is_data() => Err(RawObjectError::NotAnObject),
            Err(e) => Err(RawObjectError::InvalidJson(e.to_string())),
        }
    }

    /// The raw text of member `name`; the last occurrence wins, as in every JSON object
    /// reader.
    pub fn member(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.get())
    }

    /// The object's text with every `model` member replaced by `model`, the other
    /// members in their order and text.
    pub fn with_model(&self, model: &str) -> Vec<u8> {
        self.rewritten(model, &[])
    }

    /// As [`Self::with_model`], with each member named in `overrides` that the object
    /// has given the raw JSON text there, or left out for `None`.
    pub fn rewritten(&self, model: &str, overrides: &[(&str, Option<String>)]) -> Vec<u8> {
        self.rewritten_adding(model, overrides, &[])
    }

    /// As [`Self::rewritten`], with each member of `added` the object lacks appended.
    pub fn rewritten_adding(
        &self,
        model: &str,
        overrides: &[(&str, Option<String>)],
        added: &[(&str, String)],
    ) -> Vec<u8> {
        let len: usize = self
            .0
            .iter()
            .map(|(k, v)| k.len() + v.get().len() + 4)
            .sum();
        let mut out = Vec::with_capacity(len + model.len() + 2);
        out.push(b'{');
        let mut first = true;
        for (key, value) in &self.0 {
            let replaced = overrides.iter().find(|(name, _)| name == key);
            if matches!(replaced, Some((_, None))) {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            write_json_string(&mut out, key);
            out.push(b':');
            if key == "model" {
                write_json_string(&mut out, model);
            } else if let Some((_, Some(text))) = replaced {
                out.extend_from_slice(text.as_bytes());
            } else {
                out.extend_from_slice(value.get().as_bytes());
            }
        }
        for (key, text) in added {
            if self.member(key).is_none() {
                if !first {
                    out.push(b',');
                }
                first = false;
                write_json_string(&mut out, key);
                out.push(b':');
                out.extend_from_slice(text.as_bytes());
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
