//! The dispatch shapes (SPEC R19) over real sockets: `pipeline` chains its targets'
//! answers and `fusion` judges its panel's, each upstream call booked and logged on its
//! own (`<request id>.<n>`), the client answered once, streamed if it asked. Targets
//! `alpha/mock-small` and `beta/mock-small` are told apart by the credential that
//! reaches the mock; what each call carried is read from the mock's journal.

use serde_json::{json, Value};
use switchyard_core::routing::shape::REVISE_PROMPT;
use switchyard_test_support::{
    chat_body, messages_body, Combo, Config, Harness, CRED_ALPHA, CRED_BETA,
};

const TARGETS: [&str; 2] = ["alpha/mock-small", "beta/mock-small"];

fn shapes(mock: &str) -> Config {
    Config::standard(mock)
        .combo(Combo::of("chain", "pipeline", TARGETS))
        .combo(Combo::of("panel", "fusion", TARGETS))
}

/// The mock's journal from entry `from` on: (credential, body) of each call.
async fn calls_since(h: &Harness, from: usize) -> Vec<(String, Value)> {
    h.mock_requests().await[from..]
        .iter()
        .map(|r| {
            (
                r["credential"].as_str().unwrap().to_owned(),
                r["body"].clone(),
            )
        })
        .collect()
}

/// The text the mock answers the standard prompt with, asked directly.
async fn canned(h: &Harness) -> String {
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    let v: Value = r.json().await.unwrap();
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The newest `n` log rows as (request id, connection, status, error code), by id.
async fn rows(h: &Harness, n: usize) -> Vec<(String, String, u64, String)> {
    h.newest_log_row(n).await;
    let mut out: Vec<_> = h
        .admin_list(&format!("/api/logs?limit={n}"))
        .await
        .iter()
        .map(|r| {
            (
                r["request_id"].as_str().unwrap().to_owned(),
                r["connection_id"].as_str().unwrap_or_default().to_owned(),
                r["status"].as_u64().unwrap(),
                r["error_code"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

const HELLO: &str = "Hello there, mock!";

/// The request id the gateway gave the client's request.
fn request_id(r: &reqwest::Response) -> String {
    r.headers()["x-request-id"].to_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_pipeline_hands_each_answer_to_the_next_step_and_answers_with_the_last() {
    let h = Harness::start_with(shapes, &[]).await;
    let answer = canned(&h).await;
    let before = h.mock_requests().await.len();
    let r = h.chat(chat_body("chain", false)).await;
    assert_eq!(r.status(), 200);
    let id = request_id(&r);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], answer.as_str());
    let calls = calls_since(&h, before).await;
    assert_eq!(calls.len(), 2, "{calls:?}");
    // Step 1, alpha: the client's conversation, whole.
    assert_eq!(calls[0].0, CRED_ALPHA);
    assert_eq!(
        calls[0].1["messages"],
        json!([{"role": "user", "content": HELLO}])
    );
    // Step 2, beta: alpha's answer and the revise prompt after it.
    assert_eq!(calls[1].0, CRED_BETA);
    assert_eq!(
        calls[1].1["messages"],
        json!([{"role": "user", "content": HELLO},
               {"role": "assistant", "content": answer},
               {"role": "user", "content": REVISE_PROMPT}])
    );
    // Each call its own row: the step's `<id>.1`, the client's `<id>`.
    assert_eq!(
        rows(&h, 2).await,
        [
            (id.clone(), "beta-1".to_owned(), 200, String::new()),
            (format!("{id}.1"), "alpha-1".to_owned(), 200, String::new()),
        ]
    );
}

#[tokio::test]
async fn a_streamed_pipeline_streams_only_its_last_step() {
    let h = Harness::start_with(shapes, &[]).await;
    let before = h.mock_requests().await.len();
    // An Anthropic client over OpenAI upstreams: each step translated both ways.
    let r = h.messages(messages_body("chain", true)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let text = r.text().await.unwrap();
    assert!(text.contains("event: message_stop"), "{text}");
    let calls = calls_since(&h, before).await;
    assert_eq!(calls.len(), 2, "{calls:?}");
    // The translation to chat leaves a stream that is not asked for out.
    assert_eq!(calls[0].1.get("stream"), None, "{:?}", calls[0].1);
    assert_eq!(calls[1].1["stream"], true);
    let handed = &calls[1].1["messages"];
    assert_eq!(handed[1]["role"], "assistant");
    assert!(
        !handed[1]["content"].as_str().unwrap().is_empty(),
        "{handed}"
    );
    assert_eq!(handed[2], json!({"role": "user", "content": REVISE_PROMPT}));
}

#[tokio::test]
async fn a_step_that_fails_is_skipped_and_logged() {
    let h = Harness::start_with(shapes, &[]).await;
    h.rule(json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 500}))
        .await;
    let before = h.mock_requests().await.len();
    let r = h.chat(chat_body("chain", false)).await;
    assert_eq!(r.status(), 200);
    let id = request_id(&r);
    let calls = calls_since(&h, before).await;
    assert_eq!(calls.len(), 2, "{calls:?}");
    // Beta works from the client's conversation alone.
    assert_eq!(calls[1].0, CRED_BETA);
    assert_eq!(
        calls[1].1["messages"],
        json!([{"role": "user", "content": HELLO}])
    );
    let logged = rows(&h, 2).await;
    assert_eq!(
        logged[0],
        (id.clone(), "beta-1".to_owned(), 200, String::new())
    );
    assert_eq!((&logged[1].0, logged[1].2), (&format!("{id}.1"), 502));
}

#[tokio::test]
async fn a_request_with_tools_is_answered_by_one_target_whatever_the_shape() {
    let h = Harness::start_with(shapes, &[]).await;
    for combo in ["chain", "panel"] {
        let before = h.mock_requests().await.len();
        let mut body = chat_body(combo, false);
        body["tools"] = json!([{"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}]);
        let r = h.chat(body).await;
        assert_eq!(r.status(), 200, "{combo}");
        let calls = calls_since(&h, before).await;
        assert_eq!(calls.len(), 1, "{combo}: {calls:?}");
        assert_eq!(calls[0].0, CRED_ALPHA, "{combo}");
    }
}

#[tokio::test]
async fn a_fusion_panel_answers_in_parallel_and_the_first_target_judges() {
    let h = Harness::start_with(shapes, &[]).await;
    let answer = canned(&h).await;
    let before = h.mock_requests().await.len();
    let r = h.chat(chat_body("panel", true)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let id = request_id(&r);
    assert!(r.text().await.unwrap().ends_with("data: [DONE]\n\n"));
    let calls = calls_since(&h, before).await;
    assert_eq!(calls.len(), 3, "{calls:?}");
    // The panel, in either order: each the client's conversation, not streamed.
    let mut panel: Vec<&str> = calls[..2].iter().map(|(c, _)| c.as_str()).collect();
    panel.sort_unstable();
    assert_eq!(panel, [CRED_ALPHA, CRED_BETA]);
    for (_, body) in &calls[..2] {
        assert_eq!(body["stream"], false);
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": HELLO}])
        );
    }
    // The judge, alpha, streamed: both answers, in target order.
    let (judge, body) = &calls[2];
    assert_eq!(judge, CRED_ALPHA);
    assert_eq!(body["stream"], true);
    assert_eq!(
        body["messages"][0],
        json!({"role": "user", "content": HELLO})
    );
    assert_eq!(
        body["messages"][1]["content"],
        switchyard_core::routing::shape::judge_prompt(&[answer.clone(), answer])
    );
    assert_eq!(
        rows(&h, 3).await,
        [
            (id.clone(), "alpha-1".to_owned(), 200, String::new()),
            (format!("{id}.1"), "alpha-1".to_owned(), 200, String::new()),
            (format!("{id}.2"), "beta-1".to_owned(), 200, String::new()),
        ]
    );
}

#[tokio::test]
async fn a_fusion_panel_judges_what_came_and_cuts_who_is_late() {
    // Judge as soon as one answer is in: beta, slow, is cut.
    let h = Harness::start_with(
        |mock| {
            shapes(mock)
                .setting("routing.fusion.quorum", 1)
                .setting("routing.fusion.graceMs", 0)
        },
        &[],
    )
    .await;
    let answer = canned(&h).await;
    h.rule(json!({"match": {"credential": CRED_BETA}, "latency_ms": 20_000}))
        .await;
    let r = h.chat(chat_body("panel", false)).await;
    assert_eq!(r.status(), 200);
    let id = request_id(&r);
    let judged = h.mock_requests().await;
    let (_, body) = (
        &judged.last().unwrap()["credential"],
        &judged.last().unwrap()["body"],
    );
    assert_eq!(
        body["messages"][1]["content"],
        switchyard_core::routing::shape::judge_prompt(&[answer])
    );
    assert_eq!(
        rows(&h, 3).await,
        [
            (id.clone(), "alpha-1".to_owned(), 200, String::new()),
            (format!("{id}.1"), "alpha-1".to_owned(), 200, String::new()),
            (
                format!("{id}.2"),
                "beta-1".to_owned(),
                504,
                "fusion_deadline".to_owned()
            ),
        ]
    );
}

#[tokio::test]
async fn a_fusion_panel_that_all_failed_is_answered_as_one_request() {
    let h = Harness::start_with(shapes, &[]).await;
    h.rule(json!({"times": 2, "status": 500})).await;
    let before = h.mock_requests().await.len();
    let r = h.chat(chat_body("panel", false)).await;
    assert_eq!(r.status(), 200);
    let calls = calls_since(&h, before).await;
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(calls[2].0, CRED_ALPHA);
    assert_eq!(
        calls[2].1["messages"],
        json!([{"role": "user", "content": HELLO}])
    );
}

#[tokio::test]
async fn a_fusion_panel_cut_at_the_deadline_without_an_answer_is_a_gateway_timeout() {
    let h = Harness::start_with(
        |mock| shapes(mock).setting("routing.fusion.deadlineMs", 1_000),
        &[],
    )
    .await;
    h.rule(json!({"latency_ms": 20_000})).await;
    let r = h.chat(chat_body("panel", false)).await;
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 504, "{v}");
    assert_eq!(v["error"]["code"], "upstream_timeout");
    assert_eq!(
        v["error"]["message"],
        "no member of the fusion panel answered (0 failed, 2 cut at routing.fusion.deadlineMs = 1000 ms)"
    );
}

#[tokio::test]
async fn every_call_of_a_shape_books_quota_on_its_own() {
    use switchyard_test_support::{Allocation, Dimension, QuotaPool};
    let h = Harness::start_with(
        |mock| {
            shapes(mock).quota_pool(
                QuotaPool::new("team", "Team alpha", ["alpha-1"])
                    .dimension(Dimension::new("requests", "daily", 100))
                    .allocation(Allocation::new("k1").weight(100).policy("burst")),
            )
        },
        &[],
    )
    .await;
    let used = || async {
        let usage: Value = h.admin_json("/api/quota/pools/team/usage").await;
        usage["dimensions"][0]["globalUsed"].as_f64().unwrap()
    };
    // A pipeline calls alpha once (step 1; beta answers the client).
    assert_eq!(h.chat(chat_body("chain", false)).await.status(), 200);
    assert_eq!(used().await, 1.0);
    // A fusion calls alpha twice: as a panel member and as the judge.
    assert_eq!(h.chat(chat_body("panel", true)).await.status(), 200);
    assert_eq!(used().await, 3.0);
}

/// A chat turn of session `session` to `model`.
async fn session_turn(h: &Harness, session: &str, model: &str) -> reqwest::Response {
    h.http
        .post(h.url("/v1/chat/completions"))
        .bearer_auth(switchyard_test_support::KEY)
        .header("x-claude-code-session-id", session)
        .json(&chat_body(model, false))
        .send()
        .await
        .unwrap()
}

/// The mock's reply headers saying `credential`'s account has `percent` of its 5-hour
/// window used, for `times` answers (forever without).
fn used(credential: &str, percent: &str, times: Option<u64>) -> Value {
    let mut rule = json!({"match": {"credential": credential}, "headers": {
        "x-codex-primary-used-percent": percent, "x-codex-primary-window-minutes": "300"}});
    if let Some(n) = times {
        rule["times"] = json!(n);
    }
    rule
}

#[tokio::test]
async fn context_relay_hands_a_session_to_the_next_account_with_a_summary() {
    use switchyard_core::routing::relay::{handoff_text, SUMMARY_PROMPT};
    let h = Harness::start_with(
        |mock| Config::standard(mock).combo(Combo::of("relay", "context-relay", TARGETS)),
        &[],
    )
    .await;
    let answer = canned(&h).await;
    // alpha reports 90 % used twice (the first turn, the summary), then 96 %.
    h.rule(used(CRED_ALPHA, "90", Some(2))).await;
    h.rule(used(CRED_ALPHA, "96", None)).await;
    let before = h.mock_requests().await.len();
    let r = session_turn(&h, "s1", "relay").await;
    assert_eq!(r.status(), 200);
    let id = request_id(&r);
    // Past 85 %: alpha summarizes the conversation, off the request path.
    switchyard_test_support::eventually("the summary is made", || async {
        h.mock_requests().await.len() == before + 2
    })
    .await;
    let calls = calls_since(&h, before).await;
    assert_eq!(calls[1].0, CRED_ALPHA);
    assert_eq!(calls[1].1["stream"], false);
    assert_eq!(
        calls[1].1["messages"],
        json!([{"role": "user", "content": HELLO}, {"role": "user", "content": SUMMARY_PROMPT}])
    );
    let rows = rows(&h, 2).await;
    assert_eq!(
        rows[1],
        (
            format!("{id}.relay"),
            "alpha-1".to_owned(),
            200,
            String::new()
        )
    );
    // Still under 95 %: the session stays on alpha, which now reports 96 %.
    assert_eq!(session_turn(&h, "s1", "relay").await.status(), 200);
    assert_eq!(calls_since(&h, before + 2).await[0].0, CRED_ALPHA);
    // At its stop alpha goes last (the session's pin does not hold it): beta takes the
    // session, with alpha's summary as its first system message...
    assert_eq!(session_turn(&h, "s1", "relay").await.status(), 200);
    let (cred, body) = calls_since(&h, before + 3).await.remove(0);
    assert_eq!(cred, CRED_BETA);
    assert_eq!(
        body["messages"],
        json!([{"role": "system", "content": handoff_text(&answer)},
               {"role": "user", "content": HELLO}])
    );
    // ...once.
    assert_eq!(session_turn(&h, "s1", "relay").await.status(), 200);
    let (cred, body) = calls_since(&h, before + 4).await.remove(0);
    assert_eq!(cred, CRED_BETA);
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": HELLO}])
    );
    // Another session has no summary to carry: it goes to beta as sent.
    assert_eq!(session_turn(&h, "s2", "relay").await.status(), 200);
    let (cred, body) = calls_since(&h, before + 5).await.remove(0);
    assert_eq!(cred, CRED_BETA);
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": HELLO}])
    );
}
