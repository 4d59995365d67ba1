//! Exclusive session leases (SPEC R16) over real sockets: a lease-capable key acquires
//! one of its connections and no other request uses it while the lease lives; two
//! acquires racing for the last free connection cannot both win; a stale generation is
//! refused before any upstream; every connection leased answers 429
//! `lease-capacity-unavailable` with `Retry-After`; the lease moves with a failover,
//! lapses at its expiry (manual clock), survives a restart and ends with its key's
//! permission; the owner token and lease headers reach no upstream and no log. The
//! decisions are the core's (`routing::lease`, tested there under `now`).

use reqwest::Method;
use serde_json::{json, Value};
use std::sync::Arc;
use switchyard_gateway::clock::{Clock, ManualClock, SystemClock};
use switchyard_test_support::{
    messages_body, Config, Connection, Harness, Key, ANTHROPIC_VERSION, CRED_CLAUDE, KEY,
};

const CRED_CLAUDE_2: &str = "cred-claude-2-secret-value";
const LEASER_A: &str = "sy-test-lease-key-a-0000000001";
const LEASER_B: &str = "sy-test-lease-key-b-0000000001";
const OWNER_A: &str = "vlo_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

/// Two Claude accounts; two lease-capable keys over both; the standard key, ordinary.
fn leasing(mock: &str) -> Config {
    let leaser = |id: &str, secret: &str| {
        Key::new(id, id, secret)
            .scopes(["lease:exclusive"])
            .allowed_connections(["claude-1", "claude-2"])
    };
    Config::anthropic(mock)
        .connection(
            Connection::apikey("claude-2", "claude")
                .credential(CRED_CLAUDE_2)
                .disable_cooling(),
        )
        .key(leaser("lease-a", LEASER_A))
        .key(leaser("lease-b", LEASER_B))
}

/// `POST /api/v1/session-leases` as `key`: status and body.
async fn lease(h: &Harness, key: &str, body: Value) -> (u16, Value, Option<String>) {
    let r = h
        .http
        .post(h.url("/api/v1/session-leases"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, r.json().await.unwrap(), retry)
}

/// A Messages request as `key`, with lease headers when `held` names an owner and a
/// generation: the status, the body and the credential that reached the mock (empty
/// when none did).
async fn turn(h: &Harness, key: &str, held: Option<(&str, &str)>) -> (u16, Value, String) {
    let before = h.mock_requests().await.len();
    let mut r = h
        .http
        .post(h.url("/v1/messages"))
        .header("x-api-key", key)
        .header("anthropic-version", ANTHROPIC_VERSION)
        .json(&messages_body("claude/claude-opus", false));
    if let Some((owner, generation)) = held {
        r = r
            .header("X-OmniRoute-Lease-Owner", owner)
            .header("X-OmniRoute-Lease-Generation", generation);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let retry = r.headers().get("retry-after").cloned();
    let mut body: Value = r.json().await.unwrap();
    if let Some(v) = retry {
        body["retry-after-header"] = json!(v.to_str().unwrap());
    }
    let requests = h.mock_requests().await;
    let credential = match requests.len() > before {
        true => requests.last().unwrap()["credential"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        false => String::new(),
    };
    (status, body, credential)
}

async fn leases(h: &Harness) -> Vec<Value> {
    h.admin_list("/api/leases").await
}

#[tokio::test]
async fn a_lease_keeps_its_connection_to_its_owner_and_racing_acquires_cannot_both_win() {
    let h = Harness::start_with(leasing, &[]).await;
    // No lease held: allowedConnections reserve nothing, every key rotates over both.
    let mut seen = Vec::new();
    for key in [KEY, KEY, LEASER_A, LEASER_A] {
        let (status, _, credential) = turn(&h, key, None).await;
        assert_eq!(status, 200);
        seen.push(credential);
    }
    seen.sort();
    assert_eq!(
        seen,
        [CRED_CLAUDE, CRED_CLAUDE, CRED_CLAUDE_2, CRED_CLAUDE_2]
    );

    // A acquires with its own owner token: the first of its connections, generation 1.
    let (status, a, _) = lease(&h, LEASER_A, json!({"action": "acquire", "owner": OWNER_A})).await;
    assert_eq!(status, 200, "{a}");
    assert_eq!(
        (
            &a["state"],
            &a["generation"],
            &a["connection_id"],
            &a["provider"],
            &a["reused"]
        ),
        (
            &json!("active"),
            &json!(1),
            &json!("claude-1"),
            &json!("claude"),
            &json!(false)
        )
    );
    assert_eq!(
        a.get("owner"),
        None,
        "a token the client chose is not echoed"
    );
    assert_eq!(
        a["expires_at"].as_u64().unwrap() - a["renewed_at"].as_u64().unwrap(),
        120_000
    );
    // Its requests go to its connection; everyone else's to the other.
    for _ in 0..3 {
        assert_eq!(
            turn(&h, LEASER_A, Some((OWNER_A, "1"))).await.2,
            CRED_CLAUDE
        );
        assert_eq!(turn(&h, KEY, None).await.2, CRED_CLAUDE_2);
        assert_eq!(turn(&h, LEASER_B, None).await.2, CRED_CLAUDE_2);
    }
    // The route traces say so: the lease put claude-1 first where rotation had not,
    // and the others' plans never held it.
    h.newest_log_row(13).await;
    let rows = h.admin_list("/api/logs?limit=9").await;
    let leased: Vec<&Value> = rows
        .iter()
        .filter(|r| r["route"]["first"] == "lease")
        .collect();
    assert!((1..=2).contains(&leased.len()), "{rows:?}");
    assert!(leased
        .iter()
        .all(|r| r["route"]["order"][0]["connection_id"] == "claude-1"));
    let others = rows.iter().filter(|r| r["key_id"] == "k1");
    assert!(others.map(|r| &r["route"]["order"]).all(|o| *o
        == json!([{"provider": "claude", "model": "claude-opus", "connection_id": "claude-2"}])));
    // Status names the bound connection.
    let (status, s, _) = lease(&h, LEASER_A, json!({"action": "status", "owner": OWNER_A})).await;
    assert_eq!(
        (status, &s["connection_id"], &s["generation"]),
        (200, &json!("claude-1"), &json!(1))
    );

    // Two acquires at once for the one free connection: exactly one wins.
    let (first, second) = tokio::join!(
        lease(&h, LEASER_B, json!({"action": "acquire"})),
        lease(&h, LEASER_B, json!({"action": "acquire"}))
    );
    let mut outcomes = [first, second];
    outcomes.sort_by_key(|o| o.0);
    let [(won, b, _), (lost, refusal, retry)] = outcomes;
    assert_eq!((won, lost), (200, 429), "{b} {refusal}");
    assert_eq!(b["connection_id"], "claude-2");
    let owner_b = b["owner"].as_str().unwrap().to_owned();
    assert!(
        owner_b.starts_with("vlo_") && owner_b.len() == 47,
        "{owner_b}"
    );
    assert_eq!(refusal["error"]["code"], "lease-capacity-unavailable");
    assert_eq!(refusal["error"]["status"], "waiting-for-capacity");
    assert_eq!(retry.as_deref(), Some("120"));
    assert_eq!(refusal["error"]["retry_after"], 120);
    assert_eq!(leases(&h).await.len(), 2);

    // Both connections leased: an ordinary request has nowhere to go.
    let (status, body, credential) = turn(&h, KEY, None).await;
    assert_eq!((status, credential.as_str()), (429, ""), "{body}");
    assert_eq!(body["error"]["code"], "lease-capacity-unavailable");
    assert_eq!(body["error"]["status"], "waiting-for-capacity");
    assert_eq!(body["retry-after-header"], "120");
    // Each holder still reaches its own.
    assert_eq!(
        turn(&h, LEASER_B, Some((&owner_b, "1"))).await.2,
        CRED_CLAUDE_2
    );
    assert_eq!(
        turn(&h, LEASER_A, Some((OWNER_A, "1"))).await.2,
        CRED_CLAUDE
    );

    // A releases; its connection is free for everyone at once.
    let (status, r, _) = lease(
        &h,
        LEASER_A,
        json!({"action": "release", "owner": OWNER_A, "generation": 1}),
    )
    .await;
    assert_eq!((status, &r["state"]), (200, &json!("released")));
    assert_eq!(turn(&h, KEY, None).await.2, CRED_CLAUDE);
    assert_eq!(turn(&h, KEY, None).await.2, CRED_CLAUDE);

    // The owner acquires again at the next generation; the old one is fenced off.
    let (status, a2, _) = lease(
        &h,
        LEASER_A,
        json!({"action": "acquire", "owner": OWNER_A, "ttl_ms": 60_000}),
    )
    .await;
    assert_eq!(
        (status, &a2["generation"], &a2["connection_id"]),
        (200, &json!(2), &json!("claude-1"))
    );
    let (status, stale, credential) = turn(&h, LEASER_A, Some((OWNER_A, "1"))).await;
    assert_eq!((status, credential.as_str()), (409, ""), "{stale}");
    assert_eq!(stale["error"]["code"], "lease-stale-generation");
    assert!(!stale.to_string().contains("generation 2"), "{stale}");
    assert_eq!(turn(&h, LEASER_A, Some((OWNER_A, "2"))).await.0, 200);
    // Renewing needs the exact generation too.
    let renew =
        |g: u64| json!({"action": "renew", "owner": OWNER_A, "generation": g, "ttl_ms": 90_000});
    assert_eq!(lease(&h, LEASER_A, renew(1)).await.0, 409);
    let (status, renewed, _) = lease(&h, LEASER_A, renew(2)).await;
    assert_eq!(status, 200);
    assert_eq!(
        renewed["expires_at"].as_u64().unwrap() - renewed["renewed_at"].as_u64().unwrap(),
        90_000
    );

    // Another key cannot use or renew A's lease; a key without the scope cannot lease.
    let (status, other, _) = turn(&h, LEASER_B, Some((OWNER_A, "2"))).await;
    assert_eq!(
        (status, &other["error"]["code"]),
        (403, &json!("lease-owner-mismatch"))
    );
    let (status, no_scope, _) = lease(&h, KEY, json!({"action": "acquire"})).await;
    assert_eq!(
        (status, &no_scope["error"]["code"]),
        (403, &json!("lease-not-permitted"))
    );
    assert_eq!(turn(&h, KEY, Some((OWNER_A, "2"))).await.0, 403);
    // Malformed owners, generations, lives and bodies are typed 400s.
    for (body, code) in [
        (
            json!({"action": "status", "owner": "vlo_short"}),
            "lease-invalid-owner",
        ),
        (
            json!({"action": "acquire", "ttl_ms": 500}),
            "lease-invalid-ttl",
        ),
        (
            json!({"action": "renew", "owner": OWNER_A}),
            "invalid_request",
        ),
        (json!({"action": "steal"}), "invalid_json"),
    ] {
        let (status, e, _) = lease(&h, LEASER_A, body.clone()).await;
        assert_eq!(
            (status, e["error"]["code"].as_str()),
            (400, Some(code)),
            "{body}: {e}"
        );
    }
    assert_eq!(
        turn(&h, LEASER_A, Some((OWNER_A, "two"))).await.1["error"]["code"],
        "lease-invalid-generation"
    );
    assert_eq!(turn(&h, LEASER_A, Some((OWNER_A, "0"))).await.0, 400);

    // No owner token or lease header reached an upstream or a log.
    let upstream = serde_json::to_string(&h.mock_stats().await)
        .unwrap()
        .to_lowercase();
    let journal = serde_json::to_string(&h.mock_requests().await)
        .unwrap()
        .to_lowercase();
    let logs = serde_json::to_string(&h.admin_json("/api/logs?limit=100").await).unwrap();
    for text in [&upstream, &journal] {
        assert!(
            !text.contains("x-omniroute-lease"),
            "a lease header was forwarded"
        );
        assert!(!text.contains(&OWNER_A.to_lowercase()) && !text.contains(&owner_b.to_lowercase()));
    }
    assert!(!logs.contains(OWNER_A) && !logs.contains(&owner_b));
    let listed = serde_json::to_string(&leases(&h).await).unwrap();
    assert!(
        !listed.contains(OWNER_A) && !listed.contains(&owner_b),
        "{listed}"
    );

    // The operator releases B's lease by its owner hash.
    let hash = leases(&h)
        .await
        .into_iter()
        .find(|l| l["key_id"] == "lease-b")
        .unwrap()["owner_hash"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/api/leases/{hash}");
    h.admin_delete_once(&path).await;
    let (status, gone, _) = turn(&h, LEASER_B, Some((&owner_b, "1"))).await;
    assert_eq!(
        (status, &gone["error"]["code"]),
        (404, &json!("lease-not-active"))
    );
    assert_eq!(turn(&h, KEY, None).await.2, CRED_CLAUDE_2);
}

#[tokio::test]
async fn a_lease_follows_a_failover_to_a_free_connection() {
    let h = Harness::start_with(leasing, &[]).await;
    let (status, a, _) = lease(&h, LEASER_A, json!({"action": "acquire", "owner": OWNER_A})).await;
    assert_eq!((status, &a["connection_id"]), (200, &json!("claude-1")));
    // Its account fails once: the free one serves, and the lease moves there.
    h.rule(json!({"times": 1, "match": {"credential": CRED_CLAUDE}, "status": 503}))
        .await;
    assert_eq!(
        turn(&h, LEASER_A, Some((OWNER_A, "1"))).await.2,
        CRED_CLAUDE_2
    );
    let held = leases(&h).await;
    assert_eq!(
        (
            held.len(),
            &held[0]["connection_id"],
            &held[0]["generation"]
        ),
        (1, &json!("claude-2"), &json!(1))
    );
    assert_eq!(
        turn(&h, LEASER_A, Some((OWNER_A, "1"))).await.2,
        CRED_CLAUDE_2
    );
    assert_eq!(turn(&h, KEY, None).await.2, CRED_CLAUDE);
    // Taking the scope away from the key ends its lease.
    let r = h
        .admin_send(Method::PATCH, "/api/keys/lease-a", json!({"scopes": []}))
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let mut ended = false;
    for _ in 0..50 {
        if leases(&h).await.is_empty() {
            ended = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(ended, "the lease outlived its key's permission");
    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(turn(&h, KEY, None).await.2);
    }
    seen.sort();
    assert_eq!(seen, [CRED_CLAUDE, CRED_CLAUDE_2]);
}

#[tokio::test]
async fn a_lease_survives_a_restart() {
    let mut h = Harness::start_with(leasing, &[]).await;
    let (status, _, _) = lease(&h, LEASER_A, json!({"action": "acquire", "owner": OWNER_A})).await;
    assert_eq!(status, 200);
    let before = leases(&h).await;
    h.restart().await;
    assert_eq!(leases(&h).await, before);
    assert_eq!(
        turn(&h, LEASER_A, Some((OWNER_A, "1"))).await.2,
        CRED_CLAUDE
    );
    assert_eq!(turn(&h, KEY, None).await.2, CRED_CLAUDE_2);
    assert_eq!(turn(&h, KEY, None).await.2, CRED_CLAUDE_2);
}

#[tokio::test(start_paused = true)]
async fn a_lease_lapses_at_its_expiry() {
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let h = Harness::start_paused_with_clock(leasing, &[], clock.clone()).await;
    let (status, a, _) = lease(
        &h,
        LEASER_A,
        json!({"action": "acquire", "owner": OWNER_A, "ttl_ms": 5_000}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(a["expires_at"].as_u64().unwrap(), clock.now_ms() + 5_000);
    let (_, b, _) = lease(&h, LEASER_B, json!({"action": "acquire", "ttl_ms": 8_000})).await;
    let owner_b = b["owner"].as_str().unwrap().to_owned();
    // Both held: an ordinary request waits for the sooner expiry, to the second.
    clock.advance(std::time::Duration::from_millis(1_500));
    let (status, body, _) = turn(&h, KEY, None).await;
    assert_eq!(
        (status, &body["retry-after-header"]),
        (429, &json!("4")),
        "{body}"
    );
    // One millisecond before A's expiry it still holds; at it, it has lapsed.
    clock.advance(std::time::Duration::from_millis(3_499));
    assert_eq!(turn(&h, KEY, None).await.0, 429);
    assert_eq!(
        turn(&h, LEASER_A, Some((OWNER_A, "1"))).await.2,
        CRED_CLAUDE
    );
    clock.advance(std::time::Duration::from_millis(1));
    let (status, lapsed, _) = turn(&h, LEASER_A, Some((OWNER_A, "1"))).await;
    assert_eq!(
        (status, &lapsed["error"]["code"]),
        (404, &json!("lease-not-active"))
    );
    assert_eq!(turn(&h, KEY, None).await.2, CRED_CLAUDE);
    assert_eq!(leases(&h).await.len(), 1);
    // A renew after the expiry cannot bring the lease back; B's renew keeps B's.
    let renew = |owner: &str| json!({"action": "renew", "owner": owner, "generation": 1});
    assert_eq!(lease(&h, LEASER_A, renew(OWNER_A)).await.0, 404);
    assert_eq!(lease(&h, LEASER_B, renew(&owner_b)).await.0, 200);
    clock.advance(std::time::Duration::from_millis(100_000));
    assert_eq!(
        turn(&h, LEASER_B, Some((&owner_b, "1"))).await.2,
        CRED_CLAUDE_2
    );
    clock.advance(std::time::Duration::from_millis(20_000));
    assert_eq!(leases(&h).await, Vec::<Value>::new());
}

#[tokio::test]
async fn the_database_settles_a_race_with_another_process() {
    let h = Harness::start_with(leasing, &[]).await;
    // Another process (a second replica) leased claude-1 behind this one's back.
    let now = SystemClock.now_ms();
    let insert = format!(
        "INSERT INTO session_leases (owner_hash, key_id, connection_id, generation, state,
           acquired_at, renewed_at, expires_at)
         VALUES ('{}', 'lease-b', 'claude-1', 1, 'active', {now}, {now}, {})",
        "ab".repeat(32),
        now + 60_000
    );
    h.with_store(move |s| s.execute_raw(&insert).unwrap()).await;
    // This process thinks claude-1 free; the unique index refuses it, the leases are
    // read again, and the acquire takes the connection that is free.
    let (status, a, _) = lease(&h, LEASER_A, json!({"action": "acquire", "owner": OWNER_A})).await;
    assert_eq!(
        (status, &a["connection_id"]),
        (200, &json!("claude-2")),
        "{a}"
    );
    let held: Vec<(Value, Value)> = leases(&h)
        .await
        .into_iter()
        .map(|l| (l["connection_id"].clone(), l["key_id"].clone()))
        .collect();
    assert_eq!(
        held,
        [
            (json!("claude-2"), json!("lease-a")),
            (json!("claude-1"), json!("lease-b"))
        ]
    );
    assert_eq!(turn(&h, KEY, None).await.0, 429);
}
