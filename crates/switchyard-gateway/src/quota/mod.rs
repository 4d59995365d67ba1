//! Quota sharing in the shell (SPEC Q): the snapshot's pool index, the engine that keeps
//! counters and signals, and the persistence loop. The decisions themselves are in
//! `switchyard_core::quota`.

pub mod engine;
pub mod index;
pub mod writer;

pub use engine::{Admission, QuotaBlock, QuotaEngine, QuotaGuard};
pub use index::{PoolRuntime, QuotaIndex};
