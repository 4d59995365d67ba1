//! `headroom`: the account with the most quota left goes first: `1 − used`, the highest
//! used fraction its provider reported for any window (SPEC Q6 signals: Codex's primary
//! and secondary windows, Anthropic's 5-hour and 7-day utilization, OpenAI-style
//! remaining counts). An account with no reading counts as unused (fail open: a new or
//! quiet account is not held back). Ties keep plan order. Reads the views' readings.

use super::{Needs, RoutingCtx, Strategy};
use crate::routing::view::CandidateView;

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Headroom;

impl Strategy for Headroom {
    fn name(&self) -> &'static str {
        "headroom"
    }

    fn needs(&self) -> Needs {
        Needs {
            quota: true,
            ..Needs::NONE
        }
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        order(ctx.views)
    }
}

/// A candidate's headroom, 0 to 1.
pub fn headroom(v: &CandidateView) -> f64 {
    1.0 - v.quota.used_max.unwrap_or(0.0).clamp(0.0, 1.0)
}

fn order(views: &[CandidateView]) -> Vec<usize> {
    let mut out: Vec<usize> = (0..views.len()).collect();
    out.sort_by(|&a, &b| headroom(&views[b]).total_cmp(&headroom(&views[a])));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::view::QuotaWindows;
    use proptest::prelude::*;

    fn used(u: Option<f64>) -> CandidateView {
        CandidateView {
            quota: QuotaWindows {
                used_max: u,
                ..QuotaWindows::default()
            },
            ..CandidateView::default()
        }
    }

    #[test]
    fn the_most_left_first_unknown_counts_as_unused() {
        let views = [
            used(Some(0.9)),
            used(None),
            used(Some(0.2)),
            used(Some(1.4)),
        ];
        assert_eq!(order(&views), [1, 2, 0, 3]);
        assert_eq!(headroom(&views[3]), 0.0);
    }

    proptest! {
        #[test]
        fn headroom_never_increases_down_the_order(us in prop::collection::vec(prop::option::of(0.0f64..1.5), 0..12)) {
            let views: Vec<CandidateView> = us.iter().map(|&u| used(u)).collect();
            let o = order(&views);
            let mut sorted = o.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..views.len()).collect::<Vec<_>>());
            prop_assert!(o.windows(2).all(|w| headroom(&views[w[0]]) >= headroom(&views[w[1]])));
        }
    }
}
