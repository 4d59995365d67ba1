//! The configuration's rows (SPEC G7, G8): providers, connections, combos, aliases and
//! settings. Every write is one transaction that bumps the config version
//! ([`Store::batch`]); connection credentials are sealed on the way in and never read
//! back here (only [`Store::load_config`] opens them).

use crate::db::{args, Sql};
use crate::store::{
    check_mode, delete_row, enum_from_str, enum_to_str, first, from_json, i64_of, opt_from_json,
    query_text_pairs, to_json,
};
use crate::{Batch, Result, Store, StoreError};
use secrecy::{ExposeSecret, SecretString};
use switchyard_model::{
    AliasRecord, ComboRecord, ConnectionRecord, ProviderRecord, SaveMode, SettingRecord,
};

impl Store {
    // ---- providers ----

    pub fn list_providers(&self) -> Result<Vec<ProviderRecord>> {
        self.read(|db| query_providers(db, None))
    }

    pub fn get_provider(&self, id: &str) -> Result<ProviderRecord> {
        first(
            self.read(|db| query_providers(db, Some(id)))?,
            "provider",
            id,
        )
    }

    pub fn save_provider(&self, p: &ProviderRecord, mode: SaveMode, now: u64) -> Result<()> {
        self.batch(|b| b.save_provider(p, mode, now))
    }

    pub fn delete_provider(&self, id: &str) -> Result<()> {
        self.batch(|b| b.delete_provider(id))
    }

    // ---- connections ----

    pub fn list_connections(&self) -> Result<Vec<ConnectionRecord>> {
        Ok(self
            .read(|db| query_connections(db, None))?
            .into_iter()
            .map(|(c, _)| c)
            .collect())
    }

    pub fn get_connection(&self, id: &str) -> Result<ConnectionRecord> {
        let rows = self.read(|db| query_connections(db, Some(id)))?;
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
        self.batch(|b| b.delete_connection(id))
    }

    // ---- combos ----

    pub fn list_combos(&self) -> Result<Vec<ComboRecord>> {
        self.read(|db| query_combos(db, None))
    }

    pub fn get_combo(&self, name: &str) -> Result<ComboRecord> {
        first(self.read(|db| query_combos(db, Some(name)))?, "combo", name)
    }

    pub fn save_combo(&self, c: &ComboRecord, mode: SaveMode, now: u64) -> Result<()> {
        self.batch(|b| b.save_combo(c, mode, now))
    }

    pub fn delete_combo(&self, name: &str) -> Result<()> {
        self.batch(|b| b.delete_combo(name))
    }

    // ---- aliases ----

    /// The model aliases, in the order they are tried.
    pub fn list_aliases(&self) -> Result<Vec<AliasRecord>> {
        self.read(query_aliases)
    }

    /// Replaces every alias with `list`, in its order.
    pub fn replace_aliases(&self, list: &[AliasRecord], now: u64) -> Result<()> {
        self.batch(|b| b.replace_aliases(list, now))
    }

    // ---- settings ----

    pub fn list_settings(&self) -> Result<Vec<SettingRecord>> {
        self.read(query_settings)
    }

    pub fn put_setting(&self, key: &str, value: &serde_json::Value, now: u64) -> Result<()> {
        self.batch(|b| b.put_setting(key, value, now))
    }

    pub fn delete_setting(&self, key: &str) -> Result<()> {
        self.batch(|b| b.delete_setting(key))
    }
}

impl Batch<'_> {
    pub fn delete_provider(&self, id: &str) -> Result<()> {
        let db = self.db;
        let conns: Vec<String> = db.query_map(
            "SELECT id FROM connections WHERE provider_id = ?1 ORDER BY id",
            &args![id],
            |r| r.get(0),
        )?;
        if !conns.is_empty() {
            return Err(StoreError::InUse {
                kind: "provider",
                id: id.to_owned(),
                used_by: format!("connections {}", conns.join(", ")),
            });
        }
        let combos: Vec<String> = query_combos(db, None)?
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
        delete_row(db, "providers", "id", id, "provider")
    }

    pub fn delete_connection(&self, id: &str) -> Result<()> {
        let db = self.db;
        let combos: Vec<String> = query_combos(db, None)?
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
        let pools: Vec<String> = crate::quota::query_pools(db, None)?
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
        db.execute(
            "DELETE FROM provider_plans WHERE connection_id = ?1",
            &args![id],
        )?;
        crate::oauth::forget(db, id)?;
        delete_row(db, "connections", "id", id, "connection")
    }

    pub fn delete_combo(&self, name: &str) -> Result<()> {
        let db = self.db;
        delete_row(db, "combos", "name", name, "combo")
    }

    pub fn delete_setting(&self, key: &str) -> Result<()> {
        let db = self.db;
        delete_row(db, "settings", "key", key, "setting")
    }

    pub fn put_setting(&self, key: &str, value: &serde_json::Value, now: u64) -> Result<()> {
        self.db.execute(
            "INSERT INTO settings (key, value, updated_at) VALUES (?1, ?2, ?3)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value,
               updated_at = excluded.updated_at",
            &args![key, to_json(value)?, i64_of(now)],
        )?;
        Ok(())
    }

    pub fn save_provider(&self, p: &ProviderRecord, mode: SaveMode, now: u64) -> Result<()> {
        let db = self.db;
        check_mode(db, "providers", "id", &p.id, "provider", mode)?;
        db.execute(
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
            &args![
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
        let db = self.db;
        // A credential that is not an OAuth grant ends the connection's refreshes.
        let not_grant = credential.is_some_and(|p| {
            switchyard_core::oauth::Grant::from_credential(p.expose_secret()).is_none()
        });
        let credential = match credential.map(ExposeSecret::expose_secret) {
            None => None,
            Some("") => Some(String::new()),
            Some(plain) => Some(self.store.sealing_key(db)?.seal(&c.id, plain)?),
        };
        check_mode(db, "connections", "id", &c.id, "connection", mode)?;
        let provider_exists = db
            .query_opt("SELECT 1 FROM providers WHERE id = ?1", &args![c.provider])?
            .is_some();
        if !provider_exists {
            return Err(StoreError::NotFound {
                kind: "provider",
                id: c.provider.clone(),
            });
        }
        db.execute(
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
            &args![
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
        if not_grant {
            crate::oauth::forget(db, &c.id)?;
        }
        Ok(())
    }

    pub fn save_combo(&self, c: &ComboRecord, mode: SaveMode, now: u64) -> Result<()> {
        let db = self.db;
        check_mode(db, "combos", "name", &c.name, "combo", mode)?;
        db.execute(
            "INSERT INTO combos (name, strategy, targets, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?4)
             ON CONFLICT(name) DO UPDATE SET strategy = excluded.strategy,
               targets = excluded.targets, updated_at = excluded.updated_at",
            &args![c.name, c.strategy, to_json(&c.targets)?, i64_of(now)],
        )?;
        Ok(())
    }

    pub fn replace_aliases(&self, list: &[AliasRecord], now: u64) -> Result<()> {
        let db = self.db;
        db.execute("DELETE FROM model_aliases", &[])?;
        for (i, a) in list.iter().enumerate() {
            db.execute(
                "INSERT INTO model_aliases (position, pattern, target, keys, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                &args![i, a.pattern, a.target, to_json(&a.keys)?, now],
            )?;
        }
        Ok(())
    }
}

pub(crate) fn query_providers(db: &dyn Sql, id: Option<&str>) -> Result<Vec<ProviderRecord>> {
    db.query_map(
        "SELECT id, format, base_url, models, prices, max_concurrent, max_output_tokens,
           stream_timeouts, context_windows
         FROM providers
         WHERE (CAST(?1 AS TEXT) IS NULL OR id = ?1) ORDER BY created_at, id",
        &args![id],
        |r| {
            Ok(ProviderRecord {
                id: r.get(0)?,
                format: enum_from_str(&r.get::<String>(1)?)?,
                base_url: r.get(2)?,
                models: from_json(&r.get::<String>(3)?)?,
                prices: from_json(&r.get::<String>(4)?)?,
                max_concurrent: r.get(5)?,
                max_output_tokens: from_json(&r.get::<String>(6)?)?,
                stream_timeouts: from_json(&r.get::<String>(7)?)?,
                context_windows: from_json(&r.get::<String>(8)?)?,
            })
        },
    )
}

pub(crate) fn query_connections(
    db: &dyn Sql,
    id: Option<&str>,
) -> Result<Vec<(ConnectionRecord, String)>> {
    db.query_map(
        "SELECT id, provider_id, auth_class, format, base_url, credential, enabled,
           max_concurrent, rate_limit_overrides, provider_specific_data, disable_cooling
         FROM connections WHERE (CAST(?1 AS TEXT) IS NULL OR id = ?1) ORDER BY created_at, id",
        &args![id],
        |r| {
            let cred: String = r.get(5)?;
            Ok((
                ConnectionRecord {
                    id: r.get(0)?,
                    provider: r.get(1)?,
                    auth_class: enum_from_str(&r.get::<String>(2)?)?,
                    format: r
                        .get::<Option<String>>(3)?
                        .as_deref()
                        .map(enum_from_str)
                        .transpose()?,
                    base_url: r.get(4)?,
                    enabled: r.get(6)?,
                    max_concurrent: r.get(7)?,
                    rate_limit_overrides: opt_from_json(r.get(8)?)?,
                    provider_specific_data: opt_from_json(r.get(9)?)?,
                    disable_cooling: r.get(10)?,
                    has_credential: !cred.is_empty(),
                },
                cred,
            ))
        },
    )
}

pub(crate) fn query_combos(db: &dyn Sql, name: Option<&str>) -> Result<Vec<ComboRecord>> {
    db.query_map(
        "SELECT name, strategy, targets FROM combos
         WHERE (CAST(?1 AS TEXT) IS NULL OR name = ?1) ORDER BY created_at, name",
        &args![name],
        |r| {
            Ok(ComboRecord {
                name: r.get(0)?,
                strategy: r.get(1)?,
                targets: from_json(&r.get::<String>(2)?)?,
            })
        },
    )
}

pub(crate) fn query_aliases(db: &dyn Sql) -> Result<Vec<AliasRecord>> {
    db.query_map(
        "SELECT pattern, target, keys FROM model_aliases ORDER BY position",
        &[],
        |r| {
            Ok(AliasRecord {
                pattern: r.get(0)?,
                target: r.get(1)?,
                keys: from_json(&r.get::<String>(2)?)?,
            })
        },
    )
}

pub(crate) fn query_settings(db: &dyn Sql) -> Result<Vec<SettingRecord>> {
    query_text_pairs(db, "SELECT key, value FROM settings ORDER BY key")?
        .into_iter()
        .map(|(key, value)| {
            Ok(SettingRecord {
                key,
                value: from_json(&value)?,
            })
        })
        .collect()
}
