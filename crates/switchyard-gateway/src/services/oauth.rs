//! OAuth subscription connections (SPEC R4): a CLI's credential file imported as a
//! connection, an operator's refresh, and each connection's refresh state. The tokens
//! are the connection's credential, write-only like every credential: nothing here
//! returns one.

use super::{apply_change, upsert_by};
use crate::error::ApiError;
use crate::oauth::RefreshError;
use crate::state::{blocking, AppState};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use std::sync::{Arc, OnceLock};
use switchyard_core::domain::AuthClass;
use switchyard_core::oauth::{import_claude, import_codex, Grant, Issuer, ACCOUNT_KEY};
use switchyard_model::{ConfigRows, ConnectionRecord, OauthRecord, SaveMode};
use utoipa::ToSchema;

/// Whose credential file it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Cli {
    /// The Codex CLI's `auth.json` (a ChatGPT plan).
    Codex,
    /// Claude Code's `.credentials.json` (a Claude plan).
    Claude,
}

impl From<Cli> for Issuer {
    fn from(cli: Cli) -> Self {
        match cli {
            Cli::Codex => Self::Codex,
            Cli::Claude => Self::Claude,
        }
    }
}

/// A CLI's credential file to import as a connection.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantImport {
    /// Whose file it is: `codex` (the Codex CLI's `auth.json`) or `claude` (Claude
    /// Code's `.credentials.json`).
    pub cli: Cli,
    /// The connection to create, or to give these credentials.
    pub connection: String,
    /// The provider of a new connection; an existing connection keeps its own unless
    /// this names another.
    pub provider: Option<String>,
    /// The file's content (write-only).
    #[schema(value_type = String)]
    pub file: SecretString,
    /// Another token endpoint than the CLI's (a proxy); omit for the CLI's own.
    pub token_url: Option<String>,
}

/// The grant `file` holds, as `cli` wrote it, refreshed at `token_url` when given.
pub fn read_grant(cli: Issuer, file: &str, token_url: Option<&str>) -> Result<Grant, String> {
    let mut grant = match cli {
        Issuer::Codex => import_codex(file),
        Issuer::Claude => import_claude(file),
    }
    .map_err(|e| format!("file: {e}"))?;
    if let Some(url) = token_url {
        let uri =
            http::Uri::try_from(url).map_err(|_| format!("token_url: `{url}` is not a URL"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(format!("token_url: `{url}` is not an http(s) URL"));
        }
        grant.token_url = Some(url.to_owned());
    }
    Ok(grant)
}

/// Puts connection `id` with `grant` as its credential in `rows`, as an import leaves it:
/// an existing one keeps its fields (made `oauth`, of `provider` when given), a new one is
/// of `provider`; a Codex grant's account id goes where the Codex backend's header is
/// built from. Returns the connection and whether it is new. The API and the CLI both
/// stage an import here, then validate `rows` and write.
pub fn stage_import(
    rows: &mut ConfigRows,
    id: &str,
    provider: Option<&str>,
    grant: &Grant,
) -> Result<(ConnectionRecord, bool), String> {
    let existing = rows.connections.iter().find(|(c, _)| c.id == id);
    let mut record = match (existing, provider) {
        (Some((c, _)), _) => c.clone(),
        (None, Some(p)) => ConnectionRecord {
            id: id.to_owned(),
            provider: p.to_owned(),
            auth_class: AuthClass::Oauth,
            format: None,
            base_url: None,
            enabled: true,
            max_concurrent: None,
            rate_limit_overrides: None,
            provider_specific_data: None,
            disable_cooling: false,
            has_credential: true,
        },
        (None, None) => {
            return Err(format!(
                "provider: connection `{id}` does not exist; name the provider to create it in"
            ))
        }
    };
    if let Some(p) = provider {
        p.clone_into(&mut record.provider);
    }
    if !rows.providers.iter().any(|p| p.id == record.provider) {
        return Err(format!(
            "provider: unknown provider `{}` (create it first)",
            record.provider
        ));
    }
    record.auth_class = AuthClass::Oauth;
    record.has_credential = true;
    if let Some(account) = &grant.account_id {
        let mut data = match record.provider_specific_data.take() {
            Some(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        data.insert(ACCOUNT_KEY.to_owned(), account.clone().into());
        record.provider_specific_data = Some(serde_json::Value::Object(data));
    }
    let created = existing.is_none();
    let credential = SecretString::from(grant.to_credential());
    upsert_by(
        &mut rows.connections,
        (record.clone(), credential),
        |x| &x.0.id,
        id,
    );
    Ok((record, created))
}

/// Imports a CLI's credential file as connection `input.connection` (created or
/// updated): its tokens become the credential, its refreshes start afresh, and a
/// terminal state or cooldown of the connection ends (SPEC R4). Returns the connection
/// and whether it was created.
pub async fn import(
    state: &AppState,
    input: GrantImport,
) -> Result<(ConnectionRecord, bool), ApiError> {
    let grant = read_grant(
        input.cli.into(),
        input.file.expose_secret(),
        input.token_url.as_deref(),
    )
    .map_err(|m| ApiError::bad_request("invalid_credentials", m))?;
    let id = input.connection;
    let grant = Arc::new(grant);
    let (g, t) = (Arc::clone(&grant), state.clock.now_ms());
    let built = Arc::new(OnceLock::new());
    let found = Arc::clone(&built);
    let created = apply_change(
        state,
        |rows| {
            let staged = stage_import(rows, &id, input.provider.as_deref(), &grant)
                .map_err(|m| ApiError::bad_request("invalid_config", m))?;
            found.get_or_init(|| staged);
            Ok(())
        },
        move |b| {
            built
                .get()
                .map(|(c, created)| {
                    b.save_grant(c, &g, SaveMode::Upsert, t)?;
                    Ok(*created)
                })
                .transpose()
        },
    )
    .await?
    .unwrap_or(false);
    state.runtime.resilience.reset_connection(&id);
    tracing::info!(connection_id = %id, cli = ?input.cli, created, "Imported OAuth credentials.");
    let saved = blocking(&state.store, move |s| s.get_connection(&id)).await?;
    Ok((saved, created))
}

/// Every OAuth connection's refresh state.
pub async fn list(state: &AppState) -> Result<Vec<OauthRecord>, ApiError> {
    Ok(blocking(&state.store, |s| s.list_oauth()).await?)
}

/// An operator's refresh of connection `id`'s token, tried whatever the back-off says;
/// a success ends an `expired` state. Returns the refresh state after it.
pub async fn refresh(state: &Arc<AppState>, id: String) -> Result<OauthRecord, ApiError> {
    match crate::oauth::refresh(state, &id, None, None).await {
        Ok(_) => {}
        Err(RefreshError::NotOauth(_)) => {
            return Err(ApiError::NotFound {
                kind: "OAuth connection",
                id,
            })
        }
        Err(e) => return Err(ApiError::OauthRefresh(e.to_string())),
    }
    let key = id.clone();
    blocking(&state.store, move |s| s.oauth_of(&key))
        .await?
        .ok_or(ApiError::NotFound {
            kind: "OAuth connection",
            id,
        })
}
