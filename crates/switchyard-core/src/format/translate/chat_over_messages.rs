//! An OpenAI chat-completions client over an Anthropic Messages upstream: the chat
//! request as a Messages request, and the Message (JSON, error or event stream) back as
//! a chat completion.
//!
//! # Request
//!
//! Output members, in this order: `model`, `messages`, `system` (when any), `max_tokens`,
//! then those the client's body gives: `stop_sequences`, `temperature`, `top_p`,
//! `thinking`, `tools`, `tool_choice`, `metadata`, and `stream: true` last when streaming.
//!
//! - `system` and `developer` messages, wherever they stand, become `system`: a string
//!   when the only system text is one message's string content, else text blocks in
//!   order.
//! - `user` content: a string stays a string; parts become blocks — `text` a text block,
//!   `image_url` an image (a `data:<type>;base64,<data>` URL a `base64` source, an
//!   `http(s)` URL a `url` source; `detail` dropped). `input_audio` and `file` parts
//!   have no counterpart and are refused.
//! - `assistant` content becomes text blocks, its `tool_calls` `tool_use` blocks whose
//!   `input` is the parsed `arguments` (`""` is `{}`; anything but a JSON object is
//!   refused). `reasoning_content` is dropped: Anthropic takes a thinking block back only
//!   with the signature it issued, which the chat format does not carry.
//! - `tool` messages become `tool_result` blocks of a user message, their text (parts
//!   joined) the result's `content`. Consecutive messages of one Anthropic role merge
//!   into one message (Anthropic wants the roles to alternate), tool results first: the
//!   results of a tool-call turn and the user message after them are one user message.
//! - Empty text adds no block (Anthropic refuses empty text blocks, and chat clients send
//!   `content: ""` beside tool calls); a message left with nothing adds no message.
//! - `tools` become `{name, description, input_schema}` (`parameters`, or an empty
//!   object schema; `strict` dropped). `tool_choice`: `auto` → `auto`, `required` →
//!   `any`, `none` → `none`, a named function → `tool`. `parallel_tool_calls: false` sets
//!   `disable_parallel_tool_use` on the tool choice (`auto` when the client gave none
//!   and there are tools).
//! - `stop` (a string or strings) → `stop_sequences`; `user` → `metadata.user_id`.
//! - `temperature` and `top_p` above 1, Anthropic's upper bound, are sent as 1; other
//!   values as given (a negative one is Anthropic's to refuse).
//! - `reasoning_effort` `minimal`/`low`, `medium`, `high`, `xhigh` (Codex's highest) →
//!   `thinking` with a budget of 1024, 8192, 24576, 32768 tokens, cut to
//!   `max_tokens - 1` (Anthropic wants it below the output bound); `none` asks for none. With thinking, `temperature` and `top_p` are
//!   dropped (Anthropic refuses them beside it). Thinking is left out, keeping them, when
//!   the budget would fall under Anthropic's minimum of 1024, when `tool_choice` forces a
//!   tool (Anthropic refuses forced tool use with thinking), and when the last assistant
//!   message called tools: the answer continues that tool-use turn, which Anthropic
//!   accepts with thinking only if the turn's signed thinking blocks come back.
//! - Refused: `n` other than 1 (Anthropic gives one answer), the legacy `functions`,
//!   `function_call` and `function` role (no call ids to pair calls with results).
//! - Dropped: `response_format`, `logprobs`, `top_logprobs`, `logit_bias`,
//!   `frequency_penalty`, `presence_penalty`, `seed`, `stream_options`, `service_tier`,
//!   `store`, `modalities`, `audio`, `prediction`, `metadata` and any other member;
//!   message `name`s; unknown members of messages, parts and tools.
//!
//! # Answer
//!
//! The Message's id and model; text blocks joined as `content` (`null` without any),
//! thinking blocks joined as `reasoning_content`, `tool_use` blocks as `tool_calls` with
//! the input's compact JSON as `arguments`; other blocks (redacted thinking, server tool
//! blocks) are dropped. `finish_reason` and `usage` come from [`map`](super::map).
//!
//! A stream gives a chunk per delta: `message_start` the first (`role` and empty
//! `content`), text and thinking deltas `content` and `reasoning_content`, a `tool_use`
//! block a tool call (numbered from 0) with its id, name and empty arguments, then each
//! argument fragment as it comes (a call given no argument text gets `{}`, as the JSON
//! answer's would), `message_delta` a chunk with the `finish_reason` and `usage` (counts
//! of `message_delta` over those of `message_start`), `message_stop` `[DONE]`. An
//! `error` event becomes an OpenAI error frame and ends the translation; so does an
//! upstream event larger than [`MAX_EVENT_BYTES`](crate::sse::MAX_EVENT_BYTES), which
//! the parser skips (its content would be lost from an answer that looks whole), with
//! `{"error": {"message": "an upstream event was larger than 1 MiB and could not be
//! translated", "type": "upstream_error", "code": "upstream_event_too_large", "param":
//! null}}`. Nothing is translated after either, [`Stream::finish`] adds nothing, and
//! [`Stream::ended_by_error`] says so.
//!
//! Error bodies become `{"error": {message, type, code: null, param: null}}`, the type
//! Anthropic's (`rate_limit_error`, …), or Anthropic's for the status when the body is
//! not an Anthropic error, whose text is then the message; a message is cut to
//! [`MAX_ERROR_MESSAGE`](super::map::MAX_ERROR_MESSAGE) bytes.
//!
//! # `created`
//!
//! No clock is read here: [`response_at`] and [`Stream::at`] take the request's time in
//! Unix seconds for the chat `created` members.

use super::chat::{self, member, ChunkWriter, Chunks, Role, ToolChoice, Upstream, UserContent};
use super::json::{self, refuse, str_at, string};
use super::map::{anthropic_error_type, error_message, error_object, finish_reason_of};
use super::map::{upstream_message, Tokens};
use super::TranslateError;
use crate::llm::RawObject;
use crate::sse::{SseEvent, SseParser};
use serde_json::{json, Map, Value};

/// Anthropic's smallest thinking budget.
const MIN_THINKING_BUDGET: u64 = 1024;

/// How refusals name an Anthropic upstream.
const ANTHROPIC: Upstream = Upstream {
    name: "an Anthropic upstream",
    no_type: "has no Anthropic Messages counterpart",
    no_parts: "parts have no Anthropic Messages counterpart",
};

fn text_block(text: String) -> Value {
    json!({"type": "text", "text": text})
}

/// The chat request `body` as a Messages request for `model`; see the module docs.
pub fn request(
    body: &RawObject,
    model: &str,
    max_tokens: u64,
    stream: bool,
) -> Result<Vec<u8>, TranslateError> {
    let messages = chat::messages(body, &ANTHROPIC)?;
    let (system, turns) = conversation(&messages)?;
    let open_tool_turn = turns
        .iter()
        .rev()
        .find(|t| t.role == "assistant")
        .is_some_and(|t| t.blocks.iter().any(|b| b["type"] == "tool_use"));

    let mut out = Map::new();
    out.insert("model".into(), model.into());
    out.insert(
        "messages".into(),
        turns.into_iter().map(Turn::into_message).collect(),
    );
    if let Some(system) = system {
        out.insert("system".into(), system);
    }
    out.insert("max_tokens".into(), max_tokens.into());
    if let Some(stop) = member(body, "stop")? {
        out.insert("stop_sequences".into(), stop_sequences(stop)?);
    }
    let tools = member(body, "tools")?.map(tools).transpose()?;
    let (tool_choice, forced) = tool_choice(body, tools.is_some())?;
    let effort = member(body, "reasoning_effort")?;
    match thinking_budget(effort, max_tokens)? {
        Some(budget) if !forced && !open_tool_turn => {
            out.insert(
                "thinking".into(),
                json!({"type": "enabled", "budget_tokens": budget}),
            );
        }
        _ => {
            for name in ["temperature", "top_p"] {
                if let Some(v) = member(body, name)? {
                    out.insert(name.into(), at_most_one(v, name)?);
                }
            }
        }
    }
    if let Some(tools) = tools {
        out.insert("tools".into(), tools);
    }
    if let Some(choice) = tool_choice {
        out.insert("tool_choice".into(), choice);
    }
    if let Some(user) = member(body, "user")? {
        let Value::String(user) = user else {
            return Err(refuse("`user` must be a string".into()));
        };
        out.insert("metadata".into(), json!({"user_id": user}));
    }
    if stream {
        out.insert("stream".into(), true.into());
    }
    serde_json::to_vec(&Value::Object(out)).map_err(|e| refuse(e.to_string()))
}

/// One Anthropic message being built from consecutive chat messages of its role.
#[derive(Debug)]
struct Turn {
    role: &'static str,
    /// The content when it is one chat message's string content, kept a string.
    plain: Option<String>,
    /// `tool_result` blocks, which go before the others.
    results: Vec<Value>,
    blocks: Vec<Value>,
}

impl Turn {
    fn new(role: &'static str) -> Self {
        Self {
            role,
            plain: None,
            results: Vec::new(),
            blocks: Vec::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.plain.is_none() && self.results.is_empty() && self.blocks.is_empty()
    }

    fn absorb(&mut self, next: Turn) {
        self.blocks.extend(self.plain.take().map(text_block));
        self.results.extend(next.results);
        self.blocks.extend(next.plain.map(text_block));
        self.blocks.extend(next.blocks);
    }

    fn into_message(self) -> Value {
        let content = match self.plain {
            Some(text) => Value::String(text),
            None => self.results.into_iter().chain(self.blocks).collect(),
        };
        json!({"role": self.role, "content": content})
    }
}

/// The system prompt and the merged messages of a chat `messages` array.
fn conversation(messages: &[Value]) -> Result<(Option<Value>, Vec<Turn>), TranslateError> {
    // Each system text, and whether it was a message's string content.
    let mut system: Vec<(String, bool)> = Vec::new();
    let mut turns: Vec<Turn> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let content = message.get("content").unwrap_or(&Value::Null);
        let turn = match chat::role(message, &at, &ANTHROPIC)? {
            Role::System => {
                let plain = content.is_string();
                system.extend(chat::texts(content, &at)?.into_iter().map(|t| (t, plain)));
                continue;
            }
            Role::User => user_turn(content, &at)?,
            Role::Assistant => assistant_turn(message, content, &at)?,
            Role::Tool => {
                let mut turn = Turn::new("user");
                turn.results.push(json!({
                    "type": "tool_result",
                    "tool_use_id": string(message, "tool_call_id", &at)?,
                    "content": chat::texts(content, &at)?.concat(),
                }));
                turn
            }
        };
        if turn.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some(last) if last.role == turn.role => last.absorb(turn),
            _ => turns.push(turn),
        }
    }
    let system = match system.as_slice() {
        [] => None,
        [(text, true)] => Some(Value::String(text.clone())),
        _ => Some(system.into_iter().map(|(t, _)| text_block(t)).collect()),
    };
    Ok((system, turns))
}

fn user_turn(content: &Value, at: &str) -> Result<Turn, TranslateError> {
    let mut turn = Turn::new("user");
    let text = |text: &str| text_block(text.to_owned());
    match chat::user_content(content, at, &ANTHROPIC, text, image)? {
        UserContent::Text(text) => turn.plain = Some(text.to_owned()),
        UserContent::Parts(blocks) => turn.blocks = blocks,
    }
    Ok(turn)
}

/// An `image_url` part as an image block.
fn image(part: &Value, at: &str) -> Result<Value, TranslateError> {
    let (url, _) = chat::image_url(part, at)?;
    if let Some(data_url) = url.strip_prefix("data:") {
        let media = data_url
            .split_once(',')
            .and_then(|(meta, data)| Some((meta.strip_suffix(";base64")?, data)));
        let Some((media_type, data)) = media else {
            return Err(refuse(format!(
                "`{at}.image_url.url` must be a base64 data URL (data:<type>;base64,<data>)"
            )));
        };
        return Ok(json!({"type": "image", "source":
            {"type": "base64", "media_type": media_type, "data": data}}));
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        return Ok(json!({"type": "image", "source": {"type": "url", "url": url}}));
    }
    Err(refuse(format!(
        "`{at}.image_url.url` must be an http(s) or a data URL"
    )))
}

fn assistant_turn(message: &Value, content: &Value, at: &str) -> Result<Turn, TranslateError> {
    let calls = chat::tool_calls(message, at, &ANTHROPIC)?;
    let mut turn = Turn::new("assistant");
    let texts = chat::texts(content, at)?;
    match <[String; 1]>::try_from(texts) {
        Ok([text]) if content.is_string() && calls.is_empty() => turn.plain = Some(text),
        Ok([text]) => turn.blocks.push(text_block(text)),
        Err(texts) => turn.blocks.extend(texts.into_iter().map(text_block)),
    }
    for call in chat::function_calls(calls, at, &ANTHROPIC, tool_input)? {
        turn.blocks.push(json!({
            "type": "tool_use",
            "id": call.id,
            "name": call.name,
            "input": call.arguments,
        }));
    }
    Ok(turn)
}

/// The `input` of a tool call with `arguments` (of the function at `fat`): `{}` for
/// none, else the JSON object they must hold.
fn tool_input(arguments: &str, fat: &str) -> Result<Value, TranslateError> {
    if arguments.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => Ok(v),
        _ => Err(refuse(format!(
            "`{fat}.arguments` must be a JSON object: the tool call cannot be sent"
        ))),
    }
}

fn stop_sequences(stop: Value) -> Result<Value, TranslateError> {
    match stop {
        Value::String(s) => Ok(json!([s])),
        Value::Array(items) if items.iter().all(Value::is_string) => Ok(Value::Array(items)),
        _ => Err(refuse(
            "`stop` must be a string or an array of strings".into(),
        )),
    }
}

/// A sampling parameter, capped at Anthropic's upper bound of 1.
fn at_most_one(v: Value, name: &str) -> Result<Value, TranslateError> {
    match v.as_f64() {
        Some(x) if x > 1.0 => Ok(json!(1.0)),
        Some(_) => Ok(v),
        None => Err(refuse(format!("`{name}` must be a number"))),
    }
}

fn tools(tools: Value) -> Result<Value, TranslateError> {
    chat::tools(tools, &ANTHROPIC, "input_schema", |tool, _, _| {
        Ok(Value::Object(tool))
    })
}

/// The Anthropic `tool_choice`, and whether it forces a tool call.
fn tool_choice(body: &RawObject, has_tools: bool) -> Result<(Option<Value>, bool), TranslateError> {
    let serial = match member(body, "parallel_tool_calls")? {
        None | Some(Value::Bool(true)) => false,
        Some(Value::Bool(false)) => true,
        Some(_) => return Err(refuse("`parallel_tool_calls` must be a boolean".into())),
    };
    let kind = match member(body, "tool_choice")? {
        None if serial && has_tools => "auto",
        None => return Ok((None, false)),
        Some(choice) => match chat::tool_choice(&choice)? {
            ToolChoice::Mode("auto") => "auto",
            ToolChoice::Mode("required") => "any",
            ToolChoice::Mode(_) => "none",
            ToolChoice::Function(name) => {
                let mut out = json!({"type": "tool", "name": name});
                if serial {
                    out["disable_parallel_tool_use"] = true.into();
                }
                return Ok((Some(out), true));
            }
        },
    };
    let mut out = json!({"type": kind});
    if serial && kind != "none" {
        out["disable_parallel_tool_use"] = true.into();
    }
    Ok((Some(out), kind == "any"))
}

/// The thinking budget `reasoning_effort` asks for, below `max_tokens`; `None` when
/// none is asked for or the budget falls under Anthropic's minimum.
fn thinking_budget(effort: Option<Value>, max_tokens: u64) -> Result<Option<u64>, TranslateError> {
    let Some(effort) = effort else {
        return Ok(None);
    };
    let budget: u64 =
        match effort.as_str() {
            Some("minimal" | "low") => 1024,
            Some("medium") => 8192,
            Some("high") => 24576,
            Some("xhigh") => 32768,
            Some("none") => return Ok(None),
            _ => return Err(refuse(
                "`reasoning_effort` must be \"none\", \"minimal\", \"low\", \"medium\", \"high\" or \"xhigh\""
                    .into(),
            )),
        };
    let budget = budget.min(max_tokens.saturating_sub(1));
    Ok((budget >= MIN_THINKING_BUDGET).then_some(budget))
}

/// A Message as a chat completion created at `created` (Unix seconds).
pub fn response_at(body: &[u8], created: u64) -> Result<Vec<u8>, TranslateError> {
    let message = json::answer(body)?;
    if message.get("type").and_then(Value::as_str) != Some("message") {
        return Err(TranslateError::Response(
            "not a Message: its `type` is not \"message\"".into(),
        ));
    }
    let blocks = message
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| TranslateError::Response("the Message has no `content` array".into()))?;
    let mut content: Option<String> = None;
    let mut reasoning: Option<String> = None;
    let mut calls = Vec::new();
    for block in blocks {
        let text = |key| block.get(key).and_then(Value::as_str).unwrap_or_default();
        match block.get("type").and_then(Value::as_str) {
            Some("text") => content
                .get_or_insert_with(String::new)
                .push_str(text("text")),
            Some("thinking") => reasoning
                .get_or_insert_with(String::new)
                .push_str(text("thinking")),
            Some("tool_use") => {
                let arguments = block
                    .get("input")
                    .map_or_else(|| "{}".into(), Value::to_string);
                calls.push(chat::tool_call(text("id"), text("name"), &arguments));
            }
            _ => {}
        }
    }
    let reply = chat::reply(content, [("reasoning_content", reasoning)], calls);
    let str_of = |key| message.get(key).and_then(Value::as_str).unwrap_or_default();
    let usage = message.get("usage").unwrap_or(&Value::Null);
    chat::completion(
        str_of("id"),
        created,
        str_of("model"),
        reply,
        finish_reason_of(str_of("stop_reason")),
        Some(Tokens::from_anthropic(usage).chat()),
    )
}

/// An OpenAI error object with `message` for an Anthropic error `body`: of its type, or
/// `fallback_type` when it gives none.
fn openai_error(body: &[u8], message: String, fallback_type: &str) -> Value {
    let kind = error_object(body)
        .as_ref()
        .and_then(|e| e.get("type"))
        .and_then(Value::as_str)
        .map_or_else(|| fallback_type.to_owned(), str::to_owned);
    json!({"error": {"message": message, "type": kind, "code": null, "param": null}})
}

/// An Anthropic error body (or any body an Anthropic upstream answered `status` with)
/// as an OpenAI error body.
pub fn error(status: u16, body: &[u8]) -> Vec<u8> {
    openai_error(
        body,
        upstream_message(status, body),
        anthropic_error_type(status),
    )
    .to_string()
    .into_bytes()
}

/// Rewrites a Messages event stream as chat completion chunks; see the module docs.
#[derive(Debug, Default)]
pub struct Stream {
    parser: SseParser,
    chat: Chunks,
    /// The usage counts of `message_start`.
    usage: Map<String, Value>,
    /// The content block index of each tool call, in call order, and whether it was
    /// given argument text.
    tool_blocks: Vec<(u64, bool)>,
    /// `message_delta` (the finish reason) was sent.
    finished: bool,
}

impl Stream {
    /// A translator whose chunks say they were created at `created` (Unix seconds).
    pub fn at(created: u64) -> Self {
        Self {
            chat: Chunks::at(created),
            ..Self::default()
        }
    }

    /// Reads an upstream chunk (any boundaries) and appends the chat frames it completes.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        self.write(chunk, out);
    }

    /// Whether the translation ended with an error frame: the upstream's `error` event,
    /// or an upstream event too large to read.
    pub fn ended_by_error(&self) -> bool {
        self.chat.failed
    }

    /// The upstream stream ended: `[DONE]` when the finish reason was sent but
    /// `message_stop` never came; nothing otherwise (an answer cut short is left open
    /// for the caller to report).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.finished && !self.chat.ended {
            self.chat.done(out);
        }
    }

    /// Argument text for the tool call of content block `index`.
    fn arguments(&mut self, index: Option<u64>, fragment: &str, out: &mut Vec<u8>) {
        let Some((call, (_, argued))) = self
            .tool_blocks
            .iter_mut()
            .enumerate()
            .find(|(_, (block, _))| Some(*block) == index)
        else {
            return;
        };
        if fragment.is_empty() {
            return;
        }
        *argued = true;
        self.chat.arguments(call, fragment, out);
    }
}

impl ChunkWriter for Stream {
    fn stream(&mut self) -> (&mut SseParser, &mut Chunks) {
        (&mut self.parser, &mut self.chat)
    }

    fn event(&mut self, event: &SseEvent, data: &Value, kind: &str, out: &mut Vec<u8>) {
        let str_at = |pointer| str_at(data, pointer);
        let index = data.get("index").and_then(Value::as_u64);
        match kind {
            "message_start" => {
                self.chat.id = str_at("/message/id").to_owned();
                self.chat.model = str_at("/message/model").to_owned();
                if let Some(Value::Object(usage)) = data.pointer("/message/usage") {
                    self.usage = usage.clone();
                }
                self.chat
                    .chunk(json!({"role": "assistant", "content": ""}), out);
            }
            "content_block_start" => match str_at("/content_block/type") {
                "text" => self
                    .chat
                    .text("content", str_at("/content_block/text"), out),
                "thinking" => {
                    let thinking = str_at("/content_block/thinking");
                    self.chat.text("reasoning_content", thinking, out);
                }
                "tool_use" => {
                    let call = self.tool_blocks.len();
                    self.tool_blocks.push((index.unwrap_or_default(), false));
                    let (id, name) = (str_at("/content_block/id"), str_at("/content_block/name"));
                    self.chat.call(call, id, name, out);
                }
                _ => {}
            },
            "content_block_delta" => match str_at("/delta/type") {
                "text_delta" => self.chat.text("content", str_at("/delta/text"), out),
                "thinking_delta" => {
                    let thinking = str_at("/delta/thinking");
                    self.chat.text("reasoning_content", thinking, out);
                }
                "input_json_delta" => self.arguments(index, str_at("/delta/partial_json"), out),
                _ => {}
            },
            "content_block_stop" => {
                let unargued = self
                    .tool_blocks
                    .iter()
                    .any(|&(block, argued)| Some(block) == index && !argued);
                if unargued {
                    self.arguments(index, "{}", out);
                }
            }
            "message_delta" => {
                if let Some(Value::Object(usage)) = data.get("usage") {
                    for (key, count) in usage.iter().filter(|(_, v)| !v.is_null()) {
                        self.usage.insert(key.clone(), count.clone());
                    }
                }
                self.finished = true;
                let usage = Tokens::from_anthropic(&Value::Object(self.usage.clone())).chat();
                let reason = finish_reason_of(str_at("/delta/stop_reason"));
                self.chat.frame(json!({}), Some(reason), Some(usage), out);
            }
            "message_stop" => self.chat.done(out),
            "error" => {
                let data = event.data.as_bytes();
                let message = error_message(data)
                    .unwrap_or_else(|| "the upstream stream reported an error".to_owned());
                self.chat
                    .fail(&openai_error(data, message, "api_error"), out);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOLDEN_REQUEST: &str =
        include_str!("../../../tests/golden/chat_over_messages/request.chat.json");
    const GOLDEN_REQUEST_OUT: &str =
        include_str!("../../../tests/golden/chat_over_messages/request.anthropic.json");
    const GOLDEN_TOOL_STREAM: &str =
        include_str!("../../../tests/golden/chat_over_messages/stream_tool_call.sse");
    const GOLDEN_TOOL_STREAM_OUT: &str =
        include_str!("../../../tests/golden/chat_over_messages/stream_tool_call.chat.sse");
    const GOLDEN_THINKING_STREAM: &str =
        include_str!("../../../tests/golden/chat_over_messages/stream_thinking.sse");
    const GOLDEN_THINKING_STREAM_OUT: &str =
        include_str!("../../../tests/golden/chat_over_messages/stream_thinking.chat.sse");

    fn translate(body: &str, max_tokens: u64, stream: bool) -> Result<String, TranslateError> {
        let body = RawObject::parse(body.as_bytes()).map_err(|e| refuse(format!("{e:?}")))?;
        request(&body, "m", max_tokens, stream).map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    #[test]
    fn the_golden_request_translates_byte_for_byte() {
        let want = GOLDEN_REQUEST_OUT.strip_suffix('\n').unwrap_or_default();
        assert_eq!(translate(GOLDEN_REQUEST, 4096, true).as_deref(), Ok(want));
    }

    #[test]
    fn each_request_member_maps() {
        let cases = [
            // One string system message stays a string; the user's string content too.
            (
                r#"{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}"#,
                r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"system":"be brief","max_tokens":1000}"#,
            ),
            // System and developer messages anywhere, parts or strings: text blocks in order.
            (
                r#"{"messages":[{"role":"user","content":"hi"},{"role":"developer","content":"d"},{"role":"system","content":[{"type":"text","text":"a"},{"type":"text","text":""}]}]}"#,
                r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"system":[{"type":"text","text":"d"},{"type":"text","text":"a"}],"max_tokens":1000}"#,
            ),
            (
                r#"{"messages":[{"role":"system","content":[{"type":"text","text":"a"}]},{"role":"user","content":"hi"}]}"#,
                r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"system":[{"type":"text","text":"a"}],"max_tokens":1000}"#,
            ),
            // User parts: text, a data URL image, an https image.
            (
                r#"{"messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/4A=="}},{"type":"image_url","image_url":{"url":"https://example.com/a.png","detail":"high"}}]}]}"#,
                r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"/9j/4A=="}},{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}],"max_tokens":1000}"#,
            ),
            // Assistant text and tool calls; empty arguments are {}, empty text no block,
            // reasoning_content dropped.
            (
                r#"{"messages":[{"role":"user","content":"go"},{"role":"assistant","content":"on it","reasoning_content":"hmm","tool_calls":[{"id":"c1","type":"function","function":{"name":"now","arguments":""}},{"id":"c2","type":"function","function":{"name":"add","arguments":"{\"a\":1,\"b\":[2]}"}}]},{"role":"tool","tool_call_id":"c1","content":"noon"},{"role":"tool","tool_call_id":"c2","content":"3"},{"role":"user","content":"thanks"},{"role":"assistant","content":"","tool_calls":null},{"role":"assistant","content":"ok"}]}"#,
                r#"{"model":"m","messages":[{"role":"user","content":"go"},{"role":"assistant","content":[{"type":"text","text":"on it"},{"type":"tool_use","id":"c1","name":"now","input":{}},{"type":"tool_use","id":"c2","name":"add","input":{"a":1,"b":[2]}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"noon"},{"type":"tool_result","tool_use_id":"c2","content":"3"},{"type":"text","text":"thanks"}]},{"role":"assistant","content":"ok"}],"max_tokens":1000}"#,
            ),
            // Consecutive messages of one role merge; tool results go first.
            (
                r#"{"messages":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"text","text":"b"}]},{"role":"assistant","content":"x"},{"role":"assistant","content":[{"type":"text","text":"y"}]},{"role":"user","content":"c"},{"role":"tool","tool_call_id":"t","content":null}]}"#,
                r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":""},{"type":"text","text":"c"}]}],"max_tokens":1000}"#,
            ),
            // Tools, with and without description and parameters; strict dropped.
            (
                r#"{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","description":"does f","parameters":{"type":"object","properties":{"x":{"type":"integer"}}},"strict":true}},{"type":"function","function":{"name":"g"}}]}"#,
                r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1000,"tools":[{"name":"f","description":"does f","input_schema":{"type":"object","properties":{"x":{"type":"integer"}}}},{"name":"g","input_schema":{"type":"object","properties":{}}}]}"#,
            ),
            // Stop sequences, capped sampling parameters, the user, dropped members.
            (
                r#"{"messages":[{"role":"user","content":"hi"}],"stop":"~~","temperature":1.5,"top_p":0.9,"user":"u1","n":1,"logprobs":true,"frequency_penalty":1,"presence_penalty":1,"seed":3,"response_format":{"type":"json_object"},"stream_options":{"include_usage":true},"service_tier":"auto","store":false,"modalities":["text"],"metadata":{"a":"b"},"max_tokens":50}"#,
                r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1000,"stop_sequences":["~~"],"temperature":1.0,"top_p":0.9,"metadata":{"user_id":"u1"}}"#,
            ),
            (
                r#"{"messages":[{"role":"user","content":"hi"}],"stop":["a","b"],"temperature":0,"top_p":null}"#,
                r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1000,"stop_sequences":["a","b"],"temperature":0}"#,
            ),
        ];
        for (body, want) in cases {
            assert_eq!(translate(body, 1000, false).as_deref(), Ok(want), "{body}");
        }
    }

    #[test]
    fn tool_choice_and_parallel_calls_map() {
        let tools = r#""tools":[{"type":"function","function":{"name":"f"}}]"#;
        let out_tools =
            r#""tools":[{"name":"f","input_schema":{"type":"object","properties":{}}}]"#;
        let cases = [
            (
                r#""tool_choice":"auto""#,
                r#","tool_choice":{"type":"auto"}"#,
            ),
            (
                r#""tool_choice":"required""#,
                r#","tool_choice":{"type":"any"}"#,
            ),
            (
                r#""tool_choice":"none""#,
                r#","tool_choice":{"type":"none"}"#,
            ),
            (
                r#""tool_choice":{"type":"function","function":{"name":"f"}}"#,
                r#","tool_choice":{"type":"tool","name":"f"}"#,
            ),
            (
                r#""parallel_tool_calls":false"#,
                r#","tool_choice":{"type":"auto","disable_parallel_tool_use":true}"#,
            ),
            (
                r#""tool_choice":"required","parallel_tool_calls":false"#,
                r#","tool_choice":{"type":"any","disable_parallel_tool_use":true}"#,
            ),
            (
                r#""tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false"#,
                r#","tool_choice":{"type":"tool","name":"f","disable_parallel_tool_use":true}"#,
            ),
            (
                r#""tool_choice":"none","parallel_tool_calls":false"#,
                r#","tool_choice":{"type":"none"}"#,
            ),
            (r#""parallel_tool_calls":true"#, ""),
        ];
        for (members, want) in cases {
            let body =
                format!(r#"{{"messages":[{{"role":"user","content":"hi"}}],{tools},{members}}}"#);
            let want = format!(
                r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}],"max_tokens":1000,{out_tools}{want}}}"#
            );
            assert_eq!(translate(&body, 1000, false), Ok(want), "{members}");
        }
        // Without tools, parallel_tool_calls alone asks for no tool choice.
        assert_eq!(
            translate(
                r#"{"messages":[{"role":"user","content":"hi"}],"parallel_tool_calls":false}"#,
                1000,
                false
            )
            .as_deref(),
            Ok(r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1000}"#)
        );
    }

    #[test]
    fn reasoning_effort_asks_for_a_thinking_budget_below_max_tokens() {
        let hi = r#"{"role":"user","content":"hi"}"#;
        let cases = [
            (
                "minimal",
                32000,
                r#","thinking":{"type":"enabled","budget_tokens":1024}"#,
            ),
            (
                "low",
                32000,
                r#","thinking":{"type":"enabled","budget_tokens":1024}"#,
            ),
            (
                "medium",
                32000,
                r#","thinking":{"type":"enabled","budget_tokens":8192}"#,
            ),
            (
                "high",
                32000,
                r#","thinking":{"type":"enabled","budget_tokens":24576}"#,
            ),
            (
                "xhigh",
                64000,
                r#","thinking":{"type":"enabled","budget_tokens":32768}"#,
            ),
            (
                "xhigh",
                32000,
                r#","thinking":{"type":"enabled","budget_tokens":31999}"#,
            ),
            (
                "high",
                2000,
                r#","thinking":{"type":"enabled","budget_tokens":1999}"#,
            ),
            (
                "low",
                1025,
                r#","thinking":{"type":"enabled","budget_tokens":1024}"#,
            ),
            // Under Anthropic's minimum budget: no thinking, sampling parameters kept.
            ("low", 1024, r#","temperature":0.5,"top_p":0.8"#),
            ("none", 32000, r#","temperature":0.5,"top_p":0.8"#),
        ];
        for (effort, max_tokens, want) in cases {
            let body = format!(
                r#"{{"messages":[{hi}],"reasoning_effort":"{effort}","temperature":0.5,"top_p":0.8}}"#
            );
            let want =
                format!(r#"{{"model":"m","messages":[{hi}],"max_tokens":{max_tokens}{want}}}"#);
            assert_eq!(
                translate(&body, max_tokens, false),
                Ok(want),
                "{effort} {max_tokens}"
            );
        }
        // Forced tool use and an open tool-use turn leave thinking out.
        let forced = format!(
            r#"{{"messages":[{hi}],"reasoning_effort":"high","tools":[{{"type":"function","function":{{"name":"f"}}}}],"tool_choice":{{"type":"function","function":{{"name":"f"}}}}}}"#
        );
        assert_eq!(
            translate(&forced, 32000, false).as_deref(),
            Ok(
                r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":32000,"tools":[{"name":"f","input_schema":{"type":"object","properties":{}}}],"tool_choice":{"type":"tool","name":"f"}}"#
            )
        );
        let open = format!(
            r#"{{"messages":[{hi},{{"role":"assistant","tool_calls":[{{"id":"c","type":"function","function":{{"name":"f","arguments":"{{}}"}}}}]}},{{"role":"tool","tool_call_id":"c","content":"r"}}],"reasoning_effort":"high","temperature":0.5}}"#
        );
        assert_eq!(
            translate(&open, 32000, false).as_deref(),
            Ok(
                r#"{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"c","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"c","content":"r"}]}],"max_tokens":32000,"temperature":0.5}"#
            )
        );
        // A tool-use turn that ended in an answer does not.
        let closed = format!(
            r#"{{"messages":[{hi},{{"role":"assistant","tool_calls":[{{"id":"c","type":"function","function":{{"name":"f","arguments":"{{}}"}}}}]}},{{"role":"tool","tool_call_id":"c","content":"r"}},{{"role":"assistant","content":"done"}},{hi}],"reasoning_effort":"low"}}"#
        );
        assert_eq!(
            translate(&closed, 32000, true).as_deref(),
            Ok(
                r#"{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"c","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"c","content":"r"}]},{"role":"assistant","content":"done"},{"role":"user","content":"hi"}],"max_tokens":32000,"thinking":{"type":"enabled","budget_tokens":1024},"stream":true}"#
            )
        );
    }

    #[test]
    fn requests_without_an_anthropic_form_are_refused_naming_the_member() {
        let user =
            |content: &str| format!(r#"{{"messages":[{{"role":"user","content":{content}}}]}}"#);
        let cases = [
            (
                user(r#"[{"type":"input_audio","input_audio":{"data":"AA==","format":"wav"}}]"#),
                "`messages[0].content[0]`: input_audio parts have no Anthropic Messages counterpart",
            ),
            (
                user(r#"[{"type":"text","text":"a"},{"type":"file","file":{"file_id":"f"}}]"#),
                "`messages[0].content[1]`: file parts have no Anthropic Messages counterpart",
            ),
            (
                user(r#"[{"type":"image_url","image_url":{"url":"ftp://x/y.png"}}]"#),
                "`messages[0].content[0].image_url.url` must be an http(s) or a data URL",
            ),
            (
                user(r#"[{"type":"image_url","image_url":{"url":"data:image/png,abc"}}]"#),
                "`messages[0].content[0].image_url.url` must be a base64 data URL (data:<type>;base64,<data>)",
            ),
            (
                user("7"),
                "`messages[0].content` must be a string or an array",
            ),
            (
                r#"{"messages":[{"role":"function","name":"f","content":"x"}]}"#.into(),
                "`messages[0].role` \"function\" is not supported by an Anthropic upstream: use tool calls",
            ),
            (
                r#"{"messages":[{"role":"robot","content":"x"}]}"#.into(),
                "`messages[0].role` \"robot\" is not a chat role",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"},{"role":"tool","content":"x"}]}"#.into(),
                "`messages[1].tool_call_id` must be a string",
            ),
            (
                r#"{"messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"https://a/b"}}]}]}"#.into(),
                "`messages[0].content[0].type` \"image_url\" is not allowed here: only text is",
            ),
            (
                r#"{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":"}}]}]}"#.into(),
                "`messages[0].tool_calls[0].function.arguments` must be a JSON object: the tool call cannot be sent",
            ),
            (
                r#"{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}"#.into(),
                "`messages[0].tool_calls[0].function.arguments` must be a JSON object: the tool call cannot be sent",
            ),
            (
                r#"{"messages":[{"role":"assistant","function_call":{"name":"f","arguments":"{}"}}]}"#.into(),
                "`messages[0].function_call` is not supported by an Anthropic upstream: use tool_calls",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"functions":[{"name":"f"}]}"#.into(),
                "`functions` is not supported by an Anthropic upstream: use `tools` and `tool_choice`",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"function_call":"auto"}"#.into(),
                "`function_call` is not supported by an Anthropic upstream: use `tools` and `tool_choice`",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"n":2}"#.into(),
                "`n` must be 1: an Anthropic upstream gives one answer",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"reasoning_effort":"max"}"#.into(),
                "`reasoning_effort` must be \"none\", \"minimal\", \"low\", \"medium\", \"high\" or \"xhigh\"",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"tool_choice":"any"}"#.into(),
                "`tool_choice` must be \"auto\", \"required\", \"none\" or a function",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"custom","custom":{"name":"f"}}]}"#.into(),
                "`tools[0].type` \"custom\" has no Anthropic Messages counterpart",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"stop":[1]}"#.into(),
                "`stop` must be a string or an array of strings",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}"#.into(),
                "`temperature` must be a number",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"user":5}"#.into(),
                "`user` must be a string",
            ),
        ];
        for (body, want) in cases {
            assert_eq!(
                translate(&body, 1000, false),
                Err(TranslateError::Request(want.into())),
                "{body}"
            );
        }
    }

    fn answer(body: &str) -> Result<String, TranslateError> {
        response_at(body.as_bytes(), 0).map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    #[test]
    fn a_text_answer_maps_with_cache_tokens_in_the_usage() {
        let body = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"Hello"},{"type":"text","text":", world"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":20,"cache_read_input_tokens":100,"output_tokens":4}}"#;
        assert_eq!(
            answer(body).as_deref(),
            Ok(
                r#"{"id":"msg_1","object":"chat.completion","created":0,"model":"claude-x","choices":[{"index":0,"message":{"role":"assistant","content":"Hello, world"},"finish_reason":"stop"}],"usage":{"prompt_tokens":130,"completion_tokens":4,"total_tokens":134,"prompt_tokens_details":{"cached_tokens":100},"completion_tokens_details":{"reasoning_tokens":0}}}"#
            )
        );
        assert_eq!(
            response_at(body.as_bytes(), 1_700_000_000).map(|b| b
                .starts_with(br#"{"id":"msg_1","object":"chat.completion","created":1700000000,"#)),
            Ok(true)
        );
    }

    #[test]
    fn tool_use_and_thinking_blocks_map() {
        let body = r#"{"id":"msg_2","type":"message","role":"assistant","model":"claude-x","content":[{"type":"thinking","thinking":"need ","signature":"sig"},{"type":"redacted_thinking","data":"xx"},{"type":"thinking","thinking":"weather","signature":"sig2"},{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris","days":[1, 2]}},{"type":"tool_use","id":"toolu_2","name":"now","input":{}}],"stop_reason":"tool_use","usage":{"input_tokens":5,"output_tokens":7}}"#;
        assert_eq!(
            answer(body).as_deref(),
            Ok(
                r#"{"id":"msg_2","object":"chat.completion","created":0,"model":"claude-x","choices":[{"index":0,"message":{"role":"assistant","content":"Checking.","reasoning_content":"need weather","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":[1,2]}"}},{"id":"toolu_2","type":"function","function":{"name":"now","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}"#
            )
        );
    }

    #[test]
    fn each_stop_reason_maps_and_an_answer_without_text_has_null_content() {
        for (stop, finish) in [
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("pause_turn", "stop"),
            ("max_tokens", "length"),
            ("tool_use", "tool_calls"),
            ("refusal", "content_filter"),
        ] {
            let body = format!(
                r#"{{"id":"msg_3","type":"message","model":"c","content":[],"stop_reason":"{stop}","usage":{{"input_tokens":1,"output_tokens":0}}}}"#
            );
            let want = format!(
                r#"{{"id":"msg_3","object":"chat.completion","created":0,"model":"c","choices":[{{"index":0,"message":{{"role":"assistant","content":null}},"finish_reason":"{finish}"}}],"usage":{{"prompt_tokens":1,"completion_tokens":0,"total_tokens":1,"prompt_tokens_details":{{"cached_tokens":0}},"completion_tokens_details":{{"reasoning_tokens":0}}}}}}"#
            );
            assert_eq!(answer(&body), Ok(want), "{stop}");
        }
    }

    #[test]
    fn an_answer_that_is_not_a_message_is_refused() {
        let cases = [
            ("<html>", "not JSON: expected value at line 1 column 1"),
            (
                r#"{"type":"error","error":{"type":"api_error","message":"x"}}"#,
                "not a Message: its `type` is not \"message\"",
            ),
            (
                r#"{"type":"message","content":"hi"}"#,
                "the Message has no `content` array",
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
    fn error_bodies_map_to_openai_errors() {
        let anthropic = |kind: &str, message: &str| {
            format!(r#"{{"type":"error","error":{{"type":"{kind}","message":"{message}"}}}}"#)
        };
        let openai = |kind: &str, message: &str| {
            format!(
                r#"{{"error":{{"message":"{message}","type":"{kind}","code":null,"param":null}}}}"#
            )
        };
        let cases = [
            (400, "invalid_request_error", "max_tokens: Field required"),
            (401, "authentication_error", "invalid x-api-key"),
            (404, "not_found_error", "model: claude-nope"),
            (
                429,
                "rate_limit_error",
                "Number of request tokens has exceeded your rate limit",
            ),
            (529, "overloaded_error", "Overloaded"),
            (500, "api_error", "Internal server error"),
        ];
        for (status, kind, message) in cases {
            let got = error(status, anthropic(kind, message).as_bytes());
            assert_eq!(
                String::from_utf8(got),
                Ok(openai(kind, message)),
                "{status}"
            );
        }
        let by_status = [
            (
                502,
                " <html><body>Bad Gateway</body></html>\n",
                "api_error",
                "<html><body>Bad Gateway</body></html>",
            ),
            (429, "slow down", "rate_limit_error", "slow down"),
            (
                529,
                "",
                "overloaded_error",
                "the upstream answered HTTP 529",
            ),
            (
                403,
                r#"{"error":{"message":"no access"}}"#,
                "permission_error",
                "no access",
            ),
            (413, "too big", "request_too_large", "too big"),
            (418, "teapot", "invalid_request_error", "teapot"),
            (
                500,
                r#"{"type":"error","error":{"type":"api_error","message":"   "}}"#,
                "api_error",
                "the upstream answered HTTP 500",
            ),
        ];
        for (status, body, kind, message) in by_status {
            let got = error(status, body.as_bytes());
            assert_eq!(
                String::from_utf8(got),
                Ok(openai(kind, message)),
                "{status} {body}"
            );
        }
    }

    #[test]
    fn a_long_error_message_is_cut_at_a_character_boundary() {
        let page = format!("<html>x{}</html>", "é".repeat(1000));
        let got = error(502, page.as_bytes());
        let cut = format!("<html>x{}", "é".repeat(508));
        assert_eq!(cut.len(), 1023);
        assert_eq!(
            String::from_utf8(got),
            Ok(format!(
                r#"{{"error":{{"message":"{cut}","type":"api_error","code":null,"param":null}}}}"#
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
            (GOLDEN_THINKING_STREAM, GOLDEN_THINKING_STREAM_OUT),
        ] {
            assert_eq!(
                run(&mut Stream::default(), input.as_bytes(), input.len()),
                want
            );
            assert_eq!(run(&mut Stream::default(), input.as_bytes(), 1), want);
        }
    }

    const START: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_s\",\"model\":\"c\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n";
    const DELTA: &str = "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":2}}\n\n";

    #[test]
    fn finish_closes_only_an_answer_whose_finish_reason_was_sent() {
        let first = "data: {\"id\":\"msg_s\",\"object\":\"chat.completion.chunk\",\"created\":9,\"model\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n";
        assert_eq!(run(&mut Stream::at(9), START.as_bytes(), 7), first);
        let last = "data: {\"id\":\"msg_s\",\"object\":\"chat.completion.chunk\",\"created\":9,\"model\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0}}}\n\n";
        let input = format!("{START}{DELTA}");
        assert_eq!(
            run(&mut Stream::at(9), input.as_bytes(), 5),
            format!("{first}{last}data: [DONE]\n\n")
        );
        let mut s = Stream::default();
        let mut out = Vec::new();
        s.finish(&mut out);
        assert_eq!(out, b"");
    }

    #[test]
    fn an_error_event_becomes_an_error_frame_and_ends_the_translation() {
        let input = format!(
            "{START}event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}}}\n\n{DELTA}event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
        );
        let mut stream = Stream::default();
        let got = run(&mut stream, input.as_bytes(), 3);
        let error = "data: {\"error\":{\"message\":\"Overloaded\",\"type\":\"overloaded_error\",\"code\":null,\"param\":null}}\n\n";
        assert_eq!(got.split_once("\n\n").map(|(_, rest)| rest), Some(error));
        assert!(stream.ended_by_error());
    }

    #[test]
    fn only_an_error_ends_the_translation_by_error() {
        let stop = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let unfinished = format!("{START}{DELTA}");
        let whole = format!("{START}{DELTA}{stop}");
        for input in ["", START, &unfinished, &whole, GOLDEN_TOOL_STREAM] {
            let mut stream = Stream::default();
            run(&mut stream, input.as_bytes(), input.len().max(1));
            assert!(!stream.ended_by_error(), "{input}");
        }
    }

    const TOO_LARGE: &str = "data: {\"error\":{\"message\":\"an upstream event was larger than 1 MiB and could not be translated\",\"type\":\"upstream_error\",\"code\":\"upstream_event_too_large\",\"param\":null}}\n\n";

    #[test]
    fn an_event_too_large_to_read_ends_the_translation_with_an_error() {
        let big = format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{}\"}}}}\n\n",
            "x".repeat(crate::sse::MAX_EVENT_BYTES)
        );
        let (big_head, big_tail) = big.split_at(big.len() - 10);
        let stop = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let first = "data: {\"id\":\"msg_s\",\"object\":\"chat.completion.chunk\",\"created\":9,\"model\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n";
        let mut stream = Stream::at(9);
        let mut out = Vec::new();
        stream.feed(format!("{START}{big_head}").as_bytes(), &mut out);
        assert_eq!(String::from_utf8_lossy(&out), format!("{first}{TOO_LARGE}"));
        assert!(stream.ended_by_error());
        stream.feed(format!("{big_tail}{DELTA}{stop}").as_bytes(), &mut out);
        stream.finish(&mut out);
        assert_eq!(String::from_utf8_lossy(&out), format!("{first}{TOO_LARGE}"));
    }

    #[test]
    fn an_event_too_large_after_the_end_adds_nothing() {
        let stop = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let mut stream = Stream::default();
        let mut out = Vec::new();
        stream.feed(format!("{START}{DELTA}{stop}").as_bytes(), &mut out);
        let end = out.len();
        stream.feed(b"data: ", &mut out);
        stream.feed(&vec![b'x'; crate::sse::MAX_EVENT_BYTES], &mut out);
        stream.finish(&mut out);
        assert_eq!(out.len(), end);
        assert!(!stream.ended_by_error());
    }

    #[test]
    fn a_tool_call_given_no_arguments_gets_an_empty_object() {
        let input = concat!(
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"srv\",\"name\":\"web_search\",\"input\":{}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"q\\\":1}\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_n\",\"name\":\"now\",\"input\":{}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
        );
        let chunk = |delta: &str| {
            format!("data: {{\"id\":\"\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":null}}]}}\n\n")
        };
        assert_eq!(
            run(&mut Stream::default(), input.as_bytes(), 11),
            chunk(
                r#"{"tool_calls":[{"index":0,"id":"toolu_n","type":"function","function":{"name":"now","arguments":""}}]}"#
            ) + &chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}"#)
        );
    }
}
