//! The dispatch shapes (SPEC R19, [`switchyard_core::routing::shape`]): `pipeline` and
//! `fusion` make several upstream calls for one client request. Each call is one
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
use crate::state::AppState;
use axum::response::Response;
use futures_util::stream::{FuturesUnordered, StreamExt};
use http_body_util::BodyExt;
use std::sync::Arc;
use std::time::Duration;
use switchyard_core::format::compose::{self, Role};
use switchyard_core::llm::Request;
use switchyard_core::outcome::AttemptFailure;
use switchyard_core::routing::shape::{self, Gather, Wait, REVISE_PROMPT};
use switchyard_core::routing::{Candidate, Exclusion};

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
fn call_finisher(state: &Arc<AppState>, ctx: &Ctx<'_>, request_id: &str, n: usize) -> Finisher {
    let clock = RequestClock::start(state.clock.as_ref());
    let id = format!("{request_id}.{}", n + 1);
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

/// A call answered in full, on its own finisher: the answer's text, or the status it
/// ended with (an answer without text is a 502).
async fn in_full(
    ctx: &Ctx<'_>,
    request: &Request,
    candidates: &[Candidate],
    finisher: &mut Finisher,
) -> Result<String, u16> {
    let format = request.format;
    let call = ctx.call(request, candidates, ctx.clock);
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
