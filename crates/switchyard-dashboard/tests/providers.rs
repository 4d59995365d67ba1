//! The providers and connections page end to end: the fixtures' rows, creating,
//! editing (keeping the fields the forms do not edit, even when changed through the API
//! meanwhile) and deleting a provider and a connection (whose credential is write-only
//! and used by the gateway), and bad input refused with the API's message.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions fail loudly on purpose"
)]

mod common;

use common::{assert_none_of, done, failed, Signed};
use reqwest::Method;
use serde_json::{json, Value};
use switchyard_test_support::chat_body;

const PAGE: &str = "/dashboard/providers";
const CRED_GAMMA: &str = "cred-gamma-1-secret-value";
const CRED_GAMMA_2: &str = "cred-gamma-2-secret-value";

/// Asserts `body` shows no credential, the ones this test stores included.
fn no_credential(body: &str) {
    assert_none_of(body, &[CRED_GAMMA, CRED_GAMMA_2]);
}

async fn page(s: &Signed) -> String {
    let (status, body) = s.page(PAGE).await;
    assert_eq!(status, 200, "{body}");
    no_credential(&body);
    body
}

/// The management API's answer to `method path body`: its status and error message.
async fn api_error(s: &Signed, method: Method, path: &str, body: Value) -> (u16, String) {
    let r = s.h.admin_send(method, path, body).await;
    let status = r.status().as_u16();
    let e: Value = r.json().await.unwrap();
    (status, e["error"]["message"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn the_fixtures_are_listed_without_credentials() {
    let s = Signed::start().await;
    let body = page(&s).await;
    let mock = s.h.mock.base_url();
    assert!(
        body.contains(&format!(
        "<tr><td>alpha</td><td>openai</td><td>{mock}</td><td>mock-small, mock-large</td><td>—</td>"
    )),
        "{body}"
    );
    assert!(body.contains(&format!(
        "<tr><td>beta</td><td>openai</td><td>{mock}/v1</td><td>mock-small</td><td>—</td>"
    )));
    assert!(body.contains(
        "<tr><td>alpha-1</td><td>alpha</td><td>apikey</td><td>provider&#39;s</td><td>provider&#39;s</td><td>yes</td><td>set</td>"
    ));
    assert!(body.contains(
        "<tr><td>beta-1</td><td>beta</td><td>apikey</td><td>provider&#39;s</td><td>provider&#39;s</td><td>yes</td><td>set</td>"
    ));
    // The credential field is never filled in.
    assert!(body.contains(
        r#"<label for="connection-alpha-1-credential">Credential</label><input type="password" id="connection-alpha-1-credential" name="credential" autocomplete="new-password"><p class="hint">Write-only. Leave empty to keep the stored credential.</p>"#
    ));
    assert!(body.contains(r#"<input type="checkbox" name="disable_cooling" value="true" id="connection-alpha-1-disable_cooling" checked>"#));
}

#[tokio::test]
async fn providers_and_connections_are_created_edited_and_deleted() {
    let s = Signed::start().await;
    let mock = s.h.mock.base_url();
    let created = s
        .act(
            "/dashboard/providers/create",
            &[
                ("id", "gamma"),
                ("format", "openai"),
                ("base_url", &mock),
                ("models", "mock-small"),
                ("max_concurrent", ""),
            ],
        )
        .await;
    assert!(
        created.contains(&done("Provider gamma created.")),
        "{created}"
    );
    assert!(created.contains(&format!(
        "<tr><td>gamma</td><td>openai</td><td>{mock}</td><td>mock-small</td><td>—</td>"
    )));
    assert_eq!(
        s.h.admin_json("/api/providers/gamma").await,
        json!({"id": "gamma", "format": "openai", "base_url": mock, "models": ["mock-small"]})
    );

    let created = s
        .act(
            "/dashboard/connections/create",
            &[
                ("id", "gamma-1"),
                ("provider", "gamma"),
                ("auth_class", "apikey"),
                ("format", ""),
                ("base_url", ""),
                ("credential", CRED_GAMMA),
                ("max_concurrent", "3"),
                ("enabled", "true"),
            ],
        )
        .await;
    no_credential(&created);
    assert!(
        created.contains(&done("Connection gamma-1 created.")),
        "{created}"
    );
    assert!(created.contains(
        "<tr><td>gamma-1</td><td>gamma</td><td>apikey</td><td>provider&#39;s</td><td>provider&#39;s</td><td>yes</td><td>set</td>"
    ));
    let api = s.h.admin_json("/api/connections/gamma-1").await;
    assert_eq!(
        (api["has_credential"].clone(), api["max_concurrent"].clone()),
        (json!(true), json!(3))
    );
    assert!(!api.to_string().contains(CRED_GAMMA));
    assert_eq!(
        s.h.chat(chat_body("gamma/mock-small", false))
            .await
            .status(),
        200
    );
    assert_eq!(s.h.by_credential(CRED_GAMMA).await, 1);

    // Rate-limit overrides set through the API after the page was shown survive an
    // edit through the dashboard.
    let r =
        s.h.admin_send(
            Method::PUT,
            "/api/connections/gamma-1",
            json!({"id": "gamma-1", "provider": "gamma", "auth_class": "apikey",
                "max_concurrent": 3, "rate_limit_overrides": {"maxConcurrent": 2}}),
        )
        .await;
    assert_eq!(r.status(), 200);

    // An edit with an empty credential keeps it; unchecked means disabled.
    let edited = s
        .act(
            "/dashboard/connections/gamma-1/update",
            &[
                ("provider", "gamma"),
                ("auth_class", "apikey"),
                ("format", ""),
                ("base_url", ""),
                ("credential", ""),
                ("max_concurrent", ""),
            ],
        )
        .await;
    no_credential(&edited);
    assert!(edited.contains(&done("Connection gamma-1 saved.")));
    assert!(edited.contains(
        "<tr><td>gamma-1</td><td>gamma</td><td>apikey</td><td>provider&#39;s</td><td>provider&#39;s</td><td>no</td><td>set</td>"
    ));
    assert_eq!(
        s.h.admin_json("/api/connections/gamma-1").await,
        json!({"id": "gamma-1", "provider": "gamma", "auth_class": "apikey", "format": null,
            "base_url": null, "enabled": false, "max_concurrent": null,
            "rate_limit_overrides": {"maxConcurrent": 2}, "provider_specific_data": null,
            "disable_cooling": false, "has_credential": true})
    );
    assert_ne!(
        s.h.chat(chat_body("gamma/mock-small", false))
            .await
            .status(),
        200
    );
    assert_eq!(s.h.by_credential(CRED_GAMMA).await, 1);

    // A new credential is the one the gateway sends.
    s.act(
        "/dashboard/connections/gamma-1/update",
        &[
            ("provider", "gamma"),
            ("auth_class", "apikey"),
            ("credential", CRED_GAMMA_2),
            ("enabled", "true"),
        ],
    )
    .await;
    assert_eq!(
        s.h.chat(chat_body("gamma/mock-small", false))
            .await
            .status(),
        200
    );
    assert_eq!(s.h.by_credential(CRED_GAMMA_2).await, 1);
    assert_eq!(s.h.by_credential(CRED_GAMMA).await, 1);

    // Prices and output-token limits set through the API after the page was shown
    // survive an edit through the dashboard.
    let r =
        s.h.admin_send(
            Method::PUT,
            "/api/providers/gamma",
            json!({"id": "gamma", "format": "openai", "base_url": mock,
                "models": ["mock-small"],
                "prices": {"mock-small": {"input_per_mtok": 1.5, "output_per_mtok": 6.0}},
                "max_output_tokens": {"mock-small": 1000}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let edited = s
        .act(
            "/dashboard/providers/gamma/update",
            &[
                ("format", "openai"),
                ("base_url", &mock),
                ("models", "mock-small, mock-large"),
                ("max_concurrent", "5"),
            ],
        )
        .await;
    assert!(edited.contains(&done("Provider gamma saved.")));
    assert!(edited.contains(&format!(
        "<tr><td>gamma</td><td>openai</td><td>{mock}</td><td>mock-small, mock-large</td><td>5</td>"
    )));
    assert_eq!(
        s.h.admin_json("/api/providers/gamma").await,
        json!({"id": "gamma", "format": "openai", "base_url": mock,
            "models": ["mock-small", "mock-large"], "max_concurrent": 5,
            "prices": {"mock-small": {"input_per_mtok": 1.5, "output_per_mtok": 6.0}},
            "max_output_tokens": {"mock-small": 1000}})
    );

    let forged =
        s.c.post(s.h.url("/dashboard/connections/gamma-1/delete"))
            .header("cookie", &s.cookie)
            .send()
            .await
            .unwrap();
    assert_eq!(forged.status(), 403);
    assert_eq!(
        s.h.admin_get("/api/connections/gamma-1").await.status(),
        200
    );

    // Deleting takes two steps: the summary unfolds the button that deletes.
    for (base, what, id) in [
        ("connections", "connection", "gamma-1"),
        ("providers", "provider", "gamma"),
    ] {
        assert!(edited.contains(&format!(
            r#"<details class="confirm"><summary>Delete {id}…</summary><form method="post" action="/dashboard/{base}/{id}/delete"><input type="hidden" name="csrf" value="{}"><button type="submit">Delete {what} {id} for good</button></form></details>"#,
            s.csrf
        )), "{edited}");
    }
    let deleted = s.act("/dashboard/connections/gamma-1/delete", &[]).await;
    assert!(deleted.contains(&done("Connection gamma-1 deleted.")));
    assert!(!deleted.contains("<tr><td>gamma-1</td>"));
    assert_eq!(
        s.h.admin_get("/api/connections/gamma-1").await.status(),
        404
    );
    let deleted = s.act("/dashboard/providers/gamma/delete", &[]).await;
    assert!(deleted.contains(&done("Provider gamma deleted.")));
    assert!(!deleted.contains("<tr><td>gamma</td>"));
    assert_eq!(s.h.admin_get("/api/providers/gamma").await.status(), 404);
}

#[tokio::test]
async fn bad_input_shows_the_apis_message_and_changes_nothing() {
    let s = Signed::start().await;
    let providers = s.h.admin_json("/api/providers").await;
    let connections = s.h.admin_json("/api/connections").await;

    let after = s
        .act(
            "/dashboard/connections/create",
            &[
                ("id", "x-1"),
                ("provider", "nope"),
                ("auth_class", "apikey"),
                ("enabled", "true"),
            ],
        )
        .await;
    let (status, message) = api_error(
        &s,
        Method::POST,
        "/api/connections",
        json!({"id": "x-1", "provider": "nope", "auth_class": "apikey"}),
    )
    .await;
    assert_eq!(
        (status, message.as_str()),
        (400, "provider: unknown provider `nope`")
    );
    assert!(after.contains(&failed(&message)), "{after}");

    let after = s
        .act(
            "/dashboard/providers/create",
            &[
                ("id", "bad id"),
                ("format", "openai"),
                ("base_url", "http://127.0.0.1:9"),
            ],
        )
        .await;
    let (status, message) = api_error(
        &s,
        Method::POST,
        "/api/providers",
        json!({"id": "bad id", "format": "openai", "base_url": "http://127.0.0.1:9"}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(after.contains(&failed(&message)), "{message}: {after}");

    let after = s.act("/dashboard/providers/alpha/delete", &[]).await;
    let (status, message) = api_error(&s, Method::DELETE, "/api/providers/alpha", json!({})).await;
    assert_eq!(status, 409);
    assert!(after.contains(&failed(&message)), "{message}: {after}");

    let forged =
        s.c.post(s.h.url("/dashboard/providers/create"))
            .header("cookie", &s.cookie)
            .form(&[
                ("id", "delta"),
                ("format", "openai"),
                ("base_url", "http://127.0.0.1:9"),
            ])
            .send()
            .await
            .unwrap();
    assert_eq!(forged.status(), 403);
    assert_eq!(s.h.admin_json("/api/providers").await, providers);
    assert_eq!(s.h.admin_json("/api/connections").await, connections);
}
