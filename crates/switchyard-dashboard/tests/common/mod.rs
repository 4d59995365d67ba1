//! Helpers the dashboard's end-to-end tests share: a gateway with the dashboard mounted
//! on a real socket, a client that does not follow redirects, sign-in and form posts.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions fail loudly on purpose"
)]
#![allow(
    dead_code,
    reason = "each test file uses its own subset of the helpers"
)]

use reqwest::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, SET_COOKIE, X_FRAME_OPTIONS,
};
use reqwest::{redirect, Client, Response};
use switchyard_test_support::{Harness, ADMIN, CRED_ALPHA, CRED_BETA, KEY, OPS_KEY};

pub async fn start() -> (Harness, Client) {
    let h = Harness::start_mounted(switchyard_dashboard::routes).await;
    let client = Client::builder()
        .redirect(redirect::Policy::none())
        .build()
        .unwrap();
    (h, client)
}

pub async fn sign_in(h: &Harness, c: &Client, token: &str) -> Response {
    c.post(h.url("/dashboard/sign-in"))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap()
}

/// The session cookie's `name=value` from a successful sign-in.
pub fn session_of(r: &Response) -> String {
    let cookie = r.headers()[SET_COOKIE].to_str().unwrap();
    cookie.split(';').next().unwrap().to_owned()
}

pub async fn get(h: &Harness, c: &Client, path: &str, cookie: Option<&str>) -> Response {
    let mut rq = c.get(h.url(path));
    if let Some(cookie) = cookie {
        rq = rq.header("cookie", cookie);
    }
    rq.send().await.unwrap()
}

pub fn assert_page_headers(r: &Response) {
    assert_eq!(r.headers()[CONTENT_TYPE], "text/html; charset=utf-8");
    assert_security_headers(r);
}

/// Asserts `r` carries the headers every dashboard answer carries (a page, a redirect,
/// an unknown path), `Cache-Control: no-store` included.
pub fn assert_security_headers(r: &Response) {
    assert_eq!(r.headers()[CACHE_CONTROL], "no-store", "{}", r.url());
    assert_eq!(r.headers()[X_FRAME_OPTIONS], "DENY");
    assert_eq!(
        r.headers()[CONTENT_SECURITY_POLICY],
        "default-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    );
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    assert_eq!(r.headers()["referrer-policy"], "no-referrer");
}

/// The value of the hidden `csrf` field in `page`.
pub fn csrf_in(page: &str) -> String {
    let marker = r#"name="csrf" value=""#;
    let at = page.find(marker).unwrap() + marker.len();
    page[at..at + 64].to_owned()
}

/// A signed-in session: the harness, the client, the cookie and the CSRF token.
pub struct Signed {
    pub h: Harness,
    pub c: Client,
    pub cookie: String,
    pub csrf: String,
}

impl Signed {
    /// Starts a gateway and signs in with the admin token.
    pub async fn start() -> Self {
        let (h, c) = start().await;
        Self::signed_in(h, c).await
    }

    /// Signs in to the running gateway `h` with the admin token.
    pub async fn on(h: Harness) -> Self {
        let c = Client::builder()
            .redirect(redirect::Policy::none())
            .build()
            .unwrap();
        Self::signed_in(h, c).await
    }

    async fn signed_in(h: Harness, c: Client) -> Self {
        let cookie = session_of(&sign_in(&h, &c, ADMIN).await);
        let page = get(&h, &c, "/dashboard", Some(&cookie))
            .await
            .text()
            .await
            .unwrap();
        let csrf = csrf_in(&page);
        Self { h, c, cookie, csrf }
    }

    /// `GET path` with the session: its status and its body.
    pub async fn page(&self, path: &str) -> (u16, String) {
        let r = get(&self.h, &self.c, path, Some(&self.cookie)).await;
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// `POST path` with the session, the CSRF token and `fields`; answers the response
    /// (a `303` for an action, whose notice the next page shows).
    pub async fn post(&self, path: &str, fields: &[(&str, &str)]) -> Response {
        let mut form: Vec<(&str, &str)> = vec![("csrf", &self.csrf)];
        form.extend_from_slice(fields);
        self.c
            .post(self.h.url(path))
            .header("cookie", &self.cookie)
            .form(&form)
            .send()
            .await
            .unwrap()
    }

    /// Posts `fields` to `path`, follows the `303` and answers the page it leads to.
    pub async fn act(&self, path: &str, fields: &[(&str, &str)]) -> String {
        let r = self.post(path, fields).await;
        assert_eq!(r.status(), 303, "POST {path}: {}", r.text().await.unwrap());
        let to = r.headers()[reqwest::header::LOCATION]
            .to_str()
            .unwrap()
            .to_owned();
        let (status, body) = self.page(&to).await;
        assert_eq!(status, 200, "GET {to}: {body}");
        body
    }
}

/// Asserts `page` shows none of the standard configuration's credentials.
pub fn assert_no_credential(page: &str) {
    assert_none_of(page, &[]);
}

/// Asserts `page` shows none of the standard configuration's credentials nor `extra`.
pub fn assert_none_of(page: &str, extra: &[&str]) {
    for secret in [CRED_ALPHA, CRED_BETA, ADMIN, KEY, OPS_KEY]
        .iter()
        .chain(extra)
    {
        assert!(!page.contains(secret), "a credential is on the page");
    }
}

/// `text` as a page shows it (escaped as `html::escape` escapes).
pub fn escaped(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// The one-time success notice saying `message`.
pub fn done(message: &str) -> String {
    format!(r#"<p class="notice done" role="status" id="notice">Done: {message}</p>"#)
}

/// The one-time error notice saying `message`.
pub fn failed(message: &str) -> String {
    format!(
        r#"<p class="notice error" role="alert" id="notice">Error: {}</p>"#,
        escaped(message)
    )
}

impl Signed {
    /// Asserts that `POST path` with `fields` but without the CSRF token is refused.
    pub async fn refused_without_csrf(&self, path: &str, fields: &[(&str, &str)]) {
        let r = self
            .c
            .post(self.h.url(path))
            .header("cookie", &self.cookie)
            .form(fields)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "POST {path} without its token");
    }
}
