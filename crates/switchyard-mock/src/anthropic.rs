//! Deterministic Anthropic Messages API responses.

use crate::answer::{
    pieces, thirds, Answer, Builder, Stop, StreamParts, SIGNATURE, THINKING, TOOL_USE_ID,
};
use crate::openai::word;
use serde_json::{json, Value};

/// The fixed message id.
pub const ID: &str = "msg_mock";

/// The input side of a message's usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// The prompt's tokens, see [`crate::openai::prompt_tokens`].
    pub input_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
}

impl Usage {
    /// A prompt of `input_tokens` with nothing cached.
    pub fn input(input_tokens: u64) -> Self {
        Self {
            input_tokens,
            ..Self::default()
        }
    }

    fn with_output(self, output_tokens: u64) -> Value {
        json!({
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "output_tokens": output_tokens
        })
    }
}

/// A non-streaming message of the canned answer.
pub fn message(model: &str, chunks: u32, prompt: u64) -> Value {
    message_of(model, &Answer::canned(chunks), Usage::input(prompt))
}

/// The Messages `stop_reason` for a stop, and the `stop_sequence` member.
pub fn stop_reason(stop: &Stop) -> (&'static str, Value) {
    match stop {
        Stop::End => ("end_turn", Value::Null),
        Stop::Sequence(s) => ("stop_sequence", json!(s)),
        Stop::MaxTokens => ("max_tokens", Value::Null),
        Stop::ToolUse => ("tool_use", Value::Null),
    }
}

/// A non-streaming message of `answer`: a thinking block when it thinks, the text
/// block, a `tool_use` block when it calls a tool.
pub fn message_of(model: &str, answer: &Answer, usage: Usage) -> Value {
    let mut content = Vec::new();
    if answer.thinking {
        content.push(json!({"type": "thinking", "thinking": THINKING, "signature": SIGNATURE}));
    }
    content.push(json!({"type": "text", "text": answer.text()}));
    if let Some(tool) = &answer.tool {
        content.push(
            json!({"type": "tool_use", "id": TOOL_USE_ID, "name": tool.name, "input": tool.input}),
        );
    }
    let (reason, sequence) = stop_reason(&answer.stop);
    json!({
        "id": ID,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage.with_output(answer.output_tokens())
    })
}

fn event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn message_start(model: &str, usage: Usage) -> String {
    let mut s = event(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": ID, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": usage.with_output(1)
        }}),
    );
    s.push_str(&event("ping", &json!({"type": "ping"})));
    s
}

fn block_start(index: u32, block: &Value) -> String {
    event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": index, "content_block": block}),
    )
}

fn block_delta(index: u32, delta: &Value) -> String {
    event(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

fn block_stop(index: u32) -> String {
    event(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": index}),
    )
}

fn message_end(stop: &Stop, output_tokens: u64) -> String {
    let (reason, sequence) = stop_reason(stop);
    let mut s = event(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence}, "usage": {"output_tokens": output_tokens}}),
    );
    s.push_str(&event("message_stop", &json!({"type": "message_stop"})));
    s
}

fn text_block() -> Value {
    json!({"type": "text", "text": ""})
}

fn text_delta(index: u32, text: &str) -> String {
    block_delta(index, &json!({"type": "text_delta", "text": text}))
}

/// Events before the canned answer's deltas: `message_start`, `ping`, the text block's
/// start.
pub fn stream_head(model: &str, prompt: u64) -> String {
    let mut s = message_start(model, Usage::input(prompt));
    s.push_str(&block_start(0, &text_block()));
    s
}

/// Canned content delta `i`.
pub fn stream_content(i: u32) -> String {
    text_delta(0, word(i))
}

/// Events after the canned answer's deltas.
pub fn stream_tail(chunks: u32) -> String {
    let mut s = block_stop(0);
    s.push_str(&message_end(&Stop::End, u64::from(chunks)));
    s
}

/// The stream of `answer`: `message_start`, `ping`, then each block (thinking with a
/// `thinking_delta` per piece and a `signature_delta`; text with a `text_delta` per
/// piece; `tool_use` with empty `input` and its input JSON in three
/// `input_json_delta` fragments), then `message_delta` and `message_stop`.
pub fn stream_of(model: &str, answer: &Answer, usage: Usage) -> StreamParts {
    let mut b = Builder::new(message_start(model, usage));
    let mut index = 0;
    if answer.thinking {
        b.event(&block_start(
            index,
            &json!({"type": "thinking", "thinking": "", "signature": ""}),
        ));
        for p in pieces(THINKING) {
            b.delta(&block_delta(
                index,
                &json!({"type": "thinking_delta", "thinking": p}),
            ));
        }
        b.delta(&block_delta(
            index,
            &json!({"type": "signature_delta", "signature": SIGNATURE}),
        ));
        b.event(&block_stop(index));
        index += 1;
    }
    b.event(&block_start(index, &text_block()));
    for p in &answer.text {
        b.delta(&text_delta(index, p));
    }
    b.event(&block_stop(index));
    if let (Some(tool), Some(arguments)) = (&answer.tool, answer.arguments()) {
        index += 1;
        b.event(&block_start(
            index,
            &json!({"type": "tool_use", "id": TOOL_USE_ID, "name": tool.name, "input": {}}),
        ));
        for part in thirds(&arguments) {
            b.delta(&block_delta(
                index,
                &json!({"type": "input_json_delta", "partial_json": part}),
            ));
        }
        b.event(&block_stop(index));
    }
    b.finish(&message_end(&answer.stop, answer.output_tokens()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_canned_stream_is_the_head_the_content_frames_and_the_tail() {
        let parts = stream_of("m", &Answer::canned(2), Usage::input(3));
        assert_eq!(parts.head, stream_head("m", 3));
        assert_eq!(parts.frames, [stream_content(0), stream_content(1)]);
        assert_eq!(parts.tail, stream_tail(2));
    }

    #[test]
    fn an_empty_text_keeps_its_block() {
        let s = stream_of("m", &Answer::canned(0), Usage::input(1)).concat();
        let events: Vec<&str> = s
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(
            events,
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
    }
}
