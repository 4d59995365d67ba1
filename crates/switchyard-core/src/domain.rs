//! Domain vocabulary shared by every layer: auth classes, upstream formats, routing
//! strategies and `provider/model` references. Parsing happens once at the edge; the
//! rest of the code works with these validated types.
//!
//! Plain types and their parsing only: nothing here looks anything up in the
//! configuration or does I/O.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How a connection authenticates upstream. It selects breaker and cooldown profiles
/// (SPEC G4, R1, R3): subscription accounts behave differently from metered API keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthClass {
    Oauth,
    Apikey,
    Local,
}

impl AuthClass {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Oauth => "oauth",
            Self::Apikey => "apikey",
            Self::Local => "local",
        }
    }
}

/// The wire format an upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamFormat {
    Openai,
    Anthropic,
    /// OpenAI's Responses API (`POST /v1/responses`).
    Responses,
}

impl UpstreamFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Anthropic => "anthropic",
            Self::Responses => "responses",
        }
    }
}

/// A `provider/model` reference. The model part may itself contain slashes
/// (`openrouter/meta/llama-3`): only the first slash separates the provider.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelRef {
    pub provider: String,
    pub model: String,
}

/// Why a `provider/model` string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("model `{0}` must have the form provider/model")]
pub struct ModelRefError(pub String);

impl ModelRef {
    pub fn parse(s: &str) -> Result<Self, ModelRefError> {
        match Self::split(s) {
            Some((p, m)) => Ok(Self {
                provider: p.to_owned(),
                model: m.to_owned(),
            }),
            None => Err(ModelRefError(s.to_owned())),
        }
    }

    /// The provider and model of `s` as borrowed parts, by [`Self::parse`]'s rule.
    pub fn split(s: &str) -> Option<(&str, &str)> {
        s.split_once('/')
            .filter(|(p, m)| !p.is_empty() && !m.is_empty())
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.provider, self.model)
    }
}

/// Returns true when `id` is usable as a provider, connection, key or combo identifier:
/// 1–64 characters of ASCII letters, digits, `-`, `_` and `.`. Identifiers appear in URLs,
/// metric labels and `provider/model` strings, so they must not contain `/` or spaces.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ref_splits_on_first_slash_only() {
        let r = ModelRef::parse("openrouter/meta/llama-3").unwrap();
        assert_eq!(r.provider, "openrouter");
        assert_eq!(r.model, "meta/llama-3");
        assert_eq!(r.to_string(), "openrouter/meta/llama-3");
        assert_eq!(
            ModelRef::split("openrouter/meta/llama-3"),
            Some(("openrouter", "meta/llama-3"))
        );
    }

    #[test]
    fn model_ref_rejects_missing_parts() {
        for bad in ["", "gpt-4o", "/gpt-4o", "openai/"] {
            assert_eq!(ModelRef::parse(bad), Err(ModelRefError(bad.to_owned())));
            assert_eq!(ModelRef::split(bad), None);
        }
    }

    #[test]
    fn upstream_formats_are_named_as_in_the_configuration() {
        for (format, name) in [
            (UpstreamFormat::Openai, "openai"),
            (UpstreamFormat::Anthropic, "anthropic"),
            (UpstreamFormat::Responses, "responses"),
        ] {
            assert_eq!(format.as_str(), name);
            assert_eq!(
                serde_json::to_string(&format).unwrap(),
                format!("\"{name}\"")
            );
            assert_eq!(
                serde_json::from_str::<UpstreamFormat>(&format!("\"{name}\"")).unwrap(),
                format
            );
        }
    }

    #[test]
    fn ids_are_restricted_to_url_and_label_safe_characters() {
        assert!(is_valid_id("openai-main_2.b"));
        assert!(!is_valid_id(""));
        assert!(!is_valid_id("a/b"));
        assert!(!is_valid_id("a b"));
        assert!(!is_valid_id(&"x".repeat(65)));
        assert!(is_valid_id(&"x".repeat(64)));
    }
}
