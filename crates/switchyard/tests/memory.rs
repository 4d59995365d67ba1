//! The gateway's memory under waves of concurrent streams (SPEC R20; the test form of
//! `bench/rss.sh`): a `switchyard serve` process in front of a `switchyard mock` that
//! streams slowly, so that every stream of a wave is open at once, and the gateway's
//! VmRSS read from `/proc` idle, through each wave (every 10 ms) and after it.
//!
//! A wave is [`STREAMS`] streaming chat requests opened together, one connection each,
//! each read to its `[DONE]`; the mock sends [`CHUNKS`] deltas [`CHUNK_MS`] apart after the
//! first frame (6 s), so on this project's 2-core machine, where the debug gateway takes
//! about a second to open 1 000 streams, all are open together with a wide margin. A
//! first wave warms the gateway up (its buffers, the request log's page cache); three more
//! are measured, the whole test taking about 35 s. The bounds, with what the debug binary
//! measured (2026-12-02, three runs, the machine shared with other builds):
//!
//! | bound | limit | measured |
//! |---|---:|---:|
//! | RSS per open stream: (RSS with every stream open − idle) ÷ streams | 80 KiB | 39 – 40 KiB |
//! | growth of the RSS with every stream open, first to third measured wave | 4 MiB | +0.1 – 0.7 MiB |
//! | growth of what stays after a wave, first to third measured wave | 4 MiB | +0.2 – 0.5 MiB |
//! | released: RSS 1 s after the last wave − idle | 12 MiB | 5.3 – 5.5 MiB (idle 37 – 38 MiB) |
//!
//! The highest sample of a wave is taken while its streams are being opened and varies
//! by ±6 MiB from wave to wave with how many requests are being read at once (80 – 91
//! MiB): it is printed, not bounded. Both sides close their connections (`connection:
//! close`, and the mock's answers say the same), so no pooled upstream connection
//! outlives its stream: what stays after a wave is what the gateway itself kept. The
//! gateway runs with `MIMALLOC_PURGE_DELAY=0`: with mimalloc's default delay, pages freed
//! when a wave ends stay resident until its threads allocate again (docs/performance.md,
//! Memory), which would hide both a release and a leak behind the allocator's cache. The
//! assertions are on memory only; the one on time is that at least half of a wave's
//! streams were open at once (the figure per stream divides by the number that were).

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code fails loudly on purpose"
)]

mod common;

use common::start;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use switchyard_test_support::{sample, Config, Connection, Key, Provider, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const KEY: &str = "sy-memory-test-key-0000000001";
const ADMIN: &str = "memory-test-admin-token-01";
/// Streams per wave.
const STREAMS: usize = 1_000;
/// Measured waves, after one that warms up.
const WAVES: usize = 3;
/// Deltas per stream, and the mock's pause before each.
const CHUNKS: u32 = 3;
const CHUNK_MS: u64 = 2_000;

const MAX_KIB_PER_STREAM: u64 = 80;
const MAX_OPEN_GROWTH_KIB: u64 = 4 * 1024;
const MAX_KEPT_GROWTH_KIB: u64 = 4 * 1024;
const MAX_RETAINED_KIB: u64 = 12 * 1024;

/// The process's resident memory, KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// One streaming request on its own connection, read to its end. The stream counts as
/// open from its first frame to its end; returns whether it was a 200 ending in `[DONE]`.
async fn stream_once(addr: String, request: Arc<Vec<u8>>, open: Arc<AtomicUsize>) -> bool {
    let mut socket = TcpStream::connect(&addr).await.unwrap();
    socket.write_all(&request).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let mut counted = false;
    loop {
        let n = socket.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if !counted && answer.windows(6).any(|w| w == b"data: ") {
            counted = true;
            open.fetch_add(1, Ordering::SeqCst);
        }
    }
    if counted {
        open.fetch_sub(1, Ordering::SeqCst);
    }
    answer.starts_with(b"HTTP/1.1 200") && answer.windows(12).any(|w| w == b"data: [DONE]")
}

/// What one wave showed: the highest RSS (KiB) sampled, the most streams seen open in a
/// sample and the highest RSS among the samples that saw that many, and the streams that
/// ended well.
#[derive(Debug, Clone, Copy)]
struct Wave {
    peak: u64,
    open: u64,
    open_rss: u64,
    ok: usize,
}

/// One wave, with the gateway's RSS and the open streams sampled every 10 ms.
async fn wave(pid: u32, addr: &str, request: &Arc<Vec<u8>>) -> Wave {
    let open = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn({
        let (open, done) = (open.clone(), done.clone());
        async move {
            let mut samples = Vec::new();
            while !done.load(Ordering::SeqCst) {
                samples.push((rss_kib(pid), open.load(Ordering::SeqCst) as u64));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            samples
        }
    });
    let streams: Vec<_> = (0..STREAMS)
        .map(|_| tokio::spawn(stream_once(addr.to_owned(), request.clone(), open.clone())))
        .collect();
    let mut ok = 0;
    for s in streams {
        ok += usize::from(s.await.unwrap());
    }
    done.store(true, Ordering::SeqCst);
    let samples = sampler.await.unwrap();
    let most = samples.iter().map(|s| s.1).max().unwrap();
    Wave {
        peak: samples.iter().map(|s| s.0).max().unwrap(),
        open: most,
        open_rss: samples
            .iter()
            .filter(|s| s.1 == most)
            .map(|s| s.0)
            .max()
            .unwrap(),
        ok,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_per_stream_is_bounded_stays_level_across_waves_and_is_released() {
    let (_mock, mock) = start(&["mock", "--listen", "127.0.0.1:0"], &[]).await;
    let http = reqwest::Client::new();
    let rule = json!({"chunks": CHUNKS, "chunk_interval_ms": CHUNK_MS,
                      "headers": {"connection": "close"}});
    let r = http
        .post(format!("{mock}/_mock/rules"))
        .json(&rule)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());

    let dir = tempfile::tempdir().unwrap();
    let config = Config::new()
        .server(
            Server::new()
                .listen("127.0.0.1:0")
                .data_dir(dir.path().join("data"))
                .admin_token(ADMIN),
        )
        .provider(Provider::openai("mem", &mock))
        .connection(Connection::apikey("mem-1", "mem").credential("cred-mem"))
        .key(Key::new("k1", "k1", KEY));
    let path = dir.path().join("switchyard.toml");
    std::fs::write(&path, config.to_toml()).unwrap();
    let (gateway, url) = start(
        &["serve", "--config", path.to_str().unwrap()],
        &[("MIMALLOC_PURGE_DELAY", "0")],
    )
    .await;
    let pid = gateway.id().unwrap();
    let addr = url.trim_start_matches("http://").to_owned();
    let body = json!({"model": "mem/mock-small", "stream": true,
                      "messages": [{"role": "user", "content": "memory test"}]})
    .to_string();
    let request = Arc::new(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {KEY}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    );

    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = rss_kib(pid);
    let warm_up = wave(pid, &addr, &request).await;
    assert_eq!(
        warm_up.ok, STREAMS,
        "warm-up wave: streams that ended with [DONE]"
    );
    let mut waves = Vec::new();
    for n in 1..=WAVES {
        let w = wave(pid, &addr, &request).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let kept = rss_kib(pid);
        eprintln!(
            "wave {n}: idle {idle} KiB; peak {} KiB; {} streams open at once, with {} KiB \
             ({} KiB per stream); {kept} KiB after",
            w.peak,
            w.open,
            w.open_rss,
            w.open_rss.saturating_sub(idle) / w.open
        );
        assert_eq!(w.ok, STREAMS, "wave {n}: streams that ended with [DONE]");
        assert!(
            w.open >= STREAMS as u64 / 2,
            "wave {n}: only {} streams were open at once",
            w.open
        );
        waves.push((w, kept));
    }

    for (n, (w, _)) in waves.iter().enumerate() {
        let per_stream = w.open_rss.saturating_sub(idle) / w.open;
        assert!(
            per_stream <= MAX_KIB_PER_STREAM,
            "wave {}: {per_stream} KiB per open stream, over {MAX_KIB_PER_STREAM}",
            n + 1
        );
    }
    let ((first, first_kept), (last, last_kept)) = (waves[0], waves[WAVES - 1]);
    assert!(
        last.open_rss.saturating_sub(first.open_rss) <= MAX_OPEN_GROWTH_KIB,
        "RSS with every stream open grew from {} to {} KiB across the waves",
        first.open_rss,
        last.open_rss
    );
    assert!(
        last_kept.saturating_sub(first_kept) <= MAX_KEPT_GROWTH_KIB,
        "what stays after a wave grew from {first_kept} to {last_kept} KiB"
    );
    assert!(
        last_kept.saturating_sub(idle) <= MAX_RETAINED_KIB,
        "{last_kept} KiB after the waves, {idle} KiB idle"
    );

    let metrics = http.get(format!("{url}/metrics")).send().await.unwrap();
    let metrics = metrics.text().await.unwrap();
    assert_eq!(sample(&metrics, "switchyard_requests_in_flight"), Some(0.0));
    let stats: Value = http
        .get(format!("{mock}/_mock/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["in_flight"], 0);
    assert_eq!(stats["requests_total"], (WAVES + 1) * STREAMS);
}
