//! Resilience state tables (SPEC R1, R3, R4): provider breakers and connection health
//! as JSON documents, so open breakers and banned accounts survive restarts.

use crate::db::args;
use crate::store::{i64_of, query_text_pairs};
use crate::{Result, Store};

/// `(id, JSON state)` rows.
pub type StateRows = Vec<(String, String)>;

/// One change: `(id, JSON state, or None to delete)`.
pub type StateChange = (String, Option<String>);

impl Store {
    /// Every stored breaker and connection health: `(breakers, health)`.
    pub fn load_resilience(&self) -> Result<(StateRows, StateRows)> {
        self.read(|db| {
            Ok((
                query_text_pairs(db, "SELECT provider_id, state FROM domain_circuit_breakers")?,
                query_text_pairs(db, "SELECT connection_id, state FROM connection_health")?,
            ))
        })
    }

    /// Writes changed breakers and connection health in one transaction.
    pub fn save_resilience(
        &self,
        breakers: &[StateChange],
        health: &[StateChange],
        now: u64,
    ) -> Result<()> {
        self.write(|db| {
            for (table, key, rows) in [
                ("domain_circuit_breakers", "provider_id", breakers),
                ("connection_health", "connection_id", health),
            ] {
                for (id, state) in rows {
                    match state {
                        Some(json) => {
                            db.execute(
                                &format!(
                                    "INSERT INTO {table} ({key}, state, updated_at)
                                     VALUES (?1, ?2, ?3)
                                     ON CONFLICT({key}) DO UPDATE SET state = excluded.state,
                                       updated_at = excluded.updated_at"
                                ),
                                &args![id, json, i64_of(now)],
                            )?;
                        }
                        None => {
                            db.execute(
                                &format!("DELETE FROM {table} WHERE {key} = ?1"),
                                &args![id],
                            )?;
                        }
                    }
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn states_are_upserted_deleted_and_loaded() {
        crate::store::testing::each_backend(|s| {
            s.save_resilience(
                &[("p".into(), Some("{\"a\":1}".into()))],
                &[("c".into(), Some("{}".into()))],
                1,
            )
            .unwrap();
            s.save_resilience(&[("p".into(), Some("{\"a\":2}".into()))], &[], 2)
                .unwrap();
            assert_eq!(
                s.load_resilience().unwrap(),
                (
                    vec![("p".into(), "{\"a\":2}".into())],
                    vec![("c".into(), "{}".into())]
                )
            );
            s.save_resilience(&[("p".into(), None)], &[("c".into(), None)], 3)
                .unwrap();
            assert_eq!(s.load_resilience().unwrap(), (vec![], vec![]));
        });
    }
}
