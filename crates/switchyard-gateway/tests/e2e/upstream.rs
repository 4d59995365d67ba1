//! The upstream connections a request drives (`client.rs`): kept per I/O thread between
//! requests, and given up when the upstream closes them, without costing an attempt.

use serde_json::{json, Value};
use switchyard_test_support::*;

#[tokio::test]
async fn an_upstream_that_closes_its_connections_costs_no_attempt() {
    let h = Harness::start().await;
    // The next four answers close their connection: each following request finds the
    // kept connection closed and opens another.
    h.rule(json!({"times": 4, "headers": {"connection": "close"}}))
        .await;
    let mut statuses = Vec::new();
    for stream in [false, true, false, true, false, false] {
        let r = h.chat(chat_body("alpha/mock-small", stream)).await;
        statuses.push(r.status().as_u16());
        let text = r.text().await.unwrap();
        let whole = if stream {
            "data: [DONE]"
        } else {
            "Hello from the Switchyard mock"
        };
        assert!(text.contains(whole), "{text}");
    }
    assert_eq!(statuses, [200; 6]);
    assert_eq!(
        h.by_credential(CRED_ALPHA).await,
        6,
        "one upstream call each"
    );
    h.newest_log_row(6).await;
    let logs: Value = h.admin_json("/api/logs?limit=6").await;
    let seen: Vec<(u64, u64, bool)> = logs
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["status"].as_u64().unwrap(),
                row["attempts"].as_u64().unwrap(),
                row["failed_attempts"].as_array().is_none_or(Vec::is_empty),
            )
        })
        .collect();
    assert_eq!(seen, [(200, 1, true); 6]);
}

#[tokio::test]
async fn a_kept_connection_the_upstream_closed_is_replaced_without_costing_an_attempt() {
    let h = Harness::start().await;
    for round in 0..3 {
        let (s, _) = status_and_json(h.chat(chat_body("alpha/mock-small", false)).await).await;
        assert_eq!(s, 200, "round {round}");
        // The connection the request used is kept; the mock now closes it.
        h.mock_close_connections().await;
    }
    let r = h.chat(chat_body("alpha/mock-small", true)).await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("data: [DONE]"));
    assert_eq!(h.by_credential(CRED_ALPHA).await, 4);
    h.newest_log_row(4).await;
    let logs: Value = h.admin_json("/api/logs?limit=4").await;
    let attempts: Vec<u64> = logs
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["attempts"].as_u64().unwrap())
        .collect();
    assert_eq!(attempts, [1; 4]);
}

/// An upstream that answers every request on a connection with the next of `answers`
/// (raw bytes: the client's conformance with what providers may send), closing the
/// connection after an answer that says so or has no length. Counts the connections.
struct RawUpstream {
    url: String,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl RawUpstream {
    async fn start(answers: Vec<Vec<u8>>) -> Self {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&connections);
        let answers = std::sync::Arc::new(std::sync::Mutex::new(answers.into_iter()));
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let answers = std::sync::Arc::clone(&answers);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 8192];
                    loop {
                        // One request: its head, then its content-length of body.
                        let (end, len) = loop {
                            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                                let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                                let len: usize = head
                                    .lines()
                                    .find_map(|l| l.strip_prefix("content-length: "))
                                    .map_or(0, |v| v.trim().parse().unwrap());
                                break (end + 4, len);
                            }
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        };
                        while buf.len() < end + len {
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        buf.drain(..end + len);
                        let Some(answer) = answers.lock().unwrap().next() else {
                            return;
                        };
                        if s.write_all(&answer).await.is_err() {
                            return;
                        }
                        // Interim heads included: none of the bodies says these.
                        let text = String::from_utf8_lossy(&answer).to_lowercase();
                        let framed = text.contains("content-length")
                            || text.contains("transfer-encoding: chunked");
                        if !framed || text.contains("connection: close") {
                            return;
                        }
                    }
                });
            }
        });
        Self { url, connections }
    }

    fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A chat completion saying `text`, as JSON.
fn completion(text: &str) -> String {
    json!({
        "id": "c1", "object": "chat.completion", "created": 1, "model": "mock-small",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    })
    .to_string()
}

/// `body` in chunks of at most `size` bytes, each size line with an extension, and a
/// trailer field after the last chunk.
fn chunked(body: &str, size: usize) -> String {
    let mut out = String::new();
    for piece in body.as_bytes().chunks(size) {
        out.push_str(&format!("{:x};ext=1\r\n", piece.len()));
        out.push_str(std::str::from_utf8(piece).unwrap());
        out.push_str("\r\n");
    }
    out.push_str("0\r\nx-trailer: t\r\n\r\n");
    out
}

#[tokio::test]
async fn answers_delimited_every_way_an_upstream_may_are_read_whole() {
    let one = completion("one");
    let two = completion("two");
    let three = completion("three");
    let four = completion("four");
    let raw = RawUpstream::start(vec![
        // Content-Length, kept alive.
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{one}",
            one.len()
        )
        .into_bytes(),
        // Interim answers first, then chunks with extensions and a trailer.
        format!(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n{}",
            chunked(&two, 7)
        )
        .into_bytes(),
        // HTTP/1.0 kept alive.
        format!(
            "HTTP/1.0 200 OK\r\ncontent-type: application/json\r\nconnection: keep-alive\r\ncontent-length: {}\r\n\r\n{three}",
            three.len()
        )
        .into_bytes(),
        // No length: the body ends with the connection.
        format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{four}").into_bytes(),
    ])
    .await;
    // One I/O thread: one pool of kept upstream connections.
    let h = Harness::start_with(
        |_| Config::standard(&raw.url),
        &[("SWITCHYARD_IO_THREADS", "1")],
    )
    .await;
    let mut said = Vec::new();
    for _ in 0..4 {
        let (status, body) =
            status_and_json(h.chat(chat_body("alpha/mock-small", false)).await).await;
        assert_eq!(status, 200, "{body}");
        said.push(
            body["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(said, ["one", "two", "three", "four"]);
    // The first three answers kept their connection; the fourth closed it.
    assert_eq!(raw.connections(), 1);
    h.newest_log_row(4).await;
    let logs: Value = h.admin_json("/api/logs?limit=4").await;
    let tokens: Vec<(u64, u64)> = logs
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["attempts"].as_u64().unwrap(),
                row["completion_tokens"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(tokens, [(1, 2); 4]);
}

#[tokio::test]
async fn answers_two_parsers_could_delimit_differently_fail_the_attempt() {
    let good = completion("fine");
    let broken_chunks = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n5\n{}",
        &good[..5]
    );
    for answer in [
        format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\ntransfer-encoding: chunked\r\n\r\n{good}",
            good.len()
        ),
        format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {0}\r\ncontent-length: {0}\r\n\r\n{good}",
            good.len()
        ),
        format!("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n{good}"),
        "HTTP/1.1 200 OK\r\nx-folded: a\r\n b\r\ncontent-length: 2\r\n\r\n{}".to_owned(),
        broken_chunks,
        // The connection ends before the length is read.
        format!("HTTP/1.1 200 OK\r\ncontent-length: 999\r\nconnection: close\r\n\r\n{good}"),
    ] {
        let raw = RawUpstream::start(vec![answer.clone().into_bytes()]).await;
        let h = Harness::start_with(|_| Config::standard(&raw.url), &[]).await;
        let (status, body) =
            status_and_json(h.chat(chat_body("alpha/mock-small", false)).await).await;
        assert_eq!(status, 502, "{answer:?}: {body}");
        assert_eq!(
            body["error"]["code"], "upstream_connection_reset",
            "{answer:?}: {body}"
        );
    }
}
