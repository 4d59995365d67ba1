-- OAuth subscription connections' refreshes (SPEC R4). The tokens are the connection's
-- sealed credential; this row holds what is not secret, and the lease that lets one
-- replica at a time refresh (a refresh token rotates: two replicas refreshing together
-- would kill the login).
CREATE TABLE oauth_state (
    connection_id   TEXT PRIMARY KEY,
    issuer          TEXT NOT NULL,
    expires_at      BIGINT,
    last_refresh_at BIGINT,
    failures        BIGINT NOT NULL DEFAULT 0,
    retry_at        BIGINT,
    last_error      TEXT,
    lease_holder    TEXT NOT NULL DEFAULT '',
    lease_until     BIGINT NOT NULL DEFAULT 0,
    updated_at      BIGINT NOT NULL
);
