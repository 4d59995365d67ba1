//! The sessions page end to end: a client session pinned by its requests shows with its
//! key and connection (by its pin key's first characters, never its id), and releasing
//! it routes the session afresh.

mod common;

use common::{assert_none_of, done, failed, leased, notice, table_rows, Signed};
use switchyard_test_support::{chat_body, KEY};

const PAGE: &str = "/dashboard/sessions";
const TABLE: &str = "Pinned sessions, most recently used first";

#[tokio::test]
async fn a_pinned_session_shows_and_is_released() {
    let s = Signed::start().await;
    let (status, body) = s.page(PAGE).await;
    assert_eq!(status, 200);
    assert_eq!(table_rows(&body, TABLE), [["No pinned sessions."]]);
    let r =
        s.h.http
            .post(s.h.url("/v1/chat/completions"))
            .bearer_auth(KEY)
            .header("x-switchyard-session", "agent-7f3a")
            .json(&chat_body("alpha/mock-small", false))
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), 200);
    let pin = s.h.admin_json("/api/sessions").await[0]["session"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, body) = s.page(PAGE).await;
    let rows = table_rows(&body, TABLE);
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0][..6],
        [&pin[..12], "k1", "alpha-1", "1 s", "1 s ago", "1 h"]
    );
    assert_none_of(&body, &["agent-7f3a"]);
    let released = s
        .act(&format!("/dashboard/sessions/{pin}/release"), &[])
        .await;
    assert_eq!(
        notice(&released),
        done(&format!("Session {} released.", &pin[..12]))
    );
    assert_eq!(table_rows(&released, TABLE), [["No pinned sessions."]]);
    let again = s
        .act(&format!("/dashboard/sessions/{pin}/release"), &[])
        .await;
    assert_eq!(
        notice(&again),
        failed(&format!("session `{pin}` not found"))
    );
}

#[tokio::test]
async fn an_active_lease_shows_and_is_released() {
    const LEASES: &str = "Active exclusive leases, most recently acquired first";
    let s = Signed::start().await;
    let (_, body) = s.page(PAGE).await;
    assert_eq!(table_rows(&body, LEASES), [["No active leases."]]);
    let owner = leased(&s.h, "alpha-1").await;
    let key_id = s.h.admin_json("/api/leases").await[0]["key_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, body) = s.page(PAGE).await;
    let rows = table_rows(&body, LEASES);
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0][..6],
        [
            &owner[..12],
            key_id.as_str(),
            "alpha-1",
            "1",
            "1 s",
            "2 min"
        ]
    );
    // A plain request of another key is kept off the leased connection.
    assert_eq!(
        s.h.chat(chat_body("alpha/mock-small", false))
            .await
            .status(),
        429
    );
    let released = s
        .act(&format!("/dashboard/sessions/leases/{owner}/release"), &[])
        .await;
    assert_eq!(
        notice(&released),
        done(&format!("Lease {} released.", &owner[..12]))
    );
    assert_eq!(table_rows(&released, LEASES), [["No active leases."]]);
    assert_eq!(
        s.h.chat(chat_body("alpha/mock-small", false))
            .await
            .status(),
        200
    );
    let again = s
        .act(&format!("/dashboard/sessions/leases/{owner}/release"), &[])
        .await;
    assert_eq!(
        notice(&again),
        failed(&format!("lease `{owner}` not found"))
    );
}
