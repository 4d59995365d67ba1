//! The first-output budget of a streamed attempt (SPEC R11), adapted to what makes a
//! model slow to start: a long history, many tools, a long prompt, high reasoning effort
//! or a thinking model, or a third-party Claude-format provider. The rule and numbers are
//! those of the seed's engine (OmniRoute's stream readiness policy): over the base,
//! +20 s past 150 items and +45 s past 400, +15 s from 15 tools, +20 s past 250 000
//! prompt characters and +45 s past 750 000, +30 s for a slow model; never above the cap
//! (nor below the base).

use crate::llm::Request;
use serde::Deserialize;

/// What the budget reads of a request and its candidate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Facts {
    /// Messages (or Responses input items).
    pub items: usize,
    pub tools: usize,
    /// Size of the prompt (the request's `prompt_len`).
    pub prompt_chars: usize,
    /// High reasoning effort, a thinking model, or a third-party Claude-format upstream.
    pub slow_model: bool,
}

/// The budget's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub base_ms: u64,
    pub max_ms: u64,
    /// Raise the base for the request's facts; otherwise the base is the budget.
    pub adaptive: bool,
}

/// The first-output budget for `facts`.
pub fn first_output_ms(budget: &Budget, facts: &Facts) -> u64 {
    if !budget.adaptive {
        return budget.base_ms;
    }
    let mut extra: u64 = 0;
    extra += match facts.items {
        n if n > 400 => 45_000,
        n if n > 150 => 20_000,
        _ => 0,
    };
    if facts.tools >= 15 {
        extra += 15_000;
    }
    extra += match facts.prompt_chars {
        n if n > 750_000 => 45_000,
        n if n > 250_000 => 20_000,
        _ => 0,
    };
    if facts.slow_model {
        extra += 30_000;
    }
    budget
        .base_ms
        .saturating_add(extra)
        .min(budget.max_ms.max(budget.base_ms))
}

/// The reasoning-effort members a request may carry.
#[derive(Deserialize)]
struct Reasoning<'a> {
    #[serde(borrow, default)]
    effort: Option<&'a str>,
}

#[derive(Deserialize)]
struct Thinking<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<&'a str>,
}

fn is_high(effort: &str) -> bool {
    matches!(effort, "high" | "xhigh" | "max")
}

impl Facts {
    /// The request's facts (the same for every candidate).
    pub fn of(request: &Request) -> Self {
        let body = &request.body;
        let items = body
            .member("messages")
            .or_else(|| body.member("input"))
            .map_or(0, array_len);
        let tools = body.member("tools").map_or(0, array_len);
        let effort = body
            .member("reasoning_effort")
            .and_then(|raw| serde_json::from_str::<&str>(raw).ok())
            .or_else(|| {
                body.member("reasoning")
                    .and_then(|raw| serde_json::from_str::<Reasoning<'_>>(raw).ok())
                    .and_then(|r| r.effort)
            })
            .or_else(|| {
                body.member("output_config")
                    .and_then(|raw| serde_json::from_str::<Reasoning<'_>>(raw).ok())
                    .and_then(|r| r.effort)
            });
        let thinking = body
            .member("thinking")
            .and_then(|raw| serde_json::from_str::<Thinking<'_>>(raw).ok())
            .and_then(|t| t.kind)
            .is_some_and(|k| k == "enabled" || k == "adaptive");
        let slow_model =
            effort.is_some_and(is_high) || thinking || request.model.contains("thinking");
        Self {
            items,
            tools,
            prompt_chars: request.prompt_len,
            slow_model,
        }
    }

    /// The facts for a candidate that is (`true`) or is not a Claude-format provider
    /// other than Anthropic's own API: such providers are slow to start.
    pub fn on_third_party_claude(self, third_party_claude: bool) -> Self {
        Self {
            slow_model: self.slow_model || third_party_claude,
            ..self
        }
    }
}

/// Elements of a JSON array given as raw (valid) JSON text, counted without parsing
/// them: the commas at its top level. Anything but an array counts 0.
fn array_len(raw: &str) -> usize {
    let bytes = raw.trim().as_bytes();
    if bytes.first() != Some(&b'[') {
        return 0;
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let (mut commas, mut any) = (0usize, false);
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                any = true;
            }
            b'[' | b'{' => {
                if depth >= 1 {
                    any = true;
                }
                depth += 1;
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' if depth == 1 => commas += 1,
            b if depth >= 1 && !b.is_ascii_whitespace() => any = true,
            _ => {}
        }
    }
    if any {
        commas + 1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Format;

    const OMNI: Budget = Budget {
        base_ms: 80_000,
        max_ms: 180_000,
        adaptive: true,
    };

    #[test]
    fn the_budget_follows_the_seed_rule_and_its_cap() {
        let cases = [
            (Facts::default(), 80_000),
            (
                Facts {
                    items: 150,
                    ..Facts::default()
                },
                80_000,
            ),
            (
                Facts {
                    items: 151,
                    ..Facts::default()
                },
                100_000,
            ),
            (
                Facts {
                    items: 401,
                    ..Facts::default()
                },
                125_000,
            ),
            (
                Facts {
                    tools: 14,
                    ..Facts::default()
                },
                80_000,
            ),
            (
                Facts {
                    tools: 15,
                    ..Facts::default()
                },
                95_000,
            ),
            (
                Facts {
                    prompt_chars: 250_001,
                    ..Facts::default()
                },
                100_000,
            ),
            (
                Facts {
                    prompt_chars: 750_001,
                    ..Facts::default()
                },
                125_000,
            ),
            (
                Facts {
                    slow_model: true,
                    ..Facts::default()
                },
                110_000,
            ),
            (
                Facts {
                    items: 500,
                    tools: 40,
                    prompt_chars: 1_000_000,
                    slow_model: true,
                },
                180_000,
            ),
        ];
        for (facts, want) in cases {
            assert_eq!(first_output_ms(&OMNI, &facts), want, "{facts:?}");
        }
    }

    #[test]
    fn without_adaptation_or_with_a_cap_below_the_base_the_base_is_kept() {
        let long = Facts {
            items: 1_000,
            ..Facts::default()
        };
        let fixed = Budget {
            adaptive: false,
            ..OMNI
        };
        assert_eq!(first_output_ms(&fixed, &long), 80_000);
        let low_cap = Budget {
            max_ms: 10_000,
            ..OMNI
        };
        assert_eq!(first_output_ms(&low_cap, &long), 80_000);
        let huge = Budget {
            base_ms: u64::MAX,
            max_ms: u64::MAX,
            adaptive: true,
        };
        assert_eq!(first_output_ms(&huge, &long), u64::MAX);
    }

    #[test]
    fn array_lengths_are_counted_at_the_top_level() {
        let cases = [
            ("[]", 0),
            (" [ ] ", 0),
            ("[1]", 1),
            (r#"[{"a":[1,2,3]},"x,y",[4,5]]"#, 3),
            (r#"["a\"],[b", {"c": "}"}]"#, 2),
            ("{}", 0),
            ("\"text\"", 0),
        ];
        for (raw, want) in cases {
            assert_eq!(array_len(raw), want, "{raw}");
        }
    }

    fn facts(format: Format, body: &str) -> Facts {
        Facts::of(&format.decode(body.as_bytes()).unwrap())
    }

    #[test]
    fn facts_are_read_from_each_format() {
        let chat = facts(
            Format::OpenAiChat,
            r#"{"model":"a/b","messages":[{"role":"user","content":"hi"},{"role":"user","content":"again"}],"tools":[{},{}],"reasoning_effort":"high"}"#,
        );
        assert_eq!((chat.items, chat.tools, chat.slow_model), (2, 2, true));
        let claude = facts(
            Format::AnthropicMessages,
            r#"{"model":"a/b","max_tokens":9,"messages":[{"role":"user","content":"hi"}],"thinking":{"type":"enabled","budget_tokens":2048}}"#,
        );
        assert_eq!(
            (claude.items, claude.tools, claude.slow_model),
            (1, 0, true)
        );
        let codex = facts(
            Format::Responses,
            r#"{"model":"a/b","input":[{"role":"user","content":"hi"}],"reasoning":{"effort":"medium"}}"#,
        );
        assert_eq!((codex.items, codex.slow_model), (1, false));
        let thinking_model = facts(
            Format::OpenAiChat,
            r#"{"model":"kimi/k2-thinking","messages":[{"role":"user","content":"hi"}]}"#,
        );
        assert!(thinking_model.slow_model);
        let plain = facts(
            Format::OpenAiChat,
            r#"{"model":"a/b","messages":[{"role":"user","content":"x"}]}"#,
        );
        assert!(!plain.slow_model);
        assert!(plain.on_third_party_claude(true).slow_model);
        assert!(!plain.on_third_party_claude(false).slow_model);
    }
}
