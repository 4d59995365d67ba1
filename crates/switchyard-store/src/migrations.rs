//! Schema migrations, applied in order inside one transaction each. The schema version
//! lives in `PRAGMA user_version`, so applying migrations is idempotent: a database that
//! is already current is left untouched.

/// Each entry moves the schema from version `i` to `i + 1`. Never edit a released entry;
/// append a new one.
pub(crate) const MIGRATIONS: &[&str] = &[r#"
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
"#];
