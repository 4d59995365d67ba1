//! Model aliases (SPEC G3): other names for a `provider/model`, a combo or a `qtSd/`
//! pool, so a client run with only a base URL and a key (Claude Code asking for its own
//! `claude-opus-…` and its small fast model, Codex asking for its default) goes where the
//! operator decides, not where each client's configuration says.
//!
//! An alias is a pattern, exact or a glob where `*` stands for any run of characters
//! (`claude-*`, `*haiku*`, `gpt-5*`), and a target. It may be limited to some keys. The
//! aliases limited to the asking key are tried first, then the others, each group in
//! the operator's order; the first whose pattern matches wins. Aliases are read only
//! for names that are neither a combo nor a `provider/model` of a known provider
//! ([`crate::routing`]), so an alias never shadows a real name. Pure data and matching:
//! targets are checked against the catalog when it is built.

/// The longest pattern or target accepted, in bytes.
pub const MAX_LEN: usize = 200;

/// The most aliases a configuration may hold.
pub const MAX_ALIASES: usize = 1000;

/// One alias.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alias {
    /// The name or glob the client's model must match.
    pub pattern: String,
    /// `provider/model`, a combo name or `qtSd/<pool>[/<model>]`.
    pub target: String,
    /// Key ids the alias applies to; empty = every key.
    pub keys: Vec<String>,
}

impl Alias {
    /// Whether the pattern holds a `*`.
    pub fn is_glob(&self) -> bool {
        self.pattern.contains('*')
    }

    /// What is wrong with the alias itself, before its target is resolved.
    pub fn problem(&self) -> Option<String> {
        let pattern = &self.pattern;
        if pattern.is_empty() || pattern.len() > MAX_LEN {
            return Some(format!("pattern must be 1 to {MAX_LEN} bytes"));
        }
        if pattern.chars().all(|c| c == '*') {
            return Some(
                "pattern matches every name: name a default combo as the alias of a glob such as `claude-*` instead"
                    .to_owned(),
            );
        }
        if pattern.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Some("pattern must not contain spaces or control characters".to_owned());
        }
        if self.target.is_empty() || self.target.len() > MAX_LEN {
            return Some(format!("target must be 1 to {MAX_LEN} bytes"));
        }
        if self.target.contains('*') {
            return Some("target must be one name, not a glob".to_owned());
        }
        None
    }
}

/// The configured aliases, in the operator's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Aliases {
    list: Vec<Alias>,
}

impl Aliases {
    pub fn new(list: Vec<Alias>) -> Self {
        Self { list }
    }

    /// In the operator's order.
    pub fn all(&self) -> &[Alias] {
        &self.list
    }

    /// The alias `key_id`'s request for `model` follows: the first matching one limited
    /// to the key, else the first matching one for every key.
    pub fn find<'a>(&'a self, key_id: &'a str, model: &str) -> Option<&'a Alias> {
        self.for_key(key_id)
            .find(|a| glob_matches(&a.pattern, model))
    }

    /// The aliases `key_id` may follow, in the order [`Aliases::find`] tries them.
    pub fn for_key<'a>(&'a self, key_id: &'a str) -> impl Iterator<Item = &'a Alias> {
        let keyed = self
            .list
            .iter()
            .filter(move |a| a.keys.iter().any(|k| k == key_id));
        keyed.chain(self.list.iter().filter(|a| a.keys.is_empty()))
    }
}

/// Whether `name` matches `pattern`, where `*` stands for any run of characters
/// (including none) and every other character for itself. Linear in the lengths: the
/// classic two-pointer match with backtracking to the last star only.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn alias(pattern: &str, target: &str, keys: &[&str]) -> Alias {
        Alias {
            pattern: pattern.into(),
            target: target.into(),
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        }
    }

    #[test]
    fn globs_match_runs_of_any_characters() {
        let cases = [
            ("claude-*", "claude-opus-4-5-20251101", true),
            ("claude-*", "claude-", true),
            ("claude-*", "claude", false),
            ("*haiku*", "claude-haiku-4-5-20251001", true),
            ("*haiku*", "haiku", true),
            ("*haiku*", "claude-sonnet-4-5", false),
            ("gpt-5*", "gpt-5.1-codex-max", true),
            ("gpt-5*", "gpt-4o", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("a*b*c", "abcabc", true),
            ("*-mini", "gpt-5-mini", true),
            ("*-mini", "gpt-5-mini-x", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("exact", "Exact", false),
            ("**", "", true),
            ("a**b", "ab", true),
        ];
        for (pattern, name, want) in cases {
            assert_eq!(glob_matches(pattern, name), want, "{pattern} ~ {name}");
        }
    }

    #[test]
    fn the_keys_own_aliases_come_first_then_the_operators_order() {
        let aliases = Aliases::new(vec![
            alias("claude-*", "main", &[]),
            alias("*haiku*", "small", &[]),
            alias("claude-*", "team-b", &["kb"]),
            alias("gpt-*", "codex", &["ka", "kb"]),
        ]);
        let target =
            |key: &'static str, model: &str| aliases.find(key, model).map(|a| a.target.as_str());
        // First match in order: `claude-*` comes before `*haiku*`.
        assert_eq!(target("ka", "claude-haiku-4-5"), Some("main"));
        assert_eq!(target("ka", "my-haiku"), Some("small"));
        // The key's own alias wins over an earlier one for every key.
        assert_eq!(target("kb", "claude-opus-4-5"), Some("team-b"));
        assert_eq!(target("kb", "gpt-5"), Some("codex"));
        assert_eq!(target("kc", "gpt-5"), None);
        assert_eq!(target("ka", "o3"), None);
        let order: Vec<&str> = aliases.for_key("kb").map(|a| a.target.as_str()).collect();
        assert_eq!(order, vec!["team-b", "codex", "main", "small"]);
        let order: Vec<&str> = aliases.for_key("kc").map(|a| a.target.as_str()).collect();
        assert_eq!(order, vec!["main", "small"]);
    }

    #[test]
    fn malformed_aliases_are_named() {
        let long = "x".repeat(MAX_LEN + 1);
        let cases = [
            (alias("", "t", &[]), "pattern must be 1 to 200 bytes"),
            (alias(&long, "t", &[]), "pattern must be 1 to 200 bytes"),
            (alias("**", "t", &[]), "pattern matches every name: name a default combo as the alias of a glob such as `claude-*` instead"),
            (alias("a b", "t", &[]), "pattern must not contain spaces or control characters"),
            (alias("a", "", &[]), "target must be 1 to 200 bytes"),
            (alias("a", "c*", &[]), "target must be one name, not a glob"),
        ];
        for (a, want) in cases {
            assert_eq!(a.problem().as_deref(), Some(want), "{a:?}");
        }
        assert_eq!(alias("claude-*", "main", &["k"]).problem(), None);
        assert!(alias("claude-*", "main", &[]).is_glob());
        assert!(!alias("gpt-5", "main", &[]).is_glob());
    }

    proptest! {
        #[test]
        fn a_pattern_without_stars_matches_only_itself(p in "[a-c]{0,6}", n in "[a-c]{0,6}") {
            prop_assert_eq!(glob_matches(&p, &n), p == n);
        }

        #[test]
        fn a_star_matches_whatever_sits_in_its_place(
            pre in "[a-c]{0,4}", mid in "[a-c*]{0,4}", post in "[a-c]{0,4}"
        ) {
            let name = format!("{pre}{}{post}", mid.replace('*', ""));
            let pattern = format!("{pre}*{post}");
            prop_assert!(glob_matches(&pattern, &name));
        }
    }
}
