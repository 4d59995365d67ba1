//! The official `openai` Python package talks to the gateway and parses its answers.
//!
//! The interpreter comes from `SWITCHYARD_TEST_PYTHON`, or `.venv/bin/python` at the
//! repository root (both set up by `scripts/test.sh`).

use std::path::PathBuf;
use switchyard_test_support::*;

fn python() -> PathBuf {
    if let Ok(p) = std::env::var("SWITCHYARD_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = root.join(".venv/bin/python");
    assert!(
        venv.exists(),
        "the openai Python client is needed: run scripts/test.sh (it creates .venv), or set SWITCHYARD_TEST_PYTHON"
    );
    venv
}

#[tokio::test]
async fn the_official_openai_python_client_parses_streaming_and_non_streaming_answers() {
    let h = Harness::start().await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/openai_client.py");
    let out = tokio::process::Command::new(python())
        .arg(script)
        .arg(format!("{}/v1", h.base))
        .arg(KEY)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert_eq!(
        stdout,
        "non-streaming: Hello from the Switchyard mock | tokens 5+5\nstreaming: Hello from the Switchyard mock | chunks 7\nretrieve: alpha/mock-small owned by alpha\nretrieve unknown: 404 model_not_found\n"
    );
}
