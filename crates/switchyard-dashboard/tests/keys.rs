//! The keys page end to end: the fixtures' keys, creating a key whose secret is shown
//! once and works through the gateway, revoking it, and bad input.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions fail loudly on purpose"
)]

mod common;

use common::{assert_no_credential, Signed};
use serde_json::{json, Value};
use switchyard_test_support::chat_body;

const PAGE: &str = "/dashboard/keys";

async fn page(s: &Signed, path: &str) -> String {
    let (status, body) = s.page(path).await;
    assert_eq!(status, 200, "{body}");
    assert_no_credential(&body);
    body
}

/// The text between `start` and the next `end` in `body`.
fn between<'a>(body: &'a str, start: &str, end: &str) -> &'a str {
    let at = body.find(start).unwrap() + start.len();
    &body[at..at + body[at..].find(end).unwrap()]
}

#[tokio::test]
async fn the_fixtures_keys_are_listed_without_secrets() {
    let s = Signed::start().await;
    let body = page(&s, PAGE).await;
    assert!(
        body.contains("<tr><td>k1</td><td>tester</td><td></td><td>all</td><td>all</td><td>"),
        "{body}"
    );
    // Revoking takes two steps: the summary unfolds the button that revokes.
    assert!(body.contains(&format!(
        r#"<td><span class="state state-active">active</span></td><td><details class="confirm"><summary>Revoke k1…</summary><form method="post" action="/dashboard/keys/k1/revoke"><input type="hidden" name="csrf" value="{}"><button type="submit">Revoke key k1 for good</button></form></details></td>"#,
        s.csrf
    )));
    assert!(body.contains("<tr><td>ops</td><td>ops</td><td>admin</td><td>all</td><td>all</td>"));
    assert!(body.contains(
        r#"<input type="checkbox" name="scope" value="admin" id="scope-admin"> <label for="scope-admin">admin</label>"#
    ));
    assert!(body.contains(
        r#"<input type="checkbox" name="connection" value="alpha-1" id="connection-alpha-1"> <label for="connection-alpha-1">alpha-1</label>"#
    ));
    assert!(!body.contains("new-secret"));
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
    let secret = between(&created, r#"<p class="secret" id="new-secret">"#, "</p>").to_owned();
    assert!(secret.starts_with("sy-"), "{secret}");
    assert!(created.contains(
        r#"<p class="hint" role="alert">Copy this secret now: it will not be shown again.</p>"#
    ));
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
    assert!(created.contains(&format!(
        "<tr><td>{id}</td><td>ci runner</td><td></td><td>mock-small, alpha/mock-small</td><td>alpha-1</td>"
    )));

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
    assert!(revoked.contains(&format!(
        r#"<p class="notice done" role="status" id="notice">Done: Key {id} revoked.</p>"#
    )));
    assert!(!revoked.contains(&secret));
    let row = between(&revoked, &format!("<tr><td>{id}</td>"), "</tr>");
    assert!(
        row.contains(r#"<span class="state state-revoked">revoked</span> "#),
        "{row}"
    );
    assert!(!row.contains("Revoke"));
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
        assert!(
            after.contains(&format!(
                r#"<p class="notice error" role="alert" id="notice">Error: {message}</p>"#
            )),
            "{message}: {after}"
        );
        assert!(!after.contains("new-secret"));
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
