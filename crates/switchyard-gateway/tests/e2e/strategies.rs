//! Routing strategies (SPEC R19) over real sockets, one combo of two targets each
//! (`alpha/mock-small`, `beta/mock-small`, told apart by the credential that reaches the
//! mock): round-robin takes them in turn and in batches once `routing.roundRobinBatch`
//! says so, strict-random deals each once per round, weighted never draws a weight of 0,
//! cost-optimized goes cheapest first and fails over to the dearer, fill-first keeps to
//! the first. The orderings themselves are the core's, with property tests there.

use reqwest::Method;
use serde_json::json;
use switchyard_test_support::{chat_body, Combo, Config, Harness, Key, CRED_ALPHA, CRED_BETA};

const TARGETS: [&str; 2] = ["alpha/mock-small", "beta/mock-small"];
const LOCAL_ONLY: &str = "sy-test-local-only-key-000000001";

fn combos(mock: &str) -> Config {
    Config::standard(mock)
        .combo(Combo::of("rr", "round-robin", TARGETS))
        .combo(Combo::of("deck", "strict-random", TARGETS))
        .combo(Combo::of("heavy", "weighted", TARGETS).weights([0, 3]))
        .combo(Combo::of("cheap", "cost-optimized", TARGETS).costs([5.0, 1.5]))
        .combo(Combo::of("first", "fill-first", TARGETS))
        .combo(Combo::of("shuffled", "random", TARGETS))
        .combo(Combo::of("sampled", "p2c", TARGETS))
        .combo(Combo::of("spread", "least-used", TARGETS))
        .combo(Combo::of("sticky", "lkgp", TARGETS))
        .combo(Combo::of("roomy", "headroom", TARGETS))
        // Listed beta first, so plan order alone would not pick alpha.
        .combo(Combo::of(
            "soonest",
            "reset-window",
            ["beta/mock-small", "alpha/mock-small"],
        ))
        .combo(Combo::of("scored", "reset-aware", TARGETS))
        .combo(Combo::of("judged", "auto", TARGETS).costs([5.0, 4.0]))
}

/// Sends `body`, which must be answered 200: the credential it reached the mock with.
async fn sent(h: &Harness, body: serde_json::Value) -> String {
    let r = h.chat(body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let seen = h.mock_requests().await;
    seen.last().unwrap()["credential"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// `n` requests to `model`: the credential each reached the mock with.
async fn credentials(h: &Harness, model: &str, n: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(sent(h, chat_body(model, false)).await);
    }
    out
}

#[tokio::test]
async fn round_robin_takes_turns_one_request_at_a_time_then_in_batches() {
    let h = Harness::start_with(combos, &[]).await;
    let (a, b) = (CRED_ALPHA.to_owned(), CRED_BETA.to_owned());
    assert_eq!(
        credentials(&h, "rr", 6).await,
        [&a, &b, &a, &b, &a, &b].map(String::clone)
    );
    // Other traffic does not move the combo's turn.
    credentials(&h, "first", 3).await;
    assert_eq!(credentials(&h, "rr", 2).await, [a.clone(), b.clone()]);
    let r = h
        .admin_send(
            Method::PUT,
            "/api/settings/routing.roundRobinBatch",
            json!({"value": 2}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    // The combo's 9th request (8 before it): batch 8 / 2 = 4, an even one, alpha's.
    assert_eq!(
        credentials(&h, "rr", 6).await,
        [&a, &a, &b, &b, &a, &a].map(String::clone)
    );
}

#[tokio::test]
async fn strict_random_deals_each_target_once_per_round() {
    let h = Harness::start_with(combos, &[]).await;
    let seen = credentials(&h, "deck", 8).await;
    for round in seen.chunks(2) {
        let mut r = round.to_vec();
        r.sort();
        assert_eq!(r, [CRED_ALPHA, CRED_BETA], "{seen:?}");
    }
}

#[tokio::test]
async fn weighted_cost_optimized_fill_first_and_random_pick_as_documented() {
    let h = Harness::start_with(combos, &[]).await;
    // A weight of 0 is never drawn while another is positive.
    assert!(credentials(&h, "heavy", 20)
        .await
        .iter()
        .all(|c| c == CRED_BETA));
    // Cheapest first: beta (1.5) over alpha (5.0)...
    assert!(credentials(&h, "cheap", 5)
        .await
        .iter()
        .all(|c| c == CRED_BETA));
    // ...and alpha when beta fails.
    h.rule(json!({"times": 1, "match": {"credential": CRED_BETA}, "status": 503}))
        .await;
    assert_eq!(credentials(&h, "cheap", 1).await, [CRED_ALPHA]);
    assert!(credentials(&h, "first", 5)
        .await
        .iter()
        .all(|c| c == CRED_ALPHA));
    // Random: both over 40 requests (each missing has odds of 2^-40).
    let mut shuffled = credentials(&h, "shuffled", 40).await;
    shuffled.sort();
    shuffled.dedup();
    assert_eq!(shuffled, [CRED_ALPHA, CRED_BETA]);
}

/// Every registered strategy (the registry's names, so a new one is covered at once) as
/// a combo `s-<name>` over the two cooling-capable targets of `resilience::cooling`.
fn every_strategy(mock: &str) -> Config {
    let local_only =
        Key::new("local-only", "local only", LOCAL_ONLY).allowed_connections(["local-1"]);
    switchyard_core::routing::strategy::names().fold(
        super::resilience::cooling(mock).key(local_only),
        |config, name| config.combo(Combo::of(&format!("s-{name}"), name, TARGETS)),
    )
}

#[tokio::test]
async fn every_strategy_honours_every_exclusion_and_reports_it_alike() {
    let h = Harness::start_with(every_strategy, &[]).await;
    let names: Vec<&str> = switchyard_core::routing::strategy::names().collect();
    assert!(names.len() >= 7, "{names:?}");
    // alpha cools for two minutes: no strategy sends it anything.
    h.rule(
        json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 429,
                  "headers": {"retry-after": "120"}}),
    )
    .await;
    assert_eq!(
        h.chat(chat_body("alpha/mock-small", false)).await.status(),
        429
    );
    for name in &names {
        let seen = credentials(&h, &format!("s-{name}"), 6).await;
        assert!(seen.iter().all(|c| c == CRED_BETA), "{name}: {seen:?}");
    }
    // beta is rate limited too: every strategy gives the same answer, calling nobody.
    h.rule(
        json!({"times": 1, "match": {"credential": CRED_BETA}, "status": 429,
                  "headers": {"retry-after": "120"}}),
    )
    .await;
    assert_eq!(
        h.chat(chat_body("beta/mock-small", false)).await.status(),
        429
    );
    let before = h.mock_requests().await.len();
    for name in &names {
        let r = h.chat(chat_body(&format!("s-{name}"), false)).await;
        let status = r.status().as_u16();
        let e: serde_json::Value = r.json().await.unwrap();
        let code = e["error"]["code"].as_str().unwrap_or_default().to_owned();
        assert_eq!(
            (status, code.as_str()),
            (429, "all_targets_rate_limited"),
            "{name}: {e}"
        );
        let retry = e["error"]["retry_after"].as_u64().unwrap();
        assert!((118..=120).contains(&retry), "{name}: {e}");
    }
    // A key that may use neither connection: the same diagnostics from every strategy.
    for name in &names {
        let r = h
            .http
            .post(h.url("/v1/chat/completions"))
            .bearer_auth(LOCAL_ONLY)
            .json(&chat_body(&format!("s-{name}"), false))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let e: serde_json::Value = r.json().await.unwrap();
        assert_eq!(status, 404, "{name}: {e}");
        assert_eq!(
            e["error"]["diagnostics"],
            json!({"excluded": [
                {"target": "alpha/mock-small", "connection": "alpha-1", "reason": "not_allowed_for_key"},
                {"target": "beta/mock-small", "connection": "beta-1", "reason": "not_allowed_for_key"}
            ]}),
            "{name}"
        );
    }
    assert_eq!(
        h.mock_requests().await.len(),
        before,
        "an excluded target was called"
    );
}

#[tokio::test]
async fn least_used_alternates_between_equally_used_targets() {
    let h = Harness::start_with(combos, &[]).await;
    let seen = credentials(&h, "spread", 10).await;
    assert!(seen.windows(2).all(|w| w[0] != w[1]), "{seen:?}");
    assert_eq!(seen.iter().filter(|c| *c == CRED_ALPHA).count(), 5);
}

#[tokio::test]
async fn p2c_keeps_off_a_failing_account_and_remembers_it_across_a_restart() {
    let mut h = Harness::start_with(combos, &[]).await;
    // alpha fails a request of its own: its success drops below beta's.
    h.rule(json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 503}))
        .await;
    assert_eq!(
        h.chat(chat_body("alpha/mock-small", false)).await.status(),
        502
    );
    assert_eq!(credentials(&h, "alpha/mock-small", 1).await, [CRED_ALPHA]);
    // Of two, p2c always takes the better: beta, every time.
    assert!(credentials(&h, "sampled", 8)
        .await
        .iter()
        .all(|c| c == CRED_BETA));
    // The request log seeds the stats at start: still beta.
    h.restart().await;
    assert!(credentials(&h, "sampled", 8)
        .await
        .iter()
        .all(|c| c == CRED_BETA));
}

/// Two accounts of `claude` and a cache-optimized combo over its model; session pins
/// off, so what keeps a conversation together is the strategy alone.
fn two_claude_accounts(mock: &str) -> Config {
    Config::anthropic(mock)
        .connection(
            switchyard_test_support::Connection::apikey("claude-2", "claude")
                .credential(CRED_CLAUDE_2)
                .disable_cooling(),
        )
        .combo(Combo::of(
            "cached",
            "cache-optimized",
            ["claude/claude-opus"],
        ))
        .setting("sessionAffinityTtlMs", 0)
}

const CRED_CLAUDE_2: &str = "cred-claude-2-secret-value";

#[tokio::test]
async fn cache_optimized_keeps_a_prompt_on_one_account_and_spreads_prompts() {
    let h = Harness::start_with(two_claude_accounts, &[]).await;
    let mut accounts = Vec::new();
    for prompt in 0..20 {
        let mut seen = Vec::new();
        for turn in 0..3 {
            let mut body = chat_body("cached", false);
            body["messages"] = json!([
                {"role": "system", "content": format!("You are assistant number {prompt}.")},
                {"role": "user", "content": format!("turn {turn}")}
            ]);
            let r = h.chat(body).await;
            assert_eq!(r.status(), 200);
            let last = h.mock_requests().await;
            seen.push(
                last.last().unwrap()["credential"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
        // The opening is the same until the turns differ: one account for all three.
        seen.dedup();
        assert_eq!(seen.len(), 1, "prompt {prompt}: {seen:?}");
        accounts.push(seen.remove(0));
    }
    accounts.sort();
    accounts.dedup();
    assert_eq!(
        accounts,
        [switchyard_test_support::CRED_CLAUDE, CRED_CLAUDE_2]
    );
}

#[tokio::test]
async fn the_quota_strategies_read_what_the_providers_report() {
    let h = Harness::start_with(combos, &[]).await;
    // alpha: 92 % of its 5-hour window used, its week 20 % used and resetting in an
    // hour; beta: 10 % and 20 %, its week resetting in almost six days.
    let report = |credential: &str, primary: &str, reset_s: &str| {
        json!({"match": {"credential": credential}, "headers": {
            "x-codex-primary-used-percent": primary, "x-codex-primary-window-minutes": "300",
            "x-codex-secondary-used-percent": "20", "x-codex-secondary-window-minutes": "10080",
            "x-codex-secondary-reset-after-seconds": reset_s}})
    };
    h.rule(report(CRED_ALPHA, "92", "3600")).await;
    h.rule(report(CRED_BETA, "10", "500000")).await;
    // Before any reading the strategies keep plan order; one answer each teaches them.
    assert_eq!(credentials(&h, "alpha/mock-small", 1).await, [CRED_ALPHA]);
    assert_eq!(credentials(&h, "beta/mock-small", 1).await, [CRED_BETA]);
    // headroom: beta has 80 % left, alpha 8 %.
    assert!(credentials(&h, "roomy", 4)
        .await
        .iter()
        .all(|c| c == CRED_BETA));
    // reset-window: alpha's week resets first (though beta is listed first).
    assert!(credentials(&h, "soonest", 4)
        .await
        .iter()
        .all(|c| c == CRED_ALPHA));
    // reset-aware: alpha's nearly spent 5-hour window outweighs its early weekly reset
    // (0.262 against beta's 0.298, by the formula in the core's tests).
    assert!(credentials(&h, "scored", 4)
        .await
        .iter()
        .all(|c| c == CRED_BETA));
}

#[tokio::test]
async fn lkgp_stays_on_the_last_good_account_across_a_restart() {
    let mut h = Harness::start_with(combos, &[]).await;
    assert_eq!(credentials(&h, "sticky", 2).await, [CRED_ALPHA, CRED_ALPHA]);
    // alpha fails once: beta serves, and keeps serving though alpha is listed first.
    h.rule(json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 503}))
        .await;
    assert!(credentials(&h, "sticky", 4)
        .await
        .iter()
        .all(|c| c == CRED_BETA));
    let marks: serde_json::Value = h.admin_json("/api/routing/last-good").await;
    assert_eq!(
        (
            marks.as_array().map(Vec::len),
            &marks[0]["combo"],
            &marks[0]["connection"]
        ),
        (Some(1), &json!("sticky"), &json!("beta-1"))
    );
    h.restart().await;
    assert!(credentials(&h, "sticky", 3)
        .await
        .iter()
        .all(|c| c == CRED_BETA));
    // beta fails once: back to alpha.
    h.rule(json!({"times": 1, "match": {"credential": CRED_BETA}, "status": 503}))
        .await;
    assert!(credentials(&h, "sticky", 3)
        .await
        .iter()
        .all(|c| c == CRED_ALPHA));
}

/// alpha's model holds 50 tokens, beta's 300.
fn small_windows(mock: &str) -> Config {
    combos(mock)
        .edit_provider("alpha", |p| p.context_window("mock-small", 50))
        .edit_provider("beta", |p| p.context_window("mock-small", 300))
        .combo(Combo::of("roomiest", "context-optimized", TARGETS))
}

/// A chat request to `model` whose prompt is about `bytes` bytes.
fn sized(model: &str, bytes: usize) -> serde_json::Value {
    let mut body = chat_body(model, false);
    body["messages"] = json!([{"role": "user", "content": "x".repeat(bytes)}]);
    body
}

#[tokio::test]
async fn targets_too_small_for_the_prompt_are_left_out_and_context_optimized_takes_the_largest() {
    let h = Harness::start_with(small_windows, &[]).await;
    // A short prompt fits both: the priority combo takes alpha, context-optimized beta.
    assert_eq!(sent(&h, sized("fast", 20)).await, CRED_ALPHA);
    assert_eq!(sent(&h, sized("roomiest", 20)).await, CRED_BETA);
    // About 150 tokens: too many for alpha's 50, so even priority goes to beta.
    assert_eq!(sent(&h, sized("fast", 600)).await, CRED_BETA);
    // About 750: too many for both; the client is told, and no upstream is called.
    let before = h.mock_requests().await.len();
    let r = h.chat(sized("fast", 3_000)).await;
    assert_eq!(r.status(), 400);
    let e: serde_json::Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "invalid_request");
    assert_eq!(e["error"]["param"], "messages");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(message.contains("the largest is 300 tokens"), "{message}");
    assert_eq!(h.mock_requests().await.len(), before);
}

#[tokio::test]
async fn auto_weighs_price_against_health_by_its_settings() {
    let h = Harness::start_with(combos, &[]).await;
    // Speed is measured on a shared machine and the draw explores: both off here, so
    // the score is health 0.35, price 0.2 and quota 0.15 (no readings: equal).
    for (setting, value) in [
        ("routing.auto.speedWeight", 0.0),
        ("routing.auto.exploration", 0.0),
    ] {
        let r = h
            .admin_send(
                Method::PUT,
                &format!("/api/settings/{setting}"),
                json!({"value": value}),
            )
            .await;
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }
    // Both healthy: beta is cheaper (4 against 5: price factors 1 and 0.8).
    assert!(credentials(&h, "judged", 3)
        .await
        .iter()
        .all(|c| c == CRED_BETA));
    // One failure and one success of beta's own: its success is 0.79, and 0.35 × 0.21
    // outweighs 0.2 × 0.2; beta stays usable, alpha goes first.
    h.rule(json!({"times": 1, "match": {"credential": CRED_BETA}, "status": 503}))
        .await;
    assert_eq!(
        h.chat(chat_body("beta/mock-small", false)).await.status(),
        502
    );
    assert_eq!(credentials(&h, "beta/mock-small", 1).await, [CRED_BETA]);
    assert!(credentials(&h, "judged", 4)
        .await
        .iter()
        .all(|c| c == CRED_ALPHA));
    // Price alone again: beta.
    let r = h
        .admin_send(
            Method::PUT,
            "/api/settings/routing.auto.healthWeight",
            json!({"value": 0.0}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert!(credentials(&h, "judged", 2)
        .await
        .iter()
        .all(|c| c == CRED_BETA));
}

#[tokio::test]
async fn the_route_trace_is_logged_and_sent_to_clients_that_ask() {
    let h = Harness::start_with(combos, &[]).await;
    let traced = |value: &'static str| {
        h.http
            .post(h.url("/v1/chat/completions"))
            .bearer_auth(switchyard_test_support::KEY)
            .header("x-switchyard-trace", value)
            .json(&chat_body("cheap", false))
            .send()
    };
    let r = traced("1").await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["x-switchyard-route"],
        "strategy=cost-optimized; facts=cost; order=beta/mock-small@beta-1{cost=1.5},alpha/mock-small@alpha-1{cost=5}"
    );
    // The log row keeps the same decision, structured.
    let row = h.newest_log_row(1).await;
    assert_eq!(
        row["route"],
        json!({"strategy": "cost-optimized", "facts": ["cost"], "order": [
            {"provider": "beta", "model": "mock-small", "connection_id": "beta-1",
             "facts": {"cost": 1.5}},
            {"provider": "alpha", "model": "mock-small", "connection_id": "alpha-1",
             "facts": {"cost": 5.0}}]})
    );
    // Not asked (or asked with 0): no header, but the log row all the same.
    let r = traced("0").await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("x-switchyard-route").is_none());
    let r = h.chat(chat_body("rr", false)).await;
    assert!(r.headers().get("x-switchyard-route").is_none());
    let row = h.newest_log_row(3).await;
    assert_eq!(row["route"]["strategy"], "round-robin");
    assert_eq!(row["route"]["facts"], json!(["turn"]));
    assert_eq!(row["route"]["turn"], 0);
    // A request refused before routing has none.
    let r = h.chat(chat_body("nowhere/none", false)).await;
    assert_eq!(r.status(), 404);
    let row = h.newest_log_row(4).await;
    assert_eq!(row["status"], 404);
    assert!(row.get("route").is_none(), "{row}");
}
