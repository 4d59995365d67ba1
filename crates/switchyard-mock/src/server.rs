//! The mock's HTTP server: accept loop (with scripted connection resets), handlers and
//! counters.

use crate::answer::{Answer, StreamParts};
use crate::journal::{self, Received};
use crate::rules::{self, QuotaState, ResetPoint, Rule, StallPoint, StoredRule, StreamErrorSpec};
use crate::wall::{self, Lane, Wall, Walls};
use crate::{anthropic, openai, responses};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use bytes::Bytes;
use futures_util::stream::{self, Stream, StreamExt};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tower::ServiceExt;

/// Content chunks per answer when no rule says otherwise.
const DEFAULT_CHUNKS: u32 = 5;

/// How many recent requests `/_mock/stats` keeps, so the stats stay bounded under load.
const RECENT_REQUESTS: usize = 64;

/// Largest request body the mock accepts (matches common provider limits).
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// A request as the stats report it.
#[derive(Debug, Clone, serde::Serialize)]
struct Seen {
    path: String,
    /// HTTP version of the request, e.g. `HTTP/1.1` or `HTTP/2.0`.
    version: String,
    model: String,
    credential: String,
    stream: bool,
    headers: BTreeMap<String, String>,
}

#[derive(Debug, Default)]
struct Stats {
    by_credential: BTreeMap<String, u64>,
    by_model: BTreeMap<String, u64>,
    recent: VecDeque<Seen>,
}

/// Shared mock state.
#[derive(Debug, Default)]
pub struct MockState {
    rules: Mutex<Vec<StoredRule>>,
    next_rule_id: AtomicU64,
    stats: Mutex<Stats>,
    received: Mutex<VecDeque<Received>>,
    walls: Mutex<Walls>,
    oauth: Mutex<crate::oauth::Authority>,
    /// A fixed wall-clock time (Unix seconds) instead of the system's.
    clock: Mutex<Option<u64>>,
    total: AtomicU64,
    in_flight: AtomicU64,
    peak: AtomicU64,
    /// Client connections open.
    connections: AtomicU64,
    /// Bumped by `/_mock/close_connections`: every connection closes once idle.
    closing: watch::Sender<u64>,
    /// Told each time a connection closes.
    connection_closed: Notify,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Counts a request as in flight until dropped.
struct InFlight(Arc<MockState>);

impl InFlight {
    fn new(state: &Arc<MockState>) -> Self {
        let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        state.peak.fetch_max(now, Ordering::SeqCst);
        Self(Arc::clone(state))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Resets the underlying TCP connection when notified.
#[derive(Clone)]
struct ConnKill(Arc<Notify>);

/// The Responses route of a Codex subscription backend (`{base}/backend-api/codex`).
pub const CODEX_BACKEND_RESPONSES: &str = "/backend-api/codex/responses";

/// The mock's routes.
pub fn router(state: Arc<MockState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", completion(Api::OpenAi))
        .route("/v1/messages", completion(Api::Anthropic))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route("/v1/responses", completion(Api::Responses))
        .route("/responses", completion(Api::Responses))
        .route(CODEX_BACKEND_RESPONSES, completion(Api::Responses))
        .route("/v1/models", get(|| async { Json(openai::models()) }))
        .route("/api/oauth/usage", get(oauth_usage))
        .route(
            "/api/organizations/{org}/reset_rate_limits",
            post(reset_rate_limits),
        )
        .route(
            "/_mock/rules",
            post(add_rule).get(list_rules).delete(clear_rules),
        )
        .route("/_mock/stats", get(stats))
        .route("/_mock/requests", get(requests))
        .route(
            "/_mock/wall",
            post(set_wall).get(list_walls).delete(clear_walls),
        )
        .route("/oauth/token", post(oauth_token))
        .route("/v1/oauth/token", post(oauth_token))
        .route(
            "/_mock/oauth",
            post(set_oauth).get(list_oauth).delete(clear_oauth),
        )
        .route("/_mock/clock", post(set_clock))
        .route("/_mock/reset", post(reset))
        .route("/_mock/close_connections", post(close_connections))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// A running mock provider.
#[derive(Debug)]
pub struct MockServer {
    pub addr: SocketAddr,
    pub state: Arc<MockState>,
    shutdown: watch::Sender<bool>,
}

impl MockServer {
    /// Serves the mock on `listener` in a background task.
    pub fn start(listener: TcpListener) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let state = Arc::new(MockState::default());
        let (tx, rx) = watch::channel(false);
        tokio::spawn(accept_loop(
            listener,
            router(Arc::clone(&state)),
            Arc::clone(&state),
            rx,
        ));
        Ok(Self {
            addr,
            state,
            shutdown: tx,
        })
    }

    /// Binds 127.0.0.1 on a free port and serves the mock.
    pub async fn start_local() -> std::io::Result<Self> {
        Self::start(TcpListener::bind("127.0.0.1:0").await?)
    }

    /// `http://addr` — the base URL to give a connection.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting connections.
    pub fn stop(&self) {
        self.shutdown.send_replace(true);
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs the mock until `shutdown` resolves. Used by `switchyard mock`.
pub async fn serve_until(
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let server = MockServer::start(listener)?;
    shutdown.await;
    server.stop();
    Ok(())
}

/// Counts a connection as open until dropped.
struct OpenConnection(Arc<MockState>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
        self.0.connection_closed.notify_one();
    }
}

async fn accept_loop(
    listener: TcpListener,
    app: Router,
    state: Arc<MockState>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "Mock provider failed to accept a connection.");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let (stream, twin) = match with_twin(stream) {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(error = %e, "Mock provider could not duplicate a connection's socket.");
                continue;
            }
        };
        let app = app.clone();
        state.connections.fetch_add(1, Ordering::SeqCst);
        let open = OpenConnection(Arc::clone(&state));
        let mut closing = state.closing.subscribe();
        tokio::spawn(async move {
            let _open = open;
            let kill = ConnKill(Arc::new(Notify::new()));
            let notified = Arc::clone(&kill.0);
            let service =
                hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(kill.clone());
                    app.clone().oneshot(req.map(Body::new))
                });
            let builder = auto::Builder::new(TokioExecutor::new());
            let io = TokioIo::new(stream);
            let conn = builder.serve_connection(io, service);
            tokio::pin!(conn);
            loop {
                tokio::select! {
                    _ = conn.as_mut() => break,
                    () = notified.notified() => {
                        reset_connection(twin);
                        break;
                    }
                    Ok(()) = closing.changed() => conn.as_mut().graceful_shutdown(),
                }
            }
        });
    }
}

/// `stream` and a second handle on its socket, kept by the connection's task to reset
/// it: the socket closes when both are dropped.
fn with_twin(stream: TcpStream) -> std::io::Result<(TcpStream, std::net::TcpStream)> {
    let stream = stream.into_std()?;
    let twin = stream.try_clone()?;
    Ok((TcpStream::from_std(stream)?, twin))
}

/// Resets a connection whose serving half was dropped: with a zero linger, closing the
/// last handle on the socket sends a TCP reset instead of a FIN.
fn reset_connection(twin: std::net::TcpStream) {
    match TcpStream::from_std(twin) {
        Ok(twin) => {
            if let Err(e) = twin.set_zero_linger() {
                tracing::warn!(error = %e, "Mock provider could not arm a connection reset.");
            }
        }
        Err(e) => tracing::warn!(error = %e, "Mock provider could not arm a connection reset."),
    }
}

/// Everything a handler needs from a request.
struct Incoming {
    path: &'static str,
    credential: String,
    model: String,
    stream: bool,
    include_usage: bool,
    prompt: u64,
    body: Value,
}

/// The request line and headers of a provider request.
struct Head {
    method: Method,
    uri: Uri,
    version: axum::http::Version,
    headers: HeaderMap,
}

impl MockState {
    /// The mock's wall clock in Unix seconds: the time set with `POST /_mock/clock`, or
    /// the system's.
    fn unix_now(&self) -> u64 {
        lock(&self.clock).unwrap_or_else(system_unix_now)
    }
}

#[expect(
    clippy::disallowed_methods,
    reason = "the mock's one read of the system time; tests fix it with POST /_mock/clock"
)]
fn system_unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn credential(headers: &HeaderMap) -> String {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .unwrap_or("")
        .to_owned()
}

fn record(
    state: &Arc<MockState>,
    inc: &Incoming,
    version: axum::http::Version,
    headers: &HeaderMap,
) {
    state.total.fetch_add(1, Ordering::SeqCst);
    let mut stats = lock(&state.stats);
    *stats
        .by_credential
        .entry(inc.credential.clone())
        .or_default() += 1;
    *stats.by_model.entry(inc.model.clone()).or_default() += 1;
    if stats.recent.len() == RECENT_REQUESTS {
        stats.recent.pop_front();
    }
    let headers = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    stats.recent.push_back(Seen {
        path: inc.path.to_owned(),
        version: format!("{version:?}"),
        model: inc.model.clone(),
        credential: inc.credential.clone(),
        stream: inc.stream,
        headers,
    });
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    OpenAi,
    Anthropic,
    Responses,
}

/// The completion route of `api`: its request taken apart for [`handle`].
fn completion(api: Api) -> axum::routing::MethodRouter<Arc<MockState>> {
    post(
        move |State(state): State<Arc<MockState>>,
              Extension(kill): Extension<ConnKill>,
              method: Method,
              uri: Uri,
              version: axum::http::Version,
              headers: HeaderMap,
              body: Bytes| async move {
            let head = Head {
                method,
                uri,
                version,
                headers,
            };
            handle(state, kill, head, body, api).await
        },
    )
}

/// Parses a JSON body (if any) and journals the request; returns the body and the
/// credential.
fn receive(
    state: &MockState,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> (Option<Value>, String) {
    let parsed = serde_json::from_slice::<Value>(body).ok();
    let credential = credential(headers);
    let received = Received::new(method, uri, headers, &credential, parsed.as_ref());
    let mut journal = lock(&state.received);
    if journal.len() == journal::KEPT {
        journal.pop_front();
    }
    journal.push_back(received);
    (parsed, credential)
}

async fn count_tokens(
    State(state): State<Arc<MockState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (parsed, credential) = receive(&state, &method, &uri, &headers, &body);
    let Some(parsed) = parsed else {
        return error_response(
            Api::Anthropic,
            StatusCode::BAD_REQUEST,
            "request body is not valid JSON",
        );
    };
    if credential.is_empty() {
        return error_response(Api::Anthropic, StatusCode::UNAUTHORIZED, "missing API key");
    }
    Json(json!({"input_tokens": openai::prompt_tokens(&parsed)})).into_response()
}

async fn oauth_usage(
    State(state): State<Arc<MockState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let (_, credential) = receive(&state, &method, &uri, &headers, &[]);
    if credential.is_empty() {
        return error_response(Api::Anthropic, StatusCode::UNAUTHORIZED, "missing API key");
    }
    Json(lock(&state.walls).usage(&credential)).into_response()
}

async fn reset_rate_limits(
    State(state): State<Arc<MockState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (parsed, credential) = receive(&state, &method, &uri, &headers, &body);
    if credential.is_empty() {
        return error_response(Api::Anthropic, StatusCode::UNAUTHORIZED, "missing API key");
    }
    let program = parsed.as_ref().and_then(|b| b.get("program"));
    if program.and_then(Value::as_str) != Some(wall::PROGRAM) {
        return error_response(
            Api::Anthropic,
            StatusCode::BAD_REQUEST,
            "the body must be {\"program\": \"juniper_tide\"}",
        );
    }
    Json(lock(&state.walls).claim(&credential)).into_response()
}

fn insert_headers<'a>(h: &mut HeaderMap, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) {
    for (k, v) in pairs {
        if let (Ok(k), Ok(v)) = (HeaderName::try_from(k), HeaderValue::try_from(v)) {
            h.insert(k, v);
        }
    }
}

fn error_response(api: Api, status: StatusCode, message: &str) -> Response {
    let body = match api {
        Api::OpenAi | Api::Responses => openai::error_body(status.as_u16(), message),
        Api::Anthropic => anthropic::error_body(status.as_u16(), message),
    };
    (status, Json(body)).into_response()
}

async fn handle(
    state: Arc<MockState>,
    kill: ConnKill,
    head: Head,
    body: Bytes,
    api: Api,
) -> Response {
    let guard = InFlight::new(&state);
    let (parsed, credential) = receive(&state, &head.method, &head.uri, &head.headers, &body);
    let Some(parsed) = parsed else {
        return error_response(
            api,
            StatusCode::BAD_REQUEST,
            "request body is not valid JSON",
        );
    };
    let inc = Incoming {
        path: match api {
            Api::OpenAi => "/v1/chat/completions",
            Api::Anthropic => "/v1/messages",
            Api::Responses if head.uri.path() == "/responses" => "/responses",
            Api::Responses if head.uri.path() == CODEX_BACKEND_RESPONSES => CODEX_BACKEND_RESPONSES,
            Api::Responses => "/v1/responses",
        },
        credential,
        model: parsed
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        stream: parsed
            .get("stream")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        include_usage: parsed
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        prompt: match api {
            Api::Responses => responses::prompt_tokens(&parsed),
            Api::OpenAi | Api::Anthropic => openai::prompt_tokens(&parsed),
        },
        body: parsed,
    };
    record(&state, &inc, head.version, &head.headers);
    if inc.credential.is_empty() {
        return error_response(api, StatusCode::UNAUTHORIZED, "missing API key");
    }
    if lock(&state.oauth).stale(&inc.credential, state.unix_now()) {
        let message = match api {
            Api::Anthropic => {
                "OAuth token has expired. Please obtain a new token or refresh your existing token."
            }
            Api::OpenAi | Api::Responses => {
                "Provided authentication token is expired. Please try signing in again."
            }
        };
        return error_response(api, StatusCode::UNAUTHORIZED, message);
    }
    // A Codex subscription backend refuses an output bound, as the real one does.
    if inc.path == CODEX_BACKEND_RESPONSES {
        let refusal = if inc.body.get("max_output_tokens").is_some() {
            Some("Unsupported parameter: max_output_tokens")
        } else if !inc.stream {
            Some("Stream must be set to true")
        } else {
            None
        };
        if let Some(detail) = refusal {
            return (StatusCode::BAD_REQUEST, Json(json!({"detail": detail}))).into_response();
        }
    }
    let lane = match api {
        Api::OpenAi | Api::Responses => Lane::default(),
        Api::Anthropic => {
            let slow = head
                .headers
                .get(wall::USAGE_LIMIT_HEADER)
                .is_some_and(|v| v.as_bytes() == wall::SLOW.as_bytes());
            let now = state.unix_now();
            lock(&state.walls).lane(&inc.credential, slow, now)
        }
    };
    let lane_headers = lane.headers.iter().map(|(k, v)| (*k, v.as_str()));
    if let Some((status, message)) = &lane.refusal {
        let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
        let mut r = error_response(api, status, message);
        insert_headers(r.headers_mut(), lane_headers);
        return r;
    }
    let selected = {
        let mut rules = lock(&state.rules);
        if rules.is_empty() {
            None
        } else {
            rules::select(
                &mut rules,
                &inc.credential,
                &inc.model,
                inc.path,
                Instant::now(),
            )
        }
    };
    let (rule, quota) = selected.unwrap_or_default();
    if let Some(ms) = rule.latency_ms {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if rule.reset == Some(ResetPoint::BeforeHeaders) {
        kill.0.notify_one();
        std::future::pending::<()>().await;
    }
    let mut response = if let Some(q) = quota.filter(|q| q.exceeded) {
        quota_exceeded(api, q)
    } else if let Some(status) = rule.status {
        scripted_status(api, status, rule.body.as_ref())
    } else {
        success(api, &inc, &rule, guard, kill)
    };
    insert_headers(response.headers_mut(), lane_headers);
    if let Some(q) = quota {
        add_quota_headers(response.headers_mut(), q);
    }
    insert_headers(
        response.headers_mut(),
        rule.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    );
    response
}

fn scripted_status(api: Api, status: u16, body: Option<&Value>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    match body {
        Some(Value::String(s)) => (status, s.clone()).into_response(),
        Some(v) => (status, Json(v.clone())).into_response(),
        None => error_response(
            api,
            status,
            &format!("mock injected status {}", status.as_u16()),
        ),
    }
}

fn quota_exceeded(api: Api, q: QuotaState) -> Response {
    let mut r = error_response(
        api,
        StatusCode::TOO_MANY_REQUESTS,
        "mock request quota exhausted for this window",
    );
    let secs = q.reset_ms.div_ceil(1000).max(1);
    if let Ok(v) = HeaderValue::try_from(secs.to_string()) {
        r.headers_mut().insert("retry-after", v);
    }
    r
}

fn add_quota_headers(h: &mut HeaderMap, q: QuotaState) {
    let pairs = [
        ("x-ratelimit-limit-requests", q.limit.to_string()),
        ("x-ratelimit-remaining-requests", q.remaining.to_string()),
        ("x-ratelimit-reset-requests", format!("{}ms", q.reset_ms)),
    ];
    insert_headers(h, pairs.iter().map(|(k, v)| (*k, v.as_str())));
}

fn success(api: Api, inc: &Incoming, rule: &Rule, guard: InFlight, kill: ConnKill) -> Response {
    let chunks = rule.chunks.unwrap_or(DEFAULT_CHUNKS);
    // A rule's `chunks` fixes the answer's length: the request's max_tokens does not cut it.
    let honour_max_tokens = rule.chunks.is_none();
    let answer = match api {
        Api::OpenAi => Answer::chat(&inc.body, chunks, honour_max_tokens),
        Api::Anthropic => Answer::messages(&inc.body, chunks, honour_max_tokens),
        Api::Responses => Answer::responses(&inc.body, chunks, honour_max_tokens),
    };
    let usage = anthropic::Usage {
        input_tokens: inc.prompt,
        cache_creation_input_tokens: rule.cache_creation_input_tokens.unwrap_or(0),
        cache_read_input_tokens: rule.cache_read_input_tokens.unwrap_or(0),
    };
    if !inc.stream {
        let body = match api {
            Api::OpenAi => openai::completion_of(&inc.model, &answer, inc.prompt),
            Api::Anthropic => anthropic::message_of(&inc.model, &answer, usage),
            Api::Responses => responses::response_of(&inc.model, &answer, inc.prompt),
        };
        if !disturbs_delivery(rule) {
            drop(guard);
            return Json(body).into_response();
        }
        let bytes = Bytes::from(body.to_string());
        let length = HeaderValue::from(bytes.len());
        // The request stays in flight until the body is sent, or the connection gone.
        let mut guard = Some(guard);
        let body = stream::once(async move { Ok(bytes) }).chain(stream::poll_fn(move |_| {
            guard.take();
            std::task::Poll::Ready(None)
        }));
        let mut r = Response::new(deliver(body, rule, kill));
        let h = r.headers_mut();
        h.insert("content-type", HeaderValue::from_static("application/json"));
        h.insert("content-length", length);
        return r;
    }
    let StreamParts { head, frames, tail } = match api {
        Api::OpenAi => openai::stream_of(&inc.model, &answer, inc.prompt, inc.include_usage),
        Api::Anthropic => anthropic::stream_of(&inc.model, &answer, usage),
        Api::Responses => responses::stream_of(&inc.model, &answer, inc.prompt),
    };
    let interval = rule.chunk_interval_ms.map(Duration::from_millis);
    let reset_after = rule.reset_after_chunks;
    // Frames sent: up to a stall, or the scripted end, whichever comes first.
    let count = frames.len();
    let stall_at = rule
        .stall_after_chunks
        .map(|n| n as usize)
        .filter(|n| *n < count);
    let end_at = rule.end_after_chunks.map(|n| n as usize);
    let stalls = stall_at.is_some_and(|s| end_at.is_none_or(|e| s < e));
    let shown = [stall_at, end_at]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(count);
    let content = stream::iter(frames.into_iter().zip(0u32..).take(shown)).then(
        move |(frame, i)| async move {
            if let Some(d) = interval {
                tokio::time::sleep(d).await;
            }
            if reset_after == Some(i) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "mock scripted reset",
                ));
            }
            Ok(Bytes::from(frame))
        },
    );
    let (tail, keep_tail) = match &rule.stream_error {
        Some(error) => (error_event(api, error), true),
        None => (tail, end_at.is_none()),
    };
    let head = stream::once(async move { Ok(Bytes::from(head)) }).chain(content);
    let body = if stalls {
        // Nothing more but heartbeats, if any, while the connection lives.
        let heartbeat = rule.heartbeat_ms.map(Duration::from_millis);
        let silence = stream::unfold(guard, move |guard| async move {
            let Some(gap) = heartbeat else {
                return std::future::pending().await;
            };
            tokio::time::sleep(gap).await;
            Some((Ok(Bytes::from_static(heartbeat_event(api))), guard))
        });
        head.chain(silence).boxed()
    } else {
        let tail = stream::once(async move {
            drop(guard);
            Ok(Bytes::from(tail))
        })
        .filter(move |_| std::future::ready(keep_tail));
        head.chain(tail).boxed()
    };
    let mut r = Response::new(deliver(body, rule, kill));
    // A Codex subscription backend streams without a Content-Type, as the real one does.
    if inc.path != CODEX_BACKEND_RESPONSES {
        r.headers_mut().insert(
            "content-type",
            HeaderValue::from_static("text/event-stream"),
        );
    }
    r.headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-cache"));
    r
}

/// Whether `rule` changes how a completion's body is sent (see [`deliver`]).
fn disturbs_delivery(rule: &Rule) -> bool {
    rule.reset == Some(ResetPoint::AfterHeaders)
        || rule.stall == Some(StallPoint::AfterHeaders)
        || rule.trickle_bytes.is_some()
}

/// A completion's body as `rule` sends it: not at all after the headers (a stall holds
/// the connection open; a reset ends it — the body's first poll comes after the head is
/// written, and hyper flushes the head before the connection's task sees the kill),
/// `trickle_bytes` at a time, or as it comes. A withheld `body` is kept, not dropped, so
/// what it holds lives as long as the connection.
fn deliver<S>(body: S, rule: &Rule, kill: ConnKill) -> Body
where
    S: Stream<Item = std::io::Result<Bytes>> + Send + 'static,
{
    let reset = rule.reset == Some(ResetPoint::AfterHeaders);
    if reset || rule.stall == Some(StallPoint::AfterHeaders) {
        let silence = stream::once(async move {
            if reset {
                kill.0.notify_one();
            }
            std::future::pending::<std::io::Result<Bytes>>().await
        });
        return Body::from_stream(silence.chain(body));
    }
    let Some(size) = rule.trickle_bytes else {
        return Body::from_stream(body);
    };
    let size = usize::try_from(size.get()).unwrap_or(usize::MAX);
    let gap = Duration::from_millis(rule.trickle_interval_ms.unwrap_or(0));
    let pieces = body
        .flat_map(move |item| {
            let pieces: Vec<std::io::Result<Bytes>> = match item {
                Ok(bytes) => (0..bytes.len())
                    .step_by(size)
                    .map(|at| Ok(bytes.slice(at..bytes.len().min(at + size))))
                    .collect(),
                Err(e) => vec![Err(e)],
            };
            stream::iter(pieces)
        })
        .then(move |piece| async move {
            tokio::time::sleep(gap).await;
            piece
        });
    Body::from_stream(pieces)
}

/// A heartbeat in `api`'s stream: Anthropic's `ping` event, an SSE comment elsewhere.
fn heartbeat_event(api: Api) -> &'static [u8] {
    match api {
        Api::Anthropic => b"event: ping\ndata: {\"type\": \"ping\"}\n\n",
        Api::OpenAi | Api::Responses => b": keep-alive\n\n",
    }
}

/// The error event that ends a stream in `api`'s format, as each API sends it.
fn error_event(api: Api, error: &StreamErrorSpec) -> String {
    let message = &error.message;
    match api {
        Api::OpenAi => {
            let kind = error.kind.as_deref().unwrap_or("server_error");
            let data = json!({"error": {"message": message, "type": kind, "code": null}});
            format!("data: {data}\n\n")
        }
        Api::Anthropic => {
            let kind = error.kind.as_deref().unwrap_or("api_error");
            let data = json!({"type": "error", "error": {"type": kind, "message": message}});
            format!("event: error\ndata: {data}\n\n")
        }
        Api::Responses => {
            let code = error.kind.as_deref().unwrap_or("server_error");
            let data = json!({"type": "response.failed", "response": {
                "id": "resp_mock_failed", "object": "response", "status": "failed",
                "error": {"code": code, "message": message}, "output": []}});
            format!("event: response.failed\ndata: {data}\n\n")
        }
    }
}

impl MockState {
    /// Sets a credential's usage wall, replacing the one it had (the programmatic twin of
    /// `POST /_mock/wall`).
    pub fn set_wall(&self, wall: Wall) {
        lock(&self.walls).set(wall);
    }

    /// Fixes the mock's wall clock at `now` (Unix seconds), or gives it back to the
    /// system with `None` (the programmatic twin of `POST /_mock/clock`).
    pub fn set_now(&self, now: Option<u64>) {
        *lock(&self.clock) = now;
    }

    /// Adds a rule (the programmatic twin of `POST /_mock/rules`); returns its id.
    pub fn add_rule(&self, rule: Rule) -> u64 {
        let id = self.next_rule_id.fetch_add(1, Ordering::SeqCst) + 1;
        lock(&self.rules).push(StoredRule {
            id,
            rule,
            window_start: None,
            window_count: 0,
        });
        id
    }
}

async fn add_rule(State(state): State<Arc<MockState>>, Json(rule): Json<Rule>) -> Json<Value> {
    Json(json!({ "id": state.add_rule(rule) }))
}

async fn list_rules(State(state): State<Arc<MockState>>) -> Json<Value> {
    let rules = lock(&state.rules);
    let list: Vec<Value> = rules
        .iter()
        .map(|r| json!({"id": r.id, "rule": r.rule, "window_count": r.window_count}))
        .collect();
    Json(json!({ "rules": list }))
}

async fn clear_rules(State(state): State<Arc<MockState>>) -> StatusCode {
    lock(&state.rules).clear();
    StatusCode::NO_CONTENT
}

async fn stats(State(state): State<Arc<MockState>>) -> Json<Value> {
    let stats = lock(&state.stats);
    Json(json!({
        "requests_total": state.total.load(Ordering::SeqCst),
        "in_flight": state.in_flight.load(Ordering::SeqCst),
        "peak_in_flight": state.peak.load(Ordering::SeqCst),
        "by_credential": stats.by_credential,
        "by_model": stats.by_model,
        "recent": stats.recent,
    }))
}

async fn requests(State(state): State<Arc<MockState>>) -> Json<Value> {
    Json(json!({ "requests": *lock(&state.received) }))
}

async fn set_wall(State(state): State<Arc<MockState>>, Json(wall): Json<Wall>) -> StatusCode {
    state.set_wall(wall);
    StatusCode::NO_CONTENT
}

async fn oauth_token(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    let wait = lock(&state.oauth).latency_ms(&body);
    if wait > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
    }
    let now = state.unix_now();
    let (status, answer) = lock(&state.oauth).refresh(&body, now);
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    (status, Json(answer)).into_response()
}

async fn set_oauth(
    State(state): State<Arc<MockState>>,
    Json(spec): Json<crate::oauth::AccountSpec>,
) -> StatusCode {
    let now = state.unix_now();
    lock(&state.oauth).set(spec, now);
    StatusCode::NO_CONTENT
}

async fn list_oauth(State(state): State<Arc<MockState>>) -> Json<Vec<crate::oauth::AccountView>> {
    Json(lock(&state.oauth).list())
}

async fn clear_oauth(State(state): State<Arc<MockState>>) -> StatusCode {
    lock(&state.oauth).clear();
    StatusCode::NO_CONTENT
}

async fn list_walls(State(state): State<Arc<MockState>>) -> Json<Value> {
    let now = state.unix_now();
    Json(lock(&state.walls).list(now))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ClockBody {
    now: Option<u64>,
}

async fn set_clock(State(state): State<Arc<MockState>>, Json(body): Json<ClockBody>) -> StatusCode {
    state.set_now(body.now);
    StatusCode::NO_CONTENT
}

async fn clear_walls(State(state): State<Arc<MockState>>) -> StatusCode {
    lock(&state.walls).clear();
    StatusCode::NO_CONTENT
}

/// `POST /_mock/close_connections`: every client connection closes once its requests
/// are answered (as a provider's server closes idle keep-alive connections); answers when
/// only this request's own connection is left, or after 5 s.
async fn close_connections(State(state): State<Arc<MockState>>) -> StatusCode {
    state.closing.send_modify(|generation| *generation += 1);
    let others_closed = async {
        while state.connections.load(Ordering::SeqCst) > 1 {
            state.connection_closed.notified().await;
        }
    };
    match tokio::time::timeout(Duration::from_secs(5), others_closed).await {
        Ok(()) => StatusCode::NO_CONTENT,
        Err(_) => StatusCode::GATEWAY_TIMEOUT,
    }
}

async fn reset(State(state): State<Arc<MockState>>) -> StatusCode {
    lock(&state.rules).clear();
    lock(&state.walls).clear();
    lock(&state.oauth).clear();
    lock(&state.received).clear();
    state.set_now(None);
    *lock(&state.stats) = Stats::default();
    state.total.store(0, Ordering::SeqCst);
    state
        .peak
        .store(state.in_flight.load(Ordering::SeqCst), Ordering::SeqCst);
    StatusCode::NO_CONTENT
}
