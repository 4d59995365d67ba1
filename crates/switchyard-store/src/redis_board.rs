//! The resilience board shared through Redis (SPEC O6, B6): each replica publishes the
//! breakers, connection health, model locks and provider cooldowns its own traffic (or
//! an operator) changed on the channel `<prefix>:board` and keeps the latest state of
//! each in one hash per topic (`<prefix>:board:breakers`, `…:health`, `…:locks`,
//! `…:provider_cooldowns`), which a replica reads when it (re)connects; every replica
//! takes in the others' changes. What a change means, and which one wins, is the core's
//! (`Breaker::merge_peer`, `Board::merge_peer_*`); this module only carries them.

use crate::redis_counters::{manager, within, RedisStoreError};
use redis::aio::ConnectionManager;
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use switchyard_core::resilience::board::Topic;

/// How long a command's answer may take.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Deletes each `(field, value)` of the hash `KEYS[1]` given in `ARGV` whose value is
/// still that value; answers how many it deleted.
const FORGET_IF_SAME: &str = r"
local n = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    n = n + redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return n
";

/// The hash holding the latest state of `topic`'s entries, under the board's name.
fn hash_name(topic: Topic) -> &'static str {
    match topic {
        Topic::Breaker => "breakers",
        Topic::Health => "health",
        Topic::Lock => "locks",
        Topic::ProviderCooldown => "provider_cooldowns",
    }
}

/// One replica's change of one entry of the board, as carried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct News {
    /// The replica that changed it (a random id per process).
    pub from: u64,
    pub kind: Topic,
    /// The entry (see [`Topic`]).
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

    fn hash(&self, topic: Topic) -> String {
        format!("{}:board:{}", self.prefix, hash_name(topic))
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

    /// The latest state of every entry of `topic`: `(id, JSON)`.
    pub async fn latest(&self, topic: Topic) -> Result<Vec<(String, String)>, RedisStoreError> {
        let mut conn = self.conn.clone();
        Ok(conn.hgetall(self.hash(topic)).await?)
    }

    /// Removes entries of `topic` from the stored states, each only if its state is still
    /// the one given (another replica may have written a newer one since it was read):
    /// `(id, JSON)`. Returns how many went.
    pub async fn forget(
        &self,
        topic: Topic,
        entries: &[(String, String)],
    ) -> Result<u64, RedisStoreError> {
        if entries.is_empty() {
            return Ok(0);
        }
        let script = redis::Script::new(FORGET_IF_SAME);
        let mut call = script.key(self.hash(topic));
        for (id, state) in entries {
            call.arg(id).arg(state);
        }
        let mut conn = self.conn.clone();
        Ok(call.invoke_async(&mut conn).await?)
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
