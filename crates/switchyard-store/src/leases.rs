//! Exclusive session leases (SPEC R16): the decisions are the core's
//! ([`switchyard_core::routing::lease`]); this module persists their writes, each in one
//! immediate transaction that first marks lapsed leases expired, so the partial unique
//! indexes on the active owner and the active connection see only live ones and refuse a
//! second winner. The owner is stored as its SHA-256 only.

use crate::db::{args, Sql};
use crate::store::i64_of;
use crate::{Result, Store, StoreError};
use switchyard_core::routing::lease::{Ended, Lease, OwnerHash, Write};

/// How long ended leases stay, as their owners' generation history.
pub const ENDED_KEPT_MS: u64 = 7 * 24 * 3_600_000;

impl Store {
    /// The active leases unexpired at `now`.
    pub fn load_leases(&self, now: u64) -> Result<Vec<Lease>> {
        let rows = self.read(|db| {
            db.query_map(
                "SELECT owner_hash, key_id, connection_id, generation, acquired_at, renewed_at,
                        expires_at
                 FROM session_leases WHERE state = 'active' AND expires_at > ?1 ORDER BY id",
                &args![i64_of(now)],
                |r| {
                    Ok((
                        r.get::<String>(0)?,
                        Lease {
                            owner: OwnerHash([0; 32]),
                            key_id: r.get(1)?,
                            connection: r.get(2)?,
                            generation: r.get(3)?,
                            acquired_ms: r.get(4)?,
                            renewed_ms: r.get(5)?,
                            expires_ms: r.get(6)?,
                        },
                    ))
                },
            )
        })?;
        Ok(rows
            .into_iter()
            .filter_map(|(hex, lease)| {
                Some(Lease {
                    owner: OwnerHash::from_hex(&hex)?,
                    ..lease
                })
            })
            .collect())
    }

    /// The owner's highest generation so far, 0 for an owner never seen.
    pub fn lease_generation(&self, owner: &OwnerHash) -> Result<u64> {
        self.read(|db| {
            db.query_one(
                "SELECT CAST(COALESCE(MAX(generation), 0) AS BIGINT) FROM session_leases
                 WHERE owner_hash = ?1",
                &args![owner.to_hex()],
            )?
            .get::<u64>(0)
        })
    }

    /// Persists `writes` in one transaction at `now`, after marking lapsed leases
    /// expired and dropping ended ones older than [`ENDED_KEPT_MS`]. A write that would
    /// make a second active lease of an owner or of a connection fails with
    /// [`StoreError::Conflict`] and writes nothing.
    pub fn write_leases(&self, writes: &[Write], now: u64) -> Result<()> {
        self.write(|db| {
            db.execute(
                "UPDATE session_leases SET state = 'expired', ended_at = expires_at
                 WHERE state = 'active' AND expires_at <= ?1",
                &args![i64_of(now)],
            )?;
            db.execute(
                "DELETE FROM session_leases WHERE state != 'active' AND ended_at < ?1",
                &args![i64_of(now.saturating_sub(ENDED_KEPT_MS))],
            )?;
            for w in writes {
                apply(db, w, now)?;
            }
            if db.dialect() == crate::db::Dialect::Postgres {
                crate::postgres::announce(db, crate::postgres::LEASES_CHANNEL)?;
            }
            Ok(())
        })
    }
}

fn apply(db: &dyn Sql, write: &Write, now: u64) -> Result<()> {
    match write {
        Write::Insert(l) => db
            .execute(
                "INSERT INTO session_leases (owner_hash, key_id, connection_id, generation,
                   state, acquired_at, renewed_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, 'active', ?5, ?6, ?7)",
                &args![
                    l.owner.to_hex(),
                    l.key_id,
                    l.connection,
                    i64_of(l.generation),
                    i64_of(l.acquired_ms),
                    i64_of(l.renewed_ms),
                    i64_of(l.expires_ms)
                ],
            )
            .map(drop)
            .map_err(|e| conflict(e, &l.connection)),
        Write::Extend {
            owner,
            renewed_ms,
            expires_ms,
        } => active(
            db.execute(
                "UPDATE session_leases SET renewed_at = ?2, expires_at = ?3
                 WHERE owner_hash = ?1 AND state = 'active'",
                &args![owner.to_hex(), i64_of(*renewed_ms), i64_of(*expires_ms)],
            )?,
            owner,
        ),
        Write::Move { owner, connection } => active(
            db.execute(
                "UPDATE session_leases SET connection_id = ?2
                 WHERE owner_hash = ?1 AND state = 'active'",
                &args![owner.to_hex(), connection],
            )
            .map_err(|e| conflict(e, connection))?,
            owner,
        ),
        Write::End { owner, how } => {
            let state = match how {
                Ended::Released => "released",
                Ended::Expired => "expired",
                Ended::Invalidated => "invalidated",
            };
            db.execute(
                "UPDATE session_leases SET state = ?2, ended_at = ?3
                 WHERE owner_hash = ?1 AND state = 'active'",
                &args![owner.to_hex(), state, i64_of(now)],
            )?;
            Ok(())
        }
    }
}

/// A unique-index refusal as the conflict it is.
fn conflict(e: StoreError, connection: &str) -> StoreError {
    match e {
        StoreError::Constraint(_) => StoreError::Conflict {
            kind: "active lease on connection",
            id: connection.to_owned(),
        },
        e => e,
    }
}

/// A write to the owner's active lease that found none.
fn active(changed: usize, owner: &OwnerHash) -> Result<()> {
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::NotFound {
            kind: "active lease",
            id: owner.to_hex()[..12].to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(b: u8) -> OwnerHash {
        OwnerHash([b; 32])
    }

    fn lease(o: u8, conn: &str, generation: u64, expires_ms: u64) -> Lease {
        Lease {
            owner: owner(o),
            key_id: "k1".into(),
            connection: conn.into(),
            generation,
            acquired_ms: 100,
            renewed_ms: 100,
            expires_ms,
        }
    }

    #[test]
    fn the_database_allows_one_active_lease_per_owner_and_per_connection() {
        crate::store::testing::each_backend(|store| {
            store
                .write_leases(&[Write::Insert(lease(1, "c1", 1, 1_000))], 100)
                .unwrap();
            // Another owner on the same connection, and the same owner on another one.
            for clash in [lease(2, "c1", 1, 1_000), lease(1, "c2", 2, 1_000)] {
                let e = store
                    .write_leases(&[Write::Insert(clash.clone())], 100)
                    .unwrap_err();
                assert!(matches!(e, StoreError::Conflict { .. }), "{clash:?}: {e}");
            }
            assert_eq!(
                store.load_leases(100).unwrap(),
                vec![lease(1, "c1", 1, 1_000)]
            );
            // A move onto a held connection is refused, and nothing of its batch is kept.
            store
                .write_leases(&[Write::Insert(lease(2, "c2", 1, 1_000))], 100)
                .unwrap();
            let e = store
                .write_leases(
                    &[
                        Write::Extend {
                            owner: owner(1),
                            renewed_ms: 200,
                            expires_ms: 5_000,
                        },
                        Write::Move {
                            owner: owner(1),
                            connection: "c2".into(),
                        },
                    ],
                    200,
                )
                .unwrap_err();
            assert!(matches!(e, StoreError::Conflict { .. }), "{e}");
            assert_eq!(
                store.load_leases(100).unwrap(),
                vec![lease(1, "c1", 1, 1_000), lease(2, "c2", 1, 1_000)]
            );
        });
    }

    #[test]
    fn a_lapsed_lease_frees_its_connection_and_generations_keep_counting() {
        crate::store::testing::each_backend(|store| {
            store
                .write_leases(&[Write::Insert(lease(1, "c1", 1, 1_000))], 100)
                .unwrap();
            assert_eq!(store.load_leases(1_000).unwrap(), vec![]);
            // At 1000 the lease has lapsed: another owner may take c1.
            store
                .write_leases(&[Write::Insert(lease(2, "c1", 1, 9_000))], 1_000)
                .unwrap();
            assert_eq!(store.lease_generation(&owner(1)).unwrap(), 1);
            assert_eq!(store.lease_generation(&owner(3)).unwrap(), 0);
            // The first owner comes back on c2 at its next generation, renews, moves, ends.
            store
                .write_leases(&[Write::Insert(lease(1, "c2", 2, 3_000))], 1_500)
                .unwrap();
            assert_eq!(store.lease_generation(&owner(1)).unwrap(), 2);
            store
                .write_leases(
                    &[
                        Write::Extend {
                            owner: owner(1),
                            renewed_ms: 2_000,
                            expires_ms: 8_000,
                        },
                        Write::Move {
                            owner: owner(1),
                            connection: "c3".into(),
                        },
                    ],
                    2_000,
                )
                .unwrap();
            let mut moved = lease(1, "c3", 2, 8_000);
            moved.renewed_ms = 2_000;
            assert_eq!(
                store.load_leases(2_000).unwrap(),
                vec![lease(2, "c1", 1, 9_000), moved]
            );
            store
                .write_leases(
                    &[Write::End {
                        owner: owner(1),
                        how: Ended::Released,
                    }],
                    2_500,
                )
                .unwrap();
            assert_eq!(
                store.load_leases(2_500).unwrap(),
                vec![lease(2, "c1", 1, 9_000)]
            );
            let e = store
                .write_leases(
                    &[Write::Extend {
                        owner: owner(1),
                        renewed_ms: 3_000,
                        expires_ms: 9_000,
                    }],
                    3_000,
                )
                .unwrap_err();
            assert!(matches!(e, StoreError::NotFound { .. }), "{e}");
            // Ended rows go after a week; the generation history with them.
            store.write_leases(&[], 2_500 + ENDED_KEPT_MS + 1).unwrap();
            assert_eq!(store.lease_generation(&owner(1)).unwrap(), 0);
        });
    }
}
