//! Criterion benchmarks for the pure functions on every request's hot path.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use switchyard_core::apikey::KeyHash;
use switchyard_core::catalog::{ApiKey, Catalog, Combo, ComboTarget, ConnectionDef, Provider};
use switchyard_core::domain::{AuthClass, ModelRef, UpstreamFormat};
use switchyard_core::format::{openai_chat, Format};
use switchyard_core::llm::RawObject;
use switchyard_core::quota::decide::{decide, DimensionInput, Policy, Share, Unit};
use switchyard_core::quota::ledger::{Ask, PoolLedger};
use switchyard_core::quota::plan::Dimension;
use switchyard_core::quota::window::Window;
use switchyard_core::routing;
use switchyard_core::routing::strategy::{self, StrategyRef};
use switchyard_core::sse::SseParser;
use switchyard_core::usage::Usage;

/// The members Claude Code sends to `/v1/messages`, in its order (../shared/CLIENTS.md),
/// with short values: what is measured is the cost per member.
const CLAUDE_CODE_BODY: &[u8] = br#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":[{"type":"text","text":"Fix the failing test."}]}],"system":[{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}}],"tools":[{"name":"Bash","description":"Runs a command.","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}],"metadata":{"user_id":"{\"device_id\":\"d\",\"session_id\":\"s\"}"},"max_tokens":128000,"thinking":{"type":"adaptive","display":"omitted"},"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"output_config":{"effort":"medium"},"stream":true}"#;

const BODY: &[u8] = br#"{"model":"fast","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello to the benchmark."}],"temperature":0.2,"max_tokens":64}"#;

/// A chat body of 200 turns of about 1 KiB of text each, some with escapes, as an agent's
/// long session sends.
fn long_conversation() -> Vec<u8> {
    let text = "Read the file, then run the tests again. ".repeat(24);
    let turns: Vec<String> = (0..200)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            format!(r#"{{"role":"{role}","content":"{text}\n\"step {i}\" d\u00e9j\u00e0 vu"}}"#)
        })
        .collect();
    format!(
        r#"{{"model":"claude-sonnet-4-5","messages":[{}],"max_tokens":8192,"stream":true}}"#,
        turns.join(",")
    )
    .into_bytes()
}

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
            max_concurrent: None,
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
                rate_limit_overrides: None,
                disable_cooling: false,
            })
        })
        .collect();
    let combo = Combo {
        name: "fast".into(),
        strategy: StrategyRef(strategy::DEFAULT),
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
        b.iter(|| openai_chat::decode(black_box(BODY)).map(|r| r.stream))
    });
    // The quick reading (switchyard_core::rawscan) and serde_json's alone, side by side
    // in one run: a small body, and a long conversation whose time is in its strings.
    let long = long_conversation();
    for (what, body) in [
        ("a Claude Code-shaped body (10 members)", CLAUDE_CODE_BODY),
        ("a 200-turn conversation (about 190 KiB)", long.as_slice()),
    ] {
        c.bench_function(&format!("read the members of {what}"), |b| {
            b.iter(|| RawObject::parse(black_box(body)).map(|o| o.member("stream").is_some()))
        });
        c.bench_function(
            &format!("read the members of {what}, serde_json alone"),
            |b| {
                b.iter(|| {
                    RawObject::parse_with_serde_json(black_box(body))
                        .map(|o| o.member("stream").is_some())
                })
            },
        );
    }
    let req = openai_chat::decode(BODY).unwrap_or_else(|_| unreachable!());
    c.bench_function("serialize upstream body", |b| {
        b.iter(|| {
            req.upstream_body(Format::OpenAiChat, black_box("mock-small"), None)
                .map(|b| b.len())
        })
    });
    c.bench_function("plan: combo over 2 providers x 3 connections", |b| {
        let mut n = 0usize;
        b.iter(|| {
            n += 1;
            routing::plan(&cat, &routing::NoPools, &k, black_box("fast"), n)
                .map(|p| p.candidates.len())
        })
    });
    c.bench_function("plan: direct provider/model", |b| {
        b.iter(|| {
            routing::plan(
                &cat,
                &routing::NoPools,
                &k,
                black_box("alpha/mock-small"),
                1,
            )
            .map(|p| p.candidates.len())
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

/// The three dimensions of a typical subscription pool.
fn pool_dims() -> Vec<Dimension> {
    vec![
        Dimension::new(Unit::Requests, Window::FiveHours, 1e9),
        Dimension::new(Unit::Tokens, Window::Weekly, 1e15),
        Dimension::new(Unit::Percent, Window::Weekly, 100.0),
    ]
}

fn quota_benches(c: &mut Criterion) {
    let share = Share {
        weight: 10.0,
        policy: Policy::Hard,
    };
    let inputs: Vec<DimensionInput> = (0..3)
        .map(|i| DimensionInput {
            limit: 1000.0,
            consumed: 40.0 + f64::from(i),
            total: 600.0,
            signal: Some(0.4),
            cost: 1.0,
            cap: None,
        })
        .collect();
    c.bench_function("quota: decide over 3 dimensions", |b| {
        b.iter(|| decide(black_box(&inputs), share, 0.5).admitted())
    });
    let mut ledger = PoolLedger::new(pool_dims());
    let keys: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
    let now = 1_800_000_000_000u64;
    // Warm the counters so every key has history.
    for (i, k) in keys.iter().enumerate() {
        for j in 0..10u64 {
            let ask = Ask {
                key_id: k,
                share,
                caps: &[None, None, None],
                costs: &[1.0, 500.0, 0.0],
                signals: &[None, None, None],
                saturation_threshold: 0.5,
                growth: false,
            };
            if let (_, Some(mut r), _) = ledger.reserve(now - (i as u64 + j) * 60_000, ask) {
                ledger.settle(now, &mut r, &[1.0, 420.0, 0.0]);
            }
        }
    }
    let mut n = 0usize;
    c.bench_function(
        "quota: reserve + settle on the in-memory ledger (3 dims, 100 keys)",
        |b| {
            b.iter(|| {
                n += 1;
                let ask = Ask {
                    key_id: &keys[n % keys.len()],
                    share,
                    caps: &[None, None, None],
                    costs: &[1.0, 500.0, 0.0],
                    signals: &[None, None, None],
                    saturation_threshold: 0.5,
                    growth: false,
                };
                if let (_, Some(mut r), _) = ledger.reserve(black_box(now), ask) {
                    ledger.settle(now, &mut r, &[1.0, 420.0, 0.0]);
                }
            })
        },
    );
}

criterion_group!(core, benches, quota_benches);
criterion_main!(core);
