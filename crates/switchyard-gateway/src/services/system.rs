//! The health summary: read from the snapshot, the runtime state and one read of the
//! database; nothing here writes the store or the configuration (reading a breaker
//! moves an open one whose timeout passed to half-open, as any look at it does). The
//! status is [`switchyard_core::health::judge`]'s over every component.

use crate::runtime::quota::StoreStatus;
use crate::runtime::resilience::BreakerStatus;
use crate::state::{self, AppState};
use serde::Serialize;
use switchyard_core::domain::AuthClass;
use switchyard_core::health::{self, Components};
use utoipa::ToSchema;

/// How long health waits for the database's answer.
const DATABASE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

/// What `GET /api/monitoring/health` answers: the whole summary for the admin
/// credential, the status alone for anyone else.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum HealthAnswer {
    Detail(Box<Health>),
    Status(Status),
}

/// The health status alone: what `GET /api/monitoring/health` answers without the admin
/// credential. Nothing else may be in it (the document says so, which tells it apart
/// from [`Health`]).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Status {
    /// `ok`, `degraded` or `down` (see [`Health::status`]).
    pub status: &'static str,
}

/// Health summary.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `down` when providers are configured and none can serve (each one's breaker is
    /// open, or it has no enabled connection out of a terminal state); `degraded` when
    /// the quota store is not the one asked for or is failing, the database does not
    /// answer, a provider's breaker is open or probing, a provider has no usable
    /// connection, or a connection is in a terminal state; else `ok`.
    pub status: &'static str,
    /// Why the status is not `ok`, one sentence per fault.
    pub reasons: Vec<String>,
    /// Whether the database answered a read just now.
    pub database: &'static str,
    pub version: &'static str,
    pub uptime_ms: u64,
    pub config_version: i64,
    pub providers: usize,
    pub connections: usize,
    pub connections_enabled: usize,
    pub combos: usize,
    pub quota_pools: usize,
    /// Where quota counters live now: `sqlite` or `redis`.
    pub quota_store: &'static str,
    /// The quota store in detail: what was asked for, whether it works, and why.
    pub quota_store_status: StoreStatus,
    /// Provider circuit breakers that have seen failures.
    pub breakers: Vec<BreakerView>,
    /// Connections in a terminal state (banned, expired, out of credits): they serve
    /// nothing until an operator acts.
    pub terminal_connections: Vec<TerminalView>,
}

/// A connection in a terminal state.
#[derive(Debug, Serialize, ToSchema)]
pub struct TerminalView {
    pub connection_id: String,
    pub provider: String,
    /// `banned`, `expired` or `credits_exhausted`.
    pub state: &'static str,
}

/// One provider's circuit breaker.
#[derive(Debug, Serialize, ToSchema)]
pub struct BreakerView {
    pub provider: String,
    /// `CLOSED`, `DEGRADED`, `OPEN` or `HALF_OPEN`.
    pub state: &'static str,
    pub failures: u32,
    /// Milliseconds until an open breaker lets a probe through; `0` when half-open (a
    /// probe may go now); absent while the breaker serves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_in_ms: Option<u64>,
    /// Milliseconds the provider's cooldown (the time-window gate's or an error rule's)
    /// still holds; absent when it is not cooling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cooling_ms: Option<u64>,
}

/// Requests the gateway is working on now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub struct InFlight {
    /// Requests received and not answered yet (the `switchyard_requests_in_flight`
    /// gauge), queued ones included.
    pub requests: u64,
    /// Of those, the ones waiting for concurrency slots.
    pub queued: u64,
}

/// The requests in flight now, from the request gauge and the concurrency gates.
pub fn in_flight(state: &AppState) -> InFlight {
    InFlight {
        requests: u64::try_from(state.telemetry.metrics.in_flight.get()).unwrap_or(0),
        queued: u64::try_from(state.runtime.gates.waiting()).unwrap_or(u64::MAX),
    }
}

/// Every provider's circuit breaker that has seen failures or is cooling, by provider.
pub fn breakers(state: &AppState) -> Vec<BreakerView> {
    breaker_states(state)
        .into_iter()
        .map(BreakerView::from)
        .collect()
}

fn breaker_states(state: &AppState) -> Vec<BreakerStatus> {
    let snap = state.snapshot();
    state.runtime.resilience.breakers(
        &snap.settings.resilience.breaker,
        |p| {
            snap.catalog
                .provider_connections(p)
                .next()
                .map_or(AuthClass::Apikey, |c| c.auth_class)
        },
        state.clock.now_ms(),
    )
}

impl From<BreakerStatus> for BreakerView {
    fn from(b: BreakerStatus) -> Self {
        Self {
            provider: b.provider,
            state: b.state.as_str(),
            failures: b.failures,
            probe_in_ms: b.probe_in_ms,
            cooling_ms: b.cooling_ms,
        }
    }
}

/// The gateway's health now.
pub async fn health(state: &AppState) -> Health {
    // A database that does not answer within the deadline counts as not answering: a
    // load balancer's probe must not hang behind a long write.
    let read = state::blocking(&state.store, |s| s.config_version());
    let database_ok = matches!(
        tokio::time::timeout(DATABASE_DEADLINE, read).await,
        Ok(Ok(_))
    );
    let snap = state.snapshot();
    let conns = snap.catalog.connections();
    let quota_store = state.runtime.quota.store_status();
    let breakers = breaker_states(state);
    let terminal: Vec<TerminalView> = conns
        .iter()
        .filter_map(|c| {
            let t = state.runtime.resilience.health_of(&c.id).terminal?;
            Some(TerminalView {
                connection_id: c.id.clone(),
                provider: c.provider.clone(),
                state: t.as_str(),
            })
        })
        .collect();
    let providers = snap
        .catalog
        .providers()
        .map(|p| {
            let id = p.id.as_str();
            let enabled: Vec<_> = snap
                .catalog
                .provider_connections(id)
                .filter(|c| c.enabled)
                .collect();
            health::Provider {
                id,
                breaker: breakers.iter().find(|b| b.provider == id).map(|b| b.state),
                enabled: enabled.len(),
                terminal: enabled
                    .iter()
                    .filter(|c| terminal.iter().any(|t| t.connection_id == c.id))
                    .count(),
            }
        })
        .collect();
    let (status, reasons) = health::judge(&Components {
        quota_store_ok: quota_store.state == "ok",
        database_ok,
        providers,
    });
    Health {
        status: status.as_str(),
        reasons,
        database: if database_ok { "ok" } else { "down" },
        version: env!("CARGO_PKG_VERSION"),
        uptime_ms: state.clock.now_ms().saturating_sub(state.started_at_ms),
        config_version: snap.version,
        providers: snap.catalog.providers().count(),
        connections: conns.len(),
        connections_enabled: conns.iter().filter(|c| c.enabled).count(),
        combos: snap.catalog.combos().count(),
        quota_pools: snap.quota.pools.len(),
        quota_store: quota_store.driver,
        quota_store_status: quota_store,
        breakers: breakers.into_iter().map(BreakerView::from).collect(),
        terminal_connections: terminal,
    }
}
