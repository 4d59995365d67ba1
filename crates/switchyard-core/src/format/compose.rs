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
    built(request, turns, stream, &[])
}

/// `request` with `prompt` as a last user turn, not streamed, and its tools (if it
/// declares any) not to be called: a request for a text about the conversation.
pub fn text_request(request: &Request, prompt: &str) -> Result<Request, DecodeError> {
    let none = match request.format {
        Format::AnthropicMessages => r#"{"type":"none"}"#,
        Format::OpenAiChat | Format::Responses => r#""none""#,
    };
    let tool_choice = [("tool_choice", none.to_owned())];
    let extra: &[(&str, String)] = if has_tools(request) {
        &tool_choice
    } else {
        &[]
    };
    built(request, &[(Role::User, prompt)], false, extra)
}

/// `request` with `text` added to its system instructions: a chat system message
/// before the conversation, the Anthropic `system` and the Responses `instructions`
/// extended after a blank line (or set, when absent).
pub fn with_system(request: &Request, text: &str) -> Result<Request, DecodeError> {
    let invalid = |e: serde_json::Error| DecodeError::InvalidJson(e.to_string());
    let (member, value) = match request.format {
        Format::OpenAiChat => {
            let raw = request.body.member("messages").unwrap_or("[]");
            let mut items: Vec<Box<RawValue>> = serde_json::from_str(raw).map_err(invalid)?;
            let system = json!({"role": "system", "content": text});
            items.insert(
                0,
                RawValue::from_string(system.to_string()).map_err(invalid)?,
            );
            ("messages", serde_json::to_string(&items).map_err(invalid)?)
        }
        Format::AnthropicMessages => {
            let value = match request
                .body
                .member("system")
                .map(serde_json::from_str::<Value>)
            {
                Some(Ok(Value::Array(mut blocks))) => {
                    blocks.push(json!({"type": "text", "text": text}));
                    Value::Array(blocks)
                }
                Some(Ok(Value::String(s))) => Value::String(format!("{s}\n\n{text}")),
                _ => Value::String(text.to_owned()),
            };
            ("system", value.to_string())
        }
        Format::Responses => {
            let value = match request
                .body
                .member("instructions")
                .map(serde_json::from_str::<Value>)
            {
                Some(Ok(Value::String(s))) => format!("{s}\n\n{text}"),
                _ => text.to_owned(),
            };
            ("instructions", Value::String(value).to_string())
        }
    };
    let body = request.body.rewritten_adding(
        &request.model,
        &[(member, Some(value.clone()))],
        &[(member, value)],
    );
    request.format.decode(&body)
}

fn built(
    request: &Request,
    turns: &[(Role, &str)],
    stream: bool,
    extra: &[(&str, String)],
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
    overrides.extend(extra.iter().map(|(k, v)| (*k, Some(v.clone()))));
    let mut added = vec![(member, list), ("stream", stream_text)];
    added.extend(extra.iter().cloned());
    let body = request
        .body
        .rewritten_adding(&request.model, &overrides, &added);
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
    fn a_text_request_asks_for_text_and_keeps_tools_uncalled() {
        let tools = json!([{"type": "function", "function": {"name": "f"}}]);
        let r = decoded(
            Format::OpenAiChat,
            json!({"model": "c", "stream": true, "tools": tools, "tool_choice": "required",
                   "messages": [{"role": "user", "content": "hi"}]}),
        );
        let out = text_request(&r, "sum up").unwrap();
        assert_eq!(
            body(&out),
            json!({"model": "c", "stream": false, "tools": tools, "tool_choice": "none",
                   "messages": [{"role": "user", "content": "hi"},
                                {"role": "user", "content": "sum up"}]})
        );
        let a = decoded(
            Format::AnthropicMessages,
            json!({"model": "c", "max_tokens": 10, "tools": [{"name": "f", "input_schema": {}}],
                   "messages": [{"role": "user", "content": "hi"}]}),
        );
        assert_eq!(
            body(&text_request(&a, "sum up").unwrap())["tool_choice"],
            json!({"type": "none"})
        );
        // No tools: no tool_choice.
        let plain = decoded(Format::Responses, json!({"model": "c", "input": "hi"}));
        assert_eq!(
            body(&text_request(&plain, "sum up").unwrap()).get("tool_choice"),
            None
        );
    }

    #[test]
    fn the_system_instruction_is_extended_in_each_format() {
        let chat = decoded(
            Format::OpenAiChat,
            json!({"model": "c", "messages": [{"role": "system", "content": "be brief"},
                                             {"role": "user", "content": "hi"}]}),
        );
        assert_eq!(
            body(&with_system(&chat, "handed over").unwrap())["messages"],
            json!([{"role": "system", "content": "handed over"},
                   {"role": "system", "content": "be brief"},
                   {"role": "user", "content": "hi"}])
        );
        let msgs = |system: Option<Value>| {
            let mut b = json!({"model": "c", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
            if let Some(s) = system {
                b["system"] = s;
            }
            body(&with_system(&decoded(Format::AnthropicMessages, b), "handed over").unwrap())
                ["system"]
                .clone()
        };
        assert_eq!(msgs(None), json!("handed over"));
        assert_eq!(
            msgs(Some(json!("be brief"))),
            json!("be brief\n\nhanded over")
        );
        assert_eq!(
            msgs(Some(
                json!([{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}])
            )),
            json!([{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}},
                   {"type": "text", "text": "handed over"}])
        );
        let resp = |b: Value| {
            body(&with_system(&decoded(Format::Responses, b), "handed over").unwrap())
                ["instructions"]
                .clone()
        };
        assert_eq!(
            resp(json!({"model": "c", "input": "hi"})),
            json!("handed over")
        );
        assert_eq!(
            resp(json!({"model": "c", "input": "hi", "instructions": "be brief"})),
            json!("be brief\n\nhanded over")
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
