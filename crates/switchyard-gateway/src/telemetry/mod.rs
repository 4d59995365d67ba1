//! Telemetry: the Prometheus metrics ([`metrics`]) and the request log with its
//! background writer ([`reqlog`]). Recording only: nothing here decides or reads the
//! request path's state.

pub mod metrics;
pub mod reqlog;
pub mod series;

use metrics::Metrics;
use reqlog::RequestLog;

/// Where the gateway records what it did.
#[derive(Debug)]
pub struct Telemetry {
    pub metrics: Metrics,
    pub log: RequestLog,
}
