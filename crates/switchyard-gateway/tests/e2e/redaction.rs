//! Upstream error text never carries a credential to the client (SPEC G5), whatever the
//! route: in an error body before any stream, in an error event inside a `200` stream,
//! and in a failed answer read off a stream — for each of the three client formats over
//! each of the three upstream formats.

use serde_json::{json, Value};
use switchyard_test_support::*;

/// A bearer token and a key-shaped token an upstream might quote beside the credential.
const BEARER: &str = "abcdefgh12345678";
const KEYLIKE: &str = "sk-proj-abcdefghijklmnop";

/// The text an upstream quotes, and what the client must see of it.
fn quote(credential: &str) -> String {
    format!("bad key {credential}; Authorization: Bearer {BEARER}; {KEYLIKE}")
}
const SEEN: &str = "bad key [REDACTED]; Authorization: Bearer [REDACTED]; [REDACTED]";

/// The three upstreams of the Responses configuration: target, credential, and the
/// upstream's own error body for a 400.
fn upstreams() -> [(&'static str, &'static str, Value); 3] {
    [
        (
            "alpha/mock-small",
            CRED_ALPHA,
            json!({"error": {"message": quote(CRED_ALPHA), "type": "invalid_request_error"}}),
        ),
        (
            "claude/claude-opus",
            CRED_CLAUDE,
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": quote(CRED_CLAUDE)}}),
        ),
        (
            "codex/gpt-5-codex",
            CRED_CODEX,
            json!({"error": {"message": quote(CRED_CODEX), "type": "invalid_request_error", "code": null}}),
        ),
    ]
}

#[derive(Debug, Clone, Copy)]
enum Client {
    Chat,
    Messages,
    Responses,
}

async fn send(h: &Harness, client: Client, model: &str, stream: bool) -> reqwest::Response {
    match client {
        Client::Chat => h.chat(chat_body(model, stream)).await,
        Client::Messages => h.messages(messages_body(model, stream)).await,
        Client::Responses => h.responses(responses_body(model, stream)).await,
    }
}

/// `text` shows the quote redacted, and none of what was hidden.
fn assert_redacted(text: &str, credential: &str, case: &str) {
    for secret in [credential, BEARER, KEYLIKE] {
        assert!(
            !text.contains(secret),
            "{case}: `{secret}` reached the client: {text}"
        );
    }
    assert!(text.contains(SEEN), "{case}: {text}");
}

#[tokio::test]
async fn error_text_is_redacted_in_every_format_pair_streamed_or_not() {
    let h = Harness::start_with(Config::responses, &[]).await;
    for (model, credential, body) in upstreams() {
        let upstream_model = model.split_once('/').unwrap().1;
        for client in [Client::Chat, Client::Messages, Client::Responses] {
            let case = format!("{client:?} over {model}");
            // An error body before any stream.
            h.rule(json!({"times": 1, "match": {"model": upstream_model}, "status": 400, "body": body}))
                .await;
            let r = send(&h, client, model, false).await;
            assert_eq!(r.status(), 400, "{case}");
            assert_redacted(
                &r.text().await.unwrap(),
                credential,
                &format!("{case}, body"),
            );
            // An error event inside a 200 stream, after two frames.
            h.rule(
                json!({"times": 1, "match": {"model": upstream_model}, "end_after_chunks": 2,
                          "stream_error": {"message": quote(credential)}}),
            )
            .await;
            let r = send(&h, client, model, true).await;
            assert_eq!(r.status(), 200, "{case}");
            let text = r.text().await.unwrap();
            assert_redacted(&text, credential, &format!("{case}, stream"));
            assert!(
                text.contains("Hello"),
                "{case}: the frames before the error: {text}"
            );
        }
    }
}

#[tokio::test]
async fn a_failed_answer_read_off_a_codex_backend_stream_is_redacted() {
    let h = Harness::start_with(
        |mock| {
            Config::responses(mock)
                .provider(
                    Provider::responses("codexsub", &format!("{mock}/backend-api/codex"))
                        .models(["gpt-5-codex"]),
                )
                .connection(
                    Connection::oauth("codex-sub", "codexsub")
                        .credential("oauth-token-0123456789")
                        .provider_specific_data(json!({"chatgptAccountId": "acct-42"}))
                        .disable_cooling(),
                )
        },
        &[],
    )
    .await;
    let failing = json!({"times": 1, "match": {"credential": "oauth-token-0123456789"},
                         "stream_error": {"message": format!("bad token oauth-token-0123456789 ({KEYLIKE})")}});
    // A Responses client that asked for no stream gets the failed Response as it is,
    // redacted.
    h.rule(failing.clone()).await;
    let r = h
        .responses(responses_body("codexsub/gpt-5-codex", false))
        .await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "failed");
    assert_eq!(
        body["error"]["message"],
        "bad token [REDACTED] ([REDACTED])"
    );
    // Streamed, the same.
    h.rule(failing).await;
    let r = h
        .responses(responses_body("codexsub/gpt-5-codex", true))
        .await;
    let text = r.text().await.unwrap();
    assert!(!text.contains("oauth-token-0123456789"), "{text}");
    assert!(text.contains("bad token [REDACTED] ([REDACTED])"), "{text}");
}
