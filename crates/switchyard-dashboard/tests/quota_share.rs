//! Quota share and plans (SPEC D1, D2) end to end: pools created, read, edited and
//! deleted through the dashboard's forms and checked against the management API, usage
//! moved by real chat requests, and plan overrides.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions fail loudly on purpose"
)]

mod common;

use common::{assert_no_credential, done, escaped, failed, Signed};
use reqwest::Method;
use serde_json::{json, Value};
use switchyard_test_support::{chat_body, eventually};

const LIST: &str = "/dashboard/costs/quota-share";
const PLANS: &str = "/dashboard/costs/quota-share/plans";

/// The message of an API error answer, which must be a `400`.
async fn api_error(r: reqwest::Response) -> String {
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    body["error"]["message"].as_str().unwrap().to_owned()
}

/// Pool `team` on `alpha-1`: 4 requests an hour, k1 and ops with half each.
async fn create_team(s: &Signed) -> String {
    s.act(
        LIST,
        &[
            ("id", "team"),
            ("name", "Team <A>"),
            ("connection", "alpha-1"),
            ("dimensions", "requests:hourly=4\n"),
            ("allocations", "k1 50\n\nops 50 soft\n"),
        ],
    )
    .await
}

#[tokio::test]
async fn a_pool_created_through_the_form_is_listed_and_in_the_api() {
    let s = Signed::start().await;
    let (status, empty) = s.page(LIST).await;
    assert_eq!(status, 200);
    assert!(empty.contains(
        r#"<details class="card concept" open><summary>What is a quota pool?</summary>"#
    ));
    assert!(empty.contains(r##"<div id="pools" hx-get="/dashboard/costs/quota-share" hx-trigger="every 30s" hx-select="#pools" hx-swap="outerHTML"><p>No pools yet.</p></div>"##));
    assert!(empty.contains(r#"<input type="checkbox" id="pool-conn-0" name="connection" value="alpha-1"><label for="pool-conn-0">alpha-1 (alpha)</label>"#));
    assert!(empty.contains(r#"<input type="checkbox" id="pool-conn-1" name="connection" value="beta-1"><label for="pool-conn-1">beta-1 (beta)</label>"#));
    assert!(empty.contains("Keys: k1, ops.</p>"));
    assert_no_credential(&empty);

    let page = create_team(&s).await;
    assert!(page.contains(&done("Pool `team` created.")), "{page}");
    assert!(page.contains(r#"<article class="card pool-card" id="pool-team"><h3><a href="/dashboard/costs/quota-share/team">Team &lt;A&gt;</a></h3>"#));
    assert!(page.contains("<p>Id: <code>team</code><br>Connections: alpha-1<br>Allocations: 2</p>"));
    assert!(page.contains(r#"<li>requests:hourly: 0 of 4 requests used, <span class="state state-normal">lenient</span></li>"#));
    assert_no_credential(&page);
    // The notice is shown once.
    let (_, again) = s.page(LIST).await;
    assert!(!again.contains("Done:"));

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

    // The same id again is refused with the API's message.
    let page = create_team(&s).await;
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
    assert!(page.contains(&failed(&message)), "{message}\n{page}");
}

#[tokio::test]
async fn an_invalid_pool_shows_the_apis_message_and_creates_nothing() {
    let s = Signed::start().await;
    let cases: [(&[(&str, &str)], Value); 4] = [
        (
            &[("id", "p1"), ("name", "P"), ("connection", "nope")],
            json!({"id": "p1", "name": "P", "connectionIds": ["nope"]}),
        ),
        (
            &[
                ("id", "p1"),
                ("name", "P"),
                ("connection", "alpha-1"),
                ("dimensions", "bogus:hourly=5"),
            ],
            json!({"id": "p1", "name": "P", "connectionIds": ["alpha-1"],
                "dimensions": [{"unit": "bogus", "window": "hourly", "limit": 5.0}]}),
        ),
        (
            &[
                ("id", "p1"),
                ("name", "P"),
                ("connection", "alpha-1"),
                ("dimensions", "requests:hourly=5"),
                ("allocations", "k1 50 hard 3"),
            ],
            json!({"id": "p1", "name": "P", "connectionIds": ["alpha-1"],
                "dimensions": [{"unit": "requests", "window": "hourly", "limit": 5.0}],
                "allocations": [{"apiKeyId": "k1", "allocationWeight": 50.0, "capValue": 3.0}]}),
        ),
        (
            &[("id", "p 1"), ("name", "P"), ("connection", "alpha-1")],
            json!({"id": "p 1", "name": "P", "connectionIds": ["alpha-1"]}),
        ),
    ];
    for (form, body) in cases {
        let page = s.act(LIST, form).await;
        let message = api_error(s.h.admin_send(Method::POST, "/api/quota/pools", body).await).await;
        assert!(page.contains(&failed(&message)), "{message}\n{page}");
    }
    // Text that is not a line of the format is named by its line.
    let page = s
        .act(
            LIST,
            &[
                ("id", "p1"),
                ("name", "P"),
                ("connection", "alpha-1"),
                ("dimensions", "requests:hourly=5\nrequests hourly 5"),
            ],
        )
        .await;
    assert!(page.contains(&failed("dimensions: line 2: `requests hourly 5` is not `unit:window=limit` (e.g. `requests:hourly=100`)")), "{page}");
    let page = s
        .act(
            LIST,
            &[
                ("id", "p1"),
                ("name", "P"),
                ("connection", "alpha-1"),
                ("allocations", "k1 half"),
            ],
        )
        .await;
    assert!(
        page.contains(&failed(
            "allocations: line 1: weight `half` is not a number"
        )),
        "{page}"
    );
    assert_eq!(s.h.admin_json("/api/quota/pools").await, json!([]));
    let (_, list) = s.page(LIST).await;
    assert!(list.contains("<p>No pools yet.</p>"));
}

#[tokio::test]
async fn traffic_moves_the_pool_page_and_a_blocked_request_is_a_decision() {
    let s = Signed::start().await;
    create_team(&s).await;
    let path = "/dashboard/costs/quota-share/team";
    let (status, page) = s.page(path).await;
    assert_eq!(status, 200);
    assert!(page.contains("<title>Pool Team &lt;A&gt; · Switchyard</title>"));
    assert!(page.contains(r##"<div id="pool-usage" hx-get="/dashboard/costs/quota-share/team" hx-trigger="every 5s" hx-select="#pool-usage" hx-swap="outerHTML">"##));
    assert!(page.contains(r#"<h3>requests:hourly: 0 of 4 requests used, <span class="state state-normal">lenient</span></h3>"#));
    assert!(page.contains("<li>Saturation threshold: 50 % of each limit</li>"));
    assert!(page.contains("<tr><td colspan=\"8\">No decisions recorded yet.</td></tr>"));
    assert!(page.contains("No requests through this pool's connections in the last hour."));

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
            page.contains("<title>k1: 2</title>") && page.contains("</svg>k1</li>")
        },
    )
    .await;
    let (_, page) = s.page(path).await;
    assert!(
        page.contains(r#"<title>requests:hourly: 2 of 4 requests used, strict</title>"#),
        "{page}"
    );
    assert!(page.contains(
        r#"<rect class="s0" x="0.0" y="4" width="300.0" height="24"><title>k1: 2</title></rect>"#
    ));
    assert!(page.contains("</svg>saturation threshold (50 %): 2</li>"));
    assert!(page.contains("</svg>fair share of k1, ops: 2</li>"));
    assert!(page.contains(r#"<span class="state state-strict">strict</span>"#));
    assert!(page.contains("<tr><td>k1</td><td>2</td><td>2</td><td>surplus 0</td><td>no</td><td>hard</td><td>—</td>"), "{page}");
    assert!(page.contains("<tr><td>ops</td><td>0</td><td>2</td><td>surplus 2</td><td>no</td><td>soft</td><td>—</td><td>0 requests/min</td><td>—</td></tr>"));
    assert!(page.contains("<title>Burn rate: requests per minute by key</title>"));
    assert!(page.contains("</svg>k1</li>"));

    // A third request is over k1's share once the pool is strict.
    let r = s.h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 429);
    let decisions = s.h.admin_json("/api/quota/pools/team/decisions").await;
    assert_eq!(decisions[0]["admitted"], false);
    let (_, page) = s.page(path).await;
    assert!(
        page.contains("<td>k1</td><td>blocked</td><td>requests:hourly</td><td>fair_share</td><td>strict</td><td>hard</td>"),
        "{page}"
    );
    assert!(page.contains(
        "<td>k1</td><td>admitted</td><td>—</td><td>—</td><td>—</td><td>hard</td><td>—</td></tr>"
    ));
    assert_no_credential(&page);
}

#[tokio::test]
async fn allocations_are_edited_and_the_pool_deleted() {
    let s = Signed::start().await;
    create_team(&s).await;
    let path = "/dashboard/costs/quota-share/team";
    let (_, page) = s.page(path).await;
    assert!(page.contains(r#"<tr><th scope="row">k1<input type="hidden" name="key-0" value="k1"></th><td><input type="number" name="weight-0" value="50" min="0" max="100" step="any" aria-label="Weight of k1 (%)"></td><td><select name="policy-0" aria-label="Policy of k1"><option value="">not in the pool</option><option value="hard" selected>hard</option><option value="soft">soft</option><option value="burst">burst</option></select></td><td><input type="number" name="cap-0" value="" min="0" step="any" aria-label="Cap of k1"></td><td><select name="capunit-0" aria-label="Cap unit of k1"><option value="" selected>no cap</option><option value="requests">requests</option></select></td></tr>"#), "{page}");
    assert!(page.contains(r#"<option value="soft" selected>soft</option>"#));

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
    assert!(
        page.contains(&done("Pool `team` now has 2 allocation(s).")),
        "{page}"
    );
    assert!(page.contains(r#"<input type="number" name="cap-0" value="3" min="0" step="any" aria-label="Cap of k1"></td><td><select name="capunit-0" aria-label="Cap unit of k1"><option value="">no cap</option><option value="requests" selected>requests</option></select>"#));
    assert!(page.contains(r#"<option value="burst" selected>burst</option>"#));
    let pool = s.h.admin_json("/api/quota/pools/team").await;
    assert_eq!(
        pool["allocations"],
        json!([
            {"apiKeyId": "k1", "allocationWeight": 70.0, "capValue": 3.0, "capUnit": "requests", "policy": "burst"},
            {"apiKeyId": "ops", "allocationWeight": 30.0, "capValue": null, "capUnit": null, "policy": "hard"},
        ])
    );
    assert!(page.contains("<tr><td>k1</td><td>0</td><td>2.8</td><td>surplus 2.8</td><td>no</td><td>burst</td><td>3</td>"), "{page}");

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
    assert!(page.contains(&failed(&message)), "{message}\n{page}");
    assert_eq!(s.h.admin_json("/api/quota/pools/team").await, pool);
    let page = s
        .act(
            &allocations,
            &[("key-0", "k1"), ("weight-0", "lots"), ("policy-0", "hard")],
        )
        .await;
    assert!(
        page.contains(&failed(
            "allocations: weight of `k1`: `lots` is not a number"
        )),
        "{page}"
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
    assert!(
        page.contains(&done("Pool `team` now has 1 allocation(s).")),
        "{page}"
    );
    assert_eq!(
        s.h.admin_json("/api/quota/pools/team").await["allocations"],
        json!([{"apiKeyId": "ops", "allocationWeight": 0.0, "capValue": null, "capUnit": null, "policy": "soft"}])
    );

    // Deleting takes two steps: the summary unfolds the button that deletes.
    assert!(page.contains(&format!(
        r#"<details class="confirm"><summary>Delete pool…</summary><form method="post" action="/dashboard/costs/quota-share/team/delete"><input type="hidden" name="csrf" value="{}"><button type="submit">Delete pool team for good</button></form></details>"#,
        s.csrf
    )), "{page}");
    let page = s.act(&format!("{path}/delete"), &[]).await;
    assert!(page.contains(&done("Pool `team` deleted.")), "{page}");
    assert!(page.contains("<p>No pools yet.</p>"));
    assert_eq!(s.h.admin_json("/api/quota/pools").await, json!([]));
    let (status, gone) = s.page(path).await;
    assert_eq!(status, 404);
    assert!(gone.contains("Error: "));
}

#[tokio::test]
async fn plans_are_shown_overridden_and_reverted() {
    let s = Signed::start().await;
    let (status, page) = s.page(PLANS).await;
    assert_eq!(status, 200);
    assert!(page.contains(r#"<select id="plan-connection" name="connection"><option value="alpha-1">alpha-1 (alpha)</option><option value="beta-1">beta-1 (beta)</option></select>"#));
    assert!(page.contains("Pick a connection to see its plan."));

    let view = format!("{PLANS}?connection=alpha-1");
    let (_, page) = s.page(&view).await;
    let api = s.h.admin_json("/api/quota/plans/alpha-1").await;
    assert_eq!(
        api,
        json!({"connectionId": "alpha-1", "source": "empty", "dimensions": []})
    );
    assert!(page.contains(r#"<option value="alpha-1" selected>"#));
    assert!(page.contains(
        r#"<p id="plan-source">Source: empty (nothing known: declare dimensions on the pool)</p>"#
    ));
    assert!(page.contains("<tr><td colspan=\"3\">No dimensions.</td></tr>"));
    assert!(!page.contains("Delete override"));

    let page = s
        .act(
            &format!("{PLANS}/alpha-1"),
            &[("dimensions", "requests:hourly=100\ntokens:5h=0")],
        )
        .await;
    assert!(
        page.contains(&done(
            "Plan of `alpha-1` saved: 2 dimension(s), source manual."
        )),
        "{page}"
    );
    assert!(page.contains(
        r#"<p id="plan-source">Source: manual (an override stored for this connection)</p>"#
    ));
    assert!(page.contains("<tr><td>requests</td><td>hourly</td><td>100</td></tr><tr><td>tokens</td><td>5h</td><td>0 (unknown)</td></tr>"));
    assert!(page.contains(">requests:hourly=100\ntokens:5h=0\n</textarea>"));
    assert_eq!(
        s.h.admin_json("/api/quota/plans/alpha-1").await,
        json!({"connectionId": "alpha-1", "source": "manual", "dimensions": [
            {"unit": "requests", "window": "hourly", "limit": 100.0},
            {"unit": "tokens", "window": "5h", "limit": 0.0},
        ]})
    );

    // An invalid override says what the API says and changes nothing.
    let page = s
        .act(
            &format!("{PLANS}/alpha-1"),
            &[("dimensions", "requests:yearly=5")],
        )
        .await;
    let message = api_error(
        s.h.admin_send(
            Method::PUT,
            "/api/quota/plans/alpha-1",
            json!({"dimensions": [{"unit": "requests", "window": "yearly", "limit": 5.0}]}),
        )
        .await,
    )
    .await;
    assert!(page.contains(&failed(&message)), "{message}\n{page}");
    assert_eq!(
        s.h.admin_json("/api/quota/plans/alpha-1").await["source"],
        "manual"
    );
    assert!(page.contains(&format!(
        r#"<details class="confirm"><summary>Delete override…</summary><form method="post" action="/dashboard/costs/quota-share/plans/alpha-1/delete"><input type="hidden" name="csrf" value="{}"><button type="submit">Delete the override of alpha-1 for good</button></form></details>"#,
        s.csrf
    )));

    let page = s.act(&format!("{PLANS}/alpha-1/delete"), &[]).await;
    assert!(
        page.contains(&done("The override of `alpha-1` is deleted.")),
        "{page}"
    );
    assert!(page.contains("Source: empty"));
    assert_eq!(s.h.admin_json("/api/quota/plans/alpha-1").await, api);

    let (_, page) = s.page(&format!("{PLANS}?connection=nope")).await;
    let missing = s.h.admin_get("/api/quota/plans/nope").await;
    assert_eq!(missing.status(), 404);
    let message = missing.json::<Value>().await.unwrap()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        page.contains(&format!(
            r#"<p class="notice error" role="alert">Error: {}</p>"#,
            escaped(&message)
        )),
        "{message}\n{page}"
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
    assert!(
        page.contains("<li>Saturation threshold: 75 % of each limit</li>"),
        "{page}"
    );
    assert!(page.contains("</svg>saturation threshold (75 %): 3</li>"));
}

#[tokio::test]
async fn saving_allocations_keeps_a_name_changed_since_the_form_was_shown() {
    let s = Signed::start().await;
    create_team(&s).await;
    let path = "/dashboard/costs/quota-share/team";
    let (_, form) = s.page(path).await;
    assert!(form.contains(r#"<input type="hidden" name="key-1" value="ops">"#));
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
    assert!(
        page.contains(&done("Pool `team` now has 2 allocation(s).")),
        "{page}"
    );
    assert!(page.contains("<title>Pool Renamed · Switchyard</title>"));
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
    assert!(
        missing.contains(&failed("pool `ghost` not found")),
        "{missing}"
    );
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
            ("dimensions", "requests:hourly=10"),
            ("allocations", "k1 100"),
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
        s.page(path).await.1.contains("<title>k1: 1</title>")
    })
    .await;
    let usage = s.h.admin_json("/api/quota/pools/team/usage").await;
    assert_eq!(usage["dimensions"][0]["globalUsed"], 1.0);
    assert_eq!(usage["dimensions"][0]["providerSignal"], 0.7);
    assert_eq!(usage["dimensions"][0]["mode"], "strict");
    let (_, page) = s.page(path).await;
    assert!(page.contains(r#"<h3>requests:hourly: 1 of 10 requests used, provider reports 70 %, <span class="state state-strict">strict</span></h3>"#), "{page}");
    assert!(page.contains(
        "<title>requests:hourly: 1 of 10 requests used, provider reports 70 %, strict</title>"
    ));
    assert!(page.contains("</svg>global use: 7</li>"), "{page}");
    assert!(page.contains("</svg>saturation threshold (50 %): 5</li>"));
    let (_, list) = s.page(LIST).await;
    assert!(list.contains(r#"<li>requests:hourly: 1 of 10 requests used, provider reports 70 %, <span class="state state-strict">strict</span></li>"#), "{list}");
    assert_no_credential(&page);
    assert_no_credential(&list);
}
