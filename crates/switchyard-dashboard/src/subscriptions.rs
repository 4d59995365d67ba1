//! The providers page's subscription sign-ins (SPEC R4): each OAuth connection's token
//! expiry, last refresh and state with a "Refresh now" button, and a form that imports
//! a CLI's credential file. Saved through `services::oauth`, as the API does; no token
//! is ever shown, and the file field is write-only.

use crate::fields::{input, non_blank, one, parse, state_label, Fields};
use crate::html::{form, table, text, utc};
use crate::web::{Dash, Empty, Posted, Routes};
use axum::extract::{Path, State};
use axum::response::Response;
use maud::{html, Markup};
use serde_json::json;
use std::sync::Arc;
use switchyard_gateway::services;
use switchyard_gateway::services::model::OauthRecord;

/// Where the actions come back to.
const PAGE: &str = "/dashboard/providers";

/// The CLIs whose files are imported.
const CLIS: [(&str, &str); 2] = [("claude", "Claude Code"), ("codex", "Codex CLI")];

/// The section's routes.
pub fn routes() -> Routes {
    Routes::default()
        .form("/dashboard/oauth/import", import)
        .form("/dashboard/oauth/{id}/refresh", refresh)
}

/// `POST /dashboard/oauth/import`.
async fn import(State(dash): State<Arc<Dash>>, Posted(session, f): Posted<Fields>) -> Response {
    let input = json!({
        "cli": one(&f, "cli"),
        "connection": one(&f, "connection").trim(),
        "provider": non_blank(&one(&f, "provider")),
        "file": one(&f, "file"),
        "token_url": non_blank(&one(&f, "token_url")),
    });
    let outcome = match parse::<services::oauth::GrantImport>(input) {
        Ok(i) => services::oauth::import(&dash.app, i).await,
        Err(e) => Err(e),
    };
    dash.done(&session, PAGE, outcome, |(c, created)| {
        let verb = if created {
            "created"
        } else {
            "given the new sign-in"
        };
        format!("Connection {} {verb}.", c.id)
    })
    .await
}

/// `POST /dashboard/oauth/{id}/refresh`.
async fn refresh(
    State(dash): State<Arc<Dash>>,
    Path(id): Path<String>,
    Posted(session, Empty {}): Posted<Empty>,
) -> Response {
    let outcome = services::oauth::refresh(&dash.app, id.clone()).await;
    dash.done(&session, PAGE, outcome, |_| {
        format!("Connection {id}'s token refreshed.")
    })
    .await
}

/// How long from `now` until `at` (or since), in words.
fn relative(at: u64, now: u64) -> String {
    // Rounded to the nearest unit: a token good for ten minutes reads "in 10 min" a
    // moment after its refresh.
    let words = |ms: u64| {
        let seconds = ms.saturating_add(500) / 1000;
        let minutes = ms.saturating_add(30_000) / 60_000;
        match seconds {
            0..90 => format!("{seconds} s"),
            90..7_200 => format!("{minutes} min"),
            _ => format!("{} h", minutes.saturating_add(30) / 60),
        }
    };
    if at >= now {
        format!("in {}", words(at - now))
    } else {
        format!("{} ago", words(now - at))
    }
}

/// The section: the OAuth connections, and the import form.
pub fn section(records: &[OauthRecord], providers: &[&str], now: u64, csrf: &str) -> Markup {
    let rows: Vec<Vec<Markup>> = records
        .iter()
        .map(|r| {
            let state = r.state(now);
            vec![
                text(&r.connection_id),
                text(&r.issuer),
                text(r.expires_at.map_or_else(
                    || "unknown".to_owned(),
                    |t| format!("{} ({})", utc(t), relative(t, now)),
                )),
                text(r.last_refresh_at.map_or_else(
                    || "not yet (imported)".to_owned(),
                    |t| format!("{} ({})", utc(t), relative(t, now)),
                )),
                html! {
                    (state_label(state))
                    @if r.failures > 0 { " " (r.failures) " failed" }
                    @if let (Some(t), "cooling") = (r.retry_at, state) { ", next try " (relative(t, now)) }
                },
                text(r.last_error.as_deref().unwrap_or("—")),
                form(
                    &format!("/dashboard/oauth/{}/refresh", r.connection_id),
                    csrf,
                    "inline",
                    html! {},
                    "Refresh now",
                ),
            ]
        })
        .collect();
    html! {
        section aria-labelledby="subscriptions" {
            h2 id="subscriptions" { "Subscription sign-ins" }
            p.hint { "OAuth connections imported from the Codex CLI or Claude Code. The gateway refreshes each token before it expires and after a 401; three failed refreshes in a row make the connection expired until a refresh succeeds or a new sign-in is imported." }
            (table(
                "Subscription sign-ins (tokens are never shown)",
                &["Connection", "CLI", "Access token expires", "Last refresh", "State", "Last error", "Actions"],
                &rows,
                "No subscription sign-ins.",
            ))
            h3 id="import-sign-in" { "Import a sign-in" }
            (form("/dashboard/oauth/import", csrf, "stack", import_fields(providers), "Import"))
            p.hint { "The CLI's own copy stops working once the gateway refreshes the token (the refresh token rotates): sign the CLI in again if you still use it there." }
        }
    }
}

fn import_fields(providers: &[&str]) -> Markup {
    html! {
        label for="import-cli" { "Whose file" }
        select id="import-cli" name="cli" {
            @for (value, label) in CLIS { option value=(value) { (label) } }
        }
        (input("import-connection", "connection", "Connection (created, or given the new sign-in)", "text", "", true))
        label for="import-provider" { "Provider of a new connection" }
        select id="import-provider" name="provider" {
            option value="" { "(keep the connection's)" }
            @for p in providers { option value=(p) { (p) } }
        }
        label for="import-file" { "The file's content" }
        p.hint { "Claude Code: ~/.claude/.credentials.json. Codex CLI: ~/.codex/auth.json." }
        textarea id="import-file" name="file" rows="4" autocomplete="off" spellcheck="false" required {}
        p.hint { "Write-only: the tokens are stored encrypted and never shown again." }
        (input("import-token-url", "token_url", "Token endpoint (empty = the CLI's own)", "url", "", false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_told_relative_to_now() {
        let now = 100_000_000;
        assert_eq!(relative(now + 45_000, now), "in 45 s");
        assert_eq!(relative(now + 5 * 60_000, now), "in 5 min");
        assert_eq!(relative(now - 3 * 3_600_000, now), "3 h ago");
        assert_eq!(relative(now + 599_900, now), "in 10 min");
        assert_eq!(relative(now - 89_400, now), "89 s ago");
    }

    #[test]
    fn the_section_shows_state_and_never_a_form_value() {
        let r = OauthRecord {
            connection_id: "sub".into(),
            issuer: "claude".into(),
            expires_at: Some(10_000_000 + 600_000),
            last_refresh_at: None,
            failures: 1,
            retry_at: Some(10_000_000 + 30_000),
            last_error: Some("HTTP 400: invalid_grant".into()),
        };
        let page = section(&[r], &["plan"], 10_000_000, "csrf").into_string();
        assert!(page.contains("in 10 min"), "{page}");
        assert!(page.contains("not yet (imported)"));
        assert!(
            page.contains(
                r#"<span class="state state-cooling">cooling</span> 1 failed, next try in 30 s"#
            ),
            "{page}"
        );
        assert!(page.contains("/dashboard/oauth/sub/refresh"));
        assert!(page.contains(r#"<textarea id="import-file" name="file""#));
    }
}
