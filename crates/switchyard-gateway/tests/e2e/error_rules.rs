//! Provider error rules and egress lockout end to end (SPEC R13, R14), against the mock
//! scripted with the answers providers are known for: agentrouter's quota 403 in
//! Chinese, its model-access refusal, a client's 400, a context too long, an operator's
//! rule on a 400 and on a stream's error event, and opencode's per-IP 429.

use serde_json::{json, Value};
use switchyard_test_support::*;

/// agentrouter (the family by its id) with two connections, and a direct provider pair
/// for the 400 cases.
fn agentrouter(mock_url: &str) -> Config {
    Config::new()
        .provider(Provider::openai("agentrouter", mock_url).models(["m", "other"]))
        .provider(Provider::openai("alpha", mock_url).models(["mock-small"]))
        .provider(Provider::openai("beta", mock_url).models(["mock-small"]))
        .connection(Connection::apikey("ar-1", "agentrouter").credential("cred-ar-1"))
        .connection(Connection::apikey("ar-2", "agentrouter").credential("cred-ar-2"))
        .connection(Connection::apikey("alpha-1", "alpha").credential(CRED_ALPHA))
        .connection(Connection::apikey("beta-1", "beta").credential(CRED_BETA))
        .combo(Combo::priority(
            "pair",
            ["alpha/mock-small", "beta/mock-small"],
        ))
        .key(Key::new("k1", "tester", KEY))
}

/// One connection's state as `GET /api/resilience/cooldowns` lists it.
async fn state_of(h: &Harness, connection: &str) -> Value {
    let list: Value = h.admin_json("/api/resilience/cooldowns").await;
    list.as_array()
        .unwrap()
        .iter()
        .find(|c| c["connectionId"] == connection)
        .cloned()
        .unwrap()
}

/// Clears every connection's cooldown.
async fn clear_cooldowns(h: &Harness) {
    let body = json!({"all": true});
    let r = h
        .admin_send(reqwest::Method::POST, "/api/resilience/cooldowns", body)
        .await;
    assert_eq!(r.status(), 200);
}

/// `PATCH /api/resilience` with the operator's error `rules`.
async fn patch_rules(h: &Harness, rules: Value) -> reqwest::Response {
    let body = json!({"errorRules": {"rules": rules}});
    h.admin_send(reqwest::Method::PATCH, "/api/resilience", body)
        .await
}

#[tokio::test]
async fn an_agentrouter_quota_403_is_restated_to_429_and_cools_only_that_connection() {
    let h = Harness::start_with(agentrouter, &[]).await;
    // Whichever connection the request tries first.
    h.rule(json!({"times": 1, "status": 403,
                  "body": {"error": {"message": "用户额度不足, 请充值"}}}))
        .await;
    let r = h.chat(chat_body("agentrouter/m", false)).await;
    assert_eq!(r.status(), 200);
    let row = h.newest_log_row(1).await;
    let (first, answered) = match row["connection_id"].as_str() {
        Some("ar-2") => ("ar-1", "ar-2"),
        _ => ("ar-2", "ar-1"),
    };
    assert_eq!(row["connection_id"], answered);
    assert_eq!(
        row["failed_attempts"],
        json!([{"provider": "agentrouter", "connection_id": first, "model": "m",
                "outcome": "rate_limited", "cause": "quota_exhausted", "upstream_status": 403,
                "restated_status": 429, "restated_by": "agentrouter-quota-restated",
                "rule": "agentrouter-user-quota-exhausted", "scope": "connection",
                "egress_ip": "127.0.0.1"}])
    );
    // A quota that comes back: cooling (the API-key base, 3 s), never terminal, and no
    // model lock.
    let cooled = state_of(&h, first).await;
    assert_eq!(
        (
            &cooled["state"],
            &cooled["errorCode"],
            &cooled["lastErrorType"]
        ),
        (&json!("cooling"), &json!(429), &json!("rate_limited"))
    );
    assert_eq!(cooled["modelLocks"], json!([]));
    assert_eq!(state_of(&h, answered).await["state"], "active");
}

#[tokio::test]
async fn the_last_agentrouter_connection_out_of_quota_answers_a_retryable_429() {
    let h = Harness::start_with(agentrouter, &[]).await;
    for cred in ["cred-ar-1", "cred-ar-2"] {
        h.rule(
            json!({"times": 1, "match": {"credential": cred}, "status": 403,
                      "body": {"error": {"message": "额度不足"}}}),
        )
        .await;
    }
    let r = h.chat(chat_body("agentrouter/m", false)).await;
    // Not the 403 a client such as Claude Code gives up on: a 429 with the
    // restatement's 60 s.
    assert_eq!(r.status(), 429);
    assert_eq!(retry_after(&r), 60);
}

#[tokio::test]
async fn an_agentrouter_model_refusal_locks_that_model_on_that_connection_only() {
    let h = Harness::start_with(agentrouter, &[]).await;
    h.rule(json!({"times": 1, "status": 403,
                  "body": {"error": {"message": "无权访问模型 m (额度不足 is not the issue)"}}}))
        .await;
    // Excluded from the restatement: the client sees the 403 as it is.
    let r = h.chat(chat_body("agentrouter/m", false)).await;
    assert_eq!(r.status(), 403);
    let refused = h.newest_log_row(1).await["connection_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let other_connection = if refused == "ar-1" { "ar-2" } else { "ar-1" };
    let locks: Value = h.admin_json("/api/resilience/model-cooldowns").await;
    assert_eq!(locks.as_array().unwrap().len(), 1, "{locks}");
    let lock = &locks[0];
    assert_eq!(
        (
            &lock["provider"],
            &lock["connection"],
            &lock["scope"],
            &lock["name"],
            &lock["status"]
        ),
        (
            &json!("agentrouter"),
            &json!(refused),
            &json!("model"),
            &json!("m"),
            &json!(403)
        )
    );
    // The rule's 6 h is held to the lockout's longest lock (30 min), even with model
    // lockout off.
    let left = lock["remainingMs"].as_u64().unwrap();
    assert!((1_790_000..=1_800_000).contains(&left), "{left}");
    // The connection itself stays in service, for its other models; `m` goes to the
    // other connection, whichever the rotation puts first.
    assert_eq!(state_of(&h, &refused).await["state"], "active");
    let mut rows = 1;
    for _ in 0..2 {
        assert_eq!(
            h.chat(chat_body("agentrouter/other", false)).await.status(),
            200
        );
        assert_eq!(
            h.chat(chat_body("agentrouter/m", false)).await.status(),
            200
        );
        rows += 2;
        assert_eq!(
            h.newest_log_row(rows).await["connection_id"],
            other_connection
        );
    }
}

#[tokio::test]
async fn a_client_s_400_stops_at_once_and_cools_nothing() {
    let h = Harness::start_with(agentrouter, &[]).await;
    h.rule(json!({"match": {"credential": CRED_ALPHA}, "status": 400,
                  "body": {"error": {"message": "messages: field required", "type": "invalid_request_error"}}}))
        .await;
    for _ in 0..3 {
        let (status, body) = status_and_json(h.chat(chat_body("pair", false)).await).await;
        assert_eq!(status, 400);
        assert_eq!(body["error"]["message"], "messages: field required");
    }
    // Not one account cooled, and beta never asked.
    assert_eq!(h.by_credential(CRED_BETA).await, 0);
    for c in ["alpha-1", "beta-1"] {
        assert_eq!(state_of(&h, c).await["state"], "active", "{c}");
    }
}

#[tokio::test]
async fn a_context_too_long_moves_on_and_is_the_answer_when_nothing_else_fits() {
    let h = Harness::start_with(agentrouter, &[]).await;
    let too_long = json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 400,
        "body": {"error": {"message": "This model's maximum context length is 8192 tokens",
                           "code": "context_length_exceeded"}}});
    h.rule(too_long.clone()).await;
    assert_eq!(h.chat(chat_body("pair", false)).await.status(), 200);
    assert_eq!(h.by_credential(CRED_BETA).await, 1);
    // Neither fits: the client gets the first refusal, not a gateway error.
    h.rule(too_long).await;
    h.rule(json!({"times": 1, "match": {"credential": CRED_BETA}, "status": 400,
                  "body": {"error": {"message": "prompt is too long", "code": "context_length_exceeded"}}}))
        .await;
    let (status, body) = status_and_json(h.chat(chat_body("pair", false)).await).await;
    assert_eq!(status, 400);
    assert_eq!(
        body["error"]["message"],
        "This model's maximum context length is 8192 tokens"
    );
    for c in ["alpha-1", "beta-1"] {
        assert_eq!(state_of(&h, c).await["state"], "active", "{c}");
    }
    // The same model's other account has the same window: it is not asked.
    h.rule(json!({"times": 1, "status": 400,
                  "body": {"error": {"message": "prompt is too long", "code": "context_length_exceeded"}}}))
        .await;
    let (status, body) = status_and_json(h.chat(chat_body("agentrouter/m", false)).await).await;
    assert_eq!(
        (status, body["error"]["message"].as_str()),
        (400, Some("prompt is too long"))
    );
    let row = h.newest_log_row(3).await;
    assert_eq!(row["attempts"], 1, "{row}");
}

#[tokio::test]
async fn an_operator_rule_makes_a_400_the_account_s_and_bad_rules_change_nothing() {
    let h = Harness::start_with(agentrouter, &[]).await;
    let bad = patch_rules(
        &h,
        json!([{"id": "x", "provider": "alpha", "statuses": [302],
                                             "reason": "quota_exhausted"}]),
    )
    .await;
    let (status, body) = status_and_json(bad).await;
    assert_eq!(status, 400);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("rule `x`: statuses entry 302 is not an HTTP error status"),
        "{message}"
    );
    let view: Value = h.admin_json("/api/resilience").await;
    assert_eq!(view["errorRules"]["rules"], json!([]));

    let rule = json!({"id": "alpha-quota-400", "provider": "alpha", "statuses": [400],
                      "textMarkers": ["quota gone"], "reason": "quota_exhausted",
                      "scope": "connection", "cooldownMs": 60000});
    let ok = patch_rules(&h, json!([rule])).await;
    let (status, view) = status_and_json(ok).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["errorRules"]["rules"], json!([rule]));
    // The rules in force: the operator's first, then the built-in ones.
    let in_force: Value = h.admin_json("/api/resilience/error-rules").await;
    assert_eq!(in_force["rules"], json!([rule]));
    assert_eq!(
        in_force["builtinRules"][0]["id"],
        "agentrouter-model-access-denied"
    );
    assert_eq!(
        (
            &in_force["fullTextFamilies"],
            &in_force["honorsScopeFamilies"],
            &in_force["egressBucketedFamilies"]
        ),
        (
            &json!(["agentrouter"]),
            &json!(["agentrouter"]),
            &json!(["opencode"])
        )
    );
    h.rule(
        json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 400,
                  "body": {"error": {"message": "your quota gone for today"}}}),
    )
    .await;
    assert_eq!(h.chat(chat_body("pair", false)).await.status(), 200);
    let alpha = state_of(&h, "alpha-1").await;
    assert_eq!(alpha["state"], "cooling");
    // The rule's minute, not the 3 s backoff.
    let left = alpha["remainingMs"].as_u64().unwrap();
    assert!((50_000..=60_000).contains(&left), "{left}");
    let row = h.newest_log_row(1).await;
    assert_eq!(row["failed_attempts"][0]["rule"], "alpha-quota-400");
    assert_eq!(row["failed_attempts"][0]["cause"], "quota_exhausted");
}

#[tokio::test]
async fn an_operator_rule_matches_a_stream_s_error_event_before_and_after_it_commits() {
    let h = Harness::start_with(agentrouter, &[]).await;
    let fault = json!({"times": 1, "match": {"credential": CRED_ALPHA},
                       "end_after_chunks": 0,
                       "stream_error": {"type": "insufficient_quota", "message": "out of quota"}});
    // Without a rule: the next candidate answers, and nothing cools.
    h.rule(fault.clone()).await;
    let r = h.chat(chat_body("pair", true)).await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("[DONE]"));
    assert_eq!(state_of(&h, "alpha-1").await["state"], "active");
    let rule = json!({"id": "alpha-stream-quota", "provider": "alpha", "statuses": [200],
                      "codes": ["insufficient_quota"], "reason": "quota_exhausted",
                      "scope": "connection", "cooldownMs": 120000});
    let ok = patch_rules(&h, json!([rule])).await;
    assert_eq!(ok.status(), 200);
    h.rule(fault).await;
    let r = h.chat(chat_body("pair", true)).await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("[DONE]"));
    let alpha = state_of(&h, "alpha-1").await;
    assert_eq!(alpha["state"], "cooling");
    let left = alpha["remainingMs"].as_u64().unwrap();
    assert!((110_000..=120_000).contains(&left), "{left}");
    let row = h.newest_log_row(2).await;
    assert_eq!(
        (
            &row["failed_attempts"][0]["outcome"],
            &row["failed_attempts"][0]["rule"]
        ),
        (&json!("stream_error"), &json!("alpha-stream-quota"))
    );
    // After the stream committed, the client gets the error frame, and the rule still
    // cools the account that sent it.
    clear_cooldowns(&h).await;
    h.rule(json!({"times": 1, "match": {"credential": CRED_ALPHA},
                  "stream_error": {"type": "insufficient_quota", "message": "out of quota"}}))
        .await;
    let r = h.chat(chat_body("pair", true)).await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("out of quota"));
    eventually("the committed stream's verdict cools alpha-1", || async {
        state_of(&h, "alpha-1").await["state"] == "cooling"
    })
    .await;
}

/// opencode (per-IP limits) with three connections, and alpha with two, all behind the
/// test machine's 127.0.0.1.
fn egress(mock_url: &str) -> Config {
    Config::new()
        .provider(Provider::openai("opencode", mock_url).models(["m"]))
        .provider(Provider::openai("alpha", mock_url).models(["m"]))
        .connection(Connection::apikey("oc-1", "opencode").credential("cred-oc-1"))
        .connection(Connection::apikey("oc-2", "opencode").credential("cred-oc-2"))
        .connection(Connection::apikey("oc-3", "opencode").credential("cred-oc-3"))
        .connection(Connection::apikey("al-1", "alpha").credential("cred-al-1"))
        .connection(Connection::apikey("al-2", "alpha").credential("cred-al-2"))
        .key(Key::new("k1", "tester", KEY))
}

/// Sends requests to `provider` whose first attempt answers 503 (cooling it) until every
/// one of its `connections` has answered once and has a known egress, then clears the
/// cooldowns.
async fn see_every_egress(h: &Harness, provider: &str, connections: usize) {
    for _ in 1..connections {
        h.rule(json!({"times": 1, "status": 503})).await;
        assert_eq!(
            h.chat(chat_body(&format!("{provider}/m"), false))
                .await
                .status(),
            200
        );
    }
    clear_cooldowns(h).await;
}

/// `(family, bucketed, connections)` of each egress bucket the API lists.
async fn buckets(h: &Harness) -> Vec<(Value, Value, Value)> {
    let view: Value = h.admin_json("/api/resilience/egress").await;
    view.as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let ids: Vec<Value> = b["connections"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["connectionId"].clone())
                .collect();
            (b["family"].clone(), b["bucketed"].clone(), json!(ids))
        })
        .collect()
}

#[tokio::test]
async fn an_opencode_429_cools_every_connection_behind_the_same_egress() {
    let mut h = Harness::start_with(egress, &[]).await;
    see_every_egress(&h, "opencode", 3).await;
    see_every_egress(&h, "alpha", 2).await;
    let expected = [
        (json!("alpha"), json!(false), json!(["al-1", "al-2"])),
        (
            json!("opencode"),
            json!(true),
            json!(["oc-1", "oc-2", "oc-3"]),
        ),
    ];
    assert_eq!(buckets(&h).await, expected);
    // The last known egress is the request log's: it survives a restart.
    h.restart().await;
    assert_eq!(buckets(&h).await, expected);
    let rows = 3;
    let mut limited = Vec::new();
    for (provider, row) in [("opencode", rows + 1), ("alpha", rows + 2)] {
        h.rule(json!({"times": 1, "status": 429, "headers": {"retry-after": "120"}}))
            .await;
        // The 429 is the last word for opencode: its peers are out with it.
        let status = h
            .chat(chat_body(&format!("{provider}/m"), false))
            .await
            .status();
        assert_eq!(status, if provider == "opencode" { 429 } else { 200 });
        let first = h.newest_log_row(row).await["failed_attempts"][0]["connection_id"].clone();
        limited.push(first.as_str().unwrap().to_owned());
    }
    for c in ["oc-1", "oc-2", "oc-3", limited[1].as_str()] {
        let s = state_of(&h, c).await;
        assert_eq!(s["state"], "cooling", "{c}");
        let left = s["remainingMs"].as_u64().unwrap();
        assert!((110_000..=120_000).contains(&left), "{c}: {left}");
    }
    let peers: Vec<&str> = ["oc-1", "oc-2", "oc-3"]
        .into_iter()
        .filter(|c| *c != limited[0])
        .collect();
    for c in &peers {
        assert_eq!(
            state_of(&h, c).await["lastError"],
            format!("egress 127.0.0.1 shared with {}", limited[0])
        );
    }
    // alpha's limits are per account: its other connection serves.
    let other = if limited[1] == "al-1" { "al-2" } else { "al-1" };
    assert_eq!(state_of(&h, other).await["state"], "active");
    for c in peers {
        let series = format!(
            r#"switchyard_connection_cooldowns_total{{connection="{c}",reason="egress_bucket"}}"#
        );
        assert_eq!(h.metric(&series).await, Some(1.0), "{c}");
    }
}
