//! A scriptable fake LLM provider.
//!
//! The mock serves the OpenAI chat-completions API (`POST /v1/chat/completions`,
//! streaming and not, `GET /v1/models`) and the Anthropic Messages API
//! (`POST /v1/messages`). Tests, the demo and the benchmarks point Switchyard
//! connections at it and script its behaviour per connection credential and model
//! through a small control API under `/_mock`:
//!
//! | route | effect |
//! |---|---|
//! | `POST /_mock/rules` | add a [`Rule`]; answers `{"id": n}` |
//! | `GET /_mock/rules` | list rules with their remaining `times` |
//! | `DELETE /_mock/rules` | remove every rule |
//! | `GET /_mock/stats` | counters: total, in flight, peak in flight, per credential and model, recent requests with their headers |
//! | `POST /_mock/reset` | remove rules and zero every counter |
//!
//! A rule matches on optional `credential`, `model` and `path`; the first matching rule
//! that still has `times` left decides the response. Rules inject status codes with
//! bodies and headers (`Retry-After`, provider reset and rate-limit headers), latency
//! before the first byte, connection resets before the headers or after N stream chunks,
//! stalls after N chunks, slow streams, and request quotas that answer 429 after N
//! requests within a window. Responses are deterministic: fixed ids, a fixed `created`
//! time, content made of the words of [`openai::WORDS`], and usage computed from the
//! request (see [`openai::prompt_tokens`]).

pub mod anthropic;
pub mod openai;
pub mod rules;
mod server;

pub use rules::{Match, QuotaSpec, ResetPoint, Rule};
pub use server::{router, serve_until, MockServer, MockState};
