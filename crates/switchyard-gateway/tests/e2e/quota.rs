//! Quota sharing end to end (SPEC Q): pools declared in the config file or through the
//! API, decisions seen by clients (429s, headers), usage and decisions endpoints,
//! persistence across a restart, and the overshoot guarantee under concurrency.

use reqwest::Method;
use serde_json::{json, Value};
use switchyard_test_support::*;

pub const KEY2: &str = "sy-test-client-key-0000000002";
pub const KEY3: &str = "sy-test-client-key-0000000003";

/// The standard configuration, two more client keys, and `pool`.
fn with_pool(mock_url: &str, pool: QuotaPool) -> Config {
    with_pool_none(mock_url).quota_pool(pool)
}

/// The standard configuration with pool `team` on `alpha-1`, given its dimensions and
/// allocations.
fn team_pool(
    mock_url: &str,
    dimensions: impl IntoIterator<Item = Dimension>,
    allocations: impl IntoIterator<Item = Allocation>,
) -> Config {
    let pool = QuotaPool::new("team", "Team", ["alpha-1"]);
    let pool = dimensions.into_iter().fold(pool, QuotaPool::dimension);
    with_pool(
        mock_url,
        allocations.into_iter().fold(pool, QuotaPool::allocation),
    )
}

fn three_equal_keys(mock_url: &str) -> Config {
    with_pool(
        mock_url,
        QuotaPool::new("team", "Team alpha", ["alpha-1"])
            .dimension(Dimension::new("requests", "hourly", 30))
            .allocation(Allocation::new("k1"))
            .allocation(Allocation::new("k2"))
            .allocation(Allocation::new("k3")),
    )
}

/// Sends `n` requests as `key` and returns the statuses, stopping after the first 429
/// (whose body is returned).
pub(crate) async fn burst(h: &Harness, key: &str, model: &str, n: usize) -> (usize, Option<Value>) {
    for i in 0..n {
        let r = h.chat_as(key, chat_body(model, false)).await;
        match r.status().as_u16() {
            200 => {}
            429 => return (i, Some(r.json().await.unwrap())),
            other => panic!("unexpected status {other}: {}", r.text().await.unwrap()),
        }
    }
    (n, None)
}

#[tokio::test]
async fn keys_borrow_while_lenient_and_stop_at_their_share_once_strict() {
    let h = Harness::start_with(three_equal_keys, &[]).await;
    // Weights of 0 everywhere: an equal split, 10 of 30 each. Key A may borrow while
    // the pool is under half used (15), then it is over its share in strict mode.
    let (ok, body) = burst(&h, KEY, "alpha/mock-small", 20).await;
    assert_eq!(ok, 15);
    let q = &body.unwrap()["error"];
    assert_eq!(q["code"], "quota_exceeded");
    assert_eq!(q["type"], "rate_limit_error");
    assert_eq!(
        (
            q["quota"]["pool"].as_str(),
            q["quota"]["dimension"].as_str(),
            q["quota"]["reason"].as_str(),
            q["quota"]["mode"].as_str(),
            q["quota"]["policy"].as_str(),
        ),
        (
            Some("team"),
            Some("requests:hourly"),
            Some("fair_share"),
            Some("strict"),
            Some("hard")
        )
    );
    assert_eq!(q["quota"]["consumed"], 15.0);
    assert_eq!(q["quota"]["fair_share"], 10.0);
    let msg = q["message"].as_str().unwrap();
    assert!(
        msg.starts_with("quota pool `team` (Team alpha) blocked the request on requests/hourly (hard policy, strict mode): key `k1` has used 15 of its fair share 10; retry in "),
        "{msg}"
    );
    // B and C still get answers: B its whole share, C what is left under the limit.
    let (ok, body) = burst(&h, KEY2, "alpha/mock-small", 20).await;
    assert_eq!(ok, 10);
    assert_eq!(body.unwrap()["error"]["quota"]["reason"], "fair_share");
    let (ok, body) = burst(&h, KEY3, "alpha/mock-small", 20).await;
    assert_eq!(ok, 5);
    assert_eq!(body.unwrap()["error"]["quota"]["reason"], "global_limit");
    // Refused requests never reached the upstream.
    assert_eq!(h.mock_stats().await["requests_total"], 30);
}

#[tokio::test]
async fn a_quota_429_says_when_to_come_back_and_admitted_answers_carry_the_remaining_share() {
    let h = Harness::start_with(three_equal_keys, &[]).await;
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 200);
    let hdr = |name: &str| r.headers()[name].to_str().unwrap().to_owned();
    assert_eq!(hdr("x-quota-pool"), "team");
    assert_eq!(hdr("x-ratelimit-limit-requests-hourly"), "10");
    assert_eq!(hdr("x-ratelimit-remaining-requests-hourly"), "9");
    // Over HTTP/2 (hyper's connection, which writes only the header map) the same
    // fields come.
    let r = h.chat_http2(chat_body("alpha/mock-small", false)).await;
    assert_eq!(
        (r.status().as_u16(), r.version()),
        (200, reqwest::Version::HTTP_2)
    );
    let fields: Vec<_> = [
        "x-quota-pool",
        "x-ratelimit-limit-requests-hourly",
        "x-ratelimit-remaining-requests-hourly",
    ]
    .map(|n| r.headers()[n].to_str().unwrap().to_owned())
    .into();
    assert_eq!(fields, ["team", "10", "8"]);
    burst(&h, KEY, "alpha/mock-small", 20).await;
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 429);
    // All 15 were booked within the last second, in at most two adjacent 28.125 s
    // slots, so the key fits again when enough of them phase out of the window: one
    // hour after their slot, give or take two slots, and never more than the hour.
    let retry = retry_after(&r);
    assert!((3543..=3600).contains(&retry), "{retry}");
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["error"]["quota"]["retry_after_ms"]
            .as_u64()
            .unwrap()
            .div_ceil(1000),
        retry
    );
    let decisions: Value = h
        .admin_json("/api/quota/pools/team/decisions?apiKeyId=k1")
        .await;
    let latest = &decisions[0];
    assert_eq!(
        (
            latest["admitted"].as_bool(),
            latest["dimension"].as_str(),
            latest["reason"].as_str(),
            latest["apiKeyId"].as_str()
        ),
        (
            Some(false),
            Some("requests:hourly"),
            Some("fair_share"),
            Some("k1")
        )
    );
    assert_eq!(decisions.as_array().unwrap().len(), 17);
}

fn capped(mock_url: &str) -> Config {
    team_pool(
        mock_url,
        [Dimension::new("requests", "daily", 100)],
        [
            Allocation::new("k1").weight(50),
            Allocation::new("k2")
                .weight(50)
                .cap(2, "requests")
                .policy("burst"),
        ],
    )
}

#[tokio::test]
async fn an_absolute_cap_blocks_early_even_while_the_pool_is_lenient() {
    let h = Harness::start_with(capped, &[]).await;
    let (ok, body) = burst(&h, KEY2, "alpha/mock-small", 5).await;
    assert_eq!(ok, 2);
    let q = &body.unwrap()["error"]["quota"];
    assert_eq!(
        (q["reason"].as_str(), q["mode"].as_str(), q["line"].as_f64()),
        (Some("cap"), Some("lenient"), Some(2.0))
    );
    // The other key is unaffected.
    assert_eq!(burst(&h, KEY, "alpha/mock-small", 3).await.0, 3);
}

fn soft(mock_url: &str) -> Config {
    team_pool(
        mock_url,
        [Dimension::new("requests", "hourly", 10)],
        [
            Allocation::new("k1").weight(10).policy("soft"),
            Allocation::new("k2").weight(90),
        ],
    )
}

#[tokio::test]
async fn a_soft_key_is_deprioritized_never_blocked_by_its_share() {
    let h = Harness::start_with(soft, &[]).await;
    // Lenient up to half the pool.
    assert_eq!(burst(&h, KEY, "alpha/mock-small", 5).await.0, 5);
    // Now strict and far over its share of 1: through a combo the pooled target moves
    // behind the unpooled one ...
    let r = h.chat(chat_body("fast", false)).await;
    assert_eq!(r.status(), 200);
    let stats = h.mock_stats().await;
    assert_eq!(stats["by_credential"][CRED_BETA], 1);
    assert_eq!(stats["by_credential"][CRED_ALPHA], 5);
    // The penalty is explained in the decisions.
    let decisions: Value = h
        .admin_json("/api/quota/pools/team/decisions?apiKeyId=k1")
        .await;
    assert_eq!(
        (
            decisions[0]["admitted"].as_bool(),
            decisions[0]["deprioritized"].as_bool(),
            decisions[0]["reason"].as_str(),
            decisions[0]["dimension"].as_str(),
            decisions[0]["mode"].as_str(),
        ),
        (
            Some(true),
            Some(true),
            Some("soft_share"),
            Some("requests:hourly"),
            Some("strict")
        )
    );
    // The factor is a score (SPEC Q7): at 0.9 the pooled first target (1 × 0.9) still
    // beats the unpooled second (0.8), and is tried first again.
    let r = h
        .admin_send(
            reqwest::Method::PUT,
            "/api/settings/quota.softDeprioritizeFactor",
            json!({"value": 0.9}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(h.chat(chat_body("fast", false)).await.status(), 200);
    let stats = h.mock_stats().await;
    assert_eq!(stats["by_credential"][CRED_BETA], 1);
    assert_eq!(stats["by_credential"][CRED_ALPHA], 6);
    // ... and asked for directly it is still served, up to the pool's limit.
    let (ok, body) = burst(&h, KEY, "alpha/mock-small", 10).await;
    assert_eq!(ok, 4);
    assert_eq!(body.unwrap()["error"]["quota"]["reason"], "global_limit");
}

fn weekly(mock_url: &str) -> Config {
    team_pool(
        mock_url,
        [
            Dimension::new("requests", "5h", 100),
            Dimension::new("requests", "weekly", 3),
        ],
        [Allocation::new("k1").weight(100).policy("burst")],
    )
}

#[tokio::test]
async fn an_exhausted_weekly_dimension_blocks_while_the_5h_one_is_free() {
    let h = Harness::start_with(weekly, &[]).await;
    let (ok, body) = burst(&h, KEY, "alpha/mock-small", 5).await;
    assert_eq!(ok, 3);
    assert_eq!(
        body.unwrap()["error"]["quota"]["dimension"],
        "requests:weekly"
    );
    let usage: Value = h.admin_json("/api/quota/pools/team/usage").await;
    assert_eq!(usage["dimensions"][0]["key"], "requests:5h");
    assert_eq!(usage["dimensions"][0]["globalUsed"], 3.0);
    assert_eq!(usage["dimensions"][1]["globalUsed"], 3.0);
    assert_eq!(usage["dimensions"][1]["usedFraction"], 1.0);
}

pub(crate) fn small_burst_pool(mock_url: &str) -> Config {
    team_pool(
        mock_url,
        [Dimension::new("requests", "daily", 4)],
        [Allocation::new("k1").weight(100).policy("burst")],
    )
}

#[tokio::test]
async fn counters_survive_a_restart() {
    let mut h = Harness::start_with(small_burst_pool, &[]).await;
    assert_eq!(burst(&h, KEY, "alpha/mock-small", 3).await.0, 3);
    h.restart().await;
    let (ok, body) = burst(&h, KEY, "alpha/mock-small", 3).await;
    assert_eq!(ok, 1);
    assert_eq!(body.unwrap()["error"]["quota"]["reason"], "global_limit");
}

fn big_burst_pool(mock_url: &str) -> Config {
    team_pool(
        mock_url,
        [Dimension::new("requests", "daily", 50)],
        [Allocation::new("k1").weight(100).policy("burst")],
    )
}

#[tokio::test]
async fn two_hundred_concurrent_requests_against_fifty_of_headroom_admit_exactly_fifty() {
    let h = Harness::start_with(big_burst_pool, &[]).await;
    h.rule(json!({"latency_ms": 50})).await;
    let statuses = h.concurrent_statuses(200, KEY, "alpha/mock-small").await;
    let count = |code: u16| statuses.iter().filter(|s| **s == code).count();
    assert_eq!(statuses.len(), count(200) + count(429), "{statuses:?}");
    assert_eq!((count(200), count(429)), (50, 150));
    assert_eq!(h.mock_stats().await["requests_total"], 50);
}

pub(crate) fn token_pool(mock_url: &str) -> Config {
    team_pool(
        mock_url,
        [Dimension::new("tokens", "daily", 100_000)],
        [Allocation::new("k1").weight(50)],
    )
}

#[tokio::test]
async fn tokens_are_settled_to_the_upstream_usage() {
    let h = Harness::start_with(token_pool, &[]).await;
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let total = body["usage"]["total_tokens"].as_f64().unwrap();
    assert!(total > PROMPT_TOKENS as f64);
    let mut streamed = chat_body("alpha/mock-small", true);
    streamed["stream_options"] = json!({"include_usage": true});
    let r = h.chat(streamed).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let usage_frame = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|v| v["usage"].is_object())
        .unwrap();
    let streamed_total = usage_frame["usage"]["total_tokens"].as_f64().unwrap();
    eventually("both requests settled", || async {
        let usage: Value = h.admin_json("/api/quota/pools/team/usage").await;
        let k1 = &usage["dimensions"][0]["keys"][0];
        k1["consumed"].as_f64() == Some(total + streamed_total)
    })
    .await;
    let usage: Value = h.admin_json("/api/quota/pools/team/usage").await;
    let k1 = &usage["dimensions"][0]["keys"][0];
    assert_eq!(k1["apiKeyId"], "k1");
    assert_eq!(k1["fairShare"], 50000.0);
    assert_eq!(k1["surplus"], 50000.0 - total - streamed_total);
    assert_eq!(k1["borrowing"], false);
    assert_eq!(
        k1["burnRate"]["tokensPerSecond"].as_f64().map(|r| r > 0.0),
        Some(true)
    );
}

fn percent_pool(mock_url: &str) -> Config {
    with_pool(
        mock_url,
        QuotaPool::new("codex", "Codex", ["alpha-1"])
            .dimension(Dimension::new("percent", "5h", 100))
            .allocation(Allocation::new("k1").weight(100).policy("burst")),
    )
}

#[tokio::test]
async fn a_provider_saying_the_account_is_used_up_blocks_until_its_reset() {
    let h = Harness::start_with(percent_pool, &[]).await;
    h.rule(json!({"headers": {
        "x-codex-primary-used-percent": "100",
        "x-codex-primary-window-minutes": "300",
        "x-codex-primary-reset-after-seconds": "120"
    }}))
    .await;
    assert_eq!(
        h.chat(chat_body("alpha/mock-small", false)).await.status(),
        200
    );
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 429);
    let retry = retry_after(&r);
    assert!((119..=120).contains(&retry), "{retry}");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["quota"]["reason"], "global_limit");
    let usage: Value = h.admin_json("/api/quota/pools/codex/usage").await;
    assert_eq!(usage["dimensions"][0]["providerSignal"], 1.0);
    assert_eq!(usage["dimensions"][0]["mode"], "strict");
}

#[tokio::test]
async fn pool_api_validates_every_field_and_writes_nothing_on_error() {
    let h = Harness::start().await;
    let good = json!({
        "id": "team", "name": "Team", "connectionIds": ["alpha-1"],
        "dimensions": [{"unit": "requests", "window": "hourly", "limit": 10}],
        "allocations": [{"apiKeyId": "k1", "allocationWeight": 100, "policy": "hard"}]
    });
    let bad = |path: &[&str], value: Value| {
        let mut v = good.clone();
        let mut cur = &mut v;
        for p in &path[..path.len() - 1] {
            cur = match p.parse::<usize>() {
                Ok(i) => &mut cur[i],
                Err(_) => &mut cur[*p],
            };
        }
        cur[path[path.len() - 1]] = value;
        v
    };
    let cases = [
        (bad(&["connectionIds"], json!(["nope"])), "connectionIds[0]"),
        (
            bad(&["dimensions", "0", "unit"], json!("bytes")),
            "dimensions[0].unit",
        ),
        (
            bad(&["dimensions", "0", "window"], json!("yearly")),
            "dimensions[0].window",
        ),
        (
            bad(&["dimensions", "0", "limit"], json!(-5)),
            "dimensions[0].limit",
        ),
        (
            bad(&["allocations", "0", "apiKeyId"], json!("ghost")),
            "allocations[0].apiKeyId",
        ),
        (
            bad(&["allocations", "0", "allocationWeight"], json!(150)),
            "allocations[0].allocationWeight",
        ),
        (
            bad(&["allocations", "0", "policy"], json!("greedy")),
            "allocations[0].policy",
        ),
    ];
    for (body, field) in cases {
        let r = h.admin_send(Method::POST, "/api/quota/pools", body).await;
        assert_eq!(r.status(), 400, "{field}");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["param"], field);
        assert_eq!(e["error"]["code"], "invalid_config");
    }
    let r = h
        .http
        .post(h.url("/api/quota/pools"))
        .bearer_auth(ADMIN)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "invalid_json");
    let r = h
        .admin_send(
            Method::POST,
            "/api/quota/pools",
            json!({"id": "x", "colour": 1}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let list: Value = h.admin_json("/api/quota/pools").await;
    assert_eq!(list, json!([]));
    // A valid pool is created once; a second pool on the same connection is refused.
    let r = h
        .admin_send(Method::POST, "/api/quota/pools", good.clone())
        .await;
    assert_eq!(r.status(), 201);
    let created: Value = r.json().await.unwrap();
    assert_eq!(created["effectiveDimensions"][0]["limit"], 10.0);
    let r = h
        .admin_send(Method::POST, "/api/quota/pools", good.clone())
        .await;
    assert_eq!(r.status(), 409);
    let mut second = good.clone();
    second["id"] = json!("other");
    let r = h.admin_send(Method::POST, "/api/quota/pools", second).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(
        e["error"]["message"],
        "connection `alpha-1` is in two quota pools, `team` and `other`"
    );
    // Update and delete.
    let mut updated = good.clone();
    updated["name"] = json!("Renamed");
    let r = h
        .admin_send(Method::PUT, "/api/quota/pools/team", updated)
        .await;
    assert_eq!(r.status(), 200);
    let r = h
        .admin_send(Method::PUT, "/api/quota/pools/other", good.clone())
        .await;
    assert_eq!(r.status(), 400);
    let got: Value = h.admin_json("/api/quota/pools/team").await;
    assert_eq!(got["name"], "Renamed");
    let r = h
        .admin_send(Method::DELETE, "/api/quota/pools/team", json!({}))
        .await;
    assert_eq!(r.status(), 204);
    assert_eq!(h.admin_get("/api/quota/pools/team").await.status(), 404);
}

#[tokio::test]
async fn deleting_a_key_removes_its_allocation_and_the_rest_split_the_pool() {
    let h = Harness::start_with(three_equal_keys, &[]).await;
    let r = h
        .admin_send(Method::DELETE, "/api/keys/k3", json!({}))
        .await;
    assert_eq!(r.status(), 204);
    let pool: Value = h.admin_json("/api/quota/pools/team").await;
    let keys: Vec<&str> = pool["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["apiKeyId"].as_str().unwrap())
        .collect();
    assert_eq!(keys, vec!["k1", "k2"]);
    // The remaining two now split the pool equally.
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.headers()["x-ratelimit-limit-requests-hourly"], "15");
}

#[tokio::test]
async fn plans_resolve_manual_then_catalog_then_empty_and_pools_inherit_them() {
    let h = Harness::start().await;
    let plan: Value = h.admin_json("/api/quota/plans/alpha-1").await;
    assert_eq!(
        plan,
        json!({"connectionId": "alpha-1", "source": "empty", "dimensions": []})
    );
    let r = h
        .admin_send(
            Method::PUT,
            "/api/quota/plans/alpha-1",
            json!({"dimensions": [{"unit": "requests", "window": "hourly", "limit": 6}]}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let plan: Value = r.json().await.unwrap();
    assert_eq!(plan["source"], "manual");
    let r = h
        .admin_send(
            Method::PUT,
            "/api/quota/plans/alpha-1",
            json!({"dimensions": [{"unit": "bytes", "window": "hourly", "limit": 6}]}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["param"], "dimensions[0].unit");
    let r = h
        .admin_send(
            Method::POST,
            "/api/quota/pools",
            json!({"id": "p", "name": "P", "connectionIds": ["alpha-1"],
                   "allocations": [{"apiKeyId": "k1", "allocationWeight": 100, "policy": "burst"}]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let pool: Value = r.json().await.unwrap();
    assert_eq!(
        pool["effectiveDimensions"],
        json!([{"unit": "requests", "window": "hourly", "limit": 6.0}])
    );
    assert_eq!(burst(&h, KEY, "alpha/mock-small", 10).await.0, 6);
    let r = h
        .admin_send(Method::DELETE, "/api/quota/plans/alpha-1", json!({}))
        .await;
    assert_eq!(r.status(), 204);
    let plan: Value = h.admin_json("/api/quota/plans/alpha-1").await;
    assert_eq!(plan["source"], "empty");
    assert_eq!(h.admin_get("/api/quota/plans/nope").await.status(), 404);
}

#[tokio::test]
async fn pools_import_once_into_an_empty_database() {
    let source = Harness::start_with(three_equal_keys, &[]).await;
    let exported: Value = source.admin_json("/api/quota/export").await;
    assert_eq!(exported[0]["id"], "team");
    let target = Harness::start_with(with_pool_none, &[]).await;
    let r = target
        .admin_send(Method::POST, "/api/quota/import", exported.clone())
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"imported": 1, "skipped": null})
    );
    let r = target
        .admin_send(Method::POST, "/api/quota/import", exported.clone())
        .await;
    let again: Value = r.json().await.unwrap();
    assert_eq!(again["imported"], 0);
    let pools: Value = target.admin_json("/api/quota/export").await;
    assert_eq!(pools, exported);
}

async fn start_on_redis(config: fn(&str) -> Config, store: &RedisQuotaStore) -> Harness {
    let h = Harness::start_with(config, &store.env()).await;
    let health: Value = h.health().await;
    assert_eq!(health["quota_store"], "redis");
    h
}

#[tokio::test]
async fn two_gateways_sharing_redis_see_one_another() {
    let store = RedisQuotaStore::unique();
    let a = start_on_redis(small_burst_pool, &store).await;
    let b = start_on_redis(small_burst_pool, &store).await;
    assert_eq!(burst(&a, KEY, "alpha/mock-small", 3).await.0, 3);
    let (ok, body) = burst(&b, KEY, "alpha/mock-small", 3).await;
    assert_eq!(ok, 1);
    assert_eq!(body.unwrap()["error"]["quota"]["reason"], "global_limit");
    let usage: Value = a.admin_json("/api/quota/pools/team/usage").await;
    assert_eq!(usage["dimensions"][0]["globalUsed"], 4.0);
}

#[tokio::test]
async fn on_redis_two_hundred_concurrent_requests_admit_exactly_fifty() {
    let h = start_on_redis(big_burst_pool, &RedisQuotaStore::unique()).await;
    h.rule(json!({"latency_ms": 50})).await;
    let statuses = h.concurrent_statuses(200, KEY, "alpha/mock-small").await;
    let count = |code: u16| statuses.iter().filter(|s| **s == code).count();
    assert_eq!(statuses.len(), count(200) + count(429), "{statuses:?}");
    assert_eq!((count(200), count(429)), (50, 150));
    assert_eq!(h.mock_stats().await["requests_total"], 50);
}

#[tokio::test]
async fn on_redis_tokens_settle_to_the_upstream_usage() {
    let h = start_on_redis(token_pool, &RedisQuotaStore::unique()).await;
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    let body: Value = r.json().await.unwrap();
    let total = body["usage"]["total_tokens"].as_f64().unwrap();
    eventually("the settlement reached Redis", || async {
        let usage: Value = h.admin_json("/api/quota/pools/team/usage").await;
        usage["dimensions"][0]["keys"][0]["consumed"].as_f64() == Some(total)
    })
    .await;
}

#[tokio::test]
async fn an_unreachable_redis_falls_back_to_sqlite() {
    let h = Harness::start_with(
        small_burst_pool,
        &[
            ("QUOTA_STORE_DRIVER", "redis"),
            ("QUOTA_STORE_REDIS_URL", "redis://127.0.0.1:1"),
        ],
    )
    .await;
    let health: Value = h.health().await;
    assert_eq!(health["quota_store"], "sqlite");
    // Still enforced, on SQLite.
    assert_eq!(burst(&h, KEY, "alpha/mock-small", 6).await.0, 4);
}

#[tokio::test]
async fn a_stream_running_past_its_estimate_grows_its_reservation_as_it_goes() {
    use futures_util::StreamExt;
    let h = Harness::start_with(token_pool, &[]).await;
    h.rule(json!({"chunks": 200, "chunk_interval_ms": 10}))
        .await;
    let mut body = chat_body("alpha/mock-small", true);
    // A tiny estimate: one completion token.
    body["max_tokens"] = json!(1);
    body["stream_options"] = json!({"include_usage": true});
    let r = h.chat(body).await;
    assert_eq!(r.status(), 200);
    let consumed = || async {
        let usage: Value = h.admin_json("/api/quota/pools/team/usage").await;
        usage["dimensions"][0]["keys"][0]["consumed"]
            .as_f64()
            .unwrap()
    };
    let mut stream = r.bytes_stream();
    let mut text = String::new();
    // Read until a few content chunks have passed through.
    while text.matches("\"content\"").count() < 20 {
        text.push_str(std::str::from_utf8(&stream.next().await.unwrap().unwrap()).unwrap());
    }
    // Mid-stream, the booking has already grown past the estimate by a step.
    assert!(consumed().await > 256.0);
    while let Some(chunk) = stream.next().await {
        text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    let usage = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|v| v["usage"].is_object())
        .unwrap();
    let total = usage["usage"]["total_tokens"].as_f64().unwrap();
    assert_eq!(total, (PROMPT_TOKENS + 200) as f64);
    eventually("the stream settled to its usage", || async {
        consumed().await == total
    })
    .await;
}

fn usd_pool(mock_url: &str) -> Config {
    team_pool(
        mock_url,
        [Dimension::new("usd", "daily", 100_000)],
        [Allocation::new("k1").weight(100)],
    )
    .edit_provider("alpha", |p| p.price("mock-small", 2_000_000.0, 1_000_000.0))
}

#[tokio::test]
async fn usd_dimensions_are_metered_with_the_model_price() {
    let h = Harness::start_with(usd_pool, &[]).await;
    let body: Value = h
        .chat(chat_body("alpha/mock-small", false))
        .await
        .json()
        .await
        .unwrap();
    let (prompt, completion) = (
        body["usage"]["prompt_tokens"].as_f64().unwrap(),
        body["usage"]["completion_tokens"].as_f64().unwrap(),
    );
    // $2 per prompt token and $1 per completion token.
    let expected = 2.0 * prompt + completion;
    let usage: Value = h.admin_json("/api/quota/pools/team/usage").await;
    assert_eq!(usage["dimensions"][0]["keys"][0]["consumed"], expected);
    let provider: Value = h.admin_json("/api/providers/alpha").await;
    assert_eq!(
        provider["prices"]["mock-small"],
        json!({"input_per_mtok": 2000000.0, "output_per_mtok": 1000000.0})
    );
    // A model without a price would meter $0 and never meet the budget: it is refused
    // on this pool, with a typed error naming it, and counted.
    let r = h.chat(chat_body("alpha/mock-large", false)).await;
    let (status, e) = status_and_json(r).await;
    assert_eq!(status, 403);
    assert_eq!(e["error"]["code"], "model_unpriced");
    assert_eq!(e["error"]["type"], "permission_error");
    assert_eq!(
        e["error"]["message"],
        "quota pool `team` meters `usd`, but model `alpha/mock-large` has no price: set its price on provider `alpha` (`price`), or use another model"
    );
    assert_eq!(
        h.metric(r#"switchyard_quota_unpriced_total{pool="team"}"#)
            .await,
        Some(1.0)
    );
    assert_eq!(h.mock_stats().await["by_credential"][CRED_ALPHA], 1);
    let usage: Value = h.admin_json("/api/quota/pools/team/usage").await;
    assert_eq!(usage["dimensions"][0]["keys"][0]["consumed"], expected);
    // Priced, it is metered like the other.
    let mut provider = provider;
    provider["prices"]["mock-large"] = json!({"input_per_mtok": 1.0, "output_per_mtok": 1.0});
    let r = h
        .admin_send(reqwest::Method::PUT, "/api/providers/alpha", provider)
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    eventually("the price applies", || async {
        h.chat(chat_body("alpha/mock-large", false)).await.status() == 200
    })
    .await;
}

pub const CRED_ALPHA2: &str = "cred-alpha-2-secret-value";

/// A pool over two connections of one provider, for `qtSd/` dispatch.
fn two_account_pool(mock_url: &str) -> Config {
    with_pool(
        mock_url,
        QuotaPool::new("team", "Team", ["alpha-1", "alpha-2"])
            .dimension(Dimension::new("requests", "hourly", 1000))
            .dimension(Dimension::new("percent", "5h", 100))
            .allocation(Allocation::new("k1").weight(50))
            .allocation(Allocation::new("k2").weight(50)),
    )
    .connection(Connection::oauth("alpha-2", "alpha").credential(CRED_ALPHA2))
}

#[tokio::test]
async fn qtsd_combos_spread_over_the_pool_connections() {
    let h = Harness::start_with(two_account_pool, &[]).await;
    for _ in 0..20 {
        let r = h.chat(chat_body("qtSd/team/mock-small", false)).await;
        assert_eq!(r.status(), 200);
    }
    let (a, b) = (
        h.by_credential(CRED_ALPHA).await,
        h.by_credential(CRED_ALPHA2).await,
    );
    assert_eq!(a + b, 20);
    assert!(a >= 5 && b >= 5, "alpha-1 {a}, alpha-2 {b}");
    // Without a model: the provider's first model.
    let r = h.chat(chat_body("qtSd/team", false)).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["model"], "mock-small");
    // Unknown pools are unknown models; qtSd/ combos are listed among the models.
    let r = h.chat(chat_body("qtSd/nope", false)).await;
    assert_eq!(r.status(), 404);
    let models: Value = h
        .http
        .get(h.url("/v1/models"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(models["data"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["id"] == "qtSd/team"));
}

#[tokio::test]
async fn qtsd_moves_off_a_connection_its_provider_reports_saturated() {
    let h = Harness::start_with(two_account_pool, &[]).await;
    h.rule(json!({"match": {"credential": CRED_ALPHA},
                  "headers": {"x-codex-primary-used-percent": "90", "x-codex-primary-window-minutes": "300"}}))
        .await;
    for _ in 0..10 {
        if h.by_credential(CRED_ALPHA).await > 0 {
            break;
        }
        h.chat(chat_body("qtSd/team/mock-small", false)).await;
    }
    assert_eq!(h.by_credential(CRED_ALPHA).await, 1);
    let before = h.by_credential(CRED_ALPHA2).await;
    for _ in 0..10 {
        assert_eq!(
            h.chat(chat_body("qtSd/team/mock-small", false))
                .await
                .status(),
            200
        );
    }
    assert_eq!(h.by_credential(CRED_ALPHA).await, 1);
    assert_eq!(h.by_credential(CRED_ALPHA2).await, before + 10);
}

fn one_slot_pool(mock_url: &str) -> Config {
    team_pool(
        mock_url,
        [Dimension::new("requests", "hourly", 1000)],
        [
            Allocation::new("k1").weight(50),
            Allocation::new("k2").weight(50),
        ],
    )
    .edit_connection("alpha-1", |c| c.max_concurrent(1))
}

#[tokio::test]
async fn qtsd_queues_for_a_one_slot_account_fairly_across_keys() {
    let h = Harness::start_with(one_slot_pool, &[]).await;
    h.rule(json!({"latency_ms": 100})).await;
    let done = Done::default();
    let send = |key, who| spawn_recorded(&h, key, "qtSd/team/mock-small", who, &done);
    let mut tasks: Vec<_> = (0..8).map(|_| send(KEY, "a")).collect();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    tasks.extend((0..2).map(|_| send(KEY2, "b")));
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(h.mock_stats().await["peak_in_flight"], 1);
    let order = done.lock().unwrap().clone();
    let last_b = order.iter().rposition(|w| *w == "b").unwrap();
    let a_before = order[..last_b].iter().filter(|w| **w == "a").count();
    // B's two requests are interleaved with A's backlog, not served after all of it.
    assert!(a_before <= 3, "{order:?}");
}

#[tokio::test]
async fn a_failing_quota_store_lets_requests_through_with_a_warning() {
    let store = RedisQuotaStore::unique();
    let h = start_on_redis(small_burst_pool, &store).await;
    let mut redis = redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // A counter of the wrong type makes every reservation script fail.
    let counter = format!("{}:q1:{{team}}:requests:daily:k1", store.prefix());
    let _: () = redis::cmd("SET")
        .arg(&counter)
        .arg("not a hash")
        .query_async(&mut redis)
        .await
        .unwrap();
    for _ in 0..6 {
        let r = h.chat(chat_body("alpha/mock-small", false)).await;
        assert_eq!(r.status(), 200);
        assert!(r.headers().get("x-quota-pool").is_none());
    }
    // Once the store works again, enforcement resumes.
    let _: () = redis::cmd("DEL")
        .arg(&counter)
        .query_async(&mut redis)
        .await
        .unwrap();
    let (ok, _) = burst(&h, KEY, "alpha/mock-small", 6).await;
    assert_eq!(ok, 4);
}

#[tokio::test]
async fn the_quota_share_strategy_is_not_user_selectable() {
    let h = Harness::start().await;
    let r = h
        .admin_send(
            Method::POST,
            "/api/combos",
            json!({"name": "mine", "strategy": "quota-share", "targets": [{"model": "alpha/mock-small"}]}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "invalid_config");
    assert_eq!(
        e["error"]["message"],
        "combo `mine`: unknown strategy `quota-share`: use one of priority, weighted, round-robin, fill-first, random, strict-random, cost-optimized, p2c, least-used, cache-optimized, headroom, reset-window, reset-aware, lkgp, context-optimized, auto, pipeline, fusion, context-relay"
    );
    assert_eq!(h.admin_get("/api/combos/mine").await.status(), 404);
}

/// 5 000 tokens an hour, all of them k1's share (hard).
fn small_token_pool(mock_url: &str) -> Config {
    team_pool(
        mock_url,
        [Dimension::new("tokens", "hourly", 5000)],
        [Allocation::new("k1").weight(100)],
    )
}

/// Four concurrent streams of 2 000 chunks each (about 3 000 tokens each by the
/// gateway's text estimate) against 5 000 tokens: each stream's booking grows step by
/// step through the admission decision, so the pool stops them near its limit, each
/// ending cleanly, and the upstream requests are cancelled. Returns what the pool
/// recorded.
async fn four_long_streams_on_a_small_pool(h: &Harness) -> f64 {
    use futures_util::future::join_all;
    use switchyard_core::quota::cost::STREAM_STEP_TOKENS;
    // The stall keeps an uncancelled upstream request in flight for good.
    h.rule(json!({"chunks": 2000, "chunk_interval_ms": 1, "stall_after_chunks": 1500}))
        .await;
    let streams = (0..4).map(|_| async {
        let r = h.chat(chat_body("alpha/mock-small", true)).await;
        assert_eq!(r.status(), 200);
        r.text().await.unwrap()
    });
    for text in join_all(streams).await {
        let frames: Vec<&str> = text.split("\n\n").filter(|f| !f.is_empty()).collect();
        let n = frames.len();
        assert!(n > 100, "{text}");
        let last: Value = serde_json::from_str(&frames[n - 3]["data: ".len()..]).unwrap();
        assert_eq!(
            (
                last["object"].as_str(),
                last["model"].as_str(),
                last["choices"][0]["finish_reason"].as_str()
            ),
            (
                Some("chat.completion.chunk"),
                Some("mock-small"),
                Some("length")
            )
        );
        let error: Value = serde_json::from_str(&frames[n - 2]["data: ".len()..]).unwrap();
        assert_eq!(
            (
                error["error"]["code"].as_str(),
                error["error"]["quota"]["pool"].as_str(),
                error["error"]["quota"]["dimension"].as_str()
            ),
            (Some("quota_exceeded"), Some("team"), Some("tokens:hourly"))
        );
        assert_eq!(frames[n - 1], "data: [DONE]");
    }
    eventually("the cut upstream requests are cancelled", || async {
        h.mock_stats().await["in_flight"] == 0
    })
    .await;
    eventually("every cut stream is logged as such", || async {
        let logs: Value = h.admin_json("/api/logs?limit=4").await;
        logs.as_array().is_some_and(|l| {
            l.len() == 4
                && l.iter()
                    .all(|r| r["error_code"] == "quota_exceeded" && r["status"] == 200)
        })
    })
    .await;
    // Settled (with Redis, by the background worker): read until it holds still.
    let consumed = || async {
        let usage: Value = h.admin_json("/api/quota/pools/team/usage").await;
        usage["dimensions"][0]["globalUsed"].as_f64().unwrap()
    };
    let mut last = -1.0;
    loop {
        let now = consumed().await;
        if now == last {
            break;
        }
        last = now;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let step = STREAM_STEP_TOKENS as f64;
    assert!(last <= 5000.0 + 4.0 * step, "recorded {last}");
    assert!(last >= 5000.0 - 4.0 * step, "recorded {last}");
    last
}

#[tokio::test]
async fn long_streams_on_a_small_token_pool_stop_at_its_limit_on_sqlite() {
    let h = Harness::start_with(small_token_pool, &[]).await;
    four_long_streams_on_a_small_pool(&h).await;
}

#[tokio::test]
async fn long_streams_on_a_small_token_pool_stop_at_its_limit_on_redis() {
    let h = start_on_redis(small_token_pool, &RedisQuotaStore::unique()).await;
    four_long_streams_on_a_small_pool(&h).await;
}

#[tokio::test]
async fn short_streams_without_max_tokens_book_one_step_so_many_run_at_once() {
    use futures_util::StreamExt;
    let h = Harness::start_with(small_token_pool, &[]).await;
    // Each holds its stream open: admitted streams stay booked at their first step.
    h.rule(json!({"chunks": 3, "stall_after_chunks": 1})).await;
    let mut open = Vec::new();
    let mut admitted = 0;
    for _ in 0..20 {
        let r = h.chat(chat_body("alpha/mock-small", true)).await;
        if r.status() == 200 {
            admitted += 1;
            let mut s = r.bytes_stream();
            s.next().await.unwrap().unwrap();
            open.push(s);
        } else {
            assert_eq!(r.status(), 429);
        }
    }
    // Each books its prompt estimate (12 tokens for this body) plus one 256-token
    // step: 18 fit in 5 000, where a 1 024-token default fitted four.
    assert_eq!(admitted, 18);
}

#[tokio::test]
async fn a_stored_unknown_policy_is_judged_hard_and_does_not_stop_the_gateway() {
    let mut h = Harness::start_with(with_pool_none, &[]).await;
    let r = h
        .admin_send(
            Method::POST,
            "/api/quota/pools",
            four_an_hour(json!([
                {"apiKeyId": "k1", "allocationWeight": 50, "policy": "soft"},
                {"apiKeyId": "k2", "allocationWeight": 50}
            ])),
        )
        .await;
    assert_eq!(r.status(), 201);
    // Through the API an unknown policy stays an error naming the field.
    let r = h
        .admin_send(
            Method::PUT,
            "/api/quota/pools/team",
            four_an_hour(json!([{"apiKeyId": "k1", "policy": "greedy"}])),
        )
        .await;
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["param"],
        "allocations[0].policy"
    );
    // Another version wrote a policy this one does not know.
    h.with_store(|s| {
        s.execute_raw("UPDATE quota_allocations SET policy = 'greedy' WHERE api_key_id = 'k1'")
            .unwrap()
    })
    .await;
    h.restart().await;
    // k1 is judged hard: once the pool is strict it stops at its share of 2.
    let (ok, body) = burst(&h, KEY, "alpha/mock-small", 5).await;
    assert_eq!(ok, 2);
    let q = &body.unwrap()["error"]["quota"];
    assert_eq!(
        (q["reason"].as_str(), q["policy"].as_str()),
        (Some("fair_share"), Some("hard"))
    );
}

/// Pool `team` on `alpha-1`, 4 requests an hour, with `allocations` (API JSON).
fn four_an_hour(allocations: Value) -> Value {
    json!({
        "id": "team", "name": "Team", "connectionIds": ["alpha-1"],
        "dimensions": [{"unit": "requests", "window": "hourly", "limit": 4}],
        "allocations": allocations
    })
}

/// The standard configuration and two more keys, no pool.
fn with_pool_none(mock_url: &str) -> Config {
    Config::standard(mock_url)
        .key(Key::new("k2", "second", KEY2))
        .key(Key::new("k3", "third", KEY3))
}

/// Usage as a key without an allocation sees it after two admitted requests, on the
/// gateway started with `env` and a clock standing still (burn rates are then exact).
async fn usage_of_an_unallocated_key(env: &[(&str, &str)]) -> Value {
    use switchyard_gateway::clock::{Clock, ManualClock, SystemClock};
    let clock = std::sync::Arc::new(ManualClock::new(SystemClock.now_ms()));
    let h = Harness::start_with_clock(small_burst_pool, env, clock).await;
    let first = h.chat_as(KEY2, chat_body("alpha/mock-small", false)).await;
    assert_eq!(first.status(), 200);
    let second = h.chat_as(KEY2, chat_body("alpha/mock-small", false)).await;
    assert_eq!(second.status(), 200);
    eventually("both requests are settled", || async {
        let usage: Value = h.admin_json("/api/quota/pools/team/usage").await;
        usage["dimensions"][0]["globalUsed"] == 2.0
    })
    .await;
    let usage: Value = h.admin_json("/api/quota/pools/team/usage").await;
    usage["dimensions"][0]["keys"].clone()
}

#[tokio::test]
async fn usage_and_burn_rates_of_unallocated_keys_are_the_same_on_both_drivers() {
    let on_redis = usage_of_an_unallocated_key(&RedisQuotaStore::unique().env()).await;
    let on_sqlite = usage_of_an_unallocated_key(&[]).await;
    let k2 = json!({
        "apiKeyId": "k2", "allocated": false, "policy": "hard", "allocationWeight": 0.0,
        "consumed": 2.0, "fairShare": 0.0, "surplus": -2.0, "borrowing": true, "cap": null,
        "burnRate": on_sqlite[1]["burnRate"].clone()
    });
    assert_eq!(on_sqlite[1], k2);
    // Two samples of one request each: a rate, so a time to exhaustion is reported.
    assert!(k2["burnRate"]["tokensPerSecond"].as_f64().unwrap() > 0.0);
    assert_eq!(on_redis, on_sqlite);
}

/// The remaining-share headers of three requests sent one right after another, on the
/// gateway started with `env`.
async fn remaining_after_each(env: &[(&str, &str)]) -> Vec<String> {
    let h = Harness::start_with(token_pool, env).await;
    let mut out = Vec::new();
    for _ in 0..3 {
        let r = h.chat(chat_body("alpha/mock-small", false)).await;
        assert_eq!(r.status(), 200);
        out.push(
            r.headers()["x-ratelimit-remaining-tokens-daily"]
                .to_str()
                .unwrap()
                .to_owned(),
        );
    }
    out
}

#[tokio::test]
async fn remaining_share_headers_count_finished_requests_settled_on_both_drivers() {
    let store = RedisQuotaStore::unique();
    let on_sqlite = remaining_after_each(&[]).await;
    // Each answer is 5 prompt + 5 completion tokens settled; the request itself counts
    // at its estimate (12 prompt + 1 024).
    let share = 50_000.0;
    let want: Vec<String> = (0..3)
        .map(|i| format!("{}", share - 10.0 * f64::from(i) - 1_036.0))
        .collect();
    assert_eq!(on_sqlite, want);
    assert_eq!(remaining_after_each(&store.env()).await, want);
}
