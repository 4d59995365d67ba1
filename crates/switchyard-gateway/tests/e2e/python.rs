//! The official `openai` Python package talks to the gateway and parses its answers.
//!
//! The interpreter comes from `SWITCHYARD_TEST_PYTHON`, or `.venv/bin/python` at the
//! repository root (both set up by `scripts/test.sh`).

use std::path::PathBuf;
use switchyard_test_support::*;

/// The interpreter of the Python test clients (and schemathesis).
pub(crate) fn python() -> PathBuf {
    if let Ok(p) = std::env::var("SWITCHYARD_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = root.join(".venv/bin/python");
    assert!(
        venv.exists(),
        "the Python test clients are needed: run scripts/test.sh (it creates .venv), or set SWITCHYARD_TEST_PYTHON"
    );
    venv
}

/// Runs `tests/openai_client.py` with chat route `route`: what it printed.
async fn openai_client(h: &Harness, route: &str) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/openai_client.py");
    let out = tokio::process::Command::new(python())
        .arg(script)
        .arg(format!("{}/v1", h.base))
        .arg(KEY)
        .arg(route)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    stdout
}

/// What the script prints when every check passes, the answer's usage counting
/// `prompt` tokens in.
fn openai_checks(prompt: u64) -> String {
    format!("non-streaming: Hello from the Switchyard mock | tokens {prompt}+5\nstreaming: Hello from the Switchyard mock | chunks 7\nretrieve: alpha/mock-small owned by alpha\nretrieve unknown: 404 model_not_found\n")
}

#[tokio::test]
async fn the_official_openai_python_client_parses_streaming_and_non_streaming_answers() {
    let h = Harness::start().await;
    assert_eq!(openai_client(&h, "fast").await, openai_checks(5));
}

/// The dispatch shapes (SPEC R19) answer once, as any route does: the client cannot
/// tell a pipeline's or a fusion's answer from one call's.
#[tokio::test]
async fn the_official_openai_python_client_parses_the_answers_of_the_dispatch_shapes() {
    let targets = ["alpha/mock-small", "beta/mock-small"];
    let h = Harness::start_with(
        |mock| {
            Config::standard(mock)
                .combo(Combo::of("chain", "pipeline", targets))
                .combo(Combo::of("panel", "fusion", targets))
        },
        &[],
    )
    .await;
    // The usage is the last call's, whose prompt holds what was handed to it: the
    // first step's answer and the revise prompt, the panel's answers in the judge's
    // brief (the mock counts a prompt's characters, a token per four, rounded up).
    let (hello, answer) = ("Hello there, mock!", "Hello from the Switchyard mock");
    let tokens = |texts: &[&str]| {
        let chars: usize = texts.iter().map(|t| t.chars().count()).sum();
        u64::try_from(chars.div_ceil(4)).unwrap()
    };
    let revise = switchyard_core::routing::shape::REVISE_PROMPT;
    let judge = switchyard_core::routing::shape::judge_prompt(&[answer.into(), answer.into()]);
    for (route, prompt) in [
        ("chain", tokens(&[hello, answer, revise])),
        ("panel", tokens(&[hello, &judge])),
    ] {
        assert_eq!(
            openai_client(&h, route).await,
            openai_checks(prompt),
            "{route}"
        );
    }
}

/// Runs `tests/anthropic_client.py` on `model`, with `limited` scripted to answer 429.
async fn anthropic_client(h: &Harness, model: &str, limited: &str) -> String {
    h.rule(
        serde_json::json!({"match": {"model": limited.split_once('/').unwrap().1},
        "status": 429, "headers": {"retry-after": "30"}}),
    )
    .await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/anthropic_client.py");
    let out = tokio::process::Command::new(python())
        .arg(script)
        .arg(&h.base)
        .arg(KEY)
        .arg(model)
        .arg(limited)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    stdout
}

/// What the script prints when every check passes, with the input tokens
/// `count_tokens` answered.
fn anthropic_checks(counted: u64) -> String {
    format!(
        "create: Hello from the Switchyard mock | end_turn | tokens 5+5\n\
         stream: Hello from the Switchyard mock | end_turn | 5 text events | last message_stop\n\
         tool call: get_weather {{'city': 'Paris'}} | tool_use\n\
         tool result: tool said: sunny | end_turn\n\
         count_tokens: {counted}\n\
         models: 7, first alpha/mock-small, last mixed\n\
         bad key: 401 AuthenticationError authentication_error\n\
         unknown model: 404 NotFoundError not_found_error\n\
         rate limited: 429 RateLimitError retry-after 30\n"
    )
}

#[tokio::test]
async fn the_official_anthropic_python_client_works_through_a_pass_through_route() {
    let h = Harness::start_with(Config::anthropic, &[]).await;
    let out = anthropic_client(&h, "claude/claude-opus", "claude/claude-haiku").await;
    // The upstream counts the prompt: the mock's 5 tokens.
    assert_eq!(out, anthropic_checks(5));
}

#[tokio::test]
async fn the_official_anthropic_python_client_works_through_a_translated_route() {
    let h = Harness::start_with(Config::anthropic, &[]).await;
    let out = anthropic_client(&h, "alpha/mock-small", "alpha/mock-large").await;
    // No Anthropic upstream to ask: the gateway's own estimate of the 48-byte
    // `messages` (one token per 4 bytes, rounded up).
    assert_eq!(out, anthropic_checks(12));
}

/// Runs `tests/openai_responses.py` on `model`.
async fn openai_responses(h: &Harness, model: &str) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/openai_responses.py");
    let out = tokio::process::Command::new(python())
        .arg(script)
        .arg(format!("{}/v1", h.base))
        .arg(KEY)
        .arg(model)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    stdout
}

#[tokio::test]
async fn the_official_openai_python_client_speaks_responses_through_pass_through_and_translation() {
    let h = Harness::start_with(Config::responses, &[]).await;
    for model in ["codex/gpt-5-codex", "alpha/mock-small"] {
        let out = openai_responses(&h, model).await;
        assert_eq!(
            out,
            "create: Hello from the Switchyard mock | completed | tokens 5+5\n\
             stream: Hello from the Switchyard mock | completed | 5 deltas | last response.completed\n\
             function call: get_weather {'city': 'Paris'} | completed\n\
             function result: tool said: sunny | completed\n\
             unknown model: 404 NotFoundError model_not_found\n",
            "{model}"
        );
    }
}
