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

mod migrations;
pub mod quota;
pub mod records;
pub mod redis_counters;
pub mod resilience;
mod sqlite;

pub use quota::{ConsumptionRow, PlanRecord};
pub use records::*;
pub use sqlite::{Batch, SaveMode, Store};

/// Everything that can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
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
}

pub type Result<T> = std::result::Result<T, StoreError>;
