//! A scriptable fake LLM provider.
//!
//! The mock serves the OpenAI chat-completions API, the OpenAI Responses API (the one
//! Codex speaks) and the Anthropic Messages API.
//! Tests, the demo and the benchmarks point Switchyard connections at it and script its
//! behaviour per connection credential and model through a small control API under
//! `/_mock`. Everything it answers is deterministic: fixed ids, a fixed `created` time,
//! content made of the words of [`openai::WORDS`], usage computed from the request.
//!
//! # Provider routes
//!
//! Every route but `/v1/models` needs a credential (`Authorization: Bearer …` or
//! `x-api-key`), else 401.
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/chat/completions` | a chat completion, streamed (`stream`, with a usage chunk when `stream_options.include_usage`) or not |
//! | `POST /v1/messages` | a message, streamed or not, with the unified rate-limit headers; subject to the usage wall |
//! | `POST /v1/responses` | a Responses API response, streamed (`stream`) or not, see the Responses API |
//! | `POST /responses`, `POST /backend-api/codex/responses` | the same, for a base URL without `/v1` and for a Codex subscription backend's (`…/backend-api/codex`), which, like the real one, refuses `max_output_tokens` and a request that is not a stream (400 `{"detail": …}`) and streams without a `Content-Type` |
//! | `POST /v1/messages/count_tokens` | `{"input_tokens": N}`, N as the message's `input_tokens` |
//! | `GET /v1/models` | `mock-small` and `mock-large` |
//! | `GET /api/oauth/usage?at_wall=1&skip_spend=1` | the credential's limit reset program, see the usage wall |
//! | `POST /api/organizations/{org}/reset_rate_limits` | claims the limit reset, see the usage wall |
//! | `POST /oauth/token`, `POST /v1/oauth/token` | refreshes an OAuth subscription token (the Codex CLI's and Claude Code's token endpoints), see [`oauth`] |
//!
//! # Control routes
//!
//! | route | effect |
//! |---|---|
//! | `POST /_mock/rules` | add a [`Rule`]; answers `{"id": n}` |
//! | `GET /_mock/rules` | list rules with their remaining `times` |
//! | `DELETE /_mock/rules` | remove every rule |
//! | `GET /_mock/stats` | counters of the completion routes: total, in flight, peak in flight, per credential and model, the last 64 requests with all their headers |
//! | `GET /_mock/requests` | the last 100 requests of the provider routes but `/v1/models`, see below |
//! | `POST /_mock/wall` | set a credential's usage [`Wall`] (204), replacing its previous one |
//! | `GET /_mock/wall` | every wall, whether it is up, and what is left of its slow statuses |
//! | `DELETE /_mock/wall` | remove every wall |
//! | `POST /_mock/oauth` | set an OAuth account (204), see [`oauth`]; the completion routes answer 401 for its expired or replaced access tokens |
//! | `GET /_mock/oauth` | every OAuth account: live tokens, expiry, refreshes answered, refreshes with a dead token |
//! | `DELETE /_mock/oauth` | remove every OAuth account |
//! | `POST /_mock/clock` | fix the mock's wall clock: `{"now": 1800000000}` (Unix seconds); `{"now": null}` gives it back to the system |
//! | `POST /_mock/close_connections` | close every client connection once its requests are answered, as a provider closes idle keep-alive connections; answers 204 when only its own is left (504 after 5 s) |
//! | `POST /_mock/reset` | remove rules, walls and OAuth accounts, forget the requests, zero every counter, give the clock back to the system |
//!
//! # Rules
//!
//! A rule matches on optional `credential`, `model` and `path`
//! (`{"match": {"credential": "sk-a", "model": "mock-small", "path": "/v1/messages"}}`;
//! the Responses routes are the paths `/v1/responses` and `/responses`); the first
//! matching rule that still has `times` left decides the response of the completion
//! routes (chat, Messages, Responses). Its fields, each with an example:
//!
//! | field | example | effect |
//! |---|---|---|
//! | `times` | `{"times": 2, "status": 503}` | apply to this many matching requests, then expire (absent: forever) |
//! | `latency_ms` | `{"latency_ms": 250}` | wait before the response headers |
//! | `status` | `{"status": 429}` | answer this status with the API's error body |
//! | `body` | `{"status": 400, "body": {"error": {"message": "bad"}}}` | the body for `status`: JSON, or a string sent as is |
//! | `headers` | `{"headers": {"retry-after": "9"}}` | extra response headers, on errors and successes; they override the mock's own |
//! | `reset` | `{"reset": "before_headers"}` | reset the TCP connection (zero linger: an RST, not a FIN) before any byte; `"after_headers"`: send a completion's status line and headers, then reset before any body byte |
//! | `stall` | `{"stall": "after_headers"}` | send a completion's status line and headers (with the answer's `content-length` when not streamed), then nothing, holding the connection open |
//! | `trickle_bytes` | `{"trickle_bytes": 8, "trickle_interval_ms": 20}` | send a completion's body — the whole answer when not streamed, each stream frame when streamed — this many bytes at a time |
//! | `trickle_interval_ms` | `{"trickle_bytes": 8, "trickle_interval_ms": 20}` | the gap before each write of `trickle_bytes` (default 0) |
//! | `chunks` | `{"chunks": 200}` | words of the canned answer (default 5); also keeps the answer whole whatever the request's `max_tokens` |
//! | `chunk_interval_ms` | `{"chunk_interval_ms": 10}` | delay before each stream frame |
//! | `stall_after_chunks` | `{"stall_after_chunks": 2}` | stop sending after this many frames (0: after the stream's head, before any delta), holding the connection open |
//! | `heartbeat_ms` | `{"stall_after_chunks": 0, "heartbeat_ms": 15000}` | while stalled, send a heartbeat this often: Anthropic `event: ping`, a `: keep-alive` comment on chat and Responses |
//! | `reset_after_chunks` | `{"reset_after_chunks": 2, "chunk_interval_ms": 5}` | reset the connection after this many frames |
//! | `end_after_chunks` | `{"end_after_chunks": 2}` | end the stream cleanly after this many frames, without its tail (no finish reason, no usage, no `[DONE]`/`message_stop`/`response.completed`) |
//! | `stream_error` | `{"stream_error": {"type": "overloaded_error", "message": "busy"}}` | end the stream with the API's error event (chat `data: {"error":…}`, Messages `event: error`, Responses `response.failed` with `type` as its `code`) instead of its tail; after `end_after_chunks` frames when that is set |
//! | `quota` | `{"quota": {"limit": 3, "window_ms": 60000}}` | the first `limit` requests of each window pass, the rest get 429 with `Retry-After`; both carry `x-ratelimit-{limit,remaining,reset}-requests` |
//! | `cache_read_input_tokens` | `{"cache_read_input_tokens": 7}` | Anthropic `usage.cache_read_input_tokens` (default 0) |
//! | `cache_creation_input_tokens` | `{"cache_creation_input_tokens": 3}` | Anthropic `usage.cache_creation_input_tokens` (default 0) |
//!
//! A stream frame is one delta (a text, thinking or reasoning piece, or a tool-input
//! fragment) with the block boundaries before it: on the Responses stream, one
//! `response.output_text.delta`, `response.reasoning_summary_text.delta` or
//! `response.function_call_arguments.delta` with the item and part events before it.
//!
//! # What the request decides
//!
//! See [`answer`] for the exact rules; in short, on every API:
//!
//! - **Tool call.** With `tools` declared and a marker in a text of the last user
//!   message, e.g. `{"role": "user", "content": "Weather? [[tool:get_weather {\"city\": \"Paris\"}]]"}`,
//!   the answer is the text `Calling get_weather.` and a call of `get_weather` with input
//!   `{"city":"Paris"}`: an Anthropic `tool_use` block (id `toolu_mock_1`, stop reason
//!   `tool_use`; streamed as a `tool_use` block start with input `{}` and three
//!   `input_json_delta` fragments), chat `tool_calls` (id `call_mock_1`, the input as
//!   the `arguments` string, finish reason `tool_calls`; streamed as an announcement with
//!   empty `arguments`, then three `arguments` fragments), or a Responses
//!   `function_call` item (see the Responses API).
//! - **Tool result.** A `tool_result` block in the last Anthropic user message
//!   (`{"type": "tool_result", "tool_use_id": "toolu_mock_1", "content": "sunny"}`), a
//!   last chat message `{"role": "tool", "content": "sunny"}` or a last Responses input
//!   item `{"type": "function_call_output", "call_id": "call_mock_1", "output": "sunny"}`
//!   is answered `tool said: sunny`.
//! - **Thinking.** Anthropic `{"thinking": {"type": "enabled", "budget_tokens": 1024}}`
//!   (or `"adaptive"`) puts `{"type": "thinking", "thinking": "Let me think.",
//!   "signature": "sig_mock"}` first (streamed as `thinking_delta`s then a
//!   `signature_delta`); chat `{"reasoning_effort": "low"}` (any value but `none`) adds
//!   `reasoning_content: "Let me think."` (streamed before the content) and
//!   `usage.completion_tokens_details.reasoning_tokens`; Responses
//!   `{"reasoning": {"effort": "low"}}` (any `effort` but `none`) adds a reasoning item.
//! - **Stop sequences.** `{"stop_sequences": ["mock"]}` (Anthropic) or `{"stop": "mock"}`
//!   / `{"stop": ["mock"]}` (chat) found in the answer cut it before the match: stop
//!   reason `stop_sequence` with `stop_sequence: "mock"`, or finish reason `stop`.
//! - **max_tokens.** `{"max_tokens": 3}` (chat: `max_completion_tokens`, else
//!   `max_tokens`; Responses: `max_output_tokens`) below the answer's output tokens cuts
//!   it to fit: `max_tokens` / `length` / an `incomplete` response. A rule's `chunks`
//!   turns this off.
//! - **Usage.** Prompt tokens are [`openai::prompt_tokens`] (Anthropic `input_tokens`,
//!   also what `count_tokens` answers; Responses: [`responses::prompt_tokens`]); output
//!   tokens are one per piece of text and thinking plus the tool input's characters / 4. Anthropic usage always carries
//!   `cache_creation_input_tokens` and `cache_read_input_tokens`.
//!
//! Anthropic streams send `ping` after `message_start`, and every event has its
//! `event:` line.
//!
//! # The Responses API
//!
//! `POST /v1/responses` and `POST /responses` read a Responses body:
//!
//! ```json
//! {"model": "gpt-5-codex", "instructions": "You are Codex.", "stream": true,
//!  "input": [
//!    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather? [[tool:get_weather {\"city\": \"Paris\"}]]"}]},
//!    {"type": "function_call", "call_id": "call_mock_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
//!    {"type": "function_call_output", "call_id": "call_mock_1", "output": "sunny"}],
//!  "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
//!            {"type": "namespace", "name": "mcp__docs", "description": "Docs.", "tools": [{"type": "function", "name": "search"}]},
//!            {"type": "web_search"}],
//!  "reasoning": {"effort": "medium", "summary": "auto"}, "max_output_tokens": 1024}
//! ```
//!
//! `input` is a string (one user message) or items. Prompt tokens count `instructions`
//! and the input's texts (string contents, `input_text` and `output_text` parts,
//! `function_call_output` outputs). The marker is read from the texts of the last
//! `message` item with role `user` (an item without `type` is a message); `function`
//! tools, flat or nested in a `namespace`, are the declared tools, built-in ones such
//! as `web_search` are ignored. A last `function_call_output` is answered
//! `tool said: <output>`. Other members (`store`, `include`, `prompt_cache_key`,
//! `tool_choice`, …) are ignored. The answer to `{"model": "gpt-5-codex",
//! "reasoning": {"effort": "low"}, "tools": [get_weather], "input": [{"role": "user",
//! "content": "[[tool:get_weather {\"city\":\"Paris\"}]]"}]}`:
//!
//! ```json
//! {"id": "resp_mock", "object": "response", "created_at": 1700000000, "status": "completed",
//!  "model": "gpt-5-codex",
//!  "output": [
//!    {"id": "rs_mock", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Let me think."}]},
//!    {"id": "msg_mock", "type": "message", "status": "completed", "role": "assistant",
//!     "content": [{"type": "output_text", "text": "Calling get_weather.", "annotations": []}]},
//!    {"id": "fc_mock_1", "type": "function_call", "status": "completed", "call_id": "call_mock_1",
//!     "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}],
//!  "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
//!            "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 3}, "total_tokens": 19},
//!  "incomplete_details": null, "error": null,
//!  "parallel_tool_calls": true, "tool_choice": "auto", "tools": []}
//! ```
//!
//! The message always comes (its text may be empty); the reasoning item only with an
//! `effort`, the function call only with a marker. A `max_output_tokens` cut answers
//! `"status": "incomplete"`, `"incomplete_details": {"reason": "max_output_tokens"}`
//! and a message with `"status": "incomplete"`.
//!
//! Streamed, every event has its `event:` line and its data starts with `type` and
//! `sequence_number` (from 0):
//!
//! ```text
//! event: response.created
//! data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_mock",…,"status":"in_progress",…,"output":[],"usage":null,…}}
//! ```
//!
//! The events: `response.created`, `response.in_progress` (both with the response in
//! progress: no output, null usage); for the reasoning item (`output_index` 0)
//! `response.output_item.added` (`summary: []`),
//! `response.reasoning_summary_part.added`, a `response.reasoning_summary_text.delta`
//! per piece of `Let me think.`, `response.reasoning_summary_text.done`,
//! `response.reasoning_summary_part.done`, `response.output_item.done`; for the
//! message `response.output_item.added` (`status: "in_progress"`, no content),
//! `response.content_part.added` (an empty `output_text`), a
//! `response.output_text.delta` per piece (`{"item_id": "msg_mock", "output_index": 0,
//! "content_index": 0, "delta": "Hello", "logprobs": []}`), `response.output_text.done`,
//! `response.content_part.done`, `response.output_item.done`; for the function call
//! (item id `fc_mock_1`) `response.output_item.added` (empty `arguments`, `status:
//! "in_progress"`), three `response.function_call_arguments.delta` fragments,
//! `response.function_call_arguments.done`, `response.output_item.done`; last
//! `response.completed` (or `response.incomplete`) with the whole response, as answered
//! without `stream`.
//!
//! Errors (401, a rule's `status`, a `quota`'s 429) have the OpenAI error body. The
//! Codex rate-limit headers come from a rule's `headers`, on a 429 or on a success:
//!
//! ```json
//! {"match": {"credential": "codex-1", "path": "/responses"}, "status": 429,
//!  "headers": {"x-codex-primary-used-percent": "100", "x-codex-primary-window-minutes": "300",
//!              "x-codex-primary-reset-after-seconds": "1200",
//!              "x-codex-secondary-used-percent": "42", "x-codex-secondary-window-minutes": "10080",
//!              "x-codex-secondary-reset-after-seconds": "86400"}}
//! ```
//!
//! # Unified rate-limit headers
//!
//! Every `/v1/messages` answer carries `anthropic-ratelimit-unified-status` (`allowed`),
//! `-5h-utilization` and `-7d-utilization` (`0.0`), `-5h-reset` and `-7d-reset` (the
//! next multiple of five hours and of seven days after the mock's clock, Unix seconds)
//! and `-reset` (the 5-hour one). A rule's `headers` set other values:
//!
//! ```json
//! {"match": {"credential": "oat-1", "path": "/v1/messages"},
//!  "headers": {"anthropic-ratelimit-unified-5h-utilization": "0.42",
//!              "anthropic-ratelimit-unified-7d-utilization": "0.85",
//!              "anthropic-ratelimit-unified-reset": "1800000300"}}
//! ```
//!
//! # The usage wall (SPEC R17)
//!
//! `POST /_mock/wall` puts a credential behind the 5-hour usage wall until `reset_at`
//! (Unix seconds, by the mock's clock) or until a limit reset lifts it:
//!
//! ```json
//! {"credential": "oat-1", "reset_at": 1800003600, "offer": true,
//!  "slow": {"statuses": ["slot_busy", "slot_busy", "active"], "retry_after_s": 7, "max_wait_s": 60},
//!  "overage_in_use": false,
//!  "reset_program": {"arm": "reset", "available": true, "result": "reset", "next_available_at": 1800604800}}
//! ```
//!
//! Only `credential` and `reset_at` are required; the others default to the values
//! above, except `slow`, which defaults to `{"statuses": ["active"]}` (no wait headers),
//! and `reset_program`, absent by default (when given, its members default to the values
//! above: `{}` is a program that resets). While the wall is up, `/v1/messages` answers
//! (before any rule is consulted) with `anthropic-ratelimit-unified-status: rejected`,
//! `-5h-utilization: 1.0`, `-5h-reset` and `-reset` at `reset_at`, and, when
//! `overage_in_use`, `anthropic-ratelimit-unified-overage-in-use: true`:
//!
//! - without `anthropic-usage-limit: slow`: 429, an Anthropic `rate_limit_error`, and
//!   `anthropic-ratelimit-unified-slow-offer: treatment` unless `offer` is false;
//! - with it, the next of `slow.statuses` (one per request, the last repeating):
//!   `active` or `not_needed` answer normally (then rules apply) with
//!   `anthropic-ratelimit-unified-slow-status` set to it; `slot_busy` is a 429 with that
//!   slow status and `anthropic-ratelimit-unified-slow-retry-after` /
//!   `-slow-max-wait` from `retry_after_s` / `max_wait_s` when set; `overloaded` is a
//!   529 `overloaded_error` with the same wait headers and no slow status; any other
//!   value (`weekly_limit`, `budget_exhausted`, `off`, `ineligible`, …) is a 429 with
//!   that slow status.
//!
//! A slow request to a credential without a wall is answered normally with
//! `anthropic-ratelimit-unified-slow-status: not_needed`.
//!
//! The limit reset: `GET /api/oauth/usage` answers the credential's program,
//! `{"juniper_tide": {"arm": "reset", "available": true, "next_available_at": 1800604800}}`
//! (`{"juniper_tide": {"arm": "none", "available": false}}` without one), and
//! `POST /api/organizations/{org}/reset_rate_limits` with `{"program": "juniper_tide"}`
//! answers `{"result": "reset", "next_available_at": 1800604800}` (the scripted
//! `result`; `next_available_at` when set; `{"result": "not_offered"}` without a
//! program; 400 for another program). A `reset` lifts the wall, and from then on the
//! program is unavailable and answers `already_used`.
//!
//! # Received requests
//!
//! `GET /_mock/requests` lists, oldest first, what the provider routes received, so a
//! test can assert what a gateway forwarded or translated:
//!
//! ```json
//! {"requests": [
//!   {"method": "POST", "path": "/v1/messages", "query": "beta=true", "credential": "oat-1",
//!    "headers": {"anthropic-version": "2023-06-01", "anthropic-beta": "b1,b2", "anthropic-usage-limit": "slow"},
//!    "x_api_key": false, "authorization": "Bearer",
//!    "body": {"model": "claude-x", "messages": [{"role": "user", "content": "hi"}]}}
//! ]}
//! ```
//!
//! `headers` holds those three when sent; `x_api_key` says whether `x-api-key` was
//! sent; `authorization` is the `Authorization` scheme (null without the header);
//! `body` is null when the body is absent or not JSON.

pub mod answer;
pub mod anthropic;
mod journal;
pub mod oauth;
pub mod openai;
pub mod responses;
pub mod rules;
mod server;
pub mod wall;

pub use rules::{Match, QuotaSpec, ResetPoint, Rule, StallPoint, StreamErrorSpec};
pub use server::{router, serve_until, MockServer, MockState};
pub use wall::{ResetProgram, SlowLane, Wall};
