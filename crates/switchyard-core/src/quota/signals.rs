//! Provider saturation signals (SPEC Q6): rate-limit headers that say how used an
//! upstream account is, read from every upstream response.
//!
//! - Codex: `x-codex-{primary,secondary}-used-percent` (0–100), `-window-minutes`, and
//!   `-reset-after-seconds` or `-reset-at` (Unix seconds). Primary is the 5-hour window,
//!   secondary the weekly one, unless the window minutes say otherwise.
//! - Anthropic: `anthropic-ratelimit-unified-5h-utilization` and `-7d-utilization`
//!   (fractions; values above 1 are read as percentages), `-unified-reset` (Unix
//!   seconds), and `-unified-status: rejected`, which marks the account used up.
//! - OpenAI style: `x-ratelimit-limit-{requests,tokens}` with
//!   `x-ratelimit-remaining-…` give `1 - remaining/limit`; `x-ratelimit-reset-…` is a
//!   duration such as `6m0s` or `20ms`. These limits are short (per minute), so they
//!   apply to the pool's shortest window of that unit.
//!
//! Parsing only: headers arrive as `(name, value)` pairs with `now` passed in; keeping
//! the readings, and how long they count, is the gateway's.

use super::decide::Unit;
use super::window::Window;
use crate::{http1, UnixMillis};

/// One reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Signal {
    pub unit: Unit,
    /// The window the reading is about; `None` = the shortest window of the unit.
    pub window: Option<Window>,
    /// Used fraction, 0–1.
    pub used: f64,
    /// When the provider says the allowance resets.
    pub reset_at: Option<UnixMillis>,
}

/// Every name read, each once, in lower case; a field is numbered by its place here.
const NAMES: [&str; 18] = [
    "x-codex-primary-used-percent",
    "x-codex-primary-window-minutes",
    "x-codex-primary-reset-after-seconds",
    "x-codex-primary-reset-at",
    "x-codex-secondary-used-percent",
    "x-codex-secondary-window-minutes",
    "x-codex-secondary-reset-after-seconds",
    "x-codex-secondary-reset-at",
    "anthropic-ratelimit-unified-status",
    "anthropic-ratelimit-unified-reset",
    "anthropic-ratelimit-unified-5h-utilization",
    "anthropic-ratelimit-unified-7d-utilization",
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
];

/// Where each family's names are in [`NAMES`].
const CODEX: std::ops::Range<usize> = 0..8;
const ANTHROPIC: std::ops::Range<usize> = 8..12;
const OPENAI: std::ops::Range<usize> = 12..18;

/// Bits of a slot in [`SLOTS`].
const SLOT_BITS: u32 = 7;

/// The multiplier of [`slot`], chosen so that no two of [`NAMES`] share a slot (which
/// building [`SLOTS`] checks, at compile time).
const FOLD: u64 = 0x63ca_828d_d5f4_b3b3;

/// A slot no name has.
const EMPTY: u8 = u8::MAX;

/// Per slot, the place in [`NAMES`] of the name in it.
const SLOTS: [u8; 1 << SLOT_BITS] = {
    let mut slots = [EMPTY; 1 << SLOT_BITS];
    let mut i = 0;
    while i < NAMES.len() {
        let at = slot(NAMES[i].as_bytes());
        assert!(
            slots[at] == EMPTY,
            "two names share a slot: choose another FOLD"
        );
        slots[at] = i as u8;
        i += 1;
    }
    slots
};

/// The slot of a field name of at least eight bytes, the same in any case: its bytes
/// read eight at a time (the last eight overlapping the others), each with bit 5 set
/// (an upper case letter reads as its lower case; the names' other bytes, `-` and
/// digits, have it set already), mixed by multiplication.
#[inline]
const fn slot(name: &[u8]) -> usize {
    let n = name.len();
    let mut h = n as u64;
    let mut at = 0;
    while at + 8 <= n {
        h = (h ^ lowered_word(name, at)).wrapping_mul(FOLD);
        at += 8;
    }
    if !n.is_multiple_of(8) {
        h = (h ^ lowered_word(name, n - 8)).wrapping_mul(FOLD);
    }
    (h >> (64 - SLOT_BITS)) as usize
}

/// The eight bytes of `name` from `at` (zero past its end, which [`slot`] never
/// reads), each with bit 5 set: one load.
#[inline(always)]
const fn lowered_word(name: &[u8], at: usize) -> u64 {
    let word = match name.split_at_checked(at) {
        Some((_, rest)) => match rest.first_chunk::<8>() {
            Some(chunk) => u64::from_le_bytes(*chunk),
            None => 0,
        },
        None => 0,
    };
    word | 0x2020_2020_2020_2020
}

/// The place in [`NAMES`] of the field name `name` (sent in any case): the number a
/// head's reader keeps a saturation field under, so the name is compared once, where
/// the head is read. `None` for any other field. One table look-up and one comparison:
/// every field of a pooled connection's answer is asked.
pub fn place(name: &[u8]) -> Option<u8> {
    if name.len() < 8 {
        return None;
    }
    let at = *SLOTS.get(slot(name))?;
    let known = NAMES.get(usize::from(at))?;
    http1::name_is(name, known.as_bytes()).then_some(at)
}

/// A Codex tier's fields (used percent, window minutes, reset after seconds, reset at),
/// and the window the tier is when its minutes are not sent.
const CODEX_TIERS: [([usize; 4], Window); 2] = [
    ([0, 1, 2, 3], Window::FiveHours),
    ([4, 5, 6, 7], Window::Weekly),
];

const ANTHROPIC_STATUS: usize = 8;
const ANTHROPIC_RESET: usize = 9;

/// Anthropic's utilization field of each window.
const ANTHROPIC_WINDOWS: [(usize, Window); 2] = [(10, Window::FiveHours), (11, Window::Weekly)];

/// OpenAI's fields of each unit: limit, remaining, reset.
const OPENAI_UNITS: [([usize; 3], Unit); 2] =
    [([12, 13, 14], Unit::Requests), ([15, 16, 17], Unit::Tokens)];

/// The trimmed first value of each field of [`NAMES`] a head sent, by place.
struct Sent<'a>([Option<&'a [u8]>; NAMES.len()]);

impl<'a> Sent<'a> {
    /// The fields of `placed` (each with its place in [`NAMES`]), the first value of
    /// each kept.
    fn of(placed: impl IntoIterator<Item = (u8, &'a [u8])>) -> Self {
        let mut sent = [None; NAMES.len()];
        for (place, value) in placed {
            if let Some(slot) = sent.get_mut(usize::from(place)) {
                if slot.is_none() {
                    *slot = Some(value.trim_ascii());
                }
            }
        }
        Self(sent)
    }

    /// The value of the field at `place` in [`NAMES`].
    fn text(&self, place: usize) -> Option<&'a [u8]> {
        self.0.get(place).copied().flatten()
    }

    /// The number the field at `place` holds: not negative, finite. Counts are whole
    /// numbers, read without the float parser (several times the integer one's cost).
    fn num(&self, place: usize) -> Option<f64> {
        let text = self.text(place)?;
        let v = match whole(text) {
            Some(n) => n as f64,
            None => std::str::from_utf8(text).ok()?.parse::<f64>().ok()?,
        };
        (v.is_finite() && v >= 0.0).then_some(v)
    }

    /// Whether any field of `names` was sent.
    fn any(&self, names: std::ops::Range<usize>) -> bool {
        self.0
            .get(names)
            .is_some_and(|v| v.iter().any(Option::is_some))
    }
}

/// A number of only digits, at most 19 of them (below 10^19, so within `u64`).
fn whole(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 19 {
        return None;
    }
    text.iter().try_fold(0_u64, |n, &c| {
        c.is_ascii_digit().then(|| n * 10 + u64::from(c - b'0'))
    })
}

fn secs_to_ms(s: f64) -> UnixMillis {
    (s * 1000.0) as UnixMillis
}

/// Parses a Go-style duration (`1h2m3.5s`, `20ms`, `6m0s`) into milliseconds.
pub fn parse_duration_ms(s: &str) -> Option<u64> {
    let s = s.trim();
    whole_duration_ms(s.as_bytes()).or_else(|| summed_duration_ms(s))
}

/// [`parse_duration_ms`] of a trimmed value as sent.
fn duration_ms_of(value: &[u8]) -> Option<u64> {
    whole_duration_ms(value).or_else(|| summed_duration_ms(std::str::from_utf8(value).ok()?))
}

/// [`parse_duration_ms`] of a trimmed text: the sum of its parts.
fn summed_duration_ms(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut total = 0.0;
    let mut rest = s;
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..end].parse().ok()?;
        rest = &rest[end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_end] {
            "ms" => 1.0,
            "s" | "" => 1_000.0,
            "m" => 60_000.0,
            "h" => 3_600_000.0,
            _ => return None,
        };
        total += value * factor;
        rest = &rest[unit_end..];
    }
    Some(total as u64)
}

/// The form OpenAI sends most (`20ms`, `7s`, `7`: one whole number, in milliseconds or
/// seconds), read without the float parser; `None` for any other. At most 12 digits, so
/// the milliseconds are exact as [`summed_duration_ms`] gives them.
fn whole_duration_ms(s: &[u8]) -> Option<u64> {
    let digits = s.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 || digits > 12 {
        return None;
    }
    let n = whole(&s[..digits])?;
    match &s[digits..] {
        b"ms" => Some(n),
        b"s" | b"" => Some(n * 1000),
        _ => None,
    }
}

fn window_of_minutes(minutes: f64) -> Option<Window> {
    Window::ALL
        .into_iter()
        .find(|w| (w.length_ms() as f64 - minutes * 60_000.0).abs() < 60_000.0)
}

/// Every signal in a response's headers, as `(name, value)` pairs.
pub fn parse<N: AsRef<[u8]>, V: AsRef<[u8]>>(headers: &[(N, V)], now: UnixMillis) -> Vec<Signal> {
    parse_placed(
        headers
            .iter()
            .filter_map(|(name, value)| Some((place(name.as_ref())?, value.as_ref()))),
        now,
    )
}

/// Every signal in a response's saturation fields, each given by its [`place`] and
/// its value.
pub fn parse_placed<'a>(
    placed: impl IntoIterator<Item = (u8, &'a [u8])>,
    now: UnixMillis,
) -> Vec<Signal> {
    let sent = Sent::of(placed);
    let mut out = Vec::new();
    // A provider sends one family of fields: the others are not read.
    if sent.any(CODEX) {
        codex(&sent, now, &mut out);
    }
    if sent.any(ANTHROPIC) {
        anthropic(&sent, &mut out);
    }
    if sent.any(OPENAI) {
        openai(&sent, now, &mut out);
    }
    out
}

fn codex(sent: &Sent<'_>, now: UnixMillis, out: &mut Vec<Signal>) {
    for ([used, minutes, reset_after, reset_at], default_window) in CODEX_TIERS {
        let Some(pct) = sent.num(used) else {
            continue;
        };
        let window = sent
            .num(minutes)
            .and_then(window_of_minutes)
            .unwrap_or(default_window);
        let reset_at = sent
            .num(reset_after)
            .map(|s| now.saturating_add(secs_to_ms(s)))
            .or_else(|| sent.num(reset_at).map(secs_to_ms));
        out.push(Signal {
            unit: Unit::Percent,
            window: Some(window),
            used: (pct / 100.0).min(1.0),
            reset_at,
        });
    }
}

fn anthropic(sent: &Sent<'_>, out: &mut Vec<Signal>) {
    let anthropic_reset = sent.num(ANTHROPIC_RESET).map(secs_to_ms);
    let rejected = sent.text(ANTHROPIC_STATUS) == Some(&b"rejected"[..]);
    for (utilization, window) in ANTHROPIC_WINDOWS {
        let used = match (sent.num(utilization), rejected) {
            (_, true) => 1.0,
            (Some(u), false) if u > 1.0 => (u / 100.0).min(1.0),
            (Some(u), false) => u,
            (None, false) => continue,
        };
        out.push(Signal {
            unit: Unit::Percent,
            window: Some(window),
            used,
            reset_at: anthropic_reset,
        });
    }
}

fn openai(sent: &Sent<'_>, now: UnixMillis, out: &mut Vec<Signal>) {
    for ([limit, remaining, reset], unit) in OPENAI_UNITS {
        let (Some(limit), Some(remaining)) = (sent.num(limit), sent.num(remaining)) else {
            continue;
        };
        if limit <= 0.0 {
            continue;
        }
        let reset_at = sent
            .text(reset)
            .and_then(duration_ms_of)
            .map(|ms| now.saturating_add(ms));
        out.push(Signal {
            unit,
            window: None,
            used: (1.0 - remaining / limit).clamp(0.0, 1.0),
            reset_at,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn whole_durations_read_as_their_sum(
            n in 0u64..1_000_000_000_000,
            unit in prop::sample::select(vec!["ms", "s", ""]),
        ) {
            let text = format!("{n}{unit}");
            prop_assert_eq!(whole_duration_ms(text.as_bytes()), summed_duration_ms(&text));
        }
    }

    const NOW: u64 = 1_800_000_000_000;

    #[test]
    fn codex_headers_give_percent_signals_with_reset_horizons() {
        let h = [
            ("x-codex-primary-used-percent", "62.5"),
            ("x-codex-primary-window-minutes", "300"),
            ("x-codex-primary-reset-after-seconds", "120"),
            ("X-Codex-Secondary-Used-Percent", "10"),
            ("x-codex-secondary-reset-at", "1800000600"),
        ];
        assert_eq!(
            parse(&h, NOW),
            vec![
                Signal {
                    unit: Unit::Percent,
                    window: Some(Window::FiveHours),
                    used: 0.625,
                    reset_at: Some(NOW + 120_000)
                },
                Signal {
                    unit: Unit::Percent,
                    window: Some(Window::Weekly),
                    used: 0.1,
                    reset_at: Some(1_800_000_600_000)
                },
            ]
        );
    }

    #[test]
    fn codex_window_minutes_override_the_tier_default() {
        let h = [
            ("x-codex-primary-used-percent", "5"),
            ("x-codex-primary-window-minutes", "60"),
        ];
        assert_eq!(parse(&h, NOW)[0].window, Some(Window::Hourly));
    }

    #[test]
    fn anthropic_utilization_and_rejection() {
        let h = [
            ("anthropic-ratelimit-unified-5h-utilization", "0.42"),
            ("anthropic-ratelimit-unified-7d-utilization", "85"),
            ("anthropic-ratelimit-unified-reset", "1800000300"),
        ];
        let s = parse(&h, NOW);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].window, s[0].used), (Some(Window::FiveHours), 0.42));
        assert_eq!((s[1].window, s[1].used), (Some(Window::Weekly), 0.85));
        assert_eq!(s[0].reset_at, Some(1_800_000_300_000));
        let h = [
            ("anthropic-ratelimit-unified-status", "rejected"),
            ("anthropic-ratelimit-unified-5h-utilization", "0.2"),
        ];
        assert!(parse(&h, NOW).iter().all(|s| s.used == 1.0));
    }

    #[test]
    fn openai_style_limits_give_used_fractions() {
        let h = [
            ("x-ratelimit-limit-requests", "100"),
            ("x-ratelimit-remaining-requests", "25"),
            ("x-ratelimit-reset-requests", "6m0s"),
            ("x-ratelimit-limit-tokens", "0"),
            ("x-ratelimit-remaining-tokens", "0"),
        ];
        assert_eq!(
            parse(&h, NOW),
            vec![Signal {
                unit: Unit::Requests,
                window: None,
                used: 0.75,
                reset_at: Some(NOW + 360_000)
            }]
        );
    }

    #[test]
    fn every_name_read_is_in_lower_case_and_in_its_family() {
        for name in NAMES {
            assert_eq!(name, name.to_ascii_lowercase());
        }
        let prefixes = [
            (CODEX, "x-codex-"),
            (ANTHROPIC, "anthropic-ratelimit-unified-"),
            (OPENAI, "x-ratelimit-"),
        ];
        let mut places = Vec::new();
        for (range, prefix) in prefixes {
            for i in range {
                assert!(NAMES[i].starts_with(prefix), "{}", NAMES[i]);
                places.push(i);
            }
        }
        assert_eq!(places, (0..18).collect::<Vec<_>>());
        // Each table's places name the field it reads.
        let tiers: Vec<&str> = CODEX_TIERS
            .iter()
            .flat_map(|(p, _)| p.map(|i| NAMES[i]))
            .collect();
        assert_eq!(
            tiers[..4].iter().filter(|n| n.contains("primary")).count(),
            4
        );
        assert_eq!(
            tiers[4..]
                .iter()
                .filter(|n| n.contains("secondary"))
                .count(),
            4
        );
        assert!(NAMES[ANTHROPIC_STATUS].ends_with("status"));
        assert!(NAMES[ANTHROPIC_RESET].ends_with("reset"));
        assert!(NAMES[ANTHROPIC_WINDOWS[0].0].contains("5h"));
        assert!(NAMES[ANTHROPIC_WINDOWS[1].0].contains("7d"));
        for (places, unit) in OPENAI_UNITS {
            for (i, kind) in places.into_iter().zip(["limit", "remaining", "reset"]) {
                assert_eq!(NAMES[i], format!("x-ratelimit-{kind}-{}", unit.as_str()));
            }
        }
    }

    #[test]
    fn names_are_read_in_any_case() {
        let h = [
            ("X-RateLimit-Limit-Tokens", "1000"),
            ("x-ratelimit-remaining-TOKENS", "900"),
            ("X-RATELIMIT-RESET-TOKENS", "20ms"),
            ("Anthropic-Ratelimit-Unified-Status", "rejected"),
            ("anthropic-ratelimit-unified-7D-utilization", "0.3"),
        ];
        let read: Vec<(Unit, Option<Window>, f64, Option<u64>)> = parse(&h, NOW)
            .iter()
            .map(|s| (s.unit, s.window, s.used, s.reset_at))
            .collect();
        assert_eq!(
            read,
            [
                (Unit::Percent, Some(Window::FiveHours), 1.0, None),
                (Unit::Percent, Some(Window::Weekly), 1.0, None),
                (Unit::Tokens, None, 0.09999999999999998, Some(NOW + 20)),
            ]
        );
    }

    #[test]
    fn numbers_are_read_whole_or_as_decimals() {
        for (limit, remaining, used) in [
            ("1e2", " 25 ", 0.75),
            ("100", "25.0", 0.75),
            ("+100", "50", 0.5),
            ("18446744073709551616", "0", 1.0),
            ("100", "-1", -1.0),
            ("100", "NaN", -1.0),
        ] {
            let h = [
                ("x-ratelimit-limit-requests", limit),
                ("x-ratelimit-remaining-requests", remaining),
            ];
            let read: Vec<f64> = parse(&h, NOW).iter().map(|s| s.used).collect();
            let expected: Vec<f64> = (used >= 0.0).then_some(used).into_iter().collect();
            assert_eq!(read, expected, "{limit} {remaining}");
        }
    }

    #[test]
    fn each_family_sent_is_read_in_one_head() {
        let h = [
            ("x-ratelimit-limit-requests", "10"),
            ("x-ratelimit-remaining-requests", "5"),
            ("anthropic-ratelimit-unified-status", "rejected"),
            ("x-codex-secondary-used-percent", "20"),
        ];
        let read: Vec<(Unit, Option<Window>, f64)> = parse(&h, NOW)
            .iter()
            .map(|s| (s.unit, s.window, s.used))
            .collect();
        assert_eq!(
            read,
            [
                (Unit::Percent, Some(Window::Weekly), 0.2),
                (Unit::Percent, Some(Window::FiveHours), 1.0),
                (Unit::Percent, Some(Window::Weekly), 1.0),
                (Unit::Requests, None, 0.5),
            ]
        );
        assert!(parse(&[("x-other", "1")], NOW).is_empty());
    }

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration_ms("20ms"), Some(20));
        assert_eq!(parse_duration_ms("1s"), Some(1_000));
        assert_eq!(parse_duration_ms("6m0s"), Some(360_000));
        assert_eq!(parse_duration_ms("1h2m3.5s"), Some(3_723_500));
        assert_eq!(parse_duration_ms("7"), Some(7_000));
        assert_eq!(parse_duration_ms(" 999999999999ms "), Some(999_999_999_999));
        assert_eq!(
            parse_duration_ms("999999999999s"),
            Some(999_999_999_999_000)
        );
        assert_eq!(
            parse_duration_ms("1000000000000ms"),
            Some(1_000_000_000_000)
        );
        assert_eq!(parse_duration_ms("2.5s"), Some(2_500));
        assert_eq!(parse_duration_ms("0ms"), Some(0));
        assert_eq!(parse_duration_ms("7d"), None);
        assert_eq!(parse_duration_ms("soon"), None);
        assert_eq!(parse_duration_ms(""), None);
    }

    #[test]
    fn a_field_sent_twice_is_read_once_its_first_value() {
        let h = [
            ("x-ratelimit-limit-requests", "100"),
            ("x-ratelimit-remaining-requests", "25"),
            ("X-Ratelimit-Limit-Requests", "50"),
            ("x-ratelimit-remaining-requests", "0"),
        ];
        assert_eq!(parse(&h, NOW)[0].used, 0.75);
        let bytes: [(&[u8], &[u8]); 2] = [
            (b"x-ratelimit-limit-requests", b" 10\t"),
            (b"x-ratelimit-remaining-requests", b"\xff"),
        ];
        assert!(parse(&bytes, NOW).is_empty());
        assert_eq!(whole(b"18446744073709551615"), None);
        assert_eq!(
            whole(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        assert_eq!(whole(b""), None);
        assert_eq!(whole(b"1 "), None);
    }

    #[test]
    fn garbage_is_ignored() {
        let h = [
            ("x-codex-primary-used-percent", "lots"),
            ("x-ratelimit-limit-requests", "-1"),
            ("x-ratelimit-remaining-requests", "5"),
        ];
        assert!(parse(&h, NOW).is_empty());
    }

    #[test]
    fn every_name_read_has_its_place_in_any_case_and_no_other_field_has_one() {
        for (i, name) in NAMES.iter().enumerate() {
            assert_eq!(place(name.as_bytes()), Some(i as u8), "{name}");
            assert_eq!(place(name.to_ascii_uppercase().as_bytes()), Some(i as u8));
        }
        for other in [
            "",
            "x",
            "x-ratelimit-",
            "x-codex-",
            "anthropic-ratelimit-unified-",
            "x-ratelimit-limit-request",
            "x-ratelimit-limit-requestss",
            "x-ratelimit-limit-tokens-usage-based",
            "x-codex-primary-used-percen",
            "x-request-id",
            "anthropic-ratelimit-unified-fallback",
            "anthropic-ratelimit-requests-limit",
            "content-type",
            // The same slot as `x-ratelimit-limit-requests` (bit 5 set, `\r` reads as
            // `-`), but not the name.
            "x\rratelimit-limit-requests",
        ] {
            assert_eq!(place(other.as_bytes()), None, "{other}");
        }
        let placed = [(15, &b"100"[..]), (16, &b"40"[..]), (15, &b"7"[..])];
        assert_eq!(
            parse_placed(placed, NOW),
            vec![Signal {
                unit: Unit::Tokens,
                window: None,
                used: 0.6,
                reset_at: None
            }]
        );
    }
}
