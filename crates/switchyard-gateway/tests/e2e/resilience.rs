//! Resilience end to end (SPEC R1, R3, R4, R18): cooling connections are skipped, an
//! upstream's announced reset is honoured, open breakers and terminal accounts answer
//! typed errors, and the state survives a restart.

use serde_json::{json, Value};
use switchyard_test_support::*;

/// Two providers with one connection each that do cool down, a combo across them, and a
/// local provider whose breaker opens after two failures.
pub fn cooling(mock_url: &str) -> Config {
    Config::new()
        .provider(Provider::openai("alpha", mock_url).models(["mock-small"]))
        .provider(Provider::openai("beta", mock_url).models(["mock-small"]))
        .provider(Provider::openai("local", mock_url))
        .connection(Connection::apikey("alpha-1", "alpha").credential(CRED_ALPHA))
        .connection(Connection::apikey("beta-1", "beta").credential(CRED_BETA))
        .connection(
            Connection::local("local-1", "local")
                .credential("cred-local")
                .disable_cooling(),
        )
        .combo(Combo::priority(
            "fast",
            ["alpha/mock-small", "beta/mock-small"],
        ))
        .key(Key::new("k1", "tester", KEY))
}

#[tokio::test]
async fn a_failing_connection_cools_down_and_the_combo_moves_on() {
    let h = Harness::start_with(cooling, &[]).await;
    h.rule(json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 503}))
        .await;
    assert_eq!(h.chat(chat_body("fast", false)).await.status(), 200);
    // alpha is cooling (3 s): the next request goes straight to beta.
    assert_eq!(h.chat(chat_body("fast", false)).await.status(), 200);
    assert_eq!(h.by_credential(CRED_ALPHA).await, 1);
    assert_eq!(h.by_credential(CRED_BETA).await, 2);
}

#[tokio::test]
async fn an_announced_reset_is_honoured_and_all_targets_cooling_answers_503() {
    let mut h = Harness::start_with(cooling, &[]).await;
    h.rule(
        json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 429,
                  "headers": {"retry-after": "120"}}),
    )
    .await;
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "120");
    let check = |r: reqwest::Response| async move {
        assert_eq!(r.status(), 503);
        let retry = retry_after(&r);
        assert!((118..=120).contains(&retry), "{retry}");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["code"], "all_targets_cooling_down");
        let x = &e["error"]["diagnostics"]["excluded"][0];
        assert_eq!(
            (
                x["target"].as_str(),
                x["connection"].as_str(),
                x["reason"].as_str()
            ),
            (
                Some("alpha/mock-small"),
                Some("alpha-1"),
                Some("unavailable")
            )
        );
        assert!((118..=120).contains(&x["seconds_left"].as_u64().unwrap()));
    };
    check(h.chat(chat_body("alpha/mock-small", false)).await).await;
    // The cooldown survives a restart.
    h.restart().await;
    check(h.chat(chat_body("alpha/mock-small", false)).await).await;
    assert_eq!(h.by_credential(CRED_ALPHA).await, 1);
}

#[tokio::test]
async fn an_open_breaker_answers_503_provider_circuit_open_and_survives_a_restart() {
    let mut h = Harness::start_with(cooling, &[]).await;
    h.rule(json!({"times": 2, "match": {"credential": "cred-local"}, "status": 502}))
        .await;
    for _ in 0..2 {
        assert_eq!(h.chat(chat_body("local/m", false)).await.status(), 502);
    }
    let r = h.chat(chat_body("local/m", false)).await;
    assert_eq!(r.status(), 503);
    let retry = retry_after(&r);
    assert!((14..=15).contains(&retry), "{retry}");
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "provider_circuit_open");
    assert_eq!(h.by_credential("cred-local").await, 2);
    h.restart().await;
    let r = h.chat(chat_body("local/m", false)).await;
    assert_eq!(r.status(), 503);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "provider_circuit_open");
    assert_eq!(h.by_credential("cred-local").await, 2);
}

#[tokio::test]
async fn an_account_out_of_credits_is_terminal_and_nothing_is_executable() {
    let h = Harness::start_with(cooling, &[]).await;
    h.rule(
        json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 402,
                  "body": {"error": {"message": "insufficient credits"}}}),
    )
    .await;
    assert_eq!(
        h.chat(chat_body("alpha/mock-small", false)).await.status(),
        402
    );
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 404);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "no_executable_targets");
    assert_eq!(
        e["error"]["diagnostics"]["excluded"][0]["reason"],
        "credits_exhausted"
    );
    // The combo still serves from the other provider.
    assert_eq!(h.chat(chat_body("fast", false)).await.status(), 200);
}

#[tokio::test]
async fn operators_see_and_clear_cooldowns_and_a_new_credential_ends_a_terminal_state() {
    let h = Harness::start_with(cooling, &[]).await;
    h.rule(
        json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 429,
                  "headers": {"retry-after": "600"}}),
    )
    .await;
    h.rule(json!({"times": 1, "match": {"credential": CRED_BETA}, "status": 402}))
        .await;
    h.chat(chat_body("alpha/mock-small", false)).await;
    h.chat(chat_body("beta/mock-small", false)).await;
    let list: Value = h.admin_json("/api/resilience/cooldowns").await;
    let find = |id: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|c| c["connectionId"] == id)
            .unwrap()
            .clone()
    };
    let alpha = find("alpha-1");
    assert_eq!(
        (
            alpha["state"].as_str(),
            alpha["backoffLevel"].as_u64(),
            alpha["lastErrorType"].as_str(),
            alpha["errorCode"].as_u64()
        ),
        (Some("cooling"), Some(1), Some("rate_limited"), Some(429))
    );
    assert!(alpha["remainingMs"].as_u64().unwrap() > 590_000);
    assert_eq!(find("beta-1")["state"], "credits_exhausted");
    let metrics = h.metrics().await;
    assert!(metrics.contains(
        r#"switchyard_connection_cooldowns_total{connection="alpha-1",reason="rate_limited"} 1"#
    ));
    assert!(metrics.contains(
        r#"switchyard_connection_cooldowns_total{connection="beta-1",reason="credits_exhausted"} 1"#
    ));
    assert_eq!(find("local-1")["state"], "active");
    assert!(!list.to_string().contains(CRED_ALPHA));
    let r = h
        .admin_send(
            reqwest::Method::POST,
            "/api/resilience/cooldowns",
            json!({"all": true}),
        )
        .await;
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"cleared": 1, "unchanged": 1, "skippedTerminal": 1, "lockoutsCleared": 0})
    );
    assert_eq!(
        h.chat(chat_body("alpha/mock-small", false)).await.status(),
        200
    );
    assert_eq!(
        h.chat(chat_body("beta/mock-small", false)).await.status(),
        404
    );
    let r = h
        .admin_send(
            reqwest::Method::POST,
            "/api/resilience/cooldowns",
            json!({"connectionIds": ["nope"]}),
        )
        .await;
    assert_eq!(r.status(), 400);
    // A new credential ends the terminal state.
    let r = h
        .admin_send(
            reqwest::Method::PUT,
            "/api/connections/beta-1",
            json!({"id": "beta-1", "provider": "beta", "auth_class": "apikey", "credential": CRED_BETA}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        h.chat(chat_body("beta/mock-small", false)).await.status(),
        200
    );
}

#[tokio::test]
async fn health_shows_breakers_and_the_reset_closes_them() {
    let h = Harness::start_with(cooling, &[]).await;
    h.rule(json!({"times": 2, "match": {"credential": "cred-local"}, "status": 503}))
        .await;
    for _ in 0..2 {
        h.chat(chat_body("local/m", false)).await;
    }
    let mut health: Value = h.admin_json("/api/monitoring/health").await;
    // An open breaker says when it lets a probe through (a local server's: 15 s).
    let probe_in_ms = health["breakers"][0]["probe_in_ms"]
        .take()
        .as_u64()
        .unwrap();
    assert!((10_000..=15_000).contains(&probe_in_ms), "{probe_in_ms}");
    assert_eq!(
        health["breakers"],
        json!([{"provider": "local", "state": "OPEN", "failures": 2, "probe_in_ms": null}])
    );
    let r = h
        .admin_send(
            reqwest::Method::POST,
            "/api/resilience/reset",
            json!({"provider": "local"}),
        )
        .await;
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"breakersReset": 1, "connectionsReset": 0})
    );
    assert_eq!(h.chat(chat_body("local/m", false)).await.status(), 200);
    let health: Value = h.admin_json("/api/monitoring/health").await;
    assert_eq!(health["breakers"], json!([]));
}

#[tokio::test]
async fn model_lockout_is_off_until_patched_on_and_locks_only_the_failing_model() {
    let h = Harness::start().await;
    let view: Value = h.admin_json("/api/resilience").await;
    assert_eq!(view["modelLockout"]["enabled"], false);
    assert_eq!(view["modelLockout"]["baseCooldownMs"], 120_000);
    let bad = [
        (json!({"modelLockout": {"bogus": 1}}), "modelLockout.bogus"),
        (
            json!({"modelLockout": {"errorCodes": [200]}}),
            "modelLockout.errorCodes",
        ),
        (
            json!({"modelLockout": {"maxCooldownMs": 5000}}),
            "modelLockout",
        ),
    ];
    for (body, field) in bad {
        let r = h
            .admin_send(reqwest::Method::PATCH, "/api/resilience", body)
            .await;
        assert_eq!(r.status(), 400, "{field}");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["param"], field);
    }
    // The shape GET shows is accepted back.
    let mut back = view.clone();
    back["providerCooldown"]["oauth"]["cooldownMs"] = json!(90_000);
    let r = h
        .admin_send(reqwest::Method::PATCH, "/api/resilience", back)
        .await;
    assert_eq!(r.status(), 200);
    let got: Value = r.json().await.unwrap();
    assert_eq!(got["providerCooldown"]["oauth"]["cooldownMs"], 90_000);
    let r = h
        .admin_send(
            reqwest::Method::PUT,
            "/api/settings/resilience.modelLockout.maxCooldownMs",
            json!({"value": 5000}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let r = h
        .admin_send(
            reqwest::Method::PATCH,
            "/api/resilience",
            json!({"modelLockout": {"enabled": true, "baseCooldownMs": 60000}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let view: Value = r.json().await.unwrap();
    assert_eq!(
        (
            view["modelLockout"]["enabled"].as_bool(),
            view["modelLockout"]["baseCooldownMs"].as_u64()
        ),
        (Some(true), Some(60_000))
    );
    h.rule(json!({"times": 1, "match": {"model": "mock-large"}, "status": 404}))
        .await;
    assert_eq!(
        h.chat(chat_body("alpha/mock-large", false)).await.status(),
        404
    );
    let r = h.chat(chat_body("alpha/mock-large", false)).await;
    assert_eq!(r.status(), 503);
    let e: Value = r.json().await.unwrap();
    assert_eq!(
        e["error"]["diagnostics"]["excluded"][0]["reason"],
        "model_lockout"
    );
    // The rest of the account keeps serving.
    assert_eq!(
        h.chat(chat_body("alpha/mock-small", false)).await.status(),
        200
    );
    let locks: Value = h.admin_json("/api/resilience/model-cooldowns").await;
    assert_eq!(
        (
            locks[0]["connection"].as_str(),
            locks[0]["scope"].as_str(),
            locks[0]["name"].as_str(),
            locks[0]["status"].as_u64()
        ),
        (
            Some("alpha-1"),
            Some("model"),
            Some("mock-large"),
            Some(404)
        )
    );
    let r = h
        .admin_send(
            reqwest::Method::DELETE,
            "/api/resilience/model-cooldowns",
            json!({"provider": "alpha", "connection": "alpha-1", "model": "mock-large"}),
        )
        .await;
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"cleared": 1}));
    assert_eq!(
        h.chat(chat_body("alpha/mock-large", false)).await.status(),
        200
    );
    // Clearing the connection's cooldowns clears its model locks too, and counts them.
    h.rule(json!({"times": 2, "match": {"credential": CRED_ALPHA}, "status": 404}))
        .await;
    for model in ["alpha/mock-large", "alpha/mock-small"] {
        assert_eq!(h.chat(chat_body(model, false)).await.status(), 404);
    }
    let locks: Value = h.admin_json("/api/resilience/model-cooldowns").await;
    assert_eq!(locks.as_array().unwrap().len(), 2);
    let r = h
        .admin_send(
            reqwest::Method::POST,
            "/api/resilience/cooldowns",
            json!({"connectionIds": ["beta-1"]}),
        )
        .await;
    assert_eq!(r.json::<Value>().await.unwrap()["lockoutsCleared"], 0);
    let r = h
        .admin_send(
            reqwest::Method::POST,
            "/api/resilience/cooldowns",
            json!({"connectionIds": ["alpha-1"]}),
        )
        .await;
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"cleared": 0, "unchanged": 1, "skippedTerminal": 0, "lockoutsCleared": 2})
    );
    assert_eq!(
        h.admin_json("/api/resilience/model-cooldowns").await,
        json!([])
    );
    for model in ["alpha/mock-large", "alpha/mock-small"] {
        assert_eq!(h.chat(chat_body(model, false)).await.status(), 200);
    }
}

#[tokio::test]
async fn the_opt_in_provider_cooldown_trips_after_its_threshold() {
    let h = Harness::start_with(
        Config::standard,
        &[
            ("PROVIDER_COOLDOWN_ENABLED", "true"),
            ("OMNIROUTE_PROVIDER_BREAKER_API_KEY_FAILURE_THRESHOLD", "2"),
        ],
    )
    .await;
    h.rule(json!({"times": 2, "match": {"credential": CRED_ALPHA}, "status": 503}))
        .await;
    for _ in 0..2 {
        assert_eq!(
            h.chat(chat_body("alpha/mock-small", false)).await.status(),
            502
        );
    }
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 503);
    let retry = retry_after(&r);
    assert!((599..=600).contains(&retry), "{retry}");
    let e: Value = r.json().await.unwrap();
    assert_eq!(
        e["error"]["diagnostics"]["excluded"][0]["reason"],
        "provider_cooldown"
    );
    // The combo moves on to beta.
    assert_eq!(h.chat(chat_body("fast", false)).await.status(), 200);
}

#[tokio::test]
async fn concurrent_failures_of_one_connection_raise_its_backoff_once() {
    let h = Harness::start_with(cooling, &[]).await;
    h.rule(
        json!({"times": 12, "match": {"credential": CRED_ALPHA}, "status": 503, "latency_ms": 150}),
    )
    .await;
    assert_eq!(
        h.concurrent_statuses(12, KEY, "alpha/mock-small").await,
        vec![502; 12]
    );
    let list: Value = h
        .admin_json("/api/resilience/cooldowns?provider=alpha")
        .await;
    assert_eq!(list[0]["backoffLevel"], 1);
    // One backoff step of the API-key profile: 3 s, not 12 stacked.
    assert!(list[0]["remainingMs"].as_u64().unwrap() <= 3_000);
}

#[tokio::test]
async fn a_recovered_provider_gets_a_growing_share_of_traffic() {
    use switchyard_gateway::clock::{Clock, ManualClock, SystemClock};
    let clock = std::sync::Arc::new(ManualClock::new(SystemClock.now_ms()));
    let h = Harness::start_with_clock(crate::chaos::chaos, &[], clock.clone()).await;
    h.rule(json!({"times": 2, "match": {"credential": "cred-flaky"}, "status": 503}))
        .await;
    for _ in 0..2 {
        assert_eq!(h.chat(chat_body("both", false)).await.status(), 200);
    }
    clock.advance(std::time::Duration::from_secs(15));
    // The probe succeeds and closes the breaker.
    assert_eq!(h.chat(chat_body("both", false)).await.status(), 200);
    let mut seen = h.by_credential("cred-flaky").await;
    let mut shares = Vec::new();
    for advance in [0u64, 10, 20] {
        clock.advance(std::time::Duration::from_secs(advance));
        for _ in 0..16 {
            assert_eq!(h.chat(chat_body("both", false)).await.status(), 200);
        }
        let now = h.by_credential("cred-flaky").await;
        shares.push(now - seen);
        seen = now;
    }
    // An eighth, then a quarter, then everything (the priority order's first target).
    assert_eq!(shares, [2, 4, 16]);
}

async fn stall_once(h: &Harness) -> String {
    h.rule(json!({"times": 1, "match": {"credential": CRED_ALPHA}, "chunks": 5, "chunk_interval_ms": 10, "stall_after_chunks": 2}))
        .await;
    let r = h.chat(chat_body("alpha/mock-small", true)).await;
    assert_eq!(r.status(), 200);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("upstream_stream_idle_timeout"));
    let list: Value = h
        .admin_json("/api/resilience/cooldowns?provider=alpha")
        .await;
    list[0]["state"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_stalled_stream_cools_the_account_only_when_enabled() {
    let env = [("SWITCHYARD_UPSTREAM_STREAM_IDLE_TIMEOUT_MS", "300")];
    let h = Harness::start_with(cooling, &env).await;
    assert_eq!(stall_once(&h).await, "active");
    let h = Harness::start_with(
        cooling,
        &[env[0], ("STREAM_STALL_COOLDOWN_ENABLED", "true")],
    )
    .await;
    assert_eq!(stall_once(&h).await, "cooling");
}

#[tokio::test]
async fn breaker_profiles_are_settings_an_api_key_breaker_set_to_open_at_3_opens_after_3() {
    let h = Harness::start().await;
    let h = &h;
    let put = |key: &'static str, value: u64| async move {
        h.admin_send(
            reqwest::Method::PUT,
            &format!("/api/settings/{key}"),
            json!({"value": value}),
        )
        .await
    };
    // openAt 3 alone would leave the API-key degradeAt (7) above it: refused, naming
    // the field, and nothing is written.
    let r = put("breaker.apiKey.openAt", 3).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["param"], "breaker.apiKey.degradeAt");
    assert_eq!(
        e["error"]["message"],
        "breaker.apiKey.degradeAt (7) must be <= breaker.apiKey.openAt (3)"
    );
    let list: Value = h.admin_json("/api/settings").await;
    let setting = |list: &Value, key: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|s| s["key"] == key)
            .map(|s| (s["value"].clone(), s["source"].clone()))
            .unwrap()
    };
    assert_eq!(
        setting(&list, "breaker.apiKey.openAt"),
        (json!(12), json!("default"))
    );
    assert_eq!(put("breaker.apiKey.degradeAt", 2).await.status(), 200);
    assert_eq!(put("breaker.apiKey.openAt", 3).await.status(), 200);
    let list: Value = h.admin_json("/api/settings").await;
    assert_eq!(
        setting(&list, "breaker.apiKey.openAt"),
        (json!(3), json!("database"))
    );

    h.rule(json!({"times": 3, "match": {"credential": CRED_ALPHA}, "status": 502}))
        .await;
    let breaker = |health: &Value| {
        health["breakers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["provider"] == "alpha")
            .map(|b| (b["state"].clone(), b["failures"].clone()))
            .unwrap()
    };
    for (failures, state) in [(1, "CLOSED"), (2, "DEGRADED"), (3, "OPEN")] {
        assert_eq!(
            h.chat(chat_body("alpha/mock-small", false)).await.status(),
            502
        );
        assert_eq!(
            breaker(&h.health().await),
            (json!(state), json!(failures)),
            "after {failures} failures"
        );
    }
    // Open after 3 (not 12): the next request is refused without reaching alpha, for
    // the API-key reset of 30 s.
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 503);
    let retry = retry_after(&r);
    assert!((29..=30).contains(&retry), "{retry}");
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "provider_circuit_open");
    assert_eq!(h.by_credential(CRED_ALPHA).await, 3);
}
