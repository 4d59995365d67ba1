//! One-time sign-in links end to end: a link minted by the handle the binary gets opens
//! a session exactly as signing in does, once.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions fail loudly on purpose"
)]

mod common;

use common::{assert_page_headers, get, session_of};
use reqwest::header::{LOCATION, SET_COOKIE};
use reqwest::{redirect, Client};
use std::cell::RefCell;
use std::sync::Arc;
use switchyard_dashboard::OneTimeLinks;
use switchyard_gateway::state::AppState;
use switchyard_test_support::{Harness, ADMIN, CRED_ALPHA, CRED_BETA, KEY, OPS_KEY};

thread_local! {
    /// The links of the gateway this test's thread started (`#[tokio::test]` runs the
    /// test, and so the harness's mount, on one thread).
    static LINKS: RefCell<Option<OneTimeLinks>> = const { RefCell::new(None) };
}

/// Mounts the dashboard and keeps its link handle for the test.
fn mount(state: Arc<AppState>) -> axum::Router {
    let d = switchyard_dashboard::dashboard(state);
    LINKS.with(|l| *l.borrow_mut() = Some(d.links));
    d.router
}

async fn start() -> (Harness, Client, OneTimeLinks) {
    let h = Harness::start_mounted(mount).await;
    let links = LINKS.with(|l| l.borrow_mut().take()).unwrap();
    let c = Client::builder()
        .redirect(redirect::Policy::none())
        .build()
        .unwrap();
    (h, c, links)
}

const USED: &str = "Error: This sign-in link has already been used, has expired or is unknown. Sign in with the admin token.";

#[tokio::test]
async fn a_link_opens_a_session_once() {
    let (h, c, links) = start().await;
    let link = links.mint().await.unwrap();
    let token = link.strip_prefix("/dashboard/sign-in/once?t=").unwrap();
    assert_eq!(token.len(), 64);
    assert!(token
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    assert_ne!(links.mint().await.unwrap(), link);

    let r = get(&h, &c, &link, None).await;
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()[LOCATION], "/dashboard");
    let set = r.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    let (id, attributes) = set
        .strip_prefix("sy_session=")
        .unwrap()
        .split_once(';')
        .unwrap();
    assert_eq!(id.len(), 64);
    assert_eq!(
        attributes,
        " HttpOnly; SameSite=Strict; Path=/dashboard; Max-Age=28800"
    );
    let cookie = session_of(&r);
    let page = get(&h, &c, "/dashboard", Some(&cookie)).await;
    assert_eq!(page.status(), 200);
    assert_page_headers(&page);
    let page = page.text().await.unwrap();
    assert_eq!(
        common::field(&page, "form[action='/dashboard/sign-out']", "csrf").map(|t| t.len()),
        Some(64)
    );

    // The second use is refused, without a cookie.
    let again = get(&h, &c, &link, None).await;
    assert_eq!(again.status(), 401);
    assert!(again.headers().get(SET_COOKIE).is_none());
    assert_page_headers(&again);
    let body = again.text().await.unwrap();
    assert_eq!(common::texts(&body, "p.notice.error#sign-in-error"), [USED]);
    assert_eq!(
        common::form_fields(
            &body,
            "form.sign-in[method=post][action='/dashboard/sign-in']"
        ),
        [("token".to_owned(), String::new())]
    );
    assert!(!body.contains(token));
    for secret in [CRED_ALPHA, CRED_BETA, ADMIN, KEY, OPS_KEY] {
        assert!(!page.contains(secret));
        assert!(!body.contains(secret));
    }
}

#[tokio::test]
async fn unknown_missing_and_forged_tokens_get_the_sign_in_page() {
    let (h, c, links) = start().await;
    let live = links.mint().await.unwrap();
    for path in [
        format!("/dashboard/sign-in/once?t={}", "0".repeat(64)),
        "/dashboard/sign-in/once".to_owned(),
        "/dashboard/sign-in/once?t=".to_owned(),
        format!("/dashboard/sign-in/once?t={ADMIN}"),
        format!("{live}x"),
    ] {
        let r = get(&h, &c, &path, None).await;
        assert_eq!(r.status(), 401, "{path}");
        assert!(r.headers().get(SET_COOKIE).is_none(), "{path}");
        assert!(r.text().await.unwrap().contains(USED), "{path}");
    }
    // Refused attempts leave the live link usable.
    assert_eq!(get(&h, &c, &live, None).await.status(), 303);
    // Only GET: another method is refused like any other signed-out request.
    let post = c
        .post(h.url(&links.mint().await.unwrap()))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 403);
}
