//! OpenAI Responses upstreams: `POST {base}/v1/responses` with a bearer API key, or a
//! Codex subscription backend (a base URL ending in `/backend-api/codex`, answering
//! `{base}/responses`) with an OAuth token and the headers such accounts need:
//! `chatgpt-account-id` (from `provider_specific_data.chatgptAccountId`) and
//! `originator`. No client header is forwarded (SPEC G6): Codex's session, thread and
//! turn headers stay behind.

use super::{endpoint, Adapter};
use axum::http::header::InvalidHeaderValue;
use axum::http::HeaderValue;
use switchyard_core::domain::AuthClass;
use switchyard_core::format::Format;

/// The path of a Codex subscription backend.
const CODEX_BACKEND: &str = "/backend-api/codex";

/// Whether `endpoint` (as [`Responses`] builds it) is a Codex subscription backend's.
pub fn is_codex_backend(endpoint: &str) -> bool {
    endpoint
        .strip_suffix("/responses")
        .is_some_and(|base| base.ends_with(CODEX_BACKEND))
}

/// The `provider_specific_data` key of a Codex subscription's account id.
pub use switchyard_core::oauth::ACCOUNT_KEY;

/// The `originator` a Codex subscription backend expects.
const ORIGINATOR: &str = "codex_cli_rs";

/// See the module docs.
#[derive(Debug, Clone, Copy)]
pub struct Responses;

impl Adapter for Responses {
    fn format(&self) -> Format {
        Format::Responses
    }

    fn endpoint(&self, base_url: &str) -> String {
        let base = base_url.trim_end_matches('/');
        if base.ends_with(CODEX_BACKEND) {
            format!("{base}/responses")
        } else if base.ends_with("/backend-api") {
            // Codex's own `chatgpt_base_url` form.
            format!("{base}/codex/responses")
        } else {
            endpoint(base, "/responses")
        }
    }

    fn account_headers(
        &self,
        auth_class: AuthClass,
        data: Option<&serde_json::Value>,
    ) -> Result<Vec<(&'static str, HeaderValue)>, InvalidHeaderValue> {
        if auth_class != AuthClass::Oauth {
            return Ok(Vec::new());
        }
        let mut headers = vec![("originator", HeaderValue::from_static(ORIGINATOR))];
        let account = data
            .and_then(|d| d.get(ACCOUNT_KEY))
            .and_then(serde_json::Value::as_str);
        if account.is_none() {
            tracing::warn!(
                "An OAuth Responses connection has no provider_specific_data.{ACCOUNT_KEY}; a Codex subscription backend refuses requests without it."
            );
        }
        if let Some(account) = account {
            let mut value = HeaderValue::from_str(account)?;
            value.set_sensitive(true);
            headers.push(("chatgpt-account-id", value));
        }
        Ok(headers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn codex_backend_endpoints_are_recognised() {
        for base in [
            "https://chatgpt.com/backend-api/codex",
            "https://chatgpt.com/backend-api/",
        ] {
            assert!(is_codex_backend(&Responses.endpoint(base)), "{base}");
        }
        assert!(!is_codex_backend(
            &Responses.endpoint("https://api.openai.com")
        ));
        assert!(!is_codex_backend("https://h/backend-api/codex"));
    }

    #[test]
    fn api_and_codex_backend_endpoints() {
        assert_eq!(
            Responses.endpoint("https://api.openai.com"),
            "https://api.openai.com/v1/responses"
        );
        assert_eq!(
            Responses.endpoint("http://h:1/v1/"),
            "http://h:1/v1/responses"
        );
        assert_eq!(
            Responses.endpoint("https://chatgpt.com/backend-api/codex/"),
            "https://chatgpt.com/backend-api/codex/responses"
        );
        assert_eq!(
            Responses.endpoint("https://chatgpt.com/backend-api/"),
            "https://chatgpt.com/backend-api/codex/responses"
        );
    }

    #[test]
    fn a_codex_subscription_adds_its_account_and_originator() {
        let key = Responses.auth_headers("sk-1", AuthClass::Apikey).unwrap();
        assert_eq!(
            (key[0].0, key[0].1.to_str().unwrap()),
            ("authorization", "Bearer sk-1")
        );
        assert!(key[0].1.is_sensitive());
        let data = json!({"chatgptAccountId": "acct-7"});
        assert!(Responses
            .account_headers(AuthClass::Apikey, Some(&data))
            .unwrap()
            .is_empty());
        let oauth = Responses
            .account_headers(AuthClass::Oauth, Some(&data))
            .unwrap();
        let shown: Vec<(&str, &str)> = oauth
            .iter()
            .map(|(n, v)| (*n, v.to_str().unwrap()))
            .collect();
        assert_eq!(
            shown,
            [
                ("originator", "codex_cli_rs"),
                ("chatgpt-account-id", "acct-7")
            ]
        );
        assert!(oauth[1].1.is_sensitive());
        assert_eq!(
            Responses
                .account_headers(AuthClass::Oauth, None)
                .unwrap()
                .len(),
            1
        );
    }
}
