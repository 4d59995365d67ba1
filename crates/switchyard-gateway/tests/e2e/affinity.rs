//! Session affinity (SPEC R15) over real sockets: the session ids Claude Code and Codex
//! CLI send pin a conversation to one account of two; a failover moves the pin, a
//! failure of the pinned account deletes it, a restart keeps it, and the session
//! headers never reach an upstream. The time to live is the core's (`Pin::live`, tested
//! there under `now`).

use reqwest::Method;
use serde_json::{json, Value};
use switchyard_test_support::{
    messages_body, responses_body, status_and_json, Config, Connection, Harness, ANTHROPIC_VERSION,
    CRED_CLAUDE, CRED_CODEX, KEY,
};

const CRED_CLAUDE_2: &str = "cred-claude-2-secret-value";
const CRED_CODEX_2: &str = "cred-codex-2-secret-value";

/// Two accounts of `claude` and two of `codex`.
fn two_accounts(mock: &str) -> Config {
    Config::responses(mock)
        .connection(
            Connection::apikey("claude-2", "claude")
                .credential(CRED_CLAUDE_2)
                .disable_cooling(),
        )
        .connection(
            Connection::apikey("codex-2", "codex")
                .credential(CRED_CODEX_2)
                .disable_cooling(),
        )
}

/// The credential of the newest request the mock received.
async fn last_credential(h: &Harness) -> String {
    let r = h.mock_requests().await;
    r.last().expect("a request reached the mock")["credential"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A Messages request with Claude Code's session header and body metadata.
async fn claude_turn(h: &Harness, session: &str) -> u16 {
    let mut body = messages_body("claude/claude-opus", false);
    body["metadata"] = json!({"user_id": format!("user_0f_account__session_{session}")});
    let r = h
        .http
        .post(h.url("/v1/messages?beta=true"))
        .header("x-api-key", KEY)
        .header("anthropic-version", ANTHROPIC_VERSION)
        .header("x-claude-code-session-id", session)
        .header("x-client-request-id", "req-1")
        .json(&body);
    status_of(r).await
}

/// A Responses request with Codex CLI's session headers and `prompt_cache_key`.
async fn codex_turn(h: &Harness, session: &str) -> u16 {
    let mut body = responses_body("codex/gpt-5-codex", false);
    body["prompt_cache_key"] = json!(session);
    let r = h
        .http
        .post(h.url("/v1/responses"))
        .bearer_auth(KEY)
        .header("originator", "codex_exec")
        .header("session_id", session)
        .header("session-id", session)
        .header("thread-id", session)
        .header("x-codex-window-id", format!("{session}:0"))
        .json(&body);
    status_of(r).await
}

/// Sends `r`; its status.
async fn status_of(r: reqwest::RequestBuilder) -> u16 {
    r.send().await.unwrap().status().as_u16()
}

async fn sessions(h: &Harness) -> Vec<Value> {
    h.admin_list("/api/sessions").await
}

#[tokio::test]
async fn each_session_keeps_to_one_account_of_two() {
    let h = Harness::start_with(two_accounts, &[]).await;
    // Without a session, direct requests rotate over the two accounts.
    let mut seen = Vec::new();
    for _ in 0..2 {
        assert_eq!(
            status_and_json(h.messages(messages_body("claude/claude-opus", false)).await)
                .await
                .0,
            200
        );
        seen.push(last_credential(&h).await);
    }
    seen.sort();
    assert_eq!(seen, [CRED_CLAUDE, CRED_CLAUDE_2]);
    // One Claude Code session: every turn on the account of its first.
    assert_eq!(claude_turn(&h, "5f0c9d1e").await, 200);
    let first = last_credential(&h).await;
    for _ in 0..4 {
        assert_eq!(claude_turn(&h, "5f0c9d1e").await, 200);
        assert_eq!(last_credential(&h).await, first);
    }
    // The route traces of the four pinned turns: the pinned connection first in each;
    // direct requests rotate their connections, so it was moved there in every other.
    h.newest_log_row(7).await;
    let rows = h.admin_list("/api/logs?limit=4").await;
    let led: Vec<&Value> = rows
        .iter()
        .map(|r| &r["route"]["order"][0]["connection_id"])
        .collect();
    assert!(led.iter().all(|c| *c == led[0]), "{rows:?}");
    let moved = rows
        .iter()
        .filter(|r| r["route"]["first"] == "session-pin")
        .count();
    assert_eq!(moved, 2, "{rows:?}");
    // One Codex session the same.
    assert_eq!(codex_turn(&h, "019a7c2e").await, 200);
    let codex_first = last_credential(&h).await;
    assert!([CRED_CODEX, CRED_CODEX_2].contains(&codex_first.as_str()));
    for _ in 0..4 {
        assert_eq!(codex_turn(&h, "019a7c2e").await, 200);
        assert_eq!(last_credential(&h).await, codex_first);
    }
    // Two pins, by hashed key; the ids are nowhere in clear.
    let pins = sessions(&h).await;
    assert_eq!(pins.len(), 2);
    let text = serde_json::to_string(&pins).unwrap();
    assert!(
        !text.contains("5f0c9d1e") && !text.contains("019a7c2e"),
        "{text}"
    );
    assert!(pins
        .iter()
        .all(|p| p["key_id"] == "k1" && p["session"].as_str().unwrap().len() == 64));
    // No session header reached an upstream.
    let stats = h.mock_stats().await;
    let upstream = serde_json::to_string(&stats).unwrap().to_lowercase();
    for header in [
        "x-claude-code-session-id",
        "session_id",
        "session-id",
        "thread-id",
        "x-codex-window-id",
    ] {
        assert!(
            !upstream.contains(&format!("\"{header}\"")),
            "{header} was forwarded"
        );
    }
    let logs = serde_json::to_string(&h.admin_json("/api/logs?limit=50").await).unwrap();
    assert!(!logs.contains("5f0c9d1e") && !logs.contains("019a7c2e"));
}

#[tokio::test]
async fn a_failover_moves_the_pin_and_a_failed_pinned_request_deletes_it() {
    let h = Harness::start_with(two_accounts, &[]).await;
    assert_eq!(claude_turn(&h, "s1").await, 200);
    let first = last_credential(&h).await;
    let other = if first == CRED_CLAUDE {
        CRED_CLAUDE_2
    } else {
        CRED_CLAUDE
    };
    let pinned_to = |c: &str| {
        if c == CRED_CLAUDE {
            "claude-1"
        } else {
            "claude-2"
        }
    };
    assert_eq!(sessions(&h).await[0]["connection"], pinned_to(&first));
    // The pinned account fails once: the other serves, and the pin moves to it.
    h.rule(json!({"times": 1, "match": {"credential": first}, "status": 503}))
        .await;
    assert_eq!(claude_turn(&h, "s1").await, 200);
    assert_eq!(last_credential(&h).await, other);
    assert_eq!(sessions(&h).await[0]["connection"], pinned_to(other));
    for _ in 0..3 {
        assert_eq!(claude_turn(&h, "s1").await, 200);
        assert_eq!(last_credential(&h).await, other);
    }
    // Both fail: the request that followed the pin fails, and the pin is gone.
    h.rule(json!({"times": 2, "match": {"path": "/v1/messages"}, "status": 503}))
        .await;
    assert_eq!(claude_turn(&h, "s1").await, 502);
    assert_eq!(sessions(&h).await, Vec::<Value>::new());
    // A gateway refusal leaves a pin as it is: an unknown model is refused before any
    // upstream.
    assert_eq!(claude_turn(&h, "s2").await, 200);
    let pins = sessions(&h).await;
    let mut refused = messages_body("claude/nope", false);
    refused["metadata"] = json!({"user_id": "x"});
    let r = h
        .http
        .post(h.url("/v1/messages"))
        .header("x-api-key", KEY)
        .header("anthropic-version", ANTHROPIC_VERSION)
        .header("x-claude-code-session-id", "s2")
        .json(&refused)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(sessions(&h).await, pins);
    // Released by the operator.
    let session = pins[0]["session"].as_str().unwrap().to_owned();
    let path = format!("/api/sessions/{session}");
    h.admin_delete_once(&path).await;
    assert_eq!(sessions(&h).await, Vec::<Value>::new());
}

#[tokio::test]
async fn pins_survive_a_restart_and_affinity_off_pins_nothing() {
    let mut h = Harness::start_with(two_accounts, &[]).await;
    // Pin the session to the account rotation would not pick first after a restart.
    let mut first = String::new();
    for i in 0..4 {
        assert_eq!(claude_turn(&h, &format!("s{i}")).await, 200);
        first = last_credential(&h).await;
        if first == CRED_CLAUDE_2 {
            first = format!("s{i}");
            break;
        }
    }
    let session = first;
    let before = sessions(&h).await;
    h.restart().await;
    let after = sessions(&h).await;
    assert_eq!(after, before);
    for _ in 0..3 {
        assert_eq!(claude_turn(&h, &session).await, 200);
        assert_eq!(last_credential(&h).await, CRED_CLAUDE_2);
    }
    // Affinity off: no pin is read or written.
    let r = h
        .admin_send(
            Method::PUT,
            "/api/settings/sessionAffinityTtlMs",
            json!({"value": 0}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(sessions(&h).await, Vec::<Value>::new());
    let mut seen = Vec::new();
    for _ in 0..2 {
        assert_eq!(claude_turn(&h, &session).await, 200);
        seen.push(last_credential(&h).await);
    }
    seen.sort();
    assert_eq!(seen, [CRED_CLAUDE, CRED_CLAUDE_2]);
}

#[tokio::test]
async fn a_pin_goes_with_its_connection() {
    let h = Harness::start_with(two_accounts, &[]).await;
    assert_eq!(claude_turn(&h, "s1").await, 200);
    let pinned = sessions(&h).await[0]["connection"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/api/connections/{pinned}");
    assert_eq!(
        h.admin_send(Method::DELETE, &path, json!({}))
            .await
            .status(),
        204
    );
    assert_eq!(sessions(&h).await, Vec::<Value>::new());
    // The session is routed afresh, to the account left, and pinned there.
    assert_eq!(claude_turn(&h, "s1").await, 200);
    let left = if pinned == "claude-1" {
        "claude-2"
    } else {
        "claude-1"
    };
    assert_eq!(sessions(&h).await[0]["connection"], left);
}
