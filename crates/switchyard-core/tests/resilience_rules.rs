//! The provider error rules and the resilience board through the crate's public API
//! (SPEC R1, R3–R5, R11, R13, R14): status restatements, classification rules and their
//! allow-lists, the generic table, the egress fan-out, and the board's invariants over
//! random sequences of answers.

use proptest::prelude::*;
use switchyard_core::domain::AuthClass;
use switchyard_core::outcome::{AttemptFailure, StreamCut};
use switchyard_core::resilience::board::{At, Board, BreakerStatus, Cleared, Event, Outcome};
use switchyard_core::resilience::breaker;
use switchyard_core::resilience::cooldown::{ErrorType, Health, Terminal};
use switchyard_core::resilience::lockout::{self, Lock, LockKey};
use switchyard_core::resilience::rules::{
    builtin_rules, family_of, parse_restatements, parse_rules, ErrorRule, Restatement, Rules,
    EGRESS_BUCKETED_FAMILIES, EGRESS_WINDOW_MS,
};
use switchyard_core::resilience::verdict::{
    judge, Answer, Cause, LockHit, Next, Scope, Subject, Verdict, PROVIDER_RULE_COOLDOWN_MS,
};
use switchyard_core::routing::Reason;
use switchyard_core::settings::{resolve, Layers, ResilienceSettings};

const T0: u64 = 1_800_000_000_000;
const MODEL: &str = "gpt-5-codex";
const OTHER_MODEL: &str = "claude-sonnet-4-5";
/// The lockout's default `maxCooldownMs`: 30 min.
const MAX_LOCK_MS: u64 = 1_800_000;
/// The API-key cooldown's first backoff step (3 s).
const FIRST_BACKOFF_MS: u64 = 3_000;

/// The operator rule of the spec: a 400 with "quota gone" is alpha's account quota.
const ALPHA_QUOTA_RULE: &str = r#"[{"id":"x","provider":"alpha","statuses":[400],
    "textMarkers":["quota gone"],"reason":"quota_exhausted","scope":"connection",
    "cooldownMs":60000}]"#;

#[expect(
    clippy::unwrap_used,
    reason = "the defaults and the rules here are valid"
)]
fn settings() -> ResilienceSettings {
    resolve(&Layers::default()).unwrap().settings.resilience
}

#[expect(
    clippy::unwrap_used,
    reason = "the defaults and the rules here are valid"
)]
fn operator(json: &str) -> Rules {
    Rules::new(Vec::new(), parse_rules(json).unwrap(), false)
}

fn status_verdict(
    rules: &Rules,
    family: &str,
    model: &str,
    status: u16,
    headers: &[(&str, &str)],
    body: &str,
    now: u64,
) -> Verdict {
    judge(
        rules,
        Subject { family, model },
        Answer::Status {
            status,
            headers,
            body,
        },
        now,
    )
}

fn failed_verdict(rules: &Rules, family: &str, failure: AttemptFailure) -> Verdict {
    judge(
        rules,
        Subject {
            family,
            model: MODEL,
        },
        Answer::Failed(failure),
        T0,
    )
}

fn event_verdict(rules: &Rules, family: &str, event: &str) -> Verdict {
    judge(
        rules,
        Subject {
            family,
            model: MODEL,
        },
        Answer::StreamError { event },
        T0,
    )
}

/// A verdict of `status` with nothing but its cause and what comes next: the base the
/// expectations below change field by field.
fn plain(status: u16, cause: Cause, next: Next) -> Verdict {
    Verdict {
        failure: AttemptFailure::Status(status),
        upstream_status: Some(status),
        cause,
        rule: None,
        restated_by: None,
        scope: None,
        next,
        breaker: false,
        health: None,
        cooldown_ms: None,
        lock: None,
        provider_cooldown_ms: None,
        retry_at: None,
        client_retry_after_ms: None,
        egress: false,
    }
}

/// A verdict without an upstream status (transport failures, stream cuts and events).
fn unanswered(failure: AttemptFailure, cause: Cause, next: Next) -> Verdict {
    Verdict {
        failure,
        upstream_status: None,
        ..plain(0, cause, next)
    }
}

fn family_lock(status: u16) -> Option<LockHit> {
    Some(LockHit {
        status,
        scope: lockout::Scope::Family(lockout::family(MODEL)),
        forced: false,
    })
}

fn model_lock(status: u16) -> Option<LockHit> {
    Some(LockHit {
        status,
        scope: lockout::Scope::Model(MODEL.to_owned()),
        forced: false,
    })
}

fn at<'a>(provider: &'a str, connection: &'a str, family: &'a str) -> At<'a> {
    At {
        provider,
        connection,
        model: MODEL,
        auth_class: AuthClass::Apikey,
        disable_cooling: false,
        family,
    }
}

fn opencode(connection: &str) -> At<'_> {
    at("zen", connection, "opencode")
}

fn admit(board: &mut Board, at: &At<'_>, now: u64) -> Result<Cleared, Reason> {
    board.admit(at, &settings(), false, 10_000, now)
}

fn record(board: &mut Board, at: &At<'_>, v: &Verdict, now: u64) -> Vec<Event> {
    board.record(at, Outcome::Failed(v), false, &settings(), now)
}

fn cooled(connection: &str, until: u64, level: u32, reason: &'static str, cause: Cause) -> Event {
    Event::ConnectionCooled {
        connection: connection.to_owned(),
        until,
        level,
        reason,
        cause,
    }
}

fn cooling(retry_after_ms: u64) -> Result<Cleared, Reason> {
    Err(Reason::CoolingDown {
        retry_after_ms,
        transient: true,
    })
}

/// An opencode 429 with `Retry-After: secs`.
fn opencode_429(secs: &str, now: u64) -> Verdict {
    let v = status_verdict(
        &Rules::default(),
        "opencode",
        MODEL,
        429,
        &[("retry-after", secs)],
        "",
        now,
    );
    assert!(v.egress, "{v:?}");
    v
}

#[test]
fn the_defaults_these_tests_rely_on() {
    let s = settings();
    assert!(!s.lockout.enabled);
    assert_eq!(s.lockout.max_cooldown_ms, MAX_LOCK_MS);
    assert!(!s.provider_cooldown_enabled);
    assert!(!s.stream_stall_cooldown);
    assert_eq!(s.cooldown.apikey.backoff_ms(0), FIRST_BACKOFF_MS);
    let local = s.breaker.get(AuthClass::Local);
    assert_eq!(
        (local.degrade_at, local.open_at, local.reset_ms),
        (1, 2, 15_000)
    );
    assert_eq!(EGRESS_BUCKETED_FAMILIES, ["opencode"]);
    assert_eq!(EGRESS_WINDOW_MS, 86_400_000);
}

#[test]
fn operator_rules_and_restatements_parse_into_their_fields_and_families_follow_hosts() {
    let rules = parse_rules(ALPHA_QUOTA_RULE).unwrap();
    assert_eq!(
        rules,
        vec![ErrorRule {
            id: "x".into(),
            provider: "alpha".into(),
            statuses: vec![400],
            headers: vec![],
            codes: vec![],
            text_markers: vec!["quota gone".into()],
            exclude_markers: vec![],
            reason: Cause::QuotaExhausted,
            scope: Some(Scope::Connection),
            cooldown_ms: Some(60_000),
        }]
    );
    // A stream's error event is status 200, which only a classification rule may name.
    assert!(parse_rules(
        r#"[{"id":"s","provider":"alpha","statuses":[200],"codes":["insufficient_quota"],
             "reason":"quota_exhausted"}]"#
    )
    .is_ok());
    let restated = parse_restatements(
        r#"[{"id":"r","provider":"opencode","fromStatuses":[403],"toStatus":429,
             "textMarkers":["slow down"],"defaultRetryAfterMs":5000}]"#,
    )
    .unwrap();
    assert_eq!(
        restated,
        vec![Restatement {
            id: "r".into(),
            provider: "opencode".into(),
            from_statuses: vec![403],
            to_status: 429,
            text_markers: vec!["slow down".into()],
            exclude_markers: vec![],
            default_retry_after_ms: Some(5_000),
        }]
    );
    let families = [
        (("ar", "https://agentrouter.org/v1"), "agentrouter"),
        (("zen", "https://opencode.ai/zen/v1"), "opencode"),
        (("mm", "https://api.minimax.io"), "minimax"),
        (("Alpha", "http://127.0.0.1:9000"), "alpha"),
    ];
    for ((id, url), want) in families {
        assert_eq!(family_of(id, url), want, "{id} {url}");
    }
    let all = Rules::new(restated, rules, false);
    assert!(all.has_operator_rule("alpha") && all.has_operator_rule("opencode"));
    assert_eq!(all.rules.len(), builtin_rules().len() + 1);
    assert_eq!(all.rules[0].id, "x");
    assert_eq!(all.restatements[0].id, "r");
}

#[test]
fn agentrouter_quota_answers_are_restated_to_429_with_a_60s_hint_and_cool_the_connection() {
    let rules = Rules::default();
    let cases = [
        (403, "用户额度不足"),
        (400, "额度不足"),
        (
            403,
            r#"{"error":{"message":"用户额度不足, 剩余额度: $0.00","type":"new_api_error"}}"#,
        ),
        (400, r#"{"error":{"message":"该令牌额度不足"}}"#),
    ];
    for (upstream, body) in cases {
        let v = status_verdict(&rules, "agentrouter", MODEL, upstream, &[], body, T0);
        let want = Verdict {
            failure: AttemptFailure::Status(429),
            upstream_status: Some(upstream),
            rule: Some("agentrouter-user-quota-exhausted".into()),
            restated_by: Some("agentrouter-quota-restated".into()),
            scope: Some(Scope::Connection),
            health: Some(ErrorType::RateLimited),
            client_retry_after_ms: Some(60_000),
            ..plain(429, Cause::QuotaExhausted, Next::Candidate)
        };
        assert_eq!(v, want, "{upstream} {body}");

        // On the board: the connection cools (never terminal), nothing is locked.
        let mut board = Board::default();
        let a = at("ar", "ar-1", "agentrouter");
        assert_eq!(
            record(&mut board, &a, &v, T0),
            vec![cooled(
                "ar-1",
                T0 + FIRST_BACKOFF_MS,
                1,
                "rate_limited",
                Cause::QuotaExhausted
            )]
        );
        let h = board.health_of("ar-1");
        assert_eq!(
            (h.terminal, h.rate_limited_until, h.last_error_type),
            (
                None,
                Some(T0 + FIRST_BACKOFF_MS),
                Some(ErrorType::RateLimited)
            )
        );
        assert_eq!(board.model_locks(T0), vec![]);
        assert_eq!(admit(&mut board, &a, T0), cooling(FIRST_BACKOFF_MS));
        assert_eq!(
            admit(&mut board, &a, T0 + FIRST_BACKOFF_MS),
            Ok(Cleared::Go)
        );
        // However often it comes back, a quota is never terminal.
        let mut now = T0;
        for _ in 0..12 {
            now = board.health_of("ar-1").rate_limited_until.unwrap();
            let again = status_verdict(&rules, "agentrouter", MODEL, upstream, &[], body, now);
            record(&mut board, &a, &again, now);
        }
        let h = board.health_of("ar-1");
        assert_eq!(h.terminal, None);
        assert!(h.rate_limited_until.is_some_and(|t| t > now), "{h:?}");
        assert_eq!(board.model_locks(now), vec![]);
    }
}

#[test]
fn an_agentrouter_quota_answer_sent_as_429_is_named_by_the_rule_without_a_restatement() {
    let v = status_verdict(
        &Rules::default(),
        "agentrouter",
        MODEL,
        429,
        &[],
        "额度不足",
        T0,
    );
    assert_eq!(
        v,
        Verdict {
            rule: Some("agentrouter-user-quota-exhausted".into()),
            scope: Some(Scope::Connection),
            health: Some(ErrorType::RateLimited),
            ..plain(429, Cause::QuotaExhausted, Next::Candidate)
        }
    );
}

#[test]
fn agentrouter_model_access_denied_is_not_restated_and_names_an_auth_error_on_the_model() {
    let rules = Rules::default();
    let cases = [
        (403, "无权访问模型 gpt-5-codex"),
        (400, r#"{"error":{"message":"无权访问模型: gpt-5-codex"}}"#),
        // The exclusion wins over the quota marker: not a quota, not restated.
        (403, "额度不足 或 无权访问模型"),
    ];
    for (upstream, body) in cases {
        let v = status_verdict(&rules, "agentrouter", MODEL, upstream, &[], body, T0);
        let want = Verdict {
            rule: Some("agentrouter-model-access-denied".into()),
            scope: Some(Scope::Model),
            cooldown_ms: Some(6 * 3_600_000),
            lock: Some(LockHit {
                status: upstream,
                scope: lockout::Scope::Model(MODEL.to_owned()),
                forced: true,
            }),
            ..plain(upstream, Cause::AuthError, Next::Client)
        };
        assert_eq!(v, want, "{upstream} {body}");
    }
}

#[test]
fn agentrouter_model_access_denied_locks_that_model_only_even_with_lockout_off() {
    let v = status_verdict(
        &Rules::default(),
        "agentrouter",
        MODEL,
        403,
        &[],
        "无权访问模型",
        T0,
    );
    let mut board = Board::default();
    let a = at("ar", "ar-1", "agentrouter");
    let key = LockKey {
        provider: "ar".into(),
        connection: "ar-1".into(),
        scope: lockout::Scope::Model(MODEL.to_owned()),
    };
    // The rule's 6 h are clamped to the lockout's 30 min.
    let lock = Lock {
        failures: 1,
        until: T0 + MAX_LOCK_MS,
        status: 403,
        by_rule: true,
    };
    assert_eq!(
        record(&mut board, &a, &v, T0),
        vec![Event::ModelLocked {
            key: key.clone(),
            lock,
            rule: Some("agentrouter-model-access-denied".into()),
        }]
    );
    assert_eq!(board.model_locks(T0), vec![(key, lock)]);
    // The connection's health is untouched.
    assert_eq!(board.health_of("ar-1"), Health::default());
    assert_eq!(
        admit(&mut board, &a, T0),
        Err(Reason::ModelLocked {
            retry_after_ms: MAX_LOCK_MS,
            status: 403
        })
    );
    // Another model on the same connection, and the same model elsewhere, still go.
    let other_model = At {
        model: OTHER_MODEL,
        ..a
    };
    assert_eq!(admit(&mut board, &other_model, T0), Ok(Cleared::Go));
    // A sibling of the same quota family is another model: the lock is on the exact one.
    let sibling = At {
        model: "gpt-5",
        ..a
    };
    assert_eq!(admit(&mut board, &sibling, T0), Ok(Cleared::Go));
    let other_connection = at("ar", "ar-2", "agentrouter");
    assert_eq!(admit(&mut board, &other_connection, T0), Ok(Cleared::Go));
    assert_eq!(admit(&mut board, &a, T0 + MAX_LOCK_MS), Ok(Cleared::Go));
}

#[test]
fn full_error_text_is_visible_only_to_allowlisted_and_operator_families() {
    // An operator rule's text marker matches its family's body.
    let alpha = operator(
        r#"[{"id":"alpha-busy","provider":"alpha","statuses":[403],
             "textMarkers":["account busy"],"reason":"rate_limit_exceeded"}]"#,
    );
    let v = status_verdict(&alpha, "alpha", MODEL, 403, &[], "Account BUSY, later", T0);
    assert_eq!(
        v,
        Verdict {
            // A rate limit, read as the 429 it is.
            failure: AttemptFailure::Status(429),
            rule: Some("alpha-busy".into()),
            health: Some(ErrorType::RateLimited),
            lock: family_lock(403),
            ..plain(403, Cause::RateLimitExceeded, Next::Candidate)
        }
    );

    // The same kind of rule for a family that is neither allow-listed nor the operator's
    // (a built-in-style rule): the text is not the rule's to read, nothing matches.
    let mut builtin_style = Rules::default();
    builtin_style.rules.push(ErrorRule {
        id: "beta-busy".into(),
        provider: "beta".into(),
        statuses: vec![403],
        headers: vec![],
        codes: vec![],
        text_markers: vec!["account busy".into()],
        exclude_markers: vec![],
        reason: Cause::RateLimitExceeded,
        scope: Some(Scope::Connection),
        cooldown_ms: Some(60_000),
    });
    assert!(!builtin_style.full_text("beta") && !builtin_style.honors_scope("beta"));
    let v = status_verdict(&builtin_style, "beta", MODEL, 403, &[], "account busy", T0);
    assert_eq!(
        v,
        Verdict {
            health: Some(ErrorType::RequestRejected),
            lock: family_lock(403),
            ..plain(403, Cause::Forbidden, Next::Client)
        }
    );

    // The same rule's agentrouter twin sees the text (agentrouter is allow-listed).
    let mut ar = Rules::default();
    ar.rules.insert(
        0,
        ErrorRule {
            id: "ar-busy".into(),
            provider: "agentrouter".into(),
            ..builtin_style.rules.last().unwrap().clone()
        },
    );
    let v = status_verdict(&ar, "agentrouter", MODEL, 403, &[], "account busy", T0);
    assert_eq!(
        v,
        Verdict {
            failure: AttemptFailure::Status(429),
            rule: Some("ar-busy".into()),
            scope: Some(Scope::Connection),
            health: Some(ErrorType::RateLimited),
            cooldown_ms: Some(60_000),
            ..plain(403, Cause::RateLimitExceeded, Next::Candidate)
        }
    );
}

#[test]
fn builtin_scopes_of_families_whose_scope_is_not_honoured_are_informational() {
    let rules = Rules::default();
    // opencode's `scope: connection` rule names the cause; the generic effects hold,
    // but an egress-bucketed 429 locks no model: the address ran out, not a model.
    let v = status_verdict(&rules, "opencode", MODEL, 429, &[], "", T0);
    assert_eq!(
        v,
        Verdict {
            rule: Some("opencode-status-429".into()),
            health: Some(ErrorType::RateLimited),
            lock: None,
            egress: true,
            ..plain(429, Cause::RateLimitExceeded, Next::Candidate)
        }
    );
    // minimax's `scope: provider` rule: no provider cooldown, the generic effects.
    let v = status_verdict(&rules, "minimax", MODEL, 529, &[], "", T0);
    assert_eq!(
        v,
        Verdict {
            rule: Some("minimax-overloaded".into()),
            breaker: true,
            health: Some(ErrorType::Transient),
            lock: model_lock(529),
            ..plain(529, Cause::Overloaded, Next::Candidate)
        }
    );
    let v = status_verdict(&rules, "minimax", MODEL, 429, &[], "", T0);
    assert_eq!(
        v,
        Verdict {
            rule: Some("minimax-status-429".into()),
            health: Some(ErrorType::RateLimited),
            lock: family_lock(429),
            ..plain(429, Cause::RateLimitExceeded, Next::Candidate)
        }
    );

    // Once the operator writes a rule for minimax, its built-in rules' scope holds too.
    let trusted = operator(
        r#"[{"id":"mm-other","provider":"minimax","statuses":[418],"reason":"client_error"}]"#,
    );
    let v = status_verdict(&trusted, "minimax", MODEL, 529, &[], "", T0);
    assert_eq!(
        v,
        Verdict {
            rule: Some("minimax-overloaded".into()),
            scope: Some(Scope::Provider),
            breaker: true,
            cooldown_ms: Some(30_000),
            provider_cooldown_ms: Some(30_000),
            ..plain(529, Cause::Overloaded, Next::Candidate)
        }
    );
    let mut board = Board::default();
    let a = at("mm", "mm-1", "minimax");
    assert_eq!(
        record(&mut board, &a, &v, T0),
        vec![Event::ProviderCooled {
            provider: "mm".into(),
            until: T0 + 30_000,
            rule: Some("minimax-overloaded".into()),
        }]
    );
    assert_eq!(
        admit(&mut board, &at("mm", "mm-2", "minimax"), T0 + 1),
        Err(Reason::ProviderCooling {
            retry_after_ms: 29_999
        })
    );
    assert_eq!(board.health_of("mm-1"), Health::default());
    assert_eq!(PROVIDER_RULE_COOLDOWN_MS, 60_000);
}

#[test]
fn a_400_is_the_client_s_unless_a_rule_makes_it_the_account_s() {
    let rules = operator(ALPHA_QUOTA_RULE);
    let bad_request = plain(400, Cause::BadRequest, Next::Client);
    let overflow = plain(400, Cause::ContextOverflow, Next::Advance);
    let cases: [(&str, &str, Verdict); 7] = [
        (
            "beta",
            r#"{"error":{"message":"invalid tool schema"}}"#,
            bad_request.clone(),
        ),
        (
            "beta",
            r#"{"error":{"code":"context_length_exceeded"}}"#,
            overflow.clone(),
        ),
        (
            "beta",
            "This model's maximum context length is 128000 tokens",
            overflow.clone(),
        ),
        (
            "agentrouter",
            "prompt is too long: 210000 tokens",
            overflow.clone(),
        ),
        // The operator's family, without the rule's marker: still the client's.
        ("alpha", "bad json", bad_request.clone()),
        ("alpha", "context window exceeded", overflow),
        (
            "alpha",
            r#"{"error":{"message":"Your quota gone for today"}}"#,
            Verdict {
                failure: AttemptFailure::Status(429),
                rule: Some("x".into()),
                scope: Some(Scope::Connection),
                health: Some(ErrorType::RateLimited),
                cooldown_ms: Some(60_000),
                ..plain(400, Cause::QuotaExhausted, Next::Candidate)
            },
        ),
    ];
    for (family, body, want) in cases {
        let v = status_verdict(&rules, family, MODEL, 400, &[], body, T0);
        assert_eq!(v, want, "{family} {body}");
    }

    // On the board, a client's 400 changes nothing (even with model lockout on); the
    // rule's 400 cools the connection for the rule's cooldown.
    let mut s = settings();
    s.lockout.enabled = true;
    s.lockout.error_codes.push(400);
    let mut board = Board::default();
    let a = at("alpha", "al-1", "alpha");
    for body in [
        "bad json",
        r#"{"error":{"code":"context_length_exceeded"}}"#,
    ] {
        let v = status_verdict(&rules, "alpha", MODEL, 400, &[], body, T0);
        assert_eq!(board.record(&a, Outcome::Failed(&v), false, &s, T0), vec![]);
    }
    assert_eq!(board.health_of("al-1"), Health::default());
    assert_eq!(board.model_locks(T0), vec![]);
    assert_eq!(admit(&mut board, &a, T0), Ok(Cleared::Go));
    let v = status_verdict(&rules, "alpha", MODEL, 400, &[], "quota gone", T0);
    assert_eq!(
        record(&mut board, &a, &v, T0),
        vec![cooled(
            "al-1",
            T0 + 60_000,
            1,
            "rate_limited",
            Cause::QuotaExhausted
        )]
    );
    assert_eq!(admit(&mut board, &a, T0), cooling(60_000));
}

#[test]
fn error_events_inside_a_200_stream_are_matched_by_status_200_rules() {
    let rules = operator(
        r#"[{"id":"alpha-stream-quota","provider":"alpha","statuses":[200],
             "codes":["insufficient_quota"],"reason":"quota_exhausted",
             "scope":"connection","cooldownMs":120000},
            {"id":"alpha-stream-auth","provider":"alpha","statuses":[200],
             "codes":["invalid_api_key"],"reason":"auth_error"},
            {"id":"alpha-any-status","provider":"alpha","codes":["overloaded_error"],
             "reason":"overloaded"}]"#,
    );
    let cut = AttemptFailure::Stream(StreamCut::Error);
    let quota = Verdict {
        rule: Some("alpha-stream-quota".into()),
        scope: Some(Scope::Connection),
        health: Some(ErrorType::RateLimited),
        cooldown_ms: Some(120_000),
        ..unanswered(cut, Cause::QuotaExhausted, Next::Candidate)
    };
    let no_rule = Verdict {
        breaker: true,
        ..unanswered(cut, Cause::StreamError, Next::Candidate)
    };
    let cases = [
        (
            "alpha",
            r#"{"type":"error","error":{"type":"insufficient_quota","message":"You ran out"}}"#,
            quota.clone(),
        ),
        (
            "alpha",
            r#"{"type":"response.failed","response":{"error":{"code":"insufficient_quota"}}}"#,
            quota,
        ),
        // A rule naming a client's cause still fails over: the stream never committed.
        (
            "alpha",
            r#"{"type":"error","error":{"code":"invalid_api_key"}}"#,
            Verdict {
                rule: Some("alpha-stream-auth".into()),
                health: Some(ErrorType::AuthFailed),
                ..unanswered(cut, Cause::AuthError, Next::Candidate)
            },
        ),
        // A rule without statuses is for error statuses, not a stream's events.
        (
            "alpha",
            r#"{"type":"error","error":{"type":"overloaded_error"}}"#,
            no_rule.clone(),
        ),
        (
            "alpha",
            r#"{"type":"error","error":{"type":"api_error"}}"#,
            no_rule.clone(),
        ),
        ("alpha", "not json at all", no_rule.clone()),
        // Another family's event with the same code: the rule is alpha's.
        (
            "beta",
            r#"{"type":"error","error":{"type":"insufficient_quota"}}"#,
            no_rule,
        ),
    ];
    for (family, event, want) in cases {
        assert_eq!(
            event_verdict(&rules, family, event),
            want,
            "{family} {event}"
        );
    }
}

#[test]
fn the_generic_table_decides_by_status_for_a_family_without_rules() {
    let rules = Rules::default();
    let transient = |status: u16, cause: Cause| Verdict {
        breaker: true,
        health: Some(ErrorType::Transient),
        lock: model_lock(status),
        ..plain(status, cause, Next::Candidate)
    };
    let cases: Vec<(u16, &str, Verdict)> = vec![
        (
            429,
            "slow down",
            Verdict {
                health: Some(ErrorType::RateLimited),
                lock: family_lock(429),
                ..plain(429, Cause::RateLimitExceeded, Next::Candidate)
            },
        ),
        (
            429,
            r#"{"error":{"code":"insufficient_quota","message":"check your plan"}}"#,
            Verdict {
                health: Some(ErrorType::CreditsExhausted),
                lock: family_lock(429),
                ..plain(429, Cause::CreditsExhausted, Next::Candidate)
            },
        ),
        (
            402,
            "",
            Verdict {
                health: Some(ErrorType::CreditsExhausted),
                lock: family_lock(402),
                ..plain(402, Cause::CreditsExhausted, Next::Client)
            },
        ),
        (
            401,
            "invalid key",
            Verdict {
                health: Some(ErrorType::AuthFailed),
                lock: model_lock(401),
                ..plain(401, Cause::AuthError, Next::Client)
            },
        ),
        (
            403,
            "forbidden",
            Verdict {
                health: Some(ErrorType::RequestRejected),
                lock: family_lock(403),
                ..plain(403, Cause::Forbidden, Next::Client)
            },
        ),
        // A body marker of another status means nothing on a 403.
        (
            403,
            "额度不足",
            Verdict {
                health: Some(ErrorType::RequestRejected),
                lock: family_lock(403),
                ..plain(403, Cause::Forbidden, Next::Client)
            },
        ),
        (
            404,
            "no such model",
            Verdict {
                lock: model_lock(404),
                ..plain(404, Cause::ModelNotFound, Next::Client)
            },
        ),
        (
            422,
            "",
            Verdict {
                lock: model_lock(422),
                ..plain(422, Cause::ClientError, Next::Client)
            },
        ),
        (500, "", transient(500, Cause::ServerError)),
        (502, "bad gateway", transient(502, Cause::ServerError)),
        (503, "", transient(503, Cause::ServerError)),
        (504, "", transient(504, Cause::ServerError)),
        (408, "", transient(408, Cause::ServerError)),
        (529, "overloaded", transient(529, Cause::Overloaded)),
        (
            501,
            "",
            Verdict {
                breaker: false,
                ..transient(501, Cause::ServerError)
            },
        ),
    ];
    for (status, body, want) in cases {
        let v = status_verdict(&rules, "beta", MODEL, status, &[], body, T0);
        assert_eq!(v, want, "{status} {body}");
    }
    // On the board, credits gone (402, or a 429 saying so) are terminal; a 404 cools
    // nothing.
    for (status, body) in [
        (402, ""),
        (429, r#"{"error":{"code":"insufficient_quota"}}"#),
    ] {
        let v = status_verdict(&rules, "beta", MODEL, status, &[], body, T0);
        let mut board = Board::default();
        let a = at("beta", "b-1", "beta");
        assert_eq!(
            record(&mut board, &a, &v, T0),
            vec![Event::ConnectionTerminal {
                connection: "b-1".into(),
                state: Terminal::CreditsExhausted,
            }],
            "{status} {body}"
        );
        assert_eq!(
            admit(&mut board, &a, T0),
            Err(Reason::Terminal(Terminal::CreditsExhausted))
        );
    }
    let v = status_verdict(&rules, "beta", MODEL, 404, &[], "", T0);
    let mut board = Board::default();
    assert_eq!(
        record(&mut board, &at("beta", "b-1", "beta"), &v, T0),
        vec![]
    );
    assert_eq!(board.health_of("b-1"), Health::default());
    // A status without its answer is judged the same as one with an empty body.
    assert_eq!(
        failed_verdict(&rules, "beta", AttemptFailure::Status(503)),
        transient(503, Cause::ServerError)
    );
}

#[test]
fn transport_failures_and_stream_cuts_have_their_own_verdicts() {
    let off = Rules::default();
    let on = Rules::new(vec![], vec![], true);
    let unreachable = |f: AttemptFailure| Verdict {
        breaker: true,
        health: Some(ErrorType::Transient),
        ..unanswered(f, Cause::Unreachable, Next::Candidate)
    };
    let throughput = AttemptFailure::Stream(StreamCut::Throughput);
    let first_output = AttemptFailure::Stream(StreamCut::FirstOutput);
    let broken = AttemptFailure::Stream(StreamCut::Broken);
    let stall = unanswered(throughput, Cause::StreamStall, Next::SameOnce);
    let cases: Vec<(&Rules, AttemptFailure, Verdict)> = vec![
        (
            &off,
            AttemptFailure::Connect,
            unreachable(AttemptFailure::Connect),
        ),
        (
            &off,
            AttemptFailure::FirstByteTimeout,
            unreachable(AttemptFailure::FirstByteTimeout),
        ),
        (
            &off,
            AttemptFailure::Reset,
            unreachable(AttemptFailure::Reset),
        ),
        (
            &off,
            AttemptFailure::InvalidResponse,
            Verdict {
                breaker: true,
                health: Some(ErrorType::Transient),
                lock: model_lock(502),
                ..unanswered(
                    AttemptFailure::InvalidResponse,
                    Cause::InvalidResponse,
                    Next::Candidate,
                )
            },
        ),
        (&off, throughput, stall.clone()),
        (
            &on,
            throughput,
            Verdict {
                health: Some(ErrorType::Transient),
                ..stall
            },
        ),
        (
            &off,
            first_output,
            Verdict {
                breaker: true,
                ..unanswered(first_output, Cause::StreamStall, Next::Candidate)
            },
        ),
        (
            &on,
            first_output,
            Verdict {
                breaker: true,
                health: Some(ErrorType::Transient),
                ..unanswered(first_output, Cause::StreamStall, Next::Candidate)
            },
        ),
        (
            &off,
            broken,
            Verdict {
                breaker: true,
                ..unanswered(broken, Cause::StreamBroken, Next::Candidate)
            },
        ),
        // A stream break never cools, even with `streamStallCooldown`.
        (
            &on,
            broken,
            Verdict {
                breaker: true,
                ..unanswered(broken, Cause::StreamBroken, Next::Candidate)
            },
        ),
    ];
    for (rules, failure, want) in cases {
        assert_eq!(failed_verdict(rules, "beta", failure), want, "{failure:?}");
    }

    // On the board a stall with `streamStallCooldown` cools under its own metric reason.
    let mut board = Board::default();
    let a = at("beta", "b-1", "beta");
    let v = failed_verdict(&on, "beta", throughput);
    assert_eq!(
        record(&mut board, &a, &v, T0),
        vec![cooled(
            "b-1",
            T0 + FIRST_BACKOFF_MS,
            1,
            "stream_stall",
            Cause::StreamStall
        )]
    );
}

/// Response headers as a verdict sees them.
type Headers<'a> = &'a [(&'a str, &'a str)];

#[test]
fn an_announced_reset_becomes_retry_at_and_the_connection_s_cooldown() {
    let rules = Rules::default();
    let cases: [(Headers<'_>, &str, Option<u64>); 5] = [
        (&[("retry-after", "30")], "", Some(T0 + 30_000)),
        (&[("Retry-After", "30")], "", Some(T0 + 30_000)),
        (
            &[("x-ratelimit-reset-requests", "2m")],
            "",
            Some(T0 + 120_000),
        ),
        (&[], "Rate limited, try again in 20s", Some(T0 + 20_000)),
        (&[("x-request-id", "30")], "", None),
    ];
    for (headers, body, retry_at) in cases {
        let v = status_verdict(&rules, "beta", MODEL, 429, headers, body, T0);
        assert_eq!(
            v,
            Verdict {
                health: Some(ErrorType::RateLimited),
                lock: family_lock(429),
                retry_at,
                ..plain(429, Cause::RateLimitExceeded, Next::Candidate)
            },
            "{headers:?} {body}"
        );
    }
    let v = status_verdict(&rules, "beta", MODEL, 429, &[("retry-after", "30")], "", T0);
    let mut board = Board::default();
    let a = at("beta", "b-1", "beta");
    assert_eq!(
        record(&mut board, &a, &v, T0),
        vec![cooled(
            "b-1",
            T0 + 30_000,
            1,
            "rate_limited",
            Cause::RateLimitExceeded
        )]
    );
    assert_eq!(admit(&mut board, &a, T0 + 10_000), cooling(20_000));
}

#[test]
fn only_an_opencode_429_rate_limit_is_an_egress_signal() {
    let builtin = Rules::default();
    // An operator restatement makes opencode's 403 "slow down" a 429 too.
    let restating = Rules::new(
        parse_restatements(
            r#"[{"id":"oc-slow","provider":"opencode","fromStatuses":[403],"toStatus":429,
                 "textMarkers":["slow down"]}]"#,
        )
        .unwrap(),
        vec![],
        false,
    );
    let cases: [(&Rules, &str, u16, &str, bool); 9] = [
        (&builtin, "opencode", 429, "", true),
        (&builtin, "opencode", 429, "rate limit", true),
        (&restating, "opencode", 403, "please slow down", true),
        (&builtin, "opencode", 403, "please slow down", false),
        (&builtin, "opencode", 503, "", false),
        (&builtin, "opencode", 402, "", false),
        (&builtin, "beta", 429, "", false),
        (&builtin, "minimax", 429, "", false),
        // A quota restated to 429, but agentrouter's limits are per account.
        (&builtin, "agentrouter", 403, "额度不足", false),
    ];
    for (rules, family, status, body, egress) in cases {
        let v = status_verdict(rules, family, MODEL, status, &[], body, T0);
        assert_eq!(v.egress, egress, "{family} {status} {body}: {v:?}");
    }
}

#[test]
fn an_opencode_429_cools_every_fresh_peer_behind_the_same_address() {
    let mut board = Board::default();
    let seen = T0 - 1_000;
    let same = ["oc-a", "oc-b", "oc-c", "oc-h", "oc-i"];
    for c in same {
        board.note_egress(&opencode(c), "10.0.0.1", seen);
    }
    board.note_egress(&opencode("oc-d"), "10.0.0.2", seen);
    let opted_out = At {
        disable_cooling: true,
        ..opencode("oc-e")
    };
    board.note_egress(&opted_out, "10.0.0.1", seen);
    // Seen exactly a window ago still counts; a millisecond more does not.
    board.note_egress(&opencode("oc-f"), "10.0.0.1", T0 - EGRESS_WINDOW_MS);
    board.note_egress(&opencode("oc-g"), "10.0.0.1", T0 - EGRESS_WINDOW_MS - 1);
    let alpha = at("al", "al-a", "alpha");
    board.note_egress(&alpha, "10.0.0.1", seen);

    // oc-h is terminal; oc-i already cools for longer (its own limit, no fan-out).
    let credits = status_verdict(&Rules::default(), "beta", MODEL, 402, &[], "", seen);
    assert_eq!(
        record(&mut board, &opencode("oc-h"), &credits, seen),
        vec![Event::ConnectionTerminal {
            connection: "oc-h".into(),
            state: Terminal::CreditsExhausted,
        }]
    );
    let long = Verdict {
        egress: false,
        ..opencode_429("600", seen)
    };
    assert_eq!(
        record(&mut board, &opencode("oc-i"), &long, seen),
        vec![cooled(
            "oc-i",
            seen + 600_000,
            1,
            "rate_limited",
            Cause::RateLimitExceeded
        )]
    );

    let v = opencode_429("60", T0);
    let until = T0 + 60_000;
    let egress_cooled = |c: &str| Event::EgressCooled {
        connection: c.to_owned(),
        from: "oc-a".into(),
        address: "10.0.0.1".into(),
        until,
    };
    assert_eq!(
        record(&mut board, &opencode("oc-a"), &v, T0),
        vec![
            cooled("oc-a", until, 1, "rate_limited", Cause::RateLimitExceeded),
            egress_cooled("oc-b"),
            egress_cooled("oc-c"),
            egress_cooled("oc-f"),
        ]
    );
    let expected: [(&At<'_>, Result<Cleared, Reason>); 10] = [
        (&opencode("oc-a"), cooling(60_000)),
        (&opencode("oc-b"), cooling(60_000)),
        (&opencode("oc-c"), cooling(60_000)),
        (&opencode("oc-d"), Ok(Cleared::Go)),
        (&opted_out, Ok(Cleared::Go)),
        (&opencode("oc-f"), cooling(60_000)),
        (&opencode("oc-g"), Ok(Cleared::Go)),
        (
            &opencode("oc-h"),
            Err(Reason::Terminal(Terminal::CreditsExhausted)),
        ),
        (&opencode("oc-i"), cooling(599_000)),
        (&alpha, Ok(Cleared::Go)),
    ];
    for (a, want) in expected {
        assert_eq!(admit(&mut board, a, T0), want, "{}", a.connection);
    }
    // A peer's cooldown is the failed one's end, without a backoff step of its own.
    let b = board.health_of("oc-b");
    assert_eq!(
        (
            b.rate_limited_until,
            b.backoff_level,
            b.last_error_type,
            b.error_code,
            b.terminal,
            b.last_error.as_deref()
        ),
        (
            Some(until),
            0,
            Some(ErrorType::RateLimited),
            Some(429),
            None,
            Some("egress 10.0.0.1 shared with oc-a")
        )
    );
    let h = board.health_of("oc-h");
    assert_eq!(
        (h.terminal, h.rate_limited_until),
        (Some(Terminal::CreditsExhausted), None)
    );
    assert_eq!(
        board.health_of("oc-i").rate_limited_until,
        Some(seen + 600_000)
    );
    for c in ["oc-d", "oc-e", "oc-g", "al-a"] {
        assert_eq!(board.health_of(c), Health::default(), "{c}");
    }

    // A peer's own 429 while it cools with the others (no later reset announced) fans
    // out nothing new.
    let again = status_verdict(
        &Rules::default(),
        "opencode",
        MODEL,
        429,
        &[],
        "",
        T0 + 1_000,
    );
    assert!(again.egress);
    assert_eq!(
        record(&mut board, &opencode("oc-b"), &again, T0 + 1_000),
        vec![]
    );
    assert_eq!(board.health_of("oc-c").rate_limited_until, Some(until));
}

#[test]
fn a_failed_connection_that_is_opted_out_or_unseen_fans_out_nothing() {
    let peers = ["oc-b", "oc-c"];
    // Opted out itself: nothing cools, not even its peers.
    let mut board = Board::default();
    let opted_out = At {
        disable_cooling: true,
        ..opencode("oc-a")
    };
    board.note_egress(&opted_out, "10.0.0.1", T0);
    for c in peers {
        board.note_egress(&opencode(c), "10.0.0.1", T0);
    }
    let v = opencode_429("60", T0);
    assert_eq!(record(&mut board, &opted_out, &v, T0), vec![]);
    for c in ["oc-a", "oc-b", "oc-c"] {
        assert_eq!(board.health_of(c), Health::default(), "{c}");
    }

    // Its last egress is older than the window, or was never seen: only itself cools.
    for last_seen in [Some(T0 - EGRESS_WINDOW_MS - 1), None] {
        let mut board = Board::default();
        if let Some(seen) = last_seen {
            board.note_egress(&opencode("oc-a"), "10.0.0.1", seen);
        }
        for c in peers {
            board.note_egress(&opencode(c), "10.0.0.1", T0);
        }
        assert_eq!(
            record(&mut board, &opencode("oc-a"), &v, T0),
            vec![cooled(
                "oc-a",
                T0 + 60_000,
                1,
                "rate_limited",
                Cause::RateLimitExceeded
            )],
            "{last_seen:?}"
        );
        for c in peers {
            assert_eq!(board.health_of(c), Health::default(), "{c}");
        }
    }
}

#[test]
fn a_local_breaker_opens_at_two_provider_failures_and_an_account_answer_to_its_probe_closes_it() {
    let rules = Rules::default();
    let s = settings();
    let local = |c: &'static str| At {
        auth_class: AuthClass::Local,
        disable_cooling: true,
        ..at("ollama", c, "ollama")
    };
    let down = status_verdict(&rules, "ollama", MODEL, 503, &[], "", T0);
    let moved = |state, failures| Event::BreakerMoved {
        provider: "ollama".into(),
        state,
        failures,
        cause: Cause::ServerError,
    };
    let mut board = Board::default();
    assert_eq!(
        record(&mut board, &local("l-1"), &down, T0),
        vec![moved(breaker::State::Degraded, 1)]
    );
    assert_eq!(
        record(&mut board, &local("l-2"), &down, T0 + 1),
        vec![moved(breaker::State::Open, 2)]
    );
    assert_eq!(
        admit(&mut board, &local("l-3"), T0 + 2),
        Err(Reason::CircuitOpen {
            retry_after_ms: 14_999
        })
    );
    // An account-level failure while open moves nothing.
    let limited = status_verdict(&rules, "ollama", MODEL, 429, &[], "", T0 + 3);
    assert_eq!(record(&mut board, &local("l-1"), &limited, T0 + 3), vec![]);

    let reset = T0 + 1 + 15_000;
    assert_eq!(admit(&mut board, &local("l-3"), reset), Ok(Cleared::Probe));
    // One probe at a time: the slot is held for a reset period.
    assert_eq!(
        admit(&mut board, &local("l-4"), reset),
        Err(Reason::CircuitOpen {
            retry_after_ms: 15_000
        })
    );
    let events = board.record(
        &local("l-3"),
        Outcome::Failed(&limited),
        true,
        &s,
        reset + 5,
    );
    assert!(
        events.contains(&Event::BreakerClosed {
            provider: "ollama".into()
        }),
        "{events:?}"
    );
    assert_eq!(
        board.breakers(&s.breaker, |_| AuthClass::Local, reset + 5),
        vec![BreakerStatus {
            provider: "ollama".into(),
            state: breaker::State::Closed,
            failures: 0,
            probe_in_ms: None,
            cooling_ms: None,
        }]
    );
    assert_eq!(admit(&mut board, &local("l-4"), reset + 6), Ok(Cleared::Go));
}

#[test]
fn three_consecutive_403s_out_of_cooldown_ban_the_connection() {
    let v = status_verdict(&Rules::default(), "beta", MODEL, 403, &[], "", T0);
    let mut board = Board::default();
    let a = at("beta", "b-1", "beta");
    let rejected = |until, level| cooled("b-1", until, level, "request_rejected", Cause::Forbidden);
    assert_eq!(
        record(&mut board, &a, &v, T0),
        vec![rejected(T0 + 3_000, 1)]
    );
    assert_eq!(
        admit(&mut board, &a, T0 + 1),
        Err(Reason::CoolingDown {
            retry_after_ms: 2_999,
            transient: false
        })
    );
    // A rejection while cooling (in flight together) counts as the one that cooled it.
    assert_eq!(record(&mut board, &a, &v, T0 + 100), vec![]);
    assert_eq!(
        record(&mut board, &a, &v, T0 + 3_000),
        vec![rejected(T0 + 9_000, 2)]
    );
    assert_eq!(
        record(&mut board, &a, &v, T0 + 9_000),
        vec![Event::ConnectionTerminal {
            connection: "b-1".into(),
            state: Terminal::Banned,
        }]
    );
    assert_eq!(
        admit(&mut board, &a, T0 + 10 * 3_600_000),
        Err(Reason::Terminal(Terminal::Banned))
    );
    let h = board.health_of("b-1");
    assert_eq!(
        (h.terminal, h.rate_limited_until),
        (Some(Terminal::Banned), None)
    );
}

#[test]
fn a_terminal_connection_is_never_cooled_by_any_later_verdict() {
    let builtin = Rules::default();
    let alpha = operator(ALPHA_QUOTA_RULE);
    let stall = Rules::new(vec![], vec![], true);
    let now = T0 + 1_000;
    let verdicts = [
        status_verdict(
            &builtin,
            "opencode",
            MODEL,
            429,
            &[("retry-after", "3600")],
            "",
            now,
        ),
        status_verdict(&builtin, "opencode", MODEL, 503, &[], "", now),
        status_verdict(&builtin, "opencode", MODEL, 403, &[], "", now),
        status_verdict(&builtin, "opencode", MODEL, 401, &[], "", now),
        status_verdict(
            &builtin,
            "agentrouter",
            MODEL,
            403,
            &[],
            "用户额度不足",
            now,
        ),
        status_verdict(&alpha, "alpha", MODEL, 400, &[], "quota gone", now),
        failed_verdict(&builtin, "opencode", AttemptFailure::Connect),
        failed_verdict(
            &stall,
            "opencode",
            AttemptFailure::Stream(StreamCut::Throughput),
        ),
    ];
    let mut board = Board::default();
    for c in ["oc-t", "oc-p"] {
        board.note_egress(&opencode(c), "10.0.0.1", T0);
    }
    let credits = status_verdict(&builtin, "opencode", MODEL, 402, &[], "", T0);
    record(&mut board, &opencode("oc-t"), &credits, T0);
    let terminal = board.health_of("oc-t");
    assert_eq!(
        (terminal.terminal, terminal.rate_limited_until),
        (Some(Terminal::CreditsExhausted), None)
    );
    for v in &verdicts {
        assert_eq!(
            record(&mut board, &opencode("oc-t"), v, now),
            vec![],
            "{v:?}"
        );
        assert_eq!(board.health_of("oc-t"), terminal, "{v:?}");
    }
    // Nor by a peer's limit behind the same address.
    let events = record(&mut board, &opencode("oc-p"), &verdicts[0], now);
    assert_eq!(
        events,
        vec![cooled(
            "oc-p",
            now + 3_600_000,
            1,
            "rate_limited",
            Cause::RateLimitExceeded
        )]
    );
    assert_eq!(board.health_of("oc-t"), terminal);
    assert_eq!(
        admit(&mut board, &opencode("oc-t"), now),
        Err(Reason::Terminal(Terminal::CreditsExhausted))
    );
    // A success does not lift it either.
    board.record(&opencode("oc-t"), Outcome::Success, false, &settings(), now);
    assert_eq!(board.health_of("oc-t"), terminal);
}

#[test]
fn a_longer_cooldown_is_never_shortened_by_a_later_failure() {
    let builtin = Rules::default();
    let alpha = operator(ALPHA_QUOTA_RULE);
    let mut board = Board::default();
    let a = at("alpha", "al-1", "alpha");
    let long = status_verdict(
        &builtin,
        "alpha",
        MODEL,
        429,
        &[("retry-after", "600")],
        "",
        T0,
    );
    assert_eq!(
        record(&mut board, &a, &long, T0),
        vec![cooled(
            "al-1",
            T0 + 600_000,
            1,
            "rate_limited",
            Cause::RateLimitExceeded
        )]
    );
    let now = T0 + 1;
    let later = [
        status_verdict(
            &builtin,
            "alpha",
            MODEL,
            429,
            &[("retry-after", "30")],
            "",
            now,
        ),
        status_verdict(&builtin, "alpha", MODEL, 429, &[], "", now),
        status_verdict(&builtin, "alpha", MODEL, 503, &[], "", now),
        status_verdict(&builtin, "alpha", MODEL, 403, &[], "", now),
        status_verdict(&builtin, "alpha", MODEL, 401, &[], "", now),
        status_verdict(&alpha, "alpha", MODEL, 400, &[], "quota gone", now),
        failed_verdict(&builtin, "alpha", AttemptFailure::Connect),
    ];
    for v in &later {
        assert_eq!(record(&mut board, &a, v, now), vec![], "{v:?}");
        assert_eq!(
            board.health_of("al-1").rate_limited_until,
            Some(T0 + 600_000),
            "{v:?}"
        );
    }
    assert_eq!(admit(&mut board, &a, now), cooling(599_999));
    // A later announced reset still extends it.
    let longer = status_verdict(
        &builtin,
        "alpha",
        MODEL,
        429,
        &[("retry-after", "1200")],
        "",
        now,
    );
    assert_eq!(
        record(&mut board, &a, &longer, now),
        vec![cooled(
            "al-1",
            now + 1_200_000,
            1,
            "rate_limited",
            Cause::RateLimitExceeded
        )]
    );
}

/// What one step of the property test does to its connection.
#[derive(Debug, Clone, Copy)]
enum Step {
    Status {
        family: &'static str,
        status: u16,
        retry_after: Option<&'static str>,
        body: &'static str,
    },
    Failed(AttemptFailure),
    Success,
}

const fn st(
    family: &'static str,
    status: u16,
    retry_after: Option<&'static str>,
    body: &'static str,
) -> Step {
    Step::Status {
        family,
        status,
        retry_after,
        body,
    }
}

const STEPS: &[Step] = &[
    st("opencode", 402, None, ""),
    st("opencode", 429, None, ""),
    st("opencode", 429, Some("5"), ""),
    st("opencode", 429, Some("600"), ""),
    st(
        "beta",
        429,
        Some("90"),
        r#"{"error":{"code":"insufficient_quota"}}"#,
    ),
    st("opencode", 403, None, "forbidden"),
    st("opencode", 401, None, "invalid key"),
    st("opencode", 500, None, ""),
    st("opencode", 503, Some("20"), ""),
    st("opencode", 400, None, "bad json"),
    st("opencode", 404, None, ""),
    st("agentrouter", 403, None, "用户额度不足"),
    st("agentrouter", 400, None, "额度不足"),
    st("agentrouter", 403, None, "无权访问模型"),
    st("alpha", 400, None, "quota gone"),
    Step::Failed(AttemptFailure::Connect),
    Step::Failed(AttemptFailure::Stream(StreamCut::Throughput)),
    Step::Failed(AttemptFailure::Stream(StreamCut::Broken)),
    Step::Success,
    Step::Success,
];

const PEERS: [&str; 3] = ["oc-0", "oc-1", "oc-2"];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn no_failure_shortens_a_running_cooldown_and_no_terminal_connection_cools(
        steps in proptest::collection::vec(
            (
                0usize..PEERS.len(),
                0usize..STEPS.len(),
                prop_oneof![Just(0u64), 0u64..5_000, 0u64..700_000],
            ),
            1..40,
        ),
        oauth in any::<bool>(),
    ) {
        let rules = Rules::new(Vec::new(), parse_rules(ALPHA_QUOTA_RULE).unwrap(), true);
        let s = settings();
        let mut board = Board::default();
        let at_of = |c: usize| At {
            auth_class: if oauth { AuthClass::Oauth } else { AuthClass::Apikey },
            ..opencode(PEERS[c])
        };
        let mut now = T0;
        for c in 0..PEERS.len() {
            board.note_egress(&at_of(c), "10.0.0.1", now);
        }
        for (c, step, dt) in steps {
            now += dt;
            let a = at_of(c);
            board.note_egress(&a, "10.0.0.1", now);
            let before: Vec<Health> = PEERS.iter().map(|p| board.health_of(p)).collect();
            let verdict = match STEPS[step] {
                Step::Status { family, status, retry_after, body } => {
                    let headers: Vec<(&str, &str)> =
                        retry_after.map(|v| ("retry-after", v)).into_iter().collect();
                    Some(status_verdict(&rules, family, MODEL, status, &headers, body, now))
                }
                Step::Failed(f) => Some(failed_verdict(&rules, "opencode", f)),
                Step::Success => None,
            };
            match &verdict {
                Some(v) => board.record(&a, Outcome::Failed(v), false, &s, now),
                None => board.record(&a, Outcome::Success, false, &s, now),
            };
            for (i, p) in PEERS.iter().enumerate() {
                let after = board.health_of(p);
                prop_assert!(
                    after.terminal.is_none() || after.rate_limited_until.is_none_or(|t| t <= now),
                    "{p} is terminal and cooling: {after:?} after {:?}", STEPS[step]
                );
                if let Some(t) = after.terminal {
                    prop_assert_eq!(
                        admit(&mut board, &at_of(i), now),
                        Err(Reason::Terminal(t))
                    );
                }
                let success_here = verdict.is_none() && i == c;
                if success_here {
                    if after.terminal.is_none() {
                        prop_assert_eq!(after.rate_limited_until, None, "{} after a success", p);
                    }
                    continue;
                }
                let running = before[i]
                    .rate_limited_until
                    .filter(|t| *t > now && before[i].terminal.is_none());
                if let (Some(t), None) = (running, after.terminal) {
                    prop_assert!(
                        after.rate_limited_until.is_some_and(|u| u >= t),
                        "{p}'s cooldown until {t} shortened to {:?} by {:?} on {}",
                        after.rate_limited_until, STEPS[step], PEERS[c]
                    );
                }
            }
        }
    }
}
