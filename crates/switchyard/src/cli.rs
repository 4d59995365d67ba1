//! Subcommands: `serve`, `demo`, `mock`, `migrate`, `keys`, `connections`, `admin-token`,
//! `secret-key`.

use anyhow::Context;
use clap::{Args as ClapArgs, Parser, Subcommand};
use secrecy::ExposeSecret;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use switchyard_gateway::bootstrap::{self, AdminToken};
use switchyard_gateway::clock::{Clock, SystemClock};
use switchyard_gateway::config::{self, FileConfig, GatewayConfig, LogFormat, SystemEnv};
use switchyard_gateway::keys::{new_key, NewKey};
use switchyard_gateway::snapshot::Snapshot;
use switchyard_gateway::telemetry::metrics::Metrics;
use switchyard_model::SaveMode;
use switchyard_store::SecretKey;
use tokio::net::TcpListener;

/// Switchyard: an LLM API gateway that shares provider accounts fairly and keeps serving
/// when providers, accounts, models or streams fail.
#[derive(Debug, Parser)]
#[command(name = "switchyard", version)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway.
    Serve(ServeArgs),
    /// Run the gateway with a built-in mock provider, two simulated providers, a combo
    /// and a demo key, and print a ready-to-paste curl command.
    Demo(DemoArgs),
    /// Run the mock provider alone (for tests and benchmarks).
    Mock(MockArgs),
    /// Apply the pending PostgreSQL schema migrations (one replica at a time: they run
    /// under a lock), then exit.
    Migrate {
        #[command(flatten)]
        common: Common,
    },
    /// Manage client API keys in the database.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Import OAuth subscription sign-ins from the Codex CLI or Claude Code.
    #[command(subcommand)]
    Connections(crate::connections::ConnectionsCommand),
    /// Manage the generated admin token.
    #[command(subcommand, name = "admin-token")]
    AdminToken(AdminTokenCommand),
    /// Manage the key that encrypts upstream credentials in the database.
    #[command(subcommand, name = "secret-key")]
    SecretKey(SecretKeyCommand),
}

#[derive(Debug, ClapArgs)]
pub struct Common {
    /// TOML config file.
    #[arg(long, short = 'c', env = "SWITCHYARD_CONFIG")]
    config: Option<PathBuf>,
    /// Log as JSON lines (same as SWITCHYARD_LOG_FORMAT=json).
    #[arg(long)]
    log_json: bool,
    /// PostgreSQL shared by replicas, postgres://user@host:5432/database (same as
    /// SWITCHYARD_DATABASE_URL, which keeps a password out of the process list).
    /// Without it, SQLite in the data directory.
    #[arg(long, value_name = "URL")]
    database: Option<String>,
}

#[derive(Debug, ClapArgs)]
struct ServeArgs {
    #[command(flatten)]
    common: Common,
    /// Apply pending PostgreSQL migrations before serving (same as SWITCHYARD_MIGRATE=1);
    /// without it, a replica refuses to start on pending migrations.
    #[arg(long)]
    migrate: bool,
}

#[derive(Debug, ClapArgs)]
pub struct DemoArgs {
    /// Where the gateway listens.
    #[arg(long, default_value = config::DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// Data directory of the demo (kept apart from a real gateway's data).
    #[arg(long, default_value = "./data/demo")]
    pub data_dir: PathBuf,
    /// Log as JSON lines.
    #[arg(long)]
    pub log_json: bool,
    /// Do not simulate traffic (by default three simulated keys send a few requests a
    /// second and alpha fails for 15 s every 2 minutes, so the dashboard has something
    /// to show).
    #[arg(long)]
    pub no_traffic: bool,
}

#[derive(Debug, ClapArgs)]
struct MockArgs {
    /// Where the mock listens.
    #[arg(long, default_value = "127.0.0.1:9090")]
    listen: SocketAddr,
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Create a key and print its secret (shown this once).
    Create {
        #[command(flatten)]
        common: Common,
        /// Human-readable name.
        #[arg(long)]
        name: String,
        /// Scope to grant (repeatable): admin, lease:exclusive.
        #[arg(long = "scope")]
        scopes: Vec<String>,
        /// Restrict to these models (repeatable): provider/model, provider/* or a combo.
        #[arg(long = "allow-model")]
        allowed_models: Vec<String>,
        /// Restrict to these connection ids (repeatable).
        #[arg(long = "allow-connection")]
        allowed_connections: Vec<String>,
    },
    /// List keys (never their secrets).
    List {
        #[command(flatten)]
        common: Common,
    },
    /// Revoke a key.
    Revoke {
        #[command(flatten)]
        common: Common,
        id: String,
    },
}

#[derive(Debug, Subcommand)]
enum AdminTokenCommand {
    /// Generate a new admin token into <data_dir>/admin-token; a running gateway switches
    /// to it within a second.
    Rotate {
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Debug, Subcommand)]
enum SecretKeyCommand {
    /// Re-encrypt every credential with a new key, in one transaction, and put the new
    /// key in <data_dir>/secret-key; a running gateway switches to it within a second.
    /// With SWITCHYARD_SECRET_KEY set, rotate by restarting instead (see docs/configuration.md).
    Rotate {
        #[command(flatten)]
        common: Common,
    },
    /// Print a new random key (32 bytes, base64) for SWITCHYARD_SECRET_KEY.
    Generate,
}

impl Args {
    /// Whether the command serves traffic on the main runtime (the mock provider does).
    pub fn serves_on_main_runtime(&self) -> bool {
        matches!(self.command, Command::Demo(_) | Command::Mock(_))
    }
}

/// Writes a line to standard output (the CLI's product, not a log).
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
}

pub fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SWITCHYARD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

pub fn load_config(common: &Common) -> anyhow::Result<GatewayConfig> {
    let file = match &common.config {
        Some(path) => FileConfig::load(path)?,
        None => FileConfig::default(),
    };
    let mut cfg = config::resolve(file, &SystemEnv)?;
    if common.log_json {
        cfg.log_format = LogFormat::Json;
    }
    if let Some(url) = &common.database {
        cfg.database = Some(config::database_url(url)?);
    }
    Ok(cfg)
}

/// Resolves when SIGINT or SIGTERM arrives.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

pub async fn dispatch(args: Args) -> anyhow::Result<()> {
    match args.command {
        Command::Serve(a) => serve(a).await,
        Command::Demo(a) => crate::demo::run(a).await,
        Command::Mock(a) => mock(a).await,
        // The store's calls are synchronous: on the blocking pool.
        Command::Keys(k) => tokio::task::spawn_blocking(move || keys(k)).await?,
        Command::Connections(c) => {
            tokio::task::spawn_blocking(move || crate::connections::run(c)).await?
        }
        Command::Migrate { common } => {
            let cfg = load_config(&common)?;
            init_tracing(cfg.log_format);
            let Some(url) = cfg.database else {
                anyhow::bail!("migrate: no PostgreSQL to migrate: give --database or SWITCHYARD_DATABASE_URL (SQLite migrates itself at start)");
            };
            let applied = tokio::task::spawn_blocking(move || {
                switchyard_store::postgres::migrate(url.expose_secret())
            })
            .await??;
            if applied.is_empty() {
                say("The PostgreSQL schema is up to date.");
            } else {
                say(&format!("Applied migrations: {}.", applied.join(", ")));
            }
            Ok(())
        }
        Command::SecretKey(SecretKeyCommand::Generate) => {
            say(SecretKey::generate()?.to_base64().expose_secret());
            Ok(())
        }
        Command::SecretKey(SecretKeyCommand::Rotate { common }) => {
            let cfg = load_config(&common)?;
            let r =
                tokio::task::spawn_blocking(move || bootstrap::rotate_secret_key(&cfg)).await??;
            say(&format!(
                "Re-encrypted {} credential(s) with a new secret key ({}, replacing {}).",
                r.credentials, r.new, r.old
            ));
            say(&format!(
                "The new key is in {}; running gateways switch to it within a second. Back it up now, apart from the database: without it the credentials cannot be read.",
                r.file.display()
            ));
            Ok(())
        }
        Command::AdminToken(AdminTokenCommand::Rotate { common }) => {
            let cfg = load_config(&common)?;
            let path = tokio::task::spawn_blocking(move || {
                let store = bootstrap::open_store(&cfg)?;
                bootstrap::rotate_admin_token(&store, &cfg.data_dir)
            })
            .await??;
            say(&format!("New admin token written to {}", path.display()));
            Ok(())
        }
    }
}

async fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let mut cfg = load_config(&a.common)?;
    cfg.migrate |= a.migrate;
    init_tracing(cfg.log_format);
    let listener = TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    let prepared = bootstrap::prepare(&cfg, Arc::new(SystemClock)).await?;
    let addr = listener.local_addr()?;
    say(&format!("Switchyard listening on http://{addr}"));
    say(&format!("Data directory: {}", cfg.data_dir.display()));
    if let Some(url) = &cfg.database {
        say(&format!(
            "Database: {} (shared by replicas)",
            switchyard_core::settings::redact_url(url.expose_secret())
        ));
    }
    say(&format!(
        "Dashboard: http://{addr}/dashboard (sign in with the admin token)"
    ));
    say(&admin_note(&prepared.admin));
    let dashboard = switchyard_dashboard::dashboard(Arc::clone(&prepared.state));
    run_with_dashboard(listener, prepared, dashboard).await
}

/// Serves the gateway with `dashboard` (built on `prepared`'s state) mounted under
/// `/dashboard` until Ctrl-C or SIGTERM.
pub async fn run_with_dashboard(
    listener: TcpListener,
    prepared: bootstrap::Prepared,
    dashboard: switchyard_dashboard::Dashboard,
) -> anyhow::Result<()> {
    switchyard_gateway::run_with(
        listener,
        prepared.state,
        prepared.writer,
        shutdown_signal(),
        dashboard.router,
    )
    .await?;
    Ok(())
}

pub fn admin_note(admin: &AdminToken) -> String {
    match admin {
        AdminToken::Configured => {
            "Admin API: use the configured admin token (SWITCHYARD_ADMIN_TOKEN or [server].admin_token).".to_owned()
        }
        AdminToken::File(p) => format!(
            "Admin API: the admin token is in {} (cat it; rotate with `switchyard admin-token rotate`).",
            p.display()
        ),
    }
}

async fn mock(a: MockArgs) -> anyhow::Result<()> {
    init_tracing(LogFormat::Text);
    let listener = TcpListener::bind(a.listen)
        .await
        .with_context(|| format!("cannot listen on {}", a.listen))?;
    say(&format!(
        "Mock provider listening on http://{}",
        listener.local_addr()?
    ));
    switchyard_mock::serve_until(listener, shutdown_signal()).await?;
    Ok(())
}

fn keys(cmd: KeysCommand) -> anyhow::Result<()> {
    match cmd {
        KeysCommand::Create {
            common,
            name,
            scopes,
            allowed_models,
            allowed_connections,
        } => {
            let cfg = load_config(&common)?;
            let store = bootstrap::open_store(&cfg)?;
            let connections = store.list_connections()?;
            if let Some(bad) = allowed_connections
                .iter()
                .find(|c| !connections.iter().any(|r| &&r.id == c))
            {
                anyhow::bail!("--allow-connection: unknown connection `{bad}`");
            }
            let (record, secret) = new_key(
                NewKey {
                    id: None,
                    name,
                    scopes,
                    allowed_connections: (!allowed_connections.is_empty())
                        .then_some(allowed_connections),
                    allowed_models: (!allowed_models.is_empty()).then_some(allowed_models),
                    secret: None,
                },
                SystemClock.now_ms(),
            )
            .map_err(anyhow::Error::msg)?;
            // The same validation every API change passes, in the same transaction as
            // the write: the configuration with the new key must build a snapshot, or
            // nothing is written.
            store.transact(|batch, mut rows| -> anyhow::Result<()> {
                rows.keys.push(record.clone());
                Snapshot::build(&rows, &cfg.layers, &Metrics::new()).map_err(|e| {
                    anyhow::anyhow!("the new key would make the configuration invalid: {e}")
                })?;
                Ok(batch.save_key(&record, SaveMode::Create)?)
            })?;
            say(&format!("Created key {} ({}).", record.id, record.name));
            say("Secret (shown only now; store it safely):");
            say(secret.expose_secret());
            Ok(())
        }
        KeysCommand::List { common } => {
            let cfg = load_config(&common)?;
            let store = bootstrap::open_store(&cfg)?;
            for k in store.list_keys()? {
                let state = if k.revoked_at.is_some() {
                    "revoked"
                } else {
                    "active"
                };
                say(&format!(
                    "{}\t{}\t{}…\t{}\t{}",
                    k.id,
                    k.name,
                    k.prefix,
                    state,
                    k.scopes.join(",")
                ));
            }
            Ok(())
        }
        KeysCommand::Revoke { common, id } => {
            let cfg = load_config(&common)?;
            let store = bootstrap::open_store(&cfg)?;
            store.revoke_key(&id, SystemClock.now_ms())?;
            say(&format!("Revoked key {id}."));
            Ok(())
        }
    }
}
