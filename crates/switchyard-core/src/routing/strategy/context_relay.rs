//! `context-relay`: plan order, except that an account whose provider reports at least
//! `routing.contextRelay.stopAt` of a window used goes last (stable), so a session
//! moves to the next account before the window ends; the handoff summary is the
//! dispatch's part ([`crate::routing::relay`]). Reads the views' quota readings.

use super::{Needs, RoutingCtx, Strategy};
use crate::routing::relay::{phase, Phase};
use crate::routing::shape::Shape;

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct ContextRelay;

impl Strategy for ContextRelay {
    fn name(&self) -> &'static str {
        "context-relay"
    }

    fn needs(&self) -> Needs {
        Needs {
            quota: true,
            ..Needs::NONE
        }
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        let stopped = |i: usize| phase(ctx.views[i].quota.used_max, ctx.relay) == Phase::Stop;
        let mut out: Vec<usize> = (0..ctx.views.len()).collect();
        out.sort_by_key(|&i| stopped(i));
        out
    }

    fn shape(&self) -> Shape {
        Shape::Relay
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::relay::RelaySettings;
    use crate::routing::strategy::{auto, RequestFacts, Turn};
    use crate::routing::view::{CandidateView, QuotaWindows};
    use proptest::prelude::{prop_assert, prop_assert_eq, proptest};

    fn order(used: &[Option<f64>]) -> Vec<usize> {
        let views: Vec<CandidateView> = used
            .iter()
            .map(|&u| CandidateView {
                quota: QuotaWindows {
                    used_max: u,
                    ..QuotaWindows::default()
                },
                ..CandidateView::default()
            })
            .collect();
        let ctx = RoutingCtx {
            request: RequestFacts {
                model: "m",
                prompt_len: 0,
            },
            views: &views,
            rotation: 0,
            draw: 0,
            turn: Turn::default(),
            auto: auto::Weights::default(),
            relay: RelaySettings::default(),
        };
        ContextRelay.order(&ctx)
    }

    #[test]
    fn accounts_at_their_stop_go_last_in_plan_order() {
        assert_eq!(
            order(&[Some(0.96), Some(0.9), None, Some(1.0)]),
            [1, 2, 0, 3]
        );
        // Near the end but not at the stop: plan order.
        assert_eq!(order(&[Some(0.94), Some(0.1)]), [0, 1]);
        assert_eq!(order(&[]), Vec::<usize>::new());
    }

    proptest! {
        #[test]
        fn a_permutation_with_every_stopped_account_behind_every_other(
            used in proptest::collection::vec(proptest::option::of(0.0f64..=1.0), 0..12)
        ) {
            let out = order(&used);
            let mut sorted = out.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..used.len()).collect::<Vec<_>>());
            let stopped: Vec<bool> = out.iter().map(|&i| used[i].is_some_and(|u| u >= 0.95)).collect();
            prop_assert!(stopped.windows(2).all(|w| w[0] <= w[1]));
        }
    }
}
