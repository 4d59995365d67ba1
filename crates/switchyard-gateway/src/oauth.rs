//! Refreshing OAuth subscription tokens (SPEC R4): the shell around
//! [`switchyard_core::oauth`], which decides when a refresh is due and what a failure
//! leads to.
//!
//! A refresh token rotates — the old one is dead once used — so two refreshes of one
//! connection must never overlap, in this process or across replicas:
//! - in this process, one task per connection refreshes ([`start`]); the requests that
//!   need the new token wait for that task's result, bounded by `oauth.refreshWaitMs`;
//! - across processes, the task refreshes only under the connection's lease in the
//!   store; a process that finds the lease taken waits for the holder's new tokens to
//!   reach its snapshot.
//!
//! The task runs on its own: a request that stops waiting never cancels a refresh
//! between the token endpoint's answer and the write of the new tokens, which would
//! lose the rotated refresh token. The new tokens are a configuration change, so every
//! replica's next snapshot authenticates with them.

use crate::client;
use crate::state::{blocking, AppState};
use crate::sync::lock;
use crate::telemetry::metrics::OauthLabels;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_core::oauth::{read_refresh_answer, Failed, Grant, Refreshed, Why};
use switchyard_store::oauth::RefreshLease;
use tokio::sync::watch;

/// How long a refresh lease lasts: longer than a token endpoint may take.
const LEASE_MS: u64 = 30_000;

/// The longest a token endpoint may take to answer.
const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(15);

/// The largest token endpoint answer read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// How often a process that found the lease taken looks for the holder's new tokens.
const BUSY_POLL: Duration = Duration::from_millis(50);

/// How often idle connections' tokens are looked at, so they are refreshed before they
/// expire even without traffic.
const SWEEP_EVERY: Duration = Duration::from_secs(15);

/// How a refresh ended well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// This process refreshed the tokens.
    Refreshed,
    /// Another refresh (of this process or another) got there first.
    ByAnother,
}

/// Why no new token came.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefreshError {
    #[error("connection `{0}` holds no OAuth grant to refresh")]
    NotOauth(String),
    #[error("connection `{connection}`'s token is not refreshed now: {why}")]
    NotNow { connection: String, why: String },
    #[error("the token endpoint refused to refresh connection `{connection}`'s token: {error}")]
    Refused { connection: String, error: String },
    #[error("no refresh of connection `{0}`'s token finished in time")]
    Timeout(String),
    #[error("the refresh of connection `{connection}`'s token failed: {error}")]
    Internal { connection: String, error: String },
}

type Outcome = Result<Done, RefreshError>;

/// This process's refreshes in flight, one per connection.
#[derive(Debug)]
pub struct Refresher {
    /// Who holds a lease taken by this process.
    holder: String,
    /// A refresh in flight per connection: its result, once there is one. Bounded by
    /// the connections (an entry goes when its refresh ends).
    flights: Mutex<HashMap<String, watch::Receiver<Option<Outcome>>>>,
}

impl Default for Refresher {
    fn default() -> Self {
        Self {
            holder: format!("{:016x}", rand::random::<u64>()),
            flights: Mutex::new(HashMap::new()),
        }
    }
}

/// Connection `id`'s last refresh as the live snapshot has it; `None` when it holds no
/// grant.
pub fn seen(state: &AppState, id: &str) -> Option<Option<u64>> {
    let snap = state.snapshot();
    let grant = snap.upstream_of(id)?.grant.as_ref()?;
    Some(grant.refreshes.last_refresh_at)
}

/// Starts a refresh of connection `id`'s token, or joins the one in flight, and returns
/// its result once known. `why = None` is an operator's refresh: tried whatever the
/// back-off says. `seen` is the last refresh the caller's snapshot held: a refresh
/// since then is all the caller needs.
pub fn start(
    state: &Arc<AppState>,
    id: &str,
    why: Option<Why>,
    seen: Option<u64>,
) -> watch::Receiver<Option<Outcome>> {
    let refresher = &state.oauth;
    let mut flights = lock(&refresher.flights);
    if let Some(rx) = flights.get(id) {
        return rx.clone();
    }
    let (tx, rx) = watch::channel(None);
    flights.insert(id.to_owned(), rx.clone());
    drop(flights);
    let (state, id) = (Arc::clone(state), id.to_owned());
    tokio::spawn(async move {
        let outcome = run(&state, &id, why, seen).await;
        lock(&state.oauth.flights).remove(&id);
        tx.send_replace(Some(outcome));
    });
    rx
}

/// Refreshes connection `id`'s token (see [`start`]) and waits for the result, at most
/// `oauth.refreshWaitMs`.
pub async fn refresh(
    state: &Arc<AppState>,
    id: &str,
    why: Option<Why>,
    seen: Option<u64>,
) -> Outcome {
    let wait = Duration::from_millis(state.snapshot().settings.oauth.refresh_wait_ms);
    let mut rx = start(state, id, why, seen);
    let waited = tokio::time::timeout(wait, rx.wait_for(Option::is_some))
        .await
        .ok()
        .and_then(|r| r.ok().and_then(|o| o.clone()));
    waited.unwrap_or_else(|| Err(RefreshError::Timeout(id.to_owned())))
}

/// Refreshes every connection whose token expires within the margin, every
/// [`SWEEP_EVERY`], so a connection without traffic is refreshed too. Runs until
/// aborted.
pub async fn sweep(state: Arc<AppState>) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let snap = state.snapshot();
        let (now, margin) = (state.clock.now_ms(), snap.settings.oauth.refresh_margin_ms);
        for conn in snap.catalog.connections() {
            let Some(grant) = snap
                .upstreams
                .get(conn.index)
                .and_then(|u| u.grant.as_ref())
            else {
                continue;
            };
            if grant.wanted(Why::Expiring, margin, now) {
                start(
                    &state,
                    &conn.id,
                    Some(Why::Expiring),
                    grant.refreshes.last_refresh_at,
                );
            }
        }
    }
}

/// One refresh; see the module docs.
async fn run(state: &Arc<AppState>, id: &str, why: Option<Why>, seen_at: Option<u64>) -> Outcome {
    let internal = |e: crate::state::StateError| RefreshError::Internal {
        connection: id.to_owned(),
        error: e.to_string(),
    };
    let changed = || seen(state, id).is_some_and(|now_seen| now_seen != seen_at);
    if why.is_some() && changed() {
        return Ok(Done::ByAnother);
    }
    let settings = state.snapshot().settings.oauth;
    let holder = state.oauth.holder.clone();
    let give_up = tokio::time::Instant::now() + Duration::from_millis(settings.refresh_wait_ms);
    let (grant, record) = loop {
        let now = state.clock.now_ms();
        let (key, who) = (id.to_owned(), holder.clone());
        let lease = blocking(&state.store, move |s| {
            s.take_refresh_lease(&key, &who, now, now.saturating_add(LEASE_MS))
        })
        .await
        .map_err(internal)?;
        match lease {
            RefreshLease::Taken(grant, record) => break (grant, record),
            RefreshLease::Gone => return Err(RefreshError::NotOauth(id.to_owned())),
            RefreshLease::Busy => {
                // Another process refreshes: its tokens reach this snapshot by the
                // configuration change it writes.
                if tokio::time::Instant::now() >= give_up {
                    return Err(RefreshError::Timeout(id.to_owned()));
                }
                tokio::time::sleep(BUSY_POLL).await;
                if changed() {
                    return Ok(Done::ByAnother);
                }
            }
        }
    };
    let release = || {
        let (key, who) = (id.to_owned(), holder.clone());
        blocking(&state.store, move |s| s.release_refresh_lease(&key, &who))
    };
    let mut refreshes = record.refreshes();
    let now = state.clock.now_ms();
    if let Some(why) = why {
        if record.last_refresh_at != seen_at {
            // Another process refreshed since the caller's snapshot was built.
            release().await.map_err(internal)?;
            state.reload().await.map_err(internal)?;
            return Ok(Done::ByAnother);
        }
        if !refreshes.wanted(why, record.expires_at, settings.refresh_margin_ms, now) {
            release().await.map_err(internal)?;
            return Err(RefreshError::NotNow {
                connection: id.to_owned(),
                why: not_now(&record, now),
            });
        }
    }
    let answer = call(state, &grant).await;
    let now = state.clock.now_ms();
    let metric = |outcome| {
        state
            .telemetry
            .metrics
            .oauth_refreshes
            .get_or_create(&OauthLabels {
                connection: id.to_owned(),
                outcome,
            })
            .inc();
    };
    match answer {
        Ok(refreshed) => {
            let next = grant.refreshed(refreshed);
            refreshes.on_success(now);
            store_refreshed(state, id, &holder, next, refreshes, now).await?;
            // The new snapshot ends what the refused token caused (`AppState::install`).
            state.reload().await.map_err(internal)?;
            metric("refreshed");
            tracing::info!(connection_id = %id, "Refreshed the connection's OAuth token.");
            Ok(Done::Refreshed)
        }
        Err(error) => {
            let failed = refreshes.on_failure(&error, now);
            let (key, who, r) = (id.to_owned(), holder.clone(), refreshes.clone());
            blocking(&state.store, move |s| s.refresh_failed(&key, &who, &r, now))
                .await
                .map_err(internal)?;
            let message = format!("token refresh failed: {error}");
            state
                .runtime
                .resilience
                .refresh_failed(id, failed, &message, now);
            match failed {
                Failed::Expired => {
                    metric("expired");
                    tracing::error!(connection_id = %id, %error, failures = refreshes.failures, "The connection's OAuth token could not be refreshed; the connection is expired until it gets a new credential or a manual refresh succeeds.");
                }
                Failed::RetryAt(at) => {
                    metric("failed");
                    tracing::warn!(connection_id = %id, %error, failures = refreshes.failures, retry_in_ms = at.saturating_sub(now), "The connection's OAuth token could not be refreshed; the connection cools until the next try.");
                }
            }
            Err(RefreshError::Refused {
                connection: id.to_owned(),
                error,
            })
        }
    }
}

/// Why a refresh is not tried now, for the operator.
fn not_now(record: &switchyard_model::OauthRecord, now: u64) -> String {
    match record.state(now) {
        "expired" => format!(
            "the connection is expired after {} failed refreshes; import new credentials or refresh it by hand",
            record.failures
        ),
        "cooling" => format!(
            "a failed refresh is tried again in {} s",
            record.retry_at.unwrap_or(now).saturating_sub(now).div_ceil(1000)
        ),
        _ => "the token was refreshed within the last minute".to_owned(),
    }
}

/// Writes the refreshed tokens. The old refresh token is dead already, so a failed
/// write is tried again a few times before the new tokens are given up on.
async fn store_refreshed(
    state: &AppState,
    id: &str,
    holder: &str,
    next: Grant,
    refreshes: switchyard_core::oauth::Refreshes,
    now: u64,
) -> Result<(), RefreshError> {
    let next = Arc::new(next);
    let mut tries = 0;
    loop {
        let (key, who, g, r) = (
            id.to_owned(),
            holder.to_owned(),
            Arc::clone(&next),
            refreshes.clone(),
        );
        match blocking(&state.store, move |s| s.refreshed(&key, &who, &g, &r, now)).await {
            Ok(()) => return Ok(()),
            Err(e) if tries < 5 => {
                tries += 1;
                tracing::error!(connection_id = %id, error = %e, "Could not store the refreshed OAuth tokens; trying again.");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => {
                tracing::error!(connection_id = %id, error = %e, "Could not store the refreshed OAuth tokens; the connection needs new credentials.");
                return Err(RefreshError::Internal {
                    connection: id.to_owned(),
                    error: e.to_string(),
                });
            }
        }
    }
}

/// Calls `grant`'s token endpoint; the error is the operator's text, with no token.
async fn call(state: &AppState, grant: &Grant) -> Result<Refreshed, String> {
    let redact = |text: String| {
        [&grant.refresh_token, &grant.access_token]
            .iter()
            .filter(|t| t.len() >= 8)
            .fold(text, |text, t| text.replace(t.as_str(), "[redacted]"))
    };
    let uri = Uri::try_from(grant.token_url())
        .map_err(|_| "the token endpoint's URL is not a URL".to_owned())?;
    let body = serde_json::to_vec(&grant.refresh_body()).map_err(|e| e.to_string())?;
    let mut request = Request::new(Full::new(Bytes::from(body)));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = uri;
    let headers = request.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    headers.insert(
        header::USER_AGENT,
        HeaderValue::from_static(concat!("switchyard/", env!("CARGO_PKG_VERSION"))),
    );
    let connect_timeout_ms = state.snapshot().settings.connect_timeout_ms;
    let pending = client::request(connect_timeout_ms, false, request).map_err(|e| e.to_string())?;
    let exchange = async {
        let response = pending
            .await
            .map_err(|e| format!("the token endpoint could not be reached: {e}"))?;
        let status = response.status().as_u16();
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| format!("the token endpoint's answer could not be read: {e}"))?
            .to_bytes();
        Ok::<_, String>((status, body))
    };
    let (status, body) = tokio::time::timeout(ENDPOINT_TIMEOUT, exchange)
        .await
        .map_err(|_| {
            format!(
                "the token endpoint did not answer within {} s",
                ENDPOINT_TIMEOUT.as_secs()
            )
        })?
        .map_err(redact)?;
    read_refresh_answer(status, &body, state.clock.now_ms()).map_err(redact)
}
