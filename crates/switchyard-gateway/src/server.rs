//! The HTTP surface: `app(state)` builds the router (used directly by tests), `run`
//! serves it until shutdown, then drains in-flight requests within the grace period and
//! flushes the request log.

use crate::admin;
use crate::pipeline::{self, auth};
use crate::reqlog::LogWriter;
use crate::state::AppState;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt;
use axum::{Json, Router};
use serde::Serialize;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};
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
    }
}

/// One entry of `GET /v1/models`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelEntry {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: String,
}

/// `GET /v1/models` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelEntry>,
}

/// `GET /v1/models`: the `provider/model` ids and combo names the key may use.
#[utoipa::path(get, path = "/v1/models", tag = "client",
    responses((status = 200, body = ModelList), (status = 401)), security(("bearer" = [])))]
pub async fn models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let snap = state.snapshot();
    let key = match auth::client_key(&snap.catalog, &headers) {
        Ok(k) => k,
        Err(e) => return e.into_response(),
    };
    let mut data = Vec::new();
    for p in snap.catalog.providers() {
        for m in &p.models {
            let id = format!("{}/{m}", p.id);
            if key.may_use_model(&id) {
                data.push(ModelEntry {
                    id,
                    object: "model",
                    created: 0,
                    owned_by: p.id.clone(),
                });
            }
        }
    }
    for c in snap.catalog.combos() {
        if key.may_use_model(&c.name) {
            data.push(ModelEntry {
                id: c.name.clone(),
                object: "model",
                created: 0,
                owned_by: "switchyard".to_owned(),
            });
        }
    }
    Json(ModelList {
        object: "list",
        data,
    })
    .into_response()
}

/// `GET /metrics` in the Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = "monitoring",
    responses((status = 200, description = "Prometheus text exposition", content_type = "text/plain")))]
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let mut r = state.metrics.encode().into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    r
}

/// The whole application router.
pub fn app(state: Arc<AppState>) -> Router {
    let admin_routes =
        admin::routes().route_layer(from_fn_with_state(Arc::clone(&state), auth::require_admin));
    let (router, openapi) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(pipeline::chat_completions))
        .routes(routes!(models))
        .routes(routes!(admin::system::health))
        .routes(routes!(metrics))
        .merge(admin_routes)
        .split_for_parts();
    let doc = Arc::new(openapi);
    router
        .route(
            "/api/openapi.json",
            get(move || {
                let doc = Arc::clone(&doc);
                async move { Json(doc.as_ref().clone()) }
            }),
        )
        .with_state(state)
}

/// Serves until `shutdown` resolves; then stops accepting, lets in-flight requests run
/// for at most `server.shutdown_grace_ms`, and flushes the request log.
pub async fn run(
    listener: TcpListener,
    state: Arc<AppState>,
    writer: LogWriter,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let watcher = tokio::spawn(watch_config(Arc::clone(&state)));
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    // No Nagle delay: stream frames are small writes that must leave at once.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "Could not set TCP_NODELAY on a client connection.");
        }
    });
    let server =
        axum::serve(listener, app(Arc::clone(&state))).with_graceful_shutdown(async move {
            shutdown.await;
            stop_tx.send_replace(true);
        });
    let grace_state = Arc::clone(&state);
    let grace = async move {
        if stop_rx.wait_for(|v| *v).await.is_err() {
            std::future::pending::<()>().await;
        }
        let grace_ms = grace_state.snapshot().settings.shutdown_grace_ms;
        tracing::info!(
            grace_ms,
            "Shutting down: no new connections; waiting for in-flight requests."
        );
        tokio::time::sleep(Duration::from_millis(grace_ms)).await;
    };
    let result = tokio::select! {
        r = server => r,
        () = grace => {
            tracing::warn!(
                in_flight = state.metrics.in_flight.get(),
                "Shutdown grace period expired; cutting the remaining requests."
            );
            Ok(())
        }
    };
    watcher.abort();
    writer.finish().await;
    tracing::info!("Request log flushed; bye.");
    result
}

/// Reloads the snapshot when another process changed the configuration.
async fn watch_config(state: Arc<AppState>) {
    let mut tick = tokio::time::interval(CONFIG_POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
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
