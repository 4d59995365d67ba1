//! The Claude usage wall (SPEC R17): unified rate-limit headers, a per-credential 5-hour
//! wall with its lower-priority ("slow") lane, and the session limit reset program.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The request header that asks for the slow lane, and its value.
pub const USAGE_LIMIT_HEADER: &str = "anthropic-usage-limit";
pub const SLOW: &str = "slow";

const STATUS: &str = "anthropic-ratelimit-unified-status";
const RESET: &str = "anthropic-ratelimit-unified-reset";
const FIVE_HOUR_UTILIZATION: &str = "anthropic-ratelimit-unified-5h-utilization";
const FIVE_HOUR_RESET: &str = "anthropic-ratelimit-unified-5h-reset";
const SEVEN_DAY_UTILIZATION: &str = "anthropic-ratelimit-unified-7d-utilization";
const SEVEN_DAY_RESET: &str = "anthropic-ratelimit-unified-7d-reset";
const SLOW_OFFER: &str = "anthropic-ratelimit-unified-slow-offer";
const SLOW_STATUS: &str = "anthropic-ratelimit-unified-slow-status";
const SLOW_RETRY_AFTER: &str = "anthropic-ratelimit-unified-slow-retry-after";
const SLOW_MAX_WAIT: &str = "anthropic-ratelimit-unified-slow-max-wait";
const OVERAGE_IN_USE: &str = "anthropic-ratelimit-unified-overage-in-use";

/// The program the usage endpoint describes and the reset call names.
pub const PROGRAM: &str = "juniper_tide";

const FIVE_HOURS_S: u64 = 5 * 3600;
const SEVEN_DAYS_S: u64 = 7 * 24 * 3600;

/// A credential's usage wall, set with `POST /_mock/wall` or [`crate::MockState::set_wall`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wall {
    pub credential: String,
    /// Unix seconds; the wall falls by itself then.
    pub reset_at: u64,
    /// Whether the wall's 429 offers the slow lane (`slow-offer: treatment`).
    #[serde(default = "yes")]
    pub offer: bool,
    #[serde(default)]
    pub slow: SlowLane,
    /// Sends `anthropic-ratelimit-unified-overage-in-use: true` with every walled answer.
    #[serde(default)]
    pub overage_in_use: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_program: Option<ResetProgram>,
}

/// How the slow lane answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowLane {
    /// One entry per slow request, the last one repeating: `active` or `not_needed`
    /// answer normally, `overloaded` is a 529, anything else (`slot_busy`,
    /// `weekly_limit`, `budget_exhausted`, `off`, `ineligible`, …) a 429.
    #[serde(default = "active")]
    pub statuses: Vec<String>,
    /// `anthropic-ratelimit-unified-slow-retry-after` on `slot_busy` and `overloaded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u64>,
    /// `anthropic-ratelimit-unified-slow-max-wait` on `slot_busy` and `overloaded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wait_s: Option<u64>,
}

impl Default for SlowLane {
    fn default() -> Self {
        Self {
            statuses: active(),
            retry_after_s: None,
            max_wait_s: None,
        }
    }
}

/// What the usage endpoint and the reset call answer for the credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResetProgram {
    #[serde(default = "reset")]
    pub arm: String,
    #[serde(default = "yes")]
    pub available: bool,
    /// `reset` (lifts the wall, then the program answers `already_used`, unavailable),
    /// `not_limited`, `already_used` or `not_offered`.
    #[serde(default = "reset")]
    pub result: String,
    /// Unix seconds, sent by both endpoints when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_available_at: Option<u64>,
}

fn yes() -> bool {
    true
}

fn active() -> Vec<String> {
    vec!["active".to_owned()]
}

fn reset() -> String {
    "reset".to_owned()
}

/// The next multiple of `window` after `now`.
fn next_boundary(now: u64, window: u64) -> u64 {
    (now / window + 1) * window
}

/// How the wall treats one Anthropic request: the headers it adds and, when it refuses
/// the request, the status and message of the refusal.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Lane {
    pub headers: Vec<(&'static str, String)>,
    pub refusal: Option<(u16, String)>,
}

#[derive(Debug)]
struct Entry {
    wall: Wall,
    lifted: bool,
}

/// Every credential's wall.
#[derive(Debug, Default)]
pub(crate) struct Walls(BTreeMap<String, Entry>);

impl Walls {
    pub fn set(&mut self, wall: Wall) {
        self.0.insert(
            wall.credential.clone(),
            Entry {
                wall,
                lifted: false,
            },
        );
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Every wall with whether it is up at `now`, and what is left of its slow statuses.
    pub fn list(&self, now: u64) -> Value {
        let walls: Vec<Value> = self
            .0
            .values()
            .map(|e| json!({"wall": e.wall, "up": e.is_up(now)}))
            .collect();
        json!({ "walls": walls })
    }

    /// The wall's verdict on a `/v1/messages` request of `credential` at `now` (Unix
    /// seconds); consumes a slow status when the request is on the slow lane.
    pub fn lane(&mut self, credential: &str, slow: bool, now: u64) -> Lane {
        let entry = self.0.get_mut(credential).filter(|e| e.is_up(now));
        let (status, five_hour_utilization, five_hour_reset) = match &entry {
            Some(e) => ("rejected", "1.0", e.wall.reset_at),
            None => ("allowed", "0.0", next_boundary(now, FIVE_HOURS_S)),
        };
        let mut headers = vec![
            (STATUS, status.to_owned()),
            (FIVE_HOUR_UTILIZATION, five_hour_utilization.to_owned()),
            (FIVE_HOUR_RESET, five_hour_reset.to_string()),
            (SEVEN_DAY_UTILIZATION, "0.0".to_owned()),
            (
                SEVEN_DAY_RESET,
                next_boundary(now, SEVEN_DAYS_S).to_string(),
            ),
            (RESET, five_hour_reset.to_string()),
        ];
        let Some(entry) = entry else {
            if slow {
                headers.push((SLOW_STATUS, "not_needed".to_owned()));
            }
            return Lane {
                headers,
                refusal: None,
            };
        };
        let wall = &mut entry.wall;
        if wall.overage_in_use {
            headers.push((OVERAGE_IN_USE, "true".to_owned()));
        }
        if !slow {
            if wall.offer {
                headers.push((SLOW_OFFER, "treatment".to_owned()));
            }
            return Lane {
                headers,
                refusal: Some((
                    429,
                    "mock usage wall: this account's 5-hour limit is reached".to_owned(),
                )),
            };
        }
        let status = if wall.slow.statuses.len() > 1 {
            wall.slow.statuses.remove(0)
        } else {
            wall.slow
                .statuses
                .first()
                .cloned()
                .unwrap_or_else(|| "active".to_owned())
        };
        let waits: Vec<(&'static str, String)> = [
            (SLOW_RETRY_AFTER, wall.slow.retry_after_s),
            (SLOW_MAX_WAIT, wall.slow.max_wait_s),
        ]
        .into_iter()
        .filter_map(|(name, s)| s.map(|s| (name, s.to_string())))
        .collect();
        let refusal = match status.as_str() {
            "active" | "not_needed" => None,
            "overloaded" => {
                headers.extend(waits);
                Some((529, "Overloaded".to_owned()))
            }
            other => {
                if other == "slot_busy" {
                    headers.extend(waits);
                }
                Some((429, format!("mock slow lane: {other}")))
            }
        };
        if status != "overloaded" {
            headers.push((SLOW_STATUS, status));
        }
        Lane { headers, refusal }
    }

    /// `GET /api/oauth/usage` for `credential`.
    pub fn usage(&self, credential: &str) -> Value {
        let program = self
            .0
            .get(credential)
            .and_then(|e| e.wall.reset_program.as_ref());
        let block = program.map_or_else(
            || json!({"arm": "none", "available": false}),
            |p| {
                let mut block = json!({"arm": p.arm, "available": p.available});
                if let Some(at) = p.next_available_at {
                    block["next_available_at"] = json!(at);
                }
                block
            },
        );
        json!({ PROGRAM: block })
    }

    /// `POST /api/organizations/{org}/reset_rate_limits` for `credential`: a `reset`
    /// lifts the wall and uses the program up.
    pub fn claim(&mut self, credential: &str) -> Value {
        let Some(entry) = self.0.get_mut(credential) else {
            return json!({"result": "not_offered"});
        };
        let Some(program) = entry.wall.reset_program.as_mut() else {
            return json!({"result": "not_offered"});
        };
        let mut answer = json!({"result": program.result});
        if let Some(at) = program.next_available_at {
            answer["next_available_at"] = json!(at);
        }
        if program.result == "reset" {
            program.result = "already_used".to_owned();
            program.available = false;
            entry.lifted = true;
        }
        answer
    }
}

impl Entry {
    fn is_up(&self, now: u64) -> bool {
        !self.lifted && now < self.wall.reset_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wall(statuses: &[&str]) -> Wall {
        Wall {
            credential: "c".into(),
            reset_at: 2000,
            offer: true,
            slow: SlowLane {
                statuses: statuses.iter().map(|s| (*s).to_owned()).collect(),
                retry_after_s: Some(7),
                max_wait_s: None,
            },
            overage_in_use: false,
            reset_program: None,
        }
    }

    fn named<'a>(lane: &'a Lane, name: &str) -> Option<&'a str> {
        lane.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn the_statuses_are_consumed_in_order_and_the_last_repeats() {
        let mut walls = Walls::default();
        walls.set(wall(&["slot_busy", "overloaded", "active"]));
        let first = walls.lane("c", true, 1000);
        assert_eq!(
            first.refusal,
            Some((429, "mock slow lane: slot_busy".into()))
        );
        assert_eq!(named(&first, SLOW_RETRY_AFTER), Some("7"));
        assert_eq!(named(&first, SLOW_MAX_WAIT), None);
        let second = walls.lane("c", true, 1000);
        assert_eq!(second.refusal, Some((529, "Overloaded".into())));
        assert_eq!(named(&second, SLOW_STATUS), None);
        for _ in 0..2 {
            let ok = walls.lane("c", true, 1000);
            assert_eq!(ok.refusal, None);
            assert_eq!(named(&ok, SLOW_STATUS), Some("active"));
            assert_eq!(named(&ok, STATUS), Some("rejected"));
        }
    }

    #[test]
    fn the_wall_falls_at_its_reset_and_other_credentials_pass() {
        let mut walls = Walls::default();
        walls.set(wall(&[]));
        assert!(walls.lane("c", false, 1999).refusal.is_some());
        let after = walls.lane("c", false, 2000);
        assert_eq!(after.refusal, None);
        assert_eq!(named(&after, STATUS), Some("allowed"));
        assert_eq!(named(&after, FIVE_HOUR_RESET), Some("18000"));
        assert_eq!(named(&after, SEVEN_DAY_RESET), Some("604800"));
        assert_eq!(walls.lane("d", false, 1000).refusal, None);
        let empty = walls.lane("c", true, 1000);
        assert_eq!(named(&empty, SLOW_STATUS), Some("active"));
    }
}
