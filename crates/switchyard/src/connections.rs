//! `switchyard connections import-codex|import-claude`: a CLI's credential file
//! imported as an OAuth subscription connection (SPEC R4), straight into the database;
//! a running gateway picks the change up within a second, as any configuration change.

use crate::cli::{load_config, say, Common};
use clap::Subcommand;
use secrecy::ExposeSecret;
use std::path::{Path, PathBuf};
use switchyard_core::oauth::Issuer;
use switchyard_gateway::bootstrap;
use switchyard_gateway::clock::{Clock, SystemClock};
use switchyard_gateway::services::oauth::{read_grant, stage_import};
use switchyard_gateway::snapshot::Snapshot;
use switchyard_gateway::telemetry::metrics::Metrics;
use switchyard_model::SaveMode;

#[derive(Debug, Subcommand)]
pub enum ConnectionsCommand {
    /// Import the Codex CLI's ChatGPT sign-in (its auth.json) as an OAuth connection:
    /// created, or given the new tokens. The gateway refreshes them from then on; the
    /// CLI's own copy stops working once the gateway refreshes (the refresh token
    /// rotates), so sign the CLI in again if it is still used.
    ImportCodex(Import),
    /// Import Claude Code's sign-in (its .credentials.json) as an OAuth connection, as
    /// import-codex does.
    ImportClaude(Import),
}

#[derive(Debug, clap::Args)]
pub struct Import {
    #[command(flatten)]
    common: Common,
    /// The credential file [default: $CODEX_HOME/auth.json or ~/.codex/auth.json;
    /// $CLAUDE_CONFIG_DIR/.credentials.json or ~/.claude/.credentials.json].
    path: Option<PathBuf>,
    /// The connection to create or update [default: codex or claude].
    #[arg(long)]
    connection: Option<String>,
    /// The provider of a new connection (it must exist) [default: codex or claude].
    #[arg(long)]
    provider: Option<String>,
    /// Refresh at this token endpoint instead of the CLI's own.
    #[arg(long)]
    token_url: Option<String>,
}

/// Where `cli` keeps its credentials, as the CLI itself looks them up.
fn default_path(cli: Issuer) -> anyhow::Result<PathBuf> {
    let env_dir = |var: &str| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let home =
        || env_dir("HOME").ok_or_else(|| anyhow::anyhow!("HOME is not set: give the file's path"));
    Ok(match cli {
        Issuer::Codex => match env_dir("CODEX_HOME") {
            Some(dir) => dir.join("auth.json"),
            None => home()?.join(".codex").join("auth.json"),
        },
        Issuer::Claude => match env_dir("CLAUDE_CONFIG_DIR") {
            Some(dir) => dir.join(".credentials.json"),
            None => home()?.join(".claude").join(".credentials.json"),
        },
    })
}

fn name(cli: Issuer) -> &'static str {
    match cli {
        Issuer::Codex => "codex",
        Issuer::Claude => "claude",
    }
}

pub fn run(cmd: ConnectionsCommand) -> anyhow::Result<()> {
    let (cli, args) = match cmd {
        ConnectionsCommand::ImportCodex(a) => (Issuer::Codex, a),
        ConnectionsCommand::ImportClaude(a) => (Issuer::Claude, a),
    };
    let path = match args.path {
        Some(p) => p,
        None => default_path(cli)?,
    };
    let text = read(&path)?;
    let grant = read_grant(cli, text.expose_secret(), args.token_url.as_deref())
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let id = args.connection.unwrap_or_else(|| name(cli).to_owned());
    let provider = args.provider.unwrap_or_else(|| name(cli).to_owned());
    let cfg = load_config(&args.common)?;
    let store = bootstrap::open_store(&cfg)?;
    let now = SystemClock.now_ms();
    // The same validation every API change passes, in the same transaction as the
    // write: the configuration with the connection must build a snapshot.
    let created = store.transact(|batch, mut rows| -> anyhow::Result<bool> {
        // `--provider` is the provider of a new connection; an existing one keeps its own.
        let exists = rows.connections.iter().any(|(c, _)| c.id == id);
        let provider = (!exists).then_some(provider.as_str());
        let (record, created) =
            stage_import(&mut rows, &id, provider, &grant).map_err(anyhow::Error::msg)?;
        Snapshot::build(&rows, &cfg.layers, &Metrics::new()).map_err(|e| {
            anyhow::anyhow!("the imported connection would make the configuration invalid: {e}")
        })?;
        batch.save_grant(&record, &grant, SaveMode::Upsert, now)?;
        Ok(created)
    })?;
    let verb = if created { "Created" } else { "Updated" };
    say(&format!(
        "{verb} OAuth connection {id} from {} ({}).",
        path.display(),
        match grant.expires_at {
            Some(t) if t > now =>
                format!("access token valid for {} more minutes", (t - now) / 60_000),
            Some(_) => "access token expired: the gateway refreshes it before use".to_owned(),
            None => "access token expiry unknown".to_owned(),
        }
    ));
    Ok(())
}

/// The file's text, kept secret (it holds tokens).
fn read(path: &Path) -> anyhow::Result<secrecy::SecretString> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    Ok(secrecy::SecretString::from(text))
}
