//! `lkgp` (last known good provider): the candidates on the connection that last served
//! the combo successfully go first, the others after them in plan order. The last good
//! connection is remembered per combo and persisted, so a restart keeps it. It is only
//! an order: a last good account that has since cooled, locked or run out of quota is
//! skipped like any other (OmniRoute kept sending to an exhausted one, #6638), and the
//! next success moves the mark. Reads the views' last-good mark.

use super::{Needs, RoutingCtx, Strategy};
use crate::routing::view::CandidateView;

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lkgp;

impl Strategy for Lkgp {
    fn name(&self) -> &'static str {
        "lkgp"
    }

    fn needs(&self) -> Needs {
        Needs {
            last_good: true,
            ..Needs::NONE
        }
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        order(ctx.views)
    }
}

fn order(views: &[CandidateView]) -> Vec<usize> {
    let mut out: Vec<usize> = (0..views.len()).collect();
    out.sort_by_key(|&i| !views[i].last_good);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn g(last_good: bool) -> CandidateView {
        CandidateView {
            last_good,
            ..CandidateView::default()
        }
    }

    #[test]
    fn the_last_good_first_then_plan_order() {
        assert_eq!(order(&[g(false), g(false), g(true)]), [2, 0, 1]);
        assert_eq!(order(&[g(false), g(false)]), [0, 1]);
    }

    proptest! {
        #[test]
        fn marked_ones_lead_in_plan_order(marks in prop::collection::vec(any::<bool>(), 0..12)) {
            let views: Vec<CandidateView> = marks.iter().map(|&m| g(m)).collect();
            let o = order(&views);
            let lead = marks.iter().filter(|m| **m).count();
            prop_assert!(o[..lead].iter().all(|&i| marks[i]));
            prop_assert!(o[..lead].windows(2).all(|w| w[0] < w[1]));
            prop_assert!(o[lead..].windows(2).all(|w| w[0] < w[1]));
        }
    }
}
