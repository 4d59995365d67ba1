//! The internal quota-share strategy (SPEC Q12) for `qtSd/<pool>` combos: which of a
//! pool's connections to try, in what order.
//!
//! 1. Saturation gating: connections whose provider reports them at or over the
//!    saturation threshold go behind every connection that is not.
//! 2. Power of two choices among the ungated: two connections are sampled (by the
//!    request's rotation counter, so the function stays deterministic) and the one with
//!    less work in flight goes first; ties keep the sampling order. This spreads load as
//!    well as full least-loaded selection while never herding every request onto the
//!    one connection that looked idlest a moment ago.
//! 3. The rest follow, least loaded first, as failover order.
//!
//! Fairness across keys waiting for a connection is the gates' business
//! ([`crate::resilience::gates`]); this strategy only orders. It must not read anything
//! but the view.

use super::{Needs, RoutingCtx, Strategy};
use crate::routing::view::CandidateView;

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct QuotaShare;

impl Strategy for QuotaShare {
    fn name(&self) -> &'static str {
        "quota-share"
    }

    fn needs(&self) -> Needs {
        Needs {
            load: true,
            saturation: true,
            ..Needs::NONE
        }
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        order(ctx.views, ctx.rotation)
    }
}

/// Indices into `conns` in the order to try them.
fn order(conns: &[CandidateView], rotation: usize) -> Vec<usize> {
    let (open, gated): (Vec<usize>, Vec<usize>) =
        (0..conns.len()).partition(|&i| !conns[i].saturated);
    let mut out = Vec::with_capacity(conns.len());
    let mut rest = open.clone();
    if open.len() >= 2 {
        let n = open.len();
        let a = open[rotation % n];
        // The second sample is a different connection: an offset of 1..n-1.
        let b = open[(rotation % n + 1 + (rotation / n) % (n - 1)) % n];
        let (first, second) = if conns[b].load < conns[a].load {
            (b, a)
        } else {
            (a, b)
        };
        out.push(first);
        out.push(second);
        rest.retain(|i| *i != first && *i != second);
    }
    rest.sort_by_key(|&i| conns[i].load);
    out.extend(rest);
    let mut gated = gated;
    gated.sort_by_key(|&i| conns[i].load);
    out.extend(gated);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn c(load: usize, saturated: bool) -> CandidateView {
        CandidateView {
            load,
            saturated,
            ..CandidateView::default()
        }
    }

    #[test]
    fn the_less_loaded_of_two_samples_goes_first() {
        let conns = [c(5, false), c(1, false)];
        assert_eq!(order(&conns, 0), vec![1, 0]);
        assert_eq!(order(&conns, 1), vec![1, 0]);
        // Equal loads: the sampling order decides, and rotation alternates it.
        let even = [c(2, false), c(2, false)];
        assert_eq!(order(&even, 0), vec![0, 1]);
        assert_eq!(order(&even, 1), vec![1, 0]);
    }

    #[test]
    fn saturated_connections_go_last_even_when_idle() {
        let conns = [c(0, true), c(9, false), c(3, false)];
        let o = order(&conns, 0);
        assert_eq!(*o.last().unwrap(), 0);
        assert_eq!(o.len(), 3);
        // Only saturated connections: still tried, least loaded first.
        assert_eq!(order(&[c(4, true), c(1, true)], 0), vec![1, 0]);
    }

    #[test]
    fn a_single_connection_is_the_only_choice() {
        assert_eq!(order(&[c(7, false)], 3), vec![0]);
        assert!(order(&[], 3).is_empty());
    }

    #[test]
    fn rotation_samples_every_pair_over_time() {
        let conns = [c(0, false); 4];
        let firsts: std::collections::HashSet<usize> =
            (0..16).map(|r| order(&conns, r)[0]).collect();
        assert_eq!(firsts.len(), 4);
    }

    proptest! {
        #[test]
        fn order_is_a_permutation_with_gated_last(
            loads in proptest::collection::vec((0usize..10, any::<bool>()), 0..8),
            rotation in 0usize..1000,
        ) {
            let conns: Vec<CandidateView> = loads.iter().map(|&(l, s)| c(l, s)).collect();
            let o = order(&conns, rotation);
            let mut sorted = o.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..conns.len()).collect::<Vec<_>>());
            let first_gated = o.iter().position(|&i| conns[i].saturated).unwrap_or(o.len());
            prop_assert!(o[first_gated..].iter().all(|&i| conns[i].saturated));
            // The first is never more loaded than the second when both are ungated.
            if o.len() >= 2 && !conns[o[0]].saturated && !conns[o[1]].saturated {
                prop_assert!(conns[o[0]].load <= conns[o[1]].load);
            }
        }
    }
}
