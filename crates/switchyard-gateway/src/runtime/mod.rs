//! Runtime state: what the request path reads and updates between configuration
//! changes — provider breakers and connection health ([`resilience`]), session pins
//! ([`affinity`]), exclusive leases ([`leases`], written through), combos' turns
//! ([`turns`]), service stats ([`stats`]), combos' last good connections
//! ([`last_good`]), `context-relay` handoffs ([`relay`]), concurrency gates
//! and their queues ([`gate`]), quota counters and provider signals ([`quota`]), the
//! Claude usage-wall machines ([`usage_wall`]) —
//! written behind to the store by the `persist` writer. Each part is held behind
//! short-lived locks, never across an `.await`. Resilience takes `now` from its caller;
//! the quota engine reads its own clock (Redis counts on Redis's). Nothing here reads
//! the application state, the pipeline or the HTTP error type.

pub mod affinity;
pub mod board_sync;
pub mod gate;
pub mod last_good;
pub mod leases;
pub mod quota;
pub mod relay;
pub mod resilience;
pub mod stats;
pub mod turns;
pub mod usage_wall;

use gate::Gates;
use quota::QuotaEngine;
use resilience::Resilience;
use std::sync::Arc;
use usage_wall::UsageWalls;

/// The runtime parts, shared by the request path, the management API and the writers.
#[derive(Debug)]
pub struct Runtime {
    pub resilience: Resilience,
    pub gates: Arc<Gates>,
    pub quota: Arc<QuotaEngine>,
    /// The Claude usage-wall machines (SPEC R17).
    pub walls: UsageWalls,
    /// Session pins (SPEC R15).
    pub affinity: affinity::Affinity,
    /// Exclusive session leases (SPEC R16).
    pub leases: Arc<leases::Leases>,
    /// Each combo's own turn, for the strategies that rotate per combo (SPEC R19).
    pub turns: turns::Turns,
    /// Each connection × model's remembered service, for `p2c` and `least-used`.
    pub stats: stats::Stats,
    /// Each combo's last good connection, for `lkgp`.
    pub last_good: last_good::LastGood,
    /// The `context-relay` handoffs by session.
    pub relay: relay::Relay,
}
