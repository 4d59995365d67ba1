//! The seed corpus of every target: the golden files of the translators
//! (`switchyard-core/tests/golden`), the bodies the end-to-end tests send, and what the
//! mock provider answers them — whole answers, streams and error bodies of each format —
//! each behind the choice bytes that feed it to the target, for every format or pair.

use crate::gateway;
use crate::input::{format_byte, FORMATS};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use switchyard_core::format::Format;
use switchyard_core::settings::DEFS;
use switchyard_test_support::{chat_body, messages_body, responses_body, Config};

/// What the mock answered, by the format it spoke.
#[derive(Debug, Default)]
pub struct Upstream {
    /// Whole answers.
    pub answers: Vec<(Format, Vec<u8>)>,
    pub streams: Vec<(Format, Vec<u8>)>,
    pub errors: Vec<(Format, Vec<u8>)>,
    /// Response heads, as `name: value` lines.
    pub headers: Vec<Vec<u8>>,
}

/// The golden files: request bodies (`.json`) and streams (`.sse`).
fn golden() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../switchyard-core/tests/golden");
    let (mut json, mut sse) = (Vec::new(), Vec::new());
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .expect("the golden files")
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "sse") {
                sse.push(std::fs::read(&path).expect("a golden stream"));
            } else if path.extension().is_some_and(|e| e == "json") {
                json.push(std::fs::read(&path).expect("a golden body"));
            }
        }
    }
    (json, sse)
}

/// The request bodies the end-to-end tests send, for the models the fuzzed gateway
/// serves.
fn e2e_requests() -> Vec<(Format, Value)> {
    let mut out = Vec::new();
    for stream in [false, true] {
        out.push((Format::OpenAiChat, chat_body("fast", stream)));
        out.push((Format::OpenAiChat, chat_body("claude/claude-opus", stream)));
        out.push((
            Format::AnthropicMessages,
            messages_body("claude/claude-opus", stream),
        ));
        out.push((
            Format::AnthropicMessages,
            messages_body("alpha/mock-small", stream),
        ));
        out.push((
            Format::Responses,
            responses_body("codex/gpt-5-codex", stream),
        ));
        out.push((Format::Responses, responses_body("codex-first", stream)));
    }
    out.push((
        Format::OpenAiChat,
        json!({"model": "mixed", "stream": true, "max_tokens": 7,
               "messages": [{"role": "system", "content": "be brief"},
                            {"role": "user", "content": "call a tool"}],
               "tools": [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}]}),
    ));
    out
}

fn json_bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("JSON")
}

/// Asks the mock provider for a whole answer, a stream and an error in each format.
pub fn upstream() -> Upstream {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mock = switchyard_mock::MockServer::start_local()
            .await
            .expect("the mock provider");
        let base = mock.base_url();
        let http = reqwest::Client::new();
        let mut out = Upstream::default();
        let calls = [
            (Format::OpenAiChat, "/v1/chat/completions", chat_body("mock-small", false)),
            (Format::AnthropicMessages, "/v1/messages", messages_body("claude-opus", false)),
            (Format::Responses, "/v1/responses", responses_body("gpt-5-codex", false)),
        ];
        let send = |path: &str, body: &Value| {
            http.post(format!("{base}{path}"))
                .bearer_auth(crate::input::CREDENTIAL)
                .header("x-api-key", crate::input::CREDENTIAL)
                .header("anthropic-version", "2023-06-01")
                .json(body)
                .send()
        };
        for (format, path, body) in &calls {
            for stream in [false, true] {
                let mut body = body.clone();
                body["stream"] = json!(stream);
                let r = send(path, &body).await.expect("the mock answers");
                let head: String = r
                    .headers()
                    .iter()
                    .map(|(n, v)| format!("{n}: {}\n", String::from_utf8_lossy(v.as_bytes())))
                    .collect();
                out.headers.push(head.into_bytes());
                let bytes = r.bytes().await.expect("a body").to_vec();
                if stream {
                    out.streams.push((*format, bytes));
                } else {
                    out.answers.push((*format, bytes));
                }
            }
        }
        let rules = [
            json!({"times": 3, "status": 401}),
            json!({"times": 3, "status": 429, "headers": {"retry-after": "7"}, "quota": null}),
            json!({"times": 3, "chunks": 3, "end_after_chunks": 1, "stream_error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ];
        for rule in rules {
            http.post(format!("{base}/_mock/rules"))
                .json(&rule)
                .send()
                .await
                .expect("the mock takes the rule");
            for (format, path, body) in &calls {
                let mut body = body.clone();
                body["stream"] = json!(rule.get("stream_error").is_some());
                let r = send(path, &body).await.expect("the mock answers");
                let status = r.status().as_u16();
                let bytes = r.bytes().await.expect("a body").to_vec();
                if status >= 400 {
                    out.errors.push((*format, bytes));
                } else {
                    out.streams.push((*format, bytes));
                }
            }
        }
        out.headers.push(
            b"anthropic-ratelimit-unified-status: allowed_warning\nanthropic-ratelimit-unified-5h-utilization: 0.42\nanthropic-ratelimit-unified-7d-utilization: 0.85\nanthropic-ratelimit-unified-reset: 1767229200\nretry-after: Thu, 01 Jan 2026 01:00:00 GMT\nx-ratelimit-reset-requests: 1h2m3.5s\nx-ratelimit-limit-tokens: 100000\nx-ratelimit-remaining-tokens: 25000\nx-ratelimit-reset-tokens: 20ms\n"
                .to_vec(),
        );
        out
    })
}

fn with(choices: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut v = choices.to_vec();
    v.extend_from_slice(payload);
    v
}

/// Every target's seeds, by target name.
pub fn all() -> BTreeMap<&'static str, Vec<Vec<u8>>> {
    let (golden_json, golden_sse) = golden();
    let up = upstream();
    let mut requests: Vec<Vec<u8>> = golden_json;
    requests.extend(e2e_requests().iter().map(|(_, v)| json_bytes(v)));
    let mut streams: Vec<Vec<u8>> = golden_sse;
    streams.extend(up.streams.iter().map(|(_, s)| s.clone()));
    let answers: Vec<Vec<u8>> = up.answers.iter().map(|(_, a)| a.clone()).collect();
    let mut errors: Vec<Vec<u8>> = up.errors.iter().map(|(_, e)| e.clone()).collect();
    errors.push(br#"{"error":{"message":"Incorrect API key provided: fuzz-cred/alpha-0123456789","type":"invalid_request_error","code":"invalid_api_key"}}"#.to_vec());
    errors.push(b"<html><body>502 Bad Gateway</body></html>".to_vec());
    let fs: Vec<u8> = FORMATS.iter().map(|f| format_byte(*f)).collect();
    let pairs: Vec<[u8; 2]> = fs
        .iter()
        .flat_map(|c| fs.iter().map(move |u| [*c, *u]))
        .collect();

    let mut seeds: BTreeMap<&'static str, Vec<Vec<u8>>> = BTreeMap::new();
    let mut add = |target: &'static str, seed: Vec<u8>| seeds.entry(target).or_default().push(seed);
    for body in &requests {
        for f in &fs {
            add("decode", with(&[*f], body));
        }
        for [c, u] in &pairs {
            add("translate_request", with(&[*c, *u, 0], body));
        }
    }
    for body in &streams {
        for f in &fs {
            add("reader", with(&[*f, 0], body));
            add("reader", with(&[*f, 7], body));
        }
        for [c, u] in &pairs {
            add("translate_stream", with(&[*c, *u, 0, 0, 0], body));
            add("translate_stream", with(&[*c, *u, 5, 128, 1], body));
        }
    }
    for body in &answers {
        for [c, u] in &pairs {
            add("translate_response", with(&[*c, *u, 0, 0], body));
        }
    }
    for body in &errors {
        for [c, u] in &pairs {
            add("translate_error", with(&[*c, *u, 1, 0, 0], body));
            add("translate_error", with(&[*c, *u, 29, 200, 2], body));
        }
    }
    for head in &up.headers {
        add("headers", head.clone());
    }
    for (i, def) in DEFS.iter().enumerate() {
        let i = u8::try_from(i).expect("fewer than 256 settings");
        let value = def.default_value().to_json();
        add("settings", with(&[i, 0], value.to_string().as_bytes()));
        add(
            "settings",
            with(&[i, 1], value.to_string().trim_matches('"').as_bytes()),
        );
    }
    let mock = "http://127.0.0.1:9";
    for config in [
        Config::standard(mock),
        Config::anthropic(mock),
        Config::responses(mock),
    ] {
        add("config", config.to_toml().into_bytes());
    }
    add("client_conn", vec![0, 1, 1, 0, 2, 50, 0, 0, 0, 1, 3, 0]);
    add(
        "client_conn",
        vec![0, 0, 0, 10, 0, 10, 0, 10, 1, 1, 2, 1, 3, 1],
    );
    for head in [
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}",
        "POST /v1/messages HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n5;x=y\r\nhello\r\n0\r\nX-T: 1\r\n\r\nGET / HTTP/1.1\r\n",
        "GET http://gw/v1/models HTTP/1.0\nConnection: keep-alive\n\n",
        "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
    ] {
        add("http1", [&[3u8][..], head.as_bytes()].concat());
    }
    for (format, body) in e2e_requests() {
        let route: u8 = match format {
            Format::OpenAiChat => 0,
            Format::AnthropicMessages => 2,
            Format::Responses => 3,
        };
        let auth = if format == Format::AnthropicMessages {
            2
        } else {
            1
        };
        let flags = if format == Format::AnthropicMessages {
            3
        } else {
            1
        };
        add(
            "gateway",
            with(&[route, auth, flags, 0], &json_bytes(&body)),
        );
        add(
            "gateway",
            with(&[route, auth, flags | 4, 9], &json_bytes(&body)),
        );
    }
    for route in 4..gateway::RAW {
        add("gateway", with(&[route, 3, 1, 0], b"{}"));
    }
    add(
        "gateway",
        with(
            &[gateway::RAW, 0, 0, 0],
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: 77\r\n\r\n{}",
                switchyard_test_support::KEY,
                r#"{"model":"fast","stream":false,"messages":[{"role":"user","content":"hi!!"}]}"#
            )
            .as_bytes(),
        ),
    );
    seeds
}
