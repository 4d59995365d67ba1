//! The providers and connections page (SPEC D4): both lists, a create form and an edit
//! form per row, and delete buttons. Create forms are read into the management API's own
//! input types (`ProviderRecord`, `ConnectionSpec`), edit forms into
//! `services::config`'s `ProviderEdit` and `ConnectionEdit` (the fields the form edits
//! only, so the rest of the record is kept as stored), and saved through
//! `services::config`, which validates them as the API does. A connection's credential
//! is write-only: the page says whether one is set, its field is never filled in, and
//! leaving it empty on an edit keeps the stored one.

use crate::fields::{checkbox, comma_list, input, non_blank, number, one, parse, Fields};
use crate::html::{confirm_form, form, table, text, Nav};
use crate::web::{Dash, Empty, Posted, Routes, Signed, View};
use axum::extract::{Path, State};
use axum::response::Response;
use maud::{html, Markup};
use serde_json::{Map, Value};
use std::sync::Arc;
use switchyard_gateway::config::ConnectionSpec;
use switchyard_gateway::error::ApiError;
use switchyard_gateway::services;
use switchyard_gateway::services::model::{
    ConnectionRecord, OauthRecord, ProviderRecord, SaveMode, StreamTimeouts,
};

/// The page's path.
const PAGE: &str = "/dashboard/providers";

/// The wire formats a provider may speak.
const FORMATS: [&str; 3] = ["openai", "anthropic", "responses"];

/// The auth classes of a connection.
const AUTH_CLASSES: [&str; 3] = ["apikey", "oauth", "local"];

/// The page's routes.
pub fn routes() -> Routes {
    Routes::default()
        .page(PAGE, page)
        .form("/dashboard/providers/create", create_provider)
        .form("/dashboard/providers/{id}/update", update_provider)
        .form("/dashboard/providers/{id}/delete", delete_provider)
        .form("/dashboard/connections/create", create_connection)
        .form("/dashboard/connections/{id}/update", update_connection)
        .form("/dashboard/connections/{id}/delete", delete_connection)
}

/// What the page shows.
#[derive(Debug)]
pub struct Providers {
    pub providers: Vec<ProviderRecord>,
    pub connections: Vec<ConnectionRecord>,
    /// The OAuth connections' refresh state (SPEC R4).
    pub oauth: Vec<OauthRecord>,
    /// Unix milliseconds, for the times shown relative to now.
    pub now: u64,
}

/// `GET /dashboard/providers`.
async fn page(State(dash): State<Arc<Dash>>, Signed(session): Signed) -> Response {
    let gathered = async {
        Ok::<_, ApiError>(Providers {
            providers: services::config::providers(&dash.app).await?,
            connections: services::config::connections(&dash.app).await?,
            oauth: services::oauth::list(&dash.app).await?,
            now: dash.app.clock.now_ms(),
        })
    };
    match gathered.await {
        Ok(p) => dash.render(
            &session,
            View::ok(
                "Providers and connections",
                Nav::Providers,
                render(&p, &session.csrf),
            ),
        ),
        Err(e) => dash.failed(&session, "Providers and connections", Nav::Providers, &e),
    }
}

/// A provider form's edited fields as JSON, in the API's names.
fn provider_json(f: &Fields) -> Map<String, Value> {
    let mut p = Map::new();
    p.insert("format".into(), one(f, "format").into());
    p.insert("base_url".into(), one(f, "base_url").trim().into());
    p.insert("models".into(), comma_list(&one(f, "models")).into());
    p.insert("max_concurrent".into(), number(&one(f, "max_concurrent")));
    let timeouts: Map<String, Value> = STREAM_TIMEOUTS
        .iter()
        .map(|(name, ..)| ((*name).to_owned(), number(&one(f, name))))
        .collect();
    p.insert("stream_timeouts".into(), Value::Object(timeouts));
    p
}

/// A provider's own stream deadlines (the API's `stream_timeouts`): each field's name,
/// label and value.
type StreamTimeout = (
    &'static str,
    &'static str,
    fn(&StreamTimeouts) -> Option<u64>,
);

const STREAM_TIMEOUTS: [StreamTimeout; 3] = [
    (
        "first_output_ms",
        "First-output budget, ms (empty = streamContentStall.firstOutputMs)",
        |t| t.first_output_ms,
    ),
    (
        "first_output_max_ms",
        "Adaptive first-output cap, ms (empty = streamContentStall.firstOutputMaxMs)",
        |t| t.first_output_max_ms,
    ),
    (
        "idle_ms",
        "Longest gap between output events, ms (empty = streamContentStall.idleMs)",
        |t| t.idle_ms,
    ),
];

/// A new provider's form as the API's `ProviderRecord` with `id` (no prices and no
/// output-token limits: the form does not set them).
fn provider_of(f: &Fields, id: String) -> Result<ProviderRecord, ApiError> {
    let mut p = provider_json(f);
    p.insert("id".into(), id.into());
    parse(Value::Object(p))
}

/// `POST /dashboard/providers/create`.
async fn create_provider(
    State(dash): State<Arc<Dash>>,
    Posted(session, f): Posted<Fields>,
) -> Response {
    let outcome = match provider_of(&f, one(&f, "id").trim().to_owned()) {
        Ok(p) => services::config::save_provider(&dash.app, p, SaveMode::Create).await,
        Err(e) => Err(e),
    };
    dash.done(&session, PAGE, outcome, |p| {
        format!("Provider {} created.", p.id)
    })
    .await
}

/// `POST /dashboard/providers/{id}/update`.
async fn update_provider(
    State(dash): State<Arc<Dash>>,
    Path(id): Path<String>,
    Posted(session, f): Posted<Fields>,
) -> Response {
    let outcome = match parse(Value::Object(provider_json(&f))) {
        Ok(edit) => services::config::update_provider(&dash.app, id, edit).await,
        Err(e) => Err(e),
    };
    dash.done(&session, PAGE, outcome, |p| {
        format!("Provider {} saved.", p.id)
    })
    .await
}

/// `POST /dashboard/providers/{id}/delete`.
async fn delete_provider(
    State(dash): State<Arc<Dash>>,
    Path(id): Path<String>,
    Posted(session, Empty {}): Posted<Empty>,
) -> Response {
    let outcome = services::config::delete_provider(&dash.app, id.clone()).await;
    dash.done(&session, PAGE, outcome, |()| {
        format!("Provider {id} deleted.")
    })
    .await
}

/// A connection form's edited fields as JSON, in the API's names: an empty credential
/// is left out (an edit then keeps the stored one).
fn connection_json(f: &Fields) -> Map<String, Value> {
    let mut spec = Map::new();
    spec.insert("provider".into(), one(f, "provider").into());
    spec.insert("auth_class".into(), one(f, "auth_class").into());
    if let Some(format) = non_blank(&one(f, "format")) {
        spec.insert("format".into(), format.into());
    }
    if let Some(url) = non_blank(&one(f, "base_url")) {
        spec.insert("base_url".into(), url.into());
    }
    let credential = one(f, "credential");
    if !credential.is_empty() {
        spec.insert("credential".into(), credential.into());
    }
    spec.insert(
        "enabled".into(),
        f.iter().any(|(k, _)| k == "enabled").into(),
    );
    spec.insert(
        "disable_cooling".into(),
        f.iter().any(|(k, _)| k == "disable_cooling").into(),
    );
    spec.insert("max_concurrent".into(), number(&one(f, "max_concurrent")));
    spec
}

/// A new connection's form as the API's `ConnectionSpec` with `id`.
fn connection_of(f: &Fields, id: String) -> Result<ConnectionSpec, ApiError> {
    let mut spec = connection_json(f);
    spec.insert("id".into(), id.into());
    parse(Value::Object(spec))
}

/// `POST /dashboard/connections/create`.
async fn create_connection(
    State(dash): State<Arc<Dash>>,
    Posted(session, f): Posted<Fields>,
) -> Response {
    let outcome = match connection_of(&f, one(&f, "id").trim().to_owned()) {
        Ok(c) => services::config::save_connection(&dash.app, c, SaveMode::Create).await,
        Err(e) => Err(e),
    };
    dash.done(&session, PAGE, outcome, |c| {
        format!("Connection {} created.", c.id)
    })
    .await
}

/// `POST /dashboard/connections/{id}/update`.
async fn update_connection(
    State(dash): State<Arc<Dash>>,
    Path(id): Path<String>,
    Posted(session, f): Posted<Fields>,
) -> Response {
    let outcome = match parse(Value::Object(connection_json(&f))) {
        Ok(edit) => services::config::update_connection(&dash.app, id, edit).await,
        Err(e) => Err(e),
    };
    dash.done(&session, PAGE, outcome, |c| {
        format!("Connection {} saved.", c.id)
    })
    .await
}

/// `POST /dashboard/connections/{id}/delete`.
async fn delete_connection(
    State(dash): State<Arc<Dash>>,
    Path(id): Path<String>,
    Posted(session, Empty {}): Posted<Empty>,
) -> Response {
    let outcome = services::config::delete_connection(&dash.app, id.clone()).await;
    dash.done(&session, PAGE, outcome, |()| {
        format!("Connection {id} deleted.")
    })
    .await
}

/// A labelled `<select>` of `options` with `selected` chosen; `blank` adds a first
/// option with an empty value and that label.
fn select(
    id: &str,
    name: &str,
    label: &str,
    options: &[&str],
    selected: &str,
    blank: Option<&str>,
) -> Markup {
    html! {
        label for=(id) { (label) }
        select id=(id) name=(name) {
            @if let Some(b) = blank { option value="" { (b) } }
            @for o in options { option value=(o) selected[*o == selected] { (o) } }
        }
    }
}

/// A provider form's fields; `p` fills them in for an edit (`prefix` keeps ids unique).
fn provider_fields(prefix: &str, p: Option<&ProviderRecord>) -> Markup {
    let id = |f: &str| format!("{prefix}-{f}");
    html! {
        @if p.is_none() { (input(&id("id"), "id", "Id", "text", "", true)) }
        (select(
            &id("format"),
            "format",
            "Format",
            &FORMATS,
            p.map_or("openai", |p| p.format.as_str()),
            None,
        ))
        (input(&id("base_url"), "base_url", "Base URL", "url", p.map_or("", |p| &p.base_url), true))
        (input(
            &id("models"),
            "models",
            "Models (comma separated; empty passes any name through)",
            "text",
            &p.map_or_else(String::new, |p| p.models.join(", ")),
            false,
        ))
        (input(
            &id("max_concurrent"),
            "max_concurrent",
            "Most requests in flight (empty = no limit)",
            "number",
            &p.and_then(|p| p.max_concurrent)
                .map_or_else(String::new, |n| n.to_string()),
            false,
        ))
        @for (name, label, value) in STREAM_TIMEOUTS {
            (input(
                &id(name),
                name,
                label,
                "number",
                &p.and_then(|p| value(&p.stream_timeouts))
                    .map_or_else(String::new, |n| n.to_string()),
                false,
            ))
        }
    }
}

/// A connection form's fields; `c` fills them in for an edit, except the credential.
fn connection_fields(prefix: &str, providers: &[&str], c: Option<&ConnectionRecord>) -> Markup {
    let id = |f: &str| format!("{prefix}-{f}");
    let credential_hint = match c {
        Some(_) => "Write-only. Leave empty to keep the stored credential.",
        None => "Write-only: it is stored and never shown again.",
    };
    html! {
        @if c.is_none() { (input(&id("id"), "id", "Id", "text", "", true)) }
        (select(&id("provider"), "provider", "Provider", providers, c.map_or("", |c| &c.provider), None))
        (select(
            &id("auth_class"),
            "auth_class",
            "Auth class",
            &AUTH_CLASSES,
            c.map_or("apikey", |c| c.auth_class.as_str()),
            None,
        ))
        (select(
            &id("format"),
            "format",
            "Format",
            &FORMATS,
            c.and_then(|c| c.format).map_or("", |f| f.as_str()),
            Some("the provider's"),
        ))
        (input(
            &id("base_url"),
            "base_url",
            "Base URL (empty = the provider's)",
            "url",
            c.and_then(|c| c.base_url.as_deref()).unwrap_or(""),
            false,
        ))
        label for=(id("credential")) { "Credential" }
        input type="password" id=(id("credential")) name="credential" autocomplete="new-password";
        p.hint { (credential_hint) }
        (input(
            &id("max_concurrent"),
            "max_concurrent",
            "Most requests in flight (empty = no limit)",
            "number",
            &c.and_then(|c| c.max_concurrent)
                .map_or_else(String::new, |n| n.to_string()),
            false,
        ))
        div { (checkbox(&id("enabled"), "enabled", "true", "Enabled", c.is_none_or(|c| c.enabled))) }
        div {
            (checkbox(
                &id("disable_cooling"),
                "disable_cooling",
                "true",
                "Failures do not cool it down",
                c.is_some_and(|c| c.disable_cooling),
            ))
        }
    }
}

/// An edit form folded in a `<details>`, and the delete button behind a confirmation.
fn edit_and_delete(what: &str, base: &str, id: &str, fields: Markup, csrf: &str) -> Markup {
    html! {
        details {
            summary { "Edit " (id) }
            (form(&format!("{base}/{id}/update"), csrf, "stack", fields, &format!("Save {what}")))
        }
        (confirm_form(
            &format!("{base}/{id}/delete"),
            csrf,
            &format!("Delete {id}…"),
            &format!("Delete {what} {id} for good"),
        ))
    }
}

/// The page's `<main>` content.
pub fn render(p: &Providers, csrf: &str) -> Markup {
    let ids: Vec<&str> = p.providers.iter().map(|x| x.id.as_str()).collect();
    let providers: Vec<Vec<Markup>> = p
        .providers
        .iter()
        .map(|x| {
            vec![
                text(&x.id),
                text(x.format.as_str()),
                text(&x.base_url),
                text(if x.models.is_empty() {
                    "any".to_owned()
                } else {
                    x.models.join(", ")
                }),
                text(
                    x.max_concurrent
                        .map_or_else(|| "—".to_owned(), |n| n.to_string()),
                ),
                edit_and_delete(
                    "provider",
                    "/dashboard/providers",
                    &x.id,
                    provider_fields(&format!("provider-{}", x.id), Some(x)),
                    csrf,
                ),
            ]
        })
        .collect();
    let connections: Vec<Vec<Markup>> = p
        .connections
        .iter()
        .map(|c| {
            vec![
                text(&c.id),
                text(&c.provider),
                text(c.auth_class.as_str()),
                text(c.format.map_or("provider's", |f| f.as_str())),
                text(c.base_url.as_deref().unwrap_or("provider's")),
                text(if c.enabled { "yes" } else { "no" }),
                text(if c.has_credential { "set" } else { "not set" }),
                edit_and_delete(
                    "connection",
                    "/dashboard/connections",
                    &c.id,
                    connection_fields(&format!("connection-{}", c.id), &ids, Some(c)),
                    csrf,
                ),
            ]
        })
        .collect();
    html! {
        section aria-labelledby="providers" {
            h2 id="providers" { "Providers" }
            (table(
                "Providers",
                &["Provider", "Format", "Base URL", "Models", "Max in flight", "Actions"],
                &providers,
                "No providers.",
            ))
            h3 id="new-provider" { "New provider" }
            (form("/dashboard/providers/create", csrf, "stack", provider_fields("new-provider", None), "Create provider"))
            p.hint { "Prices and output-token limits are kept on an edit; change them through the management API." }
        }
        section aria-labelledby="connections" {
            h2 id="connections" { "Connections" }
            (table(
                "Connections (credentials are never shown)",
                &["Connection", "Provider", "Auth", "Format", "Base URL", "Enabled", "Credential", "Actions"],
                &connections,
                "No connections.",
            ))
            h3 id="new-connection" { "New connection" }
            (form(
                "/dashboard/connections/create",
                csrf,
                "stack",
                connection_fields("new-connection", &ids, None),
                "Create connection",
            ))
            p.hint { "Rate-limit overrides and provider-specific data are kept on an edit; change them through the management API." }
        }
        (crate::subscriptions::section(&p.oauth, &ids, p.now, csrf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use switchyard_gateway::services::config::ConnectionEdit;

    #[test]
    fn an_empty_credential_is_left_out_and_checkboxes_are_read() {
        let f: Fields = vec![
            ("provider".into(), "alpha".into()),
            ("auth_class".into(), "apikey".into()),
            ("format".into(), "".into()),
            ("credential".into(), "".into()),
            ("max_concurrent".into(), "".into()),
        ];
        let c = connection_of(&f, "c1".into()).unwrap();
        assert!(c.credential.is_none());
        assert!(!c.enabled);
        assert!(c.format.is_none());
        assert_eq!(c.max_concurrent, None);
        let edit: ConnectionEdit = parse(Value::Object(connection_json(&f))).unwrap();
        assert!(edit.credential.is_none());
        assert!(!edit.enabled);
        let bad = connection_of(
            &[("auth_class".to_owned(), "root".to_owned())].to_vec(),
            "c1".into(),
        );
        assert!(bad
            .unwrap_err()
            .to_string()
            .contains("unknown variant `root`"));
    }
}
