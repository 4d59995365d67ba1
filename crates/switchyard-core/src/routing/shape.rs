//! Dispatch shapes (SPEC R19): how many upstream calls one client request makes and how
//! their answers combine. Most strategies are orderings and dispatch [`Shape::Single`]:
//! one candidate answers, the others are its fallbacks. Two are shapes of their own,
//! over the same candidates and the same dispatch machine per call:
//!
//! - [`Shape::Pipeline`]: the combo's targets in order, each a *step*; every step but the
//!   last answers in full (not streamed) and its answer goes to the next step as an
//!   assistant turn followed by [`REVISE_PROMPT`]; the last step answers the client, as
//!   the client asked (streamed or not). A step none of whose candidates can answer is
//!   skipped: the next one works from the last answer there is.
//! - [`Shape::Fusion`]: every target (a *panel member*) answers the client's
//!   conversation in full, in parallel; the answers that came by the deadline
//!   ([`Gather`]) go to the *judge*, the combo's first target (its fallbacks the others),
//!   in one user turn ([`judge_prompt`]), and the judge answers the client. A panel
//!   every member of which failed is no panel: the request is dispatched
//!   [`Shape::Single`], first target first; a panel cut at the deadline with no answer
//!   is a gateway timeout.
//!
//! A request that declares tools is dispatched [`Shape::Single`] whatever the shape: a
//! tool call is the client's to run, and cannot be revised or judged by another model.

use super::Candidate;

/// See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Single,
    Pipeline,
    Fusion,
    /// One candidate answers, as [`Shape::Single`]; the session's conversation is
    /// handed between accounts with a summary ([`super::relay`]).
    Relay,
}

/// The user turn that follows a pipeline step's answer in the next step's request.
pub const REVISE_PROMPT: &str = "Review the answer above for mistakes and omissions and \
reply with the best complete answer to the request before it: the answer itself, without \
remarks about the review.";

/// The candidates of each combo target that has any, as indices into `candidates`: the
/// targets in their configured order, each one's candidates in plan order.
pub fn steps(candidates: &[Candidate]) -> Vec<Vec<usize>> {
    let mut targets: Vec<usize> = candidates.iter().map(|c| c.target).collect();
    targets.sort_unstable();
    targets.dedup();
    targets
        .iter()
        .map(|&t| {
            candidates
                .iter()
                .enumerate()
                .filter(|(_, c)| c.target == t)
                .map(|(i, _)| i)
                .collect()
        })
        .collect()
}

/// The judge's user turn: the panel's answers, numbered, and what to make of them.
pub fn judge_prompt(answers: &[String]) -> String {
    let mut out = format!(
        "Answers to the request above, given independently ({} in all):\n\n",
        answers.len()
    );
    for (n, a) in answers.iter().enumerate() {
        out.push_str(&format!("<answer {}>\n{a}\n</answer {}>\n\n", n + 1, n + 1));
    }
    out.push_str(
        "Reply to the request with the single best answer: keep what the answers get \
right, correct what they get wrong, and fill in what they miss. Give the answer itself, \
without remarks about the answers.",
    );
    out
}

/// When a fusion panel's answers are in: a pure machine over the panel's answers as
/// they come, under `now`. The panel is done when every member has answered or failed;
/// or, once `quorum` answers are in, `grace_ms` after the quorum was reached; or at
/// `deadline_ms` after the start, whatever has come by then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gather {
    quorum: usize,
    grace_ms: u64,
    hard_at: u64,
    pending: usize,
    answered: usize,
    quorum_at: Option<u64>,
}

/// What a fusion panel waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The answers are in: judge those that came.
    Done,
    /// Wait for the next answer until this instant (ms).
    Until(u64),
}

/// A fusion panel's timing settings (`routing.fusion.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FusionSettings {
    /// Answers after which the grace starts (at least 1).
    pub quorum: u64,
    pub grace_ms: u64,
    pub deadline_ms: u64,
}

impl Default for FusionSettings {
    fn default() -> Self {
        Self {
            quorum: 2,
            grace_ms: 8_000,
            deadline_ms: 90_000,
        }
    }
}

impl Gather {
    /// A panel of `members` started at `now`. A quorum larger than the panel is the
    /// panel's size.
    pub fn new(members: usize, settings: FusionSettings, now: u64) -> Self {
        let quorum = usize::try_from(settings.quorum)
            .unwrap_or(usize::MAX)
            .clamp(1, members.max(1));
        Self {
            quorum,
            grace_ms: settings.grace_ms,
            hard_at: now.saturating_add(settings.deadline_ms),
            pending: members,
            answered: 0,
            quorum_at: None,
        }
    }

    /// A member answered at `now`.
    pub fn answered(&mut self, now: u64) {
        self.pending = self.pending.saturating_sub(1);
        self.answered = self.answered.saturating_add(1);
        if self.answered >= self.quorum && self.quorum_at.is_none() {
            self.quorum_at = Some(now);
        }
    }

    /// A member failed (no answer will come from it).
    pub fn failed(&mut self) {
        self.pending = self.pending.saturating_sub(1);
    }

    /// What to do at `now`.
    pub fn wait(&self, now: u64) -> Wait {
        let until = match self.quorum_at {
            Some(at) => at.saturating_add(self.grace_ms).min(self.hard_at),
            None => self.hard_at,
        };
        if self.pending == 0 || now >= until {
            Wait::Done
        } else {
            Wait::Until(until)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(target: usize, conn: &str) -> Candidate {
        Candidate::for_test("p", conn, "m", target)
    }

    #[test]
    fn steps_group_each_targets_candidates_in_target_order() {
        // A session pin moved target 1's second connection first.
        let c = [
            candidate(1, "b2"),
            candidate(0, "a1"),
            candidate(1, "b1"),
            candidate(3, "d1"),
            candidate(0, "a2"),
        ];
        assert_eq!(steps(&c), vec![vec![1, 4], vec![0, 2], vec![3]]);
        assert_eq!(steps(&[]), Vec::<Vec<usize>>::new());
    }

    #[test]
    fn the_judge_sees_every_answer_numbered() {
        let p = judge_prompt(&["four".into(), "4".into()]);
        assert!(p.starts_with(
            "Answers to the request above, given independently (2 in all):\n\n<answer 1>\nfour\n</answer 1>\n\n<answer 2>\n4\n</answer 2>\n\nReply to the request"
        ));
    }

    const SETTINGS: FusionSettings = FusionSettings {
        quorum: 2,
        grace_ms: 8_000,
        deadline_ms: 90_000,
    };

    #[test]
    fn a_panel_waits_for_everyone_until_the_quorum_then_the_grace() {
        let mut g = Gather::new(3, SETTINGS, 1_000);
        assert_eq!(g.wait(1_000), Wait::Until(91_000));
        g.answered(2_000);
        assert_eq!(g.wait(2_000), Wait::Until(91_000));
        g.answered(5_000);
        assert_eq!(g.wait(5_000), Wait::Until(13_000));
        assert_eq!(g.wait(12_999), Wait::Until(13_000));
        assert_eq!(g.wait(13_000), Wait::Done);
    }

    #[test]
    fn a_panel_is_done_when_nobody_is_left_to_answer() {
        let mut g = Gather::new(3, SETTINGS, 0);
        g.answered(10);
        g.failed();
        assert_eq!(g.wait(20), Wait::Until(90_000));
        g.failed();
        assert_eq!(g.wait(30), Wait::Done);
        // Nobody answered at all: done too (the caller reports the failure).
        let mut none = Gather::new(2, SETTINGS, 0);
        none.failed();
        none.failed();
        assert_eq!(none.wait(1), Wait::Done);
    }

    #[test]
    fn the_deadline_ends_the_grace_and_a_quorum_never_reached() {
        let mut g = Gather::new(3, SETTINGS, 0);
        g.answered(85_000);
        g.answered(86_000);
        assert_eq!(g.wait(86_000), Wait::Until(90_000));
        assert_eq!(g.wait(90_000), Wait::Done);
        let mut slow = Gather::new(3, SETTINGS, 0);
        slow.answered(1);
        assert_eq!(slow.wait(89_999), Wait::Until(90_000));
        assert_eq!(slow.wait(90_000), Wait::Done);
    }

    #[test]
    fn a_quorum_beyond_the_panel_is_the_whole_panel() {
        let big = FusionSettings {
            quorum: 16,
            ..SETTINGS
        };
        let mut g = Gather::new(2, big, 0);
        g.answered(100);
        assert_eq!(g.wait(100), Wait::Until(90_000));
        g.answered(200);
        assert_eq!(g.wait(200), Wait::Done);
        // Zero members (no candidates): done at once.
        assert_eq!(Gather::new(0, big, 0).wait(0), Wait::Done);
    }

    #[test]
    fn huge_settings_saturate() {
        let s = FusionSettings {
            quorum: u64::MAX,
            grace_ms: u64::MAX,
            deadline_ms: u64::MAX,
        };
        let mut g = Gather::new(1, s, u64::MAX - 1);
        assert_eq!(g.wait(u64::MAX - 1), Wait::Until(u64::MAX));
        g.answered(u64::MAX);
        assert_eq!(g.wait(u64::MAX), Wait::Done);
    }
}
