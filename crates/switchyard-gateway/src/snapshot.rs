//! The immutable configuration snapshot the request path reads.
//!
//! Built from the database rows at start and after every configuration change, then
//! swapped in atomically (`arc-swap`): a request loads the current snapshot once and uses
//! it to the end, so a change never tears a request in half, and reading it takes no lock
//! and no database round trip. Building is also how changes are validated: the management
//! API builds a catalog from the rows as they would be after the change, and writes only
//! if that succeeds.

use crate::client::Target;
use crate::telemetry::metrics::Metrics;
use crate::upstream::{self, Upstream};
use arc_swap::ArcSwap;
use axum::http::Uri;
use secrecy::ExposeSecret;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use switchyard_core::alias::Alias;
use switchyard_core::apikey::KeyHash;
use switchyard_core::catalog::{
    ApiKey, Catalog, CatalogError, Combo, ComboTarget, ConnectionDef, Provider,
};
use switchyard_core::domain::{AuthClass, ModelRef, UpstreamFormat};
use switchyard_core::format::{Format, MAX_COMPLETION_TOKENS};
use switchyard_core::quota::cost::Price;
use switchyard_core::resilience::rules::Rules;
use switchyard_core::routing;
use switchyard_core::routing::strategy::{self, StrategyRef};
use switchyard_core::settings::{self, Layers, Resolved, Settings};
use switchyard_core::FastMap;
use switchyard_model::ConfigRows;

/// The configuration in force: the snapshot the request path reads (swapped atomically
/// on change) and the layers and admin credential it is rebuilt with.
#[derive(Debug)]
pub struct LiveConfig {
    snapshot: ArcSwap<Snapshot>,
    /// Settings layers below the database (file, environment).
    pub layers: Layers,
    /// SHA-256 of the admin token the operator configured; when absent, the generated
    /// token in the snapshot applies.
    pub configured_admin: Option<KeyHash>,
}

impl LiveConfig {
    pub fn new(snapshot: Snapshot, layers: Layers, configured_admin: Option<KeyHash>) -> Self {
        Self {
            snapshot: ArcSwap::from_pointee(snapshot),
            layers,
            configured_admin,
        }
    }

    /// Swaps `next` in — unless a snapshot of a newer configuration version got there
    /// first (two reloads racing), which is kept. Returns the snapshot in force.
    pub fn swap_in(&self, next: Arc<Snapshot>) -> Arc<Snapshot> {
        self.snapshot.rcu(|current| {
            if current.version > next.version {
                Arc::clone(current)
            } else {
                Arc::clone(&next)
            }
        });
        self.snapshot()
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }
}

/// Why rows do not form a valid snapshot.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("combo `{combo}` target `{target}`: {message}")]
    Target {
        combo: String,
        target: String,
        message: String,
    },
    #[error("combo `{combo}`: {message}")]
    Strategy { combo: String, message: String },
    #[error("alias `{pattern}`: target `{target}` names unknown quota pool `{pool}`")]
    AliasPool {
        pattern: String,
        target: String,
        pool: String,
    },
    #[error("connection `{0}` has a credential that is not a valid HTTP header value")]
    Credential(String),
    #[error("connection `{connection}` has an invalid URL `{url}`")]
    Url { connection: String, url: String },
    #[error(transparent)]
    Setting(#[from] settings::SettingError),
    #[error(transparent)]
    Quota(#[from] crate::runtime::quota::index::QuotaConfigError),
    #[error("connection `{0}` has provider_specific_data that is not a valid HTTP header value (chatgptAccountId)")]
    AccountData(String),
    #[error("provider `{provider}` price of `{model}`: must be finite numbers >= 0")]
    Price { provider: String, model: String },
    #[error("provider `{provider}` max_output_tokens of `{model}`: must be a whole number from 1 to {MAX_COMPLETION_TOKENS}")]
    OutputLimit { provider: String, model: String },
    #[error("provider `{provider}` stream_timeouts.{problem}")]
    StreamTimeouts { provider: String, problem: String },
    #[error("provider `{provider}` context_windows of `{model}`: must be a whole number of tokens from 1 to {MAX_CONTEXT_WINDOW}")]
    ContextWindow { provider: String, model: String },
}

/// The largest context window a provider may declare, in tokens.
pub const MAX_CONTEXT_WINDOW: u64 = 100_000_000;

/// `provider_specific_data` flag that makes the gateway speak HTTP/2 without TLS
/// ("h2c", prior knowledge) to a connection — for local servers and proxies that offer
/// it. Over https, HTTP/2 is negotiated by ALPN without any flag.
pub const H2C_FLAG: &str = "http2_prior_knowledge";

/// One configuration snapshot.
#[derive(Debug)]
pub struct Snapshot {
    pub version: i64,
    pub catalog: Catalog,
    /// Parallel to `catalog.connections()`.
    pub upstreams: Vec<Upstream>,
    pub settings: Settings,
    pub resolved: Vec<Resolved>,
    /// The generated admin token's hash (ignored when the operator configured a token).
    pub admin_hash: Option<KeyHash>,
    /// Quota pools and plans.
    pub quota: crate::runtime::quota::QuotaIndex,
    /// USD prices by provider and upstream model name.
    pub prices: ByModel<Price>,
    /// Output token limits by provider and upstream model name.
    pub output_limits: ByModel<u64>,
    /// Context windows in tokens by provider and upstream model name.
    pub context_windows: ByModel<u64>,
    /// The error rules in force: the operator's, then the built-in ones (SPEC R13).
    pub rules: Rules,
    /// Some combo's strategy reads the service stats (`p2c`, `least-used`): only then
    /// does every attempt feed them, so a configuration without such a combo pays
    /// nothing for them on the request path.
    pub stats_read: bool,
    /// Some combo's strategy reads the provider's quota readings (`headroom`,
    /// `reset-window`, `reset-aware`): only then are they taken from the responses of
    /// connections outside quota pools.
    pub quota_read: bool,
}

/// A value per provider and upstream model, looked up without building a key: the
/// request path asks for prices, windows and limits of each candidate.
#[derive(Debug, Clone)]
pub struct ByModel<T>(FastMap<String, FastMap<String, T>>);

impl<T: Copy> ByModel<T> {
    fn new() -> Self {
        Self(FastMap::default())
    }

    fn insert(&mut self, provider: &str, model: &str, value: T) {
        self.0
            .entry(provider.to_owned())
            .or_default()
            .insert(model.to_owned(), value);
    }

    /// The value of `model` at `provider`, if one is configured.
    pub fn get(&self, provider: &str, model: &str) -> Option<T> {
        self.0.get(provider)?.get(model).copied()
    }

    /// Whether no provider configures any.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Snapshot {
    /// Whether the saturation headers of the answers of the connection at `index` are
    /// read (SPEC Q6): it is in a quota pool, or some combo's strategy reads the
    /// providers' quota readings.
    pub fn reads_signals(&self, index: usize) -> bool {
        self.quota_read || self.quota.pool_of(index).is_some()
    }

    /// Connection `id`'s upstream, when the configuration has the connection.
    pub fn upstream_of(&self, id: &str) -> Option<&Upstream> {
        self.catalog
            .connection(id)
            .and_then(|c| self.upstreams.get(c.index))
    }

    /// The price of `model` at `provider`, if the operator gave one.
    pub fn price(&self, provider: &str, model: &str) -> Option<Price> {
        self.prices.get(provider, model)
    }

    /// The context window of `model` at `provider`, if configured.
    pub fn context_window(&self, provider: &str, model: &str) -> Option<u64> {
        self.context_windows.get(provider, model)
    }

    /// The most output tokens `model` at `provider` may be asked for, if configured.
    pub fn output_limit(&self, provider: &str, model: &str) -> Option<u64> {
        self.output_limits.get(provider, model)
    }
}

/// Builds the catalog from rows; the validation every configuration change passes.
pub fn build_catalog(rows: &ConfigRows) -> Result<Catalog, SnapshotError> {
    let providers = rows
        .providers
        .iter()
        .map(|p| Provider {
            id: p.id.clone(),
            format: p.format,
            base_url: p.base_url.clone(),
            models: p.models.clone(),
            max_concurrent: p.max_concurrent,
        })
        .collect();
    let connections = rows
        .connections
        .iter()
        .map(|(c, _)| ConnectionDef {
            id: c.id.clone(),
            provider: c.provider.clone(),
            auth_class: c.auth_class,
            format: c.format,
            base_url: c.base_url.clone(),
            enabled: c.enabled,
            max_concurrent: c.max_concurrent,
            rate_limit_overrides: c.rate_limit_overrides.clone(),
            disable_cooling: c.disable_cooling,
        })
        .collect();
    let mut combos = Vec::with_capacity(rows.combos.len());
    for c in &rows.combos {
        let mut targets = Vec::with_capacity(c.targets.len());
        for t in &c.targets {
            let model = ModelRef::parse(&t.model).map_err(|e| SnapshotError::Target {
                combo: c.name.clone(),
                target: t.model.clone(),
                message: e.to_string(),
            })?;
            targets.push(ComboTarget {
                model,
                connection: t.connection.clone(),
                weight: t.weight,
                cost: t.cost,
            });
        }
        let strategy = strategy::named(&c.strategy).map_err(|e| SnapshotError::Strategy {
            combo: c.name.clone(),
            message: e.to_string(),
        })?;
        combos.push(Combo {
            name: c.name.clone(),
            strategy: StrategyRef(strategy),
            targets,
        });
    }
    let keys = rows
        .keys
        .iter()
        .filter_map(|k| {
            let Some(hash) = KeyHash::from_hex(&k.key_hash) else {
                tracing::warn!(key_id = %k.id, "Skipping API key with a malformed stored hash.");
                return None;
            };
            Some((
                hash,
                ApiKey {
                    id: k.id.clone(),
                    name: k.name.clone(),
                    scopes: k.scopes.clone(),
                    allowed_connections: k.allowed_connections.clone(),
                    allowed_models: k.allowed_models.clone(),
                    revoked: k.revoked_at.is_some(),
                },
            ))
        })
        .collect();
    let aliases = rows
        .aliases
        .iter()
        .map(|a| Alias {
            pattern: a.pattern.clone(),
            target: a.target.clone(),
            keys: a.keys.clone(),
        })
        .collect();
    Ok(Catalog::build(providers, connections, combos, keys)?.with_aliases(aliases)?)
}

fn settings_layers(rows: &ConfigRows, base: &Layers) -> Layers {
    let mut layers = base.clone();
    layers.database = rows
        .settings
        .iter()
        .map(|s| (s.key.clone(), s.value.clone()))
        .collect::<BTreeMap<_, _>>();
    layers
}

impl Snapshot {
    /// Builds a snapshot.
    pub fn build(
        rows: &ConfigRows,
        base: &Layers,
        metrics: &Metrics,
    ) -> Result<Self, SnapshotError> {
        let catalog = build_catalog(rows)?;
        let quota = crate::runtime::quota::QuotaIndex::build(
            &catalog,
            &rows.pools,
            &rows.plans,
            rows.version,
        )?;
        for a in catalog.aliases().all() {
            let Some(rest) = a.target.strip_prefix(routing::SHARE_PREFIX) else {
                continue;
            };
            let pool = rest.split('/').next().unwrap_or(rest);
            if quota.pool(pool).is_none() {
                return Err(SnapshotError::AliasPool {
                    pattern: a.pattern.clone(),
                    target: a.target.clone(),
                    pool: pool.to_owned(),
                });
            }
        }
        let mut prices = ByModel::new();
        let mut output_limits = ByModel::new();
        let mut context_windows = ByModel::new();
        let mut stream_overrides = HashMap::new();
        for p in &rows.providers {
            let overrides = switchyard_core::stream::Overrides::from(p.stream_timeouts);
            if let Some(problem) = overrides.problem() {
                return Err(SnapshotError::StreamTimeouts {
                    provider: p.id.clone(),
                    problem,
                });
            }
            stream_overrides.insert(p.id.as_str(), overrides);
            for (model, limit) in &p.max_output_tokens {
                if *limit == 0 || *limit > MAX_COMPLETION_TOKENS {
                    return Err(SnapshotError::OutputLimit {
                        provider: p.id.clone(),
                        model: model.clone(),
                    });
                }
                output_limits.insert(&p.id, model, *limit);
            }
            for (model, window) in &p.context_windows {
                if *window == 0 || *window > MAX_CONTEXT_WINDOW {
                    return Err(SnapshotError::ContextWindow {
                        provider: p.id.clone(),
                        model: model.clone(),
                    });
                }
                context_windows.insert(&p.id, model, *window);
            }
            for (model, price) in &p.prices {
                let ok = [price.input_per_mtok, price.output_per_mtok]
                    .iter()
                    .all(|v| v.is_finite() && *v >= 0.0);
                if !ok {
                    return Err(SnapshotError::Price {
                        provider: p.id.clone(),
                        model: model.clone(),
                    });
                }
                prices.insert(
                    &p.id,
                    model,
                    Price {
                        input_per_mtok: price.input_per_mtok,
                        output_per_mtok: price.output_per_mtok,
                    },
                );
            }
        }
        let resolution = settings::resolve(&settings_layers(rows, base))?;
        for e in &resolution.ignored {
            tracing::warn!(error = %e, "Ignoring an invalid stored setting.");
        }
        let mut upstreams = Vec::with_capacity(catalog.connections().len());
        for conn in catalog.connections() {
            let row = rows.connections.iter().find(|(c, _)| c.id == conn.id);
            let stored = row.map_or("", |(_, cred)| cred.expose_secret());
            // An OAuth grant authenticates with its access token; the gateway refreshes it.
            let grant = switchyard_core::oauth::Grant::from_credential(stored);
            let cred = grant.as_ref().map_or(stored, |g| g.access_token.as_str());
            let h2c = row
                .and_then(|(c, _)| c.provider_specific_data.as_ref())
                .and_then(|d| d.get(H2C_FLAG))
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false);
            let adapter = upstream::adapter(Format::of_upstream(conn.format));
            let data = row.and_then(|(c, _)| c.provider_specific_data.as_ref());
            let mut auth = if cred.is_empty() {
                Vec::new()
            } else {
                adapter
                    .auth_headers(cred, conn.auth_class)
                    .map_err(|_| SnapshotError::Credential(conn.id.clone()))?
            };
            auth.extend(
                adapter
                    .account_headers(conn.auth_class, data)
                    .map_err(|_| SnapshotError::AccountData(conn.id.clone()))?,
            );
            let bad_url = |url: &str| SnapshotError::Url {
                connection: conn.id.clone(),
                url: url.to_owned(),
            };
            let parse = |url: String| {
                Uri::try_from(url.as_str())
                    .ok()
                    .and_then(|uri| Target::new(uri).ok())
                    .ok_or_else(|| bad_url(&url))
            };
            let url = adapter.endpoint(&conn.base_url);
            let parsed = parse(url.clone())?;
            let count_url = adapter
                .count_tokens_endpoint(&conn.base_url)
                .map(parse)
                .transpose()?;
            let fields = Upstream::fields(parsed.uri(), &auth).ok_or_else(|| bad_url(&url))?;
            let wall = match (
                conn.format,
                row.and_then(|(c, _)| c.provider_specific_data.as_ref()),
            ) {
                (UpstreamFormat::Anthropic, Some(data)) => {
                    // The wall belongs to the account: for a refreshed grant, whose tokens
                    // change, that is the connection (a grant is never shared).
                    let account = match &grant {
                        Some(_) => format!("oauth-grant:{}", conn.id),
                        None => cred.to_owned(),
                    };
                    upstream::WallConfig::of(&conn.base_url, data, &account).map_err(|url| {
                        SnapshotError::Url {
                            connection: conn.id.clone(),
                            url,
                        }
                    })?
                }
                _ => None,
            };
            upstreams.push(Upstream {
                adapter,
                wall,
                url: parsed,
                count_url,
                oauth: conn.auth_class == AuthClass::Oauth,
                grant: grant.as_ref().map(|g| {
                    let record = rows.oauth.iter().find(|r| r.connection_id == conn.id);
                    upstream::GrantState {
                        expires_at: record.map_or(g.expires_at, |r| r.expires_at),
                        refreshes: record.map(|r| r.refreshes()).unwrap_or_default(),
                    }
                }),
                codex_backend: adapter.format() == Format::Responses
                    && crate::upstream::is_codex_backend(&url),
                h2c,
                secrets: match &grant {
                    Some(g) => {
                        upstream::secrets(&[stored, &g.access_token, &g.refresh_token], &auth)
                    }
                    None => upstream::secrets(&[stored], &auth),
                },
                fields,
                metrics: metrics.for_provider(
                    &conn.provider,
                    catalog
                        .provider(&conn.provider)
                        .map_or(&[][..], |p| p.models.as_slice()),
                ),
                stream: stream_overrides
                    .get(conn.provider.as_str())
                    .copied()
                    .unwrap_or_default(),
                egress: Default::default(),
            });
        }
        let stats_read = catalog.combos().any(|c| c.strategy.needs().stats);
        let quota_read = catalog.combos().any(|c| c.strategy.needs().quota);
        Ok(Self {
            stats_read,
            quota_read,
            version: rows.version,
            catalog,
            upstreams,
            rules: Rules::new(
                resolution.settings.resilience.restatements.clone(),
                resolution.settings.resilience.error_rules.clone(),
                resolution.settings.resilience.stream_stall_cooldown,
            ),
            settings: resolution.settings,
            resolved: resolution.resolved,
            admin_hash: rows.admin_token_hash.as_deref().and_then(KeyHash::from_hex),
            quota,
            prices,
            output_limits,
            context_windows,
        })
    }
}
