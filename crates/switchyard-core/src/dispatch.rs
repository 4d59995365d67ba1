//! The attempt loop of one request as a state machine: which candidate to try next, how
//! (taking a concurrency slot at once, or waiting for one), when a round is over, whether
//! a combo waits out its targets' cooldowns (SPEC R9), and which answer or error wins
//! when nothing succeeded. The shell asks [`Dispatch::step`] for a [`Step`], carries it
//! out, and reports what happened; it decides nothing itself.
//!
//! The rules, in the order they apply:
//!
//! - Candidates are tried in plan order. One whose slots are all taken is passed over at
//!   first ([`Report::Busy`]); when nothing else could start at once, the passed-over ones
//!   are tried again, waiting for a slot, with one `maxWaitMs` budget shared by the whole
//!   request ([`Dispatch::waited_for_slot`]).
//! - A recovering target not yet in its slow-start share ([`Reason::Warming`]) goes to the
//!   back once, and is tried there if nothing before it succeeded. It may only be deferred
//!   while other candidates remain.
//! - A non-retryable upstream answer (401, 403, 400 …) is returned as it is at once —
//!   unless a deferred candidate is still queued: then it is parked, the round goes on
//!   (saturated candidates included), and it is returned when nothing better answers.
//! - An answer that another target may not repeat ([`Report::Advance`], a context too
//!   long for one model's window) goes on to the next candidate with another window,
//!   passing over the same model's other accounts; the first such answer is returned
//!   when nothing better answers.
//! - An attempt that may be repeated on the same account ([`Report::RetrySame`], a stream
//!   abandoned before anything reached the client, SPEC R12) is tried again at once, once;
//!   a second such report counts as its failure.
//! - After a round without an answer, a combo (not a quota-share one) whose targets are
//!   all held back by something brief, or that ended on a 429, asks for the current holds
//!   ([`Step::CheckHolds`]) and waits for the earliest to end, within the R9 bounds.
//! - Otherwise the error: the last upstream failure (with the soonest usable time when
//!   the upstream announced none); else a quota refusal (the one that clears soonest);
//!   else a queue refusal; else, nothing was attempted: an open breaker on a direct
//!   request, targets cooling down, or nothing executable.
//!
//! The machine holds the shell's payloads without looking inside them: `B` a quota
//! refusal, `P` a parked upstream answer, `F` an upstream failure's details.
//!
//! It sends nothing, takes no slot and never sleeps: time is the `now` given with the
//! holds ([`Dispatch::holds`]), and a wait is a `Step::Sleep` the shell carries out.

use crate::outcome::AttemptFailure;
use crate::resilience::admission::Refusal;
use crate::resilience::combo_wait::{self, Decision, Hold};
use crate::routing::{Exclusion, Reason};
use crate::UnixMillis;
use std::collections::VecDeque;

/// What the shell does next.
#[derive(Debug, PartialEq)]
pub enum Step<B, P, F> {
    /// Attempt a candidate, then [`Dispatch::report`] unless it answered.
    Try(Try),
    /// Report what holds each candidate back now ([`Dispatch::holds`]).
    CheckHolds,
    /// Sleep this long, then ask again: the combo waits out its targets (SPEC R9).
    Sleep { ms: u64 },
    /// Nothing succeeded: the answer or error for the client.
    Done(End<B, P, F>),
}

/// One attempt to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Try {
    /// Index into the plan's candidates.
    pub candidate: usize,
    /// How to take the concurrency slots.
    pub slot: Slot,
    /// A recovering target may be passed over (other candidates remain).
    pub may_defer: bool,
    /// Nothing else is queued in this round: no other candidate to fail over to.
    pub last: bool,
}

/// How an attempt takes its concurrency slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Only if free now; otherwise report [`Report::Busy`].
    IfFree,
    /// Waiting for them; `waited_ms` of the request's wait budget is already spent.
    Wait { waited_ms: u64 },
}

/// What an attempt that did not answer came to.
#[derive(Debug, PartialEq)]
pub enum Report<B, P, F> {
    /// Its slots were taken ([`Slot::IfFree`]).
    Busy,
    /// It was left out: by a resilience state machine (breaker, cooldown, lockout, slow
    /// start …) or by the concurrency gate's refusal ([`Reason::SlotRefused`]).
    Excluded(Exclusion),
    /// Its quota pool refused the key: the exclusion ([`Reason::QuotaBlocked`]) and the
    /// pool's refusal, which the client sees if it wins.
    QuotaBlocked { exclusion: Exclusion, block: B },
    /// It vanished from the configuration mid-request.
    Gone,
    /// The upstream failed in a way another candidate may fix.
    Failed {
        failure: AttemptFailure,
        /// The upstream said when to retry (its `Retry-After` is relayed).
        announced: bool,
        detail: F,
    },
    /// The upstream answered with an error that is the client's to see.
    Rejected(P),
    /// The upstream refused the request in a way another target may not (a context too
    /// long for this model's window): the candidates with the same window (`same`, plan
    /// indices: the provider's other accounts of the model) are passed over, the next
    /// other one is tried, and the client sees this answer if none answers.
    Advance { answer: P, same: Vec<usize> },
    /// The upstream failed before anything reached the client in a way the same account
    /// may not repeat (a crawling stream, SPEC R12): try it once more, then go on.
    RetrySame { failure: AttemptFailure, detail: F },
}

/// How a request ends without a successful answer.
#[derive(Debug, PartialEq)]
pub enum End<B, P, F> {
    /// A parked upstream error answer, as it is.
    Answer(P),
    /// The last upstream failure; `soonest_ms` is when a candidate is usable again, when
    /// the upstream did not say (`None` when none comes back on its own).
    Upstream {
        failure: AttemptFailure,
        detail: F,
        soonest_ms: Option<u64>,
    },
    /// Every target of the combo is held back briefly and waiting is not allowed (R9).
    RateLimited {
        retry_after_ms: u64,
        reset_at_ms: UnixMillis,
    },
    /// Every target of the combo is held back by something lasting (R9).
    AllSkipped { excluded: Vec<Exclusion> },
    /// A quota pool refused the key on every candidate it was asked on.
    Quota(B),
    /// A concurrency gate refused.
    Queue {
        refusal: Refusal,
        connection: String,
    },
    /// A direct request's provider breaker is open.
    CircuitOpen { retry_after_ms: u64 },
    /// Every candidate is cooling down; the soonest comes back in `retry_after_ms`.
    AllCooling {
        excluded: Vec<Exclusion>,
        retry_after_ms: u64,
    },
    /// Nothing can run the request: the plan's exclusions, then the candidates out of
    /// service.
    NoExecutable { excluded: Vec<Exclusion> },
}

/// One candidate's place in the round.
#[derive(Debug, Clone, Copy)]
struct Entry {
    candidate: usize,
    /// May still be deferred once (slow start).
    deferrable: bool,
    /// Waits for its slots.
    wait: bool,
    /// Already repeated once on the same account ([`Report::RetrySame`]).
    retried: bool,
}

/// What the machine waits for after a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    /// The holds, to decide the combo wait.
    ComboHolds,
    /// The holds, for the soonest usable time of the upstream error.
    Soonest,
}

/// One round over the candidates.
#[derive(Debug)]
struct Round<B, P, F> {
    queue: VecDeque<Entry>,
    saturated: Vec<usize>,
    current: Option<Entry>,
    last: Option<(AttemptFailure, bool, F)>,
    blocked: Option<(B, u64)>,
    cooling: Vec<Exclusion>,
    refused: Option<(Refusal, String)>,
    parked: Option<P>,
    /// A rejection to return at once.
    rejected: Option<P>,
}

impl<B, P, F> Round<B, P, F> {
    fn new(candidates: usize) -> Self {
        Self {
            queue: (0..candidates)
                .map(|candidate| Entry {
                    candidate,
                    deferrable: true,
                    wait: false,
                    retried: false,
                })
                .collect(),
            saturated: Vec::new(),
            current: None,
            last: None,
            blocked: None,
            cooling: Vec::new(),
            refused: None,
            parked: None,
            rejected: None,
        }
    }
}

/// The request's dispatch: see the module docs.
#[derive(Debug)]
pub struct Dispatch<B, P, F> {
    candidates: usize,
    /// A combo that may wait out its targets (R9): a user combo, not quota-share.
    combo_waits: bool,
    /// A combo (not a direct `provider/model` request).
    combo: bool,
    wait_settings: combo_wait::Settings,
    arrived: UnixMillis,
    waited: u32,
    slot_waited_ms: u64,
    excluded: Vec<Exclusion>,
    round: Round<B, P, F>,
    asked: Option<Asked>,
    holds: Option<(Option<Vec<Reason>>, UnixMillis)>,
}

impl<B, P, F> Dispatch<B, P, F> {
    /// A dispatch over `candidates` plan entries that arrived at `arrived`. `excluded`
    /// are the plan's own exclusions (reported when nothing is executable);
    /// `combo_waits` enables the R9 wait with `wait_settings`.
    pub fn new(
        candidates: usize,
        excluded: Vec<Exclusion>,
        combo: bool,
        combo_waits: bool,
        wait_settings: combo_wait::Settings,
        arrived: UnixMillis,
    ) -> Self {
        Self {
            candidates,
            combo_waits: combo && combo_waits,
            combo,
            wait_settings,
            arrived,
            waited: 0,
            slot_waited_ms: 0,
            excluded,
            round: Round::new(candidates),
            asked: None,
            holds: None,
        }
    }

    /// Adds time spent waiting for slots to the request's wait budget.
    pub fn waited_for_slot(&mut self, ms: u64) {
        self.slot_waited_ms = self.slot_waited_ms.saturating_add(ms);
    }

    /// Reports the current attempt's result.
    pub fn report(&mut self, report: Report<B, P, F>) {
        let Some(entry) = self.round.current.take() else {
            return;
        };
        let round = &mut self.round;
        match report {
            Report::Busy => round.saturated.push(entry.candidate),
            Report::Excluded(e) => match e.reason {
                Reason::Warming => round.queue.push_back(Entry {
                    deferrable: false,
                    ..entry
                }),
                Reason::SlotRefused(refusal) => {
                    round.refused.get_or_insert((refusal, e.connection));
                }
                _ => round.cooling.push(e),
            },
            Report::QuotaBlocked { exclusion, block } => {
                let rank = exclusion.retry_after_ms().unwrap_or(u64::MAX);
                if round.blocked.as_ref().is_none_or(|(_, r)| rank < *r) {
                    round.blocked = Some((block, rank));
                }
            }
            Report::Gone => {}
            Report::Failed {
                failure,
                announced,
                detail,
            } => round.last = Some((failure, announced, detail)),
            Report::Rejected(answer) if round.queue.iter().any(|e| !e.deferrable) => {
                round.parked = Some(answer);
            }
            Report::Rejected(answer) => round.rejected = Some(answer),
            Report::Advance { answer, same } => {
                round.parked.get_or_insert(answer);
                round.queue.retain(|e| !same.contains(&e.candidate));
                round.saturated.retain(|c| !same.contains(c));
            }
            Report::RetrySame { failure, detail } => {
                round.last = Some((failure, false, detail));
                if !entry.retried {
                    round.queue.push_front(Entry {
                        retried: true,
                        ..entry
                    });
                }
            }
        }
    }

    /// Reports what holds each candidate back at `now`: `None` when one of them could be
    /// tried at once. The only decision that depends on time (the R9 wait) is taken with
    /// this `now`.
    pub fn holds(&mut self, holds: Option<Vec<Reason>>, now: UnixMillis) {
        if self.asked.is_some() {
            self.holds = Some((holds, now));
        }
    }

    /// The next step.
    pub fn step(&mut self) -> Step<B, P, F> {
        if let Some(asked) = self.asked {
            let Some((holds, now)) = self.holds.take() else {
                return Step::CheckHolds;
            };
            self.asked = None;
            return match asked {
                Asked::ComboHolds => self.after_combo_holds(holds, now),
                Asked::Soonest => self.upstream_error(holds),
            };
        }
        let round = &mut self.round;
        if let Some(answer) = round.rejected.take() {
            return Step::Done(End::Answer(answer));
        }
        if round.queue.is_empty() && !round.saturated.is_empty() {
            // Nothing left that could start at once: wait for the saturated ones.
            let saturated = std::mem::take(&mut round.saturated);
            round
                .queue
                .extend(saturated.into_iter().map(|candidate| Entry {
                    candidate,
                    deferrable: false,
                    wait: true,
                    retried: false,
                }));
        }
        if let Some(entry) = round.queue.pop_front() {
            round.current = Some(entry);
            return Step::Try(Try {
                candidate: entry.candidate,
                slot: if entry.wait {
                    Slot::Wait {
                        waited_ms: self.slot_waited_ms,
                    }
                } else {
                    Slot::IfFree
                },
                may_defer: entry.deferrable && !round.queue.is_empty(),
                last: round.queue.is_empty() && round.saturated.is_empty(),
            });
        }
        self.round_over()
    }

    /// The round ended without an answer.
    fn round_over(&mut self) -> Step<B, P, F> {
        let round = &mut self.round;
        if let Some(answer) = round.parked.take() {
            return Step::Done(End::Answer(answer));
        }
        let rate_limited = round
            .last
            .as_ref()
            .is_some_and(|(f, ..)| *f == AttemptFailure::Status(429));
        if self.combo_waits && (self.only_cooling() || rate_limited) {
            self.asked = Some(Asked::ComboHolds);
            return Step::CheckHolds;
        }
        self.error()
    }

    /// Nothing was attempted and nothing but resilience held the candidates back.
    fn only_cooling(&self) -> bool {
        let r = &self.round;
        r.last.is_none() && r.blocked.is_none() && r.refused.is_none()
    }

    fn after_combo_holds(&mut self, holds: Option<Vec<Reason>>, now: UnixMillis) -> Step<B, P, F> {
        let Some(holds) = holds else {
            return self.error();
        };
        let holds: Vec<Hold> = holds.iter().map(|r| r.hold()).collect();
        match combo_wait::decide(
            &self.wait_settings,
            &holds,
            self.waited,
            now.saturating_sub(self.arrived),
        ) {
            Decision::Wait { ms } => {
                self.waited += 1;
                self.round = Round::new(self.candidates);
                Step::Sleep { ms }
            }
            Decision::RateLimited { retry_after_ms } => Step::Done(End::RateLimited {
                retry_after_ms,
                reset_at_ms: now.saturating_add(retry_after_ms),
            }),
            Decision::NoTransientHold if self.only_cooling() => Step::Done(End::AllSkipped {
                excluded: std::mem::take(&mut self.round.cooling),
            }),
            Decision::NoTransientHold => self.error(),
        }
    }

    /// The error of a round that ended without an answer.
    fn error(&mut self) -> Step<B, P, F> {
        let round = &mut self.round;
        if let Some((_, announced, _)) = &round.last {
            if *announced {
                return self.upstream_error(None);
            }
            self.asked = Some(Asked::Soonest);
            return Step::CheckHolds;
        }
        if let Some((block, _)) = round.blocked.take() {
            return Step::Done(End::Quota(block));
        }
        if let Some((refusal, connection)) = round.refused.take() {
            return Step::Done(End::Queue {
                refusal,
                connection,
            });
        }
        let cooling = std::mem::take(&mut round.cooling);
        Step::Done(nothing_attempted(
            self.combo,
            cooling,
            std::mem::take(&mut self.excluded),
        ))
    }

    /// The last upstream failure, with the soonest usable time from `holds` when the
    /// upstream announced none (`holds` is `None` when one is usable now).
    fn upstream_error(&mut self, holds: Option<Vec<Reason>>) -> Step<B, P, F> {
        let Some((failure, announced, detail)) = self.round.last.take() else {
            return self.error();
        };
        let soonest_ms = if announced {
            None
        } else {
            match holds {
                None => Some(0),
                Some(h) => h.iter().filter_map(|r| r.retry_after_ms()).min(),
            }
        };
        Step::Done(End::Upstream {
            failure,
            detail,
            soonest_ms,
        })
    }
}

/// The error when no candidate could be attempted (SPEC R1, R18): one provider's open
/// breaker on a direct request → its breaker; targets that will come back → cooling
/// with the soonest; nothing that comes back on its own → nothing executable.
fn nothing_attempted<B, P, F>(
    combo: bool,
    cooling: Vec<Exclusion>,
    mut excluded: Vec<Exclusion>,
) -> End<B, P, F> {
    let Some(retry_after_ms) = cooling.iter().filter_map(Exclusion::retry_after_ms).min() else {
        excluded.extend(cooling);
        return End::NoExecutable { excluded };
    };
    let all_breakers = cooling
        .iter()
        .all(|c| matches!(c.reason, Reason::CircuitOpen { .. }));
    if !combo && all_breakers {
        return End::CircuitOpen { retry_after_ms };
    }
    End::AllCooling {
        excluded: cooling,
        retry_after_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resilience::cooldown::Terminal;

    type D = Dispatch<&'static str, &'static str, &'static str>;
    type S = Step<&'static str, &'static str, &'static str>;
    type R = Report<&'static str, &'static str, &'static str>;

    const WAIT: combo_wait::Settings = combo_wait::DEFAULTS;

    fn direct(n: usize) -> D {
        Dispatch::new(n, Vec::new(), false, true, WAIT, 1_000)
    }

    fn combo(n: usize) -> D {
        Dispatch::new(n, Vec::new(), true, true, WAIT, 1_000)
    }

    /// A first try in a round without saturated candidates: the last one is the one
    /// that may not be deferred.
    fn try_now(candidate: usize, may_defer: bool) -> S {
        Step::Try(Try {
            candidate,
            slot: Slot::IfFree,
            may_defer,
            last: !may_defer,
        })
    }

    /// The last try that may start at once while saturated candidates wait.
    fn try_before_waiting(candidate: usize) -> S {
        Step::Try(Try {
            candidate,
            slot: Slot::IfFree,
            may_defer: false,
            last: false,
        })
    }

    fn try_waiting(candidate: usize, waited_ms: u64, last: bool) -> S {
        Step::Try(Try {
            candidate,
            slot: Slot::Wait { waited_ms },
            may_defer: false,
            last,
        })
    }

    fn ex(connection: &str, reason: Reason) -> Exclusion {
        Exclusion {
            target: format!("p/{connection}"),
            connection: connection.into(),
            reason,
        }
    }

    fn refused(connection: &str, refusal: Refusal) -> R {
        Report::Excluded(ex(connection, Reason::SlotRefused(refusal)))
    }

    fn blocked(block: &'static str, retry_after_ms: Option<u64>) -> R {
        Report::QuotaBlocked {
            exclusion: ex("q", Reason::QuotaBlocked { retry_after_ms }),
            block,
        }
    }

    fn failed(failure: AttemptFailure, announced: bool, detail: &'static str) -> R {
        Report::Failed {
            failure,
            announced,
            detail,
        }
    }

    const OPEN: Reason = Reason::CircuitOpen {
        retry_after_ms: 3_000,
    };
    const COOL: Reason = Reason::CoolingDown {
        retry_after_ms: 2_000,
        transient: true,
    };

    #[test]
    fn candidates_are_tried_in_order_and_the_last_failure_wins() {
        let mut d = direct(2);
        assert_eq!(d.step(), try_now(0, true));
        d.report(failed(AttemptFailure::Status(500), false, "first"));
        assert_eq!(d.step(), try_now(1, false));
        d.report(failed(AttemptFailure::Connect, false, "second"));
        assert_eq!(d.step(), Step::CheckHolds);
        d.holds(Some(vec![COOL, OPEN]), 0);
        assert_eq!(
            d.step(),
            Step::Done(End::Upstream {
                failure: AttemptFailure::Connect,
                detail: "second",
                soonest_ms: Some(2_000),
            })
        );
    }

    #[test]
    fn an_announced_retry_after_needs_no_holds_and_a_usable_candidate_means_zero() {
        let mut d = direct(1);
        assert_eq!(d.step(), try_now(0, false));
        d.report(failed(AttemptFailure::Status(429), true, "limited"));
        assert_eq!(
            d.step(),
            Step::Done(End::Upstream {
                failure: AttemptFailure::Status(429),
                detail: "limited",
                soonest_ms: None,
            })
        );
        let mut d = direct(1);
        d.step();
        d.report(failed(AttemptFailure::Reset, false, "reset"));
        assert_eq!(d.step(), Step::CheckHolds);
        d.holds(None, 0);
        assert_eq!(
            d.step(),
            Step::Done(End::Upstream {
                failure: AttemptFailure::Reset,
                detail: "reset",
                soonest_ms: Some(0),
            })
        );
        // Terminal holds only: nothing comes back on its own.
        let mut d = direct(1);
        d.step();
        d.report(failed(AttemptFailure::Reset, false, "reset"));
        d.step();
        d.holds(Some(vec![Reason::Terminal(Terminal::Banned)]), 0);
        assert_eq!(
            d.step(),
            Step::Done(End::Upstream {
                failure: AttemptFailure::Reset,
                detail: "reset",
                soonest_ms: None,
            })
        );
    }

    #[test]
    fn a_busy_candidate_is_passed_over_then_waited_for_with_one_shared_budget() {
        let mut d = direct(3);
        assert_eq!(d.step(), try_now(0, true));
        d.report(Report::Busy);
        assert_eq!(d.step(), try_now(1, true));
        d.report(Report::Busy);
        assert_eq!(d.step(), try_before_waiting(2));
        d.report(failed(AttemptFailure::Status(503), false, "third"));
        assert_eq!(d.step(), try_waiting(0, 0, false));
        d.waited_for_slot(40);
        d.report(refused("c0", Refusal::QueueTimeout));
        assert_eq!(d.step(), try_waiting(1, 40, true));
        d.waited_for_slot(10);
        d.report(refused("c1", Refusal::QueueFull));
        // The upstream failure outranks the queue refusals.
        assert_eq!(d.step(), Step::CheckHolds);
    }

    #[test]
    fn a_queue_refusal_is_the_error_when_nothing_was_attempted_and_the_first_one_wins() {
        let mut d = direct(2);
        d.step();
        d.report(Report::Busy);
        d.step();
        d.report(Report::Busy);
        assert_eq!(d.step(), try_waiting(0, 0, false));
        d.report(refused("c0", Refusal::QueueTimeout));
        assert_eq!(d.step(), try_waiting(1, 0, true));
        d.report(refused("c1", Refusal::QueueFull));
        assert_eq!(
            d.step(),
            Step::Done(End::Queue {
                refusal: Refusal::QueueTimeout,
                connection: "c0".into(),
            })
        );
    }

    #[test]
    fn a_warming_candidate_goes_to_the_back_once_and_is_tried_there() {
        let mut d = direct(3);
        assert_eq!(d.step(), try_now(0, true));
        d.report(Report::Excluded(ex("c0", Reason::Warming)));
        assert_eq!(d.step(), try_now(1, true));
        d.report(failed(AttemptFailure::Status(500), false, "one"));
        assert_eq!(d.step(), try_now(2, true));
        d.report(failed(AttemptFailure::Status(500), false, "two"));
        // Deferred once, it may not be deferred again.
        assert_eq!(d.step(), try_now(0, false));
        d.report(failed(AttemptFailure::Status(502), false, "zero"));
        assert_eq!(d.step(), Step::CheckHolds);
    }

    #[test]
    fn a_stream_abandoned_before_commit_is_retried_once_on_the_same_account() {
        let mut d = direct(2);
        assert_eq!(d.step(), try_now(0, true));
        let crawl = AttemptFailure::Stream(crate::outcome::StreamCut::Throughput);
        d.report(Report::RetrySame {
            failure: crawl,
            detail: "crawl",
        });
        assert_eq!(d.step(), try_now(0, true));
        d.report(Report::RetrySame {
            failure: crawl,
            detail: "crawl again",
        });
        assert_eq!(d.step(), try_now(1, false));
        d.report(Report::RetrySame {
            failure: crawl,
            detail: "crawl on c1",
        });
        assert_eq!(d.step(), try_now(1, false));
        d.report(Report::RetrySame {
            failure: crawl,
            detail: "crawl on c1 again",
        });
        assert_eq!(d.step(), Step::CheckHolds);
        d.holds(None, 2_000);
        assert_eq!(
            d.step(),
            Step::Done(End::Upstream {
                failure: crawl,
                detail: "crawl on c1 again",
                soonest_ms: Some(0),
            })
        );
    }

    #[test]
    fn the_last_candidate_is_never_deferred() {
        let mut d = direct(1);
        assert_eq!(d.step(), try_now(0, false));
    }

    #[test]
    fn a_rejection_is_parked_while_a_deferred_candidate_remains_and_returned_otherwise() {
        // Nothing deferred: returned at once, the next candidate is not tried.
        let mut d = direct(2);
        d.step();
        d.report(Report::Rejected("401 body"));
        assert_eq!(d.step(), Step::Done(End::Answer("401 body")));

        // A deferred candidate remains: it is tried first; its failure does not win over
        // the parked answer.
        let mut d = direct(2);
        assert_eq!(d.step(), try_now(0, true));
        d.report(Report::Excluded(ex("c0", Reason::Warming)));
        assert_eq!(d.step(), try_now(1, true));
        d.report(Report::Rejected("403 body"));
        assert_eq!(d.step(), try_now(0, false));
        d.report(failed(AttemptFailure::Status(500), false, "late"));
        assert_eq!(d.step(), Step::Done(End::Answer("403 body")));
    }

    #[test]
    fn an_advancing_answer_passes_over_its_model_and_is_returned_when_nothing_answers() {
        // c0 and c2 serve the same model: c0 cannot take the context, so c2 is passed
        // over; c1 and c3 are tried, and c3's 503 does not win over the client's answer.
        let mut d = direct(4);
        assert_eq!(d.step(), try_now(0, true));
        d.report(Report::Advance {
            answer: "400 too long",
            same: vec![0, 2],
        });
        assert_eq!(d.step(), try_now(1, true));
        d.report(Report::Advance {
            answer: "400 too long again",
            same: vec![1],
        });
        assert_eq!(d.step(), try_now(3, false));
        d.report(failed(AttemptFailure::Status(503), false, "down"));
        assert_eq!(d.step(), Step::Done(End::Answer("400 too long")));
    }

    #[test]
    fn a_parked_rejection_waits_for_the_saturated_candidates_too() {
        // c0's slots are taken, c1 is deferred by slow start, c2 rejects: the rejection
        // is parked, c1 is tried, then c0 is waited for; it is returned only when
        // nothing answered.
        let mut d = direct(3);
        assert_eq!(d.step(), try_now(0, true));
        d.report(Report::Busy);
        assert_eq!(d.step(), try_now(1, true));
        d.report(Report::Excluded(ex("c1", Reason::Warming)));
        assert_eq!(d.step(), try_now(2, true));
        d.report(Report::Rejected("401 body"));
        assert_eq!(d.step(), try_before_waiting(1));
        d.report(failed(AttemptFailure::Status(500), false, "c1"));
        assert_eq!(d.step(), try_waiting(0, 0, true));
        d.report(failed(AttemptFailure::Status(502), false, "c0"));
        assert_eq!(d.step(), Step::Done(End::Answer("401 body")));

        // Without a deferred candidate queued, the saturated ones are not waited for.
        let mut d = direct(2);
        d.step();
        d.report(Report::Busy);
        assert_eq!(d.step(), try_before_waiting(1));
        d.report(Report::Rejected("403 body"));
        assert_eq!(d.step(), Step::Done(End::Answer("403 body")));
    }

    #[test]
    fn the_quota_refusal_that_clears_soonest_wins_when_nothing_was_attempted() {
        let mut d = direct(3);
        d.step();
        d.report(blocked("never", None));
        d.step();
        d.report(blocked("in 5 s", Some(5_000)));
        d.step();
        d.report(blocked("also 5 s", Some(5_000)));
        assert_eq!(d.step(), Step::Done(End::Quota("in 5 s")));

        // A queue refusal ranks below a quota refusal.
        let mut d = direct(2);
        d.step();
        d.report(Report::Busy);
        d.step();
        d.report(blocked("quota", Some(1)));
        d.step();
        d.report(refused("c0", Refusal::QueueFull));
        assert_eq!(d.step(), Step::Done(End::Quota("quota")));
    }

    #[test]
    fn a_direct_request_behind_open_breakers_gets_the_breaker_error() {
        let mut d = direct(2);
        d.step();
        d.report(Report::Excluded(ex("c0", OPEN)));
        d.step();
        d.report(Report::Excluded(ex(
            "c1",
            Reason::CircuitOpen {
                retry_after_ms: 1_500,
            },
        )));
        assert_eq!(
            d.step(),
            Step::Done(End::CircuitOpen {
                retry_after_ms: 1_500
            })
        );
    }

    #[test]
    fn cooling_candidates_give_the_soonest_retry_and_terminal_ones_nothing_executable() {
        let mut d = direct(2);
        d.step();
        d.report(Report::Excluded(ex("c0", OPEN)));
        d.step();
        d.report(Report::Excluded(ex("c1", COOL)));
        assert_eq!(
            d.step(),
            Step::Done(End::AllCooling {
                excluded: vec![ex("c0", OPEN), ex("c1", COOL)],
                retry_after_ms: 2_000,
            })
        );

        let plan_excluded = vec![ex("c9", Reason::Disabled)];
        let mut d: D = Dispatch::new(1, plan_excluded, false, true, WAIT, 0);
        d.step();
        let banned = ex("c0", Reason::Terminal(Terminal::Banned));
        d.report(Report::Excluded(banned.clone()));
        assert_eq!(
            d.step(),
            Step::Done(End::NoExecutable {
                excluded: vec![ex("c9", Reason::Disabled), banned],
            })
        );
    }

    #[test]
    fn a_combo_behind_brief_holds_waits_for_the_earliest_then_goes_round_again() {
        let mut d = combo(2);
        d.step();
        d.report(Report::Excluded(ex("c0", OPEN)));
        d.step();
        d.report(Report::Excluded(ex("c1", COOL)));
        assert_eq!(d.step(), Step::CheckHolds);
        // Asking again before answering asks again.
        assert_eq!(d.step(), Step::CheckHolds);
        d.holds(Some(vec![OPEN, COOL]), 1_000);
        assert_eq!(d.step(), Step::Sleep { ms: 2_000 });
        // A fresh round over every candidate.
        assert_eq!(d.step(), try_now(0, true));
        d.report(failed(AttemptFailure::Status(500), false, "after the wait"));
        assert_eq!(d.step(), try_now(1, false));
    }

    #[test]
    fn a_combo_that_ended_on_a_429_waits_too() {
        let mut d = combo(1);
        d.step();
        d.report(failed(AttemptFailure::Status(429), true, "429"));
        assert_eq!(d.step(), Step::CheckHolds);
        d.holds(
            Some(vec![Reason::CoolingDown {
                retry_after_ms: 500,
                transient: true,
            }]),
            1_000,
        );
        assert_eq!(d.step(), Step::Sleep { ms: 500 });
    }

    #[test]
    fn a_combo_whose_target_is_usable_now_does_not_wait() {
        let mut d = combo(1);
        d.step();
        d.report(failed(AttemptFailure::Status(429), true, "429"));
        assert_eq!(d.step(), Step::CheckHolds);
        d.holds(None, 1_000);
        assert_eq!(
            d.step(),
            Step::Done(End::Upstream {
                failure: AttemptFailure::Status(429),
                detail: "429",
                soonest_ms: None,
            })
        );
    }

    #[test]
    fn waits_end_at_the_attempt_limit_and_the_budget_with_rate_limited() {
        let mut d = combo(1);
        for round in 0..WAIT.max_attempts {
            d.step();
            d.report(Report::Excluded(ex("c0", COOL)));
            assert_eq!(d.step(), Step::CheckHolds, "round {round}");
            d.holds(Some(vec![COOL]), 1_000);
            assert_eq!(d.step(), Step::Sleep { ms: 2_000 });
        }
        d.step();
        d.report(Report::Excluded(ex("c0", COOL)));
        d.step();
        d.holds(Some(vec![COOL]), 1_000);
        assert_eq!(
            d.step(),
            Step::Done(End::RateLimited {
                retry_after_ms: 2_000,
                reset_at_ms: 3_000,
            })
        );

        // The budget: arrived at 1 000, budget 300 000; at 299 500 only 1 500 are left.
        let mut d = combo(1);
        d.step();
        d.report(Report::Excluded(ex("c0", COOL)));
        d.step();
        d.holds(Some(vec![COOL]), 299_500);
        assert_eq!(
            d.step(),
            Step::Done(End::RateLimited {
                retry_after_ms: 2_000,
                reset_at_ms: 301_500,
            })
        );
    }

    #[test]
    fn a_combo_held_by_lasting_exclusions_only_is_all_skipped() {
        let mut d = combo(2);
        let auth = Reason::CoolingDown {
            retry_after_ms: 60_000,
            transient: false,
        };
        d.step();
        d.report(Report::Excluded(ex("c0", auth)));
        d.step();
        d.report(Report::Excluded(ex(
            "c1",
            Reason::Terminal(Terminal::Expired),
        )));
        assert_eq!(d.step(), Step::CheckHolds);
        d.holds(Some(vec![auth, Reason::Terminal(Terminal::Expired)]), 1_000);
        assert_eq!(
            d.step(),
            Step::Done(End::AllSkipped {
                excluded: vec![
                    ex("c0", auth),
                    ex("c1", Reason::Terminal(Terminal::Expired))
                ],
            })
        );
    }

    #[test]
    fn a_combo_with_a_quota_refusal_does_not_wait_and_answers_the_quota_error() {
        let mut d = combo(2);
        d.step();
        d.report(blocked("quota", Some(100)));
        d.step();
        d.report(Report::Excluded(ex("c1", COOL)));
        assert_eq!(d.step(), Step::Done(End::Quota("quota")));
    }

    #[test]
    fn a_combo_that_may_not_wait_falls_through_to_the_error() {
        let mut d: D = Dispatch::new(1, Vec::new(), true, false, WAIT, 0);
        d.step();
        d.report(Report::Excluded(ex("c0", COOL)));
        assert_eq!(
            d.step(),
            Step::Done(End::AllCooling {
                excluded: vec![ex("c0", COOL)],
                retry_after_ms: 2_000,
            })
        );
    }

    #[test]
    fn a_vanished_candidate_is_skipped_silently() {
        let mut d = direct(2);
        d.step();
        d.report(Report::Gone);
        assert_eq!(d.step(), try_now(1, false));
        d.report(Report::Gone);
        assert_eq!(
            d.step(),
            Step::Done(End::NoExecutable {
                excluded: Vec::new()
            })
        );
    }

    #[test]
    fn a_report_without_a_try_and_holds_nobody_asked_for_are_ignored() {
        let mut d = direct(1);
        d.report(Report::Busy);
        d.holds(None, 0);
        assert_eq!(d.step(), try_now(0, false));
    }
}
