//! The resilience page end to end: breakers and their reset, the cooldown manager's
//! clears (terminal states never cleared), model locks and their re-enable, and the
//! resilience settings, each checked on the page and through the management API.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions fail loudly on purpose"
)]

mod common;

use common::{assert_no_credential, done, failed, Signed};
use reqwest::Method;
use serde_json::{json, Value};
use switchyard_test_support::{chat_body, CRED_ALPHA, CRED_BETA};

const PAGE: &str = "/dashboard/resilience";

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
    assert!(before.contains(
        r##"<div id="resilience-live" hx-get="/dashboard/resilience" hx-trigger="every 30s" hx-select="#resilience-live" hx-swap="outerHTML">"##
    ));
    assert!(before.contains(
        r#"<tr><td>alpha</td><td><span class="state state-closed">CLOSED</span></td><td>0</td><td>—</td>"#
    ));
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
    let open = page(&s).await;
    let row = r#"<tr><td>alpha</td><td><span class="state state-open">OPEN</span></td><td>12</td>"#;
    assert!(open.contains(row), "{open}");
    // It lets a probe through 30 s after it opened.
    assert!(
        open.contains(&format!("{row}<td>30 s</td>"))
            || open.contains(&format!("{row}<td>29 s</td>")),
        "{open}"
    );
    assert!(open.contains(
        r#"<tr><td>beta</td><td><span class="state state-closed">CLOSED</span></td><td>0</td><td>—</td><td><form method="post" action="/dashboard/resilience/reset" class="inline">"#
    ));

    s.refused_without_csrf("/dashboard/resilience/reset", &[("provider", "alpha")])
        .await;
    assert_eq!(s.h.health().await["breakers"][0]["state"], "OPEN");

    let bad = s
        .act("/dashboard/resilience/reset", &[("provider", "nope")])
        .await;
    assert!(
        bad.contains(&failed("provider: unknown provider `nope`")),
        "{bad}"
    );
    assert_eq!(s.h.health().await["breakers"][0]["state"], "OPEN");

    let after = s
        .act("/dashboard/resilience/reset", &[("provider", "alpha")])
        .await;
    assert_no_credential(&after);
    assert!(after.contains(&done("alpha: 1 breaker reset.")), "{after}");
    assert!(after.contains(
        r#"<tr><td>alpha</td><td><span class="state state-closed">CLOSED</span></td><td>0</td><td>—</td>"#
    ));
    assert_eq!(s.h.health().await["breakers"], json!([]));
    assert_eq!(
        s.h.chat(chat_body("alpha/mock-small", false))
            .await
            .status(),
        200
    );
    // The notice is shown once.
    assert!(!page(&s).await.contains("id=\"notice\""));
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
    let alpha_row = r#"<tr><td>alpha-1</td><td>alpha</td><td>apikey</td><td><span class="state state-cooling">cooling</span></td>"#;
    assert!(cooling.contains(alpha_row), "{cooling}");
    // The selection form lies outside the live region, so a refresh keeps its ticks.
    let checkbox = r#"<input type="checkbox" name="connection" value="alpha-1" id="select-alpha-1"><label for="select-alpha-1">alpha-1 (cooling)</label>"#;
    let live_ends = cooling.find(r#"<h2 id="clear">"#).unwrap();
    assert!(cooling[live_ends..].contains(checkbox), "{cooling}");
    assert!(!cooling[..live_ends].contains("checkbox"));
    let rest = format!(
        "<td>{}</td><td>{}</td></tr>",
        alpha["backoffLevel"],
        alpha["lastError"].as_str().unwrap()
    );
    assert!(
        cooling.contains(&format!("{alpha_row}<td>120 s</td>{rest}"))
            || cooling.contains(&format!("{alpha_row}<td>119 s</td>{rest}")),
        "{cooling}"
    );
    assert!(cooling.contains(
        r#"<td><span class="state state-credits-exhausted">credits_exhausted</span></td>"#
    ));
    let beta = api_state(&s, "beta-1").await;
    assert!(cooling.contains(&format!(
        "<tr><td>beta-1</td><td>beta</td><td>credits_exhausted</td><td>{}</td></tr>",
        beta["lastError"].as_str().unwrap()
    )));

    // Nothing selected: the API's message, nothing cleared.
    let none = s.act("/dashboard/resilience/clear", &[]).await;
    assert!(
        none.contains(&failed(
            "connectionIds: list the connections, or set all: true"
        )),
        "{none}"
    );
    let unknown = s
        .act("/dashboard/resilience/clear", &[("connection", "nope")])
        .await;
    assert!(unknown.contains(&failed("connectionIds: unknown connection `nope`")));
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
    assert!(
        cleared.contains(&done(
            "1 cleared, 0 unchanged, 1 skipped as terminal; 0 model locks cleared."
        )),
        "{cleared}"
    );
    assert!(cleared.contains(r#"<tr><td>alpha-1</td><td>alpha</td><td>apikey</td><td><span class="state state-active">active</span></td><td>—</td>"#));
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
    assert!(by_provider.contains(&done(
        "1 cleared, 0 unchanged, 0 skipped as terminal; 0 model locks cleared."
    )));
    assert_eq!(api_state(&s, "alpha-1").await["state"], "active");

    // All.
    cool_alpha(&s).await;
    // Clearing all takes two steps: the summary unfolds the button that clears.
    assert!(by_provider.contains(&format!(
        r#"<details class="confirm"><summary>Clear all cooldowns…</summary><form method="post" action="/dashboard/resilience/clear-all"><input type="hidden" name="csrf" value="{}"><button type="submit">Clear every connection&#39;s cooldowns and model locks</button></form></details>"#,
        s.csrf
    )), "{by_provider}");
    let all = s.act("/dashboard/resilience/clear-all", &[]).await;
    assert!(all.contains(&done(
        "1 cleared, 0 unchanged, 1 skipped as terminal; 0 model locks cleared."
    )));
    assert_eq!(api_state(&s, "alpha-1").await["state"], "active");
    assert_eq!(api_state(&s, "beta-1").await["state"], "credits_exhausted");
    assert!(all.contains("<tr><td>beta-1</td><td>beta</td><td>credits_exhausted</td>"));
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
    assert!(form.contains(r#"<label for="lockout-baseCooldownMs">First lock (ms)</label><input type="number" id="lockout-baseCooldownMs" name="baseCooldownMs" value="120000">"#));
    assert!(form.contains(r#"<select id="lockout-enabled" name="enabled"><option value="true">on</option><option value="false" selected>off</option></select>"#));
    assert!(form.contains(r#"<input type="number" id="cooldown-apiKey-failureThreshold" name="apiKey.failureThreshold" value=""#));

    // Invalid values: the API's message, nothing changed.
    for (field, value) in [("baseCooldownMs", "abc"), ("maxCooldownMs", "500")] {
        let message = api_error(&s, json!({"modelLockout": {field: value}})).await;
        let bad = s
            .act("/dashboard/resilience/model-lockout", &[(field, value)])
            .await;
        assert!(bad.contains(&failed(&message)), "{message}: {bad}");
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
    assert!(bad.contains(&failed(&message)), "{bad}");
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
    assert!(bad.contains(&failed(&message)), "{bad}");
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
    assert!(
        saved.contains(&done("Model lockout settings saved.")),
        "{saved}"
    );
    assert!(saved.contains(r#"name="baseCooldownMs" value="60000">"#));
    assert!(saved.contains(r#"name="errorCodes" value="404,503">"#));
    assert!(saved.contains(
        r#"<select id="lockout-enabled" name="enabled"><option value="true" selected>on</option>"#
    ));
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
    assert!(
        saved.contains(&done("Provider cooldown settings saved.")),
        "{saved}"
    );
    assert!(saved.contains(r#"name="apiKey.cooldownMs" value="50000">"#));
    assert_eq!(
        s.h.admin_json("/api/resilience").await["providerCooldown"],
        json!({"enabled": false,
               "oauth": {"failureThreshold": 4, "failureWindowMs": 20000, "cooldownMs": 40000},
               "apiKey": {"failureThreshold": 6, "failureWindowMs": 30000, "cooldownMs": 50000}})
    );

    // The other resilience settings are set through the settings service and come back.
    assert!(saved.contains(
        "<tr><td>streamStallCooldown.enabled</td><td>false</td><td>default</td><td>STREAM_STALL_COOLDOWN_ENABLED</td>"
    ), "{saved}");
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
    assert!(stall.contains(&done("streamStallCooldown.enabled saved.")));
    assert!(
        stall.contains("<tr><td>streamStallCooldown.enabled</td><td>true</td><td>database</td>")
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
    let row =
        "<tr><td>alpha</td><td>alpha-1</td><td>model</td><td>mock-large</td><td>1</td><td>404</td>";
    assert!(
        locked.contains(&format!("{row}<td>60 s</td>"))
            || locked.contains(&format!("{row}<td>59 s</td>")),
        "{locked}"
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
    assert!(re_enabled.contains(&done("mock-large re-enabled on alpha-1: 1 lock cleared.")));
    assert!(re_enabled.contains("No model is locked."));
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
    assert!(body.contains(
        "<tr><td>breaker.apiKey.openAt</td><td>12</td><td>default</td><td>SWITCHYARD_BREAKER_API_KEY_OPEN_AT</td><td>12</td><td>an integer between 1 and 10000</td><td>Consecutive provider-level failures that open an API-key provider&#39;s breaker (routing skips it).</td>"
    ), "{body}");
    assert!(body.contains(
        r#"<input type="hidden" name="key" value="breaker.apiKey.openAt"><input type="hidden" name="back" value="/dashboard/resilience"><label for="value-breaker-apiKey-openAt">New value</label> <input type="text" id="value-breaker-apiKey-openAt" name="value"> <button type="submit">Set</button></form></td></tr>"#
    ), "{body}");
    assert!(body.contains(
        "<tr><td>cooldown.apiKey.baseMs</td><td>3000</td><td>default</td><td>SWITCHYARD_COOLDOWN_API_KEY_BASE_MS</td><td>3000</td><td>an integer between 100 and 600000</td>"
    ), "{body}");
    assert!(body.contains("<tr><td>breaker.local.degradeAt</td><td>1</td><td>default</td>"));
    assert!(body.contains("<tr><td>cooldown.oauth.backoffSteps</td><td>8</td><td>default</td>"));

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
    assert!(bad.contains(&failed(&message)), "{bad}");
    assert_eq!(
        api_setting(s, "breaker.apiKey.openAt").await,
        (json!(12), json!("default"))
    );

    let saved = set("breaker.apiKey.degradeAt", "2").await;
    assert!(
        saved.contains(&done("breaker.apiKey.degradeAt saved.")),
        "{saved}"
    );
    let saved = set("breaker.apiKey.openAt", "3").await;
    assert_no_credential(&saved);
    assert!(
        saved.contains(&done("breaker.apiKey.openAt saved.")),
        "{saved}"
    );
    assert!(saved.contains(
        "<tr><td>breaker.apiKey.openAt</td><td>3</td><td>database</td><td>SWITCHYARD_BREAKER_API_KEY_OPEN_AT</td><td>12</td>"
    ), "{saved}");
    assert_eq!(
        api_setting(s, "breaker.apiKey.openAt").await,
        (json!(3), json!("database"))
    );
    assert_eq!(
        api_setting(s, "breaker.apiKey.degradeAt").await,
        (json!(2), json!("database"))
    );
}
