//! The usage wall (SPEC R17): the walled 429, the slow lane and the limit reset
//! endpoints, over real sockets.

#![expect(clippy::unwrap_used, reason = "test code")]

use serde_json::{json, Value};
use switchyard_mock::MockServer;

/// 2027-01-15T08:00:00Z, a multiple of five hours.
const NOW: u64 = 1_800_000_000;
const RESET_AT: u64 = NOW + 3600;

struct Mock {
    server: MockServer,
    client: reqwest::Client,
}

impl Mock {
    async fn start() -> Self {
        let server = MockServer::start_local().await.unwrap();
        let client = reqwest::Client::new();
        let mock = Self { server, client };
        mock.post("/_mock/clock", json!({"now": NOW})).await;
        mock
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.base_url())
    }

    async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    async fn get(&self, path: &str) -> Value {
        self.client
            .get(self.url(path))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn wall(&self, wall: Value) {
        assert_eq!(self.post("/_mock/wall", wall).await.status(), 204);
    }

    /// A `/v1/messages` call of `credential`, on the slow lane when `slow`.
    async fn call(&self, credential: &str, slow: bool) -> reqwest::Response {
        let mut req = self
            .client
            .post(self.url("/v1/messages"))
            .bearer_auth(credential)
            .json(&json!({"model": "claude-x", "max_tokens": 100, "messages": [{"role": "user", "content": "abcdefgh"}]}));
        if slow {
            req = req.header("anthropic-usage-limit", "slow");
        }
        req.send().await.unwrap()
    }

    /// `GET /api/oauth/usage` with the query the gateway sends.
    async fn usage(&self, credential: &str) -> reqwest::Response {
        self.client
            .get(self.url("/api/oauth/usage?at_wall=1&skip_spend=1"))
            .bearer_auth(credential)
            .send()
            .await
            .unwrap()
    }

    async fn claim(&self, credential: &str, body: Value) -> reqwest::Response {
        self.client
            .post(self.url("/api/organizations/org-1/reset_rate_limits"))
            .bearer_auth(credential)
            .json(&body)
            .send()
            .await
            .unwrap()
    }
}

/// The response's `anthropic-ratelimit-unified-*` headers, in order.
fn unified(r: &reqwest::Response) -> Vec<(String, String)> {
    r.headers()
        .iter()
        .filter(|(k, _)| k.as_str().starts_with("anthropic-ratelimit-unified-"))
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap().to_owned()))
        .collect()
}

/// The unified headers of a walled answer, then `extra`.
fn walled(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let reset = RESET_AT.to_string();
    let mut h = vec![
        ("anthropic-ratelimit-unified-status", "rejected"),
        ("anthropic-ratelimit-unified-5h-utilization", "1.0"),
        ("anthropic-ratelimit-unified-5h-reset", reset.as_str()),
        ("anthropic-ratelimit-unified-7d-utilization", "0.0"),
        ("anthropic-ratelimit-unified-7d-reset", "1800489600"),
        ("anthropic-ratelimit-unified-reset", reset.as_str()),
    ];
    h.extend_from_slice(extra);
    h.into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn error(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

#[tokio::test]
async fn a_walled_credential_gets_429_with_the_slow_offer_and_others_pass() {
    let mock = Mock::start().await;
    mock.wall(json!({"credential": "oat-1", "reset_at": RESET_AT}))
        .await;
    let r = mock.call("oat-1", false).await;
    assert_eq!(r.status(), 429);
    assert_eq!(
        unified(&r),
        walled(&[("anthropic-ratelimit-unified-slow-offer", "treatment")])
    );
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        error(
            "rate_limit_error",
            "mock usage wall: this account's 5-hour limit is reached"
        )
    );
    let r = mock.call("oat-2", false).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["anthropic-ratelimit-unified-status"], "allowed");
    let r = mock.call("oat-2", true).await;
    assert_eq!(
        r.headers()["anthropic-ratelimit-unified-slow-status"],
        "not_needed"
    );
    mock.wall(json!({"credential": "oat-2", "reset_at": RESET_AT, "offer": false}))
        .await;
    let r = mock.call("oat-2", false).await;
    assert_eq!(r.status(), 429);
    assert_eq!(unified(&r), walled(&[]));
}

#[tokio::test]
async fn the_slow_lane_waits_on_slot_busy_then_answers() {
    let mock = Mock::start().await;
    mock.wall(json!({"credential": "oat-1", "reset_at": RESET_AT,
        "slow": {"statuses": ["slot_busy", "slot_busy", "active"], "retry_after_s": 7, "max_wait_s": 60}}))
        .await;
    for left in [json!(["slot_busy", "active"]), json!(["active"])] {
        let r = mock.call("oat-1", true).await;
        assert_eq!(r.status(), 429);
        assert_eq!(
            unified(&r),
            walled(&[
                ("anthropic-ratelimit-unified-slow-retry-after", "7"),
                ("anthropic-ratelimit-unified-slow-max-wait", "60"),
                ("anthropic-ratelimit-unified-slow-status", "slot_busy"),
            ])
        );
        assert_eq!(
            r.json::<Value>().await.unwrap(),
            error("rate_limit_error", "mock slow lane: slot_busy")
        );
        assert_eq!(
            mock.get("/_mock/wall").await["walls"][0]["wall"]["slow"]["statuses"],
            left
        );
    }
    for _ in 0..2 {
        let r = mock.call("oat-1", true).await;
        assert_eq!(r.status(), 200);
        assert_eq!(
            unified(&r),
            walled(&[("anthropic-ratelimit-unified-slow-status", "active")])
        );
        assert_eq!(
            r.json::<Value>().await.unwrap(),
            switchyard_mock::anthropic::message("claude-x", 5, 2)
        );
    }
    assert_eq!(mock.call("oat-1", false).await.status(), 429);
}

#[tokio::test]
async fn overload_and_exit_statuses_and_the_overage_flag() {
    let mock = Mock::start().await;
    mock.wall(
        json!({"credential": "oat-1", "reset_at": RESET_AT, "overage_in_use": true,
        "slow": {"statuses": ["overloaded", "weekly_limit", "ineligible"], "retry_after_s": 5}}),
    )
    .await;
    let overage = ("anthropic-ratelimit-unified-overage-in-use", "true");
    let r = mock.call("oat-1", true).await;
    assert_eq!(r.status(), 529);
    assert_eq!(
        unified(&r),
        walled(&[
            overage,
            ("anthropic-ratelimit-unified-slow-retry-after", "5")
        ])
    );
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        error("overloaded_error", "Overloaded")
    );
    for status in ["weekly_limit", "ineligible", "ineligible"] {
        let r = mock.call("oat-1", true).await;
        assert_eq!(r.status(), 429);
        assert_eq!(
            unified(&r),
            walled(&[overage, ("anthropic-ratelimit-unified-slow-status", status)])
        );
        assert_eq!(
            r.json::<Value>().await.unwrap(),
            error("rate_limit_error", &format!("mock slow lane: {status}"))
        );
    }
}

#[tokio::test]
async fn the_wall_falls_at_its_reset_time_and_with_the_mock_reset() {
    let mock = Mock::start().await;
    mock.wall(json!({"credential": "oat-1", "reset_at": RESET_AT}))
        .await;
    assert_eq!(
        mock.get("/_mock/wall").await,
        json!({"walls": [{"wall": {"credential": "oat-1", "reset_at": RESET_AT, "offer": true,
            "slow": {"statuses": ["active"]}, "overage_in_use": false}, "up": true}]})
    );
    mock.post("/_mock/clock", json!({"now": RESET_AT})).await;
    let r = mock.call("oat-1", false).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["anthropic-ratelimit-unified-status"], "allowed");
    assert_eq!(
        r.headers()["anthropic-ratelimit-unified-5h-reset"],
        "1800018000"
    );
    mock.post("/_mock/clock", json!({"now": NOW})).await;
    assert_eq!(mock.call("oat-1", false).await.status(), 429);
    assert_eq!(mock.post("/_mock/reset", json!({})).await.status(), 204);
    assert_eq!(mock.get("/_mock/wall").await, json!({"walls": []}));
    assert_eq!(mock.call("oat-1", false).await.status(), 200);
    mock.wall(json!({"credential": "oat-1", "reset_at": u64::MAX}))
        .await;
    let r = mock
        .client
        .delete(mock.url("/_mock/wall"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(mock.call("oat-1", false).await.status(), 200);
}

#[tokio::test]
async fn a_limit_reset_lifts_the_wall_once() {
    let mock = Mock::start().await;
    mock.wall(json!({"credential": "oat-1", "reset_at": RESET_AT,
        "reset_program": {"next_available_at": 1_800_604_800}}))
        .await;
    let r = mock.usage("oat-1").await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"juniper_tide": {"arm": "reset", "available": true, "next_available_at": 1_800_604_800}})
    );
    let program = json!({"program": "juniper_tide"});
    let r = mock.claim("oat-1", program.clone()).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"result": "reset", "next_available_at": 1_800_604_800})
    );
    let r = mock.call("oat-1", false).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["anthropic-ratelimit-unified-status"], "allowed");
    assert_eq!(
        mock.usage("oat-1").await.json::<Value>().await.unwrap(),
        json!({"juniper_tide": {"arm": "reset", "available": false, "next_available_at": 1_800_604_800}})
    );
    assert_eq!(
        mock.claim("oat-1", program.clone())
            .await
            .json::<Value>()
            .await
            .unwrap(),
        json!({"result": "already_used", "next_available_at": 1_800_604_800})
    );
    let journal = mock.get("/_mock/requests").await;
    let seen: Vec<(&str, &str, &Value)> = journal["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["path"].as_str().unwrap().starts_with("/api/"))
        .map(|r| {
            (
                r["method"].as_str().unwrap(),
                r["path"].as_str().unwrap(),
                &r["query"],
            )
        })
        .collect();
    let usage = ("GET", "/api/oauth/usage", &json!("at_wall=1&skip_spend=1"));
    let claim = (
        "POST",
        "/api/organizations/org-1/reset_rate_limits",
        &Value::Null,
    );
    assert_eq!(seen, [usage, claim, usage, claim]);
    assert_eq!(journal["requests"][1]["body"], program);
    assert_eq!(journal["requests"][1]["authorization"], "Bearer");
}

#[tokio::test]
async fn the_reset_program_answers_as_scripted() {
    let mock = Mock::start().await;
    mock.wall(json!({"credential": "oat-1", "reset_at": RESET_AT,
        "reset_program": {"arm": "control", "available": false, "result": "not_offered"}}))
        .await;
    assert_eq!(
        mock.usage("oat-1").await.json::<Value>().await.unwrap(),
        json!({"juniper_tide": {"arm": "control", "available": false}})
    );
    let program = json!({"program": "juniper_tide"});
    assert_eq!(
        mock.claim("oat-1", program.clone())
            .await
            .json::<Value>()
            .await
            .unwrap(),
        json!({"result": "not_offered"})
    );
    assert_eq!(mock.call("oat-1", false).await.status(), 429);
    assert_eq!(
        mock.usage("oat-2").await.json::<Value>().await.unwrap(),
        json!({"juniper_tide": {"arm": "none", "available": false}})
    );
    assert_eq!(
        mock.claim("oat-2", program.clone())
            .await
            .json::<Value>()
            .await
            .unwrap(),
        json!({"result": "not_offered"})
    );
    let r = mock.claim("oat-1", json!({"program": "other"})).await;
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        error(
            "invalid_request_error",
            "the body must be {\"program\": \"juniper_tide\"}"
        )
    );
    let r = mock
        .client
        .get(mock.url("/api/oauth/usage"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = mock
        .post("/api/organizations/org-1/reset_rate_limits", program)
        .await;
    assert_eq!(r.status(), 401);
}
