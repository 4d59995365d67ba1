//! OAuth subscription connections (SPEC R4): the grant (access and refresh token) is the
//! connection's credential, sealed like every credential; `oauth_state` holds what is not
//! secret — expiry, refreshes, failures — and the refresh lease.
//!
//! A refresh token rotates, and the old one is dead once used: two processes refreshing
//! one connection together would get `refresh_token_reused` and end the login. So a
//! refresh happens only under the connection's lease ([`Store::take_refresh_lease`]),
//! taken in the database that every replica shares; its new tokens are written as a
//! configuration change ([`Store::refreshed`]), so every replica's next snapshot holds
//! them.

use crate::db::{args, Sql};
use crate::store::{enum_to_str, i64_of, Batch};
use crate::{Result, Store, StoreError};
use secrecy::{ExposeSecret, SecretString};
use switchyard_core::oauth::{Grant, Refreshes};
use switchyard_model::{ConnectionRecord, OauthRecord, SaveMode};

/// What taking a connection's refresh lease found.
#[derive(Debug)]
pub enum RefreshLease {
    /// The lease is this holder's until it is released or runs out: the grant as stored
    /// now, and its refreshes.
    Taken(Box<Grant>, OauthRecord),
    /// Another holder refreshes the connection now.
    Busy,
    /// The connection holds no OAuth grant (any more).
    Gone,
}

impl Store {
    /// Every OAuth connection's refresh state.
    pub fn list_oauth(&self) -> Result<Vec<OauthRecord>> {
        self.read(|db| query_oauth(db, None))
    }

    /// Connection `id`'s refresh state, when it holds an OAuth grant.
    pub fn oauth_of(&self, id: &str) -> Result<Option<OauthRecord>> {
        Ok(self.read(|db| query_oauth(db, Some(id)))?.pop())
    }

    /// Takes connection `id`'s refresh lease for `holder` until `until`, unless another
    /// holder has it past `now`.
    pub fn take_refresh_lease(
        &self,
        id: &str,
        holder: &str,
        now: u64,
        until: u64,
    ) -> Result<RefreshLease> {
        self.write(|db| {
            let taken = db.execute(
                "UPDATE oauth_state SET lease_holder = ?2, lease_until = ?4
                 WHERE connection_id = ?1 AND (lease_until <= ?3 OR lease_holder = ?2)",
                &args![id, holder, i64_of(now), i64_of(until)],
            )?;
            if taken == 0 {
                let exists = db
                    .query_opt(
                        "SELECT 1 FROM oauth_state WHERE connection_id = ?1",
                        &args![id],
                    )?
                    .is_some();
                return Ok(if exists {
                    RefreshLease::Busy
                } else {
                    RefreshLease::Gone
                });
            }
            let grant = self.stored_grant(db, id)?;
            let record = query_oauth(db, Some(id))?.into_iter().next();
            Ok(match (grant, record) {
                (Some(g), Some(r)) => RefreshLease::Taken(Box::new(g), r),
                _ => RefreshLease::Gone,
            })
        })
    }

    /// Stores the refreshed `grant` of connection `id` and its refreshes, and releases
    /// `holder`'s lease: one configuration change, so every process reloads with the
    /// new tokens.
    pub fn refreshed(
        &self,
        id: &str,
        holder: &str,
        grant: &Grant,
        refreshes: &Refreshes,
        now: u64,
    ) -> Result<()> {
        self.config_write(|db| {
            let sealed = self.sealing_key(db)?.seal(id, &grant.to_credential())?;
            let n = db.execute(
                "UPDATE connections SET credential = ?2, updated_at = ?3 WHERE id = ?1",
                &args![id, sealed, i64_of(now)],
            )?;
            if n == 0 {
                return Err(StoreError::NotFound {
                    kind: "connection",
                    id: id.to_owned(),
                });
            }
            db.execute(
                "UPDATE oauth_state SET expires_at = ?2 WHERE connection_id = ?1",
                &args![id, grant.expires_at.map(i64_of)],
            )?;
            write_state(db, id, refreshes, holder, now)
        })
    }

    /// Records a failed refresh of connection `id` and releases `holder`'s lease. Not a
    /// configuration change: the tokens stay as they were.
    pub fn refresh_failed(
        &self,
        id: &str,
        holder: &str,
        refreshes: &Refreshes,
        now: u64,
    ) -> Result<()> {
        self.write(|db| write_state(db, id, refreshes, holder, now))
    }

    /// Releases `holder`'s lease on connection `id`, changing nothing else.
    pub fn release_refresh_lease(&self, id: &str, holder: &str) -> Result<()> {
        self.write(|db| {
            db.execute(
                "UPDATE oauth_state SET lease_until = 0
                 WHERE connection_id = ?1 AND lease_holder = ?2",
                &args![id, holder],
            )?;
            Ok(())
        })
    }

    /// Connection `id`'s grant as stored, opened.
    fn stored_grant(&self, db: &dyn Sql, id: &str) -> Result<Option<Grant>> {
        let Some(row) = db.query_opt(
            "SELECT credential FROM connections WHERE id = ?1",
            &args![id],
        )?
        else {
            return Ok(None);
        };
        let stored: String = row.get(0)?;
        let plain = self.reveal(id, &stored)?;
        Ok(Grant::from_credential(plain.expose_secret()))
    }
}

impl Batch<'_> {
    /// Saves connection `c` with `grant` as its credential and its refresh state as
    /// new (a new credential ends earlier failures).
    pub fn save_grant(
        &self,
        c: &ConnectionRecord,
        grant: &Grant,
        mode: SaveMode,
        now: u64,
    ) -> Result<()> {
        let credential = SecretString::from(grant.to_credential());
        self.save_connection(c, Some(&credential), mode, now)?;
        // Imported tokens were never refreshed here: a 401 met with them is refreshed
        // at once, however soon.
        let refreshes = Refreshes::default();
        let issuer = enum_to_str(&grant.issuer)?;
        self.db.execute(
            "INSERT INTO oauth_state (connection_id, issuer, expires_at, updated_at)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(connection_id) DO UPDATE SET issuer = excluded.issuer,
               expires_at = excluded.expires_at",
            &args![c.id, issuer, grant.expires_at.map(i64_of), i64_of(now)],
        )?;
        write_state(self.db, &c.id, &refreshes, "", now)
    }
}

/// Writes connection `id`'s refreshes and releases `holder`'s lease (the expiry is the
/// tokens', written with them).
fn write_state(db: &dyn Sql, id: &str, r: &Refreshes, holder: &str, now: u64) -> Result<()> {
    db.execute(
        "UPDATE oauth_state SET last_refresh_at = ?2, failures = ?3,
           retry_at = ?4, last_error = ?5, updated_at = ?6,
           lease_until = CASE WHEN lease_holder = ?7 THEN 0 ELSE lease_until END
         WHERE connection_id = ?1",
        &args![
            id,
            r.last_refresh_at.map(i64_of),
            r.failures,
            r.retry_at.map(i64_of),
            r.last_error,
            i64_of(now),
            holder
        ],
    )?;
    Ok(())
}

/// The refresh state of connection `id`, or of every OAuth connection.
pub(crate) fn query_oauth(db: &dyn Sql, id: Option<&str>) -> Result<Vec<OauthRecord>> {
    db.query_map(
        "SELECT connection_id, issuer, expires_at, last_refresh_at, failures, retry_at,
           last_error
         FROM oauth_state WHERE (CAST(?1 AS TEXT) IS NULL OR connection_id = ?1)
         ORDER BY connection_id",
        &args![id],
        |r| {
            Ok(OauthRecord {
                connection_id: r.get(0)?,
                issuer: r.get(1)?,
                expires_at: r.get(2)?,
                last_refresh_at: r.get(3)?,
                failures: r.get(4)?,
                retry_at: r.get(5)?,
                last_error: r.get(6)?,
            })
        },
    )
}

/// Forgets connection `id`'s refresh state: it was deleted, or given a credential that
/// is not a grant.
pub(crate) fn forget(db: &dyn Sql, id: &str) -> Result<()> {
    db.execute(
        "DELETE FROM oauth_state WHERE connection_id = ?1",
        &args![id],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_core::domain::{AuthClass, UpstreamFormat};
    use switchyard_core::oauth::Issuer;
    use switchyard_model::ProviderRecord;

    fn grant(access: &str, refresh: &str) -> Grant {
        Grant {
            issuer: Issuer::Claude,
            access_token: access.into(),
            refresh_token: refresh.into(),
            expires_at: Some(5_000_000),
            account_id: None,
            scopes: vec!["user:inference".into()],
            token_url: Some("http://127.0.0.1:9/v1/oauth/token".into()),
        }
    }

    fn setup(store: &Store) -> ConnectionRecord {
        let p = ProviderRecord {
            id: "claude".into(),
            format: UpstreamFormat::Anthropic,
            base_url: "http://x.test".into(),
            models: vec!["m".into()],
            prices: Default::default(),
            max_output_tokens: Default::default(),
            context_windows: Default::default(),
            stream_timeouts: Default::default(),
            max_concurrent: None,
        };
        store.save_provider(&p, SaveMode::Create, 1).unwrap();
        let c = ConnectionRecord {
            id: "sub".into(),
            provider: "claude".into(),
            auth_class: AuthClass::Oauth,
            format: None,
            base_url: None,
            enabled: true,
            max_concurrent: None,
            rate_limit_overrides: None,
            provider_specific_data: None,
            disable_cooling: false,
            has_credential: false,
        };
        store
            .batch(|b| b.save_grant(&c, &grant("a1", "r1"), SaveMode::Create, 1_000))
            .unwrap();
        c
    }

    fn stored(store: &Store) -> (Grant, OauthRecord, i64) {
        let rows = store.load_config().unwrap();
        let cred = rows.connections[0].1.expose_secret().to_owned();
        (
            Grant::from_credential(&cred).unwrap(),
            rows.oauth[0].clone(),
            rows.version,
        )
    }

    #[test]
    fn one_holder_refreshes_at_a_time_and_its_tokens_are_a_config_change() {
        crate::store::testing::each_backend(|store| {
            setup(store);
            let (g, r, v0) = stored(store);
            assert_eq!(g, grant("a1", "r1"));
            assert_eq!(
                r,
                OauthRecord {
                    connection_id: "sub".into(),
                    issuer: "claude".into(),
                    expires_at: Some(5_000_000),
                    last_refresh_at: None,
                    failures: 0,
                    retry_at: None,
                    last_error: None,
                }
            );
            let RefreshLease::Taken(g, _) =
                store.take_refresh_lease("sub", "A", 2_000, 32_000).unwrap()
            else {
                panic!("the lease is free");
            };
            assert_eq!(g.refresh_token, "r1");
            assert!(matches!(
                store.take_refresh_lease("sub", "B", 2_001, 32_001).unwrap(),
                RefreshLease::Busy
            ));
            assert!(matches!(
                store
                    .take_refresh_lease("other", "B", 2_001, 32_001)
                    .unwrap(),
                RefreshLease::Gone
            ));
            let mut refreshes = r.refreshes();
            refreshes.on_success(3_000);
            let next = Grant {
                expires_at: Some(9_000_000),
                ..grant("a2", "r2")
            };
            store
                .refreshed("sub", "A", &next, &refreshes, 3_000)
                .unwrap();
            let (g, r, v1) = stored(store);
            assert_eq!(
                (g, r.last_refresh_at, r.expires_at),
                (next, Some(3_000), Some(9_000_000))
            );
            assert_eq!(v1, v0 + 1);
            // Released: B takes it at once.
            assert!(matches!(
                store.take_refresh_lease("sub", "B", 3_001, 33_001).unwrap(),
                RefreshLease::Taken(..)
            ));
            let mut failed = refreshes.clone();
            failed.on_failure("HTTP 400: invalid_grant", 3_002);
            store.refresh_failed("sub", "B", &failed, 3_002).unwrap();
            let (_, r, v2) = stored(store);
            assert_eq!((r.failures, r.retry_at, v2), (1, Some(33_002), v1));
            assert_eq!(r.last_error.as_deref(), Some("HTTP 400: invalid_grant"));
            assert_eq!(r.state(3_003), "cooling");
            // A lease that ran out is anyone's.
            store
                .take_refresh_lease("sub", "A", 40_000, 41_000)
                .unwrap();
            assert!(matches!(
                store
                    .take_refresh_lease("sub", "B", 41_000, 71_000)
                    .unwrap(),
                RefreshLease::Taken(..)
            ));
        });
    }

    #[test]
    fn a_plain_credential_or_a_deletion_ends_the_refreshes() {
        crate::store::testing::each_backend(|store| {
            let c = setup(store);
            assert_eq!(store.list_oauth().unwrap().len(), 1);
            store
                .save_connection(
                    &c,
                    Some(&SecretString::from("sk-plain")),
                    SaveMode::Update,
                    2,
                )
                .unwrap();
            assert_eq!(store.list_oauth().unwrap(), vec![]);
            store
                .batch(|b| b.save_grant(&c, &grant("a1", "r1"), SaveMode::Update, 3))
                .unwrap();
            store
                .save_connection(&c, None, SaveMode::Update, 4)
                .unwrap();
            assert_eq!(store.list_oauth().unwrap().len(), 1);
            store.delete_connection("sub").unwrap();
            assert_eq!(store.list_oauth().unwrap(), vec![]);
        });
    }
}
