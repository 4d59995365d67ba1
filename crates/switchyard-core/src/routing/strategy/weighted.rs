//! `weighted`: one draw in proportion to the targets' weights picks the first candidate
//! (a weight of 0 is never drawn unless every weight is 0, and then the draw is
//! uniform); the others follow by weight, heaviest first, ties in plan order, as the
//! failover order. A combo target's weight is shared by the connections it expands to:
//! each of them carries it. Reads the view's weight and the request's draw.

use super::draw::Rng;
use super::{Needs, RoutingCtx, Strategy};
use crate::routing::view::CandidateView;

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Weighted;

impl Strategy for Weighted {
    fn name(&self) -> &'static str {
        "weighted"
    }

    fn needs(&self) -> Needs {
        Needs {
            weight: true,
            draw: true,
            ..Needs::NONE
        }
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        order(ctx.views, ctx.draw)
    }
}

fn order(views: &[CandidateView], draw: u64) -> Vec<usize> {
    let mut out: Vec<usize> = (0..views.len()).collect();
    // Heaviest first, ties in plan order (a stable sort).
    out.sort_by(|&a, &b| views[b].weight.cmp(&views[a].weight));
    let Some(first) = pick(views, draw) else {
        return out;
    };
    out.retain(|&i| i != first);
    out.insert(0, first);
    out
}

/// The candidate a draw of `draw` picks, in proportion to the weights.
fn pick(views: &[CandidateView], draw: u64) -> Option<usize> {
    let total: u64 = views.iter().map(|v| u64::from(v.weight)).sum();
    let mut rng = Rng::new(draw);
    if total == 0 {
        return (!views.is_empty()).then(|| rng.index(views.len()));
    }
    let mut ticket = rng.below(total);
    for (i, v) in views.iter().enumerate() {
        let w = u64::from(v.weight);
        if ticket < w {
            return Some(i);
        }
        ticket -= w;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn w(weight: u32) -> CandidateView {
        CandidateView {
            weight,
            ..CandidateView::default()
        }
    }

    #[test]
    fn the_rest_follow_heaviest_first() {
        let views = [w(1), w(5), w(0), w(5)];
        let o = order(&views, 3);
        assert_eq!(o.len(), 4);
        let rest: Vec<usize> = o[1..].to_vec();
        let mut want: Vec<usize> = vec![1, 3, 0, 2];
        want.retain(|&i| i != o[0]);
        assert_eq!(rest, want);
        assert!(order(&[], 1).is_empty());
    }

    #[test]
    fn a_zero_weight_is_never_drawn_unless_all_are_zero() {
        let views = [w(0), w(3), w(0)];
        for draw in 0..2_000 {
            assert_eq!(order(&views, draw)[0], 1);
        }
        let zeros = [w(0), w(0), w(0)];
        let mut firsts = [0u32; 3];
        for draw in 0..3_000 {
            firsts[order(&zeros, draw)[0]] += 1;
        }
        assert!(
            firsts.iter().all(|&c| (850..=1_150).contains(&c)),
            "{firsts:?}"
        );
    }

    /// Draws over `n` requests: how often each candidate went first.
    fn firsts(views: &[CandidateView], n: u64, salt: u64) -> Vec<u64> {
        let mut counts = vec![0u64; views.len()];
        for i in 0..n {
            let draw = super::Rng::new(salt ^ i).next_u64();
            counts[order(views, draw)[0]] += 1;
        }
        counts
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Over 20 000 requests each candidate goes first within 2.5 points of its
        /// share of the total weight (the binomial's standard deviation is at most
        /// 0.35 point there, so this is beyond seven of them).
        #[test]
        fn it_converges_to_the_weights(weights in prop::collection::vec(0u32..50, 1..6), salt in any::<u64>()) {
            let views: Vec<CandidateView> = weights.iter().map(|&x| w(x)).collect();
            let total: u32 = weights.iter().sum();
            let n = 20_000;
            let counts = firsts(&views, n, salt);
            for (i, &c) in counts.iter().enumerate() {
                let share = if total == 0 { 1.0 / weights.len() as f64 } else { f64::from(weights[i]) / f64::from(total) };
                let seen = c as f64 / n as f64;
                prop_assert!((seen - share).abs() < 0.025, "candidate {i}: weight share {share}, seen {seen} ({weights:?})");
                if total > 0 && weights[i] == 0 {
                    prop_assert_eq!(c, 0);
                }
            }
        }
    }

    proptest! {

        #[test]
        fn every_order_is_a_permutation(weights in prop::collection::vec(any::<u32>(), 0..12), draw in any::<u64>()) {
            let views: Vec<CandidateView> = weights.iter().map(|&x| w(x)).collect();
            let mut o = order(&views, draw);
            o.sort_unstable();
            prop_assert_eq!(o, (0..views.len()).collect::<Vec<_>>());
        }
    }
}
