//! Switchyard's dashboard: server-rendered HTML pages under `/dashboard`, merged into
//! the gateway's router by the `switchyard` binary (the gateway cannot depend on this
//! crate). Every page reads and writes through the gateway's `services`, as the JSON
//! management API does; nothing here decides anything of its own.
//!
//! Sign-in takes the admin token or an admin-scoped key, checked exactly as the
//! management API checks its credential, and opens a session: an `HttpOnly`,
//! `SameSite=Strict` cookie holding a random 256-bit id, valid for eight hours. Every
//! other page needs a live session (without one, a `GET` is sent to sign-in and
//! anything else is refused with `403`), and every form carries the session's CSRF
//! token (`web::Posted` checks it). A one-time link
//! (`/dashboard/sign-in/once?t=…`, see [`OneTimeLinks`]) opens the same session once,
//! for the binary's banner. Sign-in attempts are throttled per client address and
//! globally (`429` with `Retry-After`; the one-time link is exempt). Pages are maud
//! markup, escaped by the type; credentials are never rendered. Assets (the stylesheet, the
//! vendored htmx that refreshes live regions) are embedded and served under
//! content-hashed names.

mod assets;
mod charts;
mod combos;
mod fields;
mod forms;
mod html;
mod keys;
mod once;
mod overview;
mod plans;
mod providers;
mod quota_share;
mod requests;
mod resilience;
mod session;
mod sessions;
mod settings;
mod subscriptions;
mod throttle;
mod web;

/// The pure renderers the `render` benchmark measures; not part of the crate's API.
#[doc(hidden)]
pub mod bench_api {
    pub use crate::overview::{render as overview, Overview};
    pub use crate::quota_share::{render_list as quota_share, Choice, CreateForm};
    pub use crate::requests::{render as requests, Choices, Filters};
}

use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, RETRY_AFTER, SET_COOKIE,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::map_response;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{any, get};
use axum::{Extension, Form, Router};
use maud::html;
use serde::Deserialize;
use session::{Sessions, SESSION_TTL_SECS};
use std::net::SocketAddr;
use std::sync::Arc;
use switchyard_core::apikey::KeyHash;
use switchyard_gateway::error::ApiError;
use switchyard_gateway::pipeline::auth;
use switchyard_gateway::state::AppState;
use throttle::{Client, Throttle};
use web::{see_other, Dash, Empty, Posted, Routes, Signed, SIGN_IN};

pub use once::OneTimeLinks;

/// The session cookie's name.
const COOKIE_NAME: &str = "sy_session";

/// The dashboard's routes, all under `/dashboard`, with no fallback of their own (the
/// gateway's answers paths outside them). `/dashboard/` is sent to `/dashboard` (a
/// `308`), and every answer under `/dashboard`, an unknown path's included, carries
/// the dashboard's security headers.
pub fn routes(state: Arc<AppState>) -> Router {
    dashboard(state).router
}

/// The dashboard's routes and the handle that mints one-time sign-in links for them.
#[derive(Debug)]
pub struct Dashboard {
    pub router: Router,
    pub links: OneTimeLinks,
}

/// The dashboard's routes (as [`routes`]) with their one-time sign-in links.
pub fn dashboard(state: Arc<AppState>) -> Dashboard {
    let links = OneTimeLinks {
        links: Arc::new(once::Links::new(Arc::clone(&state))),
        clock: Arc::clone(&state.clock),
    };
    let sessions = Sessions::new(Arc::clone(&state));
    let (css, js) = (assets::css(), assets::htmx());
    let layout = html::Layout {
        css: css.path.clone(),
        js: js.path.clone(),
    };
    let dash = Arc::new(Dash {
        app: state,
        sessions,
        links: Arc::clone(&links.links),
        throttle: Throttle::default(),
        layout,
    });
    let router = table(css, js)
        .router
        .layer(map_response(security_headers))
        .with_state(dash);
    Dashboard { router, links }
}

/// The dashboard's route table, which [`dashboard`] builds its router from.
fn table(css: assets::Asset, js: assets::Asset) -> Routes {
    let (css_path, js_path) = (css.path.clone(), js.path.clone());
    Routes::default()
        .page("/dashboard", overview::page)
        .other(
            "/dashboard/",
            any(|| async { Redirect::permanent("/dashboard") }),
        )
        .other(SIGN_IN, get(sign_in_form).post(sign_in).fallback(unknown))
        .page(once::ONCE_PATH, sign_in_once)
        .form("/dashboard/sign-out", sign_out)
        .page(&css_path, move || asset(css))
        .page(&js_path, move || asset(js))
        .other("/dashboard/{*rest}", any(unknown))
        .merge(quota_share::routes())
        .merge(plans::routes())
        .merge(resilience::routes())
        .merge(keys::routes())
        .merge(settings::routes())
        .merge(providers::routes())
        .merge(subscriptions::routes())
        .merge(combos::routes())
        .merge(sessions::routes())
        .merge(requests::routes())
}

/// The paths whose `POST` is a signed-in form (each refused without its session's CSRF
/// token), from the table the router is built from; for tests, not part of the API.
#[doc(hidden)]
pub fn post_routes() -> Vec<&'static str> {
    table(assets::css(), assets::htmx()).forms
}

/// The content security policy of every dashboard response: only the dashboard's own
/// assets, no inline script or style, forms post only here, no framing.
const CSP: &str = "default-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The headers every dashboard response carries; `Cache-Control: no-store` unless the
/// response set its own (the assets).
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers
        .entry(CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// `GET` of a content-hashed asset: cacheable for good, as its name changes with its
/// content. Public, like the sign-in page that uses it.
async fn asset(a: assets::Asset) -> Response {
    (
        [
            (CONTENT_TYPE, a.content_type),
            (CACHE_CONTROL, "public, max-age=31536000, immutable"),
        ],
        a.body,
    )
        .into_response()
}

/// Whether the request reached the gateway over HTTPS, as a reverse proxy in front of
/// it reports (`X-Forwarded-Proto` or `Forwarded: proto=https`).
fn over_https(headers: &HeaderMap) -> bool {
    let says_https = |name: &str, find: fn(&str) -> bool| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(find)
    };
    says_https("x-forwarded-proto", |v| {
        v.split(',')
            .next()
            .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"))
    }) || says_https("forwarded", |v| {
        v.split([';', ','])
            .any(|p| p.trim().eq_ignore_ascii_case("proto=https"))
    })
}

/// The session cookie for `id`, `Secure` when the browser reached us over HTTPS.
fn session_cookie(id: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{COOKIE_NAME}={id}; HttpOnly; SameSite=Strict; Path=/dashboard; Max-Age={SESSION_TTL_SECS}{secure}"
    )
}

impl Dash {
    /// Opens a session for `credential` (already checked) and sends the browser to the
    /// overview with its cookie.
    async fn open_session(&self, headers: &HeaderMap, credential: KeyHash) -> Response {
        let (id, _) = match self.sessions.create(self.now(), credential).await {
            Ok(opened) => opened,
            Err(e) => return self.unavailable(&e),
        };
        let mut r = see_other("/dashboard");
        if let Ok(v) = HeaderValue::from_str(&session_cookie(&id, over_https(headers))) {
            r.headers_mut().insert(SET_COOKIE, v);
        }
        r
    }

    fn sign_in_page(&self, status: StatusCode, error: Option<&str>) -> Response {
        let main = html! {
            @if let Some(e) = error { (html::error_notice(Some("sign-in-error"), e)) }
            form.sign-in method="post" action=(SIGN_IN) {
                label for="token" { "Admin token or admin-scoped key" }
                input type="password" id="token" name="token" autocomplete="current-password" required autofocus;
                button type="submit" { "Sign in" }
            }
        };
        self.public(status, "Sign in", main)
    }
}

/// `GET /dashboard/sign-in`.
async fn sign_in_form(State(dash): State<Arc<Dash>>) -> Response {
    dash.sign_in_page(StatusCode::OK, None)
}

/// The sign-in form's fields.
#[derive(Debug, Deserialize)]
struct SignIn {
    #[serde(default)]
    token: String,
}

/// `POST /dashboard/sign-in`: the admin token or an admin-scoped key opens a session.
/// Attempts are throttled per client address and globally (see `throttle`): past the
/// limit the answer is `429` with `Retry-After`, whatever the token.
async fn sign_in(
    State(dash): State<Arc<Dash>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    form: Result<Form<SignIn>, FormRejection>,
) -> Response {
    let client = Client::of(peer.map(|Extension(ConnectInfo(addr))| addr.ip()));
    if let Err(wait) = dash.throttle.attempt(client) {
        let mut r = dash.sign_in_page(
            StatusCode::TOO_MANY_REQUESTS,
            Some(&format!(
                "Too many sign-in attempts. Try again in {wait} s."
            )),
        );
        r.headers_mut().insert(RETRY_AFTER, HeaderValue::from(wait));
        return r;
    }
    let token = form.map(|Form(f)| f.token).unwrap_or_default();
    let credential = KeyHash::of(token.trim());
    match auth::check_admin_hash(&dash.app.config, &credential) {
        Ok(()) => dash.open_session(&headers, credential).await,
        Err(ApiError::AdminScopeMissing) => dash.sign_in_page(
            StatusCode::UNAUTHORIZED,
            Some("This key is valid but does not have the admin scope."),
        ),
        Err(_) => dash.sign_in_page(
            StatusCode::UNAUTHORIZED,
            Some("That is neither the admin token nor an admin-scoped key."),
        ),
    }
}

/// The query of a one-time link.
#[derive(Debug, Default, Deserialize)]
struct Once {
    #[serde(default)]
    t: String,
}

/// `GET /dashboard/sign-in/once?t=…`: a live one-time link opens a session, as sign-in
/// does, and is used up; any other token gets the sign-in page with an error.
/// The session is the admin token's: it ends when the token changes.
async fn sign_in_once(
    State(dash): State<Arc<Dash>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let token = serde_urlencoded::from_str::<Once>(query.as_deref().unwrap_or_default())
        .unwrap_or_default()
        .t;
    let admin = auth::admin_hash(&dash.app.config);
    let live = match dash.links.consume(&token, dash.now()).await {
        Ok(live) => live,
        Err(e) => return dash.unavailable(&e),
    };
    if let Some(admin) = admin.filter(|_| live) {
        dash.open_session(&headers, admin).await
    } else {
        dash.sign_in_page(
            StatusCode::UNAUTHORIZED,
            Some("This sign-in link has already been used, has expired or is unknown. Sign in with the admin token."),
        )
    }
}

/// `POST /dashboard/sign-out`: ends the session and clears its cookie.
async fn sign_out(
    State(dash): State<Arc<Dash>>,
    Posted(session, Empty {}): Posted<Empty>,
) -> Response {
    if let Err(e) = dash.sessions.remove(&session.id).await {
        return dash.unavailable(&e);
    }
    let mut r = see_other(SIGN_IN);
    r.headers_mut().insert(
        SET_COOKIE,
        HeaderValue::from_static(
            "sy_session=; HttpOnly; SameSite=Strict; Path=/dashboard; Max-Age=0",
        ),
    );
    r
}

/// Any other path under `/dashboard/`, or another method on a dashboard path: signed
/// out, a `GET` goes to sign-in and anything else is `403`; signed in, `404`.
async fn unknown(State(dash): State<Arc<Dash>>, Signed(session): Signed) -> Response {
    dash.render(
        &session,
        web::View {
            status: StatusCode::NOT_FOUND,
            title: "Not found",
            nav: html::Nav::None,
            main: html! {
                p {
                    "There is no such dashboard page. "
                    a href="/dashboard" { "Back to the overview" }
                    "."
                }
            },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn https_is_what_the_proxy_says() {
        assert!(!over_https(&headers(&[])));
        assert!(over_https(&headers(&[("x-forwarded-proto", "https")])));
        assert!(over_https(&headers(&[(
            "x-forwarded-proto",
            "HTTPS, http"
        )])));
        assert!(!over_https(&headers(&[(
            "x-forwarded-proto",
            "http, https"
        )])));
        assert!(over_https(&headers(&[(
            "forwarded",
            "for=1.2.3.4;proto=https"
        )])));
        assert!(!over_https(&headers(&[("forwarded", "proto=http")])));
    }

    #[test]
    fn the_cookie_is_secure_over_https_only() {
        assert_eq!(
            session_cookie("abc", false),
            "sy_session=abc; HttpOnly; SameSite=Strict; Path=/dashboard; Max-Age=28800"
        );
        assert_eq!(
            session_cookie("abc", true),
            "sy_session=abc; HttpOnly; SameSite=Strict; Path=/dashboard; Max-Age=28800; Secure"
        );
    }
}
