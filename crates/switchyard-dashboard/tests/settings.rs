//! The settings page end to end: every setting with its source, a value set in the
//! database layer and reset, and bad values refused with the API's message.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions fail loudly on purpose"
)]

mod common;

use common::{assert_no_credential, done, failed, form_fields, notice, row, row_head, Signed};
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

const TABLE: &str = "Runtime settings";
const KEY: &str = "quota.saturationThreshold";

/// The set form (or the reset form) of `key`, as posted.
fn form_of(body: &str, action: &str, key: &str) -> Vec<(String, String)> {
    let rows = common::table_rows(body, TABLE);
    let at = rows.iter().position(|r| r[0] == key).unwrap();
    form_fields(
        body,
        &format!("tbody tr:nth-child({}) form[action='{action}']", at + 1),
    )
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test]
async fn settings_are_listed_set_and_reset() {
    let s = Signed::start().await;
    let (status, body) = s.page(PAGE).await;
    assert_eq!(status, 200);
    assert_no_credential(&body);
    assert_eq!(
        row_head(&body, TABLE, "requestQueue.maxWaitMs", 8).unwrap(),
        [
            "requestQueue.maxWaitMs",
            "30000",
            "default",
            "live",
            "RATE_LIMIT_MAX_WAIT_MS",
            "30000",
            "a whole number (brought into 1..=86400000)",
            "Longest a request waits for a concurrency slot (SEMAPHORE_TIMEOUT)."
        ]
    );
    // When a change applies, as the registry says: at once, for new connections, or
    // after a restart.
    for (key, applies) in [
        ("server.header_read_timeout_ms", "new_connections"),
        ("server.io_threads", "restart"),
        ("quotaStore.driver", "restart"),
    ] {
        assert_eq!(row(&body, TABLE, key).unwrap()[3], applies, "{key}");
    }
    let defaults = row_head(&body, TABLE, KEY, 7).unwrap();
    assert_eq!(
        defaults,
        [
            KEY,
            "0.5",
            "default",
            "live",
            "QUOTA_SATURATION_THRESHOLD",
            "0.5",
            "a number between 0 and 1"
        ]
    );
    assert_eq!(
        form_of(&body, PAGE, KEY)[1..],
        pairs(&[("key", KEY), ("back", PAGE), ("value", "")])
    );
    assert_eq!(row(&body, TABLE, KEY).unwrap()[8], "New value Set");
    assert_eq!(form_of(&body, "/dashboard/settings/reset", KEY), []);

    let set = s
        .act(
            PAGE,
            &[("key", "quota.saturationThreshold"), ("value", "0.8")],
        )
        .await;
    assert_no_credential(&set);
    assert_eq!(notice(&set), done("quota.saturationThreshold saved."));
    assert_eq!(
        row_head(&set, TABLE, KEY, 6).unwrap(),
        [
            KEY,
            "0.8",
            "database",
            "live",
            "QUOTA_SATURATION_THRESHOLD",
            "0.5"
        ]
    );
    assert_eq!(
        form_of(&set, "/dashboard/settings/reset", KEY)[1..],
        pairs(&[("key", KEY), ("back", PAGE)])
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
    assert_eq!(
        notice(&reset),
        done("quota.saturationThreshold reset: the database value is gone.")
    );
    assert_eq!(row_head(&reset, TABLE, KEY, 7).unwrap(), defaults);
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
        assert_eq!(notice(&after), failed(&message));
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
