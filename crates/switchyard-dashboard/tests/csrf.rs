//! Every signed-in form of the dashboard, taken from the route table the router is built
//! from (`switchyard_dashboard::post_routes`), refuses a post without its session's
//! CSRF token or with another session's, and changes nothing.

mod common;

use common::{assert_page_headers, csrf_in, get, leased, post_forms, session_of, sign_in, Signed};
use reqwest::Method;
use serde_json::{json, Value};
use switchyard_test_support::OPS_KEY;

/// The pages whose forms the test posts (their fields, without the token).
const PAGES: [&str; 10] = [
    "/dashboard",
    "/dashboard/costs/quota-share",
    "/dashboard/costs/quota-share/team",
    "/dashboard/costs/quota-share/plans?connection=alpha-1",
    "/dashboard/resilience",
    "/dashboard/keys",
    "/dashboard/providers",
    "/dashboard/combos",
    "/dashboard/sessions",
    "/dashboard/settings",
];

/// What the management API says of everything a form could change.
async fn state(s: &Signed) -> Vec<Value> {
    let mut out = Vec::new();
    for path in [
        "/api/providers",
        "/api/connections",
        "/api/keys",
        "/api/combos",
        "/api/quota/pools",
        "/api/settings",
        "/api/resilience/cooldowns",
        "/api/resilience/model-cooldowns",
        "/api/sessions",
        "/api/leases",
        "/api/oauth",
    ] {
        out.push(s.h.admin_json(path).await);
    }
    out
}

/// `pattern` with its parameter filled with a live object of the kind the segment
/// before it names, so that an accepted post would act on something.
#[expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "a route this test cannot fill fails it, to be taught the new kind"
)]
fn fill(pattern: &str, (pin, owner): (&str, &str)) -> String {
    let Some((head, tail)) = pattern.split_once('{') else {
        return pattern.to_owned();
    };
    let (_, rest) = tail.split_once('}').unwrap();
    let kind = head.trim_end_matches('/').rsplit('/').next().unwrap();
    let id = match kind {
        "keys" => "k1",
        "providers" => "alpha",
        "connections" | "plans" => "alpha-1",
        "oauth" => "sub",
        "combos" => "fast",
        "quota-share" => "team",
        "sessions" => pin,
        "leases" => owner,
        other => panic!("{pattern}: no live object for a parameter after `{other}`"),
    };
    format!("{head}{id}{rest}")
}

/// Whether `path` is one of `pattern`'s (a `{param}` segment matches any segment).
fn matches(pattern: &str, path: &str) -> bool {
    let (p, a): (Vec<&str>, Vec<&str>) = (pattern.split('/').collect(), path.split('/').collect());
    p.len() == a.len()
        && p.iter()
            .zip(&a)
            .all(|(p, a)| p == a || (p.starts_with('{') && !a.is_empty()))
}

#[tokio::test]
async fn every_form_refuses_a_missing_or_foreign_csrf_token_and_changes_nothing() {
    let s = Signed::start().await;
    let created =
        s.h.admin_send(
            Method::POST,
            "/api/quota/pools",
            json!({"id": "team", "name": "Team", "connectionIds": ["alpha-1"],
                   "allocations": [{"apiKeyId": "k1", "allocationWeight": 50.0, "policy": "hard"}]}),
        )
        .await;
    assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());
    // A subscription sign-in, for its refresh form.
    let file = json!({"claudeAiOauth": {"accessToken": "sub-at-0", "refreshToken": "sub-rt-0", "expiresAt": 4_102_444_800_000u64}});
    let imported =
        s.h.admin_send(
            Method::POST,
            "/api/oauth/import",
            json!({"cli": "claude", "connection": "sub", "provider": "alpha", "file": file.to_string(),
                   "token_url": format!("{}/v1/oauth/token", s.h.mock.base_url())}),
        )
        .await;
    assert_eq!(imported.status(), 201);
    // A pinned client session, for the sessions page's release form.
    let r =
        s.h.http
            .post(s.h.url("/v1/chat/completions"))
            .bearer_auth(switchyard_test_support::KEY)
            .header("x-switchyard-session", "csrf-test")
            .json(&switchyard_test_support::chat_body(
                "alpha/mock-small",
                false,
            ))
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), 200);
    let pins = s.h.admin_json("/api/sessions").await;
    let pin = pins[0]["session"].as_str().unwrap().to_owned();
    // An active lease, for its release form.
    let owner = leased(&s.h, "alpha-1").await;
    // Another session (of the admin-scoped key) and its token.
    let foreign = session_of(&sign_in(&s.h, &s.c, OPS_KEY).await);
    let page = get(&s.h, &s.c, "/dashboard", Some(&foreign)).await;
    let foreign_csrf = csrf_in(&page.text().await.unwrap());
    assert_ne!(foreign_csrf, s.csrf);

    let mut forms = Vec::new();
    for page in PAGES {
        let (status, body) = s.page(page).await;
        assert_eq!(status, 200, "{page}");
        forms.extend(post_forms(&body));
    }
    let routes = switchyard_dashboard::post_routes();
    assert!(routes.contains(&"/dashboard/sign-out"), "{routes:?}");
    assert!(
        routes.contains(&"/dashboard/keys/{id}/revoke"),
        "{routes:?}"
    );
    assert_eq!(routes.len(), 32, "{routes:?}");
    // Every form on the pages posts to a route of the table.
    for (action, _) in &forms {
        assert!(
            routes.iter().any(|p| matches(p, action)),
            "a form posts to {action}, not in the table"
        );
    }

    let before = state(&s).await;
    let mut without_a_form = Vec::new();
    for pattern in &routes {
        let path = fill(pattern, (&pin, &owner));
        let fields: Vec<(String, String)> = match forms.iter().find(|(action, _)| *action == path) {
            Some((_, f)) => f.iter().filter(|(k, _)| k != "csrf").cloned().collect(),
            None => {
                without_a_form.push(path.clone());
                Vec::new()
            }
        };
        for token in [None, Some(foreign_csrf.as_str())] {
            let mut form = fields.clone();
            if let Some(t) = token {
                form.push(("csrf".into(), t.into()));
            }
            let r =
                s.c.post(s.h.url(&path))
                    .header("cookie", &s.cookie)
                    .form(&form)
                    .send()
                    .await
                    .unwrap();
            assert_eq!(r.status(), 403, "POST {path} with token {token:?}");
            assert_page_headers(&r);
            let body = r.text().await.unwrap();
            assert_eq!(common::texts(&body, "h1"), ["Forbidden"], "{path}");
        }
    }
    // Those forms show only when there is something to act on: posted without fields.
    assert_eq!(
        without_a_form,
        [
            "/dashboard/costs/quota-share/plans/alpha-1/delete",
            "/dashboard/resilience/re-enable",
            "/dashboard/settings/reset",
        ]
    );
    assert_eq!(state(&s).await, before);
    assert_eq!(
        s.page("/dashboard").await.0,
        200,
        "the session is still open"
    );
    let other = get(&s.h, &s.c, "/dashboard", Some(&foreign)).await;
    assert_eq!(other.status(), 200, "the other session is still open");
}
