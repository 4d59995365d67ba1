//! What a request costs in each unit: estimated before the call, actual after it.
//!
//! Before the call only the prompt is known. Its token count is estimated as one token
//! per four bytes of the `messages` JSON (the usual rule of thumb for English text; the
//! JSON punctuation makes it an overestimate, which errs on the safe side), and the
//! completion as the client's `max_tokens`, or [`DEFAULT_COMPLETION_TOKENS`] when the
//! client set none. After the call the upstream's usage replaces the estimate.
//!
//! Arithmetic only: it is given the prompt's size, `max_tokens` and the upstream's usage,
//! never the body itself, and it reserves nothing (that is the ledger's).

use super::decide::Unit;
use crate::usage::Usage;

/// Completion tokens assumed when the client sets no `max_tokens`: a long chat answer.
/// Reserving too little would let parallel requests overshoot a window; a stream that
/// runs longer grows its reservation as it goes.
pub const DEFAULT_COMPLETION_TOKENS: u64 = 1_024;

/// Completion tokens a stream books at a time: up front when the client set no
/// `max_tokens`, then each time its text passes what is booked. Every step is reserved
/// through the same decision as admission, so a stream never overshoots a pool by more
/// than one step, and short streams do not hold a long answer's worth of quota while
/// they run (with 1 024 up front, a 5 000-token pool admitted four concurrent streams,
/// however short). A non-streamed answer cannot be cut, so it keeps the long default.
pub const STREAM_STEP_TOKENS: u64 = 256;

/// Bytes of prompt JSON per estimated token.
const BYTES_PER_TOKEN: u64 = 4;

/// A price in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

impl Price {
    pub fn of(&self, prompt_tokens: u64, completion_tokens: u64) -> f64 {
        (prompt_tokens as f64 * self.input_per_mtok
            + completion_tokens as f64 * self.output_per_mtok)
            / 1e6
    }
}

/// Whether a request can be metered in `units` at `price`: a `usd` dimension needs the
/// model's price (without one it would meter $0, and a budget would never be enforced).
pub fn priced_enough(units: impl IntoIterator<Item = Unit>, price: Option<Price>) -> bool {
    price.is_some() || !units.into_iter().any(|u| u == Unit::Usd)
}

/// The token estimate of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl Estimate {
    pub fn new(messages_bytes: usize, max_tokens: Option<u64>) -> Self {
        Self {
            prompt_tokens: u64::try_from(messages_bytes)
                .unwrap_or(u64::MAX)
                .div_ceil(BYTES_PER_TOKEN),
            completion_tokens: max_tokens.unwrap_or(DEFAULT_COMPLETION_TOKENS),
        }
    }

    /// The estimate a request books at admission: a stream without `max_tokens` books
    /// one [`STREAM_STEP_TOKENS`] step, anything else as [`Estimate::new`].
    pub fn at_admission(messages_bytes: usize, max_tokens: Option<u64>, stream: bool) -> Self {
        let completion = match (max_tokens, stream) {
            (None, true) => Some(STREAM_STEP_TOKENS),
            _ => max_tokens,
        };
        Self::new(messages_bytes, completion)
    }

    /// Prompt plus completion, saturating: a client-supplied `max_tokens` can never wrap
    /// the sum below the prompt.
    pub fn tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }

    /// The estimated cost in `unit`. Percent cannot be known before the provider
    /// reports it, so it is estimated as 0.
    pub fn cost(&self, unit: Unit, price: Option<Price>) -> f64 {
        match unit {
            Unit::Requests => 1.0,
            Unit::Tokens => self.tokens() as f64,
            Unit::Usd => price.map_or(0.0, |p| p.of(self.prompt_tokens, self.completion_tokens)),
            Unit::Percent => 0.0,
        }
    }
}

/// The actual cost in `unit` from the upstream's usage (or, without usage, from the
/// estimate with the completion replaced by what was seen streaming), and for percent
/// the rise in the provider's used percentage during the request.
pub fn actual(
    unit: Unit,
    usage: Option<Usage>,
    fallback: Estimate,
    price: Option<Price>,
    percent_rise: Option<f64>,
) -> f64 {
    let (prompt, completion) = match usage {
        Some(u) => (u.prompt_tokens, u.completion_tokens),
        None => (fallback.prompt_tokens, fallback.completion_tokens),
    };
    match unit {
        Unit::Requests => 1.0,
        Unit::Tokens => prompt.saturating_add(completion) as f64,
        Unit::Usd => price.map_or(0.0, |p| p.of(prompt, completion)),
        Unit::Percent => percent_rise.unwrap_or(0.0).max(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// No request parameter can make an estimate smaller than its prompt, in any unit
        /// that counts tokens.
        #[test]
        fn an_estimate_is_never_below_its_prompt(
            bytes in any::<usize>(),
            max_tokens in proptest::option::of(any::<u64>()),
            input in 0.0f64..1e3,
            output in 0.0f64..1e3,
        ) {
            let e = Estimate::new(bytes, max_tokens);
            prop_assert!(e.tokens() >= e.prompt_tokens);
            prop_assert!(e.tokens() >= e.completion_tokens);
            prop_assert!(e.cost(Unit::Tokens, None) >= e.prompt_tokens as f64);
            let price = Price { input_per_mtok: input, output_per_mtok: output };
            prop_assert!(e.cost(Unit::Usd, Some(price)) >= price.of(e.prompt_tokens, 0));
        }
    }

    #[test]
    fn streams_without_max_tokens_book_one_step_up_front() {
        assert_eq!(
            Estimate::at_admission(40, None, true).completion_tokens,
            STREAM_STEP_TOKENS
        );
        assert_eq!(
            Estimate::at_admission(40, None, false).completion_tokens,
            DEFAULT_COMPLETION_TOKENS
        );
        assert_eq!(
            Estimate::at_admission(40, Some(5000), true).completion_tokens,
            5000
        );
        assert_eq!(
            Estimate::at_admission(40, Some(7), false).completion_tokens,
            7
        );
    }

    #[test]
    fn the_largest_max_tokens_saturates_instead_of_wrapping() {
        let e = Estimate::new(400, Some(u64::MAX));
        assert_eq!(e.tokens(), u64::MAX);
        assert_eq!(e.cost(Unit::Tokens, None), u64::MAX as f64);
        let usage = Usage {
            prompt_tokens: u64::MAX,
            completion_tokens: 5,
        };
        assert_eq!(
            actual(Unit::Tokens, Some(usage), e, None, None),
            u64::MAX as f64
        );
    }

    #[test]
    fn estimates_use_prompt_bytes_and_max_tokens() {
        let e = Estimate::new(401, Some(50));
        assert_eq!(
            e,
            Estimate {
                prompt_tokens: 101,
                completion_tokens: 50
            }
        );
        assert_eq!(
            Estimate::new(8, None).completion_tokens,
            DEFAULT_COMPLETION_TOKENS
        );
        assert_eq!(e.cost(Unit::Requests, None), 1.0);
        assert_eq!(e.cost(Unit::Tokens, None), 151.0);
        assert_eq!(e.cost(Unit::Percent, None), 0.0);
        assert_eq!(e.cost(Unit::Usd, None), 0.0);
        // Which is why a `usd` dimension refuses an unpriced model instead.
        let price = Price {
            input_per_mtok: 1.0,
            output_per_mtok: 1.0,
        };
        assert!(!priced_enough([Unit::Requests, Unit::Usd], None));
        assert!(priced_enough([Unit::Requests, Unit::Usd], Some(price)));
        assert!(priced_enough(
            [Unit::Requests, Unit::Tokens, Unit::Percent],
            None
        ));
        assert!(priced_enough([], None));
        let price = Price {
            input_per_mtok: 2.0,
            output_per_mtok: 10.0,
        };
        assert!((e.cost(Unit::Usd, Some(price)) - (101.0 * 2.0 + 50.0 * 10.0) / 1e6).abs() < 1e-15);
    }

    #[test]
    fn actual_costs_prefer_usage_and_fall_back_to_the_estimate() {
        let e = Estimate {
            prompt_tokens: 10,
            completion_tokens: 7,
        };
        let u = Usage {
            prompt_tokens: 12,
            completion_tokens: 30,
        };
        assert_eq!(actual(Unit::Tokens, Some(u), e, None, None), 42.0);
        assert_eq!(actual(Unit::Tokens, None, e, None, None), 17.0);
        assert_eq!(actual(Unit::Requests, Some(u), e, None, None), 1.0);
        assert_eq!(actual(Unit::Percent, None, e, None, Some(2.5)), 2.5);
        assert_eq!(actual(Unit::Percent, None, e, None, Some(-1.0)), 0.0);
        let price = Price {
            input_per_mtok: 1e6,
            output_per_mtok: 0.0,
        };
        assert_eq!(actual(Unit::Usd, Some(u), e, Some(price), None), 12.0);
    }
}
