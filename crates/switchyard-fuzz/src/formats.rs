//! The client-side decoders, the upstream stream readers, and the six translators, driven
//! with arbitrary bytes, each with the invariants the gateway relies on.

use crate::events;
use crate::input::{self, Input, CREDENTIAL};
use crate::json::{assert_hidden, assert_usage_counts, strings_contain};
use serde_json::Value;
use switchyard_core::format::{translate, Format, MAX_COMPLETION_TOKENS};
use switchyard_core::llm::RawObject;
use switchyard_core::redact::{self, Scrubbed, Secrets, StreamScrubber};
use switchyard_gateway::error::{render, StreamError};

/// The creation time the translators are given (unix seconds).
const NOW_S: u64 = 1_767_225_600;

/// The upstream model name the request translators are given.
const MODEL: &str = "fuzz-model";

fn secrets() -> Secrets {
    Secrets::new([CREDENTIAL.as_bytes()])
}

fn context(what: &str, client: Format, upstream: Format) -> String {
    format!("{what} {client:?} client over {upstream:?} upstream")
}

/// Input: format, body. The body's members read the same way quickly
/// (`switchyard_core::rawscan`) and by `serde_json` alone, to the error. A decoded
/// request has a model and a bounded `max_tokens`, and its body passes through to the
/// same format as a JSON object naming the new model.
pub fn decode(data: &[u8]) {
    let mut input = Input::new(data);
    let format = input::format(input.byte());
    let input_body = input.rest();
    assert_eq!(
        RawObject::parse(input_body),
        RawObject::parse_with_serde_json(input_body),
        "the quick reading of the members differs from serde_json's"
    );
    let Ok(request) = format.decode(input_body) else {
        return;
    };
    assert!(
        !request.model.is_empty(),
        "{format:?}: decoded an empty model"
    );
    assert!(
        request
            .max_tokens
            .is_none_or(|m| (1..=MAX_COMPLETION_TOKENS).contains(&m)),
        "{format:?}: max_tokens {:?} out of bounds",
        request.max_tokens
    );
    let body = request.body.with_model(MODEL);
    // JSON that serde reads as a value (not, say, a number beyond f64) stays so.
    if serde_json::from_slice::<Value>(input_body).is_err() {
        return;
    }
    let v: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{format:?}: the pass-through body is not JSON ({e})"));
    assert_eq!(
        v["model"], MODEL,
        "{format:?}: the pass-through body's model"
    );
}

/// Input: client format, upstream format, output limit choice, body. A request the client
/// format decodes translates, when it does, into one JSON object asking for the upstream
/// model, with `stream` as the client asked.
pub fn request(data: &[u8]) {
    let mut input = Input::new(data);
    let client = input::format(input.byte());
    let upstream = input::format(input.byte());
    let limit = match input.byte() {
        0 => None,
        n => Some(u64::from(n) * 1000),
    };
    let input_body = input.rest();
    let Ok(request) = client.decode(input_body) else {
        return;
    };
    // JSON that serde reads as a value (not, say, a number beyond f64) stays so; the
    // rest passes on as the client wrote it.
    if serde_json::from_slice::<Value>(input_body).is_err() {
        return;
    }
    let what = context("request", client, upstream);
    let Ok(body) = request.upstream_body(upstream, MODEL, limit) else {
        return;
    };
    let v: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{what}: the translated body is not JSON ({e})"));
    assert!(
        v.is_object(),
        "{what}: the translated body is not an object"
    );
    assert_eq!(v["model"], MODEL, "{what}: model");
    if request.stream {
        assert_eq!(v["stream"], true, "{what}: stream");
    } else {
        assert_ne!(v["stream"], true, "{what}: stream");
    }
    let bound = match upstream {
        Format::OpenAiChat => ["max_tokens", "max_completion_tokens"].as_slice(),
        Format::AnthropicMessages => &["max_tokens"],
        Format::Responses => &["max_output_tokens"],
    };
    for max in bound.iter().filter_map(|k| v.get(*k)) {
        let n = max
            .as_u64()
            .unwrap_or_else(|| panic!("{what}: output bound {max}"));
        assert!(n >= 1, "{what}: output bound 0");
    }
}

/// Input: client format, upstream format, credential position and form, body. An upstream
/// answer that is a JSON object is relayed as the gateway does it (redacted when it is an
/// error, then translated): a translation is one JSON object with non-negative usage, and
/// an error answer shows no credential.
pub fn response(data: &[u8]) {
    let mut input = Input::new(data);
    let client = input::format(input.byte());
    let upstream = input::format(input.byte());
    let (at, form) = (input.byte(), input.byte());
    let body = input::splice_credential(input.rest(), at, form);
    if !serde_json::from_slice::<Value>(&body).is_ok_and(|v| v.is_object()) {
        return;
    }
    let scrubbed = redact::scrub_body(&body, &secrets());
    let is_error = scrubbed.is_some();
    let relayed = scrubbed.unwrap_or(body);
    let what = context("answer", client, upstream);
    let Ok(out) = translate::response(client, upstream, &relayed, NOW_S) else {
        return;
    };
    let v: Value = serde_json::from_slice(&out)
        .unwrap_or_else(|e| panic!("{what}: the translated answer is not JSON ({e})"));
    assert!(
        v.is_object(),
        "{what}: the translated answer is not an object"
    );
    if client != upstream {
        assert_usage_counts(&v, &what);
    }
    if is_error {
        assert_hidden(&out, CREDENTIAL, &what);
    }
}

/// Input: client format, upstream format, status choice, credential position and form,
/// body. An upstream error body is relayed as the gateway does it (redacted, then
/// translated): never with the credential, and, translated, always as one JSON object
/// with an error.
pub fn error(data: &[u8]) {
    let mut input = Input::new(data);
    let client = input::format(input.byte());
    let upstream = input::format(input.byte());
    let status = 400 + u16::from(input.byte()) % 200;
    let (at, form) = (input.byte(), input.byte());
    let body = input::splice_credential(input.rest(), at, form);
    let what = context(&format!("error {status}"), client, upstream);
    let redacted = redact::redact(&body, &secrets());
    let out = translate::error(client, upstream, status, &redacted);
    assert_hidden(&out, CREDENTIAL, &what);
    if client != upstream {
        let v: Value = serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("{what}: the translated error is not JSON ({e})"));
        assert!(
            v.get("error").is_some_and(Value::is_object),
            "{what}: the translated error has no error object: {v}"
        );
    }
}

/// Input: client format, upstream format, chunking, credential position and form, stream.
/// An upstream stream goes through the gateway's stack — the scrubber, the translator,
/// the client format's reader, and the error frame of a stream that ends before its
/// answer did — and the client receives a well-formed stream of its format ending in exactly one
/// terminal event ([`events`]), whose error events show no credential.
pub fn stream(data: &[u8]) {
    let mut input = Input::new(data);
    let client = input::format(input.byte());
    let upstream = input::format(input.byte());
    let plan = input.byte();
    let (at, form) = (input.byte(), input.byte());
    let body = input::splice_credential(input.rest(), at, form);
    let what = context("stream", client, upstream);
    let out = relay(client, upstream, &input::chunks(&body, plan));
    let events = if client == upstream {
        // Relayed as it came: only its error events are the gateway's business.
        events::parse_lenient(&out)
    } else {
        let events = events::parse(&out, &what);
        events::assert_well_formed(client, &events, &what);
        events
    };
    // What the upstream said outside its error events is relayed as it is (a model name,
    // generated text) and may end up in an error event the gateway writes; what it said
    // in an error event must never reach the client.
    let shown_elsewhere = events::parse_lenient(&body)
        .iter()
        .filter(|e| !e.is_error())
        .any(|e| {
            e.data.contains(CREDENTIAL)
                || e.json
                    .as_ref()
                    .is_some_and(|j| strings_contain(j, CREDENTIAL))
        });
    if !shown_elsewhere {
        for e in events.iter().filter(|e| e.is_error()) {
            assert_hidden(e.data.as_bytes(), CREDENTIAL, &what);
        }
    }
    let whole = relay(client, upstream, &[&body]);
    assert!(
        out == whole,
        "{what}: the client's stream depends on how the upstream's was chunked:\n{}\n---\n{}",
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&whole)
    );
}

/// What a client receives for an upstream stream fed in `chunks`.
fn relay(client: Format, upstream: Format, chunks: &[&[u8]]) -> Vec<u8> {
    let mut scrubber = StreamScrubber::new(secrets());
    let mut translator = translate::Stream::new(client, upstream, NOW_S);
    let mut reader = client.stream_reader();
    let mut out = Vec::new();
    let mut pass = |bytes: &[u8], out: &mut Vec<u8>, translator: &mut Option<translate::Stream>| {
        let start = out.len();
        match translator {
            Some(t) => t.feed(bytes, out),
            None => out.extend_from_slice(bytes),
        }
        reader.feed(&out[start..]);
    };
    for chunk in chunks {
        if translator
            .as_ref()
            .is_some_and(translate::Stream::ended_by_error)
        {
            break;
        }
        match scrubber.feed(chunk) {
            Scrubbed::AsIs => pass(chunk, &mut out, &mut translator),
            Scrubbed::Bytes(b) => pass(&b, &mut out, &mut translator),
        }
    }
    if !translator
        .as_ref()
        .is_some_and(translate::Stream::ended_by_error)
    {
        let held = scrubber.finish();
        pass(&held, &mut out, &mut translator);
        if let Some(t) = translator.as_mut() {
            let start = out.len();
            t.finish(&mut out);
            let tail = out[start..].to_vec();
            reader.feed(&tail);
        }
    }
    if !reader.complete() && !reader.errored() {
        // The metering layer's end of a stream cut short, as it renders it.
        let frame = render::stream_frame(StreamError::Truncated, client, &mut reader);
        out.extend_from_slice(&frame);
    }
    out
}

/// Input: format, chunking, stream. A stream reader's findings (usage, text, whether the
/// answer completed or errored) do not depend on how the stream was chunked.
pub fn reader(data: &[u8]) {
    let mut input = Input::new(data);
    let format = input::format(input.byte());
    let plan = input.byte();
    let body = input.rest();
    let read = |chunks: &[&[u8]]| {
        let mut r = format.stream_reader();
        let mut progress = switchyard_core::stream::Progress::default();
        for c in chunks {
            progress.merge(&r.feed(c));
        }
        (progress, r.usage(), r.complete(), r.errored())
    };
    assert_eq!(
        read(&input::chunks(body, plan)),
        read(&[body]),
        "{format:?}: the reader's findings depend on the chunking"
    );
}
