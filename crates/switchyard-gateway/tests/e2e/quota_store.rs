//! The Redis quota store under failure (SPEC Q4, Q6): Redis down, hanging, late to come
//! up, or required. The gateway reaches Redis through a small TCP proxy the test can
//! switch between forwarding, holding bytes (a hanging Redis) and refusing connections
//! (a Redis that is down), so the shared Redis server itself is never disturbed.

use crate::quota::{burst, small_burst_pool, token_pool};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use switchyard_gateway::bootstrap;
use switchyard_gateway::clock::{Clock, ManualClock, SystemClock};
use switchyard_test_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with connections and bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Forward,
    /// Bytes are read but kept until the mode changes: Redis seems to hang.
    Hold,
    /// Open connections are cut and new ones closed at once: Redis seems down.
    Refuse,
}

/// A TCP proxy in front of the test Redis.
struct RedisProxy {
    url: String,
    mode: watch::Sender<Mode>,
    task: JoinHandle<()>,
}

impl RedisProxy {
    async fn start(mode: Mode) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let real = redis_url();
        let (scheme, rest) = real.split_once("://").unwrap();
        let (auth, host_path) = match rest.rsplit_once('@') {
            Some((a, h)) => (format!("{a}@"), h),
            None => (String::new(), rest),
        };
        let (upstream, path) = match host_path.split_once('/') {
            Some((h, p)) => (h.to_owned(), format!("/{p}")),
            None => (host_path.to_owned(), String::new()),
        };
        let (tx, rx) = watch::channel(mode);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *rx.borrow() == Mode::Refuse {
                    continue;
                }
                let (rx, upstream) = (rx.clone(), upstream.clone());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::select! {
                        () = pump(cr, sw, rx.clone()) => {}
                        () = pump(sr, cw, rx) => {}
                    }
                });
            }
        });
        Self {
            url: format!("{scheme}://{auth}127.0.0.1:{port}{path}"),
            mode: tx,
            task,
        }
    }

    /// A quota store in Redis through this proxy, under a fresh prefix.
    fn store(&self) -> RedisQuotaStore {
        RedisQuotaStore::at(&self.url)
    }

    fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }
}

impl Drop for RedisProxy {
    fn drop(&mut self) {
        self.set(Mode::Refuse);
        self.task.abort();
    }
}

/// Copies bytes one way, keeping them while the mode is `Hold`; ends on `Refuse`.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut mode: watch::Receiver<Mode>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = mode.wait_for(|m| *m == Mode::Refuse) => return,
        };
        let Ok(now) = mode.wait_for(|m| *m != Mode::Hold).await.map(|m| *m) else {
            return;
        };
        if now == Mode::Refuse || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// The value of one metric series (`name{labels}`), 0 when it is not exposed.
async fn metric(h: &Harness, series: &str) -> f64 {
    h.metric(series).await.unwrap_or(0.0)
}

fn unmetered(reason: &str) -> String {
    format!("switchyard_quota_unmetered_total{{pool=\"team\",reason=\"{reason}\"}}")
}

/// One chat request that must succeed; whether it was metered (carries the pool header).
async fn metered(h: &Harness) -> bool {
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 200);
    r.headers().get("x-quota-pool").is_some()
}

#[tokio::test]
async fn while_redis_is_down_requests_go_ahead_unmetered_and_the_open_breaker_stops_calling_it() {
    // The gateway's clock stands still: the breaker's back-off cannot end on its own.
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let proxy = RedisProxy::start(Mode::Forward).await;
    let h = Harness::start_with_clock(small_burst_pool, &proxy.store().env(), clock.clone()).await;
    assert_eq!(h.health().await["quota_store"], "redis");
    assert!(metered(&h).await);

    proxy.set(Mode::Refuse);
    // Failed calls (these requests', and the releases the settlement worker retries
    // behind them) open the breaker within three requests.
    let mut sent = 0;
    while h.health().await["quota_store_status"]["breaker"] != "open" {
        assert!(!metered(&h).await);
        sent += 1;
        assert!(
            sent <= 3,
            "the breaker did not open after {sent} failed requests"
        );
    }
    let failed = || async {
        metric(&h, &unmetered("store_error")).await + metric(&h, &unmetered("store_timeout")).await
    };
    let failed_before = failed().await;
    assert_eq!(failed_before, f64::from(sent));
    assert_eq!(metric(&h, &unmetered("store_unavailable")).await, 0.0);
    // Open: ten requests go ahead unmetered without a call to Redis.
    for _ in 0..10 {
        assert!(!metered(&h).await);
    }
    assert_eq!(failed().await, failed_before);
    assert_eq!(metric(&h, &unmetered("store_unavailable")).await, 10.0);

    let down = h.health().await;
    assert_eq!(down["status"], "degraded");
    assert_eq!(down["quota_store"], "redis");
    // (Whether a probe off the request path has been made yet depends on the time.)
    let mut status = down["quota_store_status"].clone();
    status.as_object_mut().unwrap().remove("last_probe");
    assert_eq!(
        status,
        json!({"driver": "redis", "requested": "redis", "state": "unavailable",
               "reason": "breaker_open", "breaker": "open"})
    );
    // Usage cannot be read: a typed 503, not an idle-looking pool.
    let r = h.admin_get("/api/quota/pools/team/usage").await;
    assert_eq!(r.status(), 503);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "quota_store_unavailable");
    assert_eq!(e["error"]["type"], "server_error");

    // Redis is back; once the back-off has passed a probe goes through and metering
    // resumes (the probe may land while the connection is still reconnecting).
    proxy.set(Mode::Forward);
    eventually("a request is metered again", || async {
        clock.advance(Duration::from_secs(60));
        metered(&h).await
    })
    .await;
    assert_eq!(h.health().await["status"], "ok");
    // Two metered requests are booked (one before the outage, the probe): two of four
    // left.
    assert_eq!(burst(&h, KEY, "alpha/mock-small", 4).await.0, 2);
}

/// Redis down for `outage` of the gateway's clock, with a request each second of it (so
/// the breaker probes after each back-off, fails, and doubles it); then Redis answers
/// again. The gateway's clock stands still from then on, so the breaker's back-off cannot
/// end: only the probe made off the request path can resume metering. Returns how long
/// that took in real time, and what health said while Redis was down.
async fn metering_after_an_outage_of(outage: Duration) -> (Duration, Value) {
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let proxy = RedisProxy::start(Mode::Forward).await;
    let h = Harness::start_with_clock(small_burst_pool, &proxy.store().env(), clock.clone()).await;
    assert!(metered(&h).await);
    assert_eq!(
        h.health().await["quota_store_status"].get("last_probe"),
        None
    );
    proxy.set(Mode::Refuse);
    for _ in 0..outage.as_secs() {
        assert!(!metered(&h).await);
        clock.advance(Duration::from_secs(1));
    }
    assert_eq!(h.health().await["quota_store_status"]["breaker"], "open");
    // The probes off the request path see Redis down, and change nothing.
    eventually("a probe sees Redis down", || async {
        h.health().await["quota_store_status"]["last_probe"]["ok"] == false
    })
    .await;
    let down = h.health().await["quota_store_status"].clone();
    assert!(!metered(&h).await);

    proxy.set(Mode::Forward);
    let back = SystemClock.now_ms();
    eventually("a request is metered again", || async { metered(&h).await }).await;
    let resumed = Duration::from_millis(SystemClock.now_ms().saturating_sub(back));
    let status = h.health().await["quota_store_status"].clone();
    assert_eq!(status["breaker"], "closed");
    assert_eq!(status["state"], "ok");
    assert_eq!(status["last_probe"]["ok"], true);
    assert_eq!(status["last_probe"]["at_ms"], json!(clock.now_ms()));
    (resumed, down)
}

#[tokio::test]
async fn metering_resumes_when_redis_answers_a_probe_whatever_the_outage_and_back_off() {
    for outage in [Duration::from_secs(5), Duration::from_secs(60)] {
        let (resumed, down) = metering_after_an_outage_of(outage).await;
        assert_eq!(down["breaker"], "open", "{down}");
        assert_eq!(down["state"], "unavailable", "{down}");
        assert_eq!(down["last_probe"]["ok"], false, "{down}");
        // Printed for the record; the assertion above (the back-off cannot end on a
        // clock that stands still) is what the test checks.
        println!(
            "after a {} s outage, metering resumed {} ms after Redis answered",
            outage.as_secs(),
            resumed.as_millis()
        );
    }
}

#[tokio::test]
async fn reservations_given_up_on_while_redis_hangs_count_nothing_once_it_resumes() {
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let proxy = RedisProxy::start(Mode::Forward).await;
    let h = Harness::start_with_clock(small_burst_pool, &proxy.store().env(), clock.clone()).await;
    assert!(metered(&h).await);

    // Redis hangs: each reservation script is sent, the gateway stops waiting after its
    // deadline and lets the request through unmetered; the scripts stay queued.
    proxy.set(Mode::Hold);
    for _ in 0..2 {
        assert!(!metered(&h).await);
    }
    assert_eq!(metric(&h, &unmetered("store_timeout")).await, 2.0);

    // Redis resumes and runs the two late reservations; their releases undo them.
    proxy.set(Mode::Forward);
    eventually("only the settled request is counted", || async {
        clock.advance(Duration::from_secs(60));
        let usage = h.admin_get("/api/quota/pools/team/usage").await;
        usage.status() == 200
            && usage.json::<Value>().await.unwrap()["dimensions"][0]["globalUsed"] == 1.0
    })
    .await;
    // Three of the four requests are left, exactly.
    let (ok, body) = burst(&h, KEY, "alpha/mock-small", 4).await;
    assert_eq!(ok, 3);
    assert_eq!(body.unwrap()["error"]["quota"]["reason"], "global_limit");
}

#[tokio::test]
async fn a_gateway_started_while_redis_is_down_moves_its_counters_to_redis_when_it_answers() {
    let proxy = RedisProxy::start(Mode::Refuse).await;
    let h = Harness::start_with_clock(
        small_burst_pool,
        &proxy.store().env(),
        Arc::new(SystemClock),
    )
    .await;
    let health0 = h.health().await;
    assert_eq!(health0["quota_store"], "sqlite");
    assert_eq!(health0["status"], "degraded");
    assert_eq!(
        health0["quota_store_status"],
        json!({"driver": "sqlite", "requested": "redis", "state": "fallback",
               "reason": "unreachable", "breaker": null})
    );
    let info =
        |d: &str, r: &str| format!("switchyard_quota_store_info{{driver=\"{d}\",reason=\"{r}\"}}");
    assert_eq!(metric(&h, &info("sqlite", "unreachable")).await, 1.0);
    // Metered on the fallback meanwhile.
    assert!(metered(&h).await);
    assert!(metered(&h).await);

    proxy.set(Mode::Forward);
    eventually("the gateway moved to Redis", || async {
        h.health().await["quota_store"] == "redis"
    })
    .await;
    let health1 = h.health().await;
    assert_eq!(health1["status"], "ok");
    assert_eq!(health1["quota_store_status"]["reason"], "selected");
    assert_eq!(metric(&h, &info("redis", "selected")).await, 1.0);
    assert_eq!(metric(&h, &info("sqlite", "unreachable")).await, 0.0);
    // What was admitted on the fallback was carried into Redis.
    eventually("the fallback's counts reached Redis", || async {
        let usage: Value = h.admin_json("/api/quota/pools/team/usage").await;
        usage["dimensions"][0]["globalUsed"] == 2.0
    })
    .await;
    assert_eq!(burst(&h, KEY, "alpha/mock-small", 4).await.0, 2);
}

/// Resolves a configuration with `env` and prepares a gateway from it.
async fn prepare_with(env: &[(&str, &str)]) -> Result<bootstrap::Prepared, bootstrap::BootError> {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::new().resolve(dir.path(), env);
    bootstrap::prepare(&cfg, Arc::new(SystemClock)).await
}

#[tokio::test]
async fn require_redis_makes_the_start_fail_instead_of_falling_back() {
    let unreachable = prepare_with(&[
        ("QUOTA_STORE_DRIVER", "redis"),
        ("QUOTA_STORE_REDIS_URL", "redis://:hunter2@127.0.0.1:1"),
        ("QUOTA_STORE_REQUIRE_REDIS", "true"),
    ])
    .await
    .unwrap_err()
    .to_string();
    assert!(
        unreachable.starts_with("quota store: Redis at redis://:***@127.0.0.1:1 is unreachable ("),
        "{unreachable}"
    );
    assert!(
        unreachable.ends_with(
            "), and quotaStore.requireRedis (QUOTA_STORE_REQUIRE_REDIS) forbids falling back to SQLite"
        ),
        "{unreachable}"
    );
    assert!(!unreachable.contains("hunter2"));

    let no_url = prepare_with(&[
        ("QUOTA_STORE_DRIVER", "redis"),
        ("QUOTA_STORE_REQUIRE_REDIS", "true"),
    ])
    .await
    .unwrap_err()
    .to_string();
    assert_eq!(
        no_url,
        "quota store: quotaStore.driver is redis but no Redis URL is set (QUOTA_STORE_REDIS_URL), \
         and quotaStore.requireRedis (QUOTA_STORE_REQUIRE_REDIS) forbids falling back to SQLite"
    );

    // Without the setting the same start falls back.
    let fallback = prepare_with(&[
        ("QUOTA_STORE_DRIVER", "redis"),
        ("QUOTA_STORE_REDIS_URL", "redis://:hunter2@127.0.0.1:1"),
    ])
    .await
    .unwrap();
    assert_eq!(fallback.state.runtime.quota.driver(), "sqlite");
    fallback.writer.finish(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn settlements_queued_at_shutdown_reach_redis_before_the_gateway_stops() {
    let proxy = RedisProxy::start(Mode::Forward).await;
    let store = proxy.store();
    let mut h = Harness::start_with_clock(token_pool, &store.env(), Arc::new(SystemClock)).await;
    assert_eq!(h.health().await["quota_store"], "redis");
    h.rule(json!({"latency_ms": 300})).await;
    let requests: Vec<_> = (0..5)
        .map(|_| {
            let (http, url) = (h.http.clone(), h.url("/v1/chat/completions"));
            tokio::spawn(async move {
                let r = http
                    .post(url)
                    .bearer_auth(KEY)
                    .json(&chat_body("alpha/mock-small", false))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                let body: Value = r.json().await.unwrap();
                body["usage"]["total_tokens"].as_f64().unwrap()
            })
        })
        .collect();
    // Every request is reserved and upstream; Redis now hangs, so their settlements
    // queue up behind it.
    eventually("all five requests are upstream", || async {
        h.mock_stats().await["requests_total"] == 5
    })
    .await;
    proxy.set(Mode::Hold);
    let mut total = 0.0;
    for r in requests {
        total += r.await.unwrap();
    }
    let stopping = tokio::spawn(async move {
        h.stop().await;
        h
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.set(Mode::Forward);
    let _h = stopping.await.unwrap();
    // Whatever was not applied by the time the gateway stopped is lost now.
    proxy.set(Mode::Refuse);
    let mut redis = redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let sum: f64 = redis::cmd("HGET")
        .arg(format!("{}:q1:{{team}}:tokens:daily:*", store.prefix()))
        .arg("sum")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(sum, total);
}

#[tokio::test]
async fn on_redis_a_grown_stream_settles_every_booking_and_leaves_no_record_behind() {
    use futures_util::StreamExt;
    let proxy = RedisProxy::start(Mode::Forward).await;
    let store = proxy.store();
    let h = Harness::start_with_clock(token_pool, &store.env(), Arc::new(SystemClock)).await;
    h.rule(json!({"chunks": 200, "chunk_interval_ms": 2})).await;
    let mut body = chat_body("alpha/mock-small", true);
    // A one-token estimate: the stream books a further step while it runs.
    body["max_tokens"] = json!(1);
    body["stream_options"] = json!({"include_usage": true});
    let r = h.chat(body).await;
    assert_eq!(r.status(), 200);
    let mut text = String::new();
    let mut stream = r.bytes_stream();
    while let Some(chunk) = stream.next().await {
        text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    let total = (PROMPT_TOKENS + 200) as f64;
    assert!(text.contains(&format!("\"total_tokens\":{}", PROMPT_TOKENS + 200)));
    let redis = redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let pattern = format!("{}:q1:{{team}}:r:*", store.prefix());
    eventually("every booking settled and its record gone", || async {
        let usage: Value = h.admin_json("/api/quota/pools/team/usage").await;
        let records: Vec<String> = redis::cmd("KEYS")
            .arg(&pattern)
            .query_async(&mut redis.clone())
            .await
            .unwrap();
        usage["dimensions"][0]["keys"][0]["consumed"] == total && records.is_empty()
    })
    .await;
}
