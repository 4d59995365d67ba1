//! Target resolution and ordering: which connections a request may go to, in which
//! order, and why the others were left out.
//!
//! Resolution (SPEC G3): a name with a slash is `provider/model` and routes to the
//! provider's connections; any other name must be a combo. The result is an ordered list
//! of attempts plus the excluded candidates with their reasons, which later stages (and
//! the R18 diagnostics) read. Exclusions are collected, not silently dropped: an operator
//! must be able to see why a request found nothing to run on.

use crate::catalog::{ApiKey, Catalog, Combo, Connection};
use crate::domain::{ModelRef, Strategy};
use std::sync::Arc;

/// One upstream attempt: a connection and the model name the upstream will see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub connection: Arc<Connection>,
    pub upstream_model: String,
    /// Index of the combo target this candidate came from (0 for direct requests).
    pub target: usize,
}

/// Why a candidate was not attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExclusionReason {
    /// The connection is switched off by the operator.
    Disabled,
    /// The client key's `allowedConnections` does not include the connection.
    NotAllowedForKey,
}

impl ExclusionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::NotAllowedForKey => "not_allowed_for_key",
        }
    }
}

/// A candidate left out, with its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excluded {
    pub target: String,
    pub connection: String,
    pub reason: ExclusionReason,
}

/// The routing plan for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Candidates in the order they will be attempted.
    pub candidates: Vec<Candidate>,
    pub excluded: Vec<Excluded>,
    /// The combo the request named, if any.
    pub combo: Option<String>,
}

/// Why a requested model cannot be routed at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("model `{0}` does not exist: use provider/model or a combo name (see GET /v1/models)")]
    UnknownModel(String),
    #[error("this API key may not use model `{0}`")]
    ModelNotAllowed(String),
}

/// Builds the plan for `requested`.
///
/// `rotation` spreads load across the connections of one provider: the shell passes a
/// counter that increases per request, and connections are tried starting at
/// `rotation % n`. The function itself stays deterministic.
pub fn plan(
    catalog: &Catalog,
    key: &ApiKey,
    requested: &str,
    rotation: usize,
) -> Result<Plan, RouteError> {
    if !key.may_use_model(requested) {
        return Err(RouteError::ModelNotAllowed(requested.to_owned()));
    }
    let mut out = Plan {
        candidates: Vec::new(),
        excluded: Vec::new(),
        combo: None,
    };
    if let Some(combo) = catalog.combo(requested) {
        out.combo = Some(combo.name.clone());
        expand_combo(catalog, key, combo, rotation, &mut out);
        return Ok(out);
    }
    let model_ref =
        ModelRef::parse(requested).map_err(|_| RouteError::UnknownModel(requested.to_owned()))?;
    let Some(provider) = catalog.provider(&model_ref.provider) else {
        return Err(RouteError::UnknownModel(requested.to_owned()));
    };
    if !provider.models.is_empty() && !provider.models.contains(&model_ref.model) {
        return Err(RouteError::UnknownModel(requested.to_owned()));
    }
    expand_target(catalog, key, &model_ref, None, 0, rotation, &mut out);
    Ok(out)
}

fn expand_combo(catalog: &Catalog, key: &ApiKey, combo: &Combo, rotation: usize, out: &mut Plan) {
    match combo.strategy {
        Strategy::Priority => {
            for (i, t) in combo.targets.iter().enumerate() {
                expand_target(
                    catalog,
                    key,
                    &t.model,
                    t.connection.as_deref(),
                    i,
                    rotation,
                    out,
                );
            }
        }
    }
}

fn expand_target(
    catalog: &Catalog,
    key: &ApiKey,
    model: &ModelRef,
    pinned: Option<&str>,
    target: usize,
    rotation: usize,
    out: &mut Plan,
) {
    let conns: Vec<&Arc<Connection>> = match pinned {
        Some(id) => catalog.connection(id).into_iter().collect(),
        None => catalog.provider_connections(&model.provider).collect(),
    };
    let n = conns.len();
    for offset in 0..n {
        let conn = conns[(rotation + offset) % n];
        let reason = if !conn.enabled {
            Some(ExclusionReason::Disabled)
        } else if !key.may_use_connection(&conn.id) {
            Some(ExclusionReason::NotAllowedForKey)
        } else {
            None
        };
        match reason {
            Some(reason) => out.excluded.push(Excluded {
                target: model.to_string(),
                connection: conn.id.clone(),
                reason,
            }),
            None => out.candidates.push(Candidate {
                connection: Arc::clone(conn),
                upstream_model: model.model.clone(),
                target,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apikey::KeyHash;
    use crate::catalog::{ComboTarget, ConnectionDef, Provider};
    use crate::domain::{AuthClass, UpstreamFormat};

    fn key() -> ApiKey {
        ApiKey {
            id: "k1".into(),
            name: "k1".into(),
            scopes: vec![],
            allowed_connections: None,
            allowed_models: None,
            revoked: false,
        }
    }

    fn conn(id: &str, provider: &str, enabled: bool) -> ConnectionDef {
        ConnectionDef {
            id: id.into(),
            provider: provider.into(),
            auth_class: AuthClass::Apikey,
            format: None,
            base_url: None,
            enabled,
            max_concurrent: None,
            rate_limit_overrides: None,
            disable_cooling: false,
        }
    }

    fn provider(id: &str, models: &[&str]) -> Provider {
        Provider {
            id: id.into(),
            format: UpstreamFormat::Openai,
            base_url: format!("http://{id}.test"),
            models: models.iter().map(|m| (*m).to_owned()).collect(),
            max_concurrent: None,
        }
    }

    fn catalog() -> Catalog {
        Catalog::build(
            vec![provider("a", &[]), provider("b", &["m1"])],
            vec![
                conn("a1", "a", true),
                conn("a2", "a", true),
                conn("a3", "a", false),
                conn("b1", "b", true),
            ],
            vec![Combo {
                name: "combo".into(),
                strategy: Strategy::Priority,
                targets: vec![
                    ComboTarget {
                        model: ModelRef::parse("b/m1").unwrap(),
                        connection: None,
                        weight: 1,
                        cost: None,
                    },
                    ComboTarget {
                        model: ModelRef::parse("a/x").unwrap(),
                        connection: Some("a2".into()),
                        weight: 1,
                        cost: None,
                    },
                ],
            }],
            vec![(KeyHash::of("s"), key())],
        )
        .unwrap()
    }

    fn ids(p: &Plan) -> Vec<(&str, &str)> {
        p.candidates
            .iter()
            .map(|c| (c.connection.id.as_str(), c.upstream_model.as_str()))
            .collect()
    }

    #[test]
    fn direct_model_rotates_over_enabled_connections_and_excludes_disabled() {
        let cat = catalog();
        let p0 = plan(&cat, &key(), "a/gpt", 0).unwrap();
        assert_eq!(ids(&p0), vec![("a1", "gpt"), ("a2", "gpt")]);
        assert_eq!(
            p0.excluded,
            vec![Excluded {
                target: "a/gpt".into(),
                connection: "a3".into(),
                reason: ExclusionReason::Disabled
            }]
        );
        let p1 = plan(&cat, &key(), "a/gpt", 1).unwrap();
        assert_eq!(ids(&p1), vec![("a2", "gpt"), ("a1", "gpt")]);
        let p2 = plan(&cat, &key(), "a/gpt", 2).unwrap();
        assert_eq!(ids(&p2), vec![("a1", "gpt"), ("a2", "gpt")]);
    }

    #[test]
    fn priority_combo_keeps_target_order_and_pinned_connection() {
        let p = plan(&catalog(), &key(), "combo", 1).unwrap();
        assert_eq!(ids(&p), vec![("b1", "m1"), ("a2", "x")]);
        assert_eq!(p.candidates[1].target, 1);
        assert_eq!(p.combo.as_deref(), Some("combo"));
    }

    #[test]
    fn unknown_provider_model_or_bare_name_is_unknown_model() {
        let cat = catalog();
        for m in ["zz/m", "b/other", "gpt-4o", ""] {
            assert_eq!(
                plan(&cat, &key(), m, 0),
                Err(RouteError::UnknownModel(m.into()))
            );
        }
    }

    #[test]
    fn key_restrictions_apply() {
        let cat = catalog();
        let mut k = key();
        k.allowed_models = Some(vec!["a/*".into()]);
        assert!(plan(&cat, &k, "a/gpt", 0).is_ok());
        assert_eq!(
            plan(&cat, &k, "combo", 0),
            Err(RouteError::ModelNotAllowed("combo".into()))
        );
        k.allowed_models = None;
        k.allowed_connections = Some(vec!["a2".into()]);
        let p = plan(&cat, &k, "a/gpt", 0).unwrap();
        assert_eq!(ids(&p), vec![("a2", "gpt")]);
        assert_eq!(p.excluded.len(), 2);
        assert_eq!(p.excluded[0].reason, ExclusionReason::NotAllowedForKey);
    }

    #[test]
    fn catalog_rejects_inconsistent_definitions() {
        use crate::catalog::CatalogError;
        let err = Catalog::build(vec![], vec![conn("c", "nope", true)], vec![], vec![]);
        assert_eq!(
            err.err(),
            Some(CatalogError::UnknownProvider {
                connection: "c".into(),
                provider: "nope".into()
            })
        );
        let err = Catalog::build(
            vec![provider("a", &[]), provider("b", &[])],
            vec![conn("a1", "a", true)],
            vec![Combo {
                name: "c".into(),
                strategy: Strategy::Priority,
                targets: vec![ComboTarget {
                    model: ModelRef::parse("b/m").unwrap(),
                    connection: Some("a1".into()),
                    weight: 1,
                    cost: None,
                }],
            }],
            vec![],
        );
        assert!(matches!(
            err.err(),
            Some(CatalogError::ComboUnknownConnection { .. })
        ));
        let err = Catalog::build(
            vec![provider("a", &[]), provider("a", &[])],
            vec![],
            vec![],
            vec![],
        );
        assert_eq!(
            err.err(),
            Some(CatalogError::Duplicate {
                kind: "provider",
                id: "a".into()
            })
        );
    }
}
