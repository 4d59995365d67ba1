//! One-time sign-in links: `/dashboard/sign-in/once?t=<256 random bits>`, minted by the
//! binary for its banner. The store keeps only each token's SHA-256 and expiry, holds
//! at most [`MAX_LINKS`] (expired ones are pruned on every mint; when it is still full
//! the link closest to expiry makes room), and a token is consumed by its first use.

use crate::session::random_token;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use switchyard_core::apikey::KeyHash;
use switchyard_gateway::clock::Clock;

/// How long a link stays valid, in milliseconds: ten minutes.
pub const LINK_TTL_MS: u64 = 10 * 60 * 1000;

/// Most links held at once.
pub const MAX_LINKS: usize = 16;

/// The path of a one-time link, before its `?t=` token.
pub const ONCE_PATH: &str = "/dashboard/sign-in/once";

/// The SHA-256 of a token, as hex.
fn digest(token: &str) -> String {
    KeyHash::of(token).to_hex()
}

/// The links not used yet: token digest → expiry (Unix milliseconds).
#[derive(Debug, Default)]
pub struct Links {
    inner: Mutex<HashMap<String, u64>>,
}

impl Links {
    /// A new token, valid from `now` for [`LINK_TTL_MS`].
    pub fn mint(&self, now: u64) -> String {
        let token = random_token();
        let mut map = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, expires_at| *expires_at > now);
        if map.len() >= MAX_LINKS {
            let soonest = map
                .iter()
                .min_by_key(|(_, expires_at)| **expires_at)
                .map(|(k, _)| k.clone());
            if let Some(k) = soonest {
                map.remove(&k);
            }
        }
        map.insert(digest(&token), now.saturating_add(LINK_TTL_MS));
        token
    }

    /// Whether `token` is a live link at `now`; it is used up either way.
    pub fn consume(&self, token: &str, now: u64) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&digest(token))
            .is_some_and(|expires_at| expires_at > now)
    }

    /// Links held (live or not yet pruned).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// The handle the binary mints links with; it shares the dashboard's store and clock.
#[derive(Debug, Clone)]
pub struct OneTimeLinks {
    pub(crate) links: Arc<Links>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl OneTimeLinks {
    /// A new one-time sign-in link's path and query,
    /// `/dashboard/sign-in/once?t=<64 hex digits>`, valid for ten minutes and for one
    /// use.
    pub fn mint(&self) -> String {
        format!("{ONCE_PATH}?t={}", self.links.mint(self.clock.now_ms()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_works_once_and_only_before_it_expires() {
        let links = Links::default();
        let now = 1_000_000;
        let token = links.mint(now);
        assert_eq!(token.len(), 64);
        assert!(links.consume(&token, now + LINK_TTL_MS - 1));
        assert!(!links.consume(&token, now + 1));
        let late = links.mint(now);
        assert!(!links.consume(&late, now + LINK_TTL_MS));
        // An expired link is used up too.
        assert!(!links.consume(&late, now));
        assert!(!links.consume("unknown", now));
        assert!(!links.consume("", now));
    }

    #[test]
    fn only_digests_are_kept() {
        let links = Links::default();
        let token = links.mint(1);
        let map = links.inner.lock().unwrap();
        assert_eq!(map.keys().collect::<Vec<_>>(), vec![&digest(&token)]);
        assert_ne!(digest(&token), token);
    }

    #[test]
    fn the_store_is_bounded_and_prunes_expired_links() {
        let links = Links::default();
        let start = 1_000_000;
        let first = links.mint(start);
        let rest: Vec<String> = (1..MAX_LINKS)
            .map(|i| links.mint(start + u64::try_from(i).unwrap()))
            .collect();
        assert_eq!(links.held(), MAX_LINKS);
        let newest = links.mint(start + 100);
        assert_eq!(links.held(), MAX_LINKS);
        assert!(!links.consume(&first, start + 100));
        assert!(links.consume(&rest[0], start + 100));
        assert!(links.consume(&newest, start + 100));
        links.mint(start + 100 + LINK_TTL_MS);
        assert_eq!(links.held(), 1);
    }
}
