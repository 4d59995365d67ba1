//! The dashboard's sign-in sessions as the store keeps them (SPEC O6).

/// A live session as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    /// The session's CSRF token.
    pub csrf: String,
    /// The hex SHA-256 of the credential the session was opened with.
    pub credential: String,
    /// The one-time notice left for the session's next page, if any (taken by the read
    /// that asked for it).
    pub notice: Option<String>,
}
