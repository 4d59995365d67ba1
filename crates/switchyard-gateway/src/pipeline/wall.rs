//! Sending an attempt on a Claude connection that opted into the usage-wall features
//! (SPEC R17): the slow-lane header while the lane is active, and at a wall the same
//! account retried — at once, after a wait, or after the limit-reset calls — as the core
//! machine ([`switchyard_core::resilience::usage_wall`]) decides. What the machine does
//! not intercept goes on to the ordinary answer handling, cooldowns included. Every send
//! keeps the attempt's first-byte deadline, so waiting counts against it.

use super::answer;
use super::attempt::Ctx;
use super::finish::Finisher;
use crate::client::UpstreamBody;
use crate::heads::Reads;
use crate::upstream::{self, Call, Upstream, WallConfig};
use axum::http::{HeaderValue, Method, Response};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use rand::Rng;
use std::time::Duration;
use switchyard_core::catalog::Connection;
use switchyard_core::outcome::AttemptFailure;
use switchyard_core::resilience::usage_wall::{
    self, Decision, ResetAnswer, UnifiedHeaders, UsageCheck, WallRequest,
};
use switchyard_core::resilience::verdict::{self, Answer, Subject};
use tokio::time::Instant;

/// Largest account-endpoint answer read (usage check, reset call).
const MAX_ACCOUNT_BODY_BYTES: usize = 64 * 1024;

/// Sends `body` to `target`, handling the usage wall when the connection opted in. An
/// answer the wall takes back (to retry the same account) is judged like any other and
/// logged as the attempt's, but it cools nothing: the wall's machine decides (SPEC R17).
pub async fn send(
    ctx: &Ctx<'_>,
    target: &Upstream,
    (conn, model): (&Connection, &str),
    body: Bytes,
    deadline: Instant,
    finisher: &mut Finisher,
) -> Result<Response<UpstreamBody>, AttemptFailure> {
    let connection = conn.id.as_str();
    let timeout = ctx.snap.settings.connect_timeout_ms;
    let call = |body: Bytes, extra| Call {
        method: Method::POST,
        url: &target.url,
        body,
        stream: ctx.request.stream,
        protocol: ctx.protocol,
        extra,
        success_reads: None,
    };
    let Some(wall) = &target.wall else {
        // Without the wall, the pipeline alone reads the answer: its saturation headers
        // only when they are recorded.
        let reads: Reads = if ctx.snap.reads_signals(conn.index) {
            answer::success_read_name
        } else {
            answer::content_type_name
        };
        let call = Call {
            success_reads: Some(reads),
            ..call(body, &[])
        };
        return upstream::send(timeout, target, call, deadline).await;
    };
    let slow_header = [(
        usage_wall::SLOW_REQUEST_HEADER,
        HeaderValue::from_static(usage_wall::SLOW_REQUEST_VALUE),
    )];
    let walls = &ctx.runtime.walls;
    let mut request = WallRequest::default();
    loop {
        let slow = walls.send_slow(connection, wall.account, wall.flags, ctx.clock.now_ms());
        let extra: &[_] = if slow { &slow_header } else { &[] };
        let response = upstream::send(timeout, target, call(body.clone(), extra), deadline).await?;
        let pairs = upstream::header_pairs(response.headers(), |n| {
            n.starts_with("anthropic-ratelimit-unified")
        });
        let seen = usage_wall::Response {
            status: response.status().as_u16(),
            headers: UnifiedHeaders::from_pairs(&pairs),
            sent_slow: slow,
        };
        let budget_ms = u64::try_from(
            deadline
                .saturating_duration_since(Instant::now())
                .as_millis(),
        )
        .unwrap_or(u64::MAX);
        let jitter = rand::thread_rng().gen_range(-1.0..=1.0);
        let now = ctx.clock.now_ms();
        let mut decision = walls.with(connection, wall.account, |w| {
            w.on_response(&mut request, wall.flags, seen, now, budget_ms, jitter)
        });
        if !matches!(decision, Decision::Proceed | Decision::Exit(_)) {
            let all = upstream::header_pairs(response.headers(), |_| true);
            let answer = Answer::Status {
                status: response.status().as_u16(),
                headers: &all,
                body: "",
            };
            let subject = Subject {
                family: &conn.family,
                model,
            };
            finisher.attempt_failed(&verdict::judge(&ctx.snap.rules, subject, answer, now));
        }
        let request_id = finisher.request_id();
        loop {
            match decision {
                Decision::Proceed => return Ok(response),
                Decision::Exit(reason) => {
                    tracing::info!(
                        request_id,
                        connection_id = connection,
                        reason = reason.as_str(),
                        "The Claude low-priority lane ended; the answer takes the ordinary path."
                    );
                    return Ok(response);
                }
                Decision::RetrySlowNow => {
                    tracing::info!(
                        request_id,
                        connection_id = connection,
                        "Usage wall: retrying the same account in the low-priority lane."
                    );
                    break;
                }
                Decision::RetryFullSpeed => {
                    tracing::info!(
                        request_id,
                        connection_id = connection,
                        "Usage wall lifted by the limit reset; retrying at full speed."
                    );
                    break;
                }
                Decision::Wait { ms } => {
                    tracing::info!(
                        request_id,
                        connection_id = connection,
                        wait_ms = ms,
                        "Usage wall: waiting (a busy low-priority lane, or another request's limit reset) before retrying the same account."
                    );
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    break;
                }
                Decision::TryLimitReset => {
                    let check = usage_check(timeout, target, wall, deadline).await;
                    let now = ctx.clock.now_ms();
                    decision = walls.with(connection, wall.account, |w| {
                        w.on_usage_check(&mut request, check, now)
                    });
                }
                Decision::CallReset => {
                    let answer = reset_call(timeout, target, wall, deadline).await;
                    tracing::info!(
                        request_id,
                        connection_id = connection,
                        answer = ?answer,
                        "Usage wall: asked for the session-limit reset."
                    );
                    let now = ctx.clock.now_ms();
                    decision = walls.with(connection, wall.account, |w| {
                        w.on_reset_result(&mut request, answer, now)
                    });
                }
            }
        }
    }
}

/// A JSON answer of an account endpoint, or `None` on any failure.
async fn account_call(
    timeout: u64,
    target: &Upstream,
    method: Method,
    url: &crate::client::Target,
    body: Bytes,
    deadline: Instant,
) -> Option<serde_json::Value> {
    let call = Call {
        method,
        url,
        body,
        stream: false,
        protocol: &upstream::ProtocolHeaders::default(),
        extra: &[],
        success_reads: None,
    };
    let response = upstream::send(timeout, target, call, deadline).await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let read = Limited::new(response.into_body(), MAX_ACCOUNT_BODY_BYTES).collect();
    let bytes = tokio::time::timeout_at(deadline, read)
        .await
        .ok()?
        .ok()?
        .to_bytes();
    serde_json::from_slice(&bytes).ok()
}

async fn usage_check(
    timeout: u64,
    target: &Upstream,
    wall: &WallConfig,
    deadline: Instant,
) -> UsageCheck {
    account_call(
        timeout,
        target,
        Method::GET,
        &wall.usage_url,
        Bytes::new(),
        deadline,
    )
    .await
    .map_or(UsageCheck::Failed, |v| usage_wall::parse_usage_check(&v))
}

async fn reset_call(
    timeout: u64,
    target: &Upstream,
    wall: &WallConfig,
    deadline: Instant,
) -> ResetAnswer {
    let Some(url) = &wall.reset_url else {
        return ResetAnswer::Failed;
    };
    let body = Bytes::from(usage_wall::reset_body().to_string());
    account_call(timeout, target, Method::POST, url, body, deadline)
        .await
        .map_or(ResetAnswer::Failed, |v| usage_wall::parse_reset_answer(&v))
}
