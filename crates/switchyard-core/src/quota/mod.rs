//! The quota sharing engine's decisions (SPEC Q): many client keys sharing a few
//! upstream accounts fairly.
//!
//! - [`window`]: sliding-window counters with a stated error bound (Q3)
//! - [`decide`]: the fair-share decision over every dimension (Q2)
//! - [`ledger`]: one pool's reserve-then-settle bookkeeping (Q4, Q6)
//! - [`plan`]: provider plans and their resolution (Q5)
//! - [`pool`]: pool declarations and their validation (Q1)
//! - [`cost`]: estimated and actual cost of a request per unit
//! - [`burn`]: burn rate and time to exhaustion (Q8)
//! - [`signals`]: provider rate-limit headers read as saturation (Q6)
//!
//! Nothing here reads a clock, a store or shared state: the gateway holds the ledgers,
//! persists them and passes `now` in.

pub mod burn;
pub mod cost;
pub mod decide;
pub mod ledger;
pub mod plan;
pub mod pool;
pub mod signals;
pub mod window;
