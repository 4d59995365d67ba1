//! `context-optimized`: the candidate whose model has the largest context window goes
//! first, unknown windows last, ties in plan order — for long conversations that should
//! land where they have the most room. Windows are the operator's (`context_windows` of
//! a provider). Separately, every plan leaves out the candidates whose declared window
//! cannot hold the request's prompt ([`fits`]), whatever its strategy. Reads the views'
//! windows.

use super::{Needs, RoutingCtx, Strategy};
use crate::routing::view::CandidateView;

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct ContextOptimized;

impl Strategy for ContextOptimized {
    fn name(&self) -> &'static str {
        "context-optimized"
    }

    fn needs(&self) -> Needs {
        Needs {
            context: true,
            ..Needs::NONE
        }
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        order(ctx.views)
    }
}

/// Whether a model with context window `window` (tokens; `None` = not declared) can
/// hold a prompt estimated at `prompt_tokens`. An undeclared window fits everything.
pub fn fits(window: Option<u64>, prompt_tokens: u64) -> bool {
    window.is_none_or(|w| prompt_tokens <= w)
}

fn order(views: &[CandidateView]) -> Vec<usize> {
    let mut out: Vec<usize> = (0..views.len()).collect();
    out.sort_by_key(|&i| {
        std::cmp::Reverse(views[i].context_window.map_or(0, |w| w.saturating_add(1)))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn w(window: Option<u64>) -> CandidateView {
        CandidateView {
            context_window: window,
            ..CandidateView::default()
        }
    }

    #[test]
    fn the_largest_window_first_unknown_last() {
        let views = [
            w(Some(128_000)),
            w(None),
            w(Some(1_000_000)),
            w(Some(128_000)),
            w(Some(0)),
        ];
        assert_eq!(order(&views), [2, 0, 3, 4, 1]);
        assert!(fits(None, u64::MAX));
        assert!(fits(Some(100), 100));
        assert!(!fits(Some(100), 101));
    }

    proptest! {
        #[test]
        fn windows_never_grow_down_the_order(ws in prop::collection::vec(prop::option::of(0u64..2_000_000), 0..12)) {
            let views: Vec<CandidateView> = ws.iter().map(|&x| w(x)).collect();
            let o = order(&views);
            let mut sorted = o.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..views.len()).collect::<Vec<_>>());
            let rank = |i: usize| ws[i].map_or(0, |x| x + 1);
            prop_assert!(o.windows(2).all(|p| rank(p[0]) >= rank(p[1])));
        }
    }
}
