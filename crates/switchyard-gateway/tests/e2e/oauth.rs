//! OAuth subscription connections (SPEC R4) against the mock's OAuth authority: the
//! CLIs' credential files imported, tokens refreshed before they expire and after a
//! 401 (with the attempt made again), one refresh for many requests, rotation, and three
//! failed refreshes ending in `expired` until a manual refresh succeeds. No answer
//! carries a token.

use reqwest::Method;
use serde_json::{json, Value};
use switchyard_test_support::*;

/// The mock's clock when a test sets it (Unix seconds).
const MOCK_NOW: u64 = 1_800_000_000;

fn config(mock: &str) -> Config {
    Config::standard(mock)
        .provider(Provider::anthropic("plan", mock).models(["claude-opus"]))
        .provider(Provider::responses("chatgpt", mock).models(["gpt-5-codex"]))
}

fn now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::UNIX_EPOCH
            .elapsed()
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// Claude Code's `.credentials.json` with these tokens.
fn claude_file(access: &str, refresh: &str, expires_at: u64) -> String {
    json!({"claudeAiOauth": {"accessToken": access, "refreshToken": refresh, "expiresAt": expires_at, "scopes": ["user:inference", "user:profile"], "subscriptionType": "max"}}).to_string()
}

/// Imports Claude Code's credentials as connection `sub` of provider `plan`, refreshed
/// at the mock.
async fn import(h: &Harness, access: &str, refresh: &str, expires_at: u64) -> reqwest::Response {
    let body = json!({
        "cli": "claude",
        "connection": "sub",
        "provider": "plan",
        "file": claude_file(access, refresh, expires_at),
        "token_url": format!("{}/v1/oauth/token", h.mock.base_url()),
    });
    h.admin_send(Method::POST, "/api/oauth/import", body).await
}

/// The mock's view of account `sub`: tokens, refreshes, reused refresh tokens.
async fn mock_account(h: &Harness) -> Value {
    h.mock_oauth_accounts().await.swap_remove(0)
}

async fn set_mock_clock(h: &Harness, now: u64) {
    let r = h
        .http
        .post(format!("{}/_mock/clock", h.mock.base_url()))
        .json(&json!({"now": now}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
}

/// Connection `sub`'s refresh state.
async fn state(h: &Harness) -> Value {
    let list = h.admin_list("/api/oauth").await;
    list.into_iter()
        .find(|r| r["connection_id"] == "sub")
        .unwrap()
}

async fn ask(h: &Harness) -> reqwest::Response {
    h.messages(messages_body("plan/claude-opus", false)).await
}

#[tokio::test]
async fn a_token_expiring_within_the_margin_is_refreshed_and_the_old_refresh_token_is_dead() {
    let h = Harness::start_with(config, &[]).await;
    h.mock_oauth(json!({"account": "sub", "refresh_token": "sub-rt-0", "access_token": "sub-at-0", "expires_in": 600})).await;
    // Two minutes left: inside the default five-minute margin.
    let r = import(&h, "sub-at-0", "sub-rt-0", now_ms() + 120_000).await;
    assert_eq!(r.status(), 201);
    let text = r.text().await.unwrap();
    assert!(
        !text.contains("sub-at-0") && !text.contains("sub-rt-0"),
        "{text}"
    );
    let created: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (&created["auth_class"], &created["has_credential"]),
        (&json!("oauth"), &json!(true))
    );
    assert_eq!(state(&h).await["last_refresh_at"], Value::Null);

    // The request goes with the token it has; the refresh runs beside it.
    assert_eq!(ask(&h).await.status(), 200);
    assert_eq!(h.by_credential("sub-at-0").await, 1);
    // Counted once the new tokens are in the gateway's snapshot.
    let refreshes = r#"switchyard_oauth_refreshes_total{connection="sub",outcome="refreshed"}"#;
    eventually("the refresh is done", || async {
        h.metric(refreshes).await == Some(1.0)
    })
    .await;
    assert_eq!(mock_account(&h).await["refreshes"], 1);
    let after = state(&h).await;
    let expires_in = after["expires_at"].as_u64().unwrap() - now_ms();
    assert!((590_000..=600_000).contains(&expires_in), "{after}");
    assert_eq!(
        (&after["failures"], &after["last_error"]),
        (&json!(0), &Value::Null)
    );
    assert_eq!(ask(&h).await.status(), 200);
    assert_eq!(h.by_credential("sub-at-1").await, 1);
    assert_eq!(h.by_credential("sub-at-0").await, 1);
    // Rotation: the gateway never used a dead refresh token, and the old one is dead.
    let mock = mock_account(&h).await;
    assert_eq!(
        (&mock["refresh_token"], &mock["reused"]),
        (&json!("sub-rt-1"), &json!(0))
    );
    let r = h
        .http
        .post(format!("{}/v1/oauth/token", h.mock.base_url()))
        .json(&json!({"grant_type": "refresh_token", "refresh_token": "sub-rt-0"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "invalid_grant");
    // No API answer shows a token.
    for path in ["/api/connections", "/api/oauth", "/api/connections/sub"] {
        let text = h.admin_get(path).await.text().await.unwrap();
        for token in ["sub-at-0", "sub-rt-0", "sub-at-1", "sub-rt-1"] {
            assert!(!text.contains(token), "{path}: {text}");
        }
    }
}

#[tokio::test]
async fn a_401_refreshes_the_token_and_the_attempt_is_made_again_once() {
    let h = Harness::start_with(config, &[]).await;
    set_mock_clock(&h, MOCK_NOW).await;
    h.mock_oauth(json!({"account": "sub", "refresh_token": "sub-rt-0", "access_token": "sub-at-0", "expires_in": 600})).await;
    // The file says the token is good for a day; the upstream knows better.
    assert_eq!(
        import(&h, "sub-at-0", "sub-rt-0", now_ms() + 86_400_000)
            .await
            .status(),
        201
    );
    set_mock_clock(&h, MOCK_NOW + 601).await;
    let r = ask(&h).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(h.by_credential("sub-at-0").await, 1);
    assert_eq!(h.by_credential("sub-at-1").await, 1);
    assert_eq!(mock_account(&h).await["refreshes"], 1);
    assert!(!state(&h).await["last_refresh_at"].is_null());
    // The connection is not cooled by the 401 its refresh answered.
    assert_eq!(ask(&h).await.status(), 200);
    assert_eq!(h.by_credential("sub-at-1").await, 2);
    let cooldowns = h.admin_list("/api/resilience/cooldowns").await;
    let sub = cooldowns
        .iter()
        .find(|c| c["connectionId"] == "sub")
        .unwrap();
    assert_eq!(sub["state"], "active");

    // A 401 right after a refresh is the account's answer: no second refresh, no retry.
    h.rule(json!({"times": 1, "match": {"credential": "sub-at-1"}, "status": 401,
                  "body": {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}}))
        .await;
    assert_eq!(ask(&h).await.status(), 401);
    assert_eq!(mock_account(&h).await["refreshes"], 1);
    assert_eq!(h.by_credential("sub-at-1").await, 3);
}

#[tokio::test]
async fn requests_that_meet_an_expired_token_wait_for_one_refresh() {
    let h = Harness::start_with(config, &[]).await;
    h.mock_oauth(json!({"account": "sub", "refresh_token": "sub-rt-0", "access_token": "sub-at-0", "expires_in": 600, "latency_ms": 400})).await;
    assert_eq!(
        import(&h, "sub-at-0", "sub-rt-0", now_ms() - 1_000)
            .await
            .status(),
        201
    );
    let asks: Vec<_> = (0..6)
        .map(|_| h.spawn_chat(KEY, messages_as_chat("plan/claude-opus")))
        .collect();
    for a in asks {
        assert_eq!(a.await.unwrap().status(), 200);
    }
    let mock = mock_account(&h).await;
    assert_eq!(
        (&mock["refreshes"], &mock["reused"]),
        (&json!(1), &json!(0))
    );
    assert_eq!(h.by_credential("sub-at-0").await, 0);
    assert_eq!(h.by_credential("sub-at-1").await, 6);
}

/// A chat request for `model` (the gateway translates it for an Anthropic upstream).
fn messages_as_chat(model: &str) -> Value {
    chat_body(model, false)
}

#[tokio::test]
async fn three_failed_refreshes_expire_the_connection_until_a_manual_refresh_succeeds() {
    let h = Harness::start_with(config, &[]).await;
    let failing = json!({"account": "sub", "refresh_token": "sub-rt-0", "access_token": "sub-at-0", "expires_in": 600, "fail": {"status": 400, "error": "invalid_grant"}});
    h.mock_oauth(failing).await;
    assert_eq!(
        import(&h, "sub-at-0", "sub-rt-0", now_ms() - 1_000)
            .await
            .status(),
        201
    );
    // The first failure cools the connection; the expired token is never sent.
    let r = ask(&h).await;
    assert_eq!(r.status(), 503, "{}", r.text().await.unwrap());
    assert_eq!(h.by_credential("sub-at-0").await, 0);
    let s = state(&h).await;
    assert_eq!(
        (&s["failures"], &s["last_error"]),
        (
            &json!(1),
            &json!("HTTP 400: invalid_grant: refused by the mock")
        )
    );
    let wait = s["retry_at"].as_u64().unwrap() - now_ms();
    assert!((25_000..=30_000).contains(&wait), "{s}");
    let cooldowns = h.admin_list("/api/resilience/cooldowns").await;
    let sub = cooldowns
        .iter()
        .find(|c| c["connectionId"] == "sub")
        .unwrap();
    assert_eq!(
        (&sub["state"], &sub["lastErrorType"], &sub["errorCode"]),
        (&json!("cooling"), &json!("auth_failed"), &json!(401))
    );
    // An operator's refresh is tried at once; the third failure in a row is terminal.
    for failures in [2, 3] {
        let r = h
            .admin_send(Method::POST, "/api/oauth/sub/refresh", json!({}))
            .await;
        assert_eq!(r.status(), 502);
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["code"], "oauth_refresh_failed");
        assert_eq!(state(&h).await["failures"], failures);
    }
    let cooldowns = h.admin_list("/api/resilience/cooldowns").await;
    let sub = cooldowns
        .iter()
        .find(|c| c["connectionId"] == "sub")
        .unwrap();
    assert_eq!(sub["state"], "expired");
    assert_eq!(
        sub["lastError"],
        "token refresh failed: HTTP 400: invalid_grant: refused by the mock"
    );
    let r = ask(&h).await;
    assert_eq!(r.status(), 404);
    let e: Value = r.json().await.unwrap();
    assert_eq!(
        e["error"]["diagnostics"]["excluded"][0]["reason"],
        "expired"
    );
    assert_eq!(mock_account(&h).await["refreshes"], 0);
    let metric = |outcome: &str| {
        format!(r#"switchyard_oauth_refreshes_total{{connection="sub",outcome="{outcome}"}}"#)
    };
    assert_eq!(h.metric(&metric("failed")).await, Some(2.0));
    assert_eq!(h.metric(&metric("expired")).await, Some(1.0));

    // The provider takes the refresh token again: a manual refresh ends `expired`.
    h.mock_oauth(json!({"account": "sub", "refresh_token": "sub-rt-0", "access_token": "sub-at-0", "expires_in": 600})).await;
    let r = h
        .admin_send(Method::POST, "/api/oauth/sub/refresh", json!({}))
        .await;
    assert_eq!(r.status(), 200);
    let s: Value = r.json().await.unwrap();
    assert_eq!(
        (&s["failures"], &s["retry_at"], &s["last_error"]),
        (&json!(0), &Value::Null, &Value::Null)
    );
    assert_eq!(ask(&h).await.status(), 200);
    assert_eq!(h.by_credential("sub-at-1").await, 1);
    assert_eq!(h.metric(&metric("refreshed")).await, Some(1.0));
    let r = h
        .admin_send(Method::POST, "/api/oauth/alpha-1/refresh", json!({}))
        .await;
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn the_clis_credential_files_are_imported_and_bad_ones_refused_without_their_tokens() {
    let h = Harness::start_with(config, &[]).await;
    // A Codex sign-in: the access token's JWT says when it expires.
    use base64::Engine as _;
    let enc = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let access = format!(
        "{}.{}.sig",
        enc.encode(r#"{"alg":"RS256"}"#),
        enc.encode(r#"{"exp": 1900000000}"#)
    );
    let file = json!({"OPENAI_API_KEY": null, "tokens": {"id_token": "x.y.z", "access_token": access, "refresh_token": "codex-rt-secret", "account_id": "acct-7"}, "last_refresh": "2026-12-01T10:00:00Z"}).to_string();
    let body =
        json!({"cli": "codex", "connection": "team-plan", "provider": "chatgpt", "file": file});
    let r = h
        .admin_send(Method::POST, "/api/oauth/import", body.clone())
        .await;
    assert_eq!(r.status(), 201);
    let c: Value = r.json().await.unwrap();
    assert_eq!(
        (
            &c["provider"],
            &c["auth_class"],
            &c["provider_specific_data"]
        ),
        (
            &json!("chatgpt"),
            &json!("oauth"),
            &json!({"chatgptAccountId": "acct-7"})
        )
    );
    let list = h.admin_list("/api/oauth").await;
    assert_eq!(
        list,
        vec![
            json!({"connection_id": "team-plan", "issuer": "codex", "expires_at": 1_900_000_000_000u64, "last_refresh_at": null, "failures": 0, "retry_at": null, "last_error": null})
        ]
    );
    // Again: the same connection gets the tokens.
    let r = h.admin_send(Method::POST, "/api/oauth/import", body).await;
    assert_eq!(r.status(), 200);
    // The Codex backend is told the account, with the access token.
    let r = h
        .responses(responses_body("chatgpt/gpt-5-codex", false))
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(h.by_credential(&access).await, 1);

    let refusals = [
        (
            json!({"cli": "codex", "connection": "x", "provider": "chatgpt", "file": r#"{"OPENAI_API_KEY": "sk-live-secret-key"}"#}),
            "invalid_credentials",
            "file: the file has no `tokens`: is it the Codex CLI's auth.json of a ChatGPT sign-in?",
        ),
        (
            json!({"cli": "claude", "connection": "x", "provider": "plan", "file": claude_file("at-secret-1", "", 1)}),
            "invalid_credentials",
            "file: the login in the file was ended (its refresh token is empty): sign in with the CLI again",
        ),
        (
            json!({"cli": "claude", "connection": "x", "provider": "nope", "file": claude_file("at-secret-1", "rt-secret-1", 1)}),
            "invalid_config",
            "provider: unknown provider `nope` (create it first)",
        ),
        (
            json!({"cli": "claude", "connection": "x", "file": claude_file("at-secret-1", "rt-secret-1", 1)}),
            "invalid_config",
            "provider: connection `x` does not exist; name the provider to create it in",
        ),
        (
            json!({"cli": "claude", "connection": "x", "provider": "plan", "file": claude_file("at-secret-1", "rt-secret-1", 1), "token_url": "ftp://x"}),
            "invalid_credentials",
            "token_url: `ftp://x` is not an http(s) URL",
        ),
    ];
    for (body, code, message) in refusals {
        let r = h.admin_send(Method::POST, "/api/oauth/import", body).await;
        assert_eq!(r.status(), 400);
        let e: Value = r.json().await.unwrap();
        assert_eq!(
            (e["error"]["code"].as_str(), e["error"]["message"].as_str()),
            (Some(code), Some(message))
        );
    }
    assert_eq!(h.admin_list("/api/oauth").await.len(), 1);
    assert_eq!(h.admin_get("/api/connections/x").await.status(), 404);
}
