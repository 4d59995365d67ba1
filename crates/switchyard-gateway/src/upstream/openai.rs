//! OpenAI-compatible upstreams: `POST {base}/v1/chat/completions` with a bearer token.
//!
//! The adapter only names its endpoint and builds its authentication header (marked
//! sensitive); sending, deadlines and failure classification are the shared transport's
//! (`super`).

use super::{endpoint, Adapter};
use switchyard_core::format::Format;

/// See the module docs.
#[derive(Debug, Clone, Copy)]
pub struct OpenAi;

impl Adapter for OpenAi {
    fn format(&self) -> Format {
        Format::OpenAiChat
    }

    fn endpoint(&self, base_url: &str) -> String {
        endpoint(base_url, "/chat/completions")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_core::domain::AuthClass;

    #[test]
    fn the_endpoint_and_bearer_header() {
        assert_eq!(
            OpenAi.endpoint("http://h:1/v1/"),
            "http://h:1/v1/chat/completions"
        );
        assert_eq!(
            OpenAi.endpoint("http://h:1"),
            "http://h:1/v1/chat/completions"
        );
        let headers = OpenAi.auth_headers("sk-1", AuthClass::Apikey).unwrap();
        assert_eq!(headers.len(), 1);
        assert_eq!(headers[0].0, "authorization");
        assert_eq!(headers[0].1, "Bearer sk-1");
        assert!(headers[0].1.is_sensitive());
        assert!(OpenAi
            .auth_headers("bad\nvalue", AuthClass::Apikey)
            .is_err());
    }
}
