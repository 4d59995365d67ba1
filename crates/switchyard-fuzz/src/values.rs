//! Header parsers, settings values, the configuration file loader, the client
//! connection's state machine and the HTTP/1 request framing, driven with arbitrary input.

use crate::input::Input;
use serde_json::Value;
use std::collections::BTreeMap;
use switchyard_core::client_conn::{ClientConn, Expiry, Limits, Phase};
use switchyard_core::http1::{self, AnswerFraming, ChunkError, Chunked, Framing};
use switchyard_core::quota::signals;
use switchyard_core::resilience::{cooldown, usage_wall::UnifiedHeaders};
use switchyard_core::settings::{self, Layers, Source, DEFS};

/// A `now` late enough that an HTTP-date in the past is before it.
const NOW_MS: u64 = 1_767_225_600_000;

/// Input: `name: value` lines. Retry-After, the rate-limit and reset headers and
/// Anthropic's unified headers read them without panicking, whatever the numbers;
/// every reading is a fraction in 0–1, and a Retry-After in seconds is never before
/// now. (An instant is taken as the provider gives it — a Retry-After date or a reset in
/// the past says the wait is over — and its users skip it.)
pub fn headers(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let pairs: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim(), v.trim()))
        .collect();
    for (_, value) in &pairs {
        let at = cooldown::retry_after(value, NOW_MS);
        if value.parse::<u64>().is_ok() {
            assert!(
                at.is_some_and(|at| at >= NOW_MS),
                "Retry-After {value:?} reads as {at:?}, not after now"
            );
        }
        let _ = signals::parse_duration_ms(value);
    }
    for s in signals::parse(&pairs, NOW_MS) {
        assert!(
            (0.0..=1.0).contains(&s.used),
            "a used fraction of {} from {pairs:?}",
            s.used
        );
    }
    let _ = UnifiedHeaders::from_pairs(&pairs);
}

/// Input: a setting choice, a layer choice, and a value (JSON, or text for the
/// environment). A value one layer accepts validates again to itself from its stored
/// form, and resolving the layers never panics: a bad value is reported and its default
/// kept.
pub fn setting(data: &[u8]) {
    let mut input = Input::new(data);
    let def = &DEFS[usize::from(input.byte()) % DEFS.len()];
    let layer = input.byte() % 3;
    let raw = String::from_utf8_lossy(input.rest()).into_owned();
    let mut layers = Layers {
        file: BTreeMap::new(),
        env: BTreeMap::new(),
        database: BTreeMap::new(),
    };
    if layer == 1 {
        layers.env.insert(def.env.to_owned(), raw);
    } else {
        let Ok(value) = serde_json::from_str::<Value>(&raw) else {
            return;
        };
        if let Ok(accepted) = settings::validate(def.key, &value, Source::File) {
            let again = settings::validate(def.key, &accepted.to_json(), Source::Database);
            assert_eq!(
                again.ok(),
                Some(accepted),
                "{}: the stored form of an accepted value",
                def.key
            );
        }
        if layer == 0 {
            layers.file.insert(def.key.to_owned(), value);
        } else {
            layers.database.insert(def.key.to_owned(), value);
        }
    }
    let _ = settings::resolve(&layers);
}

/// Input: a configuration file. Parsing and resolving it never panics; a file that
/// resolves builds a configuration snapshot or a typed error.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(file) = switchyard_gateway::config::FileConfig::parse(text) else {
        return;
    };
    let env = BTreeMap::from([("SWITCHYARD_DATA_DIR".to_owned(), "/nonexistent".to_owned())]);
    let _ = switchyard_gateway::config::resolve(file, &env);
}

/// Input: a sequence of events on one client connection, each a byte (what happens) and
/// a byte (tenths of a second since the last). The connection's state stays consistent
/// with what happened: no deadline while a request is in flight, the head deadline while
/// a head is arriving, the idle one between requests, the drain linger once draining; no
/// deadline further than the longest timeout from now; and bytes trickling in during a
/// head never move its deadline (a client sending a byte at a time cannot hold the
/// connection).
pub fn client_conn(data: &[u8]) {
    let limits = Limits {
        header_read_ms: 10_000,
        keepalive_idle_ms: 60_000,
        drain_linger_ms: 1_000,
    };
    let mut now = 0u64;
    let mut conn = ClientConn::new(now);
    let mut in_flight = 0u32;
    let mut drained = false;
    let mut head_deadline = conn.deadline(&limits).map(|d| d.at_ms);
    for op in data.chunks(2) {
        now += u64::from(op.get(1).copied().unwrap_or(0)) * 100;
        let before = conn.phase();
        match op[0] % 4 {
            0 => conn.bytes_received(now),
            1 => {
                conn.request_started(op[0] & 0x80 != 0, now);
                in_flight += 1;
            }
            2 if in_flight > 0 => {
                conn.request_finished(now);
                in_flight -= 1;
            }
            3 => {
                conn.drain(now);
                drained = true;
            }
            _ => {}
        }
        assert_eq!(conn.is_draining(), drained, "draining");
        let deadline = conn.deadline(&limits);
        let expected = match (conn.phase(), drained) {
            (Phase::Busy, _) => None,
            (_, true) => Some(Expiry::Drained),
            (Phase::Head, false) => Some(Expiry::HeaderRead),
            (Phase::Idle, false) => Some(Expiry::KeepAliveIdle),
        };
        assert_eq!(
            deadline.map(|d| d.expiry),
            expected,
            "after {op:?} at {now}"
        );
        assert_eq!(conn.phase() == Phase::Busy, in_flight > 0, "busy");
        if let Some(d) = deadline {
            assert!(
                d.at_ms <= now + limits.keepalive_idle_ms,
                "deadline {d:?} at {now}"
            );
        }
        if conn.phase() == Phase::Head && !drained {
            let at = deadline.map(|d| d.at_ms);
            if before == Phase::Head {
                assert_eq!(at, head_deadline, "bytes during a head moved its deadline");
            }
            head_deadline = at;
        }
    }
}

/// Longest request head the `http1` check reads.
const HTTP1_MAX_HEAD: usize = 4096;

/// Input: a choice byte (its low four bits the size of the pieces a body is fed in; its
/// high bit: the bytes are an upstream's answer rather than a client's request, and then
/// the next bit: the answer is to a `HEAD`), then the bytes. A head is read or refused,
/// never past the limit, and it says one framing, the one its fields say; a chunked body
/// read in pieces reads the same data, uses the same bytes and fails the same way as read
/// at once, and never points outside what it was given.
pub fn http1(data: &[u8]) {
    let Some((&choice, raw)) = data.split_first() else {
        return;
    };
    if choice & 0x80 != 0 {
        return http1_answer(choice, raw);
    }
    let mut storage = http1::header_storage();
    let Some(head) = read_or_refused(raw, http1::parse_request(raw, &mut storage, HTTP1_MAX_HEAD))
    else {
        return;
    };
    assert!(
        head.len <= raw.len().min(HTTP1_MAX_HEAD),
        "the head ends past its bytes"
    );
    let lengths = head
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("content-length"))
        .count();
    let codings = head
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("transfer-encoding"))
        .count();
    match head.framing {
        Framing::Empty => assert_eq!((lengths, codings), (0, 0)),
        Framing::Length(_) => assert_eq!((lengths, codings), (1, 0)),
        Framing::Chunked => assert_eq!((lengths, codings), (0, 1)),
    }
    assert!(
        head.path().starts_with('/') || head.path() == "*",
        "{}",
        head.path()
    );
    if head.framing == Framing::Chunked {
        same_in_pieces(&raw[head.len..], choice);
    }
}

/// A head read whole, or `None` when it is incomplete (then short of the limit) or
/// refused (then with one of the statuses a refusal is answered with).
fn read_or_refused<T>(raw: &[u8], parsed: Result<Option<T>, http1::HeadError>) -> Option<T> {
    match parsed {
        Ok(Some(head)) => Some(head),
        Ok(None) => {
            assert!(
                raw.len() < HTTP1_MAX_HEAD,
                "an incomplete head past the limit"
            );
            None
        }
        Err(e) => {
            assert!(matches!(e.status(), 400 | 431 | 501 | 505), "{e:?}");
            None
        }
    }
}

/// A chunked `body` reads the same at once and in pieces of the size `choice` says.
fn same_in_pieces(body: &[u8], choice: u8) {
    let whole = dechunk(body, body.len().max(1));
    let pieces = dechunk(body, usize::from(choice % 16) + 1);
    assert_eq!(
        whole,
        pieces,
        "read at once and in pieces of {}",
        choice % 16 + 1
    );
}

/// The answer half of [`http1`].
fn http1_answer(choice: u8, raw: &[u8]) {
    let to_head = choice & 0x40 != 0;
    let mut storage = http1::header_storage();
    let parsed = http1::parse_response(raw, &mut storage, HTTP1_MAX_HEAD, to_head);
    let Some(head) = read_or_refused(raw, parsed) else {
        return;
    };
    assert!(
        head.len <= raw.len().min(HTTP1_MAX_HEAD),
        "the head ends past its bytes"
    );
    let count = |name: &str| {
        head.headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .count()
    };
    let (lengths, codings) = (count("content-length"), count("transfer-encoding"));
    assert!(lengths <= 1 && codings <= 1 && lengths + codings <= 1);
    let bodiless = to_head || head.is_interim() || matches!(head.status, 204 | 304);
    match head.framing {
        AnswerFraming::None => assert!(bodiless),
        AnswerFraming::Length(_) => assert_eq!((bodiless, lengths), (false, 1)),
        AnswerFraming::Chunked => assert_eq!((bodiless, codings), (false, 1)),
        AnswerFraming::UntilClose => {
            assert_eq!((bodiless, lengths, codings), (false, 0, 0));
            assert!(
                !head.keep_alive,
                "a body delimited by the close kept the connection"
            );
        }
    }
    if head.framing == AnswerFraming::Chunked {
        same_in_pieces(&raw[head.len..], choice);
    }
}

/// A chunked body read in pieces of `piece` bytes: its data, the bytes used and whether
/// it ended, or the error.
fn dechunk(body: &[u8], piece: usize) -> Result<(Vec<u8>, usize, bool), ChunkError> {
    let mut reader = Chunked::new(1 << 16);
    let (mut data, mut used) = (Vec::new(), 0);
    while used < body.len() && !reader.is_done() {
        let end = (used + piece).min(body.len());
        let step = reader.step(&body[used..end])?;
        assert!(step.used <= end - used, "used past its input");
        if let Some(r) = step.data {
            assert!(
                r.start <= r.end && r.end == step.used,
                "data outside its step"
            );
            data.extend_from_slice(&body[used + r.start..used + r.end]);
        }
        used += step.used;
        if step.used == 0 {
            assert!(reader.is_done(), "no progress before the end");
        }
    }
    Ok((data, used, reader.is_done()))
}
