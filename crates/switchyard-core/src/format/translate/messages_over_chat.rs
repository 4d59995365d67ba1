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
//!   message's text its `content` (`null` when it has none). An image of another
//!   source (a `file` id) cannot be sent: the request is refused.
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
//!   neither is sent; a `tool` choice naming a tool that is not sent is refused.
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
//! order: `reasoning_content` as a `thinking` block signed
//! [`UNSIGNED`] (the upstream signs nothing; the sentinel
//! lets the gateway take the block out should the client send it to an Anthropic
//! upstream later), the text, then each tool call as a `tool_use` block whose `input`
//! is the parsed `arguments`. Arguments never make the answer untranslatable (a model
//! cut by `length` mid call, or one writing bad JSON, must not lose the whole answer,
//! which streamed would pass as it is): empty arguments are `{}`, a JSON object is
//! itself, anything else (invalid JSON, JSON that is no object) is
//! `{"_raw_arguments": "<the arguments text>"}`, so nothing is lost and the client's
//! tool validation reports it to the model. The stop reason and usage come from
//! [`super::map`]; chat does not say whether a stop sequence matched, so it is never
//! `stop_sequence`.
//!
//! # Error body
//!
//! `{"type":"error","error":{"type","message"}}`: the type of the kind the upstream's
//! error `code` or `type` names ([`ErrorKind::of_error`]: `invalid_api_key` is
//! `authentication_error`, `rate_limit_exceeded` `rate_limit_error`, `overloaded`
//! `overloaded_error`, …), else of the status (400 `invalid_request_error`, 401
//! `authentication_error`, 403 `permission_error`, 404 `not_found_error`, 413
//! `request_too_large`, 429 `rate_limit_error`, 503 and 529 `overloaded_error`, other
//! 5xx `api_error`, other 4xx `invalid_request_error`); the
//! message is the upstream's (`error.message`, an `error` string or a top-level
//! `message`), else the body's text, trimmed and cut to 1 KiB.
//!
//! # Stream
//!
//! [`Stream`] turns `chat.completion.chunk` events into Messages events: `message_start`
//! and `ping` at the first chunk with a choice, one content block per run of
//! `reasoning_content` (thinking), `content` (text) or tool call (`tool_use`, its
//! argument fragments as `input_json_delta` as they come, never buffered), each closed
//! when another begins or the choice finishes, a thinking block after a
//! `signature_delta` giving it [`UNSIGNED`]; `message_delta`
//! (the stop reason, the usage of the last chunk that carried one) and `message_stop`
//! at `[DONE]`. An error chunk becomes an `error` event (the type of the kind its `code`
//! or `type` names, else `api_error`; the upstream's message) and ends the translation; so does an upstream event larger than
//! [`MAX_EVENT_BYTES`](crate::sse::MAX_EVENT_BYTES), which the parser skips (its content
//! would be lost from a message that looks whole), with the message "an upstream event
//! was larger than 1 MiB and could not be translated". [`Stream::ended_by_error`] says
//! whether either happened. A tool call fragment for a call whose start was not seen,
//! or that is no longer open, is dropped. `[DONE]` with no chunk before it still makes
//! a whole, empty message. An upstream that finishes the choice but closes without
//! `[DONE]` gets its message closed by [`Stream::finish`]; one that closes before the
//! choice finished, or whose translation ended with an error, gets nothing added, so
//! the client sees the answer cut (the gateway adds its error unless one is out).

use super::chat::{self, ChunkReader, End, Fragment, Part, EVENT_TOO_LARGE, JOIN};
use super::json::{self, get, invalid, member, optional_string, str_at, string, text_member};
use super::map::{error_object, stop_reason_of, upstream_message, ErrorKind, Tokens};
use super::unsigned::UNSIGNED;
use super::TranslateError;
use crate::format::anthropic_messages::push_event;
use crate::llm::RawObject;
use crate::sse::SseParser;
use serde_json::{json, Map, Value};

/// What starts the content of a tool message made from a failed tool's result.
const ERROR_PREFIX: &str = "Error: ";

/// The `input` member holding tool call arguments that are not a JSON object, as text.
const RAW_ARGUMENTS: &str = "_raw_arguments";

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
    let mut out = chat::request(model, messages, max_tokens, stream);
    if let Some(stop) = stop_sequences(body)? {
        out.insert("stop".into(), stop);
    }
    chat::sampling(body, &mut out)?;
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
fn text_of(content: &Content<'_>, path: &str) -> Result<String, TranslateError> {
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

/// The chat image part of the image block at `path`.
fn image(block: &Value, path: &str) -> Result<Part<'static>, TranslateError> {
    let source_path = format!("{path}.source");
    let Some(source) = get(block, "source") else {
        return Err(invalid(&source_path, "must be an object"));
    };
    let url = match string(source, "type", &source_path)? {
        "base64" => format!(
            "data:{};base64,{}",
            string(source, "media_type", &source_path)?,
            string(source, "data", &source_path)?
        ),
        "url" => string(source, "url", &source_path)?.to_owned(),
        _ => {
            return Err(invalid(
                &format!("{source_path}.type"),
                "has no chat counterpart: only base64 and url images can be sent",
            ))
        }
    };
    Ok(Part::Image { url, detail: None })
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
    let mut parts = Vec::new();
    let mut rest = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let path = format!("{path}[{j}]");
        match block_type(block, &path)? {
            "text" => rest.push(Part::Text(string(block, "text", &path)?)),
            "image" => rest.push(image(block, &path)?),
            "tool_result" => out.push(tool_result(block, &path, &mut parts)?),
            _ => {}
        }
    }
    parts.append(&mut rest);
    if !parts.is_empty() {
        out.push(json!({"role": "user", "content": chat::content(&parts)}));
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
                        "image" => images.push(image(b, &path)?),
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
                calls.push(chat::tool_call(
                    string(block, "id", &path)?,
                    string(block, "name", &path)?,
                    &arguments,
                ));
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
    chat::function_tools(body, |tool, path| {
        let custom = optional_string(tool, "type", path)?.is_none_or(|t| t == "custom");
        let deferred = get(tool, "defer_loading").and_then(Value::as_bool) == Some(true);
        if !custom || deferred {
            return Ok(None);
        }
        chat::function(tool, path, "input_schema").map(Some)
    })
}

/// The chat `tool_choice`, and whether parallel tool calls stay allowed.
fn tool_choice(choice: &Value, tools: &[Value]) -> Result<(Value, bool), TranslateError> {
    let value = match string(choice, "type", "tool_choice")? {
        "auto" => json!("auto"),
        "any" => json!("required"),
        "none" => json!("none"),
        "tool" => {
            let name = string(choice, "name", "tool_choice")?;
            chat::chosen(
                tools,
                name,
                "must name a custom tool in `tools` (server and deferred tools are not sent)",
            )?
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

/// The Anthropic message for a `chat.completion` body; see the module docs.
pub fn response(body: &[u8]) -> Result<Vec<u8>, TranslateError> {
    let answer = json::answer(body)?;
    let (choice, message) = chat::choice(&answer)?;
    let mut content = Vec::new();
    if let Some(thinking) = text_member(message, "reasoning_content") {
        content.push(json!({"type": "thinking", "thinking": thinking, "signature": UNSIGNED}));
    }
    if let Some(text) = text_member(message, "content") {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in chat::calls(message)? {
        content.push(json!({"type": "tool_use", "id": call.id, "name": call.name,
                            "input": tool_input(call.arguments)}));
    }
    let finish = chat::finish_reason(choice);
    let usage = Tokens::from_chat(get(&answer, "usage").unwrap_or(&Value::Null));
    let message = json!({
        "id": chat::prefixed("msg_", str_at(&answer, "/id")),
        "type": "message",
        "role": "assistant",
        "model": str_at(&answer, "/model"),
        "content": content,
        "stop_reason": stop_reason_of(finish, false),
        "stop_sequence": null,
        "usage": usage.anthropic(),
    });
    Ok(message.to_string().into_bytes())
}

/// The `input` of a tool call with `arguments`: `{}` for none, the object they hold, or
/// the text kept under [`RAW_ARGUMENTS`] when they hold no object.
fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(input @ Value::Object(_)) => input,
        _ => json!({ RAW_ARGUMENTS: arguments }),
    }
}

/// The Anthropic error body for an upstream error answer with `status` and `body`.
pub fn error(status: u16, body: &[u8]) -> Vec<u8> {
    let message = upstream_message(status, body);
    let kind = error_object(body)
        .as_ref()
        .and_then(ErrorKind::of_error)
        .unwrap_or_else(|| ErrorKind::of_status(status));
    json!({"type": "error", "error": {"type": kind.anthropic_type(), "message": message}})
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
        chat::read_chunks(&mut self.parser, &mut self.state, chunk, out);
    }

    /// The upstream stream ended: closes the message when the choice finished but
    /// `[DONE]` did not come; appends nothing when it did not finish (a cut answer).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.state.finish(out);
    }

    /// Whether the translation ended with an `error` event: the upstream's error chunk,
    /// or an upstream event too large to read.
    pub fn ended_by_error(&self) -> bool {
        self.state.ended_by_error()
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
    /// Set once `message_stop` ([`End::Done`]) or an `error` event ([`End::Failed`]) is
    /// out: the rest of the input is ignored.
    ended: Option<End>,
}

impl ChunkReader for State {
    fn ended(&self) -> Option<End> {
        self.ended
    }

    fn choice_finished(&self) -> bool {
        self.stop_reason.is_some()
    }

    /// `message_start` and `ping`, once.
    fn start(&mut self, id: &str, model: &str, out: &mut String) {
        if self.started {
            return;
        }
        self.started = true;
        let message = json!({
            "id": chat::prefixed("msg_", id),
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
        self.ended = Some(End::Done);
    }

    fn error(&mut self, _id: &str, _model: &str, error: &Value, message: &str, out: &mut String) {
        let kind = ErrorKind::of_error(error).unwrap_or(ErrorKind::Api);
        self.fail(kind, message, out);
    }

    fn too_large(&mut self, out: &mut String) {
        self.fail(ErrorKind::Api, EVENT_TOO_LARGE, out);
    }

    fn usage(&mut self, tokens: Tokens) {
        self.tokens = tokens;
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
        let call = Fragment::of(call, position);
        let continues = matches!(&self.open, Some((_, Block::Tool { index, id }))
            if call.continues(*index, id));
        if !continues {
            let (Some(id), Some(name)) = (call.id, call.name) else {
                return;
            };
            let content_block = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
            let block = Block::Tool {
                index: call.index,
                id: id.to_owned(),
            };
            self.open(block, content_block, out);
        }
        if let Some(partial) = call.arguments {
            self.delta(
                json!({"type": "input_json_delta", "partial_json": partial}),
                out,
            );
        }
    }

    fn finished(&mut self, reason: &str, out: &mut String) {
        self.close(out);
        self.stop_reason = Some(stop_reason_of(reason, false));
    }
}

impl State {
    /// An `error` event of `kind` with `message`, which ends the translation, unless it
    /// has ended.
    fn fail(&mut self, kind: ErrorKind, message: &str, out: &mut String) {
        if self.ended.is_some() {
            return;
        }
        push_event(
            out,
            "error",
            &json!({"type": "error", "error": {"type": kind.anthropic_type(), "message": message}}),
        );
        self.ended = Some(End::Failed);
    }

    /// Closes the open block; a thinking block gets its [`UNSIGNED`] signature first.
    fn close(&mut self, out: &mut String) {
        if let Some((index, block)) = self.open.take() {
            if block == Block::Thinking {
                push_event(
                    out,
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": index,
                            "delta": {"type": "signature_delta", "signature": UNSIGNED}}),
                );
            }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat_request(body: &str, max_tokens: Option<u64>, stream: bool) -> String {
        let body = RawObject::parse(body.as_bytes()).unwrap();
        String::from_utf8(request(&body, "gpt-5", max_tokens, stream).unwrap()).unwrap()
    }

    fn chat(body: &str) -> String {
        chat_request(body, None, false)
    }

    const HI: &str = r#"{"role":"user","content":"hi"}"#;

    #[test]
    fn system_prompts_become_system_messages_where_they_stand() {
        let cases = [
            (
                r#"{"model":"openai/gpt-5","system":"Be brief.","messages":[{"role":"user","content":"hi"}]}"#,
                r#"{"model":"gpt-5","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}]}"#,
            ),
            (
                r#"{"system":[{"type":"text","text":"One.","cache_control":{"type":"ephemeral"}},{"type":"text","text":"Two."}],"messages":[{"role":"user","content":"hi"}]}"#,
                r#"{"model":"gpt-5","messages":[{"role":"system","content":"One.\n\nTwo."},{"role":"user","content":"hi"}]}"#,
            ),
            (
                r#"{"system":"","messages":[{"role":"user","content":"hi"}]}"#,
                r#"{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}"#,
            ),
            (
                r#"{"system":[],"messages":[{"role":"user","content":"hi"}]}"#,
                r#"{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}"#,
            ),
            (
                r#"{"messages":[{"role":"user","content":"hi"},{"role":"system","content":[{"type":"text","text":"Mid."}],"output_config":{"effort":"low"}},{"role":"system","content":"Late."}]}"#,
                r#"{"model":"gpt-5","messages":[{"role":"user","content":"hi"},{"role":"system","content":"Mid."},{"role":"system","content":"Late."}]}"#,
            ),
        ];
        for (body, want) in cases {
            assert_eq!(chat(body), want, "{body}");
        }
    }

    #[test]
    fn user_content_keeps_text_and_images() {
        let cases = [
            (
                r#"{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}}]}]}"#,
                r#"{"model":"gpt-5","messages":[{"role":"user","content":"a\n\nb"}]}"#,
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},{"type":"image","source":{"type":"url","url":"https://example.com/cat.jpg"}}]}]}"#,
                r#"{"model":"gpt-5","messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},{"type":"image_url","image_url":{"url":"https://example.com/cat.jpg"}}]}]}"#,
            ),
            (
                r#"{"messages":[{"role":"user","content":""}]}"#,
                r#"{"model":"gpt-5","messages":[{"role":"user","content":""}]}"#,
            ),
        ];
        for (body, want) in cases {
            assert_eq!(chat(body), want, "{body}");
        }
    }

    #[test]
    fn assistant_tool_use_becomes_tool_calls_and_thinking_is_dropped() {
        let cases = [
            (
                r#"{"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"sig"},{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"lookup","input":{"b":1,"a":[true,null]}},{"type":"tool_use","id":"toolu_2","name":"now","input":{}}]}]}"#,
                r#"{"model":"gpt-5","messages":[{"role":"assistant","content":"Checking.","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"lookup","arguments":"{\"b\":1,\"a\":[true,null]}"}},{"id":"toolu_2","type":"function","function":{"name":"now","arguments":"{}"}}]}]}"#,
            ),
            (
                r#"{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"now"}]}]}"#,
                r#"{"model":"gpt-5","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"now","arguments":"{}"}}]}]}"#,
            ),
            (
                r#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"redacted_thinking","data":"x"},{"type":"thinking","thinking":"t","signature":"s"}]},{"role":"assistant","content":"Hello."}]}"#,
                r#"{"model":"gpt-5","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hello."}]}"#,
            ),
            (
                r#"{"messages":[{"role":"assistant","content":[{"type":"text","text":"One."},{"type":"text","text":"Two."}]}]}"#,
                r#"{"model":"gpt-5","messages":[{"role":"assistant","content":"One.\n\nTwo."}]}"#,
            ),
        ];
        for (body, want) in cases {
            assert_eq!(chat(body), want, "{body}");
        }
    }

    #[test]
    fn tool_results_become_tool_messages_before_the_rest_of_the_turn() {
        let cases = [
            (
                r#"{"messages":[{"role":"user","content":[{"type":"text","text":"Results:"},{"type":"tool_result","tool_use_id":"toolu_1","content":"42","cache_control":{"type":"ephemeral"}},{"type":"tool_result","tool_use_id":"toolu_2","content":"timed out","is_error":true}]}]}"#,
                r#"{"model":"gpt-5","messages":[{"role":"tool","tool_call_id":"toolu_1","content":"42"},{"role":"tool","tool_call_id":"toolu_2","content":"Error: timed out"},{"role":"user","content":"Results:"}]}"#,
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"Screenshot taken."},{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"/9j/"}}]},{"type":"text","text":"Look at it."}]}]}"#,
                r#"{"model":"gpt-5","messages":[{"role":"tool","tool_call_id":"toolu_1","content":"Screenshot taken."},{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/"}},{"type":"text","text":"Look at it."}]}]}"#,
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1"},{"type":"tool_result","tool_use_id":"toolu_2","is_error":false,"content":[{"type":"text","text":"a"},{"type":"search_result","source":"s","title":"t","content":[]},{"type":"text","text":"b"}]},{"type":"tool_result","tool_use_id":"toolu_3","is_error":true}]}]}"#,
                r#"{"model":"gpt-5","messages":[{"role":"tool","tool_call_id":"toolu_1","content":""},{"role":"tool","tool_call_id":"toolu_2","content":"a\n\nb"},{"role":"tool","tool_call_id":"toolu_3","content":"Error: "}]}"#,
            ),
        ];
        for (body, want) in cases {
            assert_eq!(chat(body), want, "{body}");
        }
    }

    #[test]
    fn unknown_blocks_and_messages_left_empty_are_dropped() {
        let body = r#"{"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"doc"}},{"type":"text","text":"Summarize."}]},{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"q"}},{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]},{"type":"text","text":"Found it."}]},{"role":"user","content":[{"type":"document","source":{"type":"url","url":"https://example.com/a.pdf"}}]}]}"#;
        assert_eq!(
            chat(body),
            r#"{"model":"gpt-5","messages":[{"role":"user","content":"Summarize."},{"role":"assistant","content":"Found it."}]}"#
        );
    }

    #[test]
    fn custom_tools_become_functions_and_server_and_deferred_tools_are_dropped() {
        let body = r#"{"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"lookup","description":"Looks up.","input_schema":{"type":"object","properties":{"q":{"type":"string"}}},"cache_control":{"type":"ephemeral"}},{"type":"custom","name":"now","input_schema":{"type":"object"}},{"name":"later","input_schema":{"type":"object"},"defer_loading":true},{"name":"soon","input_schema":{"type":"object"},"defer_loading":false},{"type":"bash_20250124","name":"bash"},{"type":"text_editor_20250728","name":"str_replace_based_edit_tool"},{"type":"web_search_20250305","name":"web_search","max_uses":3}]}"#;
        assert_eq!(
            chat(body),
            r#"{"model":"gpt-5","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"lookup","description":"Looks up.","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}},{"type":"function","function":{"name":"now","parameters":{"type":"object"}}},{"type":"function","function":{"name":"soon","parameters":{"type":"object"}}}]}"#
        );
    }

    #[test]
    fn tool_choice_maps_each_kind_and_the_parallel_switch() {
        let cases = [
            (r#"{"type":"auto"}"#, r#","tool_choice":"auto""#),
            (r#"{"type":"any"}"#, r#","tool_choice":"required""#),
            (r#"{"type":"none"}"#, r#","tool_choice":"none""#),
            (
                r#"{"type":"tool","name":"now"}"#,
                r#","tool_choice":{"type":"function","function":{"name":"now"}}"#,
            ),
            (
                r#"{"type":"auto","disable_parallel_tool_use":true}"#,
                r#","tool_choice":"auto","parallel_tool_calls":false"#,
            ),
            (
                r#"{"type":"any","disable_parallel_tool_use":false}"#,
                r#","tool_choice":"required""#,
            ),
        ];
        for (choice, tail) in cases {
            let body = format!(
                r#"{{"messages":[{HI}],"tools":[{{"name":"now","input_schema":{{"type":"object"}}}}],"tool_choice":{choice}}}"#
            );
            let want = format!(
                r#"{{"model":"gpt-5","messages":[{HI}],"tools":[{{"type":"function","function":{{"name":"now","parameters":{{"type":"object"}}}}}}]{tail}}}"#
            );
            assert_eq!(chat(&body), want, "{choice}");
        }
        let no_tool_left = format!(
            r#"{{"messages":[{HI}],"tools":[{{"type":"web_search_20250305","name":"web_search"}}],"tool_choice":{{"type":"any","disable_parallel_tool_use":true}}}}"#
        );
        assert_eq!(
            chat(&no_tool_left),
            format!(r#"{{"model":"gpt-5","messages":[{HI}]}}"#)
        );
    }

    #[test]
    fn sampling_stop_and_user_members_map_by_name() {
        let cases = [
            (
                r#","stop_sequences":["END","\n\nHuman:"],"temperature":0.7,"top_p":0.9,"top_k":40"#,
                r#","stop":["END","\n\nHuman:"],"temperature":0.7,"top_p":0.9"#,
            ),
            (r#","stop_sequences":[]"#, ""),
            (
                r#","metadata":{"user_id":"{\"device_id\":\"d1\"}"}"#,
                r#","user":"{\"device_id\":\"d1\"}""#,
            ),
            (r#","metadata":{}"#, ""),
            (
                r#","system":null,"temperature":null,"tools":null,"metadata":null,"thinking":null"#,
                "",
            ),
        ];
        for (members, tail) in cases {
            let body = format!(r#"{{"messages":[{HI}]{members}}}"#);
            let want = format!(r#"{{"model":"gpt-5","messages":[{HI}]{tail}}}"#);
            assert_eq!(chat(&body), want, "{members}");
        }
    }

    #[test]
    fn a_thinking_budget_becomes_a_reasoning_effort() {
        let cases = [
            (
                r#"{"type":"enabled","budget_tokens":1024}"#,
                r#","reasoning_effort":"low""#,
            ),
            (
                r#"{"type":"enabled","budget_tokens":4095}"#,
                r#","reasoning_effort":"low""#,
            ),
            (
                r#"{"type":"enabled","budget_tokens":4096}"#,
                r#","reasoning_effort":"medium""#,
            ),
            (
                r#"{"type":"enabled","budget_tokens":16383}"#,
                r#","reasoning_effort":"medium""#,
            ),
            (
                r#"{"type":"enabled","budget_tokens":16384}"#,
                r#","reasoning_effort":"high""#,
            ),
            (
                r#"{"type":"enabled","budget_tokens":64000}"#,
                r#","reasoning_effort":"high""#,
            ),
            (r#"{"type":"adaptive","display":"omitted"}"#, ""),
            (r#"{"type":"disabled"}"#, ""),
        ];
        for (thinking, tail) in cases {
            let body = format!(r#"{{"messages":[{HI}],"thinking":{thinking}}}"#);
            let want = format!(r#"{{"model":"gpt-5","messages":[{HI}]{tail}}}"#);
            assert_eq!(chat(&body), want, "{thinking}");
        }
    }

    #[test]
    fn members_without_a_chat_counterpart_are_dropped() {
        let body = format!(
            r#"{{"messages":[{HI}],"top_k":5,"context_management":{{"edits":[]}},"output_config":{{"effort":"high"}},"service_tier":"auto","container":"c1","mcp_servers":[{{"type":"url","url":"https://mcp.example.com","name":"x"}}],"cache_control":{{"type":"ephemeral"}},"stream":true,"max_tokens":100}}"#
        );
        assert_eq!(
            chat(&body),
            format!(r#"{{"model":"gpt-5","messages":[{HI}]}}"#)
        );
    }

    #[test]
    fn members_come_out_in_the_fixed_order() {
        let body = r#"{"metadata":{"user_id":"u"},"thinking":{"type":"enabled","budget_tokens":2048},"tool_choice":{"type":"auto","disable_parallel_tool_use":true},"tools":[{"name":"now","input_schema":{"type":"object"}}],"top_p":0.5,"temperature":1,"stop_sequences":["x"],"messages":[{"role":"user","content":"hi"}],"system":"s","max_tokens":5000,"stream":true,"model":"a/b"}"#;
        assert_eq!(
            chat_request(body, Some(1000), true),
            r#"{"model":"gpt-5","messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}],"max_tokens":1000,"stream":true,"stream_options":{"include_usage":true},"stop":["x"],"temperature":1,"top_p":0.5,"tools":[{"type":"function","function":{"name":"now","parameters":{"type":"object"}}}],"tool_choice":"auto","parallel_tool_calls":false,"reasoning_effort":"low","user":"u"}"#
        );
    }

    #[test]
    fn malformed_requests_are_refused_naming_the_member() {
        let cases = [
            (r#"{"messages":[{"content":"hi"}]}"#, "`messages[0].role` must be a string"),
            (
                r#"{"messages":[{"role":"tool","content":"x"}]}"#,
                r#"`messages[0].role` must be "user", "assistant" or "system""#,
            ),
            (
                r#"{"messages":[{"role":"user"}]}"#,
                "`messages[0].content` must be a string or an array of content blocks",
            ),
            (
                r#"{"messages":[{"role":"system","content":7}]}"#,
                "`messages[0].content` must be a string or an array of content blocks",
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"text":"x"}]}]}"#,
                "`messages[0].content[0].type` must be a string",
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"text"}]}]}"#,
                "`messages[0].content[0].text` must be a string",
            ),
            (
                r#"{"messages":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}"#,
                "`messages[1].content[0].tool_use_id` must be a string",
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":{}}]}]}"#,
                "`messages[0].content[0].content` must be a string or an array of content blocks",
            ),
            (
                r#"{"messages":[{"role":"assistant","content":[{"type":"tool_use","name":"x","input":{}}]}]}"#,
                "`messages[0].content[0].id` must be a string",
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"file_1"}}]}]}"#,
                "`messages[0].content[0].source.type` has no chat counterpart: only base64 and url images can be sent",
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","data":"AA=="}}]}]}"#,
                "`messages[0].content[0].source.media_type` must be a string",
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image"}]}]}]}"#,
                "`messages[0].content[0].content[0].source` must be an object",
            ),
            (
                r#"{"system":5,"messages":[]}"#,
                "`system` must be a string or an array of content blocks",
            ),
            (
                r#"{"system":[{"type":"text","text":1}],"messages":[]}"#,
                "`system[0].text` must be a string",
            ),
            (r#"{"messages":{}}"#, "`messages` must be an array"),
            (r#"{"system":"s"}"#, "`messages` must be an array"),
            (r#"{"messages":[],"tools":{}}"#, "`tools` must be an array"),
            (
                r#"{"messages":[],"tools":[{"input_schema":{}}]}"#,
                "`tools[0].name` must be a string",
            ),
            (
                r#"{"messages":[],"tools":[{"type":7,"name":"x"}]}"#,
                "`tools[0].type` must be a string",
            ),
            (
                r#"{"messages":[],"tools":[{"name":"x","description":["d"]}]}"#,
                "`tools[0].description` must be a string",
            ),
            (
                r#"{"messages":[],"tools":[{"name":"now"},{"type":"web_search_20250305","name":"web_search"}],"tool_choice":{"type":"tool","name":"web_search"}}"#,
                "`tool_choice.name` must name a custom tool in `tools` (server and deferred tools are not sent)",
            ),
            (
                r#"{"messages":[],"tools":[{"name":"now"}],"tool_choice":{"type":"some"}}"#,
                r#"`tool_choice.type` must be "auto", "any", "tool" or "none""#,
            ),
            (
                r#"{"messages":[],"tools":[{"name":"now"}],"tool_choice":"auto"}"#,
                "`tool_choice.type` must be a string",
            ),
            (
                r#"{"messages":[],"stop_sequences":"END"}"#,
                "`stop_sequences` must be an array of strings",
            ),
            (
                r#"{"messages":[],"stop_sequences":["END",1]}"#,
                "`stop_sequences` must be an array of strings",
            ),
            (r#"{"messages":[],"top_p":"high"}"#, "`top_p` must be a number"),
            (
                r#"{"messages":[],"thinking":{"type":"enabled"}}"#,
                "`thinking.budget_tokens` must be a non-negative integer",
            ),
            (
                r#"{"messages":[],"thinking":{"type":"enabled","budget_tokens":-1}}"#,
                "`thinking.budget_tokens` must be a non-negative integer",
            ),
            (r#"{"messages":[],"thinking":{}}"#, "`thinking.type` must be a string"),
            (
                r#"{"messages":[],"metadata":{"user_id":7}}"#,
                "`metadata.user_id` must be a string",
            ),
        ];
        for (body, want) in cases {
            let body = RawObject::parse(body.as_bytes()).unwrap();
            assert_eq!(
                request(&body, "gpt-5", None, false),
                Err(TranslateError::Request(want.into())),
                "{want}"
            );
        }
    }

    const GOLDEN_REQUEST: &str =
        include_str!("../../../tests/golden/messages_over_chat/claude_code_request.json");
    const GOLDEN_REQUEST_CHAT: &str =
        include_str!("../../../tests/golden/messages_over_chat/claude_code_request.chat.json");

    #[test]
    fn a_claude_code_request_translates_to_the_golden_chat_request() {
        assert_eq!(
            chat_request(GOLDEN_REQUEST, Some(32768), true),
            GOLDEN_REQUEST_CHAT
        );
    }

    fn message(body: &str) -> String {
        String::from_utf8(response(body.as_bytes()).unwrap()).unwrap()
    }

    #[test]
    fn a_chat_answer_becomes_a_message() {
        let cases = [
            (
                r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-5-2025-08-07","choices":[{"index":0,"message":{"role":"assistant","content":"Hi there."},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#,
                r#"{"id":"msg_chatcmpl-1","type":"message","role":"assistant","model":"gpt-5-2025-08-07","content":[{"type":"text","text":"Hi there."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3}}"#,
            ),
            (
                r#"{"id":"msg_01X","model":"kimi-k2","choices":[{"index":0,"message":{"role":"assistant","reasoning_content":"Need the time.","content":"Checking.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"q\":\"rust\",\"n\":2}"}},{"id":"call_2","type":"function","function":{"name":"now","arguments":""}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":2000,"completion_tokens":50,"total_tokens":2050,"prompt_tokens_details":{"cached_tokens":1536},"completion_tokens_details":{"reasoning_tokens":20}}}"#,
                r#"{"id":"msg_01X","type":"message","role":"assistant","model":"kimi-k2","content":[{"type":"thinking","thinking":"Need the time.","signature":"switchyard-unsigned"},{"type":"text","text":"Checking."},{"type":"tool_use","id":"call_1","name":"lookup","input":{"q":"rust","n":2}},{"type":"tool_use","id":"call_2","name":"now","input":{}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":464,"cache_creation_input_tokens":0,"cache_read_input_tokens":1536,"output_tokens":50}}"#,
            ),
            (
                r#"{"id":"c","model":"m","choices":[{"message":{"role":"assistant","content":null,"reasoning_content":"","tool_calls":null},"finish_reason":"length"}]}"#,
                r#"{"id":"msg_c","type":"message","role":"assistant","model":"m","content":[],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}"#,
            ),
        ];
        for (body, want) in cases {
            assert_eq!(message(body), want, "{body}");
        }
    }

    #[test]
    fn each_finish_reason_becomes_its_stop_reason() {
        let cases = [
            (r#""stop""#, "end_turn"),
            (r#""length""#, "max_tokens"),
            (r#""tool_calls""#, "tool_use"),
            (r#""function_call""#, "tool_use"),
            (r#""content_filter""#, "refusal"),
            ("null", "end_turn"),
        ];
        for (finish, stop) in cases {
            let body = format!(
                r#"{{"id":"c","model":"m","choices":[{{"message":{{"content":"x"}},"finish_reason":{finish}}}]}}"#
            );
            let want = format!(
                r#"{{"id":"msg_c","type":"message","role":"assistant","model":"m","content":[{{"type":"text","text":"x"}}],"stop_reason":"{stop}","stop_sequence":null,"usage":{{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}}}"#
            );
            assert_eq!(message(&body), want, "{finish}");
        }
    }

    #[test]
    fn tool_arguments_that_are_no_object_are_kept_as_text() {
        let cases = [
            (r#""""#, r#"{}"#),
            (r#"" \n""#, r#"{}"#),
            (r#""{\"q\":\"rust\"}""#, r#"{"q":"rust"}"#),
            (r#""{\"q\":\"ru""#, r#"{"_raw_arguments":"{\"q\":\"ru"}"#),
            (r#""[1]""#, r#"{"_raw_arguments":"[1]"}"#),
            (r#""null""#, r#"{"_raw_arguments":"null"}"#),
            (r#""{\"a\":1} x""#, r#"{"_raw_arguments":"{\"a\":1} x"}"#),
        ];
        for (arguments, input) in cases {
            let body = format!(
                r#"{{"id":"c","model":"m","choices":[{{"message":{{"content":null,"tool_calls":[{{"id":"call_1","type":"function","function":{{"name":"lookup","arguments":{arguments}}}}}]}},"finish_reason":"length"}}]}}"#
            );
            let want = format!(
                r#"{{"id":"msg_c","type":"message","role":"assistant","model":"m","content":[{{"type":"tool_use","id":"call_1","name":"lookup","input":{input}}}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{ZERO_USAGE}}}"#
            );
            assert_eq!(message(&body), want, "{arguments}");
        }
    }

    #[test]
    fn an_answer_that_is_not_a_chat_completion_is_refused() {
        let cases = [
            ("not json", "not JSON: expected ident at line 1 column 2"),
            (r#"{"error":{"message":"x"}}"#, "no `choices[0]`"),
            (r#"{"choices":[]}"#, "no `choices[0]`"),
            (
                r#"{"choices":[{"text":"x"}]}"#,
                "`choices[0].message` is not an object",
            ),
            (
                r#"{"choices":[{"message":{"tool_calls":{}}}]}"#,
                "`tool_calls` is not an array",
            ),
            (
                r#"{"choices":[{"message":{"tool_calls":[{"function":{"name":"now","arguments":"{}"}}]}}]}"#,
                "a tool call without `id` or `function.name`",
            ),
        ];
        for (body, want) in cases {
            assert_eq!(
                response(body.as_bytes()),
                Err(TranslateError::Response(want.into())),
                "{body}"
            );
        }
    }

    #[test]
    fn error_bodies_become_anthropic_errors_typed_by_status() {
        let cases: [(u16, &str, &str); 13] = [
            (
                400,
                r#"{"error":{"message":"Invalid 'messages': empty.","type":"invalid_request_error","param":"messages","code":null}}"#,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"Invalid 'messages': empty."}}"#,
            ),
            (
                401,
                r#"{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","code":"invalid_api_key"}}"#,
                r#"{"type":"error","error":{"type":"authentication_error","message":"Incorrect API key provided."}}"#,
            ),
            (
                403,
                r#"{"error":"forbidden"}"#,
                r#"{"type":"error","error":{"type":"permission_error","message":"forbidden"}}"#,
            ),
            (
                404,
                r#"{"error":{"message":"The model `gpt-9` does not exist","type":"invalid_request_error","code":"model_not_found"}}"#,
                r#"{"type":"error","error":{"type":"not_found_error","message":"The model `gpt-9` does not exist"}}"#,
            ),
            (
                413,
                r#"{"message":"payload too large"}"#,
                r#"{"type":"error","error":{"type":"request_too_large","message":"payload too large"}}"#,
            ),
            (
                422,
                r#"{"detail":"bad"}"#,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"{\"detail\":\"bad\"}"}}"#,
            ),
            (
                429,
                r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#,
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"Rate limit reached"}}"#,
            ),
            (
                500,
                r#"{"error":{"message":"The server had an error","type":"server_error"}}"#,
                r#"{"type":"error","error":{"type":"api_error","message":"The server had an error"}}"#,
            ),
            (
                502,
                "<html>Bad Gateway</html>\n",
                r#"{"type":"error","error":{"type":"api_error","message":"<html>Bad Gateway</html>"}}"#,
            ),
            (
                503,
                "",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"the upstream answered HTTP 503"}}"#,
            ),
            (
                500,
                r#"{"error":{"message":"  ","type":"server_error"}}"#,
                r#"{"type":"error","error":{"type":"api_error","message":"the upstream answered HTTP 500"}}"#,
            ),
            (
                529,
                "overloaded",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"overloaded"}}"#,
            ),
            (
                504,
                "upstream timed out",
                r#"{"type":"error","error":{"type":"timeout_error","message":"upstream timed out"}}"#,
            ),
        ];
        for (status, body, want) in cases {
            assert_eq!(
                String::from_utf8(error(status, body.as_bytes())).unwrap(),
                want,
                "{status} {body}"
            );
        }
    }

    #[test]
    fn a_long_error_message_is_cut_at_a_character_boundary() {
        let long = format!("a{}", "é".repeat(600));
        let body = serde_json::to_vec(&json!({"error": {"message": long}})).unwrap();
        let want = json!({"type": "error", "error": {"type": "api_error",
            "message": format!("a{}", "é".repeat(511))}});
        assert_eq!(error(500, &body), want.to_string().into_bytes());
    }

    fn translate_stream(chunks: &[&[u8]]) -> String {
        let mut stream = Stream::default();
        let mut out = Vec::new();
        for chunk in chunks {
            stream.feed(chunk, &mut out);
        }
        stream.finish(&mut out);
        String::from_utf8(out).unwrap()
    }

    /// The translation of `input` fed whole, checked equal to it fed byte by byte.
    fn translate_whole_and_bytewise(input: &str) -> String {
        let whole = translate_stream(&[input.as_bytes()]);
        let bytes: Vec<&[u8]> = input.as_bytes().chunks(1).collect();
        assert_eq!(translate_stream(&bytes), whole);
        whole
    }

    const TOOL_CALL_STREAM: &str =
        include_str!("../../../tests/golden/messages_over_chat/tool_call_stream.sse");
    const TOOL_CALL_EVENTS: &str =
        include_str!("../../../tests/golden/messages_over_chat/tool_call_stream.anthropic.sse");
    const REASONING_STREAM: &str =
        include_str!("../../../tests/golden/messages_over_chat/reasoning_stream.sse");
    const REASONING_EVENTS: &str =
        include_str!("../../../tests/golden/messages_over_chat/reasoning_stream.anthropic.sse");

    #[test]
    fn a_streamed_tool_call_translates_to_the_golden_events() {
        assert_eq!(
            translate_whole_and_bytewise(TOOL_CALL_STREAM),
            TOOL_CALL_EVENTS
        );
    }

    #[test]
    fn a_streamed_answer_with_reasoning_translates_to_the_golden_events() {
        assert_eq!(
            translate_whole_and_bytewise(REASONING_STREAM),
            REASONING_EVENTS
        );
    }

    #[test]
    fn finish_closes_a_finished_answer_and_adds_nothing_to_a_cut_one() {
        let without_done = REASONING_STREAM.strip_suffix("data: [DONE]\n\n").unwrap();
        assert_eq!(
            translate_stream(&[without_done.as_bytes()]),
            REASONING_EVENTS
        );

        let cut_at = TOOL_CALL_STREAM.find("data: {\"id\":\"chatcmpl-7Qx\",\"object\":\"chat.completion.chunk\",\"created\":1767225600,\"model\":\"gpt-5-2025-08-07\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\"").unwrap();
        let cut = &TOOL_CALL_STREAM[..cut_at];
        let mut stream = Stream::default();
        let mut out = Vec::new();
        stream.feed(cut.as_bytes(), &mut out);
        let before = out.len();
        stream.finish(&mut out);
        assert_eq!(out.len(), before);
        let relayed = String::from_utf8(out).unwrap();
        let open_tool_call = TOOL_CALL_EVENTS
            .find("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}")
            .unwrap();
        assert_eq!(relayed, TOOL_CALL_EVENTS[..open_tool_call]);
    }

    fn chunk(delta: &str, finish: &str) -> String {
        format!(
            "data: {{\"id\":\"c\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        )
    }

    fn frame(name: &str, data: &str) -> String {
        format!("event: {name}\ndata: {data}\n\n")
    }

    const ZERO_USAGE: &str = r#"{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}"#;

    fn message_start(id: &str, model: &str) -> String {
        frame(
            "message_start",
            &format!(
                r#"{{"type":"message_start","message":{{"id":"{id}","type":"message","role":"assistant","model":"{model}","content":[],"stop_reason":null,"stop_sequence":null,"usage":{ZERO_USAGE}}}}}"#
            ),
        ) + &frame("ping", r#"{"type":"ping"}"#)
    }

    #[test]
    fn an_error_chunk_becomes_an_error_event_and_ends_the_translation() {
        let input = [
            r#"data: {"id":"","model":"","choices":[],"prompt_filter_results":[]}"#.to_owned()
                + "\n\n",
            chunk(r#"{"content":"Hi"}"#, "null"),
            "data: {\"error\":{\"message\":\"upstream overloaded\",\"type\":\"server_error\"}}\n\n"
                .to_owned(),
            chunk(r#"{"content":" more"}"#, r#""stop""#),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat();
        let want = [
            message_start("msg_c", "m"),
            frame(
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            ),
            frame(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
            ),
            frame(
                "error",
                r#"{"type":"error","error":{"type":"api_error","message":"upstream overloaded"}}"#,
            ),
        ]
        .concat();
        assert_eq!(translate_whole_and_bytewise(&input), want);
        let mut stream = Stream::default();
        let mut out = Vec::new();
        stream.feed(input.as_bytes(), &mut out);
        assert!(stream.ended_by_error());

        // The kind the chunk's code or type names is kept (a stream has no status).
        for (error, kind) in [
            (
                r#"{"message":"m","type":"server_error","code":"overloaded"}"#,
                "overloaded_error",
            ),
            (
                r#"{"message":"m","type":"requests","code":"rate_limit_exceeded"}"#,
                "rate_limit_error",
            ),
            (
                r#"{"message":"m","type":"invalid_request_error","code":"invalid_api_key"}"#,
                "authentication_error",
            ),
            (
                r#"{"message":"m","type":"invalid_request_error","code":"context_length_exceeded"}"#,
                "invalid_request_error",
            ),
            (
                r#"{"message":"m","type":"permission_error"}"#,
                "permission_error",
            ),
            (
                r#"{"message":"m","code":"model_not_found"}"#,
                "not_found_error",
            ),
            (
                r#"{"message":"m","type":"request_too_large"}"#,
                "request_too_large",
            ),
            (
                r#"{"message":"m","type":"insufficient_quota"}"#,
                "billing_error",
            ),
            (r#"{"message":"m","type":"something_new"}"#, "api_error"),
        ] {
            assert_eq!(
                translate_whole_and_bytewise(&format!("data: {{\"error\":{error}}}\n\n")),
                frame(
                    "error",
                    &format!(r#"{{"type":"error","error":{{"type":"{kind}","message":"m"}}}}"#)
                ),
                "{error}"
            );
        }

        let bare = "data: {\"error\":{\"code\":500}}\n\n";
        assert_eq!(
            translate_whole_and_bytewise(bare),
            frame(
                "error",
                r#"{"type":"error","error":{"type":"api_error","message":"{\"code\":500}"}}"#
            )
        );
    }

    #[test]
    fn only_an_error_chunk_or_event_ends_the_translation_by_error() {
        let cut = chunk(r#"{"content":"Hi"}"#, "null");
        let unfinished = cut.clone() + &chunk("{}", r#""stop""#);
        let error = cut.clone() + "data: {\"error\":{\"message\":\"x\"}}\n\n";
        for (input, by_error) in [
            ("", false),
            (cut.as_str(), false),
            (unfinished.as_str(), false),
            (REASONING_STREAM, false),
            (error.as_str(), true),
        ] {
            let mut stream = Stream::default();
            let mut out = Vec::new();
            stream.feed(input.as_bytes(), &mut out);
            stream.finish(&mut out);
            assert_eq!(stream.ended_by_error(), by_error, "{input}");
        }
    }

    #[test]
    fn an_event_too_large_to_read_ends_the_translation_with_an_error() {
        let big = format!(
            "data: {{\"id\":\"c\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}},\"finish_reason\":null}}]}}\n\n",
            "x".repeat(crate::sse::MAX_EVENT_BYTES)
        );
        let (big_head, big_tail) = big.split_at(big.len() / 2 + 1);
        let (big_mid, big_tail) = big_tail.split_at(big_tail.len() - 10);
        let chunks = [
            chunk(r#"{"content":"Hi"}"#, "null") + big_head,
            big_mid.to_owned(),
            big_tail.to_owned() + &chunk(r#"{"content":" more"}"#, r#""stop""#),
            "data: [DONE]\n\n".to_owned(),
        ];
        let mut stream = Stream::default();
        let mut out = Vec::new();
        let mut lengths = Vec::new();
        for piece in &chunks {
            stream.feed(piece.as_bytes(), &mut out);
            lengths.push(out.len());
        }
        stream.finish(&mut out);
        let text = [
            message_start("msg_c", "m"),
            frame(
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            ),
            frame(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
            ),
        ]
        .concat();
        let error = frame(
            "error",
            r#"{"type":"error","error":{"type":"api_error","message":"an upstream event was larger than 1 MiB and could not be translated"}}"#,
        );
        assert_eq!(lengths[0], text.len());
        assert_eq!(String::from_utf8(out).unwrap(), text + &error);
        assert_eq!(lengths[1..], [lengths[1]; 3]);
        assert!(stream.ended_by_error());
    }

    #[test]
    fn an_event_too_large_after_the_message_stop_adds_nothing() {
        let mut stream = Stream::default();
        let mut out = Vec::new();
        stream.feed(REASONING_STREAM.as_bytes(), &mut out);
        stream.feed(b"data: ", &mut out);
        stream.feed(&vec![b'x'; crate::sse::MAX_EVENT_BYTES], &mut out);
        stream.finish(&mut out);
        assert_eq!(String::from_utf8(out).unwrap(), REASONING_EVENTS);
        assert!(!stream.ended_by_error());
    }

    #[test]
    fn done_alone_still_makes_a_whole_message() {
        let want = [
            message_start("msg_", ""),
            frame(
                "message_delta",
                &format!(
                    r#"{{"type":"message_delta","delta":{{"stop_reason":"end_turn","stop_sequence":null}},"usage":{ZERO_USAGE}}}"#
                ),
            ),
            frame("message_stop", r#"{"type":"message_stop"}"#),
        ]
        .concat();
        assert_eq!(
            translate_whole_and_bytewise(": keep-alive\n\ndata: [DONE]\n\n"),
            want
        );
    }

    #[test]
    fn parallel_tool_calls_get_a_block_each_and_stray_fragments_are_dropped() {
        let input = [
            chunk(
                r#"{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"a","arguments":"{}"}},{"index":1,"id":"call_b","type":"function","function":{"name":"b","arguments":""}}]}"#,
                "null",
            ),
            chunk(
                r#"{"tool_calls":[{"index":1,"id":"call_b","function":{"arguments":"{\"x\":1}"}}]}"#,
                "null",
            ),
            chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"late"}}]}"#, "null"),
            chunk(r#"{"tool_calls":[{"index":2,"function":{"arguments":"orphan"}}]}"#, "null"),
            r#"data: {"id":"c","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":9,"completion_tokens":4}}"#.to_owned() + "\n\n",
        ]
        .concat();
        let want = [
            message_start("msg_c", "m"),
            frame(
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"call_a","name":"a","input":{}}}"#,
            ),
            frame(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{}"}}"#,
            ),
            frame(
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ),
            frame(
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"call_b","name":"b","input":{}}}"#,
            ),
            frame(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"x\":1}"}}"#,
            ),
            frame(
                "content_block_stop",
                r#"{"type":"content_block_stop","index":1}"#,
            ),
            frame(
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":9,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":4}}"#,
            ),
            frame("message_stop", r#"{"type":"message_stop"}"#),
        ]
        .concat();
        assert_eq!(translate_whole_and_bytewise(&input), want);
    }

    #[test]
    fn nothing_follows_the_end_of_the_message() {
        let mut stream = Stream::default();
        let mut out = Vec::new();
        stream.feed(REASONING_STREAM.as_bytes(), &mut out);
        let end = out.len();
        stream.feed(chunk(r#"{"content":"again"}"#, "null").as_bytes(), &mut out);
        stream.feed(b"data: [DONE]\n\n", &mut out);
        stream.finish(&mut out);
        assert_eq!(out.len(), end);
    }
}
