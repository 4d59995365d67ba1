//! OpenAI chat completions: decoding a client body, and reading an upstream stream.
//!
//! The gateway does not need to understand most of the body: it reads `model` and
//! `stream`, checks the shape a provider would reject anyway (so the client gets a clear
//! 400 before any upstream is charged), and keeps every member's raw text in order for
//! the passthrough. Streams are read beside the relay, never rewritten.

use super::{DecodeError, Text, MAX_COMPLETION_TOKENS};
use crate::llm::{RawObject, Request};
use crate::sse::SseParser;
use crate::stream::Progress;
use crate::usage::{generated_chars, Usage};
use serde::Deserialize;

/// Decodes and validates a chat-completions body.
pub fn decode(bytes: &[u8]) -> Result<Request, DecodeError> {
    let body = RawObject::parse(bytes)?;
    let model = model_of(&body)?;
    let messages = body.member("messages");
    if !messages.is_some_and(is_non_empty_array) {
        return Err(DecodeError::MissingMessages);
    }
    let prompt_len = messages.map_or(0, str::len);
    let stream = stream_of(&body)?;
    let mut max_tokens = None;
    for field in ["max_tokens", "max_completion_tokens"] {
        if let Some(n) = max_tokens_of(&body, field)? {
            max_tokens = Some(n);
        }
    }
    Ok(Request {
        format: super::Format::OpenAiChat,
        model,
        stream,
        max_tokens,
        prompt_len,
        body,
    })
}

/// The body's `model`: a non-empty string.
pub(super) fn model_of(body: &RawObject) -> Result<String, DecodeError> {
    body.member("model")
        .and_then(|raw| match plain_string(raw) {
            Some(text) => Some(text.to_owned()),
            None => serde_json::from_str::<String>(raw).ok(),
        })
        .filter(|m| !m.is_empty())
        .ok_or(DecodeError::MissingModel)
}

/// The text of a raw JSON value (known to be valid) that is a string without escapes:
/// what is between its quotes. `None` for any other value.
fn plain_string(raw: &str) -> Option<&str> {
    raw.strip_prefix('"')?
        .strip_suffix('"')
        .filter(|text| !text.contains('\\'))
}

/// Whether raw JSON text (known to be valid) is a non-empty array: something other than
/// whitespace sits between its brackets.
pub(super) fn is_non_empty_array(raw: &str) -> bool {
    raw.strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .is_some_and(|inner| !inner.trim().is_empty())
}

/// The body's `stream`: a boolean, `null` or absent (false).
pub(super) fn stream_of(body: &RawObject) -> Result<bool, DecodeError> {
    match body.member("stream") {
        None | Some("false" | "null") => Ok(false),
        Some("true") => Ok(true),
        Some(raw) => serde_json::from_str::<Option<bool>>(raw)
            .map(Option::unwrap_or_default)
            .map_err(|_| DecodeError::InvalidStream),
    }
}

/// The output bound `field`: a positive integer up to [`MAX_COMPLETION_TOKENS`], `null`
/// or absent.
pub(super) fn max_tokens_of(
    body: &RawObject,
    field: &'static str,
) -> Result<Option<u64>, DecodeError> {
    let Some(raw) = body.member(field) else {
        return Ok(None);
    };
    match serde_json::from_str::<Option<u64>>(raw) {
        Ok(None) => Ok(None),
        Ok(Some(n)) if n > MAX_COMPLETION_TOKENS => Err(DecodeError::MaxTokensTooLarge(field)),
        Ok(Some(n)) if n > 0 => Ok(Some(n)),
        _ => Err(DecodeError::InvalidMaxTokens(field)),
    }
}

/// What the final chunk of a cut stream repeats of the upstream's chunks.
#[derive(Debug, Default, Deserialize)]
struct ChunkIdent {
    #[serde(default)]
    id: String,
    #[serde(default)]
    created: u64,
    #[serde(default)]
    model: String,
}

/// Reads a `chat.completion.chunk` stream: usage (merged across chunks), generated text,
/// and completeness (`[DONE]` or a `finish_reason`).
#[derive(Debug, Default)]
pub struct StreamReader {
    parser: SseParser,
    usage: Option<Usage>,
    complete: bool,
    ident: Option<ChunkIdent>,
    /// The first error chunk (`{"error": …}`) seen.
    error: Option<String>,
    /// A tool call, and reasoning, open: begun and not yet followed by text or a
    /// finish reason.
    open: (bool, bool),
}

/// The member that makes a chunk an error chunk.
#[derive(Deserialize)]
struct ErrorProbe {
    error: Option<serde::de::IgnoredAny>,
}

/// What the reader classifies of a chunk: its choices' deltas and finish reasons.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Vec<Choice<'a>>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Text<'a>,
}

/// A chunk's delta: text, reasoning (`reasoning_content`, or `reasoning` as some
/// providers send it), a refusal, tool-call pieces.
#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Text<'a>,
    #[serde(default, borrow)]
    reasoning_content: Text<'a>,
    #[serde(default, borrow)]
    reasoning: Text<'a>,
    #[serde(default, borrow)]
    refusal: Text<'a>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallDelta<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallDelta<'a> {
    #[serde(default, borrow)]
    id: Text<'a>,
    #[serde(default, borrow)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(default, borrow)]
    arguments: Text<'a>,
}

/// Classifies one chunk's data into `p`; `open` is (tool call, reasoning) open.
fn classify(data: &str, p: &mut Progress, open: &mut (bool, bool)) {
    let Ok(chunk) = serde_json::from_str::<Chunk<'_>>(data) else {
        // A chunk of another shape: whatever text it carries is output.
        let chars = generated_chars(data);
        if chars > 0 {
            p.output = p.output.saturating_add(1);
            p.chars = p.chars.saturating_add(chars);
            p.text_bytes = p
                .text_bytes
                .saturating_add(u64::try_from(chars).unwrap_or(u64::MAX));
        } else {
            p.heartbeat();
        }
        return;
    };
    let before = (p.output, p.reasoning, p.heartbeats);
    for choice in &chunk.choices {
        if let Some(d) = &choice.delta {
            for reasoning in [&d.reasoning_content, &d.reasoning] {
                if let Some(text) = &reasoning.0 {
                    p.reasoning(text);
                    open.1 = true;
                }
            }
            for text in [&d.content, &d.refusal] {
                if text.0.is_some() {
                    p.text(text.as_str());
                    if !text.as_str().is_empty() {
                        *open = (false, false);
                    }
                }
            }
            for call in d.tool_calls.iter().flatten() {
                let input = call.function.as_ref().map_or("", |f| f.arguments.as_str());
                p.tool(call.id.0.is_some(), input);
                *open = (true, false);
            }
        }
        if choice.finish_reason.0.is_some() {
            *open = (false, false);
        }
    }
    if (p.output, p.reasoning, p.heartbeats) == before {
        p.heartbeat();
    }
}

impl StreamReader {
    /// Reads a relayed chunk: what it carried.
    pub fn feed(&mut self, chunk: &[u8]) -> Progress {
        let (usage, complete, ident) = (&mut self.usage, &mut self.complete, &mut self.ident);
        let (error, open) = (&mut self.error, &mut self.open);
        let mut progress = Progress::default();
        self.parser.feed(chunk, |event| {
            *complete |= event.ends_answer();
            if event.is_done() {
                return;
            }
            if error.is_none()
                && event.data.contains("\"error\"")
                && serde_json::from_str::<ErrorProbe>(&event.data).is_ok_and(|p| p.error.is_some())
            {
                *error = Some(super::error_event_text(&event.data));
            }
            if ident.is_none() {
                *ident = serde_json::from_str(&event.data).ok();
            }
            if let Some(u) = Usage::from_json_bytes(event.data.as_bytes()) {
                usage.get_or_insert_with(Usage::default).merge(u);
            }
            classify(&event.data, &mut progress, open);
        });
        (progress.tool_open, progress.reasoning_open) = self.open;
        progress
    }

    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    pub fn complete(&self) -> bool {
        self.complete
    }

    pub fn errored(&self) -> bool {
        self.error.is_some()
    }

    /// The data of the first error event (at most [`super::MAX_ERROR_EVENT_BYTES`]).
    pub fn error_event(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// A final chunk with `finish_reason: "length"` (same id, created and model as the
    /// stream's), the error, and `[DONE]`.
    pub fn cut_frames(&mut self, error: &serde_json::Value) -> String {
        let ident = self.ident.take().unwrap_or_default();
        let last = serde_json::json!({
            "id": ident.id,
            "object": "chat.completion.chunk",
            "created": ident.created,
            "model": ident.model,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
        });
        format!("data: {last}\n\ndata: {error}\n\ndata: [DONE]\n\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Format;

    #[test]
    fn parses_model_stream_and_max_tokens() {
        let r = decode(
            br#"{"model":"a/b","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":7}"#,
        )
        .unwrap();
        assert_eq!(r.model, "a/b");
        assert!(r.stream);
        assert_eq!(r.max_tokens, Some(7));
    }

    #[test]
    fn model_and_stream_are_read_as_json_whether_plain_or_escaped() {
        let read = |model: &str, stream: &str| {
            let body = format!(
                r#"{{"model":{model},"messages":[{{"role":"user","content":"hi"}}],"stream":{stream}}}"#
            );
            decode(body.as_bytes()).map(|r| (r.model, r.stream))
        };
        assert_eq!(read(r#""a/b""#, "true"), Ok(("a/b".to_owned(), true)));
        assert_eq!(read(r#""a\/b""#, "false"), Ok(("a/b".to_owned(), false)));
        assert_eq!(
            read(r#""\u00e9\"q""#, "null"),
            Ok(("é\"q".to_owned(), false))
        );
        assert_eq!(read(r#""""#, "true"), Err(DecodeError::MissingModel));
        assert_eq!(read(r#""\u0000""#, "true"), Ok(("\0".to_owned(), true)));
        assert_eq!(read("7", "true"), Err(DecodeError::MissingModel));
        assert_eq!(read(r#""m""#, "1"), Err(DecodeError::InvalidStream));
        assert_eq!(read(r#""m""#, r#""true""#), Err(DecodeError::InvalidStream));
    }

    #[test]
    fn upstream_body_rewrites_only_model_and_keeps_field_order() {
        let r = decode(
            br#"{"temperature":0.5,"model":"a/b","messages":[{"role":"user","content":"hi"}],"x":{"y":1}}"#,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(r.body.with_model("b")).unwrap(),
            r#"{"temperature":0.5,"model":"b","messages":[{"role":"user","content":"hi"}],"x":{"y":1}}"#
        );
        assert_eq!(r.model, "a/b");
        assert_eq!(
            String::from_utf8(r.body.with_model("c")).unwrap(),
            r#"{"temperature":0.5,"model":"c","messages":[{"role":"user","content":"hi"}],"x":{"y":1}}"#
        );
    }

    #[test]
    fn raw_member_text_is_kept_exactly_and_duplicate_members_resolve_to_the_last() {
        let r = decode(
            br#"{ "model" : "x/old", "messages" : [ {"role": "user",  "content": "a\u00e9"} ], "model": "a/b" }"#,
        )
        .unwrap();
        assert_eq!(r.model, "a/b");
        assert_eq!(
            String::from_utf8(r.body.with_model("up")).unwrap(),
            r#"{"model":"up","messages":[ {"role": "user",  "content": "a\u00e9"} ],"model":"up"}"#
        );
    }

    #[test]
    fn rejects_bad_shapes_naming_the_field() {
        let cases: [(&[u8], DecodeError); 14] = [
            (
                br#"{"model":"a/b","messages":[ ]}"#,
                DecodeError::MissingMessages,
            ),
            (b"[1]", DecodeError::NotAnObject),
            (br#""text""#, DecodeError::NotAnObject),
            (
                br#"{"model":"a/b","messages":{"role":"user"}}"#,
                DecodeError::MissingMessages,
            ),
            (br#"{"messages":[{}]}"#, DecodeError::MissingModel),
            (
                br#"{"model":"","messages":[{}]}"#,
                DecodeError::MissingModel,
            ),
            (br#"{"model":"a/b"}"#, DecodeError::MissingMessages),
            (
                br#"{"model":"a/b","messages":[]}"#,
                DecodeError::MissingMessages,
            ),
            (
                br#"{"model":"a/b","messages":[{}],"stream":"yes"}"#,
                DecodeError::InvalidStream,
            ),
            (
                br#"{"model":"a/b","messages":[{}],"max_tokens":-1}"#,
                DecodeError::InvalidMaxTokens("max_tokens"),
            ),
            (
                br#"{"model":"a/b","messages":[{}],"max_tokens":18446744073709551615}"#,
                DecodeError::MaxTokensTooLarge("max_tokens"),
            ),
            (
                br#"{"model":"a/b","messages":[{}],"max_completion_tokens":1048577}"#,
                DecodeError::MaxTokensTooLarge("max_completion_tokens"),
            ),
            (
                br#"{"model":"a/b","messages":[{}],"max_tokens":18446744073709551616}"#,
                DecodeError::InvalidMaxTokens("max_tokens"),
            ),
            (
                br#"{"model":"a/b","messages":[{}],"max_tokens":0}"#,
                DecodeError::InvalidMaxTokens("max_tokens"),
            ),
        ];
        for (body, want) in cases {
            assert_eq!(decode(body), Err(want));
        }
        let largest =
            format!(r#"{{"model":"a/b","messages":[{{}}],"max_tokens":{MAX_COMPLETION_TOKENS}}}"#);
        assert_eq!(
            decode(largest.as_bytes()).map(|r| r.max_tokens),
            Ok(Some(MAX_COMPLETION_TOKENS))
        );
        assert_eq!(
            DecodeError::MaxTokensTooLarge("max_tokens").param(),
            Some("max_tokens")
        );
        assert!(matches!(
            decode(b"{not json"),
            Err(DecodeError::InvalidJson(_))
        ));
    }

    #[test]
    fn the_prompt_length_is_the_raw_messages_text_and_the_format_is_recorded() {
        let r = decode(br#"{"model":"a/b","messages":[{"role":"user","content":"hi"}]}"#).unwrap();
        assert_eq!(r.prompt_len, r#"[{"role":"user","content":"hi"}]"#.len());
        assert_eq!(r.format, Format::OpenAiChat);
        assert_eq!(r.max_tokens, None);
        assert!(!r.stream);
    }

    fn chunk(delta: &str) -> String {
        format!("data: {{\"id\":\"c\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":null}}]}}\n\n")
    }

    #[test]
    fn each_chunk_is_classified_for_the_watchdogs() {
        let cases = [
            (
                r#"{"content":"Hé "}"#,
                Progress {
                    output: 1,
                    text_bytes: 4,
                    chars: 3,
                    ..Progress::default()
                },
            ),
            (
                r#"{"content":"\n "}"#,
                Progress {
                    output: 1,
                    chars: 2,
                    ..Progress::default()
                },
            ),
            (
                r#"{"role":"assistant","content":""}"#,
                Progress {
                    heartbeats: 1,
                    ..Progress::default()
                },
            ),
            (
                r#"{}"#,
                Progress {
                    heartbeats: 1,
                    ..Progress::default()
                },
            ),
            (
                r#"{"reasoning_content":""}"#,
                Progress {
                    heartbeats: 1,
                    reasoning_open: true,
                    ..Progress::default()
                },
            ),
            (
                r#"{"reasoning":"hm"}"#,
                Progress {
                    reasoning: 1,
                    chars: 2,
                    reasoning_open: true,
                    ..Progress::default()
                },
            ),
            (
                r#"{"refusal":"no"}"#,
                Progress {
                    output: 1,
                    text_bytes: 2,
                    chars: 2,
                    ..Progress::default()
                },
            ),
            (
                r#"{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]}"#,
                Progress {
                    output: 1,
                    tool_open: true,
                    ..Progress::default()
                },
            ),
            (
                r#"{"content":{"odd":"shape"}}"#,
                Progress {
                    heartbeats: 1,
                    ..Progress::default()
                },
            ),
        ];
        for (delta, want) in cases {
            let mut r = StreamReader::default();
            assert_eq!(r.feed(chunk(delta).as_bytes()), want, "{delta}");
        }
        // Tool input deltas keep the call open until the finish reason.
        let mut r = StreamReader::default();
        r.feed(
            chunk(r#"{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f"}}]}"#)
                .as_bytes(),
        );
        let args = r.feed(
            chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":1}"}}]}"#)
                .as_bytes(),
        );
        assert_eq!((args.output, args.chars, args.tool_open), (1, 7, true));
        let end = r.feed(b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n");
        assert_eq!(
            end,
            Progress {
                heartbeats: 1,
                ..Progress::default()
            }
        );
        // A chunk of another shape still counts its text.
        let mut odd = StreamReader::default();
        let p = odd.feed(b"data: {\"choices\":\"x\",\"content\":\"hey\"}\n\n");
        assert_eq!((p.output, p.chars), (1, 3));
    }

    #[test]
    fn the_stream_reader_merges_usage_counts_text_and_sees_the_end() {
        let mut r = StreamReader::default();
        let first = br#"data: {"id":"c1","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}

"#;
        assert_eq!(r.feed(first).chars, 3);
        assert!(!r.complete());
        assert_eq!(r.usage(), None);
        let last = br#"data: {"id":"c1","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}}

data: [DONE]

"#;
        assert_eq!(r.feed(last).chars, 2);
        assert!(r.complete());
        assert!(!r.errored());
        let mut e = StreamReader::default();
        e.feed(b"data: {\"error\":{\"message\":\"boom\"}}\n\n");
        assert!(e.errored());
        let mut quoted = StreamReader::default();
        quoted.feed(
            br#"data: {"choices":[{"delta":{"content":"an \"error\" word"}}]}

"#,
        );
        assert!(!quoted.errored());
        assert_eq!(
            r.usage(),
            Some(Usage {
                prompt_tokens: 4,
                completion_tokens: 2,
            })
        );
        let error = serde_json::json!({"error": {"code": "quota_exceeded"}});
        assert_eq!(
            r.cut_frames(&error),
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: {\"error\":{\"code\":\"quota_exceeded\"}}\n\ndata: [DONE]\n\n"
        );
    }

    #[test]
    fn a_stream_cut_before_any_chunk_ends_with_an_empty_ident() {
        let mut r = StreamReader::default();
        let error = serde_json::json!({"error": {}});
        assert_eq!(
            r.cut_frames(&error),
            "data: {\"id\":\"\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: {\"error\":{}}\n\ndata: [DONE]\n\n"
        );
    }
}
