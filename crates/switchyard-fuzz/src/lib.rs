//! The fuzz targets' bodies. Each check takes arbitrary bytes, drives one parser,
//! translator or state machine of the gateway — or the whole gateway — with them, and
//! asserts its invariants by panicking. `fuzz/` wraps each in a cargo-fuzz target; this
//! crate's tests run every check over the seed corpus and over every input a fuzzing run
//! has found a crash with (`fuzz/regressions/`), so a fixed crash stays fixed.

#![expect(
    clippy::expect_used,
    clippy::panic,
    reason = "a check reports a broken invariant by panicking: that is what the fuzzer catches"
)]

pub mod events;
pub mod formats;
pub mod gateway;
pub mod input;
pub mod json;
pub mod seeds;
pub mod values;

/// A check: takes a fuzz input, panics when an invariant breaks.
pub type Check = fn(&[u8]);

/// Every fuzz target, by name: its `fuzz/fuzz_targets/<name>.rs` calls the check.
pub const TARGETS: [(&str, Check); 12] = [
    ("decode", formats::decode),
    ("reader", formats::reader),
    ("translate_request", formats::request),
    ("translate_response", formats::response),
    ("translate_error", formats::error),
    ("translate_stream", formats::stream),
    ("headers", values::headers),
    ("settings", values::setting),
    ("config", values::config),
    ("client_conn", values::client_conn),
    ("http1", values::http1),
    ("gateway", gateway::check),
];
