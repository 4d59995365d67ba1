//! Start-up: data directory, database, declared configuration, admin token, state.

use crate::clock::Clock;
use crate::config::GatewayConfig;
use crate::keys::{new_key, random_secret, NewKey};
use crate::metrics::Metrics;
use crate::snapshot::Snapshot;
use crate::state::AppState;
use crate::state::Writers;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use switchyard_core::apikey::KeyHash;
use switchyard_store::{SaveMode, Store};

/// File name of the database inside the data directory.
pub const DB_FILE: &str = "switchyard.db";

/// File the generated admin token is written to (mode 0600).
pub const ADMIN_TOKEN_FILE: &str = "admin-token";

/// Prefix of generated admin tokens.
const ADMIN_TOKEN_PREFIX: &str = "sya-";

/// Start-up failures.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error("data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] switchyard_store::StoreError),
    #[error("config: {0}")]
    Invalid(String),
    #[error("{0}")]
    State(String),
}

/// Where the admin credential comes from, for the start-up banner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminToken {
    /// Set by the operator (`SWITCHYARD_ADMIN_TOKEN` or the config file).
    Configured,
    /// Generated; readable in this file.
    File(PathBuf),
}

/// Opens the database in `data_dir`, creating both if needed.
pub fn open_store(data_dir: &Path) -> Result<Store, BootError> {
    std::fs::create_dir_all(data_dir).map_err(|source| BootError::DataDir {
        path: data_dir.to_owned(),
        source,
    })?;
    Ok(Store::open(&data_dir.join(DB_FILE))?)
}

/// Writes the declared configuration: validated together with what the database already
/// holds, written only if the whole is valid, in one transaction.
pub fn apply_declared(store: &Store, config: &GatewayConfig, now: u64) -> Result<(), BootError> {
    let d = &config.declared;
    if d.providers.is_empty()
        && d.connections.is_empty()
        && d.combos.is_empty()
        && d.keys.is_empty()
        && d.quota_pools.is_empty()
        && d.quota_plans.is_empty()
    {
        return Ok(());
    }
    let mut rows = store.load_config()?;
    for p in &d.providers {
        crate::admin::upsert_by(&mut rows.providers, p.clone(), |x| &x.id, &p.id);
    }
    let mut conns = Vec::new();
    for (c, cred) in &d.connections {
        let kept = rows
            .connections
            .iter()
            .find(|(r, _)| r.id == c.id)
            .map(|(_, k)| k.clone());
        let record = c.clone();
        let effective = cred.clone().or(kept).unwrap_or_default();
        crate::admin::upsert_by(
            &mut rows.connections,
            (record.clone(), effective),
            |x| &x.0.id,
            &c.id,
        );
        conns.push((record, cred.clone()));
    }
    for c in &d.combos {
        crate::admin::upsert_by(&mut rows.combos, c.clone(), |x| &x.name, &c.name);
    }
    let mut keys = Vec::new();
    for (k, secret) in &d.keys {
        let (mut record, _) = new_key(
            NewKey {
                id: Some(k.id.clone()),
                name: k.name.clone(),
                scopes: k.scopes.clone(),
                allowed_connections: k.allowed_connections.clone(),
                allowed_models: k.allowed_models.clone(),
                secret: Some(secret.clone()),
            },
            now,
        )
        .map_err(|m| BootError::Invalid(format!("keys ({}).{m}", k.id)))?;
        if let Some(existing) = rows.keys.iter().find(|r| r.id == k.id) {
            record.created_at = existing.created_at;
            record.revoked_at = existing.revoked_at;
        }
        crate::admin::upsert_by(&mut rows.keys, record.clone(), |x| &x.id, &k.id);
        keys.push(record);
    }
    for p in &d.quota_plans {
        crate::admin::upsert_by(
            &mut rows.plans,
            p.clone(),
            |x| &x.connection_id,
            &p.connection_id,
        );
    }
    for p in &d.quota_pools {
        crate::admin::upsert_by(&mut rows.pools, p.clone(), |x| &x.id, &p.id);
    }
    Snapshot::build(&rows, &config.layers, &Metrics::new())
        .map_err(|e| BootError::Invalid(e.to_string()))?;
    store.batch(|b| {
        for p in &d.providers {
            b.save_provider(p, SaveMode::Upsert, now)?;
        }
        for (c, cred) in &conns {
            b.save_connection(c, cred.as_deref(), SaveMode::Upsert, now)?;
        }
        for c in &d.combos {
            b.save_combo(c, SaveMode::Upsert, now)?;
        }
        for k in &keys {
            b.save_key(k, SaveMode::Upsert)?;
        }
        for p in &d.quota_plans {
            b.save_plan(p, now)?;
        }
        for p in &d.quota_pools {
            b.save_pool(p, SaveMode::Upsert, now)?;
        }
        Ok(())
    })?;
    Ok(())
}

/// Resolves the admin credential: the operator's (returned as its hash), or a generated
/// one — previously, or now, written to `<data_dir>/admin-token` (owner-only) with its
/// hash in the database, where the snapshot reads it.
pub fn admin_token(
    store: &Store,
    config: &GatewayConfig,
) -> Result<(Option<KeyHash>, AdminToken), BootError> {
    if let Some(t) = &config.admin_token {
        return Ok((Some(KeyHash::of(t)), AdminToken::Configured));
    }
    let usable = store
        .admin_token_hash()?
        .is_some_and(|h| KeyHash::from_hex(&h).is_some());
    let path = if usable {
        config.data_dir.join(ADMIN_TOKEN_FILE)
    } else {
        rotate_admin_token(store, &config.data_dir)?
    };
    Ok((None, AdminToken::File(path)))
}

/// Generates a new admin token, replacing the previous one; running gateways switch to
/// it within a second.
pub fn rotate_admin_token(store: &Store, data_dir: &Path) -> Result<PathBuf, BootError> {
    let path = data_dir.join(ADMIN_TOKEN_FILE);
    let token = random_secret(ADMIN_TOKEN_PREFIX);
    write_private(&path, &format!("{token}\n")).map_err(|source| BootError::DataDir {
        path: path.clone(),
        source,
    })?;
    store.set_admin_token_hash(&KeyHash::of(&token).to_hex())?;
    Ok(path)
}

fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    opts.mode(0o600);
    opts.open(path)?.write_all(contents.as_bytes())
}

/// Everything `run` needs.
#[derive(Debug)]
pub struct Prepared {
    pub state: Arc<AppState>,
    pub writer: Writers,
    pub admin: AdminToken,
}

/// Opens the store, applies the declared configuration, resolves the admin token and
/// builds the state.
pub async fn prepare(config: &GatewayConfig, clock: Arc<dyn Clock>) -> Result<Prepared, BootError> {
    let store = open_store(&config.data_dir)?;
    apply_declared(&store, config, clock.now_ms())?;
    let (admin_hash, admin) = admin_token(&store, config)?;
    let (state, writer) = AppState::new(Arc::new(store), clock, config.layers.clone(), admin_hash)
        .await
        .map_err(|e| BootError::State(e.to_string()))?;
    Ok(Prepared {
        state,
        writer,
        admin,
    })
}
