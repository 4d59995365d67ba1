//! The dashboard's request plumbing: its state, the signed-in extractors every page
//! uses, and the responses they share. A page handler takes [`Signed`] (a `GET`) or
//! [`Posted`] (a form), calls the gateway's `services`, and answers with
//! [`Dash::render`] or [`Dash::done`]; it never checks sessions or CSRF tokens itself.

use crate::html::{error_notice, Layout, Nav, Notice, Page};
use crate::session::{csrf_matches, Sessions};
use crate::throttle::Throttle;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::handler::Handler;
use axum::http::header::{CONTENT_TYPE, COOKIE, LOCATION};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{self, MethodRouter};
use axum::Router;
use maud::{html, Markup};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::sync::Arc;
use switchyard_gateway::error::ApiError;
use switchyard_gateway::pipeline::auth;
use switchyard_gateway::state::AppState;

/// Where signed-out visitors are sent.
pub const SIGN_IN: &str = "/dashboard/sign-in";

/// Largest form body accepted, in bytes.
const FORM_LIMIT: usize = 64 * 1024;

/// The header htmx requests carry the CSRF token in (`hx-headers` on `<body>`).
const CSRF_HEADER: &str = "x-csrf-token";

/// The header htmx sets on its own requests.
const HX_REQUEST: &str = "hx-request";

/// The dashboard's state: the gateway's, the sessions, the sign-in throttle and the
/// page layout.
#[derive(Debug)]
pub struct Dash {
    pub app: Arc<AppState>,
    pub sessions: Sessions,
    /// The one-time sign-in links.
    pub links: Arc<crate::once::Links>,
    pub throttle: Throttle,
    pub layout: Layout,
}

/// A live session: its id and its CSRF token, and whether this request is htmx's
/// refresh of a live region.
#[derive(Debug)]
pub struct Session {
    pub id: String,
    pub csrf: String,
    /// The notice an earlier action left for this page (taken for full pages only: a
    /// live region's refresh would drop it).
    pub notice: Option<Notice>,
}

/// The dashboard's route table: its router, and the paths whose `POST` is a signed-in
/// form (checked by [`Posted`]), so that tests can reach every form from the table the
/// router is built from. Every route answers other methods as an unknown page.
#[derive(Debug, Default)]
pub struct Routes {
    pub router: Router<Arc<Dash>>,
    pub forms: Vec<&'static str>,
}

impl Routes {
    fn add(mut self, path: &str, method: MethodRouter<Arc<Dash>>) -> Self {
        self.router = self.router.route(path, method.fallback(crate::unknown));
        self
    }

    /// A page: `GET path`.
    pub fn page<H: Handler<T, Arc<Dash>>, T: 'static>(self, path: &str, get: H) -> Self {
        self.add(path, routing::get(get))
    }

    /// A signed-in form's action: `POST path`.
    pub fn form<H: Handler<T, Arc<Dash>>, T: 'static>(
        mut self,
        path: &'static str,
        post: H,
    ) -> Self {
        self.forms.push(path);
        self.add(path, routing::post(post))
    }

    /// A page whose own form posts back to it: `GET path` and `POST path`.
    pub fn page_and_form<G, Tg, P, Tp>(mut self, path: &'static str, get: G, post: P) -> Self
    where
        G: Handler<Tg, Arc<Dash>>,
        P: Handler<Tp, Arc<Dash>>,
        Tg: 'static,
        Tp: 'static,
    {
        self.forms.push(path);
        self.add(path, routing::get(get).post(post))
    }

    /// A route outside the table's forms, as given (sign-in, which opens the session
    /// the forms need; the paths that answer every method).
    pub fn other(mut self, path: &str, method: MethodRouter<Arc<Dash>>) -> Self {
        self.router = self.router.route(path, method);
        self
    }

    pub fn merge(mut self, other: Routes) -> Self {
        self.router = self.router.merge(other.router);
        self.forms.extend(other.forms);
        self
    }
}

/// A rendered page's parts, for [`Dash::render`].
#[derive(Debug)]
pub struct View<'a> {
    pub status: StatusCode,
    pub title: &'a str,
    pub nav: Nav,
    pub main: Markup,
}

impl<'a> View<'a> {
    /// A `200 OK` page.
    pub fn ok(title: &'a str, nav: Nav, main: Markup) -> Self {
        Self {
            status: StatusCode::OK,
            title,
            nav,
            main,
        }
    }
}

impl Dash {
    pub fn now(&self) -> u64 {
        self.app.clock.now_ms()
    }

    /// The live session the request's cookie names, while the credential it was opened
    /// with is still the admin token or a live admin-scoped key (a session whose
    /// credential was revoked or replaced is ended here).
    /// A page (`GET`) takes the notice left for it; a form post leaves it for the page
    /// it leads to. The store failing is an error (503 when it is unreachable).
    pub async fn session(
        &self,
        headers: &HeaderMap,
        page: bool,
    ) -> Result<Option<Session>, ApiError> {
        let Some(id) = session_cookie(headers) else {
            return Ok(None);
        };
        let htmx = headers.contains_key(HX_REQUEST);
        let Some(stored) = self.sessions.get(id, self.now(), page && !htmx).await? else {
            return Ok(None);
        };
        if auth::check_admin_hash(&self.app.config, &stored.credential).is_err() {
            self.sessions.remove(id).await?;
            return Ok(None);
        }
        Ok(Some(Session {
            id: id.to_owned(),
            csrf: stored.csrf,
            notice: stored.notice,
        }))
    }

    /// A signed-in page, with the notice an earlier action left for it (kept for the
    /// next full page when this is a live region's refresh, which would drop it).
    pub fn render(&self, session: &Session, view: View<'_>) -> Response {
        html_response(
            view.status,
            self.layout.page(&Page {
                title: view.title,
                nav: view.nav,
                csrf: Some(&session.csrf),
                notice: session.notice.as_ref(),
                main: view.main,
            }),
        )
    }

    /// A signed-in page saying `error` could not be read, with the error's status.
    pub fn failed(&self, session: &Session, title: &str, nav: Nav, error: &ApiError) -> Response {
        self.render(
            session,
            View {
                status: error.parts().0,
                title,
                nav,
                main: error_notice(None, &error.to_string()),
            },
        )
    }

    /// A page for a signed-out visitor.
    pub fn public(&self, status: StatusCode, title: &str, main: Markup) -> Response {
        html_response(
            status,
            self.layout.page(&Page {
                title,
                nav: Nav::None,
                csrf: None,
                notice: None,
                main,
            }),
        )
    }

    /// The answer to an action: back to `to` (a `303`), where `notice` is shown once.
    /// An error's notice is the same message the management API gives.
    pub async fn done<T>(
        &self,
        session: &Session,
        to: &str,
        outcome: Result<T, ApiError>,
        ok: impl FnOnce(T) -> String,
    ) -> Response {
        let notice = match outcome {
            Ok(v) => Notice::Done(ok(v)),
            Err(e) => Notice::Failed(e.to_string()),
        };
        if let Err(e) = self.sessions.set_notice(&session.id, &notice).await {
            tracing::warn!(error = %e, "Could not keep a dashboard notice; the action itself is done.");
        }
        see_other(to)
    }

    /// A page saying the sign-in could not be checked (the store failed), with the
    /// error's status: 503 while the database is unreachable.
    pub fn unavailable(&self, error: &ApiError) -> Response {
        self.public(
            error.parts().0,
            "Unavailable",
            error_notice(None, &error.to_string()),
        )
    }

    pub fn forbidden(&self) -> Response {
        self.public(
            StatusCode::FORBIDDEN,
            "Forbidden",
            html! {
                p {
                    "This action needs a signed-in session and its form token. "
                    a href=(SIGN_IN) { "Sign in" }
                    " and try again."
                }
            },
        )
    }

    /// The answer to a request without a live session: htmx is told to load the
    /// sign-in page, a `GET` is sent there, anything else is `403`.
    fn signed_out(&self, method: &Method, headers: &HeaderMap) -> Response {
        if headers.contains_key(HX_REQUEST) {
            return (StatusCode::OK, [("hx-redirect", SIGN_IN)]).into_response();
        }
        if method == Method::GET {
            see_other(SIGN_IN)
        } else {
            self.forbidden()
        }
    }
}

/// An HTML response.
pub fn html_response(status: StatusCode, body: Markup) -> Response {
    (
        status,
        [(CONTENT_TYPE, "text/html; charset=utf-8")],
        body.into_string(),
    )
        .into_response()
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
pub fn see_other(to: &str) -> Response {
    match HeaderValue::from_str(to) {
        Ok(v) => (StatusCode::SEE_OTHER, [(LOCATION, v)]).into_response(),
        Err(_) => (StatusCode::SEE_OTHER, [(LOCATION, "/dashboard")]).into_response(),
    }
}

/// A signed-in request; without a live session the handler does not run.
#[derive(Debug)]
pub struct Signed(pub Session);

impl FromRequestParts<Arc<Dash>> for Signed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, dash: &Arc<Dash>) -> Result<Self, Response> {
        match dash.session(&parts.headers, true).await {
            Ok(Some(s)) => Ok(Signed(s)),
            Ok(None) => Err(dash.signed_out(&parts.method, &parts.headers)),
            Err(e) => Err(dash.unavailable(&e)),
        }
    }
}

/// A form's CSRF field.
#[derive(Debug, Default, Deserialize)]
struct CsrfField {
    #[serde(default)]
    csrf: String,
}

/// A form with no fields but the CSRF token (an action button).
#[derive(Debug, Deserialize)]
pub struct Empty {}

/// A form posted by a signed-in session with its CSRF token (the `csrf` field or the
/// `x-csrf-token` header), and its fields parsed as `T`. Without a session or with a
/// wrong token the answer is `403`; a body that is not `T` gets a `400` page naming
/// the problem. Either way the handler does not run.
#[derive(Debug)]
pub struct Posted<T>(pub Session, pub T);

impl<T: DeserializeOwned> FromRequest<Arc<Dash>> for Posted<T> {
    type Rejection = Response;

    async fn from_request(req: Request, dash: &Arc<Dash>) -> Result<Self, Response> {
        let (parts, body) = req.into_parts();
        let session = match dash.session(&parts.headers, false).await {
            Ok(Some(s)) => s,
            Ok(None) => return Err(dash.signed_out(&parts.method, &parts.headers)),
            Err(e) => return Err(dash.unavailable(&e)),
        };
        let bytes = axum::body::to_bytes(body, FORM_LIMIT).await.map_err(|_| {
            dash.render(
                &session,
                View {
                    status: StatusCode::PAYLOAD_TOO_LARGE,
                    title: "Form too large",
                    nav: Nav::None,
                    main: error_notice(None, "the form is larger than 64 KiB."),
                },
            )
        })?;
        let presented = match parts.headers.get(CSRF_HEADER) {
            Some(v) => v.to_str().unwrap_or_default().to_owned(),
            None => {
                serde_urlencoded::from_bytes::<CsrfField>(&bytes)
                    .unwrap_or_default()
                    .csrf
            }
        };
        if !csrf_matches(&session.csrf, &presented) {
            return Err(dash.forbidden());
        }
        match serde_urlencoded::from_bytes::<T>(&bytes) {
            Ok(form) => Ok(Posted(session, form)),
            Err(e) => Err(dash.render(
                &session,
                View {
                    status: StatusCode::BAD_REQUEST,
                    title: "Bad form",
                    nav: Nav::None,
                    main: error_notice(None, &format!("the form could not be read: {e}")),
                },
            )),
        }
    }
}
