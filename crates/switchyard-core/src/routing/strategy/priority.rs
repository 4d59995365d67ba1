//! `priority`: candidates in the order the plan lists them (a combo's targets as
//! configured, a provider's connections in rotation), scored by that order — the `i`th
//! (from 0) scores [`RANK_DECAY`]`^i`: 1, 0.8, 0.64, 0.512, … — and then multiplied by
//! the soft quota penalty (SPEC Q7: the factor, 0.7 by default, for a candidate on which
//! the key is over a soft share; 1 otherwise), after every other factor. Candidates are
//! tried by score, highest first, ties in plan order. So the factor's size decides how
//! far back a penalized candidate goes: of four targets, a penalized first one at 0.99
//! stays first, at the default 0.7 (< 0.8, > 0.64) drops behind the second only, at 0.1
//! (< 0.512) goes last. Reads only the view's penalty.

use super::{Needs, RoutingCtx, Strategy};
use crate::routing::view::CandidateView;

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Priority;

impl Strategy for Priority {
    fn name(&self) -> &'static str {
        "priority"
    }

    fn needs(&self) -> Needs {
        Needs {
            penalty: true,
            ..Needs::NONE
        }
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        order(ctx.views)
    }
}

fn order(views: &[CandidateView]) -> Vec<usize> {
    let score = |i: usize| rank_score(i) * views[i].penalty;
    let mut out: Vec<usize> = (0..views.len()).collect();
    // A stable sort: equal scores keep plan order.
    out.sort_by(|&a, &b| score(b).total_cmp(&score(a)));
    out
}

/// How much each place down the plan order is worth: a candidate scores this much of the
/// one before it. With it the default penalty (0.7) costs a candidate about one place.
pub const RANK_DECAY: f64 = 0.8;

/// The score of the `i`th candidate in plan order, before the penalty.
fn rank_score(i: usize) -> f64 {
    RANK_DECAY.powi(i32::try_from(i).unwrap_or(i32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(penalty: f64) -> CandidateView {
        CandidateView {
            penalty,
            ..CandidateView::default()
        }
    }

    #[test]
    fn plan_order_is_kept_without_penalties() {
        let views = [v(1.0), v(1.0), v(1.0)];
        assert_eq!(order(&views), vec![0, 1, 2]);
        assert!(order(&[]).is_empty());
    }

    #[test]
    fn the_factor_decides_how_far_back_a_penalized_candidate_goes() {
        // Four targets scoring 1, 0.8, 0.64, 0.512 before the penalty.
        let penalized_first = |factor| [v(factor), v(1.0), v(1.0), v(1.0)];
        for (factor, want) in [
            (0.99, vec![0, 1, 2, 3]),
            (0.7, vec![1, 0, 2, 3]),
            (0.1, vec![1, 2, 3, 0]),
        ] {
            assert_eq!(order(&penalized_first(factor)), want, "{factor}");
        }
        // Penalized second of three (0.8 before): 0.99 (0.792) keeps it ahead of the
        // third (0.64), 0.7 (0.56) and 0.1 (0.08) do not.
        let penalized_second = |factor| [v(1.0), v(factor), v(1.0)];
        for (factor, want) in [
            (0.99, vec![0, 1, 2]),
            (0.7, vec![0, 2, 1]),
            (0.1, vec![0, 2, 1]),
        ] {
            assert_eq!(order(&penalized_second(factor)), want, "{factor}");
        }
        // Two penalized at 0.5: scores 0.5, 0.8, 0.32, 0.512.
        let views = [v(0.5), v(1.0), v(0.5), v(1.0)];
        assert_eq!(order(&views), vec![1, 3, 0, 2]);
        // Equal scores keep plan order; a factor of 0 sends it behind everything.
        assert_eq!(order(&[v(0.8), v(1.0)]), vec![0, 1]);
        assert_eq!(order(&[v(0.0), v(1.0)]), vec![1, 0]);
    }

    #[test]
    fn rotation_does_not_change_the_order() {
        let views = [v(0.5), v(1.0)];
        let ctx = |rotation| RoutingCtx {
            request: super::super::RequestFacts {
                model: "m",
                prompt_len: 10,
            },
            views: &views,
            rotation,
            draw: 0,
            turn: super::super::Turn::default(),
            auto: super::super::auto::Weights::default(),
            relay: crate::routing::relay::RelaySettings::default(),
        };
        assert_eq!(Priority.order(&ctx(0)), vec![1, 0]);
        assert_eq!(Priority.order(&ctx(5)), vec![1, 0]);
    }
}
