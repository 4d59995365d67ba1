//! Anthropic Messages (`POST /v1/messages`): decoding a client body, and reading an
//! upstream event stream.
//!
//! Like the chat decoder, it reads only what the pipeline needs (`model`, `stream`,
//! `max_tokens`, the prompt's size) and checks the shape Anthropic would refuse anyway;
//! every member stays raw for the passthrough. The stream reader reads beside the relay:
//! usage from `message_start` and `message_delta`, completeness from `message_stop`, and
//! which content block is open, so a cut can close it.

use super::{DecodeError, Text};
use crate::llm::{RawObject, Request};
use crate::sse::SseParser;
use crate::stream::Progress;
use crate::usage::Usage;
use serde::Deserialize;
use serde_json::json;

/// Decodes and validates a Messages body (`/v1/messages` or its `count_tokens`).
pub fn decode(bytes: &[u8]) -> Result<Request, DecodeError> {
    let body = RawObject::parse(bytes)?;
    let model = super::openai_chat::model_of(&body)?;
    let messages = body.member("messages");
    if !messages.is_some_and(super::openai_chat::is_non_empty_array) {
        return Err(DecodeError::MissingMessages);
    }
    // Claude Code's tool definitions are tens of thousands of tokens of every prompt.
    let prompt_len = ["messages", "system", "tools"]
        .iter()
        .filter_map(|m| body.member(m))
        .map(str::len)
        .fold(0, usize::saturating_add);
    let stream = super::openai_chat::stream_of(&body)?;
    let max_tokens = super::openai_chat::max_tokens_of(&body, "max_tokens")?;
    Ok(Request {
        format: super::Format::AnthropicMessages,
        model,
        stream,
        max_tokens,
        prompt_len,
        body,
    })
}

/// Anthropic's smallest thinking budget.
pub const MIN_THINKING_BUDGET: u64 = 1024;

/// The `thinking` member (raw JSON text) fitted under an output bound lowered to
/// `bound`: Anthropic wants `budget_tokens` below `max_tokens`. `None` when it fits as
/// it is (or is not a budgeted `enabled` thinking); `Some(None)` when no budget of at
/// least [`MIN_THINKING_BUDGET`] fits, so thinking is left out; else the new text.
pub fn fit_thinking(thinking: &str, bound: u64) -> Option<Option<String>> {
    let mut value: serde_json::Value = serde_json::from_str(thinking).ok()?;
    if value.get("type").and_then(serde_json::Value::as_str) != Some("enabled") {
        return None;
    }
    let budget = value.get("budget_tokens")?.as_u64()?;
    if budget < bound {
        return None;
    }
    let fitted = bound.saturating_sub(1);
    if fitted < MIN_THINKING_BUDGET {
        return Some(None);
    }
    value["budget_tokens"] = json!(fitted);
    Some(Some(value.to_string()))
}

/// What the reader needs of an event: its type, the block's index, the started
/// block's type, and the delta.
#[derive(Debug, Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    content_block: Option<Block<'a>>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
}

#[derive(Debug, Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Text<'a>,
}

/// A `content_block_delta`'s delta: `text_delta` (`text`), `input_json_delta`
/// (`partial_json`), `thinking_delta` (`thinking`), `signature_delta`.
#[derive(Debug, Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Text<'a>,
    #[serde(default, borrow)]
    text: Text<'a>,
    #[serde(default, borrow)]
    partial_json: Text<'a>,
    #[serde(default, borrow)]
    thinking: Text<'a>,
}

/// The kind of a content block, as the watchdogs see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    Text,
    /// `tool_use`, `server_tool_use`, `mcp_tool_use`.
    Tool,
    /// `thinking`, `redacted_thinking`.
    Reasoning,
}

impl BlockKind {
    fn of(kind: &str) -> Self {
        if kind.contains("thinking") {
            Self::Reasoning
        } else if kind.ends_with("tool_use") {
            Self::Tool
        } else {
            Self::Text
        }
    }
}

/// Reads a Messages event stream: what each chunk carried, usage (merged across
/// `message_start` and `message_delta`), completeness (`message_stop`), and the open
/// block.
#[derive(Debug, Default)]
pub struct StreamReader {
    parser: SseParser,
    usage: Option<Usage>,
    complete: bool,
    /// The content block started and not yet stopped, and its kind.
    open_block: Option<(u64, BlockKind)>,
    /// The first `error` event's data.
    error: Option<String>,
    /// `message_start` was seen: the client holds a message to end.
    started: bool,
}

impl StreamReader {
    /// Reads a relayed chunk: what it carried.
    pub fn feed(&mut self, chunk: &[u8]) -> Progress {
        let mut progress = Progress::default();
        let Self {
            parser,
            usage,
            complete,
            open_block,
            error,
            started,
        } = self;
        parser.feed(chunk, |event| {
            let Ok(parsed) = serde_json::from_str::<Event<'_>>(&event.data) else {
                return;
            };
            let p = &mut progress;
            let before = (p.output, p.reasoning, p.heartbeats);
            match parsed.kind.as_ref() {
                "message_stop" => *complete = true,
                "message_start" => *started = true,
                "content_block_start" => {
                    let kind = parsed
                        .content_block
                        .as_ref()
                        .map_or(BlockKind::Text, |b| BlockKind::of(b.kind.as_str()));
                    *open_block = parsed.index.map(|i| (i, kind));
                    match kind {
                        BlockKind::Tool => p.tool(true, ""),
                        BlockKind::Reasoning => p.reasoning(""),
                        BlockKind::Text => {}
                    }
                }
                "content_block_stop" => *open_block = None,
                "error" => {
                    error.get_or_insert_with(|| super::error_event_text(&event.data));
                }
                "content_block_delta" => {
                    if let Some(d) = &parsed.delta {
                        match d.kind.as_str() {
                            "thinking_delta" => p.reasoning(d.thinking.as_str()),
                            "signature_delta" => p.reasoning(""),
                            "input_json_delta" => p.tool(false, d.partial_json.as_str()),
                            _ => p.text(d.text.as_str()),
                        }
                    }
                }
                _ => {}
            }
            if (p.output, p.reasoning, p.heartbeats) == before {
                p.heartbeat();
            }
            if matches!(parsed.kind.as_ref(), "message_start" | "message_delta") {
                if let Some(u) = Usage::from_json_bytes(event.data.as_bytes()) {
                    usage.get_or_insert_with(Usage::default).merge(u);
                }
            }
        });
        let open = open_block.map(|(_, kind)| kind);
        progress.tool_open = open == Some(BlockKind::Tool);
        progress.reasoning_open = open == Some(BlockKind::Reasoning);
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

    /// Closes the open content block, then the `error` event and `message_stop`: no
    /// `message_delta` with a stop reason of the gateway's making, since Claude Code
    /// reads `max_tokens` there as "the response exceeded the output token maximum"
    /// and says so instead of the error. Before any `message_start`, only the `error`
    /// event, as Anthropic sends an error before a message: the SDKs refuse a
    /// `message_stop` with no message ("Unexpected event order").
    pub fn cut_frames(&mut self, error: &serde_json::Value) -> String {
        let mut out = String::new();
        if !self.started {
            push_event(&mut out, "error", error);
            return out;
        }
        if let Some((index, _)) = self.open_block.take() {
            push_event(
                &mut out,
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            );
        }
        push_event(&mut out, "error", error);
        push_event(&mut out, "message_stop", &json!({"type": "message_stop"}));
        out
    }
}

/// Appends one named event.
pub fn push_event(out: &mut String, name: &str, data: &serde_json::Value) {
    out.push_str("event: ");
    out.push_str(name);
    out.push_str("\ndata: ");
    out.push_str(&data.to_string());
    out.push_str("\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Format;

    #[test]
    fn decodes_the_members_the_pipeline_reads() {
        let r = decode(
            br#"{"model":"claude/opus","system":[{"type":"text","text":"be brief"}],"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"t"}],"max_tokens":128000,"stream":true}"#,
        )
        .unwrap();
        assert_eq!(r.format, Format::AnthropicMessages);
        assert_eq!(r.model, "claude/opus");
        assert!(r.stream);
        assert_eq!(r.max_tokens, Some(128_000));
        assert_eq!(
            r.prompt_len,
            r#"[{"role":"user","content":"hi"}]"#.len()
                + r#"[{"type":"text","text":"be brief"}]"#.len()
                + r#"[{"name":"t"}]"#.len()
        );
    }

    #[test]
    fn refuses_bad_shapes_naming_the_member() {
        let cases: [(&[u8], DecodeError); 5] = [
            (br#"{"messages":[{}]}"#, DecodeError::MissingModel),
            (
                br#"{"model":"a/b","messages":[]}"#,
                DecodeError::MissingMessages,
            ),
            (
                br#"{"model":"a/b","system":"x"}"#,
                DecodeError::MissingMessages,
            ),
            (
                br#"{"model":"a/b","messages":[{}],"stream":1}"#,
                DecodeError::InvalidStream,
            ),
            (
                br#"{"model":"a/b","messages":[{}],"max_tokens":2000000}"#,
                DecodeError::MaxTokensTooLarge("max_tokens"),
            ),
        ];
        for (body, want) in cases {
            assert_eq!(decode(body), Err(want));
        }
    }

    #[test]
    fn thinking_is_fitted_under_a_lowered_bound() {
        let enabled = r#"{"type":"enabled","budget_tokens":31999}"#;
        assert_eq!(
            fit_thinking(enabled, 16_000),
            Some(Some(
                r#"{"type":"enabled","budget_tokens":15999}"#.to_owned()
            ))
        );
        assert_eq!(fit_thinking(enabled, 32_000), None);
        assert_eq!(fit_thinking(enabled, 1_024), Some(None));
        assert_eq!(
            fit_thinking(enabled, 1_025),
            Some(Some(
                r#"{"type":"enabled","budget_tokens":1024}"#.to_owned()
            ))
        );
        assert_eq!(fit_thinking(r#"{"type":"adaptive"}"#, 10), None);
        assert_eq!(fit_thinking("null", 10), None);
    }

    #[test]
    fn a_clamped_pass_through_fits_thinking_and_keeps_the_rest() {
        let r = decode(
            br#"{"model":"a/b","max_tokens":32000,"thinking":{"type":"enabled","budget_tokens":31999},"messages":[{"role":"user","content":"hi"}]}"#,
        )
        .unwrap();
        let body = |limit| {
            String::from_utf8(
                r.upstream_body(Format::AnthropicMessages, "up", Some(limit))
                    .unwrap(),
            )
            .unwrap()
        };
        assert_eq!(
            body(16_000),
            r#"{"model":"up","max_tokens":16000,"thinking":{"type":"enabled","budget_tokens":15999},"messages":[{"role":"user","content":"hi"}]}"#
        );
        assert_eq!(
            body(1_000),
            r#"{"model":"up","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}"#
        );
        assert_eq!(
            body(64_000),
            r#"{"model":"up","max_tokens":32000,"thinking":{"type":"enabled","budget_tokens":31999},"messages":[{"role":"user","content":"hi"}]}"#
        );
    }

    #[test]
    fn a_pass_through_without_a_bound_gets_the_models_limit_or_the_default() {
        for (body, limit, want) in [
            (
                r#"{"model":"a/b","messages":[{"role":"user","content":"hi"}]}"#,
                None,
                r#"{"model":"up","messages":[{"role":"user","content":"hi"}],"max_tokens":8192}"#,
            ),
            (
                r#"{"model":"a/b","max_tokens":null,"messages":[{"role":"user","content":"hi"}]}"#,
                Some(4096),
                r#"{"model":"up","max_tokens":4096,"messages":[{"role":"user","content":"hi"}]}"#,
            ),
            (
                r#"{"model":"a/b","thinking":{"type":"enabled","budget_tokens":9000},"messages":[{"role":"user","content":"hi"}]}"#,
                None,
                r#"{"model":"up","thinking":{"type":"enabled","budget_tokens":8191},"messages":[{"role":"user","content":"hi"}],"max_tokens":8192}"#,
            ),
            (
                r#"{"model":"a/b","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}"#,
                None,
                r#"{"model":"up","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}"#,
            ),
        ] {
            let r = decode(body.as_bytes()).unwrap();
            let sent = r
                .upstream_body(Format::AnthropicMessages, "up", limit)
                .unwrap();
            assert_eq!(String::from_utf8(sent).unwrap(), want, "{body}");
        }
    }

    const STREAM: &str = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"m\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: ping\ndata: {\"type\":\"ping\"}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n",
    );

    fn event(name: &str, data: &str) -> String {
        format!("event: {name}\ndata: {data}\n\n")
    }

    #[test]
    fn each_event_is_classified_for_the_watchdogs() {
        let mut r = StreamReader::default();
        let start = r.feed(STREAM.as_bytes());
        // message_start, the text block's start and the ping carry nothing.
        assert_eq!(
            start,
            Progress {
                output: 1,
                heartbeats: 3,
                text_bytes: 5,
                chars: 5,
                ..Progress::default()
            }
        );
        let mut r = StreamReader::default();
        let thinking = r.feed(
            format!(
                "{}{}{}",
                event("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#),
                event("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":""}}"#),
                event("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"s"}}"#),
            )
            .as_bytes(),
        );
        // A thinking block's start, an empty delta and its signature carry no text:
        // the block is open, and nothing is proven yet.
        assert_eq!(
            thinking,
            Progress {
                heartbeats: 3,
                reasoning_open: true,
                ..Progress::default()
            }
        );
        let closed = r.feed(
            event(
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            )
            .as_bytes(),
        );
        assert_eq!(
            closed,
            Progress {
                heartbeats: 1,
                ..Progress::default()
            }
        );
        let tool = r.feed(
            format!(
                "{}{}{}",
                event("content_block_start", r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}"#),
                event("content_block_delta", r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#),
                event("content_block_delta", r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}"#),
            )
            .as_bytes(),
        );
        assert_eq!(
            tool,
            Progress {
                output: 2,
                heartbeats: 1,
                chars: 4,
                tool_open: true,
                ..Progress::default()
            }
        );
        let whitespace = r.feed(event("content_block_delta", r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"  "}}"#).as_bytes());
        assert_eq!((whitespace.output, whitespace.text_bytes), (1, 0));
    }

    #[test]
    fn reads_usage_text_and_the_end() {
        let mut r = StreamReader::default();
        assert_eq!(r.feed(STREAM.as_bytes()).chars, 5);
        assert_eq!(
            r.usage(),
            Some(Usage {
                prompt_tokens: 12,
                completion_tokens: 1
            })
        );
        assert!(!r.complete());
        let tail = concat!(
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        assert_eq!(r.feed(tail.as_bytes()).chars, 0);
        assert!(r.complete());
        assert!(!r.errored());
        let mut e = StreamReader::default();
        e.feed(b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n");
        assert!(e.errored());
        assert!(!e.complete());
        assert_eq!(
            r.usage(),
            Some(Usage {
                prompt_tokens: 12,
                completion_tokens: 9
            })
        );
    }

    #[test]
    fn a_cut_closes_the_open_block_and_ends_with_the_error() {
        let mut r = StreamReader::default();
        r.feed(STREAM.as_bytes());
        let error = json!({"type": "error", "error": {"type": "rate_limit_error", "message": "m"}});
        assert_eq!(
            r.cut_frames(&error),
            concat!(
                "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
                "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"m\"}}\n\n",
                "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
            )
        );
    }

    #[test]
    fn a_cut_before_the_message_started_is_the_error_alone() {
        // Found by the translate_stream fuzz target: an upstream that ended before its
        // first event gave an Anthropic client `message_delta` with no `message_start`.
        let error = json!({"type": "error", "error": {"type": "api_error", "message": "m"}});
        for before in ["", "event: ping\ndata: {\"type\":\"ping\"}\n\n"] {
            let mut r = StreamReader::default();
            r.feed(before.as_bytes());
            assert_eq!(
                r.cut_frames(&error),
                "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"m\"}}\n\n"
            );
        }
    }
}
