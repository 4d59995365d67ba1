//! The plan stage: resolve the requested model to candidates (a `qtSd/` pool combo, or
//! direct and combo names through [`switchyard_core::routing`]), then let the plan's
//! strategy order them over a per-request view of the facts it asks for — gathered
//! here from the live state, and only those. Nothing is attempted or reserved here.

use super::share;
use crate::error::ApiError;
use crate::runtime::Runtime;
use crate::snapshot::Snapshot;
use switchyard_core::catalog::ApiKey;
use switchyard_core::quota::cost::Estimate;
use switchyard_core::routing::strategy::{self, Needs};
use switchyard_core::routing::view::CandidateView;
use switchyard_core::routing::{self, Candidate, Plan};

/// The ordered plan for `model`.
///
/// `next_rotation` draws the request's turn, shared by resolution (which connection of
/// a provider first) and the strategy: before resolving a direct or combo name, after a
/// `qtSd/` plan was built.
pub async fn build(
    runtime: &Runtime,
    snap: &Snapshot,
    key: &ApiKey,
    request: (&str, &Estimate),
    next_rotation: impl FnOnce() -> usize,
) -> Result<Plan, ApiError> {
    let (model, estimate) = request;
    let (mut plan, rotation) = match share::plan(snap, key, model) {
        Some(p) => (p?, next_rotation()),
        None => {
            let rotation = next_rotation();
            (
                routing::plan(&snap.catalog, key, model, rotation)?,
                rotation,
            )
        }
    };
    let strategy = strategy::for_kind(plan.strategy);
    let Some(views) = views(
        runtime,
        snap,
        &key.id,
        estimate,
        &plan.candidates,
        strategy.needs(),
    )
    .await
    else {
        return Ok(plan);
    };
    let order = strategy.order(&views, rotation);
    if !strategy::is_identity(&order) {
        tracing::debug!(strategy = strategy.name(), order = ?order, "Candidates reordered.");
        plan.candidates = order
            .into_iter()
            .filter_map(|i| plan.candidates.get(i).cloned())
            .collect();
    }
    Ok(plan)
}

/// The view of `candidates` with the facts in `needs`; `None` when there is nothing to
/// order by (one candidate, or no fact that could differ).
async fn views(
    runtime: &Runtime,
    snap: &Snapshot,
    key_id: &str,
    estimate: &Estimate,
    candidates: &[Candidate],
    needs: Needs,
) -> Option<Vec<CandidateView>> {
    let penalty = needs.penalty && !snap.quota.is_empty();
    if candidates.len() < 2 || !(penalty || needs.load || needs.saturation) {
        return None;
    }
    let q = &snap.settings.quota;
    let mut views = Vec::with_capacity(candidates.len());
    let mut differ = needs.load || needs.saturation;
    for c in candidates {
        let conn = &c.connection;
        let pool = snap.quota.pool_of(conn.index);
        let mut view = CandidateView::default();
        if needs.load {
            view.load = runtime.gates.load(&conn.id);
        }
        if needs.saturation {
            view.saturated = pool.is_some_and(|p| {
                runtime
                    .quota
                    .connection_saturated(p, &conn.id, q.saturation_threshold)
            });
        }
        if let Some(pool) = pool.filter(|_| penalty) {
            let price = snap.price(&conn.provider, &c.upstream_model);
            if runtime
                .quota
                .is_deprioritized(pool, key_id, estimate, price, q)
                .await
            {
                view.penalty = q.soft_deprioritize_factor;
                differ = true;
            }
        }
        views.push(view);
    }
    differ.then_some(views)
}
