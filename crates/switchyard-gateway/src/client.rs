//! The upstream HTTP client, with rustls: HTTP/1.1 connections driven by the request
//! that uses them, and hyper-util's pooled client for HTTP/2 with prior knowledge (h2c)
//! and the gateway's own calls (OAuth token refreshes).
//!
//! A general-purpose client (reqwest) wraps every request in redirect and retry layers
//! and re-parses URLs; profiles showed those at over a tenth of the gateway's CPU per
//! request. The gateway needs none of it — upstream requests are built from scratch,
//! redirects are never followed, failover is the gateway's own decision.
//!
//! HTTP/1.1 ([`send`]): each I/O thread keeps its idle upstream connections, by scheme
//! and authority. A request takes one (or opens one), and polls hyper's connection
//! itself while it waits for the answer's head; the answer's body ([`UpstreamBody`])
//! keeps polling it and puts it back among the idle ones at its end. No task per
//! connection, no channel between tasks: issue 29 measured hyper-util's pool and
//! connection task at 10 k instructions per request over this (examples/floors, F2 and
//! F4). Over TLS, ALPN offers HTTP/1.1 only. A taken connection the upstream closed
//! meanwhile is noticed when it is taken (its connection future ends), or when the request
//! cannot be written to it; either way the request goes once more on a new connection.
//!
//! Each I/O thread also keeps its own hyper-util clients (and so their pools): a pooled
//! connection's task runs on the thread that opened it, and a request on another thread
//! would have to hand every message across threads. Clients and connectors are rebuilt
//! when the connect timeout changes.
//!
//! It only carries what it is handed: building the request and classifying its failures
//! are `crate::upstream`'s, and it imports nothing from the rest of the crate.

use bytes::Bytes;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1 as h1;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::{Connection, HttpConnector, HttpInfo};
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tower::ServiceExt;

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

/// The connector of plain and TLS connections; `http2` offers HTTP/2 by ALPN besides
/// HTTP/1.1.
fn connector(
    connect_timeout_ms: u64,
    http2: bool,
) -> Result<HttpsConnector<HttpConnector>, ClientError> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_millis(connect_timeout_ms)));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(provider)
        .map_err(|e| ClientError(e.to_string()))?
        .https_or_http()
        .enable_http1();
    Ok(if http2 {
        builder.enable_http2().wrap_connector(http)
    } else {
        builder.wrap_connector(http)
    })
}

/// Builds a client. Over https, HTTP/2 is negotiated by ALPN; `h2c` speaks cleartext
/// HTTP/2 with prior knowledge.
pub fn build(connect_timeout_ms: u64, h2c: bool) -> Result<HttpClient, ClientError> {
    let https = connector(connect_timeout_ms, true)?;
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_timer(TokioTimer::new())
        .http2_only(h2c)
        .build(https))
}

/// This thread's clients and HTTP/1.1 connector, with the connect timeout they were
/// built for.
struct Local {
    connect_timeout_ms: u64,
    negotiated: HttpClient,
    h2c: HttpClient,
    http1: HttpsConnector<HttpConnector>,
}

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's clients for the given connect timeout.
fn with_local<T>(connect_timeout_ms: u64, f: impl FnOnce(&Local) -> T) -> Result<T, ClientError> {
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
                http1: connector(connect_timeout_ms, false)?,
            });
        }
        let local = slot
            .as_ref()
            .ok_or_else(|| ClientError("client cache is empty".to_owned()))?;
        Ok(f(local))
    })
}

/// Sends `request` with this thread's hyper-util client for the given settings (HTTP/2
/// negotiated over TLS, or h2c).
pub fn request(
    connect_timeout_ms: u64,
    h2c: bool,
    request: http::Request<Full<Bytes>>,
) -> Result<ResponseFuture, ClientError> {
    with_local(connect_timeout_ms, |local| {
        let client = if h2c { &local.h2c } else { &local.negotiated };
        client.request(request)
    })
}

/// Why an upstream request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// No connection could be opened (refused, unreachable, TLS, connect timeout).
    #[error("cannot connect upstream: {0}")]
    Connect(String),
    /// The connection failed after the request was (or may have been) written.
    #[error("the upstream connection failed: {0}")]
    Reset(String),
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Sends `request` (its URI absolute, its `Host` set) and waits for the answer's head:
/// over HTTP/2 with prior knowledge with hyper-util's client when `h2c`, otherwise over
/// an HTTP/1.1 connection of this thread's that this request drives.
pub async fn send(
    connect_timeout_ms: u64,
    h2c: bool,
    request: Request<Full<Bytes>>,
) -> Result<Response<UpstreamBody>, SendError> {
    if h2c {
        return match self::request(connect_timeout_ms, true, request)?.await {
            Ok(response) => Ok(response.map(UpstreamBody::Pooled)),
            Err(e) if e.is_connect() => Err(SendError::Connect(e.to_string())),
            Err(e) => Err(SendError::Reset(e.to_string())),
        };
    }
    let (key, mut request) = origin_form(request)?;
    let mut fresh = false;
    loop {
        let (mut lease, reused) = match take_idle(&key).await {
            Some(lease) if !fresh => (lease, true),
            _ => (connect(connect_timeout_ms, &key).await?, false),
        };
        let mut sent = std::pin::pin!(lease.sender.try_send_request(request));
        let result = poll_fn(|cx| {
            lease.drive(cx);
            sent.as_mut().poll(cx)
        })
        .await;
        match result {
            Ok(mut response) => {
                response.extensions_mut().insert(lease.info.clone());
                return Ok(response.map(|body| {
                    UpstreamBody::Driven(Driven {
                        body,
                        lease: Some((key, lease)),
                    })
                }));
            }
            Err(mut e) => match e.take_message() {
                // Never written: a kept connection the upstream had closed.
                Some(unsent) if reused => {
                    request = unsent;
                    fresh = true;
                }
                _ => return Err(SendError::Reset(e.into_error().to_string())),
            },
        }
    }
}

/// Where a request goes (its scheme and authority), and the request with its URI in
/// origin-form, as an HTTP/1.1 request line carries it.
fn origin_form(
    mut request: Request<Full<Bytes>>,
) -> Result<(Key, Request<Full<Bytes>>), SendError> {
    let mut parts = std::mem::take(request.uri_mut()).into_parts();
    let (Some(scheme), Some(authority)) = (parts.scheme.take(), parts.authority.take()) else {
        return Err(SendError::Connect(
            "the upstream URL has no scheme or host".to_owned(),
        ));
    };
    parts.path_and_query = Some(
        parts
            .path_and_query
            .take()
            .unwrap_or_else(|| PathAndQuery::from_static("/")),
    );
    *request.uri_mut() = Uri::from_parts(parts).map_err(|e| SendError::Connect(e.to_string()))?;
    Ok((Key { scheme, authority }, request))
}

/// How long an idle HTTP/1.1 connection is kept (see [`POOL_IDLE_TIMEOUT`]).
const IDLE_FOR: Duration = POOL_IDLE_TIMEOUT;

/// Most idle connections kept per upstream and thread; one more is closed.
const MAX_IDLE_PER_UPSTREAM: usize = 64;

/// Most upstreams with idle connections per thread; a connection to one more is closed.
const MAX_UPSTREAMS: usize = 256;

/// An upstream's scheme and authority: what its connections are kept by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    scheme: Scheme,
    authority: Authority,
}

type Io = MaybeHttpsStream<TokioIo<TcpStream>>;

/// hyper's HTTP/1.1 connection, boxed once when opened so it can be polled in place.
type Conn = Pin<Box<h1::Connection<Io, Full<Bytes>>>>;

/// An HTTP/1.1 connection: the handle requests are sent with, and the connection itself,
/// polled by whoever uses it.
struct Lease {
    sender: h1::SendRequest<Full<Bytes>>,
    /// `None` once it ended: dropped at once, so a request still waiting on it fails
    /// (or comes back unsent) instead of waiting for the first-byte timeout.
    conn: Option<Conn>,
    /// Its addresses, given to each answer as hyper-util's client does (the egress
    /// address of SPEC R14 is read from it).
    info: HttpInfo,
    idle_since: tokio::time::Instant,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// Polls the connection; false once it has ended (closed, failed), when it is
    /// dropped.
    fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(conn) = self.conn.as_mut() else {
            return false;
        };
        if conn.as_mut().poll(cx).is_pending() {
            return true;
        }
        self.conn = None;
        false
    }
}

thread_local! {
    /// This thread's idle HTTP/1.1 connections, newest last.
    static IDLE: RefCell<HashMap<Key, Vec<Lease>>> = RefCell::new(HashMap::new());
}

/// The newest idle connection to `key` still open and ready for a request, if any;
/// connections idle longer than [`IDLE_FOR`] are closed on the way.
async fn take_idle(key: &Key) -> Option<Lease> {
    loop {
        let now = tokio::time::Instant::now();
        let mut lease = IDLE.with(|idle| {
            let mut idle = idle.borrow_mut();
            let kept = idle.get_mut(key)?;
            // Kept in the order they went idle: the expired ones are a prefix.
            let expired =
                kept.partition_point(|l| now.saturating_duration_since(l.idle_since) >= IDLE_FOR);
            kept.drain(..expired);
            let lease = kept.pop();
            if kept.is_empty() {
                idle.remove(key);
            }
            lease
        })?;
        let ready = poll_fn(|cx| {
            if !lease.drive(cx) {
                return Poll::Ready(false);
            }
            lease.sender.poll_ready(cx).map(|r| r.is_ok())
        })
        .await;
        if ready {
            return Some(lease);
        }
    }
}

/// Puts a connection whose answer ended back among this thread's idle ones.
fn put_back(key: Key, mut lease: Lease) {
    lease.idle_since = tokio::time::Instant::now();
    IDLE.with(|idle| {
        let mut idle = idle.borrow_mut();
        if idle.len() >= MAX_UPSTREAMS && !idle.contains_key(&key) {
            return;
        }
        let kept = idle.entry(key).or_default();
        if kept.len() < MAX_IDLE_PER_UPSTREAM {
            kept.push(lease);
        }
    });
}

/// Opens an HTTP/1.1 connection to `key` within the connect timeout.
async fn connect(connect_timeout_ms: u64, key: &Key) -> Result<Lease, SendError> {
    let connector = with_local(connect_timeout_ms, |local| local.http1.clone())?;
    let uri = Uri::builder()
        .scheme(key.scheme.clone())
        .authority(key.authority.clone())
        .path_and_query("/")
        .build()
        .map_err(|e| SendError::Connect(e.to_string()))?;
    // TCP and TLS together within the connect timeout.
    let io = tokio::time::timeout(
        Duration::from_millis(connect_timeout_ms),
        connector.oneshot(uri),
    )
    .await
    .map_err(|_| SendError::Connect("connect timeout".to_owned()))?
    .map_err(|e| SendError::Connect(e.to_string()))?;
    let mut extras = http::Extensions::new();
    io.connected().get_extras(&mut extras);
    let info = extras
        .remove::<HttpInfo>()
        .ok_or_else(|| SendError::Connect("the connection has no addresses".to_owned()))?;
    let (sender, conn) = h1::handshake(io)
        .await
        .map_err(|e| SendError::Connect(e.to_string()))?;
    Ok(Lease {
        sender,
        conn: Some(Box::pin(conn)),
        info,
        idle_since: tokio::time::Instant::now(),
    })
}

/// An upstream answer's body.
#[derive(Debug)]
pub enum UpstreamBody {
    /// From hyper-util's client (HTTP/2).
    Pooled(Incoming),
    /// From an HTTP/1.1 connection this body drives.
    Driven(Driven),
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            Self::Pooled(body) => Pin::new(body).poll_frame(cx),
            Self::Driven(body) => body.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Pooled(body) => body.is_end_stream(),
            Self::Driven(body) => body.body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Pooled(body) => body.size_hint(),
            Self::Driven(body) => body.body.size_hint(),
        }
    }
}

/// The body of an answer on an HTTP/1.1 connection: polls the connection before the
/// body it feeds, and puts the connection back at the body's end. Dropped before the
/// end, it closes the connection (the rest of the answer would have to be read first).
#[derive(Debug)]
pub struct Driven {
    body: Incoming,
    lease: Option<(Key, Lease)>,
}

impl Driven {
    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some((_, lease)) = self.lease.as_mut() {
            if !lease.drive(cx) {
                self.lease = None;
            }
        }
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        let ended = match &frame {
            None => true,
            Some(Ok(_)) => self.body.is_end_stream(),
            Some(Err(_)) => {
                self.lease = None;
                false
            }
        };
        if ended {
            if let Some((key, lease)) = self.lease.take() {
                put_back(key, lease);
            }
        }
        Poll::Ready(frame)
    }
}
