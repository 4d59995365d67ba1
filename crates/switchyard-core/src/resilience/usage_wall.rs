//! The Claude usage wall (SPEC R17): what a Claude subscription (OAuth) connection does
//! when it hits its 5-hour usage wall. Two features, each opted into per connection in
//! `providerSpecificData` and both off by default ([`Flags`]):
//!
//! - **Limit reset** (`autoLimitReset`): claim the once-a-week session-limit reset and
//!   retry at full speed. Tried first when both flags are on.
//! - **Low-priority lane** (`lowPriorityMode`): accept Anthropic's offer to keep serving
//!   the account at lower priority, by sending `anthropic-usage-limit: slow` on every
//!   request until the window resets.
//!
//! One [`UsageWall`] per connection, kept in memory (a restart costs one more wall 429
//! to accept the offer again), and one [`WallRequest`] per request on that connection.
//! Nothing here does I/O or reads a clock: the shell sends, sleeps and calls, and passes
//! `now` (Unix milliseconds), the request's remaining start budget and a jitter sample.
//! Arithmetic on times saturates.
//!
//! # The wall
//!
//! A wall is a `429` whose headers say `anthropic-ratelimit-unified-status: rejected`.
//! A 429 without it (a burst limit) is not a wall: [`Decision::Proceed`], and the
//! ordinary cooldown path handles it. Nothing is sent before the first wall:
//! [`UsageWall::send_slow`] is false until a lane is accepted.
//!
//! # Limit reset
//!
//! At a wall, with `autoLimitReset` on, no remembered "not before"
//! ([`Status::reset_unavailable_until_ms`]) and no attempt by a parallel request to wait
//! for ([Parallel requests](#parallel-requests)), [`UsageWall::on_response`] answers
//! [`Decision::TryLimitReset`]. The shell then:
//!
//! 1. `GET {base}`[`USAGE_CHECK_PATH`] and feeds [`parse_usage_check`] of the body (or
//!    [`UsageCheck::Failed`] on a transport error or a non-2xx) to
//!    [`UsageWall::on_usage_check`]. Its `juniper_tide` block offers a reset when
//!    `arm == "reset"` and `available == true`: [`Decision::CallReset`].
//! 2. `POST {base}`[`reset_path`]`(orgUUID)` with [`reset_body`]
//!    (`{"program":"juniper_tide"}`) and feeds [`parse_reset_answer`] of the body (or
//!    [`ResetAnswer::Failed`]) to [`UsageWall::on_reset_result`].
//!
//! Outcomes, and how long a new reset is not attempted (`next_available_at` is read as
//! Unix seconds when a number, RFC 3339 when a string; one in the past counts as not
//! announced):
//!
//! | outcome                          | next step                  | not before                          |
//! |----------------------------------|----------------------------|-------------------------------------|
//! | `reset`                          | [`Decision::RetryFullSpeed`] | `next_available_at`, else one week |
//! | `not_limited`                    | [`Decision::RetryFullSpeed`] | `next_available_at`, else 15 min   |
//! | `already_used`, `not_offered`    | the lane, else proceed     | `next_available_at`, else one week  |
//! | any failure, unknown results     | the lane, else proceed     | 15 min                              |
//!
//! A reset counts against the weekly limit and is granted once a week, hence the week.
//! `not_limited` consumed nothing, but a wall right after it is one a reset does not
//! lift, so it backs off like a failure. "The lane" means: when `lowPriorityMode` is on,
//! the offer of the wall 429 that started the attempt (kept in the [`WallRequest`]) is
//! accepted now, [`Decision::RetrySlowNow`]; otherwise [`Decision::Proceed`] with that
//! 429.
//!
//! ## Parallel requests
//!
//! Requests on one connection hit the wall together, and some were sent before a reset
//! but answered after it. So that only one of them asks for the reset, and none of them
//! cools down the account it has just lifted, the connection remembers the attempt in
//! flight (from the [`Decision::TryLimitReset`] until the usage check answers anything
//! but [`Decision::CallReset`], or the reset call answers) and the last successful reset
//! (`reset` or `not_limited`). With `autoLimitReset` on, a wall outside the lane is read
//! in this order:
//!
//! 1. Within [`RESET_GRACE_MS`] (60 s) after a successful reset:
//!    [`Decision::RetryFullSpeed`], once per request. A second wall to the same request
//!    (the one that asked for the reset included) goes on to the steps below.
//! 2. While another attempt is in flight: [`Decision::Wait`] by
//!    [`RESET_IN_FLIGHT_WAIT_MS`] (1 s), then the request is sent again and read anew.
//!    An attempt with no answer after [`RESET_IN_FLIGHT_MAX_MS`] (30 s) counts as lost,
//!    and the next wall starts its own. One request waits at most that long in all,
//!    counted from its first such wait, and only while the wait ends within its start
//!    budget minus [`START_MARGIN_MS`], as for the lane. A wait that does not fit goes to
//!    the lane, else proceeds, without a second attempt.
//! 3. A new attempt when none is remembered as unavailable, as above.
//! 4. The lane, else proceed.
//!
//! Where an attempt would fall back to the lane or proceed (any outcome but `reset` and
//! `not_limited`, say `already_used` because another request's reset came first), it
//! answers [`Decision::RetryFullSpeed`] instead when another request's reset succeeded
//! within the grace and this request has not retried at full speed yet. Every
//! [`Decision::RetryFullSpeed`] ends a lane accepted meanwhile (by a request that could
//! not wait), without an exit reason: the reset lifted the wall it was for, and the
//! retry goes without the slow header. A wall that was sent after the reset and is
//! still a wall costs the one retry.
//!
//! # Low-priority lane
//!
//! At a wall, with `lowPriorityMode` on, the offer is accepted when the 429 carries
//! `anthropic-ratelimit-unified-slow-offer: treatment` (the account is eligible) and a
//! window reset in the future (`anthropic-ratelimit-unified-reset`, else
//! `anthropic-ratelimit-unified-5h-reset`, Unix seconds), and neither the max-wait
//! cool-off nor a remembered `budget_exhausted` is running. Then
//! [`Decision::RetrySlowNow`]: the same account, at once, with the slow header. The
//! intercepted 429 never reaches the ordinary failure path, so the connection is not
//! cooled down or rotated away. The lane lasts until the reset + [`LANE_GRACE_MS`]
//! (60 s; active while `now` is before that instant), and every request in it carries
//! the header.
//!
//! While the lane is active, each response is read for
//! `anthropic-ratelimit-unified-slow-status` and the other headers, in this order:
//!
//! 1. Exits, which end the lane and hand the response to the ordinary flow
//!    ([`Decision::Exit`]): `ineligible` with
//!    `anthropic-ratelimit-unified-overage-in-use: true` ([`ExitReason::ExtraUsage`]:
//!    paid overage covers the wall now), `ineligible`, `weekly_limit`,
//!    `budget_exhausted`, `off`, and the 5-hour window rolling: an
//!    `anthropic-ratelimit-unified-5h-reset` at least [`WINDOW_ROLL_TOLERANCE_S`] (60 s,
//!    so clock noise in the announcements is not a roll) later than the lane's reset
//!    ([`ExitReason::WindowRolled`]). `budget_exhausted` is remembered until the budget
//!    reset announced in `anthropic-ratelimit-unified-slow-budget-reset` (Unix seconds),
//!    capped at [`BUDGET_MEMORY_CAP_MS`] (8 days); while remembered the offer is not
//!    accepted. Without that header there is nothing to remember until, and the next
//!    wall tries the offer again at the cost of one round trip.
//! 2. Wait hints: `anthropic-ratelimit-unified-slow-retry-after` and
//!    `anthropic-ratelimit-unified-slow-max-wait` (seconds) replace the lane's values
//!    when present. At acceptance they start from the wall 429's, or the defaults.
//! 3. Busy: `slot_busy` on a 429, or any 529, means wait and retry the same account:
//!    [`Decision::Wait`] by the retry-after (default 20 s, clamped to 5–600 s, then
//!    ±30 % jitter from the caller's sample). Waiting is bounded by the max-wait
//!    (default 20 min, clamped to 1 min–6 h), counted from this request's first wait,
//!    and by the request's remaining upstream start budget minus [`START_MARGIN_MS`]
//!    (5 s), so the sleep is never cut short by the request's own timeout. A wait that
//!    would end past either bound is not taken: the lane ends with
//!    [`ExitReason::MaxWait`] and [`OFFER_COOLOFF_MS`] (10 min) blocks accepting the
//!    offer again.
//! 4. A wall 429 to a request sent without the slow header (it left before a parallel
//!    request accepted the offer) joins the lane: [`Decision::RetrySlowNow`].
//! 5. Anything else (`active`, `not_needed`, no or an unknown slow status) keeps the
//!    lane: [`Decision::Proceed`].
//!
//! The lane also needs `lowPriorityMode` still on: with it off, an active lane is
//! ignored (no header, no waits) and left to run out.
//!
//! # Driving it
//!
//! ```text
//! let mut req = WallRequest::default();          // one per request on this connection
//! loop {
//!     let slow = wall.send_slow(flags, now);      // add `anthropic-usage-limit: slow`
//!     let (status, pairs) = send(slow);
//!     let headers = UnifiedHeaders::from_pairs(&pairs);
//!     let response = Response { status, headers, sent_slow: slow };
//!     let mut next = wall.on_response(&mut req, flags, response, now, start_left, jitter);
//!     if next == Decision::TryLimitReset {
//!         next = wall.on_usage_check(&mut req, usage_check(), now);
//!     }
//!     if next == Decision::CallReset {
//!         next = wall.on_reset_result(&mut req, reset_call(), now);
//!     }
//!     match next {
//!         Decision::RetrySlowNow | Decision::RetryFullSpeed => continue,
//!         Decision::Wait { ms } => { sleep(ms); continue }
//!         Decision::Exit(reason) => { log(reason.as_str()); return ordinary(response) }
//!         _ => return ordinary(response),         // Proceed
//!     }
//! }
//! ```
//!
//! When both flags are off every call answers [`Decision::Proceed`] and nothing is kept.

use crate::UnixMillis;
use serde::Serialize;
use serde_json::Value;

/// The response headers this machine reads (lower case; matched case-insensitively).
pub mod headers {
    /// `rejected` marks the usage wall (`allowed`, `allowed_warning` do not).
    pub const STATUS: &str = "anthropic-ratelimit-unified-status";
    /// The wall's window reset, Unix seconds.
    pub const RESET: &str = "anthropic-ratelimit-unified-reset";
    /// The 5-hour window's reset, Unix seconds: a later one means the window rolled.
    pub const FIVE_HOUR_RESET: &str = "anthropic-ratelimit-unified-5h-reset";
    /// `treatment` when the account may take the low-priority lane.
    pub const SLOW_OFFER: &str = "anthropic-ratelimit-unified-slow-offer";
    /// The lane's verdict on a response ([`super::SlowStatus`]).
    pub const SLOW_STATUS: &str = "anthropic-ratelimit-unified-slow-status";
    /// Seconds to wait before retrying a busy lane.
    pub const SLOW_RETRY_AFTER: &str = "anthropic-ratelimit-unified-slow-retry-after";
    /// Seconds a request may wait for a lane slot in all.
    pub const SLOW_MAX_WAIT: &str = "anthropic-ratelimit-unified-slow-max-wait";
    /// When an exhausted lane budget resets, Unix seconds.
    pub const SLOW_BUDGET_RESET: &str = "anthropic-ratelimit-unified-slow-budget-reset";
    /// `true` when paid overage is serving the account.
    pub const OVERAGE_IN_USE: &str = "anthropic-ratelimit-unified-overage-in-use";
}

/// The request header that rides the lane, and its value.
pub const SLOW_REQUEST_HEADER: &str = "anthropic-usage-limit";
pub const SLOW_REQUEST_VALUE: &str = "slow";

/// The `providerSpecificData` keys of the two opt-ins.
pub const LOW_PRIORITY_MODE_KEY: &str = "lowPriorityMode";
pub const AUTO_LIMIT_RESET_KEY: &str = "autoLimitReset";

/// The usage check, relative to the upstream base URL (`https://api.anthropic.com`).
pub const USAGE_CHECK_PATH: &str = "/api/oauth/usage?at_wall=1&skip_spend=1";
/// The reset program: the usage answer's block and the reset call's `program`.
pub const RESET_PROGRAM: &str = "juniper_tide";

/// The lane outlives the announced reset by this much (SPEC R17: 60 s).
pub const LANE_GRACE_MS: u64 = 60_000;
/// `slow-retry-after` when not announced (SPEC R17: 20 s).
pub const SLOW_RETRY_AFTER_DEFAULT_MS: u64 = 20_000;
/// `slow-retry-after` clamp (SPEC R17: 5–600 s).
pub const SLOW_RETRY_AFTER_MIN_MS: u64 = 5_000;
pub const SLOW_RETRY_AFTER_MAX_MS: u64 = 600_000;
/// Each wait is the retry-after ± this fraction (SPEC R17: ±30 %).
pub const JITTER_FRACTION: f64 = 0.3;
/// `slow-max-wait` when not announced (SPEC R17: 20 min).
pub const SLOW_MAX_WAIT_DEFAULT_MS: u64 = 20 * 60_000;
/// `slow-max-wait` clamp (SPEC R17: 1 min–6 h).
pub const SLOW_MAX_WAIT_MIN_MS: u64 = 60_000;
pub const SLOW_MAX_WAIT_MAX_MS: u64 = 6 * 3_600_000;
/// Kept free at the end of the request's start budget (SPEC R17: 5 s).
pub const START_MARGIN_MS: u64 = 5_000;
/// After a max-wait exit the offer is not accepted for this long (SPEC R17: 10 min).
pub const OFFER_COOLOFF_MS: u64 = 10 * 60_000;
/// The longest `budget_exhausted` is remembered (SPEC R17: at most 8 days).
pub const BUDGET_MEMORY_CAP_MS: u64 = 8 * 86_400_000;
/// A 5-hour reset this much later than the lane's means the window rolled (this
/// module's choice: announcements may differ by a few seconds).
pub const WINDOW_ROLL_TOLERANCE_S: u64 = 60;
/// How long an unannounced reset stays unavailable after it was used or refused
/// (SPEC R17: one week).
pub const RESET_UNAVAILABLE_DEFAULT_MS: u64 = 7 * 86_400_000;
/// Back-off after a failed usage check or reset call (SPEC R17: 15 min).
pub const RESET_FAILURE_BACKOFF_MS: u64 = 15 * 60_000;
/// A wall while another request's reset attempt is in flight waits this long before
/// the request is sent again (this module's choice).
pub const RESET_IN_FLIGHT_WAIT_MS: u64 = 1_000;
/// A reset attempt without an answer this long after it started counts as lost; also
/// the longest one request waits for attempts in flight (this module's choice).
pub const RESET_IN_FLIGHT_MAX_MS: u64 = 30_000;
/// A wall this soon after a successful reset was sent before it or raced it: retried at
/// full speed once per request (this module's choice).
pub const RESET_GRACE_MS: u64 = 60_000;

/// The reset call's path for one organization (its UUID, from the connection's
/// `providerSpecificData.organizationUUID`).
pub fn reset_path(org_uuid: &str) -> String {
    format!("/api/organizations/{org_uuid}/reset_rate_limits")
}

/// The reset call's body: `{"program":"juniper_tide"}`.
pub fn reset_body() -> Value {
    serde_json::json!({ "program": RESET_PROGRAM })
}

/// A connection's opt-ins, both off by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    pub low_priority_mode: bool,
    pub auto_limit_reset: bool,
}

impl Flags {
    /// Reads the two keys of `providerSpecificData`; only a JSON `true` turns one on.
    pub fn from_provider_specific_data(data: &Value) -> Self {
        let on = |key: &str| data.get(key).and_then(Value::as_bool).unwrap_or(false);
        Self {
            low_priority_mode: on(LOW_PRIORITY_MODE_KEY),
            auto_limit_reset: on(AUTO_LIMIT_RESET_KEY),
        }
    }
}

/// `anthropic-ratelimit-unified-slow-status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowStatus {
    /// Served at low priority.
    Active,
    /// Served at standard priority; the lane stays.
    NotNeeded,
    /// No low-priority slot free right now: wait and retry.
    SlotBusy,
    WeeklyLimit,
    BudgetExhausted,
    Off,
    Ineligible,
}

impl SlowStatus {
    fn parse(value: &str) -> Option<Self> {
        [
            ("active", Self::Active),
            ("not_needed", Self::NotNeeded),
            ("slot_busy", Self::SlotBusy),
            ("weekly_limit", Self::WeeklyLimit),
            ("budget_exhausted", Self::BudgetExhausted),
            ("off", Self::Off),
            ("ineligible", Self::Ineligible),
        ]
        .into_iter()
        .find(|(name, _)| value.eq_ignore_ascii_case(name))
        .map(|(_, status)| status)
    }
}

/// The `anthropic-ratelimit-unified-*` headers of one response that matter here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnifiedHeaders {
    /// `…-status: rejected`.
    pub rejected: bool,
    /// `…-reset`, Unix seconds.
    pub reset_s: Option<u64>,
    /// `…-5h-reset`, Unix seconds.
    pub five_hour_reset_s: Option<u64>,
    /// `…-slow-offer: treatment`.
    pub slow_offered: bool,
    /// `…-slow-status`; `None` when absent or unknown.
    pub slow_status: Option<SlowStatus>,
    /// `…-slow-retry-after`, seconds, unclamped.
    pub slow_retry_after_s: Option<u64>,
    /// `…-slow-max-wait`, seconds, unclamped.
    pub slow_max_wait_s: Option<u64>,
    /// `…-slow-budget-reset`, Unix seconds.
    pub slow_budget_reset_s: Option<u64>,
    /// `…-overage-in-use: true`.
    pub overage_in_use: bool,
}

impl UnifiedHeaders {
    /// Reads `(name, value)` pairs: names case-insensitive, the first occurrence wins,
    /// values trimmed; enumerated values case-insensitive. Numbers are non-negative
    /// seconds; a fraction rounds up; anything else reads as absent.
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Self {
        let get = |name: &str| {
            pairs
                .iter()
                .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim())
        };
        let is = |name: &str, want: &str| get(name).is_some_and(|v| v.eq_ignore_ascii_case(want));
        let secs = |name: &str| get(name).and_then(parse_seconds);
        Self {
            rejected: is(headers::STATUS, "rejected"),
            reset_s: secs(headers::RESET),
            five_hour_reset_s: secs(headers::FIVE_HOUR_RESET),
            slow_offered: is(headers::SLOW_OFFER, "treatment"),
            slow_status: get(headers::SLOW_STATUS).and_then(SlowStatus::parse),
            slow_retry_after_s: secs(headers::SLOW_RETRY_AFTER),
            slow_max_wait_s: secs(headers::SLOW_MAX_WAIT),
            slow_budget_reset_s: secs(headers::SLOW_BUDGET_RESET),
            overage_in_use: is(headers::OVERAGE_IN_USE, "true"),
        }
    }
}

fn parse_seconds(value: &str) -> Option<u64> {
    value.parse::<u64>().ok().or_else(|| {
        value
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| s.ceil() as u64)
    })
}

/// The wait before retrying a busy lane: the announced seconds clamped to 5–600 s, or
/// 20 s when not announced.
pub fn slow_retry_after_ms(announced_s: Option<u64>) -> u64 {
    announced_s.map_or(SLOW_RETRY_AFTER_DEFAULT_MS, |s| {
        s.saturating_mul(1_000)
            .clamp(SLOW_RETRY_AFTER_MIN_MS, SLOW_RETRY_AFTER_MAX_MS)
    })
}

/// How long one request may wait for a lane slot: the announced seconds clamped to
/// 1 min–6 h, or 20 min when not announced.
pub fn slow_max_wait_ms(announced_s: Option<u64>) -> u64 {
    announced_s.map_or(SLOW_MAX_WAIT_DEFAULT_MS, |s| {
        s.saturating_mul(1_000)
            .clamp(SLOW_MAX_WAIT_MIN_MS, SLOW_MAX_WAIT_MAX_MS)
    })
}

/// `base_ms × (1 + 0.3 × jitter)`, rounded; `jitter` is the caller's sample in
/// [-1, 1] (clamped; NaN counts as 0).
pub fn jittered_ms(base_ms: u64, jitter: f64) -> u64 {
    let j = if jitter.is_nan() {
        0.0
    } else {
        jitter.clamp(-1.0, 1.0)
    };
    (base_ms as f64 * (1.0 + JITTER_FRACTION * j)).round() as u64
}

/// Why a lane ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitReason {
    WeeklyLimit,
    BudgetExhausted,
    Off,
    Ineligible,
    WindowRolled,
    ExtraUsage,
    MaxWait,
}

impl ExitReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WeeklyLimit => "weekly_limit",
            Self::BudgetExhausted => "budget_exhausted",
            Self::Off => "off",
            Self::Ineligible => "ineligible",
            Self::WindowRolled => "window_rolled",
            Self::ExtraUsage => "extra_usage",
            Self::MaxWait => "max_wait",
        }
    }
}

/// What the shell does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Ordinary handling of the response (not a wall, or the lane carries on).
    Proceed,
    /// Retry the same connection now, with the slow header.
    RetrySlowNow,
    /// The session limit was reset: retry the same connection now, without it.
    RetryFullSpeed,
    /// Sleep this long, then retry the same connection: in the lane (with the slow
    /// header) when busy, or while another request's limit reset is in flight.
    Wait { ms: u64 },
    /// Do the usage check and feed it to [`UsageWall::on_usage_check`].
    TryLimitReset,
    /// Call the reset and feed its answer to [`UsageWall::on_reset_result`].
    CallReset,
    /// The lane ended: ordinary handling of the response, with this reason logged.
    Exit(ExitReason),
}

/// One upstream response, as far as the wall is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: UnifiedHeaders,
    /// Whether the attempt carried the slow header.
    pub sent_slow: bool,
}

/// The `juniper_tide` block of the usage check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageCheck {
    /// `arm == "reset"` and `available == true`: call the reset.
    Available,
    /// Anything else in a readable block.
    NotOffered { next_available_at_ms: Option<u64> },
    /// Transport error, non-2xx, or no readable block.
    Failed,
}

/// The reset call's `result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetAnswer {
    Reset {
        next_available_at_ms: Option<u64>,
    },
    NotLimited {
        next_available_at_ms: Option<u64>,
    },
    AlreadyUsed {
        next_available_at_ms: Option<u64>,
    },
    NotOffered {
        next_available_at_ms: Option<u64>,
    },
    /// Transport error, non-2xx, unreadable body or any other `result`.
    Failed,
}

/// Reads the usage check's body: its `juniper_tide` object, else [`UsageCheck::Failed`].
pub fn parse_usage_check(json: &Value) -> UsageCheck {
    let Some(block) = json.get(RESET_PROGRAM).filter(|b| b.is_object()) else {
        return UsageCheck::Failed;
    };
    if block.get("arm").and_then(Value::as_str) == Some("reset")
        && block.get("available").and_then(Value::as_bool) == Some(true)
    {
        UsageCheck::Available
    } else {
        UsageCheck::NotOffered {
            next_available_at_ms: block.get("next_available_at").and_then(time_ms),
        }
    }
}

/// Reads the reset call's body `{"result": "...", "next_available_at": ...}`.
pub fn parse_reset_answer(json: &Value) -> ResetAnswer {
    let next_available_at_ms = json.get("next_available_at").and_then(time_ms);
    match json.get("result").and_then(Value::as_str) {
        Some("reset") => ResetAnswer::Reset {
            next_available_at_ms,
        },
        Some("not_limited") => ResetAnswer::NotLimited {
            next_available_at_ms,
        },
        Some("already_used") => ResetAnswer::AlreadyUsed {
            next_available_at_ms,
        },
        Some("not_offered") => ResetAnswer::NotOffered {
            next_available_at_ms,
        },
        _ => ResetAnswer::Failed,
    }
}

/// A time as Unix ms: a non-negative number of Unix seconds, or an RFC 3339 string.
fn time_ms(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64().map(|s| s.saturating_mul(1_000)).or_else(|| {
            n.as_f64()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(|s| (s * 1_000.0).round() as u64)
        }),
        Value::String(s) => parse_rfc3339_ms(s),
        _ => None,
    }
}

/// `YYYY-MM-DD(T|t| )HH:MM:SS[.fraction](Z|z|±HH:MM)` as Unix ms (fraction truncated
/// to ms); `None` when malformed or before 1970.
fn parse_rfc3339_ms(s: &str) -> Option<u64> {
    let b = s.trim().as_bytes();
    let num = |from: usize, to: usize| -> Option<i64> {
        b.get(from..to)?.iter().try_fold(0i64, |acc, d| {
            d.is_ascii_digit().then(|| acc * 10 + i64::from(d - b'0'))
        })
    };
    let at = |i: usize, want: &[u8]| b.get(i).is_some_and(|c| want.contains(c));
    if !(at(4, b"-") && at(7, b"-") && at(10, b"Tt ") && at(13, b":") && at(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    let mut i = 19;
    let mut millis = 0;
    if at(i, b".") {
        let start = i + 1;
        i = start;
        while at(i, b"0123456789") {
            i += 1;
        }
        if i == start {
            return None;
        }
        let ms_digits = (i - start).min(3);
        millis = num(start, start + ms_digits)? * 10i64.pow(3 - ms_digits as u32);
    }
    let offset_s = match b.get(i..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (oh, om) = (num(i + 1, i + 3)?, num(i + 4, i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let offset = oh * 3_600 + om * 60;
            if *sign == b'-' {
                -offset
            } else {
                offset
            }
        }
        _ => return None,
    };
    if !(1..=12).contains(&month)
        || !(1..=days_in_month(year, month)).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let secs =
        days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second - offset_s;
    u64::try_from(secs * 1_000 + millis).ok()
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The last time a lane ended, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LastExit {
    pub reason: ExitReason,
    pub at_ms: UnixMillis,
}

/// A connection's wall state at one instant, for the management API. Every time is
/// `None` once it has passed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Status {
    /// The lane carries the slow header until then (the reset + 60 s).
    pub lane_active_until_ms: Option<UnixMillis>,
    pub last_exit: Option<LastExit>,
    /// The offer is not accepted until then (max-wait cool-off or exhausted budget,
    /// whichever ends later).
    pub offer_blocked_until_ms: Option<UnixMillis>,
    /// The remembered `budget_exhausted`, part of the block above.
    pub budget_exhausted_until_ms: Option<UnixMillis>,
    /// No limit reset is attempted until then.
    pub reset_unavailable_until_ms: Option<UnixMillis>,
}

/// An accepted lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lane {
    /// The window reset announced by the wall, Unix seconds.
    reset_s: u64,
    /// The reset + the grace: the header is sent before this instant.
    until_ms: UnixMillis,
    retry_after_ms: u64,
    max_wait_ms: u64,
}

/// One request's part: its waits, its full-speed retry and the wall that started a
/// reset attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WallRequest {
    /// When this request first waited for a lane slot.
    first_wait_at_ms: Option<UnixMillis>,
    /// When this request first waited for another request's reset attempt.
    first_reset_wait_at_ms: Option<UnixMillis>,
    /// Whether this request was already answered [`Decision::RetryFullSpeed`].
    retried_full_speed: bool,
    /// The wall 429 to accept the lane from if the reset does not happen (only with
    /// `lowPriorityMode` on).
    fallback: Option<UnifiedHeaders>,
}

/// One connection's usage-wall state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageWall {
    lane: Option<Lane>,
    last_exit: Option<LastExit>,
    offer_cooloff_until_ms: Option<UnixMillis>,
    budget_exhausted_until_ms: Option<UnixMillis>,
    reset_unavailable_until_ms: Option<UnixMillis>,
    /// When the reset attempt in flight started (the `TryLimitReset`).
    resetting_since_ms: Option<UnixMillis>,
    /// When a reset last succeeded (`reset` or `not_limited`).
    reset_done_at_ms: Option<UnixMillis>,
}

fn future(t: Option<UnixMillis>, now_ms: UnixMillis) -> Option<UnixMillis> {
    t.filter(|t| *t > now_ms)
}

impl UsageWall {
    fn active_lane(&self, flags: Flags, now_ms: UnixMillis) -> Option<Lane> {
        self.lane
            .filter(|l| flags.low_priority_mode && now_ms < l.until_ms)
    }

    /// Whether the next attempt carries `anthropic-usage-limit: slow`.
    pub fn send_slow(&self, flags: Flags, now_ms: UnixMillis) -> bool {
        self.active_lane(flags, now_ms).is_some()
    }

    /// Reads one response's status and headers. `start_budget_left_ms` is what is left
    /// of the request's upstream start timeout; `jitter` is a sample in [-1, 1].
    /// Answers `Proceed`, `RetrySlowNow`, `RetryFullSpeed`, `Wait`, `TryLimitReset` or
    /// `Exit`.
    pub fn on_response(
        &mut self,
        req: &mut WallRequest,
        flags: Flags,
        response: Response,
        now_ms: UnixMillis,
        start_budget_left_ms: u64,
        jitter: f64,
    ) -> Decision {
        if let Some(lane) = self.active_lane(flags, now_ms) {
            return self.in_lane(lane, req, response, now_ms, start_budget_left_ms, jitter);
        }
        let h = response.headers;
        if response.status != 429 || !h.rejected {
            return Decision::Proceed;
        }
        if flags.auto_limit_reset {
            if self.in_reset_grace(req, now_ms) {
                return self.full_speed(req);
            }
            if self.reset_in_flight(now_ms) {
                if let Some(wait) = wait_for_reset(req, now_ms, start_budget_left_ms) {
                    return wait;
                }
            } else if future(self.reset_unavailable_until_ms, now_ms).is_none() {
                self.resetting_since_ms = Some(now_ms);
                req.fallback = flags.low_priority_mode.then_some(h);
                return Decision::TryLimitReset;
            }
        }
        if flags.low_priority_mode && self.accept(&h, now_ms) {
            Decision::RetrySlowNow
        } else {
            Decision::Proceed
        }
    }

    /// Feeds the usage check. Answers `CallReset`, `RetryFullSpeed`, `RetrySlowNow` or
    /// `Proceed`.
    pub fn on_usage_check(
        &mut self,
        req: &mut WallRequest,
        check: UsageCheck,
        now_ms: UnixMillis,
    ) -> Decision {
        let (announced_ms, default_ms) = match check {
            UsageCheck::Available => return Decision::CallReset,
            UsageCheck::NotOffered {
                next_available_at_ms,
            } => (next_available_at_ms, RESET_UNAVAILABLE_DEFAULT_MS),
            UsageCheck::Failed => (None, RESET_FAILURE_BACKOFF_MS),
        };
        self.resetting_since_ms = None;
        self.reset_unavailable(announced_ms, default_ms, now_ms);
        self.fall_back(req, now_ms)
    }

    /// Feeds the reset call's answer. Answers `RetryFullSpeed`, `RetrySlowNow` or
    /// `Proceed`.
    pub fn on_reset_result(
        &mut self,
        req: &mut WallRequest,
        answer: ResetAnswer,
        now_ms: UnixMillis,
    ) -> Decision {
        self.resetting_since_ms = None;
        match answer {
            ResetAnswer::Reset {
                next_available_at_ms,
            } => {
                self.reset_unavailable(next_available_at_ms, RESET_UNAVAILABLE_DEFAULT_MS, now_ms);
                self.reset_done_at_ms = Some(now_ms);
                self.full_speed(req)
            }
            ResetAnswer::NotLimited {
                next_available_at_ms,
            } => {
                self.reset_unavailable(next_available_at_ms, RESET_FAILURE_BACKOFF_MS, now_ms);
                self.reset_done_at_ms = Some(now_ms);
                self.full_speed(req)
            }
            ResetAnswer::AlreadyUsed {
                next_available_at_ms,
            }
            | ResetAnswer::NotOffered {
                next_available_at_ms,
            } => {
                self.reset_unavailable(next_available_at_ms, RESET_UNAVAILABLE_DEFAULT_MS, now_ms);
                self.fall_back(req, now_ms)
            }
            ResetAnswer::Failed => {
                self.reset_unavailable(None, RESET_FAILURE_BACKOFF_MS, now_ms);
                self.fall_back(req, now_ms)
            }
        }
    }

    /// The state at `now_ms`, for the management API.
    pub fn status(&self, now_ms: UnixMillis) -> Status {
        let cooloff = future(self.offer_cooloff_until_ms, now_ms);
        let budget = future(self.budget_exhausted_until_ms, now_ms);
        Status {
            lane_active_until_ms: future(self.lane.map(|l| l.until_ms), now_ms),
            last_exit: self.last_exit,
            offer_blocked_until_ms: cooloff.max(budget),
            budget_exhausted_until_ms: budget,
            reset_unavailable_until_ms: future(self.reset_unavailable_until_ms, now_ms),
        }
    }

    fn in_lane(
        &mut self,
        lane: Lane,
        req: &mut WallRequest,
        response: Response,
        now_ms: UnixMillis,
        start_budget_left_ms: u64,
        jitter: f64,
    ) -> Decision {
        let h = response.headers;
        let rolled = h
            .five_hour_reset_s
            .is_some_and(|r| r >= lane.reset_s.saturating_add(WINDOW_ROLL_TOLERANCE_S));
        let exit = match h.slow_status {
            Some(SlowStatus::Ineligible) if h.overage_in_use => Some(ExitReason::ExtraUsage),
            Some(SlowStatus::Ineligible) => Some(ExitReason::Ineligible),
            Some(SlowStatus::WeeklyLimit) => Some(ExitReason::WeeklyLimit),
            Some(SlowStatus::BudgetExhausted) => Some(ExitReason::BudgetExhausted),
            Some(SlowStatus::Off) => Some(ExitReason::Off),
            _ if rolled => Some(ExitReason::WindowRolled),
            _ => None,
        };
        if let Some(reason) = exit {
            if let Some(reset_s) = h
                .slow_budget_reset_s
                .filter(|_| reason == ExitReason::BudgetExhausted)
            {
                let until = reset_s
                    .saturating_mul(1_000)
                    .min(now_ms.saturating_add(BUDGET_MEMORY_CAP_MS));
                self.budget_exhausted_until_ms = future(Some(until), now_ms);
            }
            return self.exit(reason, now_ms);
        }
        let mut lane = lane;
        if h.slow_retry_after_s.is_some() {
            lane.retry_after_ms = slow_retry_after_ms(h.slow_retry_after_s);
        }
        if h.slow_max_wait_s.is_some() {
            lane.max_wait_ms = slow_max_wait_ms(h.slow_max_wait_s);
        }
        self.lane = Some(lane);
        let busy = match response.status {
            429 => h.slow_status == Some(SlowStatus::SlotBusy),
            529 => true,
            _ => false,
        };
        if busy {
            let ms = jittered_ms(lane.retry_after_ms, jitter);
            let first = *req.first_wait_at_ms.get_or_insert(now_ms);
            let deadline = first
                .saturating_add(lane.max_wait_ms)
                .min(now_ms.saturating_add(start_budget_left_ms.saturating_sub(START_MARGIN_MS)));
            return if now_ms.saturating_add(ms) <= deadline {
                Decision::Wait { ms }
            } else {
                self.exit(ExitReason::MaxWait, now_ms)
            };
        }
        if response.status == 429 && h.rejected && !response.sent_slow {
            return Decision::RetrySlowNow;
        }
        Decision::Proceed
    }

    /// Accepts the wall's offer when it may be; true when the lane is now active.
    fn accept(&mut self, h: &UnifiedHeaders, now_ms: UnixMillis) -> bool {
        let blocked = future(self.offer_cooloff_until_ms, now_ms).is_some()
            || future(self.budget_exhausted_until_ms, now_ms).is_some();
        let Some(reset_s) = h
            .reset_s
            .or(h.five_hour_reset_s)
            .filter(|s| s.saturating_mul(1_000) > now_ms)
        else {
            return false;
        };
        if !h.slow_offered || blocked {
            return false;
        }
        self.lane = Some(Lane {
            reset_s,
            until_ms: reset_s.saturating_mul(1_000).saturating_add(LANE_GRACE_MS),
            retry_after_ms: slow_retry_after_ms(h.slow_retry_after_s),
            max_wait_ms: slow_max_wait_ms(h.slow_max_wait_s),
        });
        true
    }

    fn exit(&mut self, reason: ExitReason, now_ms: UnixMillis) -> Decision {
        self.lane = None;
        self.last_exit = Some(LastExit {
            reason,
            at_ms: now_ms,
        });
        if reason == ExitReason::MaxWait {
            self.offer_cooloff_until_ms = Some(now_ms.saturating_add(OFFER_COOLOFF_MS));
        }
        Decision::Exit(reason)
    }

    fn reset_unavailable(
        &mut self,
        announced_ms: Option<UnixMillis>,
        default_ms: u64,
        now_ms: UnixMillis,
    ) {
        self.reset_unavailable_until_ms =
            Some(future(announced_ms, now_ms).unwrap_or(now_ms.saturating_add(default_ms)));
    }

    /// Whether a successful reset happened less than [`RESET_GRACE_MS`] ago and this
    /// request has not retried at full speed yet.
    fn in_reset_grace(&self, req: &WallRequest, now_ms: UnixMillis) -> bool {
        !req.retried_full_speed
            && self
                .reset_done_at_ms
                .is_some_and(|at| now_ms < at.saturating_add(RESET_GRACE_MS))
    }

    /// Whether a reset attempt started less than [`RESET_IN_FLIGHT_MAX_MS`] ago has not
    /// answered yet.
    fn reset_in_flight(&self, now_ms: UnixMillis) -> bool {
        self.resetting_since_ms
            .is_some_and(|since| now_ms < since.saturating_add(RESET_IN_FLIGHT_MAX_MS))
    }

    /// Retries the request at full speed, once: the wall is lifted, and a lane with it.
    fn full_speed(&mut self, req: &mut WallRequest) -> Decision {
        req.retried_full_speed = true;
        req.fallback = None;
        self.lane = None;
        Decision::RetryFullSpeed
    }

    fn fall_back(&mut self, req: &mut WallRequest, now_ms: UnixMillis) -> Decision {
        if self.in_reset_grace(req, now_ms) {
            return self.full_speed(req);
        }
        match req.fallback.take() {
            Some(h) if self.accept(&h, now_ms) => Decision::RetrySlowNow,
            _ => Decision::Proceed,
        }
    }
}

/// A wait for another request's reset attempt, when it ends within this request's
/// [`RESET_IN_FLIGHT_MAX_MS`] of such waits and its start budget minus the margin.
fn wait_for_reset(
    req: &mut WallRequest,
    now_ms: UnixMillis,
    start_budget_left_ms: u64,
) -> Option<Decision> {
    let first = *req.first_reset_wait_at_ms.get_or_insert(now_ms);
    let deadline = first
        .saturating_add(RESET_IN_FLIGHT_MAX_MS)
        .min(now_ms.saturating_add(start_budget_left_ms.saturating_sub(START_MARGIN_MS)));
    (now_ms.saturating_add(RESET_IN_FLIGHT_WAIT_MS) <= deadline).then_some(Decision::Wait {
        ms: RESET_IN_FLIGHT_WAIT_MS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T0: u64 = 1_800_000_000_000;
    /// The wall's announced reset: an hour after `T0`.
    const RESET_S: u64 = 1_800_003_600;
    const LANE_END: u64 = RESET_S * 1_000 + 60_000;
    const BUDGET: u64 = 600_000;
    const WEEK: u64 = 7 * 86_400_000;
    const OFF: Flags = Flags {
        low_priority_mode: false,
        auto_limit_reset: false,
    };
    const LOW: Flags = Flags {
        low_priority_mode: true,
        auto_limit_reset: false,
    };
    const AUTO: Flags = Flags {
        low_priority_mode: false,
        auto_limit_reset: true,
    };
    const BOTH: Flags = Flags {
        low_priority_mode: true,
        auto_limit_reset: true,
    };

    fn wall() -> UnifiedHeaders {
        UnifiedHeaders {
            rejected: true,
            reset_s: Some(RESET_S),
            slow_offered: true,
            ..UnifiedHeaders::default()
        }
    }

    fn slow(status: SlowStatus) -> UnifiedHeaders {
        UnifiedHeaders {
            slow_status: Some(status),
            ..UnifiedHeaders::default()
        }
    }

    fn resp(status: u16, headers: UnifiedHeaders) -> Response {
        Response {
            status,
            headers,
            sent_slow: true,
        }
    }

    fn first(status: u16, headers: UnifiedHeaders) -> Response {
        Response {
            sent_slow: false,
            ..resp(status, headers)
        }
    }

    /// A machine whose lane was accepted at `T0` from `headers`.
    fn lane_from(headers: UnifiedHeaders) -> UsageWall {
        let mut w = UsageWall::default();
        let d = w.on_response(
            &mut WallRequest::default(),
            LOW,
            first(429, headers),
            T0,
            BUDGET,
            0.0,
        );
        assert_eq!(d, Decision::RetrySlowNow);
        w
    }

    fn on(w: &mut UsageWall, flags: Flags, response: Response, now: u64) -> Decision {
        w.on_response(
            &mut WallRequest::default(),
            flags,
            response,
            now,
            BUDGET,
            0.0,
        )
    }

    #[test]
    fn header_parser() {
        let full = [
            ("Anthropic-RateLimit-Unified-Status", " Rejected "),
            ("anthropic-ratelimit-unified-reset", "1800003600"),
            ("anthropic-ratelimit-unified-5h-reset", "1800003660"),
            ("anthropic-ratelimit-unified-slow-offer", "treatment"),
            ("anthropic-ratelimit-unified-slow-status", "SLOT_BUSY"),
            ("anthropic-ratelimit-unified-slow-retry-after", "30"),
            ("anthropic-ratelimit-unified-slow-max-wait", "7200"),
            (
                "anthropic-ratelimit-unified-slow-budget-reset",
                "1800259200",
            ),
            ("anthropic-ratelimit-unified-overage-in-use", "TRUE"),
            ("content-type", "application/json"),
        ];
        let cases: Vec<(Vec<(&str, &str)>, UnifiedHeaders)> = vec![
            (vec![], UnifiedHeaders::default()),
            (
                full.to_vec(),
                UnifiedHeaders {
                    rejected: true,
                    reset_s: Some(1_800_003_600),
                    five_hour_reset_s: Some(1_800_003_660),
                    slow_offered: true,
                    slow_status: Some(SlowStatus::SlotBusy),
                    slow_retry_after_s: Some(30),
                    slow_max_wait_s: Some(7_200),
                    slow_budget_reset_s: Some(1_800_259_200),
                    overage_in_use: true,
                },
            ),
            (
                vec![
                    (headers::STATUS, "allowed"),
                    (headers::SLOW_OFFER, "control"),
                    (headers::OVERAGE_IN_USE, "false"),
                    (headers::SLOW_STATUS, "warming_up"),
                ],
                UnifiedHeaders::default(),
            ),
            (
                vec![
                    (headers::STATUS, "allowed_warning"),
                    (headers::RESET, "1.2"),
                    (headers::SLOW_RETRY_AFTER, "-3"),
                    (headers::SLOW_MAX_WAIT, "abc"),
                    (headers::SLOW_BUDGET_RESET, ""),
                    (headers::FIVE_HOUR_RESET, "inf"),
                ],
                UnifiedHeaders {
                    reset_s: Some(2),
                    ..UnifiedHeaders::default()
                },
            ),
            (
                vec![
                    (headers::STATUS, "rejected"),
                    (headers::STATUS, "allowed"),
                    (headers::SLOW_RETRY_AFTER, "0"),
                    (headers::SLOW_RETRY_AFTER, "40"),
                ],
                UnifiedHeaders {
                    rejected: true,
                    slow_retry_after_s: Some(0),
                    ..UnifiedHeaders::default()
                },
            ),
        ];
        for (pairs, want) in cases {
            assert_eq!(UnifiedHeaders::from_pairs(&pairs), want, "{pairs:?}");
        }
        let statuses = [
            ("active", SlowStatus::Active),
            ("not_needed", SlowStatus::NotNeeded),
            ("slot_busy", SlowStatus::SlotBusy),
            ("weekly_limit", SlowStatus::WeeklyLimit),
            ("budget_exhausted", SlowStatus::BudgetExhausted),
            ("off", SlowStatus::Off),
            ("ineligible", SlowStatus::Ineligible),
        ];
        for (value, want) in statuses {
            let h = UnifiedHeaders::from_pairs(&[(headers::SLOW_STATUS, value)]);
            assert_eq!(h.slow_status, Some(want), "{value}");
        }
    }

    #[test]
    fn retry_after_and_max_wait_clamps() {
        let retry = [
            (None, 20_000),
            (Some(0), 5_000),
            (Some(1), 5_000),
            (Some(5), 5_000),
            (Some(20), 20_000),
            (Some(600), 600_000),
            (Some(601), 600_000),
            (Some(9_999), 600_000),
            (Some(u64::MAX), 600_000),
        ];
        for (s, want) in retry {
            assert_eq!(slow_retry_after_ms(s), want, "{s:?}");
        }
        let max_wait = [
            (None, 1_200_000),
            (Some(10), 60_000),
            (Some(60), 60_000),
            (Some(1_200), 1_200_000),
            (Some(21_600), 21_600_000),
            (Some(1_000_000), 21_600_000),
            (Some(u64::MAX), 21_600_000),
        ];
        for (s, want) in max_wait {
            assert_eq!(slow_max_wait_ms(s), want, "{s:?}");
        }
    }

    #[test]
    fn jitter_is_thirty_percent_either_way() {
        let cases = [
            (20_000, -1.0, 14_000),
            (20_000, 0.0, 20_000),
            (20_000, 1.0, 26_000),
            (20_000, 0.5, 23_000),
            (20_000, -0.5, 17_000),
            (5_000, -1.0, 3_500),
            (5_000, 1.0, 6_500),
            (600_000, -1.0, 420_000),
            (600_000, 1.0, 780_000),
            (20_000, 2.0, 26_000),
            (20_000, -7.0, 14_000),
            (20_000, f64::NAN, 20_000),
            (0, 1.0, 0),
        ];
        for (base, j, want) in cases {
            assert_eq!(jittered_ms(base, j), want, "{base} {j}");
        }
    }

    #[test]
    fn flags_from_provider_specific_data() {
        let cases = [
            (json!(null), OFF),
            (json!({}), OFF),
            (json!([true]), OFF),
            (json!({"lowPriorityMode": true}), LOW),
            (json!({"autoLimitReset": true}), AUTO),
            (
                json!({"lowPriorityMode": true, "autoLimitReset": true}),
                BOTH,
            ),
            (json!({"lowPriorityMode": "true", "autoLimitReset": 1}), OFF),
            (
                json!({"lowPriorityMode": false, "autoLimitReset": null}),
                OFF,
            ),
        ];
        for (data, want) in cases {
            assert_eq!(Flags::from_provider_specific_data(&data), want, "{data}");
        }
        assert_eq!(Flags::default(), OFF);
    }

    #[test]
    fn both_flags_off_always_proceed() {
        let responses = [
            first(429, wall()),
            resp(429, wall()),
            resp(429, UnifiedHeaders::default()),
            resp(429, slow(SlowStatus::SlotBusy)),
            resp(529, UnifiedHeaders::default()),
            resp(200, slow(SlowStatus::Active)),
            resp(429, slow(SlowStatus::WeeklyLimit)),
        ];
        let mut fresh = UsageWall::default();
        let mut laned = lane_from(wall());
        let laned_before = laned.clone();
        for r in responses {
            assert_eq!(on(&mut fresh, OFF, r, T0), Decision::Proceed, "{r:?}");
            assert_eq!(on(&mut laned, OFF, r, T0 + 1), Decision::Proceed, "{r:?}");
        }
        assert_eq!(fresh, UsageWall::default());
        assert_eq!(laned, laned_before);
        assert!(!fresh.send_slow(OFF, T0));
        assert!(!laned.send_slow(OFF, T0 + 1));
        // The lane is back as soon as the flag is.
        assert!(laned.send_slow(LOW, T0 + 1));
    }

    #[test]
    fn nothing_is_sent_before_the_first_wall() {
        let mut w = UsageWall::default();
        for flags in [OFF, LOW, AUTO, BOTH] {
            assert!(!w.send_slow(flags, T0));
        }
        for r in [
            first(200, UnifiedHeaders::default()),
            first(429, UnifiedHeaders::default()),
            first(529, UnifiedHeaders::default()),
        ] {
            assert_eq!(on(&mut w, BOTH, r, T0), Decision::Proceed);
            assert!(!w.send_slow(BOTH, T0));
        }
    }

    #[test]
    fn what_is_not_an_acceptable_wall() {
        let cases = [
            // Not a wall at all.
            (200, wall()),
            (529, wall()),
            (
                429,
                UnifiedHeaders {
                    rejected: false,
                    ..wall()
                },
            ),
            (429, UnifiedHeaders::default()),
            // A wall without the offer (not eligible, or `control`).
            (
                429,
                UnifiedHeaders {
                    slow_offered: false,
                    ..wall()
                },
            ),
            // A wall without a reset, or one that has passed.
            (
                429,
                UnifiedHeaders {
                    reset_s: None,
                    ..wall()
                },
            ),
            (
                429,
                UnifiedHeaders {
                    reset_s: Some(T0 / 1_000),
                    ..wall()
                },
            ),
            (
                429,
                UnifiedHeaders {
                    reset_s: Some(T0 / 1_000 - 30),
                    ..wall()
                },
            ),
        ];
        for (status, headers) in cases {
            let mut w = UsageWall::default();
            assert_eq!(
                on(&mut w, LOW, first(status, headers), T0),
                Decision::Proceed,
                "{status} {headers:?}"
            );
            assert_eq!(w, UsageWall::default(), "{status} {headers:?}");
        }
    }

    #[test]
    fn the_lane_lasts_until_the_reset_plus_sixty_seconds() {
        let w = lane_from(wall());
        assert!(w.send_slow(LOW, T0));
        assert!(w.send_slow(LOW, RESET_S * 1_000));
        assert!(w.send_slow(LOW, LANE_END - 1));
        assert!(!w.send_slow(LOW, LANE_END));
        assert_eq!(w.status(LANE_END - 1).lane_active_until_ms, Some(LANE_END));
        assert_eq!(w.status(LANE_END).lane_active_until_ms, None);
        // Past the lane, a response is not read against it.
        let mut w = w;
        assert_eq!(
            on(&mut w, LOW, resp(429, slow(SlowStatus::SlotBusy)), LANE_END),
            Decision::Proceed
        );
        assert_eq!(w.status(LANE_END).last_exit, None);
    }

    #[test]
    fn acceptance_reads_the_reset_and_falls_back_to_the_5h_reset() {
        let w = lane_from(UnifiedHeaders {
            reset_s: None,
            five_hour_reset_s: Some(RESET_S + 100),
            ..wall()
        });
        assert_eq!(w.status(T0).lane_active_until_ms, Some(LANE_END + 100_000));
        let w = lane_from(UnifiedHeaders {
            reset_s: Some(T0 / 1_000 + 1),
            five_hour_reset_s: Some(RESET_S),
            ..wall()
        });
        assert_eq!(w.status(T0).lane_active_until_ms, Some(T0 + 61_000));
    }

    #[test]
    fn responses_that_keep_the_lane() {
        let cases = [
            resp(200, slow(SlowStatus::Active)),
            resp(200, slow(SlowStatus::NotNeeded)),
            resp(200, UnifiedHeaders::default()),
            resp(500, UnifiedHeaders::default()),
            // A 429 not marked busy: ordinary handling, the lane stays.
            resp(429, UnifiedHeaders::default()),
            resp(429, wall()),
            resp(429, slow(SlowStatus::Active)),
            // Busy only means something on a 429 or 529.
            resp(200, slow(SlowStatus::SlotBusy)),
            // A 5-hour reset less than 60 s later is not a roll.
            resp(
                200,
                UnifiedHeaders {
                    five_hour_reset_s: Some(RESET_S + 59),
                    ..slow(SlowStatus::Active)
                },
            ),
        ];
        for r in cases {
            let mut w = lane_from(wall());
            assert_eq!(on(&mut w, LOW, r, T0 + 1_000), Decision::Proceed, "{r:?}");
            assert!(w.send_slow(LOW, T0 + 1_000), "{r:?}");
            assert_eq!(w.status(T0 + 1_000).last_exit, None, "{r:?}");
        }
    }

    #[test]
    fn a_wall_to_a_request_sent_before_the_lane_joins_it() {
        let mut w = lane_from(wall());
        assert_eq!(
            on(&mut w, LOW, first(429, wall()), T0 + 1),
            Decision::RetrySlowNow
        );
        assert_eq!(
            on(&mut w, LOW, resp(429, wall()), T0 + 2),
            Decision::Proceed
        );
        assert!(w.send_slow(LOW, T0 + 2));
    }

    #[test]
    fn every_exit() {
        let rolled = UnifiedHeaders {
            five_hour_reset_s: Some(RESET_S + 60),
            ..UnifiedHeaders::default()
        };
        let overage = UnifiedHeaders {
            overage_in_use: true,
            ..slow(SlowStatus::Ineligible)
        };
        let cases = [
            (429, slow(SlowStatus::WeeklyLimit), ExitReason::WeeklyLimit),
            (200, slow(SlowStatus::WeeklyLimit), ExitReason::WeeklyLimit),
            (
                429,
                slow(SlowStatus::BudgetExhausted),
                ExitReason::BudgetExhausted,
            ),
            (429, slow(SlowStatus::Off), ExitReason::Off),
            (200, slow(SlowStatus::Off), ExitReason::Off),
            (429, slow(SlowStatus::Ineligible), ExitReason::Ineligible),
            (429, overage, ExitReason::ExtraUsage),
            (200, overage, ExitReason::ExtraUsage),
            (200, rolled, ExitReason::WindowRolled),
            (
                429,
                UnifiedHeaders {
                    five_hour_reset_s: Some(RESET_S + 5 * 3_600),
                    ..wall()
                },
                ExitReason::WindowRolled,
            ),
            // A terminal verdict wins over a roll and over a 529.
            (
                429,
                UnifiedHeaders {
                    five_hour_reset_s: Some(RESET_S + 60),
                    ..slow(SlowStatus::Off)
                },
                ExitReason::Off,
            ),
            (529, slow(SlowStatus::WeeklyLimit), ExitReason::WeeklyLimit),
        ];
        let now = T0 + 5_000;
        for (status, headers, reason) in cases {
            let mut w = lane_from(wall());
            assert_eq!(
                on(&mut w, LOW, resp(status, headers), now),
                Decision::Exit(reason),
                "{status} {headers:?}"
            );
            assert!(!w.send_slow(LOW, now));
            let st = w.status(now);
            assert_eq!(st.last_exit, Some(LastExit { reason, at_ms: now }));
            assert_eq!(st.lane_active_until_ms, None);
            assert_eq!(st.offer_blocked_until_ms, None, "{reason:?}");
            // These exits do not block the next wall's offer.
            assert_eq!(
                on(&mut w, LOW, first(429, wall()), now + 1),
                Decision::RetrySlowNow,
                "{reason:?}"
            );
        }
    }

    #[test]
    fn busy_waits_by_the_retry_after_with_jitter() {
        let busy = slow(SlowStatus::SlotBusy);
        let cases = [
            // (wall's retry-after, busy response, jitter, wait)
            (None, resp(429, busy), 0.0, 20_000),
            (None, resp(429, busy), -1.0, 14_000),
            (None, resp(429, busy), 1.0, 26_000),
            (None, resp(529, UnifiedHeaders::default()), 0.0, 20_000),
            (None, resp(529, slow(SlowStatus::Active)), 1.0, 26_000),
            (Some(1), resp(429, busy), 0.0, 5_000),
            (Some(1), resp(429, busy), -1.0, 3_500),
            (Some(9_999), resp(429, busy), 0.0, 600_000),
            (Some(9_999), resp(429, busy), 1.0, 780_000),
            (
                Some(100),
                resp(
                    429,
                    UnifiedHeaders {
                        slow_retry_after_s: Some(40),
                        ..busy
                    },
                ),
                0.0,
                40_000,
            ),
        ];
        for (announced, r, jitter, ms) in cases {
            let mut w = lane_from(UnifiedHeaders {
                slow_retry_after_s: announced,
                slow_max_wait_s: Some(21_600),
                ..wall()
            });
            let mut req = WallRequest::default();
            assert_eq!(
                w.on_response(&mut req, LOW, r, T0, 3_600_000, jitter),
                Decision::Wait { ms },
                "{announced:?} {r:?} {jitter}"
            );
            assert!(w.send_slow(LOW, T0));
        }
        // A hint on a response is kept for the next wait.
        let mut w = lane_from(wall());
        let mut req = WallRequest::default();
        let hinted = UnifiedHeaders {
            slow_retry_after_s: Some(45),
            ..slow(SlowStatus::Active)
        };
        assert_eq!(
            w.on_response(&mut req, LOW, resp(200, hinted), T0, BUDGET, 0.0),
            Decision::Proceed
        );
        assert_eq!(
            w.on_response(
                &mut req,
                LOW,
                resp(529, UnifiedHeaders::default()),
                T0,
                BUDGET,
                0.0
            ),
            Decision::Wait { ms: 45_000 }
        );
    }

    #[test]
    fn max_wait_ends_the_lane_and_cools_the_offer_off_for_ten_minutes() {
        // One-minute max-wait (10 s announced, clamped up), 20-second waits.
        let mut w = lane_from(UnifiedHeaders {
            slow_max_wait_s: Some(10),
            ..wall()
        });
        let busy = resp(429, slow(SlowStatus::SlotBusy));
        let mut req = WallRequest::default();
        let t1 = T0 + 1_000;
        for k in 0..3 {
            assert_eq!(
                w.on_response(&mut req, LOW, busy, t1 + k * 20_000, BUDGET, 0.0),
                Decision::Wait { ms: 20_000 },
                "{k}"
            );
        }
        // The third wait ended exactly at the max-wait; a fourth would pass it.
        let t_exit = t1 + 60_000;
        assert_eq!(
            w.on_response(&mut req, LOW, busy, t_exit, BUDGET, 0.0),
            Decision::Exit(ExitReason::MaxWait)
        );
        assert!(!w.send_slow(LOW, t_exit));
        let st = w.status(t_exit);
        assert_eq!(st.offer_blocked_until_ms, Some(t_exit + 600_000));
        assert_eq!(st.budget_exhausted_until_ms, None);
        assert_eq!(
            st.last_exit,
            Some(LastExit {
                reason: ExitReason::MaxWait,
                at_ms: t_exit
            })
        );
        assert_eq!(
            on(&mut w, LOW, first(429, wall()), t_exit + 599_999),
            Decision::Proceed
        );
        assert!(!w.send_slow(LOW, t_exit + 599_999));
        assert_eq!(w.status(t_exit + 600_000).offer_blocked_until_ms, None);
        assert_eq!(
            on(&mut w, LOW, first(429, wall()), t_exit + 600_000),
            Decision::RetrySlowNow
        );
    }

    #[test]
    fn max_wait_counts_from_each_requests_first_wait() {
        let mut w = lane_from(UnifiedHeaders {
            slow_max_wait_s: Some(60),
            ..wall()
        });
        let busy = resp(429, slow(SlowStatus::SlotBusy));
        let mut a = WallRequest::default();
        assert_eq!(
            w.on_response(&mut a, LOW, busy, T0, BUDGET, 0.0),
            Decision::Wait { ms: 20_000 }
        );
        // Another request starts its own clock 50 s later.
        let mut b = WallRequest::default();
        assert_eq!(
            w.on_response(&mut b, LOW, busy, T0 + 50_000, BUDGET, 0.0),
            Decision::Wait { ms: 20_000 }
        );
        // A's minute ends at T0 + 60 s: 45 s + 14 s (jitter -1) fits, 50 s + 20 s does not.
        assert_eq!(
            w.on_response(&mut a, LOW, busy, T0 + 45_000, BUDGET, -1.0),
            Decision::Wait { ms: 14_000 }
        );
        assert_eq!(
            w.on_response(&mut a, LOW, busy, T0 + 50_000, BUDGET, 0.0),
            Decision::Exit(ExitReason::MaxWait)
        );
    }

    #[test]
    fn waiting_is_bounded_by_the_start_budget_minus_five_seconds() {
        let busy = resp(429, slow(SlowStatus::SlotBusy));
        let cases = [
            (600_000, Decision::Wait { ms: 20_000 }),
            (25_001, Decision::Wait { ms: 20_000 }),
            (25_000, Decision::Wait { ms: 20_000 }),
            (24_999, Decision::Exit(ExitReason::MaxWait)),
            (5_000, Decision::Exit(ExitReason::MaxWait)),
            (0, Decision::Exit(ExitReason::MaxWait)),
        ];
        for (left, want) in cases {
            let mut w = lane_from(wall());
            let d = w.on_response(&mut WallRequest::default(), LOW, busy, T0, left, 0.0);
            assert_eq!(d, want, "{left}");
            let blocked = w.status(T0).offer_blocked_until_ms;
            if want == Decision::Exit(ExitReason::MaxWait) {
                assert_eq!(blocked, Some(T0 + 600_000), "{left}");
            } else {
                assert_eq!(blocked, None, "{left}");
            }
        }
    }

    #[test]
    fn budget_exhausted_is_remembered_until_the_announced_reset() {
        let now = T0 + 1_000;
        let three_days_s = (now + 3 * 86_400_000) / 1_000;
        let cases = [
            (Some(three_days_s), Some(three_days_s * 1_000)),
            (
                Some((now + 30 * 86_400_000) / 1_000),
                Some(now + 8 * 86_400_000),
            ),
            (Some(T0 / 1_000), None),
            (None, None),
        ];
        for (announced, until) in cases {
            let mut w = lane_from(wall());
            let h = UnifiedHeaders {
                slow_budget_reset_s: announced,
                ..slow(SlowStatus::BudgetExhausted)
            };
            assert_eq!(
                on(&mut w, LOW, resp(429, h), now),
                Decision::Exit(ExitReason::BudgetExhausted)
            );
            let st = w.status(now);
            assert_eq!(st.budget_exhausted_until_ms, until, "{announced:?}");
            assert_eq!(st.offer_blocked_until_ms, until, "{announced:?}");
            // A later wall whose reset is past the memory.
            let later = UnifiedHeaders {
                reset_s: Some((now + 9 * 86_400_000) / 1_000),
                ..wall()
            };
            match until {
                Some(t) => {
                    assert_eq!(on(&mut w, LOW, first(429, later), t - 1), Decision::Proceed);
                    assert_eq!(
                        on(&mut w, LOW, first(429, later), t),
                        Decision::RetrySlowNow
                    );
                }
                None => assert_eq!(
                    on(&mut w, LOW, first(429, later), now + 1),
                    Decision::RetrySlowNow
                ),
            }
        }
    }

    #[test]
    fn limit_reset_then_full_speed() {
        let cases = [
            (
                ResetAnswer::Reset {
                    next_available_at_ms: None,
                },
                T0 + WEEK,
            ),
            (
                ResetAnswer::Reset {
                    next_available_at_ms: Some(T0 + 86_400_000),
                },
                T0 + 86_400_000,
            ),
            (
                ResetAnswer::Reset {
                    next_available_at_ms: Some(T0),
                },
                T0 + WEEK,
            ),
            (
                ResetAnswer::NotLimited {
                    next_available_at_ms: None,
                },
                T0 + 900_000,
            ),
            (
                ResetAnswer::NotLimited {
                    next_available_at_ms: Some(T0 + 3_600_000),
                },
                T0 + 3_600_000,
            ),
        ];
        for (answer, until) in cases {
            for flags in [AUTO, BOTH] {
                let mut w = UsageWall::default();
                let mut req = WallRequest::default();
                assert_eq!(
                    w.on_response(&mut req, flags, first(429, wall()), T0, BUDGET, 0.0),
                    Decision::TryLimitReset
                );
                assert_eq!(
                    w.on_usage_check(&mut req, UsageCheck::Available, T0),
                    Decision::CallReset
                );
                assert_eq!(
                    w.on_reset_result(&mut req, answer, T0),
                    Decision::RetryFullSpeed,
                    "{answer:?}"
                );
                // Full speed: no slow header, no lane.
                assert!(!w.send_slow(flags, T0));
                assert_eq!(w.status(T0).reset_unavailable_until_ms, Some(until));
                // The same request walls again: no second reset, the lane if on.
                let again = w.on_response(&mut req, flags, first(429, wall()), T0 + 1, BUDGET, 0.0);
                let want = if flags == BOTH {
                    Decision::RetrySlowNow
                } else {
                    Decision::Proceed
                };
                assert_eq!(again, want, "{answer:?} {flags:?}");
            }
        }
    }

    #[test]
    fn limit_reset_not_available_falls_back_to_the_lane() {
        let usage = |check: UsageCheck| (check, None);
        let call = |answer: ResetAnswer| (UsageCheck::Available, Some(answer));
        let cases = [
            (
                usage(UsageCheck::NotOffered {
                    next_available_at_ms: None,
                }),
                T0 + WEEK,
            ),
            (
                usage(UsageCheck::NotOffered {
                    next_available_at_ms: Some(T0 + 2 * 86_400_000),
                }),
                T0 + 2 * 86_400_000,
            ),
            (usage(UsageCheck::Failed), T0 + 900_000),
            (
                call(ResetAnswer::AlreadyUsed {
                    next_available_at_ms: None,
                }),
                T0 + WEEK,
            ),
            (
                call(ResetAnswer::AlreadyUsed {
                    next_available_at_ms: Some(T0 + 3 * 86_400_000),
                }),
                T0 + 3 * 86_400_000,
            ),
            (
                call(ResetAnswer::AlreadyUsed {
                    next_available_at_ms: Some(T0 - 1),
                }),
                T0 + WEEK,
            ),
            (
                call(ResetAnswer::NotOffered {
                    next_available_at_ms: None,
                }),
                T0 + WEEK,
            ),
            (
                call(ResetAnswer::NotOffered {
                    next_available_at_ms: Some(T0 + 1),
                }),
                T0 + 1,
            ),
            (call(ResetAnswer::Failed), T0 + 900_000),
        ];
        for ((check, answer), until) in cases {
            for (flags, fallback) in [(BOTH, Decision::RetrySlowNow), (AUTO, Decision::Proceed)] {
                let mut w = UsageWall::default();
                let mut req = WallRequest::default();
                assert_eq!(
                    w.on_response(&mut req, flags, first(429, wall()), T0, BUDGET, 0.0),
                    Decision::TryLimitReset
                );
                let mut d = w.on_usage_check(&mut req, check, T0);
                if let Some(answer) = answer {
                    assert_eq!(d, Decision::CallReset);
                    d = w.on_reset_result(&mut req, answer, T0);
                }
                assert_eq!(d, fallback, "{check:?} {answer:?} {flags:?}");
                assert_eq!(w.send_slow(flags, T0), flags == BOTH);
                assert_eq!(
                    w.status(T0).reset_unavailable_until_ms,
                    Some(until),
                    "{check:?} {answer:?}"
                );
            }
        }
    }

    #[test]
    fn no_new_reset_attempt_while_unavailable() {
        let mut w = UsageWall::default();
        let mut req = WallRequest::default();
        assert_eq!(
            w.on_response(&mut req, AUTO, first(429, wall()), T0, BUDGET, 0.0),
            Decision::TryLimitReset
        );
        assert_eq!(
            w.on_usage_check(&mut req, UsageCheck::Failed, T0),
            Decision::Proceed
        );
        let back = T0 + 900_000;
        let cases = [
            (AUTO, back - 1, Decision::Proceed),
            (BOTH, back - 1, Decision::RetrySlowNow),
            (AUTO, back, Decision::TryLimitReset),
            (BOTH, back, Decision::TryLimitReset),
        ];
        for (flags, now, want) in cases {
            let mut w = w.clone();
            assert_eq!(
                on(&mut w, flags, first(429, wall()), now),
                want,
                "{flags:?} {now}"
            );
        }
        // Non-wall responses never start a reset attempt.
        let mut fresh = UsageWall::default();
        for r in [
            first(429, UnifiedHeaders::default()),
            first(529, wall()),
            first(200, wall()),
        ] {
            assert_eq!(on(&mut fresh, AUTO, r, T0), Decision::Proceed);
        }
    }

    #[test]
    fn the_reset_is_tried_before_the_lane_and_not_during_it() {
        let mut w = UsageWall::default();
        assert_eq!(
            on(&mut w, BOTH, first(429, wall()), T0),
            Decision::TryLimitReset
        );
        assert!(!w.send_slow(BOTH, T0));
        let mut w = lane_from(wall());
        assert_eq!(
            on(&mut w, BOTH, first(429, wall()), T0 + 1),
            Decision::RetrySlowNow
        );
        assert_eq!(
            on(&mut w, BOTH, resp(429, wall()), T0 + 1),
            Decision::Proceed
        );
    }

    #[test]
    fn a_fallback_offer_still_has_to_be_acceptable() {
        let mut w = UsageWall::default();
        let mut req = WallRequest::default();
        let control = UnifiedHeaders {
            slow_offered: false,
            ..wall()
        };
        assert_eq!(
            w.on_response(&mut req, BOTH, first(429, control), T0, BUDGET, 0.0),
            Decision::TryLimitReset
        );
        assert_eq!(
            w.on_usage_check(&mut req, UsageCheck::Failed, T0),
            Decision::Proceed
        );
        // The reset passed while the shell was calling.
        let mut req = WallRequest::default();
        let mut w = UsageWall::default();
        assert_eq!(
            w.on_response(&mut req, BOTH, first(429, wall()), T0, BUDGET, 0.0),
            Decision::TryLimitReset
        );
        assert_eq!(
            w.on_reset_result(&mut req, ResetAnswer::Failed, RESET_S * 1_000),
            Decision::Proceed
        );
    }

    /// One step of parallel requests on one connection; requests are numbered.
    #[derive(Debug, Clone, Copy)]
    enum Step {
        /// Request `n` gets a wall 429 (sent without the slow header) with this start
        /// budget left.
        Wall(usize, u64),
        Check(usize, UsageCheck),
        Reset(usize, ResetAnswer),
    }

    const WAIT: Decision = Decision::Wait { ms: 1_000 };
    const FULL: Decision = Decision::RetryFullSpeed;
    const TRY: Decision = Decision::TryLimitReset;
    const CALL: Decision = Decision::CallReset;
    const RESET: ResetAnswer = ResetAnswer::Reset {
        next_available_at_ms: None,
    };
    const USED: ResetAnswer = ResetAnswer::AlreadyUsed {
        next_available_at_ms: None,
    };
    const NOT_OFFERED: UsageCheck = UsageCheck::NotOffered {
        next_available_at_ms: None,
    };

    /// The answer to a wall outside an attempt: the lane with `lowPriorityMode`, else
    /// proceed.
    fn fallback(flags: Flags) -> Decision {
        if flags.low_priority_mode {
            Decision::RetrySlowNow
        } else {
            Decision::Proceed
        }
    }

    fn run(w: &mut UsageWall, flags: Flags, steps: &[(u64, Step, Decision)]) {
        let mut reqs = [WallRequest::default(); 4];
        for (i, &(now, step, want)) in steps.iter().enumerate() {
            let got = match step {
                Step::Wall(n, budget) => {
                    w.on_response(&mut reqs[n], flags, first(429, wall()), now, budget, 0.0)
                }
                Step::Check(n, check) => w.on_usage_check(&mut reqs[n], check, now),
                Step::Reset(n, answer) => w.on_reset_result(&mut reqs[n], answer, now),
            };
            assert_eq!(
                got,
                want,
                "step {i}: {step:?} at T0 + {} {flags:?}",
                now - T0
            );
        }
    }

    #[test]
    fn parallel_walls_wait_for_the_reset_in_flight() {
        use Step::*;
        let (a, b) = (0, 1);
        for flags in [AUTO, BOTH] {
            let mut w = UsageWall::default();
            run(
                &mut w,
                flags,
                &[
                    (T0, Wall(a, BUDGET), TRY),
                    (T0 + 100, Wall(b, BUDGET), WAIT),
                    (T0 + 200, Check(a, UsageCheck::Available), CALL),
                    (T0 + 1_100, Wall(b, BUDGET), WAIT),
                    (T0 + 1_500, Reset(a, RESET), FULL),
                    // B's retry after its wait was sent before the reset.
                    (T0 + 2_100, Wall(b, BUDGET), FULL),
                    // Once per request: the next wall is an ordinary one.
                    (T0 + 3_000, Wall(b, BUDGET), fallback(flags)),
                ],
            );
            let st = w.status(T0 + 3_000);
            assert_eq!(st.reset_unavailable_until_ms, Some(T0 + 1_500 + WEEK));
            assert_eq!(w.send_slow(flags, T0 + 3_000), flags == BOTH);
        }
    }

    #[test]
    fn walls_within_a_minute_of_a_reset_retry_at_full_speed_once() {
        use Step::*;
        let (a, c, d) = (0, 2, 3);
        let not_limited = ResetAnswer::NotLimited {
            next_available_at_ms: None,
        };
        for answer in [RESET, not_limited] {
            for flags in [AUTO, BOTH] {
                let mut w = UsageWall::default();
                run(
                    &mut w,
                    flags,
                    &[
                        (T0, Wall(a, BUDGET), TRY),
                        (T0 + 100, Check(a, UsageCheck::Available), CALL),
                        (T0 + 200, Reset(a, answer), FULL),
                        // Sent before the reset, answered at the end of the grace.
                        (T0 + 60_199, Wall(c, BUDGET), FULL),
                        (T0 + 60_200, Wall(d, BUDGET), fallback(flags)),
                        // The request that asked for the reset had its retry.
                        (T0 + 60_300, Wall(a, BUDGET), fallback(flags)),
                    ],
                );
            }
        }
        // Within the grace too, the retry is once per request.
        let mut w = UsageWall::default();
        run(
            &mut w,
            AUTO,
            &[
                (T0, Wall(a, BUDGET), TRY),
                (T0 + 100, Check(a, UsageCheck::Available), CALL),
                (T0 + 200, Reset(a, RESET), FULL),
                (T0 + 300, Wall(a, BUDGET), Decision::Proceed),
                (T0 + 400, Wall(c, BUDGET), FULL),
                (T0 + 500, Wall(c, BUDGET), Decision::Proceed),
                (T0 + 600, Wall(d, BUDGET), FULL),
            ],
        );
        // Not without `autoLimitReset`.
        assert_eq!(
            on(&mut w, LOW, first(429, wall()), T0 + 700),
            Decision::RetrySlowNow
        );
    }

    #[test]
    fn an_attempt_without_an_answer_is_lost_after_thirty_seconds() {
        use Step::*;
        let (a, b, c, d) = (0, 1, 2, 3);
        let mut w = UsageWall::default();
        run(
            &mut w,
            AUTO,
            &[
                // A never answers.
                (T0, Wall(a, BUDGET), TRY),
                (T0 + 29_999, Wall(b, BUDGET), WAIT),
                (T0 + 30_000, Wall(c, BUDGET), TRY),
                // B waits for C's attempt, up to 30 s from its own first wait.
                (T0 + 30_500, Wall(b, BUDGET), WAIT),
                (T0 + 58_999, Wall(b, BUDGET), WAIT),
                // B is done waiting; C's attempt is still in flight, so no second one.
                (T0 + 59_000, Wall(b, BUDGET), Decision::Proceed),
                (T0 + 59_999, Wall(d, BUDGET), WAIT),
                // C never answers either.
                (T0 + 60_000, Wall(d, BUDGET), TRY),
                (T0 + 60_100, Check(d, UsageCheck::Available), CALL),
                (T0 + 60_200, Reset(d, RESET), FULL),
                (T0 + 60_300, Wall(b, BUDGET), FULL),
                (T0 + 60_400, Wall(b, BUDGET), Decision::Proceed),
            ],
        );
        assert_eq!(
            w.status(T0 + 60_400).reset_unavailable_until_ms,
            Some(T0 + 60_200 + WEEK)
        );
    }

    #[test]
    fn a_wait_for_the_reset_has_to_fit_the_start_budget() {
        use Step::*;
        let (a, b) = (0, 1);
        for flags in [AUTO, BOTH] {
            let cases = [
                (BUDGET, WAIT),
                (6_001, WAIT),
                (6_000, WAIT),
                (5_999, fallback(flags)),
                (5_000, fallback(flags)),
                (0, fallback(flags)),
            ];
            for (left, want) in cases {
                let mut w = UsageWall::default();
                run(
                    &mut w,
                    flags,
                    &[(T0, Wall(a, BUDGET), TRY), (T0 + 100, Wall(b, left), want)],
                );
                // A lane accepted meanwhile ends with the reset.
                let laned = flags == BOTH && want != WAIT;
                assert_eq!(w.send_slow(flags, T0 + 100), laned, "{left} {flags:?}");
                let mut req = WallRequest::default();
                let check = w.on_usage_check(&mut req, UsageCheck::Available, T0 + 200);
                assert_eq!(check, CALL);
                assert_eq!(w.on_reset_result(&mut req, RESET, T0 + 300), FULL);
                assert!(!w.send_slow(flags, T0 + 300), "{left} {flags:?}");
                assert_eq!(w.status(T0 + 300).lane_active_until_ms, None);
                assert_eq!(w.status(T0 + 300).last_exit, None);
            }
        }
    }

    #[test]
    fn any_answer_ends_the_attempt_in_flight() {
        use Step::*;
        let (a, b) = (0, 1);
        let call = |answer| [Check(a, UsageCheck::Available), Reset(a, answer)];
        let outcomes: [&[Step]; 5] = [
            &[Check(a, NOT_OFFERED)],
            &[Check(a, UsageCheck::Failed)],
            &call(USED),
            &call(ResetAnswer::NotOffered {
                next_available_at_ms: None,
            }),
            &call(ResetAnswer::Failed),
        ];
        for outcome in outcomes {
            for flags in [AUTO, BOTH] {
                let mut steps = vec![(T0, Wall(a, BUDGET), TRY)];
                let mut decisions = vec![CALL];
                decisions.truncate(outcome.len() - 1);
                decisions.push(fallback(flags));
                steps.extend(
                    outcome
                        .iter()
                        .zip(decisions)
                        .map(|(s, d)| (T0 + 100, *s, d)),
                );
                // Neither a wait nor a new attempt: the reset is unavailable now.
                steps.push((T0 + 200, Wall(b, BUDGET), fallback(flags)));
                run(&mut UsageWall::default(), flags, &steps);
            }
        }
    }

    #[test]
    fn an_attempt_that_lost_the_race_retries_at_full_speed() {
        use Step::*;
        let (a, b) = (0, 1);
        let reset_at = T0 + 30_300;
        let grace_end = reset_at + 60_000;
        let lost: [&[Step]; 5] = [
            &[Check(b, NOT_OFFERED)],
            &[Check(b, UsageCheck::Failed)],
            &[Reset(b, USED)],
            &[Reset(
                b,
                ResetAnswer::NotOffered {
                    next_available_at_ms: None,
                },
            )],
            &[Reset(b, ResetAnswer::Failed)],
        ];
        for outcome in lost {
            for (t, want) in [(grace_end - 1, FULL), (grace_end, Decision::Proceed)] {
                let mut steps = vec![
                    (T0, Wall(a, BUDGET), TRY),
                    // A's attempt is late, so B starts its own.
                    (T0 + 30_000, Wall(b, BUDGET), TRY),
                    (T0 + 30_100, Check(a, UsageCheck::Available), CALL),
                ];
                if matches!(outcome[0], Reset(..)) {
                    steps.push((T0 + 30_200, Check(b, UsageCheck::Available), CALL));
                }
                steps.push((reset_at, Reset(a, RESET), FULL));
                steps.push((t, outcome[0], want));
                steps.push((t + 1, Wall(b, BUDGET), Decision::Proceed));
                run(&mut UsageWall::default(), AUTO, &steps);
            }
        }
        // With the lane on, B's own wall is the fallback once the grace is over.
        run(
            &mut UsageWall::default(),
            BOTH,
            &[
                (T0, Wall(a, BUDGET), TRY),
                (T0 + 30_000, Wall(b, BUDGET), TRY),
                (T0 + 30_100, Check(a, UsageCheck::Available), CALL),
                (T0 + 30_200, Check(b, UsageCheck::Available), CALL),
                (reset_at, Reset(a, RESET), FULL),
                (grace_end, Reset(b, USED), Decision::RetrySlowNow),
            ],
        );
    }

    #[test]
    fn usage_check_parser() {
        let cases = [
            (
                json!({"juniper_tide": {"arm": "reset", "available": true}}),
                UsageCheck::Available,
            ),
            (
                json!({"juniper_tide": {"eligible": true, "arm": "reset", "available": true,
                        "next_available_at": "2026-01-01T00:00:00Z"}}),
                UsageCheck::Available,
            ),
            (
                json!({"juniper_tide": {"arm": "control", "available": true}}),
                UsageCheck::NotOffered {
                    next_available_at_ms: None,
                },
            ),
            (
                json!({"juniper_tide": {"arm": "reset", "available": false,
                        "next_available_at": 1_800_000_000}}),
                UsageCheck::NotOffered {
                    next_available_at_ms: Some(1_800_000_000_000),
                },
            ),
            (
                json!({"juniper_tide": {"arm": "reset", "available": "true",
                        "next_available_at": "2026-01-01T00:00:00Z"}}),
                UsageCheck::NotOffered {
                    next_available_at_ms: Some(1_767_225_600_000),
                },
            ),
            (
                json!({"juniper_tide": {}}),
                UsageCheck::NotOffered {
                    next_available_at_ms: None,
                },
            ),
            (json!({"juniper_tide": null}), UsageCheck::Failed),
            (json!({"juniper_tide": [1]}), UsageCheck::Failed),
            (json!({"five_hour": {}}), UsageCheck::Failed),
            (json!("juniper_tide"), UsageCheck::Failed),
            (json!(null), UsageCheck::Failed),
        ];
        for (body, want) in cases {
            assert_eq!(parse_usage_check(&body), want, "{body}");
        }
    }

    #[test]
    fn reset_answer_parser() {
        let cases = [
            (
                json!({"result": "reset"}),
                ResetAnswer::Reset {
                    next_available_at_ms: None,
                },
            ),
            (
                json!({"result": "reset", "next_available_at": "2026-01-01T02:00:00+02:00"}),
                ResetAnswer::Reset {
                    next_available_at_ms: Some(1_767_225_600_000),
                },
            ),
            (
                json!({"result": "not_limited", "next_available_at": 1.5}),
                ResetAnswer::NotLimited {
                    next_available_at_ms: Some(1_500),
                },
            ),
            (
                json!({"result": "already_used", "next_available_at": 1_800_000_000}),
                ResetAnswer::AlreadyUsed {
                    next_available_at_ms: Some(1_800_000_000_000),
                },
            ),
            (
                json!({"result": "already_used"}),
                ResetAnswer::AlreadyUsed {
                    next_available_at_ms: None,
                },
            ),
            (
                json!({"result": "not_offered", "next_available_at": -5}),
                ResetAnswer::NotOffered {
                    next_available_at_ms: None,
                },
            ),
            (
                json!({"result": "not_offered", "next_available_at": true}),
                ResetAnswer::NotOffered {
                    next_available_at_ms: None,
                },
            ),
            (
                json!({"result": "already_used", "next_available_at": "soon"}),
                ResetAnswer::AlreadyUsed {
                    next_available_at_ms: None,
                },
            ),
            (json!({"result": "ineligible"}), ResetAnswer::Failed),
            (json!({"result": "RESET"}), ResetAnswer::Failed),
            (json!({"result": 1}), ResetAnswer::Failed),
            (json!({}), ResetAnswer::Failed),
            (json!([]), ResetAnswer::Failed),
            (json!(null), ResetAnswer::Failed),
        ];
        for (body, want) in cases {
            assert_eq!(parse_reset_answer(&body), want, "{body}");
        }
    }

    #[test]
    fn rfc3339_parser() {
        let cases = [
            ("2026-01-01T00:00:00Z", Some(1_767_225_600_000)),
            (" 2026-01-01t00:00:00z ", Some(1_767_225_600_000)),
            ("2026-01-01 00:00:00Z", Some(1_767_225_600_000)),
            ("2026-01-01T00:00:00.123Z", Some(1_767_225_600_123)),
            ("2026-01-01T00:00:00.1Z", Some(1_767_225_600_100)),
            ("2026-01-01T00:00:00.123999Z", Some(1_767_225_600_123)),
            ("2026-01-01T02:00:00+02:00", Some(1_767_225_600_000)),
            ("2025-12-31T18:30:00-05:30", Some(1_767_225_600_000)),
            ("2024-02-29T12:34:56Z", Some(1_709_210_096_000)),
            ("2000-03-01T00:00:00Z", Some(951_868_800_000)),
            ("1970-01-01T00:00:00Z", Some(0)),
            ("9999-12-31T23:59:59Z", Some(253_402_300_799_000)),
            ("1969-12-31T23:59:59Z", None),
            ("1970-01-01T00:00:00+00:01", None),
            ("2023-02-29T00:00:00Z", None),
            ("1900-02-29T00:00:00Z", None),
            ("2026-13-01T00:00:00Z", None),
            ("2026-00-01T00:00:00Z", None),
            ("2026-04-31T00:00:00Z", None),
            ("2026-01-00T00:00:00Z", None),
            ("2026-01-01T24:00:00Z", None),
            ("2026-01-01T00:60:00Z", None),
            ("2026-01-01T00:00:60Z", None),
            ("2026-01-01T00:00:00", None),
            ("2026-01-01T00:00:00.Z", None),
            ("2026-01-01T00:00:00+0200", None),
            ("2026-01-01T00:00:00+24:00", None),
            ("2026-01-01T00:00:00+02:60", None),
            ("2026-01-01T00:00:00Zx", None),
            ("2026-01-01", None),
            ("2026/01/01T00:00:00Z", None),
            ("20x6-01-01T00:00:00Z", None),
            ("", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_rfc3339_ms(s), want, "{s}");
        }
    }

    #[test]
    fn status_at_an_instant() {
        let mut w = lane_from(wall());
        assert_eq!(
            w.status(T0),
            Status {
                lane_active_until_ms: Some(LANE_END),
                ..Status::default()
            }
        );
        let busy = resp(429, slow(SlowStatus::SlotBusy));
        assert_eq!(
            w.on_response(&mut WallRequest::default(), BOTH, busy, T0, 4_000, 0.0),
            Decision::Exit(ExitReason::MaxWait)
        );
        // The next wall tries a reset, which fails; the cool-off keeps the lane shut.
        let mut req = WallRequest::default();
        assert_eq!(
            w.on_response(&mut req, BOTH, first(429, wall()), T0, BUDGET, 0.0),
            Decision::TryLimitReset
        );
        assert_eq!(
            w.on_usage_check(&mut req, UsageCheck::Failed, T0),
            Decision::Proceed
        );
        assert_eq!(
            w.status(T0),
            Status {
                lane_active_until_ms: None,
                last_exit: Some(LastExit {
                    reason: ExitReason::MaxWait,
                    at_ms: T0
                }),
                offer_blocked_until_ms: Some(T0 + 600_000),
                budget_exhausted_until_ms: None,
                reset_unavailable_until_ms: Some(T0 + 900_000),
            }
        );
        // The cool-off ran out; a new lane ends in budget exhaustion for a day.
        let t = T0 + 600_000;
        assert_eq!(
            on(&mut w, BOTH, first(429, wall()), t),
            Decision::RetrySlowNow
        );
        let h = UnifiedHeaders {
            slow_budget_reset_s: Some(T0 / 1_000 + 86_400),
            ..slow(SlowStatus::BudgetExhausted)
        };
        assert_eq!(
            on(&mut w, BOTH, resp(429, h), t),
            Decision::Exit(ExitReason::BudgetExhausted)
        );
        let day = T0 + 86_400_000;
        assert_eq!(
            w.status(t),
            Status {
                lane_active_until_ms: None,
                last_exit: Some(LastExit {
                    reason: ExitReason::BudgetExhausted,
                    at_ms: t
                }),
                offer_blocked_until_ms: Some(day),
                budget_exhausted_until_ms: Some(day),
                reset_unavailable_until_ms: Some(T0 + 900_000),
            }
        );
        assert_eq!(
            w.status(day),
            Status {
                last_exit: Some(LastExit {
                    reason: ExitReason::BudgetExhausted,
                    at_ms: t
                }),
                ..Status::default()
            }
        );
        assert_eq!(
            serde_json::to_value(w.status(day - 1)).unwrap(),
            json!({
                "lane_active_until_ms": null,
                "last_exit": {"reason": "budget_exhausted", "at_ms": t},
                "offer_blocked_until_ms": day,
                "budget_exhausted_until_ms": day,
                "reset_unavailable_until_ms": null,
            })
        );
    }

    #[test]
    fn exit_reason_names() {
        let cases = [
            (ExitReason::WeeklyLimit, "weekly_limit"),
            (ExitReason::BudgetExhausted, "budget_exhausted"),
            (ExitReason::Off, "off"),
            (ExitReason::Ineligible, "ineligible"),
            (ExitReason::WindowRolled, "window_rolled"),
            (ExitReason::ExtraUsage, "extra_usage"),
            (ExitReason::MaxWait, "max_wait"),
        ];
        for (reason, name) in cases {
            assert_eq!(reason.as_str(), name);
            assert_eq!(serde_json::to_value(reason).unwrap(), json!(name));
        }
    }

    #[test]
    fn wire_constants() {
        assert_eq!(
            reset_path("0b7c5f9e-1d2a-4c3b-9e8f-7a6b5c4d3e2f"),
            "/api/organizations/0b7c5f9e-1d2a-4c3b-9e8f-7a6b5c4d3e2f/reset_rate_limits"
        );
        assert_eq!(reset_body().to_string(), r#"{"program":"juniper_tide"}"#);
        assert_eq!(USAGE_CHECK_PATH, "/api/oauth/usage?at_wall=1&skip_spend=1");
        assert_eq!(
            (SLOW_REQUEST_HEADER, SLOW_REQUEST_VALUE),
            ("anthropic-usage-limit", "slow")
        );
    }
}
