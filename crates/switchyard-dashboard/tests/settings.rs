//! The settings page end to end: every setting with its source, a value set in the
//! database layer and reset, and bad values refused with the API's message.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions fail loudly on purpose"
)]

mod common;

use common::{assert_no_credential, failed, Signed};
use reqwest::Method;
use serde_json::{json, Value};

const PAGE: &str = "/dashboard/settings";

/// One setting as `GET /api/settings` shows it.
async fn api_setting(s: &Signed, key: &str) -> Value {
    let all = s.h.admin_json("/api/settings").await;
    all.as_array()
        .unwrap()
        .iter()
        .find(|v| v["key"] == key)
        .unwrap()
        .clone()
}

const ROW: &str = "<tr><td>quota.saturationThreshold</td>";

#[tokio::test]
async fn settings_are_listed_set_and_reset() {
    let s = Signed::start().await;
    let (status, body) = s.page(PAGE).await;
    assert_eq!(status, 200);
    assert_no_credential(&body);
    assert!(body.contains(
        "<tr><td>requestQueue.maxWaitMs</td><td>30000</td><td>default</td><td>RATE_LIMIT_MAX_WAIT_MS</td><td>30000</td><td>a whole number (brought into 1..=86400000)</td><td>Longest a request waits for a concurrency slot (SEMAPHORE_TIMEOUT).</td>"
    ), "{body}");
    let row = format!(
        "{ROW}<td>0.5</td><td>default</td><td>QUOTA_SATURATION_THRESHOLD</td><td>0.5</td><td>a number between 0 and 1</td>"
    );
    assert!(body.contains(&row), "{body}");
    assert!(body.contains(
        r#"<input type="hidden" name="key" value="quota.saturationThreshold"><input type="hidden" name="back" value="/dashboard/settings"><label for="value-quota-saturationThreshold">New value</label> <input type="text" id="value-quota-saturationThreshold" name="value"> <button type="submit">Set</button></form></td></tr>"#
    ));

    let set = s
        .act(
            PAGE,
            &[("key", "quota.saturationThreshold"), ("value", "0.8")],
        )
        .await;
    assert_no_credential(&set);
    assert!(set.contains(
        r#"<p class="notice done" role="status" id="notice">Done: quota.saturationThreshold saved.</p>"#
    ));
    assert!(set.contains(&format!(
        "{ROW}<td>0.8</td><td>database</td><td>QUOTA_SATURATION_THRESHOLD</td><td>0.5</td>"
    )));
    assert!(
        set.contains(r#"<form method="post" action="/dashboard/settings/reset" class="inline">"#)
    );
    let api = api_setting(&s, "quota.saturationThreshold").await;
    assert_eq!(
        (api["value"].clone(), api["source"].clone()),
        (json!(0.8), json!("database"))
    );

    let forged =
        s.c.post(s.h.url("/dashboard/settings/reset"))
            .header("cookie", &s.cookie)
            .form(&[("key", "quota.saturationThreshold")])
            .send()
            .await
            .unwrap();
    assert_eq!(forged.status(), 403);
    assert_eq!(
        api_setting(&s, "quota.saturationThreshold").await["source"],
        "database"
    );

    let reset = s
        .act(
            "/dashboard/settings/reset",
            &[("key", "quota.saturationThreshold")],
        )
        .await;
    assert!(reset.contains(
        r#"<p class="notice done" role="status" id="notice">Done: quota.saturationThreshold reset: the database value is gone.</p>"#
    ));
    assert!(reset.contains(&row));
    let api = api_setting(&s, "quota.saturationThreshold").await;
    assert_eq!(
        (api["value"].clone(), api["source"].clone()),
        (json!(0.5), json!("default"))
    );

    // A form of another page goes back there; anywhere else is not followed.
    let r = s
        .post(
            PAGE,
            &[
                ("key", "requestQueue.maxQueueDepth"),
                ("value", "7"),
                ("back", "/dashboard/resilience"),
            ],
        )
        .await;
    assert_eq!(r.headers()["location"], "/dashboard/resilience");
    let r = s
        .post(
            PAGE,
            &[
                ("key", "requestQueue.maxQueueDepth"),
                ("value", "8"),
                ("back", "https://evil.example/"),
            ],
        )
        .await;
    assert_eq!(r.headers()["location"], PAGE);
    assert_eq!(
        api_setting(&s, "requestQueue.maxQueueDepth").await["value"],
        8
    );
}

#[tokio::test]
async fn bad_values_show_the_apis_message_and_change_nothing() {
    let s = Signed::start().await;
    let before = s.h.admin_json("/api/settings").await;
    for (key, value) in [
        ("quota.saturationThreshold", "2"),
        ("quotaStore.driver", "mongo"),
        ("no.such.setting", "1"),
    ] {
        let r =
            s.h.admin_send(
                Method::PUT,
                &format!("/api/settings/{key}"),
                json!({"value": value}),
            )
            .await;
        assert_eq!(r.status(), 400);
        let e: Value = r.json().await.unwrap();
        let message = e["error"]["message"].as_str().unwrap().to_owned();
        let after = s.act(PAGE, &[("key", key), ("value", value)]).await;
        assert!(after.contains(&failed(&message)), "{message}: {after}");
    }
    let forged =
        s.c.post(s.h.url(PAGE))
            .header("cookie", &s.cookie)
            .form(&[("key", "quota.saturationThreshold"), ("value", "0.9")])
            .send()
            .await
            .unwrap();
    assert_eq!(forged.status(), 403);
    assert_eq!(s.h.admin_json("/api/settings").await, before);
}
