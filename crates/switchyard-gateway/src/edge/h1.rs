//! The gateway's own HTTP/1.1 server connection (issue 29): one task reads a request
//! head, runs the application on it, and writes the answer, polling the request's
//! handler, the request body still arriving and the client socket in one place — no
//! connection task, no channel between them.
//!
//! Framing decisions are `switchyard_core::http1`'s (strict against request smuggling);
//! the response encoding is [`super::wire`]'s. What this module adds is the order of
//! things:
//!
//! - A head is parsed only once its end (an empty line) has arrived, so a head that
//!   drips in byte by byte is scanned once, not once per byte; one longer than
//!   [`MAX_HEAD`] is refused with 431. A refused head is answered (400, 431, 501, 505)
//!   and the connection closed.
//! - Between requests the connection is under [`ClientConn`]'s deadlines: the header
//!   timeout once a head begins, the keep-alive idle timeout before. A gateway that
//!   stops closes it at once.
//! - A body that came whole with its head is handed over as it is (no copy); one that
//!   has not is read as the handler asks for it, at most [`BODY_AHEAD`] bytes ahead, and
//!   is under the body deadline ([`super::TimedBody`]). `Expect: 100-continue` is
//!   answered when the handler first asks for the body, so a request refused before
//!   that (a bad key) never makes the client send it.
//! - While the handler runs and the answer streams, the socket is watched: a client
//!   that closes its side ends the exchange at once and the handler is dropped (as
//!   hyper does without half-close), which releases what the request holds upstream.
//!   Bytes of a next, pipelined request are kept and read after the answer.
//! - The answer is written with `Content-Length` when its size is known, chunked
//!   otherwise (until close for an HTTP/1.0 client). A stream's frames are written as
//!   they come; frames that come together leave in one write.
//! - The connection closes after an answer when the client asked, when it drains (the
//!   gateway stops, a body was late), or when the request's body was not read to its
//!   end. A close that leaves a body unread lingers to read it away, so the client
//!   reads the answer instead of a reset.
//! - The HTTP/2 connection preface is handed back to the caller with the bytes read,
//!   to be served by hyper.

use super::{wire, Answer, App, InFlight, Limits, Shared, TimedBody};
use crate::clock::{Clock, SystemClock};
use crate::heads::{self, Fields, Span};
use crate::sync::lock;
use crate::telemetry::metrics::EdgeMetrics;
use axum::body::Body;
use axum::extract::ConnectInfo;
use bytes::{Bytes, BytesMut};
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, Method, Request, StatusCode, Uri};
use http_body::{Body as HttpBody, Frame, SizeHint};
use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;
use switchyard_core::client_conn::{ClientConn, Expiry};
use switchyard_core::http1::{self, ChunkError, Chunked, Framing, HeadError, Version};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tower::ServiceExt;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Longest request head read (nginx reads up to 32 kB by default, hyper 400 kB).
pub(super) const MAX_HEAD: usize = 64 * 1024;

/// Room a new read buffer has.
const READ_ROOM: usize = 8 * 1024;

/// Least spare room a read is made with; below it the buffer is replaced. The room
/// left after one request is read into by the next ones, so a buffer is allocated once
/// per several requests, not per read.
const MIN_ROOM: usize = 2 * 1024;

/// Most request-body bytes read ahead of the handler.
const BODY_AHEAD: usize = 64 * 1024;

/// Largest chunk of a chunked request body (bodies are bounded by the routes).
const MAX_CHUNK: u64 = 1 << 32;

/// Room the output buffer keeps between writes; a larger answer's is given back.
const KEEP_OUT: usize = 1024;

/// Output gathered past this is written before more is encoded.
const FLUSH_AT: usize = 64 * 1024;

/// Data frames this large are written from their own buffer, not copied.
const WRITE_DIRECT: usize = 16 * 1024;

/// Most bytes of an unread request body read away when the connection closes.
const LINGER_BYTES: usize = 1 << 20;

/// How long a closing connection reads away an unread request body.
const LINGER: Duration = Duration::from_secs(1);

/// What an HTTP/2 client sends first (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How the connection ended.
pub(super) enum End<S> {
    Closed,
    /// The client spoke HTTP/2 with prior knowledge: its connection and the bytes
    /// already read from it.
    Http2 {
        io: S,
        read: Bytes,
    },
}

/// One client connection served as HTTP/1.
pub(super) struct Conn<S> {
    io: S,
    /// Bytes read and not yet used.
    buf: BytesMut,
    /// Where the search for a head's end starts again (what was searched before).
    searched: usize,
    /// Bytes encoded and not yet written.
    out: Vec<u8>,
    /// Where the fields of the head being read are (kept to reuse its room).
    spans: Vec<(Span, Span)>,
    read_closed: bool,
    shared: Arc<Shared>,
    limits: Limits,
    metrics: EdgeMetrics,
    app: App,
    peer: Option<SocketAddr>,
    /// Resolves when the gateway starts to stop.
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// Goes off at (or before) the connection's deadline between requests.
    timer: Pin<Box<tokio::time::Sleep>>,
    stop_seen: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    pub(super) fn new(
        io: S,
        shared: Arc<Shared>,
        limits: Limits,
        metrics: EdgeMetrics,
        app: App,
        peer: Option<SocketAddr>,
        stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    ) -> Self {
        let first_deadline = shared.accepted.at_ms(limits.conn.header_read_ms);
        Self {
            io,
            buf: BytesMut::new(),
            searched: 0,
            out: Vec::new(),
            spans: Vec::new(),
            read_closed: false,
            shared,
            limits,
            metrics,
            app,
            peer,
            stop,
            timer: Box::pin(tokio::time::sleep_until(first_deadline)),
            stop_seen: false,
        }
    }

    /// Serves requests until the connection closes or turns out to be HTTP/2.
    pub(super) async fn run(mut self) -> End<S> {
        let mut first = true;
        loop {
            let incoming = match self.next_head(first).await {
                Ok(incoming) => incoming,
                Err(Ending::Http2) => {
                    return End::Http2 {
                        io: self.io,
                        read: self.buf.freeze(),
                    }
                }
                Err(Ending::Close) => break,
            };
            first = false;
            if !self.exchange(incoming).await {
                break;
            }
        }
        End::Closed
    }

    /// Reads until a whole request head is buffered, under the connection's deadlines.
    async fn next_head(&mut self, first: bool) -> Result<Incoming, Ending> {
        loop {
            if first && starts_like_h2(&self.buf) {
                if self.buf.len() >= H2_PREFACE.len() {
                    return Err(Ending::Http2);
                }
            } else if !self.buf.is_empty() {
                match self.take_head() {
                    Ok(Some(incoming)) => return Ok(incoming),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "Refused a request head.");
                        self.refuse(e).await;
                        return Err(Ending::Close);
                    }
                }
            }
            if self.read_closed || self.stop_seen {
                return Err(Ending::Close);
            }
            let now = self.shared.accepted.elapsed_ms();
            let deadline = lock(&self.shared.state).deadline(&self.limits.conn);
            let at_ms = match deadline {
                Some(d) if d.at_ms <= now => {
                    match d.expiry {
                        Expiry::HeaderRead => self.metrics.header_timeouts.inc(),
                        Expiry::KeepAliveIdle => self.metrics.idle_timeouts.inc(),
                        Expiry::Drained => 0,
                    };
                    return Err(Ending::Close);
                }
                Some(d) => d.at_ms,
                None => now.saturating_add(self.limits.conn.header_read_ms),
            };
            // The timer moves only earlier, or once it has gone off: a deadline that
            // moved later (the next request's) is looked at when the earlier one
            // passes, so a busy connection does not re-arm a timer per request.
            let at = self.shared.accepted.at_ms(at_ms);
            if self.timer.is_elapsed() || self.timer.deadline() > at {
                self.timer.as_mut().reset(at);
            }
            self.room(MIN_ROOM);
            tokio::select! {
                read = self.io.read_buf(&mut self.buf) => match read {
                    Ok(0) | Err(_) => return Err(Ending::Close),
                    Ok(_) => self.shared.update(ClientConn::bytes_received),
                },
                () = &mut self.stop, if !self.stop_seen => {
                    self.stop_seen = true;
                    return Err(Ending::Close);
                }
                () = self.timer.as_mut() => {}
            }
        }
    }

    /// The request whose head is at the start of the buffer, once its end has arrived.
    /// The head is parsed at once; after a partial one, only the new bytes are searched
    /// for its end before it is parsed again, so a head that drips in is not parsed
    /// once per byte.
    fn take_head(&mut self) -> Result<Option<Incoming>, HeadError> {
        if self.searched > 0 && !head_ends(&self.buf[self.searched.saturating_sub(2)..]) {
            self.searched = self.buf.len();
            if self.buf.len() >= MAX_HEAD {
                return Err(HeadError::TooLarge(MAX_HEAD));
            }
            return Ok(None);
        }
        let mut storage = http1::header_storage();
        let base = self.buf.as_ptr() as usize;
        let at = |part: &[u8]| Span::of(part, base);
        let (len, target, method, framing, keep_alive, expect_continue, http11) = {
            let Some(head) = http1::parse_request(&self.buf, &mut storage, MAX_HEAD)? else {
                if self.searched > 0 {
                    // Its end arrived, yet httparse wants more: not a head.
                    return Err(HeadError::Malformed);
                }
                self.searched = self.buf.len();
                return Ok(None);
            };
            heads::record(&mut self.spans, head.headers, base);
            let method =
                Method::from_bytes(head.method.as_bytes()).map_err(|_| HeadError::Malformed)?;
            (
                head.len,
                at(head.target.as_bytes()),
                method,
                head.framing,
                head.keep_alive,
                head.expect_continue,
                head.version == Version::Http11,
            )
        };
        self.searched = 0;
        // The target and the field values are slices of what was read, not copies.
        let read = self.buf.split_to(len).freeze();
        let head_request = method == Method::HEAD;
        // A direct route's request is taken by its path as sent (origin form, without
        // a query): no URI is parsed and no request built, and only the fields its
        // route reads are kept, outside any header map. The router's request gets
        // every field, and the client's address.
        let path =
            Some(&read[target.range()]).filter(|t| t.first() == Some(&b'/') && !t.contains(&b'?'));
        if let Some(taken) = path.and_then(|p| self.app.direct.take(&method, p)) {
            let fields = Fields::of_head(&read, &self.spans, taken.reads);
            let (body, exchange) = self.body(framing, expect_continue);
            return Ok(Some(Incoming {
                call: Call::Direct {
                    route: taken.route,
                    body,
                    fields,
                },
                exchange,
                keep_alive,
                head_request,
                http11,
            }));
        }
        let uri =
            Uri::from_maybe_shared(read.slice(target.range())).map_err(|_| HeadError::Target)?;
        let (fields, headers) = match self.app.direct.take(&method, uri.path().as_bytes()) {
            Some(taken) => (
                Some((
                    taken.route,
                    Fields::of_head(&read, &self.spans, taken.reads),
                )),
                HeaderMap::new(),
            ),
            None => (
                None,
                heads::header_map(&read, &self.spans).ok_or(HeadError::Malformed)?,
            ),
        };
        let (body, exchange) = self.body(framing, expect_continue);
        let call = match fields {
            Some((route, fields)) => Call::Direct {
                route,
                body,
                fields,
            },
            None => {
                let mut request = Request::new(body);
                *request.method_mut() = method;
                *request.uri_mut() = uri;
                *request.version_mut() = if http11 {
                    http::Version::HTTP_11
                } else {
                    http::Version::HTTP_10
                };
                *request.headers_mut() = headers;
                if let Some(peer) = self.peer {
                    request.extensions_mut().insert(ConnectInfo(peer));
                }
                Call::Routed(request)
            }
        };
        Ok(Some(Incoming {
            call,
            exchange,
            keep_alive,
            head_request,
            http11,
        }))
    }

    /// The request's body: whole, when it came with its head (a slice of what was
    /// read); otherwise fed from the connection as it arrives, starting with the bytes
    /// already read.
    fn body(&mut self, framing: Framing, expect_continue: bool) -> (Body, Exchange) {
        let (decoder, size) = match framing {
            Framing::Empty | Framing::Length(0) => return (Body::empty(), Exchange::complete()),
            Framing::Length(n) => match usize::try_from(n) {
                Ok(n) if n <= self.buf.len() => {
                    let body = Body::from(self.buf.split_to(n).freeze());
                    return (body, Exchange::complete());
                }
                _ => (Decoder::Length(n), Some(n)),
            },
            Framing::Chunked => (Decoder::Chunked(Chunked::new(MAX_CHUNK)), None),
        };
        let inbound = Arc::new(Mutex::new(Inbound::new(size)));
        let body = Body::new(TimedBody::new(
            InboundBody(Arc::clone(&inbound)),
            self.limits.body_read_ms,
            Arc::clone(&self.shared),
            false,
        ));
        let exchange = Exchange {
            inbound: Some(inbound),
            decoder,
            continue_at: expect_continue.then_some(0),
            broken: false,
        };
        (body, exchange)
    }

    /// Answers a refused head and closes.
    async fn refuse(&mut self, error: HeadError) {
        let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::BAD_REQUEST);
        self.out.clear();
        wire::refusal(&mut self.out, status, now_second());
        if self.flush().await {
            self.close(true).await;
        }
    }

    /// Runs one request and writes its answer: whether the connection goes on.
    async fn exchange(&mut self, incoming: Incoming) -> bool {
        let Incoming {
            call,
            mut exchange,
            keep_alive,
            head_request,
            http11,
        } = incoming;
        self.shared.update(|c, now| c.request_started(false, now));
        let in_flight = InFlight(Arc::clone(&self.shared));
        // Body bytes that came with the head are decoded before the handler asks.
        if let Some(inbound) = exchange.inbound.clone() {
            self.decode(&mut exchange, &inbound);
        }
        if exchange.inbound.is_none() && self.buf.is_empty() {
            // Nothing of the next request yet: the buffer goes, so a long answer (a
            // stream) does not hold it; the next head gets a new one.
            self.buf = BytesMut::new();
        }
        let mut call = self.answer(call);
        let answered = poll_fn(|cx| loop {
            if let Poll::Ready(answer) = call.as_mut().poll(cx) {
                return Poll::Ready(Some(answer));
            }
            match ready!(self.pump(cx, &mut exchange)) {
                Pumped::Progress => {}
                Pumped::Gone => return Poll::Ready(None),
            }
        })
        .await;
        // The handler's future is done: its box (the pipeline's whole state, many KiB)
        // goes now, not when a long answer (a stream) has been written.
        drop(call);
        let Some((response, late)) = answered else {
            return false;
        };
        let (parts, body) = response.into_parts();
        let body_read = exchange.body_read();
        let exact = body.size_hint().exact();
        // The handler's own length is looked up only for a body that does not know
        // its size (a `HEAD` answer's): a lookup hashes the name.
        let said_length = match exact {
            Some(_) => None,
            None => parts
                .headers
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok()),
        };
        let framing = wire::framing(parts.status, head_request, exact, said_length, http11);
        let close = !keep_alive
            || !body_read
            || framing == wire::BodyFraming::UntilClose
            || lock(&self.shared.state).is_draining();
        let persistence = match (close, http11) {
            (true, _) => wire::Persistence::Close,
            (false, true) => wire::Persistence::Default,
            (false, false) => wire::Persistence::KeepAlive,
        };
        self.out.clear();
        wire::head(
            &mut self.out,
            parts.status,
            (&parts.headers, late.as_ref().map(|l| l.0.as_ref())),
            framing,
            persistence,
            now_second(),
        );
        let sent = match framing {
            wire::BodyFraming::None { .. } => {
                drop(body);
                self.flush().await
            }
            _ => self.send_body(body, framing, &mut exchange).await,
        };
        drop(in_flight);
        if !sent {
            return false;
        }
        if close {
            self.close(!exchange.body_read()).await;
            return false;
        }
        true
    }

    /// The answer to a request: from its direct route, or the router.
    fn answer(&self, call: Call) -> Answer {
        let request = match call {
            Call::Direct {
                route,
                body,
                fields,
            } => return self.app.direct.call(route, body, fields),
            Call::Routed(request) => request,
        };
        let routed = self.app.router.clone().oneshot(request);
        Box::pin(async move {
            match routed.await {
                Ok(response) => (response, None),
                Err(never) => match never {},
            }
        })
    }

    /// Writes the answer's body in `framing`, watching the client while it waits for
    /// frames: whether it was all written.
    async fn send_body(
        &mut self,
        mut body: Body,
        framing: wire::BodyFraming,
        exchange: &mut Exchange,
    ) -> bool {
        let chunked = framing == wire::BodyFraming::Chunked;
        let mut left = match framing {
            wire::BodyFraming::Length(n) => Some(n),
            _ => None,
        };
        loop {
            let step = poll_fn(|cx| loop {
                match Pin::new(&mut body).poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => return Poll::Ready(Step::Frame(frame)),
                    Poll::Ready(None) => return Poll::Ready(Step::End),
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Step::Failed(e)),
                    Poll::Pending if !self.out.is_empty() => return Poll::Ready(Step::Flush),
                    Poll::Pending => match ready!(self.pump(cx, exchange)) {
                        Pumped::Progress => {}
                        Pumped::Gone => return Poll::Ready(Step::Gone),
                    },
                }
            })
            .await;
            match step {
                Step::Frame(frame) => {
                    let Ok(data) = frame.into_data() else {
                        // Trailers are not sent over HTTP/1.
                        continue;
                    };
                    if data.is_empty() {
                        continue;
                    }
                    if let Some(left) = &mut left {
                        match left.checked_sub(data.len() as u64) {
                            Some(l) => *left = l,
                            None => {
                                tracing::warn!("A response body was longer than its length.");
                                return false;
                            }
                        }
                    }
                    if chunked {
                        wire::chunk_start(&mut self.out, data.len());
                    }
                    if data.len() >= WRITE_DIRECT {
                        if !self.flush().await || self.io.write_all(&data).await.is_err() {
                            return false;
                        }
                    } else {
                        self.out.extend_from_slice(&data);
                    }
                    if chunked {
                        self.out.extend_from_slice(wire::CHUNK_END);
                    }
                    if self.out.len() >= FLUSH_AT && !self.flush().await {
                        return false;
                    }
                }
                Step::Flush => {
                    if !self.flush().await {
                        return false;
                    }
                }
                Step::End => {
                    if left.is_some_and(|l| l > 0) {
                        tracing::warn!("A response body was shorter than its length.");
                        return false;
                    }
                    if chunked {
                        self.out.extend_from_slice(wire::LAST_CHUNK);
                    }
                    return self.flush().await;
                }
                Step::Failed(e) => {
                    tracing::debug!(error = %e, "A response body failed; closing the connection.");
                    return false;
                }
                Step::Gone => return false,
            }
        }
    }

    /// Moves the request along while its handler or its answer waits: the gateway
    /// stopping, `100 Continue`, the request body, and the client closing.
    fn pump(&mut self, cx: &mut Context<'_>, exchange: &mut Exchange) -> Poll<Pumped> {
        if !self.stop_seen && self.stop.as_mut().poll(cx).is_ready() {
            self.stop_seen = true;
            self.shared.stopping.send_replace(true);
            self.shared.update(ClientConn::drain);
        }
        let Some(inbound) = exchange.inbound.clone() else {
            return self.watch_close(cx);
        };
        if Arc::strong_count(&inbound) == 1 {
            // The handler dropped the body: nothing more of it is read.
            return Poll::Pending;
        }
        let (wanted, buffered) = {
            let i = lock(&inbound);
            (i.wanted, i.buffered)
        };
        if let Some(at) = exchange.continue_at {
            if !wanted {
                return Poll::Pending;
            }
            let rest = wire::CONTINUE.get(at..).unwrap_or_default();
            match ready!(Pin::new(&mut self.io).poll_write(cx, rest)) {
                Ok(n) if n == rest.len() => exchange.continue_at = None,
                Ok(0) | Err(_) => return Poll::Ready(Pumped::Gone),
                Ok(n) => exchange.continue_at = Some(at + n),
            }
            return Poll::Ready(Pumped::Progress);
        }
        if !self.buf.is_empty() && self.decode(exchange, &inbound) {
            return Poll::Ready(Pumped::Progress);
        }
        if buffered >= BODY_AHEAD {
            return Poll::Pending;
        }
        let left = match exchange.decoder {
            Decoder::Length(left) => usize::try_from(left).unwrap_or(usize::MAX),
            _ => READ_ROOM,
        };
        self.room(left.clamp(MIN_ROOM, BODY_AHEAD));
        match ready!(pin!(self.io.read_buf(&mut self.buf)).poll(cx)) {
            Ok(0) | Err(_) => {
                lock(&inbound).fail(InboundError::Incomplete);
                Poll::Ready(Pumped::Gone)
            }
            Ok(_) => {
                self.shared.update(ClientConn::bytes_received);
                self.decode(exchange, &inbound);
                Poll::Ready(Pumped::Progress)
            }
        }
    }

    /// With the request's body read: polls the socket for the client closing.
    fn watch_close(&mut self, cx: &mut Context<'_>) -> Poll<Pumped> {
        if self.read_closed || !self.buf.is_empty() {
            // A pipelined request's bytes wait in the buffer; no more is read.
            return Poll::Pending;
        }
        // Read into a small buffer on the stack: a stream's connection holds no read
        // buffer while it only watches for the client leaving.
        let mut peek = [0u8; 1024];
        let mut peek = ReadBuf::new(&mut peek);
        match ready!(Pin::new(&mut self.io).poll_read(cx, &mut peek)) {
            Ok(()) if peek.filled().is_empty() => {
                self.read_closed = true;
                Poll::Ready(Pumped::Gone)
            }
            Err(_) => {
                self.read_closed = true;
                Poll::Ready(Pumped::Gone)
            }
            Ok(()) => {
                self.buf.extend_from_slice(peek.filled());
                Poll::Pending
            }
        }
    }

    /// Hands the body bytes in the buffer to the handler: whether any went.
    fn decode(&mut self, exchange: &mut Exchange, inbound: &Mutex<Inbound>) -> bool {
        let mut moved = false;
        let mut inbound = lock(inbound);
        while !self.buf.is_empty() && inbound.buffered < BODY_AHEAD {
            match &mut exchange.decoder {
                Decoder::Done => break,
                Decoder::Length(left) => {
                    let take =
                        usize::try_from(*left).map_or(self.buf.len(), |l| l.min(self.buf.len()));
                    *left -= take as u64;
                    inbound.push(self.buf.split_to(take).freeze());
                    if *left == 0 {
                        exchange.decoder = Decoder::Done;
                    }
                }
                Decoder::Chunked(chunked) => match chunked.step(&self.buf) {
                    Ok(step) => {
                        let used = self.buf.split_to(step.used).freeze();
                        if let Some(data) = step.data {
                            inbound.push(used.slice(data));
                        }
                        if chunked.is_done() {
                            exchange.decoder = Decoder::Done;
                        }
                    }
                    Err(e) => {
                        inbound.fail(InboundError::Chunked(e));
                        exchange.decoder = Decoder::Done;
                        exchange.broken = true;
                    }
                },
            }
            moved = true;
        }
        if matches!(exchange.decoder, Decoder::Done) {
            inbound.end();
            exchange.inbound = None;
            moved = true;
        }
        moved
    }

    /// Makes sure the read buffer has `want` bytes of spare room.
    fn room(&mut self, want: usize) {
        if self.buf.capacity() - self.buf.len() < want {
            self.buf.reserve(want.max(READ_ROOM));
        }
    }

    /// Writes what is encoded: whether it all went.
    async fn flush(&mut self) -> bool {
        let written = self.io.write_all(&self.out).await.is_ok();
        self.out.clear();
        self.out.shrink_to(KEEP_OUT);
        written
    }

    /// Closes the connection; with a request body left unread, reads it away first (for
    /// a while, up to a size), so the client reads the answer rather than a reset.
    async fn close(&mut self, unread: bool) {
        let _ = self.io.shutdown().await;
        if !unread || self.read_closed {
            return;
        }
        // On the heap: an array here would sit in every connection's task, whichever
        // step it is at (a future is as large as its largest step).
        let mut sink = vec![0u8; 8 * 1024];
        let mut drained = 0usize;
        let _ = tokio::time::timeout(LINGER, async {
            while drained < LINGER_BYTES {
                match self.io.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => drained += n,
                }
            }
        })
        .await;
    }
}

/// Why the connection reads no further request.
enum Ending {
    /// The client spoke HTTP/2 with prior knowledge.
    Http2,
    Close,
}

/// A request read, with what its exchange needs.
struct Incoming {
    call: Call,
    exchange: Exchange,
    keep_alive: bool,
    head_request: bool,
    http11: bool,
}

/// Who answers a request, and what it is given.
enum Call {
    /// A direct route (by the number its `take` gave): the body, and the fields the
    /// route reads.
    Direct {
        route: usize,
        body: Body,
        fields: Fields,
    },
    /// The router: the whole request.
    Routed(Request<Body>),
}

/// What one body-less poll of the connection did.
enum Pumped {
    /// Something the handler may be waiting for happened: poll it again.
    Progress,
    /// The client is gone (or its connection failed).
    Gone,
}

/// What the answer's body gave.
enum Step {
    Frame(Frame<Bytes>),
    End,
    Failed(axum::Error),
    /// Nothing now, and output is waiting: write it.
    Flush,
    Gone,
}

/// The request body's side of an exchange.
struct Exchange {
    /// Shared with the handler's body while it still arrives.
    inbound: Option<Arc<Mutex<Inbound>>>,
    decoder: Decoder,
    /// `Some(bytes of 100 Continue written)` until it is all written.
    continue_at: Option<usize>,
    /// The body's framing was broken: nothing after it can be read.
    broken: bool,
}

impl Exchange {
    fn complete() -> Self {
        Self {
            inbound: None,
            decoder: Decoder::Done,
            continue_at: None,
            broken: false,
        }
    }

    /// Whether the connection read the request's body to its end, so the next bytes
    /// are a next request's.
    fn body_read(&self) -> bool {
        matches!(self.decoder, Decoder::Done) && !self.broken
    }
}

/// Where the connection is in a body that did not come whole with its head.
enum Decoder {
    /// Bytes left.
    Length(u64),
    Chunked(Chunked),
    Done,
}

/// Why a request body could not be read to its end.
#[derive(Debug, Clone, Copy, thiserror::Error)]
enum InboundError {
    #[error("the client closed the connection before the request body's end")]
    Incomplete,
    #[error("the request body's chunked framing is broken: {0}")]
    Chunked(ChunkError),
}

/// The request body between the connection, which reads it, and the handler.
#[derive(Debug)]
struct Inbound {
    chunks: VecDeque<Bytes>,
    buffered: usize,
    ended: bool,
    failed: Option<InboundError>,
    /// The handler asked for more than there was.
    wanted: bool,
    waker: Option<Waker>,
    /// Bytes of the body not yet given to the handler, when its length is known.
    left: Option<u64>,
}

impl Inbound {
    fn new(left: Option<u64>) -> Self {
        Self {
            chunks: VecDeque::new(),
            buffered: 0,
            ended: false,
            failed: None,
            wanted: false,
            waker: None,
            left,
        }
    }

    fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        self.buffered += data.len();
        self.chunks.push_back(data);
        self.wake();
    }

    fn end(&mut self) {
        self.ended = true;
        self.wake();
    }

    fn fail(&mut self, error: InboundError) {
        self.failed = Some(error);
        self.ended = true;
        self.wake();
    }

    fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// The handler's side of a request body that arrives after its head.
struct InboundBody(Arc<Mutex<Inbound>>);

impl HttpBody for InboundBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut inbound = lock(&self.0);
        if let Some(data) = inbound.chunks.pop_front() {
            inbound.buffered -= data.len();
            if let Some(left) = &mut inbound.left {
                *left = left.saturating_sub(data.len() as u64);
            }
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if let Some(error) = inbound.failed.take() {
            return Poll::Ready(Some(Err(Box::new(error))));
        }
        if inbound.ended {
            return Poll::Ready(None);
        }
        inbound.wanted = true;
        inbound.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        let inbound = lock(&self.0);
        inbound.ended && inbound.chunks.is_empty() && inbound.failed.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        lock(&self.0)
            .left
            .map_or_else(SizeHint::new, SizeHint::with_exact)
    }
}

/// Whether the buffer holds the empty line that ends a head (`\n\n`, lines may end in
/// a bare LF, or `\n\r\n`).
fn head_ends(buf: &[u8]) -> bool {
    buf.windows(2).enumerate().any(|(i, w)| {
        w[0] == b'\n' && (w[1] == b'\n' || (w[1] == b'\r' && buf.get(i + 2) == Some(&b'\n')))
    })
}

/// Whether what was read so far may be the HTTP/2 preface.
fn starts_like_h2(buf: &[u8]) -> bool {
    !buf.is_empty() && H2_PREFACE.starts_with(&buf[..buf.len().min(H2_PREFACE.len())])
}

/// The second a response's `Date` says.
fn now_second() -> u64 {
    SystemClock.now_ms() / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_ends_at_an_empty_line() {
        assert!(head_ends(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n"));
        assert!(head_ends(b"GET / HTTP/1.1\nhost: a\n\n"));
        assert!(head_ends(b"\n\r\n"));
        assert!(!head_ends(b"GET / HTTP/1.1\r\nhost: a\r\n\r"));
        assert!(!head_ends(b"GET / HTTP/1.1\r\nhost: a\r\n"));
        assert!(!head_ends(b"\r\n\r"));
        assert!(!head_ends(b""));
    }

    #[test]
    fn the_h2_preface_is_told_from_its_first_byte() {
        assert!(starts_like_h2(b"P"));
        assert!(starts_like_h2(b"PRI * HTTP/2.0\r\n"));
        assert!(starts_like_h2(H2_PREFACE));
        assert!(starts_like_h2(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0"));
        assert!(!starts_like_h2(b"POST / HTTP/1.1\r\n"));
        assert!(!starts_like_h2(b"GET"));
        assert!(!starts_like_h2(b""));
    }
}
