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

#[tokio::test]
async fn a_codex_subscription_gets_its_backend_path_and_account_headers() {
    let h = Harness::start_with(
        |mock| {
            Config::responses(mock)
                .provider(
                    Provider::responses("codexsub", &format!("{mock}/backend-api/codex"))
                        .models(["gpt-5-codex"]),
                )
                .connection(
                    Connection::oauth("codex-sub", "codexsub")
                        .credential("oauth-token-1")
                        .provider_specific_data(json!({"chatgptAccountId": "acct-42"})),
                )
        },
        &[],
    )
    .await;
    // An output bound (here from an Anthropic client's max_tokens, translated) is left
    // out: the backend refuses it. Its stream has no Content-Type, and is taken.
    let mut ask = messages_body("codexsub/gpt-5-codex", true);
    ask["max_tokens"] = json!(2048);
    let r = h.messages(ask).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(
        text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
        "{text}"
    );
    assert_eq!(
        h.mock_requests().await[0]["body"].get("max_output_tokens"),
        None
    );
    let r = h
        .responses(responses_body("codexsub/gpt-5-codex", true))
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        event_types(&r.text().await.unwrap())
            .last()
            .map(String::as_str),
        Some("response.completed")
    );
    let sent = &h.mock_requests().await[1];
    assert_eq!(sent["path"], "/backend-api/codex/responses");
    assert_eq!(sent["credential"], "oauth-token-1");
    let headers = &h.mock_stats().await["recent"][1]["headers"];
    assert_eq!(headers["chatgpt-account-id"], "acct-42");
    assert_eq!(headers["originator"], "codex_cli_rs");
    assert_eq!(headers["session-id"], Value::Null);
    assert_eq!(headers["x-codex-turn-metadata"], Value::Null);
    // The backend answers only streams: a client that asked for none gets the answer
    // read off the stream.
    let r = h.chat(chat_body("codexsub/gpt-5-codex", false)).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Hello from the Switchyard mock"
    );
    assert_eq!(body["usage"]["completion_tokens"], 5);
    assert_eq!(h.mock_requests().await[2]["body"]["stream"], true);
}

#[tokio::test]
async fn the_codex_rate_limit_headers_saturate_the_pool_of_the_account() {
    let h = Harness::start_with(
        |mock| {
            Config::responses(mock).quota_pool(
                QuotaPool::new("codex-team", "Codex team", ["codex-1"])
                    .dimension(Dimension::new("percent", "5h", 100))
                    .allocation(Allocation::new("k1").weight(100).policy("burst")),
            )
        },
        &[],
    )
    .await;
    h.rule(json!({"match": {"model": "gpt-5-codex"}, "headers": {
        "x-codex-primary-used-percent": "100",
        "x-codex-primary-window-minutes": "300",
        "x-codex-primary-reset-after-seconds": "90"
    }}))
    .await;
    assert_eq!(
        h.responses(responses_body("codex/gpt-5-codex", false))
            .await
            .status(),
        200
    );
    let r = h
        .responses(responses_body("codex/gpt-5-codex", false))
        .await;
    assert_eq!(r.status(), 429);
    let retry = retry_after(&r);
    assert!((89..=90).contains(&retry), "{retry}");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "quota_exceeded");
    assert_eq!(body["error"]["quota"]["pool"], "codex-team");
    let mut h = h;
    h.stop().await;
    let rows = h.with_store(|s| s.recent_logs(10, None).unwrap()).await;
    assert_eq!(
        rows.iter()
            .map(|r| (r.client_format.as_str(), r.status))
            .collect::<Vec<_>>(),
        [("responses", 429), ("responses", 200)]
    );
}

/// The function call of a streamed Responses answer: (name, call id, arguments as
/// assembled from the deltas, arguments of `output_item.done`).
fn streamed_call(text: &str) -> (String, String, String, String) {
    let mut assembled = String::new();
    let mut done = None;
    for frame in text.split("\n\n") {
        let Some(data) = frame.split('\n').find_map(|l| l.strip_prefix("data: ")) else {
            continue;
        };
        let v: Value = serde_json::from_str(data).unwrap();
        match v["type"].as_str().unwrap() {
            "response.function_call_arguments.delta" => {
                assembled.push_str(v["delta"].as_str().unwrap());
            }
            "response.output_item.done" if v["item"]["type"] == "function_call" => {
                done = Some(v["item"].clone());
            }
            _ => {}
        }
    }
    let item = done.unwrap();
    let s = |k: &str| item[k].as_str().unwrap().to_owned();
    (s("name"), s("call_id"), assembled, s("arguments"))
}

#[tokio::test]
async fn a_streamed_function_call_arrives_whole_through_every_route() {
    let h = start().await;
    let tools =
        json!([{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]);
    for model in [
        "codex/gpt-5-codex",
        "alpha/mock-small",
        "claude/claude-opus",
    ] {
        let body = json!({"model": model, "stream": true, "tools": tools,
            "input": "Weather? [[tool:get_weather {\"city\":\"Paris\"}]]"});
        let text = h.responses(body).await.text().await.unwrap();
        let (name, call_id, assembled, arguments) = streamed_call(&text);
        assert_eq!(name, "get_weather", "{model}");
        assert!(!call_id.is_empty(), "{model}");
        assert_eq!(assembled, r#"{"city":"Paris"}"#, "{model}");
        assert_eq!(arguments, r#"{"city":"Paris"}"#, "{model}");
        assert_eq!(last_data(&text)["type"], "response.completed", "{model}");
    }
    // And a chat client over the Responses upstream gets the call as tool_calls deltas.
    let chat = json!({"model": "codex/gpt-5-codex", "stream": true,
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
        "messages": [{"role": "user", "content": "Weather? [[tool:get_weather {\"city\":\"Paris\"}]]"}]});
    let text = h.chat(chat).await.text().await.unwrap();
    let mut arguments = String::new();
    let mut finish = None;
    for frame in text.split("\n\n").filter_map(|f| f.strip_prefix("data: ")) {
        if frame == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(frame).unwrap();
        let choice = &v["choices"][0];
        if let Some(a) = choice["delta"]["tool_calls"][0]["function"]["arguments"].as_str() {
            arguments.push_str(a);
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = Some(f.to_owned());
        }
    }
    assert_eq!(arguments, r#"{"city":"Paris"}"#);
    assert_eq!(finish.as_deref(), Some("tool_calls"));
}

#[tokio::test]
async fn reasoning_a_translated_route_made_is_not_sent_back_to_a_responses_upstream() {
    let h = start().await;
    let mut ask = responses_body("alpha/mock-small", false);
    ask["reasoning"] = json!({"effort": "low"});
    let answer: Value = h.responses(ask).await.json().await.unwrap();
    assert_eq!(
        answer["output"][0],
        json!({"type": "reasoning", "id": "rs_switchyard_0",
               "summary": [{"type": "summary_text", "text": "Let me think."}]})
    );
    // Codex sends the whole history, this reasoning item included, to the next turn,
    // which a Responses upstream serves: the item stays behind.
    let mut next = responses_body("codex/gpt-5-codex", false);
    let mut input = next["input"].as_array().unwrap().clone();
    input.push(answer["output"][0].clone());
    // As Codex sends it back: no item id, `encrypted_content` null.
    let mut as_codex = answer["output"][0].clone();
    as_codex.as_object_mut().unwrap().remove("id");
    as_codex["encrypted_content"] = Value::Null;
    input.push(as_codex);
    input.push(answer["output"][1].clone());
    input.push(json!({"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "And now?"}]}));
    next["input"] = Value::Array(input.clone());
    assert_eq!(h.responses(next).await.status(), 200);
    let sent = &h.mock_requests().await[1]["body"];
    input.remove(2);
    input.remove(1);
    assert_eq!(sent["input"], Value::Array(input));
}
