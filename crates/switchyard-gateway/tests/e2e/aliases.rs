//! Model aliases (SPEC G3): a name that is neither a combo nor a `provider/model` follows
//! the first matching alias (the asking key's own first), in the config file and through
//! the API; `GET /v1/models` lists them; a name nothing matches gets 404
//! `model_not_found` naming what may be asked for.

use reqwest::Method;
use serde_json::{json, Value};
use switchyard_test_support::{
    chat_body, messages_body, status_and_json, Config, Harness, ANTHROPIC_VERSION, KEY, OPS_KEY,
};

fn with_aliases(mock: &str) -> Config {
    Config::anthropic(mock)
        .alias("*haiku*", "claude/claude-haiku", [])
        .alias("claude-*", "mixed", [])
        .alias("gpt-*", "alpha/mock-large", ["k1"])
}

/// The upstream model of the newest request the mock received.
async fn last_upstream(h: &Harness) -> (String, String) {
    let r = h.mock_requests().await;
    let last = r.last().expect("the mock received a request");
    (
        last["credential"].as_str().unwrap_or_default().to_owned(),
        last["body"]["model"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

#[tokio::test]
async fn claude_codes_own_model_names_follow_the_aliases() {
    let h = Harness::start_with(with_aliases, &[]).await;
    for (asked, upstream) in [
        ("claude-opus-4-5-20251101", "claude-opus"),
        ("claude-haiku-4-5-20251001", "claude-haiku"),
        ("claude-sonnet-4-5", "claude-opus"),
    ] {
        let (status, body) = status_and_json(h.messages(messages_body(asked, false)).await).await;
        assert_eq!(status, 200, "{asked}: {body}");
        // The answer names the model that answered, as for a combo.
        assert_eq!(body["model"], upstream);
        let (credential, model) = last_upstream(&h).await;
        assert_eq!(
            (credential.as_str(), model.as_str()),
            (switchyard_test_support::CRED_CLAUDE, upstream),
            "{asked}"
        );
    }
    // A real name never follows an alias.
    let (status, _) =
        status_and_json(h.messages(messages_body("claude/claude-opus", false)).await).await;
    assert_eq!(status, 200);
    let row = h.newest_log_row(4).await;
    assert_eq!(row["requested_model"], "claude/claude-opus");
    // Only `k1` has the `gpt-*` alias.
    let (status, body) = status_and_json(h.chat(chat_body("gpt-5.1-codex-max", false)).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(last_upstream(&h).await.1, "mock-large");
    let (status, body) = status_and_json(
        h.chat_as(OPS_KEY, chat_body("gpt-5.1-codex-max", false))
            .await,
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(
        body["error"],
        json!({"type": "invalid_request_error", "code": "model_not_found", "param": null,
            "message": "model `gpt-5.1-codex-max` does not exist; ask for one of: alpha/mock-small, alpha/mock-large, beta/mock-small, claude/claude-opus, claude/claude-haiku, fast, mixed, *haiku*, claude-* (see GET /v1/models)"})
    );
}

#[tokio::test]
async fn the_model_list_names_the_aliases_a_key_may_follow() {
    let h = Harness::start_with(with_aliases, &[]).await;
    let ids = |list: &Value| -> Vec<String> {
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let list = |key: &'static str| h.http.get(h.url("/v1/models")).bearer_auth(key).send();
    let k1: Value = list(KEY).await.unwrap().json().await.unwrap();
    assert_eq!(
        ids(&k1),
        [
            "alpha/mock-small",
            "alpha/mock-large",
            "beta/mock-small",
            "claude/claude-opus",
            "claude/claude-haiku",
            "fast",
            "mixed",
            "gpt-*",
            "*haiku*",
            "claude-*"
        ]
    );
    let ops: Value = list(OPS_KEY).await.unwrap().json().await.unwrap();
    assert!(!ids(&ops).contains(&"gpt-*".to_owned()));
    // Anthropic's shape for the Anthropic SDKs.
    let anthropic: Value = h
        .http
        .get(h.url("/v1/models"))
        .header("x-api-key", KEY)
        .header("anthropic-version", ANTHROPIC_VERSION)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(anthropic["last_id"], "claude-*");
    assert_eq!(anthropic["data"][9]["type"], "model");
}

#[tokio::test]
async fn aliases_are_replaced_through_the_api_and_checked_first() {
    let h = Harness::start().await;
    let (status, body) = status_and_json(h.chat(chat_body("gpt-4o", false)).await).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("model_not_found"))
    );
    let put = |list: Value| h.admin_send(Method::PUT, "/api/aliases", json!({"aliases": list}));
    for (list, message) in [
        (
            json!([{"pattern": "gpt-*", "target": "nope"}]),
            "alias `gpt-*`: target `nope` is neither a combo nor provider/model",
        ),
        (
            json!([{"pattern": "gpt-*", "target": "beta/mock-large"}]),
            "alias `gpt-*`: target `beta/mock-large`: provider `beta` does not offer model `mock-large`",
        ),
        (
            json!([{"pattern": "gpt-*", "target": "qtSd/none"}]),
            "alias `gpt-*`: target `qtSd/none` names unknown quota pool `none`",
        ),
        (
            json!([{"pattern": "*", "target": "fast"}]),
            "alias `*`: pattern matches every name: name a default combo as the alias of a glob such as `claude-*` instead",
        ),
        (
            json!([{"pattern": "gpt-*", "target": "fast", "keys": ["ghost"]}]),
            "alias `gpt-*`: key `ghost` does not exist",
        ),
    ] {
        let (status, body) = status_and_json(put(list).await).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["message"], message);
    }
    let (status, body) =
        status_and_json(put(json!([{"pattern": "gpt-*", "target": "x", "colour": 1}])).await).await;
    assert_eq!(status, 400, "{body}");
    // Nothing was written.
    assert_eq!(h.admin_json("/api/aliases").await, json!({"aliases": []}));
    let list = json!([
        {"pattern": "gpt-4o", "target": "beta/mock-small"},
        {"pattern": "gpt-*", "target": "fast", "keys": ["k1"]}
    ]);
    let (status, body) = status_and_json(put(list.clone()).await).await;
    let listed = json!({"aliases": list});
    assert_eq!((status, &body), (200, &listed));
    assert_eq!(h.admin_json("/api/aliases").await, listed);
    // The key's own alias wins over an earlier one for every key.
    let (status, _) = status_and_json(h.chat(chat_body("gpt-4o", false)).await).await;
    assert_eq!(status, 200);
    assert_eq!(
        last_upstream(&h).await.0,
        switchyard_test_support::CRED_ALPHA
    );
    let (status, _) = status_and_json(h.chat_as(OPS_KEY, chat_body("gpt-4o", false)).await).await;
    assert_eq!(status, 200);
    assert_eq!(
        last_upstream(&h).await.0,
        switchyard_test_support::CRED_BETA
    );
    // A combo an alias leads to cannot be deleted from under it.
    let (status, body) = status_and_json(
        h.admin_send(Method::DELETE, "/api/combos/fast", json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["error"]["message"],
        "combo `fast` is still used by aliases gpt-*"
    );
    let (status, body) = status_and_json(
        h.admin_send(Method::DELETE, "/api/keys/k1", json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["error"]["message"],
        "key `k1` is still used by aliases gpt-*"
    );
    let (status, body) = status_and_json(
        h.admin_send(Method::DELETE, "/api/providers/beta", json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["error"]["message"],
        "provider `beta` is still used by aliases gpt-4o"
    );
    // Aliases persist across a restart.
    let mut h = h;
    h.restart().await;
    assert_eq!(h.admin_json("/api/aliases").await, listed);
    let (status, _) = status_and_json(h.chat(chat_body("gpt-5", false)).await).await;
    assert_eq!(status, 200);
}
