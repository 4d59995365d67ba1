//! Concurrency caps, fair queues and request-queue admission (SPEC R7, R8, R10) over
//! real sockets, with the mock provider holding requests open.

use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;
use switchyard_test_support::{
    chat_body, eventually, spawn_recorded, status_and_json, Config, Connection, Done, Harness, Key,
    Provider, CRED_ALPHA, CRED_BETA, KEY,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const KEY_B: &str = "sy-test-client-key-b-000000001";

/// The standard configuration with connection `alpha-1` changed by `alpha` and a
/// second client key.
fn with_alpha(mock_url: &str, alpha: impl FnOnce(Connection) -> Connection) -> Config {
    Config::standard(mock_url)
        .edit_connection("alpha-1", alpha)
        .key(Key::new("kb", "b", KEY_B))
}

fn two_slots(mock_url: &str) -> Config {
    with_alpha(mock_url, |c| c.max_concurrent(2))
}

fn one_slot(mock_url: &str) -> Config {
    with_alpha(mock_url, |c| c.max_concurrent(1))
}

fn one_slot_depth_one(mock_url: &str) -> Config {
    with_alpha(mock_url, |c| {
        c.max_concurrent(1)
            .rate_limit_overrides(json!({"maxQueueDepth": 1}))
    })
}

fn one_slot_short_wait(mock_url: &str) -> Config {
    with_alpha(mock_url, |c| {
        c.max_concurrent(1)
            .rate_limit_overrides(json!({"maxWaitMs": 600}))
    })
}

fn one_slot_wait_2500(mock_url: &str) -> Config {
    with_alpha(mock_url, |c| {
        c.max_concurrent(1)
            .rate_limit_overrides(json!({"maxWaitMs": 2500}))
    })
}

async fn waiting_on(h: &Harness, connection: &str) -> f64 {
    h.metric(&format!(
        "switchyard_gate_queue_depth{{connection=\"{connection}\"}}"
    ))
    .await
    .unwrap_or(0.0)
}

/// Sends one request for `alpha/mock-small` and waits until the mock holds it.
async fn hold(h: &Harness) -> JoinHandle<reqwest::Response> {
    let holder = h.spawn_chat(KEY, chat_body("alpha/mock-small", false));
    eventually("the holder reaches the mock", || async {
        h.mock_stats().await["in_flight"] == 1
    })
    .await;
    holder
}

/// Waits until `n` requests wait for connection `alpha-1`.
async fn until_waiting(h: &Harness, n: f64) {
    eventually("requests wait for alpha-1", || async {
        waiting_on(h, "alpha-1").await == n
    })
    .await;
}

async fn error_code(r: reqwest::Response) -> (u16, String) {
    let (status, body) = status_and_json(r).await;
    (status, body["error"]["code"].as_str().unwrap().to_owned())
}

/// Holds alpha-1's one slot, queues `depth` more requests behind it, and checks that
/// the next one is refused at once with `RATE_LIMIT_QUEUE_FULL` while the held and
/// queued ones are all answered.
async fn assert_refused_beyond_depth(h: &Harness, depth: usize) {
    let holder = hold(h).await;
    let queued: Vec<_> = (0..depth)
        .map(|_| h.spawn_chat(KEY, chat_body("alpha/mock-small", false)))
        .collect();
    until_waiting(h, depth as f64).await;
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(
        error_code(r).await,
        (429, "RATE_LIMIT_QUEUE_FULL".to_owned())
    );
    assert_eq!(holder.await.unwrap().status(), 200);
    for q in queued {
        assert_eq!(q.await.unwrap().status(), 200);
    }
}

#[tokio::test]
async fn two_slots_never_see_more_than_two_upstream_requests_and_everyone_is_answered() {
    let h = Harness::start_with(two_slots, &[]).await;
    h.rule(json!({"latency_ms": 30})).await;
    let statuses = h.concurrent_statuses(50, KEY, "alpha/mock-small").await;
    assert_eq!(statuses, vec![200; 50]);
    let stats = h.mock_stats().await;
    assert_eq!(stats["peak_in_flight"], 2);
    assert_eq!(stats["requests_total"], 50);
    assert_eq!(waiting_on(&h, "alpha-1").await, 0.0);
}

#[tokio::test]
async fn a_full_queue_refuses_at_once_without_calling_the_upstream() {
    let h = Harness::start_with(one_slot_depth_one, &[]).await;
    h.rule(json!({"latency_ms": 3000})).await;
    assert_refused_beyond_depth(&h, 1).await;
    // Only the two admitted requests ever reached the upstream.
    assert_eq!(h.mock_stats().await["requests_total"], 2);
    assert_eq!(
        h.metric(
            "switchyard_gate_rejections_total{connection=\"alpha-1\",code=\"RATE_LIMIT_QUEUE_FULL\"}"
        )
        .await,
        Some(1.0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_past_max_wait_ms_ends_in_a_semaphore_timeout() {
    let h = Harness::start_paused(one_slot_short_wait, &[]).await;
    h.rule(json!({"latency_ms": 2000})).await;
    let holder = hold(&h).await;
    let sent = Instant::now();
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(error_code(r).await, (429, "SEMAPHORE_TIMEOUT".to_owned()));
    // Refused when maxWaitMs ran out, to the millisecond (paused time).
    assert_eq!(sent.elapsed(), Duration::from_millis(600));
    assert_eq!(holder.await.unwrap().status(), 200);
    assert_eq!(h.mock_stats().await["requests_total"], 1);
}

#[tokio::test(start_paused = true)]
async fn a_hopeless_wait_is_refused_at_once_with_an_honest_retry_after() {
    let h = Harness::start_paused(one_slot_wait_2500, &[]).await;
    h.rule(json!({"latency_ms": 2100})).await;
    // One request teaches the gateway the service time (2.1 s: time is paused, so the
    // mock's latency is all of it).
    assert_eq!(
        h.chat(chat_body("alpha/mock-small", false)).await.status(),
        200
    );
    let holder = hold(&h).await;
    // Queued behind the holder, this one expects half a service time (the holder's
    // remaining time on average): within maxWaitMs (2.5 s).
    let second = h.spawn_chat(KEY, chat_body("alpha/mock-small", false));
    until_waiting(&h, 1.0).await;
    // Behind both, a third would wait one and a half service times (3.15 s): more than
    // 2.5 s, so it is told at once, that wait rounded up to whole seconds.
    let sent = Instant::now();
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(sent.elapsed(), Duration::ZERO);
    assert_eq!(r.headers()["retry-after"], "4");
    assert_eq!(error_code(r).await, (429, "SEMAPHORE_TIMEOUT".to_owned()));
    assert_eq!(holder.await.unwrap().status(), 200);
    assert_eq!(second.await.unwrap().status(), 200);
    assert_eq!(h.mock_stats().await["requests_total"], 3);
}

#[tokio::test]
async fn one_keys_backlog_does_not_hold_back_another_key() {
    let h = Harness::start_with(one_slot, &[]).await;
    h.rule(json!({"latency_ms": 50})).await;
    let done = Done::default();
    let spawn = |key, who| spawn_recorded(&h, key, "alpha/mock-small", who, &done);
    let mut tasks: Vec<_> = (0..40).map(|_| spawn(KEY, "a")).collect();
    eventually("key A's backlog is queued", || async {
        waiting_on(&h, "alpha-1").await >= 30.0
    })
    .await;
    tasks.extend((0..4).map(|_| spawn(KEY_B, "b")));
    for t in tasks {
        t.await.unwrap();
    }
    let order = done.lock().unwrap().clone();
    assert_eq!(order.len(), 44);
    let last_b = order.iter().rposition(|w| *w == "b").unwrap();
    let a_done_before_last_b = order[..last_b].iter().filter(|w| **w == "a").count();
    // B's four finish before A's last thirty have even started.
    assert!(a_done_before_last_b < 10, "{order:?}");
    assert_eq!(h.mock_stats().await["peak_in_flight"], 1);
}

/// Provider `alpha` capped at 2 across two uncapped connections.
fn provider_cap(mock_url: &str) -> Config {
    Config::standard(mock_url)
        .edit_provider("alpha", |p| p.max_concurrent(2))
        .connection(
            Connection::apikey("alpha-2", "alpha")
                .credential("cred-alpha-2")
                .disable_cooling(),
        )
}

fn model_cap(mock_url: &str) -> Config {
    with_alpha(mock_url, |c| {
        c.rate_limit_overrides(json!({"modelConcurrency": {"mock-large": 1}}))
    })
}

#[tokio::test]
async fn a_provider_cap_holds_across_its_connections() {
    let h = Harness::start_with(provider_cap, &[]).await;
    h.rule(json!({"latency_ms": 30})).await;
    let statuses = h.concurrent_statuses(30, KEY, "alpha/mock-small").await;
    assert_eq!(statuses, vec![200; 30]);
    let stats = h.mock_stats().await;
    assert_eq!(stats["peak_in_flight"], 2);
    // Both connections served: the cap is the provider's, not one account's.
    assert_eq!(
        stats["by_credential"][CRED_ALPHA].as_u64().unwrap()
            + stats["by_credential"]["cred-alpha-2"].as_u64().unwrap(),
        30
    );
}

#[tokio::test]
async fn a_model_cap_holds_only_that_model() {
    let h = Harness::start_with(model_cap, &[]).await;
    h.rule(json!({"latency_ms": 30})).await;
    let statuses = h.concurrent_statuses(20, KEY, "alpha/mock-large").await;
    assert_eq!(statuses, vec![200; 20]);
    assert_eq!(h.mock_stats().await["peak_in_flight"], 1);
    // Another model on the same connection is not capped.
    h.reset_mock().await;
    h.rule(json!({"latency_ms": 500})).await;
    let statuses = h.concurrent_statuses(4, KEY, "alpha/mock-small").await;
    assert_eq!(statuses, vec![200; 4]);
    assert_eq!(h.mock_stats().await["peak_in_flight"], 4);
}

fn overlapping_gates(mock_url: &str) -> Config {
    Config::new()
        .setting("concurrency.globalMax", 3)
        .provider(
            Provider::openai("alpha", mock_url)
                .models(["mock-small", "mock-large"])
                .max_concurrent(2),
        )
        .provider(Provider::openai("beta", mock_url).models(["mock-small", "mock-large"]))
        .connection(
            Connection::apikey("alpha-1", "alpha")
                .credential("cred-a1")
                .max_concurrent(2)
                .rate_limit_overrides(json!({"modelConcurrency": {"mock-large": 1}})),
        )
        .connection(Connection::apikey("alpha-2", "alpha").credential("cred-a2"))
        .connection(
            Connection::apikey("beta-1", "beta")
                .credential("cred-b1")
                .rate_limit_overrides(
                    json!({"maxConcurrent": 2, "modelConcurrency": {"mock-small": 1}}),
                ),
        )
        .key(Key::new("k1", "tester", KEY))
        .key(Key::new("kb", "b", KEY_B))
}

#[tokio::test]
async fn requests_contending_across_overlapping_gates_all_finish_within_every_cap() {
    let h = Harness::start_with(overlapping_gates, &[]).await;
    h.rule(json!({"latency_ms": 20})).await;
    let models = [
        "alpha/mock-small",
        "alpha/mock-large",
        "beta/mock-small",
        "beta/mock-large",
    ];
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let key = if i % 3 == 0 { KEY_B } else { KEY };
            h.spawn_chat(key, chat_body(models[i % models.len()], false))
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap().status(), 200);
    }
    let stats = h.mock_stats().await;
    // The global cap of 3 is the tightest bound on everything in flight at once.
    assert_eq!(stats["peak_in_flight"], 3);
    assert_eq!(stats["requests_total"], 64);
    for c in ["alpha-1", "alpha-2", "beta-1"] {
        assert_eq!(waiting_on(&h, c).await, 0.0, "{c}");
    }
}

#[tokio::test]
async fn a_client_that_disconnects_gives_its_slot_back() {
    let h = Harness::start_with(one_slot, &[]).await;
    h.rule(json!({"chunks": 50, "chunk_interval_ms": 100}))
        .await;
    let r = h.chat(chat_body("alpha/mock-small", true)).await;
    assert_eq!(r.status(), 200);
    // Hold the stream open, then go away mid-stream.
    let mut stream = r;
    assert!(stream.chunk().await.unwrap().is_some());
    drop(stream);
    eventually("the upstream stream is cancelled", || async {
        h.mock_stats().await["in_flight"] == 0
    })
    .await;
    h.rule(json!({"latency_ms": 0})).await;
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 200);
}

fn execution_bound(mock_url: &str) -> Config {
    with_alpha(mock_url, |c| {
        c.rate_limit_overrides(json!({"executionMaxWaitMs": 400}))
    })
    .setting("upstream.first_byte_timeout_ms", 300)
}

#[tokio::test(start_paused = true)]
async fn the_execution_bound_cuts_a_hanging_stream() {
    let h = Harness::start_paused(execution_bound, &[]).await;
    h.rule(json!({"chunks": 40, "chunk_interval_ms": 100}))
        .await;
    let sent = Instant::now();
    let r = h.chat(chat_body("alpha/mock-small", true)).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let frames: Vec<&str> = text.split("\n\n").filter(|f| !f.is_empty()).collect();
    // Cut at the bound to the millisecond: the four upstream frames sent by then (one
    // every 100 ms from the start) passed, then the terminal frames: the last chunk
    // with its finish reason, the error and `[DONE]`.
    assert_eq!(sent.elapsed(), Duration::from_millis(400));
    assert_eq!(frames.len(), 7, "{frames:?}");
    assert!(
        frames[4].contains("\"finish_reason\":\"length\""),
        "{frames:?}"
    );
    assert!(
        frames[5].contains("\"code\":\"RATE_LIMIT_EXECUTION_TIMEOUT\""),
        "{frames:?}"
    );
    assert_eq!(frames[6], "data: [DONE]");
    // Cut well before the upstream's 40 frames.
    assert!(frames.len() < 20, "{} frames", frames.len());
    eventually("the upstream stream is cancelled", || async {
        h.mock_stats().await["in_flight"] == 0
    })
    .await;
    eventually("the request log records the execution timeout", || async {
        let logs: Value = h.admin_json("/api/logs").await;
        logs[0]["status"] == 504 && logs[0]["error_code"] == "RATE_LIMIT_EXECUTION_TIMEOUT"
    })
    .await;
}

#[tokio::test]
async fn queue_limits_resolve_connection_then_stored_then_env_then_default() {
    // Environment over default.
    let h = Harness::start_with(one_slot, &[("RATE_LIMIT_MAX_QUEUE_DEPTH", "1")]).await;
    let view = h.admin_json("/api/settings").await;
    let depth = view
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "requestQueue.maxQueueDepth")
        .unwrap()
        .clone();
    assert_eq!(
        (depth["value"].clone(), depth["source"].clone()),
        (json!(1), json!("env"))
    );
    // Stored over environment.
    let r = h
        .admin_send(
            Method::PUT,
            "/api/settings/requestQueue.maxQueueDepth",
            json!({"value": 2}),
        )
        .await;
    assert_eq!(r.status(), 200);
    h.rule(json!({"latency_ms": 2500})).await;
    assert_refused_beyond_depth(&h, 2).await;
    // The connection's override over the stored setting.
    let r = h
        .admin_send(
            Method::PUT,
            "/api/connections/alpha-1",
            json!({"id": "alpha-1", "provider": "alpha", "auth_class": "apikey", "max_concurrent": 1,
                   "rate_limit_overrides": {"maxQueueDepth": 1}}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_refused_beyond_depth(&h, 1).await;
}

#[tokio::test]
async fn invalid_rate_limit_overrides_are_refused_and_change_nothing() {
    let h = Harness::start().await;
    let r = h
        .admin_send(
            Method::PUT,
            "/api/connections/alpha-1",
            json!({"id": "alpha-1", "provider": "alpha", "auth_class": "apikey",
                   "rate_limit_overrides": {"modelConcurrency": {"mock-small": 0}}}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(
        e["error"]["message"],
        "connection `alpha-1` rate_limit_overrides: modelConcurrency.mock-small: must be a whole number of at least 1"
    );
    let r = h
        .admin_send(
            Method::PUT,
            "/api/connections/alpha-1",
            json!({"id": "alpha-1", "provider": "alpha", "auth_class": "apikey",
                   "rate_limit_overrides": {"maxConcurent": 2}}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let conn = h.admin_json("/api/connections/alpha-1").await;
    assert_eq!(conn["rate_limit_overrides"], Value::Null);
}

#[tokio::test]
async fn a_combo_passes_over_a_saturated_target_instead_of_waiting_for_it() {
    let h = Harness::start_with(one_slot, &[]).await;
    h.rule(json!({"match": {"credential": CRED_ALPHA}, "latency_ms": 3000}))
        .await;
    let holder = hold(&h).await;
    // alpha's one slot is taken: the combo's second target answers, nothing waits.
    let r = h.chat(chat_body("fast", false)).await;
    assert_eq!(r.status(), 200);
    let stats = h.mock_stats().await;
    assert_eq!(stats["by_credential"][CRED_BETA], 1);
    assert_eq!(stats["in_flight"], 1);
    assert_eq!(waiting_on(&h, "alpha-1").await, 0.0);
    assert_eq!(holder.await.unwrap().status(), 200);
}
