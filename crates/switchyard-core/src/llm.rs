//! The normalized request every client front door decodes into, whatever API it speaks:
//! the few facts the pipeline reads (model, streaming, output bound, prompt size) and the
//! client's body kept as raw top-level members, so that when client and upstream speak
//! the same format the upstream body is the client's text with only `model` replaced —
//! no value tree is built for the messages. Decoding is the formats' work
//! ([`crate::format`]); this module holds data and the passthrough encoding only.

use crate::format::translate::{self, TranslateError};
use crate::format::{anthropic_messages, responses, Format};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
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
/// The names (unescaped) and the values are kept in one buffer: an object costs two
/// allocations, whatever its number of members. Read quickly ([`crate::rawscan`]), the
/// buffer is the body's text itself; read by `serde_json`, the names and values one
/// after another.
#[derive(Debug, Clone)]
pub struct RawObject {
    text: String,
    /// Per member: where its name starts and ends in `text`, and where its value starts
    /// and ends.
    members: Vec<[usize; 4]>,
}

impl PartialEq for RawObject {
    fn eq(&self, other: &Self) -> bool {
        self.members.len() == other.members.len() && self.entries().eq(other.entries())
    }
}

/// Reads an object into a [`RawObject`] whose buffer holds the whole input (`.0` bytes):
/// the names and values together are never longer.
struct Members(usize);

impl<'de> DeserializeSeed<'de> for Members {
    type Value = RawObject;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RawObject, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Members {
    type Value = RawObject;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
        let mut object = RawObject {
            text: String::with_capacity(self.0),
            members: Vec::with_capacity(map.size_hint().unwrap_or(8)),
        };
        loop {
            let name = object.text.len();
            if map.next_key_seed(NameInto(&mut object.text))?.is_none() {
                return Ok(object);
            }
            let value = object.text.len();
            // Borrowed from the input: the value's text is copied once, into the buffer.
            let raw: &RawValue = map.next_value()?;
            object.text.push_str(raw.get());
            object.members.push([name, value, value, object.text.len()]);
        }
    }
}

/// Appends a member's name, unescaped, to the buffer.
struct NameInto<'b>(&'b mut String);

impl<'de> DeserializeSeed<'de> for NameInto<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for NameInto<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }
    fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<(), E> {
        self.0.push_str(name);
        Ok(())
    }
}

impl RawObject {
    pub fn parse(bytes: &[u8]) -> Result<Self, RawObjectError> {
        match crate::rawscan::members(bytes) {
            Some((text, members)) => Ok(Self { text, members }),
            None => Self::parse_with_serde_json(bytes),
        }
    }

    /// [`Self::parse`] by `serde_json` alone: the reference the quick reading
    /// ([`crate::rawscan`]) agrees with, and the reading of every text it leaves.
    pub fn parse_with_serde_json(bytes: &[u8]) -> Result<Self, RawObjectError> {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let read = Members(bytes.len())
            .deserialize(&mut de)
            .and_then(|object| de.end().map(|()| object));
        match read {
            Ok(o) => Ok(o),
            Err(e) if e.is_data() => Err(RawObjectError::NotAnObject),
            Err(e) => Err(RawObjectError::InvalidJson(e.to_string())),
        }
    }

    /// The members, as (name, raw value text), in the client's order.
    fn entries(&self) -> impl DoubleEndedIterator<Item = (&str, &str)> + '_ {
        self.members.iter().map(|&[name, name_end, value, end]| {
            (
                self.text.get(name..name_end).unwrap_or_default(),
                self.text.get(value..end).unwrap_or_default(),
            )
        })
    }

    /// The raw text of member `name`; the last occurrence wins, as in every JSON object
    /// reader.
    pub fn member(&self, name: &str) -> Option<&str> {
        // Names are compared as bytes (length first); only the value found is cut out
        // as text.
        let bytes = self.text.as_bytes();
        let &[_, _, value, end] = self
            .members
            .iter()
            .rev()
            .find(|&&[n, n_end, _, _]| bytes.get(n..n_end) == Some(name.as_bytes()))?;
        self.text.get(value..end)
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
        let len = self.text.len() + 4 * self.members.len();
        let mut out = Vec::with_capacity(len + model.len() + 2);
        out.push(b'{');
        let mut first = true;
        for (key, value) in self.entries() {
            let replaced = overrides.iter().find(|(name, _)| *name == key);
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
                out.extend_from_slice(value.as_bytes());
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

/// Appends `s` as a JSON string. Names and model names seldom need an escape: those
/// that do not are copied between quotes, as `serde_json` writes them, without its
/// per-string set-up.
fn write_json_string(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        return;
    }
    // Serialising a &str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_keep_their_order_and_text() {
        let o = RawObject::parse(br#"{"model":"a/b", "messages" : [ {"role":"user"} ],"n":1}"#)
            .unwrap();
        assert_eq!(o.member("model"), Some(r#""a/b""#));
        assert_eq!(o.member("messages"), Some(r#"[ {"role":"user"} ]"#));
        assert_eq!(o.member("n"), Some("1"));
        assert_eq!(o.member("absent"), None);
        assert_eq!(
            String::from_utf8(o.with_model("x/y")).unwrap(),
            r#"{"model":"x/y","messages":[ {"role":"user"} ],"n":1}"#
        );
    }

    #[test]
    fn names_are_unescaped_and_the_last_of_a_name_wins() {
        let o = RawObject::parse(br#"{"mo\u0064el":"first","\u00e9t\u00e9":2,"model":"last"}"#)
            .unwrap();
        assert_eq!(o.member("model"), Some(r#""last""#));
        assert_eq!(o.member("été"), Some("2"));
        assert_eq!(
            String::from_utf8(o.rewritten("m", &[("été", None)])).unwrap(),
            r#"{"model":"m","model":"m"}"#
        );
    }

    #[test]
    fn overrides_and_additions_rewrite_the_object() {
        let o = RawObject::parse(br#"{"model":"a","stream":false,"keep":{"x":[1,2]}}"#).unwrap();
        let out = o.rewritten_adding(
            "b",
            &[("stream", Some("true".into()))],
            &[("keep", "0".into()), ("extra", r#""e""#.into())],
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"model":"b","stream":true,"keep":{"x":[1,2]},"extra":"e"}"#
        );
    }

    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        for s in [
            "",
            "plain/model-1",
            "été ☃",
            "quote\"d",
            "back\\slash",
            "tab\tnew\nline\u{1}\u{1f}",
            "\u{7f} del",
            "</script>",
        ] {
            let mut out = Vec::new();
            write_json_string(&mut out, s);
            assert_eq!(out, serde_json::to_vec(s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn an_empty_object_has_no_members() {
        let o = RawObject::parse(b" {} ").unwrap();
        assert_eq!(o.member("model"), None);
        // Only a model the object names is replaced; none is added.
        assert_eq!(o.with_model("m"), b"{}".to_vec());
        assert_eq!(o, RawObject::parse(b"{}").unwrap());
    }

    #[test]
    fn what_is_not_one_json_object_is_refused() {
        assert_eq!(RawObject::parse(b"[1,2]"), Err(RawObjectError::NotAnObject));
        assert_eq!(
            RawObject::parse(b"\"text\""),
            Err(RawObjectError::NotAnObject)
        );
        let broken: [&[u8]; 4] = [b"{\"a\":1} x", b"{\"a\":", b"{\"a\":1,}", b"{\"a\xff\":1}"];
        for text in broken {
            assert!(
                matches!(RawObject::parse(text), Err(RawObjectError::InvalidJson(_))),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn objects_with_equal_members_are_equal_whatever_their_escapes() {
        let a = RawObject::parse(br#"{"model":"a","n":1}"#).unwrap();
        let b = RawObject::parse(br#"{ "\u006dodel" : "a" , "n" : 1 }"#).unwrap();
        let c = RawObject::parse(br#"{"model":"a","n":2}"#).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
