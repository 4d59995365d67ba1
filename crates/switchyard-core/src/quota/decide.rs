//! The fair-share decision (SPEC Q2): one pure function over numbers.
//!
//! For each dimension of a pool the caller supplies the limit, the key's and the pool's
//! rolling consumption, the estimated cost of the request and any provider saturation
//! signal. The request must *fit*: it is judged on `consumed + cost`, not on whether the
//! key is still below a line before it starts.
//!
//! Per dimension, in this order:
//! 1. the absolute cap (if the key's allocation has one in this dimension's unit) blocks
//!    whenever `consumed >= cap` or `consumed + cost > cap`, in every mode and policy;
//! 2. the global limit is a hard ceiling: `total + cost > limit` blocks (so does a
//!    provider signal saying the pool is used up);
//! 3. the mode is strict once the pool's used fraction reaches the saturation threshold,
//!    lenient before. Lenient: a key may borrow up to `limit - consumedByOthers`, which
//!    is exactly the ceiling of step 2. Strict: `hard` blocks when `consumed + cost`
//!    exceeds the key's fair share; `soft` is only deprioritized; `burst` may use any
//!    global headroom left.
//!
//! A limit of 0 means "unknown" (a plan that does not publish the number): steps 2 and 3
//! are skipped for that dimension; an explicit cap still applies. The request is blocked
//! if any dimension blocks, deprioritized if any dimension deprioritizes it.

use super::pool::PerDimension;
use serde::{Deserialize, Serialize};

/// What a dimension counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// Share of a subscription's allowance, as providers report it (0–100).
    Percent,
    Requests,
    Tokens,
    Usd,
}

impl Unit {
    pub const ALL: [Self; 4] = [Self::Percent, Self::Requests, Self::Tokens, Self::Usd];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Percent => "percent",
            Self::Requests => "requests",
            Self::Tokens => "tokens",
            Self::Usd => "usd",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|u| u.as_str() == s)
    }
}

/// How a key's allocation behaves once the pool is saturated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Blocked beyond the fair share.
    Hard,
    /// Never blocked by the fair share, only deprioritized.
    Soft,
    /// May use whatever global headroom remains.
    Burst,
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hard => "hard",
            Self::Soft => "soft",
            Self::Burst => "burst",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Hard, Self::Soft, Self::Burst]
            .into_iter()
            .find(|p| p.as_str() == s)
    }
}

/// Lenient while the pool has room to spare, strict once it is saturated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Lenient,
    Strict,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lenient => "lenient",
            Self::Strict => "strict",
        }
    }
}

/// The rule that blocked a dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockReason {
    /// The key's absolute cap.
    Cap,
    /// The pool's global limit.
    GlobalLimit,
    /// The key's fair share (hard policy, strict mode).
    FairShare,
}

impl BlockReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cap => "cap",
            Self::GlobalLimit => "global_limit",
            Self::FairShare => "fair_share",
        }
    }
}

/// One dimension's numbers at decision time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DimensionInput {
    /// The pool's limit (already multiplied by its connection count); 0 = unknown.
    pub limit: f64,
    /// The key's rolling consumption.
    pub consumed: f64,
    /// Every key's rolling consumption together.
    pub total: f64,
    /// Used fraction (0–1) a provider reported recently, if any.
    pub signal: Option<f64>,
    /// The request's estimated cost in this dimension's unit.
    pub cost: f64,
    /// The key's absolute cap, if it has one in this dimension's unit.
    pub cap: Option<f64>,
}

/// The key's allocation, reduced to what the decision needs.
impl DimensionInput {
    /// The input as a stream's next increment is judged: a dimension the increment does
    /// not charge (requests, percent) was decided when the request was admitted and is
    /// not judged again, so a stream is never cut by a request count others raised
    /// since; one it does charge is judged exactly as at admission.
    pub fn for_growth(self) -> Self {
        if self.cost == 0.0 {
            Self {
                limit: 0.0,
                cap: None,
                ..self
            }
        } else {
            self
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    /// Percent of each limit that is the key's fair share.
    pub weight: f64,
    pub policy: Policy,
}

/// One dimension's verdict, with the numbers that explain it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DimensionVerdict {
    pub mode: Mode,
    pub fair_share: f64,
    /// The pool's used fraction the mode was chosen on (consumption or signal).
    pub used_fraction: f64,
    pub blocked: Option<BlockReason>,
    pub deprioritized: bool,
    /// Admitted beyond the fair share on borrowed headroom.
    pub borrowing: bool,
    /// The value the blocking counter (the key's for a cap or fair share, the pool's for
    /// the global limit) must fall to before this request would fit.
    pub fits_at: Option<f64>,
}

/// The verdict over every dimension.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub dimensions: PerDimension<DimensionVerdict>,
    /// The first dimension that blocks, if any.
    pub blocked_by: Option<usize>,
    pub deprioritized: bool,
}

impl Decision {
    pub fn admitted(&self) -> bool {
        self.blocked_by.is_none()
    }
}

/// `limit * weight / 100`, rounded to nine decimals so that an equal split of 30 three
/// ways is 10, not 10.000000000000002 (no unit is metered finer than that).
pub fn fair_share(limit: f64, weight: f64) -> f64 {
    (limit * weight / 100.0 * 1e9).round() / 1e9
}

/// `x` has reached `bound`, or `x + cost` would pass it.
fn overflows(x: f64, cost: f64, bound: f64) -> bool {
    x >= bound || x + cost > bound
}

/// Judges one dimension.
pub fn judge(d: &DimensionInput, share: Share, saturation_threshold: f64) -> DimensionVerdict {
    let known = d.limit > 0.0;
    let signal = d.signal.unwrap_or(0.0).clamp(0.0, 1.0);
    // The pool is as used as the larger of what we counted and what the provider says.
    let total = if known {
        d.total.max(signal * d.limit)
    } else {
        d.total
    };
    let used_fraction = if known {
        (total / d.limit).max(signal)
    } else {
        signal
    };
    let fair_share = if known {
        fair_share(d.limit, share.weight)
    } else {
        0.0
    };
    let mode = if known && used_fraction >= saturation_threshold {
        Mode::Strict
    } else {
        Mode::Lenient
    };
    let mut v = DimensionVerdict {
        mode,
        fair_share,
        used_fraction,
        blocked: None,
        deprioritized: false,
        borrowing: false,
        fits_at: None,
    };
    if let Some(cap) = d.cap {
        if overflows(d.consumed, d.cost, cap) {
            v.blocked = Some(BlockReason::Cap);
            v.fits_at = Some(cap - d.cost);
            return v;
        }
    }
    if !known {
        return v;
    }
    if overflows(total, d.cost, d.limit) {
        v.blocked = Some(BlockReason::GlobalLimit);
        v.fits_at = Some(d.limit - d.cost);
        return v;
    }
    let over_share = d.consumed + d.cost > fair_share;
    match (mode, share.policy) {
        (Mode::Strict, Policy::Hard) if over_share => {
            v.blocked = Some(BlockReason::FairShare);
            v.fits_at = Some(fair_share - d.cost);
        }
        (Mode::Strict, Policy::Soft) if over_share => v.deprioritized = true,
        _ => v.borrowing = over_share,
    }
    v
}

/// Judges every dimension; the request is blocked if any dimension blocks.
pub fn decide(dims: &[DimensionInput], share: Share, saturation_threshold: f64) -> Decision {
    let dimensions: PerDimension<DimensionVerdict> = dims
        .iter()
        .map(|d| judge(d, share, saturation_threshold))
        .collect();
    let blocked_by = dimensions.iter().position(|v| v.blocked.is_some());
    let deprioritized = blocked_by.is_none() && dimensions.iter().any(|v| v.deprioritized);
    Decision {
        dimensions,
        blocked_by,
        deprioritized,
    }
}

/// The fair-share weights of a pool's keys: as configured, or an equal split when every
/// weight is 0 (SPEC Q2).
pub fn effective_weights(weights: &[f64]) -> Vec<f64> {
    if !weights.is_empty() && weights.iter().all(|w| *w == 0.0) {
        let equal = 100.0 / weights.len() as f64;
        return vec![equal; weights.len()];
    }
    weights.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const THRESHOLD: f64 = 0.5;

    fn dim(limit: f64, consumed: f64, total: f64, cost: f64) -> DimensionInput {
        DimensionInput {
            limit,
            consumed,
            total,
            signal: None,
            cost,
            cap: None,
        }
    }

    fn share(weight: f64, policy: Policy) -> Share {
        Share { weight, policy }
    }

    /// (case, input, share, expected block, deprioritized, borrowing, mode)
    type Case = (
        &'static str,
        DimensionInput,
        Share,
        Option<BlockReason>,
        bool,
        bool,
        Mode,
    );

    #[test]
    fn table_of_single_dimension_verdicts() {
        let hard = share(25.0, Policy::Hard);
        let soft = share(25.0, Policy::Soft);
        let burst = share(25.0, Policy::Burst);
        let cases: Vec<Case> = vec![
            (
                "lenient: within the fair share",
                dim(100.0, 10.0, 20.0, 1.0),
                hard,
                None,
                false,
                false,
                Mode::Lenient,
            ),
            (
                "lenient: borrowing beyond the share while under the threshold",
                dim(100.0, 40.0, 45.0, 1.0),
                hard,
                None,
                false,
                true,
                Mode::Lenient,
            ),
            (
                "lenient: borrowing up to limit - consumedByOthers exactly",
                // A pool at 49 % is lenient; the key may take all the rest.
                dim(100.0, 44.0, 49.0, 51.0),
                hard,
                None,
                false,
                true,
                Mode::Lenient,
            ),
            (
                "lenient: one more than the headroom is the global ceiling",
                dim(100.0, 44.0, 49.0, 52.0),
                hard,
                Some(BlockReason::GlobalLimit),
                false,
                false,
                Mode::Lenient,
            ),
            (
                "strict at exactly the threshold: hard over its share is blocked",
                dim(100.0, 25.0, 50.0, 1.0),
                hard,
                Some(BlockReason::FairShare),
                false,
                false,
                Mode::Strict,
            ),
            (
                "strict: hard request that fits its share exactly is admitted",
                dim(100.0, 24.0, 60.0, 1.0),
                hard,
                None,
                false,
                false,
                Mode::Strict,
            ),
            (
                "strict: hard key below its share but the request does not fit",
                dim(100.0, 20.0, 60.0, 6.0),
                hard,
                Some(BlockReason::FairShare),
                false,
                false,
                Mode::Strict,
            ),
            (
                "strict: soft over its share is deprioritized, not blocked",
                dim(100.0, 40.0, 60.0, 1.0),
                soft,
                None,
                true,
                false,
                Mode::Strict,
            ),
            (
                "strict: soft within its share is not penalized",
                dim(100.0, 10.0, 60.0, 1.0),
                soft,
                None,
                false,
                false,
                Mode::Strict,
            ),
            (
                "strict: soft still stops at the global ceiling",
                dim(100.0, 40.0, 100.0, 1.0),
                soft,
                Some(BlockReason::GlobalLimit),
                false,
                false,
                Mode::Strict,
            ),
            (
                "strict: burst uses remaining global headroom",
                dim(100.0, 60.0, 90.0, 10.0),
                burst,
                None,
                false,
                true,
                Mode::Strict,
            ),
            (
                "strict: burst without headroom is blocked by the ceiling",
                dim(100.0, 60.0, 95.0, 10.0),
                burst,
                Some(BlockReason::GlobalLimit),
                false,
                false,
                Mode::Strict,
            ),
            (
                "zero limit is unknown: nothing enforced",
                dim(0.0, 1e9, 1e9, 1.0),
                hard,
                None,
                false,
                false,
                Mode::Lenient,
            ),
            (
                "a zero-cost request at the ceiling is still blocked",
                dim(100.0, 10.0, 100.0, 0.0),
                burst,
                Some(BlockReason::GlobalLimit),
                false,
                false,
                Mode::Strict,
            ),
        ];
        for (name, input, sh, block, depri, borrow, mode) in cases {
            let v = judge(&input, sh, THRESHOLD);
            assert_eq!(v.blocked, block, "{name}");
            assert_eq!(v.deprioritized, depri, "{name}");
            assert_eq!(v.borrowing, borrow, "{name}");
            assert_eq!(v.mode, mode, "{name}");
        }
    }

    #[test]
    fn the_cap_blocks_in_every_mode_and_policy() {
        for policy in [Policy::Hard, Policy::Soft, Policy::Burst] {
            for total in [5.0, 90.0] {
                let mut d = dim(100.0, 5.0, total, 1.0);
                d.cap = Some(5.0);
                let v = judge(&d, share(50.0, policy), THRESHOLD);
                assert_eq!(v.blocked, Some(BlockReason::Cap), "{policy:?} {total}");
                assert_eq!(v.fits_at, Some(4.0));
                // Under the cap with room for the request: admitted.
                d.consumed = 3.0;
                assert_eq!(judge(&d, share(50.0, policy), THRESHOLD).blocked, None);
                // Under the cap, but the request would pass it.
                d.cost = 3.0;
                assert_eq!(
                    judge(&d, share(50.0, policy), THRESHOLD).blocked,
                    Some(BlockReason::Cap)
                );
            }
        }
    }

    #[test]
    fn the_cap_applies_even_when_the_limit_is_unknown() {
        let mut d = dim(0.0, 10.0, 10.0, 1.0);
        d.cap = Some(10.0);
        assert_eq!(
            judge(&d, share(50.0, Policy::Burst), THRESHOLD).blocked,
            Some(BlockReason::Cap)
        );
    }

    #[test]
    fn a_provider_signal_raises_the_used_fraction_and_the_ceiling() {
        // Counted use is 10 %, but the provider says 70 %: strict mode.
        let mut d = dim(100.0, 20.0, 10.0, 1.0);
        d.signal = Some(0.7);
        let v = judge(&d, share(20.0, Policy::Hard), THRESHOLD);
        assert_eq!(v.mode, Mode::Strict);
        assert_eq!(v.used_fraction, 0.7);
        assert_eq!(v.blocked, Some(BlockReason::FairShare));
        // The provider says the allowance is used up: the ceiling blocks everyone.
        d.signal = Some(1.0);
        let v = judge(&d, share(20.0, Policy::Burst), THRESHOLD);
        assert_eq!(v.blocked, Some(BlockReason::GlobalLimit));
        // A lower signal than counted use changes nothing.
        let mut d = dim(100.0, 20.0, 60.0, 1.0);
        d.signal = Some(0.1);
        assert_eq!(
            judge(&d, share(20.0, Policy::Hard), THRESHOLD).used_fraction,
            0.6
        );
    }

    #[test]
    fn dimensions_are_independent_and_any_block_blocks() {
        let weekly_full = dim(100.0, 30.0, 100.0, 0.0);
        let five_hour_free = dim(100.0, 0.0, 0.0, 0.0);
        let d = decide(
            &[five_hour_free, weekly_full],
            share(50.0, Policy::Hard),
            THRESHOLD,
        );
        assert_eq!(d.blocked_by, Some(1));
        assert_eq!(d.dimensions[0].blocked, None);
        assert!(!d.admitted());
        let d = decide(&[five_hour_free], share(50.0, Policy::Hard), THRESHOLD);
        assert!(d.admitted());
    }

    #[test]
    fn deprioritized_only_when_admitted() {
        let soft_over = dim(100.0, 40.0, 60.0, 1.0);
        let blocked = dim(10.0, 10.0, 10.0, 1.0);
        let sh = share(25.0, Policy::Soft);
        assert!(decide(&[soft_over], sh, THRESHOLD).deprioritized);
        let d = decide(&[soft_over, blocked], sh, THRESHOLD);
        assert!(!d.deprioritized);
        assert_eq!(d.blocked_by, Some(1));
    }

    #[test]
    fn weights_all_zero_split_equally_and_others_are_kept() {
        assert_eq!(effective_weights(&[0.0, 0.0, 0.0, 0.0]), vec![25.0; 4]);
        // Weights that do not sum to 100 are used as given: the ceiling still holds.
        assert_eq!(effective_weights(&[30.0, 30.0]), vec![30.0, 30.0]);
        assert_eq!(effective_weights(&[80.0, 0.0]), vec![80.0, 0.0]);
        assert!(effective_weights(&[]).is_empty());
    }

    #[test]
    fn weights_summing_over_100_are_still_held_by_the_ceiling() {
        // Two keys at 80 % each of 100: in strict mode both fit their share, but the
        // pool can never go past 100.
        let v = judge(
            &dim(100.0, 70.0, 95.0, 10.0),
            share(80.0, Policy::Hard),
            0.5,
        );
        assert_eq!(v.blocked, Some(BlockReason::GlobalLimit));
        assert_eq!(v.fits_at, Some(90.0));
    }

    #[test]
    fn fits_at_names_the_value_the_counter_must_fall_to() {
        let v = judge(&dim(100.0, 30.0, 60.0, 2.0), share(25.0, Policy::Hard), 0.5);
        assert_eq!(v.blocked, Some(BlockReason::FairShare));
        assert_eq!(v.fits_at, Some(23.0));
    }

    #[test]
    fn fair_shares_have_no_float_noise() {
        assert_eq!(fair_share(30.0, 100.0 / 3.0), 10.0);
        assert_eq!(fair_share(100.0, 12.5), 12.5);
        assert_eq!(fair_share(0.3, 50.0), 0.15);
    }

    #[test]
    fn policies_parse_by_name_and_unknown_names_do_not() {
        for p in [Policy::Hard, Policy::Soft, Policy::Burst] {
            assert_eq!(Policy::parse(p.as_str()), Some(p));
        }
        assert_eq!(Policy::parse("greedy"), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Admissions in strict mode never take the pool past its limit.
        #[test]
        fn admitted_requests_never_pass_the_global_limit(
            limit in 1u32..1000,
            consumed in 0u32..1000,
            others in 0u32..1000,
            cost in 0u32..100,
            weight in 0u32..=100,
            policy in prop_oneof![Just(Policy::Hard), Just(Policy::Soft), Just(Policy::Burst)],
            threshold in 0u32..=100,
        ) {
            let total = f64::from(consumed) + f64::from(others);
            let d = dim(f64::from(limit), f64::from(consumed), total, f64::from(cost));
            let v = judge(&d, share(f64::from(weight), policy), f64::from(threshold) / 100.0);
            if v.blocked.is_none() {
                prop_assert!(total + f64::from(cost) <= f64::from(limit));
            }
        }

        /// Once strict, a key whose request fits its fair share is never blocked by what
        /// other keys consumed, as long as the pool itself has room for the request.
        #[test]
        fn a_key_within_its_share_is_not_blocked_by_others_once_strict(
            limit in 100u32..1000,
            weight in 1u32..=50,
            frac in 0u32..=100,
            cost in 0u32..10,
            policy in prop_oneof![Just(Policy::Hard), Just(Policy::Soft), Just(Policy::Burst)],
        ) {
            let limit = f64::from(limit);
            let fair = limit * f64::from(weight) / 100.0;
            let consumed = (fair - f64::from(cost)).max(0.0) * f64::from(frac) / 100.0;
            // Other keys have pushed the pool to strict mode but left room for this one.
            let total = (limit * 0.6).max(consumed);
            let d = dim(limit, consumed, total, f64::from(cost));
            prop_assume!(consumed + f64::from(cost) <= fair);
            prop_assume!(total + f64::from(cost) <= limit && total < limit);
            let v = judge(&d, share(f64::from(weight), policy), 0.5);
            prop_assert_eq!(v.mode, Mode::Strict);
            prop_assert_eq!(v.blocked, None);
            prop_assert!(!v.deprioritized);
        }

        /// Soft keys are never blocked by the fair share, only by cap or ceiling.
        #[test]
        fn soft_is_never_blocked_by_the_fair_share(
            limit in 1u32..1000, consumed in 0u32..1000, others in 0u32..1000, cost in 0u32..100,
        ) {
            let total = f64::from(consumed) + f64::from(others);
            let d = dim(f64::from(limit), f64::from(consumed), total, f64::from(cost));
            let v = judge(&d, share(10.0, Policy::Soft), 0.5);
            prop_assert_ne!(v.blocked, Some(BlockReason::FairShare));
        }
    }
}
