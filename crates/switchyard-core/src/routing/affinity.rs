//! Session affinity (SPEC R15): an agent's conversation keeps landing on the account
//! whose prompt cache holds it.
//!
//! - [`session_id`]: the client's session id, from the first of the R15 headers that is
//!   present, then the body's `prompt_cache_key`, `metadata.session_id`,
//!   `metadata.user_id`.
//! - [`SessionKey`]: the pin's key, a SHA-256 of the client key id and the session id, so
//!   sessions are scoped by client key and no id is ever kept or logged in clear (long
//!   ones included).
//! - [`pinned_first`]: the one rule that applies a pin, after every strategy: the pinned
//!   connection's candidates go first, the rest keep their order. It only reorders, so a
//!   pinned connection that is excluded (R1–R5, R16, quota) is still skipped by
//!   admission like any other, and the request goes on to the next candidate.
//! - [`after`]: the pin's lifecycle (Bifrost's): written only when a request is served,
//!   refreshed when followed, moved to the connection that served after a failover,
//!   deleted when a request that followed it fails, kept as it is when the client
//!   cancels or the gateway refuses.
//!
//! The same pins serve the `cache-optimized` strategy (SPEC R19): one affinity
//! mechanism. Pure: the shell keeps the pins and passes `now`.

use super::Candidate;
use crate::llm::RawObject;
use crate::UnixMillis;
use sha2::{Digest, Sha256};

/// The headers a session id is read from, first found wins (SPEC R15). Lowercase, as
/// HTTP/1 and HTTP/2 header names compare.
pub const SESSION_HEADERS: [&str; 9] = [
    "x-switchyard-session",
    "x-claude-code-session-id",
    "session_id",
    "session-id",
    "thread-id",
    "x-opencode-session",
    "x-session-id",
    "x-codex-session-id",
    "x-omniroute-session",
];

/// Where a session id was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// One of [`SESSION_HEADERS`].
    Header(&'static str),
    /// `prompt_cache_key`, `metadata.session_id` or `metadata.user_id`.
    Body(&'static str),
}

impl Source {
    /// The header or body field's name, for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Header(name) | Self::Body(name) => name,
        }
    }
}

/// The longest id kept before hashing; any longer is hashed like every other (SPEC R15
/// asks only that long ones are).
pub const MAX_ID_BYTES: usize = 255;

/// The client's session id and where it came from, or `None` when the request carries
/// none. `header` looks a header up by its lowercase name; empty values do not count.
pub fn session_id<'a>(
    header: impl Fn(&str) -> Option<&'a str>,
    body: &RawObject,
) -> Option<(Source, String)> {
    for name in SESSION_HEADERS {
        if let Some(v) = header(name).map(str::trim).filter(|v| !v.is_empty()) {
            return Some((Source::Header(name), v.to_owned()));
        }
    }
    let text = |raw: &str| {
        serde_json::from_str::<String>(raw)
            .ok()
            .filter(|s| !s.trim().is_empty())
    };
    if let Some(id) = body.member("prompt_cache_key").and_then(text) {
        return Some((Source::Body("prompt_cache_key"), id));
    }
    let metadata = body
        .member("metadata")
        .and_then(|m| serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(m).ok())?;
    for (field, source) in [
        ("session_id", "metadata.session_id"),
        ("user_id", "metadata.user_id"),
    ] {
        if let Some(id) = metadata
            .get(field)
            .and_then(serde_json::Value::as_str)
            .filter(|s| !s.trim().is_empty())
        {
            return Some((Source::Body(source), id.to_owned()));
        }
    }
    None
}

/// A pin's key: SHA-256 over the client key id and the session id.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionKey(pub [u8; 32]);

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SessionKey({})", &self.to_hex()[..12])
    }
}

impl SessionKey {
    /// The key of `session` for client key `key_id`.
    pub fn of(key_id: &str, session: &str) -> Self {
        let mut h = Sha256::new();
        h.update(key_id.as_bytes());
        h.update([0]);
        h.update(session.as_bytes());
        Self(h.finalize().into())
    }

    pub fn to_hex(self) -> String {
        crate::apikey::KeyHash(self.0).to_hex()
    }

    pub fn from_hex(s: &str) -> Option<Self> {
        crate::apikey::KeyHash::from_hex(s).map(|h| Self(h.0))
    }
}

/// One session's pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    pub connection: String,
    /// The client key whose session it is.
    pub key_id: String,
    pub created_ms: UnixMillis,
    /// When a request last followed it or wrote it.
    pub last_ms: UnixMillis,
}

impl Pin {
    /// Whether the pin still holds at `now` with a time to live of `ttl_ms` (0 = off)
    /// since it was last used.
    pub fn live(&self, ttl_ms: u64, now: UnixMillis) -> bool {
        ttl_ms > 0 && now.saturating_sub(self.last_ms) < ttl_ms
    }
}

/// Moves the candidates on `connection` to the front, keeping the order of the others
/// and of the moved ones; returns whether any moved.
pub fn pinned_first(candidates: &mut Vec<Candidate>, connection: &str) -> bool {
    let on = |c: &Candidate| c.connection.id == connection;
    // Already in front (or absent): nothing to move.
    if candidates.iter().skip_while(|c| on(c)).all(|c| !on(c)) {
        return false;
    }
    let (mut front, back): (Vec<Candidate>, Vec<Candidate>) =
        std::mem::take(candidates).into_iter().partition(on);
    front.extend(back);
    *candidates = front;
    true
}

/// How a pinned or pinnable request ended, for [`after`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending<'a> {
    /// An upstream answered successfully on `connection`.
    Served { connection: &'a str },
    /// Every attempt failed upstream; `followed` is whether the pinned connection was
    /// among the connections tried.
    Failed { followed: bool },
    /// The client went away, or the gateway refused before or instead of an upstream
    /// (quota, cooling, queue, a client error answered by the upstream).
    Untouched,
}

/// What to do with a session's pin after a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Write (or move) the pin to this connection.
    Write(String),
    /// The pin was followed: its last use is now.
    Refresh,
    Delete,
    Keep,
}

/// The pin's lifecycle: see the module docs. `pin` is the live pin the request read, if
/// any.
pub fn after(pin: Option<&Pin>, ending: Ending<'_>) -> Change {
    match (pin, ending) {
        (Some(p), Ending::Served { connection }) if p.connection == connection => Change::Refresh,
        (_, Ending::Served { connection }) => Change::Write(connection.to_owned()),
        (Some(_), Ending::Failed { followed: true }) => Change::Delete,
        (_, Ending::Failed { .. } | Ending::Untouched) => Change::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Connection;
    use crate::domain::AuthClass;
    use std::collections::HashMap;
    use std::sync::Arc;

    fn body(json: &str) -> RawObject {
        RawObject::parse(json.as_bytes()).unwrap()
    }

    fn found(headers: &[(&str, &str)], json: &str) -> Option<(Source, String)> {
        let map: HashMap<&str, &str> = headers.iter().copied().collect();
        session_id(|n| map.get(n).copied(), &body(json))
    }

    #[test]
    fn the_first_header_in_spec_order_wins_then_the_body() {
        let all: Vec<(&str, &str)> = SESSION_HEADERS.iter().map(|h| (*h, *h)).collect();
        for i in 0..SESSION_HEADERS.len() {
            let (source, id) = found(&all[i..], r#"{"prompt_cache_key":"p"}"#).unwrap();
            assert_eq!(source, Source::Header(SESSION_HEADERS[i]));
            assert_eq!(id, SESSION_HEADERS[i]);
        }
        // Claude Code: its header, and `metadata.user_id` in the body.
        let claude = found(
            &[("x-claude-code-session-id", "5f0c")],
            r#"{"metadata":{"user_id":"user_abc_account__session_5f0c"}}"#,
        );
        assert_eq!(
            claude,
            Some((Source::Header("x-claude-code-session-id"), "5f0c".into()))
        );
        // Codex: `session_id` header and the same id as `prompt_cache_key`.
        let codex = found(&[("session_id", "019a")], r#"{"prompt_cache_key":"019a"}"#);
        assert_eq!(codex, Some((Source::Header("session_id"), "019a".into())));
        let cases = [
            (
                r#"{"prompt_cache_key":"p","metadata":{"session_id":"s"}}"#,
                Some(("prompt_cache_key", "p")),
            ),
            (
                r#"{"metadata":{"session_id":"s","user_id":"u"}}"#,
                Some(("metadata.session_id", "s")),
            ),
            (
                r#"{"metadata":{"user_id":"u"}}"#,
                Some(("metadata.user_id", "u")),
            ),
            (
                r#"{"prompt_cache_key":"  ","metadata":{"user_id":"u"}}"#,
                Some(("metadata.user_id", "u")),
            ),
            (r#"{"prompt_cache_key":7,"metadata":"x"}"#, None),
            (r#"{"metadata":{"user_id":42}}"#, None),
            (r#"{"model":"m"}"#, None),
        ];
        for (json, want) in cases {
            let got = found(&[], json);
            assert_eq!(
                got,
                want.map(|(s, id)| (Source::Body(s), id.to_owned())),
                "{json}"
            );
        }
        // An empty header does not count.
        assert_eq!(
            found(&[("x-switchyard-session", " "), ("session-id", "b")], "{}"),
            Some((Source::Header("session-id"), "b".into()))
        );
    }

    #[test]
    fn session_keys_are_scoped_by_client_key_and_hide_the_id() {
        let a = SessionKey::of("k1", "s");
        assert_eq!(a, SessionKey::of("k1", "s"));
        assert_ne!(a, SessionKey::of("k2", "s"));
        // The separator keeps `k1`+`0s` apart from `k10`+`s`.
        assert_ne!(SessionKey::of("k1", "0s"), SessionKey::of("k10", "s"));
        let long = "x".repeat(10_000);
        let hex = SessionKey::of("k1", &long).to_hex();
        assert_eq!(hex.len(), 64);
        assert_eq!(
            SessionKey::from_hex(&hex),
            Some(SessionKey::of("k1", &long))
        );
        assert_eq!(format!("{a:?}").len(), "SessionKey()".len() + 12);
    }

    fn cand(conn: &str) -> Candidate {
        Candidate {
            connection: Arc::new(Connection {
                id: conn.into(),
                provider: "p".into(),
                auth_class: AuthClass::Apikey,
                format: crate::domain::UpstreamFormat::Openai,
                base_url: "http://x".into(),
                enabled: true,
                max_concurrent: None,
                model_concurrency: Default::default(),
                queue: Default::default(),
                disable_cooling: false,
                family: "p".into(),
                index: 0,
            }),
            upstream_model: "m".into(),
            target: 0,
        }
    }

    fn order(cands: &[Candidate]) -> Vec<&str> {
        cands.iter().map(|c| c.connection.id.as_str()).collect()
    }

    #[test]
    fn the_pinned_connection_goes_first_and_the_rest_keep_their_order() {
        let mut c = vec![cand("a"), cand("b"), cand("c"), cand("b")];
        assert!(pinned_first(&mut c, "b"));
        assert_eq!(order(&c), vec!["b", "b", "a", "c"]);
        assert!(!pinned_first(&mut c, "b"));
        assert!(!pinned_first(&mut c, "zz"));
        assert_eq!(order(&c), vec!["b", "b", "a", "c"]);
        let mut c = vec![cand("a"), cand("b"), cand("a")];
        assert!(pinned_first(&mut c, "a"));
        assert_eq!(order(&c), vec!["a", "a", "b"]);
    }

    fn pin(conn: &str, last: UnixMillis) -> Pin {
        Pin {
            connection: conn.into(),
            key_id: "k".into(),
            created_ms: 0,
            last_ms: last,
        }
    }

    #[test]
    fn the_lifecycle_table() {
        let p = pin("a", 100);
        let served = |c| Ending::Served { connection: c };
        let cases = [
            (None, served("a"), Change::Write("a".into())),
            (Some(&p), served("a"), Change::Refresh),
            (Some(&p), served("b"), Change::Write("b".into())),
            (Some(&p), Ending::Failed { followed: true }, Change::Delete),
            (Some(&p), Ending::Failed { followed: false }, Change::Keep),
            (None, Ending::Failed { followed: false }, Change::Keep),
            (Some(&p), Ending::Untouched, Change::Keep),
            (None, Ending::Untouched, Change::Keep),
        ];
        for (pin, ending, want) in cases {
            assert_eq!(after(pin, ending), want, "{pin:?} {ending:?}");
        }
    }

    #[test]
    fn a_pin_lives_for_its_ttl_since_last_use() {
        let p = pin("a", 1_000);
        assert!(p.live(500, 1_000));
        assert!(p.live(500, 1_499));
        assert!(!p.live(500, 1_500));
        assert!(!p.live(0, 1_000));
        // A clock that went back keeps it.
        assert!(p.live(500, 10));
    }
}
