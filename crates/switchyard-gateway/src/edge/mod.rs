//! The edge (SPEC O5): serving one client connection under the timeouts that keep slow
//! or silent clients from holding resources, and the deadline of every request body.
//!
//! HTTP/1.1 is served by the gateway's own connection ([`h1`], issue 29); a connection
//! that opens with the HTTP/2 preface is handed, with the bytes already read, to
//! hyper's HTTP/2 connection. Either way the connection keeps a [`ClientConn`]
//! (switchyard-core) that says which deadline it is under — request head, keep-alive
//! idle, or none while a request is in flight — fed by the socket's reads, the requests
//! the connection starts and the responses it finishes. The HTTP/1 connection waits for
//! its next head under that deadline itself; for HTTP/2 a watchdog in the connection's
//! task wakes at it (`Tracked` and `Finished` feed the state), and hyper's own timeouts
//! are not used.
//!
//! Every request body that did not arrive whole with its head is wrapped in a
//! `TimedBody`, so every route is covered: the whole body must arrive within
//! `server.body_read_timeout_ms` of the request head — a deadline, not a gap between
//! frames, because a gap lets a client drip one byte per gap and hold the request
//! forever. A late body fails with [`BodyCut::Timeout`] (408 `request_body_timeout`),
//! and an HTTP/1 connection it came on is closed after the answer (the rest of that
//! body would otherwise have to be read first). When the gateway shuts down, a body
//! still arriving fails at once with [`BodyCut::Shutdown`] (503 `gateway_shutdown`), so
//! half-sent bodies do not hold the exit for the grace period, while requests whose
//! bodies are in keep being served.
//!
//! The edge knows nothing of routes, keys or upstreams: it serves the [`App`] it is
//! given (the routes answered directly, then the router) and imports no handler,
//! `state` or `pipeline`. The connection's state is locked only for an update, never
//! across an `.await`.

mod h1;
mod wire;

use crate::clock::Stopwatch;
use crate::heads::LateFields;
pub use crate::heads::{Fields, Numbers};
use crate::sync::lock;
use crate::telemetry::metrics::EdgeMetrics;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use bytes::Bytes;
use http::{Method, Request, Response, Version};
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prometheus_client::metrics::counter::Counter;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use switchyard_core::client_conn::{self, ClientConn, Expiry};
use switchyard_core::settings::Settings;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{watch, Notify};
use tower::ServiceExt;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a draining connection with nothing in flight may take to close on its own —
/// hyper closes HTTP/1 once the last response is flushed, HTTP/2 after its GOAWAY
/// exchange — before it is dropped. A second is plenty to flush to a live client; a
/// client that does not read cannot hold a connection longer than that.
const DRAIN_LINGER_MS: u64 = 1_000;

/// An answer on its way, with the fields it adds to its head as numbers (see
/// [`LateFields`]).
pub type Answer = Pin<Box<dyn Future<Output = (Response<Body>, Option<LateFields>)> + Send>>;

/// Routes the edge answers without the router (the inference routes, see
/// `frontends::Inference`): its matching and boxing are a measurable share of a
/// request's work there.
pub trait Direct: Send + Sync + std::fmt::Debug {
    /// For a request to `method` `path` (the path as sent, without a query), the route
    /// that takes it; `None` for a request none takes (the router gets every field, and
    /// the client's address). The HTTP/1 connection then builds no `http` request for
    /// it: it keeps only the fields the route reads, without a header map (clients send
    /// many the inference routes never read), and parses no URI.
    fn take(&self, method: &Method, path: &[u8]) -> Option<Taken>;

    /// The answer to a request [`take`](Self::take) took for `route`: its body, and the
    /// fields its route reads.
    fn call(&self, route: usize, body: Body, fields: Fields) -> Answer;
}

/// A request a [`Direct`] route takes: the route's number, its own to give, and which
/// header fields it reads.
#[derive(Debug, Clone, Copy)]
pub struct Taken {
    pub route: usize,
    pub reads: Numbers,
}

/// What the edge serves: the routes it answers directly, and the router for the rest.
#[derive(Debug, Clone)]
pub struct App {
    pub direct: Arc<dyn Direct>,
    pub router: Router,
}

/// Why a request body stopped before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyCut {
    #[error(
        "the request body was not complete within {limit_ms} ms (server.body_read_timeout_ms)"
    )]
    Timeout { limit_ms: u64 },
    #[error("the gateway is shutting down and the request body was not complete; retry")]
    Shutdown,
}

impl BodyCut {
    /// The cut behind a body-read error, however many layers (axum, `Limited`, an
    /// extractor's rejection) wrap it.
    pub fn find(error: &(dyn std::error::Error + 'static)) -> Option<Self> {
        let mut next = Some(error);
        while let Some(e) = next {
            if let Some(cut) = e.downcast_ref::<Self>() {
                return Some(*cut);
            }
            next = e.source();
        }
        None
    }
}

/// The edge's timeouts, read from the settings when a connection is accepted.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    conn: client_conn::Limits,
    body_read_ms: u64,
}

impl Limits {
    pub fn from_settings(s: &Settings) -> Self {
        Self {
            conn: client_conn::Limits {
                header_read_ms: s.header_read_timeout_ms,
                keepalive_idle_ms: s.keepalive_idle_timeout_ms,
                drain_linger_ms: DRAIN_LINGER_MS,
            },
            body_read_ms: s.body_read_timeout_ms,
        }
    }
}

/// What one connection's socket, requests and watchdog share. Everything of a
/// connection runs on one I/O thread, so the lock is never contended.
#[derive(Debug)]
struct Shared {
    state: Mutex<ClientConn>,
    /// The connection's clock: milliseconds since it was accepted.
    accepted: Stopwatch,
    /// Wakes the watchdog when the connection must drain now (a late HTTP/1 body).
    drain_now: Notify,
    /// Set when the gateway starts shutting down: cuts bodies still arriving.
    stopping: watch::Sender<bool>,
    body_timeouts: Counter,
}

impl Shared {
    fn update(&self, f: impl FnOnce(&mut ClientConn, u64)) {
        f(&mut lock(&self.state), self.accepted.elapsed_ms());
    }
}

/// Serves one client connection (HTTP/1.1, or HTTP/2 with prior knowledge) from `peer`
/// until it closes, its deadline passes, or — once `stop` is set — its requests in
/// flight are done. Connections with nothing in flight close at once on `stop`. The
/// connection is any byte stream: a TCP socket, or an in-memory pipe (the fuzz target
/// that drives the whole gateway).
///
/// HTTP/1 is served by the gateway's own connection ([`h1`]); a connection that opens
/// with the HTTP/2 preface is handed to hyper.
pub async fn serve<S>(
    stream: S,
    peer: Option<SocketAddr>,
    app: App,
    limits: Limits,
    metrics: EdgeMetrics,
    stop: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let accepted = Stopwatch::start();
    let shared = Arc::new(Shared {
        state: Mutex::new(ClientConn::new(accepted.elapsed_ms())),
        accepted,
        drain_now: Notify::new(),
        stopping: watch::Sender::new(false),
        body_timeouts: metrics.body_timeouts.clone(),
    });
    let mut h1_stop = stop.clone();
    let conn = h1::Conn::new(
        stream,
        Arc::clone(&shared),
        limits,
        metrics.clone(),
        app.clone(),
        peer,
        Box::pin(async move { stopped(&mut h1_stop).await }),
    );
    if let h1::End::Http2 { io, read } = conn.run().await {
        let io = Tracked {
            read,
            io,
            shared: Arc::clone(&shared),
        };
        serve_http2(io, peer, app.router, limits, metrics, stop, shared).await;
    }
}

/// Serves an HTTP/2 connection with hyper, under the connection's deadlines: a
/// watchdog in the connection's task wakes at the deadline the state gives, and at the
/// latest after `recheck`: events on the request path (bytes, requests starting and
/// finishing) only update the state, without waking anything, and the next look comes
/// no later than any deadline they set. Only a drain wakes it at once.
async fn serve_http2<S>(
    stream: S,
    peer: Option<SocketAddr>,
    app: Router,
    limits: Limits,
    metrics: EdgeMetrics,
    mut stop: watch::Receiver<bool>,
    shared: Arc<Shared>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(stream);
    let service = ConnService {
        app,
        shared: Arc::clone(&shared),
        body_read_ms: limits.body_read_ms,
        peer,
    };
    let builder = http2::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let (mut shutdown_begun, mut stop_seen) = (false, false);
    loop {
        let now = shared.accepted.elapsed_ms();
        let (deadline, draining) = {
            let state = lock(&shared.state);
            (state.deadline(&limits.conn), state.is_draining())
        };
        if draining && !shutdown_begun {
            conn.as_mut().graceful_shutdown();
            shutdown_begun = true;
        }
        let recheck_ms = recheck(&limits.conn, draining);
        let wake_in_ms = match deadline {
            Some(d) if d.at_ms <= now => {
                match d.expiry {
                    Expiry::Drained => return,
                    Expiry::HeaderRead => metrics.header_timeouts.inc(),
                    Expiry::KeepAliveIdle => metrics.idle_timeouts.inc(),
                };
                shared.update(ClientConn::drain);
                continue;
            }
            Some(d) => (d.at_ms - now).min(recheck_ms),
            None => recheck_ms,
        };
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "A client connection ended with an error.");
                }
                return;
            }
            () = stopped(&mut stop), if !stop_seen => {
                stop_seen = true;
                shared.stopping.send_replace(true);
                shared.update(ClientConn::drain);
            }
            () = shared.drain_now.notified() => {}
            () = tokio::time::sleep(Duration::from_millis(wake_in_ms)) => {}
        }
    }
}

/// The longest the watchdog sleeps without looking: the shortest timeout a phase that
/// begins while it sleeps can have, so that phase is looked at before its deadline.
fn recheck(limits: &client_conn::Limits, draining: bool) -> u64 {
    let phases = limits.header_read_ms.min(limits.keepalive_idle_ms);
    if draining {
        phases.min(limits.drain_linger_ms).max(1)
    } else {
        phases.max(1)
    }
}

/// The client socket as hyper reads it: the bytes already read from it (the HTTP/2
/// preface) first, then the socket, reporting received bytes to the connection's state.
struct Tracked<S> {
    read: Bytes,
    io: S,
    shared: Arc<Shared>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.read.is_empty() {
            let n = this.read.len().min(buf.remaining());
            buf.put_slice(&this.read.split_to(n));
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.shared.update(ClientConn::bytes_received);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The application as the connection's hyper service: each request counts as in flight
/// from its head until its response body is done or dropped, and its body is timed.
#[derive(Clone)]
struct ConnService {
    app: Router,
    shared: Arc<Shared>,
    body_read_ms: u64,
    /// The client's address, given to every request as axum's `ConnectInfo` (the
    /// dashboard throttles sign-in attempts by it).
    peer: Option<SocketAddr>,
}

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<Finished>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Finished>, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let multiplexed = request.version() == Version::HTTP_2;
        self.shared
            .update(|c, now| c.request_started(multiplexed, now));
        let in_flight = InFlight(Arc::clone(&self.shared));
        let mut request = request.map(|body| self.timed(body, multiplexed));
        if let Some(peer) = self.peer {
            request.extensions_mut().insert(ConnectInfo(peer));
        }
        let response = self.app.clone().oneshot(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| Finished {
                body,
                _in_flight: in_flight,
            }))
        })
    }
}

impl ConnService {
    /// The request body under its deadline (an empty body needs none).
    fn timed(&self, body: Incoming, multiplexed: bool) -> Body {
        if body.is_end_stream() {
            return Body::new(body);
        }
        Body::new(TimedBody::new(
            body,
            self.body_read_ms,
            Arc::clone(&self.shared),
            multiplexed,
        ))
    }
}

/// A request body that fails with a [`BodyCut`] when it is late or the gateway shuts
/// down before its end. The deadline's timer (and the shutdown watch) are armed only
/// once the body has to wait for the client: a body that arrived with its head — nearly
/// every API request — never touches the timer wheel.
struct TimedBody<B> {
    inner: B,
    deadline: tokio::time::Instant,
    limit_ms: u64,
    /// Resolves when the body must be cut; armed at the first wait.
    cut: Option<Pin<Box<dyn Future<Output = BodyCut> + Send>>>,
    /// The body ended or was cut.
    finished: bool,
    shared: Arc<Shared>,
    multiplexed: bool,
}

impl<B> TimedBody<B> {
    /// `inner` under a deadline `limit_ms` from now; `multiplexed` on HTTP/2, where a
    /// late body does not close the connection.
    fn new(inner: B, limit_ms: u64, shared: Arc<Shared>, multiplexed: bool) -> Self {
        Self {
            inner,
            deadline: tokio::time::Instant::now() + Duration::from_millis(limit_ms),
            limit_ms,
            cut: None,
            finished: false,
            shared,
            multiplexed,
        }
    }

    fn arm(&mut self) -> &mut Pin<Box<dyn Future<Output = BodyCut> + Send>> {
        let (deadline, limit_ms) = (self.deadline, self.limit_ms);
        let shared = &self.shared;
        self.cut.get_or_insert_with(|| {
            let mut stopping = shared.stopping.subscribe();
            Box::pin(async move {
                tokio::select! {
                    () = tokio::time::sleep_until(deadline) => BodyCut::Timeout { limit_ms },
                    _ = stopping.wait_for(|s| *s) => BodyCut::Shutdown,
                }
            })
        })
    }
}

impl<B> HttpBody for TimedBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        // What has arrived is passed on; the deadline is checked whenever the body has
        // to wait for more, so a client dripping its body is cut all the same.
        if let Poll::Ready(polled) = Pin::new(&mut this.inner).poll_frame(cx) {
            if polled.is_none() || this.inner.is_end_stream() {
                this.finished = true;
                this.cut = None;
            }
            return Poll::Ready(polled.map(|frame| frame.map_err(Into::into)));
        }
        let Poll::Ready(reason) = this.arm().as_mut().poll(cx) else {
            return Poll::Pending;
        };
        this.finished = true;
        this.cut = None;
        if let BodyCut::Timeout { .. } = reason {
            this.shared.body_timeouts.inc();
            if !this.multiplexed {
                // The rest of the body is still on its way: the connection cannot carry
                // another request, so it closes after the answer.
                this.shared.update(ClientConn::drain);
                this.shared.drain_now.notify_one();
            }
        }
        Poll::Ready(Some(Err(Box::new(reason))))
    }

    fn is_end_stream(&self) -> bool {
        self.finished || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Counts a request as in flight on its connection until dropped.
struct InFlight(Arc<Shared>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.update(ClientConn::request_finished);
    }
}

/// A response body that keeps its request in flight until it is done or dropped, so a
/// stream counts as busy to its end.
struct Finished {
    body: Body,
    _in_flight: InFlight,
}

impl HttpBody for Finished {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Resolves once the flag is set (or its sender is gone).
pub(crate) async fn stopped(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|v| *v).await;
}
