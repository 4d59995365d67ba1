//! Which deadline a client's HTTP connection is under (SPEC O5), as a state machine the
//! server feeds with what happens on the connection: bytes received, requests started and
//! finished, the decision to drain it.
//!
//! A connection is always in one of three phases:
//!
//! - **head**: waiting for a request head — from the moment it is accepted, and on a
//!   kept-alive HTTP/1 connection from the first byte of its next request. Bounded by
//!   the header-read timeout, so silent and half-sent heads cannot hold a connection.
//! - **busy**: at least one request is being served (its body read, its handler running,
//!   its response — streams included — being sent). No connection deadline: the body has
//!   its own (enforced by the body wrapper), and the upstream deadlines bound the rest.
//! - **idle**: kept alive between requests, nothing received since the last response.
//!   Bounded by the keep-alive idle timeout. A multiplexed (HTTP/2) connection stays idle
//!   when bytes arrive with no request in flight: pings, window updates and settings
//!   acknowledgements are traffic, not a request head.
//!
//! A connection that expires is drained: it takes no new request and closes once
//! nothing is in flight. A draining connection that has nothing in flight gets a short
//! linger to flush and close on its own, after which it is dropped — at once when it has
//! never served a request (a half-sent first head has nothing to flush).
//!
//! Times are milliseconds on any monotonic clock the caller chooses (the server counts
//! from the connection's accept); deadlines are absolute on that clock, so a caller may
//! look at them late, or often, and still see the right one.
//!
//! The machine reads no clock, sets no timer and touches no socket: the server reports
//! each event with its time and arms its own watchdog at the deadline the machine gives.

/// What a client connection is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Head,
    Busy,
    Idle,
}

/// What a deadline is for, and so what happens when it passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// The request head did not arrive in time: drain the connection.
    HeaderRead,
    /// The connection stayed idle too long: drain it.
    KeepAliveIdle,
    /// A draining connection with nothing in flight did not close on its own: drop it.
    Drained,
}

/// The deadline a connection is under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    pub expiry: Expiry,
    pub at_ms: u64,
}

/// The connection timeouts, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub header_read_ms: u64,
    pub keepalive_idle_ms: u64,
    /// How long a draining connection with nothing in flight may take to close itself.
    pub drain_linger_ms: u64,
}

/// One client connection's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConn {
    in_flight: u32,
    /// With nothing in flight: bytes of a request head have arrived (or the connection
    /// is new).
    reading_head: bool,
    served_any: bool,
    multiplexed: bool,
    draining: bool,
    /// When the current phase (or the drain, if later) began.
    since_ms: u64,
}

impl ClientConn {
    /// A connection accepted at `now_ms`: waiting for its first request head.
    pub fn new(now_ms: u64) -> Self {
        Self {
            in_flight: 0,
            reading_head: true,
            served_any: false,
            multiplexed: false,
            draining: false,
            since_ms: now_ms,
        }
    }

    pub fn phase(&self) -> Phase {
        if self.in_flight > 0 {
            Phase::Busy
        } else if self.reading_head {
            Phase::Head
        } else {
            Phase::Idle
        }
    }

    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// Bytes arrived from the client.
    pub fn bytes_received(&mut self, now_ms: u64) {
        if self.phase() == Phase::Idle && !self.multiplexed {
            self.reading_head = true;
            self.since_ms = now_ms;
        }
    }

    /// A request head was complete and its handling starts; `multiplexed` when the
    /// connection speaks HTTP/2.
    pub fn request_started(&mut self, multiplexed: bool, now_ms: u64) {
        if self.in_flight == 0 {
            self.since_ms = now_ms;
        }
        self.in_flight = self.in_flight.saturating_add(1);
        self.reading_head = false;
        self.served_any = true;
        self.multiplexed |= multiplexed;
    }

    /// A request's response was sent (or abandoned).
    pub fn request_finished(&mut self, now_ms: u64) {
        if self.in_flight == 0 {
            return;
        }
        self.in_flight -= 1;
        if self.in_flight == 0 {
            self.since_ms = now_ms;
        }
    }

    /// Take no new request; close once nothing is in flight.
    pub fn drain(&mut self, now_ms: u64) {
        if !self.draining {
            self.draining = true;
            self.since_ms = now_ms;
        }
    }

    /// The deadline the connection is under now; `None` while a request is in flight.
    pub fn deadline(&self, limits: &Limits) -> Option<Deadline> {
        let (expiry, after_ms) = match (self.phase(), self.draining) {
            (Phase::Busy, _) => return None,
            (Phase::Head, true) if !self.served_any => (Expiry::Drained, 0),
            (_, true) => (Expiry::Drained, limits.drain_linger_ms),
            (Phase::Head, false) => (Expiry::HeaderRead, limits.header_read_ms),
            (Phase::Idle, false) => (Expiry::KeepAliveIdle, limits.keepalive_idle_ms),
        };
        Some(Deadline {
            expiry,
            at_ms: self.since_ms.saturating_add(after_ms),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        header_read_ms: 10_000,
        keepalive_idle_ms: 75_000,
        drain_linger_ms: 1_000,
    };

    fn deadline(c: &ClientConn) -> Option<(Expiry, u64)> {
        c.deadline(&LIMITS).map(|d| (d.expiry, d.at_ms))
    }

    #[test]
    fn a_new_connection_is_under_the_header_deadline_until_its_first_request() {
        let mut c = ClientConn::new(100);
        assert_eq!(c.phase(), Phase::Head);
        assert_eq!(deadline(&c), Some((Expiry::HeaderRead, 10_100)));
        c.bytes_received(5_000);
        assert_eq!(deadline(&c), Some((Expiry::HeaderRead, 10_100)));
        c.request_started(false, 6_000);
        assert_eq!((c.phase(), deadline(&c)), (Phase::Busy, None));
    }

    #[test]
    fn an_http1_connection_alternates_idle_head_and_busy() {
        let mut c = ClientConn::new(0);
        c.request_started(false, 10);
        c.bytes_received(20);
        assert_eq!(c.phase(), Phase::Busy, "body bytes do not start a head");
        c.request_finished(1_000);
        assert_eq!(c.phase(), Phase::Idle);
        assert_eq!(deadline(&c), Some((Expiry::KeepAliveIdle, 76_000)));
        c.bytes_received(30_000);
        assert_eq!(c.phase(), Phase::Head);
        assert_eq!(deadline(&c), Some((Expiry::HeaderRead, 40_000)));
        c.bytes_received(35_000);
        assert_eq!(
            deadline(&c),
            Some((Expiry::HeaderRead, 40_000)),
            "more head bytes do not move the deadline"
        );
        c.request_started(false, 36_000);
        assert_eq!((c.phase(), deadline(&c)), (Phase::Busy, None));
    }

    #[test]
    fn a_multiplexed_connection_stays_idle_when_frames_arrive_between_requests() {
        let mut c = ClientConn::new(0);
        c.request_started(true, 10);
        c.request_started(true, 20);
        c.request_finished(30);
        assert_eq!(c.phase(), Phase::Busy);
        c.request_finished(40);
        c.bytes_received(50);
        assert_eq!(c.phase(), Phase::Idle);
        assert_eq!(deadline(&c), Some((Expiry::KeepAliveIdle, 75_040)));
    }

    #[test]
    fn draining_lingers_when_idle_and_closes_a_first_head_at_once() {
        let mut fresh = ClientConn::new(0);
        fresh.drain(500);
        assert_eq!(deadline(&fresh), Some((Expiry::Drained, 500)));
        fresh.drain(900);
        assert_eq!(deadline(&fresh), Some((Expiry::Drained, 500)));

        let mut busy = ClientConn::new(0);
        busy.request_started(false, 10);
        busy.drain(20);
        assert_eq!(
            deadline(&busy),
            None,
            "requests in flight are served to the end"
        );
        busy.request_finished(5_000);
        assert_eq!(deadline(&busy), Some((Expiry::Drained, 6_000)));

        let mut next_head = ClientConn::new(0);
        next_head.request_started(false, 10);
        next_head.request_finished(20);
        next_head.bytes_received(30);
        next_head.drain(40);
        assert_eq!(deadline(&next_head), Some((Expiry::Drained, 1_040)));
    }

    #[test]
    fn finishing_more_requests_than_started_changes_nothing() {
        let mut c = ClientConn::new(0);
        c.request_finished(10);
        assert_eq!(c, ClientConn::new(0));
    }
}
