//! Criterion benchmark of the Redis quota store: one reserve (the decision and the
//! booking in one script round trip) and one settle, against the Redis at
//! 127.0.0.1:6379 (or `SWITCHYARD_TEST_REDIS_URL`). Needs a running Redis.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use switchyard_core::quota::decide::Unit;
use switchyard_core::quota::plan::Dimension;
use switchyard_core::quota::window::Window;
use switchyard_store::redis_counters::{DimArgs, RedisCounters, SettleTarget};

fn redis(c: &mut Criterion) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let url = std::env::var("SWITCHYARD_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let Ok(store) = rt.block_on(RedisCounters::connect(&url, "sybench")) else {
        eprintln!("no Redis at {url}; skipping the Redis benchmark");
        return;
    };
    let dims = [
        Dimension::new(Unit::Requests, Window::FiveHours, 1e12),
        Dimension::new(Unit::Tokens, Window::Weekly, 1e15),
        Dimension::new(Unit::Percent, Window::Weekly, 100.0),
    ];
    let args: Vec<DimArgs> = dims
        .iter()
        .zip([1.0, 500.0, 0.0])
        .map(|(d, cost)| DimArgs {
            dim: d.key(),
            slot_ms: d.window.slot_ms(),
            limit: d.limit,
            cost,
            cap: None,
            fair_share: d.limit / 10.0,
            policy: 0,
            signal: None,
        })
        .collect();
    let mut n: u64 = 0;
    c.bench_function(
        "quota: redis reserve (3 dims, one script round trip)",
        |b| {
            b.iter(|| {
                n = n.wrapping_add(1);
                let id = n.to_string();
                rt.block_on(store.reserve("pool", black_box("k1"), &id, 0.5, &args))
                    .is_ok()
            })
        },
    );
    let reply = rt.block_on(store.reserve("pool", "k1", "settled", 0.5, &args));
    if reply.is_err() {
        return;
    }
    let targets: Vec<SettleTarget> = dims
        .iter()
        .zip(&args)
        .map(|(d, a)| SettleTarget {
            dim: d.key(),
            slot_ms: d.window.slot_ms(),
            target: a.cost * 0.2,
        })
        .collect();
    c.bench_function("quota: redis settle (3 dims, by reservation id)", |b| {
        b.iter(|| {
            rt.block_on(store.settle("pool", "k1", ("settled", false), black_box(&targets)))
                .is_ok()
        })
    });
    let _ = rt.block_on(store.clear());
}

criterion_group!(benches, redis);
criterion_main!(benches);
