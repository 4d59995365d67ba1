//! The request log page and the overview's charts end to end: requests sent through a
//! real gateway, then read back through the dashboard.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions fail loudly on purpose"
)]

mod common;

use common::{assert_no_credential, attr, count, field, table_rows, texts, Signed};
use serde_json::json;
use switchyard_test_support::{chat_body, eventually, KEY, OPS_KEY};

const RESULTS: &str = "Matching requests, newest first";

/// The request ids in the results table of `page` (of those in `all`), in its order.
fn ids_in(page: &str, all: &[String]) -> Vec<String> {
    table_rows(page, RESULTS)
        .into_iter()
        .filter_map(|r| r.get(1).filter(|id| all.contains(id)).cloned())
        .collect()
}

/// The `href` of the link with `id` in `page`.
fn link(page: &str, id: &str) -> Option<String> {
    attr(page, &format!("a#{id}"), "href")
}

/// The chart titled `title`'s description.
fn desc_of(page: &str, title: &str) -> String {
    let titles = texts(page, "svg.chart > title");
    let at = titles.iter().position(|t| t == title).unwrap();
    texts(page, "svg.chart > desc").swap_remove(at)
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
    logged(s, &ids[3]).await;
    ids
}

/// Waits until request `id`'s row is on the request log page.
async fn logged(s: &Signed, id: &str) {
    let id = id.to_owned();
    eventually("the log row", || async {
        ids_in(
            &s.page("/dashboard/requests").await.1,
            std::slice::from_ref(&id),
        ) == [id.clone()]
    })
    .await;
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
    assert_eq!(
        texts(&all, "#f-key option"),
        ["any", "k1 (tester)", "ops (ops)"]
    );
    assert_eq!(
        ["k1", "ops"].map(|k| attr(&all, &format!("#f-key option[value={k}]"), "value")),
        [Some("k1".to_owned()), Some("ops".to_owned())]
    );
    assert_eq!(texts(&all, "#f-provider option"), ["any", "alpha", "beta"]);
    assert_eq!(
        field(&all, "form[aria-label=Filters]", "status").as_deref(),
        Some("")
    );
    assert_eq!(
        attr(
            &all,
            "label[for=f-status] > input#f-status",
            "aria-describedby"
        )
        .as_deref(),
        Some("f-status-hint")
    );
    assert_eq!(
        ["hx-get", "hx-trigger"].map(|a| attr(&all, "#requests-live", a)),
        [
            Some("/dashboard/requests".to_owned()),
            Some("every 30s".to_owned())
        ]
    );
    // The failed request's row, cell by cell after its time.
    let cells = |id: &str| {
        table_rows(&all, RESULTS)
            .into_iter()
            .find(|r| r[1] == id)
            .unwrap()
    };
    assert_eq!(
        cells(&ids[2])[1..9],
        [
            ids[2].as_str(),
            "ops",
            "openai",
            "alpha/mock-large",
            "alpha",
            "alpha-1",
            "mock-large",
            "429"
        ]
    );
    assert_eq!(count(&all, "td.status-error"), 1);
    assert_eq!(texts(&all, "td.status-error"), ["429"]);
    assert_eq!(
        cells(&ids[1])[1..11],
        [
            ids[1].as_str(),
            "k1",
            "openai",
            "beta/mock-small",
            "beta",
            "beta-1",
            "mock-small",
            "200",
            "—",
            "1"
        ]
    );
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
    assert_eq!(
        ["key", "last"].map(|n| field(&selected, "form[aria-label=Filters]", n)),
        [Some("ops".to_owned()), Some("1h".to_owned())]
    );
    assert_eq!(texts(&selected, "#f-last option[selected]"), ["last 1 h"]);

    let (status, none) = s.page("/dashboard/requests?model=no-such-model").await;
    assert_eq!(status, 200);
    assert_eq!(
        table_rows(&none, RESULTS),
        [["No requests match these filters."]]
    );
    assert_eq!(attr(&none, "td[colspan]", "colspan").as_deref(), Some("15"));
    assert_eq!(link(&none, "page-older"), None);
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
        assert_eq!(
            texts(&page, "p.notice.error[role=alert]#filter-error"),
            [message],
            "{query}"
        );
        assert_eq!(count(&page, "table"), 0, "{query}");
        assert!(ids_in(&page, &ids).is_empty(), "{query}");
        assert_eq!(
            count(&page, "form[method=get][action='/dashboard/requests']"),
            1
        );
    }
    let (_, kept) = s.page("/dashboard/requests?status=6xx").await;
    assert_eq!(
        field(&kept, "form[aria-label=Filters]", "status").as_deref(),
        Some("6xx")
    );
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
    assert_eq!(link(&first, "page-newest"), None);
    let older = link(&first, "page-older").unwrap();
    assert!(
        older.starts_with("/dashboard/requests?limit=3&before="),
        "{older}"
    );
    let (status, second) = s.page(&older).await;
    assert_eq!(status, 200);
    assert_eq!(ids_in(&second, &ids), vec![ids[0].clone()]);
    assert_eq!(
        link(&second, "page-older"),
        None,
        "the last page links no older one"
    );
    assert_eq!(count(&second, "[hx-get]"), 0, "older pages stay put");
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
    assert_eq!(link(&last, "page-older"), None);
    assert_eq!(
        attr(
            &last,
            "form[aria-label=Filters] input[type=hidden][name=limit]",
            "value"
        )
        .as_deref(),
        Some("1")
    );
    assert_no_credential(&last);
}

#[tokio::test]
async fn the_overview_charts_the_last_hour() {
    let s = Signed::start().await;
    four_requests(&s).await;
    let (status, page) = s.page("/dashboard").await;
    assert_eq!(status, 200);
    assert_no_credential(&page);
    assert_eq!(
        ["hx-get", "hx-trigger", "hx-select", "hx-swap"].map(|a| attr(&page, "#overview-live", a)),
        [
            Some("/dashboard".to_owned()),
            Some("every 30s".to_owned()),
            Some("#overview-live".to_owned()),
            Some("outerHTML".to_owned())
        ]
    );
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
        let desc = desc_of(&page, title);
        assert!(
            desc.starts_with("requests per minute, from 60 min ago to now."),
            "{desc}"
        );
        for total in totals {
            assert!(desc.contains(total), "{title}: {total} in {desc}");
        }
        assert_eq!(desc.matches(": total ").count(), totals.len(), "{desc}");
    }
    // Sixty points per line, the minutes before these requests at zero.
    let points = attr(&page, "polyline.l0", "points").unwrap();
    assert_eq!(points.split(' ').count(), 60);
    assert!(points.starts_with("48.0,168.0 "), "{points}");
    let summary = texts(&page, "ul.summary li");
    assert!(
        summary.contains(&"In flight: 0 (0 waiting for a slot)".to_owned()),
        "{summary:?}"
    );
    assert!(summary.contains(&"Open breakers: 0".to_owned()));
}

#[tokio::test]
async fn the_overview_counts_requests_in_flight() {
    let s = Signed::start().await;
    s.h.rule(json!({"latency_ms": 3000})).await;
    let slow = s.h.spawn_chat(KEY, chat_body("fast", false));
    eventually("a request in flight", || async {
        texts(&s.page("/dashboard").await.1, "ul.summary li")
            .contains(&"In flight: 1 (0 waiting for a slot)".to_owned())
    })
    .await;
    assert_eq!(slow.await.unwrap().status(), 200);
    eventually("no request in flight", || async {
        texts(&s.page("/dashboard").await.1, "ul.summary li")
            .contains(&"In flight: 0 (0 waiting for a slot)".to_owned())
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
    let desc = desc_of(&page, "Requests per minute by key");
    assert!(desc.contains("k1: total 2,"), "{desc}");
    assert!(desc.contains("ops: total 2,"), "{desc}");
}

#[tokio::test]
async fn a_failed_over_request_shows_why_its_first_attempt_ended_and_its_route() {
    let s = Signed::start().await;
    // `fast` tries alpha first: its 500 fails the request over to beta.
    s.h.rule(json!({"times": 1, "status": 500})).await;
    let r = s.h.chat(chat_body("fast", false)).await;
    assert_eq!(r.status(), 200);
    let id = r.headers()["x-request-id"].to_str().unwrap().to_owned();
    logged(&s, &id).await;
    let (_, page) = s.page("/dashboard/requests").await;
    assert_eq!(
        texts(&page, "small.failed-attempt"),
        ["alpha-1: server_error (HTTP 500), via 127.0.0.1"]
    );
    let row = table_rows(&page, RESULTS)
        .into_iter()
        .find(|r| r.get(1) == Some(&id))
        .unwrap();
    assert_eq!(
        (row[5].as_str(), row[6].as_str(), row[10].as_str()),
        (
            "beta",
            "beta-1",
            "2alpha-1: server_error (HTTP 500), via 127.0.0.1"
        )
    );
    // The route it was tried in (SPEC R19's trace): priority over both, alpha first.
    assert_eq!(
        row[11],
        "priorityno facts readalpha/mock-small @ alpha-1beta/mock-small @ beta-1"
    );
}
