//! Incremental Server-Sent Events parser.
//!
//! The gateway passes upstream stream bytes to the client unchanged, as they arrive; it
//! runs this parser beside the passthrough only to observe events (usage, errors, and in
//! later stages the stream watchdogs). The parser accepts arbitrary chunk boundaries —
//! an event may be split across many network reads, or many events may arrive in one —
//! and its memory is bounded: an event larger than [`MAX_EVENT_BYTES`] is skipped whole.
//!
//! The parser only reads the chunks it is fed: it cannot change or delay what is relayed,
//! and it does no I/O.

/// Largest single event the parser buffers. Real LLM stream events are a few hundred
/// bytes; 1 MiB leaves room for large tool-call arguments while bounding memory per
/// stream.
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// One complete event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

impl SseEvent {
    /// True for the OpenAI end-of-stream sentinel `data: [DONE]`.
    pub fn is_done(&self) -> bool {
        self.data == "[DONE]"
    }

    /// Whether the event says the answer is complete: the `[DONE]` sentinel, or a chunk
    /// whose choice carries a `finish_reason` (a string, not `null`). A stream that ends
    /// without either was cut short.
    pub fn ends_answer(&self) -> bool {
        if self.is_done() {
            return true;
        }
        let needle = "\"finish_reason\"";
        let mut rest = self.data.as_str();
        while let Some(at) = rest.find(needle) {
            rest = &rest[at + needle.len()..];
            let value = rest.trim_start().strip_prefix(':').map(str::trim_start);
            if value.is_some_and(|v| v.starts_with('"')) {
                return true;
            }
        }
        false
    }
}

/// Incremental parser state.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    /// How far `buf` has been searched for an event boundary, so a large event arriving
    /// in many small chunks is scanned once, not once per chunk.
    scanned: usize,
    /// Set while skipping the rest of an oversized event.
    skipping: bool,
    /// Count of oversized events skipped.
    pub skipped: u64,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a chunk of bytes and calls `on_event` for every event it completes.
    pub fn feed(&mut self, chunk: &[u8], mut on_event: impl FnMut(SseEvent)) {
        self.buf.extend_from_slice(chunk);
        let mut start = 0;
        // A boundary may straddle the previous chunk's end: back up by its length - 1.
        let mut from = self.scanned.saturating_sub(2);
        while let Some((end, next)) = find_event_end(&self.buf[start..], from) {
            if self.skipping {
                self.skipping = false;
            } else if let Some(ev) = parse_event(&self.buf[start..start + end]) {
                on_event(ev);
            }
            start += next;
            from = 0;
        }
        self.buf.drain(..start);
        self.scanned = self.buf.len();
        if self.buf.len() > MAX_EVENT_BYTES {
            self.buf.clear();
            self.scanned = 0;
            if !self.skipping {
                self.skipped += 1;
            }
            self.skipping = true;
        }
    }
}

/// Finds the first blank line at or after `from`. Returns (end of the event's text,
/// start of what follows).
pub(crate) fn find_event_end(b: &[u8], from: usize) -> Option<(usize, usize)> {
    let mut i = from;
    while i < b.len() {
        if b[i] == b'\n' {
            if b.get(i + 1) == Some(&b'\n') {
                return Some((i, i + 2));
            }
            if b.get(i + 1) == Some(&b'\r') && b.get(i + 2) == Some(&b'\n') {
                return Some((i, i + 3));
            }
        }
        i += 1;
    }
    None
}

pub(crate) fn parse_event(raw: &[u8]) -> Option<SseEvent> {
    let text = String::from_utf8_lossy(raw);
    let mut ev = SseEvent::default();
    let mut has_data = false;
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if has_data {
                    ev.data.push('\n');
                }
                ev.data.push_str(value);
                has_data = true;
            }
            "event" => ev.event = Some(value.to_owned()),
            _ => {}
        }
    }
    (has_data || ev.event.is_some()).then_some(ev)
}

/// `bytes` cut at each of `cuts` (taken modulo its length + 1, in order): the chunks of
/// the chunking property tests.
#[cfg(test)]
pub(crate) fn split_at(bytes: &[u8], cuts: Vec<usize>) -> Vec<&[u8]> {
    let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut pieces = Vec::with_capacity(cuts.len() + 1);
    let mut last = 0;
    for c in cuts {
        pieces.push(&bytes[last..c]);
        last = c;
    }
    pieces.push(&bytes[last..]);
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_an_answer_is_the_done_sentinel_or_a_finish_reason() {
        let ev = |data: &str| SseEvent {
            event: None,
            data: data.to_owned(),
        };
        for (data, ends) in [
            ("[DONE]", true),
            (r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#, true),
            (
                r#"{"choices":[{"delta":{},"finish_reason" : "length"}]}"#,
                true,
            ),
            (
                r#"{"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}"#,
                false,
            ),
            (
                r#"{"choices":[{"finish_reason":null},{"finish_reason":"tool_calls"}]}"#,
                true,
            ),
            (
                r#"{"choices":[{"delta":{"content":"finish_reason"}}]}"#,
                false,
            ),
            ("", false),
        ] {
            assert_eq!(ev(data).ends_answer(), ends, "{data}");
        }
    }
    use proptest::prelude::*;

    fn collect(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, |e| out.push(e));
        }
        out
    }

    fn data(s: &str) -> SseEvent {
        SseEvent {
            event: None,
            data: s.into(),
        }
    }

    #[test]
    fn parses_events_split_across_chunks() {
        let got = collect(&[b"data: {\"a\"", b":1}\n", b"\ndata: [DONE]\n\n"]);
        assert_eq!(got, vec![data("{\"a\":1}"), data("[DONE]")]);
        assert!(got[1].is_done());
    }

    #[test]
    fn handles_crlf_comments_event_names_and_multiline_data() {
        let got = collect(&[b": ping\r\n\r\nevent: message_start\r\ndata: x\r\ndata: y\r\n\r\n"]);
        assert_eq!(
            got,
            vec![SseEvent {
                event: Some("message_start".into()),
                data: "x\ny".into()
            }]
        );
    }

    #[test]
    fn oversized_event_is_skipped_and_parser_recovers() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        let big = vec![b'x'; MAX_EVENT_BYTES + 10];
        p.feed(b"data: ", |e| out.push(e));
        p.feed(&big, |e| out.push(e));
        p.feed(b"more\n\ndata: ok\n\n", |e| out.push(e));
        assert_eq!(out, vec![data("ok")]);
        assert_eq!(p.skipped, 1);
    }

    proptest! {
        #[test]
        fn chunking_does_not_change_the_events(
            payloads in proptest::collection::vec("[a-z0-9{}\":,]{0,40}", 1..8),
            cuts in proptest::collection::vec(0usize..400, 0..10),
        ) {
            let mut stream = Vec::new();
            for p in &payloads {
                stream.extend_from_slice(format!("data: {p}\n\n").as_bytes());
            }
            let whole = collect(&[&stream]);
            prop_assert_eq!(collect(&split_at(&stream, cuts)), whole.clone());
            prop_assert_eq!(whole.len(), payloads.len());
        }
    }
}
