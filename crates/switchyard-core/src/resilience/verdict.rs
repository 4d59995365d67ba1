//! The one classifier of a failed attempt (SPEC R3, R5, R11, R13, R14): what an upstream
//! answer, a transport failure or a stream's cut means, as a [`Verdict`] that says what
//! happens next (another candidate, the same account once more, or the client sees the
//! answer) and what the resilience state records (breaker, connection health, model
//! lock, provider cooldown, the egress fan-out). Nothing else classifies.
//!
//! The steps, in order:
//! 1. a status restatement ([`super::rules::Restatement`]) corrects a status that
//!    misstates the failure (agentrouter's 403 "额度不足" is a 429);
//! 2. the first classification rule of the provider's family that matches names the
//!    cause, and — when the family's scope is honoured — where it holds and how long;
//! 3. otherwise the generic table decides by status, with the generic body markers
//!    (credits gone, context too long).
//!
//! A client error (a 400, or a context too long for this model) never cools an
//! account: only a rule says a 400 is the provider's fault.

use super::cooldown::{self, ErrorType};
use super::lockout;
use super::rules::{Rules, EGRESS_BUCKETED_FAMILIES};
use crate::outcome::{is_retryable_status, AttemptFailure, StreamCut};
use crate::UnixMillis;
use serde::{Deserialize, Serialize};

/// Why an attempt failed, as rules and the request log name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    RateLimitExceeded,
    QuotaExhausted,
    CreditsExhausted,
    AuthError,
    Forbidden,
    ModelNotFound,
    ContextOverflow,
    BadRequest,
    ClientError,
    ServerError,
    Overloaded,
    Unreachable,
    InvalidResponse,
    StreamStall,
    StreamBroken,
    StreamError,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RateLimitExceeded => "rate_limit_exceeded",
            Self::QuotaExhausted => "quota_exhausted",
            Self::CreditsExhausted => "credits_exhausted",
            Self::AuthError => "auth_error",
            Self::Forbidden => "forbidden",
            Self::ModelNotFound => "model_not_found",
            Self::ContextOverflow => "context_overflow",
            Self::BadRequest => "bad_request",
            Self::ClientError => "client_error",
            Self::ServerError => "server_error",
            Self::Overloaded => "overloaded",
            Self::Unreachable => "unreachable",
            Self::InvalidResponse => "invalid_response",
            Self::StreamStall => "stream_stall",
            Self::StreamBroken => "stream_broken",
            Self::StreamError => "stream_error",
        }
    }

    /// What the request does next after a failure of this cause.
    fn next(self) -> Next {
        match self {
            Self::ContextOverflow => Next::Advance,
            Self::AuthError
            | Self::Forbidden
            | Self::ModelNotFound
            | Self::BadRequest
            | Self::ClientError => Next::Client,
            _ => Next::Candidate,
        }
    }

    /// What it says of the account's health.
    fn health(self) -> Option<ErrorType> {
        match self {
            Self::RateLimitExceeded | Self::QuotaExhausted => Some(ErrorType::RateLimited),
            Self::CreditsExhausted => Some(ErrorType::CreditsExhausted),
            Self::AuthError => Some(ErrorType::AuthFailed),
            Self::Forbidden => Some(ErrorType::RequestRejected),
            Self::ServerError | Self::Overloaded | Self::Unreachable | Self::InvalidResponse => {
                Some(ErrorType::Transient)
            }
            _ => None,
        }
    }

    /// Whether it counts against the provider (breaker, provider cooldown).
    fn counts_for_provider(self) -> bool {
        matches!(
            self,
            Self::ServerError
                | Self::Overloaded
                | Self::Unreachable
                | Self::InvalidResponse
                | Self::StreamBroken
                | Self::StreamError
                | Self::StreamStall
        )
    }
}

/// Where a rule's failure holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The model on this connection; the rest of the account keeps serving.
    Model,
    /// The whole connection (account), never terminal.
    Connection,
    /// Every connection of the provider.
    Provider,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Model => "model",
            Self::Connection => "connection",
            Self::Provider => "provider",
        }
    }
}

/// What the request does after the failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Try the next candidate.
    Candidate,
    /// Try the next candidate, but if none answers the client gets this answer (a
    /// context too long here may fit a larger window).
    Advance,
    /// Try the same account once more, then go on (a crawl before commit, SPEC R12).
    SameOnce,
    /// Stop: the answer is the client's to see.
    Client,
}

/// A model lock a verdict asks for (SPEC R5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHit {
    pub status: u16,
    pub scope: lockout::Scope,
    /// A rule's lock: taken even when model lockout is off or the status is not one of
    /// its `errorCodes`, for the rule's cooldown when it gives one.
    pub forced: bool,
}

/// What a failed attempt means; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The failure as decisions and the client see it: a restated status replaces the
    /// upstream's.
    pub failure: AttemptFailure,
    /// The status the upstream sent, when it answered.
    pub upstream_status: Option<u16>,
    pub cause: Cause,
    /// The classification rule that named the cause.
    pub rule: Option<String>,
    /// The restatement that changed the status.
    pub restated_by: Option<String>,
    /// The scope a rule set and the gateway acts on (`None`: the generic scopes).
    pub scope: Option<Scope>,
    pub next: Next,
    /// Counts against the provider's breaker and its provider cooldown.
    pub breaker: bool,
    /// What the connection's health records (cooldown, terminal states).
    pub health: Option<ErrorType>,
    /// How long a rule says the connection cools or the model locks.
    pub cooldown_ms: Option<u64>,
    pub lock: Option<LockHit>,
    /// A rule's provider-wide cooldown.
    pub provider_cooldown_ms: Option<u64>,
    /// When the upstream said to come back.
    pub retry_at: Option<UnixMillis>,
    /// What the client is told to wait when the upstream said nothing (a restatement's
    /// default).
    pub client_retry_after_ms: Option<u64>,
    /// Every connection of the family behind the same egress address cools too (R14).
    pub egress: bool,
}

/// What was seen of a failed attempt.
#[derive(Debug, Clone, Copy)]
pub enum Answer<'a> {
    /// No usable answer: a transport failure, an invalid answer or a stream's cut.
    Failed(AttemptFailure),
    /// An error status, its headers and the start of its (redacted) body.
    Status {
        status: u16,
        headers: &'a [(&'a str, &'a str)],
        body: &'a str,
    },
    /// A stream's own error event (its data), inside a 200 answer.
    StreamError { event: &'a str },
}

/// The attempt's provider family and model.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    pub family: &'a str,
    pub model: &'a str,
}

/// Generic markers of an account out of credits (any provider, any status it sends
/// them with: 429).
const CREDIT_MARKERS: &[&str] = &[
    "insufficient_quota",
    "insufficient credits",
    "credit balance",
];

/// Generic markers of a prompt too long for the model's context window (on a 400).
const CONTEXT_MARKERS: &[&str] = &[
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "prompt is too long",
];

/// Generic markers of a subscription's monthly quota used up (on a 429): a quota that
/// comes back, but not in seconds.
const MONTHLY_QUOTA_MARKERS: &[&str] = &["monthly usage limit", "monthly limit reached"];

/// How long a used-up monthly quota cools its account when the upstream does not say
/// (the seed's subscription-quota fallback).
pub const MONTHLY_QUOTA_COOLDOWN_MS: u64 = 3_600_000;

/// Whether `text` contains any marker, ASCII case-insensitively.
fn contains_any(text: &str, markers: &[impl AsRef<str>]) -> bool {
    if markers.is_empty() || text.is_empty() {
        return false;
    }
    let lower = text.to_ascii_lowercase();
    markers
        .iter()
        .any(|m| lower.contains(&m.as_ref().to_ascii_lowercase()))
}

/// The structured `code` and `type` of an error body or event, wherever the formats
/// put them.
fn error_codes(text: &str) -> Vec<String> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
        return Vec::new();
    };
    [
        "/error/code",
        "/error/type",
        "/response/error/code",
        "/response/error/type",
    ]
    .iter()
    .filter_map(|p| v.pointer(p))
    .filter_map(|c| match c {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
    .collect()
}

/// What a rule match needs of the answer.
struct Seen<'a> {
    /// The status after restatement; `None` for a stream's error event.
    status: Option<u16>,
    headers: &'a [(&'a str, &'a str)],
    codes: &'a [String],
    /// The text rules may read (empty when the family's full text is not theirs).
    text: &'a str,
}

impl super::rules::ErrorRule {
    fn matches(&self, seen: &Seen<'_>) -> bool {
        let status_ok = match seen.status {
            None => self.statuses.contains(&200),
            Some(s) => self.statuses.is_empty() || self.statuses.contains(&s),
        };
        status_ok
            && self
                .headers
                .iter()
                .all(|h| seen.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(h)))
            && (self.codes.is_empty() || self.codes.iter().any(|c| seen.codes.contains(c)))
            && (self.text_markers.is_empty() || contains_any(seen.text, &self.text_markers))
            && !contains_any(seen.text, &self.exclude_markers)
    }
}

/// The generic cause of an error status.
fn generic_cause(status: u16, body: &str) -> Cause {
    match status {
        402 => Cause::CreditsExhausted,
        429 if contains_any(body, CREDIT_MARKERS) => Cause::CreditsExhausted,
        429 if contains_any(body, MONTHLY_QUOTA_MARKERS) => Cause::QuotaExhausted,
        429 => Cause::RateLimitExceeded,
        401 => Cause::AuthError,
        403 => Cause::Forbidden,
        404 => Cause::ModelNotFound,
        400 if contains_any(body, CONTEXT_MARKERS) => Cause::ContextOverflow,
        400 => Cause::BadRequest,
        529 => Cause::Overloaded,
        s if s == 408 || s >= 500 => Cause::ServerError,
        _ => Cause::ClientError,
    }
}

/// Statuses whose failure counts against the provider in the generic table.
fn provider_status(status: u16) -> bool {
    matches!(status, 408 | 500 | 502 | 503 | 504 | 529)
}

/// Judges a failed attempt of `subject` at `now`; see the module docs.
pub fn judge(rules: &Rules, subject: Subject<'_>, answer: Answer<'_>, now: UnixMillis) -> Verdict {
    match answer {
        Answer::Failed(AttemptFailure::Status(status)) => {
            judge_status(rules, subject, status, &[], "", now)
        }
        Answer::Failed(failure) => transport(rules, subject, failure),
        Answer::Status {
            status,
            headers,
            body,
        } => judge_status(rules, subject, status, headers, body, now),
        Answer::StreamError { event } => stream_error(rules, subject, event),
    }
}

/// A verdict before rules: `cause` with its generic consequences.
fn base(failure: AttemptFailure, upstream_status: Option<u16>, cause: Cause) -> Verdict {
    Verdict {
        failure,
        upstream_status,
        cause,
        rule: None,
        restated_by: None,
        scope: None,
        next: cause.next(),
        breaker: cause.counts_for_provider(),
        health: cause.health(),
        cooldown_ms: None,
        lock: None,
        provider_cooldown_ms: None,
        retry_at: None,
        client_retry_after_ms: None,
        egress: false,
    }
}

/// A failure without an answer to read.
fn transport(rules: &Rules, subject: Subject<'_>, failure: AttemptFailure) -> Verdict {
    match failure {
        AttemptFailure::Stream(cut) => {
            let cause = match cut {
                StreamCut::Broken => Cause::StreamBroken,
                StreamCut::Error => Cause::StreamError,
                _ => Cause::StreamStall,
            };
            Verdict {
                next: if cut == StreamCut::Throughput {
                    Next::SameOnce
                } else {
                    Next::Candidate
                },
                // A crawl is a long answer more often than a sick provider.
                breaker: cut != StreamCut::Throughput,
                // No cooldown by default (SPEC R11); `streamStallCooldown` cools stalls.
                health: (cut.is_stall() && rules.stream_stall_cooldown)
                    .then_some(ErrorType::Transient),
                ..base(failure, None, cause)
            }
        }
        AttemptFailure::InvalidResponse => Verdict {
            // The gateway's own quality 502 (SPEC R5).
            lock: Some(LockHit {
                status: 502,
                scope: lockout::Scope::for_status(502, subject.model),
                forced: false,
            }),
            ..base(failure, None, Cause::InvalidResponse)
        },
        AttemptFailure::Connect
        | AttemptFailure::FirstByteTimeout
        | AttemptFailure::Reset
        | AttemptFailure::Status(_) => base(failure, None, Cause::Unreachable),
    }
}

/// A stream's own error event.
fn stream_error(rules: &Rules, subject: Subject<'_>, event: &str) -> Verdict {
    let failure = AttemptFailure::Stream(StreamCut::Error);
    let codes = error_codes(event);
    let text = if rules.full_text(subject.family) {
        event
    } else {
        ""
    };
    let seen = Seen {
        status: None,
        headers: &[],
        codes: &codes,
        text,
    };
    let mut v = base(failure, None, Cause::StreamError);
    if let Some(rule) = rules
        .rules
        .iter()
        .find(|r| r.provider.eq_ignore_ascii_case(subject.family) && r.matches(&seen))
    {
        apply_rule(&mut v, rules, subject, rule, None);
        // A stream's cut fails over before commit whatever its cause.
        if v.next == Next::Client {
            v.next = Next::Candidate;
        }
    }
    v
}

/// An error status.
fn judge_status(
    rules: &Rules,
    subject: Subject<'_>,
    upstream: u16,
    headers: &[(&str, &str)],
    body: &str,
    now: UnixMillis,
) -> Verdict {
    let family = subject.family;
    let restatement = rules.restatements.iter().find(|r| {
        r.provider.eq_ignore_ascii_case(family)
            && r.from_statuses.contains(&upstream)
            && contains_any(body, &r.text_markers)
            && !contains_any(body, &r.exclude_markers)
    });
    let status = restatement.map_or(upstream, |r| r.to_status);
    let mut v = base(
        AttemptFailure::Status(status),
        Some(upstream),
        generic_cause(status, body),
    );
    if v.cause == Cause::QuotaExhausted {
        v.cooldown_ms = Some(MONTHLY_QUOTA_COOLDOWN_MS);
    }
    v.restated_by = restatement.map(|r| r.id.clone());
    v.client_retry_after_ms = restatement.and_then(|r| r.default_retry_after_ms);
    if restatement.is_none() {
        // The generic table goes by status where no rule speaks.
        v.next = if is_retryable_status(status) {
            Next::Candidate
        } else if v.cause == Cause::ContextOverflow {
            Next::Advance
        } else {
            Next::Client
        };
        v.breaker = provider_status(status);
    }
    v.lock = (status != 400).then(|| LockHit {
        status,
        scope: lockout::Scope::for_status(status, subject.model),
        forced: false,
    });
    // Reset text counts in a rate limit's body, or a refusal's; a server error's body
    // says nothing about the account's window.
    let reset_text = if status == 429 || !is_retryable_status(status) {
        body
    } else {
        ""
    };
    v.retry_at = cooldown::announced_reset(headers, reset_text, now);
    let codes = error_codes(body);
    let text = if rules.full_text(family) { body } else { "" };
    let seen = Seen {
        status: Some(status),
        headers,
        codes: &codes,
        text,
    };
    // What the body itself says (credits gone, context too long) is more specific than
    // a rule on the status alone.
    let said_by_body = restatement.is_none()
        && matches!(
            v.cause,
            Cause::CreditsExhausted | Cause::ContextOverflow | Cause::QuotaExhausted
        )
        && status != 402;
    if let Some(rule) = rules.rules.iter().find(|r| {
        r.provider.eq_ignore_ascii_case(family)
            && r.matches(&seen)
            && !(said_by_body && r.text_markers.is_empty() && r.codes.is_empty())
    }) {
        apply_rule(&mut v, rules, subject, rule, Some(status));
    }
    v.egress = status == 429
        && matches!(v.cause, Cause::RateLimitExceeded | Cause::QuotaExhausted)
        && EGRESS_BUCKETED_FAMILIES.contains(&family);
    if v.egress {
        // The address is what ran out: the connection is the unit, not a model.
        v.lock = None;
    }
    v
}

/// A matching rule names the cause; its scope and cooldown hold when the family's scope
/// is honoured.
fn apply_rule(
    v: &mut Verdict,
    rules: &Rules,
    subject: Subject<'_>,
    rule: &super::rules::ErrorRule,
    status: Option<u16>,
) {
    let cause = rule.reason;
    v.rule = Some(rule.id.clone());
    v.cause = cause;
    // A quota or rate limit, whatever status said it, reads as the 429 it is (retryable,
    // and waited out as one).
    if status.is_some_and(|s| s != 429)
        && matches!(cause, Cause::QuotaExhausted | Cause::RateLimitExceeded)
    {
        v.failure = AttemptFailure::Status(429);
    }
    v.next = cause.next();
    v.breaker = cause.counts_for_provider();
    v.health = cause.health();
    if cause == Cause::StreamStall && !rules.stream_stall_cooldown {
        v.health = None;
    }
    let Some(scope) = rule.scope.filter(|_| rules.honors_scope(subject.family)) else {
        return;
    };
    match scope {
        Scope::Model => {
            // The status the lock is remembered by: a quota's 429 (waited out as one),
            // else the status as read.
            let lock_status = if matches!(cause, Cause::QuotaExhausted | Cause::RateLimitExceeded) {
                429
            } else {
                v.failure.status().unwrap_or(502)
            };
            v.lock = Some(LockHit {
                status: lock_status,
                scope: lockout::Scope::Model(subject.model.to_owned()),
                forced: true,
            });
            v.health = None;
            v.breaker = false;
        }
        // A connection-wide signal is followed only as a quota that comes back on its
        // own: never a terminal state, whatever a rule pairs it with.
        Scope::Connection if matches!(cause, Cause::QuotaExhausted | Cause::RateLimitExceeded) => {
            v.health = Some(ErrorType::RateLimited);
            v.lock = None;
        }
        Scope::Connection => return,
        Scope::Provider => {
            v.provider_cooldown_ms = Some(rule.cooldown_ms.unwrap_or(PROVIDER_RULE_COOLDOWN_MS));
            v.health = None;
            v.lock = None;
        }
    }
    v.scope = Some(scope);
    v.cooldown_ms = rule.cooldown_ms;
}

/// A provider-scoped rule's cooldown when it declares none.
pub const PROVIDER_RULE_COOLDOWN_MS: u64 = 60_000;
