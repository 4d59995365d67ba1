//! `auto`: every candidate gets one score, a weighted mean of five factors, each 0 to 1,
//! and the highest goes first (ties keep plan order):
//!
//! | factor | fact | value |
//! |---|---|---|
//! | health | success rate of the connection × model | the mean success, 0 to 1 |
//! | speed | mean time to response headers (streams: first byte) | `(fastest + 10) / (own + 10)` ms |
//! | price | declared target cost, else the catalog's input price | `cheapest / own` (0 / 0 = 1) |
//! | quota | the provider's readings (SPEC Q6) | `1 − used`, the highest used fraction; 1 without a reading |
//! | load | requests running and waiting on the connection | `1 / (1 + load)` |
//!
//! A candidate with no time (or no cost) yet is given the mean factor of those that have
//! one (1 when none has), so a new account is neither favoured nor starved. The weights
//! are settings (`routing.auto.*Weight`); the score is their weighted mean, then
//! multiplied by the soft quota penalty (SPEC Q7), as every scoring strategy does. With
//! the probability `routing.auto.exploration` (5 % by default) the request's draw puts
//! a uniformly drawn candidate first instead, so accounts the score does not favour
//! keep being measured. All zero weights leave plan order (bar the penalty).

use super::draw::Rng;
use super::headroom::headroom;
use super::{Needs, RoutingCtx, Strategy};
use crate::routing::view::CandidateView;

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Auto;

/// The weights of `auto`'s factors and its exploration rate (`routing.auto.*`), each
/// 0 to 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights {
    pub health: f64,
    pub speed: f64,
    pub price: f64,
    pub quota: f64,
    pub load: f64,
    /// The share of requests whose first candidate is drawn at random.
    pub exploration: f64,
}

impl Default for Weights {
    /// The settings' defaults: a failing account costs the most, then speed and price
    /// alike, then quota left, then load.
    fn default() -> Self {
        Self {
            health: 0.35,
            speed: 0.2,
            price: 0.2,
            quota: 0.15,
            load: 0.1,
            exploration: 0.05,
        }
    }
}

impl Strategy for Auto {
    fn name(&self) -> &'static str {
        "auto"
    }

    fn needs(&self) -> Needs {
        Needs {
            load: true,
            penalty: true,
            cost: true,
            draw: true,
            stats: true,
            quota: true,
            ..Needs::NONE
        }
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        order(ctx.views, &ctx.auto, ctx.draw)
    }
}

/// The mean of the known values, `None` when none is known.
fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / f64::from(n))
}

/// Each known value's factor by `factor`, the unknown ones at the mean of the known
/// factors (1 when none is known).
fn relative(known: &[Option<f64>], factor: impl Fn(f64) -> f64) -> Vec<f64> {
    let factors: Vec<Option<f64>> = known.iter().map(|v| v.map(&factor)).collect();
    let neutral = mean(factors.iter().flatten().copied()).unwrap_or(1.0);
    factors.into_iter().map(|f| f.unwrap_or(neutral)).collect()
}

/// Each candidate's score, 0 to 1 before the penalty.
pub fn scores(views: &[CandidateView], w: &Weights) -> Vec<f64> {
    let ms: Vec<Option<f64>> = views
        .iter()
        .map(|v| v.header_ms.filter(|m| m.is_finite()).map(|m| m.max(0.0)))
        .collect();
    let fastest = ms.iter().flatten().copied().fold(f64::INFINITY, f64::min);
    let speed = relative(&ms, |m| (fastest + 10.0) / (m + 10.0));
    let cost: Vec<Option<f64>> = views
        .iter()
        .map(|v| v.cost.filter(|c| c.is_finite()).map(|c| c.max(0.0)))
        .collect();
    let cheapest = cost.iter().flatten().copied().fold(f64::INFINITY, f64::min);
    let price = relative(&cost, |c| if c > 0.0 { cheapest / c } else { 1.0 });
    let total = w.health + w.speed + w.price + w.quota + w.load;
    views
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let score = if total > 0.0 {
                #[expect(clippy::cast_precision_loss, reason = "a request count")]
                let load = 1.0 / (1.0 + v.load as f64);
                let sum = w.health * v.success.clamp(0.0, 1.0)
                    + w.speed * speed[i]
                    + w.price * price[i]
                    + w.quota * headroom(v)
                    + w.load * load;
                sum / total
            } else {
                1.0
            };
            score * v.penalty
        })
        .collect()
}

fn order(views: &[CandidateView], w: &Weights, draw: u64) -> Vec<usize> {
    let score = scores(views, w);
    let mut out: Vec<usize> = (0..views.len()).collect();
    out.sort_by(|&a, &b| score[b].total_cmp(&score[a]));
    let mut rng = Rng::new(draw);
    #[expect(clippy::cast_precision_loss, reason = "a uniform draw's top 53 bits")]
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    if views.len() > 1 && u < w.exploration {
        let pick = rng.index(views.len());
        if let Some(at) = out.iter().position(|&i| i == pick) {
            out[..=at].rotate_right(1);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::view::QuotaWindows;
    use proptest::prelude::*;

    fn calm() -> Weights {
        Weights {
            exploration: 0.0,
            ..Weights::default()
        }
    }

    fn v(success: f64, header_ms: Option<f64>, cost: Option<f64>) -> CandidateView {
        CandidateView {
            success,
            header_ms,
            cost,
            ..CandidateView::default()
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn the_settings_default_to_the_documented_weights() {
        let settings = crate::settings::resolve(&crate::settings::Layers::default())
            .unwrap()
            .settings;
        assert_eq!(settings.auto, Weights::default());
    }

    #[test]
    fn the_documented_score() {
        let mut slow_cheap = v(1.0, Some(990.0), Some(1.0));
        slow_cheap.quota = QuotaWindows {
            used_max: Some(0.5),
            ..QuotaWindows::default()
        };
        let mut fast_dear = v(0.5, Some(90.0), Some(4.0));
        fast_dear.load = 3;
        let unknown = v(1.0, None, None);
        let s = scores(&[slow_cheap, fast_dear, unknown], &calm());
        // health .35, speed .2, price .2, quota .15, load .1; total 1.
        let first = 0.35 + 0.2 * (100.0 / 1000.0) + 0.2 + 0.15 * 0.5 + 0.1;
        let second = 0.35 * 0.5 + 0.2 + 0.2 * 0.25 + 0.15 + 0.1 * 0.25;
        // The unknown candidate is at the mean of the known factors.
        let third = 0.35 + 0.2 * 0.55 + 0.2 * 0.625 + 0.15 + 0.1;
        assert!(close(s[0], first), "{s:?}");
        assert!(close(s[1], second), "{s:?}");
        assert!(close(s[2], third), "{s:?}");
        assert_eq!(
            order(&[slow_cheap, fast_dear, unknown], &calm(), 7),
            [2, 0, 1]
        );
        // A penalty multiplies the score.
        let mut penalised = unknown;
        penalised.penalty = 0.5;
        assert!(close(scores(&[penalised], &calm())[0], 0.5));
    }

    #[test]
    fn each_weight_alone_orders_by_its_own_fact() {
        let only = |f: fn(&mut Weights)| {
            let mut w = Weights {
                health: 0.0,
                speed: 0.0,
                price: 0.0,
                quota: 0.0,
                load: 0.0,
                exploration: 0.0,
            };
            f(&mut w);
            w
        };
        let mut a = v(0.6, Some(500.0), Some(1.0));
        let mut b = v(0.9, Some(50.0), Some(9.0));
        a.load = 0;
        b.load = 4;
        a.quota.used_max = Some(0.9);
        b.quota.used_max = Some(0.1);
        let views = [a, b];
        assert_eq!(order(&views, &only(|w| w.health = 1.0), 0), [1, 0]);
        assert_eq!(order(&views, &only(|w| w.speed = 1.0), 0), [1, 0]);
        assert_eq!(order(&views, &only(|w| w.price = 1.0), 0), [0, 1]);
        assert_eq!(order(&views, &only(|w| w.quota = 1.0), 0), [1, 0]);
        assert_eq!(order(&views, &only(|w| w.load = 1.0), 0), [0, 1]);
        // No weight at all: plan order.
        assert_eq!(order(&views, &only(|_| ()), 0), [0, 1]);
        // A free target is the cheapest; nothing known of cost or time is neutral.
        let s = scores(&[v(1.0, None, Some(0.0)), v(1.0, None, Some(2.0))], &calm());
        assert!(s[0] > s[1], "{s:?}");
        let s = scores(&[v(1.0, None, None), v(1.0, None, None)], &calm());
        assert!(close(s[0], 1.0) && close(s[1], 1.0), "{s:?}");
    }

    #[test]
    fn exploration_puts_a_drawn_candidate_first_at_its_rate() {
        let views = [
            v(1.0, Some(10.0), None),
            v(0.2, Some(10.0), None),
            v(0.1, None, None),
        ];
        let w = Weights {
            exploration: 0.2,
            ..Weights::default()
        };
        let mut firsts = [0u32; 3];
        for draw in 0..10_000u64 {
            firsts[order(&views, &w, super::super::draw::Rng::new(draw).next_u64())[0]] += 1;
        }
        // 80 % exploit (candidate 0) plus a third of the 20 % explored each.
        assert!((8_400..=8_930).contains(&firsts[0]), "{firsts:?}");
        assert!((500..=830).contains(&firsts[1]), "{firsts:?}");
        assert!((500..=830).contains(&firsts[2]), "{firsts:?}");
        // Off: the best always first.
        for draw in 0..1_000 {
            assert_eq!(order(&views, &calm(), draw)[0], 0);
        }
    }

    fn view() -> impl proptest::strategy::Strategy<Value = CandidateView> {
        use proptest::strategy::Strategy as _;
        (
            0.0f64..=1.0,
            proptest::option::of(0.0f64..100_000.0),
            proptest::option::of(0.0f64..100.0),
            0usize..50,
            proptest::option::of(0.0f64..=1.0),
            prop_oneof![Just(1.0), Just(0.7)],
        )
            .prop_map(|(success, header_ms, cost, load, used, penalty)| {
                let mut c = v(success, header_ms, cost);
                c.load = load;
                c.quota.used_max = used;
                c.penalty = penalty;
                c
            })
    }

    fn weights() -> impl proptest::strategy::Strategy<Value = Weights> {
        use proptest::strategy::Strategy as _;
        (
            0.0f64..=1.0,
            0.0f64..=1.0,
            0.0f64..=1.0,
            0.0f64..=1.0,
            0.0f64..=1.0,
            0.0f64..=1.0,
        )
            .prop_map(|(health, speed, price, quota, load, exploration)| Weights {
                health,
                speed,
                price,
                quota,
                load,
                exploration,
            })
    }

    proptest! {
        #[test]
        fn a_permutation_scores_within_bounds(
            views in proptest::collection::vec(view(), 0..12),
            w in weights(),
            draw: u64,
        ) {
            let mut got = order(&views, &w, draw);
            got.sort_unstable();
            prop_assert_eq!(got, (0..views.len()).collect::<Vec<_>>());
            for s in scores(&views, &w) {
                prop_assert!((0.0..=1.0 + 1e-12).contains(&s), "{}", s);
            }
        }

        #[test]
        fn a_better_fact_never_moves_a_candidate_back(
            views in proptest::collection::vec(view(), 1..8),
            pick: proptest::sample::Index,
            w in weights(),
        ) {
            let w = Weights { exploration: 0.0, ..w };
            let i = pick.index(views.len());
            let before = order(&views, &w, 0).iter().position(|&j| j == i).unwrap();
            let mut better = views.clone();
            better[i].success = 1.0;
            better[i].load = 0;
            better[i].quota.used_max = None;
            let after = order(&better, &w, 0).iter().position(|&j| j == i).unwrap();
            prop_assert!(after <= before, "{} -> {}", before, after);
        }
    }
}
