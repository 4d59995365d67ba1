//! The combos page (SPEC D4): each combo's strategy and targets in order, a create form
//! and an edit form per combo (targets one per line), and delete buttons; then the model
//! aliases (SPEC G3) in the order they are tried, edited as one list, an alias a line.
//! Forms are read into the management API's `ComboRecord` and `AliasRecord` and saved
//! through `services::config`, which validates them as the API does.

use crate::fields::{input, one, parse, Fields};
use crate::html::{confirm_form, form, table, text, Nav};
use crate::web::{Dash, Empty, Posted, Routes, Signed, View};
use axum::extract::{Path, State};
use axum::response::Response;
use maud::{html, Markup};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use switchyard_core::routing::shape::Shape;
use switchyard_core::routing::strategy;
use switchyard_gateway::error::ApiError;
use switchyard_gateway::services;
use switchyard_gateway::services::model::{AliasRecord, ComboRecord, SaveMode, TargetRecord};

/// The page's path.
const PAGE: &str = "/dashboard/combos";

/// The page's routes.
pub fn routes() -> Routes {
    Routes::default()
        .page(PAGE, page)
        .form("/dashboard/combos/create", create)
        .form("/dashboard/combos/{name}/update", update)
        .form("/dashboard/combos/{name}/delete", delete)
        .form("/dashboard/combos/aliases", save_aliases)
}

/// `GET /dashboard/combos`.
async fn page(State(dash): State<Arc<Dash>>, Signed(session): Signed) -> Response {
    let read = async {
        let combos = services::config::combos(&dash.app).await?;
        Ok::<_, ApiError>((combos, services::config::aliases(&dash.app).await?))
    };
    match read.await {
        Ok((c, a)) => dash.render(
            &session,
            View::ok("Combos", Nav::Combos, render(&c, &a, &session.csrf)),
        ),
        Err(e) => dash.failed(&session, "Combos", Nav::Combos, &e),
    }
}

/// One line of the targets field as a target's JSON: `provider/model` then optional
/// `name=value` words (`connection`, `weight`, `cost`), which `TargetRecord` checks.
fn target(line: &str) -> Value {
    let mut words = line.split_whitespace();
    let mut t = Map::new();
    t.insert("model".into(), words.next().unwrap_or_default().into());
    for w in words {
        let (k, v) = w.split_once('=').unwrap_or((w, ""));
        let value = match k {
            "weight" => v
                .parse::<u64>()
                .map_or_else(|_| Value::from(v), Value::from),
            "cost" => v
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map_or_else(|| Value::from(v), Value::Number),
            _ => Value::from(v),
        };
        t.insert(k.to_owned(), value);
    }
    Value::Object(t)
}

/// A target as its line in the targets field.
fn line(t: &TargetRecord) -> String {
    let mut out = t.model.clone();
    if let Some(c) = &t.connection {
        out.push_str(&format!(" connection={c}"));
    }
    if t.weight != 1 {
        out.push_str(&format!(" weight={}", t.weight));
    }
    if let Some(c) = t.cost {
        out.push_str(&format!(" cost={c}"));
    }
    out
}

/// One line of the aliases field as an alias's JSON: `pattern target` then optional
/// `key=id` words limiting it to those keys.
fn alias(line: &str) -> Value {
    let mut words = line.split_whitespace();
    let pattern = words.next().unwrap_or_default();
    let target = words.next().unwrap_or_default();
    let mut keys = Vec::new();
    let mut a = Map::new();
    for w in words {
        match w.split_once('=') {
            Some(("key", id)) => keys.push(Value::from(id)),
            _ => {
                a.insert(w.to_owned(), Value::Null);
            }
        }
    }
    a.insert("pattern".into(), pattern.into());
    a.insert("target".into(), target.into());
    a.insert("keys".into(), keys.into());
    Value::Object(a)
}

/// An alias as its line in the aliases field.
fn alias_line(a: &AliasRecord) -> String {
    let mut out = format!("{} {}", a.pattern, a.target);
    for k in &a.keys {
        out.push_str(&format!(" key={k}"));
    }
    out
}

/// `POST /dashboard/combos/aliases`: the whole list, replaced.
async fn save_aliases(
    State(dash): State<Arc<Dash>>,
    Posted(session, f): Posted<Fields>,
) -> Response {
    let list: Result<Vec<AliasRecord>, ApiError> = one(&f, "aliases")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| parse(alias(l)))
        .collect();
    let outcome = match list {
        Ok(list) => services::config::replace_aliases(&dash.app, list).await,
        Err(e) => Err(e),
    };
    dash.done(&session, PAGE, outcome, |list| match list.len() {
        1 => "1 alias saved.".to_owned(),
        n => format!("{n} aliases saved."),
    })
    .await
}

/// A combo form as the API's `ComboRecord` named `name`.
fn combo_of(f: &Fields, name: String) -> Result<ComboRecord, ApiError> {
    let targets: Vec<Value> = one(f, "targets")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(target)
        .collect();
    parse(json!({"name": name, "strategy": one(f, "strategy"), "targets": targets}))
}

/// `POST /dashboard/combos/create`.
async fn create(State(dash): State<Arc<Dash>>, Posted(session, f): Posted<Fields>) -> Response {
    let outcome = match combo_of(&f, one(&f, "name").trim().to_owned()) {
        Ok(c) => services::config::save_combo(&dash.app, c, SaveMode::Create).await,
        Err(e) => Err(e),
    };
    dash.done(&session, PAGE, outcome, |c| {
        format!("Combo {} created.", c.name)
    })
    .await
}

/// `POST /dashboard/combos/{name}/update`.
async fn update(
    State(dash): State<Arc<Dash>>,
    Path(name): Path<String>,
    Posted(session, f): Posted<Fields>,
) -> Response {
    let outcome = match combo_of(&f, name) {
        Ok(c) => services::config::save_combo(&dash.app, c, SaveMode::Update).await,
        Err(e) => Err(e),
    };
    dash.done(&session, PAGE, outcome, |c| {
        format!("Combo {} saved.", c.name)
    })
    .await
}

/// `POST /dashboard/combos/{name}/delete`.
async fn delete(
    State(dash): State<Arc<Dash>>,
    Path(name): Path<String>,
    Posted(session, Empty {}): Posted<Empty>,
) -> Response {
    let outcome = services::config::delete_combo(&dash.app, name.clone()).await;
    dash.done(&session, PAGE, outcome, |()| {
        format!("Combo {name} deleted.")
    })
    .await
}

/// A combo form's fields; `c` fills them in for an edit (`prefix` keeps ids unique).
fn fields(prefix: &str, c: Option<&ComboRecord>) -> Markup {
    let current = c.map_or("priority", |c| c.strategy.as_str());
    let targets: Vec<String> = c.map_or_else(Vec::new, |c| c.targets.iter().map(line).collect());
    let id = |what: &str| format!("{prefix}-{what}");
    html! {
        @if c.is_none() { (input(&id("name"), "name", "Name", "text", "", true)) }
        label for=(id("strategy")) { "Strategy" }
        select id=(id("strategy")) name="strategy" {
            @for s in strategy::names() { option value=(s) selected[s == current] { (s) } }
        }
        label for=(id("targets")) { "Targets, in order, one per line" }
        textarea id=(id("targets")) name="targets" rows="4" required { (targets.join("\n")) }
        p.hint {
            "Each line: " code { "provider/model" } ", optionally followed by "
            code { "connection=id" } ", " code { "weight=n" } " or " code { "cost=x" } ". "
            (readers("weight", |n| n.weight)) " " (readers("cost", |n| n.cost))
            " A fixed " code { "connection" } " keeps the target on that account; session pins do not reorder such a combo."
        }
        p.hint {
            (listed(|s| s.shape() != Shape::Single))
            " are dispatch shapes: they make more than one upstream call for a request (each logged as its own row, "
            code { "<request id>.<n>" } "); a request with tools is answered by one target."
        }
    }
}

/// Which registered strategies read a target field, from their declared needs: the
/// hint cannot drift from the registry.
fn readers(field: &str, reads: fn(strategy::Needs) -> bool) -> Markup {
    html! {
        code { (field) } " is read by " (listed(|s| reads(s.needs()))) " (others ignore it)."
    }
}

/// The registered strategies `pick` picks, as "a, b and c" ("no strategy" for none).
fn listed(pick: impl Fn(&dyn strategy::Strategy) -> bool) -> Markup {
    let names: Vec<&str> = strategy::REGISTRY
        .iter()
        .filter(|s| pick(**s))
        .map(|s| s.name())
        .collect();
    html! {
        @for (i, n) in names.iter().enumerate() {
            @if i > 0 { @if i + 1 == names.len() { " and " } @else { ", " } }
            code { (n) }
        }
        @if names.is_empty() { "no strategy" }
    }
}

/// The page's `<main>` content.
pub fn render(combos: &[ComboRecord], aliases: &[AliasRecord], csrf: &str) -> Markup {
    let rows: Vec<Vec<Markup>> = combos
        .iter()
        .map(|c| {
            vec![
                text(&c.name),
                text(c.strategy.as_str()),
                html! { ol { @for t in &c.targets { li { (line(t)) } } } },
                html! {
                    details {
                        summary { "Edit " (c.name) }
                        (form(
                            &format!("/dashboard/combos/{}/update", c.name),
                            csrf,
                            "stack",
                            fields(&format!("combo-{}", c.name), Some(c)),
                            "Save combo",
                        ))
                    }
                    (confirm_form(
                        &format!("/dashboard/combos/{}/delete", c.name),
                        csrf,
                        &format!("Delete {}…", c.name),
                        &format!("Delete combo {} for good", c.name),
                    ))
                },
            ]
        })
        .collect();
    html! {
        section aria-labelledby="combos" {
            h2 id="combos" { "Combos" }
            (table(
                "Combos and their targets, in the order they are tried",
                &["Combo", "Strategy", "Targets", "Actions"],
                &rows,
                "No combos.",
            ))
        }
        section aria-labelledby="new-combo" {
            h2 id="new-combo" { "New combo" }
            (form("/dashboard/combos/create", csrf, "stack", fields("new-combo", None), "Create combo"))
        }
        (aliases_section(aliases, csrf))
    }
}

/// The aliases: a table in the order they are tried, and the form that replaces them.
fn aliases_section(aliases: &[AliasRecord], csrf: &str) -> Markup {
    let rows: Vec<Vec<Markup>> = aliases
        .iter()
        .map(|a| {
            let keys = if a.keys.is_empty() {
                "every key".to_owned()
            } else {
                a.keys.join(", ")
            };
            vec![text(&a.pattern), text(&a.target), text(&keys)]
        })
        .collect();
    let lines: Vec<String> = aliases.iter().map(alias_line).collect();
    let fields = html! {
        label for="aliases" { "Aliases, in order, one per line" }
        textarea id="aliases" name="aliases" rows="5" { (lines.join("\n")) }
        p.hint {
            "Each line: a name or glob (" code { "claude-*" } ", " code { "*haiku*" } "), then "
            code { "provider/model" } ", a combo or " code { "qtSd/pool" }
            ", optionally followed by " code { "key=id" } " words. A name nothing else matches follows the first matching alias, the key's own aliases first; empty the field to remove them all."
        }
    };
    html! {
        section aria-labelledby="aliases-title" {
            h2 id="aliases-title" { "Model aliases" }
            (table(
                "Model aliases, in the order they are tried",
                &["Pattern", "Target", "Keys"],
                &rows,
                "No aliases: clients must ask for provider/model or a combo by name.",
            ))
            (form("/dashboard/combos/aliases", csrf, "stack", fields, "Save aliases"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_lines_round_trip() {
        let t: TargetRecord =
            parse(target("alpha/m1 connection=alpha-1 weight=3 cost=0.5")).unwrap();
        assert_eq!(line(&t), "alpha/m1 connection=alpha-1 weight=3 cost=0.5");
        let t: TargetRecord = parse(target("beta/m2")).unwrap();
        assert_eq!(line(&t), "beta/m2");
        let bad = parse::<TargetRecord>(target("beta/m2 colour=red")).unwrap_err();
        assert!(bad.to_string().contains("unknown field `colour`"), "{bad}");
    }

    #[test]
    fn the_hint_names_the_strategies_that_read_weight_and_cost() {
        assert_eq!(
            readers("weight", |n| n.weight).into_string(),
            "<code>weight</code> is read by <code>weighted</code> (others ignore it)."
        );
        assert_eq!(
            readers("cost", |n| n.cost).into_string(),
            "<code>cost</code> is read by <code>cost-optimized</code> and <code>auto</code> (others ignore it)."
        );
        assert_eq!(
            listed(|s| s.shape() != Shape::Single).into_string(),
            "<code>pipeline</code>, <code>fusion</code> and <code>context-relay</code>"
        );
        assert_eq!(listed(|_| false).into_string(), "no strategy");
    }

    #[test]
    fn alias_lines_round_trip() {
        let a: AliasRecord = parse(alias("claude-*  demo key=k1 key=k2")).unwrap();
        assert_eq!(
            a,
            AliasRecord {
                pattern: "claude-*".into(),
                target: "demo".into(),
                keys: vec!["k1".into(), "k2".into()],
            }
        );
        assert_eq!(alias_line(&a), "claude-* demo key=k1 key=k2");
        let a: AliasRecord = parse(alias("gpt-5 codex/gpt-5-codex")).unwrap();
        assert_eq!(alias_line(&a), "gpt-5 codex/gpt-5-codex");
        let bad = parse::<AliasRecord>(alias("x y colour")).unwrap_err();
        assert!(bad.to_string().contains("unknown field `colour`"), "{bad}");
    }
}
