//! Upstream credentials at rest: sealed with AES-256-GCM under a key kept outside the
//! database.
//!
//! A stored credential reads `enc:v1:<key id>:<base64(nonce ‖ ciphertext ‖ tag)>`, with
//! a fresh random 96-bit nonce per value. The key id (8 hex digits of a SHA-256 of the
//! key) names the key a value was sealed with, so a wrong key is told apart from a
//! damaged value, and during a rotation each value opens with the key it names. The
//! connection id is the associated data: a sealed credential copied into another
//! connection's row does not open there.
//!
//! The key is 32 random bytes, written in base64. It comes from the environment or from
//! a key file (owner-only) holding the current key on its first key line and, during a
//! rotation, previous keys on the lines after it (accepted for reading only).

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use secrecy::zeroize::Zeroizing;
use secrecy::{ExposeSecret, SecretBox, SecretString};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Prefix of a sealed credential; a stored value without it is plaintext from before
/// encryption at rest, sealed on the next start.
pub const SEALED_PREFIX: &str = "enc:v1:";

/// Length of a key in bytes.
pub const KEY_LEN: usize = 32;

/// Domain separation for key ids, so an id is no plain hash of the key.
const KEY_ID_CONTEXT: &[u8] = b"switchyard secret key id\0";

/// Problems with a key or the key file.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{0}: must be 32 random bytes in base64, like the output of `switchyard secret-key generate` or `openssl rand -base64 32` ({1})")]
    Format(String, String),
    #[error("secret key file {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("secret key file {0} holds no key")]
    Empty(PathBuf),
    #[error("the system's random number generator failed")]
    Random,
    #[error("AES-256-GCM failed")]
    Crypto,
}

/// The short public name of a key: 8 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId([u8; 4]);

impl KeyId {
    pub(crate) fn parse(s: &str) -> Option<Self> {
        if s.len() != 8 {
            return None;
        }
        let mut out = [0u8; 4];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(s.get(i * 2..i * 2 + 2)?, 16).ok()?;
        }
        Some(Self(out))
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({self})")
    }
}

/// One 256-bit key; wiped from memory on drop, redacted in `Debug`.
pub struct SecretKey {
    bytes: SecretBox<[u8; KEY_LEN]>,
    id: KeyId,
}

impl Clone for SecretKey {
    fn clone(&self) -> Self {
        Self::from_bytes(self.bytes.expose_secret())
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl SecretKey {
    fn from_bytes(bytes: &[u8; KEY_LEN]) -> Self {
        let bytes = SecretBox::init_with_mut(|b: &mut [u8; KEY_LEN]| b.copy_from_slice(bytes));
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(KEY_ID_CONTEXT);
        ctx.update(bytes.expose_secret());
        let digest = ctx.finish();
        let mut id = [0u8; 4];
        id.copy_from_slice(&digest.as_ref()[..4]);
        Self {
            bytes,
            id: KeyId(id),
        }
    }

    /// A new random key.
    pub fn generate() -> Result<Self, KeyError> {
        let mut raw = Zeroizing::new([0u8; KEY_LEN]);
        SystemRandom::new()
            .fill(raw.as_mut())
            .map_err(|_| KeyError::Random)?;
        Ok(Self::from_bytes(&raw))
    }

    /// Parses a key written in base64 (standard or URL-safe, padded or not); `what`
    /// names its origin in the error.
    pub fn parse(what: &str, text: &str) -> Result<Self, KeyError> {
        let text = text.trim();
        let decoded = [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
            .iter()
            .find_map(|e| e.decode(text).ok())
            .map(Zeroizing::new)
            .ok_or_else(|| KeyError::Format(what.to_owned(), "not base64".to_owned()))?;
        let bytes: &[u8; KEY_LEN] = decoded.as_slice().try_into().map_err(|_| {
            KeyError::Format(what.to_owned(), format!("got {} bytes", decoded.len()))
        })?;
        Ok(Self::from_bytes(bytes))
    }

    pub fn id(&self) -> KeyId {
        self.id
    }

    /// The key in standard base64, as `parse` reads it.
    pub fn to_base64(&self) -> SecretString {
        SecretString::from(STANDARD.encode(self.bytes.expose_secret()))
    }

    fn aead(&self) -> Result<LessSafeKey, KeyError> {
        let unbound = UnboundKey::new(&AES_256_GCM, self.bytes.expose_secret())
            .map_err(|_| KeyError::Crypto)?;
        Ok(LessSafeKey::new(unbound))
    }

    /// Seals `plaintext` for the connection `aad`.
    pub(crate) fn seal(&self, aad: &str, plaintext: &str) -> Result<String, KeyError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| KeyError::Random)?;
        let mut buf = Zeroizing::new(Vec::with_capacity(NONCE_LEN + plaintext.len() + 16));
        buf.extend_from_slice(plaintext.as_bytes());
        self.aead()?
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad.as_bytes()),
                &mut *buf,
            )
            .map_err(|_| KeyError::Crypto)?;
        let mut out = Vec::with_capacity(NONCE_LEN + buf.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&buf);
        Ok(format!(
            "{SEALED_PREFIX}{}:{}",
            self.id,
            STANDARD.encode(out)
        ))
    }

    /// Opens a sealed body (nonce ‖ ciphertext ‖ tag); `None` when it does not
    /// authenticate under this key and `aad`.
    pub(crate) fn open(&self, aad: &str, body: &[u8]) -> Option<SecretString> {
        if body.len() < NONCE_LEN {
            return None;
        }
        let (nonce, sealed) = body.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = Zeroizing::new(sealed.to_vec());
        let plain = self
            .aead()
            .ok()?
            .open_in_place(nonce, Aad::from(aad.as_bytes()), &mut buf)
            .ok()?;
        std::str::from_utf8(plain).ok().map(SecretString::from)
    }
}

/// What a stored credential column holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stored<'a> {
    /// No credential.
    Empty,
    /// Plaintext written before encryption at rest.
    Plain(&'a str),
    /// Sealed with the key `key`; `body` is the decoded nonce ‖ ciphertext ‖ tag.
    Sealed { key: KeyId, body: Vec<u8> },
    /// Has the prefix but is not a well-formed sealed value.
    Damaged,
}

pub(crate) fn classify(stored: &str) -> Stored<'_> {
    if stored.is_empty() {
        return Stored::Empty;
    }
    let Some(rest) = stored.strip_prefix(SEALED_PREFIX) else {
        return Stored::Plain(stored);
    };
    let parsed = rest.split_once(':').and_then(|(id, b64)| {
        Some(Stored::Sealed {
            key: KeyId::parse(id)?,
            body: STANDARD.decode(b64).ok()?,
        })
    });
    parsed.unwrap_or(Stored::Damaged)
}

/// The keys a process holds: the current one (sealing and opening) and previous ones
/// (opening only, during a rotation). When they came from a key file, the store re-reads
/// it on meeting a key it does not hold: that is how a running gateway follows a
/// rotation made by `switchyard secret-key rotate`.
#[derive(Debug, Clone)]
pub struct Keyring {
    current: SecretKey,
    previous: Vec<SecretKey>,
    file: Option<PathBuf>,
}

impl Keyring {
    /// Fixed keys (from the environment): never re-read.
    pub fn new(current: SecretKey, previous: Vec<SecretKey>) -> Self {
        Self {
            current,
            previous,
            file: None,
        }
    }

    /// A random key for a throw-away database (tests).
    pub fn ephemeral() -> Result<Self, KeyError> {
        Ok(Self::new(SecretKey::generate()?, Vec::new()))
    }

    /// Reads a key file: comment lines (`#`) and blank lines are skipped, the first key
    /// line is the current key, later ones are previous keys.
    pub fn from_file(path: &Path) -> Result<Self, KeyError> {
        let text =
            Zeroizing::new(
                std::fs::read_to_string(path).map_err(|source| KeyError::File {
                    path: path.to_owned(),
                    source,
                })?,
            );
        let what = path.display().to_string();
        let mut keys = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| SecretKey::parse(&what, l));
        let current = keys
            .next()
            .ok_or_else(|| KeyError::Empty(path.to_owned()))??;
        let previous = keys.collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            current,
            previous,
            file: Some(path.to_owned()),
        })
    }

    pub fn current(&self) -> &SecretKey {
        &self.current
    }

    pub fn previous(&self) -> &[SecretKey] {
        &self.previous
    }

    /// The key file these keys were read from, if any.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// The held key with this id.
    pub fn key(&self, id: KeyId) -> Option<&SecretKey> {
        std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|k| k.id == id)
    }

    /// Makes `new` the current key, keeping the old one for reading.
    pub(crate) fn advance(&mut self, new: SecretKey) {
        let old = std::mem::replace(&mut self.current, new);
        self.previous
            .retain(|k| k.id != self.current.id && k.id != old.id);
        self.previous.insert(0, old);
    }
}

fn key_file_text(current: &SecretKey, previous: &[SecretKey]) -> Zeroizing<String> {
    let mut text = Zeroizing::new(String::from(
        "# Switchyard secret key: it encrypts the upstream credentials in switchyard.db.\n\
         # Keep it owner-only, and back it up apart from the database (README: \"Secrets at rest\").\n",
    ));
    text.push_str(current.to_base64().expose_secret());
    text.push('\n');
    if !previous.is_empty() {
        text.push_str("# Previous keys, still accepted for reading while a rotation completes:\n");
        for k in previous {
            text.push_str(k.to_base64().expose_secret());
            text.push('\n');
        }
    }
    text
}

/// Writes `contents` to a fresh owner-only (0600) file next to `path`, synced to disk.
fn write_temp(path: &Path, contents: &str) -> std::io::Result<PathBuf> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = crate::sqlite::private_file_options()
        .create_new(true)
        .open(&tmp)?;
    f.write_all(contents.as_bytes())?;
    f.sync_all()?;
    Ok(tmp)
}

fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

/// Replaces the key file atomically (write, sync, rename) with these keys.
pub fn write_key_file(
    path: &Path,
    current: &SecretKey,
    previous: &[SecretKey],
) -> Result<(), KeyError> {
    let err = |source| KeyError::File {
        path: path.to_owned(),
        source,
    };
    let tmp = write_temp(path, &key_file_text(current, previous)).map_err(err)?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(err(e));
    }
    sync_dir(path);
    Ok(())
}

/// Creates the key file with a new key unless it exists. Returns the keys in the file
/// and whether this call created it (two processes starting at once agree on one key:
/// the file appears complete or not at all).
pub fn create_key_file(path: &Path) -> Result<(Keyring, bool), KeyError> {
    let err = |source| KeyError::File {
        path: path.to_owned(),
        source,
    };
    let key = SecretKey::generate()?;
    let tmp = write_temp(path, &key_file_text(&key, &[])).map_err(err)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            sync_dir(path);
            Ok((Keyring::from_file(path)?, true))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Ok((Keyring::from_file(path)?, false))
        }
        Err(e) => Err(err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_with_their_key_and_connection() {
        let k = SecretKey::generate().unwrap();
        let other = SecretKey::generate().unwrap();
        let sealed = k.seal("conn-a", "sk-plain-credential").unwrap();
        assert!(sealed.starts_with(&format!("{SEALED_PREFIX}{}:", k.id())));
        assert!(!sealed.contains("sk-plain-credential"));
        let Stored::Sealed { key, body } = classify(&sealed) else {
            panic!("not sealed: {sealed}");
        };
        assert_eq!(key, k.id());
        assert_eq!(
            k.open("conn-a", &body).unwrap().expose_secret(),
            "sk-plain-credential"
        );
        assert!(k.open("conn-b", &body).is_none());
        assert!(other.open("conn-a", &body).is_none());
        // Two seals of one value differ (fresh nonces).
        assert_ne!(sealed, k.seal("conn-a", "sk-plain-credential").unwrap());
    }

    #[test]
    fn stored_values_are_classified() {
        assert_eq!(classify(""), Stored::Empty);
        assert_eq!(classify("sk-123"), Stored::Plain("sk-123"));
        assert_eq!(classify("enc:v1:zz:AAAA"), Stored::Damaged);
        assert_eq!(classify("enc:v1:01020304:!!"), Stored::Damaged);
    }

    #[test]
    fn keys_parse_from_base64_of_32_bytes_only() {
        let k = SecretKey::generate().unwrap();
        let text = k.to_base64();
        assert_eq!(text.expose_secret().len(), 44);
        let again = SecretKey::parse("X", text.expose_secret()).unwrap();
        assert_eq!(again.id(), k.id());
        let unpadded = text.expose_secret().trim_end_matches('=').to_owned();
        assert_eq!(SecretKey::parse("X", &unpadded).unwrap().id(), k.id());
        assert_eq!(
            SecretKey::parse("SWITCHYARD_SECRET_KEY", "c2hvcnQ=")
                .unwrap_err()
                .to_string(),
            "SWITCHYARD_SECRET_KEY: must be 32 random bytes in base64, like the output of \
             `switchyard secret-key generate` or `openssl rand -base64 32` (got 5 bytes)"
        );
        assert!(SecretKey::parse("X", "not base64!").is_err());
        assert!(!format!("{k:?}").contains(text.expose_secret()));
    }

    #[test]
    fn key_files_hold_current_then_previous_keys_and_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret-key");
        let (ring, created) = create_key_file(&path).unwrap();
        assert!(created);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let (again, created) = create_key_file(&path).unwrap();
        assert!(!created);
        assert_eq!(again.current().id(), ring.current().id());
        let new = SecretKey::generate().unwrap();
        write_key_file(&path, &new, std::slice::from_ref(ring.current())).unwrap();
        let read = Keyring::from_file(&path).unwrap();
        assert_eq!(read.current().id(), new.id());
        assert_eq!(read.previous().len(), 1);
        assert!(read.key(ring.current().id()).is_some());
        assert_eq!(read.file(), Some(path.as_path()));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file is left behind"
        );
    }
}
