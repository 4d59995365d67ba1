//! The upstream HTTP client: hyper's pooled client with rustls, used directly, one per
//! I/O thread.
//!
//! A general-purpose client (reqwest) wraps every request in redirect and retry layers
//! and re-parses URLs; profiles showed those at over a tenth of the gateway's CPU per
//! request. The gateway needs none of it — upstream requests are built from scratch,
//! redirects are never followed, failover is the gateway's own decision — so it talks to
//! hyper-util's connection pool directly.
//!
//! Each I/O thread keeps its own clients (and so its own pool): a pooled connection's
//! task runs on the thread that opened it, and a request on another thread would have to
//! hand every message across threads. Clients are rebuilt when the connect timeout
//! changes.
//!
//! It only carries what it is handed: building the request and classifying its failures
//! are `crate::upstream`'s, and it imports nothing from the rest of the crate.

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

/// How long an idle pooled upstream connection is kept. Shorter than the idle timeouts
/// of the load balancers in front of most providers (AWS ALB 60 s, nginx 75 s), so the
/// gateway closes first and never writes into a connection the other side is tearing
/// down.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(50);

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

/// This thread's clients, with the connect timeout they were built for.
struct Local {
    connect_timeout_ms: u64,
    negotiated: HttpClient,
    h2c: HttpClient,
}

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

/// Sends `request` with this thread's client for the given settings.
pub fn request(
    connect_timeout_ms: u64,
    h2c: bool,
    request: http::Request<Full<Bytes>>,
) -> Result<ResponseFuture, ClientError> {
    LOCAL.with(|cell| {
        let mut slot = cell.borrow_mut();
        let stale = slot
            .as_ref()
            .is_none_or(|l| l.connect_timeout_ms != connect_timeout_ms);
        if stale {
            *slot = Some(Local {
                connect_timeout_ms,
                negotiated: build(connect_timeout_ms, false)?,
                h2c: build(connect_timeout_ms, true)?,
            });
        }
        let local = slot
            .as_ref()
            .ok_or_else(|| ClientError("client cache is empty".to_owned()))?;
        let client = if h2c { &local.h2c } else { &local.negotiated };
        Ok(client.request(request))
    })
}
