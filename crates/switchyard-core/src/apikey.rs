//! Client API key hashing and verification (SPEC G2).
//!
//! Keys are 256-bit random secrets, so a single SHA-256 is a sound storage hash: there is
//! nothing to brute-force that a slow KDF would protect. The store keeps only the hash and
//! a short display prefix. Client keys are found through a map keyed by the hash, with
//! ordinary comparisons: what timing could reveal is how much of a stored *digest* a
//! presented key's digest matched, and steering a digest byte by byte would take a
//! SHA-256 preimage. The one credential compared against a single known value, the admin
//! token, is compared in constant time ([`KeyHash::ct_eq`]).
//!
//! Generating a key needs randomness and is the gateway's work; this module only hashes,
//! parses and compares what it is given, with no I/O.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Prefix every Switchyard client key carries, so leaked keys are recognisable by scanners.
pub const KEY_PREFIX: &str = "sy-";

/// How many leading characters of a key are kept in clear for display ("sy-AbCd…").
pub const DISPLAY_PREFIX_LEN: usize = 8;

/// A SHA-256 digest of a key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyHash(pub [u8; 32]);

impl std::fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyHash(..)")
    }
}

impl KeyHash {
    pub fn of(secret: &str) -> Self {
        Self(Sha256::digest(secret.as_bytes()).into())
    }

    pub fn to_hex(self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        s
    }

    pub fn from_hex(s: &str) -> Option<Self> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            out[i] = (hex_val(pair[0])? << 4) | hex_val(pair[1])?;
        }
        Some(Self(out))
    }

    /// Constant-time equality.
    pub fn ct_eq(&self, other: &Self) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// The display prefix of a key: enough to tell keys apart in a list, useless to an attacker.
pub fn display_prefix(secret: &str) -> String {
    secret.chars().take(DISPLAY_PREFIX_LEN).collect()
}

/// Extracts the bearer token from an `Authorization` header value, or accepts the
/// Anthropic-style `x-api-key` value as is.
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_round_trips_through_hex() {
        let h = KeyHash::of("sy-secret");
        let hex = h.to_hex();
        assert_eq!(hex.len(), 64);
        assert_eq!(KeyHash::from_hex(&hex), Some(h));
        assert_eq!(KeyHash::from_hex(&hex.to_uppercase()), Some(h));
    }

    #[test]
    fn hash_is_sha256() {
        assert_eq!(
            KeyHash::of("abc").to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn malformed_hex_is_rejected() {
        assert_eq!(KeyHash::from_hex("zz"), None);
        assert_eq!(KeyHash::from_hex(&"g".repeat(64)), None);
    }

    #[test]
    fn ct_eq_compares_whole_digest() {
        let a = KeyHash::of("a");
        let mut b = a;
        assert!(a.ct_eq(&b));
        b.0[31] ^= 1;
        assert!(!a.ct_eq(&b));
    }

    #[test]
    fn bearer_token_parsing() {
        assert_eq!(bearer_token("Bearer sy-x"), Some("sy-x"));
        assert_eq!(bearer_token("bearer  sy-x "), Some("sy-x"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("sy-x"), None);
    }

    #[test]
    fn debug_does_not_print_digest() {
        assert_eq!(format!("{:?}", KeyHash::of("x")), "KeyHash(..)");
    }

    #[test]
    fn display_prefix_keeps_eight_chars() {
        assert_eq!(display_prefix("sy-abcdefghij"), "sy-abcde");
        assert_eq!(display_prefix("sy"), "sy");
    }
}
