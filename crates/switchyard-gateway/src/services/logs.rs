//! The request log as the management API reads it. Only reads the store; nothing here
//! writes it or touches the configuration.

use crate::error::ApiError;
use crate::state::{blocking, AppState};
use switchyard_store::LogRow;

/// Most rows one log query returns.
const MAX_LOG_ROWS: u32 = 1000;

/// Which rows [`recent`] returns.
#[derive(Debug, Default)]
pub struct LogFilter {
    /// Rows to return, newest first (default 100, at most 1000).
    pub limit: Option<u32>,
    /// Only rows of this key.
    pub key_id: Option<String>,
}

/// The newest rows matching `filter`, newest first.
pub async fn recent(state: &AppState, filter: LogFilter) -> Result<Vec<LogRow>, ApiError> {
    let limit = filter.limit.unwrap_or(100).clamp(1, MAX_LOG_ROWS);
    Ok(blocking(&state.store, move |s| {
        s.recent_logs(limit, filter.key_id.as_deref())
    })
    .await?)
}
