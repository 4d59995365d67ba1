//! The mock's control surface, over real sockets.

#![expect(clippy::unwrap_used, reason = "test code")]

use serde_json::{json, Value};
use switchyard_mock::MockServer;

async fn post(client: &reqwest::Client, url: String, body: Value) -> reqwest::Response {
    client.post(url).json(&body).send().await.unwrap()
}

fn chat(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "abcd"}]})
}

async fn call(
    client: &reqwest::Client,
    mock: &MockServer,
    cred: &str,
    model: &str,
) -> reqwest::Response {
    client
        .post(format!("{}/v1/chat/completions", mock.base_url()))
        .bearer_auth(cred)
        .json(&chat(model))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn rules_match_by_credential_and_model_and_expire_after_times() {
    let mock = MockServer::start_local().await.unwrap();
    let c = reqwest::Client::new();
    let r = post(
        &c,
        format!("{}/_mock/rules", mock.base_url()),
        json!({"match": {"credential": "a", "model": "m1"}, "times": 2, "status": 503, "headers": {"retry-after": "9"}}),
    )
    .await;
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"id": 1}));
    assert_eq!(call(&c, &mock, "b", "m1").await.status(), 200);
    assert_eq!(call(&c, &mock, "a", "m2").await.status(), 200);
    let r = call(&c, &mock, "a", "m1").await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "9");
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"error": {"message": "mock injected status 503", "type": "server_error", "code": "server_error"}})
    );
    assert_eq!(call(&c, &mock, "a", "m1").await.status(), 503);
    assert_eq!(call(&c, &mock, "a", "m1").await.status(), 200);
    let stats: Value = c
        .get(format!("{}/_mock/stats", mock.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["requests_total"], 5);
    assert_eq!(stats["by_credential"], json!({"a": 4, "b": 1}));
    assert_eq!(stats["by_model"], json!({"m1": 4, "m2": 1}));
}

#[tokio::test]
async fn quota_answers_429_with_reset_headers_after_the_limit() {
    let mock = MockServer::start_local().await.unwrap();
    let c = reqwest::Client::new();
    post(
        &c,
        format!("{}/_mock/rules", mock.base_url()),
        json!({"quota": {"limit": 3, "window_ms": 60000}}),
    )
    .await;
    for remaining in [2, 1, 0] {
        let r = call(&c, &mock, "a", "m").await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-ratelimit-limit-requests"], "3");
        assert_eq!(
            r.headers()["x-ratelimit-remaining-requests"],
            remaining.to_string()
        );
    }
    let r = call(&c, &mock, "a", "m").await;
    assert_eq!(r.status(), 429);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((59..=60).contains(&retry), "{retry}");
    assert_eq!(r.headers()["x-ratelimit-remaining-requests"], "0");
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["code"],
        "rate_limit_exceeded"
    );
}

#[tokio::test]
async fn missing_credential_is_401_and_anthropic_api_is_served() {
    let mock = MockServer::start_local().await.unwrap();
    let c = reqwest::Client::new();
    let r = post(
        &c,
        format!("{}/v1/chat/completions", mock.base_url()),
        chat("m"),
    )
    .await;
    assert_eq!(r.status(), 401);
    let r = c
        .post(format!("{}/v1/messages", mock.base_url()))
        .header("x-api-key", "k")
        .json(&json!({"model": "claude-x", "max_tokens": 10, "messages": [{"role": "user", "content": "abcdefgh"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        switchyard_mock::anthropic::message("claude-x", 5, 2)
    );
    let r = c
        .post(format!("{}/v1/messages", mock.base_url()))
        .header("x-api-key", "k")
        .json(&json!({"model": "claude-x", "stream": true, "messages": [{"role": "user", "content": "abcdefgh"}]}))
        .send()
        .await
        .unwrap();
    let text = r.text().await.unwrap();
    assert!(text.starts_with("event: message_start\n"), "{text}");
    assert!(
        text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
        "{text}"
    );
    assert_eq!(text.matches("event: content_block_delta").count(), 5);
}

#[tokio::test]
async fn reset_clears_rules_and_counters() {
    let mock = MockServer::start_local().await.unwrap();
    let c = reqwest::Client::new();
    post(
        &c,
        format!("{}/_mock/rules", mock.base_url()),
        json!({"status": 500}),
    )
    .await;
    assert_eq!(call(&c, &mock, "a", "m").await.status(), 500);
    let r = c
        .post(format!("{}/_mock/reset", mock.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(call(&c, &mock, "a", "m").await.status(), 200);
    let rules: Value = c
        .get(format!("{}/_mock/rules", mock.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rules, json!({"rules": []}));
}
