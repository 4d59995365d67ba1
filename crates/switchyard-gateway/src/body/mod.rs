//! The streaming response body, as a stack of small wrappers around the upstream's body,
//! innermost first:
//!
//! 1. [`deadline::DeadlineBody`] — the byte-level idle timeout, the backstop; ends the
//!    stream with a typed [`deadline::Cut`] when it passes or the upstream breaks.
//! 2. [`scrub::ScrubBody`] — redacts the upstream's error events (SPEC G5), so nothing
//!    above it sees a credential an upstream echoed; holds an event until it is whole.
//! 3. [`translate::TranslateBody`] — only when client and upstream formats differ:
//!    turns upstream frames into the client's as each completes.
//! 4. [`watch::Watched`] — reads each chunk once for its typed progress and runs the
//!    attempt's stream watchdog (SPEC R11, R12, and R10's total bound) over it. Before
//!    the attempt commits, [`watch::judge`] reads it until the first output, holding
//!    back what comes before, so a stream that fails before answering fails over with
//!    nothing sent.
//! 5. [`metered::MeteredBody`] — once committed: relays frames to the client as they
//!    arrive, grows the quota reservation, ends a cut stream with its format's terminal
//!    frames, reports the upstream's failures to resilience, and finishes the request
//!    exactly once.
//!
//! A whole (not streamed) body is read with [`whole::read`].
//!
//! The two rewriting layers share their body in [`rewrite::RewriteBody`]. Each wrapper
//! does one thing and is tested on its own; none buffers beyond the event in hand (the
//! judge holds what precedes the first output, bounded), and dropping the stack drops
//! the upstream response, which cancels the upstream request.

pub mod deadline;
pub mod metered;
pub mod rewrite;
pub mod scrub;
pub mod translate;
pub mod watch;
pub mod whole;
