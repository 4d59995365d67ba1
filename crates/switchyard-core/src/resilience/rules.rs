//! Provider error rules as data (SPEC R13): status restatements, applied first, and
//! classification rules, which name a failure's cause, the scope it holds for and how
//! long. Built-in rules carry the cases providers are known for; an operator's rules
//! (settings `resilience.statusRestatements` and `resilience.providerErrorRules`) come
//! first and are trusted further: a provider with an operator rule has its full error
//! text matched and its rules' scope honoured, where built-in rules get either only on
//! the allow-lists below.
//!
//! Rules name a provider *family*: the family of a configured provider is the one its
//! base URL's host belongs to (`agentrouter.org` → `agentrouter`), else its id.

use super::verdict::{Cause, Scope};
use serde::{Deserialize, Serialize};

/// Longest marker or code a rule may name, and most rules of each kind: rules are
/// settings, bounded like every other setting.
const MAX_MARKER_CHARS: usize = 200;
const MAX_RULES: usize = 200;

/// The longest cooldown a rule may declare: a day (a longer lock is an operator's
/// manual disable).
pub const MAX_RULE_COOLDOWN_MS: u64 = 86_400_000;

/// Providers whose built-in rules see the full error text (body markers).
pub const FULL_TEXT_FAMILIES: &[&str] = &["agentrouter"];

/// Providers whose built-in rules' scope is acted on (else it is informational).
pub const HONORS_SCOPE_FAMILIES: &[&str] = &["agentrouter"];

/// Providers whose limits are per egress IP (SPEC R14): a 429 cools every connection of
/// the family last seen behind the same address.
pub const EGRESS_BUCKETED_FAMILIES: &[&str] = &["opencode"];

/// How far back a connection's last known egress counts (SPEC R14).
pub const EGRESS_WINDOW_MS: u64 = 24 * 3_600_000;

/// Known hosts of each family: the host itself or any subdomain.
const FAMILY_HOSTS: &[(&str, &str)] = &[
    ("agentrouter.org", "agentrouter"),
    ("opencode.ai", "opencode"),
    ("minimax.io", "minimax"),
    ("minimaxi.com", "minimax"),
    ("minimax.chat", "minimax"),
];

/// The rule family of a provider: by its base URL's host, else its id.
pub fn family_of(provider_id: &str, base_url: &str) -> String {
    let host = base_url
        .split_once("://")
        .map_or(base_url, |(_, rest)| rest)
        .split(['/', ':', '?'])
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    FAMILY_HOSTS
        .iter()
        .find(|(h, _)| host == *h || host.ends_with(&format!(".{h}")))
        .map_or_else(
            || provider_id.to_ascii_lowercase(),
            |(_, f)| (*f).to_owned(),
        )
}

/// A status restatement: an upstream answering `from_statuses` with one of
/// `text_markers` in its body (and none of `exclude_markers`) meant `to_status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Restatement {
    pub id: String,
    pub provider: String,
    pub from_statuses: Vec<u16>,
    pub to_status: u16,
    pub text_markers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_markers: Vec<String>,
    /// What the client is told to wait (`Retry-After`) when the upstream said nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_retry_after_ms: Option<u64>,
}

/// A classification rule: every condition given must hold (any one entry of a list).
/// Status `200` matches an error event inside a stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ErrorRule {
    pub id: String,
    pub provider: String,
    /// Empty: any error status (not a stream's error event).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub statuses: Vec<u16>,
    /// Response headers that must be present (name, lowercase).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<String>,
    /// The error's `code` or `type` (OpenAI `error.code` / `error.type`, Anthropic
    /// `error.type`), exactly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub codes: Vec<String>,
    /// Text in the error body; seen only for providers whose full text rules may read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub text_markers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_markers: Vec<String>,
    pub reason: Cause,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_ms: Option<u64>,
}

/// Every rule in force: the operator's, then the built-in ones, and the setting the
/// verdict of a stalled stream depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    pub restatements: Vec<Restatement>,
    pub rules: Vec<ErrorRule>,
    /// Families with at least one operator rule (of either kind).
    operator_families: Vec<String>,
    /// `streamStallCooldown`: a stalled stream cools its connection (SPEC R3, R11).
    pub stream_stall_cooldown: bool,
}

impl Default for Rules {
    fn default() -> Self {
        Self::new(Vec::new(), Vec::new(), false)
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The built-in restatements (the seed's agentrouter case).
pub fn builtin_restatements() -> Vec<Restatement> {
    vec![Restatement {
        id: "agentrouter-quota-restated".into(),
        provider: "agentrouter".into(),
        from_statuses: vec![400, 403],
        to_status: 429,
        text_markers: strings(&["用户额度不足", "额度不足"]),
        exclude_markers: strings(&["无权访问模型"]),
        default_retry_after_ms: Some(60_000),
    }]
}

/// The built-in classification rules.
pub fn builtin_rules() -> Vec<ErrorRule> {
    let rule = |id: &str, provider: &str, statuses: &[u16], reason: Cause| ErrorRule {
        id: id.into(),
        provider: provider.into(),
        statuses: statuses.to_vec(),
        headers: Vec::new(),
        codes: Vec::new(),
        text_markers: Vec::new(),
        exclude_markers: Vec::new(),
        reason,
        scope: None,
        cooldown_ms: None,
    };
    vec![
        ErrorRule {
            text_markers: strings(&["无权访问模型"]),
            scope: Some(Scope::Model),
            cooldown_ms: Some(6 * 3_600_000),
            ..rule(
                "agentrouter-model-access-denied",
                "agentrouter",
                &[400, 403],
                Cause::AuthError,
            )
        },
        ErrorRule {
            text_markers: strings(&["额度不足"]),
            scope: Some(Scope::Connection),
            ..rule(
                "agentrouter-user-quota-exhausted",
                "agentrouter",
                &[429],
                Cause::QuotaExhausted,
            )
        },
        ErrorRule {
            scope: Some(Scope::Connection),
            ..rule(
                "opencode-status-429",
                "opencode",
                &[429],
                Cause::RateLimitExceeded,
            )
        },
        ErrorRule {
            scope: Some(Scope::Connection),
            ..rule(
                "minimax-status-429",
                "minimax",
                &[429],
                Cause::RateLimitExceeded,
            )
        },
        ErrorRule {
            scope: Some(Scope::Provider),
            cooldown_ms: Some(30_000),
            ..rule("minimax-overloaded", "minimax", &[529], Cause::Overloaded)
        },
    ]
}

/// Why operator rules cannot be used; names the rule and its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RuleProblem(pub String);

fn check_markers(id: &str, field: &str, markers: &[String]) -> Result<(), RuleProblem> {
    if let Some(m) = markers
        .iter()
        .find(|m| m.trim().is_empty() || m.chars().count() > MAX_MARKER_CHARS)
    {
        return Err(RuleProblem(format!(
            "rule `{id}`: {field} entry `{m}` must be 1 to {MAX_MARKER_CHARS} characters"
        )));
    }
    Ok(())
}

fn check_statuses(
    id: &str,
    field: &str,
    statuses: &[u16],
    stream: bool,
) -> Result<(), RuleProblem> {
    let ok = |s: u16| (400..600).contains(&s) || (stream && s == 200);
    if let Some(s) = statuses.iter().find(|s| !ok(**s)) {
        return Err(RuleProblem(format!(
            "rule `{id}`: {field} entry {s} is not an HTTP error status{}",
            if stream {
                " (or 200 for a stream's error event)"
            } else {
                ""
            }
        )));
    }
    Ok(())
}

fn check_common(kind: &str, count: usize, ids: &[&str]) -> Result<(), RuleProblem> {
    if count > MAX_RULES {
        return Err(RuleProblem(format!("at most {MAX_RULES} {kind} rules")));
    }
    for (i, id) in ids.iter().enumerate() {
        if id.trim().is_empty() || id.chars().count() > MAX_MARKER_CHARS {
            return Err(RuleProblem(format!(
                "{kind} rule {i}: id must be 1 to {MAX_MARKER_CHARS} characters"
            )));
        }
        if ids[..i].contains(id) {
            return Err(RuleProblem(format!("{kind} rule id `{id}` is used twice")));
        }
    }
    Ok(())
}

/// Reads an operator's restatements (a JSON array) and checks them.
pub fn parse_restatements(json: &str) -> Result<Vec<Restatement>, RuleProblem> {
    let list: Vec<Restatement> = serde_json::from_str(json)
        .map_err(|e| RuleProblem(format!("not a list of restatements: {e}")))?;
    let ids: Vec<&str> = list.iter().map(|r| r.id.as_str()).collect();
    check_common("restatement", list.len(), &ids)?;
    for r in &list {
        if r.provider.trim().is_empty() {
            return Err(RuleProblem(format!("rule `{}`: provider is empty", r.id)));
        }
        if r.from_statuses.is_empty() || r.text_markers.is_empty() {
            return Err(RuleProblem(format!(
                "rule `{}`: fromStatuses and textMarkers must not be empty",
                r.id
            )));
        }
        check_statuses(&r.id, "fromStatuses", &r.from_statuses, false)?;
        check_statuses(&r.id, "toStatus", &[r.to_status], false)?;
        check_markers(&r.id, "textMarkers", &r.text_markers)?;
        check_markers(&r.id, "excludeMarkers", &r.exclude_markers)?;
        if r.default_retry_after_ms
            .is_some_and(|ms| ms > MAX_RULE_COOLDOWN_MS)
        {
            return Err(RuleProblem(format!(
                "rule `{}`: defaultRetryAfterMs must be <= {MAX_RULE_COOLDOWN_MS}",
                r.id
            )));
        }
    }
    Ok(list)
}

/// Reads an operator's classification rules (a JSON array) and checks them.
pub fn parse_rules(json: &str) -> Result<Vec<ErrorRule>, RuleProblem> {
    let list: Vec<ErrorRule> = serde_json::from_str(json)
        .map_err(|e| RuleProblem(format!("not a list of error rules: {e}")))?;
    let ids: Vec<&str> = list.iter().map(|r| r.id.as_str()).collect();
    check_common("error", list.len(), &ids)?;
    for r in &list {
        if r.provider.trim().is_empty() {
            return Err(RuleProblem(format!("rule `{}`: provider is empty", r.id)));
        }
        check_statuses(&r.id, "statuses", &r.statuses, true)?;
        check_markers(&r.id, "headers", &r.headers)?;
        check_markers(&r.id, "codes", &r.codes)?;
        check_markers(&r.id, "textMarkers", &r.text_markers)?;
        check_markers(&r.id, "excludeMarkers", &r.exclude_markers)?;
        if r.cooldown_ms
            .is_some_and(|ms| ms == 0 || ms > MAX_RULE_COOLDOWN_MS)
        {
            return Err(RuleProblem(format!(
                "rule `{}`: cooldownMs must be 1 to {MAX_RULE_COOLDOWN_MS}",
                r.id
            )));
        }
    }
    Ok(list)
}

impl Rules {
    /// The operator's rules, then the built-in ones.
    pub fn new(
        operator_restatements: Vec<Restatement>,
        operator_rules: Vec<ErrorRule>,
        stream_stall_cooldown: bool,
    ) -> Self {
        let mut operator_families: Vec<String> = operator_restatements
            .iter()
            .map(|r| r.provider.to_ascii_lowercase())
            .chain(
                operator_rules
                    .iter()
                    .map(|r| r.provider.to_ascii_lowercase()),
            )
            .collect();
        operator_families.sort();
        operator_families.dedup();
        let mut restatements = operator_restatements;
        restatements.extend(builtin_restatements());
        let mut rules = operator_rules;
        rules.extend(builtin_rules());
        Self {
            restatements,
            rules,
            operator_families,
            stream_stall_cooldown,
        }
    }

    /// Whether the operator wrote a rule for `family`.
    pub fn has_operator_rule(&self, family: &str) -> bool {
        self.operator_families.iter().any(|f| f == family)
    }

    /// Whether rules may read `family`'s full error text.
    pub fn full_text(&self, family: &str) -> bool {
        FULL_TEXT_FAMILIES.contains(&family) || self.has_operator_rule(family)
    }

    /// Whether `family`'s rules' scope is acted on.
    pub fn honors_scope(&self, family: &str) -> bool {
        HONORS_SCOPE_FAMILIES.contains(&family) || self.has_operator_rule(family)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_family_is_its_host_s_or_else_its_id() {
        assert_eq!(family_of("ar", "https://agentrouter.org"), "agentrouter");
        assert_eq!(
            family_of("ar", "https://api.agentrouter.org/v1"),
            "agentrouter"
        );
        assert_eq!(family_of("zen", "https://opencode.ai:443/zen"), "opencode");
        assert_eq!(family_of("mm", "https://api.minimaxi.com"), "minimax");
        assert_eq!(family_of("Alpha", "http://127.0.0.1:9000"), "alpha");
        // A look-alike host is not the family.
        assert_eq!(family_of("x", "https://notagentrouter.org"), "x");
    }

    #[test]
    fn operator_rules_come_first_and_open_both_allow_lists() {
        let op = parse_rules(
            r#"[{"id":"mine","provider":"Alpha","statuses":[400],"textMarkers":["quota gone"],
                 "reason":"quota_exhausted","scope":"connection","cooldownMs":60000}]"#,
        )
        .unwrap();
        let rules = Rules::new(Vec::new(), op, false);
        assert_eq!(rules.rules[0].id, "mine");
        assert_eq!(rules.rules.len(), builtin_rules().len() + 1);
        assert!(rules.full_text("alpha") && rules.honors_scope("alpha"));
        assert!(rules.full_text("agentrouter") && rules.honors_scope("agentrouter"));
        assert!(!rules.full_text("opencode") && !rules.honors_scope("opencode"));
    }

    #[test]
    fn bad_operator_rules_are_refused_with_the_rule_and_field() {
        let cases = [
            ("{}", "not a list of error rules"),
            (
                r#"[{"id":"a","provider":"p","reason":"nope"}]"#,
                "not a list of error rules",
            ),
            (
                r#"[{"id":"a","provider":"p","reason":"bad_request","statuses":[302]}]"#,
                "rule `a`: statuses entry 302 is not an HTTP error status",
            ),
            (
                r#"[{"id":"a","provider":"p","reason":"bad_request","cooldownMs":0}]"#,
                "rule `a`: cooldownMs must be 1 to 86400000",
            ),
            (
                r#"[{"id":"a","provider":"p","reason":"bad_request","textMarkers":[" "]}]"#,
                "rule `a`: textMarkers entry ` ` must be 1 to 200 characters",
            ),
            (
                r#"[{"id":"a","provider":"p","reason":"bad_request"},
                    {"id":"a","provider":"q","reason":"bad_request"}]"#,
                "error rule id `a` is used twice",
            ),
            (
                r#"[{"id":"a","provider":"","reason":"bad_request"}]"#,
                "rule `a`: provider is empty",
            ),
            (
                r#"[{"id":"a","provider":"p","reason":"bad_request","extra":1}]"#,
                "unknown field `extra`",
            ),
        ];
        for (json, want) in cases {
            let got = parse_rules(json).unwrap_err().0;
            assert!(got.contains(want), "{json}: {got}");
        }
        let restatement_cases = [
            (
                r#"[{"id":"r","provider":"p","fromStatuses":[],"toStatus":429,"textMarkers":["x"]}]"#,
                "rule `r`: fromStatuses and textMarkers must not be empty",
            ),
            (
                r#"[{"id":"r","provider":"p","fromStatuses":[403],"toStatus":200,"textMarkers":["x"]}]"#,
                "rule `r`: toStatus entry 200 is not an HTTP error status",
            ),
            (
                r#"[{"id":"r","provider":"p","fromStatuses":[403],"toStatus":429,"textMarkers":["x"],
                     "defaultRetryAfterMs":86400001}]"#,
                "rule `r`: defaultRetryAfterMs must be <= 86400000",
            ),
        ];
        for (json, want) in restatement_cases {
            let got = parse_restatements(json).unwrap_err().0;
            assert!(got.contains(want), "{json}: {got}");
        }
        assert_eq!(parse_rules("[]").unwrap(), Vec::new());
        assert_eq!(parse_restatements("[]").unwrap(), Vec::new());
    }
}
