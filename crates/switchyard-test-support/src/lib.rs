//! Test support for Switchyard's end-to-end tests: a gateway on 127.0.0.1:0 wired to a
//! mock provider on 127.0.0.1:0 over real sockets, with a real SQLite database in a
//! temporary directory, the requests tests send to it, a typed builder for the
//! configuration file, and tracing output captured per test.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test support fails loudly on purpose: a failed step fails the test"
)]

mod config;
mod harness;
mod redis;
mod relay;
mod trace;

pub use config::{
    Allocation, Combo, Config, Connection, Dimension, Key, Provider, QuotaPool, Server,
};
pub use harness::*;
pub use redis::{redis_url, RedisQuotaStore};
pub use relay::Relay;
pub use trace::init_tracing;
