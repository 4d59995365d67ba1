//! Exclusive session leases (SPEC R16): one managed client session owns one connection,
//! fenced by a generation, until it releases the lease or lets it lapse.
//!
//! - The owner is an opaque token, `vlo_` and 43 base64url characters; only its SHA-256
//!   ([`OwnerHash`]) is kept.
//! - A key may hold leases only with the `lease:exclusive` scope and a non-empty
//!   `allowedConnections` ([`permitted`]). That list says which connections a lease may
//!   take; it reserves nothing. Only a live lease keeps other requests off a connection
//!   ([`Table::held_by_other`]).
//! - The generation is a fencing token: each acquisition by an owner gets the next one,
//!   and an inference request must present its lease's exact generation ([`fence`]).
//! - A lease lives until `expires_ms`; [`renew`] extends it, [`release`] ends it. A
//!   lapsed lease is ignored at once and swept by the next write.
//! - Each decision returns the [`Write`] the shell persists, and the shell applies it to
//!   its [`Table`] only once the store took it; the store's unique indexes on the active
//!   owner and the active connection are the last word when replicas race.
//!
//! Nothing here reads a clock or the store: `now` and the next generation come in.

use crate::UnixMillis;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// The scope a key needs to hold leases.
pub const SCOPE: &str = "lease:exclusive";
/// The request header naming the lease owner.
pub const OWNER_HEADER: &str = "x-omniroute-lease-owner";
/// The request header carrying the lease's generation.
pub const GENERATION_HEADER: &str = "x-omniroute-lease-generation";
/// Every owner token starts with this.
pub const OWNER_PREFIX: &str = "vlo_";
/// Base64url characters after the prefix (32 bytes, unpadded).
pub const OWNER_CHARS: usize = 43;
/// A lease's life when the client does not ask for another.
pub const DEFAULT_TTL_MS: u64 = 120_000;
pub const MIN_TTL_MS: u64 = 1_000;
pub const MAX_TTL_MS: u64 = 1_800_000;
/// Bounds of the `Retry-After` of a refusal for want of a free connection.
pub const MIN_RETRY_AFTER_S: u64 = 1;
pub const MAX_RETRY_AFTER_S: u64 = 3_600;
/// Active leases one process keeps; an acquire beyond it is refused.
pub const MAX_ACTIVE: usize = 10_000;

/// The SHA-256 of an owner token: all that is stored of it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerHash(pub [u8; 32]);

impl std::fmt::Debug for OwnerHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OwnerHash({})", &self.to_hex()[..12])
    }
}

impl OwnerHash {
    /// The hash of `token`, if it has the owner format.
    pub fn of_token(token: &str) -> Result<Self, Refusal> {
        let well_formed = token.strip_prefix(OWNER_PREFIX).is_some_and(|rest| {
            rest.len() == OWNER_CHARS
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
        if !well_formed {
            return Err(Refusal::MalformedOwner);
        }
        Ok(Self(Sha256::digest(token.as_bytes()).into()))
    }

    pub fn to_hex(self) -> String {
        crate::apikey::KeyHash(self.0).to_hex()
    }

    pub fn from_hex(s: &str) -> Option<Self> {
        crate::apikey::KeyHash::from_hex(s).map(|h| Self(h.0))
    }
}

/// The lease life asked for, checked: the default when none is asked.
pub fn ttl_ms(requested: Option<u64>) -> Result<u64, Refusal> {
    match requested {
        None => Ok(DEFAULT_TTL_MS),
        Some(ms) if (MIN_TTL_MS..=MAX_TTL_MS).contains(&ms) => Ok(ms),
        Some(ms) => Err(Refusal::Ttl { requested: ms }),
    }
}

/// A generation as a request header carries it: a positive decimal integer.
pub fn parse_generation(value: &str) -> Result<u64, Refusal> {
    let digits = value.trim();
    let valid = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    match digits.parse::<u64>() {
        Ok(g) if valid && g > 0 => Ok(g),
        _ => Err(Refusal::MalformedGeneration),
    }
}

/// Whether a key may hold leases: the scope and a non-empty `allowedConnections`.
pub fn permitted(key: &crate::catalog::ApiKey) -> Result<(), Refusal> {
    let listed = key
        .allowed_connections
        .as_ref()
        .is_some_and(|l| !l.is_empty());
    if key.has_scope(SCOPE) && listed {
        Ok(())
    } else {
        Err(Refusal::NotPermitted)
    }
}

/// One active lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub owner: OwnerHash,
    pub key_id: String,
    pub connection: String,
    pub generation: u64,
    pub acquired_ms: UnixMillis,
    pub renewed_ms: UnixMillis,
    pub expires_ms: UnixMillis,
}

impl Lease {
    pub fn live(&self, now: UnixMillis) -> bool {
        now < self.expires_ms
    }
}

/// How a lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Its owner released it.
    Released,
    /// It lapsed unrenewed.
    Expired,
    /// An operator released it, or the configuration took its key or connection away.
    Invalidated,
}

impl Ended {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Released => "released",
            Self::Expired => "expired",
            Self::Invalidated => "invalidated",
        }
    }
}

/// A change to persist, then apply to the [`Table`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// A new active lease.
    Insert(Lease),
    /// The owner's lease lives on, to `expires_ms`.
    Extend {
        owner: OwnerHash,
        renewed_ms: UnixMillis,
        expires_ms: UnixMillis,
    },
    /// The owner's lease moves to `connection`, same generation (its connection was
    /// not usable for a request and this one, free, served it).
    Move {
        owner: OwnerHash,
        connection: String,
    },
    /// The owner's lease ends.
    End { owner: OwnerHash, how: Ended },
}

/// Why a lease operation or a leased request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the lease owner must be `vlo_` followed by 43 base64url characters")]
    MalformedOwner,
    #[error("the lease generation must be a positive integer")]
    MalformedGeneration,
    #[error("ttlMs {requested} is out of range: use {MIN_TTL_MS} to {MAX_TTL_MS}")]
    Ttl { requested: u64 },
    #[error("this API key may not hold leases: it needs the `lease:exclusive` scope and a non-empty allowedConnections")]
    NotPermitted,
    #[error("this lease owner's lease belongs to another API key")]
    OwnerOfOtherKey,
    #[error("this lease owner holds no active lease")]
    NotActive,
    /// The current generation is not said: a holder of a stale generation must
    /// acquire again, not learn the number that would pass the fence.
    #[error("lease generation {presented} is stale: acquire the lease again")]
    Stale { presented: u64 },
    #[error("every connection that could take this is held by another owner's exclusive lease; retry in {retry_after_s} s")]
    CapacityUnavailable { retry_after_s: u64 },
    #[error("none of this API key's allowedConnections is enabled and in service")]
    NoEligibleConnection,
    #[error(
        "the gateway holds {MAX_ACTIVE} active leases, its limit; release some or retry later"
    )]
    TooMany,
}

impl Refusal {
    /// `Retry-After`, for a refusal that ends by itself.
    pub fn retry_after_s(self) -> Option<u64> {
        match self {
            Self::CapacityUnavailable { retry_after_s } => Some(retry_after_s),
            _ => None,
        }
    }
}

/// `Retry-After` for a lease that ends at `expires_ms`: whole seconds, 1 to 3600.
pub fn retry_after_s(expires_ms: UnixMillis, now: UnixMillis) -> u64 {
    expires_ms
        .saturating_sub(now)
        .div_ceil(1000)
        .clamp(MIN_RETRY_AFTER_S, MAX_RETRY_AFTER_S)
}

/// The active leases one process knows, by owner and by connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    by_owner: HashMap<OwnerHash, Lease>,
    by_connection: HashMap<String, OwnerHash>,
}

impl Table {
    /// A table of `leases` (later ones win a clash of owner or connection).
    pub fn of(leases: impl IntoIterator<Item = Lease>) -> Self {
        let mut t = Self::default();
        for l in leases {
            t.insert(l);
        }
        t
    }

    pub fn is_empty(&self) -> bool {
        self.by_owner.is_empty()
    }

    fn insert(&mut self, lease: Lease) {
        if let Some(other) = self
            .by_connection
            .insert(lease.connection.clone(), lease.owner)
        {
            if other != lease.owner {
                self.by_owner.remove(&other);
            }
        }
        if let Some(old) = self.by_owner.insert(lease.owner, lease) {
            if self.by_owner.get(&old.owner).map(|l| &l.connection) != Some(&old.connection) {
                self.by_connection.remove(&old.connection);
            }
        }
    }

    fn remove(&mut self, owner: &OwnerHash) -> Option<Lease> {
        let lease = self.by_owner.remove(owner)?;
        self.by_connection.remove(&lease.connection);
        Some(lease)
    }

    /// The owner's live lease.
    pub fn of_owner(&self, owner: &OwnerHash, now: UnixMillis) -> Option<&Lease> {
        self.by_owner.get(owner).filter(|l| l.live(now))
    }

    /// The live lease on `connection`.
    pub fn on(&self, connection: &str, now: UnixMillis) -> Option<&Lease> {
        let owner = self.by_connection.get(connection)?;
        self.of_owner(owner, now)
    }

    /// When a live lease of an owner other than `holder` keeps a request off
    /// `connection`: its expiry.
    pub fn held_by_other(
        &self,
        connection: &str,
        holder: Option<&OwnerHash>,
        now: UnixMillis,
    ) -> Option<UnixMillis> {
        self.on(connection, now)
            .filter(|l| Some(&l.owner) != holder)
            .map(|l| l.expires_ms)
    }

    /// The live leases, most recently acquired first.
    pub fn live(&self, now: UnixMillis) -> Vec<Lease> {
        let mut out: Vec<Lease> = self
            .by_owner
            .values()
            .filter(|l| l.live(now))
            .cloned()
            .collect();
        out.sort_by(|a, b| {
            b.acquired_ms
                .cmp(&a.acquired_ms)
                .then_with(|| a.owner.cmp(&b.owner))
        });
        out
    }

    /// Leases lapsed at `now`, as the writes that end them.
    pub fn lapsed(&self, now: UnixMillis) -> Vec<Write> {
        let mut owners: Vec<OwnerHash> = self
            .by_owner
            .values()
            .filter(|l| !l.live(now))
            .map(|l| l.owner)
            .collect();
        owners.sort();
        owners
            .into_iter()
            .map(|owner| Write::End {
                owner,
                how: Ended::Expired,
            })
            .collect()
    }

    /// Applies a write the store took.
    pub fn apply(&mut self, write: &Write) {
        match write {
            Write::Insert(lease) => self.insert(lease.clone()),
            Write::Extend {
                owner,
                renewed_ms,
                expires_ms,
            } => {
                if let Some(l) = self.by_owner.get_mut(owner) {
                    l.renewed_ms = *renewed_ms;
                    l.expires_ms = *expires_ms;
                }
            }
            Write::Move { owner, connection } => {
                if let Some(mut l) = self.remove(owner) {
                    l.connection.clone_from(connection);
                    self.insert(l);
                }
            }
            Write::End { owner, .. } => {
                self.remove(owner);
            }
        }
    }
}

/// What an acquire asks for.
#[derive(Debug, Clone, Copy)]
pub struct Acquire<'a> {
    pub owner: OwnerHash,
    pub key_id: &'a str,
    /// The key's connections that are enabled and in service, in the key's order.
    pub eligible: &'a [&'a str],
    pub ttl_ms: u64,
    /// The generation after the owner's highest one so far (1 for a new owner).
    pub next_generation: u64,
}

/// What an acquire did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    pub lease: Lease,
    /// The owner already held it (same key): it was extended, not taken anew.
    pub reused: bool,
    pub write: Write,
}

/// Acquires a lease for `req.owner`: the owner's own live lease extended if it holds
/// one, else the first eligible connection no live lease holds, at the next generation.
pub fn acquire(table: &Table, req: Acquire<'_>, now: UnixMillis) -> Result<Acquired, Refusal> {
    let expires_ms = now.saturating_add(req.ttl_ms);
    if let Some(held) = table.of_owner(&req.owner, now) {
        if held.key_id != req.key_id {
            return Err(Refusal::OwnerOfOtherKey);
        }
        let lease = Lease {
            renewed_ms: now,
            expires_ms,
            ..held.clone()
        };
        return Ok(Acquired {
            lease,
            reused: true,
            write: Write::Extend {
                owner: req.owner,
                renewed_ms: now,
                expires_ms,
            },
        });
    }
    if req.eligible.is_empty() {
        return Err(Refusal::NoEligibleConnection);
    }
    let free = req
        .eligible
        .iter()
        .find(|c| table.on(c, now).is_none())
        .ok_or_else(|| {
            let soonest = req
                .eligible
                .iter()
                .filter_map(|c| table.on(c, now).map(|l| l.expires_ms))
                .min()
                .unwrap_or(now);
            Refusal::CapacityUnavailable {
                retry_after_s: retry_after_s(soonest, now),
            }
        })?;
    let live = table.by_owner.values().filter(|l| l.live(now)).count();
    if live >= MAX_ACTIVE {
        return Err(Refusal::TooMany);
    }
    let lease = Lease {
        owner: req.owner,
        key_id: req.key_id.to_owned(),
        connection: (*free).to_owned(),
        generation: req.next_generation.max(1),
        acquired_ms: now,
        renewed_ms: now,
        expires_ms,
    };
    Ok(Acquired {
        write: Write::Insert(lease.clone()),
        lease,
        reused: false,
    })
}

/// The owner's live lease, if `key_id` holds it at exactly `generation`: what every
/// inference request and every renew or release must pass.
pub fn fence<'t>(
    table: &'t Table,
    owner: &OwnerHash,
    generation: u64,
    key_id: &str,
    now: UnixMillis,
) -> Result<&'t Lease, Refusal> {
    let lease = status(table, owner, key_id, now)?;
    if lease.generation != generation {
        return Err(Refusal::Stale {
            presented: generation,
        });
    }
    Ok(lease)
}

/// The owner's live lease, if `key_id` holds it.
pub fn status<'t>(
    table: &'t Table,
    owner: &OwnerHash,
    key_id: &str,
    now: UnixMillis,
) -> Result<&'t Lease, Refusal> {
    let lease = table.of_owner(owner, now).ok_or(Refusal::NotActive)?;
    if lease.key_id != key_id {
        return Err(Refusal::OwnerOfOtherKey);
    }
    Ok(lease)
}

/// Extends the fenced lease by `ttl_ms` from `now`.
pub fn renew(
    table: &Table,
    (owner, generation, key_id): (&OwnerHash, u64, &str),
    ttl_ms: u64,
    now: UnixMillis,
) -> Result<(Lease, Write), Refusal> {
    let held = fence(table, owner, generation, key_id, now)?;
    let expires_ms = now.saturating_add(ttl_ms);
    let lease = Lease {
        renewed_ms: now,
        expires_ms,
        ..held.clone()
    };
    Ok((
        lease,
        Write::Extend {
            owner: *owner,
            renewed_ms: now,
            expires_ms,
        },
    ))
}

/// Ends the fenced lease.
pub fn release(
    table: &Table,
    (owner, generation, key_id): (&OwnerHash, u64, &str),
    now: UnixMillis,
) -> Result<(Lease, Write), Refusal> {
    let held = fence(table, owner, generation, key_id, now)?;
    Ok((
        held.clone(),
        Write::End {
            owner: *owner,
            how: Ended::Released,
        },
    ))
}

/// What a holder's request does about the connection it is about to be sent to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bind {
    /// The lease's own connection.
    Same,
    /// Another connection, free: the lease moves there (its own was not usable).
    Move(Write),
    /// Another owner's live lease holds it, to this instant.
    Busy { expires_ms: UnixMillis },
}

/// The dispatch fence's binding of `lease` to `connection` (SPEC R16: each dispatch
/// binds the key and the connection).
pub fn bind(table: &Table, lease: &Lease, connection: &str, now: UnixMillis) -> Bind {
    if lease.connection == connection {
        return Bind::Same;
    }
    match table.held_by_other(connection, Some(&lease.owner), now) {
        Some(expires_ms) => Bind::Busy { expires_ms },
        None => Bind::Move(Write::Move {
            owner: lease.owner,
            connection: connection.to_owned(),
        }),
    }
}

/// The refusal of a request whose every candidate is leased by other owners (expiries
/// in `held_until`) and which has no other candidate: the soonest expiry decides the
/// `Retry-After`. `None` when something else is left or no lease was in the way.
pub fn capacity(held_until: &[UnixMillis], others_left: bool, now: UnixMillis) -> Option<Refusal> {
    if others_left {
        return None;
    }
    let soonest = held_until.iter().min()?;
    Some(Refusal::CapacityUnavailable {
        retry_after_s: retry_after_s(*soonest, now),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ApiKey;

    const T0: u64 = 1_000_000;
    /// `sha256sum` of `vlo_` and 43 `a`s.
    const HASH_OF_A: &str = "fa6e32ee9048f54dce4383f245fc256a546b95a94d6f57d0a4bcf0c9371bc040";

    fn token(c: char) -> String {
        format!("vlo_{}", c.to_string().repeat(OWNER_CHARS))
    }

    fn owner(c: char) -> OwnerHash {
        OwnerHash::of_token(&token(c)).unwrap()
    }

    fn lease(o: char, key: &str, conn: &str, generation: u64, expires_ms: u64) -> Lease {
        Lease {
            owner: owner(o),
            key_id: key.into(),
            connection: conn.into(),
            generation,
            acquired_ms: T0,
            renewed_ms: T0,
            expires_ms,
        }
    }

    fn req<'a>(o: char, key: &'a str, eligible: &'a [&'a str], next: u64) -> Acquire<'a> {
        Acquire {
            owner: owner(o),
            key_id: key,
            eligible,
            ttl_ms: DEFAULT_TTL_MS,
            next_generation: next,
        }
    }

    #[test]
    fn owner_tokens_have_one_format_and_only_their_hash_is_kept() {
        let good = token('a');
        assert_eq!(good.len(), 47);
        let h = OwnerHash::of_token(&good).unwrap();
        assert_eq!(h.to_hex(), HASH_OF_A);
        assert_eq!(h.to_hex().len(), 64);
        assert_eq!(OwnerHash::from_hex(&h.to_hex()), Some(h));
        assert!(!format!("{h:?}").contains(&good));
        let mixed = format!("vlo_{}-_{}", "Az09".repeat(10), "x");
        assert_eq!(mixed.len(), 47);
        assert!(OwnerHash::of_token(&mixed).is_ok());
        for bad in [
            String::new(),
            "vlo_".into(),
            format!("vlo_{}", "a".repeat(42)),
            format!("vlo_{}", "a".repeat(44)),
            format!("vlx_{}", "a".repeat(43)),
            format!("vlo_{}=", "a".repeat(42)),
            format!("vlo_{}+", "a".repeat(42)),
            format!("VLO_{}", "a".repeat(43)),
        ] {
            assert_eq!(
                OwnerHash::of_token(&bad),
                Err(Refusal::MalformedOwner),
                "{bad}"
            );
        }
    }

    #[test]
    fn ttl_and_generation_are_checked() {
        assert_eq!(ttl_ms(None), Ok(120_000));
        assert_eq!(ttl_ms(Some(1_000)), Ok(1_000));
        assert_eq!(ttl_ms(Some(1_800_000)), Ok(1_800_000));
        assert_eq!(ttl_ms(Some(999)), Err(Refusal::Ttl { requested: 999 }));
        assert_eq!(
            ttl_ms(Some(1_800_001)),
            Err(Refusal::Ttl {
                requested: 1_800_001
            })
        );
        assert_eq!(parse_generation("7"), Ok(7));
        assert_eq!(parse_generation(" 12 "), Ok(12));
        for bad in ["", "0", "-1", "+1", "1.0", "x", "99999999999999999999"] {
            assert_eq!(
                parse_generation(bad),
                Err(Refusal::MalformedGeneration),
                "{bad}"
            );
        }
    }

    #[test]
    fn only_a_scoped_key_with_listed_connections_may_lease() {
        let key = |scopes: &[&str], allowed: Option<Vec<String>>| ApiKey {
            id: "k".into(),
            name: "k".into(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            allowed_connections: allowed,
            allowed_models: None,
            revoked: false,
        };
        let some = Some(vec!["c1".to_owned()]);
        assert_eq!(permitted(&key(&[SCOPE], some.clone())), Ok(()));
        assert_eq!(
            permitted(&key(&[], some.clone())),
            Err(Refusal::NotPermitted)
        );
        assert_eq!(
            permitted(&key(&[SCOPE], Some(vec![]))),
            Err(Refusal::NotPermitted)
        );
        assert_eq!(permitted(&key(&[SCOPE], None)), Err(Refusal::NotPermitted));
        assert_eq!(
            permitted(&key(&["admin"], some)),
            Err(Refusal::NotPermitted)
        );
    }

    #[test]
    fn retry_after_is_whole_seconds_within_bounds() {
        assert_eq!(retry_after_s(T0 + 1, T0), 1);
        assert_eq!(retry_after_s(T0 + 1_000, T0), 1);
        assert_eq!(retry_after_s(T0 + 1_001, T0), 2);
        assert_eq!(retry_after_s(T0, T0), 1);
        assert_eq!(retry_after_s(T0 - 5, T0), 1);
        assert_eq!(retry_after_s(T0 + 3_600_000, T0), 3_600);
        assert_eq!(retry_after_s(T0 + 7_200_000, T0), 3_600);
    }

    #[test]
    fn acquire_takes_the_first_free_eligible_connection_at_the_next_generation() {
        let busy = Table::of([lease('b', "k2", "c1", 4, T0 + 30_000)]);
        let got = acquire(&busy, req('a', "k1", &["c1", "c2", "c3"], 3), T0).unwrap();
        let want = Lease {
            owner: owner('a'),
            key_id: "k1".into(),
            connection: "c2".into(),
            generation: 3,
            acquired_ms: T0,
            renewed_ms: T0,
            expires_ms: T0 + 120_000,
        };
        assert_eq!(
            got,
            Acquired {
                lease: want.clone(),
                reused: false,
                write: Write::Insert(want)
            }
        );
        // A new owner starts at 1.
        let fresh = acquire(&Table::default(), req('a', "k1", &["c1"], 0), T0).unwrap();
        assert_eq!(fresh.lease.generation, 1);
    }

    #[test]
    fn allowed_connections_reserve_nothing_only_live_leases_hold() {
        // A lapsed lease on c1 does not hold it.
        let lapsed = Table::of([lease('b', "k2", "c1", 1, T0)]);
        let got = acquire(&lapsed, req('a', "k1", &["c1"], 1), T0).unwrap();
        assert_eq!(got.lease.connection, "c1");
        assert_eq!(lapsed.held_by_other("c1", None, T0), None);
        assert_eq!(lapsed.held_by_other("c1", None, T0 - 1), Some(T0));
        // Nothing held: no connection is kept from anyone.
        let empty = Table::default();
        assert_eq!(empty.held_by_other("c1", None, T0), None);
    }

    #[test]
    fn acquire_refuses_with_the_soonest_expiry_when_every_eligible_connection_is_held() {
        let held = Table::of([
            lease('b', "k2", "c1", 1, T0 + 90_500),
            lease('c', "k3", "c2", 1, T0 + 30_200),
            lease('d', "k3", "c9", 1, T0 + 1_000),
        ]);
        assert_eq!(
            acquire(&held, req('a', "k1", &["c1", "c2"], 1), T0),
            Err(Refusal::CapacityUnavailable { retry_after_s: 31 })
        );
        assert_eq!(
            acquire(&held, req('a', "k1", &[], 1), T0),
            Err(Refusal::NoEligibleConnection)
        );
    }

    #[test]
    fn an_owner_acquiring_again_extends_its_lease_and_another_key_cannot_take_it() {
        let held = Table::of([lease('a', "k1", "c2", 5, T0 + 10_000)]);
        let got = acquire(&held, req('a', "k1", &["c1", "c2"], 6), T0 + 1).unwrap();
        assert!(got.reused);
        assert_eq!(got.lease.generation, 5);
        assert_eq!(got.lease.connection, "c2");
        assert_eq!(
            got.write,
            Write::Extend {
                owner: owner('a'),
                renewed_ms: T0 + 1,
                expires_ms: T0 + 120_001
            }
        );
        assert_eq!(
            acquire(&held, req('a', "k9", &["c1"], 6), T0),
            Err(Refusal::OwnerOfOtherKey)
        );
    }

    #[test]
    fn two_acquires_in_turn_for_one_connection_only_one_wins() {
        let mut table = Table::default();
        let first = acquire(&table, req('a', "k1", &["c1"], 1), T0).unwrap();
        table.apply(&first.write);
        assert_eq!(
            acquire(&table, req('b', "k2", &["c1"], 1), T0),
            Err(Refusal::CapacityUnavailable { retry_after_s: 120 })
        );
    }

    #[test]
    fn the_fence_refuses_stale_generations_other_keys_and_lapsed_leases() {
        let table = Table::of([lease('a', "k1", "c1", 3, T0 + 10_000)]);
        assert_eq!(
            fence(&table, &owner('a'), 3, "k1", T0).map(|l| l.generation),
            Ok(3)
        );
        assert_eq!(
            fence(&table, &owner('a'), 2, "k1", T0),
            Err(Refusal::Stale { presented: 2 })
        );
        assert_eq!(
            fence(&table, &owner('a'), 4, "k1", T0),
            Err(Refusal::Stale { presented: 4 })
        );
        assert_eq!(
            fence(&table, &owner('a'), 3, "k2", T0),
            Err(Refusal::OwnerOfOtherKey)
        );
        assert_eq!(
            fence(&table, &owner('a'), 3, "k1", T0 + 10_000),
            Err(Refusal::NotActive)
        );
        assert_eq!(
            fence(&table, &owner('z'), 3, "k1", T0),
            Err(Refusal::NotActive)
        );
    }

    #[test]
    fn renew_extends_and_release_ends_only_a_fenced_lease() {
        let mut table = Table::of([lease('a', "k1", "c1", 2, T0 + 10_000)]);
        let (renewed, write) = renew(&table, (&owner('a'), 2, "k1"), 60_000, T0 + 9_000).unwrap();
        assert_eq!(renewed.expires_ms, T0 + 69_000);
        assert_eq!(renewed.renewed_ms, T0 + 9_000);
        table.apply(&write);
        assert!(table.of_owner(&owner('a'), T0 + 68_999).is_some());
        assert_eq!(
            renew(&table, (&owner('a'), 1, "k1"), 60_000, T0),
            Err(Refusal::Stale { presented: 1 })
        );
        assert_eq!(
            release(&table, (&owner('a'), 2, "k2"), T0),
            Err(Refusal::OwnerOfOtherKey)
        );
        let (released, write) = release(&table, (&owner('a'), 2, "k1"), T0).unwrap();
        assert_eq!(released.connection, "c1");
        assert_eq!(
            write,
            Write::End {
                owner: owner('a'),
                how: Ended::Released
            }
        );
        table.apply(&write);
        assert!(table.is_empty());
        assert_eq!(
            release(&table, (&owner('a'), 2, "k1"), T0),
            Err(Refusal::NotActive)
        );
        // A lapsed lease cannot be renewed back to life.
        let lapsed = Table::of([lease('a', "k1", "c1", 2, T0)]);
        assert_eq!(
            renew(&lapsed, (&owner('a'), 2, "k1"), 60_000, T0),
            Err(Refusal::NotActive)
        );
    }

    #[test]
    fn binding_keeps_moves_or_is_refused_by_another_owner() {
        let table = Table::of([
            lease('a', "k1", "c1", 2, T0 + 10_000),
            lease('b', "k2", "c2", 1, T0 + 20_000),
        ]);
        let mine = table.of_owner(&owner('a'), T0).unwrap().clone();
        assert_eq!(bind(&table, &mine, "c1", T0), Bind::Same);
        assert_eq!(
            bind(&table, &mine, "c2", T0),
            Bind::Busy {
                expires_ms: T0 + 20_000
            }
        );
        let moved = bind(&table, &mine, "c3", T0);
        assert_eq!(
            moved,
            Bind::Move(Write::Move {
                owner: owner('a'),
                connection: "c3".into()
            })
        );
        let mut after = table.clone();
        if let Bind::Move(w) = &moved {
            after.apply(w);
        }
        let l = after.of_owner(&owner('a'), T0).unwrap();
        assert_eq!((l.connection.as_str(), l.generation), ("c3", 2));
        assert_eq!(after.on("c1", T0), None);
        assert_eq!(after.on("c3", T0).map(|l| l.owner), Some(owner('a')));
        // After its lease lapsed, c2 is free to move to.
        assert!(matches!(
            bind(&table, &mine, "c2", T0 + 20_000),
            Bind::Move(_)
        ));
    }

    #[test]
    fn held_by_other_spares_the_holder() {
        let table = Table::of([lease('a', "k1", "c1", 1, T0 + 5_000)]);
        assert_eq!(table.held_by_other("c1", Some(&owner('a')), T0), None);
        assert_eq!(
            table.held_by_other("c1", Some(&owner('b')), T0),
            Some(T0 + 5_000)
        );
        assert_eq!(table.held_by_other("c1", None, T0), Some(T0 + 5_000));
        assert_eq!(table.held_by_other("c2", None, T0), None);
    }

    #[test]
    fn capacity_is_refused_only_when_leases_left_nothing() {
        assert_eq!(
            capacity(&[T0 + 61_000, T0 + 2_500], false, T0),
            Some(Refusal::CapacityUnavailable { retry_after_s: 3 })
        );
        assert_eq!(capacity(&[T0 + 2_500], true, T0), None);
        assert_eq!(capacity(&[], false, T0), None);
    }

    #[test]
    fn the_table_sweeps_lapsed_leases_and_lists_live_ones_newest_first() {
        let mut older = lease('a', "k1", "c1", 1, T0 + 5_000);
        older.acquired_ms = T0 - 10;
        let newer = lease('b', "k1", "c2", 1, T0 + 50_000);
        let mut table = Table::of([older.clone(), newer.clone()]);
        assert_eq!(table.live(T0), vec![newer.clone(), older]);
        let lapsed = table.lapsed(T0 + 5_000);
        assert_eq!(
            lapsed,
            vec![Write::End {
                owner: owner('a'),
                how: Ended::Expired
            }]
        );
        for w in &lapsed {
            table.apply(w);
        }
        assert_eq!(table.live(T0), vec![newer]);
        assert_eq!(table.on("c1", T0), None);
    }

    #[test]
    fn a_loaded_clash_keeps_one_lease_per_owner_and_per_connection() {
        let table = Table::of([
            lease('a', "k1", "c1", 1, T0 + 5_000),
            lease('b', "k1", "c1", 1, T0 + 6_000),
            lease('b', "k1", "c2", 2, T0 + 7_000),
        ]);
        let live = table.live(T0);
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].owner, owner('b'));
        assert_eq!(live[0].connection, "c2");
        assert_eq!(table.on("c1", T0), None);
    }

    #[test]
    fn acquire_is_bounded() {
        let many = Table::of((0..MAX_ACTIVE).map(|i| {
            let mut l = lease('a', "k1", &format!("x{i}"), 1, T0 + 1_000);
            l.owner = OwnerHash(Sha256::digest(i.to_le_bytes()).into());
            l
        }));
        assert_eq!(
            acquire(&many, req('z', "k1", &["c1"], 1), T0),
            Err(Refusal::TooMany)
        );
    }
}
