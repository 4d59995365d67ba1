//! Requests made from the client's, for the dispatch shapes that chain or combine
//! answers ([`crate::routing::shape`]): the client's conversation with turns appended,
//! and the text of an answer in the client's format. Pure functions on JSON text.

use super::{DecodeError, Format};
use crate::llm::Request;
use serde_json::value::RawValue;
use serde_json::{json, Value};

/// Who speaks an appended turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
        }
    }
}

/// The member that holds the conversation in `format`.
fn conversation(format: Format) -> &'static str {
    match format {
        Format::Responses => "input",
        Format::OpenAiChat | Format::AnthropicMessages => "messages",
    }
}

/// `request` with `turns` (plain text each) after its conversation, streamed or not as
/// `stream` says; everything else as the client sent it. A Responses `input` given as a
/// string becomes its one user message first.
pub fn extended(
    request: &Request,
    turns: &[(Role, &str)],
    stream: bool,
) -> Result<Request, DecodeError> {
    let member = conversation(request.format);
    let raw = request.body.member(member).unwrap_or("[]");
    let mut items: Vec<Box<RawValue>> = match serde_json::from_str::<String>(raw) {
        Ok(text) => vec![message(Role::User, &text)],
        Err(_) => serde_json::from_str(raw).map_err(|e| DecodeError::InvalidJson(e.to_string()))?,
    };
    items.extend(turns.iter().map(|(role, text)| message(*role, text)));
    let list =
        serde_json::to_string(&items).map_err(|e| DecodeError::InvalidJson(e.to_string()))?;
    let stream_text = stream.to_string();
    let mut overrides = vec![
        (member, Some(list.clone())),
        ("stream", Some(stream_text.clone())),
    ];
    if !stream {
        overrides.push(("stream_options", None));
    }
    let body = request.body.rewritten_adding(
        &request.model,
        &overrides,
        &[(member, list), ("stream", stream_text)],
    );
    request.format.decode(&body)
}

fn message(role: Role, text: &str) -> Box<RawValue> {
    let value = json!({"role": role.as_str(), "content": text});
    // A `Value` always serializes to valid JSON.
    RawValue::from_string(value.to_string())
        .unwrap_or_else(|_| RawValue::from_string("null".to_owned()).unwrap_or_default())
}

/// Whether the request declares tools: a non-empty `tools` list.
pub fn has_tools(request: &Request) -> bool {
    request
        .body
        .member("tools")
        .and_then(|raw| serde_json::from_str::<Vec<&RawValue>>(raw).ok())
        .is_some_and(|tools| !tools.is_empty())
}

/// The text of a whole (not streamed) answer of `format`: a chat completion's first
/// choice's content, a message's text blocks, a response's output text; `None` when
/// the body holds none.
pub fn answer_text(format: Format, body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let text = match format {
        Format::OpenAiChat => v["choices"][0]["message"]["content"].as_str()?.to_owned(),
        Format::AnthropicMessages => texts(&v["content"], "text", "text"),
        Format::Responses => v["output"]
            .as_array()?
            .iter()
            .filter(|item| item["type"] == "message")
            .map(|item| texts(&item["content"], "output_text", "text"))
            .collect(),
    };
    (!text.is_empty()).then_some(text)
}

/// The `field` of every block of `kind` in the list `blocks`, joined.
fn texts(blocks: &Value, kind: &str, field: &str) -> String {
    blocks
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == kind)
        .filter_map(|b| b[field].as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(format: Format, body: Value) -> Request {
        format.decode(body.to_string().as_bytes()).unwrap()
    }

    fn body(r: &Request) -> Value {
        serde_json::from_slice(&r.body.with_model(&r.model)).unwrap()
    }

    const TURNS: [(Role, &str); 2] = [(Role::Assistant, "four"), (Role::User, "check it")];

    #[test]
    fn a_chat_conversation_gets_the_turns_and_loses_its_stream_options() {
        let r = decoded(
            Format::OpenAiChat,
            json!({"model": "c", "stream": true, "stream_options": {"include_usage": true},
                   "temperature": 0.5,
                   "messages": [{"role": "system", "content": "be brief"},
                                {"role": "user", "content": "2+2?"}]}),
        );
        let out = extended(&r, &TURNS, false).unwrap();
        assert!(!out.stream);
        assert_eq!(
            body(&out),
            json!({"model": "c", "stream": false, "temperature": 0.5,
                   "messages": [{"role": "system", "content": "be brief"},
                                {"role": "user", "content": "2+2?"},
                                {"role": "assistant", "content": "four"},
                                {"role": "user", "content": "check it"}]})
        );
        // Streamed, the options stay; a body without `stream` gets it.
        let streamed = extended(&r, &TURNS, true).unwrap();
        assert!(streamed.stream);
        assert_eq!(
            body(&streamed)["stream_options"],
            json!({"include_usage": true})
        );
        let plain = decoded(
            Format::OpenAiChat,
            json!({"model": "c", "messages": [{"role": "user", "content": "hi"}]}),
        );
        assert_eq!(
            body(&extended(&plain, &[], true).unwrap())["stream"],
            json!(true)
        );
    }

    #[test]
    fn an_anthropic_conversation_keeps_its_system_and_blocks() {
        let r = decoded(
            Format::AnthropicMessages,
            json!({"model": "c", "max_tokens": 100, "system": "be brief",
                   "messages": [{"role": "user", "content": [{"type": "text", "text": "2+2?"}]}]}),
        );
        let out = extended(&r, &TURNS, false).unwrap();
        assert_eq!(out.max_tokens, Some(100));
        assert_eq!(
            body(&out),
            json!({"model": "c", "max_tokens": 100, "system": "be brief", "stream": false,
                   "messages": [{"role": "user", "content": [{"type": "text", "text": "2+2?"}]},
                                {"role": "assistant", "content": "four"},
                                {"role": "user", "content": "check it"}]})
        );
    }

    #[test]
    fn a_responses_input_string_becomes_its_first_message() {
        let r = decoded(
            Format::Responses,
            json!({"model": "c", "instructions": "be brief", "input": "2+2?", "stream": true}),
        );
        let out = extended(&r, &TURNS, false).unwrap();
        assert_eq!(
            body(&out),
            json!({"model": "c", "instructions": "be brief", "stream": false,
                   "input": [{"role": "user", "content": "2+2?"},
                             {"role": "assistant", "content": "four"},
                             {"role": "user", "content": "check it"}]})
        );
        // Texts with quotes and newlines stay whole.
        let tricky = extended(
            &r,
            &[(Role::Assistant, "say \"hi\"\nthen </answer>")],
            false,
        )
        .unwrap();
        assert_eq!(
            body(&tricky)["input"][1]["content"],
            "say \"hi\"\nthen </answer>"
        );
    }

    #[test]
    fn tools_are_seen_only_when_some_are_declared() {
        let with = |tools: Value| {
            has_tools(&decoded(
                Format::OpenAiChat,
                json!({"model": "c", "tools": tools, "messages": [{"role": "user", "content": "x"}]}),
            ))
        };
        assert!(with(
            json!([{"type": "function", "function": {"name": "f"}}])
        ));
        assert!(!with(json!([])));
        assert!(!with(json!(null)));
        assert!(!has_tools(&decoded(
            Format::OpenAiChat,
            json!({"model": "c", "messages": [{"role": "user", "content": "x"}]})
        )));
    }

    #[test]
    fn the_answer_text_is_read_in_each_format() {
        let chat = json!({"choices": [{"message": {"role": "assistant", "content": "four"}}]});
        assert_eq!(
            answer_text(Format::OpenAiChat, chat.to_string().as_bytes()).as_deref(),
            Some("four")
        );
        let msg = json!({"content": [{"type": "thinking", "thinking": "hm"},
                                     {"type": "text", "text": "fo"}, {"type": "text", "text": "ur"}]});
        assert_eq!(
            answer_text(Format::AnthropicMessages, msg.to_string().as_bytes()).as_deref(),
            Some("four")
        );
        let resp = json!({"output": [{"type": "reasoning", "summary": []},
                                     {"type": "message", "content": [{"type": "output_text", "text": "four"}]}]});
        assert_eq!(
            answer_text(Format::Responses, resp.to_string().as_bytes()).as_deref(),
            Some("four")
        );
        // No text: a tool call, an empty content, not JSON.
        let call = json!({"choices": [{"message": {"content": null, "tool_calls": []}}]});
        assert_eq!(
            answer_text(Format::OpenAiChat, call.to_string().as_bytes()),
            None
        );
        assert_eq!(
            answer_text(Format::AnthropicMessages, b"{\"content\": []}"),
            None
        );
        assert_eq!(answer_text(Format::Responses, b"not json"), None);
    }
}
