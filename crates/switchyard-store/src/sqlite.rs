//! The SQLite store.

use crate::migrations::MIGRATIONS;
use crate::records::*;
use crate::{Result, StoreError};
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// How long a writer waits for another process (the CLI) holding the write lock. Config
/// writes are tiny, so five seconds only expires when something is truly stuck.
const BUSY_TIMEOUT_MS: u64 = 5_000;

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
#[derive(Debug)]
pub struct Store {
    conn: Mutex<Connection>,
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

fn opt_from_json<T: DeserializeOwned>(s: Option<String>) -> Result<Option<T>> {
    s.map(|s| from_json(&s)).transpose()
}

/// Serde names of enum values (`"openai"`) as stored in text columns.
fn enum_to_str<T: Serialize>(v: &T) -> Result<String> {
    match serde_json::to_value(v)? {
        serde_json::Value::String(s) => Ok(s),
        other => Ok(other.to_string()),
    }
}

fn enum_from_str<T: DeserializeOwned>(s: &str) -> Result<T> {
    Ok(serde_json::from_value(serde_json::Value::String(
        s.to_owned(),
    ))?)
}

fn u64_col(row: &Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    let v: i64 = row.get(idx)?;
    Ok(u64::try_from(v).unwrap_or(0))
}

pub(crate) fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Store {
    /// Opens (creating if needed) the database at `path` and applies migrations.
    pub fn open(path: &Path) -> Result<Self> {
        Self::init(Connection::open(path)?)
    }

    /// A private in-memory database, for unit tests.
    pub fn open_in_memory() -> Result<Self> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(mut conn: Connection) -> Result<Self> {
        conn.busy_timeout(std::time::Duration::from_millis(BUSY_TIMEOUT_MS))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        migrate(&mut conn)?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs a configuration change in one transaction and bumps `config_version`.
    pub(crate) fn config_write<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
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
        self.config_write(|tx| f(&Batch { tx }))
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
    /// snapshot is consistent.
    pub fn load_config(&self) -> Result<ConfigRows> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let version: String = tx.query_row(
            "SELECT value FROM meta WHERE key = 'config_version'",
            [],
            |r| r.get(0),
        )?;
        let rows = ConfigRows {
            version: version.parse().unwrap_or(0),
            admin_token_hash: admin_hash(&tx)?,
            providers: query_providers(&tx, None)?,
            connections: query_connections(&tx, None)?,
            combos: query_combos(&tx, None)?,
            keys: query_keys(&tx, None)?,
            settings: query_settings(&tx)?,
            pools: crate::quota::query_pools(&tx, None)?,
            plans: crate::quota::query_plans(&tx)?,
        };
        tx.commit()?;
        Ok(rows)
    }

    // ---- providers ----

    pub fn list_providers(&self) -> Result<Vec<ProviderRecord>> {
        query_providers(&self.lock(), None)
    }

    pub fn get_provider(&self, id: &str) -> Result<ProviderRecord> {
        first(query_providers(&self.lock(), Some(id))?, "provider", id)
    }

    pub fn save_provider(&self, p: &ProviderRecord, mode: SaveMode, now: u64) -> Result<()> {
        self.batch(|b| b.save_provider(p, mode, now))
    }

    pub fn delete_provider(&self, id: &str) -> Result<()> {
        self.config_write(|tx| {
            let conns: Vec<String> = tx
                .prepare("SELECT id FROM connections WHERE provider_id = ?1 ORDER BY id")?
                .query_map([id], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            if !conns.is_empty() {
                return Err(StoreError::InUse {
                    kind: "provider",
                    id: id.to_owned(),
                    used_by: format!("connections {}", conns.join(", ")),
                });
            }
            let combos: Vec<String> = query_combos(tx, None)?
                .into_iter()
                .filter(|c| {
                    c.targets
                        .iter()
                        .any(|t| t.model.split('/').next() == Some(id))
                })
                .map(|c| c.name)
                .collect();
            if !combos.is_empty() {
                return Err(StoreError::InUse {
                    kind: "provider",
                    id: id.to_owned(),
                    used_by: format!("combos {}", combos.join(", ")),
                });
            }
            delete_row(tx, "providers", "id", id, "provider")
        })
    }

    // ---- connections ----

    pub fn list_connections(&self) -> Result<Vec<ConnectionRecord>> {
        Ok(query_connections(&self.lock(), None)?
            .into_iter()
            .map(|(c, _)| c)
            .collect())
    }

    pub fn get_connection(&self, id: &str) -> Result<ConnectionRecord> {
        let rows = query_connections(&self.lock(), Some(id))?;
        first(rows.into_iter().map(|(c, _)| c).collect(), "connection", id)
    }

    /// Saves a connection. `credential = None` keeps the stored credential on update.
    pub fn save_connection(
        &self,
        c: &ConnectionRecord,
        credential: Option<&str>,
        mode: SaveMode,
        now: u64,
    ) -> Result<()> {
        self.batch(|b| b.save_connection(c, credential, mode, now))
    }

    pub fn delete_connection(&self, id: &str) -> Result<()> {
        self.config_write(|tx| {
            let combos: Vec<String> = query_combos(tx, None)?
                .into_iter()
                .filter(|c| {
                    c.targets
                        .iter()
                        .any(|t| t.connection.as_deref() == Some(id))
                })
                .map(|c| c.name)
                .collect();
            if !combos.is_empty() {
                return Err(StoreError::InUse {
                    kind: "connection",
                    id: id.to_owned(),
                    used_by: format!("combos {}", combos.join(", ")),
                });
            }
            let pools: Vec<String> = crate::quota::query_pools(tx, None)?
                .into_iter()
                .filter(|p| p.connection_ids.iter().any(|c| c == id))
                .map(|p| p.id)
                .collect();
            if !pools.is_empty() {
                return Err(StoreError::InUse {
                    kind: "connection",
                    id: id.to_owned(),
                    used_by: format!("quota pools {}", pools.join(", ")),
                });
            }
            tx.execute("DELETE FROM provider_plans WHERE connection_id = ?1", [id])?;
            delete_row(tx, "connections", "id", id, "connection")
        })
    }

    // ---- combos ----

    pub fn list_combos(&self) -> Result<Vec<ComboRecord>> {
        query_combos(&self.lock(), None)
    }

    pub fn get_combo(&self, name: &str) -> Result<ComboRecord> {
        first(query_combos(&self.lock(), Some(name))?, "combo", name)
    }

    pub fn save_combo(&self, c: &ComboRecord, mode: SaveMode, now: u64) -> Result<()> {
        self.batch(|b| b.save_combo(c, mode, now))
    }

    pub fn delete_combo(&self, name: &str) -> Result<()> {
        self.config_write(|tx| delete_row(tx, "combos", "name", name, "combo"))
    }

    // ---- keys ----

    pub fn list_keys(&self) -> Result<Vec<KeyRecord>> {
        query_keys(&self.lock(), None)
    }

    pub fn get_key(&self, id: &str) -> Result<KeyRecord> {
        first(query_keys(&self.lock(), Some(id))?, "key", id)
    }

    pub fn save_key(&self, k: &KeyRecord, mode: SaveMode) -> Result<()> {
        self.batch(|b| b.save_key(k, mode))
    }

    /// Marks a key revoked. Revoking twice keeps the first revocation time.
    pub fn revoke_key(&self, id: &str, now: u64) -> Result<KeyRecord> {
        self.config_write(|tx| {
            let n = tx.execute(
                "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?2) WHERE id = ?1",
                params![id, i64_of(now)],
            )?;
            if n == 0 {
                return Err(StoreError::NotFound {
                    kind: "key",
                    id: id.to_owned(),
                });
            }
            first(query_keys(tx, Some(id))?, "key", id)
        })
    }

    pub fn delete_key(&self, id: &str) -> Result<()> {
        self.config_write(|tx| delete_row(tx, "api_keys", "id", id, "key"))
    }

    // ---- settings ----

    pub fn list_settings(&self) -> Result<Vec<SettingRecord>> {
        query_settings(&self.lock())
    }

    pub fn put_setting(&self, key: &str, value: &serde_json::Value, now: u64) -> Result<()> {
        self.batch(|b| b.put_setting(key, value, now))
    }

    pub fn delete_setting(&self, key: &str) -> Result<()> {
        self.config_write(|tx| delete_row(tx, "settings", "key", key, "setting"))
    }

    // ---- request log ----

    /// Inserts a batch of log rows in one transaction.
    pub fn insert_log_batch(&self, rows: &[LogRow]) -> Result<()> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO request_log (ts, request_id, key_id, requested_model, provider,
                   connection_id, model, status, error_code, stream, attempts, latency_ms,
                   ttfb_ms, prompt_tokens, completion_tokens, egress_ip)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
            )?;
            for r in rows {
                stmt.execute(params![
                    i64_of(r.ts),
                    r.request_id,
                    r.key_id,
                    r.requested_model,
                    r.provider,
                    r.connection_id,
                    r.model,
                    r.status,
                    r.error_code,
                    r.stream,
                    r.attempts,
                    i64_of(r.latency_ms),
                    r.ttfb_ms.map(i64_of),
                    r.prompt_tokens.map(i64_of),
                    r.completion_tokens.map(i64_of),
                    r.egress_ip,
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// The newest log rows, newest first.
    pub fn recent_logs(&self, limit: u32, key_id: Option<&str>) -> Result<Vec<LogRow>> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            "SELECT ts, request_id, key_id, requested_model, provider, connection_id, model,
               status, error_code, stream, attempts, latency_ms, ttfb_ms, prompt_tokens,
               completion_tokens, egress_ip
             FROM request_log WHERE (?2 IS NULL OR key_id = ?2)
             ORDER BY id DESC LIMIT ?1",
        )?;
        let rows = stmt
            .query_map(params![limit, key_id], |r| {
                let opt_u64 = |i: usize| -> rusqlite::Result<Option<u64>> {
                    Ok(r.get::<_, Option<i64>>(i)?
                        .map(|v| u64::try_from(v).unwrap_or(0)))
                };
                Ok(LogRow {
                    ts: u64_col(r, 0)?,
                    request_id: r.get(1)?,
                    key_id: r.get(2)?,
                    requested_model: r.get(3)?,
                    provider: r.get(4)?,
                    connection_id: r.get(5)?,
                    model: r.get(6)?,
                    status: r.get(7)?,
                    error_code: r.get(8)?,
                    stream: r.get(9)?,
                    attempts: r.get(10)?,
                    latency_ms: u64_col(r, 11)?,
                    ttfb_ms: opt_u64(12)?,
                    prompt_tokens: opt_u64(13)?,
                    completion_tokens: opt_u64(14)?,
                    egress_ip: r.get(15)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}

/// Configuration writes committed together or not at all (see [`Store::batch`]).
#[derive(Debug)]
pub struct Batch<'a> {
    pub(crate) tx: &'a Transaction<'a>,
}

impl Batch<'_> {
    pub fn put_setting(&self, key: &str, value: &serde_json::Value, now: u64) -> Result<()> {
        self.tx.execute(
            "INSERT INTO settings (key, value, updated_at) VALUES (?1, ?2, ?3)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value,
               updated_at = excluded.updated_at",
            params![key, to_json(value)?, i64_of(now)],
        )?;
        Ok(())
    }

    pub fn save_provider(&self, p: &ProviderRecord, mode: SaveMode, now: u64) -> Result<()> {
        let tx = self.tx;
        check_mode(tx, "providers", "id", &p.id, "provider", mode)?;
        tx.execute(
            "INSERT INTO providers (id, format, base_url, models, prices, max_concurrent,
               created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)
             ON CONFLICT(id) DO UPDATE SET format = excluded.format,
               base_url = excluded.base_url, models = excluded.models,
               prices = excluded.prices, max_concurrent = excluded.max_concurrent,
               updated_at = excluded.updated_at",
            params![
                p.id,
                enum_to_str(&p.format)?,
                p.base_url,
                to_json(&p.models)?,
                to_json(&p.prices)?,
                p.max_concurrent,
                i64_of(now)
            ],
        )?;
        Ok(())
    }

    /// Saves a connection. `credential = None` keeps the stored credential on update.
    pub fn save_connection(
        &self,
        c: &ConnectionRecord,
        credential: Option<&str>,
        mode: SaveMode,
        now: u64,
    ) -> Result<()> {
        let tx = self.tx;
        check_mode(tx, "connections", "id", &c.id, "connection", mode)?;
        let provider_exists: bool = tx.query_row(
            "SELECT EXISTS(SELECT 1 FROM providers WHERE id = ?1)",
            [&c.provider],
            |r| r.get(0),
        )?;
        if !provider_exists {
            return Err(StoreError::NotFound {
                kind: "provider",
                id: c.provider.clone(),
            });
        }
        tx.execute(
            "INSERT INTO connections (id, provider_id, auth_class, format, base_url,
               credential, enabled, max_concurrent, rate_limit_overrides,
               provider_specific_data, disable_cooling, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, COALESCE(?6, ''), ?7, ?8, ?9, ?10, ?11, ?12, ?12)
             ON CONFLICT(id) DO UPDATE SET provider_id = excluded.provider_id,
               auth_class = excluded.auth_class, format = excluded.format,
               base_url = excluded.base_url,
               credential = COALESCE(?6, connections.credential),
               enabled = excluded.enabled, max_concurrent = excluded.max_concurrent,
               rate_limit_overrides = excluded.rate_limit_overrides,
               provider_specific_data = excluded.provider_specific_data,
               disable_cooling = excluded.disable_cooling,
               updated_at = excluded.updated_at",
            params![
                c.id,
                c.provider,
                enum_to_str(&c.auth_class)?,
                c.format.as_ref().map(enum_to_str).transpose()?,
                c.base_url,
                credential,
                c.enabled,
                c.max_concurrent,
                c.rate_limit_overrides.as_ref().map(to_json).transpose()?,
                c.provider_specific_data.as_ref().map(to_json).transpose()?,
                c.disable_cooling,
                i64_of(now),
            ],
        )?;
        Ok(())
    }

    pub fn save_combo(&self, c: &ComboRecord, mode: SaveMode, now: u64) -> Result<()> {
        let tx = self.tx;
        check_mode(tx, "combos", "name", &c.name, "combo", mode)?;
        tx.execute(
            "INSERT INTO combos (name, strategy, targets, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?4)
             ON CONFLICT(name) DO UPDATE SET strategy = excluded.strategy,
               targets = excluded.targets, updated_at = excluded.updated_at",
            params![
                c.name,
                enum_to_str(&c.strategy)?,
                to_json(&c.targets)?,
                i64_of(now)
            ],
        )?;
        Ok(())
    }

    pub fn save_key(&self, k: &KeyRecord, mode: SaveMode) -> Result<()> {
        let tx = self.tx;
        check_mode(tx, "api_keys", "id", &k.id, "key", mode)?;
        tx.execute(
            "INSERT INTO api_keys (id, name, key_hash, prefix, scopes, allowed_connections,
               allowed_models, created_at, revoked_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT(id) DO UPDATE SET name = excluded.name,
               key_hash = excluded.key_hash, prefix = excluded.prefix,
               scopes = excluded.scopes,
               allowed_connections = excluded.allowed_connections,
               allowed_models = excluded.allowed_models,
               revoked_at = COALESCE(api_keys.revoked_at, excluded.revoked_at)",
            params![
                k.id,
                k.name,
                k.key_hash,
                k.prefix,
                to_json(&k.scopes)?,
                k.allowed_connections.as_ref().map(to_json).transpose()?,
                k.allowed_models.as_ref().map(to_json).transpose()?,
                i64_of(k.created_at),
                k.revoked_at.map(i64_of),
            ],
        )?;
        Ok(())
    }
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

fn first<T>(rows: Vec<T>, kind: &'static str, id: &str) -> Result<T> {
    rows.into_iter().next().ok_or_else(|| StoreError::NotFound {
        kind,
        id: id.to_owned(),
    })
}

fn query_providers(conn: &Connection, id: Option<&str>) -> Result<Vec<ProviderRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, format, base_url, models, prices, max_concurrent FROM providers
         WHERE (?1 IS NULL OR id = ?1) ORDER BY created_at, id",
    )?;
    let raw = stmt
        .query_map([id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, Option<u32>>(5)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    raw.into_iter()
        .map(|(id, format, base_url, models, prices, max_concurrent)| {
            Ok(ProviderRecord {
                id,
                format: enum_from_str(&format)?,
                base_url,
                models: from_json(&models)?,
                prices: from_json(&prices)?,
                max_concurrent,
            })
        })
        .collect()
}

type ConnRow = (
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    String,
    bool,
    Option<u32>,
    Option<String>,
    Option<String>,
    bool,
);

fn query_connections(
    conn: &Connection,
    id: Option<&str>,
) -> Result<Vec<(ConnectionRecord, String)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, provider_id, auth_class, format, base_url, credential, enabled,
           max_concurrent, rate_limit_overrides, provider_specific_data, disable_cooling
         FROM connections WHERE (?1 IS NULL OR id = ?1) ORDER BY created_at, id",
    )?;
    let raw: Vec<ConnRow> = stmt
        .query_map([id], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
                r.get(9)?,
                r.get(10)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    raw.into_iter()
        .map(
            |(id, provider, auth, format, base_url, cred, enabled, max, rlo, psd, dc)| {
                Ok((
                    ConnectionRecord {
                        id,
                        provider,
                        auth_class: enum_from_str(&auth)?,
                        format: format.as_deref().map(enum_from_str).transpose()?,
                        base_url,
                        enabled,
                        max_concurrent: max,
                        rate_limit_overrides: opt_from_json(rlo)?,
                        provider_specific_data: opt_from_json(psd)?,
                        disable_cooling: dc,
                        has_credential: !cred.is_empty(),
                    },
                    cred,
                ))
            },
        )
        .collect()
}

fn query_combos(conn: &Connection, name: Option<&str>) -> Result<Vec<ComboRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, strategy, targets FROM combos
         WHERE (?1 IS NULL OR name = ?1) ORDER BY created_at, name",
    )?;
    let raw = stmt
        .query_map([name], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    raw.into_iter()
        .map(|(name, strategy, targets)| {
            Ok(ComboRecord {
                name,
                strategy: enum_from_str(&strategy)?,
                targets: from_json(&targets)?,
            })
        })
        .collect()
}

type KeyRow = (
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    i64,
    Option<i64>,
);

fn query_keys(conn: &Connection, id: Option<&str>) -> Result<Vec<KeyRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, name, key_hash, prefix, scopes, allowed_connections, allowed_models,
           created_at, revoked_at
         FROM api_keys WHERE (?1 IS NULL OR id = ?1) ORDER BY created_at, id",
    )?;
    let raw: Vec<KeyRow> = stmt
        .query_map([id], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    raw.into_iter()
        .map(
            |(id, name, key_hash, prefix, scopes, ac, am, created, revoked)| {
                Ok(KeyRecord {
                    id,
                    name,
                    prefix,
                    scopes: from_json(&scopes)?,
                    allowed_connections: opt_from_json(ac)?,
                    allowed_models: opt_from_json(am)?,
                    created_at: u64::try_from(created).unwrap_or(0),
                    revoked_at: revoked.map(|v| u64::try_from(v).unwrap_or(0)),
                    key_hash,
                })
            },
        )
        .collect()
}

fn query_settings(conn: &Connection) -> Result<Vec<SettingRecord>> {
    query_text_pairs(conn, "SELECT key, value FROM settings ORDER BY key")?
        .into_iter()
        .map(|(key, value)| {
            Ok(SettingRecord {
                key,
                value: from_json(&value)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_core::domain::{AuthClass, Strategy, UpstreamFormat};

    fn provider(id: &str) -> ProviderRecord {
        ProviderRecord {
            id: id.into(),
            format: UpstreamFormat::Openai,
            base_url: "http://x.test".into(),
            models: vec!["m".into()],
            prices: Default::default(),
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

    #[test]
    fn migrations_are_idempotent_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let s = Store::open(&path).unwrap();
        s.save_provider(&provider("p"), SaveMode::Create, 1)
            .unwrap();
        drop(s);
        let s = Store::open(&path).unwrap();
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
        s.save_connection(&connection("c", "p"), Some("secret-1"), SaveMode::Create, 1)
            .unwrap();
        let mut c = connection("c", "p");
        c.enabled = false;
        s.save_connection(&c, None, SaveMode::Update, 2).unwrap();
        let rows = s.load_config().unwrap();
        assert_eq!(rows.connections[0].1, "secret-1");
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
        s.save_connection(&connection("c", "p"), Some("k"), SaveMode::Create, 1)
            .unwrap();
        assert!(matches!(
            s.delete_provider("p"),
            Err(StoreError::InUse { .. })
        ));
        s.delete_connection("c").unwrap();
        s.save_combo(
            &ComboRecord {
                name: "combo".into(),
                strategy: Strategy::Priority,
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

    #[test]
    fn log_rows_round_trip_newest_first() {
        let s = Store::open_in_memory().unwrap();
        let row = |i: u64| LogRow {
            ts: i,
            request_id: format!("r{i}"),
            key_id: Some("k".into()),
            requested_model: "p/m".into(),
            provider: Some("p".into()),
            connection_id: Some("c".into()),
            model: Some("m".into()),
            status: 200,
            error_code: None,
            stream: i.is_multiple_of(2),
            attempts: 1,
            latency_ms: 3,
            ttfb_ms: Some(2),
            prompt_tokens: Some(4),
            completion_tokens: Some(5),
            egress_ip: None,
        };
        s.insert_log_batch(&[row(1), row(2), row(3)]).unwrap();
        let got = s.recent_logs(2, None).unwrap();
        assert_eq!(got, vec![row(3), row(2)]);
        assert_eq!(s.recent_logs(10, Some("other")).unwrap(), vec![]);
    }

    #[test]
    fn revoke_keeps_first_time() {
        let s = Store::open_in_memory().unwrap();
        let k = KeyRecord {
            id: "k1".into(),
            name: "n".into(),
            prefix: "sy-abcde".into(),
            scopes: vec![],
            allowed_connections: None,
            allowed_models: None,
            created_at: 1,
            revoked_at: None,
            key_hash: "h".into(),
        };
        s.save_key(&k, SaveMode::Create).unwrap();
        assert_eq!(s.revoke_key("k1", 10).unwrap().revoked_at, Some(10));
        assert_eq!(s.revoke_key("k1", 20).unwrap().revoked_at, Some(10));
        assert!(matches!(
            s.revoke_key("zz", 1),
            Err(StoreError::NotFound { .. })
        ));
    }
}
