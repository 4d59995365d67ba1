//! The chat-completions side: tool calls, tool results, reasoning, stops, over real
//! sockets.

#![expect(clippy::unwrap_used, reason = "test code")]

use serde_json::{json, Value};
use switchyard_mock::MockServer;

async fn chat(mock: &MockServer, body: &Value) -> reqwest::Response {
    let r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", mock.base_url()))
        .bearer_auth("k")
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r
}

/// The data lines of a chat stream.
fn sse(frames: &[Value]) -> String {
    let mut s: String = frames.iter().map(|f| format!("data: {f}\n\n")).collect();
    s.push_str("data: [DONE]\n\n");
    s
}

fn chunk(delta: Value, finish: Value) -> Value {
    json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1_700_000_000,
        "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

fn usage_chunk(usage: Value) -> Value {
    json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1_700_000_000,
        "model": "m", "choices": [], "usage": usage})
}

fn completion(message: Value, finish: &str, usage: Value) -> Value {
    json!({"id": "chatcmpl-mock", "object": "chat.completion", "created": 1_700_000_000, "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage})
}

/// 37 characters of prompt: 10 prompt tokens.
fn weather(stream: bool) -> Value {
    json!({
        "model": "m", "stream": stream, "stream_options": {"include_usage": true},
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
        "messages": [{"role": "user", "content": "[[tool:get_weather {\"city\":\"Paris\"}]]"}]
    })
}

#[tokio::test]
async fn a_tool_marker_answers_tool_calls() {
    let mock = MockServer::start_local().await.unwrap();
    let body: Value = chat(&mock, &weather(false)).await.json().await.unwrap();
    assert_eq!(
        body,
        completion(
            json!({"role": "assistant", "content": "Calling get_weather.", "tool_calls": [
                {"id": "call_mock_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
            ]}),
            "tool_calls",
            json!({"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16})
        )
    );
}

#[tokio::test]
async fn streamed_tool_calls_send_the_arguments_in_three_fragments() {
    let mock = MockServer::start_local().await.unwrap();
    let text = chat(&mock, &weather(true)).await.text().await.unwrap();
    let arguments = |a: &str| json!({"tool_calls": [{"index": 0, "function": {"arguments": a}}]});
    assert_eq!(
        text,
        sse(&[
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(json!({"content": "Calling"}), Value::Null),
            chunk(json!({"content": " get_weather."}), Value::Null),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_mock_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": ""}}]}),
                Value::Null
            ),
            chunk(arguments("{\"cit"), Value::Null),
            chunk(arguments("y\":\"P"), Value::Null),
            chunk(arguments("aris\"}"), Value::Null),
            chunk(json!({}), json!("tool_calls")),
            usage_chunk(json!({"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16})),
        ])
    );
}

#[tokio::test]
async fn a_last_tool_message_is_echoed() {
    let mock = MockServer::start_local().await.unwrap();
    let mut body = weather(false);
    body["messages"] = json!([
        {"role": "user", "content": "[[tool:get_weather {}]]"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_mock_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_mock_1", "content": [{"type": "text", "text": "sunny"}]}
    ]);
    let body: Value = chat(&mock, &body).await.json().await.unwrap();
    assert_eq!(
        body,
        completion(
            json!({"role": "assistant", "content": "tool said: sunny"}),
            "stop",
            json!({"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10})
        )
    );
}

#[tokio::test]
async fn reasoning_effort_adds_reasoning_content_before_the_content() {
    let mock = MockServer::start_local().await.unwrap();
    let mut body = json!({"model": "m", "reasoning_effort": "low", "messages": [{"role": "user", "content": "abcd"}]});
    let usage = json!({"prompt_tokens": 1, "completion_tokens": 5, "total_tokens": 6,
        "completion_tokens_details": {"reasoning_tokens": 3}});
    mock.state.add_rule(switchyard_mock::Rule {
        chunks: Some(2),
        ..Default::default()
    });
    let answer: Value = chat(&mock, &body).await.json().await.unwrap();
    assert_eq!(
        answer,
        completion(
            json!({"role": "assistant", "reasoning_content": "Let me think.", "content": "Hello from"}),
            "stop",
            usage.clone()
        )
    );
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let text = chat(&mock, &body).await.text().await.unwrap();
    let reasoning = |r: &str| chunk(json!({"reasoning_content": r}), Value::Null);
    assert_eq!(
        text,
        sse(&[
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            reasoning("Let"),
            reasoning(" me"),
            reasoning(" think."),
            chunk(json!({"content": "Hello"}), Value::Null),
            chunk(json!({"content": " from"}), Value::Null),
            chunk(json!({}), json!("stop")),
            usage_chunk(usage),
        ])
    );
    body["reasoning_effort"] = json!("none");
    body["stream"] = json!(false);
    let answer: Value = chat(&mock, &body).await.json().await.unwrap();
    assert_eq!(
        answer["choices"][0]["message"],
        json!({"role": "assistant", "content": "Hello from"})
    );
}

#[tokio::test]
async fn stop_and_max_tokens_cut_the_answer_unless_a_rule_fixes_its_length() {
    let mock = MockServer::start_local().await.unwrap();
    let mut body =
        json!({"model": "m", "stop": "the", "messages": [{"role": "user", "content": "abcd"}]});
    let answer: Value = chat(&mock, &body).await.json().await.unwrap();
    assert_eq!(
        answer,
        completion(
            json!({"role": "assistant", "content": "Hello from "}),
            "stop",
            json!({"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4})
        )
    );
    body.as_object_mut().unwrap().remove("stop");
    body["max_completion_tokens"] = json!(2);
    let answer: Value = chat(&mock, &body).await.json().await.unwrap();
    assert_eq!(
        answer,
        completion(
            json!({"role": "assistant", "content": "Hello from"}),
            "length",
            json!({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})
        )
    );
    mock.state.add_rule(switchyard_mock::Rule {
        chunks: Some(7),
        ..Default::default()
    });
    let answer: Value = chat(&mock, &body).await.json().await.unwrap();
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "Hello from the Switchyard mock provider."
    );
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
}
