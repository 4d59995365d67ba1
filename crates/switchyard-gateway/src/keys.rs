//! Creating client API keys and admin tokens: random secrets, shown once, stored hashed.
//!
//! Nothing here writes the store or reads the clock: callers store the record and pass
//! `now`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use secrecy::zeroize::Zeroizing;
use secrecy::{ExposeSecret, SecretString};
use switchyard_core::apikey::{display_prefix, KeyHash, KEY_PREFIX};
use switchyard_model::KeyRecord;

/// Scopes a key may carry.
pub const KNOWN_SCOPES: &[&str] = &["admin", "lease:exclusive"];

/// Longest key name accepted; names show in lists and logs.
const MAX_NAME_LEN: usize = 128;

/// A fresh random secret with the given prefix: 32 random bytes, base64url (43 chars).
pub fn random_secret(prefix: &str) -> SecretString {
    let mut bytes = Zeroizing::new([0u8; 32]);
    rand::thread_rng().fill_bytes(bytes.as_mut());
    SecretString::from(format!(
        "{prefix}{}",
        URL_SAFE_NO_PAD.encode(bytes.as_ref())
    ))
}

/// A short random identifier, e.g. `key_3f9a1c0b`.
pub fn random_id(prefix: &str) -> String {
    format!("{prefix}{:08x}", rand::random::<u32>())
}

/// What a new key is made of.
#[derive(Debug, Clone, Default)]
pub struct NewKey {
    pub id: Option<String>,
    pub name: String,
    pub scopes: Vec<String>,
    pub allowed_connections: Option<Vec<String>>,
    pub allowed_models: Option<Vec<String>>,
    /// A secret chosen by the operator (config file); otherwise one is generated.
    pub secret: Option<SecretString>,
}

/// Checks a key's name and scopes; the error names the field.
pub fn validate_key_fields(name: &str, scopes: &[String]) -> Result<(), String> {
    if name.trim().is_empty() || name.len() > MAX_NAME_LEN {
        return Err(format!("name: must be 1-{MAX_NAME_LEN} characters"));
    }
    if let Some(bad) = scopes.iter().find(|s| !KNOWN_SCOPES.contains(&s.as_str())) {
        return Err(format!(
            "scopes: unknown scope `{bad}` (known: {})",
            KNOWN_SCOPES.join(", ")
        ));
    }
    Ok(())
}

/// Builds the record of a new key and returns it with its secret.
pub fn new_key(spec: NewKey, now_ms: u64) -> Result<(KeyRecord, SecretString), String> {
    validate_key_fields(&spec.name, &spec.scopes)?;
    let id = spec.id.unwrap_or_else(|| random_id("key_"));
    if !switchyard_core::domain::is_valid_id(&id) {
        return Err(format!(
            "id: `{id}` is invalid: use 1-64 letters, digits, '-', '_' or '.'"
        ));
    }
    let secret = spec.secret.unwrap_or_else(|| random_secret(KEY_PREFIX));
    let record = KeyRecord {
        id,
        name: spec.name,
        prefix: display_prefix(secret.expose_secret()),
        scopes: spec.scopes,
        allowed_connections: spec.allowed_connections,
        allowed_models: spec.allowed_models,
        created_at: now_ms,
        revoked_at: None,
        key_hash: KeyHash::of(secret.expose_secret()).to_hex(),
    };
    Ok((record, secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_key_stores_only_hash_and_prefix() {
        let (rec, secret) = new_key(
            NewKey {
                name: "ci".into(),
                ..NewKey::default()
            },
            5,
        )
        .unwrap();
        let secret = secret.expose_secret();
        assert!(secret.starts_with("sy-"));
        assert_eq!(secret.len(), 3 + 43);
        assert_eq!(rec.prefix, &secret[..8]);
        assert_eq!(rec.key_hash, KeyHash::of(secret).to_hex());
        assert_eq!(rec.created_at, 5);
        assert!(rec.id.starts_with("key_"));
    }

    #[test]
    fn invalid_fields_are_named() {
        let bad = |spec: NewKey| new_key(spec, 0).unwrap_err();
        assert_eq!(bad(NewKey::default()), "name: must be 1-128 characters");
        assert_eq!(
            bad(NewKey {
                name: "x".into(),
                scopes: vec!["root".into()],
                ..NewKey::default()
            }),
            "scopes: unknown scope `root` (known: admin, lease:exclusive)"
        );
        assert!(bad(NewKey {
            name: "x".into(),
            id: Some("a b".into()),
            ..NewKey::default()
        })
        .starts_with("id: "));
    }
}
