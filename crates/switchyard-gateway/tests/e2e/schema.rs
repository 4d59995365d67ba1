//! The management API against its own OpenAPI document: schemathesis (pinned in
//! `tests/requirements.txt`) generates requests from `GET /api/openapi.json` and checks
//! every answer against it — no 5xx, every status, content type, header and body as
//! documented (the error answers' body included), schema-violating requests refused,
//! no answer without the admin credential — in single calls and in sequences of them
//! (its stateful phase).
//!
//! The gateway has real objects to read and change: the standard providers,
//! connections, combo and keys, a quota pool, and request-log rows from two chat
//! requests. The run is seeded, on one worker and bounded (about 35 s here), so CI
//! generates the same requests each time.
//!
//! The interpreter is the one the Python client tests use (`SWITCHYARD_TEST_PYTHON`, or
//! `.venv/bin/python`; both set up by `scripts/test.sh`).

use crate::python::python;
use switchyard_test_support::*;

/// The standard configuration with a quota pool over `alpha-1` shared by both keys.
fn with_pool(mock_url: &str) -> Config {
    Config::standard(mock_url).quota_pool(
        QuotaPool::new("team", "Team", ["alpha-1"])
            .dimension(Dimension::new("requests", "hourly", 100))
            .allocation(Allocation::new("k1").weight(60))
            .allocation(Allocation::new("ops").weight(40).policy("soft")),
    )
}

/// The seed of the run: the same requests in every run.
const SEED: &str = "22";

/// Test cases per operation and phase: the bound that keeps the run near a minute on
/// a two-core machine.
const MAX_EXAMPLES: &str = "50";

/// Schemathesis's settings beyond the command line: it runs all its checks unless told
/// otherwise, here or for single operations (the command line's `--checks` would
/// override the latter).
const CONFIG: &str = r#"
# `positive_data_acceptance` expects every schema-valid request to succeed, but the API
# validates beyond what a JSON schema says (a connection's provider must exist, a base
# URL must be an absolute `http(s)` URL, a combo's targets must name known models, a
# setting's value must suit its key) and rightly refuses such requests with a
# documented `400`, whose status and body the other checks still hold to the document.
[checks]
positive_data_acceptance.enabled = false

# `503` with `down` (no configured provider can serve, as once the run has deleted or
# disabled the connections) is the health endpoint's documented answer, the one a load
# balancer's probe reads: not a server error.
[[operations]]
include-name = "GET /api/monitoring/health"
checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "503"]
"#;

#[tokio::test]
async fn the_management_api_answers_as_its_openapi_document_says() {
    let h = Harness::start_with(with_pool, &[]).await;
    for _ in 0..2 {
        assert_eq!(h.chat(chat_body("fast", false)).await.status(), 200);
    }
    eventually("both requests are logged", || async {
        h.admin_json("/api/logs").await.as_array().map(Vec::len) == Some(2)
    })
    .await;
    // Reports and hypothesis's example database would land in the working directory.
    let scratch = tempfile::tempdir().unwrap();
    let config = scratch.path().join("schemathesis.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let out = tokio::process::Command::new(python())
        .current_dir(scratch.path())
        .args([
            "-c",
            "import sys; from schemathesis.cli import schemathesis; sys.exit(schemathesis())",
            "--config-file",
            config.to_str().unwrap(),
            "run",
            &h.url("/api/openapi.json"),
            "--header",
            &format!("Authorization: Bearer {ADMIN}"),
            // The management API and the metrics: the client API under `/v1` takes
            // client keys, not the admin token, and answers errors in the shape of the
            // format asked for.
            "--include-path-regex",
            "^/(api/|metrics$)",
            "--max-examples",
            MAX_EXAMPLES,
            "--seed",
            SEED,
            // One worker: the same order of requests, so the same gateway states.
            "--workers",
            "1",
            "--generation-database",
            "none",
            "--no-color",
        ])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "schemathesis found problems:\n{stdout}\n{stderr}"
    );
    // Every operation of the management API and the metrics was tested.
    let doc = h.admin_json("/api/openapi.json").await;
    let operations: usize = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(path, _)| path.starts_with("/api/") || *path == "/metrics")
        .map(|(_, item)| item.as_object().unwrap().len())
        .sum();
    assert!(
        stdout.contains(&format!("Tested: {operations}\n")),
        "not every operation was tested:\n{stdout}"
    );
}
