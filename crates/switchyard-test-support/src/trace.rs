//! Tracing in tests: the gateway's log lines go to the test's captured output.

use std::sync::Once;
use tracing_subscriber::EnvFilter;

/// Installs a fmt subscriber writing through the test harness's capture, filtered by
/// `RUST_LOG` (default `warn`). Idempotent: only the first call in a process installs
/// it, and a subscriber something else installed before is kept.
pub fn init_tracing() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
        let _already_set = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    });
}
