//! Several replicas (SPEC O6): `switchyard` gateway processes on one PostgreSQL database
//! (each test its own, dropped afterwards) and a mock provider, over real sockets. A
//! change made through one replica is in force on the others; sign-ins and the request
//! log are shared; a replica killed in the middle of a change leaves nothing half
//! applied; a database outage gives typed errors and is recovered from without a
//! restart.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code fails loudly on purpose"
)]

mod common;

use common::start;
use serde_json::{json, Value};
use std::time::Duration;
use switchyard_store::postgres::scratch::Database;
use switchyard_test_support::{eventually, Relay};
use tokio::process::Child;
use tokio::time::Instant;

const ADMIN: &str = "replica-test-admin-token-01";
/// How long a change may take to show on another replica before the test gives up.
/// The bound the product keeps is one second (measured, not asserted: see
/// `bench/replicas.sh`); this only keeps a broken build from hanging the suite.
const PATIENCE: Duration = Duration::from_secs(10);

/// A fresh database, on a thread: the synchronous client must not run on the test's
/// async thread.
async fn database() -> Database {
    tokio::task::spawn_blocking(Database::create)
        .await
        .unwrap()
        .unwrap()
}

/// The environment every replica shares: the database, the secret key and the admin
/// token (as an operator would set them on every machine).
fn shared_env(url: &str, secret_key: &str) -> Vec<(&'static str, String)> {
    vec![
        ("SWITCHYARD_DATABASE_URL", url.to_owned()),
        ("SWITCHYARD_SECRET_KEY", secret_key.to_owned()),
        ("SWITCHYARD_ADMIN_TOKEN", ADMIN.to_owned()),
        ("SWITCHYARD_LISTEN", "127.0.0.1:0".to_owned()),
    ]
}

/// The shared environment on the database at `url`, with a new secret key.
async fn environment(url: &str) -> Vec<(&'static str, String)> {
    let (ok, key, err) = run(&["secret-key", "generate"], &[]).await;
    assert!(ok, "{err}");
    shared_env(url, key.trim())
}

/// A mock provider and replicas (stopped when this drops).
struct Started {
    mock: String,
    urls: Vec<String>,
    _processes: Vec<Child>,
    _dirs: Vec<tempfile::TempDir>,
}

/// Starts a mock provider and `n` replicas on `env`.
async fn start_all(env: &[(&'static str, String)], n: usize) -> Started {
    let (mock_process, mock) = start(&["mock", "--listen", "127.0.0.1:0"], &[]).await;
    let mut started = Started {
        mock,
        urls: Vec::new(),
        _processes: vec![mock_process],
        _dirs: Vec::new(),
    };
    for _ in 0..n {
        let dir = tempfile::tempdir().unwrap();
        let (process, url) = replica(env, &dir).await;
        started.urls.push(url);
        started._processes.push(process);
        started._dirs.push(dir);
    }
    started
}

/// A replica: `switchyard serve` with `env` and a data directory of its own.
async fn replica(env: &[(&'static str, String)], dir: &tempfile::TempDir) -> (Child, String) {
    let mut all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let data = dir.path().display().to_string();
    all.push(("SWITCHYARD_DATA_DIR", &data));
    start(&["serve"], &all).await
}

/// Runs `switchyard <args>` to its end, within 60 s: (success, stdout, stderr).
async fn run(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"));
    cmd.args(args)
        .env("SWITCHYARD_LOG", "warn")
        .env("RUST_BACKTRACE", "0")
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("the command did not end within 60 s")
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn admin(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Value,
) -> (u16, Value) {
    let r = http
        .request(method, url)
        .bearer_auth(ADMIN)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// `GET url` with the admin token: status and body.
async fn get(http: &reqwest::Client, url: String) -> (u16, Value) {
    admin(http, reqwest::Method::GET, url, Value::Null).await
}

/// Provider `alpha` on the mock, its connection, and a key; the key's secret and id.
async fn seed(http: &reqwest::Client, base: &str, mock: &str) -> (String, String) {
    let post =
        |path: &str, body: Value| admin(http, reqwest::Method::POST, format!("{base}{path}"), body);
    let (s, _) = post(
        "/api/providers",
        json!({"id": "alpha", "format": "openai", "base_url": format!("{mock}/v1"), "models": ["mock-small"]}),
    )
    .await;
    assert_eq!(s, 201);
    let (s, _) = post(
        "/api/connections",
        json!({"id": "alpha-1", "provider": "alpha", "auth_class": "apikey", "credential": "cred-alpha"}),
    )
    .await;
    assert_eq!(s, 201);
    new_key(http, base, "k1").await
}

async fn new_key(http: &reqwest::Client, base: &str, name: &str) -> (String, String) {
    let (s, key) = admin(
        http,
        reqwest::Method::POST,
        format!("{base}/api/keys"),
        json!({"name": name}),
    )
    .await;
    assert_eq!(s, 201, "{key}");
    (
        key["secret"].as_str().unwrap().to_owned(),
        key["key"]["id"].as_str().unwrap().to_owned(),
    )
}

async fn chat(http: &reqwest::Client, base: &str, secret: &str) -> u16 {
    http.post(format!("{base}/v1/chat/completions"))
        .bearer_auth(secret)
        .json(
            &json!({"model": "alpha/mock-small", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// How long until `base` answers `secret`'s requests with `want` (polled); panics after
/// [`PATIENCE`].
async fn until_status(http: &reqwest::Client, base: &str, secret: &str, want: u16) -> Duration {
    let t0 = Instant::now();
    loop {
        if chat(http, base, secret).await == want {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < PATIENCE,
            "{base} did not answer {want} within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Signs in on `base` with the admin token; the session cookie.
async fn sign_in(http: &reqwest::Client, base: &str) -> String {
    let r = http
        .post(format!("{base}/dashboard/sign-in"))
        .form(&[("token", ADMIN)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    cookie.split(';').next().unwrap().to_owned()
}

async fn dashboard(http: &reqwest::Client, base: &str, cookie: &str) -> (u16, String) {
    let r = http
        .get(format!("{base}/dashboard"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The logged requests of key `id`, as `base` reads them.
async fn logged(http: &reqwest::Client, base: &str, id: &str) -> usize {
    let (s, rows) = get(http, format!("{base}/api/logs?key_id={id}&limit=500")).await;
    assert_eq!(s, 200);
    rows.as_array().unwrap().len()
}

async fn until_logged(http: &reqwest::Client, base: &str, id: &str, want: usize) {
    let t0 = Instant::now();
    loop {
        let seen = logged(http, base, id).await;
        if seen == want {
            return;
        }
        assert!(
            t0.elapsed() < PATIENCE,
            "{base} showed {seen} logged requests of {id}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `base` lists `want` live leases.
async fn until_leases(http: &reqwest::Client, base: &str, want: usize) {
    until_listed(http, base, "/api/leases", want).await;
}

/// Waits until `base`'s list at `path` has `want` entries.
async fn until_listed(http: &reqwest::Client, base: &str, path: &str, want: usize) {
    eventually(&format!("{base}{path} lists {want}"), || async {
        let (s, list) = get(http, format!("{base}{path}")).await;
        assert_eq!(s, 200);
        list.as_array().map(Vec::len) == Some(want)
    })
    .await;
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

#[tokio::test]
async fn three_replicas_share_keys_config_sign_ins_and_the_request_log() {
    let db = database().await;
    let env = environment(db.url()).await;
    let as_pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();

    // A replica refuses a schema it does not match, saying what to run.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().display().to_string();
    let mut refused_env = as_pairs.clone();
    refused_env.push(("SWITCHYARD_DATA_DIR", &data));
    let (ok, _, err) = run(&["serve"], &refused_env).await;
    assert!(!ok);
    assert!(
        err.contains("pending migrations (0001_schema, 0002_dashboard, 0003_oauth): run `switchyard migrate`"),
        "{err}"
    );
    let (ok, out, err) = run(&["migrate"], &as_pairs).await;
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "Applied migrations: 0001_schema, 0002_dashboard, 0003_oauth."
    );
    let (ok, out, _) = run(&["migrate"], &as_pairs).await;
    assert!(ok);
    assert_eq!(out.trim(), "The PostgreSQL schema is up to date.");

    let started = start_all(&env, 3).await;
    let (a, b, c) = (&started.urls[0], &started.urls[1], &started.urls[2]);
    let http = http();

    // Configuration written through A serves on B and C.
    let (secret, id) = seed(&http, a, &started.mock).await;
    let on_b = until_status(&http, b, &secret, 200).await;
    let on_c = until_status(&http, c, &secret, 200).await;
    eprintln!("a key created on A answered on B after {on_b:?}, on C after {on_c:?} more");

    // Revoked through B, refused by A and C.
    let (s, _) = admin(
        &http,
        reqwest::Method::POST,
        format!("{b}/api/keys/{id}/revoke"),
        json!({}),
    )
    .await;
    assert_eq!(s, 200);
    let on_a = until_status(&http, a, &secret, 401).await;
    let on_c = until_status(&http, c, &secret, 401).await;
    eprintln!("a key revoked on B was refused by A after {on_a:?}, by C after {on_c:?} more");

    // The request log is one: requests through A and B, read on C.
    let (secret, id) = new_key(&http, a, "k2").await;
    until_status(&http, b, &secret, 200).await;
    for base in [a, a, b] {
        assert_eq!(chat(&http, base, &secret).await, 200);
    }
    // One 200 more was sent by `until_status` on B.
    until_logged(&http, c, &id, 4).await;

    // A lease taken through A is known to B and C (their routing and fences read it),
    // and released through C, it is gone from A.
    let (s, leaser) = admin(
        &http,
        reqwest::Method::POST,
        format!("{a}/api/keys"),
        json!({"name": "leaser", "scopes": ["lease:exclusive"], "allowed_connections": ["alpha-1"]}),
    )
    .await;
    assert_eq!(s, 201, "{leaser}");
    let leaser = leaser["secret"].as_str().unwrap().to_owned();
    until_status(&http, c, &leaser, 200).await;
    let lease = |base: &str, body: Value| {
        http.post(format!("{base}/api/v1/session-leases"))
            .bearer_auth(&leaser)
            .json(&body)
            .send()
    };
    let owner = "vlo_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let r = lease(a, json!({"action": "acquire", "owner": owner}))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    for base in [b, c] {
        until_leases(&http, base, 1).await;
    }
    let r = lease(
        c,
        json!({"action": "release", "owner": owner, "generation": 1}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    until_leases(&http, a, 0).await;

    // A session pinned through A follows its pin through B.
    let r = http
        .post(format!("{a}/v1/chat/completions"))
        .bearer_auth(&secret)
        .header("x-switchyard-session", "s1")
        .json(
            &json!({"model": "alpha/mock-small", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    until_listed(&http, b, "/api/sessions", 1).await;

    // An `lkgp` combo that failed over to beta through A starts with beta through B.
    let mock = &started.mock;
    for (path, body) in [
        (
            "/api/providers",
            json!({"id": "beta", "format": "openai", "base_url": format!("{mock}/v1"), "models": ["mock-small"]}),
        ),
        (
            "/api/connections",
            json!({"id": "beta-1", "provider": "beta", "auth_class": "apikey", "credential": "cred-beta"}),
        ),
        (
            "/api/combos",
            json!({"name": "sticky", "strategy": "lkgp", "targets": [{"model": "alpha/mock-small"}, {"model": "beta/mock-small"}]}),
        ),
    ] {
        let (s, body) = admin(&http, reqwest::Method::POST, format!("{a}{path}"), body).await;
        assert_eq!(s, 201, "{path}: {body}");
    }
    eventually("B knows the combo", || async {
        let (s, _) = get(&http, format!("{b}/api/combos/sticky")).await;
        s == 200
    })
    .await;
    alpha_answers(&http, mock, 503, Some(1)).await;
    let sticky = |base: &str| {
        http.post(format!("{base}/v1/chat/completions"))
            .bearer_auth(&secret)
            .json(&json!({"model": "sticky", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
    };
    assert_eq!(sticky(a).await.unwrap().status(), 200);
    let mark = |connection: &str| json!([{"combo": "sticky", "connection": connection}]);
    let marks = |base: String| {
        let http = &http;
        async move {
            let (_, list) = get(http, format!("{base}/api/routing/last-good")).await;
            let mut list = list;
            for m in list.as_array_mut().into_iter().flatten() {
                m.as_object_mut().unwrap().remove("since");
            }
            list
        }
    };
    assert_eq!(marks(a.clone()).await, mark("beta-1"));
    let t0 = Instant::now();
    eventually("B takes in A's mark", || async {
        marks(b.clone()).await == mark("beta-1")
    })
    .await;
    eprintln!("A's lkgp mark reached B within {:?}", t0.elapsed());
    let (alpha_before, beta_before) = (
        calls_with(&http, mock, "cred-alpha").await,
        calls_with(&http, mock, "cred-beta").await,
    );
    assert_eq!(sticky(b).await.unwrap().status(), 200);
    assert_eq!(
        (
            calls_with(&http, mock, "cred-alpha").await,
            calls_with(&http, mock, "cred-beta").await
        ),
        (alpha_before, beta_before + 1)
    );

    // A dashboard session opened on A serves on C, and signing out on C ends it on A.
    let cookie = sign_in(&http, a).await;
    let (s, page) = dashboard(&http, c, &cookie).await;
    assert_eq!(s, 200);
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a CSRF field on the page")
        .to_owned();
    let out = http
        .post(format!("{c}/dashboard/sign-out"))
        .header("cookie", &cookie)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);
    let (s, _) = dashboard(&http, a, &cookie).await;
    assert_eq!(s, 303);
}

/// `n` aliases, `m-0000` … to `alpha/mock-small`, as one list.
fn aliases(n: usize) -> Value {
    json!({"aliases": (0..n)
        .map(|i| json!({"pattern": format!("m-{i:04}"), "target": "alpha/mock-small"}))
        .collect::<Vec<_>>()})
}

#[tokio::test]
async fn a_replica_killed_in_the_middle_of_a_change_leaves_nothing_half_applied() {
    // The most aliases a configuration holds: one change that writes 1 000 rows.
    const ALIASES: usize = 1000;
    let db = database().await;
    let (_, key, _) = run(&["secret-key", "generate"], &[]).await;
    let env = shared_env(db.url(), key.trim());
    let mut with_migrate = env.clone();
    with_migrate.push(("SWITCHYARD_MIGRATE", "1".to_owned()));
    let (_mock, mock) = start(&["mock", "--listen", "127.0.0.1:0"], &[]).await;
    let dirs = [(); 2].map(|()| tempfile::tempdir().unwrap());
    let (_a, a) = replica(&with_migrate, &dirs[0]).await;
    let http = http();
    seed(&http, &a, &mock).await;
    let body = aliases(ALIASES);
    let mut seen = Vec::new();
    // Kills from before the change reaches the database to after it committed.
    for delay_ms in [0u64, 10, 20, 40, 80, 160, 320, 640, 1280, 2560] {
        let (mut b, b_url) = replica(&env, &dirs[1]).await;
        let send = {
            let (http, body) = (http.clone(), body.clone());
            tokio::spawn(async move {
                http.put(format!("{b_url}/api/aliases"))
                    .bearer_auth(ADMIN)
                    .json(&body)
                    .send()
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        b.start_kill().unwrap();
        b.wait().await.unwrap();
        let _ = send.await;
        let (s, list) = get(&http, format!("{a}/api/aliases")).await;
        assert_eq!(s, 200);
        let n = list["aliases"].as_array().unwrap().len();
        assert!(
            n == 0 || n == ALIASES,
            "{n} of {ALIASES} aliases after a kill {delay_ms} ms in"
        );
        seen.push(n);
        if n == ALIASES {
            break;
        }
    }
    eprintln!("aliases seen after each kill: {seen:?}");
    assert_eq!(
        seen.last(),
        Some(&ALIASES),
        "the change never landed: {seen:?}"
    );
}

#[tokio::test]
async fn a_database_outage_gives_typed_errors_and_is_recovered_from_without_a_restart() {
    let db = database().await;
    let server: std::net::SocketAddr = {
        let url = switchyard_store::postgres::scratch::server_url();
        let host = url
            .split('@')
            .nth(1)
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_owned();
        tokio::net::lookup_host(host).await.unwrap().next().unwrap()
    };
    let relay = Relay::start(server).await;
    let through_relay = db
        .url()
        .replace(&server.to_string(), &relay.addr().to_string());
    assert_ne!(
        through_relay,
        db.url(),
        "the test server's URL names its host as an address"
    );
    let (_, key, _) = run(&["secret-key", "generate"], &[]).await;
    let mut env = shared_env(&through_relay, key.trim());
    env.push(("SWITCHYARD_MIGRATE", "1".to_owned()));
    let (_mock, mock) = start(&["mock", "--listen", "127.0.0.1:0"], &[]).await;
    let dirs = [(); 2].map(|()| tempfile::tempdir().unwrap());
    let (_a, a) = replica(&env, &dirs[0]).await;
    let (_b, b) = replica(&env, &dirs[1]).await;
    let http = http();
    let (secret, id) = seed(&http, &a, &mock).await;
    until_status(&http, &b, &secret, 200).await;
    let cookie = sign_in(&http, &a).await;

    relay.cut();
    let cut_at = Instant::now();
    // Requests keep being served from the configuration in memory.
    let mut sent = 1; // the one until_status sent
    while cut_at.elapsed() < Duration::from_secs(10) {
        for base in [&a, &b] {
            assert_eq!(chat(&http, base, &secret).await, 200);
            sent += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A change is refused with a typed error, quickly, and writes nothing.
    let t0 = Instant::now();
    let r = http
        .post(format!("{a}/api/keys"))
        .bearer_auth(ADMIN)
        .json(&json!({"name": "during"}))
        .send()
        .await
        .unwrap();
    let took = t0.elapsed();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "5");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "database_unavailable");
    assert!(took < PATIENCE, "the refusal took {took:?}");
    let (s, _) = dashboard(&http, &b, &cookie).await;
    assert_eq!(s, 503);

    relay.restore();
    // Recovered without a restart: changes land and spread, the sign-in holds, and the
    // requests made during the outage are in the log.
    let t0 = Instant::now();
    let (secret2, _) = loop {
        let r = http
            .post(format!("{b}/api/keys"))
            .bearer_auth(ADMIN)
            .json(&json!({"name": "after"}))
            .send()
            .await
            .unwrap();
        if r.status() == 201 {
            let key: Value = r.json().await.unwrap();
            break (
                key["secret"].as_str().unwrap().to_owned(),
                key["key"]["id"].as_str().unwrap().to_owned(),
            );
        }
        assert_eq!(r.status(), 503);
        assert!(t0.elapsed() < PATIENCE, "no recovery within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    until_status(&http, &a, &secret2, 200).await;
    assert_eq!(dashboard(&http, &a, &cookie).await.0, 200);
    until_logged(&http, &a, &id, sent).await;
    let (s, keys) = get(&http, format!("{a}/api/keys")).await;
    assert_eq!(s, 200);
    let names: Vec<&str> = keys
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["k1", "after"]);
}

/// `base`'s view of provider `alpha`'s breaker: its state, or "CLOSED" when it has seen
/// no failure.
async fn alpha_breaker(http: &reqwest::Client, base: &str) -> String {
    let (s, health) = get(http, format!("{base}/api/monitoring/health")).await;
    // 503 while a provider is down.
    assert!(s == 200 || s == 503, "{s}");
    health["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["provider"] == "alpha")
        .map_or_else(
            || "closed".to_owned(),
            |b| b["state"].as_str().unwrap().to_owned(),
        )
}

/// `base`'s view of connection `alpha-1`: `active`, `cooling` or a terminal state.
async fn alpha_1(http: &reqwest::Client, base: &str) -> String {
    let (s, list) = get(http, format!("{base}/api/resilience/cooldowns")).await;
    assert_eq!(s, 200);
    list.as_array()
        .unwrap()
        .iter()
        .find(|c| c["connectionId"] == "alpha-1")
        .map(|c| c["state"].as_str().unwrap().to_owned())
        .unwrap()
}

async fn upstream_calls(http: &reqwest::Client, mock: &str) -> u64 {
    calls_with(http, mock, "cred-alpha").await
}

/// How many completion requests reached the mock with `credential`.
async fn calls_with(http: &reqwest::Client, mock: &str, credential: &str) -> u64 {
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

/// A request to `base` the gateway refuses without calling the upstream: its status and
/// error code, or the reason that excluded alpha's one connection when it says.
async fn refused(http: &reqwest::Client, base: &str, secret: &str) -> (u16, String) {
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(secret)
        .json(
            &json!({"model": "alpha/mock-small", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap();
    let excluded = &body["error"]["diagnostics"]["excluded"][0]["reason"];
    let reason = excluded
        .as_str()
        .or(body["error"]["code"].as_str())
        .unwrap_or_default()
        .to_owned();
    (status, reason)
}

/// Each of `bases` refuses a request with `want` (see [`refused`]) without calling the
/// upstream.
async fn all_refuse(
    http: &reqwest::Client,
    mock: &str,
    bases: [&str; 2],
    secret: &str,
    want: &str,
) {
    let calls = upstream_calls(http, mock).await;
    for base in bases {
        assert_eq!(
            refused(http, base, secret).await,
            (503, want.to_owned()),
            "{base}"
        );
    }
    assert_eq!(upstream_calls(http, mock).await, calls);
}

/// Sets the mock's rule for alpha's credential: `times` answers of `status` (every
/// answer when `None`).
async fn alpha_answers(http: &reqwest::Client, mock: &str, status: u16, times: Option<u32>) {
    let mut rule = json!({"match": {"credential": "cred-alpha"}, "status": status});
    if let Some(n) = times {
        rule["times"] = json!(n);
    }
    let r = http
        .post(format!("{mock}/_mock/rules"))
        .json(&rule)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn breakers_cooldowns_and_locks_met_through_one_replica_hold_on_the_others() {
    let db = database().await;
    let redis = switchyard_test_support::RedisQuotaStore::unique();
    let mut env = environment(db.url()).await;
    env.push(("SWITCHYARD_MIGRATE", "1".to_owned()));
    for (k, v) in redis.env() {
        env.push((k, v.to_owned()));
    }
    let started = start_all(&env, 3).await;
    let (a, b, c, mock) = (
        &started.urls[0],
        &started.urls[1],
        &started.urls[2],
        &started.mock,
    );
    let http = http();
    let (secret, _) = seed(&http, a, mock).await;
    // A breaker lets its first probe through after 4 s.
    let (s, _) = admin(
        &http,
        reqwest::Method::PUT,
        format!("{a}/api/settings/breaker.apiKey.resetMs"),
        json!({"value": 4_000}),
    )
    .await;
    assert_eq!(s, 200);
    until_status(&http, c, &secret, 200).await;

    // The account answers A once with a 429: A cools it, and so do B and C (it is the
    // same account whichever replica met it); cleared through C, it serves on A again.
    alpha_answers(&http, mock, 429, Some(1)).await;
    assert_eq!(chat(&http, a, &secret).await, 429);
    let t0 = Instant::now();
    for base in [b, c] {
        eventually(&format!("{base} cools alpha-1"), || async {
            alpha_1(&http, base).await == "cooling"
        })
        .await;
    }
    eprintln!(
        "A's 429 cooled alpha-1 on B and C within {:?}",
        t0.elapsed()
    );
    let (s, _) = admin(
        &http,
        reqwest::Method::POST,
        format!("{c}/api/resilience/cooldowns"),
        json!({"all": true}),
    )
    .await;
    assert_eq!(s, 200);
    until_status(&http, a, &secret, 200).await;

    // The one account does not cool down: its provider's failures reach the breaker.
    let (s, _) = admin(
        &http,
        reqwest::Method::PUT,
        format!("{a}/api/connections/alpha-1"),
        json!({"id": "alpha-1", "provider": "alpha", "auth_class": "apikey", "disable_cooling": true}),
    )
    .await;
    assert_eq!(s, 200);
    until_status(&http, c, &secret, 200).await;

    // With model lockout on, a 404 through A locks the model on the account: B and C
    // refuse it without calling, and re-enabled through C it serves on A again.
    let (s, _) = admin(
        &http,
        reqwest::Method::PATCH,
        format!("{b}/api/resilience"),
        json!({"modelLockout": {"enabled": true}}),
    )
    .await;
    assert_eq!(s, 200);
    let t0 = Instant::now();
    eventually("A turns model lockout on", || async {
        let (_, view) = get(&http, format!("{a}/api/resilience")).await;
        view["modelLockout"]["enabled"] == true
    })
    .await;
    eprintln!(
        "B's settings change was in force on A within {:?}",
        t0.elapsed()
    );
    alpha_answers(&http, mock, 404, Some(1)).await;
    assert_eq!(chat(&http, a, &secret).await, 404);
    let calls = upstream_calls(&http, mock).await;
    let t0 = Instant::now();
    for base in [b, c] {
        eventually(&format!("{base} holds A's model lock"), || async {
            let (_, locks) = get(&http, format!("{base}/api/resilience/model-cooldowns")).await;
            locks.as_array().is_some_and(|l| l.len() == 1)
        })
        .await;
    }
    eprintln!("A's model lock held on B and C within {:?}", t0.elapsed());
    all_refuse(&http, mock, [b, c], &secret, "model_lockout").await;
    assert_eq!(upstream_calls(&http, mock).await, calls);
    let (s, cleared) = admin(
        &http,
        reqwest::Method::DELETE,
        format!("{c}/api/resilience/model-cooldowns"),
        json!({"provider": "alpha", "connection": "alpha-1", "model": "mock-small"}),
    )
    .await;
    assert_eq!((s, cleared), (200, json!({"cleared": 1})));
    until_status(&http, a, &secret, 200).await;
    until_status(&http, b, &secret, 200).await;
    // Lockout off again, so the failures below reach the breaker.
    let (s, _) = admin(
        &http,
        reqwest::Method::PATCH,
        format!("{a}/api/resilience"),
        json!({"modelLockout": {"enabled": false}}),
    )
    .await;
    assert_eq!(s, 200);

    // alpha fails; only A's traffic sees it, until A's breaker opens.
    alpha_answers(&http, mock, 503, None).await;
    let mut sent = 0;
    while alpha_breaker(&http, a).await != "OPEN" {
        // The upstream's 503, relayed as the gateway's 502.
        assert_eq!(chat(&http, a, &secret).await, 502);
        sent += 1;
        assert!(sent < 50, "A's breaker did not open after {sent} failures");
    }
    let t0 = Instant::now();
    for base in [b, c] {
        eventually(&format!("{base} opens alpha's breaker"), || async {
            alpha_breaker(&http, base).await == "OPEN"
        })
        .await;
    }
    eprintln!(
        "A opened alpha's breaker after {sent} failures; B and C had it open {:?} later",
        t0.elapsed()
    );
    // B and C exclude alpha without calling it.
    let calls = upstream_calls(&http, mock).await;
    for base in [b, c] {
        let r = http
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth(&secret)
            .json(&json!({"model": "alpha/mock-small", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "provider_circuit_open", "{body}");
    }
    assert_eq!(upstream_calls(&http, mock).await, calls);

    // alpha recovers. When A's breaker lets a probe through, the probe is A's alone: B
    // and C leave it to the replica that opened the breaker and keep refusing without
    // calling, until A's probe closes the breaker everywhere.
    let r = http
        .delete(format!("{mock}/_mock/rules"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    eventually("A's breaker half-opens", || async {
        alpha_breaker(&http, a).await == "HALF_OPEN"
    })
    .await;
    all_refuse(&http, mock, [b, c], &secret, "provider_circuit_open").await;
    assert_eq!(upstream_calls(&http, mock).await, calls);
    assert_eq!(chat(&http, a, &secret).await, 200);
    assert_eq!(upstream_calls(&http, mock).await, calls + 1);
    let t0 = Instant::now();
    for base in [b, c] {
        eventually(&format!("{base} closes alpha's breaker"), || async {
            alpha_breaker(&http, base).await == "CLOSED"
        })
        .await;
    }
    eprintln!(
        "A's probe closed alpha's breaker on B and C within {:?}",
        t0.elapsed()
    );
    until_status(&http, c, &secret, 200).await;

    // With the provider cooldown on (one provider-level failure cools alpha for a
    // minute), a 503 through A cools alpha on B and C; reset through B, it serves on A.
    let (s, _) = admin(
        &http,
        reqwest::Method::PATCH,
        format!("{a}/api/resilience"),
        json!({"providerCooldown": {"enabled": true, "apiKey": {"failureThreshold": 1, "cooldownMs": 60_000}}}),
    )
    .await;
    assert_eq!(s, 200);
    eventually("C turns the provider cooldown on", || async {
        let (_, view) = get(&http, format!("{c}/api/resilience")).await;
        view["providerCooldown"]["enabled"] == true
    })
    .await;
    alpha_answers(&http, mock, 503, Some(1)).await;
    assert_eq!(chat(&http, a, &secret).await, 502);
    let calls = upstream_calls(&http, mock).await;
    let t0 = Instant::now();
    for base in [b, c] {
        eventually(&format!("{base} holds A's provider cooldown"), || async {
            let (_, health) = get(&http, format!("{base}/api/monitoring/health")).await;
            health["breakers"][0]["cooling_ms"]
                .as_u64()
                .is_some_and(|ms| ms > 50_000)
        })
        .await;
    }
    eprintln!(
        "A's provider cooldown held on B and C within {:?}",
        t0.elapsed()
    );
    all_refuse(&http, mock, [b, c], &secret, "provider_cooldown").await;
    assert_eq!(upstream_calls(&http, mock).await, calls);
    let (s, _) = admin(
        &http,
        reqwest::Method::POST,
        format!("{b}/api/resilience/reset"),
        json!({"provider": "alpha"}),
    )
    .await;
    assert_eq!(s, 200);
    until_status(&http, a, &secret, 200).await;
    until_status(&http, c, &secret, 200).await;
}

#[tokio::test]
async fn with_redis_cut_each_replica_keeps_its_own_board_and_catches_up_after() {
    let db = database().await;
    let redis_server: std::net::SocketAddr = {
        let url = switchyard_test_support::redis_url();
        let host = url
            .trim_start_matches("redis://")
            .trim_end_matches('/')
            .to_owned();
        tokio::net::lookup_host(host).await.unwrap().next().unwrap()
    };
    let relay = Relay::start(redis_server).await;
    let redis = switchyard_test_support::RedisQuotaStore::at(&format!("redis://{}", relay.addr()));
    let mut env = environment(db.url()).await;
    env.push(("SWITCHYARD_MIGRATE", "1".to_owned()));
    for (k, v) in redis.env() {
        env.push((k, v.to_owned()));
    }
    let started = start_all(&env, 2).await;
    let (a, b, mock) = (&started.urls[0], &started.urls[1], &started.mock);
    let http = http();
    let (secret, _) = seed(&http, a, mock).await;
    until_status(&http, b, &secret, 200).await;

    // Redis is cut: A meets a 429 and cools the account; B cannot hear of it, and
    // both keep serving from their own boards.
    relay.cut();
    alpha_answers(&http, mock, 429, Some(1)).await;
    assert_eq!(chat(&http, a, &secret).await, 429);
    assert_eq!(alpha_1(&http, a).await, "cooling");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(alpha_1(&http, b).await, "active");

    // Redis is back: A's change, kept while it could not be published, reaches B.
    relay.restore();
    let t0 = Instant::now();
    eventually("B catches up with A's cooldown", || async {
        alpha_1(&http, b).await == "cooling"
    })
    .await;
    eprintln!("B caught up {:?} after Redis came back", t0.elapsed());
}

/// A chat for `model` through `base`: its status.
async fn chat_for(http: &reqwest::Client, base: &str, secret: &str, model: &str) -> u16 {
    http.post(format!("{base}/v1/chat/completions"))
        .bearer_auth(secret)
        .json(&json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn an_oauth_token_is_refreshed_once_whichever_replicas_need_it() {
    let db = database().await;
    let mut env = environment(db.url()).await;
    env.push(("SWITCHYARD_MIGRATE", "1".to_owned()));
    let s = start_all(&env, 2).await;
    let (a, b, mock) = (&s.urls[0], &s.urls[1], &s.mock);
    let http = http();
    let (secret, _) = seed(&http, a, mock).await;
    let (status, _) = admin(
        &http,
        reqwest::Method::POST,
        format!("{a}/api/providers"),
        json!({"id": "plan", "format": "openai", "base_url": format!("{mock}/v1"), "models": ["mock-small"]}),
    )
    .await;
    assert_eq!(status, 201);
    // The token endpoint takes its time, so every request meets the refresh in flight.
    let r = http
        .post(format!("{mock}/_mock/oauth"))
        .json(&json!({"account": "sub", "refresh_token": "sub-rt-0", "access_token": "sub-at-0", "expires_in": 600, "latency_ms": 500}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let file = json!({"claudeAiOauth": {"accessToken": "sub-at-0", "refreshToken": "sub-rt-0", "expiresAt": 1_000, "scopes": ["user:inference"]}});
    let (status, _) = admin(
        &http,
        reqwest::Method::POST,
        format!("{a}/api/oauth/import"),
        json!({"cli": "claude", "connection": "sub", "provider": "plan", "file": file.to_string(), "token_url": format!("{mock}/v1/oauth/token")}),
    )
    .await;
    assert_eq!(status, 201);
    // B serves with the connection once its snapshot is at A's configuration version
    // (the store lists it before that).
    let version = |base: String| {
        let http = http.clone();
        async move {
            get(&http, format!("{base}/api/monitoring/health")).await.1["config_version"]
                .as_i64()
                .unwrap()
        }
    };
    let imported = version(a.clone()).await;
    eventually("B has the imported connection", || async {
        version(b.clone()).await >= imported
    })
    .await;
    let asks: Vec<_> = [a, b, a, b, a, b]
        .into_iter()
        .map(|base| {
            let (http, base, secret) = (http.clone(), base.clone(), secret.clone());
            tokio::spawn(async move { chat_for(&http, &base, &secret, "plan/mock-small").await })
        })
        .collect();
    for ask in asks {
        assert_eq!(ask.await.unwrap(), 200);
    }
    let account: Value = http
        .get(format!("{mock}/_mock/oauth"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (&account[0]["refreshes"], &account[0]["reused"]),
        (&json!(1), &json!(0))
    );
    assert_eq!(calls_with(&http, mock, "sub-at-0").await, 0);
    assert_eq!(calls_with(&http, mock, "sub-at-1").await, 6);
    // Both replicas hold the new token.
    assert_eq!(chat_for(&http, b, &secret, "plan/mock-small").await, 200);
    assert_eq!(chat_for(&http, a, &secret, "plan/mock-small").await, 200);
    assert_eq!(calls_with(&http, mock, "sub-at-1").await, 8);
}
