//! `context-relay` (SPEC R19): a conversation (a session, SPEC R15) moves from an account
//! nearing the end of its quota window to the next with a summary of where it stands.
//! Pure parts: the phase of the serving account's window ([`phase`]) and the table of
//! handoffs by session ([`Handoffs`]), both under `now`.
//!
//! The rule: when a request of the session is served by an account whose provider
//! reports at least `handoffAt` (85 %) of a window used, a summary of the conversation is
//! made by that account, off the request path. From `stopAt` (95 %) used the account goes
//! last in the combo's order, so the session's next request goes to the next account,
//! and that request (the first whose first candidate is another account) gets the
//! summary as a system instruction ([`handoff_text`]); the summary is then gone.

use super::affinity::SessionKey;
use std::collections::HashMap;
use std::sync::Arc;

/// The handoff thresholds (`routing.contextRelay.*`), used fractions 0 to 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RelaySettings {
    pub handoff_at: f64,
    pub stop_at: f64,
}

impl Default for RelaySettings {
    fn default() -> Self {
        Self {
            handoff_at: 0.85,
            stop_at: 0.95,
        }
    }
}

/// Where an account's window stands for the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Below `handoffAt` (or no reading): serve.
    Serve,
    /// From `handoffAt`: serve, and have a summary made.
    Handoff,
    /// From `stopAt`: go last.
    Stop,
}

/// The phase of an account whose highest reported used fraction is `used`.
pub fn phase(used: Option<f64>, s: RelaySettings) -> Phase {
    match used {
        Some(u) if u >= s.stop_at => Phase::Stop,
        Some(u) if u >= s.handoff_at => Phase::Handoff,
        _ => Phase::Serve,
    }
}

/// The user turn that asks the serving account for the summary.
pub const SUMMARY_PROMPT: &str = "Another assistant will take this conversation over from \
you. Write what it needs to carry on: the goal, what has been done and decided, the facts \
and names that matter, the open questions and the next step. Reply with that summary only.";

/// The system instruction the next account's first request gets.
pub fn handoff_text(summary: &str) -> String {
    format!(
        "This conversation was handed over from another assistant. Its summary of where \
the conversation stands:\n\n{summary}"
    )
}

/// How long a summary being made blocks another attempt for the same session.
pub const PENDING_MS: u64 = 120_000;

/// The handoffs by session: a summary being made, or made and waiting for the next
/// account; at most `capacity` sessions, each for `ttl_ms` after it was begun.
#[derive(Debug)]
pub struct Handoffs {
    entries: HashMap<SessionKey, Entry>,
    capacity: usize,
}

#[derive(Debug, Clone)]
struct Entry {
    /// The connection whose account made (or makes) the summary.
    from: String,
    /// When it was begun.
    at: u64,
    summary: Option<Arc<str>>,
}

impl Handoffs {
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            capacity,
        }
    }

    /// Whether `from`'s account should make a summary for `session` now: no summary of
    /// that account is waiting or being made for it. Marks one as being made.
    pub fn begin(&mut self, session: SessionKey, from: &str, ttl_ms: u64, now: u64) -> bool {
        if let Some(e) = self.entries.get(&session) {
            let live = now < e.at.saturating_add(ttl_ms);
            let pending = e.summary.is_none() && now < e.at.saturating_add(PENDING_MS);
            if live && (e.from == from || pending) {
                return false;
            }
        } else if self.entries.len() >= self.capacity {
            self.entries
                .retain(|_, e| now < e.at.saturating_add(ttl_ms));
            if self.entries.len() >= self.capacity {
                return false;
            }
        }
        self.entries.insert(
            session,
            Entry {
                from: from.to_owned(),
                at: now,
                summary: None,
            },
        );
        true
    }

    /// The summary `from` was making for `session` is made.
    pub fn made(&mut self, session: SessionKey, from: &str, summary: &str) {
        if let Some(e) = self.entries.get_mut(&session).filter(|e| e.from == from) {
            e.summary = Some(summary.into());
        }
    }

    /// The summary `from` was making for `session` could not be made: a later request
    /// may try again.
    pub fn failed(&mut self, session: SessionKey, from: &str) {
        if self
            .entries
            .get(&session)
            .is_some_and(|e| e.from == from && e.summary.is_none())
        {
            self.entries.remove(&session);
        }
    }

    /// The summary for a request of `session` whose first candidate is on connection
    /// `first`: one made by another account, within its time; taken (it is used once).
    pub fn take(
        &mut self,
        session: SessionKey,
        first: &str,
        ttl_ms: u64,
        now: u64,
    ) -> Option<Arc<str>> {
        let e = self.entries.get(&session)?;
        if now >= e.at.saturating_add(ttl_ms) {
            self.entries.remove(&session);
            return None;
        }
        if e.from == first || e.summary.is_none() {
            return None;
        }
        self.entries.remove(&session).and_then(|e| e.summary)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: RelaySettings = RelaySettings {
        handoff_at: 0.85,
        stop_at: 0.95,
    };
    const TTL: u64 = 3_600_000;

    fn session(n: u8) -> SessionKey {
        SessionKey([n; 32])
    }

    #[test]
    fn the_phase_follows_the_thresholds_and_no_reading_serves() {
        assert_eq!(phase(None, S), Phase::Serve);
        assert_eq!(phase(Some(0.0), S), Phase::Serve);
        assert_eq!(phase(Some(0.849), S), Phase::Serve);
        assert_eq!(phase(Some(0.85), S), Phase::Handoff);
        assert_eq!(phase(Some(0.949), S), Phase::Handoff);
        assert_eq!(phase(Some(0.95), S), Phase::Stop);
        assert_eq!(phase(Some(1.0), S), Phase::Stop);
        assert_eq!(phase(Some(f64::NAN), S), Phase::Serve);
    }

    #[test]
    fn a_summary_is_made_once_per_account_and_handed_to_another_once() {
        let mut h = Handoffs::new(10);
        assert!(h.begin(session(1), "a", TTL, 0));
        // Being made: not again, from any account.
        assert!(!h.begin(session(1), "a", TTL, 10));
        assert!(!h.begin(session(1), "b", TTL, 10));
        // Not ready: nothing to hand over.
        assert_eq!(h.take(session(1), "b", TTL, 20), None);
        h.made(session(1), "a", "the gist");
        assert!(!h.begin(session(1), "a", TTL, 30));
        // Its own account does not get it; the next one does, once.
        assert_eq!(h.take(session(1), "a", TTL, 40), None);
        assert_eq!(
            h.take(session(1), "b", TTL, 50).as_deref(),
            Some("the gist")
        );
        assert_eq!(h.take(session(1), "b", TTL, 60), None);
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn a_failed_or_stuck_summary_may_be_tried_again() {
        let mut h = Handoffs::new(10);
        assert!(h.begin(session(1), "a", TTL, 0));
        h.failed(session(1), "a");
        assert!(h.begin(session(1), "a", TTL, 1));
        // Stuck for PENDING_MS: another account may begin its own.
        assert!(!h.begin(session(1), "b", TTL, PENDING_MS));
        assert!(h.begin(session(1), "b", TTL, PENDING_MS + 1));
        // The first one's late answer does not overwrite the second's.
        h.made(session(1), "a", "late");
        h.failed(session(1), "a");
        h.made(session(1), "b", "fresh");
        assert_eq!(
            h.take(session(1), "c", TTL, PENDING_MS + 2).as_deref(),
            Some("fresh")
        );
    }

    #[test]
    fn a_waiting_summary_from_an_old_account_is_replaced_by_the_new_accounts() {
        let mut h = Handoffs::new(10);
        assert!(h.begin(session(1), "a", TTL, 0));
        h.made(session(1), "a", "from a");
        // b serves (the summary went unused, e.g. the request failed over back) and
        // nears its end too.
        assert!(h.begin(session(1), "b", TTL, 100));
        h.made(session(1), "b", "from b");
        assert_eq!(h.take(session(1), "a", TTL, 200).as_deref(), Some("from b"));
    }

    #[test]
    fn summaries_expire_and_the_table_is_bounded() {
        let mut h = Handoffs::new(2);
        assert!(h.begin(session(1), "a", TTL, 0));
        h.made(session(1), "a", "x");
        assert_eq!(h.take(session(1), "b", TTL, TTL), None);
        assert_eq!(h.len(), 0);
        assert!(h.begin(session(1), "a", TTL, 0));
        assert!(h.begin(session(2), "a", TTL, 0));
        // Full of live entries: a third session gets none.
        assert!(!h.begin(session(3), "a", TTL, 10));
        assert_eq!(h.len(), 2);
        // Once they lapse, room is made.
        assert!(h.begin(session(3), "a", TTL, TTL));
        assert_eq!(h.len(), 1);
        // An expired entry of the same session is begun afresh.
        assert!(h.begin(session(3), "a", TTL, 2 * TTL));
    }
}
