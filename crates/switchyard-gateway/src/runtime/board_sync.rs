//! This replica's breakers and connection health shared with the others through Redis
//! (SPEC O6, B6), when the
//! quota counters live there (`quotaStore.driver = redis`: one Redis for what replicas
//! share at request speed). The request path never waits on it: every
//! [`SHARE_EVERY`] what this replica's traffic changed is published, and the
//! others' news is taken in as it arrives (which news wins is the core's
//! `Breaker::merge_peer`; a breaker opened elsewhere leaves its half-open probe to the
//! replica that opened it; an account's health is the same whichever replica met it).
//! While Redis is unreachable each replica keeps its own, with a warning, and catches up
//! from the stored states when it is back.

use crate::state::AppState;
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use switchyard_core::resilience::breaker;
use switchyard_store::redis_board::{BoardChannel, Kind, News};
use switchyard_store::redis_counters::RedisStoreError;

/// How often this replica's breaker changes are published: the bound, with Redis's own
/// delivery, on how long replicas disagree about a breaker.
pub const SHARE_EVERY: Duration = Duration::from_millis(100);

/// How long to wait before connecting again after Redis was lost.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// Shares breakers until the task is aborted.
pub async fn run(state: Arc<AppState>, url: String, prefix: String) {
    let me: u64 = rand::random();
    let mut failures: u64 = 0;
    loop {
        match session(&state, &url, &prefix, me).await {
            Ok(()) => {
                failures = 0;
                tracing::warn!("Lost Redis, which shares breakers between replicas; each keeps its own until it is back.");
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                if failures.is_power_of_two() {
                    tracing::warn!(error = %e, attempts = failures, "Cannot share breakers through Redis; this replica keeps its own. Retrying.");
                }
            }
        }
        tokio::time::sleep(RECONNECT_AFTER).await;
    }
}

/// One connection's life: catch up, then publish and take in until it is lost.
async fn session(
    state: &AppState,
    url: &str,
    prefix: &str,
    me: u64,
) -> Result<(), RedisStoreError> {
    let channel = BoardChannel::connect(url, prefix).await?;
    let news = channel.subscribe().await?;
    let mut news = std::pin::pin!(news);
    for kind in [Kind::Breaker, Kind::Health] {
        for (id, json) in channel.latest(kind).await? {
            let news = News {
                from: u64::MAX,
                kind,
                id,
                state: Some(json),
            };
            take_in(state, &news, me);
        }
    }
    tracing::info!("Sharing breakers with the other replicas through Redis.");
    let mut tick = tokio::time::interval(SHARE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let (breakers, health) = state.runtime.resilience.take_shared();
                let out: Vec<News> = outgoing(me, Kind::Breaker, &breakers)
                    .chain(outgoing(me, Kind::Health, &health))
                    .collect();
                if !out.is_empty() {
                    if let Err(e) = channel.publish(&out).await {
                        // Published at the next connection instead.
                        state.runtime.resilience.requeue_shared(&breakers, &health);
                        return Err(e);
                    }
                }
            }
            n = news.next() => match n {
                Some(n) if n.from != me => take_in(state, &n, me),
                Some(_) => {}
                None => return Ok(()),
            },
        }
    }
}

/// This replica's `changes` of `kind`, as news.
fn outgoing<'a>(
    me: u64,
    kind: Kind,
    changes: &'a [(String, Option<String>)],
) -> impl Iterator<Item = News> + 'a {
    changes.iter().map(move |(id, state)| News {
        from: me,
        kind,
        id: id.clone(),
        state: state.clone(),
    })
}

/// The breaker profile of `provider`: its first connection's auth class.
fn profile_of(state: &AppState, provider: &str) -> Option<breaker::Profile> {
    let snap = state.snapshot();
    let class = snap
        .catalog
        .connections()
        .iter()
        .find(|c| c.provider == provider)?
        .auth_class;
    Some(snap.settings.resilience.breaker.get(class))
}

fn take_in(state: &AppState, news: &News, me: u64) {
    let resilience = &state.runtime.resilience;
    let merged = match news.kind {
        Kind::Breaker => {
            let Some(profile) = profile_of(state, &news.id) else {
                return;
            };
            resilience.merge_peer_breaker(&news.id, news.state.as_deref(), &profile, news.from > me)
        }
        Kind::Health => {
            if state.snapshot().catalog.connection(&news.id).is_none() {
                return;
            }
            resilience.merge_peer_health(&news.id, news.state.as_deref())
        }
    };
    match merged {
        Ok(true) => {
            tracing::info!(id = %news.id, kind = ?news.kind, "Took in another replica's news.")
        }
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(id = %news.id, kind = ?news.kind, error = %e, "Ignoring unreadable news from another replica.")
        }
    }
}
