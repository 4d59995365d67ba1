//! The client request pipeline, whatever API the client speaks: every front door calls
//! [`serve`] with its format.
//!
//! Stages, in order (each a module with a narrow interface, so a new capability is a new
//! stage rather than edits everywhere):
//!
//! 1. edge — request id, `now` read once, in-flight accounting ([`finish::Finisher`])
//! 2. auth — client key from the in-memory snapshot ([`auth`]), and the exclusive lease
//!    the request presents, fenced (`lease`, SPEC R16)
//! 3. decode — body size limit, the format's decoder into the normalized request
//!    ([`switchyard_core::format`], [`switchyard_core::llm`])
//! 4. plan — resolution, then the plan's strategy orders the candidates over the facts
//!    it asks for (`plan`)
//! 5. dispatch — the core state machine ([`switchyard_core::dispatch`]) says what to try;
//!    each attempt (`attempt`) takes its concurrency slots (`concurrency`), passes the
//!    resilience check, reserves quota (`quota`) and calls the upstream adapter
//!    ([`crate::upstream`]), owning what it holds until the answer goes to the client;
//!    a dispatch shape (`shapes`: `pipeline`, `fusion`) makes several such dispatches
//! 6. judge and respond — (`answer`) a buffered JSON body, or the streaming body stack
//!    ([`crate::body`]) that commits on the stream's first output and owns the finisher
//! 7. finish — exactly once: quota settlement, request log row, metrics ([`finish`])
//!
//! The pipeline decides nothing itself: decisions are core functions fed with the state.

mod answer;
mod attempt;
pub mod auth;
mod concurrency;
mod count;
pub mod finish;
pub mod headers;
mod lease;
mod plan;
mod quota;
mod shapes;
mod wall;

use crate::body::whole::{self, WholeError};
use crate::clock::RequestClock;
use crate::error::{render, ApiError};
use crate::heads::{Fields, LateFields};
use crate::state::AppState;
use axum::body::Body;
use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use finish::Finisher;
use std::sync::Arc;
use std::time::Duration;
use switchyard_core::dispatch::{Dispatch, End, Report, Slot, Step};
use switchyard_core::format::{compose, Format};
use switchyard_core::quota::cost::Estimate;
use switchyard_core::routing::affinity::{self, SessionKey};
use switchyard_core::routing::lease::{self as lease_rules, Refusal as LeaseRefusal};
use switchyard_core::routing::shape::Shape;
use switchyard_core::routing::trace::Decision;
use switchyard_core::routing::{Candidate, Reason};

pub use count::count_tokens;

/// Header carrying the request id on every response (made once, as
/// [`headers::ROUTE_HEADER`] is).
pub static REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Serves a client request in `format` whose header fields the pipeline reads are
/// `fields` (see [`headers::Field`]): [`serve_direct`], with the answer's late fields
/// put into its header map (for a server that writes only the map).
pub async fn serve(state: &Arc<AppState>, format: Format, body: Body, fields: Fields) -> Response {
    let (mut response, late) = serve_direct(state, format, body, fields).await;
    if let Some(LateFields(late)) = late {
        crate::heads::insert_late(late.as_ref(), response.headers_mut());
    }
    response
}

/// Serves a client request in `format` whose header fields the pipeline reads are
/// `fields` (see [`headers::Field`]): the request id, `now` read once, the finisher
/// that records the request however it ends, and errors rendered in `format`. With the
/// fields the answering attempt adds to the head as numbers ([`LateFields`]), which the
/// gateway's HTTP/1 connection writes without a map.
pub async fn serve_direct(
    state: &Arc<AppState>,
    format: Format,
    body: Body,
    fields: Fields,
) -> (Response, Option<LateFields>) {
    let clock = RequestClock::start(state.clock.as_ref());
    let mut finisher = Finisher::start(finishing(state), state.next_request_id(), clock, format);
    let request_id = HeaderValue::try_from(finisher.request_id()).ok();
    let mut route = None;
    let ran = run(
        state,
        format,
        clock,
        &fields,
        body,
        &mut finisher,
        &mut route,
    )
    .await;
    let (mut response, late) = match ran {
        Ok(r) => (r, finisher.take_fields()),
        Err(e) => (render::response(&e, format), None),
    };
    finisher.finish_response(&response);
    if let Some(id) = request_id {
        response.headers_mut().insert(REQUEST_ID_HEADER.clone(), id);
    }
    if let Some(route) = route {
        response
            .headers_mut()
            .insert(headers::ROUTE_HEADER.clone(), route);
    }
    (response, late)
}

/// What a finisher records into.
fn finishing(state: &AppState) -> finish::Parts {
    finish::Parts {
        telemetry: Arc::clone(&state.telemetry),
        runtime: Arc::clone(&state.runtime),
        config: Arc::clone(&state.config),
        cutting: Arc::clone(&state.cutting),
    }
}

/// Refuses a body declared as anything but JSON (`application/json`, or a `+json` type),
/// before it is read. A request without `Content-Type` is read as JSON.
fn check_json_content_type(fields: &Fields) -> Result<(), ApiError> {
    let Some(value) = fields.get(headers::Field::ContentType.at()) else {
        return Ok(());
    };
    if value == b"application/json" {
        return Ok(());
    }
    let text = crate::heads::visible_text(value).unwrap_or_default();
    let essence = text.split(';').next().unwrap_or_default().trim();
    let json = essence.eq_ignore_ascii_case("application/json")
        || essence
            .rsplit_once('+')
            .is_some_and(|(_, suffix)| suffix.eq_ignore_ascii_case("json"));
    if json {
        return Ok(());
    }
    let shown: String = text.chars().take(100).collect();
    Err(ApiError::UnsupportedMediaType(shown))
}

async fn read_body(body: Body, limit: u64) -> Result<Bytes, ApiError> {
    let limit_usize = usize::try_from(limit).unwrap_or(usize::MAX);
    match whole::read(body, limit_usize).await {
        Ok(bytes) => Ok(bytes),
        Err(WholeError::TooLarge) => Err(ApiError::BodyTooLarge { limit }),
        Err(WholeError::Body(e)) => Err(match crate::edge::BodyCut::find(&e) {
            Some(cut) => cut.into(),
            None => ApiError::bad_request(
                "invalid_body",
                format!("could not read the request body: {e}"),
            ),
        }),
    }
}

/// Reads and decodes the client's body in `format`.
async fn read_request(
    snap: &crate::snapshot::Snapshot,
    format: Format,
    fields: &Fields,
    body: Body,
) -> Result<switchyard_core::llm::Request, ApiError> {
    check_json_content_type(fields)?;
    let bytes = read_body(body, snap.settings.max_body_bytes).await?;
    format.decode(&bytes).map_err(|e| ApiError::InvalidRequest {
        param: e.param(),
        message: e.to_string(),
    })
}

async fn run(
    state: &Arc<AppState>,
    format: Format,
    clock: RequestClock,
    fields: &Fields,
    body: Body,
    finisher: &mut Finisher,
    route: &mut Option<HeaderValue>,
) -> Result<Response, ApiError> {
    let snap = state.snapshot();
    let key = auth::request_key(&snap.catalog, fields)?;
    finisher.set_key(&key.id);
    let presented = headers::Presented::scan(fields);
    let lease = lease::presented(&state.runtime, &presented, key, clock.now_ms())?;
    let request = read_request(&snap, format, fields, body).await?;
    finisher.set_request(&request.model, request.stream);
    let estimate = Estimate::at_admission(request.prompt_len, request.max_tokens, request.stream);
    let session = session_key(&snap, presented.session, key, &request);
    let planned = plan::build(
        &state.runtime,
        &snap,
        key,
        (&request, &estimate),
        (state.next_rotation(), session.as_ref(), clock.now_ms()),
        lease.as_ref(),
    )
    .await?;
    let plan::Planned {
        plan,
        pin,
        views,
        read,
        draw,
        turn,
        first,
    } = planned;
    let candidates: Arc<[Candidate]> = plan.candidates.into();
    let decision = Decision {
        strategy: plan.strategy.name(),
        read,
        draw,
        turn,
        candidates: Arc::clone(&candidates),
        views,
        first,
    };
    if presented.trace {
        *route = HeaderValue::try_from(decision.header()).ok();
    }
    if !candidates.is_empty() {
        finisher.route(decision);
    }
    let settle = |ending: affinity::Ending<'_>| {
        if let Some(s) = session {
            let now = clock.now_ms();
            state
                .runtime
                .affinity
                .settle(s, &key.id, pin.as_ref(), ending, now);
        }
    };
    let on_pin = |i: usize| {
        pin.as_ref().is_some_and(|p| {
            candidates
                .get(i)
                .is_some_and(|c| c.connection.id == p.connection)
        })
    };
    if candidates.is_empty() {
        return Err(ApiError::NoExecutableTargets {
            model: request.model.clone(),
            excluded: plan.excluded,
        });
    }
    let protocol = headers::protocol(format, fields);
    // A request with tools is answered by one target whatever the shape: the client
    // runs the tool call, no other model can revise or judge it.
    let shape = match plan.strategy.shape() {
        shape @ (Shape::Single | Shape::Relay) => shape,
        _ if compose::has_tools(&request) => Shape::Single,
        shape => shape,
    };
    let relay = session.filter(|_| shape == Shape::Relay);
    let handed = relay.and_then(|s| shapes::handed_over(state, &snap, s, &candidates, &request));
    let ctx = attempt::Ctx::new(
        (state, clock, &snap),
        key,
        (handed.as_ref().unwrap_or(&request), estimate),
        &protocol,
        (&candidates, plan.policy),
        lease.as_ref(),
    );
    // Read now: a streamed answer takes the finisher with it.
    let relay_id = relay.map(|_| finisher.request_id().to_owned());
    match shape {
        Shape::Single | Shape::Relay => {}
        // Boxed: a shape's future holds several dispatches' and would otherwise grow
        // every request's future, which the server copies whole. Boxed in a statement
        // of its own: a temporary lives to the end of its statement, so in the
        // statement that awaits it the unboxed future would keep a slot in this one.
        Shape::Pipeline => {
            settle(affinity::Ending::Untouched);
            let shaped = Box::pin(shapes::pipeline(state, &ctx, plan.excluded, finisher));
            return shaped.await;
        }
        Shape::Fusion => {
            settle(affinity::Ending::Untouched);
            let shaped = Box::pin(shapes::fusion(state, &ctx, plan.excluded, finisher));
            return shaped.await;
        }
    }
    match dispatch(&ctx, plan.excluded, plan.combo.is_some(), finisher).await {
        Dispatched::Answered { response, served } => {
            match served {
                Some(i) => {
                    let c = &candidates[i];
                    settle(affinity::Ending::Served {
                        connection: &c.connection.id,
                    });
                    if let (Some(combo), true) = (&plan.combo, plan.strategy.needs().last_good) {
                        let now = clock.now_ms();
                        state.runtime.last_good.set(combo, &c.connection.id, now);
                    }
                    if let (Some(s), Some(request_id)) = (relay, relay_id) {
                        let served = shapes::Served {
                            snap: Arc::clone(&snap),
                            key: key.clone(),
                            candidate: c.clone(),
                            protocol: protocol.clone(),
                            policy: plan.policy,
                            request_id,
                        };
                        shapes::relay_if_due(state, s, &request, served);
                    }
                }
                None => settle(affinity::Ending::Untouched),
            }
            Ok(response)
        }
        Dispatched::Ended { result, failed } => {
            settle(affinity::Ending::Failed {
                followed: failed.iter().any(|&i| on_pin(i)),
            });
            result
        }
    }
}

/// How a dispatch over a context's candidates ended.
enum Dispatched {
    /// An attempt's answer goes to the client; `served` names its candidate when the
    /// answer is a success.
    Answered {
        response: Response,
        served: Option<usize>,
    },
    /// No attempt answered: the request's answer or error, and the candidates whose
    /// upstream failed on the way.
    Ended {
        result: Result<Response, ApiError>,
        failed: Vec<usize>,
    },
}

/// Runs the dispatch machine over `ctx`'s candidates until one answers or none can:
/// what one upstream answer of a request is, whatever its shape.
async fn dispatch(
    ctx: &attempt::Ctx<'_>,
    excluded: Vec<switchyard_core::routing::Exclusion>,
    combo: bool,
    finisher: &mut Finisher,
) -> Dispatched {
    let (clock, snap, request) = (ctx.clock, ctx.snap, ctx.request);
    let mut failed = Vec::new();
    let mut dispatch = Dispatch::new(
        ctx.candidates.len(),
        excluded,
        combo,
        ctx.policy.combo_wait,
        snap.settings.resilience.combo_wait,
        clock.now_ms(),
    );
    loop {
        match dispatch.step() {
            Step::Try(t) => {
                // Boxed: the attempt's future is the largest part of the request's, and
                // every request's future is copied whole when the server boxes it; one
                // allocation per attempt costs less than copying ~6 KB more per request.
                // In a statement of its own, for the reason given in `run`.
                let attempt = Box::pin(attempt::run(ctx, t, finisher));
                let tried = attempt.await;
                if matches!(t.slot, Slot::Wait { .. }) {
                    dispatch.waited_for_slot(tried.slot_wait_ms);
                }
                match tried.result {
                    Ok(response) => {
                        let served = response.status().is_success().then_some(t.candidate);
                        return Dispatched::Answered { response, served };
                    }
                    Err(report) => {
                        if matches!(report, Report::Failed { .. } | Report::RetrySame { .. }) {
                            failed.push(t.candidate);
                        }
                        dispatch.report(report);
                    }
                }
            }
            Step::CheckHolds => {
                let now = clock.now_ms();
                dispatch.holds(holds_now(ctx, now), now);
            }
            Step::Sleep { ms } => {
                tracing::info!(
                    request_id = finisher.request_id(),
                    model = %request.model,
                    wait_ms = ms,
                    "Every target of the combo is held back briefly; waiting it out."
                );
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Step::Done(end) => {
                let result = ended(
                    end,
                    &request.model,
                    (ctx.untranslatable.get(), ctx.unpriced.get()),
                    (ctx.lease_refusal.get(), clock.now_ms()),
                );
                return Dispatched::Ended { result, failed };
            }
        }
    }
}

/// The request's session pin key (SPEC R15): its session id, from the R15 headers or
/// body fields, scoped by the client key; `None` when affinity is off or the request
/// names no session.
fn session_key(
    snap: &crate::snapshot::Snapshot,
    header: affinity::SessionHeader<'_>,
    key: &switchyard_core::catalog::ApiKey,
    request: &switchyard_core::llm::Request,
) -> Option<SessionKey> {
    if snap.settings.session_affinity_ttl_ms == 0 {
        return None;
    }
    let (_, id) = header.session_id(&request.body)?;
    Some(SessionKey::of(&key.id, &id))
}

/// The answer or error of a request whose attempts all failed.
fn ended(
    end: End<Box<crate::runtime::quota::QuotaBlock>, Response, attempt::UpstreamFailure>,
    model: &str,
    (untranslatable, unpriced): (Option<&String>, Option<&String>),
    (lease_refusal, now): (Option<&LeaseRefusal>, u64),
) -> Result<Response, ApiError> {
    let model = model.to_owned();
    if let End::AllSkipped { excluded } | End::NoExecutable { excluded } = &end {
        let all = |reason| excluded.iter().all(|e| e.reason == reason);
        // The request's own lease stopped passing its fence while it was dispatched.
        if let (true, Some(r)) = (all(Reason::LeaseFenced), lease_refusal) {
            return Err(ApiError::Lease(*r));
        }
        // Every connection left was leased by another owner meanwhile (SPEC R16).
        let held: Option<Vec<u64>> = excluded
            .iter()
            .map(|e| match e.reason {
                Reason::LeasedByOther { retry_after_ms } => {
                    Some(now.saturating_add(retry_after_ms))
                }
                _ => None,
            })
            .collect();
        if let Some(r) = held.and_then(|h| lease_rules::capacity(&h, false, now)) {
            return Err(ApiError::Lease(r));
        }
        // Nothing could take the request in its format: that is the client's error.
        if let (true, Some(message)) = (all(Reason::Untranslatable), untranslatable) {
            return Err(ApiError::InvalidRequest {
                param: None,
                message: message.clone(),
            });
        }
        // Every candidate is on a `usd` pool without the model's price.
        if let (true, Some(message)) = (all(Reason::Unpriced), unpriced) {
            return Err(ApiError::UnpricedModel(message.clone()));
        }
    }
    Err(match end {
        End::Answer(response) => return Ok(response),
        End::Upstream {
            failure,
            detail,
            soonest_ms,
        } => ApiError::Upstream {
            failure,
            message: detail.message,
            // Without the upstream's own word, say when the soonest candidate is usable
            // again, so SDKs do not retry at once into a cooling connection.
            retry_after: detail
                .retry_after
                .or_else(|| soonest_ms.map(|ms| HeaderValue::from(ms.div_ceil(1000).max(1)))),
        },
        End::RateLimited {
            retry_after_ms,
            reset_at_ms,
        } => ApiError::CombosRateLimited {
            model,
            retry_after_ms,
            reset_at_ms,
        },
        End::AllSkipped { excluded } => ApiError::AllTargetsSkipped { model, excluded },
        End::Quota(block) => ApiError::QuotaExceeded(block),
        End::Queue {
            refusal,
            connection,
        } => ApiError::Queue {
            refusal,
            connection,
        },
        End::CircuitOpen { retry_after_ms } => ApiError::ProviderCircuitOpen {
            provider: model.split('/').next().unwrap_or(&model).to_owned(),
            retry_after_ms,
        },
        End::AllCooling {
            excluded,
            retry_after_ms,
        } => ApiError::AllTargetsCoolingDown {
            model,
            excluded,
            retry_after_ms,
        },
        End::NoExecutable { excluded } => ApiError::NoExecutableTargets { model, excluded },
    })
}

/// What holds each candidate back right now (SPEC R9), or `None` when one of them could
/// be tried at once (nothing to wait for).
fn holds_now(ctx: &attempt::Ctx<'_>, now: u64) -> Option<Vec<Reason>> {
    let (runtime, snap) = (ctx.runtime, ctx.snap);
    let mut holds = Vec::with_capacity(ctx.candidates.len());
    for c in ctx.candidates {
        let attempt = crate::runtime::resilience::Attempt {
            conn: &c.connection,
            model: &c.upstream_model,
            may_defer: false,
            budget_ms: snap.settings.first_byte_timeout_ms,
        };
        match runtime
            .resilience
            .check(attempt, &snap.settings.resilience, now)
        {
            // A probe slot claimed here is given back as the admission drops.
            Ok(_) => return None,
            Err(reason) => holds.push(reason),
        }
    }
    Some(holds)
}
