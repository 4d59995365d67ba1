//! One upstream attempt: build the request from scratch (SPEC G6: no client header is
//! forwarded; credentials come from the connection), send it, and classify transport
//! failures.

use crate::client;
use crate::snapshot::Upstream;
use axum::http::{header, HeaderValue, Method, Request, Response};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use switchyard_core::outcome::AttemptFailure;
use tokio::time::Instant;

/// Sends `body` to the connection's chat endpoint and waits for the response headers,
/// at most until `deadline`.
pub async fn send(
    connect_timeout_ms: u64,
    upstream: &Upstream,
    body: Vec<u8>,
    stream: bool,
    deadline: Instant,
) -> Result<Response<Incoming>, AttemptFailure> {
    let accept = if stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    let mut request = Request::new(Full::new(Bytes::from(body)));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = upstream.chat_url.clone();
    let headers = request.headers_mut();
    headers.insert(header::HOST, upstream.host.clone());
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::ACCEPT, HeaderValue::from_static(accept));
    headers.insert(header::USER_AGENT, HeaderValue::from_static(USER_AGENT));
    for (name, value) in &upstream.auth {
        headers.insert(*name, value.clone());
    }
    let pending = match client::request(connect_timeout_ms, upstream.h2c, request) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "Cannot build the upstream client.");
            return Err(AttemptFailure::Connect);
        }
    };
    match tokio::time::timeout_at(deadline, pending).await {
        Err(_) => Err(AttemptFailure::FirstByteTimeout),
        Ok(Ok(response)) => Ok(response),
        Ok(Err(e)) if e.is_connect() => Err(AttemptFailure::Connect),
        Ok(Err(_)) => Err(AttemptFailure::Reset),
    }
}

/// The `User-Agent` of upstream requests.
const USER_AGENT: &str = concat!("switchyard/", env!("CARGO_PKG_VERSION"));

/// The connection's credentials as sent: the values of its authentication headers, a
/// bearer token without its scheme.
pub fn credentials(upstream: &Upstream) -> Vec<&[u8]> {
    upstream
        .auth
        .iter()
        .map(|(_, v)| {
            let raw = v.as_bytes();
            raw.strip_prefix(b"Bearer ").unwrap_or(raw)
        })
        .collect()
}
