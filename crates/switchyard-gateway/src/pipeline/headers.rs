//! The request headers the pipeline reads, each under a number of its own ([`Field`]):
//! the edge keeps only those fields of a head ([`read_name`], `heads::Fields`), so the
//! stages read them without any header map. Besides authentication, the content type
//! and the protocol headers they are the session headers (SPEC R15), the lease headers
//! (R16) and the route-trace opt-in (R19), gathered in [`Presented`]. None of them is
//! forwarded upstream: upstream requests are built afresh (the protocol headers are
//! copied into them by the adapter of the client's own format).

use super::auth::API_KEY_HEADER;
use crate::heads::Fields;
use crate::upstream::ProtocolHeaders;
use axum::http::{HeaderMap, HeaderName};
use std::sync::LazyLock;
use switchyard_core::format::Format;
use switchyard_core::http1;
use switchyard_core::routing::affinity::{SessionHeader, SESSION_HEADERS};
use switchyard_core::routing::lease;

/// Request header asking for the routing decision in the response's
/// [`ROUTE_HEADER`]; any value but `0` or `false` asks.
pub const TRACE_HEADER: &str = "x-switchyard-trace";

/// Response header carrying the request's routing decision when it asked for it. A
/// `HeaderName` made once: a name given as text is parsed, and a name `http` does not
/// know is allocated, at every insert.
pub static ROUTE_HEADER: HeaderName = HeaderName::from_static("x-switchyard-route");

/// The request headers the pipeline reads, by their number in the request's `Fields`;
/// the R15 session headers follow them, in SPEC order, from [`Field::FIRST_SESSION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Authorization,
    ApiKey,
    ContentType,
    AnthropicVersion,
    AnthropicBeta,
    LeaseOwner,
    LeaseGeneration,
    Trace,
}

impl Field {
    /// Every field but the session headers, in number order.
    const ALL: [Self; 8] = [
        Self::Authorization,
        Self::ApiKey,
        Self::ContentType,
        Self::AnthropicVersion,
        Self::AnthropicBeta,
        Self::LeaseOwner,
        Self::LeaseGeneration,
        Self::Trace,
    ];

    /// The number of the first session header.
    const FIRST_SESSION: usize = Self::ALL.len();

    /// Its name, in lower case.
    const fn name(self) -> &'static str {
        match self {
            Self::Authorization => "authorization",
            Self::ApiKey => API_KEY_HEADER,
            Self::ContentType => "content-type",
            Self::AnthropicVersion => ProtocolHeaders::VERSION,
            Self::AnthropicBeta => ProtocolHeaders::BETA,
            Self::LeaseOwner => lease::OWNER_HEADER,
            Self::LeaseGeneration => lease::GENERATION_HEADER,
            Self::Trace => TRACE_HEADER,
        }
    }

    /// Its number in the request's `Fields`.
    pub const fn at(self) -> usize {
        self as usize
    }
}

/// How many request headers the pipeline reads: each has a place in a request's
/// `Fields`.
const READ_COUNT: usize = Field::FIRST_SESSION + SESSION_HEADERS.len();
const _: () = assert!(READ_COUNT <= crate::heads::MAX_READ);

/// The name of the header numbered `i`, in lower case.
fn name_of(i: usize) -> Option<&'static str> {
    match Field::ALL.get(i) {
        Some(field) => Some(field.name()),
        None => SESSION_HEADERS.get(i - Field::FIRST_SESSION).copied(),
    }
}

/// Every request header the pipeline reads, with its number, by the length of its
/// name: a field's name is compared with the few of its length only.
static BY_LENGTH: LazyLock<Vec<Vec<(&'static str, usize)>>> = LazyLock::new(|| {
    let mut by_len: Vec<Vec<(&'static str, usize)>> = Vec::new();
    for (i, name) in (0..READ_COUNT).filter_map(|i| Some((i, name_of(i)?))) {
        if by_len.len() <= name.len() {
            by_len.resize_with(name.len() + 1, Vec::new);
        }
        by_len[name.len()].push((name, i));
    }
    by_len
});

/// The pipeline's number for the request header sent as `name` (in any case), when
/// the pipeline reads it. A name is compared with the read ones of its length only.
pub fn read_name(name: &[u8]) -> Option<usize> {
    BY_LENGTH
        .get(name.len())?
        .iter()
        .find(|(read, _)| http1::name_is(name, read.as_bytes()))
        .map(|&(_, i)| i)
}

/// The fields the pipeline reads of a request that came with a header map (through
/// the router, or over HTTP/2).
pub fn fields_of(headers: &HeaderMap) -> Fields {
    Fields::of_map(headers, read_name)
}

/// The client headers that select an upstream protocol, from a client speaking
/// `client` (Anthropic clients only; see [`ProtocolHeaders`]).
pub fn protocol(client: Format, fields: &Fields) -> ProtocolHeaders {
    match client {
        Format::AnthropicMessages => ProtocolHeaders {
            version: fields.value(Field::AnthropicVersion.at()),
            beta: fields.value(Field::AnthropicBeta.at()),
        },
        Format::OpenAiChat | Format::Responses => ProtocolHeaders::default(),
    }
}

/// The session, lease and trace headers a request presents.
#[derive(Debug, Default)]
pub struct Presented<'a> {
    pub session: SessionHeader<'a>,
    pub lease_owner: Option<&'a [u8]>,
    pub lease_generation: Option<&'a [u8]>,
    /// The client asked for the route trace.
    pub trace: bool,
}

impl<'a> Presented<'a> {
    pub fn scan(fields: &'a Fields) -> Self {
        let mut found = Self {
            lease_owner: fields.get(Field::LeaseOwner.at()),
            lease_generation: fields.get(Field::LeaseGeneration.at()),
            trace: fields.get(Field::Trace.at()).is_some_and(|v| {
                let v = v.trim_ascii();
                !(v.is_empty() || v == b"0" || v.eq_ignore_ascii_case(b"false"))
            }),
            ..Self::default()
        };
        for (rank, name) in SESSION_HEADERS.into_iter().enumerate() {
            if let Some(value) = fields.get(Field::FIRST_SESSION + rank) {
                found.session.offer(name, value);
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn every_header_read_is_numbered_in_any_case_and_within_the_fields() {
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
        for (i, name) in read.enumerate() {
            assert_eq!(read_name(name.as_bytes()), Some(i), "{name}");
            assert_eq!(name_of(i), Some(name.to_ascii_lowercase()).as_deref());
        }
        assert_eq!(READ_COUNT, 17);
        assert_eq!(name_of(READ_COUNT), None);
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
        h.insert("x-session-id", HeaderValue::from_static("s2"));
        h.insert(lease::OWNER_HEADER, HeaderValue::from_static("vlo_x"));
        h.insert(lease::GENERATION_HEADER, HeaderValue::from_static("3"));
        h.insert(TRACE_HEADER, HeaderValue::from_static(" 1 "));
        let fields = fields_of(&h);
        let p = Presented::scan(&fields);
        assert_eq!(p.lease_owner, Some(&b"vlo_x"[..]));
        assert_eq!(p.lease_generation, Some(&b"3"[..]));
        assert!(p.trace);
        let body = switchyard_core::llm::RawObject::parse(b"{}").unwrap();
        // The session header first in SPEC order wins.
        assert_eq!(p.session.session_id(&body).unwrap().1, "s1");
        for off in ["0", "false", "FALSE", ""] {
            let mut h = HeaderMap::new();
            h.insert(TRACE_HEADER, HeaderValue::from_str(off).unwrap());
            assert!(!Presented::scan(&fields_of(&h)).trace, "{off:?}");
        }
    }

    #[test]
    fn protocol_headers_come_from_anthropic_clients_only() {
        let mut h = HeaderMap::new();
        h.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        h.append("anthropic-beta", HeaderValue::from_static("a-1"));
        h.append("anthropic-beta", HeaderValue::from_static("b-2"));
        let fields = fields_of(&h);
        let p = protocol(Format::AnthropicMessages, &fields);
        assert_eq!(p.version.unwrap(), "2023-06-01");
        // The first value of a repeated field, as a header map's `get` gives it.
        assert_eq!(p.beta.unwrap(), "a-1");
        let p = protocol(Format::OpenAiChat, &fields);
        assert!(p.version.is_none() && p.beta.is_none());
    }
}
