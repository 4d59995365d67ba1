//! The `context-relay` handoffs by session (SPEC R19): the core table
//! ([`switchyard_core::routing::relay::Handoffs`]) behind a short lock. Per replica and
//! in memory: a summary lives for a session's pin lifetime at most, and a restart only
//! means the next account starts without one.

use crate::sync::lock;
use std::sync::{Arc, Mutex};
use switchyard_core::routing::affinity::SessionKey;
use switchyard_core::routing::relay::Handoffs;
use switchyard_core::UnixMillis;

/// Sessions with a handoff at most (each holds one summary).
pub const CAPACITY: usize = 10_000;

/// See the module docs.
#[derive(Debug)]
pub struct Relay(Mutex<Handoffs>);

impl Default for Relay {
    fn default() -> Self {
        Self(Mutex::new(Handoffs::new(CAPACITY)))
    }
}

impl Relay {
    /// See [`Handoffs::begin`].
    pub fn begin(&self, session: SessionKey, from: &str, ttl_ms: u64, now: UnixMillis) -> bool {
        lock(&self.0).begin(session, from, ttl_ms, now)
    }

    /// See [`Handoffs::made`].
    pub fn made(&self, session: SessionKey, from: &str, summary: &str) {
        lock(&self.0).made(session, from, summary);
    }

    /// See [`Handoffs::failed`].
    pub fn failed(&self, session: SessionKey, from: &str) {
        lock(&self.0).failed(session, from);
    }

    /// See [`Handoffs::take`].
    pub fn take(
        &self,
        session: SessionKey,
        first: &str,
        ttl_ms: u64,
        now: UnixMillis,
    ) -> Option<Arc<str>> {
        lock(&self.0).take(session, first, ttl_ms, now)
    }
}
