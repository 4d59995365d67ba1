//! The keys page (SPEC D4): client API keys with their restrictions and state, the
//! create form and a revoke button per key. A new key's secret is shown once, in the
//! answer to the create form itself (not a redirect), and is kept nowhere: not in the
//! session, not in a notice.

use crate::fields::{all, checkbox, comma_list, input, one, some_if_any, state_label, Fields};
use crate::html::{confirm_form, form, table, text, Nav};
use crate::web::{Dash, Empty, Posted, Routes, Session, Signed, View};
use axum::extract::{Path, State};
use axum::response::Response;
use maud::{html, Markup};
use secrecy::{ExposeSecret, SecretString};
use std::sync::Arc;
use switchyard_gateway::error::ApiError;
use switchyard_gateway::keys::{NewKey, KNOWN_SCOPES};
use switchyard_gateway::services;
use switchyard_gateway::services::model::{ConnectionRecord, KeyRecord};

/// The page's path.
const PAGE: &str = "/dashboard/keys";

/// The keys page's routes.
pub fn routes() -> Routes {
    Routes::default()
        .page_and_form(PAGE, page, create)
        .form("/dashboard/keys/{id}/revoke", revoke)
}

/// What the page shows.
#[derive(Debug)]
pub struct Keys {
    pub keys: Vec<KeyRecord>,
    /// The connections a key may be restricted to.
    pub connections: Vec<ConnectionRecord>,
}

/// The keys and connections, from the services the management API uses.
async fn gather(dash: &Dash) -> Result<Keys, ApiError> {
    Ok(Keys {
        keys: services::keys::list(&dash.app).await?,
        connections: services::config::connections(&dash.app).await?,
    })
}

/// The page, with `created` (a new key's id and secret) shown once above the list.
async fn show(dash: &Dash, session: &Session, created: Option<(&str, &SecretString)>) -> Response {
    match gather(dash).await {
        Ok(k) => dash.render(
            session,
            View::ok("Keys", Nav::Keys, render(&k, created, &session.csrf)),
        ),
        Err(e) => dash.failed(session, "Keys", Nav::Keys, &e),
    }
}

/// `GET /dashboard/keys`.
async fn page(State(dash): State<Arc<Dash>>, Signed(session): Signed) -> Response {
    show(&dash, &session, None).await
}

/// `POST /dashboard/keys`: creates a key from `name`, the checked `scope`s, `models`
/// (comma separated; empty = all) and the checked `connection`s (none = all). On success
/// the answer is the page itself with the secret; an error goes back with its notice.
async fn create(State(dash): State<Arc<Dash>>, Posted(session, f): Posted<Fields>) -> Response {
    let input = NewKey {
        id: None,
        name: one(&f, "name"),
        scopes: all(&f, "scope"),
        allowed_connections: some_if_any(all(&f, "connection")),
        allowed_models: some_if_any(comma_list(&one(&f, "models"))),
        secret: None,
    };
    match services::keys::create(&dash.app, input).await {
        Ok((record, secret)) => show(&dash, &session, Some((&record.id, &secret))).await,
        Err(e) => {
            dash.done(&session, PAGE, Err::<(), _>(e), |()| String::new())
                .await
        }
    }
}

/// `POST /dashboard/keys/{id}/revoke`.
async fn revoke(
    State(dash): State<Arc<Dash>>,
    Path(id): Path<String>,
    Posted(session, Empty {}): Posted<Empty>,
) -> Response {
    let outcome = services::keys::revoke(&dash.app, id).await;
    dash.done(&session, PAGE, outcome, |k| {
        format!("Key {} revoked.", k.id)
    })
    .await
}

/// A restriction list, or `all` when there is none.
fn restriction(list: Option<&Vec<String>>) -> String {
    list.map_or_else(|| "all".to_owned(), |l| l.join(", "))
}

/// The page's `<main>` content.
pub fn render(k: &Keys, created: Option<(&str, &SecretString)>, csrf: &str) -> Markup {
    let rows: Vec<Vec<Markup>> = k
        .keys
        .iter()
        .map(|key| {
            let (state, action) = match key.revoked_at {
                Some(at) => (
                    html! { (state_label("revoked")) " " (crate::html::utc(at)) },
                    html! {},
                ),
                None => (
                    state_label("active"),
                    confirm_form(
                        &format!("/dashboard/keys/{}/revoke", key.id),
                        csrf,
                        &format!("Revoke {}…", key.id),
                        &format!("Revoke key {} for good", key.id),
                    ),
                ),
            };
            vec![
                text(&key.id),
                text(&key.name),
                text(key.scopes.join(", ")),
                text(restriction(key.allowed_models.as_ref())),
                text(restriction(key.allowed_connections.as_ref())),
                text(crate::html::utc(key.created_at)),
                state,
                action,
            ]
        })
        .collect();
    let fields = html! {
        (input("key-name", "name", "Name", "text", "", true))
        fieldset {
            legend { "Scopes" }
            @for s in KNOWN_SCOPES { (checkbox(&format!("scope-{s}"), "scope", s, s, false)) }
            p.hint {
                code { "admin" } " lets the key call the management API. " code { "lease:exclusive" }
                " lets it lease one of its allowed connections for itself ("
                code { "POST /api/v1/session-leases" } "); it needs allowed connections checked below, and reserves nothing until a lease is taken."
            }
        }
        (input("key-models", "models", "Allowed models", "text", "", false))
        p.hint { "Comma separated; empty allows every model." }
        fieldset {
            legend { "Allowed connections" }
            @for c in &k.connections {
                (checkbox(&format!("connection-{}", c.id), "connection", &c.id, &c.id, false))
            }
            p.hint { "None checked allows every connection." }
        }
    };
    html! {
        @if let Some((id, secret)) = created {
            section aria-labelledby="new-key" class="card" {
                h2 id="new-key" { "Key " (id) " created" }
                p.secret id="new-secret" { (secret.expose_secret()) }
                p.hint role="alert" { "Copy this secret now: it will not be shown again." }
            }
        }
        section aria-labelledby="keys" {
            h2 id="keys" { "Keys" }
            (table(
                "Client API keys",
                &["Id", "Name", "Scopes", "Allowed models", "Allowed connections", "Created", "State", "Action"],
                &rows,
                "No keys.",
            ))
        }
        section aria-labelledby="create" {
            h2 id="create" { "Create a key" }
            (form(PAGE, csrf, "stack", fields, "Create key"))
        }
    }
}
