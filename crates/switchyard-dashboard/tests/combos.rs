//! The combos page end to end: the fixture's combo, creating, reordering and deleting a
//! combo (seen in the gateway's routing), and bad input refused with the API's message.

mod common;

use common::{assert_no_credential, done, failed, Signed};
use reqwest::Method;
use serde_json::{json, Value};
use switchyard_test_support::{chat_body, CRED_ALPHA, CRED_BETA};

const PAGE: &str = "/dashboard/combos";

#[tokio::test]
async fn combos_are_listed_created_reordered_and_deleted() {
    let s = Signed::start().await;
    let (status, body) = s.page(PAGE).await;
    assert_eq!(status, 200);
    assert_no_credential(&body);
    assert!(body.contains(
        "<tr><td>fast</td><td>priority</td><td><ol><li>alpha/mock-small</li><li>beta/mock-small</li></ol></td>"
    ), "{body}");
    assert!(body.contains(
        r#"<textarea id="combo-fast-targets" name="targets" rows="4" required>alpha/mock-small
beta/mock-small</textarea>"#
    ));

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
    assert!(created.contains(&done("Combo cheap created.")), "{created}");
    assert!(created.contains(
        "<tr><td>cheap</td><td>priority</td><td><ol><li>beta/mock-small</li><li>alpha/mock-small connection=alpha-1</li></ol></td>"
    ));
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
    assert!(saved.contains(&done("Combo cheap saved.")));
    assert!(saved.contains(
        "<tr><td>cheap</td><td>priority</td><td><ol><li>alpha/mock-small</li><li>beta/mock-small</li></ol></td>"
    ));
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
    assert!(listed.contains(&format!(
        r#"<details class="confirm"><summary>Delete cheap…</summary><form method="post" action="/dashboard/combos/cheap/delete"><input type="hidden" name="csrf" value="{}"><button type="submit">Delete combo cheap for good</button></form></details>"#,
        s.csrf
    )), "{listed}");
    let deleted = s.act("/dashboard/combos/cheap/delete", &[]).await;
    assert!(deleted.contains(&done("Combo cheap deleted.")));
    assert!(!deleted.contains("<tr><td>cheap</td>"));
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
        assert!(after.contains(&failed(&message)), "{message}: {after}");
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
    assert!(after.contains("Error: unknown field `colour`"), "{after}");
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
