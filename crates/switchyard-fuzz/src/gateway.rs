//! The whole gateway in process, as linkerd2-proxy's inbound fuzz target drives its
//! proxy: one gateway (SQLite in a temporary directory, a quota pool, a concurrency gate,
//! providers of all three formats on the mock provider over loopback) and, for each input,
//! one client connection over an in-memory pipe served by the real edge. The input is a
//! request — method and path, credential, headers, body and how its bytes are chunked —
//! or raw bytes. Every complete request gets an answer, every error answer is typed, no
//! answer shows an upstream credential the client did not send itself, and once the
//! connection is closed nothing is held: no request in flight, no concurrency slot, no
//! quota reservation.

use crate::input::{chunks, Input};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use switchyard_gateway::clock::SystemClock;
use switchyard_gateway::frontends::Inference;
use switchyard_gateway::state::{AppState, Writers};
use switchyard_gateway::{bootstrap, edge};
use switchyard_mock::MockServer;
use switchyard_test_support::{
    Allocation, Combo, Config, Connection, Dimension, QuotaPool, ADMIN, CRED_ALPHA, CRED_BETA,
    CRED_CLAUDE, CRED_CODEX, KEY, OPS_KEY,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;
use tokio::sync::watch;

/// How long one exchange may take before it counts as a hang.
const HANG: Duration = Duration::from_secs(20);

/// The upstream credentials, none of which may reach a client.
const CREDENTIALS: [&str; 4] = [CRED_ALPHA, CRED_BETA, CRED_CLAUDE, CRED_CODEX];

/// Which of [`CREDENTIALS`] some input has sent as a client.
static EVER_SENT: [AtomicBool; 4] = [const { AtomicBool::new(false) }; 4];

/// Connections with a concurrency gate, whose slots must all be free afterwards.
const GATED: [&str; 4] = ["alpha-1", "beta-1", "claude-1", "codex-1"];

/// The requests a choice byte picks; one more value picks raw bytes.
const ROUTES: [(&str, &str); 16] = [
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages?beta=true"),
    ("POST", "/v1/responses"),
    ("POST", "/v1/messages/count_tokens"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/alpha/mock-small"),
    ("GET", "/api/monitoring/health"),
    ("GET", "/api/keys"),
    ("GET", "/api/logs?limit=5"),
    ("GET", "/api/quota/pools"),
    ("GET", "/metrics"),
    ("POST", "/api/keys"),
    ("GET", "/nope"),
    ("DELETE", "/v1/chat/completions"),
    ("POST", "/v1/chat/completions?x=%ff"),
];

/// The choice byte that picks raw bytes.
pub const RAW: u8 = ROUTES.len() as u8;

/// The gateway every input is sent to.
struct World {
    runtime: Runtime,
    state: Arc<AppState>,
    app: edge::App,
    limits: edge::Limits,
    _mock: MockServer,
    _writers: Writers,
    _dir: tempfile::TempDir,
}

fn config(mock: &str) -> Config {
    let pool = QuotaPool::new("fuzz", "fuzz", ["alpha-1", "claude-1", "codex-1"])
        .dimension(Dimension::new("requests", "hourly", 1e12))
        .dimension(Dimension::new("tokens", "daily", 1e15))
        .allocation(Allocation::new("k1").weight(1));
    Config::responses(mock)
        .setting("server.body_read_timeout_ms", 2_000)
        .setting("server.header_read_timeout_ms", 2_000)
        .setting("upstream.first_byte_timeout_ms", 5_000)
        .edit_connection("alpha-1", |c| c.max_concurrent(2))
        .edit_connection("claude-1", |c| c.max_concurrent(2))
        .connection(Connection::apikey("beta-2", "beta").credential("cred-beta-2-secret-value"))
        .combo(Combo::priority(
            "codex-first",
            ["codex/gpt-5-codex", "alpha/mock-small"],
        ))
        .quota_pool(pool)
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the gateway");
        let dir = tempfile::tempdir().expect("a data directory");
        let (mock, prepared) = runtime.block_on(async {
            let mock = MockServer::start_local().await.expect("the mock provider");
            let cfg =
                config(&mock.base_url()).resolve(dir.path(), &[("SWITCHYARD_ADMIN_TOKEN", ADMIN)]);
            let prepared = bootstrap::prepare(&cfg, Arc::new(SystemClock))
                .await
                .expect("the gateway starts");
            (mock, prepared)
        });
        let state = prepared.state;
        let limits = edge::Limits::from_settings(&state.snapshot().settings);
        World {
            app: edge::App {
                direct: Arc::new(Inference(Arc::clone(&state))),
                router: switchyard_gateway::app(Arc::clone(&state)),
            },
            runtime,
            state,
            limits,
            _mock: mock,
            _writers: prepared.writer,
            _dir: dir,
        }
    })
}

/// One request as bytes on the wire.
struct Wire {
    bytes: Vec<u8>,
    /// How many complete requests the bytes hold (0: the last one is incomplete, and the
    /// client closes its side after sending).
    requests: usize,
    plan: u8,
    method_head: bool,
    /// HTTP/2 with prior knowledge: its answers are frames, not read here.
    http2: bool,
    /// What the client sent as its body, before any chunked framing (raw bytes: all of
    /// them).
    body: Vec<u8>,
}

fn wire(data: &[u8]) -> Wire {
    let mut input = Input::new(data);
    let route = input.byte() % (RAW + 1);
    let auth = input.byte();
    let flags = input.byte();
    let plan = input.byte();
    let body = input.rest();
    if route == RAW {
        return raw(body, plan);
    }
    let (method, path) = ROUTES[usize::from(route)];
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: gateway\r\n");
    let reads = method == "GET";
    match auth % 6 {
        1 => head.push_str(&format!("authorization: Bearer {KEY}\r\n")),
        2 => head.push_str(&format!("x-api-key: {KEY}\r\n")),
        // The admin credential only reads: a write would change what later inputs meet.
        3 if reads => head.push_str(&format!("authorization: Bearer {ADMIN}\r\n")),
        4 => head.push_str("authorization: Bearer sy-not-a-key-00000000000000\r\n"),
        5 if reads => head.push_str(&format!("authorization: Bearer {OPS_KEY}\r\n")),
        _ => {}
    }
    if flags & 1 != 0 {
        head.push_str("content-type: application/json\r\n");
    }
    if flags & 2 != 0 {
        head.push_str("anthropic-version: 2023-06-01\r\n");
    }
    if flags & 16 != 0 {
        head.push_str("connection: close\r\n");
    }
    if flags & 64 != 0 {
        head.push_str("expect: 100-continue\r\n");
    }
    if flags & 128 != 0 {
        head.push_str("accept: text/event-stream\r\n");
    }
    let short = flags & 8 != 0;
    let mut one = head.into_bytes();
    if flags & 4 != 0 {
        one.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
        for piece in chunks(body, plan.max(2)) {
            one.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
            one.extend_from_slice(piece);
            one.extend_from_slice(b"\r\n");
        }
        if !short {
            one.extend_from_slice(b"0\r\n\r\n");
        }
    } else {
        let declared = body.len() + usize::from(short);
        one.extend_from_slice(format!("content-length: {declared}\r\n\r\n").as_bytes());
        one.extend_from_slice(body);
    }
    let twice = flags & 32 != 0 && flags & 16 == 0 && !short;
    let mut bytes = one.clone();
    if twice {
        bytes.extend_from_slice(&one);
    }
    Wire {
        bytes,
        requests: if short {
            0
        } else if twice {
            2
        } else {
            1
        },
        plan,
        method_head: false,
        http2: false,
        body: body.to_vec(),
    }
}

/// Raw bytes: one request when they parse as a whole request with a `content-length`
/// body (or none); otherwise sent, then the client's side closed.
fn raw(bytes: &[u8], plan: u8) -> Wire {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let requests = match req.parse(bytes) {
        Ok(httparse::Status::Complete(at)) => {
            let length = req
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| {
                    std::str::from_utf8(h.value)
                        .ok()?
                        .trim()
                        .parse::<usize>()
                        .ok()
                });
            let chunked = req
                .headers
                .iter()
                .any(|h| h.name.eq_ignore_ascii_case("transfer-encoding"));
            let expected = at + length.unwrap_or(0);
            usize::from(!chunked && bytes.len() == expected)
        }
        _ => 0,
    };
    let http2 = bytes.starts_with(b"PRI * HTTP/2.0");
    Wire {
        method_head: req.method.is_some_and(|m| m.eq_ignore_ascii_case("HEAD")),
        bytes: bytes.to_vec(),
        requests: if http2 { 0 } else { requests },
        plan,
        http2,
        body: bytes.to_vec(),
    }
}

/// One answer read off the wire.
#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: Option<String>,
    body: Vec<u8>,
}

/// Input: see [`wire`] (route, credential, header flags, chunking, body). Module docs.
pub fn check(data: &[u8]) {
    let world = world();
    let wire = wire(data);
    world.runtime.block_on(async {
        let answers = tokio::time::timeout(HANG, exchange(world, &wire))
            .await
            .unwrap_or_else(|_| panic!("no end to the exchange within {HANG:?}"));
        judge(&wire, &answers);
        settled(world).await;
    });
}

async fn exchange(world: &World, wire: &Wire) -> Vec<Answer> {
    let (client, server) = tokio::io::duplex(1 << 16);
    let (_stop, stop_rx) = watch::channel(false);
    let metrics = world.state.telemetry.metrics.edge.clone();
    let served = tokio::spawn(edge::serve(
        server,
        None,
        world.app.clone(),
        world.limits,
        metrics,
        stop_rx,
    ));
    let (mut read, mut write) = tokio::io::split(client);
    let send = async {
        for chunk in chunks(&wire.bytes, wire.plan) {
            if write.write_all(chunk).await.is_err() {
                break;
            }
        }
        if wire.requests == 0 {
            let _ = write.shutdown().await;
        }
        write
    };
    let receive = async {
        let mut buf = Vec::new();
        let mut answers = Vec::new();
        let mut closed = false;
        while answers.len() < wire.requests.max(1) {
            if wire.http2 {
                // Read to the end; the frames are hyper's to get right.
                let mut chunk = [0u8; 8192];
                match read.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => continue,
                }
            }
            match next_answer(&buf, closed, wire.method_head) {
                Some((answer, used)) => {
                    buf.drain(..used);
                    if answer.status >= 200 {
                        answers.push(answer);
                    }
                    continue;
                }
                None if closed => break,
                None => {}
            }
            let mut chunk = [0u8; 8192];
            match read.read(&mut chunk).await {
                Ok(0) | Err(_) => closed = true,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        if closed && !buf.is_empty() {
            assert!(
                next_answer(&buf, true, wire.method_head).is_none(),
                "unread answer bytes"
            );
        }
        answers
    };
    let (write, answers) = tokio::join!(send, receive);
    drop((write, read));
    if let Err(e) = served.await {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    answers
}

/// The first whole answer in `buf` (an interim 1xx answer included) and the bytes it
/// took; `None` until it is whole. With `closed`, an answer without a length ends there.
fn next_answer(buf: &[u8], closed: bool, head_only: bool) -> Option<(Answer, usize)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(at) = resp.parse(buf).expect("the gateway's answer parses")
    else {
        return None;
    };
    let status = resp.code.expect("a status");
    let header = |name: &str| {
        resp.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
    };
    let content_type = header("content-type");
    let rest = &buf[at..];
    if status < 200 || status == 204 || status == 304 || head_only {
        return Some((
            Answer {
                status,
                content_type,
                body: Vec::new(),
            },
            at,
        ));
    }
    let (body, used) = if header("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
        dechunk(rest)?
    } else if let Some(length) = header("content-length") {
        let n: usize = length.trim().parse().expect("a numeric content-length");
        if rest.len() < n {
            return None;
        }
        (rest[..n].to_vec(), n)
    } else if closed {
        (rest.to_vec(), rest.len())
    } else {
        return None;
    };
    Some((
        Answer {
            status,
            content_type,
            body,
        },
        at + used,
    ))
}

/// A chunked body's bytes and the length of its encoding; `None` until it is whole.
fn dechunk(mut rest: &[u8]) -> Option<(Vec<u8>, usize)> {
    let total = rest.len();
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).expect("a chunk size line");
        let size_hex = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16).expect("a hex chunk size");
        rest = &rest[line_end + 2..];
        if size == 0 {
            let end = rest.windows(2).position(|w| w == b"\r\n")?;
            rest = &rest[end + 2..];
            return Some((body, total - rest.len()));
        }
        if rest.len() < size + 2 {
            return None;
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// Statuses hyper answers by itself, with no body, for a request it cannot parse.
const PARSE_ERRORS: [u16; 4] = [400, 414, 431, 505];

fn judge(wire: &Wire, answers: &[Answer]) {
    assert!(
        answers.len() >= wire.requests.min(1),
        "no answer to a complete request: {}",
        String::from_utf8_lossy(&wire.bytes)
    );
    // A credential the client sent itself may come back (a model name echoed in a 404):
    // the client knew it already.
    let sent = |cred: &str| {
        wire.body.windows(cred.len()).any(|w| w == cred.as_bytes())
            || serde_json::from_slice::<serde_json::Value>(&wire.body)
                .is_ok_and(|v| crate::json::strings_contain(&v, cred))
    };
    // And once a client sent one, the request log holds it as the model it asked for,
    // which the operator may read back.
    for (cred, ever) in CREDENTIALS.iter().zip(&EVER_SENT) {
        if sent(cred) {
            ever.store(true, Ordering::Relaxed);
        }
    }
    let hidden: Vec<&str> = CREDENTIALS
        .iter()
        .zip(&EVER_SENT)
        .filter(|(_, ever)| !ever.load(Ordering::Relaxed))
        .map(|(cred, _)| *cred)
        .collect();
    for a in answers {
        for cred in &hidden {
            crate::json::assert_hidden(&a.body, cred, &format!("answer {}", a.status));
        }
        if a.status < 400 || (a.body.is_empty() && PARSE_ERRORS.contains(&a.status)) {
            continue;
        }
        let typed = serde_json::from_slice::<serde_json::Value>(&a.body)
            .ok()
            .and_then(|v| {
                let e = v.get("error")?;
                let kind = e.get("type").or_else(|| e.get("code"))?.as_str()?;
                Some(!kind.is_empty() && e.get("message").is_some_and(serde_json::Value::is_string))
            });
        assert_eq!(
            typed,
            Some(true),
            "an untyped error answer {} ({:?}): {}",
            a.status,
            a.content_type,
            String::from_utf8_lossy(&a.body)
        );
    }
}

/// Waits until nothing is held: no request in flight, every concurrency slot free, no
/// quota reservation. What is left after a bounded wait is a leak.
async fn settled(world: &World) {
    let state = &world.state;
    let held = || {
        let slots: usize = GATED.iter().map(|c| state.runtime.gates.load(c)).sum();
        (
            state.telemetry.metrics.in_flight.get(),
            slots,
            state.runtime.quota.reservations_open(),
        )
    };
    for _ in 0..500 {
        if held() == (0, 0, 0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "held after the connection closed (in flight, slots, reservations): {:?}",
        held()
    );
}
