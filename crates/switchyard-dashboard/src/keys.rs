//! The keys page (SPEC D4): client API keys with their restrictions and state, the
//! create form and a revoke button per key. A new key's secret is shown once, in the
//! answer to the create form itself (not a redirect), and is kept nowhere: not in the
//! session, not in a notice.

use crate::fields::{all, checkbox, comma_list, input, one, some_if_any, state_label, Fields};
use crate::html::{confirm_form, escape, form, table_html, Nav};
use crate::web::{Dash, Empty, Posted, Routes, Session, Signed, View};
use axum::extract::{Path, State};
use axum::response::Response;
use secrecy::{ExposeSecret, SecretString};
use std::sync::Arc;
use switchyard_gateway::error::ApiError;
use switchyard_gateway::keys::{NewKey, KNOWN_SCOPES};
use switchyard_gateway::services;
use switchyard_store::{ConnectionRecord, KeyRecord};

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
            View::ok("Keys", Nav::Keys, &render(&k, created, &session.csrf)),
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
        Err(e) => dash.done(&session, PAGE, Err::<(), _>(e), |()| String::new()),
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
}

/// A restriction list, or `all` when there is none.
fn restriction(list: Option<&Vec<String>>) -> String {
    list.map_or_else(|| "all".to_owned(), |l| l.join(", "))
}

/// The page's `<main>` content.
pub fn render(k: &Keys, created: Option<(&str, &SecretString)>, csrf: &str) -> String {
    let secret = created.map_or_else(String::new, |(id, secret)| {
        format!(
            r#"<section aria-labelledby="new-key" class="card"><h2 id="new-key">Key {id} created</h2>
<p class="secret" id="new-secret">{secret}</p>
<p class="hint" role="alert">Copy this secret now: it will not be shown again.</p></section>
"#,
            id = escape(id),
            secret = escape(secret.expose_secret()),
        )
    });
    let rows: Vec<Vec<String>> = k
        .keys
        .iter()
        .map(|key| {
            let (state, action) = match key.revoked_at {
                Some(at) => (
                    format!(
                        "{} {}",
                        state_label("revoked"),
                        escape(&crate::html::utc(at))
                    ),
                    String::new(),
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
                escape(&key.id),
                escape(&key.name),
                escape(&key.scopes.join(", ")),
                escape(&restriction(key.allowed_models.as_ref())),
                escape(&restriction(key.allowed_connections.as_ref())),
                escape(&crate::html::utc(key.created_at)),
                state,
                action,
            ]
        })
        .collect();
    let scopes: String = KNOWN_SCOPES
        .iter()
        .map(|s| checkbox(&format!("scope-{s}"), "scope", s, s, false))
        .collect();
    let connections: String = k
        .connections
        .iter()
        .map(|c| {
            checkbox(
                &format!("connection-{}", c.id),
                "connection",
                &c.id,
                &c.id,
                false,
            )
        })
        .collect();
    let fields = format!(
        r#"{name}<fieldset><legend>Scopes</legend>{scopes}</fieldset>{models}<p class="hint">Comma separated; empty allows every model.</p><fieldset><legend>Allowed connections</legend>{connections}<p class="hint">None checked allows every connection.</p></fieldset>"#,
        name = input("key-name", "name", "Name", "text", "", " required"),
        models = input("key-models", "models", "Allowed models", "text", "", ""),
    );
    format!(
        r#"{secret}<section aria-labelledby="keys"><h2 id="keys">Keys</h2>
{table}</section>
<section aria-labelledby="create"><h2 id="create">Create a key</h2>
{create}</section>"#,
        table = table_html(
            "Client API keys",
            &[
                "Id",
                "Name",
                "Scopes",
                "Allowed models",
                "Allowed connections",
                "Created",
                "State",
                "Action"
            ],
            &rows,
            "No keys.",
        ),
        create = form(PAGE, csrf, "stack", &fields, "Create key"),
    )
}
