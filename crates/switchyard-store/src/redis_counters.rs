//! Quota counters in Redis (SPEC Q4), for several gateway replicas sharing one pool.
//!
//! Each operation is one server-side Lua script, so a reservation's check-and-book is a
//! single atomic round trip. Scripts carry their version in their name (`reserve_v2`)
//! and key layout (`<prefix>:q1:…`), so a future layout can run beside this one. The
//! scripts read the time from the Redis server: replicas whose clocks disagree still see
//! the same windows. Metadata (pools, allocations) stays in the database.
//!
//! Every booking is recorded under a reservation id the caller picks, and settled by
//! that id to absolute targets: a settlement applied twice changes nothing the second
//! time, and a release that reaches Redis before its reservation (the caller gave up
//! waiting for a hanging Redis) makes that reservation book nothing when it runs.

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;
use std::time::Duration;
use switchyard_core::quota::window::SLOTS;

const COMMON: &str = include_str!("lua/common_v1.lua");

/// How long to wait for Redis to accept a connection before falling back to SQLite.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a booking's record lives after its reservation or its latest settlement: far
/// longer than any request runs between settlements (a stream settles as it grows), and
/// far longer than a command can sit in a hung Redis's input buffer before running. A
/// request that outlives it settles nothing and stays booked at its estimate, the safe
/// side.
pub const BOOKING_TTL_MS: u64 = 3_600_000;

/// How long one script may take before the call fails (and the request fails open). A
/// reservation reads a few hundred hash fields; even a busy Redis answers in
/// milliseconds, so a second means Redis is in trouble.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

/// Errors from the Redis store. None of them shows the URL (it may hold a password).
#[derive(Debug, thiserror::Error)]
pub enum RedisStoreError {
    /// The URL does not parse as a Redis URL; retrying cannot help.
    #[error("the Redis URL is invalid")]
    InvalidUrl,
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("redis script answered unexpectedly: {0}")]
    Reply(String),
}

impl RedisStoreError {
    /// Whether Redis could not be reached or did not answer (as opposed to answering
    /// with an error): what a breaker in front of Redis counts.
    pub fn is_outage(&self) -> bool {
        match self {
            Self::InvalidUrl => true,
            Self::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
            }
            Self::Reply(_) => false,
        }
    }
}

type Result<T> = std::result::Result<T, RedisStoreError>;

/// One dimension of a reservation, as the reserve script takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct DimArgs {
    /// `unit:window`.
    pub dim: String,
    pub slot_ms: u64,
    pub limit: f64,
    pub cost: f64,
    pub cap: Option<f64>,
    pub fair_share: f64,
    /// 0 hard, 1 soft, 2 burst.
    pub policy: u8,
    pub signal: Option<f64>,
}

/// The reserve script's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ReserveReply {
    pub admitted: bool,
    /// The Redis server's time.
    pub now: u64,
    /// Per dimension: the key's and the pool's window value before booking, and the
    /// slot the cost was (or would have been) booked into.
    pub dims: Vec<(f64, f64, u64)>,
}

/// An amount added to one slot of a dimension (carrying counts into Redis).
#[derive(Debug, Clone, PartialEq)]
pub struct SlotDelta {
    pub dim: String,
    pub slot: u64,
    pub slot_ms: u64,
    pub delta: f64,
}

/// One dimension of a settlement: the amount its booking should hold now.
#[derive(Debug, Clone, PartialEq)]
pub struct SettleTarget {
    pub dim: String,
    pub slot_ms: u64,
    pub target: f64,
}

/// The Redis counter store.
#[derive(Clone)]
pub struct RedisCounters {
    conn: ConnectionManager,
    prefix: String,
    reserve: Script,
    settle: Script,
    add: Script,
    peek: Script,
    slots: Script,
}

impl std::fmt::Debug for RedisCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCounters")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// A client of the Redis at `url` and a managed connection to it, failing within a few
/// seconds when Redis is unreachable; `response` bounds each command's answer.
pub(crate) async fn manager(
    url: &str,
    response: std::time::Duration,
) -> Result<(redis::Client, ConnectionManager)> {
    let client = redis::Client::open(url).map_err(|_| RedisStoreError::InvalidUrl)?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(response))
        .set_number_of_retries(1);
    let conn = within(
        CONNECT_TIMEOUT * 2,
        ConnectionManager::new_with_config(client.clone(), config),
    )
    .await??;
    Ok((client, conn))
}

/// `f`, or a timeout error after `limit`.
pub(crate) async fn within<T>(
    limit: std::time::Duration,
    f: impl std::future::Future<Output = T>,
) -> Result<T> {
    tokio::time::timeout(limit, f).await.map_err(|_| {
        RedisStoreError::Redis(redis::RedisError::from((
            redis::ErrorKind::Io,
            "connection timed out",
        )))
    })
}

fn script(body: &str) -> Script {
    Script::new(&format!("{COMMON}\n{body}"))
}

fn f(v: &str) -> Result<f64> {
    v.parse()
        .map_err(|_| RedisStoreError::Reply(format!("not a number: {v}")))
}

fn u(v: &str) -> Result<u64> {
    v.parse()
        .map_err(|_| RedisStoreError::Reply(format!("not an integer: {v}")))
}

impl RedisCounters {
    /// Connects (failing within a few seconds if Redis is unreachable) and checks the
    /// server answers.
    pub async fn connect(url: &str, prefix: &str) -> Result<Self> {
        let (_, mut conn) = manager(url, RESPONSE_TIMEOUT).await?;
        let pong: String = redis::cmd("PING").query_async(&mut conn).await?;
        if pong != "PONG" {
            return Err(RedisStoreError::Reply(pong));
        }
        Ok(Self {
            conn,
            prefix: prefix.to_owned(),
            reserve: script(include_str!("lua/reserve_v2.lua")),
            settle: script(include_str!("lua/settle_v2.lua")),
            add: script(include_str!("lua/add_v1.lua")),
            peek: script(include_str!("lua/peek_v1.lua")),
            slots: script(include_str!("lua/slots_v1.lua")),
        })
    }

    /// Decides and, when admitted, books under the reservation id `id` — atomically, in
    /// one round trip. `id` must be unique per booking; an id released before (see
    /// [`RedisCounters::settle`]) books nothing and answers not admitted.
    pub async fn reserve(
        &self,
        pool: &str,
        key: &str,
        id: &str,
        threshold: f64,
        dims: &[DimArgs],
    ) -> Result<ReserveReply> {
        let mut inv = self.reserve.prepare_invoke();
        inv.arg(&self.prefix)
            .arg(pool)
            .arg(key)
            .arg(threshold.to_string())
            .arg(id)
            .arg(BOOKING_TTL_MS)
            .arg(dims.len());
        for d in dims {
            inv.arg(&d.dim)
                .arg(d.slot_ms)
                .arg(SLOTS)
                .arg(d.limit.to_string())
                .arg(d.cost.to_string())
                .arg(d.cap.map_or("-1".to_owned(), |c| c.to_string()))
                .arg(d.fair_share.to_string())
                .arg(d.policy)
                .arg(d.signal.map_or("-1".to_owned(), |s| s.to_string()));
        }
        let mut conn = self.conn.clone();
        let reply: Vec<String> = inv.invoke_async(&mut conn).await?;
        if reply.len() != 2 + 3 * dims.len() {
            return Err(RedisStoreError::Reply(format!(
                "reserve returned {} values",
                reply.len()
            )));
        }
        let mut out = ReserveReply {
            admitted: reply[0] == "1",
            now: u(&reply[1])?,
            dims: Vec::with_capacity(dims.len()),
        };
        for c in reply[2..].chunks(3) {
            out.dims.push((f(&c[0])?, f(&c[1])?, u(&c[2])?));
        }
        Ok(out)
    }

    /// Moves the booking of reservation `id` to `targets` (one per dimension, in the
    /// order it was reserved with); `last` ends the booking. Idempotent. When nothing is
    /// booked under `id`, nothing will be: a reservation arriving later books nothing.
    pub async fn settle(
        &self,
        pool: &str,
        key: &str,
        (id, last): (&str, bool),
        targets: &[SettleTarget],
    ) -> Result<()> {
        let mut inv = self.settle.prepare_invoke();
        inv.arg(&self.prefix)
            .arg(pool)
            .arg(key)
            .arg(id)
            .arg(BOOKING_TTL_MS)
            .arg(u8::from(last))
            .arg(targets.len());
        for t in targets {
            inv.arg(&t.dim)
                .arg(t.slot_ms)
                .arg(SLOTS)
                .arg(t.target.to_string());
        }
        let mut conn = self.conn.clone();
        let _now: String = inv.invoke_async(&mut conn).await?;
        Ok(())
    }

    /// Adds amounts to slots of a key's (and the pool's) counters, outside any booking.
    pub async fn add(&self, pool: &str, key: &str, items: &[SlotDelta]) -> Result<()> {
        let mut inv = self.add.prepare_invoke();
        inv.arg(&self.prefix).arg(pool).arg(key).arg(items.len());
        for s in items {
            inv.arg(&s.dim)
                .arg(s.slot)
                .arg(s.slot_ms)
                .arg(SLOTS)
                .arg(s.delta.to_string());
        }
        let mut conn = self.conn.clone();
        let _now: String = inv.invoke_async(&mut conn).await?;
        Ok(())
    }

    /// The key's and the pool's window values per dimension `(dim, slot_ms)`, and the
    /// server time.
    pub async fn peek(
        &self,
        pool: &str,
        key: &str,
        dims: &[(String, u64)],
    ) -> Result<(u64, Vec<(f64, f64)>)> {
        let mut inv = self.peek.prepare_invoke();
        inv.arg(&self.prefix).arg(pool).arg(key).arg(dims.len());
        for (dim, slot_ms) in dims {
            inv.arg(dim).arg(*slot_ms).arg(SLOTS);
        }
        let mut conn = self.conn.clone();
        let reply: Vec<String> = inv.invoke_async(&mut conn).await?;
        if reply.len() != 1 + 2 * dims.len() {
            return Err(RedisStoreError::Reply(format!(
                "peek returned {} values",
                reply.len()
            )));
        }
        let values = reply[1..]
            .chunks(2)
            .map(|c| Ok((f(&c[0])?, f(&c[1])?)))
            .collect::<Result<Vec<_>>>()?;
        Ok((u(&reply[0])?, values))
    }

    /// The slot amounts of one counter (`field` = a key id, or `*` for the pool):
    /// `(now, [(slot, amount)])`, oldest first.
    pub async fn slots(
        &self,
        pool: &str,
        field: &str,
        dim: &str,
        slot_ms: u64,
    ) -> Result<(u64, Vec<(u64, f64)>)> {
        let mut inv = self.slots.prepare_invoke();
        inv.arg(&self.prefix)
            .arg(pool)
            .arg(field)
            .arg(dim)
            .arg(slot_ms)
            .arg(SLOTS);
        let mut conn = self.conn.clone();
        let reply: Vec<String> = inv.invoke_async(&mut conn).await?;
        if reply.len() < 2 {
            return Err(RedisStoreError::Reply("slots returned too little".into()));
        }
        let now = u(&reply[0])?;
        let cur = u(&reply[1])?;
        let first = cur.wrapping_sub(SLOTS);
        let amounts = reply[2..]
            .iter()
            .enumerate()
            .map(|(i, v)| Ok((first.wrapping_add(i as u64), f(v)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok((now, amounts))
    }

    /// Whether Redis answers: one `PING` (the connection manager reconnects first when
    /// the connection was lost).
    pub async fn ping(&self) -> Result<()> {
        let mut conn = self.conn.clone();
        let pong: String = redis::cmd("PING").query_async(&mut conn).await?;
        if pong == "PONG" {
            Ok(())
        } else {
            Err(RedisStoreError::Reply(pong))
        }
    }

    /// Deletes every counter under this store's prefix (tests and resets).
    pub async fn clear(&self) -> Result<()> {
        self.delete_matching(&format!("{}:q1:*", self.prefix)).await
    }

    /// Deletes the counters of one pool (the pool was deleted).
    pub async fn clear_pool(&self, pool: &str) -> Result<()> {
        self.delete_matching(&format!("{}:q1:{{{pool}}}:*", self.prefix))
            .await
    }

    async fn delete_matching(&self, pattern: &str) -> Result<()> {
        let mut conn = self.conn.clone();
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(500)
                .query_async(&mut conn)
                .await?;
            if !keys.is_empty() {
                let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await?;
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }
}
