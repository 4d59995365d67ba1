-- The dashboard's sessions and one-time sign-in links, shared by replicas (SPEC O6).
-- Only hashes of session ids and link tokens are kept.
CREATE TABLE dashboard_sessions (
    id_hash    TEXT PRIMARY KEY,
    csrf       TEXT NOT NULL,
    credential TEXT NOT NULL,
    notice     TEXT,
    expires_at BIGINT NOT NULL
);
CREATE INDEX dashboard_sessions_expires ON dashboard_sessions (expires_at);

CREATE TABLE dashboard_links (
    token_hash TEXT PRIMARY KEY,
    expires_at BIGINT NOT NULL
);
