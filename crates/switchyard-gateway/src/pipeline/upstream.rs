//! One upstream attempt: build the request from scratch (SPEC G6: no client header is
//! forwarded; credentials come from the connection), send it, and classify transport
//! failures.

use crate::snapshot::Upstream;
use axum::http::{header, HeaderValue};
use std::time::Duration;
use switchyard_core::outcome::AttemptFailure;

/// Sends `body` to the connection's chat endpoint and waits for the response headers,
/// at most `first_byte`.
pub async fn send(
    client: &reqwest::Client,
    upstream: &Upstream,
    body: Vec<u8>,
    stream: bool,
    first_byte: Duration,
) -> Result<reqwest::Response, AttemptFailure> {
    let mut request = client
        .post(&upstream.chat_url)
        .header(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )
        .header(
            header::ACCEPT,
            HeaderValue::from_static(if stream {
                "text/event-stream"
            } else {
                "application/json"
            }),
        );
    for (name, value) in &upstream.auth {
        request = request.header(*name, value.clone());
    }
    match tokio::time::timeout(first_byte, request.body(body).send()).await {
        Err(_) => Err(AttemptFailure::FirstByteTimeout),
        Ok(Ok(response)) => Ok(response),
        Ok(Err(e)) => Err(classify(&e)),
    }
}

/// Maps a transport error to a failure kind.
pub fn classify(e: &reqwest::Error) -> AttemptFailure {
    if e.is_connect() {
        AttemptFailure::Connect
    } else if e.is_timeout() {
        AttemptFailure::FirstByteTimeout
    } else {
        AttemptFailure::Reset
    }
}
