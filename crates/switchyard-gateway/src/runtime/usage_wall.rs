//! The usage-wall machines of the Claude connections that opted in (SPEC R17): one
//! [`UsageWall`] per connection id, in memory, behind a short lock never held across an
//! `.await`. Only connections whose flags are on get an entry, and every configuration
//! change keeps only the entries of such connections ([`UsageWalls::retain`]), so the
//! map is bounded by the configured connections. An entry belongs to one account (a
//! fingerprint of the credential): a connection given another credential starts afresh.
//! The decisions are the core machine's; this only keeps the machines.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use switchyard_core::resilience::usage_wall::{Flags, Status, UsageWall};

/// See the module docs.
#[derive(Debug, Default)]
pub struct UsageWalls {
    /// By connection id: the account fingerprint and its machine.
    walls: Mutex<HashMap<String, (u64, UsageWall)>>,
}

impl UsageWalls {
    /// Runs `f` on the machine of `connection` with the account `account`, made afresh
    /// on first use or when the account changed; the lock is held only for the call
    /// (never across an `.await`).
    pub fn with<T>(
        &self,
        connection: &str,
        account: u64,
        f: impl FnOnce(&mut UsageWall) -> T,
    ) -> T {
        let mut walls = self.walls.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((owner, wall)) = walls.get_mut(connection) {
            if *owner != account {
                *owner = account;
                *wall = UsageWall::default();
            }
            return f(wall);
        }
        let (_, wall) = walls
            .entry(connection.to_owned())
            .or_insert_with(|| (account, UsageWall::default()));
        f(wall)
    }

    /// Whether a request on `connection` (account `account`) carries the slow-lane
    /// header now.
    pub fn send_slow(&self, connection: &str, account: u64, flags: Flags, now_ms: u64) -> bool {
        let walls = self.walls.lock().unwrap_or_else(PoisonError::into_inner);
        walls
            .get(connection)
            .is_some_and(|(owner, w)| *owner == account && w.send_slow(flags, now_ms))
    }

    /// The state of `connection`'s machine, when it has one.
    pub fn status(&self, connection: &str, now_ms: u64) -> Option<Status> {
        let walls = self.walls.lock().unwrap_or_else(PoisonError::into_inner);
        walls.get(connection).map(|(_, w)| w.status(now_ms))
    }

    /// Keeps the machines for which `keep(connection id, account)` holds.
    pub fn retain(&self, mut keep: impl FnMut(&str, u64) -> bool) {
        let mut walls = self.walls.lock().unwrap_or_else(PoisonError::into_inner);
        walls.retain(|id, (account, _)| keep(id, *account));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ON: Flags = Flags {
        low_priority_mode: true,
        auto_limit_reset: false,
    };

    /// Puts `connection`'s machine (account `account`) into the lane until `until_s`.
    fn enter_lane(walls: &UsageWalls, connection: &str, account: u64, until_s: u64) {
        use switchyard_core::resilience::usage_wall::{Response, UnifiedHeaders, WallRequest};
        let reset = until_s.to_string();
        let headers = UnifiedHeaders::from_pairs(&[
            ("anthropic-ratelimit-unified-status", "rejected"),
            ("anthropic-ratelimit-unified-slow-offer", "treatment"),
            ("anthropic-ratelimit-unified-reset", &reset),
        ]);
        let seen = Response {
            status: 429,
            headers,
            sent_slow: false,
        };
        walls.with(connection, account, |w| {
            w.on_response(&mut WallRequest::default(), ON, seen, 1_000, 600_000, 0.0)
        });
    }

    #[test]
    fn a_machine_belongs_to_one_account_and_goes_with_its_connection() {
        let walls = UsageWalls::default();
        enter_lane(&walls, "c", 7, 3_600);
        assert!(walls.send_slow("c", 7, ON, 2_000));
        assert!(
            !walls.send_slow("c", 8, ON, 2_000),
            "another account has no lane"
        );
        walls.with("c", 8, |_| ());
        assert!(
            !walls.send_slow("c", 7, ON, 2_000),
            "the new account's machine is fresh"
        );
        enter_lane(&walls, "d", 1, 3_600);
        walls.retain(|id, _| id == "d");
        assert!(walls.status("c", 2_000).is_none());
        assert!(walls.status("d", 2_000).is_some());
    }
}
