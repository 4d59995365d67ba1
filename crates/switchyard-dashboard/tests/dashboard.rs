//! The dashboard end to end: a real gateway on a socket with the dashboard's routes
//! mounted, driven over HTTP without following redirects.

mod common;

use common::{
    assert_page_headers, assert_security_headers, get, session_of, sign_in, start, texts,
};
use reqwest::header::{CACHE_CONTROL, CONTENT_TYPE, LOCATION, RETRY_AFTER, SET_COOKIE};
use switchyard_test_support::{eventually, ADMIN, CRED_ALPHA, CRED_BETA, KEY, OPS_KEY};

/// The overview's table of the newest requests.
const LOG: &str = "The newest requests, newest first";

#[tokio::test]
async fn wrong_tokens_are_refused_without_a_cookie() {
    let (h, c) = start().await;
    let form = get(&h, &c, "/dashboard/sign-in", None).await;
    assert_eq!(form.status(), 200);
    assert_page_headers(&form);
    let form = form.text().await.unwrap();
    assert_eq!(
        common::attr(&form, "input#token[name=token]", "type").as_deref(),
        Some("password")
    );
    for (token, message) in [
        (
            "not-the-token",
            "Error: That is neither the admin token nor an admin-scoped key.",
        ),
        (
            KEY,
            "Error: This key is valid but does not have the admin scope.",
        ),
    ] {
        let r = sign_in(&h, &c, token).await;
        assert_eq!(r.status(), 401);
        assert!(r.headers().get(SET_COOKIE).is_none());
        assert_page_headers(&r);
        let body = r.text().await.unwrap();
        assert_eq!(texts(&body, "#sign-in-error"), [message]);
        assert!(!body.contains(token));
    }
}

#[tokio::test]
async fn the_admin_token_opens_a_session_cookie() {
    let (h, c) = start().await;
    for token in [ADMIN, OPS_KEY] {
        let r = sign_in(&h, &c, token).await;
        assert_eq!(r.status(), 303);
        assert_eq!(r.headers()[LOCATION], "/dashboard");
        let cookie = r.headers()[SET_COOKIE].to_str().unwrap();
        let (id, attributes) = cookie
            .strip_prefix("sy_session=")
            .unwrap()
            .split_once(';')
            .unwrap();
        assert_eq!(id.len(), 64);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(
            attributes,
            " HttpOnly; SameSite=Strict; Path=/dashboard; Max-Age=28800"
        );
    }
}

#[tokio::test]
async fn the_overview_needs_a_session_and_shows_no_credential() {
    let (h, c) = start().await;
    assert_eq!(
        h.chat(switchyard_test_support::chat_body("fast", false))
            .await
            .status(),
        200
    );
    for path in ["/dashboard", "/dashboard/anything/else"] {
        let r = get(&h, &c, path, None).await;
        assert_eq!(r.status(), 303);
        assert_eq!(r.headers()[LOCATION], "/dashboard/sign-in");
    }
    let forged = get(
        &h,
        &c,
        "/dashboard",
        Some(&format!("sy_session={}", "0".repeat(64))),
    )
    .await;
    assert_eq!(forged.status(), 303);
    for path in ["/dashboard/anything", "/dashboard"] {
        let post = c.post(h.url(path)).send().await.unwrap();
        assert_eq!(post.status(), 403, "POST {path}");
    }

    let cookie = session_of(&sign_in(&h, &c, ADMIN).await);
    let r = get(&h, &c, "/dashboard", Some(&cookie)).await;
    assert_eq!(r.status(), 200);
    assert_page_headers(&r);
    // The request log is written in batches: wait for the request's row.
    eventually("the request-log row on the overview", || async {
        let page = get(&h, &c, "/dashboard", Some(&cookie)).await;
        common::table_rows(&page.text().await.unwrap(), LOG)
            .iter()
            .any(|r| r.get(3).is_some_and(|m| m == "fast"))
    })
    .await;
    let page = get(&h, &c, "/dashboard", Some(&cookie))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(
        common::table_rows(&page, "Providers and their circuit breakers"),
        [
            ["alpha", "openai", "CLOSED", "0"],
            ["beta", "openai", "CLOSED", "0"]
        ]
    );
    for (id, provider) in [("alpha-1", "alpha"), ("beta-1", "beta")] {
        assert_eq!(
            common::row(&page, "Connections and their cooldowns", id).unwrap(),
            [id, provider, "apikey", "active", "—", "0", "—"]
        );
    }
    assert!(texts(&page, "ul.summary li").contains(&"Keys: 2 (0 revoked)".to_owned()));
    assert_eq!(texts(&page, "#status"), ["Status: ok"]);
    assert_eq!(texts(&page, "#quota-store"), ["Quota store: sqlite (ok)"]);
    let log = texts(&page, "#request-log");
    assert_eq!(log.len(), 1);
    assert!(
        log[0].starts_with("Request log: 1 of at most 1000000 rows, ")
            && log[0].contains(" on disk, kept 30 days, oldest "),
        "{log:?}"
    );
    assert_eq!(texts(&page, "#health-reasons li"), Vec::<String>::new());
    assert_eq!(
        common::attr(&page, "meta[name=viewport]", "content").as_deref(),
        Some("width=device-width, initial-scale=1")
    );
    for secret in [CRED_ALPHA, CRED_BETA, ADMIN, KEY, OPS_KEY] {
        assert!(!page.contains(secret));
    }
}

#[tokio::test]
async fn sign_out_checks_the_csrf_token_and_ends_the_session() {
    let common::Signed { h, c, cookie, csrf } = common::Signed::start().await;
    let sign_out = |form: Vec<(&'static str, String)>| {
        c.post(h.url("/dashboard/sign-out"))
            .header("cookie", &cookie)
            .form(&form)
            .send()
    };
    assert_eq!(sign_out(vec![]).await.unwrap().status(), 403);
    assert_eq!(
        sign_out(vec![("csrf", "0".repeat(64))])
            .await
            .unwrap()
            .status(),
        403
    );
    assert_eq!(get(&h, &c, "/dashboard", Some(&cookie)).await.status(), 200);

    let r = sign_out(vec![("csrf", csrf.clone())]).await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()[LOCATION], "/dashboard/sign-in");
    assert_eq!(
        r.headers()[SET_COOKIE],
        "sy_session=; HttpOnly; SameSite=Strict; Path=/dashboard; Max-Age=0"
    );
    let after = get(&h, &c, "/dashboard", Some(&cookie)).await;
    assert_eq!(after.status(), 303);
    assert_eq!(after.headers()[LOCATION], "/dashboard/sign-in");
    assert_eq!(sign_out(vec![("csrf", csrf)]).await.unwrap().status(), 403);
}

#[tokio::test]
async fn the_stylesheet_is_content_hashed_and_immutable() {
    let (h, c) = start().await;
    let page = get(&h, &c, "/dashboard/sign-in", None)
        .await
        .text()
        .await
        .unwrap();
    let href = common::attr(&page, "link[rel=stylesheet]", "href").unwrap();
    let href = href.as_str();
    let hash = href
        .strip_prefix("/dashboard/assets/app-")
        .and_then(|p| p.strip_suffix(".css"))
        .unwrap();
    assert_eq!(hash.len(), 12);
    let r = get(&h, &c, href, None).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()[CONTENT_TYPE], "text/css; charset=utf-8");
    assert_eq!(
        r.headers()[CACHE_CONTROL],
        "public, max-age=31536000, immutable"
    );
    assert!(r
        .text()
        .await
        .unwrap()
        .contains(".table-wrap { overflow-x: auto;"));
    let stale = get(&h, &c, "/dashboard/assets/app-000000000000.css", None).await;
    assert_eq!(stale.status(), 303);
}

#[tokio::test]
async fn a_session_ends_when_its_key_is_revoked() {
    let (h, c) = start().await;
    let ops = session_of(&sign_in(&h, &c, OPS_KEY).await);
    let admin = session_of(&sign_in(&h, &c, ADMIN).await);
    assert_eq!(get(&h, &c, "/dashboard", Some(&ops)).await.status(), 200);
    let revoked = h
        .admin_send(
            reqwest::Method::POST,
            "/api/keys/ops/revoke",
            serde_json::json!({}),
        )
        .await;
    assert_eq!(revoked.status(), 200);
    let after = get(&h, &c, "/dashboard", Some(&ops)).await;
    assert_eq!(after.status(), 303);
    assert_eq!(after.headers()[LOCATION], "/dashboard/sign-in");
    assert_eq!(get(&h, &c, "/dashboard", Some(&admin)).await.status(), 200);
    let again = sign_in(&h, &c, OPS_KEY).await;
    assert_eq!(again.status(), 401);
}

#[tokio::test]
async fn htmx_refreshes_keep_the_notice_and_signed_out_refreshes_are_redirected() {
    let s = common::Signed::start().await;
    // An action leaves a notice; a live region's refresh must not consume it.
    let r = s
        .post(
            "/dashboard/settings",
            &[("key", "no.such.setting"), ("value", "1")],
        )
        .await;
    assert_eq!(r.status(), 303);
    let refresh =
        s.c.get(s.h.url("/dashboard"))
            .header("cookie", &s.cookie)
            .header("hx-request", "true")
            .send()
            .await
            .unwrap();
    assert_eq!(refresh.status(), 200);
    assert_eq!(common::notice(&refresh.text().await.unwrap()), "");
    let (_, page) = s.page("/dashboard/settings").await;
    assert!(common::notice(&page).starts_with("Error: "), "{page}");
    let (_, page) = s.page("/dashboard/settings").await;
    assert_eq!(common::notice(&page), "");

    let signed_out =
        s.c.get(s.h.url("/dashboard"))
            .header("hx-request", "true")
            .send()
            .await
            .unwrap();
    assert_eq!(signed_out.status(), 200);
    assert_eq!(signed_out.headers()["hx-redirect"], "/dashboard/sign-in");
}

#[tokio::test]
async fn the_csrf_token_may_come_in_the_htmx_header() {
    let s = common::Signed::start().await;
    let by_header =
        s.c.post(s.h.url("/dashboard/sign-out"))
            .header("cookie", &s.cookie)
            .header("x-csrf-token", &s.csrf)
            .send()
            .await
            .unwrap();
    assert_eq!(by_header.status(), 303);
    assert_eq!(s.page("/dashboard").await.0, 303);
}

#[tokio::test]
async fn a_form_over_64_kib_is_refused() {
    let s = common::Signed::start().await;
    let big = "x".repeat(70 * 1024);
    let r = s
        .post("/dashboard/settings", &[("key", "a"), ("value", &big)])
        .await;
    assert_eq!(r.status(), 413);
    assert_eq!(
        texts(&r.text().await.unwrap(), "p.notice.error"),
        ["Error: the form is larger than 64 KiB."]
    );
}

#[tokio::test]
async fn action_paths_answer_other_methods_like_unknown_pages() {
    let (h, c) = start().await;
    let actions = [
        "/dashboard/resilience/reset",
        "/dashboard/resilience/clear",
        "/dashboard/keys/k1/revoke",
        "/dashboard/providers/create",
        "/dashboard/connections/alpha-1/delete",
        "/dashboard/combos/create",
        "/dashboard/settings/reset",
    ];
    for path in actions {
        let r = get(&h, &c, path, None).await;
        assert_eq!(r.status(), 303, "GET {path} signed out");
        assert_eq!(r.headers()[LOCATION], "/dashboard/sign-in");
    }
    let cookie = session_of(&sign_in(&h, &c, ADMIN).await);
    for path in actions {
        assert_eq!(
            get(&h, &c, path, Some(&cookie)).await.status(),
            404,
            "GET {path}"
        );
    }
}

#[tokio::test]
async fn the_trailing_slash_redirects_and_every_answer_carries_the_security_headers() {
    let (h, c) = start().await;
    let slash = get(&h, &c, "/dashboard/", None).await;
    assert_eq!(slash.status(), 308);
    assert_eq!(slash.headers()[LOCATION], "/dashboard");
    assert_security_headers(&slash);
    let posted = c.post(h.url("/dashboard/")).send().await.unwrap();
    assert_eq!(posted.status(), 308);
    assert_eq!(posted.headers()[LOCATION], "/dashboard");
    assert_security_headers(&posted);
    let unknown = [
        "/dashboard/no-such-page",
        "/dashboard/costs/quota-share/",
        "/dashboard/keys/",
        "/dashboard//",
    ];
    for path in unknown {
        let r = get(&h, &c, path, None).await;
        assert_eq!(r.status(), 303, "GET {path} signed out");
        assert_eq!(r.headers()[LOCATION], "/dashboard/sign-in");
        assert_security_headers(&r);
        let r = c.post(h.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 403, "POST {path} signed out");
        assert_page_headers(&r);
    }
    let cookie = session_of(&sign_in(&h, &c, ADMIN).await);
    let followed = get(&h, &c, "/dashboard/", Some(&cookie)).await;
    assert_eq!(followed.status(), 308);
    assert_eq!(get(&h, &c, "/dashboard", Some(&cookie)).await.status(), 200);
    for path in unknown {
        let r = get(&h, &c, path, Some(&cookie)).await;
        assert_eq!(r.status(), 404, "GET {path}");
        assert_page_headers(&r);
        let body = r.text().await.unwrap();
        assert_eq!(texts(&body, "h1"), ["Not found"], "{path}");
    }
}

#[tokio::test]
async fn sign_in_attempts_are_throttled_per_address_without_locking_the_admin_out() {
    let (h, c) = start().await;
    let mut statuses = Vec::new();
    let mut first_wait = None;
    for _ in 0..40 {
        let r = sign_in(&h, &c, "not-the-token").await;
        assert!(r.headers().get(SET_COOKIE).is_none());
        assert_page_headers(&r);
        statuses.push(r.status().as_u16());
        if r.status() == 429 {
            let wait = r.headers()[RETRY_AFTER].to_str().unwrap().to_owned();
            let body = r.text().await.unwrap();
            assert_eq!(
                texts(&body, "#sign-in-error"),
                [format!(
                    "Error: Too many sign-in attempts. Try again in {wait} s."
                )]
            );
            first_wait.get_or_insert(wait);
        }
    }
    let expected: Vec<u16> = [401; 5].into_iter().chain([429; 35]).collect();
    assert_eq!(statuses, expected);
    assert_eq!(first_wait.as_deref(), Some("2"));
    // Throttled, even the admin token waits (a throttled guess learns nothing)...
    assert_eq!(sign_in(&h, &c, ADMIN).await.status(), 429);
    // ...for one refill of the address's bucket, and no longer.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let r = sign_in(&h, &c, ADMIN).await;
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()[LOCATION], "/dashboard");
    // The one-time link is not throttled: an unknown one still gets its own answer.
    let once = get(&h, &c, "/dashboard/sign-in/once?t=unknown", None).await;
    assert_eq!(once.status(), 401);
}
