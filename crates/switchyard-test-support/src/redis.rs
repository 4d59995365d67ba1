//! The Redis quota store in tests: which server, and a key prefix of each test's own so
//! tests sharing one server never see one another's counters.

/// The test Redis's URL: `SWITCHYARD_TEST_REDIS_URL`, default the local one.
pub fn redis_url() -> String {
    std::env::var("SWITCHYARD_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A gateway's quota counters in Redis: a server and a fresh key prefix.
#[derive(Debug, Clone)]
pub struct RedisQuotaStore {
    url: String,
    prefix: String,
}

impl RedisQuotaStore {
    /// The test Redis ([`redis_url`]) under a fresh prefix.
    pub fn unique() -> Self {
        Self::at(&redis_url())
    }

    /// The Redis at `url` under a fresh prefix.
    pub fn at(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            prefix: format!("sytest-{:016x}", rand::random::<u64>()),
        }
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The environment that selects this store.
    pub fn env(&self) -> [(&'static str, &str); 3] {
        [
            ("QUOTA_STORE_DRIVER", "redis"),
            ("QUOTA_STORE_REDIS_URL", &self.url),
            ("QUOTA_STORE_REDIS_PREFIX", &self.prefix),
        ]
    }
}
