//! Transport faults of a completion, over real sockets: a TCP reset before or after the
//! headers, a stall after the headers, and a body trickled a few bytes at a time.

#![expect(clippy::unwrap_used, reason = "test code")]

use serde_json::{json, Value};
use std::io::ErrorKind;
use std::time::Duration;
use switchyard_mock::MockServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn chat(stream: bool) -> Value {
    json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "abcd"}]})
}

async fn add_rule(mock: &MockServer, rule: Value) {
    let r = reqwest::Client::new()
        .post(format!("{}/_mock/rules", mock.base_url()))
        .json(&rule)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

async fn send(mock: &MockServer, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", mock.base_url()))
        .bearer_auth("k")
        .json(body)
        .send()
        .await
        .unwrap()
}

/// The body of a fault-free answer to `body`.
async fn plain(mock: &MockServer, body: &Value) -> Vec<u8> {
    send(mock, body).await.bytes().await.unwrap().to_vec()
}

/// Sends `body` over a raw connection (`connection: close`) and reads until the mock
/// closes it, for at most 10 s: what arrived, and how the connection ended (`None`: a
/// clean end of stream).
async fn raw(mock: &MockServer, body: &Value) -> (String, Option<ErrorKind>) {
    tokio::time::timeout(Duration::from_secs(10), exchange(mock, body))
        .await
        .unwrap()
}

async fn exchange(mock: &MockServer, body: &Value) -> (String, Option<ErrorKind>) {
    let mut s = TcpStream::connect(mock.addr).await.unwrap();
    let body = body.to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: mock\r\nconnection: close\r\nauthorization: Bearer k\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(format!("{head}{body}").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        match s.read(&mut buf).await {
            Ok(0) => break None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => break Some(e.kind()),
        }
    };
    (String::from_utf8(got).unwrap(), end)
}

/// The lines of a response head without its `date`, sorted after the status line; `None`
/// when anything follows the head.
fn head_alone(text: &str) -> Option<Vec<String>> {
    let head = text.strip_suffix("\r\n\r\n")?;
    if head.contains("\r\n\r\n") {
        return None;
    }
    let mut lines = head.split("\r\n");
    let status = lines.next()?.to_owned();
    let mut fields: Vec<String> = lines
        .filter(|l| !l.starts_with("date: "))
        .map(str::to_owned)
        .collect();
    fields.sort();
    Some(std::iter::once(status).chain(fields).collect())
}

#[tokio::test]
async fn a_reset_before_the_headers_is_a_tcp_reset_with_nothing_sent() {
    let mock = MockServer::start_local().await.unwrap();
    add_rule(&mock, json!({"times": 1, "reset": "before_headers"})).await;
    assert_eq!(
        raw(&mock, &chat(false)).await,
        (String::new(), Some(ErrorKind::ConnectionReset))
    );
}

#[tokio::test]
async fn a_reset_after_the_headers_sends_the_whole_head_then_a_tcp_reset() {
    let mock = MockServer::start_local().await.unwrap();
    let length = plain(&mock, &chat(false)).await.len();
    add_rule(&mock, json!({"times": 2, "reset": "after_headers"})).await;
    let (text, end) = raw(&mock, &chat(false)).await;
    assert_eq!(end, Some(ErrorKind::ConnectionReset));
    assert_eq!(
        head_alone(&text).unwrap(),
        [
            "HTTP/1.1 200 OK".to_owned(),
            "connection: close".to_owned(),
            format!("content-length: {length}"),
            "content-type: application/json".to_owned(),
        ]
    );
    let (text, end) = raw(&mock, &chat(true)).await;
    assert_eq!(end, Some(ErrorKind::ConnectionReset));
    assert_eq!(
        head_alone(&text).unwrap(),
        [
            "HTTP/1.1 200 OK",
            "cache-control: no-cache",
            "connection: close",
            "content-type: text/event-stream",
            "transfer-encoding: chunked",
        ]
    );
    // The rule is used up: the next answer is whole.
    let (text, end) = raw(&mock, &chat(false)).await;
    assert_eq!(end, None);
    assert!(head_alone(&text).is_none());
}

#[tokio::test]
async fn a_stall_after_the_headers_sends_nothing_more_and_holds_the_request_open() {
    let mock = MockServer::start_local().await.unwrap();
    let length = plain(&mock, &chat(false)).await.len();
    add_rule(&mock, json!({"times": 2, "stall": "after_headers"})).await;
    let stats = |mock: &MockServer| {
        let url = format!("{}/_mock/stats", mock.base_url());
        async move {
            let stats: Value = reqwest::get(url).await.unwrap().json().await.unwrap();
            stats["in_flight"].as_u64().unwrap()
        }
    };
    for (stream, content_type) in [(false, "application/json"), (true, "text/event-stream")] {
        let mut r = send(&mock, &chat(stream)).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], content_type);
        let announced = r
            .headers()
            .get("content-length")
            .map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(announced, (!stream).then(|| length.to_string()));
        // The stall never ends on its own: waiting longer only takes longer.
        let next = tokio::time::timeout(Duration::from_millis(300), r.chunk()).await;
        assert!(next.is_err(), "{stream}: {next:?}");
        assert_eq!(stats(&mock).await, 1);
        drop(r);
        // Once the client gives up, the request is no longer in flight.
        let mut left = stats(&mock).await;
        for _ in 0..250 {
            if left == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            left = stats(&mock).await;
        }
        assert_eq!(left, 0, "{stream}");
    }
}

/// Reads `r`'s body: each piece as it arrived.
async fn pieces(mut r: reqwest::Response) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(piece) = r.chunk().await.unwrap() {
        out.push(piece.to_vec());
    }
    out
}

#[tokio::test]
async fn a_trickle_sends_the_whole_answer_a_few_bytes_at_a_time() {
    let mock = MockServer::start_local().await.unwrap();
    let whole = plain(&mock, &chat(false)).await;
    add_rule(
        &mock,
        json!({"times": 1, "trickle_bytes": 16, "trickle_interval_ms": 2}),
    )
    .await;
    let r = send(&mock, &chat(false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-length"], whole.len().to_string());
    let got = pieces(r).await;
    // Each write is at most 16 bytes; the reader may see two together.
    assert!(got.iter().all(|p| p.len() <= 16), "{got:?}");
    assert_eq!(got.concat(), whole);
    // A (short) stream trickled one byte at a time: each byte its own HTTP chunk.
    let mut body = chat(true);
    body["max_tokens"] = json!(1);
    let whole = plain(&mock, &body).await;
    add_rule(
        &mock,
        json!({"times": 1, "trickle_bytes": 1, "trickle_interval_ms": 1}),
    )
    .await;
    let got = pieces(send(&mock, &body).await).await;
    assert_eq!(got.len(), whole.len());
    assert!(got.iter().all(|p| p.len() == 1));
    assert_eq!(got.concat(), whole);
}

#[tokio::test]
async fn a_trickle_of_zero_bytes_is_refused() {
    let mock = MockServer::start_local().await.unwrap();
    let r = reqwest::Client::new()
        .post(format!("{}/_mock/rules", mock.base_url()))
        .json(&json!({"trickle_bytes": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
}
