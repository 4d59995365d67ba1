//! What a well-formed event stream of each client format is, as the official SDKs read
//! it: every event's data is a JSON object (chat's `[DONE]` aside), usage counts are
//! non-negative integers, and the stream ends in exactly one terminal event with nothing
//! after it:
//! - chat completions: `[DONE]` last, at most one error object, right before it or
//!   ending the stream itself;
//! - Anthropic Messages: `message_start` first (an `error` may come before it and then
//!   ends the stream), content blocks opened, filled and closed in order, one
//!   `message_stop` last or an `error` that ends the stream (optionally followed by
//!   `message_stop`); the SDKs raise on a `message_delta` or a block before
//!   `message_start`, and on a delta for a block that is not open;
//! - Responses: `response.created` first, sequence numbers increasing, and exactly one
//!   of `response.completed`, `response.incomplete` or `response.failed`, last.

use crate::json::assert_usage_counts;
use serde_json::Value;
use switchyard_core::format::Format;
use switchyard_core::sse::SseParser;

/// One event of a client stream.
#[derive(Debug)]
pub struct Event {
    pub name: Option<String>,
    pub data: String,
    /// `data` read as JSON; `None` for `[DONE]`.
    pub json: Option<Value>,
}

impl Event {
    /// Whether the event carries an error, in any of the formats.
    pub fn is_error(&self) -> bool {
        matches!(self.name.as_deref(), Some("error" | "response.failed"))
            || self.json.as_ref().is_some_and(|j| {
                j.get("error").is_some_and(|e| !e.is_null()) || j["type"] == "error"
            })
    }
}

/// The events of `stream`, checked to be whole (nothing left after the last blank line)
/// with JSON data.
pub fn parse(stream: &[u8], context: &str) -> Vec<Event> {
    let mut events = Vec::new();
    let mut parser = SseParser::new();
    parser.feed(stream, |e| events.push(e));
    let mut probe = SseParser::new();
    let mut trailing = 0;
    probe.feed(stream, |_| {});
    probe.feed(b"\n\n", |_| trailing += 1);
    assert_eq!(
        trailing,
        0,
        "{context}: the stream ends inside an event: {}",
        String::from_utf8_lossy(stream)
    );
    events
        .into_iter()
        .map(|e| {
            let json = if e.data == "[DONE]" {
                None
            } else {
                let v: Value = serde_json::from_str(&e.data).unwrap_or_else(|err| {
                    panic!("{context}: event data is not JSON ({err}): {:?}", e.data)
                });
                assert!(
                    v.is_object(),
                    "{context}: event data is not an object: {}",
                    e.data
                );
                assert_usage_counts(&v, context);
                Some(v)
            };
            Event {
                name: e.event,
                data: e.data,
                json,
            }
        })
        .collect()
}

/// The events of `stream` as a client reads them, whatever their data.
pub fn parse_lenient(stream: &[u8]) -> Vec<Event> {
    let mut events = Vec::new();
    let mut parser = SseParser::new();
    parser.feed(stream, |e| events.push(e));
    parser.feed(b"\n\n", |e| events.push(e));
    events
        .into_iter()
        .map(|e| Event {
            json: serde_json::from_str(&e.data).ok(),
            name: e.event,
            data: e.data,
        })
        .collect()
}

/// Panics unless `events` are a well-formed, ended stream of `format` (module docs).
pub fn assert_well_formed(format: Format, events: &[Event], context: &str) {
    let dump = || {
        events
            .iter()
            .map(|e| format!("{}: {}", e.name.as_deref().unwrap_or("-"), e.data))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(!events.is_empty(), "{context}: the stream has no event");
    let result = match format {
        Format::OpenAiChat => chat(events),
        Format::AnthropicMessages => anthropic(events),
        Format::Responses => responses(events),
    };
    if let Err(why) = result {
        panic!(
            "{context}: not a well-formed {format:?} stream: {why}\n{}",
            dump()
        );
    }
}

fn chat(events: &[Event]) -> Result<(), String> {
    let done = events.iter().filter(|e| e.json.is_none()).count();
    let errors: Vec<usize> = (0..events.len())
        .filter(|&i| events[i].is_error())
        .collect();
    let last = events.len() - 1;
    if done > 1 {
        return Err(format!("{done} [DONE] events"));
    }
    if done == 1 && events[last].json.is_some() {
        return Err("events after [DONE]".into());
    }
    if errors.len() > 1 {
        return Err(format!("{} error events", errors.len()));
    }
    if let Some(&at) = errors.first() {
        let ends = if done == 1 { last - 1 } else { last };
        if at != ends {
            return Err("events after the error".into());
        }
    }
    if done == 0 && errors.is_empty() {
        return Err("no [DONE] and no error at the end".into());
    }
    Ok(())
}

fn anthropic(events: &[Event]) -> Result<(), String> {
    let mut started = false;
    let mut open: Option<u64> = None;
    let mut next_index = 0u64;
    let mut ended = false;
    let mut errored = false;
    for (i, e) in events.iter().enumerate() {
        let json = e.json.as_ref().ok_or("[DONE] in an Anthropic stream")?;
        let name = e.name.as_deref().ok_or(format!("event {i} has no name"))?;
        if json["type"] != name {
            return Err(format!(
                "event {i} is named {name} but its type is {}",
                json["type"]
            ));
        }
        if ended {
            return Err(format!("{name} after message_stop"));
        }
        if errored && name != "message_stop" {
            return Err(format!("{name} after the error"));
        }
        match name {
            "ping" => {}
            "error" => errored = true,
            "message_start" if started => return Err("a second message_start".into()),
            "message_start" => started = true,
            _ if !started => return Err(format!("{name} before message_start")),
            "content_block_start" => {
                if open.is_some() {
                    return Err("a block starts while another is open".into());
                }
                let index = json["index"]
                    .as_u64()
                    .ok_or("a block start without an index")?;
                if index != next_index {
                    return Err(format!("block {index} starts, {next_index} expected"));
                }
                open = Some(index);
                next_index += 1;
            }
            "content_block_delta" | "content_block_stop" => {
                if open.is_none() || json["index"].as_u64() != open {
                    return Err(format!(
                        "{name} for block {} which is not open",
                        json["index"]
                    ));
                }
                if name == "content_block_stop" {
                    open = None;
                }
            }
            "message_delta" if open.is_some() => {
                return Err("message_delta while a block is open".into())
            }
            "message_delta" => {}
            "message_stop" => ended = true,
            other => return Err(format!("unknown event {other}")),
        }
    }
    if ended || errored {
        Ok(())
    } else {
        Err("no message_stop and no error at the end".into())
    }
}

const RESPONSES_TERMINALS: [&str; 3] = [
    "response.completed",
    "response.incomplete",
    "response.failed",
];

fn responses(events: &[Event]) -> Result<(), String> {
    let mut sequence: Option<u64> = None;
    for (i, e) in events.iter().enumerate() {
        let json = e.json.as_ref().ok_or("[DONE] in a Responses stream")?;
        let name = e.name.as_deref().ok_or(format!("event {i} has no name"))?;
        if json["type"] != name {
            return Err(format!(
                "event {i} is named {name} but its type is {}",
                json["type"]
            ));
        }
        if i == 0 && name != "response.created" {
            return Err(format!("the first event is {name}"));
        }
        if let Some(n) = json["sequence_number"].as_u64() {
            if sequence.is_some_and(|s| n <= s) {
                return Err(format!("sequence number {n} after {sequence:?}"));
            }
            sequence = Some(n);
        }
        let terminal = RESPONSES_TERMINALS.contains(&name);
        if terminal != (i == events.len() - 1) {
            return Err(format!("{name} at {i} of {}", events.len()));
        }
    }
    Ok(())
}
