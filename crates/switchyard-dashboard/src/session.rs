//! Dashboard sessions: random session ids, each with its expiry, its CSRF token and the
//! hash of the credential it was opened with, kept in the store (so every replica knows
//! them, and they survive a restart). The store is bounded: expired sessions are pruned
//! on every insert, and when it is still full the session closest to expiry makes room.

use crate::html::Notice;
use rand::RngCore;
use std::sync::Arc;
use subtle::ConstantTimeEq;
use switchyard_core::apikey::KeyHash;
use switchyard_gateway::error::ApiError;
use switchyard_gateway::services::dashboard;
use switchyard_gateway::state::AppState;

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

/// A live session as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub csrf: String,
    /// The hash of the credential the session was opened with (never the credential).
    pub credential: KeyHash,
    /// The notice left for this page by an earlier action, when it was asked for.
    pub notice: Option<Notice>,
}

/// The sessions, in the store (SPEC O6: any replica serves a signed-in browser). A
/// session is kept under the SHA-256 of its id; the store keeps at most
/// [`MAX_SESSIONS`]. Each call is one store transaction on the blocking pool (through
/// the gateway's `services::dashboard`).
#[derive(Debug)]
pub struct Sessions {
    app: Arc<AppState>,
}

/// The key a session is kept under: its id's SHA-256.
fn key(id: &str) -> String {
    KeyHash::of(id).to_hex()
}

/// A notice as the store keeps it.
fn encode(notice: &Notice) -> String {
    match notice {
        Notice::Done(m) => format!("done:{m}"),
        Notice::Failed(m) => format!("failed:{m}"),
    }
}

fn decode(stored: &str) -> Option<Notice> {
    match stored.split_once(':') {
        Some(("done", m)) => Some(Notice::Done(m.to_owned())),
        Some(("failed", m)) => Some(Notice::Failed(m.to_owned())),
        _ => None,
    }
}

impl Sessions {
    pub fn new(app: Arc<AppState>) -> Self {
        Self { app }
    }

    /// Opens a session at `now` (Unix milliseconds) for the credential whose hash is
    /// `credential`; returns its id and its CSRF token.
    pub async fn create(
        &self,
        now: u64,
        credential: KeyHash,
    ) -> Result<(String, String), ApiError> {
        let (id, csrf) = (random_token(), random_token());
        dashboard::open_session(
            &self.app,
            key(&id),
            csrf.clone(),
            credential.to_hex(),
            now.saturating_add(SESSION_TTL_MS),
            now,
            MAX_SESSIONS,
        )
        .await?;
        Ok((id, csrf))
    }

    /// The live session `id` at `now`; with `take_notice`, the notice left for it, once.
    pub async fn get(
        &self,
        id: &str,
        now: u64,
        take_notice: bool,
    ) -> Result<Option<Stored>, ApiError> {
        let row = dashboard::session(&self.app, key(id), now, take_notice).await?;
        Ok(row.and_then(|r| {
            Some(Stored {
                csrf: r.csrf,
                credential: KeyHash::from_hex(&r.credential)?,
                notice: r.notice.as_deref().filter(|_| take_notice).and_then(decode),
            })
        }))
    }

    /// Keeps `notice` for the session `id`'s next page.
    pub async fn set_notice(&self, id: &str, notice: &Notice) -> Result<(), ApiError> {
        dashboard::set_session_notice(&self.app, key(id), encode(notice)).await
    }

    /// Ends the session `id`.
    pub async fn remove(&self, id: &str) -> Result<(), ApiError> {
        dashboard::end_session(&self.app, key(id)).await
    }
}

/// Whether a presented CSRF token matches the session's, in constant time.
pub fn csrf_matches(expected: &str, presented: &str) -> bool {
    expected.as_bytes().ct_eq(presented.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn csrf_matches_only_the_same_token() {
        assert!(csrf_matches("abc", "abc"));
        assert!(!csrf_matches("abc", "abd"));
        assert!(!csrf_matches("abc", ""));
    }

    #[test]
    fn notices_keep_their_kind_and_text_in_the_store() {
        for n in [
            Notice::Done("Key k1 revoked.".into()),
            Notice::Failed("bad: it has a colon".into()),
        ] {
            assert_eq!(decode(&encode(&n)), Some(n));
        }
        assert_eq!(decode("other"), None);
        assert_ne!(key("abc"), "abc");
        assert_eq!(key("abc").len(), 64);
    }
}
