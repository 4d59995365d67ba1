//! Prometheus metrics (SPEC O3), served at `GET /metrics`.
//!
//! Label sets are bounded: `provider` and `model` come from the configuration (models a
//! provider does not declare count as `model="other"`, requests that never reached a
//! provider as `"none"`), `status` is an HTTP status.
//!
//! The module only records and encodes: it imports nothing from the rest of the crate,
//! reads the catalog only to bound the `model` label, and decides nothing.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::{Arc, LazyLock, OnceLock};
use switchyard_core::outcome::StreamCut;

/// Metric names, without the `_total` suffix the exposition adds to counters.
pub mod names {
    pub const REQUESTS: &str = "switchyard_requests";
    pub const IN_FLIGHT: &str = "switchyard_requests_in_flight";
    pub const UPSTREAM_LATENCY: &str = "switchyard_upstream_latency_seconds";
    pub const UPSTREAM_ATTEMPTS: &str = "switchyard_upstream_attempts";
    pub const STREAM_CUTS: &str = "switchyard_stream_cuts";
    pub const LOG_DROPPED: &str = "switchyard_request_log_dropped";
    pub const BREAKER_TRANSITIONS: &str = "switchyard_breaker_transitions";
    pub const COOLDOWNS: &str = "switchyard_connection_cooldowns";
    pub const GATE_QUEUE_DEPTH: &str = "switchyard_gate_queue_depth";
    pub const GATE_WAIT: &str = "switchyard_gate_wait_seconds";
    pub const GATE_REJECTIONS: &str = "switchyard_gate_rejections";
    pub const CLIENT_CONNECTIONS: &str = "switchyard_client_connections";
    pub const CLIENT_CONNECTIONS_REFUSED: &str = "switchyard_client_connections_refused";
    pub const CLIENT_TIMEOUTS: &str = "switchyard_client_timeouts";
    pub const QUOTA_UNMETERED: &str = "switchyard_quota_unmetered";
    pub const QUOTA_UNPRICED: &str = "switchyard_quota_unpriced";
    pub const QUOTA_RESERVATIONS_OPEN: &str = "switchyard_quota_reservations_open";
    pub const QUOTA_STORE_INFO: &str = "switchyard_quota_store_info";
    pub const OAUTH_REFRESHES: &str = "switchyard_oauth_refreshes";
}

/// Label placeholder for requests that never resolved to a provider or model.
pub const NONE_LABEL: &str = "none";

/// Label for models a provider does not declare (it passes any name through); keeps the
/// label set bounded whatever names clients send.
pub const OTHER_MODEL_LABEL: &str = "other";

/// [`NONE_LABEL`] and [`OTHER_MODEL_LABEL`] as label values, made once.
static NONE: LazyLock<Arc<String>> = LazyLock::new(|| Arc::new(NONE_LABEL.to_owned()));
static OTHER: LazyLock<Arc<String>> = LazyLock::new(|| Arc::new(OTHER_MODEL_LABEL.to_owned()));

/// A request's labels: status, provider, model. The names are shared with the
/// configuration snapshot's metric handles, so counting a request copies none.
/// (`Arc<String>`: prometheus-client encodes an `Arc` of a sized value only.)
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub status: u16,
    pub provider: Arc<String>,
    pub model: Arc<String>,
}

impl RequestLabels {
    /// The labels of a request with `status` that no provider answered.
    pub fn unrouted(status: u16) -> Self {
        Self {
            status,
            provider: Arc::clone(&NONE),
            model: Arc::clone(&NONE),
        }
    }
}

/// The provider and model labels of the requests an attempt answers (see
/// [`ProviderMetrics::answering`]); the status is known at the end.
#[derive(Debug, Clone)]
pub struct Answering(Arc<Answered>);

/// The requests of one provider and model label: most end with `200`, whose counter is
/// kept once found, so counting one is an atomic add, not a lookup in the family (a
/// lock and a hash of the labels).
#[derive(Debug)]
struct Answered {
    provider: Arc<String>,
    model: Arc<String>,
    requests: Family<RequestLabels, Counter>,
    ok: OnceLock<Counter>,
}

impl Answering {
    /// The labels of the request, ended with `status`.
    pub fn with_status(&self, status: u16) -> RequestLabels {
        RequestLabels {
            status,
            provider: Arc::clone(&self.0.provider),
            model: Arc::clone(&self.0.model),
        }
    }

    /// Counts the request, ended with `status`.
    pub fn count(&self, status: u16) {
        let a = &self.0;
        if status == 200 {
            let ok =
                a.ok.get_or_init(|| a.requests.get_or_create(&self.with_status(200)).clone());
            ok.inc();
        } else {
            a.requests.get_or_create(&self.with_status(status)).inc();
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    pub provider: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    pub provider: String,
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CutLabels {
    pub provider: String,
    /// What ended the stream ([`StreamCut::label`]).
    pub cut: &'static str,
    /// `before_commit` (the attempt failed over, unseen) or `after_commit` (the client
    /// got the terminal frames).
    pub phase: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BreakerLabels {
    pub provider: String,
    pub state: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CooldownLabels {
    pub connection: String,
    /// The error type, or the terminal state entered.
    pub reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnectionLabels {
    pub connection: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectionLabels {
    pub connection: String,
    pub code: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OauthLabels {
    pub connection: String,
    /// `refreshed`, `failed` or `expired` (the failure that made the connection so).
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TimeoutLabels {
    /// `header`, `body` or `idle`.
    pub phase: &'static str,
}

/// The edge's metrics (SPEC O5): open client connections, connections refused over
/// `server.max_connections`, and client timeouts by phase.
#[derive(Debug, Clone)]
pub struct EdgeMetrics {
    pub open: Gauge,
    pub refused: Counter,
    pub header_timeouts: Counter,
    pub body_timeouts: Counter,
    pub idle_timeouts: Counter,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UnmeteredLabels {
    pub pool: String,
    /// One of a fixed set (`UnmeteredReason`).
    pub reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreInfoLabels {
    pub driver: &'static str,
    pub reason: &'static str,
}

/// Quota-store metrics (SPEC Q4, Q6). `pool` labels are configured pool ids.
#[derive(Debug, Clone, Default)]
pub struct QuotaMetrics {
    unmetered: Family<UnmeteredLabels, Counter>,
    unpriced: Family<PoolLabels, Counter>,
    store_info: Family<StoreInfoLabels, Gauge>,
    /// Reservations held by requests in flight: back to 0 when nothing is in flight, or
    /// a path leaks one.
    reservations_open: Gauge,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub pool: String,
}

impl QuotaMetrics {
    /// A request took a reservation.
    pub fn reservation_opened(&self) {
        self.reservations_open.inc();
    }

    /// A request's reservation was settled or released.
    pub fn reservation_closed(&self) {
        self.reservations_open.dec();
    }

    /// Reservations held now.
    pub fn reservations_open(&self) -> i64 {
        self.reservations_open.get()
    }

    /// Counts a request let through without a reservation.
    pub fn unmetered(&self, pool: &str, reason: &'static str) {
        self.unmetered
            .get_or_create(&UnmeteredLabels {
                pool: pool.to_owned(),
                reason,
            })
            .inc();
    }

    /// Counts a request refused on a `usd` pool because its model has no price.
    pub fn unpriced(&self, pool: &str) {
        self.unpriced
            .get_or_create(&PoolLabels {
                pool: pool.to_owned(),
            })
            .inc();
    }

    /// Shows the active counter store and why it is the one: one series at 1.
    pub fn store(&self, driver: &'static str, reason: &'static str) {
        self.store_info.clear();
        self.store_info
            .get_or_create(&StoreInfoLabels { driver, reason })
            .set(1);
    }
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Queue wait buckets: 1 ms to ~65 s, doubling, like upstream latency.
fn wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// Concurrency-gate metrics (SPEC R7, R10), by connection: only requests that had to
/// wait or were refused touch them, so the uncontended path never looks a label up.
#[derive(Debug, Clone)]
pub struct GateMetrics {
    depth: Family<ConnectionLabels, Gauge>,
    wait: HistogramFamily<ConnectionLabels>,
    rejections: Family<RejectionLabels, Counter>,
}

impl GateMetrics {
    fn labels(connection: &str) -> ConnectionLabels {
        ConnectionLabels {
            connection: connection.to_owned(),
        }
    }

    /// Requests waiting for the connection's slots.
    pub fn queue_depth(&self, connection: &str) -> Gauge {
        self.depth.get_or_create(&Self::labels(connection)).clone()
    }

    /// Time requests waited for the connection's slots (granted or not).
    pub fn wait_seconds(&self, connection: &str) -> Histogram {
        self.wait.get_or_create(&Self::labels(connection)).clone()
    }

    /// Counts a refusal by its code.
    pub fn rejected(&self, connection: &str, code: &'static str) {
        self.rejections
            .get_or_create(&RejectionLabels {
                connection: connection.to_owned(),
                code,
            })
            .inc();
    }
}

/// Pre-resolved metric handles of one provider (see [`Metrics::for_provider`]).
#[derive(Debug, Clone)]
pub struct ProviderMetrics {
    pub latency: Histogram,
    pub success: Counter,
    /// The provider's name, its declared models' request labels, and the labels of the
    /// models it does not declare ([`OTHER_MODEL_LABEL`]).
    provider: Arc<String>,
    models: Vec<Answering>,
    other: Answering,
    attempts: Family<AttemptLabels, Counter>,
    cuts: Family<CutLabels, Counter>,
}

impl ProviderMetrics {
    /// The labels of a request this provider answers with `model`: the model's name
    /// when the provider declares it, otherwise [`OTHER_MODEL_LABEL`] (a provider may
    /// pass any name through; the label set stays bounded).
    pub fn answering(&self, model: &str) -> Answering {
        self.models
            .iter()
            .find(|m| m.0.model.as_str() == model)
            .unwrap_or(&self.other)
            .clone()
    }

    /// Counts a failed attempt by its outcome label (successes count in `success`).
    pub fn count_attempt(&self, outcome: &'static str) {
        self.attempts
            .get_or_create(&AttemptLabels {
                provider: String::clone(&self.provider),
                outcome,
            })
            .inc();
    }

    /// Counts a stream ended by `cut`, before or after it reached the client.
    pub fn count_cut(&self, cut: StreamCut, committed: bool) {
        self.cuts
            .get_or_create(&CutLabels {
                provider: String::clone(&self.provider),
                cut: cut.label(),
                phase: if committed {
                    "after_commit"
                } else {
                    "before_commit"
                },
            })
            .inc();
    }
}

/// Upstream latency buckets: 1 ms to ~65 s, doubling. LLM calls span milliseconds (mock,
/// cached) to a minute (long completions); doubling keeps the bucket count small.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// All metrics, registered once at start.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub in_flight: Gauge,
    pub upstream_latency: HistogramFamily<ProviderLabels>,
    pub upstream_attempts: Family<AttemptLabels, Counter>,
    pub stream_cuts: Family<CutLabels, Counter>,
    pub log_dropped: Counter,
    /// Breaker state changes by provider and new state.
    pub breaker_transitions: Family<BreakerLabels, Counter>,
    /// Cooldowns set and terminal states entered, by connection and reason.
    pub cooldowns: Family<CooldownLabels, Counter>,
    /// OAuth token refreshes by connection and outcome (SPEC R4).
    pub oauth_refreshes: Family<OauthLabels, Counter>,
    pub gates: GateMetrics,
    pub edge: EdgeMetrics,
    pub quota: QuotaMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let in_flight = Gauge::default();
        let upstream_latency: HistogramFamily<ProviderLabels> =
            Family::new_with_constructor(latency_histogram);
        let upstream_attempts = Family::<AttemptLabels, Counter>::default();
        let stream_cuts = Family::<CutLabels, Counter>::default();
        let log_dropped = Counter::default();
        let breaker_transitions = Family::<BreakerLabels, Counter>::default();
        let cooldowns = Family::<CooldownLabels, Counter>::default();
        let oauth_refreshes = Family::<OauthLabels, Counter>::default();
        let gates = GateMetrics {
            depth: Family::default(),
            wait: Family::new_with_constructor(wait_histogram),
            rejections: Family::default(),
        };
        let timeouts = Family::<TimeoutLabels, Counter>::default();
        let timeout = |phase| timeouts.get_or_create(&TimeoutLabels { phase }).clone();
        let edge = EdgeMetrics {
            open: Gauge::default(),
            refused: Counter::default(),
            header_timeouts: timeout("header"),
            body_timeouts: timeout("body"),
            idle_timeouts: timeout("idle"),
        };
        registry.register(
            names::CLIENT_CONNECTIONS,
            "Client connections open",
            edge.open.clone(),
        );
        registry.register(
            names::CLIENT_CONNECTIONS_REFUSED,
            "Client connections closed at once because server.max_connections were open",
            edge.refused.clone(),
        );
        registry.register(
            names::CLIENT_TIMEOUTS,
            "Client connections drained for a late request head or idleness, and requests cut for a late body, by phase",
            timeouts,
        );
        let quota = QuotaMetrics::default();
        registry.register(
            names::QUOTA_UNMETERED,
            "Requests let through without a quota reservation, by pool and reason",
            quota.unmetered.clone(),
        );
        registry.register(
            names::QUOTA_UNPRICED,
            "Requests refused on a pool that meters usd because their model has no price, by pool",
            quota.unpriced.clone(),
        );
        registry.register(
            names::QUOTA_RESERVATIONS_OPEN,
            "Quota reservations held by requests in flight",
            quota.reservations_open.clone(),
        );
        registry.register(
            names::QUOTA_STORE_INFO,
            "The active quota counter store (1) and why it is the one",
            quota.store_info.clone(),
        );
        registry.register(
            names::GATE_QUEUE_DEPTH,
            "Requests waiting for a connection's concurrency slots",
            gates.depth.clone(),
        );
        registry.register(
            names::GATE_WAIT,
            "Time requests waited for concurrency slots, by connection",
            gates.wait.clone(),
        );
        registry.register(
            names::GATE_REJECTIONS,
            "Requests refused by a concurrency gate or the request queue, by connection and code",
            gates.rejections.clone(),
        );
        registry.register(
            names::BREAKER_TRANSITIONS,
            "Provider circuit-breaker state changes, by provider and new state",
            breaker_transitions.clone(),
        );
        registry.register(
            names::COOLDOWNS,
            "Connection cooldowns set and terminal states entered, by connection and reason",
            cooldowns.clone(),
        );
        registry.register(
            names::REQUESTS,
            "Client requests finished, by HTTP status, provider and model",
            requests.clone(),
        );
        registry.register(
            names::IN_FLIGHT,
            "Client requests currently being served (streams count until they end)",
            in_flight.clone(),
        );
        registry.register(
            names::UPSTREAM_LATENCY,
            "Time from sending an upstream request to its response headers",
            upstream_latency.clone(),
        );
        registry.register(
            names::UPSTREAM_ATTEMPTS,
            "Upstream attempts by provider and outcome",
            upstream_attempts.clone(),
        );
        registry.register(
            names::STREAM_CUTS,
            "Streams ended by a watchdog deadline, a break or an error event, by provider, cut and whether the client had seen the stream",
            stream_cuts.clone(),
        );
        registry.register(
            names::LOG_DROPPED,
            "Request-log rows dropped because the write buffer was full",
            log_dropped.clone(),
        );
        registry.register(
            names::OAUTH_REFRESHES,
            "OAuth subscription token refreshes, by connection and outcome (refreshed, failed, expired)",
            oauth_refreshes.clone(),
        );
        Self {
            registry,
            requests,
            in_flight,
            upstream_latency,
            upstream_attempts,
            stream_cuts,
            log_dropped,
            breaker_transitions,
            cooldowns,
            oauth_refreshes,
            gates,
            edge,
            quota,
        }
    }

    /// Handles for one provider's per-attempt metrics, and the labels of its requests
    /// (`models`: those it declares), resolved once per configuration snapshot so the
    /// request path neither looks labels up nor copies them.
    pub fn for_provider(&self, provider: &str, models: &[String]) -> ProviderMetrics {
        let provider_label = ProviderLabels {
            provider: provider.to_owned(),
        };
        let provider_name = Arc::new(provider.to_owned());
        let answering = |model| {
            Answering(Arc::new(Answered {
                provider: Arc::clone(&provider_name),
                model,
                requests: self.requests.clone(),
                ok: OnceLock::new(),
            }))
        };
        ProviderMetrics {
            latency: self.upstream_latency.get_or_create(&provider_label).clone(),
            success: self
                .upstream_attempts
                .get_or_create(&AttemptLabels {
                    provider: provider.to_owned(),
                    outcome: "success",
                })
                .clone(),
            provider: Arc::clone(&provider_name),
            models: models
                .iter()
                .map(|m| answering(Arc::new(m.clone())))
                .collect(),
            other: answering(Arc::clone(&OTHER)),
            attempts: self.upstream_attempts.clone(),
            cuts: self.stream_cuts.clone(),
        }
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requests_labels_name_a_declared_model_and_other_for_the_rest() {
        let metrics = Metrics::new();
        let alpha = metrics.for_provider("alpha", &["mock-small".to_owned()]);
        let label = |l: RequestLabels| (l.status, l.provider.to_string(), l.model.to_string());
        assert_eq!(
            label(alpha.answering("mock-small").with_status(200)),
            (200, "alpha".into(), "mock-small".into())
        );
        assert_eq!(
            label(alpha.answering("anything/else").with_status(502)),
            (502, "alpha".into(), OTHER_MODEL_LABEL.into())
        );
        assert_eq!(
            label(RequestLabels::unrouted(401)),
            (401, NONE_LABEL.into(), NONE_LABEL.into())
        );
        // A request's labels share the snapshot's names: no copy per request.
        let (a, b) = (alpha.answering("mock-small"), alpha.answering("mock-small"));
        assert!(Arc::ptr_eq(&a.0, &b.0));
    }

    #[test]
    fn a_request_is_counted_under_its_labels_and_status() {
        let metrics = Metrics::new();
        let alpha = metrics.for_provider("alpha", &["mock-small".to_owned()]);
        let count = |status, model: &str| {
            metrics
                .requests
                .get_or_create(&alpha.answering(model).with_status(status))
                .get()
        };
        alpha.answering("mock-small").count(200);
        alpha.answering("mock-small").count(200);
        alpha.answering("mock-small").count(502);
        alpha.answering("other/model").count(200);
        assert_eq!(count(200, "mock-small"), 2);
        assert_eq!(count(502, "mock-small"), 1);
        assert_eq!(count(200, "other/model"), 1);
        // A snapshot built again (a configuration change) counts into the same series.
        let again = metrics.for_provider("alpha", &["mock-small".to_owned()]);
        again.answering("mock-small").count(200);
        assert_eq!(count(200, "mock-small"), 3);
    }
}
