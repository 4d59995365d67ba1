//! The request log as the management API and the dashboard read it: a filtered search
//! paged by cursor, and the last hour's per-minute counts for charts (kept in memory by
//! the log writer). Only reads; nothing here writes the log or touches the
//! configuration, and nothing here runs on the request path.

use crate::error::ApiError;
use crate::state::AppState;
use crate::telemetry::series::MINUTE_MS;
use serde::Serialize;
use std::sync::Arc;
use switchyard_model::{LogQuery, LogRow, LogSize, SeriesRow, StatusFilter};
use utoipa::ToSchema;

/// Most rows one log query returns.
const MAX_LOG_ROWS: u32 = 1000;

/// The window of [`last_hour`].
const HOUR_MS: u64 = 60 * 60 * 1000;

/// A search of the log: every present field narrows it (see [`LogQuery`]).
#[derive(Debug, Default, Clone)]
pub struct LogSearch {
    pub key_id: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
    /// `200` (exactly), `2xx`/`4xx`/`5xx` (a class) or `errors` (400 and above).
    pub status: Option<String>,
    pub since_ms: Option<u64>,
    pub until_ms: Option<u64>,
    /// The cursor from the previous page's [`LogPage::next`].
    pub before: Option<i64>,
    /// Rows per page (default 50, at most 1000).
    pub limit: Option<u32>,
}

/// One page of a search, newest first, each row with its id.
#[derive(Debug)]
pub struct LogPage {
    pub rows: Vec<(i64, LogRow)>,
    /// The cursor of the next (older) page, when there is one.
    pub next: Option<i64>,
}

/// The request log's size and the retention that bounds it.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct LogStats {
    #[serde(flatten)]
    pub size: LogSize,
    /// `requestLog.retentionDays`.
    pub retention_days: u64,
    /// `requestLog.maxRows`.
    pub max_rows: u64,
}

/// The request log's size now, with its retention settings.
pub async fn stats(state: &AppState) -> Result<LogStats, ApiError> {
    let size = Arc::clone(&state.logs).size().await?;
    let retention = state.snapshot().settings.request_log;
    Ok(LogStats {
        size,
        retention_days: retention.days,
        max_rows: retention.max_rows,
    })
}

/// A status filter as people write it: `429`, `4xx`, `errors`.
pub fn parse_status(text: &str) -> Result<StatusFilter, ApiError> {
    let t = text.trim().to_ascii_lowercase();
    let invalid = || ApiError::InvalidField {
        field: "status".to_owned(),
        message: format!(
            "status: `{text}` is not a status (100-599), a class (1xx-5xx) or `errors`"
        ),
    };
    if t == "errors" {
        return Ok(StatusFilter::Errors);
    }
    if let Some(class) = t.strip_suffix("xx") {
        return match class.parse::<u16>() {
            Ok(c @ 1..=5) if class.len() == 1 => Ok(StatusFilter::Class(c)),
            _ => Err(invalid()),
        };
    }
    match t.parse::<u16>() {
        Ok(s @ 100..=599) => Ok(StatusFilter::Exact(s)),
        _ => Err(invalid()),
    }
}

/// The page of rows `search` asks for.
pub async fn search(state: &AppState, search: LogSearch) -> Result<LogPage, ApiError> {
    let limit = search.limit.unwrap_or(50).clamp(1, MAX_LOG_ROWS);
    let status = search.status.as_deref().map(parse_status).transpose()?;
    if let (Some(since), Some(until)) = (search.since_ms, search.until_ms) {
        if since > until {
            return Err(ApiError::InvalidField {
                field: "since".to_owned(),
                message: "since: the start of the time range is after its end".to_owned(),
            });
        }
    }
    let query = LogQuery {
        key_id: search.key_id,
        provider: search.provider,
        model: search.model,
        status,
        since_ms: search.since_ms,
        until_ms: search.until_ms,
        before: search.before,
        limit: limit.saturating_add(1),
    };
    let mut rows = Arc::clone(&state.logs).page(query).await?;
    let next = if rows.len() > limit as usize {
        rows.truncate(limit as usize);
        rows.last().map(|(id, _)| *id)
    } else {
        None
    };
    Ok(LogPage { rows, next })
}

/// Requests of the last hour per minute, provider, connection and key, oldest first
/// (minutes start at multiples of a minute). On SQLite (one process) from the counters
/// the log writer keeps in memory: no store read, however many rows the hour holds. On
/// PostgreSQL from the shared request log, so the charts count every replica's
/// requests (those still in a replica's writer show a fraction of a second later).
pub async fn last_hour(state: &AppState) -> Result<Vec<SeriesRow>, ApiError> {
    let since = state.clock.now_ms().saturating_sub(HOUR_MS);
    if state.store.is_shared() {
        return Ok(Arc::clone(&state.logs)
            .series(since - since % MINUTE_MS, MINUTE_MS)
            .await?);
    }
    Ok(state.telemetry.log.series_since(since))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_parse_as_people_write_them() {
        assert_eq!(parse_status("429").unwrap(), StatusFilter::Exact(429));
        assert_eq!(parse_status(" 5XX ").unwrap(), StatusFilter::Class(5));
        assert_eq!(parse_status("errors").unwrap(), StatusFilter::Errors);
        for bad in ["", "42", "600", "6xx", "0xx", "12xx", "x", "-1"] {
            let e = parse_status(bad).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("status: `{bad}` is not a status (100-599), a class (1xx-5xx) or `errors`"),
                "{bad}"
            );
        }
    }
}
