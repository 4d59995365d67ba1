//! `priority`: candidates in the order the plan lists them (a combo's targets as
//! configured, a provider's connections in rotation), except that a candidate on which
//! the key is over a soft quota share moves behind the others (SPEC Q7): its score is
//! its penalty factor, every other candidate's is 1, and the order is by score, ties
//! kept in plan order. Reads only the view's penalty.

use super::{Needs, Strategy};
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

    fn order(&self, views: &[CandidateView], _rotation: usize) -> Vec<usize> {
        let mut out: Vec<usize> = (0..views.len()).collect();
        out.sort_by(|&a, &b| views[b].penalty.total_cmp(&views[a].penalty));
        out
    }
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
        assert_eq!(Priority.order(&views, 7), vec![0, 1, 2]);
        assert!(Priority.order(&[], 0).is_empty());
    }

    #[test]
    fn penalized_candidates_go_last_in_their_relative_order() {
        let views = [v(0.5), v(1.0), v(0.5), v(1.0)];
        assert_eq!(Priority.order(&views, 0), vec![1, 3, 0, 2]);
    }

    #[test]
    fn a_smaller_factor_goes_further_back() {
        let views = [v(0.1), v(0.5), v(1.0)];
        assert_eq!(Priority.order(&views, 0), vec![2, 1, 0]);
    }

    #[test]
    fn rotation_does_not_change_the_order() {
        let views = [v(0.5), v(1.0)];
        assert_eq!(Priority.order(&views, 0), Priority.order(&views, 5));
    }
}
