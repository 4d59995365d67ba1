//! Anthropic Messages upstreams: `POST {base}/v1/messages` (and `/v1/messages/count_tokens`).
//!
//! An API key authenticates with `x-api-key`; an OAuth subscription token (auth class
//! `oauth`) with `Authorization: Bearer` and the `oauth-2025-04-20` beta such tokens
//! need. `anthropic-version` and `anthropic-beta` select the protocol, so they are the
//! one exception to SPEC G6: an Anthropic client's values are forwarded (merged with
//! the OAuth beta); a client of another format gets [`DEFAULT_VERSION`].

use super::{endpoint, sensitive, Adapter, ProtocolHeaders};
use axum::http::header::InvalidHeaderValue;
use axum::http::HeaderValue;
use switchyard_core::domain::AuthClass;
use switchyard_core::format::Format;

/// The API version sent when the client gave none.
pub const DEFAULT_VERSION: &str = "2023-06-01";

/// The beta OAuth subscription tokens must declare.
pub const OAUTH_BETA: &str = "oauth-2025-04-20";

/// See the module docs.
#[derive(Debug, Clone, Copy)]
pub struct Anthropic;

impl Adapter for Anthropic {
    fn format(&self) -> Format {
        Format::AnthropicMessages
    }

    fn endpoint(&self, base_url: &str) -> String {
        endpoint(base_url, "/messages")
    }

    fn count_tokens_endpoint(&self, base_url: &str) -> Option<String> {
        Some(endpoint(base_url, "/messages/count_tokens"))
    }

    fn auth_headers(
        &self,
        credential: &str,
        auth_class: AuthClass,
    ) -> Result<Vec<(&'static str, HeaderValue)>, InvalidHeaderValue> {
        Ok(vec![match auth_class {
            AuthClass::Oauth => sensitive("authorization", &format!("Bearer {credential}"))?,
            AuthClass::Apikey | AuthClass::Local => sensitive("x-api-key", credential)?,
        }])
    }

    fn protocol_headers(
        &self,
        client: &ProtocolHeaders,
        oauth: bool,
        headers: &mut Vec<(&'static str, HeaderValue)>,
    ) {
        let version = client
            .version
            .clone()
            .unwrap_or(HeaderValue::from_static(DEFAULT_VERSION));
        headers.push((ProtocolHeaders::VERSION, version));
        let beta = match (&client.beta, oauth) {
            (Some(beta), false) => Some(beta.clone()),
            (None, false) => None,
            (None, true) => Some(HeaderValue::from_static(OAUTH_BETA)),
            (Some(beta), true) => {
                let listed = beta
                    .to_str()
                    .unwrap_or_default()
                    .split(',')
                    .any(|b| b.trim() == OAUTH_BETA);
                if listed {
                    Some(beta.clone())
                } else {
                    let mut merged = beta.as_bytes().to_vec();
                    merged.extend_from_slice(b",");
                    merged.extend_from_slice(OAUTH_BETA.as_bytes());
                    HeaderValue::from_bytes(&merged).ok()
                }
            }
        };
        if let Some(beta) = beta {
            headers.push((ProtocolHeaders::BETA, beta));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_keys_use_x_api_key_and_oauth_tokens_a_bearer() {
        assert_eq!(Anthropic.endpoint("http://h:1"), "http://h:1/v1/messages");
        assert_eq!(
            Anthropic.count_tokens_endpoint("http://h:1/v1").as_deref(),
            Some("http://h:1/v1/messages/count_tokens")
        );
        let key = Anthropic
            .auth_headers("sk-ant-1", AuthClass::Apikey)
            .unwrap();
        assert_eq!(key.len(), 1);
        assert_eq!(
            (key[0].0, key[0].1.to_str().unwrap()),
            ("x-api-key", "sk-ant-1")
        );
        assert!(key[0].1.is_sensitive());
        let token = Anthropic.auth_headers("tok", AuthClass::Oauth).unwrap();
        assert_eq!(
            (token[0].0, token[0].1.to_str().unwrap()),
            ("authorization", "Bearer tok")
        );
        assert!(token[0].1.is_sensitive());
        assert!(Anthropic
            .auth_headers("bad\nvalue", AuthClass::Apikey)
            .is_err());
    }

    #[test]
    fn protocol_headers_forward_the_clients_and_add_the_oauth_beta() {
        let run = |version: Option<&'static str>, beta: Option<&'static str>, oauth: bool| {
            let client = ProtocolHeaders {
                version: version.map(HeaderValue::from_static),
                beta: beta.map(HeaderValue::from_static),
            };
            let mut h = Vec::new();
            Anthropic.protocol_headers(&client, oauth, &mut h);
            let text = |v: &HeaderValue| v.to_str().unwrap().to_owned();
            match h.as_slice() {
                [("anthropic-version", version)] => (text(version), None),
                [("anthropic-version", version), ("anthropic-beta", beta)] => {
                    (text(version), Some(text(beta)))
                }
                other => panic!("unexpected protocol headers {other:?}"),
            }
        };
        assert_eq!(run(None, None, false), ("2023-06-01".into(), None));
        assert_eq!(
            run(Some("2024-01-01"), Some("a-1,b-2"), false),
            ("2024-01-01".into(), Some("a-1,b-2".into()))
        );
        assert_eq!(
            run(None, None, true),
            ("2023-06-01".into(), Some("oauth-2025-04-20".into()))
        );
        assert_eq!(
            run(None, Some("a-1"), true),
            ("2023-06-01".into(), Some("a-1,oauth-2025-04-20".into()))
        );
        assert_eq!(
            run(None, Some("oauth-2025-04-20, a-1"), true),
            ("2023-06-01".into(), Some("oauth-2025-04-20, a-1".into()))
        );
    }
}
