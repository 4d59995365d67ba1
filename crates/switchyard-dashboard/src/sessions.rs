//! The sessions page (SPEC R15, R16, D4): each live session pin — the client key, the
//! connection it keeps to, how old it is, when it was last followed and when it lapses —
//! and each active exclusive lease — its key, connection, generation, age and expiry —
//! each with a release button. A session shows by the first characters of its pin key
//! (a hash of the key id and session id), a lease by those of its owner's hash, never
//! by what the client sent.

use crate::html::{confirm_form, table, text, Nav};
use crate::quota_share::duration;
use crate::web::{Dash, Empty, Posted, Routes, Signed, View};
use axum::extract::{Path, State};
use axum::response::Response;
use maud::{html, Markup};
use std::sync::Arc;
use switchyard_gateway::services::leases::{self, LeaseView};
use switchyard_gateway::services::sessions::{self, SessionView};

/// The page's path.
const PAGE: &str = "/dashboard/sessions";

/// How many characters of a pin key the page shows.
const SHOWN: usize = 12;

/// The page's routes.
pub fn routes() -> Routes {
    Routes::default()
        .page(PAGE, page)
        .form("/dashboard/sessions/{session}/release", release)
        .form("/dashboard/sessions/leases/{owner}/release", release_lease)
}

/// `GET /dashboard/sessions`.
async fn page(State(dash): State<Arc<Dash>>, Signed(session): Signed) -> Response {
    let pins = sessions::sessions(&dash.app);
    let ttl = dash.app.snapshot().settings.session_affinity_ttl_ms;
    let now = dash.app.clock.now_ms();
    let held = leases::list(&dash.app);
    let main = render(&pins, &held, ttl, now, &session.csrf);
    dash.render(&session, View::ok("Sessions", Nav::Sessions, main))
}

/// `POST /dashboard/sessions/{session}/release`.
async fn release(
    State(dash): State<Arc<Dash>>,
    Path(pin): Path<String>,
    Posted(session, Empty {}): Posted<Empty>,
) -> Response {
    let outcome = sessions::release(&dash.app, &pin);
    dash.done(&session, PAGE, outcome, |()| {
        format!("Session {} released.", short(&pin))
    })
    .await
}

/// `POST /dashboard/sessions/leases/{owner}/release`.
async fn release_lease(
    State(dash): State<Arc<Dash>>,
    Path(owner): Path<String>,
    Posted(session, Empty {}): Posted<Empty>,
) -> Response {
    let outcome = leases::release(&dash.app, &owner).await;
    dash.done(&session, PAGE, outcome, |()| {
        format!("Lease {} released.", short(&owner))
    })
    .await
}

fn short(pin: &str) -> &str {
    pin.get(..SHOWN).unwrap_or(pin)
}

/// The page's `<main>` content.
pub fn render(
    pins: &[SessionView],
    held: &[LeaseView],
    ttl_ms: u64,
    now: u64,
    csrf: &str,
) -> Markup {
    let rows: Vec<Vec<Markup>> = pins
        .iter()
        .map(|p| {
            vec![
                text(short(&p.session)),
                text(&p.key_id),
                text(&p.connection),
                text(duration(now.saturating_sub(p.created_at))),
                text(format!(
                    "{} ago",
                    duration(now.saturating_sub(p.last_used_at))
                )),
                text(duration(p.expires_at.saturating_sub(now))),
                confirm_form(
                    &format!("/dashboard/sessions/{}/release", p.session),
                    csrf,
                    &format!("Release {}…", short(&p.session)),
                    &format!("Release session {}", short(&p.session)),
                ),
            ]
        })
        .collect();
    let empty = if ttl_ms == 0 {
        "Session affinity is off (sessionAffinityTtlMs is 0).".to_owned()
    } else {
        "No pinned sessions.".to_owned()
    };
    html! {
        section aria-labelledby="pins" {
            h2 id="pins" { "Pinned sessions" }
            p.hint {
                "An agent's session keeps to the connection that served it for "
                (duration(ttl_ms)) " after its last request (" code { "sessionAffinityTtlMs" }
                "), unless that connection is excluded; released, its next request is routed afresh."
            }
            (table(
                "Pinned sessions, most recently used first",
                &["Session", "Key", "Connection", "Age", "Last used", "Lapses in", "Actions"],
                &rows,
                &empty,
            ))
        }
        (render_leases(held, now, csrf))
    }
}

/// The leases section.
fn render_leases(held: &[LeaseView], now: u64, csrf: &str) -> Markup {
    let rows: Vec<Vec<Markup>> = held
        .iter()
        .map(|l| {
            vec![
                text(short(&l.owner_hash)),
                text(&l.key_id),
                text(&l.connection_id),
                text(l.generation.to_string()),
                text(duration(now.saturating_sub(l.acquired_at))),
                text(duration(l.expires_at.saturating_sub(now))),
                confirm_form(
                    &format!("/dashboard/sessions/leases/{}/release", l.owner_hash),
                    csrf,
                    &format!("Release lease {}…", short(&l.owner_hash)),
                    &format!("Release lease {}", short(&l.owner_hash)),
                ),
            ]
        })
        .collect();
    html! {
        section aria-labelledby="leases" {
            h2 id="leases" { "Exclusive leases" }
            p.hint {
                "A key with the " code { "lease:exclusive" } " scope and a list of allowed connections may lease one of them ("
                code { "POST /api/v1/session-leases" } "); while the lease lives, no other request uses that connection. Released, the connection is free at once."
            }
            (table(
                "Active exclusive leases, most recently acquired first",
                &["Owner", "Key", "Connection", "Generation", "Age", "Expires in", "Actions"],
                &rows,
                "No active leases.",
            ))
        }
    }
}
