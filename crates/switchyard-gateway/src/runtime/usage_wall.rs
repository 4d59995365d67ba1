//! The usage-wall machines of the Claude connections that opted in (SPEC R17): one
//! [`UsageWall`] per connection id, in memory, behind a short lock never held across an
//! `.await`. Only connections whose flags are on get an entry, so the map is bounded by
//! the configured connections. The decisions are the core machine's; this only keeps
//! the machines.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use switchyard_core::resilience::usage_wall::{Flags, Status, UsageWall};

/// See the module docs.
#[derive(Debug, Default)]
pub struct UsageWalls {
    walls: Mutex<HashMap<String, UsageWall>>,
}

impl UsageWalls {
    /// Runs `f` on `connection`'s machine, made on first use; the lock is held only for
    /// the call (never across an `.await`).
    pub fn with<T>(&self, connection: &str, f: impl FnOnce(&mut UsageWall) -> T) -> T {
        let mut walls = self.walls.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(wall) = walls.get_mut(connection) {
            return f(wall);
        }
        f(walls.entry(connection.to_owned()).or_default())
    }

    /// Whether a request on `connection` carries the slow-lane header now.
    pub fn send_slow(&self, connection: &str, flags: Flags, now_ms: u64) -> bool {
        let walls = self.walls.lock().unwrap_or_else(PoisonError::into_inner);
        walls
            .get(connection)
            .is_some_and(|w| w.send_slow(flags, now_ms))
    }

    /// The state of `connection`'s machine, when it has one.
    pub fn status(&self, connection: &str, now_ms: u64) -> Option<Status> {
        let walls = self.walls.lock().unwrap_or_else(PoisonError::into_inner);
        walls.get(connection).map(|w| w.status(now_ms))
    }
}
