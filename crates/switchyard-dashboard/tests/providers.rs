//! The providers and connections page end to end: the fixtures' rows, creating,
//! editing (keeping the fields the forms do not edit, even when changed through the API
//! meanwhile) and deleting a provider and a connection (whose credential is write-only
//! and used by the gateway), and bad input refused with the API's message.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions fail loudly on purpose"
)]

mod common;

use common::{assert_none_of, done, failed, field, notice, row_head, texts, Signed};
use reqwest::Method;
use serde_json::{json, Value};
use switchyard_test_support::chat_body;

const PAGE: &str = "/dashboard/providers";
const PROVIDERS: &str = "Providers";
const CONNECTIONS: &str = "Connections (credentials are never shown)";

/// The first five cells of provider `id`'s row.
fn provider_row(body: &str, id: &str) -> Option<Vec<String>> {
    row_head(body, PROVIDERS, id, 5)
}

/// The first seven cells of connection `id`'s row.
fn connection_row(body: &str, id: &str) -> Option<Vec<String>> {
    row_head(body, CONNECTIONS, id, 7)
}
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
    assert_eq!(
        provider_row(&body, "alpha").unwrap(),
        ["alpha", "openai", &mock, "mock-small, mock-large", "—"]
    );
    assert_eq!(
        provider_row(&body, "beta").unwrap(),
        ["beta", "openai", &format!("{mock}/v1"), "mock-small", "—"]
    );
    for (id, provider) in [("alpha-1", "alpha"), ("beta-1", "beta")] {
        assert_eq!(
            connection_row(&body, id).unwrap(),
            [
                id,
                provider,
                "apikey",
                "provider's",
                "provider's",
                "yes",
                "set"
            ]
        );
    }
    // The credential field is never filled in.
    let edit = "form[action='/dashboard/connections/alpha-1/update']";
    assert_eq!(field(&body, edit, "credential").as_deref(), Some(""));
    assert_eq!(
        common::attr(&body, "#connection-alpha-1-credential", "type").as_deref(),
        Some("password")
    );
    assert_eq!(
        texts(
            &body,
            &format!("{edit} #connection-alpha-1-credential + p.hint")
        ),
        ["Write-only. Leave empty to keep the stored credential."]
    );
    assert_eq!(
        field(&body, edit, "disable_cooling").as_deref(),
        Some("true")
    );
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
    assert_eq!(notice(&created), done("Provider gamma created."));
    assert_eq!(
        provider_row(&created, "gamma").unwrap(),
        ["gamma", "openai", &mock, "mock-small", "—"]
    );
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
    assert_eq!(notice(&created), done("Connection gamma-1 created."));
    assert_eq!(
        connection_row(&created, "gamma-1").unwrap(),
        [
            "gamma-1",
            "gamma",
            "apikey",
            "provider's",
            "provider's",
            "yes",
            "set"
        ]
    );
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
    assert_eq!(notice(&edited), done("Connection gamma-1 saved."));
    assert_eq!(
        connection_row(&edited, "gamma-1").unwrap(),
        [
            "gamma-1",
            "gamma",
            "apikey",
            "provider's",
            "provider's",
            "no",
            "set"
        ]
    );
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
                ("first_output_ms", "90000"),
                ("first_output_max_ms", ""),
                ("idle_ms", "0"),
            ],
        )
        .await;
    assert_eq!(notice(&edited), done("Provider gamma saved."));
    assert_eq!(
        provider_row(&edited, "gamma").unwrap(),
        ["gamma", "openai", &mock, "mock-small, mock-large", "5"]
    );
    assert_eq!(
        s.h.admin_json("/api/providers/gamma").await,
        json!({"id": "gamma", "format": "openai", "base_url": mock,
            "models": ["mock-small", "mock-large"], "max_concurrent": 5,
            "prices": {"mock-small": {"input_per_mtok": 1.5, "output_per_mtok": 6.0}},
            "max_output_tokens": {"mock-small": 1000},
            "stream_timeouts": {"first_output_ms": 90000, "idle_ms": 0}})
    );
    // The form shows them back, and one out of its setting's range is refused.
    let shown = page(&s).await;
    assert_eq!(
        common::attr(&shown, "#provider-gamma-first_output_ms", "value").as_deref(),
        Some("90000")
    );
    assert_eq!(
        common::attr(&shown, "#provider-gamma-first_output_max_ms", "value").as_deref(),
        Some("")
    );
    let refused = s
        .act(
            "/dashboard/providers/gamma/update",
            &[
                ("format", "openai"),
                ("base_url", &mock),
                ("first_output_max_ms", "5"),
            ],
        )
        .await;
    assert_eq!(
        notice(&refused),
        failed("provider `gamma` stream_timeouts.first_output_max_ms: must be a whole number of milliseconds from 1000 to 86400000")
    );
    assert_eq!(
        s.h.admin_json("/api/providers/gamma").await["stream_timeouts"],
        json!({"first_output_ms": 90000, "idle_ms": 0})
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
        let form = format!("details.confirm form[action='/dashboard/{base}/{id}/delete']");
        assert_eq!(
            common::form_fields(&edited, &form),
            [("csrf".to_owned(), s.csrf.clone())]
        );
        assert_eq!(
            texts(&edited, &format!("{form} button")),
            [format!("Delete {what} {id} for good")]
        );
        assert!(texts(&edited, "details.confirm summary").contains(&format!("Delete {id}…")));
    }
    let deleted = s.act("/dashboard/connections/gamma-1/delete", &[]).await;
    assert_eq!(notice(&deleted), done("Connection gamma-1 deleted."));
    assert_eq!(connection_row(&deleted, "gamma-1"), None);
    assert_eq!(
        s.h.admin_get("/api/connections/gamma-1").await.status(),
        404
    );
    let deleted = s.act("/dashboard/providers/gamma/delete", &[]).await;
    assert_eq!(notice(&deleted), done("Provider gamma deleted."));
    assert_eq!(provider_row(&deleted, "gamma"), None);
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
    assert_eq!(notice(&after), failed(&message));

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
    assert_eq!(notice(&after), failed(&message));

    let after = s.act("/dashboard/providers/alpha/delete", &[]).await;
    let (status, message) = api_error(&s, Method::DELETE, "/api/providers/alpha", json!({})).await;
    assert_eq!(status, 409);
    assert_eq!(notice(&after), failed(&message));

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

const SIGN_INS: &str = "Subscription sign-ins (tokens are never shown)";

#[tokio::test]
async fn a_sign_in_is_imported_refreshed_by_hand_and_its_failures_shown() {
    let s = Signed::start().await;
    let mock = s.h.mock.base_url();
    s.h.mock_oauth(json!({"account": "sub", "refresh_token": "sub-rt-0", "access_token": "sub-at-0", "expires_in": 600})).await;
    let file = json!({"claudeAiOauth": {"accessToken": "sub-at-0", "refreshToken": "sub-rt-0", "expiresAt": 4_102_444_800_000u64, "scopes": ["user:inference"]}}).to_string();
    let token_url = format!("{mock}/v1/oauth/token");
    let imported = s
        .act(
            "/dashboard/oauth/import",
            &[
                ("cli", "claude"),
                ("connection", "sub"),
                ("provider", "alpha"),
                ("file", &file),
                ("token_url", &token_url),
            ],
        )
        .await;
    assert_eq!(notice(&imported), done("Connection sub created."));
    let secrets = ["sub-at-0", "sub-rt-0", "sub-at-1", "sub-rt-1"];
    assert_none_of(&imported, &secrets);
    let cells = row_head(&imported, SIGN_INS, "sub", 6).unwrap();
    assert_eq!(cells[..2], ["sub".to_owned(), "claude".to_owned()]);
    assert!(
        cells[2].starts_with("2100-01-01 00:00:00 (in "),
        "{cells:?}"
    );
    assert_eq!(
        cells[3..],
        [
            "not yet (imported)".to_owned(),
            "ok".to_owned(),
            "—".to_owned()
        ]
    );
    assert_eq!(
        connection_row(&imported, "sub").unwrap()[..3],
        ["sub".to_owned(), "alpha".to_owned(), "oauth".to_owned()]
    );

    let refreshed = s.act("/dashboard/oauth/sub/refresh", &[]).await;
    assert_eq!(
        notice(&refreshed),
        done("Connection sub's token refreshed.")
    );
    assert_none_of(&refreshed, &secrets);
    let cells = row_head(&refreshed, SIGN_INS, "sub", 6).unwrap();
    assert!(cells[2].ends_with("(in 10 min)"), "{cells:?}");
    assert!(cells[3].ends_with("(0 s ago)"), "{cells:?}");

    s.h.mock_oauth(json!({"account": "sub", "refresh_token": "sub-rt-1", "access_token": "sub-at-1", "expires_in": 600, "fail": {"status": 400, "error": "invalid_grant"}})).await;
    let refused = s.act("/dashboard/oauth/sub/refresh", &[]).await;
    assert_eq!(
        notice(&refused),
        failed("the token endpoint refused to refresh connection `sub`'s token: HTTP 400: invalid_grant: refused by the mock")
    );
    let cells = row_head(&refused, SIGN_INS, "sub", 6).unwrap();
    assert_eq!(
        cells[4..],
        [
            "cooling 1 failed, next try in 30 s".to_owned(),
            "HTTP 400: invalid_grant: refused by the mock".to_owned()
        ]
    );
    let bad = s
        .act(
            "/dashboard/oauth/import",
            &[
                ("cli", "codex"),
                ("connection", "x"),
                ("provider", "alpha"),
                ("file", "{}"),
                ("token_url", ""),
            ],
        )
        .await;
    assert_eq!(
        notice(&bad),
        failed(
            "file: the file has no `tokens`: is it the Codex CLI's auth.json of a ChatGPT sign-in?"
        )
    );
}
