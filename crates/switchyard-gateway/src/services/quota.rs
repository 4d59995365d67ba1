//! Quota sharing (SPEC Q11, Q13): pools, their usage and recent decisions, plan
//! overrides, and a one-time import and the export.
//!
//! Every write goes through `apply_change`, so it is validated by the snapshot it would
//! build (a pool error names the offending field). Usage and decisions are read from the
//! quota engine; the only counters changed here are a deleted pool's, which are dropped.

use super::{apply_change, upsert_by};
use crate::error::ApiError;
use crate::runtime::quota::index::{validate_plan, QuotaConfigError};
use crate::runtime::quota::views::{DecisionRecord, PoolUsage};
use crate::state::{blocking, AppState};
use serde::Serialize;
use std::sync::{Arc, OnceLock};
use switchyard_core::quota::plan::{Dimension, PlanSource};
use switchyard_core::quota::pool::{AllocationInput, DimensionInput, PoolInput};
use switchyard_model::{PlanRecord, SaveMode};
use utoipa::ToSchema;

/// A pool as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolView {
    pub id: String,
    pub name: String,
    pub connection_ids: Vec<String>,
    /// As declared; empty = inherited from the connections' plan.
    #[schema(value_type = Vec<Object>)]
    pub dimensions: Vec<DimensionInput>,
    /// What is enforced (declared, or the plan times the number of connections).
    #[schema(value_type = Vec<Object>)]
    pub effective_dimensions: Vec<Dimension>,
    #[schema(value_type = Vec<Object>)]
    pub allocations: Vec<AllocationInput>,
}

fn view(state: &AppState, input: PoolInput) -> PoolView {
    let snap = state.snapshot();
    let effective_dimensions = snap
        .quota
        .pool(&input.id)
        .map(|p| p.dims.clone())
        .unwrap_or_default();
    PoolView {
        id: input.id,
        name: input.name,
        connection_ids: input.connection_ids,
        dimensions: input.dimensions,
        effective_dimensions,
        allocations: input.allocations,
    }
}

/// Every pool.
pub async fn pools(state: &AppState) -> Result<Vec<PoolView>, ApiError> {
    let pools = blocking(&state.store, |s| s.list_pools()).await?;
    Ok(pools.into_iter().map(|p| view(state, p)).collect())
}

/// One pool.
pub async fn pool(state: &AppState, id: String) -> Result<PoolView, ApiError> {
    let pool = blocking(&state.store, move |s| s.get_pool(&id)).await?;
    Ok(view(state, pool))
}

/// Creates or replaces a pool, as `mode` says.
pub async fn save_pool(
    state: &AppState,
    p: PoolInput,
    mode: SaveMode,
) -> Result<PoolView, ApiError> {
    let (rec, t) = (p.clone(), state.clock.now_ms());
    apply_change(
        state,
        |rows| {
            upsert_by(&mut rows.pools, p.clone(), |x| &x.id, &p.id);
            Ok(())
        },
        move |s| s.save_pool(&rec, mode, t),
    )
    .await?;
    Ok(view(state, p))
}

/// Replaces pool `pool_id`'s allocations and nothing else: the pool is read under the
/// admin lock, so a name, connections or dimensions changed meanwhile are kept.
pub async fn set_allocations(
    state: &AppState,
    pool_id: String,
    allocations: Vec<AllocationInput>,
) -> Result<PoolView, ApiError> {
    let edited = Arc::new(OnceLock::new());
    let (found, t) = (Arc::clone(&edited), state.clock.now_ms());
    let saved = apply_change(
        state,
        |rows| {
            let pool = rows
                .pools
                .iter_mut()
                .find(|p| p.id == pool_id)
                .ok_or_else(|| ApiError::NotFound {
                    kind: "pool",
                    id: pool_id.clone(),
                })?;
            pool.allocations = allocations;
            found.get_or_init(|| pool.clone());
            Ok(())
        },
        move |s| {
            edited
                .get()
                .map(|p| s.save_pool(p, SaveMode::Update, t).map(|()| p.clone()))
                .transpose()
        },
    )
    .await?;
    let pool = saved.ok_or(ApiError::NotFound {
        kind: "pool",
        id: pool_id,
    })?;
    Ok(view(state, pool))
}

/// Deletes a pool and drops its counters.
pub async fn delete_pool(state: &AppState, id: String) -> Result<(), ApiError> {
    let (target, deleted) = (id.clone(), id.clone());
    apply_change(
        state,
        |rows| {
            rows.pools.retain(|p| p.id != target);
            Ok(())
        },
        move |s| s.delete_pool(&id),
    )
    .await?;
    state.runtime.quota.forget_pool(&deleted).await;
    Ok(())
}

/// A pool's usage now, per dimension and key; fails with `QuotaStoreUnavailable` when
/// the quota store cannot be read.
pub async fn usage(state: &AppState, id: String) -> Result<PoolUsage, ApiError> {
    let snap = state.snapshot();
    let pool = snap
        .quota
        .pool(&id)
        .ok_or(ApiError::NotFound { kind: "pool", id })?;
    let keys: Vec<String> = pool
        .pool
        .allocations
        .iter()
        .map(|a| a.api_key_id.clone())
        .collect();
    state
        .runtime
        .quota
        .usage(pool, &keys, &snap.settings.quota)
        .await
        .map_err(|e| ApiError::QuotaStoreUnavailable {
            reason: e.reason.as_str(),
        })
}

/// The used fraction of a limit from which a dimension is strict (the setting
/// `quota.saturationThreshold` in force).
pub fn saturation_threshold(state: &AppState) -> f64 {
    state.snapshot().settings.quota.saturation_threshold
}

/// A pool's recent decisions, or only `api_key_id`'s.
pub fn decisions(
    state: &AppState,
    id: String,
    api_key_id: Option<&str>,
) -> Result<Vec<DecisionRecord>, ApiError> {
    if state.snapshot().quota.pool(&id).is_none() {
        return Err(ApiError::NotFound { kind: "pool", id });
    }
    Ok(state.runtime.quota.decisions(&id, api_key_id))
}

/// A pool's newest `n` decisions, and how many the engine keeps for it.
pub fn newest_decisions(
    state: &AppState,
    id: String,
    n: usize,
) -> Result<(usize, Vec<DecisionRecord>), ApiError> {
    if state.snapshot().quota.pool(&id).is_none() {
        return Err(ApiError::NotFound { kind: "pool", id });
    }
    Ok(state.runtime.quota.newest_decisions(&id, n))
}

/// A connection's resolved plan.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanView {
    pub connection_id: String,
    /// `manual`, `catalog` or `empty`.
    #[schema(value_type = String)]
    pub source: PlanSource,
    #[schema(value_type = Vec<Object>)]
    pub dimensions: Vec<Dimension>,
}

/// The plan in force for `connection_id`, and where it comes from.
pub fn plan(state: &AppState, connection_id: String) -> Result<PlanView, ApiError> {
    let snap = state.snapshot();
    let (dims, source) = snap
        .quota
        .plans
        .get(&connection_id)
        .cloned()
        .ok_or_else(|| ApiError::NotFound {
            kind: "connection",
            id: connection_id.clone(),
        })?;
    Ok(PlanView {
        connection_id,
        source,
        dimensions: dims,
    })
}

/// Stores a manual plan for `connection_id`; answers the plan in force afterwards.
pub async fn save_plan(
    state: &AppState,
    connection_id: String,
    dimensions: Vec<DimensionInput>,
) -> Result<PlanView, ApiError> {
    if state
        .snapshot()
        .catalog
        .connection(&connection_id)
        .is_none()
    {
        return Err(ApiError::NotFound {
            kind: "connection",
            id: connection_id,
        });
    }
    let record = PlanRecord {
        connection_id: connection_id.clone(),
        dimensions,
    };
    if let Err(QuotaConfigError::Plan { error, .. }) = validate_plan(&record) {
        return Err(ApiError::InvalidField {
            field: error.field.clone(),
            message: error.to_string(),
        });
    }
    let (rec, t) = (record.clone(), state.clock.now_ms());
    apply_change(
        state,
        |rows| {
            upsert_by(
                &mut rows.plans,
                record.clone(),
                |x| &x.connection_id,
                &record.connection_id,
            );
            Ok(())
        },
        move |s| s.save_plan(&rec, t),
    )
    .await?;
    plan(state, connection_id)
}

/// Deletes `connection_id`'s manual plan; the catalog's applies again.
pub async fn delete_plan(state: &AppState, connection_id: String) -> Result<(), ApiError> {
    let target = connection_id.clone();
    apply_change(
        state,
        |rows| {
            rows.plans.retain(|p| p.connection_id != target);
            Ok(())
        },
        move |s| s.delete_plan(&connection_id),
    )
    .await
}

/// Result of an import.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImportResult {
    pub imported: usize,
    /// Why nothing was imported, when nothing was.
    pub skipped: Option<String>,
}

/// Imports `pools` into a database that has none; imports nothing otherwise.
pub async fn import(state: &AppState, pools: Vec<PoolInput>) -> Result<ImportResult, ApiError> {
    let t = state.clock.now_ms();
    let submitted = pools.len();
    let incoming = pools.clone();
    // The emptiness check and the writes run in the change's transaction, so two
    // concurrent imports cannot both land.
    let imported = apply_change(
        state,
        |rows| {
            if rows.pools.is_empty() {
                rows.pools.extend(incoming);
            }
            Ok(())
        },
        move |b| {
            if !b.pools_empty()? {
                return Ok(0);
            }
            for p in &pools {
                b.save_pool(p, SaveMode::Create, t)?;
            }
            Ok(pools.len())
        },
    )
    .await?;
    Ok(ImportResult {
        imported,
        skipped: (imported == 0 && submitted > 0)
            .then(|| "pools already exist; import runs only into an empty database".to_owned()),
    })
}

/// Every pool as declared, in the form [`import`] takes.
pub async fn export(state: &AppState) -> Result<Vec<PoolInput>, ApiError> {
    Ok(blocking(&state.store, |s| s.list_pools()).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::keys::NewKey;
    use serde_json::json;
    use switchyard_core::settings::Layers;
    use switchyard_model::{ConnectionRecord, ProviderRecord};
    use switchyard_store::Store;

    /// A state over an in-memory database with provider `p`, connection `c1` and pool
    /// `team` (k1 and k2 with half each), resolving settings from `layers`.
    async fn state(layers: Layers) -> Arc<AppState> {
        let store = Store::open_in_memory().unwrap();
        let provider: ProviderRecord = serde_json::from_value(
            json!({"id": "p", "format": "openai", "base_url": "http://127.0.0.1:9"}),
        )
        .unwrap();
        store.save_provider(&provider, SaveMode::Create, 0).unwrap();
        let connection: ConnectionRecord = serde_json::from_value(json!({
            "id": "c1", "provider": "p", "auth_class": "apikey", "format": null,
            "base_url": null, "enabled": true, "max_concurrent": null,
            "rate_limit_overrides": null, "provider_specific_data": null,
            "disable_cooling": false, "has_credential": false
        }))
        .unwrap();
        store
            .save_connection(&connection, None, SaveMode::Create, 0)
            .unwrap();
        let (state, _writers) = AppState::new(Arc::new(store), Arc::new(SystemClock), layers, None)
            .await
            .unwrap();
        for id in ["k1", "k2"] {
            let key = NewKey {
                id: Some(id.into()),
                name: id.into(),
                ..NewKey::default()
            };
            super::super::keys::create(&state, key).await.unwrap();
        }
        save_pool(&state, team("Team", 50.0), SaveMode::Create)
            .await
            .unwrap();
        state
    }

    fn allocation(key: &str, weight: f64, policy: &str) -> AllocationInput {
        AllocationInput {
            api_key_id: key.into(),
            allocation_weight: weight,
            cap_value: None,
            cap_unit: None,
            policy: policy.into(),
        }
    }

    fn team(name: &str, weight: f64) -> PoolInput {
        PoolInput {
            id: "team".into(),
            name: name.into(),
            connection_ids: vec!["c1".into()],
            dimensions: vec![DimensionInput {
                unit: "requests".into(),
                window: "hourly".into(),
                limit: 10.0,
            }],
            allocations: vec![
                allocation("k1", weight, "hard"),
                allocation("k2", 100.0 - weight, "hard"),
            ],
        }
    }

    #[tokio::test]
    async fn the_saturation_threshold_is_the_setting_in_force() {
        assert_eq!(saturation_threshold(&*state(Layers::default()).await), 0.5);
        let layers = Layers {
            file: [("quota.saturationThreshold".to_owned(), json!(0.8))].into(),
            ..Layers::default()
        };
        assert_eq!(saturation_threshold(&*state(layers).await), 0.8);
    }

    #[tokio::test]
    async fn set_allocations_keeps_what_changed_since_the_pool_was_read() {
        let state = state(Layers::default()).await;
        // Read by a form, then renamed (and re-weighted) by someone else.
        let shown = pool(&state, "team".into()).await.unwrap();
        assert_eq!(shown.name, "Team");
        let mut renamed = team("Renamed", 30.0);
        renamed.dimensions[0].limit = 6.0;
        save_pool(&state, renamed, SaveMode::Update).await.unwrap();
        let wanted = vec![
            allocation("k1", 20.0, "soft"),
            allocation("k2", 80.0, "burst"),
        ];
        let saved = set_allocations(&state, "team".into(), wanted.clone())
            .await
            .unwrap();
        assert_eq!(saved.name, "Renamed");
        assert_eq!(saved.allocations, wanted);
        let stored = export(&state).await.unwrap();
        assert_eq!(
            stored,
            vec![PoolInput {
                id: "team".into(),
                name: "Renamed".into(),
                connection_ids: vec!["c1".into()],
                dimensions: vec![DimensionInput {
                    unit: "requests".into(),
                    window: "hourly".into(),
                    limit: 6.0,
                }],
                allocations: wanted,
            }]
        );
        let e = set_allocations(&state, "ghost".into(), vec![])
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "pool `ghost` not found");
        let e = set_allocations(
            &state,
            "team".into(),
            vec![allocation("k1", 5.0, "sometimes")],
        )
        .await
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "quota pool `team`: allocations[0].policy: unknown policy `sometimes` (expected hard, soft or burst)"
        );
        assert_eq!(export(&state).await.unwrap(), stored);
    }
}
