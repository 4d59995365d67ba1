//! The application state handlers share, as separate parts: the configuration in force
//! ([`LiveConfig`]: the snapshot and what it is rebuilt from), the runtime state
//! ([`Runtime`]), telemetry ([`Telemetry`]), the store and the clock. Stages take the
//! parts they use; this module wires them together at start and on configuration
//! changes, and decides nothing.

use crate::clock::Clock;
use crate::persist::StateWriter;
use crate::runtime::gate::Gates;
use crate::runtime::quota::{QuotaEngine, StoreReason};
use crate::runtime::resilience::Resilience;
use crate::runtime::Runtime;
use crate::snapshot::{LiveConfig, Snapshot, SnapshotError};
use crate::telemetry::metrics::Metrics;
use crate::telemetry::reqlog::{LogWriter, RequestLog};
use crate::telemetry::series::{MINUTES_KEPT, MINUTE_MS};
use crate::telemetry::Telemetry;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use switchyard_core::apikey::KeyHash;
use switchyard_core::routing::lease;
use switchyard_core::settings::{redact_url, Layers, QuotaSettings};
use switchyard_model::ConfigRows;
use switchyard_store::redis_counters::{RedisCounters, RedisStoreError};
use switchyard_store::{LogQueries, Store, StoreError};
use tokio::task::JoinHandle;

/// How often a gateway whose quota counters fell back to memory tries Redis again. One
/// connection attempt a second is nothing for Redis, and a Redis that comes up is used
/// within about a second.
const REDIS_RETRY_INTERVAL: Duration = Duration::from_secs(1);

/// Why the state could not be built, or a configuration change applied.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Snapshot(#[from] SnapshotError),
    /// A store call on the blocking pool panicked or was cancelled.
    #[error("a store task failed: {0}")]
    Task(String),
    /// `quotaStore.requireRedis` is set and Redis cannot be used.
    #[error("quota store: {0}")]
    QuotaStore(String),
}

/// Everything handlers share.
#[derive(Debug)]
pub struct AppState {
    pub config: Arc<LiveConfig>,
    pub runtime: Arc<Runtime>,
    pub telemetry: Arc<Telemetry>,
    pub store: Arc<Store>,
    /// The request log's reads (the same database as `store` today).
    pub logs: Arc<dyn LogQueries>,
    pub clock: Arc<dyn Clock>,
    /// OAuth token refreshes in flight (SPEC R4).
    pub oauth: crate::oauth::Refresher,
    rotation: AtomicUsize,
    request_seq: AtomicU64,
    request_prefix: u32,
    /// Set when the shutdown grace period expired and remaining requests are being cut.
    pub cutting: Arc<AtomicBool>,
    pub started_at_ms: u64,
}

/// Background writers and tasks that must be stopped or flushed on shutdown.
#[derive(Debug)]
pub struct Writers {
    pub log: LogWriter,
    pub state: StateWriter,
    /// The quota engine, whose queued Redis settlements are drained.
    pub quota: Arc<QuotaEngine>,
    /// Retries Redis while the quota counters are on the fallback.
    pub redis_retry: Option<JoinHandle<()>>,
}

impl Writers {
    /// Stops retrying Redis, applies the queued quota settlements (waiting at most
    /// `settle_within`), flushes pending runtime state and request-log rows, then stops
    /// the writers.
    pub async fn finish(self, settle_within: Duration) {
        if let Some(retry) = self.redis_retry {
            retry.abort();
        }
        self.quota.finish(settle_within).await;
        self.state.finish().await;
        self.log.finish().await;
    }
}

impl AppState {
    /// Loads the configuration and builds the first snapshot. Returns the state and the
    /// request-log writer (to be finished on shutdown).
    pub async fn new(
        store: Arc<Store>,
        clock: Arc<dyn Clock>,
        layers: Layers,
        configured_admin: Option<KeyHash>,
    ) -> Result<(Arc<Self>, Writers), StateError> {
        let rows = load_rows(&store).await?;
        let metrics = Metrics::new();
        let snapshot = Snapshot::build(&rows, &layers, &metrics)?;
        let (quota, retry) = quota_engine(&snapshot.settings.quota, &clock, &metrics).await?;
        let quota = Arc::new(quota);
        if quota.driver() == "sqlite" {
            let now = clock.now_ms();
            let consumption = blocking(&store, move |s| s.load_consumption(now)).await?;
            quota.load(consumption, &snapshot.quota, now);
        }
        let resilience = Resilience::new(&metrics);
        let (breakers, health) = blocking(&store, Store::load_resilience).await?;
        resilience.load(breakers, health);
        // Each connection's last known egress (SPEC R14), from the request log.
        let since = clock
            .now_ms()
            .saturating_sub(switchyard_core::resilience::rules::EGRESS_WINDOW_MS);
        // Best effort: without it, buckets fill again as attempts are made.
        let logs: Arc<dyn LogQueries> = Arc::clone(&store) as _;
        match Arc::clone(&logs).egress(since).await {
            Ok(egress) => resilience.load_egress(&snapshot.catalog, egress),
            Err(e) => {
                tracing::warn!(error = %e, "Could not read the connections' last egress from the request log; egress buckets start empty.")
            }
        }
        let affinity = crate::runtime::affinity::Affinity::default();
        let ttl = snapshot.settings.session_affinity_ttl_ms;
        let pins_since = clock.now_ms().saturating_sub(ttl);
        let most = switchyard_core::routing::affinity::MAX_PINS;
        affinity.load(blocking(&store, move |s| s.load_pins(pins_since, most)).await?);
        let leases = Arc::new(crate::runtime::leases::Leases::new(Arc::clone(&store)));
        let reload = Arc::clone(&leases);
        let now = clock.now_ms();
        blocking(&store, move |_| reload.reload(now)).await?;
        // Routing's service stats (SPEC R19) from the newest logged requests; best effort.
        let stats = crate::runtime::stats::Stats::default();
        match Arc::clone(&logs).outcomes(SEEDED_OUTCOMES).await {
            Ok(rows) => stats.seed(&rows),
            Err(e) => {
                tracing::warn!(error = %e, "Could not read recent requests from the request log; routing's service stats start empty.")
            }
        }
        let last_good = crate::runtime::last_good::LastGood::default();
        last_good.load(blocking(&store, Store::load_last_good).await?);
        let gates = Gates::new(metrics.gates.clone());
        let hour_ago = clock.now_ms().saturating_sub(MINUTES_KEPT * MINUTE_MS);
        let recent = Arc::clone(&logs).series(hour_ago, MINUTE_MS).await?;
        let (log, log_writer) = RequestLog::start(
            Arc::clone(&store) as _,
            metrics.log_dropped.clone(),
            &recent,
        );
        let config = Arc::new(LiveConfig::new(snapshot, layers, configured_admin));
        let runtime = Arc::new(Runtime {
            resilience,
            gates,
            quota,
            walls: Default::default(),
            affinity,
            leases,
            turns: Default::default(),
            stats,
            last_good,
            relay: Default::default(),
        });
        let state = Arc::new(Self {
            config: Arc::clone(&config),
            runtime: Arc::clone(&runtime),
            telemetry: Arc::new(Telemetry { metrics, log }),
            store: Arc::clone(&store),
            logs,
            started_at_ms: clock.now_ms(),
            clock: Arc::clone(&clock),
            oauth: crate::oauth::Refresher::default(),
            rotation: AtomicUsize::new(0),
            request_seq: AtomicU64::new(0),
            request_prefix: rand::random(),
            cutting: Arc::new(AtomicBool::new(false)),
        });
        let redis_retry = retry.map(|(url, prefix)| {
            tokio::spawn(retry_redis(Arc::clone(&runtime.quota), url, prefix))
        });
        let writers = Writers {
            log: log_writer,
            state: StateWriter::start(runtime.clone(), config, store, clock),
            quota: Arc::clone(&runtime.quota),
            redis_retry,
        };
        Ok((state, writers))
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.config.snapshot()
    }

    /// Rebuilds the snapshot from the database and swaps it in.
    pub async fn reload(&self) -> Result<(), StateError> {
        let rows = load_rows(&self.store).await?;
        Ok(self.install(&rows)?)
    }

    /// Builds a snapshot from `rows` and swaps it in — unless a snapshot of a newer
    /// configuration version got there first (two reloads racing), which is kept. The
    /// runtime state of what the configuration no longer has is dropped.
    pub fn install(&self, rows: &ConfigRows) -> Result<(), SnapshotError> {
        let config = &self.config;
        let next = Arc::new(Snapshot::build(
            rows,
            &config.layers,
            &self.telemetry.metrics,
        )?);
        let previous = config.snapshot();
        let live = config.swap_in(next);
        // New OAuth tokens (a refresh or an import, by any process) end what a refused
        // token caused (SPEC R4).
        for conn in live.catalog.connections() {
            let Some(now) = live.upstream_of(&conn.id).filter(|u| u.grant.is_some()) else {
                continue;
            };
            if previous
                .upstream_of(&conn.id)
                .is_none_or(|before| before.fields != now.fields)
            {
                self.runtime.resilience.tokens_renewed(&conn.id);
            }
        }
        let keys: std::collections::HashSet<&str> =
            live.catalog.keys().map(|k| k.id.as_str()).collect();
        let runtime = &self.runtime;
        runtime.quota.prune(&live.quota, |k| keys.contains(k));
        runtime
            .gates
            .retain(|id| live.catalog.connection(id).is_some());
        runtime.resilience.prune(&live.catalog);
        // A session pinned to a connection or key that is gone is routed afresh.
        runtime.affinity.retain(|pin| {
            keys.contains(pin.key_id.as_str()) && live.catalog.connection(&pin.connection).is_some()
        });
        runtime
            .turns
            .retain(|name| live.catalog.combo(name).is_some());
        runtime
            .stats
            .retain(|id| live.catalog.connection(id).is_some());
        runtime.last_good.retain(|combo, conn| {
            live.catalog.combo(combo).is_some() && live.catalog.connection(conn).is_some()
        });
        // A lease whose key may no longer hold it, or whose connection is gone, ends.
        runtime.leases.invalidate(self.clock.now_ms(), |l| {
            let key = live.catalog.keys().find(|k| k.id == l.key_id);
            let kept = key.is_some_and(|k| {
                !k.revoked && lease::permitted(k).is_ok() && k.may_use_connection(&l.connection)
            });
            !kept
                || live
                    .catalog
                    .connection(&l.connection)
                    .is_none_or(|c| !c.enabled)
        });
        runtime.walls.retain(|id, account| {
            live.catalog.connection(id).is_some_and(|c| {
                live.upstreams
                    .get(c.index)
                    .and_then(|u| u.wall.as_ref())
                    .is_some_and(|w| w.account == account)
            })
        });
        Ok(())
    }

    /// A counter that spreads requests over a provider's connections.
    pub fn next_rotation(&self) -> usize {
        self.rotation.fetch_add(1, Ordering::Relaxed)
    }

    /// A process-unique request id: `req_`, a random per-process prefix and a sequence
    /// number, 8 + 12 hex digits.
    pub fn next_request_id(&self) -> String {
        let n = self.request_seq.fetch_add(1, Ordering::Relaxed);
        let mut id = String::with_capacity(24);
        id.push_str("req_");
        push_hex(&mut id, u64::from(self.request_prefix), 8);
        push_hex(&mut id, n, 12);
        id
    }
}

/// Logged requests routing's service stats are seeded from at start: enough for every
/// pair's means to settle (they weigh the last few), read in one query.
const SEEDED_OUTCOMES: usize = 10_000;

/// The quota engine on the configured counter store (SPEC Q4): the `quotaStore.driver`
/// setting (database → `QUOTA_STORE_DRIVER` → `sqlite`). Redis selected but unset,
/// invalid or unreachable falls back to memory (persisted to SQLite) with a warning —
/// or, with `quotaStore.requireRedis`, fails the start. When Redis was only unreachable,
/// the URL and prefix to keep retrying come back too.
async fn quota_engine(
    q: &QuotaSettings,
    clock: &Arc<dyn Clock>,
    metrics: &Metrics,
) -> Result<(QuotaEngine, Option<(String, String)>), StateError> {
    let (clock, metrics) = (Arc::clone(clock), metrics.quota.clone());
    if q.store_driver != "redis" {
        return Ok((QuotaEngine::new(clock, metrics), None));
    }
    let shown = redact_url(&q.redis_url);
    let refuse = |what: String| {
        if q.require_redis {
            Err(StateError::QuotaStore(format!(
                "{what}, and quotaStore.requireRedis (QUOTA_STORE_REQUIRE_REDIS) forbids falling back to SQLite"
            )))
        } else {
            Ok(())
        }
    };
    if q.redis_url.is_empty() {
        refuse(
            "quotaStore.driver is redis but no Redis URL is set (QUOTA_STORE_REDIS_URL)".to_owned(),
        )?;
        tracing::warn!("quotaStore.driver is redis but no Redis URL is set (QUOTA_STORE_REDIS_URL); keeping quota counters in SQLite.");
        return Ok((
            QuotaEngine::fallback(clock, metrics, StoreReason::NoUrl),
            None,
        ));
    }
    match RedisCounters::connect(&q.redis_url, &q.redis_prefix).await {
        Ok(counters) => {
            tracing::info!(url = %shown, prefix = %q.redis_prefix, "Quota counters live in Redis.");
            Ok((QuotaEngine::with_redis(clock, metrics, counters), None))
        }
        Err(RedisStoreError::InvalidUrl) => {
            refuse(format!("the Redis URL {shown} is invalid"))?;
            tracing::warn!(url = %shown, "The Redis URL for quota counters is invalid; keeping them in SQLite.");
            Ok((
                QuotaEngine::fallback(clock, metrics, StoreReason::InvalidUrl),
                None,
            ))
        }
        Err(e) => {
            refuse(format!("Redis at {shown} is unreachable ({e})"))?;
            tracing::warn!(url = %shown, error = %e, "Redis for quota counters is unreachable; keeping them in SQLite and retrying in the background.");
            Ok((
                QuotaEngine::fallback(clock, metrics, StoreReason::Unreachable),
                Some((q.redis_url.clone(), q.redis_prefix.clone())),
            ))
        }
    }
}

/// Tries Redis every [`REDIS_RETRY_INTERVAL`] until it answers, then moves the engine's
/// counters there. Aborted at shutdown.
async fn retry_redis(quota: Arc<QuotaEngine>, url: String, prefix: String) {
    let mut failures: u64 = 0;
    loop {
        tokio::time::sleep(REDIS_RETRY_INTERVAL).await;
        match RedisCounters::connect(&url, &prefix).await {
            Ok(counters) => {
                quota.switch_to_redis(counters).await;
                return;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                if failures.is_power_of_two() {
                    tracing::warn!(url = %redact_url(&url), error = %e, attempts = failures, "Redis for quota counters is still unreachable; counters stay in SQLite.");
                }
            }
        }
    }
}

/// Appends the low `digits` hex digits of `v`.
fn push_hex(out: &mut String, v: u64, digits: u32) {
    for i in (0..digits).rev() {
        let nibble = (v >> (i * 4)) & 0xf;
        out.push(char::from_digit(u32::try_from(nibble).unwrap_or(0), 16).unwrap_or('0'));
    }
}

/// Reads all configuration rows on the blocking pool.
pub async fn load_rows(store: &Arc<Store>) -> Result<ConfigRows, StateError> {
    blocking(store, Store::load_config).await
}

/// Runs a store call on the blocking pool.
pub async fn blocking<T: Send + 'static>(
    store: &Arc<Store>,
    f: impl FnOnce(&Store) -> switchyard_store::Result<T> + Send + 'static,
) -> Result<T, StateError> {
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || f(&store))
        .await
        .map_err(|e| StateError::Task(e.to_string()))?
        .map_err(StateError::Store)
}
