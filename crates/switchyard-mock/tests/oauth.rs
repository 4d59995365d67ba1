//! The OAuth authority over real sockets: the token endpoints rotate, the completion
//! routes refuse expired and replaced access tokens with the upstreams' 401, and a slow
//! account answers late.

#![expect(clippy::unwrap_used, reason = "test code")]

use serde_json::{json, Value};
use switchyard_mock::MockServer;

const NOW: u64 = 1_800_000_000;

async fn post(client: &reqwest::Client, url: String, body: Value) -> reqwest::Response {
    client.post(url).json(&body).send().await.unwrap()
}

#[tokio::test]
async fn tokens_rotate_expire_and_are_refused_as_the_upstreams_refuse_them() {
    let server = MockServer::start_local().await.unwrap();
    let url = |path: &str| format!("{}{path}", server.base_url());
    let client = reqwest::Client::new();
    assert_eq!(
        post(&client, url("/_mock/clock"), json!({"now": NOW}))
            .await
            .status(),
        204
    );
    let account = json!({"account": "a1", "refresh_token": "a1-rt-0", "access_token": "a1-at-0", "expires_in": 600});
    assert_eq!(
        post(&client, url("/_mock/oauth"), account).await.status(),
        204
    );
    let chat = |credential: &'static str| {
        client
            .post(url("/v1/chat/completions"))
            .bearer_auth(credential)
            .json(&json!({"model": "mock-small", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
    };
    let messages = |credential: &'static str| {
        client
            .post(url("/v1/messages"))
            .bearer_auth(credential)
            .json(&json!({"model": "claude-x", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}))
            .send()
    };
    assert_eq!(chat("a1-at-0").await.unwrap().status(), 200);

    // Claude Code's endpoint, JSON; the old access token is refused from then on.
    let r = post(
        &client,
        url("/v1/oauth/token"),
        json!({"grant_type": "refresh_token", "refresh_token": "a1-rt-0", "client_id": "c"}),
    )
    .await;
    assert_eq!(r.status(), 200);
    let tokens: Value = r.json().await.unwrap();
    assert_eq!(
        (
            &tokens["access_token"],
            &tokens["refresh_token"],
            &tokens["expires_in"]
        ),
        (&json!("a1-at-1"), &json!("a1-rt-1"), &json!(600))
    );
    let r = messages("a1-at-0").await.unwrap();
    assert_eq!(r.status(), 401);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body,
        json!({"type": "error", "error": {"type": "authentication_error", "message": "OAuth token has expired. Please obtain a new token or refresh your existing token."}})
    );
    assert_eq!(messages("a1-at-1").await.unwrap().status(), 200);

    // The used refresh token is dead; Codex's endpoint takes the live one.
    let r = post(
        &client,
        url("/oauth/token"),
        json!({"grant_type": "refresh_token", "refresh_token": "a1-rt-0"}),
    )
    .await;
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "invalid_grant");

    // Past its expiry the access token is refused as the OpenAI API refuses it.
    post(&client, url("/_mock/clock"), json!({"now": NOW + 600})).await;
    let r = chat("a1-at-1").await.unwrap();
    assert_eq!(r.status(), 401);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["error"]["message"],
        "Provided authentication token is expired. Please try signing in again."
    );
    let listed: Value = client
        .get(url("/_mock/oauth"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        listed,
        json!([{"account": "a1", "refresh_token": "a1-rt-1", "access_token": "a1-at-1", "expires_at": NOW + 600, "refreshes": 1, "reused": 1}])
    );

    // A refused account, and a reset forgets every account.
    let failing = json!({"account": "a2", "refresh_token": "a2-rt-0", "access_token": "a2-at-0", "expires_in": 600, "fail": {"status": 400, "error": "invalid_grant"}});
    post(&client, url("/_mock/oauth"), failing).await;
    let r = post(
        &client,
        url("/oauth/token"),
        json!({"grant_type": "refresh_token", "refresh_token": "a2-rt-0"}),
    )
    .await;
    assert_eq!(r.status(), 400);
    assert_eq!(
        post(&client, url("/_mock/reset"), json!({})).await.status(),
        204
    );
    assert_eq!(chat("a1-at-0").await.unwrap().status(), 200);
}
