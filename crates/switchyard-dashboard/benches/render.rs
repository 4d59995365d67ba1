//! Criterion benchmark of the dashboard's heaviest pages over a realistic store (issue
//! 14: a page renders in under 50 ms with 100 pools and 10 000 log rows). A SQLite
//! file store, opened as the gateway opens it, is seeded with 10 000 request-log rows
//! spread over the last hour (ten keys, five providers, one request in twenty an
//! error), then each benchmark reads what the page's handler reads and renders its
//! `<main>`:
//!
//! - `requests (key + errors)`: `Store::query_logs` for one key's errors of the last
//!   hour (a page of 50 plus one, as `services::logs::search` asks; 500 rows match),
//!   then the request log page;
//! - `requests (no match)`: a model no row has (once every row was read; the model
//!   indexes now find that nothing matches);
//! - `requests (no filter)`: the newest 50 rows, then the page;
//! - `overview`: `Store::log_series` over the hour (all 10 000 rows, per minute), then
//!   the overview with its five charts and its newest 20 rows;
//! - `quota share`: the pools list with 100 pools, each on its own connection with
//!   two dimensions and four keys' usage (what the handler reads from the quota
//!   engine, built here as the engine reports it).

#![expect(
    clippy::expect_used,
    reason = "a benchmark that cannot set up must stop, not measure nothing"
)]

use criterion::{criterion_group, criterion_main, Criterion};
use std::collections::HashMap;
use std::hint::black_box;
use switchyard_core::quota::burn::BurnReport;
use switchyard_core::quota::decide::{Mode, Policy, Unit};
use switchyard_core::quota::plan::Dimension;
use switchyard_core::quota::pool::{AllocationInput, DimensionInput};
use switchyard_core::quota::window::Window;
use switchyard_dashboard::bench_api::{
    overview, quota_share, requests, Choice, Choices, CreateForm, Filters, Overview,
};
use switchyard_gateway::bootstrap;
use switchyard_gateway::runtime::quota::views::{DimensionUsage, KeyUsage, PoolUsage};
use switchyard_gateway::runtime::quota::StoreStatus;
use switchyard_gateway::services::logs::{LogPage, LogStats};
use switchyard_gateway::services::model::{LogQuery, LogRow, LogSize, StatusFilter};
use switchyard_gateway::services::quota::PoolView;
use switchyard_gateway::services::system::{Health, InFlight};
use switchyard_test_support::Config;

/// The benchmark's "now" (Unix milliseconds): rows are seeded relative to it.
const NOW_MS: u64 = 1_764_606_653_000;

/// Log rows seeded.
const ROWS: u64 = 10_000;

const KEYS: u64 = 10;
const PROVIDERS: u64 = 5;

fn row(i: u64) -> LogRow {
    let error = i.is_multiple_of(20);
    LogRow {
        // Oldest first, evenly over the last hour (row ids follow time, as in the log).
        ts: NOW_MS - (ROWS - i) * 3_600_000 / ROWS,
        request_id: format!("req-{i:08}"),
        key_id: Some(format!("k{}", i % KEYS)),
        requested_model: "fast".to_owned(),
        provider: Some(format!("provider-{}", i % PROVIDERS)),
        connection_id: Some(format!("provider-{}-1", i % PROVIDERS)),
        model: Some("model-small".to_owned()),
        status: if error { 429 } else { 200 },
        error_code: error.then(|| "rate_limited".to_owned()),
        stream: i.is_multiple_of(2),
        client_format: "openai".to_owned(),
        attempts: 1,
        latency_ms: 120 + i % 300,
        ttfb_ms: Some(40 + i % 50),
        prompt_tokens: Some(500 + i % 100),
        completion_tokens: Some(80 + i % 40),
        egress_ip: None,
        failed_attempts: Vec::new(),
        route: None,
    }
}

fn health() -> Health {
    Health {
        status: "ok",
        reasons: Vec::new(),
        database: "ok",
        version: "bench",
        uptime_ms: 3_600_000,
        config_version: 1,
        providers: PROVIDERS as usize,
        connections: PROVIDERS as usize,
        connections_enabled: PROVIDERS as usize,
        combos: 1,
        quota_pools: 0,
        quota_store: "sqlite",
        quota_store_status: StoreStatus {
            driver: "sqlite",
            requested: "sqlite",
            state: "ok",
            reason: "selected",
            breaker: None,
            last_probe: None,
        },
        breakers: Vec::new(),
        terminal_connections: Vec::new(),
    }
}

/// Pools on the quota-share list.
const POOLS: usize = 100;

/// Keys allocated in each pool.
const POOL_KEYS: usize = 4;

/// Pool `i`: its own connection, two dimensions, [`POOL_KEYS`] equal allocations.
fn pool(i: usize) -> PoolView {
    let dims = [
        Dimension::new(Unit::Requests, Window::Hourly, 1000.0),
        Dimension::new(Unit::Tokens, Window::Daily, 2_000_000.0),
    ];
    PoolView {
        id: format!("pool-{i:03}"),
        name: format!("Team {i}"),
        connection_ids: vec![format!("conn-{i:03}")],
        dimensions: vec![
            DimensionInput {
                unit: "requests".to_owned(),
                window: "hourly".to_owned(),
                limit: 1000.0,
            },
            DimensionInput {
                unit: "tokens".to_owned(),
                window: "daily".to_owned(),
                limit: 2_000_000.0,
            },
        ],
        effective_dimensions: dims.to_vec(),
        allocations: (0..POOL_KEYS)
            .map(|k| AllocationInput {
                api_key_id: format!("k{k}"),
                allocation_weight: 1.0,
                cap_value: None,
                cap_unit: None,
                policy: "hard".to_owned(),
            })
            .collect(),
    }
}

/// Pool `i`'s usage: each key has used a different part of its fair share.
fn usage(i: usize) -> PoolUsage {
    let dimension = |key: &str, unit, window, limit: f64| {
        let fair = limit / POOL_KEYS as f64;
        let keys: Vec<KeyUsage> = (0..POOL_KEYS)
            .map(|k| {
                let consumed = fair * (k as f64 + 1.0) / 3.0;
                KeyUsage {
                    api_key_id: format!("k{k}"),
                    allocated: true,
                    policy: Policy::Hard,
                    allocation_weight: 1.0,
                    consumed,
                    fair_share: fair,
                    surplus: fair - consumed,
                    borrowing: consumed > fair,
                    cap: None,
                    burn_rate: BurnReport {
                        tokens_per_second: 0.5,
                        time_to_exhaustion_ms: Some(3_600_000),
                    },
                }
            })
            .collect();
        let used: f64 = keys.iter().map(|k| k.consumed).sum();
        DimensionUsage {
            key: key.to_owned(),
            unit,
            window,
            limit,
            global_used: used,
            used_fraction: used / limit,
            provider_signal: None,
            mode: if used / limit > 0.8 {
                Mode::Strict
            } else {
                Mode::Lenient
            },
            keys,
        }
    };
    PoolUsage {
        pool_id: format!("pool-{i:03}"),
        at: NOW_MS,
        dimensions: vec![
            dimension("requests:hourly", Unit::Requests, "hourly", 1000.0),
            dimension("tokens:daily", Unit::Tokens, "daily", 2_000_000.0),
        ],
    }
}

/// A page of `limit` rows as `services::logs::search` makes it from `limit + 1`.
fn page_of(mut rows: Vec<(i64, LogRow)>, limit: usize) -> LogPage {
    let next = if rows.len() > limit {
        rows.truncate(limit);
        rows.last().map(|(id, _)| *id)
    } else {
        None
    };
    LogPage { rows, next }
}

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = Config::new().resolve(dir.path(), &[]);
    let store = bootstrap::open_store(&config).expect("the store");
    let rows: Vec<LogRow> = (0..ROWS).map(row).collect();
    for chunk in rows.chunks(1000) {
        store.insert_log_batch(chunk).expect("the log rows");
    }
    let choices = Choices {
        keys: (0..KEYS)
            .map(|k| (format!("k{k}"), format!("key {k}")))
            .collect(),
        providers: (0..PROVIDERS).map(|p| format!("provider-{p}")).collect(),
    };

    let filtered = Filters::parse("key=k0&status=errors&last=1h").expect("the filters");
    c.bench_function(
        "requests: query_logs (key + errors + last hour) + render, 10 000 rows",
        |b| {
            b.iter(|| {
                let q = LogQuery {
                    key_id: Some("k0".to_owned()),
                    status: Some(StatusFilter::Errors),
                    since_ms: Some(NOW_MS - 3_600_000),
                    limit: 51,
                    ..LogQuery::default()
                };
                let found = store.query_logs(&q).map(|r| page_of(r, 50));
                black_box(found.map(|p| requests(&filtered, &choices, Ok(&p))))
            });
        },
    );
    let nothing = Filters::parse("model=no-such-model").expect("the filters");
    c.bench_function(
        "requests: query_logs (no match: every row read) + render, 10 000 rows",
        |b| {
            b.iter(|| {
                let q = LogQuery {
                    model: Some("no-such-model".to_owned()),
                    limit: 51,
                    ..LogQuery::default()
                };
                let found = store.query_logs(&q).map(|r| page_of(r, 50));
                black_box(found.map(|p| requests(&nothing, &choices, Ok(&p))))
            });
        },
    );
    let everything = Filters::default();
    c.bench_function(
        "requests: query_logs (no filter) + render, 10 000 rows",
        |b| {
            b.iter(|| {
                let q = LogQuery {
                    limit: 51,
                    ..LogQuery::default()
                };
                let found = store.query_logs(&q).map(|r| page_of(r, 50));
                black_box(found.map(|p| requests(&everything, &choices, Ok(&p))))
            });
        },
    );
    c.bench_function(
        "overview: log_series (1 h per minute) + render, 10 000 rows",
        |b| {
            b.iter(|| {
                let series = store.log_series(NOW_MS - 3_600_000, 60_000);
                let logs = store.recent_logs(20, None);
                black_box(series.and_then(|series| {
                    logs.map(|logs| {
                        overview(&Overview {
                            health: health(),
                            log: LogStats {
                                size: LogSize {
                                    rows: 10_000,
                                    oldest_ts: Some(NOW_MS - 3_600_000),
                                    database_bytes: 4 << 20,
                                },
                                retention_days: 30,
                                max_rows: 1_000_000,
                            },
                            providers: Vec::new(),
                            connections: Vec::new(),
                            pools: Vec::new(),
                            keys: Vec::new(),
                            logs,
                            in_flight: InFlight {
                                requests: 3,
                                queued: 0,
                            },
                            series,
                            now_ms: NOW_MS,
                        })
                    })
                }))
            });
        },
    );
}

fn quota_share_bench(c: &mut Criterion) {
    let pools: Vec<PoolView> = (0..POOLS).map(pool).collect();
    let usage: HashMap<String, PoolUsage> = (0..POOLS)
        .map(|i| (format!("pool-{i:03}"), usage(i)))
        .collect();
    let connections: Vec<Choice> = (0..POOLS)
        .map(|i| Choice {
            id: format!("conn-{i:03}"),
            provider: format!("provider-{}", i % 5),
        })
        .collect();
    let keys: Vec<String> = (0..POOL_KEYS).map(|k| format!("k{k}")).collect();
    c.bench_function("quota share: list render, 100 pools", |b| {
        let form = CreateForm::blank();
        b.iter(|| {
            black_box(quota_share(
                &pools,
                &usage,
                &connections,
                &keys,
                &form,
                "csrf",
            ))
        });
    });
}

criterion_group!(render_benches, benches, quota_share_bench);
criterion_main!(render_benches);
