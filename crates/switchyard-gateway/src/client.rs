//! The upstream HTTP client: hyper's pooled client with rustls, used directly.
//!
//! A general-purpose client (reqwest) wraps every request in redirect and retry layers
//! and re-parses URLs; profiles showed those at over a tenth of the gateway's CPU per
//! request. The gateway needs none of it — upstream requests are built from scratch,
//! redirects are never followed, failover is the gateway's own decision — so it talks to
//! hyper-util's connection pool directly.

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::sync::Arc;
use std::time::Duration;

/// How long an idle pooled upstream connection is kept. Shorter than the 120 s most
/// providers' load balancers use, so the gateway closes first and never writes into a
/// connection the other side is tearing down.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The client type: HTTP/1.1 and HTTP/2, plain or TLS.
pub type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the upstream HTTP client: {0}")]
pub struct ClientError(String);

/// Builds a client. Over https, HTTP/2 is negotiated by ALPN; `h2c` speaks cleartext
/// HTTP/2 with prior knowledge.
pub fn build(connect_timeout_ms: u64, h2c: bool) -> Result<HttpClient, ClientError> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_millis(connect_timeout_ms)));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(provider)
        .map_err(|e| ClientError(e.to_string()))?
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_timer(TokioTimer::new())
        .http2_only(h2c)
        .build(https))
}
