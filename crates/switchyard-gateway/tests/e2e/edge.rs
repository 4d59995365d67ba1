//! The edge (SPEC O5) over raw sockets: header-read, body-read and keep-alive idle
//! timeouts (under paused time, with exact times), the connection cap, and shutdown with
//! half-sent requests.

use serde_json::{json, Value};
use std::time::Duration;
use switchyard_test_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Generous bound for "closed soon": far above every timeout the tests set, far below
/// the defaults they would otherwise run into.
const SOON: Duration = Duration::from_secs(5);

pub(crate) async fn connect(h: &Harness) -> TcpStream {
    TcpStream::connect(h.base.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Reads until the gateway closes the connection; what it sent.
pub(crate) async fn read_until_closed(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(SOON, s.read_to_end(&mut out))
        .await
        .expect("the gateway did not close the connection")
        .unwrap();
    String::from_utf8(out).unwrap()
}

/// Reads one HTTP/1.1 response with a `content-length`; its status and body.
pub(crate) async fn read_response(s: &mut TcpStream) -> (u16, String) {
    read_responses(s, 1).await.remove(0)
}

/// Reads `n` HTTP/1.1 responses with a `content-length` each (pipelined answers may
/// come in one read); their statuses and bodies, in order.
pub(crate) async fn read_responses(s: &mut TcpStream, n: usize) -> Vec<(u16, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut answers = Vec::new();
    while answers.len() < n {
        if let Some((answer, used)) = whole_response(&buf) {
            answers.push(answer);
            buf.drain(..used);
            continue;
        }
        let read = tokio::time::timeout(SOON, s.read(&mut chunk))
            .await
            .expect("no response")
            .unwrap();
        assert_ne!(read, 0, "closed before a whole response");
        buf.extend_from_slice(&chunk[..read]);
    }
    answers
}

/// The response at the start of `buf` when all of it is there, and its length.
fn whole_response(buf: &[u8]) -> Option<((u16, String), usize)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8(buf[..end].to_vec()).unwrap();
    let status = head[9..12].parse().unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().unwrap())
        })
        .expect("a content-length");
    let body = buf.get(end + 4..end + 4 + len)?;
    Some((
        (status, String::from_utf8(body.to_vec()).unwrap()),
        end + 4 + len,
    ))
}

async fn get(s: &mut TcpStream, path: &str) -> (u16, String) {
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: gw\r\n\r\n").as_bytes())
        .await
        .unwrap();
    read_response(s).await
}

/// The head of a chat request announcing a 100-byte body.
fn chat_head_for_100_bytes() -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {KEY}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n"
    )
}

/// The value of one series in the Prometheus text, read over `s`.
async fn metric(s: &mut TcpStream, series: &str) -> f64 {
    let (status, text) = get(s, "/metrics").await;
    assert_eq!(status, 200);
    sample(&text, series).unwrap_or_else(|| panic!("no sample `{series}` in:\n{text}"))
}

/// A stream of about one second (ten chunks 100 ms apart), read to its end in a task.
async fn one_second_stream(h: &Harness) -> tokio::task::JoinHandle<String> {
    h.rule(json!({"chunks": 10, "chunk_interval_ms": 100}))
        .await;
    let r = h.chat(chat_body("alpha/mock-small", true)).await;
    assert_eq!(r.status(), 200);
    tokio::spawn(async move { r.text().await.unwrap() })
}

/// `switchyard_client_timeouts_total` of one phase, read over a fresh connection.
async fn timeouts(h: &Harness, phase: &str) -> f64 {
    let mut probe = connect(h).await;
    let name = format!("switchyard_client_timeouts_total{{phase=\"{phase}\"}}");
    metric(&mut probe, &name).await
}

fn body_json(text: &str) -> Value {
    let (_, body) = text.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(body).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_silent_connection_is_closed_after_the_header_timeout() {
    let h = Harness::start_paused(
        Config::standard,
        &[("SWITCHYARD_HEADER_READ_TIMEOUT_MS", "300")],
    )
    .await;
    let mut silent = connect(&h).await;
    let opened = Instant::now();
    assert_eq!(read_until_closed(&mut silent).await, "");
    assert!(opened.elapsed() >= Duration::from_millis(250));
    // Under paused time: to the millisecond.
    assert_eq!(opened.elapsed(), Duration::from_millis(300));
    assert_eq!(timeouts(&h, "header").await, 1.0);
}

#[tokio::test(start_paused = true)]
async fn a_partial_request_head_is_closed_after_the_header_timeout() {
    let h = Harness::start_paused(
        Config::standard,
        &[("SWITCHYARD_HEADER_READ_TIMEOUT_MS", "300")],
    )
    .await;
    let mut partial = connect(&h).await;
    partial
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\n")
        .await
        .unwrap();
    let opened = Instant::now();
    assert_eq!(read_until_closed(&mut partial).await, "");
    assert!(opened.elapsed() >= Duration::from_millis(250));
    // Under paused time: to the millisecond.
    assert_eq!(opened.elapsed(), Duration::from_millis(300));
}

#[tokio::test(start_paused = true)]
async fn a_partial_next_head_on_a_kept_alive_connection_is_under_the_header_timeout() {
    let h = Harness::start_paused(
        Config::standard,
        &[
            ("SWITCHYARD_HEADER_READ_TIMEOUT_MS", "300"),
            ("SWITCHYARD_KEEPALIVE_IDLE_TIMEOUT_MS", "60000"),
        ],
    )
    .await;
    let mut s = connect(&h).await;
    assert_eq!(get(&mut s, "/api/monitoring/health").await.0, 200);
    s.write_all(b"GET /api/monitoring/health HTTP/1.1\r\nhost:")
        .await
        .unwrap();
    let sent = Instant::now();
    assert_eq!(read_until_closed(&mut s).await, "");
    assert!(sent.elapsed() >= Duration::from_millis(250));
    // Under paused time: to the millisecond.
    assert_eq!(sent.elapsed(), Duration::from_millis(300));
    assert_eq!(timeouts(&h, "header").await, 1.0);
    assert_eq!(timeouts(&h, "idle").await, 0.0);
}

#[tokio::test(start_paused = true)]
async fn a_partial_body_gets_408_request_body_timeout_and_the_connection_closes() {
    let h = Harness::start_paused(
        Config::standard,
        &[("SWITCHYARD_BODY_READ_TIMEOUT_MS", "300")],
    )
    .await;
    let mut s = connect(&h).await;
    s.write_all(chat_head_for_100_bytes().as_bytes())
        .await
        .unwrap();
    s.write_all(br#"{"model":"#).await.unwrap();
    let sent = Instant::now();
    let answer = read_until_closed(&mut s).await;
    assert!(sent.elapsed() >= Duration::from_millis(250));
    // Under paused time: to the millisecond.
    assert_eq!(sent.elapsed(), Duration::from_millis(300));
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert_eq!(
        body_json(&answer),
        json!({"error": {
            "message": "the request body was not complete within 300 ms (server.body_read_timeout_ms)",
            "type": "invalid_request_error",
            "code": "request_body_timeout",
            "param": null,
        }})
    );

    // The management API's JSON bodies are under the same deadline.
    let mut admin = connect(&h).await;
    admin
        .write_all(
            format!(
                "POST /api/keys HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {ADMIN}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"name\":"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let answer = read_until_closed(&mut admin).await;
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert_eq!(
        body_json(&answer)["error"]["code"],
        json!("request_body_timeout")
    );
    assert_eq!(timeouts(&h, "body").await, 2.0);
}

#[tokio::test(start_paused = true)]
async fn an_idle_keep_alive_connection_is_closed_while_a_busy_one_is_served() {
    let h = Harness::start_paused(
        Config::standard,
        &[("SWITCHYARD_KEEPALIVE_IDLE_TIMEOUT_MS", "300")],
    )
    .await;
    // A stream of about one second: longer than the idle timeout, busy all along.
    let busy = one_second_stream(&h).await;

    let mut idle = connect(&h).await;
    assert_eq!(get(&mut idle, "/api/monitoring/health").await.0, 200);
    let answered = Instant::now();
    assert_eq!(read_until_closed(&mut idle).await, "");
    assert!(answered.elapsed() >= Duration::from_millis(250));
    // Under paused time: to the millisecond.
    assert_eq!(answered.elapsed(), Duration::from_millis(300));

    let text = busy.await.unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert_eq!(text.matches("data: ").count(), 13);
}

#[tokio::test]
async fn over_the_connection_cap_a_new_connection_is_closed_while_open_ones_are_served() {
    let h = Harness::start_with(Config::standard, &[("SWITCHYARD_MAX_CONNECTIONS", "2")]).await;
    let mut first = connect(&h).await;
    let mut second = connect(&h).await;
    assert_eq!(get(&mut first, "/api/monitoring/health").await.0, 200);
    assert_eq!(get(&mut second, "/api/monitoring/health").await.0, 200);

    let mut third = connect(&h).await;
    third
        .write_all(b"GET /api/monitoring/health HTTP/1.1\r\nhost: gw\r\n\r\n")
        .await
        .unwrap_or(());
    let mut out = Vec::new();
    let read = tokio::time::timeout(SOON, third.read_to_end(&mut out))
        .await
        .expect("the connection over the cap was not closed");
    assert!(out.is_empty(), "the connection over the cap was answered");
    assert!(
        matches!(&read, Ok(0))
            || matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{read:?}"
    );

    assert_eq!(get(&mut first, "/api/monitoring/health").await.0, 200);
    assert_eq!(
        metric(&mut second, "switchyard_client_connections_refused_total").await,
        1.0
    );
    assert_eq!(
        metric(&mut second, "switchyard_client_connections").await,
        2.0
    );
    // A place frees up once an open connection closes.
    drop(first);
    let mut served = false;
    for _ in 0..250 {
        let mut s = connect(&h).await;
        let mut status = [0u8; 12];
        served = s
            .write_all(b"GET /api/monitoring/health HTTP/1.1\r\nhost: gw\r\n\r\n")
            .await
            .is_ok()
            && s.read_exact(&mut status).await.is_ok()
            && &status == b"HTTP/1.1 200";
        if served {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served, "no connection was served after one closed");
}

#[tokio::test(start_paused = true)]
async fn a_changed_header_timeout_applies_to_new_connections_only() {
    let h = Harness::start_paused(
        Config::standard,
        &[("SWITCHYARD_HEADER_READ_TIMEOUT_MS", "300")],
    )
    .await;
    let mut before = connect(&h).await;
    let opened = Instant::now();
    let closed = tokio::spawn(async move {
        assert_eq!(read_until_closed(&mut before).await, "");
        opened.elapsed()
    });
    let r = h
        .admin_send(
            reqwest::Method::PUT,
            "/api/settings/server.header_read_timeout_ms",
            json!({"value": 1000}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let mut after = connect(&h).await;
    let opened = Instant::now();
    assert_eq!(read_until_closed(&mut after).await, "");
    // Under paused time: to the millisecond.
    assert_eq!(opened.elapsed(), Duration::from_millis(1000));
    assert_eq!(closed.await.unwrap(), Duration::from_millis(300));
}

#[tokio::test]
async fn a_stored_connection_cap_waits_for_a_restart() {
    let h = Harness::start_with(Config::standard, &[("SWITCHYARD_MAX_CONNECTIONS", "3")]).await;
    let r = h
        .admin_send(
            reqwest::Method::PUT,
            "/api/settings/server.max_connections",
            json!({"value": 1}),
        )
        .await;
    assert_eq!(r.status(), 200);
    // The cap read at start (3) still holds: two more connections are served.
    let mut first = connect(&h).await;
    let mut second = connect(&h).await;
    assert_eq!(get(&mut first, "/api/monitoring/health").await.0, 200);
    assert_eq!(get(&mut second, "/api/monitoring/health").await.0, 200);
    assert_eq!(
        metric(&mut second, "switchyard_client_connections_refused_total").await,
        0.0
    );
}

#[tokio::test]
async fn shutdown_closes_half_sent_requests_at_once_and_serves_the_rest() {
    let mut h = Harness::start_with(
        Config::standard,
        &[("SWITCHYARD_SHUTDOWN_GRACE_MS", "30000")],
    )
    .await;
    let stream = one_second_stream(&h).await;

    let mut half_body = connect(&h).await;
    half_body
        .write_all(chat_head_for_100_bytes().as_bytes())
        .await
        .unwrap();
    half_body.write_all(br#"{"model":"#).await.unwrap();
    let mut half_head = connect(&h).await;
    half_head
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\n")
        .await
        .unwrap();
    let mut idle = connect(&h).await;
    assert_eq!(get(&mut idle, "/api/monitoring/health").await.0, 200);
    // Let the gateway read what was sent before it is told to stop.
    eventually("the half-sent body's request has started", || async {
        h.metrics()
            .await
            .lines()
            .any(|l| l == "switchyard_requests_in_flight 2")
    })
    .await;

    let stopping = Instant::now();
    h.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "shutdown took {:?}",
        stopping.elapsed()
    );
    let answer = read_until_closed(&mut half_body).await;
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert_eq!(
        body_json(&answer)["error"],
        json!({
            "message": "the gateway is shutting down and the request body was not complete; retry",
            "type": "server_error",
            "code": "gateway_shutdown",
            "param": null,
        })
    );
    assert_eq!(read_until_closed(&mut half_head).await, "");
    assert_eq!(read_until_closed(&mut idle).await, "");
    let text = stream.await.unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert_eq!(text.matches("data: ").count(), 13);
}

#[tokio::test]
async fn h2c_requests_are_served_and_a_late_h2_body_gets_408() {
    use futures_util::StreamExt;
    let h = Harness::start_with(
        Config::standard,
        &[("SWITCHYARD_BODY_READ_TIMEOUT_MS", "300")],
    )
    .await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let chat = || {
        h2.post(h.url("/v1/chat/completions"))
            .bearer_auth(KEY)
            .header("content-type", "application/json")
    };
    let r = chat()
        .json(&chat_body("alpha/mock-small", false))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.version(), r.status().as_u16()),
        (reqwest::Version::HTTP_2, 200)
    );

    let stalled = futures_util::stream::once(async {
        Ok::<_, std::io::Error>(bytes::Bytes::from_static(br#"{"model":"#))
    })
    .chain(futures_util::stream::pending());
    let r = chat()
        .body(reqwest::Body::wrap_stream(stalled))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 408);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["code"],
        json!("request_body_timeout")
    );

    let r = chat()
        .json(&chat_body("alpha/mock-small", true))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.version(), r.status().as_u16()),
        (reqwest::Version::HTTP_2, 200)
    );
    assert!(r.text().await.unwrap().ends_with("data: [DONE]\n\n"));
}
