//! Connection cooldown and terminal states (SPEC R3, R4): the health of one upstream
//! account, as a state machine with `now` passed in.
//!
//! A failed request cools the account down: on a 429 until the upstream says its window
//! resets (`Retry-After` as seconds or HTTP-date, reset headers, or reset text such as
//! "resets in 2h3m"), however long — capped at 30 days — since retrying earlier only
//! produces guaranteed failures; otherwise for `base × 2^min(level, steps)`, capped at
//! 30 minutes, with the backoff level rising by one per cooldown. Recovery is lazy: an
//! account whose `rate_limited_until` has passed is usable again, no timer needed.
//!
//! Thundering herd: failures that arrive while the account is already cooling (the
//! requests were in flight together) neither raise the backoff level again nor stack
//! the cooldown; only a later reset announced by the upstream extends it.
//!
//! Terminal states — `banned` (three consecutive rejections), `expired` (still failing
//! authentication after [`EXPIRED_RETRY_MAX`] retries with backoff), `credits_exhausted`
//! — are never overwritten by a temporary cooldown and are cleared only by a credential
//! change or an operator reset.

use crate::domain::AuthClass;
use crate::UnixMillis;
use serde::{Deserialize, Serialize};

/// Authentication retries (with backoff) before an account is declared expired.
pub const EXPIRED_RETRY_MAX: u32 = 3;

/// Consecutive per-request rejections after which an account is banned.
pub const REJECTIONS_TO_BAN: u32 = 3;

/// The longest backoff cooldown: half an hour, so a flapping account is retried a few
/// times an hour rather than forgotten.
pub const BACKOFF_CAP_MS: u64 = 30 * 60_000;

/// The longest cooldown an upstream announcement can set: 30 days (monthly quotas).
pub const ANNOUNCED_CAP_MS: u64 = 30 * 24 * 3_600_000;

/// What kind of failure it was, for cooldown purposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    /// 429: the account's window is used up.
    RateLimited,
    /// 5xx, 408, connect errors, timeouts.
    Transient,
    /// 401: the credential was refused.
    AuthFailed,
    /// 403: the request was rejected for this account.
    RequestRejected,
    /// 402 or an upstream "insufficient quota/credits" answer.
    CreditsExhausted,
}

impl ErrorType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RateLimited => "rate_limited",
            Self::Transient => "transient",
            Self::AuthFailed => "auth_failed",
            Self::RequestRejected => "request_rejected",
            Self::CreditsExhausted => "credits_exhausted",
        }
    }
}

/// Terminal states (SPEC R4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Terminal {
    Banned,
    Expired,
    CreditsExhausted,
}

impl Terminal {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Banned => "banned",
            Self::Expired => "expired",
            Self::CreditsExhausted => "credits_exhausted",
        }
    }
}

/// Base cooldown and backoff steps of an auth class (SPEC R3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    pub base_ms: u64,
    pub steps: u32,
}

impl Profile {
    /// SPEC R3's defaults (the `cooldown.*` settings override them): OAuth 5 s with 8
    /// backoff steps; API key 3 s with 5; local servers like API keys.
    pub fn for_class(class: AuthClass) -> Self {
        match class {
            AuthClass::Oauth => Self {
                base_ms: 5_000,
                steps: 8,
            },
            AuthClass::Apikey | AuthClass::Local => Self {
                base_ms: 3_000,
                steps: 5,
            },
        }
    }

    /// The backoff cooldown at `level`.
    pub fn backoff_ms(&self, level: u32) -> u64 {
        let exp = level.min(self.steps).min(40);
        self.base_ms.saturating_mul(1u64 << exp).min(BACKOFF_CAP_MS)
    }
}

/// The profile of each auth class, as the `cooldown.*` settings resolve them; local
/// connections use the API-key profile. The default is SPEC R3's
/// ([`Profile::for_class`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profiles {
    pub oauth: Profile,
    pub apikey: Profile,
}

impl Default for Profiles {
    fn default() -> Self {
        Self {
            oauth: Profile::for_class(AuthClass::Oauth),
            apikey: Profile::for_class(AuthClass::Apikey),
        }
    }
}

impl Profiles {
    /// The profile of `class`.
    pub fn get(&self, class: AuthClass) -> Profile {
        match class {
            AuthClass::Oauth => self.oauth,
            AuthClass::Apikey | AuthClass::Local => self.apikey,
        }
    }
}

/// One failure as the state machine needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub error_type: ErrorType,
    pub status: Option<u16>,
    /// When the upstream said the account is usable again, if it did.
    pub reset_at: Option<UnixMillis>,
    pub message: String,
}

/// What a failure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing (already cooling for at least as long, or terminal).
    None,
    /// Cooling until then.
    Cooled { until: UnixMillis, level: u32 },
    /// Became terminal.
    Terminal(Terminal),
}

/// One account's health. Serializable for persistence and the operator APIs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    pub rate_limited_until: Option<UnixMillis>,
    pub backoff_level: u32,
    pub last_error: Option<String>,
    pub last_error_type: Option<ErrorType>,
    pub error_code: Option<u16>,
    pub terminal: Option<Terminal>,
    consecutive_rejections: u32,
    auth_retries: u32,
}

/// Longest error message kept; upstream bodies can be long.
const MAX_ERROR_CHARS: usize = 300;

impl Health {
    /// Whether requests may go to the account at `now`.
    pub fn usable(&self, now: UnixMillis) -> bool {
        self.terminal.is_none() && self.rate_limited_until.is_none_or(|t| t <= now)
    }

    /// Milliseconds of cooldown left at `now` (0 when usable or terminal).
    pub fn remaining_ms(&self, now: UnixMillis) -> u64 {
        self.rate_limited_until.map_or(0, |t| t.saturating_sub(now))
    }

    /// A success clears every error field (terminal states stay).
    pub fn on_success(&mut self) {
        *self = Self {
            terminal: self.terminal,
            ..Self::default()
        };
    }

    /// Records a failure.
    pub fn on_failure(&mut self, profile: &Profile, f: &Failure, now: UnixMillis) -> Change {
        if self.terminal.is_some() {
            return Change::None;
        }
        self.last_error = Some(f.message.chars().take(MAX_ERROR_CHARS).collect());
        self.last_error_type = Some(f.error_type);
        self.error_code = f.status;
        // Requests that were in flight together fail together; while the account is
        // already cooling their failures count as the one that cooled it.
        let cooling = self.rate_limited_until.filter(|t| *t > now);
        match f.error_type {
            ErrorType::CreditsExhausted => return self.terminate(Terminal::CreditsExhausted),
            ErrorType::RequestRejected | ErrorType::AuthFailed if cooling.is_some() => {}
            ErrorType::RequestRejected => {
                self.consecutive_rejections += 1;
                if self.consecutive_rejections >= REJECTIONS_TO_BAN {
                    return self.terminate(Terminal::Banned);
                }
            }
            ErrorType::AuthFailed => {
                if self.auth_retries >= EXPIRED_RETRY_MAX {
                    return self.terminate(Terminal::Expired);
                }
                self.auth_retries += 1;
            }
            ErrorType::RateLimited | ErrorType::Transient => {}
        }
        if f.error_type != ErrorType::RequestRejected {
            self.consecutive_rejections = 0;
        }
        let announced = f
            .reset_at
            .filter(|t| *t > now)
            .map(|t| t.min(now.saturating_add(ANNOUNCED_CAP_MS)));
        if let Some(until) = cooling {
            // No second backoff step; only a later announced reset extends the cooldown.
            return match announced {
                Some(a) if a > until => {
                    self.rate_limited_until = Some(a);
                    Change::Cooled {
                        until: a,
                        level: self.backoff_level,
                    }
                }
                _ => Change::None,
            };
        }
        let until =
            announced.unwrap_or_else(|| now.saturating_add(profile.backoff_ms(self.backoff_level)));
        self.rate_limited_until = Some(until);
        self.backoff_level = self.backoff_level.saturating_add(1);
        Change::Cooled {
            until,
            level: self.backoff_level,
        }
    }

    /// Cools the account until `until` because another account behind the same egress
    /// address hit its limit (SPEC R14): never terminal, never over a terminal state or
    /// a cooldown lasting at least as long, and the backoff level does not move.
    pub fn cool_with_peer(&mut self, until: UnixMillis, message: &str, now: UnixMillis) -> Change {
        if self.terminal.is_some()
            || until <= now
            || self.rate_limited_until.is_some_and(|t| t >= until)
        {
            return Change::None;
        }
        self.rate_limited_until = Some(until);
        self.last_error = Some(message.chars().take(MAX_ERROR_CHARS).collect());
        self.last_error_type = Some(ErrorType::RateLimited);
        self.error_code = Some(429);
        Change::Cooled {
            until,
            level: self.backoff_level,
        }
    }

    /// A refresh of the account's OAuth token failed (SPEC R4): the account cools until
    /// the refresh is tried again, or is `expired` after the last failure. Never over a
    /// terminal state or a cooldown lasting at least as long.
    pub fn on_refresh_failure(
        &mut self,
        failed: crate::oauth::Failed,
        message: &str,
        now: UnixMillis,
    ) -> Change {
        if self.terminal.is_some() {
            return Change::None;
        }
        self.last_error = Some(message.chars().take(MAX_ERROR_CHARS).collect());
        self.last_error_type = Some(ErrorType::AuthFailed);
        self.error_code = Some(401);
        match failed {
            crate::oauth::Failed::Expired => self.terminate(Terminal::Expired),
            crate::oauth::Failed::RetryAt(until) => {
                if until <= now || self.rate_limited_until.is_some_and(|t| t >= until) {
                    return Change::None;
                }
                self.rate_limited_until = Some(until);
                Change::Cooled {
                    until,
                    level: self.backoff_level,
                }
            }
        }
    }

    fn terminate(&mut self, t: Terminal) -> Change {
        self.terminal = Some(t);
        self.rate_limited_until = None;
        Change::Terminal(t)
    }

    /// The operator's cooldown clear: `false` (nothing done) for a terminal account.
    pub fn clear_cooldown(&mut self) -> bool {
        if self.terminal.is_some() {
            return false;
        }
        self.on_success();
        true
    }

    /// A new credential or an operator's full reset: everything, terminal included.
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

/// When the upstream says to come back, from its headers and body: `Retry-After`
/// (seconds or HTTP-date), `x-ratelimit-reset-*` durations, or text like "resets in
/// 2h3m" / "try again in 20s". The latest announcement wins.
pub fn announced_reset(
    headers: &[(&str, &str)],
    body: &str,
    now: UnixMillis,
) -> Option<UnixMillis> {
    let mut best: Option<UnixMillis> = None;
    let mut consider = |t: Option<UnixMillis>| {
        if let Some(t) = t {
            best = Some(best.map_or(t, |b| b.max(t)));
        }
    };
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        let value = value.trim();
        if name == "retry-after" {
            consider(retry_after(value, now));
        } else if name.starts_with("x-ratelimit-reset") {
            consider(
                crate::quota::signals::parse_duration_ms(value).map(|ms| now.saturating_add(ms)),
            );
        }
    }
    // A Codex subscription says which window is used up and when it resets.
    for signal in crate::quota::signals::parse(headers, now) {
        if signal.used >= 1.0 && signal.window.is_some() {
            consider(signal.reset_at.filter(|at| *at > now));
        }
    }
    // A Claude subscription's usage wall names its window's end in Unix seconds.
    let header = |wanted: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(wanted))
            .map(|(_, v)| v.trim())
    };
    if header("anthropic-ratelimit-unified-status") == Some("rejected") {
        let reset = header("anthropic-ratelimit-unified-reset").and_then(|v| v.parse::<u64>().ok());
        consider(reset.map(|s| s.saturating_mul(1000)).filter(|at| *at > now));
    }
    consider(reset_text(body).map(|ms| now.saturating_add(ms)));
    // Codex's `usage_limit_reached`: `{"error": {"resets_in_seconds": N}}` or `resets_at`.
    if body.contains("\"resets_") {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
            let field = |name: &str| {
                v.pointer(&format!("/error/{name}"))
                    .and_then(serde_json::Value::as_u64)
            };
            consider(
                field("resets_in_seconds").map(|s| now.saturating_add(s.saturating_mul(1000))),
            );
            consider(
                field("resets_at")
                    .map(|s| s.saturating_mul(1000))
                    .filter(|at| *at > now),
            );
        }
    }
    best
}

/// `Retry-After`: delta-seconds or an HTTP-date.
pub fn retry_after(value: &str, now: UnixMillis) -> Option<UnixMillis> {
    if let Ok(secs) = value.parse::<u64>() {
        return Some(now.saturating_add(secs.saturating_mul(1000)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let ms = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis();
    u64::try_from(ms).ok()
}

/// A duration announced in text: "resets in 2h3m", "try again in 20s", "retry after 1m".
pub fn reset_text(body: &str) -> Option<u64> {
    let lower = body.to_ascii_lowercase();
    for marker in [
        "resets in ",
        "reset in ",
        "try again in ",
        "retry after ",
        "retry in ",
    ] {
        if let Some(at) = lower.find(marker) {
            let rest = &lower[at + marker.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | 'h' | 'm' | 's')))
                .unwrap_or(rest.len());
            let text = rest[..end].trim_end_matches('.');
            if let Some(ms) = crate::quota::signals::parse_duration_ms(text) {
                return Some(ms.min(ANNOUNCED_CAP_MS));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000_000;

    #[test]
    fn a_failed_token_refresh_cools_until_its_retry_and_the_last_one_expires() {
        use crate::oauth::Failed;
        let mut h = Health::default();
        assert_eq!(
            h.on_refresh_failure(Failed::RetryAt(T0 + 30_000), "HTTP 400: invalid_grant", T0),
            Change::Cooled {
                until: T0 + 30_000,
                level: 0
            }
        );
        assert!(!h.usable(T0 + 29_999) && h.usable(T0 + 30_000));
        assert_eq!(
            (h.error_code, h.last_error_type, h.last_error.as_deref()),
            (
                Some(401),
                Some(ErrorType::AuthFailed),
                Some("HTTP 400: invalid_grant")
            )
        );
        // A shorter or past retry changes nothing.
        assert_eq!(
            h.on_refresh_failure(Failed::RetryAt(T0 + 10_000), "x", T0 + 1),
            Change::None
        );
        assert_eq!(
            h.on_refresh_failure(Failed::Expired, "HTTP 400: invalid_grant", T0 + 2),
            Change::Terminal(Terminal::Expired)
        );
        assert_eq!(
            h.on_refresh_failure(Failed::RetryAt(T0 + 99_000), "x", T0 + 3),
            Change::None
        );
        assert_eq!(h.terminal, Some(Terminal::Expired));
        h.reset();
        assert!(h.usable(T0 + 4));
    }

    fn fail(t: ErrorType, status: u16) -> Failure {
        Failure {
            error_type: t,
            status: Some(status),
            reset_at: None,
            message: format!("HTTP {status}"),
        }
    }

    #[test]
    fn backoff_doubles_per_level_up_to_the_steps_and_the_cap() {
        let o = Profile::for_class(AuthClass::Oauth);
        let got: Vec<u64> = (0..10).map(|l| o.backoff_ms(l)).collect();
        // 5 s × 2^min(level, 8), capped at 30 min (5 s × 256 = 21.3 min fits).
        assert_eq!(
            got,
            [
                5_000, 10_000, 20_000, 40_000, 80_000, 160_000, 320_000, 640_000, 1_280_000,
                1_280_000
            ]
        );
        let a = Profile::for_class(AuthClass::Apikey);
        assert_eq!(a.backoff_ms(5), 96_000);
        assert_eq!(a.backoff_ms(50), 96_000);
        let big = Profile {
            base_ms: 60_000,
            steps: 10,
        };
        assert_eq!(big.backoff_ms(10), BACKOFF_CAP_MS);
    }

    #[test]
    fn consecutive_cooldowns_back_off_and_recovery_is_lazy() {
        let p = Profile::for_class(AuthClass::Apikey);
        let mut h = Health::default();
        assert_eq!(
            h.on_failure(&p, &fail(ErrorType::Transient, 503), T0),
            Change::Cooled {
                until: T0 + 3_000,
                level: 1
            }
        );
        assert!(!h.usable(T0 + 2_999));
        assert!(h.usable(T0 + 3_000));
        let t1 = T0 + 3_000;
        assert_eq!(
            h.on_failure(&p, &fail(ErrorType::Transient, 502), t1),
            Change::Cooled {
                until: t1 + 6_000,
                level: 2
            }
        );
        assert_eq!(h.remaining_ms(t1 + 1_000), 5_000);
    }

    #[test]
    fn concurrent_failures_raise_the_level_once_and_do_not_stack() {
        let p = Profile::for_class(AuthClass::Oauth);
        let mut h = Health::default();
        let first = h.on_failure(&p, &fail(ErrorType::Transient, 503), T0);
        assert_eq!(
            first,
            Change::Cooled {
                until: T0 + 5_000,
                level: 1
            }
        );
        for i in 1..20 {
            assert_eq!(
                h.on_failure(&p, &fail(ErrorType::Transient, 503), T0 + i),
                Change::None
            );
        }
        assert_eq!(
            (h.backoff_level, h.rate_limited_until),
            (1, Some(T0 + 5_000))
        );
        // A later announced reset still extends it.
        let mut later = fail(ErrorType::RateLimited, 429);
        later.reset_at = Some(T0 + 60_000);
        assert_eq!(
            h.on_failure(&p, &later, T0 + 30),
            Change::Cooled {
                until: T0 + 60_000,
                level: 1
            }
        );
    }

    #[test]
    fn an_announced_reset_is_honoured_however_long_up_to_30_days() {
        let p = Profile::for_class(AuthClass::Oauth);
        let mut h = Health::default();
        let mut f = fail(ErrorType::RateLimited, 429);
        f.reset_at = Some(T0 + 5 * 3_600_000);
        assert_eq!(
            h.on_failure(&p, &f, T0),
            Change::Cooled {
                until: T0 + 5 * 3_600_000,
                level: 1
            }
        );
        let mut h = Health::default();
        f.reset_at = Some(T0 + 90 * 24 * 3_600_000);
        assert_eq!(
            h.on_failure(&p, &f, T0),
            Change::Cooled {
                until: T0 + ANNOUNCED_CAP_MS,
                level: 1
            }
        );
    }

    #[test]
    fn a_success_clears_every_error_field_but_not_a_terminal_state() {
        let p = Profile::for_class(AuthClass::Apikey);
        let mut h = Health::default();
        h.on_failure(&p, &fail(ErrorType::Transient, 503), T0);
        h.on_success();
        assert_eq!(h, Health::default());
        h.on_failure(&p, &fail(ErrorType::CreditsExhausted, 402), T0);
        h.on_success();
        assert_eq!(h.terminal, Some(Terminal::CreditsExhausted));
    }

    #[test]
    fn three_consecutive_rejections_ban_one_only_cools() {
        let p = Profile::for_class(AuthClass::Apikey);
        let mut h = Health::default();
        let r = fail(ErrorType::RequestRejected, 403);
        assert!(matches!(h.on_failure(&p, &r, T0), Change::Cooled { .. }));
        // Another kind of failure in between breaks the streak.
        h.on_failure(&p, &fail(ErrorType::Transient, 503), T0 + 10_000);
        assert!(matches!(
            h.on_failure(&p, &r, T0 + 20_000),
            Change::Cooled { .. }
        ));
        assert!(matches!(
            h.on_failure(&p, &r, T0 + 40_000),
            Change::Cooled { .. }
        ));
        assert_eq!(
            h.on_failure(&p, &r, T0 + 80_000),
            Change::Terminal(Terminal::Banned)
        );
        assert!(!h.usable(T0 + 10 * 3_600_000));
    }

    #[test]
    fn concurrent_rejections_count_once() {
        let p = Profile::for_class(AuthClass::Apikey);
        let mut h = Health::default();
        let r = fail(ErrorType::RequestRejected, 403);
        for i in 0..5 {
            h.on_failure(&p, &r, T0 + i);
        }
        assert_eq!(h.terminal, None);
        assert_eq!(h.backoff_level, 1);
    }

    #[test]
    fn expired_only_after_three_retries_with_backoff() {
        let p = Profile::for_class(AuthClass::Oauth);
        let mut h = Health::default();
        let a = fail(ErrorType::AuthFailed, 401);
        let mut now = T0;
        for level in 1..=3 {
            assert!(
                matches!(h.on_failure(&p, &a, now), Change::Cooled { level: l, .. } if l == level),
                "retry {level}"
            );
            now = h.rate_limited_until.unwrap();
        }
        assert_eq!(
            h.on_failure(&p, &a, now),
            Change::Terminal(Terminal::Expired)
        );
    }

    #[test]
    fn terminal_states_are_never_overwritten_by_cooldowns() {
        let p = Profile::for_class(AuthClass::Oauth);
        let mut h = Health::default();
        h.on_failure(&p, &fail(ErrorType::CreditsExhausted, 402), T0);
        let mut f = fail(ErrorType::RateLimited, 429);
        f.reset_at = Some(T0 + 1_000);
        assert_eq!(h.on_failure(&p, &f, T0), Change::None);
        assert_eq!(h.terminal, Some(Terminal::CreditsExhausted));
        assert!(!h.clear_cooldown());
        assert_eq!(h.terminal, Some(Terminal::CreditsExhausted));
        h.reset();
        assert!(h.usable(T0));
    }

    #[test]
    fn upstream_reset_announcements_are_read_from_headers_and_text() {
        assert_eq!(retry_after("120", T0), Some(T0 + 120_000));
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:37 GMT", T0),
            Some(784_111_777_000)
        );
        assert_eq!(retry_after("soon", T0), None);
        assert_eq!(
            reset_text("Usage limit reached; resets in 2h3m."),
            Some(7_380_000)
        );
        assert_eq!(reset_text("Please try again in 20s"), Some(20_000));
        assert_eq!(reset_text("nothing here"), None);
        assert_eq!(reset_text("resets in 9999h"), Some(ANNOUNCED_CAP_MS));
        let h = [("Retry-After", "30"), ("x-ratelimit-reset-requests", "1m")];
        assert_eq!(
            announced_reset(&h, "try again in 10s", T0),
            Some(T0 + 60_000)
        );
        assert_eq!(announced_reset(&[], "", T0), None);
        let reset_s = (T0 + 7_200_000) / 1000;
        let wall = [
            ("anthropic-ratelimit-unified-status", "rejected"),
            ("anthropic-ratelimit-unified-reset", &*reset_s.to_string()),
        ];
        assert_eq!(announced_reset(&wall, "", T0), Some(reset_s * 1000));
        let allowed = [
            ("anthropic-ratelimit-unified-status", "allowed"),
            ("anthropic-ratelimit-unified-reset", &*reset_s.to_string()),
        ];
        assert_eq!(announced_reset(&allowed, "", T0), None);
        let past = [
            ("anthropic-ratelimit-unified-status", "rejected"),
            ("anthropic-ratelimit-unified-reset", "1"),
        ];
        assert_eq!(announced_reset(&past, "", T0), None);
        let codex = [
            ("x-codex-primary-used-percent", "100"),
            ("x-codex-primary-reset-after-seconds", "3600"),
            ("x-codex-secondary-used-percent", "40"),
            ("x-codex-secondary-reset-after-seconds", "600000"),
        ];
        assert_eq!(announced_reset(&codex, "", T0), Some(T0 + 3_600_000));
        let not_used_up = [
            ("x-codex-primary-used-percent", "99"),
            ("x-codex-primary-reset-after-seconds", "3600"),
        ];
        assert_eq!(announced_reset(&not_used_up, "", T0), None);
        let limit = r#"{"error":{"type":"usage_limit_reached","resets_in_seconds":7200}}"#;
        assert_eq!(announced_reset(&[], limit, T0), Some(T0 + 7_200_000));
        let at = format!(
            r#"{{"error":{{"type":"usage_limit_reached","resets_at":{}}}}}"#,
            T0 / 1000 + 60
        );
        assert_eq!(announced_reset(&[], &at, T0), Some(T0 + 60_000));
    }
}
