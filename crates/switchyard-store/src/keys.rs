//! Client API keys (SPEC G2): only each key's hash is stored; its records carry no
//! secret. Written through the configuration's transactions (each bumps the config
//! version), read with the rest of the configuration.

use crate::records::KeyRecord;
use crate::sqlite::{check_mode, delete_row, first, from_json, i64_of, opt_from_json, to_json};
use crate::{Batch, Result, SaveMode, Store, StoreError};
use rusqlite::{params, Connection};

impl Store {
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
}

impl Batch<'_> {
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

pub(crate) fn query_keys(conn: &Connection, id: Option<&str>) -> Result<Vec<KeyRecord>> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
