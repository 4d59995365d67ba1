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
