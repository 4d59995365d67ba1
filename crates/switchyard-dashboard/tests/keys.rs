//! The keys page end to end: the fixtures' keys, creating a key whose secret is shown
//! once and works through the gateway, revoking it, and bad input.

mod common;

use common::{
    assert_no_credential, attr, done, failed, form_fields, notice, row, row_head, texts, Signed,
};
use serde_json::{json, Value};
use switchyard_test_support::chat_body;

const PAGE: &str = "/dashboard/keys";

async fn page(s: &Signed, path: &str) -> String {
    let (status, body) = s.page(path).await;
    assert_eq!(status, 200, "{body}");
    assert_no_credential(&body);
    body
}

const TABLE: &str = "Client API keys";

#[tokio::test]
async fn the_fixtures_keys_are_listed_without_secrets() {
    let s = Signed::start().await;
    let body = page(&s, PAGE).await;
    let k1 = row(&body, TABLE, "k1").unwrap();
    assert_eq!(k1[..5], ["k1", "tester", "", "all", "all"]);
    assert_eq!(k1[6..], ["active", "Revoke k1…Revoke key k1 for good"]);
    // Revoking takes two steps: the summary unfolds the button that revokes.
    let revoke = "td details.confirm form[action='/dashboard/keys/k1/revoke']";
    assert_eq!(
        form_fields(&body, revoke),
        [("csrf".to_owned(), s.csrf.clone())]
    );
    assert_eq!(
        texts(&body, &format!("{revoke} button")),
        ["Revoke key k1 for good"]
    );
    assert_eq!(
        row_head(&body, TABLE, "ops", 5).unwrap(),
        ["ops", "ops", "admin", "all", "all"]
    );
    for (id, value) in [("scope-admin", "admin"), ("connection-alpha-1", "alpha-1")] {
        assert_eq!(
            attr(&body, &format!("input#{id}"), "type").as_deref(),
            Some("checkbox")
        );
        assert_eq!(
            attr(&body, &format!("input#{id}"), "value").as_deref(),
            Some(value)
        );
        assert_eq!(texts(&body, &format!("label[for={id}]")), [value]);
    }
    assert_eq!(common::count(&body, "#new-secret"), 0);
}

#[tokio::test]
async fn a_new_keys_secret_is_shown_once_works_and_stops_working_when_revoked() {
    let s = Signed::start().await;
    let r = s
        .post(
            PAGE,
            &[
                ("name", "ci runner"),
                ("models", " mock-small , alpha/mock-small "),
                ("connection", "alpha-1"),
            ],
        )
        .await;
    assert_eq!(r.status(), 200);
    let created = r.text().await.unwrap();
    assert_no_credential(&created);
    let secret = texts(&created, "p.secret#new-secret").concat();
    assert!(secret.starts_with("sy-"), "{secret}");
    assert_eq!(
        texts(&created, "p.hint[role=alert]"),
        ["Copy this secret now: it will not be shown again."]
    );
    assert_eq!(created.matches(secret.as_str()).count(), 1);
    let keys = s.h.admin_json("/api/keys").await;
    let key = keys
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "ci runner")
        .unwrap()
        .clone();
    let id = key["id"].as_str().unwrap().to_owned();
    assert_eq!(
        key["allowed_models"],
        json!(["mock-small", "alpha/mock-small"])
    );
    assert_eq!(key["allowed_connections"], json!(["alpha-1"]));
    assert_eq!(key["scopes"], json!([]));
    assert_eq!(
        row_head(&created, TABLE, &id, 5).unwrap(),
        [
            id.as_str(),
            "ci runner",
            "",
            "mock-small, alpha/mock-small",
            "alpha-1"
        ]
    );

    // Never again: not on the keys page, not on the overview, not in the API.
    for path in [PAGE, "/dashboard", "/dashboard/resilience"] {
        let later = page(&s, path).await;
        assert!(!later.contains(&secret), "the secret on {path}");
    }
    assert!(!s
        .h
        .admin_get("/api/keys")
        .await
        .text()
        .await
        .unwrap()
        .contains(&secret));

    // It works through the gateway.
    assert_eq!(
        s.h.chat_as(&secret, chat_body("alpha/mock-small", false))
            .await
            .status(),
        200
    );

    let forged =
        s.c.post(s.h.url(&format!("/dashboard/keys/{id}/revoke")))
            .header("cookie", &s.cookie)
            .send()
            .await
            .unwrap();
    assert_eq!(forged.status(), 403);
    assert_eq!(
        s.h.chat_as(&secret, chat_body("alpha/mock-small", false))
            .await
            .status(),
        200
    );

    let revoked = s.act(&format!("/dashboard/keys/{id}/revoke"), &[]).await;
    assert_no_credential(&revoked);
    assert_eq!(notice(&revoked), done(&format!("Key {id} revoked.")));
    assert!(!revoked.contains(&secret));
    let cells = row(&revoked, TABLE, &id).unwrap();
    assert!(cells[6].starts_with("revoked 20"), "{cells:?}");
    assert_eq!(cells[7], "", "no revoke button");
    assert!(s.h.admin_json(&format!("/api/keys/{id}")).await["revoked_at"].is_u64());
    assert_eq!(
        s.h.chat_as(&secret, chat_body("alpha/mock-small", false))
            .await
            .status(),
        401
    );
}

#[tokio::test]
async fn bad_input_shows_the_apis_message_and_creates_nothing() {
    let s = Signed::start().await;
    let before = s.h.admin_json("/api/keys").await;
    for (fields, body) in [
        (vec![("name", "")], json!({"name": ""})),
        (
            vec![("name", "x"), ("scope", "root")],
            json!({"name": "x", "scopes": ["root"]}),
        ),
        (
            vec![("name", "x"), ("connection", "nope")],
            json!({"name": "x", "allowed_connections": ["nope"]}),
        ),
    ] {
        let r =
            s.h.admin_send(reqwest::Method::POST, "/api/keys", body)
                .await;
        assert_eq!(r.status(), 400);
        let e: Value = r.json().await.unwrap();
        let message = e["error"]["message"].as_str().unwrap().to_owned();
        let after = s.act(PAGE, &fields).await;
        assert_eq!(notice(&after), failed(&message));
        assert_eq!(common::count(&after, "#new-secret"), 0);
    }
    let forged =
        s.c.post(s.h.url(PAGE))
            .header("cookie", &s.cookie)
            .form(&[("name", "sneaky")])
            .send()
            .await
            .unwrap();
    assert_eq!(forged.status(), 403);
    assert_eq!(s.h.admin_json("/api/keys").await, before);
}
