//! Finishing a request exactly once: the quota settlement, the request-log row, the
//! request metrics and the in-flight gauge. A `Finisher` travels with the request —
//! into the response body for streams — and finishes when told to or, failing that,
//! when dropped (the client went away), so no path can skip or double the bookkeeping.
//!
//! Finishing never awaits (the log row goes to the request log's bounded channel) and
//! changes nothing about the answer: status, error code and usage are handed to it.

use crate::clock::RequestClock;
use crate::error::ErrorCode;
use crate::heads::LateFields;
use crate::runtime::gate::Permit;
use crate::runtime::quota::engine::Growth;
use crate::runtime::quota::guard::GrowthRequest;
use crate::runtime::quota::{QuotaBlock, QuotaGuard};
use crate::runtime::Runtime;
use crate::snapshot::LiveConfig;
use crate::telemetry::metrics::{Answering, RequestLabels};
use crate::telemetry::Telemetry;
use axum::response::Response;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use switchyard_core::format::Format;
use switchyard_core::outcome::{AttemptFailure, StreamCut};
use switchyard_core::resilience::verdict::{self, Answer, Subject, Verdict};
use switchyard_core::routing::trace::Decision;
use switchyard_core::routing::Candidate;
use switchyard_core::usage::Usage;
use switchyard_model::{FailedAttempt, LogRow};

/// Status recorded when the response was cut before it ended — the client disconnected
/// (`client_closed_request`) or the shutdown grace period expired (`gateway_shutdown`).
/// nginx's convention; no HTTP response carries it.
pub const CLIENT_CLOSED: u16 = 499;

/// Longest model name kept in the request log; model names are client-supplied.
const MAX_LOGGED_MODEL_CHARS: usize = 200;

/// A model name as logged: at most [`MAX_LOGGED_MODEL_CHARS`] characters. Names within
/// the limit in bytes (all real ones) are copied without a per-character pass.
fn logged_model(model: &str) -> String {
    if model.len() <= MAX_LOGGED_MODEL_CHARS {
        return model.to_owned();
    }
    match model.char_indices().nth(MAX_LOGGED_MODEL_CHARS) {
        Some((end, _)) => model[..end].to_owned(),
        None => model.to_owned(),
    }
}

/// Adds the last attempt's `verdict` to `row`'s failed attempts; `committed`: it failed
/// after its stream reached the client.
fn push_failed(row: &mut LogRow, verdict: &Verdict, committed: bool) {
    let (Some(provider), Some(connection_id), Some(model)) =
        (&row.provider, &row.connection_id, &row.model)
    else {
        return;
    };
    let status = verdict
        .failure
        .status()
        .filter(|_| verdict.upstream_status.is_some());
    row.failed_attempts.push(FailedAttempt {
        provider: provider.clone(),
        connection_id: connection_id.clone(),
        model: model.clone(),
        outcome: verdict.failure.label().to_owned(),
        cause: Some(verdict.cause.as_str().to_owned()),
        upstream_status: verdict.upstream_status,
        restated_status: status.filter(|s| Some(*s) != verdict.upstream_status),
        restated_by: verdict.restated_by.clone(),
        rule: verdict.rule.clone(),
        scope: verdict.scope.map(|s| s.as_str().to_owned()),
        // This attempt's (the row's is the last attempt's).
        egress_ip: row.egress_ip.clone(),
        committed,
    });
}

/// What finishing a request touches: telemetry (metrics, request log), the
/// configuration and resilience state for the stall cooldown, and the shutdown flag
/// that names a cut request's code.
#[derive(Debug, Clone)]
pub struct Parts {
    pub telemetry: Arc<Telemetry>,
    pub runtime: Arc<Runtime>,
    pub config: Arc<LiveConfig>,
    /// Set when the shutdown grace period expired and remaining requests are cut.
    pub cutting: Arc<AtomicBool>,
}

#[derive(Debug)]
struct Inner {
    parts: Parts,
    row: LogRow,
    /// The request's metric labels once an attempt began.
    labels: Option<Answering>,
    /// The request's time (read at the edge), latency included.
    clock: RequestClock,
    /// The answering attempt's quota reservation.
    quota: Option<QuotaGuard>,
    /// The answering attempt's concurrency slots.
    permit: Option<Permit>,
    /// How the request was routed, for the log row's trace (rendered by the writer).
    route: Option<Decision>,
}

/// The per-request bookkeeping; see the module docs.
#[derive(Debug)]
pub struct Finisher {
    inner: Option<Inner>,
    /// The fields the answering attempt adds to the answer's head, kept apart from the
    /// bookkeeping (which a stream's body takes along) until the answer leaves.
    late: Option<LateFields>,
}

impl Finisher {
    fn of(inner: Option<Inner>) -> Self {
        Self { inner, late: None }
    }

    /// Keeps the fields the answering attempt adds to the answer's head.
    pub fn add_fields(&mut self, late: Option<LateFields>) {
        self.late = late;
    }

    /// The fields the answering attempt added to the answer's head.
    pub fn take_fields(&mut self) -> Option<LateFields> {
        self.late.take()
    }

    pub fn start(parts: Parts, request_id: String, clock: RequestClock, client: Format) -> Self {
        parts.telemetry.metrics.in_flight.inc();
        Self::of(Some(Inner {
            parts,
            labels: None,
            clock,
            quota: None,
            permit: None,
            route: None,
            row: LogRow {
                ts: clock.arrived_ms(),
                request_id,
                key_id: None,
                requested_model: String::new(),
                provider: None,
                connection_id: None,
                model: None,
                status: 0,
                error_code: None,
                stream: false,
                client_format: client.as_str().to_owned(),
                attempts: 0,
                latency_ms: 0,
                ttfb_ms: None,
                prompt_tokens: None,
                completion_tokens: None,
                egress_ip: None,
                failed_attempts: Vec::new(),
                route: None,
            },
        }))
    }

    pub fn request_id(&self) -> &str {
        self.inner
            .as_ref()
            .map_or("", |i| i.row.request_id.as_str())
    }

    pub fn set_key(&mut self, key_id: &str) {
        if let Some(i) = &mut self.inner {
            i.row.key_id = Some(key_id.to_owned());
        }
    }

    pub fn set_request(&mut self, model: &str, stream: bool) {
        if let Some(i) = &mut self.inner {
            i.row.requested_model = logged_model(model);
            i.row.stream = stream;
        }
    }

    /// Keeps the request's routing decision for its log row.
    pub fn route(&mut self, decision: Decision) {
        if let Some(i) = &mut self.inner {
            i.route = Some(decision);
        }
    }

    /// Notes the start of an attempt on `candidate`; `labels` are its metric labels.
    pub fn attempt(&mut self, candidate: &Candidate, labels: Answering) {
        if let Some(i) = &mut self.inner {
            i.row.attempts += 1;
            i.labels = Some(labels);
            // The attempt's own egress, once it is known.
            i.row.egress_ip = None;
            i.row.provider = Some(candidate.connection.provider.clone());
            i.row.connection_id = Some(candidate.connection.id.clone());
            i.row.model = Some(logged_model(&candidate.upstream_model));
        }
    }

    /// The attempt last begun went out from `egress` (SPEC R14).
    pub fn egress(&mut self, egress: String) {
        if let Some(i) = &mut self.inner {
            i.row.egress_ip = Some(egress);
        }
    }

    /// The attempt last begun did not answer (or answered with an error the client
    /// sees); the log row keeps its verdict.
    pub fn attempt_failed(&mut self, verdict: &Verdict) {
        if let Some(i) = &mut self.inner {
            push_failed(&mut i.row, verdict, false);
        }
    }

    /// Takes over the slot permit and quota reservation of the attempt whose answer goes
    /// to the client: the slot is held and the quota settled when the request finishes.
    pub fn hold(&mut self, permit: Option<Permit>, quota: Option<QuotaGuard>) {
        if let Some(i) = &mut self.inner {
            i.permit = permit;
            i.quota = quota;
        }
    }

    /// Notes generated text sent to the client (what the quota settles on when the
    /// upstream reports no usage, and what a stream's reservation must cover).
    pub fn observe_output(&mut self, chars: usize) {
        if let Some(g) = self.inner.as_mut().and_then(|i| i.quota.as_mut()) {
            g.observe_output(chars);
        }
    }

    /// When a stream's text has passed its quota reservation: the request for the next
    /// increment, to be decided before more of the stream is relayed.
    pub fn quota_growth(&self) -> Option<GrowthRequest> {
        self.inner
            .as_ref()
            .and_then(|i| i.quota.as_ref())
            .and_then(QuotaGuard::growth_request)
    }

    /// Applies a decided increment; a refusal is returned (the stream must end).
    pub fn apply_quota_growth(&mut self, decided: (Growth, u64)) -> Option<Box<QuotaBlock>> {
        self.inner
            .as_mut()
            .and_then(|i| i.quota.as_mut())
            .and_then(|g| g.apply_growth(decided))
    }

    /// The stream that reached the client ended whole (`None`) or failed with `cut`
    /// (and the upstream's error `event`, when it sent one): its verdict is recorded
    /// against the answering connection (SPEC R11, R13).
    pub fn stream_ended(&mut self, cut: Option<StreamCut>, event: Option<&str>) {
        let Some(i) = &mut self.inner else {
            return;
        };
        let (Some(conn_id), Some(model)) = (&i.row.connection_id, &i.row.model) else {
            return;
        };
        let snap = i.parts.config.snapshot();
        let Some(conn) = snap.catalog.connection(conn_id) else {
            return;
        };
        let now = i.clock.now_ms();
        let verdict = cut.map(|cut| {
            if let Some(target) = snap.upstreams.get(conn.index) {
                target.metrics.count_cut(cut, true);
            }
            let subject = Subject {
                family: &conn.family,
                model,
            };
            let answer = match event {
                Some(event) if cut == StreamCut::Error => Answer::StreamError { event },
                _ => Answer::Failed(AttemptFailure::Stream(cut)),
            };
            verdict::judge(&snap.rules, subject, answer, now)
        });
        i.parts.runtime.resilience.record_committed(
            conn,
            model,
            verdict.as_ref(),
            &snap.settings.resilience,
            now,
        );
        if let Some(v) = &verdict {
            push_failed(&mut i.row, v, true);
        }
    }

    /// Records the time to the first response byte.
    pub fn first_byte(&mut self) {
        if let Some(i) = &mut self.inner {
            if i.row.ttfb_ms.is_none() {
                i.row.ttfb_ms = Some(i.clock.elapsed_ms());
            }
        }
    }

    /// Moves the bookkeeping out (into a response body); `self` becomes inert.
    pub fn detach(&mut self) -> Finisher {
        Finisher::of(self.inner.take())
    }

    /// Finishes with the given status, error code and usage.
    pub fn finish(&mut self, status: u16, error_code: Option<&str>, usage: Option<Usage>) {
        let Some(mut i) = self.inner.take() else {
            return;
        };
        i.row.status = status;
        i.row.error_code = error_code.map(str::to_owned);
        i.permit = None;
        if let Some(g) = i.quota.take() {
            // An answer that reached the client (even cut short) was paid for upstream;
            // a request that failed before any byte was not.
            if status == 200 || (status == CLIENT_CLOSED && i.row.ttfb_ms.is_some()) {
                g.settle(usage);
            } else {
                g.release();
            }
        }
        i.row.latency_ms = i.clock.elapsed_ms();
        if let Some(u) = usage {
            i.row.prompt_tokens = Some(u.prompt_tokens);
            i.row.completion_tokens = Some(u.completion_tokens);
        }
        let m = &i.parts.telemetry.metrics;
        m.in_flight.dec();
        match i.labels.take() {
            Some(labels) => labels.count(status),
            None => {
                m.requests
                    .get_or_create(&RequestLabels::unrouted(status))
                    .inc();
            }
        }
        if let Some(code) = error_code {
            tracing::info!(
                request_id = %i.row.request_id,
                key_id = i.row.key_id.as_deref().unwrap_or(""),
                model = %i.row.requested_model,
                connection_id = i.row.connection_id.as_deref().unwrap_or(""),
                status,
                code,
                latency_ms = i.row.latency_ms,
                "Request failed."
            );
        } else {
            tracing::debug!(
                request_id = %i.row.request_id,
                connection_id = i.row.connection_id.as_deref().unwrap_or(""),
                status,
                latency_ms = i.row.latency_ms,
                "Request finished."
            );
        }
        i.parts.telemetry.log.record(i.row, i.route);
    }

    /// Finishes from a response about to be sent (status and typed code from it).
    pub fn finish_response(&mut self, response: &Response) {
        let code = response.extensions().get::<ErrorCode>().map(|c| c.0);
        self.finish(response.status().as_u16(), code, None);
    }
}

impl crate::body::metered::Meter for Finisher {
    fn request_id(&self) -> &str {
        Finisher::request_id(self)
    }

    fn first_byte(&mut self) {
        Finisher::first_byte(self);
    }

    fn observe_output(&mut self, chars: usize) {
        Finisher::observe_output(self, chars);
    }

    fn quota_growth(&self) -> Option<GrowthRequest> {
        Finisher::quota_growth(self)
    }

    fn apply_quota_growth(&mut self, decided: (Growth, u64)) -> Option<Box<QuotaBlock>> {
        Finisher::apply_quota_growth(self, decided)
    }

    fn stream_ended(&mut self, cut: Option<StreamCut>, event: Option<&str>) {
        Finisher::stream_ended(self, cut, event);
    }

    fn finish(&mut self, status: u16, error_code: Option<&str>, usage: Option<Usage>) {
        Finisher::finish(self, status, error_code, usage);
    }
}

impl Drop for Finisher {
    fn drop(&mut self) {
        let cut = self
            .inner
            .as_ref()
            .map(|i| i.parts.cutting.load(Ordering::Relaxed));
        match cut {
            None => {}
            Some(true) => self.finish(CLIENT_CLOSED, Some("gateway_shutdown"), None),
            Some(false) => self.finish(CLIENT_CLOSED, Some("client_closed_request"), None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logged_models_are_cut_at_a_character_boundary() {
        assert_eq!(logged_model("alpha/mock-small"), "alpha/mock-small");
        let long = "é".repeat(MAX_LOGGED_MODEL_CHARS + 5);
        assert_eq!(logged_model(&long), "é".repeat(MAX_LOGGED_MODEL_CHARS));
        // Over the limit in bytes, within it in characters: kept whole.
        let wide = "é".repeat(MAX_LOGGED_MODEL_CHARS);
        assert_eq!(logged_model(&wide), wide);
        let ascii = "m".repeat(MAX_LOGGED_MODEL_CHARS);
        assert_eq!(logged_model(&format!("{ascii}x")), ascii);
    }
}
