//! A hand-written HTTP/1.1 client and server on tokio (the research's F5 client and F6
//! server): a lower bound for what a proxy on tokio costs per request, not a product. The
//! client keeps this thread's idle upstream connections, writes a request in one write,
//! parses the answer's head with httparse and hands the body out in the request's own task;
//! the body owns the connection and puts it back when the answer ends. The server reads
//! Content-Length request bodies only and passes the answer's head and bytes through.

use crate::Upstream;
use bytes::{Buf, Bytes, BytesMut};
use http_body::{Body, Frame};
use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Most headers read in a head.
const MAX_HEADERS: usize = 64;
/// Largest head read, request or answer.
const MAX_HEAD: usize = 16 * 1024;

/// An upstream connection and what was read from it and not yet used.
#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    buf: BytesMut,
}

thread_local! {
    static IDLE: RefCell<Vec<Conn>> = const { RefCell::new(Vec::new()) };
}

fn bad(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// Reads what the socket has into `buf`: the bytes read, 0 at the end of the stream.
fn poll_fill(
    stream: &TcpStream,
    buf: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    if buf.capacity() - buf.len() < 4096 {
        buf.reserve(16 * 1024);
    }
    loop {
        ready!(stream.poll_read_ready(cx))?;
        match stream.try_read_buf(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            r => return Poll::Ready(r),
        }
    }
}

async fn fill(stream: &TcpStream, buf: &mut BytesMut) -> io::Result<usize> {
    std::future::poll_fn(|cx| poll_fill(stream, buf, cx)).await
}

/// How an answer's body ends.
#[derive(Debug, Clone, Copy)]
enum Framing {
    Length(u64),
    Chunked(Chunked),
    /// At the end of the stream: the connection is not used again.
    Close,
}

/// Where a chunked body's reader is.
#[derive(Debug, Clone, Copy)]
enum Chunked {
    Size {
        size: u64,
        digits: bool,
    },
    /// Extensions after the size, up to the line's end.
    Extension {
        size: u64,
    },
    Data(u64),
    DataEnd {
        cr: bool,
    },
    /// Trailer lines after the last chunk; `empty` while the current line has nothing.
    Trailer {
        empty: bool,
    },
    Done,
}

/// What one step of the chunked reader found in its input.
#[derive(Debug)]
struct Step {
    /// Input bytes used.
    used: usize,
    /// Where a piece of data is in the input (it ends at `used`).
    data: Option<usize>,
}

impl Chunked {
    const START: Self = Self::Size {
        size: 0,
        digits: false,
    };

    /// Reads `input` until a piece of data, the body's end or the input's end.
    fn step(&mut self, input: &[u8]) -> io::Result<Step> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match *self {
                Self::Size { size, digits } => match (b as char).to_digit(16) {
                    Some(d) => {
                        let size = size
                            .checked_mul(16)
                            .and_then(|s| s.checked_add(u64::from(d)))
                            .ok_or_else(|| bad("chunk size overflows"))?;
                        *self = Self::Size { size, digits: true };
                    }
                    None if digits && (b == b';' || b == b'\r' || b == b' ' || b == b'\t') => {
                        *self = Self::Extension { size }
                    }
                    None if digits && b == b'\n' => *self = Self::after_size(size),
                    None => return Err(bad("bad chunk size")),
                },
                Self::Extension { size } => {
                    if b == b'\n' {
                        *self = Self::after_size(size);
                    }
                }
                Self::Data(left) => {
                    let take = usize::try_from(left)
                        .unwrap_or(usize::MAX)
                        .min(input.len() - i);
                    let rest = left - take as u64;
                    *self = if rest == 0 {
                        Self::DataEnd { cr: false }
                    } else {
                        Self::Data(rest)
                    };
                    return Ok(Step {
                        used: i + take,
                        data: Some(i),
                    });
                }
                Self::DataEnd { cr } => match b {
                    b'\r' if !cr => *self = Self::DataEnd { cr: true },
                    b'\n' => *self = Self::START,
                    _ => return Err(bad("chunk data not followed by CRLF")),
                },
                Self::Trailer { empty } => match b {
                    b'\n' if empty => {
                        *self = Self::Done;
                        return Ok(Step {
                            used: i + 1,
                            data: None,
                        });
                    }
                    b'\n' => *self = Self::Trailer { empty: true },
                    b'\r' => {}
                    _ => *self = Self::Trailer { empty: false },
                },
                Self::Done => break,
            }
            i += 1;
        }
        Ok(Step {
            used: i,
            data: None,
        })
    }

    fn after_size(size: u64) -> Self {
        if size == 0 {
            Self::Trailer { empty: true }
        } else {
            Self::Data(size)
        }
    }
}

/// An upstream answer: its head as received, and its body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) head: Bytes,
    pub(crate) body: RawBody,
}

/// An answer's body. It owns the connection and puts it back among this thread's idle
/// ones at the end; dropped before, it closes it. `raw` passes chunked framing through
/// as received (for a server that relays bytes); otherwise the frames carry the data.
#[derive(Debug)]
pub(crate) struct RawBody {
    conn: Option<Conn>,
    framing: Framing,
    raw: bool,
}

impl RawBody {
    fn release(&mut self) {
        if let Some(conn) = self.conn.take() {
            if !matches!(self.framing, Framing::Close) {
                IDLE.with(|idle| idle.borrow_mut().push(conn));
            }
        }
    }
}

impl Body for RawBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            if !conn.buf.is_empty() {
                match &mut this.framing {
                    Framing::Length(left) => {
                        let take = usize::try_from(*left)
                            .unwrap_or(usize::MAX)
                            .min(conn.buf.len());
                        let data = conn.buf.split_to(take).freeze();
                        *left -= take as u64;
                        if *left == 0 {
                            this.release();
                        }
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    Framing::Chunked(state) => {
                        let data = if this.raw {
                            let mut used = 0;
                            while used < conn.buf.len() && !matches!(state, Chunked::Done) {
                                used += state.step(&conn.buf[used..])?.used;
                            }
                            Some(conn.buf.split_to(used).freeze())
                        } else {
                            let step = state.step(&conn.buf)?;
                            step.data
                                .map(|at| {
                                    conn.buf.advance(at);
                                    conn.buf.split_to(step.used - at).freeze()
                                })
                                .or_else(|| {
                                    conn.buf.advance(step.used);
                                    None
                                })
                        };
                        let done = matches!(state, Chunked::Done);
                        if done {
                            this.release();
                        }
                        match data {
                            Some(d) if !d.is_empty() => {
                                return Poll::Ready(Some(Ok(Frame::data(d))))
                            }
                            _ if done => return Poll::Ready(None),
                            _ => continue,
                        }
                    }
                    Framing::Close => {
                        let data = conn.buf.split().freeze();
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
            }
            if matches!(this.framing, Framing::Length(0)) {
                this.release();
                return Poll::Ready(None);
            }
            let conn = this.conn.as_mut().ok_or_else(|| bad("no connection"))?;
            if ready!(poll_fill(&conn.stream, &mut conn.buf, cx))? == 0 {
                this.conn = None;
                return match this.framing {
                    Framing::Close => Poll::Ready(None),
                    _ => Poll::Ready(Some(Err(bad(
                        "the upstream closed in the middle of a body",
                    )))),
                };
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.conn.is_none()
    }
}

/// Whether `name` is a header a proxy does not pass on (hop by hop), or one it writes
/// itself (`host`, `content-length`).
pub(crate) fn skipped(name: &[u8]) -> bool {
    [
        &b"host"[..],
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"content-length",
        b"te",
        b"upgrade",
        b"proxy-connection",
    ]
    .iter()
    .any(|h| h.eq_ignore_ascii_case(name))
}

/// Appends `n` in decimal.
pub(crate) fn push_decimal(out: &mut Vec<u8>, n: usize) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Appends the upstream request's `Host` and `Content-Length`, the head's end and the body.
pub(crate) fn finish_request(out: &mut Vec<u8>, up: &Upstream, body: &[u8]) {
    out.extend_from_slice(b"host: ");
    out.extend_from_slice(up.authority.as_bytes());
    out.extend_from_slice(b"\r\ncontent-length: ");
    push_decimal(out, body.len());
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
}

/// The head's length and how the body ends, once `buf` holds a whole answer head.
fn parse_answer(buf: &[u8]) -> io::Result<Option<(usize, Framing)>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut answer = httparse::Response::new(&mut headers);
    let len = match answer.parse(buf).map_err(|_| bad("bad answer head"))? {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial if buf.len() > MAX_HEAD => {
            return Err(bad("answer head too long"))
        }
        httparse::Status::Partial => return Ok(None),
    };
    let status = answer.code.unwrap_or(0);
    if status == 204 || status == 304 {
        return Ok(Some((len, Framing::Length(0))));
    }
    let mut framing = Framing::Close;
    for h in answer.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            framing = Framing::Chunked(Chunked::START);
            break;
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| bad("bad content-length"))?;
            framing = Framing::Length(n);
        }
    }
    Ok(Some((len, framing)))
}

async fn connect(up: &Upstream) -> io::Result<Conn> {
    let stream = TcpStream::connect(up.addr).await?;
    stream.set_nodelay(true)?;
    Ok(Conn {
        stream,
        buf: BytesMut::with_capacity(16 * 1024),
    })
}

/// Sends `request` (head and body, as written) on one of this thread's connections to
/// `up` and reads the answer's head. A reused connection the upstream closed meanwhile
/// is replaced once, since the request cannot have reached it.
pub(crate) async fn send(up: &Upstream, request: &[u8]) -> io::Result<Answer> {
    let mut reused = true;
    loop {
        let mut conn = match IDLE.with(|idle| idle.borrow_mut().pop()) {
            Some(conn) => conn,
            None => {
                reused = false;
                connect(up).await?
            }
        };
        match exchange(&mut conn, request).await {
            Ok(Some((len, framing))) => {
                let head = conn.buf.split_to(len).freeze();
                return Ok(Answer {
                    head,
                    body: RawBody {
                        conn: Some(conn),
                        framing,
                        raw: false,
                    },
                });
            }
            Ok(None) if reused => continue,
            Ok(None) => return Err(bad("the upstream closed without answering")),
            Err(e) => return Err(e),
        }
    }
}

/// Writes the request and reads an answer head; `None` if the connection closed first.
async fn exchange(conn: &mut Conn, request: &[u8]) -> io::Result<Option<(usize, Framing)>> {
    if conn.stream.write_all(request).await.is_err() {
        return Ok(None);
    }
    loop {
        if let Some(parsed) = parse_answer(&conn.buf)? {
            return Ok(Some(parsed));
        }
        if fill(&conn.stream, &mut conn.buf).await? == 0 {
            return Ok(None);
        }
    }
}

/// A request head read by the server: the upstream request built from it (head without
/// `Host` and `Content-Length`), and its body's length.
fn parse_request(buf: &[u8], out: &mut Vec<u8>) -> io::Result<Option<(usize, usize)>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(buf).map_err(|_| bad("bad request head"))? {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial if buf.len() > MAX_HEAD => {
            return Err(bad("request head too long"))
        }
        httparse::Status::Partial => return Ok(None),
    };
    out.clear();
    out.extend_from_slice(request.method.unwrap_or("GET").as_bytes());
    out.push(b' ');
    out.extend_from_slice(request.path.unwrap_or("/").as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut body = 0;
    for h in request.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            body = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| bad("bad content-length"))?;
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(bad("chunked request bodies are not read by this floor"));
        }
        if !skipped(h.name.as_bytes()) {
            out.extend_from_slice(h.name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(h.value);
            out.extend_from_slice(b"\r\n");
        }
    }
    Ok(Some((len, body)))
}

const BAD_GATEWAY: &[u8] = b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n";

/// Serves one client connection by hand (F6) until it closes or sends what this floor
/// does not read.
pub(crate) async fn serve(mut stream: TcpStream, up: std::sync::Arc<Upstream>) {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut upstream_request = Vec::with_capacity(4096);
    let mut out = Vec::with_capacity(16 * 1024);
    loop {
        let (head, body) = loop {
            match parse_request(&buf, &mut upstream_request) {
                Ok(Some(parsed)) => break parsed,
                Ok(None) => {}
                Err(_) => return,
            }
            match fill(&stream, &mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        buf.advance(head);
        while buf.len() < body {
            match fill(&stream, &mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
        finish_request(&mut upstream_request, &up, &buf[..body]);
        buf.advance(body);
        let Ok(mut answer) = send(&up, &upstream_request).await else {
            if stream.write_all(BAD_GATEWAY).await.is_err() {
                return;
            }
            continue;
        };
        answer.body.raw = true;
        let close_delimited = matches!(answer.body.framing, Framing::Close);
        out.clear();
        out.extend_from_slice(&answer.head);
        let mut body = Pin::new(&mut answer.body);
        loop {
            match std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        out.extend_from_slice(&data);
                    }
                    if out.len() < 8192 && !body.is_end_stream() && body.conn_buffered() {
                        continue;
                    }
                }
                Some(Err(_)) => return,
                None => {}
            }
            if !out.is_empty() && stream.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
            if body.is_end_stream() {
                break;
            }
        }
        if close_delimited {
            return;
        }
    }
}

impl RawBody {
    /// Whether more of the body is already read (another frame comes without waiting).
    fn conn_buffered(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| !c.buf.is_empty())
    }
}
