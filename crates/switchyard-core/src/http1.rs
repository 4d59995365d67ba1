//! HTTP/1.1 request framing for the gateway's own server on the inference routes (issue
//! 29): what a request head says, and where a chunked body's data is. Pure functions over
//! the bytes received; the server reads, writes and keeps time.
//!
//! The tokens of a head (method, target, version, field names and values) are read by
//! httparse, hyper's parser. What decides where a message ends is here, and it is strict
//! wherever two parsers disagreeing could split one client's bytes into different
//! requests (request smuggling, RFC 9112 §6.3 and §11.2):
//!
//! - `Transfer-Encoding` and `Content-Length` together, a repeated `Content-Length`, one
//!   that is not a plain decimal, and `Transfer-Encoding` in an HTTP/1.0 request are
//!   refused; a transfer coding other than a single `chunked` is refused as not
//!   implemented.
//! - Chunk-size lines, chunk data and trailer lines end in CRLF: a bare LF or CR inside
//!   chunked framing is refused (heads themselves may end lines in a bare LF, as RFC 9112
//!   §2.2 allows and hyper does). Chunk sizes, extensions and trailers are bounded.
//! - Line folding (obs-fold), bytes not allowed in a field, a missing or repeated `Host`
//!   in HTTP/1.1 and a target that is neither origin-form, absolute-form nor `*` for
//!   `OPTIONS` are refused.
//!
//! A refused head is answered with [`HeadError::status`] and the connection closed:
//! after a framing error nothing on the connection can be trusted to start a request.

use std::mem::MaybeUninit;
use std::ops::Range;

/// A header field as read (name and value borrowed from the head).
pub use httparse::Header;

/// Room for the header fields of one head, left uninitialised: filling it would cost
/// more than parsing a typical head.
pub type HeaderStorage<'b> = [MaybeUninit<Header<'b>>; MAX_HEADERS];

/// Storage for [`parse_request`].
pub fn header_storage<'b>() -> HeaderStorage<'b> {
    [const { MaybeUninit::uninit() }; MAX_HEADERS]
}

/// Most header fields read in a request head (hyper's default).
pub const MAX_HEADERS: usize = 100;

/// Longest chunk-size line, extensions included.
pub const MAX_CHUNK_LINE: usize = 4096;

/// Most bytes of trailer fields after the last chunk (they are read and dropped).
pub const MAX_TRAILERS: usize = 16 * 1024;

/// The HTTP version of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

/// How a request's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body: neither `Content-Length` nor `Transfer-Encoding`.
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`, read with [`Chunked`].
    Chunked,
}

/// Why a request head is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("the request head is longer than {0} bytes")]
    TooLarge(usize),
    #[error("the request head has more than {MAX_HEADERS} header fields")]
    TooManyHeaders,
    #[error("the request head is malformed")]
    Malformed,
    #[error("the HTTP version is not supported")]
    Version,
    #[error("the request target must be a path, an absolute URL, or * for OPTIONS")]
    Target,
    #[error("an HTTP/1.1 request needs exactly one Host header")]
    Host,
    #[error("Content-Length must appear once, as a decimal number")]
    ContentLength,
    #[error("Transfer-Encoding and Content-Length cannot both frame a request")]
    Conflict,
    #[error("Transfer-Encoding in an HTTP/1.0 request")]
    TransferEncoding10,
    #[error("only the chunked transfer coding is supported")]
    UnsupportedCoding,
}

impl HeadError {
    /// The status a refused head is answered with.
    pub fn status(self) -> u16 {
        match self {
            Self::TooLarge(_) | Self::TooManyHeaders => 431,
            Self::Version => 505,
            Self::UnsupportedCoding => 501,
            Self::Malformed
            | Self::Target
            | Self::Host
            | Self::ContentLength
            | Self::Conflict
            | Self::TransferEncoding10 => 400,
        }
    }
}

/// A request head read whole.
#[derive(Debug)]
pub struct RequestHead<'b, 'h> {
    /// Bytes of the head, the empty line that ends it included: the body starts here.
    pub len: usize,
    pub method: &'b str,
    /// The target as sent; [`RequestHead::path`] is its origin-form.
    pub target: &'b str,
    pub version: Version,
    pub headers: &'h [Header<'b>],
    pub framing: Framing,
    /// Whether the connection may carry another request after this one.
    pub keep_alive: bool,
    /// `Expect: 100-continue` on a request with a body: the client waits for a
    /// `100 Continue` before sending it.
    pub expect_continue: bool,
}

impl RequestHead<'_, '_> {
    /// The target's path and query: itself in origin-form, what follows the authority
    /// in absolute-form (`/` when nothing does), `*` as is.
    pub fn path(&self) -> &str {
        match self.target.split_once("://") {
            Some((_, rest)) => match rest.find(['/', '?']) {
                Some(i) if rest[i..].starts_with('/') => &rest[i..],
                _ => "/",
            },
            None => self.target,
        }
    }
}

/// Reads a request head from the start of `buf` into `storage`: `Ok(None)` while it is
/// incomplete (and shorter than `max_head`).
pub fn parse_request<'b, 'h>(
    buf: &'b [u8],
    storage: &'h mut [MaybeUninit<Header<'b>>],
    max_head: usize,
) -> Result<Option<RequestHead<'b, 'h>>, HeadError> {
    let window = &buf[..buf.len().min(max_head)];
    let mut request = httparse::Request::new(&mut []);
    let parsed = request.parse_with_uninit_headers(window, storage);
    let Some(len) = head_len(parsed, buf.len(), max_head)? else {
        return Ok(None);
    };
    let (Some(method), Some(target), Some(minor)) = (request.method, request.path, request.version)
    else {
        return Err(HeadError::Malformed);
    };
    let version = if minor == 1 {
        Version::Http11
    } else {
        Version::Http10
    };
    let origin = target.starts_with('/');
    let absolute = target.starts_with("http://") || target.starts_with("https://");
    if !(origin || absolute || (target == "*" && method == "OPTIONS")) {
        return Err(HeadError::Target);
    }
    let headers: &'h [Header<'b>] = request.headers;
    let fields = Fields::read(headers)?;
    if version == Version::Http11 && fields.hosts != 1 {
        return Err(HeadError::Host);
    }
    let framing = match (fields.chunked, fields.length) {
        (true, _) if version == Version::Http10 => return Err(HeadError::TransferEncoding10),
        (true, Some(_)) => return Err(HeadError::Conflict),
        (true, None) => Framing::Chunked,
        (false, Some(n)) => Framing::Length(n),
        (false, None) => Framing::Empty,
    };
    let keep_alive = match version {
        Version::Http11 => !fields.close,
        Version::Http10 => fields.keep_alive && !fields.close,
    };
    let has_body = !matches!(framing, Framing::Empty | Framing::Length(0));
    Ok(Some(RequestHead {
        len,
        method,
        target,
        version,
        headers,
        framing,
        keep_alive,
        expect_continue: fields.continue_expected && has_body,
    }))
}

/// The length of a head httparse read from the first `max_head` of `buffered` bytes:
/// `None` while it is incomplete and shorter than the limit.
fn head_len(
    parsed: httparse::Result<usize>,
    buffered: usize,
    max_head: usize,
) -> Result<Option<usize>, HeadError> {
    match parsed {
        Ok(httparse::Status::Complete(len)) => Ok(Some(len)),
        Ok(httparse::Status::Partial) if buffered >= max_head => Err(HeadError::TooLarge(max_head)),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooManyHeaders),
        Err(httparse::Error::Version) => Err(HeadError::Version),
        Err(_) => Err(HeadError::Malformed),
    }
}

/// How an answer's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerFraming {
    /// No body: the answer to a `HEAD`, a 1xx, 204 or 304.
    None,
    Length(u64),
    /// Read with [`Chunked`].
    Chunked,
    /// Until the connection closes: neither `Content-Length` nor `Transfer-Encoding`.
    UntilClose,
}

/// An answer's head read whole.
#[derive(Debug)]
pub struct ResponseHead<'b, 'h> {
    /// Bytes of the head, the empty line that ends it included: the body starts here.
    pub len: usize,
    pub status: u16,
    pub version: Version,
    pub headers: &'h [Header<'b>],
    pub framing: AnswerFraming,
    /// Whether the connection may carry another request after this answer.
    pub keep_alive: bool,
}

impl ResponseHead<'_, '_> {
    /// A 1xx answer: another head follows it.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status)
    }
}

/// Reads an answer's head from the start of `buf` into `storage`: `Ok(None)` while it
/// is incomplete (and shorter than `max_head`). `to_head` says the request was a
/// `HEAD` (its answer has no body whatever its fields say). The framing rules are the
/// request's: `Transfer-Encoding` other than one `chunked`, with `Content-Length`, or
/// in HTTP/1.0, and a repeated or non-decimal `Content-Length`, are refused — an
/// answer two parsers could delimit differently is not relayed.
pub fn parse_response<'b, 'h>(
    buf: &'b [u8],
    storage: &'h mut [MaybeUninit<Header<'b>>],
    max_head: usize,
    to_head: bool,
) -> Result<Option<ResponseHead<'b, 'h>>, HeadError> {
    let window = &buf[..buf.len().min(max_head)];
    let mut response = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        window,
        storage,
    );
    let Some(len) = head_len(parsed, buf.len(), max_head)? else {
        return Ok(None);
    };
    let (Some(status), Some(minor)) = (response.code, response.version) else {
        return Err(HeadError::Malformed);
    };
    let version = if minor == 1 {
        Version::Http11
    } else {
        Version::Http10
    };
    let headers: &'h [Header<'b>] = response.headers;
    let fields = Fields::read(headers)?;
    let bodiless = to_head || (100..200).contains(&status) || status == 204 || status == 304;
    let framing = match (fields.chunked, fields.length) {
        (true, _) if version == Version::Http10 => return Err(HeadError::TransferEncoding10),
        (true, Some(_)) => return Err(HeadError::Conflict),
        _ if bodiless => AnswerFraming::None,
        (true, None) => AnswerFraming::Chunked,
        (false, Some(n)) => AnswerFraming::Length(n),
        (false, None) => AnswerFraming::UntilClose,
    };
    let keep_alive = framing != AnswerFraming::UntilClose
        && match version {
            Version::Http11 => !fields.close,
            Version::Http10 => fields.keep_alive && !fields.close,
        };
    Ok(Some(ResponseHead {
        len,
        status,
        version,
        headers,
        framing,
        keep_alive,
    }))
}

/// Whether the field name `sent` is `lower` (a name in lower case) in any case: the
/// one comparison every reader of field names makes. Compared eight bytes at a time:
/// a byte-wise `eq_ignore_ascii_case` costs about five instructions a byte, and a head
/// holds a dozen names, each compared with a few.
pub fn name_is(sent: &[u8], lower: &[u8]) -> bool {
    sent.len() == lower.len() && starts_with_name(sent, lower)
}

/// Whether the field name `sent` begins with `lower` (in lower case), in any case.
pub fn starts_with_name(sent: &[u8], lower: &[u8]) -> bool {
    let n = lower.len();
    let Some(sent) = sent.get(..n) else {
        return false;
    };
    if n < 8 {
        return fits(short_word(sent), short_word(lower));
    }
    let whole = sent
        .chunks_exact(8)
        .zip(lower.chunks_exact(8))
        .all(|(s, l)| fits(word(s), word(l)));
    // The last eight bytes, overlapping the words above when `n` is not a multiple of 8.
    whole && fits(word(&sent[n - 8..]), word(&lower[n - 8..]))
}

/// Whether the word `sent` is the word `lower` (ASCII, letters in lower case) in any
/// case: an upper case letter of `sent` differs from its lower case only in bit 5,
/// which is set in `sent` where `lower` has a letter.
fn fits(sent: u64, lower: u64) -> bool {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    // Per byte of `lower` (each below 0x80, so no carry crosses a byte): the top bit set
    // when it is at least `a`, and when it is past `z`.
    let from_a = lower.wrapping_add(ONES * (0x80 - u64::from(b'a')));
    let past_z = lower.wrapping_add(ONES * (0x80 - u64::from(b'z' + 1)));
    let letters = from_a & !past_z & (ONES * 0x80);
    sent | (letters >> 2) == lower
}

/// Eight bytes as a word.
fn word(bytes: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(w)
}

/// Fewer than eight bytes as a word, zero above them.
fn short_word(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rev()
        .fold(0u64, |w, &b| (w << 8) | u64::from(b))
}

/// What the framing and connection fields of a head say.
#[derive(Debug, Default)]
struct Fields {
    hosts: usize,
    length: Option<u64>,
    chunked: bool,
    close: bool,
    keep_alive: bool,
    continue_expected: bool,
}

impl Fields {
    fn read(headers: &[Header<'_>]) -> Result<Self, HeadError> {
        let mut f = Self::default();
        let mut codings = 0usize;
        for h in headers {
            let name = h.name.as_bytes();
            // By length first: one comparison per field at most.
            match name.len() {
                4 if name_is(name, b"host") => f.hosts += 1,
                14 if name_is(name, b"content-length") => {
                    if f.length.is_some() {
                        return Err(HeadError::ContentLength);
                    }
                    f.length = Some(decimal(h.value).ok_or(HeadError::ContentLength)?);
                }
                17 if name_is(name, b"transfer-encoding") => {
                    // Every line names a coding; all of them together, one `chunked`.
                    let mut here = 0usize;
                    for coding in list(h.value) {
                        here += 1;
                        codings += 1;
                        if codings > 1 || !coding.eq_ignore_ascii_case(b"chunked") {
                            return Err(HeadError::UnsupportedCoding);
                        }
                        f.chunked = true;
                    }
                    if here == 0 {
                        return Err(HeadError::UnsupportedCoding);
                    }
                }
                10 if name_is(name, b"connection") => {
                    for option in list(h.value) {
                        f.close |= option.eq_ignore_ascii_case(b"close");
                        f.keep_alive |= option.eq_ignore_ascii_case(b"keep-alive");
                    }
                }
                6 if name_is(name, b"expect") => {
                    f.continue_expected |= h.value.eq_ignore_ascii_case(b"100-continue");
                }
                _ => {}
            }
        }
        Ok(f)
    }
}

/// The members of a comma-separated field value, trimmed, empty ones skipped.
fn list(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|b| *b == b',')
        .map(|m| m.trim_ascii())
        .filter(|m| !m.is_empty())
}

/// A field value that is only decimal digits (no sign, no spaces, no list), within u64.
fn decimal(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    value.iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// Why a chunked body is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    #[error("a chunk size is not a hexadecimal number")]
    Size,
    #[error("a chunk size is larger than the reader takes")]
    TooLarge,
    #[error("a chunk-size line is longer than {MAX_CHUNK_LINE} bytes")]
    LongLine,
    #[error("a line in chunked framing does not end in CRLF")]
    LineEnd,
    #[error("a chunk extension holds a control character")]
    Extension,
    #[error("the trailer fields are longer than {MAX_TRAILERS} bytes")]
    LongTrailers,
}

/// Where a chunked body's reader is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading the size's hex digits.
    Size {
        size: u64,
        digits: u8,
        line: usize,
    },
    /// Whitespace after the size, before a `;`.
    Space {
        size: u64,
        line: usize,
    },
    /// A chunk extension, up to CR.
    Extension {
        size: u64,
        line: usize,
    },
    /// CR seen at the end of a size line.
    SizeLf {
        size: u64,
    },
    Data(u64),
    DataCr,
    DataLf,
    /// A trailer line (or the empty line that ends the body); `empty` while the line
    /// has nothing yet, `bytes` counts every trailer byte.
    Trailer {
        empty: bool,
        bytes: usize,
    },
    TrailerLf {
        empty: bool,
        bytes: usize,
    },
    Done,
}

/// What one [`Chunked::step`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Input bytes used.
    pub used: usize,
    /// Where a piece of the body's data is in the input; it ends at `used`.
    pub data: Option<Range<usize>>,
}

/// A chunked body's reader: feed it the bytes as they come; it says where the data is
/// and when the body ended. Chunks of up to `max_chunk` bytes are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunked {
    state: State,
    max_chunk: u64,
}

impl Chunked {
    pub fn new(max_chunk: u64) -> Self {
        Self {
            state: State::Size {
                size: 0,
                digits: 0,
                line: 0,
            },
            max_chunk,
        }
    }

    /// Whether the body ended (the last chunk and the trailers were read).
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Reads `input` until a piece of data, the body's end, or the input's end. Bytes
    /// after the body's end are not used (they are the next request's).
    pub fn step(&mut self, input: &[u8]) -> Result<Step, ChunkError> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            self.state = match self.state {
                State::Size { size, digits, line } => {
                    if line >= MAX_CHUNK_LINE {
                        return Err(ChunkError::LongLine);
                    }
                    match (b as char).to_digit(16) {
                        Some(d) => {
                            let size = size
                                .checked_mul(16)
                                .and_then(|s| s.checked_add(u64::from(d)))
                                .ok_or(ChunkError::TooLarge)?;
                            if size > self.max_chunk {
                                return Err(ChunkError::TooLarge);
                            }
                            State::Size {
                                size,
                                digits: digits.saturating_add(1),
                                line: line + 1,
                            }
                        }
                        None if digits == 0 => return Err(ChunkError::Size),
                        None => after_size(size, line, b)?,
                    }
                }
                State::Space { size, line } => {
                    if line >= MAX_CHUNK_LINE {
                        return Err(ChunkError::LongLine);
                    }
                    after_size(size, line, b)?
                }
                State::Extension { size, line } => {
                    if line >= MAX_CHUNK_LINE {
                        return Err(ChunkError::LongLine);
                    }
                    match b {
                        b'\r' => State::SizeLf { size },
                        b'\n' => return Err(ChunkError::LineEnd),
                        b'\t' | b' '..=b'~' | 0x80..=0xff => State::Extension {
                            size,
                            line: line + 1,
                        },
                        _ => return Err(ChunkError::Extension),
                    }
                }
                State::SizeLf { size } => {
                    if b != b'\n' {
                        return Err(ChunkError::LineEnd);
                    }
                    if size == 0 {
                        State::Trailer {
                            empty: true,
                            bytes: 0,
                        }
                    } else {
                        State::Data(size)
                    }
                }
                State::Data(left) => {
                    let take = usize::try_from(left)
                        .unwrap_or(usize::MAX)
                        .min(input.len() - i);
                    let rest = left - take as u64;
                    self.state = if rest == 0 {
                        State::DataCr
                    } else {
                        State::Data(rest)
                    };
                    return Ok(Step {
                        used: i + take,
                        data: Some(i..i + take),
                    });
                }
                State::DataCr if b == b'\r' => State::DataLf,
                State::DataLf if b == b'\n' => State::Size {
                    size: 0,
                    digits: 0,
                    line: 0,
                },
                State::DataCr | State::DataLf => return Err(ChunkError::LineEnd),
                State::Trailer { empty, bytes } => {
                    if bytes >= MAX_TRAILERS {
                        return Err(ChunkError::LongTrailers);
                    }
                    match b {
                        b'\r' => State::TrailerLf {
                            empty,
                            bytes: bytes + 1,
                        },
                        b'\n' => return Err(ChunkError::LineEnd),
                        _ => State::Trailer {
                            empty: false,
                            bytes: bytes + 1,
                        },
                    }
                }
                State::TrailerLf { empty, bytes } => {
                    if b != b'\n' {
                        return Err(ChunkError::LineEnd);
                    }
                    if empty {
                        self.state = State::Done;
                        return Ok(Step {
                            used: i + 1,
                            data: None,
                        });
                    }
                    State::Trailer {
                        empty: true,
                        bytes: bytes + 1,
                    }
                }
                State::Done => break,
            };
            i += 1;
        }
        Ok(Step {
            used: i,
            data: None,
        })
    }
}

/// The state after byte `b` of a size line past its digits: the line's end, whitespace
/// before an extension, or an extension's `;`.
fn after_size(size: u64, line: usize, b: u8) -> Result<State, ChunkError> {
    match b {
        b'\r' => Ok(State::SizeLf { size }),
        b'\n' => Err(ChunkError::LineEnd),
        b' ' | b'\t' => Ok(State::Space {
            size,
            line: line + 1,
        }),
        b';' => Ok(State::Extension {
            size,
            line: line + 1,
        }),
        _ => Err(ChunkError::Size),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAX_HEAD: usize = 8192;

    /// What a test looks at in a head: its length, path, framing, whether the connection
    /// stays open, whether the client waits for `100 Continue`.
    type Seen = (usize, String, Framing, bool, bool);

    /// The head of `raw`, or why it is refused; `None` while incomplete.
    fn head(raw: &str) -> Result<Option<Seen>, HeadError> {
        let mut storage = header_storage();
        parse_request(raw.as_bytes(), &mut storage, MAX_HEAD).map(|h| {
            h.map(|h| {
                (
                    h.len,
                    h.path().to_owned(),
                    h.framing,
                    h.keep_alive,
                    h.expect_continue,
                )
            })
        })
    }

    /// What a test looks at in an answer's head: its length, status, framing, whether
    /// the connection stays open.
    type Answered = (usize, u16, AnswerFraming, bool);

    fn answer(raw: &str, to_head: bool) -> Result<Option<Answered>, HeadError> {
        let mut storage = header_storage();
        parse_response(raw.as_bytes(), &mut storage, MAX_HEAD, to_head)
            .map(|h| h.map(|h| (h.len, h.status, h.framing, h.keep_alive)))
    }

    #[test]
    fn an_answer_is_delimited_by_its_length_its_chunks_or_the_close() {
        let ok = "HTTP/1.1 200 OK\r\n";
        assert_eq!(
            answer(&format!("{ok}content-length: 12\r\n\r\nhello"), false),
            Ok(Some((39, 200, AnswerFraming::Length(12), true)))
        );
        assert_eq!(
            answer(&format!("{ok}transfer-encoding: chunked\r\n\r\n"), false),
            Ok(Some((47, 200, AnswerFraming::Chunked, true)))
        );
        assert_eq!(
            answer(&format!("{ok}x: y\r\n\r\n"), false),
            Ok(Some((25, 200, AnswerFraming::UntilClose, false)))
        );
        assert_eq!(
            answer(
                &format!("{ok}content-length: 5\r\nconnection: close\r\n\r\n"),
                false
            ),
            Ok(Some((57, 200, AnswerFraming::Length(5), false)))
        );
        assert_eq!(
            answer("HTTP/1.0 200 OK\r\ncontent-length: 5\r\n\r\n", false),
            Ok(Some((38, 200, AnswerFraming::Length(5), false)))
        );
        assert_eq!(
            answer(
                "HTTP/1.0 200 OK\r\ncontent-length: 5\r\nconnection: keep-alive\r\n\r\n",
                false
            ),
            Ok(Some((62, 200, AnswerFraming::Length(5), true)))
        );
        assert_eq!(
            answer(&format!("{ok}content-length: 5\r\n"), false),
            Ok(None)
        );
    }

    #[test]
    fn heads_1xx_204_and_304_have_no_body_whatever_their_fields_say() {
        for (raw, status) in [
            ("HTTP/1.1 100 Continue\r\n\r\n", 100),
            ("HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n", 103),
            ("HTTP/1.1 204 No Content\r\ncontent-length: 7\r\n\r\n", 204),
            (
                "HTTP/1.1 304 Not Modified\r\ntransfer-encoding: chunked\r\n\r\n",
                304,
            ),
        ] {
            let (_, seen, framing, keep_alive) = answer(raw, false).unwrap().unwrap();
            assert_eq!(
                (seen, framing, keep_alive),
                (status, AnswerFraming::None, true)
            );
        }
        let (_, _, framing, _) = answer("HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\n", true)
            .unwrap()
            .unwrap();
        assert_eq!(framing, AnswerFraming::None);
        let mut storage = header_storage();
        let interim = parse_response(b"HTTP/1.1 100 Continue\r\n\r\n", &mut storage, 99, false);
        assert!(interim.unwrap().unwrap().is_interim());
    }

    #[test]
    fn answers_two_parsers_could_delimit_differently_are_refused() {
        for (raw, error) in [
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n",
                HeadError::Conflict,
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\n",
                HeadError::ContentLength,
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
                HeadError::ContentLength,
            ),
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
                HeadError::UnsupportedCoding,
            ),
            (
                "HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
                HeadError::TransferEncoding10,
            ),
            (
                "HTTP/1.1 200 OK\r\nx: a\r\n b\r\n\r\n",
                HeadError::Malformed,
            ),
            ("HTTP/1.1 2000 OK\r\n\r\n", HeadError::Malformed),
            ("HTTP/2.0 200 OK\r\n\r\n", HeadError::Version),
        ] {
            assert_eq!(answer(raw, false), Err(error), "{raw:?}");
        }
        let long = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD));
        assert_eq!(answer(&long, false), Err(HeadError::TooLarge(MAX_HEAD)));
    }

    fn refused(raw: &str) -> HeadError {
        head(raw).expect_err(raw)
    }

    fn framing(raw: &str) -> Framing {
        head(raw).unwrap().unwrap().2
    }

    #[test]
    fn a_request_head_says_where_the_body_starts_and_how_it_ends() {
        let raw =
            "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(
            head(raw),
            Ok(Some((
                raw.len() - 5,
                "/v1/chat/completions".to_owned(),
                Framing::Length(5),
                true,
                false
            )))
        );
        assert_eq!(
            framing("GET / HTTP/1.1\r\nHost: gw\r\n\r\n"),
            Framing::Empty
        );
        assert_eq!(
            framing("POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: Chunked\r\n\r\n"),
            Framing::Chunked
        );
    }

    #[test]
    fn an_incomplete_head_waits_until_it_is_too_long() {
        assert_eq!(head("POST / HTTP/1.1\r\nHost: gw\r\n"), Ok(None));
        assert_eq!(head(""), Ok(None));
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_HEAD));
        assert_eq!(refused(&long), HeadError::TooLarge(MAX_HEAD));
        assert_eq!(HeadError::TooLarge(MAX_HEAD).status(), 431);
        // A complete head past the limit is refused too, not read.
        let big = format!(
            "GET / HTTP/1.1\r\nHost: gw\r\nX: {}\r\n\r\n",
            "b".repeat(MAX_HEAD)
        );
        assert_eq!(refused(&big), HeadError::TooLarge(MAX_HEAD));
    }

    #[test]
    fn content_length_is_one_plain_decimal() {
        let with = |v: &str| {
            head(&format!(
                "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: {v}\r\n\r\n"
            ))
        };
        assert_eq!(with("0").unwrap().unwrap().2, Framing::Length(0));
        assert_eq!(with(" 12 ").unwrap().unwrap().2, Framing::Length(12));
        assert_eq!(
            with("18446744073709551615"),
            Err(HeadError::ContentLength),
            "20 digits are refused before they could overflow"
        );
        assert_eq!(
            with("9999999999999999999").unwrap().unwrap().2,
            Framing::Length(9_999_999_999_999_999_999)
        );
        for bad in ["+5", "-1", "5,5", "5, 5", "0x5", "5 5", "", "1e3", "five"] {
            assert_eq!(with(bad), Err(HeadError::ContentLength), "{bad:?}");
        }
        let twice = "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n";
        assert_eq!(refused(twice), HeadError::ContentLength);
        assert_eq!(HeadError::ContentLength.status(), 400);
    }

    #[test]
    fn transfer_encoding_is_a_single_chunked_and_never_with_content_length() {
        let te = |v: &str| {
            head(&format!(
                "POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: {v}\r\n\r\n"
            ))
        };
        assert_eq!(te("chunked").unwrap().unwrap().2, Framing::Chunked);
        for bad in [
            "gzip, chunked",
            "chunked, chunked",
            "chunked, gzip",
            "identity",
            "",
            ",",
            "chunked;q=1",
        ] {
            assert_eq!(te(bad), Err(HeadError::UnsupportedCoding), "{bad:?}");
        }
        assert_eq!(HeadError::UnsupportedCoding.status(), 501);
        let two_lines =
            "POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(refused(two_lines), HeadError::UnsupportedCoding);
        // Found by the fuzz target: an empty line after a chunked one.
        let empty_after =
            "POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: \r\n\r\n";
        assert_eq!(refused(empty_after), HeadError::UnsupportedCoding);
        for both in [
            "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        ] {
            assert_eq!(refused(both), HeadError::Conflict);
        }
        let http10 = "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(refused(http10), HeadError::TransferEncoding10);
    }

    #[test]
    fn malformed_heads_are_refused() {
        for bad in [
            // obs-fold: a value continued on the next line.
            "GET / HTTP/1.1\r\nHost: gw\r\nX-A: one\r\n two\r\n\r\n",
            // Whitespace between a field name and its colon.
            "GET / HTTP/1.1\r\nHost: gw\r\nContent-Length : 5\r\n\r\n",
            // A bare CR ends nothing.
            "GET / HTTP/1.1\rHost: gw\r\n\r\n",
            // NUL and other controls in a value.
            "GET / HTTP/1.1\r\nHost: gw\r\nX-A: a\0b\r\n\r\n",
            // No version.
            "GET /\r\nHost: gw\r\n\r\n",
            // A field without a name.
            "GET / HTTP/1.1\r\nHost: gw\r\n: x\r\n\r\n",
        ] {
            assert_eq!(refused(bad), HeadError::Malformed, "{bad:?}");
        }
        assert_eq!(
            refused("GET / HTTP/2.0\r\nHost: gw\r\n\r\n"),
            HeadError::Version
        );
        // What follows the target's first space is read as the version.
        for bad in [
            "GET / http/1.1\r\nHost: gw\r\n\r\n",
            "GET /a b HTTP/1.1\r\nHost: gw\r\n\r\n",
        ] {
            assert_eq!(refused(bad), HeadError::Version, "{bad:?}");
        }
        assert_eq!(HeadError::Version.status(), 505);
    }

    #[test]
    fn a_head_may_end_its_lines_in_a_bare_lf() {
        let raw = "GET /x HTTP/1.1\nHost: gw\n\n";
        assert_eq!(head(raw).unwrap().unwrap().0, raw.len());
    }

    #[test]
    fn too_many_fields_are_refused() {
        let fields: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        let raw = format!("GET / HTTP/1.1\r\nHost: gw\r\n{fields}\r\n");
        assert_eq!(refused(&raw), HeadError::TooManyHeaders);
    }

    #[test]
    fn http_1_1_needs_exactly_one_host() {
        assert_eq!(refused("GET / HTTP/1.1\r\n\r\n"), HeadError::Host);
        assert_eq!(
            refused("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
            HeadError::Host
        );
        assert!(
            !head("GET / HTTP/1.0\r\n\r\n").unwrap().unwrap().3,
            "1.0 closes"
        );
    }

    #[test]
    fn persistence_follows_the_version_and_connection() {
        let keep = |raw: &str| head(raw).unwrap().unwrap().3;
        assert!(keep("GET / HTTP/1.1\r\nHost: gw\r\n\r\n"));
        assert!(!keep(
            "GET / HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
        ));
        assert!(!keep(
            "GET / HTTP/1.1\r\nHost: gw\r\nConnection: keep-alive, Close\r\n\r\n"
        ));
        assert!(!keep("GET / HTTP/1.0\r\n\r\n"));
        assert!(keep("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
    }

    #[test]
    fn expect_continue_counts_only_with_a_body() {
        let expects = |raw: &str| head(raw).unwrap().unwrap().4;
        assert!(expects(
            "POST / HTTP/1.1\r\nHost: gw\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n"
        ));
        assert!(expects("POST / HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"));
        assert!(!expects(
            "POST / HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n"
        ));
        assert!(!expects(
            "GET / HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\n\r\n"
        ));
    }

    #[test]
    fn targets_are_origin_absolute_or_an_options_asterisk() {
        let path = |target: &str, method: &str| {
            head(&format!("{method} {target} HTTP/1.1\r\nHost: gw\r\n\r\n")).map(|h| h.unwrap().1)
        };
        assert_eq!(
            path("/v1/models?x=1", "GET"),
            Ok("/v1/models?x=1".to_owned())
        );
        assert_eq!(
            path("http://gw/v1/models?x=1", "GET"),
            Ok("/v1/models?x=1".to_owned())
        );
        assert_eq!(path("https://gw:8443", "GET"), Ok("/".to_owned()));
        assert_eq!(path("http://gw?x=/a", "GET"), Ok("/".to_owned()));
        assert_eq!(path("*", "OPTIONS"), Ok("*".to_owned()));
        assert_eq!(path("*", "GET"), Err(HeadError::Target));
        assert_eq!(path("gw:443", "CONNECT"), Err(HeadError::Target));
        assert_eq!(path("v1/models", "GET"), Err(HeadError::Target));
    }

    #[test]
    fn pipelined_requests_are_read_one_after_the_other() {
        let first = "POST /a HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\nhi";
        let second = "GET /b HTTP/1.1\r\nHost: gw\r\n\r\n";
        let both = format!("{first}{second}");
        let (len, path, framing, ..) = head(&both).unwrap().unwrap();
        assert_eq!((path.as_str(), framing), ("/a", Framing::Length(2)));
        let rest = &both[len + 2..];
        assert_eq!(rest, second);
        assert_eq!(head(rest).unwrap().unwrap().1, "/b");
    }

    /// Feeds `body` to a reader in pieces of `piece` bytes: the data and the bytes used,
    /// or the first error.
    fn dechunk(body: &[u8], piece: usize) -> Result<(Vec<u8>, usize, bool), ChunkError> {
        let mut reader = Chunked::new(1 << 20);
        let (mut data, mut used) = (Vec::new(), 0);
        let mut end = 0;
        while used < body.len() && !reader.is_done() {
            end = (end + piece).min(body.len()).max(used + 1);
            let step = reader.step(&body[used..end])?;
            if let Some(r) = step.data {
                data.extend_from_slice(&body[used + r.start..used + r.end]);
            }
            used += step.used;
            if step.used == 0 && end == body.len() {
                break;
            }
        }
        Ok((data, used, reader.is_done()))
    }

    #[test]
    fn a_chunked_body_is_read_whole_however_it_arrives() {
        let body = b"5\r\nhello\r\n7;ext=\"v\"\r\n, world\r\n0\r\n\r\n";
        for piece in [1, 2, 3, 7, body.len()] {
            assert_eq!(
                dechunk(body, piece),
                Ok((b"hello, world".to_vec(), body.len(), true)),
                "in pieces of {piece}"
            );
        }
        let trailers = b"3\r\nabc\r\n0\r\nX-Sum: 1\r\nX-Two: 2\r\n\r\n";
        assert_eq!(
            dechunk(trailers, 4),
            Ok((b"abc".to_vec(), trailers.len(), true))
        );
        let padded = b"0003 ;a=b\t;c\r\nabc\r\n0\r\n\r\n";
        assert_eq!(
            dechunk(padded, 5),
            Ok((b"abc".to_vec(), padded.len(), true))
        );
    }

    #[test]
    fn bytes_after_a_chunked_body_are_left_for_the_next_request() {
        let body = b"2\r\nhi\r\n0\r\n\r\nGET / HTTP/1.1\r\n";
        assert_eq!(dechunk(body, body.len()), Ok((b"hi".to_vec(), 12, true)));
    }

    #[test]
    fn chunked_framing_is_strict_about_sizes_and_line_ends() {
        let cases: [(&[u8], ChunkError); 14] = [
            (b"5\nhello\r\n0\r\n\r\n", ChunkError::LineEnd),
            (b"5\r\nhello\n0\r\n\r\n", ChunkError::LineEnd),
            (b"5\r\nhelloX\r\n0\r\n\r\n", ChunkError::LineEnd),
            (b"5\r\nhello\r\r0\r\n\r\n", ChunkError::LineEnd),
            (b"0\r\n\n", ChunkError::LineEnd),
            (b"0\r\nX: y\n\r\n", ChunkError::LineEnd),
            (b"\r\nhello\r\n", ChunkError::Size),
            (b"g\r\n", ChunkError::Size),
            (b"5x\r\nhello\r\n", ChunkError::Size),
            (b"-5\r\n", ChunkError::Size),
            (b"5 x\r\n", ChunkError::Size),
            (b"fffffffffffffffff\r\n", ChunkError::TooLarge),
            (b"100001\r\n", ChunkError::TooLarge),
            (b"5;a\x01\r\nhello\r\n", ChunkError::Extension),
        ];
        for (body, error) in cases {
            assert_eq!(
                dechunk(body, 3),
                Err(error),
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
        let long_line = format!("5;{}\r\nhello\r\n0\r\n\r\n", "a".repeat(MAX_CHUNK_LINE));
        assert_eq!(dechunk(long_line.as_bytes(), 64), Err(ChunkError::LongLine));
        let long_trailers = format!("0\r\nX: {}\r\n\r\n", "t".repeat(MAX_TRAILERS));
        assert_eq!(
            dechunk(long_trailers.as_bytes(), 64),
            Err(ChunkError::LongTrailers)
        );
    }

    proptest! {
        #[test]
        fn any_chunking_of_any_body_reads_back_the_body(
            data in proptest::collection::vec(any::<u8>(), 0..600),
            sizes in proptest::collection::vec(1usize..80, 1..20),
            piece in 1usize..50,
            upper in any::<bool>(),
        ) {
            let mut body = Vec::new();
            let mut rest = &data[..];
            let mut i = 0;
            while !rest.is_empty() {
                let n = sizes[i % sizes.len()].min(rest.len());
                let size = if upper { format!("{n:X}") } else { format!("{n:x}") };
                body.extend_from_slice(size.as_bytes());
                body.extend_from_slice(b"\r\n");
                body.extend_from_slice(&rest[..n]);
                body.extend_from_slice(b"\r\n");
                rest = &rest[n..];
                i += 1;
            }
            body.extend_from_slice(b"0\r\n\r\n");
            prop_assert_eq!(dechunk(&body, piece), Ok((data.clone(), body.len(), true)));
        }

        #[test]
        fn field_names_compare_as_eq_ignore_ascii_case_does(
            lower in "[ -~]{0,40}",
            flips in proptest::collection::vec(any::<bool>(), 40),
            sent in proptest::collection::vec(any::<u8>(), 0..40),
            replaced in (0usize..40, any::<u8>()),
        ) {
            let lower = lower.to_ascii_lowercase();
            let lower = lower.as_bytes();
            // The name in a mixed case, then with one byte replaced.
            let cased: Vec<u8> = lower
                .iter()
                .zip(&flips)
                .map(|(b, up)| if *up { b.to_ascii_uppercase() } else { *b })
                .collect();
            let mut changed = cased.clone();
            if let Some(b) = changed.get_mut(replaced.0) {
                *b = replaced.1;
            }
            for candidate in [&cased, &changed, &sent] {
                prop_assert_eq!(name_is(candidate, lower), candidate.eq_ignore_ascii_case(lower));
                let starts = candidate
                    .get(..lower.len())
                    .is_some_and(|s| s.eq_ignore_ascii_case(lower));
                prop_assert_eq!(starts_with_name(candidate, lower), starts);
            }
        }
    }

    #[test]
    fn field_names_are_compared_in_any_case_and_nothing_else() {
        assert!(name_is(b"Content-Length", b"content-length"));
        assert!(name_is(b"SESSION_ID", b"session_id"));
        assert!(name_is(b"x-Codex-Session-Id", b"x-codex-session-id"));
        assert!(name_is(b"", b""));
        // Bit 5 makes a letter's case only: `_` is not DEL, `-` not CR, `@` not a back-tick.
        assert!(!name_is(b"session\x7fid", b"session_id"));
        assert!(!name_is(b"content\rlength", b"content-length"));
        assert!(!name_is(b"@", b"`"));
        assert!(!name_is(b"Host", b"hosts"));
        assert!(starts_with_name(
            b"X-RateLimit-Remaining-Tokens",
            b"x-ratelimit-"
        ));
        assert!(!starts_with_name(b"x-ratelimit", b"x-ratelimit-"));
        assert!(!starts_with_name(b"x-ratelimiT_", b"x-ratelimit-"));
    }
}
