//! Providers, connections and combos: list, get, save (create or update), delete; the
//! model aliases: read and replaced as one ordered list.
//!
//! Writes go through `apply_change` only, so each is validated by the snapshot it would
//! build and reloads it. Connection credentials are write-only: accepted by
//! [`save_connection`] and [`update_connection`], never returned (`has_credential` says
//! whether one is stored).
//!
//! [`update_provider`] and [`update_connection`] change only the fields a form edits:
//! the rest of the record is read under the admin lock, so a change made meanwhile to a
//! field the form does not show (prices, provider-specific data, ...) is kept.

use super::{apply_change, upsert_by};
use crate::config::ConnectionSpec;
use crate::error::ApiError;
use crate::state::{blocking, AppState};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use std::sync::{Arc, OnceLock};
use switchyard_core::domain::{AuthClass, UpstreamFormat};
use switchyard_model::{
    AliasRecord, ComboRecord, ConfigRows, ConnectionRecord, ProviderRecord, SaveMode,
};

// ---- providers ----

/// Every provider.
pub async fn providers(state: &AppState) -> Result<Vec<ProviderRecord>, ApiError> {
    Ok(blocking(&state.store, |s| s.list_providers()).await?)
}

/// One provider.
pub async fn provider(state: &AppState, id: String) -> Result<ProviderRecord, ApiError> {
    Ok(blocking(&state.store, move |s| s.get_provider(&id)).await?)
}

/// Creates or replaces a provider, as `mode` says.
pub async fn save_provider(
    state: &AppState,
    p: ProviderRecord,
    mode: SaveMode,
) -> Result<ProviderRecord, ApiError> {
    let (rec, t) = (p.clone(), state.clock.now_ms());
    apply_change(
        state,
        |rows| {
            upsert_by(&mut rows.providers, p.clone(), |x| &x.id, &p.id);
            Ok(())
        },
        move |s| s.save_provider(&rec, mode, t),
    )
    .await?;
    Ok(p)
}

/// The fields of a provider an edit form changes; an update keeps the others (prices,
/// output-token limits) as stored.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderEdit {
    pub format: UpstreamFormat,
    pub base_url: String,
    /// Models offered; empty = any model name is passed through.
    #[serde(default)]
    pub models: Vec<String>,
    /// Requests in flight across the provider's connections; `None` = no limit.
    pub max_concurrent: Option<u32>,
    /// The provider's own stream deadlines; a field left out follows the setting.
    #[serde(default)]
    pub stream_timeouts: switchyard_model::StreamTimeouts,
}

/// Applies `edit` to provider `id` as stored when the admin lock is held, so the fields
/// it does not hold are kept even if changed since the form was shown.
pub async fn update_provider(
    state: &AppState,
    id: String,
    edit: ProviderEdit,
) -> Result<ProviderRecord, ApiError> {
    let edited = Arc::new(OnceLock::new());
    let (found, t) = (Arc::clone(&edited), state.clock.now_ms());
    let saved = apply_change(
        state,
        |rows| {
            let p = rows
                .providers
                .iter_mut()
                .find(|p| p.id == id)
                .ok_or_else(|| ApiError::NotFound {
                    kind: "provider",
                    id: id.clone(),
                })?;
            p.format = edit.format;
            p.base_url = edit.base_url;
            p.models = edit.models;
            p.max_concurrent = edit.max_concurrent;
            p.stream_timeouts = edit.stream_timeouts;
            found.get_or_init(|| p.clone());
            Ok(())
        },
        move |s| {
            edited
                .get()
                .map(|p| s.save_provider(p, SaveMode::Update, t).map(|()| p.clone()))
                .transpose()
        },
    )
    .await?;
    saved.ok_or(ApiError::NotFound {
        kind: "provider",
        id,
    })
}

/// Deletes a provider.
pub async fn delete_provider(state: &AppState, id: String) -> Result<(), ApiError> {
    let gone = id.clone();
    apply_change(
        state,
        |rows| {
            let prefix = format!("{gone}/");
            super::unused_by_aliases(rows, "provider", &gone, |a| a.target.starts_with(&prefix))
        },
        move |s| s.delete_provider(&id),
    )
    .await
}

// ---- connections ----

/// Every connection, without credentials.
pub async fn connections(state: &AppState) -> Result<Vec<ConnectionRecord>, ApiError> {
    Ok(blocking(&state.store, |s| s.list_connections()).await?)
}

/// One connection, without its credential.
pub async fn connection(state: &AppState, id: String) -> Result<ConnectionRecord, ApiError> {
    Ok(blocking(&state.store, move |s| s.get_connection(&id)).await?)
}

/// Creates or replaces a connection, as `mode` says; a stored credential is kept when
/// none is sent, and a new one ends the connection's terminal state and cooldown.
pub async fn save_connection(
    state: &AppState,
    input: ConnectionSpec,
    mode: SaveMode,
) -> Result<ConnectionRecord, ApiError> {
    if input.credential_env.is_some() {
        return Err(ApiError::bad_request(
            "invalid_config",
            "credential_env: accepted only in the config file; send `credential`",
        ));
    }
    let record = input
        .record()
        .map_err(|m| ApiError::bad_request("invalid_config", m))?;
    let credential = input.credential;
    let new_credential = credential.is_some();
    let (rec, t) = (record.clone(), state.clock.now_ms());
    let cred = credential.clone();
    apply_change(
        state,
        |rows| {
            known_provider(rows, &record.provider)?;
            let kept = rows
                .connections
                .iter()
                .find(|(c, _)| c.id == record.id)
                .map(|(_, cred)| cred.clone());
            let cred = credential.or(kept).unwrap_or_default();
            upsert_by(
                &mut rows.connections,
                (record.clone(), cred),
                |x| &x.0.id,
                &record.id,
            );
            Ok(())
        },
        move |s| s.save_connection(&rec, cred.as_ref(), mode, t),
    )
    .await?;
    if new_credential {
        // A new credential ends a terminal state and any cooldown (SPEC R4).
        state.runtime.resilience.reset_connection(&record.id);
    }
    let id = record.id.clone();
    let saved = blocking(&state.store, move |s| s.get_connection(&id)).await?;
    if mode == SaveMode::Create {
        tracing::info!(connection_id = %saved.id, provider = %saved.provider, "Created connection.");
    }
    Ok(saved)
}

/// Refuses a connection of a provider `rows` do not hold, as the API does.
fn known_provider(rows: &ConfigRows, provider: &str) -> Result<(), ApiError> {
    if rows.providers.iter().any(|p| p.id == provider) {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "invalid_config",
            format!("provider: unknown provider `{provider}`"),
        ))
    }
}

/// The fields of a connection an edit form changes, and optionally a new credential;
/// an update keeps the others (rate-limit overrides, provider-specific data) as stored.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionEdit {
    pub provider: String,
    pub auth_class: AuthClass,
    /// Overrides the provider's format; `None` = the provider's.
    pub format: Option<UpstreamFormat>,
    /// Overrides the provider's base URL; `None` = the provider's.
    pub base_url: Option<String>,
    /// A new credential; `None` keeps the stored one (an empty one clears it).
    pub credential: Option<SecretString>,
    pub enabled: bool,
    /// Requests in flight on this connection; `None` = no limit.
    pub max_concurrent: Option<u32>,
    pub disable_cooling: bool,
}

/// Applies `edit` to connection `id` as stored when the admin lock is held, so the
/// fields it does not hold are kept even if changed since the form was shown; validated
/// as [`save_connection`] validates. A new credential ends the connection's terminal
/// state and cooldown.
pub async fn update_connection(
    state: &AppState,
    id: String,
    edit: ConnectionEdit,
) -> Result<ConnectionRecord, ApiError> {
    let replaced = edit.credential.is_some();
    let new_credential = edit.credential.clone();
    let edited = Arc::new(OnceLock::new());
    let (found, t) = (Arc::clone(&edited), state.clock.now_ms());
    let credential = new_credential.clone();
    let saved = apply_change(
        state,
        |rows| {
            known_provider(rows, &edit.provider)?;
            let (stored, cred) = rows
                .connections
                .iter_mut()
                .find(|(c, _)| c.id == id)
                .ok_or_else(|| ApiError::NotFound {
                    kind: "connection",
                    id: id.clone(),
                })?;
            let spec = ConnectionSpec {
                id: id.clone(),
                provider: edit.provider,
                auth_class: edit.auth_class,
                format: edit.format,
                base_url: edit.base_url,
                credential: None,
                credential_env: None,
                enabled: edit.enabled,
                max_concurrent: edit.max_concurrent,
                rate_limit_overrides: stored.rate_limit_overrides.clone(),
                provider_specific_data: stored.provider_specific_data.clone(),
                disable_cooling: edit.disable_cooling,
            };
            let mut record = spec
                .record()
                .map_err(|m| ApiError::bad_request("invalid_config", m))?;
            if let Some(c) = credential {
                *cred = c;
            }
            record.has_credential = !cred.expose_secret().is_empty();
            *stored = record.clone();
            found.get_or_init(|| record);
            Ok(())
        },
        move |s| {
            edited
                .get()
                .map(|c| s.save_connection(c, new_credential.as_ref(), SaveMode::Update, t))
                .transpose()
        },
    )
    .await?;
    if saved.is_none() {
        return Err(ApiError::NotFound {
            kind: "connection",
            id,
        });
    }
    if replaced {
        // A new credential ends a terminal state and any cooldown (SPEC R4).
        state.runtime.resilience.reset_connection(&id);
    }
    Ok(blocking(&state.store, move |s| s.get_connection(&id)).await?)
}

/// Deletes a connection.
pub async fn delete_connection(state: &AppState, id: String) -> Result<(), ApiError> {
    apply_change(state, |_| Ok(()), move |s| s.delete_connection(&id)).await
}

// ---- combos ----

/// Every combo.
pub async fn combos(state: &AppState) -> Result<Vec<ComboRecord>, ApiError> {
    Ok(blocking(&state.store, |s| s.list_combos()).await?)
}

/// One combo.
pub async fn combo(state: &AppState, name: String) -> Result<ComboRecord, ApiError> {
    Ok(blocking(&state.store, move |s| s.get_combo(&name)).await?)
}

/// Creates or replaces a combo, as `mode` says.
pub async fn save_combo(
    state: &AppState,
    c: ComboRecord,
    mode: SaveMode,
) -> Result<ComboRecord, ApiError> {
    let (rec, t) = (c.clone(), state.clock.now_ms());
    apply_change(
        state,
        |rows| {
            upsert_by(&mut rows.combos, c.clone(), |x| &x.name, &c.name);
            Ok(())
        },
        move |s| s.save_combo(&rec, mode, t),
    )
    .await?;
    Ok(c)
}

/// Deletes a combo.
pub async fn delete_combo(state: &AppState, name: String) -> Result<(), ApiError> {
    let gone = name.clone();
    apply_change(
        state,
        |rows| super::unused_by_aliases(rows, "combo", &gone, |a| a.target == gone),
        move |s| s.delete_combo(&name),
    )
    .await
}

// ---- aliases ----

/// The model aliases, in the order they are tried.
pub async fn aliases(state: &AppState) -> Result<Vec<AliasRecord>, ApiError> {
    Ok(blocking(&state.store, |s| s.list_aliases()).await?)
}

/// Replaces the model aliases with `list`, in its order, once the whole is valid.
pub async fn replace_aliases(
    state: &AppState,
    list: Vec<AliasRecord>,
) -> Result<Vec<AliasRecord>, ApiError> {
    let (rec, t) = (list.clone(), state.clock.now_ms());
    apply_change(
        state,
        |rows| {
            rows.aliases = list.clone();
            Ok(())
        },
        move |s| s.replace_aliases(&rec, t),
    )
    .await?;
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::state::load_rows;
    use serde_json::json;
    use switchyard_core::settings::Layers;
    use switchyard_store::Store;

    /// A state over an in-memory database with provider `p` and connection `c1` (of
    /// `p`, credential `old-credential`), saved as the API saves them.
    async fn state() -> Arc<AppState> {
        let store = Store::open_in_memory().unwrap();
        let (state, _writers) = AppState::new(
            Arc::new(store),
            Arc::new(SystemClock),
            Layers::default(),
            None,
        )
        .await
        .unwrap();
        save_provider(&state, provider(json!({})), SaveMode::Create)
            .await
            .unwrap();
        save_connection(&state, spec(json!({})), SaveMode::Create)
            .await
            .unwrap();
        state
    }

    /// Provider `p` as the API would receive it, with `more` fields.
    fn provider(more: serde_json::Value) -> ProviderRecord {
        let mut p = json!({"id": "p", "format": "openai", "base_url": "http://127.0.0.1:9"});
        p.as_object_mut()
            .unwrap()
            .extend(more.as_object().unwrap().clone());
        serde_json::from_value(p).unwrap()
    }

    /// Connection `c1` as the API would receive it, with `more` fields.
    fn spec(more: serde_json::Value) -> ConnectionSpec {
        let mut c = json!({"id": "c1", "provider": "p", "auth_class": "apikey",
            "credential": "old-credential"});
        c.as_object_mut()
            .unwrap()
            .extend(more.as_object().unwrap().clone());
        serde_json::from_value(c).unwrap()
    }

    fn provider_edit(base_url: &str) -> ProviderEdit {
        ProviderEdit {
            format: UpstreamFormat::Anthropic,
            base_url: base_url.into(),
            models: vec!["m1".into(), "m2".into()],
            max_concurrent: Some(4),
            stream_timeouts: Default::default(),
        }
    }

    fn connection_edit(credential: Option<&str>) -> ConnectionEdit {
        ConnectionEdit {
            provider: "p".into(),
            auth_class: AuthClass::Oauth,
            format: None,
            base_url: Some("http://127.0.0.1:8".into()),
            credential: credential.map(SecretString::from),
            enabled: false,
            max_concurrent: Some(2),
            disable_cooling: true,
        }
    }

    /// Connection `c1`'s stored credential.
    async fn credential(state: &AppState) -> String {
        let rows = load_rows(&state.store).await.unwrap();
        let (_, cred) = rows.connections.iter().find(|(c, _)| c.id == "c1").unwrap();
        cred.expose_secret().to_owned()
    }

    #[tokio::test]
    async fn update_provider_keeps_what_the_edit_does_not_hold() {
        let state = state().await;
        // Shown in a form, then given prices and output limits through the API.
        let shown = super::provider(&state, "p".into()).await.unwrap();
        assert!(shown.prices.is_empty());
        let priced = provider(json!({
            "prices": {"m1": {"input_per_mtok": 1.5, "output_per_mtok": 6.0}},
            "max_output_tokens": {"m1": 1000}
        }));
        save_provider(&state, priced, SaveMode::Update)
            .await
            .unwrap();
        let saved = update_provider(&state, "p".into(), provider_edit("http://127.0.0.1:7"))
            .await
            .unwrap();
        let wanted = provider(json!({
            "format": "anthropic", "base_url": "http://127.0.0.1:7",
            "models": ["m1", "m2"], "max_concurrent": 4,
            "prices": {"m1": {"input_per_mtok": 1.5, "output_per_mtok": 6.0}},
            "max_output_tokens": {"m1": 1000}
        }));
        assert_eq!(saved, wanted);
        assert_eq!(providers(&state).await.unwrap(), vec![wanted.clone()]);

        let e = update_provider(&state, "ghost".into(), provider_edit("http://127.0.0.1:7"))
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "provider `ghost` not found");
        // Refused with the API's message, and nothing written.
        let bad = update_provider(&state, "p".into(), provider_edit("http://bad host"))
            .await
            .unwrap_err();
        let api = save_provider(
            &state,
            provider(json!({"base_url": "http://bad host"})),
            SaveMode::Update,
        )
        .await
        .unwrap_err();
        assert_eq!(bad.to_string(), api.to_string());
        assert_eq!(
            bad.to_string(),
            "base URL `http://bad host` of provider `p` must not contain spaces, control characters or non-ASCII characters (percent-encode them)"
        );
        assert_eq!(providers(&state).await.unwrap(), vec![wanted]);
    }

    #[tokio::test]
    async fn update_connection_keeps_what_the_edit_does_not_hold_and_the_credential() {
        let state = state().await;
        // Shown in a form, then given overrides and account data through the API
        // (without a credential: the stored one is kept).
        let shown = connection(&state, "c1".into()).await.unwrap();
        assert_eq!(shown.provider_specific_data, None);
        let mut changed = spec(json!({
            "rate_limit_overrides": {"maxConcurrent": 5},
            "provider_specific_data": {"chatgptAccountId": "acct-1"}
        }));
        changed.credential = None;
        save_connection(&state, changed, SaveMode::Update)
            .await
            .unwrap();

        let saved = update_connection(&state, "c1".into(), connection_edit(None))
            .await
            .unwrap();
        let wanted = ConnectionRecord {
            id: "c1".into(),
            provider: "p".into(),
            auth_class: AuthClass::Oauth,
            format: None,
            base_url: Some("http://127.0.0.1:8".into()),
            enabled: false,
            max_concurrent: Some(2),
            rate_limit_overrides: Some(json!({"maxConcurrent": 5})),
            provider_specific_data: Some(json!({"chatgptAccountId": "acct-1"})),
            disable_cooling: true,
            has_credential: true,
        };
        assert_eq!(saved, wanted);
        assert_eq!(connections(&state).await.unwrap(), vec![wanted.clone()]);
        assert_eq!(credential(&state).await, "old-credential");

        let saved = update_connection(&state, "c1".into(), connection_edit(Some("new-credential")))
            .await
            .unwrap();
        assert_eq!(saved, wanted);
        assert_eq!(credential(&state).await, "new-credential");
    }

    #[tokio::test]
    async fn update_connection_is_validated_as_the_api_validates() {
        let state = state().await;
        let stored = connections(&state).await.unwrap();
        let e = update_connection(&state, "ghost".into(), connection_edit(None))
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "connection `ghost` not found");

        let mut edit = connection_edit(Some("new-credential"));
        edit.provider = "nope".into();
        let e = update_connection(&state, "c1".into(), edit)
            .await
            .unwrap_err();
        let api = save_connection(&state, spec(json!({"provider": "nope"})), SaveMode::Update)
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), api.to_string());
        assert_eq!(e.to_string(), "provider: unknown provider `nope`");

        let mut edit = connection_edit(Some("new-credential"));
        edit.max_concurrent = Some(0);
        let e = update_connection(&state, "c1".into(), edit)
            .await
            .unwrap_err();
        let api = save_connection(&state, spec(json!({"max_concurrent": 0})), SaveMode::Update)
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), api.to_string());
        assert_eq!(
            e.to_string(),
            "max_concurrent: must be at least 1 (omit it for no limit)"
        );
        assert_eq!(connections(&state).await.unwrap(), stored);
        assert_eq!(credential(&state).await, "old-credential");
    }
}
