//! Quota pools (SPEC Q1): what the operator declares, and its validation.
//!
//! A pool groups one or more upstream connections of a provider account, the dimensions
//! their use is limited by, and per-key allocations. Input arrives as [`PoolInput`]
//! (from the API, the config file or an import) with plain strings and numbers, and
//! becomes a [`Pool`] only through [`PoolInput::validate`], whose errors name the field.
//!
//! Dimensions: a pool may declare its own (their limits are the pool's totals) or leave
//! them empty and inherit its connections' plan, whose limits are per account and are
//! multiplied by the number of connections in the pool (SPEC Q2).
//!
//! Validation reads no configuration itself: the caller passes functions that say whether
//! a connection or key exists and what a connection's plan is.

use super::decide::{Policy, Unit};
use super::plan::Dimension;
use super::window::Window;
use crate::domain::is_valid_id;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// Most dimensions a pool may have: every unit over every window.
pub const MAX_DIMENSIONS: usize = Unit::ALL.len() * Window::ALL.len();

/// A request's list of one value per dimension of its pool: inline up to four (a pool
/// has one to three dimensions as a rule), so a reservation's lists cost no allocation.
pub type PerDimension<T> = smallvec::SmallVec<[T; 4]>;

/// Most connections per pool; a pool is a handful of accounts, and the bound keeps
/// per-request work small.
pub const MAX_CONNECTIONS: usize = 64;

/// Most allocations per pool, bounding per-pool counter memory.
pub const MAX_ALLOCATIONS: usize = 1_000;

/// Longest pool name.
const MAX_NAME_CHARS: usize = 128;

/// A dimension as submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DimensionInput {
    pub unit: String,
    pub window: String,
    pub limit: f64,
}

/// An allocation as submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AllocationInput {
    #[serde(alias = "api_key_id")]
    pub api_key_id: String,
    #[serde(default, alias = "allocation_weight")]
    pub allocation_weight: f64,
    #[serde(default, alias = "cap_value")]
    pub cap_value: Option<f64>,
    #[serde(default, alias = "cap_unit")]
    pub cap_unit: Option<String>,
    #[serde(default = "default_policy")]
    pub policy: String,
}

fn default_policy() -> String {
    Policy::Hard.as_str().to_owned()
}

/// A pool as submitted. Field names are camelCase (the API's); the config file may also
/// spell them in snake_case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolInput {
    pub id: String,
    pub name: String,
    #[serde(alias = "connection_ids")]
    pub connection_ids: Vec<String>,
    #[serde(default)]
    pub dimensions: Vec<DimensionInput>,
    #[serde(default)]
    pub allocations: Vec<AllocationInput>,
}

/// A key's absolute cap.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cap {
    pub value: f64,
    pub unit: Unit,
}

/// A key's share of a pool.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Allocation {
    pub api_key_id: String,
    pub allocation_weight: f64,
    pub cap_value: Option<f64>,
    pub cap_unit: Option<Unit>,
    pub policy: Policy,
}

impl Allocation {
    pub fn cap(&self) -> Option<Cap> {
        Some(Cap {
            value: self.cap_value?,
            unit: self.cap_unit?,
        })
    }
}

/// A validated pool.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pool {
    pub id: String,
    pub name: String,
    pub connection_ids: Vec<String>,
    /// Declared dimensions; empty = the connections' plan.
    pub dimensions: Vec<Dimension>,
    pub allocations: Vec<Allocation>,
}

/// A validation failure naming the offending field (`allocations[2].capUnit`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct PoolError {
    pub field: String,
    pub message: String,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> PoolError {
    PoolError {
        field: field.into(),
        message: message.into(),
    }
}

fn finite_at_least_zero(field: &str, v: f64) -> Result<f64, PoolError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(err(field, format!("must be a finite number >= 0, got {v}")))
    }
}

fn list(names: impl Iterator<Item = &'static str>) -> String {
    names.collect::<Vec<_>>().join(", ")
}

fn parse_unit(field: &str, s: &str) -> Result<Unit, PoolError> {
    Unit::parse(s).ok_or_else(|| {
        err(
            field,
            format!(
                "unknown unit `{s}` (expected one of {})",
                list(Unit::ALL.iter().map(|u| u.as_str()))
            ),
        )
    })
}

impl PoolInput {
    /// Validates the pool. `connection_known` and `key_known` look ids up in the
    /// current configuration; `plan_of` gives a connection's resolved plan, which the
    /// pool inherits when it declares no dimensions.
    pub fn validate(
        &self,
        connection_known: impl Fn(&str) -> bool,
        key_known: impl Fn(&str) -> bool,
        plan_of: impl Fn(&str) -> Vec<Dimension>,
    ) -> Result<Pool, PoolError> {
        if !is_valid_id(&self.id) {
            return Err(err(
                "id",
                "must be 1-64 characters of letters, digits, `-`, `_` or `.`",
            ));
        }
        let name = self.name.trim();
        if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
            return Err(err(
                "name",
                format!("must be 1-{MAX_NAME_CHARS} characters"),
            ));
        }
        if self.connection_ids.is_empty() || self.connection_ids.len() > MAX_CONNECTIONS {
            return Err(err(
                "connectionIds",
                format!("must list 1-{MAX_CONNECTIONS} connections"),
            ));
        }
        let mut seen = HashSet::new();
        for (i, c) in self.connection_ids.iter().enumerate() {
            let field = format!("connectionIds[{i}]");
            if !connection_known(c) {
                return Err(err(field, format!("unknown connection `{c}`")));
            }
            if !seen.insert(c.as_str()) {
                return Err(err(field, format!("connection `{c}` is listed twice")));
            }
        }
        if self.dimensions.len() > MAX_DIMENSIONS {
            return Err(err(
                "dimensions",
                format!("at most {MAX_DIMENSIONS} dimensions"),
            ));
        }
        let mut dimensions = Vec::with_capacity(self.dimensions.len());
        let mut keys = HashSet::new();
        for (i, d) in self.dimensions.iter().enumerate() {
            let unit = parse_unit(&format!("dimensions[{i}].unit"), &d.unit)?;
            let window = Window::parse(&d.window).ok_or_else(|| {
                err(
                    format!("dimensions[{i}].window"),
                    format!(
                        "unknown window `{}` (expected one of {})",
                        d.window,
                        list(Window::ALL.iter().map(|w| w.as_str()))
                    ),
                )
            })?;
            let limit = finite_at_least_zero(&format!("dimensions[{i}].limit"), d.limit)?;
            if !keys.insert((unit, window)) {
                return Err(err(
                    format!("dimensions[{i}]"),
                    format!(
                        "a second {} dimension over {}",
                        unit.as_str(),
                        window.as_str()
                    ),
                ));
            }
            dimensions.push(Dimension::new(unit, window, limit));
        }
        let effective_units: HashSet<Unit> = if dimensions.is_empty() {
            self.connection_ids
                .iter()
                .flat_map(|c| plan_of(c))
                .map(|d| d.unit)
                .collect()
        } else {
            dimensions.iter().map(|d| d.unit).collect()
        };
        if self.allocations.len() > MAX_ALLOCATIONS {
            return Err(err(
                "allocations",
                format!("at most {MAX_ALLOCATIONS} allocations"),
            ));
        }
        let mut allocations = Vec::with_capacity(self.allocations.len());
        let mut key_ids = HashSet::new();
        for (i, a) in self.allocations.iter().enumerate() {
            let field = |f: &str| format!("allocations[{i}].{f}");
            if !key_known(&a.api_key_id) {
                return Err(err(
                    field("apiKeyId"),
                    format!("unknown API key `{}`", a.api_key_id),
                ));
            }
            if !key_ids.insert(a.api_key_id.as_str()) {
                return Err(err(
                    field("apiKeyId"),
                    format!("key `{}` has a second allocation", a.api_key_id),
                ));
            }
            let weight = a.allocation_weight;
            if !(weight.is_finite() && (0.0..=100.0).contains(&weight)) {
                return Err(err(
                    field("allocationWeight"),
                    format!("must be a percentage between 0 and 100, got {weight}"),
                ));
            }
            let policy = Policy::parse(&a.policy).ok_or_else(|| {
                err(
                    field("policy"),
                    format!(
                        "unknown policy `{}` (expected hard, soft or burst)",
                        a.policy
                    ),
                )
            })?;
            let (cap_value, cap_unit) = match (a.cap_value, a.cap_unit.as_deref()) {
                (None, None) => (None, None),
                (Some(v), Some(u)) => {
                    if !(v.is_finite() && v > 0.0) {
                        return Err(err(
                            field("capValue"),
                            format!("must be a finite number > 0, got {v}"),
                        ));
                    }
                    let unit = parse_unit(&field("capUnit"), u)?;
                    if !effective_units.contains(&unit) {
                        return Err(err(
                            field("capUnit"),
                            format!("the pool has no {u} dimension for the cap to apply to"),
                        ));
                    }
                    (Some(v), Some(unit))
                }
                (Some(_), None) => {
                    return Err(err(field("capUnit"), "required with capValue"));
                }
                (None, Some(_)) => {
                    return Err(err(field("capValue"), "required with capUnit"));
                }
            };
            allocations.push(Allocation {
                api_key_id: a.api_key_id.clone(),
                allocation_weight: weight,
                cap_value,
                cap_unit,
                policy,
            });
        }
        Ok(Pool {
            id: self.id.clone(),
            name: name.to_owned(),
            connection_ids: self.connection_ids.clone(),
            dimensions,
            allocations,
        })
    }
}

impl Pool {
    /// The dimensions enforced: the declared ones, or the first connection's plan with
    /// each limit multiplied by the number of connections.
    pub fn effective_dimensions(&self, plan_of: impl Fn(&str) -> Vec<Dimension>) -> Vec<Dimension> {
        if !self.dimensions.is_empty() {
            return self.dimensions.clone();
        }
        let Some(first) = self.connection_ids.first() else {
            return Vec::new();
        };
        let n = self.connection_ids.len() as f64;
        plan_of(first)
            .into_iter()
            .map(|d| Dimension::new(d.unit, d.window, d.limit * n))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(v: serde_json::Value) -> PoolInput {
        serde_json::from_value(v).unwrap()
    }

    fn validate(v: serde_json::Value) -> Result<Pool, PoolError> {
        input(v).validate(
            |c| c.starts_with("conn-"),
            |k| k.starts_with("key-"),
            |c| {
                if c == "conn-kimi" {
                    vec![Dimension::new(Unit::Requests, Window::Hourly, 1500.0)]
                } else {
                    vec![]
                }
            },
        )
    }

    fn base() -> serde_json::Value {
        json!({
            "id": "team", "name": "Team pool", "connectionIds": ["conn-a"],
            "dimensions": [{"unit": "requests", "window": "hourly", "limit": 100}],
            "allocations": [
                {"apiKeyId": "key-a", "allocationWeight": 50, "policy": "hard"},
                {"apiKeyId": "key-b", "allocationWeight": 50, "capValue": 10, "capUnit": "requests", "policy": "soft"}
            ]
        })
    }

    fn with(path: &[&str], value: serde_json::Value) -> serde_json::Value {
        let mut v = base();
        let mut cur = &mut v;
        for p in &path[..path.len() - 1] {
            cur = match p.parse::<usize>() {
                Ok(i) => &mut cur[i],
                Err(_) => &mut cur[*p],
            };
        }
        let last = path[path.len() - 1];
        match last.parse::<usize>() {
            Ok(i) => cur[i] = value,
            Err(_) => cur[last] = value,
        }
        v
    }

    #[test]
    fn a_valid_pool_round_trips() {
        let pool = validate(base()).unwrap();
        assert_eq!(
            pool.allocations[1].cap(),
            Some(Cap {
                value: 10.0,
                unit: Unit::Requests
            })
        );
        assert_eq!(pool.allocations[1].policy, Policy::Soft);
    }

    #[test]
    fn every_error_names_its_field() {
        let cases = [
            (with(&["id"], json!("bad id")), "id"),
            (with(&["name"], json!("  ")), "name"),
            (with(&["connectionIds"], json!([])), "connectionIds"),
            (
                with(&["connectionIds"], json!(["nope"])),
                "connectionIds[0]",
            ),
            (
                with(&["connectionIds"], json!(["conn-a", "conn-a"])),
                "connectionIds[1]",
            ),
            (
                with(&["dimensions", "0", "unit"], json!("bytes")),
                "dimensions[0].unit",
            ),
            (
                with(&["dimensions", "0", "window"], json!("yearly")),
                "dimensions[0].window",
            ),
            (
                with(&["dimensions", "0", "limit"], json!(-1)),
                "dimensions[0].limit",
            ),
            (
                with(
                    &["dimensions"],
                    json!([
                        {"unit": "requests", "window": "hourly", "limit": 1},
                        {"unit": "requests", "window": "hourly", "limit": 2}
                    ]),
                ),
                "dimensions[1]",
            ),
            (
                with(&["allocations", "0", "apiKeyId"], json!("ghost")),
                "allocations[0].apiKeyId",
            ),
            (
                with(&["allocations", "1", "apiKeyId"], json!("key-a")),
                "allocations[1].apiKeyId",
            ),
            (
                with(&["allocations", "0", "allocationWeight"], json!(101)),
                "allocations[0].allocationWeight",
            ),
            (
                with(&["allocations", "0", "allocationWeight"], json!(-1)),
                "allocations[0].allocationWeight",
            ),
            (
                with(&["allocations", "0", "policy"], json!("greedy")),
                "allocations[0].policy",
            ),
            (
                with(&["allocations", "1", "capValue"], json!(0)),
                "allocations[1].capValue",
            ),
            (
                with(&["allocations", "1", "capUnit"], json!("tokens")),
                "allocations[1].capUnit",
            ),
            (
                with(&["allocations", "1", "capUnit"], json!("yen")),
                "allocations[1].capUnit",
            ),
            (
                with(&["allocations", "1", "capUnit"], json!(null)),
                "allocations[1].capUnit",
            ),
            (
                with(&["allocations", "1", "capValue"], json!(null)),
                "allocations[1].capValue",
            ),
        ];
        for (v, field) in cases {
            let e = validate(v.clone()).unwrap_err();
            assert_eq!(e.field, field, "{v} -> {e}");
        }
    }

    #[test]
    fn unknown_fields_are_rejected_when_parsing() {
        let mut v = base();
        v["colour"] = json!("red");
        assert!(serde_json::from_value::<PoolInput>(v).is_err());
    }

    #[test]
    fn a_pool_without_dimensions_inherits_the_plan_times_its_connections() {
        let v = with(&["dimensions"], json!([]));
        let v = {
            let mut v = v;
            v["connectionIds"] = json!(["conn-kimi", "conn-kimi2"]);
            v
        };
        let plan = |c: &str| {
            if c.starts_with("conn-kimi") {
                vec![Dimension::new(Unit::Requests, Window::Hourly, 1500.0)]
            } else {
                vec![]
            }
        };
        let pool = input(v).validate(|_| true, |_| true, plan).unwrap();
        assert_eq!(
            pool.effective_dimensions(plan),
            vec![Dimension::new(Unit::Requests, Window::Hourly, 3000.0)]
        );
        // Declared dimensions are the pool's totals, not multiplied.
        let declared = validate(base()).unwrap();
        assert_eq!(declared.effective_dimensions(plan)[0].limit, 100.0);
    }

    #[test]
    fn defaults_are_weight_zero_and_hard() {
        let v = with(&["allocations"], json!([{"apiKeyId": "key-a"}]));
        let pool = validate(v).unwrap();
        assert_eq!(pool.allocations[0].allocation_weight, 0.0);
        assert_eq!(pool.allocations[0].policy, Policy::Hard);
    }
}
