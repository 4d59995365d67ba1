//! The chat side the translation modules share: every pair has chat completions on one
//! side. For a chat client ([`super::chat_over_messages`], [`super::chat_over_responses`]):
//! reading its request's messages, content, tool calls, tools and tool choice, and
//! writing its chunk stream ([`Chunks`]). For a chat upstream
//! ([`super::messages_over_chat`], [`super::responses_over_chat`]): writing its request's
//! content and tools, and reading its answer and its chunk stream ([`ChunkReader`]). And
//! for every stream, feeding the upstream's events through an SSE parser that may skip
//! one too large to read ([`feed`]).

use super::json::{self, get, invalid, optional_string, read_member, refuse, str_at, string};
use super::json::{text_member, untranslatable};
use super::map::{error_message, Tokens};
use super::TranslateError;
use crate::llm::RawObject;
use crate::sse::{SseEvent, SseParser};
use serde_json::{json, Map, Value};

/// The message of the error that ends a translation at an upstream event larger than
/// [`MAX_EVENT_BYTES`](crate::sse::MAX_EVENT_BYTES), which the parser skips.
pub const EVENT_TOO_LARGE: &str =
    "an upstream event was larger than 1 MiB and could not be translated";

/// Feeds `chunk` to `parser`, which calls `on_event` for every event it completes;
/// whether it skipped an event too large to read.
fn feed(parser: &mut SseParser, chunk: &[u8], on_event: impl FnMut(SseEvent)) -> bool {
    let skipped = parser.skipped;
    parser.feed(chunk, on_event);
    // The parser skips an event only after those it completed from this chunk.
    parser.skipped > skipped
}

/// A chat tool call with `id`, function `name` and `arguments` text.
pub fn tool_call(id: &str, name: &str, arguments: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

// A chat client's request.

/// How the refusals of a chat request name the upstream it is translated for.
pub struct Upstream {
    /// The upstream, as in "is not supported by an Anthropic upstream".
    pub name: &'static str,
    /// What follows the type of a tool or a tool call the upstream has no counterpart
    /// for.
    pub no_type: &'static str,
    /// What follows the kind of a content part the upstream has no counterpart for.
    pub no_parts: &'static str,
}

/// Top-level member `name` of a chat request body, parsed; `None` when absent or
/// `null`. A member that does not parse is refused with `` `name` could not be read:
/// <why> ``.
pub fn member(body: &RawObject, name: &str) -> Result<Option<Value>, TranslateError> {
    read_member(body, name, "could not be read")
}

/// The `messages` of a chat request body, after refusing what no other format has: the
/// legacy `functions` and `function_call`, and `n` other than 1.
pub fn messages(body: &RawObject, upstream: &Upstream) -> Result<Vec<Value>, TranslateError> {
    let name = upstream.name;
    for legacy in ["functions", "function_call"] {
        if member(body, legacy)?.is_some() {
            return Err(invalid(
                legacy,
                &format!("is not supported by {name}: use `tools` and `tool_choice`"),
            ));
        }
    }
    if let Some(n) = member(body, "n")? {
        if n.as_u64() != Some(1) {
            return Err(invalid("n", &format!("must be 1: {name} gives one answer")));
        }
    }
    let Some(Value::Array(messages)) = member(body, "messages")? else {
        return Err(invalid("messages", "must be an array"));
    };
    Ok(messages)
}

/// The role of a chat message.
pub enum Role {
    /// `system` or `developer`.
    System,
    User,
    Assistant,
    Tool,
}

/// The role of the message at `at`; the legacy `function` role and unknown ones are
/// refused.
pub fn role(message: &Value, at: &str, upstream: &Upstream) -> Result<Role, TranslateError> {
    match string(message, "role", at)? {
        "system" | "developer" => Ok(Role::System),
        "user" => Ok(Role::User),
        "assistant" => Ok(Role::Assistant),
        "tool" => Ok(Role::Tool),
        "function" => Err(refuse(format!(
            "`{at}.role` \"function\" is not supported by {}: use tool calls",
            upstream.name
        ))),
        other => Err(refuse(format!(
            "`{at}.role` \"{other}\" is not a chat role"
        ))),
    }
}

/// The non-empty texts of a content that may hold text only: a string, text parts, or
/// `null`.
pub fn texts(content: &Value, at: &str) -> Result<Vec<String>, TranslateError> {
    let texts = match content {
        Value::Null => Vec::new(),
        Value::String(s) => vec![s.clone()],
        Value::Array(parts) => parts
            .iter()
            .enumerate()
            .map(|(j, part)| {
                let at = format!("{at}.content[{j}]");
                match string(part, "type", &at)? {
                    "text" => Ok(string(part, "text", &at)?.to_owned()),
                    other => Err(refuse(format!(
                        "`{at}.type` \"{other}\" is not allowed here: only text is"
                    ))),
                }
            })
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(refuse(format!(
                "`{at}.content` must be a string or an array"
            )))
        }
    };
    Ok(texts.into_iter().filter(|t| !t.is_empty()).collect())
}

/// The content of a chat user message.
pub enum UserContent<'a> {
    /// A non-empty string.
    Text(&'a str),
    /// The translated parts (none for an empty string or `null`).
    Parts(Vec<Value>),
}

/// The content of the user message at `at`: a non-empty string as it is, else its parts,
/// each non-empty `text` part as `text` makes it and each `image_url` part as `image`
/// makes it (from the part and its path); empty text adds nothing, `input_audio` and
/// `file` parts are refused.
pub fn user_content<'a>(
    content: &'a Value,
    at: &str,
    upstream: &Upstream,
    text: impl Fn(&str) -> Value,
    image: impl Fn(&Value, &str) -> Result<Value, TranslateError>,
) -> Result<UserContent<'a>, TranslateError> {
    let parts = match content {
        Value::String(s) if !s.is_empty() => return Ok(UserContent::Text(s)),
        Value::Array(parts) => parts,
        Value::Null | Value::String(_) => return Ok(UserContent::Parts(Vec::new())),
        _ => {
            return Err(refuse(format!(
                "`{at}.content` must be a string or an array"
            )))
        }
    };
    let mut out = Vec::new();
    for (j, part) in parts.iter().enumerate() {
        let at = format!("{at}.content[{j}]");
        match string(part, "type", &at)? {
            "text" => {
                let s = string(part, "text", &at)?;
                if !s.is_empty() {
                    out.push(text(s));
                }
            }
            "image_url" => out.push(image(part, &at)?),
            kind @ ("input_audio" | "file") => {
                return Err(refuse(format!("`{at}`: {kind} {}", upstream.no_parts)))
            }
            other => {
                return Err(refuse(format!(
                    "`{at}.type` \"{other}\" is not a chat content part"
                )))
            }
        }
    }
    Ok(UserContent::Parts(out))
}

/// The URL of the `image_url` part at `at` (its `image_url` a URL, or an object with
/// `url`), and its `image_url` member.
pub fn image_url<'a>(part: &'a Value, at: &str) -> Result<(&'a str, &'a Value), TranslateError> {
    let image_url = part.get("image_url").unwrap_or(&Value::Null);
    let url = image_url
        .as_str()
        .or_else(|| image_url.get("url").and_then(Value::as_str))
        .ok_or_else(|| refuse(format!("`{at}.image_url.url` must be a string")))?;
    Ok((url, image_url))
}

/// The `tool_calls` of the assistant message at `at`; a legacy `function_call` is
/// refused.
pub fn tool_calls<'a>(
    message: &'a Value,
    at: &str,
    upstream: &Upstream,
) -> Result<&'a [Value], TranslateError> {
    if message.get("function_call").is_some_and(|v| !v.is_null()) {
        return Err(refuse(format!(
            "`{at}.function_call` is not supported by {}: use tool_calls",
            upstream.name
        )));
    }
    match message.get("tool_calls") {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(calls)) => Ok(calls),
        Some(_) => Err(refuse(format!("`{at}.tool_calls` must be an array"))),
    }
}

/// The `function` of a tool or a tool call at `at`, and its path; a `type` other than
/// `function` is refused.
fn function_of<'a>(
    item: &'a Value,
    at: &str,
    upstream: &Upstream,
) -> Result<(&'a Value, String), TranslateError> {
    match item.get("type").and_then(Value::as_str) {
        None | Some("function") => {}
        Some(other) => {
            return Err(refuse(format!(
                "`{at}.type` \"{other}\" {}",
                upstream.no_type
            )))
        }
    }
    Ok((
        item.get("function").unwrap_or(&Value::Null),
        format!("{at}.function"),
    ))
}

/// A function call of a chat assistant message.
pub struct FunctionCall<'a, T> {
    pub id: &'a str,
    pub name: &'a str,
    /// The arguments, as the caller of [`function_calls`] made them.
    pub arguments: T,
}

/// The function calls `calls` of the assistant message at `at`, each's `arguments` text
/// (empty when not given) made a `T` by `arguments`, given it and the path of the call's
/// `function`; a call of another type than `function` is refused.
pub fn function_calls<'a, T>(
    calls: &'a [Value],
    at: &str,
    upstream: &Upstream,
    arguments: impl Fn(&'a str, &str) -> Result<T, TranslateError>,
) -> Result<Vec<FunctionCall<'a, T>>, TranslateError> {
    calls
        .iter()
        .enumerate()
        .map(|(j, call)| {
            let at = format!("{at}.tool_calls[{j}]");
            let (function, fat) = function_of(call, &at, upstream)?;
            let text = match function.get("arguments") {
                None | Some(Value::Null) => "",
                Some(Value::String(s)) => s.as_str(),
                Some(_) => return Err(refuse(format!("`{fat}.arguments` must be a string"))),
            };
            let arguments = arguments(text, &fat)?;
            Ok(FunctionCall {
                id: string(call, "id", &at)?,
                name: string(function, "name", &fat)?,
                arguments,
            })
        })
        .collect()
}

/// The chat `tools` as an array of the upstream's tools: `make` makes each from the
/// members `name`, `description` (when given) and, named `schema`, the `parameters`
/// (an empty object schema when not given), and from the tool's `function` and its path.
/// A tool of another type than `function` is refused.
pub fn tools(
    tools: Value,
    upstream: &Upstream,
    schema: &str,
    make: impl Fn(Map<String, Value>, &Value, &str) -> Result<Value, TranslateError>,
) -> Result<Value, TranslateError> {
    let Value::Array(tools) = tools else {
        return Err(invalid("tools", "must be an array"));
    };
    tools
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            let (function, fat) = function_of(tool, &format!("tools[{i}]"), upstream)?;
            let mut out = Map::new();
            out.insert("name".into(), string(function, "name", &fat)?.into());
            match function.get("description") {
                None | Some(Value::Null) => {}
                Some(Value::String(d)) => {
                    out.insert("description".into(), d.as_str().into());
                }
                Some(_) => return Err(refuse(format!("`{fat}.description` must be a string"))),
            }
            let parameters = match function.get("parameters") {
                None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
                Some(p @ Value::Object(_)) => p.clone(),
                Some(_) => return Err(refuse(format!("`{fat}.parameters` must be an object"))),
            };
            out.insert(schema.into(), parameters);
            make(out, function, &fat)
        })
        .collect()
}

/// A chat `tool_choice`.
pub enum ToolChoice<'a> {
    /// `auto`, `required` or `none`.
    Mode(&'a str),
    /// The function of this name.
    Function(&'a str),
}

/// A chat `tool_choice`, read; anything but a mode or a named function is refused.
pub fn tool_choice(choice: &Value) -> Result<ToolChoice<'_>, TranslateError> {
    match choice.as_str() {
        Some(mode @ ("auto" | "required" | "none")) => return Ok(ToolChoice::Mode(mode)),
        Some(_) => {}
        None if choice.get("type").and_then(Value::as_str) == Some("function") => {
            let name = choice
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("tool_choice.function.name", "must be a string"))?;
            return Ok(ToolChoice::Function(name));
        }
        None => {}
    }
    Err(invalid(
        "tool_choice",
        "must be \"auto\", \"required\", \"none\" or a function",
    ))
}

// A chat client's answer.

/// A chat assistant message: `content` (`null` without any), the `members` given, and
/// the tool `calls` when there are any.
pub fn reply(
    content: Option<String>,
    members: impl IntoIterator<Item = (&'static str, Option<String>)>,
    calls: Vec<Value>,
) -> Value {
    let mut reply = Map::new();
    reply.insert("role".into(), "assistant".into());
    reply.insert("content".into(), content.into());
    for (key, member) in members {
        if let Some(member) = member {
            reply.insert(key.into(), member.into());
        }
    }
    if !calls.is_empty() {
        reply.insert("tool_calls".into(), calls.into());
    }
    Value::Object(reply)
}

/// A `chat.completion` body of one choice, `reply` ([`reply`]) with `finish_reason`;
/// with `usage` when given.
pub fn completion(
    id: &str,
    created: u64,
    model: &str,
    reply: Value,
    finish_reason: &str,
    usage: Option<Value>,
) -> Result<Vec<u8>, TranslateError> {
    let mut completion = json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": reply, "finish_reason": finish_reason}],
    });
    if let (Some(usage), Value::Object(members)) = (usage, &mut completion) {
        members.insert("usage".into(), usage);
    }
    serde_json::to_vec(&completion).map_err(|e| TranslateError::Response(e.to_string()))
}

/// The chunk stream a chat client is sent: the chunks' id, model and creation time, and
/// how the translation ended.
#[derive(Debug, Default)]
pub struct Chunks {
    created: u64,
    pub id: String,
    pub model: String,
    /// The end of the answer or an error was seen: nothing more is translated.
    pub ended: bool,
    /// The translation ended with an error frame.
    pub failed: bool,
}

impl Chunks {
    /// A stream whose chunks say they were created at `created` (Unix seconds).
    pub fn at(created: u64) -> Self {
        Self {
            created,
            ..Self::default()
        }
    }

    /// A chunk with `delta`.
    pub fn chunk(&self, delta: Value, out: &mut Vec<u8>) {
        self.frame(delta, None, None, out);
    }

    /// A chunk with `text` as the delta's `key`, unless it is empty.
    pub fn text(&self, key: &str, text: &str, out: &mut Vec<u8>) {
        if !text.is_empty() {
            self.chunk(json!({ key: text }), out);
        }
    }

    /// A chunk starting tool call `index`, with its `id`, `name` and empty arguments.
    pub fn call(&self, index: usize, id: &str, name: &str, out: &mut Vec<u8>) {
        let delta = json!({"tool_calls": [{
            "index": index,
            "id": id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }]});
        self.chunk(delta, out);
    }

    /// A chunk with argument text for tool call `index`.
    pub fn arguments(&self, index: usize, fragment: &str, out: &mut Vec<u8>) {
        let delta = json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]});
        self.chunk(delta, out);
    }

    /// A chunk with `delta`, the `finish` reason and, when given, `usage`.
    pub fn frame(
        &self,
        delta: Value,
        finish: Option<&str>,
        usage: Option<Value>,
        out: &mut Vec<u8>,
    ) {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        if let (Some(usage), Value::Object(members)) = (usage, &mut chunk) {
            members.insert("usage".into(), usage);
        }
        write_frame(out, &chunk);
    }

    /// `[DONE]`, which ends the translation.
    pub fn done(&mut self, out: &mut Vec<u8>) {
        self.ended = true;
        out.extend_from_slice(b"data: [DONE]\n\n");
    }

    /// The error frame `error`, which ends the translation.
    pub fn fail(&mut self, error: &Value, out: &mut Vec<u8>) {
        self.ended = true;
        self.failed = true;
        write_frame(out, error);
    }

    /// The error frame for an upstream event skipped as too large ([`EVENT_TOO_LARGE`]),
    /// unless the translation ended.
    pub fn too_large(&mut self, out: &mut Vec<u8>) {
        if !self.ended {
            let error = json!({"error": {"message": EVENT_TOO_LARGE, "type": "upstream_error",
                                         "code": "upstream_event_too_large", "param": null}});
            self.fail(&error, out);
        }
    }
}

fn write_frame(out: &mut Vec<u8>, data: &Value) {
    out.extend_from_slice(b"data: ");
    // Serialising a value into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, data);
    out.extend_from_slice(b"\n\n");
}

/// A translator of an upstream's event stream into a chat chunk stream, fed by
/// [`ChunkWriter::write`].
pub trait ChunkWriter {
    /// Its parser of the upstream's events, and its chunks.
    fn stream(&mut self) -> (&mut SseParser, &mut Chunks);

    /// An upstream event, with its data (parsed; `null` when it is not JSON) and its
    /// type: the data's `type`, else the event's name, else empty.
    fn event(&mut self, event: &SseEvent, data: &Value, kind: &str, out: &mut Vec<u8>);

    /// Reads an upstream chunk (any boundaries) and appends the chat frames it
    /// completes: each event's, until the translation ends, then for an event skipped as
    /// too large the error frame ([`Chunks::too_large`]).
    fn write(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        let mut events = Vec::new();
        let skipped = feed(self.stream().0, chunk, |event| events.push(event));
        for event in events {
            if self.stream().1.ended {
                break;
            }
            let data: Value = serde_json::from_str(&event.data).unwrap_or_default();
            let kind = data
                .get("type")
                .and_then(Value::as_str)
                .or(event.event.as_deref())
                .unwrap_or_default();
            self.event(&event, &data, kind, out);
        }
        if skipped {
            self.stream().1.too_large(out);
        }
    }
}

// A chat upstream's request.

/// What joins text parts that become one string.
pub const JOIN: &str = "\n\n";

/// A content part of a chat message.
pub enum Part<'a> {
    Text(&'a str),
    Image {
        url: String,
        detail: Option<&'a str>,
    },
}

impl Part<'_> {
    /// The part as a chat content part.
    pub fn json(&self) -> Value {
        match self {
            Part::Text(text) => json!({"type": "text", "text": text}),
            Part::Image { url, detail } => {
                let mut image = Map::new();
                image.insert("url".into(), url.as_str().into());
                if let Some(detail) = detail {
                    image.insert("detail".into(), (*detail).into());
                }
                json!({"type": "image_url", "image_url": image})
            }
        }
    }
}

/// Chat content from parts: one string when all are text (joined with [`JOIN`]), else
/// the parts.
pub fn content(parts: &[Part<'_>]) -> Value {
    let texts: Option<Vec<&str>> = parts
        .iter()
        .map(|p| match p {
            Part::Text(t) => Some(*t),
            Part::Image { .. } => None,
        })
        .collect();
    match texts {
        Some(texts) => texts.join(JOIN).into(),
        None => parts.iter().map(Part::json).collect(),
    }
}

/// The first members of a chat request: `model`, `messages`, `max_tokens` when given,
/// and when streaming `stream` and `stream_options` (`include_usage`, so the stream
/// ends with the usage).
pub fn request(
    model: &str,
    messages: Vec<Value>,
    max_tokens: Option<u64>,
    stream: bool,
) -> Map<String, Value> {
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
    out
}

/// The client's `temperature` and `top_p`, which must be numbers, into `out`.
pub fn sampling(body: &RawObject, out: &mut Map<String, Value>) -> Result<(), TranslateError> {
    for name in ["temperature", "top_p"] {
        if let Some(v) = json::member(body, name)? {
            if !v.is_number() {
                return Err(invalid(name, "must be a number"));
            }
            out.insert(name.into(), v);
        }
    }
    Ok(())
}

/// The chat function tools for the client's `tools`: `members` gives the members of the
/// function for the tool at each path ([`function`]), `None` for a tool that is not
/// sent.
pub fn function_tools(
    body: &RawObject,
    members: impl Fn(&Value, &str) -> Result<Option<Map<String, Value>>, TranslateError>,
) -> Result<Vec<Value>, TranslateError> {
    let Some(tools) = json::member(body, "tools")? else {
        return Ok(Vec::new());
    };
    let Value::Array(tools) = tools else {
        return Err(invalid("tools", "must be an array"));
    };
    let mut out = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        if let Some(function) = members(tool, &format!("tools[{i}]"))? {
            out.push(json!({"type": "function", "function": function}));
        }
    }
    Ok(out)
}

/// The members of a chat function for the tool at `path`: its `name`, its `description`
/// when it has one, and its member `schema` as `parameters` when it has one.
pub fn function(
    tool: &Value,
    path: &str,
    schema: &str,
) -> Result<Map<String, Value>, TranslateError> {
    let mut function = Map::new();
    function.insert("name".into(), string(tool, "name", path)?.into());
    if let Some(description) = optional_string(tool, "description", path)? {
        function.insert("description".into(), description.into());
    }
    if let Some(schema) = get(tool, schema) {
        function.insert("parameters".into(), schema.clone());
    }
    Ok(function)
}

/// The chat `tool_choice` of the function `name`, which must be one of the `tools` sent:
/// else `` `tool_choice.name` <unsent> ``.
pub fn chosen(tools: &[Value], name: &str, unsent: &str) -> Result<Value, TranslateError> {
    let sent = tools
        .iter()
        .any(|t| t.pointer("/function/name").and_then(Value::as_str) == Some(name));
    if !sent {
        return Err(invalid("tool_choice.name", unsent));
    }
    Ok(json!({"type": "function", "function": {"name": name}}))
}

// A chat upstream's answer.

/// The client's id for a chat id `id`: `prefix` and `id`, unless `id` starts with it.
pub fn prefixed(prefix: &str, id: &str) -> String {
    if id.starts_with(prefix) {
        id.to_owned()
    } else {
        format!("{prefix}{id}")
    }
}

/// The first choice of a `chat.completion` answer, and its message.
pub fn choice(answer: &Value) -> Result<(&Value, &Value), TranslateError> {
    let choice = answer
        .pointer("/choices/0")
        .ok_or_else(|| untranslatable("no `choices[0]`"))?;
    let message = get(choice, "message")
        .filter(|m| m.is_object())
        .ok_or_else(|| untranslatable("`choices[0].message` is not an object"))?;
    Ok((choice, message))
}

/// The finish reason of a chat choice; `stop` when it gives none.
pub fn finish_reason(choice: &Value) -> &str {
    get(choice, "finish_reason")
        .and_then(Value::as_str)
        .unwrap_or("stop")
}

/// A tool call of a chat answer: its `id`, `function.name` and `function.arguments`
/// (empty when not given).
pub struct Call<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub arguments: &'a str,
}

/// The tool calls of a chat answer's message.
pub fn calls(message: &Value) -> Result<Vec<Call<'_>>, TranslateError> {
    let Some(calls) = get(message, "tool_calls") else {
        return Ok(Vec::new());
    };
    let calls = calls
        .as_array()
        .ok_or_else(|| untranslatable("`tool_calls` is not an array"))?;
    calls
        .iter()
        .map(|call| {
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
            Ok(Call {
                id,
                name,
                arguments,
            })
        })
        .collect()
}

/// How the translation of a chat chunk stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The end of the answer is out.
    Done,
    /// The error that ends the translation is out.
    Failed,
}

/// A translator of a chat chunk stream, told what the chunks say by
/// [`ChunkReader::on_event`].
pub trait ChunkReader {
    /// How the translation ended, once it did: the rest of the input is ignored.
    fn ended(&self) -> Option<End>;

    /// Whether the choice finished (a chunk gave its finish reason).
    fn choice_finished(&self) -> bool;

    /// The answer starts, with the `id` and `model` of the chunk it starts at (empty at
    /// `[DONE]`); a translator starts once.
    fn start(&mut self, id: &str, model: &str, out: &mut String);

    /// `[DONE]`: the answer is complete.
    fn end(&mut self, out: &mut String);

    /// An error chunk, with its `id` and `model`, its `error` member and its `message`.
    fn error(&mut self, id: &str, model: &str, error: &Value, message: &str, out: &mut String);

    /// An upstream event was skipped as too large to read ([`feed`]).
    fn too_large(&mut self, out: &mut String);

    /// The usage a chunk carries.
    fn usage(&mut self, tokens: Tokens);

    /// Reasoning (`reasoning`) or answer text of the choice.
    fn text(&mut self, reasoning: bool, text: &str, out: &mut String);

    /// A tool call fragment of the choice, the `position`th of its chunk.
    fn tool_call(&mut self, call: &Value, position: usize, out: &mut String);

    /// The choice finished, for the chat `reason`.
    fn finished(&mut self, reason: &str, out: &mut String);

    /// A chunk that is not an error was read; `usage` says whether it carried usage.
    fn chunk_read(&mut self, _usage: bool, _out: &mut String) {}

    /// Reads one chunk event, nothing once the translation ended: `[DONE]` starts the
    /// answer (unless it started) and ends it. Of a chunk (data that is not JSON is
    /// passed over): an error (its message the upstream's, else the error object as it
    /// is), else the usage, and when it has a choice, the start, the choice's reasoning,
    /// text and tool call fragments, and its finish reason.
    fn on_event(&mut self, event: &SseEvent, out: &mut String) {
        if self.ended().is_some() {
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
        let (id, model) = (str_at(&chunk, "/id"), str_at(&chunk, "/model"));
        if let Some(error) = get(&chunk, "error") {
            // An error object without a message is shown as it is.
            let message = error_message(event.data.as_bytes())
                .filter(|m| *m != event.data.trim())
                .unwrap_or_else(|| error.to_string());
            self.error(id, model, error, &message, out);
            return;
        }
        let usage = get(&chunk, "usage");
        if let Some(usage) = usage {
            self.usage(Tokens::from_chat(usage));
        }
        if let Some(choice) = chunk.pointer("/choices/0") {
            self.start(id, model, out);
            let delta = choice.get("delta").unwrap_or(&Value::Null);
            if let Some(text) = text_member(delta, "reasoning_content") {
                self.text(true, text, out);
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
                self.finished(reason, out);
            }
        }
        self.chunk_read(usage.is_some(), out);
    }

    /// The upstream stream ended: ends the answer when the choice finished but the
    /// translation did not end; appends nothing when it did not finish (a cut answer).
    fn finish(&mut self, out: &mut Vec<u8>) {
        if self.ended().is_none() && self.choice_finished() {
            let mut frames = String::new();
            self.end(&mut frames);
            out.extend_from_slice(frames.as_bytes());
        }
    }

    /// Whether the translation ended with an error.
    fn ended_by_error(&self) -> bool {
        self.ended() == Some(End::Failed)
    }
}

/// Feeds an upstream chunk (any boundaries) to `parser` and the events it completes to
/// `reader`, an event skipped as too large to [`ChunkReader::too_large`]; appends what
/// they write.
pub fn read_chunks(
    parser: &mut SseParser,
    reader: &mut impl ChunkReader,
    chunk: &[u8],
    out: &mut Vec<u8>,
) {
    let mut frames = String::new();
    if feed(parser, chunk, |event| reader.on_event(&event, &mut frames)) {
        reader.too_large(&mut frames);
    }
    out.extend_from_slice(frames.as_bytes());
}

/// A tool call fragment of a chat chunk.
pub struct Fragment<'a> {
    /// Its `index`, else its position in its chunk.
    pub index: u64,
    pub id: Option<&'a str>,
    pub name: Option<&'a str>,
    pub arguments: Option<&'a str>,
}

impl<'a> Fragment<'a> {
    /// The fragment `call`, the `position`th of its chunk; empty strings count as absent.
    pub fn of(call: &'a Value, position: usize) -> Self {
        let function = call.get("function").unwrap_or(&Value::Null);
        Self {
            index: call
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(position as u64),
            id: text_member(call, "id"),
            name: text_member(function, "name"),
            arguments: text_member(function, "arguments"),
        }
    }

    /// Whether it continues the call of `index` with `id`: it has that index, and that
    /// id or none.
    pub fn continues(&self, index: u64, id: &str) -> bool {
        self.index == index && self.id.is_none_or(|own| own == id)
    }
}
