//! Criterion benchmark of the concurrency gates' cost on an uncontended request (issue 5
//! targets under 2 µs): building the needs as the pipeline does, taking the slots of
//! four gates (global, provider, account, model) and releasing them, through the shell
//! (lock, permit, service-time average) — the whole price a request pays for being
//! gated when nothing waits.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::sync::Arc;
use switchyard_core::resilience::admission::DEFAULTS;
use switchyard_core::resilience::gates::{GateId, Need};
use switchyard_gateway::runtime::gate::{Ask, Gates, Mode};
use switchyard_gateway::telemetry::metrics::Metrics;

fn needs(gates: usize) -> Vec<Need> {
    let all = [
        GateId::Global,
        GateId::Provider(Arc::from("glm")),
        GateId::Account(Arc::from("glm-team-1")),
        GateId::Model {
            connection: Arc::from("glm-team-1"),
            model: Arc::from("glm-4.5"),
        },
    ];
    all.into_iter()
        .take(gates)
        .map(|gate| Need { gate, capacity: 8 })
        .collect()
}

fn ask(gates: usize) -> Ask<'static> {
    Ask {
        key: "key-0001",
        weight: 1.0,
        connection: "glm-team-1",
        needs: needs(gates),
        limits: DEFAULTS,
        max_waiters: 10_000,
        mode: Mode::Strict,
    }
}

fn benches(c: &mut Criterion) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let gates = Gates::new(Metrics::new().gates);
    c.bench_function("gates: uncontended, 4 gates, acquire + release", |b| {
        b.iter(|| drop(black_box(rt.block_on(gates.acquire(ask(4))))));
    });
    c.bench_function(
        "gates: uncontended, 1 gate (account), acquire + release",
        |b| {
            b.iter(|| drop(black_box(rt.block_on(gates.acquire(ask(1))))));
        },
    );
    c.bench_function("gates: nothing capped", |b| {
        b.iter(|| drop(black_box(rt.block_on(gates.acquire(ask(0))))));
    });
}

criterion_group!(gate_benches, benches);
criterion_main!(gate_benches);
