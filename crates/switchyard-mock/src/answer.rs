//! What the mock answers, worked out from the request the same way for every API.
//!
//! An answer is an optional thinking part, a text made of pieces (one piece is one
//! output token and one stream delta), an optional tool call, and why it stopped:
//!
//! - The last user message holds a tool result (Anthropic: a `tool_result` block in the
//!   last `user` message; chat: the last message has role `tool`; Responses: the last
//!   input item is a `function_call_output`): the text is `tool said: <the result's
//!   text>`.
//! - Otherwise, when the request declares `tools` (Responses: a `function` tool, flat or
//!   in a `namespace`) and a text of the last user message contains
//!   `[[tool:NAME {json}]]` (the JSON object may be left out: `{}`), the text is
//!   `Calling NAME.` followed by a call of `NAME` with that JSON as its input.
//! - Otherwise the text is the canned answer: `chunks` words of [`crate::openai::WORDS`].
//!
//! Then, like a model that stops generating: a stop sequence of the request found in the
//! text cuts it just before the match (and drops the tool call), and a `max_tokens`
//! (Responses: `max_output_tokens`) smaller than the answer's output tokens cuts the
//! text to fit (and drops the tool call). Thinking (Anthropic `thinking.type` `enabled`
//! or `adaptive`; chat `reasoning_effort` other than `none`; Responses
//! `reasoning.effort` other than `none`) adds [`THINKING`] before everything else.

use crate::openai::word;
use serde_json::{json, Value};

/// The thinking text.
pub const THINKING: &str = "Let me think.";

/// The signature of the Anthropic thinking block.
pub const SIGNATURE: &str = "sig_mock";

/// The id of the Anthropic `tool_use` block.
pub const TOOL_USE_ID: &str = "toolu_mock_1";

/// The id of the chat tool call.
pub const TOOL_CALL_ID: &str = "call_mock_1";

/// A tool the answer calls.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    /// The call's input, a JSON object.
    pub input: Value,
}

/// Why the answer ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The answer is complete.
    End,
    /// This stop sequence of the request was reached.
    Sequence(String),
    /// The request's `max_tokens` was reached.
    MaxTokens,
    /// The answer calls a tool.
    ToolUse,
}

/// One answer, before it is put in either API's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub thinking: bool,
    /// The text's pieces: one output token and one stream delta each.
    pub text: Vec<String>,
    pub tool: Option<ToolCall>,
    pub stop: Stop,
}

/// A streamed answer: the events before the first delta, one frame per delta (with the
/// block boundaries that precede it), and the events after the last delta.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamParts {
    pub head: String,
    pub frames: Vec<String>,
    pub tail: String,
}

impl StreamParts {
    /// The whole stream as one string.
    pub fn concat(&self) -> String {
        let mut s = self.head.clone();
        self.frames.iter().for_each(|f| s.push_str(f));
        s.push_str(&self.tail);
        s
    }
}

/// Builds a [`StreamParts`]: the events before the first delta belong to the head,
/// later ones to the next delta's frame, the ones after the last delta to the tail.
#[derive(Debug)]
pub(crate) struct Builder {
    parts: StreamParts,
    pending: String,
}

impl Builder {
    /// A stream that starts with `head`.
    pub(crate) fn new(head: String) -> Self {
        Self {
            parts: StreamParts {
                head,
                frames: Vec::new(),
                tail: String::new(),
            },
            pending: String::new(),
        }
    }

    /// An event that is not a delta (a block boundary).
    pub(crate) fn event(&mut self, e: &str) {
        if self.parts.frames.is_empty() {
            self.parts.head.push_str(e);
        } else {
            self.pending.push_str(e);
        }
    }

    /// A delta: one frame, with the events since the previous one.
    pub(crate) fn delta(&mut self, e: &str) {
        let mut frame = std::mem::take(&mut self.pending);
        frame.push_str(e);
        self.parts.frames.push(frame);
    }

    /// The stream, whose tail is the events after the last delta and then `end`.
    pub(crate) fn finish(self, end: &str) -> StreamParts {
        let mut parts = self.parts;
        parts.tail = self.pending;
        parts.tail.push_str(end);
        parts
    }
}

/// What an answer depends on in a request, whichever API it came in.
struct Ask<'a> {
    thinking: bool,
    tool_result: Option<String>,
    /// The texts of the last user message.
    texts: Vec<&'a str>,
    has_tools: bool,
    stops: Vec<&'a str>,
    max_tokens: Option<u64>,
}

impl Answer {
    /// The canned answer of `chunks` words, nothing else.
    pub fn canned(chunks: u32) -> Self {
        Self {
            thinking: false,
            text: (0..chunks).map(|i| word(i).to_owned()).collect(),
            tool: None,
            stop: Stop::End,
        }
    }

    /// The answer to an Anthropic Messages body. `honour_max_tokens` false keeps the
    /// answer whole whatever the request's `max_tokens`.
    pub fn messages(body: &Value, chunks: u32, honour_max_tokens: bool) -> Self {
        let messages = array(body.get("messages"));
        let last_user = messages.iter().rev().find(|m| role(m) == Some("user"));
        let content = last_user.and_then(|m| m.get("content"));
        let tool_result = array(content)
            .iter()
            .find(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            .map(|b| texts(b.get("content")).concat());
        let thinking = matches!(
            body.pointer("/thinking/type").and_then(Value::as_str),
            Some("enabled" | "adaptive")
        );
        let ask = Ask {
            thinking,
            tool_result,
            texts: texts(content),
            has_tools: !array(body.get("tools")).is_empty(),
            stops: strings(body.get("stop_sequences")),
            max_tokens: body.get("max_tokens").and_then(Value::as_u64),
        };
        Self::plan(ask, chunks, honour_max_tokens)
    }

    /// The answer to an OpenAI chat-completions body. `honour_max_tokens` false keeps
    /// the answer whole whatever the request's `max_completion_tokens` or `max_tokens`.
    pub fn chat(body: &Value, chunks: u32, honour_max_tokens: bool) -> Self {
        let messages = array(body.get("messages"));
        let tool_result = messages
            .last()
            .filter(|m| role(m) == Some("tool"))
            .map(|m| texts(m.get("content")).concat());
        let last_user = messages.iter().rev().find(|m| role(m) == Some("user"));
        let thinking = body
            .get("reasoning_effort")
            .is_some_and(|v| !v.is_null() && v.as_str() != Some("none"));
        let ask = Ask {
            thinking,
            tool_result,
            texts: texts(last_user.and_then(|m| m.get("content"))),
            has_tools: !array(body.get("tools")).is_empty(),
            stops: strings(body.get("stop")),
            max_tokens: body
                .get("max_completion_tokens")
                .or_else(|| body.get("max_tokens"))
                .and_then(Value::as_u64),
        };
        Self::plan(ask, chunks, honour_max_tokens)
    }

    /// The answer to an OpenAI Responses body. `honour_max_tokens` false keeps the
    /// answer whole whatever the request's `max_output_tokens`.
    pub fn responses(body: &Value, chunks: u32, honour_max_tokens: bool) -> Self {
        let input = body.get("input");
        let items = array(input);
        let tool_result = items
            .last()
            .filter(|i| kind(i) == Some("function_call_output"))
            .map(|i| response_texts(i.get("output")).concat());
        let last_user = items
            .iter()
            .rev()
            .find(|i| is_message(i) && role(i) == Some("user"));
        let texts = match input {
            Some(Value::String(_)) => response_texts(input),
            _ => response_texts(last_user.and_then(|m| m.get("content"))),
        };
        let is_function = |t: &Value| kind(t) == Some("function");
        let has_tools = array(body.get("tools")).iter().any(|t| {
            is_function(t)
                || kind(t) == Some("namespace") && array(t.get("tools")).iter().any(is_function)
        });
        let thinking = body
            .pointer("/reasoning/effort")
            .and_then(Value::as_str)
            .is_some_and(|e| e != "none");
        let ask = Ask {
            thinking,
            tool_result,
            texts,
            has_tools,
            stops: Vec::new(),
            max_tokens: body.get("max_output_tokens").and_then(Value::as_u64),
        };
        Self::plan(ask, chunks, honour_max_tokens)
    }

    fn plan(ask: Ask<'_>, chunks: u32, honour_max_tokens: bool) -> Self {
        let call = ask
            .has_tools
            .then(|| ask.texts.iter().find_map(|t| marker(t)))
            .flatten();
        let mut answer = if let Some(result) = ask.tool_result {
            Self {
                text: pieces(&format!("tool said: {result}")),
                ..Self::canned(0)
            }
        } else if let Some(call) = call {
            Self {
                thinking: false,
                text: pieces(&format!("Calling {}.", call.name)),
                tool: Some(call),
                stop: Stop::ToolUse,
            }
        } else {
            Self::canned(chunks)
        };
        answer.thinking = ask.thinking;
        if let Some((at, sequence)) = earliest(&answer.text.concat(), &ask.stops) {
            cut(&mut answer.text, at);
            answer.tool = None;
            answer.stop = Stop::Sequence(sequence.to_owned());
        }
        if let Some(max) = ask.max_tokens.filter(|_| honour_max_tokens) {
            let budget = max.saturating_sub(answer.thinking_tokens());
            let tool = answer.arguments().map_or(0, |a| tokens(&a));
            if len(&answer.text) + tool > budget {
                answer
                    .text
                    .truncate(usize::try_from(budget).unwrap_or(usize::MAX));
                answer.tool = None;
                answer.stop = Stop::MaxTokens;
            }
        }
        answer
    }

    /// The whole text.
    pub fn text(&self) -> String {
        self.text.concat()
    }

    /// The tool call's input as a JSON string.
    pub fn arguments(&self) -> Option<String> {
        self.tool.as_ref().map(|t| t.input.to_string())
    }

    /// Output tokens spent thinking: the pieces of [`THINKING`], or 0.
    pub fn thinking_tokens(&self) -> u64 {
        if self.thinking {
            len(&pieces(THINKING))
        } else {
            0
        }
    }

    /// Output tokens: thinking, one per text piece, and the tool call's input counted
    /// like prompt text (characters / 4, rounded up, at least 1).
    pub fn output_tokens(&self) -> u64 {
        self.thinking_tokens() + len(&self.text) + self.arguments().map_or(0, |a| tokens(&a))
    }
}

/// Splits a text into pieces before each space: `"tool said: hi"` is
/// `["tool", " said:", " hi"]`.
pub fn pieces(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if c == ' ' && i > start {
            out.push(text[start..i].to_owned());
            start = i;
        }
    }
    if start < text.len() {
        out.push(text[start..].to_owned());
    }
    out
}

/// Splits a string into three consecutive parts at a third and two thirds of its
/// characters (rounded down): `"{\"a\":1}"` is `["{\"", "a\"", ":1}"]`.
pub fn thirds(s: &str) -> [&str; 3] {
    let n = s.chars().count();
    let at = |k: usize| s.char_indices().nth(k).map_or(s.len(), |(i, _)| i);
    let (a, b) = (at(n / 3), at(2 * n / 3));
    [&s[..a], &s[a..b], &s[b..]]
}

fn len<T>(v: &[T]) -> u64 {
    u64::try_from(v.len()).unwrap_or(u64::MAX)
}

fn tokens(s: &str) -> u64 {
    tokens_of(s.chars().count())
}

/// Tokens of a text of `chars` characters: a quarter, rounded up, at least 1.
pub(crate) fn tokens_of(chars: usize) -> u64 {
    u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX).max(1)
}

fn role(message: &Value) -> Option<&str> {
    message.get("role").and_then(Value::as_str)
}

fn kind(v: &Value) -> Option<&str> {
    v.get("type").and_then(Value::as_str)
}

/// Whether a Responses input item is a message (`type` `message`, or no `type`).
pub(crate) fn is_message(item: &Value) -> bool {
    kind(item).is_none_or(|k| k == "message")
}

pub(crate) fn array(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// A string, or the strings of an array.
fn strings(v: Option<&Value>) -> Vec<&str> {
    match v {
        Some(Value::String(s)) => vec![s.as_str()],
        other => array(other).iter().filter_map(Value::as_str).collect(),
    }
}

/// The texts of a message content: the string, or the `text` of each text block.
fn texts(content: Option<&Value>) -> Vec<&str> {
    typed_texts(content, &["text"])
}

/// The texts of a Responses message content or `function_call_output` output: the
/// string, or the `text` of each `input_text` and `output_text` part.
pub(crate) fn response_texts(content: Option<&Value>) -> Vec<&str> {
    typed_texts(content, &["input_text", "output_text"])
}

/// The string, or the `text` of each part whose `type` is one of `types`.
fn typed_texts<'a>(content: Option<&'a Value>, types: &[&str]) -> Vec<&'a str> {
    match content {
        Some(Value::String(s)) => vec![s.as_str()],
        other => array(other)
            .iter()
            .filter(|b| kind(b).is_some_and(|k| types.contains(&k)))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect(),
    }
}

/// The first `[[tool:NAME {json}]]` marker in `text` that parses.
fn marker(text: &str) -> Option<ToolCall> {
    const OPEN: &str = "[[tool:";
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        rest = &rest[at + OPEN.len()..];
        if let Some(call) = parse_marker(rest) {
            return Some(call);
        }
    }
    None
}

fn parse_marker(s: &str) -> Option<ToolCall> {
    let end = s
        .find(|c: char| c.is_whitespace() || c == ']' || c == '{')
        .unwrap_or(s.len());
    let name = &s[..end];
    if name.is_empty() {
        return None;
    }
    let rest = s[end..].trim_start();
    let (input, after) = if rest.starts_with('{') {
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        let input = values.next()?.ok()?;
        (input, &rest[values.byte_offset()..])
    } else {
        (json!({}), rest)
    };
    after.trim_start().starts_with("]]").then(|| ToolCall {
        name: name.to_owned(),
        input,
    })
}

/// Where the earliest stop sequence starts in `text` (the first listed on a tie).
fn earliest<'a>(text: &str, stops: &[&'a str]) -> Option<(usize, &'a str)> {
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s).map(|at| (at, *s)))
        .min_by_key(|(at, _)| *at)
}

/// Keeps the first `at` bytes of the pieces' concatenation.
fn cut(pieces: &mut Vec<String>, at: usize) {
    let mut used = 0;
    pieces.retain_mut(|p| {
        let keep = at.saturating_sub(used).min(p.len());
        used += p.len();
        p.truncate(keep);
        !p.is_empty()
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(content: Value) -> Value {
        json!({"model": "m", "tools": [{"name": "t"}], "messages": [{"role": "user", "content": content}]})
    }

    #[test]
    fn pieces_split_before_spaces_and_thirds_split_by_characters() {
        assert_eq!(pieces("tool said: hi"), ["tool", " said:", " hi"]);
        assert_eq!(pieces(" a  b"), [" a", " ", " b"]);
        assert_eq!(pieces(""), Vec::<String>::new());
        assert_eq!(thirds("{\"a\":1}"), ["{\"", "a\"", ":1}"]);
        assert_eq!(thirds("{}"), ["", "{", "}"]);
        assert_eq!(thirds("ééé"), ["é", "é", "é"]);
    }

    #[test]
    fn the_marker_is_found_anywhere_in_any_text_block() {
        let body = user(json!([
            {"type": "image"},
            {"type": "text", "text": "no marker"},
            {"type": "text", "text": "x [[tool:broken {]] then [[tool:get_weather {\"q\": [[1]]}]] y"}
        ]));
        let a = Answer::messages(&body, 5, true);
        assert_eq!(
            a.tool,
            Some(ToolCall {
                name: "get_weather".into(),
                input: json!({"q": [[1]]})
            })
        );
        assert_eq!(a.text, ["Calling", " get_weather."]);
        assert_eq!(a.stop, Stop::ToolUse);
        assert_eq!(a.output_tokens(), 2 + 3);
        let bare = Answer::messages(&user(json!("[[tool:ls]]")), 5, true);
        assert_eq!(bare.arguments().as_deref(), Some("{}"));
    }

    #[test]
    fn no_tools_no_call_and_a_tool_result_is_echoed() {
        let mut body = user(json!("[[tool:ls {}]]"));
        body["tools"] = json!([]);
        assert_eq!(Answer::messages(&body, 2, true), Answer::canned(2));
        let body = user(
            json!([{"type": "tool_result", "tool_use_id": "toolu_mock_1",
            "content": [{"type": "text", "text": "sunny"}, {"type": "text", "text": ", 21C"}]}]),
        );
        let a = Answer::messages(&body, 5, true);
        assert_eq!(a.text(), "tool said: sunny, 21C");
        assert_eq!(a.stop, Stop::End);
    }

    #[test]
    fn stop_sequences_cut_before_the_earliest_match() {
        let body = json!({"messages": [], "stop_sequences": ["mock", "Switch", ""]});
        let a = Answer::messages(&body, 6, true);
        assert_eq!(a.text, ["Hello", " from", " the", " "]);
        assert_eq!(a.stop, Stop::Sequence("Switch".into()));
        let body = json!({"messages": [], "stop": "Hello"});
        assert_eq!(Answer::chat(&body, 6, true).text, Vec::<String>::new());
    }

    #[test]
    fn max_tokens_counts_thinking_and_text_unless_not_honoured() {
        let body = json!({"messages": [], "max_tokens": 5, "thinking": {"type": "enabled"}});
        let a = Answer::messages(&body, 5, true);
        assert_eq!(a.text, ["Hello", " from"]);
        assert_eq!(a.stop, Stop::MaxTokens);
        assert_eq!(a.output_tokens(), 5);
        let whole = Answer::messages(&body, 5, false);
        assert_eq!(whole.text.len(), 5);
        assert_eq!(whole.stop, Stop::End);
        let body = json!({"messages": [], "max_completion_tokens": 5, "max_tokens": 1});
        assert_eq!(Answer::chat(&body, 5, true), Answer::canned(5));
    }
}
