//! The streaming response body, as a stack of small wrappers around the upstream's body,
//! innermost first:
//!
//! 1. [`deadline::DeadlineBody`] — the idle timeout and the execution bound (SPEC R10);
//!    ends the stream with a typed [`deadline::Cut`] when one passes or the upstream
//!    breaks. A stream watchdog goes beside it, with the same error type.
//! 2. [`scrub::ScrubBody`] — redacts the upstream's error events (SPEC G5), so nothing
//!    above it sees a credential an upstream echoed; holds an event until it is whole.
//! 3. [`translate::TranslateBody`] — only when client and upstream formats differ:
//!    turns upstream frames into the client's as each completes.
//! 4. [`metered::MeteredBody`] — relays frames to the client as they arrive, reads them
//!    for usage and completeness, grows the quota reservation, ends a cut stream with
//!    an error frame in the client's format, and finishes the request exactly once.
//!
//! The two rewriting layers share their body in [`rewrite::RewriteBody`]. Each wrapper
//! does one thing and is tested on its own; none buffers beyond the event in
//! hand, and dropping the stack drops the upstream response, which cancels the upstream
//! request.

pub mod deadline;
pub mod metered;
pub mod rewrite;
pub mod scrub;
pub mod translate;
