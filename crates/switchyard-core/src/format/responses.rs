//! OpenAI Responses (`POST /v1/responses`): decoding a client body, and reading an
//! upstream event stream.
//!
//! Like the other decoders, it reads only what the pipeline needs and keeps every member
//! raw for the passthrough: `model` (a non-empty string), `input` (required: a non-empty
//! string or a non-empty array of items), `stream`, and `max_output_tokens` as the output
//! bound (the bounds of [`MAX_COMPLETION_TOKENS`](super::MAX_COMPLETION_TOKENS)). The
//! prompt's size is the raw text of `input`, `instructions` and `tools` (Codex's tool
//! definitions are a large part of every prompt). `previous_response_id` is refused:
//! Switchyard stores no responses, and Codex sends the whole conversation every turn.
//!
//! The stream reader reads beside the relay, from each event's `type`: the usage of the
//! `response` of `response.completed`, `response.incomplete` and `response.failed`;
//! generated text from the `delta` of `response.output_text.delta`,
//! `response.reasoning_summary_text.delta`, `response.reasoning_text.delta`,
//! `response.refusal.delta`, `response.function_call_arguments.delta` and
//! `response.custom_tool_call_input.delta` (Codex's freeform `apply_patch` streams whole
//! patches that way);
//! completeness from `response.completed` or `response.incomplete`; an error from
//! `response.failed` or an `error` event. It keeps the id, model and `created_at` of
//! `response.created` and the last `sequence_number`, so a cut can end the stream with a
//! `response.failed` event that continues it.

use super::openai_chat::{is_non_empty_array, max_tokens_of, model_of, stream_of};
use super::translate::map::Tokens;
use super::{DecodeError, Text};
use crate::llm::{RawObject, Request};
use crate::sse::SseParser;
use crate::stream::Progress;
use crate::usage::Usage;
use serde::Deserialize;
use serde_json::{json, Value};

/// A request body for a Codex subscription backend, which refuses `max_output_tokens`
/// (a translated request carries the client's bound there) and answers only streams:
/// that member left out and, for a client that did not ask for a stream, `stream: true`
/// (the gateway then reads the answer off the stream, [`final_response`]). A streamed
/// body without the bound is returned unchanged, unparsed.
pub fn for_codex_backend(body: Vec<u8>, stream: bool) -> Vec<u8> {
    const MEMBER: &[u8] = b"\"max_output_tokens\"";
    if stream && !body.windows(MEMBER.len()).any(|w| w == MEMBER) {
        return body;
    }
    let Ok(object) = RawObject::parse(&body) else {
        return body;
    };
    let Some(model) = object
        .member("model")
        .and_then(|raw| serde_json::from_str::<String>(raw).ok())
    else {
        return body;
    };
    let mut overrides = vec![("max_output_tokens", None)];
    if !stream {
        overrides.push(("stream", Some("true".to_owned())));
    }
    let mut out = object.rewritten(&model, &overrides);
    if !stream && object.member("stream").is_none() {
        out.pop();
        out.extend_from_slice(b",\"stream\":true}");
    }
    out
}

/// The response a Responses event stream ended with — the `response` of its last
/// `response.completed`, `response.incomplete` or `response.failed` event — as JSON;
/// `None` when the stream has none (it was cut).
pub fn final_response(stream: &[u8]) -> Option<Vec<u8>> {
    let mut parser = SseParser::default();
    let mut last = None;
    parser.feed(stream, |event| {
        let Ok(v) = serde_json::from_str::<Value>(&event.data) else {
            return;
        };
        let done = matches!(
            v.get("type").and_then(Value::as_str),
            Some("response.completed" | "response.incomplete" | "response.failed")
        );
        if done {
            last = v.get("response").map(Value::to_string);
        }
    });
    last.map(String::into_bytes)
}

/// The id prefix of the `reasoning` items a translated route makes from a chat
/// upstream's reasoning: they carry no `encrypted_content`, so a real Responses upstream
/// (which keeps nothing with `store: false`) refuses them when a client sends them back.
pub const TRANSLATED_REASONING: &str = "rs_switchyard_";

/// The raw `input` of a pass-through request without the reasoning items a translated
/// route made: without `encrypted_content`, and with no id (Codex drops item ids when it
/// sends history back) or one of [`TRANSLATED_REASONING`]. A reasoning item with an
/// upstream's own id is kept (a stored response's item). `None` when there is nothing
/// to take out; the common case costs two substring searches, no parse.
pub fn strip_translated_reasoning(input: &str) -> Option<String> {
    if !input.contains(TRANSLATED_REASONING) && !input.contains("\"encrypted_content\":null") {
        return None;
    }
    let Value::Array(items) = serde_json::from_str::<Value>(input).ok()? else {
        return None;
    };
    let kept: Vec<Value> = items
        .into_iter()
        .filter(|item| {
            let unsealed = item.get("encrypted_content").is_none_or(Value::is_null);
            let ours = item
                .get("id")
                .and_then(Value::as_str)
                .is_none_or(|id| id.starts_with(TRANSLATED_REASONING));
            let translated =
                item.get("type").and_then(Value::as_str) == Some("reasoning") && unsealed && ours;
            !translated
        })
        .collect();
    Some(Value::Array(kept).to_string())
}

/// Decodes and validates a Responses body.
pub fn decode(bytes: &[u8]) -> Result<Request, DecodeError> {
    let body = RawObject::parse(bytes)?;
    let model = model_of(&body)?;
    if body
        .member("previous_response_id")
        .is_some_and(|raw| raw != "null")
    {
        return Err(DecodeError::PreviousResponse);
    }
    if !body.member("input").is_some_and(is_input) {
        return Err(DecodeError::MissingInput);
    }
    let prompt_len = ["input", "instructions", "tools"]
        .iter()
        .filter_map(|m| body.member(m))
        .map(str::len)
        .fold(0, usize::saturating_add);
    let stream = stream_of(&body)?;
    let max_tokens = max_tokens_of(&body, "max_output_tokens")?;
    Ok(Request {
        format: super::Format::Responses,
        model,
        stream,
        max_tokens,
        prompt_len,
        body,
    })
}

/// Whether raw JSON text (known to be valid) is a non-empty string or array.
fn is_input(raw: &str) -> bool {
    is_non_empty_array(raw) || (raw.starts_with('"') && raw != "\"\"")
}

/// What a reader needs of an event: its type, sequence number, delta and item type.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    sequence_number: Option<u64>,
    #[serde(default, borrow)]
    delta: Text<'a>,
    #[serde(default, borrow)]
    item: Option<Item<'a>>,
}

/// The item of `response.output_item.added` and `.done`.
#[derive(Deserialize)]
struct Item<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Text<'a>,
}

/// What an output item is, as the watchdogs see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ItemKind {
    Message,
    /// `function_call`, `custom_tool_call` and the other tool calls.
    Tool,
    Reasoning,
}

impl ItemKind {
    fn of(kind: &str) -> Self {
        match kind {
            "message" => Self::Message,
            "reasoning" => Self::Reasoning,
            _ => Self::Tool,
        }
    }
}

/// What a cut stream's `response.failed` repeats of `response.created`.
#[derive(Debug, Default, Deserialize)]
struct Ident {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    created_at: Option<serde_json::Number>,
}

#[derive(Deserialize)]
struct Created {
    response: Ident,
}

/// What a reader needs of the `response` of an event that ends the answer.
#[derive(Deserialize)]
struct Ended {
    response: EndedResponse,
}

#[derive(Deserialize)]
struct EndedResponse {
    usage: Option<ResponsesUsage>,
}

/// A Responses `usage`, whose `input_tokens` count the cached ones.
#[derive(Deserialize)]
struct ResponsesUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

/// The `response.usage` of an event's data. Read by its place, not as the text's last
/// `"usage"` member: the response's `metadata` (the client's) may follow it and hold one.
fn response_usage(data: &str) -> Option<Usage> {
    let usage = serde_json::from_str::<Ended>(data).ok()?.response.usage?;
    Some(Usage {
        prompt_tokens: usage.input_tokens,
        completion_tokens: usage.output_tokens,
    })
}

/// Reads a Responses event stream: usage, generated text, completeness, errors, and
/// what a cut repeats; see the module docs.
#[derive(Debug, Default)]
pub struct StreamReader {
    parser: SseParser,
    usage: Option<Usage>,
    complete: bool,
    /// The first `response.failed` or `error` event's data.
    error: Option<String>,
    ident: Ident,
    /// The sequence number of the next event.
    next_sequence: u64,
    /// The output item added and not yet done, and its kind.
    open: Option<ItemKind>,
}

impl StreamReader {
    /// Reads a relayed chunk: what it carried.
    pub fn feed(&mut self, chunk: &[u8]) -> Progress {
        let mut progress = Progress::default();
        let Self {
            parser,
            usage,
            complete,
            error,
            ident,
            next_sequence,
            open,
        } = self;
        parser.feed(chunk, |event| {
            let Ok(parsed) = serde_json::from_str::<Event<'_>>(&event.data) else {
                return;
            };
            if let Some(n) = parsed.sequence_number {
                *next_sequence = n.saturating_add(1);
            }
            let p = &mut progress;
            let delta = parsed.delta.as_str();
            match parsed.kind.as_ref() {
                "response.created" => {
                    if let Ok(created) = serde_json::from_str::<Created>(&event.data) {
                        *ident = created.response;
                    }
                    p.heartbeat();
                }
                "response.output_item.added" => {
                    let kind = parsed
                        .item
                        .as_ref()
                        .map_or(ItemKind::Message, |i| ItemKind::of(i.kind.as_str()));
                    match kind {
                        ItemKind::Tool => p.tool(true, ""),
                        ItemKind::Reasoning => p.reasoning(""),
                        ItemKind::Message => p.heartbeat(),
                    }
                    *open = Some(kind);
                }
                "response.output_item.done" => {
                    *open = None;
                    p.heartbeat();
                }
                "response.output_text.delta" | "response.refusal.delta" => p.text(delta),
                "response.reasoning_summary_text.delta"
                | "response.reasoning_text.delta"
                | "response.reasoning_summary_part.added" => p.reasoning(delta),
                "response.function_call_arguments.delta"
                | "response.custom_tool_call_input.delta" => p.tool(false, delta),
                "response.completed" | "response.incomplete" => *complete = true,
                "response.failed" | "error" => {
                    error.get_or_insert_with(|| super::error_event_text(&event.data));
                }
                _ => p.heartbeat(),
            }
            if matches!(
                parsed.kind.as_ref(),
                "response.completed" | "response.incomplete" | "response.failed"
            ) {
                if let Some(u) = response_usage(&event.data) {
                    usage.get_or_insert_with(Usage::default).merge(u);
                }
            }
        });
        progress.tool_open = *open == Some(ItemKind::Tool);
        progress.reasoning_open = *open == Some(ItemKind::Reasoning);
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

    /// A `response.failed` event continuing the stream's sequence, for the stream's
    /// response (id, model and `created_at` of its `response.created`), with the code
    /// and message of `error` (an OpenAI error body) and the usage read so far.
    pub fn cut_frames(&mut self, error: &Value) -> String {
        let usage = self.usage.map(|u| {
            Tokens {
                input: u.prompt_tokens,
                output: u.completion_tokens,
                ..Tokens::default()
            }
            .responses()
        });
        let created_at = self
            .ident
            .created_at
            .clone()
            .map_or(json!(0), Value::Number);
        let mut out = String::new();
        let mut response = json!({
            "id": self.ident.id,
            "object": "response",
            "created_at": created_at,
            "status": "in_progress",
            "model": self.ident.model,
            "output": [],
        });
        // A client (the OpenAI SDK) wants the response created before it can fail.
        if self.next_sequence == 0 {
            let created = json!({"type": "response.created", "sequence_number": 0,
                "response": response});
            out.push_str(&format!("event: response.created\ndata: {created}\n\n"));
            self.next_sequence = 1;
        }
        response["status"] = json!("failed");
        response["error"] = json!({
            "code": error.pointer("/error/code").cloned().unwrap_or(Value::Null),
            "message": error.pointer("/error/message").cloned().unwrap_or(Value::Null),
        });
        response["usage"] = usage.unwrap_or(Value::Null);
        let failed = json!({
            "type": "response.failed",
            "sequence_number": self.next_sequence,
            "response": response,
        });
        out.push_str(&format!("event: response.failed\ndata: {failed}\n\n"));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_codex_backend_body_has_no_output_bound_and_always_streams() {
        let body = br#"{"model":"m","input":"hi","max_output_tokens":100,"stream":true}"#.to_vec();
        assert_eq!(
            for_codex_backend(body, true),
            br#"{"model":"m","input":"hi","stream":true}"#.to_vec()
        );
        let plain = br#"{"model":"m","input":"max_output_tokens","stream":true}"#.to_vec();
        assert_eq!(for_codex_backend(plain.clone(), true), plain);
        assert_eq!(
            for_codex_backend(
                br#"{"model":"m","input":"hi","stream":false}"#.to_vec(),
                false
            ),
            br#"{"model":"m","input":"hi","stream":true}"#.to_vec()
        );
        assert_eq!(
            for_codex_backend(
                br#"{"model":"m","input":"hi","max_output_tokens":9}"#.to_vec(),
                false
            ),
            br#"{"model":"m","input":"hi","stream":true}"#.to_vec()
        );
    }

    #[test]
    fn the_final_response_is_read_off_the_stream() {
        let stream = concat!(
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"status\":\"in_progress\"}}\n\n",
            "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"status\":\"completed\",\"output\":[]}}\n\n",
        );
        assert_eq!(
            final_response(stream.as_bytes()).as_deref(),
            Some(&br#"{"id":"r","status":"completed","output":[]}"#[..])
        );
        let cut =
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{}}\n\n";
        assert_eq!(final_response(cut.as_bytes()), None);
    }

    #[test]
    fn reasoning_items_a_translated_route_made_are_left_out_of_a_pass_through() {
        assert_eq!(strip_translated_reasoning(r#"[{"type":"message"}]"#), None);
        let input = r#"[{"type":"message","role":"user","content":"hi"},{"type":"reasoning","id":"rs_switchyard_0","summary":[]},{"type":"reasoning","id":"rs_abc","summary":[],"encrypted_content":"gAAA"},{"type":"message","role":"assistant","content":"rs_switchyard_ in text"}]"#;
        assert_eq!(
            strip_translated_reasoning(input).as_deref(),
            Some(
                r#"[{"type":"message","role":"user","content":"hi"},{"type":"reasoning","id":"rs_abc","summary":[],"encrypted_content":"gAAA"},{"type":"message","role":"assistant","content":"rs_switchyard_ in text"}]"#
            )
        );
        assert_eq!(
            strip_translated_reasoning(r#""rs_switchyard_ as a string""#),
            None
        );
        // Codex sends history back without item ids.
        let codex = r#"[{"type":"reasoning","summary":[{"type":"summary_text","text":"t"}],"encrypted_content":null},{"type":"reasoning","id":"rs_9","summary":[],"encrypted_content":null},{"type":"reasoning","summary":[],"encrypted_content":"gAAA"}]"#;
        assert_eq!(
            strip_translated_reasoning(codex).as_deref(),
            Some(
                r#"[{"type":"reasoning","id":"rs_9","summary":[],"encrypted_content":null},{"type":"reasoning","summary":[],"encrypted_content":"gAAA"}]"#
            )
        );
    }
    use crate::format::{Format, MAX_COMPLETION_TOKENS};

    #[test]
    fn decodes_the_members_the_pipeline_reads() {
        let r = decode(
            br#"{"model":"openai/gpt-5","instructions":"Be brief.","input":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search"}],"max_output_tokens":2048,"stream":true,"previous_response_id":null}"#,
        )
        .unwrap();
        assert_eq!(r.format, Format::Responses);
        assert_eq!(r.model, "openai/gpt-5");
        assert!(r.stream);
        assert_eq!(r.max_tokens, Some(2048));
        assert_eq!(
            r.prompt_len,
            r#"[{"role":"user","content":"hi"}]"#.len()
                + r#""Be brief.""#.len()
                + r#"[{"type":"web_search"}]"#.len()
        );
        let text = decode(br#"{"model":"a/b","input":"hi"}"#).unwrap();
        assert_eq!(text.prompt_len, 4);
        assert!(!text.stream);
        assert_eq!(text.max_tokens, None);
        assert_eq!(
            String::from_utf8(text.body.with_model("up")).unwrap(),
            r#"{"model":"up","input":"hi"}"#
        );
    }

    #[test]
    fn refuses_bad_shapes_naming_the_member() {
        let cases: [(&[u8], DecodeError); 13] = [
            (br#"{"input":"hi"}"#, DecodeError::MissingModel),
            (br#"{"model":"","input":"hi"}"#, DecodeError::MissingModel),
            (br#"{"model":"a/b"}"#, DecodeError::MissingInput),
            (br#"{"model":"a/b","input":""}"#, DecodeError::MissingInput),
            (br#"{"model":"a/b","input":[ ]}"#, DecodeError::MissingInput),
            (
                br#"{"model":"a/b","input":null}"#,
                DecodeError::MissingInput,
            ),
            (
                br#"{"model":"a/b","input":{"role":"user","content":"hi"}}"#,
                DecodeError::MissingInput,
            ),
            (
                br#"{"model":"a/b","input":"hi","previous_response_id":"resp_1"}"#,
                DecodeError::PreviousResponse,
            ),
            (
                br#"{"model":"a/b","previous_response_id":"resp_1"}"#,
                DecodeError::PreviousResponse,
            ),
            (
                br#"{"model":"a/b","input":"hi","stream":"yes"}"#,
                DecodeError::InvalidStream,
            ),
            (
                br#"{"model":"a/b","input":"hi","max_output_tokens":0}"#,
                DecodeError::InvalidMaxTokens("max_output_tokens"),
            ),
            (
                br#"{"model":"a/b","input":"hi","max_output_tokens":1048577}"#,
                DecodeError::MaxTokensTooLarge("max_output_tokens"),
            ),
            (b"[]", DecodeError::NotAnObject),
        ];
        for (body, want) in cases {
            assert_eq!(decode(body), Err(want), "{}", String::from_utf8_lossy(body));
        }
        let largest = format!(
            r#"{{"model":"a/b","input":"hi","max_output_tokens":{MAX_COMPLETION_TOKENS}}}"#
        );
        assert_eq!(
            decode(largest.as_bytes()).map(|r| r.max_tokens),
            Ok(Some(MAX_COMPLETION_TOKENS))
        );
        assert!(matches!(decode(b"{"), Err(DecodeError::InvalidJson(_))));
    }

    #[test]
    fn the_new_errors_name_their_member_and_say_what_to_do() {
        assert_eq!(DecodeError::MissingInput.param(), Some("input"));
        assert_eq!(
            DecodeError::MissingInput.to_string(),
            "`input` is required and must be a non-empty string or array"
        );
        assert_eq!(
            DecodeError::PreviousResponse.param(),
            Some("previous_response_id")
        );
        assert_eq!(
            DecodeError::PreviousResponse.to_string(),
            "`previous_response_id` is not supported: Switchyard does not store responses; send the whole conversation in `input` (as Codex does)"
        );
        assert_eq!(
            DecodeError::MaxTokensTooLarge("max_output_tokens").param(),
            Some("max_output_tokens")
        );
    }

    const CODEX_FIRST_TURN: &str =
        include_str!("../../tests/golden/responses/codex_first_turn.json");
    const CODEX_TOOL_TURN: &str = include_str!("../../tests/golden/responses/codex_tool_turn.json");

    #[test]
    fn codex_requests_decode() {
        for body in [CODEX_FIRST_TURN, CODEX_TOOL_TURN] {
            let r = decode(body.as_bytes()).unwrap();
            let value: Value = serde_json::from_str(body).unwrap();
            let raw_len = |name: &str| r.body.member(name).map_or(0, str::len);
            assert_eq!(r.format, Format::Responses);
            assert_eq!(r.model, "demo");
            assert!(r.stream);
            assert_eq!(r.max_tokens, None);
            assert_eq!(r.prompt_len, raw_len("input") + raw_len("tools"));
            assert_eq!(
                serde_json::from_slice::<Value>(&r.body.with_model("demo")).unwrap(),
                value
            );
        }
    }

    /// An OpenAI Responses stream: a text item and a function call, with the members
    /// OpenAI adds (`obfuscation`, the whole response configuration).
    const STREAM: &str = include_str!("../../tests/golden/responses/stream.sse");

    #[test]
    fn reads_usage_text_and_the_end() {
        let cut = STREAM.find("event: response.completed").unwrap();
        let mut r = StreamReader::default();
        assert_eq!(
            r.feed(&STREAM.as_bytes()[..cut]).chars,
            "Hi there".len() + r#"{"city":"Paris"}"#.len()
        );
        assert_eq!(r.usage(), None);
        assert!(!r.complete());
        assert_eq!(r.feed(&STREAM.as_bytes()[cut..]).chars, 0);
        assert!(r.complete());
        assert!(!r.errored());
        assert_eq!(
            r.usage(),
            Some(Usage {
                prompt_tokens: 1200,
                completion_tokens: 31
            })
        );
        let mut bytewise = StreamReader::default();
        let mut generated = Progress::default();
        for b in STREAM.as_bytes().chunks(1) {
            generated.merge(&bytewise.feed(b));
        }
        assert_eq!(generated.chars, 24);
        assert_eq!(bytewise.usage(), r.usage());
    }

    #[test]
    fn the_usage_is_that_of_the_response_wherever_it_stands() {
        let completed = frame(
            r#"{"type":"response.completed","sequence_number":4,"response":{"id":"r","status":"completed","usage":{"input_tokens":130,"input_tokens_details":{"cached_tokens":100,"cache_write_tokens":0},"output_tokens":4,"total_tokens":134},"metadata":{"usage":{"input_tokens":1,"output_tokens":1}}}}"#,
        );
        let mut r = StreamReader::default();
        r.feed(completed.as_bytes());
        assert_eq!(
            r.usage(),
            Some(Usage {
                prompt_tokens: 130,
                completion_tokens: 4
            })
        );
        let without = frame(
            r#"{"type":"response.completed","sequence_number":4,"response":{"id":"r","status":"completed","usage":null}}"#,
        );
        let mut w = StreamReader::default();
        w.feed(without.as_bytes());
        assert!(w.complete());
        assert_eq!(w.usage(), None);
        let usage_elsewhere = frame(
            r#"{"type":"response.output_item.done","sequence_number":3,"output_index":0,"item":{"type":"message"},"usage":{"input_tokens":9,"output_tokens":9}}"#,
        );
        let mut e = StreamReader::default();
        e.feed(usage_elsewhere.as_bytes());
        assert_eq!(e.usage(), None);
    }

    #[test]
    fn the_generic_usage_reader_finds_the_usage_of_a_completed_event() {
        let event = br#"{"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"the \"usage\" word"}]}],"usage":{"input_tokens":130,"input_tokens_details":{"cached_tokens":100,"cache_write_tokens":0},"output_tokens":4,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":134},"user":null,"metadata":{}}}"#;
        assert_eq!(
            Usage::from_json_bytes(event),
            Some(Usage {
                prompt_tokens: 130,
                completion_tokens: 4
            })
        );
    }

    fn frame(data: &str) -> String {
        let kind: Event = serde_json::from_str(data).unwrap();
        format!("event: {}\ndata: {data}\n\n", kind.kind)
    }

    #[test]
    fn incomplete_and_failed_responses_and_error_events_are_seen() {
        let incomplete = frame(
            r#"{"type":"response.incomplete","sequence_number":3,"response":{"id":"r","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":5,"output_tokens":16}}}"#,
        );
        let mut r = StreamReader::default();
        r.feed(incomplete.as_bytes());
        assert!(r.complete());
        assert!(!r.errored());
        assert_eq!(
            r.usage(),
            Some(Usage {
                prompt_tokens: 5,
                completion_tokens: 16
            })
        );
        let failed = frame(
            r#"{"type":"response.failed","sequence_number":2,"response":{"id":"r","status":"failed","error":{"code":"server_error","message":"boom"},"usage":null}}"#,
        );
        let mut f = StreamReader::default();
        f.feed(failed.as_bytes());
        assert!(f.errored());
        assert!(!f.complete());
        assert_eq!(f.usage(), None);
        let error = frame(
            r#"{"type":"error","sequence_number":0,"code":"rate_limit_exceeded","message":"slow down","param":null}"#,
        );
        let mut e = StreamReader::default();
        e.feed(error.as_bytes());
        assert!(e.errored());
        let mut quoted = StreamReader::default();
        quoted.feed(
            frame(r#"{"type":"response.output_text.delta","sequence_number":1,"item_id":"m","output_index":0,"content_index":0,"delta":"an \"error\" and a \\ \u00e9"}"#)
                .as_bytes(),
        );
        assert!(!quoted.errored());
        assert!(!quoted.complete());
    }

    #[test]
    fn each_event_is_classified_for_the_watchdogs() {
        let cases: [(&str, Progress); 8] = [
            (
                r#"{"type":"response.output_text.delta","delta":"a\"b\u00e9 "}"#,
                Progress {
                    output: 1,
                    text_bytes: 6,
                    chars: 5,
                    ..Progress::default()
                },
            ),
            (
                r#"{"type":"response.output_text.delta","delta":""}"#,
                Progress {
                    heartbeats: 1,
                    ..Progress::default()
                },
            ),
            (
                r#"{"type":"response.reasoning_summary_text.delta","delta":"hm"}"#,
                Progress {
                    reasoning: 1,
                    chars: 2,
                    ..Progress::default()
                },
            ),
            (
                r#"{"type":"response.output_item.added","item":{"type":"function_call"}}"#,
                Progress {
                    output: 1,
                    tool_open: true,
                    ..Progress::default()
                },
            ),
            (
                r#"{"type":"response.output_item.added","item":{"type":"reasoning"}}"#,
                Progress {
                    heartbeats: 1,
                    reasoning_open: true,
                    ..Progress::default()
                },
            ),
            (
                r#"{"type":"response.function_call_arguments.delta","delta":"{}"}"#,
                Progress {
                    output: 1,
                    chars: 2,
                    ..Progress::default()
                },
            ),
            (
                r#"{"type":"response.in_progress"}"#,
                Progress {
                    heartbeats: 1,
                    ..Progress::default()
                },
            ),
            (
                r#"{"type":"response.output_text.delta","delta":{"odd":1}}"#,
                Progress {
                    heartbeats: 1,
                    ..Progress::default()
                },
            ),
        ];
        for (data, want) in cases {
            let mut r = StreamReader::default();
            assert_eq!(r.feed(frame(data).as_bytes()), want, "{data}");
        }
        let mut r = StreamReader::default();
        r.feed(
            frame(r#"{"type":"response.output_item.added","item":{"type":"custom_tool_call"}}"#)
                .as_bytes(),
        );
        let done = r.feed(
            frame(r#"{"type":"response.output_item.done","item":{"type":"custom_tool_call"}}"#)
                .as_bytes(),
        );
        assert!(!done.tool_open);
    }

    #[test]
    fn a_cut_fails_the_response_continuing_the_sequence() {
        let head = STREAM.find("event: response.output_text.done").unwrap();
        let mut r = StreamReader::default();
        r.feed(&STREAM.as_bytes()[..head]);
        let error = json!({"error": {"message": "quota exhausted", "type": "quota_error", "code": "quota_exceeded", "param": null}});
        assert_eq!(
            r.cut_frames(&error),
            "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":6,\"response\":{\"id\":\"resp_68c1\",\"object\":\"response\",\"created_at\":1767225600,\"status\":\"failed\",\"model\":\"gpt-5-2025-08-07\",\"output\":[],\"error\":{\"code\":\"quota_exceeded\",\"message\":\"quota exhausted\"},\"usage\":null}}\n\n"
        );
        let mut whole = StreamReader::default();
        whole.feed(STREAM.as_bytes());
        assert_eq!(
            whole.cut_frames(&json!({"error": {"message": "m"}})),
            "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":15,\"response\":{\"id\":\"resp_68c1\",\"object\":\"response\",\"created_at\":1767225600,\"status\":\"failed\",\"model\":\"gpt-5-2025-08-07\",\"output\":[],\"error\":{\"code\":null,\"message\":\"m\"},\"usage\":{\"input_tokens\":1200,\"input_tokens_details\":{\"cached_tokens\":0,\"cache_write_tokens\":0},\"output_tokens\":31,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":1231}}}\n\n"
        );
    }

    #[test]
    fn a_stream_cut_before_any_event_creates_then_fails_an_anonymous_response() {
        let mut r = StreamReader::default();
        assert_eq!(
            r.cut_frames(&json!({"error": {}})),
            "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"\",\"object\":\"response\",\"created_at\":0,\"status\":\"in_progress\",\"model\":\"\",\"output\":[]}}\n\n\
             event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":1,\"response\":{\"id\":\"\",\"object\":\"response\",\"created_at\":0,\"status\":\"failed\",\"model\":\"\",\"output\":[],\"error\":{\"code\":null,\"message\":null},\"usage\":null}}\n\n"
        );
    }
}
