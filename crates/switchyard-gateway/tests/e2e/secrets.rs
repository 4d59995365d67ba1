//! Secrets at rest: an owner-only data directory, credentials encrypted in the database
//! with a key kept outside it, plaintext rows from earlier versions migrated, clear
//! start errors for a wrong or missing key, and key rotation under a running gateway.

use reqwest::Method;
use secrecy::ExposeSecret;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use switchyard_gateway::bootstrap::{self, DB_FILE, SECRET_KEY_FILE};
use switchyard_gateway::clock::SystemClock;
use switchyard_gateway::config::{PREVIOUS_SECRET_KEYS_ENV, SECRET_KEY_ENV};
use switchyard_store::{Keyring, SecretKey};
use switchyard_test_support::*;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// The credential column as stored, read around the gateway.
async fn raw_credential(h: &Harness, connection: &str) -> String {
    let sql = format!("SELECT credential FROM connections WHERE id = '{connection}'");
    h.with_store(move |s| s.query_raw(&sql).unwrap())
        .await
        .pop()
        .flatten()
        .unwrap()
}

/// Every byte the database keeps on disk (the file and its write-ahead log).
fn database_bytes(data_dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for name in [DB_FILE, "switchyard.db-wal"] {
        if let Ok(b) = std::fs::read(data_dir.join(name)) {
            out.extend(b);
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// One chat on `alpha-1`, checking the upstream saw `cred`.
async fn chat_reaches_alpha_with(h: &Harness, cred: &str) {
    let before = h.by_credential(cred).await;
    let r = h.chat(chat_body("alpha/mock-small", false)).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(h.by_credential(cred).await, before + 1);
}

fn key_id_of_file(data_dir: &Path) -> String {
    Keyring::from_file(&data_dir.join(SECRET_KEY_FILE))
        .unwrap()
        .current()
        .id()
        .to_string()
}

#[tokio::test]
async fn the_data_directory_and_every_file_in_it_are_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("fresh/data");
    let cfg = Config::new().resolve(&data, &[]);
    let prepared = bootstrap::prepare(&cfg, Arc::new(SystemClock))
        .await
        .unwrap();
    assert_eq!(mode(&data), 0o700);
    for name in [
        DB_FILE,
        "switchyard.db-wal",
        "switchyard.db-shm",
        SECRET_KEY_FILE,
        bootstrap::ADMIN_TOKEN_FILE,
    ] {
        assert_eq!(mode(&data.join(name)), 0o600, "{name}");
    }
    prepared
        .writer
        .finish(std::time::Duration::from_secs(1))
        .await;
    drop(prepared.state);

    // A data directory and database an earlier version left open to other users are
    // tightened at the next start.
    for (p, m) in [(&data, 0o755), (&data.join(DB_FILE), 0o644)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }
    let again = bootstrap::prepare(&cfg, Arc::new(SystemClock))
        .await
        .unwrap();
    assert_eq!((mode(&data), mode(&data.join(DB_FILE))), (0o700, 0o600));
    again.writer.finish(std::time::Duration::from_secs(1)).await;

    // A directory of the operator's without our database is left as it is (warned).
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o750)).unwrap();
    let cfg = Config::new().resolve(&theirs, &[]);
    let store = bootstrap::open_store(&cfg).unwrap();
    drop(store);
    assert_eq!(mode(&theirs), 0o750);
    assert_eq!(mode(&theirs.join(DB_FILE)), 0o600);
}

#[tokio::test]
async fn credentials_are_encrypted_at_rest_and_reach_the_upstream_after_restart() {
    let mut h = Harness::start().await;
    chat_reaches_alpha_with(&h, CRED_ALPHA).await;
    let key_id = key_id_of_file(&h.data_dir);
    for (conn, cred) in [("alpha-1", CRED_ALPHA), ("beta-1", CRED_BETA)] {
        let raw = raw_credential(&h, conn).await;
        assert!(raw.starts_with(&format!("enc:v1:{key_id}:")), "{raw}");
        assert!(!raw.contains(cred), "{raw}");
    }
    let cfg = h.config();
    assert!(cfg.secret_keys.is_none(), "the harness uses the key file");
    let debug = format!("{cfg:?}");
    for secret in [CRED_ALPHA, CRED_BETA, KEY, OPS_KEY, ADMIN] {
        assert!(!debug.contains(secret), "Debug shows `{secret}`");
    }
    h.stop().await;
    if !h.is_postgres() {
        let bytes = database_bytes(&h.data_dir);
        assert!(!bytes.is_empty());
        for cred in [CRED_ALPHA, CRED_BETA] {
            assert!(!contains(&bytes, cred), "`{cred}` is in the database file");
        }
    }
    h.restart().await;
    chat_reaches_alpha_with(&h, CRED_ALPHA).await;
    assert_eq!(key_id_of_file(&h.data_dir), key_id, "the key file is kept");
}

/// The standard configuration without declared credentials: the database's stay.
fn no_declared_credentials(mock_url: &str) -> Config {
    Config::standard(mock_url)
        .edit_connection("alpha-1", Connection::without_credential)
        .edit_connection("beta-1", Connection::without_credential)
}

#[tokio::test]
async fn plaintext_credentials_written_by_an_earlier_version_are_encrypted_at_start() {
    let mut h = Harness::start_with(no_declared_credentials, &[]).await;
    h.stop().await;
    // The data directory as an earlier version left it: credentials in plaintext, no
    // key id in the database, no key file.
    h.with_store(|s| {
        for (conn, cred) in [("alpha-1", CRED_ALPHA), ("beta-1", CRED_BETA)] {
            s.execute_raw(&format!(
                "UPDATE connections SET credential = '{cred}' WHERE id = '{conn}'"
            ))
            .unwrap();
        }
        s.execute_raw("DELETE FROM meta WHERE key = 'secret_key_id'")
            .unwrap();
    })
    .await;
    std::fs::remove_file(h.data_dir.join(SECRET_KEY_FILE)).unwrap();

    h.restart().await;
    let key_id = key_id_of_file(&h.data_dir);
    for (conn, cred) in [("alpha-1", CRED_ALPHA), ("beta-1", CRED_BETA)] {
        let raw = raw_credential(&h, conn).await;
        assert!(raw.starts_with(&format!("enc:v1:{key_id}:")), "{raw}");
        assert!(!raw.contains(cred));
    }
    chat_reaches_alpha_with(&h, CRED_ALPHA).await;
    h.stop().await;
    if !h.is_postgres() {
        assert!(!contains(&database_bytes(&h.data_dir), CRED_ALPHA));
    }
}

#[tokio::test]
async fn a_wrong_or_missing_key_fails_start_saying_so_and_changes_nothing() {
    let (other, wrong) = (
        SecretKey::generate().unwrap(),
        SecretKey::generate().unwrap(),
    );
    let mut h = Harness::start_with(Config::standard, &[]).await;
    h.stop().await;
    let file_key = key_id_of_file(&h.data_dir);
    let before = raw_credential(&h, "alpha-1").await;

    // A key in the environment that is not the database's.
    h.set_var(SECRET_KEY_ENV, Some(wrong.to_base64().expose_secret()));
    let err = h.try_launch().await.unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "secret key: the credential of connection `alpha-1` is encrypted with secret key \
             {file_key}, but the key given is {}; SWITCHYARD_SECRET_KEY must hold the key the \
             database was written with (after replacing a key, give the old one in \
             SWITCHYARD_SECRET_KEY_PREVIOUS for one start)",
            wrong.id()
        )
    );

    // The key file lost: no key is generated over a database that needs the old one.
    h.set_var(SECRET_KEY_ENV, None);
    let key_file = h.data_dir.join(SECRET_KEY_FILE);
    let saved = std::fs::read(&key_file).unwrap();
    std::fs::remove_file(&key_file).unwrap();
    let err = h.try_launch().await.unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "secret key: the credential of connection `alpha-1` is encrypted with secret key {file_key}, but the key given is "
        )),
        "{err}"
    );
    assert!(
        err.ends_with(&format!(
            "; the database holds encrypted credentials but no secret key was found \
             (SWITCHYARD_SECRET_KEY is unset and {} did not exist): restore the key file, or \
             set SWITCHYARD_SECRET_KEY to the key the database was written with",
            key_file.display()
        )),
        "{err}"
    );
    assert!(!key_file.exists(), "the key made for nothing is removed");

    // A key file with another key names the file.
    switchyard_store::secrets::write_key_file(&key_file, &other, &[]).unwrap();
    let err = h.try_launch().await.unwrap_err().to_string();
    assert!(
        err.ends_with(&format!(
            "; {} does not hold the key the database was written with: restore that file, or \
             set SWITCHYARD_SECRET_KEY to the right key",
            key_file.display()
        )),
        "{err}"
    );

    // Nothing was rewritten; with the right key back, the gateway starts and serves.
    std::fs::write(&key_file, saved).unwrap();
    assert_eq!(raw_credential(&h, "alpha-1").await, before);
    h.try_launch().await.unwrap();
    chat_reaches_alpha_with(&h, CRED_ALPHA).await;
}

#[tokio::test]
async fn rotation_reencrypts_everything_and_the_running_gateway_keeps_reaching_the_upstream() {
    let mut h = Harness::start().await;
    chat_reaches_alpha_with(&h, CRED_ALPHA).await;
    let old = key_id_of_file(&h.data_dir);
    let version_before = h.admin_json("/api/monitoring/health").await["config_version"]
        .as_i64()
        .unwrap();

    // `switchyard secret-key rotate`, from another process, with the gateway running
    // (on the blocking pool, as the command runs it).
    let cfg = h.config();
    let r = tokio::task::spawn_blocking(move || bootstrap::rotate_secret_key(&cfg))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.credentials, 2);
    assert_eq!(r.old.to_string(), old);
    assert_ne!(r.new.to_string(), old);
    let keys = Keyring::from_file(&h.data_dir.join(SECRET_KEY_FILE)).unwrap();
    assert_eq!(keys.current().id(), r.new);
    assert!(
        keys.previous().is_empty(),
        "the old key is dropped once done"
    );
    assert_eq!(mode(&h.data_dir.join(SECRET_KEY_FILE)), 0o600);
    for (conn, cred) in [("alpha-1", CRED_ALPHA), ("beta-1", CRED_BETA)] {
        let raw = raw_credential(&h, conn).await;
        assert!(raw.starts_with(&format!("enc:v1:{}:", r.new)), "{raw}");
        assert!(!raw.contains(cred));
    }

    // The running gateway reloads the re-encrypted rows (re-reading the key file) ...
    eventually("the gateway reloads the rotated configuration", || async {
        h.admin_json("/api/monitoring/health").await["config_version"]
            .as_i64()
            .unwrap()
            > version_before
    })
    .await;
    chat_reaches_alpha_with(&h, CRED_ALPHA).await;
    // ... and seals what it writes with the new key.
    let r2 = h
        .admin_send(
            Method::PUT,
            "/api/connections/alpha-1",
            json!({"id": "alpha-1", "provider": "alpha", "auth_class": "apikey",
                   "credential": "cred-alpha-after-rotation", "disable_cooling": true}),
        )
        .await;
    assert_eq!(r2.status(), 200, "{}", r2.text().await.unwrap());
    assert!(raw_credential(&h, "alpha-1")
        .await
        .starts_with(&format!("enc:v1:{}:", r.new)));
    chat_reaches_alpha_with(&h, "cred-alpha-after-rotation").await;

    // A restart reads the new key from the file.
    h.restart().await;
    chat_reaches_alpha_with(&h, CRED_ALPHA).await;
}

#[tokio::test]
async fn a_key_in_the_environment_is_rotated_by_a_restart_with_the_previous_key() {
    let (k1, k2) = (
        SecretKey::generate().unwrap(),
        SecretKey::generate().unwrap(),
    );
    let (t1, t2) = (k1.to_base64(), k2.to_base64());
    let mut h =
        Harness::start_with(Config::standard, &[(SECRET_KEY_ENV, t1.expose_secret())]).await;
    assert!(!h.data_dir.join(SECRET_KEY_FILE).exists(), "no key file");
    assert!(raw_credential(&h, "alpha-1")
        .await
        .starts_with(&format!("enc:v1:{}:", k1.id())));
    chat_reaches_alpha_with(&h, CRED_ALPHA).await;

    // The rotate command cannot reach a running gateway's environment: refused.
    let err = bootstrap::rotate_secret_key(&h.config())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("secret key: SWITCHYARD_SECRET_KEY is set"),
        "{err}"
    );

    h.stop().await;
    h.set_var(SECRET_KEY_ENV, Some(t2.expose_secret()));
    h.set_var(PREVIOUS_SECRET_KEYS_ENV, Some(t1.expose_secret()));
    h.try_launch().await.unwrap();
    for conn in ["alpha-1", "beta-1"] {
        let raw = raw_credential(&h, conn).await;
        assert!(raw.starts_with(&format!("enc:v1:{}:", k2.id())), "{raw}");
    }
    chat_reaches_alpha_with(&h, CRED_ALPHA).await;

    // From then on the new key alone does, and the old one no longer.
    h.stop().await;
    h.set_var(PREVIOUS_SECRET_KEYS_ENV, None);
    h.try_launch().await.unwrap();
    chat_reaches_alpha_with(&h, CRED_ALPHA).await;
    h.stop().await;
    h.set_var(SECRET_KEY_ENV, Some(t1.expose_secret()));
    assert!(h.try_launch().await.is_err());
}
