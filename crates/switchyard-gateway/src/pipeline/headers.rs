//! The request headers the pipeline reads besides authentication, found in one walk
//! (a lookup per name would hash every name on every request, whether or not it is
//! present): the session headers (SPEC R15), the lease headers (R16) and the
//! route-trace opt-in (R19). None of them is forwarded upstream: upstream requests are
//! built afresh.

use axum::http::{HeaderMap, HeaderValue};
use switchyard_core::routing::affinity::SessionHeader;
use switchyard_core::routing::lease;

/// Request header asking for the routing decision in the response's
/// [`ROUTE_HEADER`]; any value but `0` or `false` asks.
pub const TRACE_HEADER: &str = "x-switchyard-trace";

/// Response header carrying the request's routing decision when it asked for it.
pub const ROUTE_HEADER: &str = "x-switchyard-route";

/// What one walk over the request's headers found.
#[derive(Debug, Default)]
pub struct Presented<'a> {
    pub session: SessionHeader<'a>,
    pub lease_owner: Option<&'a HeaderValue>,
    pub lease_generation: Option<&'a HeaderValue>,
    /// The client asked for the route trace.
    pub trace: bool,
}

impl<'a> Presented<'a> {
    pub fn scan(headers: &'a HeaderMap) -> Self {
        let mut found = Self::default();
        for (name, value) in headers {
            let name = name.as_str();
            if found.session.offer(name, value.as_bytes()) {
                continue;
            }
            match name {
                lease::OWNER_HEADER => found.lease_owner = Some(value),
                lease::GENERATION_HEADER => found.lease_generation = Some(value),
                TRACE_HEADER => {
                    let v = value.as_bytes().trim_ascii();
                    found.trace = !(v.is_empty() || v == b"0" || v.eq_ignore_ascii_case(b"false"));
                }
                _ => {}
            }
        }
        found
    }
}
