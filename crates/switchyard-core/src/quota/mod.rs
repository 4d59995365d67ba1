//! The quota sharing engine's decisions (SPEC Q): many client keys sharing a few
//! upstream accounts fairly.
//!
//! - [`window`]: sliding-window counters with a stated error bound (Q3)
//! - [`decide`]: the fair-share decision over every dimension (Q2)
//! - [`ledger`]: one pool's reserve-then-settle bookkeeping (Q4, Q6)
//! - [`plan`]: provider plans and their resolution (Q5)
//! - [`pool`]: pool declarations and their validation (Q1)
//! - [`burn`]: burn rate and time to exhaustion (Q8)

pub mod burn;
pub mod decide;
pub mod ledger;
pub mod plan;
pub mod pool;
pub mod window;
