//! Upstream failures: typed errors and priority-combo failover.

use serde_json::{json, Value};
use switchyard_test_support::*;

fn single_provider(mock_url: &str) -> Config {
    Config::new()
        .setting("upstream.first_byte_timeout_ms", 400)
        .provider(Provider::openai("solo", mock_url))
        .provider(Provider::openai("dead", "http://127.0.0.1:9"))
        .connection(
            Connection::apikey("solo-1", "solo")
                .credential(CRED_ALPHA)
                .disable_cooling(),
        )
        .connection(Connection::apikey("dead-1", "dead").credential("x"))
        .key(Key::new("k1", "tester", KEY))
}

/// The mock's stream of model `m` up to its first two content chunks, then the
/// terminal frames of a chat stream cut with `error` (a JSON error object): the last
/// chunk with finish reason `length`, the error, and `[DONE]`.
fn two_chunks_then(error: &str) -> String {
    use switchyard_mock::openai::{stream_content, stream_head};
    format!(
        "{}{}{}data: {{\"id\":\"chatcmpl-mock\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"length\"}}]}}\n\ndata: {error}\n\ndata: [DONE]\n\n",
        stream_head("m"),
        stream_content("m", 0),
        stream_content("m", 1)
    )
}

#[tokio::test]
async fn upstream_5xx_timeout_reset_and_connect_errors_map_to_typed_errors() {
    let h = Harness::start_with(single_provider, &[]).await;
    h.rule(json!({"times": 1, "status": 503})).await;
    let (s, e) = status_and_json(h.chat(chat_body("solo/m", false)).await).await;
    assert_eq!(s, 502);
    assert_eq!(e["error"]["code"], "upstream_error");
    assert_eq!(e["error"]["type"], "upstream_error");
    assert_eq!(e["error"]["upstream_status"], 503);
    assert_eq!(
        e["error"]["message"],
        "upstream `solo` (connection `solo-1`) answered HTTP 503"
    );

    h.rule(json!({"times": 1, "latency_ms": 3000})).await;
    let (s, e) = status_and_json(h.chat(chat_body("solo/m", false)).await).await;
    assert_eq!(
        (s, e["error"]["code"].as_str().unwrap()),
        (504, "upstream_timeout")
    );

    h.rule(json!({"times": 1, "reset": "before_headers"})).await;
    let (s, e) = status_and_json(h.chat(chat_body("solo/m", false)).await).await;
    assert_eq!(
        (s, e["error"]["code"].as_str().unwrap()),
        (502, "upstream_connection_reset")
    );

    let (s, e) = status_and_json(h.chat(chat_body("dead/m", false)).await).await;
    assert_eq!(
        (s, e["error"]["code"].as_str().unwrap()),
        (502, "upstream_unavailable")
    );

    h.rule(json!({"times": 1, "status": 429, "headers": {"retry-after": "17"}}))
        .await;
    let r = h.chat(chat_body("solo/m", false)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "17");
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "upstream_rate_limited");
    assert_eq!(e["error"]["type"], "rate_limit_error");

    // After the scripted faults are used up the same route works again.
    assert_eq!(h.chat(chat_body("solo/m", false)).await.status(), 200);
}

#[tokio::test]
async fn mid_stream_reset_ends_the_client_stream_with_a_typed_error_frame() {
    let h = Harness::start_with(single_provider, &[]).await;
    h.rule(json!({"times": 1, "reset_after_chunks": 2, "chunk_interval_ms": 30}))
        .await;
    let r = h.chat(chat_body("solo/m", true)).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert_eq!(
        text,
        two_chunks_then("{\"error\":{\"message\":\"upstream connection broke during the stream\",\"type\":\"upstream_error\",\"code\":\"upstream_connection_reset\",\"param\":null}}")
    );
}

#[tokio::test]
async fn priority_combo_fails_over_on_retryable_errors() {
    let h = Harness::start().await;
    for status in [500, 502, 503, 504, 429] {
        h.rule(json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": status}))
            .await;
        let r = h.chat(chat_body("fast", false)).await;
        assert_eq!(r.status(), 200, "after alpha answered {status}");
    }
    h.rule(json!({"times": 1, "match": {"credential": CRED_ALPHA}, "reset": "before_headers"}))
        .await;
    assert_eq!(h.chat(chat_body("fast", true)).await.status(), 200);
    h.rule(json!({"times": 1, "match": {"credential": CRED_ALPHA}, "latency_ms": 3000}))
        .await;
    let h_settings = h
        .admin_send(
            reqwest::Method::PUT,
            "/api/settings/upstream.first_byte_timeout_ms",
            json!({"value": 300}),
        )
        .await;
    assert_eq!(h_settings.status(), 200);
    assert_eq!(h.chat(chat_body("fast", false)).await.status(), 200);
    let stats = h.mock_stats().await;
    assert_eq!(stats["by_credential"][CRED_ALPHA], 7);
    assert_eq!(stats["by_credential"][CRED_BETA], 7);
}

#[tokio::test]
async fn priority_combo_returns_non_retryable_errors_as_they_are() {
    let h = Harness::start().await;
    let body = json!({"error": {"message": "bad tool schema", "type": "invalid_request_error", "code": "bad_schema"}});
    h.rule(json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 400, "body": body.clone()}))
        .await;
    let r = h.chat(chat_body("fast", false)).await;
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap(), body);
    h.rule(json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 401}))
        .await;
    let r = h.chat(chat_body("fast", false)).await;
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["message"],
        "mock injected status 401"
    );
    let stats = h.mock_stats().await;
    assert_eq!(stats["by_credential"][CRED_ALPHA], 2);
    assert!(stats["by_credential"].get(CRED_BETA).is_none());
}

#[tokio::test]
async fn when_every_target_fails_the_last_failure_is_reported() {
    let h = Harness::start().await;
    h.rule(json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 503}))
        .await;
    h.rule(json!({"times": 1, "match": {"credential": CRED_BETA}, "status": 500}))
        .await;
    let r = h.chat(chat_body("fast", false)).await;
    assert_eq!(r.status(), 502);
    let e: Value = r.json().await.unwrap();
    assert_eq!(
        e["error"]["message"],
        "upstream `beta` (connection `beta-1`) answered HTTP 500"
    );
    assert_eq!(e["error"]["upstream_status"], 500);
}

#[tokio::test]
async fn disabled_connections_are_excluded_with_diagnostics() {
    let h = Harness::start().await;
    let r = h
        .admin_send(
            reqwest::Method::PUT,
            "/api/connections/alpha-1",
            json!({"id": "alpha-1", "provider": "alpha", "auth_class": "apikey", "enabled": false}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 404);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"],
        json!({
            "message": "no executable target for model `alpha/mock-small`: every candidate was excluded",
            "type": "invalid_request_error",
            "code": "no_executable_targets",
            "param": null,
            "diagnostics": {"excluded": [{"target": "alpha/mock-small", "connection": "alpha-1", "reason": "disabled"}]}
        })
    );
    // The combo skips the disabled connection and serves from beta.
    assert_eq!(h.chat(chat_body("fast", false)).await.status(), 200);
    assert_eq!(h.mock_stats().await["by_credential"][CRED_BETA], 1);
}

#[tokio::test]
async fn a_provider_with_several_connections_fails_over_between_them() {
    fn two_conns(mock_url: &str) -> Config {
        Config::new()
            .provider(Provider::openai("multi", mock_url))
            .connection(Connection::oauth("m-1", "multi").credential("cred-m-1"))
            .connection(Connection::oauth("m-2", "multi").credential("cred-m-2"))
            .key(Key::new("k1", "tester", KEY))
    }
    let h = Harness::start_with(two_conns, &[]).await;
    for _ in 0..4 {
        assert_eq!(h.chat(chat_body("multi/x", false)).await.status(), 200);
    }
    let stats = h.mock_stats().await;
    assert_eq!(stats["by_credential"]["cred-m-1"], 2);
    assert_eq!(stats["by_credential"]["cred-m-2"], 2);
    h.rule(json!({"match": {"credential": "cred-m-1"}, "status": 503}))
        .await;
    for _ in 0..4 {
        assert_eq!(h.chat(chat_body("multi/x", false)).await.status(), 200);
    }
    let stats = h.mock_stats().await;
    assert_eq!(stats["by_credential"]["cred-m-2"], 6);
}

#[tokio::test]
async fn models_a_provider_does_not_declare_share_one_metric_label() {
    let h = Harness::start_with(single_provider, &[]).await;
    for model in ["free-form-1", "free-form-2"] {
        assert_eq!(
            h.chat(chat_body(&format!("solo/{model}"), false))
                .await
                .status(),
            200
        );
    }
    let text = h.metrics().await;
    assert!(
        text.contains(r#"switchyard_requests_total{status="200",provider="solo",model="other"} 2"#),
        "{text}"
    );
    assert!(!text.contains("free-form"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_falls_silent_is_cut_with_a_typed_error_frame() {
    let h = Harness::start_paused(
        single_provider,
        &[("SWITCHYARD_UPSTREAM_STREAM_IDLE_TIMEOUT_MS", "300")],
    )
    .await;
    h.rule(json!({"times": 1, "stall_after_chunks": 2})).await;
    let sent = tokio::time::Instant::now();
    let r = h.chat(chat_body("solo/m", true)).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    // Cut when the idle timeout ran out after the second chunk, to the millisecond.
    assert_eq!(sent.elapsed(), std::time::Duration::from_millis(300));
    assert_eq!(
        text,
        two_chunks_then("{\"error\":{\"message\":\"upstream stream stalled\",\"type\":\"upstream_error\",\"code\":\"upstream_stream_idle_timeout\",\"param\":null}}")
    );
    eventually("the stalled upstream request is closed", || async {
        h.mock_stats().await["in_flight"] == 0
    })
    .await;
}

#[tokio::test]
async fn an_upstream_200_that_is_not_json_or_not_a_stream_fails_over_and_counts() {
    let h = Harness::start().await;
    // Non-streaming: an HTML page with 200 is no completion; beta answers instead.
    h.rule(json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 200, "body": "<html>maintenance</html>"}))
        .await;
    let r = h.chat(chat_body("fast", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.unwrap()["choices"][0]["message"]["content"],
        "Hello from the Switchyard mock"
    );
    // Streaming: a 200 that is not an event stream fails over the same way.
    h.rule(json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 200, "body": "{\"not\":\"a stream\"}"}))
        .await;
    let r = h.chat(chat_body("fast", true)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    assert!(r.text().await.unwrap().ends_with("data: [DONE]\n\n"));
    let stats = h.mock_stats().await;
    assert_eq!(
        (
            stats["by_credential"][CRED_ALPHA].as_u64(),
            stats["by_credential"][CRED_BETA].as_u64()
        ),
        (Some(2), Some(2))
    );
    // Direct, with nothing to fail over to: a typed 502.
    h.rule(json!({"times": 1, "status": 200, "body": "not json"}))
        .await;
    let (s, e) = status_and_json(h.chat(chat_body("alpha/mock-small", false)).await).await;
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (502, Some("upstream_invalid_response"))
    );
    // Each counts against the provider like a 502.
    let health: Value = h.health().await;
    let alpha = health["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["provider"] == "alpha")
        .unwrap()
        .clone();
    assert_eq!(alpha["failures"], 3);
    let metrics = h.metrics().await;
    assert!(
        metrics.contains(
            r#"switchyard_upstream_attempts_total{provider="alpha",outcome="invalid_response"} 3"#
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_stream_that_ends_without_done_or_finish_reason_gets_a_truncation_frame() {
    let h = Harness::start_with(single_provider, &[]).await;
    h.rule(json!({"times": 1, "end_after_chunks": 2})).await;
    let r = h.chat(chat_body("solo/m", true)).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert_eq!(
        text,
        two_chunks_then("{\"error\":{\"message\":\"the upstream ended the stream before the answer was complete\",\"type\":\"upstream_error\",\"code\":\"upstream_stream_truncated\",\"param\":null}}")
    );
    // A whole stream gets no such frame.
    let r = h.chat(chat_body("solo/m", true)).await;
    assert!(r.text().await.unwrap().ends_with("data: [DONE]\n\n"));
    eventually("the truncated stream is logged", || async {
        let logs: Value = h.admin_json("/api/logs?limit=2").await;
        logs.as_array().is_some_and(|l| l.len() == 2)
            && logs[1]["error_code"] == "upstream_stream_truncated"
            && logs[1]["status"] == 200
            && logs[0]["error_code"].is_null()
    })
    .await;
}

#[tokio::test]
async fn relayed_upstream_error_bodies_never_carry_the_credential() {
    let h = Harness::start_with(single_provider, &[]).await;
    let echo = format!(
        r#"{{"error":{{"message":"key {CRED_ALPHA} is not allowed; you sent Authorization: Bearer {CRED_ALPHA} and sk-proj-abcdefghijklmnopqrstuv"}}}}"#
    );
    h.rule(json!({"times": 1, "status": 403, "body": echo}))
        .await;
    let r = h.chat(chat_body("solo/m", false)).await;
    assert_eq!(r.status(), 403);
    let text = r.text().await.unwrap();
    assert_eq!(
        text,
        r#"{"error":{"message":"key [REDACTED] is not allowed; you sent Authorization: Bearer [REDACTED] and [REDACTED]"}}"#
    );
}

#[tokio::test]
async fn a_502_says_when_the_soonest_candidate_is_usable_again() {
    let h = Harness::start_with(crate::resilience::cooling, &[]).await;
    h.rule(json!({"times": 2, "status": 503})).await;
    // Both combo targets fail and cool down (API key: 3 s at the first level).
    let r = h.chat(chat_body("fast", false)).await;
    assert_eq!(r.status(), 502);
    let retry = retry_after(&r);
    assert_eq!(retry, 3);
    // A connection that does not cool down is usable at once: come back in a second.
    h.rule(json!({"times": 1, "status": 503})).await;
    let r = h.chat(chat_body("local/m", false)).await;
    assert_eq!(r.status(), 502);
    assert_eq!(r.headers()["retry-after"], "1");
}
