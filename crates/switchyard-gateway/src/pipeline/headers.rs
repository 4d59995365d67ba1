//! The request headers the pipeline reads: every name, for the edge to convert only
//! those fields ([`read_name`]); and those besides authentication, the content type and
//! the protocol headers, found in one walk (a lookup per name would hash every name on
//! every request, whether or not it is present): the session headers (SPEC R15), the
//! lease headers (R16) and the route-trace opt-in (R19). None of them is forwarded
//! upstream: upstream requests are built afresh.

use super::auth::API_KEY_HEADER;
use crate::upstream::ProtocolHeaders;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use std::sync::LazyLock;
use switchyard_core::routing::affinity::{SessionHeader, SESSION_HEADERS};
use switchyard_core::routing::lease;

/// Request header asking for the routing decision in the response's
/// [`ROUTE_HEADER`]; any value but `0` or `false` asks.
pub const TRACE_HEADER: &str = "x-switchyard-trace";

/// Response header carrying the request's routing decision when it asked for it.
pub const ROUTE_HEADER: &str = "x-switchyard-route";

/// The first bytes of every name looked for: the other headers (`host`, `content-type`,
/// `authorization`, …) are passed over at one comparison each.
const FIRST_BYTES: [u8; 3] = [b'x', b's', b't'];

/// Every request header the pipeline reads, in lower case, by the length of its name:
/// a field's name is compared with the few of its length only.
static READ: LazyLock<Vec<Vec<HeaderName>>> = LazyLock::new(|| {
    let named = [
        API_KEY_HEADER,
        ProtocolHeaders::VERSION,
        ProtocolHeaders::BETA,
        lease::OWNER_HEADER,
        lease::GENERATION_HEADER,
        TRACE_HEADER,
    ];
    let mut by_len: Vec<Vec<HeaderName>> = Vec::new();
    let names = [header::AUTHORIZATION, header::CONTENT_TYPE]
        .into_iter()
        .chain(
            named
                .into_iter()
                .chain(SESSION_HEADERS)
                .map(HeaderName::from_static),
        );
    for name in names {
        let len = name.as_str().len();
        if by_len.len() <= len {
            by_len.resize_with(len + 1, Vec::new);
        }
        by_len[len].push(name);
    }
    by_len
});

/// The pipeline's name for the request header sent as `name` (in any case), when the
/// pipeline reads it.
pub fn read_name(name: &[u8]) -> Option<HeaderName> {
    READ.get(name.len())?
        .iter()
        .find(|read| read.as_str().as_bytes().eq_ignore_ascii_case(name))
        .cloned()
}

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
            if !name
                .as_bytes()
                .first()
                .is_some_and(|b| FIRST_BYTES.contains(b))
            {
                continue;
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_looked_for_passes_the_first_byte_filter() {
        let names = SESSION_HEADERS.iter().chain(&[
            lease::OWNER_HEADER,
            lease::GENERATION_HEADER,
            TRACE_HEADER,
        ]);
        for name in names {
            assert!(FIRST_BYTES.contains(&name.as_bytes()[0]), "{name}");
        }
    }

    #[test]
    fn every_header_read_is_named_in_any_case() {
        let read = [
            "Authorization",
            "X-API-KEY",
            "content-type",
            "Anthropic-Version",
            "anthropic-beta",
            "X-Omniroute-Lease-Owner",
            "x-omniroute-lease-generation",
            "X-Switchyard-Trace",
        ]
        .into_iter()
        .chain(SESSION_HEADERS);
        for name in read {
            let found = read_name(name.as_bytes()).unwrap();
            assert_eq!(found.as_str(), name.to_ascii_lowercase());
        }
        assert_eq!(READ.iter().map(Vec::len).sum::<usize>(), 17);
        for name in [
            "host",
            "user-agent",
            "accept",
            "x-api-keys",
            "content-length",
            "",
        ] {
            assert!(read_name(name.as_bytes()).is_none(), "{name}");
        }
    }

    #[test]
    fn one_walk_finds_each_header() {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("gw"));
        h.insert("session-id", HeaderValue::from_static("s1"));
        h.insert(lease::OWNER_HEADER, HeaderValue::from_static("vlo_x"));
        h.insert(lease::GENERATION_HEADER, HeaderValue::from_static("3"));
        h.insert(TRACE_HEADER, HeaderValue::from_static(" 1 "));
        let p = Presented::scan(&h);
        assert_eq!(p.lease_owner.unwrap(), "vlo_x");
        assert_eq!(p.lease_generation.unwrap(), "3");
        assert!(p.trace);
        let body = switchyard_core::llm::RawObject::parse(b"{}").unwrap();
        assert_eq!(p.session.session_id(&body).unwrap().1, "s1");
        for off in ["0", "false", "FALSE", ""] {
            let mut h = HeaderMap::new();
            h.insert(TRACE_HEADER, HeaderValue::from_str(off).unwrap());
            assert!(!Presented::scan(&h).trace, "{off:?}");
        }
    }
}
