//! Switchyard's imperative shell: the HTTP server, the request pipeline, the upstream
//! client, the management API, configuration loading, metrics and the clock. Decisions
//! are delegated to `switchyard-core`; persistence to `switchyard-store`.

pub mod admin;
pub mod body;
pub mod bootstrap;
pub mod client;
pub mod clock;
pub mod config;
pub mod edge;
pub mod error;
pub mod frontends;
pub mod gate;
pub mod keys;
pub mod metrics;
pub mod persist;
pub mod pipeline;
pub mod quota;
pub mod reqlog;
pub mod resilience;
pub mod server;
pub mod snapshot;
pub mod state;
pub mod sync;
pub mod upstream;

pub use server::{app, run};
