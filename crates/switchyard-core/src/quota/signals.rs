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

/// A Codex tier's fields (used percent, window minutes, reset after seconds, reset at),
/// and the window the tier is when its minutes are not sent.
const CODEX_TIERS: [([&str; 4], Window); 2] = [
    (
        [
            "x-codex-primary-used-percent",
            "x-codex-primary-window-minutes",
            "x-codex-primary-reset-after-seconds",
            "x-codex-primary-reset-at",
        ],
        Window::FiveHours,
    ),
    (
        [
            "x-codex-secondary-used-percent",
            "x-codex-secondary-window-minutes",
            "x-codex-secondary-reset-after-seconds",
            "x-codex-secondary-reset-at",
        ],
        Window::Weekly,
    ),
];

const ANTHROPIC_STATUS: &str = "anthropic-ratelimit-unified-status";
const ANTHROPIC_RESET: &str = "anthropic-ratelimit-unified-reset";

/// Anthropic's utilization field of each window.
const ANTHROPIC_WINDOWS: [(&str, Window); 2] = [
    (
        "anthropic-ratelimit-unified-5h-utilization",
        Window::FiveHours,
    ),
    ("anthropic-ratelimit-unified-7d-utilization", Window::Weekly),
];

/// OpenAI's fields of each unit: limit, remaining, reset.
const OPENAI_UNITS: [([&str; 3], Unit); 2] = [
    (
        [
            "x-ratelimit-limit-requests",
            "x-ratelimit-remaining-requests",
            "x-ratelimit-reset-requests",
        ],
        Unit::Requests,
    ),
    (
        [
            "x-ratelimit-limit-tokens",
            "x-ratelimit-remaining-tokens",
            "x-ratelimit-reset-tokens",
        ],
        Unit::Tokens,
    ),
];

/// The trimmed value of the field `name` (in lower case), sent in any case.
fn text<'a>(headers: &[(&'a str, &'a str)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| http1::name_is(n.as_bytes(), name.as_bytes()))
        .map(|(_, v)| v.trim())
}

/// The number the field `name` holds: not negative, finite. Counts are whole numbers,
/// read without the float parser (several times the integer one's cost).
fn num(headers: &[(&str, &str)], name: &str) -> Option<f64> {
    let text = text(headers, name)?;
    let v = match text.parse::<u64>() {
        Ok(whole) => whole as f64,
        Err(_) => text.parse::<f64>().ok()?,
    };
    (v.is_finite() && v >= 0.0).then_some(v)
}

fn secs_to_ms(s: f64) -> UnixMillis {
    (s * 1000.0) as UnixMillis
}

/// Parses a Go-style duration (`1h2m3.5s`, `20ms`, `6m0s`) into milliseconds.
pub fn parse_duration_ms(s: &str) -> Option<u64> {
    let s = s.trim();
    whole_duration_ms(s).or_else(|| summed_duration_ms(s))
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
fn whole_duration_ms(s: &str) -> Option<u64> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 12 {
        return None;
    }
    let n: u64 = s[..digits].parse().ok()?;
    match &s[digits..] {
        "ms" => Some(n),
        "s" | "" => Some(n * 1000),
        _ => None,
    }
}

fn window_of_minutes(minutes: f64) -> Option<Window> {
    Window::ALL
        .into_iter()
        .find(|w| (w.length_ms() as f64 - minutes * 60_000.0).abs() < 60_000.0)
}

/// Every signal in a response's headers.
pub fn parse(headers: &[(&str, &str)], now: UnixMillis) -> Vec<Signal> {
    let mut out = Vec::new();
    // A provider sends one family of fields: the others' names are not looked up.
    let sent = |prefix: &[u8]| {
        headers
            .iter()
            .any(|(name, _)| http1::starts_with_name(name.as_bytes(), prefix))
    };
    if sent(b"x-codex-") {
        codex(headers, now, &mut out);
    }
    if sent(b"anthropic-ratelimit-unified-") {
        anthropic(headers, &mut out);
    }
    if sent(b"x-ratelimit-") {
        openai(headers, now, &mut out);
    }
    out
}

fn codex(headers: &[(&str, &str)], now: UnixMillis, out: &mut Vec<Signal>) {
    for ([used, minutes, reset_after, reset_at], default_window) in CODEX_TIERS {
        let Some(pct) = num(headers, used) else {
            continue;
        };
        let window = num(headers, minutes)
            .and_then(window_of_minutes)
            .unwrap_or(default_window);
        let reset_at = num(headers, reset_after)
            .map(|s| now.saturating_add(secs_to_ms(s)))
            .or_else(|| num(headers, reset_at).map(secs_to_ms));
        out.push(Signal {
            unit: Unit::Percent,
            window: Some(window),
            used: (pct / 100.0).min(1.0),
            reset_at,
        });
    }
}

fn anthropic(headers: &[(&str, &str)], out: &mut Vec<Signal>) {
    let anthropic_reset = num(headers, ANTHROPIC_RESET).map(secs_to_ms);
    let rejected = text(headers, ANTHROPIC_STATUS) == Some("rejected");
    for (utilization, window) in ANTHROPIC_WINDOWS {
        let used = match (num(headers, utilization), rejected) {
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

fn openai(headers: &[(&str, &str)], now: UnixMillis, out: &mut Vec<Signal>) {
    for ([limit, remaining, reset], unit) in OPENAI_UNITS {
        let (Some(limit), Some(remaining)) = (num(headers, limit), num(headers, remaining)) else {
            continue;
        };
        if limit <= 0.0 {
            continue;
        }
        let reset_at = text(headers, reset)
            .and_then(parse_duration_ms)
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
            prop_assert_eq!(whole_duration_ms(&text), summed_duration_ms(&text));
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
    fn every_name_read_is_in_lower_case() {
        let names: Vec<&str> = CODEX_TIERS
            .iter()
            .flat_map(|(names, _)| names.iter().copied())
            .chain([ANTHROPIC_STATUS, ANTHROPIC_RESET])
            .chain(ANTHROPIC_WINDOWS.iter().map(|(name, _)| *name))
            .chain(
                OPENAI_UNITS
                    .iter()
                    .flat_map(|(names, _)| names.iter().copied()),
            )
            .collect();
        assert_eq!(names.len(), 18);
        for name in names {
            assert_eq!(name, name.to_ascii_lowercase());
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
    fn garbage_is_ignored() {
        let h = [
            ("x-codex-primary-used-percent", "lots"),
            ("x-ratelimit-limit-requests", "-1"),
            ("x-ratelimit-remaining-requests", "5"),
        ];
        assert!(parse(&h, NOW).is_empty());
    }
}
