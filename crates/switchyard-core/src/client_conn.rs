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
//! Every change that moves the deadline bumps [`ClientConn::epoch`], so the server can
//! tell whether a timer it armed still refers to the current phase.

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

/// The deadline a connection is under, counted from the change that set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    pub expiry: Expiry,
    pub after_ms: u64,
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
    epoch: u64,
}

impl Default for ClientConn {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientConn {
    /// A connection just accepted: waiting for its first request head.
    pub fn new() -> Self {
        Self {
            in_flight: 0,
            reading_head: true,
            served_any: false,
            multiplexed: false,
            draining: false,
            epoch: 0,
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

    /// Changes each time the deadline may have moved.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// Bytes arrived from the client.
    pub fn bytes_received(&mut self) {
        if self.phase() == Phase::Idle && !self.multiplexed {
            self.reading_head = true;
            self.bump();
        }
    }

    /// A request head was complete and its handling starts; `multiplexed` when the
    /// connection speaks HTTP/2.
    pub fn request_started(&mut self, multiplexed: bool) {
        let was_busy = self.in_flight > 0;
        self.in_flight = self.in_flight.saturating_add(1);
        self.reading_head = false;
        self.served_any = true;
        self.multiplexed |= multiplexed;
        if !was_busy {
            self.bump();
        }
    }

    /// A request's response was sent (or abandoned).
    pub fn request_finished(&mut self) {
        if self.in_flight == 0 {
            return;
        }
        self.in_flight -= 1;
        if self.in_flight == 0 {
            self.bump();
        }
    }

    /// Take no new request; close once nothing is in flight.
    pub fn drain(&mut self) {
        if !self.draining {
            self.draining = true;
            self.bump();
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
        Some(Deadline { expiry, after_ms })
    }

    fn bump(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
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
        c.deadline(&LIMITS).map(|d| (d.expiry, d.after_ms))
    }

    #[test]
    fn a_new_connection_is_under_the_header_deadline_until_its_first_request() {
        let mut c = ClientConn::new();
        assert_eq!(c.phase(), Phase::Head);
        assert_eq!(deadline(&c), Some((Expiry::HeaderRead, 10_000)));
        c.bytes_received();
        assert_eq!((c.phase(), c.epoch()), (Phase::Head, 0));
        c.request_started(false);
        assert_eq!((c.phase(), c.epoch()), (Phase::Busy, 1));
        assert_eq!(deadline(&c), None);
    }

    #[test]
    fn an_http1_connection_alternates_idle_head_and_busy() {
        let mut c = ClientConn::new();
        c.request_started(false);
        c.bytes_received();
        assert_eq!(c.phase(), Phase::Busy, "body bytes do not start a head");
        c.request_finished();
        assert_eq!((c.phase(), c.epoch()), (Phase::Idle, 2));
        assert_eq!(deadline(&c), Some((Expiry::KeepAliveIdle, 75_000)));
        c.bytes_received();
        assert_eq!((c.phase(), c.epoch()), (Phase::Head, 3));
        assert_eq!(deadline(&c), Some((Expiry::HeaderRead, 10_000)));
        c.bytes_received();
        assert_eq!(c.epoch(), 3, "more head bytes do not restart the deadline");
        c.request_started(false);
        assert_eq!((c.phase(), c.epoch()), (Phase::Busy, 4));
    }

    #[test]
    fn a_multiplexed_connection_stays_idle_when_frames_arrive_between_requests() {
        let mut c = ClientConn::new();
        c.request_started(true);
        c.request_started(true);
        c.request_finished();
        assert_eq!((c.phase(), c.epoch()), (Phase::Busy, 1));
        c.request_finished();
        c.bytes_received();
        assert_eq!((c.phase(), c.epoch()), (Phase::Idle, 2));
    }

    #[test]
    fn draining_lingers_when_idle_and_closes_a_first_head_at_once() {
        let mut fresh = ClientConn::new();
        fresh.drain();
        assert_eq!(fresh.epoch(), 1);
        assert_eq!(deadline(&fresh), Some((Expiry::Drained, 0)));
        fresh.drain();
        assert_eq!(fresh.epoch(), 1);

        let mut busy = ClientConn::new();
        busy.request_started(false);
        busy.drain();
        assert_eq!(
            deadline(&busy),
            None,
            "requests in flight are served to the end"
        );
        busy.request_finished();
        assert_eq!(deadline(&busy), Some((Expiry::Drained, 1_000)));

        let mut next_head = ClientConn::new();
        next_head.request_started(false);
        next_head.request_finished();
        next_head.bytes_received();
        next_head.drain();
        assert_eq!(deadline(&next_head), Some((Expiry::Drained, 1_000)));
    }

    #[test]
    fn finishing_more_requests_than_started_changes_nothing() {
        let mut c = ClientConn::new();
        c.request_finished();
        assert_eq!(c, ClientConn::new());
    }
}
