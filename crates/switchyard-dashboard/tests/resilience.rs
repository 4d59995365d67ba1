//! The resilience page end to end: breakers and their reset, the cooldown manager's
//! clears (terminal states never cleared), model locks and their re-enable, and the
//! resilience settings, each checked on the page and through the management API.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions fail loudly on purpose"
)]

mod common;

use common::{
    assert_no_credential, attr, count, done, failed, field, form_fields, notice, row, row_head,
    table_rows, texts, Signed,
};
use reqwest::Method;
use serde_json::{json, Value};
use switchyard_test_support::{chat_body, CRED_ALPHA, CRED_BETA};

const PAGE: &str = "/dashboard/resilience";
const BREAKERS: &str = "Provider circuit breakers";
const COOLDOWNS: &str = "Connection cooldowns (terminal states are never cleared)";
const TERMINAL: &str = "Terminal states (a new credential ends them)";
const LOCKS: &str = "Model cooldowns (locked models)";
const OTHERS: &str = "Other resilience settings";
const LOCKOUT: &str = "form[action='/dashboard/resilience/model-lockout']";
const COOLDOWN: &str = "form[action='/dashboard/resilience/provider-cooldown']";
const RULES_FORM: &str = "form[action='/dashboard/resilience/error-rules']";
const RESTATEMENTS: &str = "Status restatements (applied before classification)";
const RULES: &str = "Provider error rules (the first that matches decides)";
const EGRESS: &str =
    "Egress buckets (last 24 h; a 429 in a bucketed family cools the whole bucket)";

/// The page, checked to carry no credential.
async fn page(s: &Signed) -> String {
    let (status, body) = s.page(PAGE).await;
    assert_eq!(status, 200, "{body}");
    assert_no_credential(&body);
    body
}

/// One connection's state as `GET /api/resilience/cooldowns` shows it.
async fn api_state(s: &Signed, connection: &str) -> Value {
    let all = s.h.admin_json("/api/resilience/cooldowns").await;
    all.as_array()
        .unwrap()
        .iter()
        .find(|c| c["connectionId"] == connection)
        .unwrap()
        .clone()
}

/// Turns cooling on for a standard connection (the fixtures turn it off).
async fn enable_cooling(s: &Signed, id: &str, provider: &str) {
    let r = s
        .h
        .admin_send(
            Method::PUT,
            &format!("/api/connections/{id}"),
            json!({"id": id, "provider": provider, "auth_class": "apikey", "disable_cooling": false}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

/// Puts `alpha-1` into a two-minute cooldown with an announced 429.
async fn cool_alpha(s: &Signed) {
    s.h.rule(
        json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 429,
                    "headers": {"retry-after": "120"}}),
    )
    .await;
    let r = s.h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(api_state(s, "alpha-1").await["state"], "cooling");
}

#[tokio::test]
async fn breakers_show_their_state_and_next_probe_and_reset_closes_them() {
    let s = Signed::start().await;
    let before = page(&s).await;
    assert_eq!(
        ["hx-get", "hx-trigger", "hx-select", "hx-swap"].map(|a| attr(
            &before,
            "#resilience-live",
            a
        )),
        [
            Some(PAGE.to_owned()),
            Some("every 30s".to_owned()),
            Some("#resilience-live".to_owned()),
            Some("outerHTML".to_owned())
        ]
    );
    assert_eq!(
        row_head(&before, BREAKERS, "alpha", 4).unwrap(),
        ["alpha", "CLOSED", "0", "—"]
    );
    assert_eq!(
        texts(&before, "#resilience-live span.state.state-closed"),
        ["CLOSED", "CLOSED"]
    );
    // An API-key provider's breaker opens at its twelfth consecutive failure.
    s.h.rule(json!({"times": 12, "match": {"credential": CRED_ALPHA}, "status": 503}))
        .await;
    for _ in 0..12 {
        assert_eq!(
            s.h.chat(chat_body("alpha/mock-small", false))
                .await
                .status(),
            502
        );
    }
    let health = s.h.health().await;
    assert_eq!(health["breakers"][0]["state"], "OPEN");
    // The overview says the gateway is degraded, and why.
    let (_, overview) = s.page("/dashboard").await;
    assert_eq!(texts(&overview, "#status"), ["Status: degraded"]);
    assert_eq!(
        texts(&overview, "#health-reasons li"),
        ["provider `alpha`: circuit breaker open"]
    );
    let open = page(&s).await;
    let alpha = row_head(&open, BREAKERS, "alpha", 4).unwrap();
    assert_eq!(alpha[..3], ["alpha", "OPEN", "12"]);
    assert_eq!(texts(&open, "span.state.state-open"), ["OPEN"]);
    // It lets a probe through 30 s after it opened.
    assert!(["30 s", "29 s"].contains(&alpha[3].as_str()), "{alpha:?}");
    assert_eq!(
        row(&open, BREAKERS, "beta").unwrap(),
        ["beta", "CLOSED", "0", "—", "Reset"]
    );
    assert_eq!(
        form_fields(&open, "form.inline[action='/dashboard/resilience/reset']")[1..],
        [("provider".to_owned(), "alpha".to_owned())]
    );

    s.refused_without_csrf("/dashboard/resilience/reset", &[("provider", "alpha")])
        .await;
    assert_eq!(s.h.health().await["breakers"][0]["state"], "OPEN");

    let bad = s
        .act("/dashboard/resilience/reset", &[("provider", "nope")])
        .await;
    assert_eq!(notice(&bad), failed("provider: unknown provider `nope`"));
    assert_eq!(s.h.health().await["breakers"][0]["state"], "OPEN");

    let after = s
        .act("/dashboard/resilience/reset", &[("provider", "alpha")])
        .await;
    assert_no_credential(&after);
    assert_eq!(notice(&after), done("alpha: 1 breaker reset."));
    assert_eq!(
        row_head(&after, BREAKERS, "alpha", 4).unwrap(),
        ["alpha", "CLOSED", "0", "—"]
    );
    assert_eq!(s.h.health().await["breakers"], json!([]));
    assert_eq!(
        s.h.chat(chat_body("alpha/mock-small", false))
            .await
            .status(),
        200
    );
    // The notice is shown once.
    assert_eq!(notice(&page(&s).await), "");
}

#[tokio::test]
async fn the_cooldown_manager_clears_cooldowns_but_never_terminal_states() {
    let s = Signed::start().await;
    enable_cooling(&s, "alpha-1", "alpha").await;
    enable_cooling(&s, "beta-1", "beta").await;
    cool_alpha(&s).await;
    s.h.rule(
        json!({"times": 1, "match": {"credential": CRED_BETA}, "status": 402,
                    "body": {"error": {"message": "insufficient credits"}}}),
    )
    .await;
    assert_eq!(
        s.h.chat(chat_body("beta/mock-small", false)).await.status(),
        402
    );
    assert_eq!(api_state(&s, "beta-1").await["state"], "credits_exhausted");

    let cooling = page(&s).await;
    let alpha = api_state(&s, "alpha-1").await;
    let cells = row(&cooling, COOLDOWNS, "alpha-1").unwrap();
    assert_eq!(cells[..4], ["alpha-1", "alpha", "apikey", "cooling"]);
    assert!(["120 s", "119 s"].contains(&cells[4].as_str()), "{cells:?}");
    assert_eq!(
        cells[5..],
        [
            alpha["backoffLevel"].to_string(),
            alpha["lastError"].as_str().unwrap().to_owned()
        ]
    );
    assert_eq!(
        texts(&cooling, "#resilience-live span.state-cooling"),
        ["cooling"]
    );
    // The selection form lies outside the live region, so a refresh keeps its ticks.
    let select = "form#clear-selected[action='/dashboard/resilience/clear']";
    assert_eq!(
        attr(&cooling, &format!("{select} input#select-alpha-1"), "value").as_deref(),
        Some("alpha-1")
    );
    assert_eq!(
        texts(&cooling, &format!("{select} label[for=select-alpha-1]")),
        ["alpha-1 (cooling)"]
    );
    assert_eq!(count(&cooling, "#resilience-live input[type=checkbox]"), 0);
    assert_eq!(
        texts(&cooling, "#resilience-live span.state-credits-exhausted"),
        ["credits_exhausted"]
    );
    let beta = api_state(&s, "beta-1").await;
    assert_eq!(
        table_rows(&cooling, TERMINAL),
        [[
            "beta-1",
            "beta",
            "credits_exhausted",
            beta["lastError"].as_str().unwrap()
        ]]
    );

    // Nothing selected: the API's message, nothing cleared.
    let none = s.act("/dashboard/resilience/clear", &[]).await;
    assert_eq!(
        notice(&none),
        failed("connectionIds: list the connections, or set all: true")
    );
    let unknown = s
        .act("/dashboard/resilience/clear", &[("connection", "nope")])
        .await;
    assert_eq!(
        notice(&unknown),
        failed("connectionIds: unknown connection `nope`")
    );
    s.refused_without_csrf("/dashboard/resilience/clear", &[("connection", "alpha-1")])
        .await;
    s.refused_without_csrf("/dashboard/resilience/clear-all", &[])
        .await;
    s.refused_without_csrf(
        "/dashboard/resilience/clear-provider",
        &[("provider", "alpha")],
    )
    .await;
    assert_eq!(api_state(&s, "alpha-1").await["state"], "cooling");

    // By selection: the terminal one is counted and left.
    let cleared = s
        .act(
            "/dashboard/resilience/clear",
            &[("connection", "alpha-1"), ("connection", "beta-1")],
        )
        .await;
    assert_no_credential(&cleared);
    assert_eq!(
        notice(&cleared),
        done("1 cleared, 0 unchanged, 1 skipped as terminal; 0 model locks cleared.")
    );
    assert_eq!(
        row_head(&cleared, COOLDOWNS, "alpha-1", 5).unwrap(),
        ["alpha-1", "alpha", "apikey", "active", "—"]
    );
    assert_eq!(api_state(&s, "alpha-1").await["state"], "active");
    assert_eq!(api_state(&s, "beta-1").await["state"], "credits_exhausted");
    assert_eq!(
        s.h.chat(chat_body("alpha/mock-small", false))
            .await
            .status(),
        200
    );

    // By provider.
    cool_alpha(&s).await;
    let by_provider = s
        .act(
            "/dashboard/resilience/clear-provider",
            &[("provider", "alpha")],
        )
        .await;
    assert_eq!(
        notice(&by_provider),
        done("1 cleared, 0 unchanged, 0 skipped as terminal; 0 model locks cleared.")
    );
    assert_eq!(api_state(&s, "alpha-1").await["state"], "active");

    // All.
    cool_alpha(&s).await;
    // Clearing all takes two steps: the summary unfolds the button that clears.
    let clear_all = "details.confirm form[action='/dashboard/resilience/clear-all']";
    assert_eq!(
        form_fields(&by_provider, clear_all),
        [("csrf".to_owned(), s.csrf.clone())]
    );
    assert_eq!(
        texts(&by_provider, &format!("{clear_all} button")),
        ["Clear every connection's cooldowns and model locks"]
    );
    assert!(
        texts(&by_provider, "details.confirm summary").contains(&"Clear all cooldowns…".to_owned())
    );
    let all = s.act("/dashboard/resilience/clear-all", &[]).await;
    assert_eq!(
        notice(&all),
        done("1 cleared, 0 unchanged, 1 skipped as terminal; 0 model locks cleared.")
    );
    assert_eq!(api_state(&s, "alpha-1").await["state"], "active");
    assert_eq!(api_state(&s, "beta-1").await["state"], "credits_exhausted");
    assert_eq!(
        row_head(&all, TERMINAL, "beta-1", 3).unwrap(),
        ["beta-1", "beta", "credits_exhausted"]
    );
    assert_eq!(
        s.h.chat(chat_body("alpha/mock-small", false))
            .await
            .status(),
        200
    );
}

/// `PATCH /api/resilience` with `body`: its error message.
async fn api_error(s: &Signed, body: Value) -> String {
    let r = s.h.admin_send(Method::PATCH, "/api/resilience", body).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    e["error"]["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn settings_forms_validate_as_the_api_and_model_locks_are_re_enabled() {
    let s = Signed::start().await;
    let defaults = s.h.admin_json("/api/resilience").await;
    let form = page(&s).await;
    assert_eq!(
        texts(&form, "label[for=lockout-baseCooldownMs]"),
        ["First lock (ms)"]
    );
    assert_eq!(
        attr(&form, "input#lockout-baseCooldownMs", "type").as_deref(),
        Some("number")
    );
    assert_eq!(
        field(&form, LOCKOUT, "baseCooldownMs").as_deref(),
        Some("120000")
    );
    assert_eq!(field(&form, LOCKOUT, "enabled").as_deref(), Some("false"));
    assert_eq!(texts(&form, "select#lockout-enabled option"), ["on", "off"]);
    assert_eq!(
        field(&form, COOLDOWN, "apiKey.failureThreshold"),
        Some(defaults["providerCooldown"]["apiKey"]["failureThreshold"].to_string())
    );

    // Invalid values: the API's message, nothing changed.
    for (field, value) in [("baseCooldownMs", "abc"), ("maxCooldownMs", "500")] {
        let message = api_error(&s, json!({"modelLockout": {field: value}})).await;
        let bad = s
            .act("/dashboard/resilience/model-lockout", &[(field, value)])
            .await;
        assert_eq!(notice(&bad), failed(&message));
    }
    let message = api_error(
        &s,
        json!({"modelLockout": {"baseCooldownMs": "600000", "maxCooldownMs": "60000"}}),
    )
    .await;
    assert_eq!(
        message,
        "modelLockout: maxCooldownMs must be >= baseCooldownMs"
    );
    let bad = s
        .act(
            "/dashboard/resilience/model-lockout",
            &[("baseCooldownMs", "600000"), ("maxCooldownMs", "60000")],
        )
        .await;
    assert_eq!(notice(&bad), failed(&message));
    let message = api_error(
        &s,
        json!({"providerCooldown": {"oauth.failureThreshold": "x"}}),
    )
    .await;
    let bad = s
        .act(
            "/dashboard/resilience/provider-cooldown",
            &[("oauth.failureThreshold", "x")],
        )
        .await;
    assert_eq!(notice(&bad), failed(&message));
    s.refused_without_csrf(
        "/dashboard/resilience/model-lockout",
        &[("enabled", "true")],
    )
    .await;
    assert_eq!(s.h.admin_json("/api/resilience").await, defaults);

    let saved = s
        .act(
            "/dashboard/resilience/model-lockout",
            &[
                ("enabled", "true"),
                ("errorCodes", "404, 503"),
                ("baseCooldownMs", "60000"),
                ("maxCooldownMs", "600000"),
                ("maxBackoffSteps", "3"),
                ("useExponentialBackoff", "false"),
            ],
        )
        .await;
    assert_eq!(notice(&saved), done("Model lockout settings saved."));
    assert_eq!(
        ["baseCooldownMs", "errorCodes", "enabled"].map(|n| field(&saved, LOCKOUT, n)),
        [
            Some("60000".to_owned()),
            Some("404,503".to_owned()),
            Some("true".to_owned())
        ]
    );
    let settings = s.h.admin_json("/api/resilience").await;
    assert_eq!(
        settings["modelLockout"],
        json!({"enabled": true, "errorCodes": [404, 503], "baseCooldownMs": 60000,
               "maxCooldownMs": 600000, "maxBackoffSteps": 3, "useExponentialBackoff": false})
    );
    let saved = s
        .act(
            "/dashboard/resilience/provider-cooldown",
            &[
                ("enabled", "false"),
                ("oauth.failureThreshold", "4"),
                ("oauth.failureWindowMs", "20000"),
                ("oauth.cooldownMs", "40000"),
                ("apiKey.failureThreshold", "6"),
                ("apiKey.failureWindowMs", "30000"),
                ("apiKey.cooldownMs", "50000"),
            ],
        )
        .await;
    assert_eq!(notice(&saved), done("Provider cooldown settings saved."));
    assert_eq!(
        field(&saved, COOLDOWN, "apiKey.cooldownMs").as_deref(),
        Some("50000")
    );
    assert_eq!(
        s.h.admin_json("/api/resilience").await["providerCooldown"],
        json!({"enabled": false,
               "oauth": {"failureThreshold": 4, "failureWindowMs": 20000, "cooldownMs": 40000},
               "apiKey": {"failureThreshold": 6, "failureWindowMs": 30000, "cooldownMs": 50000}})
    );

    // The other resilience settings are set through the settings service and come back.
    assert_eq!(
        row_head(&saved, OTHERS, "streamStallCooldown.enabled", 5).unwrap(),
        [
            "streamStallCooldown.enabled",
            "false",
            "default",
            "live",
            "STREAM_STALL_COOLDOWN_ENABLED"
        ]
    );
    let r = s
        .post(
            "/dashboard/settings",
            &[
                ("key", "streamStallCooldown.enabled"),
                ("value", "true"),
                ("back", PAGE),
            ],
        )
        .await;
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], PAGE);
    let stall = page(&s).await;
    assert_eq!(notice(&stall), done("streamStallCooldown.enabled saved."));
    assert_eq!(
        row_head(&stall, OTHERS, "streamStallCooldown.enabled", 3).unwrap(),
        ["streamStallCooldown.enabled", "true", "database"]
    );

    // A 404 for one model locks it on the connection for the base minute.
    s.h.rule(
        json!({"times": 1, "match": {"credential": CRED_ALPHA, "model": "mock-large"},
                    "status": 404}),
    )
    .await;
    assert_eq!(
        s.h.chat(chat_body("alpha/mock-large", false))
            .await
            .status(),
        404
    );
    assert_eq!(
        s.h.admin_json("/api/resilience/model-cooldowns")
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let locked = page(&s).await;
    let lock = table_rows(&locked, LOCKS).swap_remove(0);
    assert_eq!(
        lock[..6],
        ["alpha", "alpha-1", "model", "mock-large", "1", "404"]
    );
    assert!(["60 s", "59 s"].contains(&lock[6].as_str()), "{lock:?}");
    assert_eq!(lock[7], "Re-enable");
    assert_eq!(
        form_fields(&locked, "form[action='/dashboard/resilience/re-enable']")[1..],
        [
            ("provider", "alpha"),
            ("connection", "alpha-1"),
            ("model", "mock-large")
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
    s.refused_without_csrf(
        "/dashboard/resilience/re-enable",
        &[
            ("provider", "alpha"),
            ("connection", "alpha-1"),
            ("model", "mock-large"),
        ],
    )
    .await;
    let re_enabled = s
        .act(
            "/dashboard/resilience/re-enable",
            &[
                ("provider", "alpha"),
                ("connection", "alpha-1"),
                ("model", "mock-large"),
            ],
        )
        .await;
    assert_no_credential(&re_enabled);
    assert_eq!(
        notice(&re_enabled),
        done("mock-large re-enabled on alpha-1: 1 lock cleared.")
    );
    assert_eq!(table_rows(&re_enabled, LOCKS), [["No model is locked."]]);
    assert_eq!(
        s.h.admin_json("/api/resilience/model-cooldowns").await,
        json!([])
    );
    assert_eq!(
        s.h.chat(chat_body("alpha/mock-large", false))
            .await
            .status(),
        200
    );
}

/// `key`'s value and source as `GET /api/settings` shows them.
async fn api_setting(s: &Signed, key: &str) -> (Value, Value) {
    let all = s.h.admin_json("/api/settings").await;
    let v = all
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["key"] == key)
        .unwrap()
        .clone();
    (v["value"].clone(), v["source"].clone())
}

#[tokio::test]
async fn breaker_and_cooldown_profiles_are_set_on_the_page_and_checked_together() {
    let s = Signed::start().await;
    let body = page(&s).await;
    assert_eq!(
        row(&body, OTHERS, "breaker.apiKey.openAt").unwrap(),
        [
            "breaker.apiKey.openAt",
            "12",
            "default",
            "live",
            "SWITCHYARD_BREAKER_API_KEY_OPEN_AT",
            "12",
            "an integer between 1 and 10000",
            "Consecutive provider-level failures that open an API-key provider's breaker (routing skips it).",
            "New value Set"
        ]
    );
    let rows = table_rows(&body, OTHERS);
    let at = rows
        .iter()
        .position(|r| r[0] == "breaker.apiKey.openAt")
        .unwrap();
    assert_eq!(
        form_fields(
            &body,
            &format!(
                "tbody tr:nth-child({}) form[action='/dashboard/settings']",
                at + 1
            )
        )[1..],
        [
            ("key", "breaker.apiKey.openAt"),
            ("back", PAGE),
            ("value", "")
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
    assert_eq!(
        row_head(&body, OTHERS, "cooldown.apiKey.baseMs", 7).unwrap(),
        [
            "cooldown.apiKey.baseMs",
            "3000",
            "default",
            "live",
            "SWITCHYARD_COOLDOWN_API_KEY_BASE_MS",
            "3000",
            "an integer between 100 and 600000"
        ]
    );
    assert_eq!(
        row_head(&body, OTHERS, "breaker.local.degradeAt", 3).unwrap(),
        ["breaker.local.degradeAt", "1", "default"]
    );
    assert_eq!(
        row_head(&body, OTHERS, "cooldown.oauth.backoffSteps", 3).unwrap(),
        ["cooldown.oauth.backoffSteps", "8", "default"]
    );

    // openAt 3 below the API-key degradeAt (7): the API's message, nothing written.
    let r =
        s.h.admin_send(
            Method::PUT,
            "/api/settings/breaker.apiKey.openAt",
            json!({"value": 3}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    let message = e["error"]["message"].as_str().unwrap().to_owned();
    assert_eq!(
        message,
        "breaker.apiKey.degradeAt (7) must be <= breaker.apiKey.openAt (3)"
    );
    let s = &s;
    let set = |key: &'static str, value: &'static str| async move {
        s.act(
            "/dashboard/settings",
            &[("key", key), ("value", value), ("back", PAGE)],
        )
        .await
    };
    let bad = set("breaker.apiKey.openAt", "3").await;
    assert_eq!(notice(&bad), failed(&message));
    assert_eq!(
        api_setting(s, "breaker.apiKey.openAt").await,
        (json!(12), json!("default"))
    );

    let saved = set("breaker.apiKey.degradeAt", "2").await;
    assert_eq!(notice(&saved), done("breaker.apiKey.degradeAt saved."));
    let saved = set("breaker.apiKey.openAt", "3").await;
    assert_no_credential(&saved);
    assert_eq!(notice(&saved), done("breaker.apiKey.openAt saved."));
    assert_eq!(
        row_head(&saved, OTHERS, "breaker.apiKey.openAt", 6).unwrap(),
        [
            "breaker.apiKey.openAt",
            "3",
            "database",
            "live",
            "SWITCHYARD_BREAKER_API_KEY_OPEN_AT",
            "12"
        ]
    );
    assert_eq!(
        api_setting(s, "breaker.apiKey.openAt").await,
        (json!(3), json!("database"))
    );
    assert_eq!(
        api_setting(s, "breaker.apiKey.degradeAt").await,
        (json!(2), json!("database"))
    );
}

#[tokio::test]
async fn error_rules_are_listed_and_edited_and_egress_buckets_shown() {
    let s = Signed::start().await;
    let before = page(&s).await;
    assert_eq!(
        table_rows(&before, RESTATEMENTS),
        [[
            "built-in",
            "agentrouter-quota-restated",
            "agentrouter",
            "400, 403",
            "429",
            "用户额度不足, 额度不足",
            "无权访问模型",
            "1 min"
        ]]
    );
    let builtin: Vec<Vec<String>> = table_rows(&before, RULES);
    assert_eq!(
        builtin.iter().map(|r| r[1].as_str()).collect::<Vec<_>>(),
        [
            "agentrouter-model-access-denied",
            "agentrouter-user-quota-exhausted",
            "opencode-status-429",
            "minimax-status-429",
            "minimax-overloaded"
        ]
    );
    assert_eq!(
        builtin[0],
        [
            "built-in",
            "agentrouter-model-access-denied",
            "agentrouter",
            "400, 403",
            "text: 无权访问模型",
            "auth_error",
            "model",
            "6 h"
        ]
    );
    assert_eq!(field(&before, RULES_FORM, "rules").as_deref(), Some("[]"));
    // No attempt yet: no egress known.
    assert_eq!(
        table_rows(&before, EGRESS),
        [["No upstream attempt seen yet."]]
    );

    // A bad rule: the API's message, nothing changed.
    let bad =
        r#"[{"id": "x", "provider": "alpha", "statuses": [302], "reason": "quota_exhausted"}]"#;
    let message = api_error(
        &s,
        json!({"errorRules": {"rules": serde_json::from_str::<Value>(bad).unwrap()}}),
    )
    .await;
    assert!(
        message.contains("rule `x`: statuses entry 302"),
        "{message}"
    );
    let refused = s
        .act("/dashboard/resilience/error-rules", &[("rules", bad)])
        .await;
    assert_eq!(notice(&refused), failed(&message));
    let not_json = s
        .act("/dashboard/resilience/error-rules", &[("rules", "[{")])
        .await;
    assert!(
        notice(&not_json).contains("not a list of error rules"),
        "{}",
        notice(&not_json)
    );
    s.refused_without_csrf("/dashboard/resilience/error-rules", &[("rules", "[]")])
        .await;
    assert_eq!(
        s.h.admin_json("/api/resilience").await["errorRules"]["rules"],
        json!([])
    );

    let rule = r#"[{"id": "alpha-quota-400", "provider": "alpha", "statuses": [400],
        "textMarkers": ["quota gone"], "reason": "quota_exhausted", "scope": "connection",
        "cooldownMs": 60000}]"#;
    let saved = s
        .act("/dashboard/resilience/error-rules", &[("rules", rule)])
        .await;
    assert_eq!(
        notice(&saved),
        done("Error rules saved: 0 restatements and 1 rules of the operator's.")
    );
    assert_eq!(
        table_rows(&saved, RULES)[0],
        [
            "operator",
            "alpha-quota-400",
            "alpha",
            "400",
            "text: quota gone",
            "quota_exhausted",
            "connection",
            "1 min"
        ]
    );
    assert_eq!(
        s.h.admin_json("/api/resilience").await["errorRules"]["rules"],
        serde_json::from_str::<Value>(rule).unwrap()
    );
    // The operator's rule decides the next 400 of alpha: a quota, read as a 429.
    enable_cooling(&s, "alpha-1", "alpha").await;
    s.h.rule(
        json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 400,
                    "body": {"error": {"message": "quota gone"}}}),
    )
    .await;
    let r = s.h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(api_state(&s, "alpha-1").await["state"], "cooling");
    let after = page(&s).await;
    assert_eq!(
        table_rows(&after, EGRESS),
        [["alpha", "127.0.0.1", "no", "alpha-1"]]
    );
}
