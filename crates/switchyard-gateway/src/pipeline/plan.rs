//! The plan stage: resolve the requested model to candidates through
//! [`switchyard_core::routing`] (direct names, combos, `qtSd/` pools, aliases), then let
//! the plan's strategy order them over the routing context: the request's facts and a
//! per-candidate view of the facts the strategy asks for, gathered here from the live
//! state, and only those; then the session's pin (SPEC R15) puts its connection first,
//! after whatever strategy ordered, unless the operator fixed the connections; and
//! exclusive leases (SPEC R16): connections other owners' live leases hold are left out
//! (a 429 `lease-capacity-unavailable` when that leaves nothing), and the request's own
//! lease puts its connection first, ahead of the pin. Nothing is attempted or reserved
//! here.

use crate::error::ApiError;
use crate::runtime::Runtime;
use crate::snapshot::Snapshot;
use switchyard_core::catalog::ApiKey;
use switchyard_core::llm::Request;
use switchyard_core::quota::cost::Estimate;
use switchyard_core::routing::affinity::{self, Pin, SessionKey};
use switchyard_core::routing::lease::{self, Lease};
use switchyard_core::routing::relay;
use switchyard_core::routing::shape::Shape;
use switchyard_core::routing::strategy::{
    self, context_optimized, Needs, RequestFacts, RoutingCtx, Turn,
};
use switchyard_core::routing::trace::First;
use switchyard_core::routing::view::CandidateView;
use switchyard_core::routing::{self, Exclusion, Plan, Reason};

/// A plan ordered for dispatch, with what its trace needs.
#[derive(Debug)]
pub struct Planned {
    pub plan: Plan,
    /// The live pin of the request's session that ordered it, if one did.
    pub pin: Option<Pin>,
    /// The views the strategy read, in the candidates' order; empty when it read none.
    pub views: Vec<CandidateView>,
    /// The facts the strategy read.
    pub read: Needs,
    pub draw: Option<u64>,
    pub turn: Option<u64>,
    /// What moved a connection first after the strategy.
    pub first: Option<First>,
}

/// The ordered plan for `request`, on the request's turn `rotation` (shared by
/// resolution, which connection of a provider first, and the strategy), with the live
/// pin of the request's `session` that ordered it, if one did, and its `lease`.
pub async fn build(
    runtime: &Runtime,
    snap: &Snapshot,
    key: &ApiKey,
    request: (&Request, &Estimate),
    (rotation, session, now): (usize, Option<&SessionKey>, u64),
    lease: Option<&Lease>,
) -> Result<Planned, ApiError> {
    let mut planned = ordered(runtime, snap, key, request, (rotation, session, now)).await?;
    leased_by_others(runtime, &mut planned, lease, now)?;
    let ttl = snap.settings.session_affinity_ttl_ms;
    planned.pin = session
        .filter(|_| !planned.plan.fixed)
        .and_then(|s| runtime.affinity.pin(s, ttl, now))
        .filter(|p| !planned.relay_stops(&p.connection, snap.settings.relay));
    if let Some(connection) = planned.pin.as_ref().map(|p| p.connection.clone()) {
        if planned.first_on(&connection) {
            tracing::debug!(%connection, "The session's pinned connection goes first.");
            planned.first = Some(First::Pin);
        }
    }
    if let Some(l) = lease {
        if planned.first_on(&l.connection) {
            planned.first = Some(First::Lease);
        }
    }
    Ok(planned)
}

impl Planned {
    /// Whether a `context-relay` plan has `connection` at its stop: its session moves
    /// on, so a pin does not hold it there (SPEC R19).
    fn relay_stops(&self, connection: &str, settings: relay::RelaySettings) -> bool {
        self.plan.strategy.shape() == Shape::Relay
            && self.plan.candidates.iter().zip(&self.views).any(|(c, v)| {
                c.connection.id == connection
                    && relay::phase(v.quota.used_max, settings) == relay::Phase::Stop
            })
    }

    /// Puts `connection`'s candidates (and their views) first; whether any moved.
    fn first_on(&mut self, connection: &str) -> bool {
        if !self.views.is_empty() {
            let (front, back): (Vec<_>, Vec<_>) = self
                .plan
                .candidates
                .iter()
                .zip(&self.views)
                .partition(|(c, _)| c.connection.id == connection);
            self.views = front.into_iter().chain(back).map(|(_, v)| *v).collect();
        }
        affinity::pinned_first(&mut self.plan.candidates, connection)
    }
}

/// Leaves out the candidates whose connection another owner's live lease holds; when
/// that leaves none, the request is refused for want of lease capacity.
fn leased_by_others(
    runtime: &Runtime,
    planned: &mut Planned,
    lease: Option<&Lease>,
    now: u64,
) -> Result<(), ApiError> {
    let table = runtime.leases.table();
    if table.is_empty() {
        return Ok(());
    }
    let holder = lease.map(|l| &l.owner);
    let plan = &mut planned.plan;
    let until: Vec<Option<u64>> = plan
        .candidates
        .iter()
        .map(|c| table.held_by_other(&c.connection.id, holder, now))
        .collect();
    if until.iter().all(Option::is_none) {
        return Ok(());
    }
    if !planned.views.is_empty() {
        let mut held = until.iter();
        planned
            .views
            .retain(|_| held.next().is_some_and(|u| u.is_none()));
    }
    let mut held_until = Vec::new();
    let mut held = until.iter();
    let excluded = &mut plan.excluded;
    plan.candidates.retain(|c| {
        let Some(&Some(until)) = held.next() else {
            return true;
        };
        let conn = &c.connection;
        held_until.push(until);
        excluded.push(Exclusion {
            target: format!("{}/{}", conn.provider, c.upstream_model),
            connection: conn.id.clone(),
            reason: Reason::LeasedByOther {
                retry_after_ms: until.saturating_sub(now),
            },
        });
        false
    });
    match lease::capacity(&held_until, !plan.candidates.is_empty(), now) {
        Some(refusal) => Err(ApiError::Lease(refusal)),
        None => Ok(()),
    }
}

/// The plan ordered by its strategy.
async fn ordered(
    runtime: &Runtime,
    snap: &Snapshot,
    key: &ApiKey,
    request: (&Request, &Estimate),
    (rotation, session, now): (usize, Option<&SessionKey>, u64),
) -> Result<Planned, ApiError> {
    let (request, estimate) = request;
    let mut plan = routing::plan(&snap.catalog, &snap.quota, key, &request.model, rotation)?;
    too_small(snap, &mut plan, estimate)?;
    let strategy = plan.strategy;
    let needs = strategy.needs();
    let mut planned = Planned {
        plan,
        pin: None,
        views: Vec::new(),
        read: Needs::NONE,
        draw: None,
        turn: None,
        first: None,
    };
    let plan = &mut planned.plan;
    if plan.candidates.len() < 2 {
        return Ok(planned);
    }
    let asked = Asked {
        key_id: &key.id,
        estimate,
        stream: request.stream,
        now,
        cache_key: needs
            .cache
            .then(|| affinity::cache_key(session, &request.body))
            .flatten(),
    };
    let (views, read) = match views(runtime, snap, asked, plan, needs).await {
        // Read, and alike: plan order stands.
        Some((v, false)) => {
            planned.views = v;
            planned.read = needs;
            return Ok(planned);
        }
        Some((v, true)) => (v, needs),
        None if needs.draw || needs.turn => (
            vec![CandidateView::default(); plan.candidates.len()],
            Needs {
                draw: needs.draw,
                turn: needs.turn,
                ..Needs::NONE
            },
        ),
        None => return Ok(planned),
    };
    let turn = match (&plan.combo, needs.turn) {
        (Some(combo), true) => {
            let (count, seed) = runtime.turns.next(combo);
            Turn {
                count,
                seed,
                batch: snap.settings.round_robin_batch,
            }
        }
        _ => Turn::default(),
    };
    let draw = if needs.draw { rand::random() } else { 0 };
    let ctx = RoutingCtx {
        request: RequestFacts {
            model: &request.model,
            prompt_len: request.prompt_len,
        },
        views: &views,
        rotation,
        draw,
        turn,
        auto: snap.settings.auto,
        relay: snap.settings.relay,
    };
    let order = strategy.order(&ctx);
    if !strategy::is_identity(&order) {
        tracing::debug!(strategy = strategy.name(), order = ?order, "Candidates reordered.");
        plan.candidates = order
            .iter()
            .filter_map(|&i| plan.candidates.get(i).cloned())
            .collect();
    }
    planned.draw = needs.draw.then_some(draw);
    planned.turn = (needs.turn && planned.plan.combo.is_some()).then_some(turn.count);
    planned.read = read;
    // The views of the facts read, in the order tried (none when only the draw or the
    // turn was read: they would be defaults).
    if read.views() {
        planned.views = order
            .iter()
            .filter_map(|&i| views.get(i).copied())
            .collect();
    }
    Ok(planned)
}

/// Leaves out the candidates whose model's declared context window cannot hold the
/// prompt (SPEC R19's context fit); when that leaves none, the prompt is too long for
/// every target, which is the client's to fix.
fn too_small(snap: &Snapshot, plan: &mut Plan, estimate: &Estimate) -> Result<(), ApiError> {
    if snap.context_windows.is_empty() || plan.candidates.is_empty() {
        return Ok(());
    }
    let prompt = estimate.prompt_tokens;
    let excluded = &mut plan.excluded;
    let mut largest = 0;
    plan.candidates.retain(|c| {
        let conn = &c.connection;
        let window = snap.context_window(&conn.provider, &c.upstream_model);
        if context_optimized::fits(window, prompt) {
            return true;
        }
        largest = largest.max(window.unwrap_or(0));
        excluded.push(Exclusion {
            target: format!("{}/{}", conn.provider, c.upstream_model),
            connection: conn.id.clone(),
            reason: Reason::ContextTooSmall,
        });
        false
    });
    if plan.candidates.is_empty() {
        return Err(ApiError::InvalidRequest {
            param: Some("messages"),
            message: format!(
                "the prompt (about {prompt} tokens) is longer than the context window of every target (the largest is {largest} tokens)"
            ),
        });
    }
    Ok(())
}

/// What the request asks that the views depend on.
#[derive(Debug, Clone, Copy)]
struct Asked<'a> {
    key_id: &'a str,
    estimate: &'a Estimate,
    stream: bool,
    now: u64,
    /// The prompt-cache key, when the strategy reads it and the request has one.
    cache_key: Option<[u8; 32]>,
}

/// The view of the plan's candidates with the facts in `needs`, and whether they could
/// differ; `None` when no per-candidate fact is asked for.
async fn views(
    runtime: &Runtime,
    snap: &Snapshot,
    asked: Asked<'_>,
    plan: &Plan,
    needs: Needs,
) -> Option<(Vec<CandidateView>, bool)> {
    let Asked {
        key_id,
        estimate,
        stream,
        now,
        cache_key,
    } = asked;
    let penalty = needs.penalty && !snap.quota.is_empty();
    let configured = needs.weight
        || needs.cost
        || needs.stats
        || needs.quota
        || needs.last_good
        || needs.context
        || cache_key.is_some();
    if !(penalty || needs.load || needs.saturation || configured) {
        return None;
    }
    let q = &snap.settings.quota;
    let combo = plan.combo.as_deref().and_then(|c| snap.catalog.combo(c));
    let last_good = match (&plan.combo, needs.last_good) {
        (Some(c), true) => runtime.last_good.get(c),
        _ => None,
    };
    let mut views = Vec::with_capacity(plan.candidates.len());
    let mut differ = needs.load || needs.saturation || configured;
    for c in &plan.candidates {
        let conn = &c.connection;
        let pool = snap.quota.pool_of(conn.index);
        let mut view = CandidateView::default();
        let target = combo.and_then(|k| k.targets.get(c.target));
        if needs.weight {
            view.weight = target.map_or(1, |t| t.weight);
        }
        if needs.cost {
            view.cost = target.and_then(|t| t.cost).or_else(|| {
                snap.price(&conn.provider, &c.upstream_model)
                    .map(|p| p.input_per_mtok)
            });
        }
        view.last_good = last_good.as_deref() == Some(conn.id.as_str());
        if needs.context {
            view.context_window = snap.context_window(&conn.provider, &c.upstream_model);
        }
        if needs.quota {
            view.quota = runtime.quota.connection_windows(&conn.id);
        }
        if let Some(k) = &cache_key {
            view.affinity = affinity::rendezvous(k, &conn.id);
        }
        if needs.stats {
            let stat = runtime.stats.get(&conn.id, &c.upstream_model);
            view.success = stat.success;
            view.header_ms = stat.header_ms(stream);
            view.used = stat.used_at(now);
        }
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
    Some((views, differ))
}
