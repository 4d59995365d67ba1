//! Resilience decisions (SPEC R): failures contained at the right scope. Every state
//! machine here takes `now` and does no I/O; the gateway keeps their state, persists
//! what must survive restarts, and wires them into routing.
//!
//! - [`admission`]: request-queue limits and admission (R10)
//! - [`breaker`]: the provider circuit breaker (R1)
//! - [`combo_wait`]: waiting out short cooldowns instead of failing a combo (R9)
//! - [`cooldown`]: connection cooldown and terminal states (R3, R4)
//! - [`gates`]: concurrency gates taken together, with fair queues (R7)
//! - [`lockout`]: model lockout (R5)
//! - [`provider_cooldown`]: the opt-in provider time-window gate (R2)
//! - [`rules`]: status restatements and provider error rules as data (R13)
//! - [`slow_start`]: a growing share of traffic after recovery
//! - [`store_breaker`]: failing fast while the shared quota store is down (Q4)
//! - [`usage_wall`]: the Claude usage wall, low-priority lane and limit reset (R17)
//! - [`verdict`]: the one classifier of a failed attempt (R3, R5, R11, R13, R14)
//! - [`board`]: every breaker, cooldown, lock and egress bucket as one state machine

pub mod admission;
pub mod board;
pub mod breaker;
pub mod combo_wait;
pub mod cooldown;
pub mod gates;
pub mod lockout;
pub mod provider_cooldown;
pub mod rules;
pub mod slow_start;
pub mod store_breaker;
pub mod usage_wall;
pub mod verdict;
