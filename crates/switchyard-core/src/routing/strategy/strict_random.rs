//! `strict-random`: a shuffled deck per combo, dealt one card per request — every
//! candidate goes first exactly once per round of as many requests as there are
//! candidates, in an order that changes each round (unlike `random`, no candidate is
//! drawn twice before the others had their turn). The deck of round `r` is the shuffle
//! of the combo's seed mixed with `r`, so no deck is stored: the combo's request count
//! says where in which deck a request is. The other candidates follow in the request's
//! own random order. Reads the combo's turn and the draw.

use super::draw::Rng;
use super::{Needs, RoutingCtx, Strategy};

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct StrictRandom;

impl Strategy for StrictRandom {
    fn name(&self) -> &'static str {
        "strict-random"
    }

    fn needs(&self) -> Needs {
        Needs {
            turn: true,
            draw: true,
            ..Needs::NONE
        }
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        order(ctx.views.len(), ctx.turn.count, ctx.turn.seed, ctx.draw)
    }
}

/// The deck of round `round` of a combo seeded `seed`, over `n` candidates.
fn deck(n: usize, seed: u64, round: u64) -> Vec<usize> {
    let mut cards: Vec<usize> = (0..n).collect();
    let mut mixer = Rng::new(seed ^ round.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    Rng::new(mixer.next_u64()).shuffle(&mut cards);
    cards
}

fn order(n: usize, count: u64, seed: u64, draw: u64) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let n64 = u64::try_from(n).unwrap_or(u64::MAX);
    let (round, at) = (count / n64, usize::try_from(count % n64).unwrap_or(0));
    let first = deck(n, seed, round)[at];
    let mut rest: Vec<usize> = (0..n).filter(|&i| i != first).collect();
    Rng::new(draw).shuffle(&mut rest);
    rest.insert(0, first);
    rest
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decks_change_between_rounds() {
        let rounds: Vec<Vec<usize>> = (0..6).map(|r| deck(6, 99, r)).collect();
        assert!(rounds.windows(2).any(|w| w[0] != w[1]), "{rounds:?}");
        assert!(order(0, 3, 1, 2).is_empty());
        assert_eq!(order(1, 3, 1, 2), [0]);
    }

    proptest! {
        /// Each round of `n` requests deals every candidate first exactly once.
        #[test]
        fn each_candidate_goes_first_once_per_round(n in 1usize..10, seed in any::<u64>(), round in 0u64..1_000_000, draws in any::<u64>()) {
            let n64 = n as u64;
            let mut firsts: Vec<usize> = (0..n64)
                .map(|i| order(n, round * n64 + i, seed, draws ^ i)[0])
                .collect();
            firsts.sort_unstable();
            prop_assert_eq!(firsts, (0..n).collect::<Vec<_>>());
        }

        #[test]
        fn every_order_is_a_permutation(n in 0usize..12, count in any::<u64>(), seed in any::<u64>(), draw in any::<u64>()) {
            let mut o = order(n, count, seed, draw);
            o.sort_unstable();
            prop_assert_eq!(o, (0..n).collect::<Vec<_>>());
        }
    }
}
