//! The health summary: read from the snapshot and the runtime state only; nothing here
//! writes the store, the configuration or the runtime state.

use crate::runtime::quota::StoreStatus;
use crate::state::AppState;
use serde::Serialize;
use switchyard_core::domain::AuthClass;
use utoipa::ToSchema;

/// Health summary.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`, or `degraded` when the quota store is not the one asked for or is failing.
    pub status: &'static str,
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

/// The gateway's health now.
pub fn health(state: &AppState) -> Health {
    let snap = state.snapshot();
    let conns = snap.catalog.connections();
    let quota_store = state.runtime.quota.store_status();
    Health {
        // Redis asked for but not in use, or failing: several replicas no longer share
        // their counters, or requests go unmetered.
        status: if quota_store.state == "ok" {
            "ok"
        } else {
            "degraded"
        },
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
        breakers: state
            .runtime
            .resilience
            .breakers(
                &snap.settings.resilience.breaker,
                |p| {
                    snap.catalog
                        .provider_connections(p)
                        .next()
                        .map_or(AuthClass::Apikey, |c| c.auth_class)
                },
                state.clock.now_ms(),
            )
            .into_iter()
            .map(|b| BreakerView {
                provider: b.provider,
                state: b.state.as_str(),
                failures: b.failures,
                probe_in_ms: b.probe_in_ms,
            })
            .collect(),
    }
}
