//! An Anthropic Messages client over an OpenAI chat completions upstream: the request
//! into a chat request, and the chat answer — JSON body, error body or chunk stream —
//! back into the Messages shapes.
//!
//! # Request
//!
//! - `system` (a string, or text blocks joined with `"\n\n"`) becomes the first message,
//!   `{"role":"system"}`; a `{"role":"system"}` message inside `messages` (Claude Code
//!   sends them) becomes a system message at its place. An empty system text is left out.
//! - A `user` or `assistant` message with string content keeps it. From blocks: `text`
//!   and `image` (a `base64` source as a `data:` URL, a `url` source as it is) become
//!   content parts; when only text parts remain, they are joined with `"\n\n"` into one
//!   string content, so a plain message stays a plain string. Assistant `tool_use` blocks
//!   become `tool_calls` (the `input` as compact JSON text in `arguments`), the
//!   message's text its `content` (`null` when it has none).
//! - Each `tool_result` of a user message becomes a `{"role":"tool"}` message, in block
//!   order and before the rest of that user message, which follows as a user message:
//!   chat wants a tool call's results right after the call. Its content is the result's
//!   text (text blocks joined with `"\n\n"`); a result with `is_error: true` is prefixed
//!   with `"Error: "`, as chat has no error flag. Images in a result go to the following
//!   user message, first, as a tool message holds text only.
//! - Dropped: `thinking` and `redacted_thinking` blocks (a chat upstream cannot take a
//!   signed thinking block back), every other block type (`document`,
//!   `server_tool_use`, …), and a block-content message left with nothing to say.
//! - `tools`: each custom tool becomes a `function` tool (`name`, `description`,
//!   `input_schema` as `parameters`); server tools (a `type` other than `custom`) and
//!   `defer_loading: true` tools are dropped. `tool_choice`: `auto` → `"auto"`, `any` →
//!   `"required"`, `none` → `"none"`, `tool` → the named function;
//!   `disable_parallel_tool_use: true` → `parallel_tool_calls: false`. With no tool left,
//!   neither is sent.
//! - `stop_sequences` → `stop`; `temperature`, `top_p` as they are; `metadata.user_id`
//!   → `user`; `thinking` `enabled` → `reasoning_effort` by `budget_tokens` (below 4096
//!   `low`, below 16384 `medium`, else `high`); adaptive or disabled thinking → nothing.
//! - Dropped members: `top_k`, `cache_control` (everywhere), `context_management`,
//!   `output_config`, `service_tier`, `container`, `mcp_servers` and any other.
//! - The output's members, in this order: `model`, `messages`, `max_tokens`, `stream`,
//!   `stream_options` (`include_usage`, so the stream ends with the usage),
//!   `stop`, `temperature`, `top_p`, `tools`, `tool_choice`, `parallel_tool_calls`,
//!   `reasoning_effort`, `user`. `null` members count as absent.
//!
//! # Answer
//!
//! The message id is the chat id, prefixed with `msg_` unless it has it. Content, in
//! order: `reasoning_content` as a `thinking` block with an empty `signature` (the
//! upstream signs nothing), the text, then each tool call as a `tool_use` block whose
//! `input` is the parsed `arguments` (empty arguments are `{}`; arguments that are not a
//! JSON object make the answer untranslatable). The stop reason and usage come from
//! [`super::map`]; chat does not say whether a stop sequence matched, so it is never
//! `stop_sequence`.
//!
//! # Stream
//!
//! [`Stream`] turns `chat.completion.chunk` events into Messages events: `message_start`
//! and `ping` at the first chunk with a choice, one content block per run of
//! `reasoning_content` (thinking), `content` (text) or tool call (`tool_use`, its
//! argument fragments as `input_json_delta` as they come, never buffered), each closed
//! when another begins or the choice finishes; `message_delta` (the stop reason, the
//! usage of the last chunk that carried one) and `message_stop` at `[DONE]`. An error
//! chunk becomes an `error` event and ends the translation. A tool call fragment for a
//! call whose start was not seen, or that is no longer open, is dropped.

use super::map::{stop_reason_of, Tokens};
use super::TranslateError;
use crate::format::anthropic_messages::push_event;
use crate::llm::RawObject;
use crate::sse::{SseEvent, SseParser};
use serde_json::{json, Map, Value};

/// What joins text blocks that become one string.
const JOIN: &str = "\n\n";

/// What starts the content of a tool message made from a failed tool's result.
const ERROR_PREFIX: &str = "Error: ";

/// Longest upstream error message relayed, in bytes.
const MAX_ERROR_MESSAGE: usize = 1024;

/// The chat request for an Anthropic Messages `body`; see the module docs.
pub fn request(
    body: &RawObject,
    model: &str,
    max_tokens: Option<u64>,
    stream: bool,
) -> Result<Vec<u8>, TranslateError> {
    let mut messages = Vec::new();
    if let Some(system) = member(body, "system")? {
        push_system(Some(&system), "system", &mut messages)?;
    }
    let Some(Value::Array(items)) = member(body, "messages")? else {
        return Err(invalid("messages", "must be an array"));
    };
    for (i, item) in items.iter().enumerate() {
        push_message(item, &format!("messages[{i}]"), &mut messages)?;
    }
    let mut out = Map::new();
    out.insert("model".into(), model.into());
    out.insert("messages".into(), Value::Array(messages));
    if let Some(n) = max_tokens {
        out.insert("max_tokens".into(), n.into());
    }
    if stream {
        out.insert("stream".into(), true.into());
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(stop) = stop_sequences(body)? {
        out.insert("stop".into(), stop);
    }
    for name in ["temperature", "top_p"] {
        if let Some(v) = member(body, name)? {
            if !v.is_number() {
                return Err(invalid(name, "must be a number"));
            }
            out.insert(name.into(), v);
        }
    }
    let tools = tools(body)?;
    if !tools.is_empty() {
        let choice = member(body, "tool_choice")?
            .map(|c| tool_choice(&c, &tools))
            .transpose()?;
        out.insert("tools".into(), Value::Array(tools));
        if let Some((choice, parallel)) = choice {
            out.insert("tool_choice".into(), choice);
            if !parallel {
                out.insert("parallel_tool_calls".into(), false.into());
            }
        }
    }
    if let Some(effort) = reasoning_effort(body)? {
        out.insert("reasoning_effort".into(), effort.into());
    }
    if let Some(user) = user(body)? {
        out.insert("user".into(), user.into());
    }
    Ok(Value::Object(out).to_string().into_bytes())
}

fn invalid(path: &str, what: &str) -> TranslateError {
    TranslateError::Request(format!("`{path}` {what}"))
}

/// Top-level member `name`, parsed; `None` when absent or `null`.
fn member(body: &RawObject, name: &str) -> Result<Option<Value>, TranslateError> {
    let Some(raw) = body.member(name) else {
        return Ok(None);
    };
    match serde_json::from_str(raw) {
        Ok(Value::Null) => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(e) => Err(invalid(name, &format!("cannot be read: {e}"))),
    }
}

/// Member `key` of `v`; `None` when absent or `null`.
fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|m| !m.is_null())
}

/// The string member `key` of the object at `path`.
fn string<'a>(v: &'a Value, key: &str, path: &str) -> Result<&'a str, TranslateError> {
    get(v, key)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(&format!("{path}.{key}"), "must be a string"))
}

/// The optional string member `key` of the object at `path`.
fn optional_string<'a>(
    v: &'a Value,
    key: &str,
    path: &str,
) -> Result<Option<&'a str>, TranslateError> {
    get(v, key)
        .map(|m| {
            m.as_str()
                .ok_or_else(|| invalid(&format!("{path}.{key}"), "must be a string"))
        })
        .transpose()
}

/// A message's or a tool result's content.
enum Content<'a> {
    Text(&'a str),
    Blocks(&'a [Value]),
}

fn content<'a>(v: Option<&'a Value>, path: &str) -> Result<Content<'a>, TranslateError> {
    match v {
        Some(Value::String(s)) => Ok(Content::Text(s)),
        Some(Value::Array(blocks)) => Ok(Content::Blocks(blocks)),
        _ => Err(invalid(
            path,
            "must be a string or an array of content blocks",
        )),
    }
}

/// The `type` of the content block at `path`.
fn block_type<'a>(block: &'a Value, path: &str) -> Result<&'a str, TranslateError> {
    string(block, "type", path)
}

/// The text of string content or of its text blocks, joined; other blocks dropped.
fn text_of<'a>(content: &Content<'a>, path: &str) -> Result<String, TranslateError> {
    match content {
        Content::Text(s) => Ok((*s).to_owned()),
        Content::Blocks(blocks) => {
            let mut texts = Vec::new();
            for (j, block) in blocks.iter().enumerate() {
                let path = format!("{path}[{j}]");
                if block_type(block, &path)? == "text" {
                    texts.push(string(block, "text", &path)?);
                }
            }
            Ok(texts.join(JOIN))
        }
    }
}

/// A system message from `system` (a string or text blocks), unless its text is empty.
fn push_system(
    system: Option<&Value>,
    path: &str,
    out: &mut Vec<Value>,
) -> Result<(), TranslateError> {
    let text = text_of(&content(system, path)?, path)?;
    if !text.is_empty() {
        out.push(json!({"role": "system", "content": text}));
    }
    Ok(())
}

fn push_message(item: &Value, path: &str, out: &mut Vec<Value>) -> Result<(), TranslateError> {
    let role = string(item, "role", path)?;
    let content_path = format!("{path}.content");
    match role {
        "system" => push_system(get(item, "content"), &content_path, out),
        "user" => push_user(
            &content(get(item, "content"), &content_path)?,
            &content_path,
            out,
        ),
        "assistant" => push_assistant(
            &content(get(item, "content"), &content_path)?,
            &content_path,
            out,
        ),
        _ => Err(invalid(
            &format!("{path}.role"),
            "must be \"user\", \"assistant\" or \"system\"",
        )),
    }
}

/// A content part of a chat user message.
enum Part<'a> {
    Text(&'a str),
    Image(String),
}

impl Part<'_> {
    fn json(&self) -> Value {
        match self {
            Part::Text(text) => json!({"type": "text", "text": text}),
            Part::Image(url) => json!({"type": "image_url", "image_url": {"url": url}}),
        }
    }
}

/// Chat content from parts: one string when all are text, else the parts.
fn parts_content(parts: &[Part<'_>]) -> Value {
    let texts: Option<Vec<&str>> = parts
        .iter()
        .map(|p| match p {
            Part::Text(t) => Some(*t),
            Part::Image(_) => None,
        })
        .collect();
    match texts {
        Some(texts) => texts.join(JOIN).into(),
        None => parts.iter().map(Part::json).collect(),
    }
}

/// The chat image URL of the image block at `path`.
fn image_url(block: &Value, path: &str) -> Result<String, TranslateError> {
    let source_path = format!("{path}.source");
    let Some(source) = get(block, "source") else {
        return Err(invalid(&source_path, "must be an object"));
    };
    match string(source, "type", &source_path)? {
        "base64" => Ok(format!(
            "data:{};base64,{}",
            string(source, "media_type", &source_path)?,
            string(source, "data", &source_path)?
        )),
        "url" => Ok(string(source, "url", &source_path)?.to_owned()),
        _ => Err(invalid(
            &format!("{source_path}.type"),
            "has no chat counterpart: only base64 and url images can be sent",
        )),
    }
}

fn push_user(
    content: &Content<'_>,
    path: &str,
    out: &mut Vec<Value>,
) -> Result<(), TranslateError> {
    let blocks = match content {
        Content::Text(text) => {
            out.push(json!({"role": "user", "content": text}));
            return Ok(());
        }
        Content::Blocks(blocks) => blocks,
    };
    let mut result_images = Vec::new();
    let mut parts = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let path = format!("{path}[{j}]");
        match block_type(block, &path)? {
            "text" => parts.push(Part::Text(string(block, "text", &path)?)),
            "image" => parts.push(Part::Image(image_url(block, &path)?)),
            "tool_result" => out.push(tool_result(block, &path, &mut result_images)?),
            _ => {}
        }
    }
    result_images.append(&mut parts);
    if !result_images.is_empty() {
        out.push(json!({"role": "user", "content": parts_content(&result_images)}));
    }
    Ok(())
}

/// The tool message of the `tool_result` block at `path`; its images go to `images`.
fn tool_result<'a>(
    block: &'a Value,
    path: &str,
    images: &mut Vec<Part<'a>>,
) -> Result<Value, TranslateError> {
    let id = string(block, "tool_use_id", path)?;
    let content_path = format!("{path}.content");
    let text = match get(block, "content") {
        None => String::new(),
        Some(c) => match content(Some(c), &content_path)? {
            Content::Text(text) => text.to_owned(),
            Content::Blocks(blocks) => {
                let mut texts = Vec::new();
                for (k, b) in blocks.iter().enumerate() {
                    let path = format!("{content_path}[{k}]");
                    match block_type(b, &path)? {
                        "text" => texts.push(string(b, "text", &path)?),
                        "image" => images.push(Part::Image(image_url(b, &path)?)),
                        _ => {}
                    }
                }
                texts.join(JOIN)
            }
        },
    };
    let failed = get(block, "is_error").and_then(Value::as_bool) == Some(true);
    let text = if failed {
        format!("{ERROR_PREFIX}{text}")
    } else {
        text
    };
    Ok(json!({"role": "tool", "tool_call_id": id, "content": text}))
}

fn push_assistant(
    content: &Content<'_>,
    path: &str,
    out: &mut Vec<Value>,
) -> Result<(), TranslateError> {
    let blocks = match content {
        Content::Text(text) => {
            out.push(json!({"role": "assistant", "content": text}));
            return Ok(());
        }
        Content::Blocks(blocks) => blocks,
    };
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let path = format!("{path}[{j}]");
        match block_type(block, &path)? {
            "text" => texts.push(string(block, "text", &path)?),
            "tool_use" => {
                let arguments =
                    get(block, "input").map_or_else(|| "{}".to_owned(), Value::to_string);
                calls.push(json!({
                    "id": string(block, "id", &path)?,
                    "type": "function",
                    "function": {"name": string(block, "name", &path)?, "arguments": arguments},
                }));
            }
            _ => {}
        }
    }
    if texts.is_empty() && calls.is_empty() {
        return Ok(());
    }
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    let text = (!texts.is_empty()).then(|| texts.join(JOIN));
    message.insert("content".into(), text.into());
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    out.push(Value::Object(message));
    Ok(())
}

/// The function tools for the client's custom tools.
fn tools(body: &RawObject) -> Result<Vec<Value>, TranslateError> {
    let Some(tools) = member(body, "tools")? else {
        return Ok(Vec::new());
    };
    let Value::Array(tools) = tools else {
        return Err(invalid("tools", "must be an array"));
    };
    let mut out = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let path = format!("tools[{i}]");
        let custom = optional_string(tool, "type", &path)?.is_none_or(|t| t == "custom");
        let deferred = get(tool, "defer_loading").and_then(Value::as_bool) == Some(true);
        if !custom || deferred {
            continue;
        }
        let mut function = Map::new();
        function.insert("name".into(), string(tool, "name", &path)?.into());
        if let Some(description) = optional_string(tool, "description", &path)? {
            function.insert("description".into(), description.into());
        }
        if let Some(schema) = get(tool, "input_schema") {
            function.insert("parameters".into(), schema.clone());
        }
        out.push(json!({"type": "function", "function": function}));
    }
    Ok(out)
}

/// The chat `tool_choice`, and whether parallel tool calls stay allowed.
fn tool_choice(choice: &Value, tools: &[Value]) -> Result<(Value, bool), TranslateError> {
    let value = match string(choice, "type", "tool_choice")? {
        "auto" => json!("auto"),
        "any" => json!("required"),
        "none" => json!("none"),
        "tool" => {
            let name = string(choice, "name", "tool_choice")?;
            let sent = tools
                .iter()
                .any(|t| t.pointer("/function/name").and_then(Value::as_str) == Some(name));
            if !sent {
                return Err(invalid(
                    "tool_choice.name",
                    "must name a custom tool in `tools` (server and deferred tools are not sent)",
                ));
            }
            json!({"type": "function", "function": {"name": name}})
        }
        _ => {
            return Err(invalid(
                "tool_choice.type",
                "must be \"auto\", \"any\", \"tool\" or \"none\"",
            ))
        }
    };
    let serial = get(choice, "disable_parallel_tool_use").and_then(Value::as_bool) == Some(true);
    Ok((value, !serial))
}

fn stop_sequences(body: &RawObject) -> Result<Option<Value>, TranslateError> {
    let Some(stop) = member(body, "stop_sequences")? else {
        return Ok(None);
    };
    match stop.as_array() {
        Some(items) if items.iter().all(Value::is_string) => {
            Ok((!items.is_empty()).then_some(stop))
        }
        _ => Err(invalid("stop_sequences", "must be an array of strings")),
    }
}

fn reasoning_effort(body: &RawObject) -> Result<Option<&'static str>, TranslateError> {
    let Some(thinking) = member(body, "thinking")? else {
        return Ok(None);
    };
    if string(&thinking, "type", "thinking")? != "enabled" {
        return Ok(None);
    }
    let budget = get(&thinking, "budget_tokens")
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid("thinking.budget_tokens", "must be a non-negative integer"))?;
    Ok(Some(match budget {
        0..4096 => "low",
        4096..16384 => "medium",
        _ => "high",
    }))
}

fn user(body: &RawObject) -> Result<Option<String>, TranslateError> {
    let Some(metadata) = member(body, "metadata")? else {
        return Ok(None);
    };
    Ok(optional_string(&metadata, "user_id", "metadata")?.map(str::to_owned))
}

/// The Anthropic message id for chat id `id`.
fn message_id(id: &str) -> String {
    if id.starts_with("msg_") {
        id.to_owned()
    } else {
        format!("msg_{id}")
    }
}

fn untranslatable(what: &str) -> TranslateError {
    TranslateError::Response(what.to_owned())
}

/// The Anthropic message for a `chat.completion` body; see the module docs.
pub fn response(body: &[u8]) -> Result<Vec<u8>, TranslateError> {
    let answer: Value = serde_json::from_slice(body)
        .map_err(|e| TranslateError::Response(format!("not JSON: {e}")))?;
    let choice = answer
        .pointer("/choices/0")
        .ok_or_else(|| untranslatable("no `choices[0]`"))?;
    let message = get(choice, "message")
        .filter(|m| m.is_object())
        .ok_or_else(|| untranslatable("`choices[0].message` is not an object"))?;
    let mut content = Vec::new();
    if let Some(thinking) = text_member(message, "reasoning_content") {
        content.push(json!({"type": "thinking", "thinking": thinking, "signature": ""}));
    }
    if let Some(text) = text_member(message, "content") {
        content.push(json!({"type": "text", "text": text}));
    }
    if let Some(calls) = get(message, "tool_calls") {
        let calls = calls
            .as_array()
            .ok_or_else(|| untranslatable("`tool_calls` is not an array"))?;
        for call in calls {
            content.push(tool_use(call)?);
        }
    }
    let finish = get(choice, "finish_reason")
        .and_then(Value::as_str)
        .unwrap_or("stop");
    let usage = Tokens::from_chat(get(&answer, "usage").unwrap_or(&Value::Null));
    let id = get(&answer, "id").and_then(Value::as_str).unwrap_or("");
    let model = get(&answer, "model").and_then(Value::as_str).unwrap_or("");
    let message = json!({
        "id": message_id(id),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason_of(finish, false),
        "stop_sequence": null,
        "usage": usage.anthropic(),
    });
    Ok(message.to_string().into_bytes())
}

/// The non-empty string member `key` of `v`.
fn text_member<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The `tool_use` block of a chat tool call.
fn tool_use(call: &Value) -> Result<Value, TranslateError> {
    let id = call.get("id").and_then(Value::as_str);
    let name = call.pointer("/function/name").and_then(Value::as_str);
    let (Some(id), Some(name)) = (id, name) else {
        return Err(untranslatable(
            "a tool call without `id` or `function.name`",
        ));
    };
    let arguments = call
        .pointer("/function/arguments")
        .and_then(Value::as_str)
        .unwrap_or("");
    let input = if arguments.trim().is_empty() {
        json!({})
    } else {
        match serde_json::from_str::<Value>(arguments) {
            Ok(input @ Value::Object(_)) => input,
            _ => {
                return Err(TranslateError::Response(format!(
                    "the arguments of tool call `{name}` are not a JSON object"
                )))
            }
        }
    };
    Ok(json!({"type": "tool_use", "id": id, "name": name, "input": input}))
}

/// The Anthropic error type for an HTTP status.
fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        500.. => "api_error",
        _ => "invalid_request_error",
    }
}

/// The message of an error object: `error.message`, `error` as a string, or `message`.
fn message_of(v: &Value) -> Option<&str> {
    match get(v, "error") {
        Some(Value::String(s)) => Some(s),
        Some(e) => e.get("message").and_then(Value::as_str),
        None => v.get("message").and_then(Value::as_str),
    }
}

/// `s` cut to at most [`MAX_ERROR_MESSAGE`] bytes, at a character boundary.
fn bounded(s: &str) -> &str {
    let mut end = s.len().min(MAX_ERROR_MESSAGE);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The Anthropic error body for an upstream error answer with `status` and `body`.
pub fn error(status: u16, body: &[u8]) -> Vec<u8> {
    let parsed = serde_json::from_slice::<Value>(body).ok();
    let text = String::from_utf8_lossy(body);
    let message = parsed.as_ref().and_then(message_of).unwrap_or(&text).trim();
    let message = if message.is_empty() {
        format!("the upstream answered HTTP {status}")
    } else {
        bounded(message).to_owned()
    };
    json!({"type": "error", "error": {"type": error_type(status), "message": message}})
        .to_string()
        .into_bytes()
}

/// Translates a `chat.completion.chunk` stream into Messages events; see the module docs.
#[derive(Debug, Default)]
pub struct Stream {
    parser: SseParser,
    state: State,
}

impl Stream {
    /// Reads an upstream chunk (any boundaries); appends the events it completes.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        let mut frames = String::new();
        let state = &mut self.state;
        self.parser
            .feed(chunk, |event| state.on_event(&event, &mut frames));
        out.extend_from_slice(frames.as_bytes());
    }

    /// The upstream stream ended: closes the message when the choice finished but
    /// `[DONE]` did not come; appends nothing when it did not finish (a cut answer).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if !self.state.ended && self.state.stop_reason.is_some() {
            let mut frames = String::new();
            self.state.end(&mut frames);
            out.extend_from_slice(frames.as_bytes());
        }
    }
}

/// A content block being streamed.
#[derive(Debug, PartialEq, Eq)]
enum Block {
    Thinking,
    Text,
    /// The chat tool call `index` with `id`.
    Tool {
        index: u64,
        id: String,
    },
}

#[derive(Debug, Default)]
struct State {
    /// `message_start` is out.
    started: bool,
    /// The open block and its index.
    open: Option<(u64, Block)>,
    /// The index of the next block.
    next: u64,
    /// From the choice's `finish_reason`, once seen.
    stop_reason: Option<&'static str>,
    tokens: Tokens,
    /// `message_stop` or an `error` event is out: the rest of the input is ignored.
    ended: bool,
}

impl State {
    fn on_event(&mut self, event: &SseEvent, out: &mut String) {
        if self.ended {
            return;
        }
        if event.is_done() {
            self.start("", "", out);
            self.end(out);
            return;
        }
        let Ok(chunk) = serde_json::from_str::<Value>(&event.data) else {
            return;
        };
        if let Some(error) = get(&chunk, "error") {
            let text = error.to_string();
            let message = bounded(message_of(&chunk).unwrap_or(&text));
            push_event(
                out,
                "error",
                &json!({"type": "error", "error": {"type": "api_error", "message": message}}),
            );
            self.ended = true;
            return;
        }
        if let Some(usage) = get(&chunk, "usage") {
            self.tokens = Tokens::from_chat(usage);
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            return;
        };
        let id = chunk.get("id").and_then(Value::as_str).unwrap_or("");
        let model = chunk.get("model").and_then(Value::as_str).unwrap_or("");
        self.start(id, model, out);
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(thinking) = text_member(delta, "reasoning_content") {
            self.text(true, thinking, out);
        }
        if let Some(text) = text_member(delta, "content") {
            self.text(false, text, out);
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for (position, call) in calls.iter().enumerate() {
                self.tool_call(call, position, out);
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.close(out);
            self.stop_reason = Some(stop_reason_of(reason, false));
        }
    }

    /// `message_start` and `ping`, once.
    fn start(&mut self, id: &str, model: &str, out: &mut String) {
        if self.started {
            return;
        }
        self.started = true;
        let message = json!({
            "id": message_id(id),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": Tokens::default().anthropic(),
        });
        push_event(
            out,
            "message_start",
            &json!({"type": "message_start", "message": message}),
        );
        push_event(out, "ping", &json!({"type": "ping"}));
    }

    /// Closes the open block, then `message_delta` and `message_stop`.
    fn end(&mut self, out: &mut String) {
        self.close(out);
        let stop_reason = self.stop_reason.unwrap_or("end_turn");
        push_event(
            out,
            "message_delta",
            &json!({"type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                    "usage": self.tokens.anthropic()}),
        );
        push_event(out, "message_stop", &json!({"type": "message_stop"}));
        self.ended = true;
    }

    fn close(&mut self, out: &mut String) {
        if let Some((index, _)) = self.open.take() {
            push_event(
                out,
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            );
        }
    }

    /// Closes the open block and starts `block`, described by `content_block`.
    fn open(&mut self, block: Block, content_block: Value, out: &mut String) {
        self.close(out);
        let index = self.next;
        self.next = index.saturating_add(1);
        self.open = Some((index, block));
        push_event(
            out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": content_block}),
        );
    }

    /// A delta of the open block.
    fn delta(&self, delta: Value, out: &mut String) {
        if let Some((index, _)) = &self.open {
            push_event(
                out,
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            );
        }
    }

    /// Thinking (`thinking`) or answer text, in the block of its kind.
    fn text(&mut self, thinking: bool, text: &str, out: &mut String) {
        let block = if thinking {
            Block::Thinking
        } else {
            Block::Text
        };
        if self.open.as_ref().map(|(_, b)| b) != Some(&block) {
            let content_block = if thinking {
                json!({"type": "thinking", "thinking": "", "signature": ""})
            } else {
                json!({"type": "text", "text": ""})
            };
            self.open(block, content_block, out);
        }
        let delta = if thinking {
            json!({"type": "thinking_delta", "thinking": text})
        } else {
            json!({"type": "text_delta", "text": text})
        };
        self.delta(delta, out);
    }

    /// A tool call fragment, the `position`th of its chunk: a new call (it has an `id`
    /// and a name) starts a `tool_use` block; arguments go out as they come.
    fn tool_call(&mut self, call: &Value, position: usize, out: &mut String) {
        let index = call
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(position as u64);
        let id = text_member(call, "id");
        let continues = matches!(&self.open, Some((_, Block::Tool { index: i, id: open }))
            if *i == index && id.is_none_or(|id| id == open));
        if !continues {
            let name = call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty());
            let (Some(id), Some(name)) = (id, name) else {
                return;
            };
            let content_block = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
            let block = Block::Tool {
                index,
                id: id.to_owned(),
            };
            self.open(block, content_block, out);
        }
        let arguments = call
            .pointer("/function/arguments")
            .and_then(Value::as_str)
            .filter(|a| !a.is_empty());
        if let Some(partial) = arguments {
            self.delta(
                json!({"type": "input_json_delta", "partial_json": partial}),
                out,
            );
        }
    }
}
