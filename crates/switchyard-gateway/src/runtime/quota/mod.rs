//! Quota sharing in the shell (SPEC Q): the snapshot's pool index, the engine that keeps
//! counters (in memory with SQLite persistence, or in Redis), provider signals, the
//! reservation guard requests carry. Persistence is the top-level `persist` writer's.
//! The decisions themselves are in `switchyard_core::quota`.

pub mod counters;
pub mod engine;
pub mod guard;
pub mod index;
pub mod signals;
pub mod views;

pub use engine::{Admission, QuotaEngine, StoreReason};
pub use guard::QuotaGuard;
pub use index::{PoolRuntime, QuotaIndex};
pub use views::{QuotaBlock, StoreStatus};
