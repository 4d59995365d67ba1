//! Quota tables (SPEC Q1, Q4, Q9): pools, allocations, plans and consumption slots.

use crate::db::{args, Sql};
use crate::store::{check_mode, delete_row, from_json, i64_of, query_text_pairs, to_json, Batch};
use crate::{Result, Store, StoreError};
use switchyard_core::quota::decide::Policy;
use switchyard_core::quota::pool::{AllocationInput, PoolInput};
use switchyard_model::{PlanRecord, SaveMode};

/// One persisted consumption slot.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumptionRow {
    pub pool_id: String,
    /// The dimension's `unit:window` key.
    pub dimension: String,
    pub api_key_id: String,
    pub slot: u64,
    pub slot_end_ms: u64,
    pub window_ms: u64,
    pub amount: f64,
}

impl Store {
    pub fn list_pools(&self) -> Result<Vec<PoolInput>> {
        self.read(|db| query_pools(db, None))
    }

    pub fn get_pool(&self, id: &str) -> Result<PoolInput> {
        self.read(|db| query_pools(db, Some(id)))?
            .into_iter()
            .next()
            .ok_or_else(|| StoreError::NotFound {
                kind: "pool",
                id: id.to_owned(),
            })
    }

    pub fn save_pool(&self, pool: &PoolInput, mode: SaveMode, now: u64) -> Result<()> {
        self.batch(|b| b.save_pool(pool, mode, now))
    }

    /// Deletes a pool with its allocations and consumption.
    pub fn delete_pool(&self, id: &str) -> Result<()> {
        self.batch(|b| b.delete_pool(id))
    }

    pub fn save_plan(&self, plan: &PlanRecord, now: u64) -> Result<()> {
        self.batch(|b| b.save_plan(plan, now))
    }

    /// Removes a manual plan; the connection falls back to the catalog or the empty plan.
    pub fn delete_plan(&self, connection_id: &str) -> Result<()> {
        self.batch(|b| b.delete_plan(connection_id))
    }

    /// Writes slot values (absolute, so rewriting is idempotent) in one transaction.
    pub fn save_consumption(&self, rows: &[ConsumptionRow]) -> Result<()> {
        self.write(|db| {
            for r in rows {
                db.execute(
                    "INSERT INTO quota_consumption
                       (pool_id, dimension, api_key_id, slot, slot_end_ms, window_ms, amount)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                     ON CONFLICT(pool_id, dimension, api_key_id, slot)
                     DO UPDATE SET amount = excluded.amount",
                    &args![
                        r.pool_id,
                        r.dimension,
                        r.api_key_id,
                        i64_of(r.slot),
                        i64_of(r.slot_end_ms),
                        i64_of(r.window_ms),
                        r.amount
                    ],
                )?;
            }
            Ok(())
        })
    }

    /// Slots whose window has not yet passed at `now`.
    pub fn load_consumption(&self, now: u64) -> Result<Vec<ConsumptionRow>> {
        self.read(|db| {
            db.query_map(
                "SELECT pool_id, dimension, api_key_id, slot, slot_end_ms, window_ms, amount
                 FROM quota_consumption WHERE slot_end_ms + window_ms > ?1",
                &args![i64_of(now)],
                |r| {
                    Ok(ConsumptionRow {
                        pool_id: r.get(0)?,
                        dimension: r.get(1)?,
                        api_key_id: r.get(2)?,
                        slot: r.get(3)?,
                        slot_end_ms: r.get(4)?,
                        window_ms: r.get(5)?,
                        amount: r.get(6)?,
                    })
                },
            )
        })
    }

    /// Deletes slots that are outside their window and older than `retention_ms`
    /// (SPEC Q9). Returns how many were deleted.
    pub fn gc_consumption(&self, now: u64, retention_ms: u64) -> Result<usize> {
        // `slot_end_ms + max(window_ms, retention) < now`, without the two-argument MAX
        // only SQLite has.
        self.write(|db| {
            db.execute(
                "DELETE FROM quota_consumption
                 WHERE slot_end_ms + window_ms < ?2 AND slot_end_ms + ?1 < ?2",
                &args![i64_of(retention_ms), i64_of(now)],
            )
        })
    }
}

impl Batch<'_> {
    /// Deletes a pool with its allocations and consumption.
    pub fn delete_pool(&self, id: &str) -> Result<()> {
        let db = self.db;
        db.execute(
            "DELETE FROM quota_consumption WHERE pool_id = ?1",
            &args![id],
        )?;
        delete_row(db, "quota_pools", "id", id, "pool")
    }

    /// Removes a manual plan; the connection falls back to the catalog or the empty plan.
    pub fn delete_plan(&self, connection_id: &str) -> Result<()> {
        let db = self.db;
        delete_row(db, "provider_plans", "connection_id", connection_id, "plan")
    }

    /// Whether no pool exists yet (the condition of a one-time import).
    pub fn pools_empty(&self) -> Result<bool> {
        Ok(self
            .db
            .query_opt("SELECT 1 FROM quota_pools LIMIT 1", &[])?
            .is_none())
    }

    /// Saves a pool and replaces its allocations.
    pub fn save_pool(&self, pool: &PoolInput, mode: SaveMode, now: u64) -> Result<()> {
        let db = self.db;
        check_mode(db, "quota_pools", "id", &pool.id, "pool", mode)?;
        db.execute(
            "INSERT INTO quota_pools (id, name, connection_ids, dimensions, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?5)
             ON CONFLICT(id) DO UPDATE SET name = excluded.name,
               connection_ids = excluded.connection_ids, dimensions = excluded.dimensions,
               updated_at = excluded.updated_at",
            &args![
                pool.id,
                pool.name,
                to_json(&pool.connection_ids)?,
                to_json(&pool.dimensions)?,
                i64_of(now)
            ],
        )?;
        db.execute(
            "DELETE FROM quota_allocations WHERE pool_id = ?1",
            &args![pool.id],
        )?;
        for (i, a) in pool.allocations.iter().enumerate() {
            db.execute(
                "INSERT INTO quota_allocations (pool_id, api_key_id, position, allocation_weight,
                   cap_value, cap_unit, policy) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                &args![
                    pool.id,
                    a.api_key_id,
                    i,
                    a.allocation_weight,
                    a.cap_value,
                    a.cap_unit,
                    a.policy
                ],
            )?;
        }
        Ok(())
    }

    pub fn save_plan(&self, plan: &PlanRecord, now: u64) -> Result<()> {
        self.db.execute(
            "INSERT INTO provider_plans (connection_id, dimensions, updated_at)
             VALUES (?1, ?2, ?3)
             ON CONFLICT(connection_id) DO UPDATE SET dimensions = excluded.dimensions,
               updated_at = excluded.updated_at",
            &args![plan.connection_id, to_json(&plan.dimensions)?, i64_of(now)],
        )?;
        Ok(())
    }
}

pub(crate) fn query_pools(db: &dyn Sql, id: Option<&str>) -> Result<Vec<PoolInput>> {
    // The cast gives PostgreSQL the parameter's type where it is only tested for NULL.
    let raw = db.query_map(
        "SELECT id, name, connection_ids, dimensions FROM quota_pools
         WHERE (CAST(?1 AS TEXT) IS NULL OR id = ?1) ORDER BY created_at, id",
        &args![id],
        |r| {
            Ok((
                r.get::<String>(0)?,
                r.get::<String>(1)?,
                r.get::<String>(2)?,
                r.get::<String>(3)?,
            ))
        },
    )?;
    raw.into_iter()
        .map(|(id, name, connections, dimensions)| {
            let allocations = db
                .query_map(
                    "SELECT api_key_id, allocation_weight, cap_value, cap_unit, policy
                     FROM quota_allocations WHERE pool_id = ?1 ORDER BY position",
                    &args![id],
                    |r| {
                        Ok(AllocationInput {
                            api_key_id: r.get(0)?,
                            allocation_weight: r.get(1)?,
                            cap_value: r.get(2)?,
                            cap_unit: r.get(3)?,
                            policy: r.get(4)?,
                        })
                    },
                )?
                .into_iter()
                .map(|a| lenient_policy(&id, a))
                .collect();
            Ok(PoolInput {
                id,
                name,
                connection_ids: from_json(&connections)?,
                dimensions: from_json(&dimensions)?,
                allocations,
            })
        })
        .collect()
}

/// Longest stored policy text quoted in the warning about it.
const MAX_QUOTED_POLICY: usize = 32;

/// An allocation as read back from the database: a policy this version does not know
/// (written by another version, or by hand) is read as `hard` (SPEC Q2), with a warning,
/// instead of making the stored configuration invalid. Input through the API and the
/// configuration file stays strict.
fn lenient_policy(pool_id: &str, mut a: AllocationInput) -> AllocationInput {
    if Policy::parse(&a.policy).is_none() {
        let stored: String = a.policy.chars().take(MAX_QUOTED_POLICY).collect();
        tracing::warn!(
            pool = pool_id,
            key_id = %a.api_key_id,
            stored = %stored,
            "Stored quota allocation has an unknown policy; judging the key as hard."
        );
        a.policy = Policy::Hard.as_str().to_owned();
    }
    a
}

pub(crate) fn query_plans(db: &dyn Sql) -> Result<Vec<PlanRecord>> {
    query_text_pairs(
        db,
        "SELECT connection_id, dimensions FROM provider_plans ORDER BY connection_id",
    )?
    .into_iter()
    .map(|(connection_id, dims)| {
        Ok(PlanRecord {
            connection_id,
            dimensions: from_json(&dims)?,
        })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use switchyard_core::quota::pool::DimensionInput;
    use switchyard_model::{ConnectionRecord, KeyRecord, ProviderRecord};

    fn seed(s: &Store) {
        s.save_provider(
            &ProviderRecord {
                id: "p".into(),
                format: switchyard_core::domain::UpstreamFormat::Openai,
                base_url: "http://x".into(),
                models: vec![],
                prices: Default::default(),
                max_output_tokens: Default::default(),
                context_windows: Default::default(),
                stream_timeouts: Default::default(),
                max_concurrent: None,
            },
            SaveMode::Create,
            1,
        )
        .unwrap();
        s.save_connection(
            &ConnectionRecord {
                id: "c1".into(),
                provider: "p".into(),
                auth_class: switchyard_core::domain::AuthClass::Apikey,
                format: None,
                base_url: None,
                enabled: true,
                max_concurrent: None,
                rate_limit_overrides: None,
                provider_specific_data: None,
                disable_cooling: false,
                has_credential: false,
            },
            Some(&"secret".into()),
            SaveMode::Create,
            1,
        )
        .unwrap();
        for k in ["k1", "k2"] {
            s.save_key(
                &KeyRecord {
                    id: k.into(),
                    name: k.into(),
                    key_hash: format!("hash-{k}"),
                    prefix: "sy-".into(),
                    scopes: vec![],
                    allowed_connections: None,
                    allowed_models: None,
                    created_at: 1,
                    revoked_at: None,
                },
                SaveMode::Create,
            )
            .unwrap();
        }
    }

    fn pool() -> PoolInput {
        serde_json::from_value(json!({
            "id": "team", "name": "Team", "connectionIds": ["c1"],
            "dimensions": [{"unit": "requests", "window": "hourly", "limit": 100}],
            "allocations": [
                {"apiKeyId": "k2", "allocationWeight": 70, "policy": "soft"},
                {"apiKeyId": "k1", "allocationWeight": 30, "capValue": 5, "capUnit": "requests", "policy": "hard"}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn pools_round_trip_with_allocations_in_order() {
        crate::store::testing::each_backend(|s| {
            seed(s);
            let v0 = s.config_version().unwrap();
            s.save_pool(&pool(), SaveMode::Create, 5).unwrap();
            assert_eq!(s.list_pools().unwrap(), vec![pool()]);
            assert_eq!(s.config_version().unwrap(), v0 + 1);
            assert!(matches!(
                s.save_pool(&pool(), SaveMode::Create, 6),
                Err(StoreError::Conflict { .. })
            ));
            let mut changed = pool();
            changed.allocations.pop();
            s.save_pool(&changed, SaveMode::Update, 7).unwrap();
            assert_eq!(s.get_pool("team").unwrap(), changed);
        });
    }

    #[test]
    fn an_unknown_stored_policy_is_read_as_hard() {
        crate::store::testing::each_backend(|s| {
            seed(s);
            s.save_pool(&pool(), SaveMode::Create, 5).unwrap();
            s.write(|db| {
                db.execute(
                    "UPDATE quota_allocations SET policy = 'greedy' WHERE api_key_id = 'k2'",
                    &[],
                )
            })
            .unwrap();
            let read = s.get_pool("team").unwrap();
            assert_eq!(
                read.allocations
                    .iter()
                    .map(|a| (a.api_key_id.as_str(), a.policy.as_str()))
                    .collect::<Vec<_>>(),
                vec![("k2", "hard"), ("k1", "hard")]
            );
        });
    }

    #[test]
    fn deleting_a_key_removes_its_allocations_and_deleting_a_pool_its_rows() {
        crate::store::testing::each_backend(|s| {
            seed(s);
            s.save_pool(&pool(), SaveMode::Create, 5).unwrap();
            s.delete_key("k1").unwrap();
            assert_eq!(s.get_pool("team").unwrap().allocations.len(), 1);
            s.save_consumption(&[row("team", 1, 10.0)]).unwrap();
            s.delete_pool("team").unwrap();
            assert!(s.load_consumption(0).unwrap().is_empty());
            assert!(matches!(
                s.delete_pool("team"),
                Err(StoreError::NotFound { .. })
            ));
        });
    }

    fn row(pool: &str, slot: u64, amount: f64) -> ConsumptionRow {
        ConsumptionRow {
            pool_id: pool.into(),
            dimension: "requests:hourly".into(),
            api_key_id: "k1".into(),
            slot,
            slot_end_ms: (slot + 1) * 1_000,
            window_ms: 10_000,
            amount,
        }
    }

    #[test]
    fn consumption_is_idempotent_loads_live_slots_and_gc_keeps_retention() {
        crate::store::testing::each_backend(|s| {
            seed(s);
            s.save_consumption(&[row("team", 1, 1.0), row("team", 5, 2.0)])
                .unwrap();
            s.save_consumption(&[row("team", 5, 3.0)]).unwrap();
            // At 12 000 ms slot 1 (ended 2 000, window 10 000) no longer counts.
            let live = s.load_consumption(12_000).unwrap();
            assert_eq!(live, vec![row("team", 5, 3.0)]);
            // Retention 1 s: slot 1 is past window and retention, slot 5 is still inside
            // its window.
            assert_eq!(s.gc_consumption(12_500, 1_000).unwrap(), 1);
            // A retention longer than the window keeps expired slots for history.
            assert_eq!(s.gc_consumption(17_000, 60_000).unwrap(), 0);
            assert_eq!(s.gc_consumption(80_000, 60_000).unwrap(), 1);
        });
    }

    #[test]
    fn a_connection_in_a_pool_cannot_be_deleted_and_its_plan_goes_with_it() {
        crate::store::testing::each_backend(|s| {
            seed(s);
            s.save_pool(&pool(), SaveMode::Create, 5).unwrap();
            let e = s.delete_connection("c1").unwrap_err();
            assert_eq!(
                e.to_string(),
                "connection `c1` is still used by quota pools team"
            );
            s.delete_pool("team").unwrap();
            s.save_plan(
                &PlanRecord {
                    connection_id: "c1".into(),
                    dimensions: vec![],
                },
                1,
            )
            .unwrap();
            s.delete_connection("c1").unwrap();
            assert!(s.load_config().unwrap().plans.is_empty());
        });
    }

    #[test]
    fn plans_are_saved_replaced_and_deleted() {
        crate::store::testing::each_backend(|s| {
            seed(s);
            let plan = PlanRecord {
                connection_id: "c1".into(),
                dimensions: vec![DimensionInput {
                    unit: "tokens".into(),
                    window: "5h".into(),
                    limit: 1e6,
                }],
            };
            s.save_plan(&plan, 1).unwrap();
            s.save_plan(&plan, 2).unwrap();
            assert_eq!(s.load_config().unwrap().plans, vec![plan]);
            s.delete_plan("c1").unwrap();
            assert!(s.load_config().unwrap().plans.is_empty());
            assert!(matches!(
                s.delete_plan("c1"),
                Err(StoreError::NotFound { .. })
            ));
        });
    }
}
