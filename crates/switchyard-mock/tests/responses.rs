//! The OpenAI Responses side (`/v1/responses` and Codex's `/responses`): text, function
//! calls, tool outputs, reasoning, `max_output_tokens`, scripted errors and stream
//! knobs, over real sockets.

#![expect(clippy::unwrap_used, reason = "test code")]

use serde_json::{json, Map, Value};
use switchyard_mock::{MockServer, Rule};

async fn post(mock: &MockServer, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{path}", mock.base_url()))
        .bearer_auth("k")
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn json_of(mock: &MockServer, body: &Value) -> Value {
    let r = post(mock, "/v1/responses", body).await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

async fn text_of(mock: &MockServer, body: &Value) -> String {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let r = post(mock, "/v1/responses", &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    r.text().await.unwrap()
}

/// Server-sent events as the mock writes them: each event's `type`, then its
/// `sequence_number` (its position), then its other members.
fn sse(events: &[Value]) -> String {
    events
        .iter()
        .zip(0u64..)
        .map(|(e, n)| {
            let kind = e["type"].as_str().unwrap();
            let mut data = Map::new();
            data.insert("type".into(), json!(kind));
            data.insert("sequence_number".into(), json!(n));
            data.extend(
                e.as_object()
                    .unwrap()
                    .iter()
                    .filter(|(k, _)| *k != "type")
                    .map(|(k, v)| (k.clone(), v.clone())),
            );
            format!("event: {kind}\ndata: {}\n\n", Value::Object(data))
        })
        .collect()
}

fn usage(input: u64, output: u64, reasoning: u64) -> Value {
    json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output, "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input + output})
}

fn response(status: &str, output: Value, usage: Value, incomplete: Value) -> Value {
    json!({"id": "resp_mock", "object": "response", "created_at": 1_700_000_000, "status": status,
        "model": "gpt-5-codex", "output": output, "usage": usage, "incomplete_details": incomplete,
        "error": null, "parallel_tool_calls": true, "tool_choice": "auto", "tools": []})
}

fn completed(output: Value, usage: Value) -> Value {
    response("completed", output, usage, Value::Null)
}

fn message(status: &str, text: &str) -> Value {
    json!({"id": "msg_mock", "type": "message", "status": status, "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn reasoning() -> Value {
    json!({"id": "rs_mock", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Let me think."}]})
}

fn call(status: &str, arguments: &str) -> Value {
    json!({"id": "fc_mock_1", "type": "function_call", "status": status, "call_id": "call_mock_1",
        "name": "get_weather", "arguments": arguments})
}

/// `response.created` and `response.in_progress`.
fn start() -> [Value; 2] {
    let r = response("in_progress", json!([]), Value::Null, Value::Null);
    [
        json!({"type": "response.created", "response": r}),
        json!({"type": "response.in_progress", "response": r}),
    ]
}

fn item(kind: &str, index: u32, item: Value) -> Value {
    json!({"type": format!("response.output_item.{kind}"), "output_index": index, "item": item})
}

/// The message item at `index`, one `output_text.delta` per piece.
fn message_events(index: u32, pieces: &[&str], status: &str) -> Vec<Value> {
    let text = pieces.concat();
    let at = |kind: &str, more: Value| {
        let mut e =
            json!({"type": kind, "item_id": "msg_mock", "output_index": index, "content_index": 0});
        e.as_object_mut()
            .unwrap()
            .extend(more.as_object().unwrap().clone());
        e
    };
    let part = |t: &str| json!({"type": "output_text", "text": t, "annotations": []});
    let mut events = vec![
        item(
            "added",
            index,
            json!({"id": "msg_mock", "type": "message", "status": "in_progress", "role": "assistant", "content": []}),
        ),
        at("response.content_part.added", json!({"part": part("")})),
    ];
    events.extend(pieces.iter().map(|p| {
        at(
            "response.output_text.delta",
            json!({"delta": p, "logprobs": []}),
        )
    }));
    events.extend([
        at(
            "response.output_text.done",
            json!({"text": text, "logprobs": []}),
        ),
        at("response.content_part.done", json!({"part": part(&text)})),
        item("done", index, message(status, &text)),
    ]);
    events
}

/// 37 characters of instructions and input: 10 input tokens.
fn hello() -> Value {
    json!({"model": "gpt-5-codex", "instructions": "You are a mock.", "store": false,
    "input": [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Say hello"}, {"type": "input_text", "text": " to the world"}
    ]}]})
}

#[tokio::test]
async fn a_text_answer_is_a_completed_response_on_both_paths() {
    let mock = MockServer::start_local().await.unwrap();
    let expected = completed(
        json!([message("completed", "Hello from the Switchyard mock")]),
        usage(10, 5, 0),
    );
    assert_eq!(json_of(&mock, &hello()).await, expected);
    let body = json!({"model": "gpt-5-codex", "input": "hi"});
    let r = post(&mock, "/responses", &body).await;
    assert_eq!(r.status(), 200);
    let mut short = expected;
    short["usage"] = usage(1, 5, 0);
    assert_eq!(r.json::<Value>().await.unwrap(), short);
    let journal: Value = reqwest::get(format!("{}/_mock/requests", mock.base_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let paths: Vec<&str> = journal["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/v1/responses", "/responses"]);
    assert_eq!(journal["requests"][1]["body"], body);
    let r = reqwest::Client::new()
        .post(format!("{}/v1/responses", mock.base_url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"error": {"message": "missing API key", "type": "invalid_request_error", "code": "invalid_api_key"}})
    );
}

#[tokio::test]
async fn a_streamed_text_answer_is_the_whole_event_sequence() {
    let mock = MockServer::start_local().await.unwrap();
    mock.state.add_rule(Rule {
        chunks: Some(2),
        ..Default::default()
    });
    let text = text_of(&mock, &hello()).await;
    let in_progress = r#"{"id":"resp_mock","object":"response","created_at":1700000000,"status":"in_progress","model":"gpt-5-codex","output":[],"usage":null,"incomplete_details":null,"error":null,"parallel_tool_calls":true,"tool_choice":"auto","tools":[]}"#;
    let first_delta = r#"event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_mock","output_index":0,"content_index":0,"delta":"Hello","logprobs":[]}

"#;
    assert!(
        text.starts_with(&format!(
            "event: response.created\ndata: {{\"type\":\"response.created\",\"sequence_number\":0,\"response\":{in_progress}}}\n\n\
             event: response.in_progress\ndata: {{\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{in_progress}}}\n\n"
        )),
        "{text}"
    );
    assert!(text.contains(first_delta), "{text}");
    let body = completed(json!([message("completed", "Hello from")]), usage(10, 2, 0));
    let mut expected = start().to_vec();
    expected.extend(message_events(0, &["Hello", " from"], "completed"));
    expected.push(json!({"type": "response.completed", "response": body}));
    assert_eq!(text, sse(&expected));
    assert_eq!(json_of(&mock, &hello()).await, body);
}

/// 47 characters of input: 12 input tokens.
fn weather(tools: Value) -> Value {
    json!({"model": "gpt-5-codex", "tools": tools, "tool_choice": "auto", "parallel_tool_calls": false,
        "input": [{"role": "user", "content": "Weather? [[tool:get_weather {\"city\": \"Paris\"}]]"}]})
}

fn get_weather() -> Value {
    json!({"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": false})
}

#[tokio::test]
async fn a_tool_marker_answers_a_function_call() {
    let mock = MockServer::start_local().await.unwrap();
    let body = weather(json!([{"type": "web_search"}, get_weather()]));
    let arguments = "{\"city\":\"Paris\"}";
    let answer = completed(
        json!([
            message("completed", "Calling get_weather."),
            call("completed", arguments)
        ]),
        usage(12, 6, 0),
    );
    assert_eq!(json_of(&mock, &body).await, answer);
    let at = |kind: &str, more: Value| {
        let mut e = json!({"type": kind, "item_id": "fc_mock_1", "output_index": 1});
        e.as_object_mut()
            .unwrap()
            .extend(more.as_object().unwrap().clone());
        e
    };
    let mut expected = start().to_vec();
    expected.extend(message_events(
        0,
        &["Calling", " get_weather."],
        "completed",
    ));
    expected.push(item("added", 1, call("in_progress", "")));
    for fragment in ["{\"cit", "y\":\"P", "aris\"}"] {
        expected.push(at(
            "response.function_call_arguments.delta",
            json!({"delta": fragment}),
        ));
    }
    expected.extend([
        at(
            "response.function_call_arguments.done",
            json!({"arguments": arguments}),
        ),
        item("done", 1, call("completed", arguments)),
        json!({"type": "response.completed", "response": answer}),
    ]);
    assert_eq!(text_of(&mock, &body).await, sse(&expected));
}

#[tokio::test]
async fn namespaced_functions_count_as_tools_and_built_in_tools_do_not() {
    let mock = MockServer::start_local().await.unwrap();
    let namespace = json!([{"type": "namespace", "name": "mcp__weather", "description": "Weather.",
        "tools": [get_weather()]}]);
    let answer = json_of(&mock, &weather(namespace)).await;
    assert_eq!(
        answer["output"][1],
        call("completed", "{\"city\":\"Paris\"}")
    );
    let canned = completed(
        json!([message("completed", "Hello from the Switchyard mock")]),
        usage(12, 5, 0),
    );
    let built_in =
        json!([{"type": "web_search"}, {"type": "namespace", "name": "empty", "tools": []}]);
    assert_eq!(json_of(&mock, &weather(built_in)).await, canned);
    let mut earlier = weather(json!([get_weather()]));
    earlier["input"].as_array_mut().unwrap().push(
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": ""}]}),
    );
    assert_eq!(json_of(&mock, &earlier).await, canned);
}

#[tokio::test]
async fn a_last_function_call_output_is_echoed() {
    let mock = MockServer::start_local().await.unwrap();
    let mut body = weather(json!([get_weather()]));
    body["input"] = json!([
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather? [[tool:get_weather {}]]"}]},
        {"type": "function_call", "call_id": "call_mock_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_mock_1", "output": "sunny, 21C"}
    ]);
    assert_eq!(
        json_of(&mock, &body).await,
        completed(
            json!([message("completed", "tool said: sunny, 21C")]),
            usage(11, 4, 0)
        )
    );
    body["input"][2]["output"] = json!([{"type": "input_text", "text": "rain"}]);
    assert_eq!(
        json_of(&mock, &body).await["output"],
        json!([message("completed", "tool said: rain")])
    );
}

#[tokio::test]
async fn a_reasoning_effort_adds_a_reasoning_item_first() {
    let mock = MockServer::start_local().await.unwrap();
    mock.state.add_rule(Rule {
        chunks: Some(2),
        ..Default::default()
    });
    let mut body = hello();
    body["reasoning"] = json!({"effort": "medium", "summary": "auto"});
    let answer = completed(
        json!([reasoning(), message("completed", "Hello from")]),
        usage(10, 5, 3),
    );
    assert_eq!(json_of(&mock, &body).await, answer);
    let at = |kind: &str, more: Value| {
        let mut e =
            json!({"type": kind, "item_id": "rs_mock", "output_index": 0, "summary_index": 0});
        e.as_object_mut()
            .unwrap()
            .extend(more.as_object().unwrap().clone());
        e
    };
    let summary = |t: &str| json!({"type": "summary_text", "text": t});
    let mut expected = start().to_vec();
    expected.extend([
        item(
            "added",
            0,
            json!({"id": "rs_mock", "type": "reasoning", "summary": []}),
        ),
        at(
            "response.reasoning_summary_part.added",
            json!({"part": summary("")}),
        ),
        at(
            "response.reasoning_summary_text.delta",
            json!({"delta": "Let"}),
        ),
        at(
            "response.reasoning_summary_text.delta",
            json!({"delta": " me"}),
        ),
        at(
            "response.reasoning_summary_text.delta",
            json!({"delta": " think."}),
        ),
        at(
            "response.reasoning_summary_text.done",
            json!({"text": "Let me think."}),
        ),
        at(
            "response.reasoning_summary_part.done",
            json!({"part": summary("Let me think.")}),
        ),
        item("done", 0, reasoning()),
    ]);
    expected.extend(message_events(1, &["Hello", " from"], "completed"));
    expected.push(json!({"type": "response.completed", "response": answer}));
    assert_eq!(text_of(&mock, &body).await, sse(&expected));
    let plain = completed(json!([message("completed", "Hello from")]), usage(10, 2, 0));
    body["reasoning"] = json!({"effort": "none"});
    assert_eq!(json_of(&mock, &body).await, plain);
    body["reasoning"] = json!({"summary": "auto"});
    assert_eq!(json_of(&mock, &body).await, plain);
}

#[tokio::test]
async fn max_output_tokens_cuts_the_answer_into_an_incomplete_response() {
    let mock = MockServer::start_local().await.unwrap();
    let mut body = hello();
    body["max_output_tokens"] = json!(3);
    let answer = response(
        "incomplete",
        json!([message("incomplete", "Hello from the")]),
        usage(10, 3, 0),
        json!({"reason": "max_output_tokens"}),
    );
    assert_eq!(json_of(&mock, &body).await, answer);
    let mut expected = start().to_vec();
    expected.extend(message_events(0, &["Hello", " from", " the"], "incomplete"));
    expected.push(json!({"type": "response.incomplete", "response": answer}));
    assert_eq!(text_of(&mock, &body).await, sse(&expected));
    mock.state.add_rule(Rule {
        chunks: Some(4),
        ..Default::default()
    });
    assert_eq!(
        json_of(&mock, &body).await,
        completed(
            json!([message("completed", "Hello from the Switchyard")]),
            usage(10, 4, 0)
        )
    );
}

#[tokio::test]
async fn a_scripted_429_carries_codex_rate_limit_headers() {
    let mock = MockServer::start_local().await.unwrap();
    let codex = json!({
        "x-codex-primary-used-percent": "100", "x-codex-primary-window-minutes": "300",
        "x-codex-primary-reset-after-seconds": "1200",
        "x-codex-secondary-used-percent": "42", "x-codex-secondary-window-minutes": "10080",
        "x-codex-secondary-reset-after-seconds": "86400"
    });
    mock.state.add_rule(
        serde_json::from_value(
            json!({"match": {"path": "/responses"}, "status": 429, "headers": codex}),
        )
        .unwrap(),
    );
    mock.state.add_rule(
        serde_json::from_value(json!({"match": {"path": "/v1/responses"}, "headers": {
            "x-codex-primary-used-percent": "12"
        }}))
        .unwrap(),
    );
    let codex_headers = |r: &reqwest::Response| -> Value {
        r.headers()
            .iter()
            .filter(|(k, _)| k.as_str().starts_with("x-codex-"))
            .map(|(k, v)| (k.to_string(), json!(v.to_str().unwrap())))
            .collect::<Map<_, _>>()
            .into()
    };
    let r = post(&mock, "/responses", &hello()).await;
    assert_eq!(r.status(), 429);
    assert_eq!(codex_headers(&r), codex);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"error": {"message": "mock injected status 429", "type": "rate_limit_error", "code": "rate_limit_exceeded"}})
    );
    let r = post(&mock, "/v1/responses", &hello()).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        codex_headers(&r),
        json!({"x-codex-primary-used-percent": "12"})
    );
}

#[tokio::test]
async fn chunk_knobs_apply_to_the_output_text_deltas() {
    let mock = MockServer::start_local().await.unwrap();
    mock.state.add_rule(Rule {
        times: Some(1),
        chunks: Some(3),
        end_after_chunks: Some(2),
        ..Default::default()
    });
    let text = text_of(&mock, &hello()).await;
    let mut expected = start().to_vec();
    expected.extend(
        message_events(0, &["Hello", " from", " the"], "completed")
            .into_iter()
            .take(4),
    );
    assert_eq!(text, sse(&expected));
    assert!(!text.contains("response.completed"));
    mock.state.add_rule(Rule {
        chunks: Some(3),
        chunk_interval_ms: Some(5),
        reset_after_chunks: Some(1),
        ..Default::default()
    });
    let mut body = hello();
    body["stream"] = json!(true);
    let r = post(&mock, "/v1/responses", &body).await;
    assert_eq!(r.status(), 200);
    let mut r = r;
    let mut got = Vec::new();
    let failed = loop {
        match r.chunk().await {
            Ok(Some(bytes)) => got.extend_from_slice(&bytes),
            Ok(None) => break false,
            Err(_) => break true,
        }
    };
    assert!(failed);
    assert_eq!(String::from_utf8(got).unwrap(), sse(&expected[..5]));
}
