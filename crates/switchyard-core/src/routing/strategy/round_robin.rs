//! `round-robin`: the combo's requests take its candidates in turn, `batch` requests
//! each (1 by default: one request at a time, the rotation users expect; the
//! `routing.roundRobinBatch` setting sends that many in a row to one before moving on,
//! for prompt caches). The others follow in cyclic order after the first, as the
//! failover order. The turn is the combo's own request count, so rotation is fair per
//! combo whatever other traffic does. Reads the combo's turn.

use super::{Needs, RoutingCtx, Strategy};

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct RoundRobin;

impl Strategy for RoundRobin {
    fn name(&self) -> &'static str {
        "round-robin"
    }

    fn needs(&self) -> Needs {
        Needs {
            turn: true,
            ..Needs::NONE
        }
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        order(ctx.views.len(), ctx.turn.count, ctx.turn.batch)
    }
}

/// The order of `n` candidates on the combo's request `count`, `batch` at a time.
fn order(n: usize, count: u64, batch: u64) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let n64 = u64::try_from(n).unwrap_or(u64::MAX);
    let first = (count / batch.max(1)) % n64;
    let first = usize::try_from(first).unwrap_or(0);
    (0..n).map(|i| (first + i) % n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn one_request_at_a_time_then_in_batches() {
        let firsts: Vec<usize> = (0..7).map(|c| order(3, c, 1)[0]).collect();
        assert_eq!(firsts, [0, 1, 2, 0, 1, 2, 0]);
        let batched: Vec<usize> = (0..7).map(|c| order(3, c, 2)[0]).collect();
        assert_eq!(batched, [0, 0, 1, 1, 2, 2, 0]);
        assert_eq!(order(3, 1, 1), [1, 2, 0]);
        assert_eq!(order(3, 5, 0), [2, 0, 1], "a batch of 0 reads as 1");
        assert!(order(0, 4, 1).is_empty());
        assert_eq!(order(3, u64::MAX, 1), [0, 1, 2]);
    }

    proptest! {
        /// Over any run of requests, every candidate went first as often as any other,
        /// give or take one batch.
        #[test]
        fn it_is_fair_over_any_number_of_requests(n in 1usize..9, start in any::<u32>(), len in 0u64..500, batch in 1u64..5) {
            let mut counts = vec![0u64; n];
            for c in u64::from(start)..u64::from(start) + len {
                counts[order(n, c, batch)[0]] += 1;
            }
            let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            prop_assert!(hi - lo <= batch, "{counts:?}");
        }

        #[test]
        fn every_order_is_a_permutation(n in 0usize..12, count in any::<u64>(), batch in any::<u64>()) {
            let mut o = order(n, count, batch);
            o.sort_unstable();
            prop_assert_eq!(o, (0..n).collect::<Vec<_>>());
        }
    }
}
