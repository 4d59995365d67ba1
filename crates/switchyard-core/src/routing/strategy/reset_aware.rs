//! `reset-aware`: a score per account over its provider's 5-hour and weekly readings,
//! highest first — the seed's formula (OmniRoute `quotaScoring.ts`):
//!
//! - per window, with `rem` the fraction left and `urgency = 1 − ms_to_reset / window`
//!   (0.5 when the reset is not announced): `rw·rem + pw·urgency·(1 − rem)`, with
//!   `(rw, pw)` = (0.45, 0.55) for the 5-hour window and (0.25, 0.75) for the weekly one:
//!   quota left counts, and so does quota about to be refilled anyway;
//! - the account's score is `0.35·S_5h + 0.65·S_weekly`; a window without a reading
//!   counts as unused (`rem` 1);
//! - under 10 % left in the 5-hour window multiplies it by `max(0.05, rem / 0.1)`;
//! - an account with a window used up goes last.
//!
//! Scores within 5 % of the best of their group count as equal and take turns with the
//! request's rotation. Reads the views' readings and the rotation.

use super::{Needs, RoutingCtx, Strategy};
use crate::routing::view::{CandidateView, Reading};

pub const FIVE_HOURS_MS: u64 = 5 * 3_600_000;
pub const WEEK_MS: u64 = 7 * 24 * 3_600_000;
/// Scores this close (relative to the higher) count as equal.
pub const TIE: f64 = 0.05;

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResetAware;

impl Strategy for ResetAware {
    fn name(&self) -> &'static str {
        "reset-aware"
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

/// One window's score.
fn window_score(r: Option<Reading>, length_ms: u64, (rw, pw): (f64, f64)) -> f64 {
    let rem = r.map_or(1.0, |r| 1.0 - r.used.clamp(0.0, 1.0));
    #[expect(clippy::cast_precision_loss, reason = "a ratio of milliseconds")]
    let urgency = r.and_then(|r| r.reset_in_ms).map_or(0.5, |ms| {
        1.0 - (ms as f64 / length_ms as f64).clamp(0.0, 1.0)
    });
    rw * rem + pw * urgency * (1.0 - rem)
}

/// The account's score; `None` when a window is used up.
pub fn score(v: &CandidateView) -> Option<f64> {
    let q = &v.quota;
    let spent = |r: Option<Reading>| r.is_some_and(|r| r.used >= 1.0);
    if spent(q.five_hours) || spent(q.weekly) {
        return None;
    }
    let short = window_score(q.five_hours, FIVE_HOURS_MS, (0.45, 0.55));
    let long = window_score(q.weekly, WEEK_MS, (0.25, 0.75));
    let mut s = 0.35 * short + 0.65 * long;
    let rem_5h = q.five_hours.map_or(1.0, |r| 1.0 - r.used.clamp(0.0, 1.0));
    if rem_5h < 0.1 {
        s *= (rem_5h / 0.1).max(0.05);
    }
    Some(s)
}

fn order(views: &[CandidateView], rotation: usize) -> Vec<usize> {
    let scores: Vec<Option<f64>> = views.iter().map(score).collect();
    let mut out: Vec<usize> = (0..views.len()).collect();
    out.sort_by(|&a, &b| match (scores[a], scores[b]) {
        (Some(x), Some(y)) => y.total_cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    // Rotate each run of near-equal scores.
    let mut start = 0;
    while start < out.len() {
        let Some(top) = scores[out[start]] else {
            break;
        };
        let end = (start..out.len())
            .find(|&j| scores[out[j]].is_none_or(|s| s < top * (1.0 - TIE)))
            .unwrap_or(out.len());
        let run = &mut out[start..end];
        let len = run.len();
        run.rotate_left(rotation % len);
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::view::QuotaWindows;
    use proptest::prelude::*;

    fn acct(five: Option<(f64, Option<u64>)>, week: Option<(f64, Option<u64>)>) -> CandidateView {
        let r = |x: Option<(f64, Option<u64>)>| {
            x.map(|(used, reset_in_ms)| Reading { used, reset_in_ms })
        };
        CandidateView {
            quota: QuotaWindows {
                five_hours: r(five),
                weekly: r(week),
                used_max: None,
            },
            ..CandidateView::default()
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn the_formula_on_its_vectors() {
        // Nothing read: 0.35·0.45 + 0.65·0.25.
        assert!(close(score(&acct(None, None)).unwrap(), 0.32));
        // Half used in both, resets unannounced (urgency 0.5):
        // 5h 0.45·0.5 + 0.55·0.5·0.5 = 0.3625; weekly 0.25·0.5 + 0.75·0.5·0.5 = 0.3125.
        let half = score(&acct(Some((0.5, None)), Some((0.5, None)))).unwrap();
        assert!(close(half, 0.35 * 0.3625 + 0.65 * 0.3125), "{half}");
        // Weekly 80 % used, resetting in a day (urgency 6/7): it is worth using now.
        let day = score(&acct(None, Some((0.8, Some(24 * 3_600_000))))).unwrap();
        let weekly = 0.25 * 0.2 + 0.75 * (6.0 / 7.0) * 0.8;
        assert!(close(day, 0.35 * 0.45 + 0.65 * weekly), "{day}");
        // 95 % of the 5-hour window used: the score is halved (rem 0.05 / 0.1).
        let low = score(&acct(Some((0.95, Some(FIVE_HOURS_MS))), None)).unwrap();
        let short = 0.45 * 0.05 + 0.55 * 0.0 * 0.95;
        assert!(close(low, (0.35 * short + 0.65 * 0.25) * 0.5), "{low}");
        // 100 %: no score, last.
        assert_eq!(score(&acct(Some((1.0, None)), None)), None);
        assert_eq!(score(&acct(None, Some((1.2, None)))), None);
    }

    #[test]
    fn the_highest_first_spent_last_near_ties_rotate() {
        let views = [
            acct(Some((1.0, None)), None),
            acct(None, Some((0.8, Some(24 * 3_600_000)))),
            acct(Some((0.5, None)), Some((0.5, None))),
            acct(Some((0.5, None)), Some((0.5, None))),
        ];
        assert_eq!(order(&views, 0), [1, 2, 3, 0]);
        let ties = [
            acct(None, None),
            acct(None, None),
            acct(Some((0.97, None)), None),
        ];
        assert_eq!(order(&ties, 0), [0, 1, 2]);
        assert_eq!(order(&ties, 1), [1, 0, 2]);
    }

    fn reading() -> impl proptest::strategy::Strategy<Value = Option<(f64, Option<u64>)>> {
        prop::option::of((0.0f64..1.3, prop::option::of(0u64..WEEK_MS * 2)))
    }

    proptest! {
        #[test]
        fn every_order_is_a_permutation_with_spent_accounts_last(
            accts in prop::collection::vec((reading(), reading()), 0..10), rotation in any::<usize>()
        ) {
            let views: Vec<CandidateView> = accts.iter().map(|&(f, w)| acct(f, w)).collect();
            let o = order(&views, rotation);
            let mut sorted = o.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..views.len()).collect::<Vec<_>>());
            let live = o.iter().take_while(|&&i| score(&views[i]).is_some()).count();
            prop_assert!(o[live..].iter().all(|&i| score(&views[i]).is_none()));
            for &i in &o[..live] {
                let s = score(&views[i]).unwrap();
                prop_assert!((0.0..=1.0).contains(&s), "{s}");
            }
        }
    }
}
