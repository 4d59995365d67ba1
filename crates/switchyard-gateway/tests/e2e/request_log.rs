//! The request log stays bounded: rows past `requestLog.maxRows` or older than
//! `requestLog.retentionDays` are pruned off the request path, at start and every minute,
//! and `GET /api/logs/stats` says how big the log is.

use switchyard_gateway::clock::{Clock, SystemClock};
use switchyard_model::LogRow;
use switchyard_test_support::*;

fn row(ts: u64, i: u64) -> LogRow {
    LogRow {
        ts,
        request_id: format!("old-{i}"),
        key_id: Some("k1".into()),
        requested_model: "alpha/mock-small".into(),
        provider: Some("alpha".into()),
        connection_id: Some("alpha-1".into()),
        model: Some("mock-small".into()),
        status: 200,
        error_code: None,
        stream: false,
        client_format: "openai".into(),
        attempts: 1,
        latency_ms: 1,
        ttfb_ms: None,
        prompt_tokens: Some(1),
        completion_tokens: Some(1),
        egress_ip: None,
        failed_attempts: Vec::new(),
        route: None,
    }
}

#[tokio::test]
async fn a_log_filled_past_its_cap_is_pruned_to_it_and_old_rows_go() {
    let mut h = Harness::start_with(
        |mock| {
            Config::standard(mock)
                .setting("requestLog.maxRows", 1_000)
                .setting("requestLog.retentionDays", 7)
        },
        &[],
    )
    .await;
    h.stop().await;
    // 500 rows from 8 days ago, then 2 500 from now: 3 000, past the cap of 1 000.
    let now = SystemClock.now_ms();
    let old = now - 8 * 86_400_000;
    let rows: Vec<LogRow> = (0..3_000)
        .map(|i| row(if i < 500 { old + i } else { now + i }, i))
        .collect();
    let size = h
        .with_store(move |s| {
            s.insert_log_batch(&rows).unwrap();
            s.log_size().unwrap().rows
        })
        .await;
    assert_eq!(size, 3_000);

    h.restart().await;
    eventually("the log is pruned to its cap", || async {
        h.admin_json("/api/logs/stats").await["rows"] == 1_000
    })
    .await;
    let stats = h.admin_json("/api/logs/stats").await;
    assert_eq!(stats["retention_days"], 7);
    assert_eq!(stats["max_rows"], 1_000);
    assert_eq!(stats["oldest_ts"], now + 2_000);
    assert!(stats["database_bytes"].as_u64().unwrap() > 0);
    // The newest rows are the ones kept, and the gateway logs on.
    assert_eq!(
        h.chat(chat_body("alpha/mock-small", false)).await.status(),
        200
    );
    eventually("the new row is logged", || async {
        h.admin_json("/api/logs/stats").await["rows"] == 1_001
    })
    .await;
    let newest = h.with_store(|s| s.recent_logs(2, None).unwrap()).await;
    assert_eq!(newest[1].request_id, "old-2999");
}
