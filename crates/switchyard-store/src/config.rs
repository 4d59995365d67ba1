//! The configuration's rows (SPEC G7, G8): providers, connections, combos, aliases and
//! settings. Every write is one transaction that bumps the config version
//! ([`Store::batch`]); connection credentials are sealed on the way in and never read
//! back here (only [`Store::load_config`] opens them).

use crate::records::*;
use crate::sqlite::{
    check_mode, delete_row, enum_from_str, enum_to_str, first, from_json, i64_of, opt_from_json,
    query_text_pairs, to_json,
};
use crate::{Batch, Result, SaveMode, Store, StoreError};
use rusqlite::{params, Connection};
use secrecy::{ExposeSecret, SecretString};

impl Store {
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
        credential: Option<&SecretString>,
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

    // ---- aliases ----

    /// The model aliases, in the order they are tried.
    pub fn list_aliases(&self) -> Result<Vec<AliasRecord>> {
        query_aliases(&self.lock())
    }

    /// Replaces every alias with `list`, in its order.
    pub fn replace_aliases(&self, list: &[AliasRecord], now: u64) -> Result<()> {
        self.batch(|b| b.replace_aliases(list, now))
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
               max_output_tokens, stream_timeouts, context_windows, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?8, ?9, ?10, ?7, ?7)
             ON CONFLICT(id) DO UPDATE SET format = excluded.format,
               base_url = excluded.base_url, models = excluded.models,
               prices = excluded.prices, max_concurrent = excluded.max_concurrent,
               max_output_tokens = excluded.max_output_tokens,
               stream_timeouts = excluded.stream_timeouts,
               context_windows = excluded.context_windows,
               updated_at = excluded.updated_at",
            params![
                p.id,
                enum_to_str(&p.format)?,
                p.base_url,
                to_json(&p.models)?,
                to_json(&p.prices)?,
                p.max_concurrent,
                i64_of(now),
                to_json(&p.max_output_tokens)?,
                to_json(&p.stream_timeouts)?,
                to_json(&p.context_windows)?
            ],
        )?;
        Ok(())
    }

    /// Saves a connection, sealing its credential. `credential = None` keeps the stored
    /// credential on update; an empty one clears it.
    pub fn save_connection(
        &self,
        c: &ConnectionRecord,
        credential: Option<&SecretString>,
        mode: SaveMode,
        now: u64,
    ) -> Result<()> {
        let tx = self.tx;
        let credential = match credential.map(ExposeSecret::expose_secret) {
            None => None,
            Some("") => Some(String::new()),
            Some(plain) => Some(self.store.sealing_key(tx)?.seal(&c.id, plain)?),
        };
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
            params![c.name, c.strategy, to_json(&c.targets)?, i64_of(now)],
        )?;
        Ok(())
    }

    pub fn replace_aliases(&self, list: &[AliasRecord], now: u64) -> Result<()> {
        let tx = self.tx;
        tx.execute("DELETE FROM model_aliases", [])?;
        let mut stmt = tx.prepare_cached(
            "INSERT INTO model_aliases (position, pattern, target, keys, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for (i, a) in list.iter().enumerate() {
            stmt.execute(params![
                i64::try_from(i).unwrap_or(i64::MAX),
                a.pattern,
                a.target,
                to_json(&a.keys)?,
                i64_of(now)
            ])?;
        }
        Ok(())
    }
}

pub(crate) fn query_providers(conn: &Connection, id: Option<&str>) -> Result<Vec<ProviderRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, format, base_url, models, prices, max_concurrent, max_output_tokens,
           stream_timeouts, context_windows
         FROM providers
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
                r.get::<_, String>(6)?,
                r.get::<_, String>(7)?,
                r.get::<_, String>(8)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    raw.into_iter()
        .map(
            |(id, format, base_url, models, prices, max_concurrent, limits, timeouts, windows)| {
                Ok(ProviderRecord {
                    id,
                    format: enum_from_str(&format)?,
                    base_url,
                    models: from_json(&models)?,
                    prices: from_json(&prices)?,
                    max_concurrent,
                    max_output_tokens: from_json(&limits)?,
                    stream_timeouts: from_json(&timeouts)?,
                    context_windows: from_json(&windows)?,
                })
            },
        )
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

pub(crate) fn query_connections(
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

pub(crate) fn query_combos(conn: &Connection, name: Option<&str>) -> Result<Vec<ComboRecord>> {
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
                strategy,
                targets: from_json(&targets)?,
            })
        })
        .collect()
}

pub(crate) fn query_aliases(conn: &Connection) -> Result<Vec<AliasRecord>> {
    let mut stmt =
        conn.prepare_cached("SELECT pattern, target, keys FROM model_aliases ORDER BY position")?;
    let raw = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    raw.into_iter()
        .map(|(pattern, target, keys)| {
            Ok(AliasRecord {
                pattern,
                target,
                keys: from_json(&keys)?,
            })
        })
        .collect()
}

pub(crate) fn query_settings(conn: &Connection) -> Result<Vec<SettingRecord>> {
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
