//! The resilience board shared through Redis (SPEC O6, B6): each replica publishes the
//! breakers and connection health its own traffic (or an operator) changed on the
//! channel `<prefix>:board` and keeps the latest state of each in the hashes
//! `<prefix>:board:breakers` and `<prefix>:board:health`, which a replica reads when it
//! (re)connects; every replica takes in the others' changes. What a change means, and
//! which one wins, is the core's (`Breaker::merge_peer`, `Board::merge_peer_health`);
//! this module only carries them.

use crate::redis_counters::{manager, within, RedisStoreError};
use redis::aio::ConnectionManager;
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How long a command's answer may take.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// What a piece of news is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A provider's breaker.
    Breaker,
    /// A connection's (an account's) health.
    Health,
}

impl Kind {
    fn hash(self) -> &'static str {
        match self {
            Self::Breaker => "breakers",
            Self::Health => "health",
        }
    }
}

/// One replica's change of one breaker or connection health, as carried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct News {
    /// The replica that changed it (a random id per process).
    pub from: u64,
    pub kind: Kind,
    /// The provider (a breaker) or the connection (health).
    pub id: String,
    /// The state as JSON, or `None` when it was reset.
    pub state: Option<String>,
}

/// The publishing side, and the names of the channel and hash.
#[derive(Clone)]
pub struct BoardChannel {
    conn: ConnectionManager,
    client: redis::Client,
    channel: String,
    prefix: String,
}

impl std::fmt::Debug for BoardChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoardChannel")
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

impl BoardChannel {
    /// Connects to the Redis at `url`, under `prefix`.
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, RedisStoreError> {
        let (client, conn) = manager(url, RESPONSE_TIMEOUT).await?;
        Ok(Self {
            conn,
            client,
            channel: format!("{prefix}:board"),
            prefix: prefix.to_owned(),
        })
    }

    fn hash(&self, kind: Kind) -> String {
        format!("{}:board:{}", self.prefix, kind.hash())
    }

    /// Publishes `news` and records each entry's latest state, in one round trip.
    pub async fn publish(&self, news: &[News]) -> Result<(), RedisStoreError> {
        let mut pipe = redis::pipe();
        for n in news {
            let hash = self.hash(n.kind);
            match &n.state {
                Some(state) => pipe.hset(&hash, &n.id, state).ignore(),
                None => pipe.hdel(&hash, &n.id).ignore(),
            };
            let message = serde_json::to_string(n)
                .map_err(|e| RedisStoreError::Reply(format!("unencodable news: {e}")))?;
            pipe.publish(&self.channel, message).ignore();
        }
        let mut conn = self.conn.clone();
        let () = pipe.query_async(&mut conn).await?;
        Ok(())
    }

    /// The latest state of every entry of `kind`: `(id, JSON)`.
    pub async fn latest(&self, kind: Kind) -> Result<Vec<(String, String)>, RedisStoreError> {
        let mut conn = self.conn.clone();
        Ok(conn.hgetall(self.hash(kind)).await?)
    }

    /// The news of every replica, from now on; the stream ends when the connection is
    /// lost. Messages that do not parse are skipped.
    pub async fn subscribe(
        &self,
    ) -> Result<impl futures_util::Stream<Item = News> + Send + 'static, RedisStoreError> {
        let mut pubsub = within(RESPONSE_TIMEOUT * 2, self.client.get_async_pubsub()).await??;
        pubsub.subscribe(&self.channel).await?;
        Ok(futures_util::StreamExt::filter_map(
            pubsub.into_on_message(),
            |m| async move {
                let text: String = m.get_payload().ok()?;
                serde_json::from_str(&text).ok()
            },
        ))
    }
}
