//! The Anthropic Messages API: the front door, the Anthropic upstream adapter, and
//! translation to and from OpenAI-format upstreams.

use serde_json::{json, Value};
use switchyard_mock::anthropic;
use switchyard_test_support::*;

async fn start() -> Harness {
    Harness::start_with(Config::anthropic, &[]).await
}

#[tokio::test]
async fn a_pass_through_message_is_the_upstream_body_unchanged() {
    let h = start().await;
    let r = h.messages(messages_body("claude/claude-opus", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body, anthropic::message("claude-opus", 5, PROMPT_TOKENS));
}

#[tokio::test]
async fn errors_on_the_messages_route_have_anthropics_shape() {
    let h = start().await;
    let r = h
        .http
        .post(h.url("/v1/messages?beta=true"))
        .header("anthropic-version", ANTHROPIC_VERSION)
        .json(&messages_body("claude/claude-opus", false))
        .send()
        .await
        .unwrap();
    let (status, body) = status_and_json(r).await;
    assert_eq!(status, 401);
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "authentication_error");
    assert_eq!(body["error"]["code"], "invalid_api_key");
    let (status, body) =
        status_and_json(h.messages(messages_body("claude/nope", false)).await).await;
    assert_eq!(status, 404);
    assert_eq!(
        body,
        json!({"type": "error", "error": {"type": "not_found_error",
            "message": "model `claude/nope` does not exist: use provider/model or a combo name (see GET /v1/models)",
            "code": "model_not_found"}})
    );
    let r = h
        .http
        .get(h.url("/v1/messages"))
        .header("x-api-key", KEY)
        .send()
        .await
        .unwrap();
    let (status, body) = status_and_json(r).await;
    assert_eq!(status, 405);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let mut bad = messages_body("claude/claude-opus", false);
    bad["messages"] = json!([]);
    let (status, body) = status_and_json(h.messages(bad).await).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(
        body["error"]["message"],
        "`messages` is required and must be a non-empty array"
    );
}

#[tokio::test]
async fn models_answer_in_anthropics_list_shape_when_asked_with_anthropic_version() {
    let h = start().await;
    let r = h
        .http
        .get(h.url("/v1/models"))
        .header("x-api-key", KEY)
        .header("anthropic-version", ANTHROPIC_VERSION)
        .send()
        .await
        .unwrap();
    let (status, body) = status_and_json(r).await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "alpha/mock-small",
            "alpha/mock-large",
            "beta/mock-small",
            "claude/claude-opus",
            "claude/claude-haiku",
            "fast",
            "mixed"
        ]
    );
    assert_eq!(
        body["data"][0],
        json!({"type": "model", "id": "alpha/mock-small", "display_name": "alpha/mock-small",
               "created_at": "1970-01-01T00:00:00Z"})
    );
    assert_eq!(body["has_more"], false);
    assert_eq!(body["first_id"], "alpha/mock-small");
    assert_eq!(body["last_id"], "mixed");
}
