//! Switchyard persistence.
//!
//! The embedded default is one SQLite database file in the data directory, opened in WAL
//! mode. The gateway never reads it on the request path: configuration is loaded into an
//! in-memory snapshot at start and after each change, and request-log rows are written
//! in batches by a background task. Every configuration write bumps a `config_version`
//! counter in the same transaction, so a running gateway notices changes made by another
//! process (the `switchyard keys` CLI) without polling whole tables.
//!
//! SQLite calls are synchronous; async callers run them on the blocking pool. Quota
//! counters can instead live in Redis ([`redis_counters`]), whose calls are async.
//!
//! Connection credentials are encrypted at rest with a key kept outside the database
//! ([`secrets`]); the database file and its WAL files are owner-only.
//!
//! The records it reads and writes (the configuration document, the request log's rows
//! and views) are `switchyard_model`'s: the store persists them, it does not define
//! them, so the services and the dashboard share them without depending on it.

mod config;
pub mod dashboard;
mod db;
mod keys;
pub mod leases;
mod log;
mod migrations;
pub mod oauth;
pub mod postgres;
pub mod quota;
pub mod redis_board;
pub mod redis_counters;
pub mod resilience;
pub mod secrets;
pub mod sessions;
mod sqlite;
mod store;

pub use log::{LogQueries, LogSink, Unwritten};
pub use quota::ConsumptionRow;
pub use secrets::{KeyError, KeyId, Keyring, SecretKey};
pub use sessions::{LastGoodChange, PinChange, PinRow};
pub use sqlite::make_private;
pub use store::{Batch, Store};

/// Everything that can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused or failed a statement; the backend's own message (whatever
    /// the backend: callers do not match on its errors).
    #[error("database error: {0}")]
    Database(String),
    /// The database cannot be reached (PostgreSQL down, every pooled connection
    /// broken): callers answer 503 and retry later; nothing was written.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// PostgreSQL's schema is behind this binary.
    #[error("the PostgreSQL schema has pending migrations ({}): run `switchyard migrate` (or start with --migrate) first", pending.join(", "))]
    PendingMigrations { pending: Vec<String> },
    /// A configuration change given up before it wrote (its check failed, or its
    /// caller went away): rolled back.
    #[error("the configuration change was abandoned and rolled back")]
    Abandoned,
    /// A unique or check constraint refused a write (two writers raced for one row).
    #[error("the database refused the write: {0}")]
    Constraint(String),
    #[error("stored JSON is invalid: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{kind} `{id}` not found")]
    NotFound { kind: &'static str, id: String },
    #[error("{kind} `{id}` already exists")]
    Conflict { kind: &'static str, id: String },
    #[error("{kind} `{id}` is still used by {used_by}")]
    InUse {
        kind: &'static str,
        id: String,
        used_by: String,
    },
    #[error("database schema version {found} is newer than this binary supports ({supported}); upgrade switchyard")]
    SchemaTooNew { found: i64, supported: i64 },
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Key(#[from] secrets::KeyError),
    /// A credential sealed with a key this process does not hold.
    #[error("the credential of connection `{connection}` is encrypted with secret key {found}, but the key given is {current}")]
    UnknownKey {
        connection: String,
        found: KeyId,
        current: KeyId,
    },
    /// A credential that does not open under the key it names: damaged or altered.
    #[error("the stored credential of connection `{connection}` does not decrypt with secret key {key}: it is damaged or was altered outside switchyard")]
    Undecryptable { connection: String, key: KeyId },
    /// A value with the sealed prefix that is not well-formed.
    #[error("the stored credential of connection `{connection}` is damaged: it starts with `enc:v1:` but is no well-formed sealed value")]
    Damaged { connection: String },
    /// Another process re-encrypted the credentials with a key this one does not hold.
    #[error("the credentials were re-encrypted with secret key {database}, and this process holds {current}: restart it with the new key")]
    KeyChanged { database: KeyId, current: KeyId },
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// What the store's async seams return: a boxed future owning what it needs, so a
/// seam can be a trait object whatever database is behind it.
pub type StoreFuture<T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T>> + Send + 'static>>;
