//! `p2c` (power of two choices): two candidates are drawn at random and the better of
//! the two goes first, the other second; the rest follow best first. "Better" is the
//! higher score `success + 1 / log10(ms + 10)`, over the connection × model's mean
//! success (0 to 1) and mean time to response headers for a request of this kind
//! (streams: time to first byte); a candidate with no time yet is scored at the mean of
//! the others' (0 ms when none has one), so new accounts are tried without being
//! favoured. Two samples, not the best of all, so every request does not herd onto the
//! one account that looked best a moment ago. Reads the views' service stats and the
//! draw.

use super::draw::Rng;
use super::{Needs, RoutingCtx, Strategy};
use crate::routing::view::CandidateView;

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct P2c;

impl Strategy for P2c {
    fn name(&self) -> &'static str {
        "p2c"
    }

    fn needs(&self) -> Needs {
        Needs {
            stats: true,
            draw: true,
            ..Needs::NONE
        }
    }

    fn order(&self, ctx: &RoutingCtx<'_>) -> Vec<usize> {
        order(ctx.views, ctx.draw)
    }
}

/// Each candidate's score.
fn scores(views: &[CandidateView]) -> Vec<f64> {
    let known: Vec<f64> = views.iter().filter_map(|v| v.header_ms).collect();
    #[expect(clippy::cast_precision_loss, reason = "a count of candidates")]
    let neutral = if known.is_empty() {
        0.0
    } else {
        known.iter().sum::<f64>() / known.len() as f64
    };
    views
        .iter()
        .map(|v| {
            let ms = v.header_ms.unwrap_or(neutral).max(0.0);
            v.success + 1.0 / (ms + 10.0).log10()
        })
        .collect()
}

fn order(views: &[CandidateView], draw: u64) -> Vec<usize> {
    let n = views.len();
    let score = scores(views);
    let mut rest: Vec<usize> = (0..n).collect();
    rest.sort_by(|&a, &b| score[b].total_cmp(&score[a]));
    if n < 2 {
        return rest;
    }
    let mut rng = Rng::new(draw);
    let a = rng.index(n);
    let b = (a + 1 + rng.index(n - 1)) % n;
    let (first, second) = if score[b] > score[a] { (b, a) } else { (a, b) };
    rest.retain(|&i| i != first && i != second);
    let mut out = Vec::with_capacity(n);
    out.push(first);
    out.push(second);
    out.extend(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v(success: f64, header_ms: Option<f64>) -> CandidateView {
        CandidateView {
            success,
            header_ms,
            ..CandidateView::default()
        }
    }

    #[test]
    fn success_and_speed_both_count() {
        let s = scores(&[v(1.0, Some(90.0)), v(1.0, Some(990.0)), v(0.5, Some(90.0))]);
        assert!((s[0] - 1.5).abs() < 1e-12, "{s:?}");
        assert!((s[1] - (1.0 + 1.0 / 3.0)).abs() < 1e-12, "{s:?}");
        assert!((s[2] - 1.0).abs() < 1e-12, "{s:?}");
        // Unknown times are scored at the mean of the known ones.
        let s = scores(&[v(1.0, None), v(1.0, Some(40.0)), v(1.0, Some(140.0))]);
        assert!((s[0] - s[1]).abs() > 0.0 && (s[0] - (1.0 + 1.0 / 100f64.log10())).abs() < 1e-12);
        // Two candidates: the better always first, whatever the draw.
        let two = [v(0.2, Some(50.0)), v(0.9, Some(50.0))];
        for draw in 0..100 {
            assert_eq!(order(&two, draw), [1, 0]);
        }
        assert_eq!(order(&[v(1.0, None)], 5), [0]);
        assert!(order(&[], 5).is_empty());
    }

    #[test]
    fn every_candidate_gets_sampled_over_time() {
        let views = [v(1.0, Some(10.0)), v(0.99, Some(10.0)), v(0.98, Some(10.0))];
        let mut firsts = [0u32; 3];
        for draw in 0..3_000 {
            firsts[order(&views, super::super::draw::Rng::new(draw).next_u64())[0]] += 1;
        }
        // The worst is never first (it loses every pair it is in); the best wins the
        // two pairs it is in of three.
        assert_eq!(firsts[2], 0, "{firsts:?}");
        assert!((1_800..=2_200).contains(&firsts[0]), "{firsts:?}");
    }

    fn view() -> impl proptest::strategy::Strategy<Value = CandidateView> {
        use proptest::strategy::Strategy as _;
        (0.0f64..=1.0, prop::option::of(0.0f64..60_000.0)).prop_map(|(s, ms)| v(s, ms))
    }

    proptest! {
        #[test]
        fn it_never_takes_the_worse_of_its_two(views in prop::collection::vec(view(), 0..10), draw in any::<u64>()) {
            let o = order(&views, draw);
            let mut sorted = o.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..views.len()).collect::<Vec<_>>());
            if views.len() >= 2 {
                let s = scores(&views);
                prop_assert!(s[o[0]] >= s[o[1]]);
            }
        }
    }
}
