//! `cost-optimized`: cheapest first. A candidate's cost is its combo target's declared
//! `cost`, else the catalog's input price for its model (USD per million input tokens:
//! declare target costs in that unit to compare them with catalog prices); a candidate
//! of unknown cost goes after every priced one. Ties, and the unknown ones among
//! themselves, keep plan order. Reads the view's cost.

use super::{Needs, RoutingCtx, Strategy};
use crate::routing::view::CandidateView;

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct CostOptimized;

impl Strategy for CostOptimized {
    fn name(&self) -> &'static str {
        "cost-optimized"
    }

    fn needs(&self) -> Needs {
        Needs {
            cost: true,
            ..Needs::NONE
        }
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        order(ctx.views)
    }
}

fn order(views: &[CandidateView]) -> Vec<usize> {
    let key = |i: usize| match views[i].cost {
        Some(c) if c.is_finite() => (false, c),
        _ => (true, 0.0),
    };
    let mut out: Vec<usize> = (0..views.len()).collect();
    out.sort_by(|&a, &b| {
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn c(cost: Option<f64>) -> CandidateView {
        CandidateView {
            cost,
            ..CandidateView::default()
        }
    }

    #[test]
    fn cheapest_first_unknown_last_ties_in_plan_order() {
        let views = [
            c(None),
            c(Some(3.0)),
            c(Some(0.5)),
            c(Some(f64::NAN)),
            c(Some(3.0)),
            c(Some(0.0)),
        ];
        assert_eq!(order(&views), [5, 2, 1, 4, 0, 3]);
        assert!(order(&[]).is_empty());
    }

    proptest! {
        #[test]
        fn priced_ones_ascend_and_precede_the_unknown(costs in prop::collection::vec(prop::option::of(0.0f64..100.0), 0..12)) {
            let views: Vec<CandidateView> = costs.iter().map(|&x| c(x)).collect();
            let o = order(&views);
            let mut sorted = o.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..views.len()).collect::<Vec<_>>());
            let seen: Vec<Option<f64>> = o.iter().map(|&i| costs[i]).collect();
            let known = seen.iter().take_while(|x| x.is_some()).count();
            prop_assert!(seen[known..].iter().all(Option::is_none));
            prop_assert!(seen[..known].windows(2).all(|w| w[0] <= w[1]));
        }
    }
}
