//! Dashboard sessions: an in-memory store of random session ids, each with its expiry
//! and its CSRF token. The store is bounded: expired sessions are pruned on every
//! insert, and when it is still full the session closest to expiry makes room. Its lock
//! is never held across an await.

use crate::html::Notice;
use rand::RngCore;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use subtle::ConstantTimeEq;
use switchyard_core::apikey::KeyHash;

/// How long a session lasts, in seconds (the cookie's `Max-Age`).
pub const SESSION_TTL_SECS: u64 = 8 * 60 * 60;

/// [`SESSION_TTL_SECS`] in milliseconds.
const SESSION_TTL_MS: u64 = SESSION_TTL_SECS * 1000;

/// Most sessions held at once.
pub const MAX_SESSIONS: usize = 1024;

/// 256 random bits as 64 lowercase hex digits.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    hex(&bytes)
}

/// `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    bytes
        .iter()
        .flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 0xf)]])
        .map(char::from)
        .collect()
}

#[derive(Debug)]
struct Session {
    expires_at: u64,
    csrf: String,
    /// The hash of the credential the session was opened with (never the credential).
    credential: KeyHash,
    /// The notice to show on the next page (set by an action, taken once).
    notice: Option<Notice>,
}

/// The session store.
#[derive(Debug, Default)]
pub struct Sessions {
    inner: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// Opens a session at `now` (Unix milliseconds) for the credential whose hash is
    /// `credential`; returns its id and its CSRF token.
    pub fn create(&self, now: u64, credential: KeyHash) -> (String, String) {
        let (id, csrf) = (random_token(), random_token());
        let mut map = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, s| s.expires_at > now);
        if map.len() >= MAX_SESSIONS {
            let soonest = map
                .iter()
                .min_by_key(|(_, s)| s.expires_at)
                .map(|(k, _)| k.clone());
            if let Some(k) = soonest {
                map.remove(&k);
            }
        }
        map.insert(
            id.clone(),
            Session {
                expires_at: now.saturating_add(SESSION_TTL_MS),
                csrf: csrf.clone(),
                credential,
                notice: None,
            },
        );
        (id, csrf)
    }

    /// The CSRF token and the credential's hash of the live session `id` at `now`.
    pub fn get(&self, id: &str, now: u64) -> Option<(String, KeyHash)> {
        let map = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(id)
            .filter(|s| s.expires_at > now)
            .map(|s| (s.csrf.clone(), s.credential))
    }

    /// The CSRF token of the live session `id` at `now`.
    #[cfg(test)]
    fn csrf(&self, id: &str, now: u64) -> Option<String> {
        self.get(id, now).map(|(csrf, _)| csrf)
    }

    /// Keeps `notice` for the session `id`'s next page.
    pub fn set_notice(&self, id: &str, notice: Notice) {
        if let Some(s) = self
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(id)
        {
            s.notice = Some(notice);
        }
    }

    /// The notice kept for the session `id`, once.
    pub fn take_notice(&self, id: &str) -> Option<Notice> {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(id)
            .and_then(|s| s.notice.take())
    }

    /// Ends the session `id`.
    pub fn remove(&self, id: &str) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }

    /// Sessions held (live or not yet pruned).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// Whether a presented CSRF token matches the session's, in constant time.
pub fn csrf_matches(expected: &str, presented: &str) -> bool {
    expected.as_bytes().ct_eq(presented.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred() -> KeyHash {
        KeyHash::of("sk-test")
    }

    #[test]
    fn hex_is_lowercase_two_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        let t = random_token();
        assert_eq!(t.len(), 64);
        assert!(t
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(random_token(), t);
    }

    #[test]
    fn sessions_expire_and_end() {
        let s = Sessions::default();
        let now = 1_000_000;
        let (id, csrf) = s.create(now, cred());
        assert_eq!(s.get(&id, now), Some((csrf.clone(), cred())));
        assert_eq!(s.csrf(&id, now + 28_800_000 - 1), Some(csrf));
        assert_eq!(s.csrf(&id, now + 28_800_000), None);
        assert_eq!(s.csrf("unknown", now), None);
        s.remove(&id);
        assert_eq!(s.csrf(&id, now), None);
    }

    #[test]
    fn the_store_is_bounded_and_prunes_expired_sessions() {
        let s = Sessions::default();
        let start = 1_000_000;
        let (first, _) = s.create(start, cred());
        for i in 1..MAX_SESSIONS {
            s.create(start + u64::try_from(i).unwrap(), cred());
        }
        assert_eq!(s.held(), MAX_SESSIONS);
        let (newest, _) = s.create(start + 5_000, cred());
        assert_eq!(s.held(), MAX_SESSIONS);
        assert_eq!(s.csrf(&first, start), None);
        assert!(s.csrf(&newest, start + 5_000).is_some());
        s.create(start + 28_800_000 + 5_001, cred());
        assert_eq!(s.held(), 1);
    }

    #[test]
    fn a_notice_is_shown_once() {
        let s = Sessions::default();
        let (id, _) = s.create(1, cred());
        assert_eq!(s.take_notice(&id), None);
        s.set_notice(&id, Notice::Done("Saved.".into()));
        s.set_notice("unknown", Notice::Done("x".into()));
        assert_eq!(s.take_notice(&id), Some(Notice::Done("Saved.".into())));
        assert_eq!(s.take_notice(&id), None);
    }

    #[test]
    fn csrf_matches_only_the_same_token() {
        assert!(csrf_matches("abc", "abc"));
        assert!(!csrf_matches("abc", "abd"));
        assert!(!csrf_matches("abc", ""));
    }
}
