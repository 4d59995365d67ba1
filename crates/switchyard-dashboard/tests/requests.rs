//! The request log page and the overview's charts end to end: requests sent through a
//! real gateway, then read back through the dashboard.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions fail loudly on purpose"
)]

mod common;

use common::{assert_no_credential, Signed};
use serde_json::json;
use switchyard_test_support::{chat_body, eventually, KEY, OPS_KEY};

/// The request ids in the results table of `page`, in its order.
fn ids_in(page: &str, all: &[String]) -> Vec<String> {
    let mut found: Vec<(usize, String)> = all
        .iter()
        .filter_map(|id| {
            page.find(&format!("<td>{id}</td>"))
                .map(|at| (at, id.clone()))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, id)| id).collect()
}

/// The `href` of the link with `id` in `page`, unescaped.
fn link(page: &str, id: &str) -> Option<String> {
    let end = page.find(&format!(r#"" id="{id}""#))?;
    let start = page[..end].rfind("href=\"")? + "href=\"".len();
    Some(page[start..end].replace("&amp;", "&"))
}

/// Sends four requests: k1 `fast` (alpha, 200), k1 `beta/mock-small` (beta, 200), ops
/// `alpha/mock-large` (alpha, 429 from the mock), ops `fast` (alpha, 200). Answers their
/// request ids, oldest first, once their log rows are written.
async fn four_requests(s: &Signed) -> Vec<String> {
    s.h.rule(json!({"match": {"model": "mock-large"}, "status": 429}))
        .await;
    let mut ids = Vec::new();
    for (key, model, status) in [
        (KEY, "fast", 200),
        (KEY, "beta/mock-small", 200),
        (OPS_KEY, "alpha/mock-large", 429),
        (OPS_KEY, "fast", 200),
    ] {
        let r = s.h.chat_as(key, chat_body(model, false)).await;
        assert_eq!(r.status(), status, "{model}");
        ids.push(r.headers()["x-request-id"].to_str().unwrap().to_owned());
    }
    let last = ids[3].clone();
    eventually("the log rows", || async {
        s.page("/dashboard/requests")
            .await
            .1
            .contains(&format!("<td>{last}</td>"))
    })
    .await;
    ids
}

#[tokio::test]
async fn each_filter_narrows_the_log_to_its_rows() {
    let s = Signed::start().await;
    let ids = four_requests(&s).await;
    let (status, all) = s.page("/dashboard/requests").await;
    assert_eq!(status, 200);
    assert_no_credential(&all);
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(ids_in(&all, &ids), newest_first);
    assert!(all.contains(r#"<option value="k1">k1 (tester)</option>"#));
    assert!(all.contains(r#"<option value="ops">ops (ops)</option>"#));
    assert!(all.contains(r#"<option value="beta">beta</option>"#));
    assert!(all.contains(r#"<label for="f-status">Status<input type="text" id="f-status" name="status" value="" aria-describedby="f-status-hint"></label>"#));
    assert!(all.contains(
        r##"<div id="requests-live" hx-get="/dashboard/requests" hx-trigger="every 30s""##
    ));
    // The failed request's row, cell by cell after its id.
    let failed = format!(
        "<td>{}</td><td>ops</td><td>openai</td><td>alpha/mock-large</td><td>alpha</td><td>alpha-1</td><td>mock-large</td><td class=\"status-error\">429</td>",
        ids[2]
    );
    assert!(all.contains(&failed), "{all}");
    let ok = format!(
        "<td>{}</td><td>k1</td><td>openai</td><td>beta/mock-small</td><td>beta</td><td>beta-1</td><td>mock-small</td><td>200</td><td>—</td><td>1</td>",
        ids[1]
    );
    assert!(all.contains(&ok), "{all}");
    for (query, expected) in [
        ("key=ops", vec![3, 2]),
        ("key=k1", vec![1, 0]),
        ("provider=beta", vec![1]),
        ("provider=alpha", vec![3, 2, 0]),
        ("model=mock-large", vec![2]),
        ("model=fast", vec![3, 0]),
        ("status=429", vec![2]),
        ("status=4xx", vec![2]),
        ("status=errors", vec![2]),
        ("status=200", vec![3, 1, 0]),
        ("key=ops&status=200", vec![3]),
        ("last=15m", vec![3, 2, 1, 0]),
        ("key=&provider=&model=&status=&last=", vec![3, 2, 1, 0]),
    ] {
        let (status, page) = s.page(&format!("/dashboard/requests?{query}")).await;
        assert_eq!(status, 200, "{query}");
        let want: Vec<String> = expected.iter().map(|i: &usize| ids[*i].clone()).collect();
        assert_eq!(ids_in(&page, &ids), want, "{query}");
    }
    let (_, selected) = s.page("/dashboard/requests?key=ops&last=1h").await;
    assert!(selected.contains(r#"<option value="ops" selected>ops (ops)</option>"#));
    assert!(selected.contains(r#"<option value="1h" selected>last 1 h</option>"#));

    let (status, none) = s.page("/dashboard/requests?model=no-such-model").await;
    assert_eq!(status, 200);
    assert!(none.contains("<td colspan=\"14\">No requests match these filters.</td>"));
    assert!(!none.contains("page-older"));
}

#[tokio::test]
async fn a_bad_filter_shows_the_search_message_and_no_rows() {
    let s = Signed::start().await;
    let ids = four_requests(&s).await;
    for (query, message) in [
        (
            "status=6xx",
            "Error: status: `6xx` is not a status (100-599), a class (1xx-5xx) or `errors`",
        ),
        (
            "last=2h",
            "Error: last: `2h` is not one of 15m, 1h, 24h or all",
        ),
        (
            "limit=500",
            "Error: limit: `500` is not a number of rows from 1 to 200",
        ),
        ("before=x", "Error: before: `x` is not a page cursor"),
    ] {
        let (status, page) = s.page(&format!("/dashboard/requests?{query}")).await;
        assert_eq!(status, 400, "{query}");
        assert!(
            page.contains(&format!(
                r#"<p class="notice error" role="alert" id="filter-error">{message}</p>"#
            )),
            "{query}: {page}"
        );
        assert!(!page.contains("<table"), "{query}");
        assert!(ids_in(&page, &ids).is_empty(), "{query}");
        assert!(page.contains(r#"<form method="get" action="/dashboard/requests""#));
    }
    let (_, kept) = s.page("/dashboard/requests?status=6xx").await;
    assert!(kept.contains(r#"name="status" value="6xx""#));
}

#[tokio::test]
async fn paging_walks_to_the_oldest_rows_and_back() {
    let s = Signed::start().await;
    let ids = four_requests(&s).await;
    let (_, first) = s.page("/dashboard/requests?limit=3").await;
    assert_eq!(
        ids_in(&first, &ids),
        vec![ids[3].clone(), ids[2].clone(), ids[1].clone()]
    );
    assert!(!first.contains("page-newest"));
    let older = link(&first, "page-older").unwrap();
    assert!(
        older.starts_with("/dashboard/requests?limit=3&before="),
        "{older}"
    );
    let (status, second) = s.page(&older).await;
    assert_eq!(status, 200);
    assert_eq!(ids_in(&second, &ids), vec![ids[0].clone()]);
    assert!(
        !second.contains("page-older"),
        "the last page links no older one"
    );
    assert!(
        !second.contains("hx-get=\"/dashboard/requests"),
        "older pages stay put"
    );
    assert_eq!(
        link(&second, "page-newest").unwrap(),
        "/dashboard/requests?limit=3"
    );

    let (_, filtered) = s.page("/dashboard/requests?key=k1&limit=1").await;
    assert_eq!(ids_in(&filtered, &ids), vec![ids[1].clone()]);
    let older = link(&filtered, "page-older").unwrap();
    assert!(
        older.starts_with("/dashboard/requests?key=k1&limit=1&before="),
        "{older}"
    );
    let (_, last) = s.page(&older).await;
    assert_eq!(ids_in(&last, &ids), vec![ids[0].clone()]);
    assert!(!last.contains("page-older"));
    assert!(last.contains(r#"<input type="hidden" name="limit" value="1">"#));
    assert_no_credential(&last);
}

#[tokio::test]
async fn the_overview_charts_the_last_hour() {
    let s = Signed::start().await;
    four_requests(&s).await;
    let (status, page) = s.page("/dashboard").await;
    assert_eq!(status, 200);
    assert_no_credential(&page);
    assert!(page.contains(r##"<div id="overview-live" hx-get="/dashboard" hx-trigger="every 30s" hx-select="#overview-live" hx-swap="outerHTML">"##));
    // The requests may straddle a minute: the totals over the hour are exact.
    for (title, totals) in [
        (
            "Requests and errors per minute",
            &["requests: total 4,", "errors: total 1,"][..],
        ),
        (
            "Requests per minute by provider",
            &["alpha: total 3,", "beta: total 1,"],
        ),
        (
            "Requests per minute by key",
            &["k1: total 2,", "ops: total 2,"],
        ),
        (
            "Errors per minute by provider",
            &["alpha: total 1,", "beta: total 0,"],
        ),
        (
            "Errors per minute by key",
            &["k1: total 0,", "ops: total 1,"],
        ),
    ] {
        let head =
            format!("<title>{title}</title><desc>requests per minute, from 60 min ago to now.");
        let at = page
            .find(&head)
            .unwrap_or_else(|| panic!("{title}: {page}"));
        let desc = &page[at..at + page[at..].find("</desc>").unwrap()];
        for total in totals {
            assert!(desc.contains(total), "{title}: {total} in {desc}");
        }
        assert_eq!(desc.matches(": total ").count(), totals.len(), "{desc}");
    }
    // Sixty points per line, the minutes before these requests at zero.
    let points = page
        .split(r#"<polyline class="l0" fill="none" points=""#)
        .nth(1)
        .unwrap();
    let points = &points[..points.find('"').unwrap()];
    assert_eq!(points.split(' ').count(), 60);
    assert!(points.starts_with("48.0,168.0 "), "{points}");
    assert!(page.contains("<li>In flight: 0 (0 waiting for a slot)</li>"));
    assert!(page.contains("<li>Open breakers: 0</li>"));
}

#[tokio::test]
async fn the_overview_counts_requests_in_flight() {
    let s = Signed::start().await;
    s.h.rule(json!({"latency_ms": 3000})).await;
    let slow = s.h.spawn_chat(KEY, chat_body("fast", false));
    eventually("a request in flight", || async {
        s.page("/dashboard")
            .await
            .1
            .contains("<li>In flight: 1 (0 waiting for a slot)</li>")
    })
    .await;
    assert_eq!(slow.await.unwrap().status(), 200);
    eventually("no request in flight", || async {
        s.page("/dashboard")
            .await
            .1
            .contains("<li>In flight: 0 (0 waiting for a slot)</li>")
    })
    .await;
}

#[tokio::test]
async fn the_overview_keeps_the_last_hour_across_a_restart() {
    let mut s = Signed::start().await;
    four_requests(&s).await;
    s.h.restart().await;
    // The restarted gateway has new dashboard sessions: sign in again.
    let again = Signed::on(s.h).await;
    let (status, page) = again.page("/dashboard").await;
    assert_eq!(status, 200);
    let head = "<title>Requests per minute by key</title><desc>requests per minute, from 60 min ago to now.";
    let at = page.find(head).unwrap();
    let desc = &page[at..at + page[at..].find("</desc>").unwrap()];
    assert!(desc.contains("k1: total 2,"), "{desc}");
    assert!(desc.contains("ops: total 2,"), "{desc}");
}
