//! Black-box tests: the gateway on 127.0.0.1:0 against the mock provider on
//! 127.0.0.1:0, over real sockets, with a real SQLite database in a temporary directory.
//! The harness that starts them is `switchyard-test-support`'s.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test harness code outside #[test] functions fails loudly on purpose"
)]
mod admin;
mod affinity;
mod aliases;
mod anthropic;
mod chaos;
mod chat;
mod combo_wait;
mod concurrency;
mod edge;
mod error_rules;
mod failover;
mod health;
mod http1;
mod leases;
mod lifecycle;
mod oauth;
mod python;
mod quota;
mod quota_store;
mod redaction;
mod request_log;
mod resilience;
mod responses;
mod schema;
mod secrets;
mod shapes;
mod strategies;
mod streams;
mod tls;
mod upstream;
