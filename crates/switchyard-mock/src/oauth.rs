//! A fake OAuth authority for subscription accounts: the token endpoint the Codex CLI's
//! client refreshes with (`POST /oauth/token`) and Claude Code's (`POST
//! /v1/oauth/token`), with the rotation real authorities do (a refresh token is dead
//! once used), access tokens that expire, refusals (`invalid_grant`) and slow answers.
//! The completion routes answer 401, as the real upstreams do, for an access token this
//! authority issued that has expired or been replaced.
//!
//! An account is set with `POST /_mock/oauth`:
//! `{"account": "a1", "refresh_token": "a1-rt-0", "access_token": "a1-at-0",
//! "expires_in": 3600, "latency_ms": 0, "fail": {"status": 400, "error": "invalid_grant"}}`
//! (`fail` and `latency_ms` optional; `fail` answers every refresh with that status and
//! OAuth error). A refresh issues `<account>-at-<n>` and `<account>-rt-<n>`, `n` counting
//! from 1, valid `expires_in` seconds on the mock's clock. `GET /_mock/oauth` lists the
//! accounts with their live tokens, how many refreshes each answered, and how many came
//! with a dead refresh token.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};

/// An account as `POST /_mock/oauth` sets it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountSpec {
    pub account: String,
    pub refresh_token: String,
    pub access_token: String,
    /// Seconds an access token lives, the first one included.
    pub expires_in: u64,
    #[serde(default)]
    pub latency_ms: u64,
    #[serde(default)]
    pub fail: Option<Fail>,
}

/// How every refresh of an account is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fail {
    pub status: u16,
    pub error: String,
}

/// An account as `GET /_mock/oauth` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccountView {
    pub account: String,
    pub refresh_token: String,
    pub access_token: String,
    /// Unix seconds.
    pub expires_at: u64,
    pub refreshes: u64,
    /// Refreshes asked with a refresh token that was already used.
    pub reused: u64,
}

#[derive(Debug)]
struct Account {
    spec: AccountSpec,
    view: AccountView,
    generation: u64,
    /// Tokens replaced by a refresh.
    dead_refresh: HashSet<String>,
    dead_access: HashSet<String>,
}

/// Every account, by name.
#[derive(Debug, Default)]
pub struct Authority {
    accounts: BTreeMap<String, Account>,
}

/// A token endpoint's answer: status and JSON body.
pub type Answer = (u16, serde_json::Value);

/// The fields of a refresh request, as JSON or as a form.
#[derive(Debug, Deserialize)]
struct RefreshRequest {
    grant_type: Option<String>,
    refresh_token: Option<String>,
}

impl Authority {
    /// Sets (or replaces) an account at `now` (Unix seconds).
    pub fn set(&mut self, spec: AccountSpec, now: u64) {
        let view = AccountView {
            account: spec.account.clone(),
            refresh_token: spec.refresh_token.clone(),
            access_token: spec.access_token.clone(),
            expires_at: now.saturating_add(spec.expires_in),
            refreshes: 0,
            reused: 0,
        };
        let account = Account {
            spec,
            view,
            generation: 0,
            dead_refresh: HashSet::new(),
            dead_access: HashSet::new(),
        };
        self.accounts.insert(account.spec.account.clone(), account);
    }

    /// Every account, by name.
    pub fn list(&self) -> Vec<AccountView> {
        self.accounts.values().map(|a| a.view.clone()).collect()
    }

    /// Forgets every account.
    pub fn clear(&mut self) {
        self.accounts.clear();
    }

    /// How long the answer to a refresh with `body` waits: its account's latency.
    pub fn latency_ms(&self, body: &[u8]) -> u64 {
        parse(body)
            .and_then(|r| r.refresh_token)
            .and_then(|t| self.owner(&t))
            .map_or(0, |a| a.spec.latency_ms)
    }

    fn owner(&self, refresh_token: &str) -> Option<&Account> {
        self.accounts.values().find(|a| {
            a.view.refresh_token == refresh_token || a.dead_refresh.contains(refresh_token)
        })
    }

    /// Answers a refresh request with `body` (JSON or a form) at `now`.
    pub fn refresh(&mut self, body: &[u8], now: u64) -> Answer {
        let Some(request) = parse(body) else {
            return refused(
                400,
                "invalid_request",
                "the body is neither JSON nor a form",
            );
        };
        if request.grant_type.as_deref() != Some("refresh_token") {
            return refused(
                400,
                "unsupported_grant_type",
                "grant_type must be refresh_token",
            );
        }
        let Some(token) = request.refresh_token else {
            return refused(400, "invalid_request", "refresh_token is missing");
        };
        let Some(account) = self
            .accounts
            .values_mut()
            .find(|a| a.view.refresh_token == token || a.dead_refresh.contains(&token))
        else {
            return refused(400, "invalid_grant", "unknown refresh token");
        };
        if account.view.refresh_token != token {
            account.view.reused += 1;
            return refused(400, "invalid_grant", "refresh token already used");
        }
        if let Some(fail) = &account.spec.fail {
            return refused(fail.status, &fail.error, "refused by the mock");
        }
        account.generation += 1;
        let name = &account.spec.account;
        let n = account.generation;
        let old_refresh =
            std::mem::replace(&mut account.view.refresh_token, format!("{name}-rt-{n}"));
        let old_access =
            std::mem::replace(&mut account.view.access_token, format!("{name}-at-{n}"));
        account.dead_refresh.insert(old_refresh);
        account.dead_access.insert(old_access);
        account.view.expires_at = now.saturating_add(account.spec.expires_in);
        account.view.refreshes += 1;
        (
            200,
            serde_json::json!({
                "access_token": account.view.access_token,
                "refresh_token": account.view.refresh_token,
                "expires_in": account.spec.expires_in,
                "token_type": "Bearer",
            }),
        )
    }

    /// Whether `credential` is an access token this authority issued that no longer
    /// holds at `now`: expired, or replaced by a refresh.
    pub fn stale(&self, credential: &str, now: u64) -> bool {
        self.accounts.values().any(|a| {
            a.dead_access.contains(credential)
                || (a.view.access_token == credential && now >= a.view.expires_at)
        })
    }
}

fn parse(body: &[u8]) -> Option<RefreshRequest> {
    serde_json::from_slice(body)
        .ok()
        .or_else(|| serde_urlencoded::from_bytes(body).ok())
}

fn refused(status: u16, error: &str, description: &str) -> Answer {
    (
        status,
        serde_json::json!({"error": error, "error_description": description}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn authority(fail: Option<Fail>) -> Authority {
        let mut a = Authority::default();
        a.set(
            AccountSpec {
                account: "a1".into(),
                refresh_token: "a1-rt-0".into(),
                access_token: "a1-at-0".into(),
                expires_in: 3600,
                latency_ms: 0,
                fail,
            },
            NOW,
        );
        a
    }

    #[test]
    fn a_refresh_rotates_both_tokens_and_the_old_ones_are_dead() {
        let mut a = authority(None);
        let body =
            br#"{"grant_type": "refresh_token", "refresh_token": "a1-rt-0", "client_id": "x"}"#;
        let (status, answer) = a.refresh(body, NOW + 10);
        assert_eq!(status, 200);
        assert_eq!(
            answer,
            serde_json::json!({"access_token": "a1-at-1", "refresh_token": "a1-rt-1", "expires_in": 3600, "token_type": "Bearer"})
        );
        assert!(a.stale("a1-at-0", NOW + 10));
        assert!(!a.stale("a1-at-1", NOW + 3609));
        assert!(a.stale("a1-at-1", NOW + 3610));
        assert!(!a.stale("sk-other", NOW));
        // The used refresh token is refused, and counted; a form works as JSON does.
        let (status, answer) =
            a.refresh(b"grant_type=refresh_token&refresh_token=a1-rt-0", NOW + 20);
        assert_eq!(
            (status, &answer["error"]),
            (400, &serde_json::json!("invalid_grant"))
        );
        let (status, _) = a.refresh(b"grant_type=refresh_token&refresh_token=a1-rt-1", NOW + 20);
        assert_eq!(status, 200);
        assert_eq!(
            a.list(),
            vec![AccountView {
                account: "a1".into(),
                refresh_token: "a1-rt-2".into(),
                access_token: "a1-at-2".into(),
                expires_at: NOW + 3620,
                refreshes: 2,
                reused: 1,
            }]
        );
    }

    #[test]
    fn refusals_name_the_oauth_error() {
        let mut a = authority(Some(Fail {
            status: 400,
            error: "invalid_grant".into(),
        }));
        let body = br#"{"grant_type": "refresh_token", "refresh_token": "a1-rt-0"}"#;
        assert_eq!(a.refresh(body, NOW).0, 400);
        assert_eq!(a.list()[0].refreshes, 0);
        let (status, answer) = a.refresh(br#"{"grant_type": "password"}"#, NOW);
        assert_eq!(
            (status, &answer["error"]),
            (400, &serde_json::json!("unsupported_grant_type"))
        );
        assert_eq!(a.refresh(b"\xff", NOW).0, 400);
        let unknown = br#"{"grant_type": "refresh_token", "refresh_token": "nope"}"#;
        assert_eq!(a.refresh(unknown, NOW).1["error"], "invalid_grant");
    }
}
