//! Deterministic Anthropic Messages API responses.

use crate::openai::{answer, word};
use serde_json::{json, Value};

/// The fixed message id.
pub const ID: &str = "msg_mock";

/// A non-streaming message.
pub fn message(model: &str, chunks: u32, prompt: u64) -> Value {
    json!({
        "id": ID,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": answer(chunks)}],
        "stop_reason": "end_turn",
        "stop_sequence": null,
        "usage": {"input_tokens": prompt, "output_tokens": chunks}
    })
}

fn event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// Events before the content deltas.
pub fn stream_head(model: &str, prompt: u64) -> String {
    let mut s = event(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": ID, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": prompt, "output_tokens": 1}
        }}),
    );
    s.push_str(&event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ));
    s
}

/// Content delta `i`.
pub fn stream_content(i: u32) -> String {
    event(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word(i)}}),
    )
}

/// Events after the content.
pub fn stream_tail(chunks: u32) -> String {
    let mut s = event(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": 0}),
    );
    s.push_str(&event(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": chunks}}),
    ));
    s.push_str(&event("message_stop", &json!({"type": "message_stop"})));
    s
}

/// An Anthropic-style error body.
pub fn error_body(status: u16, message: &str) -> Value {
    let kind = match status {
        401 => "authentication_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}
