//! `cache-optimized`: the candidate whose connection scores highest for the request's
//! prompt-cache key goes first (rendezvous hashing, [`crate::routing::affinity::rendezvous`]),
//! so one conversation, or one shared prompt opening, keeps landing on the account whose
//! prompt cache holds it — across restarts and replicas, with no table, and with only
//! the keys of a removed account moving. The key is the session's (SPEC R15; a live pin
//! still goes first after any strategy), else the prompt's opening. The rest follow by
//! score. A request with no key keeps plan order. Reads the views' rendezvous scores.

use super::{Needs, RoutingCtx, Strategy};
use crate::routing::view::CandidateView;

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct CacheOptimized;

impl Strategy for CacheOptimized {
    fn name(&self) -> &'static str {
        "cache-optimized"
    }

    fn needs(&self) -> Needs {
        Needs {
            cache: true,
            ..Needs::NONE
        }
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        order(ctx.views)
    }
}

fn order(views: &[CandidateView]) -> Vec<usize> {
    let mut out: Vec<usize> = (0..views.len()).collect();
    out.sort_by(|&a, &b| views[b].affinity.cmp(&views[a].affinity));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::affinity::rendezvous;
    use proptest::prelude::*;

    fn views(key: &[u8; 32], conns: &[&str]) -> Vec<CandidateView> {
        conns
            .iter()
            .map(|c| CandidateView {
                affinity: rendezvous(key, c),
                ..CandidateView::default()
            })
            .collect()
    }

    #[test]
    fn no_key_keeps_plan_order() {
        assert_eq!(order(&[CandidateView::default(); 3]), [0, 1, 2]);
    }

    proptest! {
        /// One key always lands on one connection; removing another connection never
        /// moves it; removing its own moves it to its second choice.
        #[test]
        fn a_key_keeps_its_connection_and_only_a_removed_ones_keys_move(key in any::<[u8; 32]>(), n in 2usize..8, gone in 0usize..8) {
            let names: Vec<String> = (0..n).map(|i| format!("conn-{i}")).collect();
            let conns: Vec<&str> = names.iter().map(String::as_str).collect();
            let full = order(&views(&key, &conns));
            prop_assert_eq!(&full, &order(&views(&key, &conns)));
            let gone = gone % n;
            let fewer: Vec<&str> = conns.iter().enumerate().filter(|(i, _)| *i != gone).map(|(_, c)| *c).collect();
            let first_after = fewer[order(&views(&key, &fewer))[0]];
            let (best, second) = (conns[full[0]], conns[full[1]]);
            if best == conns[gone] {
                prop_assert_eq!(first_after, second);
            } else {
                prop_assert_eq!(first_after, best);
            }
        }
    }
}
