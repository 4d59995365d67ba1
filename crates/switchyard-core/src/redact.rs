//! Redacting secrets from upstream text relayed to clients (SPEC G5, G6).
//!
//! An upstream error page or body may echo what it received — a proxy repeating the
//! `Authorization` header, a provider quoting the key it refused. Relayed as it is, that
//! hands the connection's credential to whichever client key made the request. Before
//! upstream error text leaves the gateway, every occurrence of the connection's own
//! credentials ([`Secrets`]) is replaced by [`REDACTED`], and so is anything shaped like
//! a bearer token: the word after `Bearer`, and runs that start like a well-known API key.
//!
//! Error text reaches a client three ways, and each passes through here:
//! - an error body before any stream ([`redact`], on the body as read);
//! - an error event inside a `200` stream, in any of the three upstream formats: every
//!   upstream stream goes through a [`StreamScrubber`] before anything else reads it, so
//!   the pass-through relay and the translators alike only ever see redacted error
//!   events;
//! - a `200` body that carries an error (a failed Responses object, a chat body with an
//!   `error` member): [`scrub_body`].
//!
//! It is given the text and the secrets to hide: it holds no credential of its own, reads
//! none from configuration, and does no I/O.

use crate::sse::{find_event_end, parse_event, MAX_EVENT_BYTES};
use std::sync::Arc;

/// What a redacted secret is replaced with.
pub const REDACTED: &[u8] = b"[REDACTED]";

/// Credentials shorter than this are not searched for, nor is a shorter word after
/// `Bearer` taken for a token: a short "secret" would match ordinary text ("the bearer
/// of bad news"), and no real credential is this short.
const MIN_SECRET_LEN: usize = 8;

/// Shortest run after a key prefix that counts as a key (`sk-` followed by 13 more).
const MIN_KEY_LEN: usize = 16;

/// How API keys of the common providers, JWTs and this gateway's own keys begin.
const KEY_PREFIXES: [&[u8]; 8] = [
    b"sk-", b"sy-", b"sya-", b"eyJ", b"AIza", b"gsk_", b"xai-", b"ghp_",
];

/// Whether `b` can be part of a token (base64, base64url, and the usual separators).
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'+' | b'/' | b'=')
}

/// A connection's credentials as sent upstream, to be hidden from what is relayed back.
/// Built once per connection when the configuration is loaded, shared by its requests;
/// `Debug` shows only how many there are.
#[derive(Clone, Default)]
pub struct Secrets(Arc<[Box<[u8]>]>);

impl Secrets {
    /// The secrets long enough to search for (see [`MIN_SECRET_LEN`]).
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a [u8]>) -> Self {
        Self(
            secrets
                .into_iter()
                .filter(|s| s.len() >= MIN_SECRET_LEN)
                .map(Box::from)
                .collect(),
        )
    }
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} hidden)", self.0.len())
    }
}

/// `body` with every occurrence of each of `secrets` and every bearer-like token
/// replaced by [`REDACTED`].
pub fn redact(body: &[u8], secrets: &Secrets) -> Vec<u8> {
    let mut out = body.to_vec();
    for secret in secrets.0.iter() {
        out = replace_all(&out, secret);
    }
    redact_tokens(&out)
}

/// [`redact`] for text cut short at its end (a body read up to a limit): the run of token
/// bytes at the cut may be the start of a secret, too short to recognise, so it goes too.
pub fn redact_truncated(text: &[u8], secrets: &Secrets) -> Vec<u8> {
    let tail = text.iter().rev().take_while(|b| is_token_byte(**b)).count();
    redact(&text[..text.len() - tail], secrets)
}

/// Whether a JSON text says it is an error: an object (or an array holding one) with an
/// `error` member that is not `null`, a `type` of `error` (Anthropic) or
/// `response.failed` (Responses), an `object` of `error` (vLLM), or a `status` of
/// `failed` (a Responses object). Text without a quoted `"error"` or `failed"` is never
/// parsed: inside a JSON string a quote is escaped, so generated text that merely
/// mentions an error never matches, and an ordinary delta costs one substring search.
fn says_error(json: &[u8]) -> bool {
    if FAILED_QUOTED.find(json).is_none() && !has_error_member(json) {
        return false;
    }
    // An array is read as the objects it holds.
    if json.trim_ascii_start().first() == Some(&b'[') {
        serde_json::from_slice::<Vec<Top>>(json).is_ok_and(|all| all.iter().any(Top::is_error))
    } else {
        serde_json::from_slice::<Top>(json).is_ok_and(|top| top.is_error())
    }
}

/// The members of a JSON object that tell whether it is an error; anything else is
/// skipped unread. Read by hand, not derived: a derived reader refuses an object that
/// names a member twice, and an upstream error event with a duplicated `error` or
/// `status` would then pass unredacted while a client (or a translator), reading the last
/// occurrence, sees the error. Here every occurrence counts.
#[derive(Default)]
struct Top {
    error: bool,
    named_error: bool,
}

impl Top {
    fn is_error(&self) -> bool {
        self.error || self.named_error
    }
}

impl<'de> serde::Deserialize<'de> for Top {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = Top;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
                let mut top = Top::default();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    let names: &[&str] = match key.as_ref() {
                        "type" => &["error", "response.failed"],
                        "object" => &["error"],
                        "status" => &["failed"],
                        "error" => {
                            // `error: null` is no error (every Responses object has one).
                            let value = map.next_value::<Option<serde::de::IgnoredAny>>()?;
                            top.error |= value.is_some();
                            continue;
                        }
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                            continue;
                        }
                    };
                    let value = map.next_value::<serde_json::Value>()?;
                    top.named_error |= value.as_str().is_some_and(|v| names.contains(&v));
                }
                Ok(top)
            }
        }
        d.deserialize_map(Members)
    }
}

/// Whether a quoted `"error"` occurs other than as `"error":null` (every Responses object
/// carries that one: it is not parsed for it).
fn has_error_member(json: &[u8]) -> bool {
    ERROR_MEMBER.find_iter(json).any(|at| {
        let rest = json[at + ERROR_MEMBER.needle().len()..].trim_ascii_start();
        let value = rest.strip_prefix(b":").map(<[u8]>::trim_ascii_start);
        !value.is_some_and(|v| v.starts_with(b"null"))
    })
}

/// Searchers for the words an error is told by, built once: building one costs more than
/// searching an answer with it.
type Finder = std::sync::LazyLock<memchr::memmem::Finder<'static>>;
static FAILED_QUOTED: Finder = Finder::new(|| memchr::memmem::Finder::new(b"failed\""));
static ERROR_MEMBER: Finder = Finder::new(|| memchr::memmem::Finder::new(b"\"error\""));
static ERROR: Finder = Finder::new(|| memchr::memmem::Finder::new(b"error"));
static FAILED: Finder = Finder::new(|| memchr::memmem::Finder::new(b"failed"));

/// Whether one raw event (its text without the blank line) is an error event in any of
/// the upstream formats: an `event: error` or `event: response.failed` (Anthropic,
/// Responses), or data that [`says_error`] (a chat `{"error":…}` chunk).
fn is_error_event(raw: &[u8]) -> bool {
    let Some(event) = parse_event(raw) else {
        return false;
    };
    matches!(event.event.as_deref(), Some("error" | "response.failed"))
        || says_error(event.data.as_bytes())
}

/// A `200` body with its error text redacted, when the body is an error (see
/// [`says_error`]); `None` for an ordinary answer, which is relayed as it is.
pub fn scrub_body(body: &[u8], secrets: &Secrets) -> Option<Vec<u8>> {
    says_error(body).then(|| redact(body, secrets))
}

/// What to relay of a chunk fed to a [`StreamScrubber`].
#[derive(Debug, PartialEq, Eq)]
pub enum Scrubbed {
    /// The chunk as it came: it ends at an event boundary, nothing was held back before
    /// it, and it holds no error event.
    AsIs,
    /// These bytes instead (possibly none): the complete events so far, error events
    /// redacted; an event still incomplete is held until its end arrives.
    Bytes(Vec<u8>),
}

/// Redacts the error events of an upstream event stream, whatever its format and however
/// its bytes are chunked; every other event passes byte for byte. Events are relayed
/// whole: the bytes of an event still arriving are held until its blank line (a client
/// reads no event before that anyway), at most [`MAX_EVENT_BYTES`] of them. An event
/// larger than that goes out in parts, each redacted if the event's start could be an
/// error, with the last [`CARRY`] bytes (or more, up to a byte no token contains) kept
/// back each time so that a secret across two parts is still whole when redacted; so a
/// huge event is neither buffered without bound nor let through unredacted. A pure state
/// machine: no I/O, no clock.
#[derive(Debug)]
pub struct StreamScrubber {
    secrets: Secrets,
    held: Vec<u8>,
    /// How far `held` has been searched for an event boundary.
    scanned: usize,
    /// Inside an event larger than [`MAX_EVENT_BYTES`] whose start has gone out: whether
    /// its parts are redacted.
    oversized: Option<bool>,
}

/// Bytes of an oversized event kept back each time a part of it goes out: longer than
/// any credential or token.
const CARRY: usize = 512;

impl StreamScrubber {
    pub fn new(secrets: Secrets) -> Self {
        Self {
            secrets,
            held: Vec::new(),
            scanned: 0,
            oversized: None,
        }
    }

    /// Reads an upstream chunk; says what to relay in its place.
    pub fn feed(&mut self, chunk: &[u8]) -> Scrubbed {
        let idle = self.held.is_empty() && self.oversized.is_none();
        if idle && ends_an_event(chunk) && !might_hold_error(chunk) {
            return Scrubbed::AsIs;
        }
        self.held.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(self.held.len());
        let mut start = 0;
        let mut from = self.scanned.saturating_sub(2);
        while let Some((end, next)) = find_event_end(&self.held[start..], from) {
            let whole = &self.held[start..start + next];
            // The rest of an oversized event is judged as its start was.
            let redacts = match self.oversized.take() {
                Some(redacts) => redacts,
                None => is_error_event(&self.held[start..start + end]),
            };
            if redacts {
                out.extend_from_slice(&redact(whole, &self.secrets));
            } else {
                out.extend_from_slice(whole);
            }
            start += next;
            from = 0;
        }
        self.held.drain(..start);
        self.scanned = self.held.len();
        if self.held.len() > MAX_EVENT_BYTES {
            out.extend_from_slice(&self.release_part());
        }
        Scrubbed::Bytes(out)
    }

    /// The upstream ended: what is still held (an event without its blank line),
    /// redacted if it could be an error.
    pub fn finish(&mut self) -> Vec<u8> {
        let redacts = match self.oversized.take() {
            Some(redacts) => redacts,
            None => might_hold_error(&self.held),
        };
        let held = std::mem::take(&mut self.held);
        self.scanned = 0;
        if redacts {
            redact(&held, &self.secrets)
        } else {
            held
        }
    }

    /// Sends out the start of an oversized event held, keeping [`CARRY`] bytes or more.
    fn release_part(&mut self) -> Vec<u8> {
        let redacts = match self.oversized {
            Some(redacts) => redacts,
            None => might_hold_error(&self.held),
        };
        self.oversized = Some(redacts);
        let cut = safe_cut(&self.held, self.held.len().saturating_sub(CARRY));
        let part: Vec<u8> = self.held.drain(..cut).collect();
        self.scanned = self.held.len();
        if redacts {
            redact(&part, &self.secrets)
        } else {
            part
        }
    }
}

/// Where to cut `buf` at or before `at` so that no token is cut: after the last byte
/// before `at` that no token contains, looking back at most [`CARRY`] bytes (else at
/// `at`).
fn safe_cut(buf: &[u8], at: usize) -> usize {
    let floor = at.saturating_sub(CARRY);
    (floor..=at)
        .rev()
        .find(|&i| i == 0 || !is_token_byte(buf[i - 1]))
        .unwrap_or(at)
}

/// Whether a chunk ends with an event's blank line.
fn ends_an_event(chunk: &[u8]) -> bool {
    chunk.ends_with(b"\n\n") || chunk.ends_with(b"\n\r\n")
}

/// Whether a chunk could hold (part of) an error event, by the words every error event
/// of the three formats carries; `false` means it certainly holds none.
fn might_hold_error(chunk: &[u8]) -> bool {
    ERROR.find(chunk).is_some() || FAILED.find(chunk).is_some()
}

/// Scrubs a whole upstream stream read at once (a stream collected for a client that
/// asked for none); borrowed when nothing in it needed redacting.
pub fn scrub_stream<'a>(stream: &'a [u8], secrets: &Secrets) -> std::borrow::Cow<'a, [u8]> {
    let mut scrubber = StreamScrubber::new(secrets.clone());
    let mut out = match scrubber.feed(stream) {
        Scrubbed::AsIs => return std::borrow::Cow::Borrowed(stream),
        Scrubbed::Bytes(bytes) => bytes,
    };
    out.extend_from_slice(&scrubber.finish());
    std::borrow::Cow::Owned(out)
}

/// `haystack` with every occurrence of `needle` replaced by [`REDACTED`], whether written
/// as it is or with JSON escapes (see [`escaped_len`]): a client decoding the JSON reads
/// the same secret either way.
fn replace_all(haystack: &[u8], needle: &[u8]) -> Vec<u8> {
    let escapes = memchr::memchr(b'\\', haystack).is_some();
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        let found = if haystack[i..].starts_with(needle) {
            Some(needle.len())
        } else if escapes {
            escaped_len(&haystack[i..], needle)
        } else {
            None
        };
        match found {
            Some(len) => {
                out.extend_from_slice(REDACTED);
                i += len;
            }
            None => {
                out.push(haystack[i]);
                i += 1;
            }
        }
    }
    out
}

/// How many bytes at the start of `text` spell `secret` with some of its characters as
/// JSON escapes — `\uXXXX` for any ASCII character, `\/`, `\\` or `\"` for those
/// three — as JSON writers may emit them (PHP's escapes every `/`); `None` when they do
/// not.
fn escaped_len(text: &[u8], secret: &[u8]) -> Option<usize> {
    let mut at = 0;
    for &want in secret {
        let got = *text.get(at)?;
        if got == want {
            at += 1;
            continue;
        }
        if got != b'\\' {
            return None;
        }
        match *text.get(at + 1)? {
            b'/' | b'\\' | b'"' if text[at + 1] == want => at += 2,
            b'u' => {
                let hex = std::str::from_utf8(text.get(at + 2..at + 6)?).ok()?;
                if want >= 0x80 || u32::from_str_radix(hex, 16).ok()? != u32::from(want) {
                    return None;
                }
                at += 6;
            }
            _ => return None,
        }
    }
    Some(at)
}

/// Whether `b` continues a word: a token starts only where none does.
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_')
}

/// The length of the token run starting at `at`.
fn token_len(text: &[u8], at: usize) -> usize {
    text[at..].iter().take_while(|b| is_token_byte(**b)).count()
}

fn redact_tokens(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let at_boundary = i == 0 || !is_word_byte(text[i - 1]);
        if at_boundary && starts_with_ignore_case(&text[i..], b"bearer") {
            // `Bearer` and its spaces stay; the credential after them goes.
            let mut j = i + b"bearer".len();
            let spaces = text[j..].iter().take_while(|b| **b == b' ').count();
            j += spaces;
            let len = token_len(text, j);
            if spaces > 0 && len >= MIN_SECRET_LEN {
                out.extend_from_slice(&text[i..j]);
                out.extend_from_slice(REDACTED);
                i = j + len;
                continue;
            }
        }
        if at_boundary && KEY_PREFIXES.iter().any(|p| text[i..].starts_with(p)) {
            let len = token_len(text, i);
            if len >= MIN_KEY_LEN {
                out.extend_from_slice(REDACTED);
                i += len;
                continue;
            }
        }
        out.push(text[i]);
        i += 1;
    }
    out
}

fn starts_with_ignore_case(text: &[u8], prefix: &[u8]) -> bool {
    text.len() >= prefix.len() && text[..prefix.len()].eq_ignore_ascii_case(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets(secrets: &[&str]) -> Secrets {
        Secrets::new(secrets.iter().map(|s| s.as_bytes()))
    }

    fn r(body: &str, hidden: &[&str]) -> String {
        String::from_utf8(redact(body.as_bytes(), &secrets(hidden))).unwrap()
    }

    #[test]
    fn an_error_that_names_a_member_twice_is_still_an_error() {
        // Found by the translate_stream fuzz target: serde's derived reader refused the
        // duplicate, so the event passed unredacted, and the translator (reading the last
        // `error`) relayed its message.
        for body in [
            r#"{"error":null,"status":"completed","status":"failed","error":{"message":"k cred-a-secret-1"}}"#,
            r#"{"error":{"message":"k cred-a-secret-1"},"error":{"message":"again"}}"#,
            r#"[{"type":"ping"},{"type":"x","type":"error","error":{"message":"k cred-a-secret-1"}}]"#,
        ] {
            assert!(says_error(body.as_bytes()), "{body}");
            let scrubbed = scrub_body(body.as_bytes(), &secrets(&["cred-a-secret-1"])).unwrap();
            assert!(
                !String::from_utf8(scrubbed)
                    .unwrap()
                    .contains("cred-a-secret-1"),
                "{body}"
            );
        }
        assert!(!says_error(
            br#"{"error":null,"error":null,"status":"completed"}"#
        ));
    }

    #[test]
    fn a_credential_written_with_json_escapes_is_replaced_too() {
        // Found by the translate_error fuzz target: the escaped form passed, and a client
        // decoding the JSON (or a translator re-writing it) read the credential.
        let hidden = ["cred/alpha-1-secret"];
        for written in [
            r"cred\/alpha-1-secret",
            r"\u0063red/alpha-1-secret",
            r"\u0063\u0072\u0065\u0064\u002F\u0061lpha-1-secret",
        ] {
            let body = format!(r#"{{"error":{{"message":"bad key {written}!"}}}}"#);
            assert_eq!(
                r(&body, &hidden),
                r#"{"error":{"message":"bad key [REDACTED]!"}}"#,
                "{written}"
            );
        }
        // Other escapes stay as they were, and a near miss is not a match.
        assert_eq!(
            r(r#"{"m":"a\n\u0063red/alpha-1-secreT"}"#, &hidden),
            r#"{"m":"a\n\u0063red/alpha-1-secreT"}"#
        );
    }

    #[test]
    fn the_connection_credential_is_replaced_wherever_it_appears() {
        assert_eq!(
            r(
                r#"{"error":"bad key cred-alpha-1-secret-value (cred-alpha-1-secret-value)"}"#,
                &["cred-alpha-1-secret-value"]
            ),
            r#"{"error":"bad key [REDACTED] ([REDACTED])"}"#
        );
        // Inside another word too: the credential is never partly shown.
        assert_eq!(
            r(
                "xxcred-alpha-1-secret-valuexx",
                &["cred-alpha-1-secret-value"]
            ),
            "xx[REDACTED]xx"
        );
    }

    #[test]
    fn bearer_tokens_and_key_shaped_runs_are_replaced() {
        let cases = [
            (
                "Authorization: Bearer abc.def-ghi received",
                "Authorization: Bearer [REDACTED] received",
            ),
            (
                "authorization: bearer  t0k3n-value",
                "authorization: bearer  [REDACTED]",
            ),
            (
                r#"{"message":"Incorrect API key provided: sk-proj-abcdefghijklmnop"}"#,
                r#"{"message":"Incorrect API key provided: [REDACTED]"}"#,
            ),
            (
                "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
                "token [REDACTED]",
            ),
            ("key=sy-test-client-key-0001", "key=[REDACTED]"),
        ];
        for (body, want) in cases {
            assert_eq!(r(body, &[]), want, "{body}");
        }
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        for body in [
            r#"{"error":{"message":"model not found","type":"invalid_request_error"}}"#,
            "ask-me-anything is not a key",
            "sk-short",
            "the bearer of bad news",
            "Bearer",
            "",
        ] {
            assert_eq!(r(body, &["short"]), body, "{body}");
        }
    }

    const CRED: &str = "cred-alpha-1-secret-value";

    /// One error event of each upstream format, quoting the credential, a bearer token
    /// and a key-shaped token.
    fn error_events() -> Vec<String> {
        let quote = format!(
            "bad key {CRED}; Authorization: Bearer abcdefgh12345678; sk-proj-abcdefghijklmnop"
        );
        vec![
            format!("event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"{quote}\"}}}}\n\n"),
            format!("data: {{\"error\":{{\"message\":\"{quote}\",\"type\":\"server_error\",\"code\":null}}}}\n\n"),
            format!("event: response.failed\ndata: {{\"type\":\"response.failed\",\"response\":{{\"status\":\"failed\",\"error\":{{\"code\":\"server_error\",\"message\":\"{quote}\"}}}}}}\n\n"),
            format!("event: error\ndata: {{\"type\":\"error\",\"code\":\"bad\",\"message\":\"{quote}\"}}\n\n"),
            // Without an event line, CRLF-framed.
            format!("data: {{\"type\":\"error\",\"error\":{{\"message\":\"{quote}\"}}}}\r\n\r\n"),
        ]
    }

    /// Ordinary events, one of which mentions a key in generated text: answers are not
    /// rewritten.
    const ORDINARY: [&str; 4] = [
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"an error: use sk-proj-abcdefghijklmnop \\\"error\\\"\"}}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"failed\"},\"finish_reason\":null}]}\n\n",
        "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"error\":null}}\n\n",
        ": ping\n\n",
    ];

    fn scrub_chunks(chunks: &[&[u8]]) -> Vec<u8> {
        let mut s = StreamScrubber::new(secrets(&[CRED]));
        let mut out = Vec::new();
        for c in chunks {
            match s.feed(c) {
                Scrubbed::AsIs => out.extend_from_slice(c),
                Scrubbed::Bytes(b) => out.extend_from_slice(&b),
            }
        }
        out.extend_from_slice(&s.finish());
        out
    }

    #[test]
    fn error_events_of_every_format_are_redacted_and_others_pass_byte_for_byte() {
        for event in error_events() {
            let out = String::from_utf8(scrub_chunks(&[event.as_bytes()])).unwrap();
            assert!(!out.contains(CRED), "{out}");
            assert!(!out.contains("abcdefgh12345678"), "{out}");
            assert!(!out.contains("sk-proj"), "{out}");
            assert_eq!(out.matches("[REDACTED]").count(), 3, "{out}");
            assert!(
                out.contains("bad key [REDACTED]; Authorization: Bearer [REDACTED]; [REDACTED]"),
                "{out}"
            );
        }
        for event in ORDINARY {
            let mut s = StreamScrubber::new(secrets(&[CRED]));
            assert_eq!(
                s.feed(event.as_bytes()),
                if event.contains("error") || event.contains("failed") {
                    Scrubbed::Bytes(event.as_bytes().to_vec())
                } else {
                    Scrubbed::AsIs
                },
                "{event}"
            );
            assert_eq!(s.finish(), b"");
        }
    }

    #[test]
    fn an_incomplete_event_is_held_until_its_end_and_released_at_the_finish() {
        let mut s = StreamScrubber::new(secrets(&[CRED]));
        assert_eq!(
            s.feed(b"data: {\"a\":1}\n\ndata: {\"er"),
            Scrubbed::Bytes(b"data: {\"a\":1}\n\n".to_vec())
        );
        assert_eq!(
            s.feed(format!("ror\":{{\"message\":\"{CRED}\"}}}}\n\n").as_bytes()),
            Scrubbed::Bytes(b"data: {\"error\":{\"message\":\"[REDACTED]\"}}\n\n".to_vec())
        );
        assert_eq!(
            s.feed(format!("data: {{\"error\":\"{CRED}").as_bytes()),
            Scrubbed::Bytes(Vec::new())
        );
        assert_eq!(s.finish(), b"data: {\"error\":\"[REDACTED]".to_vec());
    }

    #[test]
    fn an_oversized_event_is_released_in_parts_not_buffered_without_bound() {
        let mut s = StreamScrubber::new(secrets(&[CRED]));
        let big = vec![b'x'; MAX_EVENT_BYTES + 1];
        assert_eq!(s.feed(b"data: "), Scrubbed::Bytes(Vec::new()));
        let Scrubbed::Bytes(out) = s.feed(&big) else {
            panic!("held")
        };
        // All but the carry went out, unchanged: nothing in it could be an error.
        assert_eq!(out.len(), MAX_EVENT_BYTES + 7 - CARRY);
        let Scrubbed::Bytes(rest) = s.feed(b"\n\ndata: ok\n\n") else {
            panic!("held")
        };
        assert_eq!(rest.len(), CARRY + 12);
        assert!(rest.ends_with(b"x\n\ndata: ok\n\n"));
        // Nothing is held any more: a chunk ending at an event boundary goes as it is.
        assert_eq!(s.feed(b"data: ok\n\n"), Scrubbed::AsIs);
    }

    #[test]
    fn the_tail_of_an_oversized_error_event_is_redacted_too() {
        // A proxy echoing a huge request in its error: the credential well past the
        // first part, another across the point where the first part is cut, and a
        // tail that on its own says nothing of an error.
        let filler = "a ".repeat(MAX_EVENT_BYTES / 2 - 8);
        let event = format!(
            "event: error\ndata: {{\"error\":{{\"message\":\"{filler}{CRED} {}{CRED}\"}}}}\n\n",
            "b ".repeat(300_000)
        );
        let bytes = event.as_bytes();
        for step in [1_000, 4_096, 65_536, bytes.len()] {
            let pieces: Vec<&[u8]> = bytes.chunks(step).collect();
            let out = String::from_utf8(scrub_chunks(&pieces)).unwrap();
            assert!(!out.contains(CRED), "chunks of {step}");
            assert_eq!(out.matches("[REDACTED]").count(), 2, "chunks of {step}");
            assert!(out.ends_with("[REDACTED]\"}}\n\n"), "chunks of {step}");
        }
        // A huge ordinary event still passes byte for byte.
        let ordinary = format!("data: {{\"delta\":\"{filler}{filler}{CRED}\"}}\n\n");
        let pieces: Vec<&[u8]> = ordinary.as_bytes().chunks(70_000).collect();
        assert_eq!(scrub_chunks(&pieces), ordinary.as_bytes());
    }

    #[test]
    fn error_shapes_beyond_the_three_formats_are_recognised() {
        let s = secrets(&[CRED]);
        for body in [
            format!("{{\"error\":\"bad key {CRED}\",\"status\":500}}"),
            format!("{{\"type\":7,\"error\":{{\"message\":\"{CRED}\"}}}}"),
            format!("[{{\"error\":{{\"message\":\"{CRED}\"}}}}]"),
            format!("{{\"object\":\"error\",\"message\":\"{CRED}\",\"type\":\"BadRequestError\"}}"),
        ] {
            let scrubbed = scrub_body(body.as_bytes(), &s).map(String::from_utf8);
            assert!(
                scrubbed
                    .as_ref()
                    .is_some_and(|b| b.as_ref().is_ok_and(|b| !b.contains(CRED))),
                "{body}: {scrubbed:?}"
            );
        }
    }

    #[test]
    fn bodies_that_are_errors_are_redacted_and_answers_are_not() {
        let s = secrets(&[CRED]);
        let failed = format!("{{\"id\":\"resp_1\",\"status\":\"failed\",\"error\":{{\"message\":\"bad token {CRED}\"}}}}");
        assert_eq!(
            scrub_body(failed.as_bytes(), &s).map(String::from_utf8),
            Some(Ok("{\"id\":\"resp_1\",\"status\":\"failed\",\"error\":{\"message\":\"bad token [REDACTED]\"}}".to_owned()))
        );
        let chat = format!("{{\"error\":{{\"message\":\"{CRED}\"}}}}");
        assert_eq!(
            scrub_body(chat.as_bytes(), &s),
            Some(b"{\"error\":{\"message\":\"[REDACTED]\"}}".to_vec())
        );
        for answer in [
            "{\"id\":\"resp_1\",\"status\":\"completed\",\"error\":null,\"output\":[]}",
            "{\"choices\":[{\"message\":{\"content\":\"sk-proj-abcdefghijklmnop \\\"error\\\"\"}}]}",
            "{\"type\":\"message\",\"content\":[{\"type\":\"text\",\"text\":\"failed\"}]}",
        ] {
            assert_eq!(scrub_body(answer.as_bytes(), &s), None, "{answer}");
        }
        let stream = format!("event: response.failed\ndata: {{\"type\":\"response.failed\",\"response\":{{\"status\":\"failed\",\"error\":{{\"message\":\"bad token {CRED}\"}}}}}}\n\n");
        let out = String::from_utf8(scrub_stream(stream.as_bytes(), &s).into_owned()).unwrap();
        assert!(
            out.ends_with("\"message\":\"bad token [REDACTED]\"}}}\n\n"),
            "{out}"
        );
    }

    #[test]
    fn text_cut_in_a_secret_loses_the_cut_run() {
        let s = secrets(&[CRED]);
        let body = format!("{{\"error\":\"bad key {CRED}\"}}");
        let cut = &body.as_bytes()[..body.find("secret").unwrap()];
        assert_eq!(redact_truncated(cut, &s), b"{\"error\":\"bad key ".to_vec());
        assert_eq!(
            redact_truncated(b"ends with a space ", &s),
            b"ends with a space ".to_vec()
        );
    }

    #[test]
    fn a_null_error_member_alone_is_not_parsed_for() {
        assert!(!has_error_member(
            b"{\"id\":\"r\",\"error\":null,\"error\" : null}"
        ));
        assert!(has_error_member(b"{\"error\":null,\"x\":{\"error\":{}}}"));
        assert!(has_error_member(b"{\"type\":\"error\"}"));
        assert!(has_error_member(b"{\"error\""));
    }

    #[test]
    fn secrets_debug_shows_no_secret() {
        assert_eq!(
            format!("{:?}", secrets(&[CRED, "short"])),
            "Secrets(1 hidden)"
        );
    }

    use proptest::prelude::*;

    proptest! {
        /// However a stream of ordinary and error events is cut into chunks, the output
        /// is the same, holds no credential, and every ordinary event is in it unchanged.
        #[test]
        fn the_frame_path_redacts_every_error_event_at_any_chunking(
            picks in proptest::collection::vec(0usize..9, 1..12),
            cuts in proptest::collection::vec(0usize..4000, 0..16),
        ) {
            let errors = error_events();
            let events: Vec<String> = picks
                .iter()
                .map(|p| match p.checked_sub(ORDINARY.len()) {
                    None => ORDINARY[*p].to_owned(),
                    Some(e) => errors[e].clone(),
                })
                .collect();
            let stream = events.concat().into_bytes();
            let pieces = crate::sse::split_at(&stream, cuts);
            let whole = scrub_chunks(&[&stream]);
            prop_assert_eq!(&scrub_chunks(&pieces), &whole);
            let text = String::from_utf8(whole).unwrap();
            prop_assert!(!text.contains(CRED));
            prop_assert!(!text.contains("abcdefgh12345678"));
            let mut rest = text.as_str();
            for (event, pick) in events.iter().zip(&picks) {
                if *pick < ORDINARY.len() {
                    let at = rest.find(event.as_str());
                    prop_assert!(at.is_some(), "{} not relayed as is", event);
                    rest = &rest[at.unwrap_or(0) + event.len()..];
                }
            }
        }
    }
}
