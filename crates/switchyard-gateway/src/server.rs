//! The HTTP surface: `app(state)` builds the router (used directly by tests), `run`
//! serves it until shutdown, then drains in-flight requests within the grace period and
//! flushes the request log.
//!
//! Besides `/metrics`, the OpenAPI document and the routing fallbacks (a typed 404 or
//! 405, after the credential the path needs, checked with `pipeline::auth`), it handles
//! no request itself, and it never imports an upstream adapter.

use crate::admin;
use crate::admin::openapi::ErrorResponses;
use crate::edge;
use crate::error::render::ErrorBody;
use crate::error::{render, ApiError};
use crate::frontends;
use crate::pipeline::auth;
use crate::state::AppState;
use crate::state::Writers;
use crate::telemetry::metrics::EdgeMetrics;
use crate::upstream::ProtocolHeaders;
use axum::extract::{Extension, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, Uri};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use prometheus_client::metrics::gauge::Gauge;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use switchyard_core::format::Format;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// How often a running gateway checks the database for configuration changes made by
/// another process (the `switchyard keys` CLI). One second keeps CLI changes visible
/// "at once" for a human while costing one tiny query per second.
const CONFIG_POLL_INTERVAL: Duration = Duration::from_secs(1);

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Switchyard",
        description = "LLM API gateway: client API (`/v1`) and management API (`/api`)."
    ),
    // Documented here and routed by hand: the models entry because its id may span two
    // path segments, the document because it is built from the others.
    paths(crate::frontends::models::model, openapi_json),
    components(schemas(ErrorBody)),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.add_security_scheme(
            "x-api-key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("x-api-key"))),
        );
    }
}

/// Paths answered without a credential, whatever the method.
const PUBLIC_PATHS: [&str; 3] = ["/api/monitoring/health", "/api/openapi.json", "/metrics"];

/// The credential a path needs, checked before saying whether a route exists: the
/// admin credential under `/api`, a client key under `/v1`, nothing elsewhere.
fn check_credential(state: &AppState, path: &str, headers: &HeaderMap) -> Result<(), ApiError> {
    if PUBLIC_PATHS.contains(&path) {
        return Ok(());
    }
    let under = |prefix: &str| {
        path.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    if path == frontends::leases::PATH {
        auth::client_key(&state.snapshot().catalog, headers).map(|_| ())
    } else if under("/api") {
        auth::check_admin(&state.config, headers)
    } else if under("/v1") {
        auth::client_key(&state.snapshot().catalog, headers).map(|_| ())
    } else {
        Ok(())
    }
}

/// Longest request path echoed in a routing error.
const MAX_ECHOED_PATH: usize = 200;

/// `error` for the request's path, once the credential the path needs was checked; in
/// Anthropic's shape under `/v1/messages` or when the request names an
/// `anthropic-version`.
fn routing_error(
    state: &AppState,
    uri: &Uri,
    headers: &HeaderMap,
    error: impl FnOnce(String) -> ApiError,
) -> Response {
    let anthropic =
        uri.path().starts_with("/v1/messages") || headers.contains_key(ProtocolHeaders::VERSION);
    let format = if anthropic {
        Format::AnthropicMessages
    } else {
        Format::OpenAiChat
    };
    let e = match check_credential(state, uri.path(), headers) {
        Ok(()) => error(uri.path().chars().take(MAX_ECHOED_PATH).collect()),
        Err(e) => e,
    };
    render::response(&e, format)
}

/// Unknown routes: a typed `404 not_found`, after the credential the path needs.
async fn route_not_found(
    State(state): State<Arc<AppState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    routing_error(&state, &uri, &headers, |path| ApiError::RouteNotFound {
        method: method.to_string(),
        path,
    })
}

/// Known routes with another method: a typed `405 method_not_allowed`, after the
/// credential the path needs.
async fn method_not_allowed(
    State(state): State<Arc<AppState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    routing_error(&state, &uri, &headers, |path| ApiError::MethodNotAllowed {
        method: method.to_string(),
        path,
    })
}

/// `GET /metrics` in the Prometheus text format; behind the admin credential when
/// `monitoring.access` is `admin`.
#[utoipa::path(get, path = "/metrics", tag = "monitoring",
    responses(
        (status = 200, description = "The metrics in the OpenMetrics text format",
            content_type = "application/openmetrics-text"),
        (status = 401, description = "`monitoring.access` is `admin` and no admin credential was given."),
        (status = 403, description = "`monitoring.access` is `admin` and the client key lacks the `admin` scope.")))]
pub async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if state.snapshot().settings.metrics_need_admin {
        if let Err(e) = auth::check_admin(&state.config, &headers) {
            return e.into_response();
        }
    }
    let mut r = state.telemetry.metrics.encode().into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    r
}

/// `GET /api/openapi.json`: the OpenAPI document of every route, this one included.
#[utoipa::path(get, path = "/api/openapi.json", tag = "monitoring",
    responses((status = 200, body = Object, description = "This OpenAPI document (3.1).")))]
async fn openapi_json(
    Extension(doc): Extension<Arc<utoipa::openapi::OpenApi>>,
) -> Json<utoipa::openapi::OpenApi> {
    Json(doc.as_ref().clone())
}

/// The whole application router.
pub fn app(state: Arc<AppState>) -> Router {
    let admin_routes =
        admin::routes().route_layer(from_fn_with_state(Arc::clone(&state), auth::require_admin));
    let (router, mut openapi) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(frontends::routes())
        .routes(routes!(admin::system::health))
        .routes(routes!(metrics))
        .merge(admin_routes)
        .split_for_parts();
    // After the merge: it documents the answers every merged operation may give.
    ErrorResponses.modify(&mut openapi);
    router
        .route(
            "/api/openapi.json",
            get(openapi_json).layer(Extension(Arc::new(openapi))),
        )
        // `provider/model` ids sent unencoded span two segments.
        .route("/v1/models/{*id}", get(frontends::models::model))
        .fallback(route_not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Pause after a failed accept (out of file descriptors and the like): long enough not to
/// spin on a persistent error, short enough to resume at once when it clears.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Connections waiting to be picked up by one I/O thread. Each thread takes its
/// connections within microseconds; the bound only matters if a thread is wedged, and
/// then it makes the acceptor wait instead of queueing without limit.
const HANDOFF_QUEUE: usize = 1024;

/// The least time queued quota settlements get at shutdown, even when the grace period
/// is used up by requests: the releases of the requests cut at its end are among them.
const SETTLE_DRAIN_MIN: Duration = Duration::from_secs(1);

/// Where connections are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// `server.io_threads` threads, each with its own single-threaded runtime.
    Threads,
    /// One task on the caller's runtime: the whole server on one thread, so a test can
    /// run it under tokio's paused time.
    Caller,
}

/// Serves until `shutdown` resolves; then stops accepting, closes connections with
/// nothing in flight (idle ones, and ones still sending a request head or body), lets
/// in-flight requests run for at most `server.shutdown_grace_ms`, applies the queued
/// quota settlements in what is left of it, and flushes the request log.
///
/// Requests are served by `server.io_threads` threads (one per core by default), each
/// with its own single-threaded runtime: a request's tasks — client connection, handler,
/// upstream connection — stay on one thread, with no cross-thread wake-ups on the request
/// path. One acceptor deals new connections to the threads in turn, so load spreads
/// evenly however few connections there are; it closes new connections at once while
/// `server.max_connections` are open. Each connection is served under the edge's
/// timeouts ([`edge`]). Background work (acceptor, request-log writer, configuration
/// watcher) stays on the caller's runtime.
pub async fn run(
    listener: TcpListener,
    state: Arc<AppState>,
    writer: Writers,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    run_with(listener, state, writer, shutdown, Router::new()).await
}

/// [`run`], with `extra` routes (the dashboard's) merged into the application router.
/// `extra` must not set a fallback: the application's answers unknown routes.
pub async fn run_with(
    listener: TcpListener,
    state: Arc<AppState>,
    writer: Writers,
    shutdown: impl Future<Output = ()> + Send + 'static,
    extra: Router,
) -> std::io::Result<()> {
    serve_with(listener, state, writer, shutdown, Placement::Threads, extra).await
}

/// [`run`], with the connections served where `placement` says.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    writer: Writers,
    shutdown: impl Future<Output = ()> + Send + 'static,
    placement: Placement,
) -> std::io::Result<()> {
    serve_with(listener, state, writer, shutdown, placement, Router::new()).await
}

/// [`serve`], with `extra` routes merged into the application router (see [`run_with`]).
pub async fn serve_with(
    listener: TcpListener,
    state: Arc<AppState>,
    writer: Writers,
    shutdown: impl Future<Output = ()> + Send + 'static,
    placement: Placement,
    extra: Router,
) -> std::io::Result<()> {
    let watcher = tokio::spawn(watch_config(Arc::clone(&state)));
    let refresher = tokio::spawn(crate::oauth::sweep(Arc::clone(&state)));
    let settings = state.snapshot().settings.clone();
    // Breakers are shared through the Redis the quota counters live in (SPEC O6, B6).
    let sharing = (settings.quota.store_driver == "redis" && !settings.quota.redis_url.is_empty())
        .then(|| {
            tokio::spawn(crate::runtime::board_sync::run(
                Arc::clone(&state),
                settings.quota.redis_url.clone(),
                settings.quota.redis_prefix.clone(),
            ))
        });
    let threads = match (placement, settings.io_threads) {
        (Placement::Caller, _) => 1,
        (Placement::Threads, 0) => std::thread::available_parallelism().map_or(1, usize::from),
        (Placement::Threads, n) => usize::try_from(n).unwrap_or(1),
    };
    let max_connections = usize::try_from(settings.max_connections)
        .unwrap_or(Semaphore::MAX_PERMITS)
        .min(Semaphore::MAX_PERMITS);
    let (stop_tx, stop_rx) = watch::channel(false);
    let (abort_tx, abort_rx) = watch::channel(false);
    let mut threads_spawned = Vec::with_capacity(threads);
    let mut tasks = Vec::new();
    let mut handoffs = Vec::with_capacity(threads);
    for i in 0..threads {
        let (tx, rx) = mpsc::channel(HANDOFF_QUEUE);
        handoffs.push(tx);
        let app = edge::App {
            direct: Arc::new(frontends::Inference(Arc::clone(&state))),
            router: app(Arc::clone(&state)).merge(extra.clone()),
        };
        let state = Arc::clone(&state);
        let (stop, abort) = (stop_rx.clone(), abort_rx.clone());
        let work = serve_io_thread(rx, app, state, stop, abort);
        if placement == Placement::Caller {
            tasks.push(tokio::spawn(work));
            continue;
        }
        threads_spawned.push(
            std::thread::Builder::new()
                .name(format!("switchyard-io-{i}"))
                .spawn(move || -> std::io::Result<()> {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?
                        .block_on(work);
                    Ok(())
                })?,
        );
    }
    let acceptor = tokio::spawn(accept_loop(
        listener,
        handoffs,
        Slots::new(max_connections, state.telemetry.metrics.edge.clone()),
        stop_rx.clone(),
    ));
    shutdown.await;
    let shutdown_at = state.clock.now_ms();
    stop_tx.send_replace(true);
    let _ = acceptor.await;
    let grace_ms = state.snapshot().settings.shutdown_grace_ms;
    tracing::info!(
        grace_ms,
        "Shutting down: no new connections; waiting for in-flight requests."
    );
    let mut joined = tokio::spawn(async move {
        for task in tasks {
            task.await.map_err(std::io::Error::other)?;
        }
        tokio::task::spawn_blocking(move || {
            threads_spawned.into_iter().try_for_each(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("I/O thread panicked")))
            })
        })
        .await
        .map_err(std::io::Error::other)?
    });
    let result = tokio::select! {
        r = &mut joined => r,
        () = tokio::time::sleep(Duration::from_millis(grace_ms)) => {
            tracing::warn!(
                in_flight = state.telemetry.metrics.in_flight.get(),
                "Shutdown grace period expired; cutting the remaining requests."
            );
            state.cutting.store(true, std::sync::atomic::Ordering::SeqCst);
            abort_tx.send_replace(true);
            joined.await
        }
    };
    watcher.abort();
    refresher.abort();
    if let Some(sharing) = sharing {
        sharing.abort();
    }
    let spent_ms = state.clock.now_ms().saturating_sub(shutdown_at);
    let settle_within =
        Duration::from_millis(grace_ms.saturating_sub(spent_ms)).max(SETTLE_DRAIN_MIN);
    writer.finish(settle_within).await;
    tracing::info!("Request log flushed; bye.");
    result.map_err(std::io::Error::other)?
}

/// The places under `server.max_connections`.
struct Slots {
    free: Arc<Semaphore>,
    max: usize,
    metrics: EdgeMetrics,
}

impl Slots {
    fn new(max: usize, metrics: EdgeMetrics) -> Self {
        Self {
            free: Arc::new(Semaphore::new(max)),
            max,
            metrics,
        }
    }

    /// A place for a new connection, or `None` (counted) when all are taken.
    fn take(&self) -> Option<Slot> {
        match Arc::clone(&self.free).try_acquire_owned() {
            Ok(permit) => {
                self.metrics.open.inc();
                Some(Slot {
                    _permit: permit,
                    open: self.metrics.open.clone(),
                })
            }
            Err(_) => {
                self.metrics.refused.inc();
                None
            }
        }
    }

    /// Whether a tenth of the places are free again: ends a run of refusals for the log.
    fn recovered(&self) -> bool {
        self.free.available_permits().saturating_mul(10) >= self.max
    }
}

/// One connection's place under `server.max_connections`, held while it is open.
struct Slot {
    _permit: OwnedSemaphorePermit,
    open: Gauge,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.dec();
    }
}

/// A connection on its way to an I/O thread, with its place.
struct Accepted {
    stream: std::net::TcpStream,
    slot: Slot,
}

/// Accepts connections and deals them to the I/O threads in turn until stopped; then
/// closes the listening socket. While every place is taken, a new connection is closed
/// at once: it fails fast for the client (a load balancer tries another instance)
/// instead of waiting unserved, with no deadline, in the listen backlog.
async fn accept_loop(
    listener: TcpListener,
    handoffs: Vec<mpsc::Sender<Accepted>>,
    slots: Slots,
    mut stop: watch::Receiver<bool>,
) {
    let mut next = 0usize;
    let mut refusing = false;
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "Failed to accept a connection.");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = edge::stopped(&mut stop) => return,
        };
        let Some(slot) = slots.take() else {
            if !refusing {
                tracing::warn!(
                    max_connections = slots.max,
                    "Client connection limit reached: closing new connections until some close."
                );
                refusing = true;
            }
            continue;
        };
        refusing = refusing && !slots.recovered();
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "Failed to hand a connection to an I/O thread.");
                continue;
            }
        };
        if let Some(tx) = handoffs.get(next % handoffs.len()) {
            let _ = tx.send(Accepted { stream, slot }).await;
        }
        next = next.wrapping_add(1);
    }
}

/// One I/O thread: serves the connections dealt to it, each in its own task, until
/// stopped — then waits for its connections to finish (each closes once nothing is in
/// flight) — or aborted (grace period over: the runtime drops what is left).
async fn serve_io_thread(
    incoming: mpsc::Receiver<Accepted>,
    app: edge::App,
    state: Arc<AppState>,
    stop: watch::Receiver<bool>,
    mut abort: watch::Receiver<bool>,
) {
    tokio::select! {
        () = serve_connections(incoming, app, state, stop) => {}
        () = edge::stopped(&mut abort) => {}
    }
}

async fn serve_connections(
    mut incoming: mpsc::Receiver<Accepted>,
    app: edge::App,
    state: Arc<AppState>,
    mut stop: watch::Receiver<bool>,
) {
    // Every connection task holds a receiver; the sender sees them all gone.
    let (open, _) = watch::channel(());
    loop {
        let accepted = tokio::select! {
            a = incoming.recv() => a,
            () = edge::stopped(&mut stop) => None,
        };
        let Some(Accepted { stream, slot }) = accepted else {
            break;
        };
        let stream = match tokio::net::TcpStream::from_std(stream) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "Failed to adopt a handed-off connection.");
                continue;
            }
        };
        // No Nagle delay: stream frames are small writes that must leave at once.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "Could not set TCP_NODELAY on a client connection.");
        }
        let peer = stream.peer_addr().ok();
        let limits = edge::Limits::from_settings(&state.snapshot().settings);
        let (app, metrics, stop, held) = (
            app.clone(),
            state.telemetry.metrics.edge.clone(),
            stop.clone(),
            open.subscribe(),
        );
        tokio::spawn(async move {
            edge::serve(stream, peer, app, limits, metrics, stop).await;
            drop((slot, held));
        });
    }
    // Connections handed over but not yet picked up are closed.
    drop(incoming);
    open.closed().await;
}

/// Reloads the snapshot when another process or replica changed the configuration: on
/// PostgreSQL as soon as the change is announced (`LISTEN`), and on either database
/// when the version, read every [`CONFIG_POLL_INTERVAL`], moved (announcements can be
/// lost while the listener reconnects; the poll bounds that). On PostgreSQL, lease
/// changes another replica announces are read back too (SPEC R16 across replicas).
async fn watch_config(state: Arc<AppState>) {
    let heard = match state.store.listen() {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(error = %e, "Cannot listen for changes of other replicas; polling the configuration version only.");
            None
        }
    };
    let (mut config_heard, mut leases_heard) = match heard {
        Some(h) => (Some(h.config), Some(h.leases)),
        None => (None, None),
    };
    let mut tick = tokio::time::interval(CONFIG_POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            changed = changed(config_heard.as_mut()) => {
                if changed.is_err() {
                    config_heard = None;
                }
            }
            changed = changed(leases_heard.as_mut()) => {
                if changed.is_err() {
                    leases_heard = None;
                }
                reload_leases(&state).await;
                continue;
            }
        }
        let store = Arc::clone(&state.store);
        let version = match tokio::task::spawn_blocking(move || store.config_version()).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "Could not read the configuration version.");
                continue;
            }
            Err(_) => continue,
        };
        if version != state.snapshot().version {
            match state.reload().await {
                Ok(()) => tracing::info!(version, "Configuration changed elsewhere; reloaded."),
                Err(e) => {
                    tracing::error!(error = %e, "Configuration reload failed; keeping the previous snapshot.")
                }
            }
        }
    }
}

/// The next change `rx` sees; never, without one.
async fn changed(
    rx: Option<&mut tokio::sync::watch::Receiver<u64>>,
) -> Result<(), tokio::sync::watch::error::RecvError> {
    match rx {
        Some(rx) => rx.changed().await,
        None => std::future::pending().await,
    }
}

/// Reads the active leases back after another replica changed them.
async fn reload_leases(state: &Arc<AppState>) {
    let (leases, now) = (Arc::clone(&state.runtime.leases), state.clock.now_ms());
    match tokio::task::spawn_blocking(move || leases.refresh(now)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "Could not read the leases another replica changed.")
        }
        Err(e) => tracing::warn!(error = %e, "The lease reload failed."),
    }
}
