//! Routing strategies: the order in which a request's candidates are tried, decided
//! from the routing context ([`RoutingCtx`]: the request's facts and a per-candidate
//! view, [`super::view`]) and a rotation counter, never from state. One file per
//! strategy; a new one is a file here and a line in [`REGISTRY`]. Strategies only order:
//! exclusion, admission and failover are other modules' work, and the session pin
//! (SPEC R15) is one rule applied after every strategy ([`super::affinity`]).

pub mod auto;
mod cache_optimized;
pub mod context_optimized;
mod context_relay;
mod cost_optimized;
pub mod draw;
mod fill_first;
mod fusion;
mod headroom;
mod least_used;
mod lkgp;
mod p2c;
mod pipeline;
mod priority;
mod quota_share;
mod random;
mod reset_aware;
mod reset_window;
mod round_robin;
mod strict_random;
mod weighted;

pub use auto::Auto;
pub use cache_optimized::CacheOptimized;
pub use context_optimized::ContextOptimized;
pub use context_relay::ContextRelay;
pub use cost_optimized::CostOptimized;
pub use fill_first::FillFirst;
pub use fusion::Fusion;
pub use headroom::Headroom;
pub use least_used::LeastUsed;
pub use lkgp::Lkgp;
pub use p2c::P2c;
pub use pipeline::Pipeline;
pub use priority::Priority;
pub use quota_share::QuotaShare;
pub use random::Random;
pub use reset_aware::ResetAware;
pub use reset_window::ResetWindow;
pub use round_robin::RoundRobin;
pub use strict_random::StrictRandom;
pub use weighted::Weighted;

use super::shape::Shape;
use super::view::CandidateView;

/// The facts a strategy reads; the shell gathers only these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Needs {
    /// [`CandidateView::load`].
    pub load: bool,
    /// [`CandidateView::saturated`].
    pub saturation: bool,
    /// [`CandidateView::penalty`].
    pub penalty: bool,
    /// [`CandidateView::weight`].
    pub weight: bool,
    /// [`CandidateView::cost`].
    pub cost: bool,
    /// [`RoutingCtx::draw`].
    pub draw: bool,
    /// [`RoutingCtx::turn`].
    pub turn: bool,
    /// [`CandidateView::success`], [`CandidateView::header_ms`] and
    /// [`CandidateView::used`] (SPEC R19's service stats).
    pub stats: bool,
    /// [`CandidateView::affinity`].
    pub cache: bool,
    /// [`CandidateView::quota`] (SPEC Q6 readings).
    pub quota: bool,
    /// [`CandidateView::last_good`].
    pub last_good: bool,
    /// [`CandidateView::context_window`].
    pub context: bool,
}

impl Needs {
    /// Reads nothing.
    pub const NONE: Self = Self {
        load: false,
        saturation: false,
        penalty: false,
        weight: false,
        cost: false,
        draw: false,
        turn: false,
        stats: false,
        cache: false,
        quota: false,
        last_good: false,
        context: false,
    };

    /// The names of the facts it reads, in the field order (the decision trace's).
    pub fn names(self) -> Vec<&'static str> {
        [
            (self.load, "load"),
            (self.saturation, "saturation"),
            (self.penalty, "penalty"),
            (self.weight, "weight"),
            (self.cost, "cost"),
            (self.draw, "draw"),
            (self.turn, "turn"),
            (self.stats, "stats"),
            (self.cache, "cache"),
            (self.quota, "quota"),
            (self.last_good, "last_good"),
            (self.context, "context"),
        ]
        .into_iter()
        .filter_map(|(read, name)| read.then_some(name))
        .collect()
    }

    /// Whether it reads any per-candidate fact.
    pub fn views(self) -> bool {
        self.load
            || self.saturation
            || self.penalty
            || self.weight
            || self.cost
            || self.stats
            || self.cache
            || self.quota
            || self.last_good
            || self.context
    }
}

/// A combo's own turn: how many of its requests came before this one, the seed fixed
/// for it, and the round-robin batch (SPEC R19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    pub count: u64,
    pub seed: u64,
    /// Requests in a row per candidate (`routing.roundRobinBatch`, at least 1).
    pub batch: u64,
}

impl Default for Turn {
    fn default() -> Self {
        Self {
            count: 0,
            seed: 0,
            batch: 1,
        }
    }
}

/// What a strategy knows of the request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestFacts<'a> {
    /// The name the client asked for, before any alias.
    pub model: &'a str,
    /// Length of the prompt's raw JSON text (the prompt-size estimate's input).
    pub prompt_len: usize,
}

/// Everything a strategy orders by: the request's facts, one view per candidate in plan
/// order, and the request's turn.
#[derive(Debug, Clone, Copy)]
pub struct RoutingCtx<'a> {
    pub request: RequestFacts<'a>,
    pub views: &'a [CandidateView],
    /// A per-request counter for strategies that spread load.
    pub rotation: usize,
    /// A random number drawn for this request (0 unless the strategy reads it).
    pub draw: u64,
    /// The combo's turn (the default unless the strategy reads it).
    pub turn: Turn,
    /// `auto`'s weights (`routing.auto.*`).
    pub auto: auto::Weights,
    /// `context-relay`'s thresholds (`routing.contextRelay.*`).
    pub relay: super::relay::RelaySettings,
}

/// A routing strategy: see the module docs.
pub trait Strategy: Sync + std::fmt::Debug {
    /// The name in logs and configuration.
    fn name(&self) -> &'static str;

    /// The candidate facts [`Strategy::order`] reads.
    fn needs(&self) -> Needs;

    /// Indices into `ctx.views` in the order to try the candidates; a permutation.
    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize>;

    /// How the ordered candidates are dispatched; one answers, unless the strategy is a
    /// dispatch shape ([`crate::routing::shape`]).
    fn shape(&self) -> Shape {
        Shape::Single
    }
}

/// The strategies a combo may name (SPEC R19), by their configuration names.
pub const REGISTRY: &[&dyn Strategy] = &[
    &Priority,
    &Weighted,
    &RoundRobin,
    &FillFirst,
    &Random,
    &StrictRandom,
    &CostOptimized,
    &P2c,
    &LeastUsed,
    &CacheOptimized,
    &Headroom,
    &ResetWindow,
    &ResetAware,
    &Lkgp,
    &ContextOptimized,
    &Auto,
    &Pipeline,
    &Fusion,
    &ContextRelay,
];

/// The internal strategy of `qtSd/` combos (SPEC Q12); no combo may name it.
pub const QUOTA_SHARE: &dyn Strategy = &QuotaShare;

/// The default strategy: a direct request's, and a combo's that names none.
pub const DEFAULT: &dyn Strategy = &Priority;

/// The registered strategy called `name`.
pub fn named(name: &str) -> Result<&'static dyn Strategy, UnknownStrategy> {
    REGISTRY
        .iter()
        .copied()
        .find(|s| s.name() == name)
        .ok_or_else(|| UnknownStrategy(name.to_owned()))
}

/// The names a combo may use, in registry order.
pub fn names() -> impl Iterator<Item = &'static str> {
    REGISTRY.iter().map(|s| s.name())
}

/// A strategy name no implementation answers to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown strategy `{0}`: use one of {known}", known = names().collect::<Vec<_>>().join(", "))]
pub struct UnknownStrategy(pub String);

/// A strategy held by a plan or a combo, compared by name.
#[derive(Debug, Clone, Copy)]
pub struct StrategyRef(pub &'static dyn Strategy);

impl PartialEq for StrategyRef {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl std::ops::Deref for StrategyRef {
    type Target = dyn Strategy;

    fn deref(&self) -> &Self::Target {
        self.0
    }
}

/// Whether `order` leaves the candidates where they are.
pub fn is_identity(order: &[usize]) -> bool {
    order.iter().enumerate().all(|(i, &j)| i == j)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_answers_each_name_and_names_the_known_ones_otherwise() {
        for s in REGISTRY {
            assert_eq!(named(s.name()).unwrap().name(), s.name());
        }
        assert_eq!(
            names().collect::<Vec<_>>(),
            vec![
                "priority",
                "weighted",
                "round-robin",
                "fill-first",
                "random",
                "strict-random",
                "cost-optimized",
                "p2c",
                "least-used",
                "cache-optimized",
                "headroom",
                "reset-window",
                "reset-aware",
                "lkgp",
                "context-optimized",
                "auto",
                "pipeline",
                "fusion",
                "context-relay"
            ]
        );
        let err = named("quota-share").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown strategy `quota-share`: use one of priority, weighted, round-robin, fill-first, random, strict-random, cost-optimized, p2c, least-used, cache-optimized, headroom, reset-window, reset-aware, lkgp, context-optimized, auto, pipeline, fusion, context-relay"
        );
        assert_eq!(DEFAULT.name(), "priority");
        assert_eq!(QUOTA_SHARE.name(), "quota-share");
        assert_eq!(StrategyRef(DEFAULT), StrategyRef(&Priority));
        assert_ne!(StrategyRef(DEFAULT), StrategyRef(QUOTA_SHARE));
    }

    /// Any fact a strategy might read, including the odd ones (NaN, infinities,
    /// zero weights, huge loads).
    fn any_view() -> impl proptest::strategy::Strategy<Value = CandidateView> {
        use crate::routing::view::{QuotaWindows, Reading};
        use proptest::prelude::any;
        use proptest::strategy::Strategy as _;
        let number = || {
            proptest::prop_oneof![
                0.0f64..=1.0,
                proptest::num::f64::ANY,
                proptest::strategy::Just(f64::NAN)
            ]
        };
        let reading = move || {
            proptest::option::of((number(), proptest::option::of(any::<u64>())))
                .prop_map(|r| r.map(|(used, reset_in_ms)| Reading { used, reset_in_ms }))
        };
        (
            (any::<usize>(), any::<bool>(), number(), 0u32..4),
            (
                proptest::option::of(number()),
                number(),
                proptest::option::of(number()),
            ),
            (
                number(),
                any::<u64>(),
                any::<bool>(),
                proptest::option::of(any::<u64>()),
            ),
            (reading(), reading(), proptest::option::of(number())),
        )
            .prop_map(
                |(
                    (load, saturated, penalty, weight),
                    (cost, success, header_ms),
                    (used, affinity, last_good, context_window),
                    (five_hours, weekly, used_max),
                )| CandidateView {
                    load,
                    saturated,
                    penalty,
                    weight,
                    cost,
                    success,
                    header_ms,
                    used,
                    affinity,
                    quota: QuotaWindows {
                        five_hours,
                        weekly,
                        used_max,
                    },
                    last_good,
                    context_window,
                },
            )
    }

    proptest::proptest! {
        /// SPEC R19: no strategy panics or loses a candidate, whatever the facts.
        #[test]
        fn every_strategy_orders_a_permutation_of_any_candidates(
            views in proptest::collection::vec(any_view(), 0..10),
            rotation in proptest::prelude::any::<usize>(),
            draw in proptest::prelude::any::<u64>(),
            (count, seed, batch) in (
                proptest::prelude::any::<u64>(),
                proptest::prelude::any::<u64>(),
                1u64..1_000,
            ),
            prompt_len in proptest::prelude::any::<usize>(),
        ) {
            let ctx = RoutingCtx {
                request: RequestFacts { model: "m", prompt_len },
                views: &views,
                rotation,
                draw,
                turn: Turn { count, seed, batch },
                auto: auto::Weights::default(),
                relay: crate::routing::relay::RelaySettings::default(),
            };
            for s in REGISTRY.iter().chain([&QUOTA_SHARE]) {
                let mut order = s.order(&ctx);
                order.sort_unstable();
                proptest::prop_assert_eq!(order, (0..views.len()).collect::<Vec<_>>(), "{}", s.name());
            }
        }
    }
}
