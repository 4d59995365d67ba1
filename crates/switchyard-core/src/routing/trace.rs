//! A request's routing decision, kept for its trace (SPEC R19): the strategy that
//! ordered the candidates, the facts it read (per candidate, the values it saw), the
//! order it produced, and what moved a candidate first after it (a session pin, a
//! lease). The pipeline hands a [`Decision`] to the request log, which renders it off
//! the request path; the opt-in response header renders it with [`Decision::header`].
//! Data and its renderings only: nothing here decides.

use super::strategy::Needs;
use super::view::CandidateView;
use super::Candidate;
use std::fmt::Write as _;
use std::sync::Arc;

/// What put a connection first after the strategy ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum First {
    /// The request's session pin (SPEC R15).
    Pin,
    /// The request's exclusive lease (SPEC R16).
    Lease,
}

impl First {
    pub fn as_str(self) -> &'static str {
        match self {
            First::Pin => "session-pin",
            First::Lease => "lease",
        }
    }
}

/// One fact's value as the strategy saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fact {
    Count(u64),
    Number(f64),
    Flag(bool),
    /// Not known (no reading, no declared value, no sample yet).
    Unknown,
}

impl std::fmt::Display for Fact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fact::Count(n) => write!(f, "{n}"),
            // Four significant decimals say enough and keep the header short.
            Fact::Number(x) => write!(f, "{}", (x * 10_000.0).round() / 10_000.0),
            Fact::Flag(b) => write!(f, "{b}"),
            Fact::Unknown => f.write_str("unknown"),
        }
    }
}

/// The routing decision of one request.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The strategy's configuration name.
    pub strategy: &'static str,
    /// The facts it read.
    pub read: Needs,
    /// The request's draw, when the strategy read it.
    pub draw: Option<u64>,
    /// The combo's turn (requests before this one), when the strategy read it.
    pub turn: Option<u64>,
    /// The candidates in the order they are tried.
    pub candidates: Arc<[Candidate]>,
    /// Their views, in the same order; empty when the strategy gathered none.
    pub views: Vec<CandidateView>,
    /// What moved a connection first after the strategy.
    pub first: Option<First>,
}

/// An `Option<f64>` as a fact.
fn number(x: Option<f64>) -> Fact {
    x.map_or(Fact::Unknown, Fact::Number)
}

fn count(x: Option<u64>) -> Fact {
    x.map_or(Fact::Unknown, Fact::Count)
}

/// The values of `view` that a strategy reading `read` saw, by name.
pub fn facts(read: Needs, view: &CandidateView) -> Vec<(&'static str, Fact)> {
    let mut out = Vec::new();
    if read.load {
        out.push(("load", Fact::Count(view.load as u64)));
    }
    if read.saturation {
        out.push(("saturated", Fact::Flag(view.saturated)));
    }
    if read.penalty {
        out.push(("penalty", Fact::Number(view.penalty)));
    }
    if read.weight {
        out.push(("weight", Fact::Count(u64::from(view.weight))));
    }
    if read.cost {
        out.push(("cost", number(view.cost)));
    }
    if read.stats {
        out.push(("success", Fact::Number(view.success)));
        out.push(("header_ms", number(view.header_ms)));
        out.push(("used", Fact::Number(view.used)));
    }
    if read.cache {
        out.push(("affinity", Fact::Count(view.affinity)));
    }
    if read.quota {
        let q = &view.quota;
        out.push(("used_5h", number(q.five_hours.map(|r| r.used))));
        out.push((
            "reset_5h_ms",
            count(q.five_hours.and_then(|r| r.reset_in_ms)),
        ));
        out.push(("used_weekly", number(q.weekly.map(|r| r.used))));
        out.push((
            "reset_weekly_ms",
            count(q.weekly.and_then(|r| r.reset_in_ms)),
        ));
        out.push(("used_max", number(q.used_max)));
    }
    if read.last_good {
        out.push(("last_good", Fact::Flag(view.last_good)));
    }
    if read.context {
        out.push(("context_window", count(view.context_window)));
    }
    out
}

/// The longest header value [`Decision::header`] writes; a longer trace is cut (the
/// request log keeps it whole).
pub const MAX_HEADER_BYTES: usize = 4096;

impl Decision {
    /// The facts of the candidate at `i` (in try order), by name.
    pub fn facts_of(&self, i: usize) -> Vec<(&'static str, Fact)> {
        self.views
            .get(i)
            .map(|v| facts(self.read, v))
            .unwrap_or_default()
    }

    /// The trace as one line of visible ASCII, for the opt-in response header:
    /// `strategy=p2c; facts=stats,draw; draw=7; order=alpha/m@alpha-1{success=1,…},…;
    /// first=session-pin`. Other bytes become `?`; a line over [`MAX_HEADER_BYTES`]
    /// ends in `...`.
    pub fn header(&self) -> String {
        let mut line = format!("strategy={}", self.strategy);
        let names = self.read.names();
        if !names.is_empty() {
            let _ = write!(line, "; facts={}", names.join(","));
        }
        if let Some(d) = self.draw {
            let _ = write!(line, "; draw={d}");
        }
        if let Some(t) = self.turn {
            let _ = write!(line, "; turn={t}");
        }
        line.push_str("; order=");
        for (i, c) in self.candidates.iter().enumerate() {
            if i > 0 {
                line.push(',');
            }
            let conn = &c.connection;
            let _ = write!(line, "{}/{}@{}", conn.provider, c.upstream_model, conn.id);
            let facts = self.facts_of(i);
            if !facts.is_empty() {
                line.push('{');
                for (j, (name, value)) in facts.iter().enumerate() {
                    if j > 0 {
                        line.push(',');
                    }
                    let _ = write!(line, "{name}={value}");
                }
                line.push('}');
            }
        }
        if let Some(f) = self.first {
            let _ = write!(line, "; first={}", f.as_str());
        }
        let mut visible: String = line
            .chars()
            .map(|ch| if (' '..='~').contains(&ch) { ch } else { '?' })
            .collect();
        if visible.len() > MAX_HEADER_BYTES {
            visible.truncate(MAX_HEADER_BYTES - 3);
            visible.push_str("...");
        }
        visible
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::view::{QuotaWindows, Reading};

    fn candidate(provider: &str, id: &str, model: &str) -> Candidate {
        Candidate::for_test(provider, id, model, 0)
    }

    #[test]
    fn the_header_names_the_strategy_its_facts_and_the_order() {
        let read = Needs {
            stats: true,
            draw: true,
            ..Needs::NONE
        };
        let views = vec![
            CandidateView {
                success: 0.7,
                header_ms: Some(12.345_67),
                used: 2.0,
                ..CandidateView::default()
            },
            CandidateView::default(),
        ];
        let d = Decision {
            strategy: "p2c",
            read,
            draw: Some(7),
            turn: None,
            candidates: vec![
                candidate("alpha", "alpha-1", "m"),
                candidate("beta", "beté", "m"),
            ]
            .into(),
            views,
            first: Some(First::Pin),
        };
        assert_eq!(
            d.header(),
            "strategy=p2c; facts=draw,stats; draw=7; order=alpha/m@alpha-1{success=0.7,header_ms=12.3457,used=2},beta/m@bet?{success=1,header_ms=unknown,used=0}; first=session-pin"
        );
        let plain = Decision {
            strategy: "priority",
            read: Needs::NONE,
            draw: None,
            turn: None,
            candidates: vec![candidate("alpha", "alpha-1", "m")].into(),
            views: Vec::new(),
            first: None,
        };
        assert_eq!(plain.header(), "strategy=priority; order=alpha/m@alpha-1");
        assert!(plain.facts_of(0).is_empty());
        let long = Decision {
            candidates: (0..400)
                .map(|i| candidate("alpha", &format!("alpha-{i}"), "mock-small"))
                .collect::<Vec<_>>()
                .into(),
            ..plain
        };
        let h = long.header();
        assert_eq!(h.len(), MAX_HEADER_BYTES);
        assert!(h.ends_with("..."));
    }

    #[test]
    fn each_fact_read_is_listed_with_its_value() {
        let all = Needs {
            load: true,
            saturation: true,
            penalty: true,
            weight: true,
            cost: true,
            draw: true,
            turn: true,
            stats: true,
            cache: true,
            quota: true,
            last_good: true,
            context: true,
        };
        let view = CandidateView {
            load: 3,
            weight: 2,
            cost: Some(1.5),
            affinity: 9,
            quota: QuotaWindows {
                five_hours: Some(Reading {
                    used: 0.25,
                    reset_in_ms: Some(1_000),
                }),
                weekly: None,
                used_max: Some(0.25),
            },
            last_good: true,
            context_window: Some(128_000),
            ..CandidateView::default()
        };
        let shown: Vec<String> = facts(all, &view)
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        assert_eq!(
            shown,
            [
                "load=3",
                "saturated=false",
                "penalty=1",
                "weight=2",
                "cost=1.5",
                "success=1",
                "header_ms=unknown",
                "used=0",
                "affinity=9",
                "used_5h=0.25",
                "reset_5h_ms=1000",
                "used_weekly=unknown",
                "reset_weekly_ms=unknown",
                "used_max=0.25",
                "last_good=true",
                "context_window=128000"
            ]
        );
        assert_eq!(
            all.names(),
            [
                "load",
                "saturation",
                "penalty",
                "weight",
                "cost",
                "draw",
                "turn",
                "stats",
                "cache",
                "quota",
                "last_good",
                "context"
            ]
        );
        assert!(facts(Needs::NONE, &view).is_empty());
    }
}
