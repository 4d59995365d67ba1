//! Cooldown-aware combo retry (SPEC R9): short transient cooldowns are waited out,
//! long ones answer 429 with when to come back, lasting holds answer 503.

use crate::resilience::cooling;
use serde_json::{json, Value};
use switchyard_test_support::*;

fn cooling_no_wait(mock_url: &str) -> Config {
    cooling(mock_url).setting("comboCooldownWait.enabled", false)
}

async fn rate_limit_both(h: &Harness, seconds: &str) {
    for cred in [CRED_ALPHA, CRED_BETA] {
        h.rule(
            json!({"times": 1, "match": {"credential": cred}, "status": 429,
                      "headers": {"retry-after": seconds}}),
        )
        .await;
    }
}

#[tokio::test]
async fn a_combo_waits_out_a_short_rate_limit_and_is_served() {
    let h = Harness::start_with(cooling, &[]).await;
    rate_limit_both(&h, "1").await;
    let r = h.chat(chat_body("fast", false)).await;
    assert_eq!(r.status(), 200);
    // Both answered 429 once; after the one-second wait the first target served.
    assert_eq!(h.by_credential(CRED_ALPHA).await, 2);
    assert_eq!(h.by_credential(CRED_BETA).await, 1);
}

async fn assert_rate_limited(r: reqwest::Response, seconds: std::ops::RangeInclusive<u64>) {
    assert_eq!(r.status(), 429);
    let header = retry_after(&r);
    assert!(seconds.contains(&header), "{header}");
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["type"], "rate_limit_error");
    assert_eq!(e["error"]["code"], "all_targets_rate_limited");
    assert_eq!(e["error"]["retry_after"].as_u64(), Some(header));
    assert!(e["error"]["reset_at"].as_u64().unwrap() > 1_700_000_000_000);
}

#[tokio::test]
async fn a_cooldown_longer_than_the_wait_bound_answers_429_with_when_to_return() {
    let h = Harness::start_with(cooling, &[]).await;
    rate_limit_both(&h, "120").await;
    // After both targets answered 429 for two minutes (more than maxWaitMs, 90 s).
    assert_rate_limited(h.chat(chat_body("fast", false)).await, 118..=120).await;
    // Before dispatch, with both targets still cooling: the same answer, no upstream call.
    assert_rate_limited(h.chat(chat_body("fast", false)).await, 118..=120).await;
    assert_eq!(h.mock_stats().await["requests_total"], 2);
}

#[tokio::test]
async fn with_waiting_off_a_cooldown_within_bounds_answers_429_at_once() {
    let h = Harness::start_with(cooling_no_wait, &[]).await;
    rate_limit_both(&h, "30").await;
    assert_rate_limited(h.chat(chat_body("fast", false)).await, 28..=30).await;
    assert_eq!(h.mock_stats().await["requests_total"], 2);
}

#[tokio::test]
async fn targets_held_by_lasting_states_answer_503_all_targets_skipped() {
    let h = Harness::start_with(cooling, &[]).await;
    for (cred, model) in [
        (CRED_ALPHA, "alpha/mock-small"),
        (CRED_BETA, "beta/mock-small"),
    ] {
        h.rule(
            json!({"times": 1, "match": {"credential": cred}, "status": 402,
                      "body": {"error": {"message": "insufficient credits"}}}),
        )
        .await;
        assert_eq!(h.chat(chat_body(model, false)).await.status(), 402);
    }
    let r = h.chat(chat_body("fast", false)).await;
    assert_eq!(r.status(), 503);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "ALL_TARGETS_SKIPPED");
    let reasons: Vec<&str> = e["error"]["diagnostics"]["excluded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["credits_exhausted", "credits_exhausted"]);
    assert_eq!(h.mock_stats().await["requests_total"], 2);
}
