//! One attempt on one candidate: take its concurrency slots, pass the resilience check,
//! reserve quota, send upstream (through the usage-wall stage, `wall`), have the answer
//! judged (`answer`), and turn the verdict into the client response or a [`Report`] for
//! the dispatch machine. The attempt owns what it holds — slot permit and
//! quota reservation in [`Guards`], the half-open probe slot in the resilience
//! admission — and each is released when dropped; only an answer that goes to the
//! client hands the permit and the reservation to the request's finisher, and only a
//! recorded outcome settles the probe. What to try next is not decided here
//! ([`switchyard_core::dispatch`]).

use super::finish::Finisher;
use super::{answer, concurrency, quota};
use crate::client;
use crate::clock::{RequestClock, Stopwatch};
use crate::runtime::gate::Permit;
use crate::runtime::quota::{QuotaBlock, QuotaGuard};
use crate::runtime::resilience;
use crate::runtime::Runtime;
use crate::snapshot::Snapshot;
use crate::state::AppState;
use crate::upstream::{ProtocolHeaders, Upstream};
use axum::http::HeaderValue;
use axum::response::Response;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use switchyard_core::catalog::ApiKey;
use switchyard_core::dispatch::{self, Slot, Try};
use switchyard_core::llm;
use switchyard_core::oauth::Why;
use switchyard_core::outcome::{AttemptFailure, StreamCut};
use switchyard_core::quota::cost::Estimate;
use switchyard_core::resilience::admission;
use switchyard_core::resilience::board::Outcome;
use switchyard_core::resilience::verdict::{Next, Subject};
use switchyard_core::routing::lease::{Lease, Refusal as LeaseRefusal};
use switchyard_core::routing::stats::Observation;
use switchyard_core::routing::{Candidate, DispatchPolicy, Exclusion, Reason};
use switchyard_core::stream::budget::Facts;

/// An upstream failure as the client may see it, if it is the last one.
#[derive(Debug)]
pub struct UpstreamFailure {
    /// Says which upstream failed and how.
    pub message: String,
    /// The upstream's `Retry-After`, relayed.
    pub retry_after: Option<HeaderValue>,
}

/// What the dispatch machine is told of an attempt that did not answer.
pub type Report = dispatch::Report<Box<QuotaBlock>, Response, UpstreamFailure>;

/// What one request's attempts share: the runtime parts they use, the snapshot, the
/// request and its plan.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// The application, for what an attempt may start beyond the runtime parts (an
    /// OAuth token's refresh).
    pub app: &'a std::sync::Arc<AppState>,
    pub runtime: &'a Runtime,
    pub clock: RequestClock,
    pub snap: &'a Snapshot,
    pub key: &'a ApiKey,
    pub request: &'a llm::Request,
    /// The client's protocol headers, for upstreams of its format.
    pub protocol: &'a ProtocolHeaders,
    /// Why the first candidate that could not take the request in its format could not.
    pub untranslatable: std::sync::OnceLock<String>,
    /// Why the first candidate whose pool meters `usd` could not price the model.
    pub unpriced: std::sync::OnceLock<String>,
    pub candidates: &'a [Candidate],
    pub policy: DispatchPolicy,
    pub estimate: Estimate,
    /// The request's facts for the first-output budget, read once when first needed.
    pub facts: std::sync::OnceLock<Facts>,
    /// The exclusive lease the request presented, fenced (SPEC R16).
    pub lease: Option<&'a Lease>,
    /// Why the lease stopped passing its fence at a dispatch, if it did.
    pub lease_refusal: std::sync::OnceLock<LeaseRefusal>,
}

impl<'a> Ctx<'a> {
    pub fn new(
        (app, clock, snap): (&'a std::sync::Arc<AppState>, RequestClock, &'a Snapshot),
        key: &'a ApiKey,
        (request, estimate): (&'a llm::Request, Estimate),
        protocol: &'a ProtocolHeaders,
        (candidates, policy): (&'a [Candidate], DispatchPolicy),
        lease: Option<&'a Lease>,
    ) -> Self {
        Self {
            app,
            runtime: &app.runtime,
            clock,
            snap,
            key,
            request,
            protocol,
            untranslatable: std::sync::OnceLock::new(),
            unpriced: std::sync::OnceLock::new(),
            candidates,
            policy,
            estimate,
            facts: std::sync::OnceLock::new(),
            lease,
            lease_refusal: std::sync::OnceLock::new(),
        }
    }

    /// The context of another upstream call of the same client request (a dispatch
    /// shape's step): `request` over `candidates`, its own estimate, on `clock`.
    pub fn call<'b>(
        &'b self,
        request: &'b llm::Request,
        candidates: &'b [Candidate],
        clock: RequestClock,
    ) -> Ctx<'b> {
        let estimate =
            Estimate::at_admission(request.prompt_len, request.max_tokens, request.stream);
        Ctx::new(
            (self.app, clock, self.snap),
            self.key,
            (request, estimate),
            self.protocol,
            (candidates, self.policy),
            self.lease,
        )
    }
}

/// An attempt's result, and how long it waited for its slots.
#[derive(Debug)]
pub struct Tried {
    pub slot_wait_ms: u64,
    pub result: Result<Response, Report>,
}

impl From<Report> for Tried {
    fn from(report: Report) -> Self {
        Self {
            slot_wait_ms: 0,
            result: Err(report),
        }
    }
}

/// What an attempt holds; see the module docs. (The probe slot is held by the
/// resilience check's [`resilience::Admitted`], until the outcome is recorded.)
pub(super) struct Guards {
    permit: Option<Permit>,
    quota: Option<QuotaGuard>,
}

impl Guards {
    /// The answer goes to the client: the finisher holds the slot and settles the quota.
    pub(super) fn hand_over(&mut self, finisher: &mut Finisher) {
        finisher.hold(self.permit.take(), self.quota.take());
    }
}

/// `candidate` left out for `reason`.
fn excluded(candidate: &Candidate, reason: Reason) -> Exclusion {
    let conn = &candidate.connection;
    Exclusion {
        target: format!("{}/{}", conn.provider, candidate.upstream_model),
        connection: conn.id.clone(),
        reason,
    }
}

/// Makes the attempt `t` asks for.
pub async fn run(ctx: &Ctx<'_>, t: Try, finisher: &mut Finisher) -> Tried {
    let Some(candidate) = ctx.candidates.get(t.candidate) else {
        return Report::Gone.into();
    };
    // Slots first, so a half-open probe is never held while waiting for them and the
    // resilience check below sees the state after any wait.
    let mut slot_wait_ms = 0;
    let permit = match t.slot {
        Slot::IfFree => match concurrency::try_take(ctx, candidate) {
            Some(permit) => permit,
            None => return Report::Busy.into(),
        },
        Slot::Wait { waited_ms } => {
            let watch = Stopwatch::start();
            let admitted =
                concurrency::admit(ctx, candidate, waited_ms, finisher.request_id()).await;
            slot_wait_ms = watch.elapsed_ms();
            match admitted {
                Ok(permit) => permit,
                Err(refusal) => {
                    return Tried {
                        slot_wait_ms,
                        result: Err(Report::Excluded(excluded(
                            candidate,
                            Reason::SlotRefused(refusal),
                        ))),
                    }
                }
            }
        }
    };
    let result = attempt(ctx, t, candidate, permit, finisher).await;
    Tried {
        slot_wait_ms,
        result,
    }
}

/// The attempt once its slots are held.
async fn attempt(
    ctx: &Ctx<'_>,
    t: Try,
    candidate: &Candidate,
    permit: Option<Permit>,
    finisher: &mut Finisher,
) -> Result<Response, Report> {
    let (runtime, clock, snap) = (ctx.runtime, ctx.clock, ctx.snap);
    let conn = &candidate.connection;
    let target = snap.upstreams.get(conn.index).ok_or(Report::Gone)?;
    let request = ctx.request;
    let upstream_format = target.adapter.format();
    let output_limit = snap.output_limit(&conn.provider, &candidate.upstream_model);
    let body = request
        .upstream_body(upstream_format, &candidate.upstream_model, output_limit)
        .map_err(|e| {
            let message = format!(
                "the request cannot be sent to `{}/{}`: {e}",
                conn.provider, candidate.upstream_model
            );
            tracing::info!(request_id = finisher.request_id(), %message, "Candidate skipped.");
            // The first one is the client's error if no candidate can take the request.
            let _ = ctx.untranslatable.set(message);
            Report::Excluded(excluded(candidate, Reason::Untranslatable))
        })?;
    let body = target.request_body(body, request.stream);
    let attempt = resilience::Attempt {
        conn,
        model: &candidate.upstream_model,
        may_defer: t.may_defer,
        budget_ms: snap.settings.first_byte_timeout_ms,
    };
    let res_settings = &snap.settings.resilience;
    let admitted = runtime
        .resilience
        .check(attempt, res_settings, clock.now_ms())
        .map_err(|reason| Report::Excluded(excluded(candidate, reason)))?;
    // An OAuth token due for its refresh is refreshed first (SPEC R4).
    let before = fresh_token(ctx, &conn.id, target)
        .await
        .map_err(|reason| Report::Excluded(excluded(candidate, reason)))?;
    let target = before
        .as_deref()
        .and_then(|s| s.upstream_of(&conn.id))
        .unwrap_or(target);
    let mut guards = Guards {
        permit,
        quota: None,
    };
    let (quota, quota_headers) = quota::admit(ctx, candidate, output_limit, finisher.request_id())
        .await
        .map_err(|refusal| match refusal {
            quota::Refusal::Blocked(block) => Report::QuotaBlocked {
                exclusion: excluded(
                    candidate,
                    Reason::QuotaBlocked {
                        retry_after_ms: block.retry_after_ms,
                    },
                ),
                block,
            },
            quota::Refusal::Unpriced(message) => {
                let _ = ctx.unpriced.set(message);
                Report::Excluded(excluded(candidate, Reason::Unpriced))
            }
        })?;
    guards.quota = quota;
    super::lease::bind(ctx, &conn.id)
        .await
        .map_err(|reason| Report::Excluded(excluded(candidate, reason)))?;
    if snap.stats_read {
        runtime
            .stats
            .sent(&conn.id, &candidate.upstream_model, clock.now_ms());
    }
    finisher.attempt(
        candidate,
        target.metrics.answering(&candidate.upstream_model),
    );
    // One budget per attempt for the headers and, when not streaming, the whole body; a
    // stream is bounded by the execution limit (SPEC R10), never shorter than that, and
    // watched (R11, R12): its headers are due within its first-output budget too.
    let dispatched = tokio::time::Instant::now();
    let watch = Stopwatch::started_at(dispatched);
    let mut deadline = dispatched + Duration::from_millis(snap.settings.first_byte_timeout_ms);
    let limits = request.stream.then(|| {
        let total_ms = admission::execution_bound_ms(
            &snap.settings.concurrency.queue.with(&conn.queue),
            snap.settings.first_byte_timeout_ms,
        );
        // Read only when the first-output budget adapts to them.
        let facts = || {
            ctx.facts
                .get_or_init(|| Facts::of(request))
                .on_third_party_claude(target.is_third_party_claude())
        };
        let settings = target.stream.apply(&snap.settings.stream);
        switchyard_core::stream::limits(&settings, facts, t.last, total_ms)
    });
    let first_output_deadline = limits
        .and_then(|l| l.first_output_ms)
        .map(|ms| dispatched + Duration::from_millis(ms))
        .filter(|d| *d < deadline);
    if let Some(d) = first_output_deadline {
        deadline = d;
    }
    let body = Bytes::from(body);
    let sent = super::wall::send(
        ctx,
        target,
        (conn, &candidate.upstream_model),
        body.clone(),
        deadline,
        finisher,
    )
    .await;
    // A 401 for an OAuth token: refreshed, and the attempt made once more with the new
    // token (SPEC R4).
    let (sent, after) = match sent {
        Ok(r) if r.status() == http::StatusCode::UNAUTHORIZED => {
            match reauthorized(ctx, &conn.id, target).await {
                Some(fresh) => (None, Some(fresh)),
                None => (Some(Ok(r)), None),
            }
        }
        sent => (Some(sent), None),
    };
    let target = after
        .as_deref()
        .and_then(|s| s.upstream_of(&conn.id))
        .unwrap_or(target);
    let sent = match sent {
        Some(sent) => sent,
        None => {
            super::wall::send(
                ctx,
                target,
                (conn, &candidate.upstream_model),
                body,
                deadline,
                finisher,
            )
            .await
        }
    };
    // The upstream's answer (or failure) is judged at the time it came; the outcome is
    // recorded once it is read.
    let answered_at = tokio::time::Instant::now();
    let answered = clock.ms_at(answered_at);
    let outcome = match sent {
        Ok(response) => {
            if let Some(local) = client::local_addr(&response) {
                let (egress, due) = target.egress.seen(local.ip(), answered);
                if due {
                    runtime.resilience.note_egress(conn, &egress, answered);
                }
                finisher.egress(egress);
            }
            if snap.reads_signals(conn.index) {
                let readings = answer::saturation(&response, answered);
                runtime.quota.record_signals(&conn.id, &readings, answered);
            }
            target
                .metrics
                .latency
                .observe(watch.until(answered_at).as_secs_f64());
            let expect = answer::Expect {
                watch: limits.map(|l| (l, dispatched)),
                deadline,
                idle_timeout: Duration::from_millis(snap.settings.stream_idle_timeout_ms),
                upstream: target,
                client: request.format,
                now_s: answered / 1000,
            };
            answer::judge(response, expect, &mut guards, finisher).await
        }
        // Headers past the first-output budget: the stream did not start in time.
        Err(AttemptFailure::FirstByteTimeout) if first_output_deadline.is_some() => Err(
            answer::Failed::from(AttemptFailure::Stream(StreamCut::FirstOutput)),
        ),
        Err(failure) => Err(answer::Failed::from(failure)),
    };
    let read_at = tokio::time::Instant::now();
    let read = clock.ms_at(read_at);
    let mut failed = match outcome {
        Ok(response) => {
            // A stream's outcome is known when it ends (the finisher records it).
            let outcome = if request.stream {
                Outcome::Answered
            } else {
                Outcome::Success
            };
            runtime
                .resilience
                .record(attempt, outcome, res_settings, admitted, read);
            if snap.stats_read {
                let served = Observation {
                    ok: true,
                    header_ms: Some(watch.until_ms(read_at)),
                    stream: request.stream,
                };
                runtime
                    .stats
                    .observe(&conn.id, &candidate.upstream_model, served);
            }
            target.metrics.success.inc();
            finisher.add_fields(quota_headers);
            return Ok(response);
        }
        Err(failed) => failed,
    };
    let subject = Subject {
        family: &conn.family,
        model: &candidate.upstream_model,
    };
    let verdict = failed.judge(&snap.rules, subject, read);
    runtime.resilience.record(
        attempt,
        Outcome::Failed(&verdict),
        res_settings,
        admitted,
        read,
    );
    let failure = verdict.failure;
    target.metrics.count_attempt(failure.label());
    if let AttemptFailure::Stream(cut) = failure {
        target.metrics.count_cut(cut, false);
    }
    let status = failure.status().unwrap_or(502);
    finisher.attempt_failed(&verdict);
    if snap.stats_read {
        // A refusal that is the client's fault says nothing of the account's service.
        let failed_once = Observation {
            ok: verdict.next == Next::Client,
            header_ms: None,
            stream: request.stream,
        };
        runtime
            .stats
            .observe(&conn.id, &candidate.upstream_model, failed_once);
    }
    if verdict.next == Next::Client {
        if let Some(response) = failed.client_answer(status, target, request.format) {
            return Err(Report::Rejected(response));
        }
    }
    tracing::warn!(
        request_id = finisher.request_id(),
        provider = %conn.provider,
        connection_id = %conn.id,
        failure = failure.label(),
        cause = verdict.cause.as_str(),
        rule = verdict.rule.as_deref().unwrap_or(""),
        "Upstream attempt failed; trying the next candidate."
    );
    if verdict.next == Next::Advance {
        if let Some(answer) = failed.client_answer(status, target, request.format) {
            // The provider's other accounts have the same model's window; another
            // provider's may not.
            let same = ctx
                .candidates
                .iter()
                .enumerate()
                .filter(|(_, c)| {
                    c.upstream_model == candidate.upstream_model
                        && c.connection.provider == conn.provider
                })
                .map(|(i, _)| i)
                .collect();
            return Err(Report::Advance { answer, same });
        }
    }
    let message = match failure {
        AttemptFailure::Status(s) => format!(
            "upstream `{}` (connection `{}`) answered HTTP {s}",
            conn.provider, conn.id
        ),
        other => format!(
            "upstream `{}` (connection `{}`) failed: {}",
            conn.provider,
            conn.id,
            other.label()
        ),
    };
    // A restated failure tells the client to come back when the restatement says, if the
    // upstream said nothing.
    let retry_after = failed.retry_after.or_else(|| {
        verdict
            .client_retry_after_ms
            .map(|ms| HeaderValue::from(ms.div_ceil(1000)))
    });
    let detail = UpstreamFailure {
        message,
        retry_after,
    };
    // A crawl before anything reached the client may be the account's bad moment: the
    // same account is tried once more (SPEC R12).
    if verdict.next == Next::SameOnce {
        return Err(Report::RetrySame { failure, detail });
    }
    Err(Report::Failed {
        failure,
        announced: detail.retry_after.is_some(),
        detail,
    })
}

/// Refreshes the connection's OAuth token before the attempt when it is due (SPEC R4): a
/// token that expired is waited for (bounded), and its new snapshot returned; one that
/// expires within the margin is refreshed in the background while the attempt still
/// uses it. A failed refresh of an expired token leaves the connection out as the
/// failure cooled or ended it.
async fn fresh_token(
    ctx: &Ctx<'_>,
    id: &str,
    target: &Upstream,
) -> Result<Option<Arc<Snapshot>>, Reason> {
    let Some(grant) = &target.grant else {
        return Ok(None);
    };
    let now = ctx.clock.now_ms();
    if !grant.wanted(
        Why::Expiring,
        ctx.snap.settings.oauth.refresh_margin_ms,
        now,
    ) {
        return Ok(None);
    }
    let seen = grant.refreshes.last_refresh_at;
    if grant.expires_at.is_some_and(|t| t > now) {
        crate::oauth::start(ctx.app, id, Some(Why::Expiring), seen);
        return Ok(None);
    }
    match crate::oauth::refresh(ctx.app, id, Some(Why::Expiring), seen).await {
        Ok(_) => Ok(Some(ctx.app.snapshot())),
        Err(e) => {
            tracing::warn!(connection_id = %id, error = %e, "The connection's OAuth token has expired and was not refreshed.");
            let health = ctx.runtime.resilience.health_of(id);
            let now = ctx.clock.now_ms();
            match health.terminal {
                Some(t) => Err(Reason::Terminal(t)),
                None if !health.usable(now) => Err(Reason::CoolingDown {
                    retry_after_ms: health.remaining_ms(now),
                    transient: false,
                }),
                // No verdict on the account (the refresh is still running): the token
                // is tried as it is.
                None => Ok(None),
            }
        }
    }
}

/// After a 401 on an OAuth connection: refreshes its token, unless it was refreshed
/// within the last minute (then the 401 is the account's answer), and returns the
/// snapshot with the new token.
async fn reauthorized(ctx: &Ctx<'_>, id: &str, target: &Upstream) -> Option<Arc<Snapshot>> {
    let grant = target.grant.as_ref()?;
    let now = ctx.clock.now_ms();
    if !grant.wanted(
        Why::Unauthorized,
        ctx.snap.settings.oauth.refresh_margin_ms,
        now,
    ) {
        return None;
    }
    let seen = grant.refreshes.last_refresh_at;
    match crate::oauth::refresh(ctx.app, id, Some(Why::Unauthorized), seen).await {
        Ok(_) => Some(ctx.app.snapshot()),
        Err(e) => {
            tracing::warn!(connection_id = %id, error = %e, "The upstream refused the connection's OAuth token and it was not refreshed.");
            None
        }
    }
}
