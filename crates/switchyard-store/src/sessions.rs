//! Session pins (SPEC R15): which connection each client session is pinned to, keyed
//! by the hex SHA-256 of the client key id and session id, so no session id is stored.
//! Written behind the request path in batches; read at start. Also each combo's last
//! good connection (SPEC R19's `lkgp`), kept the same way.

use crate::db::args;
use crate::store::i64_of;
use crate::{Result, Store};

/// One stored pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinRow {
    /// Hex SHA-256 of the client key id and the session id.
    pub session_key: String,
    pub key_id: String,
    pub connection_id: String,
    pub created_at: u64,
    pub last_used_at: u64,
}

/// One change: the session key and its pin, or `None` to delete it.
pub type PinChange = (String, Option<PinRow>);

impl Store {
    /// The pins used at or after `since`, most recently used first, at most `limit`.
    pub fn load_pins(&self, since: u64, limit: usize) -> Result<Vec<PinRow>> {
        self.read(|db| {
            db.query_map(
                "SELECT session_key, key_id, connection_id, created_at, last_used_at
                 FROM session_pins WHERE last_used_at >= ?1
                 ORDER BY last_used_at DESC LIMIT ?2",
                &args![i64_of(since), limit],
                |r| {
                    Ok(PinRow {
                        session_key: r.get(0)?,
                        key_id: r.get(1)?,
                        connection_id: r.get(2)?,
                        created_at: r.get(3)?,
                        last_used_at: r.get(4)?,
                    })
                },
            )
        })
    }

    /// Writes changed pins in one transaction, and deletes those unused since before
    /// `expired_before`.
    pub fn save_pins(&self, changes: &[PinChange], expired_before: u64) -> Result<()> {
        self.write(|db| {
            for (key, pin) in changes {
                match pin {
                    Some(p) => {
                        db.execute(
                            "INSERT INTO session_pins
                               (session_key, key_id, connection_id, created_at, last_used_at)
                             VALUES (?1, ?2, ?3, ?4, ?5)
                             ON CONFLICT(session_key) DO UPDATE SET key_id = excluded.key_id,
                               connection_id = excluded.connection_id,
                               created_at = excluded.created_at,
                               last_used_at = excluded.last_used_at",
                            &args![
                                key,
                                p.key_id,
                                p.connection_id,
                                i64_of(p.created_at),
                                i64_of(p.last_used_at)
                            ],
                        )?;
                    }
                    None => {
                        db.execute(
                            "DELETE FROM session_pins WHERE session_key = ?1",
                            &args![key],
                        )?;
                    }
                }
            }
            db.execute(
                "DELETE FROM session_pins WHERE last_used_at < ?1",
                &args![i64_of(expired_before)],
            )?;
            Ok(())
        })
    }
}

/// One combo's last good connection, or `None` to forget it.
pub type LastGoodChange = (String, Option<(String, u64)>);

impl Store {
    /// Every combo's last good connection and when it served (SPEC R19's `lkgp`).
    pub fn load_last_good(&self) -> Result<Vec<(String, String, u64)>> {
        self.read(|db| {
            db.query_map(
                "SELECT combo, connection_id, updated_at FROM combo_last_good",
                &[],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
        })
    }

    /// Writes changed last good connections in one transaction. A mark older than the
    /// stored one (written late by another replica) does not replace it.
    pub fn save_last_good(&self, changes: &[LastGoodChange]) -> Result<()> {
        self.write(|db| {
            for (combo, good) in changes {
                match good {
                    Some((c, at)) => {
                        db.execute(
                            "INSERT INTO combo_last_good (combo, connection_id, updated_at)
                             VALUES (?1, ?2, ?3)
                             ON CONFLICT(combo) DO UPDATE SET
                               connection_id = excluded.connection_id,
                               updated_at = excluded.updated_at
                             WHERE combo_last_good.updated_at <= excluded.updated_at",
                            &args![combo, c, i64_of(*at)],
                        )?;
                    }
                    None => {
                        db.execute(
                            "DELETE FROM combo_last_good WHERE combo = ?1",
                            &args![combo],
                        )?;
                    }
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &str, conn: &str, last: u64) -> PinRow {
        PinRow {
            session_key: key.into(),
            key_id: "k1".into(),
            connection_id: conn.into(),
            created_at: 5,
            last_used_at: last,
        }
    }

    #[test]
    fn last_good_connections_are_written_replaced_and_forgotten() {
        crate::store::testing::each_backend(|store| {
            store
                .save_last_good(&[
                    ("a".into(), Some(("c1".into(), 5))),
                    ("b".into(), Some(("c2".into(), 6))),
                ])
                .unwrap();
            store
                .save_last_good(&[("a".into(), Some(("c3".into(), 7))), ("b".into(), None)])
                .unwrap();
            // Another replica's older mark, written late.
            store
                .save_last_good(&[("a".into(), Some(("c9".into(), 6)))])
                .unwrap();
            assert_eq!(
                store.load_last_good().unwrap(),
                vec![("a".into(), "c3".into(), 7)]
            );
        });
    }

    #[test]
    fn pins_are_written_moved_deleted_and_expired() {
        crate::store::testing::each_backend(|store| {
            store
                .save_pins(
                    &[
                        ("a".into(), Some(row("a", "c1", 100))),
                        ("b".into(), Some(row("b", "c1", 200))),
                        ("c".into(), Some(row("c", "c2", 50))),
                    ],
                    0,
                )
                .unwrap();
            assert_eq!(
                store.load_pins(0, 10).unwrap(),
                vec![row("b", "c1", 200), row("a", "c1", 100), row("c", "c2", 50)]
            );
            assert_eq!(store.load_pins(60, 1).unwrap(), vec![row("b", "c1", 200)]);
            store
                .save_pins(
                    &[("a".into(), Some(row("a", "c2", 300))), ("b".into(), None)],
                    60,
                )
                .unwrap();
            assert_eq!(store.load_pins(0, 10).unwrap(), vec![row("a", "c2", 300)]);
        });
    }
}
