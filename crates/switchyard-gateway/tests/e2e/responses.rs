//! The OpenAI Responses API: the front door, the Responses upstream adapter, and
//! translation to and from chat and Anthropic upstreams.

use serde_json::{json, Value};
use switchyard_test_support::*;

async fn start() -> Harness {
    Harness::start_with(Config::responses, &[]).await
}

/// What the mock answers `body` directly, as the upstream `codex-1` would.
async fn direct(h: &Harness, body: &Value) -> String {
    h.http
        .post(format!("{}/v1/responses", h.mock.base_url()))
        .bearer_auth(CRED_CODEX)
        .json(body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The `type`s of a Responses event stream, in order.
fn event_types(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter_map(|f| f.strip_prefix("event: "))
        .map(|f| f.split('\n').next().unwrap().to_owned())
        .collect()
}

/// The data of the last event of a stream.
fn last_data(text: &str) -> Value {
    let frame = text.trim_end().rsplit("\n\n").next().unwrap();
    let data = frame
        .split('\n')
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap();
    serde_json::from_str(data).unwrap()
}

#[tokio::test]
async fn a_pass_through_answer_is_the_upstreams_byte_for_byte_and_no_client_header_goes_up() {
    let h = start().await;
    for stream in [false, true] {
        let r = h
            .responses(responses_body("codex/gpt-5-codex", stream))
            .await;
        assert_eq!(r.status(), 200);
        let got = r.text().await.unwrap();
        let want = direct(&h, &responses_body("gpt-5-codex", stream)).await;
        assert_eq!(got, want, "stream {stream}");
    }
    let seen = &h.mock_stats().await["recent"][0]["headers"];
    let names: Vec<&str> = seen
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        names,
        [
            "accept",
            "authorization",
            "content-length",
            "content-type",
            "host",
            "user-agent"
        ]
    );
    let sent = &h.mock_requests().await[0];
    assert_eq!(sent["path"], "/v1/responses");
    assert_eq!(sent["body"], responses_body("gpt-5-codex", false));
}

#[tokio::test]
async fn previous_response_id_is_refused_naming_the_member() {
    let h = start().await;
    let mut body = responses_body("codex/gpt-5-codex", false);
    body["previous_response_id"] = json!("resp_123");
    body["store"] = json!(true);
    let (status, body) = status_and_json(h.responses(body).await).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "previous_response_id");
    assert_eq!(
        body["error"]["message"],
        "`previous_response_id` is not supported: Switchyard does not store responses; send the whole conversation in `input` (as Codex does)"
    );
    assert!(h.mock_requests().await.is_empty());
}

#[tokio::test]
async fn a_responses_client_reaches_chat_and_anthropic_upstreams_translated() {
    let h = start().await;
    for model in ["alpha/mock-small", "claude/claude-opus"] {
        let r = h.responses(responses_body(model, false)).await;
        assert_eq!(r.status(), 200, "{model}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["object"], "response", "{model}");
        assert_eq!(body["status"], "completed", "{model}");
        assert_eq!(body["output"][0]["type"], "message", "{model}");
        assert_eq!(
            body["output"][0]["content"][0]["text"], "Hello from the Switchyard mock",
            "{model}"
        );
        assert_eq!(body["usage"]["input_tokens"], 5, "{model}");
        assert_eq!(body["usage"]["output_tokens"], 5, "{model}");
        let text = h
            .responses(responses_body(model, true))
            .await
            .text()
            .await
            .unwrap();
        let types = event_types(&text);
        assert_eq!(
            types.first().map(String::as_str),
            Some("response.created"),
            "{model}"
        );
        assert_eq!(
            types.last().map(String::as_str),
            Some("response.completed"),
            "{model}"
        );
        assert_eq!(
            types
                .iter()
                .filter(|t| *t == "response.output_text.delta")
                .count(),
            5,
            "{model}"
        );
        let done = last_data(&text);
        assert_eq!(done["response"]["usage"]["output_tokens"], 5, "{model}");
        assert_eq!(
            done["response"]["output"][0]["content"][0]["text"], "Hello from the Switchyard mock",
            "{model}"
        );
    }
}

#[tokio::test]
async fn chat_and_anthropic_clients_reach_a_responses_upstream_translated() {
    let h = start().await;
    let r = h.chat(chat_body("codex/gpt-5-codex", false)).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Hello from the Switchyard mock"
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["usage"]["prompt_tokens"], 5);
    let text = h
        .chat(chat_body("codex/gpt-5-codex", true))
        .await
        .text()
        .await
        .unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let r = h.messages(messages_body("codex/gpt-5-codex", false)).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["type"], "message");
    assert_eq!(body["content"][0]["text"], "Hello from the Switchyard mock");
    assert_eq!(body["stop_reason"], "end_turn");
    let text = h
        .messages(messages_body("codex/gpt-5-codex", true))
        .await
        .text()
        .await
        .unwrap();
    assert!(
        text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
        "{text}"
    );
    let paths: Vec<Value> = h
        .mock_requests()
        .await
        .iter()
        .map(|r| r["path"].clone())
        .collect();
    assert_eq!(paths, vec![json!("/v1/responses"); 4]);
}

#[tokio::test]
async fn errors_on_the_responses_route_are_openai_shaped_and_a_cut_stream_fails_the_response() {
    let h = start().await;
    let r = h
        .http
        .post(h.url("/v1/responses"))
        .json(&responses_body("codex/gpt-5-codex", false))
        .send()
        .await
        .unwrap();
    let (status, body) = status_and_json(r).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "invalid_api_key");
    h.rule(
        json!({"match": {"model": "gpt-5-codex"}, "reset_after_chunks": 2, "chunk_interval_ms": 5}),
    )
    .await;
    let text = h
        .responses(responses_body("codex/gpt-5-codex", true))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(
        event_types(&text).last().map(String::as_str),
        Some("response.failed")
    );
    let failed = last_data(&text);
    assert_eq!(failed["response"]["status"], "failed");
    assert_eq!(
        failed["response"]["error"]["code"],
        "upstream_connection_reset"
    );
}
