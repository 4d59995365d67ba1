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
use crate::UnixMillis;

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

fn num(headers: &[(&str, &str)], name: &str) -> Option<f64> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
}

fn text<'a>(headers: &[(&'a str, &'a str)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
}

fn secs_to_ms(s: f64) -> UnixMillis {
    (s * 1000.0) as UnixMillis
}

/// Parses a Go-style duration (`1h2m3.5s`, `20ms`, `6m0s`) into milliseconds.
pub fn parse_duration_ms(s: &str) -> Option<u64> {
    let s = s.trim();
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

fn window_of_minutes(minutes: f64) -> Option<Window> {
    Window::ALL
        .into_iter()
        .find(|w| (w.length_ms() as f64 - minutes * 60_000.0).abs() < 60_000.0)
}

/// Every signal in a response's headers.
pub fn parse(headers: &[(&str, &str)], now: UnixMillis) -> Vec<Signal> {
    let mut out = Vec::new();
    for (tier, default_window) in [
        ("primary", Window::FiveHours),
        ("secondary", Window::Weekly),
    ] {
        let Some(pct) = num(headers, &format!("x-codex-{tier}-used-percent")) else {
            continue;
        };
        let window = num(headers, &format!("x-codex-{tier}-window-minutes"))
            .and_then(window_of_minutes)
            .unwrap_or(default_window);
        let reset_at = num(headers, &format!("x-codex-{tier}-reset-after-seconds"))
            .map(|s| now.saturating_add(secs_to_ms(s)))
            .or_else(|| num(headers, &format!("x-codex-{tier}-reset-at")).map(secs_to_ms));
        out.push(Signal {
            unit: Unit::Percent,
            window: Some(window),
            used: (pct / 100.0).min(1.0),
            reset_at,
        });
    }
    let anthropic_reset = num(headers, "anthropic-ratelimit-unified-reset").map(secs_to_ms);
    let rejected = text(headers, "anthropic-ratelimit-unified-status") == Some("rejected");
    for (suffix, window) in [("5h", Window::FiveHours), ("7d", Window::Weekly)] {
        let util = num(
            headers,
            &format!("anthropic-ratelimit-unified-{suffix}-utilization"),
        );
        let used = match (util, rejected) {
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
    for (kind, unit) in [("requests", Unit::Requests), ("tokens", Unit::Tokens)] {
        let (Some(limit), Some(remaining)) = (
            num(headers, &format!("x-ratelimit-limit-{kind}")),
            num(headers, &format!("x-ratelimit-remaining-{kind}")),
        ) else {
            continue;
        };
        if limit <= 0.0 {
            continue;
        }
        let reset_at = text(headers, &format!("x-ratelimit-reset-{kind}"))
            .and_then(parse_duration_ms)
            .map(|ms| now.saturating_add(ms));
        out.push(Signal {
            unit,
            window: None,
            used: (1.0 - remaining / limit).clamp(0.0, 1.0),
            reset_at,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn durations_parse_like_go() {
        assert_eq!(parse_duration_ms("20ms"), Some(20));
        assert_eq!(parse_duration_ms("1s"), Some(1_000));
        assert_eq!(parse_duration_ms("6m0s"), Some(360_000));
        assert_eq!(parse_duration_ms("1h2m3.5s"), Some(3_723_500));
        assert_eq!(parse_duration_ms("7"), Some(7_000));
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
