//! Client API keys (SPEC G2): only each key's hash is stored; its records carry no
//! secret. Written through the configuration's transactions (each bumps the config
//! version), read with the rest of the configuration.

use crate::db::{args, Sql};
use crate::store::{check_mode, delete_row, first, from_json, opt_from_json, to_json};
use crate::{Batch, Result, Store, StoreError};
use switchyard_model::{KeyRecord, SaveMode};

impl Store {
    pub fn list_keys(&self) -> Result<Vec<KeyRecord>> {
        self.read(|db| query_keys(db, None))
    }

    pub fn get_key(&self, id: &str) -> Result<KeyRecord> {
        first(self.read(|db| query_keys(db, Some(id)))?, "key", id)
    }

    pub fn save_key(&self, k: &KeyRecord, mode: SaveMode) -> Result<()> {
        self.batch(|b| b.save_key(k, mode))
    }

    /// Marks a key revoked. Revoking twice keeps the first revocation time.
    pub fn revoke_key(&self, id: &str, now: u64) -> Result<KeyRecord> {
        self.batch(|b| b.revoke_key(id, now))
    }

    pub fn delete_key(&self, id: &str) -> Result<()> {
        self.batch(|b| b.delete_key(id))
    }
}

impl Batch<'_> {
    /// Marks a key revoked. Revoking twice keeps the first revocation time.
    pub fn revoke_key(&self, id: &str, now: u64) -> Result<KeyRecord> {
        let db = self.db;
        let n = db.execute(
            "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?2) WHERE id = ?1",
            &args![id, now],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound {
                kind: "key",
                id: id.to_owned(),
            });
        }
        first(query_keys(db, Some(id))?, "key", id)
    }

    pub fn delete_key(&self, id: &str) -> Result<()> {
        let db = self.db;
        delete_row(db, "api_keys", "id", id, "key")
    }

    pub fn save_key(&self, k: &KeyRecord, mode: SaveMode) -> Result<()> {
        let db = self.db;
        check_mode(db, "api_keys", "id", &k.id, "key", mode)?;
        db.execute(
            "INSERT INTO api_keys (id, name, key_hash, prefix, scopes, allowed_connections,
               allowed_models, created_at, revoked_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT(id) DO UPDATE SET name = excluded.name,
               key_hash = excluded.key_hash, prefix = excluded.prefix,
               scopes = excluded.scopes,
               allowed_connections = excluded.allowed_connections,
               allowed_models = excluded.allowed_models,
               revoked_at = COALESCE(api_keys.revoked_at, excluded.revoked_at)",
            &args![
                k.id,
                k.name,
                k.key_hash,
                k.prefix,
                to_json(&k.scopes)?,
                k.allowed_connections.as_ref().map(to_json).transpose()?,
                k.allowed_models.as_ref().map(to_json).transpose()?,
                k.created_at,
                k.revoked_at,
            ],
        )?;
        Ok(())
    }
}

pub(crate) fn query_keys(db: &dyn Sql, id: Option<&str>) -> Result<Vec<KeyRecord>> {
    db.query_map(
        "SELECT id, name, key_hash, prefix, scopes, allowed_connections, allowed_models,
           created_at, revoked_at
         FROM api_keys WHERE (CAST(?1 AS TEXT) IS NULL OR id = ?1) ORDER BY created_at, id",
        &args![id],
        |r| {
            Ok(KeyRecord {
                id: r.get(0)?,
                name: r.get(1)?,
                key_hash: r.get(2)?,
                prefix: r.get(3)?,
                scopes: from_json(&r.get::<String>(4)?)?,
                allowed_connections: opt_from_json(r.get(5)?)?,
                allowed_models: opt_from_json(r.get(6)?)?,
                created_at: r.get(7)?,
                revoked_at: r.get(8)?,
            })
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revoke_keeps_first_time() {
        crate::store::testing::each_backend(|s| {
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
        });
    }
}
