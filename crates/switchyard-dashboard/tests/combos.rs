//! The combos page end to end: the fixture's combo, creating, reordering and deleting a
//! combo (seen in the gateway's routing), and bad input refused with the API's message.

mod common;

use common::{assert_no_credential, done, failed, field, form_fields, notice, row, texts, Signed};
use reqwest::Method;
use serde_json::{json, Value};
use switchyard_test_support::{chat_body, CRED_ALPHA, CRED_BETA};

const PAGE: &str = "/dashboard/combos";

const TABLE: &str = "Combos and their targets, in the order they are tried";

/// The targets listed in combo `name`'s row, in order.
#[expect(clippy::unwrap_used, reason = "a missing row fails the test")]
fn targets(body: &str, name: &str) -> Vec<String> {
    let at = common::table_rows(body, TABLE)
        .iter()
        .position(|r| r[0] == name)
        .unwrap();
    texts(body, &format!("table tbody tr:nth-child({}) ol li", at + 1))
}

#[tokio::test]
async fn combos_are_listed_created_reordered_and_deleted() {
    let s = Signed::start().await;
    let (status, body) = s.page(PAGE).await;
    assert_eq!(status, 200);
    assert_no_credential(&body);
    assert_eq!(
        row(&body, TABLE, "fast").unwrap()[..2],
        ["fast", "priority"]
    );
    assert_eq!(
        targets(&body, "fast"),
        ["alpha/mock-small", "beta/mock-small"]
    );
    assert_eq!(
        field(
            &body,
            "form[action='/dashboard/combos/fast/update']",
            "targets"
        )
        .as_deref(),
        Some("alpha/mock-small\nbeta/mock-small")
    );

    let created = s
        .act(
            "/dashboard/combos/create",
            &[
                ("name", "cheap"),
                ("strategy", "priority"),
                (
                    "targets",
                    "beta/mock-small\r\n\r\nalpha/mock-small connection=alpha-1\r\n",
                ),
            ],
        )
        .await;
    assert_no_credential(&created);
    assert_eq!(notice(&created), done("Combo cheap created."));
    assert_eq!(row(&created, TABLE, "cheap").unwrap()[1], "priority");
    assert_eq!(
        targets(&created, "cheap"),
        ["beta/mock-small", "alpha/mock-small connection=alpha-1"]
    );
    assert_eq!(
        s.h.admin_json("/api/combos/cheap").await,
        json!({"name": "cheap", "strategy": "priority", "targets": [
            {"model": "beta/mock-small", "connection": null, "weight": 1, "cost": null},
            {"model": "alpha/mock-small", "connection": "alpha-1", "weight": 1, "cost": null}]})
    );
    assert_eq!(s.h.chat(chat_body("cheap", false)).await.status(), 200);
    assert_eq!(
        (
            s.h.by_credential(CRED_BETA).await,
            s.h.by_credential(CRED_ALPHA).await
        ),
        (1, 0)
    );

    let saved = s
        .act(
            "/dashboard/combos/cheap/update",
            &[
                ("strategy", "priority"),
                ("targets", "alpha/mock-small\nbeta/mock-small"),
            ],
        )
        .await;
    assert_eq!(notice(&saved), done("Combo cheap saved."));
    assert_eq!(
        targets(&saved, "cheap"),
        ["alpha/mock-small", "beta/mock-small"]
    );
    assert_eq!(s.h.chat(chat_body("cheap", false)).await.status(), 200);
    assert_eq!(
        (
            s.h.by_credential(CRED_BETA).await,
            s.h.by_credential(CRED_ALPHA).await
        ),
        (1, 1)
    );

    let forged =
        s.c.post(s.h.url("/dashboard/combos/cheap/delete"))
            .header("cookie", &s.cookie)
            .send()
            .await
            .unwrap();
    assert_eq!(forged.status(), 403);
    assert_eq!(s.h.admin_get("/api/combos/cheap").await.status(), 200);

    // Deleting takes two steps: the summary unfolds the button that deletes.
    let (_, listed) = s.page("/dashboard/combos").await;
    let delete = "details.confirm form[action='/dashboard/combos/cheap/delete']";
    assert_eq!(
        form_fields(&listed, delete),
        [("csrf".to_owned(), s.csrf.clone())]
    );
    assert_eq!(
        texts(&listed, &format!("{delete} button")),
        ["Delete combo cheap for good"]
    );
    assert!(texts(&listed, "details.confirm summary").contains(&"Delete cheap…".to_owned()));
    let deleted = s.act("/dashboard/combos/cheap/delete", &[]).await;
    assert_eq!(notice(&deleted), done("Combo cheap deleted."));
    assert_eq!(row(&deleted, TABLE, "cheap"), None);
    assert_eq!(s.h.admin_get("/api/combos/cheap").await.status(), 404);
    assert_ne!(s.h.chat(chat_body("cheap", false)).await.status(), 200);
}

#[tokio::test]
async fn bad_combos_show_the_apis_message_and_change_nothing() {
    let s = Signed::start().await;
    let before = s.h.admin_json("/api/combos").await;
    for (targets, api_targets) in [
        ("no-slash", json!([{"model": "no-slash"}])),
        ("nope/mock-small", json!([{"model": "nope/mock-small"}])),
    ] {
        let r =
            s.h.admin_send(
                Method::POST,
                "/api/combos",
                json!({"name": "bad", "strategy": "priority", "targets": api_targets}),
            )
            .await;
        assert_eq!(r.status(), 400);
        let e: Value = r.json().await.unwrap();
        let message = e["error"]["message"].as_str().unwrap().to_owned();
        let after = s
            .act(
                "/dashboard/combos/create",
                &[
                    ("name", "bad"),
                    ("strategy", "priority"),
                    ("targets", targets),
                ],
            )
            .await;
        assert_eq!(notice(&after), failed(&message));
    }
    let after = s
        .act(
            "/dashboard/combos/create",
            &[
                ("name", "bad"),
                ("strategy", "priority"),
                ("targets", "alpha/mock-small colour=red"),
            ],
        )
        .await;
    assert!(
        notice(&after).starts_with("Error: unknown field `colour`"),
        "{}",
        notice(&after)
    );
    let forged =
        s.c.post(s.h.url("/dashboard/combos/create"))
            .header("cookie", &s.cookie)
            .form(&[
                ("name", "sneaky"),
                ("strategy", "priority"),
                ("targets", "alpha/mock-small"),
            ])
            .send()
            .await
            .unwrap();
    assert_eq!(forged.status(), 403);
    assert_eq!(s.h.admin_json("/api/combos").await, before);
}

const ALIASES: &str = "Model aliases, in the order they are tried";

#[tokio::test]
async fn aliases_are_edited_as_one_list_and_route_requests() {
    let s = Signed::start().await;
    let (_, body) = s.page(PAGE).await;
    assert_eq!(
        common::table_rows(&body, ALIASES),
        [["No aliases: clients must ask for provider/model or a combo by name."]]
    );
    let bad = s
        .act("/dashboard/combos/aliases", &[("aliases", "gpt-* nowhere")])
        .await;
    assert_eq!(
        notice(&bad),
        failed("alias `gpt-*`: target `nowhere` is neither a combo nor provider/model")
    );
    let strategy_unknown = s
        .act(
            "/dashboard/combos/create",
            &[
                ("name", "x"),
                ("strategy", "fastest"),
                ("targets", "alpha/mock-small"),
            ],
        )
        .await;
    assert_eq!(
        notice(&strategy_unknown),
        failed("combo `x`: unknown strategy `fastest`: use one of priority, weighted, round-robin, fill-first, random, strict-random, cost-optimized, p2c, least-used, cache-optimized, headroom, reset-window, reset-aware, lkgp, context-optimized, auto, pipeline, fusion, context-relay")
    );
    let saved = s
        .act(
            "/dashboard/combos/aliases",
            &[(
                "aliases",
                "gpt-4o beta/mock-small\r\n\r\ngpt-* fast key=k1\r\n",
            )],
        )
        .await;
    assert_eq!(notice(&saved), done("2 aliases saved."));
    assert_eq!(
        common::table_rows(&saved, ALIASES),
        [
            ["gpt-4o", "beta/mock-small", "every key"],
            ["gpt-*", "fast", "k1"]
        ]
    );
    assert_eq!(
        field(
            &saved,
            "form[action='/dashboard/combos/aliases']",
            "aliases"
        )
        .as_deref(),
        Some("gpt-4o beta/mock-small\ngpt-* fast key=k1")
    );
    assert_eq!(
        s.h.admin_json("/api/aliases").await,
        json!({"aliases": [
            {"pattern": "gpt-4o", "target": "beta/mock-small"},
            {"pattern": "gpt-*", "target": "fast", "keys": ["k1"]}]})
    );
    assert_eq!(s.h.chat(chat_body("gpt-5", false)).await.status(), 200);
    assert_eq!(s.h.by_credential(CRED_ALPHA).await, 1);
    let cleared = s.act("/dashboard/combos/aliases", &[("aliases", "")]).await;
    assert_eq!(notice(&cleared), done("0 aliases saved."));
    assert_eq!(s.h.admin_json("/api/aliases").await, json!({"aliases": []}));
}
