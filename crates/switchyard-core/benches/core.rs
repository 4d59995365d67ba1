//! Criterion benchmarks for the pure functions on every request's hot path.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use switchyard_core::apikey::KeyHash;
use switchyard_core::catalog::{ApiKey, Catalog, Combo, ComboTarget, ConnectionDef, Provider};
use switchyard_core::chat::ChatRequest;
use switchyard_core::domain::{AuthClass, ModelRef, Strategy, UpstreamFormat};
use switchyard_core::routing;
use switchyard_core::sse::SseParser;
use switchyard_core::usage::Usage;

const BODY: &[u8] = br#"{"model":"fast","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello to the benchmark."}],"temperature":0.2,"max_tokens":64}"#;

fn key(id: &str) -> ApiKey {
    ApiKey {
        id: id.into(),
        name: id.into(),
        scopes: vec![],
        allowed_connections: None,
        allowed_models: None,
        revoked: false,
    }
}

fn catalog() -> Catalog {
    let providers = ["alpha", "beta"]
        .iter()
        .map(|p| Provider {
            id: (*p).into(),
            format: UpstreamFormat::Openai,
            base_url: "http://127.0.0.1:1".into(),
            models: vec!["mock-small".into()],
        })
        .collect();
    let connections = ["alpha", "beta"]
        .iter()
        .flat_map(|p| {
            (0..3).map(move |i| ConnectionDef {
                id: format!("{p}-{i}"),
                provider: (*p).into(),
                auth_class: AuthClass::Apikey,
                format: None,
                base_url: None,
                enabled: true,
                max_concurrent: None,
            })
        })
        .collect();
    let combo = Combo {
        name: "fast".into(),
        strategy: Strategy::Priority,
        targets: ["alpha/mock-small", "beta/mock-small"]
            .iter()
            .map(|m| ComboTarget {
                model: ModelRef::parse(m).unwrap_or_else(|_| unreachable!()),
                connection: None,
                weight: 1,
                cost: None,
            })
            .collect(),
    };
    let keys = (0..1000)
        .map(|i| (KeyHash::of(&format!("sy-key-{i}")), key(&format!("k{i}"))))
        .collect();
    Catalog::build(providers, connections, vec![combo], keys).unwrap_or_else(|_| unreachable!())
}

fn benches(c: &mut Criterion) {
    let cat = catalog();
    let k = key("k1");
    c.bench_function("auth: hash key and look it up among 1000", |b| {
        b.iter(|| {
            cat.key_by_hash(&KeyHash::of(black_box("sy-key-517")))
                .is_some()
        })
    });
    c.bench_function("parse chat request", |b| {
        b.iter(|| ChatRequest::parse(black_box(BODY)).map(|r| r.stream))
    });
    let req = ChatRequest::parse(BODY).unwrap_or_else(|_| unreachable!());
    c.bench_function("serialize upstream body", |b| {
        b.iter(|| req.upstream_body(black_box("mock-small")).len())
    });
    c.bench_function("plan: combo over 2 providers x 3 connections", |b| {
        let mut n = 0usize;
        b.iter(|| {
            n += 1;
            routing::plan(&cat, &k, black_box("fast"), n).map(|p| p.candidates.len())
        })
    });
    c.bench_function("plan: direct provider/model", |b| {
        b.iter(|| {
            routing::plan(&cat, &k, black_box("alpha/mock-small"), 1).map(|p| p.candidates.len())
        })
    });
    let frame = br#"data: {"id":"chatcmpl-mock","object":"chat.completion.chunk","created":1700000000,"model":"mock-small","choices":[{"index":0,"delta":{"content":" Switchyard"},"finish_reason":null}]}

"#;
    c.bench_function("sse: observe one content frame", |b| {
        let mut p = SseParser::new();
        b.iter(|| {
            let mut n = 0;
            p.feed(black_box(frame), |e| {
                if e.data.contains("\"usage\"") {
                    n += Usage::from_json_bytes(e.data.as_bytes()).map_or(0, |u| u.total());
                }
            });
            n
        })
    });
}

criterion_group!(core, benches);
criterion_main!(core);
