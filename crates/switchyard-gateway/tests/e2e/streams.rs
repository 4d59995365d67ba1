//! Streams that stall or crawl (SPEC R11, R12), in every upstream format and every client
//! format, under paused time: a stream that fails before its first output fails over
//! with nothing sent; one that fails after ends with its client format's terminal frames.

use serde_json::{json, Value};
use std::time::Duration;
use switchyard_test_support::*;
use tokio::time::Instant;

/// The upstream formats, as the mock's providers of each speak them.
const UPSTREAMS: [&str; 3] = ["openai", "anthropic", "responses"];

/// The client formats.
const CLIENTS: [&str; 3] = ["chat", "messages", "responses"];

const FIRST_OUTPUT_MS: i64 = 2_000;
const IDLE_MS: i64 = 3_000;

/// For each upstream format, two providers on the mock (`<format>-a` with credential
/// `cred-<format>-a`, `<format>-b`), and a combo `pair-<format>` that fails over from the
/// first to the second. The first-output and idle budgets are short and fixed.
fn pairs(mock_url: &str) -> Config {
    // Without session affinity: the Codex client's session id would pin each pair to
    // the account that served after a failover (SPEC R15, tested in `affinity.rs`).
    let mut config = Config::new()
        .setting("sessionAffinityTtlMs", 0)
        .setting("streamContentStall.firstOutputMs", FIRST_OUTPUT_MS)
        .setting("streamContentStall.adaptive", false)
        .setting("streamContentStall.idleMs", IDLE_MS)
        .key(Key::new("k1", "tester", KEY))
        .key(Key::new("ops", "ops", OPS_KEY).scopes(["admin"]));
    for format in UPSTREAMS {
        for side in ["a", "b"] {
            let id = format!("{format}-{side}");
            let provider = match format {
                "openai" => Provider::openai(&id, mock_url),
                "anthropic" => Provider::anthropic(&id, mock_url),
                _ => Provider::responses(&id, mock_url),
            };
            config = config.provider(provider).connection(
                Connection::apikey(&format!("{id}-1"), &id)
                    .credential(&format!("cred-{id}"))
                    .disable_cooling(),
            );
        }
        let (a, b) = (format!("{format}-a/m"), format!("{format}-b/m"));
        config = config.combo(Combo::priority(
            &format!("pair-{format}"),
            [a.as_str(), b.as_str()],
        ));
    }
    config
}

/// Sends a streamed request for `model` in `client`'s format: status and body text.
async fn stream(h: &Harness, client: &str, model: &str) -> (u16, String) {
    answered(send(h, client, streamed_body(client, model)).await).await
}

/// `client`'s streamed body for `model`.
fn streamed_body(client: &str, model: &str) -> Value {
    match client {
        "chat" => chat_body(model, true),
        "messages" => messages_body(model, true),
        _ => responses_body(model, true),
    }
}

/// Sends `body` to `client`'s endpoint.
async fn send(h: &Harness, client: &str, body: Value) -> reqwest::Response {
    match client {
        "chat" => h.chat(body).await,
        "messages" => h.messages(body).await,
        _ => h.responses(body).await,
    }
}

/// A response's status and body text.
async fn answered(r: reqwest::Response) -> (u16, String) {
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

/// Whether `text` is a whole answer of the mock in `client`'s format.
fn whole(client: &str, text: &str) -> bool {
    match client {
        "chat" => text.ends_with("data: [DONE]\n\n") && !text.contains("{\"error\""),
        "messages" => {
            text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
                && !text.contains("event: error")
        }
        _ => text.contains("event: response.completed\n") && !text.contains("response.failed"),
    }
}

/// Asserts that `text` ends with `client`'s terminal frames for the typed `code`.
fn assert_terminal(client: &str, text: &str, code: &str, what: &str) {
    match client {
        "chat" => {
            let tail: Vec<&str> = text.trim_end().rsplit("\n\n").take(3).collect();
            assert_eq!(tail[0], "data: [DONE]", "{what}: {text}");
            let error: Value =
                serde_json::from_str(tail[1].strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(error["error"]["code"], code, "{what}");
            let last: Value =
                serde_json::from_str(tail[2].strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(last["choices"][0]["finish_reason"], "length", "{what}");
        }
        "messages" => {
            let tail: Vec<&str> = text.trim_end().rsplit("\n\n").take(2).collect();
            assert_eq!(
                tail[0], "event: message_stop\ndata: {\"type\":\"message_stop\"}",
                "{what}: {text}"
            );
            let error: Value =
                serde_json::from_str(tail[1].strip_prefix("event: error\ndata: ").unwrap())
                    .unwrap();
            assert_eq!(error["error"]["code"], code, "{what}");
        }
        _ => {
            let last = text.trim_end().rsplit("\n\n").next().unwrap();
            let failed: Value =
                serde_json::from_str(last.strip_prefix("event: response.failed\ndata: ").unwrap())
                    .unwrap_or_else(|e| panic!("{what}: {e}: {text}"));
            assert_eq!(failed["response"]["error"]["code"], code, "{what}");
            assert_eq!(failed["response"]["status"], "failed", "{what}");
        }
    }
}

/// A fresh mock whose next request on `credential` gets `rule` (a mock rule's members),
/// once.
async fn fault_once(h: &Harness, credential: &str, rule: &Value) {
    h.reset_mock().await;
    let mut rule = rule.clone();
    rule["times"] = json!(1);
    rule["match"] = json!({ "credential": credential });
    h.rule(rule).await;
}

/// Asserts the metrics exposition holds `series` (a whole sample line).
fn assert_series(metrics: &str, series: &str) {
    assert!(metrics.lines().any(|l| l == series), "{series}\n{metrics}");
}

/// Requests sent to each credential of `format`'s pair: (first, second).
async fn sent(h: &Harness, format: &str) -> (u64, u64) {
    let stats = h.mock_stats().await;
    let n = |side: &str| {
        stats["by_credential"][format!("cred-{format}-{side}")]
            .as_u64()
            .unwrap_or(0)
    };
    (n("a"), n("b"))
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_never_answers_fails_over_at_its_first_output_budget_with_nothing_sent() {
    let h = Harness::start_paused(pairs, &[]).await;
    let mut rows = 0;
    // Before any delta: silent, or with heartbeats only.
    let faults = [
        ("silent", json!({"stall_after_chunks": 0})),
        (
            "heartbeats",
            json!({"stall_after_chunks": 0, "heartbeat_ms": 500}),
        ),
    ];
    for upstream in UPSTREAMS {
        for client in CLIENTS {
            for (fault, rule) in &faults {
                let what = format!("{fault}: {client} client, {upstream} upstream");
                fault_once(&h, &format!("cred-{upstream}-a"), rule).await;
                let started = Instant::now();
                let (status, text) = stream(&h, client, &format!("pair-{upstream}")).await;
                assert_eq!(status, 200, "{what}");
                assert!(whole(client, &text), "{what}: {text}");
                assert_eq!(
                    started.elapsed(),
                    Duration::from_millis(FIRST_OUTPUT_MS.unsigned_abs()),
                    "{what}"
                );
                assert_eq!(sent(&h, upstream).await, (1, 1), "{what}");
                rows += 1;
                let row = h.newest_log_row(rows).await;
                assert_eq!(
                    (
                        row["status"].as_u64(),
                        row["attempts"].as_u64(),
                        row["connection_id"].as_str()
                    ),
                    (Some(200), Some(2), Some(format!("{upstream}-b-1").as_str())),
                    "{what}: {row}"
                );
                assert_eq!(
                    row["failed_attempts"],
                    json!([{"provider": format!("{upstream}-a"), "connection_id": format!("{upstream}-a-1"),
                            "model": "m", "outcome": "first_output_timeout", "cause": "stream_stall",
                            "egress_ip": "127.0.0.1"}]),
                    "{what}"
                );
                eventually("the abandoned upstream request is closed", || async {
                    h.mock_stats().await["in_flight"] == 0
                })
                .await;
            }
        }
    }
    let metrics = h.metrics().await;
    for upstream in UPSTREAMS {
        for series in [
            format!(
                r#"switchyard_upstream_attempts_total{{provider="{upstream}-a",outcome="first_output_timeout"}} 6"#
            ),
            format!(
                r#"switchyard_stream_cuts_total{{provider="{upstream}-a",cut="first_output_timeout",phase="before_commit"}} 6"#
            ),
        ] {
            assert_series(&metrics, &series);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_stalls_after_answering_ends_with_its_formats_terminal_frames() {
    let h = Harness::start_paused(pairs, &[]).await;
    let mut rows = 0;
    for upstream in UPSTREAMS {
        for client in CLIENTS {
            let what = format!("{client} client, {upstream} upstream");
            let rule = json!({"stall_after_chunks": 2, "heartbeat_ms": 500});
            fault_once(&h, &format!("cred-{upstream}-a"), &rule).await;
            let started = Instant::now();
            let (status, text) = stream(&h, client, &format!("pair-{upstream}")).await;
            assert_eq!(status, 200, "{what}");
            assert_terminal(client, &text, "upstream_output_idle_timeout", &what);
            // Cut the idle budget after the second delta, which came at once.
            assert_eq!(
                started.elapsed(),
                Duration::from_millis(IDLE_MS.unsigned_abs()),
                "{what}"
            );
            // Committed: no replay on the second provider.
            assert_eq!(sent(&h, upstream).await, (1, 0), "{what}");
            rows += 1;
            let row = h.newest_log_row(rows).await;
            assert_eq!(
                (
                    row["status"].as_u64(),
                    row["error_code"].as_str(),
                    row["attempts"].as_u64()
                ),
                (Some(200), Some("upstream_output_idle_timeout"), Some(1)),
                "{what}: {row}"
            );
            // The committed attempt's own verdict.
            assert_eq!(
                row["failed_attempts"],
                json!([{"provider": format!("{upstream}-a"), "connection_id": format!("{upstream}-a-1"),
                        "model": "m", "outcome": "output_idle_timeout", "cause": "stream_stall",
                        "egress_ip": "127.0.0.1", "committed": true}]),
                "{what}"
            );
            eventually("the stalled upstream request is closed", || async {
                h.mock_stats().await["in_flight"] == 0
            })
            .await;
        }
    }
    // Each cut counted against its provider's breaker, without cooling the connection.
    let health = h.health().await;
    for upstream in UPSTREAMS {
        let breaker = health["breakers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["provider"] == format!("{upstream}-a"))
            .unwrap_or_else(|| panic!("{upstream}: {health}"))
            .clone();
        assert_eq!(breaker["failures"], 3, "{upstream}: {breaker}");
    }
    let metrics = h.metrics().await;
    for upstream in UPSTREAMS {
        let series = format!(
            r#"switchyard_stream_cuts_total{{provider="{upstream}-a",cut="output_idle_timeout",phase="after_commit"}} 3"#
        );
        assert_series(&metrics, &series);
    }
    assert!(!metrics.contains("phase=\"before_commit\""), "{metrics}");
}

#[tokio::test(start_paused = true)]
async fn the_last_candidate_is_never_cut_for_its_first_output() {
    let h = Harness::start_paused(pairs, &[]).await;
    // Direct to one provider: nothing to fail over to, so a slow start is waited out.
    h.rule(json!({"times": 1, "latency_ms": 10_000})).await;
    let started = Instant::now();
    let (status, text) = stream(&h, "chat", "openai-a/m").await;
    assert_eq!(status, 200);
    assert!(whole("chat", &text), "{text}");
    assert_eq!(started.elapsed(), Duration::from_millis(10_000));
}

/// [`pairs`] with the throughput watchdog on (no warm-up, a 2 s window, 10 bytes a
/// second) and a first-output budget long enough to leave it the judging.
fn crawling(mock_url: &str) -> Config {
    pairs(mock_url)
        .setting("streamContentStall.firstOutputMs", 60_000)
        .setting("streamThroughputWatchdog.enabled", true)
        .setting("streamThroughputWatchdog.warmupMs", 0)
        .setting("streamThroughputWatchdog.windowMs", 2_000)
        .setting("streamThroughputWatchdog.minBytesPerSecond", 10)
}

#[tokio::test(start_paused = true)]
async fn a_crawl_is_retried_once_on_the_same_account_before_it_commits_and_cut_after() {
    let h = Harness::start_paused(crawling, &[]).await;
    let mut rows = 0;
    for upstream in UPSTREAMS {
        for client in CLIENTS {
            let what = format!("{client} client, {upstream} upstream");
            let credential = format!("cred-{upstream}-a");
            // Nothing in the first window: abandoned unseen, the same account again.
            fault_once(&h, &credential, &json!({"chunk_interval_ms": 5_000})).await;
            let started = Instant::now();
            let (status, text) = stream(&h, client, &format!("pair-{upstream}")).await;
            assert_eq!(status, 200, "{what}");
            assert!(whole(client, &text), "{what}: {text}");
            assert_eq!(started.elapsed(), Duration::from_millis(2_000), "{what}");
            assert_eq!(sent(&h, upstream).await, (2, 0), "{what}");
            rows += 1;
            let row = h.newest_log_row(rows).await;
            assert_eq!(row["attempts"], 2, "{what}: {row}");
            assert_eq!(
                row["failed_attempts"],
                json!([{"provider": format!("{upstream}-a"), "connection_id": format!("{upstream}-a-1"),
                        "model": "m", "outcome": "throughput_low", "cause": "stream_stall",
                        "egress_ip": "127.0.0.1"}]),
                "{what}"
            );
            // A delta every 1.5 s (about 5 bytes each): under 10 bytes a second over the
            // window once it has answered, so cut at the end of the first window.
            fault_once(&h, &credential, &json!({"chunk_interval_ms": 1_500})).await;
            let started = Instant::now();
            let (status, text) = stream(&h, client, &format!("pair-{upstream}")).await;
            assert_eq!(status, 200, "{what}");
            assert_terminal(client, &text, "upstream_throughput_low", &what);
            assert_eq!(started.elapsed(), Duration::from_millis(2_000), "{what}");
            assert_eq!(sent(&h, upstream).await, (1, 0), "{what}");
            rows += 1;
            let row = h.newest_log_row(rows).await;
            assert_eq!(
                row["error_code"], "upstream_throughput_low",
                "{what}: {row}"
            );
        }
    }
    // A crawl is not the provider's failure: no breaker moved.
    assert_eq!(h.health().await["breakers"], json!([]));
    let metrics = h.metrics().await;
    for upstream in UPSTREAMS {
        for phase in ["before_commit", "after_commit"] {
            let series = format!(
                r#"switchyard_stream_cuts_total{{provider="{upstream}-a",cut="throughput_low",phase="{phase}"}} 3"#
            );
            assert_series(&metrics, &series);
        }
    }
}

/// `client`'s streamed body for `model` asking the model to think.
fn thinking_body(client: &str, model: &str) -> Value {
    let mut b = streamed_body(client, model);
    let (member, ask) = match client {
        "chat" => ("reasoning_effort", json!("high")),
        "messages" => ("thinking", json!({"type": "enabled", "budget_tokens": 512})),
        _ => ("reasoning", json!({"effort": "high"})),
    };
    b[member] = ask;
    b
}

#[tokio::test(start_paused = true)]
async fn a_turn_that_only_reasons_is_still_empty_and_is_cut_when_its_reasoning_stops() {
    let h = Harness::start_paused(pairs, &[]).await;
    let mut rows = 0;
    for upstream in UPSTREAMS {
        for client in CLIENTS {
            let what = format!("{client} client, {upstream} upstream");
            // The mock's thinking is three deltas, 500 ms apart; then it stalls.
            let rule = json!({"stall_after_chunks": 3, "chunk_interval_ms": 500});
            fault_once(&h, &format!("cred-{upstream}-a"), &rule).await;
            let started = Instant::now();
            let (status, text) = think(&h, client, &format!("pair-{upstream}")).await;
            assert_eq!(status, 200, "{what}");
            assert_terminal(client, &text, "upstream_first_output_timeout", &what);
            // Each reasoning delta restarted the first-output budget: cut one budget
            // after the last of them, not one after the request.
            assert_eq!(
                started.elapsed(),
                Duration::from_millis(1_500 + FIRST_OUTPUT_MS.unsigned_abs()),
                "{what}"
            );
            // The reasoning reached the client: committed, so not replayed elsewhere.
            assert_eq!(sent(&h, upstream).await, (1, 0), "{what}");
            rows += 1;
            let row = h.newest_log_row(rows).await;
            assert_eq!(
                row["error_code"], "upstream_first_output_timeout",
                "{what}: {row}"
            );
        }
    }
    let metrics = h.metrics().await;
    for upstream in UPSTREAMS {
        let series = format!(
            r#"switchyard_stream_cuts_total{{provider="{upstream}-a",cut="first_output_timeout",phase="after_commit"}} 3"#
        );
        assert_series(&metrics, &series);
    }
}

/// Sends `client`'s streamed thinking request for `model`: status and body text.
async fn think(h: &Harness, client: &str, model: &str) -> (u16, String) {
    answered(send(h, client, thinking_body(client, model)).await).await
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_opens_a_thinking_block_and_stalls_has_not_started() {
    // What Claude Code met: a thinking model's stream that sends its head — a thinking
    // block's start, a reasoning item — and then only pings. Nothing was said: it fails
    // over unseen at the first-output budget.
    let h = Harness::start_paused(pairs, &[]).await;
    for upstream in UPSTREAMS {
        for client in CLIENTS {
            let what = format!("{client} client, {upstream} upstream");
            let rule = json!({"stall_after_chunks": 0, "heartbeat_ms": 500});
            fault_once(&h, &format!("cred-{upstream}-a"), &rule).await;
            let started = Instant::now();
            let (status, text) = think(&h, client, &format!("pair-{upstream}")).await;
            assert_eq!(status, 200, "{what}");
            assert!(whole(client, &text), "{what}: {text}");
            assert_eq!(
                started.elapsed(),
                Duration::from_millis(FIRST_OUTPUT_MS.unsigned_abs()),
                "{what}"
            );
            assert_eq!(sent(&h, upstream).await, (1, 1), "{what}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_last_candidate_that_reasons_and_then_stalls_is_cut_at_the_idle_budget() {
    // Nothing to fail over to, so no first-output budget; but once it has reasoned, a
    // stall is bounded by the idle budget rather than the ten-minute total.
    let h = Harness::start_paused(pairs, &[]).await;
    for upstream in UPSTREAMS {
        for client in CLIENTS {
            let what = format!("{client} client, {upstream} upstream");
            h.reset_mock().await;
            h.rule(
                json!({"times": 1, "stall_after_chunks": 3, "chunk_interval_ms": 500,
                          "heartbeat_ms": 1000}),
            )
            .await;
            let started = Instant::now();
            let (status, text) = think(&h, client, &format!("{upstream}-a/m")).await;
            assert_eq!(status, 200, "{what}");
            assert_terminal(client, &text, "upstream_output_idle_timeout", &what);
            assert_eq!(
                started.elapsed(),
                Duration::from_millis(1_500 + IDLE_MS.unsigned_abs()),
                "{what}"
            );
        }
    }
}

/// [`crawling`] with a quota pool metering requests over both sides of `pair-openai`,
/// each of whose connections takes one request at a time (a slot not given back would
/// hold the next request).
fn pooled(mock_url: &str) -> Config {
    crawling(mock_url)
        .edit_connection("openai-a-1", |c| c.max_concurrent(1))
        .edit_connection("openai-b-1", |c| c.max_concurrent(1))
        .quota_pool(
            QuotaPool::new("team", "Team", ["openai-a-1", "openai-b-1"])
                .dimension(Dimension::new("requests", "daily", 1000))
                .allocation(Allocation::new("k1")),
        )
}

#[tokio::test(start_paused = true)]
async fn every_stream_settles_its_quota_once_however_its_attempts_ended() {
    let h = Harness::start_paused(pooled, &[]).await;
    let credential = "cred-openai-a";
    let faults = [
        // Silent: fails over to the second account at the first-output budget.
        json!({"stall_after_chunks": 0}),
        // Stalls after answering: cut after the commit.
        json!({"stall_after_chunks": 2}),
        // Crawls before answering: the same account once more.
        json!({"chunk_interval_ms": 5_000}),
        // Crawls after answering: cut after the commit.
        json!({"chunk_interval_ms": 1_500}),
    ];
    for (i, fault) in faults.iter().enumerate() {
        fault_once(&h, credential, fault).await;
        let (status, _) = stream(&h, "chat", "pair-openai").await;
        assert_eq!(status, 200, "{fault}");
        h.newest_log_row(i + 1).await;
    }
    eventually("every request is settled", || async {
        let usage: Value = h.admin_json("/api/quota/pools/team/usage").await;
        usage["dimensions"][0]["globalUsed"] == 4.0
    })
    .await;
    let usage: Value = h.admin_json("/api/quota/pools/team/usage").await;
    assert_eq!(usage["dimensions"][0]["keys"][0]["consumed"], 4.0);
    let metrics = h.metrics().await;
    assert_series(&metrics, "switchyard_quota_reservations_open 0");
    // Every slot was given back: each account takes a request at once, and no request
    // is in flight.
    h.reset_mock().await;
    for model in ["openai-a/m", "openai-b/m"] {
        let started = Instant::now();
        let (status, text) = stream(&h, "chat", model).await;
        assert_eq!(status, 200, "{model}");
        assert!(whole("chat", &text), "{model}: {text}");
        assert_eq!(started.elapsed(), Duration::ZERO, "{model}");
    }
    assert_eq!(sent(&h, "openai").await, (1, 1));
    let metrics = h.metrics().await;
    assert_series(&metrics, "switchyard_requests_in_flight 0");
}

#[tokio::test]
async fn a_client_that_goes_away_mid_stream_is_not_counted_against_the_provider() {
    // Real time, and an idle budget no test run reaches, so only the client ends it.
    let h = Harness::start_with(
        |mock_url| pairs(mock_url).setting("streamContentStall.idleMs", 600_000),
        &[],
    )
    .await;
    for client in CLIENTS {
        h.rule(json!({"times": 1, "stall_after_chunks": 2})).await;
        let mut r = send(&h, client, streamed_body(client, "openai-a/m")).await;
        assert_eq!(r.status(), 200, "{client}");
        let first = r.chunk().await.unwrap().unwrap();
        assert!(!first.is_empty(), "{client}");
        drop(r);
        eventually("the abandoned upstream request is closed", || async {
            h.mock_stats().await["in_flight"] == 0
        })
        .await;
    }
    let path = "/api/logs?limit=3";
    eventually("the requests are logged", || async {
        let logs: Value = h.admin_json(path).await;
        logs.as_array().is_some_and(|l| l.len() == 3)
    })
    .await;
    let logs: Value = h.admin_json(path).await;
    for row in logs.as_array().unwrap() {
        assert_eq!(
            (row["status"].as_u64(), row["error_code"].as_str()),
            (Some(499), Some("client_closed_request")),
            "{row}"
        );
        assert_eq!(row["failed_attempts"], json!([]), "{row}");
    }
    // No breaker moved, no cut was counted, the connection is not cooling.
    let health = h.health().await;
    assert_eq!(health["breakers"], json!([]), "{health}");
    let metrics = h.metrics().await;
    assert!(
        !metrics.contains("switchyard_stream_cuts_total{"),
        "{metrics}"
    );
    assert_series(
        &metrics,
        r#"switchyard_upstream_attempts_total{provider="openai-a",outcome="success"} 3"#,
    );
}

#[tokio::test(start_paused = true)]
async fn a_providers_own_deadlines_replace_the_settings_for_its_streams() {
    let h = Harness::start_paused(pairs, &[]).await;
    let path = "/api/providers/openai-a";
    let mut record = json!({"id": "openai-a", "format": "openai", "base_url": h.mock.base_url(),
                            "stream_timeouts": {"first_output_ms": 500}});
    let r = h
        .admin_send(reqwest::Method::PUT, path, record.clone())
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    h.rule(json!({"times": 1, "stall_after_chunks": 0, "match": {"credential": "cred-openai-a"}}))
        .await;
    let started = Instant::now();
    let (status, text) = stream(&h, "chat", "pair-openai").await;
    assert_eq!(status, 200);
    assert!(whole("chat", &text), "{text}");
    // The provider's 500 ms, not the setting's 2 s.
    assert_eq!(started.elapsed(), Duration::from_millis(500));
    assert_eq!(sent(&h, "openai").await, (1, 1));
    // A deadline out of its setting's range is refused, and nothing changes.
    record["stream_timeouts"] = json!({"first_output_ms": 500, "first_output_max_ms": 5});
    let r = h.admin_send(reqwest::Method::PUT, path, record).await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["error"]["message"],
        "provider `openai-a` stream_timeouts.first_output_max_ms: must be a whole number of milliseconds from 1000 to 86400000"
    );
    assert_eq!(
        h.admin_json(path).await["stream_timeouts"],
        json!({"first_output_ms": 500})
    );
}
