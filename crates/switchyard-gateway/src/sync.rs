//! The one way the shell takes a std mutex.
//!
//! A guard it returns is for a short update of plain data and must be dropped before the
//! next `.await`.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, recovering from poisoning: the critical sections in this crate are short
/// updates of plain data that leave it consistent even if a panic unwound through them,
/// so the data is still usable and a panicked request must not take every later request
/// down with it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
