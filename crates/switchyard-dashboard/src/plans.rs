//! Plans (SPEC D2): a connection's resolved plan (the dimensions its account is limited
//! by) and where it comes from, a manual override of it, and the override's removal
//! (the catalog's plan, or none, applies again).

use crate::charts;
use crate::forms::{self, DimRow, Placed};
use crate::html::{self, error_notice, table, text, Nav};
use crate::quota_share::Choice;
use crate::web::{Dash, Empty, Posted, Routes, Session, Signed, View};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};
use serde::Deserialize;
use std::sync::Arc;
use switchyard_core::quota::plan::PlanSource;
use switchyard_gateway::error::ApiError;
use switchyard_gateway::services;
use switchyard_gateway::services::quota::PlanView;

/// The page's path.
pub const PLANS: &str = "/dashboard/costs/quota-share/plans";

/// The page's routes.
pub fn routes() -> Routes {
    Routes::default()
        .page(PLANS, page)
        .form("/dashboard/costs/quota-share/plans/{connection}", save)
        .form(
            "/dashboard/costs/quota-share/plans/{connection}/delete",
            delete,
        )
}

/// The page showing `connection`'s plan.
fn plan_path(connection: &str) -> String {
    let query = serde_urlencoded::to_string([("connection", connection)]).unwrap_or_default();
    format!("{PLANS}?{query}")
}

/// The page's query.
#[derive(Debug, Deserialize)]
struct Pick {
    connection: Option<String>,
}

/// `GET /dashboard/costs/quota-share/plans[?connection=ID]`.
async fn page(
    State(dash): State<Arc<Dash>>,
    Signed(session): Signed,
    Query(pick): Query<Pick>,
) -> Response {
    let selected = pick.connection.filter(|c| !c.is_empty());
    show(&dash, &session, selected, None, StatusCode::OK).await
}

/// The override form as posted: its rows and the error placed on them.
#[derive(Debug)]
pub struct Override {
    pub rows: Vec<DimRow>,
    pub error: Option<Placed>,
}

/// The page of `selected`'s plan, its override form showing `edit` when given (else
/// the plan's dimensions), answered with `status`.
async fn show(
    dash: &Dash,
    session: &Session,
    selected: Option<String>,
    edit: Option<&Override>,
    status: StatusCode,
) -> Response {
    let title = "Plans";
    let connections = match services::config::connections(&dash.app).await {
        Ok(c) => c
            .into_iter()
            .map(|c| Choice {
                id: c.id,
                provider: c.provider,
            })
            .collect::<Vec<_>>(),
        Err(e) => return dash.failed(session, title, Nav::Plans, &e),
    };
    let plan = selected
        .clone()
        .map(|c| services::quota::plan(&dash.app, c).map_err(|e| e.to_string()));
    let main = render(
        &connections,
        selected.as_deref(),
        plan.as_ref(),
        edit,
        &session.csrf,
    );
    dash.render(
        session,
        View {
            status,
            title,
            nav: Nav::Plans,
            main,
        },
    )
}

/// A plan's source as text.
fn source(s: PlanSource) -> &'static str {
    match s {
        PlanSource::Manual => "manual (an override stored for this connection)",
        PlanSource::Catalog => "catalog (the built-in plan of the provider)",
        PlanSource::Empty => "empty (nothing known: declare dimensions on the pool)",
    }
}

/// The page's `<main>`: the picker, then the chosen connection's plan and its forms.
pub(crate) fn render(
    connections: &[Choice],
    selected: Option<&str>,
    plan: Option<&Result<PlanView, String>>,
    edit: Option<&Override>,
    csrf: &str,
) -> Markup {
    html! {
        form method="get" action=(PLANS) class="row" {
            label for="plan-connection" {
                "Connection"
                select id="plan-connection" name="connection" {
                    @for c in connections {
                        option value=(c.id) selected[Some(c.id.as_str()) == selected] {
                            (c.id) " (" (c.provider) ")"
                        }
                    }
                }
            }
            button type="submit" { "Show plan" }
        }
        @match plan {
            None => p.hint { "Pick a connection to see its plan." },
            Some(Err(e)) => (error_notice(None, e)),
            Some(Ok(p)) => (plan_section(p, edit, csrf)),
        }
    }
}

/// One connection's plan, the override form and (for a manual plan) its removal.
fn plan_section(p: &PlanView, edit: Option<&Override>, csrf: &str) -> Markup {
    let rows: Vec<Vec<Markup>> = p
        .dimensions
        .iter()
        .map(|d| {
            vec![
                text(d.unit.as_str()),
                text(d.window.as_str()),
                text(if d.limit > 0.0 {
                    charts::number(d.limit)
                } else {
                    "0 (unknown)".to_owned()
                }),
            ]
        })
        .collect();
    let path = format!("{PLANS}/{}", p.connection_id);
    let mut shown: Vec<DimRow> = p
        .dimensions
        .iter()
        .map(|d| DimRow {
            unit: d.unit.as_str().to_owned(),
            window: d.window.as_str().to_owned(),
            limit: charts::number(d.limit),
        })
        .collect();
    if shown.is_empty() {
        shown.push(DimRow::default());
    }
    let (form_rows, placed) = edit.map_or((shown.as_slice(), None), |e| {
        (e.rows.as_slice(), e.error.as_ref())
    });
    let edit = html::form(
        &path,
        csrf,
        "stack",
        html! {
            (forms::default_submit("Save override"))
            @if let Some(e) = placed.filter(|e| e.row.is_none()) {
                p.notice.error role="alert" id="plan-error" { "Error: " (e.message) }
            }
            (forms::dimension_rows(form_rows, placed))
            p.hint id="plan-dims-hint" {
                "A limit of 0 means unknown; a row without a limit is left out. Saving stores a manual override for this connection."
            }
        },
        "Save override",
    );
    html! {
        section aria-labelledby="plan-h" {
            h2 id="plan-h" { "Plan of " (p.connection_id) }
            p id="plan-source" { "Source: " (source(p.source)) }
            (table(
                &format!("Dimensions of {}", p.connection_id),
                &["Unit", "Window", "Limit"],
                &rows,
                "No dimensions.",
            ))
            h3 { "Override" }
            (edit)
            @if p.source == PlanSource::Manual {
                p.hint { "Deleting the override makes the catalog's plan (or none) apply again." }
                (html::confirm_form(
                    &format!("{path}/delete"),
                    csrf,
                    "Delete override…",
                    &format!("Delete the override of {} for good", p.connection_id),
                ))
            }
        }
    }
}

/// `POST /dashboard/costs/quota-share/plans/{connection}`: a row button shows the
/// form again with one row more or less; otherwise stores a manual plan. A refused
/// plan shows the form again as posted, with the API's error beside its row.
async fn save(
    State(dash): State<Arc<Dash>>,
    Path(connection): Path<String>,
    Posted(session, fields): Posted<Vec<(String, String)>>,
) -> Response {
    let mut edit = Override {
        rows: forms::dim_rows(&fields),
        error: None,
    };
    if let Some(e) = forms::edit(&fields) {
        forms::apply(e, &mut edit.rows, &mut Vec::new());
        return show(
            &dash,
            &session,
            Some(connection),
            Some(&edit),
            StatusCode::OK,
        )
        .await;
    }
    let outcome = match forms::dimensions(&edit.rows) {
        Ok(dims) => services::quota::save_plan(&dash.app, connection.clone(), dims).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok(p) => {
            dash.done(&session, &plan_path(&connection), Ok(p), |p| {
                format!(
                    "Plan of `{}` saved: {} dimension(s), source {}.",
                    p.connection_id,
                    p.dimensions.len(),
                    match p.source {
                        PlanSource::Manual => "manual",
                        PlanSource::Catalog => "catalog",
                        PlanSource::Empty => "empty",
                    }
                )
            })
            .await
        }
        Err(e) => {
            edit.error = Some(forms::place(&e, &forms::dim_from(&edit.rows), &[]));
            show(&dash, &session, Some(connection), Some(&edit), e.parts().0).await
        }
    }
}

/// `POST /dashboard/costs/quota-share/plans/{connection}/delete`: removes the override.
async fn delete(
    State(dash): State<Arc<Dash>>,
    Path(connection): Path<String>,
    Posted(session, Empty {}): Posted<Empty>,
) -> Response {
    let outcome: Result<(), ApiError> =
        services::quota::delete_plan(&dash.app, connection.clone()).await;
    dash.done(&session, &plan_path(&connection), outcome, |()| {
        format!("The override of `{connection}` is deleted.")
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_core::quota::decide::Unit;
    use switchyard_core::quota::plan::Dimension;
    use switchyard_core::quota::window::Window;

    fn choices() -> Vec<Choice> {
        ["c1", "c<2>"]
            .into_iter()
            .map(|id| Choice {
                id: id.into(),
                provider: "kimi".into(),
            })
            .collect()
    }

    #[test]
    fn a_catalog_plan_is_shown_without_a_delete_button() {
        let plan = Ok(PlanView {
            connection_id: "c1".into(),
            source: PlanSource::Catalog,
            dimensions: vec![Dimension::new(Unit::Requests, Window::Hourly, 1500.0)],
        });
        let html = render(&choices(), Some("c1"), Some(&plan), None, "tok").into_string();
        assert!(html.contains(r#"<option value="c1" selected>c1 (kimi)</option><option value="c&lt;2&gt;">c&lt;2&gt; (kimi)</option>"#));
        assert!(html.contains(
            r#"<p id="plan-source">Source: catalog (the built-in plan of the provider)</p>"#
        ));
        assert!(html.contains("<tr><td>requests</td><td>hourly</td><td>1500</td></tr>"));
        assert!(html.contains(r#"<input type="number" name="dim[0].limit" value="1500" min="0" step="any" aria-label="Limit of dimension 1">"#));
        assert!(html.contains(r#"<select name="dim[0].window" aria-label="Window of dimension 1"><option value="5h">5h</option><option value="hourly" selected>hourly</option>"#));
        assert!(html.contains(r#"action="/dashboard/costs/quota-share/plans/c1""#));
        assert!(!html.contains("Delete override"));
    }

    #[test]
    fn a_manual_plan_can_be_deleted_and_errors_are_escaped() {
        let plan = Ok(PlanView {
            connection_id: "c1".into(),
            source: PlanSource::Manual,
            dimensions: vec![],
        });
        let html = render(&choices(), Some("c1"), Some(&plan), None, "tok").into_string();
        assert!(html.contains(r#"action="/dashboard/costs/quota-share/plans/c1/delete""#));
        assert!(html.contains("<tr><td colspan=\"3\">No dimensions.</td></tr>"));
        let html = render(
            &choices(),
            Some("x"),
            Some(&Err("no <x>".into())),
            None,
            "tok",
        )
        .into_string();
        assert!(html.contains(r#"<p class="notice error" role="alert">Error: no &lt;x&gt;</p>"#));
        assert!(!html.contains(" selected"));
        assert_eq!(
            plan_path("a b&c"),
            "/dashboard/costs/quota-share/plans?connection=a+b%26c"
        );
    }
}
