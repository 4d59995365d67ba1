//! `reset-window`: the account whose weekly window resets soonest goes first (its
//! allowance is the one most about to be wasted), then the later ones, accounts with no
//! announced weekly reset (else 5-hour reset) last. Resets within the same minute count
//! as equal and take turns with the request's rotation, so accounts resetting together
//! share the work. Reads the views' readings and the rotation.

use super::{Needs, RoutingCtx, Strategy};
use crate::routing::view::CandidateView;

/// Resets this close count as the same moment.
pub const TIE_MS: u64 = 60_000;

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResetWindow;

impl Strategy for ResetWindow {
    fn name(&self) -> &'static str {
        "reset-window"
    }

    fn needs(&self) -> Needs {
        Needs {
            quota: true,
            ..Needs::NONE
        }
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        order(ctx.views, ctx.rotation)
    }
}

/// Milliseconds to the candidate's weekly reset, else its 5-hour one.
fn reset_in(v: &CandidateView) -> Option<u64> {
    v.quota
        .weekly
        .and_then(|r| r.reset_in_ms)
        .or_else(|| v.quota.five_hours.and_then(|r| r.reset_in_ms))
}

fn order(views: &[CandidateView], rotation: usize) -> Vec<usize> {
    let n = views.len();
    // The minute of the reset (unknown after every known one); within a minute, the
    // rotated plan order.
    let key = |i: usize| {
        (
            reset_in(&views[i]).map_or(u64::MAX, |ms| ms / TIE_MS),
            (i + n - rotation % n.max(1)) % n.max(1),
        )
    };
    let mut out: Vec<usize> = (0..n).collect();
    out.sort_by_key(|&i| key(i));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::view::{QuotaWindows, Reading};
    use proptest::prelude::*;

    fn resets(weekly: Option<u64>, five: Option<u64>) -> CandidateView {
        let r = |ms: Option<u64>| {
            ms.map(|m| Reading {
                used: 0.5,
                reset_in_ms: Some(m),
            })
        };
        CandidateView {
            quota: QuotaWindows {
                weekly: r(weekly),
                five_hours: r(five),
                used_max: Some(0.5),
            },
            ..CandidateView::default()
        }
    }

    #[test]
    fn the_soonest_weekly_reset_first_unknown_last_same_minute_rotates() {
        let views = [
            resets(Some(3_600_000), None),
            resets(None, None),
            resets(Some(120_000), Some(1_000)),
            resets(None, Some(600_000)),
        ];
        assert_eq!(order(&views, 0), [2, 3, 0, 1]);
        let ties = [
            resets(Some(61_000), None),
            resets(Some(119_000), None),
            resets(Some(5_000), None),
        ];
        assert_eq!(order(&ties, 0), [2, 0, 1]);
        assert_eq!(order(&ties, 1), [2, 1, 0]);
        assert!(order(&[], 3).is_empty());
    }

    proptest! {
        #[test]
        fn resets_never_come_sooner_down_the_order(rs in prop::collection::vec(prop::option::of(0u64..10_000_000), 0..12), rotation in any::<usize>()) {
            let views: Vec<CandidateView> = rs.iter().map(|&r| resets(r, None)).collect();
            let o = order(&views, rotation);
            let mut sorted = o.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..views.len()).collect::<Vec<_>>());
            let minute = |i: usize| rs[i].map_or(u64::MAX, |ms| ms / TIE_MS);
            prop_assert!(o.windows(2).all(|w| minute(w[0]) <= minute(w[1])));
        }
    }
}
