//! The harness: starts a mock provider and a gateway wired to it, and sends requests.

use crate::{init_tracing, Config};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use switchyard_gateway::clock::{Clock, SystemClock};
use switchyard_gateway::config::{self, FileConfig, GatewayConfig};
use switchyard_gateway::state::AppState;
use switchyard_gateway::{bootstrap, Placement};
use switchyard_mock::MockServer;
use switchyard_store::postgres::scratch::Database;
use switchyard_store::Store;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The standard configuration's client key (`k1`).
pub const KEY: &str = "sy-test-client-key-0000000001";
/// The standard configuration's admin-scoped key (`ops`).
pub const OPS_KEY: &str = "sy-test-ops-key-000000000001";
/// The admin token every harness gateway starts with.
pub const ADMIN: &str = "test-admin-token-0123456789";
/// The credential of the standard configuration's connection `alpha-1`.
pub const CRED_ALPHA: &str = "cred-alpha-1-secret-value";
/// The credential of the standard configuration's connection `beta-1`.
pub const CRED_BETA: &str = "cred-beta-1-secret-value";
/// The credential of the Anthropic configuration's connection `claude-1`.
pub const CRED_CLAUDE: &str = "cred-claude-1-secret-value";
/// The credential of the Responses configuration's connection `codex-1`.
pub const CRED_CODEX: &str = "cred-codex-1-secret-value";
/// The `anthropic-version` the tests' Anthropic requests send.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A mock provider and a gateway wired to it, with its data directory. The gateway is
/// stopped gracefully by [`Harness::stop`]; dropping the harness tells it to stop without
/// waiting.
#[derive(Debug)]
pub struct Harness {
    /// The mock provider the configuration's providers point at.
    pub mock: MockServer,
    /// The gateway's base URL, `http://127.0.0.1:<port>`.
    pub base: String,
    /// A client for the tests' requests.
    pub http: reqwest::Client,
    /// The gateway's data directory (database, key files).
    pub data_dir: PathBuf,
    config_text: String,
    vars: BTreeMap<String, String>,
    clock: Arc<dyn Clock>,
    placement: Placement,
    mount: Option<Mount>,
    _dir: tempfile::TempDir,
    /// The harness's own PostgreSQL database, when the suite runs on PostgreSQL
    /// (`SWITCHYARD_TEST_DATABASE=postgres`); dropped with the harness.
    postgres: Option<Database>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

/// Builds extra routes (the dashboard's) over the gateway's state, merged into its
/// application router at every (re)start.
pub type Mount = fn(Arc<AppState>) -> axum::Router;

impl Harness {
    /// Starts with the standard configuration and the routes `mount` builds.
    pub async fn start_mounted(mount: Mount) -> Self {
        let clock = Arc::new(SystemClock);
        Self::boot(
            Config::standard,
            &[],
            clock,
            Placement::Threads,
            Some(mount),
        )
        .await
    }

    /// Starts with the standard configuration.
    pub async fn start() -> Self {
        Self::start_with(Config::standard, &[]).await
    }

    /// Starts with a configuration built from the mock's URL and extra environment
    /// variables.
    pub async fn start_with(config_for: impl FnOnce(&str) -> Config, env: &[(&str, &str)]) -> Self {
        Self::start_with_clock(config_for, env, Arc::new(SystemClock)).await
    }

    /// Starts with a clock of the test's choosing (a `ManualClock` makes the gateway's
    /// decisions see time pass without waiting for it).
    pub async fn start_with_clock(
        config_for: impl FnOnce(&str) -> Config,
        env: &[(&str, &str)],
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self::boot(config_for, env, clock, Placement::Threads, None).await
    }

    /// Starts with the gateway serving on the test's own runtime (one thread), for tests
    /// under `#[tokio::test(start_paused = true)]`: every wait, timeout and stream
    /// deadline of the gateway then runs on tokio's paused clock, which moves only when
    /// nothing is left to do, and the test measures exact times.
    pub async fn start_paused(
        config_for: impl FnOnce(&str) -> Config,
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_paused_with_clock(config_for, env, Arc::new(SystemClock)).await
    }

    /// [`Harness::start_paused`] with a wall clock of the test's choosing: tokio's paused
    /// time runs the gateway's deadlines and a `ManualClock` its breakers and cooldowns.
    pub async fn start_paused_with_clock(
        config_for: impl FnOnce(&str) -> Config,
        env: &[(&str, &str)],
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self::boot(config_for, env, clock, Placement::Caller, None).await
    }

    async fn boot(
        config_for: impl FnOnce(&str) -> Config,
        env: &[(&str, &str)],
        clock: Arc<dyn Clock>,
        placement: Placement,
        mount: Option<Mount>,
    ) -> Self {
        init_tracing();
        let mock = MockServer::start_local().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut vars: BTreeMap<String, String> = BTreeMap::from([
            (
                "SWITCHYARD_DATA_DIR".into(),
                dir.path().display().to_string(),
            ),
            ("SWITCHYARD_ADMIN_TOKEN".into(), ADMIN.into()),
        ]);
        for (k, v) in env {
            vars.insert((*k).into(), (*v).into());
        }
        let postgres = if on_postgres() {
            let db = tokio::task::spawn_blocking(Database::migrated)
                .await
                .unwrap()
                .expect("a PostgreSQL database for the test (is the test server up?)");
            vars.insert("SWITCHYARD_DATABASE_URL".into(), db.url().to_owned());
            Some(db)
        } else {
            None
        };
        let config_text = config_for(&mock.base_url()).to_toml();
        let mut h = Self {
            mock,
            base: String::new(),
            http: reqwest::Client::new(),
            data_dir: dir.path().to_owned(),
            config_text,
            vars,
            clock,
            placement,
            mount,
            _dir: dir,
            postgres,
            shutdown: None,
            task: None,
        };
        h.launch().await;
        h
    }

    /// The gateway's configuration as it is resolved at the next (re)start.
    pub fn config(&self) -> GatewayConfig {
        let file = FileConfig::parse(&self.config_text).unwrap();
        config::resolve(file, &self.vars).unwrap()
    }

    /// Sets (`Some`) or removes (`None`) an environment variable for the next restart.
    pub fn set_var(&mut self, key: &str, value: Option<&str>) {
        match value {
            Some(v) => self.vars.insert(key.into(), v.into()),
            None => self.vars.remove(key),
        };
    }

    async fn launch(&mut self) {
        self.try_launch().await.unwrap();
    }

    /// Starts the gateway; a start-up failure is returned, leaving it stopped.
    pub async fn try_launch(&mut self) -> Result<(), bootstrap::BootError> {
        let cfg = self.config();
        let prepared = bootstrap::prepare(&cfg, Arc::clone(&self.clock)).await?;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        self.base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = oneshot::channel::<()>();
        let extra = self
            .mount
            .map_or_else(axum::Router::new, |m| m(Arc::clone(&prepared.state)));
        self.task = Some(tokio::spawn(switchyard_gateway::serve_with(
            listener,
            prepared.state,
            prepared.writer,
            async move {
                let _ = rx.await;
            },
            self.placement,
            extra,
        )));
        self.shutdown = Some(tx);
        Ok(())
    }

    /// Stops the gateway gracefully and starts it again on the same data directory.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.launch().await;
    }

    /// The gateway's URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends a chat request with the standard client key.
    pub async fn chat(&self, body: Value) -> reqwest::Response {
        self.chat_as(KEY, body).await
    }

    /// Sends a chat request with the given client key.
    pub async fn chat_as(&self, key: &str, body: Value) -> reqwest::Response {
        self.chat_request(key, &body).send().await.unwrap()
    }

    /// Sends a chat request with the standard client key over HTTP/2 (prior knowledge,
    /// on a client of its own).
    pub async fn chat_http2(&self, body: Value) -> reqwest::Response {
        let h2 = reqwest::Client::builder()
            .http2_prior_knowledge()
            .build()
            .unwrap();
        h2.post(self.url("/v1/chat/completions"))
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// Sends a chat request as `key` in a task of its own; the task answers the response.
    pub fn spawn_chat(&self, key: &str, body: Value) -> JoinHandle<reqwest::Response> {
        let request = self.chat_request(key, &body);
        tokio::spawn(async move { request.send().await.unwrap() })
    }

    /// A chat request as `key`, not sent yet.
    fn chat_request(&self, key: &str, body: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(self.url("/v1/chat/completions"))
            .bearer_auth(key)
            .json(body)
    }

    /// Sends an Anthropic Messages request the way Claude Code does (`?beta=true`,
    /// `x-api-key`, `anthropic-version`) with the standard client key.
    pub async fn messages(&self, body: Value) -> reqwest::Response {
        self.http
            .post(self.url("/v1/messages?beta=true"))
            .header("x-api-key", KEY)
            .header("anthropic-version", ANTHROPIC_VERSION)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// Sends a Responses request with the standard client key, with the headers Codex
    /// CLI adds (none of which may reach an upstream).
    pub async fn responses(&self, body: Value) -> reqwest::Response {
        self.http
            .post(self.url("/v1/responses"))
            .bearer_auth(KEY)
            .header("originator", "codex_exec")
            .header("session-id", "sess-1")
            .header("x-codex-turn-metadata", "{}")
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// `GET` an admin path with the admin token.
    pub async fn admin_get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(self.url(path))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap()
    }

    /// `GET` an admin path and parse its JSON body.
    pub async fn admin_json(&self, path: &str) -> Value {
        self.admin_get(path).await.json().await.unwrap()
    }

    /// `GET path` with the admin token, answered as a JSON array: its elements.
    pub async fn admin_list(&self, path: &str) -> Vec<Value> {
        match self.admin_json(path).await {
            Value::Array(items) => items,
            other => panic!("GET {path} answered {other}, not an array"),
        }
    }

    /// The newest request-log row (`GET /api/logs`), once `rows` rows are logged.
    pub async fn newest_log_row(&self, rows: usize) -> Value {
        let path = format!("/api/logs?limit={rows}");
        eventually("the request is logged", || async {
            let logs: Value = self.admin_json(&path).await;
            logs.as_array().is_some_and(|l| l.len() == rows)
        })
        .await;
        self.admin_json(&path).await[0].clone()
    }

    /// Sends `n` identical chat requests at once as `key`; returns their statuses.
    pub async fn concurrent_statuses(&self, n: usize, key: &str, model: &str) -> Vec<u16> {
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let request = self.chat_request(key, &chat_body(model, false));
                tokio::spawn(async move { request.send().await.unwrap().status().as_u16() })
            })
            .collect();
        let mut out = Vec::with_capacity(n);
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    }

    /// Sends `body` to an admin path with `method` and the admin token.
    pub async fn admin_send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> reqwest::Response {
        self.http
            .request(method, self.url(path))
            .bearer_auth(ADMIN)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// Deletes `path` as the operator twice: the first answer must be 204, the second
    /// 404 (a deletion that happened, and happened once).
    pub async fn admin_delete_once(&self, path: &str) {
        for expected in [204, 404] {
            let r = self
                .admin_send(
                    reqwest::Method::DELETE,
                    path,
                    Value::Object(Default::default()),
                )
                .await;
            assert_eq!(r.status(), expected, "DELETE {path}");
        }
    }

    /// Adds a mock rule through the mock's HTTP control API.
    pub async fn rule(&self, rule: Value) {
        let r = self
            .http
            .post(format!("{}/_mock/rules", self.mock.base_url()))
            .json(&rule)
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            200,
            "mock rule rejected: {}",
            r.text().await.unwrap()
        );
    }

    /// Has the mock close every connection it serves once idle (the gateway's kept
    /// upstream connections among them), and waits until they are closed.
    pub async fn mock_close_connections(&self) {
        let r = self
            .http
            .post(format!("{}/_mock/close_connections", self.mock.base_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204, "the mock's connections did not close");
    }

    /// `GET /api/monitoring/health` as JSON, in detail (with the admin token).
    pub async fn health(&self) -> Value {
        self.admin_json("/api/monitoring/health").await
    }

    /// `GET /metrics` as text.
    pub async fn metrics(&self) -> String {
        let r = self.http.get(self.url("/metrics")).send().await;
        r.unwrap().text().await.unwrap()
    }

    /// The value of one metric series (`name{labels}` as exposed), if it is exposed.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        sample(&self.metrics().await, series)
    }

    /// The mock's counters (`GET /_mock/stats`).
    pub async fn mock_stats(&self) -> Value {
        self.mock_json("/_mock/stats").await
    }

    /// `GET path` of the mock's control API, as JSON.
    async fn mock_json(&self, path: &str) -> Value {
        self.http
            .get(format!("{}{path}", self.mock.base_url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Sets (or replaces) an account of the mock's OAuth authority (`POST /_mock/oauth`:
    /// `account`, `refresh_token`, `access_token`, `expires_in`, optional `latency_ms`
    /// and `fail`).
    pub async fn mock_oauth(&self, account: Value) {
        let r = self
            .http
            .post(format!("{}/_mock/oauth", self.mock.base_url()))
            .json(&account)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204, "mock account refused: {account}");
    }

    /// The mock's OAuth accounts (`GET /_mock/oauth`): tokens, refreshes answered and
    /// dead refresh tokens presented again (`reused`).
    pub async fn mock_oauth_accounts(&self) -> Vec<Value> {
        let v = self.mock_json("/_mock/oauth").await;
        v.as_array().cloned().unwrap_or_default()
    }

    /// The mock's journal of provider requests (`GET /_mock/requests`), oldest first.
    pub async fn mock_requests(&self) -> Vec<Value> {
        let v = self.mock_json("/_mock/requests").await;
        v["requests"].as_array().cloned().unwrap_or_default()
    }

    /// Puts `wall` up at the mock (`POST /_mock/wall`, SPEC R17).
    pub async fn mock_wall(&self, wall: Value) {
        let r = self
            .http
            .post(format!("{}/_mock/wall", self.mock.base_url()))
            .json(&wall)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204, "{}", r.text().await.unwrap());
    }

    /// How many requests the mock received with `credential`.
    pub async fn by_credential(&self, credential: &str) -> u64 {
        self.mock_stats().await["by_credential"][credential]
            .as_u64()
            .unwrap_or(0)
    }

    /// Clears the mock's rules and counters (`POST /_mock/reset`).
    pub async fn reset_mock(&self) {
        let url = format!("{}/_mock/reset", self.mock.base_url());
        self.http.post(url).send().await.unwrap();
    }

    /// Stops the gateway gracefully and waits for it (flushing the request log).
    pub async fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("gateway did not stop within 30 s")
                .unwrap()
                .unwrap();
        }
    }

    /// Runs `f` on the gateway's database, opened a second time (as the CLI would, with
    /// the same secret key), on the blocking pool: the store's calls are synchronous.
    pub async fn with_store<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> T + Send + 'static,
    ) -> T {
        let cfg = self.config();
        tokio::task::spawn_blocking(move || f(&bootstrap::open_store(&cfg).unwrap()))
            .await
            .unwrap()
    }

    /// Whether this gateway's database is PostgreSQL (else SQLite in the data directory).
    pub fn is_postgres(&self) -> bool {
        self.postgres.is_some()
    }
}

/// Whether the suite runs on PostgreSQL: `SWITCHYARD_TEST_DATABASE=postgres` (the test
/// command runs the end-to-end suite once on each database). Otherwise SQLite.
pub fn on_postgres() -> bool {
    std::env::var("SWITCHYARD_TEST_DATABASE").as_deref() == Ok("postgres")
}

/// Completion order of requests, by the label each was sent with.
pub type Done = Arc<std::sync::Mutex<Vec<&'static str>>>;

/// Sends a chat request for `model` as `key` in the background; when it answers 200, its
/// `label` is appended to `done`.
pub fn spawn_recorded(
    h: &Harness,
    key: &str,
    model: &str,
    label: &'static str,
    done: &Done,
) -> JoinHandle<()> {
    let (request, done) = (
        h.chat_request(key, &chat_body(model, false)),
        Arc::clone(done),
    );
    tokio::spawn(async move {
        let r = request.send().await.unwrap();
        assert_eq!(r.status(), 200);
        done.lock().unwrap().push(label);
    })
}

/// A response's status and its JSON body.
pub async fn status_and_json(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

/// The value of one series (`name{labels}`) in a Prometheus text exposition.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The whole seconds of a response's `retry-after` header.
pub fn retry_after(r: &reqwest::Response) -> u64 {
    r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// A one-message chat body.
pub fn chat_body(model: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "stream": stream,
        "messages": [{"role": "user", "content": "Hello there, mock!"}]
    })
}

/// A one-message Anthropic Messages body (the same prompt as [`chat_body`]).
pub fn messages_body(model: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "max_tokens": 1024,
        "stream": stream,
        "messages": [{"role": "user", "content": "Hello there, mock!"}]
    })
}

/// A one-message Responses body (the same prompt as [`chat_body`]).
pub fn responses_body(model: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "stream": stream,
        "input": [{"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "Hello there, mock!"}]}]
    })
}

/// Prompt tokens the mock computes for `chat_body` ("Hello there, mock!" = 18 chars).
pub const PROMPT_TOKENS: u64 = 5;

/// Polls `check` every 20 ms until it returns true or 10 s pass.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..500 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for: {what}");
}
