//! Switchyard's decisions.
//!
//! Everything here is a plain function or a state machine over plain data: no I/O, no
//! async runtime, no clock reads, no environment reads. Anything that depends on time
//! takes `now` (milliseconds since the Unix epoch) as an argument, so every decision can
//! be tested exhaustively without sleeping. The gateway crate is the imperative shell
//! that feeds these functions with requests, configuration and the clock.

pub mod alias;
pub mod apikey;
pub mod catalog;
pub mod client_conn;
pub mod dispatch;
pub mod domain;
pub mod format;
pub mod health;
pub mod http1;
pub mod llm;
pub mod oauth;
pub mod outcome;
pub mod quota;
pub mod rawscan;
pub mod redact;
pub mod resilience;
pub mod routing;
pub mod settings;
pub mod sse;
pub mod stream;
pub mod usage;

/// A hash map looked up on the request path, by keys from the configuration or the
/// gateway's own ids: foldhash, seeded per map, a fraction of std's SipHash per lookup.
/// Maps that keep keys a client chooses stay on std's hasher.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Milliseconds since the Unix epoch: the one time unit decisions use.
pub type UnixMillis = u64;
