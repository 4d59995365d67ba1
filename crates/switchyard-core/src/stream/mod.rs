//! What a stream is doing, as the gateway judges it (SPEC R11, R12): the typed
//! [`Progress`] a format's stream reader reports for each relayed chunk, the pure
//! [`watchdog`] over it, and the adaptive first-output [`budget`].
//!
//! A chunk may hold many events; `Progress` counts them by class, since every decision
//! over them is taken at the chunk's time:
//!
//! - *output*: a text, refusal or tool-call event that carries something (a tool call's
//!   start, or a delta with content). The first one commits an attempt to the client
//!   and satisfies the first-output budget.
//! - *reasoning*: a reasoning or thinking delta that carries text. It commits an
//!   attempt (the client may show it) and restarts the output budgets, but it is not
//!   output: a turn of reasoning alone still has not answered.
//! - *heartbeat*: an event that carries nothing (a ping, an empty delta, a bare
//!   progress notice, the start of a reasoning block, its signature). Heartbeats keep a
//!   connection busy and prove nothing: a stream that opens a thinking block and stalls
//!   has not started.
//!
//! Beside the classes: the UTF-8 bytes of text that is not only whitespace (R12's useful
//! output), the characters of generated text of every kind (what the quota settles on
//! when the upstream reports no usage), and the reader's state after the chunk (a tool
//! call or reasoning open, which pauses the throughput watchdog).

pub mod budget;
pub mod watchdog;

use crate::settings::StreamSettings;

/// A provider's own stream deadlines, each replacing the setting of the same name when
/// set (SPEC R11's per-provider overrides): a provider whose models think for minutes
/// before they answer gets a longer first-output budget without lengthening everyone's.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Overrides {
    /// `streamContentStall.firstOutputMs`.
    pub first_output_ms: Option<u64>,
    /// `streamContentStall.firstOutputMaxMs`.
    pub first_output_max_ms: Option<u64>,
    /// `streamContentStall.idleMs`.
    pub idle_ms: Option<u64>,
}

impl Overrides {
    /// What is wrong with these overrides, if anything: each must be within its
    /// setting's range.
    pub fn problem(&self) -> Option<String> {
        use crate::settings::{
            STREAM_CONTENT_STALL_FIRST_OUTPUT_MAX_MS as MAX,
            STREAM_CONTENT_STALL_FIRST_OUTPUT_MS as BASE, STREAM_CONTENT_STALL_IDLE_MS as IDLE,
        };
        let fields = [
            ("first_output_ms", self.first_output_ms, BASE.kind),
            ("first_output_max_ms", self.first_output_max_ms, MAX.kind),
            ("idle_ms", self.idle_ms, IDLE.kind),
        ];
        fields.into_iter().find_map(|(name, value, range)| {
            value
                .filter(|v| !(range.min..=range.max).contains(v))
                .map(|_| {
                    format!(
                        "{name}: must be a whole number of milliseconds from {} to {}",
                        range.min, range.max
                    )
                })
        })
    }

    /// `settings` with these overrides applied.
    pub fn apply(&self, settings: &StreamSettings) -> StreamSettings {
        let mut s = *settings;
        if let Some(ms) = self.first_output_ms {
            s.first_output.base_ms = ms;
        }
        if let Some(ms) = self.first_output_max_ms {
            s.first_output.max_ms = ms;
        }
        if let Some(ms) = self.idle_ms {
            s.idle_ms = ms;
        }
        s
    }
}

/// The watchdog limits of a streamed attempt: the first-output budget for the request's
/// `facts` (none for the `last` candidate: with nothing to fail over to it gets its
/// whole time, SPEC R11), the idle budget, the attempt's total bound (`total_ms`, R10's
/// execution bound), and the throughput watchdog when it is on (R12). The facts are
/// read only when the budget needs them.
pub fn limits(
    s: &StreamSettings,
    facts: impl FnOnce() -> budget::Facts,
    last: bool,
    total_ms: u64,
) -> watchdog::Limits {
    let first_output = (s.first_output.base_ms > 0 && !last).then(|| {
        if s.first_output.adaptive {
            budget::first_output_ms(&s.first_output, &facts())
        } else {
            s.first_output.base_ms
        }
    });
    watchdog::Limits {
        first_output_ms: first_output,
        idle_ms: (s.idle_ms > 0).then_some(s.idle_ms),
        total_ms: Some(total_ms),
        throughput: s.throughput_enabled.then_some(s.throughput),
    }
}

/// What one relayed chunk carried; see the module docs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Output events.
    pub output: u32,
    /// Reasoning events that carried text.
    pub reasoning: u32,
    /// Events that carry nothing.
    pub heartbeats: u32,
    /// UTF-8 bytes of output text deltas that are not only whitespace.
    pub text_bytes: u64,
    /// Characters of generated text of every kind (text, reasoning, tool input).
    pub chars: usize,
    /// A tool call is open after the chunk.
    pub tool_open: bool,
    /// Reasoning is open after the chunk.
    pub reasoning_open: bool,
}

impl Progress {
    /// Whether the chunk commits an attempt: it carried output or reasoning.
    pub fn commits(&self) -> bool {
        self.output > 0 || self.reasoning > 0
    }

    /// Notes one text delta of `text`: output when it is not empty, useful bytes when it
    /// is not only whitespace; an empty one is a heartbeat.
    pub fn text(&mut self, text: &str) {
        if text.is_empty() {
            self.heartbeats = self.heartbeats.saturating_add(1);
            return;
        }
        self.output = self.output.saturating_add(1);
        self.chars = self.chars.saturating_add(text.chars().count());
        if !text.trim().is_empty() {
            let bytes = u64::try_from(text.len()).unwrap_or(u64::MAX);
            self.text_bytes = self.text_bytes.saturating_add(bytes);
        }
    }

    /// Notes one reasoning event of `text`: reasoning when it is not empty, a heartbeat
    /// when it is (a block's start, a signature).
    pub fn reasoning(&mut self, text: &str) {
        if text.is_empty() {
            self.heartbeats = self.heartbeats.saturating_add(1);
            return;
        }
        self.reasoning = self.reasoning.saturating_add(1);
        self.chars = self.chars.saturating_add(text.chars().count());
    }

    /// Notes one tool-call event: a start, or a delta of its input `text`. An empty
    /// delta is a heartbeat.
    pub fn tool(&mut self, start: bool, text: &str) {
        if !start && text.is_empty() {
            self.heartbeats = self.heartbeats.saturating_add(1);
            return;
        }
        self.output = self.output.saturating_add(1);
        self.chars = self.chars.saturating_add(text.chars().count());
    }

    /// Adds a `later` chunk's progress: the counts summed, the state after it.
    pub fn merge(&mut self, later: &Self) {
        self.output = self.output.saturating_add(later.output);
        self.reasoning = self.reasoning.saturating_add(later.reasoning);
        self.heartbeats = self.heartbeats.saturating_add(later.heartbeats);
        self.text_bytes = self.text_bytes.saturating_add(later.text_bytes);
        self.chars = self.chars.saturating_add(later.chars);
        self.tool_open = later.tool_open;
        self.reasoning_open = later.reasoning_open;
    }

    /// Notes an event that carries nothing.
    pub fn heartbeat(&mut self) {
        self.heartbeats = self.heartbeats.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> StreamSettings {
        crate::settings::resolve(&crate::settings::Layers::default())
            .map(|r| r.settings.stream)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn limits_follow_the_settings_and_the_candidates_place() {
        let s = settings();
        let slow = budget::Facts {
            slow_model: true,
            ..budget::Facts::default()
        };
        assert_eq!(
            limits(&s, || slow, false, 600_000),
            watchdog::Limits {
                first_output_ms: Some(110_000),
                idle_ms: Some(120_000),
                total_ms: Some(600_000),
                throughput: None,
            }
        );
        assert_eq!(
            limits(
                &s,
                || panic!("not read for the last candidate"),
                true,
                600_000
            )
            .first_output_ms,
            None
        );
        let off = StreamSettings {
            first_output: budget::Budget {
                base_ms: 0,
                ..s.first_output
            },
            idle_ms: 0,
            throughput_enabled: true,
            ..s
        };
        assert_eq!(
            limits(&off, || panic!("not read when off"), false, 5),
            watchdog::Limits {
                first_output_ms: None,
                idle_ms: None,
                total_ms: Some(5),
                throughput: Some(watchdog::Throughput {
                    warmup_ms: 30_000,
                    window_ms: 30_000,
                    min_bytes_per_s: 1,
                }),
            }
        );
    }

    #[test]
    fn a_providers_overrides_replace_only_what_they_set() {
        let s = settings();
        assert_eq!(Overrides::default().apply(&s), s);
        let o = Overrides {
            first_output_ms: Some(200_000),
            first_output_max_ms: Some(400_000),
            idle_ms: None,
        };
        let applied = o.apply(&s);
        assert_eq!(
            (
                applied.first_output.base_ms,
                applied.first_output.max_ms,
                applied.first_output.adaptive,
                applied.idle_ms,
                applied.throughput_enabled
            ),
            (200_000, 400_000, true, 120_000, false)
        );
        let off = Overrides {
            idle_ms: Some(0),
            ..Overrides::default()
        };
        assert_eq!(off.apply(&s).idle_ms, 0);
        assert_eq!(o.problem(), None);
        assert_eq!(off.problem(), None);
        let low_cap = Overrides {
            first_output_max_ms: Some(999),
            ..Overrides::default()
        };
        assert_eq!(
            low_cap.problem().as_deref(),
            Some(
                "first_output_max_ms: must be a whole number of milliseconds from 1000 to 86400000"
            )
        );
        let long = Overrides {
            idle_ms: Some(86_400_001),
            ..Overrides::default()
        };
        assert_eq!(
            long.problem().as_deref(),
            Some("idle_ms: must be a whole number of milliseconds from 0 to 86400000")
        );
    }

    #[test]
    fn text_deltas_count_output_and_useful_bytes() {
        let mut p = Progress::default();
        p.text("héllo");
        p.text("  \n");
        p.text("");
        assert_eq!(
            p,
            Progress {
                output: 2,
                heartbeats: 1,
                text_bytes: 6,
                chars: 8,
                ..Progress::default()
            }
        );
        assert!(p.commits());
    }

    #[test]
    fn reasoning_commits_but_is_not_output() {
        let mut p = Progress::default();
        p.reasoning("");
        assert_eq!((p.reasoning, p.heartbeats), (0, 1));
        assert!(!p.commits(), "an empty reasoning event proves nothing");
        p.reasoning("so");
        assert_eq!(
            (p.output, p.reasoning, p.heartbeats, p.chars, p.text_bytes),
            (0, 1, 1, 2, 0)
        );
        assert!(p.commits());
    }

    #[test]
    fn a_tool_start_is_output_and_an_empty_input_delta_is_not() {
        let mut p = Progress::default();
        p.tool(false, "");
        assert!(!p.commits());
        p.tool(true, "");
        p.tool(false, "{\"a\"");
        assert_eq!(
            (p.output, p.heartbeats, p.chars, p.text_bytes),
            (2, 1, 4, 0)
        );
    }

    #[test]
    fn heartbeats_do_not_commit() {
        let mut p = Progress::default();
        p.heartbeat();
        assert!(!p.commits());
        assert_eq!(p.heartbeats, 1);
    }
}
