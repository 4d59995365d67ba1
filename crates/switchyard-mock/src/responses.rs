//! Deterministic OpenAI Responses API answers (`POST /v1/responses`, the API Codex
//! speaks).

use crate::answer::{
    array, is_message, pieces, response_texts, thirds, tokens_of, Answer, Builder, Stop,
    StreamParts, THINKING, TOOL_CALL_ID,
};
use crate::openai::CREATED;
use serde_json::{json, Map, Value};

/// The fixed response id.
pub const ID: &str = "resp_mock";

/// The id of the message output item.
pub const MESSAGE_ID: &str = "msg_mock";

/// The id of the reasoning output item.
pub const REASONING_ID: &str = "rs_mock";

/// The id of the function call output item (its `call_id` is
/// [`crate::answer::TOOL_CALL_ID`]).
pub const FUNCTION_CALL_ID: &str = "fc_mock_1";

/// Prompt tokens the mock reports for a Responses body: the characters of
/// `instructions`, of a string `input`, and of the input items' texts (a message's
/// string content or its `input_text` and `output_text` parts, a
/// `function_call_output`'s output), divided by four, rounded up, at least 1.
pub fn prompt_tokens(body: &Value) -> u64 {
    let input = body.get("input");
    let mut texts = response_texts(body.get("instructions"));
    texts.extend(response_texts(input.filter(|i| i.is_string())));
    for item in array(input) {
        if item.get("type").and_then(Value::as_str) == Some("function_call_output") {
            texts.extend(response_texts(item.get("output")));
        } else if is_message(item) {
            texts.extend(response_texts(item.get("content")));
        }
    }
    tokens_of(texts.iter().map(|t| t.chars().count()).sum())
}

/// The `status` of an answer's response (and of its message), and its
/// `incomplete_details`.
fn status_of(stop: &Stop) -> (&'static str, Value) {
    match stop {
        Stop::MaxTokens => ("incomplete", json!({"reason": "max_output_tokens"})),
        Stop::End | Stop::Sequence(_) | Stop::ToolUse => ("completed", Value::Null),
    }
}

fn usage(answer: &Answer, prompt: u64) -> Value {
    let output = answer.output_tokens();
    json!({
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": answer.thinking_tokens()},
        "total_tokens": prompt + output
    })
}

fn response(
    model: &str,
    status: &str,
    output: Vec<Value>,
    usage: Value,
    incomplete: Value,
) -> Value {
    json!({
        "id": ID,
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "model": model,
        "output": output,
        "usage": usage,
        "incomplete_details": incomplete,
        "error": null,
        "parallel_tool_calls": true,
        "tool_choice": "auto",
        "tools": []
    })
}

fn reasoning_item(summary: Vec<Value>) -> Value {
    json!({"id": REASONING_ID, "type": "reasoning", "summary": summary})
}

fn summary_part(text: &str) -> Value {
    json!({"type": "summary_text", "text": text})
}

fn message_item(status: &str, content: Vec<Value>) -> Value {
    json!({"id": MESSAGE_ID, "type": "message", "status": status, "role": "assistant", "content": content})
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}

fn call_item(status: &str, name: &str, arguments: &str) -> Value {
    json!({"id": FUNCTION_CALL_ID, "type": "function_call", "status": status,
        "call_id": TOOL_CALL_ID, "name": name, "arguments": arguments})
}

/// A non-streaming response of `answer`: a reasoning item when it thinks, the message,
/// a function call when it calls a tool.
pub fn response_of(model: &str, answer: &Answer, prompt: u64) -> Value {
    let mut output = Vec::new();
    if answer.thinking {
        output.push(reasoning_item(vec![summary_part(THINKING)]));
    }
    output.push(message_item(
        status_of(&answer.stop).0,
        vec![text_part(&answer.text())],
    ));
    if let (Some(tool), Some(arguments)) = (&answer.tool, answer.arguments()) {
        output.push(call_item("completed", &tool.name, &arguments));
    }
    let (status, incomplete) = status_of(&answer.stop);
    response(model, status, output, usage(answer, prompt), incomplete)
}

/// Numbers a stream's events from 0 and hands them to a [`Builder`].
struct Events {
    builder: Builder,
    sequence: u64,
}

impl Events {
    /// `event: kind` and its data: `type`, `sequence_number`, then `fields`' members.
    fn next(&mut self, kind: &str, fields: Value) -> String {
        let mut data = Map::new();
        data.insert("type".to_owned(), json!(kind));
        data.insert("sequence_number".to_owned(), json!(self.sequence));
        if let Value::Object(fields) = fields {
            data.extend(fields);
        }
        self.sequence += 1;
        format!("event: {kind}\ndata: {}\n\n", Value::Object(data))
    }

    fn event(&mut self, kind: &str, fields: Value) {
        let e = self.next(kind, fields);
        self.builder.event(&e);
    }

    fn delta(&mut self, kind: &str, fields: Value) {
        let e = self.next(kind, fields);
        self.builder.delta(&e);
    }
}

/// `scope`'s members followed by `fields`' members.
fn with(scope: &Value, fields: Value) -> Value {
    let mut v = scope.clone();
    if let (Value::Object(v), Value::Object(fields)) = (&mut v, fields) {
        v.extend(fields);
    }
    v
}

/// The stream of `answer`: `response.created` and `response.in_progress` (the response
/// in progress, no output), then each output item between its `output_item.added` and
/// `output_item.done` (reasoning with a `reasoning_summary_text.delta` per piece inside
/// a summary part; the message with an `output_text.delta` per piece inside an
/// `output_text` part; the function call, added with empty `arguments`, with them in
/// three `function_call_arguments.delta` fragments), then `response.completed` (or
/// `response.incomplete`) with the whole response.
pub fn stream_of(model: &str, answer: &Answer, prompt: u64) -> StreamParts {
    let mut s = Events {
        builder: Builder::new(String::new()),
        sequence: 0,
    };
    let start = response(model, "in_progress", Vec::new(), Value::Null, Value::Null);
    s.event("response.created", json!({"response": start}));
    s.event("response.in_progress", json!({"response": start}));
    let mut index = 0;
    if answer.thinking {
        let at = json!({"item_id": REASONING_ID, "output_index": index, "summary_index": 0});
        s.event(
            "response.output_item.added",
            json!({"output_index": index, "item": reasoning_item(Vec::new())}),
        );
        s.event(
            "response.reasoning_summary_part.added",
            with(&at, json!({"part": summary_part("")})),
        );
        for p in pieces(THINKING) {
            s.delta(
                "response.reasoning_summary_text.delta",
                with(&at, json!({"delta": p})),
            );
        }
        s.event(
            "response.reasoning_summary_text.done",
            with(&at, json!({"text": THINKING})),
        );
        s.event(
            "response.reasoning_summary_part.done",
            with(&at, json!({"part": summary_part(THINKING)})),
        );
        s.event(
            "response.output_item.done",
            json!({"output_index": index, "item": reasoning_item(vec![summary_part(THINKING)])}),
        );
        index += 1;
    }
    let at = json!({"item_id": MESSAGE_ID, "output_index": index, "content_index": 0});
    let text = answer.text();
    s.event(
        "response.output_item.added",
        json!({"output_index": index, "item": message_item("in_progress", Vec::new())}),
    );
    s.event(
        "response.content_part.added",
        with(&at, json!({"part": text_part("")})),
    );
    for p in &answer.text {
        s.delta(
            "response.output_text.delta",
            with(&at, json!({"delta": p, "logprobs": []})),
        );
    }
    s.event(
        "response.output_text.done",
        with(&at, json!({"text": text, "logprobs": []})),
    );
    s.event(
        "response.content_part.done",
        with(&at, json!({"part": text_part(&text)})),
    );
    s.event(
        "response.output_item.done",
        json!({"output_index": index, "item": message_item(status_of(&answer.stop).0, vec![text_part(&text)])}),
    );
    if let (Some(tool), Some(arguments)) = (&answer.tool, answer.arguments()) {
        index += 1;
        let at = json!({"item_id": FUNCTION_CALL_ID, "output_index": index});
        s.event(
            "response.output_item.added",
            json!({"output_index": index, "item": call_item("in_progress", &tool.name, "")}),
        );
        for part in thirds(&arguments) {
            s.delta(
                "response.function_call_arguments.delta",
                with(&at, json!({"delta": part})),
            );
        }
        s.event(
            "response.function_call_arguments.done",
            with(&at, json!({"arguments": arguments})),
        );
        s.event(
            "response.output_item.done",
            json!({"output_index": index, "item": call_item("completed", &tool.name, &arguments)}),
        );
    }
    let body = response_of(model, answer, prompt);
    let (status, _) = status_of(&answer.stop);
    let end = s.next(&format!("response.{status}"), json!({"response": body}));
    s.builder.finish(&end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_tokens_count_instructions_input_texts_and_tool_outputs() {
        assert_eq!(
            prompt_tokens(&json!({"instructions": "abcd", "input": "efgh"})),
            2
        );
        let body = json!({"instructions": "abc", "input": [
            {"role": "user", "content": "abcd"},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "ab"}, {"type": "input_image", "image_url": "data:x"}
            ]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "abcdef"}]},
            {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "ignored"}]},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{\"ignored\":1}"},
            {"type": "function_call_output", "call_id": "c", "output": "abcde"},
            {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_text", "text": "ab"}]}
        ]});
        assert_eq!(prompt_tokens(&body), 6);
        assert_eq!(prompt_tokens(&json!({})), 1);
    }

    #[test]
    fn an_empty_text_keeps_its_message_and_every_event_is_numbered() {
        let parts = stream_of("m", &Answer::canned(0), 1);
        assert!(parts.frames.is_empty());
        assert!(parts.tail.starts_with("event: response.completed\n"));
        let s = parts.concat();
        let events: Vec<&str> = s
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(
            events,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed"
            ]
        );
        let numbers: Vec<u64> = s
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| {
                serde_json::from_str::<Value>(d).unwrap()["sequence_number"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(numbers, (0..8).collect::<Vec<u64>>());
    }
}
