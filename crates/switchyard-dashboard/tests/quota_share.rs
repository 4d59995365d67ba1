//! Quota share and plans (SPEC D1, D2) end to end: pools created, read, edited and
//! deleted through the dashboard's forms and checked against the management API, usage
//! moved by real chat requests, and plan overrides.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions fail loudly on purpose"
)]

mod common;

use common::{
    assert_no_credential, attr, count, done, failed, field, form_fields, notice, row, row_head,
    table_rows, texts, Signed,
};
use reqwest::Method;
use serde_json::{json, Value};
use switchyard_test_support::{chat_body, eventually};

const LIST: &str = "/dashboard/costs/quota-share";
const PLANS: &str = "/dashboard/costs/quota-share/plans";
const DECISIONS: &str = "Recent decisions, newest first";
const ALLOCATIONS: &str = "Allocations on requests:hourly";
const EDIT: &str = "form[action='/dashboard/costs/quota-share/team/allocations']";

/// The `hx-get`, `hx-trigger`, `hx-select` and `hx-swap` of the live region `id`.
fn live_region(page: &str, id: &str) -> [Option<String>; 4] {
    ["hx-get", "hx-trigger", "hx-select", "hx-swap"].map(|a| attr(page, &format!("#{id}"), a))
}

/// The texts of the legend items of the page's bar charts.
fn bar_legend(page: &str) -> Vec<String> {
    texts(page, "figure.bar-chart li")
}

/// The action form `action` behind a `<details class="confirm">` whose summary is
/// `summary`: its fields and its button's label.
fn confirm(page: &str, action: &str) -> (Vec<(String, String)>, Vec<String>, Vec<String>) {
    let form = format!("details.confirm form[action='{action}']");
    (
        form_fields(page, &form),
        texts(page, &format!("{form} button")),
        texts(page, "details.confirm summary"),
    )
}

/// The message of an API error answer, which must be a `400`.
async fn api_error(r: reqwest::Response) -> String {
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    body["error"]["message"].as_str().unwrap().to_owned()
}

/// The create form's fields for pool `team` on `alpha-1`: 4 requests an hour, k1 and
/// ops with half each (a blank allocation row between them is left out).
const TEAM: [(&str, &str); 15] = [
    ("id", "team"),
    ("name", "Team <A>"),
    ("connection", "alpha-1"),
    ("dim[0].unit", "requests"),
    ("dim[0].window", "hourly"),
    ("dim[0].limit", "4"),
    ("alloc[0].key", "k1"),
    ("alloc[0].weight", "50"),
    ("alloc[0].policy", "hard"),
    ("alloc[1].key", ""),
    ("alloc[1].weight", ""),
    ("alloc[1].policy", "hard"),
    ("alloc[2].key", "ops"),
    ("alloc[2].weight", "50"),
    ("alloc[2].policy", "soft"),
];

/// Pool `team` (see [`TEAM`]), created through the form.
async fn create_team(s: &Signed) -> String {
    s.act(LIST, &TEAM).await
}

/// Posts the create form with `fields`: the status and the page it answers with
/// (a refused pool or a row button shows the form again, without a redirect).
async fn post_create(s: &Signed, fields: &[(&str, &str)]) -> (u16, String) {
    let r = s.post(LIST, fields).await;
    (r.status().as_u16(), r.text().await.unwrap())
}

/// A refused create form: its fields, the same pool as the API takes it, and the
/// selector of the place its error shows.
type Case<'a> = (&'a [(&'a str, &'a str)], Value, &'a str);

/// The text of the error shown beside row `id` (`dim-1`, `alloc-0`).
fn row_error(page: &str, id: &str) -> Vec<String> {
    texts(page, &format!("p.field-error#{id}-error"))
}

#[tokio::test]
async fn a_pool_created_through_the_form_is_listed_and_in_the_api() {
    let s = Signed::start().await;
    let (status, empty) = s.page(LIST).await;
    assert_eq!(status, 200);
    assert_eq!(
        texts(&empty, "details.card.concept[open] > summary"),
        ["What is a quota pool?"]
    );
    assert_eq!(
        live_region(&empty, "pools"),
        [
            Some(LIST.to_owned()),
            Some("every 30s".to_owned()),
            Some("#pools".to_owned()),
            Some("outerHTML".to_owned())
        ]
    );
    assert_eq!(texts(&empty, "#pools p"), ["No pools yet."]);
    for (i, conn) in ["alpha-1 (alpha)", "beta-1 (beta)"].into_iter().enumerate() {
        let id = conn.split(' ').next().unwrap();
        assert_eq!(
            attr(&empty, &format!("#pool-conn-{i}"), "value").as_deref(),
            Some(id)
        );
        assert_eq!(
            attr(&empty, &format!("#pool-conn-{i}"), "name").as_deref(),
            Some("connection")
        );
        assert_eq!(texts(&empty, &format!("label[for=pool-conn-{i}]")), [conn]);
    }
    assert_eq!(
        texts(&empty, r#"select[name="alloc[0].key"] option"#),
        ["no key", "k1", "ops"]
    );
    assert_eq!(
        texts(&empty, r#"select[name="dim[0].unit"] option"#),
        ["requests", "tokens", "percent", "usd"]
    );
    assert_eq!(count(&empty, "#dim-rows tbody tr"), 1);
    assert_eq!(count(&empty, "#alloc-rows tbody tr"), 1);
    assert_no_credential(&empty);

    let page = create_team(&s).await;
    assert_eq!(notice(&page), done("Pool `team` created."));
    assert_eq!(
        texts(&page, "article.card.pool-card#pool-team h3"),
        ["Team <A>"]
    );
    assert_eq!(
        attr(&page, "#pool-team h3 a", "href").as_deref(),
        Some("/dashboard/costs/quota-share/team")
    );
    assert_eq!(texts(&page, "#pool-team code"), ["team"]);
    assert_eq!(
        texts(&page, "#pool-team > p"),
        ["Id: teamConnections: alpha-1Allocations: 2"]
    );
    assert_eq!(
        texts(&page, "#pool-team li"),
        ["requests:hourly: 0 of 4 requests used, lenient"]
    );
    assert_eq!(
        attr(&page, "#pool-team li span", "class").as_deref(),
        Some("state state-normal")
    );
    assert_no_credential(&page);
    // The notice is shown once.
    let (_, again) = s.page(LIST).await;
    assert_eq!(notice(&again), "");

    let pools = s.h.admin_json("/api/quota/pools").await;
    assert_eq!(
        pools,
        json!([{
            "id": "team",
            "name": "Team <A>",
            "connectionIds": ["alpha-1"],
            "dimensions": [{"unit": "requests", "window": "hourly", "limit": 4.0}],
            "effectiveDimensions": [{"unit": "requests", "window": "hourly", "limit": 4.0}],
            "allocations": [
                {"apiKeyId": "k1", "allocationWeight": 50.0, "capValue": null, "capUnit": null, "policy": "hard"},
                {"apiKeyId": "ops", "allocationWeight": 50.0, "capValue": null, "capUnit": null, "policy": "soft"},
            ],
        }])
    );

    // The same id again is refused with the API's message, above the form.
    let (status, page) = post_create(&s, &TEAM).await;
    assert_eq!(status, 409);
    let api =
        s.h.admin_send(
            Method::POST,
            "/api/quota/pools",
            json!({"id": "team", "name": "Team <A>", "connectionIds": ["alpha-1"]}),
        )
        .await;
    assert_eq!(api.status(), 409);
    let message = api.json::<Value>().await.unwrap()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(texts(&page, "#create-error"), [failed(&message)]);
    assert_eq!(
        field(&page, "form[action='/dashboard/costs/quota-share']", "name").as_deref(),
        Some("Team <A>")
    );
}

#[tokio::test]
async fn an_invalid_pool_shows_the_apis_message_and_creates_nothing() {
    let s = Signed::start().await;
    // Each case: the form, the same pool as the API takes it, and where the error shows.
    let cases: [Case; 4] = [
        (
            &[("id", "p1"), ("name", "P"), ("connection", "nope")],
            json!({"id": "p1", "name": "P", "connectionIds": ["nope"]}),
            "#create-error",
        ),
        (
            &[
                ("id", "p1"),
                ("name", "P"),
                ("connection", "alpha-1"),
                ("dim[0].unit", "bogus"),
                ("dim[0].window", "hourly"),
                ("dim[0].limit", "5"),
            ],
            json!({"id": "p1", "name": "P", "connectionIds": ["alpha-1"],
                "dimensions": [{"unit": "bogus", "window": "hourly", "limit": 5.0}]}),
            "#dim-0-error",
        ),
        (
            &[
                ("id", "p1"),
                ("name", "P"),
                ("connection", "alpha-1"),
                ("dim[0].unit", "requests"),
                ("dim[0].window", "hourly"),
                ("dim[0].limit", "5"),
                ("alloc[0].key", ""),
                ("alloc[1].key", "k1"),
                ("alloc[1].weight", "50"),
                ("alloc[1].policy", "hard"),
                ("alloc[1].cap", "3"),
            ],
            json!({"id": "p1", "name": "P", "connectionIds": ["alpha-1"],
                "dimensions": [{"unit": "requests", "window": "hourly", "limit": 5.0}],
                "allocations": [{"apiKeyId": "k1", "allocationWeight": 50.0, "capValue": 3.0}]}),
            "#alloc-1-error",
        ),
        (
            &[("id", "p 1"), ("name", "P"), ("connection", "alpha-1")],
            json!({"id": "p 1", "name": "P", "connectionIds": ["alpha-1"]}),
            "#create-error",
        ),
    ];
    for (form, body, at) in cases {
        let (status, page) = post_create(&s, form).await;
        assert_eq!(status, 400, "{at}");
        let message = api_error(s.h.admin_send(Method::POST, "/api/quota/pools", body).await).await;
        assert_eq!(texts(&page, at), [failed(&message)]);
        assert_eq!(
            count(&page, "[role=alert]"),
            1,
            "{at}: one error, in its place"
        );
    }
    // A bad limit: the API's exact error beside its row (the third; the blank second
    // row is left out, so the API names dimensions[1]), the values kept.
    let bad_limit = [
        ("id", "p1"),
        ("name", "P"),
        ("connection", "alpha-1"),
        ("dim[0].unit", "requests"),
        ("dim[0].window", "hourly"),
        ("dim[0].limit", "5"),
        ("dim[1].unit", "requests"),
        ("dim[1].window", "5h"),
        ("dim[1].limit", ""),
        ("dim[2].unit", "tokens"),
        ("dim[2].window", "daily"),
        ("dim[2].limit", "-1"),
    ];
    let (status, page) = post_create(&s, &bad_limit).await;
    assert_eq!(status, 400);
    let message = api_error(
        s.h.admin_send(
            Method::POST,
            "/api/quota/pools",
            json!({"id": "p1", "name": "P", "connectionIds": ["alpha-1"], "dimensions": [
                {"unit": "requests", "window": "hourly", "limit": 5.0},
                {"unit": "tokens", "window": "daily", "limit": -1.0}]}),
        )
        .await,
    )
    .await;
    assert!(message.contains("dimensions[1].limit: "), "{message}");
    assert_eq!(row_error(&page, "dim-2"), [failed(&message)]);
    assert_eq!(row_error(&page, "dim-0"), Vec::<String>::new());
    assert_eq!(
        attr(&page, r#"input[name="dim[2].limit"]"#, "aria-describedby").as_deref(),
        Some("dim-2-error")
    );
    let create = "form[action='/dashboard/costs/quota-share']";
    assert_eq!(
        ["dim[2].unit", "dim[2].window", "dim[2].limit", "id"].map(|n| field(&page, create, n)),
        [
            Some("tokens".to_owned()),
            Some("daily".to_owned()),
            Some("-1".to_owned()),
            Some("p1".to_owned())
        ]
    );
    // A weight that is not a number is named as the API names its field.
    let (status, page) = post_create(
        &s,
        &[
            ("id", "p1"),
            ("name", "P"),
            ("connection", "alpha-1"),
            ("alloc[0].key", "k1"),
            ("alloc[0].weight", "half"),
        ],
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        row_error(&page, "alloc-0"),
        [failed(
            "allocations[0].allocationWeight: `half` is not a number"
        )]
    );
    assert_eq!(s.h.admin_json("/api/quota/pools").await, json!([]));
    let (_, list) = s.page(LIST).await;
    assert_eq!(texts(&list, "#pools p"), ["No pools yet."]);
}

#[tokio::test]
async fn row_buttons_add_and_remove_rows_keeping_the_values_and_creating_nothing() {
    let s = Signed::start().await;
    let create = "form[action='/dashboard/costs/quota-share']";
    let mut fields = TEAM.to_vec();
    fields.push(("add", "dim"));
    let (status, page) = post_create(&s, &fields).await;
    assert_eq!(status, 200);
    assert_eq!(count(&page, "#dim-rows tbody tr"), 2);
    assert_eq!(
        ["dim[0].limit", "dim[1].limit", "dim[1].unit"].map(|n| field(&page, create, n)),
        [
            Some("4".to_owned()),
            Some(String::new()),
            Some("requests".to_owned())
        ]
    );
    assert_eq!(
        field(&page, create, "connection").as_deref(),
        Some("alpha-1")
    );
    assert_eq!(count(&page, "#alloc-rows tbody tr"), 3);
    fields.pop();
    fields.push(("remove", "alloc-0"));
    let (status, page) = post_create(&s, &fields).await;
    assert_eq!(status, 200);
    assert_eq!(count(&page, "#alloc-rows tbody tr"), 2);
    assert_eq!(
        ["alloc[0].key", "alloc[1].key", "alloc[1].policy"].map(|n| field(&page, create, n)),
        [
            Some(String::new()),
            Some("ops".to_owned()),
            Some("soft".to_owned())
        ]
    );
    fields.pop();
    fields.push(("add", "alloc"));
    let (_, page) = post_create(&s, &fields).await;
    assert_eq!(count(&page, "#alloc-rows tbody tr"), 4);
    assert_eq!(s.h.admin_json("/api/quota/pools").await, json!([]));
}

#[tokio::test]
async fn traffic_moves_the_pool_page_and_a_blocked_request_is_a_decision() {
    let s = Signed::start().await;
    create_team(&s).await;
    let path = "/dashboard/costs/quota-share/team";
    let (status, page) = s.page(path).await;
    assert_eq!(status, 200);
    assert_eq!(texts(&page, "head title"), ["Pool Team <A> · Switchyard"]);
    assert_eq!(
        live_region(&page, "pool-usage"),
        [
            Some(path.to_owned()),
            Some("every 5s".to_owned()),
            Some("#pool-usage".to_owned()),
            Some("outerHTML".to_owned())
        ]
    );
    assert_eq!(
        texts(&page, "section.dimension h3"),
        ["requests:hourly: 0 of 4 requests used, lenient"]
    );
    assert!(texts(&page, "ul.summary li")
        .contains(&"Saturation threshold: 50 % of each limit".to_owned()));
    assert_eq!(
        table_rows(&page, DECISIONS),
        [["No decisions recorded yet."]]
    );
    assert!(texts(&page, "p.hint")
        .contains(&"No requests through this pool's connections in the last hour.".to_owned()));

    for _ in 0..2 {
        assert_eq!(
            s.h.chat(chat_body("alpha/mock-small", false))
                .await
                .status(),
            200
        );
    }
    eventually(
        "the page shows k1's two requests and their log rows",
        || async {
            let page = s.page(path).await.1;
            texts(&page, "svg.bar rect title").contains(&"k1: 2".to_owned())
                && texts(&page, "figure.line-chart li").contains(&"k1".to_owned())
        },
    )
    .await;
    let (_, page) = s.page(path).await;
    assert_eq!(
        texts(&page, "svg.bar > title"),
        ["requests:hourly: 2 of 4 requests used, strict"]
    );
    assert_eq!(
        ["x", "width"].map(|a| attr(&page, "svg.bar rect.s0", a)),
        [Some("0.0".to_owned()), Some("300.0".to_owned())]
    );
    assert_eq!(texts(&page, "svg.bar rect.s0 title"), ["k1: 2"]);
    assert_eq!(
        bar_legend(&page),
        [
            "k1: 2",
            "ops: 0",
            "saturation threshold (50 %): 2",
            "global use: 2",
            "fair share of k1, ops: 2"
        ]
    );
    assert_eq!(
        attr(&page, "section.dimension h3 span", "class").as_deref(),
        Some("state state-strict")
    );
    assert_eq!(
        row_head(&page, ALLOCATIONS, "k1", 7).unwrap(),
        ["k1", "2", "2", "surplus 0", "no", "hard", "—"]
    );
    assert_eq!(
        row(&page, ALLOCATIONS, "ops").unwrap(),
        [
            "ops",
            "0",
            "2",
            "surplus 2",
            "no",
            "soft",
            "—",
            "0 requests/min",
            "—"
        ]
    );
    assert_eq!(
        texts(&page, "svg.line > title"),
        ["Burn rate: requests per minute by key"]
    );
    assert_eq!(texts(&page, "figure.line-chart li"), ["k1"]);

    // A third request is over k1's share once the pool is strict.
    let r = s.h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 429);
    let decisions = s.h.admin_json("/api/quota/pools/team/decisions").await;
    assert_eq!(decisions[0]["admitted"], false);
    let (_, page) = s.page(path).await;
    let decided: Vec<Vec<String>> = table_rows(&page, DECISIONS)
        .into_iter()
        .map(|r| r[1..].to_vec())
        .collect();
    assert_eq!(decided.len(), 3, "{decided:?}");
    assert_eq!(
        decided[0][..6],
        [
            "k1",
            "blocked",
            "requests:hourly",
            "fair_share",
            "strict",
            "hard"
        ]
    );
    assert_eq!(
        decided[1..],
        [
            ["k1", "admitted", "—", "—", "—", "hard", "—"],
            ["k1", "admitted", "—", "—", "—", "hard", "—"]
        ]
    );
    assert_no_credential(&page);
}

#[tokio::test]
async fn allocations_are_edited_and_the_pool_deleted() {
    let s = Signed::start().await;
    create_team(&s).await;
    let path = "/dashboard/costs/quota-share/team";
    let (_, page) = s.page(path).await;
    assert_eq!(
        form_fields(&page, EDIT)[1..],
        [
            ("key-0", "k1"),
            ("weight-0", "50"),
            ("policy-0", "hard"),
            ("cap-0", ""),
            ("capunit-0", ""),
            ("key-1", "ops"),
            ("weight-1", "50"),
            ("policy-1", "soft"),
            ("cap-1", ""),
            ("capunit-1", ""),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
    assert_eq!(table_rows(&page, "Allocations")[0][0], "k1");
    assert_eq!(
        texts(&page, &format!("{EDIT} select[name=policy-0] option")),
        ["not in the pool", "hard", "soft", "burst"]
    );
    assert_eq!(
        texts(&page, &format!("{EDIT} select[name=capunit-0] option")),
        ["no cap", "requests"]
    );
    assert_eq!(
        attr(&page, "input[name=weight-0]", "aria-label").as_deref(),
        Some("Weight of k1 (%)")
    );

    let allocations = format!("{path}/allocations");
    let page = s
        .act(
            &allocations,
            &[
                ("key-0", "k1"),
                ("weight-0", "70"),
                ("policy-0", "burst"),
                ("cap-0", "3"),
                ("capunit-0", "requests"),
                ("key-1", "ops"),
                ("weight-1", "30"),
                ("policy-1", "hard"),
                ("cap-1", ""),
                ("capunit-1", ""),
            ],
        )
        .await;
    assert_eq!(notice(&page), done("Pool `team` now has 2 allocation(s)."));
    assert_eq!(
        ["policy-0", "cap-0", "capunit-0"].map(|n| field(&page, EDIT, n)),
        [
            Some("burst".to_owned()),
            Some("3".to_owned()),
            Some("requests".to_owned())
        ]
    );
    let pool = s.h.admin_json("/api/quota/pools/team").await;
    assert_eq!(
        pool["allocations"],
        json!([
            {"apiKeyId": "k1", "allocationWeight": 70.0, "capValue": 3.0, "capUnit": "requests", "policy": "burst"},
            {"apiKeyId": "ops", "allocationWeight": 30.0, "capValue": null, "capUnit": null, "policy": "hard"},
        ])
    );
    assert_eq!(
        row_head(&page, ALLOCATIONS, "k1", 7).unwrap(),
        ["k1", "0", "2.8", "surplus 2.8", "no", "burst", "3"]
    );

    // An invalid edit changes nothing and says what the API says.
    let page = s
        .act(
            &allocations,
            &[("key-0", "ghost"), ("weight-0", "10"), ("policy-0", "hard")],
        )
        .await;
    let mut whole = pool.clone();
    whole["allocations"] = json!([{"apiKeyId": "ghost", "allocationWeight": 10.0}]);
    let obj = whole.as_object_mut().unwrap();
    obj.remove("effectiveDimensions");
    let message = api_error(
        s.h.admin_send(Method::PUT, "/api/quota/pools/team", whole)
            .await,
    )
    .await;
    assert_eq!(notice(&page), failed(&message));
    assert_eq!(s.h.admin_json("/api/quota/pools/team").await, pool);
    let page = s
        .act(
            &allocations,
            &[("key-0", "k1"), ("weight-0", "lots"), ("policy-0", "hard")],
        )
        .await;
    assert_eq!(
        notice(&page),
        failed("allocations: weight of `k1`: `lots` is not a number")
    );
    assert_eq!(s.h.admin_json("/api/quota/pools/team").await, pool);

    // A key whose policy is left empty leaves the pool.
    let page = s
        .act(
            &allocations,
            &[
                ("key-0", "k1"),
                ("weight-0", "70"),
                ("policy-0", ""),
                ("key-1", "ops"),
                ("weight-1", ""),
                ("policy-1", "soft"),
            ],
        )
        .await;
    assert_eq!(notice(&page), done("Pool `team` now has 1 allocation(s)."));
    assert_eq!(
        s.h.admin_json("/api/quota/pools/team").await["allocations"],
        json!([{"apiKeyId": "ops", "allocationWeight": 0.0, "capValue": null, "capUnit": null, "policy": "soft"}])
    );

    // Deleting takes two steps: the summary unfolds the button that deletes.
    assert_eq!(
        confirm(&page, "/dashboard/costs/quota-share/team/delete"),
        (
            vec![("csrf".to_owned(), s.csrf.clone())],
            vec!["Delete pool team for good".to_owned()],
            vec!["Delete pool…".to_owned()]
        )
    );
    let page = s.act(&format!("{path}/delete"), &[]).await;
    assert_eq!(notice(&page), done("Pool `team` deleted."));
    assert_eq!(texts(&page, "#pools p"), ["No pools yet."]);
    assert_eq!(s.h.admin_json("/api/quota/pools").await, json!([]));
    let (status, gone) = s.page(path).await;
    assert_eq!(status, 404);
    assert!(texts(&gone, "p.notice.error")[0].starts_with("Error: "));
}

#[tokio::test]
async fn plans_are_shown_overridden_and_reverted() {
    let s = Signed::start().await;
    let (status, page) = s.page(PLANS).await;
    assert_eq!(status, 200);
    assert_eq!(
        texts(&page, "select#plan-connection[name=connection] option"),
        ["alpha-1 (alpha)", "beta-1 (beta)"]
    );
    assert_eq!(
        field(
            &page,
            "form[action='/dashboard/costs/quota-share/plans']",
            "connection"
        )
        .as_deref(),
        Some("alpha-1")
    );
    assert!(texts(&page, "p.hint").contains(&"Pick a connection to see its plan.".to_owned()));

    let view = format!("{PLANS}?connection=alpha-1");
    let (_, page) = s.page(&view).await;
    let api = s.h.admin_json("/api/quota/plans/alpha-1").await;
    assert_eq!(
        api,
        json!({"connectionId": "alpha-1", "source": "empty", "dimensions": []})
    );
    assert_eq!(
        attr(&page, "#plan-connection option[selected]", "value").as_deref(),
        Some("alpha-1")
    );
    assert_eq!(
        texts(&page, "#plan-source"),
        ["Source: empty (nothing known: declare dimensions on the pool)"]
    );
    assert_eq!(
        table_rows(&page, "Dimensions of alpha-1"),
        [["No dimensions."]]
    );
    assert_eq!(common::count(&page, "details.confirm"), 0);

    let page = s
        .act(
            &format!("{PLANS}/alpha-1"),
            &[
                ("dim[0].unit", "requests"),
                ("dim[0].window", "hourly"),
                ("dim[0].limit", "100"),
                ("dim[1].unit", "tokens"),
                ("dim[1].window", "5h"),
                ("dim[1].limit", "0"),
            ],
        )
        .await;
    assert_eq!(
        notice(&page),
        done("Plan of `alpha-1` saved: 2 dimension(s), source manual.")
    );
    assert_eq!(
        texts(&page, "#plan-source"),
        ["Source: manual (an override stored for this connection)"]
    );
    assert_eq!(
        table_rows(&page, "Dimensions of alpha-1"),
        [
            ["requests", "hourly", "100"],
            ["tokens", "5h", "0 (unknown)"]
        ]
    );
    let plan_form = "form[action='/dashboard/costs/quota-share/plans/alpha-1']";
    assert_eq!(
        form_fields(&page, plan_form)[1..],
        [
            ("dim[0].unit", "requests"),
            ("dim[0].window", "hourly"),
            ("dim[0].limit", "100"),
            ("dim[1].unit", "tokens"),
            ("dim[1].window", "5h"),
            ("dim[1].limit", "0"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
    assert_eq!(
        s.h.admin_json("/api/quota/plans/alpha-1").await,
        json!({"connectionId": "alpha-1", "source": "manual", "dimensions": [
            {"unit": "requests", "window": "hourly", "limit": 100.0},
            {"unit": "tokens", "window": "5h", "limit": 0.0},
        ]})
    );

    // An invalid override says what the API says and changes nothing.
    let r = s
        .post(
            &format!("{PLANS}/alpha-1"),
            &[
                ("dim[0].unit", "requests"),
                ("dim[0].window", "yearly"),
                ("dim[0].limit", "5"),
            ],
        )
        .await;
    assert_eq!(r.status(), 400);
    let page = r.text().await.unwrap();
    let message = api_error(
        s.h.admin_send(
            Method::PUT,
            "/api/quota/plans/alpha-1",
            json!({"dimensions": [{"unit": "requests", "window": "yearly", "limit": 5.0}]}),
        )
        .await,
    )
    .await;
    assert_eq!(
        texts(&page, "p.field-error#dim-0-error"),
        [failed(&message)]
    );
    assert_eq!(
        field(&page, plan_form, "dim[0].window").as_deref(),
        Some("yearly")
    );
    assert_eq!(
        s.h.admin_json("/api/quota/plans/alpha-1").await["source"],
        "manual"
    );
    assert_eq!(
        confirm(&page, "/dashboard/costs/quota-share/plans/alpha-1/delete"),
        (
            vec![("csrf".to_owned(), s.csrf.clone())],
            vec!["Delete the override of alpha-1 for good".to_owned()],
            vec!["Delete override…".to_owned()]
        )
    );

    let page = s.act(&format!("{PLANS}/alpha-1/delete"), &[]).await;
    assert_eq!(notice(&page), done("The override of `alpha-1` is deleted."));
    assert_eq!(
        texts(&page, "#plan-source"),
        ["Source: empty (nothing known: declare dimensions on the pool)"]
    );
    assert_eq!(s.h.admin_json("/api/quota/plans/alpha-1").await, api);

    let (_, page) = s.page(&format!("{PLANS}?connection=nope")).await;
    let missing = s.h.admin_get("/api/quota/plans/nope").await;
    assert_eq!(missing.status(), 404);
    let message = missing.json::<Value>().await.unwrap()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        texts(&page, "p.notice.error[role=alert]"),
        [failed(&message)]
    );
    assert_no_credential(&page);
}

#[tokio::test]
async fn forms_without_the_csrf_token_are_refused_and_change_nothing() {
    let s = Signed::start().await;
    create_team(&s).await;
    let before = s.h.admin_json("/api/quota/pools").await;
    for (path, fields) in [
        (
            LIST,
            vec![("id", "p2"), ("name", "P"), ("connection", "alpha-1")],
        ),
        (
            "/dashboard/costs/quota-share/team/allocations",
            vec![("key-0", "k1"), ("weight-0", "10"), ("policy-0", "hard")],
        ),
        ("/dashboard/costs/quota-share/team/delete", vec![]),
        (
            "/dashboard/costs/quota-share/plans/alpha-1",
            vec![("dimensions", "requests:hourly=1")],
        ),
        ("/dashboard/costs/quota-share/plans/alpha-1/delete", vec![]),
    ] {
        let r =
            s.c.post(s.h.url(path))
                .header("cookie", &s.cookie)
                .form(&fields)
                .send()
                .await
                .unwrap();
        assert_eq!(r.status(), 403, "{path}");
    }
    assert_eq!(s.h.admin_json("/api/quota/pools").await, before);
    // Another method on an action's path is not found, and needs a session.
    for path in [
        "/dashboard/costs/quota-share/team/delete",
        "/dashboard/costs/quota-share/plans/alpha-1",
    ] {
        assert_eq!(s.page(path).await.0, 404, "{path}");
        let r = common::get(&s.h, &s.c, path, None).await;
        assert_eq!(r.status(), 303);
        assert_eq!(r.headers()[reqwest::header::LOCATION], "/dashboard/sign-in");
    }
    let r =
        s.c.post(s.h.url("/dashboard/costs/quota-share/team"))
            .form(&[("x", "y")])
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(
        s.h.admin_json("/api/quota/plans/alpha-1").await["source"],
        "empty"
    );
}

#[tokio::test]
async fn the_pool_page_uses_the_saturation_threshold_in_force() {
    let s = Signed::start().await;
    create_team(&s).await;
    let r =
        s.h.admin_send(
            Method::PUT,
            "/api/settings/quota.saturationThreshold",
            json!({"value": 0.75}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let (_, page) = s.page("/dashboard/costs/quota-share/team").await;
    assert!(texts(&page, "ul.summary li")
        .contains(&"Saturation threshold: 75 % of each limit".to_owned()));
    assert!(bar_legend(&page).contains(&"saturation threshold (75 %): 3".to_owned()));
}

#[tokio::test]
async fn saving_allocations_keeps_a_name_changed_since_the_form_was_shown() {
    let s = Signed::start().await;
    create_team(&s).await;
    let path = "/dashboard/costs/quota-share/team";
    let (_, form) = s.page(path).await;
    assert_eq!(field(&form, EDIT, "key-1").as_deref(), Some("ops"));
    let r =
        s.h.admin_send(
            Method::PUT,
            "/api/quota/pools/team",
            json!({
                "id": "team", "name": "Renamed", "connectionIds": ["alpha-1"],
                "dimensions": [{"unit": "requests", "window": "hourly", "limit": 6}],
                "allocations": [{"apiKeyId": "k1", "allocationWeight": 50, "policy": "hard"}]
            }),
        )
        .await;
    assert_eq!(r.status(), 200);
    let page = s
        .act(
            &format!("{path}/allocations"),
            &[
                ("key-0", "k1"),
                ("weight-0", "20"),
                ("policy-0", "soft"),
                ("key-1", "ops"),
                ("weight-1", "80"),
                ("policy-1", "hard"),
            ],
        )
        .await;
    assert_eq!(notice(&page), done("Pool `team` now has 2 allocation(s)."));
    assert_eq!(texts(&page, "head title"), ["Pool Renamed · Switchyard"]);
    assert_eq!(
        s.h.admin_json("/api/quota/pools/team").await,
        json!({
            "id": "team",
            "name": "Renamed",
            "connectionIds": ["alpha-1"],
            "dimensions": [{"unit": "requests", "window": "hourly", "limit": 6.0}],
            "effectiveDimensions": [{"unit": "requests", "window": "hourly", "limit": 6.0}],
            "allocations": [
                {"apiKeyId": "k1", "allocationWeight": 20.0, "capValue": null, "capUnit": null, "policy": "soft"},
                {"apiKeyId": "ops", "allocationWeight": 80.0, "capValue": null, "capUnit": null, "policy": "hard"},
            ],
        })
    );
    let r = s
        .post(
            "/dashboard/costs/quota-share/ghost/allocations",
            &[("key-0", "k1"), ("policy-0", "hard")],
        )
        .await;
    assert_eq!(r.status(), 303);
    let (status, missing) = s.page("/dashboard/costs/quota-share/ghost").await;
    assert_eq!(status, 404);
    assert_eq!(notice(&missing), failed("pool `ghost` not found"));
    assert_eq!(
        s.h.admin_json("/api/quota/pools").await[1],
        Value::Null,
        "no pool `ghost` was created"
    );
}

#[tokio::test]
async fn a_pool_made_strict_by_the_providers_reading_reads_strict_everywhere() {
    let s = Signed::start().await;
    s.act(
        LIST,
        &[
            ("id", "team"),
            ("name", "Team"),
            ("connection", "alpha-1"),
            ("dim[0].unit", "requests"),
            ("dim[0].window", "hourly"),
            ("dim[0].limit", "10"),
            ("alloc[0].key", "k1"),
            ("alloc[0].weight", "100"),
        ],
    )
    .await;
    // The provider says 70 of its 100 requests are used; the gateway counted one.
    s.h.rule(json!({"headers": {
        "x-ratelimit-limit-requests": "100",
        "x-ratelimit-remaining-requests": "30"
    }}))
    .await;
    assert_eq!(
        s.h.chat(chat_body("alpha/mock-small", false))
            .await
            .status(),
        200
    );
    let path = "/dashboard/costs/quota-share/team";
    eventually("the pool counts the request", || async {
        texts(&s.page(path).await.1, "svg.bar rect title").contains(&"k1: 1".to_owned())
    })
    .await;
    let usage = s.h.admin_json("/api/quota/pools/team/usage").await;
    assert_eq!(usage["dimensions"][0]["globalUsed"], 1.0);
    assert_eq!(usage["dimensions"][0]["providerSignal"], 0.7);
    assert_eq!(usage["dimensions"][0]["mode"], "strict");
    let (_, page) = s.page(path).await;
    let strict = "requests:hourly: 1 of 10 requests used, provider reports 70 %, strict";
    assert_eq!(texts(&page, "section.dimension h3"), [strict]);
    assert_eq!(
        attr(&page, "section.dimension h3 span", "class").as_deref(),
        Some("state state-strict")
    );
    assert_eq!(texts(&page, "svg.bar > title"), [strict]);
    let legend = bar_legend(&page);
    assert!(legend.contains(&"global use: 7".to_owned()), "{legend:?}");
    assert!(legend.contains(&"saturation threshold (50 %): 5".to_owned()));
    let (_, list) = s.page(LIST).await;
    assert_eq!(texts(&list, "#pool-team li"), [strict]);
    assert_eq!(
        attr(&list, "#pool-team li span", "class").as_deref(),
        Some("state state-strict")
    );
    assert_no_credential(&page);
    assert_no_credential(&list);
}
