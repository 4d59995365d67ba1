//! One-time sign-in links: `/dashboard/sign-in/once?t=<256 random bits>`, minted by the
//! binary for its banner. The store keeps only each token's SHA-256 and expiry (in the
//! store, so a link minted by one replica opens on any), holds at most [`MAX_LINKS`]
//! (expired ones are pruned on every mint; when it is still full the link closest to
//! expiry makes room), and a token is consumed by its first use.

use crate::session::random_token;
use std::sync::Arc;
use switchyard_core::apikey::KeyHash;
use switchyard_gateway::clock::Clock;
use switchyard_gateway::error::ApiError;
use switchyard_gateway::services::dashboard;
use switchyard_gateway::state::AppState;

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

/// The links not used yet, in the store.
#[derive(Debug)]
pub struct Links {
    app: Arc<AppState>,
}

impl Links {
    pub fn new(app: Arc<AppState>) -> Self {
        Self { app }
    }

    /// A new token, valid from `now` for [`LINK_TTL_MS`].
    pub async fn mint(&self, now: u64) -> Result<String, ApiError> {
        let token = random_token();
        dashboard::mint_link(
            &self.app,
            digest(&token),
            now.saturating_add(LINK_TTL_MS),
            now,
            MAX_LINKS,
        )
        .await?;
        Ok(token)
    }

    /// Whether `token` is a live link at `now`; it is used up either way.
    pub async fn consume(&self, token: &str, now: u64) -> Result<bool, ApiError> {
        dashboard::consume_link(&self.app, digest(token), now).await
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
    pub async fn mint(&self) -> Result<String, ApiError> {
        let token = self.links.mint(self.clock.now_ms()).await?;
        Ok(format!("{ONCE_PATH}?t={token}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_digests_are_kept() {
        let token = random_token();
        assert_eq!(digest(&token).len(), 64);
        assert_ne!(digest(&token), token);
        assert_eq!(digest(&token), KeyHash::of(&token).to_hex());
    }
}
