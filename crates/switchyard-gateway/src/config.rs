//! Startup configuration: the optional TOML file (`--config`), environment overrides and
//! validation. Errors name the offending field, and nothing is written to the database
//! until the whole file has been validated.
//!
//! Precedence for server options: environment variable → config file → default.
//! Runtime settings follow `switchyard_core::settings` (database → env → file → default).
//!
//! Secrets (the admin token, connection credentials, client-key secrets, the secret key)
//! are held as [`SecretString`] or [`Keyring`]: redacted in `Debug`, wiped on drop.
//!
//! It only reads (the file, and the environment through the `Env` trait, for which tests
//! pass a map) and never opens the store: `bootstrap` writes what it has validated.

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use switchyard_core::domain::AuthClass;
use switchyard_core::domain::UpstreamFormat;
use switchyard_core::quota::pool::PoolInput;
use switchyard_core::settings::{self, Layers};
use switchyard_model::{AliasRecord, ComboRecord, ConnectionRecord, PlanRecord, ProviderRecord};
use switchyard_store::{KeyError, Keyring, SecretKey};
use utoipa::ToSchema;

/// Default listen address: loopback, so a zero-config start exposes nothing to the
/// network until the operator opts in.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Shortest admin token accepted from the operator: 16 characters of a random token are
/// far beyond online guessing, while shorter ones are likely words or placeholders.
const MIN_ADMIN_TOKEN_LEN: usize = 16;

/// Shortest declared client-key secret; generated keys are 46 characters, and 20 keeps a
/// hand-picked secret out of reach of online guessing.
const MIN_KEY_SECRET_LEN: usize = 20;

/// Default data directory, relative to the working directory.
pub const DEFAULT_DATA_DIR: &str = "./data";

/// The key that encrypts credentials at rest (32 bytes in base64); when unset, the key
/// file `secret-key` in the data directory holds it (generated on first start).
pub const SECRET_KEY_ENV: &str = "SWITCHYARD_SECRET_KEY";

/// Keys replaced in [`SECRET_KEY_ENV`], still accepted for reading (separated by commas
/// or spaces): a start with both re-encrypts everything with the new key.
pub const PREVIOUS_SECRET_KEYS_ENV: &str = "SWITCHYARD_SECRET_KEY_PREVIOUS";

/// Reads environment variables; tests pass a map instead of mutating the process env.
pub trait Env {
    fn var(&self, key: &str) -> Option<String>;
}

/// The process environment.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemEnv;

impl Env for SystemEnv {
    fn var(&self, key: &str) -> Option<String> {
        std::env::var(key).ok().filter(|v| !v.is_empty())
    }
}

impl Env for BTreeMap<String, String> {
    fn var(&self, key: &str) -> Option<String> {
        self.get(key).cloned()
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `[server]` section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub admin_token: Option<SecretString>,
    pub log_format: Option<LogFormat>,
    /// A PostgreSQL URL (`postgres://…`): what replicas share (SPEC O6). Without it,
    /// SQLite in the data directory.
    pub database: Option<SecretString>,
    /// A PEM file of CA certificates to trust for upstream TLS besides the web's roots
    /// (a private CA of a self-hosted upstream).
    pub upstream_ca_file: Option<PathBuf>,
}

/// A connection as the config file and the management API describe it. The credential
/// is write-only; in the config file it may instead come from an environment variable
/// (`credential_env`, preferred: keeps secrets out of the file). The API refuses
/// `credential_env`: it would let an API caller read the gateway's environment.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectionSpec {
    pub id: String,
    pub provider: String,
    #[schema(value_type = String, example = "apikey")]
    pub auth_class: AuthClass,
    #[schema(value_type = Option<String>)]
    pub format: Option<UpstreamFormat>,
    pub base_url: Option<String>,
    /// Write-only upstream credential (API key or token). Omit on update to keep it.
    #[schema(value_type = Option<String>)]
    pub credential: Option<SecretString>,
    /// Config file only: read the credential from this environment variable.
    pub credential_env: Option<String>,
    #[serde(default = "yes")]
    pub enabled: bool,
    pub max_concurrent: Option<u32>,
    pub rate_limit_overrides: Option<Value>,
    pub provider_specific_data: Option<Value>,
    #[serde(default)]
    pub disable_cooling: bool,
}

fn yes() -> bool {
    true
}

impl ConnectionSpec {
    /// The stored record (without the credential); the error names the bad field.
    pub fn record(&self) -> Result<ConnectionRecord, String> {
        if self.max_concurrent == Some(0) {
            return Err("max_concurrent: must be at least 1 (omit it for no limit)".to_owned());
        }
        Ok(ConnectionRecord {
            id: self.id.clone(),
            provider: self.provider.clone(),
            auth_class: self.auth_class,
            format: self.format,
            base_url: self.base_url.clone(),
            enabled: self.enabled,
            max_concurrent: self.max_concurrent,
            rate_limit_overrides: self.rate_limit_overrides.clone(),
            provider_specific_data: self.provider_specific_data.clone(),
            disable_cooling: self.disable_cooling,
            has_credential: self
                .credential
                .as_ref()
                .is_some_and(|c| !c.expose_secret().is_empty()),
        })
    }
}

/// A client key declared in the file, with its secret inline or from the environment.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyDecl {
    pub id: String,
    pub name: String,
    pub secret: Option<SecretString>,
    pub secret_env: Option<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
    pub allowed_connections: Option<Vec<String>>,
    pub allowed_models: Option<Vec<String>>,
}

/// The whole config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub server: ServerSection,
    #[serde(default)]
    pub settings: BTreeMap<String, Value>,
    #[serde(default)]
    pub providers: Vec<ProviderRecord>,
    #[serde(default)]
    pub connections: Vec<ConnectionSpec>,
    #[serde(default)]
    pub combos: Vec<ComboRecord>,
    /// Model aliases in the order they are tried; when the file declares any, they
    /// replace the stored list at start.
    #[serde(default)]
    pub aliases: Vec<AliasRecord>,
    #[serde(default)]
    pub keys: Vec<KeyDecl>,
    /// Quota pools (SPEC Q1), in the API's shape.
    #[serde(default)]
    pub quota_pools: Vec<PoolInput>,
    /// Manual plans per connection (SPEC Q5).
    #[serde(default)]
    pub quota_plans: Vec<PlanRecord>,
}

/// A configuration problem, naming the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("{0}")]
    Setting(#[from] settings::SettingError),
    #[error(transparent)]
    SecretKey(#[from] KeyError),
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// Validated startup configuration.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// Admin token fixed by the operator; when absent one is generated on first start.
    pub admin_token: Option<SecretString>,
    /// The PostgreSQL URL replicas share (`SWITCHYARD_DATABASE_URL`, `--database`,
    /// `[server].database`); `None` is SQLite in the data directory. It may hold a
    /// password, so it is a secret: logs show it redacted.
    pub database: Option<SecretString>,
    /// Apply pending PostgreSQL migrations at start (`--migrate`,
    /// `SWITCHYARD_MIGRATE=1`) instead of refusing to start.
    pub migrate: bool,
    /// The keys for credentials at rest from the environment ([`SECRET_KEY_ENV`]); when
    /// absent, the key file in the data directory holds them.
    pub secret_keys: Option<Keyring>,
    pub log_format: LogFormat,
    /// CA certificates trusted for upstream TLS besides the web's roots
    /// (`SWITCHYARD_UPSTREAM_CA_FILE`, `[server].upstream_ca_file`).
    pub upstream_ca_file: Option<PathBuf>,
    /// Settings layers below the database (file and environment).
    pub layers: Layers,
    /// Declarations to apply to the database at start.
    pub declared: Declared,
}

/// What the file declares, with secrets resolved.
#[derive(Debug, Clone, Default)]
pub struct Declared {
    pub providers: Vec<ProviderRecord>,
    /// Connections with their credential (None = keep what the database has).
    pub connections: Vec<(ConnectionRecord, Option<SecretString>)>,
    pub combos: Vec<ComboRecord>,
    pub aliases: Vec<AliasRecord>,
    /// Keys with their secret.
    pub keys: Vec<(KeyDecl, SecretString)>,
    pub quota_pools: Vec<PoolInput>,
    pub quota_plans: Vec<PlanRecord>,
}

impl FileConfig {
    /// Parses a TOML file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|message| ConfigError::Parse {
            path: path.to_owned(),
            message,
        })
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}

/// Builds the validated configuration from the file (if any) and the environment.
pub fn resolve(file: FileConfig, env: &dyn Env) -> Result<GatewayConfig, ConfigError> {
    let listen_raw = env
        .var("SWITCHYARD_LISTEN")
        .or(file.server.listen.clone())
        .unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    let listen: SocketAddr = listen_raw.parse().map_err(|_| {
        invalid(
            "server.listen",
            format!("`{listen_raw}` is not an address like 127.0.0.1:8080"),
        )
    })?;
    let data_dir = env
        .var("SWITCHYARD_DATA_DIR")
        .map(PathBuf::from)
        .or(file.server.data_dir.clone())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    let upstream_ca_file = env
        .var("SWITCHYARD_UPSTREAM_CA_FILE")
        .map(PathBuf::from)
        .or(file.server.upstream_ca_file.clone());
    let admin_token = env
        .var("SWITCHYARD_ADMIN_TOKEN")
        .map(SecretString::from)
        .or(file.server.admin_token.clone());
    if let Some(t) = &admin_token {
        if t.expose_secret().len() < MIN_ADMIN_TOKEN_LEN {
            return Err(invalid(
                "server.admin_token",
                format!("must be at least {MIN_ADMIN_TOKEN_LEN} characters"),
            ));
        }
    }
    let database = match env.var("SWITCHYARD_DATABASE_URL") {
        Some(url) => Some(database_url(&url)?),
        None => match &file.server.database {
            Some(url) => Some(database_url(url.expose_secret())?),
            None => None,
        },
    };
    let migrate = match env.var("SWITCHYARD_MIGRATE").as_deref() {
        None | Some("0" | "false") => false,
        Some("1" | "true") => true,
        Some(other) => {
            return Err(invalid(
                "SWITCHYARD_MIGRATE",
                format!("`{other}` is not 1, true, 0 or false"),
            ))
        }
    };
    let log_format = match env.var("SWITCHYARD_LOG_FORMAT").as_deref() {
        Some("json") => LogFormat::Json,
        Some("text") => LogFormat::Text,
        Some(other) => {
            return Err(invalid(
                "SWITCHYARD_LOG_FORMAT",
                format!("`{other}` is not `text` or `json`"),
            ))
        }
        None => file.server.log_format.unwrap_or_default(),
    };
    let mut layers = Layers {
        file: file.settings.clone(),
        ..Layers::default()
    };
    for d in settings::DEFS {
        if let Some(v) = env.var(d.env) {
            layers.env.insert(d.env.to_owned(), v);
        }
    }
    settings::resolve(&layers)?;
    let secret_keys = secret_keys(env)?;
    let declared = declared(file, env)?;
    Ok(GatewayConfig {
        listen,
        data_dir,
        admin_token,
        database,
        migrate,
        secret_keys,
        log_format,
        upstream_ca_file,
        layers,
        declared,
    })
}

/// A PostgreSQL URL, checked for its scheme; the error shows it with the password
/// masked.
pub fn database_url(url: &str) -> Result<SecretString, ConfigError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(SecretString::from(url));
    }
    Err(invalid(
        "database",
        format!(
            "`{}` is not a PostgreSQL URL (postgres://user@host:5432/database); leave it unset for SQLite in the data directory",
            settings::redact_url(url)
        ),
    ))
}

/// The keys for credentials at rest from the environment, if it sets them.
fn secret_keys(env: &dyn Env) -> Result<Option<Keyring>, ConfigError> {
    let current = env.var(SECRET_KEY_ENV).map(SecretString::from);
    let previous = env.var(PREVIOUS_SECRET_KEYS_ENV).map(SecretString::from);
    let Some(current) = current else {
        if previous.is_some() {
            return Err(invalid(
                PREVIOUS_SECRET_KEYS_ENV,
                format!("takes effect only with {SECRET_KEY_ENV} (without it, the key file in the data directory holds the keys)"),
            ));
        }
        return Ok(None);
    };
    let current = SecretKey::parse(SECRET_KEY_ENV, current.expose_secret())?;
    let previous = previous
        .as_ref()
        .map(|p| {
            p.expose_secret()
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|k| !k.is_empty())
                .map(|k| SecretKey::parse(PREVIOUS_SECRET_KEYS_ENV, k))
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?
        .unwrap_or_default();
    Ok(Some(Keyring::new(current, previous)))
}

fn secret_from(
    field: String,
    inline: Option<&SecretString>,
    env_name: Option<&String>,
    env: &dyn Env,
) -> Result<Option<SecretString>, ConfigError> {
    match (inline, env_name) {
        (Some(_), Some(_)) => Err(invalid(
            field,
            "set the secret inline or by *_env, not both",
        )),
        (Some(s), None) => Ok(Some(s.clone())),
        (None, Some(var)) => env
            .var(var)
            .map(|v| Some(SecretString::from(v)))
            .ok_or_else(|| invalid(field, format!("environment variable `{var}` is not set"))),
        (None, None) => Ok(None),
    }
}

fn declared(file: FileConfig, env: &dyn Env) -> Result<Declared, ConfigError> {
    let mut out = Declared {
        providers: file.providers,
        combos: file.combos,
        aliases: file.aliases,
        quota_pools: file.quota_pools,
        quota_plans: file.quota_plans,
        ..Declared::default()
    };
    for (i, c) in file.connections.into_iter().enumerate() {
        let cred = secret_from(
            format!("connections[{i}] ({}).credential", c.id),
            c.credential.as_ref(),
            c.credential_env.as_ref(),
            env,
        )?;
        let record = c
            .record()
            .map_err(|m| invalid(format!("connections[{i}] ({})", c.id), m))?;
        out.connections.push((record, cred));
    }
    for (i, k) in file.keys.into_iter().enumerate() {
        let field = format!("keys[{i}] ({}).secret", k.id);
        let secret = secret_from(field.clone(), k.secret.as_ref(), k.secret_env.as_ref(), env)?
            .ok_or_else(|| {
                invalid(
                    field.clone(),
                    "a declared key needs `secret` or `secret_env`",
                )
            })?;
        if secret.expose_secret().len() < MIN_KEY_SECRET_LEN {
            return Err(invalid(
                field,
                format!("must be at least {MIN_KEY_SECRET_LEN} characters"),
            ));
        }
        out.keys.push((k, secret));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn zero_config_uses_defaults() {
        let c = resolve(FileConfig::default(), &env(&[])).unwrap();
        assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(c.data_dir, PathBuf::from("./data"));
        assert!(c.admin_token.is_none());
        assert_eq!(c.log_format, LogFormat::Text);
    }

    #[test]
    fn the_upstream_ca_file_comes_from_the_environment_before_the_file() {
        let file = || FileConfig::parse("[server]\nupstream_ca_file = \"/etc/ca.pem\"\n").unwrap();
        let c = resolve(file(), &env(&[])).unwrap();
        assert_eq!(c.upstream_ca_file, Some(PathBuf::from("/etc/ca.pem")));
        let c = resolve(
            file(),
            &env(&[("SWITCHYARD_UPSTREAM_CA_FILE", "/run/ca.pem")]),
        )
        .unwrap();
        assert_eq!(c.upstream_ca_file, Some(PathBuf::from("/run/ca.pem")));
        let c = resolve(FileConfig::default(), &env(&[])).unwrap();
        assert_eq!(c.upstream_ca_file, None);
    }

    #[test]
    fn env_overrides_file() {
        let file =
            FileConfig::parse("[server]\nlisten = \"127.0.0.1:9000\"\ndata_dir = \"/tmp/a\"\n")
                .unwrap();
        let c = resolve(
            file,
            &env(&[
                ("SWITCHYARD_LISTEN", "0.0.0.0:7000"),
                ("SWITCHYARD_LOG_FORMAT", "json"),
            ]),
        )
        .unwrap();
        assert_eq!(c.listen.to_string(), "0.0.0.0:7000");
        assert_eq!(c.data_dir, PathBuf::from("/tmp/a"));
        assert_eq!(c.log_format, LogFormat::Json);
    }

    #[test]
    fn unknown_fields_are_rejected_with_their_name() {
        let err = FileConfig::parse("[server]\nlisten_addr = \"x\"\n").unwrap_err();
        assert!(err.contains("unknown field `listen_addr`"), "{err}");
        let err = FileConfig::parse(
            "[[connections]]\nid = \"c\"\nprovider = \"p\"\nauth_class = \"magic\"\n",
        )
        .unwrap_err();
        assert!(err.contains("unknown variant `magic`"), "{err}");
    }

    #[test]
    fn invalid_values_name_the_field() {
        let bad_listen = FileConfig::parse("[server]\nlisten = \"nope\"\n").unwrap();
        assert_eq!(
            resolve(bad_listen, &env(&[])).unwrap_err().to_string(),
            "server.listen: `nope` is not an address like 127.0.0.1:8080"
        );
        let missing_env = FileConfig::parse(
            "[[connections]]\nid = \"c\"\nprovider = \"p\"\nauth_class = \"apikey\"\ncredential_env = \"NOPE\"\n",
        )
        .unwrap();
        assert_eq!(
            resolve(missing_env, &env(&[])).unwrap_err().to_string(),
            "connections[0] (c).credential: environment variable `NOPE` is not set"
        );
        let bad_setting =
            FileConfig::parse("[settings]\n\"upstream.connect_timeout_ms\" = 1\n").unwrap();
        assert_eq!(
            resolve(bad_setting, &env(&[])).unwrap_err().to_string(),
            "setting `upstream.connect_timeout_ms` (from config file) must be an integer between 100 and 300000, got 1"
        );
    }

    #[test]
    fn secrets_resolve_from_env() {
        let file =
            FileConfig::parse("[[keys]]\nid = \"ci\"\nname = \"CI\"\nsecret_env = \"CI_KEY\"\n")
                .unwrap();
        let c = resolve(file, &env(&[("CI_KEY", "sy-0123456789abcdefghij")])).unwrap();
        assert_eq!(
            c.declared.keys[0].1.expose_secret(),
            "sy-0123456789abcdefghij"
        );
    }

    #[test]
    fn debug_output_of_the_configuration_holds_no_secret() {
        let key = SecretKey::generate().unwrap();
        let old = SecretKey::generate().unwrap();
        let (key_text, old_text) = (key.to_base64(), old.to_base64());
        let file = FileConfig::parse(
            r#"
[server]
admin_token = "admin-token-in-the-file-000001"

[[connections]]
id = "a"
provider = "p"
auth_class = "apikey"
credential = "sk-inline-credential-0001"

[[connections]]
id = "b"
provider = "p"
auth_class = "apikey"
credential_env = "CRED_B"

[[keys]]
id = "k"
name = "k"
secret = "sy-inline-key-secret-000001"

[[keys]]
id = "k2"
name = "k2"
secret_env = "KEY_2"
"#,
        )
        .unwrap();
        let file_debug = format!("{file:?}");
        let c = resolve(
            file,
            &env(&[
                ("CRED_B", "sk-credential-from-env-0002"),
                ("KEY_2", "sy-key-secret-from-env-0002"),
                (SECRET_KEY_ENV, key_text.expose_secret()),
                (PREVIOUS_SECRET_KEYS_ENV, old_text.expose_secret()),
            ]),
        )
        .unwrap();
        let debug = format!("{c:?} {file_debug}");
        for secret in [
            "admin-token-in-the-file-000001",
            "sk-inline-credential-0001",
            "sk-credential-from-env-0002",
            "sy-inline-key-secret-000001",
            "sy-key-secret-from-env-0002",
            key_text.expose_secret(),
            old_text.expose_secret(),
        ] {
            assert!(!debug.contains(secret), "Debug shows `{secret}`: {debug}");
        }
        assert!(debug.contains("[REDACTED]"), "{debug}");
        // The values are all there, behind the wrapper.
        assert_eq!(
            c.declared.connections[1]
                .1
                .as_ref()
                .unwrap()
                .expose_secret(),
            "sk-credential-from-env-0002"
        );
        let keys = c.secret_keys.unwrap();
        assert_eq!(keys.current().id(), key.id());
        assert_eq!(keys.previous()[0].id(), old.id());
    }

    #[test]
    fn a_malformed_secret_key_fails_naming_the_variable() {
        assert_eq!(
            resolve(FileConfig::default(), &env(&[(SECRET_KEY_ENV, "c2hvcnQ=")]))
                .unwrap_err()
                .to_string(),
            "SWITCHYARD_SECRET_KEY: must be 32 random bytes in base64, like the output of \
             `switchyard secret-key generate` or `openssl rand -base64 32` (got 5 bytes)"
        );
        assert_eq!(
            resolve(
                FileConfig::default(),
                &env(&[(PREVIOUS_SECRET_KEYS_ENV, "x")])
            )
            .unwrap_err()
            .to_string(),
            "SWITCHYARD_SECRET_KEY_PREVIOUS: takes effect only with SWITCHYARD_SECRET_KEY \
             (without it, the key file in the data directory holds the keys)"
        );
    }
}
