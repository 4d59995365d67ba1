//! Deterministic OpenAI chat-completions responses.

use crate::answer::{pieces, thirds, tokens_of, Answer, Stop, StreamParts, THINKING, TOOL_CALL_ID};
use serde_json::{json, Value};

/// The words the mock's answers are made of; chunk `i` is `WORDS[i % WORDS.len()]`.
pub const WORDS: [&str; 8] = [
    "Hello",
    " from",
    " the",
    " Switchyard",
    " mock",
    " provider",
    ".",
    " ",
];

/// The fixed `created` timestamp of every response, so output is byte-for-byte stable.
pub const CREATED: u64 = 1_700_000_000;

/// The fixed response id.
pub const ID: &str = "chatcmpl-mock";

/// Prompt tokens the mock reports: the characters of the `system` member and of every
/// message `content` (a string, or the `text` of each part or block), divided by four,
/// rounded up, at least 1. Anthropic's `input_tokens` and `count_tokens` use it too.
pub fn prompt_tokens(body: &Value) -> u64 {
    let mut chars = 0usize;
    let mut count = |content: Option<&Value>| match content {
        Some(Value::Array(parts)) => parts.iter().for_each(|p| {
            chars += p
                .get("text")
                .and_then(Value::as_str)
                .map_or(0, |s| s.chars().count());
        }),
        Some(Value::String(s)) => chars += s.chars().count(),
        _ => {}
    };
    count(body.get("system"));
    for m in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        count(m.get("content"));
    }
    tokens_of(chars)
}

/// The text of chunk `i`.
pub fn word(i: u32) -> &'static str {
    WORDS[usize::try_from(i).unwrap_or(0) % WORDS.len()]
}

/// The full answer text for `chunks` chunks.
pub fn answer(chunks: u32) -> String {
    (0..chunks).map(word).collect()
}

/// A non-streaming chat completion of the canned answer.
pub fn completion(model: &str, chunks: u32, prompt: u64) -> Value {
    completion_of(model, &Answer::canned(chunks), prompt)
}

/// A non-streaming chat completion of `answer`: `reasoning_content` when it thinks,
/// `tool_calls` when it calls a tool.
pub fn completion_of(model: &str, answer: &Answer, prompt: u64) -> Value {
    let mut message = json!({"role": "assistant"});
    if answer.thinking {
        message["reasoning_content"] = json!(THINKING);
    }
    message["content"] = json!(answer.text());
    if let (Some(tool), Some(arguments)) = (&answer.tool, answer.arguments()) {
        message["tool_calls"] = json!([{
            "id": TOOL_CALL_ID,
            "type": "function",
            "function": {"name": tool.name, "arguments": arguments}
        }]);
    }
    json!({
        "id": ID,
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": finish_reason(&answer.stop)
        }],
        "usage": usage(answer, prompt)
    })
}

/// The chat `finish_reason` for a stop.
pub fn finish_reason(stop: &Stop) -> &'static str {
    match stop {
        Stop::End | Stop::Sequence(_) => "stop",
        Stop::MaxTokens => "length",
        Stop::ToolUse => "tool_calls",
    }
}

fn usage(answer: &Answer, prompt: u64) -> Value {
    let completion = answer.output_tokens();
    let mut usage = json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion
    });
    if answer.thinking {
        usage["completion_tokens_details"] = json!({"reasoning_tokens": answer.thinking_tokens()});
    }
    usage
}

fn chunk(model: &str, delta: Value, finish: Option<&str>) -> String {
    let v = json!({
        "id": ID,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    });
    format!("data: {v}\n\n")
}

/// The first frame of a stream (role announcement).
pub fn stream_head(model: &str) -> String {
    chunk(model, json!({"role": "assistant", "content": ""}), None)
}

/// Content frame `i`.
pub fn stream_content(model: &str, i: u32) -> String {
    chunk(model, json!({"content": word(i)}), None)
}

/// The frames after the canned answer's content: finish reason, usage when asked for,
/// `[DONE]`.
pub fn stream_tail(model: &str, chunks: u32, prompt: u64, include_usage: bool) -> String {
    tail(model, &Answer::canned(chunks), prompt, include_usage)
}

fn tail(model: &str, answer: &Answer, prompt: u64, include_usage: bool) -> String {
    let mut out = chunk(model, json!({}), Some(finish_reason(&answer.stop)));
    if include_usage {
        let v = json!({
            "id": ID,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "choices": [],
            "usage": usage(answer, prompt)
        });
        out.push_str(&format!("data: {v}\n\n"));
    }
    out.push_str("data: [DONE]\n\n");
    out
}

/// The stream of `answer`: the role frame, then one frame per `reasoning_content`
/// piece, per `content` piece, the tool call's announcement (id, name, empty
/// `arguments`) and its `arguments` in three fragments, then the tail.
pub fn stream_of(model: &str, answer: &Answer, prompt: u64, include_usage: bool) -> StreamParts {
    let mut frames: Vec<String> = Vec::new();
    if answer.thinking {
        frames.extend(
            pieces(THINKING)
                .iter()
                .map(|p| chunk(model, json!({"reasoning_content": p}), None)),
        );
    }
    frames.extend(
        answer
            .text
            .iter()
            .map(|p| chunk(model, json!({"content": p}), None)),
    );
    if let (Some(tool), Some(arguments)) = (&answer.tool, answer.arguments()) {
        let call = |function: Value| {
            chunk(
                model,
                json!({"tool_calls": [{"index": 0, "function": function}]}),
                None,
            )
        };
        frames.push(chunk(
            model,
            json!({"tool_calls": [{"index": 0, "id": TOOL_CALL_ID, "type": "function",
                "function": {"name": tool.name, "arguments": ""}}]}),
            None,
        ));
        frames.extend(
            thirds(&arguments)
                .iter()
                .map(|a| call(json!({"arguments": a}))),
        );
    }
    StreamParts {
        head: stream_head(model),
        frames,
        tail: tail(model, answer, prompt, include_usage),
    }
}

/// The whole stream of the canned answer as one string, for tests that compare bytes.
pub fn full_stream(model: &str, chunks: u32, prompt: u64, include_usage: bool) -> String {
    stream_of(model, &Answer::canned(chunks), prompt, include_usage).concat()
}

/// An OpenAI-style error body.
pub fn error_body(status: u16, message: &str) -> Value {
    let (kind, code) = match status {
        401 => ("invalid_request_error", "invalid_api_key"),
        429 => ("rate_limit_error", "rate_limit_exceeded"),
        400..=499 => ("invalid_request_error", "invalid_request"),
        _ => ("server_error", "server_error"),
    };
    json!({"error": {"message": message, "type": kind, "code": code}})
}

/// The model list the mock advertises.
pub fn models() -> Value {
    json!({
        "object": "list",
        "data": [
            {"id": "mock-small", "object": "model", "created": CREATED, "owned_by": "mock"},
            {"id": "mock-large", "object": "model", "created": CREATED, "owned_by": "mock"}
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_tokens_counts_string_and_part_content() {
        let body = json!({"messages": [
            {"role": "user", "content": "abcdefgh"},
            {"role": "user", "content": [{"type": "text", "text": "abc"}]}
        ]});
        assert_eq!(prompt_tokens(&body), 3);
        assert_eq!(prompt_tokens(&json!({})), 1);
    }

    #[test]
    fn prompt_tokens_count_a_system_string_or_its_blocks() {
        assert_eq!(prompt_tokens(&json!({"system": "abcde"})), 2);
        let body =
            json!({"system": [{"type": "text", "text": "abcde"}, {"type": "text", "text": "fgh"}]});
        assert_eq!(prompt_tokens(&body), 2);
    }

    #[test]
    fn the_canned_stream_is_the_head_the_content_frames_and_the_tail() {
        let mut s = stream_head("m");
        (0..3).for_each(|i| s.push_str(&stream_content("m", i)));
        s.push_str(&stream_tail("m", 3, 4, true));
        assert_eq!(full_stream("m", 3, 4, true), s);
        assert!(
            s.contains(r#""usage":{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7}}"#)
        );
    }

    #[test]
    fn stream_is_head_content_tail() {
        let s = full_stream("m", 2, 4, true);
        assert_eq!(s.matches("data: ").count(), 6);
        assert!(s.ends_with("data: [DONE]\n\n"));
        assert_eq!(answer(3), "Hello from the");
    }
}
