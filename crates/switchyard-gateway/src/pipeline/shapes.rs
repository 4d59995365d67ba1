//! The dispatch shapes (SPEC R19, [`switchyard_core::routing::shape`]): `pipeline` and
//! `fusion` make several upstream calls for one client request, and `context-relay`
//! one more, off the request path, when an account nears its window's end. Each call is one
//! dispatch ([`super::dispatch`]) over its target's candidates, with the failover, the
//! exclusions and the quota booking of any request. The call whose answer the client
//! gets (the last step, the judge) is made on the client's finisher, streamed if the
//! client asked; every other call is answered in full and has a finisher of its own: a
//! request log row of its own, `<request id>.<n>` (n from 1 in target order), booked
//! and settled on its own.

use super::attempt::Ctx;
use super::finish::Finisher;
use super::{dispatch, Dispatched};
use crate::clock::RequestClock;
use crate::error::{render, ApiError};
use crate::snapshot::Snapshot;
use crate::state::AppState;
use crate::upstream::ProtocolHeaders;
use axum::response::Response;
use futures_util::stream::{FuturesUnordered, StreamExt};
use http_body_util::BodyExt;
use std::sync::Arc;
use std::time::Duration;
use switchyard_core::catalog::ApiKey;
use switchyard_core::format::compose::{self, Role};
use switchyard_core::llm::Request;
use switchyard_core::outcome::AttemptFailure;
use switchyard_core::quota::cost::Estimate;
use switchyard_core::routing::affinity::SessionKey;
use switchyard_core::routing::relay;
use switchyard_core::routing::shape::{self, Gather, Wait, REVISE_PROMPT};
use switchyard_core::routing::{Candidate, DispatchPolicy, Exclusion};

/// The error code in the log row of a panel member still running at the deadline.
const CUT_AT_DEADLINE: &str = "fusion_deadline";

/// `pipeline`: each target's step in turn, see the module docs.
pub(super) async fn pipeline(
    state: &Arc<AppState>,
    ctx: &Ctx<'_>,
    excluded: Vec<Exclusion>,
    finisher: &mut Finisher,
) -> Result<Response, ApiError> {
    let steps = shape::steps(ctx.candidates);
    let Some((last, before)) = steps.split_last() else {
        return answer(ctx, ctx.request, ctx.candidates, excluded, finisher).await;
    };
    let request_id = finisher.request_id().to_owned();
    let mut previous: Option<String> = None;
    for (n, step) in before.iter().enumerate() {
        let request = step_request(ctx.request, previous.as_deref(), false)?;
        let candidates = of(ctx.candidates, step);
        let mut call = call_finisher(state, ctx, &request_id, n);
        match in_full(ctx, &request, &candidates, &mut call).await {
            Ok(text) => previous = Some(text),
            Err(status) => tracing::warn!(
                request_id,
                step = n + 1,
                steps = steps.len(),
                status,
                "A pipeline step did not answer; the next step works from the last answer."
            ),
        }
    }
    let request = step_request(ctx.request, previous.as_deref(), ctx.request.stream)?;
    answer(ctx, &request, &of(ctx.candidates, last), excluded, finisher).await
}

/// `fusion`: the panel in parallel, then the judge; see the module docs.
pub(super) async fn fusion(
    state: &Arc<AppState>,
    ctx: &Ctx<'_>,
    excluded: Vec<Exclusion>,
    finisher: &mut Finisher,
) -> Result<Response, ApiError> {
    let settings = ctx.snap.settings.fusion;
    let members: Vec<Vec<Candidate>> = shape::steps(ctx.candidates)
        .iter()
        .map(|step| of(ctx.candidates, step))
        .collect();
    let request_id = finisher.request_id().to_owned();
    let mut calls: Vec<Finisher> = (0..members.len())
        .map(|n| call_finisher(state, ctx, &request_id, n))
        .collect();
    let asked = step_request(ctx.request, None, false)?;
    let mut gather = Gather::new(members.len(), settings, ctx.clock.now_ms());
    let mut answers: Vec<(usize, String)> = Vec::with_capacity(members.len());
    let mut failures: Vec<(usize, u16)> = Vec::new();
    {
        let asked = &asked;
        let mut running: FuturesUnordered<_> = members
            .iter()
            .zip(calls.iter_mut())
            .enumerate()
            .map(|(n, (candidates, call))| async move {
                (n, in_full(ctx, asked, candidates, call).await)
            })
            .collect();
        while let Wait::Until(at) = gather.wait(ctx.clock.now_ms()) {
            let left = at.saturating_sub(ctx.clock.now_ms());
            tokio::select! {
                next = running.next() => match next {
                    Some((n, Ok(text))) => {
                        answers.push((n, text));
                        gather.answered(ctx.clock.now_ms());
                    }
                    Some((n, Err(status))) => {
                        failures.push((n, status));
                        gather.failed();
                    }
                    None => break,
                },
                () = tokio::time::sleep(Duration::from_millis(left)) => {}
            }
        }
    }
    // Members still running are cut; the others are finished already.
    for call in &mut calls {
        call.finish(504, Some(CUT_AT_DEADLINE), None);
    }
    answers.sort_unstable_by_key(|(n, _)| *n);
    tracing::info!(
        request_id,
        panel = members.len(),
        answered = answers.len(),
        failed = failures.len(),
        "The fusion panel is in; the judge answers."
    );
    if answers.is_empty() && failures.len() == members.len() {
        // Nothing to judge, nobody cut: the request is answered as a single dispatch
        // would, with the same exclusions and errors as any strategy's.
        return answer(ctx, ctx.request, ctx.candidates, excluded, finisher).await;
    }
    if answers.is_empty() {
        return Err(ApiError::Upstream {
            failure: AttemptFailure::FirstByteTimeout,
            message: format!(
                "no member of the fusion panel answered ({} failed, {} cut at routing.fusion.deadlineMs = {} ms)",
                failures.len(),
                members.len().saturating_sub(failures.len()),
                settings.deadline_ms
            ),
            retry_after: None,
        });
    }
    let texts: Vec<String> = answers.into_iter().map(|(_, text)| text).collect();
    let prompt = shape::judge_prompt(&texts);
    let judged = compose::extended(ctx.request, &[(Role::User, &prompt)], ctx.request.stream)
        .map_err(invalid)?;
    // The judge is the first target; the others are its fallbacks, in their order.
    answer(ctx, &judged, ctx.candidates, excluded, finisher).await
}

/// The client's request for a step: as sent, or with the previous step's answer and the
/// revise prompt after its conversation; streamed as `stream` says.
fn step_request(
    request: &Request,
    previous: Option<&str>,
    stream: bool,
) -> Result<Request, ApiError> {
    let extended = match previous {
        None if request.stream == stream => return Ok(request.clone()),
        None => compose::extended(request, &[], stream),
        Some(text) => compose::extended(
            request,
            &[(Role::Assistant, text), (Role::User, REVISE_PROMPT)],
            stream,
        ),
    };
    extended.map_err(invalid)
}

fn invalid(e: switchyard_core::format::DecodeError) -> ApiError {
    ApiError::InvalidRequest {
        param: e.param(),
        message: e.to_string(),
    }
}

/// The candidates at `indices`.
fn of(candidates: &[Candidate], indices: &[usize]) -> Vec<Candidate> {
    indices
        .iter()
        .filter_map(|&i| candidates.get(i).cloned())
        .collect()
}

/// The finisher of the `n`th (from 0) call answered in full: its own log row.
fn call_finisher(state: &AppState, ctx: &Ctx<'_>, request_id: &str, n: usize) -> Finisher {
    let clock = RequestClock::start(state.clock.as_ref());
    side_finisher(state, ctx, format!("{request_id}.{}", n + 1), clock)
}

/// The finisher of a call of `ctx`'s key and request other than the client's: its own
/// log row `id`, booked and settled on its own.
fn side_finisher(state: &AppState, ctx: &Ctx<'_>, id: String, clock: RequestClock) -> Finisher {
    let mut finisher = Finisher::start(super::finishing(state), id, clock, ctx.request.format);
    finisher.set_key(&ctx.key.id);
    finisher.set_request(&ctx.request.model, false);
    finisher
}

/// The call whose answer the client gets: `request` dispatched over `candidates` on
/// the client's finisher.
async fn answer(
    ctx: &Ctx<'_>,
    request: &Request,
    candidates: &[Candidate],
    excluded: Vec<Exclusion>,
    finisher: &mut Finisher,
) -> Result<Response, ApiError> {
    let call = ctx.call(request, candidates, ctx.clock);
    match dispatch(&call, excluded, true, finisher).await {
        Dispatched::Answered { response, .. } => Ok(response),
        Dispatched::Ended { result, .. } => result,
    }
}

/// A call answered in full, on its own finisher, outside the request's lease: the
/// answer's text, or the status it ended with (an answer without text is a 502).
async fn in_full(
    ctx: &Ctx<'_>,
    request: &Request,
    candidates: &[Candidate],
    finisher: &mut Finisher,
) -> Result<String, u16> {
    let format = request.format;
    // The request's lease (SPEC R16) follows the answer the client gets, not the calls
    // on the way to it.
    let call = Ctx {
        lease: None,
        ..ctx.call(request, candidates, ctx.clock)
    };
    let response = match dispatch(&call, Vec::new(), true, finisher).await {
        Dispatched::Answered { response, .. } => response,
        Dispatched::Ended { result, .. } => result.unwrap_or_else(|e| render::response(&e, format)),
    };
    // A success finished its row as it was read; a refusal finishes it here.
    finisher.finish_response(&response);
    let status = response.status().as_u16();
    if !response.status().is_success() {
        return Err(status);
    }
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|_| 502u16)?
        .to_bytes();
    compose::answer_text(format, &bytes).ok_or(502)
}

/// The client's request with the summary another account made for its session, when
/// its first candidate is on another account than the one that made it (SPEC R19's
/// `context-relay`); the summary is then used up.
pub(super) fn handed_over(
    state: &AppState,
    snap: &Snapshot,
    session: SessionKey,
    candidates: &[Candidate],
    request: &Request,
) -> Option<Request> {
    let first = candidates.first()?;
    let ttl = snap.settings.session_affinity_ttl_ms;
    let now = state.clock.now_ms();
    let summary = state
        .runtime
        .relay
        .take(session, &first.connection.id, ttl, now)?;
    match compose::with_system(request, &relay::handoff_text(&summary)) {
        Ok(handed) => {
            tracing::info!(
                connection_id = %first.connection.id,
                "The session moves to another account with the previous account's summary."
            );
            Some(handed)
        }
        Err(e) => {
            tracing::warn!(error = %e, "The handoff summary could not be added; the request goes as sent.");
            None
        }
    }
}

/// What a served request of a `context-relay` combo leaves for its summary call.
pub(super) struct Served {
    pub snap: Arc<Snapshot>,
    pub key: ApiKey,
    pub candidate: Candidate,
    pub protocol: ProtocolHeaders,
    pub policy: DispatchPolicy,
    pub request_id: String,
}

/// Has the account that served `session` summarize the conversation for the next one,
/// off the request path, when its provider reports it near its window's end and no
/// summary of it is waiting or being made (SPEC R19's `context-relay`). The summary
/// call is booked and logged on its own, as `<request id>.relay`.
pub(super) fn relay_if_due(
    state: &Arc<AppState>,
    session: SessionKey,
    request: &Request,
    served: Served,
) {
    let conn = &served.candidate.connection;
    let settings = served.snap.settings.relay;
    let used = state.runtime.quota.connection_windows(&conn.id).used_max;
    if relay::phase(used, settings) == relay::Phase::Serve {
        return;
    }
    let ttl = served.snap.settings.session_affinity_ttl_ms;
    if !state
        .runtime
        .relay
        .begin(session, &conn.id, ttl, state.clock.now_ms())
    {
        return;
    }
    let asked = match compose::text_request(request, relay::SUMMARY_PROMPT) {
        Ok(asked) => asked,
        Err(e) => {
            state.runtime.relay.failed(session, &conn.id);
            tracing::warn!(error = %e, "The conversation could not be put to its account for a summary.");
            return;
        }
    };
    tracing::info!(
        request_id = served.request_id,
        connection_id = %conn.id,
        used = used.unwrap_or(0.0),
        "The account nears its window's end; it summarizes the session for the next account."
    );
    let state = Arc::clone(state);
    tokio::spawn(async move {
        let Served {
            snap,
            key,
            candidate,
            protocol,
            policy,
            request_id,
        } = served;
        let clock = RequestClock::start(state.clock.as_ref());
        let candidates = [candidate];
        let estimate = Estimate::at_admission(asked.prompt_len, asked.max_tokens, asked.stream);
        let ctx = Ctx::new(
            (&state, clock, &snap),
            &key,
            (&asked, estimate),
            &protocol,
            (&candidates, policy),
            None,
        );
        let mut finisher = side_finisher(&state, &ctx, format!("{request_id}.relay"), clock);
        let from = &candidates[0].connection.id;
        match in_full(&ctx, &asked, &candidates, &mut finisher).await {
            Ok(summary) => state.runtime.relay.made(session, from, &summary),
            Err(status) => {
                state.runtime.relay.failed(session, from);
                tracing::warn!(
                    request_id,
                    status,
                    "The handoff summary could not be made; a later request may try again."
                );
            }
        }
    });
}
