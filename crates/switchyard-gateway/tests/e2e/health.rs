//! Health over every component (SPEC O5): the status anyone may read, the detail behind
//! the admin credential, `degraded` for a component at fault and `down` (503) when no
//! configured provider can serve; `/metrics` behind the admin credential when
//! `monitoring.access` says so.

use crate::resilience::cooling;
use reqwest::Method;
use serde_json::{json, Value};
use switchyard_test_support::*;

/// The public health: status code and body, without a credential.
async fn public(h: &Harness) -> (u16, Value) {
    status_and_json(
        h.http
            .get(h.url("/api/monitoring/health"))
            .send()
            .await
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn health_judges_every_component_and_shows_its_detail_only_to_the_admin() {
    let h = Harness::start_with(cooling, &[]).await;
    assert_eq!(public(&h).await, (200, json!({"status": "ok"})));
    let detail = h.health().await;
    assert_eq!(
        (
            &detail["status"],
            &detail["reasons"],
            &detail["database"],
            &detail["terminal_connections"]
        ),
        (&json!("ok"), &json!([]), &json!("ok"), &json!([]))
    );
    // A wrong credential gets the public answer, not the detail.
    let r = h
        .http
        .get(h.url("/api/monitoring/health"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(status_and_json(r).await, (200, json!({"status": "ok"})));

    // beta's only connection runs out of credits: a terminal state.
    h.rule(json!({"times": 1, "match": {"credential": CRED_BETA}, "status": 402}))
        .await;
    assert_eq!(
        h.chat(chat_body("beta/mock-small", false)).await.status(),
        402
    );
    assert_eq!(public(&h).await, (200, json!({"status": "degraded"})));
    let detail = h.health().await;
    assert_eq!(detail["status"], "degraded");
    assert_eq!(
        detail["reasons"],
        json!([
            "provider `beta`: 1 connection(s) in a terminal state",
            "provider `beta`: no usable connection"
        ])
    );
    assert_eq!(
        detail["terminal_connections"],
        json!([{"connection_id": "beta-1", "provider": "beta", "state": "credits_exhausted"}])
    );

    // local's breaker opens (a local server's opens at 2 failures) and alpha runs out of
    // credits too: no provider can serve.
    h.rule(json!({"times": 2, "match": {"credential": "cred-local"}, "status": 503}))
        .await;
    for _ in 0..2 {
        h.chat(chat_body("local/m", false)).await;
    }
    assert_eq!(h.health().await["status"], "degraded");
    h.rule(json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 402}))
        .await;
    h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(public(&h).await, (503, json!({"status": "down"})));
    let r = h.admin_get("/api/monitoring/health").await;
    assert_eq!(r.status(), 503);
    let detail: Value = r.json().await.unwrap();
    assert_eq!(
        detail["reasons"],
        json!([
            "provider `alpha`: 1 connection(s) in a terminal state",
            "provider `alpha`: no usable connection",
            "provider `beta`: 1 connection(s) in a terminal state",
            "provider `beta`: no usable connection",
            "provider `local`: circuit breaker open",
        ])
    );
    // Resetting the breakers and the two accounts brings it back.
    let r = h
        .admin_send(
            Method::POST,
            "/api/resilience/reset",
            json!({"connectionIds": ["alpha-1", "beta-1"]}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(public(&h).await, (200, json!({"status": "ok"})));
}

#[tokio::test]
async fn metrics_need_the_admin_credential_when_monitoring_access_says_so() {
    let h = Harness::start().await;
    let metrics = |auth: Option<&'static str>| {
        let mut req = h.http.get(h.url("/metrics"));
        if let Some(token) = auth {
            req = req.bearer_auth(token);
        }
        async move { req.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(metrics(None).await, 200);
    let r = h
        .admin_send(
            Method::PUT,
            "/api/settings/monitoring.access",
            json!({"value": "admin"}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(metrics(None).await, 401);
    assert_eq!(metrics(Some(KEY)).await, 403);
    assert_eq!(metrics(Some(ADMIN)).await, 200);
    assert_eq!(metrics(Some(OPS_KEY)).await, 200);
    // The health status stays public.
    assert_eq!(public(&h).await, (200, json!({"status": "ok"})));
}
