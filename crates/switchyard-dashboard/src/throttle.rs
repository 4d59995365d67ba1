//! Sign-in throttling (SPEC O5): every attempt to sign in with a token takes a cell
//! from its client's bucket and then from a global one (GCRA, the `governor` crate);
//! an attempt that finds either empty is answered `429` with `Retry-After`, before the
//! token is looked at, so a throttled guess learns nothing.
//!
//! A client is its peer address (an IPv6 client its /64, which one host usually holds
//! whole). One address gets [`CLIENT_BURST`] attempts, then one every
//! [`CLIENT_PERIOD`]: a person who mistypes waits two seconds, not minutes. The global
//! bucket ([`GLOBAL_BURST`], then one every [`GLOBAL_PERIOD`]) refills ten times faster
//! than one address can drain it, so only many addresses at once slow everyone down.
//! The one-time link is not throttled: its tokens are 256 random bits, used once.
//!
//! Memory is bounded: once the client table holds [`MAX_CLIENTS`] it is pruned of the
//! addresses whose bucket has been full again for a period; while it is still full
//! after that, every attempt waits one client period.

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

/// Attempts one client may make at once.
pub const CLIENT_BURST: u32 = 5;

/// How often a client gets one more attempt.
pub const CLIENT_PERIOD: Duration = Duration::from_secs(2);

/// Attempts all clients together may make at once.
pub const GLOBAL_BURST: u32 = 30;

/// How often all clients together get one more attempt.
pub const GLOBAL_PERIOD: Duration = Duration::from_millis(200);

/// Most clients the table holds.
pub const MAX_CLIENTS: usize = 4096;

/// `n` as a `NonZeroU32` (the constants above are not zero).
const fn nonzero(n: u32) -> NonZeroU32 {
    match NonZeroU32::new(n) {
        Some(n) => n,
        None => NonZeroU32::MIN,
    }
}

/// A quota of `burst` cells, one more every `period`.
fn quota(burst: u32, period: Duration) -> Quota {
    Quota::with_period(period)
        .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
        .allow_burst(nonzero(burst))
}

/// Who an attempt is counted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Client {
    V4([u8; 4]),
    /// The /64 an IPv6 address is in.
    V6([u8; 8]),
    /// A request the server did not give the peer address of.
    Unknown,
}

impl Client {
    pub fn of(peer: Option<IpAddr>) -> Self {
        match peer.map(|ip| ip.to_canonical()) {
            Some(IpAddr::V4(v4)) => Client::V4(v4.octets()),
            Some(IpAddr::V6(v6)) => {
                let mut prefix = [0u8; 8];
                prefix.copy_from_slice(&v6.octets()[..8]);
                Client::V6(prefix)
            }
            None => Client::Unknown,
        }
    }
}

type Clients<C> =
    RateLimiter<Client, DashMapStateStore<Client>, C, NoOpMiddleware<<C as Clock>::Instant>>;
type Global<C> = RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// The sign-in buckets.
#[derive(Debug)]
pub struct Throttle<C: Clock = DefaultClock> {
    clients: Clients<C>,
    global: Global<C>,
    clock: C,
}

impl Default for Throttle {
    fn default() -> Self {
        Self::with_clock(DefaultClock::default())
    }
}

impl<C: Clock + Clone> Throttle<C> {
    pub fn with_clock(clock: C) -> Self {
        Self {
            clients: RateLimiter::new(
                quota(CLIENT_BURST, CLIENT_PERIOD),
                DashMapStateStore::default(),
                clock.clone(),
            ),
            global: RateLimiter::direct_with_clock(
                quota(GLOBAL_BURST, GLOBAL_PERIOD),
                clock.clone(),
            ),
            clock,
        }
    }

    /// Takes one attempt for `client`: `Err` with the seconds to wait (rounded up, at
    /// least 1) when its bucket or the global one is empty.
    pub fn attempt(&self, client: Client) -> Result<(), u64> {
        if self.clients.len() >= MAX_CLIENTS {
            self.clients.retain_recent();
            self.clients.shrink_to_fit();
            if self.clients.len() >= MAX_CLIENTS {
                return Err(seconds(CLIENT_PERIOD));
            }
        }
        let now = self.clock.now();
        self.clients
            .check_key(&client)
            .map_err(|n| seconds(n.wait_time_from(now)))?;
        self.global
            .check()
            .map_err(|n| seconds(n.wait_time_from(now)))
    }

    /// Clients held (pruned or not).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.clients.len()
    }
}

/// `wait` in whole seconds, rounded up, at least 1.
fn seconds(wait: Duration) -> u64 {
    let whole = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    whole.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(last: u8) -> Client {
        Client::of(Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))))
    }

    #[test]
    fn a_client_gets_a_burst_then_one_attempt_every_two_seconds() {
        let clock = FakeRelativeClock::default();
        let t = Throttle::with_clock(clock.clone());
        for _ in 0..5 {
            assert_eq!(t.attempt(v4(1)), Ok(()));
        }
        assert_eq!(t.attempt(v4(1)), Err(2));
        assert_eq!(t.attempt(v4(2)), Ok(()), "another address is not slowed");
        clock.advance(Duration::from_millis(1500));
        assert_eq!(t.attempt(v4(1)), Err(1));
        clock.advance(Duration::from_millis(500));
        assert_eq!(t.attempt(v4(1)), Ok(()));
        assert_eq!(t.attempt(v4(1)), Err(2));
    }

    #[test]
    fn many_clients_together_meet_the_global_bucket() {
        let clock = FakeRelativeClock::default();
        let t = Throttle::with_clock(clock.clone());
        for client in 0..6 {
            for _ in 0..5 {
                assert_eq!(t.attempt(v4(client)), Ok(()));
            }
        }
        assert_eq!(t.attempt(v4(100)), Err(1), "the global bucket is empty");
        clock.advance(GLOBAL_PERIOD);
        assert_eq!(t.attempt(v4(100)), Ok(()));
    }

    #[test]
    fn an_ipv6_client_is_its_slash_64_and_a_mapped_ipv4_is_the_ipv4() {
        let a: Ipv6Addr = "2001:db8:1:2::1".parse().unwrap();
        let b: Ipv6Addr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: Ipv6Addr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(Client::of(Some(a.into())), Client::of(Some(b.into())));
        assert_ne!(Client::of(Some(a.into())), Client::of(Some(c.into())));
        let mapped: Ipv6Addr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(Client::of(Some(mapped.into())), v4(7));
        assert_eq!(Client::of(None), Client::Unknown);
    }

    #[test]
    fn the_client_table_is_pruned_and_bounded() {
        let clock = FakeRelativeClock::default();
        let t = Throttle::with_clock(clock.clone());
        let client = |i: usize| Client::V6(u64::try_from(i).unwrap().to_be_bytes());
        // Each new address takes a cell of its own, then finds the global bucket empty
        // after the first 30.
        for i in 0..MAX_CLIENTS {
            let expected = if i < 30 { Ok(()) } else { Err(1) };
            assert_eq!(t.attempt(client(i)), expected, "{i}");
        }
        assert_eq!(t.held(), MAX_CLIENTS);
        // Every bucket is still short of full: the table is full, everyone waits.
        assert_eq!(t.attempt(client(MAX_CLIENTS)), Err(2));
        assert_eq!(t.held(), MAX_CLIENTS);
        // Once the buckets refilled (governor prunes one period after that), pruning
        // makes room again.
        clock.advance(2 * CLIENT_PERIOD);
        assert_eq!(t.attempt(client(MAX_CLIENTS)), Ok(()));
        assert_eq!(t.held(), 1);
    }

    #[test]
    fn waits_round_up_to_whole_seconds() {
        assert_eq!(seconds(Duration::ZERO), 1);
        assert_eq!(seconds(Duration::from_millis(1)), 1);
        assert_eq!(seconds(Duration::from_millis(1000)), 1);
        assert_eq!(seconds(Duration::from_millis(1001)), 2);
    }
}
