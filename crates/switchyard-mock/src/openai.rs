//! Deterministic OpenAI chat-completions responses.

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

/// Prompt tokens the mock reports: the characters of every string `content` (and every
/// `text` part) of the messages, divided by four, rounded up, at least 1.
pub fn prompt_tokens(body: &Value) -> u64 {
    let mut chars = 0usize;
    let mut count = |v: &Value| {
        if let Some(s) = v.as_str() {
            chars += s.chars().count();
        }
    };
    if let Some(system) = body.get("system") {
        count(system);
    }
    for m in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match m.get("content") {
            Some(Value::Array(parts)) => parts
                .iter()
                .for_each(|p| count(p.get("text").unwrap_or(&Value::Null))),
            Some(v) => count(v),
            None => {}
        }
    }
    u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX).max(1)
}

/// The text of chunk `i`.
pub fn word(i: u32) -> &'static str {
    WORDS[usize::try_from(i).unwrap_or(0) % WORDS.len()]
}

/// The full answer text for `chunks` chunks.
pub fn answer(chunks: u32) -> String {
    (0..chunks).map(word).collect()
}

/// A non-streaming chat completion.
pub fn completion(model: &str, chunks: u32, prompt: u64) -> Value {
    json!({
        "id": ID,
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": answer(chunks)},
            "finish_reason": "stop"
        }],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": chunks,
            "total_tokens": prompt + u64::from(chunks)
        }
    })
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

/// The frames after the content: finish reason, usage when asked for, `[DONE]`.
pub fn stream_tail(model: &str, chunks: u32, prompt: u64, include_usage: bool) -> String {
    let mut out = chunk(model, json!({}), Some("stop"));
    if include_usage {
        let v = json!({
            "id": ID,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": chunks,
                "total_tokens": prompt + u64::from(chunks)
            }
        });
        out.push_str(&format!("data: {v}\n\n"));
    }
    out.push_str("data: [DONE]\n\n");
    out
}

/// The whole stream as one string, for tests that compare bytes.
pub fn full_stream(model: &str, chunks: u32, prompt: u64, include_usage: bool) -> String {
    let mut s = stream_head(model);
    for i in 0..chunks {
        s.push_str(&stream_content(model, i));
    }
    s.push_str(&stream_tail(model, chunks, prompt, include_usage));
    s
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
    fn stream_is_head_content_tail() {
        let s = full_stream("m", 2, 4, true);
        assert_eq!(s.matches("data: ").count(), 6);
        assert!(s.ends_with("data: [DONE]\n\n"));
        assert_eq!(answer(3), "Hello from the");
    }
}
