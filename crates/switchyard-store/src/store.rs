//! The store, whatever database is behind it: its connection to the backend, the
//! configuration's transaction and version, the secret key and the sealing of
//! credentials, and the helpers the domain modules share. The domains' statements are
//! beside it, one module each: `config` (providers, connections, combos, aliases,
//! settings), `keys`, `log` (the request log), [`crate::quota`], [`crate::resilience`],
//! [`crate::sessions`], [`crate::leases`]; the backends (`sqlite`, `postgres`) open the
//! database, migrate it and run statements.

use crate::config::{
    query_aliases, query_combos, query_connections, query_providers, query_settings,
};
use crate::db::{args, Sql};
use crate::keys::query_keys;
use crate::secrets::{classify, KeyId, Keyring, SecretKey, Stored};
use crate::{Result, StoreError};
use secrecy::zeroize::Zeroizing;
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use switchyard_model::{ConfigRows, SaveMode};

/// The database behind a [`Store`].
#[derive(Debug)]
pub(crate) enum Db {
    /// One SQLite connection behind a mutex: writes are serialised anyway, and nothing
    /// on the request path waits for it.
    Sqlite(Mutex<rusqlite::Connection>),
    /// A pool of PostgreSQL connections.
    Postgres(crate::postgres::Pool),
}

/// The store. Connection credentials are sealed with the keyring's current key on the
/// way in and opened in [`Store::load_config`] only (see [`crate::secrets`]); every
/// other read returns records without them.
#[derive(Debug)]
pub struct Store {
    pub(crate) db: Db,
    keys: Mutex<Keyring>,
}

/// `meta` key of the id of the key every sealed credential is sealed with.
const KEY_ID_META: &str = "secret_key_id";

/// `meta` key of the generated admin token's hash.
const ADMIN_HASH_META: &str = "admin_token_hash";

/// Bumps the configuration version, in both dialects.
const BUMP_VERSION: &str = "UPDATE meta SET value = CAST(CAST(value AS BIGINT) + 1 AS TEXT)
     WHERE key = 'config_version'";

pub(crate) fn to_json<T: Serialize>(v: &T) -> Result<String> {
    Ok(serde_json::to_string(v)?)
}

pub(crate) fn from_json<T: DeserializeOwned>(s: &str) -> Result<T> {
    Ok(serde_json::from_str(s)?)
}

pub(crate) fn opt_from_json<T: DeserializeOwned>(s: Option<String>) -> Result<Option<T>> {
    s.map(|s| from_json(&s)).transpose()
}

/// Every `(text, text)` row of a two-column query.
pub(crate) fn query_text_pairs(db: &dyn Sql, sql: &str) -> Result<Vec<(String, String)>> {
    db.query_map(sql, &[], |r| Ok((r.get(0)?, r.get(1)?)))
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

pub(crate) fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Store {
    /// A store over `db`, whose schema is current: seals with the keyring's current key
    /// every credential not yet sealed with it (plaintext from before encryption at
    /// rest, or sealed with a previous key), in one transaction. A credential sealed
    /// with a key the keyring does not hold fails the open ([`StoreError::UnknownKey`])
    /// and nothing is changed.
    pub(crate) fn over(db: Db, keys: Keyring) -> Result<Self> {
        let store = Self {
            db,
            keys: Mutex::new(keys),
        };
        // Locks are taken database first, then keys, everywhere: the keys are copied.
        let keys = store.keyring().clone();
        store.write(|db| seal_stored(db, &keys))?;
        Ok(store)
    }

    /// Whether several replicas may share this database (PostgreSQL): what they write,
    /// others read.
    pub fn is_shared(&self) -> bool {
        matches!(self.db, Db::Postgres(_))
    }

    /// Runs `f` on a consistent view of the database (one read transaction).
    pub(crate) fn read<T>(&self, f: impl FnOnce(&dyn Sql) -> Result<T>) -> Result<T> {
        match &self.db {
            Db::Sqlite(conn) => {
                let mut conn = lock(conn);
                let tx = conn.transaction()?;
                let out = f(&crate::sqlite::Lite(&tx))?;
                tx.commit()?;
                Ok(out)
            }
            Db::Postgres(pool) => pool.read(f),
        }
    }

    /// Runs `f` in one write transaction: everything it writes lands, or nothing. On
    /// SQLite the transaction takes the write lock up front (`BEGIN IMMEDIATE`), so what
    /// it reads cannot change under it.
    pub(crate) fn write<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&dyn Sql) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        match &self.db {
            Db::Sqlite(conn) => {
                let mut conn = lock(conn);
                let tx = conn
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .map_err(StoreError::from)?;
                let out = f(&crate::sqlite::Lite(&tx))?;
                tx.commit().map_err(StoreError::from)?;
                Ok(out)
            }
            Db::Postgres(pool) => pool.write(f),
        }
    }

    /// Runs a configuration change in one write transaction and bumps `config_version`.
    /// Configuration changes are serialised by the database, across processes and
    /// replicas: SQLite's write lock, or on PostgreSQL the `meta` row of the version,
    /// locked first; PostgreSQL also announces the new version to every replica
    /// (`NOTIFY`, delivered at commit).
    pub(crate) fn config_write<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&dyn Sql) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        self.write(|db| {
            if db.dialect() == crate::db::Dialect::Postgres {
                db.query_one(
                    "SELECT value FROM meta WHERE key = 'config_version' FOR UPDATE",
                    &[],
                )?;
            }
            let out = f(db)?;
            db.execute(BUMP_VERSION, &[])?;
            if db.dialect() == crate::db::Dialect::Postgres {
                crate::postgres::announce_config(db)?;
            }
            Ok(out)
        })
    }

    /// Runs a configuration change in one transaction (see [`Store::config_write`]):
    /// `f` gets the configuration as it stands inside the transaction, credentials
    /// opened, checks the change against it and writes through the batch. Nothing can
    /// change the configuration between what `f` checks and what it writes, whichever
    /// process or replica writes; an error from `f` writes nothing.
    pub fn transact<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&Batch<'_>, ConfigRows) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        self.config_write(|db| {
            let rows = self.config_rows(db)?;
            f(&Batch { db, store: self }, rows)
        })
    }

    fn keyring(&self) -> MutexGuard<'_, Keyring> {
        lock(&self.keys)
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

    /// The key to seal with inside the write transaction `db`: the key the database's
    /// credentials are sealed with (its id is in `meta`), so one database never mixes
    /// keys. When another process re-encrypted them with a new key (`switchyard
    /// secret-key rotate`), the key file is re-read; a process that cannot learn the
    /// new key refuses to write. While no credential is sealed at all, any key will do,
    /// and this process's becomes the database's.
    pub(crate) fn sealing_key(&self, db: &dyn Sql) -> Result<SecretKey> {
        let Some(stored) = stored_key_id(db)? else {
            return Ok(self.current_key());
        };
        if let Some(k) = self.keyring().key(stored) {
            return Ok(k.clone());
        }
        if self.reread_keys()? {
            if let Some(k) = self.keyring().key(stored) {
                return Ok(k.clone());
            }
        }
        let any_sealed: bool = db
            .query_one(
                "SELECT COUNT(*) FROM connections WHERE substr(credential, 1, 7) = ?1",
                &args![crate::secrets::SEALED_PREFIX],
            )?
            .get::<i64>(0)?
            > 0;
        if !any_sealed {
            let current = self.current_key();
            set_stored_key_id(db, current.id())?;
            return Ok(current);
        }
        Err(StoreError::KeyChanged {
            database: stored,
            current: self.keyring().current().id(),
        })
    }

    /// Opens a stored credential of connection `id`.
    pub(crate) fn reveal(&self, id: &str, stored: &str) -> Result<SecretString> {
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
        let count = self.config_write(|db| -> Result<usize> {
            let rows = stored_credentials(db)?;
            for (id, stored) in &rows {
                let plain = self.reveal(id, stored)?;
                let sealed = new.seal(id, plain.expose_secret())?;
                db.execute(
                    "UPDATE connections SET credential = ?2 WHERE id = ?1",
                    &args![id, sealed],
                )?;
            }
            set_stored_key_id(db, new.id())?;
            Ok(rows.len())
        })?;
        self.keyring().advance(new.clone());
        Ok(count)
    }

    /// Runs several configuration writes in one transaction: all of them land, or none.
    pub fn batch<T>(&self, f: impl FnOnce(&Batch<'_>) -> Result<T>) -> Result<T> {
        self.config_write(|db| f(&Batch { db, store: self }))
    }

    /// The configuration version; it changes with every configuration write by any process.
    pub fn config_version(&self) -> Result<i64> {
        self.read(config_version)
    }

    /// The hex SHA-256 of the generated admin token, if one was generated.
    pub fn admin_token_hash(&self) -> Result<Option<String>> {
        self.read(admin_hash)
    }

    /// Stores the hex SHA-256 of the generated admin token. It is configuration: the
    /// write bumps `config_version`, so running gateways pick the new token up.
    pub fn set_admin_token_hash(&self, hash_hex: &str) -> Result<()> {
        self.config_write(|db| {
            db.execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                &args![ADMIN_HASH_META, hash_hex],
            )?;
            Ok(())
        })
    }

    /// Runs one statement of the caller's own, in a write transaction: for tests and
    /// diagnostics that alter rows as another process or version would. Nothing in the
    /// gateway calls it.
    #[doc(hidden)]
    pub fn execute_raw(&self, sql: &str) -> Result<usize> {
        self.write(|db| db.execute(sql, &[]))
    }

    /// The first column of a query of the caller's own, as text (`NULL` as `None`): the
    /// read side of [`Store::execute_raw`].
    #[doc(hidden)]
    pub fn query_raw(&self, sql: &str) -> Result<Vec<Option<String>>> {
        self.read(|db| db.query_map(sql, &[], |r| r.get(0)))
    }

    /// Everything the in-memory snapshot is built from, read in one transaction so the
    /// snapshot is consistent. The one read that opens the sealed credentials.
    pub fn load_config(&self) -> Result<ConfigRows> {
        self.read(|db| self.config_rows(db))
    }

    /// The configuration as `db` sees it, credentials opened.
    fn config_rows(&self, db: &dyn Sql) -> Result<ConfigRows> {
        let (records, sealed): (Vec<_>, Vec<_>) = query_connections(db, None)?.into_iter().unzip();
        let connections = records
            .into_iter()
            .zip(&sealed)
            .map(|(c, stored)| {
                let cred = self.reveal(&c.id, stored)?;
                Ok((c, cred))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ConfigRows {
            version: config_version(db)?,
            admin_token_hash: admin_hash(db)?,
            providers: query_providers(db, None)?,
            connections,
            combos: query_combos(db, None)?,
            aliases: query_aliases(db)?,
            keys: query_keys(db, None)?,
            settings: query_settings(db)?,
            pools: crate::quota::query_pools(db, None)?,
            plans: crate::quota::query_plans(db)?,
            oauth: crate::oauth::query_oauth(db, None)?,
        })
    }
}

/// Locks `m`, recovering from poisoning: every critical section here leaves its data
/// consistent (a transaction not committed is rolled back when dropped).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Configuration writes committed together or not at all (see [`Store::batch`]).
pub struct Batch<'a> {
    pub(crate) db: &'a dyn Sql,
    pub(crate) store: &'a Store,
}

impl std::fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch").finish_non_exhaustive()
    }
}

fn config_version(db: &dyn Sql) -> Result<i64> {
    let v: String = db
        .query_one("SELECT value FROM meta WHERE key = 'config_version'", &[])?
        .get(0)?;
    Ok(v.parse().unwrap_or(0))
}

fn meta(db: &dyn Sql, key: &str) -> Result<Option<String>> {
    db.query_opt("SELECT value FROM meta WHERE key = ?1", &args![key])?
        .map(|r| r.get(0))
        .transpose()
}

fn admin_hash(db: &dyn Sql) -> Result<Option<String>> {
    meta(db, ADMIN_HASH_META)
}

fn stored_key_id(db: &dyn Sql) -> Result<Option<KeyId>> {
    Ok(meta(db, KEY_ID_META)?.and_then(|v| KeyId::parse(&v)))
}

fn set_stored_key_id(db: &dyn Sql, id: KeyId) -> Result<()> {
    db.execute(
        "INSERT INTO meta (key, value) VALUES (?1, ?2)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        &args![KEY_ID_META, id.to_string()],
    )?;
    Ok(())
}

/// `(connection id, stored credential)` of every connection that has one.
fn stored_credentials(db: &dyn Sql) -> Result<Vec<(String, String)>> {
    query_text_pairs(
        db,
        "SELECT id, credential FROM connections WHERE credential != '' ORDER BY id",
    )
}

/// The open-time pass (see [`Store::over`]): checks that every sealed credential opens,
/// seals plaintext ones and re-seals those under a previous key, in the write
/// transaction `db`.
fn seal_stored(db: &dyn Sql, keys: &Keyring) -> Result<()> {
    let current = keys.current();
    let (mut sealed, mut resealed) = (0usize, 0usize);
    for (id, stored) in stored_credentials(db)? {
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
        db.execute(
            "UPDATE connections SET credential = ?2 WHERE id = ?1",
            &args![id, current.seal(&id, plain.expose_secret())?],
        )?;
    }
    if stored_key_id(db)? != Some(current.id()) {
        set_stored_key_id(db, current.id())?;
    }
    if sealed + resealed > 0 {
        // Other processes reload, and re-read a key file whose key they no longer match.
        db.execute(BUMP_VERSION, &[])?;
        if db.dialect() == crate::db::Dialect::Postgres {
            crate::postgres::announce_config(db)?;
        }
    }
    if sealed > 0 {
        tracing::info!(count = sealed, key = %current.id(), "Encrypted credentials stored in plaintext by an earlier version.");
    }
    if resealed > 0 {
        tracing::info!(count = resealed, key = %current.id(), "Re-encrypted credentials sealed with a previous secret key.");
    }
    Ok(())
}

/// Fails with `Conflict` (on create) or `NotFound` (on update) as `mode` asks.
pub(crate) fn check_mode(
    db: &dyn Sql,
    table: &str,
    id_col: &str,
    id: &str,
    kind: &'static str,
    mode: SaveMode,
) -> Result<()> {
    let exists = db
        .query_opt(
            &format!("SELECT 1 FROM {table} WHERE {id_col} = ?1"),
            &args![id],
        )?
        .is_some();
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
    db: &dyn Sql,
    table: &str,
    id_col: &str,
    id: &str,
    kind: &'static str,
) -> Result<()> {
    let n = db.execute(
        &format!("DELETE FROM {table} WHERE {id_col} = ?1"),
        &args![id],
    )?;
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

/// Store tests run on both backends.
#[cfg(test)]
pub(crate) mod testing {
    use super::Store;
    use crate::secrets::Keyring;

    /// Runs `check` on a fresh store of each backend: an in-memory SQLite database, then
    /// a PostgreSQL database of its own on the test server (dropped afterwards).
    pub(crate) fn each_backend(check: impl Fn(&Store)) {
        check(&Store::open_in_memory().unwrap());
        let db = crate::postgres::scratch::Database::migrated().unwrap();
        let store = Store::open_postgres(db.url(), Keyring::ephemeral().unwrap(), false).unwrap();
        check(&store);
    }
}
