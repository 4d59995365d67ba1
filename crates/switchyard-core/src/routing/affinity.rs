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
use std::collections::HashMap;

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

/// The longest id kept before hashing; any longer is hashed like every other (SPEC R15
/// asks only that long ones are).
pub const MAX_ID_BYTES: usize = 255;

/// The best R15 header of a walk over the request's headers: the shell offers each
/// header it meets, so one walk serves every stage that reads headers.
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionHeader<'a>(Option<(usize, &'a str)>);

impl<'a> SessionHeader<'a> {
    /// Takes the header `name` (lowercase) if it is an R15 header; whether it was one.
    /// Empty values do not count.
    pub fn offer(&mut self, name: &str, value: &'a [u8]) -> bool {
        let Some(rank) = SESSION_HEADERS.iter().position(|h| *h == name) else {
            return false;
        };
        let value = std::str::from_utf8(value)
            .map(str::trim)
            .unwrap_or_default();
        if !value.is_empty() && self.0.is_none_or(|(r, _)| rank < r) {
            self.0 = Some((rank, value));
        }
        true
    }

    /// The client's session id and where it came from: the first R15 header offered
    /// in SPEC order, then the body's fields; `None` when the request carries none.
    pub fn session_id(self, body: &RawObject) -> Option<(Source, String)> {
        if let Some((rank, id)) = self.0 {
            return Some((Source::Header(SESSION_HEADERS[rank]), id.to_owned()));
        }
        from_body(body)
    }
}

/// The client's session id and where it came from, or `None` when the request carries
/// none. `headers` are the request's (name, value) pairs, names in lowercase as HTTP
/// compares them, walked once; empty values do not count.
pub fn session_id<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    body: &RawObject,
) -> Option<(Source, String)> {
    let mut best = SessionHeader::default();
    for (name, value) in headers {
        best.offer(name, value);
    }
    best.session_id(body)
}

/// The session id of the body's fields (SPEC R15's order).
fn from_body(body: &RawObject) -> Option<(Source, String)> {
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
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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

/// Bytes of each opening member a cache key is taken from when the request names no
/// session.
pub const CACHE_PREFIX_BYTES: usize = 4_096;

/// The request's prompt-cache key (SPEC R19's `cache-optimized`): its session's pin key
/// when it names a session (one affinity mechanism for both, R15), else the SHA-256 of
/// the prompt's opening: `system` / `instructions` and the first element of `messages` /
/// `input` (a chat's system message, a Messages or Responses conversation's first turn),
/// each cut at [`CACHE_PREFIX_BYTES`] — what stays the same from one turn of a
/// conversation to the next, and what a provider's prompt cache starts with. `None` for
/// a request with neither.
pub fn cache_key(session: Option<&SessionKey>, body: &RawObject) -> Option<[u8; 32]> {
    if let Some(s) = session {
        return Some(s.0);
    }
    let cut = |raw: &str| -> usize {
        let end = raw.len().min(CACHE_PREFIX_BYTES);
        (0..=end)
            .rev()
            .find(|&i| raw.is_char_boundary(i))
            .unwrap_or(0)
    };
    let mut h = Sha256::new();
    let mut any = false;
    for name in ["system", "instructions"] {
        if let Some(raw) = body.member(name) {
            h.update(name.as_bytes());
            h.update([0]);
            h.update(&raw.as_bytes()[..cut(raw)]);
            any = true;
        }
    }
    for name in ["messages", "input"] {
        let Some(raw) = body.member(name) else {
            continue;
        };
        let first = match serde_json::from_str::<Vec<&serde_json::value::RawValue>>(raw) {
            Ok(items) => items.first().map(|v| v.get()),
            // A Responses `input` may be one string.
            Err(_) => Some(raw),
        };
        if let Some(first) = first {
            h.update(name.as_bytes());
            h.update([0]);
            h.update(&first.as_bytes()[..cut(first)]);
            any = true;
        }
    }
    any.then(|| h.finalize().into())
}

/// The rendezvous (highest random weight) score of `connection` for `key`: the
/// connection with the highest score takes the key, and when a connection goes away
/// only its keys move.
pub fn rendezvous(key: &[u8; 32], connection: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(key);
    h.update(connection.as_bytes());
    let d: [u8; 32] = h.finalize().into();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    u64::from_be_bytes(first)
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

/// The most pins a table holds; past it the least recently used tenth go.
pub const MAX_PINS: usize = 100_000;

/// The pins, bounded, with the changes not yet persisted. Pure state: the shell holds it
/// behind its store and passes `now`.
#[derive(Debug, Clone)]
pub struct Table {
    pins: HashMap<SessionKey, Pin>,
    /// Changed since the last [`Table::take_dirty`]: the pin, or `None` when deleted.
    dirty: HashMap<SessionKey, Option<Pin>>,
    cap: usize,
}

impl Default for Table {
    fn default() -> Self {
        Self::with_cap(MAX_PINS)
    }
}

impl Table {
    /// A table of at most `cap` pins (at least 1).
    pub fn with_cap(cap: usize) -> Self {
        Self {
            pins: HashMap::new(),
            dirty: HashMap::new(),
            cap: cap.max(1),
        }
    }

    /// The session's pin while it lives; an expired one is dropped.
    pub fn get(&mut self, key: &SessionKey, ttl_ms: u64, now: UnixMillis) -> Option<Pin> {
        let pin = self.pins.get(key)?;
        if pin.live(ttl_ms, now) {
            return Some(pin.clone());
        }
        self.pins.remove(key);
        self.dirty.insert(*key, None);
        None
    }

    /// Applies the lifecycle's `change` to the session of client key `key_id`.
    pub fn apply(&mut self, key: SessionKey, key_id: &str, change: Change, now: UnixMillis) {
        match change {
            Change::Keep => {}
            Change::Delete => {
                if self.pins.remove(&key).is_some() {
                    self.dirty.insert(key, None);
                }
            }
            Change::Refresh => {
                if let Some(pin) = self.pins.get_mut(&key) {
                    pin.last_ms = now;
                    self.dirty.insert(key, Some(pin.clone()));
                }
            }
            Change::Write(connection) => {
                let created_ms = self
                    .pins
                    .get(&key)
                    .filter(|p| p.connection == connection)
                    .map_or(now, |p| p.created_ms);
                let pin = Pin {
                    connection,
                    key_id: key_id.to_owned(),
                    created_ms,
                    last_ms: now,
                };
                if !self.pins.contains_key(&key) && self.pins.len() >= self.cap {
                    self.evict();
                }
                self.dirty.insert(key, Some(pin.clone()));
                self.pins.insert(key, pin);
            }
        }
    }

    /// Drops the least recently used tenth of the pins (at least one).
    fn evict(&mut self) {
        let mut ages: Vec<(UnixMillis, SessionKey)> =
            self.pins.iter().map(|(k, p)| (p.last_ms, *k)).collect();
        let n = (ages.len() / 10).max(1).min(ages.len());
        ages.select_nth_unstable(n - 1);
        for (_, key) in ages.into_iter().take(n) {
            self.pins.remove(&key);
            self.dirty.insert(key, None);
        }
    }

    /// Removes the session's pin (an operator's release); whether there was one.
    pub fn remove(&mut self, key: &SessionKey) -> bool {
        let had = self.pins.remove(key).is_some();
        if had {
            self.dirty.insert(*key, None);
        }
        had
    }

    /// Drops the pins `keep` says no to; their deletion is persisted.
    pub fn retain(&mut self, keep: impl Fn(&Pin) -> bool) {
        let dirty = &mut self.dirty;
        self.pins.retain(|key, pin| {
            let kept = keep(pin);
            if !kept {
                dirty.insert(*key, None);
            }
            kept
        });
    }

    /// Puts persisted pins back, as they were (nothing to persist).
    pub fn load(&mut self, pins: impl IntoIterator<Item = (SessionKey, Pin)>) {
        for (key, pin) in pins {
            if self.pins.len() >= self.cap {
                break;
            }
            self.pins.insert(key, pin);
        }
    }

    /// Takes in pins another replica wrote (SPEC O6): each replaces this table's pin of
    /// its session when it was used later (or there is none and the table has room);
    /// a pin with a change of this table's own not yet persisted is kept, as that change
    /// is newer news. Nothing to persist.
    pub fn merge(&mut self, pins: impl IntoIterator<Item = (SessionKey, Pin)>) {
        for (key, pin) in pins {
            if self.dirty.contains_key(&key) {
                continue;
            }
            let room = self.pins.len() < self.cap;
            match self.pins.get_mut(&key) {
                Some(mine) if mine.last_ms < pin.last_ms => *mine = pin,
                Some(_) => {}
                None if room => {
                    self.pins.insert(key, pin);
                }
                None => {}
            }
        }
    }

    /// The changes since the last call, to persist.
    pub fn take_dirty(&mut self) -> Vec<(SessionKey, Option<Pin>)> {
        self.dirty.drain().collect()
    }

    /// Gives back changes that could not be persisted, unless newer ones replaced them.
    pub fn requeue(&mut self, changes: Vec<(SessionKey, Option<Pin>)>) {
        for (key, change) in changes {
            self.dirty.entry(key).or_insert(change);
        }
    }

    /// The live pins, most recently used first.
    pub fn live(&self, ttl_ms: u64, now: UnixMillis) -> Vec<(SessionKey, Pin)> {
        let mut out: Vec<(SessionKey, Pin)> = self
            .pins
            .iter()
            .filter(|(_, p)| p.live(ttl_ms, now))
            .map(|(k, p)| (*k, p.clone()))
            .collect();
        out.sort_by(|a, b| b.1.last_ms.cmp(&a.1.last_ms).then(a.0 .0.cmp(&b.0 .0)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(json: &str) -> RawObject {
        RawObject::parse(json.as_bytes()).unwrap()
    }

    fn found(headers: &[(&str, &str)], json: &str) -> Option<(Source, String)> {
        session_id(headers.iter().map(|(n, v)| (*n, v.as_bytes())), &body(json))
    }

    #[test]
    fn the_first_header_in_spec_order_wins_then_the_body() {
        // In reverse, so order of arrival does not decide.
        let all: Vec<(&str, &str)> = SESSION_HEADERS.iter().rev().map(|h| (*h, *h)).collect();
        for i in 0..SESSION_HEADERS.len() {
            let late = &all[..all.len() - i];
            let (source, id) = found(late, r#"{"prompt_cache_key":"p"}"#).unwrap();
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
        // An empty header does not count; nor does one that is not text.
        assert_eq!(
            found(&[("x-switchyard-session", " "), ("session-id", "b")], "{}"),
            Some((Source::Header("session-id"), "b".into()))
        );
        let not_text = [
            ("x-switchyard-session", &[0xff_u8][..]),
            ("thread-id", b"t"),
        ];
        assert_eq!(
            session_id(not_text, &body("{}")),
            Some((Source::Header("thread-id"), "t".into()))
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
        Candidate::for_test("p", conn, "m", 0)
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
    fn the_table_writes_refreshes_moves_and_deletes_and_records_each_change() {
        let mut t = Table::default();
        let k = SessionKey::of("k", "s");
        assert_eq!(t.get(&k, 1_000, 0), None);
        t.apply(k, "k", Change::Write("a".into()), 100);
        assert_eq!(
            t.get(&k, 1_000, 500).map(|p| p.connection),
            Some("a".into())
        );
        t.apply(k, "k", Change::Refresh, 900);
        let p = t.get(&k, 1_000, 1_800).unwrap();
        assert_eq!((p.created_ms, p.last_ms), (100, 900));
        // Moved: a new creation time.
        t.apply(k, "k", Change::Write("b".into()), 1_000);
        let p = t.get(&k, 1_000, 1_000).unwrap();
        assert_eq!((p.connection.as_str(), p.created_ms), ("b", 1_000));
        // Written again to the same connection: created stays.
        t.apply(k, "k", Change::Write("b".into()), 1_200);
        assert_eq!(t.get(&k, 1_000, 1_200).unwrap().created_ms, 1_000);
        let dirty = t.take_dirty();
        assert_eq!(dirty.len(), 1);
        assert_eq!(dirty[0].1.as_ref().map(|p| p.last_ms), Some(1_200));
        assert!(t.take_dirty().is_empty());
        t.apply(k, "k", Change::Keep, 1_300);
        assert!(t.take_dirty().is_empty());
        t.apply(k, "k", Change::Delete, 1_300);
        assert_eq!(t.get(&k, 1_000, 1_300), None);
        assert_eq!(t.take_dirty(), vec![(k, None)]);
        // Refreshing or deleting what is not there changes nothing.
        t.apply(k, "k", Change::Refresh, 1_400);
        t.apply(k, "k", Change::Delete, 1_400);
        assert!(t.take_dirty().is_empty());
    }

    #[test]
    fn expired_pins_are_dropped_and_the_table_stays_bounded() {
        let mut t = Table::with_cap(20);
        let key = |i: u64| SessionKey::of("k", &i.to_string());
        for i in 0..20 {
            t.apply(key(i), "k", Change::Write("a".into()), i);
        }
        assert_eq!(t.live(1_000, 20).len(), 20);
        // The 21st evicts the least recently used tenth: two pins.
        t.apply(key(20), "k", Change::Write("a".into()), 20);
        let live = t.live(1_000, 21);
        assert_eq!(live.len(), 19);
        assert_eq!(live[0].0, key(20));
        assert!(t.get(&key(0), 1_000, 21).is_none() && t.get(&key(1), 1_000, 21).is_none());
        assert!(t.get(&key(2), 1_000, 21).is_some());
        // Past its time to live a pin is gone, and its deletion is persisted.
        t.take_dirty();
        assert_eq!(t.get(&key(2), 10, 12), None);
        assert_eq!(t.take_dirty(), vec![(key(2), None)]);
        // A failed write is requeued unless a newer change replaced it.
        t.requeue(vec![(key(3), None)]);
        t.apply(key(4), "k", Change::Refresh, 30);
        t.requeue(vec![(key(4), None)]);
        let mut dirty = t.take_dirty();
        dirty.sort_by_key(|(k, _)| k.0);
        assert_eq!(dirty.len(), 2);
        assert!(dirty.iter().any(|(k, c)| *k == key(4) && c.is_some()));
        assert!(t.remove(&key(5)));
        assert!(!t.remove(&key(5)));
        // Pins on a connection that is gone go, and their deletion is persisted.
        t.apply(key(6), "k", Change::Write("gone".into()), 40);
        t.take_dirty();
        t.retain(|p| p.connection != "gone");
        assert_eq!(t.get(&key(6), 1_000, 41), None);
        assert_eq!(t.take_dirty(), vec![(key(6), None)]);
        assert!(t.get(&key(7), 1_000, 41).is_some());
    }

    #[test]
    fn pins_of_other_replicas_are_taken_in_when_newer_and_never_persisted_again() {
        let key = |i: u64| SessionKey::of("k", &i.to_string());
        let mut t = Table::with_cap(3);
        t.apply(key(1), "k", Change::Write("mine".into()), 10);
        t.take_dirty();
        t.apply(key(2), "k", Change::Write("unsaved".into()), 10);
        t.merge([
            (key(1), pin("older", 5)),
            (key(2), pin("theirs", 50)),
            (key(3), pin("new", 20)),
            (key(4), pin("no room", 20)),
        ]);
        assert_eq!(t.get(&key(1), 1_000, 60).unwrap().connection, "mine");
        assert_eq!(t.get(&key(2), 1_000, 60).unwrap().connection, "unsaved");
        assert_eq!(t.get(&key(3), 1_000, 60).unwrap().connection, "new");
        assert_eq!(t.get(&key(4), 1_000, 60), None);
        assert_eq!(t.take_dirty().len(), 1, "only this table's own change");
        t.merge([(key(1), pin("moved", 30))]);
        assert_eq!(t.get(&key(1), 1_000, 60).unwrap().connection, "moved");
        assert!(t.take_dirty().is_empty());
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

    #[test]
    fn the_cache_key_is_the_sessions_else_the_prompts_opening() {
        let session = SessionKey::of("k1", "s1");
        let chat = |system: &str, turns: usize| {
            let mut messages = vec![format!(r#"{{"role":"system","content":"{system}"}}"#)];
            messages
                .extend((0..turns).map(|i| format!(r#"{{"role":"user","content":"turn {i}"}}"#)));
            body(&format!(
                r#"{{"model":"m","messages":[{}]}}"#,
                messages.join(",")
            ))
        };
        assert_eq!(cache_key(Some(&session), &chat("a", 1)), Some(session.0));
        // Every turn of one conversation shares its opening; another system prompt does not.
        let first = cache_key(None, &chat("be brief", 1));
        assert!(first.is_some());
        assert_eq!(first, cache_key(None, &chat("be brief", 5)));
        assert_ne!(first, cache_key(None, &chat("be long", 1)));
        // Messages: `system` and the first turn.
        let messages = |turns: &[&str]| {
            let t: Vec<String> = turns
                .iter()
                .map(|x| format!(r#"{{"role":"user","content":"{x}"}}"#))
                .collect();
            body(&format!(r#"{{"system":"s","messages":[{}]}}"#, t.join(",")))
        };
        assert_eq!(
            cache_key(None, &messages(&["hi"])),
            cache_key(None, &messages(&["hi", "more"]))
        );
        assert_ne!(
            cache_key(None, &messages(&["hi"])),
            cache_key(None, &messages(&["hello"]))
        );
        // Responses: one string of input is its opening.
        assert!(cache_key(None, &body(r#"{"input":"hello"}"#)).is_some());
        assert_eq!(cache_key(None, &body(r#"{"model":"m"}"#)), None);
        // A multi-byte character at the cut does not split.
        let wide = body(&format!(r#"{{"system":"{}"}}"#, "é".repeat(3_000)));
        assert!(cache_key(None, &wide).is_some());
    }

    #[test]
    fn rendezvous_scores_differ_by_connection_and_key() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        assert_eq!(rendezvous(&a, "c1"), rendezvous(&a, "c1"));
        assert_ne!(rendezvous(&a, "c1"), rendezvous(&a, "c2"));
        assert_ne!(rendezvous(&a, "c1"), rendezvous(&b, "c1"));
    }
}
