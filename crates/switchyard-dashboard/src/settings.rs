//! The settings page: every runtime setting with its value in force, where that value
//! comes from, its environment variable, default, accepted values and documentation; a
//! form per setting stores a value in the database layer, and a database value can be
//! reset (removed). Validation is `services::settings`', as for `PUT /api/settings`.

use crate::fields::{hidden, one, Fields};
use crate::html::{form, text, Nav};
use crate::web::{Dash, Posted, Routes, Signed, View};
use axum::extract::State;
use axum::response::Response;
use maud::{html, Markup};
use serde_json::Value;
use std::sync::Arc;
use switchyard_core::settings::SettingValue;
use switchyard_gateway::services;
use switchyard_gateway::services::settings::SettingView;

/// The page's path.
pub const PAGE: &str = "/dashboard/settings";

/// Pages whose setting forms post here, and where the answer goes back to.
const BACK_TO: [&str; 2] = [PAGE, "/dashboard/resilience"];

/// The settings page's routes.
pub fn routes() -> Routes {
    Routes::default()
        .page_and_form(PAGE, page, set)
        .form("/dashboard/settings/reset", reset)
}

/// `GET /dashboard/settings`.
async fn page(State(dash): State<Arc<Dash>>, Signed(session): Signed) -> Response {
    let list = services::settings::list(&dash.app);
    dash.render(
        &session,
        View::ok("Settings", Nav::Settings, render(&list, &session.csrf)),
    )
}

/// Where a setting form's answer goes: its `back` field when that is one of
/// [`BACK_TO`], else the settings page.
fn back(f: &Fields) -> &'static str {
    let asked = one(f, "back");
    BACK_TO
        .iter()
        .find(|p| **p == asked)
        .copied()
        .unwrap_or(PAGE)
}

/// `POST /dashboard/settings`: stores `value` for `key` in the database layer.
async fn set(State(dash): State<Arc<Dash>>, Posted(session, f): Posted<Fields>) -> Response {
    let key = one(&f, "key");
    let value = Value::String(one(&f, "value"));
    let outcome = services::settings::put(&dash.app, key.clone(), &value).await;
    dash.done(&session, back(&f), outcome, |_| format!("{key} saved."))
        .await
}

/// `POST /dashboard/settings/reset`: removes `key`'s database value.
async fn reset(State(dash): State<Arc<Dash>>, Posted(session, f): Posted<Fields>) -> Response {
    let key = one(&f, "key");
    let outcome = services::settings::delete(&dash.app, key.clone()).await;
    dash.done(&session, back(&f), outcome, |()| {
        format!("{key} reset: the database value is gone.")
    })
    .await
}

/// A setting's value as text.
fn value_text(v: &SettingValue) -> String {
    match v {
        SettingValue::Text(t) => t.clone(),
        other => other.to_json().to_string(),
    }
}

/// The table of `settings`, each row with its set form and, for a database value, its
/// reset form; the forms send their answer back to `back` (one of [`BACK_TO`]).
pub fn table(caption: &str, settings: &[&SettingView], csrf: &str, back: &str) -> Markup {
    let rows: Vec<Vec<Markup>> = settings
        .iter()
        .map(|s| {
            let id = format!("value-{}", s.key.replace('.', "-"));
            let keyed = html! { (hidden("key", &s.key)) (hidden("back", back)) };
            let set = form(
                PAGE,
                csrf,
                "inline",
                html! {
                    (keyed)
                    label for=(id) { "New value" }
                    " "
                    input type="text" id=(id) name="value";
                    " "
                },
                "Set",
            );
            let reset = (s.source == "database").then(|| {
                form(
                    "/dashboard/settings/reset",
                    csrf,
                    "inline",
                    keyed.clone(),
                    "Reset",
                )
            });
            vec![
                text(&s.key),
                text(value_text(&s.value)),
                text(&s.source),
                text(s.applies.as_str()),
                text(&s.env),
                text(value_text(&s.default)),
                text(&s.constraint),
                text(&s.doc),
                html! { (set) @if let Some(r) = reset { (r) } },
            ]
        })
        .collect();
    crate::html::table(
        caption,
        &[
            "Key",
            "Value",
            "Source",
            "Applies",
            "Environment variable",
            "Default",
            "Accepted values",
            "What it does",
            "Change",
        ],
        &rows,
        "No settings.",
    )
}

/// The page's `<main>` content.
pub fn render(list: &[SettingView], csrf: &str) -> Markup {
    let all: Vec<&SettingView> = list.iter().collect();
    html! {
        p.hint { "A value set here is stored in the database and overrides the environment, the config file and the default; Reset removes it. Applies says when a change takes effect: live (the next request), new_connections (client connections accepted after it) or restart." }
        (table("Runtime settings", &all, csrf, PAGE))
    }
}
