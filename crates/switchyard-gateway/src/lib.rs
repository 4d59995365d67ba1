//! Switchyard's imperative shell: the HTTP server, the request pipeline, the upstream
//! client, the management API, configuration loading, metrics and the clock. Decisions
//! are delegated to `switchyard-core`; persistence to `switchyard-store`, of the records
//! and views `switchyard-model` defines.

pub mod admin;
pub mod body;
pub mod bootstrap;
pub mod client;
pub mod clock;
pub mod config;
pub mod edge;
pub mod error;
pub mod frontends;
mod heads;
pub mod keys;
pub mod oauth;
pub mod persist;
pub mod pipeline;
pub mod runtime;
pub mod server;
pub mod services;
pub mod snapshot;
pub mod state;
pub mod sync;
pub mod telemetry;
pub mod upstream;

pub use server::{app, run, run_with, serve, serve_with, Placement};
