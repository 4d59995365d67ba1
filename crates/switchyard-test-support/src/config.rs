//! A typed builder for the gateway's configuration file: tests describe providers,
//! connections, combos, keys, quota pools and settings, and [`Config::to_toml`] renders
//! the TOML the gateway reads. Only what a test sets is written; everything else keeps
//! the gateway's default.

use crate::{CRED_ALPHA, CRED_BETA, KEY, OPS_KEY};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use switchyard_core::domain::{AuthClass, UpstreamFormat};
use switchyard_gateway::config::{self as gateway_config, FileConfig, GatewayConfig};

/// A whole configuration file.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Config {
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<Server>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    settings: BTreeMap<String, toml::Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    providers: Vec<Provider>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    connections: Vec<Connection>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    combos: Vec<Combo>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    aliases: Vec<Alias>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    keys: Vec<Key>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    quota_pools: Vec<QuotaPool>,
}

impl Config {
    /// An empty configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// The standard configuration: two providers on the mock, one connection each, a
    /// priority combo across them, a client key and an admin-scoped key. Failures do not
    /// cool its connections down (`disable_cooling`): tests of other features inject
    /// failures one request after another; the resilience tests use configurations of
    /// their own.
    pub fn standard(mock_url: &str) -> Self {
        Self::new()
            .provider(Provider::openai("alpha", mock_url).models(["mock-small", "mock-large"]))
            .provider(Provider::openai("beta", &format!("{mock_url}/v1")).models(["mock-small"]))
            .connection(
                Connection::apikey("alpha-1", "alpha")
                    .credential(CRED_ALPHA)
                    .disable_cooling(),
            )
            .connection(
                Connection::apikey("beta-1", "beta")
                    .credential(CRED_BETA)
                    .disable_cooling(),
            )
            .combo(Combo::priority(
                "fast",
                ["alpha/mock-small", "beta/mock-small"],
            ))
            .key(Key::new("k1", "tester", KEY))
            .key(Key::new("ops", "ops", OPS_KEY).scopes(["admin"]))
    }

    /// The standard configuration plus an Anthropic-format provider `claude` on the mock
    /// (models `claude-opus` and `claude-haiku`, connection `claude-1` with
    /// [`crate::CRED_CLAUDE`]) and a combo `mixed` that fails over from
    /// `claude/claude-opus` to the OpenAI-format `alpha/mock-small`.
    pub fn anthropic(mock_url: &str) -> Self {
        Self::standard(mock_url)
            .provider(
                Provider::anthropic("claude", mock_url).models(["claude-opus", "claude-haiku"]),
            )
            .connection(
                Connection::apikey("claude-1", "claude")
                    .credential(crate::CRED_CLAUDE)
                    .disable_cooling(),
            )
            .combo(Combo::priority(
                "mixed",
                ["claude/claude-opus", "alpha/mock-small"],
            ))
    }

    /// The Anthropic configuration plus a Responses-format provider `codex` on the mock
    /// (model `gpt-5-codex`, connection `codex-1` with [`crate::CRED_CODEX`]).
    pub fn responses(mock_url: &str) -> Self {
        Self::anthropic(mock_url)
            .provider(Provider::responses("codex", mock_url).models(["gpt-5-codex"]))
            .connection(
                Connection::apikey("codex-1", "codex")
                    .credential(crate::CRED_CODEX)
                    .disable_cooling(),
            )
    }

    /// Sets the `[server]` section.
    pub fn server(mut self, server: Server) -> Self {
        self.server = Some(server);
        self
    }

    /// Sets one entry of `[settings]` (`key` as the settings name it, e.g.
    /// `upstream.first_byte_timeout_ms`).
    pub fn setting(mut self, key: &str, value: impl Into<toml::Value>) -> Self {
        self.settings.insert(key.to_owned(), value.into());
        self
    }

    /// Adds a provider after the others.
    pub fn provider(mut self, provider: Provider) -> Self {
        self.providers.push(provider);
        self
    }

    /// Adds a connection after the others.
    pub fn connection(mut self, connection: Connection) -> Self {
        self.connections.push(connection);
        self
    }

    /// Adds a combo after the others.
    pub fn combo(mut self, combo: Combo) -> Self {
        self.combos.push(combo);
        self
    }

    /// Adds a model alias after the others (`[[aliases]]`): requests for a name matching
    /// `pattern` (exact or a glob with `*`) go to `target`; `keys` limits it to those
    /// key ids (empty = every key).
    pub fn alias<'a>(
        mut self,
        pattern: &str,
        target: &str,
        keys: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        self.aliases.push(Alias {
            pattern: pattern.to_owned(),
            target: target.to_owned(),
            keys: keys.into_iter().map(str::to_owned).collect(),
        });
        self
    }

    /// Adds a client key after the others.
    pub fn key(mut self, key: Key) -> Self {
        self.keys.push(key);
        self
    }

    /// Adds a quota pool after the others.
    pub fn quota_pool(mut self, pool: QuotaPool) -> Self {
        self.quota_pools.push(pool);
        self
    }

    /// Changes provider `id` in place; panics when there is none.
    pub fn edit_provider(mut self, id: &str, edit: impl FnOnce(Provider) -> Provider) -> Self {
        let slot = self.providers.iter_mut().find(|p| p.id == id);
        let slot = slot.unwrap_or_else(|| panic!("no provider `{id}` to edit"));
        *slot = edit(slot.clone());
        self
    }

    /// Changes connection `id` in place; panics when there is none.
    pub fn edit_connection(
        mut self,
        id: &str,
        edit: impl FnOnce(Connection) -> Connection,
    ) -> Self {
        let slot = self.connections.iter_mut().find(|c| c.id == id);
        let slot = slot.unwrap_or_else(|| panic!("no connection `{id}` to edit"));
        *slot = edit(slot.clone());
        self
    }

    /// The configuration as the TOML text of a config file.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a test configuration renders as TOML")
    }

    /// The gateway's configuration from this file, with `data_dir` and `env` as its
    /// environment, resolved as a gateway started with them would.
    pub fn resolve(&self, data_dir: &Path, env: &[(&str, &str)]) -> GatewayConfig {
        let mut vars = BTreeMap::from([(
            "SWITCHYARD_DATA_DIR".to_owned(),
            data_dir.display().to_string(),
        )]);
        vars.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        let file = FileConfig::parse(&self.to_toml()).unwrap();
        gateway_config::resolve(file, &vars).unwrap()
    }
}

/// The `[server]` section.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Server {
    #[serde(skip_serializing_if = "Option::is_none")]
    listen: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    admin_token: Option<String>,
}

impl Server {
    /// A section that sets nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The address to listen on (`127.0.0.1:0` for a free port).
    pub fn listen(mut self, addr: &str) -> Self {
        self.listen = Some(addr.to_owned());
        self
    }

    /// The data directory.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// A fixed admin token.
    pub fn admin_token(mut self, token: &str) -> Self {
        self.admin_token = Some(token.to_owned());
        self
    }
}

/// A provider (`[[providers]]`).
#[derive(Debug, Clone, Serialize)]
pub struct Provider {
    id: String,
    format: UpstreamFormat,
    base_url: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    models: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_concurrent: Option<u32>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    prices: BTreeMap<String, Price>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    max_output_tokens: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    stream_timeouts: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    context_windows: BTreeMap<String, u64>,
}

/// A model's price in USD per million tokens.
#[derive(Debug, Clone, Copy, Serialize)]
struct Price {
    input_per_mtok: f64,
    output_per_mtok: f64,
}

impl Provider {
    /// An OpenAI-compatible provider at `base_url` that passes any model name through.
    pub fn openai(id: &str, base_url: &str) -> Self {
        Self {
            id: id.to_owned(),
            format: UpstreamFormat::Openai,
            base_url: base_url.to_owned(),
            models: Vec::new(),
            max_concurrent: None,
            prices: BTreeMap::new(),
            max_output_tokens: BTreeMap::new(),
            stream_timeouts: BTreeMap::new(),
            context_windows: BTreeMap::new(),
        }
    }

    /// An Anthropic Messages provider at `base_url`.
    pub fn anthropic(id: &str, base_url: &str) -> Self {
        Self {
            format: UpstreamFormat::Anthropic,
            ..Self::openai(id, base_url)
        }
    }

    /// An OpenAI Responses provider at `base_url`.
    pub fn responses(id: &str, base_url: &str) -> Self {
        Self {
            format: UpstreamFormat::Responses,
            ..Self::openai(id, base_url)
        }
    }

    /// Its own stream deadline `name` (`first_output_ms`, `first_output_max_ms`,
    /// `idle_ms`), replacing the setting for its streams.
    pub fn stream_timeout(mut self, name: &str, ms: u64) -> Self {
        self.stream_timeouts.insert(name.to_owned(), ms);
        self
    }

    /// Clamps requests for `model` to at most `n` output tokens.
    pub fn max_output_tokens(mut self, model: &str, n: u64) -> Self {
        self.max_output_tokens.insert(model.to_owned(), n);
        self
    }

    /// `model`'s context window, in tokens.
    pub fn context_window(mut self, model: &str, tokens: u64) -> Self {
        self.context_windows.insert(model.to_owned(), tokens);
        self
    }

    /// The models it offers.
    pub fn models<'a>(mut self, models: impl IntoIterator<Item = &'a str>) -> Self {
        self.models = models.into_iter().map(str::to_owned).collect();
        self
    }

    /// Caps the requests in flight across all its connections.
    pub fn max_concurrent(mut self, n: u32) -> Self {
        self.max_concurrent = Some(n);
        self
    }

    /// Prices `model` (USD per million input and output tokens).
    pub fn price(mut self, model: &str, input_per_mtok: f64, output_per_mtok: f64) -> Self {
        let price = Price {
            input_per_mtok,
            output_per_mtok,
        };
        self.prices.insert(model.to_owned(), price);
        self
    }
}

/// A connection: one upstream account of a provider (`[[connections]]`).
#[derive(Debug, Clone, Serialize)]
pub struct Connection {
    id: String,
    provider: String,
    auth_class: AuthClass,
    #[serde(skip_serializing_if = "Option::is_none")]
    credential: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_concurrent: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate_limit_overrides: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    disable_cooling: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider_specific_data: Option<serde_json::Value>,
}

impl Connection {
    fn new(id: &str, provider: &str, auth_class: AuthClass) -> Self {
        Self {
            id: id.to_owned(),
            provider: provider.to_owned(),
            auth_class,
            credential: None,
            max_concurrent: None,
            rate_limit_overrides: None,
            disable_cooling: false,
            provider_specific_data: None,
        }
    }

    /// A metered API-key account of `provider`.
    pub fn apikey(id: &str, provider: &str) -> Self {
        Self::new(id, provider, AuthClass::Apikey)
    }

    /// A subscription (OAuth) account of `provider`.
    pub fn oauth(id: &str, provider: &str) -> Self {
        Self::new(id, provider, AuthClass::Oauth)
    }

    /// An account of a local server.
    pub fn local(id: &str, provider: &str) -> Self {
        Self::new(id, provider, AuthClass::Local)
    }

    /// Declares its credential.
    pub fn credential(mut self, credential: &str) -> Self {
        self.credential = Some(credential.to_owned());
        self
    }

    /// Declares no credential: the one in the database is kept.
    pub fn without_credential(mut self) -> Self {
        self.credential = None;
        self
    }

    /// Caps its requests in flight.
    pub fn max_concurrent(mut self, n: u32) -> Self {
        self.max_concurrent = Some(n);
        self
    }

    /// Its `rate_limit_overrides` (the shape the management API takes, e.g.
    /// `{"maxQueueDepth": 1}`).
    pub fn rate_limit_overrides(mut self, overrides: serde_json::Value) -> Self {
        self.rate_limit_overrides = Some(overrides);
        self
    }

    /// Failures do not cool it down.
    pub fn disable_cooling(mut self) -> Self {
        self.disable_cooling = true;
        self
    }

    /// Its `provider_specific_data` (e.g. `{"lowPriorityMode": true}`).
    pub fn provider_specific_data(mut self, data: serde_json::Value) -> Self {
        self.provider_specific_data = Some(data);
        self
    }
}

/// A combo: a named routing group (`[[combos]]`).
#[derive(Debug, Clone, Serialize)]
pub struct Combo {
    name: String,
    strategy: &'static str,
    targets: Vec<Target>,
}

/// A model alias (`[[aliases]]`).
#[derive(Debug, Clone, Serialize)]
struct Alias {
    pattern: String,
    target: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    keys: Vec<String>,
}

/// One target of a combo.
#[derive(Debug, Clone, Serialize)]
struct Target {
    model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    weight: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cost: Option<f64>,
}

impl Combo {
    /// A combo that tries `targets` (`provider/model`) strictly in order.
    pub fn priority<'a>(name: &str, targets: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            name: name.to_owned(),
            strategy: "priority",
            targets: targets
                .into_iter()
                .map(|model| Target {
                    model: model.to_owned(),
                    weight: None,
                    cost: None,
                })
                .collect(),
        }
    }

    /// A combo of `strategy` (a SPEC R19 name) over `targets`.
    pub fn of<'a>(
        name: &str,
        strategy: &'static str,
        targets: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        Self {
            strategy,
            ..Self::priority(name, targets)
        }
    }

    /// Each target's weight, in target order.
    pub fn weights(mut self, weights: impl IntoIterator<Item = u32>) -> Self {
        for (t, w) in self.targets.iter_mut().zip(weights) {
            t.weight = Some(w);
        }
        self
    }

    /// Each target's declared cost, in target order.
    pub fn costs(mut self, costs: impl IntoIterator<Item = f64>) -> Self {
        for (t, c) in self.targets.iter_mut().zip(costs) {
            t.cost = Some(c);
        }
        self
    }
}

/// A client key declared with its secret (`[[keys]]`).
#[derive(Debug, Clone, Serialize)]
pub struct Key {
    id: String,
    name: String,
    secret: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    scopes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    allowed_connections: Option<Vec<String>>,
}

impl Key {
    /// A key without scopes.
    pub fn new(id: &str, name: &str, secret: &str) -> Self {
        Self {
            id: id.to_owned(),
            name: name.to_owned(),
            secret: secret.to_owned(),
            scopes: Vec::new(),
            allowed_connections: None,
        }
    }

    /// The connections it may use (all when never set).
    pub fn allowed_connections<'a>(mut self, ids: impl IntoIterator<Item = &'a str>) -> Self {
        self.allowed_connections = Some(ids.into_iter().map(str::to_owned).collect());
        self
    }

    /// Its scopes (e.g. `admin`).
    pub fn scopes<'a>(mut self, scopes: impl IntoIterator<Item = &'a str>) -> Self {
        self.scopes = scopes.into_iter().map(str::to_owned).collect();
        self
    }
}

/// A quota pool over some connections, shared by keys (`[[quota_pools]]`).
#[derive(Debug, Clone, Serialize)]
pub struct QuotaPool {
    id: String,
    name: String,
    connection_ids: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    dimensions: Vec<Dimension>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    allocations: Vec<Allocation>,
}

impl QuotaPool {
    /// A pool over `connections`, without dimensions or allocations yet.
    pub fn new<'a>(id: &str, name: &str, connections: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            id: id.to_owned(),
            name: name.to_owned(),
            connection_ids: connections.into_iter().map(str::to_owned).collect(),
            dimensions: Vec::new(),
            allocations: Vec::new(),
        }
    }

    /// Adds a dimension after the others.
    pub fn dimension(mut self, dimension: Dimension) -> Self {
        self.dimensions.push(dimension);
        self
    }

    /// Adds a key's allocation after the others.
    pub fn allocation(mut self, allocation: Allocation) -> Self {
        self.allocations.push(allocation);
        self
    }
}

/// One limit of a pool: so much of `unit` per `window`.
#[derive(Debug, Clone, Serialize)]
pub struct Dimension {
    unit: String,
    window: String,
    limit: f64,
}

impl Dimension {
    /// `limit` of `unit` (`requests`, `tokens`, `usd`, `percent`) per `window` (`hourly`,
    /// `5h`, `daily`, `weekly`).
    pub fn new(unit: &str, window: &str, limit: impl Into<f64>) -> Self {
        Self {
            unit: unit.to_owned(),
            window: window.to_owned(),
            limit: limit.into(),
        }
    }
}

/// A key's share of a pool.
#[derive(Debug, Clone, Serialize)]
pub struct Allocation {
    api_key_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    allocation_weight: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cap_value: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cap_unit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<String>,
}

impl Allocation {
    /// Key `api_key_id`'s allocation with the gateway's defaults (weight 0, hard policy).
    pub fn new(api_key_id: &str) -> Self {
        Self {
            api_key_id: api_key_id.to_owned(),
            allocation_weight: None,
            cap_value: None,
            cap_unit: None,
            policy: None,
        }
    }

    /// Its weight (0-100).
    pub fn weight(mut self, weight: impl Into<f64>) -> Self {
        self.allocation_weight = Some(weight.into());
        self
    }

    /// An absolute cap of `value` in `unit`.
    pub fn cap(mut self, value: impl Into<f64>, unit: &str) -> Self {
        self.cap_value = Some(value.into());
        self.cap_unit = Some(unit.to_owned());
        self
    }

    /// Its policy (`hard`, `soft` or `burst`).
    pub fn policy(mut self, policy: &str) -> Self {
        self.policy = Some(policy.to_owned());
        self
    }
}
