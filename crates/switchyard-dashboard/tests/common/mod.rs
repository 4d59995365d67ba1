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

/// The value of the sign-out form's `csrf` field in `page`.
pub fn csrf_in(page: &str) -> String {
    field(page, "form[action='/dashboard/sign-out']", "csrf").unwrap()
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

/// The one-time notice's text on `page` (`Done: …` or `Error: …`), or empty.
pub fn notice(page: &str) -> String {
    texts(page, "#notice").concat()
}

/// The one-time success notice's text saying `message`.
pub fn done(message: &str) -> String {
    format!("Done: {message}")
}

/// The one-time error notice's text saying `message`.
pub fn failed(message: &str) -> String {
    format!("Error: {message}")
}

/// The cells of the row whose first cell is `first` in the table captioned `caption`,
/// if there is one.
pub fn row(html: &str, caption: &str, first: &str) -> Option<Vec<String>> {
    table_rows(html, caption)
        .into_iter()
        .find(|r| r.first().is_some_and(|c| c == first))
}

/// The first `n` cells of [`row`].
pub fn row_head(html: &str, caption: &str, first: &str, n: usize) -> Option<Vec<String>> {
    row(html, caption, first).map(|mut r| {
        r.truncate(n);
        r
    })
}

/// The value of attribute `attr` of the first element matching `css` in `html`.
pub fn attr(html: &str, css: &str, attr: &str) -> Option<String> {
    scraper::Html::parse_document(html)
        .select(&selector(css))
        .next()
        .and_then(|e| e.value().attr(attr).map(str::to_owned))
}

/// How many elements match `css` in `html`.
pub fn count(html: &str, css: &str) -> usize {
    scraper::Html::parse_document(html)
        .select(&selector(css))
        .count()
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

/// The selector `css` (a test's own, valid by construction).
fn selector(css: &str) -> scraper::Selector {
    scraper::Selector::parse(css).unwrap()
}

/// An element's text with its whitespace runs collapsed to one space, trimmed.
fn text_of(e: scraper::ElementRef<'_>) -> String {
    e.text()
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The text of each body row's cells (`th` and `td`) of the first table matching
/// `table` in `html`; empty when no table matches.
pub fn cells(html: &str, table: &str) -> Vec<Vec<String>> {
    let doc = scraper::Html::parse_document(html);
    let (rows, cell) = (selector("tbody tr"), selector("th, td"));
    doc.select(&selector(table))
        .next()
        .map(|t| {
            t.select(&rows)
                .map(|r| r.select(&cell).map(text_of).collect())
                .collect()
        })
        .unwrap_or_default()
}

/// The body rows of the table whose caption is `caption` (see [`cells`]).
pub fn table_rows(html: &str, caption: &str) -> Vec<Vec<String>> {
    let doc = scraper::Html::parse_document(html);
    let (rows, cell) = (selector("tbody tr"), selector("th, td"));
    doc.select(&selector("table"))
        .find(|t| {
            t.select(&selector("caption"))
                .next()
                .is_some_and(|c| text_of(c) == caption)
        })
        .map(|t| {
            t.select(&rows)
                .map(|r| r.select(&cell).map(text_of).collect())
                .collect()
        })
        .unwrap_or_default()
}

/// The text of every element matching `css` in `html`.
pub fn texts(html: &str, css: &str) -> Vec<String> {
    scraper::Html::parse_document(html)
        .select(&selector(css))
        .map(text_of)
        .collect()
}

/// The value the first form matching `form` in `html` would post for its field `name`:
/// an input's value (a checkbox's or radio's only when checked), a select's selected
/// (or first) option's, a textarea's text. `None` when there is no such field.
pub fn field(html: &str, form: &str, name: &str) -> Option<String> {
    form_fields(html, form)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// Every field the first form matching `form` in `html` would post, in order (see
/// [`field`]).
pub fn form_fields(html: &str, form: &str) -> Vec<(String, String)> {
    let doc = scraper::Html::parse_document(html);
    doc.select(&selector(form))
        .next()
        .map(|f| fields_of(f))
        .unwrap_or_default()
}

/// Every post form in `html`: its action and its fields (see [`field`]).
pub fn post_forms(html: &str) -> Vec<(String, Vec<(String, String)>)> {
    let doc = scraper::Html::parse_document(html);
    doc.select(&selector("form[method=post]"))
        .map(|f| {
            (
                f.value().attr("action").unwrap_or_default().to_owned(),
                fields_of(f),
            )
        })
        .collect()
}

fn fields_of(form: scraper::ElementRef<'_>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in form.select(&selector("input[name], select[name], textarea[name]")) {
        let v = e.value();
        let name = v.attr("name").unwrap_or_default().to_owned();
        let value = match v.name() {
            "select" => {
                let options: Vec<_> = e.select(&selector("option")).collect();
                options
                    .iter()
                    .find(|o| o.value().attr("selected").is_some())
                    .or(options.first())
                    .map(|o| {
                        o.value()
                            .attr("value")
                            .map_or_else(|| text_of(*o), str::to_owned)
                    })
            }
            "textarea" => Some(e.text().collect()),
            _ => match v.attr("type") {
                Some("checkbox" | "radio") if v.attr("checked").is_none() => None,
                Some("submit") => None,
                _ => Some(v.attr("value").unwrap_or_default().to_owned()),
            },
        };
        if let Some(value) = value {
            out.push((name, value));
        }
    }
    out
}

/// A lease-capable key over `connection`, created through the API, and a lease it
/// acquired: the lease's owner hash.
pub async fn leased(h: &Harness, connection: &str) -> String {
    let created = h
        .admin_send(
            reqwest::Method::POST,
            "/api/keys",
            serde_json::json!({"name": "agent", "scopes": ["lease:exclusive"],
                               "allowed_connections": [connection]}),
        )
        .await;
    assert_eq!(created.status(), 201);
    let created: serde_json::Value = created.json().await.unwrap();
    let secret = created["secret"].as_str().unwrap().to_owned();
    let r = h
        .http
        .post(h.url("/api/v1/session-leases"))
        .bearer_auth(&secret)
        .json(&serde_json::json!({"action": "acquire"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    h.admin_json("/api/leases").await[0]["owner_hash"]
        .as_str()
        .unwrap()
        .to_owned()
}
