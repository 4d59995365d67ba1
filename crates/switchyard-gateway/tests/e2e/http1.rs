//! The gateway's own HTTP/1.1 server over raw sockets (issue 29): framing that two
//! parsers could read differently (request smuggling) is refused and the connection
//! closed, and the rest of HTTP/1.1 that clients use works — pipelining, chunked
//! request bodies, `Expect: 100-continue`, HTTP/1.0, `HEAD`, and a client that closes
//! its side. HTTP/2 with prior knowledge is in `edge`.

use crate::edge::{connect, read_response, read_responses, read_until_closed};
use serde_json::{json, Value};
use switchyard_test_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A request the gateway answers when it reads it: appended after each refused one, it
/// must go unanswered.
const NEXT: &str = "GET /api/monitoring/health HTTP/1.1\r\nhost: gw\r\n\r\n";

/// Sends `bytes` on a new connection; everything the gateway sent until it closed.
async fn send_raw(h: &Harness, bytes: &[u8]) -> String {
    let mut s = connect(h).await;
    s.write_all(bytes).await.unwrap();
    read_until_closed(&mut s).await
}

/// A chat request's head with `fields` (each ending in CRLF) and the head's end.
fn chat_head(fields: &str) -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {KEY}\r\ncontent-type: application/json\r\n{fields}\r\n"
    )
}

fn chat_json() -> String {
    chat_body("alpha/mock-small", false).to_string()
}

/// The status line and the fields of the first answer in `text`, the `date` left out.
fn head_without_date(text: &str) -> String {
    let (head, _) = text.split_once("\r\n\r\n").unwrap();
    head.lines()
        .filter(|l| !l.starts_with("date: "))
        .collect::<Vec<_>>()
        .join("\n")
}

fn body_json(text: &str) -> Value {
    let (_, body) = text.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(body).unwrap()
}

#[tokio::test]
async fn framing_that_could_smuggle_a_request_is_refused_and_the_connection_closed() {
    let h = Harness::start().await;
    let post = "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\n";
    let cases = [
        // Both framings: one parser would take the length, another the chunks.
        (
            format!("{post}content-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"),
            "400 Bad Request",
        ),
        (
            format!("{post}transfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n0\r\n\r\n"),
            "400 Bad Request",
        ),
        (
            format!("{post}content-length: 5\r\ncontent-length: 6\r\n\r\nhello"),
            "400 Bad Request",
        ),
        (
            format!("{post}content-length: 5, 5\r\n\r\nhello"),
            "400 Bad Request",
        ),
        (
            format!("{post}content-length: +5\r\n\r\nhello"),
            "400 Bad Request",
        ),
        (
            format!("{post}content-length: 0x5\r\n\r\nhello"),
            "400 Bad Request",
        ),
        // A coding the gateway does not read, alone or before chunked.
        (
            format!("{post}transfer-encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
            "501 Not Implemented",
        ),
        (
            format!(
                "{post}transfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"
            ),
            "501 Not Implemented",
        ),
        (
            "POST /v1/chat/completions HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"
                .to_string(),
            "400 Bad Request",
        ),
        // Line folding, bytes not allowed in a field, and Host missing or twice.
        (
            "GET /api/monitoring/health HTTP/1.1\r\nhost: gw\r\nx-folded: a\r\n b\r\n\r\n"
                .to_string(),
            "400 Bad Request",
        ),
        (
            "GET /api/monitoring/health HTTP/1.1\r\nhost: gw\r\nx-a: a\rb\r\n\r\n".to_string(),
            "400 Bad Request",
        ),
        (
            "GET /api/monitoring/health HTTP/1.1\r\nx-a: a\r\n\r\n".to_string(),
            "400 Bad Request",
        ),
        (
            "GET /api/monitoring/health HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n".to_string(),
            "400 Bad Request",
        ),
        (
            "GET api/monitoring/health HTTP/1.1\r\nhost: gw\r\n\r\n".to_string(),
            "400 Bad Request",
        ),
        (
            "GET /api/monitoring/health HTTP/2.0\r\nhost: gw\r\n\r\n".to_string(),
            "505 HTTP Version Not Supported",
        ),
    ];
    for (request, status) in cases {
        let answer = send_raw(&h, format!("{request}{NEXT}").as_bytes()).await;
        assert_eq!(
            head_without_date(&answer),
            format!("HTTP/1.1 {status}\ncontent-length: 0\nconnection: close"),
            "{request:?}"
        );
        // Only the refusal: the request after it was not read.
        assert_eq!(
            answer.matches("HTTP/1.1").count(),
            1,
            "{request:?}: {answer}"
        );
        assert!(answer.ends_with("\r\n\r\n"), "{request:?}: {answer}");
    }
}

#[tokio::test]
async fn broken_chunked_framing_in_a_body_is_a_typed_400_and_closes_the_connection() {
    let h = Harness::start().await;
    for (chunks, reason) in [
        (
            "5\n{\"a\":\r\n0\r\n\r\n",
            "a line in chunked framing does not end in CRLF",
        ),
        (
            "5\r\n{\"a\":\n0\r\n\r\n",
            "a line in chunked framing does not end in CRLF",
        ),
        (
            "zz\r\n{\"a\":\r\n0\r\n\r\n",
            "a chunk size is not a hexadecimal number",
        ),
    ] {
        let request = format!(
            "{}{chunks}{NEXT}",
            chat_head("transfer-encoding: chunked\r\n")
        );
        let answer = send_raw(&h, request.as_bytes()).await;
        assert!(
            answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{answer}"
        );
        assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
        assert_eq!(
            body_json(&answer)["error"],
            json!({
                "message": format!("could not read the request body: the request body's chunked framing is broken: {reason}"),
                "type": "invalid_request_error",
                "code": "invalid_body",
                "param": null,
            })
        );
        assert_eq!(answer.matches("HTTP/1.1").count(), 1, "{answer}");
    }
}

#[tokio::test]
async fn an_oversized_head_gets_431_and_the_connection_closes() {
    let h = Harness::start().await;
    // Longer than the 64 kB a head may take, in one field and in many.
    let long = format!(
        "GET /api/monitoring/health HTTP/1.1\r\nhost: gw\r\nx-big: {}\r\n\r\n",
        "a".repeat(70_000)
    );
    let many = format!(
        "GET /api/monitoring/health HTTP/1.1\r\nhost: gw\r\n{}\r\n",
        (0..101)
            .map(|i| format!("x-{i}: v\r\n"))
            .collect::<String>()
    );
    for request in [long, many] {
        let answer = send_raw(&h, request.as_bytes()).await;
        assert_eq!(
            head_without_date(&answer),
            "HTTP/1.1 431 Request Header Fields Too Large\ncontent-length: 0\nconnection: close"
        );
    }
    // A head that never ends is cut at the limit too, without waiting for its end.
    let mut s = connect(&h).await;
    s.write_all(b"GET /api/monitoring/health HTTP/1.1\r\nhost: gw\r\nx-big: ")
        .await
        .unwrap();
    s.write_all(&[b'a'; 70_000]).await.unwrap();
    let answer = read_until_closed(&mut s).await;
    assert!(
        answer.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        "{answer}"
    );
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_on_one_connection() {
    let h = Harness::start().await;
    let body = chat_json();
    let chat = format!(
        "{}{body}",
        chat_head(&format!("content-length: {}\r\n", body.len()))
    );
    let mut s = connect(&h).await;
    // Four requests in one write: a body-less one, a chat with its body, and two more.
    s.write_all(format!("{NEXT}{chat}{NEXT}{NEXT}").as_bytes())
        .await
        .unwrap();
    let answers = read_responses(&mut s, 4).await;
    let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
    assert_eq!(statuses, [200, 200, 200, 200]);
    let completion: Value = serde_json::from_str(&answers[1].1).unwrap();
    assert_eq!(completion["object"], "chat.completion");
    assert_eq!(
        serde_json::from_str::<Value>(&answers[3].1).unwrap()["status"],
        "ok"
    );
    // The connection is still open for more.
    s.write_all(NEXT.as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut s).await.0, 200);
}

#[tokio::test]
async fn a_chunked_request_body_arriving_in_pieces_is_read_whole() {
    let h = Harness::start().await;
    let body = chat_json();
    let (a, b) = body.split_at(10);
    let mut s = connect(&h).await;
    s.write_all(chat_head("transfer-encoding: chunked\r\n").as_bytes())
        .await
        .unwrap();
    s.write_all(format!("{:x};ext=1\r\n{a}\r\n", a.len()).as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    s.write_all(format!("{:X}\r\n{b}\r\n0\r\nx-trailer: t\r\n\r\n", b.len()).as_bytes())
        .await
        .unwrap();
    let (status, text) = read_response(&mut s).await;
    assert_eq!(status, 200, "{text}");
    let completion: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(completion["object"], "chat.completion");
    // The body was read to its end: the connection takes the next request.
    s.write_all(NEXT.as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut s).await.0, 200);
    let sent = h.mock_requests().await;
    assert_eq!(sent.len(), 1);
}

#[tokio::test]
async fn expect_100_continue_is_answered_when_the_body_is_wanted() {
    let h = Harness::start().await;
    let body = chat_json();
    let mut s = connect(&h).await;
    s.write_all(
        chat_head(&format!(
            "content-length: {}\r\nexpect: 100-continue\r\n",
            body.len()
        ))
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut interim = [0u8; 25];
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        s.read_exact(&mut interim),
    )
    .await
    .expect("no 100 Continue")
    .unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(body.as_bytes()).await.unwrap();
    let (status, text) = read_response(&mut s).await;
    assert_eq!(status, 200, "{text}");

    // Refused before its body is read (an unknown key): no 100, and the client that
    // waited never sends it.
    let mut s = connect(&h).await;
    s.write_all(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer sk-unknown\r\ncontent-type: application/json\r\ncontent-length: {}\r\nexpect: 100-continue\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let answer = read_until_closed(&mut s).await;
    assert!(
        answer.starts_with("HTTP/1.1 401 Unauthorized\r\n"),
        "{answer}"
    );
    assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    assert_eq!(h.mock_requests().await.len(), 1);
}

#[tokio::test]
async fn an_answer_before_the_body_is_read_still_reaches_a_client_that_keeps_sending() {
    let h = Harness::start().await;
    let mut s = connect(&h).await;
    s.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer sk-unknown\r\ncontent-type: application/json\r\ncontent-length: 300000\r\n\r\n",
    )
    .await
    .unwrap();
    // The client goes on sending the body the gateway will not read, and reads only
    // after the gateway has answered: the answer does not wait for the body, and the
    // connection closes after it (what is left of the body cannot start a request).
    s.write_all(&[b' '; 200_000]).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let answer = read_until_closed(&mut s).await;
    assert!(
        answer.starts_with("HTTP/1.1 401 Unauthorized\r\n"),
        "{answer}"
    );
    assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
    assert_eq!(body_json(&answer)["error"]["code"], "invalid_api_key");
}

#[tokio::test]
async fn http_1_0_clients_get_close_delimited_or_kept_alive_answers() {
    let h = Harness::start().await;
    // No keep-alive asked: the answer says close, and the connection closes.
    let answer = send_raw(&h, b"GET /api/monitoring/health HTTP/1.0\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
    assert_eq!(body_json(&answer)["status"], "ok");

    // Keep-alive asked: said back, and the connection takes a second request.
    let mut s = connect(&h).await;
    let ask = b"GET /api/monitoring/health HTTP/1.0\r\nconnection: keep-alive\r\n\r\n";
    s.write_all(ask).await.unwrap();
    assert_eq!(read_response(&mut s).await.0, 200);
    s.write_all(ask).await.unwrap();
    assert_eq!(read_response(&mut s).await.0, 200);

    // A stream has no length: it is not chunked (HTTP/1.0 has no chunks) but ends
    // with the connection.
    let body = chat_body("alpha/mock-small", true).to_string();
    let answer = send_raw(
        &h,
        format!(
            "POST /v1/chat/completions HTTP/1.0\r\nauthorization: Bearer {KEY}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await;
    let (head, stream) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(!head.contains("transfer-encoding"), "{head}");
    assert!(!head.contains("content-length"), "{head}");
    assert!(head.contains("\r\nconnection: close"), "{head}");
    assert!(stream.starts_with("data: {"), "{stream}");
    assert!(stream.ends_with("data: [DONE]\n\n"), "{stream}");
}

#[tokio::test]
async fn a_streamed_answer_is_chunked_and_a_head_request_gets_no_body() {
    let h = Harness::start().await;
    let body = chat_body("alpha/mock-small", true).to_string();
    let request = format!(
        "{}{body}",
        chat_head(&format!(
            "content-length: {}\r\nconnection: close\r\n",
            body.len()
        ))
    );
    let answer = send_raw(&h, request.as_bytes()).await;
    let (head, chunked) = answer.split_once("\r\n\r\n").unwrap();
    assert!(
        head.contains("\r\ntransfer-encoding: chunked\r\n"),
        "{head}"
    );
    assert!(head.ends_with("\r\nconnection: close"), "{head}");
    // Undo the chunks: sizes in hex, each chunk's data, the last chunk empty.
    let mut rest = chunked;
    let mut stream = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").unwrap();
        let size = usize::from_str_radix(size, 16).unwrap();
        if size == 0 {
            assert_eq!(after, "\r\n");
            break;
        }
        stream.push_str(&after[..size]);
        assert_eq!(&after[size..size + 2], "\r\n");
        rest = &after[size + 2..];
    }
    assert!(stream.ends_with("data: [DONE]\n\n"), "{stream}");

    let answer = send_raw(
        &h,
        b"HEAD /api/monitoring/health HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(
        answer.ends_with("\r\n\r\n"),
        "a HEAD answer has no body: {answer}"
    );
}

#[tokio::test]
async fn a_client_that_closes_its_side_mid_stream_ends_the_upstream_request() {
    let h = Harness::start().await;
    h.rule(json!({"stall_after_chunks": 1})).await;
    let body = chat_body("alpha/mock-small", true).to_string();
    let mut s = connect(&h).await;
    s.write_all(
        format!(
            "{}{body}",
            chat_head(&format!("content-length: {}\r\n", body.len()))
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut first = [0u8; 1024];
    let n = s.read(&mut first).await.unwrap();
    assert!(first[..n].starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert_eq!(h.mock_stats().await["in_flight"], 1);
    // Half-closed: the client sends nothing more (FIN) but could still read.
    s.shutdown().await.unwrap();
    eventually("the mock sees the upstream request end", || async {
        h.mock_stats().await["in_flight"] == 0
    })
    .await;
    eventually("the request log records the disconnect", || async {
        let logs: Value = h.admin_json("/api/logs").await;
        logs[0]["status"] == 499 && logs[0]["error_code"] == "client_closed_request"
    })
    .await;
}

#[tokio::test]
async fn an_inference_route_reads_its_fields_in_any_case_and_no_other_reaches_upstream() {
    let h = Harness::start_with(Config::anthropic, &[]).await;
    let body = messages_body("claude/claude-opus", false).to_string();
    let request = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: gw\r\nX-API-Key: {KEY}\r\nContent-Type: application/json\r\n\
         Anthropic-Version: {ANTHROPIC_VERSION}\r\nANTHROPIC-BETA: b-one\r\nX-Switchyard-Trace: 1\r\n\
         X-Claude-Code-Session-Id: sess-1\r\nX-App: cli\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = send_raw(&h, request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    let (head, _) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.contains("\r\nx-switchyard-route: "), "{head}");
    let seen = h.mock_requests().await;
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["credential"], CRED_CLAUDE);
    assert_eq!(
        seen[0]["headers"],
        json!({"anthropic-version": ANTHROPIC_VERSION, "anthropic-beta": "b-one"})
    );
    // The session header was read: the session is pinned.
    let pins = h.admin_list("/api/sessions").await;
    assert_eq!(pins.len(), 1, "{pins:?}");
    assert_eq!(pins[0]["key_id"], "k1");
}

#[tokio::test]
async fn an_inference_route_is_taken_with_a_query_or_in_absolute_form_too() {
    // Claude Code asks for `/v1/messages?beta=true`; a proxy-style client may send the
    // absolute form. Both reach the route, which reads its fields as ever.
    let h = Harness::start().await;
    let body = chat_json();
    for target in [
        "/v1/chat/completions",
        "/v1/chat/completions?beta=true",
        "http://gw/v1/chat/completions",
    ] {
        let request = format!(
            "POST {target} HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {KEY}\r\n\
             x-switchyard-trace: 1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let answer = send_raw(&h, request.as_bytes()).await;
        assert!(
            answer.starts_with("HTTP/1.1 200 OK\r\n"),
            "{target}: {answer}"
        );
        let head = head_without_date(&answer);
        assert!(head.contains("\nx-switchyard-route: "), "{target}: {head}");
        assert_eq!(body_json(&answer)["object"], "chat.completion", "{target}");
    }
    // A target no route takes, with or without a query, is the router's: not found.
    for target in ["/v1/chat/completion", "/v1/chat/completion?x=1"] {
        let request = format!(
            "POST {target} HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {KEY}\r\n\
             content-length: 0\r\nconnection: close\r\n\r\n"
        );
        let answer = send_raw(&h, request.as_bytes()).await;
        assert!(
            answer.starts_with("HTTP/1.1 404 Not Found\r\n"),
            "{target}: {answer}"
        );
    }
    assert_eq!(h.mock_requests().await.len(), 3);
}
