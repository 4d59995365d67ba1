//! `least-used`: the candidate that was sent the fewest requests lately goes first: the
//! connection × model's count of requests sent, halved every ten minutes
//! ([`crate::routing::stats`]), so it follows the recent load and forgets old bursts. The
//! count is only ever added to and decayed, never taken from, so it cannot go negative
//! and win forever (LiteLLM's least-busy counters did). Ties rotate with the request's
//! turn, so equal candidates share the work. Reads the views' use counts and the
//! rotation.

use super::{Needs, RoutingCtx, Strategy};
use crate::routing::view::CandidateView;

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeastUsed;

impl Strategy for LeastUsed {
    fn name(&self) -> &'static str {
        "least-used"
    }

    fn needs(&self) -> Needs {
        Needs {
            stats: true,
            ..Needs::NONE
        }
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        order(ctx.views, ctx.rotation)
    }
}

fn order(views: &[CandidateView], rotation: usize) -> Vec<usize> {
    let n = views.len();
    let mut out: Vec<usize> = (0..n).map(|i| (i + rotation % n.max(1)) % n).collect();
    // A stable sort of the rotated order: ties keep the rotation.
    out.sort_by(|&a, &b| views[a].used.total_cmp(&views[b].used));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn u(used: f64) -> CandidateView {
        CandidateView {
            used,
            ..CandidateView::default()
        }
    }

    #[test]
    fn the_least_used_first_and_ties_rotate() {
        assert_eq!(order(&[u(3.0), u(0.5), u(2.0)], 0), [1, 2, 0]);
        let ties = [u(1.0), u(1.0), u(1.0)];
        let firsts: Vec<usize> = (0..6).map(|r| order(&ties, r)[0]).collect();
        assert_eq!(firsts, [0, 1, 2, 0, 1, 2]);
        assert!(order(&[], 3).is_empty());
    }

    proptest! {
        #[test]
        fn the_first_is_a_least_used_one(used in prop::collection::vec(0.0f64..1e6, 0..12), rotation in any::<usize>()) {
            let views: Vec<CandidateView> = used.iter().map(|&x| u(x)).collect();
            let o = order(&views, rotation);
            let mut sorted = o.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..views.len()).collect::<Vec<_>>());
            prop_assert!(o.windows(2).all(|w| used[w[0]] <= used[w[1]]));
        }
    }
}
