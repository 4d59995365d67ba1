//! Target resolution (SPEC G3): a name with a slash is `provider/model` and routes to
//! the provider's connections; any other name must be a combo. The result is the plan:
//! candidates in configured order plus the excluded ones with their reasons, which later
//! stages (and the R18 diagnostics) read. Exclusions are collected, not silently
//! dropped: an operator must be able to see why a request found nothing to run on.
//! Resolution reads only the catalog and the key; ordering by live facts is the
//! strategies' work ([`super::strategy`]).

use super::exclusion::{Exclusion, Reason};
use super::strategy::Kind;
use super::{Candidate, Plan, RouteError};
use crate::catalog::{ApiKey, Catalog, Combo, Connection};
use crate::domain::{ModelRef, Strategy};
use std::sync::Arc;

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
        strategy: Kind::Priority,
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

/// Why resolution leaves `conn` out for `key`: switched off, or not among the key's
/// allowed connections; `None` when it is a candidate.
pub fn left_out(key: &ApiKey, conn: &Connection) -> Option<Reason> {
    if !conn.enabled {
        Some(Reason::Disabled)
    } else if !key.may_use_connection(&conn.id) {
        Some(Reason::NotAllowedForKey)
    } else {
        None
    }
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
        match left_out(key, conn) {
            Some(reason) => out.excluded.push(Exclusion {
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
            vec![Exclusion {
                target: "a/gpt".into(),
                connection: "a3".into(),
                reason: Reason::Disabled
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
        assert_eq!(p.excluded[0].reason, Reason::NotAllowedForKey);
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
