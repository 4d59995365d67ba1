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
    // Claude Code's ANTHROPIC_AUTH_TOKEN sends the key as a bearer token.
    let r = h
        .http
        .post(h.url("/v1/messages"))
        .bearer_auth(KEY)
        .json(&messages_body("claude/claude-opus", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
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
            "message": "model `claude/nope` does not exist; ask for one of: alpha/mock-small, alpha/mock-large, beta/mock-small, claude/claude-opus, claude/claude-haiku, fast, mixed (see GET /v1/models)",
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

/// The text of `lines`, each followed by a blank line (SSE frames).
fn frames(lines: &[&str]) -> String {
    lines.iter().map(|l| format!("{l}\n\n")).collect()
}

/// `text` with every `"created":N` replaced by `"created":0`, and the N seen, which must
/// all be the same and be the time of the request (unix seconds, within `window`).
fn undated(text: &str, window: std::ops::RangeInclusive<u64>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("\"created\":") {
        let (head, tail) = rest.split_at(at + "\"created\":".len());
        out.push_str(head);
        let digits = tail.len() - tail.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let created: u64 = tail[..digits].parse().unwrap();
        assert!(
            window.contains(&created),
            "created {created} outside {window:?}"
        );
        out.push('0');
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

fn unix_now() -> u64 {
    use switchyard_gateway::clock::{Clock, SystemClock};
    SystemClock.now_ms() / 1000
}

#[tokio::test]
async fn an_anthropic_client_reaches_an_openai_format_upstream_translated() {
    let h = start().await;
    let r = h.messages(messages_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body,
        json!({"id": "msg_chatcmpl-mock", "type": "message", "role": "assistant",
            "model": "mock-small",
            "content": [{"type": "text", "text": "Hello from the Switchyard mock"}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 5, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": 5}})
    );
    let r = h.messages(messages_body("alpha/mock-small", true)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let mut want = vec![
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_chatcmpl-mock\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"mock-small\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":0,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":0}}}".to_owned(),
        "event: ping\ndata: {\"type\":\"ping\"}".to_owned(),
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}".to_owned(),
    ];
    for word in ["Hello", " from", " the", " Switchyard", " mock"] {
        want.push(format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{word}\"}}}}"));
    }
    want.extend([
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}".to_owned(),
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":5,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":5}}".to_owned(),
        "event: message_stop\ndata: {\"type\":\"message_stop\"}".to_owned(),
    ]);
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    assert_eq!(r.text().await.unwrap(), frames(&want));
    let seen = h.mock_stats().await;
    let recent = seen["recent"].as_array().unwrap();
    assert_eq!(recent.len(), 2);
    assert!(recent
        .iter()
        .all(|r| r["path"] == "/v1/chat/completions" && r["model"] == "mock-small"));
    let mut h = h;
    h.stop().await;
    let rows = h.with_store(|s| s.recent_logs(10, None).unwrap()).await;
    assert_eq!(
        rows.iter()
            .map(|r| (
                r.client_format.as_str(),
                r.status,
                r.stream,
                r.prompt_tokens,
                r.completion_tokens
            ))
            .collect::<Vec<_>>(),
        [
            ("anthropic", 200, true, Some(5), Some(5)),
            ("anthropic", 200, false, Some(5), Some(5))
        ]
    );
}

#[tokio::test]
async fn a_chat_client_reaches_an_anthropic_upstream_translated() {
    let h = start().await;
    let before = unix_now();
    let r = h.chat(chat_body("claude/claude-opus", false)).await;
    assert_eq!(r.status(), 200);
    let body = r.text().await.unwrap();
    let r = h.chat(chat_body("claude/claude-opus", true)).await;
    assert_eq!(r.status(), 200);
    let stream = r.text().await.unwrap();
    let window = before..=unix_now();
    let body: Value = serde_json::from_str(&undated(&body, window.clone())).unwrap();
    assert_eq!(
        body,
        json!({"id": "msg_mock", "object": "chat.completion", "created": 0, "model": "claude-opus",
            "choices": [{"index": 0, "message": {"role": "assistant",
                "content": "Hello from the Switchyard mock"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10,
                "prompt_tokens_details": {"cached_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0}}})
    );
    let chunk = |delta: &str, finish: &str, usage: &str| {
        format!("data: {{\"id\":\"msg_mock\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"claude-opus\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]{usage}}}")
    };
    let mut want = vec![chunk(
        "{\"role\":\"assistant\",\"content\":\"\"}",
        "null",
        "",
    )];
    for word in ["Hello", " from", " the", " Switchyard", " mock"] {
        want.push(chunk(&format!("{{\"content\":\"{word}\"}}"), "null", ""));
    }
    want.push(chunk("{}", "\"stop\"", ",\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":5,\"total_tokens\":10,\"prompt_tokens_details\":{\"cached_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0}}"));
    want.push("data: [DONE]".to_owned());
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    assert_eq!(undated(&stream, window), frames(&want));
}

#[tokio::test]
async fn an_anthropic_clients_combo_fails_over_from_claude_to_an_openai_format_model() {
    let h = start().await;
    h.rule(json!({"match": {"model": "claude-opus"}, "status": 529}))
        .await;
    let r = h.messages(messages_body("mixed", false)).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["model"], "mock-small");
    assert_eq!(body["content"][0]["text"], "Hello from the Switchyard mock");
    let paths: Vec<(String, String)> = h.mock_stats().await["recent"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["path"].as_str().unwrap().to_owned(),
                r["model"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        paths,
        [
            ("/v1/messages".to_owned(), "claude-opus".to_owned()),
            ("/v1/chat/completions".to_owned(), "mock-small".to_owned())
        ]
    );
}

/// The Anthropic configuration with an OAuth subscription connection `claude-sub`
/// (provider `claudesub`, credential `oat-1`) and output limits on `claude-opus`
/// (64 000) and `mock-small` (16 384).
fn with_limits_and_oauth(mock: &str) -> Config {
    Config::anthropic(mock)
        .edit_provider("claude", |p| p.max_output_tokens("claude-opus", 64_000))
        .edit_provider("alpha", |p| p.max_output_tokens("mock-small", 16_384))
        .provider(Provider::anthropic("claudesub", mock).models(["claude-opus"]))
        .connection(
            Connection::oauth("claude-sub", "claudesub")
                .credential("oat-1")
                .disable_cooling(),
        )
}

/// A Claude Code-like request: members the gateway does not know, a `?beta=true` call
/// with its protocol headers and client headers that must stay behind.
async fn claude_code_request(h: &Harness, body: &Value) -> reqwest::Response {
    h.http
        .post(h.url("/v1/messages?beta=true"))
        .header("x-api-key", KEY)
        .header("anthropic-version", ANTHROPIC_VERSION)
        .header(
            "anthropic-beta",
            "claude-code-20250219,interleaved-thinking-2025-05-14",
        )
        .header("x-app", "cli")
        .header("X-Claude-Code-Session-Id", "sess-123")
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_pass_through_keeps_every_member_but_model_and_a_clamped_bound_and_forwards_the_protocol_headers(
) {
    let h = Harness::start_with(with_limits_and_oauth, &[]).await;
    let body = json!({
        "model": "claude/claude-opus",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}],
        "system": [{"type": "text", "text": "be brief"}],
        "metadata": {"user_id": "{\"session\":\"s\"}"},
        "max_tokens": 128000,
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
        "output_config": {"effort": "medium"},
        "stream": false
    });
    assert_eq!(claude_code_request(&h, &body).await.status(), 200);
    let seen = h.mock_requests().await;
    assert_eq!(seen.len(), 1);
    let mut want = body.clone();
    want["model"] = json!("claude-opus");
    want["max_tokens"] = json!(64000);
    assert_eq!(seen[0]["body"], want);
    assert_eq!(
        serde_json::to_string(&seen[0]["body"]).unwrap(),
        serde_json::to_string(&want).unwrap(),
        "member order is kept"
    );
    assert_eq!(seen[0]["path"], "/v1/messages");
    assert_eq!(seen[0]["x_api_key"], true);
    assert_eq!(seen[0]["authorization"], Value::Null);
    assert_eq!(seen[0]["credential"], CRED_CLAUDE);
    assert_eq!(
        seen[0]["headers"],
        json!({"anthropic-version": "2023-06-01",
               "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14"})
    );
    let all_headers = &h.mock_stats().await["recent"][0]["headers"];
    let names: Vec<&str> = all_headers
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        names,
        [
            "accept",
            "anthropic-beta",
            "anthropic-version",
            "content-length",
            "content-type",
            "host",
            "user-agent",
            "x-api-key"
        ]
    );

    // An OAuth account: a bearer token and the OAuth beta added to the client's.
    let mut sub = body.clone();
    sub["model"] = json!("claudesub/claude-opus");
    assert_eq!(claude_code_request(&h, &sub).await.status(), 200);
    let seen = h.mock_requests().await;
    assert_eq!(seen[1]["x_api_key"], false);
    assert_eq!(seen[1]["authorization"], "Bearer");
    assert_eq!(seen[1]["credential"], "oat-1");
    assert_eq!(
        seen[1]["headers"]["anthropic-beta"],
        "claude-code-20250219,interleaved-thinking-2025-05-14,oauth-2025-04-20"
    );
    // A chat client gets the default version and no beta.
    assert_eq!(
        h.chat(chat_body("claude/claude-opus", false))
            .await
            .status(),
        200
    );
    let seen = h.mock_requests().await;
    assert_eq!(
        seen[2]["headers"],
        json!({"anthropic-version": "2023-06-01"})
    );
}

#[tokio::test]
async fn a_translated_request_drops_what_chat_cannot_carry_and_clamps_max_tokens() {
    let h = Harness::start_with(with_limits_and_oauth, &[]).await;
    let body = json!({
        "model": "alpha/mock-small",
        "messages": [
            {"role": "system", "content": "stay on task", "output_config": {"effort": "low"}},
            {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}
        ],
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "tools": [
            {"name": "Bash", "description": "run", "input_schema": {"type": "object"}},
            {"name": "Later", "description": "deferred", "input_schema": {"type": "object"}, "defer_loading": true}
        ],
        "metadata": {"user_id": "u-1"},
        "max_tokens": 128000,
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": []},
        "output_config": {"effort": "medium"},
        "stop_sequences": ["END"],
        "stream": true
    });
    let r = claude_code_request(&h, &body).await;
    assert_eq!(r.status(), 200);
    r.text().await.unwrap();
    let seen = h.mock_requests().await;
    assert_eq!(seen[0]["path"], "/v1/chat/completions");
    assert_eq!(seen[0]["headers"], json!({}));
    assert_eq!(
        seen[0]["body"],
        json!({
            "model": "mock-small",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "system", "content": "stay on task"},
                {"role": "user", "content": "hi"}
            ],
            "max_tokens": 16384,
            "stream": true,
            "stream_options": {"include_usage": true},
            "stop": ["END"],
            "tools": [{"type": "function", "function": {"name": "Bash", "description": "run", "parameters": {"type": "object"}}}],
            "user": "u-1"
        })
    );
}

/// A request in either format asking the mock for a tool call.
fn tool_turn(model: &str) -> (Value, Value) {
    let ask =
        json!([{"role": "user", "content": "Weather? [[tool:get_weather {\"city\":\"Paris\"}]]"}]);
    let anthropic = json!({"model": model, "max_tokens": 1024, "stream": true, "messages": ask,
        "tools": [{"name": "get_weather", "description": "The weather", "input_schema": {"type": "object"}}]});
    let chat = json!({"model": model, "stream": true, "messages": ask,
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "The weather", "parameters": {"type": "object"}}}]});
    (anthropic, chat)
}

#[tokio::test]
async fn a_streamed_tool_call_is_translated_byte_exactly_each_way() {
    let h = start().await;
    let (anthropic, _) = tool_turn("alpha/mock-small");
    let text = h.messages(anthropic).await.text().await.unwrap();
    let usage = r#""usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":6}"#;
    let delta = |i: u32, d: &str| {
        format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":{i},\"delta\":{d}}}")
    };
    let want = [
        r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_chatcmpl-mock","type":"message","role":"assistant","model":"mock-small","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}}"#.to_owned(),
        "event: ping\ndata: {\"type\":\"ping\"}".to_owned(),
        r#"event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.to_owned(),
        delta(0, r#"{"type":"text_delta","text":"Calling"}"#),
        delta(0, r#"{"type":"text_delta","text":" get_weather."}"#),
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}".to_owned(),
        r#"event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"call_mock_1","name":"get_weather","input":{}}}"#.to_owned(),
        delta(1, r#"{"type":"input_json_delta","partial_json":"{\"cit"}"#),
        delta(1, r#"{"type":"input_json_delta","partial_json":"y\":\"P"}"#),
        delta(1, r#"{"type":"input_json_delta","partial_json":"aris\"}"}"#),
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}".to_owned(),
        format!("event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"tool_use\",\"stop_sequence\":null}},{usage}}}"),
        "event: message_stop\ndata: {\"type\":\"message_stop\"}".to_owned(),
    ];
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    assert_eq!(text, frames(&want));

    let (_, chat) = tool_turn("claude/claude-opus");
    let before = unix_now();
    let text = h.chat(chat).await.text().await.unwrap();
    let text = undated(&text, before..=unix_now());
    let chunk = |delta: &str, finish: &str| {
        format!("data: {{\"id\":\"msg_mock\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"claude-opus\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]")
    };
    let fragment = |args: &str| {
        chunk(
            &format!(r#"{{"tool_calls":[{{"index":0,"function":{{"arguments":"{args}"}}}}]}}"#),
            "null",
        ) + "}"
    };
    let want = [
        chunk(r#"{"role":"assistant","content":""}"#, "null") + "}",
        chunk(r#"{"content":"Calling"}"#, "null") + "}",
        chunk(r#"{"content":" get_weather."}"#, "null") + "}",
        chunk(
            r#"{"tool_calls":[{"index":0,"id":"toolu_mock_1","type":"function","function":{"name":"get_weather","arguments":""}}]}"#,
            "null",
        ) + "}",
        fragment(r#"{\"cit"#),
        fragment(r#"y\":\"P"#),
        fragment(r#"aris\"}"#),
        chunk("{}", "\"tool_calls\"")
            + r#","usage":{"prompt_tokens":12,"completion_tokens":6,"total_tokens":18,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}"#,
        "data: [DONE]".to_owned(),
    ];
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    assert_eq!(text, frames(&want));
}

#[tokio::test]
async fn a_translated_stream_that_breaks_ends_with_an_error_event_in_the_clients_format() {
    let h = start().await;
    h.rule(
        json!({"match": {"model": "mock-small"}, "reset_after_chunks": 2, "chunk_interval_ms": 5}),
    )
    .await;
    let text = h
        .messages(messages_body("alpha/mock-small", true))
        .await
        .text()
        .await
        .unwrap();
    let events: Vec<&str> = text
        .split("\n\n")
        .filter_map(|f| f.strip_prefix("event: "))
        .map(|f| f.split('\n').next().unwrap())
        .collect();
    assert_eq!(
        events,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "error",
            "message_stop"
        ]
    );
    // The error, then `message_stop` (else Claude Code reports a connection closed
    // mid-response).
    assert!(text.ends_with("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"upstream connection broke during the stream\",\"code\":\"upstream_connection_reset\"}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"), "{text}");
    h.rule(json!({"match": {"model": "claude-opus"}, "end_after_chunks": 1}))
        .await;
    let text = h
        .chat(chat_body("claude/claude-opus", true))
        .await
        .text()
        .await
        .unwrap();
    assert!(text.ends_with("data: {\"error\":{\"message\":\"the upstream ended the stream before the answer was complete\",\"type\":\"upstream_error\",\"code\":\"upstream_stream_truncated\",\"param\":null}}\n\ndata: [DONE]\n\n"), "{text}");
    assert!(text.contains("\"finish_reason\":\"length\""), "{text}");
}

fn claude_pool(mock: &str) -> Config {
    Config::anthropic(mock).quota_pool(
        QuotaPool::new("claude-team", "Claude team", ["claude-1"])
            .dimension(Dimension::new("tokens", "daily", 100_000))
            .dimension(Dimension::new("percent", "5h", 100))
            .allocation(Allocation::new("k1").weight(100).policy("burst")),
    )
}

#[tokio::test]
async fn quota_reads_anthropic_usage_and_unified_signals_and_refuses_in_anthropics_shape() {
    let h = Harness::start_with(claude_pool, &[]).await;
    h.rule(json!({"match": {"model": "claude-opus"}, "times": 1,
        "cache_read_input_tokens": 7, "cache_creation_input_tokens": 3}))
        .await;
    let text = h
        .messages(messages_body("claude/claude-opus", true))
        .await
        .text()
        .await
        .unwrap();
    assert!(text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
    // 5 fresh input tokens, 7 read from the cache, 3 written to it, 5 output.
    eventually("the stream's usage is settled", || async {
        let usage: Value = h.admin_json("/api/quota/pools/claude-team/usage").await;
        usage["dimensions"][0]["keys"][0]["consumed"].as_f64() == Some(20.0)
    })
    .await;
    let reset = unix_now() + 120;
    h.rule(json!({"match": {"model": "claude-opus"}, "headers": {
        "anthropic-ratelimit-unified-5h-utilization": "1.0",
        "anthropic-ratelimit-unified-reset": reset.to_string()
    }}))
    .await;
    assert_eq!(
        h.messages(messages_body("claude/claude-opus", false))
            .await
            .status(),
        200
    );
    let r = h.messages(messages_body("claude/claude-opus", false)).await;
    assert_eq!(r.status(), 429);
    let retry = retry_after(&r);
    assert!((118..=120).contains(&retry), "{retry}");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "rate_limit_error");
    assert_eq!(body["error"]["code"], "quota_exceeded");
    assert_eq!(body["error"]["quota"]["pool"], "claude-team");
    assert_eq!(body["error"]["quota"]["dimension"], "percent:5h");
    assert_eq!(body["error"]["quota"]["reason"], "global_limit");
    let usage: Value = h.admin_json("/api/quota/pools/claude-team/usage").await;
    assert_eq!(usage["dimensions"][1]["providerSignal"], 1.0);
}

/// The Anthropic configuration with a Claude subscription connection `claude-sub`
/// (credential `oat-1`) opted into the usage-wall features in `data`.
fn subscription(data: Value) -> impl FnOnce(&str) -> Config {
    move |mock: &str| {
        Config::anthropic(mock)
            .provider(Provider::anthropic("claudesub", mock).models(["claude-opus"]))
            .connection(
                Connection::oauth("claude-sub", "claudesub")
                    .credential("oat-1")
                    .provider_specific_data(data),
            )
    }
}

/// The journal's `(path, slow header)` pairs.
async fn calls(h: &Harness) -> Vec<(String, Option<String>)> {
    h.mock_requests()
        .await
        .iter()
        .map(|r| {
            (
                r["path"].as_str().unwrap().to_owned(),
                r["headers"]["anthropic-usage-limit"]
                    .as_str()
                    .map(str::to_owned),
            )
        })
        .collect()
}

fn slow() -> Option<String> {
    Some("slow".to_owned())
}

#[tokio::test]
async fn at_the_usage_wall_the_low_priority_lane_retries_the_same_account_slowly() {
    let h = Harness::start_with(subscription(json!({"lowPriorityMode": true})), &[]).await;
    let reset = unix_now() + 3600;
    h.mock_wall(json!({"credential": "oat-1", "reset_at": reset}))
        .await;
    let r = h
        .messages(messages_body("claudesub/claude-opus", false))
        .await;
    assert_eq!(r.status(), 200);
    let m = "/v1/messages".to_owned();
    assert_eq!(calls(&h).await, [(m.clone(), None), (m.clone(), slow())]);
    // The lane stays: the next request goes slow at once.
    let r = h
        .messages(messages_body("claudesub/claude-opus", true))
        .await;
    assert_eq!(r.status(), 200);
    assert!(r
        .text()
        .await
        .unwrap()
        .ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
    assert_eq!(calls(&h).await.last().unwrap(), &(m.clone(), slow()));
    // The intercepted 429 cooled nothing down.
    let cooldowns: Value = h.admin_json("/api/resilience/cooldowns").await;
    let sub = cooldowns
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["connectionId"] == "claude-sub")
        .unwrap();
    assert_eq!(
        (&sub["state"], &sub["backoffLevel"], &sub["lastErrorType"]),
        (&json!("active"), &json!(0), &Value::Null)
    );
    let until = sub["usageWall"]["laneActiveUntilMs"].as_u64().unwrap();
    assert_eq!(until, (reset + 60) * 1000);
    assert_eq!(sub["usageWall"]["lastExit"], Value::Null);
    // The first request's log row shows the wall's answer, judged: a rate limit.
    h.newest_log_row(2).await;
    let logs: Value = h.admin_json("/api/logs?limit=2").await;
    assert_eq!(
        logs[1]["failed_attempts"],
        json!([{"provider": "claudesub", "connection_id": "claude-sub", "model": "claude-opus",
                "outcome": "rate_limited", "cause": "rate_limit_exceeded", "upstream_status": 429}])
    );
}

#[tokio::test(start_paused = true)]
async fn a_busy_slow_lane_waits_by_the_announced_retry_after_with_jitter() {
    let h = Harness::start_paused(subscription(json!({"lowPriorityMode": true})), &[]).await;
    h.mock_wall(json!({"credential": "oat-1", "reset_at": unix_now() + 3600,
        "slow": {"statuses": ["slot_busy", "active"], "retry_after_s": 7}}))
        .await;
    let started = tokio::time::Instant::now();
    let r = h
        .messages(messages_body("claudesub/claude-opus", false))
        .await;
    let waited = started.elapsed().as_millis();
    assert_eq!(r.status(), 200);
    // 7 s ± 30 %.
    assert!((4_900..=9_100).contains(&waited), "{waited} ms");
    let m = "/v1/messages".to_owned();
    assert_eq!(
        calls(&h).await,
        [(m.clone(), None), (m.clone(), slow()), (m, slow())]
    );
}

#[tokio::test]
async fn at_the_usage_wall_the_limit_reset_is_claimed_once_and_remembered() {
    let h = Harness::start_with(
        subscription(json!({"autoLimitReset": true, "organizationUUID": "org-1"})),
        &[],
    )
    .await;
    let wall = json!({"credential": "oat-1", "reset_at": unix_now() + 3600, "reset_program": {}});
    h.mock_wall(wall.clone()).await;
    let r = h
        .messages(messages_body("claudesub/claude-opus", false))
        .await;
    assert_eq!(r.status(), 200);
    let m = "/v1/messages".to_owned();
    assert_eq!(
        calls(&h).await,
        [
            (m.clone(), None),
            ("/api/oauth/usage".to_owned(), None),
            (
                "/api/organizations/org-1/reset_rate_limits".to_owned(),
                None
            ),
            (m.clone(), None),
        ]
    );
    // A second wall in the same week: no new reset is tried. Within a minute of the
    // reset it may be a request that raced it, so it is retried once at full speed;
    // walled again, and without the lane, the 429 takes the ordinary path to the client.
    h.mock_wall(wall).await;
    let r = h
        .messages(messages_body("claudesub/claude-opus", false))
        .await;
    assert_eq!(r.status(), 429);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error");
    assert_eq!(calls(&h).await[4..], [(m.clone(), None), (m, None)]);
}

#[tokio::test]
async fn a_request_one_target_cannot_take_goes_to_one_that_can_or_is_refused_naming_why() {
    let h = Harness::start_with(
        |mock| {
            Config::anthropic(mock).combo(Combo::priority(
                "chat-first",
                ["alpha/mock-small", "claude/claude-opus"],
            ))
        },
        &[],
    )
    .await;
    let file_image = |model: &str| {
        json!({"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image", "source": {"type": "file", "file_id": "file_1"}}]}]})
    };
    let r = h.messages(file_image("chat-first")).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["model"], "claude-opus");
    let (status, body) = status_and_json(h.messages(file_image("alpha/mock-small")).await).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["code"], "invalid_request");
    assert_eq!(
        body["error"]["message"],
        "the request cannot be sent to `alpha/mock-small`: `messages[0].content[1].source.type` has no chat counterpart: only base64 and url images can be sent"
    );
    let paths: Vec<Value> = h
        .mock_requests()
        .await
        .iter()
        .map(|r| r["path"].clone())
        .collect();
    assert_eq!(paths, [json!("/v1/messages")]);
}

#[tokio::test]
async fn the_quota_books_no_more_output_than_the_models_limit_allows() {
    let h = Harness::start_with(
        |mock| {
            Config::anthropic(mock)
                .edit_provider("alpha", |p| p.max_output_tokens("mock-small", 1_000))
                .quota_pool(
                    QuotaPool::new("team", "Team", ["alpha-1"])
                        .dimension(Dimension::new("tokens", "daily", 20_000))
                        .allocation(Allocation::new("k1").weight(100).policy("hard")),
                )
        },
        &[],
    )
    .await;
    let mut body = messages_body("alpha/mock-small", false);
    body["max_tokens"] = json!(128_000);
    let r = h.messages(body.clone()).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let seen = h.mock_requests().await;
    assert_eq!(seen[0]["body"]["max_tokens"], 1000);
    // A model without a limit books the client's bound, which never fits the pool.
    body["model"] = json!("alpha/mock-large");
    let (status, body) = status_and_json(h.messages(body).await).await;
    assert_eq!(status, 429);
    assert_eq!(body["error"]["code"], "quota_exceeded");
}

#[tokio::test]
async fn thinking_a_translated_route_made_is_not_sent_back_to_anthropic() {
    let h = start().await;
    // A turn served by the OpenAI-format model with reasoning: its thinking block is
    // marked as the gateway's, unsigned.
    let mut ask = messages_body("alpha/mock-small", false);
    ask["thinking"] = json!({"type": "enabled", "budget_tokens": 2048});
    let answer: Value = h.messages(ask).await.json().await.unwrap();
    assert_eq!(
        answer["content"][0],
        json!({"type": "thinking", "thinking": "Let me think.", "signature": "switchyard-unsigned"})
    );
    // The conversation goes on with Claude: the unsigned block stays behind, and so does
    // thinking for this turn (Anthropic wants the turn's own signed thinking back).
    let next = json!({
        "model": "claude/claude-opus", "max_tokens": 4096,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "messages": [
            {"role": "user", "content": "Hello there, mock!"},
            {"role": "assistant", "content": answer["content"]},
            {"role": "user", "content": "And now?"}
        ]
    });
    assert_eq!(h.messages(next).await.status(), 200);
    let sent = &h.mock_requests().await[1]["body"];
    assert_eq!(
        *sent,
        json!({"model": "claude-opus", "max_tokens": 4096, "messages": [
            {"role": "user", "content": "Hello there, mock!"},
            {"role": "assistant", "content": [{"type": "text", "text": answer["content"][1]["text"]}]},
            {"role": "user", "content": "And now?"}
        ]})
    );
}

/// The last `data:` line of an event stream, as JSON.
fn last_error_data(text: &str) -> Value {
    let line = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .rfind(|d| d.contains("\"error\""))
        .unwrap_or_else(|| panic!("no error frame in {text}"));
    serde_json::from_str(line).unwrap()
}

#[tokio::test]
async fn mid_stream_errors_keep_their_kind_across_translation_both_ways() {
    let h = Harness::start_with(Config::anthropic, &[]).await;
    // A chat upstream's rate-limit error, to an Anthropic client.
    h.rule(
        json!({"times": 1, "match": {"model": "mock-small"}, "end_after_chunks": 1,
                  "stream_error": {"type": "requests", "message": "Rate limit reached"}}),
    )
    .await;
    let r = h.messages(messages_body("alpha/mock-small", true)).await;
    assert_eq!(r.status(), 200);
    let error = last_error_data(&r.text().await.unwrap());
    assert_eq!(
        error,
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Rate limit reached"}})
    );
    // An Anthropic upstream's overloaded error, to a chat client, and back the same.
    h.rule(
        json!({"times": 1, "match": {"model": "claude-opus"}, "end_after_chunks": 1,
                  "stream_error": {"type": "overloaded_error", "message": "Overloaded"}}),
    )
    .await;
    let r = h.chat(chat_body("claude/claude-opus", true)).await;
    let error = last_error_data(&r.text().await.unwrap());
    assert_eq!(error["error"]["type"], "overloaded_error");
    assert_eq!(error["error"]["message"], "Overloaded");
}
