//! End-to-end page timings (issue 14: a page renders in under 50 ms with 100 pools and
//! 10 000 log rows). A real gateway — the test harness: SQLite store, mock upstream,
//! the dashboard mounted — gets 100 connections, 100 quota pools (one on each, two keys
//! allocated) and 10 000 request-log rows over the last hour; each benchmark is one
//! signed-in `GET` of a page over a real socket, from the request to the body's last
//! byte. The quota-share list reads every pool's usage from the quota engine, the
//! request log reads the store, the charts read the per-minute series the log writer
//! keeps (seeded from the stored rows at start), as in production.

#![expect(
    clippy::expect_used,
    reason = "a benchmark that cannot set up must stop, not measure nothing"
)]

use criterion::{criterion_group, criterion_main, Criterion};
use reqwest::{redirect, Client, Method};
use serde_json::json;
use std::hint::black_box;
use std::time::Duration;
use switchyard_gateway::clock::{Clock, SystemClock};
use switchyard_gateway::services::model::LogRow;
use switchyard_test_support::{Harness, ADMIN};
use tokio::runtime::Runtime;

/// Pools (and connections) created.
const POOLS: usize = 100;

/// Log rows seeded.
const ROWS: u64 = 10_000;

fn row(i: u64, now: u64) -> LogRow {
    let error = i.is_multiple_of(20);
    LogRow {
        ts: now - (ROWS - i) * 3_600_000 / ROWS,
        request_id: format!("req-{i:08}"),
        key_id: Some(if i.is_multiple_of(2) { "k1" } else { "ops" }.to_owned()),
        requested_model: "fast".to_owned(),
        provider: Some(if i.is_multiple_of(3) { "beta" } else { "alpha" }.to_owned()),
        connection_id: Some(format!("c{:03}", i % POOLS as u64)),
        model: Some("mock-small".to_owned()),
        status: if error { 429 } else { 200 },
        error_code: error.then(|| "rate_limited".to_owned()),
        stream: false,
        client_format: "openai".to_owned(),
        attempts: 1,
        latency_ms: 120 + i % 300,
        ttfb_ms: Some(40),
        prompt_tokens: Some(500),
        completion_tokens: Some(80),
        egress_ip: None,
        failed_attempts: Vec::new(),
        route: None,
    }
}

/// The gateway, a client that keeps redirects to itself, and the session cookie.
async fn setup() -> (Harness, Client, String) {
    let mut h = Harness::start_mounted(switchyard_dashboard::routes).await;
    for i in 0..POOLS {
        let id = format!("c{i:03}");
        let r = h
            .admin_send(
                Method::POST,
                "/api/connections",
                json!({"id": id, "provider": "alpha", "auth_class": "apikey"}),
            )
            .await;
        assert!(r.status().is_success(), "connection {id}: {}", r.status());
        let r = h
            .admin_send(
                Method::POST,
                "/api/quota/pools",
                json!({"id": format!("p{i:03}"), "name": format!("Team {i}"),
                    "connectionIds": [id],
                    "dimensions": [{"unit": "requests", "window": "hourly", "limit": 1000},
                                   {"unit": "tokens", "window": "daily", "limit": 2000000}],
                    "allocations": [{"apiKeyId": "k1", "allocationWeight": 50},
                                    {"apiKeyId": "ops", "allocationWeight": 50}]}),
            )
            .await;
        assert_eq!(
            r.status(),
            201,
            "pool {i}: {}",
            r.text().await.unwrap_or_default()
        );
    }
    let now = SystemClock.now_ms();
    let rows: Vec<LogRow> = (0..ROWS).map(|i| row(i, now)).collect();
    h.with_store(move |s| {
        for chunk in rows.chunks(1000) {
            s.insert_log_batch(chunk).expect("the log rows");
        }
    })
    .await;
    // Written behind the gateway's back: a restart counts them into the last hour's
    // per-minute series, as it does with a real log.
    h.restart().await;
    let client = Client::builder()
        .redirect(redirect::Policy::none())
        .build()
        .expect("a client");
    let signed = client
        .post(h.url("/dashboard/sign-in"))
        .form(&[("token", ADMIN)])
        .send()
        .await
        .expect("sign-in");
    let cookie = signed.headers()["set-cookie"]
        .to_str()
        .expect("a cookie")
        .split(';')
        .next()
        .expect("its value")
        .to_owned();
    (h, client, cookie)
}

fn pages(c: &mut Criterion) {
    let rt = Runtime::new().expect("a runtime");
    let (h, client, cookie) = rt.block_on(setup());
    let mut group = c.benchmark_group("pages");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(5));
    for (name, path) in [
        ("quota share, 100 pools", "/dashboard/costs/quota-share"),
        ("a pool", "/dashboard/costs/quota-share/p042"),
        ("overview, 10 000 log rows", "/dashboard"),
        ("request log, newest 50", "/dashboard/requests"),
        (
            "request log, one key's errors",
            "/dashboard/requests?key=k1&status=errors",
        ),
    ] {
        let get = || async {
            let r = client
                .get(h.url(path))
                .header("cookie", &cookie)
                .send()
                .await
                .expect("the page");
            assert_eq!(r.status(), 200, "{path}");
            r.bytes().await.expect("the body").len()
        };
        let size = rt.block_on(get());
        assert!(size > 1000, "{path}: {size} bytes");
        group.bench_function(name, |b| b.iter(|| black_box(rt.block_on(get()))));
    }
    group.finish();
}

criterion_group!(page_benches, pages);
criterion_main!(page_benches);
