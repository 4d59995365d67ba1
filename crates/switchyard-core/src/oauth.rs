//! OAuth subscription credentials (SPEC G4, R4): the tokens a Codex or Claude
//! subscription authenticates with are imported from the CLI's own credential file,
//! refreshed before they expire and after a 401, and failed refreshes end, after
//! [`FAILURES_TO_EXPIRE`] in a row, in `expired`. This module reads the CLIs' files,
//! says what a refresh request carries and what the token endpoint's answer means, and
//! decides when a refresh is due and what a failure leads to; the shell reads the
//! files, calls the endpoint and stores the tokens. Pure: `now` is an argument.

use crate::UnixMillis;
use serde::{Deserialize, Serialize};

/// Failed refreshes in a row after which the connection is `expired` (SPEC R4's
/// `EXPIRED_RETRY_MAX`: the first failure and the retries that follow it with back-off).
pub const FAILURES_TO_EXPIRE: u32 = crate::resilience::cooldown::EXPIRED_RETRY_MAX;

/// The wait after a first failed refresh; each later one waits four times longer.
pub const RETRY_BASE_MS: u64 = 30_000;

/// A 401 answered with a token refreshed less than this long ago is the account's
/// answer, not the token's: it is not refreshed again for it.
pub const FRESH_FOR_MS: u64 = 60_000;

/// The connection's `provider_specific_data` key of a Codex subscription's ChatGPT
/// account id, which the Codex backend is told (`ChatGPT-Account-ID`).
pub const ACCOUNT_KEY: &str = "chatgptAccountId";

/// Longest error text kept for the operator views.
const MAX_ERROR_CHARS: usize = 300;

/// One connection's refreshes, stored with its tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Refreshes {
    /// When the tokens were last refreshed (or imported).
    pub last_refresh_at: Option<UnixMillis>,
    /// Failed refreshes since the last success.
    pub failures: u32,
    /// No refresh is tried before this, after a failure.
    pub retry_at: Option<UnixMillis>,
    /// The token endpoint's last error, redacted by the caller.
    pub last_error: Option<String>,
}

/// Why a refresh is wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The access token expires within the margin.
    Expiring,
    /// The upstream answered 401.
    Unauthorized,
}

/// What a failed refresh leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// Tried again from this time on; the connection cools until then.
    RetryAt(UnixMillis),
    /// The connection is `expired` (terminal until a new credential or a successful
    /// manual refresh).
    Expired,
}

impl Refreshes {
    /// Whether a refresh should be tried at `now` for `why`: the token is known to
    /// expire at `expires_at` (when the credential says), and is refreshed `margin_ms`
    /// before. Never while a failed refresh waits for its retry, and never for a 401
    /// met right after a refresh.
    pub fn wanted(
        &self,
        why: Why,
        expires_at: Option<UnixMillis>,
        margin_ms: u64,
        now: UnixMillis,
    ) -> bool {
        if self.retry_at.is_some_and(|t| now < t) || self.failures >= FAILURES_TO_EXPIRE {
            return false;
        }
        match why {
            Why::Expiring => expires_at.is_some_and(|t| now >= t.saturating_sub(margin_ms)),
            Why::Unauthorized => self
                .last_refresh_at
                .is_none_or(|t| now.saturating_sub(t) >= FRESH_FOR_MS),
        }
    }

    /// A refresh (or a new credential) succeeded at `now`: failures are forgotten.
    pub fn on_success(&mut self, now: UnixMillis) {
        *self = Self {
            last_refresh_at: Some(now),
            ..Self::default()
        };
    }

    /// A refresh failed at `now` with `error` (already redacted).
    pub fn on_failure(&mut self, error: &str, now: UnixMillis) -> Failed {
        self.failures = self.failures.saturating_add(1);
        self.last_error = Some(error.chars().take(MAX_ERROR_CHARS).collect());
        if self.failures >= FAILURES_TO_EXPIRE {
            self.retry_at = None;
            return Failed::Expired;
        }
        let steps = self.failures.saturating_sub(1).min(8);
        let wait = RETRY_BASE_MS.saturating_mul(4u64.saturating_pow(steps));
        let at = now.saturating_add(wait);
        self.retry_at = Some(at);
        Failed::RetryAt(at)
    }

    /// Whether the failures made the connection `expired`.
    pub fn expired(&self) -> bool {
        self.failures >= FAILURES_TO_EXPIRE
    }
}

/// Whose public OAuth client a subscription's tokens belong to: a refresh goes to that
/// client's token endpoint with its id, as the CLI does (docs/research/oauth-cli-formats.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Issuer {
    /// The Codex CLI (a ChatGPT plan).
    Codex,
    /// Claude Code (a Claude plan).
    Claude,
}

impl Issuer {
    /// The token endpoint the CLI refreshes with.
    pub fn token_url(self) -> &'static str {
        match self {
            Self::Codex => "https://auth.openai.com/oauth/token",
            Self::Claude => "https://platform.claude.com/v1/oauth/token",
        }
    }

    /// The CLI's public OAuth client id.
    pub fn client_id(self) -> &'static str {
        match self {
            Self::Codex => "app_EMoamEEZ73f0CkXaXp7hrann",
            Self::Claude => "9d1c250a-e61b-44d9-88ed-5944d1962f5e",
        }
    }

    /// The JSON body of a refresh with `refresh_token`, as the CLI sends it (Claude
    /// Code names the stored scopes).
    pub fn refresh_body(self, refresh_token: &str, scopes: &[String]) -> serde_json::Value {
        let mut body = serde_json::json!({
            "grant_type": "refresh_token",
            "refresh_token": refresh_token,
            "client_id": self.client_id(),
        });
        if self == Self::Claude && !scopes.is_empty() {
            body["scope"] = serde_json::Value::String(scopes.join(" "));
        }
        body
    }
}

/// A subscription's tokens, as a CLI's credential file holds them and as the gateway
/// keeps them: the whole grant is the connection's credential (sealed like every
/// credential), as the JSON [`Grant::to_credential`] writes.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    #[serde(rename = "oauth")]
    pub issuer: Issuer,
    pub access_token: String,
    pub refresh_token: String,
    /// When the access token expires, when the file or the token says.
    pub expires_at: Option<UnixMillis>,
    /// The ChatGPT account the Codex backend is told (`ChatGPT-Account-ID`).
    pub account_id: Option<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Another token endpoint than the issuer's (a proxy, or a test's authority).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_url: Option<String>,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("issuer", &self.issuer)
            .field("expires_at", &self.expires_at)
            .field("account_id", &self.account_id)
            .field("token_url", &self.token_url)
            .finish_non_exhaustive()
    }
}

impl Grant {
    /// The grant a stored credential holds; `None` for a plain token or API key.
    pub fn from_credential(credential: &str) -> Option<Self> {
        if !credential.starts_with('{') {
            return None;
        }
        serde_json::from_str(credential).ok()
    }

    /// The credential that stores the grant.
    pub fn to_credential(&self) -> String {
        // A struct of strings and numbers always serialises.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The token endpoint a refresh goes to.
    pub fn token_url(&self) -> &str {
        self.token_url
            .as_deref()
            .unwrap_or_else(|| self.issuer.token_url())
    }

    /// The JSON body of this grant's refresh.
    pub fn refresh_body(&self) -> serde_json::Value {
        self.issuer.refresh_body(&self.refresh_token, &self.scopes)
    }

    /// The grant after `refreshed`: a rotated refresh token replaces the old one, which
    /// is dead once used.
    pub fn refreshed(&self, refreshed: Refreshed) -> Self {
        Self {
            access_token: refreshed.access_token,
            refresh_token: refreshed
                .refresh_token
                .unwrap_or_else(|| self.refresh_token.clone()),
            expires_at: refreshed.expires_at,
            ..self.clone()
        }
    }
}

/// Why a credential file cannot be imported; the text never quotes a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error("the file is not JSON")]
    NotJson,
    #[error("the file has no {0}: is it the {1}?")]
    Missing(&'static str, &'static str),
    #[error(
        "the login in the file was ended (its refresh token is empty): sign in with the CLI again"
    )]
    SignedOut,
}

#[derive(Deserialize)]
struct CodexFile {
    tokens: Option<CodexTokens>,
}

#[derive(Deserialize)]
struct CodexTokens {
    access_token: String,
    refresh_token: String,
    account_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClaudeFile {
    claude_ai_oauth: Option<ClaudeTokens>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClaudeTokens {
    access_token: String,
    refresh_token: Option<String>,
    expires_at: Option<UnixMillis>,
    #[serde(default)]
    scopes: Vec<String>,
}

/// The tokens of the Codex CLI's `auth.json` (`$CODEX_HOME/auth.json`): the access
/// token's expiry is its JWT's `exp`, the file holds none.
pub fn import_codex(text: &str) -> Result<Grant, ImportError> {
    let file: CodexFile = serde_json::from_str(text).map_err(|_| ImportError::NotJson)?;
    let tokens = file.tokens.ok_or(ImportError::Missing(
        "`tokens`",
        "Codex CLI's auth.json of a ChatGPT sign-in",
    ))?;
    if tokens.refresh_token.is_empty() {
        return Err(ImportError::SignedOut);
    }
    Ok(Grant {
        issuer: Issuer::Codex,
        expires_at: jwt_expiry(&tokens.access_token),
        access_token: tokens.access_token,
        refresh_token: tokens.refresh_token,
        account_id: tokens.account_id.filter(|a| !a.is_empty()),
        scopes: Vec::new(),
        token_url: None,
    })
}

/// The tokens of Claude Code's `.credentials.json` (`~/.claude/.credentials.json`).
pub fn import_claude(text: &str) -> Result<Grant, ImportError> {
    let file: ClaudeFile = serde_json::from_str(text).map_err(|_| ImportError::NotJson)?;
    let tokens = file.claude_ai_oauth.ok_or(ImportError::Missing(
        "`claudeAiOauth`",
        "Claude Code's .credentials.json",
    ))?;
    let refresh_token = tokens
        .refresh_token
        .filter(|t| !t.is_empty())
        .ok_or(ImportError::SignedOut)?;
    Ok(Grant {
        issuer: Issuer::Claude,
        access_token: tokens.access_token,
        refresh_token,
        expires_at: tokens.expires_at,
        account_id: None,
        scopes: tokens.scopes,
        token_url: None,
    })
}

/// A JWT's `exp` claim, in Unix milliseconds; `None` when `token` is not a JWT with one.
pub fn jwt_expiry(token: &str) -> Option<UnixMillis> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims["exp"].as_u64()?.checked_mul(1_000)
}

/// New tokens from a token endpoint.
#[derive(Clone, PartialEq, Eq)]
pub struct Refreshed {
    pub access_token: String,
    /// The rotated refresh token; `None` when the endpoint kept the old one.
    pub refresh_token: Option<String>,
    pub expires_at: Option<UnixMillis>,
}

impl std::fmt::Debug for Refreshed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refreshed")
            .field("rotated", &self.refresh_token.is_some())
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// What a token endpoint answered a refresh with `status` and `body` at `now`: the new
/// tokens, or the refusal as the operator views show it (the OAuth error code and
/// description, bounded; never a token).
pub fn read_refresh_answer(status: u16, body: &[u8], now: UnixMillis) -> Result<Refreshed, String> {
    let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    if (200..300).contains(&status) {
        let json = json.ok_or_else(|| format!("HTTP {status} with a body that is not JSON"))?;
        let access_token = json["access_token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| format!("HTTP {status} without an access_token"))?
            .to_owned();
        let expires_at = json["expires_in"]
            .as_u64()
            .map(|s| now.saturating_add(s.saturating_mul(1_000)))
            .or_else(|| jwt_expiry(&access_token));
        let refresh_token = json["refresh_token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        return Ok(Refreshed {
            access_token,
            refresh_token,
            expires_at,
        });
    }
    let error = json.as_ref().map(|j| {
        let code = j["error"]
            .as_str()
            .or(j["error"]["code"].as_str())
            .or(j["error"]["type"].as_str());
        let text = j["error_description"]
            .as_str()
            .or(j["error"]["message"].as_str());
        match (code, text) {
            (Some(c), Some(t)) => format!("{c}: {t}"),
            (Some(c), None) => c.to_owned(),
            (None, Some(t)) => t.to_owned(),
            (None, None) => String::new(),
        }
    });
    let error = error
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| "no error in the body".to_owned());
    Err(format!(
        "HTTP {status}: {}",
        error.chars().take(200).collect::<String>()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000_000;
    const MARGIN: u64 = 300_000;

    #[test]
    fn a_refresh_is_due_within_the_margin_of_the_expiry_and_never_without_one() {
        let r = Refreshes::default();
        let expires = Some(T0 + 3_600_000);
        let due = |now| r.wanted(Why::Expiring, expires, MARGIN, now);
        assert!(!due(T0));
        assert!(!due(T0 + 3_600_000 - MARGIN - 1));
        assert!(due(T0 + 3_600_000 - MARGIN));
        assert!(due(T0 + 3_600_000 + 1));
        assert!(!r.wanted(Why::Expiring, None, MARGIN, T0));
        // A margin longer than the token's life: due at once.
        assert!(r.wanted(Why::Expiring, Some(10), MARGIN, 0));
    }

    #[test]
    fn a_401_right_after_a_refresh_is_the_account_s_answer() {
        let mut r = Refreshes::default();
        assert!(r.wanted(Why::Unauthorized, None, MARGIN, T0));
        r.on_success(T0);
        assert!(!r.wanted(Why::Unauthorized, None, MARGIN, T0 + FRESH_FOR_MS - 1));
        assert!(r.wanted(Why::Unauthorized, None, MARGIN, T0 + FRESH_FOR_MS));
    }

    #[test]
    fn failures_back_off_and_the_third_in_a_row_expires_the_connection() {
        let mut r = Refreshes::default();
        let expires = Some(T0);
        assert_eq!(
            r.on_failure("invalid_grant", T0),
            Failed::RetryAt(T0 + 30_000)
        );
        assert!(!r.wanted(Why::Expiring, expires, MARGIN, T0 + 29_999));
        assert!(!r.wanted(Why::Unauthorized, expires, MARGIN, T0 + 29_999));
        assert!(r.wanted(Why::Expiring, expires, MARGIN, T0 + 30_000));
        assert_eq!(
            r.on_failure("timed out", T0 + 30_000),
            Failed::RetryAt(T0 + 30_000 + 120_000)
        );
        assert_eq!(r.failures, 2);
        assert!(!r.expired());
        assert_eq!(r.on_failure("invalid_grant", T0 + 150_000), Failed::Expired);
        assert!(r.expired());
        assert_eq!(r.last_error.as_deref(), Some("invalid_grant"));
        // Expired: no more tries until a success (a new credential, a manual refresh).
        assert!(!r.wanted(Why::Expiring, expires, MARGIN, T0 + 10_000_000));
        assert!(!r.wanted(Why::Unauthorized, expires, MARGIN, T0 + 10_000_000));
        r.on_success(T0 + 10_000_000);
        assert_eq!(
            r,
            Refreshes {
                last_refresh_at: Some(T0 + 10_000_000),
                ..Refreshes::default()
            }
        );
    }

    #[test]
    fn a_success_between_failures_starts_the_count_again_and_errors_are_bounded() {
        let mut r = Refreshes::default();
        r.on_failure("x", T0);
        r.on_failure("x", T0 + 30_000);
        r.on_success(T0 + 200_000);
        assert_eq!(
            r.on_failure(&"e".repeat(1_000), T0 + 300_000),
            Failed::RetryAt(T0 + 330_000)
        );
        assert_eq!(
            r.last_error.as_ref().map(String::len),
            Some(MAX_ERROR_CHARS)
        );
    }

    /// A JWT whose payload is `claims` (not signed).
    fn jwt(claims: &str) -> String {
        use base64::Engine as _;
        let enc = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!(
            "{}.{}.sig",
            enc.encode(r#"{"alg":"RS256"}"#),
            enc.encode(claims)
        )
    }

    #[test]
    fn codex_s_auth_json_is_imported_with_the_access_token_s_expiry() {
        let access = jwt(r#"{"exp": 1800000600, "sub": "u"}"#);
        let file = format!(
            r#"{{"OPENAI_API_KEY": null, "auth_mode": "chatgpt", "tokens": {{"id_token": "x.y.z", "access_token": "{access}", "refresh_token": "rt-1", "account_id": "acct-9"}}, "last_refresh": "2026-12-01T10:00:00Z"}}"#
        );
        assert_eq!(
            import_codex(&file),
            Ok(Grant {
                issuer: Issuer::Codex,
                access_token: access,
                refresh_token: "rt-1".into(),
                expires_at: Some(1_800_000_600_000),
                account_id: Some("acct-9".into()),
                scopes: vec![],
                token_url: None,
            })
        );
        let api_key_sign_in = import_codex(r#"{"OPENAI_API_KEY": "sk-x"}"#);
        assert_eq!(
            api_key_sign_in,
            Err(ImportError::Missing(
                "`tokens`",
                "Codex CLI's auth.json of a ChatGPT sign-in"
            ))
        );
        assert!(!api_key_sign_in.unwrap_err().to_string().contains("sk-x"));
        assert_eq!(import_codex("nope"), Err(ImportError::NotJson));
        let opaque =
            r#"{"tokens": {"id_token": "", "access_token": "opaque", "refresh_token": "r"}}"#;
        assert_eq!(import_codex(opaque).map(|i| i.expires_at), Ok(None));
        let signed_out =
            r#"{"tokens": {"id_token": "", "access_token": "a", "refresh_token": ""}}"#;
        assert_eq!(import_codex(signed_out), Err(ImportError::SignedOut));
    }

    #[test]
    fn claude_code_s_credentials_are_imported_and_a_signed_out_file_is_refused() {
        let file = r#"{"claudeAiOauth": {"accessToken": "sk-ant-oat01-a", "refreshToken": "sk-ant-ort01-r", "expiresAt": 1800003600000, "scopes": ["user:inference", "user:profile"], "subscriptionType": "max"}}"#;
        let imported = import_claude(file).unwrap();
        assert_eq!(
            imported,
            Grant {
                issuer: Issuer::Claude,
                access_token: "sk-ant-oat01-a".into(),
                refresh_token: "sk-ant-ort01-r".into(),
                expires_at: Some(1_800_003_600_000),
                account_id: None,
                scopes: vec!["user:inference".into(), "user:profile".into()],
                token_url: None,
            }
        );
        assert!(!format!("{imported:?}").contains("sk-ant"));
        let out = r#"{"claudeAiOauth": {"accessToken": "a", "refreshToken": "", "expiresAt": 1}}"#;
        assert_eq!(import_claude(out), Err(ImportError::SignedOut));
        assert_eq!(
            import_claude("{}"),
            Err(ImportError::Missing(
                "`claudeAiOauth`",
                "Claude Code's .credentials.json"
            ))
        );
    }

    #[test]
    fn refresh_requests_are_the_cli_s_and_answers_are_read_with_rotation_and_expiry() {
        let scopes = ["user:inference".to_owned(), "user:profile".to_owned()];
        assert_eq!(
            Issuer::Claude.refresh_body("r1", &scopes),
            serde_json::json!({"grant_type": "refresh_token", "refresh_token": "r1", "client_id": "9d1c250a-e61b-44d9-88ed-5944d1962f5e", "scope": "user:inference user:profile"})
        );
        assert_eq!(
            Issuer::Codex.refresh_body("r1", &[]),
            serde_json::json!({"grant_type": "refresh_token", "refresh_token": "r1", "client_id": "app_EMoamEEZ73f0CkXaXp7hrann"})
        );
        let answer = br#"{"access_token": "a2", "refresh_token": "r2", "expires_in": 3600, "token_type": "Bearer"}"#;
        let rotated = read_refresh_answer(200, answer, T0).unwrap();
        assert_eq!(
            rotated,
            Refreshed {
                access_token: "a2".into(),
                refresh_token: Some("r2".into()),
                expires_at: Some(T0 + 3_600_000),
            }
        );
        assert!(!format!("{rotated:?}").contains("a2"));
        // Codex's endpoint answers no expires_in: the access token's own `exp` says.
        let access = jwt(r#"{"exp": 1800000600}"#);
        let body = format!(r#"{{"access_token": "{access}", "id_token": "x"}}"#);
        let kept = read_refresh_answer(200, body.as_bytes(), T0).unwrap();
        assert_eq!(
            (kept.expires_at, kept.refresh_token),
            (Some(1_800_000_600_000), None)
        );
        let refusals: [(u16, &[u8], &str); 4] = [
            (
                400,
                br#"{"error": "invalid_grant", "error_description": "refresh token already used"}"#,
                "HTTP 400: invalid_grant: refresh token already used",
            ),
            (
                401,
                br#"{"error": {"code": "refresh_token_reused", "message": "Your refresh token has already been used"}}"#,
                "HTTP 401: refresh_token_reused: Your refresh token has already been used",
            ),
            (502, b"<html>", "HTTP 502: no error in the body"),
            (200, br#"{"token_type": "Bearer"}"#, "HTTP 200 without an access_token"),
        ];
        for (status, body, want) in refusals {
            assert_eq!(read_refresh_answer(status, body, T0), Err(want.to_owned()));
        }
    }

    #[test]
    fn a_grant_is_stored_as_its_credential_and_a_refresh_rotates_it() {
        let file = r#"{"claudeAiOauth": {"accessToken": "a1", "refreshToken": "r1", "expiresAt": 1800003600000, "scopes": ["user:inference"]}}"#;
        let mut grant = import_claude(file).unwrap();
        assert_eq!(
            grant.token_url(),
            "https://platform.claude.com/v1/oauth/token"
        );
        grant.token_url = Some("http://127.0.0.1:9/v1/oauth/token".into());
        let stored = grant.to_credential();
        assert_eq!(
            stored,
            r#"{"oauth":"claude","access_token":"a1","refresh_token":"r1","expires_at":1800003600000,"account_id":null,"scopes":["user:inference"],"token_url":"http://127.0.0.1:9/v1/oauth/token"}"#
        );
        assert_eq!(Grant::from_credential(&stored), Some(grant.clone()));
        assert_eq!(Grant::from_credential("sk-plain-key"), None);
        assert_eq!(Grant::from_credential(r#"{"api_key": "x"}"#), None);
        assert_eq!(grant.token_url(), "http://127.0.0.1:9/v1/oauth/token");
        assert_eq!(
            grant.refresh_body()["refresh_token"],
            serde_json::json!("r1")
        );
        let rotated = grant.refreshed(Refreshed {
            access_token: "a2".into(),
            refresh_token: Some("r2".into()),
            expires_at: Some(T0),
        });
        assert_eq!(
            (
                rotated.access_token.as_str(),
                rotated.refresh_token.as_str()
            ),
            ("a2", "r2")
        );
        assert_eq!((rotated.expires_at, rotated.scopes.len()), (Some(T0), 1));
        let kept = rotated.refreshed(Refreshed {
            access_token: "a3".into(),
            refresh_token: None,
            expires_at: None,
        });
        assert_eq!(kept.refresh_token, "r2");
        assert!(!format!("{kept:?}").contains("a3") && !format!("{kept:?}").contains("r2"));
    }
}
