//! What the HTTP/1 connection writes: response heads, body framing and the `Date`
//! field, encoded into the connection's output buffer. No I/O and no clock reads: the
//! caller passes the second the `Date` is for.

use crate::heads::{push_decimal, push_number, Late, LateValue};
use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http::{HeaderMap, StatusCode};
use std::cell::RefCell;
use std::time::{Duration, UNIX_EPOCH};

/// How a response's body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BodyFraming {
    /// No body may follow (a `HEAD` request, 1xx, 204, 304): `length` is still said
    /// when it is known, as the `GET` would have said it.
    None {
        length: Option<u64>,
    },
    Length(u64),
    Chunked,
    /// Until the connection closes (an HTTP/1.0 client with a body of unknown length).
    UntilClose,
}

/// What the status and the request allow and the body says: how to frame it.
pub(super) fn framing(
    status: StatusCode,
    head_request: bool,
    exact: Option<u64>,
    said_length: Option<u64>,
    http11: bool,
) -> BodyFraming {
    let length = exact.or(said_length);
    if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return BodyFraming::None { length: None };
    }
    if head_request {
        return BodyFraming::None { length };
    }
    match length {
        Some(n) => BodyFraming::Length(n),
        None if http11 => BodyFraming::Chunked,
        None => BodyFraming::UntilClose,
    }
}

/// The connection fields a response head carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Persistence {
    /// HTTP/1.1 kept alive: nothing to say.
    Default,
    /// HTTP/1.0 kept alive: `connection: keep-alive`.
    KeepAlive,
    Close,
}

/// Appends a response head: the status line, the handler's fields (less the ones that
/// frame the message, which are the connection's to write) and its late ones, `date`
/// unless given, the framing and the connection field.
pub(super) fn head(
    out: &mut Vec<u8>,
    status: StatusCode,
    (headers, late): (&HeaderMap, Option<&dyn Late>),
    framing: BodyFraming,
    persistence: Persistence,
    second: u64,
) {
    status_line(out, status);
    // Names are compared as they are walked, not looked up: a lookup hashes the name.
    let mut dated = false;
    for (name, value) in headers {
        if name == CONNECTION || name == TRANSFER_ENCODING || name == CONTENT_LENGTH {
            continue;
        }
        dated |= name == DATE;
        field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    if let Some(late) = late {
        late.each(&mut |name, value| match value {
            LateValue::Made(v) => field(out, name.as_str().as_bytes(), v.as_bytes()),
            LateValue::Number(n) => {
                out.extend_from_slice(name.as_str().as_bytes());
                out.extend_from_slice(b": ");
                push_number(out, n);
                out.extend_from_slice(b"\r\n");
            }
        });
    }
    if !dated {
        with_date(second, |date| field(out, b"date", date));
    }
    match framing {
        BodyFraming::Length(n) | BodyFraming::None { length: Some(n) } => {
            out.extend_from_slice(b"content-length: ");
            push_decimal(out, n);
            out.extend_from_slice(b"\r\n");
        }
        BodyFraming::Chunked => field(out, b"transfer-encoding", b"chunked"),
        BodyFraming::None { length: None } | BodyFraming::UntilClose => {}
    }
    match persistence {
        Persistence::Default => {}
        Persistence::KeepAlive => field(out, b"connection", b"keep-alive"),
        Persistence::Close => field(out, b"connection", b"close"),
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends the whole answer to a request that could not be read: `status`, no body,
/// and the connection closes.
pub(super) fn refusal(out: &mut Vec<u8>, status: StatusCode, second: u64) {
    head(
        out,
        status,
        (&HeaderMap::new(), None),
        BodyFraming::Length(0),
        Persistence::Close,
        second,
    );
}

/// `100 Continue`, sent when a client that asked for it is about to be read.
pub(super) const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Appends a chunk's size line (the data follows, then [`CHUNK_END`]).
pub(super) fn chunk_start(out: &mut Vec<u8>, len: usize) {
    let mut digits = [0u8; 16];
    let mut n = len;
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdef"[n % 16];
        n /= 16;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
    out.extend_from_slice(b"\r\n");
}

/// What ends a chunk's data.
pub(super) const CHUNK_END: &[u8] = b"\r\n";

/// The last chunk of a chunked body, with no trailer fields.
pub(super) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

fn status_line(out: &mut Vec<u8>, status: StatusCode) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// An IMF-fixdate is 29 bytes: `Sun, 06 Nov 1994 08:49:37 GMT`.
const DATE_LEN: usize = 29;

thread_local! {
    /// The `Date` value of the second it was last formatted for, per I/O thread.
    static DATE_CACHE: RefCell<(u64, [u8; DATE_LEN])> =
        const { RefCell::new((u64::MAX, [0; DATE_LEN])) };
}

/// Calls `f` with the `Date` value of `second` (Unix time), formatted once per second
/// per thread.
fn with_date(second: u64, f: impl FnOnce(&[u8])) {
    DATE_CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        if cache.0 != second {
            let text = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(second));
            if let Ok(bytes) = <[u8; DATE_LEN]>::try_from(text.as_bytes()) {
                *cache = (second, bytes);
            }
        }
        f(&cache.1);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn text(out: &[u8]) -> String {
        String::from_utf8(out.to_vec()).unwrap()
    }

    /// Late fields: one made, three numbers.
    #[derive(Debug)]
    struct Share;

    impl Late for Share {
        fn each(&self, field: &mut dyn FnMut(&http::HeaderName, LateValue<'_>)) {
            let pool = HeaderValue::from_static("p1");
            field(
                &http::HeaderName::from_static("x-pool"),
                LateValue::Made(&pool),
            );
            field(
                &http::HeaderName::from_static("x-whole"),
                LateValue::Number(1200.0),
            );
            field(
                &http::HeaderName::from_static("x-part"),
                LateValue::Number(0.25),
            );
            field(
                &http::HeaderName::from_static("x-none"),
                LateValue::Number(-0.0),
            );
        }
    }

    #[test]
    fn a_head_says_status_fields_date_length_and_close() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.append("x-two", HeaderValue::from_static("a"));
        headers.append("x-two", HeaderValue::from_static("b"));
        // The handler's own framing fields are not written: the connection frames.
        headers.insert("content-length", HeaderValue::from_static("999"));
        headers.insert("connection", HeaderValue::from_static("upgrade"));
        headers.insert("transfer-encoding", HeaderValue::from_static("gzip"));
        let mut out = Vec::new();
        head(
            &mut out,
            StatusCode::OK,
            (&headers, Some(&Share)),
            BodyFraming::Length(1234),
            Persistence::Close,
            784_111_777,
        );
        assert_eq!(
            text(&out),
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-two: a\r\nx-two: b\r\n\
             x-pool: p1\r\nx-whole: 1200\r\nx-part: 0.2500\r\nx-none: 0\r\n\
             date: Sun, 06 Nov 1994 08:49:37 GMT\r\ncontent-length: 1234\r\n\
             connection: close\r\n\r\n"
        );
    }

    #[test]
    fn chunked_keep_alive_and_a_given_date() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "date",
            HeaderValue::from_static("Mon, 07 Dec 2026 00:00:00 GMT"),
        );
        let mut out = Vec::new();
        head(
            &mut out,
            StatusCode::from_u16(299).unwrap(),
            (&headers, None),
            BodyFraming::Chunked,
            Persistence::KeepAlive,
            0,
        );
        assert_eq!(
            text(&out),
            "HTTP/1.1 299 Unknown\r\ndate: Mon, 07 Dec 2026 00:00:00 GMT\r\n\
             transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
        );
    }

    #[test]
    fn the_date_follows_the_second() {
        let mut out = Vec::new();
        refusal(&mut out, StatusCode::BAD_REQUEST, 0);
        refusal(&mut out, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, 1);
        assert_eq!(
            text(&out),
            "HTTP/1.1 400 Bad Request\r\ndate: Thu, 01 Jan 1970 00:00:00 GMT\r\n\
             content-length: 0\r\nconnection: close\r\n\r\n\
             HTTP/1.1 431 Request Header Fields Too Large\r\n\
             date: Thu, 01 Jan 1970 00:00:01 GMT\r\ncontent-length: 0\r\n\
             connection: close\r\n\r\n"
        );
    }

    #[test]
    fn framing_by_status_method_size_and_version() {
        let ok = StatusCode::OK;
        assert_eq!(
            framing(ok, false, Some(5), None, true),
            BodyFraming::Length(5)
        );
        assert_eq!(
            framing(ok, false, None, Some(7), true),
            BodyFraming::Length(7)
        );
        assert_eq!(
            framing(ok, false, Some(5), Some(7), true),
            BodyFraming::Length(5)
        );
        assert_eq!(framing(ok, false, None, None, true), BodyFraming::Chunked);
        assert_eq!(
            framing(ok, false, None, None, false),
            BodyFraming::UntilClose
        );
        assert_eq!(
            framing(ok, true, Some(5), None, true),
            BodyFraming::None { length: Some(5) }
        );
        for status in [
            StatusCode::NO_CONTENT,
            StatusCode::NOT_MODIFIED,
            StatusCode::CONTINUE,
        ] {
            assert_eq!(
                framing(status, false, Some(0), None, true),
                BodyFraming::None { length: None }
            );
        }
    }

    #[test]
    fn chunk_sizes_are_lower_hex() {
        let mut out = Vec::new();
        for len in [0, 9, 10, 255, 4096, usize::MAX] {
            chunk_start(&mut out, len);
        }
        assert_eq!(
            text(&out),
            format!("0\r\n9\r\na\r\nff\r\n1000\r\n{:x}\r\n", usize::MAX)
        );
    }
}
