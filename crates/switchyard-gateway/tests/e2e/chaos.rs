//! Chaos end to end (SPEC R1, R10; issue 22): a provider that fails at the transport —
//! slow before its headers, a 503, a reset before its headers, a stall after them, a
//! reset after them, a body that trickles — beside a healthy one, for chat, Anthropic
//! Messages and Responses clients over an OpenAI-format upstream. Every request ends in
//! a whole answer or a typed error: a stream commits to the client only on its first
//! output (SPEC R11), so one that fails after its headers fails over unseen. The
//! failures count toward the breaker, which opens, keeps the provider out, lets a probe
//! through after its reset timeout and closes once the provider answers whole again.
//!
//! The tests of faults after the headers run under tokio's paused time (the deadlines)
//! and a `ManualClock` (the breaker), so each takes milliseconds and every time is exact.

use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use switchyard_gateway::clock::{Clock, ManualClock, SystemClock};
use switchyard_test_support::*;
use tokio::time::Instant;

const FLAKY: &str = "cred-flaky";
const STEADY: &str = "cred-steady";
/// `upstream.first_byte_timeout_ms`: the budget for the headers and, when not streamed,
/// the whole answer.
const FIRST_BYTE_MS: u32 = 300;
/// `upstream.stream_idle_timeout_ms`: the longest silence inside a stream.
const IDLE_MS: u32 = 1_000;
/// A local provider's breaker: open after 2 counted failures, probe after 15 s.
const RESET: Duration = Duration::from_secs(15);
/// The canned answer's text.
const TEXT: &str = "Hello from the Switchyard mock";

/// A local provider that fails in every way, a healthy one beside it, and a combo.
/// Without session affinity: the simulated Codex client sends a session id, and a pin
/// moved to the healthy provider after a failover would keep the next requests off the
/// flaky one (SPEC R15, tested in `affinity.rs`).
pub fn chaos(mock_url: &str) -> Config {
    Config::new()
        .setting("sessionAffinityTtlMs", 0)
        .setting("upstream.first_byte_timeout_ms", FIRST_BYTE_MS)
        .setting("upstream.stream_idle_timeout_ms", IDLE_MS)
        .provider(Provider::openai("flaky", mock_url).models(["mock-small"]))
        .provider(Provider::openai("steady", mock_url).models(["mock-small"]))
        .connection(
            Connection::local("flaky-1", "flaky")
                .credential(FLAKY)
                .disable_cooling(),
        )
        .connection(Connection::apikey("steady-1", "steady").credential(STEADY))
        .combo(Combo::priority(
            "both",
            ["flaky/mock-small", "steady/mock-small"],
        ))
        .key(Key::new("k1", "tester", KEY))
}

fn ms(n: u32) -> Duration {
    Duration::from_millis(n.into())
}

/// A gateway on paused time with a manual wall clock.
async fn start() -> (Harness, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let h = Harness::start_paused_with_clock(chaos, &[], clock.clone()).await;
    (h, clock)
}

/// `fault` for the flaky provider's next request.
async fn once(h: &Harness, mut fault: Value) {
    fault["times"] = json!(1);
    fault["match"] = json!({"credential": FLAKY});
    h.rule(fault).await;
}

/// The flaky provider's breaker as health shows it: state and consecutive failures.
async fn breaker(h: &Harness) -> Option<(String, u64)> {
    let health = h.health().await;
    health["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["provider"] == "flaky")
        .map(|b| {
            (
                b["state"].as_str().unwrap().to_owned(),
                b["failures"].as_u64().unwrap(),
            )
        })
}

/// Requests each provider's connection received: (flaky, steady).
async fn tried(h: &Harness) -> (u64, u64) {
    (h.by_credential(FLAKY).await, h.by_credential(STEADY).await)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    Chat,
    Messages,
    Responses,
}

const CLIENTS: [Client; 3] = [Client::Chat, Client::Messages, Client::Responses];

impl Client {
    async fn send(self, h: &Harness, model: &str, stream: bool) -> reqwest::Response {
        match self {
            Self::Chat => h.chat(chat_body(model, stream)).await,
            Self::Messages => h.messages(messages_body(model, stream)).await,
            Self::Responses => h.responses(responses_body(model, stream)).await,
        }
    }

    /// The text of a non-streamed answer.
    fn text(self, answer: &Value) -> &str {
        let text = match self {
            Self::Chat => &answer["choices"][0]["message"]["content"],
            Self::Messages => &answer["content"][0]["text"],
            Self::Responses => &answer["output"][0]["content"][0]["text"],
        };
        text.as_str().unwrap_or_default()
    }
}

/// The answer `client` gets from the healthy provider, asked directly.
async fn healthy(h: &Harness, client: Client, stream: bool) -> String {
    let r = client.send(h, "steady/mock-small", stream).await;
    assert_eq!(r.status(), 200);
    r.text().await.unwrap()
}

#[tokio::test]
async fn chaos_on_one_provider_opens_its_breaker_loses_no_request_and_a_probe_closes_it() {
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let h = Harness::start_with_clock(chaos, &[], clock.clone()).await;
    for rule in [
        json!({"times": 1, "match": {"credential": "cred-flaky"}, "latency_ms": 2000}),
        json!({"times": 1, "match": {"credential": "cred-flaky"}, "status": 503}),
        json!({"times": 1, "match": {"credential": "cred-flaky"}, "reset": "before_headers"}),
        json!({"times": 5, "match": {"credential": "cred-flaky"}, "status": 502}),
    ] {
        h.rule(rule).await;
    }
    let mut statuses = Vec::new();
    for _ in 0..20 {
        statuses.push(h.chat(chat_body("both", false)).await.status().as_u16());
    }
    // Every request was answered, by the healthy provider when the flaky one failed.
    assert_eq!(statuses, vec![200; 20]);
    let health: Value = h.admin_json("/api/monitoring/health").await;
    let flaky = health["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["provider"] == "flaky")
        .unwrap()
        .clone();
    assert_eq!(flaky["state"], "OPEN");
    let tried = h.by_credential("cred-flaky").await;
    // The breaker opened after two counted failures (the timeout and the 503) and the
    // flaky provider was not tried again while open.
    assert_eq!(tried, 2);
    // After the reset timeout (15 s for local servers) one probe goes through; the
    // flaky provider has recovered (its injected 502s are still queued, so the probe
    // fails and re-opens the breaker for longer).
    clock.advance(std::time::Duration::from_secs(15));
    assert_eq!(h.chat(chat_body("both", false)).await.status(), 200);
    assert_eq!(h.by_credential("cred-flaky").await, tried + 1);
    let health: Value = h.admin_json("/api/monitoring/health").await;
    assert_eq!(health["breakers"][0]["state"], "OPEN");
    // Clear the remaining faults; the next probe succeeds and closes the breaker.
    h.reset_mock().await;
    clock.advance(std::time::Duration::from_secs(15));
    assert_eq!(h.chat(chat_body("both", false)).await.status(), 200);
    assert_eq!(h.by_credential("cred-flaky").await, 1);
    let health: Value = h.admin_json("/api/monitoring/health").await;
    assert_eq!(health["breakers"][0]["state"], "CLOSED");
}

#[tokio::test(start_paused = true)]
async fn answers_cut_after_their_headers_fail_over_open_the_breaker_and_a_whole_probe_closes_it() {
    let (h, clock) = start().await;
    let expected: Vec<Value> = {
        let mut v = Vec::new();
        for client in CLIENTS {
            v.push(serde_json::from_str(&healthy(&h, client, false).await).unwrap());
        }
        v
    };
    h.reset_mock().await;
    let answered = |client: Client, r: reqwest::Response| {
        let mut want = expected[CLIENTS.iter().position(|c| *c == client).unwrap()].clone();
        if client == Client::Responses {
            // A translated Responses answer is dated by the gateway's clock.
            want["created_at"] = json!(clock.now_ms() / 1000);
        }
        async move {
            assert_eq!(r.status(), 200, "{client:?}");
            let got: Value = r.json().await.unwrap();
            assert_eq!(client.text(&got), TEXT, "{client:?}");
            assert_eq!(got, want, "{client:?}");
        }
    };
    // A stall after the headers: a non-streamed answer's whole body is due within the
    // first-byte budget, so the attempt fails at exactly 300 ms and steady answers.
    once(&h, json!({"stall": "after_headers"})).await;
    let sent = Instant::now();
    let r = Client::Chat.send(&h, "both", false).await;
    assert_eq!(sent.elapsed(), ms(FIRST_BYTE_MS));
    answered(Client::Chat, r).await;
    // A local provider's breaker degrades at its first failure.
    assert_eq!(breaker(&h).await, Some(("DEGRADED".to_owned(), 1)));
    // A reset after the headers fails at once.
    once(&h, json!({"reset": "after_headers"})).await;
    let sent = Instant::now();
    let r = Client::Messages.send(&h, "both", false).await;
    assert_eq!(sent.elapsed(), Duration::ZERO);
    answered(Client::Messages, r).await;
    assert_eq!(breaker(&h).await, Some(("OPEN".to_owned(), 2)));
    assert_eq!(tried(&h).await, (2, 2));
    // While open the flaky provider is not tried: steady answers every client, and a
    // direct request is refused with the typed 503.
    for client in CLIENTS {
        answered(client, client.send(&h, "both", false).await).await;
    }
    assert_eq!(tried(&h).await, (2, 5));
    let r = Client::Chat.send(&h, "flaky/mock-small", false).await;
    assert_eq!(r.status(), 503);
    assert_eq!(retry_after(&r), 15);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "provider_circuit_open");
    assert_eq!(tried(&h).await, (2, 5));
    // After the reset timeout one probe goes through. A trickle whose every gap (100 ms)
    // is far inside the idle timeout is still too slow for the first-byte budget of a
    // non-streamed answer: the probe fails at 300 ms and the breaker re-opens.
    clock.advance(RESET);
    once(&h, json!({"trickle_bytes": 32, "trickle_interval_ms": 100})).await;
    let sent = Instant::now();
    let r = Client::Responses.send(&h, "both", false).await;
    assert_eq!(sent.elapsed(), ms(FIRST_BYTE_MS));
    answered(Client::Responses, r).await;
    assert_eq!(breaker(&h).await, Some(("OPEN".to_owned(), 3)));
    assert_eq!(tried(&h).await, (3, 6));
    // The second open cycle is as long as the first (a local breaker doubles after 3).
    assert_eq!(h.health().await["breakers"][0]["probe_in_ms"], 15_000);
    answered(Client::Chat, Client::Chat.send(&h, "both", false).await).await;
    assert_eq!(tried(&h).await, (3, 7));
    // The next probe trickles within the budget (32 bytes every 20 ms): its answer is
    // whole, and it closes the breaker.
    clock.advance(RESET);
    once(&h, json!({"trickle_bytes": 32, "trickle_interval_ms": 20})).await;
    answered(Client::Chat, Client::Chat.send(&h, "both", false).await).await;
    assert_eq!(tried(&h).await, (4, 7));
    assert_eq!(breaker(&h).await, Some(("CLOSED".to_owned(), 0)));
}

#[tokio::test(start_paused = true)]
async fn a_direct_request_to_a_provider_cut_after_its_headers_gets_a_typed_error_in_its_format() {
    let (h, _clock) = start().await;
    once(&h, json!({"stall": "after_headers"})).await;
    let sent = Instant::now();
    let (status, e) = status_and_json(Client::Chat.send(&h, "flaky/mock-small", false).await).await;
    assert_eq!(sent.elapsed(), ms(FIRST_BYTE_MS));
    assert_eq!(
        (status, e),
        (
            504,
            json!({"error": {"message": "upstream `flaky` (connection `flaky-1`) failed: timeout",
                "type": "upstream_error", "code": "upstream_timeout", "param": null}})
        )
    );
    once(&h, json!({"reset": "after_headers"})).await;
    let (status, e) =
        status_and_json(Client::Messages.send(&h, "flaky/mock-small", false).await).await;
    assert_eq!(
        (status, e),
        (
            502,
            json!({"type": "error", "error": {"type": "api_error",
                "message": "upstream `flaky` (connection `flaky-1`) failed: connection_reset",
                "code": "upstream_connection_reset"}})
        )
    );
    assert_eq!(breaker(&h).await, Some(("OPEN".to_owned(), 2)));
    let r = Client::Responses.send(&h, "flaky/mock-small", false).await;
    assert_eq!(r.status(), 503);
    assert_eq!(retry_after(&r), 15);
    let e: Value = r.json().await.unwrap();
    assert_eq!(
        (e["error"]["type"].as_str(), e["error"]["code"].as_str()),
        (Some("upstream_error"), Some("provider_circuit_open"))
    );
    assert_eq!(tried(&h).await, (2, 0));
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_fails_after_its_headers_before_any_output_fails_over_unseen_and_counts() {
    let (h, _clock) = start().await;
    let faults = [
        (json!({"stall": "after_headers"}), ms(IDLE_MS)),
        (json!({"reset": "after_headers"}), Duration::ZERO),
        // Slower than the idle timeout: the first 16 bytes would come after 1.5 s.
        (
            json!({"trickle_bytes": 16, "trickle_interval_ms": 1_500}),
            ms(IDLE_MS),
        ),
    ];
    for (fault, after) in faults {
        for client in CLIENTS {
            let want = healthy(&h, client, true).await;
            once(&h, fault.clone()).await;
            let sent = Instant::now();
            let r = client.send(&h, "both", true).await;
            assert_eq!(r.status(), 200, "{client:?} {fault}");
            assert_eq!(r.headers()["content-type"], "text/event-stream");
            // Nothing of the flaky stream reached the client (SPEC R11: an attempt
            // commits on its first output): the healthy provider's whole answer did.
            assert_eq!(r.text().await.unwrap(), want, "{client:?} {fault}");
            assert_eq!(sent.elapsed(), after, "{client:?} {fault}");
            // The failure counted toward the flaky provider's breaker.
            assert_eq!(
                breaker(&h).await.map(|(_, failures)| failures),
                Some(1),
                "{client:?} {fault}"
            );
            let reset = h
                .admin_send(
                    reqwest::Method::POST,
                    "/api/resilience/reset",
                    json!({"provider": "flaky"}),
                )
                .await;
            assert_eq!(reset.status(), 200);
        }
    }
    // Each of the nine went to the flaky provider, then to the healthy one (plus the
    // nine direct requests for the expected answers).
    assert_eq!(tried(&h).await, (9, 18));
}

#[tokio::test(start_paused = true)]
async fn a_trickle_within_the_timeouts_is_a_whole_answer_and_counts_as_a_success() {
    let (h, _clock) = start().await;
    let mut expected = Vec::new();
    for client in CLIENTS {
        expected.push((
            healthy(&h, client, false).await,
            healthy(&h, client, true).await,
        ));
    }
    // One counted failure first, so that a success shows in the breaker.
    once(&h, json!({"status": 503})).await;
    assert_eq!(
        Client::Chat
            .send(&h, "flaky/mock-small", false)
            .await
            .status(),
        502
    );
    assert_eq!(breaker(&h).await, Some(("DEGRADED".to_owned(), 1)));
    for (client, (whole, stream)) in CLIENTS.into_iter().zip(expected) {
        // Not streamed: 32 bytes every 20 ms, all within the 300 ms budget.
        once(&h, json!({"trickle_bytes": 32, "trickle_interval_ms": 20})).await;
        let r = client.send(&h, "flaky/mock-small", false).await;
        assert_eq!(r.status(), 200, "{client:?}");
        assert_eq!(r.text().await.unwrap(), whole, "{client:?}");
        assert_eq!(breaker(&h).await, Some(("CLOSED".to_owned(), 0)));
        // Streamed: 16 bytes every 900 ms, each gap inside the 1 s idle timeout, the whole
        // stream far longer than it; translated streams are rebuilt from the pieces.
        once(&h, json!({"trickle_bytes": 16, "trickle_interval_ms": 900})).await;
        let sent = Instant::now();
        let r = client.send(&h, "flaky/mock-small", true).await;
        assert_eq!(r.status(), 200, "{client:?}");
        assert_eq!(r.text().await.unwrap(), stream, "{client:?}");
        assert!(sent.elapsed() > ms(10 * IDLE_MS), "{client:?}");
    }
    assert_eq!(tried(&h).await, (7, 6));
    assert_eq!(breaker(&h).await, Some(("CLOSED".to_owned(), 0)));
}
