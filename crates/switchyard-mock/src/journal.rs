//! What the mock received on its provider routes, for tests that assert what a gateway
//! forwarded or translated (`GET /_mock/requests`).

use axum::http::{HeaderMap, Method, Uri};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// How many received requests are kept, oldest dropped first.
pub(crate) const KEPT: usize = 100;

/// The request headers kept verbatim when present.
const KEPT_HEADERS: [&str; 3] = [
    "anthropic-version",
    "anthropic-beta",
    "anthropic-usage-limit",
];

/// One received request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Received {
    method: String,
    path: String,
    /// The raw query string, e.g. `beta=true`.
    query: Option<String>,
    /// The credential the mock read (`Authorization: Bearer` or `x-api-key`).
    credential: String,
    headers: BTreeMap<&'static str, String>,
    /// Whether an `x-api-key` header was sent.
    x_api_key: bool,
    /// The `Authorization` header's scheme (the text before its first space; empty
    /// without one), or null without the header.
    authorization: Option<String>,
    /// The JSON body, or null when there is none or it is not JSON.
    body: Value,
}

impl Received {
    pub fn new(
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        credential: &str,
        body: Option<&Value>,
    ) -> Self {
        let text = |name: &str| {
            headers
                .get(name)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        };
        Self {
            method: method.as_str().to_owned(),
            path: uri.path().to_owned(),
            query: uri.query().map(str::to_owned),
            credential: credential.to_owned(),
            headers: KEPT_HEADERS
                .iter()
                .filter_map(|name| text(name).map(|v| (*name, v)))
                .collect(),
            x_api_key: headers.contains_key("x-api-key"),
            authorization: text("authorization").map(|v| {
                v.split_once(' ')
                    .map_or(String::new(), |(scheme, _)| scheme.to_owned())
            }),
            body: body.cloned().unwrap_or(Value::Null),
        }
    }
}
