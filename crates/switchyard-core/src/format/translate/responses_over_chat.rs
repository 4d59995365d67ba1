//! An OpenAI Responses client (Codex CLI) over an OpenAI chat completions upstream: the
//! Responses request into a chat request, and the chat answer — JSON body, error body or
//! chunk stream — back into the Responses shapes.
//!
//! # Request
//!
//! - `instructions` (a string) becomes the first message, `{"role":"system"}`; an empty
//!   one is left out. A string `input` becomes one user message.
//! - `input` items, in order. A `message` item (an item without `type` is one) of role
//!   `developer` or `system` becomes a system message, `user` a user message, `assistant`
//!   an assistant message. Its content is a string or parts: `input_text`, `output_text`
//!   (and an assistant's `refusal`, by its text) are text; `input_image` with an
//!   `image_url` (a URL or a `data:` URL) is an `image_url` part, its `detail` kept. When
//!   only text parts remain they are joined with `"\n\n"` into one string, so a plain
//!   message stays a plain string. An image outside a user message, an `input_image`
//!   given only by `file_id` (a chat upstream cannot fetch OpenAI files), an
//!   `input_file` and an `input_audio` part are refused, naming the part. Other parts are
//!   dropped; a message left with no part, and a system message with no text, add
//!   nothing.
//! - A `function_call` item (`call_id`, `name`, `arguments`) becomes a tool call (its id
//!   the `call_id`) of the assistant message just before it, when the last message is one
//!   (the text of a `message` item, or earlier calls: consecutive calls make one
//!   message), else of a new assistant message with `content: null`. A
//!   `function_call_output` item becomes a `{"role":"tool"}` message for its `call_id`,
//!   its content the `output` string or the text of its parts joined with `"\n\n"`. A
//!   tool message holds text only, so the images of the outputs (Codex's `view_image`
//!   returns one) go, in order, to one user message after the run of tool messages: chat
//!   wants a call's results right after the call.
//! - Dropped items: `reasoning` (its `encrypted_content` is opaque to anyone but OpenAI,
//!   and a chat upstream takes no reasoning back) and every other type (`web_search_call`,
//!   `local_shell_call`, `custom_tool_call`, `item_reference`, `compaction`, …). Item
//!   `id`s and `status`es are dropped.
//! - `tools`: each `function` tool `{name, description, parameters, strict}` becomes
//!   `{"type":"function","function":{name, description, parameters, strict}}` (the
//!   members it has). `namespace` tools and built-ins (`web_search`, `file_search`,
//!   `local_shell`, `custom`, `image_generation`, `mcp`, …) are dropped, not refused:
//!   Codex sends `web_search` and a namespace tool in every request, so refusing them
//!   would fail every Codex turn on a translated route; a chat upstream cannot run a
//!   built-in; and a namespace's tools flattened into functions would come back as calls
//!   the client could not map to its namespace without knowing how it names them.
//! - `tool_choice`: `"auto"`, `"required"`, `"none"` as they are, `{"type":"function",
//!   "name"}` the named function, which must be among the tools sent; any other choice
//!   (a built-in, `allowed_tools`, …) is refused. `parallel_tool_calls` as it is. With no
//!   tool left, neither is sent.
//! - `reasoning.effort` → `reasoning_effort` (its value as it is); `reasoning.summary`
//!   dropped. `text.format`: `json_schema` (`name`, `description`, `schema`, `strict`) →
//!   `response_format: {"type":"json_schema","json_schema":{…}}`, `json_object` →
//!   `{"type":"json_object"}`, `text` → nothing; `text.verbosity` dropped.
//!   `temperature`, `top_p` as they are; `user`, else `safety_identifier`, → `user`. The
//!   output bound is the one given (the client's `max_output_tokens`, clamped).
//! - Dropped members: `store`, `include`, `prompt_cache_key`, `client_metadata`,
//!   `metadata`, `service_tier`, `truncation`, `background`, `previous_response_id`
//!   (refused by the decoder), `top_logprobs`, `max_tool_calls`, `stream_options` and any
//!   other.
//! - The output's members, in this order: `model`, `messages`, `max_tokens`, `stream`,
//!   `stream_options` (`include_usage`, so the stream ends with the usage),
//!   `temperature`, `top_p`, `tools`, `tool_choice`, `parallel_tool_calls`,
//!   `reasoning_effort`, `response_format`, `user`. `null` members count as absent.
//!
//! # Answer
//!
//! A `response` object with the members the OpenAI SDK's `Response` requires and those
//! a client reads: `id` (the chat id prefixed with `resp_` unless it has it), `object`,
//! `created_at` (given: no clock is read here), `status` and `incomplete_details` (from
//! the finish reason, [`super::map::responses_status_of`]: `length` is incomplete for
//! `max_output_tokens`, `content_filter` for `content_filter`), `error: null`, `model`,
//! `output`, `parallel_tool_calls: true`, `tool_choice: "auto"` and `tools: []` (the
//! request's are not known to the translation of its answer), and `usage` last
//! (input tokens count the cached ones, with the cached and reasoning details; `null`
//! when the upstream gave none, not zeros: the gateway's quota settles on the usage it
//! reads and estimates from the characters only when there is none). Output
//! items, in order: the `reasoning_content` as a `reasoning` item with one summary text,
//! the text as an assistant `message` item with one `output_text` part, each tool call as
//! a `function_call` item (its `arguments` text as it is). Items are `completed`; an
//! item's id is `rs_switchyard_<n>` ([`TRANSLATED_REASONING`]: a real Responses
//! upstream cannot take such a reasoning item back, so a pass-through leaves it out) or
//! `msg_<n>` by its output index, `fc_<call id>` for a call. A chat `refusal` and
//! `logprobs` are dropped.
//!
//! # Error body
//!
//! `{"error":{"message","type","param","code"}}`: the message is the upstream's
//! (`error.message`, an `error` string or a top-level `message`), else the body's text,
//! trimmed and cut to 1 KiB; the type is the body's `error.type`, else by status (401
//! `authentication_error`, 403 `permission_error`, 404 `not_found_error`, 429
//! `rate_limit_error`, 5xx `server_error`, other `invalid_request_error`); the code is
//! the body's `error.code` (a number as its text), else `rate_limit_exceeded` for a 429;
//! the param is the body's `error.param`.
//!
//! # Stream
//!
//! [`Stream`] turns `chat.completion.chunk` events into Responses events, each
//! `event: <type>` with data `{"type":<type>,"sequence_number":N,…}`, N from 0:
//! `response.created` and `response.in_progress` (the response `in_progress`, no output,
//! no usage) at the first chunk with a choice; one output item per run of
//! `reasoning_content` (a `reasoning` item: `response.output_item.added`,
//! `response.reasoning_summary_part.added`, `response.reasoning_summary_text.delta` per
//! fragment, then `.done` of the text, the part and the item), of `content` (a `message`
//! item: `output_item.added`, `content_part.added`, `output_text.delta` per fragment,
//! then `output_text.done`, `content_part.done`, `output_item.done`) or of one tool call
//! (a `function_call` item: `output_item.added` with empty arguments,
//! `function_call_arguments.delta` per fragment as it comes, then
//! `function_call_arguments.done` and `output_item.done`), each closed when another
//! begins or the choice finishes. The answer ends with `response.completed` (or
//! `response.incomplete` for `length` and `content_filter`), whose response holds every
//! output item and the usage (`null` when no chunk carried one, as in the JSON answer),
//! at the first chunk carrying usage once the choice has finished, or at `[DONE]`. An
//! error chunk becomes `response.failed` (the response `failed`, no output, `error` with
//! the chunk's code, else `server_error`, and message) and ends the translation; so does
//! an upstream event larger than [`MAX_EVENT_BYTES`](crate::sse::MAX_EVENT_BYTES), which
//! the parser skips (its content would be lost from an answer that looks whole), with
//! code `upstream_event_too_large`. So does an output past [`MAX_ACCUMULATED_BYTES`],
//! with code `output_too_large`: the text of every item is kept for its `.done` events
//! and `response.completed`, which repeats the whole output in one event. A failure
//! before any chunk with a choice comes after `response.created` and
//! `response.in_progress` all the same (the OpenAI SDK refuses a stream whose first
//! event is `response.failed`), of the error chunk's id and model when it has them.
//! [`Stream::ended_by_error`] says whether any of these happened. A tool call fragment
//! for a call whose start was not seen, or that is no longer open, is dropped. `[DONE]`
//! with no chunk before it still makes a whole, empty response. An upstream that
//! finishes the choice but closes without usage or `[DONE]` gets its response completed
//! by [`Stream::finish`]; one that closes before the choice finished, or whose
//! translation ended with an error, gets nothing added, so the client sees the answer
//! cut (the gateway adds its error unless one is out).

use super::chat::{self, ChunkReader, End, Fragment, Part, EVENT_TOO_LARGE, JOIN};
use super::json::{self, get, invalid, member, optional_string, str_at, string, text_member};
use super::map::{error_object, responses_status_of, upstream_message, Tokens};
use super::TranslateError;
use crate::format::anthropic_messages::push_event;
use crate::format::responses::TRANSLATED_REASONING;
use crate::llm::RawObject;
use crate::sse::SseParser;
use serde_json::{json, Map, Value};

/// The chat request for a Responses `body`; see the module docs.
pub fn request(
    body: &RawObject,
    model: &str,
    max_tokens: Option<u64>,
    stream: bool,
) -> Result<Vec<u8>, TranslateError> {
    let mut conversation = Chat::default();
    if let Some(instructions) = member(body, "instructions")? {
        let text = instructions
            .as_str()
            .ok_or_else(|| invalid("instructions", "must be a string"))?;
        if !text.is_empty() {
            conversation.push(json!({"role": "system", "content": text}));
        }
    }
    match member(body, "input")? {
        Some(Value::String(text)) => conversation.push(json!({"role": "user", "content": text})),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                push_item(item, &format!("input[{i}]"), &mut conversation)?;
            }
        }
        _ => return Err(invalid("input", "must be a string or an array of items")),
    }
    conversation.flush_images();
    let mut out = chat::request(model, conversation.messages, max_tokens, stream);
    chat::sampling(body, &mut out)?;
    let tools = tools(body)?;
    let choice = member(body, "tool_choice")?
        .map(|c| tool_choice(&c, &tools))
        .transpose()?;
    let parallel = member(body, "parallel_tool_calls")?
        .map(|p| {
            p.as_bool()
                .ok_or_else(|| invalid("parallel_tool_calls", "must be a boolean"))
        })
        .transpose()?;
    if !tools.is_empty() {
        out.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = choice {
            out.insert("tool_choice".into(), choice);
        }
        if let Some(parallel) = parallel {
            out.insert("parallel_tool_calls".into(), parallel.into());
        }
    }
    if let Some(effort) = reasoning_effort(body)? {
        out.insert("reasoning_effort".into(), effort.into());
    }
    if let Some(format) = response_format(body)? {
        out.insert("response_format".into(), format);
    }
    if let Some(user) = user(body)? {
        out.insert("user".into(), user.into());
    }
    Ok(Value::Object(out).to_string().into_bytes())
}

/// The chat messages being built.
#[derive(Default)]
struct Chat {
    messages: Vec<Value>,
    /// The image parts of the function call outputs since the last message that is not a
    /// tool message.
    images: Vec<Value>,
}

impl Chat {
    /// Appends a message that is not a tool message, after the images pending.
    fn push(&mut self, message: Value) {
        self.flush_images();
        self.messages.push(message);
    }

    /// The images of the last run of tool messages, as a user message.
    fn flush_images(&mut self) {
        if !self.images.is_empty() {
            let parts = std::mem::take(&mut self.images);
            self.messages
                .push(json!({"role": "user", "content": parts}));
        }
    }

    /// Adds a tool call to the last message when it is an assistant's, else to a new
    /// assistant message.
    fn call(&mut self, call: Value) {
        self.flush_images();
        let last = self
            .messages
            .last_mut()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
            .and_then(Value::as_object_mut);
        match last {
            Some(message) => match message.get_mut("tool_calls").and_then(Value::as_array_mut) {
                Some(calls) => calls.push(call),
                None => {
                    message.insert("tool_calls".into(), json!([call]));
                }
            },
            None => self
                .messages
                .push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
        }
    }
}

fn push_item(item: &Value, path: &str, conversation: &mut Chat) -> Result<(), TranslateError> {
    match optional_string(item, "type", path)?.unwrap_or("message") {
        "message" => push_message(item, path, conversation),
        "function_call" => {
            conversation.call(chat::tool_call(
                string(item, "call_id", path)?,
                string(item, "name", path)?,
                string(item, "arguments", path)?,
            ));
            Ok(())
        }
        "function_call_output" => {
            let call_id = string(item, "call_id", path)?;
            let output = parts(get(item, "output"), &format!("{path}.output"), true)?;
            let mut texts = Vec::new();
            for part in output {
                match part {
                    Part::Text(text) => texts.push(text),
                    image @ Part::Image { .. } => conversation.images.push(image.json()),
                }
            }
            conversation.messages.push(
                json!({"role": "tool", "tool_call_id": call_id, "content": texts.join(JOIN)}),
            );
            Ok(())
        }
        _ => Ok(()),
    }
}

fn push_message(item: &Value, path: &str, conversation: &mut Chat) -> Result<(), TranslateError> {
    let role = match string(item, "role", path)? {
        "developer" | "system" => "system",
        "user" => "user",
        "assistant" => "assistant",
        _ => {
            return Err(invalid(
                &format!("{path}.role"),
                "must be \"user\", \"assistant\", \"system\" or \"developer\"",
            ))
        }
    };
    let parts = parts(
        get(item, "content"),
        &format!("{path}.content"),
        role == "user",
    )?;
    if parts.is_empty() {
        return Ok(());
    }
    let content = chat::content(&parts);
    if role == "system" && content == "" {
        return Ok(());
    }
    conversation.push(json!({"role": role, "content": content}));
    Ok(())
}

/// The parts of `content` (a string or parts) at `path`; images only when `images`.
fn parts<'a>(
    content: Option<&'a Value>,
    path: &str,
    images: bool,
) -> Result<Vec<Part<'a>>, TranslateError> {
    let items = match content {
        Some(Value::String(text)) => return Ok(vec![Part::Text(text)]),
        Some(Value::Array(items)) => items,
        _ => {
            return Err(invalid(
                path,
                "must be a string or an array of content parts",
            ))
        }
    };
    let mut out = Vec::new();
    for (j, part) in items.iter().enumerate() {
        let path = format!("{path}[{j}]");
        match string(part, "type", &path)? {
            "input_text" | "output_text" => out.push(Part::Text(string(part, "text", &path)?)),
            "refusal" => out.push(Part::Text(string(part, "refusal", &path)?)),
            "input_image" if !images => {
                return Err(invalid(
                    &path,
                    "is an image, which a chat upstream takes in a user message only",
                ))
            }
            "input_image" => {
                let Some(url) = get(part, "image_url") else {
                    return Err(invalid(
                        &path,
                        "is an image given by `file_id`, which a chat upstream cannot fetch: send its `image_url`",
                    ));
                };
                let url = url
                    .as_str()
                    .ok_or_else(|| invalid(&format!("{path}.image_url"), "must be a string"))?;
                let detail = optional_string(part, "detail", &path)?;
                out.push(Part::Image {
                    url: url.to_owned(),
                    detail,
                });
            }
            kind @ ("input_file" | "input_audio") => {
                return Err(invalid(
                    &path,
                    &format!("is an `{kind}` part, which has no chat counterpart"),
                ))
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The function tools for the client's `function` tools.
fn tools(body: &RawObject) -> Result<Vec<Value>, TranslateError> {
    chat::function_tools(body, |tool, path| {
        if string(tool, "type", path)? != "function" {
            return Ok(None);
        }
        let mut function = chat::function(tool, path, "parameters")?;
        if let Some(strict) = get(tool, "strict") {
            let strict = strict
                .as_bool()
                .ok_or_else(|| invalid(&format!("{path}.strict"), "must be a boolean"))?;
            function.insert("strict".into(), strict.into());
        }
        Ok(Some(function))
    })
}

/// The chat `tool_choice` for the client's, checked against the tools sent.
fn tool_choice(choice: &Value, tools: &[Value]) -> Result<Value, TranslateError> {
    if let Some(mode) = choice.as_str() {
        return match mode {
            "auto" | "required" | "none" => Ok(choice.clone()),
            _ => Err(invalid(
                "tool_choice",
                "must be \"auto\", \"required\", \"none\" or a function",
            )),
        };
    }
    if string(choice, "type", "tool_choice")? != "function" {
        return Err(invalid(
            "tool_choice.type",
            "must be \"function\": only function tools are sent to a chat upstream",
        ));
    }
    let name = string(choice, "name", "tool_choice")?;
    chat::chosen(
        tools,
        name,
        "must name a function tool in `tools` (namespace and built-in tools are not sent to a chat upstream)",
    )
}

fn reasoning_effort(body: &RawObject) -> Result<Option<String>, TranslateError> {
    let Some(reasoning) = member(body, "reasoning")? else {
        return Ok(None);
    };
    if !reasoning.is_object() {
        return Err(invalid("reasoning", "must be an object"));
    }
    Ok(optional_string(&reasoning, "effort", "reasoning")?.map(str::to_owned))
}

fn response_format(body: &RawObject) -> Result<Option<Value>, TranslateError> {
    let Some(text) = member(body, "text")? else {
        return Ok(None);
    };
    if !text.is_object() {
        return Err(invalid("text", "must be an object"));
    }
    let Some(format) = get(&text, "format") else {
        return Ok(None);
    };
    match string(format, "type", "text.format")? {
        "text" => Ok(None),
        "json_object" => Ok(Some(json!({"type": "json_object"}))),
        "json_schema" => {
            let mut schema = Map::new();
            schema.insert("name".into(), string(format, "name", "text.format")?.into());
            if let Some(description) = optional_string(format, "description", "text.format")? {
                schema.insert("description".into(), description.into());
            }
            let Some(body) = get(format, "schema").filter(|s| s.is_object()) else {
                return Err(invalid("text.format.schema", "must be an object"));
            };
            schema.insert("schema".into(), body.clone());
            if let Some(strict) = get(format, "strict") {
                let strict = strict
                    .as_bool()
                    .ok_or_else(|| invalid("text.format.strict", "must be a boolean"))?;
                schema.insert("strict".into(), strict.into());
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": schema})))
        }
        _ => Err(invalid(
            "text.format.type",
            "must be \"text\", \"json_object\" or \"json_schema\"",
        )),
    }
}

fn user(body: &RawObject) -> Result<Option<String>, TranslateError> {
    for name in ["user", "safety_identifier"] {
        if let Some(v) = member(body, name)? {
            let Value::String(user) = v else {
                return Err(invalid(name, "must be a string"));
            };
            return Ok(Some(user));
        }
    }
    Ok(None)
}

/// The output item id of a function call with `call_id`.
fn call_item_id(call_id: &str) -> String {
    format!("fc_{call_id}")
}

fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [{"type": "summary_text", "text": text}]})
}

fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}

fn message_item(id: &str, status: &str, content: &[Value]) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": content})
}

fn call_item(call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": call_item_id(call_id), "call_id": call_id,
           "name": name, "arguments": arguments, "status": status})
}

/// How far a response has come.
enum Status<'a> {
    InProgress,
    /// The status and `incomplete_details.reason` of a whole answer.
    Done(&'static str, Option<&'static str>),
    /// An error's code and message.
    Failed(&'a str, &'a str),
}

/// What every response object of one answer repeats.
#[derive(Debug, Default)]
struct Ident {
    id: String,
    created_at: u64,
    model: String,
}

impl Ident {
    fn object(&self, status: Status<'_>, output: &[Value], usage: Value) -> Value {
        let (status, incomplete, error) = match status {
            Status::InProgress => ("in_progress", Value::Null, Value::Null),
            Status::Done(status, reason) => (
                status,
                reason.map_or(Value::Null, |r| json!({"reason": r})),
                Value::Null,
            ),
            Status::Failed(code, message) => (
                "failed",
                Value::Null,
                json!({"code": code, "message": message}),
            ),
        };
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": error,
            "incomplete_details": incomplete,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": true,
            "tool_choice": "auto",
            "tools": [],
            "usage": usage,
        })
    }
}

/// The Responses `response` object for a `chat.completion` body, created at
/// `created_at` (Unix seconds); see the module docs.
pub fn response_at(body: &[u8], created_at: u64) -> Result<Vec<u8>, TranslateError> {
    let answer = json::answer(body)?;
    let (choice, message) = chat::choice(&answer)?;
    let mut output = Vec::new();
    if let Some(text) = text_member(message, "reasoning_content") {
        output.push(reasoning_item(
            &format!("{TRANSLATED_REASONING}{}", output.len()),
            text,
        ));
    }
    if let Some(text) = text_member(message, "content") {
        let id = format!("msg_{}", output.len());
        output.push(message_item(&id, "completed", &[output_text(text)]));
    }
    for call in chat::calls(message)? {
        output.push(call_item(call.id, call.name, call.arguments, "completed"));
    }
    let (status, reason) = responses_status_of(chat::finish_reason(choice));
    let usage = get(&answer, "usage").map_or(Value::Null, |u| Tokens::from_chat(u).responses());
    let ident = Ident {
        id: chat::prefixed("resp_", str_at(&answer, "/id")),
        created_at,
        model: str_at(&answer, "/model").to_owned(),
    };
    let response = ident.object(Status::Done(status, reason), &output, usage);
    Ok(response.to_string().into_bytes())
}

/// An error `code` as text: a string as it is, a number as its digits.
fn code_text(code: &Value) -> Option<String> {
    match code {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The OpenAI error `type` for an HTTP status.
fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        500.. => "server_error",
        _ => "invalid_request_error",
    }
}

/// The Responses error body for an upstream error answer with `status` and `body`.
pub fn error(status: u16, body: &[u8]) -> Vec<u8> {
    let upstream = error_object(body);
    let field = |key: &str| upstream.as_ref().and_then(|e| e.get(key));
    let message = upstream_message(status, body);
    let kind = field("type")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| error_type(status));
    let code = field("code")
        .and_then(code_text)
        .or_else(|| (status == 429).then(|| "rate_limit_exceeded".to_owned()));
    let param = field("param").and_then(Value::as_str);
    json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
        .to_string()
        .into_bytes()
}

/// Translates a `chat.completion.chunk` stream into Responses events; see the module
/// docs.
#[derive(Debug)]
pub struct Stream {
    parser: SseParser,
    state: State,
}

/// The code of the `response.failed` event that ends the translation at an upstream
/// event larger than [`MAX_EVENT_BYTES`](crate::sse::MAX_EVENT_BYTES), which the parser
/// skips; its message is [`EVENT_TOO_LARGE`].
const EVENT_TOO_LARGE_CODE: &str = "upstream_event_too_large";

/// The code of a `response.failed` event for an error chunk without one.
const SERVER_ERROR: &str = "server_error";

/// The most output a [`Stream`] holds, in bytes as `response.completed` carries it: the
/// texts and arguments escaped for JSON, each item's call id (twice) and name, 160
/// bytes for each item's other members, and the response's id and model.
///
/// `response.completed` repeats the whole output in one event, and it must stay below
/// what a reader of the client's format takes: the gateway reads the stream it relays
/// with an SSE parser that skips an event over [`MAX_EVENT_BYTES`](crate::sse::MAX_EVENT_BYTES)
/// (1 MiB), and would then see an answer neither complete nor with its usage. So the
/// bound is on that event, not on memory: 768 KiB leaves room for the rest of it (its
/// type, status and usage, under 1 KiB) inside 1 MiB, whatever the text's escaping. A
/// longer answer ends with `response.failed`, code `output_too_large`.
pub const MAX_ACCUMULATED_BYTES: usize = 768 * 1024;

/// Bytes an output item takes in `response.completed` besides its texts, call id and
/// name, at most: a `message` item's members take 132, its output index up to 20
/// digits, and a comma separates it from the item before.
const ITEM_BYTES: usize = 160;

/// The code and message of the `response.failed` event that ends the translation at an
/// output past [`MAX_ACCUMULATED_BYTES`].
const OUTPUT_TOO_LARGE: (&str, &str) = (
    "output_too_large",
    "the answer is larger than the gateway can translate into one Responses event",
);

/// The bytes `text` takes in a JSON string as `serde_json` escapes it, quotes left out.
fn json_len(text: &str) -> usize {
    text.bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum()
}

impl Stream {
    /// A translator whose responses say they were created at `created_at` (Unix
    /// seconds).
    pub fn at(created_at: u64) -> Self {
        let ident = Ident {
            created_at,
            ..Ident::default()
        };
        Self {
            parser: SseParser::default(),
            state: State {
                ident,
                ..State::default()
            },
        }
    }

    /// Reads an upstream chunk (any boundaries); appends the events it completes.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        chat::read_chunks(&mut self.parser, &mut self.state, chunk, out);
    }

    /// The upstream stream ended: completes the response when the choice finished but
    /// neither the usage nor `[DONE]` came after; appends nothing when it did not finish
    /// (a cut answer).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.state.finish(out);
    }

    /// Whether the translation ended with `response.failed`: the upstream's error chunk,
    /// an upstream event too large to read, or an output past
    /// [`MAX_ACCUMULATED_BYTES`].
    pub fn ended_by_error(&self) -> bool {
        self.state.ended_by_error()
    }
}

/// An output item being streamed, with its text so far.
#[derive(Debug)]
enum Item {
    Reasoning(String),
    Message(String),
    /// The chat tool call `index`.
    Call {
        index: u64,
        call_id: String,
        name: String,
        arguments: String,
    },
}

#[derive(Debug, Default)]
struct State {
    ident: Ident,
    /// `response.created` is out.
    started: bool,
    /// The sequence number of the next event.
    sequence: u64,
    /// The closed output items, as `response.output_item.done` gave them.
    done: Vec<Value>,
    open: Option<Item>,
    /// The status and incomplete reason of the choice's `finish_reason`, once seen.
    finish: Option<(&'static str, Option<&'static str>)>,
    /// From the last chunk that carried usage.
    tokens: Option<Tokens>,
    /// The output so far, counted as [`MAX_ACCUMULATED_BYTES`] says.
    accumulated: usize,
    /// Set once the response ended, with `response.completed` or `response.incomplete`
    /// ([`End::Done`]) or `response.failed` ([`End::Failed`]): the rest of the input is
    /// ignored.
    ended: Option<End>,
}

impl ChunkReader for State {
    fn ended(&self) -> Option<End> {
        self.ended
    }

    fn choice_finished(&self) -> bool {
        self.finish.is_some()
    }

    /// `response.created` and `response.in_progress`, once.
    fn start(&mut self, id: &str, model: &str, out: &mut String) {
        if self.started {
            return;
        }
        self.started = true;
        self.ident.id = chat::prefixed("resp_", id);
        self.ident.model = model.to_owned();
        self.accumulated = json_len(&self.ident.id) + json_len(model);
        for kind in ["response.created", "response.in_progress"] {
            let response = self.ident.object(Status::InProgress, &[], Value::Null);
            self.emit(kind, json!({"response": response}), out);
        }
    }

    /// Closes the open item, then `response.completed` (or `response.incomplete`),
    /// unless the response ended.
    fn end(&mut self, out: &mut String) {
        if self.ended.is_some() {
            return;
        }
        self.close(out);
        let (status, reason) = self.finish.unwrap_or(("completed", None));
        let usage = self.tokens.map_or(Value::Null, |t| t.responses());
        let response = self
            .ident
            .object(Status::Done(status, reason), &self.done, usage);
        let kind = if reason.is_some() {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.emit(kind, json!({"response": response}), out);
        self.ended = Some(End::Done);
    }

    fn error(&mut self, id: &str, model: &str, error: &Value, message: &str, out: &mut String) {
        let code = error
            .get("code")
            .and_then(code_text)
            .unwrap_or_else(|| SERVER_ERROR.to_owned());
        self.start(id, model, out);
        self.fail(&code, message, out);
    }

    fn too_large(&mut self, out: &mut String) {
        self.fail(EVENT_TOO_LARGE_CODE, EVENT_TOO_LARGE, out);
    }

    fn usage(&mut self, tokens: Tokens) {
        self.tokens = Some(tokens);
    }

    /// Reasoning (`reasoning`) or answer text, in the item of its kind.
    fn text(&mut self, reasoning: bool, text: &str, out: &mut String) {
        let same = matches!(
            (&self.open, reasoning),
            (Some(Item::Reasoning(_)), true) | (Some(Item::Message(_)), false)
        );
        if !same {
            let item = if reasoning {
                Item::Reasoning(String::new())
            } else {
                Item::Message(String::new())
            };
            self.open(item, out);
        }
        let id = self.open.as_ref().map(|item| self.item_id(item));
        let index = self.index();
        let (kind, members) = match &mut self.open {
            Some(Item::Reasoning(so_far)) => {
                so_far.push_str(text);
                (
                    "response.reasoning_summary_text.delta",
                    json!({"item_id": id, "output_index": index, "summary_index": 0,
                           "delta": text}),
                )
            }
            Some(Item::Message(so_far)) => {
                so_far.push_str(text);
                (
                    "response.output_text.delta",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                           "delta": text, "logprobs": []}),
                )
            }
            _ => return,
        };
        self.grow(json_len(text), out);
        self.emit(kind, members, out);
    }

    /// A tool call fragment, the `position`th of its chunk: a new call (it has an `id`
    /// and a name) opens a `function_call` item; arguments go out as they come.
    fn tool_call(&mut self, call: &Value, position: usize, out: &mut String) {
        let call = Fragment::of(call, position);
        let continues = matches!(&self.open, Some(Item::Call { index, call_id, .. })
            if call.continues(*index, call_id));
        if !continues {
            let (Some(id), Some(name)) = (call.id, call.name) else {
                return;
            };
            let item = Item::Call {
                index: call.index,
                call_id: id.to_owned(),
                name: name.to_owned(),
                arguments: String::new(),
            };
            self.open(item, out);
        }
        let Some(partial) = call.arguments else {
            return;
        };
        let index = self.index();
        if let Some(Item::Call {
            call_id, arguments, ..
        }) = &mut self.open
        {
            arguments.push_str(partial);
            let id = call_item_id(call_id);
            self.grow(json_len(partial), out);
            self.emit(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": index, "delta": partial}),
                out,
            );
        }
    }

    fn finished(&mut self, reason: &str, out: &mut String) {
        self.close(out);
        self.finish = Some(responses_status_of(reason));
    }

    /// At the first chunk carrying usage once the choice finished, the response ends.
    fn chunk_read(&mut self, usage: bool, out: &mut String) {
        if usage && self.finish.is_some() {
            self.end(out);
        }
    }
}

impl State {
    /// Appends the event `kind` with `members` (an object) after its type and sequence
    /// number; nothing once the response ended (the rest of a chunk whose output went
    /// past the bound).
    fn emit(&mut self, kind: &str, members: Value, out: &mut String) {
        if self.ended.is_some() {
            return;
        }
        let mut event = Map::new();
        event.insert("type".into(), kind.into());
        event.insert("sequence_number".into(), self.sequence.into());
        if let Value::Object(members) = members {
            event.extend(members);
        }
        self.sequence = self.sequence.saturating_add(1);
        push_event(out, kind, &Value::Object(event));
    }

    /// `response.failed` with `code` and `message`, which ends the translation, unless
    /// it has ended; after `response.created` and `response.in_progress` when they are
    /// not out.
    fn fail(&mut self, code: &str, message: &str, out: &mut String) {
        if self.ended.is_some() {
            return;
        }
        self.start("", "", out);
        let usage = self.tokens.map_or(Value::Null, |t| t.responses());
        let response = self.ident.object(Status::Failed(code, message), &[], usage);
        self.emit("response.failed", json!({"response": response}), out);
        self.ended = Some(End::Failed);
    }

    /// Counts `bytes` more output; past [`MAX_ACCUMULATED_BYTES`], `response.failed`.
    fn grow(&mut self, bytes: usize, out: &mut String) {
        self.accumulated = self.accumulated.saturating_add(bytes);
        if self.accumulated > MAX_ACCUMULATED_BYTES {
            let (code, message) = OUTPUT_TOO_LARGE;
            self.fail(code, message, out);
        }
    }

    /// The output index of the open item (or of the next one).
    fn index(&self) -> usize {
        self.done.len()
    }

    /// The id of `item` at the open item's output index.
    fn item_id(&self, item: &Item) -> String {
        match item {
            Item::Reasoning(_) => format!("{TRANSLATED_REASONING}{}", self.index()),
            Item::Message(_) => format!("msg_{}", self.index()),
            Item::Call { call_id, .. } => call_item_id(call_id),
        }
    }

    /// Closes the open item: its text's `.done` events and `response.output_item.done`.
    fn close(&mut self, out: &mut String) {
        let Some(item) = self.open.take() else {
            return;
        };
        let id = self.item_id(&item);
        let index = self.index();
        let done = match &item {
            Item::Reasoning(text) => {
                let at = json!({"item_id": id, "output_index": index, "summary_index": 0});
                let part = json!({"type": "summary_text", "text": text});
                self.emit(
                    "response.reasoning_summary_text.done",
                    with(&at, json!({"text": text})),
                    out,
                );
                self.emit(
                    "response.reasoning_summary_part.done",
                    with(&at, json!({"part": part})),
                    out,
                );
                reasoning_item(&id, text)
            }
            Item::Message(text) => {
                let at = json!({"item_id": id, "output_index": index, "content_index": 0});
                self.emit(
                    "response.output_text.done",
                    with(&at, json!({"text": text, "logprobs": []})),
                    out,
                );
                self.emit(
                    "response.content_part.done",
                    with(&at, json!({"part": output_text(text)})),
                    out,
                );
                message_item(&id, "completed", &[output_text(text)])
            }
            Item::Call {
                call_id,
                name,
                arguments,
                ..
            } => {
                self.emit(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": index, "arguments": arguments}),
                    out,
                );
                call_item(call_id, name, arguments, "completed")
            }
        };
        self.emit(
            "response.output_item.done",
            json!({"output_index": index, "item": done}),
            out,
        );
        self.done.push(done);
    }

    /// Closes the open item and opens `item`: `response.output_item.added`, and the
    /// added part of a text item.
    fn open(&mut self, item: Item, out: &mut String) {
        self.close(out);
        let id = self.item_id(&item);
        let index = self.index();
        let (added, part) = match &item {
            Item::Reasoning(_) => (
                json!({"type": "reasoning", "id": id, "summary": []}),
                Some((
                    "response.reasoning_summary_part.added",
                    json!({"item_id": id, "output_index": index, "summary_index": 0,
                           "part": {"type": "summary_text", "text": ""}}),
                )),
            ),
            Item::Message(_) => (
                message_item(&id, "in_progress", &[]),
                Some((
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                           "part": output_text("")}),
                )),
            ),
            Item::Call { call_id, name, .. } => (call_item(call_id, name, "", "in_progress"), None),
        };
        let named = match &item {
            Item::Call { call_id, name, .. } => 2 * json_len(call_id) + json_len(name),
            Item::Reasoning(_) | Item::Message(_) => 0,
        };
        self.grow(ITEM_BYTES + named, out);
        self.emit(
            "response.output_item.added",
            json!({"output_index": index, "item": added}),
            out,
        );
        if let Some((kind, members)) = part {
            self.emit(kind, members, out);
        }
        self.open = Some(item);
    }
}

/// The members of `at` (an object) followed by those of `members`.
fn with(at: &Value, members: Value) -> Value {
    let mut out = at.as_object().cloned().unwrap_or_default();
    if let Value::Object(members) = members {
        out.extend(members);
    }
    Value::Object(out)
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

    /// `(members of a Responses body, members after `"model":"gpt-5"` of the chat body)`.
    fn assert_requests(cases: &[(&str, &str)]) {
        for (members, want) in cases {
            assert_eq!(
                chat(&format!("{{{members}}}")),
                format!(r#"{{"model":"gpt-5",{want}}}"#),
                "{members}"
            );
        }
    }

    const HI: &str = r#""messages":[{"role":"user","content":"hi"}]"#;

    #[test]
    fn instructions_and_a_string_input_become_system_and_user_messages() {
        assert_requests(&[
            (
                r#""model":"a/b","instructions":"Be brief.","input":"hi""#,
                r#""messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}]"#,
            ),
            (r#""instructions":"","input":"hi""#, HI),
            (r#""instructions":null,"input":"hi""#, HI),
            (r#""input":[{"role":"user","content":"hi"}]"#, HI),
            (
                r#""input":[{"type":"message","role":"user","content":"hi","id":"msg_1","status":"completed"}]"#,
                HI,
            ),
        ]);
    }

    #[test]
    fn message_roles_map_where_they_stand() {
        assert_requests(&[
            (
                r#""input":[{"role":"user","content":"hi"},{"role":"developer","content":[{"type":"input_text","text":"Dev."}]},{"role":"system","content":"Sys."},{"role":"assistant","content":[{"type":"output_text","text":"Hello.","annotations":[]}]}]"#,
                r#""messages":[{"role":"user","content":"hi"},{"role":"system","content":"Dev."},{"role":"system","content":"Sys."},{"role":"assistant","content":"Hello."}]"#,
            ),
            (
                r#""input":[{"role":"developer","content":""},{"role":"system","content":[]},{"role":"assistant","content":[{"type":"unknown_part"}]},{"role":"user","content":""}]"#,
                r#""messages":[{"role":"user","content":""}]"#,
            ),
        ]);
    }

    #[test]
    fn content_parts_become_text_or_image_parts() {
        assert_requests(&[
            (
                r#""input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]}]"#,
                r#""messages":[{"role":"user","content":"a\n\nb"}]"#,
            ),
            (
                r#""input":[{"role":"user","content":[{"type":"input_text","text":"What is this?"},{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo=","detail":"high"},{"type":"input_image","image_url":"https://example.com/cat.jpg"},{"type":"input_image","image_url":"https://example.com/dog.jpg","detail":null,"file_id":null}]}]"#,
                r#""messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo=","detail":"high"}},{"type":"image_url","image_url":{"url":"https://example.com/cat.jpg"}},{"type":"image_url","image_url":{"url":"https://example.com/dog.jpg"}}]}]"#,
            ),
            (
                r#""input":[{"role":"assistant","content":[{"type":"output_text","text":"One."},{"type":"refusal","refusal":"I cannot."}]}]"#,
                r#""messages":[{"role":"assistant","content":"One.\n\nI cannot."}]"#,
            ),
            (
                r#""input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"computer_screenshot","image_url":"x"}]}]"#,
                r#""messages":[{"role":"user","content":"a"}]"#,
            ),
        ]);
    }

    #[test]
    fn function_calls_join_the_assistant_message_before_them() {
        let call = |id: &str, name: &str, arguments: &str| {
            format!(
                r#"{{"type":"function_call","id":"fc_{id}","call_id":"{id}","name":"{name}","arguments":{arguments},"status":"completed"}}"#
            )
        };
        let chat_call = |id: &str, name: &str, arguments: &str| {
            format!(
                r#"{{"id":"{id}","type":"function","function":{{"name":"{name}","arguments":{arguments}}}}}"#
            )
        };
        let output = |id: &str, output: &str| {
            format!(r#"{{"type":"function_call_output","call_id":"{id}","output":{output}}}"#)
        };
        let tool = |id: &str, content: &str| {
            format!(r#"{{"role":"tool","tool_call_id":"{id}","content":{content}}}"#)
        };
        let a = call("call_a", "ls", r#""{\"path\":\".\"}""#);
        let b = call("call_b", "now", r#""{}""#);
        let chat_a = chat_call("call_a", "ls", r#""{\"path\":\".\"}""#);
        let chat_b = chat_call("call_b", "now", r#""{}""#);
        let text = r#"{"role":"assistant","content":[{"type":"output_text","text":"Checking."}]}"#;
        let reasoning =
            r#"{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAA"}"#;
        let cases = [
            (
                format!(r#""input":[{text},{reasoning},{a},{b}]"#),
                format!(
                    r#""messages":[{{"role":"assistant","content":"Checking.","tool_calls":[{chat_a},{chat_b}]}}]"#
                ),
            ),
            (
                format!(
                    r#""input":[{a},{},{},{b}]"#,
                    output("call_a", r#""a.txt""#),
                    r#"{"role":"user","content":"next"}"#
                ),
                format!(
                    r#""messages":[{{"role":"assistant","content":null,"tool_calls":[{chat_a}]}},{},{{"role":"user","content":"next"}},{{"role":"assistant","content":null,"tool_calls":[{chat_b}]}}]"#,
                    tool("call_a", r#""a.txt""#)
                ),
            ),
            (
                format!(
                    r#""input":[{a},{b},{},{},{}]"#,
                    output(
                        "call_a",
                        r#"[{"type":"input_text","text":"Shot:"},{"type":"input_image","image_url":"data:image/png;base64,AA==","detail":"auto"},{"type":"input_text","text":"done"}]"#
                    ),
                    output(
                        "call_b",
                        r#"[{"type":"input_image","image_url":"https://example.com/b.png"}]"#
                    ),
                    call("call_c", "ls", r#""{}""#)
                ),
                format!(
                    r#""messages":[{{"role":"assistant","content":null,"tool_calls":[{chat_a},{chat_b}]}},{},{},{{"role":"user","content":[{{"type":"image_url","image_url":{{"url":"data:image/png;base64,AA==","detail":"auto"}}}},{{"type":"image_url","image_url":{{"url":"https://example.com/b.png"}}}}]}},{{"role":"assistant","content":null,"tool_calls":[{}]}}]"#,
                    tool("call_a", r#""Shot:\n\ndone""#),
                    tool("call_b", r#""""#),
                    chat_call("call_c", "ls", r#""{}""#)
                ),
            ),
            (
                format!(
                    r#""input":[{a},{}]"#,
                    output(
                        "call_a",
                        r#"[{"type":"input_image","image_url":"https://example.com/a.png"},{"type":"output_text","text":"seen"}]"#
                    )
                ),
                format!(
                    r#""messages":[{{"role":"assistant","content":null,"tool_calls":[{chat_a}]}},{},{{"role":"user","content":[{{"type":"image_url","image_url":{{"url":"https://example.com/a.png"}}}}]}}]"#,
                    tool("call_a", r#""seen""#)
                ),
            ),
        ];
        for (members, want) in cases {
            assert_requests(&[(members.as_str(), want.as_str())]);
        }
    }

    #[test]
    fn reasoning_and_items_without_a_chat_counterpart_are_dropped() {
        let items = [
            r#"{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"hmm"}],"encrypted_content":"gAAAA"}"#,
            r#"{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"q"}}"#,
            r#"{"type":"local_shell_call","id":"lsh_1","call_id":"c1","action":{"type":"exec","command":["ls"]},"status":"completed"}"#,
            r#"{"type":"local_shell_call_output","call_id":"c1","output":"x"}"#,
            r#"{"type":"custom_tool_call","call_id":"c2","name":"apply_patch","input":"*** Begin Patch"}"#,
            r#"{"type":"custom_tool_call_output","call_id":"c2","output":"ok"}"#,
            r#"{"type":"item_reference","id":"msg_9"}"#,
            r#"{"type":"compaction","encrypted_content":"gAAAA"}"#,
        ]
        .join(",");
        assert_requests(&[(
            &format!(r#""input":[{items},{{"role":"user","content":"hi"}}]"#),
            HI,
        )]);
    }

    const NOW: &str =
        r#"{"type":"function","function":{"name":"now","parameters":{"type":"object"}}}"#;

    #[test]
    fn function_tools_are_sent_and_namespace_and_built_in_tools_dropped() {
        let tools = [
            r#"{"type":"function","name":"lookup","description":"Looks up.","parameters":{"type":"object","properties":{"q":{"type":"string"}}},"strict":true}"#,
            r#"{"type":"namespace","name":"multi_agent_v1","description":"Agents.","tools":[{"type":"function","name":"close_agent","parameters":{"type":"object"}}]}"#,
            r#"{"type":"web_search","external_web_access":false}"#,
            r#"{"type":"file_search","vector_store_ids":["vs_1"]}"#,
            r#"{"type":"local_shell"}"#,
            r#"{"type":"custom","name":"apply_patch","format":{"type":"grammar"}}"#,
            r#"{"type":"image_generation"}"#,
            r#"{"type":"mcp","server_label":"x","server_url":"https://mcp.example.com"}"#,
            r#"{"type":"function","name":"now","parameters":{"type":"object"}}"#,
            r#"{"type":"function","name":"bare","description":null,"parameters":null,"strict":null}"#,
        ]
        .join(",");
        assert_requests(&[(
            &format!(r#""input":"hi","tools":[{tools}]"#),
            &format!(
                r#"{HI},"tools":[{{"type":"function","function":{{"name":"lookup","description":"Looks up.","parameters":{{"type":"object","properties":{{"q":{{"type":"string"}}}}}},"strict":true}}}},{NOW},{{"type":"function","function":{{"name":"bare"}}}}]"#
            ),
        )]);
    }

    #[test]
    fn tool_choice_and_parallel_calls_map_while_tools_remain() {
        let now = r#"{"type":"function","name":"now","parameters":{"type":"object"}}"#;
        let cases = [
            (r#""auto""#, r#","tool_choice":"auto""#),
            (r#""required""#, r#","tool_choice":"required""#),
            (r#""none""#, r#","tool_choice":"none""#),
            (
                r#"{"type":"function","name":"now"}"#,
                r#","tool_choice":{"type":"function","function":{"name":"now"}}"#,
            ),
        ];
        for (choice, tail) in cases {
            assert_requests(&[(
                &format!(
                    r#""input":"hi","tools":[{now}],"tool_choice":{choice},"parallel_tool_calls":false"#
                ),
                &format!(r#"{HI},"tools":[{NOW}]{tail},"parallel_tool_calls":false"#),
            )]);
        }
        assert_requests(&[
            (
                r#""input":"hi","tools":[{"type":"web_search"}],"tool_choice":"required","parallel_tool_calls":true"#,
                HI,
            ),
            (
                &format!(r#""input":"hi","tools":[{now}],"parallel_tool_calls":true"#),
                &format!(r#"{HI},"tools":[{NOW}],"parallel_tool_calls":true"#),
            ),
            (
                &format!(r#""input":"hi","tools":[{now}],"tool_choice":null"#),
                &format!(r#"{HI},"tools":[{NOW}]"#),
            ),
        ]);
    }

    #[test]
    fn reasoning_text_format_sampling_and_user_map_by_name() {
        assert_requests(&[
            (
                r#""input":"hi","reasoning":{"effort":"minimal","summary":"auto"}"#,
                &format!(r#"{HI},"reasoning_effort":"minimal""#),
            ),
            (
                r#""input":"hi","reasoning":{"effort":"high"}"#,
                &format!(r#"{HI},"reasoning_effort":"high""#),
            ),
            (
                r#""input":"hi","reasoning":{"effort":"xhigh"}"#,
                &format!(r#"{HI},"reasoning_effort":"xhigh""#),
            ),
            (r#""input":"hi","reasoning":{"summary":"detailed"}"#, HI),
            (
                r#""input":"hi","text":{"format":{"type":"json_schema","name":"answer","description":"The answer.","schema":{"type":"object","properties":{"a":{"type":"string"}}},"strict":true},"verbosity":"low"}"#,
                &format!(
                    r#"{HI},"response_format":{{"type":"json_schema","json_schema":{{"name":"answer","description":"The answer.","schema":{{"type":"object","properties":{{"a":{{"type":"string"}}}}}},"strict":true}}}}"#
                ),
            ),
            (
                r#""input":"hi","text":{"format":{"type":"json_schema","name":"answer","schema":{}}}"#,
                &format!(
                    r#"{HI},"response_format":{{"type":"json_schema","json_schema":{{"name":"answer","schema":{{}}}}}}"#
                ),
            ),
            (
                r#""input":"hi","text":{"format":{"type":"json_object"}}"#,
                &format!(r#"{HI},"response_format":{{"type":"json_object"}}"#),
            ),
            (r#""input":"hi","text":{"format":{"type":"text"}}"#, HI),
            (r#""input":"hi","text":{"verbosity":"high"}"#, HI),
            (
                r#""input":"hi","temperature":0.2,"top_p":0.9,"user":"u1","safety_identifier":"s1""#,
                &format!(r#"{HI},"temperature":0.2,"top_p":0.9,"user":"u1""#),
            ),
            (
                r#""input":"hi","safety_identifier":"s1""#,
                &format!(r#"{HI},"user":"s1""#),
            ),
            (
                r#""input":"hi","temperature":null,"top_p":null,"reasoning":null,"text":null,"user":null,"tools":null"#,
                HI,
            ),
        ]);
    }

    #[test]
    fn members_without_a_chat_counterpart_are_dropped() {
        assert_requests(&[(
            r#""input":"hi","store":false,"include":["reasoning.encrypted_content"],"prompt_cache_key":"k","client_metadata":{"turn_id":"t"},"metadata":{"a":"b"},"service_tier":"auto","truncation":"auto","background":false,"previous_response_id":null,"top_logprobs":2,"max_tool_calls":3,"stream_options":{"include_obfuscation":false},"stream":true,"max_output_tokens":100,"conversation":null"#,
            HI,
        )]);
    }

    #[test]
    fn members_come_out_in_the_fixed_order() {
        let body = r#"{"user":"u","text":{"format":{"type":"json_object"}},"reasoning":{"effort":"low"},"parallel_tool_calls":false,"tool_choice":"auto","tools":[{"type":"function","name":"now","parameters":{"type":"object"}}],"top_p":0.5,"temperature":1,"input":"hi","instructions":"s","max_output_tokens":5000,"stream":true,"model":"a/b"}"#;
        assert_eq!(
            chat_request(body, Some(1000), true),
            format!(
                r#"{{"model":"gpt-5","messages":[{{"role":"system","content":"s"}},{{"role":"user","content":"hi"}}],"max_tokens":1000,"stream":true,"stream_options":{{"include_usage":true}},"temperature":1,"top_p":0.5,"tools":[{NOW}],"tool_choice":"auto","parallel_tool_calls":false,"reasoning_effort":"low","response_format":{{"type":"json_object"}},"user":"u"}}"#
            )
        );
    }

    #[test]
    fn malformed_or_untranslatable_requests_are_refused_naming_the_member() {
        let cases = [
            (r#""input":{}"#, "`input` must be a string or an array of items"),
            (r#""input":5"#, "`input` must be a string or an array of items"),
            (r#""instructions":["a"],"input":"hi""#, "`instructions` must be a string"),
            (r#""input":[{"type":7}]"#, "`input[0].type` must be a string"),
            (r#""input":[{"content":"hi"}]"#, "`input[0].role` must be a string"),
            (
                r#""input":[{"role":"tool","content":"hi"}]"#,
                r#"`input[0].role` must be "user", "assistant", "system" or "developer""#,
            ),
            (
                r#""input":[{"role":"user"}]"#,
                "`input[0].content` must be a string or an array of content parts",
            ),
            (
                r#""input":[{"role":"user","content":[{"text":"x"}]}]"#,
                "`input[0].content[0].type` must be a string",
            ),
            (
                r#""input":[{"role":"user","content":[{"type":"input_text"}]}]"#,
                "`input[0].content[0].text` must be a string",
            ),
            (
                r#""input":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"input_text","text":"x"},{"type":"input_image","file_id":"file_1","detail":"auto"}]}]"#,
                "`input[1].content[1]` is an image given by `file_id`, which a chat upstream cannot fetch: send its `image_url`",
            ),
            (
                r#""input":[{"role":"user","content":[{"type":"input_image","image_url":{"url":"x"}}]}]"#,
                "`input[0].content[0].image_url` must be a string",
            ),
            (
                r#""input":[{"role":"user","content":[{"type":"input_image","image_url":"x","detail":1}]}]"#,
                "`input[0].content[0].detail` must be a string",
            ),
            (
                r#""input":[{"role":"developer","content":[{"type":"input_image","image_url":"x"}]}]"#,
                "`input[0].content[0]` is an image, which a chat upstream takes in a user message only",
            ),
            (
                r#""input":[{"role":"assistant","content":[{"type":"input_image","image_url":"x"}]}]"#,
                "`input[0].content[0]` is an image, which a chat upstream takes in a user message only",
            ),
            (
                r#""input":[{"role":"user","content":[{"type":"input_file","file_id":"file_1"}]}]"#,
                "`input[0].content[0]` is an `input_file` part, which has no chat counterpart",
            ),
            (
                r#""input":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AA==","format":"wav"}}]}]"#,
                "`input[0].content[0]` is an `input_audio` part, which has no chat counterpart",
            ),
            (
                r#""input":[{"type":"function_call","name":"ls","arguments":"{}"}]"#,
                "`input[0].call_id` must be a string",
            ),
            (
                r#""input":[{"type":"function_call","call_id":"c","arguments":"{}"}]"#,
                "`input[0].name` must be a string",
            ),
            (
                r#""input":[{"type":"function_call","call_id":"c","name":"ls","arguments":{}}]"#,
                "`input[0].arguments` must be a string",
            ),
            (
                r#""input":[{"type":"function_call_output","output":"x"}]"#,
                "`input[0].call_id` must be a string",
            ),
            (
                r#""input":[{"type":"function_call_output","call_id":"c","output":{"text":"x"}}]"#,
                "`input[0].output` must be a string or an array of content parts",
            ),
            (
                r#""input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_file","file_data":"x"}]}]"#,
                "`input[0].output[0]` is an `input_file` part, which has no chat counterpart",
            ),
            (r#""input":"hi","tools":{}"#, "`tools` must be an array"),
            (r#""input":"hi","tools":[{"name":"x"}]"#, "`tools[0].type` must be a string"),
            (
                r#""input":"hi","tools":[{"type":"function"}]"#,
                "`tools[0].name` must be a string",
            ),
            (
                r#""input":"hi","tools":[{"type":"function","name":"x","description":1}]"#,
                "`tools[0].description` must be a string",
            ),
            (
                r#""input":"hi","tools":[{"type":"function","name":"x","strict":"yes"}]"#,
                "`tools[0].strict` must be a boolean",
            ),
            (
                r#""input":"hi","tools":[{"type":"function","name":"now"},{"type":"web_search"}],"tool_choice":{"type":"web_search"}"#,
                "`tool_choice.type` must be \"function\": only function tools are sent to a chat upstream",
            ),
            (
                r#""input":"hi","tools":[{"type":"function","name":"now"}],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[]}"#,
                "`tool_choice.type` must be \"function\": only function tools are sent to a chat upstream",
            ),
            (
                r#""input":"hi","tools":[{"type":"function","name":"now"},{"type":"namespace","name":"ns","tools":[{"type":"function","name":"inner"}]}],"tool_choice":{"type":"function","name":"inner"}"#,
                "`tool_choice.name` must name a function tool in `tools` (namespace and built-in tools are not sent to a chat upstream)",
            ),
            (
                r#""input":"hi","tools":[{"type":"web_search"}],"tool_choice":{"type":"function","name":"now"}"#,
                "`tool_choice.name` must name a function tool in `tools` (namespace and built-in tools are not sent to a chat upstream)",
            ),
            (
                r#""input":"hi","tool_choice":"any""#,
                r#"`tool_choice` must be "auto", "required", "none" or a function"#,
            ),
            (r#""input":"hi","tool_choice":{}"#, "`tool_choice.type` must be a string"),
            (
                r#""input":"hi","tool_choice":{"type":"function"}"#,
                "`tool_choice.name` must be a string",
            ),
            (
                r#""input":"hi","parallel_tool_calls":"yes""#,
                "`parallel_tool_calls` must be a boolean",
            ),
            (r#""input":"hi","temperature":"hot""#, "`temperature` must be a number"),
            (r#""input":"hi","top_p":[1]"#, "`top_p` must be a number"),
            (r#""input":"hi","reasoning":"high""#, "`reasoning` must be an object"),
            (
                r#""input":"hi","reasoning":{"effort":3}"#,
                "`reasoning.effort` must be a string",
            ),
            (r#""input":"hi","text":"json""#, "`text` must be an object"),
            (
                r#""input":"hi","text":{"format":{}}"#,
                "`text.format.type` must be a string",
            ),
            (
                r#""input":"hi","text":{"format":{"type":"grammar"}}"#,
                r#"`text.format.type` must be "text", "json_object" or "json_schema""#,
            ),
            (
                r#""input":"hi","text":{"format":{"type":"json_schema","schema":{}}}"#,
                "`text.format.name` must be a string",
            ),
            (
                r#""input":"hi","text":{"format":{"type":"json_schema","name":"a","schema":[]}}"#,
                "`text.format.schema` must be an object",
            ),
            (
                r#""input":"hi","text":{"format":{"type":"json_schema","name":"a","schema":{},"strict":1}}"#,
                "`text.format.strict` must be a boolean",
            ),
            (r#""input":"hi","user":1"#, "`user` must be a string"),
            (
                r#""input":"hi","safety_identifier":false"#,
                "`safety_identifier` must be a string",
            ),
        ];
        for (members, want) in cases {
            let body = RawObject::parse(format!("{{{members}}}").as_bytes()).unwrap();
            assert_eq!(
                request(&body, "gpt-5", None, false),
                Err(TranslateError::Request(want.into())),
                "{members}"
            );
        }
    }

    const CODEX_FIRST_TURN: &str =
        include_str!("../../../tests/golden/responses/codex_first_turn.json");
    const CODEX_FIRST_TURN_CHAT: &str =
        include_str!("../../../tests/golden/responses_over_chat/codex_first_turn.chat.json");
    const CODEX_TOOL_TURN: &str =
        include_str!("../../../tests/golden/responses/codex_tool_turn.json");
    const CODEX_TOOL_TURN_CHAT: &str =
        include_str!("../../../tests/golden/responses_over_chat/codex_tool_turn.chat.json");

    #[test]
    fn codex_requests_translate_to_the_golden_chat_requests() {
        assert_eq!(
            chat_request(CODEX_FIRST_TURN, None, true),
            CODEX_FIRST_TURN_CHAT
        );
        assert_eq!(
            chat_request(CODEX_TOOL_TURN, Some(8192), true),
            CODEX_TOOL_TURN_CHAT
        );
    }

    /// A response object of id `resp_c`, model `m`, created at 7.
    fn object(status: &str, error: &str, incomplete: &str, output: &str, usage: &str) -> String {
        format!(
            r#"{{"id":"resp_c","object":"response","created_at":7,"status":"{status}","error":{error},"incomplete_details":{incomplete},"model":"m","output":[{output}],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":{usage}}}"#
        )
    }

    fn response(body: &str) -> String {
        String::from_utf8(response_at(body.as_bytes(), 7).unwrap()).unwrap()
    }

    fn message_json(index: usize, text: &str) -> String {
        format!(
            r#"{{"type":"message","id":"msg_{index}","status":"completed","role":"assistant","content":[{{"type":"output_text","text":"{text}","annotations":[]}}]}}"#
        )
    }

    fn call_json(id: &str, name: &str, arguments: &str) -> String {
        format!(
            r#"{{"type":"function_call","id":"fc_{id}","call_id":"{id}","name":"{name}","arguments":"{arguments}","status":"completed"}}"#
        )
    }

    #[test]
    fn a_chat_answer_becomes_a_response() {
        let cases = [
            (
                r#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi there.","refusal":null},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#,
                object(
                    "completed",
                    "null",
                    "null",
                    &message_json(0, "Hi there."),
                    r#"{"input_tokens":12,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":15}"#,
                ),
            ),
            (
                r#"{"id":"c","model":"m","choices":[{"index":0,"message":{"role":"assistant","reasoning_content":"Need the time.","content":"Checking.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"q\":\"rust\"}"}},{"id":"call_2","type":"function","function":{"name":"now","arguments":""}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":2000,"completion_tokens":50,"total_tokens":2050,"prompt_tokens_details":{"cached_tokens":1536},"completion_tokens_details":{"reasoning_tokens":20}}}"#,
                object(
                    "completed",
                    "null",
                    "null",
                    &[
                        r#"{"type":"reasoning","id":"rs_switchyard_0","summary":[{"type":"summary_text","text":"Need the time."}]}"#.to_owned(),
                        message_json(1, "Checking."),
                        call_json("call_1", "lookup", r#"{\"q\":\"rust\"}"#),
                        call_json("call_2", "now", ""),
                    ]
                    .join(","),
                    r#"{"input_tokens":2000,"input_tokens_details":{"cached_tokens":1536,"cache_write_tokens":0},"output_tokens":50,"output_tokens_details":{"reasoning_tokens":20},"total_tokens":2050}"#,
                ),
            ),
            (
                r#"{"id":"resp_c","model":"m","choices":[{"message":{"role":"assistant","content":null,"reasoning_content":"","tool_calls":[{"id":"call_1","function":{"name":"now"}}]},"finish_reason":null}]}"#,
                object("completed", "null", "null", &call_json("call_1", "now", ""), "null"),
            ),
            (
                r#"{"id":"c","model":"m","choices":[{"message":{"content":"","tool_calls":null}}]}"#,
                object("completed", "null", "null", "", "null"),
            ),
        ];
        for (body, want) in cases {
            assert_eq!(response(body), want, "{body}");
        }
        assert_eq!(
            String::from_utf8(response_at(br#"{"choices":[{"message":{}}]}"#, 0).unwrap()).unwrap(),
            r#"{"id":"resp_","object":"response","created_at":0,"status":"completed","error":null,"incomplete_details":null,"model":"","output":[],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":null}"#
        );
    }

    #[test]
    fn each_finish_reason_becomes_its_status() {
        let cases = [
            (r#""stop""#, "completed", "null"),
            (r#""tool_calls""#, "completed", "null"),
            (r#""function_call""#, "completed", "null"),
            (
                r#""length""#,
                "incomplete",
                r#"{"reason":"max_output_tokens"}"#,
            ),
            (
                r#""content_filter""#,
                "incomplete",
                r#"{"reason":"content_filter"}"#,
            ),
            ("null", "completed", "null"),
        ];
        for (finish, status, incomplete) in cases {
            let body = format!(
                r#"{{"id":"c","model":"m","choices":[{{"message":{{"content":"x"}},"finish_reason":{finish}}}]}}"#
            );
            assert_eq!(
                response(&body),
                object(status, "null", incomplete, &message_json(0, "x"), "null"),
                "{finish}"
            );
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
                response_at(body.as_bytes(), 7),
                Err(TranslateError::Response(want.into())),
                "{body}"
            );
        }
    }

    #[test]
    fn error_bodies_become_responses_errors() {
        let cases: [(u16, &str, &str); 12] = [
            (
                400,
                r#"{"error":{"message":"Invalid 'messages': empty.","type":"invalid_request_error","param":"messages","code":null}}"#,
                r#"{"error":{"message":"Invalid 'messages': empty.","type":"invalid_request_error","param":"messages","code":null}}"#,
            ),
            (
                400,
                r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
                r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            ),
            (
                401,
                r#"{"error":{"message":"Incorrect API key provided.","code":"invalid_api_key"}}"#,
                r#"{"error":{"message":"Incorrect API key provided.","type":"authentication_error","param":null,"code":"invalid_api_key"}}"#,
            ),
            (
                403,
                r#"{"error":"forbidden"}"#,
                r#"{"error":{"message":"forbidden","type":"permission_error","param":null,"code":null}}"#,
            ),
            (
                404,
                r#"{"message":"no such model"}"#,
                r#"{"error":{"message":"no such model","type":"not_found_error","param":null,"code":null}}"#,
            ),
            (
                422,
                r#"{"detail":"bad"}"#,
                r#"{"error":{"message":"{\"detail\":\"bad\"}","type":"invalid_request_error","param":null,"code":null}}"#,
            ),
            (
                429,
                r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#,
                r#"{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
            ),
            (
                429,
                "Too Many Requests",
                r#"{"error":{"message":"Too Many Requests","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}"#,
            ),
            (
                500,
                r#"{"error":{"message":"The server had an error","type":"","code":500}}"#,
                r#"{"error":{"message":"The server had an error","type":"server_error","param":null,"code":"500"}}"#,
            ),
            (
                502,
                "<html>Bad Gateway</html>\n",
                r#"{"error":{"message":"<html>Bad Gateway</html>","type":"server_error","param":null,"code":null}}"#,
            ),
            (
                503,
                "",
                r#"{"error":{"message":"the upstream answered HTTP 503","type":"server_error","param":null,"code":null}}"#,
            ),
            (
                400,
                r#"{"error":{"message":"  ","type":"invalid_request_error","param":7,"code":""}}"#,
                r#"{"error":{"message":"the upstream answered HTTP 400","type":"invalid_request_error","param":null,"code":null}}"#,
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

    fn translate_stream(chunks: &[&[u8]]) -> String {
        let mut stream = Stream::at(1767225700);
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

    const TEXT_STREAM: &str =
        include_str!("../../../tests/golden/responses_over_chat/text_stream.sse");
    const TEXT_EVENTS: &str =
        include_str!("../../../tests/golden/responses_over_chat/text_stream.responses.sse");
    const TOOL_CALL_STREAM: &str =
        include_str!("../../../tests/golden/responses_over_chat/tool_call_stream.sse");
    const TOOL_CALL_EVENTS: &str =
        include_str!("../../../tests/golden/responses_over_chat/tool_call_stream.responses.sse");
    const REASONING_STREAM: &str =
        include_str!("../../../tests/golden/responses_over_chat/reasoning_stream.sse");
    const REASONING_EVENTS: &str =
        include_str!("../../../tests/golden/responses_over_chat/reasoning_stream.responses.sse");

    #[test]
    fn streamed_answers_translate_to_the_golden_events() {
        for (input, events) in [
            (TEXT_STREAM, TEXT_EVENTS),
            (TOOL_CALL_STREAM, TOOL_CALL_EVENTS),
            (REASONING_STREAM, REASONING_EVENTS),
        ] {
            assert_eq!(translate_whole_and_bytewise(input), events);
        }
    }

    #[test]
    fn the_golden_events_read_as_a_whole_answer_with_its_usage() {
        let mut reader = crate::format::responses::StreamReader::default();
        let generated = reader.feed(TOOL_CALL_EVENTS.as_bytes()).chars;
        assert_eq!(
            generated,
            "Let me check the weather.".len() + r#"{"city":"Paris","unit":"c"}"#.len()
        );
        assert!(reader.complete());
        assert!(!reader.errored());
        assert_eq!(
            reader.usage(),
            Some(crate::usage::Usage {
                prompt_tokens: 1200,
                completion_tokens: 31
            })
        );
    }

    #[test]
    fn the_response_ends_at_the_usage_after_the_finish_or_at_the_end_of_the_stream() {
        let done = "data: [DONE]\n\n";
        let without_done = TEXT_STREAM.strip_suffix(done).unwrap();
        assert_eq!(translate_stream(&[without_done.as_bytes()]), TEXT_EVENTS);
        let mut stream = Stream::at(1767225700);
        let mut out = Vec::new();
        stream.feed(without_done.as_bytes(), &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), TEXT_EVENTS);

        let usage_at = TOOL_CALL_STREAM.rfind("data: {").unwrap();
        let without_usage = &TOOL_CALL_STREAM.as_bytes()[..usage_at];
        let usage = r#"{"input_tokens":1200,"input_tokens_details":{"cached_tokens":1024,"cache_write_tokens":0},"output_tokens":31,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":1231}"#;
        let none = TOOL_CALL_EVENTS.replace(usage, "null");
        assert_eq!(translate_stream(&[without_usage]), none);
        assert_eq!(translate_stream(&[without_usage, done.as_bytes()]), none);
        // No made-up zeros: the gateway reads no usage and estimates instead.
        let mut reader = crate::format::responses::StreamReader::default();
        reader.feed(none.as_bytes());
        assert!(reader.complete());
        assert_eq!(reader.usage(), None);
    }

    #[test]
    fn finish_adds_nothing_to_an_answer_cut_before_its_finish() {
        let cut_at = TOOL_CALL_STREAM
            .find("\"finish_reason\":\"tool_calls\"")
            .unwrap();
        let cut_at = TOOL_CALL_STREAM[..cut_at].rfind("data: ").unwrap();
        let mut stream = Stream::at(1767225700);
        let mut out = Vec::new();
        stream.feed(&TOOL_CALL_STREAM.as_bytes()[..cut_at], &mut out);
        let before = out.len();
        stream.finish(&mut out);
        assert_eq!(out.len(), before);
        assert!(!stream.ended_by_error());
        let open_call = TOOL_CALL_EVENTS
            .find("event: response.function_call_arguments.done")
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            TOOL_CALL_EVENTS[..open_call]
        );
    }

    fn chunk(delta: &str, finish: &str) -> String {
        format!(
            "data: {{\"id\":\"c\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        )
    }

    /// The event `kind` numbered `seq`, its other members `rest` (each after a comma).
    fn ev(kind: &str, seq: u64, rest: &str) -> String {
        format!("event: {kind}\ndata: {{\"type\":\"{kind}\",\"sequence_number\":{seq}{rest}}}\n\n")
    }

    fn with_response(response: &str) -> String {
        format!(r#","response":{response}"#)
    }

    /// `response.created` and `response.in_progress` of `resp_c`.
    fn head() -> String {
        let response = with_response(&object("in_progress", "null", "null", "", "null"));
        ev("response.created", 0, &response) + &ev("response.in_progress", 1, &response)
    }

    /// The events opening message item `index` and its text `delta`, from `seq`.
    fn message_start(seq: u64, index: usize, delta: &str) -> String {
        [
            ev(
                "response.output_item.added",
                seq,
                &format!(
                    r#","output_index":{index},"item":{{"type":"message","id":"msg_{index}","status":"in_progress","role":"assistant","content":[]}}"#
                ),
            ),
            ev(
                "response.content_part.added",
                seq + 1,
                &format!(
                    r#","item_id":"msg_{index}","output_index":{index},"content_index":0,"part":{{"type":"output_text","text":"","annotations":[]}}"#
                ),
            ),
            ev(
                "response.output_text.delta",
                seq + 2,
                &format!(
                    r#","item_id":"msg_{index}","output_index":{index},"content_index":0,"delta":"{delta}","logprobs":[]"#
                ),
            ),
        ]
        .concat()
    }

    /// The events closing message item `index` with `text`, from `seq`.
    fn message_end(seq: u64, index: usize, text: &str) -> String {
        [
            ev(
                "response.output_text.done",
                seq,
                &format!(
                    r#","item_id":"msg_{index}","output_index":{index},"content_index":0,"text":"{text}","logprobs":[]"#
                ),
            ),
            ev(
                "response.content_part.done",
                seq + 1,
                &format!(
                    r#","item_id":"msg_{index}","output_index":{index},"content_index":0,"part":{{"type":"output_text","text":"{text}","annotations":[]}}"#
                ),
            ),
            ev(
                "response.output_item.done",
                seq + 2,
                &format!(r#","output_index":{index},"item":{}"#, message_json(index, text)),
            ),
        ]
        .concat()
    }

    fn call_start(seq: u64, index: usize, id: &str, name: &str) -> String {
        ev(
            "response.output_item.added",
            seq,
            &format!(
                r#","output_index":{index},"item":{{"type":"function_call","id":"fc_{id}","call_id":"{id}","name":"{name}","arguments":"","status":"in_progress"}}"#
            ),
        )
    }

    fn call_delta(seq: u64, index: usize, id: &str, delta: &str) -> String {
        ev(
            "response.function_call_arguments.delta",
            seq,
            &format!(r#","item_id":"fc_{id}","output_index":{index},"delta":"{delta}""#),
        )
    }

    fn call_end(seq: u64, index: usize, id: &str, name: &str, arguments: &str) -> String {
        ev(
            "response.function_call_arguments.done",
            seq,
            &format!(r#","item_id":"fc_{id}","output_index":{index},"arguments":"{arguments}""#),
        ) + &ev(
            "response.output_item.done",
            seq + 1,
            &format!(
                r#","output_index":{index},"item":{}"#,
                call_json(id, name, arguments)
            ),
        )
    }

    fn stream_at_7(input: &str) -> (String, bool) {
        let mut stream = Stream::at(7);
        let mut out = Vec::new();
        for byte in input.as_bytes().chunks(1) {
            stream.feed(byte, &mut out);
        }
        stream.finish(&mut out);
        let mut whole = Stream::at(7);
        let mut whole_out = Vec::new();
        whole.feed(input.as_bytes(), &mut whole_out);
        whole.finish(&mut whole_out);
        assert_eq!(whole_out, out);
        assert_eq!(whole.ended_by_error(), stream.ended_by_error());
        (String::from_utf8(out).unwrap(), stream.ended_by_error())
    }

    #[test]
    fn an_error_chunk_fails_the_response_and_ends_the_translation() {
        let input = [
            r#"data: {"id":"","model":"","choices":[],"prompt_filter_results":[]}"#.to_owned()
                + "\n\n",
            chunk(r#"{"content":"Hi"}"#, "null"),
            "data: {\"error\":{\"message\":\"upstream overloaded\",\"type\":\"server_error\",\"code\":\"server_is_overloaded\"}}\n\n"
                .to_owned(),
            chunk(r#"{"content":" more"}"#, r#""stop""#),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat();
        let failed = object(
            "failed",
            r#"{"code":"server_is_overloaded","message":"upstream overloaded"}"#,
            "null",
            "",
            "null",
        );
        let want = [
            head(),
            message_start(2, 0, "Hi"),
            ev("response.failed", 5, &with_response(&failed)),
        ]
        .concat();
        assert_eq!(stream_at_7(&input), (want, true));

        let bare = "data: {\"error\":{\"code\":500}}\n\n";
        let want = [
            anonymous_head(),
            ev(
                "response.failed",
                2,
                r#","response":{"id":"resp_","object":"response","created_at":7,"status":"failed","error":{"code":"500","message":"{\"code\":500}"},"incomplete_details":null,"model":"","output":[],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":null}"#,
            ),
        ]
        .concat();
        assert_eq!(stream_at_7(bare), (want, true));

        let with_usage = [
            r#"data: {"id":"c","model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}"#.to_owned() + "\n\n",
            "data: {\"error\":\"quota\"}\n\n".to_owned(),
        ]
        .concat();
        let want = [
            anonymous_head(),
            ev(
                "response.failed",
                2,
                r#","response":{"id":"resp_","object":"response","created_at":7,"status":"failed","error":{"code":"server_error","message":"quota"},"incomplete_details":null,"model":"","output":[],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":{"input_tokens":5,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":1,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":6}}"#,
            ),
        ]
        .concat();
        assert_eq!(stream_at_7(&with_usage), (want, true));
    }

    /// `response.created` and `response.in_progress` of a stream that gave no id or
    /// model.
    fn anonymous_head() -> String {
        let response = r#","response":{"id":"resp_","object":"response","created_at":7,"status":"in_progress","error":null,"incomplete_details":null,"model":"","output":[],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":null}"#;
        ev("response.created", 0, response) + &ev("response.in_progress", 1, response)
    }

    #[test]
    fn a_failure_first_still_comes_after_response_created() {
        // The openai SDK raises "Expected to have received response.created before
        // response.failed" otherwise.
        let input = "data: {\"id\":\"c\",\"model\":\"m\",\"error\":{\"message\":\"upstream overloaded\",\"code\":\"server_is_overloaded\"}}\n\n";
        let failed = object(
            "failed",
            r#"{"code":"server_is_overloaded","message":"upstream overloaded"}"#,
            "null",
            "",
            "null",
        );
        let want = head() + &ev("response.failed", 2, &with_response(&failed));
        assert_eq!(stream_at_7(input), (want, true));

        let mut stream = Stream::at(7);
        let mut out = Vec::new();
        stream.feed(b"data: ", &mut out);
        stream.feed(&vec![b'x'; crate::sse::MAX_EVENT_BYTES], &mut out);
        stream.finish(&mut out);
        let want = anonymous_head()
            + &ev(
                "response.failed",
                2,
                r#","response":{"id":"resp_","object":"response","created_at":7,"status":"failed","error":{"code":"upstream_event_too_large","message":"an upstream event was larger than 1 MiB and could not be translated"},"incomplete_details":null,"model":"","output":[],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":null}"#,
            );
        assert_eq!(String::from_utf8(out).unwrap(), want);
        assert!(stream.ended_by_error());
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
            assert_eq!(stream_at_7(input).1, by_error, "{input}");
        }
    }

    #[test]
    fn an_event_too_large_to_read_fails_the_response() {
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
        let mut stream = Stream::at(7);
        let mut out = Vec::new();
        let mut lengths = Vec::new();
        for piece in &chunks {
            stream.feed(piece.as_bytes(), &mut out);
            lengths.push(out.len());
        }
        stream.finish(&mut out);
        let text = head() + &message_start(2, 0, "Hi");
        let failed = object(
            "failed",
            r#"{"code":"upstream_event_too_large","message":"an upstream event was larger than 1 MiB and could not be translated"}"#,
            "null",
            "",
            "null",
        );
        let error = ev("response.failed", 5, &with_response(&failed));
        assert_eq!(lengths[0], text.len());
        assert_eq!(String::from_utf8(out).unwrap(), text + &error);
        assert_eq!(lengths[1..], [lengths[1]; 3]);
        assert!(stream.ended_by_error());
    }

    #[test]
    fn json_len_is_the_length_serde_json_escapes_to() {
        let mut texts: Vec<String> = (0u8..=0x7f).map(|b| char::from(b).to_string()).collect();
        texts.push("é€😀 \"quoted\"\\".to_owned());
        for text in texts {
            assert_eq!(
                json_len(&text),
                serde_json::to_string(&text).unwrap().len() - 2,
                "{text:?}"
            );
        }
    }

    /// The last event of `text`.
    fn last_event(text: &str) -> &str {
        let body = text.strip_suffix("\n\n").unwrap();
        &text[body.rfind("\n\n").map_or(0, |at| at + 2)..]
    }

    const OUTPUT_TOO_LARGE_ERROR: &str = r#"{"code":"output_too_large","message":"the answer is larger than the gateway can translate into one Responses event"}"#;

    #[test]
    fn an_output_past_the_bound_fails_the_response() {
        let x = "x".repeat(1000);
        let content = chunk(&format!(r#"{{"content":"{x}"}}"#), "null");
        let input = [
            content.repeat(800),
            chunk("{}", r#""stop""#),
            r#"data: {"id":"c","model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9}}"#.to_owned() + "\n\n",
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat();
        // "resp_c" and "m", the message item, then 1000 bytes a fragment: the 787th
        // would pass 768 KiB.
        assert_eq!(6 + 1 + ITEM_BYTES + 786 * 1000, 786_167);
        assert_eq!(MAX_ACCUMULATED_BYTES, 786_432);
        let mut want = head() + &message_start(2, 0, &x);
        for seq in 5..790 {
            want += &ev(
                "response.output_text.delta",
                seq,
                &format!(
                    r#","item_id":"msg_0","output_index":0,"content_index":0,"delta":"{x}","logprobs":[]"#
                ),
            );
        }
        let failed = object("failed", OUTPUT_TOO_LARGE_ERROR, "null", "", "null");
        want += &ev("response.failed", 790, &with_response(&failed));
        let mut stream = Stream::at(7);
        let mut out = Vec::new();
        for piece in input.as_bytes().chunks(4096) {
            stream.feed(piece, &mut out);
        }
        stream.finish(&mut out);
        assert_eq!(String::from_utf8(out).unwrap(), want);
        assert!(stream.ended_by_error());
    }

    #[test]
    fn an_output_at_the_bound_completes_in_an_event_the_gateway_reads() {
        // Every byte of the reasoning escapes to six, every byte of the arguments to two.
        let reasoning = chunk(
            &format!(r#"{{"reasoning_content":"{}"}}"#, r"\u0001".repeat(100)),
            "null",
        );
        let call = chunk(
            r#"{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]}"#,
            "null",
        );
        let arguments = chunk(
            &format!(
                r#"{{"tool_calls":[{{"index":0,"function":{{"arguments":"{}"}}}}]}}"#,
                r#"\""#.repeat(100)
            ),
            "null",
        );
        let tail = chunk("{}", r#""tool_calls""#)
            + r#"data: {"id":"c","model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4}}"#
            + "\n\n";
        let stream_of = |argument_chunks: usize| {
            let input = [
                reasoning.repeat(1000),
                call.clone(),
                arguments.repeat(argument_chunks),
                tail.clone(),
            ]
            .concat();
            let mut stream = Stream::at(7);
            let mut out = Vec::new();
            stream.feed(input.as_bytes(), &mut out);
            stream.finish(&mut out);
            (String::from_utf8(out).unwrap(), stream.ended_by_error())
        };
        // "resp_c" and "m", the reasoning item and its 1000 fragments of 600 bytes, the
        // call's item with its id twice and name, and 930 fragments of 200 bytes.
        assert_eq!(
            6 + 1 + ITEM_BYTES + 1000 * 600 + ITEM_BYTES + 2 * 6 + 1 + 930 * 200,
            786_340
        );
        let (text, by_error) = stream_of(930);
        assert!(!by_error);
        let completed = last_event(&text);
        assert!(completed.starts_with("event: response.completed\n"));
        assert!(
            completed.len() <= crate::sse::MAX_EVENT_BYTES,
            "{}",
            completed.len()
        );
        let mut reader = crate::format::responses::StreamReader::default();
        reader.feed(text.as_bytes());
        assert!(reader.complete());
        assert!(!reader.errored());
        assert_eq!(
            reader.usage(),
            Some(crate::usage::Usage {
                prompt_tokens: 9,
                completion_tokens: 4
            })
        );

        // One fragment more passes the bound: created, in_progress, the reasoning item's
        // 1005 events, the call's added event and 930 deltas, then the failure.
        let (text, by_error) = stream_of(931);
        assert!(by_error);
        let failed = object("failed", OUTPUT_TOO_LARGE_ERROR, "null", "", "null");
        assert_eq!(
            last_event(&text),
            ev("response.failed", 1938, &with_response(&failed))
        );
    }

    #[test]
    fn an_event_too_large_after_the_end_adds_nothing() {
        let mut stream = Stream::at(1767225700);
        let mut out = Vec::new();
        stream.feed(REASONING_STREAM.as_bytes(), &mut out);
        stream.feed(b"data: ", &mut out);
        stream.feed(&vec![b'x'; crate::sse::MAX_EVENT_BYTES], &mut out);
        stream.finish(&mut out);
        assert_eq!(String::from_utf8(out).unwrap(), REASONING_EVENTS);
        assert!(!stream.ended_by_error());
    }

    #[test]
    fn done_alone_still_makes_a_whole_response() {
        let in_progress = r#"{"id":"resp_","object":"response","created_at":7,"status":"in_progress","error":null,"incomplete_details":null,"model":"","output":[],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":null}"#;
        let completed = r#"{"id":"resp_","object":"response","created_at":7,"status":"completed","error":null,"incomplete_details":null,"model":"","output":[],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":null}"#;
        let want = [
            ev("response.created", 0, &with_response(in_progress)),
            ev("response.in_progress", 1, &with_response(in_progress)),
            ev("response.completed", 2, &with_response(completed)),
        ]
        .concat();
        assert_eq!(
            stream_at_7(": keep-alive\n\ndata: [DONE]\n\n"),
            (want, false)
        );
    }

    #[test]
    fn a_length_or_content_filter_finish_makes_the_response_incomplete() {
        for (finish, reason) in [
            ("length", "max_output_tokens"),
            ("content_filter", "content_filter"),
        ] {
            let input = [
                chunk(r#"{"content":"Hi"}"#, "null"),
                chunk("{}", &format!(r#""{finish}""#)),
                r#"data: {"id":"c","model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":16,"total_tokens":19}}"#.to_owned() + "\n\n",
            ]
            .concat();
            let incomplete = object(
                "incomplete",
                "null",
                &format!(r#"{{"reason":"{reason}"}}"#),
                &message_json(0, "Hi"),
                r#"{"input_tokens":3,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":16,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":19}"#,
            );
            let want = [
                head(),
                message_start(2, 0, "Hi"),
                message_end(5, 0, "Hi"),
                ev("response.incomplete", 8, &with_response(&incomplete)),
            ]
            .concat();
            assert_eq!(stream_at_7(&input), (want, false), "{finish}");
        }
    }

    #[test]
    fn usage_before_the_finish_does_not_end_the_response() {
        let input = [
            r#"data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"A"},"finish_reason":null}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#.to_owned() + "\n\n",
            chunk(r#"{"content":"B"}"#, r#""stop""#),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat();
        let usage = r#"{"input_tokens":3,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":1,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":4}"#;
        let completed = object("completed", "null", "null", &message_json(0, "AB"), usage);
        let want = [
            head(),
            message_start(2, 0, "A"),
            ev(
                "response.output_text.delta",
                5,
                r#","item_id":"msg_0","output_index":0,"content_index":0,"delta":"B","logprobs":[]"#,
            ),
            message_end(6, 0, "AB"),
            ev("response.completed", 9, &with_response(&completed)),
        ]
        .concat();
        assert_eq!(stream_at_7(&input), (want, false));
    }

    #[test]
    fn parallel_tool_calls_get_an_item_each_and_stray_fragments_are_dropped() {
        let input = [
            chunk(r#"{"content":"On it."}"#, "null"),
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
            chunk(r#"{"content":"after the end"}"#, "null"),
        ]
        .concat();
        let output = [
            message_json(0, "On it."),
            call_json("call_a", "a", "{}"),
            call_json("call_b", "b", r#"{\"x\":1}"#),
        ]
        .join(",");
        let completed = object(
            "completed",
            "null",
            "null",
            &output,
            r#"{"input_tokens":9,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":4,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":13}"#,
        );
        let want = [
            head(),
            message_start(2, 0, "On it."),
            message_end(5, 0, "On it."),
            call_start(8, 1, "call_a", "a"),
            call_delta(9, 1, "call_a", "{}"),
            call_end(10, 1, "call_a", "a", "{}"),
            call_start(12, 2, "call_b", "b"),
            call_delta(13, 2, "call_b", r#"{\"x\":1}"#),
            call_end(14, 2, "call_b", "b", r#"{\"x\":1}"#),
            ev("response.completed", 16, &with_response(&completed)),
        ]
        .concat();
        assert_eq!(stream_at_7(&input), (want, false));
    }

    #[test]
    fn a_streamed_call_is_item_fc_of_its_call_id() {
        // The frames the mock's chat API streams for `[[tool:get_weather {...}]]`.
        let frame = |delta: &str, finish: &str| {
            format!("data: {{\"id\":\"chatcmpl-mock\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"mock-small\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n")
        };
        let fragment = |arguments: &str| {
            frame(
                &format!(
                    r#"{{"tool_calls":[{{"index":0,"function":{{"arguments":{}}}}}]}}"#,
                    Value::from(arguments)
                ),
                "null",
            )
        };
        let input = [
            frame(r#"{"role":"assistant","content":""}"#, "null"),
            frame(r#"{"content":"Calling"}"#, "null"),
            frame(r#"{"content":" get_weather."}"#, "null"),
            frame(
                r#"{"tool_calls":[{"index":0,"id":"call_mock_1","type":"function","function":{"name":"get_weather","arguments":""}}]}"#,
                "null",
            ),
            fragment(r#"{"cit"#),
            fragment(r#"y":"P"#),
            fragment(r#"aris"}"#),
            frame("{}", r#""tool_calls""#),
            r#"data: {"id":"chatcmpl-mock","object":"chat.completion.chunk","created":1700000000,"model":"mock-small","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21}}"#.to_owned() + "\n\n",
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat();
        let (text, by_error) = stream_at_7(&input);
        assert!(!by_error);
        let mut seen = Vec::new();
        for event in text.split_terminator("\n\n") {
            let data = event.split_once("\ndata: ").unwrap().1;
            let v: Value = serde_json::from_str(data).unwrap();
            let kind = v["type"].as_str().unwrap().to_owned();
            let call = match kind.as_str() {
                "response.output_item.added" | "response.output_item.done" => v["item"].clone(),
                "response.function_call_arguments.delta"
                | "response.function_call_arguments.done" => {
                    json!({"id": v["item_id"], "delta": v["delta"], "arguments": v["arguments"]})
                }
                "response.completed" => v["response"]["output"][1].clone(),
                _ => continue,
            };
            if call["type"] == "message" {
                continue;
            }
            seen.push((kind, call));
        }
        let item = |arguments: &str, status: &str| {
            json!({"type": "function_call", "id": "fc_call_mock_1", "call_id": "call_mock_1",
                   "name": "get_weather", "arguments": arguments, "status": status})
        };
        let delta =
            |delta: &str| json!({"id": "fc_call_mock_1", "delta": delta, "arguments": null});
        let whole = r#"{"city":"Paris"}"#;
        let want = [
            ("response.output_item.added", item("", "in_progress")),
            ("response.function_call_arguments.delta", delta(r#"{"cit"#)),
            ("response.function_call_arguments.delta", delta(r#"y":"P"#)),
            ("response.function_call_arguments.delta", delta(r#"aris"}"#)),
            (
                "response.function_call_arguments.done",
                json!({"id": "fc_call_mock_1", "delta": null, "arguments": whole}),
            ),
            ("response.output_item.done", item(whole, "completed")),
            ("response.completed", item(whole, "completed")),
        ]
        .map(|(kind, call)| (kind.to_owned(), call));
        assert_eq!(seen, want);
    }

    #[test]
    fn nothing_follows_the_end_of_the_response() {
        let mut stream = Stream::at(1767225700);
        let mut out = Vec::new();
        stream.feed(TEXT_STREAM.as_bytes(), &mut out);
        let end = out.len();
        stream.feed(chunk(r#"{"content":"again"}"#, "null").as_bytes(), &mut out);
        stream.feed(b"data: {\"error\":{\"message\":\"late\"}}\n\n", &mut out);
        stream.feed(b"data: [DONE]\n\n", &mut out);
        stream.finish(&mut out);
        assert_eq!(out.len(), end);
        assert!(!stream.ended_by_error());
    }
}
