//! The Anthropic Messages side: tools, thinking, stops, usage, `count_tokens`, the
//! unified rate-limit headers and the request journal, over real sockets.

#![expect(clippy::unwrap_used, reason = "test code")]

use serde_json::{json, Value};
use switchyard_mock::MockServer;

/// 2027-01-15T08:00:00Z, a multiple of five hours.
const NOW: u64 = 1_800_000_000;

async fn mock() -> MockServer {
    let mock = MockServer::start_local().await.unwrap();
    mock.state.set_now(Some(NOW));
    mock
}

async fn messages(mock: &MockServer, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/v1/messages", mock.base_url()))
        .header("x-api-key", "k")
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn json_of(mock: &MockServer, body: &Value) -> Value {
    let r = messages(mock, body).await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

async fn text_of(mock: &MockServer, body: &Value) -> String {
    let r = messages(mock, body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    r.text().await.unwrap()
}

/// Server-sent events as the mock writes them.
fn sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

fn usage(input: u64, output: u64) -> Value {
    json!({"input_tokens": input, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": output})
}

fn message_start(usage: Value) -> Value {
    json!({"type": "message_start", "message": {"id": "msg_mock", "type": "message", "role": "assistant",
        "model": "claude-x", "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage}})
}

fn block_start(index: u32, block: Value) -> Value {
    json!({"type": "content_block_start", "index": index, "content_block": block})
}

fn delta(index: u32, delta: Value) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": delta})
}

fn text(index: u32, text: &str) -> Value {
    delta(index, json!({"type": "text_delta", "text": text}))
}

fn block_stop(index: u32) -> Value {
    json!({"type": "content_block_stop", "index": index})
}

fn message_end(reason: &str, output: u64) -> [Value; 2] {
    [
        json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null}, "usage": {"output_tokens": output}}),
        json!({"type": "message_stop"}),
    ]
}

/// 47 characters of prompt: 12 input tokens.
fn weather(stream: bool) -> Value {
    json!({
        "model": "claude-x", "max_tokens": 1024, "stream": stream,
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Weather? [[tool:get_weather {\"city\": \"Paris\"}]]"}
        ]}]
    })
}

#[tokio::test]
async fn a_tool_marker_answers_a_text_block_then_tool_use() {
    let mock = mock().await;
    assert_eq!(
        json_of(&mock, &weather(false)).await,
        json!({
            "id": "msg_mock", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [
                {"type": "text", "text": "Calling get_weather."},
                {"type": "tool_use", "id": "toolu_mock_1", "name": "get_weather", "input": {"city": "Paris"}}
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": usage(12, 6)
        })
    );
}

#[tokio::test]
async fn a_streamed_tool_use_sends_its_input_in_three_json_fragments() {
    let mock = mock().await;
    let mut expected = vec![
        message_start(usage(12, 1)),
        json!({"type": "ping"}),
        block_start(0, json!({"type": "text", "text": ""})),
        text(0, "Calling"),
        text(0, " get_weather."),
        block_stop(0),
        block_start(
            1,
            json!({"type": "tool_use", "id": "toolu_mock_1", "name": "get_weather", "input": {}}),
        ),
        delta(
            1,
            json!({"type": "input_json_delta", "partial_json": "{\"cit"}),
        ),
        delta(
            1,
            json!({"type": "input_json_delta", "partial_json": "y\":\"P"}),
        ),
        delta(
            1,
            json!({"type": "input_json_delta", "partial_json": "aris\"}"}),
        ),
        block_stop(1),
    ];
    expected.extend(message_end("tool_use", 6));
    assert_eq!(text_of(&mock, &weather(true)).await, sse(&expected));
}

#[tokio::test]
async fn a_tool_result_is_echoed_and_without_tools_the_marker_is_text() {
    let mock = mock().await;
    let mut body = weather(false);
    body["messages"] = json!([
        {"role": "user", "content": "Weather? [[tool:get_weather {}]]"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_mock_1", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_mock_1", "content": "sunny, 21C"}]}
    ]);
    let answer = json_of(&mock, &body).await;
    assert_eq!(
        answer["content"],
        json!([{"type": "text", "text": "tool said: sunny, 21C"}])
    );
    assert_eq!(answer["stop_reason"], "end_turn");
    assert_eq!(answer["usage"]["output_tokens"], 4);
    let mut body = weather(false);
    body.as_object_mut().unwrap().remove("tools");
    assert_eq!(
        json_of(&mock, &body).await,
        switchyard_mock::anthropic::message("claude-x", 5, 12)
    );
}

#[tokio::test]
async fn thinking_comes_first_and_a_rule_sets_the_cache_tokens() {
    let mock = mock().await;
    mock.state.add_rule(switchyard_mock::Rule {
        cache_read_input_tokens: Some(7),
        cache_creation_input_tokens: Some(3),
        ..Default::default()
    });
    let mut body = json!({"model": "claude-x", "max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": "abcdefgh"}]});
    let cached = json!({"input_tokens": 2, "cache_creation_input_tokens": 3, "cache_read_input_tokens": 7, "output_tokens": 8});
    assert_eq!(
        json_of(&mock, &body).await,
        json!({
            "id": "msg_mock", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [
                {"type": "thinking", "thinking": "Let me think.", "signature": "sig_mock"},
                {"type": "text", "text": "Hello from the Switchyard mock"}
            ],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": cached
        })
    );
    body["stream"] = json!(true);
    body["thinking"] = json!({"type": "adaptive"});
    let mut start_usage = cached;
    start_usage["output_tokens"] = json!(1);
    let thinking = |t: &str| delta(0, json!({"type": "thinking_delta", "thinking": t}));
    let mut expected = vec![
        message_start(start_usage),
        json!({"type": "ping"}),
        block_start(
            0,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        thinking("Let"),
        thinking(" me"),
        thinking(" think."),
        delta(
            0,
            json!({"type": "signature_delta", "signature": "sig_mock"}),
        ),
        block_stop(0),
        block_start(1, json!({"type": "text", "text": ""})),
    ];
    expected.extend(
        ["Hello", " from", " the", " Switchyard", " mock"]
            .iter()
            .map(|w| text(1, w)),
    );
    expected.push(block_stop(1));
    expected.extend(message_end("end_turn", 8));
    assert_eq!(text_of(&mock, &body).await, sse(&expected));
}

#[tokio::test]
async fn stop_sequences_and_max_tokens_cut_the_answer() {
    let mock = mock().await;
    let body = json!({"model": "claude-x", "max_tokens": 100, "stop_sequences": ["provider", "mock"],
        "messages": [{"role": "user", "content": "abcdefgh"}]});
    let answer = json_of(&mock, &body).await;
    assert_eq!(
        answer["content"],
        json!([{"type": "text", "text": "Hello from the Switchyard "}])
    );
    assert_eq!(answer["stop_reason"], "stop_sequence");
    assert_eq!(answer["stop_sequence"], "mock");
    assert_eq!(answer["usage"], usage(2, 5));
    let mut body = body;
    body["stop_sequences"] = json!([]);
    body["max_tokens"] = json!(3);
    body["stream"] = json!(true);
    let mut expected = vec![
        message_start(usage(2, 1)),
        json!({"type": "ping"}),
        block_start(0, json!({"type": "text", "text": ""})),
        text(0, "Hello"),
        text(0, " from"),
        text(0, " the"),
        block_stop(0),
    ];
    expected.extend(message_end("max_tokens", 3));
    assert_eq!(text_of(&mock, &body).await, sse(&expected));
}

#[tokio::test]
async fn count_tokens_counts_like_the_prompt() {
    let mock = mock().await;
    let c = reqwest::Client::new();
    let body = json!({"model": "claude-x", "system": [{"type": "text", "text": "abcd"}],
        "messages": [{"role": "user", "content": "abcdefgh"}, {"role": "user", "content": [{"type": "text", "text": "ijklm"}]}]});
    let url = format!("{}/v1/messages/count_tokens", mock.base_url());
    let r = c
        .post(&url)
        .header("x-api-key", "k")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"input_tokens": 5}));
    assert_eq!(json_of(&mock, &body).await["usage"]["input_tokens"], 5);
    let r = c.post(&url).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"type": "error", "error": {"type": "authentication_error", "message": "missing API key"}})
    );
}

#[tokio::test]
async fn answers_carry_unified_rate_limit_headers_that_rules_override() {
    let mock = mock().await;
    let body = json!({"model": "claude-x", "messages": [{"role": "user", "content": "hi"}]});
    let r = messages(&mock, &body).await;
    let unified = |r: &reqwest::Response| -> Vec<(String, String)> {
        r.headers()
            .iter()
            .filter(|(k, _)| k.as_str().starts_with("anthropic-ratelimit-unified-"))
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect()
    };
    let expected = |five_hour: &str, reset: &str| {
        [
            ("anthropic-ratelimit-unified-status", "allowed"),
            ("anthropic-ratelimit-unified-5h-utilization", five_hour),
            ("anthropic-ratelimit-unified-5h-reset", "1800018000"),
            ("anthropic-ratelimit-unified-7d-utilization", "0.0"),
            ("anthropic-ratelimit-unified-7d-reset", "1800489600"),
            ("anthropic-ratelimit-unified-reset", reset),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .to_vec()
    };
    assert_eq!(unified(&r), expected("0.0", "1800018000"));
    mock.state.add_rule(
        serde_json::from_value(json!({"match": {"path": "/v1/messages"}, "headers": {
            "anthropic-ratelimit-unified-5h-utilization": "0.42",
            "anthropic-ratelimit-unified-reset": "1800000300"
        }}))
        .unwrap(),
    );
    let r = messages(&mock, &body).await;
    assert_eq!(unified(&r), expected("0.42", "1800000300"));
    let r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", mock.base_url()))
        .bearer_auth("k")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(unified(&r), vec![]);
}

#[tokio::test]
async fn the_journal_keeps_the_last_hundred_requests_with_what_was_forwarded() {
    let mock = mock().await;
    let c = reqwest::Client::new();
    let body = json!({"model": "claude-x", "messages": [{"role": "user", "content": "hi"}]});
    let r = c
        .post(format!("{}/v1/messages?beta=true", mock.base_url()))
        .bearer_auth("tok")
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "b1,b2")
        .header("anthropic-usage-limit", "slow")
        .header("x-app", "cli")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .post(format!("{}/v1/chat/completions", mock.base_url()))
        .header("x-api-key", "k2")
        .header("authorization", "sk-raw")
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let journal = || async {
        c.get(format!("{}/_mock/requests", mock.base_url()))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    };
    assert_eq!(
        journal().await,
        json!({"requests": [
            {"method": "POST", "path": "/v1/messages", "query": "beta=true", "credential": "tok",
             "headers": {"anthropic-beta": "b1,b2", "anthropic-usage-limit": "slow", "anthropic-version": "2023-06-01"},
             "x_api_key": false, "authorization": "Bearer", "body": body},
            {"method": "POST", "path": "/v1/chat/completions", "query": null, "credential": "k2",
             "headers": {}, "x_api_key": true, "authorization": "", "body": null}
        ]})
    );
    for _ in 0..99 {
        c.post(format!("{}/v1/messages/count_tokens", mock.base_url()))
            .json(&body)
            .send()
            .await
            .unwrap();
    }
    let requests = journal().await["requests"].as_array().unwrap().clone();
    assert_eq!(requests.len(), 100);
    assert_eq!(requests[0]["path"], "/v1/chat/completions");
    assert_eq!(requests[99]["path"], "/v1/messages/count_tokens");
    assert_eq!(requests[99]["authorization"], Value::Null);
    c.post(format!("{}/_mock/reset", mock.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(journal().await, json!({"requests": []}));
}
