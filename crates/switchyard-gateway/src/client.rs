//! The upstream HTTP client, with rustls: HTTP/1.1 connections driven by the request
//! that uses them, and hyper-util's pooled client for HTTP/2 with prior knowledge (h2c)
//! and the gateway's own calls (OAuth token refreshes).
//!
//! A general-purpose client (reqwest) wraps every request in redirect and retry layers
//! and re-parses URLs; profiles showed those at over a tenth of the gateway's CPU per
//! request. The gateway needs none of it — upstream requests are built from scratch,
//! redirects are never followed, failover is the gateway's own decision.
//!
//! HTTP/1.1 ([`send`]) is the gateway's own: each I/O thread keeps its idle upstream
//! connections, by scheme and authority. A request takes one (or opens one), writes its
//! head and body, and reads the answer's head itself (`switchyard_core::http1`'s
//! framing: an answer two parsers could delimit differently is refused); the answer's
//! body ([`UpstreamBody`]) reads the rest off the same connection and puts it back among
//! the idle ones at its end. No task per connection, no channel between tasks, no
//! connection state machine between the request and the socket: issue 29 measured
//! hyper-util's pool and connection task at 10 k instructions per request over hyper's
//! low-level connection, and that at 9 k over a hand-written one (examples/floors, F2,
//! F4 and F5). Over TLS, ALPN offers HTTP/1.1 only. A taken connection the upstream
//! closed meanwhile is noticed when it is taken (it reads as closed), or when the
//! request cannot be written to it; either way the request goes once more on a new
//! connection.
//!
//! Each I/O thread also keeps its own hyper-util clients (and so their pools): a pooled
//! connection's task runs on the thread that opened it, and a request on another thread
//! would have to hand every message across threads. Clients and connectors are rebuilt
//! when the connect timeout changes.
//!
//! It only carries what it is handed: building the request and classifying its failures
//! are `crate::upstream`'s, and it imports nothing from the rest of the crate but the
//! HTTP/1 head helpers it shares with the server (`crate::heads`).

use crate::heads::{self, push_decimal, Kept, Reads, Span};
use bytes::{Bytes, BytesMut};
use http::header::{ACCEPT, CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::{Connection, HttpConnector, HttpInfo};
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::Duration;
use switchyard_core::http1::{self, AnswerFraming, Chunked};
use switchyard_core::FastMap;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
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

/// Certificates trusted for upstream TLS besides the web's roots (`server.upstream_ca_file`).
static TRUSTED: Mutex<Vec<CertificateDer<'static>>> = Mutex::new(Vec::new());

/// Moves whenever [`TRUSTED`] grows, so each thread rebuilds its clients.
static TRUSTED_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Why a file of CA certificates cannot be trusted.
#[derive(Debug, thiserror::Error)]
#[error("upstream CA file {path}: {reason}")]
pub struct CaFileError {
    path: String,
    reason: String,
}

/// The CA certificates of the PEM file at `path`, each checked as a trust anchor.
pub fn load_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, CaFileError> {
    let error = |reason: String| CaFileError {
        path: path.display().to_string(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(e.to_string()))?;
    if certs.is_empty() {
        return Err(error("it holds no PEM certificate".to_owned()));
    }
    let mut check = rustls::RootCertStore::empty();
    for cert in &certs {
        check
            .add(cert.clone())
            .map_err(|e| error(format!("a certificate cannot be read: {e}")))?;
    }
    Ok(certs)
}

/// Trusts `certs` for upstream TLS connections besides the web's roots, from the next
/// connection on.
pub fn trust(certs: Vec<CertificateDer<'static>>) {
    let mut trusted = TRUSTED.lock().unwrap_or_else(PoisonError::into_inner);
    let before = trusted.len();
    for cert in certs {
        if !trusted.contains(&cert) {
            trusted.push(cert);
        }
    }
    if trusted.len() != before {
        TRUSTED_GENERATION.fetch_add(1, Ordering::Release);
    }
}

/// The connector of plain and TLS connections; `http2` offers HTTP/2 by ALPN besides
/// HTTP/1.1. TLS trusts the web's roots and what [`trust`] added.
fn connector(
    connect_timeout_ms: u64,
    http2: bool,
) -> Result<HttpsConnector<HttpConnector>, ClientError> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_millis(connect_timeout_ms)));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let trusted = TRUSTED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let builder = if trusted.is_empty() {
        hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(provider)
            .map_err(|e| ClientError(e.to_string()))?
    } else {
        let mut roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        roots.add_parsable_certificates(trusted);
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ClientError(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config)
    };
    let builder = builder.https_or_http().enable_http1();
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

/// This thread's clients and HTTP/1.1 connector, with the connect timeout and the
/// generation of trusted certificates they were built for.
struct Local {
    connect_timeout_ms: u64,
    trusted: u64,
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
        let trusted = TRUSTED_GENERATION.load(Ordering::Acquire);
        let stale = slot
            .as_ref()
            .is_none_or(|l| l.connect_timeout_ms != connect_timeout_ms || l.trusted != trusted);
        if stale {
            *slot = Some(Local {
                connect_timeout_ms,
                trusted,
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

/// An upstream URL as requests to it are sent: taken apart once, when the
/// configuration is loaded, not on every request.
#[derive(Clone)]
pub struct Target {
    uri: Uri,
    key: Key,
    /// The path and query, as an HTTP/1.1 request line carries them.
    origin: PathAndQuery,
}

impl Target {
    /// `uri`, which must be absolute (a scheme and a host).
    pub fn new(uri: Uri) -> Result<Self, String> {
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
            return Err(format!("the upstream URL {uri} has no scheme or host"));
        };
        let key = Key::new(scheme.clone(), authority.clone());
        let origin = uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        Ok(Self { uri, key, origin })
    }

    pub fn uri(&self) -> &Uri {
        &self.uri
    }
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.uri, f)
    }
}

/// The fields every request to an upstream carries (`Host`, the credential …), built
/// once with the configuration: as pairs, for HTTP/2, and as an HTTP/1.1 head writes
/// them after its request line, so a request copies them in one piece. The framing
/// fields are the connection's and never among them. `Debug` shows the names only.
#[derive(Clone, PartialEq, Eq)]
pub struct FixedFields {
    pairs: Vec<(HeaderName, HeaderValue)>,
    written: Vec<u8>,
}

impl FixedFields {
    pub fn new(pairs: Vec<(HeaderName, HeaderValue)>) -> Self {
        let mut written = Vec::new();
        for (name, value) in &pairs {
            if name == CONTENT_LENGTH || name == TRANSFER_ENCODING || name == CONNECTION {
                continue;
            }
            push_field(&mut written, name.as_str(), value.as_bytes());
        }
        Self { pairs, written }
    }
}

impl std::fmt::Debug for FixedFields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.pairs.iter().map(|(name, _)| name))
            .finish()
    }
}

/// A request to send: the fields every request to its upstream carries (`fixed`, built
/// once with the configuration: `Host`, the credential), then this request's own: its
/// `Accept`, and the few others of its call (protocol headers, the slow lane's), under
/// names of the gateway's own, each at most once. A list, not a map: most requests have
/// none, and a map would be allocated and hashed for each.
#[derive(Debug)]
pub struct Outgoing<'a> {
    pub method: Method,
    pub target: &'a Target,
    pub fixed: &'a FixedFields,
    pub accept: &'static str,
    pub headers: Vec<(&'static str, HeaderValue)>,
    pub body: Bytes,
    /// The fields of a successful (2xx) answer its reader reads, when it reads only
    /// some; any other answer is converted whole. Not used over HTTP/2.
    pub success_reads: Option<Reads>,
}

impl Outgoing<'_> {
    /// As a request for hyper-util's client: its URI absolute, every field in its map.
    fn into_request(self) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(self.body));
        *request.method_mut() = self.method;
        *request.uri_mut() = self.target.uri.clone();
        let headers = request.headers_mut();
        for (name, value) in &self.fixed.pairs {
            headers.insert(name.clone(), value.clone());
        }
        headers.insert(ACCEPT, HeaderValue::from_static(self.accept));
        for (name, value) in self.headers {
            headers.insert(name, value);
        }
        request
    }
}

/// Sends `out` and waits for the answer's head: over HTTP/2 with prior knowledge with
/// hyper-util's client when `h2c`, otherwise over an HTTP/1.1 connection of this
/// thread's.
pub async fn send(
    connect_timeout_ms: u64,
    h2c: bool,
    out: Outgoing<'_>,
) -> Result<Response<UpstreamBody>, SendError> {
    if h2c {
        return match self::request(connect_timeout_ms, true, out.into_request())?.await {
            Ok(response) => Ok(response.map(UpstreamBody::Pooled)),
            Err(e) if e.is_connect() => Err(SendError::Connect(e.to_string())),
            Err(e) => Err(SendError::Reset(e.to_string())),
        };
    }
    let key = &out.target.key;
    let to_head = out.method == Method::HEAD;
    let mut fresh = false;
    loop {
        let (mut lease, reused) = match take_idle(key).await {
            Some(lease) if !fresh => (lease, true),
            _ => (connect(connect_timeout_ms, key).await?, false),
        };
        if let Err(e) = lease.write(&out).await {
            if reused {
                // Not written whole, so not taken: a kept connection the upstream closed.
                fresh = true;
                continue;
            }
            return Err(SendError::Reset(e.to_string()));
        }
        let (head, kept, framing, keep_alive) = lease
            .read_head(to_head, out.success_reads)
            .await
            .map_err(SendError::Reset)?;
        let body = Driven::new(key.clone(), lease, framing, keep_alive, kept);
        return Ok(Response::from_parts(head, UpstreamBody::Driven(body)));
    }
}

/// Appends the field `name: value` to a head being written.
fn push_field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// How long an idle HTTP/1.1 connection is kept (see [`POOL_IDLE_TIMEOUT`]).
const IDLE_FOR: Duration = POOL_IDLE_TIMEOUT;

/// Most idle connections kept per upstream and thread; one more is closed.
const MAX_IDLE_PER_UPSTREAM: usize = 64;

/// Most upstreams with idle connections per thread; a connection to one more is closed.
const MAX_UPSTREAMS: usize = 256;

/// An upstream's scheme and authority: what its connections are kept by. Hashed once,
/// when its [`Target`] is built (http hashes an authority byte by byte).
#[derive(Debug, Clone)]
struct Key {
    scheme: Scheme,
    authority: Authority,
    hash: u64,
}

impl Key {
    fn new(scheme: Scheme, authority: Authority) -> Self {
        let mut hasher = std::hash::DefaultHasher::new();
        (&scheme, &authority).hash(&mut hasher);
        Self {
            scheme,
            authority,
            hash: hasher.finish(),
        }
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.scheme == other.scheme && self.authority == other.authority
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// An upstream connection, plain or TLS, as tokio reads and writes it.
type Io = TokioIo<MaybeHttpsStream<TokioIo<TcpStream>>>;

/// Longest answer head read.
const MAX_ANSWER_HEAD: usize = 64 * 1024;

/// Room a new read buffer has; a read is made with at least [`MIN_ROOM`] spare. A
/// stream's connection keeps one such buffer while it streams (its events are slices of
/// it), so it is small.
const READ_ROOM: usize = 2 * 1024;
const MIN_ROOM: usize = 512;

/// Room for request heads a connection keeps once its request is written.
const KEEP_OUT: usize = 2 * 1024;

/// A request body this large is written from its own buffer, not copied after its head.
const WRITE_DIRECT: usize = 16 * 1024;

/// Largest chunk of a chunked answer.
const MAX_CHUNK: u64 = 1 << 40;

/// An HTTP/1.1 connection of ours: the socket, the bytes read from it and not yet used,
/// and the room a request's head is encoded in.
struct Lease {
    io: Io,
    buf: BytesMut,
    out: Vec<u8>,
    /// Where the fields of the answer head being read are (kept to reuse its room).
    spans: Vec<(Span, Span)>,
    /// The gateway's end of it: the egress address of SPEC R14.
    local: SocketAddr,
    idle_since: tokio::time::Instant,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// Writes the request: its head (the framing fields are the connection's: a
    /// `Content-Length` of its body), then its body, and flushes it.
    async fn write(&mut self, request: &Outgoing<'_>) -> std::io::Result<()> {
        let out = &mut self.out;
        out.clear();
        out.extend_from_slice(request.method.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(request.target.origin.as_str().as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        out.extend_from_slice(&request.fixed.written);
        push_field(out, ACCEPT.as_str(), request.accept.as_bytes());
        for (name, value) in &request.headers {
            push_field(out, name, value.as_bytes());
        }
        let body = &request.body;
        let bodiless = matches!(request.method, Method::GET | Method::HEAD | Method::DELETE);
        if !body.is_empty() || !bodiless {
            out.extend_from_slice(b"content-length: ");
            push_decimal(out, body.len() as u64);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        if body.len() < WRITE_DIRECT {
            out.extend_from_slice(body);
            self.io.write_all(&self.out).await?;
        } else {
            self.io.write_all(&self.out).await?;
            self.io.write_all(body).await?;
        }
        // A large request's room is not kept while its answer streams.
        self.out.clear();
        self.out.shrink_to(KEEP_OUT);
        // Over TLS the last records may still be in the session: send them.
        self.io.flush().await
    }

    /// Reads the answer's head (after any 1xx): its parts, how its body is delimited,
    /// and whether the connection may be used again after it. `to_head`: the request
    /// was a `HEAD`.
    async fn read_head(
        &mut self,
        to_head: bool,
        success_reads: Option<Reads>,
    ) -> Result<Head, String> {
        loop {
            if !self.buf.is_empty() {
                if let Some(answer) = self.take_head(to_head, success_reads)? {
                    return Ok(answer);
                }
            }
            self.room();
            match self.io.read_buf(&mut self.buf).await {
                Ok(0) => return Err("the upstream closed the connection before answering".into()),
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// The answer head at the start of the buffer, if it is all there; 1xx heads are
    /// skipped.
    fn take_head(
        &mut self,
        to_head: bool,
        success_reads: Option<Reads>,
    ) -> Result<Option<Head>, String> {
        loop {
            let mut storage = http1::header_storage();
            let base = self.buf.as_ptr() as usize;
            let (len, status, version, framing, keep_alive, interim) = {
                let head = http1::parse_response(&self.buf, &mut storage, MAX_ANSWER_HEAD, to_head)
                    .map_err(|e| format!("the upstream's answer head is refused: {e}"))?;
                let Some(head) = head else {
                    return Ok(None);
                };
                heads::record(&mut self.spans, head.headers, base);
                (
                    head.len,
                    head.status,
                    head.version,
                    head.framing,
                    head.keep_alive,
                    head.is_interim(),
                )
            };
            let read = self.buf.split_to(len).freeze();
            if interim {
                if status == 101 {
                    return Err("the upstream switched protocols unasked".into());
                }
                continue;
            }
            let mut head = Response::new(()).into_parts().0;
            head.status = StatusCode::from_u16(status)
                .map_err(|_| format!("the upstream answered with status {status}"))?;
            head.version = match version {
                http1::Version::Http11 => http::Version::HTTP_11,
                http1::Version::Http10 => http::Version::HTTP_10,
            };
            let read_as = match success_reads {
                Some(reads) if head.status.is_success() => {
                    heads::header_map_of(&read, &self.spans, reads)
                }
                _ => heads::header_map(&read, &self.spans).map(|map| (map, None)),
            };
            let (headers, kept) =
                read_as.ok_or("the upstream's answer head has a field http does not take")?;
            head.headers = headers;
            return Ok(Some((head, kept, framing, keep_alive)));
        }
    }

    /// Makes sure the read buffer has room for a read.
    fn room(&mut self) {
        if self.buf.capacity() - self.buf.len() < MIN_ROOM {
            self.buf.reserve(READ_ROOM);
        }
    }

    /// Whether an idle connection is still open: a read would wait. One the upstream
    /// closed reads its end; one that sent something unasked cannot be trusted.
    fn is_open(&mut self, cx: &mut Context<'_>) -> bool {
        let mut probe = [0u8; 1];
        let mut probe = ReadBuf::new(&mut probe);
        Pin::new(&mut self.io)
            .poll_read(cx, &mut probe)
            .is_pending()
    }
}

thread_local! {
    /// This thread's idle HTTP/1.1 connections, newest last.
    #[expect(
        clippy::vec_box,
        reason = "a connection moves between the pool and its answer's body as a pointer, not 1 kB"
    )]
    static IDLE: RefCell<FastMap<Key, Vec<Box<Lease>>>> = RefCell::new(FastMap::default());
}

/// The newest idle connection to `key` still open and ready for a request, if any;
/// connections idle longer than [`IDLE_FOR`] are closed on the way.
async fn take_idle(key: &Key) -> Option<Box<Lease>> {
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
        if poll_fn(|cx| Poll::Ready(lease.is_open(cx))).await {
            return Some(lease);
        }
    }
}

/// Puts a connection whose answer ended back among this thread's idle ones.
fn put_back(key: Key, mut lease: Box<Lease>) {
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
async fn connect(connect_timeout_ms: u64, key: &Key) -> Result<Box<Lease>, SendError> {
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
    let local = extras
        .remove::<HttpInfo>()
        .ok_or_else(|| SendError::Connect("the connection has no addresses".to_owned()))?
        .local_addr();
    Ok(Box::new(Lease {
        io: TokioIo::new(io),
        buf: BytesMut::new(),
        out: Vec::new(),
        spans: Vec::new(),
        local,
        idle_since: tokio::time::Instant::now(),
    }))
}

/// An answer's head as read: its parts, the fields its reader kept unconverted, how its
/// body is delimited, and whether the connection may be used again after it.
type Head = (
    http::response::Parts,
    Option<Box<Kept>>,
    AnswerFraming,
    bool,
);

/// An upstream answer's body.
#[derive(Debug)]
pub enum UpstreamBody {
    /// From hyper-util's client (HTTP/2).
    Pooled(Incoming),
    /// From an HTTP/1.1 connection this body drives.
    Driven(Driven),
}

/// The address of the gateway's end of the connection `response` came on: the egress
/// address of SPEC R14. An HTTP/1.1 body carries it (a map of extensions per answer
/// would cost an allocation or three); hyper-util's client puts it in the extensions.
pub fn local_addr(response: &Response<UpstreamBody>) -> Option<SocketAddr> {
    match response.body() {
        UpstreamBody::Driven(body) => Some(body.local),
        UpstreamBody::Pooled(_) => response
            .extensions()
            .get::<HttpInfo>()
            .map(HttpInfo::local_addr),
    }
}

/// The fields of `response`'s head its reader kept unconverted, with its number for each
/// ([`heads::Read::Keep`]): none over HTTP/2, whose client reads every field into the
/// header map.
pub fn kept_fields(response: &Response<UpstreamBody>) -> impl Iterator<Item = (u8, &[u8])> {
    let kept = match response.body() {
        UpstreamBody::Driven(body) => body.kept.as_deref(),
        UpstreamBody::Pooled(_) => None,
    };
    kept.into_iter().flat_map(Kept::fields)
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            Self::Pooled(body) => Pin::new(body).poll_frame(cx).map_err(BoxError::from),
            Self::Driven(body) => body.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Pooled(body) => body.is_end_stream(),
            Self::Driven(body) => matches!(body.decoder, Decoder::Done),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Pooled(body) => body.size_hint(),
            Self::Driven(body) => match body.decoder {
                Decoder::Length(left) => SizeHint::with_exact(left),
                Decoder::Done => SizeHint::with_exact(0),
                Decoder::Chunked(_) | Decoder::UntilClose => SizeHint::new(),
            },
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why an answer's body could not be read to its end.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("the upstream closed the connection before the answer's end")]
    Incomplete,
    #[error("the answer's chunked framing is broken: {0}")]
    Chunked(http1::ChunkError),
    #[error("reading the answer failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Where an answer's body is.
#[derive(Debug)]
enum Decoder {
    /// Bytes left.
    Length(u64),
    Chunked(Chunked),
    UntilClose,
    Done,
}

/// The body of an answer on an HTTP/1.1 connection: read off the connection as it is
/// polled, which goes back among the idle ones at the body's end. Dropped before the
/// end, it closes the connection (the rest of the answer would have to be read first).
#[derive(Debug)]
pub struct Driven {
    lease: Option<(Key, Box<Lease>)>,
    decoder: Decoder,
    keep_alive: bool,
    /// The connection's own address (kept past the connection's return to the pool).
    local: SocketAddr,
    /// The fields of the answer's head its reader kept unconverted.
    kept: Option<Box<Kept>>,
}

impl Driven {
    fn new(
        key: Key,
        lease: Box<Lease>,
        framing: AnswerFraming,
        keep_alive: bool,
        kept: Option<Box<Kept>>,
    ) -> Self {
        let decoder = match framing {
            AnswerFraming::None | AnswerFraming::Length(0) => Decoder::Done,
            AnswerFraming::Length(n) => Decoder::Length(n),
            AnswerFraming::Chunked => Decoder::Chunked(Chunked::new(MAX_CHUNK)),
            AnswerFraming::UntilClose => Decoder::UntilClose,
        };
        let local = lease.local;
        let mut body = Self {
            lease: Some((key, lease)),
            decoder,
            keep_alive,
            local,
            kept,
        };
        if matches!(body.decoder, Decoder::Done) {
            body.finish();
        }
        body
    }

    /// The answer ended: its connection goes back when it may carry another request
    /// and nothing past the answer was read from it.
    fn finish(&mut self) {
        self.decoder = Decoder::Done;
        if let Some((key, lease)) = self.lease.take() {
            if self.keep_alive && lease.buf.is_empty() {
                put_back(key, lease);
            }
        }
    }

    fn fail(&mut self, error: BodyError) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.lease = None;
        self.decoder = Decoder::Done;
        Poll::Ready(Some(Err(Box::new(error))))
    }

    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            let Some((_, lease)) = self.lease.as_mut() else {
                return Poll::Ready(None);
            };
            let buf = &mut lease.buf;
            let data = match &mut self.decoder {
                Decoder::Done => {
                    self.finish();
                    return Poll::Ready(None);
                }
                _ if buf.is_empty() => None,
                Decoder::Length(left) => {
                    let take = usize::try_from(*left).map_or(buf.len(), |l| l.min(buf.len()));
                    *left -= take as u64;
                    let done = *left == 0;
                    let data = buf.split_to(take).freeze();
                    if done {
                        self.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Decoder::Chunked(chunked) => match chunked.step(buf) {
                    Ok(step) => {
                        let used = buf.split_to(step.used).freeze();
                        let done = chunked.is_done();
                        let data = step.data.map(|range| used.slice(range));
                        if done {
                            self.finish();
                        }
                        data
                    }
                    Err(e) => return self.fail(BodyError::Chunked(e)),
                },
                Decoder::UntilClose => Some(buf.split().freeze()),
            };
            if let Some(data) = data {
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
            let Some((_, lease)) = self.lease.as_mut() else {
                continue;
            };
            if !lease.buf.is_empty() {
                continue;
            }
            lease.room();
            match ready!(std::pin::pin!(lease.io.read_buf(&mut lease.buf)).poll(cx)) {
                Ok(0) if matches!(self.decoder, Decoder::UntilClose) => {
                    self.keep_alive = false;
                    self.finish();
                    return Poll::Ready(None);
                }
                Ok(0) => return self.fail(BodyError::Incomplete),
                Ok(_) => {}
                Err(e) => return self.fail(BodyError::Io(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");

    #[test]
    fn fixed_fields_are_written_once_without_framing_and_shown_without_values() {
        let mut secret = HeaderValue::from_static("Bearer sk-secret");
        secret.set_sensitive(true);
        let fixed = FixedFields::new(vec![
            (http::header::HOST, HeaderValue::from_static("up:1")),
            (CONTENT_LENGTH, HeaderValue::from_static("9")),
            (http::header::AUTHORIZATION, secret),
            (CONNECTION, HeaderValue::from_static("close")),
        ]);
        assert_eq!(
            fixed.written,
            b"host: up:1\r\nauthorization: Bearer sk-secret\r\n".to_vec()
        );
        let shown = format!("{fixed:?}");
        assert_eq!(
            shown,
            r#"["host", "content-length", "authorization", "connection"]"#
        );
    }

    #[test]
    fn a_ca_file_is_read_whole_and_a_file_without_certificates_is_refused() {
        let ca = load_ca_file(Path::new(&format!("{FIXTURES}/ca.pem"))).unwrap();
        assert_eq!(ca.len(), 1);
        let key = format!("{FIXTURES}/localhost.key");
        assert_eq!(
            load_ca_file(Path::new(&key)).unwrap_err().to_string(),
            format!("upstream CA file {key}: it holds no PEM certificate")
        );
        let missing = format!("{FIXTURES}/missing.pem");
        let error = load_ca_file(Path::new(&missing)).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("upstream CA file {missing}: ")),
            "{error}"
        );
    }

    #[test]
    fn trusting_the_same_certificates_twice_moves_the_generation_once() {
        let ca = load_ca_file(Path::new(&format!("{FIXTURES}/ca.pem"))).unwrap();
        trust(ca.clone());
        let generation = TRUSTED_GENERATION.load(Ordering::Acquire);
        trust(ca);
        assert_eq!(TRUSTED_GENERATION.load(Ordering::Acquire), generation);
        assert!(connector(1_000, true).is_ok());
    }
}
