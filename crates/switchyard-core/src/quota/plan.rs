//! Provider plans (SPEC Q5): the dimensions an upstream account is limited by.
//!
//! Resolution order for a connection: the operator's manual override (stored per
//! connection) → the built-in catalog, looked up by the provider's id → the empty plan
//! (nothing known; the operator declares dimensions on the pool instead).
//!
//! The catalog is matched on the provider id itself or its first `-`-separated part, so
//! providers named `codex` or `codex-team` both get Codex's plan.
//!
//! The built-in catalog is a static table, and nothing here reads the store or the
//! configuration: the operator's override is passed in by the caller.

use super::decide::Unit;
use super::window::Window;
use serde::{Deserialize, Serialize};

/// One limited quantity: `limit` of `unit` per rolling `window`; 0 = unknown.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Dimension {
    pub unit: Unit,
    pub window: Window,
    pub limit: f64,
}

impl Dimension {
    pub const fn new(unit: Unit, window: Window, limit: f64) -> Self {
        Self {
            unit,
            window,
            limit,
        }
    }

    /// `unit:window`, unique within a pool; names counters and response headers.
    pub fn key(&self) -> String {
        format!("{}:{}", self.unit.as_str(), self.window.as_str())
    }
}

/// Where a connection's plan came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PlanSource {
    Manual,
    Catalog,
    Empty,
}

use Unit::{Percent, Requests, Tokens};
use Window::{FiveHours, Hourly, Monthly, Weekly};

/// The built-in catalog. A limit of 0 marks a dimension the provider meters but does not
/// publish a number for.
const CATALOG: &[(&str, &[Dimension])] = &[
    ("alibaba", &[Dimension::new(Requests, Monthly, 90_000.0)]),
    ("anthropic", &[]),
    (
        "bailian",
        &[
            Dimension::new(Percent, FiveHours, 100.0),
            Dimension::new(Percent, Weekly, 100.0),
            Dimension::new(Percent, Monthly, 100.0),
        ],
    ),
    (
        "codex",
        &[
            Dimension::new(Percent, FiveHours, 100.0),
            Dimension::new(Percent, Weekly, 100.0),
        ],
    ),
    (
        "glm",
        &[
            Dimension::new(Tokens, FiveHours, 0.0),
            Dimension::new(Tokens, Weekly, 0.0),
        ],
    ),
    ("kimi", &[Dimension::new(Requests, Hourly, 1_500.0)]),
    (
        "minimax",
        &[
            Dimension::new(Tokens, FiveHours, 0.0),
            Dimension::new(Tokens, Weekly, 0.0),
        ],
    ),
    ("openai", &[]),
];

/// The catalog's plan for a provider id, if the provider is known.
pub fn catalog_plan(provider_id: &str) -> Option<&'static [Dimension]> {
    let family = provider_id.split('-').next().unwrap_or(provider_id);
    CATALOG
        .iter()
        .find(|(name, _)| *name == provider_id || *name == family)
        .map(|(_, dims)| *dims)
}

/// Resolves a connection's plan: manual override → catalog → empty.
pub fn resolve(manual: Option<&[Dimension]>, provider_id: &str) -> (Vec<Dimension>, PlanSource) {
    if let Some(dims) = manual {
        return (dims.to_vec(), PlanSource::Manual);
    }
    match catalog_plan(provider_id) {
        Some(dims) => (dims.to_vec(), PlanSource::Catalog),
        None => (Vec::new(), PlanSource::Empty),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_matches_the_spec() {
        let plan = |p: &str| catalog_plan(p).map(<[Dimension]>::to_vec);
        assert_eq!(
            plan("codex"),
            Some(vec![
                Dimension::new(Percent, FiveHours, 100.0),
                Dimension::new(Percent, Weekly, 100.0)
            ])
        );
        assert_eq!(
            plan("glm"),
            Some(vec![
                Dimension::new(Tokens, FiveHours, 0.0),
                Dimension::new(Tokens, Weekly, 0.0)
            ])
        );
        assert_eq!(plan("minimax"), plan("glm"));
        assert_eq!(
            plan("bailian"),
            Some(vec![
                Dimension::new(Percent, FiveHours, 100.0),
                Dimension::new(Percent, Weekly, 100.0),
                Dimension::new(Percent, Monthly, 100.0)
            ])
        );
        assert_eq!(
            plan("kimi"),
            Some(vec![Dimension::new(Requests, Hourly, 1_500.0)])
        );
        assert_eq!(
            plan("alibaba"),
            Some(vec![Dimension::new(Requests, Monthly, 90_000.0)])
        );
        assert_eq!(plan("openai"), Some(vec![]));
        assert_eq!(plan("anthropic"), Some(vec![]));
        assert_eq!(plan("acme"), None);
    }

    #[test]
    fn provider_families_match_on_the_first_id_part() {
        assert_eq!(catalog_plan("codex-team"), catalog_plan("codex"));
        assert_eq!(catalog_plan("kimi-2"), catalog_plan("kimi"));
        assert_eq!(catalog_plan("codexish"), None);
    }

    #[test]
    fn resolution_order_is_manual_then_catalog_then_empty() {
        let manual = [Dimension::new(Requests, Hourly, 10.0)];
        assert_eq!(
            resolve(Some(&manual), "codex"),
            (manual.to_vec(), PlanSource::Manual)
        );
        assert_eq!(resolve(None, "kimi").1, PlanSource::Catalog);
        assert_eq!(resolve(None, "acme"), (vec![], PlanSource::Empty));
        // An empty manual plan is still an override.
        assert_eq!(resolve(Some(&[]), "codex"), (vec![], PlanSource::Manual));
    }

    #[test]
    fn dimension_keys_name_unit_and_window() {
        assert_eq!(Dimension::new(Percent, FiveHours, 1.0).key(), "percent:5h");
    }
}
