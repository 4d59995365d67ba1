//! The binary as operators run it: separate `switchyard` processes (a mock provider and
//! gateways) over real sockets. Two gateway processes share quota counters through
//! Redis; a gateway stopped with SIGTERM flushes its counters and a restarted one
//! continues from them; `connections import-claude` imports a sign-in a running
//! gateway takes up, and no log line shows a token.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code fails loudly on purpose"
)]

mod common;

use common::start;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use switchyard_test_support::{
    Allocation, Config, Connection, Dimension, Key, Provider, QuotaPool, RedisQuotaStore, Server,
};
use tokio::process::Child;

const KEY: &str = "sy-process-test-key-000000001";
const ADMIN: &str = "process-test-admin-token-01";

fn config(dir: &Path, mock: &str) -> String {
    let path = dir.join("switchyard.toml");
    let config = Config::new()
        .server(
            Server::new()
                .listen("127.0.0.1:0")
                .data_dir(dir.join("data"))
                .admin_token(ADMIN),
        )
        .provider(Provider::openai("alpha", mock))
        .connection(Connection::apikey("alpha-1", "alpha").credential("cred-alpha"))
        .key(Key::new("k1", "k1", KEY))
        .quota_pool(
            QuotaPool::new("team", "Team", ["alpha-1"])
                .dimension(Dimension::new("requests", "daily", 4))
                .allocation(Allocation::new("k1").weight(100).policy("burst")),
        );
    std::fs::write(&path, config.to_toml()).unwrap();
    path.display().to_string()
}

async fn statuses(http: &reqwest::Client, base: &str, n: usize) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        let r = http
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth(KEY)
            .json(&json!({"model": "alpha/mock-small", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        out.push(r.status().as_u16());
    }
    out
}

/// Sends SIGTERM and waits for a clean exit.
async fn terminate(mut child: Child) {
    let pid = child.id().unwrap().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("no exit within 30 s after SIGTERM")
        .unwrap();
    assert!(exit.success(), "exit status {exit}");
}

#[tokio::test]
async fn two_gateway_processes_share_quota_through_redis() {
    let (_mock, mock) = start(&["mock", "--listen", "127.0.0.1:0"], &[]).await;
    let store = RedisQuotaStore::unique();
    let env = store.env();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, url_a) = start(&["serve", "--config", &config(dir_a.path(), &mock)], &env).await;
    let (b, url_b) = start(&["serve", "--config", &config(dir_b.path(), &mock)], &env).await;
    let http = reqwest::Client::new();
    let health: Value = http
        .get(format!("{url_a}/api/monitoring/health"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["quota_store"], "redis");
    assert_eq!(statuses(&http, &url_a, 3).await, [200, 200, 200]);
    assert_eq!(statuses(&http, &url_b, 3).await, [200, 429, 429]);
    terminate(a).await;
    terminate(b).await;
}

#[tokio::test]
async fn a_gateway_stopped_with_sigterm_keeps_its_quota_counts() {
    let (_mock, mock) = start(&["mock", "--listen", "127.0.0.1:0"], &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &mock);
    let http = reqwest::Client::new();
    let (gw, url) = start(&["serve", "--config", &cfg], &[]).await;
    assert_eq!(statuses(&http, &url, 3).await, [200, 200, 200]);
    terminate(gw).await;
    let (gw, url) = start(&["serve", "--config", &cfg], &[]).await;
    assert_eq!(statuses(&http, &url, 3).await, [200, 429, 429]);
    terminate(gw).await;
}

/// Runs `switchyard <args>` to its end: (success, stdout, stderr).
fn run(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"));
    cmd.args(args).env("SWITCHYARD_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn config_version(http: &reqwest::Client, base: &str) -> i64 {
    let health: Value = http
        .get(format!("{base}/api/monitoring/health"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    health["config_version"].as_i64().unwrap()
}

async fn seen(http: &reqwest::Client, mock: &str, credential: &str) -> u64 {
    let stats: Value = http
        .get(format!("{mock}/_mock/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    stats["by_credential"][credential].as_u64().unwrap_or(0)
}

#[tokio::test]
async fn secret_key_rotate_reencrypts_the_credentials_under_a_running_gateway() {
    let (_mock, mock) = start(&["mock", "--listen", "127.0.0.1:0"], &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &mock);
    let key_file = dir.path().join("data/secret-key");
    let db = dir.path().join("data/switchyard.db");
    let http = reqwest::Client::new();
    let (gw, url) = start(&["serve", "--config", &cfg], &[]).await;
    assert_eq!(statuses(&http, &url, 1).await, [200]);
    assert_eq!(seen(&http, &mock, "cred-alpha").await, 1);
    let key_before = std::fs::read_to_string(&key_file).unwrap();
    let sealed_before = stored_credential(&db);
    let version = config_version(&http, &url).await;

    let (ok, out, err) = run(&["secret-key", "rotate", "--config", &cfg], &[]);
    assert!(ok, "rotate failed: {err}");
    assert!(
        out.starts_with("Re-encrypted 1 credential(s) with a new secret key ("),
        "{out}"
    );
    assert_ne!(std::fs::read_to_string(&key_file).unwrap(), key_before);
    // Sealed under another key id: `enc:v1:<id>:`.
    assert_ne!(stored_credential(&db)[..16], sealed_before[..16]);
    let stored = stored_credential(&db);
    assert!(stored.starts_with("enc:v1:"), "{stored}");
    assert!(!stored.contains("cred-alpha"));

    // The running gateway follows: it reloads, and still reaches the upstream.
    let mut reloaded = false;
    for _ in 0..250 {
        if config_version(&http, &url).await > version {
            reloaded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(reloaded, "the gateway did not reload after the rotation");
    assert_eq!(statuses(&http, &url, 1).await, [200]);
    assert_eq!(seen(&http, &mock, "cred-alpha").await, 2);
    terminate(gw).await;

    // A restart reads the new key from the file.
    let (gw, url) = start(&["serve", "--config", &cfg], &[]).await;
    assert_eq!(statuses(&http, &url, 1).await, [200]);
    assert_eq!(seen(&http, &mock, "cred-alpha").await, 3);
    terminate(gw).await;

    // `generate` prints a key for SWITCHYARD_SECRET_KEY; with one set, `rotate` is
    // refused (the command cannot reach a gateway's environment).
    let (ok, out, _) = run(&["secret-key", "generate"], &[]);
    assert!(ok);
    let key = out.trim();
    assert_eq!(key.len(), 44, "{out}");
    let (ok, _, err) = run(
        &["secret-key", "rotate", "--config", &cfg],
        &[("SWITCHYARD_SECRET_KEY", key)],
    );
    assert!(!ok);
    assert!(err.contains("SWITCHYARD_SECRET_KEY is set"), "{err}");
}

/// The stored credential of `alpha-1`, read with SQLite directly.
fn stored_credential(db: &Path) -> String {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row(
            "SELECT credential FROM connections WHERE id = 'alpha-1'",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

/// Sets the mock authority's account `sub`.
async fn mock_account(http: &reqwest::Client, mock: &str, spec: Value) {
    let r = http
        .post(format!("{mock}/_mock/oauth"))
        .json(&spec)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
}

#[tokio::test]
async fn claude_codes_sign_in_is_imported_by_the_cli_and_no_log_line_shows_a_token() {
    let (_mock, mock) = start(&["mock", "--listen", "127.0.0.1:0"], &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switchyard.toml");
    let config = Config::new()
        .server(
            Server::new()
                .listen("127.0.0.1:0")
                .data_dir(dir.path().join("data"))
                .admin_token(ADMIN),
        )
        .provider(Provider::anthropic("plan", &mock).models(["claude-opus"]))
        .key(Key::new("k1", "k1", KEY));
    std::fs::write(&path, config.to_toml()).unwrap();
    let cfg = path.display().to_string();
    // Claude Code's file, where Claude Code keeps it under CLAUDE_CONFIG_DIR.
    let claude_dir = dir.path().join("claude");
    std::fs::create_dir(&claude_dir).unwrap();
    let file = json!({"claudeAiOauth": {"accessToken": "sub-at-0", "refreshToken": "sub-rt-0", "expiresAt": 1_000, "scopes": ["user:inference"], "subscriptionType": "max"}});
    std::fs::write(claude_dir.join(".credentials.json"), file.to_string()).unwrap();
    let claude_env = claude_dir.display().to_string();
    let token_url = format!("{mock}/v1/oauth/token");
    let import = [
        "connections",
        "import-claude",
        "--config",
        &cfg,
        "--connection",
        "sub",
        "--provider",
        "plan",
        "--token-url",
        &token_url,
    ];
    let http = reqwest::Client::new();
    mock_account(&http, &mock, json!({"account": "sub", "refresh_token": "sub-rt-0", "access_token": "sub-at-0", "expires_in": 600})).await;
    let (gw, url, logs) =
        common::start_logged(&["serve", "--config", &cfg], &[("SWITCHYARD_LOG", "debug")]).await;
    // Imported into the running gateway's database.
    let (ok, out, err) = run(&import, &[("CLAUDE_CONFIG_DIR", &claude_env)]);
    assert!(ok, "{err}");
    assert_eq!(
        out,
        format!(
            "Created OAuth connection sub from {}/.credentials.json (access token expired: the gateway refreshes it before use).\n",
            claude_env
        )
    );
    let (ok, _, err) = run(
        &[&import[..2], &["--config", &cfg, "/nope.json"]].concat(),
        &[],
    );
    assert!(!ok);
    assert!(err.contains("cannot read /nope.json"), "{err}");
    let ask = || {
        http.post(format!("{url}/v1/messages"))
            .header("x-api-key", KEY)
            .header("anthropic-version", "2023-06-01")
            .json(&json!({"model": "plan/claude-opus", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}))
            .send()
    };
    let mut status = 0;
    for _ in 0..100 {
        status = ask().await.unwrap().status().as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, 200);
    assert_eq!(seen(&http, &mock, "sub-at-1").await, 1);
    assert_eq!(seen(&http, &mock, "sub-at-0").await, 0);
    // A refused refresh is logged with the provider's error, never a token.
    mock_account(&http, &mock, json!({"account": "sub", "refresh_token": "sub-rt-1", "access_token": "sub-at-1", "expires_in": 600, "fail": {"status": 400, "error": "invalid_grant"}})).await;
    let r = http
        .post(format!("{url}/api/oauth/sub/refresh"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    // A new sign-in imported again while the gateway runs: it takes it within a second.
    let file = json!({"claudeAiOauth": {"accessToken": "sub-at-9", "refreshToken": "sub-rt-9", "expiresAt": 4_000_000_000_000u64, "scopes": []}});
    std::fs::write(claude_dir.join(".credentials.json"), file.to_string()).unwrap();
    let (ok, out, err) = run(&import, &[("CLAUDE_CONFIG_DIR", &claude_env)]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("Updated OAuth connection sub from "),
        "{out}"
    );
    let mut answered = false;
    for _ in 0..100 {
        if ask().await.unwrap().status() == 200 && seen(&http, &mock, "sub-at-9").await > 0 {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        answered,
        "the running gateway did not take the imported tokens"
    );
    terminate(gw).await;
    let logs = logs.lock().unwrap().join("\n");
    assert!(
        logs.contains("Refreshed the connection's OAuth token."),
        "{logs}"
    );
    assert!(
        logs.contains("HTTP 400: invalid_grant: refused by the mock"),
        "{logs}"
    );
    for token in [
        "sub-at-0", "sub-rt-0", "sub-at-1", "sub-rt-1", "sub-at-9", "sub-rt-9",
    ] {
        assert!(!logs.contains(token), "a log line shows {token}");
    }
}
