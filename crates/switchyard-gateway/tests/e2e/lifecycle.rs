//! Start-up, configuration changes from other processes, graceful shutdown, request log.

use secrecy::ExposeSecret;
use serde_json::{json, Value};
use std::sync::Arc;
use switchyard_gateway::bootstrap::{self, AdminToken};
use switchyard_gateway::clock::SystemClock;
use switchyard_gateway::keys::{new_key, NewKey};
use switchyard_model::{FailedAttempt, LogRow, RouteStep, RouteTrace, SaveMode};
use switchyard_test_support::*;

#[tokio::test]
async fn request_log_rows_are_written_without_bodies_or_credentials() {
    let mut h = Harness::start().await;
    h.rule(json!({"times": 1, "match": {"credential": CRED_ALPHA}, "status": 503}))
        .await;
    let mut streamed = chat_body("fast", true);
    streamed["stream_options"] = json!({"include_usage": true});
    assert!(h
        .chat(streamed)
        .await
        .text()
        .await
        .unwrap()
        .ends_with("data: [DONE]\n\n"));
    assert_eq!(
        h.chat(chat_body("alpha/mock-small", false)).await.status(),
        200
    );
    assert_eq!(
        h.chat(chat_body("alpha/unknown", false)).await.status(),
        404
    );
    h.stop().await;
    let rows = h.with_store(|s| s.recent_logs(10, None).unwrap()).await;
    let strip = |r: &LogRow| LogRow {
        ts: 0,
        request_id: String::new(),
        latency_ms: 0,
        ttfb_ms: r.ttfb_ms.map(|_| 0),
        ..r.clone()
    };
    let rows: Vec<LogRow> = rows.iter().map(strip).collect();
    let base = LogRow {
        ts: 0,
        request_id: String::new(),
        key_id: Some("k1".into()),
        requested_model: String::new(),
        provider: None,
        connection_id: None,
        model: None,
        status: 0,
        error_code: None,
        stream: false,
        client_format: "openai".into(),
        attempts: 0,
        latency_ms: 0,
        ttfb_ms: None,
        prompt_tokens: None,
        completion_tokens: None,
        egress_ip: None,
        failed_attempts: Vec::new(),
        route: None,
    };
    // The plan each routed row was tried in (SPEC R19's trace): priority, which read
    // nothing here (no quota pools).
    let step = |conn: &str| RouteStep {
        provider: conn.trim_end_matches("-1").into(),
        model: "mock-small".into(),
        connection_id: conn.into(),
        facts: serde_json::Map::new(),
    };
    let priority = |conns: &[&str]| {
        Some(RouteTrace {
            strategy: "priority".into(),
            order: conns.iter().map(|c| step(c)).collect(),
            ..RouteTrace::default()
        })
    };
    assert_eq!(
        rows,
        vec![
            LogRow {
                requested_model: "alpha/unknown".into(),
                status: 404,
                error_code: Some("model_not_found".into()),
                ..base.clone()
            },
            LogRow {
                requested_model: "alpha/mock-small".into(),
                provider: Some("alpha".into()),
                connection_id: Some("alpha-1".into()),
                model: Some("mock-small".into()),
                status: 200,
                attempts: 1,
                ttfb_ms: Some(0),
                prompt_tokens: Some(PROMPT_TOKENS),
                completion_tokens: Some(5),
                // The address the upstream connection went out from (SPEC R14).
                egress_ip: Some("127.0.0.1".into()),
                route: priority(&["alpha-1"]),
                ..base.clone()
            },
            LogRow {
                requested_model: "fast".into(),
                provider: Some("beta".into()),
                connection_id: Some("beta-1".into()),
                model: Some("mock-small".into()),
                status: 200,
                stream: true,
                attempts: 2,
                ttfb_ms: Some(0),
                prompt_tokens: Some(PROMPT_TOKENS),
                completion_tokens: Some(5),
                egress_ip: Some("127.0.0.1".into()),
                // The first attempt answered 503 and the combo failed over.
                failed_attempts: vec![FailedAttempt {
                    provider: "alpha".into(),
                    connection_id: "alpha-1".into(),
                    model: "mock-small".into(),
                    outcome: "server_error".into(),
                    cause: Some("server_error".into()),
                    upstream_status: Some(503),
                    egress_ip: Some("127.0.0.1".into()),
                    ..FailedAttempt::default()
                }],
                route: priority(&["alpha-1", "beta-1"]),
                ..base.clone()
            },
        ]
    );
    // No column holds a body; on SQLite, no byte of the file does either.
    if !h.is_postgres() {
        let db = std::fs::read(h.data_dir.join(bootstrap::DB_FILE)).unwrap();
        let text = String::from_utf8_lossy(&db);
        assert!(
            !text.contains("Hello there, mock!"),
            "a request body reached the database"
        );
    }
}

#[tokio::test]
async fn graceful_shutdown_lets_in_flight_streams_finish_and_flushes_the_log() {
    let mut h = Harness::start().await;
    h.rule(json!({"chunks": 10, "chunk_interval_ms": 100}))
        .await;
    let r = h.chat(chat_body("alpha/mock-small", true)).await;
    assert_eq!(r.status(), 200);
    let reader = tokio::spawn(async move { r.text().await.unwrap() });
    h.stop().await;
    let text = reader.await.unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert_eq!(text.matches("data: ").count(), 13);
    let rows = h.with_store(|s| s.recent_logs(10, None).unwrap()).await;
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].status, rows[0].stream), (200, true));
    // The listener is closed: new connections are refused.
    assert!(h
        .http
        .get(h.url("/api/monitoring/health"))
        .send()
        .await
        .is_err());
}

#[tokio::test]
async fn a_key_created_by_another_process_is_accepted_within_seconds() {
    let h = Harness::start().await;
    let (record, secret) = new_key(
        NewKey {
            name: "from-cli".into(),
            ..NewKey::default()
        },
        1,
    )
    .unwrap();
    let saved = record.clone();
    h.with_store(move |s| s.save_key(&saved, SaveMode::Create).unwrap())
        .await;
    let status = || {
        let request = h
            .http
            .post(h.url("/v1/chat/completions"))
            .bearer_auth(secret.expose_secret())
            .json(&chat_body("alpha/mock-small", false));
        async move { request.send().await.unwrap().status() }
    };
    eventually("the gateway reloads and accepts the new key", || async {
        status().await == 200
    })
    .await;
    let id = record.id.clone();
    h.with_store(move |s| s.revoke_key(&id, 2).unwrap()).await;
    eventually(
        "the gateway reloads and refuses the revoked key",
        || async { status().await == 401 },
    )
    .await;
}

#[tokio::test]
async fn zero_config_start_creates_the_database_and_an_admin_token_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("nested/data");
    let cfg = Config::new().resolve(&data, &[]);
    let prepared = bootstrap::prepare(&cfg, Arc::new(SystemClock))
        .await
        .unwrap();
    let token_file = data.join(bootstrap::ADMIN_TOKEN_FILE);
    assert_eq!(prepared.admin, AdminToken::File(token_file.clone()));
    assert!(data.join(bootstrap::DB_FILE).exists());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(switchyard_gateway::run(
        listener,
        prepared.state,
        prepared.writer,
        async move {
            let _ = rx.await;
        },
    ));
    let http = reqwest::Client::new();
    let r = http
        .get(format!("{base}/api/keys"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!([]));

    // `switchyard admin-token rotate` from another process: the running gateway switches.
    let store = bootstrap::open_store(&cfg).unwrap();
    bootstrap::rotate_admin_token(&store, &data).unwrap();
    let rotated = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_owned();
    assert_ne!(rotated, token);
    let status_with = |t: String| {
        let http = http.clone();
        let url = format!("{base}/api/keys");
        async move { http.get(url).bearer_auth(t).send().await.unwrap().status() }
    };
    eventually("the rotated admin token replaces the old one", || async {
        status_with(rotated.clone()).await == 200 && status_with(token.clone()).await == 401
    })
    .await;
    tx.send(()).unwrap();
    task.await.unwrap().unwrap();

    // A second start reuses the same token and database (migrations are idempotent).
    let again = bootstrap::prepare(&cfg, Arc::new(SystemClock))
        .await
        .unwrap();
    assert_eq!(again.admin, AdminToken::File(token_file.clone()));
    assert_eq!(
        std::fs::read_to_string(&token_file).unwrap().trim(),
        rotated
    );
    again.writer.finish(std::time::Duration::from_secs(1)).await;
}

#[tokio::test]
async fn an_invalid_declared_configuration_fails_start_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::new()
        .provider(Provider::openai("p", "http://127.0.0.1:1"))
        .combo(Combo::priority("c", ["q/m"]))
        .resolve(dir.path(), &[]);
    let err = bootstrap::prepare(&cfg, Arc::new(SystemClock))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "config: combo `c` target `q/m` names unknown provider `q`"
    );
    let store = bootstrap::open_store(&cfg).unwrap();
    assert!(store.list_providers().unwrap().is_empty());
}

#[tokio::test]
async fn shutdown_cuts_requests_still_running_after_the_grace_period() {
    let mut h =
        Harness::start_with(Config::standard, &[("SWITCHYARD_SHUTDOWN_GRACE_MS", "300")]).await;
    h.rule(json!({"stall_after_chunks": 1})).await;
    let r = h.chat(chat_body("alpha/mock-small", true)).await;
    assert_eq!(r.status(), 200);
    let reader = tokio::spawn(async move { r.text().await });
    h.stop().await;
    // The client sees its stream end (cut), not a hang.
    let _ = reader.await.unwrap();
    let rows = h.with_store(|s| s.recent_logs(10, None).unwrap()).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].status, rows[0].error_code.as_deref()),
        (499, Some("gateway_shutdown"))
    );
    eventually("the upstream request is cancelled too", || async {
        h.mock_stats().await["in_flight"] == 0
    })
    .await;
}

#[tokio::test]
async fn two_declared_keys_with_one_secret_fail_start_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::new()
        .provider(Provider::openai("p", "http://127.0.0.1:1"))
        .key(Key::new("a", "a", "sy-the-same-secret-for-both-keys"))
        .key(Key::new("b", "b", "sy-the-same-secret-for-both-keys"))
        .resolve(dir.path(), &[]);
    let err = bootstrap::prepare(&cfg, Arc::new(SystemClock))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "config: keys `a` and `b` have the same secret; every key needs its own"
    );
    let store = bootstrap::open_store(&cfg).unwrap();
    assert!(store.list_providers().unwrap().is_empty());
    assert!(store.list_keys().unwrap().is_empty());
}
