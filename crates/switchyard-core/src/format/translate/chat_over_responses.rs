//! An OpenAI chat-completions client over an OpenAI Responses upstream: the chat
//! request as a Responses request, and the Response (JSON, error or event stream) back
//! as a chat completion.
//!
//! # Request
//!
//! Output members, in this order: `model`, `instructions` (when any), `input`, then
//! those the client's body gives: `tools`, `tool_choice`, `parallel_tool_calls`; then
//! `max_output_tokens` (the output bound given to [`request`]), `reasoning`, `text`,
//! `temperature`, `top_p`, `user`; `store: false` always, and `stream: true` last when
//! streaming. `null` members count as absent.
//!
//! - `system` and `developer` messages become `instructions` when they all come before
//!   every other message: their texts (each string content or text part; empty ones
//!   left out) joined with `"\n\n"`. When one comes later, each of them becomes a
//!   `message` item of role `developer` at its place instead, its texts `input_text`
//!   parts.
//! - `user` messages become `message` items of role `user`: a string content one
//!   `input_text` part, `text` parts `input_text` parts, `image_url` parts `input_image`
//!   parts (the URL as `image_url`, `detail` kept, `auto` when not given). `input_audio`
//!   and `file` parts are refused.
//! - `assistant` messages become a `message` item of role `assistant` with `output_text`
//!   parts for their text, then one `function_call` item (`call_id`, `name`,
//!   `arguments` as given, `""` when not) per tool call; a call of another type than
//!   `function` is refused. `reasoning_content` is dropped: the Responses
//!   API takes reasoning back only as the reasoning items it issued (with their ids and
//!   encrypted content), which the chat format does not carry.
//! - `tool` messages become `function_call_output` items (`call_id`, and as `output`
//!   the content's text, parts joined).
//! - Empty text adds no part (chat clients send `content: ""` beside tool calls); a
//!   message left with no part adds no `message` item. Message `name`s are dropped.
//! - `tools` become flat function tools `{type, name, description, parameters,
//!   strict}`: `parameters` an empty object schema when not given, `strict` `false` when
//!   not given (the chat default; the Responses API's is `true`). Other tool types are
//!   refused. `tool_choice`: `auto`, `required` and `none` as they are, a named function
//!   `{"type": "function", "name"}`, anything else refused; `parallel_tool_calls` as it
//!   is.
//! - `reasoning_effort` → `reasoning: {"effort": <it>}`. No reasoning summary is asked
//!   for (an organisation that is not verified is refused summaries); an upstream that
//!   sends them anyway has them translated.
//! - `response_format`: `json_schema` → `text.format` `{type: "json_schema", name,
//!   description, schema, strict}` (those given), `json_object` and `text` → `text.format`
//!   of that type; other types are refused.
//! - `temperature`, `top_p` and `user` as they are.
//! - `store: false`: the gateway keeps no conversation ids, so the upstream must not keep
//!   conversations nobody can reference.
//! - Refused: `n` other than 1 (a Response is one answer), the legacy `functions`,
//!   `function_call`, the `function` role and an assistant `function_call`.
//! - Dropped: `max_tokens` and `max_completion_tokens` (their bound, clamped, is the
//!   `max_output_tokens` given), `stop` (the Responses API has no stop sequences),
//!   `stream_options` (a Responses stream always ends with the usage), `logprobs`,
//!   `top_logprobs`, `frequency_penalty`, `presence_penalty`, `seed`, `logit_bias`,
//!   `service_tier`, `metadata`, `store`, `modalities`, `audio`, `prediction` and any
//!   other member; unknown members of messages, parts and tools.
//!
//! # Answer
//!
//! The Response's id and model; `created` its `created_at` (the upstream's own creation
//! time, truncated to whole seconds), or the time given to [`response_at`] when it has
//! none. The `output_text` parts of its `message` items joined as `content` (`null`
//! without any), their `refusal` parts joined as `refusal`, the `summary_text` parts of
//! its `reasoning` items joined with `"\n\n"` as `reasoning_content`, its
//! `function_call` items as `tool_calls` (`id` the `call_id`). Other items
//! (`web_search_call`, `file_search_call`, …) are dropped. `finish_reason` (from the
//! `status`, `incomplete_details.reason` and whether there are calls) and `usage` come
//! from [`map`](super::map); a Response without usage (or with `usage: null`) gives a
//! completion without `usage`, not zeros: the gateway's quota settles on the usage it
//! reads and estimates from the characters only when there is none. A body that is not a `response` object, or one whose
//! `status` is `failed`, is not translated ([`TranslateError::Response`]).
//!
//! A stream gives a chunk per delta: `response.created` the first (`role` and empty
//! `content`), `response.output_text.delta` `content`, `response.refusal.delta`
//! `refusal`, `response.reasoning_summary_text.delta` `reasoning_content` (`"\n\n"`
//! before the first delta of each summary part after the first, as the JSON answer
//! joins them); a `function_call` item's `response.output_item.added` a tool call
//! (numbered from 0) with its `call_id`, name and empty arguments, then each
//! `response.function_call_arguments.delta` as it comes (a call given no delta gets the
//! `arguments` of its `response.output_item.done`, when not empty); the deltas name
//! their call by `item_id`, else by `output_index`. `response.completed` and
//! `response.incomplete` give a chunk with the `finish_reason` and `usage` (none when
//! the response has none, as in the JSON answer), then
//! `[DONE]`. Every other event (`response.in_progress`, `response.content_part.*`, the
//! `*.done` events, …) gives nothing. `response.failed` and `error` become an OpenAI
//! error frame `{"error": {message, type, code, param: null}}` — the upstream's message,
//! `type` (`server_error` when it gives none) and `code` — and end the translation; so
//! does an upstream event larger than [`MAX_EVENT_BYTES`](crate::sse::MAX_EVENT_BYTES),
//! which the parser skips (its content would be lost from an answer that looks whole),
//! with `{"error": {"message": "an upstream event was larger than 1 MiB and could not
//! be translated", "type": "upstream_error", "code": "upstream_event_too_large",
//! "param": null}}`. Nothing is translated after either, and [`Stream::ended_by_error`]
//! says so. [`Stream::finish`] adds nothing: `[DONE]` went out with the end of a
//! complete answer, and an answer cut short is left open for the gateway to report.
//!
//! Error bodies become `{"error": {message, type, code, param: null}}`: the upstream's
//! message, `type` and `code` (a string or a number; else `null`), the type by the
//! status when the body gives none (401, 404 and other 4xx `invalid_request_error`, 403
//! `permission_error`, 429 `rate_limit_error`, 5xx `server_error`), the body's text the
//! message when it has no error message, a message cut to
//! [`MAX_ERROR_MESSAGE`](super::map::MAX_ERROR_MESSAGE) bytes. `param` is always `null`:
//! the upstream's names members of the Responses request (`input[2]`), not of the
//! client's.
//!
//! # `created`
//!
//! No clock is read here: [`response_at`] and [`Stream::at`] take the request's time in
//! Unix seconds. [`response_at`] uses it only for a Response without `created_at`; every
//! chunk of a [`Stream`] carries it (the `created_at` of `response.created` is not read).

use super::chat::{self, member, ChunkWriter, Chunks, Role, ToolChoice, Upstream, UserContent};
use super::json::{self, refuse, str_at, string};
use super::map::{
    error_message, error_object, finish_reason_of_responses, upstream_message, Tokens,
};
use super::TranslateError;
use crate::llm::RawObject;
use crate::sse::{SseEvent, SseParser};
use serde_json::{json, Map, Value};

/// How refusals name a Responses upstream.
const RESPONSES: Upstream = Upstream {
    name: "a Responses upstream",
    no_type: "is not supported over a Responses upstream",
    no_parts: "parts are not supported over a Responses upstream",
};

fn part(kind: &str, text: String) -> Value {
    json!({"type": kind, "text": text})
}

fn message_item(role: &str, content: Vec<Value>) -> Value {
    json!({"type": "message", "role": role, "content": content})
}

/// The chat request `body` as a Responses request for `model`, bounded to `max_tokens`
/// output tokens when given; see the module docs.
pub fn request(
    body: &RawObject,
    model: &str,
    max_tokens: Option<u64>,
    stream: bool,
) -> Result<Vec<u8>, TranslateError> {
    let messages = chat::messages(body, &RESPONSES)?;
    let (instructions, input) = conversation(&messages)?;

    let mut out = Map::new();
    out.insert("model".into(), model.into());
    if let Some(instructions) = instructions {
        out.insert("instructions".into(), instructions.into());
    }
    out.insert("input".into(), input.into());
    if let Some(tools) = member(body, "tools")? {
        out.insert("tools".into(), self::tools(tools)?);
    }
    if let Some(choice) = member(body, "tool_choice")? {
        out.insert("tool_choice".into(), tool_choice(&choice)?);
    }
    if let Some(parallel) = member(body, "parallel_tool_calls")? {
        if !parallel.is_boolean() {
            return Err(refuse("`parallel_tool_calls` must be a boolean".into()));
        }
        out.insert("parallel_tool_calls".into(), parallel);
    }
    if let Some(max_tokens) = max_tokens {
        out.insert("max_output_tokens".into(), max_tokens.into());
    }
    if let Some(effort) = member(body, "reasoning_effort")? {
        if !effort.is_string() {
            return Err(refuse("`reasoning_effort` must be a string".into()));
        }
        out.insert("reasoning".into(), json!({ "effort": effort }));
    }
    if let Some(format) = member(body, "response_format")? {
        out.insert("text".into(), json!({ "format": text_format(&format)? }));
    }
    for name in ["temperature", "top_p", "user"] {
        if let Some(v) = member(body, name)? {
            out.insert(name.into(), v);
        }
    }
    out.insert("store".into(), false.into());
    if stream {
        out.insert("stream".into(), true.into());
    }
    serde_json::to_vec(&Value::Object(out)).map_err(|e| refuse(e.to_string()))
}

fn is_system(message: &Value) -> bool {
    matches!(
        message.get("role").and_then(Value::as_str),
        Some("system" | "developer")
    )
}

/// The instructions and the input items of a chat `messages` array.
fn conversation(messages: &[Value]) -> Result<(Option<String>, Vec<Value>), TranslateError> {
    let lead = messages.iter().take_while(|m| is_system(m)).count();
    let instructing = !messages[lead..].iter().any(is_system);
    let mut instructions: Vec<String> = Vec::new();
    let mut input = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let content = message.get("content").unwrap_or(&Value::Null);
        match chat::role(message, &at, &RESPONSES)? {
            Role::System if instructing => instructions.extend(chat::texts(content, &at)?),
            Role::System => {
                let parts: Vec<Value> = chat::texts(content, &at)?
                    .into_iter()
                    .map(|t| part("input_text", t))
                    .collect();
                if !parts.is_empty() {
                    input.push(message_item("developer", parts));
                }
            }
            Role::User => {
                let parts = user_parts(content, &at)?;
                if !parts.is_empty() {
                    input.push(message_item("user", parts));
                }
            }
            Role::Assistant => assistant_items(message, content, &at, &mut input)?,
            Role::Tool => input.push(json!({
                "type": "function_call_output",
                "call_id": string(message, "tool_call_id", &at)?,
                "output": chat::texts(content, &at)?.concat(),
            })),
        }
    }
    let instructions = (!instructions.is_empty()).then(|| instructions.join("\n\n"));
    Ok((instructions, input))
}

fn user_parts(content: &Value, at: &str) -> Result<Vec<Value>, TranslateError> {
    let text = |text: &str| part("input_text", text.to_owned());
    Ok(
        match chat::user_content(content, at, &RESPONSES, text, image)? {
            UserContent::Text(text) => vec![part("input_text", text.to_owned())],
            UserContent::Parts(parts) => parts,
        },
    )
}

/// An `image_url` part as an `input_image` part.
fn image(part: &Value, at: &str) -> Result<Value, TranslateError> {
    let (url, image_url) = chat::image_url(part, at)?;
    let detail = match image_url.get("detail") {
        None | Some(Value::Null) => "auto",
        Some(Value::String(d)) => d.as_str(),
        Some(_) => return Err(refuse(format!("`{at}.image_url.detail` must be a string"))),
    };
    Ok(json!({"type": "input_image", "image_url": url, "detail": detail}))
}

/// An assistant message as a `message` item (when it has text) and its calls'
/// `function_call` items, appended to `input`.
fn assistant_items(
    message: &Value,
    content: &Value,
    at: &str,
    input: &mut Vec<Value>,
) -> Result<(), TranslateError> {
    let calls = chat::tool_calls(message, at, &RESPONSES)?;
    let parts: Vec<Value> = chat::texts(content, at)?
        .into_iter()
        .map(|t| part("output_text", t))
        .collect();
    if !parts.is_empty() {
        input.push(message_item("assistant", parts));
    }
    for call in chat::function_calls(calls, at, &RESPONSES, |arguments, _| Ok(arguments))? {
        input.push(json!({
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
        }));
    }
    Ok(())
}

fn tools(tools: Value) -> Result<Value, TranslateError> {
    chat::tools(tools, &RESPONSES, "parameters", |members, function, fat| {
        let strict = match function.get("strict") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(refuse(format!("`{fat}.strict` must be a boolean"))),
        };
        let mut tool = Map::new();
        tool.insert("type".into(), "function".into());
        tool.extend(members);
        tool.insert("strict".into(), strict.into());
        Ok(Value::Object(tool))
    })
}

fn tool_choice(choice: &Value) -> Result<Value, TranslateError> {
    Ok(match chat::tool_choice(choice)? {
        ToolChoice::Mode(mode) => mode.into(),
        ToolChoice::Function(name) => json!({"type": "function", "name": name}),
    })
}

/// A chat `response_format` as a Responses `text.format`.
fn text_format(format: &Value) -> Result<Value, TranslateError> {
    match format.get("type").and_then(Value::as_str) {
        Some("json_schema") => {
            let schema = format.get("json_schema").unwrap_or(&Value::Null);
            let mut out = Map::new();
            out.insert("type".into(), "json_schema".into());
            let name = string(schema, "name", "response_format.json_schema")?;
            out.insert("name".into(), name.into());
            for key in ["description", "schema", "strict"] {
                if let Some(v) = schema.get(key).filter(|v| !v.is_null()) {
                    out.insert(key.into(), v.clone());
                }
            }
            Ok(Value::Object(out))
        }
        Some(kind @ ("json_object" | "text")) => Ok(json!({ "type": kind })),
        _ => Err(refuse(
            "`response_format.type` must be \"text\", \"json_object\" or \"json_schema\"".into(),
        )),
    }
}

/// The string member `key` of `v`, empty when it is missing.
fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// A Response as a chat completion; `created` (Unix seconds) dates it when the
/// Response has no `created_at`.
pub fn response_at(body: &[u8], created: u64) -> Result<Vec<u8>, TranslateError> {
    let response = json::answer(body)?;
    if response.get("object").and_then(Value::as_str) != Some("response") {
        return Err(TranslateError::Response(
            "not a Response: its `object` is not \"response\"".into(),
        ));
    }
    let str_at = |pointer| str_at(&response, pointer);
    let status = str_at("/status");
    if status == "failed" {
        let message = str_at("/error/message");
        return Err(TranslateError::Response(if message.is_empty() {
            "the Response failed".into()
        } else {
            format!("the Response failed: {message}")
        }));
    }
    let items = response
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| TranslateError::Response("the Response has no `output` array".into()))?;
    let mut content: Option<String> = None;
    let mut refusal: Option<String> = None;
    let mut summaries: Vec<&str> = Vec::new();
    let mut calls = Vec::new();
    for item in items {
        let parts = |key| {
            item.get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        };
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in parts("content") {
                    match part.get("type").and_then(Value::as_str) {
                        Some("output_text") => content
                            .get_or_insert_with(String::new)
                            .push_str(str_of(part, "text")),
                        Some("refusal") => refusal
                            .get_or_insert_with(String::new)
                            .push_str(str_of(part, "refusal")),
                        _ => {}
                    }
                }
            }
            Some("reasoning") => summaries.extend(
                parts("summary")
                    .filter(|p| p.get("type").and_then(Value::as_str) == Some("summary_text"))
                    .map(|p| str_of(p, "text"))
                    .filter(|t| !t.is_empty()),
            ),
            Some("function_call") => calls.push(chat::tool_call(
                str_of(item, "call_id"),
                str_of(item, "name"),
                str_of(item, "arguments"),
            )),
            _ => {}
        }
    }
    let finish_reason = finish_reason_of_responses(
        status,
        response
            .pointer("/incomplete_details/reason")
            .and_then(Value::as_str),
        !calls.is_empty(),
    );
    let reasoning = (!summaries.is_empty()).then(|| summaries.join("\n\n"));
    let members = [("refusal", refusal), ("reasoning_content", reasoning)];
    let reply = chat::reply(content, members, calls);
    let created_at = response.get("created_at").and_then(|v| {
        v.as_u64()
            .or_else(|| v.as_f64().filter(|s| *s >= 0.0).map(|s| s as u64))
    });
    chat::completion(
        str_at("/id"),
        created_at.unwrap_or(created),
        str_at("/model"),
        reply,
        finish_reason,
        chat_usage(&response),
    )
}

/// The chat `usage` of a Response's; `None` when it has none (or `null`), so that no
/// zeros are made up for the gateway's quota to settle on.
fn chat_usage(response: &Value) -> Option<Value> {
    response
        .get("usage")
        .filter(|u| !u.is_null())
        .map(|u| Tokens::from_responses(u).chat())
}

/// The OpenAI error `type` for an HTTP status, for a body that gives none.
fn error_type(status: u16) -> &'static str {
    match status {
        403 => "permission_error",
        429 => "rate_limit_error",
        500.. => "server_error",
        _ => "invalid_request_error",
    }
}

/// A chat error object: `message`, the `type` and `code` of `error` (an upstream error
/// object) or `fallback_type` and `null`, `param` `null`.
fn chat_error(message: String, error: Option<&Value>, fallback_type: &str) -> Value {
    let kind = error
        .and_then(|e| e.get("type"))
        .and_then(Value::as_str)
        .unwrap_or(fallback_type);
    let code = error
        .and_then(|e| e.get("code"))
        .filter(|c| c.is_string() || c.is_number())
        .cloned()
        .unwrap_or(Value::Null);
    json!({"error": {"message": message, "type": kind, "code": code, "param": null}})
}

/// A Responses error body (or any body a Responses upstream answered `status` with) as
/// a chat error body.
pub fn error(status: u16, body: &[u8]) -> Vec<u8> {
    let upstream = error_object(body);
    chat_error(
        upstream_message(status, body),
        upstream.as_ref(),
        error_type(status),
    )
    .to_string()
    .into_bytes()
}

/// A function call of the stream: its item's id and output index, and whether it was
/// given argument text.
#[derive(Debug)]
struct Call {
    item_id: String,
    output_index: Option<u64>,
    argued: bool,
}

/// Rewrites a Responses event stream as chat completion chunks; see the module docs.
#[derive(Debug)]
pub struct Stream {
    parser: SseParser,
    chat: Chunks,
    /// The function calls, in the order of their items: a call's position is its index.
    calls: Vec<Call>,
    /// The reasoning item id and summary index of the last summary text sent.
    summary: Option<(String, u64)>,
}

impl Stream {
    /// A translator whose chunks say they were created at `created` (Unix seconds).
    pub fn at(created: u64) -> Self {
        Self {
            parser: SseParser::new(),
            chat: Chunks::at(created),
            calls: Vec::new(),
            summary: None,
        }
    }

    /// Reads an upstream chunk (any boundaries) and appends the chat frames it completes.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        self.write(chunk, out);
    }

    /// Whether the translation ended with an error frame: the upstream's
    /// `response.failed` or `error` event, or an upstream event too large to read.
    pub fn ended_by_error(&self) -> bool {
        self.chat.failed
    }

    /// The upstream stream ended. Adds nothing: a complete answer's `[DONE]` went out
    /// with its `response.completed` or `response.incomplete`, and an answer cut short
    /// is left open for the caller to report.
    pub fn finish(&mut self, _out: &mut Vec<u8>) {}

    /// The position of the call of item `item_id` (when both it and the call's are
    /// known), else of output index `output_index`.
    fn call(&self, item_id: &str, output_index: Option<u64>) -> Option<usize> {
        self.calls.iter().position(|c| {
            if item_id.is_empty() || c.item_id.is_empty() {
                output_index.is_some() && c.output_index == output_index
            } else {
                c.item_id == item_id
            }
        })
    }

    /// Argument text for call `call`.
    fn arguments(&mut self, call: usize, fragment: &str, out: &mut Vec<u8>) {
        if fragment.is_empty() {
            return;
        }
        if let Some(c) = self.calls.get_mut(call) {
            c.argued = true;
        }
        self.chat.arguments(call, fragment, out);
    }
}

impl ChunkWriter for Stream {
    fn stream(&mut self) -> (&mut SseParser, &mut Chunks) {
        (&mut self.parser, &mut self.chat)
    }

    fn event(&mut self, event: &SseEvent, data: &Value, kind: &str, out: &mut Vec<u8>) {
        let str_at = |pointer| str_at(data, pointer);
        let output_index = data.get("output_index").and_then(Value::as_u64);
        match kind {
            "response.created" => {
                self.chat.id = str_at("/response/id").to_owned();
                self.chat.model = str_at("/response/model").to_owned();
                self.chat
                    .chunk(json!({"role": "assistant", "content": ""}), out);
            }
            "response.output_text.delta" => self.chat.text("content", str_at("/delta"), out),
            "response.refusal.delta" => self.chat.text("refusal", str_at("/delta"), out),
            "response.reasoning_summary_text.delta" => {
                let delta = str_at("/delta");
                if delta.is_empty() {
                    return;
                }
                let part = (
                    str_at("/item_id").to_owned(),
                    data.get("summary_index")
                        .and_then(Value::as_u64)
                        .unwrap_or_default(),
                );
                let text = match self.summary.replace(part.clone()) {
                    Some(last) if last != part => format!("\n\n{delta}"),
                    _ => delta.to_owned(),
                };
                self.chat.chunk(json!({ "reasoning_content": text }), out);
            }
            "response.output_item.added" if str_at("/item/type") == "function_call" => {
                let (id, name) = (str_at("/item/call_id"), str_at("/item/name"));
                self.chat.call(self.calls.len(), id, name, out);
                self.calls.push(Call {
                    item_id: str_at("/item/id").to_owned(),
                    output_index,
                    argued: false,
                });
            }
            "response.function_call_arguments.delta" => {
                if let Some(call) = self.call(str_at("/item_id"), output_index) {
                    self.arguments(call, str_at("/delta"), out);
                }
            }
            "response.output_item.done" if str_at("/item/type") == "function_call" => {
                let call = self.call(str_at("/item/id"), output_index);
                if let Some(call) = call.filter(|&c| !self.calls[c].argued) {
                    self.arguments(call, str_at("/item/arguments"), out);
                }
            }
            "response.completed" | "response.incomplete" => {
                let status = kind.trim_start_matches("response.");
                let reason = finish_reason_of_responses(
                    status,
                    data.pointer("/response/incomplete_details/reason")
                        .and_then(Value::as_str),
                    !self.calls.is_empty(),
                );
                let usage = data.get("response").and_then(chat_usage);
                self.chat.frame(json!({}), Some(reason), usage, out);
                self.chat.done(out);
            }
            "response.failed" => {
                let upstream = data.pointer("/response/error");
                let message = upstream
                    .and_then(|e| e.get("message"))
                    .and_then(Value::as_str)
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map_or_else(|| "the upstream response failed".to_owned(), cut);
                let error = chat_error(message, upstream, "server_error");
                self.chat.fail(&error, out);
            }
            "error" => {
                // The Responses API documents the error's members on the event itself
                // (whose `type` is the event's); some upstreams nest them in `error`.
                let upstream = match data.get("error") {
                    Some(nested @ Value::Object(_)) => nested.clone(),
                    _ => json!({"code": data.get("code")}),
                };
                let message = error_message(event.data.as_bytes())
                    .unwrap_or_else(|| "the upstream stream reported an error".to_owned());
                let error = chat_error(message, Some(&upstream), "server_error");
                self.chat.fail(&error, out);
            }
            _ => {}
        }
    }
}

/// `message` cut to [`MAX_ERROR_MESSAGE`](super::map::MAX_ERROR_MESSAGE) bytes at a
/// character boundary.
fn cut(message: &str) -> String {
    message[..message.floor_char_boundary(super::map::MAX_ERROR_MESSAGE)].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOLDEN_REQUEST: &str =
        include_str!("../../../tests/golden/chat_over_responses/request.chat.json");
    const GOLDEN_REQUEST_OUT: &str =
        include_str!("../../../tests/golden/chat_over_responses/request.responses.json");
    const GOLDEN_TOOL_STREAM: &str =
        include_str!("../../../tests/golden/chat_over_responses/stream_tool_call.sse");
    const GOLDEN_TOOL_STREAM_OUT: &str =
        include_str!("../../../tests/golden/chat_over_responses/stream_tool_call.chat.sse");
    const GOLDEN_INCOMPLETE_STREAM: &str =
        include_str!("../../../tests/golden/chat_over_responses/stream_incomplete.sse");
    const GOLDEN_INCOMPLETE_STREAM_OUT: &str =
        include_str!("../../../tests/golden/chat_over_responses/stream_incomplete.chat.sse");

    fn translate(
        body: &str,
        max_tokens: Option<u64>,
        stream: bool,
    ) -> Result<String, TranslateError> {
        let body = RawObject::parse(body.as_bytes()).map_err(|e| refuse(format!("{e:?}")))?;
        request(&body, "m", max_tokens, stream).map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    #[test]
    fn the_golden_request_translates_byte_for_byte() {
        let body = RawObject::parse(GOLDEN_REQUEST.as_bytes()).map_err(|e| format!("{e:?}"));
        let got = body.and_then(|b| {
            request(&b, "gpt-5", Some(4096), true)
                .map(|out| String::from_utf8_lossy(&out).into_owned())
                .map_err(|e| e.to_string())
        });
        let want = GOLDEN_REQUEST_OUT.strip_suffix('\n').unwrap_or_default();
        assert_eq!(got.as_deref(), Ok(want));
    }

    #[test]
    fn each_request_member_maps() {
        let cases = [
            // Leading system and developer messages are the instructions.
            (
                r#"{"messages":[{"role":"system","content":"be brief"},{"role":"developer","content":[{"type":"text","text":"a"},{"type":"text","text":""}]},{"role":"system","content":""},{"role":"user","content":"hi"}]}"#,
                r#"{"model":"m","instructions":"be brief\n\na","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}],"store":false}"#,
            ),
            // One after another message: every one is a developer message in place.
            (
                r#"{"messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"},{"role":"developer","content":[{"type":"text","text":"d1"},{"type":"text","text":"d2"}]},{"role":"system","content":null}]}"#,
                r#"{"model":"m","input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"s"}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"message","role":"developer","content":[{"type":"input_text","text":"d1"},{"type":"input_text","text":"d2"}]}],"store":false}"#,
            ),
            // User parts: text, images (a string URL too), empty text and messages left out.
            (
                r#"{"messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"text","text":""},{"type":"image_url","image_url":{"url":"https://a/b.png","detail":"high"}},{"type":"image_url","image_url":"data:image/png;base64,AA=="}]},{"role":"user","content":""},{"role":"user","content":[]}]}"#,
                r#"{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"see"},{"type":"input_image","image_url":"https://a/b.png","detail":"high"},{"type":"input_image","image_url":"data:image/png;base64,AA==","detail":"auto"}]}],"store":false}"#,
            ),
            // Assistant text parts; calls without text or arguments; tool results of
            // parts, a string and null; reasoning_content and names dropped.
            (
                r#"{"messages":[{"role":"user","content":"go","name":"u"},{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"reasoning_content":"hmm"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","function":{"name":"now"}},{"id":"c2","type":"function","function":{"name":"add","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":null},{"role":"tool","tool_call_id":"c2","content":[{"type":"text","text":"3"}]},{"role":"assistant","content":null,"tool_calls":null}]}"#,
                r#"{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a"},{"type":"output_text","text":"b"}]},{"type":"function_call","call_id":"c1","name":"now","arguments":""},{"type":"function_call","call_id":"c2","name":"add","arguments":"{\"a\":1}"},{"type":"function_call_output","call_id":"c1","output":""},{"type":"function_call_output","call_id":"c2","output":"3"}],"store":false}"#,
            ),
            // Tools: strict kept or false, parameters an empty schema when not given.
            (
                r#"{"messages":[],"tools":[{"type":"function","function":{"name":"f","description":"does f","parameters":{"type":"object"},"strict":false}},{"function":{"name":"g","strict":true,"parameters":null}}],"tool_choice":"required","parallel_tool_calls":true}"#,
                r#"{"model":"m","input":[],"tools":[{"type":"function","name":"f","description":"does f","parameters":{"type":"object"},"strict":false},{"type":"function","name":"g","parameters":{"type":"object","properties":{}},"strict":true}],"tool_choice":"required","parallel_tool_calls":true,"store":false}"#,
            ),
            (
                r#"{"messages":[],"tool_choice":"auto"}"#,
                r#"{"model":"m","input":[],"tool_choice":"auto","store":false}"#,
            ),
            (
                r#"{"messages":[],"tool_choice":"none"}"#,
                r#"{"model":"m","input":[],"tool_choice":"none","store":false}"#,
            ),
            // Response formats.
            (
                r#"{"messages":[],"response_format":{"type":"json_object"}}"#,
                r#"{"model":"m","input":[],"text":{"format":{"type":"json_object"}},"store":false}"#,
            ),
            (
                r#"{"messages":[],"response_format":{"type":"text"}}"#,
                r#"{"model":"m","input":[],"text":{"format":{"type":"text"}},"store":false}"#,
            ),
            (
                r#"{"messages":[],"response_format":{"type":"json_schema","json_schema":{"name":"n","description":"d","schema":{"type":"object"},"strict":null}}}"#,
                r#"{"model":"m","input":[],"text":{"format":{"type":"json_schema","name":"n","description":"d","schema":{"type":"object"}}},"store":false}"#,
            ),
            // Reasoning effort, sampling, the user; dropped members; null is absent.
            (
                r#"{"messages":[],"reasoning_effort":"minimal","temperature":0,"top_p":null,"user":"u1","n":1,"max_tokens":9,"max_completion_tokens":9,"stop":["x"],"logprobs":true,"top_logprobs":2,"frequency_penalty":1,"presence_penalty":1,"seed":3,"logit_bias":{},"stream_options":{"include_usage":true},"service_tier":"auto","store":true,"metadata":{"a":"b"},"modalities":["text"],"audio":{},"prediction":{},"web_search_options":{}}"#,
                r#"{"model":"m","input":[],"reasoning":{"effort":"minimal"},"temperature":0,"user":"u1","store":false}"#,
            ),
        ];
        for (body, want) in cases {
            assert_eq!(translate(body, None, false).as_deref(), Ok(want), "{body}");
        }
        assert_eq!(
            translate(r#"{"messages":[]}"#, Some(100), true).as_deref(),
            Ok(r#"{"model":"m","input":[],"max_output_tokens":100,"store":false,"stream":true}"#)
        );
    }

    #[test]
    fn requests_without_a_responses_form_are_refused_naming_the_member() {
        let user =
            |content: &str| format!(r#"{{"messages":[{{"role":"user","content":{content}}}]}}"#);
        let cases = [
            (
                user(r#"[{"type":"input_audio","input_audio":{"data":"AA==","format":"wav"}}]"#),
                "`messages[0].content[0]`: input_audio parts are not supported over a Responses upstream",
            ),
            (
                user(r#"[{"type":"text","text":"a"},{"type":"file","file":{"file_id":"f"}}]"#),
                "`messages[0].content[1]`: file parts are not supported over a Responses upstream",
            ),
            (
                user(r#"[{"type":"video"}]"#),
                "`messages[0].content[0].type` \"video\" is not a chat content part",
            ),
            (
                user(r#"[{"type":"image_url","image_url":{}}]"#),
                "`messages[0].content[0].image_url.url` must be a string",
            ),
            (
                user(r#"[{"type":"image_url","image_url":{"url":"https://a/b","detail":1}}]"#),
                "`messages[0].content[0].image_url.detail` must be a string",
            ),
            (user("7"), "`messages[0].content` must be a string or an array"),
            (
                r#"{"messages":[{"content":"x"}]}"#.into(),
                "`messages[0].role` must be a string",
            ),
            (
                r#"{"messages":[{"role":"function","name":"f","content":"x"}]}"#.into(),
                "`messages[0].role` \"function\" is not supported by a Responses upstream: use tool calls",
            ),
            (
                r#"{"messages":[{"role":"robot","content":"x"}]}"#.into(),
                "`messages[0].role` \"robot\" is not a chat role",
            ),
            (
                r#"{"messages":[{"role":"tool","content":"x"}]}"#.into(),
                "`messages[0].tool_call_id` must be a string",
            ),
            (
                r#"{"messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"https://a/b"}}]}]}"#.into(),
                "`messages[0].content[0].type` \"image_url\" is not allowed here: only text is",
            ),
            (
                r#"{"messages":[{"role":"assistant","function_call":{"name":"f","arguments":"{}"}}]}"#.into(),
                "`messages[0].function_call` is not supported by a Responses upstream: use tool_calls",
            ),
            (
                r#"{"messages":[{"role":"assistant","tool_calls":{}}]}"#.into(),
                "`messages[0].tool_calls` must be an array",
            ),
            (
                r#"{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"custom","custom":{"name":"f","input":"x"}}]}]}"#.into(),
                "`messages[0].tool_calls[0].type` \"custom\" is not supported over a Responses upstream",
            ),
            (
                r#"{"messages":[{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":{}}}]}]}"#.into(),
                "`messages[0].tool_calls[0].function.arguments` must be a string",
            ),
            (
                r#"{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f"}}]}]}"#.into(),
                "`messages[0].tool_calls[0].id` must be a string",
            ),
            (
                r#"{"messages":[],"functions":[{"name":"f"}]}"#.into(),
                "`functions` is not supported by a Responses upstream: use `tools` and `tool_choice`",
            ),
            (
                r#"{"messages":[],"function_call":"auto"}"#.into(),
                "`function_call` is not supported by a Responses upstream: use `tools` and `tool_choice`",
            ),
            (
                r#"{"messages":[],"n":2}"#.into(),
                "`n` must be 1: a Responses upstream gives one answer",
            ),
            (r#"{"model":"x"}"#.into(), "`messages` must be an array"),
            (
                r#"{"messages":[],"tools":{}}"#.into(),
                "`tools` must be an array",
            ),
            (
                r#"{"messages":[],"tools":[{"type":"custom","custom":{"name":"f"}}]}"#.into(),
                "`tools[0].type` \"custom\" is not supported over a Responses upstream",
            ),
            (
                r#"{"messages":[],"tools":[{"type":"function","function":{}}]}"#.into(),
                "`tools[0].function.name` must be a string",
            ),
            (
                r#"{"messages":[],"tools":[{"type":"function","function":{"name":"f","description":1}}]}"#.into(),
                "`tools[0].function.description` must be a string",
            ),
            (
                r#"{"messages":[],"tools":[{"type":"function","function":{"name":"f","parameters":[]}}]}"#.into(),
                "`tools[0].function.parameters` must be an object",
            ),
            (
                r#"{"messages":[],"tools":[{"type":"function","function":{"name":"f","strict":"yes"}}]}"#.into(),
                "`tools[0].function.strict` must be a boolean",
            ),
            (
                r#"{"messages":[],"tool_choice":"any"}"#.into(),
                "`tool_choice` must be \"auto\", \"required\", \"none\" or a function",
            ),
            (
                r#"{"messages":[],"tool_choice":{"type":"allowed_tools","allowed_tools":{}}}"#.into(),
                "`tool_choice` must be \"auto\", \"required\", \"none\" or a function",
            ),
            (
                r#"{"messages":[],"tool_choice":{"type":"function","function":{}}}"#.into(),
                "`tool_choice.function.name` must be a string",
            ),
            (
                r#"{"messages":[],"parallel_tool_calls":"no"}"#.into(),
                "`parallel_tool_calls` must be a boolean",
            ),
            (
                r#"{"messages":[],"reasoning_effort":3}"#.into(),
                "`reasoning_effort` must be a string",
            ),
            (
                r#"{"messages":[],"response_format":{"type":"grammar"}}"#.into(),
                "`response_format.type` must be \"text\", \"json_object\" or \"json_schema\"",
            ),
            (
                r#"{"messages":[],"response_format":{"type":"json_schema","json_schema":{"schema":{}}}}"#.into(),
                "`response_format.json_schema.name` must be a string",
            ),
        ];
        for (body, want) in cases {
            assert_eq!(
                translate(&body, None, false),
                Err(TranslateError::Request(want.into())),
                "{body}"
            );
        }
    }

    fn answer(body: &str) -> Result<String, TranslateError> {
        response_at(body.as_bytes(), 7).map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    #[test]
    fn a_text_answer_maps_with_cached_and_reasoning_tokens_in_the_usage() {
        let body = r#"{"id":"resp_1","object":"response","created_at":1760000000,"status":"completed","model":"gpt-5","output":[{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[]},{"type":"output_text","text":", world","annotations":[]}]},{"id":"msg_2","type":"message","role":"assistant","content":[{"type":"output_text","text":"!"}]}],"usage":{"input_tokens":130,"input_tokens_details":{"cached_tokens":100},"output_tokens":40,"output_tokens_details":{"reasoning_tokens":32},"total_tokens":170}}"#;
        assert_eq!(
            answer(body).as_deref(),
            Ok(
                r#"{"id":"resp_1","object":"chat.completion","created":1760000000,"model":"gpt-5","choices":[{"index":0,"message":{"role":"assistant","content":"Hello, world!"},"finish_reason":"stop"}],"usage":{"prompt_tokens":130,"completion_tokens":40,"total_tokens":170,"prompt_tokens_details":{"cached_tokens":100},"completion_tokens_details":{"reasoning_tokens":32}}}"#
            )
        );
    }

    #[test]
    fn created_is_the_responses_created_at_else_the_time_given() {
        for (created_at, created) in [
            (r#","created_at":1760000000"#, 1_760_000_000),
            (r#","created_at":1760000000.75"#, 1_760_000_000),
            (r#","created_at":-1"#, 7),
            (r#","created_at":null"#, 7),
            ("", 7),
        ] {
            let body = format!(
                r#"{{"id":"r","object":"response"{created_at},"status":"completed","model":"g","output":[]}}"#
            );
            let want = format!(
                r#"{{"id":"r","object":"chat.completion","created":{created},"model":"g","choices":[{{"index":0,"message":{{"role":"assistant","content":null}},"finish_reason":"stop"}}]}}"#
            );
            assert_eq!(answer(&body), Ok(want), "{created_at}");
        }
    }

    #[test]
    fn a_response_without_usage_gives_a_completion_without_usage() {
        let want = r#"{"id":"r","object":"chat.completion","created":7,"model":"g","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}"#;
        for usage in ["", r#","usage":null"#] {
            let body = format!(
                r#"{{"id":"r","object":"response","status":"completed","model":"g","output":[{{"type":"message","content":[{{"type":"output_text","text":"hi"}}]}}]{usage}}}"#
            );
            let got = answer(&body).unwrap();
            assert_eq!(got, want, "{usage}");
            assert_eq!(crate::usage::Usage::from_json_bytes(got.as_bytes()), None);
        }
        let body = r#"{"id":"r","object":"response","status":"completed","model":"g","output":[],"usage":{"input_tokens":0,"output_tokens":0}}"#;
        assert_eq!(
            answer(body).as_deref(),
            Ok(
                r#"{"id":"r","object":"chat.completion","created":7,"model":"g","choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"stop"}],"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}"#
            )
        );
    }

    #[test]
    fn calls_reasoning_and_refusals_map_and_other_items_are_dropped() {
        let body = r#"{"id":"resp_2","object":"response","status":"completed","model":"gpt-5","output":[{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"**Plan**"},{"type":"summary_text","text":""},{"type":"summary_text","text":"Call it."}],"encrypted_content":"gAAA"},{"id":"ws_1","type":"web_search_call","status":"completed"},{"id":"rs_2","type":"reasoning","summary":[{"type":"summary_text","text":"Again."}]},{"id":"rs_3","type":"reasoning","summary":[]},{"id":"msg_1","type":"message","content":[{"type":"output_text","text":"Checking."},{"type":"refusal","refusal":"Not that"},{"type":"refusal","refusal":" one."}]},{"id":"fc_1","type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},{"id":"fc_2","type":"function_call","call_id":"call_2","name":"now","arguments":""}],"usage":{"input_tokens":5,"output_tokens":7,"total_tokens":12}}"#;
        assert_eq!(
            answer(body).as_deref(),
            Ok(
                r#"{"id":"resp_2","object":"chat.completion","created":7,"model":"gpt-5","choices":[{"index":0,"message":{"role":"assistant","content":"Checking.","refusal":"Not that one.","reasoning_content":"**Plan**\n\nCall it.\n\nAgain.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},{"id":"call_2","type":"function","function":{"name":"now","arguments":""}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}"#
            )
        );
    }

    #[test]
    fn each_status_maps_to_a_finish_reason() {
        let call = r#"{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}"#;
        let call_out = r#","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]"#;
        let cases = [
            ("completed", "null", "", "stop"),
            ("completed", "null", call, "tool_calls"),
            (
                "incomplete",
                r#"{"reason":"max_output_tokens"}"#,
                "",
                "length",
            ),
            (
                "incomplete",
                r#"{"reason":"max_output_tokens"}"#,
                call,
                "length",
            ),
            (
                "incomplete",
                r#"{"reason":"content_filter"}"#,
                "",
                "content_filter",
            ),
            ("incomplete", "null", "", "length"),
            ("cancelled", "null", "", "stop"),
            ("in_progress", "null", call, "tool_calls"),
        ];
        for (status, details, output, finish) in cases {
            let body = format!(
                r#"{{"id":"r","object":"response","status":"{status}","incomplete_details":{details},"model":"g","output":[{output}]}}"#
            );
            let calls = if output.is_empty() { "" } else { call_out };
            let want = format!(
                r#"{{"id":"r","object":"chat.completion","created":7,"model":"g","choices":[{{"index":0,"message":{{"role":"assistant","content":null{calls}}},"finish_reason":"{finish}"}}]}}"#
            );
            assert_eq!(answer(&body), Ok(want), "{status} {details}");
        }
    }

    #[test]
    fn an_answer_that_is_not_a_finished_response_is_refused() {
        let cases = [
            ("<html>", "not JSON: expected value at line 1 column 1"),
            (
                r#"{"error":{"message":"x","type":"server_error"}}"#,
                "not a Response: its `object` is not \"response\"",
            ),
            (
                r#"{"object":"chat.completion","choices":[]}"#,
                "not a Response: its `object` is not \"response\"",
            ),
            (
                r#"{"object":"response","status":"failed","error":{"code":"server_error","message":"The model failed."},"output":[]}"#,
                "the Response failed: The model failed.",
            ),
            (
                r#"{"object":"response","status":"failed","error":null}"#,
                "the Response failed",
            ),
            (
                r#"{"object":"response","status":"completed"}"#,
                "the Response has no `output` array",
            ),
        ];
        for (body, want) in cases {
            assert_eq!(
                answer(body),
                Err(TranslateError::Response(want.into())),
                "{body}"
            );
        }
    }

    #[test]
    fn error_bodies_map_to_chat_errors() {
        let chat = |message: &str, kind: &str, code: &str| {
            format!(
                r#"{{"error":{{"message":"{message}","type":"{kind}","code":{code},"param":null}}}}"#
            )
        };
        let cases = [
            (
                400,
                r#"{"error":{"message":"Unsupported parameter: 'x'.","type":"invalid_request_error","param":"x","code":"unsupported_parameter"}}"#,
                chat(
                    "Unsupported parameter: 'x'.",
                    "invalid_request_error",
                    r#""unsupported_parameter""#,
                ),
            ),
            (
                401,
                r#"{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
                chat(
                    "Incorrect API key provided.",
                    "invalid_request_error",
                    r#""invalid_api_key""#,
                ),
            ),
            (
                404,
                r#"{"error":{"message":"The model `gpt-nope` does not exist.","type":"invalid_request_error","param":"model","code":"model_not_found"}}"#,
                chat(
                    "The model `gpt-nope` does not exist.",
                    "invalid_request_error",
                    r#""model_not_found""#,
                ),
            ),
            (
                429,
                r#"{"error":{"message":"Rate limit reached.","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
                chat(
                    "Rate limit reached.",
                    "requests",
                    r#""rate_limit_exceeded""#,
                ),
            ),
            (
                500,
                r#"{"error":{"message":"The server had an error.","type":"server_error","param":null,"code":null}}"#,
                chat("The server had an error.", "server_error", "null"),
            ),
            // Types by the status when the body gives none; a numeric code is kept.
            (
                500,
                r#"{"error":{"message":"boom","code":500}}"#,
                chat("boom", "server_error", "500"),
            ),
            (
                429,
                r#"{"error":{"message":"slow","code":{"x":1}}}"#,
                chat("slow", "rate_limit_error", "null"),
            ),
            (
                403,
                r#"{"message":"no access"}"#,
                chat("no access", "permission_error", "null"),
            ),
            (
                404,
                r#"{"error":"no route"}"#,
                chat("no route", "invalid_request_error", "null"),
            ),
            (
                401,
                "unauthorized",
                chat("unauthorized", "invalid_request_error", "null"),
            ),
            (
                502,
                " <html><body>Bad Gateway</body></html>\n",
                chat(
                    "<html><body>Bad Gateway</body></html>",
                    "server_error",
                    "null",
                ),
            ),
            (
                503,
                "",
                chat("the upstream answered HTTP 503", "server_error", "null"),
            ),
            (
                400,
                r#"{"error":{"message":"  ","type":"invalid_request_error"}}"#,
                chat(
                    "the upstream answered HTTP 400",
                    "invalid_request_error",
                    "null",
                ),
            ),
        ];
        for (status, body, want) in cases {
            assert_eq!(
                String::from_utf8(error(status, body.as_bytes())),
                Ok(want),
                "{status} {body}"
            );
        }
    }

    #[test]
    fn a_long_error_message_is_cut_at_a_character_boundary() {
        let page = format!("<html>x{}</html>", "é".repeat(1000));
        let cut = format!("<html>x{}", "é".repeat(508));
        assert_eq!(cut.len(), 1023);
        assert_eq!(
            String::from_utf8(error(502, page.as_bytes())),
            Ok(format!(
                r#"{{"error":{{"message":"{cut}","type":"server_error","code":null,"param":null}}}}"#
            ))
        );
    }

    fn run(stream: &mut Stream, input: &[u8], chunk: usize) -> String {
        let mut out = Vec::new();
        for piece in input.chunks(chunk) {
            stream.feed(piece, &mut out);
        }
        stream.finish(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn golden_streams_translate_byte_for_byte_at_any_boundaries() {
        for (input, want) in [
            (GOLDEN_TOOL_STREAM, GOLDEN_TOOL_STREAM_OUT),
            (GOLDEN_INCOMPLETE_STREAM, GOLDEN_INCOMPLETE_STREAM_OUT),
        ] {
            for chunk in [input.len(), 1] {
                let mut stream = Stream::at(1_760_000_009);
                assert_eq!(run(&mut stream, input.as_bytes(), chunk), want, "{chunk}");
                assert!(!stream.ended_by_error());
            }
        }
    }

    /// An upstream event of type `kind` with the JSON members `rest`.
    fn ev(kind: &str, rest: &str) -> String {
        format!("event: {kind}\ndata: {{\"type\":\"{kind}\"{rest}}}\n\n")
    }

    /// A chat chunk of the stream `resp_s` with `delta`.
    fn chunk(delta: &str) -> String {
        format!("data: {{\"id\":\"resp_s\",\"object\":\"chat.completion.chunk\",\"created\":9,\"model\":\"g\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":null}}]}}\n\n")
    }

    fn created() -> String {
        ev(
            "response.created",
            r#","response":{"id":"resp_s","object":"response","created_at":1,"status":"in_progress","model":"g","output":[]}"#,
        )
    }

    const FIRST: &str = r#"{"role":"assistant","content":""}"#;

    #[test]
    fn finish_adds_nothing_to_a_whole_or_a_cut_answer() {
        let text = ev(
            "response.output_text.delta",
            r#","item_id":"m","output_index":0,"content_index":0,"delta":"hi""#,
        );
        let cut = format!("{}{text}", created());
        assert_eq!(
            run(&mut Stream::at(9), cut.as_bytes(), 4),
            chunk(FIRST) + &chunk(r#"{"content":"hi"}"#)
        );
        // A response without usage (or with `usage: null`) ends with a chunk without.
        let last = "data: {\"id\":\"resp_s\",\"object\":\"chat.completion.chunk\",\"created\":9,\"model\":\"g\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
        for response in [
            r#"{"status":"completed"}"#,
            r#"{"status":"completed","usage":null}"#,
        ] {
            let completed = ev("response.completed", &format!(r#","response":{response}"#));
            let whole = format!("{cut}{completed}{text}");
            assert_eq!(
                run(&mut Stream::at(9), whole.as_bytes(), 5),
                chunk(FIRST) + &chunk(r#"{"content":"hi"}"#) + last + "data: [DONE]\n\n",
                "{response}"
            );
        }
        assert_eq!(run(&mut Stream::at(9), b"", 1), "");
    }

    #[test]
    fn incomplete_answers_finish_by_their_reason() {
        for (details, called, finish) in [
            (r#"{"reason":"max_output_tokens"}"#, false, "length"),
            (r#"{"reason":"content_filter"}"#, false, "content_filter"),
            (r#"{"reason":"content_filter"}"#, true, "content_filter"),
            ("null", true, "length"),
        ] {
            let call = ev(
                "response.output_item.added",
                r#","output_index":0,"item":{"id":"fc","type":"function_call","call_id":"c","name":"f","arguments":""}"#,
            );
            let input = format!(
                "{}{}{}",
                created(),
                if called { call.as_str() } else { "" },
                ev(
                    "response.incomplete",
                    &format!(
                        r#","response":{{"status":"incomplete","incomplete_details":{details}}}"#
                    )
                )
            );
            let got = run(&mut Stream::at(9), input.as_bytes(), input.len());
            let call = r#"{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":""}}]}"#;
            let want = [
                chunk(FIRST),
                if called { chunk(call) } else { String::new() },
                format!("data: {{\"id\":\"resp_s\",\"object\":\"chat.completion.chunk\",\"created\":9,\"model\":\"g\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{finish}\"}}]}}\n\n"),
                "data: [DONE]\n\n".to_owned(),
            ]
            .concat();
            assert_eq!(got, want, "{details} {called}");
        }
    }

    #[test]
    fn calls_are_numbered_and_matched_by_item_id_else_output_index() {
        let added = |index: u64, id: &str, call: &str| {
            ev(
                "response.output_item.added",
                &format!(
                    r#","output_index":{index},"item":{{"id":"{id}","type":"function_call","call_id":"{call}","name":"f","arguments":""}}"#
                ),
            )
        };
        let args = |rest: &str| ev("response.function_call_arguments.delta", rest);
        let input = [
            created(),
            ev(
                "response.output_item.added",
                r#","output_index":0,"item":{"id":"ws","type":"web_search_call"}"#,
            ),
            added(1, "fc_a", "call_a"),
            added(2, "fc_b", "call_b"),
            args(r#","item_id":"fc_b","output_index":2,"delta":"{\"b\"""#),
            args(r#","item_id":"fc_a","output_index":1,"delta":"{\"a\"""#),
            args(r#","output_index":2,"delta":":2}""#),
            args(r#","item_id":"fc_a","output_index":1,"delta":""#),
            args(r#","item_id":"fc_x","output_index":1,"delta":"lost""#),
            args(r#","output_index":7,"delta":"lost""#),
            args(r#","delta":"lost""#),
            args(r#","item_id":"fc_a","delta":":1}""#),
        ]
        .concat();
        let want = [
            chunk(FIRST),
            chunk(r#"{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]}"#),
            chunk(r#"{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"f","arguments":""}}]}"#),
            chunk(r#"{"tool_calls":[{"index":1,"function":{"arguments":"{\"b\""}}]}"#),
            chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\""}}]}"#),
            chunk(r#"{"tool_calls":[{"index":1,"function":{"arguments":":2}"}}]}"#),
            chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]}"#),
        ]
        .concat();
        assert_eq!(run(&mut Stream::at(9), input.as_bytes(), 13), want);
    }

    #[test]
    fn a_call_given_no_delta_gets_the_arguments_of_its_done_item() {
        let item = |args: &str| {
            format!(
                r#","output_index":0,"item":{{"id":"fc","type":"function_call","call_id":"c","name":"f","arguments":"{args}"}}"#
            )
        };
        let input = [
            created(),
            ev("response.output_item.added", &item("")),
            ev("response.output_item.done", &item(r#"{\"x\":1}"#)),
            ev(
                "response.output_item.added",
                r#","output_index":1,"item":{"id":"fc2","type":"function_call","call_id":"c2","name":"g","arguments":""}"#,
            ),
            ev(
                "response.function_call_arguments.delta",
                r#","item_id":"fc2","output_index":1,"delta":"{}""#,
            ),
            ev(
                "response.output_item.done",
                r#","output_index":1,"item":{"id":"fc2","type":"function_call","call_id":"c2","name":"g","arguments":"{}"}"#,
            ),
            ev(
                "response.output_item.added",
                r#","output_index":2,"item":{"id":"fc3","type":"function_call","call_id":"c3","name":"h","arguments":""}"#,
            ),
            ev(
                "response.output_item.done",
                r#","output_index":2,"item":{"id":"fc3","type":"function_call","call_id":"c3","name":"h","arguments":""}"#,
            ),
        ]
        .concat();
        let want = [
            chunk(FIRST),
            chunk(r#"{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":""}}]}"#),
            chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":1}"}}]}"#),
            chunk(r#"{"tool_calls":[{"index":1,"id":"c2","type":"function","function":{"name":"g","arguments":""}}]}"#),
            chunk(r#"{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]}"#),
            chunk(r#"{"tool_calls":[{"index":2,"id":"c3","type":"function","function":{"name":"h","arguments":""}}]}"#),
        ]
        .concat();
        assert_eq!(run(&mut Stream::at(9), input.as_bytes(), 17), want);
    }

    #[test]
    fn summary_parts_are_separated_and_refusals_and_empty_deltas_map() {
        let summary = |item: &str, index: u64, delta: &str| {
            ev(
                "response.reasoning_summary_text.delta",
                &format!(
                    r#","item_id":"{item}","output_index":0,"summary_index":{index},"delta":"{delta}""#
                ),
            )
        };
        let input = [
            created(),
            summary("rs_1", 0, "a"),
            summary("rs_1", 0, ""),
            summary("rs_1", 0, "b"),
            summary("rs_1", 1, ""),
            summary("rs_1", 1, "c"),
            summary("rs_2", 0, "d"),
            ev(
                "response.refusal.delta",
                r#","item_id":"m","output_index":1,"content_index":0,"delta":"No.""#,
            ),
            ev(
                "response.output_text.delta",
                r#","item_id":"m","output_index":1,"content_index":0,"delta":"""#,
            ),
            ev("response.in_progress", ""),
            ev("response.content_part.added", ""),
            ev("response.output_text.done", r#","text":"x""#),
            "data: not json\n\n".to_owned(),
        ]
        .concat();
        let want = [
            chunk(FIRST),
            chunk(r#"{"reasoning_content":"a"}"#),
            chunk(r#"{"reasoning_content":"b"}"#),
            chunk(r#"{"reasoning_content":"\n\nc"}"#),
            chunk(r#"{"reasoning_content":"\n\nd"}"#),
            chunk(r#"{"refusal":"No."}"#),
        ]
        .concat();
        assert_eq!(run(&mut Stream::at(9), input.as_bytes(), 9), want);
    }

    #[test]
    fn failures_and_error_events_become_error_frames_and_end_the_translation() {
        let text = ev(
            "response.output_text.delta",
            r#","item_id":"m","output_index":0,"content_index":0,"delta":"late""#,
        );
        let completed = ev(
            "response.completed",
            r#","response":{"status":"completed"}"#,
        );
        let frame = |message: &str, kind: &str, code: &str| {
            format!("data: {{\"error\":{{\"message\":\"{message}\",\"type\":\"{kind}\",\"code\":{code},\"param\":null}}}}\n\n")
        };
        let cases = [
            (
                ev(
                    "response.failed",
                    r#","response":{"status":"failed","error":{"code":"server_error","message":"The model failed."}}"#,
                ),
                frame("The model failed.", "server_error", r#""server_error""#),
            ),
            (
                ev(
                    "response.failed",
                    r#","response":{"status":"failed","error":{"type":"invalid_request_error","code":"invalid_prompt","message":" bad "}}"#,
                ),
                frame("bad", "invalid_request_error", r#""invalid_prompt""#),
            ),
            (
                ev(
                    "response.failed",
                    r#","response":{"status":"failed","error":null}"#,
                ),
                frame("the upstream response failed", "server_error", "null"),
            ),
            (
                ev(
                    "error",
                    r#","code":"context_length_exceeded","message":"Too long.","param":"input""#,
                ),
                frame("Too long.", "server_error", r#""context_length_exceeded""#),
            ),
            (
                ev(
                    "error",
                    r#","error":{"type":"invalid_request_error","code":"rate_limit_exceeded","message":"Slow down.","param":null}"#,
                ),
                frame(
                    "Slow down.",
                    "invalid_request_error",
                    r#""rate_limit_exceeded""#,
                ),
            ),
            (
                "event: error\ndata: \n\n".to_owned(),
                frame(
                    "the upstream stream reported an error",
                    "server_error",
                    "null",
                ),
            ),
        ];
        for (failure, want) in cases {
            let input = format!("{}{failure}{text}{completed}", created());
            let mut stream = Stream::at(9);
            assert_eq!(
                run(&mut stream, input.as_bytes(), 6),
                chunk(FIRST) + &want,
                "{failure}"
            );
            assert!(stream.ended_by_error());
        }
    }

    #[test]
    fn only_an_error_ends_the_translation_by_error() {
        let completed = ev(
            "response.completed",
            r#","response":{"status":"completed"}"#,
        );
        let whole = format!("{}{completed}", created());
        let failed = ev("response.failed", r#","response":{"status":"failed"}"#);
        let after = format!("{whole}{failed}");
        for input in ["", &created(), &whole, &after, GOLDEN_TOOL_STREAM] {
            let mut stream = Stream::at(9);
            run(&mut stream, input.as_bytes(), input.len().max(1));
            assert!(!stream.ended_by_error(), "{input}");
        }
    }

    const TOO_LARGE: &str = "data: {\"error\":{\"message\":\"an upstream event was larger than 1 MiB and could not be translated\",\"type\":\"upstream_error\",\"code\":\"upstream_event_too_large\",\"param\":null}}\n\n";

    #[test]
    fn an_event_too_large_to_read_ends_the_translation_with_an_error() {
        let big = ev(
            "response.output_text.delta",
            &format!(
                r#","item_id":"m","output_index":0,"content_index":0,"delta":"{}""#,
                "x".repeat(crate::sse::MAX_EVENT_BYTES)
            ),
        );
        let (big_head, big_tail) = big.split_at(big.len() - 10);
        let completed = ev(
            "response.completed",
            r#","response":{"status":"completed"}"#,
        );
        let mut stream = Stream::at(9);
        let mut out = Vec::new();
        stream.feed(format!("{}{big_head}", created()).as_bytes(), &mut out);
        let want = chunk(FIRST) + TOO_LARGE;
        assert_eq!(String::from_utf8_lossy(&out), want);
        assert!(stream.ended_by_error());
        stream.feed(format!("{big_tail}{completed}").as_bytes(), &mut out);
        stream.finish(&mut out);
        assert_eq!(String::from_utf8_lossy(&out), want);
    }

    #[test]
    fn an_event_too_large_after_the_end_adds_nothing() {
        let completed = ev(
            "response.completed",
            r#","response":{"status":"completed"}"#,
        );
        let mut stream = Stream::at(9);
        let mut out = Vec::new();
        stream.feed(format!("{}{completed}", created()).as_bytes(), &mut out);
        let end = out.len();
        stream.feed(b"data: ", &mut out);
        stream.feed(&vec![b'x'; crate::sse::MAX_EVENT_BYTES], &mut out);
        stream.finish(&mut out);
        assert_eq!(out.len(), end);
        assert!(!stream.ended_by_error());
    }
}
