//! The embedded stylesheet, served under a content-hashed name so that browsers may
//! cache it for good: a change to the stylesheet changes its URL.

use crate::session::hex;
use sha2::{Digest, Sha256};

/// The stylesheet, embedded in the binary.
pub const CSS: &str = include_str!("app.css");

/// The stylesheet's path: `/dashboard/assets/app-<first 12 hex digits of its SHA-256>.css`.
pub fn css_path() -> String {
    let digest = Sha256::digest(CSS.as_bytes());
    let hash = hex(&digest);
    format!("/dashboard/assets/app-{}.css", &hash[..12])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_names_the_stylesheets_hash() {
        let path = css_path();
        let hash = path
            .strip_prefix("/dashboard/assets/app-")
            .and_then(|p| p.strip_suffix(".css"))
            .unwrap();
        let full = hex(&Sha256::digest(CSS.as_bytes()));
        assert_eq!(hash, &full[..12]);
        assert_eq!(hex(&Sha256::digest(b"abc"))[..12], *"ba7816bf8f01");
    }
}
