//! The in-memory configuration snapshot: keys, providers, connections and combos.
//!
//! The gateway builds one `Catalog` from the store at start and after every change, and
//! swaps it in atomically; the request path only ever reads an immutable catalog, so it
//! needs no database round trip and no lock. Validation happens when the catalog is
//! built: a catalog that exists is internally consistent (every combo target names a
//! known provider, every connection belongs to one).
//!
//! Building takes plain definitions and does no I/O: the gateway reads the rows.
//! Credentials are not part of the catalog; the shell keeps them apart.

use crate::alias::{Alias, Aliases, MAX_ALIASES};
use crate::apikey::KeyHash;
use crate::domain::{is_valid_id, AuthClass, ModelRef, UpstreamFormat};
use crate::resilience::admission;
use crate::routing::strategy::StrategyRef;
use crate::FastMap;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A provider: a family of interchangeable upstream accounts (`openai`, `glm`, `codex`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provider {
    pub id: String,
    pub format: UpstreamFormat,
    pub base_url: String,
    /// Models the provider offers. Empty = any model name is passed through.
    pub models: Vec<String>,
    /// Requests in flight across all its connections (SPEC R7's provider gate).
    pub max_concurrent: Option<u32>,
}

/// One upstream account of a provider. The credential is not part of the catalog: the
/// shell keeps credentials apart so that no decision code can leak them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    pub id: String,
    pub provider: String,
    pub auth_class: AuthClass,
    pub format: UpstreamFormat,
    pub base_url: String,
    pub enabled: bool,
    /// Requests in flight on the account (SPEC R7's account gate): the stricter of the
    /// connection's `max_concurrent` and its `rateLimitOverrides.maxConcurrent`.
    pub max_concurrent: Option<u32>,
    /// Per upstream model caps (`rateLimitOverrides.modelConcurrency`), exact ids.
    pub model_concurrency: BTreeMap<String, u32>,
    /// The connection's request-queue overrides (SPEC R10).
    pub queue: admission::Overrides,
    /// Failures never cool this connection down (SPEC R3's per-connection opt-out).
    pub disable_cooling: bool,
    /// The provider's error-rule family (SPEC R13, R14).
    pub family: String,
    /// Position in `Catalog::connections`; lets the shell keep per-connection runtime
    /// data in a plain vector parallel to the catalog.
    pub index: usize,
}

/// One target of a combo.
#[derive(Debug, Clone, PartialEq)]
pub struct ComboTarget {
    pub model: ModelRef,
    /// Pin the target to one connection of the provider.
    pub connection: Option<String>,
    pub weight: u32,
    pub cost: Option<f64>,
}

/// A named routing group.
#[derive(Debug, Clone, PartialEq)]
pub struct Combo {
    pub name: String,
    pub strategy: StrategyRef,
    pub targets: Vec<ComboTarget>,
}

/// A client API key as the request path sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub id: String,
    pub name: String,
    pub scopes: Vec<String>,
    /// Connection ids this key may use; `None` = all.
    pub allowed_connections: Option<Vec<String>>,
    /// Model names (`provider/model`, `provider/*` or a combo name) this key may use;
    /// `None` = all.
    pub allowed_models: Option<Vec<String>>,
    pub revoked: bool,
}

/// Scope that lets a client key call the management API.
pub const SCOPE_ADMIN: &str = "admin";

impl ApiKey {
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }

    pub fn may_use_connection(&self, connection_id: &str) -> bool {
        self.allowed_connections
            .as_ref()
            .is_none_or(|list| list.iter().any(|c| c == connection_id))
    }

    /// Whether the key may address `requested` (a combo name or `provider/model`).
    pub fn may_use_model(&self, requested: &str) -> bool {
        let Some(list) = &self.allowed_models else {
            return true;
        };
        list.iter().any(|pattern| match pattern.strip_suffix("/*") {
            Some(provider) => requested
                .split_once('/')
                .is_some_and(|(p, _)| p == provider),
            None => pattern == requested,
        })
    }
}

/// Why a set of definitions cannot form a catalog. Each variant names the offending item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    #[error("{kind} id `{id}` is invalid: use 1-64 letters, digits, '-', '_' or '.'")]
    InvalidId { kind: &'static str, id: String },
    #[error("duplicate {kind} id `{id}`")]
    Duplicate { kind: &'static str, id: String },
    #[error("connection `{connection}` names unknown provider `{provider}`")]
    UnknownProvider {
        connection: String,
        provider: String,
    },
    #[error("combo `{combo}` target `{target}` names unknown provider `{provider}`")]
    ComboUnknownProvider {
        combo: String,
        target: String,
        provider: String,
    },
    #[error("combo `{combo}` target `{target}` pins connection `{connection}`, which does not belong to provider `{provider}`")]
    ComboUnknownConnection {
        combo: String,
        target: String,
        connection: String,
        provider: String,
    },
    #[error("keys `{first}` and `{second}` have the same secret; every key needs its own")]
    SharedSecret { first: String, second: String },
    #[error("combo `{combo}` has no targets")]
    EmptyCombo { combo: String },
    #[error("combo name `{combo}` must not contain '/': it would be read as provider/model")]
    ComboNameWithSlash { combo: String },
    /// `url` is shown escaped: it may hold control characters.
    #[error("base URL `{url}` of {kind} `{id}` {reason}")]
    InvalidBaseUrl {
        kind: &'static str,
        id: String,
        url: String,
        reason: &'static str,
    },
    #[error("{kind} `{id}` max_concurrent must be at least 1 (omit it for no limit)")]
    ZeroCap { kind: &'static str, id: String },
    #[error("connection `{connection}` rate_limit_overrides: {message}")]
    InvalidRateLimitOverrides { connection: String, message: String },
    #[error("alias `{pattern}`: {message}")]
    Alias { pattern: String, message: String },
    #[error("at most {MAX_ALIASES} aliases")]
    TooManyAliases,
}

/// The validated, immutable configuration snapshot.
#[derive(Debug, Default)]
pub struct Catalog {
    providers: FastMap<String, Provider>,
    provider_order: Vec<String>,
    connections: Vec<Arc<Connection>>,
    by_provider: FastMap<String, Vec<usize>>,
    combos: FastMap<String, Combo>,
    combo_order: Vec<String>,
    keys: FastMap<KeyHash, ApiKey>,
    aliases: Aliases,
}

/// Raw connection definition from which the catalog derives a [`Connection`].
#[derive(Debug, Clone)]
pub struct ConnectionDef {
    pub id: String,
    pub provider: String,
    pub auth_class: AuthClass,
    /// Falls back to the provider's format.
    pub format: Option<UpstreamFormat>,
    /// Falls back to the provider's base URL.
    pub base_url: Option<String>,
    pub enabled: bool,
    pub max_concurrent: Option<u32>,
    /// `rateLimitOverrides`: see [`RateLimitOverrides::parse`].
    pub rate_limit_overrides: Option<Value>,
    pub disable_cooling: bool,
}

/// A connection's `rateLimitOverrides`, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimitOverrides {
    pub max_concurrent: Option<u32>,
    pub model_concurrency: BTreeMap<String, u32>,
    pub queue: admission::Overrides,
}

const OVERRIDE_FIELDS: &str =
    "maxConcurrent, modelConcurrency, maxWaitMs, executionMaxWaitMs, maxQueueDepth";

fn positive_cap(v: &Value, field: &str) -> Result<u32, String> {
    v.as_u64()
        .filter(|n| *n >= 1)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| format!("{field}: must be a whole number of at least 1"))
}

impl RateLimitOverrides {
    /// Reads `{"maxConcurrent": 4, "modelConcurrency": {"glm-5": 1}, "maxWaitMs": …,
    /// "executionMaxWaitMs": …, "maxQueueDepth": …}`. Every field is optional; unknown
    /// fields are refused so a misspelt limit is not silently ignored. Time limits and
    /// the queue depth are clamped later ([`admission::Limits::with`]).
    pub fn parse(v: &Value) -> Result<Self, String> {
        let Some(obj) = v.as_object() else {
            return Err("must be a JSON object".to_owned());
        };
        let mut out = Self::default();
        for (name, value) in obj {
            let number = || {
                value.as_u64().ok_or_else(|| {
                    format!("{name}: must be a whole number of milliseconds or requests")
                })
            };
            match name.as_str() {
                "maxConcurrent" => out.max_concurrent = Some(positive_cap(value, name)?),
                "modelConcurrency" => {
                    let Some(models) = value.as_object() else {
                        return Err(
                            "modelConcurrency: must be an object of model id to cap".to_owned()
                        );
                    };
                    for (model, cap) in models {
                        if model.is_empty() {
                            return Err("modelConcurrency: model ids must not be empty".to_owned());
                        }
                        let cap = positive_cap(cap, &format!("modelConcurrency.{model}"))?;
                        out.model_concurrency.insert(model.clone(), cap);
                    }
                }
                "maxWaitMs" => out.queue.max_wait_ms = Some(number()?),
                "executionMaxWaitMs" => out.queue.execution_max_wait_ms = Some(number()?),
                "maxQueueDepth" => out.queue.max_queue_depth = Some(number()?),
                other => {
                    return Err(format!(
                        "unknown field `{other}`; the known ones are {OVERRIDE_FIELDS}"
                    ))
                }
            }
        }
        Ok(out)
    }
}

fn check_url(kind: &'static str, id: &str, url: &str) -> Result<(), CatalogError> {
    base_url_problem(url).map_or(Ok(()), |reason| {
        Err(CatalogError::InvalidBaseUrl {
            kind,
            id: id.to_owned(),
            url: url.escape_debug().to_string(),
            reason,
        })
    })
}

/// What is wrong with a base URL, if anything. Checked in full when the URL is written,
/// so nothing unusable is ever stored: an absolute `http`/`https` URL with a host, an
/// optional port and path, and nothing that would change the request the gateway builds
/// from it (whitespace or control characters, which could split headers; user
/// information; a query or fragment, which the appended endpoint path would land in).
pub fn base_url_problem(url: &str) -> Option<&'static str> {
    let Some(rest) = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
    else {
        return Some("must start with http:// or https://");
    };
    if url.bytes().any(|b| b.is_ascii_control() || b == b' ') || !url.is_ascii() {
        return Some("must not contain spaces, control characters or non-ASCII characters (percent-encode them)");
    }
    if rest.contains(['?', '#']) {
        return Some("must not have a query or fragment");
    }
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return Some(
            "must not carry a user name or password: put the credential on the connection",
        );
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, after))
                if !addr.is_empty()
                    && addr
                        .bytes()
                        .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
                    && (after.is_empty() || after.starts_with(':')) =>
            {
                (addr, after.strip_prefix(':'))
            }
            _ => return Some("has an invalid IPv6 host"),
        },
        None => match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Some("needs a host");
    }
    if !authority.starts_with('[')
        && !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
    {
        return Some("has an invalid host");
    }
    if let Some(p) = port {
        if p.parse::<u16>().map_or(true, |n| n == 0) {
            return Some("has an invalid port: use 1-65535");
        }
    }
    None
}

fn check_id(kind: &'static str, id: &str) -> Result<(), CatalogError> {
    if is_valid_id(id) {
        Ok(())
    } else {
        Err(CatalogError::InvalidId {
            kind,
            id: id.to_owned(),
        })
    }
}

impl Catalog {
    /// Builds and validates a catalog.
    pub fn build(
        providers: Vec<Provider>,
        connections: Vec<ConnectionDef>,
        combos: Vec<Combo>,
        keys: Vec<(KeyHash, ApiKey)>,
    ) -> Result<Self, CatalogError> {
        let mut cat = Catalog::default();
        for p in providers {
            check_id("provider", &p.id)?;
            check_url("provider", &p.id, &p.base_url)?;
            if p.max_concurrent == Some(0) {
                return Err(CatalogError::ZeroCap {
                    kind: "provider",
                    id: p.id,
                });
            }
            if cat.providers.contains_key(&p.id) {
                return Err(CatalogError::Duplicate {
                    kind: "provider",
                    id: p.id,
                });
            }
            cat.provider_order.push(p.id.clone());
            cat.providers.insert(p.id.clone(), p);
        }
        for def in connections {
            check_id("connection", &def.id)?;
            let Some(provider) = cat.providers.get(&def.provider) else {
                return Err(CatalogError::UnknownProvider {
                    connection: def.id,
                    provider: def.provider,
                });
            };
            if cat.connections.iter().any(|c| c.id == def.id) {
                return Err(CatalogError::Duplicate {
                    kind: "connection",
                    id: def.id,
                });
            }
            let format = def.format.unwrap_or(provider.format);
            let base_url = def.base_url.unwrap_or_else(|| provider.base_url.clone());
            check_url("connection", &def.id, &base_url)?;
            if def.max_concurrent == Some(0) {
                return Err(CatalogError::ZeroCap {
                    kind: "connection",
                    id: def.id,
                });
            }
            let overrides = match &def.rate_limit_overrides {
                None | Some(Value::Null) => RateLimitOverrides::default(),
                Some(v) => RateLimitOverrides::parse(v).map_err(|message| {
                    CatalogError::InvalidRateLimitOverrides {
                        connection: def.id.clone(),
                        message,
                    }
                })?,
            };
            let max_concurrent = match (def.max_concurrent, overrides.max_concurrent) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let index = cat.connections.len();
            cat.by_provider
                .entry(def.provider.clone())
                .or_default()
                .push(index);
            cat.connections.push(Arc::new(Connection {
                format,
                family: crate::resilience::rules::family_of(&def.provider, &base_url),
                id: def.id,
                provider: def.provider,
                auth_class: def.auth_class,
                base_url,
                enabled: def.enabled,
                max_concurrent,
                model_concurrency: overrides.model_concurrency,
                queue: overrides.queue,
                disable_cooling: def.disable_cooling,
                index,
            }));
        }
        for combo in combos {
            cat.add_combo(combo)?;
        }
        for (hash, key) in keys {
            if let Some(other) = cat.keys.get(&hash) {
                return Err(CatalogError::SharedSecret {
                    first: other.id.clone(),
                    second: key.id,
                });
            }
            cat.keys.insert(hash, key);
        }
        Ok(cat)
    }

    fn add_combo(&mut self, combo: Combo) -> Result<(), CatalogError> {
        if combo.name.contains('/') {
            return Err(CatalogError::ComboNameWithSlash { combo: combo.name });
        }
        check_id("combo", &combo.name)?;
        if self.combos.contains_key(&combo.name) {
            return Err(CatalogError::Duplicate {
                kind: "combo",
                id: combo.name,
            });
        }
        if combo.targets.is_empty() {
            return Err(CatalogError::EmptyCombo { combo: combo.name });
        }
        for t in &combo.targets {
            if !self.providers.contains_key(&t.model.provider) {
                return Err(CatalogError::ComboUnknownProvider {
                    combo: combo.name.clone(),
                    target: t.model.to_string(),
                    provider: t.model.provider.clone(),
                });
            }
            if let Some(conn) = &t.connection {
                let belongs = self
                    .connection(conn)
                    .is_some_and(|c| c.provider == t.model.provider);
                if !belongs {
                    return Err(CatalogError::ComboUnknownConnection {
                        combo: combo.name.clone(),
                        target: t.model.to_string(),
                        connection: conn.clone(),
                        provider: t.model.provider.clone(),
                    });
                }
            }
        }
        self.combo_order.push(combo.name.clone());
        self.combos.insert(combo.name.clone(), combo);
        Ok(())
    }

    /// The catalog with `aliases` (SPEC G3), each checked: its pattern, its target (a
    /// combo, a `provider/model` of a known provider that offers the model, or a
    /// `qtSd/` name, whose pool the caller checks) and its keys.
    pub fn with_aliases(mut self, aliases: Vec<Alias>) -> Result<Self, CatalogError> {
        if aliases.len() > MAX_ALIASES {
            return Err(CatalogError::TooManyAliases);
        }
        for (i, a) in aliases.iter().enumerate() {
            let problem = a
                .problem()
                .or_else(|| self.target_problem(&a.target))
                .or_else(|| {
                    a.keys
                        .iter()
                        .find(|k| !self.keys.values().any(|key| &key.id == *k))
                        .map(|k| format!("key `{k}` does not exist"))
                })
                .or_else(|| {
                    aliases[..i]
                        .iter()
                        .any(|b| b.pattern == a.pattern && b.keys == a.keys)
                        .then(|| "defined twice for the same keys".to_owned())
                });
            if let Some(message) = problem {
                return Err(CatalogError::Alias {
                    pattern: a.pattern.clone(),
                    message,
                });
            }
        }
        self.aliases = Aliases::new(aliases);
        Ok(self)
    }

    /// Why `target` cannot be an alias's target, if it cannot.
    fn target_problem(&self, target: &str) -> Option<String> {
        if self.combos.contains_key(target) || target.starts_with(crate::routing::SHARE_PREFIX) {
            return None;
        }
        let Ok(model) = ModelRef::parse(target) else {
            return Some(format!(
                "target `{target}` is neither a combo nor provider/model"
            ));
        };
        match self.providers.get(&model.provider) {
            None => Some(format!(
                "target `{target}` names unknown provider `{}`",
                model.provider
            )),
            Some(p) if !p.models.is_empty() && !p.models.contains(&model.model) => Some(format!(
                "target `{target}`: provider `{}` does not offer model `{}`",
                p.id, model.model
            )),
            Some(_) => None,
        }
    }

    /// The aliases, in the operator's order.
    pub fn aliases(&self) -> &Aliases {
        &self.aliases
    }

    pub fn provider(&self, id: &str) -> Option<&Provider> {
        self.providers.get(id)
    }

    /// Providers in the order they were defined.
    pub fn providers(&self) -> impl Iterator<Item = &Provider> {
        self.provider_order
            .iter()
            .filter_map(|id| self.providers.get(id))
    }

    pub fn connections(&self) -> &[Arc<Connection>] {
        &self.connections
    }

    pub fn connection(&self, id: &str) -> Option<&Arc<Connection>> {
        self.connections.iter().find(|c| c.id == id)
    }

    /// Connections of a provider, in definition order.
    pub fn provider_connections(&self, provider: &str) -> impl Iterator<Item = &Arc<Connection>> {
        self.by_provider
            .get(provider)
            .into_iter()
            .flatten()
            .filter_map(|&i| self.connections.get(i))
    }

    pub fn combo(&self, name: &str) -> Option<&Combo> {
        self.combos.get(name)
    }

    /// Combos in the order they were defined.
    pub fn combos(&self) -> impl Iterator<Item = &Combo> {
        self.combo_order.iter().filter_map(|n| self.combos.get(n))
    }

    /// Every key, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = &ApiKey> {
        self.keys.values()
    }

    /// Finds the key whose hash is `hash` (a map lookup; see [`crate::apikey`] on why
    /// it need not be constant-time).
    pub fn key_by_hash(&self, hash: &KeyHash) -> Option<&ApiKey> {
        self.keys.get(hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_checked_in_full() {
        for good in [
            "https://api.openai.com",
            "https://api.x.ai/v1/",
            "http://127.0.0.1:9/openai/v1",
            "http://[::1]:8080/v1",
            "http://mock_host.internal:65535",
        ] {
            assert_eq!(base_url_problem(good), None, "{good}");
        }
        let bad = [
            ("ftp://x", "must start with http:// or https://"),
            ("api.openai.com", "must start with http:// or https://"),
            ("http://x\r\nX-Injected: 1", "must not contain spaces, control characters or non-ASCII characters (percent-encode them)"),
            ("http://x/a b", "must not contain spaces, control characters or non-ASCII characters (percent-encode them)"),
            ("http://exämple.com", "must not contain spaces, control characters or non-ASCII characters (percent-encode them)"),
            ("http://x/v1?key=1", "must not have a query or fragment"),
            ("http://x#frag", "must not have a query or fragment"),
            ("https://user:pw@x", "must not carry a user name or password: put the credential on the connection"),
            ("http://", "needs a host"),
            ("http:///v1", "needs a host"),
            ("http://:80", "needs a host"),
            ("http://x:0", "has an invalid port: use 1-65535"),
            ("http://x:65536", "has an invalid port: use 1-65535"),
            ("http://x:port", "has an invalid port: use 1-65535"),
            ("http://x%2f/v1", "has an invalid host"),
            ("http://[::1", "has an invalid IPv6 host"),
            ("http://[zz]:1", "has an invalid IPv6 host"),
            ("http://[::1]x", "has an invalid IPv6 host"),
        ];
        for (url, reason) in bad {
            assert_eq!(base_url_problem(url), Some(reason), "{url}");
        }
        let e = check_url("provider", "p", "http://x\r\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "base URL `http://x\\r\\n` of provider `p` must not contain spaces, control characters or non-ASCII characters (percent-encode them)"
        );
    }
}
