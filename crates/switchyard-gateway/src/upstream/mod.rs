//! Upstreams: one adapter per wire format behind the [`Adapter`] trait — its endpoint
//! and how a credential authenticates — and the one transport every attempt uses: build
//! the request from scratch (SPEC G6: no client header is forwarded; credentials come
//! from the connection), send it, and classify transport failures. A new upstream
//! format is a module here and its line in [`adapter`]. Adapters are chosen when the
//! configuration snapshot is built, never per request; nothing here decides routing.

mod anthropic;
mod openai;
mod responses;

pub(crate) use responses::is_codex_backend;

use crate::client::{self, FixedFields, Outgoing, SendError, Target, UpstreamBody};
use crate::heads::Reads;
use crate::telemetry::metrics::ProviderMetrics;
use axum::http::header::InvalidHeaderValue;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, Response, Uri};
use bytes::Bytes;

use secrecy::zeroize::Zeroizing;
use switchyard_core::domain::AuthClass;
use switchyard_core::format::Format;
use switchyard_core::outcome::AttemptFailure;
use switchyard_core::redact::Secrets;
use switchyard_core::resilience::usage_wall::{self, Flags};
use tokio::time::Instant;

/// The header `name: text`, marked sensitive (kept out of logs and debug output); the
/// text is wiped from memory once the value is built.
pub fn sensitive(
    name: &'static str,
    text: &str,
) -> Result<(&'static str, HeaderValue), InvalidHeaderValue> {
    let text = Zeroizing::new(text.to_owned());
    let mut value = HeaderValue::from_str(&text)?;
    value.set_sensitive(true);
    Ok((name, value))
}

/// An upstream wire format: see the module docs.
pub trait Adapter: Sync + std::fmt::Debug {
    /// The format its requests and answers are in.
    fn format(&self) -> Format;

    /// The URL answering requests, from the connection's base URL.
    fn endpoint(&self, base_url: &str) -> String;

    /// The URL counting a request's input tokens, when the format has one.
    fn count_tokens_endpoint(&self, _base_url: &str) -> Option<String> {
        None
    }

    /// The headers that authenticate with `credential` for an account of `auth_class`,
    /// marked sensitive; by default `Authorization: Bearer`.
    fn auth_headers(
        &self,
        credential: &str,
        _auth_class: AuthClass,
    ) -> Result<Vec<(&'static str, HeaderValue)>, InvalidHeaderValue> {
        Ok(vec![sensitive(
            "authorization",
            &format!("Bearer {credential}"),
        )?])
    }

    /// Headers an account of `auth_class` needs beside its credential, from its
    /// `provider_specific_data` (a Codex subscription's account id).
    fn account_headers(
        &self,
        _auth_class: AuthClass,
        _data: Option<&serde_json::Value>,
    ) -> Result<Vec<(&'static str, HeaderValue)>, InvalidHeaderValue> {
        Ok(Vec::new())
    }

    /// Adds the headers selecting the protocol version, from the client's (`oauth`: the
    /// account authenticates with a subscription token).
    fn protocol_headers(
        &self,
        _client: &ProtocolHeaders,
        _oauth: bool,
        _headers: &mut Vec<(&'static str, HeaderValue)>,
    ) {
    }
}

/// The client headers that select an upstream protocol and so are forwarded to an
/// upstream of the client's own format: `anthropic-version` and `anthropic-beta`.
/// Taken only from Anthropic clients; every other client header stays behind (G6).
#[derive(Debug, Clone, Default)]
pub struct ProtocolHeaders {
    pub version: Option<HeaderValue>,
    pub beta: Option<HeaderValue>,
}

impl ProtocolHeaders {
    pub const VERSION: &str = "anthropic-version";
    pub const BETA: &str = "anthropic-beta";
}

/// What the shell needs to call one connection's upstream.
#[derive(Clone)]
pub struct Upstream {
    /// The format adapter, chosen by the connection's format.
    pub adapter: &'static dyn Adapter,
    /// The full endpoint URL, parsed once here rather than on every request.
    pub url: Target,
    /// The token-counting URL, when the format has one.
    pub count_url: Option<Target>,
    /// The account authenticates with an OAuth subscription token.
    pub oauth: bool,
    /// The token's expiry and refreshes, when the credential is an OAuth grant that the
    /// gateway refreshes (SPEC R4).
    pub grant: Option<GrantState>,
    /// The endpoint is a Codex subscription backend, which refuses some members.
    pub codex_backend: bool,
    /// The Claude usage-wall settings, for a connection that opted in (SPEC R17).
    pub wall: Option<WallConfig>,
    /// Speak cleartext HTTP/2 with prior knowledge (see `snapshot::H2C_FLAG`).
    pub h2c: bool,
    /// The fields every request to it carries, built once ([`Upstream::fields`]), never
    /// per request: `Host`, `Content-Type`, `User-Agent` and the authentication headers
    /// from the decrypted credential and the account's data, the secret ones marked
    /// sensitive so they are never logged; left out of `Debug`.
    pub fields: FixedFields,
    /// What upstream text relayed back must not show: the credential, and the values of
    /// the sensitive authentication headers (a bearer token without its scheme).
    pub secrets: Secrets,
    /// This connection's provider's metric handles.
    pub metrics: ProviderMetrics,
    /// Its provider's own stream deadlines.
    pub stream: switchyard_core::stream::Overrides,
    /// The address its attempts last went out from (SPEC R14).
    pub egress: EgressMemo,
}

/// An OAuth grant's state as the snapshot was built with it: when its access token
/// expires and how its refreshes went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantState {
    pub expires_at: Option<u64>,
    pub refreshes: switchyard_core::oauth::Refreshes,
}

impl GrantState {
    /// Whether a refresh is due at `now` for `why`, `margin_ms` before the expiry.
    pub fn wanted(&self, why: switchyard_core::oauth::Why, margin_ms: u64, now: u64) -> bool {
        self.refreshes.wanted(why, self.expires_at, margin_ms, now)
    }
}

/// How often an unchanged egress address is noted on the resilience board again, so
/// its last-seen time stays within the board's 24 h window.
const EGRESS_NOTE_EVERY_MS: u64 = 60_000;

/// A connection's last egress address, formatted once and noted on the board only when
/// it changes (or once a minute), not on every request: formatting an address costs
/// more than the rest of the bookkeeping.
#[derive(Debug, Default)]
pub struct EgressMemo(arc_swap::ArcSwapOption<Noted>);

#[derive(Debug)]
struct Noted {
    ip: std::net::IpAddr,
    text: String,
    at: u64,
}

impl Clone for EgressMemo {
    fn clone(&self) -> Self {
        Self(arc_swap::ArcSwapOption::new(self.0.load_full()))
    }
}

impl EgressMemo {
    /// `ip` as text, and whether it is due to be noted on the board at `now`.
    pub fn seen(&self, ip: std::net::IpAddr, now: u64) -> (String, bool) {
        if let Some(n) = &*self.0.load() {
            if n.ip == ip && now.saturating_sub(n.at) < EGRESS_NOTE_EVERY_MS {
                return (n.text.clone(), false);
            }
        }
        let text = ip.to_string();
        let noted = Noted {
            ip,
            text: text.clone(),
            at: now,
        };
        self.0.store(Some(std::sync::Arc::new(noted)));
        (text, true)
    }
}

impl Upstream {
    /// The fields every request to `url` carries: `Host`, `Content-Type`, `User-Agent`,
    /// then `auth` (the authentication headers); `None` when the URL has no host.
    pub fn fields(url: &Uri, auth: &[(&'static str, HeaderValue)]) -> Option<FixedFields> {
        let host = HeaderValue::try_from(url.authority()?.as_str()).ok()?;
        let mut fields = vec![
            (header::HOST, host),
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::USER_AGENT, HeaderValue::from_static(USER_AGENT)),
        ];
        fields.extend(
            auth.iter()
                .map(|(name, value)| (HeaderName::from_static(name), value.clone())),
        );
        Some(FixedFields::new(fields))
    }

    /// The request body as this endpoint takes it: a Codex subscription backend refuses
    /// some members and streams every answer.
    pub fn request_body(&self, body: Vec<u8>, stream: bool) -> Vec<u8> {
        if self.codex_backend {
            switchyard_core::format::responses::for_codex_backend(body, stream)
        } else {
            body
        }
    }

    /// Whether this is a Claude-compatible endpoint other than Anthropic's own, whose
    /// thinking models start slower (the first-output budget adapts to it).
    pub fn is_third_party_claude(&self) -> bool {
        self.adapter.format() == Format::AnthropicMessages
            && self.url.uri().host() != Some("api.anthropic.com")
    }

    /// A whole (non-streamed) answer as the client asked for it, or `None` when the
    /// endpoint's answer holds none: a Codex subscription backend streamed it, and its
    /// final response event is the answer.
    pub fn whole_answer(&self, bytes: Bytes) -> Option<Bytes> {
        if !self.codex_backend {
            return Some(bytes);
        }
        let stream = switchyard_core::redact::scrub_stream(&bytes, &self.secrets);
        switchyard_core::format::responses::final_response(&stream).map(Bytes::from)
    }
}

/// The headers of `headers` whose names `wanted` picks, as text pairs (a value that is
/// not visible ASCII is left out), for the core functions that read them.
pub fn header_pairs(headers: &HeaderMap, wanted: impl Fn(&str) -> bool) -> Vec<(&str, &str)> {
    headers
        .iter()
        .filter(|(n, _)| wanted(n.as_str()))
        .filter_map(|(n, v)| v.to_str().ok().map(|v| (n.as_str(), v)))
        .collect()
}

/// A connection's usage-wall opt-ins and the account endpoints the limit reset calls.
#[derive(Debug, Clone)]
pub struct WallConfig {
    pub flags: Flags,
    /// A fingerprint of the credential: the wall state belongs to the account, not to
    /// the connection id.
    pub account: u64,
    /// `GET` the account's usage at the wall.
    pub usage_url: Target,
    /// `POST` the session-limit reset; `None` without an organization id (the reset is
    /// then off).
    pub reset_url: Option<Target>,
}

impl WallConfig {
    /// The settings of a connection at `base_url` with `provider_specific_data`; `None`
    /// when neither opt-in is on. The limit reset needs `organizationUUID`.
    pub fn of(
        base_url: &str,
        data: &serde_json::Value,
        credential: &str,
    ) -> Result<Option<Self>, String> {
        let mut flags = Flags::from_provider_specific_data(data);
        if !flags.low_priority_mode && !flags.auto_limit_reset {
            return Ok(None);
        }
        let base = base_url.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base);
        let parse = |path: String| {
            let url = format!("{base}{path}");
            Uri::try_from(url.as_str())
                .ok()
                .and_then(|uri| Target::new(uri).ok())
                .ok_or(url)
        };
        let usage_url = parse(usage_wall::USAGE_CHECK_PATH.to_owned())?;
        let org = data
            .get(ORGANIZATION_KEY)
            .and_then(serde_json::Value::as_str)
            .filter(|o| !o.is_empty() && o.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
        let reset_url = org.map(|o| parse(usage_wall::reset_path(o))).transpose()?;
        if reset_url.is_none() && flags.auto_limit_reset {
            tracing::warn!(
                "autoLimitReset needs providerSpecificData.{ORGANIZATION_KEY} (the account's organization id); the limit reset stays off."
            );
            flags.auto_limit_reset = false;
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(credential, &mut hasher);
        Ok(Some(Self {
            flags,
            account: std::hash::Hasher::finish(&hasher),
            usage_url,
            reset_url,
        }))
    }
}

/// The `providerSpecificData` key of the account's organization id.
pub const ORGANIZATION_KEY: &str = "organizationUUID";

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("adapter", &self.adapter)
            .field("url", &self.url)
            .field("h2c", &self.h2c)
            .finish_non_exhaustive()
    }
}

/// Joins a base URL and an API path. A base that already ends in `/v1` (the usual way
/// OpenAI-compatible endpoints are given) is not doubled.
pub fn endpoint(base_url: &str, path_after_v1: &str) -> String {
    let base = base_url.trim_end_matches('/');
    if base.ends_with("/v1") {
        format!("{base}{path_after_v1}")
    } else {
        format!("{base}/v1{path_after_v1}")
    }
}

/// The adapter of upstreams speaking `format`.
pub fn adapter(format: Format) -> &'static dyn Adapter {
    match format {
        Format::OpenAiChat => &openai::OpenAi,
        Format::AnthropicMessages => &anthropic::Anthropic,
        Format::Responses => &responses::Responses,
    }
}

/// One upstream call: where to, what, and the protocol headers.
#[derive(Debug)]
pub struct Call<'a> {
    pub method: Method,
    pub url: &'a Target,
    pub body: Bytes,
    pub stream: bool,
    pub protocol: &'a ProtocolHeaders,
    /// Extra headers of this call (the R17 slow lane's).
    pub extra: &'a [(&'static str, HeaderValue)],
    /// The fields of a successful answer the caller reads, when it reads only some.
    pub success_reads: Option<Reads>,
}

/// Sends `call` to the connection and waits for the response headers, at most until
/// `deadline`.
pub async fn send(
    connect_timeout_ms: u64,
    upstream: &Upstream,
    call: Call<'_>,
    deadline: Instant,
) -> Result<Response<UpstreamBody>, AttemptFailure> {
    let accept = if call.stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    let mut headers = Vec::new();
    upstream
        .adapter
        .protocol_headers(call.protocol, upstream.oauth, &mut headers);
    headers.extend_from_slice(call.extra);
    let out = Outgoing {
        method: call.method,
        target: call.url,
        fixed: &upstream.fields,
        accept,
        headers,
        body: call.body,
        success_reads: call.success_reads,
    };
    let pending = client::send(connect_timeout_ms, upstream.h2c, out);
    match tokio::time::timeout_at(deadline, pending).await {
        Err(_) => Err(AttemptFailure::FirstByteTimeout),
        Ok(Ok(response)) => Ok(response),
        Ok(Err(SendError::Connect(e))) => {
            tracing::debug!(error = %e, "Cannot connect upstream.");
            Err(AttemptFailure::Connect)
        }
        Ok(Err(SendError::Reset(e))) => {
            tracing::debug!(error = %e, "The upstream connection failed.");
            Err(AttemptFailure::Reset)
        }
        Ok(Err(SendError::Client(e))) => {
            tracing::error!(error = %e, "Cannot build the upstream client.");
            Err(AttemptFailure::Connect)
        }
    }
}

/// The `User-Agent` of upstream requests.
const USER_AGENT: &str = concat!("switchyard/", env!("CARGO_PKG_VERSION"));

/// The secrets of a connection whose credentials are `credentials` (the stored one, and
/// an OAuth grant's tokens) and whose authentication headers are `auth`: the
/// credentials themselves, and each sensitive header's value (a bearer token without
/// its scheme).
pub fn secrets(credentials: &[&str], auth: &[(&'static str, HeaderValue)]) -> Secrets {
    let headers = auth.iter().filter(|(_, v)| v.is_sensitive()).map(|(_, v)| {
        let raw = v.as_bytes();
        raw.strip_prefix(b"Bearer ").unwrap_or(raw)
    });
    Secrets::new(credentials.iter().map(|c| c.as_bytes()).chain(headers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_egress_address_is_noted_when_it_changes_and_once_a_minute() {
        let memo = EgressMemo::default();
        let a: std::net::IpAddr = "10.0.0.1".parse().unwrap();
        let b: std::net::IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(memo.seen(a, 1_000), ("10.0.0.1".to_owned(), true));
        assert_eq!(memo.seen(a, 60_999), ("10.0.0.1".to_owned(), false));
        assert_eq!(memo.seen(a, 61_000), ("10.0.0.1".to_owned(), true));
        assert_eq!(memo.seen(b, 61_001), ("10.0.0.2".to_owned(), true));
        assert_eq!(memo.clone().seen(b, 61_002), ("10.0.0.2".to_owned(), false));
    }

    #[test]
    fn endpoint_does_not_double_v1() {
        assert_eq!(
            endpoint("https://api.openai.com", "/chat/completions"),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            endpoint("https://api.x.ai/v1/", "/chat/completions"),
            "https://api.x.ai/v1/chat/completions"
        );
        assert_eq!(
            endpoint("http://127.0.0.1:9/openai/v1", "/messages"),
            "http://127.0.0.1:9/openai/v1/messages"
        );
    }
}
