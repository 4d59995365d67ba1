//! Switchyard's model: the configuration document and the views of the log, the types
//! the management API, the services and the dashboard share; the store persists them.
//!
//! The configuration document is the providers, connections, combos, aliases, keys,
//! settings and quota plans (with [`ConfigRows`], everything the gateway's snapshot is
//! built from); the views of the log are its rows, their routing traces and failed
//! attempts, its size, its per-bucket counts and the queries that select them. The
//! dashboard's stored sign-in sessions are here too, as the services hand them out.
//!
//! Plain data only: no I/O, no database, nothing async. The types that are JSON keep
//! their serde and OpenAPI attributes here, since they are also the management API's
//! shapes. Keeping them out of the store lets the dashboard and the services see the
//! document and the views without depending on how they are stored.

mod dashboard;
mod records;

pub use dashboard::SessionRow;
pub use records::*;
