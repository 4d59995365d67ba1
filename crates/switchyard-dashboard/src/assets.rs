//! The embedded assets (the stylesheet and the vendored htmx, see `assets/README.md`),
//! each served under a content-hashed name so that browsers may cache it for good: a
//! change to a file changes its URL.

use crate::session::hex;
use sha2::{Digest, Sha256};

/// One embedded file.
#[derive(Debug, Clone)]
pub struct Asset {
    /// `/dashboard/assets/<stem>-<first 12 hex digits of its SHA-256>.<ext>`.
    pub path: String,
    pub content_type: &'static str,
    pub body: &'static str,
}

impl Asset {
    fn new(stem: &str, ext: &str, content_type: &'static str, body: &'static str) -> Self {
        let hash = hex(&Sha256::digest(body.as_bytes()));
        Self {
            path: format!("/dashboard/assets/{stem}-{}.{ext}", &hash[..12]),
            content_type,
            body,
        }
    }
}

/// The stylesheet.
pub fn css() -> Asset {
    Asset::new(
        "app",
        "css",
        "text/css; charset=utf-8",
        include_str!("../assets/app.css"),
    )
}

/// htmx, for partial refresh.
pub fn htmx() -> Asset {
    Asset::new(
        "htmx",
        "js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/htmx-2.0.11.min.js"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_names_the_files_hash() {
        for asset in [css(), htmx()] {
            let full = hex(&Sha256::digest(asset.body.as_bytes()));
            assert!(
                asset.path.contains(&format!("-{}.", &full[..12])),
                "{}",
                asset.path
            );
        }
        assert!(css().path.starts_with("/dashboard/assets/app-"));
        assert!(htmx().path.ends_with(".js"));
        assert_eq!(hex(&Sha256::digest(b"abc"))[..12], *"ba7816bf8f01");
    }

    #[test]
    fn the_vendored_htmx_is_the_published_file() {
        assert_eq!(
            hex(&Sha256::digest(htmx().body.as_bytes())),
            "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717"
        );
    }
}
