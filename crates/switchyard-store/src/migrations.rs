//! Schema migrations, applied in order inside one transaction each. The schema version
//! lives in `PRAGMA user_version`, so applying migrations is idempotent: a database that
//! is already current is left untouched.

/// Each entry moves the schema from version `i` to `i + 1`. Never edit a released entry;
/// append a new one.
pub(crate) const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES ('config_version', '0');

CREATE TABLE providers (
    id         TEXT PRIMARY KEY,
    format     TEXT NOT NULL,
    base_url   TEXT NOT NULL,
    models     TEXT NOT NULL DEFAULT '[]',
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

CREATE TABLE connections (
    id                     TEXT PRIMARY KEY,
    provider_id            TEXT NOT NULL REFERENCES providers(id),
    auth_class             TEXT NOT NULL,
    format                 TEXT,
    base_url               TEXT,
    credential             TEXT NOT NULL DEFAULT '',
    enabled                INTEGER NOT NULL DEFAULT 1,
    max_concurrent         INTEGER,
    rate_limit_overrides   TEXT,
    provider_specific_data TEXT,
    disable_cooling        INTEGER NOT NULL DEFAULT 0,
    created_at             INTEGER NOT NULL,
    updated_at             INTEGER NOT NULL
);
CREATE INDEX connections_provider ON connections(provider_id);

CREATE TABLE combos (
    name       TEXT PRIMARY KEY,
    strategy   TEXT NOT NULL,
    targets    TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

CREATE TABLE api_keys (
    id                  TEXT PRIMARY KEY,
    name                TEXT NOT NULL,
    key_hash            TEXT NOT NULL UNIQUE,
    prefix              TEXT NOT NULL,
    scopes              TEXT NOT NULL DEFAULT '[]',
    allowed_connections TEXT,
    allowed_models      TEXT,
    created_at          INTEGER NOT NULL,
    revoked_at          INTEGER
);

CREATE TABLE settings (
    key        TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);

CREATE TABLE request_log (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    ts                INTEGER NOT NULL,
    request_id        TEXT NOT NULL,
    key_id            TEXT,
    requested_model   TEXT NOT NULL,
    provider          TEXT,
    connection_id     TEXT,
    model             TEXT,
    status            INTEGER NOT NULL,
    error_code        TEXT,
    stream            INTEGER NOT NULL,
    attempts          INTEGER NOT NULL,
    latency_ms        INTEGER NOT NULL,
    ttfb_ms           INTEGER,
    prompt_tokens     INTEGER,
    completion_tokens INTEGER,
    egress_ip         TEXT
);
-- No secondary indexes: rows arrive in time order, so the rowid already orders them by
-- time (recent-first reads and retention walk it), and every extra index would be paid on
-- each of the thousands of inserts per second that the request path produces.
"#,
    // v2: quota sharing (SPEC Q1). Pools and plans are configuration (their writes bump
    // config_version); consumption is runtime state written behind the request path.
    r#"
CREATE TABLE quota_pools (
    id             TEXT PRIMARY KEY,
    name           TEXT NOT NULL,
    connection_ids TEXT NOT NULL,
    dimensions     TEXT NOT NULL DEFAULT '[]',
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);

CREATE TABLE quota_allocations (
    pool_id           TEXT NOT NULL REFERENCES quota_pools(id) ON DELETE CASCADE,
    api_key_id        TEXT NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
    position          INTEGER NOT NULL,
    allocation_weight REAL NOT NULL,
    cap_value         REAL,
    cap_unit          TEXT,
    policy            TEXT NOT NULL,
    PRIMARY KEY (pool_id, api_key_id)
) WITHOUT ROWID;

-- One row per (pool, dimension, key, slot); `amount` is the slot's absolute value, so
-- rewriting a row is idempotent. Rows are deleted once they are both outside their
-- window and older than the retention period.
CREATE TABLE quota_consumption (
    pool_id     TEXT NOT NULL,
    dimension   TEXT NOT NULL,
    api_key_id  TEXT NOT NULL,
    slot        INTEGER NOT NULL,
    slot_end_ms INTEGER NOT NULL,
    window_ms   INTEGER NOT NULL,
    amount      REAL NOT NULL,
    PRIMARY KEY (pool_id, dimension, api_key_id, slot)
) WITHOUT ROWID;
CREATE INDEX quota_consumption_end ON quota_consumption(slot_end_ms);

-- USD prices per model, for quota dimensions metered in usd.
ALTER TABLE providers ADD COLUMN prices TEXT NOT NULL DEFAULT '{}';

CREATE TABLE provider_plans (
    connection_id TEXT PRIMARY KEY,
    dimensions    TEXT NOT NULL,
    updated_at    INTEGER NOT NULL
);
"#,
    // v3: resilience state that survives restarts (SPEC R1, R3, R4): provider breakers and
    // connection health, as JSON documents written behind the request path.
    r#"
CREATE TABLE domain_circuit_breakers (
    provider_id TEXT PRIMARY KEY,
    state       TEXT NOT NULL,
    updated_at  INTEGER NOT NULL
);

CREATE TABLE connection_health (
    connection_id TEXT PRIMARY KEY,
    state         TEXT NOT NULL,
    updated_at    INTEGER NOT NULL
);
"#,
    // v4: a provider-wide concurrency cap (SPEC R7).
    r#"
ALTER TABLE providers ADD COLUMN max_concurrent INTEGER;
"#,
    // v5: per-model output limits (requests asking more are clamped), and the API each
    // logged request was made in.
    r#"
ALTER TABLE providers ADD COLUMN max_output_tokens TEXT NOT NULL DEFAULT '{}';
ALTER TABLE request_log ADD COLUMN client_format TEXT NOT NULL DEFAULT 'openai';
"#,
    // v6: the indexes the request log's filters need (key, provider, model, status), each
    // ending in the row id so a page filtered by one of them (an exact status) is read
    // newest first without a sort. Rows are written in batches off the request path, so
    // the indexes cost the writer, not requests; time filters and retention still walk
    // the rowid, which is time order.
    r#"
CREATE INDEX request_log_key ON request_log (key_id, id);
CREATE INDEX request_log_provider ON request_log (provider, id);
CREATE INDEX request_log_requested_model ON request_log (requested_model, id);
CREATE INDEX request_log_model ON request_log (model, id);
CREATE INDEX request_log_status ON request_log (status, id);
"#,
    // v7: why each attempt of a logged request that did not answer ended (SPEC R11: which
    // deadline cut a stream that failed over), as a JSON array, NULL when none failed;
    // and a provider's own stream deadlines.
    r#"
ALTER TABLE request_log ADD COLUMN failed_attempts TEXT;
ALTER TABLE providers ADD COLUMN stream_timeouts TEXT NOT NULL DEFAULT '{}';
"#,
    // v8: model aliases (SPEC G3), in the order they are tried; and session pins (SPEC
    // R15), keyed by the SHA-256 of the client key id and session id (no id in clear),
    // pruned by last use.
    r#"
CREATE TABLE model_aliases (
    position   INTEGER PRIMARY KEY,
    pattern    TEXT NOT NULL,
    target     TEXT NOT NULL,
    keys       TEXT NOT NULL DEFAULT '[]',
    updated_at INTEGER NOT NULL
);

CREATE TABLE session_pins (
    session_key   TEXT PRIMARY KEY,
    key_id        TEXT NOT NULL,
    connection_id TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    last_used_at  INTEGER NOT NULL
);
CREATE INDEX session_pins_last_used ON session_pins (last_used_at);
"#,
    // v9: exclusive session leases (SPEC R16). The owner is kept as its SHA-256 only.
    // Partial unique indexes make one active lease per owner and per connection the
    // database's rule, so two acquires racing (two replicas included) cannot both win.
    // Ended rows stay a while as the owner's generation history.
    r#"
CREATE TABLE session_leases (
    id            INTEGER PRIMARY KEY,
    owner_hash    TEXT NOT NULL,
    key_id        TEXT NOT NULL,
    connection_id TEXT NOT NULL,
    generation    INTEGER NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('active', 'released', 'expired', 'invalidated')),
    acquired_at   INTEGER NOT NULL,
    renewed_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    ended_at      INTEGER
);
CREATE UNIQUE INDEX session_leases_active_owner ON session_leases (owner_hash)
    WHERE state = 'active';
CREATE UNIQUE INDEX session_leases_active_connection ON session_leases (connection_id)
    WHERE state = 'active';
CREATE INDEX session_leases_owner_generation ON session_leases (owner_hash, generation);
"#,
    // v10: each combo's last good connection (SPEC R19's `lkgp`), written behind the
    // request path.
    r#"
CREATE TABLE combo_last_good (
    combo         TEXT PRIMARY KEY,
    connection_id TEXT NOT NULL,
    updated_at    INTEGER NOT NULL
);
"#,
    // v11: each provider's models' context windows (SPEC R19's context fit).
    r#"
ALTER TABLE providers ADD COLUMN context_windows TEXT NOT NULL DEFAULT '{}';
"#,
    // v12: each request's routing decision (SPEC R19's trace), as JSON.
    r#"
ALTER TABLE request_log ADD COLUMN route TEXT;
"#,
    // v13: the dashboard's sessions and one-time sign-in links (SPEC O6: in the store,
    // so any replica serves a signed-in browser; on SQLite they survive a restart). Only
    // hashes of session ids and link tokens are kept.
    r#"
CREATE TABLE dashboard_sessions (
    id_hash    TEXT PRIMARY KEY,
    csrf       TEXT NOT NULL,
    credential TEXT NOT NULL,
    notice     TEXT,
    expires_at INTEGER NOT NULL
);
CREATE INDEX dashboard_sessions_expires ON dashboard_sessions (expires_at);

CREATE TABLE dashboard_links (
    token_hash TEXT PRIMARY KEY,
    expires_at INTEGER NOT NULL
);
"#,
    // v14: OAuth subscription connections' refreshes (SPEC R4). The tokens are the
    // connection's sealed credential; this row holds what is not secret, and the lease
    // that lets one process at a time refresh (a refresh token rotates: two refreshing
    // together would kill the login).
    r#"
CREATE TABLE oauth_state (
    connection_id   TEXT PRIMARY KEY,
    issuer          TEXT NOT NULL,
    expires_at      INTEGER,
    last_refresh_at INTEGER,
    failures        INTEGER NOT NULL DEFAULT 0,
    retry_at        INTEGER,
    last_error      TEXT,
    lease_holder    TEXT NOT NULL DEFAULT '',
    lease_until     INTEGER NOT NULL DEFAULT 0,
    updated_at      INTEGER NOT NULL
);
"#,
];
