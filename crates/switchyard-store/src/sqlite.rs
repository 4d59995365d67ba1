//! The SQLite store: opening the database (owner-only, WAL, migrations), its one
//! connection's lock, the configuration's transaction and version, the secret key and
//! the sealing of credentials, and the SQL helpers the domain modules share. The
//! domains' methods are beside it, one module each: `config` (providers,
//! connections, combos, aliases, settings), `keys`, `log` (the request log), and
//! [`crate::quota`], [`crate::resilience`], [`crate::sessions`], [`crate::leases`].

use crate::config::{
    query_aliases, query_combos, query_connections, query_providers, query_settings,
};
use crate::keys::query_keys;
use crate::migrations::MIGRATIONS;
use crate::records::*;
use crate::secrets::{classify, KeyId, Keyring, SecretKey, Stored};
use crate::{Result, StoreError};
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction, TransactionBehavior};
use secrecy::zeroize::Zeroizing;
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// How long a writer waits for another process (the CLI) holding the write lock. Config
/// writes are tiny, so five seconds only expires when something is truly stuck.
const BUSY_TIMEOUT_MS: u64 = 5_000;

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Database(e.to_string())
    }
}

/// How a save treats an existing row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveMode {
    /// Fail with `Conflict` when the row exists.
    Create,
    /// Fail with `NotFound` when the row does not exist.
    Update,
    /// Insert or replace (used when applying the config file).
    Upsert,
}

/// The SQLite store. One connection behind a mutex: writes are serialised anyway, and
/// nothing on the request path waits for it.
///
/// Connection credentials are sealed with the keyring's current key on the way in and
/// opened in [`Store::load_config`] only (see [`crate::secrets`]); every other read
/// returns records without them.
#[derive(Debug)]
pub struct Store {
    conn: Mutex<Connection>,
    keys: Mutex<Keyring>,
}

/// `meta` key of the id of the key every sealed credential is sealed with.
const KEY_ID_META: &str = "secret_key_id";

/// Options that create a file owner-only (0600) whatever the umask.
pub(crate) fn private_file_options() -> std::fs::OpenOptions {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts
}

/// Makes an existing file owner-only (0600) if it is not already.
pub fn make_private(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)?.permissions().mode() & 0o777;
        if mode != 0o600 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
            tracing::info!(path = %path.display(), from = format!("{mode:o}"), "Made the file owner-only (0600).");
        }
    }
    Ok(())
}

/// The files SQLite keeps beside the database in WAL mode.
fn sidecars(path: &Path) -> [PathBuf; 2] {
    let name = path.as_os_str().to_owned();
    let with = |suffix: &str| {
        let mut n = name.clone();
        n.push(suffix);
        PathBuf::from(n)
    };
    [with("-wal"), with("-shm")]
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

pub(crate) fn to_json<T: Serialize>(v: &T) -> Result<String> {
    Ok(serde_json::to_string(v)?)
}

pub(crate) fn from_json<T: DeserializeOwned>(s: &str) -> Result<T> {
    Ok(serde_json::from_str(s)?)
}

/// Every `(text, text)` row of a two-column query.
pub(crate) fn query_text_pairs(conn: &Connection, sql: &str) -> Result<Vec<(String, String)>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

pub(crate) fn opt_from_json<T: DeserializeOwned>(s: Option<String>) -> Result<Option<T>> {
    s.map(|s| from_json(&s)).transpose()
}

/// Serde names of enum values (`"openai"`) as stored in text columns.
pub(crate) fn enum_to_str<T: Serialize>(v: &T) -> Result<String> {
    match serde_json::to_value(v)? {
        serde_json::Value::String(s) => Ok(s),
        other => Ok(other.to_string()),
    }
}

pub(crate) fn enum_from_str<T: DeserializeOwned>(s: &str) -> Result<T> {
    Ok(serde_json::from_value(serde_json::Value::String(
        s.to_owned(),
    ))?)
}

pub(crate) fn u64_col(row: &Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    let v: i64 = row.get(idx)?;
    Ok(u64::try_from(v).unwrap_or(0))
}

pub(crate) fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Store {
    /// Opens (creating if needed) the database at `path`, applies migrations, and seals
    /// with the keyring's current key every credential not yet sealed with it (plaintext
    /// from before encryption at rest, or sealed with a previous key), in one
    /// transaction. A credential sealed with a key the keyring does not hold fails the
    /// open ([`StoreError::UnknownKey`]) and nothing is changed.
    ///
    /// The database file and its `-wal` and `-shm` files are made owner-only (0600).
    pub fn open(path: &Path, keys: Keyring) -> Result<Self> {
        // Created owner-only before SQLite opens it, so the database never exists with
        // wider permissions; SQLite gives its -wal and -shm files the same mode.
        private_file_options()
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io_err(path))?;
        make_private(path).map_err(io_err(path))?;
        let store = Self::init(Connection::open(path)?, keys)?;
        for side in sidecars(path) {
            if side.exists() {
                make_private(&side).map_err(io_err(&side))?;
            }
        }
        Ok(store)
    }

    /// A private in-memory database with a throw-away key, for unit tests.
    pub fn open_in_memory() -> Result<Self> {
        Self::init(Connection::open_in_memory()?, Keyring::ephemeral()?)
    }

    fn init(mut conn: Connection, keys: Keyring) -> Result<Self> {
        conn.busy_timeout(std::time::Duration::from_millis(BUSY_TIMEOUT_MS))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        migrate(&mut conn)?;
        seal_stored(&mut conn, &keys)?;
        Ok(Self {
            conn: Mutex::new(conn),
            keys: Mutex::new(keys),
        })
    }

    fn keyring(&self) -> MutexGuard<'_, Keyring> {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The key new credentials are sealed with.
    pub fn current_key(&self) -> SecretKey {
        self.keyring().current().clone()
    }

    /// Re-reads the key file, if the keys came from one. Whether it was re-read.
    fn reread_keys(&self) -> Result<bool> {
        let Some(path) = self.keyring().file().map(Path::to_owned) else {
            return Ok(false);
        };
        let fresh = Keyring::from_file(&path)?;
        tracing::info!(path = %path.display(), key = %fresh.current().id(), "Re-read the secret key file.");
        *self.keyring() = fresh;
        Ok(true)
    }

    /// The held key with this id, re-reading the key file once when it is not held.
    fn opening_key(&self, id: KeyId, connection: &str) -> Result<SecretKey> {
        if let Some(k) = self.keyring().key(id) {
            return Ok(k.clone());
        }
        if self.reread_keys()? {
            if let Some(k) = self.keyring().key(id) {
                return Ok(k.clone());
            }
        }
        Err(StoreError::UnknownKey {
            connection: connection.to_owned(),
            found: id,
            current: self.keyring().current().id(),
        })
    }

    /// The key to seal with inside the write transaction `tx`: the key the database's
    /// credentials are sealed with (its id is in `meta`), so one database never mixes
    /// keys. When another process re-encrypted them with a new key (`switchyard
    /// secret-key rotate`), the key file is re-read; a process that cannot learn the
    /// new key refuses to write. While no credential is sealed at all, any key will do,
    /// and this process's becomes the database's.
    pub(crate) fn sealing_key(&self, tx: &Transaction<'_>) -> Result<SecretKey> {
        let Some(db) = stored_key_id(tx)? else {
            return Ok(self.current_key());
        };
        if let Some(k) = self.keyring().key(db) {
            return Ok(k.clone());
        }
        if self.reread_keys()? {
            if let Some(k) = self.keyring().key(db) {
                return Ok(k.clone());
            }
        }
        let any_sealed: bool = tx.query_row(
            "SELECT EXISTS(SELECT 1 FROM connections WHERE substr(credential, 1, 7) = ?1)",
            [crate::secrets::SEALED_PREFIX],
            |r| r.get(0),
        )?;
        if !any_sealed {
            let current = self.current_key();
            set_stored_key_id(tx, current.id())?;
            return Ok(current);
        }
        Err(StoreError::KeyChanged {
            database: db,
            current: self.keyring().current().id(),
        })
    }

    /// Opens a stored credential of connection `id`.
    fn reveal(&self, id: &str, stored: &str) -> Result<SecretString> {
        match classify(stored) {
            Stored::Empty => Ok(SecretString::default()),
            // Sealed at open; only another, older process could still write plaintext.
            Stored::Plain(p) => Ok(SecretString::from(p)),
            Stored::Damaged => Err(StoreError::Damaged {
                connection: id.to_owned(),
            }),
            Stored::Sealed { key, body } => {
                self.opening_key(key, id)?.open(id, &body).ok_or_else(|| {
                    StoreError::Undecryptable {
                        connection: id.to_owned(),
                        key,
                    }
                })
            }
        }
    }

    /// Re-encrypts every credential with `new` in one transaction, then makes `new`
    /// the current key (the old one is kept for reading). Bumps `config_version`, so
    /// running gateways reload — and, when their keys come from the key file, re-read
    /// it. Returns how many credentials were re-encrypted.
    pub fn rotate_key(&self, new: &SecretKey) -> Result<usize> {
        let count = self.config_write(|tx| {
            let rows = stored_credentials(tx)?;
            for (id, stored) in &rows {
                let plain = self.reveal(id, stored)?;
                let sealed = new.seal(id, plain.expose_secret())?;
                tx.execute(
                    "UPDATE connections SET credential = ?2 WHERE id = ?1",
                    params![id, sealed],
                )?;
            }
            set_stored_key_id(tx, new.id())?;
            Ok(rows.len())
        })?;
        self.keyring().advance(new.clone());
        Ok(count)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs a configuration change in one transaction and bumps `config_version`. The
    /// transaction takes the write lock up front (`BEGIN IMMEDIATE`), so what it reads
    /// (the key id checked before sealing) cannot change under it.
    pub(crate) fn config_write<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.execute(
            "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'config_version'",
            [],
        )?;
        tx.commit()?;
        Ok(out)
    }

    /// Runs several configuration writes in one transaction: all of them land, or none.
    pub fn batch<T>(&self, f: impl FnOnce(&Batch<'_>) -> Result<T>) -> Result<T> {
        self.config_write(|tx| f(&Batch { tx, store: self }))
    }

    /// The configuration version; it changes with every configuration write by any process.
    pub fn config_version(&self) -> Result<i64> {
        let conn = self.lock();
        let v: String = conn.query_row(
            "SELECT value FROM meta WHERE key = 'config_version'",
            [],
            |r| r.get(0),
        )?;
        Ok(v.parse().unwrap_or(0))
    }

    /// The hex SHA-256 of the generated admin token, if one was generated.
    pub fn admin_token_hash(&self) -> Result<Option<String>> {
        admin_hash(&self.lock())
    }

    /// Stores the hex SHA-256 of the generated admin token. It is configuration: the
    /// write bumps `config_version`, so running gateways pick the new token up.
    pub fn set_admin_token_hash(&self, hash_hex: &str) -> Result<()> {
        self.config_write(|tx| {
            tx.execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![ADMIN_HASH_META, hash_hex],
            )?;
            Ok(())
        })
    }

    /// Everything the in-memory snapshot is built from, read in one transaction so the
    /// snapshot is consistent. The one read that opens the sealed credentials.
    pub fn load_config(&self) -> Result<ConfigRows> {
        let (mut rows, sealed) = {
            let mut conn = self.lock();
            let tx = conn.transaction()?;
            let version: String = tx.query_row(
                "SELECT value FROM meta WHERE key = 'config_version'",
                [],
                |r| r.get(0),
            )?;
            let (records, sealed): (Vec<_>, Vec<_>) =
                query_connections(&tx, None)?.into_iter().unzip();
            let rows = ConfigRows {
                version: version.parse().unwrap_or(0),
                admin_token_hash: admin_hash(&tx)?,
                providers: query_providers(&tx, None)?,
                connections: records
                    .into_iter()
                    .map(|c| (c, SecretString::default()))
                    .collect(),
                combos: query_combos(&tx, None)?,
                aliases: query_aliases(&tx)?,
                keys: query_keys(&tx, None)?,
                settings: query_settings(&tx)?,
                pools: crate::quota::query_pools(&tx, None)?,
                plans: crate::quota::query_plans(&tx)?,
            };
            tx.commit()?;
            (rows, sealed)
        };
        // Opened outside the database lock: a key-file re-read must not hold it.
        for ((c, cred), stored) in rows.connections.iter_mut().zip(&sealed) {
            *cred = self.reveal(&c.id, stored)?;
        }
        Ok(rows)
    }
}

/// Configuration writes committed together or not at all (see [`Store::batch`]).
#[derive(Debug)]
pub struct Batch<'a> {
    pub(crate) tx: &'a Transaction<'a>,
    pub(crate) store: &'a Store,
}

/// `meta` key of the generated admin token's hash.
const ADMIN_HASH_META: &str = "admin_token_hash";

fn admin_hash(conn: &Connection) -> Result<Option<String>> {
    Ok(conn
        .query_row(
            "SELECT value FROM meta WHERE key = ?1",
            [ADMIN_HASH_META],
            |r| r.get(0),
        )
        .optional()?)
}

fn stored_key_id(conn: &Connection) -> Result<Option<KeyId>> {
    let v: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = ?1",
            [KEY_ID_META],
            |r| r.get(0),
        )
        .optional()?;
    Ok(v.and_then(|v| KeyId::parse(&v)))
}

fn set_stored_key_id(conn: &Connection, id: KeyId) -> Result<()> {
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?1, ?2)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        params![KEY_ID_META, id.to_string()],
    )?;
    Ok(())
}

/// `(connection id, stored credential)` of every connection that has one.
fn stored_credentials(conn: &Connection) -> Result<Vec<(String, String)>> {
    query_text_pairs(
        conn,
        "SELECT id, credential FROM connections WHERE credential != '' ORDER BY id",
    )
}

/// The open-time pass (see [`Store::open`]): checks that every sealed credential opens,
/// seals plaintext ones and re-seals those under a previous key, in one transaction.
fn seal_stored(conn: &mut Connection, keys: &Keyring) -> Result<()> {
    let current = keys.current();
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let (mut sealed, mut resealed) = (0usize, 0usize);
    for (id, stored) in stored_credentials(&tx)? {
        let stored = Zeroizing::new(stored);
        let plain = match classify(&stored) {
            Stored::Empty => continue,
            Stored::Damaged => return Err(StoreError::Damaged { connection: id }),
            Stored::Plain(p) => {
                sealed += 1;
                SecretString::from(p)
            }
            Stored::Sealed { key, body } => {
                let k = keys.key(key).ok_or_else(|| StoreError::UnknownKey {
                    connection: id.clone(),
                    found: key,
                    current: current.id(),
                })?;
                let plain = k
                    .open(&id, &body)
                    .ok_or_else(|| StoreError::Undecryptable {
                        connection: id.clone(),
                        key,
                    })?;
                if key == current.id() {
                    continue;
                }
                resealed += 1;
                plain
            }
        };
        tx.execute(
            "UPDATE connections SET credential = ?2 WHERE id = ?1",
            params![id, current.seal(&id, plain.expose_secret())?],
        )?;
    }
    if stored_key_id(&tx)? != Some(current.id()) {
        set_stored_key_id(&tx, current.id())?;
    }
    if sealed + resealed > 0 {
        // Other processes reload, and re-read a key file whose key they no longer match.
        tx.execute(
            "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'config_version'",
            [],
        )?;
    }
    tx.commit()?;
    if sealed > 0 {
        tracing::info!(count = sealed, key = %current.id(), "Encrypted credentials stored in plaintext by an earlier version.");
    }
    if resealed > 0 {
        tracing::info!(count = resealed, key = %current.id(), "Re-encrypted credentials sealed with a previous secret key.");
    }
    Ok(())
}

fn migrate(conn: &mut Connection) -> Result<()> {
    let supported = i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX);
    let current: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if current > supported {
        return Err(StoreError::SchemaTooNew {
            found: current,
            supported,
        });
    }
    for (i, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(current).unwrap_or(0))
    {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(
            None,
            "user_version",
            i64::try_from(i + 1).unwrap_or(i64::MAX),
        )?;
        tx.commit()?;
        tracing::info!(version = i + 1, "Applied database migration.");
    }
    Ok(())
}

pub(crate) fn check_mode(
    tx: &Transaction<'_>,
    table: &str,
    id_col: &str,
    id: &str,
    kind: &'static str,
    mode: SaveMode,
) -> Result<()> {
    let exists: bool = tx.query_row(
        &format!("SELECT EXISTS(SELECT 1 FROM {table} WHERE {id_col} = ?1)"),
        [id],
        |r| r.get(0),
    )?;
    match (mode, exists) {
        (SaveMode::Create, true) => Err(StoreError::Conflict {
            kind,
            id: id.to_owned(),
        }),
        (SaveMode::Update, false) => Err(StoreError::NotFound {
            kind,
            id: id.to_owned(),
        }),
        _ => Ok(()),
    }
}

pub(crate) fn delete_row(
    tx: &Transaction<'_>,
    table: &str,
    id_col: &str,
    id: &str,
    kind: &'static str,
) -> Result<()> {
    let n = tx.execute(&format!("DELETE FROM {table} WHERE {id_col} = ?1"), [id])?;
    if n == 0 {
        return Err(StoreError::NotFound {
            kind,
            id: id.to_owned(),
        });
    }
    Ok(())
}

pub(crate) fn first<T>(rows: Vec<T>, kind: &'static str, id: &str) -> Result<T> {
    rows.into_iter().next().ok_or_else(|| StoreError::NotFound {
        kind,
        id: id.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_core::domain::{AuthClass, UpstreamFormat};

    fn provider(id: &str) -> ProviderRecord {
        ProviderRecord {
            id: id.into(),
            format: UpstreamFormat::Openai,
            base_url: "http://x.test".into(),
            models: vec!["m".into()],
            prices: Default::default(),
            max_output_tokens: Default::default(),
            context_windows: Default::default(),
            stream_timeouts: Default::default(),
            max_concurrent: None,
        }
    }

    fn connection(id: &str, provider: &str) -> ConnectionRecord {
        ConnectionRecord {
            id: id.into(),
            provider: provider.into(),
            auth_class: AuthClass::Apikey,
            format: None,
            base_url: None,
            enabled: true,
            max_concurrent: Some(2),
            rate_limit_overrides: None,
            provider_specific_data: None,
            disable_cooling: false,
            has_credential: false,
        }
    }

    fn keys() -> Keyring {
        Keyring::ephemeral().unwrap()
    }

    fn secret(s: &str) -> SecretString {
        SecretString::from(s)
    }

    /// The credential column as stored, read around the store.
    fn raw_credential(path: &Path, id: &str) -> String {
        Connection::open(path)
            .unwrap()
            .query_row(
                "SELECT credential FROM connections WHERE id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap()
    }

    fn credential_of(s: &Store, id: &str) -> String {
        let rows = s.load_config().unwrap();
        let (_, cred) = rows.connections.iter().find(|(c, _)| c.id == id).unwrap();
        cred.expose_secret().to_owned()
    }

    #[test]
    fn migrations_are_idempotent_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let k = keys();
        let s = Store::open(&path, k.clone()).unwrap();
        s.save_provider(&provider("p"), SaveMode::Create, 1)
            .unwrap();
        drop(s);
        let s = Store::open(&path, k).unwrap();
        assert_eq!(s.list_providers().unwrap(), vec![provider("p")]);
        assert_eq!(s.config_version().unwrap(), 1);
    }

    #[test]
    fn save_modes_report_conflict_and_not_found() {
        let s = Store::open_in_memory().unwrap();
        s.save_provider(&provider("p"), SaveMode::Create, 1)
            .unwrap();
        assert!(matches!(
            s.save_provider(&provider("p"), SaveMode::Create, 2),
            Err(StoreError::Conflict {
                kind: "provider",
                ..
            })
        ));
        assert!(matches!(
            s.save_provider(&provider("q"), SaveMode::Update, 2),
            Err(StoreError::NotFound {
                kind: "provider",
                ..
            })
        ));
        s.save_provider(&provider("q"), SaveMode::Upsert, 2)
            .unwrap();
        assert_eq!(s.list_providers().unwrap().len(), 2);
    }

    #[test]
    fn credential_is_kept_on_update_without_one_and_never_in_records() {
        let s = Store::open_in_memory().unwrap();
        s.save_provider(&provider("p"), SaveMode::Create, 1)
            .unwrap();
        s.save_connection(
            &connection("c", "p"),
            Some(&secret("secret-1")),
            SaveMode::Create,
            1,
        )
        .unwrap();
        let mut c = connection("c", "p");
        c.enabled = false;
        s.save_connection(&c, None, SaveMode::Update, 2).unwrap();
        let rows = s.load_config().unwrap();
        assert_eq!(rows.connections[0].1.expose_secret(), "secret-1");
        assert!(!rows.connections[0].0.enabled);
        let rec = s.get_connection("c").unwrap();
        assert!(rec.has_credential);
        assert!(!serde_json::to_string(&rec).unwrap().contains("secret-1"));
    }

    #[test]
    fn provider_in_use_cannot_be_deleted() {
        let s = Store::open_in_memory().unwrap();
        s.save_provider(&provider("p"), SaveMode::Create, 1)
            .unwrap();
        s.save_connection(
            &connection("c", "p"),
            Some(&secret("k")),
            SaveMode::Create,
            1,
        )
        .unwrap();
        assert!(matches!(
            s.delete_provider("p"),
            Err(StoreError::InUse { .. })
        ));
        s.delete_connection("c").unwrap();
        s.save_combo(
            &ComboRecord {
                name: "combo".into(),
                strategy: "priority".into(),
                targets: vec![TargetRecord {
                    model: "p/m".into(),
                    connection: None,
                    weight: 1,
                    cost: None,
                }],
            },
            SaveMode::Create,
            1,
        )
        .unwrap();
        let err = s.delete_provider("p").unwrap_err().to_string();
        assert_eq!(err, "provider `p` is still used by combos combo");
        s.delete_combo("combo").unwrap();
        s.delete_provider("p").unwrap();
    }

    #[test]
    fn connection_for_unknown_provider_is_rejected_and_nothing_written() {
        let s = Store::open_in_memory().unwrap();
        let v0 = s.config_version().unwrap();
        assert!(matches!(
            s.save_connection(&connection("c", "nope"), None, SaveMode::Create, 1),
            Err(StoreError::NotFound {
                kind: "provider",
                ..
            })
        ));
        assert_eq!(s.config_version().unwrap(), v0);
        assert!(s.list_connections().unwrap().is_empty());
    }

    /// A database with provider `p` and connection `c` holding `cred`.
    fn with_credential(path: &Path, keys: Keyring, cred: &str) -> Store {
        let s = Store::open(path, keys).unwrap();
        s.save_provider(&provider("p"), SaveMode::Create, 1)
            .unwrap();
        s.save_connection(
            &connection("c", "p"),
            Some(&secret(cred)),
            SaveMode::Create,
            1,
        )
        .unwrap();
        s
    }

    #[test]
    fn credentials_are_sealed_in_the_database_and_opened_by_load_config() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let k = keys();
        let s = with_credential(&path, k.clone(), "sk-live-plaintext-1");
        let raw = raw_credential(&path, "c");
        assert!(
            raw.starts_with(&format!("enc:v1:{}:", k.current().id())),
            "{raw}"
        );
        assert!(!raw.contains("sk-live-plaintext-1"));
        assert_eq!(credential_of(&s, "c"), "sk-live-plaintext-1");
        // An empty credential clears it, and is stored empty.
        s.save_connection(
            &connection("c", "p"),
            Some(&secret("")),
            SaveMode::Update,
            2,
        )
        .unwrap();
        assert_eq!(raw_credential(&path, "c"), "");
        assert!(!s.get_connection("c").unwrap().has_credential);
        // A sealed value copied to another connection's row does not open there.
        drop(s);
        let s = with_credential(&dir.path().join("b.sqlite"), k.clone(), "x");
        drop(s);
        let db = Connection::open(dir.path().join("b.sqlite")).unwrap();
        db.execute(
            "INSERT INTO connections (id, provider_id, auth_class, credential, created_at, updated_at)
             SELECT 'd', provider_id, auth_class, credential, 1, 1 FROM connections WHERE id = 'c'",
            [],
        )
        .unwrap();
        drop(db);
        let err = Store::open(&dir.path().join("b.sqlite"), k.clone()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the stored credential of connection `d` does not decrypt with secret key {}: \
                 it is damaged or was altered outside switchyard",
                k.current().id()
            )
        );
    }

    #[test]
    fn plaintext_credentials_from_before_are_sealed_at_open_in_one_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let s = with_credential(&path, keys(), "placeholder");
        drop(s);
        // What an earlier version wrote: the credential in plaintext.
        let db = Connection::open(&path).unwrap();
        db.execute(
            "UPDATE connections SET credential = 'sk-old-plaintext' WHERE id = 'c'",
            [],
        )
        .unwrap();
        drop(db);
        let k = keys();
        let s = Store::open(&path, k.clone()).unwrap();
        let raw = raw_credential(&path, "c");
        assert!(
            raw.starts_with(&format!("enc:v1:{}:", k.current().id())),
            "{raw}"
        );
        assert!(!raw.contains("sk-old-plaintext"));
        assert_eq!(credential_of(&s, "c"), "sk-old-plaintext");
    }

    #[test]
    fn a_wrong_key_fails_open_naming_both_keys_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let right = keys();
        drop(with_credential(&path, right.clone(), "sk-1"));
        let before = raw_credential(&path, "c");
        let wrong = keys();
        let err = Store::open(&path, wrong.clone()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the credential of connection `c` is encrypted with secret key {}, but the key given is {}",
                right.current().id(),
                wrong.current().id()
            )
        );
        assert_eq!(raw_credential(&path, "c"), before);
        assert_eq!(
            credential_of(&Store::open(&path, right).unwrap(), "c"),
            "sk-1"
        );
    }

    #[test]
    fn a_previous_key_opens_and_its_credentials_are_resealed_with_the_current() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let old = keys();
        drop(with_credential(&path, old.clone(), "sk-1"));
        let new = SecretKey::generate().unwrap();
        let ring = Keyring::new(new.clone(), vec![old.current().clone()]);
        let s = Store::open(&path, ring).unwrap();
        assert!(raw_credential(&path, "c").starts_with(&format!("enc:v1:{}:", new.id())));
        assert_eq!(credential_of(&s, "c"), "sk-1");
        drop(s);
        // The old key alone no longer opens it.
        assert!(matches!(
            Store::open(&path, old),
            Err(StoreError::UnknownKey { .. })
        ));
    }

    #[test]
    fn rotation_reseals_everything_and_a_process_on_the_key_file_follows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let key_file = dir.path().join("secret-key");
        let (ring, _) = crate::secrets::create_key_file(&key_file).unwrap();
        let old = ring.current().clone();
        // `running` plays a gateway, `cli` the rotation command.
        let running = with_credential(&path, ring, "sk-1");
        let cli = Store::open(&path, Keyring::from_file(&key_file).unwrap()).unwrap();
        let new = SecretKey::generate().unwrap();
        crate::secrets::write_key_file(&key_file, &new, std::slice::from_ref(&old)).unwrap();
        assert_eq!(cli.rotate_key(&new).unwrap(), 1);
        crate::secrets::write_key_file(&key_file, &new, &[]).unwrap();
        assert!(raw_credential(&path, "c").starts_with(&format!("enc:v1:{}:", new.id())));
        assert_eq!(cli.current_key().id(), new.id());
        // The running process re-reads the key file to open and to seal.
        assert_eq!(credential_of(&running, "c"), "sk-1");
        running
            .save_connection(
                &connection("c", "p"),
                Some(&secret("sk-2")),
                SaveMode::Update,
                3,
            )
            .unwrap();
        assert!(raw_credential(&path, "c").starts_with(&format!("enc:v1:{}:", new.id())));
        assert_eq!(credential_of(&cli, "c"), "sk-2");
        drop((running, cli));
        assert_eq!(
            credential_of(&Store::open(&path, Keyring::new(new, vec![])).unwrap(), "c"),
            "sk-2"
        );
    }

    #[test]
    fn a_process_with_fixed_keys_refuses_to_seal_after_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let old = keys();
        let running = with_credential(&path, old.clone(), "sk-1");
        let new = SecretKey::generate().unwrap();
        Store::open(&path, old.clone())
            .unwrap()
            .rotate_key(&new)
            .unwrap();
        let err = running
            .save_connection(
                &connection("c", "p"),
                Some(&secret("sk-2")),
                SaveMode::Update,
                3,
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the credentials were re-encrypted with secret key {}, and this process holds {}: restart it with the new key",
                new.id(),
                old.current().id()
            )
        );
        // It writes nothing, and what it does not seal still works.
        assert_eq!(
            credential_of(&Store::open(&path, Keyring::new(new, vec![])).unwrap(), "c"),
            "sk-1"
        );
        running
            .save_provider(&provider("q"), SaveMode::Create, 4)
            .unwrap();
    }

    #[test]
    fn while_nothing_is_sealed_a_process_with_another_key_may_seal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let mine = keys();
        let running = with_credential(&path, mine.clone(), "");
        // Another process (a CLI run without the gateway's key) opened it meanwhile.
        drop(Store::open(&path, keys()).unwrap());
        running
            .save_connection(
                &connection("c", "p"),
                Some(&secret("sk-1")),
                SaveMode::Update,
                2,
            )
            .unwrap();
        assert!(raw_credential(&path, "c").starts_with(&format!("enc:v1:{}:", mine.current().id())));
        assert_eq!(
            credential_of(&Store::open(&path, mine).unwrap(), "c"),
            "sk-1"
        );
    }

    #[test]
    fn the_database_and_its_wal_files_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let k = keys();
        let s = with_credential(&path, k.clone(), "sk-1");
        let [wal, shm] = sidecars(&path);
        assert_eq!((mode(&path), mode(&wal), mode(&shm)), (0o600, 0o600, 0o600));
        drop(s);
        // Files an earlier version left world-readable are tightened at open.
        for p in [&path, &wal, &shm] {
            if p.exists() {
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
            }
        }
        let _s = Store::open(&path, k).unwrap();
        assert_eq!(mode(&path), 0o600);
        for p in [&wal, &shm] {
            if p.exists() {
                assert_eq!(mode(p), 0o600, "{}", p.display());
            }
        }
    }
}
