//! Switchyard's dashboard: server-rendered HTML pages under `/dashboard`, merged into
//! the gateway's router by the `switchyard` binary (the gateway cannot depend on this
//! crate). Every page reads through the gateway's `services`, as the JSON management
//! API does; nothing here decides anything of its own.
//!
//! Sign-in takes the admin token or an admin-scoped key, checked exactly as the
//! management API checks its credential, and opens a session: an `HttpOnly`,
//! `SameSite=Strict` cookie holding a random 256-bit id, valid for eight hours. Every
//! other page needs a live session (without one, a `GET` is sent to sign-in and
//! anything else is refused with `403`), and every form carries the session's CSRF
//! token. Pages are rendered with `format!` and [`html::escape`]; credentials are never
//! rendered. The stylesheet is embedded and served under a content-hashed name.

mod assets;
mod html;
mod overview;
mod session;

use axum::extract::rejection::FormRejection;
use axum::extract::State;
use axum::http::header::{
    AUTHORIZATION, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, COOKIE, LOCATION,
    SET_COOKIE, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::map_response;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Form, Router};
use serde::Deserialize;
use session::{csrf_matches, Sessions, SESSION_TTL_SECS};
use std::sync::Arc;
use switchyard_gateway::error::ApiError;
use switchyard_gateway::pipeline::auth;
use switchyard_gateway::services;
use switchyard_gateway::state::AppState;

/// The session cookie's name.
const COOKIE_NAME: &str = "sy_session";

/// Where signed-out visitors are sent.
const SIGN_IN: &str = "/dashboard/sign-in";

/// The dashboard's state: the gateway's, the sessions and the stylesheet's path.
#[derive(Debug)]
struct Dash {
    app: Arc<AppState>,
    sessions: Sessions,
    css: String,
}

/// A live session: its id and its CSRF token.
#[derive(Debug)]
struct Session {
    id: String,
    csrf: String,
}

impl Dash {
    fn now(&self) -> u64 {
        self.app.clock.now_ms()
    }

    /// The live session the request's cookie names.
    fn session(&self, headers: &HeaderMap) -> Option<Session> {
        let id = session_cookie(headers)?;
        let csrf = self.sessions.csrf(id, self.now())?;
        Some(Session {
            id: id.to_owned(),
            csrf,
        })
    }

    /// A page with `status`, titled `title`, around `main`.
    fn page(&self, status: StatusCode, title: &str, csrf: Option<&str>, main: &str) -> Response {
        let body = html::page(title, &self.css, csrf, main);
        (status, [(CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
    }

    fn forbidden(&self) -> Response {
        self.page(
            StatusCode::FORBIDDEN,
            "Forbidden",
            None,
            r#"<p>This action needs a signed-in session and its form token. <a href="/dashboard/sign-in">Sign in</a> and try again.</p>"#,
        )
    }

    fn sign_in_page(&self, status: StatusCode, error: Option<&str>) -> Response {
        let error = error.map_or_else(String::new, |e| {
            format!(
                r#"<p class="error" role="alert" id="sign-in-error">Error: {}</p>"#,
                html::escape(e)
            )
        });
        let main = format!(
            r#"{error}<form class="sign-in" method="post" action="/dashboard/sign-in">
<label for="token">Admin token or admin-scoped key</label>
<input type="password" id="token" name="token" autocomplete="current-password" required autofocus>
<button type="submit">Sign in</button>
</form>"#
        );
        self.page(status, "Sign in", None, &main)
    }
}

/// The value of the `sy_session` cookie, if the request sends one.
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix("sy_session="))
        .filter(|v| !v.is_empty())
}

/// A `303 See Other` to `to`.
fn see_other(to: &'static str) -> Response {
    (StatusCode::SEE_OTHER, [(LOCATION, to)]).into_response()
}

/// The dashboard's routes, all under `/dashboard`, with no fallback of their own (the
/// gateway's answers paths outside them).
pub fn routes(state: Arc<AppState>) -> Router {
    let css = assets::css_path();
    let dash = Arc::new(Dash {
        app: state,
        sessions: Sessions::default(),
        css: css.clone(),
    });
    Router::new()
        .route("/dashboard", get(overview).fallback(unknown))
        .route(SIGN_IN, get(sign_in_form).post(sign_in).fallback(unknown))
        .route("/dashboard/sign-out", post(sign_out).fallback(unknown))
        .route(&css, get(stylesheet).fallback(unknown))
        .route("/dashboard/{*rest}", any(unknown))
        .layer(map_response(security_headers))
        .with_state(dash)
}

/// The headers every dashboard response carries; `Cache-Control: no-store` unless the
/// response set its own (the stylesheet).
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'self'"),
    );
    headers
        .entry(CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
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
async fn sign_in(
    State(dash): State<Arc<Dash>>,
    form: Result<Form<SignIn>, FormRejection>,
) -> Response {
    let token = form.map(|Form(f)| f.token).unwrap_or_default();
    let mut headers = HeaderMap::new();
    let checked = match HeaderValue::from_str(&format!("Bearer {}", token.trim())) {
        Ok(v) => {
            headers.insert(AUTHORIZATION, v);
            auth::check_admin(&dash.app.config, &headers)
        }
        Err(_) => Err(ApiError::AdminRequired),
    };
    match checked {
        Ok(()) => {
            let (id, _) = dash.sessions.create(dash.now());
            let cookie = format!(
                "{COOKIE_NAME}={id}; HttpOnly; SameSite=Strict; Path=/dashboard; Max-Age={SESSION_TTL_SECS}"
            );
            let mut r = see_other("/dashboard");
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                r.headers_mut().insert(SET_COOKIE, v);
            }
            r
        }
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

/// A form's CSRF field.
#[derive(Debug, Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /dashboard/sign-out`: ends the session and clears its cookie.
async fn sign_out(
    State(dash): State<Arc<Dash>>,
    headers: HeaderMap,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Response {
    let presented = form.map(|Form(f)| f.csrf).unwrap_or_default();
    let Some(session) = dash.session(&headers) else {
        return dash.forbidden();
    };
    if !csrf_matches(&session.csrf, &presented) {
        return dash.forbidden();
    }
    dash.sessions.remove(&session.id);
    let mut r = see_other(SIGN_IN);
    r.headers_mut().insert(
        SET_COOKIE,
        HeaderValue::from_static(
            "sy_session=; HttpOnly; SameSite=Strict; Path=/dashboard; Max-Age=0",
        ),
    );
    r
}

/// `GET /dashboard`: the overview.
async fn overview(State(dash): State<Arc<Dash>>, headers: HeaderMap) -> Response {
    let Some(session) = dash.session(&headers) else {
        return see_other(SIGN_IN);
    };
    match gather(&dash.app).await {
        Ok(o) => dash.page(
            StatusCode::OK,
            "Overview",
            Some(&session.csrf),
            &overview::render(&o),
        ),
        Err(e) => dash.page(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Overview",
            Some(&session.csrf),
            &format!(
                r#"<p class="error" role="alert">Error: the overview could not be read: {}</p>"#,
                html::escape(&e.to_string())
            ),
        ),
    }
}

/// The overview's data, from the services the management API uses.
async fn gather(app: &AppState) -> Result<overview::Overview, ApiError> {
    Ok(overview::Overview {
        health: services::system::health(app),
        providers: services::config::providers(app).await?,
        connections: services::resilience::cooldowns(app, None),
        pools: services::quota::pools(app).await?,
        keys: services::keys::list(app).await?,
        logs: services::logs::recent(
            app,
            services::logs::LogFilter {
                limit: Some(overview::LOG_ROWS),
                key_id: None,
            },
        )
        .await?,
    })
}

/// `GET` of the content-hashed stylesheet: cacheable for good, as its name changes
/// with its content. Public, like the sign-in page that uses it.
async fn stylesheet() -> Response {
    (
        [
            (CONTENT_TYPE, "text/css; charset=utf-8"),
            (CACHE_CONTROL, "public, max-age=31536000, immutable"),
        ],
        assets::CSS,
    )
        .into_response()
}

/// Any other path under `/dashboard/`, or another method on a dashboard path: signed
/// out, a `GET` goes to sign-in and anything else is `403`; signed in, `404`.
async fn unknown(State(dash): State<Arc<Dash>>, method: Method, headers: HeaderMap) -> Response {
    match dash.session(&headers) {
        None if method == Method::GET => see_other(SIGN_IN),
        None => dash.forbidden(),
        Some(session) => dash.page(
            StatusCode::NOT_FOUND,
            "Not found",
            Some(&session.csrf),
            r#"<p>There is no such dashboard page. <a href="/dashboard">Back to the overview</a>.</p>"#,
        ),
    }
}
