//! This replica's resilience board (breakers, connection health with its terminal
//! states, model locks, provider cooldowns) shared with the others through Redis (SPEC
//! O6, B6), when the quota counters live there (`quotaStore.driver = redis`: one Redis
//! for what replicas share at request speed). The request path never waits on it: every
//! [`SHARE_EVERY`] what this replica's traffic changed is published, and the others'
//! news is taken in as it arrives. Which news wins is the core's: a breaker opened
//! elsewhere leaves its half-open probe to the replica that opened it
//! (`Breaker::merge_peer`); an account's health and a model's lock on it are the same
//! whichever replica met them (the latest news replaces); a provider cooldown holds
//! until the latest end any replica set. While Redis is unreachable each replica keeps
//! its own, with a warning, and catches up from the stored states when it is back.

use crate::state::AppState;
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use switchyard_core::resilience::breaker;
use switchyard_core::resilience::lockout::Lock;
use switchyard_store::redis_board::{BoardChannel, News};
use switchyard_store::redis_counters::RedisStoreError;

use super::resilience::{Shared, Topic};

/// How often this replica's breaker changes are published: the bound, with Redis's own
/// delivery, on how long replicas disagree about a breaker.
pub const SHARE_EVERY: Duration = Duration::from_millis(100);

/// How long to wait before connecting again after Redis was lost.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// How often the stored states of model locks that ran out are removed: locks are keyed
/// by model names clients send, so the stored ones would otherwise only grow.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// Shares breakers until the task is aborted.
pub async fn run(state: Arc<AppState>, url: String, prefix: String) {
    let me: u64 = rand::random();
    state.runtime.resilience.share();
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
    for kind in Topic::ALL {
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
    tracing::info!("Sharing breakers, account health, model locks and provider cooldowns with the other replicas through Redis.");
    let mut tick = tokio::time::interval(SHARE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sweep = tokio::time::interval(SWEEP_EVERY);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let changes = state.runtime.resilience.take_shared();
                if !changes.is_empty() {
                    let out: Vec<News> = changes.iter().map(|c| as_news(me, c)).collect();
                    if let Err(e) = channel.publish(&out).await {
                        // Published at the next connection instead.
                        state.runtime.resilience.requeue_shared(&changes);
                        return Err(e);
                    }
                }
            }
            _ = sweep.tick() => {
                let now = state.clock.now_ms();
                let stored = channel.latest(Topic::Lock).await?;
                let gone: Vec<(String, String)> =
                    stored.into_iter().filter(|(_, json)| ran_out(json, now)).collect();
                channel.forget(Topic::Lock, &gone).await?;
            }
            n = news.next() => match n {
                Some(n) if n.from != me => take_in(state, &n, me),
                Some(_) => {}
                None => return Ok(()),
            },
        }
    }
}

/// This replica's `change`, as news.
fn as_news(me: u64, change: &Shared) -> News {
    News {
        from: me,
        kind: change.topic,
        id: change.id.clone(),
        state: change.state.clone(),
    }
}

/// Whether a stored model lock ran out at `now` (or cannot be read).
fn ran_out(json: &str, now: u64) -> bool {
    serde_json::from_str::<Lock>(json).map_or(true, |l| l.until <= now)
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
    let peer = news.state.as_deref();
    let merged = match news.kind {
        Topic::Breaker => {
            let Some(profile) = profile_of(state, &news.id) else {
                return;
            };
            resilience.merge_peer_breaker(&news.id, peer, &profile, news.from > me)
        }
        Topic::Health => {
            if state.snapshot().catalog.connection(&news.id).is_none() {
                return;
            }
            resilience.merge_peer_health(&news.id, peer)
        }
        // A lock of a connection gone from the configuration never matches an attempt.
        Topic::Lock => resilience.merge_peer_lock(&news.id, peer),
        Topic::ProviderCooldown => {
            if state.snapshot().catalog.provider(&news.id).is_none() {
                return;
            }
            resilience.merge_peer_cooldown(&news.id, peer)
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
