//! Target resolution (SPEC G3): `qtSd/<pool>[/<model>]` is a quota-share pool's
//! internal combo (SPEC Q12); a combo name routes through the combo's strategy; a name
//! with a slash whose provider exists is `provider/model`; any other name may follow an
//! alias ([`crate::alias`]) to one of those. The result is the plan: candidates in
//! configured order plus the excluded ones with their reasons, which later stages (and
//! the R18 diagnostics) read. Exclusions are collected, not silently dropped: an
//! operator must be able to see why a request found nothing to run on. Resolution
//! reads only the catalog, the pools' membership and the key; ordering by live facts is
//! the strategies' work ([`super::strategy`]).

use super::exclusion::{Exclusion, Reason};
use super::strategy::{self, StrategyRef};
use super::{AccountGate, Candidate, DispatchPolicy, Plan, RouteError, SHARE_PREFIX};
use crate::catalog::{ApiKey, Catalog, Combo, Connection};
use crate::domain::ModelRef;
use std::sync::Arc;

/// Quota-share pools' membership, as resolution needs it.
pub trait Pools {
    /// The connection ids of pool `id`, in the pool's order; `None` for no such pool.
    fn connections(&self, id: &str) -> Option<&[String]>;
    /// Every pool id, in definition order.
    fn ids(&self) -> Vec<&str>;
}

/// No pools at all: for callers without quota sharing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPools;

impl Pools for NoPools {
    fn connections(&self, _: &str) -> Option<&[String]> {
        None
    }

    fn ids(&self) -> Vec<&str> {
        Vec::new()
    }
}

/// Builds the plan for `requested`.
///
/// `rotation` spreads load across the connections of one provider: the shell passes a
/// counter that increases per request, and connections are tried starting at
/// `rotation % n`. The function itself stays deterministic.
pub fn plan(
    catalog: &Catalog,
    pools: &dyn Pools,
    key: &ApiKey,
    requested: &str,
    rotation: usize,
) -> Result<Plan, RouteError> {
    match direct(catalog, pools, key, requested, requested, rotation) {
        Err(RouteError::UnknownModel { .. }) => {}
        known => return known,
    }
    let unknown = || RouteError::UnknownModel {
        model: requested.to_owned(),
        offered: offered(catalog, pools, key)
            .into_iter()
            .map(|o| o.id)
            .collect(),
    };
    let alias = catalog
        .aliases()
        .find(&key.id, requested)
        .ok_or_else(unknown)?;
    match direct(catalog, pools, key, &alias.target, requested, rotation) {
        Ok(mut plan) => {
            plan.alias = Some(alias.pattern.clone());
            Ok(plan)
        }
        Err(RouteError::UnknownModel { .. }) => Err(unknown()),
        Err(e) => Err(e),
    }
}

/// The plan for `name` without aliases; `requested` is the name the client sent, which
/// the key's allowed models may list instead of the alias's target.
fn direct(
    catalog: &Catalog,
    pools: &dyn Pools,
    key: &ApiKey,
    name: &str,
    requested: &str,
    rotation: usize,
) -> Result<Plan, RouteError> {
    let allowed = || {
        if key.may_use_model(name) || key.may_use_model(requested) {
            Ok(())
        } else {
            Err(RouteError::ModelNotAllowed(requested.to_owned()))
        }
    };
    let unknown = || RouteError::UnknownModel {
        model: name.to_owned(),
        offered: Vec::new(),
    };
    if let Some(rest) = name.strip_prefix(SHARE_PREFIX) {
        let (pool, model) = match rest.split_once('/') {
            Some((p, m)) => (p, Some(m)),
            None => (rest, None),
        };
        let members = pools.connections(pool).ok_or_else(unknown)?;
        allowed()?;
        let out = share(catalog, key, pool, model, members);
        if out.candidates.is_empty() && out.excluded.is_empty() {
            return Err(unknown());
        }
        return Ok(out);
    }
    let mut out = empty(None, strategy::DEFAULT, AccountGate::Strict);
    if let Some(combo) = catalog.combo(name) {
        allowed()?;
        out.combo = Some(combo.name.clone());
        out.strategy = combo.strategy;
        out.policy.combo_wait = true;
        out.fixed = combo.targets.iter().all(|t| t.connection.is_some());
        expand_combo(catalog, key, combo, rotation, &mut out);
        return Ok(out);
    }
    let (provider_id, model) = ModelRef::split(name).ok_or_else(unknown)?;
    let provider = catalog.provider(provider_id).ok_or_else(unknown)?;
    if !provider.models.is_empty() && !provider.models.iter().any(|m| m == model) {
        return Err(unknown());
    }
    allowed()?;
    expand_target(
        catalog,
        key,
        (provider_id, model),
        None,
        0,
        rotation,
        &mut out,
    );
    Ok(out)
}

/// A plan without candidates yet, that waits for no combo.
fn empty(
    combo: Option<String>,
    strategy: &'static dyn strategy::Strategy,
    account_gate: AccountGate,
) -> Plan {
    Plan {
        candidates: Vec::new(),
        excluded: Vec::new(),
        combo,
        strategy: StrategyRef(strategy),
        policy: DispatchPolicy {
            combo_wait: false,
            account_gate,
        },
        alias: None,
        fixed: false,
    }
}

/// The quota-share plan of `pool` (its connections in the pool's order, each asked for
/// `model`, or its provider's first model when the name gives none).
fn share(
    catalog: &Catalog,
    key: &ApiKey,
    pool: &str,
    model: Option<&str>,
    members: &[String],
) -> Plan {
    let combo = Some(format!("{SHARE_PREFIX}{pool}"));
    let mut out = empty(combo, strategy::QUOTA_SHARE, AccountGate::FailOpen);
    for cid in members {
        let Some(conn) = catalog.connection(cid) else {
            continue;
        };
        let offered = catalog.provider(&conn.provider).map(|p| &p.models);
        let Some(model_name) = model
            .map(str::to_owned)
            .or_else(|| offered.and_then(|m| m.first().cloned()))
        else {
            continue;
        };
        if offered.is_some_and(|m| !m.is_empty() && !m.contains(&model_name)) {
            continue;
        }
        if let Some(reason) = left_out(key, conn) {
            out.excluded.push(Exclusion {
                target: format!("{}/{model_name}", conn.provider),
                connection: conn.id.clone(),
                reason,
            });
            continue;
        }
        out.candidates.push(Candidate {
            connection: Arc::clone(conn),
            upstream_model: model_name,
            target: 0,
        });
    }
    out
}

/// What kind of name an [`Offer`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OfferKind {
    /// A `provider/model` the provider lists.
    Model,
    /// `provider/*`: the provider passes any model name through.
    AnyModel,
    /// A quota-share pool's `qtSd/<pool>`.
    Pool,
    Combo,
    /// An alias's pattern (exact or glob).
    Alias,
}

/// One name a key may ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    pub id: String,
    /// The provider, or `switchyard` for the gateway's own names.
    pub owner: String,
    pub kind: OfferKind,
}

/// Everything `key` may ask for, in this order: providers' models, pools, combos, then
/// the aliases in the order they are tried.
pub fn offered(catalog: &Catalog, pools: &dyn Pools, key: &ApiKey) -> Vec<Offer> {
    let own = |id: String, kind| Offer {
        id,
        owner: "switchyard".to_owned(),
        kind,
    };
    let mut out = Vec::new();
    for p in catalog.providers() {
        let any = format!("{}/*", p.id);
        if p.models.is_empty() && key.may_use_model(&any) {
            out.push(Offer {
                id: any,
                owner: p.id.clone(),
                kind: OfferKind::AnyModel,
            });
        }
        for m in &p.models {
            let id = format!("{}/{m}", p.id);
            if key.may_use_model(&id) {
                out.push(Offer {
                    id,
                    owner: p.id.clone(),
                    kind: OfferKind::Model,
                });
            }
        }
    }
    for pool in pools.ids() {
        let id = format!("{SHARE_PREFIX}{pool}");
        if key.may_use_model(&id) {
            out.push(own(id, OfferKind::Pool));
        }
    }
    for c in catalog.combos() {
        if key.may_use_model(&c.name) {
            out.push(own(c.name.clone(), OfferKind::Combo));
        }
    }
    for a in catalog.aliases().for_key(&key.id) {
        let reachable = key.may_use_model(&a.pattern) || key.may_use_model(&a.target);
        if reachable && !out.iter().any(|o| o.id == a.pattern) {
            out.push(own(a.pattern.clone(), OfferKind::Alias));
        }
    }
    out
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

/// Every target's candidates, in target order: the combo's strategy orders them later.
fn expand_combo(catalog: &Catalog, key: &ApiKey, combo: &Combo, rotation: usize, out: &mut Plan) {
    for (i, t) in combo.targets.iter().enumerate() {
        let fixed = t.connection.as_deref();
        let model = (t.model.provider.as_str(), t.model.model.as_str());
        expand_target(catalog, key, model, fixed, i, rotation, out);
    }
}

fn expand_target(
    catalog: &Catalog,
    key: &ApiKey,
    (provider, model): (&str, &str),
    pinned: Option<&str>,
    target: usize,
    rotation: usize,
    out: &mut Plan,
) {
    let conns: Vec<&Arc<Connection>> = match pinned {
        Some(id) => catalog.connection(id).into_iter().collect(),
        None => catalog.provider_connections(provider).collect(),
    };
    let n = conns.len();
    for offset in 0..n {
        let conn = conns[(rotation + offset) % n];
        match left_out(key, conn) {
            Some(reason) => out.excluded.push(Exclusion {
                target: format!("{provider}/{model}"),
                connection: conn.id.clone(),
                reason,
            }),
            None => out.candidates.push(Candidate {
                connection: Arc::clone(conn),
                upstream_model: model.to_owned(),
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

    struct TestPools(Vec<(&'static str, Vec<String>)>);

    impl Pools for TestPools {
        fn connections(&self, id: &str) -> Option<&[String]> {
            self.0
                .iter()
                .find(|(p, _)| *p == id)
                .map(|(_, c)| c.as_slice())
        }
        fn ids(&self) -> Vec<&str> {
            self.0.iter().map(|(p, _)| *p).collect()
        }
    }

    fn pools() -> TestPools {
        TestPools(vec![("team", vec!["b1".into(), "a1".into()])])
    }

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
                strategy: StrategyRef(strategy::DEFAULT),
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
        let p0 = plan(&cat, &pools(), &key(), "a/gpt", 0).unwrap();
        assert_eq!(ids(&p0), vec![("a1", "gpt"), ("a2", "gpt")]);
        assert_eq!(
            p0.excluded,
            vec![Exclusion {
                target: "a/gpt".into(),
                connection: "a3".into(),
                reason: Reason::Disabled
            }]
        );
        let p1 = plan(&cat, &pools(), &key(), "a/gpt", 1).unwrap();
        assert_eq!(ids(&p1), vec![("a2", "gpt"), ("a1", "gpt")]);
        let p2 = plan(&cat, &pools(), &key(), "a/gpt", 2).unwrap();
        assert_eq!(ids(&p2), vec![("a1", "gpt"), ("a2", "gpt")]);
    }

    #[test]
    fn priority_combo_keeps_target_order_and_pinned_connection() {
        let p = plan(&catalog(), &pools(), &key(), "combo", 1).unwrap();
        assert_eq!(ids(&p), vec![("b1", "m1"), ("a2", "x")]);
        assert_eq!(p.candidates[1].target, 1);
        assert_eq!(p.combo.as_deref(), Some("combo"));
    }

    #[test]
    fn unknown_provider_model_or_bare_name_is_unknown_model() {
        let cat = catalog();
        let offered: Vec<String> = ["a/*", "b/m1", "qtSd/team", "combo"]
            .map(String::from)
            .to_vec();
        for m in ["zz/m", "b/other", "gpt-4o", "", "qtSd/nope"] {
            assert_eq!(
                plan(&cat, &pools(), &key(), m, 0),
                Err(RouteError::UnknownModel {
                    model: m.into(),
                    offered: offered.clone()
                })
            );
        }
        assert_eq!(
            plan(&cat, &pools(), &key(), "gpt-4o", 0)
                .unwrap_err()
                .to_string(),
            "model `gpt-4o` does not exist; ask for one of: a/*, b/m1, qtSd/team, combo (see GET /v1/models)"
        );
    }

    #[test]
    fn key_restrictions_apply() {
        let cat = catalog();
        let mut k = key();
        k.allowed_models = Some(vec!["a/*".into()]);
        assert!(plan(&cat, &pools(), &k, "a/gpt", 0).is_ok());
        assert_eq!(
            plan(&cat, &pools(), &k, "combo", 0),
            Err(RouteError::ModelNotAllowed("combo".into()))
        );
        k.allowed_models = None;
        k.allowed_connections = Some(vec!["a2".into()]);
        let p = plan(&cat, &pools(), &k, "a/gpt", 0).unwrap();
        assert_eq!(ids(&p), vec![("a2", "gpt")]);
        assert_eq!(p.excluded.len(), 2);
        assert_eq!(p.excluded[0].reason, Reason::NotAllowedForKey);
    }

    fn alias(pattern: &str, target: &str, keys: &[&str]) -> crate::alias::Alias {
        crate::alias::Alias {
            pattern: pattern.into(),
            target: target.into(),
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        }
    }

    #[test]
    fn an_unknown_name_follows_the_first_matching_alias_and_real_names_win() {
        let cat = catalog()
            .with_aliases(vec![
                alias("claude-*", "combo", &[]),
                alias("*haiku*", "b/m1", &[]),
                alias("gpt-5*", "qtSd/team", &[]),
                alias("b/*", "a/x", &[]),
            ])
            .unwrap();
        let p = plan(&cat, &pools(), &key(), "claude-haiku-4-5", 0).unwrap();
        assert_eq!(ids(&p), vec![("b1", "m1"), ("a2", "x")]);
        assert_eq!(p.alias.as_deref(), Some("claude-*"));
        assert_eq!(p.combo.as_deref(), Some("combo"));
        assert!(!p.fixed);
        let p = plan(&cat, &pools(), &key(), "my-haiku", 0).unwrap();
        assert_eq!((ids(&p), p.combo.as_deref()), (vec![("b1", "m1")], None));
        let p = plan(&cat, &pools(), &key(), "gpt-5.1-codex", 0).unwrap();
        assert_eq!(p.strategy.name(), "quota-share");
        assert_eq!(p.policy.account_gate, AccountGate::FailOpen);
        // The pool's `a1` is left out: its provider lists no model to default to.
        assert_eq!(ids(&p), vec![("b1", "m1")]);
        // A real `provider/model` never follows an alias; an unknown model of a known
        // provider may.
        let p = plan(&cat, &pools(), &key(), "b/m1", 0).unwrap();
        assert_eq!((ids(&p), p.alias.as_deref()), (vec![("b1", "m1")], None));
        let p = plan(&cat, &pools(), &key(), "b/other", 0).unwrap();
        assert_eq!(ids(&p), vec![("a1", "x"), ("a2", "x")]);
        let err = plan(&cat, &pools(), &key(), "o3", 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "model `o3` does not exist; ask for one of: a/*, b/m1, qtSd/team, combo, claude-*, *haiku*, gpt-5*, b/* (see GET /v1/models)"
        );
    }

    #[test]
    fn a_key_limited_to_some_models_may_follow_an_alias_to_them() {
        let cat = catalog()
            .with_aliases(vec![
                alias("claude-*", "combo", &[]),
                alias("gpt-*", "a/x", &[]),
            ])
            .unwrap();
        let mut k = key();
        k.allowed_models = Some(vec!["combo".into()]);
        assert!(plan(&cat, &pools(), &k, "claude-opus-4-5", 0).is_ok());
        assert_eq!(
            plan(&cat, &pools(), &k, "gpt-5", 0),
            Err(RouteError::ModelNotAllowed("gpt-5".into()))
        );
        let names: Vec<String> = offered(&cat, &pools(), &k)
            .into_iter()
            .map(|o| o.id)
            .collect();
        assert_eq!(names, vec!["combo", "claude-*"]);
        // Aliases of another key are not followed and not offered.
        let cat = catalog()
            .with_aliases(vec![alias("claude-*", "combo", &["k1"])])
            .unwrap();
        let mut other = key();
        other.id = "k2".into();
        assert!(plan(&cat, &pools(), &key(), "claude-opus-4-5", 0).is_ok());
        assert!(matches!(
            plan(&cat, &pools(), &other, "claude-opus-4-5", 0),
            Err(RouteError::UnknownModel { .. })
        ));
    }

    #[test]
    fn aliases_are_checked_when_the_catalog_is_built() {
        let problem = |a| match catalog().with_aliases(vec![a]) {
            Err(CatalogError::Alias { message, .. }) => message,
            other => panic!("{other:?}"),
        };
        use crate::catalog::CatalogError;
        assert_eq!(
            problem(alias("x", "nope", &[])),
            "target `nope` is neither a combo nor provider/model"
        );
        assert_eq!(
            problem(alias("x", "zz/m", &[])),
            "target `zz/m` names unknown provider `zz`"
        );
        assert_eq!(
            problem(alias("x", "b/other", &[])),
            "target `b/other`: provider `b` does not offer model `other`"
        );
        assert_eq!(
            problem(alias("x", "combo", &["ghost"])),
            "key `ghost` does not exist"
        );
        let twice = catalog().with_aliases(vec![alias("x", "combo", &[]), alias("x", "a/m", &[])]);
        assert_eq!(
            twice.err(),
            Some(CatalogError::Alias {
                pattern: "x".into(),
                message: "defined twice for the same keys".into()
            })
        );
        assert!(catalog()
            .with_aliases(vec![alias("x", "combo", &["k1"]), alias("x", "a/m", &[])])
            .is_ok());
    }

    #[test]
    fn a_combo_of_fixed_connections_is_a_fixed_plan() {
        let p = plan(&catalog(), &pools(), &key(), "combo", 0).unwrap();
        assert!(!p.fixed);
        assert!(p.policy.combo_wait);
        assert_eq!(p.policy.account_gate, AccountGate::Strict);
        let fixed = Catalog::build(
            vec![provider("a", &[])],
            vec![conn("a1", "a", true), conn("a2", "a", true)],
            vec![Combo {
                name: "f".into(),
                strategy: StrategyRef(strategy::DEFAULT),
                targets: ["a2", "a1"]
                    .map(|c| ComboTarget {
                        model: ModelRef::parse("a/m").unwrap(),
                        connection: Some(c.into()),
                        weight: 1,
                        cost: None,
                    })
                    .to_vec(),
            }],
            vec![],
        )
        .unwrap();
        let p = plan(&fixed, &pools(), &key(), "f", 3).unwrap();
        assert!(p.fixed);
        assert_eq!(ids(&p), vec![("a2", "m"), ("a1", "m")]);
        let direct = plan(&fixed, &pools(), &key(), "a/m", 0).unwrap();
        assert!(!direct.fixed && !direct.policy.combo_wait);
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
                strategy: StrategyRef(strategy::DEFAULT),
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
